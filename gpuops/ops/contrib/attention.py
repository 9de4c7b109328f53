"""Attention ops of onnxruntime's transformer optimizer and generation tools: MultiHeadAttention,
GroupQueryAttention, RotaryEmbedding, the packed (padding-free) PackedAttention and
PackedMultiHeadAttention with the RemovePadding / RestorePadding around them, and the decoding ops
DecoderMaskedMultiHeadAttention and DecoderMaskedSelfAttention.

Everything is scaled dot-product attention on (batch, heads, sequence, head_size) tensors, computed in
float32 for float16 inputs. Masks follow onnxruntime's CPU kernels: key-padding masks and causal masks
add ``mask_filter_value`` (default -10000) to the scores; GroupQueryAttention and the packed ops leave
the keys outside a sequence out of the softmax altogether.

One module, past 500 lines: the ops share the mask, past/present and packing conventions, which
must change together.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import NodeError
from ...registry import op
from ..indexing import check_bounds
from ..linalg import MatMul as _matmul
from ..softmax import normalise as _softmax
from .transformer import accumulate_dtype, split_heads, split_qkv

MS = "com.microsoft"


def _merge_heads(xp, t):
    """(B, N, S, h) -> (B, S, N*h)."""
    Bn, N, S, h = t.shape
    return xp.reshape(xp.permute_dims(t, (0, 2, 1, 3)), (Bn, S, N * h))


def _neg(ct):
    return float(np.finfo(np.dtype(ct)).min)


def _sdpa(xp, Q, K, V, scale, add=None, keep=None, sink=None, softcap=0.0):
    """softmax(Q K^T * scale + add, restricted to ``keep``) V on (B, N, S, h) tensors; ``softcap``
    bounds the scaled scores to (-softcap, softcap) by tanh; ``sink``: one extra logit per head
    (B|1, N, 1, 1) that joins the softmax's denominator only."""
    ct = Q.dtype
    scores = xp.matmul(Q, xp.swapaxes(K, -1, -2)) * scale
    if softcap:
        scores = xp.tanh(scores / softcap) * softcap
    if add is not None:
        scores = scores + add
    if keep is not None:
        scores = xp.where(keep, scores, xp.full((), _neg(ct), dtype=ct))
    if sink is None:
        probs = _softmax(xp, scores, (3,), log=False)
    else:
        top = xp.maximum(xp.max(scores, axis=-1, keepdims=True), sink)
        e = xp.exp(scores - top)
        if keep is not None:
            e = xp.where(keep, e, xp.zeros((), dtype=ct))
        probs = e / (xp.sum(e, axis=-1, keepdims=True) + xp.exp(sink - top))
    return xp.matmul(probs, V)


def _scale(scale, head_size):
    return float(scale) if scale else 1.0 / math.sqrt(head_size)


def _padding_mask(xp, mask, Bn, S, T):
    """A key-padding mask -> boolean ``masked`` broadcasting to (B, 1, S, T): key lengths (B), a 0/1
    mask (B, T) or (B, S, T)."""
    dims = tuple(mask.shape)
    keys = xp.reshape(xp.arange(T, dtype=np.int64), (1, T))
    if dims == (Bn,):
        return (keys >= xp.reshape(mask.astype(np.int64), (Bn, 1)))[:, None, None, :]
    if dims == (Bn, T):
        return (mask <= 0)[:, None, None, :]
    if dims == (Bn, S, T):
        return (mask <= 0)[:, None, :, :]
    raise NodeError(f"key_padding_mask of shape {dims} fits none of (B), (B, T), (B, S, T) for batch {Bn}, "
                    f"sequence {S} and total length {T}")


def _additive(xp, masked, filter_value, ct):
    return xp.where(masked, xp.full((), filter_value, dtype=ct), xp.zeros((), dtype=ct))


def _causal(xp, S, T):
    """(S, T) True where key t lies after query s (queries are the last S of T positions), built on
    the device (a host->device copy would stop a CUDA graph capture)."""
    return xp.reshape(xp.arange(T, dtype=np.int64), (1, T)) > xp.reshape(xp.arange(S, dtype=np.int64), (S, 1)) + (T - S)


# -- MultiHeadAttention -------------------------------------------------------------------------

def _mha_inputs(xp, query, key, value, bias, N):
    """Q (B, N, S, h), and K, V (B, N, L, h) plus whether they came projected per head (cross-attention
    cache), from MultiHeadAttention's accepted layouts."""
    ct = accumulate_dtype(query)
    if query.ndim == 5:  # packed QKV (B, S, N, 3, h)
        if key is not None or value is not None:
            raise NodeError("packed QKV query (B, S, N, 3, h) takes no key or value")
        qkv = query.astype(ct)
        if bias is not None:
            qkv = qkv + xp.permute_dims(xp.reshape(bias.astype(ct), (3, N, qkv.shape[-1])), (1, 0, 2))
        Q, K, V = (xp.permute_dims(qkv[:, :, :, i], (0, 2, 1, 3)) for i in range(3))
        return Q, K, V, False
    if query.ndim != 3:
        raise NodeError(f"query must be (B, S, D) or packed (B, S, N, 3, h), got {tuple(query.shape)}")
    D = query.shape[2]
    q = query.astype(ct)
    if bias is not None:
        q = q + bias[:D].astype(ct)
    Q = split_heads(xp, q, N)
    if key is None:
        raise NodeError("key is required unless the query is packed QKV")
    if key.ndim == 5:  # packed KV (B, L, N, 2, h)
        kv = key.astype(ct)
        if bias is not None:
            kv = kv + xp.permute_dims(xp.reshape(bias[D:].astype(ct), (2, N, kv.shape[-1])), (1, 0, 2))
        K, V = (xp.permute_dims(kv[:, :, :, i], (0, 2, 1, 3)) for i in range(2))
        return Q, K, V, False
    if value is None:
        raise NodeError("value is required with a 3-D or 4-D key")
    if key.ndim == 4:  # (B, N, L, h): already projected and split, no bias
        return Q, key.astype(ct), value.astype(ct), True
    k, v = key.astype(ct), value.astype(ct)
    if bias is not None:
        k = k + bias[D:2 * D].astype(ct)
        v = v + bias[2 * D:].astype(ct)
    return Q, split_heads(xp, k, N), split_heads(xp, v, N), False


@op("MultiHeadAttention", domain=MS, since=1, n_outputs=True)
def MultiHeadAttention(xp, query, key=None, value=None, bias=None, key_padding_mask=None, attention_bias=None,
                       past_key=None, past_value=None, past_sequence_length=None, cache_indirection=None, *,
                       num_heads, mask_filter_value=-10000.0, scale=None, unidirectional=0, n_outputs=1):
    """Multi-head attention of already projected query / key / value (3-D, packed QKV or KV, or a 4-D
    per-head key / value cache), optional ``past_key`` / ``past_value`` (B, N, P, h) concatenated in
    front of the new keys; ``present_key`` / ``present_value`` are the concatenations."""
    if cache_indirection is not None or n_outputs > 3:
        raise NodeError("cache_indirection and the qk output are not supported")
    Q, K, V, cached = _mha_inputs(xp, query, key, value, bias, num_heads)
    ct = Q.dtype
    if past_key is not None or past_value is not None:
        if cached or past_key is None or past_value is None:
            raise NodeError("past_key and past_value go together, with a 3-D key and value")
        K = xp.concat([past_key.astype(ct), K], axis=2)
        V = xp.concat([past_value.astype(ct), V], axis=2)
    Bn, _, S, h = Q.shape
    T = K.shape[2]
    filter_value = -10000.0 if mask_filter_value is None else float(mask_filter_value)
    add = None
    if key_padding_mask is not None:
        add = _additive(xp, _padding_mask(xp, key_padding_mask, Bn, S, T), filter_value, ct)
    if unidirectional:
        causal = _additive(xp, _causal(xp, S, T), filter_value, ct)
        add = causal if add is None else add + causal
    if attention_bias is not None:
        add = attention_bias.astype(ct) if add is None else add + attention_bias.astype(ct)
    out = _merge_heads(xp, _sdpa(xp, Q, K, V, _scale(scale, h), add)).astype(query.dtype)
    if n_outputs == 1:
        return out
    return out, K.astype(query.dtype), V.astype(query.dtype)


# -- rotary embeddings --------------------------------------------------------------------------

def _rotate(xp, x, cos, sin, interleaved):
    """Rotary embedding of the first 2 * cos.shape[-1] features of x (.., h); cos / sin broadcast
    against x[..., :half]."""
    half = cos.shape[-1]
    rd = 2 * half
    if rd > x.shape[-1]:
        raise NodeError(f"rotary dimension {rd} exceeds the head size {x.shape[-1]}")
    r, rest = x[..., :rd], x[..., rd:]
    if interleaved:
        a, b = r[..., 0::2], r[..., 1::2]
        ra, rb = a * cos - b * sin, b * cos + a * sin
        r = xp.reshape(xp.stack([ra, rb], axis=-1), r.shape)
    else:
        a, b = r[..., :half], r[..., half:]
        r = xp.concat([a * cos - b * sin, b * cos + a * sin], axis=-1)
    return xp.concat([r, rest], axis=-1) if rest.shape[-1] else r


def _cache_rows(xp, cache, positions, ct):
    """cos / sin cache rows at integer ``positions`` (any shape), in ``ct``."""
    p = positions.astype(np.int64)
    check_bounds(xp, p, (cache.shape[0],), "position_ids")
    return xp.reshape(xp.take(cache.astype(ct), xp.reshape(p, (-1,)), axis=0), tuple(p.shape) + (cache.shape[1],))


@op("RotaryEmbedding", domain=MS, since=1)
def RotaryEmbedding(xp, input, position_ids, cos_cache, sin_cache, *, interleaved=0, is_packed_batching=0,  # noqa: A002
                    num_heads=0, rotary_embedding_dim=0, scale=1.0):
    """Rotary position embedding of (B, S, N*h) or (B, N, S, h) input; ``position_ids`` is (B, S) or
    one start offset (1); the caches are (max_position, rotary_dim / 2)."""
    if is_packed_batching:
        raise NodeError("is_packed_batching=1 is not supported")
    ct = accumulate_dtype(input)
    x = input.astype(ct)
    half = cos_cache.shape[1]
    if rotary_embedding_dim and rotary_embedding_dim != 2 * half:
        raise NodeError(f"rotary_embedding_dim {rotary_embedding_dim} != 2 * cos_cache.shape[1] ({2 * half})")
    if x.ndim == 3:
        Bn, S, D = x.shape
        h = D // num_heads if num_heads else 2 * half
        if D % h:
            raise NodeError(f"hidden size {D} is not a multiple of the head size {h}")
        x = split_heads(xp, x, D // h)
    elif x.ndim == 4:
        Bn, _, S, _ = x.shape
    else:
        raise NodeError(f"input must be (B, S, D) or (B, N, S, h), got {tuple(input.shape)}")
    if position_ids.size == 1 and tuple(position_ids.shape) != (Bn, S):
        pos = xp.reshape(position_ids.astype(np.int64), (1, 1)) + xp.reshape(xp.arange(S, dtype=np.int64), (1, S))
    elif tuple(position_ids.shape) == (Bn, S):
        pos = position_ids
    else:
        raise NodeError(f"position_ids must be (B, S) or (1), got {tuple(position_ids.shape)}")
    cos = _cache_rows(xp, cos_cache, pos, ct)[:, None]  # (B|1, 1, S, half)
    sin = _cache_rows(xp, sin_cache, pos, ct)[:, None]
    y = _rotate(xp, x, cos, sin, interleaved)
    if input.ndim == 3:
        y = _merge_heads(xp, y)
    return y.astype(input.dtype)


# -- GroupQueryAttention ------------------------------------------------------------------------

@op("GroupQueryAttention", domain=MS, since=1, host_inputs=(5, 6), n_outputs=True)
def GroupQueryAttention(xp, query, key=None, value=None, past_key=None, past_value=None, seqlens_k=None,
                        total_sequence_length=None, cos_cache=None, sin_cache=None, position_ids=None,
                        attention_bias=None, head_sink=None, k_scale=None, v_scale=None, q_norm_weight=None,
                        k_norm_weight=None, query_seqlens=None, *, num_heads, kv_num_heads, causal=1, do_rotary=0,
                        k_norm_epsilon=None, k_quant_type="NONE", kv_cache_bit_width=0, local_window_size=-1,
                        q_norm_epsilon=None, qk_norm_epsilon=1e-6, qk_output=0, rotary_interleaved=0, scale=None,
                        sliding_window_cache=0, smooth_softmax=-1, softcap=0.0, v_quant_type="NONE", n_outputs=1):
    """Causal attention of N query heads over Nkv shared key / value heads, with a per-batch KV cache:
    batch b holds ``seqlens_k[b] + 1`` valid keys in all, of which the last S are new (in the first
    prompt, S == total_sequence_length, there is no past). ``present_key`` / ``present_value``
    (B, Nkv, max(past buffer, total_sequence_length), h) hold the past then the new keys; the rest of
    the buffer is zero. Optional rotary embedding of Q and K, sliding window, softcap, attention
    sinks (``smooth_softmax`` / ``head_sink``) and ``attention_bias``."""
    extras = {"k_scale": k_scale, "v_scale": v_scale, "q_norm_weight": q_norm_weight,
              "k_norm_weight": k_norm_weight, "query_seqlens": query_seqlens}
    for name, value_ in extras.items():
        if value_ is not None:
            raise NodeError(f"input {name} is not supported")
    if str(k_quant_type) not in ("NONE", "b'NONE'") or str(v_quant_type) not in ("NONE", "b'NONE'") \
            or qk_output or not causal:
        raise NodeError("quantized KV caches, qk_output and causal=0 are not supported")
    if seqlens_k is None or total_sequence_length is None:
        raise NodeError("seqlens_k and total_sequence_length are required")
    N, Nkv = int(num_heads), int(kv_num_heads)
    if Nkv < 1 or N % Nkv:
        raise NodeError(f"num_heads {N} must be a multiple of kv_num_heads {Nkv}")
    ct = accumulate_dtype(query)
    Bn, S = query.shape[:2]
    if key is None:  # packed QKV (B, S, (N + 2 Nkv) h)
        h = query.shape[2] // (N + 2 * Nkv)
        q = query[..., :N * h]
        k, v = query[..., N * h:(N + Nkv) * h], query[..., (N + Nkv) * h:]
    else:
        h = query.shape[2] // N
        q, k, v = query, key, value
    Q, K, V = split_heads(xp, q.astype(ct), N), split_heads(xp, k.astype(ct), Nkv), split_heads(xp, v.astype(ct), Nkv)
    total = int(np.asarray(total_sequence_length).reshape(-1)[0])
    lengths = np.asarray(seqlens_k).reshape(-1).astype(np.int64) + 1  # valid keys per batch
    if lengths.shape[0] != Bn or (lengths > total).any():
        raise NodeError(f"seqlens_k {np.asarray(seqlens_k).tolist()} must give, per batch, at most "
                        f"total_sequence_length {total} keys")
    first_prompt = S == total
    past_len = np.zeros(Bn, np.int64) if first_prompt else lengths - S
    if (past_len < 0).any():
        raise NodeError(f"seqlens_k {np.asarray(seqlens_k).tolist()} leaves fewer keys than the {S} new ones")
    if do_rotary:
        if cos_cache is None or sin_cache is None:
            raise NodeError("do_rotary=1 needs cos_cache and sin_cache")
        pos = (position_ids if position_ids is not None else
               xp.asarray(past_len[:, None] + np.arange(S)[None, :]))
        cos = _cache_rows(xp, cos_cache, pos, ct)[:, None]
        sin = _cache_rows(xp, sin_cache, pos, ct)[:, None]
        Q = _rotate(xp, Q, cos, sin, rotary_interleaved)
        K = _rotate(xp, K, cos, sin, rotary_interleaved)
    P = 0 if past_key is None else past_key.shape[2]
    L = max(P, total)
    # present[b, :, t] = past[b, :, t] for t < past_len[b], new[b, :, t - past_len[b]] up to past_len[b] + S
    t = np.arange(L)[None, :]
    pl = past_len[:, None]
    from_new = (t >= pl) & (t < pl + S)
    src = np.where(t < pl, t, P + np.clip(t - pl, 0, S - 1))  # index into concat([past, new])
    valid_slot = xp.asarray(((t < pl) | from_new)[:, None, :, None])
    index = xp.asarray(np.broadcast_to(src[:, None, :, None], (Bn, Nkv, L, h)).copy())

    def present(past, new):
        both = new if past is None else xp.concat([past.astype(ct), new], axis=2)
        full = xp.take_along_axis(both, index, axis=2)
        return xp.where(valid_slot, full, xp.asarray(0.0, dtype=ct))

    Kp, Vp = present(past_key, K), present(past_value, V)
    group = N // Nkv
    Kq, Vq = xp.repeat(Kp, group, axis=1), xp.repeat(Vp, group, axis=1)
    # key t is visible to query s of batch b when t <= past_len[b] + s and t < lengths[b], and within
    # the last local_window_size positions up to that one
    s = np.arange(S)[None, :, None]
    tt = np.arange(L)[None, None, :]
    last = past_len[:, None, None] + s
    keep = (tt <= last) & (tt < lengths[:, None, None])
    if local_window_size is not None and local_window_size > 0:
        keep &= tt > last - local_window_size
    scores_add = None
    if attention_bias is not None:
        scores_add = attention_bias.astype(ct)[..., :L]
    sink = None
    if head_sink is not None:
        sink = xp.reshape(head_sink.astype(ct), (1, N, 1, 1))
    elif smooth_softmax is not None and smooth_softmax > 0:
        sink = xp.zeros((1, N, 1, 1), dtype=ct)
    out = _sdpa(xp, Q, Kq, Vq, _scale(scale, h), scores_add, xp.asarray(keep[:, None]), sink, float(softcap or 0.0))
    out = _merge_heads(xp, out).astype(query.dtype)
    if n_outputs == 1:
        return out
    return out, Kp.astype(query.dtype), Vp.astype(query.dtype)


# -- packed (padding-free) attention ------------------------------------------------------------

def _unpack(xp, packed, cu, Bn, S):
    """Tokens (T, ...) of sequences cu[b]:cu[b+1] -> padded (B, S, ...) and the validity mask (B, S)."""
    lengths = cu[1:] - cu[:-1]
    s = np.arange(S)[None, :]
    valid = s < lengths[:, None]
    idx = np.where(valid, cu[:-1, None] + s, 0).reshape(-1)
    padded = xp.reshape(xp.take(packed, xp.asarray(idx), axis=0), (Bn, S) + tuple(packed.shape[1:]))
    return padded, valid


def _pack(xp, padded, valid):
    """Padded (B, S, ...) -> its valid tokens (T, ...), sequence after sequence."""
    Bn, S = valid.shape
    flat = xp.reshape(padded, (Bn * S,) + tuple(padded.shape[2:]))
    return xp.take(flat, xp.asarray(np.flatnonzero(valid.reshape(-1))), axis=0)


def _packed_geometry(token_offset, cumulative_sequence_length, tokens):
    Bn, S = token_offset.shape
    cu = np.asarray(cumulative_sequence_length).reshape(-1).astype(np.int64)
    lengths = cu[1:] - cu[:-1]
    if cu.shape[0] != Bn + 1 or cu[0] != 0 or cu[-1] != tokens or (lengths < 0).any() or (lengths > S).any():
        raise NodeError(f"cumulative_sequence_length {cu.tolist()} does not describe {tokens} tokens in {Bn} "
                        f"sequences of at most {S}")
    return Bn, S, cu


def _packed_attention(xp, Q, K, V, valid, scale, attention_bias, dtype):
    """Attention of padded (B, N, S, h) Q, K, V in which each sequence sees its own valid keys only."""
    keep = xp.asarray(valid[:, None, None, :])
    add = None if attention_bias is None else attention_bias.astype(Q.dtype)
    return _merge_heads(xp, _sdpa(xp, Q, K, V, scale, add, keep)).astype(dtype)


@op("PackedAttention", domain=MS, since=1, host_inputs=(3, 4))
def PackedAttention(xp, input, weights, bias, token_offset, cumulative_sequence_length,  # noqa: A002
                    attention_bias=None, *, num_heads, qkv_hidden_sizes=None, scale=None):
    """Attention over packed tokens (T, D): sequence b is tokens cumulative_sequence_length[b]:[b+1];
    ``token_offset`` (B, S) gives the padded shape. Each sequence attends only to itself."""
    Bn, S, cu = _packed_geometry(token_offset, cumulative_sequence_length, input.shape[0])
    ct = accumulate_dtype(input)
    qkv = _matmul(xp, input.astype(ct), weights.astype(ct)) + bias.astype(ct)
    q, k, v = split_qkv(xp, qkv, weights.shape[1], qkv_hidden_sizes)
    N = num_heads
    Q, valid = _unpack(xp, q, cu, Bn, S)
    K, V = _unpack(xp, k, cu, Bn, S)[0], _unpack(xp, v, cu, Bn, S)[0]
    Q, K, V = split_heads(xp, Q, N), split_heads(xp, K, N), split_heads(xp, V, N)
    out = _packed_attention(xp, Q, K, V, valid, _scale(scale, Q.shape[-1]), attention_bias, input.dtype)
    return _pack(xp, out, valid)


@op("PackedMultiHeadAttention", domain=MS, since=1, host_inputs=(4, 5))
def PackedMultiHeadAttention(xp, query, key=None, value=None, bias=None, token_offset=None,
                             cumulative_sequence_length=None, attention_bias=None, *, num_heads,
                             mask_filter_value=-10000.0, scale=None):
    """MultiHeadAttention on packed tokens: query / key / value (T, D), or packed QKV query (T, N, 3, h)."""
    if token_offset is None or cumulative_sequence_length is None:
        raise NodeError("token_offset and cumulative_sequence_length are required")
    Bn, S, cu = _packed_geometry(token_offset, cumulative_sequence_length, query.shape[0])
    q_pad, valid = _unpack(xp, query, cu, Bn, S)
    k_pad = None if key is None else _unpack(xp, key, cu, Bn, S)[0]
    v_pad = None if value is None else _unpack(xp, value, cu, Bn, S)[0]
    if query.ndim == 4:  # (T, N, 3, h) -> (B, S, N, 3, h)
        if key is not None:
            raise NodeError("packed QKV query (T, N, 3, h) takes no key or value")
    elif query.ndim != 2:
        raise NodeError(f"query must be (T, D) or (T, N, 3, h), got {tuple(query.shape)}")
    Q, K, V, _ = _mha_inputs(xp, q_pad, k_pad, v_pad, bias, num_heads)
    out = _packed_attention(xp, Q, K, V, valid, _scale(scale, Q.shape[-1]), attention_bias, query.dtype)
    return _pack(xp, out, valid)


# -- decoding attention -------------------------------------------------------------------------

def _beam_gather(xp, cache, cache_indirection, beam_width, T):
    """Keys of each beam at each step from the beam that ``cache_indirection`` (B, beam, max) names."""
    BB, N, M, h = cache.shape
    ind = np.asarray(cache_indirection).astype(np.int64)
    rows = (np.arange(BB) // beam_width)[:, None] * beam_width + ind.reshape(BB, -1)[:, :T]  # (BB, T)
    if (ind < 0).any() or (ind >= beam_width).any():
        raise NodeError(f"cache_indirection names a beam outside 0..{beam_width - 1}")
    flat = xp.reshape(xp.permute_dims(cache[:, :, :T], (0, 2, 1, 3)), (BB * T, N, h))
    picked = xp.take(flat, xp.asarray((rows * T + np.arange(T)[None, :]).reshape(-1)), axis=0)
    return xp.permute_dims(xp.reshape(picked, (BB, T, N, h)), (0, 2, 1, 3))


def _decode(xp, Q, K_new, V_new, past_key, past_value, past_sequence_length, share, mask_index, attention_bias,
            beam_width, cache_indirection, filter_value, scale, dtype):
    """One decoding step: (output (B, 1, D), present_key, present_value). With ``share`` the past is a
    (B, N, max, h) buffer whose first ``past_sequence_length`` steps are valid, and the new key is
    written at that step; otherwise the new keys are appended."""
    ct = Q.dtype
    if past_key is None:
        K, V, presents = K_new, V_new, (K_new, V_new)
    elif share:
        P = int(np.asarray(past_sequence_length).reshape(-1)[0]) if past_sequence_length is not None else 0
        M = past_key.shape[2]
        if P + K_new.shape[2] > M:
            raise NodeError(f"past_sequence_length {P} leaves no room in the {M}-step cache buffer")

        def write(buf, new):
            buf = buf.astype(ct)
            return xp.concat([buf[:, :, :P], new, buf[:, :, P + new.shape[2]:]], axis=2)

        Kb, Vb = write(past_key, K_new), write(past_value, V_new)
        presents = (Kb, Vb)
        T = P + K_new.shape[2]
        K, V = Kb[:, :, :T], Vb[:, :, :T]
    else:
        K = xp.concat([past_key.astype(ct), K_new], axis=2)
        V = xp.concat([past_value.astype(ct), V_new], axis=2)
        presents = (K, V)
    if cache_indirection is not None and beam_width is not None and int(np.asarray(beam_width).reshape(-1)[0]) > 1:
        bw = int(np.asarray(beam_width).reshape(-1)[0])
        T = K.shape[2]
        # the past steps come from the beam the indirection names; the new step is each beam's own
        K = xp.concat([_beam_gather(xp, K[:, :, :T - 1], cache_indirection, bw, T - 1), K[:, :, T - 1:]], axis=2)
        V = xp.concat([_beam_gather(xp, V[:, :, :T - 1], cache_indirection, bw, T - 1), V[:, :, T - 1:]], axis=2)
    Bn, _, S, h = Q.shape
    T = K.shape[2]
    add = None
    if mask_index is not None:
        add = _additive(xp, _padding_mask(xp, mask_index[:, :T] if mask_index.ndim == 2 else mask_index, Bn, S, T),
                        filter_value, ct)
    if attention_bias is not None:
        ab = attention_bias.astype(ct)[..., :T]
        add = ab if add is None else add + ab
    out = _merge_heads(xp, _sdpa(xp, Q, K, V, scale, add)).astype(dtype)
    return out, presents[0].astype(dtype), presents[1].astype(dtype)


@op("DecoderMaskedMultiHeadAttention", domain=MS, since=1, host_inputs=(7, 8, 9), n_outputs=True)
def DecoderMaskedMultiHeadAttention(xp, query, key=None, value=None, mask_index=None, attention_bias=None,
                                    past_key=None, past_value=None, past_sequence_length=None, beam_width=None,
                                    cache_indirection=None, bias=None, *, num_heads, mask_filter_value=-10000.0,
                                    output_qk=0, past_present_share_buffer=0, scale=None, n_outputs=1):
    """One decoding step of MultiHeadAttention: self-attention with a key / value cache (shared
    buffer with ``past_present_share_buffer``, beam reordering by ``cache_indirection``), or
    cross-attention to per-head keys (B, N, L, h)."""
    if output_qk or n_outputs > 3:
        raise NodeError("output_qk is not supported")
    Q, K, V, cached = _mha_inputs(xp, query, key, value, bias, num_heads)
    filter_value = -10000.0 if mask_filter_value is None else float(mask_filter_value)
    sc = _scale(scale, Q.shape[-1])
    if cached:  # cross-attention: the keys are complete, no cache update
        out, Kp, Vp = _decode(xp, Q, K, V, None, None, None, 0, mask_index, attention_bias, None, None,
                              filter_value, sc, query.dtype)
    else:
        out, Kp, Vp = _decode(xp, Q, K, V, past_key, past_value, past_sequence_length, past_present_share_buffer,
                              mask_index, attention_bias, beam_width, cache_indirection, filter_value, sc,
                              query.dtype)
    return out if n_outputs == 1 else (out, Kp, Vp)


@op("DecoderMaskedSelfAttention", domain=MS, since=1, host_inputs=(6, 7, 8), n_outputs=True)
def DecoderMaskedSelfAttention(xp, input, weights, bias, mask_index=None, past=None, attention_bias=None,  # noqa: A002
                               past_sequence_length=None, beam_width=None, cache_indirection=None, *, num_heads,
                               do_rotary=0, mask_filter_value=-10000.0, past_present_share_buffer=0, scale=None,
                               n_outputs=1):
    """One decoding step of Attention (packed QKV projection) with its (2, B, N, max, h) ``past``
    buffer; ``present`` is the buffer with the new key and value written at ``past_sequence_length``."""
    if do_rotary:
        raise NodeError("do_rotary=1 is not supported")
    ct = accumulate_dtype(input)
    qkv = _matmul(xp, input.astype(ct), weights.astype(ct)) + bias.astype(ct)
    q, k, v = split_qkv(xp, qkv, weights.shape[1], None)
    N = num_heads
    Q, K, V = split_heads(xp, q, N), split_heads(xp, k, N), split_heads(xp, v, N)
    filter_value = -10000.0 if mask_filter_value is None else float(mask_filter_value)
    out, Kp, Vp = _decode(xp, Q, K, V, None if past is None else past[0], None if past is None else past[1],
                          past_sequence_length, past_present_share_buffer, mask_index, attention_bias, beam_width,
                          cache_indirection, filter_value, _scale(scale, Q.shape[-1]), input.dtype)
    return out if n_outputs == 1 else (out, xp.stack([Kp, Vp]))


# -- padding removal around packed attention (convert_to_packing_mode) --------------------------

@op("RemovePadding", domain=MS, since=1, host_inputs=(1,))
def RemovePadding(xp, input, sequence_token_count):  # noqa: A002
    """(B, S, H) right-padded input and each sequence's token count -> the tokens (T, H), token_offset
    (B, S: the padded positions of the tokens first, then those of the padding), the cumulative
    sequence lengths (B + 1) and the longest sequence (1)."""
    Bn, S = input.shape[:2]
    counts = np.asarray(sequence_token_count).reshape(-1).astype(np.int64)
    if counts.shape[0] != Bn or (counts < 0).any() or (counts > S).any():
        raise NodeError(f"sequence_token_count {counts.tolist()} does not fit batch {Bn} of length {S}")
    valid = np.arange(S)[None, :] < counts[:, None]
    flat = np.arange(Bn * S).reshape(Bn, S)
    offset = np.concatenate([flat[valid], flat[~valid]]).reshape(Bn, S).astype(np.int32)
    cumulative = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    longest = np.array([counts.max() if Bn else 0], np.int32)
    return _pack(xp, input, valid), xp.asarray(offset), xp.asarray(cumulative), xp.asarray(longest)


@op("RestorePadding", domain=MS, since=1, host_inputs=(1,))
def RestorePadding(xp, input, token_offset):  # noqa: A002
    """Tokens (T, H) back to (B, S, H) at the positions ``token_offset`` gives, zeros elsewhere."""
    Bn, S = token_offset.shape
    T = input.shape[0]
    offset = np.asarray(token_offset).reshape(-1).astype(np.int64)
    if sorted(offset.tolist()) != list(range(Bn * S)) or T > Bn * S:
        raise NodeError(f"token_offset is not a permutation of the {Bn * S} padded positions for {T} tokens")
    source = np.argsort(offset)  # padded position -> its index in token_offset
    valid = source < T
    out = xp.take(input, xp.asarray(np.where(valid, source, 0)), axis=0)
    keep = xp.asarray(valid.reshape((-1,) + (1,) * (input.ndim - 1)))
    out = xp.where(keep, out, xp.zeros((), dtype=input.dtype))
    return xp.reshape(out, (Bn, S) + tuple(input.shape[1:]))
