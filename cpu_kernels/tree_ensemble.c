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
 * trees added in order). Both return 0. */
#include "common.h"

#define TREE_ROWS 256 /* rows walked per tree before the next tree */
#define GROUP 8       /* rows walked in lockstep */

enum { LEQ = 0, LT = 1, GTE = 2, GT = 3, EQ = 4, NEQ = 5 };

#define BRANCH(v, t, m) ((m) == LEQ ? (v) <= (t) : (m) == LT ? (v) < (t) : (m) == GTE ? (v) >= (t) \
                         : (m) == GT ? (v) > (t) : (m) == EQ ? (v) == (t) : (v) != (t))

/* node[j] <- the leaf of row r + j in the tree rooted at root, for j < g. MODE < 0: each node's own
 * mode, else every node's. */
#define WALK(T, MODE, TRACKS)                                                                       \
    do {                                                                                            \
        for (int j = 0; j < g; ++j) node[j] = root;                                                 \
        for (int32_t d = 0; d < steps; ++d) {                                                       \
            for (int j = 0; j < g; ++j) {                                                           \
                const int32_t n = node[j];                                                          \
                const T v = x[(r + j) * n_features + feature[n]], thr = threshold[n];               \
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

/* for each block of rows, each tree, each group of rows: its walks, then EMIT(j) per row r + j */
#define EACH_WALK(T, EMIT)                                                                \
    for (int64_t r0 = 0; r0 < rows; r0 += TREE_ROWS) {                                   \
        const int64_t r1 = r0 + TREE_ROWS < rows ? r0 + TREE_ROWS : rows;                 \
        for (int64_t t = 0; t < n_trees; ++t) {                                           \
            const int32_t root = roots[t], steps = tree_depth[t];                         \
            for (int64_t r = r0; r < r1; r += GROUP) {                                    \
                const int g = r1 - r < GROUP ? (int)(r1 - r) : GROUP;                     \
                int32_t node[GROUP];                                                      \
                WALK_ANY(T);                                                              \
                for (int j = 0; j < g; ++j) EMIT(j);                                      \
            }                                                                             \
        }                                                                                 \
    }

#define LEAF_OUT(j) (out[(r + (j)) * n_trees + t] = leaf_slot[node[j]])
#define LEAF_ADD(j)                                                                                   \
    do {                                                                                              \
        const double *w = weights + (int64_t)leaf_slot[node[j]] * n_targets;                          \
        double *yr = y + (r + (j)) * n_targets;                                                       \
        for (int64_t c = 0; c < n_targets; ++c) yr[c] += w[c];                                        \
    } while (0)

int tree_leaves_f32(const float* x, const int32_t* feature, const float* threshold, const int8_t* mode,
                    const int32_t* children, const uint8_t* missing, const int32_t* roots, const int32_t* tree_depth,
                    const int32_t* leaf_slot, int64_t rows, int64_t n_features, int64_t n_trees, int64_t same_mode,
                    int64_t tracks_missing, int32_t* out) {
    EACH_WALK(float, LEAF_OUT)
    return 0;
}

int tree_sum_f32(const float* x, const int32_t* feature, const float* threshold, const int8_t* mode,
                 const int32_t* children, const uint8_t* missing, const int32_t* roots, const int32_t* tree_depth,
                 const int32_t* leaf_slot, int64_t rows, int64_t n_features, int64_t n_trees, int64_t same_mode,
                 int64_t tracks_missing, const double* weights, int64_t n_targets, double* y) {
    memset(y, 0, (size_t)(rows * n_targets) * sizeof(double));
    EACH_WALK(float, LEAF_ADD)
    return 0;
}

int tree_leaves_f64(const double* x, const int32_t* feature, const double* threshold, const int8_t* mode,
                    const int32_t* children, const uint8_t* missing, const int32_t* roots, const int32_t* tree_depth,
                    const int32_t* leaf_slot, int64_t rows, int64_t n_features, int64_t n_trees, int64_t same_mode,
                    int64_t tracks_missing, int32_t* out) {
    EACH_WALK(double, LEAF_OUT)
    return 0;
}

int tree_sum_f64(const double* x, const int32_t* feature, const double* threshold, const int8_t* mode,
                 const int32_t* children, const uint8_t* missing, const int32_t* roots, const int32_t* tree_depth,
                 const int32_t* leaf_slot, int64_t rows, int64_t n_features, int64_t n_trees, int64_t same_mode,
                 int64_t tracks_missing, const double* weights, int64_t n_targets, double* y) {
    memset(y, 0, (size_t)(rows * n_targets) * sizeof(double));
    EACH_WALK(double, LEAF_ADD)
    return 0;
}
