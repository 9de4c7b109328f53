/* The traversal of a tree ensemble (gpuops/ops/ml/trees.py's Forest). The forest is flat: node n
 * tests x[feature[n]] <mode> threshold[n] and goes to children[2n] when the test holds,
 * children[2n + 1] otherwise; a leaf's children are itself, so a walk of tree_depth[t] steps ends on
 * tree t's leaf whatever the path's length. A NaN feature goes the true way where missing[n] is set.
 *
 * Rows are taken in blocks that walk the trees one after another (a tree's nodes stay in the cache
 * while the block walks it), GROUP rows in lockstep: their walks are independent chains of loads,
 * which the CPU overlaps, where one walk alone waits on each load in turn. The comparisons are the
 * NumPy code's (float32, or float64 for the _f64 variants), so the leaves are the same.
 *
 * tree_leaves_*: the leaf slot of every (row, tree) into out [rows, n_trees].
 * tree_sum_*: y[row, c] = the sum over the trees of weights[slot, c] (y [rows, n_targets], float64,
 * trees added in order); tree_sum_planned_*: the same, the forest given once as a struct tree_args.
 * All return 0. The rows are split across the pool's threads
 * (pool_threads.h) in blocks of TREE_ROWS; each row's result is the same for any split. */
#include "common.h"
#include "pool_threads.h"

#define TREE_ROWS 256 /* rows walked per tree before the next tree */
#define GROUP 8       /* rows walked in lockstep */

enum { LEQ = 0, LT = 1, GTE = 2, GT = 3, EQ = 4, NEQ = 5 };

#define BRANCH(v, t, m) ((m) == LEQ ? (v) <= (t) : (m) == LT ? (v) < (t) : (m) == GTE ? (v) >= (t) \
                         : (m) == GT ? (v) > (t) : (m) == EQ ? (v) == (t) : (v) != (t))

/* node[j] <- the leaf of row r + j in the tree rooted at root, for j < g (a short last group walks
 * row r again in the spare lanes: the loops keep their constant trip count, which the compiler
 * unrolls with node[] in registers). MODE < 0: each node's own mode, else every node's. */
#define WALK(T, MODE, TRACKS)                                                                       \
    do {                                                                                            \
        const T* xr[GROUP];                                                                         \
        for (int j = 0; j < GROUP; ++j) {                                                           \
            xr[j] = x + (r + (j < g ? j : 0)) * n_features;                                         \
            node[j] = root;                                                                         \
        }                                                                                           \
        for (int32_t d = 0; d < steps; ++d) {                                                       \
            for (int j = 0; j < GROUP; ++j) {                                                       \
                const int32_t n = node[j];                                                          \
                const T v = xr[j][feature[n]], thr = threshold[n];                                  \
                int go = BRANCH(v, thr, (MODE) < 0 ? mode[n] : (MODE));                             \
                if (TRACKS) go |= (v != v) & missing[n];                                            \
                node[j] = children[2 * (int64_t)n + 1 - go];                                        \
            }                                                                                       \
        }                                                                                           \
    } while (0)

/* The common forests (one mode: BRANCH_LEQ for scikit-learn, BRANCH_LT for LightGBM and XGBoost)
 * get loops of their own, the comparison known at compile time. */
#define WALK_ANY(T)                                                                      \
    do {                                                                                 \
        if (same_mode == LEQ && !tracks_missing) WALK(T, LEQ, 0);                        \
        else if (same_mode == LT && !tracks_missing) WALK(T, LT, 0);                     \
        else if (same_mode == LEQ) WALK(T, LEQ, 1);                                      \
        else if (same_mode == LT) WALK(T, LT, 1);                                        \
        else if (tracks_missing) WALK(T, -1, 1);                                         \
        else WALK(T, -1, 0);                                                             \
    } while (0)

/* What every part of a run needs: the forest, the rows, and where the results go. */
typedef struct {
    const void* x;
    const int32_t *feature, *roots, *tree_depth, *leaf_slot, *children;
    const void* threshold;
    const int8_t* mode;
    const uint8_t* missing;
    int64_t rows, n_features, n_trees, same_mode, tracks_missing, n_targets;
    int32_t* out;
    const double* weights;
    double* y;
} Run;

/* for each block of rows in [lo, hi), each tree, each group of rows: its walks, then EMIT(j) per row */
#define EACH_WALK(T, EMIT)                                                                         \
    const T* x = (const T*)a->x;                                                                   \
    const T* threshold = (const T*)a->threshold;                                                   \
    const int32_t *feature = a->feature, *children = a->children, *leaf_slot = a->leaf_slot;       \
    const int8_t* mode = a->mode;                                                                  \
    const uint8_t* missing = a->missing;                                                           \
    const int64_t n_features = a->n_features, n_trees = a->n_trees, same_mode = a->same_mode;      \
    const int64_t tracks_missing = a->tracks_missing, n_targets = a->n_targets;                    \
    int32_t* out = a->out;                                                                         \
    const double* weights = a->weights;                                                            \
    double* y = a->y;                                                                              \
    (void)out, (void)weights, (void)y, (void)n_targets;                                            \
    int64_t lo, hi;                                                                                \
    pool_range(a->rows, TREE_ROWS, part, parts, &lo, &hi);                                         \
    for (int64_t r0 = lo; r0 < hi; r0 += TREE_ROWS) {                                              \
        const int64_t r1 = r0 + TREE_ROWS < hi ? r0 + TREE_ROWS : hi;                              \
        for (int64_t t = 0; t < n_trees; ++t) {                                                    \
            const int32_t root = a->roots[t], steps = a->tree_depth[t];                            \
            for (int64_t r = r0; r < r1; r += GROUP) {                                             \
                const int g = r1 - r < GROUP ? (int)(r1 - r) : GROUP;                              \
                int32_t node[GROUP];                                                               \
                WALK_ANY(T);                                                                       \
                for (int j = 0; j < g; ++j) EMIT(j);                                               \
            }                                                                                      \
        }                                                                                          \
    }

#define LEAF_OUT(j) (out[(r + (j)) * n_trees + t] = leaf_slot[node[j]])
#define LEAF_ADD(j)                                                                                   \
    do {                                                                                              \
        const double* w = weights + (int64_t)leaf_slot[node[j]] * n_targets;                          \
        double* yr = y + (r + (j)) * n_targets;                                                       \
        for (int64_t c = 0; c < n_targets; ++c) yr[c] += w[c];                                        \
    } while (0)

static void leaves_f32_part(void* ctx, int64_t part, int64_t parts) {
    const Run* a = ctx;
    EACH_WALK(float, LEAF_OUT)
}

static void leaves_f64_part(void* ctx, int64_t part, int64_t parts) {
    const Run* a = ctx;
    EACH_WALK(double, LEAF_OUT)
}

static void sum_f32_part(void* ctx, int64_t part, int64_t parts) {
    const Run* a = ctx;
    EACH_WALK(float, LEAF_ADD)
}

static void sum_f64_part(void* ctx, int64_t part, int64_t parts) {
    const Run* a = ctx;
    EACH_WALK(double, LEAF_ADD)
}

/* Parts of at least POOL_MIN_WORK node tests each. */
static void run_parts(pool_fn fn, Run* a) {
    int64_t steps = 0;
    for (int64_t t = 0; t < a->n_trees; ++t) steps += a->tree_depth[t];
    const int64_t per_block = (steps + 1) * TREE_ROWS, blocks = (a->rows + TREE_ROWS - 1) / TREE_ROWS;
    pool_run(fn, a, pool_parts(blocks, (POOL_MIN_WORK + per_block - 1) / per_block));
}

#define RUN(T)                                                                                            \
    Run a = {x, feature, roots, tree_depth, leaf_slot, children, threshold, mode, missing, rows, n_features, \
             n_trees, same_mode, tracks_missing, 0, 0, 0, 0}

int tree_leaves_f32(const float* x, const int32_t* feature, const float* threshold, const int8_t* mode,
                    const int32_t* children, const uint8_t* missing, const int32_t* roots, const int32_t* tree_depth,
                    const int32_t* leaf_slot, int64_t rows, int64_t n_features, int64_t n_trees, int64_t same_mode,
                    int64_t tracks_missing, int32_t* out) {
    RUN(float);
    a.out = out;
    run_parts(leaves_f32_part, &a);
    return 0;
}

int tree_sum_f32(const float* x, const int32_t* feature, const float* threshold, const int8_t* mode,
                 const int32_t* children, const uint8_t* missing, const int32_t* roots, const int32_t* tree_depth,
                 const int32_t* leaf_slot, int64_t rows, int64_t n_features, int64_t n_trees, int64_t same_mode,
                 int64_t tracks_missing, const double* weights, int64_t n_targets, double* y) {
    RUN(float);
    a.weights = weights;
    a.n_targets = n_targets;
    a.y = y;
    memset(y, 0, (size_t)(rows * n_targets) * sizeof(double));
    run_parts(sum_f32_part, &a);
    return 0;
}

int tree_leaves_f64(const double* x, const int32_t* feature, const double* threshold, const int8_t* mode,
                    const int32_t* children, const uint8_t* missing, const int32_t* roots, const int32_t* tree_depth,
                    const int32_t* leaf_slot, int64_t rows, int64_t n_features, int64_t n_trees, int64_t same_mode,
                    int64_t tracks_missing, int32_t* out) {
    RUN(double);
    a.out = out;
    run_parts(leaves_f64_part, &a);
    return 0;
}

int tree_sum_f64(const double* x, const int32_t* feature, const double* threshold, const int8_t* mode,
                 const int32_t* children, const uint8_t* missing, const int32_t* roots, const int32_t* tree_depth,
                 const int32_t* leaf_slot, int64_t rows, int64_t n_features, int64_t n_trees, int64_t same_mode,
                 int64_t tracks_missing, const double* weights, int64_t n_targets, double* y) {
    RUN(double);
    a.weights = weights;
    a.n_targets = n_targets;
    a.y = y;
    memset(y, 0, (size_t)(rows * n_targets) * sizeof(double));
    run_parts(sum_f64_part, &a);
    return 0;
}

/* A forest's operands, set once per forest and comparison type by the caller (gpuops/ops/cpu/ml.py,
 * TreeArgs), so that a call on a few rows converts five arguments rather than eighteen. */
struct tree_args {
    const int32_t *feature, *children, *roots, *tree_depth, *leaf_slot;
    const void* threshold;
    const int8_t* mode;
    const uint8_t* missing;
    int64_t n_trees, same_mode, tracks_missing, n_targets;
    const double* weights;
};

static Run planned_run(const struct tree_args* f, const void* x, int64_t rows, int64_t n_features, double* y) {
    Run a = {x, f->feature, f->roots, f->tree_depth, f->leaf_slot, f->children, f->threshold, f->mode, f->missing,
             rows, n_features, f->n_trees, f->same_mode, f->tracks_missing, f->n_targets, 0, f->weights, y};
    memset(y, 0, (size_t)(rows * f->n_targets) * sizeof(double));
    return a;
}

int tree_sum_planned_f32(const struct tree_args* f, const float* x, int64_t rows, int64_t n_features, double* y) {
    Run a = planned_run(f, x, rows, n_features, y);
    run_parts(sum_f32_part, &a);
    return 0;
}

int tree_sum_planned_f64(const struct tree_args* f, const double* x, int64_t rows, int64_t n_features, double* y) {
    Run a = planned_run(f, x, rows, n_features, y);
    run_parts(sum_f64_part, &a);
    return 0;
}

int tree_ensemble_bind_threads(const void* run, const void* get) { return pool_bind(run, get); }
