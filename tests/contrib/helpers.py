"""Shared pieces of the contrib op tests: one-node models importing ``com.microsoft`` (and
``com.microsoft.nchwc``), onnxruntime's CPU build as the test-only oracle, and gpuops on ``cpu`` and
``cuda`` (the CPU stand-in without a GPU, under its strict no-implicit-transfer guard)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

import gpuops
from gpuops.bench.exact_int8 import for_onnxruntime

from ..conformance.harness import device_guard, unchanged

DEVICES = ("cpu", "cuda")
RNG = np.random.default_rng(1234)


def make_model(node, feeds: dict, opset: int = 17) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), np.shape(v))
              for k, v in feeds.items()]
    outputs = [onnx.ValueInfoProto(name=o) for o in node.output if o]
    graph = helper.make_graph([node], "t", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid("com.microsoft", 1),
                                                    helper.make_opsetid("com.microsoft.nchwc", 1)])
    model.ir_version = 10
    return model


def ms_node(op_type: str, inputs, outputs, domain: str = "com.microsoft", **attrs):
    return helper.make_node(op_type, list(inputs), list(outputs), domain=domain, **attrs)


def run_ort(model, feeds):
    """onnxruntime's outputs (int8 weights made uint8 where its int8 sums saturate: gpuops.bench.exact_int8)."""
    sess = ort.InferenceSession(for_onnxruntime(model).SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def ort_has_kernel(node, feeds) -> bool:
    """Whether onnxruntime's CPU build can create a session for this node."""
    try:
        ort.InferenceSession(make_model(node, feeds).SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:
        return False
    return True


def run_gpuops(model, feeds, device: str):
    sess = gpuops.InferenceSession(model, device=device)
    with device_guard(device), unchanged(feeds):
        return sess.run(None, feeds)


def assert_close(got, want, rtol, atol, what=""):
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"{what} output {i}: shape {g.shape} != {w.shape}"
        assert g.dtype == w.dtype, f"{what} output {i}: dtype {g.dtype} != {w.dtype}"
        if w.dtype == object:
            assert g.tolist() == w.tolist(), f"{what} output {i}"
        elif w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"{what} output {i}")
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                       err_msg=f"{what} output {i}")


def check(node, feeds, *, ref=None, rtol=1e-5, atol=1e-6, opset=17):
    """Run ``node`` on onnxruntime (or the NumPy formula ``ref(**feeds)``) and on gpuops (cpu and
    cuda) and compare every output: integers and strings exactly, floats to ``rtol`` / ``atol``.
    Returns gpuops' cpu outputs."""
    model = make_model(node, feeds, opset)
    want = list(ref(**feeds)) if ref is not None else run_ort(model, feeds)
    outputs = {}
    for device in DEVICES:
        got = outputs[device] = run_gpuops(model, feeds, device)
        assert_close(got, want, rtol, atol, f"{node.op_type} on {device}")
    return outputs["cpu"]


def rand(*shape, dtype=np.float32, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def randint(lo, hi, *shape, dtype=np.int32):
    return RNG.integers(lo, hi, size=shape).astype(dtype)


def q8(dtype, *shape):
    """Random 8-bit values over the whole range of ``dtype`` (uint8 or int8)."""
    lo, hi = (0, 256) if np.dtype(dtype) == np.uint8 else (-128, 128)
    return randint(lo, hi, *shape, dtype=dtype)


def f32(v):
    """A float32 array (scales, thresholds...)."""
    return np.array(v, np.float32)
