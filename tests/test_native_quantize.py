"""The native 8-bit GEMM (cpu_kernels/quantize.c) of MatMulInteger and QLinearMatMul (the CPU overrides,
gpuops/ops/cpu/quantize.py) against the NumPy code it replaces (its oracle): bit-exact over random
shapes, types, zero points and scales, int32 wrapping included, and against onnxruntime in a model
with weights."""

import ctypes
from concurrent.futures import ThreadPoolExecutor

import array_api_compat.numpy as xp
import ml_dtypes
import numpy as np
import pytest
from onnx import helper

import gpuops
from gpuops import native
from gpuops.ops.cpu import quantize

from tests.ops.common import make_model, run_ort

needs_cc = pytest.mark.skipif(native.compiler() is None, reason="no C compiler: native kernels fall back to NumPy")


@pytest.fixture
def counted(monkeypatch):
    """Native GEMM calls (weights packed not included), counted; the int8 GEMM of cpu_kernels/qgemm.c,
    which takes these products first where it can (tests/ops/test_qgemm_native.py), turned off."""
    monkeypatch.setattr(quantize, "_matmul_pack", lambda kept: None)
    count = [0]
    call = native.call

    def counting(fn, *args):
        count[0] += fn.__name__ != "pack_weight_8"
        call(fn, *args)

    monkeypatch.setattr(native, "call", counting)
    return count


@pytest.fixture
def calls(monkeypatch, counted):
    """Native kernel calls, counted; every GEMM shape and weight may take the native path (not only
    those where it wins)."""
    monkeypatch.setattr(quantize, "_NATIVE_ROWS", 10 ** 9)
    monkeypatch.setattr(quantize, "_NATIVE_DEPTH_PER_ROW", 0)
    monkeypatch.setattr(quantize, "_keeps_pack", lambda B, kept: True)
    return counted


def _ints(rng, dtype, shape, extremes=False):
    info = np.iinfo(dtype)
    if extremes:  # only the ends of the range: the largest products
        return rng.choice(np.array([info.min, info.max], dtype), shape)
    return rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)


def _zero_point(rng, dtype, n, kind):
    """None, one zero point (0-d or 1-element), or ``n`` of them."""
    return {0: None, 1: _ints(rng, dtype, ()), 2: _ints(rng, dtype, (1,)), 3: _ints(rng, dtype, (n,))}[kind]


_WEIGHT = {quantize.MatMulInteger: (1, 3), quantize.QLinearMatMul: (3, 5)}  # (B, its zero point)


def _both(f, *args, prepared="auto"):
    """(native result, NumPy result) of op ``f``. A read-only B is taken as a session's weight: the call
    gets what the step would keep (``prepared``, by default a new :class:`QuantWeights`)."""
    if prepared == "auto":
        b, z = _WEIGHT.get(f, (None, None))
        B = None if b is None else args[b]
        prepared = quantize.QuantWeights(B, args[z] if z < len(args) else None) if (
            B is not None and not B.flags.writeable) else None
    kw = {} if prepared is None else {"prepared": prepared}
    with native.disabled():
        ref = f(xp, *args, **kw)
    return f(xp, *args, **kw), ref


def _same(got, ref, what):
    assert got.dtype == ref.dtype and got.shape == ref.shape, what
    np.testing.assert_array_equal(got, ref, err_msg=what)


def _case(rng, case):
    M = int(rng.integers(1, 9)) if case % 3 else int(rng.integers(9, 80))
    K = int(rng.integers(1, 300)) if case % 4 else int(rng.integers(300, 1100))  # beyond float32's exact sums
    N = int(rng.integers(1, 70))
    ta, tb = (np.uint8 if rng.random() < 0.5 else np.int8 for _ in range(2))
    extremes = case % 5 == 0
    A, B = _ints(rng, ta, (M, K), extremes), _ints(rng, tb, (K, N), extremes)
    za = _zero_point(rng, ta, M, int(rng.integers(0, 4)))
    zb = _zero_point(rng, tb, N, int(rng.integers(0, 4)))
    return A, B, za, zb


@needs_cc
@pytest.mark.parametrize("seed", range(4))
def test_matmul_integer_matches_numpy(seed, calls):
    rng = np.random.default_rng(seed)
    for case in range(40):
        A, B, za, zb = _case(rng, case)
        _same(*_both(quantize.MatMulInteger, A, B, za, zb), f"{A.dtype}{A.shape} {B.dtype}{B.shape} {za} {zb}")
    assert calls[0] == 40


_SCALE_TYPES = [(np.float32,) * 3] * 4 + [(np.float16,) * 3, (ml_dtypes.bfloat16,) * 3, (np.float64,) * 3,
                                           (np.float32, np.float16, ml_dtypes.bfloat16)]


def _scale(rng, n, kind, dtype=np.float32):
    """One scale (0-d or 1-element) or ``n`` of them, over several decades."""
    shape = {0: (), 1: (1,), 2: (n,)}[kind]
    return np.asarray(10.0 ** rng.uniform(-4, 0, shape), dtype)


@needs_cc
@pytest.mark.parametrize("seed", range(4))
def test_qlinear_matmul_matches_numpy(seed, calls):
    rng = np.random.default_rng(10 + seed)
    for case in range(40):
        A, B, za, zb = _case(rng, case)
        M, N = A.shape[0], B.shape[1]
        if za is None:
            za = _ints(rng, A.dtype, ())
        if zb is None:
            zb = _ints(rng, B.dtype, ())
        # float16 / bfloat16 scales: opset 21; float64 and mixed types: what the NumPy path accepts
        types = _SCALE_TYPES[case % len(_SCALE_TYPES)]
        a_s, b_s = _scale(rng, M, int(rng.integers(0, 3)), types[0]), _scale(rng, N, int(rng.integers(0, 3)), types[1])
        y_s = _scale(rng, 1, int(rng.integers(0, 2)), types[2])
        y_z = _ints(rng, np.uint8 if rng.random() < 0.5 else np.int8, ())
        got = _both(quantize.QLinearMatMul, A, a_s, za, B, b_s, zb, y_s, y_z)
        _same(*got, f"{A.dtype}{A.shape} {B.dtype}{B.shape} {za} {zb} {a_s} {b_s} {y_s} {y_z}")
    assert calls[0] == 40


@needs_cc
def test_int32_wrapping_and_long_sums(calls):
    """K long enough that the int32 sums wrap (and past the kernel's int32 chunk of 32768 products)."""
    K = 70_000
    for ta, tb, va, vb, za, zb in ((np.uint8, np.uint8, 255, 255, 0, 0), (np.int8, np.int8, -128, -128, 127, 127),
                                   (np.uint8, np.int8, 0, 127, 255, -128), (np.int8, np.uint8, 127, 0, -128, 255)):
        A = np.full((2, K), va, ta)
        B = np.full((K, 3), vb, tb)
        B[::7] = np.iinfo(tb).max  # not all equal
        za, zb = np.array(za, ta), np.array(zb, tb)
        got, ref = _both(quantize.MatMulInteger, A, B, za, zb)
        exact = (A.astype(np.int64) - int(za)) @ (B.astype(np.int64) - int(zb))
        assert np.abs(exact).max() > 2 ** 31
        _same(got, ref, f"{ta} {tb}")
        _same(got, exact.astype(np.int32), "wrapping modulo 2**32")
        s = np.array(1e-9, np.float32)
        _same(*_both(quantize.QLinearMatMul, A, s, za, B, s, zb, s, np.array(3, np.int8)), "requantized")
    assert calls[0] == 8


@needs_cc
def test_requantization_edges(calls):
    """Ties round to even, saturation at both ends, infinite and NaN multipliers (zero or NaN y_scale)."""
    A = np.arange(-8, 8, dtype=np.int8).reshape(1, 16)
    B = np.eye(16, dtype=np.int8) * np.int8(3)
    for y_scale in (2.0, 6.0, 0.01, 1e-30, 0.0, np.nan, np.inf, -0.5):
        for y_z in (np.array(0, np.uint8), np.array(250, np.uint8), np.array(-3, np.int8), np.array(127, np.int8)):
            args = (A, np.array(1.0, np.float32), np.array(0, np.int8), B, np.array(1.0, np.float32),
                    np.array(0, np.int8), np.array(y_scale, np.float32), y_z)
            with np.errstate(all="ignore"):
                _same(*_both(quantize.QLinearMatMul, *args), f"y_scale {y_scale}, y_zero_point {y_z!r}")
    assert calls[0] == 32


@needs_cc
def test_stacked_and_vector_inputs(calls):
    rng = np.random.default_rng(5)
    B = _ints(rng, np.uint8, (37, 5))
    for A, za in ((_ints(rng, np.uint8, (2, 3, 37)), np.array(7, np.uint8)),
                  (_ints(rng, np.uint8, (37,)), np.array([200], np.uint8)),
                  (_ints(rng, np.uint8, (1, 4, 37)), None)):
        _same(*_both(quantize.MatMulInteger, A, B, za, np.array(3, np.uint8)), f"{A.shape}")
        s = np.array(0.01, np.float32)
        _same(*_both(quantize.QLinearMatMul, A, s, za, B, s, np.array(3, np.uint8), s, np.array(9, np.uint8)),
              f"{A.shape}")
    assert calls[0] == 6


@needs_cc
def test_views_and_concurrent_calls(calls):
    """Strided views of A and B (copied for the kernel), and many threads at once on one step's kept
    weight (the kernel keeps no state: ctypes releases the GIL around it; the pack is made once)."""
    rng = np.random.default_rng(7)
    A = _ints(rng, np.int8, (6, 90))[:, ::2]
    B = _ints(rng, np.uint8, (30, 45)).T
    B.flags.writeable = False
    za, zb = np.array(-5, np.int8), _ints(rng, np.uint8, (30,))
    ref = _both(quantize.MatMulInteger, A, B, za, zb)[1]
    kept = quantize.QuantWeights(B, zb)
    with ThreadPoolExecutor(4) as pool:
        for got in pool.map(lambda _: quantize.MatMulInteger(xp, A, B, za, zb, prepared=kept), range(32)):
            _same(got, ref, "threaded")
    assert list(kept._made) == ["pack"]
    assert calls[0] == 33


@needs_cc
def test_numpy_path_where_the_kernel_does_not_apply(calls):
    """Per-row zero points of a stacked A, a stacked B, 16-bit types, a per-row zero point of a 1-D A
    and zero-size inputs still run (through NumPy), with the same results."""
    rng = np.random.default_rng(6)
    cases = [(_ints(rng, np.uint8, (2, 3, 8)), _ints(rng, np.uint8, (8, 4)), _ints(rng, np.uint8, (3,)), None),
             (_ints(rng, np.int8, (3, 8)), _ints(rng, np.int8, (2, 8, 4)), None, None),
             (_ints(rng, np.uint16, (3, 8)), _ints(rng, np.uint8, (8, 4)), None, None),
             (_ints(rng, np.uint8, (8,)), _ints(rng, np.uint8, (8, 4)), _ints(rng, np.uint8, (8,)), None),
             (np.zeros((0, 8), np.uint8), _ints(rng, np.uint8, (8, 4)), None, None),
             (np.zeros((3, 0), np.uint8), np.zeros((0, 4), np.uint8), None, None)]
    for A, B, za, zb in cases:
        _same(*_both(quantize.MatMulInteger, A, B, za, zb), f"{A.dtype}{A.shape} {B.shape}")
    assert calls[0] == 0


@needs_cc
def test_default_choice(counted):
    """By default the kernel takes few rows by a session's weight (its step's prepared data; not small);
    many rows, shallow products and a run-time B (no prepared data) take the NumPy path."""
    rng = np.random.default_rng(12)
    z = np.array(128, np.uint8)
    for (M, K, N), weight, native_path in (((1, 512, 512), True, True), ((16, 512, 512), True, True),
                                           ((17, 512, 512), True, False), ((4, 64, 1024), True, False),
                                           ((40, 1024, 64), True, True), ((1, 512, 512), False, False),
                                           ((1, 128, 128), True, False)):
        A, B = _ints(rng, np.uint8, (M, K)), _ints(rng, np.uint8, (K, N))
        B.flags.writeable = not weight
        before = counted[0]
        _same(*_both(quantize.MatMulInteger, A, B, z, z), f"{M, K, N}")
        assert counted[0] - before == native_path, f"{M, K, N} weight={weight}"


@needs_cc
def test_kernels_write_only_their_outputs():
    """The kernels run into the middle of a sentinel-filled buffer leave the guard zones untouched."""
    rng = np.random.default_rng(8)
    guard = 64
    for M, K, N in ((1, 5, 3), (3, 70, 9), (5, 33, 17)):
        A, B = _ints(rng, np.uint8, (M, K)), _ints(rng, np.int8, (K, N))
        size = 4 + N + -(-N * K // 4)
        buf = np.full(size + 2 * guard, 0x5A5A5A5A, np.int32)
        native.call(native.function("pack_weight_8"), B.ctypes.data, 1, K, N,
                    buf[guard:].ctypes.data)
        assert (buf[:guard] == 0x5A5A5A5A).all() and (buf[guard + size:] == 0x5A5A5A5A).all()
        pack = np.ascontiguousarray(buf[guard:guard + size])
        ref = (A.astype(np.int64) - 3) @ B.astype(np.int64)
        out = np.full(M * N + 2 * guard, -7, np.int32)
        fn = native.function("matmul_integer_u8")
        native.call(fn, pack.ctypes.data, A.ctypes.data, M, None, 3, None, 0, 0, out[guard:].ctypes.data)
        assert (out[:guard] == -7).all() and (out[guard + M * N:] == -7).all()
        np.testing.assert_array_equal(out[guard:guard + M * N].reshape(M, N), ref)
        y = np.full(M * N + 2 * guard, 77, np.uint8)
        fn = native.function("qlinear_matmul_u8")
        native.call(fn, pack.ctypes.data, A.ctypes.data, M, None, 3, None, 0, 0, None, 0.5, None, 0.25, 1.0, 100,
                    y[guard:].ctypes.data)
        assert (y[:guard] == 77).all() and (y[guard + M * N:] == 77).all()
        args = quantize._QLinearArgs(pack.ctypes.data, M, None, 3, None, 0, 0, None, None, 0.5, 0.25, 1.0, 100)
        planned = np.full_like(y, 77)
        native.call(native.function("qlinear_matmul_u8_planned"),
                    ctypes.addressof(args), A.ctypes.data, planned[guard:].ctypes.data)
        np.testing.assert_array_equal(planned, y)  # the same arguments, passed in a struct


@needs_cc
def test_a_weights_plan_is_reused_only_for_the_same_fixed_parameters(counted):
    """QLinearMatMul plans the kernel's arguments once per step's weight, input shape and set of
    read-only scales and zero points; a writeable scale changed in place between calls, other
    parameter objects and other input shapes are planned again: every result matches the NumPy path."""
    rng = np.random.default_rng(13)
    B = _ints(rng, np.uint8, (512, 64))
    s, z = np.array(0.05, np.float32), np.array(128, np.uint8)
    for t in (B, s, z):
        t.flags.writeable = False
    kept = quantize.QuantWeights(B, z)
    changing = np.array(0.1, np.float32)
    A = _ints(rng, np.uint8, (1, 512))
    for value in (0.1, 0.2, 0.025):
        changing[...] = value
        _same(*_both(quantize.QLinearMatMul, A, s, z, B, s, z, changing, z, prepared=kept), f"changed y_scale {value}")
    assert not kept.plans  # a writeable parameter: planned on every call
    for i, value in enumerate((0.1, 0.2, 0.025, 0.2)):
        A = _ints(rng, np.uint8, (1 + i % 2, 512))
        fixed = np.array(value, np.float32)
        fixed.flags.writeable = False
        _same(*_both(quantize.QLinearMatMul, A, s, z, B, fixed, z, s, z, prepared=kept), f"fixed b_scale {value}")
        plan = kept.plans[A.shape, A.dtype]
        _same(*_both(quantize.QLinearMatMul, A, s, z, B, s, z, s, z, prepared=kept), "the kept plan")
        again = kept.plans[A.shape, A.dtype]
        _same(*_both(quantize.QLinearMatMul, A, s, z, B, s, z, s, z, prepared=kept), "the kept plan, reused")
        assert kept.plans[A.shape, A.dtype] is again and again is not plan
    assert counted[0] == 15


@needs_cc
def test_model_with_weights_matches_onnxruntime(counted):
    """QuantizeLinear -> QLinearMatMul (uint8 weight) -> MatMulInteger (int8 weight, per-column zero
    points) in a session: the weights are packed once, at plan time (the steps' prepared data), and
    reused across runs; the results match the NumPy path and onnxruntime."""
    rng = np.random.default_rng(9)
    inits = [("s", np.array(0.05, np.float32)), ("z", np.array(128, np.uint8)),
             ("w", _ints(rng, np.uint8, (256, 192))), ("ws", np.array(0.002, np.float32)),
             ("ys", np.array(0.1, np.float32)), ("yz", np.array(120, np.uint8)),
             ("v", _ints(rng, np.int8, (192, 200))), ("vz", _ints(rng, np.int8, (200,)))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("QLinearMatMul", ["q", "s", "z", "w", "ws", "z", "ys", "yz"], ["h"]),
             helper.make_node("MatMulInteger", ["h", "v", "yz", "vz"], ["y"])]
    x = rng.standard_normal((2, 256)).astype(np.float32) * 3
    model = make_model(nodes, {"x": x}, ["h", "y"], inits=inits, opset=13)
    sess = gpuops.InferenceSession(model, device="cpu")
    packs = [step.prepared._made["pack"] for step in sess.plan.steps if step.op_type != "QuantizeLinear"]
    got = [sess.run(None, {"x": x}) for _ in range(2)]
    kept = [step.prepared._made["pack"] for step in sess.plan.steps if step.op_type != "QuantizeLinear"]
    assert len(kept) == 2 and all(a is b for a, b in zip(kept, packs))
    assert counted[0] == 2 * 3  # each run's QuantizeLinear, QLinearMatMul and MatMulInteger
    with native.disabled():
        ref = sess.run(None, {"x": x})
    want = run_ort(model, {"x": x})
    for g in got:
        for a, b, c in zip(g, ref, want):
            _same(a, b, "native vs NumPy")
            _same(a, c, "native vs onnxruntime")


def test_numpy_path_when_disabled():
    """With native kernels off the ops run their NumPy code (which the tests above take as the oracle)."""
    rng = np.random.default_rng(11)
    A, B = _ints(rng, np.uint8, (1, 600)), _ints(rng, np.uint8, (600, 40))
    with native.disabled():
        assert native.function("matmul_integer_u8") is None
        y = quantize.MatMulInteger(xp, A, B, np.array(3, np.uint8), np.array(200, np.uint8))
    _same(y, ((A.astype(np.int64) - 3) @ (B.astype(np.int64) - 200)).astype(np.int32), "NumPy path")


@needs_cc
@pytest.mark.parametrize("y_type", [np.uint8, np.int8])
def test_quantize_and_dequantize_linear_match_numpy(y_type, counted, monkeypatch):
    """Per-tensor 8-bit QuantizeLinear / DequantizeLinear: bit-exact with the NumPy code, ties to even,
    saturation, NaN to the low end, infinities, strided inputs; other forms keep the NumPy path."""
    monkeypatch.setattr(quantize, "_NATIVE_QUANTIZE_MIN", 1)  # small arrays too (by default NumPy's)
    monkeypatch.setattr(quantize, "_NATIVE_DEQUANTIZE_MIN", 1)
    rng = np.random.default_rng(30)
    for case in range(24):
        scale = np.asarray(10.0 ** rng.uniform(-3, 1), np.float32).reshape((1,) if case % 2 else ())
        x = (rng.standard_normal((3, 37)) * 300 * scale).astype(np.float32)
        x[0, :8] = np.array([0.5, 1.5, 2.5, -0.5, -2.5, np.nan, np.inf, -np.inf], np.float32) * scale
        if case % 3 == 0:
            x = x.T  # a strided view
        zp = None if case % 4 == 0 else _ints(rng, y_type, () if case % 2 else (1,))
        if zp is None and y_type == np.int8:
            zp = np.zeros((), np.int8)  # no zero point means uint8
        q, ref = _both(quantize.QuantizeLinear_13, x, scale, zp)
        _same(q, ref, f"quantize {scale} {zp}")
        _same(*_both(quantize.DequantizeLinear_13, q, scale, zp), f"dequantize {scale} {zp}")
    assert counted[0] == 48
    blocked = rng.standard_normal((4, 6)).astype(np.float32)
    per_axis = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    _same(*_both(lambda xp_, *a: quantize.QuantizeLinear_13(xp_, *a, axis=0), blocked, per_axis), "per-axis")
    _same(*_both(quantize.QuantizeLinear_13, blocked.astype(np.float64), np.float64(0.1), None), "float64")
    assert counted[0] == 48
