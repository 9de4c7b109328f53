"""gpuops' private fused ops (domain ``ai.gpuops``), which its graph optimizer emits on the CPU
(:mod:`gpuops.optimizer.conv_silu`, :mod:`gpuops.optimizer.squeeze_excite`) and, where no ai.onnx or
com.microsoft op fits, on every device (:mod:`gpuops.optimizer.layernorm`). The optimized model
defines each as a model-local ONNX function whose body is the nodes it replaced, so that the model stays
valid ONNX that onnxruntime runs; gpuops runs a registered private op as the op (the plan inlines only
the functions it lacks). These are the generic implementations, the CPU's overrides' fallback and
test oracle.

* ``ConvSilu(X, W, B)``: ``SiLU(Conv(X, W, B))``, SiLU being ``y * sigmoid(y)`` (EfficientNet's
  activation, which onnxruntime's FusedConv has not); Conv's attributes.
* ``LayerNormChannels(X, Scale, B)``: LayerNormalization of NCHW X over its channels (attribute
  ``epsilon``), ConvNeXt's LayerNorm2d: its function is Transpose to NHWC, LayerNormalization over the last
  axis, Transpose back.
* ``SqueezeExcite<Inner><Gate>(X, W1, B1, W2, B2)``: a squeeze-and-excitation block, ``X * gate(conv2(
  inner(conv1(GlobalAveragePool(X)))))`` with 1x1 convs ``W1`` (R, C, 1, 1) and ``W2`` (C, R, 1, 1),
  ``inner`` one of Relu, HardSwish, Silu and ``gate`` one of Sigmoid, HardSigmoid (attributes
  ``alpha``, ``beta``): one op per pair, as a function's body cannot depend on an attribute.
* ``LayerNormalization(X, Scale, B)``: ai.onnx LayerNormalization-17 over the last axis (attribute
  ``epsilon``), for models below opset 17 whose LayerNorm is written out and not fed by a residual Add.
* ``CastEmbedLayerNormalization(input_ids, segment_ids, word, position, segment, gamma, beta, mask[,
  position_ids])``: com.microsoft EmbedLayerNormalization's (Y, mask_index) of its ids and mask cast to
  int32 first (int64 ones wrap, as Cast does), the attributes EmbedLayerNormalization's: an exporter's
  int64 inputs without the Casts before the op (:mod:`gpuops.optimizer.embed_layernorm_cast`).
* ``OneHotMatMul(A, R, W)``: ``MatMul(Cast(Equal(A, R), float32), W)``, a one-hot of A against its classes
  R times a table W (:mod:`gpuops.optimizer.one_hot_matmul`): where R is ``0, ..., D - 1`` and W finite,
  the rows of W that A names, a row of zeros for an A outside ``[0, D)``.
"""

from __future__ import annotations

import numpy as np

from ...errors import NodeError
from ...registry import op
from ..activation import sigmoid
from ..conv import conv
from ..elementwise import clamp
from .normalization import LayerNormalization
from .transformer import EmbedLayerNormalization
from ..norm import LayerNormalization as layer_norm_17

DOMAIN = "ai.gpuops"
INNER = ("Relu", "HardSwish", "Silu")
GATES = ("Sigmoid", "HardSigmoid")


@op("ConvSilu", domain=DOMAIN, since=1)
def ConvSilu(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
             strides=None):
    Y = conv(xp, X, W, B, auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
             strides=strides)
    return (Y * sigmoid(xp, Y)).astype(Y.dtype)


def activate(xp, v, name: str, alpha: float = 0.2, beta: float = 0.5):
    """``name`` (one of :data:`INNER` or :data:`GATES`) of v."""
    if name == "Relu":
        return xp.maximum(v, 0)
    if name == "HardSwish":
        return v * clamp(xp, v * (1 / 6) + 0.5, 0, 1)
    if name == "Silu":
        return v * sigmoid(xp, v)
    if name == "Sigmoid":
        return sigmoid(xp, v)
    return clamp(xp, v * alpha + beta, 0, 1)


def check_squeeze_excite(X, W1, B1, W2, B2) -> None:
    """A clear error for inputs that are not a squeeze-and-excitation block's."""
    ok = (X.ndim >= 3 and W1.ndim == X.ndim and W2.ndim == X.ndim and all(d == 1 for d in W1.shape[2:])
          and all(d == 1 for d in W2.shape[2:]) and W1.shape[1] == X.shape[1] and W2.shape == (X.shape[1], W1.shape[0])
          + W2.shape[2:] and B1.shape == W1.shape[:1] and B2.shape == W2.shape[:1])
    if not ok:
        raise NodeError(f"SqueezeExcite: weights {tuple(W1.shape)}, {tuple(W2.shape)} and biases {tuple(B1.shape)}, "
                        f"{tuple(B2.shape)} do not fit an input of shape {tuple(X.shape)}")


def squeeze_excite(xp, X, W1, B1, W2, B2, inner: str, gate: str, alpha: float = 0.2, beta: float = 0.5):
    """The generic SqueezeExcite of one (inner, gate) pair."""
    check_squeeze_excite(X, W1, B1, W2, B2)
    axes = tuple(range(2, X.ndim))
    p = xp.mean(X, axis=axes)  # (N, C)
    h = activate(xp, p @ xp.reshape(W1, W1.shape[:2]).T + B1, inner)
    g = activate(xp, h @ xp.reshape(W2, W2.shape[:2]).T + B2, gate, alpha, beta)
    return (X * xp.reshape(g, g.shape + (1,) * len(axes))).astype(X.dtype)


def _register(inner: str, gate: str):
    @op(f"SqueezeExcite{inner}{gate}", domain=DOMAIN, since=1)
    def SqueezeExcite(xp, X, W1, B1, W2, B2, *, alpha=0.2, beta=0.5):
        return squeeze_excite(xp, X, W1, B1, W2, B2, inner, gate, alpha, beta)

    return SqueezeExcite


for _inner in INNER:
    for _gate in GATES:
        _register(_inner, _gate)


op("LayerNormalization", domain=DOMAIN, since=1)(LayerNormalization)  # onnxruntime's LayerNormalization-1


@op("LayerNormChannels", domain=DOMAIN, since=1)
def LayerNormChannels(xp, X, Scale, B, *, epsilon=1e-5):
    if X.ndim != 4:
        raise NodeError(f"LayerNormChannels: the input must be NCHW (rank 4), not of shape {tuple(X.shape)}")
    Y = layer_norm_17(xp, xp.permute_dims(X, (0, 2, 3, 1)), Scale, B, axis=-1, epsilon=epsilon)[0]
    return xp.permute_dims(Y, (0, 3, 1, 2))


def int32_ids(xp, a):
    """``a`` cast to int32 as ONNX Cast does (int64 wraps), or None for None."""
    return None if a is None else a.astype(np.int32)


@op("CastEmbedLayerNormalization", domain=DOMAIN, since=1)
def CastEmbedLayerNormalization(xp, input_ids, segment_ids, word_embedding, position_embedding, segment_embedding,
                                gamma, beta, mask, position_ids=None, *, epsilon=1e-12, mask_index_type=1):
    return EmbedLayerNormalization(xp, int32_ids(xp, input_ids), int32_ids(xp, segment_ids), word_embedding,
                                   position_embedding, segment_embedding, gamma, beta, int32_ids(xp, mask),
                                   position_ids, epsilon=epsilon, mask_index_type=mask_index_type)[:2]


def one_hot_classes(R) -> bool:
    """Whether ``R`` is ``0, 1, ..., D - 1`` (integers) along its last axis, of shape ``(1, ..., 1, D)``."""
    return (type(R) is np.ndarray and R.ndim >= 1 and R.dtype.kind in "iu" and R.size == R.shape[-1]
            and np.array_equal(R.reshape(-1), np.arange(R.size)))


def one_hot_table(W, D: int) -> bool:
    """Whether ``W`` is a float32 (D, E) table of finite numbers."""
    return (type(W) is np.ndarray and W.dtype == np.float32 and W.ndim == 2 and W.shape[0] == D
            and bool(np.isfinite(W).all()))


@op("OneHotMatMul", domain=DOMAIN, since=1)
def OneHotMatMul(xp, A, R, W):
    return xp.matmul(xp.astype(A == R, W.dtype), W)
