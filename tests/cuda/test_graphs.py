"""CUDA graphs and device memory failures: graph memory lifetime, capture failures naming their node,
out-of-memory in its CUDA forms, and one session run from many threads. They run on real CuPy as on
the stand-in, but for the failures injected into the stand-in's CUDA."""


import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops

from tests.ops.common import make_model
from tests.test_cuda_path import chain_model, expected_chain

from .both import STANDIN, run_in_threads

injected = pytest.mark.skipif(not STANDIN, reason="injects failures into the stand-in's CUDA")


@pytest.fixture
def sd():
    from gpuops.testing import cuda_standin

    return cuda_standin


def softmax_model():
    nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=-1, name="softmax"),
             helper.make_node("MatMul", ["s", "w"], ["y"], name="matmul")]
    w = np.linspace(-1, 1, 64 * 16, dtype=np.float32).reshape(64, 16)
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])], inits=[("w", w)]), w


def softmax_expected(x, w):
    e = np.exp(x - x.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ w


def test_releasing_cached_memory_keeps_what_a_live_graph_writes_into():
    # Softmax's temporaries are freed during the capture, yet the graph keeps running kernels on their
    # blocks: freeing the session's cached memory (gpuops does it after an out-of-memory error, CuPy on its
    # own retry) must not give those blocks back while the graph lives
    model, w = softmax_model()
    sess = gpuops.InferenceSession(model, device="cuda", cuda_graph=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], softmax_expected(x, w), rtol=1e-5, atol=1e-6)
    sess.memory.release_cached()
    for _ in range(2):
        x = rng.standard_normal((4, 64)).astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], softmax_expected(x, w), rtol=1e-5, atol=1e-6)
    assert sess.cuda_graph_status()["captured"]


def test_close_releases_the_graph_and_its_buffers():
    model, _ = softmax_model()
    sess = gpuops.InferenceSession(model, device="cuda", cuda_graph=True)
    sess.run(None, {"x": np.ones((2, 64), np.float32)})
    pool = sess._graphs.current.pool  # (CuPy's Graph takes no weak reference: its pool tells)
    sess.close()
    assert not sess._graphs.graphs
    with sess.device.lib.cuda.Device(sess.device.index):
        assert pool.used_bytes() == 0 and pool.total_bytes() == 0


def test_a_capture_failure_names_the_node_and_op_not_the_invalidated_capture():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("NonZero", ["r"], ["y"], name="nz")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                       [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    sess = gpuops.InferenceSession(model, device="cuda", cuda_graph=True)
    x = np.array([1.0, -1.0, 0.0, 2.0], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.stack(np.nonzero(np.maximum(x, 0))))
    st = sess.cuda_graph_status()
    assert st["captured"] is False and st["blocking_node"] == "nz"
    assert "node 'nz' (NonZero)" in st["reason"] and "capture" in st["reason"]
    assert "Invalidated" not in st["reason"]  # end_capture's own error must not replace the cause


@injected
@pytest.mark.parametrize("error", ["OutOfMemoryError", "cudaErrorMemoryAllocation", "CUBLAS_STATUS_ALLOC_FAILED"])
def test_device_out_of_memory_in_every_cuda_form_is_a_gpuops_error_naming_the_node(sd, monkeypatch, error):
    raise_it = {
        "OutOfMemoryError": lambda: sd.OutOfMemoryError(1 << 30, 0, 1 << 20),
        "cudaErrorMemoryAllocation": lambda: sd.CUDARuntimeError(2),
        "CUBLAS_STATUS_ALLOC_FAILED": lambda: sd.cuda.cublas.CUBLASError(3),
    }[error]
    model, w = softmax_model()
    sess = gpuops.InferenceSession(model, device="cuda")
    real = sd.xp.matmul
    calls = []

    def failing_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise raise_it()
        return real(*args, **kwargs)

    monkeypatch.setattr(sd.xp, "matmul", failing_once)
    x = np.ones((2, 64), np.float32)
    with pytest.raises(gpuops.OutOfMemoryError, match=r"node 'matmul' \(MatMul\) ran out of device memory"):
        sess.run(None, {"x": x})
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], softmax_expected(x, w), rtol=1e-5)  # still usable


@injected
def test_a_cuda_error_that_is_not_out_of_memory_stays_a_node_error(sd, monkeypatch):
    model, _ = softmax_model()
    sess = gpuops.InferenceSession(model, device="cuda")
    monkeypatch.setattr(sd.xp, "matmul", lambda *a, **k: (_ for _ in ()).throw(sd.cuda.cublas.CUBLASError(13)))
    with pytest.raises(gpuops.NodeError, match="EXECUTION_FAILED") as info:
        sess.run(None, {"x": np.ones((2, 64), np.float32)})
    assert not isinstance(info.value, gpuops.OutOfMemoryError)


@injected
def test_running_out_of_host_memory_copying_outputs_is_a_gpuops_error(sd, monkeypatch):
    sess = gpuops.InferenceSession(chain_model(n=2), device="cuda")
    real = sd.ndarray.get

    def no_memory(self, *a, **k):
        raise MemoryError("Unable to allocate 64.0 GiB for an array")

    monkeypatch.setattr(sd.ndarray, "get", no_memory)
    with pytest.raises(gpuops.OutOfMemoryError, match="output 'y'"):
        sess.run(None, {"x": np.ones((2, 256), np.float32)})
    monkeypatch.setattr(sd.ndarray, "get", real)
    x = np.ones((2, 256), np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], expected_chain(x, 2))


@pytest.mark.parametrize("device, cuda_graph", [("cpu", False), ("cuda", False), ("cuda", True)])
def test_one_session_run_from_eight_threads_gives_the_single_thread_results(device, cuda_graph):
    model, w = softmax_model()
    sess = gpuops.InferenceSession(model, device=device, cuda_graph=cuda_graph)
    rng = np.random.default_rng(1)
    feeds = [rng.standard_normal((4 + i % 2, 64)).astype(np.float32) for i in range(16)]
    want = [sess.run(None, {"x": x})[0] for x in feeds]
    got = {}

    def worker(t):
        for r in range(6):
            i = (t * 5 + r) % len(feeds)
            got[(t, r)] = (i, sess.run(None, {"x": feeds[i]})[0])

    errors = run_in_threads(worker)
    assert not errors, errors[:3]
    assert len(got) == 48
    for i, y in got.values():
        np.testing.assert_array_equal(y, want[i])
