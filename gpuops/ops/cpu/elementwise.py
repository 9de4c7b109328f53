"""Erf and Sigmoid on the CPU (``@op(..., device="cpu")``) and the native special functions of
``cpu_kernels/special.c``: one pass over the array, within an ulp, where the generic
:func:`gpuops.ops.elementwise.erf` (the fallback and test oracle) spends dozens of NumPy passes and
the generic Sigmoid five (each with an array of its own: 2-8x the kernel's time, measured on
EfficientNet-B0's SiLU shapes). NumPy's own exp and tanh are vectorised already and stay.
"""

from __future__ import annotations

import math

import numpy as np

from ... import native
from ...registry import op
from .. import activation as _activation
from .. import elementwise as _elementwise
from . import planned

NATIVE_SPECIAL_MIN = 1  # elements (the kernel's call costs less than the generic ops' NumPy passes at any size)
_SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}


def native_special(name: str, X, dtypes=(np.float32, np.float64)):
    """``cpu_kernels/special.c``'s elementwise ``name`` (``name_f32`` / ``name_f64``) over the NumPy array
    X, in one pass; None where it does not apply (dtype, size, native kernels off)."""
    if not (type(X) is np.ndarray and X.dtype in dtypes and X.size >= NATIVE_SPECIAL_MIN):
        return None
    fn = native.function(f"{name}_{_SUFFIX[X.dtype]}")
    if fn is None:
        return None
    X = np.ascontiguousarray(X)
    Y = np.empty_like(X)
    native.call(fn, native.ptr(X, X.dtype), native.address(Y), X.size)
    return Y


def erf(xp, X):
    """:func:`gpuops.ops.elementwise.erf`, by the native kernel where it applies."""
    Y = native_special("erf", X)
    return _elementwise.erf(xp, X) if Y is None else Y


@op("Erf", since=9, device="cpu")
def Erf(xp, input):
    return erf(xp, input)


@op("Sigmoid", since=6, device="cpu")
def Sigmoid(xp, X):
    Y = native_special("sigmoid", X, (np.float32,))
    return _activation.Sigmoid(xp, X) if Y is None else Y


# -- native programs (gpuops.onnx.programs): binary ops (float32; int32 Add, Sub, Mul), activations ------

_BINARY = {"Add": 0, "Mul": 1, "Max": 2, "Sub": 3, "Div": 4}  # cpu_kernels/program.c's BINARY_*
_MAX_SWAPPED = 5  # Max(b, a) with b broadcast: its order kept (of +0 and -0, maximum takes the second)
_COMMUTATIVE = ("Add", "Mul", "Max")
_SAME, _CHANNEL, _SCALAR, _ROWS = 0, 1, 2, 3  # and BROADCAST_*


def broadcast(full: tuple, other: tuple):
    """(mode, outer, channels, inner) of ``other`` broadcast against ``full`` (the output's shape): the same
    shape, one value, the last axes repeated, or one value per index of a block of axes (a channel, a row:
    (C, 1, 1) or (1, C, 1, 1) against (N, C, H, W), (B, 1) against (B, K)); None for another broadcast."""
    n = int(np.prod(full, dtype=np.int64))
    if other == full:
        return _SAME, 1, 1, n
    if len(other) > len(full):
        return None
    if int(np.prod(other, dtype=np.int64)) == 1:
        return _SCALAR, 1, 1, n
    padded = (1,) * (len(full) - len(other)) + tuple(other)
    axes = [i for i, d in enumerate(padded) if d != 1]
    i, j = axes[0], axes[-1] + 1
    if padded[i:j] != tuple(full[i:j]):
        return None
    block = int(np.prod(full[i:j], dtype=np.int64))
    if j == len(full):  # the last axes, repeated: (S, H) or (1, S, H) against (B, S, H)
        return _ROWS, n // max(block, 1), 1, block
    return _CHANNEL, int(np.prod(full[:i], dtype=np.int64)), block, int(np.prod(full[j:], dtype=np.int64))


def _binary_step(step, operands):
    if len(operands) != 2 or (step.impl.since < 7 and step.op_type != "Max"):
        return None
    A, B = operands
    integer = step.op_type in _INTEGER and all(type(x) is planned.Operand and x.dtype == np.int32 for x in operands)
    if integer:
        fn, shape_of = planned.kernel("binary_planned_i32"), lambda x: x.shape  # noqa: E731
    else:
        fn = planned.kernel("binary_planned_f32")
        shape_of = lambda x: x.shape if planned.is_f32(x) or (  # noqa: E731
            type(x) is np.ndarray and x.dtype == np.float32) else None
    sa, sb = shape_of(A), shape_of(B)
    if fn is None or sa is None or sb is None or not (type(A) is planned.Operand or type(B) is planned.Operand):
        return None
    a, b, mode = 0, 1, broadcast(sa, sb)
    if mode is None and step.op_type in _COMMUTATIVE:  # the first operand is the broadcast one (exact swap)
        a, b, mode = 1, 0, broadcast(sb, sa)
    if mode is None:
        return None
    code = _MAX_SWAPPED if a == 1 and step.op_type == "Max" else _BINARY[step.op_type]
    p = planned.params(code, *mode[1:], mode[0])
    return planned.NativeStep(sa if a == 0 else sb, (planned.Call(fn, p, a, b),), holds=p,
                              dtype=np.dtype(np.int32) if integer else planned.F32)


_INTEGER = ("Add", "Sub", "Mul")  # of two int32 values too (binary_planned_i32: wrapping around, as NumPy's)


for _name in _BINARY:
    planned.planned(_name)(_binary_step)


_COMPARE = {"Equal": 0, "Greater": 1, "GreaterOrEqual": 2, "Less": 3, "LessOrEqual": 4}  # program.c's COMPARE_*
_COMPARE_SWAPPED = {0: 0, 1: 3, 2: 4, 3: 1, 4: 2}  # b cmp a as a cmp' b (exact: a NaN compares false either way)
_COMPARE_KERNELS = {np.dtype(np.float32): "compare_planned_f32", np.dtype(np.int32): "compare_planned_i32",
                    np.dtype(np.int64): "compare_planned_i64"}


def _compare_step(step, operands):
    """Comparisons of two float32, int32 or int64 values (a run-time one; the other may be a float32 constant,
    as the programs read only those) into bools: a model's condition (an If's, a mask's) inside its program."""
    if len(operands) != 2 or step.impl.since < 7:
        return None
    A, B = operands
    if not all(type(x) is planned.Operand or (type(x) is np.ndarray and x.dtype == planned.F32) for x in operands) \
            or not (type(A) is planned.Operand or type(B) is planned.Operand):
        return None
    dtypes = {np.dtype(x.dtype) for x in operands}
    if len(dtypes) != 1:
        return None
    name = _COMPARE_KERNELS.get(dtypes.pop())
    fn = None if name is None else planned.kernel(name)
    if fn is None:
        return None
    code, a, b, mode = _COMPARE[step.op_type], 0, 1, broadcast(A.shape, B.shape)
    if mode is None:
        code, a, b, mode = _COMPARE_SWAPPED[code], 1, 0, broadcast(B.shape, A.shape)
    if mode is None:
        return None
    p = planned.params(code, *mode[1:], mode[0])
    return planned.NativeStep(operands[a].shape, (planned.Call(fn, p, a, b),), holds=p, dtype=np.dtype(np.bool_))


for _name in _COMPARE:
    planned.planned(_name)(_compare_step)


_UNARY = {"Relu": 0, "Sigmoid": 1, "HardSwish": 2, "HardSigmoid": 3, "Sqrt": 4, "Reciprocal": 5, "Neg": 6, "Abs": 7,
          "Tanh": 8, "Exp": 9, "Log": 10, "Erf": 13, "Floor": 14, "Ceil": 15}  # special.c's UNARY_*
_SQUARE, _CLIP = 11, 12


def _unary_call(X, kind: int, alpha: float = 0.0, beta: float = 0.0):
    fn = planned.kernel("unary_planned_f32")
    if fn is None or not planned.is_f32(X):
        return None
    p = planned.params(kind, int(np.prod(X.shape, dtype=np.int64)), float(alpha), float(beta))
    return planned.NativeStep(X.shape, (planned.Call(fn, p, 0),), holds=p)


def _unary_step(step, operands):
    X = operands[0] if operands else None
    if step.impl.since < 6:
        return None
    return _unary_call(X, _UNARY[step.op_type], step.attrs.get("alpha", 0.2), step.attrs.get("beta", 0.5))


for _name in _UNARY:
    planned.planned(_name)(_unary_step)


@planned.planned("Pow")
def _pow_step(step, operands):
    """X ** 2 for a constant exponent, as X * X (one rounding; NumPy's power, libm's powf, within an ulp).
    (Not X ** 0.5 as a square root: pow(-0, 0.5) is +0 and pow(-inf, 0.5) +inf, where sqrt gives -0 and NaN.)"""
    X, Y = operands
    if type(Y) is not np.ndarray or Y.size != 1 or Y.dtype.kind != "f" or Y.ndim > len(getattr(X, "shape", ())):
        return None
    e = float(Y.reshape(-1)[0])
    return _unary_call(X, _SQUARE) if e == 2.0 else None


@planned.planned("Clip")
def _clip_step(step, operands):
    """Clip of float32 between constant bounds (attributes before opset 11, inputs from it)."""
    X = operands[0]
    if step.impl.since >= 11:
        bounds = [operands[i] if len(operands) > i else None for i in (1, 2)]
        if any(b is not None and (type(b) is not np.ndarray or b.size != 1 or b.dtype != np.float32) for b in bounds):
            return None
        lo, hi = (-math.inf if bounds[0] is None else float(bounds[0].reshape(-1)[0]),
                  math.inf if bounds[1] is None else float(bounds[1].reshape(-1)[0]))
    elif step.impl.since >= 6:
        big = float(np.finfo(np.float32).max)
        lo, hi = (float(step.attrs.get(k, d)) for k, d in (("min", -big), ("max", big)))
    else:
        return None
    return _unary_call(X, _CLIP, lo, hi)
