"""Erf and Sigmoid on the CPU (``@op(..., device="cpu")``) and the native special functions of
``cpu_kernels/special.c``: one pass over the array, within an ulp, where the generic
:func:`gpuops.ops.elementwise.erf` (the fallback and test oracle) spends dozens of NumPy passes and
the generic Sigmoid five (each with an array of its own: 2-8x the kernel's time, measured on
EfficientNet-B0's SiLU shapes). NumPy's own exp and tanh are vectorised already and stay.
"""

from __future__ import annotations

import numpy as np

from ... import native
from ...registry import op
from .. import activation as _activation
from .. import elementwise as _elementwise

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
