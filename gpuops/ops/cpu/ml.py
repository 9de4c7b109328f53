"""Tree ensembles on the CPU: the traversal is a native kernel (``cpu_kernels/tree_ensemble.c``), a
block of rows walking one tree after another, which also sums the leaves' weights as it goes where
that is all the op needs (SUM and AVERAGE, the classifiers); otherwise the leaves are aggregated as in
the generic op (:mod:`gpuops.ops.ml.trees`). A forest with BRANCH_MEMBER nodes, non-NumPy inputs, or
native kernels off take the generic traversal."""

from __future__ import annotations

import numpy as np

from ... import native
from ...registry import op
from ..ml import legacy_trees, trees
from ..ml._common import ML

_SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}


def _operands(forest: trees.Forest, X, kernel: str):
    """(native function, comparison dtype, the forest's operands) for ``kernel``; None where the generic
    traversal must run."""
    if type(X) is not np.ndarray or forest.members is not None:
        return None
    cdt = np.dtype(np.float64 if X.dtype == np.float64 or forest.threshold.dtype == np.float64 else np.float32)
    fn = native.function(f"{kernel}_{_SUFFIX[cdt]}")
    if fn is None:
        return None
    k = forest.__dict__.setdefault("_native", {})
    if cdt.name not in k:  # the kernel's operand types, made once per forest and comparison type
        k[cdt.name] = (np.ascontiguousarray(forest.threshold, dtype=cdt), forest.missing.astype(np.uint8),
                       forest.modes_present[0] if len(forest.modes_present) == 1 else -1)
    thr, missing, same_mode = k[cdt.name]
    x = np.ascontiguousarray(X, dtype=cdt)
    N, F, T = int(x.shape[0]), int(x.shape[1]), int(forest.roots.size)
    args = (native.ptr(x, cdt), native.ptr(forest.feature, np.int32), native.ptr(thr, cdt),
            native.ptr(forest.mode, np.int8), native.ptr(forest.children, np.int32), native.ptr(missing, np.uint8),
            native.ptr(forest.roots, np.int32), native.ptr(forest.tree_depth, np.int32),
            native.ptr(forest.leaf_slot, np.int32), N, F, T, same_mode, int(forest.missing.any()))
    return fn, args, N, T, x


def leaves(xp, forest: trees.Forest, X):
    """[N, F] -> [N, trees] leaf slots, by the native kernel where it applies."""
    got = _operands(forest, X, "tree_leaves")
    if got is None:
        return trees.leaves(xp, forest, X)
    fn, args, N, T, x = got
    out = np.empty((N, T), dtype=np.int32)
    if N * T:
        native.call(fn, *args, native.address(out))
    return out


def fused_sum(xp, forest: trees.Forest, X):
    """[N, F] -> [N, targets] float64: the reached leaves' weights summed during the walk; None where
    the native kernel does not apply."""
    got = _operands(forest, X, "tree_sum")
    if got is None:
        return None
    fn, args, N, T, x = got
    weights = np.ascontiguousarray(forest.weights, dtype=np.float64)
    y = np.empty((N, forest.n_targets), dtype=np.float64)
    if y.size:
        native.call(fn, *args, native.ptr(weights, np.float64), forest.n_targets, native.address(y))
    return y


leaves.fused_sum = fused_sum


op("TreeEnsemble", domain=ML, since=5, device="cpu", prepare=trees._prepare_v5)(trees._tree_ensemble_v5(walk=leaves))
for _v in (1, 3):
    op("TreeEnsembleClassifier", domain=ML, since=_v, device="cpu", prepare=legacy_trees._prepare_classifier)(
        legacy_trees._tree_classifier(_v, walk=leaves))
    op("TreeEnsembleRegressor", domain=ML, since=_v, device="cpu", prepare=legacy_trees._prepare_regressor)(
        legacy_trees._tree_regressor(_v, walk=leaves))
