"""Peers gpuops is measured against in the same run (each optional: skipped when not installed)."""

from __future__ import annotations

from typing import Callable

import onnx


class Unavailable:
    """A peer that could not load the model: calling it raises, so the report records why."""

    def __init__(self, why: str):
        self.why = why

    def __call__(self, feeds):
        raise RuntimeError(self.why)


def onnxruntime_sessions(model: onnx.ModelProto, device: str, threads: int | None = None) -> dict[str, Callable]:
    """onnxruntime's CPU EP, and its CUDA EP when onnxruntime-gpu is installed and gpuops runs on CUDA;
    ``threads``: intra-op threads (the count gpuops runs with; None: onnxruntime's default, all cores)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return {}
    out = {}
    data = model.SerializeToString()
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if threads:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    providers = {"onnxruntime-cpu": "CPUExecutionProvider"}
    if device.startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers():
        providers["onnxruntime-cuda"] = "CUDAExecutionProvider"
    for name, provider in providers.items():
        try:
            s = ort.InferenceSession(data, opts, providers=[provider])
            out[name] = lambda feeds, s=s: s.run(None, feeds)
        except Exception as e:
            out[name] = Unavailable(f"cannot load the model: {e}"[:300])
    return out


def reference_evaluator(model: onnx.ModelProto, max_nodes: int = 60) -> dict[str, Callable]:
    """The onnx ReferenceEvaluator: slow, so only for small graphs."""
    if len(model.graph.node) > max_nodes:
        return {}
    from onnx.reference import ReferenceEvaluator

    try:
        ref = ReferenceEvaluator(model)
    except Exception as e:
        return {"onnx-reference": Unavailable(f"cannot load the model: {e}"[:300])}
    return {"onnx-reference": lambda feeds, ref=ref: ref.run(None, feeds)}
