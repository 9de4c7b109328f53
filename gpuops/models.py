"""Models and feeds named outside a program (``gpuops run``, ``gpuops selftest``, benchmarks):
``light:NAME`` models the onnx package ships, random feeds for a model's inputs."""

from __future__ import annotations

import numpy as np

from .errors import GpuopsError


def resolve_model_path(model: str) -> str:
    """``light:NAME`` names a model the onnx package ships (e.g. ``light:resnet50``)."""
    if not model.startswith("light:"):
        return model
    import os

    import onnx

    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    path = os.path.join(folder, f"light_{model[len('light:'):]}.onnx")
    if not os.path.isfile(path):
        names = sorted(f[6:-5] for f in os.listdir(folder) if f.endswith(".onnx"))
        raise GpuopsError(f"no light model {model!r}; the onnx package ships {names}")
    return path


def random_feed(arg, rng: np.random.Generator, batch: int) -> np.ndarray:
    """Random data for input ``arg`` (a :class:`gpuops.NodeArg`), unknown dimensions set to ``batch``."""
    if arg.dtype is None:
        raise GpuopsError(f"input {arg.name!r} is a {arg.type}; pass it with --input")
    shape = [d if isinstance(d, int) and d > 0 else batch for d in (arg.shape or [])]
    if arg.dtype.kind == "f":
        return rng.standard_normal(shape).astype(arg.dtype)
    if arg.dtype.kind in "iu":
        return rng.integers(0, 10, shape).astype(arg.dtype)
    if arg.dtype == bool:
        return rng.random(shape) > 0.5
    raise GpuopsError(f"input {arg.name!r}: cannot make random data of {arg.type}; pass it with --input")
