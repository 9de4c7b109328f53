"""Position-bias ops of encoder-decoder transformers: T5's bucketed RelativePositionBias, which
onnxruntime's transformer optimizer (model type ``t5``) fuses from the exported bucket computation,
and the gated variant GatedRelativePositionBias (padded or packed tokens) of convert_to_packing_mode.

onnxruntime implements both on CUDA only; these follow its kernels' formulas.
"""

from __future__ import annotations

import numpy as np

from ...errors import NodeError
from ...registry import op
from .attention import RestorePadding as _restore_padding
from .transformer import accumulate_dtype, split_heads

MS = "com.microsoft"


def _scalar(value, name):
    v = np.asarray(value)
    if v.size != 1:
        raise NodeError(f"{name} must hold one value, got shape {v.shape}")
    return int(v.reshape(-1)[0])


def _buckets(xp, S, num_buckets, max_distance, bidirectional):
    """(S, S) bucket of key t relative to query s, as T5 bins ``t - s``: exact below half the
    buckets, logarithmic up to ``max_distance``, in float32 like the kernel; a unidirectional bias
    puts every later key in bucket 0 and bidirectional ones use the upper half for later keys.
    Built on the device (a host->device copy would stop a CUDA graph capture)."""
    pos = xp.arange(S, dtype=np.int64)
    rel = xp.reshape(pos, (1, S)) - xp.reshape(pos, (S, 1))
    n = num_buckets // 2 if bidirectional else num_buckets
    bucket = (rel > 0).astype(np.int64) * n if bidirectional else None
    rel = xp.abs(rel) if bidirectional else xp.maximum(-rel, 0)
    exact = n // 2
    ratio = xp.log(xp.maximum(rel, exact).astype(np.float32) / np.float32(exact))
    ratio = ratio / np.log(np.float32(max_distance) / np.float32(exact))  # float32 scalar: logf of the kernel
    large = xp.minimum(exact + (ratio * np.float32(n - exact)).astype(np.int64), n - 1)
    near = xp.where(rel < exact, rel, large)
    return near if bucket is None else bucket + near


@op("RelativePositionBias", domain=MS, since=1, host_inputs=(1, 2))
def RelativePositionBias(xp, bias_table, query_length, key_length, *, max_distance, is_bidirectional=0):
    """The (1, N, S, S) attention bias ``table[head, bucket(t - s)]``. ``bias_table`` is declared
    (num_buckets, N) but, as the optimizer writes it, holds the head-major (N, num_buckets) data."""
    if bias_table.ndim != 2:
        raise NodeError(f"bias_table must be 2-D (num_buckets, num_heads), got {tuple(bias_table.shape)}")
    num_buckets, N = bias_table.shape
    S, L = _scalar(query_length, "query_length"), _scalar(key_length, "key_length")
    if S != L or S < 0:
        raise NodeError(f"query_length {S} must equal key_length {L} (self-attention only, as onnxruntime)")
    if max_distance <= 0 or num_buckets < (4 if is_bidirectional else 2):
        raise NodeError(f"max_distance {max_distance} must be positive and num_buckets {num_buckets} at least "
                        f"{4 if is_bidirectional else 2} (is_bidirectional={is_bidirectional})")
    index = xp.reshape(_buckets(xp, S, num_buckets, max_distance, bool(is_bidirectional)), (-1,))
    table = xp.reshape(bias_table, (N, num_buckets))
    return xp.reshape(xp.take(table, index, axis=1), (1, N, S, S))


@op("GatedRelativePositionBias", domain=MS, since=1, host_inputs=(6,))
def GatedRelativePositionBias(xp, query_layer, query_bias, rel_pos, weight, bias, eco_a, token_offset=None, *,
                              num_heads):
    """``gate * rel_pos`` (B, N, S, S): per query, the head's (query + query_bias) row times ``weight``
    plus ``bias`` is summed over each half (u, r) and ``gate = sigmoid(u) (sigmoid(r) eco_a - 1) + 2``.
    With ``token_offset`` (B, S) the query is packed (tokens, D); the padding takes the bias alone."""
    N = num_heads
    if token_offset is not None:
        if query_layer.ndim != 2 or token_offset.ndim != 2:
            raise NodeError(f"packed query_layer must be (tokens, D) with token_offset (B, S), got "
                            f"{tuple(query_layer.shape)} and {tuple(token_offset.shape)}")
        query_layer = _restore_padding(xp, query_layer, token_offset)
    if query_layer.ndim != 3 or N <= 0 or query_layer.shape[2] % N:
        raise NodeError(f"query_layer must be (B, S, D) with D divisible by num_heads {N}, got "
                        f"{tuple(query_layer.shape)}")
    Bn, S, Dq = query_layer.shape
    h = Dq // N
    D = weight.shape[-1] if weight.ndim == 2 else 0
    checks = [(tuple(query_bias.shape), (Dq,), "query_bias"), (tuple(rel_pos.shape), (1, N, S, S), "rel_pos"),
              (tuple(weight.shape), (h, D), "weight"), (tuple(bias.shape), (D,), "bias"),
              (tuple(eco_a.shape), (1, N, 1, 1), "eco_a")]
    for got, want, name in checks:
        if got != want:
            raise NodeError(f"{name} has shape {got}, expected {want}")
    if D == 0 or D % 2:
        raise NodeError(f"weight's last dimension {D} must be positive and even")
    ct = accumulate_dtype(query_layer)
    q = split_heads(xp, query_layer.astype(ct) + query_bias.astype(ct), N)  # (B, N, S, h)
    g = xp.matmul(q, weight.astype(ct)) + bias.astype(ct)  # (B, N, S, D)
    u = 1 / (1 + xp.exp(-xp.sum(g[..., :D // 2], axis=-1, keepdims=True)))
    r = 1 / (1 + xp.exp(-xp.sum(g[..., D // 2:], axis=-1, keepdims=True)))
    gate = u * (r * eco_a.astype(ct) - 1) + 2
    return (gate * rel_pos.astype(ct)).astype(query_layer.dtype)
