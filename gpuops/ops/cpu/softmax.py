"""Softmax and LogSoftmax on the CPU (``@op(..., device="cpu")``): over trailing axes, rows reduced
along one axis (a tuple of axes costs NumPy several times more), in one native pass a row for
float32 (``cpu_kernels/rows.c``). The generic ops of :mod:`gpuops.ops.softmax` stay their fallback
and test oracle.
"""

from __future__ import annotations

import math

import numpy as np

from ... import native
from ...registry import op
from . import planned
from .. import softmax as _softmax


_HALF, _axis, _trailing, _generic = _softmax._HALF, _softmax.checked_axis, _softmax.trailing_axes, _softmax.normalise


_F32 = np.dtype(np.float32)


def normalise(xp, x, axes: tuple[int, ...], log: bool):
    """:func:`gpuops.ops.softmax.normalise`, trailing axes of NumPy arrays as rows."""
    if type(x) is np.ndarray and x.dtype == _F32 and axes == (x.ndim - 1,) and x.size and x.flags.c_contiguous:
        fn = native.function("softmax_rows_f32")  # (the common case first: float32 rows, as they lie)
        if fn is not None:
            y = np.empty(x.shape, dtype=np.float32)
            n = x.shape[-1]
            native.call(fn, native.address(x) if x.flags.writeable else x.ctypes.data, native.address(y),
                        x.size // n, n, int(log))
            return y
    if type(x) is not np.ndarray or not x.size or axes != tuple(range(axes[0], x.ndim)):
        return _generic(xp, x, axes, log)
    dtype = x.dtype
    if dtype in _HALF:
        x = x.astype(np.float32)
    elif dtype.kind != "f":
        return _generic(xp, x, axes, log)
    rows = x.reshape(-1, math.prod(x.shape[axes[0]:]))
    fn = native.function("softmax_rows_f32") if x.dtype == np.float32 else None
    if fn is not None:  # one pass a row
        rows = np.ascontiguousarray(rows)
        y = np.empty(x.shape, dtype=np.float32)
        native.call(fn, native.ptr(rows), native.address(y), rows.shape[0], rows.shape[1], int(log))
        return y.astype(dtype, copy=False)
    y = np.subtract(rows, np.max(rows, axis=1, keepdims=True))
    if log:
        y -= np.log(np.sum(np.exp(y), axis=1, keepdims=True))
    else:
        np.exp(y, out=y)
        y /= np.sum(y, axis=1, keepdims=True)
    return y.reshape(x.shape).astype(dtype, copy=False)


@op("Softmax", since=1, device="cpu")
def Softmax_1(xp, input, *, axis=1):  # noqa: A002 - the ONNX input name
    return normalise(xp, input, _trailing(axis, input.ndim), log=False)


@op("Softmax", since=13, device="cpu")
def Softmax(xp, input, *, axis=-1):  # noqa: A002
    return normalise(xp, input, (_axis(axis, input.ndim),), log=False)


@op("LogSoftmax", since=1, device="cpu")
def LogSoftmax_1(xp, input, *, axis=1):  # noqa: A002
    return normalise(xp, input, _trailing(axis, input.ndim), log=True)


@op("LogSoftmax", since=13, device="cpu")
def LogSoftmax(xp, input, *, axis=-1):  # noqa: A002
    return normalise(xp, input, (_axis(axis, input.ndim),), log=True)


# -- native programs (gpuops.onnx.programs) --------------------------------------------------------------


def _softmax_step(step, operands, log: bool):
    x = operands[0]
    fn = planned.kernel("softmax_planned_f32")
    if fn is None or not planned.is_f32(x) or not x.ndim or not math.prod(x.shape):
        return None
    axis = step.attrs.get("axis", 1 if step.impl.since < 13 else -1)
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis < x.ndim or (step.impl.since >= 13 and axis != x.ndim - 1):
        return None
    n = math.prod(x.shape[axis:])  # (Softmax-1: the trailing axes from axis, as rows)
    p = planned.params(math.prod(x.shape) // n, n, int(log))
    return planned.NativeStep(x.shape, (planned.Call(fn, p, 0),), holds=p)


planned.planned("Softmax")(lambda step, operands: _softmax_step(step, operands, False))
planned.planned("LogSoftmax")(lambda step, operands: _softmax_step(step, operands, True))
