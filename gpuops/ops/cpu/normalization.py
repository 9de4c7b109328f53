"""The layer normalizations of transformers, and LRN, on the CPU (``@op(..., device="cpu")``): ai.onnx
LayerNormalization-17 and onnxruntime's LayerNormalization-1 and SimplifiedLayerNormalization, and
com.microsoft SkipLayerNormalization and SkipSimplifiedLayerNormalization (EmbedLayerNormalization's is
:mod:`.embedding`'s), in
one native pass over the rows (``cpu_kernels/rows.c``'s ``layernorm_f32``: the sum of the inputs, the
two statistics and the scale and shift of each row) where NumPy makes six to ten passes, each with an
array of its own -- on the small rows of exported models (a few dozen to a few hundred values) the
calls, not the arithmetic, were the cost.

float32 data (float16 and bfloat16 computed in float32, as onnxruntime does, where the generic op also
computes its statistics in float32); the statistics in float32, in two passes as the generic ops. The
constant gamma, beta and bias are prepared once per session (the ``prepare`` hook): float32,
contiguous, flattened, with their addresses. The generic ops stay the fallback (other dtypes and
shapes, CuPy arrays, ``native.disabled()``) and the test oracle.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ... import native
from ...registry import op
from ..contrib import normalization as _contrib
from ..contrib.private import DOMAIN as PRIVATE
from ..contrib import transformer as _transformer
from .. import norm as _norm
from ..contrib import private as _private
from . import planned

MS = "com.microsoft"
_F32 = np.dtype(np.float32)
_HALF = {np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}
_FLOATS = {_F32} | _HALF


def _address(a: np.ndarray) -> int:
    """The data address of a C-contiguous array (a read-only one -- a weight, a feed -- the slower way)."""
    return native.address(a) if a.flags.writeable else a.ctypes.data


def _strip(shape: tuple) -> tuple:
    i = 0
    while i < len(shape) and shape[i] == 1:
        i += 1
    return shape[i:]


class Param:
    """A gamma, beta or bias input as the kernel reads it: ``flat`` (float32, C-contiguous, 1-D), its
    address, and ``src``'s shape without leading 1s."""

    __slots__ = ("src", "flat", "address", "shape")

    def __init__(self, src: np.ndarray):
        flat = np.ascontiguousarray(src, dtype=np.float32).reshape(-1)
        self.src, self.flat, self.address, self.shape = src, flat, _address(flat), _strip(src.shape)


MAX_PLANS = 64  # a step's prepared parameters and input shapes: a model fed many shapes derives the rest


def prepare_params(*positions):
    """A ``prepare`` hook keeping :class:`Param` of the constant float inputs at ``positions``."""

    def prepare(constants, attrs):
        kept = {i: Param(a) for i, a in constants.items()
                if i in positions and type(a) is np.ndarray and a.dtype in _FLOATS and a.size}
        return kept or None

    return prepare


def _param(prepared, i, p, norm: tuple, rank: int):
    """Input ``i`` (``p``) as a :class:`Param` when its values are one per position of the normalized
    shape ``norm`` (its shape is ``norm``'s, leading 1s aside, and broadcasting it against the rank-``rank``
    data adds no axis), else None."""
    hit = prepared.get(i) if prepared is not None else None
    if hit is None or hit.src is not p:
        if type(p) is not np.ndarray or p.dtype not in _FLOATS:
            return None
        hit = Param(p)
    if p.shape != norm and (hit.shape != _strip(norm) or p.ndim > rank):
        return None
    return hit


def _as_f32(X):
    """X as a C-contiguous float32 array (float16 and bfloat16 converted), or None for other dtypes."""
    if X.dtype == _F32:
        return X if X.flags.c_contiguous else np.ascontiguousarray(X)
    if X.dtype in _HALF:
        return X.astype(np.float32)
    return None


def _channels_norm(X, Scale, B, epsilon, prepared, stats):
    """LayerNormalization over the last axis of X, a channels-last view of C-contiguous float32 channels-first
    data (a Transpose's (0, 2, ..., 1): ConvNeXt's permute before its LayerNorm), by ``rows.c``'s
    ``layernorm_channels_f32`` reading the channels-first data as it is (no copy, the statistics of 16
    positions in 16 lanes); Y C-contiguous, the statistics None unless ``stats``. None where it does not
    apply. With the step's prepared
    parameters, the sizes of each input shape are kept there, as :func:`layer_norm` keeps its own."""
    key = (X.shape, X.strides)
    plan = prepared.get(key) if prepared is not None else None
    if plan is None or plan[0].src is not Scale or (B is not None if plan[1] is None else plan[1].src is not B):
        plan = _channels_plan(X, Scale, B, prepared)
        if plan is None:
            return None
        if prepared is not None and prepared.get(1) is plan[0] and (plan[1] is None or prepared.get(2) is plan[1]) \
                and len(prepared) < MAX_PLANS:
            prepared[key] = plan
    g, b, fn, outer, c, hw, size, stat, src_axes = plan
    if not stats:
        y = np.empty(X.shape, np.float32)
        native.call(fn, _address(X.transpose(src_axes)), g.address, None if b is None else b.address,
                    native.address(y), None, None, outer, c, hw, epsilon, 0)
        return y, None, None
    out = np.empty(size + 2 * outer * hw, np.float32)  # Y, then the mean and 1 / sqrt(var + epsilon)
    at = native.address(out)
    native.call(fn, _address(X.transpose(src_axes)), g.address, None if b is None else b.address, at,
                at + 4 * size, at + 4 * (size + outer * hw), outer, c, hw, epsilon, 0)
    return out[:size].reshape(X.shape), out[size:size + outer * hw].reshape(stat), out[size + outer * hw:].reshape(stat)


def _channels_plan(X, Scale, B, prepared):
    """:func:`_channels_norm`'s (gamma, beta, kernel, sizes, statistics' shape, axes of the channels-first
    data), or None where it does not apply."""
    nd, shape = X.ndim, X.shape
    src_axes = (0, nd - 1, *range(1, nd - 1))
    fn = native.function("layernorm_channels_f32")
    if fn is None or not X.transpose(src_axes).flags.c_contiguous or not X.size:
        return None
    c = shape[-1]
    g = _param(prepared, 1, Scale, (c,), nd)
    b = None if B is None else _param(prepared, 2, B, (c,), nd)
    if g is None or (b is None and B is not None):
        return None
    return g, b, fn, shape[0], c, X.size // (shape[0] * c), X.size, shape[:-1] + (1,), src_axes


def layer_norm(X, Scale, B, axis, epsilon, prepared, simplified=False, stats=True):
    """(Y float32, mean, inv_std) of the normalization of ``X`` over axes ``axis``.. (``simplified``: the
    RMS form, mean None), the statistics float32 of shape ``X.shape[:axis] + (1, ...)`` (both None, and not
    computed, unless ``stats``: a node whose only output is Y); None where the
    native kernel does not apply. With the step's prepared parameters, the sizes of each input shape
    are kept there too, under ``(X.shape, axis)``: a later call of that shape skips their derivation."""
    fn = native.function("layernorm_f32")
    if fn is None or type(X) is not np.ndarray:
        return None
    key = (X.shape, axis)
    plan = prepared.get(key) if prepared is not None else None
    if plan is not None and X.dtype == _F32 and X.flags.c_contiguous:  # a shape seen before: its sizes kept
        g, b, rows, n, stat = plan
        if g.src is Scale and (B is None if b is None else b.src is B):
            y = np.empty(X.shape, np.float32)
            inv = np.empty(stat, np.float32) if stats else None
            mean = None if simplified or not stats else np.empty(stat, np.float32)
            native.call(fn, _address(X), None, None, None, g.address, None if b is None else b.address,
                        native.address(y), None, None if mean is None else native.address(mean),
                        None if inv is None else native.address(inv), rows, n, 1, epsilon, int(simplified))
            return y, mean, inv
    nd = X.ndim
    if not -nd <= axis < nd:
        return None
    axis %= nd
    if axis == nd - 1 and nd >= 3 and not simplified and X.dtype == _F32 and not X.flags.c_contiguous:
        got = _channels_norm(X, Scale, B, epsilon, prepared, stats)
        if got is not None:
            return got
    shape = X.shape
    norm = shape[axis:]
    n = math.prod(norm)
    if not n or not X.size:
        return None
    x = _as_f32(X)
    if x is None:
        return None
    g = _param(prepared, 1, Scale, norm, nd)
    b = None if B is None else _param(prepared, 2, B, norm, nd)
    if g is None or (b is None and B is not None):
        return None
    y = np.empty(shape, np.float32)
    stat = shape[:axis] + (1,) * (nd - axis)
    inv = np.empty(stat, np.float32) if stats else None
    mean = None if simplified or not stats else np.empty(stat, np.float32)
    native.call(fn, _address(x), None, None, None, g.address, None if b is None else b.address, native.address(y),
                None, None if mean is None else native.address(mean), None if inv is None else native.address(inv),
                x.size // n, n, 1, epsilon, int(simplified))
    if prepared is not None and prepared.get(1) is g and (b is None or prepared.get(2) is b) \
            and len(prepared) < MAX_PLANS:
        prepared[key] = (g, b, x.size // n, n, stat)
    return y, mean, inv


def _layer_norm_op(xp, fallback, native_ok: bool, out_dtype, X, Scale, B, axis, epsilon, stash_type, prepared,
                   n_outputs):
    """The native kernels' normalization where ``native_ok``, Y in ``out_dtype`` (Y alone, the statistics not
    computed, for a node with one output); else ``fallback``, the generic op."""
    if native_ok:
        got = layer_norm(X, Scale, B, axis, epsilon, prepared, stats=n_outputs > 1)
        if got is not None:
            Y, mean, inv = got
            Y = Y if out_dtype == _F32 else Y.astype(out_dtype)
            return (Y, mean, inv) if n_outputs > 1 else Y
    got = fallback(xp, X, Scale, B, axis=axis, epsilon=epsilon, stash_type=stash_type)
    return got if n_outputs > 1 else got[0]


@op("LayerNormalization", since=17, device="cpu", prepare=prepare_params(1, 2), n_outputs=True)
def LayerNormalization(xp, X, Scale, B=None, *, axis=-1, epsilon=1e-5, stash_type=1, prepared=None, n_outputs=3):
    """The native kernels' normalization (Y alone, the statistics not computed, for a node with one output)."""
    native_ok = stash_type == 1 and X.dtype in _FLOATS and Scale.dtype == X.dtype and (B is None or B.dtype == X.dtype)
    return _layer_norm_op(xp, _norm.LayerNormalization, native_ok, X.dtype, X, Scale, B, axis, epsilon, stash_type,
                          prepared, n_outputs)


@op("LayerNormalization", since=1, device="cpu", prepare=prepare_params(1, 2), n_outputs=True)
def LayerNormalization_1(xp, X, Scale, B=None, *, axis=-1, epsilon=1e-5, stash_type=1, prepared=None, n_outputs=3):
    """As :func:`LayerNormalization`, the result in Scale's dtype (onnxruntime's LayerNormalization-1)."""
    native_ok = X.dtype in _FLOATS and Scale.dtype in _FLOATS
    return _layer_norm_op(xp, _contrib.LayerNormalization, native_ok, Scale.dtype, X, Scale, B, axis, epsilon,
                          stash_type, prepared, n_outputs)


op("LayerNormalization", domain=PRIVATE, since=1, device="cpu", prepare=prepare_params(1, 2),
   n_outputs=True)(LayerNormalization_1)


@op("LayerNormChannels", domain=_private.DOMAIN, since=1, device="cpu", prepare=prepare_params(1, 2))
def LayerNormChannels(xp, X, Scale, B, *, epsilon=1e-5, prepared=None):
    """gpuops' private LayerNormChannels (ConvNeXt's LayerNorm2d) of float32 NCHW X by ``rows.c``'s
    ``layernorm_channels_f32``, Y NCHW as X, without the Transposes of its function."""
    fn = native.function("layernorm_channels_f32")
    if fn is not None and type(X) is np.ndarray and X.dtype == _F32 and X.ndim == 4 and X.size \
            and X.flags.c_contiguous:
        c = X.shape[1]
        g, b = _param(prepared, 1, Scale, (c,), 4), _param(prepared, 2, B, (c,), 4)
        if g is not None and b is not None:
            Y = np.empty(X.shape, np.float32)
            native.call(fn, _address(X), g.address, b.address, native.address(Y), None, None, X.shape[0], c,
                        X.size // (X.shape[0] * c), epsilon, 1)
            return Y
    return _private.LayerNormChannels(xp, X, Scale, B, epsilon=epsilon)


@op("SimplifiedLayerNormalization", since=1, device="cpu", prepare=prepare_params(1))
def SimplifiedLayerNormalization(xp, X, scale, *, axis=-1, epsilon=1e-5, stash_type=1, prepared=None):
    if X.dtype in _FLOATS and scale.dtype in _FLOATS:
        got = layer_norm(X, scale, None, axis, epsilon, prepared, simplified=True)
        if got is not None:
            Y, _, inv = got
            return Y if scale.dtype == _F32 else Y.astype(scale.dtype), inv
    return _contrib.SimplifiedLayerNormalization(xp, X, scale, axis=axis, epsilon=epsilon, stash_type=stash_type)


def _skip_rows(x, skip):
    """How many rows of ``x`` (..., D) the float32 ``skip`` holds when broadcasting it repeats a block of
    x's last rows (skip's shape, leading 1s aside, is a tail of x's), else None."""
    if type(skip) is not np.ndarray or skip.dtype != _F32 or skip.ndim > x.ndim:
        return None
    if skip.shape == x.shape:
        return x.size // x.shape[-1]
    k = _strip(skip.shape)
    if not k or x.shape[x.ndim - len(k):] != k:
        return None
    return skip.size // x.shape[-1]


def skip_norm(input, skip, gamma, beta, bias, epsilon, prepared, positions, simplified, outputs=4):  # noqa: A002
    """(Y, mean, inv_std, input + skip + bias) of the float32 skip normalizations, or None where the native
    kernel does not apply; the first ``outputs`` of them (those a node has), the others None.
    ``positions``: the inputs gamma, beta and bias are (None: absent). With the
    step's prepared parameters, the sizes of each pair of input shapes are kept there too, under
    ``(input.shape, skip.shape)``: a later call of those shapes skips their derivation."""
    fn = native.function("layernorm_f32")
    if fn is None or type(input) is not np.ndarray or type(skip) is not np.ndarray or input.dtype != _F32 \
            or input.ndim not in (2, 3) or not input.size:
        return None
    key = (input.shape, skip.shape)
    plan = prepared.get(key) if prepared is not None else None
    if plan is not None and skip.dtype == _F32 and input.flags.c_contiguous and skip.flags.c_contiguous:
        srcs, g, b, c, rows, D, k, stat = plan  # a pair of shapes seen before: its sizes kept
        if srcs[0] is gamma and srcs[1] is beta and srcs[2] is bias:
            y = np.empty(input.shape, np.float32)
            if outputs == 1:
                native.call(fn, _address(input), _address(skip), None, c, g, b, native.address(y), None, None, None,
                            rows, D, k, epsilon, int(simplified))
                return y, None, None, None
            s = np.empty(input.shape, np.float32) if outputs > 3 else None
            mean, inv = np.empty(stat, np.float32), np.empty(stat, np.float32)
            native.call(fn, _address(input), _address(skip), None, c, g, b, native.address(y),
                        None if s is None else native.address(s), native.address(mean), native.address(inv), rows, D,
                        k, epsilon, int(simplified))
            return y, mean, inv, s
    k = _skip_rows(input, skip)
    if k is None:
        return None
    x = input if input.flags.c_contiguous else np.ascontiguousarray(input)
    sk = skip if skip.flags.c_contiguous else np.ascontiguousarray(skip)
    shape, nd = x.shape, x.ndim
    D = shape[-1]
    norm = shape[-1:]
    kept = []
    for i, p in zip(positions, (gamma, beta, bias)):
        if p is None:
            kept.append(None)
            continue
        got = _param(prepared, i, p, norm, nd) if p.dtype == _F32 else None
        if got is None:
            return None
        kept.append(got)
    g, b, c = (None if q is None else q.address for q in kept)
    y = np.empty(shape, np.float32)
    s = np.empty(shape, np.float32) if outputs > 3 else None
    stat = shape[:-1] + (1,)
    mean, inv = (np.empty(stat, np.float32), np.empty(stat, np.float32)) if outputs > 1 else (None, None)
    native.call(fn, _address(x), _address(sk), None, c, g, b, native.address(y),
                None if s is None else native.address(s), None if mean is None else native.address(mean),
                None if inv is None else native.address(inv), x.size // D, D, k, epsilon, int(simplified))
    if prepared is not None and len(prepared) < MAX_PLANS and x is input and sk is skip and all(
            q is None or prepared.get(i) is q for i, q in zip(positions, kept)):
        prepared[key] = ((gamma, beta, bias), g, b, c, x.size // D, D, k, stat)
    return y, mean, inv, s


@op("SkipLayerNormalization", domain=MS, since=1, device="cpu", prepare=prepare_params(2, 3, 4), n_outputs=True)
def SkipLayerNormalization(xp, input, skip, gamma, beta=None, bias=None, *, epsilon=1e-12,  # noqa: A002
                           prepared=None, n_outputs=4):
    """The native kernel's normalization: only the outputs the node has (Y alone: neither statistics nor sum)."""
    got = skip_norm(input, skip, gamma, beta, bias, epsilon, prepared, (2, 3, 4), False, n_outputs)
    if got is None:
        got = _transformer.SkipLayerNormalization(xp, input, skip, gamma, beta, bias, epsilon=epsilon)
    return got[0] if n_outputs == 1 else got[:n_outputs]


@op("SkipSimplifiedLayerNormalization", domain=MS, since=1, device="cpu", prepare=prepare_params(2, 3),
    n_outputs=True)
def SkipSimplifiedLayerNormalization(xp, input, skip, gamma, bias=None, *, epsilon=1e-12,  # noqa: A002
                                     prepared=None, n_outputs=4):
    """As :func:`SkipLayerNormalization`, the RMS form."""
    got = skip_norm(input, skip, gamma, None, bias, epsilon, prepared, (2, None, 3), True, n_outputs)
    if got is None:
        got = _contrib.SkipSimplifiedLayerNormalization(xp, input, skip, gamma, bias, epsilon=epsilon)
    return got[0] if n_outputs == 1 else got[:n_outputs]


# -- native programs (gpuops.onnx.programs): the normalizations of one output -----------------------------


def _vector(a, n: int):
    """A float32 constant of ``n`` values along the last axis (leading 1s allowed) as a contiguous vector."""
    if type(a) is not np.ndarray or a.dtype != _F32 or a.size != n or any(d != 1 for d in a.shape[:-1]):
        return None
    return np.ascontiguousarray(a.reshape(n))


def _norm_step(X, skip, skip_rows, vectors, epsilon, simplified, sum_output=None):
    fn = planned.kernel("layernorm_planned_f32")
    n = X.shape[-1]
    got = [None if v is None else _vector(v, n) for v in vectors]
    if fn is None or any(g is None and v is not None for g, v in zip(got, vectors)) or got[1] is None:
        return None
    p = planned.params(*(0 if g is None else g.ctypes.data for g in got), math.prod(X.shape) // n, n, skip_rows,
                       float(epsilon), int(simplified))
    call = planned.Call(fn, p, 0, skip, z=sum_output, wide=True)
    extra = () if sum_output is None else ((sum_output, X.shape),)
    return planned.NativeStep(X.shape, (call,), holds=(p, got), extra=extra)


@planned.planned("LayerNormalization", PRIVATE)  # (opsets before 17: the optimizer's private form)
@planned.planned("LayerNormalization")
def _layer_norm_step(step, operands):
    X, Scale = operands[0], operands[1]
    B = operands[2] if len(operands) > 2 else None
    a = step.attrs
    if not planned.is_f32(X) or not X.ndim or not X.shape[-1] or a.get("axis", -1) not in (-1, X.ndim - 1):
        return None
    return _norm_step(X, None, 1, (None, Scale, B), a.get("epsilon", 1e-5), False)


@planned.planned("SkipLayerNormalization", MS)
def _skip_layer_norm_step(step, operands):
    """Y, and the sum input + skip + bias where the node has that output (not the statistics)."""
    X, skip = operands[0], operands[1]
    gamma, beta, bias = (operands[i] if len(operands) > i else None for i in (2, 3, 4))
    outputs = step.outputs
    if not planned.is_f32(X) or X.ndim not in (2, 3) or not math.prod(X.shape) or any(outputs[1:3]) or not (
            planned.is_f32(skip) or (type(skip) is np.ndarray and skip.dtype == _F32 and skip.flags.c_contiguous)):
        return None
    D = X.shape[-1]
    if tuple(skip.shape) == X.shape:
        k = math.prod(X.shape) // D
    else:
        tail = _strip(tuple(skip.shape))
        if not tail or X.shape[X.ndim - len(tail):] != tail:
            return None
        k = math.prod(skip.shape) // D
    return _norm_step(X, 1, k, (bias, gamma, beta), step.attrs.get("epsilon", 1e-12), False,
                      3 if len(outputs) > 3 and outputs[3] else None)


@planned.planned("LayerNormChannels", PRIVATE)
def _layer_norm_channels_step(step, operands):
    X, Scale, B = operands[:3]
    fn = planned.kernel("layernorm_channels_planned_f32")
    if fn is None or not planned.is_f32(X) or X.ndim != 4 or not math.prod(X.shape):
        return None
    c = X.shape[1]
    g, b = _param(step.prepared, 1, Scale, (c,), 4), _param(step.prepared, 2, B, (c,), 4)
    if g is None or b is None:
        return None
    p = planned.params(g.address, b.address, X.shape[0], c, math.prod(X.shape[2:]), float(step.attrs.get("epsilon",
                                                                                                       1e-5)))
    return planned.NativeStep(X.shape, (planned.Call(fn, p, 0),), holds=(p, g, b))


@op("LRN", since=1, device="cpu")
def LRN(xp, X, *, alpha=1e-4, beta=0.75, bias=1.0, size=None):
    """float32 LRN by ``rows.c``'s ``lrn_f32``: one pass where the generic op pads, adds ``size`` shifted
    slices and raises to a power (AlexNet's and GoogLeNet's LRNs took 12-18% of their time), the sums in
    the same order; the generic op for the rest and for bad attributes."""
    fn = native.function("lrn_f32")
    if fn is not None and size and size >= 1 and type(X) is np.ndarray and X.dtype == _F32 and X.ndim >= 2 \
            and X.size and X.flags.c_contiguous:
        n, c = X.shape[0], X.shape[1]
        before = (size - 1) // 2
        Y = np.empty(X.shape, np.float32)
        native.call(fn, _address(X), native.address(Y), n, c, X.size // (n * c), before, size - 1 - before,
                    np.float32(alpha / size), beta, bias)
        return Y
    return _norm.LRN(xp, X, alpha=alpha, beta=beta, bias=bias, size=size)
