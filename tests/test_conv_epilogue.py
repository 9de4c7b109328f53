"""The native conv GEMM (cpu_kernels/gemm.c through gpuops.ops.cpu.native_gemm: bias and a fused Relu /
Clip applied as each tile is stored; tests/test_native_gemm.py tests the kernel itself) behind the 1x1
and blocked im2col convs of the CPU overrides, against the NumPy code it replaces, with weights packed
per call and packed once for a session's step; and the single-pass forms of GlobalAveragePool and
Softmax against onnxruntime and their generic formulas."""

import math

import array_api_compat.numpy as xp
import numpy as np
import pytest

from gpuops import native
from gpuops.ops import pool as generic_pool
from gpuops.ops import softmax as generic_softmax
from gpuops.ops.cpu import conv, pool, softmax

from .ops.common import assert_op_matches_ort

needs_cc = pytest.mark.skipif(native.compiler() is None, reason="no C compiler: native kernels fall back to NumPy")
CLAMPS = [None, (0.0, math.inf), (-0.5, 0.75)]


def _specials(rng, a):
    a.flat[rng.integers(0, a.size, 3)] = [np.nan, np.inf, -np.inf]
    return a


@needs_cc
@pytest.mark.parametrize("seed", range(3))
def test_1x1_and_im2col_convs_with_bias_and_clamp_match_numpy(seed, monkeypatch):
    """conv() with bias and a clamp through the native GEMM (1x1 direct, and the blocked im2col with
    one row per block as well) against conv() with native kernels off; grouped convs, several images,
    maps from one cell to several strips (the kernel taking even the shapes where it does not pay
    here), NaN and inf in the input; packs made for the call, and kept for a step (its ConvWeights)."""
    monkeypatch.setattr(conv.native_gemm, "gemm_pays", lambda M, K, N, threads=None: True)
    rng = np.random.default_rng(10 + seed)
    for case in range(16):
        group = int(rng.integers(1, 4))
        C, M = group * int(rng.integers(1, 6)), group * int(rng.integers(1, 12))
        k = int(rng.choice([1, 1, 3]))
        least = 1 if case % 2 else k  # unpadded, a map smaller than the kernel is refused (as onnxruntime does)
        X = rng.standard_normal((int(rng.integers(1, 3)), C, int(rng.integers(least, 14)), int(rng.integers(least, 40))))
        X = X.astype(np.float32)
        if case % 3 == 0:
            _specials(rng, X)
        W = rng.standard_normal((M, C // group, k, k)).astype(np.float32)
        W.flags.writeable = False  # as model weights are
        B = rng.standard_normal(M).astype(np.float32) if case % 4 else None
        attrs = dict(group=group, pads=[k // 2] * 4 if case % 2 else None, strides=[1 + case % 2] * 2 if k > 1 else None,
                     clamp_to=CLAMPS[case % 3])
        for block_bytes, block_columns in ((conv.BLOCK_BYTES, conv.BLOCK_COLUMNS), (1, 1)):
            monkeypatch.setattr(conv, "BLOCK_BYTES", block_bytes)
            monkeypatch.setattr(conv, "BLOCK_COLUMNS", block_columns)
            kept = conv.prepare_conv({1: W} if B is None else {1: W, 2: B}, attrs)
            got = conv.conv(xp, X, W, B, **attrs)
            with native.disabled():
                ref = conv.conv(xp, X, W, B, **attrs)
            assert got.shape == ref.shape and got.dtype == np.float32
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, equal_nan=True,
                                       err_msg=f"{X.shape} {W.shape} {attrs}")
            for _ in range(2):
                np.testing.assert_array_equal(conv.conv(xp, X, W, B, **attrs, kept=kept), got)


@needs_cc
@pytest.mark.parametrize("size, M, K", [(13, 48, 384), (55, 16, 64), (28, 34, 34)])
def test_fused_conv_1x1_relu_matches_onnxruntime(size, M, K, monkeypatch):
    """SqueezeNet 1x1 FusedConvs + Relu (the native GEMM where gemm_pays says so: rows past a tile
    multiple) and a ShuffleNet-sized one where it does not (np.matmul) against a Conv and a Relu in
    onnxruntime."""
    real = conv._FusedGemm.__call__
    rng = np.random.default_rng(5)
    X = rng.standard_normal((1, K, size, size)).astype(np.float32)
    W = (rng.standard_normal((M, K, 1, 1)) / 7).astype(np.float32)
    B = rng.standard_normal(M).astype(np.float32)
    calls = []
    monkeypatch.setattr(conv._FusedGemm, "__call__", lambda self, *a: calls.append(a) or real(self, *a))
    got = conv.FusedConv(xp, X, W, B, activation="Relu")
    assert len(calls) == conv.native_gemm.gemm_pays(M, K, size * size)
    want = assert_op_matches_ort("Conv", {"X": X, "W": W, "B": B}, rtol=1e-5, atol=1e-5)[0]
    np.testing.assert_allclose(got, np.maximum(want, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pool", [pool, generic_pool], ids=["cpu", "generic"])
@pytest.mark.parametrize("shape", [(1, 1000, 13, 13), (2, 3, 7), (2, 5, 3, 4, 2), (0, 4, 3, 3), (2, 3, 1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_global_average_pool_matches_the_mean(shape, dtype, pool):
    rng = np.random.default_rng(7)
    X = rng.standard_normal(shape).astype(dtype)
    if X.size:
        _specials(rng, X)
    got = pool.GlobalAveragePool(xp, X)
    want = np.mean(X, axis=tuple(range(2, X.ndim)), keepdims=True)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12 if dtype == np.float64 else 1e-3,
                               atol=1e-6, equal_nan=True)


def test_global_average_pool_strided_input_matches_onnxruntime():
    X = np.random.default_rng(8).standard_normal((2, 9, 6, 5)).astype(np.float32)
    assert_op_matches_ort("GlobalAveragePool", {"X": X}, rtol=1e-6, atol=1e-6)
    got = pool.GlobalAveragePool(xp, X[:, ::2, :, ::-1])  # not contiguous
    np.testing.assert_allclose(got, np.mean(X[:, ::2], axis=(2, 3), keepdims=True), rtol=1e-6, atol=1e-6)


def _softmax_formula(x, axes, log):
    x = x.astype(np.float64)
    s = x - x.max(axis=axes, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axes, keepdims=True)) if log else np.exp(s) / np.exp(s).sum(
        axis=axes, keepdims=True)


@pytest.mark.parametrize("normalise", [softmax.normalise, generic_softmax.normalise], ids=["cpu", "generic"])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_softmax_over_trailing_axes_matches_the_formula(log, dtype, normalise):
    """Rows along the trailing axes (opset < 13's flattening, opset 13's last axis) in place, and a
    middle axis through the generic code: all equal to the float64 formula, a NaN row NaN and a row
    with inf as the generic code gives it."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((3, 4, 5, 6)).astype(dtype)
    x[0, 0, 0, 0], x[1, 1, 1, 1] = np.nan, np.inf
    tol = 2e-3 if dtype == np.float16 else 1e-6 if dtype == np.float32 else 1e-12
    for axes in [(1, 2, 3), (2, 3), (3,), (1,), (0, 1, 2, 3)]:
        got = normalise(xp, x, axes, log)
        assert got.dtype == x.dtype and got.shape == x.shape
        np.testing.assert_allclose(got.astype(np.float64), _softmax_formula(x, axes, log), rtol=tol, atol=tol,
                                   equal_nan=True, err_msg=str(axes))


@pytest.mark.parametrize("op_type, opset, axis", [("Softmax", 11, 1), ("Softmax", 13, -1), ("LogSoftmax", 11, 2),
                                                  ("LogSoftmax", 13, 3)])
def test_softmax_matches_onnxruntime(op_type, opset, axis):
    x = np.random.default_rng(11).standard_normal((2, 1000, 1, 3)).astype(np.float32)
    assert_op_matches_ort(op_type, {"input": x}, opset=opset, axis=axis, rtol=1e-5, atol=1e-6)


@needs_cc
@pytest.mark.parametrize("seed", range(3))
def test_native_head_rows_match_numpy(seed):
    """The native row mean (GlobalAveragePool) and Softmax / LogSoftmax rows (cpu_kernels/rows.c)
    against their NumPy code: rows shorter and longer than the vector sums' blocks, a row with a NaN,
    one with +inf, one all -inf, a strided input."""
    rng = np.random.default_rng(40 + seed)
    for n in [1, 3, 16, 17, 64, 169, 1000]:
        x = rng.standard_normal((2, 5, n)).astype(np.float32) * 4
        x[0, 1, n // 2], x[0, 2, 0], x[1, 3] = np.nan, np.inf, -np.inf
        for view in (x, x[:, ::2]):
            X4 = view.reshape(view.shape + (1,))
            got = pool.GlobalAveragePool(xp, X4)
            with native.disabled():
                want = pool.GlobalAveragePool(xp, X4)
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6, equal_nan=True, err_msg=str(n))
            for log in (False, True):
                for axes in [(2,), (1, 2)]:
                    got = softmax.normalise(xp, view, axes, log)
                    with native.disabled():
                        want = softmax.normalise(xp, view, axes, log)
                    assert got.dtype == np.float32 and got.shape == view.shape
                    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6, equal_nan=True,
                                               err_msg=f"{n} {axes} {log}")
                    if axes == (2,) and view is x:  # the row holding a NaN, and the all -inf row
                        assert np.isnan(got[0, 1]).all() and np.isnan(got[1, 3]).all()
