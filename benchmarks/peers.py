"""Peers gpuops is measured against in the same run (each optional: skipped when not installed)."""

from __future__ import annotations

from typing import Callable

import onnx


def onnxruntime_sessions(model: onnx.ModelProto, device: str) -> dict[str, Callable]:
    """onnxruntime's CPU EP, and its CUDA EP when onnxruntime-gpu is installed and gpuops runs on CUDA."""
    try:
        import onnxruntime as ort
    except ImportError:
        return {}
    out = {}
    data = model.SerializeToString()
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    try:
        s = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        out["onnxruntime-cpu"] = lambda feeds, s=s: s.run(None, feeds)
    except Exception:  # a model ORT cannot load is reported as a missing peer
        pass
    if device.startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers():
        try:
            s = ort.InferenceSession(data, opts, providers=["CUDAExecutionProvider"])
            out["onnxruntime-cuda"] = lambda feeds, s=s: s.run(None, feeds)
        except Exception:
            pass
    return out


def reference_evaluator(model: onnx.ModelProto, max_nodes: int = 60) -> dict[str, Callable]:
    """The onnx ReferenceEvaluator: slow, so only for small graphs."""
    if len(model.graph.node) > max_nodes:
        return {}
    from onnx.reference import ReferenceEvaluator

    try:
        ref = ReferenceEvaluator(model)
    except Exception:
        return {}
    return {"onnx-reference": lambda feeds, ref=ref: ref.run(None, feeds)}
