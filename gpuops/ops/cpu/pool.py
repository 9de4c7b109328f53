"""MaxPool, AveragePool, LpPool and GlobalAveragePool on the CPU (``@op(..., device="cpu")``): the
native window kernel (``cpu_kernels/pool.c``) for 2-D float32 (and 8-bit MaxPool, through float32),
windows reduced over the shifted
flat planes of :class:`.conv.Planes` (long contiguous rows, where the generic op slices one spatial
axis at a time), and the global average as one pass (``cpu_kernels/rows.c``) or one BLAS
matrix-vector product. The generic ops of :mod:`gpuops.ops.pool` stay their fallback and test oracle.
"""

from __future__ import annotations

import math

import numpy as np

from ... import native
from ...registry import op
from .. import pool as _pool
from .. import windows
from ._common import on_host
from .conv import Planes


def _reduce_windows(xp, X, kernel, strides, dilations, pb, pe, out, pad_value, ufunc):
    """:func:`gpuops.ops.pool.reduce_windows`, stride-1 or padded windows through :class:`.conv.Planes`."""
    if X.size and all(o > 0 for o in out) and math.prod(kernel) > 1 and (
            all(s == 1 for s in strides) or any(pb) or any(pe)):
        pl = Planes(X, kernel, strides, dilations, pb, out, pad_value)
        return pl.crop(pl.reduce(ufunc), X.shape[1])
    return _pool.reduce_windows(xp, X, kernel, strides, dilations, pb, pe, out, pad_value, ufunc)


def _native_pool(X, kernel, strides, dilations, pb, pe, out, mode):
    """2-D float32 MaxPool (mode 0) or AveragePool (1: cells inside the input count, 2: cells inside
    the explicitly padded input count) by the native kernel (``cpu_kernels/pool.c``); None when it
    does not apply or is unavailable."""
    if not (X.ndim == 4 and X.dtype == np.float32 and X.size and all(o > 0 for o in out)):
        return None
    fn = native.function("pool2d_f32")
    if fn is None:
        return None
    X = np.ascontiguousarray(X)
    (N, C, H, W) = X.shape
    Y = np.empty((N, C) + tuple(out), dtype=np.float32)
    native.call(fn, native.ptr(X), native.ptr(Y), N * C, H, W, *out, *kernel, *strides, *pb, *dilations, mode, *pe)
    return Y


@op("MaxPool", since=1, device="cpu", n_outputs=True)
def MaxPool(xp, X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, pads=None,
            storage_order=0, strides=None, n_outputs=1):
    if n_outputs != 1 or not on_host(X):
        return _pool.MaxPool(xp, X, auto_pad=auto_pad, ceil_mode=ceil_mode, dilations=dilations,
                             kernel_shape=kernel_shape, pads=pads, storage_order=storage_order, strides=strides,
                             n_outputs=n_outputs)
    kernel, strides, dilations, pb, pe, out = windows.pool_geometry(X, kernel_shape, strides, dilations, pads,
                                                              auto_pad, ceil_mode)
    if _pool.whole_input(X, kernel, dilations, pb, pe):
        return _pool.GlobalMaxPool(xp, X)
    if X.dtype == np.uint8 or X.dtype == np.int8:  # 8-bit (quantized) maps: exact in float32
        Y = _native_pool(X.astype(np.float32), kernel, strides, dilations, pb, pe, out, 0)
        if Y is not None and Y.size and Y.min() > -np.inf:  # (-inf: a window of padding only)
            return Y.astype(X.dtype)
    Y = _native_pool(X, kernel, strides, dilations, pb, pe, out, 0)
    if Y is not None:
        return Y
    return _reduce_windows(xp, X, kernel, strides, dilations, pb, pe, out, _pool.lowest(X.dtype), np.maximum)


@op("AveragePool", since=1, device="cpu")
def AveragePool(xp, X, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
                kernel_shape=None, pads=None, strides=None):
    if not on_host(X):
        return _pool.AveragePool(xp, X, auto_pad=auto_pad, ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                                 dilations=dilations, kernel_shape=kernel_shape, pads=pads, strides=strides)
    kernel, strides, dilations, pb, pe, out = windows.pool_geometry(X, kernel_shape, strides, dilations, pads,
                                                              auto_pad, ceil_mode)
    if _pool.whole_input(X, kernel, dilations, pb, pe):
        return GlobalAveragePool(xp, X)
    Y = _native_pool(X, kernel, strides, dilations, pb, pe, out, 2 if count_include_pad else 1)
    if Y is not None:
        return Y
    counts = windows.window_counts(xp, X.shape[2:], kernel, strides, dilations, pb, pe, out, count_include_pad,
                                  X.dtype)
    return _reduce_windows(xp, X, kernel, strides, dilations, pb, pe, out, 0, np.add) / counts


@op("LpPool", since=1, device="cpu")
def LpPool(xp, X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, p=2,
           pads=None, strides=None):
    if not on_host(X):
        return _pool.LpPool(xp, X, auto_pad=auto_pad, ceil_mode=ceil_mode, dilations=dilations,
                            kernel_shape=kernel_shape, p=p, pads=pads, strides=strides)
    kernel, strides, dilations, pb, pe, out = windows.pool_geometry(X, kernel_shape, strides, dilations, pads,
                                                              auto_pad, ceil_mode)
    total = _reduce_windows(xp, _pool.abs_pow(xp, X, p), kernel, strides, dilations, pb, pe, out, 0, np.add)
    return _pool.lp_root(xp, total, p)


@op("GlobalAveragePool", since=1, device="cpu")
def GlobalAveragePool(xp, X):
    axes = _pool.spatial_axes(X)
    n = math.prod(X.shape[2:])
    if not (on_host(X) and X.dtype in (np.float32, np.float64) and n and X.size):
        return _pool.GlobalAveragePool(xp, X)
    rows = np.ascontiguousarray(X).reshape(-1, n)
    fn = native.function("row_mean_f32") if X.dtype == np.float32 else None
    if fn is not None:  # one pass
        Y = np.empty(tuple(X.shape[:2]) + (1,) * len(axes), dtype=np.float32)
        native.call(fn, native.ptr(rows), native.address(Y), rows.shape[0], n)
        return Y
    # one BLAS matrix-vector product with ones (np.mean's reduction over a tuple of axes is several
    # times slower on small maps), then the division np.mean does
    S = np.matmul(rows, np.ones(n, dtype=X.dtype))
    S /= n
    return S.reshape(tuple(X.shape[:2]) + (1,) * len(axes))
