"""RelativePositionBias and GatedRelativePositionBias (gpuops/ops/contrib/encoder_decoder.py).

onnxruntime has CUDA kernels only, so the oracles are their formulas written out here: T5's bucket
of each (query, key) pair computed one pair at a time in float32 as the kernel does, and the gate of
the operator's documented torch expression. The tables are stored head-major, as the optimizer
writes them (the transposed embedding of the exported model).
"""

import numpy as np
import pytest

import gpuops
from gpuops.errors import GpuopsError

from .helpers import check, make_model, ms_node, rand


def _bucket(rel, num_buckets, max_distance, bidirectional):
    """One key's bucket relative to one query (key position minus query position)."""
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        if rel > 0:
            bucket = num_buckets
        rel = abs(rel)
    else:
        rel = max(-rel, 0)
    exact = num_buckets // 2
    if rel < exact:
        return bucket + rel
    f = np.float32
    large = exact + int(np.log(f(rel) / f(exact)) / np.log(f(max_distance) / f(exact)) * f(num_buckets - exact))
    return bucket + min(large, num_buckets - 1)


def _rpb_ref(table, S, max_distance, bidirectional):
    buckets, heads = table.shape
    by_head = table.reshape(heads, buckets)  # the data is head-major whatever the declared shape
    out = np.empty((1, heads, S, S), table.dtype)
    for s in range(S):
        for t in range(S):
            out[0, :, s, t] = by_head[:, _bucket(t - s, buckets, max_distance, bidirectional)]
    return out


@pytest.mark.parametrize("buckets,heads,S,max_distance,bidirectional,dtype", [
    (32, 2, 5, 128, 1, np.float32),  # T5's encoder: every distance exact
    (32, 3, 7, 128, 0, np.float32),  # T5's decoder
    (8, 2, 40, 16, 1, np.float32),  # logarithmic buckets and the clamp at max_distance
    (6, 2, 33, 20, 0, np.float16),
    (16, 1, 1, 128, 1, np.float32),
])
def test_relative_position_bias(buckets, heads, S, max_distance, bidirectional, dtype):
    feeds = {"table": rand(buckets, heads, dtype=dtype), "q": np.array(S, np.int64), "k": np.array([S], np.int64)}
    node = ms_node("RelativePositionBias", ["table", "q", "k"], ["y"], max_distance=max_distance,
                   is_bidirectional=bidirectional)
    check(node, feeds, ref=lambda table, q, k: [_rpb_ref(table, S, max_distance, bidirectional)], rtol=0, atol=0)


def _gated_ref(query_layer, query_bias, rel_pos, weight, bias, eco_a, num_heads):
    """The operator's documented expression (onnxruntime's contrib op schema)."""
    B, S, D = query_layer.shape
    q = (query_layer + query_bias).reshape(B, S, num_heads, D // num_heads).transpose(0, 2, 1, 3)
    ur = (q.astype(np.float64) @ weight + bias).reshape(B, num_heads, S, 2, -1).sum(-1)
    gate = 1 / (1 + np.exp(-ur))
    gate_u, gate_r = gate[..., :1], gate[..., 1:]
    return (gate_u * (gate_r * eco_a - 1.0) + 2.0) * rel_pos


def _gated_feeds(B, S, N, h, D, dtype=np.float32):
    return {"q": rand(B, S, N * h, dtype=dtype), "qb": rand(N * h, dtype=dtype), "rel": rand(1, N, S, S, dtype=dtype),
            "w": rand(h, D, dtype=dtype, scale=0.3), "b": rand(D, dtype=dtype), "eco": rand(1, N, 1, 1, dtype=dtype)}


@pytest.mark.parametrize("B,S,N,h,D,dtype,tol", [
    (2, 5, 2, 4, 8, np.float32, 1e-5), (1, 8, 3, 6, 2, np.float32, 1e-5), (3, 4, 2, 8, 32, np.float16, 2e-3)])
def test_gated_relative_position_bias(B, S, N, h, D, dtype, tol):
    feeds = _gated_feeds(B, S, N, h, D, dtype)
    node = ms_node("GatedRelativePositionBias", list(feeds), ["y"], num_heads=N)

    def ref(q, qb, rel, w, b, eco):
        return [_gated_ref(*(np.asarray(a, np.float64) for a in (q, qb, rel, w, b, eco)), N).astype(dtype)]
    check(node, feeds, ref=ref, rtol=tol, atol=tol)


def test_gated_relative_position_bias_packed_tokens():
    """Packed tokens with token_offset (as convert_to_packing_mode feeds it) equal the padded query
    with zero rows at the padding."""
    B, S, N, h, D = 3, 4, 2, 4, 6
    feeds = _gated_feeds(B, S, N, h, D)
    lengths = np.array([4, 1, 3])
    valid = np.arange(S)[None] < lengths[:, None]
    flat = np.arange(B * S).reshape(B, S)
    feeds["offset"] = np.concatenate([flat[valid], flat[~valid]]).reshape(B, S).astype(np.int32)
    padded = np.where(valid[..., None], feeds["q"], 0).astype(np.float32)
    feeds["q"] = feeds["q"][valid]  # (tokens, N h)
    node = ms_node("GatedRelativePositionBias", list(feeds), ["y"], num_heads=N)

    def ref(q, qb, rel, w, b, eco, offset):
        return [_gated_ref(padded, qb, rel, w, b, eco, N).astype(np.float32)]
    check(node, feeds, ref=ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("node,feeds,message", [
    (ms_node("RelativePositionBias", ["t", "q", "k"], ["y"], max_distance=128),
     {"t": rand(32, 2), "q": np.array(3, np.int64), "k": np.array(4, np.int64)}, "must equal key_length"),
    (ms_node("RelativePositionBias", ["t", "q", "k"], ["y"], max_distance=128, is_bidirectional=1),
     {"t": rand(2, 2), "q": np.array(3, np.int64), "k": np.array(3, np.int64)}, "num_buckets 2 at least 4"),
    (ms_node("GatedRelativePositionBias", ["q", "qb", "rel", "w", "b", "eco"], ["y"], num_heads=2),
     {**_gated_feeds(1, 3, 2, 4, 4), "rel": rand(1, 2, 3, 4)}, r"rel_pos has shape \(1, 2, 3, 4\)"),
    (ms_node("GatedRelativePositionBias", ["q", "qb", "rel", "w", "b", "eco"], ["y"], num_heads=2),
     {**_gated_feeds(1, 3, 2, 4, 3)}, "must be positive and even"),
])
def test_misuse_raises_a_clear_error(node, feeds, message):
    sess = gpuops.InferenceSession(make_model(node, feeds), device="cpu")
    with pytest.raises(GpuopsError, match=message):
        sess.run(None, feeds)
