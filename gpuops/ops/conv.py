"""Convolution ops: Conv, ConvTranspose, DeformConv, Col2Im, CausalConvWithState.

Convolutions run as im2col + one GEMM per group. ``im2col`` is one copy out of a strided view
(``as_strided``) of the padded input, and a 1x1 stride-1 unpadded kernel is a direct GEMM on the
input. float16/bfloat16 convolve in float32 and are cast back, as onnxruntime does on CPU.
``col2im`` loops over kernel taps only, never over output pixels. The geometry helpers (``spatial_attrs``,
``conv_geometry``) and the window helpers are shared with the pooling ops, and are the pieces the
device overrides of Conv reuse (:mod:`gpuops.ops.cpu.conv`: the native kernels, Winograd, the
blocked im2col, packed weights; :mod:`gpuops.ops.cuda.conv`); the generic :func:`conv` stays their
fallback and test oracle.
"""

from __future__ import annotations

import functools
import itertools
import math

import ml_dtypes
import numpy as np

from ..errors import NodeError
from ..registry import op
from .linalg import up
from .elementwise import clamp

# -- geometry (host-side Python ints) ---------------------------------------------------------------


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
        out.append(max(o, 0))
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


def grouped_matmul(xp, W, cols, group):
    """``W (M, C/group * K)`` times columns ``(N, C * K, L)`` per group -> ``(N, M, L)``."""
    N, CK, L = cols.shape
    M = W.shape[0]
    if group == 1:
        return xp.matmul(W, cols)
    Wg = xp.reshape(W, (group, M // group, CK // group))
    Y = xp.matmul(Wg, xp.reshape(cols, (N, group, CK // group, L)))
    return xp.reshape(Y, (N, M, L))


def _check_shapes(x_shape, w_shape, group, kernel_shape, transpose=False):
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


def _check_conv_shapes(X, W, group, kernel_shape, transpose=False):
    _check_shapes(tuple(X.shape), tuple(W.shape), group, kernel_shape, transpose)


def _add_bias(Y, B):
    """``Y + B`` per channel, into Y: every caller's Y is the op's own new array."""
    if B is None:
        return Y
    Y += B.reshape((1, -1) + (1,) * (Y.ndim - 2))
    return Y


def _epilogue(xp, Y, B, clamp_to):
    """``Y + B`` per channel, then clamped to ``clamp_to = (lo, hi)`` when given (a fused Relu or Clip,
    NaN staying NaN). Y is ``(N, M, ...)``."""
    if B is None and clamp_to is None:
        return Y
    if B is not None:
        Y = Y + xp.reshape(B, (-1,) + (1,) * (Y.ndim - 2))
    if clamp_to is None:
        return Y
    lo, hi = clamp_to
    return xp.minimum(xp.maximum(Y, lo), hi)


_HALF = {np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}


def compute_dtype(dtype) -> np.dtype | None:
    """float32 for the half types (no BLAS for them: onnxruntime computes them in float32 on CPU too)."""
    return np.dtype(np.float32) if np.dtype(dtype) in _HALF else None


# -- Conv ---------------------------------------------------------------------------------------

COLS_BYTES = 1 << 28  # bound on one im2col buffer; bigger batches are convolved a chunk of images at a time


def _geometry(X, W, group, kernel_shape, auto_pad, strides, dilations, pads):
    """(kernel, strides, dilations, pads_begin, pads_end, out, K, L) of a conv, its shapes checked: see
    :func:`geometry_of`."""
    return geometry_of(tuple(X.shape), tuple(W.shape), group, auto_pad, *(
        None if v is None else tuple(v) for v in (kernel_shape, strides, dilations, pads)))


@functools.lru_cache(maxsize=4096)
def geometry_of(x_shape, w_shape, group, auto_pad, kernel_shape, strides, dilations, pads):
    """:func:`_geometry` of the shapes and the attributes as tuples, kept (a bounded, thread-safe cache:
    a model's Conv meets the same ones on every run)."""
    _check_shapes(x_shape, w_shape, group, kernel_shape)
    kernel, s, d, pb, pe = spatial_attrs(len(x_shape) - 2, w_shape[2:], strides, dilations, pads)
    pb, pe, out = conv_geometry(x_shape[2:], kernel, s, d, pb, pe, auto_pad)
    return (*map(tuple, (kernel, s, d, pb, pe, out)), math.prod(kernel), math.prod(out))


def conv(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
         pads=None, strides=None, clamp_to=None):
    """N-D convolution: im2col + one GEMM per group (depthwise included: one batched matmul over the
    channels beats a multiply-add per tap); direct GEMM for unpadded stride-1 1x1 kernels.
    ``clamp_to``: ``(lo, hi)`` of a fused Relu or Clip, applied with the bias (float32 only: see
    FusedConv)."""
    ct = compute_dtype(X.dtype)
    if ct is not None:
        _check_conv_shapes(X, W, group, kernel_shape)
        Y = conv(xp, X.astype(ct), up(W), None if B is None else up(B), auto_pad=auto_pad,
                 dilations=dilations, group=group, pads=pads, strides=strides)
        return Y.astype(X.dtype)
    kernel, strides, dilations, pb, pe, out, K, L = _geometry(X, W, group, kernel_shape, auto_pad, strides,
                                                              dilations, pads)
    N, C = X.shape[:2]
    M = W.shape[0]
    Wm = xp.reshape(W, (M, (C // group) * K))
    if K == 1 and L == math.prod(X.shape[2:]) and not any(pb) and not any(pe):  # 1x1, stride 1: no copy
        Y = grouped_matmul(xp, Wm, xp.reshape(X, (N, C, L)), group)
        return _epilogue(xp, xp.reshape(Y, (N, M) + tuple(out)), B, clamp_to)
    step = max(1, COLS_BYTES // max(1, C * K * L * X.dtype.itemsize))  # images per column buffer
    parts = []
    for n0 in range(0, max(N, 1), step):
        Xn = X[n0:n0 + step]
        cols = im2col(xp, Xn, kernel, strides, dilations, pb, pe, out)
        parts.append(grouped_matmul(xp, Wm, xp.reshape(cols, (Xn.shape[0], C * K, L)), group))
    Y = parts[0] if len(parts) == 1 else xp.concat(parts, axis=0)
    return _epilogue(xp, xp.reshape(Y, (N, M) + tuple(out)), B, clamp_to)


@op("Conv", since=1)
def Conv(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
         pads=None, strides=None):
    return conv(xp, X, W, B, auto_pad=auto_pad, dilations=dilations, group=group,
                kernel_shape=kernel_shape, pads=pads, strides=strides)


# -- ConvTranspose ------------------------------------------------------------------------------


def _conv_transpose(xp, X, W, B, auto_pad, dilations, group, kernel_shape, output_padding,
                    output_shape, pads, strides, same_upper_head_small):
    _check_conv_shapes(X, W, group, kernel_shape, transpose=True)
    nd = X.ndim - 2
    kernel, strides, dilations, pb, pe = spatial_attrs(nd, W.shape[2:], strides, dilations, pads)
    output_padding = list(output_padding) if output_padding else [0] * nd
    if len(output_padding) != nd:
        raise NodeError(f"output_padding {output_padding} does not match {nd} spatial axes")
    in_shape = X.shape[2:]
    full = [s * (n - 1) + op_ + window_extent(k, d)
            for n, s, op_, k, d in zip(in_shape, strides, output_padding, kernel, dilations)]
    if output_shape:
        output_shape = list(output_shape)[-nd:]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        output_shape = [n * s for n, s in zip(in_shape, strides)]
    if output_shape:  # pads are derived from the requested shape
        pb, pe = [], []
        for f, o in zip(full, output_shape):
            total = f - o
            small, big = total // 2, total - total // 2
            head_small = (auto_pad == "SAME_UPPER") == same_upper_head_small
            pb.append(small if head_small else big)
            pe.append(big if head_small else small)
        out = list(output_shape)
    else:
        if auto_pad == "VALID":
            pb, pe = [0] * nd, [0] * nd
        out = [f - b - e for f, b, e in zip(full, pb, pe)]
    N, C = X.shape[:2]
    Mg = W.shape[1]
    K = math.prod(kernel)
    Lin = math.prod(in_shape)
    # columns = W^T X per group: (N, G, Mg*K, Lin)
    Wg = xp.reshape(W, (group, C // group, Mg * K))
    Xg = xp.reshape(X, (N, group, C // group, Lin))
    cols = xp.matmul(xp.matrix_transpose(Wg), Xg)
    cols = xp.reshape(cols, (N, group * Mg, K) + tuple(in_shape))
    Y = col2im(xp, cols, out, kernel, strides, dilations, offset=[-b for b in pb])
    return _add_bias(Y, B)


@op("ConvTranspose", since=1)
def ConvTranspose_1(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                    output_padding=None, output_shape=None, pads=None, strides=None):
    # opset 1: with output_shape, the odd padding unit goes to the head only for SAME_UPPER
    return _conv_transpose(xp, X, W, B, auto_pad, dilations, group, kernel_shape, output_padding,
                           output_shape, pads, strides, same_upper_head_small=False)


@op("ConvTranspose", since=11)
def ConvTranspose(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                  output_padding=None, output_shape=None, pads=None, strides=None):
    # opset 11+: SAME_UPPER puts the odd padding unit at the end (tail), others at the head
    return _conv_transpose(xp, X, W, B, auto_pad, dilations, group, kernel_shape, output_padding,
                           output_shape, pads, strides, same_upper_head_small=True)


# -- DeformConv ---------------------------------------------------------------------------------


@op("DeformConv", since=19)
def DeformConv(xp, X, W, offset, B=None, mask=None, *, dilations=None, group=1, kernel_shape=None,
               offset_group=1, pads=None, strides=None):
    """Deformable convolution: each tap samples X (multilinear, zero outside) at its regular
    position plus a learned offset, optionally scaled by ``mask``; then a grouped matmul."""
    _check_conv_shapes(X, W, group, kernel_shape)
    nd = X.ndim - 2
    kernel, strides, dilations, pb, pe = spatial_attrs(nd, W.shape[2:], strides, dilations, pads)
    _, _, out = conv_geometry(X.shape[2:], kernel, strides, dilations, pb, pe)
    N, C = X.shape[:2]
    M = W.shape[0]
    OG = offset_group
    K = math.prod(kernel)
    L = math.prod(out)
    in_shape = X.shape[2:]
    if C % OG:
        raise NodeError(f"offset_group={OG} does not divide the {C} input channels")
    if tuple(offset.shape) != (N, OG * K * nd) + tuple(out):
        raise NodeError(f"offset shape {tuple(offset.shape)} != expected {(N, OG * K * nd) + tuple(out)}")
    # regular sampling positions per tap and output pixel (host), then + offsets (device)
    grids = np.meshgrid(*(np.arange(o) for o in out), indexing="ij")
    taps = np.array(list(itertools.product(*(range(k) for k in kernel)))).reshape((K, nd) + (1,) * nd)
    base = np.stack([g * s - b for g, s, b in zip(grids, strides, pb)])  # (nd, *out)
    base = base[None] + taps * np.array(dilations).reshape((1, nd) + (1,) * nd)  # (K, nd, *out)
    pdt = xp.float64 if offset.dtype == xp.float64 else xp.float32  # coordinates in at least float32
    pos = xp.reshape(offset, (N, OG, K, nd) + tuple(out)).astype(pdt) + xp.asarray(base, dtype=pdt)
    pos = xp.reshape(pos, (N, OG, K, nd, L))
    # gather rows of X laid out as (N*OG*prod(in), C/OG)
    S = math.prod(in_shape)
    Cg = C // OG
    Xt = xp.reshape(xp.matrix_transpose(xp.reshape(X, (N, OG, Cg, S))), (N * OG * S, Cg))
    row0 = xp.reshape(xp.arange(N * OG, dtype=xp.int64) * S, (N, OG, 1, 1))
    low = [xp.floor(pos[:, :, :, i]) for i in range(nd)]
    sampled = None
    for corner in itertools.product((0, 1), repeat=nd):
        weight = None
        flat = row0
        valid = None
        stride = S
        for i, c in enumerate(corner):
            stride //= in_shape[i]
            idx = low[i] + c
            w = 1 - xp.abs(pos[:, :, :, i] - idx)
            ok = (idx >= 0) & (idx <= in_shape[i] - 1)
            weight = w if weight is None else weight * w
            valid = ok if valid is None else valid & ok
            flat = flat + clamp(xp, idx, 0, in_shape[i] - 1).astype(xp.int64) * stride
        weight = xp.where(valid, weight, xp.zeros_like(weight))  # (N, OG, K, L)
        vals = xp.take(Xt, xp.reshape(flat, (-1,)), axis=0)  # (N*OG*K*L, Cg)
        term = xp.reshape(vals, (N, OG, K, L, Cg)) * weight[..., None]
        sampled = term if sampled is None else sampled + term
    if mask is not None:
        sampled = sampled * xp.reshape(mask, (N, OG, K, L, 1))
    cols = xp.reshape(xp.permute_dims(sampled, (0, 1, 4, 2, 3)), (N, C * K, L)).astype(X.dtype)
    Y = grouped_matmul(xp, xp.reshape(W, (M, (C // group) * K)), cols, group)
    return _add_bias(xp.reshape(Y, (N, M) + tuple(out)), B)


# -- Col2Im -------------------------------------------------------------------------------------


@op("Col2Im", since=18, host_inputs=(1, 2))
def Col2Im(xp, input, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    image = [int(v) for v in image_shape]
    block = [int(v) for v in block_shape]
    nd = len(image)
    kernel, strides, dilations, pb, pe = spatial_attrs(nd, block, strides, dilations, pads)
    _, _, blocks = conv_geometry(image, kernel, strides, dilations, pb, pe)
    N, CK, L = input.shape
    K = math.prod(kernel)
    if CK % K or L != math.prod(blocks):
        raise NodeError(f"input shape {tuple(input.shape)} does not fit block_shape {block} over image "
                        f"{image} ({math.prod(blocks)} blocks expected)")
    cols = xp.reshape(input, (N, CK // K, K) + tuple(blocks))
    return col2im(xp, cols, image, kernel, strides, dilations, offset=[-b for b in pb])


# -- CausalConvWithState ------------------------------------------------------------------------


@op("CausalConvWithState", since=27)
def CausalConvWithState(xp, input, weight, bias=None, past_state=None, *, activation="none"):
    """Depthwise causal 1-D conv over ``concat(past_state, input)``; also returns the carry state."""
    if activation not in ("none", "silu", "swish"):
        raise NodeError(f"activation must be 'none', 'silu' or 'swish', not {activation!r}")
    if input.ndim != 3 or weight.ndim != 3:
        raise NodeError(f"input and weight must be rank 3, got {tuple(input.shape)} and {tuple(weight.shape)}")
    Bn, C, T = input.shape
    k = weight.shape[2]
    if past_state is None:
        past_state = xp.zeros((Bn, C, k - 1), dtype=input.dtype)
    padded = xp.concat([past_state, input], axis=2)
    acc = xp.float32 if input.dtype.itemsize < 4 else input.dtype  # accumulate half types in float32
    P, Wt = padded.astype(acc), weight.astype(acc)
    Y = xp.zeros((Bn, C, T), dtype=acc)
    for j in range(k):  # depthwise: one multiply-add per tap
        Y = Y + P[:, :, j:j + T] * Wt[None, :, 0, j:j + 1]
    Y = _add_bias(Y, None if bias is None else bias.astype(acc)).astype(input.dtype)
    if activation != "none":  # SiLU, evaluated in float32 for half types
        Y32 = Y.astype(acc)
        Y = (Y32 / (1 + xp.exp(-Y32))).astype(input.dtype)
    return Y, padded[:, :, padded.shape[2] - (k - 1):]
