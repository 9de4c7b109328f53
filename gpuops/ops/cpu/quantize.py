"""Quantization ops on the CPU (``@op(..., device="cpu")``; com.microsoft's QuantizeLinear,
DequantizeLinear, QLinearConv, MatMulIntegerToFloat and DynamicQuantizeMatMul through them):
QuantizeLinear / DequantizeLinear of float32 to and from 8 bits with one scale and zero point, and
DynamicQuantizeLinear of float32, by native kernels (``cpu_kernels/quantize.c``), as are
com.microsoft's QLinearAdd and QLinearGlobalAveragePool with per-tensor parameters. Products of 8-bit
values by a constant weight run the native int8 GEMM of ``cpu_kernels/qgemm.c`` (:mod:`.qgemm`):
2-D QLinearConv and ConvInteger, MatMulInteger, QLinearMatMul, MatMulIntegerToFloat (so
DynamicQuantizeMatMul) and QGemm, over the weight packed once per session, with a plan of the
kernel's arguments per input shape; the older GEMV kernel of ``cpu_kernels/quantize.c`` (few rows
by a large weight) and this package's float Conv (other integer convs) take the rest. A weight's
centred copy, its packs and the plans are kept on the plan step (:class:`QuantWeights`, the ops'
``prepare`` hook).
The generic ops of :mod:`gpuops.ops.quantize` stay their fallback and test oracle.

One module, past 500 lines: the CPU's quantized ops share the weights kept per session
(:class:`QuantWeights`) and their native paths' choices, read together.
"""

from __future__ import annotations

import ctypes
import math

import ml_dtypes
import numpy as np

from ... import native
from ...dtypes import np_dtype
from ...registry import op
from .. import quantize as _quantize
from ..contrib import quantized as _ms_quantized
from ..contrib import quantized_ort as _ms_quantized_ort
from ..contrib import transformer as _ms_transformer
from ..quantize import centered, integer_product, max_centered, exact_dtype, wrap_int32
from . import attention as _attention
from . import conv as _conv
from . import planned
from . import qgemm as _qgemm
from ._common import Kept, frozen, on_host

# Sizes from which the kernels beat NumPy's passes, after a call's 3 us (measured on one core:
# QuantizeLinear, six NumPy passes, 1.3x at 1 element, 1.5x at 512 and 3.9x at 2**15;
# DequantizeLinear, two passes, even at 512 elements and 1.4x at 2048).
_NATIVE_QUANTIZE_MIN, _NATIVE_DEQUANTIZE_MIN = 1, 1 << 9

_FLOAT32 = np.dtype(np.float32)
_UINT8 = np.dtype(np.uint8)
_BYTES = frozenset((np.dtype(np.uint8), np.dtype(np.int8)))
_SCALES = frozenset(np.dtype(t) for t in (np.float32, np.float16, ml_dtypes.bfloat16, np.float64))


def _one(p, dtypes, x) -> bool:
    """``p`` is a single NumPy value of one of ``dtypes`` (a per-tensor scale or zero point) that leaves
    x's shape as it is when broadcast."""
    return type(p) is np.ndarray and p.size == 1 and p.dtype in dtypes and p.ndim <= x.ndim


def _address(x) -> int:
    """The data address of a C-contiguous, non-empty array (read-only ones too)."""
    return native.address(x) if x.flags.writeable else x.ctypes.data


# -- QuantizeLinear / DequantizeLinear -----------------------------------------------------------

def _native_quantize(x, y_scale, y_zero_point, output_dtype, block_size, precision):
    """QuantizeLinear of float32 to 8 bits with one scale and zero point by the native kernel, else None."""
    if y_zero_point is not None:
        dtype = np.dtype(y_zero_point.dtype)
        if output_dtype and np_dtype(output_dtype) != dtype:
            return None  # the generic op says why
    else:
        dtype = np_dtype(output_dtype) if output_dtype else np.dtype(np.uint8)
    if not (type(x) is np.ndarray and x.dtype == _FLOAT32 and x.size >= _NATIVE_QUANTIZE_MIN and dtype in _BYTES
            and not block_size
            and _one(y_scale, (_FLOAT32,), x) and (y_zero_point is None or _one(y_zero_point, (dtype,), x))
            and precision in (0, 1)):
        return None
    fn = native.function("quantize_linear_f32")
    if fn is None:
        return None
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)  # (not 0-d: those are contiguous)
    y = np.empty(x.shape, dtype)
    native.call(fn, _address(x), x.size, y_scale.item(), 0 if y_zero_point is None else y_zero_point.item(),
                dtype == np.int8, native.address(y))
    return y


def _native_dequantize(x, x_scale, x_zero_point, output_dtype, block_size):
    """DequantizeLinear of 8 bits to float32 with one scale and zero point by the native kernel, else None."""
    out = np_dtype(output_dtype) if output_dtype else x_scale.dtype
    if not (type(x) is np.ndarray and x.dtype in _BYTES and x.size >= _NATIVE_DEQUANTIZE_MIN and out == _FLOAT32
            and not block_size
            and _one(x_scale, (_FLOAT32,), x) and (x_zero_point is None or _one(x_zero_point, (x.dtype,), x))):
        return None
    fn = native.function("dequantize_linear_f32")
    if fn is None:
        return None
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)  # (not 0-d: those are contiguous)
    y = np.empty(x.shape, np.float32)
    native.call(fn, _address(x), x.size, x.dtype == np.int8, 0 if x_zero_point is None else x_zero_point.item(),
                x_scale.item(), native.address(y))
    return y


def _q(xp, x, y_scale, y_zero_point=None, *, axis=1, saturate=1, block_size=0, output_dtype=0, precision=0):
    y = _native_quantize(x, y_scale, y_zero_point, output_dtype, block_size, precision)
    if y is not None:
        return y
    return _quantize._quantize(xp, x, y_scale, y_zero_point, axis=axis, saturate=saturate, block_size=block_size,
                               output_dtype=output_dtype, precision=precision)


@op("QuantizeLinear", since=10, device="cpu")
def QuantizeLinear_10(xp, x, y_scale, y_zero_point=None):
    return _q(xp, x, y_scale, y_zero_point)


@op("QuantizeLinear", since=13, device="cpu")
def QuantizeLinear_13(xp, x, y_scale, y_zero_point=None, *, axis=1):
    return _q(xp, x, y_scale, y_zero_point, axis=axis)


@op("QuantizeLinear", since=19, device="cpu")
def QuantizeLinear_19(xp, x, y_scale, y_zero_point=None, *, axis=1, saturate=1):
    return _q(xp, x, y_scale, y_zero_point, axis=axis, saturate=saturate)


@op("QuantizeLinear", since=21, device="cpu")
def QuantizeLinear_21(xp, x, y_scale, y_zero_point=None, *, axis=1, saturate=1, block_size=0, output_dtype=0):
    return _q(xp, x, y_scale, y_zero_point, axis=axis, saturate=saturate, block_size=block_size,
              output_dtype=output_dtype)


@op("QuantizeLinear", since=23, device="cpu")
def QuantizeLinear_23(xp, x, y_scale, y_zero_point=None, *, axis=1, saturate=1, block_size=0, output_dtype=0,
                      precision=0):
    return _q(xp, x, y_scale, y_zero_point, axis=axis, saturate=saturate, block_size=block_size,
              output_dtype=output_dtype, precision=precision)


def _dq(xp, x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    y = _native_dequantize(x, x_scale, x_zero_point, output_dtype, block_size)
    if y is not None:
        return y
    return _quantize._dequantize(xp, x, x_scale, x_zero_point, axis=axis, block_size=block_size,
                                 output_dtype=output_dtype)


@op("DequantizeLinear", since=10, device="cpu")
def DequantizeLinear_10(xp, x, x_scale, x_zero_point=None):
    return _dq(xp, x, x_scale, x_zero_point)


@op("DequantizeLinear", since=13, device="cpu")
def DequantizeLinear_13(xp, x, x_scale, x_zero_point=None, *, axis=1):
    return _dq(xp, x, x_scale, x_zero_point, axis=axis)


@op("DequantizeLinear", since=21, device="cpu")
def DequantizeLinear_21(xp, x, x_scale, x_zero_point=None, *, axis=1, block_size=0):
    return _dq(xp, x, x_scale, x_zero_point, axis=axis, block_size=block_size)


@op("DequantizeLinear", since=23, device="cpu")
def DequantizeLinear_23(xp, x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    return _dq(xp, x, x_scale, x_zero_point, axis=axis, block_size=block_size, output_dtype=output_dtype)


@op("DynamicQuantizeLinear", since=11, device="cpu")
def DynamicQuantizeLinear(xp, x):
    """float32 by the native kernel (one pass for the range, one to quantize); else the generic op."""
    if type(x) is np.ndarray and x.dtype == _FLOAT32 and x.size and native.enabled():
        fn = native.function("dynamic_quantize_u8")
        if fn is not None:
            if not x.flags.c_contiguous:
                x = np.ascontiguousarray(x)
            y, scale, zp = np.empty(x.shape, np.uint8), np.empty((), np.float32), np.empty((), np.uint8)
            status = fn(_address(x), x.size, native.address(scale), native.address(zp), native.address(y))
            if status == 0:
                return y, scale, zp
            if status != 2:  # 2: a NaN or an infinity, which the generic op handles
                raise MemoryError("native kernel dynamic_quantize_u8 failed")
    return _quantize.DynamicQuantizeLinear(xp, x)


# -- the weights ---------------------------------------------------------------------------------

class QuantWeights(Kept):
    """A constant weight B of an integer product and its zero point (None: absent, or not constant),
    with what is derived from them: the centred copy per accumulation type, the native kernel's pack,
    QLinearMatMul's kernel arguments per input shape (:attr:`plans`), a conv's centred weight with its
    :class:`.conv.ConvWeights`."""

    def __init__(self, B, zero_point):
        super().__init__()
        self.B, self.zero_point = B, zero_point
        self.plans: dict = {}
        self.constants: frozenset = frozenset()  # ids of the node's constant inputs (the prepare hook's)

    def fits(self, B, zero_point) -> bool:
        return B is self.B and zero_point is self.zero_point

    def centred(self, xp, dtype):
        """``B - zero_point`` (per column) in ``dtype``."""
        return self.get(("centred", np.dtype(dtype).str),
                        lambda: frozen(centered(xp, self.B, self.zero_point, False, dtype)))

    def pack(self):
        return self.get("pack", lambda: _pack(self.B))

    def conv_weights(self, xp, dtype) -> _conv.ConvWeights:
        """The conv weight ``w - w_zero_point`` (per output channel) in ``dtype``, with its conv's data."""
        return self.get(("conv", np.dtype(dtype).str), lambda: _conv.ConvWeights(
            frozen(_quantize.centred_weight(xp, self.B, self.zero_point, dtype)), None))


def _prepare(b: int, zero_point: int, eager=None):
    """A ``prepare`` hook: :class:`QuantWeights` of the constant input ``b`` (with its zero point, input
    ``zero_point``, when constant); ``eager(kept)`` makes at plan time what is known to be needed."""

    def prepare(constants, attrs):
        B, z = constants.get(b), constants.get(zero_point)
        if type(B) is not np.ndarray or not B.size:
            return None
        kept = QuantWeights(B, z if type(z) is np.ndarray else None)
        kept.constants = frozenset(id(v) for v in constants.values())
        kept.inputs = constants  # (holds them: their ids stay theirs)
        if eager is not None:
            eager(kept)
        return kept

    return prepare


def _kept(prepared, B, zero_point):
    return prepared if prepared is not None and prepared.fits(B, zero_point) else None


# -- the native 8-bit GEMM -----------------------------------------------------------------------

# The native 8-bit GEMM (cpu_kernels/quantize.c) reads the weight as bytes where float BLAS reads a
# float32 copy; it runs on one thread and pays a fixed cost per output. Measured: it beats float32
# BLAS up to 16 rows of A and K / 32 rows (a shallower product is mostly that fixed cost), and
# float64 BLAS (sums beyond float32's exact range) up to 64 rows; but only when the weight's pack
# is kept (see _keeps_pack): packing on every run costs more than the NumPy path saves.
_NATIVE_ROWS, _NATIVE_DEPTH_PER_ROW, _NATIVE_ROWS_F64 = 16, 32, 64
_PACK_MIN = 1 << 15  # elements of a weight worth its kept pack


class _QLinearArgs(ctypes.Structure):
    """cpu_kernels/quantize.c's ``struct qlinear_args``: qlinear_matmul_u8's arguments but A and Y."""

    _fields_ = [("pack", ctypes.c_void_p), ("M", ctypes.c_int64), ("za_rows", ctypes.c_void_p),
                ("za", ctypes.c_int64), ("zb_cols", ctypes.c_void_p), ("zb", ctypes.c_int64),
                ("signs", ctypes.c_int64), ("as_rows", ctypes.c_void_p), ("bs_cols", ctypes.c_void_p),
                ("as_", ctypes.c_float), ("bs", ctypes.c_float), ("ys", ctypes.c_float), ("y_zp", ctypes.c_int64)]


class _Pack(np.ndarray):
    """A weight in the native kernel's form (:func:`_pack`); ``address``: its data pointer, taken once."""


def _param(p, ndim: int, n: int | None, dtypes):
    """How the native kernel takes parameter ``p`` of an output of rank ``ndim``: ``(None, value)``
    for one value (0 for None), ``(array, 0)`` for ``n`` of them (per row or column; float32 if
    floating), or None when it cannot (the NumPy path then runs, and reports bad shapes)."""
    if p is None:
        return None, 0
    if type(p) is not np.ndarray or p.dtype not in dtypes:
        return None
    if p.size == 1 and p.ndim <= ndim:
        return None, p.item()
    if n is not None and p.ndim == 1 and p.shape[0] == n:
        return np.ascontiguousarray(p, np.float32 if p.dtype.kind not in "iu" else p.dtype), 0
    return None


def _keeps_pack(B, kept) -> bool:
    """Whether B's pack is kept across runs: a session's weight (``kept``), not a small one."""
    return kept is not None and B.size >= _PACK_MIN


def _pack(B):
    """Weight B (K, N) as the native kernel's int32 pack (cpu_kernels/quantize.c)."""
    K, N = B.shape
    B = np.ascontiguousarray(B)
    pack = np.empty(4 + N + -(-N * K // 4), np.int32).view(_Pack)
    pack.address = native.ptr(pack, np.int32)
    native.call(native.function("pack_weight_8"), native.ptr(B, B.dtype),
                int(B.dtype == np.int8), K, N, pack.address)
    return pack


def _native_gemm(name, A, B, a_zero_point, b_zero_point, kept):
    """``(kernel, the pack's address, the arguments after A's, output shape, arrays to keep alive)``
    for the native 8-bit GEMM of A (M rows, or a stack of rows with one zero point) by a 2-D weight B,
    or None where the NumPy path runs. The caller passes A's address (C-contiguous) itself."""
    if not (type(A) is np.ndarray and type(B) is np.ndarray and A.dtype in _BYTES and B.dtype in _BYTES
            and B.ndim == 2 and A.ndim >= 1 and A.shape[-1] == B.shape[0] and A.size and B.size):
        return None
    K, N = B.shape
    M = A.size // K
    za = _param(a_zero_point, A.ndim, M if A.ndim == 2 else None, (A.dtype,))
    zb = _param(b_zero_point, 2, N, (B.dtype,))
    if za is None or zb is None or max(K, N) >= 2 ** 31 or not _keeps_pack(B, kept) or not (
            M <= _NATIVE_ROWS and M * _NATIVE_DEPTH_PER_ROW <= K or M <= _NATIVE_ROWS_F64 and exact_dtype(
                K * max_centered(A.dtype, a_zero_point) * max_centered(B.dtype, b_zero_point)) is not np.float32):
        return None
    fn = native.function(name)
    if fn is None:
        return None
    pack = kept.pack() if kept is not None else _pack(B)
    rest = (M, None if za[0] is None else native.ptr(za[0], A.dtype), za[1],
            None if zb[0] is None else native.ptr(zb[0], B.dtype), zb[1])
    return fn, pack.address, rest, A.shape[:-1] + (N,), (za[0], zb[0], pack)


def _eager_pack(kept):
    """At plan time: the pack of a weight the native GEMM may take."""
    B = kept.B
    if native.enabled() and native.function("qgemm_u8") is not None:
        _matmul_pack(kept)
    if B.ndim == 2 and B.dtype in _BYTES and B.size >= _PACK_MIN and max(B.shape) < 2 ** 31 and native.enabled():
        if native.function("pack_weight_8") is not None:
            kept.pack()


# -- MatMulInteger -------------------------------------------------------------------------------

def _matmul_pack(kept):
    """The weight's pack for cpu_kernels/qgemm.c (None where that kernel does not take it)."""
    return kept.get("qgemm", lambda: _qgemm.matmul_pack(kept.B, kept.zero_point))


def _one_zero_point(z, A) -> bool:
    """``z`` is one zero point of A's type (a NumPy array; run-time values, such as
    DynamicQuantizeLinear's, change from call to call: the native kernel reads it on each)."""
    return type(z) is np.ndarray and z.size == 1 and z.dtype == A.dtype


@op("MatMulInteger", since=10, device="cpu", prepare=_prepare(1, 3, _eager_pack))
def MatMulInteger(xp, A, B, a_zero_point=None, b_zero_point=None, *, prepared=None):
    """int32 result of (A - a_zero_point) @ (B - b_zero_point); a_zero_point may be per row, b's per column.
    (Other arrays than NumPy's find no kept data and no native kernel: the generic op's code runs.)"""
    kept = prepared if prepared is not None and prepared.fits(B, b_zero_point) else None
    if kept is not None and type(A) is np.ndarray and native.enabled():
        plan = _qgemm.lookup(kept.plans, kept.constants, "int32", A, (b_zero_point,),
                             lambda: _qgemm.matmul_plan(_matmul_pack(kept), A, a_zero_point))
        if plan is not None and (a_zero_point is None or _one_zero_point(a_zero_point, A)):
            return _qgemm.run(plan, A, None if a_zero_point is None else _address(a_zero_point))
    gemm = _native_gemm("matmul_integer_u8", A, B, a_zero_point, b_zero_point, kept)
    if gemm is not None:
        fn, pack, rest, shape, _ = gemm
        A = np.ascontiguousarray(A)
        Y = np.empty(shape, np.int32)
        native.call(fn, pack, native.ptr(A, A.dtype), *rest, int(A.dtype == np.int8), native.ptr(Y, np.int32))
        return Y
    centred = None if kept is None else (lambda dtype: kept.centred(xp, dtype))
    return wrap_int32(*integer_product(xp, A, B, a_zero_point, b_zero_point, centred))


# -- QLinearMatMul -------------------------------------------------------------------------------

def _frozen(a) -> bool:
    """A NumPy array whose values cannot change: read-only, and not a view of a writeable array
    (a session's constants are read-only)."""
    return type(a) is np.ndarray and not a.flags.writeable and not (
        isinstance(a.base, np.ndarray) and a.base.flags.writeable)


def _native_qlinear(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point, kept):
    """QLinearMatMul by the native kernel (8-bit in and out), or None where the NumPy path runs. What
    depends only on the weight and the parameters (the checks, the pack, the kernel's arguments) is
    planned once per input shape, kept with the weight (``kept.plans``) while the parameters are
    constants too: a call with the very same objects reuses the plan."""
    if type(a) is not np.ndarray or y_zero_point is None or not native.enabled():
        return None
    plans = {} if kept is None else kept.plans
    hit = plans.get((a.shape, a.dtype))
    if (hit is not None and hit[0] is a_scale and hit[1] is a_zero_point and hit[2] is b_scale
            and hit[3] is b_zero_point and hit[4] is y_scale and hit[5] is y_zero_point):
        plan = hit[6]
    else:
        plan = _qlinear_plan(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point, kept)
        params = (a_scale, a_zero_point, b_scale, b_zero_point, y_scale, y_zero_point)
        if all(p is None or _frozen(p) for p in params) and len(plans) < Kept.MAX_ITEMS:
            plans[a.shape, a.dtype] = (*params, plan)
    if plan is None:
        return None
    fn, args, shape, y_dtype, _ = plan
    A = a if a.flags.c_contiguous else np.ascontiguousarray(a)  # the plan checked its type and size
    Y = np.empty(shape, y_dtype)
    native.call(fn, args, _address(A), native.address(Y))
    return Y


def _qlinear_plan(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point, kept):
    """``(kernel, address of its struct of arguments, Y's shape and type, what to keep alive)``, or
    None where the native kernel does not apply."""
    ndim = a.ndim or 1
    a_s = _param(a_scale, ndim, a.shape[0] if a.ndim == 2 else None, _SCALES)
    b_s = _param(b_scale, ndim, b.shape[-1] if b.ndim == 2 else None, _SCALES)
    y_s, y_z = _param(y_scale, ndim, None, _SCALES), _param(y_zero_point, ndim, None, _BYTES)
    if a_s is None or b_s is None or y_s is None or y_z is None:
        return None
    gemm = _native_gemm("qlinear_matmul_u8_planned", a, b, a_zero_point, b_zero_point, kept)
    if gemm is None:
        return None
    fn, pack, (M, za_rows, za, zb_cols, zb), shape, keep = gemm
    y_dtype = np.dtype(y_zero_point.dtype)
    args = _QLinearArgs(pack, M, za_rows, za, zb_cols, zb, (a.dtype == np.int8) + 2 * (y_dtype == np.int8),
                        None if a_s[0] is None else native.ptr(a_s[0]), None if b_s[0] is None else native.ptr(b_s[0]),
                        float(a_s[1]), float(b_s[1]), float(y_s[1]), y_z[1])
    return fn, ctypes.addressof(args), shape, y_dtype, keep + (a_s[0], b_s[0], args)


@op("QLinearMatMul", since=10, device="cpu", prepare=_prepare(3, 5, _eager_pack))
def QLinearMatMul(xp, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point, *,
                  prepared=None):
    """(Other arrays than NumPy's find no kept data and no native kernel: the generic op's code runs.)"""
    kept = prepared if prepared is not None and prepared.fits(b, b_zero_point) else None
    if kept is not None and type(a) is np.ndarray and native.enabled() and y_zero_point is not None:
        params = (a_scale, b_scale, b_zero_point, y_scale, y_zero_point)
        plan = _qgemm.lookup(kept.plans, kept.constants, "8-bit", a, params, lambda: _qgemm.matmul_plan(
            _matmul_pack(kept), a, a_zero_point, (a_scale, b_scale, y_scale, y_zero_point)))
        if plan is not None and (a_zero_point is None or _one_zero_point(a_zero_point, a)):
            return _qgemm.run(plan, a, None if a_zero_point is None else _address(a_zero_point))
    y = _native_qlinear(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point, kept)
    if y is not None:
        return y
    centred = None if kept is None else (lambda dtype: kept.centred(xp, dtype))
    return _quantize.qlinear_matmul(xp, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point,
                                    centred_b=centred)


# -- ConvInteger / QLinearConv -------------------------------------------------------------------

def _conv_parts(xp, kept):
    """(conv, centred_w) for :func:`gpuops.ops.quantize._conv_int32`: this package's conv, with the
    centred weight's :class:`.conv.ConvWeights` when ``kept``."""
    if kept is None:
        return _conv.conv, None
    chosen = []

    def centred_w(dtype):
        chosen.append(kept.conv_weights(xp, dtype))
        return chosen[0].W

    def conv(xp, X, W, **attrs):
        return _conv.conv(xp, X, W, kept=chosen[0] if chosen else None, **attrs)

    return conv, centred_w


_NO_PLANS, _NO_CONSTANTS = {}, frozenset()  # outside a session: no plan is kept


def _conv_pack(kept):
    return kept.get("qconv", lambda: _qgemm.conv_pack(kept.B))


def _eager_conv_pack(kept):
    """At plan time: the native conv's weight pack."""
    if native.enabled() and native.function("qconv_u8") is not None:
        _conv_pack(kept)


def _native_conv_integer(x, x_zero_point, w, w_zero_point, attrs, kept):
    """ConvInteger by the native kernel, its plan made (and kept, for a session's constants), or None."""
    if x_zero_point is not None and not (type(x_zero_point) is np.ndarray and x_zero_point.size == 1 and
                                         x_zero_point.dtype == x.dtype):
        return None
    plans, constants = (_NO_PLANS, _NO_CONSTANTS) if kept is None else (kept.plans, kept.constants)
    plan = _qgemm.lookup(plans, constants, "convi", x, (w, w_zero_point), lambda: _qgemm.conv_integer_plan(
        _qgemm.conv_pack(w) if kept is None else _conv_pack(kept), x, w, w_zero_point, attrs))
    return None if plan is None else _qgemm.run(plan, x, 0 if x_zero_point is None else x_zero_point.ctypes.data)


@op("ConvInteger", since=10, device="cpu", prepare=_prepare(1, 3, _eager_conv_pack))
def ConvInteger(xp, x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET", dilations=None, group=1,
                kernel_shape=None, pads=None, strides=None, prepared=None):
    """8-bit 2-D convs by the native kernel, as QLinearConv's (int32 out); others through this package's
    float Conv."""
    attrs = dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
                 strides=strides)
    if type(x) is np.ndarray and native.enabled():
        y = _native_conv_integer(x, x_zero_point, w, w_zero_point, attrs, _kept(prepared, w, w_zero_point))
        if y is not None:
            return y
    if not on_host(x, w, x_zero_point, w_zero_point):
        return _quantize.ConvInteger(xp, x, w, x_zero_point, w_zero_point, **attrs)
    conv, centred_w = _conv_parts(xp, _kept(prepared, w, w_zero_point))
    return _quantize._conv_int32(xp, x, x_zero_point, w, w_zero_point, conv=conv, centred_w=centred_w, **attrs)


def _native_qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B, attrs, kept):
    """QLinearConv by the native kernel, its plan made (and kept, for a session's constants), or None."""
    params = (x_scale, x_zero_point, w_scale, w_zero_point, y_scale, y_zero_point, B)
    plans, constants = (_NO_PLANS, _NO_CONSTANTS) if kept is None else (kept.plans, kept.constants)
    plan = _qgemm.lookup(plans, constants, "conv", x, params, lambda: _qgemm.conv_plan(
        _qgemm.conv_pack(w) if kept is None else _conv_pack(kept), x, x_scale, x_zero_point, w, w_scale,
        w_zero_point, y_scale, y_zero_point, B, attrs))
    return None if plan is None else _qgemm.run(plan, x)


@op("QLinearConv", since=10, device="cpu", prepare=_prepare(3, 5, _eager_conv_pack))
def QLinearConv(xp, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None, *,
                auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None,
                prepared=None):
    """8-bit 2-D convs by the native kernel (cpu_kernels/qgemm.c) over the weight's pack, kept per
    session with a plan per input shape; others through this package's float Conv."""
    if type(x) is np.ndarray:
        plan = None if prepared is None else prepared.plans.get(("conv", x.shape))
        if plan is not None:  # the run's common case first, with the fewest steps
            p = plan.params
            if (p[0] is x_scale and p[1] is x_zero_point and p[2] is w_scale and p[3] is w_zero_point
                    and p[4] is y_scale and p[5] is y_zero_point and p[6] is B and plan.x_dtype is x.dtype
                    and prepared.B is w and native.enabled()):
                return _qgemm.run(plan, x)
        if native.enabled():
            attrs = dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
                         strides=strides)
            y = _native_qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B,
                                     attrs, _kept(prepared, w, w_zero_point))
            if y is not None:
                return y
    args = (x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B)
    attrs = dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
                 strides=strides)
    if not on_host(*args):
        return _quantize.QLinearConv(xp, *args, **attrs)
    conv, centred_w = _conv_parts(xp, _kept(prepared, w, w_zero_point))
    return _quantize.qlinear_conv(xp, *args, conv=conv, centred_w=centred_w, **attrs)



# -- com.microsoft -------------------------------------------------------------------------------

MS = "com.microsoft"


@op("QuantizeLinear", domain=MS, since=1, device="cpu")
def QuantizeLinear_ms(xp, x, y_scale, y_zero_point=None, *, axis=1):
    return _q(xp, x, y_scale, y_zero_point, axis=axis)


@op("DequantizeLinear", domain=MS, since=1, device="cpu")
def DequantizeLinear_ms(xp, x, x_scale, x_zero_point=None, *, axis=1):
    return _dq(xp, x, x_scale, x_zero_point, axis=axis)


@op("QLinearConv", domain=MS, since=1, device="cpu", prepare=_prepare(3, 5))
def QLinearConv_ms(xp, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None, *,
                   auto_pad="NOTSET", channels_last=0, dilations=None, group=1, kernel_shape=None, pads=None,
                   strides=None, prepared=None):
    return _ms_quantized.qlinear_conv(
        xp, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B,
        channels_last=channels_last, conv=lambda *a, **k: QLinearConv(*a, **k, prepared=prepared), auto_pad=auto_pad,
        dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads, strides=strides)


def _zero(z, x=None) -> bool:
    """``z`` is None or one 8-bit zero point (that leaves x's shape as it is when broadcast)."""
    return z is None or (type(z) is np.ndarray and z.size == 1 and z.dtype in _BYTES
                         and (x is None or z.ndim <= x.ndim))


class _AddParams:
    """QLinearAdd's constant per-tensor parameters (its prepare hook's): the arrays, and the kernel's
    arguments made of them."""

    __slots__ = ("params", "values")

    def __init__(self, params, values):
        self.params, self.values = params, values


def _prepare_qlinear_add(constants, attrs):
    params = tuple(constants.get(i) for i in (1, 2, 4, 5, 6, 7))
    a_scale, a_zero, b_scale, b_zero, c_scale, c_zero = params
    if not (all(type(s) is np.ndarray and s.size == 1 and s.dtype == _FLOAT32 for s in (a_scale, b_scale, c_scale))
            and all(_zero(z) for z in (a_zero, b_zero, c_zero))):
        return None
    values = (a_scale.item(), 0 if a_zero is None else a_zero.item(), b_scale.item(),
              0 if b_zero is None else b_zero.item(), c_scale.item(), 0 if c_zero is None else c_zero.item())
    return _AddParams(params, values)


@op("QLinearAdd", domain=MS, since=1, device="cpu", prepare=_prepare_qlinear_add)
def QLinearAdd(xp, A, A_scale, A_zero_point, B, B_scale, B_zero_point=None, C_scale=None, C_zero_point=None, *,
               prepared=None):
    """Inputs of one shape (or one of them a single value) with per-tensor parameters by the native
    kernel; else the generic op."""
    if prepared is not None and type(A) is np.ndarray and type(B) is np.ndarray:  # a session's constants
        p = prepared.params
        if (p[0] is A_scale and p[1] is A_zero_point and p[2] is B_scale and p[3] is B_zero_point and p[4] is C_scale
                and p[5] is C_zero_point and A.shape == B.shape and A.dtype in _BYTES and B.dtype in _BYTES
                and A.size and native.enabled()):
            fn = native.function("qlinear_add_8")
            if fn is not None:
                dtype = A.dtype if C_zero_point is None else C_zero_point.dtype
                A, B = np.ascontiguousarray(A), np.ascontiguousarray(B)
                y = np.empty(A.shape, dtype)
                fn(_address(A), 1, _address(B), 1, y.size,
                   (A.dtype == np.int8) + 2 * (B.dtype == np.int8) + 4 * (dtype == np.int8), *prepared.values,
                   native.address(y))
                return y
    if (type(A) is np.ndarray and type(B) is np.ndarray and A.dtype in _BYTES and B.dtype in _BYTES and A.size
            and B.size and native.enabled()):
        shape = A.shape if A.shape == B.shape or (B.size == 1 and B.ndim <= A.ndim) else (
            B.shape if A.size == 1 and A.ndim <= B.ndim else None)
        if (shape is not None and _one(A_scale, (_FLOAT32,), A) and _one(B_scale, (_FLOAT32,), B)
                and C_scale is not None and _one(C_scale, (_FLOAT32,), A if shape is A.shape else B)
                and _zero(A_zero_point, A) and _zero(B_zero_point, B) and _zero(C_zero_point)):
            fn = native.function("qlinear_add_8")
            if fn is not None:
                dtype = A.dtype if C_zero_point is None else C_zero_point.dtype
                A, B = np.ascontiguousarray(A), np.ascontiguousarray(B)
                y = np.empty(shape, dtype)
                fn(_address(A), A.size > 1, _address(B), B.size > 1, y.size,
                   (A.dtype == np.int8) + 2 * (B.dtype == np.int8) + 4 * (dtype == np.int8),
                   A_scale.item(), 0 if A_zero_point is None else A_zero_point.item(), B_scale.item(),
                   0 if B_zero_point is None else B_zero_point.item(), C_scale.item(),
                   0 if C_zero_point is None else C_zero_point.item(), native.address(y))
                return y
    return _ms_quantized.QLinearAdd(xp, A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point)


@op("QLinearGlobalAveragePool", domain=MS, since=1, device="cpu")
def QLinearGlobalAveragePool(xp, X, x_scale, x_zero_point, y_scale, y_zero_point, *, channels_last=0):
    """Channels first with per-tensor parameters by the native kernel; else the generic op."""
    if (type(X) is np.ndarray and X.dtype in _BYTES and X.ndim >= 3 and X.size and not channels_last
            and native.enabled() and _one(x_scale, (_FLOAT32,), X) and _one(y_scale, (_FLOAT32,), X)
            and _zero(x_zero_point, X) and _zero(y_zero_point, X)
            and (x_zero_point is None or x_zero_point.dtype == X.dtype)):
        fn = native.function("qlinear_global_average_pool_8")
        if fn is not None:
            dtype = X.dtype if y_zero_point is None else y_zero_point.dtype
            X = np.ascontiguousarray(X)
            y = np.empty(X.shape[:2] + (1,) * (X.ndim - 2), dtype)
            n = X.size // y.size
            fn(_address(X), y.size, n, (X.dtype == np.int8) + 2 * (dtype == np.int8), x_scale.item(),
               0 if x_zero_point is None else x_zero_point.item(), y_scale.item(),
               0 if y_zero_point is None else y_zero_point.item(), native.address(y))
            return y
    return _ms_quantized.QLinearGlobalAveragePool(xp, X, x_scale, x_zero_point, y_scale, y_zero_point,
                                                  channels_last=channels_last)


def _matmul_integer(prepared):
    return lambda xp, A, B, a_zero_point, b_zero_point: MatMulInteger(xp, A, B, a_zero_point, b_zero_point,
                                                                      prepared=prepared)


@op("MatMulIntegerToFloat", domain=MS, since=1, device="cpu", prepare=_prepare(1, 5, _eager_pack))
def MatMulIntegerToFloat(xp, A, B, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None, *,
                         prepared=None):
    """By the native kernel (cpu_kernels/qgemm.c, its float32 epilogue) over the weight's pack, where
    A's scale and zero point are single values (they may change per call); else MatMulInteger's
    product, scaled by NumPy."""
    kept = prepared if prepared is not None and prepared.fits(B, b_zero_point) else None
    if (kept is not None and type(A) is np.ndarray and native.enabled() and type(a_scale) is np.ndarray
            and a_scale.size == 1 and a_scale.dtype == _FLOAT32):
        plan = _qgemm.lookup(kept.plans, kept.constants, "float", A, (b_scale, b_zero_point, bias),
                             lambda: _qgemm.matmul_plan(_matmul_pack(kept), A, a_zero_point, out_float=(b_scale, bias)))
        if plan is not None and (a_zero_point is None or _one_zero_point(a_zero_point, A)):
            return _qgemm.run(plan, A, None if a_zero_point is None else _address(a_zero_point), _address(a_scale))
    return _ms_quantized.matmul_integer_to_float(xp, A, B, a_scale, b_scale, a_zero_point, b_zero_point, bias,
                                                 _matmul_integer(prepared))


@op("DynamicQuantizeMatMul", domain=MS, since=1, device="cpu", prepare=_prepare(1, 3, _eager_pack))
def DynamicQuantizeMatMul(xp, A, B, b_scale, b_zero_point=None, bias=None, *, prepared=None):
    """DynamicQuantizeLinear, then MatMulIntegerToFloat (both the CPU's): for a float32 input of a shape
    whose product's plan MatMulIntegerToFloat kept (made for these very constants), the two kernels
    called here, A's scale and zero point in one scratch array."""
    if prepared is not None and type(A) is np.ndarray and A.dtype == _FLOAT32 and A.flags.c_contiguous \
            and prepared.B is B and prepared.zero_point is b_zero_point and A.size:
        plan = prepared.plans.get(("float", A.shape))
        quantize = native.function("dynamic_quantize_u8")
        if plan is not None and plan.x_dtype is _UINT8 and quantize is not None:
            p = plan.params
            if p[0] is b_scale and p[1] is b_zero_point and p[2] is bias:
                a_q, scratch = np.empty(A.shape, np.uint8), np.empty(8, np.uint8)  # scale (float32), zero point
                s, q = native.address(scratch), native.address(a_q)
                status = quantize(_address(A), A.size, s, s + 4, q)
                if status == 0:
                    y = np.empty(plan.shape, np.float32)
                    if plan.fn(plan.p, q, s + 4, s, native.address(y)):
                        raise MemoryError("native kernel could not allocate its scratch")
                    return y
                if status != 2:  # 2: a NaN or an infinity, which the generic op handles
                    raise MemoryError("native kernel dynamic_quantize_u8 failed")
    a_q, a_scale, a_zero_point = DynamicQuantizeLinear(xp, A)
    return MatMulIntegerToFloat(xp, a_q, B, a_scale, b_scale, a_zero_point, b_zero_point, bias, prepared=prepared)


def _prepare_qgemm(constants, attrs):
    """QGemm's weight as MatMulInteger takes it: B, or B transposed (``transB``) into a contiguous copy."""
    B, z = constants.get(3), constants.get(5)
    if type(B) is not np.ndarray or B.ndim != 2 or not B.size:
        return None
    kept = QuantWeights(np.ascontiguousarray(B.T) if attrs.get("transB") else B, z if type(z) is np.ndarray else None)
    kept.constants = frozenset(id(v) for v in constants.values())
    kept.inputs = constants
    kept.source = B
    _eager_pack(kept)
    return kept


@op("QGemm", domain=MS, since=1, device="cpu", prepare=_prepare_qgemm)
def QGemm(xp, A, a_scale, a_zero_point, B, b_scale, b_zero_point, C=None, y_scale=None, y_zero_point=None, *,
          alpha=1.0, transA=0, transB=0, prepared=None):
    kept = prepared if prepared is not None and prepared.source is B and prepared.zero_point is b_zero_point else None
    if kept is not None and type(A) is np.ndarray and not transA and native.enabled():
        params = (a_scale, a_zero_point, b_scale, b_zero_point, C, y_scale, y_zero_point)
        plan = _qgemm.lookup(kept.plans, kept.constants, "qgemm", A, params, lambda: _qgemm.qgemm_plan(
            _matmul_pack(kept), A, a_scale, a_zero_point, b_scale, C, y_scale, y_zero_point, alpha))
        if plan is not None:
            return _qgemm.run(plan, A, *plan.extra)
    matmul_integer = None if kept is None else (
        lambda xp, a, b, a_zp, b_zp: MatMulInteger(xp, a, kept.B, a_zp, kept.zero_point, prepared=kept))
    return _ms_quantized_ort.qgemm(xp, A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale, y_zero_point,
                                   alpha=alpha, transA=transA, transB=transB, matmul_integer=matmul_integer)


@op("QAttention", domain=MS, since=1, n_outputs=True, device="cpu", prepare=_prepare(1, 7, _eager_pack))
def QAttention(xp, input, weight, bias, input_scale, weight_scale, mask_index=None, input_zero_point=None,  # noqa: A002
               weight_zero_point=None, past=None, *, num_heads, unidirectional=0, scale=None,
               mask_filter_value=-10000.0, do_rotary=0, past_present_share_buffer=0, n_outputs=1, prepared=None):
    """The projection as MatMulIntegerToFloat's (the weight's pack kept per session), then the heads as
    Attention's native kernel; else (other forms, float16 bias) the generic op."""
    if (n_outputs <= 2 and not do_rotary and not past_present_share_buffer and type(input) is np.ndarray
            and input.ndim == 3 and type(bias) is np.ndarray and bias.dtype == _FLOAT32 and bias.ndim == 1
            and type(weight) is np.ndarray and weight.ndim == 2 and bias.shape[0] == weight.shape[1]
            and native.enabled()
            and _attention.heads(weight.shape[1], num_heads, past, n_outputs > 1) is not None):
        qkv = MatMulIntegerToFloat(xp, input, weight, input_scale, weight_scale, input_zero_point, weight_zero_point,
                                   bias, prepared=prepared)
        got = _attention.attend(qkv, past, mask_index, num_heads, unidirectional, None, scale, mask_filter_value,
                                n_outputs > 1)
        if got is not None:
            return got[0] if n_outputs == 1 else got
    return _ms_transformer.qattention(
        xp, input, weight, bias, input_scale, weight_scale, mask_index, input_zero_point, weight_zero_point, past,
        num_heads=num_heads, unidirectional=unidirectional, scale=scale, mask_filter_value=mask_filter_value,
        do_rotary=do_rotary, past_present_share_buffer=past_present_share_buffer, n_outputs=n_outputs,
        matmul_integer=_matmul_integer(prepared))


# -- native programs (gpuops.onnx.programs): the 8-bit kernels above, as the ops call them -----------------


def _bytes_operand(x) -> bool:
    return type(x) is planned.Operand and x.dtype in _BYTES and bool(x.ndim) and bool(math.prod(x.shape))


def _kept_plan(kept, tag: str, x, params):
    """The plan the op made for ``x``'s shape with these very parameter inputs (its recording run's), or None."""
    plan = None if kept is None else kept.plans.get((tag, x.shape))
    if plan is None or plan.x_dtype != x.dtype or len(plan.params) != len(params) or any(
            a is not b for a, b in zip(plan.params, params)):
        return None
    return plan


@planned.planned("QLinearConv")
def _qlinear_conv_step(step, operands):
    x, kept = operands[0], step.prepared
    B = operands[8] if len(operands) > 8 else None
    if not _bytes_operand(x) or kept is None or kept.B is not operands[3]:
        return None
    plan = _kept_plan(kept, "conv", x, tuple(operands[i] for i in (1, 2, 4, 5, 6, 7)) + (B,))
    fn = planned.kernel("qconv_planned_u8")
    if plan is None or fn is None:
        return None
    return planned.NativeStep(plan.shape, (planned.Call(fn, plan.p, 0),), holds=plan, dtype=plan.dtype)


@planned.planned("ConvInteger")
def _conv_integer_step(step, operands):
    x, kept = operands[0], step.prepared
    zx, w_zero_point = (operands[i] if len(operands) > i else None for i in (2, 3))
    if not _bytes_operand(x) or kept is None or kept.B is not operands[1]:
        return None
    plan = _kept_plan(kept, "convi", x, (operands[1], w_zero_point))
    fn = planned.kernel("qconv_i32")
    if plan is None or fn is None:
        return None
    if type(zx) is planned.Operand:  # read on each call
        if zx.dtype != x.dtype or math.prod(zx.shape) != 1:
            return None
        return planned.NativeStep(plan.shape, (planned.Call(fn, plan.p, 0, 2),), holds=plan, dtype=plan.dtype)
    if zx is not None and not (type(zx) is np.ndarray and zx.size == 1 and zx.dtype == x.dtype):
        return None
    p = plan.p if zx is None else _qgemm.with_x_zero_point(plan, zx)
    return planned.NativeStep(plan.shape, (planned.Call(fn, p, 0),), holds=(p, plan), dtype=plan.dtype)


@planned.planned("QGemm", MS)
def _qgemm_step(step, operands):
    A, kept = operands[0], step.prepared
    if not _bytes_operand(A) or kept is None or kept.source is not operands[3] or kept.zero_point is not operands[5]:
        return None
    params = tuple(operands[i] if len(operands) > i else None for i in (1, 2, 4, 5, 6, 7, 8))
    plan = _kept_plan(kept, "qgemm", A, params)
    fn = planned.kernel("qgemm_planned_8")
    if plan is None or fn is None:
        return None
    q = planned.params(plan.p, *plan.extra, *((0,) * (3 - len(plan.extra))))
    return planned.NativeStep(plan.shape, (planned.Call(fn, q, 0),), holds=(q, plan), dtype=plan.dtype)


@planned.planned("QLinearMatMul")
def _qlinear_matmul_step(step, operands):
    """The op's 8-bit product over the plan its recording run kept for A's shape and these very constants
    (:func:`QLinearMatMul`), A's zero point a constant."""
    a, kept = operands[0], step.prepared
    za = operands[2] if len(operands) > 2 else None
    if not _bytes_operand(a) or kept is None or not kept.fits(operands[3], operands[5]) or \
            (za is not None and not _one_zero_point(za, a)):
        return None
    plan = _kept_plan(kept, "8-bit", a, tuple(operands[i] for i in (1, 4, 5, 6, 7)))
    fn = planned.kernel("qgemm_planned_8")
    if plan is None or fn is None:
        return None
    q = planned.params(plan.p, 0 if za is None else za.ctypes.data, 0)
    return planned.NativeStep(plan.shape, (planned.Call(fn, q, 0),), holds=(q, plan, za), dtype=plan.dtype)


@planned.planned("DynamicQuantizeMatMul", MS)
def _dynamic_quantize_matmul_step(step, operands):
    """The op's two kernels in one call, over the plan its recording run kept for A's shape and these very
    constants (:func:`DynamicQuantizeMatMul`)."""
    A, kept = operands[0], step.prepared
    b_scale, b_zero_point, bias = (operands[i] if len(operands) > i else None for i in (2, 3, 4))
    if not planned.is_f32(A) or not math.prod(A.shape) or kept is None or not kept.fits(operands[1], b_zero_point):
        return None
    plan = kept.plans.get(("float", tuple(A.shape)))  # made for A quantized: uint8 of A's shape
    fn, quantize = planned.kernel("dynamic_quantize_matmul_planned_f32"), planned.kernel("dynamic_quantize_u8")
    if plan is None or plan.x_dtype is not _UINT8 or fn is None or quantize is None or any(
            a is not b for a, b in zip(plan.params, (b_scale, b_zero_point, bias))):
        return None
    q = planned.params(plan.p, math.prod(A.shape), planned.address(quantize))
    return planned.NativeStep(plan.shape, (planned.Call(fn, q, 0),), holds=(q, plan))


@planned.planned("DynamicQuantizeLinear")
def _dynamic_quantize_linear_step(step, operands):
    """The op's kernel in two calls: the range into the scale and zero point (outputs 1 and 2), then x
    quantized with them (a NaN or an infinity runs the node, as the op does)."""
    x = operands[0]
    scan, apply = planned.kernel("dynamic_range_planned_u8"), planned.kernel("dynamic_apply_planned_u8")
    if scan is None or apply is None or not planned.is_f32(x) or not math.prod(x.shape):
        return None
    p = planned.params(math.prod(x.shape))
    calls = (planned.Call(scan, p, 0, out=2, z=1, wide=True),
             planned.Call(apply, p, 0, planned.output(1), planned.output(2), wide=True))
    return planned.NativeStep(tuple(x.shape), calls, holds=p, dtype=_UINT8,
                              extra=((1, (), _FLOAT32), (2, (), _UINT8)))


@planned.planned("QAttention", MS)
def _qattention_step(step, operands):
    """QAttention without past or present (quantize_dynamic's BERT layers), its mask int32 key ranges or rows
    as Attention's binding takes them: the op's projection kernel (MatMulIntegerToFloat's plan its recording
    run kept, x's scale and zero point read at run time), then the attention kernel the op calls, in one
    call."""
    x, kept = operands[0], step.prepared
    weight, bias, x_scale, w_scale = operands[1:5]
    mask, x_zero, w_zero, past = (operands[i] if len(operands) > i else None for i in (5, 6, 7, 8))
    a = step.attrs
    fn = planned.kernel("qattention_program_f32")
    if fn is None or not _bytes_operand(x) or x.ndim != 3 or kept is None or not kept.fits(weight, w_zero) \
            or past is not None or any(step.outputs[1:]) or a.get("do_rotary", 0) \
            or a.get("past_present_share_buffer", 0) or type(bias) is not np.ndarray or bias.dtype != _FLOAT32 \
            or not (_one_value(x_scale, _FLOAT32) and (x_zero is None or (type(x_zero) is planned.Operand and
                                                                       _one_value(x_zero, x.dtype)))):
        return None
    plan = kept.plans.get(("float", tuple(x.shape)))
    if plan is None or plan.x_dtype != x.dtype or any(p is not q for p, q in zip(plan.params, (w_scale, w_zero, bias))):
        return None
    Bn, S, _ = x.shape
    hidden, N = plan.shape[-1], a["num_heads"]
    sizes = _attention.heads(hidden, N, None, False)
    if sizes is None or plan.shape != (Bn, S, hidden):
        return None
    hq, hv = sizes
    kind = _attention.program_mask_kind(mask, Bn, S, S)
    if kind is None:
        return None
    p = planned.params(planned.address(plan.fn), plan.p, Bn, S, hidden, N, hq, hv, kind,
                       int(bool(a.get("unidirectional", 0))), _attention.divisor(hq, a.get("scale")),
                       float(a.get("mask_filter_value", -10000.0)))
    call = planned.Call(fn, p, 0, 3, None if x_zero is None else 6, wide=True, d=None if mask is None else 5)
    return planned.NativeStep((Bn, S, N * hv), (call,), holds=(p, plan))


def _one_value(v, dtype) -> bool:
    """Whether ``v`` is one value of ``dtype``: a run-time value, or a C-contiguous constant."""
    if type(v) is planned.Operand:
        return v.dtype == dtype and math.prod(v.shape) == 1
    return type(v) is np.ndarray and v.dtype == dtype and v.size == 1 and v.flags.c_contiguous


def _quantize_step(step, operands):
    x, scale = operands[0], operands[1]
    zero = operands[2] if len(operands) > 2 else None
    a = step.attrs
    dtype = np.dtype(zero.dtype) if zero is not None else (
        np_dtype(a["output_dtype"]) if a.get("output_dtype") else _UINT8)
    fn = planned.kernel("quantize_planned_f32")
    if fn is None or not planned.is_f32(x) or not math.prod(x.shape) or math.prod(x.shape) < _NATIVE_QUANTIZE_MIN \
            or dtype not in _BYTES or a.get("block_size", 0) or a.get("precision", 0) not in (0, 1) \
            or (a.get("output_dtype") and np_dtype(a["output_dtype"]) != dtype) or not _one(scale, (_FLOAT32,), x) \
            or not (zero is None or _one(zero, (dtype,), x)) or a.get("saturate", 1) != 1:
        return None
    p = planned.params(math.prod(x.shape), float(scale.item()), 0 if zero is None else int(zero.item()),
                       int(dtype == np.int8))
    return planned.NativeStep(tuple(x.shape), (planned.Call(fn, p, 0),), holds=p, dtype=dtype)


def _dequantize_step(step, operands):
    x, scale = operands[0], operands[1]
    zero = operands[2] if len(operands) > 2 else None
    a = step.attrs
    fn = planned.kernel("dequantize_planned_f32")
    # (any size: below _NATIVE_DEQUANTIZE_MIN the op's NumPy code makes the same bits, one subtraction of
    # integers, exact, and one product)
    if fn is None or not _bytes_operand(x) or a.get("block_size", 0) \
            or not _one(scale, (_FLOAT32,), x) or not (zero is None or _one(zero, (x.dtype,), x)) \
            or (a.get("output_dtype") and np_dtype(a["output_dtype"]) != _FLOAT32):
        return None
    p = planned.params(math.prod(x.shape), int(x.dtype == np.int8), 0 if zero is None else int(zero.item()),
                       float(scale.item()))
    return planned.NativeStep(tuple(x.shape), (planned.Call(fn, p, 0),), holds=p)


planned.planned("QuantizeLinear")(_quantize_step)
planned.planned("DequantizeLinear")(_dequantize_step)


@planned.planned("QLinearAdd", MS)
def _qlinear_add_step(step, operands):
    A, B, kept = operands[0], operands[3], step.prepared
    fn = planned.kernel("qlinear_add_planned_8")
    if fn is None or kept is None or not _bytes_operand(A) or not _bytes_operand(B) or A.shape != B.shape or any(
            a is not b for a, b in zip(kept.params, (operands[i] if len(operands) > i else None
                                                     for i in (1, 2, 4, 5, 6, 7)))):
        return None
    c_zero = operands[7] if len(operands) > 7 else None
    dtype = A.dtype if c_zero is None else np.dtype(c_zero.dtype)
    v = kept.values
    p = planned.params(math.prod(A.shape), (A.dtype == np.int8) + 2 * (B.dtype == np.int8) + 4 * (dtype == np.int8),
                       float(v[0]), int(v[1]), float(v[2]), int(v[3]), float(v[4]), int(v[5]))
    return planned.NativeStep(tuple(A.shape), (planned.Call(fn, p, 0, 3),), holds=p, dtype=dtype)


@planned.planned("QLinearGlobalAveragePool", MS)
def _qlinear_global_average_pool_step(step, operands):
    X, x_scale, x_zero, y_scale = operands[:4]
    y_zero = operands[4] if len(operands) > 4 else None
    fn = planned.kernel("qlinear_global_average_pool_planned_8")
    if fn is None or not _bytes_operand(X) or X.ndim < 3 or step.attrs.get("channels_last", 0) \
            or not _one(x_scale, (_FLOAT32,), X) or not _one(y_scale, (_FLOAT32,), X) or not _zero(x_zero, X) \
            or not _zero(y_zero, X) or (x_zero is not None and x_zero.dtype != X.dtype):
        return None
    dtype = X.dtype if y_zero is None else np.dtype(y_zero.dtype)
    shape = tuple(X.shape[:2]) + (1,) * (X.ndim - 2)
    rows = math.prod(shape)
    p = planned.params(rows, math.prod(X.shape) // rows, (X.dtype == np.int8) + 2 * (dtype == np.int8),
                       float(x_scale.item()), 0 if x_zero is None else int(x_zero.item()), float(y_scale.item()),
                       0 if y_zero is None else int(y_zero.item()))
    return planned.NativeStep(shape, (planned.Call(fn, p, 0),), holds=p, dtype=dtype)
