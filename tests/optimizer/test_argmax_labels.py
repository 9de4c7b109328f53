"""A classifier's label lookup (ArgMax, ArrayFeatureExtractor, Reshape [-1], Cast) -> ArgMax without
keepdims (+ Gather): the same labels, exactly."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops
from gpuops.optimizer import optimize

from .helpers import check, make_model, ops

RNG = np.random.default_rng(3)
P = RNG.standard_normal((7, 4)).astype(np.float32)
P[2, 1] = P[2, 3] = 5.0  # a tie: the first index wins, before and after


def _lookup(classes, to=None, scores=(None, 4), extra_output=None):
    nodes = [helper.make_node("ArgMax", ["P"], ["i"], axis=1),
             helper.make_node("ArrayFeatureExtractor", ["classes", "i"], ["a"], domain="ai.onnx.ml"),
             helper.make_node("Reshape", ["a", "flat"], ["r" if to is not None else "label"])]
    if to is not None:
        nodes.append(helper.make_node("Cast", ["r"], ["label"], to=to))
    outs = ["label"] + ([extra_output] if extra_output else [])
    x = helper.make_tensor_value_info("P", TensorProto.FLOAT, list(scores))
    return make_model(nodes, [x], outs, inits=[("classes", classes), ("flat", np.array([-1], np.int64))],
                      opset=18, opsets={"ai.onnx.ml": 1})


@pytest.mark.parametrize("classes, to, left", [
    (np.arange(4, dtype=np.int32), TensorProto.INT64, {"ArgMax"}),  # skl2onnx's MLPClassifier
    (np.arange(4, dtype=np.int64), None, {"ArgMax"}),
    (np.array([3, 1, 4, 9], np.int64), TensorProto.INT64, {"ArgMax", "Gather"}),
    (np.arange(4, dtype=np.int32), TensorProto.INT32, {"ArgMax", "Gather"}),
    (np.array([10, 20, 30, 40, 50], np.int32), TensorProto.FLOAT, {"ArgMax", "Gather"}),  # more classes than scores
])
def test_lookup_rewritten(classes, to, left):
    opt = check(_lookup(classes, to), {"P": P}, gone=["ArrayFeatureExtractor", "Reshape", "Cast"], level="basic",
                rtol=0, atol=0)
    assert set(ops(opt)) == left
    got = gpuops.InferenceSession(opt, device="cpu").run(None, {"P": P})[0]
    want = gpuops.InferenceSession(_lookup(classes, to), device="cpu", optimize="none").run(None, {"P": P})[0]
    assert got.dtype == want.dtype and got.shape == want.shape == (7,)
    np.testing.assert_array_equal(got, want)


def test_string_labels_without_cast():
    classes = np.array(["a", "b", "c", "d"], dtype=object)
    m = _lookup(classes)
    opt = optimize(m, "basic")
    assert set(ops(opt)) == {"ArgMax", "Gather"}
    got = gpuops.InferenceSession(opt, device="cpu").run(None, {"P": P})[0]
    want = gpuops.InferenceSession(m, device="cpu", optimize="none").run(None, {"P": P})[0]
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("case", ["more scores than classes", "unknown width", "index read elsewhere",
                                  "rounding cast"])
def test_lookup_left_alone(case):
    classes, to, scores, extra = np.arange(4, dtype=np.int32), TensorProto.INT64, (None, 4), None
    if case == "more scores than classes":
        classes = np.arange(3, dtype=np.int32)  # the lookup of index 3 fails at run time: the rewrite must too
    elif case == "unknown width":
        scores = (None, None)
    elif case == "index read elsewhere":
        extra = "i"
    else:
        classes, to = np.array([1, 300, 2, 3], np.int32), TensorProto.UINT8
    opt = optimize(_lookup(classes, to, scores, extra), "basic")
    assert ops(opt)["ArrayFeatureExtractor"] == 1
