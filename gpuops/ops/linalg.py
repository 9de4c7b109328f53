"""Linear algebra: MatMul, Gemm, Einsum and Det.

float16/bfloat16 operands are multiplied in float32 and the result cast back (NumPy has no
bfloat16 BLAS and accumulates float16 in float16). MatMulInteger lives with the quantization ops.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ..errors import NodeError
from ..registry import op

_HALF = {np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}


def up(x):
    """``x`` in float32 when it is float16/bfloat16, else unchanged. (On the CPU, a weight's float32
    copy is made once per session: :mod:`gpuops.ops.cpu.linalg`.)"""
    if np.dtype(x.dtype) not in _HALF:
        return x
    return x.astype(np.float32)


@op("MatMul", since=1)  # 9 and 13 only add types
def MatMul(xp, A, B):
    """numpy.matmul semantics: 1-D operands are promoted to matrices and the added dim dropped."""
    if A.ndim == 0 or B.ndim == 0:
        raise NodeError(f"MatMul needs operands of rank >= 1, got shapes {tuple(A.shape)} and {tuple(B.shape)}")
    if A.ndim > 2 and B.ndim == 2 and A.shape[-1] == B.shape[0]:  # one GEMM over the stacked rows
        Y = xp.matmul(xp.reshape(up(A), (-1, A.shape[-1])), up(B))
        return xp.reshape(Y, tuple(A.shape[:-1]) + (B.shape[1],)).astype(A.dtype, copy=False)
    return xp.asarray(xp.matmul(up(A), up(B))).astype(A.dtype, copy=False)  # NumPy: a scalar for 1-D @ 1-D


def _gemm(xp, A, B, C, alpha: float, beta: float, transA: int, transB: int, broadcast: bool = True):
    if A.ndim != 2 or B.ndim != 2:
        raise NodeError(f"Gemm needs 2-D A and B, got shapes {tuple(A.shape)} and {tuple(B.shape)}")
    a = up(A).T if transA else up(A)
    b = up(B).T if transB else up(B)
    if a.shape[1] != b.shape[0]:
        raise NodeError(f"Gemm: inner dimensions differ: A' is {tuple(a.shape)}, B' is {tuple(b.shape)}")
    y = xp.matmul(a, b)  # a new array: scaled and shifted in place
    if alpha != 1.0:
        y *= alpha
    if C is not None and beta != 0.0:
        out = (a.shape[0], b.shape[1])
        ok = tuple(C.shape) == out if not broadcast else (
            C.ndim <= 2 and all(c in (1, o) for c, o in zip(C.shape[::-1], out[::-1])))
        if not ok:
            how = "equal" if not broadcast else "be unidirectionally broadcastable to"
            raise NodeError(f"Gemm: C of shape {tuple(C.shape)} must {how} the output shape {out}")
        c = up(C)
        y += c * beta if beta != 1.0 else c
    return y.astype(A.dtype, copy=False)


@op("Gemm", since=1)  # 6 is the same; C broadcasts only with broadcast=1
def Gemm_1(xp, A, B, C=None, *, alpha=1.0, beta=1.0, broadcast=0, transA=0, transB=0):
    return _gemm(xp, A, B, C, alpha, beta, transA, transB, broadcast=bool(broadcast))


@op("Gemm", since=7)  # 11 makes C optional; 9 and 13 only add types
def Gemm(xp, A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
    return _gemm(xp, A, B, C, alpha, beta, transA, transB)


@op("Einsum", since=12)  # 28 only changes types
def Einsum(xp, *Inputs, equation):
    if not Inputs:
        raise NodeError("Einsum needs at least one input")
    eq = equation.replace(" ", "")
    if eq.split("->")[0].count(",") + 1 != len(Inputs):
        raise NodeError(f"Einsum equation {equation!r} does not match {len(Inputs)} inputs")
    # optimize: contractions through BLAS (tensordot) rather than einsum's own loops, once the
    # operands are big enough to repay the path search
    big = len(Inputs) > 2 or (len(Inputs) == 2 and sum(math.prod(x.shape) for x in Inputs) > 4096)
    y = xp.einsum(eq, *(up(x) for x in Inputs), optimize=big)
    return xp.asarray(y).astype(Inputs[0].dtype)


@op("Det", since=11)  # 22 only adds bfloat16
def Det(xp, X):
    if X.ndim < 2 or X.shape[-1] != X.shape[-2]:
        raise NodeError(f"Det needs square matrices in the last two dims, got shape {tuple(X.shape)}")
    return xp.asarray(xp.linalg.det(up(X))).astype(X.dtype)
