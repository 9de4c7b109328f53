"""QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear on CUDA (``cuda_kernels/quantize.cu``).

One elementwise kernel per direction covers per-tensor, per-axis and blocked parameters (see the
index formula in quantize.cu). Targets: uint8/int8/uint16/int16, int4/uint4/int2/uint2 (one value
per byte, as ml_dtypes stores them) and the four float8 formats, with ``saturate``; data and scales
in float32 or float16. Anything else (bfloat16, float64, float4, ...) and malformed parameters go to
the generic op, which also raises its errors.

CuPy has no float8 / 4-bit / 2-bit dtypes, so such tensors live on the host (the session runs nodes
that read them on the host, with the generic op). The kernels work on their storage bytes:
:func:`quantize_to` / :func:`dequantize_from` take and return the storage arrays (uint8 / int8), and
a QuantizeLinear whose output type is host-only (set by ``output_dtype``) quantizes on the device and
hands back the bytes with one explicit copy, viewed as the target type.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ...device import to_host
from ...dtypes import device_supported, np_dtype
from ...registry import op
from ._launch import contiguous, generic, i32, i64, launch, on_device, optional

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


def storage_dtype(dtype) -> np.dtype:
    """The device dtype holding ``dtype``'s values (itself, or uint8/int8 for float8 and 4/2-bit)."""
    return np.dtype(_SOURCES[np.dtype(dtype)][0])


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


def quantize_to(xp, x, y_scale, zero_point, target, *, axis=1, saturate=1, block_size=0, precision=0):
    """Quantize device array ``x`` to ``target``, returning its storage array (``zero_point``, if
    any, also given as storage); None when the kernels do not cover the case."""
    target = np.dtype(target)
    ct = np_dtype(precision) if precision else np.dtype(y_scale.dtype)
    if target not in _TARGETS or np.dtype(x.dtype) not in _CT or ct not in _CT:
        return None
    storage, qt, kind, bits, qmin, qmax = _TARGETS[target]
    shape = tuple(int(d) for d in x.shape)
    lay = layout(shape, y_scale, axis, block_size)
    if lay is None or (zero_point is not None and (tuple(zero_point.shape) != tuple(y_scale.shape)
                                                   or zero_point.dtype != storage)):
        return None
    y = xp.empty(shape, dtype=storage)
    if y.size:
        scale = contiguous(xp, y_scale.astype(ct) if y_scale.dtype != ct else y_scale)
        zp = optional(xp, None if kind else zero_point)
        launch("quantize.cu", f"quantize_linear<{_CT[np.dtype(x.dtype)]}, {_CT[ct]}, {qt}>", x, y.size,
               (contiguous(xp, x), scale, zp, y, i64(y.size), *map(i64, lay), i32(kind), i32(bits), i32(qmin),
                i32(qmax), i32(1 if saturate else 0)))
    return y


def dequantize_from(xp, x, source, x_scale, zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    """Dequantize the storage array ``x`` of a ``source``-typed tensor (``zero_point`` likewise in
    storage); None when the kernels do not cover the case."""
    source = np.dtype(source)
    out = np_dtype(output_dtype) if output_dtype else np.dtype(x_scale.dtype)
    if source not in _SOURCES or np.dtype(x_scale.dtype) not in _CT or out not in _CT:
        return None
    storage, qt, kind, bits, qmin, _ = _SOURCES[source]
    shape = tuple(int(d) for d in x.shape)
    lay = layout(shape, x_scale, axis, block_size)
    if lay is None or x.dtype != storage or (zero_point is not None and (
            tuple(zero_point.shape) != tuple(x_scale.shape) or zero_point.dtype != storage)):
        return None
    y = xp.empty(shape, dtype=out)
    if y.size:
        zp = optional(xp, None if kind else zero_point)
        launch("quantize.cu", f"dequantize_linear<{qt}, {_CT[np.dtype(x_scale.dtype)]}, {_CT[out]}>", x, y.size,
               (contiguous(xp, x), contiguous(xp, x_scale), zp, y, i64(y.size), *map(i64, lay), i32(kind),
                i32(bits), i32(1 if qmin < 0 else 0)))
    return y


def quantize(xp, x, y_scale, y_zero_point=None, *, axis=1, saturate=1, block_size=0, output_dtype=0, precision=0):
    """The kernel path of QuantizeLinear; None when the generic op must run."""
    if not on_device(x, y_scale, y_zero_point):
        return None
    if y_zero_point is not None:
        target = np.dtype(y_zero_point.dtype)
        if output_dtype and np_dtype(output_dtype) != target:
            return None
    else:
        target = np_dtype(output_dtype) if output_dtype else np.dtype(np.uint8)
    y = quantize_to(xp, x, y_scale, y_zero_point, target, axis=axis, saturate=saturate, block_size=block_size,
                    precision=precision)
    if y is None or device_supported(target):
        return y
    return to_host(y).view(target)  # a host-only type: the bytes, copied once, viewed as the target


def dequantize(xp, x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    """The kernel path of DequantizeLinear; None when the generic op must run."""
    if not on_device(x, x_scale, x_zero_point):
        return None
    if x_zero_point is not None and x_zero_point.dtype != x.dtype:
        return None
    return dequantize_from(xp, x, x.dtype, x_scale, x_zero_point, axis=axis, block_size=block_size,
                           output_dtype=output_dtype)


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
    if not on_device(x) or np.dtype(x.dtype) not in _CT:
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


# -- integer matmul ------------------------------------------------------------------------------

_BYTES = {np.dtype(np.uint8): "unsigned char", np.dtype(np.int8): "signed char"}


def _batch_operand(xp, a, batch: tuple[int, ...]):
    """(contiguous operand, modulus): batch slice b of the product reads slice b % modulus of ``a``.
    That holds when a's batch dims are a suffix of the broadcast batch shape (after dropping leading
    1s); otherwise ``a`` is broadcast into a full copy."""
    own = tuple(int(d) for d in a.shape[:-2])
    while own and own[0] == 1:
        own = own[1:]
    if len(own) <= len(batch) and tuple(batch[len(batch) - len(own):]) == own:
        return contiguous(xp, a), max(1, math.prod(own))
    full = xp.broadcast_to(a, batch + tuple(a.shape[-2:]))
    return xp.ascontiguousarray(full), max(1, math.prod(batch))


def _zero_point_mode(zp, n: int, dtype) -> int | None:
    """0 for a scalar zero point, 1 for one per row/column (length n), None when unsupported."""
    if zp is None or (zp.size == 1 and zp.ndim <= 1):
        return 0 if zp is None or zp.dtype == dtype else None
    return 1 if zp.ndim == 1 and zp.size == n and zp.dtype == dtype else None


def int_matmul(xp, A, B, a_zero_point=None, b_zero_point=None):
    """int32 (A - a_zero_point) @ (B - b_zero_point) with the gemm_s32 kernel: A [.., M, K] and
    B [.., K, N] (uint8/int8, or both int32) with broadcast batch dims; a_zero_point a scalar or one
    per row, b_zero_point a scalar or one per column. None when the kernel does not cover the case."""
    from ... import kernels

    ta = _BYTES.get(np.dtype(A.dtype), "int" if A.dtype == np.int32 else None)
    tb = _BYTES.get(np.dtype(B.dtype), "int" if B.dtype == np.int32 else None)
    if ta is None or tb is None or (ta == "int") != (tb == "int") or A.ndim < 2 or B.ndim < 2:
        return None
    M, K = int(A.shape[-2]), int(A.shape[-1])
    N = int(B.shape[-1])
    a_mode, b_mode = _zero_point_mode(a_zero_point, M, A.dtype), _zero_point_mode(b_zero_point, N, B.dtype)
    if int(B.shape[-2]) != K or a_mode is None or b_mode is None:
        return None
    try:
        batch = tuple(int(d) for d in np.broadcast_shapes(tuple(A.shape[:-2]), tuple(B.shape[:-2])))
    except ValueError:
        return None
    if math.prod(batch) * M * N == 0 or K == 0:
        return xp.zeros(batch + (M, N), dtype=np.int32)
    A, a_mod = _batch_operand(xp, A, batch)
    B, b_mod = _batch_operand(xp, B, batch)
    C = xp.empty(batch + (M, N), dtype=np.int32)
    nb = max(1, math.prod(batch))
    backend, device = kernels.backend_of(C), kernels.device_of(C)
    tile = kernels.QG_TILE
    grid = (-(-N // tile), -(-M // tile), min(nb, backend.launch_limits.max_grid_z))
    fn = kernels.get_function("quantize.cu", f"gemm_s32<{ta}, {tb}>", backend, device)
    with backend.on_device(device):
        fn(grid, (tile, tile), (A, B, optional(xp, a_zero_point), optional(xp, b_zero_point), C, i32(M), i32(N), i32(K),
                                i64(nb), i64(a_mod), i64(b_mod), i32(a_mode), i32(b_mode)))
    return C


def _f32(xp, a):
    return contiguous(xp, a.astype(np.float32) if a.dtype != np.float32 else a)


def requantize(xp, acc, s1, s1_mode: int, s2, s2_mode: int, s3, zero_point, *, rows: int, cols: int, bias=None):
    """saturate(rint((acc + bias) * (s1 * s2 / s3)) + zero_point) with the requantize kernel, acc
    viewed as [.., rows, cols]; a scale's mode: 0 scalar, 1 per row, 2 per column; bias per row."""
    info = _TARGETS[np.dtype(zero_point.dtype)]
    y = xp.empty(tuple(acc.shape), dtype=zero_point.dtype)
    if y.size:
        launch("quantize.cu", f"requantize<{_BYTES[np.dtype(zero_point.dtype)]}>", acc, y.size,
               (contiguous(xp, acc), optional(xp, bias), _f32(xp, s1), _f32(xp, s2), _f32(xp, s3),
                contiguous(xp, zero_point), y, i64(y.size), i64(rows), i64(cols), i32(s1_mode), i32(s2_mode),
                i32(info[4]), i32(info[5])))
    return y


@op("MatMulInteger", since=10, device="cuda")
def MatMulInteger(xp, A, B, a_zero_point=None, b_zero_point=None):
    Y = None
    if on_device(A, B, a_zero_point, b_zero_point) and A.dtype in _BYTES and B.dtype in _BYTES:
        Y = int_matmul(xp, A, B, a_zero_point, b_zero_point)
    return generic("MatMulInteger", 10)(xp, A, B, a_zero_point, b_zero_point) if Y is None else Y


def _qlinear_matmul(since: int):
    def QLinearMatMul(xp, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
        args = (a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point)
        Y = None
        if on_device(*args) and all(t.dtype in _BYTES for t in (a, b, y_zero_point)) and a.ndim >= 2 and b.ndim >= 2:
            M, N = int(a.shape[-2]), int(b.shape[-1])
            a_mode = 0 if a_scale.size == 1 else (1 if a_scale.ndim == 1 and a_scale.size == M else None)
            b_mode = 0 if b_scale.size == 1 else (2 if b_scale.ndim == 1 and b_scale.size == N else None)
            if None not in (a_mode, b_mode) and y_scale.size == 1 and y_zero_point.size == 1:
                acc = int_matmul(xp, a, b, a_zero_point, b_zero_point)
                if acc is not None:
                    Y = requantize(xp, acc, a_scale, a_mode, b_scale, b_mode, y_scale, y_zero_point, rows=M, cols=N)
        return generic("QLinearMatMul", since)(xp, *args) if Y is None else Y

    return QLinearMatMul


for _v in (10, 21):
    op("QLinearMatMul", since=_v, device="cuda")(_qlinear_matmul(_v))
