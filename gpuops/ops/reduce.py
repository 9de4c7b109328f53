"""Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin,
CumSum/CumProd and TopK.

The Reduce ops take ``axes`` as an attribute up to opset 12 (ReduceSum) / 17 (the others) and as an
optional host input afterwards, together with ``noop_with_empty_axes``. A reduction over an empty
set yields the op's identity (0, 1, -inf for Max and LogSum(Exp), +inf for Min; the dtype's
extreme for integers, False/True for bool). float16/bfloat16 accumulate in float32; integer inputs
of Mean/L2/LogSum/LogSumExp are computed in float64 and cast back, keeping the input dtype.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ..errors import NodeError
from ..registry import op

_HALF = {np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}


def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise NodeError(f"axis {axis} is out of range for an input of rank {ndim}")
    return axis % ndim


def _extreme(dtype: np.dtype, largest: bool):
    """The largest (or smallest) value of ``dtype``: +-inf for floats."""
    if dtype == np.bool_:
        return largest
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return int(info.max if largest else info.min)
    return math.inf if largest else -math.inf


def _compute_dtype(dtype: np.dtype, float_only: bool) -> np.dtype:
    if dtype in _HALF:
        return np.dtype(np.float32)
    if float_only and dtype.kind in "iub":
        return np.dtype(np.float64)
    return dtype


def _logsumexp(xp, x, axes):
    m = xp.max(x, axis=axes, keepdims=True)
    m = xp.where(xp.isfinite(m), m, xp.zeros_like(m))  # all -inf (or an inf) slices: no shift
    return xp.log(xp.sum(xp.exp(x - m), axis=axes, keepdims=True)) + m


def _mean(xp, x, axes):
    """The sum divided by the count in place: ``xp.mean``'s own arithmetic without its Python layers."""
    out = xp.sum(x, axis=axes, keepdims=True)
    out /= math.prod(x.shape[a] for a in axes)
    return out


# kind -> (compute in floating point?, reduction with keepdims, value over an empty set)
_KINDS = {
    "Sum": (False, lambda xp, x, a: xp.sum(x, axis=a, keepdims=True, dtype=x.dtype), lambda dt: 0),
    "Mean": (True, lambda xp, x, a: _mean(xp, x, a), lambda dt: math.nan),
    "Max": (False, lambda xp, x, a: xp.max(x, axis=a, keepdims=True), lambda dt: _extreme(dt, False)),
    "Min": (False, lambda xp, x, a: xp.min(x, axis=a, keepdims=True), lambda dt: _extreme(dt, True)),
    "Prod": (False, lambda xp, x, a: xp.prod(x, axis=a, keepdims=True, dtype=x.dtype), lambda dt: 1),
    "L1": (False, lambda xp, x, a: xp.sum(xp.abs(x), axis=a, keepdims=True, dtype=x.dtype), lambda dt: 0),
    "L2": (True, lambda xp, x, a: xp.sqrt(xp.sum(x * x, axis=a, keepdims=True)), lambda dt: 0),
    "LogSum": (True, lambda xp, x, a: xp.log(xp.sum(x, axis=a, keepdims=True)), lambda dt: -math.inf),
    "LogSumExp": (True, _logsumexp, lambda dt: -math.inf),
    "SumSquare": (False, lambda xp, x, a: xp.sum(x * x, axis=a, keepdims=True, dtype=x.dtype), lambda dt: 0),
}


def reduce_axes(xp, kind: str, data, axes, keepdims: int, noop_with_empty_axes: int = 0):
    """``axes``: a sequence of ints, or None / empty for "all axes" (or identity when noop)."""
    ndim = data.ndim
    if axes is None or len(axes) == 0:
        if noop_with_empty_axes:
            return data
        axes = range(ndim)
    axes = tuple(sorted({_axis(int(a), ndim) for a in axes}))
    shape = tuple(1 if i in axes else d for i, d in enumerate(data.shape))
    float_only, fn, empty = _KINDS[kind]
    dtype = np.dtype(data.dtype)
    if any(data.shape[a] == 0 for a in axes):
        out = xp.full(shape, empty(dtype), dtype=dtype)
    else:
        cdt = _compute_dtype(dtype, float_only)
        out = fn(xp, data if cdt == dtype else data.astype(cdt), axes).astype(dtype, copy=False)
    if keepdims != 1:  # only 1 keeps the axes: 2 or 2**63-1 drop them, as in onnxruntime
        out = xp.reshape(out, tuple(d for i, d in enumerate(data.shape) if i not in axes))
    return out


def _register(kind: str, input_since: int) -> None:
    name = "Reduce" + kind

    def reduce_attr(xp, data, *, axes=None, keepdims=1):
        return reduce_axes(xp, kind, data, axes, keepdims)

    def reduce_input(xp, data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
        return reduce_axes(xp, kind, data, None if axes is None else axes.reshape(-1).tolist(), keepdims,
                       noop_with_empty_axes)

    for fn, suffix in ((reduce_attr, "_1"), (reduce_input, f"_{input_since}")):
        fn.__name__ = fn.__qualname__ = name + suffix
    op(name, since=1)(reduce_attr)  # 11 allows negative axes; 12 (Max/Min) adds int8/uint8
    op(name, since=input_since, host_inputs=(1,))(reduce_input)  # 20 (Max/Min) adds bool


_register("Sum", 13)
for _kind in ("Mean", "Max", "Min", "Prod", "L1", "L2", "LogSum", "LogSumExp", "SumSquare"):
    _register(_kind, 18)


# ---- ArgMax / ArgMin -------------------------------------------------------------------------

def _arg(xp, fn, data, axis: int, keepdims: int, select_last_index: int = 0):
    axis = _axis(axis, data.ndim)
    n = data.shape[axis]
    if n == 0:
        raise NodeError(f"cannot take the arg max/min over axis {axis} of length 0")
    if select_last_index:
        data = xp.flip(data, axis=axis)
    idx = xp.asarray(fn(data, axis=axis)).astype(np.int64)
    if select_last_index:
        idx = (n - 1) - idx
    return xp.expand_dims(idx, axis=axis) if keepdims else idx


@op("ArgMax", since=1)  # 11 allows a negative axis
def ArgMax_1(xp, data, *, axis=0, keepdims=1):
    return _arg(xp, xp.argmax, data, axis, keepdims)


@op("ArgMax", since=12)  # 13 only adds bfloat16
def ArgMax(xp, data, *, axis=0, keepdims=1, select_last_index=0):
    return _arg(xp, xp.argmax, data, axis, keepdims, select_last_index)


@op("ArgMin", since=1)
def ArgMin_1(xp, data, *, axis=0, keepdims=1):
    return _arg(xp, xp.argmin, data, axis, keepdims)


@op("ArgMin", since=12)
def ArgMin(xp, data, *, axis=0, keepdims=1, select_last_index=0):
    return _arg(xp, xp.argmin, data, axis, keepdims, select_last_index)


# ---- CumSum / CumProd ------------------------------------------------------------------------

def _cumulative(xp, fn, identity, x, axis, exclusive: int, reverse: int):
    axis = np.asarray(axis)
    if axis.size != 1:
        raise NodeError(f"axis must be a scalar, got shape {axis.shape}")
    ax = _axis(int(axis.reshape(())), x.ndim)
    y = xp.flip(x, axis=ax) if reverse else x
    y = fn(y, axis=ax, dtype=x.dtype)
    if exclusive:  # shift by one along the axis, the identity first
        n = x.shape[ax]
        head = xp.full(tuple(min(n, 1) if i == ax else d for i, d in enumerate(x.shape)), identity,
                       dtype=x.dtype)
        body = y[tuple(slice(0, max(n - 1, 0)) if i == ax else slice(None) for i in range(x.ndim))]
        y = xp.concatenate([head, body], axis=ax)
    return xp.flip(y, axis=ax) if reverse else y


@op("CumSum", since=11, host_inputs=(1,))  # 14 only adds types
def CumSum(xp, x, axis, *, exclusive=0, reverse=0):
    return _cumulative(xp, xp.cumsum, 0, x, axis, exclusive, reverse)


@op("CumProd", since=26, host_inputs=(1,))
def CumProd(xp, x, axis, *, exclusive=0, reverse=0):
    return _cumulative(xp, xp.cumprod, 1, x, axis, exclusive, reverse)


# ---- TopK ------------------------------------------------------------------------------------

def topk(xp, X, k, axis: int, largest: int = 1):
    """Values and int64 indices of the k largest (smallest) along ``axis``, sorted, ties by lower
    index first (a stable sort)."""
    k = np.asarray(k)
    if k.size != 1:
        raise NodeError(f"K must hold a single value, got shape {k.shape}")
    k = int(k.reshape(()))
    ax = _axis(axis, X.ndim)
    if not 0 <= k <= X.shape[ax]:
        raise NodeError(f"k={k} is out of range for axis {ax} of length {X.shape[ax]}")
    keys = X.astype(np.float32) if X.dtype.name == "bfloat16" else X  # CuPy's sorts refuse bfloat16
    order = xp.argsort(keys, axis=ax, descending=bool(largest), stable=True)
    idx = order[tuple(slice(0, k) if i == ax else slice(None) for i in range(X.ndim))]
    return xp.take_along_axis(X, idx, axis=ax), idx.astype(np.int64)


@op("TopK", since=1)
def TopK_1(xp, X, *, k, axis=-1):
    return topk(xp, X, k, axis)


@op("TopK", since=10, host_inputs=(1,))
def TopK_10(xp, X, K, *, axis=-1):
    return topk(xp, X, K, axis)


@op("TopK", since=11, host_inputs=(1,))  # 24 only adds bfloat16
def TopK(xp, X, K, *, axis=-1, largest=1, sorted=1):  # noqa: A002 - the ONNX attribute name
    # sorted=0 leaves the order unspecified: the sorted order is a valid answer.
    return topk(xp, X, K, axis, largest)
