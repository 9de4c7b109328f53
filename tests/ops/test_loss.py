"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss against onnxruntime."""

import numpy as np
import pytest
from onnx import helper

from tests.ops.common import assert_node_matches_ort

RNG = np.random.default_rng(0)


def _check(node, feeds):
    """Compare with onnxruntime (opset 13), more loosely for float16 scores."""
    tol = 2e-3 if feeds["x"].dtype == np.float16 else 1e-5
    return assert_node_matches_ort(node, feeds, opset=13, rtol=tol, atol=tol)


def case(shape, dtype=np.float32, label_dtype=np.int64, ignore=None):
    N, C, *rest = shape
    x = RNG.normal(size=shape).astype(dtype)
    t = RNG.integers(0, C, size=(N, *rest)).astype(label_dtype)
    if ignore is not None:
        t.reshape(-1)[::3] = ignore
    return x, t


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape", [(4, 5), (3, 4, 6), (2, 3, 2, 4)])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, -1, 2])
def test_softmax_cross_entropy(reduction, shape, weighted, ignore):
    x, t = case(shape, ignore=ignore)
    feeds = {"x": x, "t": t}
    names = ["x", "t"]
    if weighted:
        feeds["w"] = RNG.uniform(0.2, 2, size=(shape[1],)).astype(np.float32)
        names.append("w")
    attrs = {"reduction": reduction} if ignore is None else {"reduction": reduction, "ignore_index": ignore}
    _check(helper.make_node("SoftmaxCrossEntropyLoss", names, ["loss", "log_prob"], **attrs), feeds)
    _check(helper.make_node("NegativeLogLikelihoodLoss", names, ["loss"], **attrs), feeds)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_loss_dtypes_and_int32_labels(dtype):
    x, t = case((5, 3, 2), dtype=dtype, label_dtype=np.int32)
    _check(helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["loss", "log_prob"]), {"x": x, "t": t})
    _check(helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["loss"], reduction="sum"), {"x": x, "t": t})


def test_softmax_cross_entropy_loss_only_output_is_stable_for_large_scores():
    x = np.array([[1000.0, 0.0, -1000.0], [5.0, 5.0, 5.0]], np.float32)
    t = np.array([2, 1], np.int64)
    loss, = _check(helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["loss"], reduction="none"),
                   {"x": x, "t": t})
    np.testing.assert_allclose(loss, [2000.0, np.log(3.0)], rtol=1e-6)
