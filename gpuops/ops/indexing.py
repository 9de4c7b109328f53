"""Indexing ops: Gather, GatherElements, GatherND, Scatter / ScatterElements, ScatterND, TensorScatter.

Indices may be negative (counting from the end of their axis). Out-of-range indices raise a
:class:`NodeError` naming the input and the accepted bounds rather than wrapping (CuPy's ``take``
wraps silently). The bounds check needs the indices' min and max on the host: on a device it is
deferred to the end of the run (:mod:`.checks`), so no node synchronises, and the ops index with
indices wrapped into range (:func:`_normalise`), which changes nothing for valid ones.

Scatter reductions with duplicate indices. NumPy has ``np.add.at`` but CuPy has no portable
equivalent for every reduction (no ``multiply.at``), and plain fancy assignment keeps an arbitrary
duplicate on the GPU. So every scatter goes through :func:`_scatter_rows`: the updates are stably
sorted by target, combined within each run of equal targets by a segmented inclusive scan
(Hillis-Steele: ceil(log2(M)) vectorised passes for M updates, a bound known from the shapes, so no
synchronisation), and the last element of each run - the whole run reduced, or for
``reduction="none"`` the last update in input order - is written with targets that are now unique.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import NodeError
from ..registry import op
from .checks import require


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise NodeError(f"axis {axis} is out of range for rank {rank} (accepted [{-rank}, {rank - 1}])")
    return axis % rank


def check_bounds(xp, indices, bounds: tuple[int, ...], name: str = "indices") -> None:
    """Raise if an index is outside [-n, n-1]; ``bounds`` has one n per last-axis component of
    ``indices`` (GatherND/ScatterND tuples) or a single n for every element."""
    if indices.size == 0:
        return
    k = len(bounds)
    flat = xp.reshape(indices, (-1, k))

    def check(lohi):
        lo, hi = lohi.astype(np.int64)
        for j, n in enumerate(bounds):
            if lo[j] < -n or hi[j] >= n:
                bad = int(lo[j]) if lo[j] < -n else int(hi[j])
                where = f" (component {j} of the index tuples)" if k > 1 else ""
                raise NodeError(f"input {name!r}: index {bad} is out of range [-{n}, {n - 1}]{where}")

    require(xp.stack([xp.min(flat, axis=0), xp.max(flat, axis=0)]), check)


def _normalise(xp, indices, n):
    """Indices (bounds-checked, perhaps deferred) with negative values counted from the end, as int64;
    out-of-range ones wrap into [0, n) so that a deferred check's run cannot fault."""
    return indices.astype(np.int64) % max(n, 1)


def _element_indices(xp, data, indices, axis: int):
    """GatherElements / ScatterElements ``indices`` (of data's rank), checked to fit inside ``data``
    off ``axis`` and to be in range along it, normalised to int64 in [0, n)."""
    for i, (d, k) in enumerate(zip(data.shape, indices.shape)):
        if i != axis and k > d:
            raise NodeError(f"indices shape {tuple(indices.shape)} exceeds data shape {tuple(data.shape)} "
                            f"on axis {i}")
    n = data.shape[axis]
    check_bounds(xp, indices, (n,))
    return _normalise(xp, indices, n)


def _strides(shape) -> list[int]:
    """C-order element strides of ``shape``."""
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


# -- gathers -----------------------------------------------------------------------------------


@op("Gather", since=1)
def Gather(xp, data, indices, *, axis=0):
    axis = _axis(axis, data.ndim)
    n = data.shape[axis]
    check_bounds(xp, indices, (n,))
    return xp.take(data, _normalise(xp, indices, n), axis=axis)


@op("GatherElements", since=11)
def GatherElements(xp, data, indices, *, axis=0):
    axis = _axis(axis, data.ndim)
    if indices.ndim != data.ndim:
        raise NodeError(f"indices rank {indices.ndim} differs from data rank {data.ndim}")
    ind = _element_indices(xp, data, indices, axis)
    # indices may be smaller than data off the gather axis: take the matching corner of data
    data = data[tuple(slice(None) if i == axis else slice(0, k) for i, k in enumerate(indices.shape))]
    return xp.take_along_axis(data, ind, axis=axis)


def _gather_nd(xp, data, indices, batch_dims: int):
    b = batch_dims
    if indices.ndim < 1 or not 0 <= b < min(data.ndim, indices.ndim):
        raise NodeError(f"batch_dims {b} must be below the ranks of data ({data.ndim}) and indices "
                        f"({indices.ndim})")
    if tuple(data.shape[:b]) != tuple(indices.shape[:b]):
        raise NodeError(f"the first {b} dimensions of data {tuple(data.shape)} and indices "
                        f"{tuple(indices.shape)} must match")
    k = indices.shape[-1]
    if k > data.ndim - b:
        raise NodeError(f"index tuples of length {k} exceed the {data.ndim - b} indexable data dimensions")
    dims, rest = tuple(data.shape[b:b + k]), tuple(data.shape[b + k:])
    check_bounds(xp, indices, dims)
    batch, mid = math.prod(data.shape[:b]), tuple(indices.shape[b:-1])
    ind = xp.reshape(indices, (batch, math.prod(mid), k)).astype(np.int64)
    lin = xp.zeros(ind.shape[:2], dtype=np.int64)
    for j, (n, stride) in enumerate(zip(dims, _strides(dims))):  # k is small: one pass per component
        lin = lin + _normalise(xp, ind[..., j], n) * stride
    flat = xp.reshape(data, (batch, math.prod(dims)) + rest)
    out = flat[xp.reshape(xp.arange(batch, dtype=np.int64), (batch, 1)), lin]
    return xp.reshape(out, tuple(data.shape[:b]) + mid + rest)


@op("GatherND", since=11)
def GatherND_11(xp, data, indices):
    return _gather_nd(xp, data, indices, 0)


@op("GatherND", since=12)
def GatherND(xp, data, indices, *, batch_dims=0):
    return _gather_nd(xp, data, indices, batch_dims)


# -- scatters ------------------------------------------------------------------------------------

_REDUCE = {"add": "add", "mul": "multiply", "max": "maximum", "min": "minimum"}


def _scatter_rows(xp, data, rows, updates, reduction: str):
    """``data`` (N, S) with row ``rows[i]`` (int64 in [0, N), duplicates allowed) combined with
    ``updates[i]`` (M, S) in order: replaced (``"none"``, the last duplicate wins) or reduced."""
    n, m = data.shape[0], rows.shape[0]
    out = xp.concat([data, xp.zeros((1,) + tuple(data.shape[1:]), dtype=data.dtype)], axis=0)
    if m == 0:
        return out[:n]
    order = xp.argsort(rows, stable=True)
    rows, vals = rows[order], updates[order]
    f = None if reduction == "none" else getattr(xp, _REDUCE[reduction])
    if f is not None:  # segmented inclusive scan: vals[i] becomes f over its run up to i
        d = 1
        while d < m:
            same = xp.reshape(rows[d:] == rows[:-d], (m - d,) + (1,) * (vals.ndim - 1))
            vals = xp.concat([vals[:d], xp.where(same, f(vals[d:], vals[:-d]), vals[d:])], axis=0)
            d *= 2
    last = xp.concat([rows[1:] != rows[:-1], xp.ones((1,), dtype=bool)])
    target = xp.where(last, rows, n)  # all but the run's last element write to the spare row n
    if f is not None:
        vals = f(out[target], vals)
    out[target] = vals.astype(data.dtype)
    return out[:n]


def _reduction(reduction: str, allowed: tuple[str, ...]) -> str:
    if reduction not in allowed:
        raise NodeError(f"unsupported reduction {reduction!r}; this opset accepts {list(allowed)}")
    return reduction


def _scatter_elements(xp, data, indices, updates, axis: int, reduction: str):
    axis = _axis(axis, data.ndim)
    if indices.ndim != data.ndim or tuple(indices.shape) != tuple(updates.shape):
        raise NodeError(f"indices {tuple(indices.shape)} and updates {tuple(updates.shape)} must have one "
                        f"shape, of the rank of data {tuple(data.shape)}")
    ind = _element_indices(xp, data, indices, axis)
    lin = xp.zeros(tuple(indices.shape), dtype=np.int64)
    for i, stride in enumerate(_strides(data.shape)):  # one pass per data axis (the rank)
        if i == axis:
            coord = ind
        else:
            shape = [1] * data.ndim
            shape[i] = indices.shape[i]
            coord = xp.reshape(xp.arange(indices.shape[i], dtype=np.int64), tuple(shape))
        lin = lin + coord * stride
    out = _scatter_rows(xp, xp.reshape(data, (-1, 1)), xp.reshape(lin, (-1,)),
                        xp.reshape(updates, (-1, 1)), reduction)
    return xp.reshape(out, tuple(data.shape))


@op("Scatter", since=9)
def Scatter(xp, data, indices, updates, *, axis=0):
    return _scatter_elements(xp, data, indices, updates, axis, "none")


@op("ScatterElements", since=11)
def ScatterElements_11(xp, data, indices, updates, *, axis=0):
    return _scatter_elements(xp, data, indices, updates, axis, "none")


@op("ScatterElements", since=16)
def ScatterElements_16(xp, data, indices, updates, *, axis=0, reduction="none"):
    return _scatter_elements(xp, data, indices, updates, axis, _reduction(reduction, ("none", "add", "mul")))


@op("ScatterElements", since=18)
def ScatterElements(xp, data, indices, updates, *, axis=0, reduction="none"):
    return _scatter_elements(xp, data, indices, updates, axis,
                             _reduction(reduction, ("none", "add", "mul", "max", "min")))


def _scatter_nd(xp, data, indices, updates, reduction: str):
    k = indices.shape[-1] if indices.ndim else 0
    if indices.ndim < 1 or k > data.ndim:
        raise NodeError(f"indices shape {tuple(indices.shape)} does not index data of rank {data.ndim}")
    dims, rest = tuple(data.shape[:k]), tuple(data.shape[k:])
    want = tuple(indices.shape[:-1]) + rest
    if tuple(updates.shape) != want:
        raise NodeError(f"updates shape {tuple(updates.shape)} must be {want}")
    check_bounds(xp, indices, dims)
    ind = xp.reshape(indices, (-1, k)).astype(np.int64)
    lin = xp.zeros((ind.shape[0],), dtype=np.int64)
    for j, (n, stride) in enumerate(zip(dims, _strides(dims))):
        lin = lin + _normalise(xp, ind[:, j], n) * stride
    out = _scatter_rows(xp, xp.reshape(data, (math.prod(dims), math.prod(rest))), lin,
                        xp.reshape(updates, (ind.shape[0], math.prod(rest))), reduction)
    return xp.reshape(out, tuple(data.shape))


@op("ScatterND", since=11)
def ScatterND_11(xp, data, indices, updates):
    return _scatter_nd(xp, data, indices, updates, "none")


@op("ScatterND", since=16)
def ScatterND_16(xp, data, indices, updates, *, reduction="none"):
    return _scatter_nd(xp, data, indices, updates, _reduction(reduction, ("none", "add", "mul")))


@op("ScatterND", since=18)
def ScatterND(xp, data, indices, updates, *, reduction="none"):
    return _scatter_nd(xp, data, indices, updates, _reduction(reduction, ("none", "add", "mul", "max", "min")))


@op("TensorScatter", since=24)
def TensorScatter(xp, past_cache, update, write_indices=None, *, axis=-2, mode="linear"):
    rank = past_cache.ndim
    axis = _axis(axis, rank)
    if axis == 0:
        raise NodeError("axis cannot be 0 (the batch dimension)")
    if mode not in ("linear", "circular"):
        raise NodeError(f"unknown mode {mode!r} (expected 'linear' or 'circular')")
    if update.ndim != rank or any(u != p for i, (u, p) in enumerate(zip(update.shape, past_cache.shape))
                                  if i != axis) or update.shape[axis] > past_cache.shape[axis]:
        raise NodeError(f"update shape {tuple(update.shape)} does not fit past_cache "
                        f"{tuple(past_cache.shape)} along axis {axis}")
    batch, max_len, seq = past_cache.shape[0], past_cache.shape[axis], update.shape[axis]
    out = past_cache.copy()
    if update.size == 0:
        return out
    if write_indices is None:
        write_indices = xp.zeros((batch,), dtype=np.int64)
    start = xp.reshape(write_indices.astype(np.int64), (batch, 1))
    pos = start + xp.reshape(xp.arange(seq, dtype=np.int64), (1, seq))  # (batch, seq) cache positions
    if mode == "linear":
        def check(lohi):
            lo, hi = lohi.astype(np.int64)
            if lo < 0 or hi + seq > max_len:
                raise NodeError(f"input 'write_indices': write index {int(lo if lo < 0 else hi)} + sequence "
                                f"length {seq} is out of range [0, {max_len}] (linear mode)")

        require(xp.stack([xp.min(write_indices), xp.max(write_indices)]), check)
    pos = pos % max_len  # circular mode; in linear mode a no-op on valid positions
    # one broadcasting index array per axis; the cache axis takes the per-batch positions
    index = []
    for i, d in enumerate(update.shape):
        shape = [1] * rank
        if i == axis:
            shape[0], shape[axis] = batch, seq
            index.append(xp.reshape(pos, tuple(shape)))
        else:
            shape[i] = d
            index.append(xp.reshape(xp.arange(d, dtype=np.int64), tuple(shape)))
    out[tuple(index)] = update
    return out
