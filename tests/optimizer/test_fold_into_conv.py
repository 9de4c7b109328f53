"""BatchNormalization folded into Conv / ConvTranspose / Gemm; Mul and Add by constants into Conv."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from gpuops.optimizer import optimize

from .helpers import check, make_model, ops

rng = np.random.default_rng(0)
F = TensorProto.FLOAT


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _bn(x, y, M, prefix="bn"):
    node = helper.make_node("BatchNormalization", [x] + [f"{prefix}_{k}" for k in ("s", "b", "m", "v")], [y],
                            epsilon=1e-3)
    params = [(f"{prefix}_s", _f32(M)), (f"{prefix}_b", _f32(M)), (f"{prefix}_m", _f32(M)),
              (f"{prefix}_v", rng.random(M).astype(np.float32) + 0.5)]
    return node, params


def _out():
    return [helper.make_tensor_value_info("Y", F, None)]


@pytest.mark.parametrize("bias", [True, False])
def test_batchnorm_into_conv(bias):
    X, W, B = _f32(2, 3, 7, 7), _f32(4, 3, 3, 3), _f32(4)
    bn, params = _bn("c", "Y", 4)
    conv = helper.make_node("Conv", ["X", "W", "B"] if bias else ["X", "W"], ["c"], pads=[1, 1, 1, 1])
    inits = [("W", W)] + ([("B", B)] if bias else []) + params
    check(make_model([conv, bn], {"X": X}, _out(), inits=inits), {"X": X}, gone=["BatchNormalization"],
          kept=["Conv"], level="basic", atol=1e-4)


def test_batchnorm_into_grouped_conv_transpose():
    X, W, B = _f32(1, 4, 5, 5), _f32(4, 3, 3, 3), _f32(6)
    bn, params = _bn("c", "Y", 6)
    conv = helper.make_node("ConvTranspose", ["X", "W", "B"], ["c"], group=2, strides=[2, 2])
    m = make_model([conv, bn], {"X": X}, _out(), inits=[("W", W), ("B", B)] + params)
    check(m, {"X": X}, gone=["BatchNormalization"], kept=["ConvTranspose"], level="basic", atol=1e-4)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_batchnorm_into_gemm(trans_b):
    A, Bw, C = _f32(3, 5), _f32(6, 5) if trans_b else _f32(5, 6), _f32(1, 6)
    bn, params = _bn("g", "Y", 6)
    gemm = helper.make_node("Gemm", ["A", "Bw", "C"], ["g"], transB=trans_b, alpha=0.5, beta=2.0)
    m = make_model([gemm, bn], {"A": A}, _out(), inits=[("Bw", Bw), ("C", C)] + params)
    check(m, {"A": A}, gone=["BatchNormalization"], kept=["Gemm"], level="basic", atol=1e-4)


def test_batchnorm_after_non_constant_weights_kept():
    X, W = _f32(1, 3, 5, 5), _f32(4, 3, 1, 1)
    bn, params = _bn("c", "Y", 4)
    m = make_model([helper.make_node("Conv", ["X", "W"], ["c"]), bn], {"X": X, "W": W}, _out(), inits=params)
    check(m, {"X": X, "W": W}, kept=["BatchNormalization"], level="basic")


def test_batchnorm_when_conv_output_is_read_twice_kept():
    X, W = _f32(1, 3, 5, 5), _f32(4, 3, 1, 1)
    bn, params = _bn("c", "y", 4)
    m = make_model([helper.make_node("Conv", ["X", "W"], ["c"]), bn, helper.make_node("Add", ["c", "y"], ["Y"])],
                   {"X": X}, _out(), inits=[("W", W)] + params)
    check(m, {"X": X}, kept=["BatchNormalization"], level="basic")


@pytest.mark.parametrize("rank", [3, 4, 5])
def test_batchnorm_after_concat_becomes_a_fused_depthwise_conv(rank):
    """DenseNet's Concat -> BatchNormalization -> Relu: the BatchNormalization becomes a 1x1 depthwise
    Conv (level "all"), which takes the Relu into a FusedConv: one pass over the tensor."""
    spatial = (5, 6, 3)[:rank - 2]
    X1, X2 = _f32(2, 3, *spatial), _f32(2, 5, *spatial)
    X1.flat[:3] = [np.nan, np.inf, -np.inf]
    bn, params = _bn("c", "b", 8)
    nodes = [helper.make_node("Concat", ["X1", "X2"], ["c"], axis=1), bn, helper.make_node("Relu", ["b"], ["Y"])]
    m = make_model(nodes, {"X1": X1, "X2": X2}, _out(), inits=params)
    opt = check(m, {"X1": X1, "X2": X2}, gone=["BatchNormalization", "Relu"], present=["FusedConv"], atol=1e-5)
    (fused,) = [n for n in opt.graph.node if n.op_type == "FusedConv"]
    assert {a.name: helper.get_attribute_value(a) for a in fused.attribute}["group"] == 8
    check(m, {"X1": X1, "X2": X2}, kept=["BatchNormalization", "Relu"], level="basic")


def test_batchnorm_without_activation_rank2_or_double_stays_exact():
    """A BatchNormalization with nothing after it becomes a plain depthwise Conv; rank 2 (no spatial
    axes: not a Conv) and float64 (FusedConv is float32) keep theirs."""
    X = _f32(2, 4, 3, 3)
    bn, params = _bn("X", "Y", 4)
    check(make_model([bn], {"X": X}, _out(), inits=params), {"X": X}, gone=["BatchNormalization"], present=["Conv"])
    X2 = _f32(3, 4)
    bn, params = _bn("X", "Y", 4)
    check(make_model([bn], {"X": X2}, _out(), inits=params), {"X": X2}, kept=["BatchNormalization"])
    X64 = X.astype(np.float64)
    bn, params = _bn("X", "Y", 4)
    params = [(k, v.astype(np.float64)) for k, v in params]
    out = [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, None)]
    check(make_model([bn], {"X": X64}, out, inits=params), {"X": X64}, kept=["BatchNormalization"])


@pytest.mark.parametrize("shape", [(), (4, 1, 1), (1, 4, 1, 1), (1,)])
def test_mul_add_into_conv(shape):
    X, W = _f32(1, 3, 5, 5), _f32(4, 3, 3, 3)
    mul, add = _f32(*shape), _f32(*shape)
    nodes = [helper.make_node("Conv", ["X", "W"], ["c"]), helper.make_node("Mul", ["mul", "c"], ["m"]),
             helper.make_node("Add", ["m", "add"], ["Y"])]
    m = make_model(nodes, {"X": X}, _out(), inits=[("W", W), ("mul", mul), ("add", add)])
    opt = check(m, {"X": X}, gone=["Mul", "Add"], kept=["Conv"], level="basic", atol=1e-4)
    assert len(opt.graph.node) == 1


def test_mul_by_spatial_constant_kept():
    X, W = _f32(1, 3, 5, 5), _f32(4, 3, 3, 3)
    nodes = [helper.make_node("Conv", ["X", "W"], ["c"]), helper.make_node("Mul", ["c", "k"], ["Y"])]
    m = make_model(nodes, {"X": X}, _out(), inits=[("W", W), ("k", _f32(1, 1, 3, 3))])
    assert ops(optimize(m, "basic"))["Mul"] == 1


def test_mul_add_into_batchnorm():
    """densenet: BatchNormalization (after a Concat) -> Mul -> Add by per-channel constants."""
    X = _f32(1, 4, 5, 5)
    bn, params = _bn("X", "b", 4)
    nodes = [bn, helper.make_node("Mul", ["b", "mul"], ["m"]), helper.make_node("Add", ["add", "m"], ["Y"])]
    m = make_model(nodes, {"X": X}, _out(), inits=params + [("mul", _f32(4, 1, 1)), ("add", _f32(1, 4, 1, 1))])
    opt = check(m, {"X": X}, gone=["Mul", "Add"], kept=["BatchNormalization"], level="basic", atol=1e-4)
    assert len(opt.graph.node) == 1
