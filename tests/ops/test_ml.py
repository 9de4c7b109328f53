"""ai.onnx.ml ops against onnxruntime: ArrayFeatureExtractor, Binarizer, LabelEncoder, TreeEnsemble."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.ops.common import assert_node_matches_ort, run_node

RNG = np.random.default_rng(0)


def _run(node, feeds, ml_opset=1):
    return run_node(node, feeds, opset=21, opsets={"ai.onnx.ml": ml_opset})


def _check(node, feeds, ml_opset=1, rtol=1e-6):
    """Compare with onnxruntime."""
    return assert_node_matches_ort(node, feeds, opset=21, opsets={"ai.onnx.ml": ml_opset}, rtol=rtol, atol=rtol)


def ml_node(op_type, inputs, outputs, **attrs):
    return helper.make_node(op_type, inputs, outputs, domain="ai.onnx.ml", **attrs)


@pytest.mark.parametrize("x", [RNG.normal(size=(3, 5)).astype(np.float32), np.arange(6, dtype=np.int64),
                               RNG.normal(size=(2, 2, 4)), np.array([["a", "b", "c"]], dtype=object)])
def test_array_feature_extractor(x):
    idx = np.array([2, 0, 2], np.int64) if x.shape[-1] >= 3 else np.array([1], np.int64)
    _check(ml_node("ArrayFeatureExtractor", ["x", "i"], ["y"]), {"x": x, "i": idx})


@pytest.mark.parametrize("x", [RNG.normal(size=(4, 3)).astype(np.float32), np.arange(-3, 4, dtype=np.int64)])
def test_binarizer(x):  # onnxruntime has no int64 Binarizer: compare with the formula
    (y,) = _run(ml_node("Binarizer", ["x"], ["y"], threshold=0.5), {"x": x})
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, (x > 0.5).astype(x.dtype))


@pytest.mark.parametrize("opset", [2, 4])
@pytest.mark.parametrize("keys,values,x", [
    ({"keys_strings": ["a", "b", "c"]}, {"values_int64s": [3, 4, 5], "default_int64": 9},
     np.array([["a", "z"], ["c", "b"]], dtype=object)),
    ({"keys_int64s": [7, -2, 100]}, {"values_strings": ["x", "y", "z"], "default_string": "?"},
     np.array([7, 100, 0, -2], np.int64)),
    ({"keys_floats": [0.5, -1.0, 2.25]}, {"values_floats": [10.0, 20.0, 30.0]},
     np.array([2.25, 0.5, 3.0, -1.0], np.float32)),
    ({"keys_int64s": [5, 1, 3]}, {"values_floats": [0.5, 1.5, 2.5], "default_float": -7.0},
     np.array([[1, 2], [3, 5]], np.int64)),
])
def test_label_encoder(opset, keys, values, x):
    _check(ml_node("LabelEncoder", ["x"], ["y"], **keys, **values), {"x": x}, ml_opset=opset)


def test_label_encoder_nan_key_v4():
    node = ml_node("LabelEncoder", ["x"], ["y"], keys_floats=[1.0, float("nan")], values_int64s=[5, 7])
    _check(node, {"x": np.array([1.0, np.nan, 3.0], np.float32)}, ml_opset=4)


def test_label_encoder_tensors_v4():  # onnxruntime lacks int32 -> int16: compare with the mapping
    node = ml_node("LabelEncoder", ["x"], ["y"], keys_tensor=helper.make_tensor("k", TensorProto.INT32, (3,), [1, 2, 3]),
                   values_tensor=helper.make_tensor("v", TensorProto.INT16, (3,), [-1, -2, -3]),
                   default_tensor=helper.make_tensor("d", TensorProto.INT16, (1,), [99]))
    (y,) = _run(node, {"x": np.array([3, 4, 1, 1], np.int32)}, ml_opset=4)
    assert y.dtype == np.int16
    np.testing.assert_array_equal(y, [-3, 99, -1, -1])


def test_label_encoder_repeated_key_last_wins_v4():
    node = ml_node("LabelEncoder", ["x"], ["y"], keys_int64s=[1, 2, 1], values_strings=["a", "b", "c"])
    (y,) = _run(node, {"x": np.array([1, 2, 3], np.int64)}, ml_opset=4)
    assert y.tolist() == ["c", "b", "_Unused"]


# -- TreeEnsemble --------------------------------------------------------------------------------


def random_ensemble(n_trees, depth, n_features, n_targets, modes):
    """Complete binary trees; interior nodes first, then leaves, per tree."""
    attrs = {k: [] for k in ("nodes_featureids", "nodes_modes", "nodes_splits", "nodes_truenodeids",
                             "nodes_falsenodeids", "nodes_trueleafs", "nodes_falseleafs", "leaf_targetids",
                             "leaf_weights", "tree_roots", "nodes_missing_value_tracks_true")}
    members = []
    for _ in range(n_trees):
        base_node, base_leaf = len(attrs["nodes_featureids"]), len(attrs["leaf_weights"])
        attrs["tree_roots"].append(base_node)
        n_inner = 2 ** depth - 1
        for i in range(n_inner):
            mode = int(RNG.choice(modes))
            attrs["nodes_modes"].append(mode)
            attrs["nodes_featureids"].append(int(RNG.integers(n_features)))
            attrs["nodes_splits"].append(float(np.float32(RNG.normal())))
            attrs["nodes_missing_value_tracks_true"].append(int(RNG.integers(2)))
            if mode == 6:
                members.extend([float(v) for v in RNG.integers(-2, 3, size=2)] + [float("nan")])
            for side, child in (("true", 2 * i + 1), ("false", 2 * i + 2)):
                leaf = child >= n_inner
                attrs[f"nodes_{side}leafs"].append(int(leaf))
                attrs[f"nodes_{side}nodeids"].append(base_leaf + child - n_inner if leaf else base_node + child)
        for _ in range(2 ** depth):
            attrs["leaf_targetids"].append(int(RNG.integers(n_targets)))
            attrs["leaf_weights"].append(float(np.float32(RNG.normal())))
    attrs["nodes_modes"] = helper.make_tensor("m", TensorProto.UINT8, (len(attrs["nodes_modes"]),), attrs["nodes_modes"])
    attrs["nodes_splits"] = helper.make_tensor("s", TensorProto.FLOAT, (len(attrs["nodes_splits"]),), attrs["nodes_splits"])
    attrs["leaf_weights"] = helper.make_tensor("w", TensorProto.FLOAT, (len(attrs["leaf_weights"]),), attrs["leaf_weights"])
    if members:
        attrs["membership_values"] = helper.make_tensor("mv", TensorProto.FLOAT, (len(members),), members)
    return attrs


@pytest.mark.parametrize("aggregate_function", [0, 1, 2, 3])
def test_tree_ensemble(aggregate_function):
    attrs = random_ensemble(n_trees=4, depth=3, n_features=3, n_targets=3, modes=[0, 1, 2, 3])
    x = RNG.normal(size=(20, 3)).astype(np.float32)
    x[::4, 1] = np.nan
    node = ml_node("TreeEnsemble", ["x"], ["y"], n_targets=3, aggregate_function=aggregate_function, **attrs)
    _check(node, {"x": x}, ml_opset=5, rtol=1e-5)


def test_tree_ensemble_post_transforms():
    """The spec numbers SOFTMAX 1 and LOGISTIC 2 (onnxruntime 1.31 swaps them): checked against
    formulas applied to onnxruntime's untransformed scores."""
    attrs = random_ensemble(n_trees=3, depth=2, n_features=2, n_targets=3, modes=[0, 3])
    x = RNG.normal(size=(10, 2)).astype(np.float32)
    (raw,) = _check(ml_node("TreeEnsemble", ["x"], ["y"], n_targets=3, **attrs), {"x": x}, ml_opset=5)
    raw = raw.astype(np.float64)
    softmax = np.exp(raw - raw.max(1, keepdims=True))
    want = {1: softmax / softmax.sum(1, keepdims=True), 2: 1 / (1 + np.exp(-raw))}
    for post, expected in want.items():
        (y,) = _run(ml_node("TreeEnsemble", ["x"], ["y"], n_targets=3, post_transform=post, **attrs), {"x": x},
                    ml_opset=5)
        np.testing.assert_allclose(y, expected, rtol=1e-5)
    # SOFTMAX_ZERO and PROBIT agree with onnxruntime
    for post in (3, 4):
        _check(ml_node("TreeEnsemble", ["x"], ["y"], n_targets=3, post_transform=post, **attrs), {"x": x},
               ml_opset=5, rtol=1e-5)


def test_tree_ensemble_equality_and_membership_modes():
    attrs = random_ensemble(n_trees=3, depth=2, n_features=2, n_targets=2, modes=[4, 5, 6])
    x = RNG.integers(-2, 3, size=(30, 2)).astype(np.float32)
    node = ml_node("TreeEnsemble", ["x"], ["y"], n_targets=2, **attrs)
    _check(node, {"x": x}, ml_opset=5, rtol=1e-5)


def test_tree_ensemble_single_leaf_tree():
    attrs = dict(nodes_featureids=[0], nodes_modes=helper.make_tensor("m", TensorProto.UINT8, (1,), [0]),
                 nodes_splits=helper.make_tensor("s", TensorProto.FLOAT, (1,), [0.0]), nodes_truenodeids=[0],
                 nodes_falsenodeids=[0], nodes_trueleafs=[1], nodes_falseleafs=[1], leaf_targetids=[1],
                 leaf_weights=helper.make_tensor("w", TensorProto.FLOAT, (1,), [2.5]), tree_roots=[0])
    x = RNG.normal(size=(3, 1)).astype(np.float32)
    (y,) = _check(ml_node("TreeEnsemble", ["x"], ["y"], n_targets=2, **attrs), {"x": x}, ml_opset=5)
    np.testing.assert_array_equal(y, np.tile([[0.0, 2.5]], (3, 1)))
