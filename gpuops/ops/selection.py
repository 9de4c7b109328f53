"""Ops that select by value: Compress, Unique, NonZero, Where, OneHot.

The output shape of Compress, Unique and NonZero depends on the data: the array library sizes the
result (on CuPy that is one synchronisation inside ``nonzero``).
"""

from __future__ import annotations

import numpy as np

from ..device import to_host
from ..errors import NodeError
from ..registry import op
from .shape import host_scalar, normalize_axis


# -- Compress, Unique, NonZero, Where, OneHot ---------------------------------------------------


@op("Compress", since=9, syncs="the output's size depends on the data")
def Compress(xp, input, condition, *, axis=None):
    if axis is None:
        input = xp.reshape(input, (-1,))
        axis = 0
    axis = normalize_axis(axis, input.ndim)
    if condition.ndim != 1:
        raise NodeError(f"condition must be 1-D, got shape {tuple(condition.shape)}")
    n = input.shape[axis]
    if condition.shape[0] > n:  # a shorter condition drops the tail; a longer one may not select past it
        if to_host(xp.any(condition[n:])):
            raise NodeError(f"condition of length {condition.shape[0]} selects past the end of an axis "
                            f"of length {n}")
        condition = condition[:n]
    return xp.take(input, xp.nonzero(condition)[0], axis=axis)


def _sort_keys(a):
    """``a`` in a type every sort takes: CuPy's sorts (Thrust) refuse bfloat16, which float32 holds
    exactly, in the same order."""
    return a.astype(np.float32) if a.dtype.name == "bfloat16" else a


@op("Unique", since=11, syncs="the output's size depends on the data")
def Unique(xp, X, *, axis=None, sorted=1):  # noqa: A002 - the spec's attribute name
    if axis is None:
        rows = xp.reshape(X, (-1,))
        order = xp.argsort(_sort_keys(rows), stable=True)
        s = rows[order]
        change = s[1:] != s[:-1]
    else:
        axis = normalize_axis(axis, X.ndim)
        moved = xp.moveaxis(X, axis, 0)
        rows = xp.reshape(moved, (X.shape[axis], -1))
        # lexsort's last key is the primary one: sort the rows by their first column first
        order = xp.lexsort(_sort_keys(rows)[:, ::-1].T) if rows.shape[1] else xp.arange(rows.shape[0])
        s = rows[order]
        change = xp.any(s[1:] != s[:-1], axis=1)
    n = rows.shape[0]
    first = xp.concat([xp.ones((min(n, 1),), dtype=bool), change])  # starts a new value (sorted order)
    starts = xp.nonzero(first)[0]
    group = xp.cumsum(first.astype(np.int64)) - 1  # value number of each sorted position
    indices = order[starts].astype(np.int64)  # stable sort: the first occurrence heads its run
    counts = xp.diff(xp.concat([starts, xp.asarray([n], dtype=starts.dtype)])).astype(np.int64)
    inverse = xp.empty((n,), dtype=np.int64)
    inverse[order] = group
    if not sorted:  # number the values by first occurrence instead
        perm = xp.argsort(indices, stable=True)
        rank = xp.empty_like(perm)
        rank[perm] = xp.arange(perm.shape[0], dtype=perm.dtype)
        indices, counts, inverse = indices[perm], counts[perm], rank[inverse].astype(np.int64)
    Y = xp.take(X, indices, axis=axis) if axis is not None else rows[indices]
    return Y, indices, inverse, counts


@op("NonZero", since=9, syncs="the output's size depends on the data")
def NonZero(xp, X):
    if X.ndim == 0:  # a scalar has no coordinates: shape (0, 1) if it is non-zero, else (0, 0)
        n = xp.nonzero(xp.reshape(X, (1,)))[0].shape[0]
        return xp.zeros((0, n), dtype=np.int64)
    return xp.stack(xp.nonzero(X), axis=0).astype(np.int64)


@op("Where", since=9)
def Where(xp, condition, X, Y):
    return xp.where(condition, X, Y)


def _one_hot(xp, indices, depth, values, axis: int, wrap_negative: bool):
    depth = int(host_scalar(depth))
    if depth < 1:
        raise NodeError(f"depth must be positive, got {depth}")
    rank = indices.ndim + 1
    axis = normalize_axis(axis, rank)
    if values.ndim != 1 or values.shape[0] != 2:
        raise NodeError(f"values must be [off_value, on_value], got shape {tuple(values.shape)}")
    ind = indices.astype(np.int64) if indices.dtype.kind != "i" else indices
    if wrap_negative:
        ind = xp.where(ind < 0, ind + depth, ind)
    ind = xp.expand_dims(ind, axis=axis)
    shape = [1] * rank
    shape[axis] = depth
    hot = ind == xp.reshape(xp.arange(depth, dtype=ind.dtype), tuple(shape))
    return xp.where(hot, values[1], values[0])


@op("OneHot", since=9, host_inputs=(1,))
def OneHot_9(xp, indices, depth, values, *, axis=-1):
    return _one_hot(xp, indices, depth, values, axis, wrap_negative=False)


@op("OneHot", since=11, host_inputs=(1,))
def OneHot(xp, indices, depth, values, *, axis=-1):
    return _one_hot(xp, indices, depth, values, axis, wrap_negative=True)
