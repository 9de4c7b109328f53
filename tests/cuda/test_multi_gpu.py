"""More than one GPU: the stand-in has two, with CuPy's current-device rules and a pool per device, so
a session on cuda:1 proves that gpuops selects its device for every pool call and every feed."""

import numpy as np
import pytest

import gpuops
from gpuops import device as _device

from tests.test_cuda_path import chain_model, expected_chain

pytestmark = pytest.mark.skipif(_device.cuda_device_count() < 2, reason="needs two CUDA devices (the stand-in has two)")
STANDIN = _device.uses_standin()


@pytest.mark.skipif(not STANDIN, reason="checks the stand-in's own rules")
def test_standin_has_cupys_current_device_rules():
    from gpuops.testing import cuda_standin as sd

    a = sd.xp.asarray(np.arange(3, dtype=np.float32))
    with sd.cuda.Device(1):
        b = sd.xp.asarray(np.arange(3, dtype=np.float32))
        assert sd.cuda.runtime.getDevice() == 1
        with pytest.raises(ValueError, match="Peer access is unavailable"):
            a + b  # an op on another device's array
        c = sd.xp.asarray(a)  # asarray copies another device's array to the current one
        np.testing.assert_array_equal((b + c).get(), [0, 2, 4])
    assert (a.device.id, b.device.id, c.device.id) == (0, 1, 1)
    pool = sd.cuda.MemoryPool()
    with sd.cuda.using_allocator(pool.malloc), sd.cuda.Device(1):
        keep = sd.xp.zeros((1000,), dtype=sd.xp.float32)
        assert pool.used_bytes() >= 4000
    assert pool.used_bytes() == 0  # the pool's methods act on the current device
    with sd.cuda.Device(1):
        assert pool.used_bytes() >= 4000
    del keep


def test_a_session_on_cuda1_runs_there_and_honours_its_memory_limit():
    sess = gpuops.InferenceSession(chain_model(n=4, width=1024), device="cuda:1", memory_limit=2 << 20)
    small = np.random.default_rng(0).standard_normal((8, 1024)).astype(np.float32)
    (y,) = sess.run(None, {"x": small}, output_device="device")
    assert y.device.id == 1 and sess.device.is_native(y)
    np.testing.assert_allclose(sess.device.to_host(y), expected_chain(small, 4), rtol=1e-6)
    st = sess.memory_stats()
    assert st["limit_bytes"] == 2 << 20 and st["peak_bytes"] > 0 and st["pooled_bytes"] > 0
    with pytest.raises(gpuops.OutOfMemoryError, match="cuda:1"):
        sess.run(None, {"x": np.ones((400, 1024), np.float32)})  # 1.6 MB per value: two do not fit
    np.testing.assert_allclose(sess.run(None, {"x": small})[0], expected_chain(small, 4), rtol=1e-6)


def test_a_feed_on_another_gpu_is_copied_not_taken_as_native():
    sess = gpuops.InferenceSession(chain_model(n=2), device="cuda:1")
    x = np.random.default_rng(1).standard_normal((2, 256)).astype(np.float32)
    on0 = gpuops.get_device("cuda:0").asarray(x)
    assert not sess.device.is_native(on0) and gpuops.get_device("cuda:0").is_native(on0)
    assert sess.device.classify(on0) == "other-device"
    (y,) = sess.run(None, {"x": on0})
    np.testing.assert_allclose(y, expected_chain(x, 2), rtol=1e-6)
