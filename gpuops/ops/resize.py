"""Resampling ops: Resize (10, 11, 18), Upsample (1, 7, 9), GridSample (16, 20), AffineGrid (20).

Resize is separable: each resized axis is one vectorised 1-D pass, ``take`` of the tap indices
along that axis then a weighted sum over the taps. Tap indices and weights depend only on shapes
and attributes: float64 formulas (like the onnx reference) run on the host to tell which axes need a
pass, and again on the device for the pass, where a host->device copy would stop a CUDA graph
capture. GridSample gathers every combination of per-dimension taps at once.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..errors import NodeError
from ..registry import op
from .elementwise import clamp

_COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                "tf_crop_and_resize", "tf_half_pixel_for_nn")


def _compute_dtype(dtype):
    """Float type used for interpolation arithmetic on inputs of ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype == np.float64 or (dtype.kind in "iu" and dtype.itemsize >= 4):
        return np.float64
    return np.float32


def _finish(xp, Y, dtype):
    """Interpolated floats -> the input dtype (integers are rounded and saturated)."""
    dtype = np.dtype(dtype)
    if Y.dtype == dtype:
        return Y
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        Y = clamp(xp, xp.round(Y), float(info.min), float(info.max))
    return xp.astype(Y, dtype)


# -- Resize: coordinates, taps and weights, with the array module m (NumPy, or the device's) --------

def _source_coords(m, mode, out_len, in_len, scale, roi):
    """Input coordinate of every output index along one axis, and the tf_crop_and_resize outside mask."""
    y = m.arange(out_len, dtype=np.float64)
    width = scale * in_len  # the fractional output length, as the onnx reference uses it
    outside = None
    if mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / width)
        x = offset + (y + 0.5) / scale - 0.5
    elif mode == "pytorch_half_pixel":
        x = (y + 0.5) / scale - 0.5 if out_len > 1 else m.zeros(out_len, dtype=np.float64)
    elif mode == "align_corners":
        x = y * (in_len - 1) / (width - 1) if width != 1 else m.zeros(out_len, dtype=np.float64)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_half_pixel_for_nn":
        x = (y + 0.5) / scale
    elif mode == "tf_crop_and_resize":
        lo, hi = roi
        if width == 1:
            x = m.full(out_len, float((hi - lo) * (in_len - 1) / 2), dtype=np.float64)
        else:
            x = y * (hi - lo) * (in_len - 1) / (width - 1)
        x = x + lo * (in_len - 1)
        outside = (x < 0) | (x > in_len - 1)
    else:
        raise NodeError(f"unsupported coordinate_transformation_mode {mode!r}")
    return x, outside


def _nearest_taps(m, x, nearest_mode, scale, in_len):
    f = m.floor(x)
    r = x - f
    if nearest_mode == "round_prefer_floor":
        idx = f + (r > 0.5)
    elif nearest_mode == "round_prefer_ceil":
        idx = f + (r >= 0.5)
    elif nearest_mode == "floor":
        idx = f
    elif nearest_mode == "ceil":
        idx = f + (r > 0)
    elif nearest_mode == "simple":  # Resize-10 / Upsample (onnxruntime): ceil when downsampling, else truncate
        idx = m.ceil(x) if scale < 1 else m.trunc(x)
    else:
        raise NodeError(f"unsupported nearest_mode {nearest_mode!r}")
    return m.reshape(clamp(m, idx, 0, in_len - 1).astype(np.int64), (-1, 1)), None


def _cubic_kernel(m, t, A):
    t = m.abs(t)
    near = ((A + 2) * t - (A + 3)) * t * t + 1
    far = ((A * t - 5 * A) * t + 8 * A) * t - 4 * A
    return m.where(t <= 1, near, m.where(t < 2, far, 0.0))


def _filter_taps(m, x, mode, scale, in_len, antialias, cubic_coeff_a, exclude_outside):
    """Tap indices (out, n) and weights (out, n) of linear / cubic interpolation (optionally antialiased)."""
    radius = 1 if mode == "linear" else 2
    s = min(scale, 1.0) if antialias else 1.0  # antialias stretches the filter by 1/scale when downscaling
    start = int(np.floor(-radius / s)) + 1
    offsets = m.reshape(m.arange(start, 2 - start, dtype=np.int64), (1, -1))
    f = m.floor(x)
    t = (offsets - m.reshape(x - f, (-1, 1))) * s  # scaled distance from x to each tap
    if mode == "linear":
        w = clamp(m, 1 - m.abs(t), 0, 1)
    else:
        w = _cubic_kernel(m, t, cubic_coeff_a)
    if antialias:
        w = w / m.sum(w, axis=1, keepdims=True)
    idx = m.reshape(f.astype(np.int64), (-1, 1)) + offsets
    if exclude_outside:
        w = m.where((idx < 0) | (idx >= in_len), 0.0, w)
        total = m.sum(w, axis=1, keepdims=True)
        w = w / m.where(total == 0, 1.0, total)
    return clamp(m, idx, 0, in_len - 1), w


def _resize_axis(xp, Y, axis, idx, w, outside, extrapolation_value):
    """One separable pass: gather the taps along ``axis`` and take their weighted sum."""
    out_len, n = idx.shape
    G = xp.take(Y, xp.reshape(idx, (-1,)), axis=axis)
    trailing = (1,) * (Y.ndim - axis - 1)
    if w is not None:
        G = xp.reshape(G, Y.shape[:axis] + (out_len, n) + Y.shape[axis + 1:])
        G = xp.sum(G * xp.reshape(w, (out_len, n) + trailing).astype(Y.dtype), axis=axis + 1)
    if outside is not None:
        G = xp.where(xp.reshape(outside, (out_len,) + trailing), xp.full_like(G, extrapolation_value), G)
    return G


def _resize(xp, X, roi=None, scales=None, sizes=None, *, mode="nearest", coordinate_transformation_mode="half_pixel",
            nearest_mode="round_prefer_floor", cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0,
            antialias=0, axes=None, keep_aspect_ratio_policy="stretch"):
    rank = X.ndim
    axes = list(range(rank)) if axes is None else [a + rank if a < 0 else a for a in axes]
    if any(not 0 <= a < rank for a in axes) or len(set(axes)) != len(axes):
        raise NodeError(f"axes {axes} invalid for an input of rank {rank}")
    scales = None if scales is None or scales.size == 0 else [float(v) for v in scales]
    sizes = None if sizes is None or sizes.size == 0 else [int(v) for v in sizes]
    if (scales is None) == (sizes is None):
        raise NodeError("exactly one of 'scales' and 'sizes' must be given")
    given = scales if scales is not None else sizes
    if len(given) != len(axes):
        raise NodeError(f"{'scales' if scales is not None else 'sizes'} has {len(given)} values, expected {len(axes)}")
    if mode not in ("nearest", "linear", "cubic"):
        raise NodeError(f"unsupported Resize mode {mode!r}")
    if coordinate_transformation_mode not in _COORD_MODES:
        raise NodeError(f"unsupported coordinate_transformation_mode {coordinate_transformation_mode!r}")

    in_shape = X.shape
    if scales is not None:
        scale = dict(zip(axes, scales))
        out = {a: int(math.floor(scale[a] * in_shape[a])) for a in axes}
    elif keep_aspect_ratio_policy == "stretch":
        out = dict(zip(axes, sizes))
        scale = {a: out[a] / in_shape[a] for a in axes}
    elif keep_aspect_ratio_policy in ("not_larger", "not_smaller"):
        pick = min if keep_aspect_ratio_policy == "not_larger" else max
        s = pick(n / in_shape[a] for a, n in zip(axes, sizes))
        scale = {a: s for a in axes}
        out = {a: int(s * in_shape[a] + 0.5) for a in axes}  # round half up
    else:
        raise NodeError(f"unsupported keep_aspect_ratio_policy {keep_aspect_ratio_policy!r}")
    if any(v <= 0 for v in scale.values()):
        raise NodeError(f"Resize scales must be positive, got {list(scale.values())}")

    rois = {a: (0.0, 1.0) for a in axes}
    if coordinate_transformation_mode == "tf_crop_and_resize":
        if roi is None or roi.size != 2 * len(axes):
            raise NodeError(f"tf_crop_and_resize needs a roi of {2 * len(axes)} values")
        roi = np.asarray(roi).reshape(-1)  # kept in its own (float32) precision, as the onnx reference does
        rois = {a: (roi[i], roi[i + len(axes)]) for i, a in enumerate(axes)}

    Y = X if mode == "nearest" else xp.astype(X, _compute_dtype(X.dtype))
    for a in axes:
        args = (coordinate_transformation_mode, out[a], in_shape[a], scale[a], rois[a])
        x, outside = _source_coords(np, *args)
        if mode == "nearest":
            identity = np.array_equal(_nearest_taps(np, x, nearest_mode, scale[a], in_shape[a])[0][:, 0],
                                      np.arange(in_shape[a]))
        else:
            identity = np.array_equal(x, np.arange(in_shape[a]))
        outside_any = outside is not None and bool(outside.any())
        if identity and not outside_any:
            continue
        x, outside = _source_coords(xp, *args)
        if mode == "nearest":
            idx, w = _nearest_taps(xp, x, nearest_mode, scale[a], in_shape[a])
        else:
            idx, w = _filter_taps(xp, x, mode, scale[a], in_shape[a], antialias, cubic_coeff_a, exclude_outside)
        Y = _resize_axis(xp, Y, a, idx, w, outside if outside_any else None, extrapolation_value)
    return _finish(xp, Y, X.dtype)


@op("Resize", since=10, host_inputs=(1,))
def Resize_10(xp, X, scales, *, mode="nearest"):
    return _resize(xp, X, scales=scales, mode=_linear_alias(mode), coordinate_transformation_mode="asymmetric",
                   nearest_mode="simple")


@op("Resize", since=11, host_inputs=(1, 2, 3))
def Resize_11(xp, X, roi=None, scales=None, sizes=None, *, coordinate_transformation_mode="half_pixel",
              cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0, mode="nearest",
              nearest_mode="round_prefer_floor"):
    return _resize(xp, X, roi, scales, sizes, mode=mode, coordinate_transformation_mode=coordinate_transformation_mode,
                   nearest_mode=nearest_mode, cubic_coeff_a=cubic_coeff_a, exclude_outside=exclude_outside,
                   extrapolation_value=extrapolation_value)


@op("Resize", since=18, host_inputs=(1, 2, 3))
def Resize(xp, X, roi=None, scales=None, sizes=None, *, antialias=0, axes=None,
           coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, exclude_outside=0,
           extrapolation_value=0.0, keep_aspect_ratio_policy="stretch", mode="nearest",
           nearest_mode="round_prefer_floor"):
    return _resize(xp, X, roi, scales, sizes, mode=mode, coordinate_transformation_mode=coordinate_transformation_mode,
                   nearest_mode=nearest_mode, cubic_coeff_a=cubic_coeff_a, exclude_outside=exclude_outside,
                   extrapolation_value=extrapolation_value, antialias=antialias, axes=axes,
                   keep_aspect_ratio_policy=keep_aspect_ratio_policy)


# -- Upsample (deprecated): asymmetric coordinates, scales >= 1 -----------------------------------

def _linear_alias(mode):
    return "linear" if mode in ("bilinear", "trilinear") else mode


def _upsample(xp, X, scales, mode):
    mode = _linear_alias(mode)
    if mode not in ("nearest", "linear"):
        raise NodeError(f"unsupported Upsample mode {mode!r}")
    scales = np.asarray(scales, dtype=np.float32)
    if scales.size != X.ndim:
        raise NodeError(f"Upsample scales has {scales.size} values for an input of rank {X.ndim}")
    return _resize(xp, X, scales=scales, mode=mode, coordinate_transformation_mode="asymmetric",
                   nearest_mode="simple")


@op("Upsample", since=1)
def Upsample_1(xp, X, *, height_scale, width_scale, mode="nearest"):
    if X.ndim != 4:
        raise NodeError(f"Upsample-1 takes a 4-D NCHW input, got rank {X.ndim}")
    return _upsample(xp, X, [1.0, 1.0, height_scale, width_scale], mode)


@op("Upsample", since=7)
def Upsample_7(xp, X, *, scales, mode="nearest"):
    return _upsample(xp, X, scales, mode)


@op("Upsample", since=9, host_inputs=(1,))
def Upsample(xp, X, scales, *, mode="nearest"):
    return _upsample(xp, X, scales, mode)


# -- GridSample ---------------------------------------------------------------------------------

def _reflect(xp, x, lo, hi):
    """Reflect coordinates at the borders lo / hi until they fall inside (PyTorch's rule)."""
    rng = hi - lo
    if rng <= 0:
        return xp.full_like(x, lo)
    below, above = x < lo, x > hi
    dx = xp.where(below, lo - x, xp.where(above, x - hi, xp.zeros_like(x)))
    n = xp.floor(dx / rng)
    r = dx - n * rng
    even = (n % 2) == 0
    from_lo, from_hi = lo + r, hi - r
    y = xp.where(below, xp.where(even, from_lo, from_hi), x)
    return xp.where(above, xp.where(even, from_hi, from_lo), y)


def _cubic_weights(xp, t, A=-0.75):
    """Keys cubic weights of taps at offsets -1, 0, 1, 2 for a fraction t in [0, 1)."""
    def near(d):
        return ((A + 2) * d - (A + 3)) * d * d + 1

    def far(d):
        return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _grid_sample(xp, X, grid, mode, padding_mode, align_corners):
    if mode not in ("nearest", "linear", "cubic"):
        raise NodeError(f"unsupported GridSample mode {mode!r}")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise NodeError(f"unsupported GridSample padding_mode {padding_mode!r}")
    N, C, *dims = X.shape
    r = len(dims)
    if grid.ndim != r + 2 or grid.shape[0] != N or grid.shape[-1] != r:
        raise NodeError(f"grid shape {tuple(grid.shape)} does not match input shape {tuple(X.shape)}")
    out_sp = tuple(grid.shape[1:-1])
    P = math.prod(out_sp)
    cdtype = _compute_dtype(grid.dtype)
    g = xp.reshape(xp.astype(grid, cdtype), (N, P, r))

    taps = []  # per spatial dim: list of (index (N, P) int64, weight (N, P) or None, valid (N, P) or None)
    for k, L in enumerate(dims):
        n = g[..., r - 1 - k]  # grid lists coordinates innermost dimension first
        x = (n + 1) / 2 * (L - 1) if align_corners else ((n + 1) * L - 1) / 2
        if mode == "nearest":
            x = xp.round(x)  # half to even, as PyTorch
        lo, hi = (0.0, L - 1.0) if align_corners else (-0.5, L - 0.5)
        out_of_range = (x < lo) | (x > hi)
        if padding_mode == "border":
            x = xp.where(out_of_range, clamp(xp, x, 0, L - 1), x)
        elif padding_mode == "reflection":
            x = xp.where(out_of_range, _reflect(xp, x, lo, hi), x)
        if mode == "nearest":
            offs, weights, base = [0], [None], x
        else:
            base = xp.floor(x)
            t = x - base
            offs, weights = ([0, 1], [1 - t, t]) if mode == "linear" else ([-1, 0, 1, 2], _cubic_weights(xp, t))
        dim_taps = []
        for o, w in zip(offs, weights):
            i = base + o
            valid = None
            if padding_mode == "zeros":
                valid = (i >= 0) & (i <= L - 1)
            elif padding_mode == "reflection":
                i = xp.trunc(_reflect(xp, i, lo, hi))
            i = xp.astype(clamp(xp, i, 0, L - 1), xp.int64)
            dim_taps.append((i, w, valid))
        taps.append(dim_taps)

    strides = [math.prod(dims[k + 1:]) for k in range(r)]
    Xt = xp.swapaxes(xp.reshape(X, (N, C, math.prod(dims))), 1, 2)  # (N, S, C)
    if mode != "nearest":
        Xt = xp.astype(Xt, cdtype)
    batch = xp.arange(N)[:, None]
    Y = None
    for combo in itertools.product(*taps):  # every corner of the interpolation cell
        flat = sum(i * s for (i, _, _), s in zip(combo, strides))
        v = Xt[batch, flat]  # (N, P, C)
        valid = [m for _, _, m in combo if m is not None]
        weights = [w for _, w, _ in combo if w is not None]
        if mode == "nearest":
            if valid:
                inside = valid[0]
                for m in valid[1:]:
                    inside = inside & m
                v = xp.where(inside[..., None], v, xp.zeros_like(v))
        else:
            w = math.prod(weights[1:], start=weights[0])
            for m in valid:
                w = w * xp.astype(m, cdtype)
            v = v * w[..., None]
        Y = v if Y is None else Y + v
    Y = xp.moveaxis(xp.reshape(Y, (N, *out_sp, C)), -1, 1)
    if mode == "nearest":
        return Y
    return xp.astype(Y, X.dtype)  # integer outputs truncate, as the onnx reference does


@op("GridSample", since=16)
def GridSample_16(xp, X, grid, *, align_corners=0, mode="bilinear", padding_mode="zeros"):
    modes = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest"}
    if mode not in modes:
        raise NodeError(f"unsupported GridSample-16 mode {mode!r} (bilinear, nearest, bicubic)")
    if X.ndim != 4:
        raise NodeError(f"GridSample-16 takes a 4-D input, got rank {X.ndim}")
    return _grid_sample(xp, X, grid, modes[mode], padding_mode, align_corners)


@op("GridSample", since=20)
def GridSample(xp, X, grid, *, align_corners=0, mode="linear", padding_mode="zeros"):
    return _grid_sample(xp, X, grid, mode, padding_mode, align_corners)


# -- AffineGrid ---------------------------------------------------------------------------------

@op("AffineGrid", since=20, host_inputs=(1,))
def AffineGrid(xp, theta, size, *, align_corners=0):
    N, _, *dims = (int(v) for v in size)
    r = len(dims)
    if r not in (2, 3) or tuple(theta.shape) != (N, r, r + 1):
        raise NodeError(f"AffineGrid: theta {tuple(theta.shape)} does not fit size {[N, _, *dims]}")

    def axis(L):
        if align_corners:
            return np.linspace(-1.0, 1.0, L) if L > 1 else np.zeros(L)
        return (2 * np.arange(L) + 1) / L - 1

    mesh = np.meshgrid(*(axis(L) for L in dims), indexing="ij")
    # homogeneous base coordinates (x, y[, z], 1): x runs along the innermost (width) dimension
    base = np.stack([m.reshape(-1) for m in mesh[::-1]] + [np.ones(math.prod(dims))], axis=1)
    base = xp.asarray(base, dtype=theta.dtype)
    grid = xp.matmul(base[None], xp.swapaxes(theta, 1, 2))  # (N, P, r)
    return xp.reshape(grid, (N, *dims, r))
