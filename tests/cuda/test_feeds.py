"""Feed intake: a feed is classified once (host array, this device, another device, DLPack producer,
Python value) and moved once; what cannot be a tensor is a FeedError on every device."""

import numpy as np
import pytest

import gpuops
from gpuops import device as _device

from tests.test_cuda_path import chain_model, expected_chain

STANDIN = _device.uses_standin()


class Ragged:
    pass


BAD_FEEDS = {
    "None": None, "dict": {"a": 1}, "set": {1.0, 2.0}, "object": Ragged(), "bytes": b"\x00" * 1024,
    "ragged list": [[1.0, 2.0], [3.0]], "list of strings": [["a"] * 256] * 2, "2**80": 2 ** 80,
    "string": "1.5",
}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("name", sorted(BAD_FEEDS))
def test_feeds_that_are_not_tensors_are_feed_errors_on_every_device(device, name):
    sess = gpuops.InferenceSession(chain_model(n=2), device=device)
    with pytest.raises(gpuops.FeedError, match="input 'x'"):
        sess.run(None, {"x": BAD_FEEDS[name]})
    x = np.ones((1, 256), np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], expected_chain(x, 2))  # still usable


def test_python_lists_and_numbers_are_taken_with_the_inputs_dtype():
    sess = gpuops.InferenceSession(chain_model(n=2), device="cuda")
    x = [[float(i) - 100 for i in range(256)]]
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], expected_chain(np.asarray(x, np.float32), 2))


class Producer:
    """Any DLPack producer (torch, jax, ...), here backed by an array it reports on ``device``."""

    def __init__(self, a, device=None):
        self.a, self.device = a, device

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.device or self.a.__dlpack_device__()


@pytest.mark.skipif(not STANDIN, reason="counts the stand-in's transfers")
def test_each_kind_of_feed_moves_once():
    from gpuops.testing import cuda_standin as sd

    sess = gpuops.InferenceSession(chain_model(n=2), device="cuda:1")
    dev = sess.device
    x = np.random.default_rng(2).standard_normal((2, 256)).astype(np.float32)
    on1, on0 = dev.asarray(x), gpuops.get_device("cuda:0").asarray(x)
    cases = {  # feed -> (its class, host->device copies to take it)
        "host": (x, "host", 1),
        "python": (x.tolist(), "python", 1),
        "device": (on1, "device", 0),
        "other-device": (on0, "other-device", 0),  # a peer copy, no host round trip
        "dlpack on cpu": (Producer(x), "dlpack", 1),
        "dlpack on this gpu": (Producer(on1), "dlpack", 0),
    }
    for label, (feed, kind, h2d) in cases.items():
        assert dev.classify(feed) == kind, label
        before = dict(sd.transfers)
        with sd.tally() as t:
            (y,) = sess.run(None, {"x": feed}, output_device="device")
        assert sd.transfers["h2d"] - before.get("h2d", 0) == h2d, label
        assert t.syncs == [], label  # no device read on the way in
        np.testing.assert_allclose(y.get(), expected_chain(x, 2), rtol=1e-6, err_msg=label)
    taken = dev.intake(Producer(on1))
    assert taken.device.id == 1 and np.shares_memory(taken._a, on1._a)  # zero-copy
