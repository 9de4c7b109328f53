"""Gelu (ai.onnx, and com.microsoft Gelu and BiasGelu) on the CPU (``@op(..., device="cpu")``): the
exact (erf) form of float32 in one native pass (``cpu_kernels/special.c``); the generic ops stay the
fallback and test oracle.
"""

from __future__ import annotations

import math

import numpy as np

from ...registry import op
from .. import activation as _activation
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
