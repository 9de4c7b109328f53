"""The array-API layer over a CuPy-like namespace: what ``array_api_compat.cupy`` adds to ``cupy``.

array-api-compat builds its CuPy namespace from its common wrappers bound to ``cupy``; those are
private (``array_api_compat.common._aliases``...), so the CPU stand-in builds its namespace here,
with the same wrappers written over the stand-in's raw CuPy-like namespace ``cp``: whatever they
do (``clip``'s boolean-mask assignments, ``unstack``'s iteration...) happens on stand-in arrays and is
counted and checked there, as it happens on CuPy's arrays under array-api-compat. Written after
array-api-compat 1.16 (``common/_aliases.py``, ``_linalg.py``, ``_fft.py`` and ``cupy/_aliases.py``).
"""

from __future__ import annotations

import inspect
import math
import operator
from typing import NamedTuple

import numpy as np

# -- result types ----------------------------------------------------------------------------------


class UniqueAllResult(NamedTuple):
    values: object
    indices: object
    inverse_indices: object
    counts: object


class UniqueCountsResult(NamedTuple):
    values: object
    counts: object


class UniqueInverseResult(NamedTuple):
    values: object
    inverse_indices: object


class EighResult(NamedTuple):
    eigenvalues: object
    eigenvectors: object


class QRResult(NamedTuple):
    Q: object
    R: object


class SlogdetResult(NamedTuple):
    sign: object
    logabsdet: object


class SVDResult(NamedTuple):
    U: object
    S: object
    Vh: object


def _isdtype(dtype, kind) -> bool:
    """The array API's ``isdtype`` (array-api-compat's, for libraries without one)."""
    if isinstance(kind, tuple):
        return any(_isdtype(dtype, k) for k in kind if not isinstance(k, tuple))
    if isinstance(kind, str):
        kinds = {"bool": None, "signed integer": np.signedinteger, "unsigned integer": np.unsignedinteger,
                 "integral": np.integer, "real floating": np.floating, "complex floating": np.complexfloating,
                 "numeric": np.number}
        if kind not in kinds:
            raise ValueError(f"Unrecognized data type kind: {kind!r}")
        return dtype == np.bool_ if kind == "bool" else np.issubdtype(dtype, kinds[kind])
    return dtype == kind


def _normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    axes = tuple(operator.index(a) for a in (axis if isinstance(axis, (tuple, list, range)) else (axis,)))
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise np.exceptions.AxisError(a, ndim)
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError("repeated axis")
    return tuple(out)


def aliases(cp, ns, *, library_names: frozenset) -> dict:
    """The array-API wrappers of the main namespace: name -> function over the raw namespace ``cp``;
    ``ns`` is the array-API namespace they belong to (what ``array_namespace(x)`` gives for an array,
    which some of them create arrays through). Functions the library has itself (``vecdot``,
    ``isdtype``, ``unstack`` in ``library_names``) are left to it, as array-api-compat does."""
    equal_nan = {"equal_nan": False} if "equal_nan" in inspect.signature(cp.unique).parameters else {}

    # creation functions take a device keyword, which array-api-compat ignores for CuPy (the
    # current device is the one; asarray alone selects it)
    def arange(start, /, stop=None, step=1, *, dtype=None, device=None, **kwargs):
        return cp.arange(start, stop=stop, step=step, dtype=dtype, **kwargs)

    def empty(shape, *, dtype=None, device=None, **kwargs):
        return cp.empty(shape, dtype=dtype, **kwargs)

    def empty_like(x, /, *, dtype=None, device=None, **kwargs):
        return cp.empty_like(x, dtype=dtype, **kwargs)

    def eye(n_rows, n_cols=None, /, *, k=0, dtype=None, device=None, **kwargs):
        return cp.eye(n_rows, M=n_cols, k=k, dtype=dtype, **kwargs)

    def full(shape, fill_value, *, dtype=None, device=None, **kwargs):
        return cp.full(shape, fill_value, dtype=dtype, **kwargs)

    def full_like(x, /, fill_value, *, dtype=None, device=None, **kwargs):
        return cp.full_like(x, fill_value, dtype=dtype, **kwargs)

    def linspace(start, stop, /, num, *, dtype=None, device=None, endpoint=True, **kwargs):
        return cp.linspace(start, stop, num, dtype=dtype, endpoint=endpoint, **kwargs)

    def ones(shape, *, dtype=None, device=None, **kwargs):
        return cp.ones(shape, dtype=dtype, **kwargs)

    def ones_like(x, /, *, dtype=None, device=None, **kwargs):
        return cp.ones_like(x, dtype=dtype, **kwargs)

    def zeros(shape, *, dtype=None, device=None, **kwargs):
        return cp.zeros(shape, dtype=dtype, **kwargs)

    def zeros_like(x, /, *, dtype=None, device=None, **kwargs):
        return cp.zeros_like(x, dtype=dtype, **kwargs)

    # unique() split in four, with named results and inverse indices of x's shape
    def unique_all(x, /):
        values, indices, inverse, counts = cp.unique(x, return_counts=True, return_index=True,
                                                     return_inverse=True, **equal_nan)
        return UniqueAllResult(values, indices, inverse.reshape(x.shape), counts)

    def unique_counts(x, /):
        return UniqueCountsResult(*cp.unique(x, return_counts=True, return_index=False, return_inverse=False,
                                             **equal_nan))

    def unique_inverse(x, /):
        values, inverse = cp.unique(x, return_counts=False, return_index=False, return_inverse=True, **equal_nan)
        return UniqueInverseResult(values, inverse.reshape(x.shape))

    def unique_values(x, /):
        return cp.unique(x, return_counts=False, return_index=False, return_inverse=False, **equal_nan)

    def std(x, /, *, axis=None, correction=0.0, keepdims=False, **kwargs):
        return cp.std(x, axis=axis, ddof=correction, keepdims=keepdims, **kwargs)

    def var(x, /, *, axis=None, correction=0.0, keepdims=False, **kwargs):
        return cp.var(x, axis=axis, ddof=correction, keepdims=keepdims, **kwargs)

    def _cumulative(f, initial):
        def cumulative(x, /, *, axis=None, dtype=None, include_initial=False, **kwargs):
            if axis is None:
                if x.ndim > 1:
                    raise ValueError(f"axis must be specified in {cumulative.__name__} for more than one dimension")
                axis = 0
            res = f(x, axis=axis, dtype=dtype, **kwargs)
            if include_initial:
                shape = list(x.shape)
                shape[axis] = 1
                res = cp.concatenate([initial(shape=shape, dtype=res.dtype, device=res.device), res], axis=axis)
            return res

        return cumulative

    cumulative_sum = _cumulative(cp.cumsum, zeros)
    cumulative_sum.__name__ = "cumulative_sum"
    cumulative_prod = _cumulative(cp.cumprod, ones)
    cumulative_prod.__name__ = "cumulative_prod"

    def clip(x, /, min=None, max=None, *, out=None):
        """The result has x's dtype; bounds are written in with boolean masks (array-api-compat's)."""
        def scalar(a):
            return isinstance(a, (int, float)) or a is None

        shape = cp.broadcast_shapes(x.shape, () if scalar(min) else min.shape, () if scalar(max) else max.shape)
        if ns.isdtype(x.dtype, "integral"):
            if type(min) is int and min <= ns.iinfo(x.dtype).min:
                min = None
            if type(max) is int and max >= ns.iinfo(x.dtype).max:
                max = None
        dev = x.device
        if out is None:
            out = ns.empty(shape, dtype=x.dtype, device=dev)
        out[()] = x
        if min is not None:
            a = cp.broadcast_to(ns.asarray(min, dtype=x.dtype, device=dev), shape)
            ia = (out < a) | cp.isnan(a)
            out[ia] = a[ia]
        if max is not None:
            b = cp.broadcast_to(ns.asarray(max, dtype=x.dtype, device=dev), shape)
            ib = (out > b) | cp.isnan(b)
            out[ib] = b[ib]
        return out[()]

    def permute_dims(x, /, axes):
        return cp.transpose(x, axes)

    def reshape(x, /, shape, *, copy=None, **kwargs):
        if copy is True:
            x = x.copy()
        elif copy is False:
            y = x.view()
            y.shape = shape
            return y
        return cp.reshape(x, shape, **kwargs)

    def argsort(x, /, *, axis=-1, descending=False, stable=True, **kwargs):
        if stable:
            kwargs["kind"] = "stable"
        if not descending:
            return cp.argsort(x, axis=axis, **kwargs)
        # a stable descending sort: argsort of the flipped array, flipped and mapped back
        res = cp.flip(cp.argsort(cp.flip(x, axis=axis), axis=axis, **kwargs), axis=axis)
        return x.shape[axis if axis >= 0 else x.ndim + axis] - 1 - res

    def sort(x, /, *, axis=-1, descending=False, stable=True, **kwargs):
        if stable:
            kwargs["kind"] = "stable"
        res = cp.sort(x, axis=axis, **kwargs)
        return cp.flip(res, axis=axis) if descending else res

    def nonzero(x, /, **kwargs):
        if x.ndim == 0:
            raise ValueError("nonzero() does not support zero-dimensional arrays")
        return cp.nonzero(x, **kwargs)

    def matmul(x1, x2, /, **kwargs):
        return cp.matmul(x1, x2, **kwargs)

    def matrix_transpose(x, /):
        if x.ndim < 2:
            raise ValueError("x must be at least 2-dimensional for matrix_transpose")
        return cp.swapaxes(x, -1, -2)

    def tensordot(x1, x2, /, *, axes=2, **kwargs):
        return cp.tensordot(x1, x2, axes=axes, **kwargs)

    def vecdot(x1, x2, /, *, axis=-1):
        if x1.shape[axis] != x2.shape[axis]:
            raise ValueError("x1 and x2 must have the same size along the given axis")
        x1_, x2_ = cp.broadcast_arrays(cp.moveaxis(x1, axis, -1), cp.moveaxis(x2, axis, -1))
        return (cp.conj(x1_[..., None, :]) @ x2_[..., None])[..., 0, 0]

    def isdtype(dtype, kind):
        return _isdtype(dtype, kind)

    def unstack(x, /, *, axis=0):
        if x.ndim == 0:
            raise ValueError("Input array must be at least 1-d.")
        return tuple(cp.moveaxis(x, axis, 0))

    def sign(x, /, **kwargs):
        if _isdtype(x.dtype, "complex floating"):
            out = (x / cp.abs(x, **kwargs))[...]
            out[x == 0j] = 0j  # sign(0) = 0
        else:
            out = cp.sign(x, **kwargs)  # (a stand-in's sign propagates NaN, as NumPy's does)
        return out[()]

    def finfo(type_, /):
        try:
            return cp.finfo(type_)
        except (ValueError, TypeError):
            return cp.finfo(type_.dtype)

    def iinfo(type_, /):
        try:
            return cp.iinfo(type_)
        except (ValueError, TypeError):
            return cp.iinfo(type_.dtype)

    out = dict(locals())
    for name in ("cp", "ns", "library_names", "equal_nan", "out", "_cumulative"):
        out.pop(name, None)
    for name in ("vecdot", "isdtype", "unstack"):
        if name in library_names:
            del out[name]  # the library's own
    out.update(UniqueAllResult=UniqueAllResult, UniqueCountsResult=UniqueCountsResult,
               UniqueInverseResult=UniqueInverseResult)
    return out


def linalg_aliases(cp, main: dict) -> dict:
    """The array-API wrappers of ``linalg`` over ``cp``; ``main``: those of the main namespace."""
    lin = cp.linalg

    def cross(x1, x2, /, *, axis=-1, **kwargs):
        return cp.cross(x1, x2, axis=axis, **kwargs)

    def outer(x1, x2, /, **kwargs):
        return cp.outer(x1, x2, **kwargs)

    def eigh(x, /, **kwargs):
        return EighResult(*lin.eigh(x, **kwargs))

    def qr(x, /, *, mode="reduced", **kwargs):
        return QRResult(*lin.qr(x, mode=mode, **kwargs))

    def slogdet(x, /, **kwargs):
        return SlogdetResult(*lin.slogdet(x, **kwargs))

    def svd(x, /, *, full_matrices=True, **kwargs):
        return SVDResult(*lin.svd(x, full_matrices=full_matrices, **kwargs))

    def cholesky(x, /, *, upper=False, **kwargs):
        L = lin.cholesky(x, **kwargs)
        if not upper:
            return L
        U = main["matrix_transpose"](L)
        return cp.conj(U) if _isdtype(U.dtype, "complex floating") else U

    def svdvals(x, /):
        return lin.svd(x, compute_uv=False)

    def matrix_rank(x, /, *, rtol=None, **kwargs):
        if x.ndim < 2:
            raise lin.LinAlgError("1-dimensional array given. Array must be at least two-dimensional")
        S = svdvals(x, **kwargs)
        if rtol is None:
            tol = S.max(axis=-1, keepdims=True) * max(x.shape[-2:]) * cp.finfo(S.dtype).eps
        else:
            tol = S.max(axis=-1, keepdims=True) * cp.asarray(rtol)[..., cp.newaxis]
        return cp.count_nonzero(S > tol, axis=-1)

    def pinv(x, /, *, rtol=None, **kwargs):
        if rtol is None:
            rtol = max(x.shape[-2:]) * cp.finfo(x.dtype).eps
        return lin.pinv(x, rcond=rtol, **kwargs)

    def matrix_norm(x, /, *, keepdims=False, ord="fro"):
        return lin.norm(x, axis=(-2, -1), keepdims=keepdims, ord=ord)

    def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
        # linalg.norm takes a 2-tuple (or a 2-D array without axis) as a matrix norm: flatten the axes
        if axis is None:
            _x, _axis = x.ravel(), 0
        elif isinstance(axis, tuple):
            normalized = _normalize_axes(axis, x.ndim)
            rest = tuple(i for i in range(x.ndim) if i not in normalized)
            _x = cp.transpose(x, axis + rest).reshape(
                (math.prod([x.shape[i] for i in axis]), *[x.shape[i] for i in rest]))
            _axis = 0
        else:
            _x, _axis = x, axis
        res = lin.norm(_x, axis=_axis, ord=ord)
        if keepdims:
            shape = list(x.shape)
            for i in _normalize_axes(range(x.ndim) if axis is None else axis, x.ndim):
                shape[i] = 1
            res = cp.reshape(res, tuple(shape))
        return res

    def diagonal(x, /, *, offset=0, **kwargs):
        return cp.diagonal(x, offset=offset, axis1=-2, axis2=-1, **kwargs)

    def trace(x, /, *, offset=0, dtype=None, **kwargs):
        return cp.asarray(cp.trace(x, offset=offset, dtype=dtype, axis1=-2, axis2=-1, **kwargs))

    out = dict(locals())
    for name in ("cp", "main", "lin", "out"):
        out.pop(name, None)
    out.update(EighResult=EighResult, QRResult=QRResult, SlogdetResult=SlogdetResult, SVDResult=SVDResult)
    for name in ("matmul", "matrix_transpose", "tensordot", "vecdot"):  # also in the main namespace
        out[name] = main[name]
    return out


def fft_aliases(cp) -> dict:
    """The array-API wrappers of ``fft`` over ``cp``: results keep single precision."""
    f = cp.fft
    c64, f32 = np.complex64, np.float32

    def keeping(name, single_in, single_out, sized="n"):
        fn = getattr(f, name)
        if sized == "n":
            def wrapped(x, /, *, n=None, axis=-1, norm="backward"):
                res = fn(x, n=n, axis=axis, norm=norm)
                return res.astype(single_out, copy=False) if x.dtype in single_in else res
        else:
            def wrapped(x, /, *, s=None, axes=None, norm="backward"):
                res = fn(x, s=s, axes=axes, norm=norm)
                return res.astype(single_out, copy=False) if x.dtype in single_in else res
        wrapped.__name__ = name
        return wrapped

    out = {
        "fft": keeping("fft", (f32, c64), c64), "ifft": keeping("ifft", (f32, c64), c64),
        "fftn": keeping("fftn", (f32, c64), c64, "s"), "ifftn": keeping("ifftn", (f32, c64), c64, "s"),
        "rfft": keeping("rfft", (f32,), c64), "irfft": keeping("irfft", (c64,), f32),
        "rfftn": keeping("rfftn", (f32,), c64, "s"), "irfftn": keeping("irfftn", (c64,), f32, "s"),
        "hfft": keeping("hfft", (f32, c64), f32), "ihfft": keeping("ihfft", (f32, c64), c64),
    }

    def freq(name):
        fn = getattr(f, name)

        def wrapped(n, /, *, d=1.0, dtype=None, device=None):
            if device not in ["cpu", None]:
                raise ValueError(f"Unsupported device {device!r}")
            res = fn(n, d=d)
            return res.astype(dtype, copy=False) if dtype is not None else res

        wrapped.__name__ = name
        return wrapped

    out["fftfreq"], out["rfftfreq"] = freq("fftfreq"), freq("rfftfreq")
    out["fftshift"] = lambda x, /, *, axes=None: f.fftshift(x, axes=axes)
    out["ifftshift"] = lambda x, /, *, axes=None: f.ifftshift(x, axes=axes)
    return out
