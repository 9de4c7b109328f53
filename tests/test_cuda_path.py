"""The CUDA path: residency, explicit transfers only at the boundaries, memory pool, limits, profiler.

These run on real CuPy when a GPU is present and on the CPU stand-in otherwise (see conftest.py).
"""

import json

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops
from gpuops import device as _device

from .conformance.harness import device_guard

STANDIN = _device.uses_standin()


def chain_model(n=12, width=256):
    """x -> Relu -> Mul(2) -> Relu -> ... : n nodes whose intermediates are each dead after one step."""
    nodes, prev = [], "x"
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        if i % 2:
            nodes.append(helper.make_node("Mul", [prev, "two"], [out], name=f"mul{i}"))
        else:
            nodes.append(helper.make_node("Relu", [prev], [out], name=f"relu{i}"))
        prev = out
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", width])], initializer=[two])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])


def expected_chain(x, n=12):
    for i in range(n):
        x = x * 2 if i % 2 else np.maximum(x, 0)
    return x


def test_cuda_run_matches_cpu_and_returns_host_arrays():
    x = np.random.default_rng(0).standard_normal((4, 256)).astype(np.float32)
    sess = gpuops.InferenceSession(chain_model(), device="cuda")
    assert sess.device.kind == "cuda"
    with device_guard("cuda"):
        (y,) = sess.run(None, {"x": x})
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, expected_chain(x), rtol=1e-6)


@pytest.mark.skipif(not STANDIN, reason="transfer counting is a stand-in feature")
def test_no_implicit_transfers_and_explicit_ones_only_at_the_boundaries():
    from gpuops.testing import cuda_standin

    sess = gpuops.InferenceSession(chain_model(), device="cuda")
    x = np.ones((2, 256), np.float32)
    before = dict(cuda_standin.transfers)
    with cuda_standin.strict():  # any bool()/int()/float()/.item()/np.asarray() on a device array raises
        sess.run(None, {"x": x})
    delta = {k: cuda_standin.transfers[k] - before.get(k, 0) for k in ("h2d", "d2h")}
    assert delta == {"h2d": 1, "d2h": 1}  # one feed in, one output out; weights were uploaded at creation


@pytest.mark.skipif(not STANDIN, reason="checks the stand-in's own refusal")
def test_standin_refuses_implicit_conversion_like_cupy():
    from gpuops.testing import cuda_standin

    a = gpuops.get_device("cuda").asarray(np.arange(3, dtype=np.float32))
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(a)
    with pytest.raises(TypeError):
        np.add(a, 1)
    with cuda_standin.strict(), pytest.raises(cuda_standin.ImplicitTransferError):
        bool(a[0] > 0)
    np.testing.assert_array_equal(a.get(), [0, 1, 2])


def test_device_resident_io():
    sess = gpuops.InferenceSession(chain_model(), device="cuda")
    dev = sess.device
    x = np.random.default_rng(1).standard_normal((3, 256)).astype(np.float32)
    xd = dev.asarray(x)
    (yd,) = sess.run(None, {"x": xd}, output_device="device")
    assert dev.is_native(yd)
    np.testing.assert_allclose(dev.to_host(yd), expected_chain(x), rtol=1e-6)
    with pytest.raises(gpuops.GpuopsError, match="output_device"):
        sess.run(None, {"x": x}, output_device="gpu0")


def test_memory_stats_show_reuse_and_a_peak_well_under_all_intermediates():
    sess = gpuops.InferenceSession(chain_model(n=16, width=4096), device="cuda")
    x = np.ones((64, 4096), np.float32)
    sess.run(None, {"x": x})
    sess.run(None, {"x": x})
    st = sess.memory_stats()
    one = x.nbytes
    assert st["intermediates_total_bytes"] >= 16 * one
    # the first node reads the feed (never written over); the 15 after it write into their input
    assert st["in_place_outputs"] == 15
    assert st["planned_peak_bytes"] == 2 * one  # feed + the first node's output
    assert st["reuses"] > 0  # the second run's blocks come from the pool
    assert st["weights_bytes"] == 4
    assert st["peak_bytes"] - st["weights_bytes"] <= 2 * one + 1024
    assert st["pooled_bytes"] >= st["current_bytes"]


def test_memory_limit_turns_oom_into_a_gpuops_error_and_the_session_survives():
    sess = gpuops.InferenceSession(chain_model(n=4, width=1024), device="cuda", memory_limit=2 << 20)
    with pytest.raises(gpuops.OutOfMemoryError, match=r"node '(relu|mul)\d+' \((Relu|Mul)\) ran out of device memory"):
        sess.run(None, {"x": np.ones((400, 1024), np.float32)})  # 1.6 MB per value: two do not fit
    small = np.ones((8, 1024), np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": small})[0], expected_chain(small, 4))


def test_profile_records_every_node(tmp_path):
    for dev in ("cpu", "cuda"):
        sess = gpuops.InferenceSession(chain_model(n=5), device=dev)
        sess.run(None, {"x": np.ones((2, 256), np.float32)}, profile=True)
        prof = sess.last_profile["nodes"]
        assert [p["node"] for p in prof] == ["relu0", "mul1", "relu2", "mul3", "relu4"]
        assert all(p["wall_ms"] >= 0 and p["output_bytes"] == 2 * 256 * 4 for p in prof)
        assert all(p["host_syncs"] == 0 for p in prof) and sess.last_profile["host_syncs"]["count"] == 0
        if dev == "cuda":
            assert all("device_ms" in p for p in prof)
        sess.save_profile(tmp_path / f"{dev}.json")
        assert len(json.loads((tmp_path / f"{dev}.json").read_text())["nodes"]) == 5


def test_close_releases_weights_and_context_manager():
    with gpuops.InferenceSession(chain_model(n=2), device="cuda") as sess:
        assert sess.plan.weights
        sess.run(None, {"x": np.ones((1, 256), np.float32)})
    assert not sess.plan.weights
    with pytest.raises(gpuops.GpuopsError, match="closed"):
        sess.run(None, {"x": np.ones((1, 256), np.float32)})


def test_devices_lists_the_cuda_device():
    cuda = [d for d in gpuops.devices() if d["kind"] == "cuda"]
    assert cuda and cuda[0]["name"] == "cuda:0" and cuda[0]["memory_total"] > 0
    assert str(gpuops.get_device("auto")) == "cuda:0"


def test_feeds_stage_through_a_reused_pinned_buffer_and_dlpack_feeds_are_taken():
    sess = gpuops.InferenceSession(chain_model(n=2), device="cuda")
    x = np.random.default_rng(2).standard_normal((2, 256)).astype(np.float32)
    sess.run(None, {"x": x})
    staging, _ = sess.memory._pinned["x"]
    (y,) = sess.run(None, {"x": x[:1]})  # smaller feed: same staging buffer
    assert sess.memory._pinned["x"][0] is staging
    np.testing.assert_allclose(y, expected_chain(x[:1], 2), rtol=1e-6)

    class Foreign:  # any DLPack producer (torch, jax, ...) — here one backed by NumPy
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    (y,) = sess.run(None, {"x": Foreign(x)})
    np.testing.assert_allclose(y, expected_chain(x, 2), rtol=1e-6)


@pytest.mark.skipif(not STANDIN, reason="a fake NVML against the stand-in's PCI bus ids")
def test_devices_report_nvml_details_of_the_same_gpu_by_pci_bus_id(monkeypatch):
    import sys
    import types

    from gpuops.testing import cuda_standin

    # NVML numbers GPUs in PCI order and ignores CUDA_VISIBLE_DEVICES: with CUDA_VISIBLE_DEVICES=1,0
    # NVML's index 0 is CUDA's device 1. Only the PCI bus id names the same GPU in both.
    buses = {f"0000:{cuda_standin.cuda.runtime.getDeviceProperties(i)['pciBusID']:02x}:00.0": i
             for i in range(2)}
    by_bus = {bus: ("h", i) for bus, i in buses.items()}
    mem = {0: types.SimpleNamespace(total=80 << 30, free=79 << 30), 1: types.SimpleNamespace(total=40 << 30, free=1)}
    name = {0: b"NVIDIA H100 80GB HBM3", 1: b"NVIDIA A100-SXM4-40GB"}
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetHandleByIndex=lambda i: ("h", 1 - i),
        nvmlDeviceGetHandleByPciBusId=lambda bus: by_bus[bus.lower()],
        nvmlDeviceGetMemoryInfo=lambda h: mem[h[1]], nvmlDeviceGetName=lambda h: name[h[1]],
        nvmlSystemGetDriverVersion=lambda: "580.65.06", nvmlSystemGetCudaDriverVersion=lambda: 13000)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    cuda = {d["name"]: d for d in gpuops.devices() if d["kind"] == "cuda"}
    assert cuda["cuda:0"]["device_name"] == "NVIDIA H100 80GB HBM3"
    assert (cuda["cuda:0"]["memory_total"], cuda["cuda:0"]["memory_free"]) == (80 << 30, 79 << 30)
    assert cuda["cuda:1"]["device_name"] == "NVIDIA A100-SXM4-40GB" and cuda["cuda:1"]["memory_total"] == 40 << 30
    assert (cuda["cuda:0"]["driver"], cuda["cuda:0"]["cuda_driver"]) == ("580.65.06", 13000)


def test_cuda_graph_replays_and_recaptures_on_new_shapes():
    sess = gpuops.InferenceSession(chain_model(n=6), device="cuda", cuda_graph=True)
    rng = np.random.default_rng(3)
    for shape in [(2, 256), (2, 256), (5, 256), (2, 256)]:
        x = rng.standard_normal(shape).astype(np.float32)
        with device_guard("cuda"):
            (y,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(y, expected_chain(x, 6), rtol=1e-6)
        assert sess._graphs.usable and sess._graphs.key[0][1] == shape


def test_cuda_graph_falls_back_when_a_node_needs_the_host():
    from onnx import TensorProto, helper

    # Loop reads its condition on the host each iteration: not capturable
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v_in", "v_in"], ["v_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [3])])
    g = helper.make_graph([helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)], "loop",
                          [helper.make_tensor_value_info("M", TensorProto.INT64, []),
                           helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    sess = gpuops.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)]),
                                   device="cuda", cuda_graph=True)
    x = np.arange(3, dtype=np.float32)
    for _ in range(2):
        (y,) = sess.run(None, {"M": np.array(3, np.int64), "x": x})
        np.testing.assert_array_equal(y, x * 8)
    assert not sess._graphs.usable


def test_resnet50_pool_peak_is_well_under_the_sum_of_its_intermediates():
    from gpuops.models import resolve_model_path

    # unfused: the optimizer's fusions remove most intermediates, and this is about reusing theirs
    sess = gpuops.InferenceSession(resolve_model_path("light:resnet50"), device="cuda", optimize="none")
    x = np.random.default_rng(4).random((1, 3, 224, 224), dtype=np.float32)
    sess.run(None, {"gpu_0/data_0": x})
    st = sess.memory_stats()
    assert st["peak_bytes"] < 0.5 * st["intermediates_total_bytes"]
    assert st["planned_peak_bytes"] < 0.5 * st["intermediates_total_bytes"]
    assert st["reuses"] > 0
