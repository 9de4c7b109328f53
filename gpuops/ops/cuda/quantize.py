"""QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear on CUDA (``cuda_kernels/quantize.cu``).

One elementwise kernel per direction covers per-tensor, per-axis and blocked parameters (see the
index formula in quantize.cu). Targets: uint8/int8/uint16/int16, int4/uint4/int2/uint2 (one value
per byte, as ml_dtypes stores them) and the four float8 formats, with ``saturate``. Data and scales
in float32 or float16; anything else (bfloat16, float64, float4, int32 input...) and malformed
parameters go to the generic op, which also raises its errors. Device arrays of the sub-byte and
float8 types exist only where the array library has those dtypes (the CPU stand-in; not CuPy).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ...dtypes import np_dtype
from ...registry import op
from ._launch import contiguous, generic, i32, i64, launch

_F32, _F16 = np.dtype(np.float32), np.dtype(np.float16)
_CT = {_F32: "float", _F16: "__half"}

# dtype -> (storage dtype, C type, float8 kind, bits, qmin, qmax)
_TARGETS = {
    np.dtype(np.uint8): (np.uint8, "unsigned char", 0, 8, 0, 255),
    np.dtype(np.int8): (np.int8, "signed char", 0, 8, -128, 127),
    np.dtype(np.uint16): (np.uint16, "unsigned short", 0, 16, 0, 65535),
    np.dtype(np.int16): (np.int16, "short", 0, 16, -32768, 32767),
    np.dtype(ml_dtypes.uint4): (np.uint8, "unsigned char", 0, 4, 0, 15),
    np.dtype(ml_dtypes.int4): (np.int8, "signed char", 0, 4, -8, 7),
    np.dtype(ml_dtypes.uint2): (np.uint8, "unsigned char", 0, 2, 0, 3),
    np.dtype(ml_dtypes.int2): (np.int8, "signed char", 0, 2, -2, 1),
    np.dtype(ml_dtypes.float8_e4m3fn): (np.uint8, "unsigned char", 1, 8, 0, 0),
    np.dtype(ml_dtypes.float8_e4m3fnuz): (np.uint8, "unsigned char", 2, 8, 0, 0),
    np.dtype(ml_dtypes.float8_e5m2): (np.uint8, "unsigned char", 3, 8, 0, 0),
    np.dtype(ml_dtypes.float8_e5m2fnuz): (np.uint8, "unsigned char", 4, 8, 0, 0),
}
_SOURCES = {**_TARGETS, np.dtype(np.int32): (np.int32, "int", 0, 32, -(2**31), 2**31 - 1)}


def layout(shape: tuple[int, ...], p, axis: int, block_size: int):
    """(A, inner, B, so, sa, si): how element i finds its parameter (quantize.cu), or None when ``p``
    fits none of per-tensor / per-axis / blocked (the generic op then reports the error)."""
    if p.ndim == 0 or (p.size == 1 and (not block_size or p.ndim == 1)):
        return 1, 1, 1, 0, 0, 0
    if not -len(shape) <= axis < len(shape):
        return None
    axis %= len(shape)
    A, inner = shape[axis], math.prod(shape[axis + 1:])
    if not block_size:
        return (A, inner, 1, 0, 1, 0) if p.ndim == 1 and p.shape[0] == A else None
    if block_size < 0:
        return None
    nb = -(-A // block_size)
    want = tuple(nb if i == axis else d for i, d in enumerate(shape))
    return (A, inner, block_size, nb * inner, inner, 1) if tuple(p.shape) == want else None


def _storage(xp, a, dtype):
    """The array viewed as its storage integer type (a no-op for plain integer arrays)."""
    return a if a.dtype == dtype else a.view(dtype)


def quantize(xp, x, y_scale, y_zero_point=None, *, axis=1, saturate=1, block_size=0, output_dtype=0, precision=0):
    """The kernel path of QuantizeLinear; None when the generic op must run."""
    if y_zero_point is not None:
        target = np.dtype(y_zero_point.dtype)
        if output_dtype and np_dtype(output_dtype) != target:
            return None
    else:
        target = np_dtype(output_dtype) if output_dtype else np.dtype(np.uint8)
    ct = np_dtype(precision) if precision else np.dtype(y_scale.dtype)
    if target not in _TARGETS or np.dtype(x.dtype) not in _CT or ct not in _CT:
        return None
    shape = tuple(int(d) for d in x.shape)
    lay = layout(shape, y_scale, axis, block_size)
    if lay is None or (y_zero_point is not None and tuple(y_zero_point.shape) != tuple(y_scale.shape)):
        return None
    storage, qt, kind, bits, qmin, qmax = _TARGETS[target]
    y = xp.empty(shape, dtype=storage)
    if y.size:
        scale = contiguous(xp, y_scale.astype(ct) if y_scale.dtype != ct else y_scale)
        zp = None if (y_zero_point is None or kind) else contiguous(xp, _storage(xp, y_zero_point, storage))
        launch("quantize.cu", f"quantize_linear<{_CT[np.dtype(x.dtype)]}, {_CT[ct]}, {qt}>", x, y.size,
               (contiguous(xp, x), scale, zp, y, i64(y.size), *map(i64, lay), i32(kind), i32(bits), i32(qmin),
                i32(qmax), i32(1 if saturate else 0)))
    return y if target == storage else y.view(target)


def dequantize(xp, x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    """The kernel path of DequantizeLinear; None when the generic op must run."""
    source = np.dtype(x.dtype)
    out = np_dtype(output_dtype) if output_dtype else np.dtype(x_scale.dtype)
    if source not in _SOURCES or np.dtype(x_scale.dtype) not in _CT or out not in _CT:
        return None
    storage, qt, kind, bits, qmin, _ = _SOURCES[source]
    if x_zero_point is not None and not kind and np.dtype(x_zero_point.dtype) != source:
        return None
    shape = tuple(int(d) for d in x.shape)
    lay = layout(shape, x_scale, axis, block_size)
    if lay is None or (x_zero_point is not None and tuple(x_zero_point.shape) != tuple(x_scale.shape)):
        return None
    y = xp.empty(shape, dtype=out)
    if y.size:
        zp = None if (x_zero_point is None or kind) else contiguous(xp, _storage(xp, x_zero_point, storage))
        launch("quantize.cu", f"dequantize_linear<{qt}, {_CT[np.dtype(x_scale.dtype)]}, {_CT[out]}>", x, y.size,
               (contiguous(xp, _storage(xp, x, storage)), contiguous(xp, x_scale), zp, y, i64(y.size),
                *map(i64, lay), i32(kind), i32(bits), i32(1 if qmin < 0 else 0)))
    return y


def _q(since, xp, x, y_scale, y_zero_point, **kw):
    y = quantize(xp, x, y_scale, y_zero_point, **kw)
    return generic("QuantizeLinear", since)(xp, x, y_scale, y_zero_point, **kw) if y is None else y


@op("QuantizeLinear", since=10, device="cuda")
def QuantizeLinear_10(xp, x, y_scale, y_zero_point=None):
    return _q(10, xp, x, y_scale, y_zero_point)


@op("QuantizeLinear", since=13, device="cuda")
def QuantizeLinear_13(xp, x, y_scale, y_zero_point=None, *, axis=1):
    return _q(13, xp, x, y_scale, y_zero_point, axis=axis)


@op("QuantizeLinear", since=19, device="cuda")
def QuantizeLinear_19(xp, x, y_scale, y_zero_point=None, *, axis=1, saturate=1):
    return _q(19, xp, x, y_scale, y_zero_point, axis=axis, saturate=saturate)


@op("QuantizeLinear", since=21, device="cuda")
def QuantizeLinear_21(xp, x, y_scale, y_zero_point=None, *, axis=1, saturate=1, block_size=0, output_dtype=0):
    return _q(21, xp, x, y_scale, y_zero_point, axis=axis, saturate=saturate, block_size=block_size,
              output_dtype=output_dtype)


def _quantize_23(since: int):
    def QuantizeLinear_23(xp, x, y_scale, y_zero_point=None, *, axis=1, saturate=1, block_size=0, output_dtype=0,
                          precision=0):
        return _q(since, xp, x, y_scale, y_zero_point, axis=axis, saturate=saturate, block_size=block_size,
                  output_dtype=output_dtype, precision=precision)

    return QuantizeLinear_23


def _dq(since, xp, x, x_scale, x_zero_point, **kw):
    y = dequantize(xp, x, x_scale, x_zero_point, **kw)
    return generic("DequantizeLinear", since)(xp, x, x_scale, x_zero_point, **kw) if y is None else y


@op("DequantizeLinear", since=10, device="cuda")
def DequantizeLinear_10(xp, x, x_scale, x_zero_point=None):
    return _dq(10, xp, x, x_scale, x_zero_point)


def _dequantize_13(since: int):
    def DequantizeLinear_13(xp, x, x_scale, x_zero_point=None, *, axis=1):
        return _dq(since, xp, x, x_scale, x_zero_point, axis=axis)

    return DequantizeLinear_13


@op("DequantizeLinear", since=21, device="cuda")
def DequantizeLinear_21(xp, x, x_scale, x_zero_point=None, *, axis=1, block_size=0):
    return _dq(21, xp, x, x_scale, x_zero_point, axis=axis, block_size=block_size)


def _dequantize_23(since: int):
    def DequantizeLinear_23(xp, x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
        return _dq(since, xp, x, x_scale, x_zero_point, axis=axis, block_size=block_size, output_dtype=output_dtype)

    return DequantizeLinear_23


# Versions that only add types share the previous version's function; each is registered so that an
# override exists at every version the generic op may be registered at.
op("DequantizeLinear", since=13, device="cuda")(_dequantize_13(13))
op("DequantizeLinear", since=19, device="cuda")(_dequantize_13(19))
for _v in (23, 24, 25, 28):
    op("QuantizeLinear", since=_v, device="cuda")(_quantize_23(_v))
    op("DequantizeLinear", since=_v, device="cuda")(_dequantize_23(_v))


@op("DynamicQuantizeLinear", since=11, device="cuda")
def DynamicQuantizeLinear(xp, x):
    """Two kernels: a min/max reduction (shared memory + atomics), then scale, zero point and y."""
    if np.dtype(x.dtype) not in _CT:
        return generic("DynamicQuantizeLinear", 11)(xp, x)
    from ... import kernels

    t = _CT[np.dtype(x.dtype)]
    x = contiguous(xp, x)
    n = int(x.size)
    stats = xp.zeros((2,), dtype=np.uint32)
    y = xp.empty(tuple(x.shape), dtype=np.uint8)
    y_scale = xp.empty((), dtype=x.dtype)
    y_zp = xp.empty((), dtype=np.uint8)
    if n:
        launch("quantize.cu", f"minmax_reduce<{t}>", x, n, (x, i64(n), stats), block=kernels.DQ_BLOCK,
               exact_block=True)
    launch("quantize.cu", f"dynamic_quantize<{t}>", x, max(n, 1), (x, stats, y, y_scale, y_zp, i64(n)))
    return y, y_scale, y_zp
