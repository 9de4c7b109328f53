"""The exact onnxruntime oracle for 8-bit models (gpuops.bench.exact_int8): uint8 weights give the same
model, onnxruntime computes their sums exactly, and the probe says when the int8 weights' do not."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import gpuops
from gpuops.bench.exact_int8 import u8s8_saturates, unsigned_weights

from ..ort_versions import ort_older_than

RNG = np.random.default_rng(3)
A = RNG.integers(200, 256, (4, 64)).astype(np.uint8)  # large products: pairs of them pass int16's range
W = RNG.integers(100, 128, (64, 8)).astype(np.int8)
WZ = np.int8(-3)


def ort_run(model: onnx.ModelProto, feeds: dict) -> list:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def matmul_integer(with_zero_point: bool) -> onnx.ModelProto:
    inputs = ["A", "W"] + (["", "WZ"] if with_zero_point else [])
    inits = [numpy_helper.from_array(W, "W")]
    if with_zero_point:
        inits.append(numpy_helper.from_array(np.array(WZ), "WZ"))
    g = helper.make_graph([helper.make_node("MatMulInteger", inputs, ["Y"])], "g",
                          [helper.make_tensor_value_info("A", T.UINT8, [4, 64])],
                          [helper.make_tensor_value_info("Y", T.INT32, [4, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("with_zero_point", [True, False])
def test_matmul_integer_exact(with_zero_point):
    model = matmul_integer(with_zero_point)
    exact = A.astype(np.int64) @ (W.astype(np.int64) - (WZ if with_zero_point else 0))
    u = unsigned_weights(model)
    assert u is not None
    (w8,) = [t for t in u.graph.initializer if t.name == u.graph.node[0].input[1]]
    assert w8.data_type == T.UINT8 and {t.name for t in u.graph.initializer}.isdisjoint({"W", "WZ"})
    np.testing.assert_array_equal(ort_run(u, {"A": A})[0], exact)
    np.testing.assert_array_equal(gpuops.InferenceSession(u, device="cpu").run(None, {"A": A})[0], exact)
    # onnxruntime's own int8 sums are exact exactly where the probe says they do not saturate
    assert np.array_equal(ort_run(model, {"A": A})[0], exact) == (not u8s8_saturates())


def test_qlinear_conv_and_dequantize_in_a_branch():
    """QLinearConv with per-channel zero points (equal before onnxruntime 1.24, which refuses others), and
    a DequantizeLinear without one inside an If branch that reads the outer graph's initializer: the same
    outputs, in gpuops, from both models."""
    x = RNG.integers(0, 256, (1, 4, 6, 6)).astype(np.uint8)
    w = RNG.integers(-128, 128, (3, 4, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(v, n) for n, v in [
        ("xs", np.float32(0.02)), ("xz", np.uint8(120)), ("w", w), ("ws", np.full(3, 0.01, np.float32)),
        ("wz", np.array([5, 5, 5] if ort_older_than("1.24") else [0, 5, -7], np.int8)),
        ("ys", np.float32(0.5)), ("yz", np.uint8(128)),
        ("s", np.float32(0.1)), ("c", np.array(True))]]
    branch = helper.make_graph([helper.make_node("DequantizeLinear", ["w", "s"], ["d"])], "then", [],
                               [helper.make_tensor_value_info("d", T.FLOAT, [3, 4, 3, 3])])
    zeros = numpy_helper.from_array(np.zeros((3, 4, 3, 3), np.float32))
    other = helper.make_graph([helper.make_node("Constant", [], ["e"], value=zeros)], "else", [],
                              [helper.make_tensor_value_info("e", T.FLOAT, [3, 4, 3, 3])])
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], pads=[1] * 4),
             helper.make_node("If", ["c"], ["z"], then_branch=branch, else_branch=other)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.UINT8, [1, 4, 6, 6])],
                          [helper.make_tensor_value_info("y", T.UINT8, [1, 3, 6, 6]),
                           helper.make_tensor_value_info("z", T.FLOAT, [3, 4, 3, 3])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    u = unsigned_weights(model)
    onnx.checker.check_model(u)
    (then,) = [a.g for a in u.graph.node[1].attribute if a.name == "then_branch"]
    assert u.graph.node[0].input[3] != "w" and then.node[0].input[0] != "w" and len(then.node[0].input) == 3
    assert "w" not in {t.name for t in u.graph.initializer}  # no longer read anywhere
    want = gpuops.InferenceSession(model, device="cpu").run(None, {"x": x})
    for got, ref in zip(gpuops.InferenceSession(u, device="cpu").run(None, {"x": x}), want):
        np.testing.assert_array_equal(got, ref)
    for got, ref in zip(ort_run(u, {"x": x}), want):
        np.testing.assert_array_equal(got, ref)


def test_float_model_unchanged():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2])])
    assert unsigned_weights(helper.make_model(g, ir_version=8)) is None


def test_fed_weight_and_signed_qdq_activations():
    """A fed int8 weight is shifted by the graph; a QDQ model's int8 activations become uint8: the same
    outputs as the model as written, computed exactly."""
    b = helper.make_tensor_value_info("B", T.INT8, [64, 8])
    g = helper.make_graph([helper.make_node("MatMulInteger", ["A", "B"], ["Y"])], "g",
                          [helper.make_tensor_value_info("A", T.UINT8, [4, 64]), b],
                          [helper.make_tensor_value_info("Y", T.INT32, [4, 8])])
    u = unsigned_weights(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8))
    assert [n.op_type for n in u.graph.node] == ["Cast", "Add", "Cast", "MatMulInteger"]
    np.testing.assert_array_equal(ort_run(u, {"A": A, "B": W})[0], A.astype(np.int64) @ W)

    x = RNG.uniform(-3, 3, (1, 4, 6, 6)).astype(np.float32)
    w = RNG.integers(-128, 128, (3, 4, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(v, n) for n, v in [
        ("s", np.float32(0.03)), ("z", np.int8(-5)), ("w", w), ("ws", np.float32(0.01)), ("wz", np.int8(0)),
        ("ys", np.float32(0.2)), ("yz", np.int8(3))]]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["c"], pads=[1] * 4),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "ys", "yz"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [1, 4, 6, 6])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, 3, 6, 6])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    u = unsigned_weights(model)
    assert not [t.name for t in u.graph.initializer if t.data_type == T.INT8]
    exact = gpuops.InferenceSession(model, device="cpu", optimize="none").run(None, {"x": x})[0]
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the graph as written
    plain = ort.InferenceSession(u.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(plain, exact, atol=0.2 + 1e-6)  # float conv: a value at a tie may move a step
    fused = gpuops.InferenceSession(model, device="cpu").run(None, {"x": x})[0]
    np.testing.assert_array_equal(ort_run(u, {"x": x})[0], fused)
