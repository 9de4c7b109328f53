"""Softmax, LogSoftmax and Hardmax.

Before opset 13 the input is coerced to 2-D at ``axis`` (default 1): the op normalises over all
dimensions from ``axis`` on, as one flattened row. From opset 13 it works along the single ``axis``
(default -1). Softmax and LogSoftmax subtract the maximum first (numerically stable);
float16/bfloat16 are computed in float32. Hardmax marks the first maximum of each row. (On the CPU,
rows over trailing axes take one native pass: :mod:`gpuops.ops.cpu.softmax`.)
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ..errors import NodeError
from ..registry import op

_HALF = {np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}


def checked_axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise NodeError(f"axis {axis} is out of range for an input of rank {ndim}")
    return axis % ndim


def normalise(xp, x, axes: tuple[int, ...], log: bool):
    if x.size == 0:
        return x
    dtype = np.dtype(x.dtype)
    if dtype in _HALF:
        x = x.astype(np.float32)
    shifted = x - xp.max(x, axis=axes, keepdims=True)
    e = xp.exp(shifted)
    s = xp.sum(e, axis=axes, keepdims=True)
    y = shifted - xp.log(s) if log else e / s
    return y.astype(dtype)


def trailing_axes(axis: int, ndim: int) -> tuple[int, ...]:
    """The axes the opset < 13 ops normalise over: ``axis`` and all after it."""
    return tuple(range(checked_axis(axis, ndim), ndim))


def _hardmax(xp, x, axis: int):
    """One-hot of the first maximum along ``axis`` (0 <= axis < ndim)."""
    n = x.shape[axis]
    if x.size == 0:
        return x
    idx = xp.expand_dims(xp.argmax(x, axis=axis), axis=axis)
    positions = xp.reshape(xp.arange(n), tuple(n if i == axis else 1 for i in range(x.ndim)))
    return (positions == idx).astype(x.dtype)


@op("Softmax", since=1)  # 11 allows a negative axis
def Softmax_1(xp, input, *, axis=1):  # noqa: A002 - the ONNX input name
    return normalise(xp, input, trailing_axes(axis, input.ndim), log=False)


@op("Softmax", since=13)
def Softmax(xp, input, *, axis=-1):  # noqa: A002
    return normalise(xp, input, (checked_axis(axis, input.ndim),), log=False)


@op("LogSoftmax", since=1)
def LogSoftmax_1(xp, input, *, axis=1):  # noqa: A002
    return normalise(xp, input, trailing_axes(axis, input.ndim), log=True)


@op("LogSoftmax", since=13)
def LogSoftmax(xp, input, *, axis=-1):  # noqa: A002
    return normalise(xp, input, (checked_axis(axis, input.ndim),), log=True)


@op("Hardmax", since=1)
def Hardmax_1(xp, input, *, axis=1):  # noqa: A002
    shape = tuple(input.shape)
    axis = checked_axis(axis, len(shape))
    rows = xp.reshape(input, (math.prod(shape[:axis]), math.prod(shape[axis:])))
    return xp.reshape(_hardmax(xp, rows, 1), shape)


@op("Hardmax", since=13)
def Hardmax(xp, input, *, axis=-1):  # noqa: A002
    return _hardmax(xp, input, checked_axis(axis, input.ndim))
