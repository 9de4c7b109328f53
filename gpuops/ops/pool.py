"""Pooling ops: MaxPool, AveragePool, LpPool, their Global* forms, MaxUnpool and MaxRoiPool.

Max and sum over windows are separable: they are reduced one spatial axis after the other over
strided slices of the padded input, so no column tensor is built; MaxPool's indices come from
:func:`windows.window_taps`, one view per kernel tap. (The CPU's native kernels and NumPy paths are
:mod:`gpuops.ops.cpu.pool`.) Versions differ only by the attributes they accept (a superset is
taken from opset 1): ``ceil_mode`` windows that would start in the end padding are dropped, and the
average divisor counts the window cells inside the input (``count_include_pad=0``) or inside the
explicitly padded input (``count_include_pad=1``; cells added by ``ceil_mode`` never count).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import NodeError
from ..registry import op
from .checks import require
from .elementwise import clamp
from .windows import pad_for_windows, pool_geometry, spatial_attrs, window_counts, window_taps


def lowest(dtype):
    """Padding value that never wins a max: -inf, or the integer type's minimum."""
    return int(np.iinfo(dtype).min) if np.issubdtype(dtype, np.integer) else -np.inf


def reduce_windows(xp, X, kernel, strides, dilations, pb, pe, out, pad_value, ufunc):
    """``ufunc`` (maximum, add: both separable) over every window, one spatial axis after the other
    over strided slices of the padded X; ``(k - 1)`` array operations per axis, not one per tap."""
    if not X.size or not all(o > 0 for o in out):
        return xp.zeros(tuple(X.shape[:2]) + tuple(out), dtype=X.dtype)
    cur = pad_for_windows(xp, X, kernel, strides, dilations, pb, pe, out, pad_value)
    for a in range(len(kernel)):  # the last axis (strided inner loops) last, on the smallest array
        k, s, d, o = kernel[a], strides[a], dilations[a], out[a]
        views = [cur[(slice(None),) * (2 + a) + (slice(t * d, t * d + (o - 1) * s + 1, s),)] for t in range(k)]
        if k == 1:
            cur = views[0]
            continue
        acc = ufunc(views[0], views[1])
        for v in views[2:]:
            ufunc(acc, v, out=acc)
        cur = acc
    return cur if math.prod(kernel) > 1 else xp.asarray(cur, copy=True)


def whole_input(X, kernel, dilations, pb, pe) -> bool:
    """One window covering the unpadded input (ResNet's last AveragePool): the Global* reduction."""
    return tuple(kernel) == tuple(X.shape[2:]) and not any(pb) and not any(pe) and all(d == 1 for d in dilations)


def _sum_windows(xp, X, kernel, strides, dilations, pb, pe, out):
    return reduce_windows(xp, X, kernel, strides, dilations, pb, pe, out, 0, xp.add)


# -- MaxPool ------------------------------------------------------------------------------------


@op("MaxPool", since=1, n_outputs=True)
def MaxPool(xp, X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, pads=None,
            storage_order=0, strides=None, n_outputs=1):
    kernel, strides, dilations, pb, pe, out = pool_geometry(X, kernel_shape, strides, dilations, pads,
                                                        auto_pad, ceil_mode)
    low = lowest(X.dtype)
    if n_outputs == 1:
        if whole_input(X, kernel, dilations, pb, pe):
            return GlobalMaxPool(xp, X)
        return reduce_windows(xp, X, kernel, strides, dilations, pb, pe, out, low, xp.maximum)
    best = arg = None
    for t, v in enumerate(window_taps(xp, X, kernel, strides, dilations, pb, pe, out, low)):
        if best is None:
            best = v.copy()
            if n_outputs > 1:
                arg = xp.zeros(v.shape, dtype=xp.int64)
        elif n_outputs > 1:
            upd = v > best  # strict: the first maximum in row-major window order wins
            best = xp.where(upd, v, best)
            arg = xp.where(upd, xp.full_like(arg, t), arg)
        else:
            best = xp.maximum(best, v)
    if n_outputs == 1:
        return best
    return best, _max_indices(xp, X.shape, arg, kernel, strides, dilations, pb, out, storage_order)


def _max_indices(xp, shape, arg, kernel, strides, dilations, pb, out, storage_order):
    """Flat indices (into the unpadded X) of the window maxima picked by tap id ``arg`` (row-major over
    the kernel), computed on the device."""
    nd = len(kernel)
    in_shape = shape[2:]
    # spatial strides of the flattening: row-major, or column-major over the spatial axes
    order = range(nd - 1, -1, -1) if storage_order == 0 else range(nd)
    mult, m = [0] * nd, 1
    for i in order:
        mult[i] = m
        m *= in_shape[i]
    flat = None
    for i in range(nd):
        pos = xp.reshape(xp.arange(out[i], dtype=xp.int64) * strides[i] - pb[i],
                         (1, 1) + (1,) * i + (-1,) + (1,) * (nd - i - 1))
        coord = pos + (arg // math.prod(kernel[i + 1:])) % kernel[i] * dilations[i]
        term = coord * mult[i]
        flat = term if flat is None else flat + term
    nc = xp.reshape(xp.arange(shape[0] * shape[1], dtype=xp.int64), (shape[0], shape[1]) + (1,) * nd)
    return flat + nc * math.prod(in_shape)


# -- AveragePool / LpPool -----------------------------------------------------------------------


@op("AveragePool", since=1)
def AveragePool(xp, X, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
                kernel_shape=None, pads=None, strides=None):
    kernel, strides, dilations, pb, pe, out = pool_geometry(X, kernel_shape, strides, dilations, pads,
                                                        auto_pad, ceil_mode)
    if whole_input(X, kernel, dilations, pb, pe):
        return GlobalAveragePool(xp, X)
    counts = window_counts(xp, X.shape[2:], kernel, strides, dilations, pb, pe, out, count_include_pad, X.dtype)
    return _sum_windows(xp, X, kernel, strides, dilations, pb, pe, out) / counts


@op("LpPool", since=1)
def LpPool(xp, X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, p=2,
           pads=None, strides=None):
    kernel, strides, dilations, pb, pe, out = pool_geometry(X, kernel_shape, strides, dilations, pads,
                                                        auto_pad, ceil_mode)
    total = _sum_windows(xp, abs_pow(xp, X, p), kernel, strides, dilations, pb, pe, out)
    return lp_root(xp, total, p)


def abs_pow(xp, X, p):
    if p == 2:
        return X * X
    if p == 1:
        return xp.abs(X)
    return xp.abs(X) ** p


def lp_root(xp, S, p):
    if p == 2:
        return xp.sqrt(S)
    if p == 1:
        return S
    return S ** (1.0 / p)


# -- Global pools -------------------------------------------------------------------------------


def spatial_axes(X):
    if X.ndim < 2:
        raise NodeError(f"X must have rank >= 2 (N, C, ...), got shape {tuple(X.shape)}")
    return tuple(range(2, X.ndim))


@op("GlobalAveragePool", since=1)
def GlobalAveragePool(xp, X):
    return xp.mean(X, axis=spatial_axes(X), keepdims=True)


@op("GlobalMaxPool", since=1)
def GlobalMaxPool(xp, X):
    return xp.max(X, axis=spatial_axes(X), keepdims=True)


@op("GlobalLpPool", since=1)
def GlobalLpPool(xp, X, *, p=2):
    return lp_root(xp, xp.sum(abs_pow(xp, X, p), axis=spatial_axes(X), keepdims=True), p)


# -- MaxUnpool ----------------------------------------------------------------------------------


@op("MaxUnpool", since=9, host_inputs=(2,))
def MaxUnpool(xp, X, I, output_shape=None, *, kernel_shape=None, pads=None, strides=None):
    """Scatter X to the flat positions I of the tensor MaxPool read (shape inferred from the
    attributes); ``output_shape`` then zero-pads (or crops) that tensor at the end of each axis."""
    if tuple(I.shape) != tuple(X.shape):
        raise NodeError(f"indices shape {tuple(I.shape)} != X shape {tuple(X.shape)}")
    nd = X.ndim - 2
    kernel, strides, _, pb, pe = spatial_attrs(nd, kernel_shape or [], strides, None, pads)
    inferred = tuple(X.shape[:2]) + tuple((n - 1) * s - b - e + k
                                          for n, s, b, e, k in zip(X.shape[2:], strides, pb, pe, kernel))
    size = math.prod(inferred)
    flat_i = xp.reshape(I, (-1,)).astype(xp.int64)
    if flat_i.size and size == 0:
        raise NodeError(f"the unpooled tensor {list(inferred)} is empty but {flat_i.size} values are scattered into it")
    if flat_i.size:  # an index outside the unpooled tensor is refused, as onnxruntime does

        def check(lohi):
            for v in lohi.tolist():
                if not 0 <= v < size:
                    raise NodeError(f"index {v} is out of range [0, {size - 1}] (the unpooled tensor "
                                    f"{list(inferred)} has {size} elements)")

        require(xp.stack([xp.min(flat_i), xp.max(flat_i)]), check)
        flat_i = clamp(xp, flat_i, 0, max(size - 1, 0))  # a deferred check's run writes in range
    Y = xp.zeros((size,), dtype=X.dtype)
    Y[flat_i] = xp.reshape(X, (-1,))
    Y = xp.reshape(Y, inferred)
    if output_shape is None:
        return Y
    shape = tuple(int(v) for v in output_shape)
    if len(shape) != X.ndim:
        raise NodeError(f"output_shape {list(shape)} must have rank {X.ndim}")
    if shape == inferred:
        return Y
    res = xp.zeros(shape, dtype=X.dtype)
    common = tuple(slice(0, min(a, b)) for a, b in zip(shape, inferred))
    res[common] = Y[common]
    return res


# -- MaxRoiPool ---------------------------------------------------------------------------------


def _round_half_away(xp, v):
    return xp.sign(v) * xp.floor(xp.abs(v) + 0.5)


@op("MaxRoiPool", since=1)
def MaxRoiPool(xp, X, rois, *, pooled_shape=None, spatial_scale=1.0):
    """Max over each RoI's (rounded, scaled) box split into ``pooled_shape`` bins; empty bins are 0."""
    if not pooled_shape or len(pooled_shape) != 2:
        raise NodeError(f"pooled_shape must be [height, width], got {pooled_shape}")
    if X.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 5:
        raise NodeError(f"expected X (N, C, H, W) and rois (R, 5), got {tuple(X.shape)} and {tuple(rois.shape)}")
    PH, PW = (int(v) for v in pooled_shape)
    N, C, H, W = X.shape
    R = rois.shape[0]
    r = rois.astype(xp.float32)
    batch = r[:, 0].astype(xp.int64)
    box = _round_half_away(xp, r[:, 1:] * float(spatial_scale))  # x1, y1, x2, y2
    roi_w = xp.maximum(box[:, 2] - box[:, 0] + 1, 1.0)
    roi_h = xp.maximum(box[:, 3] - box[:, 1] + 1, 1.0)

    def bins(start, length, pooled, limit):
        size = length[:, None] / float(pooled)
        p = xp.arange(pooled, dtype=xp.float32)[None, :]
        lo = clamp(xp, xp.floor(p * size) + start[:, None], 0, limit)
        hi = clamp(xp, xp.ceil((p + 1) * size) + start[:, None], 0, limit)
        return lo, hi

    hs, he = bins(box[:, 1], roi_h, PH, H)  # (R, PH)
    ws, we = bins(box[:, 0], roi_w, PW, W)  # (R, PW)
    hh = xp.arange(H, dtype=xp.float32)
    ww = xp.arange(W, dtype=xp.float32)
    in_h = (hh >= hs[:, :, None]) & (hh < he[:, :, None])  # (R, PH, H)
    in_w = (ww >= ws[:, :, None]) & (ww < we[:, :, None])  # (R, PW, W)
    low = xp.asarray(-np.inf, dtype=X.dtype)
    chunk = max(1, (1 << 24) // max(1, C * H * W * max(PH, PW)))
    parts = []
    for r0 in range(0, R, chunk):  # bounded memory: masked maxima over W then H for a block of RoIs
        sl = slice(r0, min(R, r0 + chunk))
        Xr = xp.take(X, batch[sl], axis=0)  # (r, C, H, W)
        t = xp.max(xp.where(in_w[sl][:, None, None, :, :], Xr[:, :, :, None, :], low), axis=-1)  # (r, C, H, PW)
        y = xp.max(xp.where(in_h[sl][:, None, :, :, None], t[:, :, None, :, :], low), axis=3)  # (r, C, PH, PW)
        parts.append(y)
    Y = xp.concat(parts, axis=0) if parts else xp.zeros((0, C, PH, PW), dtype=X.dtype)
    empty = (he <= hs)[:, :, None] | (we <= ws)[:, None, :]  # (R, PH, PW)
    return xp.where(empty[:, None], xp.zeros_like(Y), Y)
