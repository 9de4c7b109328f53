"""MatMul, Gemm, Einsum and Det beyond the onnx node cases: opset-1/6 Gemm with ``broadcast``,
integer and float16 operands, implicit/ellipsis Einsum, batched Det, errors.
Oracle: onnxruntime on a one-node model, or a NumPy formula."""

import numpy as np
import pytest
from onnx import helper

import gpuops

from tests.ops.common import DEVICES, assert_node_matches_ort, run_node

RNG = np.random.default_rng(0)


def _run(node, feeds, opset):
    """The output of ``node`` in gpuops."""
    return run_node(node, feeds, opset=opset)[0]


def _check(node, feeds, opset, rtol=1e-5, atol=1e-5):
    """Compare with onnxruntime on every device."""
    for device in DEVICES:
        assert_node_matches_ort(node, feeds, device, opset=opset, rtol=rtol, atol=atol)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("opset", [1, 6])
@pytest.mark.parametrize("c_shape", [(), (4,), (1, 4), (3, 1)])
def test_gemm_legacy_broadcast(opset, c_shape):
    # onnxruntime has no Gemm before opset 7: the formula is the oracle.
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], broadcast=1, alpha=0.5, beta=2.0, transB=1)
    feeds = {"a": rand(3, 5), "b": rand(4, 5), "c": rand(*c_shape)}
    y = _run(node, feeds, opset)
    want = 0.5 * feeds["a"] @ feeds["b"].T + 2.0 * feeds["c"]
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_gemm_legacy_without_broadcast_needs_full_c():
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1)
    full = {"a": rand(5, 3), "b": rand(5, 4), "c": rand(3, 4)}
    np.testing.assert_allclose(_run(node, full, 6), full["a"].T @ full["b"] + full["c"], rtol=1e-5, atol=1e-5)
    with pytest.raises(gpuops.GpuopsError, match=r"C of shape \(4,\) must equal the output shape \(3, 4\)"):
        _run(node, {**full, "c": rand(4)}, 6)


@pytest.mark.parametrize("transA, transB", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_opset11_optional_c(transA, transB):
    node = helper.make_node("Gemm", ["a", "b"], ["y"], transA=transA, transB=transB, alpha=1.5)
    a = rand(5, 3) if transA else rand(3, 5)
    b = rand(4, 5) if transB else rand(5, 4)
    _check(node, {"a": a, "b": b}, 11)


def test_gemm_opset7_broadcast_c():
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], beta=-1.0)
    _check(node, {"a": rand(3, 5), "b": rand(5, 4), "c": rand(3, 1)}, 7)


def test_gemm_int32_formula():
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"])
    feeds = {k: RNG.integers(-9, 10, s).astype(np.int32) for k, s in (("a", (3, 5)), ("b", (5, 4)), ("c", (4,)))}
    y = _run(node, feeds, 13)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, feeds["a"] @ feeds["b"] + feeds["c"])


def test_gemm_c_not_broadcastable():
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"])
    with pytest.raises(gpuops.GpuopsError, match="unidirectionally broadcastable"):
        _run(node, {"a": rand(3, 5), "b": rand(5, 4), "c": rand(2, 4)}, 13)


@pytest.mark.parametrize("sa, sb", [((3,), (3,)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,))])
def test_matmul_shapes(sa, sb):
    _check(helper.make_node("MatMul", ["a", "b"], ["y"]), {"a": rand(*sa), "b": rand(*sb)}, 13)


def test_matmul_float16():
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    _check(node, {"a": rand(4, 64, dtype=np.float16), "b": rand(64, 3, dtype=np.float16)}, 13,
           rtol=2e-3, atol=2e-2)


def test_matmul_int64_formula():
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    a, b = RNG.integers(-9, 10, (2, 3, 4)), RNG.integers(-9, 10, (4, 2))
    y = _run(node, {"a": a, "b": b}, 13)
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, a @ b)


@pytest.mark.parametrize("equation, shapes", [
    ("ij,jk", [(2, 3), (3, 4)]),                      # implicit output
    ("Ba,aB", [(2, 3), (3, 2)]),                      # upper case sorts first
    ("...ij,...jk->...ik", [(2, 2, 3), (1, 3, 4)]),   # ellipsis with broadcasting
    ("ii->i", [(4, 4)]),                              # diagonal
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),       # three operands
    ("b i j , b j -> b i", [(2, 3, 4), (2, 4)]),      # spaces
])
def test_einsum(equation, shapes):
    node = helper.make_node("Einsum", [f"x{i}" for i in range(len(shapes))], ["y"], equation=equation)
    _check(node, {f"x{i}": rand(*s) for i, s in enumerate(shapes)}, 12)


def test_einsum_int32():
    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,ij->i")
    _check(node, {"a": RNG.integers(-9, 10, (3, 4)).astype(np.int32),
                  "b": RNG.integers(-9, 10, (3, 4)).astype(np.int32)}, 12)


def test_det_batched_formula():
    x = rand(2, 3, 4, 4)
    y = _run(helper.make_node("Det", ["x"], ["y"]), {"x": x}, 11)
    assert y.shape == (2, 3) and y.dtype == np.float32
    np.testing.assert_allclose(y, np.linalg.det(x.astype(np.float64)), rtol=1e-4, atol=1e-5)


def test_det_not_square():
    with pytest.raises(gpuops.GpuopsError, match="square matrices"):
        _run(helper.make_node("Det", ["x"], ["y"]), {"x": rand(3, 4)}, 11)


@pytest.mark.parametrize("transA, transB", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("c_shape", [None, (), (1,), (5,), (1, 5), (4, 1), (4, 5)])
@pytest.mark.parametrize("alpha, beta", [(1.0, 1.0), (-2.0, 0.5), (0.25, 0.0)])
@pytest.mark.parametrize("activation", [None, "Relu"])
def test_cpu_gemm_and_fused_gemm_equal_the_generic_ops(transA, transB, c_shape, alpha, beta, activation):
    """The CPU overrides' float32 path (gpuops/ops/cpu/linalg.py) makes the generic ops' NumPy calls in
    their order: the same bits."""
    from gpuops.ops.contrib import transformer
    from gpuops.ops.cpu import linalg as cpu_linalg
    from gpuops.ops import linalg

    A = rand(*((3, 4) if transA else (4, 3)))
    B = rand(*((5, 3) if transB else (3, 5)))
    C = None if c_shape is None else rand(*c_shape)
    kw = dict(alpha=alpha, beta=beta, transA=transA, transB=transB)
    if activation is None:
        got, want = cpu_linalg.Gemm(np, A, B, C, **kw), linalg.Gemm(np, A, B, C, **kw)
    else:
        got = cpu_linalg.FusedGemm(np, A, B, C, activation=activation, **kw)
        want = transformer.FusedGemm(np, A, B, C, activation=activation, **kw)
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape == (4, 5)
    np.testing.assert_array_equal(got, want)


def test_cpu_gemm_bad_bias_is_the_generic_error():
    from gpuops.ops.cpu import linalg as cpu_linalg

    with pytest.raises(gpuops.NodeError, match="unidirectionally broadcastable"):
        cpu_linalg.Gemm(np, rand(4, 3), rand(3, 5), rand(2, 5))


@pytest.mark.parametrize("rows, cols", [(1, 1), (7, 9), (3, 200)])
def test_cpu_fused_gemm_sigmoid_by_the_native_kernel(rows, cols):
    """FusedGemm's Sigmoid on the CPU (the native kernel, within an ulp) against the generic op, down to
    one output element (openWakeWord's last node)."""
    from gpuops.ops.contrib import transformer
    from gpuops.ops.cpu import linalg as cpu_linalg

    A, B, C = rand(rows, 16), rand(cols, 16), rand(cols)
    got = cpu_linalg.FusedGemm(np, A, B, C, activation="Sigmoid", transB=1)
    want = transformer.FusedGemm(np, A, B, C, activation="Sigmoid", transB=1)
    assert got.dtype == np.float32 and got.shape == want.shape == (rows, cols)
    np.testing.assert_allclose(got, want, rtol=2.4e-7, atol=0)
