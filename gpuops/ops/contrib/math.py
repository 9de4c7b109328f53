"""com.microsoft math ops: Rfft, Irfft, ComplexMul, ComplexMulConj, CDist, Inverse, Trilu, Range,
Unique, GatherND, ExpandDims, Pad, IsAllFinite.

Trilu, Range, GatherND and Pad are the ai.onnx ops (``shape`` / ``indexing`` modules) under the
contrib signatures; Unique is ai.onnx Unique in first-occurrence order.

Rfft / Irfft follow the (old) ``torch.rfft`` / ``torch.irfft`` contract the CUDA kernels implement:
the transform covers the last ``signal_ndim`` axes; complex values are a trailing axis of 2 (real,
imaginary); ``onesided`` keeps the ``n // 2 + 1`` non-negative frequencies of the last axis;
``normalized`` scales by ``1 / sqrt(n)`` (n: the signal's element count), else Irfft divides by n.

CDist implements scipy.spatial.distance.cdist's metrics that need no extra parameters (minkowski
uses p = 2; mahalanobis and seuclidean estimate V / VI from the stacked inputs as scipy does);
``wminkowski`` needs weights the op cannot receive and is rejected.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import NodeError
from ...registry import op
from ..elementwise import clamp
from ..indexing import GatherND_11 as _gather_nd
from ..shape import Pad_11 as _pad
from ..shape import Trilu as _trilu
from ..selection import Unique as _unique
from ..constants import range_values

MS = "com.microsoft"


def _work(dtype):
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


# -- FFT ----------------------------------------------------------------------------------------

@op("Rfft", domain=MS, since=1)
def Rfft(xp, X, *, normalized=0, onesided=1, signal_ndim=1):
    nd = int(signal_ndim)
    if not 1 <= nd <= min(3, X.ndim):
        raise NodeError(f"signal_ndim must be 1..3 and at most the rank {X.ndim}, got {nd}")
    axes = tuple(range(X.ndim - nd, X.ndim))
    x = X.astype(_work(X.dtype))
    y = xp.fft.rfftn(x, axes=axes) if onesided else xp.fft.fftn(x, axes=axes)
    if normalized:
        y = y * (1.0 / math.sqrt(math.prod(X.shape[a] for a in axes)))
    return xp.stack([xp.real(y), xp.imag(y)], axis=-1).astype(X.dtype)


@op("Irfft", domain=MS, since=1)
def Irfft(xp, X, *, normalized=0, onesided=1, signal_ndim):
    nd = int(signal_ndim)
    if X.shape[-1] != 2 or not 1 <= nd <= min(3, X.ndim - 1):
        raise NodeError(f"Irfft takes [..., 2] complex input with 1 <= signal_ndim <= 3, got shape "
                        f"{tuple(X.shape)} and signal_ndim {nd}")
    x = X.astype(_work(X.dtype))
    z = x[..., 0] + 1j * x[..., 1]
    axes = tuple(range(z.ndim - nd, z.ndim))
    if onesided:
        sizes = [z.shape[a] for a in axes[:-1]] + [2 * (z.shape[-1] - 1)]
        y = xp.fft.irfftn(z, s=sizes, axes=axes)
    else:
        sizes = [z.shape[a] for a in axes]
        y = xp.real(xp.fft.ifftn(z, axes=axes))
    if normalized:  # orthonormal: ifft's 1/n becomes 1/sqrt(n)
        y = y * math.sqrt(math.prod(sizes))
    return y.astype(X.dtype)


def _complex_mul(xp, A, B, conj):
    if A.shape[-1] != 2 or B.shape[-1] != 2:
        raise NodeError(f"complex tensors need a last axis of 2, got {tuple(A.shape)} and {tuple(B.shape)}")
    ct = _work(A.dtype)
    ar, ai = A[..., 0].astype(ct), A[..., 1].astype(ct)
    br, bi = B[..., 0].astype(ct), B[..., 1].astype(ct)
    if conj:
        bi = -bi
    return xp.stack([ar * br - ai * bi, ar * bi + ai * br], axis=-1).astype(A.dtype)


@op("ComplexMul", domain=MS, since=1)
def ComplexMul(xp, A, B):
    return _complex_mul(xp, A, B, conj=False)


@op("ComplexMulConj", domain=MS, since=1)
def ComplexMulConj(xp, A, B):
    """A * conj(B)."""
    return _complex_mul(xp, A, B, conj=True)


# -- CDist --------------------------------------------------------------------------------------

_CHUNK = 1 << 24  # elements of one (rows, K, N) pairwise block


def _pairwise(xp, A, B, fn):
    """fn(a (m, 1, N), b (1, K, N)) -> (m, K), evaluated over row blocks of A."""
    rows = max(1, _CHUNK // max(1, B.shape[0] * max(1, A.shape[1])))
    parts = [fn(A[i:i + rows, None, :], B[None, :, :]) for i in range(0, A.shape[0], rows)]
    if not parts:
        return xp.zeros((0, B.shape[0]), dtype=A.dtype)
    return parts[0] if len(parts) == 1 else xp.concat(parts, axis=0)


def _safe_div(xp, num, den):
    """num / den with 0 where den is 0 (scipy's convention for 0/0 in these metrics)."""
    return xp.where(den == 0, xp.zeros_like(num), num / xp.where(den == 0, xp.ones_like(den), den))


def _boolean_counts(a, b):
    a, b = a != 0, b != 0
    ntt = (a & b).sum(axis=-1)
    ntf = (a & ~b).sum(axis=-1)
    nft = (~a & b).sum(axis=-1)
    nff = (~a & ~b).sum(axis=-1)
    return ntt, ntf, nft, nff


def _cdist_metric(xp, metric, A, B):
    n = A.shape[1]
    if metric == "sqeuclidean":
        return lambda a, b: ((a - b) ** 2).sum(axis=-1)
    if metric in ("euclidean", "minkowski"):
        return lambda a, b: xp.sqrt(((a - b) ** 2).sum(axis=-1))
    if metric == "cityblock":
        return lambda a, b: xp.abs(a - b).sum(axis=-1)
    if metric == "chebyshev":
        return lambda a, b: xp.max(xp.abs(a - b), axis=-1)
    if metric == "braycurtis":
        return lambda a, b: _safe_div(xp, xp.abs(a - b).sum(axis=-1), xp.abs(a + b).sum(axis=-1))
    if metric == "canberra":
        return lambda a, b: _safe_div(xp, xp.abs(a - b), xp.abs(a) + xp.abs(b)).sum(axis=-1)
    if metric in ("cosine", "correlation"):
        def cos(a, b):
            if metric == "correlation":
                a = a - a.mean(axis=-1, keepdims=True)
                b = b - b.mean(axis=-1, keepdims=True)
            dot = (a * b).sum(axis=-1)
            norm = xp.sqrt((a * a).sum(axis=-1)) * xp.sqrt((b * b).sum(axis=-1))
            return clamp(xp, 1.0 - dot / norm, 0.0, 2.0)
        return cos
    if metric == "hamming":
        return lambda a, b: (a != b).sum(axis=-1).astype(A.dtype) / n
    if metric == "jensenshannon":
        def js(a, b):
            p = a / a.sum(axis=-1, keepdims=True)
            q = b / b.sum(axis=-1, keepdims=True)
            m = (p + q) / 2

            def rel(u, v):
                return xp.where(u > 0, u * xp.log(_safe_div(xp, u, v) + (u <= 0)), xp.zeros_like(u * v))
            return xp.sqrt(xp.maximum((rel(p, m).sum(axis=-1) + rel(q, m).sum(axis=-1)) / 2, 0.0))
        return js
    if metric in ("seuclidean", "mahalanobis"):
        both = xp.concat([A, B], axis=0)
        if metric == "seuclidean":
            centred = both - both.mean(axis=0, keepdims=True)
            var = (centred * centred).sum(axis=0) / (both.shape[0] - 1)  # sample variance, as scipy
            return lambda a, b: xp.sqrt((((a - b) ** 2) / var).sum(axis=-1))
        centred = both - both.mean(axis=0, keepdims=True)
        VI = xp.linalg.inv(xp.matmul(centred.T, centred) / (both.shape[0] - 1))

        def maha(a, b):
            d = a - b
            return xp.sqrt(xp.maximum((xp.matmul(d, VI) * d).sum(axis=-1), 0.0))
        return maha
    boolean = {
        "dice": lambda ntt, ntf, nft, nff: _safe_div(xp, (ntf + nft) * 1.0, 2.0 * ntt + ntf + nft),
        "jaccard": lambda ntt, ntf, nft, nff: _safe_div(xp, (ntf + nft) * 1.0, (ntt + ntf + nft) * 1.0),
        "kulsinski": lambda ntt, ntf, nft, nff: (ntf + nft - ntt + n) / (ntf + nft + n * 1.0),
        "matching": lambda ntt, ntf, nft, nff: (ntf + nft) / (n * 1.0),
        "rogerstanimoto": lambda ntt, ntf, nft, nff: 2.0 * (ntf + nft) / (ntt + nff + 2.0 * (ntf + nft)),
        "russellrao": lambda ntt, ntf, nft, nff: (n - ntt) / (n * 1.0),
        "sokalmichener": lambda ntt, ntf, nft, nff: 2.0 * (ntf + nft) / (ntt + nff + 2.0 * (ntf + nft)),
        "sokalsneath": lambda ntt, ntf, nft, nff: _safe_div(xp, 2.0 * (ntf + nft), ntt + 2.0 * (ntf + nft)),
        "yule": lambda ntt, ntf, nft, nff: _safe_div(xp, 2.0 * ntf * nft, ntt * nff + ntf * nft * 1.0),
    }
    if metric in boolean:
        f = boolean[metric]
        return lambda a, b: f(*_boolean_counts(a, b))
    if metric == "wminkowski":
        raise NodeError("CDist metric 'wminkowski' needs weights, which the op cannot receive")
    raise NodeError(f"unknown CDist metric {metric!r}")


@op("CDist", domain=MS, since=1)
def CDist(xp, A, B, *, metric="sqeuclidean"):
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[1]:
        raise NodeError(f"CDist takes A (M, N) and B (K, N), got {tuple(A.shape)} and {tuple(B.shape)}")
    fn = _cdist_metric(xp, metric, A, B)
    return _pairwise(xp, A, B, fn).astype(A.dtype)


# -- linear algebra and tensor ops --------------------------------------------------------------

@op("Inverse", domain=MS, since=1)
def Inverse(xp, X):
    if X.ndim < 2 or X.shape[-1] != X.shape[-2]:
        raise NodeError(f"Inverse needs square matrices in the last two axes, got shape {tuple(X.shape)}")
    return xp.linalg.inv(X.astype(_work(X.dtype))).astype(X.dtype)


@op("Trilu", domain=MS, since=1, host_inputs=(1,))
def Trilu(xp, X, k=None, *, upper=1):
    return _trilu(xp, X, k, upper=upper)


@op("Range", domain=MS, since=1, host_inputs=(0, 1, 2))
def Range(xp, start, limit, delta=None):
    if delta is None:
        delta = np.ones((), dtype=np.asarray(start).dtype)
    return range_values(xp, start, limit, delta)


@op("Unique", domain=MS, since=1, syncs="the output's size depends on the data")
def Unique(xp, x):
    """The distinct values of a 1-D tensor in order of first occurrence, each element's index into
    them, and their counts."""
    if x.ndim != 1:
        raise NodeError(f"Unique takes a 1-D tensor, got shape {tuple(x.shape)}")
    y, _, inverse, counts = _unique(xp, x, sorted=0)
    return y, inverse, counts


@op("GatherND", domain=MS, since=1)
def GatherND(xp, data, indices):
    return _gather_nd(xp, data, indices)


@op("ExpandDims", domain=MS, since=1, host_inputs=(1,))
def ExpandDims(xp, X, axis):
    a = int(np.asarray(axis).reshape(-1)[0])
    rank = X.ndim + 1
    if not -rank <= a < rank:
        raise NodeError(f"axis {a} is out of range [{-rank}, {rank - 1}] for an input of rank {X.ndim}")
    return xp.expand_dims(X, axis=a % rank)


@op("Pad", domain=MS, since=1, host_inputs=(1, 2))
def Pad(xp, data, pads, value=None, *, mode="constant"):
    """ai.onnx Pad (opset 11); ``pads`` may also be [1, 2 * rank]."""
    return _pad(xp, data, np.asarray(pads).reshape(-1), value, mode=mode)


@op("IsAllFinite", domain=MS, since=1)
def IsAllFinite(xp, *input, isinf_only=0, isnan_only=0):  # noqa: A002
    """True when no input holds an Inf or NaN (only Inf with ``isinf_only``, only NaN with ``isnan_only``)."""
    if isinf_only and isnan_only:
        raise NodeError("isinf_only and isnan_only cannot both be set")
    ok = xp.asarray(True)
    for t in input:
        if isinf_only:
            bad = xp.isinf(t)
        elif isnan_only:
            bad = xp.isnan(t)
        else:
            bad = ~xp.isfinite(t)
        ok = ok & ~xp.any(bad)
    return xp.asarray(ok, dtype=bool)
