"""Native CPU kernels (gpuops/native.py, cpu_kernels/*.c): the switch to NumPy, and the kernels against
the NumPy code they replace (their oracle). Building, caching and the fallbacks of a failed build are
in test_native_build.py; the declarations of the kernels in test_native_abi.py."""

import os
import subprocess
import sys

import array_api_compat.numpy as xp
import numpy as np
import pytest

from gpuops import native, native_abi
from gpuops.errors import NodeError
from gpuops.ops.contrib.transformer import fused_activation
from gpuops.ops import windows
from gpuops.ops.cpu import conv, pool, winograd

needs_cc = pytest.mark.skipif(native.compiler() is None, reason="no C compiler: native kernels fall back to NumPy")


def _both(f, *args, **kwargs):
    """(native result, NumPy result) of ``f``, or None when the NumPy op refuses the attributes."""
    try:
        with native.disabled():
            ref = f(xp, *args, **kwargs)
    except NodeError:
        return None
    return f(xp, *args, **kwargs), ref


def _geometry(rng):
    k = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
    return dict(kernel_shape=k, strides=[int(s) for s in rng.integers(1, 4, 2)],
                dilations=[int(d) for d in rng.integers(1, 3, 2)],
                pads=[int(rng.integers(0, k[0])), int(rng.integers(0, k[1])),
                      int(rng.integers(0, k[0])), int(rng.integers(0, k[1]))])


def _input(rng, N, C, H, W, specials):
    X = rng.standard_normal((N, C, H, W)).astype(np.float32)
    if specials:  # NaN propagates through max and sums; infinities win or overflow
        X.flat[rng.integers(0, X.size, 3)] = [np.nan, np.inf, -np.inf]
    return X


# planes per image: few take the phase-plane kernels; 8 or more on rows of at most 32 output cells the
# channel blocks (16 planes interleaved, in and out through transposed tiles: partial blocks and tiles)
PLANES = {"phase planes": (1, 6), "channel blocks": (8, 40)}


@needs_cc
@pytest.mark.parametrize("planes", PLANES)
@pytest.mark.parametrize("seed", range(4))
def test_pools_match_numpy(seed, planes):
    rng = np.random.default_rng(seed)
    checked = 0
    for case in range(30):
        X = _input(rng, int(rng.integers(1, 3)), int(rng.integers(*PLANES[planes])), int(rng.integers(1, 14)),
                   int(rng.integers(1, 40)), specials=case % 5 == 0)
        geo = _geometry(rng)
        ceil = int(rng.integers(0, 2))
        for f, extra in ((pool.MaxPool, {}), (pool.AveragePool, {"count_include_pad": 0}),
                         (pool.AveragePool, {"count_include_pad": 1})):
            got = _both(f, X, ceil_mode=ceil, **geo, **extra)
            if got is None:
                continue
            y, ref = got
            assert y.shape == ref.shape and y.dtype == ref.dtype
            np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6, equal_nan=True,
                                       err_msg=f"{f.__name__} {X.shape} {geo} ceil={ceil} {extra}")
            checked += 1
    assert checked > 45


# undilated windows of row stride 1 or 2 on few planes: the separable row kernel (pool.c's pool_rows),
# output rows of 1 to 3 vectors and a part of one, around the vector lengths of AVX-512 and AVX2
ROW_SHAPES = [(1, 1), (3, 7), (8, 15), (11, 16), (9, 17), (16, 31), (5, 33), (14, 64), (7, 70)]


@needs_cc
@pytest.mark.parametrize("H, W", ROW_SHAPES)
@pytest.mark.parametrize("k, s, pads, ceil", [((3, 3), (2, 2), (1, 1, 1, 1), 0), ((3, 3), (2, 2), (0, 0, 1, 1), 0),
                                              ((3, 3), (2, 2), (0, 0, 0, 0), 1), ((3, 3), (1, 1), (1, 1, 1, 1), 0),
                                              ((2, 3), (3, 2), (1, 2, 0, 1), 1), ((1, 4), (1, 1), (0, 3, 0, 2), 0),
                                              ((5, 2), (2, 1), (2, 0, 1, 1), 1)])
def test_separable_row_pools_match_numpy(H, W, k, s, pads, ceil):
    """Against the NumPy ops: MaxPool to the bit, and its signed zeros as the tap-by-tap kernels give
    them (the first of equal cells in the window's row-major order, where NumPy's maximum may keep
    either); averages within rounding."""
    rng = np.random.default_rng(H * 100 + W)
    X = rng.standard_normal((1, 3, H, W)).astype(np.float32)
    X[0, 0] = np.where(rng.random((H, W)) < 0.5, np.float32(0.0), np.float32(-0.0))  # ties of +0 and -0
    X[0, 1].flat[rng.integers(0, H * W, 2)] = [np.nan, np.inf]  # one plane with a NaN: its rows tracked
    X[0, 2, :, ::3] = -np.inf
    if (H + pads[0] + pads[2] - k[0]) < 0 or (W + pads[1] + pads[3] - k[1]) < 0:
        return
    attrs = dict(kernel_shape=list(k), strides=list(s), pads=list(pads), ceil_mode=ceil)
    y, ref = _both(pool.MaxPool, X, **attrs)
    assert y.shape == ref.shape
    np.testing.assert_array_equal(y, ref)
    first = None
    for v in windows.window_taps(xp, X, *windows.pool_geometry(X, k, s, None, pads, "NOTSET", ceil), -np.inf):
        first = v.copy() if first is None else np.where(v > first, v, first)
    np.testing.assert_array_equal(np.signbit(y[0, 0]), np.signbit(first[0, 0]))
    for include_pad in (0, 1):
        y, ref = _both(pool.AveragePool, X, count_include_pad=include_pad, **attrs)
        np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6, equal_nan=True)


@needs_cc
@pytest.mark.parametrize("planes", PLANES)
@pytest.mark.parametrize("seed", range(4))
def test_depthwise_conv_matches_numpy(seed, planes):
    rng = np.random.default_rng(100 + seed)
    checked = 0
    for case in range(30):
        N, C = int(rng.integers(1, 3)), int(rng.integers(max(2, PLANES[planes][0]), PLANES[planes][1]))
        X = _input(rng, N, C, int(rng.integers(1, 14)), int(rng.integers(1, 40)), specials=case % 7 == 0)
        geo = _geometry(rng)
        mult = int(rng.integers(1, 3))
        W = rng.standard_normal((C * mult, 1, *geo.pop("kernel_shape"))).astype(np.float32)
        B = rng.standard_normal(C * mult).astype(np.float32) if case % 2 else None
        got = _both(conv.Conv, X, W, B, group=C, **geo)
        if got is None:
            continue
        y, ref = got
        assert y.shape == ref.shape and y.dtype == ref.dtype
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5, equal_nan=True, err_msg=f"{X.shape} {geo} x{mult}")
        checked += 1
    assert checked > 20


# The direct kernel (cpu_kernels/direct_conv.c): output channels in chunks of each size it takes (24, 16
# and 8 with 16 lanes; 4 with 8, M padded to its multiple) and past them; output rows in blocks (3 at a
# time with 8 lanes, the last block moved back to end at the map's end; maps of 1 and 2 rows), rows of
# less than a vector (its store spilling into the next row), of one, and of several (the last vector
# moved back). (C, M, H, W, kernel, strides, pads, dilations)
DIRECT_SHAPES = [(3, 64, 47, 45, (3, 3), (2, 2), (0, 0, 0, 0), (1, 1)),  # squeezenet's first conv, a smaller map
                 (3, 8, 32, 30, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),
                 (1, 5, 9, 40, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
                 (2, 6, 4, 19, (3, 2), (1, 2), (0, 1, 1, 0), (1, 1)),  # 2 output rows
                 (4, 40, 1, 35, (1, 3), (1, 1), (0, 1, 0, 1), (1, 2)),  # 1 output row
                 (3, 16, 20, 11, (3, 3), (2, 1), (2, 1, 1, 1), (2, 1)),  # rows of 11 cells
                 (2, 1, 14, 6, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # rows of 6 cells (8 lanes only)
                 (3, 33, 16, 8, (2, 2), (1, 1), (0, 0, 0, 0), (1, 1)),  # rows of 7 cells (8 lanes only)
                 (4, 48, 13, 31, (3, 3), (3, 2), (1, 0, 2, 1), (1, 1))]


@needs_cc
@pytest.mark.parametrize("shape", DIRECT_SHAPES, ids=str)
@pytest.mark.parametrize("clamp", [None, (0.0, np.inf), (-0.5, 0.75)])
def test_direct_conv_matches_numpy(shape, clamp):
    C, M, H, W, k, s, pads, d = shape
    OW = (W + pads[1] + pads[3] - (k[1] - 1) * d[1] - 1) // s[1] + 1
    if not conv._direct_fits(C, k[0] * k[1], OW):
        pytest.skip(f"rows of {OW} cells take the GEMM with {native.vector_lanes()} lanes")
    rng = np.random.default_rng(M * 100 + W)
    for N, specials in ((1, False), (2, True)):
        X = _input(rng, N, C, H, W, specials)
        Wt = rng.standard_normal((M, C, *k)).astype(np.float32)
        B = rng.standard_normal(M).astype(np.float32) if specials else None
        y, ref = _both(conv.conv, X, Wt, B, strides=list(s), pads=list(pads), dilations=list(d), clamp_to=clamp)
        assert y.shape == ref.shape and y.dtype == np.float32
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5, equal_nan=True, err_msg=f"{shape} {clamp}")


@needs_cc
def test_strided_views_and_float16_inputs():
    """Non-contiguous inputs are made contiguous for the kernels; float16 takes the NumPy pool path and
    the float32 conv path, unchanged."""
    rng = np.random.default_rng(7)
    X = rng.standard_normal((2, 6, 9, 11)).astype(np.float32).transpose(0, 1, 3, 2)
    W = rng.standard_normal((6, 1, 3, 3)).astype(np.float32)
    for f, args, kw in ((pool.MaxPool, (X,), dict(kernel_shape=[3, 2], strides=[2, 1])),
                        (pool.AveragePool, (X,), dict(kernel_shape=[2, 3], pads=[1, 1, 1, 1])),
                        (conv.Conv, (X, W), dict(group=6, pads=[1, 1, 1, 1], strides=[2, 2])),
                        (pool.MaxPool, (X.astype(np.float16),), dict(kernel_shape=[3, 3])),
                        (conv.Conv, (X.astype(np.float16), W.astype(np.float16)), dict(group=6))):
        y, ref = _both(f, *args, **kw)
        np.testing.assert_allclose(y.astype(np.float32), ref.astype(np.float32), rtol=1e-5, atol=1e-5)


@needs_cc
def test_kernels_write_only_their_outputs():
    """Run the kernels into the middle of a NaN-filled buffer: the guard zones around the output stay
    untouched (a kernel trusts its sizes; this is the check that it honours them)."""
    rng = np.random.default_rng(3)
    guard = 64
    for (C, H, W, k, s, p) in [(3, 7, 5, (3, 3), (2, 2), (1, 1)), (2, 1, 33, (1, 3), (1, 3), (0, 2)),
                               (4, 17, 18, (3, 3), (1, 1), (1, 1)), (21, 5, 7, (3, 3), (1, 1), (1, 1)),
                               (17, 9, 9, (3, 2), (2, 1), (1, 0))]:  # the last two: channel blocks
        X = rng.standard_normal((1, C, H, W)).astype(np.float32)
        Wt = rng.standard_normal((C, 1, *k)).astype(np.float32)
        Wd = rng.standard_normal((C, C, *k)).astype(np.float32)  # the direct conv: C in, C out
        OH, OW = (H + 2 * p[0] - k[0]) // s[0] + 1, (W + 2 * p[1] - k[1]) // s[1] + 1
        n = C * OH * OW
        for name, file, call in (
                ("depthwise_conv2d_f32", "conv.c", lambda fn, out: fn(
                    X.ctypes.data, Wt.ctypes.data, None, out, 1, C, H, W, 1, *k, OH, OW, *s, *p, 1, 1, 0.0, 1.0)),
                ("direct_conv2d_f32", "direct_conv.c", lambda fn, out: fn(
                    X.ctypes.data, Wd.ctypes.data, None, out, 1, C, H, W, C, *k, OH, OW, *s, *p, 1, 1, 0.0, 1.0)),
                ("pool2d_f32", "pool.c", lambda fn, out: fn(
                    X.ctypes.data, out, C, H, W, OH, OW, *k, *s, *p, 1, 1, 1, *p))):
            fn = native.function(name)
            assert native_abi.KERNELS[name].file == file
            buf = np.full(n + 2 * guard, np.nan, dtype=np.float32)
            assert call(fn, buf[guard:].ctypes.data) == 0
            assert np.isnan(buf[:guard]).all() and np.isnan(buf[guard + n:]).all(), name
            assert not np.isnan(buf[guard:guard + n]).any(), name


def test_disabled_and_env_switch(monkeypatch):
    with native.disabled():
        assert native.function("pool2d_f32") is None
    monkeypatch.setattr(native, "ENABLED", False)  # what GPUOPS_NATIVE=0 at start-up sets
    assert not native.enabled()
    assert native.function("pool2d_f32") is None
    r = subprocess.run([sys.executable, "-c", "from gpuops import native; print(native.enabled())"],
                       env={**os.environ, "GPUOPS_NATIVE": "0"}, capture_output=True, text=True)
    assert r.stdout.strip() == "False", r.stderr
    X = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
    assert pool.MaxPool(xp, X, kernel_shape=[2, 2], strides=[2, 2]).tolist() == [
        [[[5, 7], [13, 15]], [[21, 23], [29, 31]]]]


def test_kernel_status_and_argument_checks():
    def failing(*args):
        return 1

    failing.__name__ = "pool2d_f32"
    with pytest.raises(MemoryError, match="pool2d_f32"):
        native.call(failing, 0)
    with pytest.raises(TypeError, match="C-contiguous float32"):
        native.ptr(np.zeros((3, 3), np.float32).T)
    a = np.arange(6, dtype=np.float32)
    assert native.ptr(a) == a.ctypes.data and native.ptr(a[2:]) == a.ctypes.data + 8
    a.flags.writeable = False
    assert native.ptr(a) == a.ctypes.data


def _conv_f64(X, W, B, pads):
    with native.disabled():
        return conv.conv(xp, X.astype(np.float64), W.astype(np.float64), None if B is None else B.astype(np.float64),
                         pads=pads)


@needs_cc
def test_winograd_matches_a_float64_conv():
    """F(2x2, 3x3) (the planned kernel, its weight packed per call) against the float64 direct conv: no
    further off than the float32 direct conv (its transforms only add, subtract and halve), over odd
    sizes, asymmetric pads, several images, and the blocks of tile rows that large maps take (the last
    case: about ten)."""
    rng = np.random.default_rng(11)
    for N, C, M, H, Wd in [(1, 32, 16, 5, 5), (2, 33, 19, 9, 7), (1, 40, 8, 6, 23), (3, 32, 17, 1, 1),
                           (1, 32, 20, 40, 3), (2, 48, 33, 17, 35), (1, 64, 64, 96, 95)]:
        X = rng.standard_normal((N, C, H, Wd)).astype(np.float32)
        W = (rng.standard_normal((M, C, 3, 3)) / np.sqrt(9 * C)).astype(np.float32)
        B = rng.standard_normal(M).astype(np.float32) if C % 2 else None
        for pads in ([1, 1, 1, 1], [1, 0, 0, 1], [0, 1, 1, 0], [0, 0, 0, 0]):
            if H + pads[0] + pads[2] < 3 or Wd + pads[1] + pads[3] < 3:
                continue
            ref = _conv_f64(X, W, B, pads)
            y = conv._winograd(X, W, B, pads[:2], ref.shape[2:])
            with native.disabled():
                direct = conv.conv(xp, X, W, B, pads=pads)
            assert y.shape == ref.shape and y.dtype == np.float32
            bound = 2 * np.abs(direct - ref).max() + 1e-6
            assert np.abs(y - ref).max() <= bound, (N, C, M, H, Wd, pads)


@needs_cc
def test_winograd_is_chosen_where_it_pays():
    rng = np.random.default_rng(12)
    X = rng.standard_normal((1, 32, 28, 28)).astype(np.float32)
    W = rng.standard_normal((16, 32, 3, 3)).astype(np.float32)
    assert winograd.applies(X, W, [3, 3], [1, 1], [1, 1], 1, [28, 28])
    for kernel, strides, dilations, group, out in (([3, 3], [2, 2], [1, 1], 1, [14, 14]), ([3, 3], [1, 1], [2, 2], 1, [28, 28]),
                                                   ([3, 3], [1, 1], [1, 1], 2, [28, 28]), ([3, 3], [1, 1], [1, 1], 1, [14, 14])):
        assert not winograd.applies(X, W, kernel, strides, dilations, group, out)
    assert not winograd.applies(X[:, :16], W[:, :16], [3, 3], [1, 1], [1, 1], 1, [28, 28])  # too few channels
    assert winograd.applies(X, np.repeat(W, 8, axis=0), [3, 3], [1, 1], [1, 1], 1, [28, 28])
    X4 = np.repeat(X, 4, axis=1)[..., :14, :14]  # 14x14 maps: 128 -> 16 channels too few, 128 -> 128 enough
    assert not winograd.applies(X4, np.repeat(W, 4, axis=1), [3, 3], [1, 1], [1, 1], 1, [14, 14])
    W4 = np.repeat(np.repeat(W, 4, axis=1), 8, axis=0)
    assert winograd.applies(X4, W4, [3, 3], [1, 1], [1, 1], 1, [14, 14])
    with native.disabled():
        assert not winograd.applies(X, W, [3, 3], [1, 1], [1, 1], 1, [28, 28])


def test_winograd_pays_by_tiles_and_channels_and_earlier_with_8_lanes(monkeypatch):
    for lanes in (16, 8):
        monkeypatch.setattr(native, "vector_lanes", lambda: lanes)
        assert winograd.pays(32, 16, 1, (28, 28)) and not winograd.pays(16, 64, 1, (28, 28))
        assert winograd.pays(32, 32, 1, (20, 20)) and not winograd.pays(32, 16, 1, (20, 20))
        assert winograd.pays(96, 96, 1, (14, 14)) and winograd.pays(96, 96, 1, (10, 10))
        assert not winograd.pays(256, 256, 1, (8, 8))  # 16 tiles
        assert not winograd.pays(128, 16, 1, (14, 14))
    monkeypatch.setattr(native, "vector_lanes", lambda: 16)
    assert not winograd.pays(64, 64, 1, (14, 14)) and not winograd.pays(64, 64, 1, (10, 10))
    monkeypatch.setattr(native, "vector_lanes", lambda: 8)
    assert winograd.pays(64, 64, 1, (14, 14)) and winograd.pays(64, 64, 1, (10, 10))
    assert winograd.pays(32, 64, 1, (14, 14)) and not winograd.pays(32, 64, 1, (10, 10))


@needs_cc
def test_winograd_transforms_write_only_their_outputs():
    rng = np.random.default_rng(13)
    C, M, H, Wd, guard = 3, 4, 7, 9, 64
    th, tw = 4, 5
    x = rng.standard_normal((C, H, Wd)).astype(np.float32)
    fwd = native.function("winograd_f2k3_input_f32")
    bwd = native.function("winograd_f2k3_output_f32")
    ld = (th - 1) * tw + 7  # rows 1..3 of the tiles, at column 7 of a wider matrix
    V = np.full(16 * C * ld + 2 * guard, np.nan, dtype=np.float32)
    assert fwd(x.ctypes.data, V[guard:].ctypes.data, C, H, Wd, 1, 1, th, tw, 1, th, ld, 7) == 0
    body = V[guard:guard + 16 * C * ld].reshape(16, C, ld)
    assert np.isnan(V[:guard]).all() and np.isnan(V[guard + 16 * C * ld:]).all()
    assert np.isnan(body[..., :7]).all() and not np.isnan(body[..., 7:]).any()
    Mo = rng.standard_normal(16 * M * ld + 16).astype(np.float32)  # the last vector may read VL floats past
    Y = np.full(M * H * Wd + 2 * guard, np.nan, dtype=np.float32)
    assert bwd(Mo.ctypes.data, None, Y[guard:].ctypes.data, M, H, Wd, tw, 1, th, ld, 7, -np.inf, np.inf) == 0
    out = Y[guard:guard + M * H * Wd].reshape(M, H, Wd)
    assert np.isnan(Y[:guard]).all() and np.isnan(Y[guard + M * H * Wd:]).all()
    assert np.isnan(out[:, :2]).all() and not np.isnan(out[:, 2:]).any()  # tile row 0 = output rows 0, 1


@needs_cc
@pytest.mark.parametrize("block_bytes", [None, 256])
def test_native_im2col_convs_match_numpy(monkeypatch, block_bytes):
    """Group-1 and grouped convs through the blocked im2col + GEMM, the columns from the native
    im2col (any stride, dilation and padding; block_bytes: one output row per block)."""
    if block_bytes:
        monkeypatch.setattr(conv, "BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(21)
    checked = 0
    for case in range(40):
        group = int(rng.integers(1, 3))
        C, M = group * int(rng.integers(1, 4)), group * int(rng.integers(1, 4))
        X = _input(rng, int(rng.integers(1, 3)), C, int(rng.integers(1, 12)), int(rng.integers(1, 30)), case % 9 == 0)
        geo = _geometry(rng)
        W = rng.standard_normal((M, C // group, *geo.pop("kernel_shape"))).astype(np.float32)
        got = _both(conv.Conv, X, W, None, group=group, **geo)
        if got is None:
            continue
        np.testing.assert_allclose(*got, rtol=1e-5, atol=1e-5, equal_nan=True, err_msg=f"{X.shape} {W.shape} {geo}")
        checked += 1
    assert checked > 25


@needs_cc
def test_im2col_writes_only_its_block():
    rng = np.random.default_rng(22)
    C, H, W, guard = 2, 9, 7, 64
    x = rng.standard_normal((C, H, W)).astype(np.float32)
    fn = native.function("im2col2d_f32")
    OH, OW, rows = 4, 3, 2  # 3x3 taps, stride 2, pad 1, dilation 1: output rows 1 and 2 only
    n = C * 9 * rows * OW
    buf = np.full(n + 2 * guard, np.nan, dtype=np.float32)
    assert fn(x.ctypes.data, buf[guard:].ctypes.data, C, H, W, 3, 3, OH, OW, 2, 2, 1, 1, 1, 1, 1, 1 + rows) == 0
    assert np.isnan(buf[:guard]).all() and np.isnan(buf[guard + n:]).all()
    cols = buf[guard:guard + n].reshape(C, 3, 3, rows, OW)
    xp_ = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    want = np.stack([np.stack([xp_[:, 2 + ky:2 + ky + 2 * rows:2, kx:kx + 2 * OW:2] for kx in range(3)], 1)
                     for ky in range(3)], 1)
    np.testing.assert_array_equal(cols, want)


@needs_cc
@pytest.mark.parametrize("activation", ["Relu", "Clip"])
def test_fused_conv_clamps_in_the_conv_epilogue(activation):
    """FusedConv's Relu / Clip applied with the bias by every CPU conv path (1x1 GEMM, blocked im2col,
    Winograd, depthwise, kn2row) equals the conv followed by the activation; NaN stays NaN."""
    rng = np.random.default_rng(23)
    params = [-0.5, 0.75] if activation == "Clip" else None
    for C, M, k, group, s in [(8, 6, 1, 1, 1), (3, 5, 3, 1, 2), (32, 16, 3, 1, 1), (6, 6, 3, 6, 1), (64, 8, 3, 1, 1),
                              (4, 6, 1, 2, 1), (6, 12, 1, 6, 1)]:
        X = rng.standard_normal((2, C, 15, 13)).astype(np.float32)
        X[0, 0, 3, 3] = np.nan
        W = (rng.standard_normal((M, C // group, k, k)) / 3).astype(np.float32)
        B = rng.standard_normal(M).astype(np.float32)
        attrs = dict(group=group, strides=[s, s], pads=[k // 2] * 4)
        got = conv.FusedConv(xp, X, W, B, activation=activation, activation_params=params, **attrs)
        with native.disabled():
            ref = fused_activation(xp, conv.conv(xp, X, W, B, **attrs), activation,
                                               *(params or [None, None]))
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, equal_nan=True, err_msg=f"{C} {M} {k} {group} {s}")
        assert np.isnan(got).any() and (activation != "Relu" or np.nanmin(got) >= 0)


@needs_cc
@pytest.mark.parametrize("activation", ["Relu", "Clip", None, "LeakyRelu"])
def test_fused_conv_with_a_residual(activation):
    """FusedConv's Z: bias, Z and a Relu / Clip / no activation in one native pass after the conv, equal
    to the conv, + Z, then the activation (NaN and inf in Z included); a Z that broadcasts and other
    activations take the NumPy path, which native kernels off also take."""
    rng = np.random.default_rng(29)
    params = [-0.5, 0.75] if activation == "Clip" else None
    for C, M, k, group, s, bias, z_shape in [(8, 6, 1, 1, 1, True, None), (3, 5, 3, 1, 2, True, None),
                                              (6, 6, 3, 6, 1, False, None), (4, 6, 1, 2, 1, True, (1, 6, 1, 1))]:
        X = rng.standard_normal((2, C, 15, 13)).astype(np.float32)
        W = (rng.standard_normal((M, C // group, k, k)) / 3).astype(np.float32)
        B = rng.standard_normal(M).astype(np.float32) if bias else None
        attrs = dict(group=group, strides=[s, s], pads=[k // 2] * 4)
        out = conv.conv(xp, X, W, None, **attrs).shape
        Z = rng.standard_normal(z_shape or out).astype(np.float32)
        Z.flat[:3] = [np.nan, np.inf, -np.inf]
        if not bias:  # a strided Z (its contiguous copy must outlive the kernel's call)
            Z = np.repeat(Z, 2, axis=1)[:, ::2]
        got = conv.FusedConv(xp, X, W, B, Z, activation=activation, activation_params=params, **attrs)
        with native.disabled():
            want = conv.FusedConv(xp, X, W, B, Z, activation=activation, activation_params=params, **attrs)
            ref = fused_activation(xp, conv.conv(xp, X, W, B, **attrs) + Z, activation,
                                               *(params or [None, None]))
        assert got.shape == ref.shape == want.shape
        np.testing.assert_allclose(want, ref, rtol=1e-6, atol=1e-6, equal_nan=True)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, equal_nan=True, err_msg=f"{C} {M} {k} {group} {s}")
        assert np.isnan(got).any()


@needs_cc
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_native_erf(dtype):
    """Erf (and Gelu through it) natively (float32: cpu_kernels/special.c's vectorised erf; float64: the C
    library's): within 2 ulp of math.erf, NaN, infinities, zeros, subnormals and the ends of the float32
    kernel's intervals included, on strided inputs too; the NumPy series agrees to its few ulp."""
    import math

    from gpuops.ops.cpu.elementwise import erf

    rng = np.random.default_rng(41)
    x = np.concatenate([rng.standard_normal(3000) * 3, [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, 6.0, -30.0],
                        [0.921875, -0.9218749, 3.99999, 4.0, -4.00001], np.linspace(-5, 5, 20001),
                        rng.uniform(-1e-3, 1e-3, 100)]).astype(dtype)
    got = erf(xp, x[::1])
    want = np.array([math.erf(float(v)) if not math.isnan(v) else math.nan for v in x]).astype(dtype)
    ulp = np.spacing(np.abs(want).astype(dtype))
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert (np.abs(got - want) <= 2 * ulp)[~np.isnan(want)].all()
    assert np.signbit(got[np.where(x == 0)]).tolist() == np.signbit(x[x == 0]).tolist()
    strided = erf(xp, x.reshape(-1, 1)[::2])
    np.testing.assert_array_equal(strided.ravel(), got[::2])
    with native.disabled():
        series = erf(xp, x)
    np.testing.assert_allclose(got, series, rtol=4e-6 if dtype == np.float32 else 1e-14, atol=1e-30, equal_nan=True)


@needs_cc
def test_native_gelu():
    """Gelu (approximate "none", float32) in one native pass: within 8 ulp of x erfc(-x / sqrt(2)) / 2 in
    float64 (the formula without 1 + erf's cancellation where x < 0), NaN and infinities included
    (Gelu(-inf) is ``x (1 + erf(x / sqrt(2))) / 2``'s NaN, as onnxruntime's formula gives); the NumPy
    formula agrees (to its cancellation's error where x < 0)."""
    import math

    from gpuops.ops.cpu.activation import Gelu

    rng = np.random.default_rng(43)
    x = np.concatenate([rng.standard_normal(5000) * 4, [np.nan, np.inf, -np.inf, 0.0, -0.0, -40.0, 1e-40]])
    x = x.astype(np.float32)
    got = Gelu(xp, x)
    with np.errstate(invalid="ignore"):
        want = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) if not math.isinf(v) else v * (v > 0 or math.nan)
                         for v in x.astype(np.float64)])
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    fin = np.isfinite(want)
    assert (got[~fin] == want[~fin]).sum() == np.isinf(want).sum()
    assert (np.abs(got[fin] - want[fin]) <= _ulps_f32(want[fin]) * 8).all()
    with native.disabled():
        ref = Gelu(xp, x)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6, equal_nan=True)


def _ulps_f32(want: np.ndarray) -> np.ndarray:
    """float32's spacing at the float64 values ``want``, at least that of the smallest normal float (vmath.h's
    exp flushes results below it to 0: an absolute error of at most 1.2e-38 there)."""
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    return np.maximum(ulp, np.float64(np.finfo(np.float32).tiny))


@needs_cc
@pytest.mark.parametrize("fn", ["erf", "gelu"])
def test_native_erf_gelu_sweep(fn):
    """vmath.h's float32 erf (Erf) and the Gelu built on it over float32's whole range (every 251st bit pattern
    of either sign, every 13th where erf and Gelu change, |x| in [0.5, 16)), against scipy's float64 erf:
    within 1.4 ulp (erf) and 8 ulp (Gelu: erfc's exp, 1 / (1 + |x| / 2) and polynomial each add an ulp or
    two; 6.7 at most over every float32 in [1e-4, 3])."""
    import scipy.special

    from gpuops.ops.cpu.activation import Gelu
    from gpuops.ops.cpu.elementwise import erf

    top = np.float32(np.inf).view(np.uint32)
    lo, hi = np.float32(0.5).view(np.uint32), np.float32(16).view(np.uint32)
    bits = np.concatenate([np.arange(0, top, 251, dtype=np.uint32), np.arange(lo, hi, 13, dtype=np.uint32)])
    pos = bits.view(np.float32)
    for x in (pos, -pos):
        xd = x.astype(np.float64)
        if fn == "erf":
            got, want, ulps = erf(xp, x), scipy.special.erf(xd), 1.4
        else:
            got, want, ulps = Gelu(xp, x), 0.5 * xd * scipy.special.erfc(-xd / np.sqrt(2)), 8
        err = np.abs(got - want) / _ulps_f32(want)
        assert err.max() <= ulps, (fn, x[err.argmax()], got[err.argmax()], want[err.argmax()])


@needs_cc
def test_native_sigmoid():
    """Sigmoid (float32) in one native pass: within 1 ulp of 1 / (1 + e^-x) computed in float64, the
    saturated ends (e^-104 and beyond round to 0), NaN, infinities, signed zeros and subnormals
    included, on strided inputs too; the NumPy formula (the fallback) agrees to its few ulp."""
    from gpuops.ops.cpu.elementwise import Sigmoid

    rng = np.random.default_rng(44)
    x = np.concatenate([rng.standard_normal(5000) * 8, [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40],
                        [16.6, -16.6, 87.0, -87.0, 88.8, -88.8, 103.9, -103.9, 104.0, -104.0, 200.0, -200.0],
                        np.linspace(-110, 110, 20001)]).astype(np.float32)
    got = Sigmoid(xp, x)
    with np.errstate(over="ignore"):
        want = 1 / (1 + np.exp(-x.astype(np.float64)))
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(x))
    ok = ~np.isnan(x)
    ulp = np.spacing(want[ok].astype(np.float32)).astype(np.float64)
    assert (np.abs(got[ok] - want[ok]) <= ulp).all()
    assert got[x == np.inf].tolist() == [1.0] and got[x == -np.inf].tolist() == [0.0]
    np.testing.assert_array_equal(Sigmoid(xp, x.reshape(-1, 1)[::3]).ravel(), got[::3])
    with native.disabled():
        ref = Sigmoid(xp, x)
    np.testing.assert_allclose(got, ref, rtol=4 * np.finfo(np.float32).eps, atol=1e-44, equal_nan=True)


def test_compiler_flags_suit_gcc_and_clang(monkeypatch):
    """GCC-only flags go to GCC alone (clang rejects them: every kernel would fall back to NumPy), and
    the user's flags come last."""
    monkeypatch.setenv("GPUOPS_NATIVE_CFLAGS", "-march=x86-64-v3")
    gcc = native.flags("cc (Debian 12.2.0-14) 12.2.0")
    clang = native.flags("Debian clang version 14.0.6\nTarget: x86_64-pc-linux-gnu")
    assert set(native.GCC_FLAGS) <= set(gcc) and not set(native.GCC_FLAGS) & set(clang)
    assert gcc[-1] == clang[-1] == "-march=x86-64-v3" and set(native.FLAGS) <= set(clang)
