"""The ordered int8 ops of onnxruntime's transformer optimizer: QOrderedMatMul,
QOrderedLayerNormalization, QOrderedGelu and QOrderedAttention, which the QOrdered fusions
(``fusion_qordered_*.py``) write for BERT models quantized to int8 QDQ with zero points of 0.

onnxruntime has CUDA kernels only for these (cuBLASLt int8 GEMMs); here each is its formula:
dequantize (``x * scale``), the float32 op, quantize (``x / scale`` rounded half to even, saturated
to [-128, 127], as QuantizeLinear: onnxruntime's Gelu, LayerNormalization and softmax kernels
multiply by ``1 / scale``, which can round an exact tie the other way), integer products exact.
The ``order_*`` attributes are cuBLASLt layouts (0 ORDER_COL, 1 ORDER_ROW, 2 ORDER_COL32,
3 ORDER_COL4_4R2_8C, 4 ORDER_COL32_2R_4R4); as in onnxruntime's kernels, activations must be
ORDER_ROW and weights ORDER_COL. An ORDER_COL weight keeps its logical dims (K, N) while its bytes
are those of the (N, K) transpose: the fusions transpose the initializer's data in place and leave
its dims. Other orders raise UnsupportedOpError (QOrderedGelu, elementwise, takes any order its
input and output share).
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import NodeError, UnsupportedOpError
from ...registry import op
from ..norm import LayerNormalization as _layer_norm
from ..quantize import MatMulInteger as _matmul_integer
from ..softmax import normalise as _softmax
from ..quantize import quantize_per_tensor, saturate_int
from .quantized import lookup_table, scalar_f32
from .transformer import attention_mask, gelu, split_heads

MS = "com.microsoft"
_F32 = np.float32
ORDER_COL, ORDER_ROW = 0, 1
_ORDERS = {0: "ORDER_COL", 1: "ORDER_ROW", 2: "ORDER_COL32", 3: "ORDER_COL4_4R2_8C", 4: "ORDER_COL32_2R_4R4"}


def _name(order):
    return _ORDERS.get(order, f"unknown order {order}")


def _require_orders(**given):
    """``given``: attribute -> (value, the order it must have)."""
    for attr, (value, want) in given.items():
        if value is None:
            raise NodeError(f"attribute {attr} is required")
        if value != want:
            raise UnsupportedOpError(f"{attr}={value} ({_name(value)}) is not supported: gpuops supports "
                                     + ", ".join(f"{a}={w} ({_name(w)})" for a, (_, w) in given.items()))


def _check_int8(*arrays):
    for a in arrays:
        if a is not None and np.dtype(a.dtype) != np.dtype(np.int8):
            raise NodeError(f"expected an int8 tensor, got {a.dtype}")


def _col_weight(xp, B):
    """The logical (.., K, N) matrix of an ORDER_COL tensor of dims (.., K, N)."""
    *batch, K, N = B.shape
    return xp.swapaxes(xp.reshape(B, tuple(batch) + (N, K)), -1, -2)  # a view: nothing to keep


def _per_column(xp, scale, n, what):
    if scale.size == 1:
        return xp.reshape(scale, ()).astype(_F32)
    if scale.ndim != 1 or scale.shape[0] != n:
        raise NodeError(f"{what} of shape {tuple(scale.shape)} is neither a scalar nor per column ({n})")
    return scale.astype(_F32)


def _requant(xp, acc, multiplier, add=None):
    """saturate(round_half_even(acc * multiplier + add)) to int8, acc an exact integer product."""
    y = acc.astype(_F32) * multiplier
    if add is not None:
        y = y + add
    return saturate_int(xp, xp.rint(y), None, np.dtype(np.int8))


# -- QOrderedMatMul -----------------------------------------------------------------------------

@op("QOrderedMatMul", domain=MS, since=1)
def QOrderedMatMul(xp, A, scale_A, B, scale_B, scale_Y, bias=None, C=None, scale_C=None, *, order_A=None,
                   order_B=None, order_Y=None):
    """Y = alpha * A @ B + bias + beta * C, alpha = scale_A * scale_B / scale_Y (scale_B scalar or one
    per column), beta = scale_C / scale_Y; ``bias`` (N) is added as is, not divided by scale_Y (the
    spec's words, and onnxruntime's kernel: cuBLASLt's bias epilogue). A (.., M, K) ORDER_ROW, B
    (K, N) or (1 | batch, K, N) ORDER_COL, C (M, N) or (1 | batch, M, N) ORDER_ROW."""
    _require_orders(order_A=(order_A, ORDER_ROW), order_B=(order_B, ORDER_COL), order_Y=(order_Y, ORDER_ROW))
    _check_int8(A, B, C)
    if A.ndim not in (2, 3) or B.ndim not in (2, 3) or A.shape[-1] != B.shape[-2]:
        raise NodeError(f"A {tuple(A.shape)} and B {tuple(B.shape)} must be 2-D or 3-D with A's columns = B's rows")
    if B.ndim == 3 and B.shape[0] not in (1, A.shape[0] if A.ndim == 3 else 1):
        raise NodeError(f"B's batch {B.shape[0]} must be 1 or A's batch")
    N = B.shape[-1]
    out_shape = tuple(A.shape[:-1]) + (N,)
    acc = _matmul_integer(xp, A, _col_weight(xp, B))
    sy = scalar_f32(xp, scale_Y)
    add = None
    if bias is not None:
        if tuple(bias.shape) != (N,):
            raise NodeError(f"bias of shape {tuple(bias.shape)} must be ({N},)")
        add = bias.astype(_F32)
    if C is not None:
        if scale_C is None:
            raise NodeError("C needs scale_C")
        M = A.shape[-2]
        batch = A.shape[0] if A.ndim == 3 else 1
        if C.ndim not in (2, 3) or tuple(C.shape[-2:]) != (M, N) or (C.ndim == 3 and C.shape[0] not in (1, batch)):
            raise NodeError(f"C of shape {tuple(C.shape)} must be ({M}, {N}) with a batch of 1 or {batch}")
        c = C.astype(_F32) * (scalar_f32(xp, scale_C) / sy)
        add = c if add is None else add + c
    y = _requant(xp, acc, scalar_f32(xp, scale_A) * _per_column(xp, scale_B, N, "scale_B") / sy, add)
    return xp.reshape(y, out_shape) if tuple(y.shape) != out_shape else y


# -- QOrderedLayerNormalization, QOrderedGelu ---------------------------------------------------

@op("QOrderedLayerNormalization", domain=MS, since=1)
def QOrderedLayerNormalization(xp, X, scale_X, scale, B=None, scale_Y=None, *, axis=-1, epsilon=1e-5, order_X=1,
                               order_Y=1):
    """quantize(LayerNormalization(X * scale_X, scale, B), scale_Y); gamma and beta float or float16."""
    _require_orders(order_X=(order_X, ORDER_ROW), order_Y=(order_Y, ORDER_ROW))
    _check_int8(X)
    if scale_Y is None:
        raise NodeError("scale_Y is required")
    x = X.astype(_F32) * scalar_f32(xp, scale_X)
    y, _, _ = _layer_norm(xp, x, scale.astype(_F32), None if B is None else B.astype(_F32), axis=axis,
                          epsilon=epsilon)
    return quantize_per_tensor(xp, y, scale_Y, None, np.int8)


@op("QOrderedGelu", domain=MS, since=1)
def QOrderedGelu(xp, X, scale_X, scale_Y, *, order_X=None, order_Y=None):
    """quantize(Gelu(X * scale_X), scale_Y) (erf form), as a 256-entry table. Elementwise, so any
    layout maps to itself: order_X and order_Y need only agree."""
    if order_X is not None and order_Y is not None and order_X != order_Y:
        raise UnsupportedOpError(f"order_X={order_X} ({_name(order_X)}) and order_Y={order_Y} ({_name(order_Y)}) "
                                 "differ: the layouts must agree")
    for attr, v in (("order_X", order_X), ("order_Y", order_Y)):
        if v is not None and v not in _ORDERS:
            raise UnsupportedOpError(f"{attr}={v} is not a cuBLASLt order")
    _check_int8(X)
    return lookup_table(xp, X, scale_X, None, scale_Y, None, lambda v: gelu(xp, v))


# -- QOrderedAttention --------------------------------------------------------------------------

@op("QOrderedAttention", domain=MS, since=1)
def QOrderedAttention(xp, input, scale_input, scale_Q_gemm, scale_K_gemm, scale_V_gemm,  # noqa: A002
                      Q_weight, K_weight, V_weight, scale_Q_weight, scale_K_weight, scale_V_weight,
                      Q_bias, K_bias, V_bias, scale_QKT_gemm=None, scale_QKT_softmax=None, scale_values_gemm=None,
                      mask_index=None, past=None, attention_bias=None, *, num_heads=None, order_input=None,
                      order_output=None, order_weight=None, qkv_hidden_sizes=None, unidirectional=0):
    """Self-attention on int8 input (B, S, K) with per-tensor activation scales, each stage quantized:
    Q, K, V = quantize(input @ W + bias) with their gemm scales (W ORDER_COL (K, H), a scale per tensor
    or per column); scores = quantize(Q K^T, scale_QKT_gemm); probs = quantize(softmax(scores /
    sqrt(head_size) + mask), scale_QKT_softmax); output = quantize(probs V, scale_values_gemm), (B, S, H).
    Masks as Attention's (additive -10000): lengths (B), end and start (2B), 0/1 (B, S) or (B, S, S)."""
    _require_orders(order_input=(order_input, ORDER_ROW), order_weight=(order_weight, ORDER_COL),
                    order_output=(order_output, ORDER_ROW))
    if not num_heads or num_heads < 1:
        raise NodeError("attribute num_heads is required and must be positive")
    if past is not None or attention_bias is not None:
        raise UnsupportedOpError("past and attention_bias are not supported (nor by onnxruntime's kernel)")
    for name, s in (("scale_QKT_gemm", scale_QKT_gemm), ("scale_QKT_softmax", scale_QKT_softmax),
                    ("scale_values_gemm", scale_values_gemm)):
        if s is None:
            raise NodeError(f"{name} is required")
    _check_int8(input, Q_weight, K_weight, V_weight)
    if input.ndim != 3:
        raise NodeError(f"input must be (batch, sequence, hidden), got {tuple(input.shape)}")
    Bn, S, K = input.shape
    sizes = [w.shape[-1] for w in (Q_weight, K_weight, V_weight)]
    if qkv_hidden_sizes is not None and list(qkv_hidden_sizes) != sizes:
        raise NodeError(f"qkv_hidden_sizes {list(qkv_hidden_sizes)} differ from the weights' {sizes}")
    H = sizes[0]
    if any(w.ndim != 2 or w.shape[0] != K for w in (Q_weight, K_weight, V_weight)) or len(set(sizes)) != 1 \
            or H % num_heads:
        raise NodeError(f"Q/K/V weights {[tuple(w.shape) for w in (Q_weight, K_weight, V_weight)]} must be "
                        f"({K}, H) with one H divisible by num_heads={num_heads}")
    s_in = scalar_f32(xp, scale_input)
    layers = []
    for w, sw, b, sg, what in ((Q_weight, scale_Q_weight, Q_bias, scale_Q_gemm, "Q"),
                               (K_weight, scale_K_weight, K_bias, scale_K_gemm, "K"),
                               (V_weight, scale_V_weight, V_bias, scale_V_gemm, "V")):
        if tuple(b.shape) != (H,):
            raise NodeError(f"{what}_bias of shape {tuple(b.shape)} must be ({H},)")
        g = scalar_f32(xp, sg)
        acc = _matmul_integer(xp, input, _col_weight(xp, w))
        y = _requant(xp, acc, s_in * _per_column(xp, sw, H, f"scale_{what}_weight") / g, b.astype(_F32) / g)
        layers.append(split_heads(xp, y, num_heads))  # (B, N, S, h)
    q, k, v = layers
    sq, sk, sv = (scalar_f32(xp, s) for s in (scale_Q_gemm, scale_K_gemm, scale_V_gemm))
    s_qk, s_sm, s_out = (scalar_f32(xp, s) for s in (scale_QKT_gemm, scale_QKT_softmax, scale_values_gemm))
    scores = _requant(xp, _matmul_integer(xp, q, xp.swapaxes(k, -1, -2)), sq * sk / s_qk)
    logits = scores.astype(_F32) * (s_qk * _F32(1 / math.sqrt(H // num_heads)))
    mask = attention_mask(xp, mask_index, Bn, S, 0, unidirectional, -10000.0, np.dtype(_F32))
    if mask is not None:
        logits = logits + mask
    probs = quantize_per_tensor(xp, _softmax(xp, logits, (3,), log=False), scale_QKT_softmax, None, np.int8)
    out = _requant(xp, _matmul_integer(xp, probs, v), s_sm * sv / s_out)  # (B, N, S, h)
    return xp.reshape(xp.permute_dims(out, (0, 2, 1, 3)), (Bn, S, H))
