"""Elementwise math, logic and comparison ops (numpy-style broadcasting, opset 6/7 and later).

Binary and variadic ops require every input to have the same element type (a mixed-dtype node is a
:class:`NodeError`, not a silent NumPy promotion). Integer ``Div`` truncates toward zero like C;
``Mod`` follows the divisor's sign unless ``fmod=1`` (C ``fmod``, the dividend's sign); ``Pow``
keeps the base's element type; ``Round`` rounds half to even. ``Erf`` has no NumPy/CuPy function in
common, so it is computed here (:func:`erf`) from a series and a continued fraction.

The pre-opset-7 forms (``broadcast``/``axis`` attributes, ``consumed_inputs``) live in ``legacy.py``.
"""

import math

import numpy as np

from ..errors import NodeError
from ..registry import op


def same_dtype(op_type: str, *arrays) -> None:
    """Raise a :class:`NodeError` unless every array has the same element type."""
    first = arrays[0].dtype
    if any(a.dtype != first for a in arrays[1:]):
        got = ", ".join(str(a.dtype) for a in arrays)
        raise NodeError(f"{op_type} needs inputs of one element type, got {got}")


def is_float(dtype) -> bool:
    """True for floating-point dtypes, ml_dtypes ones (bfloat16, float8...) included."""
    return dtype.kind == "f" or (dtype.type.__module__.startswith("ml_dtypes") and "float" in dtype.name)


def _binary(op_type: str, since: int, fn: str, inplace: bool = False):
    """Register ``op_type`` from opset ``since`` as ``xp.<fn>(A, B)`` on inputs of one element type
    (``inplace``: a ufunc of that type, writing into ``out=``)."""
    if inplace:
        def impl(xp, A, B, *, out=None):
            if A.dtype != B.dtype:  # the common case costs one comparison (this is the hottest op path)
                same_dtype(op_type, A, B)
            return getattr(xp, fn)(A, B, out=out)
    else:
        def impl(xp, A, B):
            if A.dtype != B.dtype:
                same_dtype(op_type, A, B)
            return getattr(xp, fn)(A, B)
    impl.__name__ = impl.__qualname__ = op_type
    return op(op_type, since=since, inplace=inplace)(impl)


def _unary(op_type: str, since: int, fn: str):
    """Register ``op_type`` from opset ``since`` as the ufunc ``xp.<fn>``, which writes into ``out=``
    when the executor hands it a dying input's buffer."""
    def impl(xp, X, *, out=None):
        return getattr(xp, fn)(X, out=out)
    impl.__name__ = impl.__qualname__ = op_type
    return op(op_type, since=since, inplace=True)(impl)


# -- binary arithmetic -----------------------------------------------------------------------------

Add = _binary("Add", 7, "add", inplace=True)
Sub = _binary("Sub", 7, "subtract", inplace=True)
Mul = _binary("Mul", 7, "multiply", inplace=True)


@op("Div", since=7, inplace=True)
def Div(xp, A, B, *, out=None):
    same_dtype("Div", A, B)
    if A.dtype.kind not in "iu":
        return xp.divide(A, B, out=out)
    q = xp.floor_divide(A, B)
    if A.dtype.kind == "u":
        return q
    # floor and truncation differ when the quotient is negative and inexact
    fix = ((A - q * B) != 0) & ((A < 0) != (B < 0))
    return xp.where(fix, q + 1, q)


@op("Pow", since=7)
def Pow(xp, X, Y):
    if is_float(X.dtype):
        if not is_float(Y.dtype):
            Y = Y.astype(X.dtype)
        Z = xp.pow(X, Y)
    elif is_float(Y.dtype):
        Z = xp.pow(X.astype(xp.result_type(X, Y)), Y)
    else:
        Z = _int_pow(xp, X, Y.astype(X.dtype))
    return Z if Z.dtype == X.dtype else Z.astype(X.dtype)


def _int_pow(xp, X, Y):
    if X.dtype.kind == "u":
        return xp.pow(X, Y)
    neg = Y < 0
    Z = xp.pow(X, xp.where(neg, 0, Y))
    # x ** -n truncates to 0 unless |x| == 1 (0 ** -n is undefined: 0 here)
    odd = (Y % 2) != 0
    Zneg = xp.where(X == 1, 1, xp.where(X == -1, xp.where(odd, -1, 1), 0)).astype(X.dtype)
    return xp.where(neg, Zneg, Z)


@op("Mod", since=10)
def Mod(xp, A, B, *, fmod=0):
    same_dtype("Mod", A, B)
    return xp.fmod(A, B) if fmod else xp.remainder(A, B)


@op("BitShift", since=11)
def BitShift(xp, X, Y, *, direction):
    same_dtype("BitShift", X, Y)
    if direction == "LEFT":
        return xp.bitwise_left_shift(X, Y)
    if direction == "RIGHT":
        return xp.bitwise_right_shift(X, Y)
    raise NodeError(f"BitShift direction must be 'LEFT' or 'RIGHT', got {direction!r}")


BitwiseAnd = _binary("BitwiseAnd", 18, "bitwise_and")
BitwiseOr = _binary("BitwiseOr", 18, "bitwise_or")
BitwiseXor = _binary("BitwiseXor", 18, "bitwise_xor")


@op("BitwiseNot", since=18)
def BitwiseNot(xp, X):
    return xp.bitwise_invert(X)


# -- logic and comparison --------------------------------------------------------------------------

And = _binary("And", 7, "logical_and")
Or = _binary("Or", 7, "logical_or")
Xor = _binary("Xor", 7, "logical_xor")


@op("Not", since=1)
def Not(xp, X):
    return xp.logical_not(X)


Equal = _binary("Equal", 7, "equal")
Less = _binary("Less", 7, "less")
LessOrEqual = _binary("LessOrEqual", 12, "less_equal")
Greater = _binary("Greater", 7, "greater")
GreaterOrEqual = _binary("GreaterOrEqual", 12, "greater_equal")


# -- unary math ------------------------------------------------------------------------------------

Neg = _unary("Neg", 6, "negative")
Abs = _unary("Abs", 6, "abs")


@op("Reciprocal", since=6)
def Reciprocal(xp, X):
    return 1 / X


@op("Floor", since=6)
def Floor(xp, X):
    return xp.floor(X)


@op("Ceil", since=6)
def Ceil(xp, X):
    return xp.ceil(X)


@op("Round", since=11)
def Round(xp, X):
    return xp.round(X)  # half to even


Sqrt = _unary("Sqrt", 6, "sqrt")
Exp = _unary("Exp", 6, "exp")
Log = _unary("Log", 6, "log")
Tanh = _unary("Tanh", 6, "tanh")
Sin = _unary("Sin", 7, "sin")
Cos = _unary("Cos", 7, "cos")
Tan = _unary("Tan", 7, "tan")
Asin = _unary("Asin", 7, "asin")
Acos = _unary("Acos", 7, "acos")
Atan = _unary("Atan", 7, "atan")
Sinh = _unary("Sinh", 9, "sinh")
Cosh = _unary("Cosh", 9, "cosh")
Asinh = _unary("Asinh", 9, "asinh")
Acosh = _unary("Acosh", 9, "acosh")
Atanh = _unary("Atanh", 9, "atanh")


@op("Sign", since=9)
def Sign(xp, input):
    return xp.sign(input)


@op("IsNaN", since=9)
def IsNaN(xp, X):
    return xp.isnan(X)


@op("IsInf", since=10)
def IsInf(xp, X, *, detect_negative=1, detect_positive=1):
    Y = xp.isinf(X)
    if not detect_negative:
        Y = Y & (X > 0)
    if not detect_positive:
        Y = Y & (X < 0)
    return Y


@op("Erf", since=9)
def Erf(xp, input):
    return erf(xp, input)


def erf(xp, X):
    """The error function, elementwise, to about 1 ulp (float64) or a few ulps (float32).

    |x| < 2.5: erf(x) = 2/sqrt(pi) exp(-x^2) sum_n 2^n x^(2n+1) / (1*3*...*(2n+1)), a series of
    positive terms (no cancellation); |x| >= 2.5: erf(x) = 1 - erfc(x) with erfc from its continued
    fraction exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))). Term counts are fixed
    (a loop over a static count, not over the data). float16/bfloat16 and integers work in float32
    and the result is cast back to the input's type. (The CPU's native kernel: :mod:`gpuops.ops.cpu.elementwise`.)
    """
    out_dtype = X.dtype
    wide = X.dtype == xp.float64
    work = xp.float64 if wide else xp.float32
    n_series, n_fraction = (45, 30) if wide else (28, 18)
    x = X if X.dtype == work else X.astype(work)
    a = xp.abs(x)
    split = 2.5
    s = xp.minimum(a, split)
    s2 = s * s
    acc = xp.ones_like(s)
    for n in range(n_series, 0, -1):
        acc = 1 + acc * s2 * (2.0 / (2 * n + 1))
    small = (2 / math.sqrt(math.pi)) * xp.exp(-s2) * s * acc
    c = xp.maximum(a, split)
    t = c
    for k in range(n_fraction, 0, -1):
        t = c + (k / 2) / t
    large = 1 - xp.exp(-c * c) / (math.sqrt(math.pi) * t)
    y = xp.where(a < split, small, large)
    y = xp.where(xp.isnan(x), x, xp.copysign(y, x))
    return y if y.dtype == out_dtype else y.astype(out_dtype)


# -- variadic --------------------------------------------------------------------------------------

def _fold(xp, op_type, fn, inputs):
    if not inputs:
        raise NodeError(f"{op_type} needs at least one input")
    same_dtype(op_type, *inputs)
    out = inputs[0]
    for x in inputs[1:]:
        out = fn(out, x)
    return out


@op("Sum", since=6)
def Sum(xp, *data_0):
    return _fold(xp, "Sum", xp.add, data_0)


@op("Mean", since=6)
def Mean(xp, *data_0):
    out = _fold(xp, "Mean", xp.add, data_0)
    return out if len(data_0) == 1 else out / len(data_0)


@op("Max", since=6)
def Max(xp, *data_0):
    return _fold(xp, "Max", xp.maximum, data_0)


@op("Min", since=6)
def Min(xp, *data_0):
    return _fold(xp, "Min", xp.minimum, data_0)


# -- Clip ------------------------------------------------------------------------------------------

def clamp(xp, x, lo=None, hi=None):
    """``x`` limited to [lo, hi] (None: unbounded) in x's dtype, NaN staying NaN; hi wins when
    lo > hi. Written with maximum/minimum because array-api-compat's ``clip`` assigns through
    boolean masks, which synchronises CuPy with the host. Python-int bounds of an integer ``x``
    are saturated to its range."""
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        lo, hi = (min(max(v, int(info.min)), int(info.max)) if type(v) is int else v for v in (lo, hi))
    y = x if lo is None else xp.maximum(x, lo)
    y = y if hi is None else xp.minimum(y, hi)
    return y if y.dtype == x.dtype else y.astype(x.dtype)


@op("Clip", since=6)
def Clip6(xp, input, *, min=-3.4028234663852886e38, max=3.4028234663852886e38):
    lo, hi = min, max
    if input.dtype.kind == "f":  # a bound beyond the type's range (float16) means no bound
        big = float(xp.finfo(input.dtype).max)
        lo, hi = (v if abs(v) <= big else math.copysign(math.inf, v) for v in (min, max))
    return xp.minimum(xp.maximum(input, lo), hi)


@op("Clip", since=11)
def Clip(xp, input, min=None, max=None):
    # min > max gives max everywhere, as the spec asks; NaN inputs stay NaN
    Y = input
    if min is not None:
        same_dtype("Clip", input, min)
        Y = xp.maximum(Y, _scalar(xp, min, "min"))
    if max is not None:
        same_dtype("Clip", input, max)
        Y = xp.minimum(Y, _scalar(xp, max, "max"))
    return Y if Y is not input else xp.asarray(input, copy=True)


def _scalar(xp, t, name):
    if t.ndim == 0:
        return t
    if t.size != 1:
        raise NodeError(f"Clip: {name} must be a scalar, got shape {tuple(t.shape)}")
    return xp.reshape(t, ())
