"""Fused elementwise, GEMM and convolution ops of onnxruntime's transformer optimizer: QuickGelu
(CLIP), GemmFastGelu, and the diffusion-model fusions BiasAdd, BiasSplitGelu and NhwcConv.

They are compositions of the ai.onnx ops (sigmoid, Gelu, MatMul, Conv); float16 is computed in
float32 as onnxruntime's kernels do.
"""

from __future__ import annotations

from ...errors import NodeError
from ...registry import op
from ..activation import sigmoid
from ..conv import conv as _conv
from ..linalg import MatMul as _matmul
from .transformer import accumulate_dtype, gelu

MS = "com.microsoft"


@op("QuickGelu", domain=MS, since=1)
def QuickGelu(xp, X, *, alpha=1.702):
    """X * sigmoid(alpha * X)."""
    x = X.astype(accumulate_dtype(X))
    return (x * sigmoid(xp, x * float(alpha))).astype(X.dtype)


@op("GemmFastGelu", domain=MS, since=1)
def GemmFastGelu(xp, X, W, bias=None):
    """FastGelu(X @ W + bias)."""
    Y = _matmul(xp, X, W)
    return gelu(xp, Y if bias is None else Y + bias, "tanh")


@op("BiasAdd", domain=MS, since=1)
def BiasAdd(xp, X, bias, skip):
    """X + bias + skip, X and skip (N, S, C), bias (C)."""
    if X.ndim != 3 or bias.ndim != 1 or bias.shape[0] != X.shape[2]:
        raise NodeError(f"X must be (N, S, C) and bias (C), got {tuple(X.shape)} and {tuple(bias.shape)}")
    return X + bias + skip


@op("BiasSplitGelu", domain=MS, since=1)
def BiasSplitGelu(xp, X, bias):
    """(X + bias) split in halves A, B on the last axis: A * Gelu(B)."""
    if X.shape[-1] % 2:
        raise NodeError(f"the last dimension of X {tuple(X.shape)} must be even")
    y = X + bias
    half = X.shape[-1] // 2
    return y[..., :half] * gelu(xp, y[..., half:])


@op("NhwcConv", domain=MS, since=1)
def NhwcConv(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
             strides=None):
    """Conv on channels-last data: X (N, D1.., C), W (M, k1.., C/group) as the optimizer writes it; Y (N, ..., M)."""
    return nhwc_conv(xp, X, W, B, _conv, auto_pad=auto_pad, dilations=dilations, group=group,
                     kernel_shape=kernel_shape, pads=pads, strides=strides)


def nhwc_conv(xp, X, W, B, conv, **attrs):
    """NhwcConv by the channels-first ``conv`` (a device override's own)."""
    if X.ndim < 3 or W.ndim != X.ndim:
        raise NodeError(f"X {tuple(X.shape)} and W {tuple(W.shape)} must both be (N|M, spatial.., C)")
    first = (0, X.ndim - 1) + tuple(range(1, X.ndim - 1))
    Y = conv(xp, xp.permute_dims(X, first), xp.permute_dims(W, first), B, **attrs)
    return xp.permute_dims(Y, (0,) + tuple(range(2, X.ndim)) + (1,))
