"""Device memory of sessions: hooks, out-of-memory mapping, graph memory lifetime."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops

from tests.test_cuda_path import chain_model, expected_chain


def test_two_sessions_memory_hooks_nest_on_one_thread():
    # CuPy keys a thread's memory hooks by name: one name for every session made nesting raise KeyError
    a = gpuops.InferenceSession(chain_model(n=2), device="cuda")
    b = gpuops.InferenceSession(chain_model(n=2), device="cuda")
    x = np.ones((2, 256), np.float32)
    with a.memory.active():
        (y,) = b.run(None, {"x": x})
    np.testing.assert_allclose(y, expected_chain(x, 2))
    assert b.memory_stats()["allocations"] > 0


# -- the stand-in's pool is CuPy's (cupy/cuda/memory.pyx SingleDeviceMemoryPool) --------------------

STANDIN = __import__("gpuops.device", fromlist=["uses_standin"]).uses_standin()
standin_only = pytest.mark.skipif(not STANDIN, reason="checks the stand-in's model of CuPy's pool")
MB = 1 << 20


@pytest.fixture
def sd():
    from gpuops.testing import cuda_standin

    return cuda_standin


def _block(sd, nbytes=MB):
    return sd.xp.empty((nbytes,), dtype=sd.xp.uint8)


@standin_only
def test_a_block_freed_on_one_stream_is_not_reused_by_another(sd):
    # cupy/cuda/memory.pyx: SingleDeviceMemoryPool._malloc takes a chunk from _arena(stream_ident) of
    # the current stream only; PooledMemory.free returns it to the arena it came from (chunk.arena)
    pool = sd.cuda.MemoryPool()
    s = sd.cuda.Stream(non_blocking=True)
    with sd.cuda.using_allocator(pool.malloc):
        a = _block(sd)  # on the legacy default stream
        del a
        assert (pool.used_bytes(), pool.total_bytes(), pool.free_bytes(), pool.n_free_blocks()) == (0, MB, MB, 1)
        with s:
            b = _block(sd)  # another stream: a new block, the default stream's stays cached
            assert (pool.used_bytes(), pool.total_bytes(), pool.n_free_blocks()) == (MB, 2 * MB, 1)
            del b
        assert pool.n_free_blocks() == 2
        c = _block(sd)  # back on the default stream: its own cached block is reused
        assert (pool.used_bytes(), pool.total_bytes(), pool.n_free_blocks()) == (MB, 2 * MB, 1)
        with s:
            d = _block(sd, MB // 2)  # s's block is split: half in use, half cached in s's arena
        assert (pool.used_bytes(), pool.total_bytes(), pool.n_free_blocks()) == (MB + MB // 2, 2 * MB, 1)
        del c
        pool.free_all_blocks(stream=s)  # s's free half belongs to a split block: it stays
        assert (pool.total_bytes(), pool.n_free_blocks()) == (2 * MB, 2)
        pool.free_all_blocks(stream=sd.cuda.Stream.null)  # only the default stream's arena
        assert (pool.total_bytes(), pool.n_free_blocks()) == (MB, 1)
        del d  # the halves merge again, and the whole block can go back to the device
        assert (pool.used_bytes(), pool.n_free_blocks()) == (0, 1)
        pool.free_all_blocks()
        assert (pool.total_bytes(), pool.free_bytes(), pool.n_free_blocks()) == (0, 0, 0)


@standin_only
def test_warm_up_on_one_stream_then_capture_on_another_holds_twice_the_memory(sd):
    # what a graph pool sees when the plan is warmed up on the default stream and captured on a new
    # stream: the capture cannot reuse one warm-up block, the pool holds both runs' buffers until
    # free_all_blocks (a warm-up on the capture stream itself reuses them)
    pool = sd.cuda.MemoryPool()
    s = sd.cuda.Stream(non_blocking=True)
    x = sd.xp.ones((MB // 4,), dtype=sd.xp.float32)
    sd.cuda.runtime.deviceSynchronize()
    with sd.cuda.using_allocator(pool.malloc):
        warm = [x * 2 for _ in range(4)]
        del warm
        assert pool.total_bytes() == 4 * MB and pool.used_bytes() == 0
        with s:
            s.begin_capture()
            captured = [x * 2 for _ in range(4)]
            graph = s.end_capture()
        assert pool.used_bytes() == 4 * MB and pool.total_bytes() == 8 * MB  # twice what the graph uses
        pool.free_all_blocks(stream=sd.cuda.Stream.null)
        assert pool.total_bytes() == 4 * MB
        graph.launch(stream=s)  # the warm-up's blocks were not the graph's: it still runs
        s.synchronize()
        np.testing.assert_array_equal(captured[0].get(), np.full(MB // 4, 2, np.float32))

        other = sd.cuda.MemoryPool()
    with sd.cuda.using_allocator(other.malloc), s:  # warm-up and capture on one stream: one set of blocks
        warm = [x * 2 for _ in range(4)]
        del warm
        s.begin_capture()
        captured2 = [x * 2 for _ in range(4)]
        s.end_capture()
        assert other.total_bytes() == other.used_bytes() == 4 * MB
    del captured, captured2


@standin_only
def test_pool_limit_frees_every_streams_cached_blocks_before_failing_as_cupy(sd):
    # _try_malloc: over the limit, free_all_blocks(None) (every arena) and retry, then OutOfMemoryError
    # with the pool's total (cached blocks included) and the limit, CuPy's message
    pool = sd.cuda.MemoryPool()
    pool.set_limit(size=3 * MB)
    assert pool.get_limit() == 3 * MB
    s = sd.cuda.Stream(non_blocking=True)
    with sd.cuda.using_allocator(pool.malloc):
        with s:
            _block(sd, 2 * MB)  # freed at once: cached in s's arena
        a = _block(sd, 2 * MB)  # over the limit on the default stream: s's cached block is freed first
        assert (pool.total_bytes(), pool.n_free_blocks()) == (2 * MB, 0)
        with pytest.raises(sd.OutOfMemoryError) as info, s:
            _block(sd, 2 * MB)
        assert str(info.value) == (f"Out of memory allocating {2 * MB:,} bytes (allocated so far: {2 * MB:,} "
                                   f"bytes, limit set to: {3 * MB:,} bytes).")
        with pytest.raises(sd.OutOfMemoryError):  # larger than the limit itself
            _block(sd, 4 * MB)
        assert sd.xp.empty((0,), dtype=sd.xp.float32).size == 0  # 0 bytes never touch the pool
        assert pool.used_bytes() == 2 * MB
        del a
    with pytest.raises(ValueError, match="fraction out of range"):
        pool.set_limit(fraction=1.5)
    with pytest.raises(ValueError, match="cannot be specified at one time"):
        pool.set_limit(size=1, fraction=0.5)
    with pytest.raises(ValueError, match="size out of range"):
        pool.set_limit(size=-1)
    pool.set_limit(fraction=0.5)
    assert pool.get_limit() == sd.DEVICE_MEMORY // 2
    assert str(sd.OutOfMemoryError(512, 1024)) == "Out of memory allocating 512 bytes (allocated so far: 1,024 bytes)."


@standin_only
def test_device_memory_is_shared_by_pools_and_a_failed_cudamalloc_is_retried(sd, monkeypatch):
    # cudaMalloc failing with cudaErrorMemoryAllocation: the pool frees its cached blocks, retries
    # (twice, the second time after a garbage collection), then raises OutOfMemoryError
    monkeypatch.setattr(sd, "DEVICE_MEMORY", sd._device_bytes[0] + 3 * MB)
    first, second = sd.cuda.MemoryPool(), sd.cuda.MemoryPool()
    with sd.cuda.using_allocator(first.malloc):
        _block(sd, 2 * MB)  # freed at once: cached
    free, total = sd.cuda.runtime.memGetInfo()
    assert free == MB and total == sd.DEVICE_MEMORY
    with sd.cuda.using_allocator(second.malloc):
        with pytest.raises(sd.OutOfMemoryError, match=r"allocated so far: 0 bytes\)\.$"):
            _block(sd, 2 * MB)  # the first pool's cached block is not this pool's to free
        first.free_all_blocks()
        kept = _block(sd, 2 * MB)
        _block(sd, MB)  # cached on the default stream
        assert sd.cuda.runtime.memGetInfo()[0] == 0
        s = sd.cuda.Stream(non_blocking=True)
        with sd.inject_fault("malloc", lambda: sd.CUDARuntimeError(2), times=2), s:
            on_s = _block(sd, MB)  # a new block: cudaMalloc fails twice (the cached block is freed), then succeeds
        assert (second.total_bytes(), second.n_free_blocks()) == (3 * MB, 0)
        with sd.inject_fault("malloc", sd.CUDARuntimeError(2)), s, pytest.raises(sd.OutOfMemoryError):
            _block(sd, MB // 2)
        del kept, on_s
    second.free_all_blocks()


@pytest.mark.parametrize("make,oom", [
    ("CuFFTError(2)", True), ("CuFFTError(6)", False), ("CUDADriverError(2)", True), ("CUDADriverError(719)", False),
    ("CUBLASError(3)", True), ("CUBLASError(13)", False), ("CUSOLVERError(2)", True), ("CUSOLVERError(3)", False),
    ("CUDARuntimeError(2)", True), ("CUDARuntimeError(700)", False), ("OutOfMemoryError(512, 0)", True),
])
def test_every_cuda_library_out_of_memory_is_classified(make, oom):
    # the exceptions and codes of cupy/cuda/cufft.pyx (CuFFTError.result), cupy_backends/cuda/api/
    # driver.pyx and runtime.pyx, cupy_backends/cuda/libs/cublas.pyx and cusolver.pyx
    import pickle

    from gpuops.testing import cuda_standin as sd
    from gpuops.memory import is_out_of_memory
    from gpuops.onnx.session import is_out_of_memory as from_session

    e = eval(make, vars(sd))
    assert is_out_of_memory(e) is oom and from_session is is_out_of_memory
    again = pickle.loads(pickle.dumps(e))  # __reduce__ as CuPy's: the code (and sizes) again
    assert type(again) is type(e) and str(again) == str(e)


def test_cuda_library_errors_carry_cupys_names_attributes_and_messages():
    import pickle

    from gpuops.testing import cuda_standin as sd

    e = sd.cuda.cufft.CuFFTError(2)
    assert e.result == 2 and not hasattr(e, "status") and str(e) == "CUFFT_ALLOC_FAILED"
    e = sd.cuda.driver.CUDADriverError(2)
    assert e.status == 2 and str(e) == "CUDA_ERROR_OUT_OF_MEMORY: out of memory"
    assert str(sd.cuda.cublas.CUBLASError(3)) == "CUBLAS_STATUS_ALLOC_FAILED"
    assert str(sd.cuda.cusolver.CUSOLVERError(2)) == "CUSOLVER_STATUS_ALLOC_FAILED"
    assert str(sd.cuda.runtime.CUDARuntimeError(2)) == "cudaErrorMemoryAllocation: out of memory"
    assert str(pickle.loads(pickle.dumps(sd.CuFFTError(2)))) == "CUFFT_ALLOC_FAILED"


def _dft_model():
    g = helper.make_graph([helper.make_node("DFT", ["x"], ["y"], name="dft", axis=1)], "dft",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _matmul_model():
    w = helper.make_tensor("w", TensorProto.FLOAT, [256, 8], np.ones((256, 8), np.float32).ravel())
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], initializer=[w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])


@standin_only
@pytest.mark.parametrize("site,error,model,node", [
    ("cufft", "CuFFTError(2)", _dft_model, r"node 'dft' \(DFT\)"),
    ("launch", "CUDADriverError(2)", chain_model, r"node 'relu0' \(Relu\)"),
    ("cublas", "CUBLASError(3)", _matmul_model, r"node 'matmul' \(MatMul\)"),
])
def test_injected_library_out_of_memory_is_a_gpuops_error_and_the_session_survives(sd, site, error, model, node):
    sess = gpuops.InferenceSession(model(), device="cuda")
    x = np.ones((2, 8, 1) if model is _dft_model else (2, 256), np.float32)
    want = sess.run(None, {"x": x})[0]
    with sd.inject_fault(site, lambda: eval(error, vars(sd))):
        with pytest.raises(gpuops.OutOfMemoryError, match=node + " ran out of device memory"):
            sess.run(None, {"x": x})
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want)


@standin_only
def test_an_injected_launch_failure_that_is_not_out_of_memory_stays_a_node_error(sd):
    sess = gpuops.InferenceSession(chain_model(n=2), device="cuda")
    with sd.inject_fault("launch", sd.CUDADriverError(719), times=1):
        with pytest.raises(gpuops.NodeError, match="CUDA_ERROR_LAUNCH_FAILED") as info:
            sess.run(None, {"x": np.ones((2, 256), np.float32)})
    assert not isinstance(info.value, gpuops.OutOfMemoryError)


@standin_only
def test_a_feed_upload_out_of_memory_is_a_gpuops_error(sd):
    sess = gpuops.InferenceSession(chain_model(n=2), device="cuda")
    x = np.ones((2, 256), np.float32)
    sess.run(None, {"x": x})
    sess.memory.release_cached()  # the feed needs a new block
    with sd.inject_fault("malloc", lambda: sd.CUDARuntimeError(2)), pytest.raises(gpuops.OutOfMemoryError):
        sess.run(None, {"x": x})
