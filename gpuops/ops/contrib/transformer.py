"""com.microsoft transformer ops: Attention, QAttention, LongformerAttention, EmbedLayerNormalization,
SkipLayerNormalization, Gelu, FastGelu, BiasGelu, BiasSoftmax, BiasDropout, FusedMatMul,
TransposeMatMul, FusedGemm, FusedConv, and the SampleOp echo.

They are compositions of ai.onnx ops and reuse them: Gelu / Gelu-tanh from ``activation``, layer
normalization from ``norm``, softmax from ``softmax``, Gemm from ``linalg``, convolution from ``conv``,
Dropout from ``norm`` and integer matmul from ``quantize``.

Attention follows onnxruntime's CPU kernel: Q, K, V come from one packed projection; masks are
additive (``mask_filter_value``, default -10000, is added where a key is masked; the causal mask of
``unidirectional`` adds it again), so a fully masked row still has a defined softmax. Accepted
``mask_index`` forms: key lengths ``(B)``, end and start positions ``(2B)``, a raw 0/1 mask ``(B, T)``
or ``(B, S, T)``, and the Megatron-style ``(B, 1, M, M)`` lower-triangular mask.

LongformerAttention (no onnxruntime CPU kernel) is computed densely: query ``i`` attends to the keys
``|i - j| <= window`` and to every global key (each key once), the ``mask`` values (0 or negative)
are added to the scores, and the rows of global tokens are recomputed with the global projections
attending to all keys.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import NodeError
from ...registry import op
from .. import activation as _act
from ..conv import conv as _conv
from ..elementwise import clamp
from ..indexing import check_bounds
from ..linalg import Gemm as _gemm
from ..linalg import MatMul as _matmul
from ..norm import Dropout as _dropout
from ..norm import LayerNormalization as _layer_norm
from ..quantize import MatMulInteger as _matmul_integer
from ..softmax import normalise as _softmax

MS = "com.microsoft"


def accumulate_dtype(X):
    """float16 / bfloat16 are computed in float32 (as onnxruntime's kernels accumulate)."""
    return np.float32 if np.dtype(X.dtype).itemsize < 4 else X.dtype


# -- activations --------------------------------------------------------------------------------

def fused_activation(xp, Y, name: str | None, alpha=None, beta=None, gamma=None, *, own: bool = False):
    """The activation a Fused* node names, with onnxruntime's parameter defaults. ``own``: Y is the
    node's own new array, so Relu, Clip, HardSwish, HardSigmoid and Tanh may write their result over it."""
    name = name or ""
    if own and Y.dtype.kind == "f" and name in ("HardSigmoid", "Tanh"):
        if name == "Tanh":
            return xp.tanh(Y, out=Y)
        xp.multiply(Y, 0.2 if alpha is None else float(alpha), out=Y)
        xp.add(Y, 0.5 if beta is None else float(beta), out=Y)
        return xp.minimum(xp.maximum(Y, 0, out=Y), 1, out=Y)
    if own and Y.dtype.kind == "f" and name in ("Relu", "Clip", "HardSwish"):
        if name == "Relu":
            return _act.Relu(xp, Y, out=Y)
        if name == "HardSwish":  # one temporary, updated in place: a large map's fresh arrays page-fault
            t = xp.multiply(Y, 1 / 6)
            xp.add(t, 0.5, out=t)
            xp.minimum(xp.maximum(t, 0, out=t), 1, out=t)
            return xp.multiply(Y, t, out=Y)
        lo, hi = (-np.inf if alpha is None else float(alpha)), (np.inf if beta is None else float(beta))
        return xp.minimum(xp.maximum(Y, lo, out=Y), hi, out=Y)

    def a(default):
        return default if alpha is None else float(alpha)

    def b(default):
        return default if beta is None else float(beta)

    if name == "":
        return Y
    if name == "Relu":
        return _act.Relu(xp, Y)
    if name == "LeakyRelu":
        return _act.LeakyRelu(xp, Y, alpha=a(0.01))
    if name == "Tanh":
        return xp.tanh(Y)
    if name == "Sigmoid":
        return _act.Sigmoid(xp, Y)
    if name == "HardSigmoid":
        return _act.HardSigmoid(xp, Y, alpha=a(0.2), beta=b(0.5))
    if name == "HardSwish":
        return _act.HardSwish(xp, Y)
    if name == "Clip":
        return clamp(xp, Y, a(-np.inf), b(np.inf))
    if name == "Elu":
        return _act.Elu(xp, Y, alpha=a(1.0))
    if name == "Selu":
        return _act.Selu(xp, Y, alpha=a(1.67326319217681884765625),
                         gamma=1.05070102214813232421875 if gamma is None else float(gamma))
    if name == "Softplus":
        return _act.Softplus(xp, Y)
    if name == "Softsign":
        return _act.Softsign(xp, Y)
    if name == "ThresholdedRelu":
        return _act.ThresholdedRelu(xp, Y, alpha=a(1.0))
    if name == "ScaledTanh":
        return (xp.tanh(Y * b(1.0)) * a(1.0)).astype(Y.dtype)
    if name == "ParametricSoftplus":
        return (_act.softplus(xp, Y * b(1.0)) * a(1.0)).astype(Y.dtype)
    raise NodeError(f"unsupported fused activation {name!r}")


def alpha_beta(activation_params):
    p = list(activation_params or [])
    return (p[0] if p else None), (p[1] if len(p) > 1 else None)


# -- Gelu family --------------------------------------------------------------------------------

def gelu(xp, X, approximate="none"):
    ct = accumulate_dtype(X)
    return _act.Gelu(xp, X.astype(ct), approximate=approximate).astype(X.dtype)


@op("Gelu", domain=MS, since=1)
def Gelu(xp, X):
    return gelu(xp, X)


@op("BiasGelu", domain=MS, since=1)
def BiasGelu(xp, A, B):
    return gelu(xp, A + B)


@op("FastGelu", domain=MS, since=1)
def FastGelu(xp, X, bias=None):
    """0.5 x (1 + tanh(0.797885 x + 0.035677 x^3)): ai.onnx Gelu with ``approximate='tanh'``."""
    return gelu(xp, X if bias is None else X + bias, "tanh")


# -- softmax / dropout fusions ------------------------------------------------------------------

@op("BiasSoftmax", domain=MS, since=1)
def BiasSoftmax(xp, data, bias, *, broadcast_axis=1, softmax_axis=1, axis=None, is_inner_broadcast=None):
    """softmax(data + bias) over the dimensions ``softmax_axis`` and after (flattened, as Softmax-1).

    In the spec's form a bias of lower rank lacks the dimensions ``broadcast_axis .. softmax_axis - 1``
    of data. onnxruntime's later schema (``axis``, ``is_inner_broadcast``) fuses an Add, so there the
    bias broadcasts as Add's does (NumPy rules); ``is_inner_broadcast`` only describes that shape.
    """
    rank = data.ndim
    sm = softmax_axis if axis is None else axis
    if not -rank <= sm < rank:
        raise NodeError(f"softmax axis {sm} is out of range for rank {rank}")
    sm %= rank
    if bias.ndim < rank and axis is None and is_inner_broadcast is None:
        lo = broadcast_axis % rank
        if bias.ndim + (sm - lo) != rank:
            raise NodeError(f"bias of shape {tuple(bias.shape)} lacks other than the broadcast dimensions "
                            f"{lo}..{sm - 1} of data {tuple(data.shape)}")
        bias = xp.reshape(bias, tuple(bias.shape[:lo]) + (1,) * (sm - lo) + tuple(bias.shape[lo:]))
    return _softmax(xp, data + bias, tuple(range(sm, rank)), log=False)


@op("BiasDropout", domain=MS, since=1, host_inputs=(4,), n_outputs=True)
def BiasDropout(xp, data, bias, residual=None, ratio=None, training_mode=None, *, seed=None, n_outputs=1):
    """Dropout(data + bias, ratio) + residual: ai.onnx Dropout (opset 12) on the biased input."""
    out = _dropout(xp, data + bias, ratio, training_mode, seed=seed, n_outputs=2)
    Y, mask = out
    if residual is not None:
        Y = Y + residual
    return Y if n_outputs == 1 else (Y, mask)


# -- matmul / gemm / conv fusions ---------------------------------------------------------------

def _fused_matmul(xp, A, B, alpha, transA, transB, transBatchA, transBatchB):
    if transBatchA and A.ndim > 2:  # [d0, d1..dk, M] -> [d1..dk, d0, M]
        A = xp.moveaxis(A, 0, -2)
    if transBatchB and B.ndim > 2:
        B = xp.moveaxis(B, 0, -2)
    if transA and A.ndim >= 2:
        A = xp.swapaxes(A, -1, -2)
    if transB and B.ndim >= 2:
        B = xp.swapaxes(B, -1, -2)
    Y = _matmul(xp, A, B)
    return Y if alpha == 1.0 else (Y * alpha).astype(Y.dtype)


@op("FusedMatMul", domain=MS, since=1)
def FusedMatMul(xp, A, B, *, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):
    return _fused_matmul(xp, A, B, alpha, transA, transB, transBatchA, transBatchB)


@op("TransposeMatMul", domain=MS, since=1)
def TransposeMatMul(xp, A, B, *, alpha=1.0, transA=0, transB=0):
    return _fused_matmul(xp, A, B, alpha, transA, transB, 0, 0)


@op("FusedGemm", domain=MS, since=1)
def FusedGemm(xp, A, B, C=None, *, activation=None, activation_alpha=None, activation_beta=None,
              activation_gamma=None, alpha=1.0, beta=1.0, transA=0, transB=0):
    Y = _gemm(xp, A, B, C, alpha=alpha, beta=beta, transA=transA, transB=transB)
    return fused_activation(xp, Y, activation, activation_alpha, activation_beta, activation_gamma, own=True)


def as_clamp(activation, activation_params):
    """An activation that is a clamp to [lo, hi] (none, Relu, Clip) as (lo, hi), else None."""
    if activation not in ("Relu", "Clip", None, ""):
        return None
    alpha, beta = alpha_beta(activation_params)
    return (0.0, math.inf) if activation == "Relu" else (
        -math.inf if alpha is None else float(alpha), math.inf if beta is None else float(beta))


@op("FusedConv", domain=MS, since=1)
def FusedConv(xp, X, W, B=None, Z=None, *, activation=None, activation_params=None, auto_pad="NOTSET",
              dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    """activation(Conv(X, W) + B + Z). float32 with Relu or Clip (or none) and without Z: the clamp goes
    with the bias in the conv's own last pass."""
    geometry = dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
                    strides=strides)
    clamp_to = as_clamp(activation, activation_params) if X.dtype == np.float32 else None
    if Z is None and clamp_to is not None:
        return _conv(xp, X, W, B, clamp_to=clamp_to if activation else None, **geometry)
    return residual_activation(xp, _conv(xp, X, W, B, **geometry), Z, activation, activation_params)


def residual_activation(xp, Y, Z, activation, activation_params):
    """FusedConv's epilogue on the conv's new array ``Y``: ``activation(Y + Z)``, written into ``Y``."""
    if Z is not None:
        if tuple(Z.shape) == tuple(Y.shape) and Z.dtype == Y.dtype:
            Y += Z
        else:
            Y = Y + Z
    return fused_activation(xp, Y, activation, *alpha_beta(activation_params), own=True)


# -- normalizations -----------------------------------------------------------------------------

@op("SkipLayerNormalization", domain=MS, since=1)
def SkipLayerNormalization(xp, input, skip, gamma, beta=None, bias=None, *, epsilon=1e-12):  # noqa: A002
    """LayerNorm(input + skip + bias) over the hidden axis; also the float32 mean, 1/std and the sum."""
    if input.ndim not in (2, 3):
        raise NodeError(f"input must be 2-D or 3-D, got shape {tuple(input.shape)}")
    x = input + skip
    if bias is not None:
        x = x + bias
    Y, mean, inv_std = _layer_norm(xp, x, gamma, beta, axis=-1, epsilon=epsilon, stash_type=1)
    return Y, mean, inv_std, x


@op("EmbedLayerNormalization", domain=MS, since=1)
def EmbedLayerNormalization(xp, input_ids, segment_ids=None, word_embedding=None, position_embedding=None,
                            segment_embedding=None, gamma=None, beta=None, mask=None, position_ids=None, *,
                            epsilon=1e-12, mask_index_type=1):
    """LayerNorm(word[input_ids] + position[position_ids or 0..S-1] + segment[segment_ids]), and the
    mask index: the number of 1s in each row of ``mask`` (0 without a mask); also the raw sum."""
    if input_ids.ndim != 2:
        raise NodeError(f"input_ids must be (batch, sequence), got shape {tuple(input_ids.shape)}")
    Bn, S = input_ids.shape
    check_bounds(xp, input_ids, (word_embedding.shape[0],), "input_ids")

    def wrap(ids, table):  # negative ids count from the end; in range while a deferred check is pending
        return xp.reshape(ids.astype(np.int64) % max(table.shape[0], 1), (-1,))

    emb = xp.take(word_embedding, wrap(input_ids, word_embedding), axis=0)
    if position_ids is None:
        if S > position_embedding.shape[0]:
            raise NodeError(f"sequence length {S} exceeds the {position_embedding.shape[0]} position embeddings")
        pos = xp.broadcast_to(position_embedding[None, :S], (Bn, S, position_embedding.shape[1]))
    else:
        check_bounds(xp, position_ids, (position_embedding.shape[0],), "position_ids")
        pid = xp.broadcast_to(position_ids, (Bn, S))
        pos = xp.take(position_embedding, wrap(pid, position_embedding), axis=0)
    emb = xp.reshape(emb, (Bn, S, -1)) + xp.reshape(pos, (Bn, S, -1))
    if segment_embedding is not None and segment_ids is not None:
        check_bounds(xp, segment_ids, (segment_embedding.shape[0],), "segment_ids")
        seg = xp.take(segment_embedding, wrap(segment_ids, segment_embedding), axis=0)
        emb = emb + xp.reshape(seg, (Bn, S, -1))
    Y = _layer_norm(xp, emb, gamma, beta, axis=-1, epsilon=epsilon, stash_type=1)[0]
    if mask is None:
        mask_index = xp.zeros((Bn,), dtype=np.int32)
    else:
        mask_index = xp.sum((mask == 1).astype(np.int32), axis=1).astype(np.int32)
    return Y, mask_index, emb


# -- attention ----------------------------------------------------------------------------------

def split_heads(xp, t, N):
    """(B, S, N*h) -> (B, N, S, h)."""
    Bn, S, D = t.shape
    return xp.permute_dims(xp.reshape(t, (Bn, S, N, D // N)), (0, 2, 1, 3))


def attention_mask(xp, mask_index, Bn, S, P, unidirectional, filter_value, dtype):
    """The additive (B, 1, S, T) mask, T = P + S, or None."""
    T = P + S
    mask = None
    if mask_index is not None:
        dims = tuple(mask_index.shape)
        m = mask_index.astype(np.int64)
        keys = xp.reshape(xp.arange(T, dtype=np.int64), (1, T))
        if len(dims) == 1 and dims[0] in (Bn, 2 * Bn):
            masked = keys >= xp.reshape(m[:Bn], (Bn, 1))  # right padding: keys past the valid length
            if dims[0] == 2 * Bn:  # left padding: keys before the start position too
                masked = masked | (keys < xp.reshape(m[Bn:], (Bn, 1)))
            masked = masked[:, None, None, :]
        elif len(dims) == 2 and dims == (Bn, T):
            masked = (m <= 0)[:, None, None, :]
        elif len(dims) == 3 and dims == (Bn, S, T):
            masked = (m <= 0)[:, None, :, :]
        elif len(dims) == 4 and dims[0] == Bn and dims[1] == 1 and dims[2] == dims[3] and dims[2] >= T:
            masked = (m[:, :, P:T, :T] <= 0)
        else:
            raise NodeError(f"mask_index of shape {dims} fits none of (B), (2B), (B, T), (B, S, T), (B, 1, M, M) "
                            f"for batch {Bn}, sequence {S} and total length {T}")
        mask = xp.where(masked, xp.full((), filter_value, dtype=dtype), xp.zeros((), dtype=dtype))
    if unidirectional:  # built on the device: a host->device copy would stop a CUDA graph capture
        q = xp.reshape(xp.arange(S, dtype=np.int64) + P, (S, 1))
        k = xp.reshape(xp.arange(T, dtype=np.int64), (1, T))
        causal = xp.where(k > q, xp.full((), filter_value, dtype=dtype), xp.zeros((), dtype=dtype))[None, None]
        mask = causal if mask is None else mask + causal
    return mask


def _multihead(xp, q, k, v, N, *, mask_index=None, past=None, attention_bias=None, unidirectional=0, scale=None,
               mask_filter_value=-10000.0, want_present=False):
    """Scaled dot-product attention of projected q, k, v (B, S, hidden); returns (output, present)."""
    Bn, S, _ = q.shape
    ct = accumulate_dtype(q)
    Q, K, V = (split_heads(xp, t.astype(ct), N) for t in (q, k, v))
    P = 0
    if past is not None:
        if past.ndim != 5 or past.shape[0] != 2:
            raise NodeError(f"past must be (2, batch, heads, past_length, head_size), got {tuple(past.shape)}")
        P = past.shape[3]
        K = xp.concat([past[0].astype(ct), K], axis=2)
        V = xp.concat([past[1].astype(ct), V], axis=2)
    qk_head = Q.shape[-1]
    alpha = 1.0 / math.sqrt(qk_head) if not scale else float(scale)
    scores = xp.matmul(Q, xp.swapaxes(K, -1, -2)) * alpha
    mask = attention_mask(xp, mask_index, Bn, S, P, unidirectional, float(mask_filter_value), np.dtype(ct))
    if mask is not None:
        scores = scores + mask
    if attention_bias is not None:
        scores = scores + attention_bias.astype(ct)
    probs = _softmax(xp, scores, (3,), log=False)
    out = xp.matmul(probs, V)  # (B, N, S, hv)
    out = xp.reshape(xp.permute_dims(out, (0, 2, 1, 3)), (Bn, S, -1)).astype(q.dtype)
    present = xp.stack([K, V]).astype(q.dtype) if want_present else None
    return out, present


def split_qkv(xp, qkv, hidden, qkv_hidden_sizes):
    sizes = list(qkv_hidden_sizes) if qkv_hidden_sizes else [hidden // 3] * 3
    if len(sizes) != 3 or sum(sizes) != hidden or sizes[0] != sizes[1]:
        raise NodeError(f"qkv_hidden_sizes {sizes} must be 3 sizes (q and k equal) summing to {hidden}")
    a, b = sizes[0], sizes[0] + sizes[1]
    return qkv[..., :a], qkv[..., a:b], qkv[..., b:]


def _unsupported(**flags):
    for name, value in flags.items():
        if value:
            raise NodeError(f"attribute {name}={value} is not supported")


@op("Attention", domain=MS, since=1, n_outputs=True)
def Attention(xp, input, weights, bias=None, mask_index=None, past=None, attention_bias=None,  # noqa: A002
              past_sequence_length=None, *, num_heads, unidirectional=0, qkv_hidden_sizes=None, scale=None,
              mask_filter_value=-10000.0, do_rotary=0, rotary_embedding_dim=0, past_present_share_buffer=0,
              n_outputs=1):
    _unsupported(do_rotary=do_rotary, past_present_share_buffer=past_present_share_buffer)
    if input.ndim != 3 or weights.ndim != 2:
        raise NodeError(f"input must be (B, S, D) and weights (D, hidden), got {tuple(input.shape)} and "
                        f"{tuple(weights.shape)}")
    qkv = _matmul(xp, input, weights)
    if bias is not None:
        qkv = qkv + bias
    q, k, v = split_qkv(xp, qkv, weights.shape[1], qkv_hidden_sizes)
    out, present = _multihead(xp, q, k, v, num_heads, mask_index=mask_index, past=past,
                              attention_bias=attention_bias, unidirectional=unidirectional, scale=scale,
                              mask_filter_value=mask_filter_value, want_present=n_outputs > 1)
    return out if n_outputs == 1 else (out, present)


@op("QAttention", domain=MS, since=1, n_outputs=True)
def QAttention(xp, input, weight, bias, input_scale, weight_scale, mask_index=None, input_zero_point=None,  # noqa: A002
               weight_zero_point=None, past=None, *, num_heads, unidirectional=0, scale=None,
               mask_filter_value=-10000.0, do_rotary=0, past_present_share_buffer=0, n_outputs=1):
    """Attention on (input - izp) @ (weight - wzp) * input_scale * weight_scale + bias (int32 accumulation)."""
    return qattention(xp, input, weight, bias, input_scale, weight_scale, mask_index, input_zero_point,
                      weight_zero_point, past, num_heads=num_heads, unidirectional=unidirectional, scale=scale,
                      mask_filter_value=mask_filter_value, do_rotary=do_rotary,
                      past_present_share_buffer=past_present_share_buffer, n_outputs=n_outputs)


def qattention(xp, input, weight, bias, input_scale, weight_scale, mask_index=None, input_zero_point=None,  # noqa: A002
               weight_zero_point=None, past=None, *, num_heads, unidirectional=0, scale=None,
               mask_filter_value=-10000.0, do_rotary=0, past_present_share_buffer=0, n_outputs=1,
               matmul_integer=_matmul_integer):
    """QAttention with its integer product by ``matmul_integer`` (ai.onnx MatMulInteger: a device
    override's own, which keeps the weight's centred copy per session)."""
    _unsupported(do_rotary=do_rotary, past_present_share_buffer=past_present_share_buffer)
    if bias is None:
        raise NodeError("QAttention needs its bias input (input 2, required by the spec; onnxruntime "
                        "refuses the node too)")
    acc = matmul_integer(xp, input, weight, input_zero_point, weight_zero_point)
    dtype = np.dtype(bias.dtype)
    multiplier = (xp.reshape(input_scale, ()).astype(np.float32) *
                  xp.reshape(weight_scale, (-1,)).astype(np.float32))  # weight_scale may be per column
    qkv = (acc.astype(np.float32) * multiplier).astype(dtype) + bias
    q, k, v = split_qkv(xp, qkv, weight.shape[1], None)
    out, present = _multihead(xp, q, k, v, num_heads, mask_index=mask_index, past=past,
                              unidirectional=unidirectional, scale=scale, mask_filter_value=mask_filter_value,
                              want_present=n_outputs > 1)
    return out if n_outputs == 1 else (out, present)


@op("LongformerAttention", domain=MS, since=1)
def LongformerAttention(xp, input, weight, bias, mask, global_weight, global_bias, global_, *,  # noqa: A002
                        num_heads, window):
    Bn, S, D = input.shape
    N = num_heads
    ct = accumulate_dtype(input)
    x = input.astype(ct)

    def project(w, b):
        qkv = xp.matmul(x, w.astype(ct)) + b.astype(ct)
        return [split_heads(xp, t, N) for t in (qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:])]

    Q, K, V = project(weight, bias)
    scale = 1.0 / math.sqrt(D // N)
    is_global = global_ != 0  # (B, S)
    i = xp.arange(S, dtype=np.int64)
    band = xp.abs(i[:, None] - i[None, :]) <= window
    allowed = band[None] | is_global[:, None, :]  # (B, S query, S key)
    neg = xp.full((), np.finfo(np.dtype(ct)).min, dtype=ct)
    key_mask = mask.astype(ct)[:, None, None, :]  # additive: 0 or negative
    scores = xp.matmul(Q, xp.swapaxes(K, -1, -2)) * scale + key_mask
    scores = xp.where(allowed[:, None], scores, neg)
    out = xp.matmul(_softmax(xp, scores, (3,), log=False), V)  # (B, N, S, h)
    # global tokens: their own projections, attending to every key
    Qg, Kg, Vg = project(global_weight, global_bias)
    g_scores = xp.matmul(Qg, xp.swapaxes(Kg, -1, -2)) * scale + key_mask
    g_out = xp.matmul(_softmax(xp, g_scores, (3,), log=False), Vg)
    out = xp.where(is_global[:, None, :, None], g_out, out)
    return xp.reshape(xp.permute_dims(out, (0, 2, 1, 3)), (Bn, S, D)).astype(input.dtype)


# -- SampleOp -----------------------------------------------------------------------------------

@op("SampleOp", domain=MS, since=1)
def SampleOp(xp, X):
    """onnxruntime's sample kernel: an echo of its input."""
    return xp.asarray(X).copy()
