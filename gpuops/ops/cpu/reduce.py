"""ArgMax, ArgMin, ReduceSumSquare and ReduceMean on the CPU (``@op(..., device="cpu")``): the classic ML
exports' last steps (a class index, k-means' squared norms) and small means, run on a few rows, where the
generic ops of
:mod:`gpuops.ops.reduce` spend more on their general axis handling than on the arithmetic. One NumPy
call each, the same NumPy functions as the generic op's (equal results); anything else -- several
axes, select_last_index, an empty axis, half types, CuPy arrays -- goes to the generic op.
"""

from __future__ import annotations

import math

import numpy as np

from ...registry import op
from .. import reduce as _reduce
from . import planned
from ._common import generic

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _axis(X, axis):
    """``axis`` of the NumPy array ``X`` as a non-negative int, where it is one and its length is not 0;
    else None."""
    if type(X) is not np.ndarray or type(axis) is not int or not -X.ndim <= axis < X.ndim:
        return None
    axis %= X.ndim
    return axis if X.shape[axis] else None


def _arg(fn, generic):
    def arg(xp, data, *, axis=0, keepdims=1, select_last_index=0):
        a = _axis(data, axis)
        if a is None or select_last_index:
            return generic(xp, data, axis=axis, keepdims=keepdims, select_last_index=select_last_index)
        idx = fn(data, axis=a, keepdims=bool(keepdims))  # (the ndarray method: np.argmax's, without its wrapper)
        return idx if idx.dtype == np.int64 else idx.astype(np.int64)

    arg.__name__ = arg.__qualname__ = generic.__name__
    return arg


ArgMax = op("ArgMax", since=12, device="cpu")(_arg(np.ndarray.argmax, _reduce.ArgMax))
ArgMin = op("ArgMin", since=12, device="cpu")(_arg(np.ndarray.argmin, _reduce.ArgMin))

@op("ReduceSumSquare", since=18, device="cpu", host_inputs=(1,))
def ReduceSumSquare(xp, data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    """The sum of squares over one axis of a float32 / float64 NumPy array, as the generic op computes
    it (``x * x`` summed in the input's type)."""
    if axes is not None and type(data) is np.ndarray and data.dtype in _FLOATS and axes.size == 1:
        a = _axis(data, int(axes.reshape(-1)[0]))
        if a is not None:
            return np.add.reduce(data * data, axis=a, keepdims=keepdims == 1)  # (np.sum's, without its wrapper)
    return _sum_square(xp, data, axes, keepdims=keepdims, noop_with_empty_axes=noop_with_empty_axes)


_sum_square = generic("ReduceSumSquare", 18)


def _mean(data, axes, keepdims):
    """ReduceMean of a float32 / float64 NumPy array over the listed non-empty axes as the generic op computes
    it (the sum divided in place), in one reduction; None for anything else (the generic op's)."""
    if not axes or type(data) is not np.ndarray or data.dtype not in _FLOATS:
        return None
    nd = data.ndim
    if not all(-nd <= a < nd for a in axes):
        return None
    picked = {a % nd for a in axes}
    if not all(data.shape[a] for a in picked):
        return None
    out = np.add.reduce(data, axis=tuple(picked), keepdims=True)
    out /= math.prod(data.shape[a] for a in picked)
    return out if keepdims == 1 else out.reshape([d for i, d in enumerate(data.shape) if i not in picked])


_mean_1, _mean_18 = generic("ReduceMean", 1), generic("ReduceMean", 18)


@op("ReduceMean", since=1, device="cpu")
def ReduceMean_1(xp, data, *, axes=None, keepdims=1):
    out = _mean(data, axes, keepdims)
    return _mean_1(xp, data, axes=axes, keepdims=keepdims) if out is None else out


@op("ReduceMean", since=18, device="cpu", host_inputs=(1,))
def ReduceMean(xp, data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    out = None if axes is None else _mean(data, axes.reshape(-1).tolist(), keepdims)
    if out is None:
        return _mean_18(xp, data, axes, keepdims=keepdims, noop_with_empty_axes=noop_with_empty_axes)
    return out


# -- native programs (gpuops.onnx.programs): reductions of rows --------------------------------------------

ROW_KINDS = {"ReduceSum": 0, "ReduceMean": 1, "ReduceSumSquare": 2, "ReduceMax": 3, "ReduceMin": 4,
              "ArgMax": 5, "ArgMin": 6}  # rows.c's ROW_*
_INPUT_SINCE = {"ReduceSum": 13}  # the others take their axes as an input from opset 18


def _reduce_step(step, operands):
    """A float32 reduction over the trailing axes (its rows), the axes known at plan time."""
    X = operands[0]
    fn = planned.kernel("reduce_rows_planned_f32")
    if fn is None or not planned.is_f32(X) or not X.ndim:
        return None
    a = step.attrs
    if step.impl.since >= _INPUT_SINCE.get(step.op_type, 18):
        axes = operands[1] if len(operands) > 1 else None
        if type(axes) is planned.Operand:
            return None
        axes = None if axes is None else [int(v) for v in np.asarray(axes).reshape(-1)]
        if not axes and a.get("noop_with_empty_axes", 0):
            return None
    else:
        axes = a.get("axes")
    ndim = X.ndim
    axes = sorted({(int(v) + ndim) % ndim for v in axes}) if axes else list(range(ndim))
    if axes != list(range(axes[0], ndim)):
        return None
    n = math.prod(X.shape[axes[0]:])
    if not n:
        return None
    keep = a.get("keepdims", 1) == 1
    shape = X.shape[:axes[0]] + ((1,) * len(axes) if keep else ())
    p = planned.params(math.prod(X.shape[:axes[0]]), n, ROW_KINDS[step.op_type])
    return planned.NativeStep(shape, (planned.Call(fn, p, 0),), holds=p)


def _arg_step(step, operands):
    """ArgMax / ArgMin of float32 over the last axis (the first extreme; the first NaN), int64."""
    X = operands[0]
    a = step.attrs
    fn = planned.kernel("reduce_rows_planned_f32")
    if fn is None or not planned.is_f32(X) or not X.ndim or not X.shape[-1] or a.get("select_last_index", 0) \
            or int(a.get("axis", 0)) not in (-1, X.ndim - 1):
        return None
    shape = X.shape[:-1] + ((1,) if a.get("keepdims", 1) else ())
    p = planned.params(math.prod(X.shape[:-1]), X.shape[-1], ROW_KINDS[step.op_type])
    return planned.NativeStep(shape, (planned.Call(fn, p, 0),), holds=p, dtype=np.dtype(np.int64))


for _name in ("ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceMax", "ReduceMin"):
    planned.planned(_name)(_reduce_step)
for _name in ("ArgMax", "ArgMin"):
    planned.planned(_name)(_arg_step)
