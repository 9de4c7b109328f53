"""The native 8-bit GEMM of ``cpu_kernels/qgemm.c`` for QLinearConv, ConvInteger, MatMulInteger and QLinearMatMul:
the weight's pack (made once per session, kept with the op's prepared data) and, per input shape,
the kernel's parameter array (one int64 array, so that a call converts three arguments).

A plan is made for one input shape and the very parameter arrays it was made from (the constant
scales and zero points of a session): :func:`lookup` reuses it while the op gets the same objects,
else a new one is made (and kept while they are read-only constants). None: the native kernel
does not apply (the caller's NumPy path runs, and reports bad inputs).
"""

from __future__ import annotations

import numpy as np

from ... import native
from ..windows import conv_shape_geometry

_U8, _S8, _I32, _F32 = np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.float32)
_BYTES = (_U8, _S8)
_FLOATS = frozenset(np.dtype(t) for t in (np.float32, np.float16, np.float64))

# The widest instructions the kernels may use where the CPU has them: 2 AVX-512 VNNI, 1 AVX2, 0 none
# (portable C). Tests lower it to check each path.
SIMD = 2


class Plan:
    """A kernel call's constant part: ``fn`` (the ctypes function), ``p`` (the parameter array's
    address), the output's ``shape`` and ``dtype``, the ``params`` it was made for, the arrays
    the parameter array points into (``keep``), and the call's other constant arguments (``extra``)."""

    __slots__ = ("fn", "p", "shape", "dtype", "x_dtype", "params", "keep", "extra")

    def __init__(self, fn, p, shape, dtype, x_dtype, params, keep, extra=()):
        self.fn, self.p, self.shape, self.dtype, self.x_dtype = fn, p, shape, dtype, x_dtype
        self.params, self.keep, self.extra = params, keep, extra


def lookup(plans: dict, constants, tag: str, x, params, make):
    """The plan for input ``x`` and ``params`` (a tuple of the op's parameter inputs): kept in ``plans``
    (by ``tag``, the kind of plan, and x's shape) when made for these very objects, else ``make()``'s,
    kept when each of them is None or one of ``constants`` (the ids of the session's constant inputs
    of the node)."""
    key = (tag, x.shape)
    hit = plans.get(key)
    if hit is not None and hit.x_dtype is x.dtype:
        for a, b in zip(hit.params, params):
            if a is not b:
                break
        else:
            return hit
    plan = make()
    if plan is not None and len(plans) < 64 and all(p is None or id(p) in constants for p in params):
        plan.params = params
        plans[key] = plan
    return plan


def _wrap32(v):
    """int64 values wrapped modulo 2**32 to int32 (the kernels' accumulation)."""
    return ((np.asarray(v, np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)


def _scalar(p, dtypes):
    """The value of a one-element parameter of one of ``dtypes``, else None."""
    if type(p) is np.ndarray and p.size == 1 and p.dtype in dtypes:
        return p.reshape(()).item()
    return None


def _per_channel(p, n: int, dtypes):
    """A scalar or ``[n]`` parameter as a 1-D array of ``n``, else None."""
    if type(p) is not np.ndarray or p.dtype not in dtypes:
        return None
    if p.size == 1 and p.ndim <= 1:
        return np.full(n, p.reshape(()), p.dtype)
    if p.shape == (n,):
        return p
    return None


def _address(a) -> int:
    return 0 if a is None else a.ctypes.data


def _params(values) -> tuple[np.ndarray, int]:
    a = np.asarray(values, np.int64)
    return a, a.ctypes.data


# -- QLinearConv / ConvInteger ------------------------------------------------------------------

def conv_pack(w):
    """A conv weight (M, C/group, kh, kw) of 8 bits as the kernel reads it: int8 rows of the taps
    zero-padded to a multiple of 4 (uint8 moved by -128), and the rows' sums; None if not 2-D."""
    if type(w) is not np.ndarray or w.ndim != 4 or w.dtype not in _BYTES or not w.size:
        return None
    M = w.shape[0]
    K = w.size // M
    s = w.reshape(M, K)
    if w.dtype == _U8:
        s = (s.astype(np.int16) - 128).astype(np.int8)
    pack = np.zeros((M, -(-K // 4) * 4), np.int8)
    pack[:, :K] = s
    pack.flags.writeable = False
    return pack, s.sum(axis=1, dtype=np.int64)


def conv_plan(pack, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B, attrs):
    """The plan of QLinearConv by :func:`conv_pack`'s ``pack`` (2-D, NCHW, 8 bits), or None."""
    if pack is None or type(x) is not np.ndarray or x.dtype not in _BYTES:
        return None
    zx = _scalar(x_zero_point, (x.dtype,)) if x_zero_point is not None else 0
    xs, ys = _scalar(x_scale, _FLOATS), _scalar(y_scale, _FLOATS)
    zy = _scalar(y_zero_point, _BYTES)
    M = w.shape[0]
    zw = None if w_zero_point is None else _per_channel(w_zero_point, M, (w.dtype,))
    ws = _per_channel(w_scale, M, _FLOATS)
    if zx is None or xs is None or ys is None or zy is None or ws is None or (w_zero_point is not None and zw is None):
        return None
    if B is not None and not (type(B) is np.ndarray and B.dtype == _I32 and B.shape == (M,)):
        return None
    # moved to uint8 activations and int8 weights: the differences (x - zx), (w - zw) are unchanged
    zx = zx + 128 if x.dtype == _S8 else zx
    zw = _moved_zero_points(zw, M, w.dtype)
    bias = np.zeros(M, np.int64) if B is None else B.astype(np.int64)
    rowc = _wrap32(bias - zx * pack[1] + w.size // M * zx * zw)
    # as the NumPy code: x_scale * w_scale / y_scale in float32
    mult = np.ascontiguousarray((np.float32(xs) * ws.astype(np.float32) / np.float32(ys)).astype(np.float32))
    mult = np.broadcast_to(mult, (M,)).copy()
    return _conv("qconv_u8", pack, x, w, attrs, zx, zw, rowc, mult, np.dtype(y_zero_point.dtype), zy)


def conv_integer_plan(pack, x, w, w_zero_point, attrs):
    """The plan of ConvInteger by ``pack`` (as :func:`conv_plan`'s), int32 out; x's zero point is read
    on each call (``run(plan, x, its address or 0)``), or set in :func:`with_x_zero_point`'s copy."""
    if pack is None or type(x) is not np.ndarray or x.dtype not in _BYTES:
        return None
    M = w.shape[0]
    zw = None if w_zero_point is None else _per_channel(w_zero_point, M, (w.dtype,))
    if w_zero_point is not None and zw is None:
        return None
    zx = 128 if x.dtype == _S8 else 0
    return _conv("qconv_i32", pack, x, w, attrs, zx, _moved_zero_points(zw, M, w.dtype), None, None, _I32, 0)


# the place of the input's zero point in qconv_u8's parameters (qgemm.c's CV_ZX)
_CV_ZX = 17


def with_x_zero_point(plan, x_zero_point):
    """:func:`conv_integer_plan`'s parameters with a constant zero point of x, as a new array."""
    p = plan.keep[0].copy()
    p[_CV_ZX] = int(x_zero_point.reshape(()).item()) + (128 if plan.x_dtype == _S8 else 0)
    p.flags.writeable = False
    return p


def _moved_zero_points(zw, M, dtype):
    """The weight's zero points (None: 0) as int64, moved by -128 with uint8 weights."""
    zw = np.zeros(M, np.int64) if zw is None else zw.astype(np.int64)
    return zw - 128 if dtype == _U8 else zw


def _conv(name, pack, x, w, attrs, zx, zw, rowc, mult, y_dtype, zy):
    """The plan of qgemm.c's conv ``name`` with x's zero point ``zx`` and the weight's ``zw`` (moved), the
    per-channel constant ``rowc`` and multipliers ``mult`` (8-bit out; None: int32 out, the constant made by
    the kernel from the weight's row sums)."""
    if x.ndim != 4 or not x.size:
        return None
    fn = native.function(name)
    if fn is None:
        return None
    try:
        kernel, strides, dilations, pb, _, out, _, _ = conv_shape_geometry(
            x, w, attrs["group"], attrs["kernel_shape"], attrs["auto_pad"], attrs["strides"], attrs["dilations"],
            attrs["pads"])
    except Exception:  # noqa: BLE001 - the NumPy path reports it
        return None
    N, C, H, W = x.shape
    M, group = w.shape[0], attrs["group"]
    wpack, wsum = pack
    zw32 = _wrap32(zw) if zw.any() else None
    wsum32 = _wrap32(wsum) if mult is None else None
    # the weight as the B of a product whose rows are the output's pixels ([group][K/4][Mp][4]), which
    # the kernel takes for small maps
    Mg, Kgp = M // group, wpack.shape[1]
    Mp = -(-Mg // 16) * 16
    wt = np.zeros((group, Kgp, Mp), np.int8)
    wt[:, :, :Mg] = wpack.reshape(group, Mg, Kgp).transpose(0, 2, 1)
    wt = np.ascontiguousarray(wt.reshape(group, Kgp // 4, 4, Mp).transpose(0, 1, 3, 2))
    p, at = _params([N, C, H, W, M, kernel[0], kernel[1], out[0], out[1], strides[0], strides[1], pb[0], pb[1],
                     dilations[0], dilations[1], group, x.dtype == _S8, zx, y_dtype == _S8, zy, SIMD,
                     wpack.ctypes.data, _address(rowc), _address(zw32), _address(mult), wt.ctypes.data, Mp,
                     mult is not None, _address(wsum32)])
    return Plan(fn, at, (N, M, out[0], out[1]), y_dtype, x.dtype, (), (p, wpack, rowc, zw32, mult, wt, wsum32))


def run(plan, x, *extra):
    """The plan's kernel on ``x`` (made C-contiguous when not), with the arguments ``extra`` (addresses)
    between the input and the output for kernels that take them."""
    flags = x.flags
    if not flags.c_contiguous:
        x = np.ascontiguousarray(x)
        flags = x.flags
    y = np.empty(plan.shape, plan.dtype)
    if plan.fn(plan.p, native.address(x) if flags.writeable else x.ctypes.data, *extra, native.address(y)):
        raise MemoryError("native kernel could not allocate its scratch")
    return y


# -- MatMulInteger / QLinearMatMul -----------------------------------------------------------------------

class MatmulPack:
    """A weight B (K, N) of 8 bits as qgemm_u8 reads it: int8 (uint8 moved by -128), in groups of 16
    columns, each group's K rows contiguous, 4 k of a column side by side ([Np/16][K/4][16][4], Np: N
    rounded up to 16); with its zero point (one, or one per column) moved alike, ``T = K zb - colsum`` and
    ``zb32`` (None when all zero)."""

    def __init__(self, B, zero_point):
        K, N = B.shape
        s = B if B.dtype == _S8 else (B.astype(np.int16) - 128).astype(np.int8)
        Kp, Np = -(-K // 4) * 4, -(-N // 16) * 16
        padded = np.zeros((Kp, Np), np.int8)
        padded[:K, :N] = s
        self.pack = np.ascontiguousarray(padded.reshape(Kp // 4, 4, Np // 16, 16).transpose(2, 0, 3, 1))
        self.K, self.N, self.b_dtype = K, N, B.dtype
        zb = np.zeros(N, np.int64) if zero_point is None else np.broadcast_to(
            zero_point.reshape(-1).astype(np.int64), (N,))
        zb = zb - (128 if B.dtype == _U8 else 0)
        self.T = _wrap32(K * zb - s.sum(axis=0, dtype=np.int64))
        self.zb32 = _wrap32(zb) if zb.any() else None


def matmul_pack(B, zero_point):
    """:class:`MatmulPack` of weight B, or None where the kernel does not take it."""
    if not (type(B) is np.ndarray and B.ndim == 2 and B.dtype in _BYTES and B.size and max(B.shape) < 2 ** 31):
        return None
    if zero_point is not None and not (type(zero_point) is np.ndarray and zero_point.dtype == B.dtype and (
            zero_point.size == 1 or zero_point.shape == (B.shape[1],))):
        return None
    return MatmulPack(B, zero_point)


def matmul_plan(pack, a, a_zero_point, out8=None, out_float=None, C=None):
    """The plan of ``(a - a_zero_point) @ B`` by ``pack`` (a :class:`MatmulPack`): int32 out; with
    ``out8 = (a_scale, b_scale, y_scale, y_zero_point)`` requantised (QLinearMatMul); with
    ``out_float = (b_scale, bias)`` float32 times a_scale (given on each call) and b_scale, plus bias
    (MatMulIntegerToFloat). None where the kernel does not apply."""
    if pack is None or type(a) is not np.ndarray or a.dtype not in _BYTES or a.ndim < 1 or a.shape[-1] != pack.K:
        return None
    if a_zero_point is not None and _scalar(a_zero_point, (a.dtype,)) is None:
        return None
    M, N = a.size // pack.K, pack.N
    keep = [pack]
    mult, bias, zy, y_dtype, out = None, None, 0, _I32, 0
    if out8 is not None:
        a_scale, b_scale, y_scale, y_zero_point = out8
        as_, ys, zy = _scalar(a_scale, _FLOATS), _scalar(y_scale, _FLOATS), _scalar(y_zero_point, _BYTES)
        bs = _per_channel(b_scale, N, _FLOATS)
        if as_ is None or ys is None or zy is None or bs is None:
            return None
        # as the NumPy code: a_scale * b_scale / y_scale in float32
        mult = (np.float32(as_) * bs.astype(np.float32) / np.float32(ys)).astype(np.float32)
        y_dtype, out = np.dtype(y_zero_point.dtype), 1
    elif out_float is not None:
        b_scale, bias = out_float
        mult = _per_channel(b_scale, N, (_F32,))
        if mult is None or bias is not None and not (type(bias) is np.ndarray and bias.dtype == _F32 and
                                                     bias.shape == (N,)):
            return None
        mult, y_dtype, out = np.ascontiguousarray(mult), _F32, 2
        bias = None if bias is None else np.ascontiguousarray(bias)
    if C is not None:
        C = _per_channel(C, N, (_I32,))
        if C is None:
            return None
        C = np.ascontiguousarray(C)
    fn = native.function("qgemm_f32" if out == 2 else "qgemm_u8")
    if fn is None:
        return None
    keep += [mult, bias, C]
    p, address = _params([M, pack.K, N, a.dtype == _S8, out, y_dtype == _S8, zy, SIMD, pack.pack.ctypes.data,
                          pack.T.ctypes.data, 0 if pack.zb32 is None else pack.zb32.ctypes.data,
                          0 if mult is None else mult.ctypes.data, 0 if bias is None else bias.ctypes.data,
                          0 if C is None else C.ctypes.data])
    keep.append(p)
    return Plan(fn, address, a.shape[:-1] + (N,), y_dtype, a.dtype, (), tuple(keep))


_ONE = np.ones(1, np.float32)


def qgemm_plan(pack, A, a_scale, a_zero_point, b_scale, C, y_scale, y_zero_point, alpha):
    """The plan of com.microsoft QGemm (A not transposed) by ``pack`` (B as the product reads it), its
    parameters constants: the generic op's multiplier a_scale * b_scale * alpha (/ y_scale) in
    float32, C added to the int32 product; ``extra``: A's zero point and a_scale 1 (float out)."""
    if pack is None or type(A) is not np.ndarray or A.ndim != 2 or a_zero_point is None:
        return None
    as_, bs = _scalar(a_scale, _FLOATS), _per_channel(b_scale, pack.N, _FLOATS)
    if as_ is None or bs is None or (C is not None and C.ndim > 1 and C.shape[:-1] != (1,) * (C.ndim - 1)):
        return None
    multiplier = np.float32(as_) * bs.astype(np.float32) * np.float32(alpha)
    C = None if C is None else C.reshape(-1)
    if y_scale is None:
        plan = matmul_plan(pack, A, a_zero_point, out_float=(multiplier.astype(np.float32), None), C=C)
        extra = (a_zero_point.ctypes.data, _ONE.ctypes.data)
    else:
        ys = _scalar(y_scale, _FLOATS)
        if ys is None:
            return None
        y_zero_point = np.zeros((), np.uint8) if y_zero_point is None else y_zero_point
        # (the out8 form computes as_ * bs / ys: given here as 1 * multiplier / ys)
        plan = matmul_plan(pack, A, a_zero_point, out8=(_ONE, multiplier, np.float32(ys) * _ONE, y_zero_point), C=C)
        extra = (a_zero_point.ctypes.data,)
    if plan is not None:
        plan.extra = extra
        plan.keep += (a_zero_point,)
    return plan
