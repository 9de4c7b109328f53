"""Cast and CastLike: every ONNX element type, bfloat16/float8/float4/int4/int2 via ml_dtypes.

Plain numeric casts run on the device (``astype``: float -> int truncates, integers wrap, NaN -> bool
is True), bfloat16 ones too where CuPy holds bfloat16 (CuPy 14). The other ml_dtypes types and
strings have no CuPy representation, so a cast from or to one of them is done on the host: a result
of such a type stays a NumPy array, a plain result goes back to the device. Rules, per the Cast
schema:

* float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz) with ``saturate=1``: values beyond the type's range
  become +/-max (NaN stays NaN); rounding is to nearest even. Cast-19..23 turn +/-Inf into NaN for
  the ``fnuz`` types, Cast-24+ into +/-max. ``saturate=0``: out of range gives NaN (Inf for e5m2).
* float8e8m0 (a power of two, 8 exponent bits): ``round_mode`` ``up`` (default), ``down`` or
  ``nearest`` (ties up); ``saturate=1`` keeps overflow, +Inf and 0 at max / min, ``saturate=0``
  makes them NaN. NaN stays NaN. The sign is ignored (negative input is undefined).
* float4e2m1, int4/uint4, int2/uint2: ml_dtypes conversion (integers wrap, float4 saturates).
* string -> number: ``float()`` syntax, so "1e-5", "+INF", "inf", "-Inf", "NaN" in any case;
  string -> integer parses an integer, or a decimal that is then truncated ("100.5" -> 100).
* number -> string: NumPy's shortest round-trip text ("0.1", "nan", "inf", "-inf", "True").

Cast-1 (``to`` as a type name string) is registered in ``legacy.py``.
"""

import ml_dtypes
import numpy as np

from ..device import to_host
from ..dtypes import device_supported, np_dtype
from ..errors import NodeError
from ..registry import op

_FLOAT8 = {  # dtype -> is an "fnuz" type (no Inf, no -0)
    np.dtype(ml_dtypes.float8_e4m3fn): False,
    np.dtype(ml_dtypes.float8_e4m3fnuz): True,
    np.dtype(ml_dtypes.float8_e5m2): False,
    np.dtype(ml_dtypes.float8_e5m2fnuz): True,
}
_E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
_ROUND_MODES = ("up", "down", "nearest")


def is_ml_dtype(dtype: np.dtype) -> bool:
    """An ml_dtypes type (bfloat16, float8, float4, int4, int2); not all have kind "V"."""
    return dtype.type.__module__.startswith("ml_dtypes")


def _host_only(dtype: np.dtype) -> bool:
    """Strings and ml_dtypes types exist only as NumPy arrays, but bfloat16 where the CUDA library
    holds it (CuPy 14): its casts run on the device like any other."""
    return dtype.kind in "OUS" or (is_ml_dtype(dtype) and not device_supported(dtype))


def cast(xp, X, dtype, *, saturate=1, round_mode="up", fnuz_inf_nan=False):
    """``X`` converted to the NumPy ``dtype`` with ONNX Cast semantics."""
    dtype = np.dtype(dtype)
    if round_mode not in _ROUND_MODES:
        raise NodeError(f"Cast round_mode must be one of {_ROUND_MODES}, got {round_mode!r}")
    if not _host_only(X.dtype) and not _host_only(dtype):
        return X.astype(dtype)
    Y = _cast_host(to_host(X), dtype, bool(saturate), round_mode, fnuz_inf_nan)
    return Y if _host_only(dtype) else xp.asarray(Y)


def _cast_host(x: np.ndarray, dtype: np.dtype, saturate: bool, round_mode: str, fnuz_inf_nan: bool):
    if dtype.kind in "OUS":
        return _to_strings(x)
    if x.dtype.kind in "OUS":
        x = _from_strings(x, dtype)
    if x.dtype == dtype:
        return x.copy()
    if dtype == _E8M0:
        return _to_e8m0(x, saturate, round_mode)
    if dtype in _FLOAT8 and saturate and x.dtype.kind != "b":
        if _FLOAT8[dtype] and fnuz_inf_nan:
            x = np.where(np.isinf(x), np.nan, x)
        info = ml_dtypes.finfo(dtype)
        x = np.clip(x, float(info.min), float(info.max))
    return x.astype(dtype)


def _to_strings(x: np.ndarray) -> np.ndarray:
    if is_ml_dtype(x.dtype):  # ml_dtypes: print the value, not the raw type
        x = x.astype(np.float32 if "float" in x.dtype.name else np.int64)
    return x.astype(np.str_).astype(object)


def _from_strings(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    # strings live on the host as object arrays: parsing is per element whatever the API
    parse = _parse_int if dtype.kind in "iu" else float
    try:
        values = np.frompyfunc(parse, 1, 1)(x.astype(object))
    except (ValueError, TypeError, OverflowError) as e:
        raise NodeError(f"Cast: cannot parse a string as a number: {e}") from None
    return np.asarray(values, dtype=object).astype(dtype if dtype.kind in "iu" else np.float64)


def _parse_int(s):
    try:
        return int(s)
    except ValueError:
        return int(float(s))  # "100.5", "1e3": truncated toward zero


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    bits = np.ascontiguousarray(x.astype(np.float32)).view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.int32)
    frac = bits & 0x7FFFFF
    normal = exp > 0
    if round_mode == "up":
        # a normal value 2^e * 1.f goes up unless f == 0; a subnormal one (< 2^-126) goes up to
        # 2^-126 once it exceeds 2^-127
        up = np.where(normal, frac != 0, frac > 0x400000)
    elif round_mode == "nearest":
        # between 2^e and 2^(e+1) the midpoint is 1.5 * 2^e; for subnormals 0.75 * 2^-126
        up = np.where(normal, frac >= 0x400000, frac >= 0x600000)
    else:
        up = np.zeros(exp.shape, dtype=bool)
    exp = exp + up
    top = 0xFE if saturate else 0xFF  # 0xFF is NaN
    out = np.minimum(exp, top)
    is_nan = np.isnan(x.astype(np.float32))
    is_inf = (bits & 0x7FFFFFFF) == 0x7F800000
    is_zero = (bits & 0x7FFFFFFF) == 0
    out = np.where(is_inf, top, out)
    out = np.where(is_zero, 0 if saturate else 0xFF, out)
    out = np.where(is_nan, 0xFF, out)
    return out.astype(np.uint8).view(_E8M0)


# -- registrations ---------------------------------------------------------------------------------

@op("Cast", since=6)
def Cast(xp, input, *, to):
    return cast(xp, input, np_dtype(to))


@op("Cast", since=19)
def Cast19(xp, input, *, to, saturate=1):
    return cast(xp, input, np_dtype(to), saturate=saturate, fnuz_inf_nan=True)


@op("Cast", since=24)
def Cast24(xp, input, *, to, saturate=1, round_mode="up"):
    return cast(xp, input, np_dtype(to), saturate=saturate, round_mode=round_mode)


@op("CastLike", since=15)
def CastLike(xp, input, target_type):
    return cast(xp, input, target_type.dtype)


@op("CastLike", since=19)
def CastLike19(xp, input, target_type, *, saturate=1):
    return cast(xp, input, target_type.dtype, saturate=saturate, fnuz_inf_nan=True)


@op("CastLike", since=24)
def CastLike24(xp, input, target_type, *, saturate=1, round_mode="up"):
    return cast(xp, input, target_type.dtype, saturate=saturate, round_mode=round_mode)


_SUB_BYTE_BITS = {"int4": 4, "uint4": 4, "float4_e2m1fn": 4, "int2": 2, "uint2": 2}


def _bits(dtype: np.dtype) -> int:
    return _SUB_BYTE_BITS.get(np.dtype(dtype).name, np.dtype(dtype).itemsize * 8)


@op("BitCast", since=26)
def BitCast(xp, input, *, to):
    """Reinterpret the bits (little endian) as type ``to`` of the same bit width; the shape is kept."""
    dtype = np_dtype(to)
    if dtype == object or input.dtype == object:
        raise NodeError("BitCast does not take strings")
    if _bits(dtype) != _bits(input.dtype):
        raise NodeError(f"BitCast from {input.dtype} ({_bits(input.dtype)} bits) to {dtype} "
                        f"({_bits(dtype)} bits): the bit widths differ")
    if _host_only(dtype) or _host_only(input.dtype):
        return to_host(input).view(dtype)
    return input.view(dtype)
