// tree_ensemble.cu -- the traversal of a tree ensemble (gpuops/ops/ml/trees.py's Forest).
//  * tree_leaves: one thread per (row, tree) walks from the tree's root to its leaf and writes the
//    leaf's slot (its row of the forest's weight matrix); the caller aggregates the weights.
//  * tree_sum: one thread per row walks every tree in turn and adds the reached leaves' weights
//    (float64, trees in order) into the row's targets: the SUM the ops need most, without the
//    [rows, trees] slots in memory.
//
// The forest is flat: node n's test is `x[feature[n]] <mode> threshold[n]`, its children are
// children[2n] (test true) and children[2n + 1] (false), and a leaf's two children are itself, so the
// walk stops where a node leads to itself (at most `depth` steps). A NaN feature goes the true way
// where missing[n] is set. BRANCH_MEMBER (TreeEnsemble 5's set test) is not handled here: a forest
// with one runs the generic traversal.
#include "common.cuh"

enum NodeMode { LEQ = 0, LT = 1, GTE = 2, GT = 3, EQ = 4, NEQ = 5 };

template <class T>
__device__ __forceinline__ bool branch_true(T v, T t, int mode) {
    switch (mode) {
        case LEQ: return v <= t;
        case LT: return v < t;
        case GTE: return v >= t;
        case GT: return v > t;
        case EQ: return v == t;
        default: return v != t;
    }
}

// x: [rows, n_features] in the comparison type T; out: [rows, n_trees] leaf slots.
template <class T>
__global__ void tree_leaves(const T* __restrict__ x, const int* __restrict__ feature, const T* __restrict__ threshold,
                            const signed char* __restrict__ mode, const int* __restrict__ children,
                            const unsigned char* __restrict__ missing, const int* __restrict__ roots,
                            const int* __restrict__ leaf_slot, int* __restrict__ out, i64 total, int n_trees,
                            int n_features, int depth, int tracks_missing) {
    GRID_STRIDE_LOOP(i, total) {
        const i64 row = i / n_trees;
        const int tree = (int)(i - row * n_trees);
        const T* xr = x + row * (i64)n_features;
        int node = roots[tree];
        for (int d = 0; d < depth; ++d) {
            const int true_child = children[2 * node];
            if (true_child == node) break;  // a leaf
            const T v = xr[feature[node]];
            bool go = branch_true(v, threshold[node], (int)mode[node]);
            if (tracks_missing && v != v && missing[node]) go = true;
            node = go ? true_child : children[2 * node + 1];
        }
        out[i] = leaf_slot[node];
    }
}

// y: [rows, n_targets] float64, each row's sum over the trees of weights[slot, :].
template <class T>
__global__ void tree_sum(const T* __restrict__ x, const int* __restrict__ feature, const T* __restrict__ threshold,
                         const signed char* __restrict__ mode, const int* __restrict__ children,
                         const unsigned char* __restrict__ missing, const int* __restrict__ roots,
                         const int* __restrict__ leaf_slot, const double* __restrict__ weights, double* __restrict__ y,
                         i64 rows, int n_trees, int n_features, int n_targets, int depth, int tracks_missing) {
    GRID_STRIDE_LOOP(row, rows) {
        const T* xr = x + row * (i64)n_features;
        double* yr = y + row * (i64)n_targets;
        for (int c = 0; c < n_targets; ++c) yr[c] = 0.0;
        for (int tree = 0; tree < n_trees; ++tree) {
            int node = roots[tree];
            for (int d = 0; d < depth; ++d) {
                const int true_child = children[2 * node];
                if (true_child == node) break;  // a leaf
                const T v = xr[feature[node]];
                bool go = branch_true(v, threshold[node], (int)mode[node]);
                if (tracks_missing && v != v && missing[node]) go = true;
                node = go ? true_child : children[2 * node + 1];
            }
            const double* w = weights + (i64)leaf_slot[node] * n_targets;
            for (int c = 0; c < n_targets; ++c) yr[c] += w[c];
        }
    }
}
