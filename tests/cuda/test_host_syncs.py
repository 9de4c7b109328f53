"""Host-sync accounting: the stand-in counts every sync CuPy would make (device reads, and results whose
shape depends on device data, also inside array-api-compat), and the session reports them per run.
The runs' outputs and graph-capture status are checked on real CuPy too; the counts on the stand-in."""

import threading

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops

from tests.ops.common import make_model
from tests.test_cuda_path import chain_model, expected_chain

from .both import STANDIN

standin_only = pytest.mark.skipif(not STANDIN, reason="the stand-in's own sync accounting")


@pytest.fixture
def sd():
    from gpuops.testing import cuda_standin

    return cuda_standin


def dev(a):
    return gpuops.get_device("cuda").asarray(np.asarray(a))


@standin_only
def test_array_api_clip_runs_on_standin_arrays_and_its_mask_assignments_sync(sd):
    x = np.array([-2.0, 0.5, 3.0, np.nan], np.float32)
    with sd.tally() as t:
        got = sd.xp.clip(dev(x), 0.0, 1.0)
    np.testing.assert_array_equal(got.get(), np.clip(x, 0, 1))
    # array-api-compat's CuPy clip: per bound one mask read and one mask write, as on a GPU
    assert t.syncs == ["boolean-mask indexing", "boolean-mask assignment"] * 2
    assert t.launches > 0


SYNCING = {
    "mask getitem": lambda xp, a, i: a[a > 0],
    "mask setitem": lambda xp, a, i: a.__setitem__(a > 0, 0.0),
    "nonzero": lambda xp, a, i: xp.nonzero(a),
    "argwhere": lambda xp, a, i: xp.argwhere(a),
    "flatnonzero": lambda xp, a, i: xp.flatnonzero(a),
    "where(condition)": lambda xp, a, i: xp.where(a > 0),
    "unique_values": lambda xp, a, i: xp.unique_values(a),
    "unique_counts": lambda xp, a, i: xp.unique_counts(a),
    "bincount": lambda xp, a, i: xp.bincount(i),
    "bincount minlength": lambda xp, a, i: xp.bincount(i, minlength=10),
    "compress": lambda xp, a, i: xp.compress(a > 0, a),
    "extract": lambda xp, a, i: xp.extract(a > 0, a),
    "repeat device repeats": lambda xp, a, i: xp.repeat(a, i),
    "method repeat": lambda xp, a, i: a.repeat(i),
    "item": lambda xp, a, i: a[0].item(),
    "float": lambda xp, a, i: float(a[0]),
    "tolist": lambda xp, a, i: a.tolist(),
    "iteration": lambda xp, a, i: list(a),
}
NOT_SYNCING = {
    "where(c, x, y)": lambda xp, a, i: xp.where(a > 0, a, 0.0),
    "take": lambda xp, a, i: xp.take(a, i),
    "integer index": lambda xp, a, i: a[i],
    "count_nonzero": lambda xp, a, i: xp.count_nonzero(a),
    "repeat host repeats": lambda xp, a, i: xp.repeat(a, 2),
    "minimum/maximum": lambda xp, a, i: xp.minimum(xp.maximum(a, 0.0), 1.0),
    "bincount empty": lambda xp, a, i: xp.bincount(i[:0]),
}


@standin_only
@pytest.mark.parametrize("name", sorted(SYNCING))
def test_each_data_dependent_op_counts_one_sync(sd, name):
    a, i = dev(np.array([1.0, -1.0, 2.0], np.float32)), dev(np.array([0, 2, 1], np.int64))
    before = sd.sync_count()
    with sd.tally() as t:
        SYNCING[name](sd.xp, a, i)
    assert len(t.syncs) == 1 and sd.sync_count() == before + 1, t.syncs


@standin_only
@pytest.mark.parametrize("name", sorted(NOT_SYNCING))
def test_device_only_ops_do_not_sync(sd, name):
    a, i = dev(np.array([1.0, -1.0, 2.0], np.float32)), dev(np.array([0, 2, 1], np.int64))
    with sd.tally() as t, sd.strict(shapes=True):
        out = NOT_SYNCING[name](sd.xp, a, i)
    assert t.syncs == [] and isinstance(out, sd.ndarray)


@standin_only
def test_strict_regions_and_captures_raise_on_syncs(sd):
    a = dev(np.array([1.0, -1.0], np.float32))
    with sd.strict(shapes=True), pytest.raises(sd.HostSyncError, match="boolean-mask"):
        sd.xp.clip(a, 0.0, 1.0)
    with sd.strict(shapes=True), pytest.raises(sd.HostSyncError, match="nonzero"):
        sd.xp.nonzero(a)
    with sd.strict():  # explicit copies are what strict regions allow
        np.testing.assert_array_equal(a.get(), [1, -1])
    with sd.strict(), pytest.raises(sd.HostSyncError, match="item"):
        a[0].item()
    s = sd.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        with pytest.raises(sd.StreamCaptureError, match="nonzero"):
            sd.xp.nonzero(a)
        with pytest.raises(sd.StreamCaptureError, match="get"):
            a.get()  # even an explicit copy: CuPy refuses it during a capture
        with pytest.raises(sd.StreamCaptureError, match="Invalidated"):
            s.end_capture()  # as CUDA: a capture that saw an error cannot be ended into a graph
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(a)


@standin_only
def test_sync_counts_are_per_thread(sd):
    a = dev(np.array([1.0, -1.0], np.float32))
    before = sd.sync_count()
    seen = []
    th = threading.Thread(target=lambda: (a[0].item(), seen.append(sd.sync_count())))
    th.start()
    th.join()
    assert seen == [1] or seen[0] >= 1
    assert sd.sync_count() == before


def nonzero_model():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("NonZero", ["r"], ["y"], name="nz")]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                      [helper.make_tensor_value_info("y", TensorProto.INT64, None)])


def test_profile_reports_host_syncs_and_the_nodes_that_made_them(tmp_path):
    x = np.array([1.0, -1.0, 0.0, 2.0], np.float32)
    for device in ("cpu", "cuda"):
        sess = gpuops.InferenceSession(nonzero_model(), device=device)
        (y,) = sess.run(None, {"x": x}, profile=True)
        np.testing.assert_array_equal(y, np.stack(np.nonzero(np.maximum(x, 0))))
        prof = sess.last_profile
        assert prof["device"] == str(sess.device)
        assert [r["node"] for r in prof["nodes"]] == ["relu", "nz"]
        by_node = {r["node"]: r["host_syncs"] for r in prof["nodes"]}
        if device == "cuda" and not STANDIN:  # CuPy: gpuops' own transfers only, launches uncounted
            assert by_node["relu"] == 0 and prof["kernel_launches"] is None
        elif device == "cuda":  # NonZero sizes its output from device data: at least one sync, there only
            assert by_node["relu"] == 0 and by_node["nz"] >= 1
            assert prof["host_syncs"] == {"count": by_node["nz"], "nodes": ["nz"]}
            assert isinstance(prof["kernel_launches"], int) and prof["kernel_launches"] >= 2
        else:
            assert prof["host_syncs"] == {"count": 0, "nodes": []} and prof["kernel_launches"] is None
        sess.save_profile(tmp_path / "p.json")
        import json

        assert json.loads((tmp_path / "p.json").read_text()) == prof


def test_a_light_chain_has_zero_syncs_between_upload_and_download():
    sess = gpuops.InferenceSession(chain_model(n=6), device="cuda")
    x = np.random.default_rng(0).standard_normal((2, 256)).astype(np.float32)
    (y,) = sess.run(None, {"x": x}, profile=True)
    np.testing.assert_allclose(y, expected_chain(x, 6), rtol=1e-6)
    assert sess.last_profile["host_syncs"] == {"count": 0, "nodes": []}
    if STANDIN:  # CuPy counts no launches
        assert sess.last_profile["kernel_launches"] >= 6


def test_cuda_graph_status_reports_capture_and_the_blocking_node():
    sess = gpuops.InferenceSession(chain_model(n=4), device="cuda", cuda_graph=True)
    assert sess.cuda_graph_status()["captured"] is False
    sess.run(None, {"x": np.ones((2, 256), np.float32)})
    assert sess.cuda_graph_status() == {"captured": True, "blocking_node": None, "reason": None}

    sess = gpuops.InferenceSession(nonzero_model(), device="cuda", cuda_graph=True)
    x = np.array([1.0, -1.0, 0.0, 2.0], np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.stack(np.nonzero(np.maximum(x, 0))))
    st = sess.cuda_graph_status()
    assert st["captured"] is False and st["blocking_node"] == "nz"
    assert "capture" in st["reason"]

    st = gpuops.InferenceSession(chain_model(n=2), device="cpu").cuda_graph_status()
    assert st["captured"] is False and "CUDA" in st["reason"]


@standin_only
def test_an_op_that_declares_its_syncs_may_sync_in_a_strict_region(sd):
    sess = gpuops.InferenceSession(nonzero_model(), device="cuda")
    x = np.array([1.0, -1.0, 0.0, 2.0], np.float32)
    with sd.strict(shapes=True), sd.tally() as t:  # NonZero declares syncs=: counted, not refused
        (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.stack(np.nonzero(np.maximum(x, 0))))
    assert "nonzero()" in t.syncs
    with sd.strict(shapes=True), pytest.raises(sd.HostSyncError):
        sd.xp.nonzero(dev(x))  # outside such an op, the same call is refused
