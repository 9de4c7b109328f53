"""QDQ groups -> QLinearConv / QLinearMatMul / QLinearAdd / QLinearGlobalAveragePool: the optimized
session gives onnxruntime's results bit for bit (onnxruntime fuses the same groups and is the
reference), and groups that onnxruntime leaves alone stay as they are."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import gpuops
from gpuops.bench.exact_int8 import for_onnxruntime
from gpuops.optimizer import optimize

from .helpers import make_model, ops

F = TensorProto.FLOAT
U8, S8 = np.uint8, np.int8


def _q(nodes, inits, x, scale, zero, tag):
    """x -> QuantizeLinear -> DequantizeLinear, the pair's parameters as initializers; returns the DQ output."""
    inits += [(f"{tag}_s", np.array(scale, np.float32)), (f"{tag}_z", np.array(zero, type(zero)))]
    nodes += [helper.make_node("QuantizeLinear", [x, f"{tag}_s", f"{tag}_z"], [f"{tag}_q"]),
              helper.make_node("DequantizeLinear", [f"{tag}_q", f"{tag}_s", f"{tag}_z"], [f"{tag}_dq"])]
    return f"{tag}_dq"


def _weight(nodes, inits, w, scale, zero, tag, axis=0):
    inits += [(f"{tag}_w", w), (f"{tag}_ws", scale), (f"{tag}_wz", zero)]
    nodes.append(helper.make_node("DequantizeLinear", [f"{tag}_w", f"{tag}_ws", f"{tag}_wz"], [f"{tag}_wdq"],
                                  axis=axis))
    return f"{tag}_wdq"


def _ints(rng, dtype, shape):
    lo, hi = (0, 256) if dtype == U8 else (-128, 128)
    return rng.integers(lo, hi, size=shape).astype(dtype)


def _conv_model(rng, act, wt, per_channel=True, bias="dq", w_zero=False):
    nodes, inits = [], []
    zero = act(0) if act == S8 else act(128)
    x = _q(nodes, inits, "x", 0.05, zero, "in")
    M = 8
    w = _ints(rng, wt, (M, 4, 3, 3))
    shape = (M,) if per_channel else ()
    ws = rng.uniform(0.002, 0.01, size=shape).astype(np.float32)
    wz = (_ints(rng, wt, shape) // 4 if w_zero else np.zeros(shape, wt)) if wt == S8 else np.full(shape, 128, U8)
    inputs = [x, _weight(nodes, inits, w, ws, wz, "c")]
    if bias == "dq":
        b = rng.integers(-3000, 3000, size=(M,)).astype(np.int32)
        inits += [("b", b), ("b_s", (np.float32(0.05) * ws).astype(np.float32) * np.ones(M, np.float32)),
                  ("b_z", np.zeros(M, np.int32))]
        nodes.append(helper.make_node("DequantizeLinear", ["b", "b_s", "b_z"], ["b_dq"], axis=0))
        inputs.append("b_dq")
    elif bias == "float":
        inits.append(("bf", rng.standard_normal(M).astype(np.float32)))
        inputs.append("bf")
    nodes.append(helper.make_node("Conv", inputs, ["conv"], pads=[1, 1, 1, 1]))
    y = _q(nodes, inits, "conv", 0.08, act(3) if act == S8 else act(100), "out")
    return nodes, inits, y



def _session_results(model, feeds):
    got = gpuops.InferenceSession(model, device="cpu").run(None, feeds)
    want = ort.InferenceSession(for_onnxruntime(model).SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    return got, want


def _finish(nodes, inits, y, feeds):
    return make_model(nodes, feeds, [helper.make_tensor_value_info(y, F, None)], inits=inits, opset=13)


@pytest.mark.parametrize("act,wt", [(U8, S8), (U8, U8), (S8, S8)])
@pytest.mark.parametrize("per_channel", [True, False])
@pytest.mark.parametrize("bias", ["dq", None])
def test_conv_fused_and_exact(act, wt, per_channel, bias):
    rng = np.random.default_rng(0)
    nodes, inits, y = _conv_model(rng, act, wt, per_channel, bias)
    feeds = {"x": rng.uniform(-3, 3, size=(1, 4, 9, 9)).astype(np.float32)}
    model = _finish(nodes, inits, y, feeds)
    opt = optimize(model, "all", device="cpu")
    assert ops(opt)["QLinearConv"] == 1 and not ops(opt)["Conv"]
    got, want = _session_results(model, feeds)
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("act,wt,bias", [(S8, U8, "dq"), (U8, S8, "float")])
def test_conv_groups_onnxruntime_leaves_stay(act, wt, bias):
    """int8 activations with uint8 weights, and a float bias: not fused (nor by onnxruntime)."""
    rng = np.random.default_rng(1)
    nodes, inits, y = _conv_model(rng, act, wt, True, bias)
    feeds = {"x": rng.uniform(-3, 3, size=(1, 4, 9, 9)).astype(np.float32)}
    model = _finish(nodes, inits, y, feeds)
    assert ops(optimize(model, "all", device="cpu"))["Conv"] == 1
    got, want = _session_results(model, feeds)
    np.testing.assert_allclose(got[0], want[0], atol=0.2)  # float conv: within a step


def test_conv_output_read_elsewhere_stays():
    rng = np.random.default_rng(2)
    nodes, inits, y = _conv_model(rng, U8, S8)
    nodes.append(helper.make_node("Relu", ["conv"], ["r"]))
    feeds = {"x": rng.uniform(-3, 3, size=(1, 4, 9, 9)).astype(np.float32)}
    model = make_model(nodes, feeds, [helper.make_tensor_value_info(n, F, None) for n in (y, "r")], inits=inits,
                       opset=13)
    assert ops(optimize(model, "all", device="cpu"))["Conv"] == 1
    assert ops(optimize(model, "basic", device="cpu"))["QLinearConv"] == 0


@pytest.mark.parametrize("act", [U8, S8])
def test_add_and_global_pool_fused_and_exact(act):
    rng = np.random.default_rng(3)
    nodes, inits = [], []
    z = (lambda v: act(v)) if act == U8 else (lambda v: act(v - 128))
    a = _q(nodes, inits, "a", 0.03, z(120), "a")
    b = _q(nodes, inits, "b", 0.05, z(130), "b")
    nodes.append(helper.make_node("Add", [a, b], ["s"]))
    s = _q(nodes, inits, "s", 0.07, z(110), "s")
    nodes.append(helper.make_node("GlobalAveragePool", [s], ["p"]))
    y = _q(nodes, inits, "p", 0.02, z(125), "p")
    feeds = {"a": rng.uniform(-3, 3, size=(1, 6, 5, 5)).astype(np.float32),
             "b": rng.uniform(-4, 4, size=(1, 6, 5, 5)).astype(np.float32)}
    model = _finish(nodes, inits, y, feeds)
    have = ops(optimize(model, "all", device="cpu"))
    assert have["QLinearAdd"] == 1 and have["QLinearGlobalAveragePool"] == 1 and not have["Add"]
    got, want = _session_results(model, feeds)
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("act,wt", [(U8, S8), (U8, U8), (S8, S8)])
def test_matmul_fused_and_exact(act, wt):
    rng = np.random.default_rng(4)
    nodes, inits = [], []
    a = _q(nodes, inits, "x", 0.04, act(0) if act == S8 else act(128), "x")
    w = _weight(nodes, inits, _ints(rng, wt, (16, 24)), np.array(0.01, np.float32),
                np.array(0 if wt == S8 else 128, wt), "m")
    nodes.append(helper.make_node("MatMul", [a, w], ["mm"]))
    y = _q(nodes, inits, "mm", 0.1, act(5) if act == S8 else act(120), "y")
    feeds = {"x": rng.uniform(-5, 5, size=(2, 3, 16)).astype(np.float32)}
    model = _finish(nodes, inits, y, feeds)
    have = ops(optimize(model, "all", device="cpu"))
    assert have["QLinearMatMul"] == 1 and not have["MatMul"]
    got, want = _session_results(model, feeds)
    np.testing.assert_array_equal(got[0], want[0])


def test_corpus_qdq_model_matches_onnxruntime():
    from gpuops.bench import corpus

    entry = next(e for e in corpus.load_manifest() if e["name"] == "resnet_small_qdq")
    path = corpus.model_path(entry)
    model = onnx.load(str(path))
    opt = optimize(model, "all", device="cpu")
    have = ops(opt)
    assert have["QLinearConv"] == 20 and have["QLinearAdd"] == 8 and not have["Conv"]
    onnx.checker.check_model(opt)
    for seed in range(3):
        feeds = corpus.make_feeds(entry["feeds"], np.random.default_rng(seed))
        got, want = _session_results(model, feeds)
        np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("act,wt", [(U8, S8), (S8, S8)])
@pytest.mark.parametrize("quantized_out", [True, False])
@pytest.mark.parametrize("trans_b,per_column", [(1, True), (0, True), (1, False)])
def test_gemm_fused_and_exact(act, wt, quantized_out, trans_b, per_column):
    rng = np.random.default_rng(5)
    nodes, inits = [], []
    a = _q(nodes, inits, "x", 0.04, act(0) if act == S8 else act(128), "x")
    K, N = 16, 10
    shape = (N,) if per_column else ()
    w = _weight(nodes, inits, _ints(rng, wt, (N, K) if trans_b else (K, N)),
                rng.uniform(0.002, 0.01, size=shape).astype(np.float32), np.zeros(shape, wt), "g",
                axis=0 if trans_b else 1)
    inits += [("gb", rng.integers(-2000, 2000, size=(N,)).astype(np.int32)), ("gb_s", np.array(0.0002, np.float32)),
              ("gb_z", np.array(0, np.int32))]
    nodes += [helper.make_node("DequantizeLinear", ["gb", "gb_s", "gb_z"], ["gb_dq"]),
              helper.make_node("Gemm", [a, w, "gb_dq"], ["g"], transB=trans_b)]
    y = _q(nodes, inits, "g", 0.1, act(5) if act == S8 else act(120), "y") if quantized_out else "g"
    feeds = {"x": rng.uniform(-5, 5, size=(3, K)).astype(np.float32)}
    model = _finish(nodes, inits, y, feeds)
    have = ops(optimize(model, "all", device="cpu"))
    assert have["QGemm"] == 1 and not have["Gemm"]
    got, want = _session_results(model, feeds)
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("op,attrs,extra", [("MaxPool", dict(kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2]), []),
                                            ("Flatten", dict(axis=1), []), ("Transpose", dict(perm=[0, 2, 3, 1]), []),
                                            ("Reshape", {}, [("shape", np.array([1, -1], np.int64))])])
@pytest.mark.parametrize("same", [True, False])
def test_pair_dropped_around_data_movement(op, attrs, extra, same):
    rng = np.random.default_rng(6)
    nodes, inits = [], list(extra)
    x = _q(nodes, inits, "x", 0.05, U8(128), "x")
    nodes.append(helper.make_node(op, [x] + [n for n, _ in extra], ["m"], **attrs))
    if same:  # the same scale and zero point (other initializers of the same values)
        inits += [("m_s", np.array(0.05, np.float32)), ("m_z", np.array(128, U8))]
        nodes += [helper.make_node("QuantizeLinear", ["m", "m_s", "m_z"], ["m_q"]),
                  helper.make_node("DequantizeLinear", ["m_q", "m_s", "m_z"], ["m_dq"])]
        y = "m_dq"
    else:
        y = _q(nodes, inits, "m", 0.06, U8(128), "m")
    feeds = {"x": rng.uniform(-6, 6, size=(1, 3, 7, 7)).astype(np.float32)}
    model = _finish(nodes, inits, y, feeds)
    have = ops(optimize(model, "all", device="cpu"))
    assert have["QuantizeLinear"] == (1 if same else 2)
    got, want = _session_results(model, feeds)
    np.testing.assert_array_equal(got[0], want[0])
