"""GEMMs inside a CUDA graph capture: CuPy refuses cuBLAS there, gpuops' own handle does not.

Runs on real CuPy when a GPU is present (the capture and replay are real) and on the stand-in otherwise.
"""

import numpy as np
import pytest

from gpuops import cublas, device as _device


@pytest.fixture
def dev():
    return _device.get_device("cuda")


def _capture(dev, fn):
    """Run ``fn`` inside a capture on a new stream with its own CaptureBlas; (graph, result, stream)."""
    lib = dev.lib
    stream = lib.cuda.Stream(non_blocking=True)
    blas = cublas.CaptureBlas(dev, stream)
    with stream:
        stream.begin_capture()
        try:
            out = fn(cublas.capture_namespace(dev.xp, blas))
        except BaseException:
            try:
                stream.end_capture()
            except Exception:
                pass
            raise
        graph = stream.end_capture()
    return graph, out, stream, blas


def test_cupy_matmul_is_refused_inside_a_capture(dev):
    a = dev.xp.asarray(np.ones((4, 4), np.float32))
    stream = dev.lib.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        with pytest.raises(NotImplementedError, match="cuBLAS"):
            dev.xp.matmul(a, a)
        stream.end_capture()


SHAPES = [((5, 7), (7, 3)), ((2, 5, 7), (7, 3)), ((2, 5, 7), (2, 7, 3)), ((3, 1, 5, 7), (4, 7, 2)),
          ((7,), (7, 3)), ((5, 7), (7,)), ((7,), (7,)), ((0, 7), (7, 3)), ((5, 0), (0, 3))]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("sa,sb", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_capture_matmul_matches_numpy_and_replays(dev, dtype, sa, sb):
    rng = np.random.default_rng(0)
    ha, hb = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
    a, b = dev.xp.asarray(ha), dev.xp.asarray(hb)
    graph, out, stream, blas = _capture(dev, lambda xp: xp.matmul(a, b))
    want = lambda: np.matmul(ha.astype(np.float64), hb.astype(np.float64))  # noqa: E731
    # float32 accumulation over K terms: |err| <= K eps sum|a_i b_i| (float16 rounds the result too)
    k = sa[-1]
    eps = np.finfo(dtype).eps if dtype != np.float16 else np.finfo(np.float32).eps
    bound = lambda: (k * eps * np.matmul(np.abs(ha).astype(np.float64), np.abs(hb).astype(np.float64))  # noqa: E731
                     + (np.abs(want()) * np.finfo(np.float16).eps if dtype == np.float16 else 0) + 1e-30)
    for step in range(2):
        if step:  # new values in the same buffers: the replay recomputes
            ha[...] = rng.standard_normal(sa).astype(dtype)
            a[...] = dev.xp.asarray(ha)
        ready = dev.lib.cuda.Event()
        ready.record()
        stream.wait_event(ready)
        graph.launch(stream=stream)
        stream.synchronize()
        got = _device.to_host(out)
        assert got.dtype == dtype and got.shape == want().shape
        assert np.all(np.abs(got.astype(np.float64) - want()) <= bound())
    blas.close()


def test_transposed_operand_reads_in_place(dev):
    rng = np.random.default_rng(1)
    ha, hw = rng.standard_normal((6, 8)).astype(np.float32), rng.standard_normal((5, 8)).astype(np.float32)
    a, w = dev.xp.asarray(ha), dev.xp.asarray(hw)
    graph, out, stream, blas = _capture(dev, lambda xp: xp.matmul(a, w.T))  # Gemm with transB=1
    graph.launch(stream=stream)
    stream.synchronize()
    np.testing.assert_allclose(_device.to_host(out), ha @ hw.T, rtol=1e-5, atol=1e-5)
    blas.close()


def test_integer_matmul_is_the_namespace_s(dev):
    ha = np.arange(12, dtype=np.int32).reshape(3, 4)
    a = dev.xp.asarray(ha)
    blas = cublas.CaptureBlas(dev, dev.lib.cuda.get_current_stream())
    np.testing.assert_array_equal(_device.to_host(blas.matmul(a, a.T)), ha @ ha.T)
    blas.close()


def test_out_and_mismatched_core_dimension(dev):
    blas = cublas.CaptureBlas(dev, dev.lib.cuda.get_current_stream())  # its GEMMs ordered after the writes
    a = dev.xp.asarray(np.ones((2, 3), np.float32))
    out = dev.xp.zeros((2, 2), dtype=dev.xp.float32)
    assert blas.matmul(a, a.T, out=out) is out
    np.testing.assert_array_equal(_device.to_host(out), np.full((2, 2), 3, np.float32))
    with pytest.raises(ValueError, match="core dimension"):
        blas.matmul(a, a)
    blas.close()


@pytest.mark.skipif(not _device.uses_standin(), reason="the stand-in's record of cuBLAS's capture rules")
def test_standin_enforces_cublas_capture_rules(dev):
    api = dev.backend.cublas_api()
    a = dev.xp.asarray(np.ones((2, 2), np.float32))
    c = dev.xp.zeros((2, 2), dtype=dev.xp.float32)
    h = api.create()
    stream = dev.lib.cuda.Stream(non_blocking=True)
    with stream:  # the handle still on the default stream, no workspace
        stream.begin_capture()
        with pytest.raises(Exception, match="capturing"):
            api.gemm_strided_batched(h, 0, 0, 2, 2, 2, 1.0, a, 2, 0, a, 2, 0, 0.0, c, 2, 0, 1)
        with pytest.raises(Exception):
            stream.end_capture()
    api.set_stream(h, stream)
    with stream:
        stream.begin_capture()
        with pytest.raises(Exception):  # no workspace: cuBLAS would allocate inside the capture
            api.gemm_strided_batched(h, 0, 0, 2, 2, 2, 1.0, a, 2, 0, a, 2, 0, 0.0, c, 2, 0, 1)
        stream.end_capture()
    with pytest.raises(Exception):  # a leading dimension shorter than a column
        api.gemm_strided_batched(h, 0, 0, 2, 2, 2, 1.0, a, 1, 0, a, 2, 0, 0.0, c, 2, 0, 1)
    api.destroy(h)
    with pytest.raises(Exception):
        api.gemm_strided_batched(h, 0, 0, 2, 2, 2, 1.0, a, 2, 0, a, 2, 0, 0.0, c, 2, 0, 1)
