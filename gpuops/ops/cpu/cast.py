"""Cast on the CPU (``@op(..., device="cpu")``): float32 <-> float16 by the native kernel
(``cpu_kernels/cast.c``: the F16C instructions, where NumPy converts an element at a time in
software, ~7x slower); the other casts between NumPy's numeric types by ``astype`` directly (the
generic op's conversion; its type dispatch cost more than a small cast); every other cast (strings,
ml_dtypes types), and any input the kernel does not take, is the generic op's."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from ... import native
from ...registry import op
from .. import cast as _cast
from . import planned
from . import shape as _shape

_F32, _F16 = np.dtype(np.float32), np.dtype(np.float16)
# NumPy's own numeric types by ONNX type: a cast between two of them is the generic op's astype
_PLAIN = {TensorProto.BOOL: np.bool_, TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8,
          TensorProto.INT16: np.int16, TensorProto.UINT16: np.uint16, TensorProto.INT32: np.int32,
          TensorProto.UINT32: np.uint32, TensorProto.INT64: np.int64, TensorProto.UINT64: np.uint64,
          TensorProto.FLOAT16: np.float16, TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64}
_PLAIN = {k: np.dtype(v) for k, v in _PLAIN.items()}
_PLAIN_TYPES = frozenset(_PLAIN.values())
_KERNELS = {(_F32, TensorProto.FLOAT16): ("cast_f32_f16", _F16), (_F16, TensorProto.FLOAT): ("cast_f16_f32", _F32)}


def _native(X, to):
    """X cast to ``to`` (float16 from float32, or back) by the native kernel; other casts between NumPy's
    numeric types by ``astype`` (the generic op's, without its dispatch); else None."""
    if type(X) is not np.ndarray:
        return None
    kernel = _KERNELS.get((X.dtype, to))
    fn = native.function(kernel[0]) if kernel and X.size else None
    if fn is None:
        dtype = _PLAIN.get(to)
        return X.astype(dtype) if dtype is not None and X.dtype in _PLAIN_TYPES else None
    X = np.ascontiguousarray(X)
    Y = np.empty(X.shape, kernel[1])
    return Y if fn(X.ctypes.data, native.address(Y), X.size) == 0 else None  # 1: the compiler has no float16


@op("Cast", since=6, device="cpu")
def Cast(xp, input, *, to):
    Y = _native(input, to)
    return _cast.Cast(xp, input, to=to) if Y is None else Y


@op("Cast", since=19, device="cpu")
def Cast19(xp, input, *, to, saturate=1):
    Y = _native(input, to)  # (saturate is for the float8 types)
    return _cast.Cast19(xp, input, to=to, saturate=saturate) if Y is None else Y


@op("Cast", since=24, device="cpu")
def Cast24(xp, input, *, to, saturate=1, round_mode="up"):
    Y = _native(input, to) if round_mode in _cast._ROUND_MODES else None  # (round_mode is for float8e8m0)
    return _cast.Cast24(xp, input, to=to, saturate=saturate, round_mode=round_mode) if Y is None else Y


# -- native programs (gpuops.onnx.programs) ----------------------------------------------------------------


def _works(name: str) -> bool:
    """Whether the conversion kernel converts here (a compiler without _Float16 builds one that says no)."""
    fn = native.function(name)
    if fn is None:
        return False
    a, b = np.zeros(1, np.float32), np.zeros(1, np.float32)
    return fn(a.ctypes.data, b.ctypes.data, 0) == 0


@planned.planned("Cast")
def _cast_step(step, operands):
    """float32 <-> float16 by cast.c's kernels (the op's own); the integer casts of index and mask inputs."""
    X = operands[0]
    if type(X) is not planned.Operand or "to" not in step.attrs:
        return None
    got = _KERNELS.get((np.dtype(X.dtype), step.attrs["to"]))
    fn = planned.kernel("cast_half_planned")
    if got is None or fn is None or step.attrs.get("saturate", 1) != 1 or not _works(got[0]):
        return _shape.cast_step(step, operands)
    p = planned.params(math.prod(X.shape), int(got[1] == _F16))
    return planned.NativeStep(X.shape, (planned.Call(fn, p, 0),), holds=p, dtype=got[1])
