"""Normalizations onnxruntime's transformer optimizer emits: LayerNormalization and
SimplifiedLayerNormalization (onnxruntime registers both in the ai.onnx domain from version 1, so the
optimizer writes them into models of any opset), SkipSimplifiedLayerNormalization, and the
channels-last GroupNorm / SkipGroupNorm of its diffusion fusions.

Statistics are computed in float32 for float16 / bfloat16 inputs, as onnxruntime's kernels do; the
statistic outputs (mean, inverse standard deviation) are float32.
"""

from __future__ import annotations

import numpy as np

from ...errors import NodeError
from ...registry import op
from ..activation import sigmoid
from .transformer import accumulate_dtype

MS = "com.microsoft"


def _axes(X, axis):
    if not -X.ndim <= axis < X.ndim:
        raise NodeError(f"axis {axis} is out of range for rank {X.ndim}")
    return tuple(range(axis % X.ndim, X.ndim))


def _rms(xp, x, axes, epsilon):
    """x / sqrt(mean(x^2) + epsilon) and 1 / sqrt(mean(x^2) + epsilon), in x's dtype."""
    inv = 1 / xp.sqrt(xp.mean(x * x, axis=axes, keepdims=True) + epsilon)
    return x * inv, inv


@op("LayerNormalization", since=1)
def LayerNormalization(xp, X, Scale, B=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    """onnxruntime's LayerNormalization-1: as ai.onnx LayerNormalization-17, but ``Scale`` and ``B``
    may have another float type than X (float32 parameters for float16 data); Y has Scale's type."""
    ct = accumulate_dtype(X)
    x = X.astype(ct)
    axes = _axes(X, axis)
    mean = xp.mean(x, axis=axes, keepdims=True)
    d = x - mean
    inv = 1 / xp.sqrt(xp.mean(d * d, axis=axes, keepdims=True) + epsilon)
    Y = d * inv * Scale.astype(ct)
    if B is not None:
        Y = Y + B.astype(ct)
    return Y.astype(Scale.dtype), mean.astype(np.float32), inv.astype(np.float32)


@op("SimplifiedLayerNormalization", since=1)
def SimplifiedLayerNormalization(xp, X, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    """RMS normalization: X / sqrt(mean(X^2 over axis..) + epsilon) * scale; Y has scale's type."""
    ct = accumulate_dtype(X)
    y, inv = _rms(xp, X.astype(ct), _axes(X, axis), epsilon)
    return (y * scale.astype(ct)).astype(scale.dtype), inv.astype(np.float32)


@op("SkipSimplifiedLayerNormalization", domain=MS, since=1)
def SkipSimplifiedLayerNormalization(xp, input, skip, gamma, bias=None, *, epsilon=1e-12):  # noqa: A002
    """RMS normalization of input + skip (+ bias) over the hidden axis. Outputs: the result, the
    float32 mean of the sum (onnxruntime leaves that output unused), 1 / rms, and the sum."""
    if input.ndim not in (2, 3):
        raise NodeError(f"input must be 2-D or 3-D, got shape {tuple(input.shape)}")
    x = input + skip
    if bias is not None:
        x = x + bias
    ct = accumulate_dtype(x)
    xs = x.astype(ct)
    y, inv = _rms(xp, xs, (-1,), epsilon)
    mean = xp.mean(xs, axis=-1, keepdims=True)
    return (y * gamma.astype(ct)).astype(x.dtype), mean.astype(np.float32), inv.astype(np.float32), x


def _group_norm_nhwc(xp, X, gamma, beta, epsilon, groups, activation):
    """GroupNorm of channels-last X (N, ..., C) in float32, then SiLU when ``activation`` is 1."""
    if X.ndim < 2 or groups < 1 or X.shape[-1] % groups:
        raise NodeError(f"groups={groups} must divide the channel count of X {tuple(X.shape)}")
    if activation not in (0, 1):
        raise NodeError(f"activation must be 0 (none) or 1 (SiLU), got {activation}")
    ct = accumulate_dtype(X)
    N, C = X.shape[0], X.shape[-1]
    x = xp.reshape(X.astype(ct), (N, -1, groups, C // groups))
    mean = xp.mean(x, axis=(1, 3), keepdims=True)
    d = x - mean
    var = xp.mean(d * d, axis=(1, 3), keepdims=True)
    y = xp.reshape(d / xp.sqrt(var + epsilon), X.shape) * gamma.astype(ct) + beta.astype(ct)
    if activation == 1:
        y = y * sigmoid(xp, y)
    return y.astype(X.dtype)


def _channels_last_only(channels_last):
    if not channels_last:
        raise NodeError("channels_last=0 is not supported (onnxruntime's kernels take NHWC data only)")


@op("GroupNorm", domain=MS, since=1)
def GroupNorm(xp, X, gamma, beta, *, activation, groups, channels_last=1, epsilon=1e-5):
    _channels_last_only(channels_last)
    return _group_norm_nhwc(xp, X, gamma, beta, epsilon, groups, activation)


@op("SkipGroupNorm", domain=MS, since=1)
def SkipGroupNorm(xp, X, gamma, beta, skip, bias=None, *, activation, groups, channels_last=1, epsilon=1e-5):
    """GroupNorm(X + skip + bias); ``skip`` is (N, H, W, C), (N, 1, 1, C) or (N, C). Also the sum."""
    _channels_last_only(channels_last)
    if skip.ndim == 2:
        skip = xp.reshape(skip, (skip.shape[0],) + (1,) * (X.ndim - 2) + (skip.shape[1],))
    s = X + skip
    if bias is not None:
        s = s + bias
    return _group_norm_nhwc(xp, s, gamma, beta, epsilon, groups, activation), s
