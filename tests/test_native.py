"""Native CPU kernels (gpuops/native.py, cpu_kernels/*.c): loading, fallback, and the depthwise conv
and pooling kernels against the NumPy code they replace (their oracle)."""

import ctypes
import threading
import warnings

import array_api_compat.numpy as xp
import numpy as np
import pytest

from gpuops import native
from gpuops.errors import NodeError
from gpuops.ops import conv, pool
from gpuops.ops.conv import _DEPTHWISE_ARGS

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


@needs_cc
@pytest.mark.parametrize("seed", range(6))
def test_pools_match_numpy(seed):
    rng = np.random.default_rng(seed)
    checked = 0
    for case in range(40):
        X = _input(rng, int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 14)),
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
    assert checked > 60


@needs_cc
@pytest.mark.parametrize("seed", range(6))
def test_depthwise_conv_matches_numpy(seed):
    rng = np.random.default_rng(100 + seed)
    checked = 0
    for case in range(30):
        N, C = int(rng.integers(1, 3)), int(rng.integers(2, 6))
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
                               (4, 17, 18, (3, 3), (1, 1), (1, 1))]:
        X = rng.standard_normal((1, C, H, W)).astype(np.float32)
        Wt = rng.standard_normal((C, 1, *k)).astype(np.float32)
        OH, OW = (H + 2 * p[0] - k[0]) // s[0] + 1, (W + 2 * p[1] - k[1]) // s[1] + 1
        n = C * OH * OW
        for name, file, call in (
                ("depthwise_conv2d_f32", "conv.c", lambda fn, out: fn(
                    X.ctypes.data, Wt.ctypes.data, None, out, 1, C, H, W, 1, *k, OH, OW, *s, *p, 1, 1)),
                ("pool2d_f32", "pool.c", lambda fn, out: fn(
                    X.ctypes.data, out, C, H, W, OH, OW, *k, *s, *p, 1, 1, 1, *p))):
            argtypes = _DEPTHWISE_ARGS if file == "conv.c" else (native.PTR,) * 2 + (native.INT,) * 16
            fn = native.function(file, name, argtypes)
            buf = np.full(n + 2 * guard, np.nan, dtype=np.float32)
            assert call(fn, buf[guard:].ctypes.data) == 0
            assert np.isnan(buf[:guard]).all() and np.isnan(buf[guard + n:]).all(), name
            assert not np.isnan(buf[guard:guard + n]).any(), name


def test_disabled_and_env_switch(monkeypatch):
    with native.disabled():
        assert native.function("pool.c", "pool2d_f32", ()) is None
    monkeypatch.setenv("GPUOPS_NATIVE", "0")
    assert not native.enabled()
    assert native.function("pool.c", "pool2d_f32", ()) is None
    X = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
    assert pool.MaxPool(xp, X, kernel_shape=[2, 2], strides=[2, 2]).tolist() == [
        [[[5, 7], [13, 15]], [[21, 23], [29, 31]]]]


def test_missing_compiler_falls_back_to_numpy(monkeypatch, tmp_path):
    """No compiler: one RuntimeWarning, then every op runs its NumPy code with the same results."""
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("GPUOPS_NATIVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setattr(native, "_functions", {})
    X = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    with pytest.warns(RuntimeWarning, match="no C compiler"):
        y = pool.MaxPool(xp, X, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once only
        y2 = pool.MaxPool(xp, X, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    with native.disabled():
        ref = pool.MaxPool(xp, X, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    np.testing.assert_array_equal(y, ref)
    np.testing.assert_array_equal(y2, ref)
    assert native.status()["files"] == {"pool.c": "unavailable"}


def test_compile_error_is_reported_and_falls_back(monkeypatch, tmp_path):
    cc = tmp_path / "badcc"
    cc.write_text("#!/bin/sh\necho 'error: this compiler refuses everything' >&2\nexit 1\n")
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("GPUOPS_NATIVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setattr(native, "_functions", {})
    with pytest.warns(RuntimeWarning, match="refuses everything"):
        assert native.function("conv.c", "depthwise_conv2d_f32", _DEPTHWISE_ARGS) is None


@needs_cc
def test_compiled_once_into_a_private_cache_and_shared_by_threads(monkeypatch, tmp_path):
    cache = tmp_path / "cache"
    monkeypatch.setenv("GPUOPS_NATIVE_CACHE", str(cache))
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setattr(native, "_functions", {})
    got, barrier = [], threading.Barrier(4)

    def first_use():
        barrier.wait()
        got.append(native.function("pool.c", "pool2d_f32", (native.PTR,) * 2 + (native.INT,) * 16))

    threads = [threading.Thread(target=first_use) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4 and all(isinstance(f, ctypes._CFuncPtr) for f in got) and len({id(f) for f in got}) == 1
    assert [p.suffix for p in cache.iterdir()] == [".so"]
    assert cache.stat().st_mode & 0o077 == 0
    assert native.status()["files"] == {"pool.c": "compiled"}


def test_kernel_status_and_argument_checks():
    def failing(*args):
        return 1

    failing.__name__ = "pool2d_f32"
    with pytest.raises(MemoryError, match="pool2d_f32"):
        native.call(failing, 0)
    with pytest.raises(TypeError, match="C-contiguous float32"):
        native.ptr(np.zeros((3, 3), np.float32).T)
