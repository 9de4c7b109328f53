"""gpuops: run ONNX and MDF models on NVIDIA GPUs (CuPy) or the CPU (NumPy).

    import gpuops
    sess = gpuops.InferenceSession("model.onnx", device="auto")
    outputs = sess.run(None, {"input": x})
"""

from .errors import (DeviceError, FeedError, GpuopsError, ModelError, NodeError, OutOfMemoryError,
                     UnsupportedOpError)

__version__ = "0.1.0"

# imported on first use (PEP 562), so that a missing dependency (onnx, array-api-compat, ml_dtypes)
# is reported by name by the CLI rather than breaking ``import gpuops`` itself
_LAZY = {"InferenceSession": ".onnx", "NodeArg": ".onnx", "Device": ".device", "devices": ".device",
         "get_device": ".device"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gpuops' has no attribute {name!r}")

__all__ = [
    "InferenceSession", "NodeArg", "Device", "devices", "get_device",
    "GpuopsError", "ModelError", "UnsupportedOpError", "FeedError", "NodeError", "DeviceError",
    "OutOfMemoryError", "__version__",
]
