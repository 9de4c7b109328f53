"""MaxPool, AveragePool, LpPool and GlobalAveragePool on the CPU (``@op(..., device="cpu")``): the
native window kernel (``cpu_kernels/pool.c``) for 2-D float32 (and 8-bit MaxPool, through float32),
windows reduced over the shifted
flat planes of :class:`.conv.Planes` (long contiguous rows, where the generic op slices one spatial
axis at a time), and the global average as one pass (``cpu_kernels/rows.c``) or one BLAS
matrix-vector product. The generic ops of :mod:`gpuops.ops.pool` stay their fallback and test oracle.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from ... import native
from ...registry import op
from .. import pool as _pool
from .. import windows
from ..contrib import private as _private
from . import planned
from ._common import Kept, on_host
from .conv import Planes
from .reduce import ROW_KINDS

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_addressof, _from_buffer = ctypes.addressof, ctypes.c_char.from_buffer
_NATIVE = (_F32, np.dtype(np.uint8), np.dtype(np.int8))  # (8-bit maps: MaxPool through float32)


def _reduce_windows(xp, X, kernel, strides, dilations, pb, pe, out, pad_value, ufunc):
    """:func:`gpuops.ops.pool.reduce_windows`, stride-1 or padded windows through :class:`.conv.Planes`."""
    if X.size and all(o > 0 for o in out) and math.prod(kernel) > 1 and (
            all(s == 1 for s in strides) or any(pb) or any(pe)):
        pl = Planes(X, kernel, strides, dilations, pb, out, pad_value)
        return pl.crop(pl.reduce(ufunc), X.shape[1])
    return _pool.reduce_windows(xp, X, kernel, strides, dilations, pb, pe, out, pad_value, ufunc)


class _Geometry(tuple):
    """A pooling node's windows over one input shape: (kernel, strides, dilations, pads begin, pads
    end, output shape, one window over the whole input, the native kernel's arguments after the two
    arrays or None)."""


def _geometry(X, mode, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode) -> _Geometry:
    kernel, strides, dilations, pb, pe, out = windows.pool_geometry(X, kernel_shape, strides, dilations, pads,
                                                                    auto_pad, ceil_mode)
    tail = None
    if X.ndim == 4 and X.dtype in _NATIVE and X.size and all(o > 0 for o in out):
        tail = (X.shape[0] * X.shape[1], *X.shape[2:], *out, *kernel, *strides, *pb, *dilations, mode, *pe)
    return _Geometry((kernel, strides, dilations, pb, pe, out, _pool.whole_input(X, kernel, dilations, pb, pe), tail))


def _windows(prepared, X, mode, *attrs) -> _Geometry:
    """The node's :class:`_Geometry` over ``X``, worked out once per input shape and type (its
    ``prepared`` store; a pooling node runs on small maps too, where this is most of a call)."""
    if prepared is None:
        return _geometry(X, mode, *attrs)
    return prepared.get((X.shape, X.dtype.num), lambda: _geometry(X, mode, *attrs))


def _prepare_windows(constants, attrs):
    return Kept()


def _native_windows(X, geo: _Geometry):
    """``geo``'s pooling of ``X`` by the native kernel; None when it does not apply or is unavailable."""
    tail = geo[7]
    if tail is None or X.dtype != _F32:
        return None
    fn = native.function("pool2d_f32")
    if fn is None:
        return None
    if not X.flags.c_contiguous:
        X = np.ascontiguousarray(X)
    Y = np.empty(X.shape[:2] + tuple(geo[5]), dtype=np.float32)
    native.call(fn, native.ptr(X), native.address(Y), *tail)
    return Y


@op("MaxPool", since=1, device="cpu", n_outputs=True, prepare=_prepare_windows)
def MaxPool(xp, X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, pads=None,
            storage_order=0, strides=None, n_outputs=1, prepared=None):
    if n_outputs != 1 or not on_host(X):
        return _pool.MaxPool(xp, X, auto_pad=auto_pad, ceil_mode=ceil_mode, dilations=dilations,
                             kernel_shape=kernel_shape, pads=pads, storage_order=storage_order, strides=strides,
                             n_outputs=n_outputs)
    geo = _windows(prepared, X, 0, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    kernel, strides, dilations, pb, pe, out, whole, _ = geo
    if whole:
        return _pool.GlobalMaxPool(xp, X)
    if X.dtype == np.uint8 or X.dtype == np.int8:  # 8-bit (quantized) maps: exact in float32
        Y = _native_windows(X.astype(np.float32), geo)
        if Y is not None and Y.size and Y.min() > -np.inf:  # (-inf: a window of padding only)
            return Y.astype(X.dtype)
    Y = _native_windows(X, geo)
    if Y is not None:
        return Y
    return _reduce_windows(xp, X, kernel, strides, dilations, pb, pe, out, _pool.lowest(X.dtype), np.maximum)


@op("AveragePool", since=1, device="cpu", prepare=_prepare_windows)
def AveragePool(xp, X, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
                kernel_shape=None, pads=None, strides=None, prepared=None):
    if not on_host(X):
        return _pool.AveragePool(xp, X, auto_pad=auto_pad, ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                                 dilations=dilations, kernel_shape=kernel_shape, pads=pads, strides=strides)
    geo = _windows(prepared, X, 2 if count_include_pad else 1, kernel_shape, strides, dilations, pads, auto_pad,
                   ceil_mode)
    kernel, strides, dilations, pb, pe, out, whole, _ = geo
    if whole:
        return GlobalAveragePool(xp, X)
    Y = _native_windows(X, geo)
    if Y is not None:
        return Y
    counts = windows.window_counts(xp, X.shape[2:], kernel, strides, dilations, pb, pe, out, count_include_pad,
                                  X.dtype)
    return _reduce_windows(xp, X, kernel, strides, dilations, pb, pe, out, 0, np.add) / counts


@op("LpPool", since=1, device="cpu")
def LpPool(xp, X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, p=2,
           pads=None, strides=None):
    if not on_host(X):
        return _pool.LpPool(xp, X, auto_pad=auto_pad, ceil_mode=ceil_mode, dilations=dilations,
                            kernel_shape=kernel_shape, p=p, pads=pads, strides=strides)
    kernel, strides, dilations, pb, pe, out = windows.pool_geometry(X, kernel_shape, strides, dilations, pads,
                                                              auto_pad, ceil_mode)
    total = _reduce_windows(xp, _pool.abs_pow(xp, X, p), kernel, strides, dilations, pb, pe, out, 0, np.add)
    return _pool.lp_root(xp, total, p)


@op("GlobalAveragePool", since=1, device="cpu")
def GlobalAveragePool(xp, X):
    if type(X) is not np.ndarray or X.ndim < 3 or (X.dtype != _F32 and X.dtype != _F64) or not X.size:
        return _pool.GlobalAveragePool(xp, X)
    lead = X.shape[:2]
    keep = lead + (1,) * (X.ndim - 2)
    rows = X.reshape(lead[0] * lead[1], -1)  # (a copy only where X is not contiguous)
    n = rows.shape[1]
    fn = native.function("row_mean_f32") if X.dtype == _F32 else None
    if fn is not None:  # one pass
        if not rows.flags.c_contiguous:
            rows = np.ascontiguousarray(rows)
        Y = np.empty(keep, dtype=np.float32)
        native.call(fn, native.ptr(rows), native.address(Y), rows.shape[0], n)
        return Y
    # one BLAS matrix-vector product with ones (np.mean's reduction over a tuple of axes is several
    # times slower on small maps), then the division np.mean does
    S = np.matmul(rows, np.ones(n, dtype=X.dtype))
    S /= n
    return S.reshape(keep)


class SqueezeExciteWeights:
    """A SqueezeExcite step's constant float32 weights as the native kernel takes them: W1 and W2
    transposed, (C, R) and (R, C), the biases contiguous, and their addresses."""

    def __init__(self, W1, B1, W2, B2):
        self.W1, self.W2 = W1, W2
        self.R, self.C = W1.shape[:2]
        self.arrays = (np.ascontiguousarray(W1.reshape(self.R, self.C).T), np.ascontiguousarray(B1),
                       np.ascontiguousarray(W2.reshape(self.C, self.R).T), np.ascontiguousarray(B2))
        self.addresses = tuple(a.ctypes.data for a in self.arrays)

    @classmethod
    def of(cls, W1, B1, W2, B2):
        """The weights of a block (the arrays float32 and of its shapes), else None."""
        if not all(type(a) is np.ndarray and a.dtype == _F32 for a in (W1, B1, W2, B2)) or W1.ndim < 3:
            return None
        R, C = W1.shape[:2]
        if W1.shape[2:] != (1,) * (W1.ndim - 2) or W2.shape != (C, R) + W1.shape[2:] or B1.shape != (R,) \
                or B2.shape != (C,) or not R * C:
            return None
        return cls(W1, B1, W2, B2)


def prepare_squeeze_excite(constants: dict, attrs: dict) -> SqueezeExciteWeights | None:
    """The ``prepare`` hook of SqueezeExcite: :class:`SqueezeExciteWeights` of constant weights."""
    if not all(i in constants for i in (1, 2, 3, 4)):
        return None
    return SqueezeExciteWeights.of(*(constants[i] for i in (1, 2, 3, 4)))


def _squeeze_excite(inner: str, gate: str):
    """The CPU SqueezeExcite of one (inner, gate) pair (:mod:`gpuops.ops.contrib.private`): float32 in one
    native call (``cpu_kernels/pool.c``: the planes' means, the two small products, the scaling pass)."""
    codes = (_private.INNER.index(inner), _private.GATES.index(gate))

    @op(f"SqueezeExcite{inner}{gate}", domain=_private.DOMAIN, since=1, device="cpu", prepare=prepare_squeeze_excite)
    def SqueezeExcite(xp, X, W1, B1, W2, B2, *, alpha=0.2, beta=0.5, prepared=None):
        kept = prepared if prepared is not None and W1 is prepared.W1 and W2 is prepared.W2 else None
        fn = native.function("squeeze_excite_f32")
        if fn is not None and type(X) is np.ndarray and X.dtype == _F32 and X.ndim >= 3 and X.size:
            kept = kept or SqueezeExciteWeights.of(W1, B1, W2, B2)
            if kept is not None and X.shape[1] == kept.C:
                try:
                    x = _addressof(_from_buffer(X))
                except (TypeError, ValueError):  # read-only, or not C-contiguous
                    X = np.ascontiguousarray(X)
                    x = X.ctypes.data
                Y = np.empty(X.shape, _F32)
                native.call(fn, x, *kept.addresses, _addressof(_from_buffer(Y)),
                            X.shape[0], kept.C, X.size // (X.shape[0] * kept.C), kept.R, *codes, alpha, beta)
                return Y
        return _private.squeeze_excite(xp, X, W1, B1, W2, B2, inner, gate, alpha, beta)

    return SqueezeExcite


for _inner in _private.INNER:
    for _gate in _private.GATES:
        _squeeze_excite(_inner, _gate)


# -- native programs (gpuops.onnx.programs): the kernels the ops above run --------------------------------


def _window_step(step, operands, mode):
    X = operands[0]
    if not planned.is_f32(X) or X.ndim != 4 or step.attrs.get("n_outputs", 1) != 1:
        return None
    a = step.attrs
    geo = _windows(step.prepared, planned.placeholder(X), mode, a.get("kernel_shape"), a.get("strides"),
                   a.get("dilations"), a.get("pads"), a.get("auto_pad", "NOTSET"), a.get("ceil_mode", 0))
    tail, whole = geo[7], geo[6]
    fn = planned.kernel("pool2d_planned_f32")
    if tail is None or whole or fn is None:
        return None
    p = planned.params(*tail)
    return planned.NativeStep(X.shape[:2] + tuple(geo[5]), (planned.Call(fn, p, 0),), holds=p)


@planned.planned("MaxPool")
def _max_pool_step(step, operands):
    X = operands[0]
    if type(X) is planned.Operand and X.dtype in _EIGHT_BIT:
        return _max_pool_8_step(step, X)
    return _window_step(step, operands, 0)


_EIGHT_BIT = (np.dtype(np.uint8), np.dtype(np.int8))


def _max_pool_8_step(step, X):
    """MaxPool of an 8-bit map (QDQ and QOperator models', between their QLinearConvs): ``max_pool2d_planned_8``,
    where every window holds a cell of the map (else the op's own step)."""
    a = step.attrs
    fn = planned.kernel("max_pool2d_planned_8")
    if fn is None or X.ndim != 4 or not math.prod(X.shape) or a.get("n_outputs", 1) != 1 \
            or a.get("storage_order", 0):
        return None
    kernel, strides, dilations, pb, pe, out, whole, _ = _windows(
        step.prepared, planned.placeholder(X), 0, a.get("kernel_shape"), a.get("strides"), a.get("dilations"),
        a.get("pads"), a.get("auto_pad", "NOTSET"), a.get("ceil_mode", 0))
    if len(kernel) != 2 or not all(o > 0 for o in out):
        return None
    for n, k, s, d, b, o in zip(X.shape[2:], kernel, strides, dilations, pb, out):
        if any(not any(0 <= i * s - b + t * d < n for t in range(k)) for i in range(o)):
            return None  # a window of padding only
    p = planned.params(X.shape[0] * X.shape[1], *X.shape[2:], *out, *kernel, *strides, *pb, *dilations,
                       int(X.dtype == np.int8))
    return planned.NativeStep(X.shape[:2] + tuple(out), (planned.Call(fn, p, 0),), holds=p, dtype=X.dtype)


@planned.planned("AveragePool")
def _average_pool_step(step, operands):
    return _window_step(step, operands, 2 if step.attrs.get("count_include_pad", 0) else 1)


def _global_pool_step(step, operands):
    """Each plane's mean (GlobalAveragePool) or largest value (GlobalMaxPool; a NaN in it wins, as NumPy's
    max): reduce_rows_planned_f32 over the planes as rows."""
    X = operands[0]
    fn = planned.kernel("reduce_rows_planned_f32")
    if fn is None or not planned.is_f32(X) or X.ndim < 3 or not math.prod(X.shape):
        return None
    p = planned.params(X.shape[0] * X.shape[1], math.prod(X.shape[2:]), ROW_KINDS[_GLOBAL_POOLS[step.op_type]])
    return planned.NativeStep(X.shape[:2] + (1,) * (X.ndim - 2), (planned.Call(fn, p, 0),), holds=p)


_GLOBAL_POOLS = {"GlobalAveragePool": "ReduceMean", "GlobalMaxPool": "ReduceMax"}
for _name in _GLOBAL_POOLS:
    planned.planned(_name)(_global_pool_step)


def _squeeze_excite_step(step, operands, inner: str, gate: str):
    X, kept = operands[0], step.prepared
    fn = planned.kernel("squeeze_excite_planned_f32")
    if fn is None or kept is None or not planned.is_f32(X) or X.ndim < 3 or not math.prod(X.shape) \
            or X.shape[1] != kept.C or operands[1] is not kept.W1 or operands[3] is not kept.W2:
        return None
    a = step.attrs
    p = planned.params(*kept.addresses, X.shape[0], kept.C, math.prod(X.shape) // (X.shape[0] * kept.C), kept.R,
                       _private.INNER.index(inner), _private.GATES.index(gate), float(a.get("alpha", 0.2)),
                       float(a.get("beta", 0.5)))
    return planned.NativeStep(X.shape, (planned.Call(fn, p, 0),), holds=(p, kept))


for _inner in _private.INNER:
    for _gate in _private.GATES:
        planned.planned(f"SqueezeExcite{_inner}{_gate}", _private.DOMAIN)(
            lambda step, operands, inner=_inner, gate=_gate: _squeeze_excite_step(step, operands, inner, gate))
