"""MatMul and Gemm on the CPU (``@op(..., device="cpu")``): float32 and float64 MatMul straight to
``np.matmul`` (the generic op's product without its dtype dispatch); float32 Gemm and com.microsoft
FusedGemm of 2-D operands with the generic op's arithmetic (the same product, scaling, bias add and
activation in the same order) without its general checks; a float16/bfloat16 weight's float32 copy
(NumPy has no bfloat16 BLAS and accumulates float16 in float16, so the generic ops of
:mod:`gpuops.ops.linalg` multiply in float32) made once per session, kept on the plan step (the
ops' ``prepare`` hook), instead of on every run.
"""

from __future__ import annotations

import math

import numpy as np

from ... import threads
from ...registry import op
from .. import linalg as _linalg
from ..contrib import transformer as _transformer
from . import native_gemm, planned
from ._common import frozen
from . import elementwise as _elementwise
from .elementwise import native_special


def prepare_float32(constants, attrs):
    """``{position: (constant input, its float32 copy)}`` of the constant float16/bfloat16 inputs, or None."""
    kept = {i: (a, frozen(a.astype(np.float32))) for i, a in constants.items()
            if type(a) is np.ndarray and np.dtype(a.dtype) in _linalg._HALF}
    return kept or None


def _up(prepared, i, a):
    """Input ``i`` (``a``) in float32 when it is the step's constant with a kept copy, else ``a``."""
    hit = prepared.get(i)
    return hit[1] if hit is not None and hit[0] is a else a


_BLAS = {np.dtype(np.float32), np.dtype(np.float64)}


@op("MatMul", since=1, device="cpu", prepare=prepare_float32)
def MatMul(xp, A, B, *, prepared=None):
    if prepared is None:
        # float32 / float64 of rank >= 2 (most MatMuls): the generic op's product, without its dtype
        # dispatch (a quarter to half of a small product's cost)
        if type(A) is np.ndarray and type(B) is np.ndarray and A.dtype == B.dtype and A.dtype in _BLAS \
                and A.ndim >= 2 and B.ndim >= 2:
            if B.ndim == 2 and A.ndim > 2 and A.shape[-1] == B.shape[0]:  # one GEMM over the stacked rows
                return np.matmul(A.reshape(-1, A.shape[-1]), B).reshape(A.shape[:-1] + B.shape[1:])
            if A.shape[-1] == B.shape[-2]:
                return np.matmul(A, B)
        return _linalg.MatMul(xp, A, B)
    return _linalg.MatMul(xp, _up(prepared, 0, A), _up(prepared, 1, B)).astype(A.dtype, copy=False)


@op("Gemm", since=1, device="cpu", prepare=prepare_float32)
def Gemm_1(xp, A, B, C=None, *, alpha=1.0, beta=1.0, broadcast=0, transA=0, transB=0, prepared=None):
    if prepared is None:
        return _linalg.Gemm_1(xp, A, B, C, alpha=alpha, beta=beta, broadcast=broadcast, transA=transA, transB=transB)
    Y = _linalg.Gemm_1(xp, _up(prepared, 0, A), _up(prepared, 1, B), None if C is None else _up(prepared, 2, C),
                       alpha=alpha, beta=beta, broadcast=broadcast, transA=transA, transB=transB)
    return Y.astype(A.dtype, copy=False)


_F32 = np.dtype(np.float32)


def _gemm32(A, B, C, alpha, beta, transA, transB):
    """:func:`gpuops.ops.linalg.Gemm`'s result for 2-D float32 NumPy operands whose shapes fit (C
    broadcasting to the output), in the same operations; None for anything else (the generic op then
    runs, and gives its errors)."""
    if type(A) is not np.ndarray or type(B) is not np.ndarray or A.dtype != _F32 or B.dtype != _F32 \
            or A.ndim != 2 or B.ndim != 2:
        return None
    a = A.T if transA else A
    b = B.T if transB else B
    if a.shape[1] != b.shape[0]:
        return None
    bias = C is not None and beta != 0.0
    if bias:
        if type(C) is not np.ndarray or C.dtype != _F32 or C.ndim > 2:
            return None
        cs = C.shape
        if cs and (cs[-1] != 1 and cs[-1] != b.shape[1] or len(cs) == 2 and cs[0] != 1 and cs[0] != a.shape[0]):
            return None
    y = np.matmul(a, b)
    if alpha != 1.0:
        y *= alpha
    if bias:
        y += C * beta if beta != 1.0 else C
    return y


@op("Gemm", since=7, device="cpu", prepare=prepare_float32)
def Gemm(xp, A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0, prepared=None):
    if prepared is None:
        y = _gemm32(A, B, C, alpha, beta, transA, transB)
        if y is not None:
            return y
        return _linalg.Gemm(xp, A, B, C, alpha=alpha, beta=beta, transA=transA, transB=transB)
    Y = _linalg.Gemm(xp, _up(prepared, 0, A), _up(prepared, 1, B), None if C is None else _up(prepared, 2, C),
                     alpha=alpha, beta=beta, transA=transA, transB=transB)
    return Y.astype(A.dtype, copy=False)


@op("FusedGemm", domain="com.microsoft", since=1, device="cpu")
def FusedGemm(xp, A, B, C=None, *, activation=None, activation_alpha=None, activation_beta=None,
              activation_gamma=None, alpha=1.0, beta=1.0, transA=0, transB=0):
    y = _gemm32(A, B, C, alpha, beta, transA, transB)
    if y is None:
        return _transformer.FusedGemm(xp, A, B, C, activation=activation, activation_alpha=activation_alpha,
                                      activation_beta=activation_beta, activation_gamma=activation_gamma,
                                      alpha=alpha, beta=beta, transA=transA, transB=transB)
    if activation == "Relu":  # (fused_activation's, without its dispatch)
        return np.maximum(y, 0, out=y)
    if activation == "Sigmoid":  # the native kernel, one pass (the generic sigmoid's five NumPy passes cost more)
        s = native_special("sigmoid", y, (np.float32,))
        if s is not None:
            return s
    return _transformer.fused_activation(xp, y, activation, activation_alpha, activation_beta, activation_gamma,
                                         own=True)


# -- native programs (gpuops.onnx.programs) ------------------------------------------------------------

MAX_PACKED = 1 << 24  # floats of a weight a program packs for the native GEMM (a copy of it, kept per session)
FC_MIN_WORK = 1 << 20  # multiply-adds from which a product of several rows runs by the native GEMM (below: BLAS)


def _fc(A, B, trans_b: bool, C=None):
    """The :class:`.planned.NativeStep` of ``A @ W.T (+ C)``, W = B (trans_b) or B.T, by the native GEMM on
    the constant weight packed once (``fc_planned_f32``): a float32 operand A (..., K), B a constant 2-D
    float32 array, C None or a constant bias of W's rows. None where it does not apply: other operands,
    weights over MAX_PACKED, or products of several rows under FC_MIN_WORK multiply-adds, where the BLAS's
    sgemm was as fast or faster (one core of the AVX-512 Xeon, 2026-11-28: 0.3-0.7x of its time on
    products of 8-100 rows of 40-512 inputs; 1.1-1.8x from 1M multiply-adds, 2.6-3.7x on 2-8 rows of 512
    or more outputs)."""
    fn = planned.kernel("fc_planned_f32")
    if fn is None or not planned.is_f32(A) or A.ndim < 2 or type(B) is not np.ndarray or B.dtype != _F32 \
            or B.ndim != 2 or B.size > MAX_PACKED:
        return None
    M, K = B.shape if trans_b else B.shape[::-1]
    N = math.prod(A.shape[:-1])
    if A.shape[-1] != K or not M or (N > 1 and N * K * M < FC_MIN_WORK):
        return None
    if C is not None and not (type(C) is np.ndarray and C.dtype == _F32 and C.size == M and C.shape in ((M,), (1, M))):
        return None
    pk = native_gemm.constant_pack(B, trans_b, None if C is None else C.reshape(M))
    if pk is None:
        return None
    p = planned.params(pk.address, pk.bias_address or 0, K, M, M, K, N, -math.inf, math.inf)
    return planned.NativeStep(A.shape[:-1] + (M,), (planned.Call(fn, p, 0),), holds=(p, pk))


def matmul_params(M: int, N: int, K: int, trans_b: bool = False, b: int = 0, alpha: float = 1.0,
                  ldy: int = 0) -> np.ndarray | None:
    """``program.c``'s ``matmul_planned_f32`` parameters of an M x K x N product by the BLAS NumPy uses (b: a
    constant B's address, or 0 for the call's own; ldy: the output's row distance, 0 for N); None without
    that BLAS's sgemm."""
    sgemm = threads.blas_sgemm()
    if sgemm is None:
        return None
    return planned.params(sgemm[0], int(sgemm[1]), M, N, K, int(trans_b), b, float(alpha), sgemm[2], sgemm[3], ldy)


def _product(A, B, trans_b: bool, alpha: float = 1.0):
    """The :class:`.planned.Call` of ``alpha A @ B`` (``B.T`` with ``trans_b``) by the BLAS's sgemm, A a float32
    operand (..., K) and B a 2-D float32 operand or C-contiguous constant; None where it does not apply."""
    fn = planned.kernel("matmul_planned_f32")
    if threads.blas_sgemm() is None or fn is None or not planned.is_f32(A) or A.ndim < 2:
        return None
    const = type(B) is np.ndarray
    if B is None or B.ndim != 2 or (const and (B.dtype != np.float32 or not B.flags.c_contiguous)) \
            or (not const and not planned.is_f32(B)):
        return None
    N, K = B.shape if trans_b else B.shape[::-1]
    if A.shape[-1] != K:
        return None
    M = math.prod(A.shape[:-1])
    p = matmul_params(M, N, K, trans_b, B.ctypes.data if const else 0, alpha)
    return planned.Call(fn, p, 0, None if const else 1), A.shape[:-1] + (N,), (p, B)


@planned.planned("MatMul")
def _matmul_step(step, operands):
    if step.prepared is not None:  # a float16 weight, multiplied in float32
        return None
    fc = _fc(operands[0], operands[1], False)
    if fc is not None:
        return fc
    got = _product(operands[0], operands[1], False)
    return None if got is None else planned.NativeStep(got[1], (got[0],), holds=got[2])


_FUSED = {"Relu": 0, "Sigmoid": 1, "Tanh": 8}  # FusedGemm's activations: special.c's UNARY_*


@planned.planned("FusedGemm", "com.microsoft")
def _fused_gemm_step(step, operands):
    """FusedGemm: the Gemm's calls, then its activation over the output in place."""
    kind = _FUSED.get(step.attrs.get("activation"))
    fn = planned.kernel("unary_planned_f32")
    ns = None if kind is None or fn is None else _gemm_step(step, operands)
    if ns is None:
        return None
    p = planned.params(kind, math.prod(ns.shape), 0.0, 0.0)
    return ns._replace(calls=ns.calls + (planned.Call(fn, p, planned.OUTPUT),), holds=(ns.holds, p))


@planned.planned("Gemm")
def _gemm_step(step, operands):
    """A fully connected layer (a constant float32 ``B`` and bias ``C``) by the native GEMM on the packed
    weight (:func:`_fc`); else ``alpha A B`` by the BLAS, then ``C`` added as it broadcasts (a constant or a
    run-time value)."""
    A, B = operands[0], operands[1]
    C = operands[2] if len(operands) > 2 else None
    a = step.attrs
    alpha = float(a.get("alpha", 1.0))
    if (step.op_type == "Gemm" and step.impl.since < 7) or step.prepared is not None or not planned.is_f32(A) \
            or A.ndim != 2 or a.get("transA", 0) or type(B) is not np.ndarray or B.dtype != np.float32 \
            or B.ndim != 2 or (C is not None and a.get("beta", 1.0) != 1.0):
        return None
    trans_b = bool(a.get("transB", 0))
    M, K = B.shape if trans_b else B.shape[::-1]
    if K != A.shape[1] or not M:
        return None
    fc = _fc(A, B, trans_b, C) if alpha == 1.0 else None
    if fc is not None:
        return fc
    got = _product(A, np.ascontiguousarray(B), trans_b, alpha)
    add = planned.kernel("binary_planned_f32")
    if got is None or add is None:
        return None
    calls, holds = [got[0]], [got[2]]
    if C is not None:
        if not (planned.is_f32(C) or (type(C) is np.ndarray and C.dtype == np.float32 and C.flags.c_contiguous)):
            return None
        mode = _elementwise.broadcast(got[1], tuple(C.shape))
        if mode is None:
            return None
        p = planned.params(0, *mode[1:], mode[0])  # program.c: BINARY_ADD
        calls.append(planned.Call(add, p, planned.OUTPUT, 2))
        holds.append(p)
    return planned.NativeStep(got[1], tuple(calls), holds=holds)
