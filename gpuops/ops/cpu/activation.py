"""Gelu (ai.onnx, and com.microsoft Gelu, BiasGelu and FastGelu) on the CPU (``@op(..., device="cpu")``):
the exact (erf) form of float32 in one native pass (``cpu_kernels/special.c``), BiasGelu's bias added in
it; the tanh form (ai.onnx ``approximate="tanh"``, FastGelu) and com.microsoft QuickGelu (SiLU / Swish,
:mod:`gpuops.optimizer.silu`) in one native pass of float32 lanes.
The generic ops stay the fallback and test oracle.
"""

from __future__ import annotations

import math

import numpy as np

from ... import native
from ...registry import op
from .. import activation as _activation
from ..contrib import fusion as _fusion
from ..contrib import transformer as _transformer
from . import planned
from ._common import on_host
from .elementwise import erf, native_special

MS = "com.microsoft"


def _address(a: np.ndarray) -> int:
    return native.address(a) if a.flags.writeable else a.ctypes.data


def prepare_bias(constants, attrs):
    """BiasGelu's and FastGelu's ``prepare`` hook: a constant float32 bias and its address, (bias, address)
    (a read-only array's address costs a microsecond or more to find on every run), or None."""
    b = constants.get(1)
    if type(b) is np.ndarray and b.dtype == np.float32 and b.ndim == 1 and b.size and b.flags.c_contiguous:
        return b, _address(b)
    return None


def biased(name: str, X, bias, prepared=None):
    """``cpu_kernels/special.c``'s ``name`` (``bias_gelu_f32``, ``fast_gelu_f32``) of float32 X plus a bias
    along its last axis (None: none) in one pass; None where it does not apply (dtypes, shapes, CuPy
    arrays, native kernels off). ``prepared``: :func:`prepare_bias`'s."""
    if type(X) is not np.ndarray or X.dtype != np.float32 or not X.size or not X.ndim:
        return None
    n = X.shape[-1]
    if bias is not None and (type(bias) is not np.ndarray or bias.dtype != np.float32 or bias.shape != (n,)):
        return None
    fn = native.function(name)
    if fn is None:
        return None
    X = np.ascontiguousarray(X)
    Y = np.empty(X.shape, np.float32)
    b = None if bias is None else prepared[1] if prepared is not None and prepared[0] is bias else _address(bias)
    native.call(fn, _address(X), b, native.address(Y), X.size, n)
    return Y


@op("Gelu", since=20, device="cpu")
def Gelu(xp, X, *, approximate="none"):
    if approximate == "tanh":
        Y = biased("fast_gelu_f32", X, None)
        if Y is not None:
            return Y
    if approximate != "none" or not on_host(X):
        return _activation.Gelu(xp, X, approximate=approximate)
    Y = native_special("gelu", X, (np.float32,))
    if Y is not None:
        return Y
    return _activation.cast_like(X, 0.5 * X * (1 + erf(xp, X * (1 / math.sqrt(2)))))  # erf's own kernel


def _gelu(xp, X):
    """com.microsoft's Gelu: float16/bfloat16 computed in float32."""
    ct = _transformer.accumulate_dtype(X)
    return Gelu(xp, X.astype(ct)).astype(X.dtype, copy=False)


@op("Gelu", domain=MS, since=1, device="cpu")
def Gelu_ms(xp, X):
    Y = biased("bias_gelu_f32", X, None)
    return _gelu(xp, X) if Y is None else Y


@op("BiasGelu", domain=MS, since=1, device="cpu", prepare=prepare_bias)
def BiasGelu(xp, A, B, *, prepared=None):
    Y = biased("bias_gelu_f32", A, B, prepared)
    return _gelu(xp, A + B) if Y is None else Y


@op("FastGelu", domain=MS, since=1, device="cpu", prepare=prepare_bias)
def FastGelu(xp, X, bias=None, *, prepared=None):
    Y = biased("fast_gelu_f32", X, bias, prepared)
    return _transformer.FastGelu(xp, X, bias) if Y is None else Y


@op("QuickGelu", domain=MS, since=1, device="cpu")
def QuickGelu(xp, X, *, alpha=1.702):
    """X * sigmoid(alpha X) (SiLU / Swish for alpha 1) in one native pass over float32; without native
    kernels X / (1 + exp(-alpha X)), three passes over one new array."""
    if not on_host(X) or X.dtype != np.float32:
        return _fusion.QuickGelu(xp, X, alpha=alpha)
    fn = native.function("quick_gelu_f32") if X.size else None
    if fn is not None:
        X = np.ascontiguousarray(X)
        Y = np.empty_like(X)
        native.call(fn, native.ptr(X), native.address(Y), X.size, float(alpha))
        return Y
    S = np.multiply(X, np.float32(-alpha))
    with np.errstate(over="ignore"):  # exp overflows to inf below -88: the quotient is then 0
        np.exp(S, out=S)
    S += 1
    with np.errstate(invalid="ignore"):  # -inf / inf: NaN, as -inf * sigmoid(-inf) = -inf * 0 is
        return np.divide(X, S, out=S)


# -- native programs (gpuops.onnx.programs): the GELU family, as the ops above call special.c ----------------


def _gelu_step(X, kind: int, bias=None, alpha: float = 0.0):
    fn = planned.kernel("gelu_planned_f32")
    if fn is None or not planned.is_f32(X) or not X.ndim or not math.prod(X.shape):
        return None
    n = X.shape[-1]
    if bias is not None and (type(bias) is not np.ndarray or bias.dtype != np.float32 or bias.shape != (n,)):
        return None
    b = None if bias is None else np.ascontiguousarray(bias)
    p = planned.params(kind, math.prod(X.shape), n, 0 if b is None else b.ctypes.data, float(alpha))
    return planned.NativeStep(X.shape, (planned.Call(fn, p, 0),), holds=(p, b))


@planned.planned("Gelu")
def _onnx_gelu_step(step, operands):
    approximate = step.attrs.get("approximate", "none")
    return _gelu_step(operands[0], 0 if approximate == "none" else 2) if approximate in ("none", "tanh") else None


@planned.planned("Gelu", MS)
def _ms_gelu_step(step, operands):
    return _gelu_step(operands[0], 1)


@planned.planned("BiasGelu", MS)
def _bias_gelu_step(step, operands):
    return _gelu_step(operands[0], 1, operands[1]) if len(operands) > 1 and operands[1] is not None else None


@planned.planned("FastGelu", MS)
def _fast_gelu_step(step, operands):
    bias = operands[1] if len(operands) > 1 else None
    return None if type(bias) is planned.Operand else _gelu_step(operands[0], 2, bias)


@planned.planned("QuickGelu", MS)
def _quick_gelu_step(step, operands):
    return _gelu_step(operands[0], 3, alpha=float(step.attrs.get("alpha", 1.702)))
