"""Gelu (ai.onnx, and com.microsoft Gelu and BiasGelu) on the CPU (``@op(..., device="cpu")``): the
exact (erf) form of float32 in one native pass (``cpu_kernels/special.c``); float32 com.microsoft
QuickGelu (SiLU / Swish, :mod:`gpuops.optimizer.silu`) in one native pass (float32 lanes).
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
from ._common import on_host
from .elementwise import erf, native_special

MS = "com.microsoft"


@op("Gelu", since=20, device="cpu")
def Gelu(xp, X, *, approximate="none"):
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
    return _gelu(xp, X)


@op("BiasGelu", domain=MS, since=1, device="cpu")
def BiasGelu(xp, A, B):
    return _gelu(xp, A + B)


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
