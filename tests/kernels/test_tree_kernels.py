"""The tree traversal kernel (tree_ensemble.cu via gpuops/ops/cuda/ml.py) against the generic
traversal of gpuops/ops/ml/trees.py: the same leaf for every row and tree, exactly (both compare
the same values in the same type)."""

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

from gpuops.ops.cuda import ml as cuda_ml
from gpuops.ops.ml import legacy_trees, trees

from tests.ml.test_ops import legacy_attrs

RNG = np.random.default_rng(7)
MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")


def _plan_attrs(attrs):
    """Attributes as the plan hands them to an op: tensors as NumPy arrays."""
    return {k: numpy_helper.to_array(v) if isinstance(v, TensorProto) else v for k, v in attrs.items()}


def _rows(n, f, dtype):
    x = RNG.normal(size=(n, f)).astype(dtype)
    x[::5, 0] = np.nan
    x[1::4, 1] = np.round(x[1::4, 1])  # equality tests see equal values too
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("modes", [MODES[:1], MODES])
def test_leaves_match_the_generic_traversal(dev, dtype, modes):
    attrs = legacy_attrs(9, 5, 4, 3, "target", modes=modes,
                         as_tensor=TensorProto.DOUBLE if dtype == np.float64 else None)
    forest = legacy_trees.prepare_regressor({}, _plan_attrs(dict(n_targets=3, **attrs)))
    x = _rows(70, 4, dtype)
    got = dev.get(cuda_ml.leaves(dev.xp, forest, dev.put(x)))
    want = trees.leaves(np, forest, x)
    assert got.dtype == np.int32 and got.shape == (70, 9)
    np.testing.assert_array_equal(got, want)


def test_uneven_trees_and_a_single_leaf_tree(dev):
    """Trees of different depths (the walk stops at each one's leaf) and a tree that is one leaf."""
    attrs = dict(nodes_treeids=[0, 0, 0, 0, 0, 1], nodes_nodeids=[0, 1, 2, 3, 4, 0],
                 nodes_featureids=[0, 1, 0, 0, 0, 0], nodes_values=[0.0, 0.5, 0.0, 0.0, 0.0, 0.0],
                 nodes_modes=["BRANCH_LEQ", "BRANCH_GT", "LEAF", "LEAF", "LEAF", "LEAF"],
                 nodes_truenodeids=[1, 3, 0, 0, 0, 0], nodes_falsenodeids=[2, 4, 0, 0, 0, 0],
                 nodes_missing_value_tracks_true=[1, 0, 0, 0, 0, 0],
                 target_treeids=[0, 0, 0, 1], target_nodeids=[2, 3, 4, 0], target_ids=[0, 0, 0, 0],
                 target_weights=[1.0, 2.0, 3.0, 4.0])
    forest = legacy_trees.prepare_regressor({}, dict(n_targets=1, **attrs))
    x = _rows(33, 2, np.float32)
    np.testing.assert_array_equal(dev.get(cuda_ml.leaves(dev.xp, forest, dev.put(x))), trees.leaves(np, forest, x))


def test_membership_forests_take_the_generic_traversal(dev):
    from tests.ops.test_ml import random_ensemble

    attrs = random_ensemble(n_trees=2, depth=2, n_features=2, n_targets=2, modes=[0, 6])
    forest = trees.prepare_v5({}, _plan_attrs(attrs))
    x = RNG.integers(-2, 3, size=(9, 2)).astype(np.float32)
    np.testing.assert_array_equal(dev.get(cuda_ml.leaves(dev.xp, forest, dev.put(x))), trees.leaves(np, forest, x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_sums_match_the_generic_aggregation(dev, dtype):
    """tree_sum adds the trees in order in float64; NumPy sums the same float64 values in another
    order: within trees x 2**-53 of the sum of the weights' magnitudes."""
    attrs = legacy_attrs(9, 4, 4, 3, "target", modes=MODES, weights_per_leaf=2,
                         as_tensor=TensorProto.DOUBLE if dtype == np.float64 else None)
    forest = legacy_trees.prepare_regressor({}, _plan_attrs(dict(n_targets=3, **attrs)))
    x = _rows(45, 4, dtype)
    got = dev.get(cuda_ml.fused_sum(dev.xp, forest, dev.put(x)))
    want, _ = trees.aggregate(np, forest, trees.leaves(np, forest, x), "sum")
    assert got.dtype == np.float64 and got.shape == (45, 3)
    np.testing.assert_allclose(got, want, rtol=0, atol=9 * 2.0 ** -53 * 9 * np.abs(forest.weights).max())
