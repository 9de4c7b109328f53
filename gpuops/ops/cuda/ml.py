"""Tree ensembles on CUDA: the traversal is a kernel (``cuda_kernels/tree_ensemble.cu``). Where the op
needs the sum of the leaves' weights (SUM, AVERAGE, the classifiers) one thread per row walks every
tree and adds them; otherwise one thread per (row, tree) finds the leaves and the generic op
(:mod:`gpuops.ops.ml.trees`) aggregates them. A forest with BRANCH_MEMBER nodes, or inputs not on
the device, take the generic traversal."""

from __future__ import annotations

import numpy as np

from ...registry import op
from ..ml import legacy_trees, trees
from ..ml._common import ML
from ._launch import contiguous, i32, i64, launch, on_device

_CT = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}


def _operands(xp, forest: trees.Forest, X):
    """The comparison type's name and the forest's operands on the device; None where the generic
    traversal must run."""
    if not on_device(X) or forest.members is not None:
        return None
    d = forest.on(xp)
    cdt = np.dtype(np.float64 if X.dtype == np.float64 or forest.threshold.dtype == np.float64 else np.float32)
    thr = f"threshold_{cdt.name}"
    if thr not in d:  # the kernel's operand types, made once per forest, device and comparison type
        d["missing_u1"] = d["missing"].astype(np.uint8)
        d[thr] = d["threshold"].astype(cdt)
    x = contiguous(xp, X.astype(cdt))
    return _CT[cdt], x, (d["feature"], d[thr], d["mode"], d["children"], d["missing_u1"], d["roots"], d["leaf_slot"])


def leaves(xp, forest: trees.Forest, X):
    """[N, F] -> [N, trees] leaf slots, by the kernel."""
    got = _operands(xp, forest, X)
    if got is None:
        return trees.leaves(xp, forest, X)
    ct, x, ops = got
    N, F, T = int(X.shape[0]), int(X.shape[1]), int(forest.roots.size)
    out = xp.empty((N, T), dtype=np.int32)
    if N * T:
        launch("tree_ensemble.cu", f"tree_leaves<{ct}>", X, N * T,
               (x, *ops, out, i64(N * T), i32(T), i32(F), i32(forest.depth), i32(1 if forest.missing.any() else 0)))
    return out


def fused_sum(xp, forest: trees.Forest, X):
    """[N, F] -> [N, targets] float64: each row's leaves' weights summed by the kernel as it walks."""
    got = _operands(xp, forest, X)
    if got is None:
        return None
    ct, x, ops = got
    N, F, T, C = int(X.shape[0]), int(X.shape[1]), int(forest.roots.size), forest.n_targets
    y = xp.empty((N, C), dtype=np.float64)
    if y.size:
        launch("tree_ensemble.cu", f"tree_sum<{ct}>", X, N,
               (x, *ops, forest.on(xp)["weights"], y, i64(N), i32(T), i32(F), i32(C), i32(forest.depth),
                i32(1 if forest.missing.any() else 0)))
    return y


leaves.fused_sum = fused_sum


op("TreeEnsemble", domain=ML, since=5, device="cuda", prepare=trees.prepare_v5)(trees.tree_ensemble_v5(walk=leaves))
for _v in (1, 3):
    op("TreeEnsembleClassifier", domain=ML, since=_v, device="cuda", prepare=legacy_trees.prepare_classifier)(
        legacy_trees.tree_classifier(_v, walk=leaves))
    op("TreeEnsembleRegressor", domain=ML, since=_v, device="cuda", prepare=legacy_trees.prepare_regressor)(
        legacy_trees.tree_regressor(_v, walk=leaves))
