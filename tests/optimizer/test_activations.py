"""SiLU / Swish -> QuickGelu, and HardSigmoid / HardSwish written out -> the ops, in the forms
TorchScript, the dynamo exporter, tf2onnx and Paddle2ONNX write them (operands in either order);
then into the Conv's FusedConv epilogue where one comes after a Conv."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from .helpers import check, make_model, ops

rng = np.random.default_rng(0)
F = TensorProto.FLOAT


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _model(nodes, X, inits=(), opset=18):
    return make_model(nodes, {"X": X}, [helper.make_tensor_value_info("Y", F, None)], inits=list(inits), opset=opset)


def _c(name, v):
    return (name, np.array(v, np.float32))


def _edge_values(X):
    X.flat[:6] = [np.inf, -np.inf, 100.0, -100.0, 3.0, -3.0]  # saturation, the HardSwish kinks
    return X


@pytest.mark.parametrize("order", ["x_first", "sigmoid_first"])
def test_silu_becomes_quick_gelu(order):
    X = _edge_values(_f32(2, 5, 7))
    mul = ["X", "s"] if order == "x_first" else ["s", "X"]
    m = _model([helper.make_node("Sigmoid", ["X"], ["s"]), helper.make_node("Mul", mul, ["Y"])], X)
    opt = check(m, {"X": X}, gone=["Sigmoid", "Mul"], present=["QuickGelu"])
    assert [a.f for a in opt.graph.node[0].attribute] == [1.0]


def test_swish_with_beta_becomes_quick_gelu_with_alpha():
    X = _f32(3, 8)
    nodes = [helper.make_node("Mul", ["beta", "X"], ["bx"]), helper.make_node("Sigmoid", ["bx"], ["s"]),
             helper.make_node("Mul", ["X", "s"], ["Y"])]
    opt = check(_model(nodes, X, [_c("beta", 1.702)]), {"X": X}, gone=["Sigmoid", "Mul"], present=["QuickGelu"])
    assert np.isclose(opt.graph.node[0].attribute[0].f, 1.702)


def test_sigmoid_read_elsewhere_or_of_another_value_kept():
    X, Z = _f32(4, 4), _f32(4, 4)
    nodes = [helper.make_node("Sigmoid", ["X"], ["s"]), helper.make_node("Mul", ["X", "s"], ["m"]),
             helper.make_node("Add", ["m", "s"], ["Y"])]
    assert ops(check(_model(nodes, X), {"X": X}, kept=["Sigmoid", "Mul"]))["QuickGelu"] == 0
    m = make_model([helper.make_node("Sigmoid", ["Z"], ["s"]), helper.make_node("Mul", ["X", "s"], ["Y"])],
                   {"X": X, "Z": Z}, [helper.make_tensor_value_info("Y", F, None)])
    assert ops(check(m, {"X": X, "Z": Z}, kept=["Sigmoid", "Mul"]))["QuickGelu"] == 0  # a gate, not SiLU


def test_silu_after_conv_keeps_the_conv_and_float64_is_kept():
    X, W = _f32(1, 3, 8, 8), _f32(8, 3, 3, 3)
    nodes = [helper.make_node("Conv", ["X", "W"], ["c"]), helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Mul", ["c", "s"], ["Y"])]
    check(_model(nodes, X, [("W", W)]), {"X": X}, gone=["Sigmoid", "Mul"], present=["QuickGelu", "Conv"], atol=1e-5)
    X64 = X.astype(np.float64)
    nodes = [helper.make_node("Sigmoid", ["X"], ["s"]), helper.make_node("Mul", ["X", "s"], ["Y"])]
    m = make_model(nodes, {"X": X64}, [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, None)])
    check(m, {"X": X64}, kept=["Sigmoid", "Mul"])


def _relu6_plus_3(x, out, opset):
    """Clip(x + 3, 0, 6) as tf2onnx and Paddle2ONNX write relu6 (bounds as inputs from opset 11)."""
    add = helper.make_node("Add", [x, "three"], [out + "_a"])
    if opset < 11:
        return [add, helper.make_node("Clip", [out + "_a"], [out], min=0.0, max=6.0)]
    return [add, helper.make_node("Clip", [out + "_a", "zero", "six"], [out])]


_CONSTS = [_c("three", 3.0), _c("zero", 0.0), _c("six", 6.0), _c("sixth", 1 / 6)]


@pytest.mark.parametrize("opset", [10, 13, 17])
@pytest.mark.parametrize("form", ["div", "mul"])
def test_hard_sigmoid_written_out(opset, form):
    """tf2onnx's Keras hard_sigmoid: relu6(x + 3) / 6, or * (1/6)."""
    X = _edge_values(_f32(2, 3, 5))
    last = helper.make_node("Div", ["r", "six"], ["Y"]) if form == "div" else \
        helper.make_node("Mul", ["sixth", "r"], ["Y"])
    m = _model(_relu6_plus_3("X", "r", opset) + [last], X, _CONSTS, opset=opset)
    check(m, {"X": X}, gone=["Clip", "Add", "Div", "Mul"], present=["HardSigmoid"])


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("form", ["paddle_div", "tf_mul_after", "tf_mul_before"])
def test_hard_swish_written_out(opset, form):
    """Paddle2ONNX: x * relu6(x + 3) / 6; tf2onnx (Keras hard_swish): the 1/6 factor after or before."""
    X = _edge_values(_f32(2, 3, 5))
    if form == "tf_mul_before":  # x * (relu6(x + 3) * 1/6): the inner part is a HardSigmoid first
        nodes = _relu6_plus_3("X", "r", opset) + [helper.make_node("Mul", ["r", "sixth"], ["h"]),
                                                   helper.make_node("Mul", ["X", "h"], ["Y"])]
    else:
        scale = helper.make_node("Div", ["m", "six"], ["Y"]) if form == "paddle_div" else \
            helper.make_node("Mul", ["m", "sixth"], ["Y"])
        nodes = _relu6_plus_3("X", "r", opset) + [helper.make_node("Mul", ["r", "X"], ["m"]), scale]
    opt = check(_model(nodes, X, _CONSTS, opset=opset), {"X": X}, gone=["Clip", "Add", "Div"])
    want = {"HardSwish": 1} if opset >= 14 else {"HardSigmoid": 1, "Mul": 1}  # no ai.onnx HardSwish before 14
    assert dict(ops(opt)) == want


@pytest.mark.parametrize("opset", [13, 17])
def test_hard_swish_after_conv_is_one_fused_conv(opset):
    """TorchScript below opset 14 writes HardSwish as x * HardSigmoid(x, 1/6, 0.5); Paddle2ONNX as
    x * relu6(x + 3) / 6: after a Conv, both become FusedConv(activation HardSwish)."""
    X, W, B = _f32(1, 3, 8, 8), _f32(6, 3, 3, 3), _f32(6)
    conv = helper.make_node("Conv", ["X", "W", "B"], ["c"], pads=[1, 1, 1, 1])
    torchscript = [conv, helper.make_node("HardSigmoid", ["c"], ["h"], alpha=1 / 6, beta=0.5),
                   helper.make_node("Mul", ["c", "h"], ["Y"])]
    paddle = [conv] + _relu6_plus_3("c", "r", opset) + [helper.make_node("Mul", ["c", "r"], ["m"]),
                                                         helper.make_node("Div", ["m", "six"], ["Y"])]
    for nodes in (torchscript, paddle):
        m = _model(nodes, X, [("W", W), ("B", B)] + _CONSTS, opset=opset)
        opt = check(m, {"X": X}, atol=1e-5)
        assert dict(ops(opt)) == {"FusedConv": 1}
        assert {a.name: a.s for a in opt.graph.node[0].attribute if a.name == "activation"} == \
            {"activation": b"HardSwish"}


def test_other_constants_kept():
    """relu6(x + 2) / 6 and x * HardSigmoid(x) with the default alpha are other functions."""
    X = _f32(3, 4)
    nodes = [helper.make_node("Add", ["X", "two"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["r"]),
             helper.make_node("Div", ["r", "six"], ["Y"])]
    assert ops(check(_model(nodes, X, _CONSTS + [_c("two", 2.0)]), {"X": X}))["HardSigmoid"] == 0
    nodes = [helper.make_node("HardSigmoid", ["X"], ["h"]), helper.make_node("Mul", ["X", "h"], ["Y"])]
    assert ops(check(_model(nodes, X), {"X": X}))["HardSwish"] == 0


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("alpha", [1.0, 1.702])
def test_cpu_quick_gelu_against_onnxruntime(alpha, native, monkeypatch):
    """The cpu override (the native sigmoid times x; without native kernels x / (1 + exp(-alpha x)))
    on saturating, infinite and NaN inputs and a non-contiguous view, against onnxruntime's kernel
    and the generic op."""
    from gpuops.ops.contrib import fusion
    from gpuops.ops.cpu import activation as cpu

    if not native:
        monkeypatch.setattr(cpu, "native_special", lambda *a, **k: None)
    X = _edge_values(_f32(3, 40, 50) * 10)
    X.flat[6:9] = [np.nan, 88.7, -88.8]  # exp(88.8) overflows float32
    node = helper.make_node("QuickGelu", ["X"], ["Y"], domain="com.microsoft", alpha=alpha)
    m = make_model([node], {"X": X}, [helper.make_tensor_value_info("Y", F, None)], opsets={"com.microsoft": 1})
    from .helpers import run_ort
    want = run_ort(m, {"X": X})[0]
    for x, w in ((X, want), (X[:, ::2, 1:], want[:, ::2, 1:])):
        got = cpu.QuickGelu(np, x, alpha=alpha)
        assert got.dtype == np.float32 and got.shape == x.shape
        # float32: an ulp or two of the sigmoid (or of exp and a division) and a product, relative;
        # onnxruntime's logistic is a rational approximation good to ~1e-7, saturating at |alpha x| ~ 18
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, fusion.QuickGelu(np, x, alpha=alpha), rtol=4 * np.finfo(np.float32).eps,
                                   atol=1e-30)
