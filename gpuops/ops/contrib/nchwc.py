"""com.microsoft.nchwc: onnxruntime's blocked-layout ops (ReorderInput, ReorderOutput, Conv, MaxPool,
AveragePool, GlobalMaxPool, GlobalAveragePool, Upsample).

onnxruntime's graph optimizer rewrites 2-D convolution graphs into this family for its CPU (MLAS).
A blocked tensor keeps the logical shape ``(N, Cp, H, W)`` - the channels padded with zeros to a
multiple of the block size b - but its elements are stored as ``(N, Cp / b, H, W, b)``: channel
``c`` of pixel (h, w) sits in block ``c // b`` at lane ``c % b``. The tensors between these ops
carry exactly that layout, so models saved by onnxruntime run unchanged; each op unblocks its
input, runs the ai.onnx op (``conv``, ``pool``), and blocks its output.

The block size is MLAS's: 16 on CPUs with AVX-512F, 8 with AVX2 (and 1 - no NCHWc rewrite - on
other CPUs). It is a property of the machine that optimized the model, not of the model, so gpuops
reads it from ``GPUOPS_NCHWC_BLOCK_SIZE`` (8 or 16; default 8) when a session is created (each op's
``prepare`` hook: the session keeps it), or a call outside a session passes it (``prepared=``).

Conv filters are stored as MLAS reorders them: ``OIHWBiBo`` (``[O/b, I/b, kh, kw, b_in, b_out]``)
when each group has at least b input channels, else ``OIHWBo`` (``[O/b, I, kh, kw, b_out]``: the
plain-NCHW first convolution, whose input has fewer than b channels and is not blocked, and the
depthwise case). The bias is plain (padded). ``Sum`` (Conv + Add fusion) is added before the
activation, as in onnxruntime.
"""

from __future__ import annotations

import os

import numpy as np

from ...errors import NodeError
from ...registry import op
from ..conv import conv as _conv
from ..pool import AveragePool as _average_pool
from ..pool import MaxPool as _max_pool
from .transformer import alpha_beta, fused_activation

NCHWC = "com.microsoft.nchwc"
BLOCK_SIZE_ENV = "GPUOPS_NCHWC_BLOCK_SIZE"


def block_size() -> int:
    """The block size ``GPUOPS_NCHWC_BLOCK_SIZE`` names (8 or 16; default 8)."""
    value = os.environ.get(BLOCK_SIZE_ENV, "")
    try:
        size = int(value) if value.strip() else 8
    except ValueError:
        size = None
    if size not in (8, 16):
        raise NodeError(f"{BLOCK_SIZE_ENV}={value!r}: the NCHWc block size must be 8 or 16")
    return size


def session_block_size(constants, attrs) -> int:
    """The ops' ``prepare`` hook: the block size, read once when a session is created."""
    return block_size()


def call_block_size(prepared) -> int:
    """The block size of a call: the session's (``prepared``), else the environment's."""
    if prepared is None:
        return block_size()
    if prepared not in (8, 16):
        raise NodeError(f"the NCHWc block size must be 8 or 16, got {prepared!r}")
    return prepared


def unblock(xp, X, b: int):
    """Blocked ``(N, Cp, *S)`` -> the same tensor in plain NCHW order."""
    N, Cp = X.shape[:2]
    if Cp % b:
        raise NodeError(f"a blocked tensor needs channels that are a multiple of the block size {b}, got {Cp}")
    spatial = tuple(X.shape[2:])
    t = xp.reshape(X, (N, Cp // b) + spatial + (b,))
    return xp.reshape(xp.moveaxis(t, -1, 2), (N, Cp) + spatial)


def block(xp, Y, b: int):
    """Plain ``(N, Cp, *S)`` (Cp a multiple of b) -> blocked storage of the same logical shape."""
    N, Cp = Y.shape[:2]
    spatial = tuple(Y.shape[2:])
    t = xp.moveaxis(xp.reshape(Y, (N, Cp // b, b) + spatial), 2, -1)
    return xp.reshape(t, (N, Cp) + spatial)


def _check4(X):
    if X.ndim != 4:
        raise NodeError(f"NCHWc ops take 4-D tensors, got shape {tuple(X.shape)}")


@op("ReorderInput", domain=NCHWC, since=1, prepare=session_block_size)
def ReorderInput(xp, X, *, channels_last=0, prepared=None):
    """NCHW (or NHWC) -> blocked NCHWc with the channels zero-padded to a multiple of the block."""
    _check4(X)
    b = call_block_size(prepared)
    if channels_last:
        X = xp.moveaxis(X, -1, 1)
    C = X.shape[1]
    Cp = -(-C // b) * b
    if Cp != C:
        X = xp.concat([X, xp.zeros((X.shape[0], Cp - C) + tuple(X.shape[2:]), dtype=X.dtype)], axis=1)
    return block(xp, X, b)


@op("ReorderOutput", domain=NCHWC, since=1, prepare=session_block_size)
def ReorderOutput(xp, X, *, channels=0, channels_last=0, prepared=None):
    """Blocked NCHWc -> NCHW (or NHWC) keeping the first ``channels`` channels."""
    _check4(X)
    b = call_block_size(prepared)
    Cp = X.shape[1]
    if not (Cp % b == 0 and channels <= Cp and Cp - channels < b):
        raise NodeError(f"channels={channels} does not fit a blocked tensor of {Cp} channels (block {b})")
    Y = unblock(xp, X, b)[:, :channels]
    return xp.moveaxis(Y, 1, -1) if channels_last else Y


def plain_filter(xp, W, b: int, per_group_in: int):
    """The reordered filter back to plain ``(O, I, kh, kw)``."""
    O, I, kh, kw = W.shape
    if O % b:
        raise NodeError(f"NCHWc filters need output channels that are a multiple of {b}, got {O}")
    if per_group_in >= b:  # OIHWBiBo
        t = xp.reshape(W, (O // b, I // b, kh, kw, b, b))
        return xp.reshape(xp.permute_dims(t, (0, 5, 1, 4, 2, 3)), (O, I, kh, kw))
    t = xp.reshape(W, (O // b, I, kh, kw, b))  # OIHWBo
    return xp.reshape(xp.permute_dims(t, (0, 4, 1, 2, 3)), (O, I, kh, kw))


@op("Conv", domain=NCHWC, since=1, prepare=session_block_size)
def Conv(xp, X, W, B=None, Sum=None, *, activation=None, activation_params=None, auto_pad="NOTSET",
         dilations=None, group=1, kernel_shape=None, pads=None, strides=None, prepared=None):
    return nchwc_conv(xp, X, W, B, Sum, call_block_size(prepared), _conv, activation=activation,
                      activation_params=activation_params, auto_pad=auto_pad, dilations=dilations, group=group,
                      kernel_shape=kernel_shape, pads=pads, strides=strides)


def nchwc_conv(xp, X, W, B, Sum, b: int, conv, *, activation, activation_params, group, filters=None, **attrs):
    """The NCHWc Conv at block size ``b`` by the plain convolution ``conv`` (a device override's own);
    ``filters(per_group_in)``: W as a plain filter (:func:`plain_filter`; kept per session on the CPU)."""
    _check4(X)
    C = X.shape[1]
    if C >= b and C % b:
        raise NodeError(f"input channels {C} must be below the block size {b} (plain NCHW) or a multiple of it")
    x = unblock(xp, X, b) if C >= b else X
    w = plain_filter(xp, W, b, C // group) if filters is None else filters(C // group)
    Y = conv(xp, x, w, B, group=group, **attrs)
    if Sum is not None:
        if tuple(Sum.shape) != tuple(Y.shape):
            raise NodeError(f"Sum of shape {tuple(Sum.shape)} differs from the output shape {tuple(Y.shape)}")
        Y = Y + unblock(xp, Sum, b)
    return block(xp, fused_activation(xp, Y, activation, *alpha_beta(activation_params)), b)


@op("MaxPool", domain=NCHWC, since=1, prepare=session_block_size)
def MaxPool(xp, X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape, pads=None, storage_order=0,
            strides=None, prepared=None):
    return pooled(xp, X, call_block_size(prepared), _max_pool, auto_pad=auto_pad, ceil_mode=ceil_mode, dilations=dilations,
                  kernel_shape=kernel_shape, pads=pads, strides=strides)


@op("AveragePool", domain=NCHWC, since=1, prepare=session_block_size)
def AveragePool(xp, X, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None, kernel_shape,
                pads=None, strides=None, prepared=None):
    return pooled(xp, X, call_block_size(prepared), _average_pool, auto_pad=auto_pad, ceil_mode=ceil_mode,
                  count_include_pad=count_include_pad, dilations=dilations, kernel_shape=kernel_shape, pads=pads,
                  strides=strides)


def pooled(xp, X, b: int, pool, **attrs):
    """An NCHWc pooling op at block size ``b`` by the plain pooling op ``pool`` (a device override's own)."""
    _check4(X)
    return block(xp, pool(xp, unblock(xp, X, b), **attrs), b)


@op("GlobalAveragePool", domain=NCHWC, since=1, prepare=session_block_size)
def GlobalAveragePool(xp, X, *, prepared=None):
    _check4(X)
    b = call_block_size(prepared)
    return block(xp, xp.mean(unblock(xp, X, b), axis=(2, 3), keepdims=True), b)


@op("GlobalMaxPool", domain=NCHWC, since=1, prepare=session_block_size)
def GlobalMaxPool(xp, X, *, prepared=None):
    _check4(X)
    b = call_block_size(prepared)
    return block(xp, xp.max(unblock(xp, X, b), axis=(2, 3), keepdims=True), b)


def _linear_taps(n_in: int, scale: int, mode: str):
    """onnxruntime's source coordinates for one axis: (index0, index1, weight of index1)."""
    o = np.arange(n_in * scale, dtype=np.float32)
    if scale == 1:
        v = o
    elif mode == "align_corners":
        v = o * np.float32(n_in - 1) / np.float32(max(n_in * scale - 1, 1))
    elif mode == "half_pixel":
        v = np.maximum(np.float32(0.0), (o + np.float32(0.5)) / np.float32(scale) - np.float32(0.5))
    else:  # asymmetric
        v = o / np.float32(scale)
    i0 = v.astype(np.int64)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, (v - i0).astype(np.float32)


@op("Upsample", domain=NCHWC, since=1, prepare=session_block_size)
def Upsample(xp, X, *, coordinate_transformation_mode="asymmetric", mode="nearest", scales=None, prepared=None):
    """Integer upsampling of H and W, on the blocked layout directly (it acts per channel)."""
    _check4(X)
    b = call_block_size(prepared)
    scales = [int(s) for s in (scales or [])]
    if len(scales) != 4 or scales[0] != 1 or scales[1] != 1 or min(scales) < 1:
        raise NodeError(f"scales must be [1, 1, scale_h, scale_w] with positive integers, got {scales}")
    if mode not in ("nearest", "linear"):
        raise NodeError(f"mode must be 'nearest' or 'linear', got {mode!r}")
    N, Cp, H, W = X.shape
    if Cp % b:
        raise NodeError(f"a blocked tensor needs channels that are a multiple of the block size {b}, got {Cp}")
    sh, sw = scales[2], scales[3]
    t = xp.reshape(X, (N, Cp // b, H, W, b))
    if mode == "nearest":
        t = xp.repeat(xp.repeat(t, sh, axis=2), sw, axis=3)
    else:
        for axis, (n, s) in ((2, (H, sh)), (3, (W, sw))):
            i0, i1, w1 = _linear_taps(n, s, coordinate_transformation_mode)
            shape = [1] * 5
            shape[axis] = -1
            w1 = xp.reshape(xp.asarray(w1), tuple(shape))
            lo, hi = xp.take(t, xp.asarray(i0), axis=axis), xp.take(t, xp.asarray(i1), axis=axis)
            t = lo * (1 - w1) + hi * w1
        t = t.astype(X.dtype)
    return xp.reshape(t, (N, Cp, H * sh, W * sw))
