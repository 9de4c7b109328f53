"""ONNX element types <-> NumPy dtypes (bfloat16, float8, int4, float4 come from ml_dtypes)."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from . import backends
from .errors import DeviceError, ModelError


def np_dtype(elem_type: int) -> np.dtype:
    """NumPy dtype of an ONNX ``TensorProto.DataType`` value."""
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError) as e:
        raise ModelError(f"unknown ONNX element type {elem_type}") from e


def onnx_dtype(dtype) -> int:
    """ONNX ``TensorProto.DataType`` of a NumPy dtype."""
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def type_name(elem_type: int) -> str:
    """The ORT-style name, e.g. ``tensor(float)``."""
    return f"tensor({TensorProto.DataType.Name(elem_type).lower()})"


def device_supported(dtype) -> bool:
    """Whether gpuops keeps this dtype on a CUDA device: what CuPy can hold of the ONNX types.

    NumPy's own bool/int/float/complex types (CuPy copies a big-endian host array to little-endian
    device memory), and bfloat16 where the CUDA array library has it: CuPy 14 (with NumPy >= 2.1.2
    and ml_dtypes, ``cupy/_core/_scalar.pyx``) and the CPU stand-in, which models CuPy 14. Strings and the other ml_dtypes types (float8, float4, int4,
    int2) stay NumPy arrays on the host even on a CUDA device (CuPy refuses them: ``Unsupported
    dtype``); ops that meet them compute on the host through explicit transfers.
    """
    dtype = np.dtype(dtype)
    if dtype.kind in "biufc" and dtype.type.__module__ == "numpy":
        return True
    return dtype.name == "bfloat16" and dtype.type.__module__ == "ml_dtypes" and bfloat16_on_device()


def bfloat16_on_device() -> bool:
    """Whether the CUDA array library in use holds bfloat16 arrays (CuPy >= 14 on NumPy >= 2.1.2 with
    ml_dtypes; the CPU stand-in always): its backend says. Without one, False."""
    try:
        b = backends.cuda()
    except DeviceError:
        return False
    return b is not None and b.holds_bfloat16()


def tensor_to_numpy(t: TensorProto) -> np.ndarray:
    """An ONNX tensor's values, or a ``ModelError`` naming it when they cannot be read."""
    try:
        return numpy_helper.to_array(t)
    except Exception as e:
        raise ModelError(f"tensor {t.name!r} cannot be read: {e}") from e
