"""Quantization: QuantizeLinear / DequantizeLinear (per-tensor, per-axis and blocked; 16/8/4/2-bit
integer, float8 and float4 targets), DynamicQuantizeLinear, MatMulInteger, QLinearMatMul,
ConvInteger and QLinearConv.

Quantizing rounds half to even (``xp.rint``) and saturates to the target range. Integer products
accumulate in int32, wrapping on overflow exactly as the spec allows ("the accumulation may overflow
if and only if in 32 bits"). The sub-byte and float8/float4 types are ml_dtypes dtypes: the generic
path handles them wherever the array namespace does (NumPy); CuPy has no such dtypes.

On the CPU (:mod:`gpuops.ops.cpu.quantize`), per-tensor 8-bit QuantizeLinear / DequantizeLinear and
DynamicQuantizeLinear run native kernels, and 8-bit QLinearConv, MatMulInteger and QLinearMatMul by
a constant weight run a native int8 GEMM (``cpu_kernels/qgemm.c``) over a packed copy of the weight
made once per session; the code here stays their fallback and oracle.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..dtypes import np_dtype
from ..errors import NodeError
from ..registry import op
from .conv import conv as _conv
from .elementwise import clamp

_INT32_RANGE = (-(2 ** 31), 2 ** 31 - 1)
_INT_RANGES = {
    np.dtype(t): (int(ml_dtypes.iinfo(t).min), int(ml_dtypes.iinfo(t).max))
    for t in (np.uint8, np.int8, np.uint16, np.int16, ml_dtypes.uint4, ml_dtypes.int4,
              ml_dtypes.uint2, ml_dtypes.int2)
}
_FLOAT8 = {np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
                                 ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz)}
# No inf/NaN encodings: the cast itself saturates, so ``saturate`` changes nothing for these.
_FLOAT_SMALL = {np.dtype(t) for t in (ml_dtypes.float4_e2m1fn, ml_dtypes.float6_e2m3fn,
                                      ml_dtypes.float6_e3m2fn)}
_COMPUTE_FLOATS = {np.dtype(t) for t in (np.float16, np.float32, np.float64, ml_dtypes.bfloat16)}


def _expand(xp, p, shape: tuple[int, ...], axis: int, block_size: int, what: str):
    """A scale or zero point, reshaped (per-axis) or replicated (blocked) to broadcast against ``shape``.
    ``axis`` matters only for per-axis and blocked parameters."""
    if p.ndim == 0:
        return p
    if p.size == 1 and (not block_size or p.ndim == 1):
        return xp.reshape(p, ())
    if not -len(shape) <= axis < len(shape):
        raise NodeError(f"axis {axis} is out of range for an input of rank {len(shape)}")
    axis %= len(shape)
    if not block_size:
        if p.ndim != 1 or p.shape[0] != shape[axis]:
            raise NodeError(f"{what} of shape {tuple(p.shape)} is neither a scalar nor a 1-D tensor of "
                            f"length {shape[axis]} (input shape {shape}, axis {axis})")
        dims = [1] * len(shape)
        dims[axis] = p.shape[0]
        return xp.reshape(p, tuple(dims))
    if block_size < 0:
        raise NodeError(f"block_size must be positive, got {block_size}")
    want = tuple(-(-d // block_size) if i == axis else d for i, d in enumerate(shape))
    if tuple(p.shape) != want:
        raise NodeError(f"blocked quantization: {what} has shape {tuple(p.shape)}, expected {want} "
                        f"for input shape {shape}, axis {axis}, block_size {block_size}")
    p = xp.repeat(p, block_size, axis=axis)
    return p[tuple(slice(0, shape[axis]) if i == axis else slice(None) for i in range(len(shape)))]


def saturate_int(xp, q, zero_point, dtype):
    """Integer-valued ``q`` (already rounded; a new array, which this overwrites) + zero point,
    clipped to the integer ``dtype``'s range; NaN gives the low end, as MLAS's max-then-min does (a
    plain cast of NaN is undefined, and CPU and GPU differ). In float32 (or float64): the sum is exact
    wherever it is not saturated."""
    lo, hi = _INT_RANGES[dtype]
    if q.dtype != np.float32 and q.dtype != np.float64:
        q = q.astype(np.float32)
    if not q.ndim:  # a NumPy scalar takes no out=
        q = xp.asarray(q)
    if zero_point is not None:  # q is the caller's own array: updated in place
        xp.add(q, zero_point if zero_point.dtype.kind in "iu" else zero_point.astype(q.dtype), out=q)
    return xp.fmin(xp.fmax(q, lo, out=q), hi, out=q).astype(dtype)


def quantize_per_tensor(xp, v, scale, zero_point, dtype):
    """saturate(round_half_even(v / scale) + zero_point) to the integer ``dtype``, in float32, with a
    scalar scale and zero point: the formula of onnxruntime's quantized contrib ops."""
    q = xp.rint(v.astype(np.float32) / xp.reshape(scale, ()).astype(np.float32))
    return saturate_int(xp, q, None if zero_point is None else xp.reshape(zero_point, ()), np.dtype(dtype))


def dequantize_per_tensor(xp, x, scale, zero_point):
    """(x - zero_point) * scale in float32, with a scalar scale and zero point."""
    v = x.astype(np.float32)
    if zero_point is not None:
        v = v - xp.reshape(zero_point, ()).astype(np.float32)
    return v * xp.reshape(scale, ()).astype(np.float32)


def _quantize(xp, x, y_scale, y_zero_point=None, *, axis=1, saturate=1, block_size=0, output_dtype=0,
              precision=0):
    if y_zero_point is not None:
        dtype = np.dtype(y_zero_point.dtype)
        if output_dtype and np_dtype(output_dtype) != dtype:
            raise NodeError(f"output_dtype {np_dtype(output_dtype)} differs from y_zero_point's type {dtype}")
    else:
        dtype = np_dtype(output_dtype) if output_dtype else np.dtype(np.uint8)
    if dtype not in _INT_RANGES and dtype not in _FLOAT8 and dtype not in _FLOAT_SMALL:
        raise NodeError(f"QuantizeLinear cannot quantize to {dtype}")
    shape = tuple(x.shape)
    scale = _expand(xp, y_scale, shape, axis, block_size, "y_scale")
    zp = None if y_zero_point is None else _expand(xp, y_zero_point, shape, axis, block_size, "y_zero_point")
    # The division runs in `precision`, else in the scale's type (float32 for non-float scales).
    if precision:
        ct = np_dtype(precision)
    else:
        ct = np.dtype(y_scale.dtype) if np.dtype(y_scale.dtype) in _COMPUTE_FLOATS else np.dtype(np.float32)
    q = (x if x.dtype == ct else x.astype(ct)) / (scale if scale.dtype == ct else scale.astype(ct))
    if dtype in _INT_RANGES:
        return saturate_int(xp, xp.rint(q), zp, dtype)
    q = q.astype(np.float32) if q.dtype != np.float64 else q
    if dtype in _FLOAT8:  # the zero point of a float8 type is zero by definition and is not added
        if saturate:
            info = ml_dtypes.finfo(dtype)
            q = clamp(xp, q, float(info.min), float(info.max))
        return q.astype(dtype)
    if zp is not None:
        q = q + zp.astype(q.dtype)
    return q.astype(dtype)


@op("QuantizeLinear", since=10)
def QuantizeLinear_10(xp, x, y_scale, y_zero_point=None):
    return _quantize(xp, x, y_scale, y_zero_point)


@op("QuantizeLinear", since=13)
def QuantizeLinear_13(xp, x, y_scale, y_zero_point=None, *, axis=1):
    return _quantize(xp, x, y_scale, y_zero_point, axis=axis)


@op("QuantizeLinear", since=19)
def QuantizeLinear_19(xp, x, y_scale, y_zero_point=None, *, axis=1, saturate=1):
    return _quantize(xp, x, y_scale, y_zero_point, axis=axis, saturate=saturate)


@op("QuantizeLinear", since=21)
def QuantizeLinear_21(xp, x, y_scale, y_zero_point=None, *, axis=1, saturate=1, block_size=0, output_dtype=0):
    return _quantize(xp, x, y_scale, y_zero_point, axis=axis, saturate=saturate, block_size=block_size,
                     output_dtype=output_dtype)


@op("QuantizeLinear", since=23)  # 24, 25 and 28 only add types
def QuantizeLinear_23(xp, x, y_scale, y_zero_point=None, *, axis=1, saturate=1, block_size=0, output_dtype=0,
                      precision=0):
    return _quantize(xp, x, y_scale, y_zero_point, axis=axis, saturate=saturate, block_size=block_size,
                     output_dtype=output_dtype, precision=precision)


def _dequantize(xp, x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    out = np_dtype(output_dtype) if output_dtype else x_scale.dtype
    shape = tuple(x.shape)
    xdt = np.dtype(x.dtype)
    # float8/float4 zero points are zero by definition; int32 input has none.
    if x_zero_point is not None and xdt not in _FLOAT8 and xdt not in _FLOAT_SMALL:
        if np.dtype(x_zero_point.dtype) != xdt:
            raise NodeError(f"x_zero_point has type {x_zero_point.dtype}, x has type {xdt}")
        zp = _expand(xp, x_zero_point, shape, axis, block_size, "x_zero_point")
        dx = x.astype(np.float32)
        xp.subtract(dx, zp if xdt.kind in "iu" else zp.astype(np.float32), out=dx)
    else:
        dx = x.astype(np.float32)
    scale = _expand(xp, x_scale, shape, axis, block_size, "x_scale")
    y = xp.multiply(dx, scale if scale.dtype == np.float32 else scale.astype(np.float32), out=dx)
    return y if out == np.float32 else y.astype(out)


@op("DequantizeLinear", since=10)
def DequantizeLinear_10(xp, x, x_scale, x_zero_point=None):
    return _dequantize(xp, x, x_scale, x_zero_point)


@op("DequantizeLinear", since=13)  # 19 only adds float8 types
def DequantizeLinear_13(xp, x, x_scale, x_zero_point=None, *, axis=1):
    return _dequantize(xp, x, x_scale, x_zero_point, axis=axis)


@op("DequantizeLinear", since=21)
def DequantizeLinear_21(xp, x, x_scale, x_zero_point=None, *, axis=1, block_size=0):
    return _dequantize(xp, x, x_scale, x_zero_point, axis=axis, block_size=block_size)


@op("DequantizeLinear", since=23)  # 24, 25 and 28 only add types
def DequantizeLinear_23(xp, x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    return _dequantize(xp, x, x_scale, x_zero_point, axis=axis, block_size=block_size, output_dtype=output_dtype)


@op("DynamicQuantizeLinear", since=11)
def DynamicQuantizeLinear(xp, x):
    """uint8 only. The range is widened to include 0; an all-zero input gets scale 1 (as onnxruntime;
    the spec's formula would divide by zero)."""
    x32 = x.astype(np.float32)
    if x32.size:
        hi = xp.maximum(xp.max(x32), 0.0)
        lo = xp.minimum(xp.min(x32), 0.0)
    else:
        hi = lo = xp.zeros((), dtype=np.float32)
    y_scale = xp.where(hi == lo, xp.ones_like(hi), (hi - lo) / 255.0)
    zp = xp.rint(clamp(xp, 0.0 - lo / y_scale, 0.0, 255.0))
    y = clamp(xp, xp.rint(x32 / y_scale) + zp, 0.0, 255.0).astype(np.uint8)
    return y, y_scale.astype(x.dtype), zp.astype(np.uint8)


# -- integer matmul ------------------------------------------------------------------------------


def _rowwise(xp, p, a):
    """A per-row parameter of ``a`` ([M] for a [.., M, K] input) as an [M, 1] column; others unchanged."""
    if p.ndim == 1 and p.shape[0] > 1 and a.ndim >= 2:
        if p.shape[0] != a.shape[-2]:
            raise NodeError(f"per-row parameter of length {p.shape[0]} does not match {a.shape[-2]} rows")
        return xp.reshape(p, (p.shape[0], 1))
    return p


def centered(xp, a, zero_point, rowwise: bool, dtype=np.int32):
    if zero_point is None:
        return a.astype(dtype)
    zp = _rowwise(xp, zero_point, a) if rowwise else zero_point
    c = a.astype(dtype)
    return xp.subtract(c, zp if zp.dtype.kind in "iu" else zp.astype(dtype), out=c)


def integer_product(xp, A, B, a_zero_point, b_zero_point, centred_b=None):
    """``((A - a_zero_point) @ (B - b_zero_point), bound)``: the exact product in the type
    :func:`exact_dtype` picks for its bound. ``centred_b(dtype)``: B's centred copy (a weight's, kept
    per session on the CPU), else made here."""
    bound = A.shape[-1] * max_centered(A.dtype, a_zero_point) * max_centered(B.dtype, b_zero_point)
    dtype = exact_dtype(bound)
    a = centered(xp, A, a_zero_point, True, dtype)
    b = centered(xp, B, b_zero_point, False, dtype) if centred_b is None else centred_b(dtype)
    return xp.matmul(a, b), bound


@op("MatMulInteger", since=10)
def MatMulInteger(xp, A, B, a_zero_point=None, b_zero_point=None):
    """int32 result of (A - a_zero_point) @ (B - b_zero_point); a_zero_point may be per row, b's per column."""
    return wrap_int32(*integer_product(xp, A, B, a_zero_point, b_zero_point))


def exact_dtype(bound: int):
    """The type of an exact integer GEMM whose partial sums stay below ``bound`` in magnitude: float32
    (BLAS) below ``2**24``, float64 (BLAS) below ``2**53``, else int64."""
    return np.float32 if bound < 2 ** 24 else np.float64 if bound < 2 ** 53 else np.int64


def wrap_int32(y, bound: int):
    """An exact integer GEMM result as int32, wrapping modulo ``2**32`` as int32 accumulation would."""
    return y.astype(np.int32) if bound < 2 ** 31 else y.astype(np.int64).astype(np.int32)


def max_centered(dtype, zero_point) -> int:
    """A bound of ``|x - zero_point|`` over the values of ``dtype``, from the type's range and the
    zero point (a NumPy array: read here; on a device, bounded by the type, since reading it would
    be a host sync)."""
    lo, hi = _INT_RANGES.get(dtype) or _INT32_RANGE
    if zero_point is None:
        return max(-lo, hi)
    if isinstance(zero_point, np.ndarray) and zero_point.size:
        if zero_point.size == 1:
            z = int(zero_point.item())
            return max(hi - z, z - lo)
        return max(hi - int(zero_point.min()), int(zero_point.max()) - lo)
    return hi - lo


def _requantize(xp, acc, multiplier, y_zero_point):
    """round(acc * multiplier) + y_zero_point, saturated to y_zero_point's type (float32 arithmetic).
    ``acc``: int32, or integers held exactly in a float32 array of the caller's (scaled in place)."""
    m = multiplier if multiplier.dtype == np.float32 else multiplier.astype(np.float32)
    if acc.dtype == np.float32 and acc.ndim:
        q = xp.rint(xp.multiply(acc, m, out=acc), out=acc)
    else:
        q = xp.rint(acc.astype(np.float32) * m)
    return saturate_int(xp, q, y_zero_point, y_zero_point.dtype)


@op("QLinearMatMul", since=10)  # 21 adds float16/bfloat16 scales and float8 types
def QLinearMatMul(xp, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    """Integer inputs: int32 accumulation, then requantization with a_scale * b_scale / y_scale
    (per-row a / per-column b scales allowed). float8 inputs or output: dequantize, matmul in
    float32, quantize (saturating)."""
    return qlinear_matmul(xp, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point)


def qlinear_matmul(xp, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point, centred_b=None):
    """QLinearMatMul; ``centred_b`` as for :func:`integer_product`."""
    if a.dtype in _INT_RANGES and b.dtype in _INT_RANGES and y_zero_point.dtype in _INT_RANGES:
        acc, bound = integer_product(xp, a, b, a_zero_point, b_zero_point, centred_b)
        if acc.dtype != np.float32:  # float32 holds it exactly: requantized as it is
            acc = wrap_int32(acc, bound)
        a_s = _rowwise(xp, a_scale, a)
        if a_s.dtype == b_scale.dtype == y_scale.dtype == np.float32:
            return _requantize(xp, acc, a_s * b_scale / y_scale, y_zero_point)
        f32 = [t.astype(np.float32) for t in (a_s, b_scale, y_scale)]
        return _requantize(xp, acc, f32[0] * f32[1] / f32[2], y_zero_point)

    def real(t, scale, zero_point, rowwise):
        v = t.astype(np.float32)
        if np.dtype(t.dtype) in _INT_RANGES:
            v = v - (_rowwise(xp, zero_point, t) if rowwise else zero_point).astype(np.float32)
        return v * (_rowwise(xp, scale, t) if rowwise else scale).astype(np.float32)

    y = xp.matmul(real(a, a_scale, a_zero_point, True), real(b, b_scale, b_zero_point, False))
    return _quantize(xp, y, y_scale.astype(np.float32), y_zero_point, axis=-1)


# -- integer convolution (im2col + int32 matmul from the conv module) ----------------------------


def _per_channel(xp, p, ndim: int, axis: int):
    """A scalar, or a 1-D per-output-channel parameter reshaped to broadcast along ``axis``."""
    if p.ndim == 0 or p.size == 1:
        return xp.reshape(p, ())
    if p.ndim != 1:
        raise NodeError(f"per-channel parameter must be a scalar or 1-D, got shape {tuple(p.shape)}")
    return xp.reshape(p, tuple(-1 if i == axis else 1 for i in range(ndim)))


def centred_weight(xp, w, w_zero_point, dtype):
    """The conv weight ``w - w_zero_point`` (per output channel) in ``dtype``."""
    W = w.astype(dtype)
    return W if w_zero_point is None else W - _per_channel(xp, w_zero_point, w.ndim, 0).astype(dtype)


def _conv_int32(xp, x, x_zero_point, w, w_zero_point, B=None, *, conv=_conv, centred_w=None, **attrs):
    """int32 convolution of (x - x_zero_point) with (w - w_zero_point); padding contributes 0. Exact
    through float BLAS where the sums fit (see :func:`exact_dtype`), wrapping like int32. ``conv``: the
    float convolution; ``centred_w(dtype)``: the centred weight (kept per session on the CPU), else
    :func:`centred_weight`."""
    k = int(np.prod(w.shape[1:]))  # terms per output: input channels per group times kernel taps
    bound = k * max_centered(x.dtype, x_zero_point) * max_centered(w.dtype, w_zero_point)
    dtype = exact_dtype(bound)
    X = x.astype(dtype)
    if x_zero_point is not None:
        X = X - xp.reshape(x_zero_point, ()).astype(dtype)
    W = centred_weight(xp, w, w_zero_point, dtype) if centred_w is None else centred_w(dtype)
    Y = wrap_int32(conv(xp, X, W, **attrs), bound)
    return Y if B is None else Y + xp.reshape(B.astype(np.int32), (1, -1) + (1,) * (Y.ndim - 2))


@op("ConvInteger", since=10)
def ConvInteger(xp, x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET", dilations=None, group=1,
                kernel_shape=None, pads=None, strides=None):
    return _conv_int32(xp, x, x_zero_point, w, w_zero_point, auto_pad=auto_pad, dilations=dilations,
                       group=group, kernel_shape=kernel_shape, pads=pads, strides=strides)


@op("QLinearConv", since=10)
def QLinearConv(xp, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None, *,
                auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    """The int32 accumulator (bias included) requantized with x_scale * w_scale / y_scale;
    w_scale / w_zero_point may be per output channel."""
    return qlinear_conv(xp, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B,
                        auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
                        strides=strides)


def qlinear_conv(xp, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None, *,
                 conv=_conv, centred_w=None, **attrs):
    """QLinearConv; ``conv`` and ``centred_w`` as for :func:`_conv_int32`."""
    acc = _conv_int32(xp, x, x_zero_point, w, w_zero_point, B, conv=conv, centred_w=centred_w, **attrs)
    w_s = _per_channel(xp, w_scale, acc.ndim, 1).astype(np.float32)
    multiplier = xp.reshape(x_scale, ()).astype(np.float32) * w_s / xp.reshape(y_scale, ()).astype(np.float32)
    return _requantize(xp, acc, multiplier, y_zero_point)
