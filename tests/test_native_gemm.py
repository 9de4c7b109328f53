"""The native float32 conv GEMM (cpu_kernels/gemm.c, gpuops/ops/cpu/native_gemm.py) against a float64
NumPy product: edge sizes around its tiles and k blocks, bias and clamp, NaN and infinities, strided
operands, nothing written outside the output, grouped weights, threads, and no result when native
kernels are off (the caller's np.matmul runs)."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from gpuops import native
from gpuops.ops.cpu import conv, native_gemm

needs_cc = pytest.mark.skipif(native.compiler() is None, reason="no C compiler: native kernels fall back to NumPy")

# sizes around the vector (8 or 16 lanes), the tiles (2 vectors of channels by 6 or 14 cells, a half tile
# of 3 or 7; 8 channels by 48 cells with the cells on the lanes) and the k block (512)
SIZES_M = [1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 63, 65, 130, 200]
SIZES_N = [1, 2, 5, 6, 7, 8, 13, 14, 15, 28, 29, 47, 48, 49, 64, 100]
SIZES_K = [0, 1, 2, 3, 17, 64, 383, 511, 512, 513, 767, 1025, 1153, 1601]


def _reference(A, B, bias, clamp_to):
    with np.errstate(invalid="ignore"):  # inf - inf
        Y = A.astype(np.float64) @ B.astype(np.float64)
    if bias is not None:
        Y += bias[:, None]
    if clamp_to is not None:
        Y = np.minimum(np.maximum(Y, clamp_to[0]), clamp_to[1])  # NaN stays, as in the kernel
    return Y


def _check(Y, A, B, bias, clamp_to, what):
    ref = _reference(A, B, bias, clamp_to)
    with np.errstate(invalid="ignore"):
        bound = np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64)) + 1.0  # float32 rounding scale
    finite = np.isfinite(ref) & np.isfinite(bound)
    assert Y.shape == ref.shape and Y.dtype == np.float32, what
    np.testing.assert_array_less(np.abs(Y[finite] - ref[finite]), 2e-6 * (A.shape[1] + 4) * bound[finite],
                                 err_msg=what)
    np.testing.assert_array_equal(Y[~finite], ref[~finite].astype(np.float32), err_msg=what)


def _operands(rng, M, K, N, specials):
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    if specials and B.size:
        B.flat[rng.integers(0, B.size, 3)] = [np.nan, np.inf, -np.inf]
    return A, B


@needs_cc
@pytest.mark.parametrize("rows", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_gemm_matches_float64(seed, rows):
    """Both layouts (cells or channels on the vector lanes) over every size."""
    rng = np.random.default_rng(seed)
    for case in range(60):
        M, N, K = (int(rng.choice(s)) for s in (SIZES_M, SIZES_N, SIZES_K))
        A, B = _operands(rng, M, K, N, specials=case % 5 == 0)
        bias = rng.standard_normal(M).astype(np.float32) if case % 3 else None
        clamp_to = [None, (0.0, np.inf), (-0.5, 0.25), (-np.inf, np.inf)][case % 4]
        Y = native_gemm.gemm(native_gemm.packed(A, bias, rows=rows)[0], B, clamp_to)
        _check(Y, A, B, bias, clamp_to, f"M={M} K={K} N={N} bias={bias is not None} clamp={clamp_to} rows={rows}")


@needs_cc
@pytest.mark.parametrize("M, K, N", [(32, 1152, 49), (70, 800, 60), (17, 147, 3025), (130, 64, 784), (34, 34, 784)])
def test_gemm_conv_shapes(M, K, N):
    rng = np.random.default_rng(M + K + N)
    A, B = _operands(rng, M, K, N, specials=False)
    bias = rng.standard_normal(M).astype(np.float32)
    _check(native_gemm.gemm(native_gemm.packed(A, bias)[0], B, (0.0, 6.0)), A, B, bias, (0.0, 6.0), f"{M, K, N}")


@needs_cc
@pytest.mark.parametrize("seed", range(3))
def test_gemm_writes_only_its_output(seed):
    """B and Y as row-strided views into NaN-filled buffers (B's row stride a multiple of 64 floats
    too: the kernel then copies its columns): the borders stay NaN."""
    rng = np.random.default_rng(10 + seed)
    for case in range(20):
        M, N, K = (int(rng.choice(s)) for s in (SIZES_M, SIZES_N, SIZES_K))
        A, B = _operands(rng, M, K, N, specials=False)
        ldb = 64 * (N // 64 + 1) if case % 2 else N + int(rng.integers(1, 9))
        Bbuf = np.full((K + 2, ldb + 3), np.nan, np.float32)
        Bv = Bbuf[1:K + 1, 2:2 + N]
        Bv[...] = B
        Ybuf = np.full((M + 2, N + int(rng.integers(2, 20))), np.nan, np.float32)
        Yv = Ybuf[1:M + 1, 1:N + 1]
        bias = rng.standard_normal(M).astype(np.float32)
        p = native_gemm.packed(A, bias, rows=bool(case % 3 == 0))[0]
        assert native_gemm.gemm(p, Bv, (-1.0, 1.0), out=Yv) is Yv
        _check(Yv, A, B, bias, (-1.0, 1.0), f"M={M} K={K} N={N} ldb={ldb} rows={p.rows}")
        border = np.ones(Ybuf.shape, bool)
        border[1:M + 1, 1:N + 1] = False
        assert np.isnan(Ybuf[border]).all(), f"written outside the output: M={M} K={K} N={N}"


@needs_cc
def test_grouped_weights_are_packed_once_per_step():
    """A session's conv step keeps its weight's packs (its ConvWeights): made once, at first need (their
    layout follows the map's size); packed() itself keeps nothing."""
    rng = np.random.default_rng(5)
    W = rng.standard_normal((4 * 136, 136, 1, 1)).astype(np.float32)  # ShuffleNet's grouped 1x1
    W.flags.writeable = False  # a plan's weight
    bias = rng.standard_normal(4 * 136).astype(np.float32)
    bias.flags.writeable = False
    assert native_gemm.packed(W, bias, group=4) is not native_gemm.packed(W, bias, group=4)
    kept = conv.prepare_conv({1: W, 2: bias}, {"group": 4})
    assert not kept._made
    parts = kept.packs(W, bias, 4, False)
    assert kept.packs(W, bias, 4, False) is parts and len(parts) == 4
    X = rng.standard_normal((4, 136, 49)).astype(np.float32)
    for g in range(4):
        rows = slice(g * 136, (g + 1) * 136)
        _check(native_gemm.gemm(parts[g], X[g]), W[rows, :, 0, 0], X[g], bias[rows], None, f"group {g}")


@needs_cc
def test_gemm_in_threads():
    """Reentrant: many products at once (ctypes releases the GIL) give each one's own result."""
    rng = np.random.default_rng(7)
    jobs = [_operands(rng, int(rng.choice(SIZES_M)), int(rng.choice(SIZES_K)), int(rng.choice(SIZES_N)), False)
            for _ in range(24)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda ab: native_gemm.gemm(native_gemm.packed(ab[0])[0], ab[1]), jobs))
    for (A, B), Y in zip(jobs, results):
        _check(Y, A, B, None, None, f"{A.shape} @ {B.shape}")


@needs_cc
@pytest.mark.parametrize("M, K, N, rows", [(160, 300, 49, False), (200, 64, 120, True), (40, 512, 7, False),
                                           (300, 700, 1, False)])
def test_split_across_threads_gives_the_same_bits(M, K, N, rows):
    """Products split across threads by cells (large maps) or by channels (more channels than cells: each
    part streams only its share of the weight): every cell is summed as on one thread."""
    rng = np.random.default_rng(9)
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    bias = rng.standard_normal(M).astype(np.float32)
    (p,) = native_gemm.packed(A, bias, rows=rows)
    before, out = native.threads(), []
    try:
        for threads in (1, 2, 3, 5):
            native.set_threads(threads)
            out.append(native_gemm.gemm(p, B, (-0.5, np.inf)))
    finally:
        native.set_threads(before)
    for Y in out[1:]:
        np.testing.assert_array_equal(Y, out[0])
    _check(out[0], A, B, bias, (-0.5, np.inf), f"{M} x {K} x {N}")


@needs_cc
@pytest.mark.parametrize("seed", range(3))
def test_fully_connected_rows_match_float64(seed):
    """native_gemm.fc (X's rows as the cells, read and written as rows) over every size, with bias, clamp,
    NaN and infinities, and the same bits at any thread count."""
    rng = np.random.default_rng(20 + seed)
    before = native.threads()
    try:
        for case in range(40):
            M, N, K = (int(rng.choice(s)) for s in (SIZES_M, SIZES_N, SIZES_K))
            A, B = _operands(rng, M, K, N, specials=case % 5 == 0)
            bias = rng.standard_normal(M).astype(np.float32) if case % 3 else None
            clamp_to = [None, (0.0, np.inf), (-0.5, 0.25), (-np.inf, np.inf)][case % 4]
            (p,) = native_gemm.packed(A, bias, rows=False)
            got = []
            for threads in (1, 3):
                native.set_threads(threads)
                got.append(native_gemm.fc(p, np.ascontiguousarray(B.T), clamp_to))
            what = f"M={M} K={K} N={N} bias={bias is not None} clamp={clamp_to}"
            np.testing.assert_array_equal(got[1], got[0], err_msg=what)
            _check(got[0].T, A, B, bias, clamp_to, what)
    finally:
        native.set_threads(before)


def test_constant_packs_are_made_once_per_weight():
    """linalg's fully connected steps share one pack per constant weight (and bias), dropped with it."""
    import gc

    W = np.ones((40, 30), np.float32)
    b = np.zeros(40, np.float32)
    p = native_gemm.constant_pack(W, True, b)
    if p is None:
        pytest.skip("no native kernels")
    assert native_gemm.constant_pack(W, True, b) is p
    assert native_gemm.constant_pack(W, True, None) is not p
    q = native_gemm.constant_pack(W.T.copy(), False, b)  # B (K x M): the same weight, packed the same
    np.testing.assert_array_equal(q.pack, p.pack)
    key = (id(W), True, id(b))
    del W, q
    gc.collect()
    assert key not in native_gemm._constant_packs


def test_unavailable_when_native_is_off():
    A = np.ones((8, 4), np.float32)
    with native.disabled():
        assert native_gemm.packed(A) is None
    assert native_gemm.packed(A.astype(np.float64)) is None
    p = native_gemm.packed(A)
    if p is not None:
        with native.disabled():
            assert native_gemm.gemm(p[0], np.ones((4, 3), np.float32)) is None


@needs_cc
def test_empty_products():
    (p,) = native_gemm.packed(np.ones((8, 4), np.float32))
    assert native_gemm.gemm(p, np.ones((4, 0), np.float32)).shape == (8, 0)
    (p,) = native_gemm.packed(np.ones((0, 4), np.float32))
    assert native_gemm.gemm(p, np.ones((4, 5), np.float32)).shape == (0, 5)


@needs_cc
def test_bad_operands_are_refused():
    (p,) = native_gemm.packed(np.ones((8, 4), np.float32))
    with pytest.raises(ValueError):
        native_gemm.gemm(p, np.ones((5, 3), np.float32))
    with pytest.raises(ValueError):
        native_gemm.gemm(p, np.ones((4, 3), np.float32), out=np.empty((8, 4), np.float32))
    with pytest.raises(ValueError):
        native_gemm.packed(np.ones((8, 4), np.float32), np.ones(7, np.float32))


@needs_cc
def test_kernel_lanes_match_vector_lanes():
    """The Python side's lane count (tile thresholds, pack widths) is the one the kernels were built with."""
    width = native.function("gemm_pack_width_f32")
    assert width(0) == native.vector_lanes() and native_gemm.pack_width(False) == width(0)
    assert native_gemm.pack_width(True) == width(1)


def test_gemm_pays_follows_the_lanes_and_the_threads(monkeypatch):
    """The choice between the kernel and OpenBLAS: lane fill by the CPU's vector width, the cells-on-lanes
    layout for poorly filled channels, and OpenBLAS where the kernel's column tiles cannot feed every
    thread."""
    pays = native_gemm.gemm_pays
    monkeypatch.setattr(native, "vector_lanes", lambda: 16)
    assert not pays(4, 64, 784, threads=1) and not pays(1, 96, 2704, threads=1)  # fewer channels than a tile
    assert pays(8, 64, 784, threads=1) and pays(24, 24, 10816, threads=1)  # the cells on the lanes, short K too
    assert pays(256, 576, 49, threads=3) and not pays(48, 576, 49, threads=3)  # a small map's channels split
    assert pays(24, 64, 784, threads=1) and pays(17, 147, 3025, threads=1)  # the cells take the lanes
    assert not pays(40, 240, 196, threads=1)  # channels on 16 lanes, half of the last vector empty
    assert pays(40, 240, 784, threads=1) and native_gemm.rows_layout(40, 240, 784)  # ... cells from 784 on
    assert pays(64, 576, 49, threads=1) and pays(64, 576, 49, threads=2)  # 7 tiles of 7 cells: 2 threads fed
    assert not pays(64, 576, 49, threads=4)  # ... 4 are not
    monkeypatch.setattr(native, "vector_lanes", lambda: 8)  # AVX2: 8 lanes, tiles of 6 cells
    assert pays(8, 64, 784, threads=1) and pays(64, 64, 3136, threads=1)  # the kernel, either layout
    assert pays(40, 240, 784, threads=1) and pays(128, 256, 784, threads=1)
    assert pays(64, 64, 49, threads=1) and pays(512, 4608, 49, threads=1)
    assert not pays(4, 64, 784, threads=1) and not pays(64, 8, 784, threads=1)  # few channels, short K
    assert not pays(32, 576, 36, threads=4)  # 6 tiles of 6 cells do not feed 4 threads
    rows = native_gemm.rows_layout
    assert rows(128, 256, 784) and rows(512, 1024, 169) and not rows(512, 1024, 49)  # a product's cells
    assert not rows(128, 1152, 784, row=28) and rows(64, 576, 3136, row=56)  # a conv's rows: on large maps
