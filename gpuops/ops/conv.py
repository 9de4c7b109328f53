"""Convolution ops: Conv, ConvTranspose, DeformConv, Col2Im, CausalConvWithState.

Convolutions run as im2col + one GEMM per group. ``im2col`` is one copy out of a strided view
(``as_strided``) of the padded input, and a 1x1 stride-1 unpadded kernel is a direct GEMM on the
input. float16/bfloat16 convolve in float32 and are cast back, as onnxruntime does on CPU.
``col2im`` loops over kernel taps only, never over output pixels. The geometry and window helpers are
:mod:`gpuops.ops.windows`, shared with the pooling ops and with the device overrides of Conv (:mod:`gpuops.ops.cpu.conv`: the native kernels, Winograd, the
blocked im2col, packed weights; :mod:`gpuops.ops.cuda.conv`); the generic :func:`conv` stays their
fallback and test oracle.
"""

from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np

from ..errors import NodeError
from ..registry import op
from .linalg import up
from .elementwise import clamp
from .windows import (check_bias, check_conv_shapes, col2im, conv_geometry, conv_shape_geometry, im2col, spatial_attrs,
                      window_extent)

def grouped_matmul(xp, W, cols, group):
    """``W (M, C/group * K)`` times columns ``(N, C * K, L)`` per group -> ``(N, M, L)``."""
    N, CK, L = cols.shape
    M = W.shape[0]
    if group == 1:
        return xp.matmul(W, cols)
    Wg = xp.reshape(W, (group, M // group, CK // group))
    Y = xp.matmul(Wg, xp.reshape(cols, (N, group, CK // group, L)))
    return xp.reshape(Y, (N, M, L))


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


def conv(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
         pads=None, strides=None, clamp_to=None):
    """N-D convolution: im2col + one GEMM per group (depthwise included: one batched matmul over the
    channels beats a multiply-add per tap); direct GEMM for unpadded stride-1 1x1 kernels.
    ``clamp_to``: ``(lo, hi)`` of a fused Relu or Clip, applied with the bias (float32 only: see
    FusedConv)."""
    check_bias(B, W.shape[0])
    ct = compute_dtype(X.dtype)
    if ct is not None:
        check_conv_shapes(X, W, group, kernel_shape)
        Y = conv(xp, X.astype(ct), up(W), None if B is None else up(B), auto_pad=auto_pad,
                 dilations=dilations, group=group, pads=pads, strides=strides)
        return Y.astype(X.dtype)
    kernel, strides, dilations, pb, pe, out, K, L = conv_shape_geometry(X, W, group, kernel_shape, auto_pad, strides,
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
    check_conv_shapes(X, W, group, kernel_shape, transpose=True)
    check_bias(B, W.shape[1] * group)
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
    check_conv_shapes(X, W, group, kernel_shape)
    check_bias(B, W.shape[0])
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
