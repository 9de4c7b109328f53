"""gpuops: run ONNX and MDF models on NVIDIA GPUs (CuPy) or the CPU (NumPy).

    import gpuops
    sess = gpuops.InferenceSession("model.onnx", device="auto")
    outputs = sess.run(None, {"input": x})
"""

from .device import Device, devices, get_device
from .errors import (DeviceError, FeedError, GpuopsError, ModelError, NodeError, OutOfMemoryError,
                     UnsupportedOpError)
from .onnx import InferenceSession, NodeArg

__version__ = "0.1.0"

__all__ = [
    "InferenceSession", "NodeArg", "Device", "devices", "get_device",
    "GpuopsError", "ModelError", "UnsupportedOpError", "FeedError", "NodeError", "DeviceError",
    "OutOfMemoryError", "__version__",
]
