"""ONNX element types <-> NumPy dtypes (bfloat16, float8, int4, float4 come from ml_dtypes)."""

import numpy as np
from onnx import TensorProto, helper

from .errors import ModelError


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
    """Whether CuPy can hold this dtype: NumPy's own bool/int/float/complex types only.

    Strings and the ml_dtypes types (bfloat16, float8, float4, int4, int2) stay NumPy arrays on the
    host even on a CUDA device; ops that meet them compute on the host through explicit transfers.
    """
    dtype = np.dtype(dtype)
    return dtype.kind in "biufc" and dtype.type.__module__ == "numpy"
