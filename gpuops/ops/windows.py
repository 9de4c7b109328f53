"""Sliding-window geometry, shared by the convolution, pooling and windowed contrib ops and by their
device overrides: normalised attributes (``spatial_attrs``), padding and output shapes
(``conv_geometry``, with ``auto_pad`` and ``ceil_mode``), the checked geometry of a conv or a pool, the
padded input every window lies in, the views each kernel tap sees (``window_taps``), im2col/col2im,
and the number of cells each averaging window counts. Shapes and attributes are host-side Python ints.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from ..errors import NodeError


def spatial_attrs(nd: int, kernel_shape, strides=None, dilations=None, pads=None):
    """Normalised per-axis lists: kernel, strides, dilations, pads_begin, pads_end."""
    strides = list(strides) if strides else [1] * nd
    dilations = list(dilations) if dilations else [1] * nd
    pads = list(pads) if pads else [0] * (2 * nd)
    if len(kernel_shape) != nd or len(strides) != nd or len(dilations) != nd or len(pads) != 2 * nd:
        raise NodeError(f"kernel_shape/strides/dilations/pads do not match {nd} spatial axes "
                        f"(kernel_shape={list(kernel_shape)}, strides={strides}, dilations={dilations}, "
                        f"pads={pads})")
    return list(kernel_shape), strides, dilations, pads[:nd], pads[nd:]


def window_extent(k: int, d: int) -> int:
    """Span of a dilated kernel along one axis."""
    return (k - 1) * d + 1


def auto_pads(auto_pad: str, in_shape, kernel, strides, dilations):
    """(pads_begin, pads_end) for ``auto_pad`` SAME_UPPER / SAME_LOWER / VALID."""
    begin, end = [], []
    for n, k, s, d in zip(in_shape, kernel, strides, dilations):
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = -(-n // s)
            total = max(0, (out - 1) * s + window_extent(k, d) - n)
            small, big = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else big)
            end.append(big if auto_pad == "SAME_UPPER" else small)
        elif auto_pad == "VALID":
            begin.append(0)
            end.append(0)
        else:
            raise NodeError(f"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, not {auto_pad!r}")
    return begin, end


def conv_geometry(in_shape, kernel, strides, dilations, pads_begin, pads_end, auto_pad="NOTSET",
                  ceil_mode=0):
    """Resolve padding and output shape of a sliding window op.

    Returns ``(pads_begin, pads_end, out_shape)``. With ``ceil_mode`` (explicit pads only) the last
    window may hang over the end padding; windows that would start in the end padding are dropped.
    """
    if auto_pad and auto_pad != "NOTSET":
        pads_begin, pads_end = auto_pads(auto_pad, in_shape, kernel, strides, dilations)
    out = []
    for n, k, s, d, pb, pe in zip(in_shape, kernel, strides, dilations, pads_begin, pads_end):
        span = n + pb + pe - window_extent(k, d)
        if ceil_mode and (not auto_pad or auto_pad == "NOTSET"):
            o = -(-span // s) + 1
            if (o - 1) * s >= n + pb:
                o -= 1
        else:
            o = span // s + 1
        if o < 0:  # onnxruntime refuses it too ("Calculated output dimension is negative")
            raise NodeError(f"the window (kernel {k}, dilation {d}) is larger than the padded input ({n + pb + pe}): "
                            f"the output dimension would be {o}; check kernel_shape, pads, strides and dilations")
        out.append(o)
    return list(pads_begin), list(pads_end), out


# -- sliding windows ----------------------------------------------------------------------------


def pad_spatial(xp, X, pads_begin, pads_end, value=0):
    """Pad the spatial axes (2..) of X; negative pads crop."""
    if not any(pads_begin) and not any(pads_end):
        return X
    if min(pads_begin) < 0 or min(pads_end) < 0:
        X = X[(slice(None), slice(None)) + tuple(
            slice(max(-b, 0), n - max(-e, 0)) for b, e, n in zip(pads_begin, pads_end, X.shape[2:]))]
        pads_begin = [max(b, 0) for b in pads_begin]
        pads_end = [max(e, 0) for e in pads_end]
    # a filled buffer and one interior copy: several times cheaper than xp.pad on small images
    Xp = xp.full(tuple(X.shape[:2]) + tuple(n + b + e for n, b, e in zip(X.shape[2:], pads_begin, pads_end)),
                 value, dtype=X.dtype)
    Xp[(slice(None), slice(None)) + tuple(slice(b, b + n) for b, n in zip(pads_begin, X.shape[2:]))] = X
    return Xp


def pad_for_windows(xp, X, kernel, strides, dilations, pads_begin, pads_end, out_shape, pad_value):
    """X padded so that every window of the output grid lies inside it (``ceil_mode`` overhang too)."""
    ext_end = [max(0, (o - 1) * s + window_extent(k, d) - (n + b + e)) + e
               for n, k, s, d, b, e, o in zip(X.shape[2:], kernel, strides, dilations, pads_begin,
                                              pads_end, out_shape)]
    return pad_spatial(xp, X, pads_begin, ext_end, pad_value)


def _as_strided(xp):
    """``as_strided`` of the library behind ``xp`` (NumPy, CuPy and the stand-in have one), or None."""
    return getattr(getattr(getattr(xp, "lib", None), "stride_tricks", None), "as_strided", None)


def window_taps(xp, X, kernel, strides, dilations, pads_begin, pads_end, out_shape, pad_value=0):
    """Yield, for each kernel tap in row-major order, the view of padded X that the tap sees at
    every output position: shape ``(N, C, *out_shape)``.

    The input is padded once (with extra end padding when ``ceil_mode`` windows overhang).
    """
    Xp = pad_for_windows(xp, X, kernel, strides, dilations, pads_begin, pads_end, out_shape, pad_value)
    for tap in itertools.product(*(range(k) for k in kernel)):
        yield Xp[(slice(None), slice(None)) + tuple(
            slice(t * d, t * d + (o - 1) * s + 1 if o > 0 else t * d, s)
            for t, d, s, o in zip(tap, dilations, strides, out_shape))]


def im2col(xp, X, kernel, strides, dilations, pads_begin, pads_end, out_shape, pad_value=0):
    """X ``(N, C, *in)`` -> columns ``(N, C, K, *out)`` with ``K = prod(kernel)`` taps (row-major)."""
    as_strided = _as_strided(xp)
    if as_strided is not None and all(o > 0 for o in out_shape):
        Xp = pad_for_windows(xp, X, kernel, strides, dilations, pads_begin, pads_end, out_shape, pad_value)
        st = tuple(Xp.strides)  # bytes; the view (N, C, *kernel, *out) stays inside Xp
        view = as_strided(Xp, tuple(Xp.shape[:2]) + tuple(kernel) + tuple(out_shape),
                          st[:2] + tuple(b * d for b, d in zip(st[2:], dilations))
                          + tuple(b * s for b, s in zip(st[2:], strides)))
        return xp.reshape(view, tuple(X.shape[:2]) + (math.prod(kernel),) + tuple(out_shape))
    taps = list(window_taps(xp, X, kernel, strides, dilations, pads_begin, pads_end, out_shape, pad_value))
    if len(taps) == 1:
        return xp.expand_dims(taps[0], 2)
    return xp.stack(taps, axis=2)


def col2im(xp, cols, image_shape, kernel, strides, dilations, offset=None):
    """Scatter-add columns ``(N, C, K, *blocks)`` into an image ``(N, C, *image_shape)``.

    Tap ``t`` of block ``b`` lands at ``offset + b * stride + t * dilation`` (``offset`` defaults to
    0); contributions outside the image are dropped. The adjoint of :func:`im2col`.
    """
    N, C, _ = cols.shape[:3]
    blocks = cols.shape[3:]
    offset = offset or [0] * len(blocks)
    # work on a buffer big enough for every tap, then crop to the image
    lo = [min(0, off) for off in offset]
    hi = [max(n, off + (b - 1) * s + window_extent(k, d)) if b > 0 else n
          for n, off, b, s, k, d in zip(image_shape, offset, blocks, strides, kernel, dilations)]
    buf = xp.zeros((N, C) + tuple(h - lo_ for h, lo_ in zip(hi, lo)), dtype=cols.dtype)
    if all(b > 0 for b in blocks):
        for i, tap in enumerate(itertools.product(*(range(k) for k in kernel))):
            idx = tuple(slice(off - lo_ + t * d, off - lo_ + t * d + (b - 1) * s + 1, s)
                        for off, lo_, t, d, b, s in zip(offset, lo, tap, dilations, blocks, strides))
            buf[(slice(None), slice(None)) + idx] += cols[:, :, i]
    return buf[(slice(None), slice(None)) + tuple(slice(-lo_, -lo_ + n) for lo_, n in zip(lo, image_shape))]


def check_shapes(x_shape, w_shape, group, kernel_shape, transpose=False):
    if len(x_shape) < 3:
        raise NodeError(f"X must have rank >= 3 (N, C, D1, ...), got shape {tuple(x_shape)}")
    if len(w_shape) != len(x_shape):
        raise NodeError(f"W rank {len(w_shape)} does not match X rank {len(x_shape)}")
    if group < 1 or x_shape[1] % group:
        raise NodeError(f"group={group} does not divide the {x_shape[1]} input channels")
    if transpose:
        if w_shape[0] != x_shape[1]:
            raise NodeError(f"W has {w_shape[0]} input channels, X has {x_shape[1]}")
    elif w_shape[1] * group != x_shape[1] or w_shape[0] % group:
        raise NodeError(f"W shape {tuple(w_shape)} does not fit X with {x_shape[1]} channels and group={group}")
    if kernel_shape and list(kernel_shape) != list(w_shape[2:]):
        raise NodeError(f"kernel_shape {list(kernel_shape)} does not match W shape {tuple(w_shape)}")


def check_bias(B, channels: int) -> None:
    """Raise a NodeError unless the bias B (or None) has one value per output channel."""
    if B is not None and tuple(B.shape) != (channels,):
        raise NodeError(f"B has shape {tuple(B.shape)}; a conv's bias has one value per output channel, "
                        f"shape ({channels},)")


def check_conv_output(in_shape, out, kernel, dilations, pads_begin, pads_end) -> None:
    """Refuse a conv whose output would be empty, as onnxruntime's Conv does ("Invalid input shape")."""
    if 0 in out:
        raise NodeError(f"input shape {tuple(in_shape)} is smaller than the conv's window (kernel {tuple(kernel)}, "
                        f"dilations {tuple(dilations)}, pads {tuple(pads_begin)} + {tuple(pads_end)}): the output "
                        "would be empty")


def check_conv_shapes(X, W, group, kernel_shape, transpose=False):
    """Raise a NodeError unless X and W fit a (transposed) conv with ``group`` groups."""
    check_shapes(tuple(X.shape), tuple(W.shape), group, kernel_shape, transpose)



def conv_shape_geometry(X, W, group, kernel_shape, auto_pad, strides, dilations, pads):
    """(kernel, strides, dilations, pads_begin, pads_end, out, K, L) of a conv, its shapes checked: see
    :func:`geometry_of`."""
    return geometry_of(tuple(X.shape), tuple(W.shape), group, auto_pad, *(
        None if v is None else tuple(v) for v in (kernel_shape, strides, dilations, pads)))


@functools.lru_cache(maxsize=4096)
def geometry_of(x_shape, w_shape, group, auto_pad, kernel_shape, strides, dilations, pads):
    """:func:`conv_shape_geometry` of the shapes and the attributes as tuples, kept (a bounded, thread-safe cache:
    a model's Conv meets the same ones on every run)."""
    check_shapes(x_shape, w_shape, group, kernel_shape)
    kernel, s, d, pb, pe = spatial_attrs(len(x_shape) - 2, w_shape[2:], strides, dilations, pads)
    pb, pe, out = conv_geometry(x_shape[2:], kernel, s, d, pb, pe, auto_pad)
    check_conv_output(x_shape[2:], out, kernel, d, pb, pe)
    return (*map(tuple, (kernel, s, d, pb, pe, out)), math.prod(kernel), math.prod(out))


def pool_geometry(X, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode):
    """(kernel, strides, dilations, pads_begin, pads_end, out) of a pooling window over X."""
    if X.ndim < 3:
        raise NodeError(f"X must have rank >= 3 (N, C, D1, ...), got shape {tuple(X.shape)}")
    if not kernel_shape:
        raise NodeError("kernel_shape is required")
    kernel, strides, dilations, pb, pe = spatial_attrs(X.ndim - 2, kernel_shape, strides, dilations, pads)
    pb, pe, out = conv_geometry(X.shape[2:], kernel, strides, dilations, pb, pe, auto_pad, ceil_mode)
    return kernel, strides, dilations, pb, pe, out


def window_counts(xp, in_shape, kernel, strides, dilations, pb, pe, out, include_pad, dtype):
    """How many cells of each window count toward the average: a number when all windows agree,
    else an ``out``-shaped array built on the device (a host->device copy would stop a CUDA graph
    capture), the product of one count vector per axis."""
    axes = [(n, k, s, d, b, (-b, n + e) if include_pad else (0, n), o)
            for n, k, s, d, b, e, o in zip(in_shape, kernel, strides, dilations, pb, pe, out)]
    per_axis = []
    for n, k, s, d, b, (lo, hi), o in axes:
        p = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d - b  # input coordinate of each cell
        per_axis.append(((p >= lo) & (p < hi)).sum(axis=1))
    if all(c.size == 0 or (c == c[0]).all() for c in per_axis):
        return float(math.prod(int(c[0]) if c.size else 1 for c in per_axis))
    counts = None
    for i, (n, k, s, d, b, (lo, hi), o) in enumerate(axes):
        p = xp.reshape(xp.arange(o, dtype=xp.int64) * s - b, (o, 1)) + xp.reshape(xp.arange(k, dtype=xp.int64) * d,
                                                                                   (1, k))
        c = xp.sum(((p >= lo) & (p < hi)).astype(dtype), axis=1)
        c = xp.reshape(c, (1, 1) + (1,) * i + (o,) + (1,) * (len(axes) - i - 1))
        counts = c if counts is None else counts * c
    return counts
