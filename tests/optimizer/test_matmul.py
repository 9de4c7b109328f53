"""MatMul + Add -> Gemm, and Transposes folded into Gemm / FusedMatMul."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from gpuops.optimizer import optimize

from .helpers import check, make_model, ops

rng = np.random.default_rng(0)
F = TensorProto.FLOAT


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _out():
    return [helper.make_tensor_value_info("Y", F, None)]


@pytest.mark.parametrize("cshape", [(5,), (1, 5), (4, 5), (4, 1), ()])
def test_matmul_add_to_gemm(cshape):
    A, B, C = _f32(4, 3), _f32(3, 5), _f32(*cshape)
    nodes = [helper.make_node("MatMul", ["A", "B"], ["p"]), helper.make_node("Add", ["C", "p"], ["Y"])]
    m = make_model(nodes, {"A": A, "C": C}, _out(), inits=[("B", B)])
    check(m, {"A": A, "C": C}, gone=["MatMul", "Add"], present=["Gemm"], level="basic")


def test_batched_matmul_add_kept():
    A, B, C = _f32(2, 4, 3), _f32(3, 5), _f32(5)
    nodes = [helper.make_node("MatMul", ["A", "B"], ["p"]), helper.make_node("Add", ["p", "C"], ["Y"])]
    m = make_model(nodes, {"A": A}, _out(), inits=[("B", B), ("C", C)])
    check(m, {"A": A}, kept=["MatMul", "Add"])


def test_widening_add_kept():
    A, B, C = _f32(4, 3), _f32(3, 5), _f32(2, 4, 5)
    nodes = [helper.make_node("MatMul", ["A", "B"], ["p"]), helper.make_node("Add", ["p", "C"], ["Y"])]
    m = make_model(nodes, {"A": A, "C": C}, _out(), inits=[("B", B)])
    check(m, {"A": A, "C": C}, kept=["MatMul", "Add"])


def test_transposes_into_gemm():
    A, B, C = _f32(3, 4), _f32(5, 3), _f32(5)
    nodes = [helper.make_node("Transpose", ["A"], ["At"]), helper.make_node("Transpose", ["B"], ["Bt"], perm=[1, 0]),
             helper.make_node("Gemm", ["At", "Bt", "C"], ["Y"], transB=0)]
    m = make_model(nodes, {"A": A, "B": B}, _out(), inits=[("C", C)])
    opt = check(m, {"A": A, "B": B}, gone=["Transpose"], kept=["Gemm"], level="basic")
    attrs = {a.name: a.i for a in opt.graph.node[0].attribute}
    assert attrs == {"transA": 1, "transB": 1}


def test_transposes_into_fused_matmul():
    """Batched: a Transpose of the last two axes (as attention's K^T) -> com.microsoft FusedMatMul."""
    Q, K = _f32(2, 3, 4, 8), _f32(2, 3, 4, 8)
    nodes = [helper.make_node("Transpose", ["K"], ["Kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["Q", "Kt"], ["Y"])]
    m = make_model(nodes, {"Q": Q, "K": K}, _out())
    check(m, {"Q": Q, "K": K}, gone=["Transpose", "MatMul"], present=["FusedMatMul"])
    assert ops(optimize(m, "basic"))["Transpose"] == 1


def test_other_transposes_kept():
    Q, K = _f32(2, 4, 3, 8), _f32(2, 3, 8, 4)
    nodes = [helper.make_node("Transpose", ["Q"], ["Qt"], perm=[0, 2, 1, 3]),
             helper.make_node("MatMul", ["Qt", "K"], ["Y"])]
    m = make_model(nodes, {"Q": Q, "K": K}, _out())
    check(m, {"Q": Q, "K": K}, kept=["Transpose", "MatMul"])


@pytest.mark.parametrize("act,attrs", [("Relu", {}), ("LeakyRelu", {"alpha": 0.3}), ("Sigmoid", {}), ("Tanh", {}),
                                       ("HardSigmoid", {"alpha": 0.3, "beta": 0.4})])
def test_gemm_activation_fused(act, attrs):
    A, B, C = _f32(4, 3), _f32(5, 3), _f32(5)
    nodes = [helper.make_node("Gemm", ["A", "B", "C"], ["g"], transB=1), helper.make_node(act, ["g"], ["Y"], **attrs)]
    m = make_model(nodes, {"A": A}, _out(), inits=[("B", B), ("C", C)])
    opt = check(m, {"A": A}, gone=["Gemm", act], present=["FusedGemm"])
    assert len(opt.graph.node) == 1
    assert ops(optimize(m, "basic")) == {"Gemm": 1, act: 1}


@pytest.mark.parametrize("c_shape", [(), (6,), (1, 1, 6)])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_scale_mul_folds_into_matmul(c_shape, bias):
    """ConvNeXt's layer scale: gamma * (x W + b), channels last -> x (W gamma) + b gamma."""
    r = np.random.default_rng(1)
    X = r.standard_normal((2, 3, 4, 5)).astype(np.float32)
    inits = [("W", r.standard_normal((5, 6)).astype(np.float32)), ("g", r.standard_normal(c_shape).astype(np.float32)),
             ("b", r.standard_normal(6).astype(np.float32))]
    nodes = [helper.make_node("MatMul", ["X", "W"], ["m"])]
    if bias:
        nodes.append(helper.make_node("Add", ["b", "m"], ["a"]))
    nodes.append(helper.make_node("Mul", ["g", "a" if bias else "m"], ["Y"]))
    m = make_model(nodes, {"X": X}, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits=inits)
    opt = check(m, {"X": X}, gone=["Mul"], level="basic", atol=1e-5)
    assert dict(ops(opt)) == ({"MatMul": 1, "Add": 1} if bias else {"MatMul": 1})


def test_mul_that_widens_or_varies_by_row_is_kept():
    r = np.random.default_rng(2)
    X = r.standard_normal((3, 5)).astype(np.float32)
    for g in (r.standard_normal((3, 1)).astype(np.float32), r.standard_normal((2, 3, 6)).astype(np.float32)):
        nodes = [helper.make_node("MatMul", ["X", "W"], ["m"]), helper.make_node("Mul", ["m", "g"], ["Y"])]
        m = make_model(nodes, {"X": X}, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                       inits=[("W", r.standard_normal((5, 6)).astype(np.float32)), ("g", g)])
        check(m, {"X": X}, kept=["Mul"], level="basic", atol=1e-5)
