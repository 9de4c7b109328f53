"""Streams on the stand-in: work is ordered per stream; a non-blocking stream is not ordered against
the legacy default stream, so reading what the other wrote without an event or a sync raises."""

import numpy as np
import pytest

import gpuops
from gpuops import device as _device

from tests.test_cuda_path import chain_model, expected_chain

STANDIN = _device.uses_standin()


@pytest.fixture
def sd():
    from gpuops.testing import cuda_standin

    return cuda_standin


@pytest.mark.skipif(not STANDIN, reason="stream ordering checks are a stand-in feature")
def test_unordered_cross_stream_reads_raise_and_events_or_syncs_order_them(sd):
    xp = sd.xp
    a = xp.zeros((4,), dtype=xp.float32)  # written on the legacy default stream
    s = sd.cuda.Stream(non_blocking=True)
    with s, pytest.raises(sd.StreamRaceError, match="legacy default"):
        a + 1
    e = sd.cuda.Event()
    e.record()  # on the default stream, after the write
    s.wait_event(e)
    with s:
        b = a + 1  # ordered by the event
    with pytest.raises(sd.StreamRaceError, match="non-blocking"):
        b.get()  # b was written on s, read on the default stream: nothing orders them
    s.synchronize()
    np.testing.assert_array_equal(b.get(), np.ones(4))

    blocking = sd.cuda.Stream()
    c = xp.ones((4,), dtype=xp.float32)
    with blocking:
        d = c * 2  # the legacy default stream orders blocking streams both ways
    np.testing.assert_array_equal((d + 0).get(), np.full(4, 2.0))

    other = sd.cuda.Stream(non_blocking=True)
    with s:
        f = xp.ones((4,), dtype=xp.float32)
    with other, pytest.raises(sd.StreamRaceError):
        f.get()  # .get() enqueues on the current stream, here `other`
    sd.cuda.runtime.deviceSynchronize()
    with other:
        np.testing.assert_array_equal(f.get(), np.ones(4))


@pytest.mark.skipif(not STANDIN, reason="stream ordering checks are a stand-in feature")
def test_graph_launch_reads_are_checked_on_the_launch_stream(sd):
    xp = sd.xp
    x = xp.zeros((3,), dtype=xp.float32)
    s = sd.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        y = x * 2
        g = s.end_capture()
    x[...] = xp.asarray(np.arange(3, dtype=np.float32))  # a new input, written on the default stream
    with pytest.raises(sd.StreamRaceError):
        g.launch(stream=s)
    e = sd.cuda.Event()
    e.record()
    s.wait_event(e)
    g.launch(stream=s)
    s.synchronize()
    np.testing.assert_array_equal(y.get(), [0, 2, 4])


def test_cuda_graph_replays_see_each_new_feed():
    # the feeds are copied into the graph's inputs on the current stream; the graph runs on its own
    # non-blocking stream, which must wait for those copies (old code: a replay could read the last feed)
    sess = gpuops.InferenceSession(chain_model(n=4), device="cuda", cuda_graph=True)
    rng = np.random.default_rng(7)
    for _ in range(4):
        x = rng.standard_normal((3, 256)).astype(np.float32)
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(y, expected_chain(x, 4), rtol=1e-6)
    assert sess.cuda_graph_status()["captured"]


@pytest.mark.skipif(not STANDIN, reason="stream ordering checks are a stand-in feature")
def test_streams_waiting_on_each_other_and_host_waits(sd):
    """Two streams may wait on each other (each replay's inputs wait for the caller's stream, which
    waits for the replay's outputs); a host wait on one reaches what it waited for, at the points
    where it waited, and no further."""
    xp = sd.xp
    a, b = sd.cuda.Stream(non_blocking=True), sd.cuda.Stream(non_blocking=True)
    for _ in range(3):  # mutual waits, as many times as a session replays
        with a:
            x = xp.ones((4,), dtype=xp.float32)
        ea = a.record()
        b.wait_event(ea)
        with b:
            y = x * 2
        eb = b.record()
        a.wait_event(eb)
    with b:
        z = xp.zeros((4,), dtype=xp.float32)  # after b's last wait: a host wait on a does not cover it
    a.synchronize()
    with sd.cuda.Stream(non_blocking=True):
        np.testing.assert_array_equal(y.get(), np.full(4, 2.0))  # b's work up to the event a waited for
        with pytest.raises(sd.StreamRaceError):
            z.get()
    b.synchronize()
    with sd.cuda.Stream(non_blocking=True):
        np.testing.assert_array_equal(z.get(), np.zeros(4))
