"""com.microsoft detection-style ops: CropAndResize, MaxpoolWithMask, ConvTransposeWithDynamicPads and
NhwcMaxPool.

CropAndResize is TensorFlow's ``crop_and_resize`` (corner-aligned sampling of normalised boxes,
bilinear or nearest with ``round`` half away from zero, ``extrapolation_value`` outside the image).

MaxpoolWithMask reproduces onnxruntime's kernel, which the spec leaves as "for internal use": each
window is scanned in row-major order and the scan of a row along the last axis stops at the first
cell whose mask is 0 (the flat spatial index 0 never stops a 2-D/3-D scan); windows never read
padding, and an empty window gives the lowest float. The mask plane of the flat channel ``c`` starts
at element ``(c * spatial_size) % (mask_N * mask_C)`` of the flat mask, as in onnxruntime.

ConvTransposeWithDynamicPads and NhwcMaxPool are ai.onnx ConvTranspose (pads from an input) and
MaxPool (channels-last 8-bit data).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ...errors import NodeError
from ...registry import op
from ..conv import ConvTranspose as _conv_transpose
from ..windows import conv_geometry, spatial_attrs, window_taps
from ..elementwise import clamp
from ..pool import MaxPool as _max_pool

MS = "com.microsoft"


# -- CropAndResize ------------------------------------------------------------------------------

def _round_half_away(xp, v):
    return xp.sign(v) * xp.floor(xp.abs(v) + 0.5)


@op("CropAndResize", domain=MS, since=1, host_inputs=(3,))
def CropAndResize(xp, X, rois, batch_indices, crop_size, *, extrapolation_value=0.0, mode="bilinear"):
    if mode not in ("bilinear", "nearest"):
        raise NodeError(f"CropAndResize mode must be 'bilinear' or 'nearest', got {mode!r}")
    if X.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4:
        raise NodeError(f"expected X (N, C, H, W) and rois (R, 4), got {tuple(X.shape)} and {tuple(rois.shape)}")
    CH, CW = (int(v) for v in np.asarray(crop_size).reshape(-1)[:2])
    if CH <= 0 or CW <= 0:
        raise NodeError(f"crop_size must be positive, got {[CH, CW]}")
    _, C, H, W = X.shape
    R = rois.shape[0]
    ct = np.float64 if X.dtype == np.float64 else np.float32
    r = rois.astype(ct)
    y1, x1, y2, x2 = (r[:, i:i + 1] for i in range(4))

    def coords(lo, hi, n_out, size):
        if n_out > 1:
            step = (hi - lo) * float(size - 1) / float(n_out - 1)
            return lo * float(size - 1) + xp.reshape(xp.arange(n_out, dtype=ct), (1, -1)) * step
        return 0.5 * (lo + hi) * float(size - 1)

    ys = coords(y1, y2, CH, H)  # (R, CH)
    xs = coords(x1, x2, CW, W)  # (R, CW)
    inside = ((ys >= 0) & (ys <= H - 1))[:, :, None] & ((xs >= 0) & (xs <= W - 1))[:, None, :]
    b = xp.reshape(batch_indices.astype(np.int64), (R, 1, 1))

    def gather(yi, xi):  # -> (R, C, CH, CW)
        yi = clamp(xp, yi, 0, H - 1).astype(np.int64)[:, :, None]
        xi = clamp(xp, xi, 0, W - 1).astype(np.int64)[:, None, :]
        return xp.moveaxis(X[b, :, yi, xi], -1, 1).astype(ct)

    if mode == "nearest":
        Y = gather(_round_half_away(xp, ys), _round_half_away(xp, xs))
    else:
        y0, x0 = xp.floor(ys), xp.floor(xs)
        y1i, x1i = xp.ceil(ys), xp.ceil(xs)
        ly, lx = (ys - y0)[:, None, :, None], (xs - x0)[:, None, None, :]
        top_left, top_right = gather(y0, x0), gather(y0, x1i)
        bottom_left, bottom_right = gather(y1i, x0), gather(y1i, x1i)
        top = top_left + (top_right - top_left) * lx
        bottom = bottom_left + (bottom_right - bottom_left) * lx
        Y = top + (bottom - top) * ly
    Y = xp.where(inside[:, None], Y, xp.asarray(extrapolation_value, dtype=ct))
    return Y.astype(X.dtype)


# -- MaxpoolWithMask ----------------------------------------------------------------------------

@op("MaxpoolWithMask", domain=MS, since=1)
def MaxpoolWithMask(xp, X, M, *, auto_pad="NOTSET", kernel_shape=None, pads=None, storage_order=0, strides=None):
    if X.ndim < 3 or X.ndim > 5 or M.ndim != X.ndim:
        raise NodeError(f"X must have rank 3..5 and M the same rank, got {tuple(X.shape)} and {tuple(M.shape)}")
    if tuple(M.shape[2:]) != tuple(X.shape[2:]):
        raise NodeError(f"mask spatial shape {tuple(M.shape[2:])} differs from X's {tuple(X.shape[2:])}")
    if not kernel_shape:
        raise NodeError("kernel_shape is required")
    nd = X.ndim - 2
    kernel, strides, dil, pb, pe = spatial_attrs(nd, kernel_shape, strides, None, pads)
    pb, pe, out = conv_geometry(X.shape[2:], kernel, strides, dil, pb, pe, auto_pad)
    N, C = X.shape[:2]
    size = math.prod(X.shape[2:])
    # the mask plane each flat channel reads (onnxruntime's offset rule), gathered once
    offsets = (np.arange(N * C, dtype=np.int64) * size) % max(1, M.shape[0] * M.shape[1])
    index = xp.asarray((offsets[:, None] + np.arange(size, dtype=np.int64)[None, :]).reshape(X.shape))
    ok = xp.take(xp.reshape(M, (-1,)), xp.reshape(index, (-1,))).reshape(X.shape) != 0
    if nd >= 2:  # the cell at flat spatial index 0 never stops a scan
        first = np.zeros(X.shape[2:], dtype=bool)
        first.flat[0] = True
        ok = ok | xp.asarray(first)
    low = float(np.finfo(np.dtype(X.dtype)).min)
    inb = xp.ones((1, 1) + tuple(X.shape[2:]), dtype=bool)
    taps = zip(window_taps(xp, X, kernel, strides, dil, pb, pe, out, low),
               window_taps(xp, ok, kernel, strides, dil, pb, pe, out, True),
               window_taps(xp, inb, kernel, strides, dil, pb, pe, out, False))
    Y = xp.full((N, C) + tuple(out), low, dtype=X.dtype)
    alive = None
    for tap, (x, m, valid) in zip(itertools.product(*(range(k) for k in kernel)), taps):
        if tap[-1] == 0:  # a new row of the window along the last axis
            alive = xp.ones(Y.shape, dtype=bool)
        alive = alive & (m | ~valid)
        Y = xp.where(alive & valid & (x > Y), x, Y)
    return Y


# -- ConvTransposeWithDynamicPads, NhwcMaxPool ---------------------------------------------------

@op("ConvTransposeWithDynamicPads", domain=MS, since=1, host_inputs=(2,))
def ConvTransposeWithDynamicPads(xp, X, W, Pads=None, B=None, *, auto_pad="NOTSET", dilations=None, group=1,
                                 kernel_shape=None, output_padding=None, strides=None):
    pads = None if Pads is None else [int(v) for v in np.asarray(Pads).reshape(-1)]
    return _conv_transpose(xp, X, W, B, auto_pad=auto_pad, dilations=dilations, group=group,
                           kernel_shape=kernel_shape, output_padding=output_padding, pads=pads, strides=strides)


@op("NhwcMaxPool", domain=MS, since=1)
def NhwcMaxPool(xp, x, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape, pads=None, strides=None):
    if x.ndim < 3:
        raise NodeError(f"x must be (N, D1.., C), got shape {tuple(x.shape)}")
    y = _max_pool(xp, xp.moveaxis(x, -1, 1), auto_pad=auto_pad, ceil_mode=ceil_mode, dilations=dilations,
                  kernel_shape=kernel_shape, pads=pads, strides=strides)
    return xp.moveaxis(y, 1, -1)
