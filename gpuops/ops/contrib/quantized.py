"""com.microsoft quantized ops: QLinearAdd / Mul / Concat / LeakyRelu / Sigmoid / AveragePool /
GlobalAveragePool / ReduceMean / Conv, QuantizeLinear / DequantizeLinear, DynamicQuantizeMatMul,
DynamicQuantizeLSTM, MatMulInteger16, MatMulIntegerToFloat, MulInteger and ReduceSumInteger.

Quantized values are 8-bit (uint8 / int8) with per-tensor scales and zero points unless stated.
Requantization follows onnxruntime's CPU kernels exactly: float32 arithmetic, round half to even,
saturate - QLinearAdd, QLinearMul and QLinearAveragePool round after adding the output zero point,
QLinearGlobalAveragePool scales the integer window sum, as those kernels do.
Elementwise ops whose result depends on one quantized input only (QLinearLeakyRelu, QLinearSigmoid)
build the 256-entry lookup table of ``quantize(f(dequantize(x)))`` on the device and gather from it,
as onnxruntime does. Pools and reductions dequantize, run the ai.onnx float op, and quantize.

DynamicQuantizeLSTM runs ai.onnx LSTM on the dequantized weights (W and R are stored transposed,
``[directions, input, 4 * hidden]``, with per-tensor or per-output-column scales); onnxruntime also
quantizes the activations dynamically, so its results differ from these by that rounding only.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ...errors import NodeError
from ...registry import op
from ..quantize import DequantizeLinear_21 as _dequantize_linear
from ..quantize import DynamicQuantizeLinear as _dynamic_quantize
from ..quantize import MatMulInteger as _matmul_integer
from ..quantize import QLinearConv as _qlinear_conv
from ..quantize import QuantizeLinear_21 as _quantize_linear
from ..quantize import dequantize_per_tensor, quantize_per_tensor, saturate_int
from ..reduce import reduce_axes
from ..windows import pool_geometry, window_counts, window_taps
from ..rnn import LSTM as _lstm

MS = "com.microsoft"
_F32 = np.float32


def scalar_f32(xp, t):
    return xp.reshape(t, ()).astype(_F32)


def _range(dtype):
    info = ml_dtypes.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


def check_8bit(*arrays):
    for a in arrays:
        if a is not None and np.dtype(a.dtype) not in (np.dtype(np.uint8), np.dtype(np.int8)):
            raise NodeError(f"expected a uint8 or int8 tensor, got {a.dtype}")


def out_dtype(A, zero_point):
    return np.dtype(zero_point.dtype) if zero_point is not None else np.dtype(A.dtype)


# -- elementwise binary -------------------------------------------------------------------------

@op("QLinearAdd", domain=MS, since=1)
def QLinearAdd(xp, A, A_scale, A_zero_point, B, B_scale, B_zero_point=None, C_scale=None, C_zero_point=None):
    """C = A_scale/C_scale (A - A_zp) + B_scale/C_scale (B - B_zp) + C_zp, as MLAS: two scale ratios,
    rounded (half to even) after the output zero point is added."""
    check_8bit(A, B)
    dtype = out_dtype(A, C_zero_point)
    sc = scalar_f32(xp, C_scale)
    ra, rb = scalar_f32(xp, A_scale) / sc, scalar_f32(xp, B_scale) / sc
    a = A.astype(_F32) - (0.0 if A_zero_point is None else scalar_f32(xp, A_zero_point))
    b = B.astype(_F32) - (0.0 if B_zero_point is None else scalar_f32(xp, B_zero_point))
    q = xp.rint(a * ra + b * rb + (0.0 if C_zero_point is None else scalar_f32(xp, C_zero_point)))
    return saturate_int(xp, q, None, dtype)


@op("QLinearMul", domain=MS, since=1)
def QLinearMul(xp, A, A_scale, A_zero_point, B, B_scale, B_zero_point=None, C_scale=None, C_zero_point=None):
    """C = (A - A_zp)(B - B_zp) A_scale B_scale / C_scale + C_zp, rounded after adding C_zp (as MLAS)."""
    check_8bit(A, B)
    dtype = out_dtype(A, C_zero_point)
    a = A.astype(_F32) - (0.0 if A_zero_point is None else scalar_f32(xp, A_zero_point))
    b = B.astype(_F32) - (0.0 if B_zero_point is None else scalar_f32(xp, B_zero_point))
    ratio = scalar_f32(xp, A_scale) * scalar_f32(xp, B_scale) / scalar_f32(xp, C_scale)
    q = xp.rint(a * b * ratio + (0.0 if C_zero_point is None else scalar_f32(xp, C_zero_point)))
    return saturate_int(xp, q, None, dtype)


@op("MulInteger", domain=MS, since=1)
def MulInteger(xp, A, A_zero_point=None, B=None, B_zero_point=None):
    """int32 (A - A_zero_point) * (B - B_zero_point), broadcasting."""
    check_8bit(A, B)
    a = A.astype(np.int32) - (0 if A_zero_point is None else xp.reshape(A_zero_point, ()).astype(np.int32))
    b = B.astype(np.int32) - (0 if B_zero_point is None else xp.reshape(B_zero_point, ()).astype(np.int32))
    return a * b


# -- lookup-table elementwise -------------------------------------------------------------------

def lookup_table(xp, X, X_scale, X_zero_point, Y_scale, Y_zero_point, fn):
    check_8bit(X)
    dtype = np.dtype(X.dtype)
    out = out_dtype(X, Y_zero_point)
    lo, hi = _range(dtype)
    codes = xp.arange(lo, hi + 1, dtype=np.int32).astype(dtype)
    table = quantize_per_tensor(xp, fn(dequantize_per_tensor(xp, codes, X_scale, X_zero_point)), Y_scale,
                                Y_zero_point, out)
    return xp.take(table, xp.reshape(X.astype(np.int32) - lo, (-1,))).reshape(X.shape)


@op("QLinearLeakyRelu", domain=MS, since=1)
def QLinearLeakyRelu(xp, X, X_scale, X_zero_point=None, Y_scale=None, Y_zero_point=None, *, alpha=0.01):
    return lookup_table(xp, X, X_scale, X_zero_point, Y_scale, Y_zero_point,
                   lambda v: xp.where(v >= 0, v, v * float(alpha)))


@op("QLinearSigmoid", domain=MS, since=1)
def QLinearSigmoid(xp, X, X_scale, X_zero_point=None, Y_scale=None, Y_zero_point=None):
    from ..activation import sigmoid

    return lookup_table(xp, X, X_scale, X_zero_point, Y_scale, Y_zero_point, lambda v: sigmoid(xp, v))


# -- concat -------------------------------------------------------------------------------------

@op("QLinearConcat", domain=MS, since=1)
def QLinearConcat(xp, Y_scale, Y_zero_point, *inputs, axis):
    """Each (tensor, scale, zero point) triple requantized to Y's parameters, then concatenated."""
    if not inputs or len(inputs) % 3:
        raise NodeError(f"QLinearConcat needs (tensor, scale, zero_point) triples after Y's parameters, "
                        f"got {len(inputs)} inputs")
    dtype = np.dtype(Y_zero_point.dtype)
    parts = [quantize_per_tensor(xp, dequantize_per_tensor(xp, x, s, z), Y_scale, Y_zero_point, dtype)
             for x, s, z in zip(inputs[0::3], inputs[1::3], inputs[2::3])]
    return xp.concat(parts, axis=axis)


# -- pools and reductions -----------------------------------------------------------------------

def _to_channels_first(xp, X, channels_last):
    return xp.moveaxis(X, -1, 1) if channels_last else X


def _from_channels_first(xp, Y, channels_last):
    return xp.moveaxis(Y, 1, -1) if channels_last else Y


@op("QLinearAveragePool", domain=MS, since=1)
def QLinearAveragePool(xp, X, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *, auto_pad="NOTSET",
                       ceil_mode=0, channels_last=0, count_include_pad=0, kernel_shape=None, pads=None, strides=None):
    """Dequantize, average (as onnxruntime: with ``count_include_pad`` every window divides by the
    kernel size, even where ``ceil_mode`` overhangs the padding), quantize as round(y / scale + zp)."""
    check_8bit(X)
    x = _to_channels_first(xp, dequantize_per_tensor(xp, X, x_scale, x_zero_point), channels_last)
    kernel, strides_, dil, pb, pe, out = pool_geometry(x, kernel_shape, strides, None, pads, auto_pad, ceil_mode)
    # each window's cells added in row-major order, as onnxruntime's loop adds them (padding adds
    # zeros): the same float32 roundings, so the same quantized results at rounding ties
    total = None
    for tap in window_taps(xp, x, kernel, strides_, dil, pb, pe, out):
        total = xp.asarray(tap, copy=True) if total is None else xp.add(total, tap, out=total)
    counts = float(math.prod(kernel)) if count_include_pad else window_counts(
        xp, x.shape[2:], kernel, strides_, dil, pb, pe, out, False, x.dtype)
    y = _from_channels_first(xp, total / counts, channels_last)
    dtype = out_dtype(X, y_zero_point)
    q = xp.rint(y / scalar_f32(xp, y_scale) + (0.0 if y_zero_point is None else scalar_f32(xp, y_zero_point)))
    return saturate_int(xp, q, None, dtype)


@op("QLinearGlobalAveragePool", domain=MS, since=1)
def QLinearGlobalAveragePool(xp, X, x_scale, x_zero_point, y_scale, y_zero_point, *, channels_last=0):
    check_8bit(X)
    if X.ndim < 3:
        raise NodeError(f"X must have rank >= 3, got shape {tuple(X.shape)}")
    axes = tuple(range(1, X.ndim - 1)) if channels_last else tuple(range(2, X.ndim))
    n = math.prod(X.shape[a] for a in axes)
    # as MLAS: the integer sum of (x - x_zp), times x_scale / (y_scale * n) in float32, rounded
    acc = xp.sum(X.astype(np.int32), axis=axes, keepdims=True)
    if x_zero_point is not None:
        acc = acc - xp.reshape(x_zero_point, ()).astype(np.int32) * n
    ratio = scalar_f32(xp, x_scale) / (scalar_f32(xp, y_scale) * np.float32(n))
    dtype = out_dtype(X, y_zero_point)
    q = xp.rint(acc.astype(_F32) * ratio)
    return saturate_int(xp, q, None if y_zero_point is None else scalar_f32(xp, y_zero_point), dtype)


@op("QLinearReduceMean", domain=MS, since=1)
def QLinearReduceMean(xp, data, data_scale, data_zero_point=None, reduced_scale=None, reduced_zero_point=None, *,
                      axes, keepdims):
    check_8bit(data)
    y = reduce_axes(xp, "Mean", dequantize_per_tensor(xp, data, data_scale, data_zero_point), axes, keepdims)
    return quantize_per_tensor(xp, y, reduced_scale, reduced_zero_point, out_dtype(data, reduced_zero_point))


@op("ReduceSumInteger", domain=MS, since=1)
def ReduceSumInteger(xp, data, *, axes, keepdims):
    """Sum of 8-bit integers: int32 for int8 input, uint32 for uint8 input (the spec's T2 rule)."""
    check_8bit(data)
    out = np.uint32 if np.dtype(data.dtype) == np.uint8 else np.int32
    return reduce_axes(xp, "Sum", data.astype(out), axes, keepdims)


# -- convolution --------------------------------------------------------------------------------

@op("QLinearConv", domain=MS, since=1)
def QLinearConv(xp, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None, *,
                auto_pad="NOTSET", channels_last=0, dilations=None, group=1, kernel_shape=None, pads=None,
                strides=None):
    """ai.onnx QLinearConv; with ``channels_last`` x and y are (N, D1.., C) (w stays (M, C/group, k..))."""
    return qlinear_conv(xp, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B,
                        auto_pad=auto_pad, channels_last=channels_last, dilations=dilations, group=group,
                        kernel_shape=kernel_shape, pads=pads, strides=strides)


def qlinear_conv(xp, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None, *,
                 channels_last=0, conv=_qlinear_conv, **attrs):
    """com.microsoft QLinearConv by ``conv`` (ai.onnx QLinearConv: a device override's own)."""
    y = conv(xp, _to_channels_first(xp, x, channels_last), x_scale, x_zero_point, w, w_scale, w_zero_point,
             y_scale, y_zero_point, B, **attrs)
    return _from_channels_first(xp, y, channels_last)


# -- QuantizeLinear / DequantizeLinear ----------------------------------------------------------

@op("QuantizeLinear", domain=MS, since=1)
def QuantizeLinear(xp, x, y_scale, y_zero_point=None, *, axis=1):
    return _quantize_linear(xp, x, y_scale, y_zero_point, axis=axis)


@op("DequantizeLinear", domain=MS, since=1)
def DequantizeLinear(xp, x, x_scale, x_zero_point=None, *, axis=1):
    return _dequantize_linear(xp, x, x_scale, x_zero_point, axis=axis)


# -- integer matmuls ----------------------------------------------------------------------------

@op("MatMulInteger16", domain=MS, since=1)
def MatMulInteger16(xp, A, B):
    """16-bit integer matmul accumulated in 32 bits (wrapping): uint32 when both are uint16, else int32."""
    kinds = {np.dtype(np.int16), np.dtype(np.uint16)}
    if np.dtype(A.dtype) not in kinds or np.dtype(B.dtype) not in kinds:
        raise NodeError(f"MatMulInteger16 takes int16/uint16 inputs, got {A.dtype} and {B.dtype}")
    both_unsigned = A.dtype == np.uint16 and B.dtype == np.uint16
    k = A.shape[-1]
    if k * 2.0 ** 32 < 2.0 ** 53:  # every partial sum is exact in float64: use the BLAS
        acc = xp.matmul(A.astype(np.float64), B.astype(np.float64)).astype(np.int64)
    else:
        acc = xp.matmul(A.astype(np.int64), B.astype(np.int64))
    wrapped = acc.astype(np.uint32) if both_unsigned else acc.astype(np.uint32).astype(np.int32)
    return wrapped


def _per_column(xp, s, n: int):
    """A scalar or a per-column (N,) parameter, shaped to broadcast over [.., M, N]."""
    if s.size == 1:
        return xp.reshape(s, ()).astype(_F32)
    if s.ndim != 1 or s.shape[0] != n:
        raise NodeError(f"scale of shape {tuple(s.shape)} is neither a scalar nor per column ({n})")
    return s.astype(_F32)


@op("MatMulIntegerToFloat", domain=MS, since=1)
def MatMulIntegerToFloat(xp, A, B, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
    """(A - a_zp) @ (B - b_zp) * a_scale * b_scale (+ bias), int32 accumulation."""
    return matmul_integer_to_float(xp, A, B, a_scale, b_scale, a_zero_point, b_zero_point, bias)


def matmul_integer_to_float(xp, A, B, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None,
                            matmul_integer=_matmul_integer):
    """MatMulIntegerToFloat by ``matmul_integer`` (ai.onnx MatMulInteger: a device override's own)."""
    check_8bit(A, B)
    acc = matmul_integer(xp, A, B, a_zero_point, b_zero_point)
    n = B.shape[-1]
    Y = acc.astype(_F32) * (_per_column(xp, a_scale, n) * _per_column(xp, b_scale, n))
    if bias is not None:
        Y = Y + bias.astype(_F32)
    return Y.astype(a_scale.dtype)


@op("DynamicQuantizeMatMul", domain=MS, since=1)
def DynamicQuantizeMatMul(xp, A, B, b_scale, b_zero_point=None, bias=None):
    """A quantized to uint8 with its own range (DynamicQuantizeLinear), then MatMulIntegerToFloat."""
    return dynamic_quantize_matmul(xp, A, B, b_scale, b_zero_point, bias)


def dynamic_quantize_matmul(xp, A, B, b_scale, b_zero_point=None, bias=None, matmul_integer=_matmul_integer):
    """DynamicQuantizeMatMul by ``matmul_integer`` (as :func:`matmul_integer_to_float`)."""
    a_q, a_scale, a_zp = _dynamic_quantize(xp, A)
    return matmul_integer_to_float(xp, a_q, B, a_scale, b_scale, a_zp, b_zero_point, bias, matmul_integer)


# -- DynamicQuantizeLSTM ------------------------------------------------------------------------

def dequantize_lstm_weights(xp, W, scale, zero_point):
    """[D, K, 4H] 8-bit weights with [D] or [D, 4H] parameters -> float [D, 4H, K] (ai.onnx layout)."""
    D = W.shape[0]
    shape = (D, 1, 1) if scale.size == D else (D, 1, W.shape[2])
    w = W.astype(_F32)
    if zero_point is not None:
        w = w - xp.reshape(zero_point, shape).astype(_F32)
    return xp.swapaxes(w * xp.reshape(scale, shape).astype(_F32), 1, 2)


@op("DynamicQuantizeLSTM", domain=MS, since=1)
def DynamicQuantizeLSTM(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None,
                        W_scale=None, W_zero_point=None, R_scale=None, R_zero_point=None, *, activation_alpha=None,
                        activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None,
                        input_forget=0):
    check_8bit(W, R)
    if W_scale is None or R_scale is None:
        raise NodeError("DynamicQuantizeLSTM needs W_scale and R_scale")
    Wf = dequantize_lstm_weights(xp, W, W_scale, W_zero_point)
    Rf = dequantize_lstm_weights(xp, R, R_scale, R_zero_point)
    return _lstm(xp, X, Wf, Rf, B, sequence_lens, initial_h, initial_c, P, activation_alpha=activation_alpha,
                 activation_beta=activation_beta, activations=activations, clip=clip, direction=direction,
                 hidden_size=hidden_size, input_forget=input_forget)
