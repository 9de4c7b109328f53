"""Quantized ops that onnxruntime's quantizers emit beyond the seed contrib spec: QGemm (QOperator
Gemm), QLinearSoftmax, QLinearWhere, QEmbedLayerNormalization (quantize_dynamic on an optimized
BERT), and the block-wise weight-only MatMulNBits and GatherBlockQuantized of the n-bit quantizer.

Rounding follows onnxruntime's CPU kernels: requantization in float32, round half to even, then the
zero point, saturated. QLinearSoftmax reproduces that kernel's fixed-point scheme: exponentials of
``(x - max(x) + shift) * x_scale`` (shift keeps the row sum in float32 range), an output multiplier of
``floor(1 / y_scale)``, the input zero point unused (softmax is shift-invariant).
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import NodeError
from ...registry import op
from ..indexing import check_bounds
from ..quantize import MatMulInteger as _matmul_integer
from ..quantize import dequantize_per_tensor, quantize_per_tensor, saturate_int
from .quantized import check_8bit, out_dtype, scalar_f32
from .transformer import EmbedLayerNormalization as _embed_layer_norm

MS = "com.microsoft"
_F32 = np.float32


# -- QGemm --------------------------------------------------------------------------------------

def _per_column(xp, p, n):
    if p.size == 1:
        return xp.reshape(p, ())
    if p.ndim != 1 or p.shape[0] != n:
        raise NodeError(f"a B parameter of shape {tuple(p.shape)} is neither per tensor nor per column ({n})")
    return p


@op("QGemm", domain=MS, since=1)
def QGemm(xp, A, a_scale, a_zero_point, B, b_scale, b_zero_point, C=None, y_scale=None, y_zero_point=None, *,
          alpha=1.0, transA=0, transB=0):
    """alpha * a_scale * b_scale * ((A - a_zp) @ (B - b_zp) + C), C an int32 bias in that scale.
    Float32 output without ``y_scale``; else requantized to y_zero_point's type (uint8 without one)."""
    return qgemm(xp, A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale, y_zero_point, alpha=alpha,
                 transA=transA, transB=transB)


def qgemm(xp, A, a_scale, a_zero_point, B, b_scale, b_zero_point, C=None, y_scale=None, y_zero_point=None, *,
          alpha=1.0, transA=0, transB=0, matmul_integer=None):
    """QGemm; ``matmul_integer(xp, a, b, a_zp, b_zp)``, when given, computes the integer product of A (as
    transposed) and B (as transposed), given B's zero point as the node has it (a device override's,
    which keeps B's centred copy per session)."""
    check_8bit(A, B)
    if A.ndim != 2 or B.ndim != 2:
        raise NodeError(f"A and B must be 2-D, got {tuple(A.shape)} and {tuple(B.shape)}")
    a = xp.swapaxes(A, 0, 1) if transA else A
    b = xp.swapaxes(B, 0, 1) if transB else B
    n = b.shape[1]
    if matmul_integer is not None:
        acc = matmul_integer(xp, a, b, xp.reshape(a_zero_point, ()), b_zero_point)
    else:
        acc = _matmul_integer(xp, a, b, xp.reshape(a_zero_point, ()), _per_column(xp, b_zero_point, n))
    if C is not None:
        acc = acc + C.astype(np.int32)
    multiplier = scalar_f32(xp, a_scale) * _per_column(xp, b_scale, n).astype(_F32) * _F32(alpha)
    if y_scale is None:
        return acc.astype(_F32) * multiplier
    dtype = np.dtype(np.uint8) if y_zero_point is None else np.dtype(y_zero_point.dtype)
    q = xp.rint(acc.astype(_F32) * (multiplier / scalar_f32(xp, y_scale)))
    return saturate_int(xp, q, None if y_zero_point is None else scalar_f32(xp, y_zero_point), dtype)


# -- QLinearSoftmax -----------------------------------------------------------------------------

@op("QLinearSoftmax", domain=MS, since=1)
def QLinearSoftmax(xp, X, X_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *, opset, axis=None):
    """Softmax of quantized X over ``axis`` (opset >= 13), or over the flattened dimensions from
    ``axis`` on (opset < 13, default axis 1), as onnxruntime's fixed-point CPU kernel."""
    check_8bit(X)
    rank = X.ndim
    ax = (1 if opset < 13 else -1) if axis is None else int(axis)
    if not -rank <= ax < rank:
        raise NodeError(f"axis {ax} is out of range for rank {rank}")
    ax %= rank
    axes = tuple(range(ax, rank)) if opset < 13 else (ax,)
    D = math.prod(X.shape[a] for a in axes)
    # onnxruntime's kernel: e = float32(exp((x - max + shift) * x_scale)) in float64, shift chosen so
    # that the D terms cannot overflow float32; y = rint(e * floor(1 / y_scale) / sum(e)) + y_zp
    xs = xp.reshape(X_scale, ()).astype(np.float64)
    headroom = math.log(float(np.float32(np.finfo(np.float32).max) / np.float32(D)))
    shift = max(0.0, headroom - 5.0) / xs
    x = X.astype(np.float64)
    e = xp.exp((x - xp.max(x, axis=axes, keepdims=True) + shift) * xs).astype(_F32)
    total = xp.sum(e, axis=axes, keepdims=True)
    multiplier = xp.floor(_F32(1.0) / scalar_f32(xp, y_scale))
    q = xp.rint(e * multiplier / total)
    # saturated, as onnxruntime 1.24+ does for int8 as well as uint8 (1.23 wraps 128 to -128 for int8)
    return saturate_int(xp, q, None if y_zero_point is None else xp.reshape(y_zero_point, ()), np.dtype(X.dtype))


# -- QLinearWhere -------------------------------------------------------------------------------

@op("QLinearWhere", domain=MS, since=1)
def QLinearWhere(xp, condition, X, x_scale, x_zero_point, Y, y_scale, y_zero_point, z_scale, z_zero_point):
    """where(condition, X, Y), each requantized to Z's parameters."""
    check_8bit(X, Y)
    dtype = out_dtype(X, z_zero_point)
    x = quantize_per_tensor(xp, dequantize_per_tensor(xp, X, x_scale, x_zero_point), z_scale, z_zero_point, dtype)
    y = quantize_per_tensor(xp, dequantize_per_tensor(xp, Y, y_scale, y_zero_point), z_scale, z_zero_point, dtype)
    return xp.where(condition, x, y)


# -- QEmbedLayerNormalization -------------------------------------------------------------------

@op("QEmbedLayerNormalization", domain=MS, since=1)
def QEmbedLayerNormalization(xp, input_ids, segment_ids, word_embedding_quant, position_embedding_quant,
                             segment_embedding, gamma_quant, beta_quant, mask, word_embedding_scale,
                             position_embedding_scale, segment_embedding_scale, gamma_scale, beta_scale,
                             word_embedding_zero_point, position_embedding_zero_point, segment_embedding_zero_point,
                             gamma_zero_point, beta_zero_point, *, epsilon=1e-12):
    """EmbedLayerNormalization on the dequantized (per-tensor 8-bit) embeddings, gamma and beta."""
    word = dequantize_per_tensor(xp, word_embedding_quant, word_embedding_scale, word_embedding_zero_point)
    pos = dequantize_per_tensor(xp, position_embedding_quant, position_embedding_scale, position_embedding_zero_point)
    seg = None
    if segment_embedding is not None:
        if segment_embedding_scale is None:
            raise NodeError("segment_embedding needs segment_embedding_scale")
        seg = dequantize_per_tensor(xp, segment_embedding, segment_embedding_scale, segment_embedding_zero_point)
    gamma = dequantize_per_tensor(xp, gamma_quant, gamma_scale, gamma_zero_point)
    beta = dequantize_per_tensor(xp, beta_quant, beta_scale, beta_zero_point)
    Y, mask_index, _ = _embed_layer_norm(xp, input_ids, segment_ids, word, pos, seg, gamma, beta, mask,
                                         epsilon=epsilon)
    return Y, mask_index


# -- block-wise n-bit weights -------------------------------------------------------------------

def _unpack_bits(xp, packed, bits, count):
    """Unsigned ``bits``-bit values packed little-end first in uint8 bytes (last axis) -> the first
    ``count`` values along that axis, as int32."""
    if bits == 8:
        return packed[..., :count].astype(np.int32)
    per = 8 // bits
    p = packed.astype(np.int32)[..., None]
    shifts = xp.asarray(np.arange(per, dtype=np.int32) * bits)
    vals = (p >> shifts) & ((1 << bits) - 1)
    return xp.reshape(vals, tuple(packed.shape[:-1]) + (packed.shape[-1] * per,))[..., :count]


@op("MatMulNBits", domain=MS, since=1)
def MatMulNBits(xp, A, B, scales, zero_points=None, g_idx=None, bias=None, *, K, N, block_size, bits=4,
                accuracy_level=0, weight_prepacked=0):
    """A @ dequantize(B)^T (+ bias): B (N, k_blocks, block_size * bits / 8) holds the weights packed
    along K, scales (N * k_blocks) one per block, zero points packed like B (uint8) or of the scales'
    type (default 2^(bits-1)); ``g_idx`` (K) names each row's block (act-order)."""
    if bits not in (2, 4, 8) or weight_prepacked:
        raise NodeError(f"bits={bits} (2, 4 or 8) with weight_prepacked={weight_prepacked} (0) is not supported")
    if block_size < 16 or block_size & (block_size - 1):
        raise NodeError(f"block_size {block_size} must be a power of 2 and at least 16")
    if A.shape[-1] != K:
        raise NodeError(f"A's last dimension {A.shape[-1]} != K={K}")
    k_blocks = -(-K // block_size)
    if tuple(B.shape) != (N, k_blocks, block_size * bits // 8):
        raise NodeError(f"B of shape {tuple(B.shape)} is not (N, k_blocks, block_size * bits / 8) = "
                        f"({N}, {k_blocks}, {block_size * bits // 8})")
    ct = np.float32
    q = _unpack_bits(xp, xp.reshape(B, (N, -1)), bits, K).astype(ct)  # (N, K)
    sc = xp.reshape(scales, (N, k_blocks)).astype(ct)
    if zero_points is None:
        zp = xp.full((N, k_blocks), float(1 << (bits - 1)), dtype=ct)
    elif np.dtype(zero_points.dtype) == np.uint8:
        zp = _unpack_bits(xp, xp.reshape(zero_points, (N, -1)), bits, k_blocks).astype(ct)
    else:
        zp = xp.reshape(zero_points, (N, k_blocks)).astype(ct)
    block = (xp.asarray(np.arange(K) // block_size) if g_idx is None else g_idx.astype(np.int64))
    W = (q - xp.take(zp, block, axis=1)) * xp.take(sc, block, axis=1)  # (N, K)
    Y = xp.matmul(A.astype(ct), xp.swapaxes(W, 0, 1))
    if bias is not None:
        Y = Y + bias.astype(ct)
    return Y.astype(A.dtype)


_INT4 = ("int4", "uint4")


@op("GatherBlockQuantized", domain=MS, since=1)
def GatherBlockQuantized(xp, data, indices, scales, zero_points=None, *, bits=4, block_size=128, gather_axis=0,
                         quantize_axis=1):
    """Gather(dequantize(data), indices, gather_axis): data holds ``bits``-bit values (int4 / uint4, or
    uint8 packing two 4-bit values along the last axis, or uint8 8-bit values), dequantized block-wise
    along ``quantize_axis`` with scales (and zero points, default 8 for packed uint8 4-bit, else 0)."""
    kind = np.dtype(data.dtype).name
    packed = kind == "uint8" and bits == 4
    if kind not in _INT4 + ("uint8",) or bits not in (4, 8) or (kind in _INT4 and bits != 4):
        raise NodeError(f"data of type {kind} with bits={bits} is not supported")
    rank = data.ndim
    ga, qa = gather_axis % rank, quantize_axis % rank
    if packed and qa != rank - 1:
        raise NodeError("packed uint8 data must be quantized along its last axis")
    n = int(data.shape[-1]) * (2 if packed else 1)

    def values(t):
        if packed:
            return _unpack_bits(xp, t, 4, n).astype(np.float32)
        return t.astype(np.float32)

    q = values(data)
    full = tuple(q.shape)
    if full[qa] % block_size and scales.shape[qa] != -(-full[qa] // block_size):
        raise NodeError(f"scales of shape {tuple(scales.shape)} do not fit blocks of {block_size} on axis {qa}")
    blocks = xp.asarray(np.arange(full[qa]) // block_size)
    sc = xp.take(scales.astype(np.float32), blocks, axis=qa)
    if zero_points is None:
        zp = 8.0 if packed else 0.0
    else:
        zq = zero_points
        if packed:
            zq = _unpack_bits(xp, zero_points, 4, scales.shape[-1])
        zp = xp.take(zq.astype(np.float32), blocks, axis=qa)
    deq = ((q - zp) * sc).astype(scales.dtype)
    idx = indices.astype(np.int64)
    size = full[ga]
    idx = xp.where(idx < 0, idx + size, idx)
    check_bounds(xp, idx, (size,), "indices")
    flat = xp.reshape(idx, (-1,))
    out = xp.take(deq, flat, axis=ga)
    return xp.reshape(out, full[:ga] + tuple(indices.shape) + full[ga + 1:])


# bitsandbytes' 4-bit code books (QLoRA): FP4 and NormalFloat4, indexed by the 4-bit code
_BNB4 = {
    0: np.array([0.0, 0.005208333333, 0.6666666667, 1.0, 0.3333333333, 0.5, 0.1666666667, 0.25,
                 -0.0, -0.005208333333, -0.6666666667, -1.0, -0.3333333333, -0.5, -0.1666666667, -0.25], np.float32),
    1: np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                 -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                 0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                 0.7229568362236023, 1.0], np.float32),
}


@op("MatMulBnb4", domain=MS, since=1)
def MatMulBnb4(xp, A, B, absmax, *, K, N, block_size, quant_type, training_mode=0, transB=1):
    """A @ W^T (or A @ W with transB=0) for W (N, K) stored flattened as 4-bit FP4 (quant_type 0) or NF4
    (1) codes, two per byte (the first in the high nibble), each block of ``block_size`` codes scaled by
    its ``absmax``."""
    if quant_type not in _BNB4:
        raise NodeError(f"quant_type must be 0 (FP4) or 1 (NF4), got {quant_type}")
    n = N * K
    if B.size != (n + 1) // 2 or absmax.size != -(-n // block_size):
        raise NodeError(f"B ({B.size} bytes) and absmax ({absmax.size}) do not hold {N} x {K} weights in blocks "
                        f"of {block_size}")
    b = xp.reshape(B, (-1, 1)).astype(np.int32)
    codes = xp.reshape(xp.concat([b >> 4, b & 15], axis=1), (-1,))[:n]
    book = xp.asarray(_BNB4[quant_type])
    scale = xp.take(xp.reshape(absmax, (-1,)).astype(np.float32), xp.asarray(np.arange(n) // block_size))
    W = xp.reshape(xp.take(book, codes) * scale, (N, K))
    Y = xp.matmul(A.astype(np.float32), xp.swapaxes(W, 0, 1) if transB else W)
    return Y.astype(A.dtype)
