"""Tree ensembles on CUDA: the traversal is a kernel (``cuda_kernels/tree_ensemble.cu``), one thread
per (row, tree); the leaves' weights are then summed as in the generic op
(:mod:`gpuops.ops.ml.trees`). A forest with BRANCH_MEMBER nodes, or inputs not on the device, take
the generic traversal."""

from __future__ import annotations

import numpy as np

from ...registry import op
from ..ml import legacy_trees, trees
from ..ml._common import ML
from ._launch import contiguous, i32, i64, launch, on_device

_CT = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}


def leaves(xp, forest: trees.Forest, X):
    """[N, F] -> [N, trees] leaf slots, by the kernel."""
    if not on_device(X) or forest.members is not None:
        return trees.leaves(xp, forest, X)
    d = forest.on(xp)
    cdt = np.dtype(np.float64 if X.dtype == np.float64 or forest.threshold.dtype == np.float64 else np.float32)
    thr = f"threshold_{cdt.name}"
    if thr not in d:  # the kernel's operand types, made once per forest, device and comparison type
        d["missing_u1"] = d["missing"].astype(np.uint8)
        d[thr] = d["threshold"].astype(cdt)
    N, F, T = int(X.shape[0]), int(X.shape[1]), int(forest.roots.size)
    out = xp.empty((N, T), dtype=np.int32)
    if N * T:
        launch("tree_ensemble.cu", f"tree_leaves<{_CT[cdt]}>", X, N * T,
               (contiguous(xp, X.astype(cdt)), d["feature"], d[thr], d["mode"], d["children"], d["missing_u1"],
                d["roots"], d["leaf_slot"], out, i64(N * T), i32(T), i32(F), i32(forest.depth),
                i32(1 if forest.missing.any() else 0)))
    return out


op("TreeEnsemble", domain=ML, since=5, device="cuda", prepare=trees._prepare_v5)(trees._tree_ensemble_v5(walk=leaves))
for _v in (1, 3):
    op("TreeEnsembleClassifier", domain=ML, since=_v, device="cuda", prepare=legacy_trees._prepare_classifier)(
        legacy_trees._tree_classifier(_v, walk=leaves))
    op("TreeEnsembleRegressor", domain=ML, since=_v, device="cuda", prepare=legacy_trees._prepare_regressor)(
        legacy_trees._tree_regressor(_v, walk=leaves))
