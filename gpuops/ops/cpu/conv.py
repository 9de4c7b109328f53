"""Conv, com.microsoft FusedConv / NhwcConv and DepthwiseConv2d on the CPU (``@op(..., device="cpu")``): the paths of
NumPy arrays that the generic :func:`gpuops.ops.conv.conv` (their fallback and test oracle) leaves to
the device.

The columns of im2col are built a block of output rows at a time into one reused cache-sized buffer
(:func:`_im2col_gemm_blocked`), and a group-1 conv with fewer output than input channels (DenseNet's
3x3 growth convs) skips the im2col copy: one GEMM of every tap's weights with the input
(:class:`Planes`), then a shifted add per tap (:func:`_kn2row`). With the native CPU kernels
(:mod:`gpuops.native`), float32 3x3 stride-1 convs with enough channels run as Winograd F(2x2, 3x3)
(:mod:`.winograd`), depthwise convs and convs of at most 4 input channels as C loops, and the GEMMs of
the 1x1 and blocked im2col convs, where it pays, as a C GEMM over packed weights that adds the bias and
clamps as it stores each tile (:class:`_FusedGemm`, :mod:`.native_gemm`).

What depends only on a constant weight (its float32 copy when it is float16, its GEMM packs, its
Winograd transform and that transform's packs, its kn2row layout, the conv's geometry per input shape)
is made once per session and kept on the plan step (:class:`ConvWeights`, the ops' ``prepare`` hook):
the float32 copy at plan time, the rest at first need (the packs' layout follows the map's size).

Such a step's 1-D and 2-D float32 convs are planned once per input shape (:func:`_plan`): the path
chosen and the kernel's arguments set in a :class:`ConvParams`, so that a run is one native call (a
packed GEMM reading its columns from the input's phase planes, with bias, residual and activation;
Winograd, whose 16 products run that GEMM over the packed transform; the depthwise or the direct
kernel) into a new array: on the small maps of exported CNNs the choice and the argument conversions
cost more than the conv.

One module, past 500 lines: the CPU conv paths share the kept weights and the choice between them.
"""

from __future__ import annotations

import ctypes
import itertools
import math

import numpy as np

from ... import native
from ...registry import op
from ..conv import compute_dtype, conv as _generic_conv
from ..windows import check_bias, check_conv_shapes, conv_shape_geometry, pad_for_windows
from ..contrib.fusion import nhwc_conv
from ..contrib.transformer import FusedConv as _generic_fused_conv, as_clamp, residual_activation
from ..contrib import private as _private
from ..legacy import depthwise_conv2d
from . import native_gemm, planned, winograd
from ._common import Kept, frozen, on_host

_NO_CLAMP = (-math.inf, math.inf)
_F32 = np.dtype(np.float32)


class ConvWeights(Kept):
    """A conv step's constant weight ``W`` and bias ``B`` (None: absent, or not constant), and what the
    CPU paths derive from them. It serves a call whose weight and bias are these very arrays (or their
    float32 copies)."""

    MAX_GEOMETRIES = 64
    MAX_RUNS = 64

    def __init__(self, W: np.ndarray, B: np.ndarray | None):
        super().__init__()
        self.W, self.B = W, B
        self.geometries: dict = {}  # X's shape -> conv_shape_geometry (the step's attributes are fixed)
        # (X's shape, clamp or activation, residual, threads) -> a _Planned conv, or False: the general path
        self.runs: dict = {}
        half = compute_dtype(W.dtype) is not None
        self.W32 = frozen(W.astype(np.float32)) if half else None
        self.B32 = frozen(B.astype(np.float32)) if half and B is not None else None

    def fits(self, W, B) -> bool:
        return (W is self.W or W is self.W32) and (B is None or B is self.B or B is self.B32)

    def geometry(self, X, W, group, kernel_shape, auto_pad, strides, dilations, pads):
        g = self.geometries.get(X.shape)
        if g is None:
            g = conv_shape_geometry(X, W, group, kernel_shape, auto_pad, strides, dilations, pads)
            if len(self.geometries) < self.MAX_GEOMETRIES:
                self.geometries[X.shape] = g
        return g

    def run(self, key, plan):
        """The planned conv kept under ``key`` (see :attr:`runs`), made by ``plan()`` on first need
        (False: none, the general path runs)."""
        run = self.runs.get(key)
        if run is None:
            run = plan() or False
            if len(self.runs) < self.MAX_RUNS:
                self.runs[key] = run
        return run

    def packs(self, W, B, group: int, rows: bool):
        """W's (and B's) native GEMM packs (:func:`.native_gemm.packed`) in layout ``rows``."""
        return self.get(("gemm", group, rows, B is not None), lambda: native_gemm.packed(W, B, group, rows=rows))


def prepare_conv(constants: dict, attrs: dict) -> ConvWeights | None:
    """The ``prepare`` hook of Conv-like ops (X, W, B first): a :class:`ConvWeights` for a constant W,
    with the float32 copies of a float16 W and B made at plan time; what depends on the input's shape
    (the GEMM packs, whose layout follows the map's size, the Winograd transform) at first need."""
    W, B = constants.get(1), constants.get(2)
    if type(W) is not np.ndarray or W.ndim < 3 or not W.size or (W.dtype.kind != "f" and compute_dtype(W.dtype) is None):
        return None
    if B is not None and (type(B) is not np.ndarray or B.shape != W.shape[:1] or B.dtype != W.dtype):
        B = None
    return ConvWeights(W, B)


def _epilogue(Y, B, clamp_to):
    """``Y + B`` per channel, then clamped to ``clamp_to = (lo, hi)`` when given (a fused Relu or Clip,
    NaN staying NaN), into Y (a new array of the op's, ``(N, M, ...)`` or a 2-D block of M rows):
    float32 in one pass by the native kernel."""
    if B is None and clamp_to is None:
        return Y
    lo, hi = clamp_to or _NO_CLAMP
    fn = native.function("bias_clamp_f32") if (
        Y.dtype == np.float32 and (B is None or B.dtype == np.float32) and Y.size
        and Y.strides[-1] == 4 and (Y.ndim == 2 or Y.flags.c_contiguous)) else None
    if fn is None:
        if B is not None:
            Y += B.reshape((-1,) + (1,) * (Y.ndim - 2 if Y.ndim > 2 else 1))
        if lo > -math.inf:
            np.maximum(Y, lo, out=Y)
        if hi < math.inf:
            np.minimum(Y, hi, out=Y)
        return Y
    B = None if B is None else np.ascontiguousarray(B)  # held here while the kernel reads it
    b = None if B is None else native.ptr(B)
    if Y.ndim == 2:  # a block of rows, Y.strides[0] apart
        native.call(fn, Y.ctypes.data, b, Y.shape[0], Y.shape[1], Y.strides[0] // 4, lo, hi)
    else:
        M, L, base = Y.shape[1], math.prod(Y.shape[2:]), native.address(Y)
        for n in range(Y.shape[0]):
            native.call(fn, base + 4 * n * M * L, b, M, L, L, lo, hi)
    return Y


# -- planned convs: one native call per run ---------------------------------------


class ConvParams(ctypes.Structure):
    """``struct conv_params`` of ``cpu_kernels/conv_params.h``: a conv's arguments but its input, residual
    and output, set once per weight and input shape."""

    _fields_ = [(name, ctypes.c_int64) for name in ("N", "C", "H", "W", "M", "KH", "KW", "OH", "OW", "sh", "sw",
                                                     "ph", "pw", "dh", "dw", "group", "rows")] + [
        ("weights", ctypes.c_void_p), ("wstride", ctypes.c_int64), ("bias", ctypes.c_void_p),
        ("lo", ctypes.c_float), ("hi", ctypes.c_float), ("act", ctypes.c_int64), ("alpha", ctypes.c_float),
        ("beta", ctypes.c_float), ("gemm", ctypes.c_void_p)]


# FusedConv's activations the planned kernels apply besides a clamp (conv_params.h's CONV_*), with
# onnxruntime's defaults of alpha and beta
_ACTIVATIONS = {"HardSigmoid": (1, 0.2, 0.5), "HardSwish": (2, 0.0, 0.0), "Sigmoid": (3, 0.0, 0.0),
                "LeakyRelu": (4, 0.01, 0.0)}


def _activation(activation, activation_params):
    """``(clamp_to, (code, alpha, beta))`` of a FusedConv's activation for the planned kernels, or None
    when they have no such activation."""
    clamp_to = as_clamp(activation, activation_params)
    if clamp_to is not None:
        return clamp_to, (0, 0.0, 0.0)
    if activation not in _ACTIVATIONS:
        return None
    code, alpha, beta = _ACTIVATIONS[activation]
    given = list(activation_params or ())
    alpha = float(given[0]) if len(given) > 0 else alpha
    beta = float(given[1]) if len(given) > 1 else beta
    return _NO_CLAMP, (code, alpha, beta)


_addressof, _from_buffer = ctypes.addressof, ctypes.c_char.from_buffer


class _Planned:
    """A 2-D float32 conv bound to one input shape: a ``*_planned_f32`` kernel, its :class:`ConvParams`
    (and the arrays they point to, held here), the output's shape."""

    __slots__ = ("fn", "params", "address", "shape", "holds")

    def __init__(self, fn, params: ConvParams, shape: tuple, holds: tuple):
        self.fn, self.params, self.address, self.shape, self.holds = fn, params, ctypes.addressof(params), shape, holds

    def __call__(self, X: np.ndarray, Z=None):
        """The conv of X (float32, of the planned shape) as a new array, plus the residual ``Z`` (before
        the activation) when given; None when X or Z is not float32, or Z not a NumPy array of the
        output's shape (the general path then runs)."""
        if X.dtype is not _F32:  # another spelling of float32 (a byte order) goes the general way too
            return None
        z = None
        if Z is not None:
            if type(Z) is not np.ndarray or Z.dtype is not _F32 or Z.shape != self.shape:
                return None
            try:
                z = _addressof(_from_buffer(Z))
            except (TypeError, ValueError):  # read-only, or not C-contiguous
                Z = np.ascontiguousarray(Z)
                z = Z.ctypes.data
        try:
            x = _addressof(_from_buffer(X))
        except (TypeError, ValueError):
            X = np.ascontiguousarray(X)
            x = X.ctypes.data
        Y = np.empty(self.shape, _F32)
        if self.fn(self.address, x, z, _addressof(_from_buffer(Y))):
            raise MemoryError(f"native kernel {self.fn.__name__} could not allocate its scratch")
        return Y


SMALL_MACS = 1 << 22  # multiply-adds (output channels padded to a tile) of a conv the native GEMM runs...
SMALL_MIN_CHANNELS = 4  # ...whatever BLAS would do on it; a 16th of them with fewer output channels per group


def _plan(kept: ConvWeights, X, group, kernel_shape, auto_pad, strides, dilations, pads, clamp_to,
          activation=(0, 0.0, 0.0)):
    """The :class:`_Planned` conv of ``kept``'s weights for inputs of X's shape, or None where the
    general path runs: not 1-D or 2-D float32, native kernels off, or a conv large enough that another
    path (BLAS where :func:`.native_gemm.gemm_pays` says so) may beat the native GEMM; Winograd where it
    pays. Not kn2row: on the 3x3 convs where :func:`_kn2row_pays` prefers it to im2col, the planned GEMM
    (its columns read in place) took 0.5-0.95x of its time (one core of the AVX-512 Xeon, 2026-11-28).
    Depthwise convs and those of few input channels run their own native kernels; a 1-D conv runs as a
    2-D one of one row."""
    W, B = kept.W, kept.B
    if not (native.enabled() and X.ndim in (3, 4) and X.dtype == W.dtype == _F32 and (B is None or B.dtype == _F32)):
        return None
    try:
        kernel, strides, dilations, pb, pe, out, K, L = kept.geometry(X, W, group, kernel_shape, auto_pad, strides,
                                                                      dilations, pads)
    except Exception:  # noqa: BLE001 - the general path reports it
        return None
    N, C, *spatial = X.shape
    M = W.shape[0]
    if not (N and C and M and L):
        return None
    shape = (N, M) + tuple(out)
    if X.ndim == 4 and spatial[1] == kernel[1] == out[1] == 1 and not pb[1]:
        # an (H, 1) map (a 1-D conv exported along H) lies in memory as a (1, H) one: its rows of one cell
        # would leave the GEMM's row tiles a lane in a vector
        spatial, kernel, out, strides, pb, dilations = (list(v)[:1] for v in (spatial, kernel, out, strides, pb,
                                                                             dilations))
    if len(spatial) == 1:
        spatial, kernel, out, strides, pb, dilations = ([1] + list(v) for v in (spatial, kernel, out, strides, pb,
                                                                                 dilations))
        pb[0] = 0
    W = np.ascontiguousarray(W)
    B = None if B is None else np.ascontiguousarray(B)
    lo, hi = clamp_to or _NO_CLAMP
    params = ConvParams(N, C, *spatial, M, *kernel, *out, *strides, *pb, *dilations, group, 0, W.ctypes.data, 0,
                        None if B is None else B.ctypes.data, lo, hi, *activation)
    if group == C and C > 1:  # depthwise, 1x1 too
        name = "depthwise_conv2d_planned_f32"
    elif group == 1 and _direct_fits(C, K, out[-1]):
        name = "direct_conv2d_planned_f32"
    else:
        Mg, CKg = M // group, W.size // M
        # a 1x1 conv without padding reads its columns as they lie (strided: sampled first; gemm.c)
        direct = K == 1 and not any(pb) and all((o - 1) * s < d for o, s, d in zip(out, strides, spatial))
        rows = native_gemm.rows_layout(Mg, CKg, L, None if direct else out[-1])  # (conv_rows: a row at a time)
        tile = native_gemm.pack_width(rows)
        padded = N * L * CKg * group * -(-Mg // tile) * tile
        if padded > (SMALL_MACS if Mg >= SMALL_MIN_CHANNELS else SMALL_MACS >> 4):
            if winograd.applies(X, W, kernel, strides, dilations, group, out):
                return _winograd_plan(kept, params, shape, out, B)
            if not native_gemm.gemm_pays(Mg, CKg, L):
                return None
        packs = kept.packs(kept.W, kept.B, group, rows)
        if not packs:
            return None
        pack = packs[0].pack if group == 1 else kept.get(
            ("planned", group, rows, B is not None), lambda: frozen(np.concatenate([p.pack for p in packs])))
        params.rows, params.weights, params.wstride = rows, pack.ctypes.data, packs[0].pack.size
        W = pack
        name = "conv2d_gemm_planned_f32"
    fn = native.function(name)
    return None if fn is None else _Planned(fn, params, shape, (W, B))


def _winograd_plan(kept: ConvWeights, params: ConvParams, shape: tuple, out, B) -> _Planned | None:
    """The planned F(2x2, 3x3) conv of ``params``: the 16 products of its transformed weight
    (:func:`.winograd.weights`) packed once for the native GEMM, which it calls for each block of tiles."""
    gemm, fn = native.function("gemm_f32"), native.function("winograd_f2k3_planned_f32")
    if gemm is None or fn is None:
        return None
    tiles = -(-out[-2] // 2) * -(-out[-1] // 2)
    M, C = params.M, params.C
    rows = native_gemm.rows_layout(M, C, tiles)

    def pack():
        U = winograd.weights(kept.W)
        return frozen(np.concatenate([native_gemm.packed(U[k], rows=rows)[0].pack for k in range(16)]))

    packs = kept.get(("winograd-packs", rows), pack)
    params.rows, params.weights, params.wstride = rows, packs.ctypes.data, packs.size // 16
    params.gemm = ctypes.cast(gemm, ctypes.c_void_p).value
    return _Planned(fn, params, shape, (packs, B))


def _winograd(X, W, B, pads_begin, out, clamp_to=None):
    """F(2x2, 3x3) of a 3x3, stride-1, group-1 float32 conv whose weight no session planned (not constant,
    or float16 computed in float32): the planned kernel, W transformed and packed for this call; None
    without the native kernels."""
    N, C, H, Wd = X.shape
    M = W.shape[0]
    W, B = np.ascontiguousarray(W), None if B is None else np.ascontiguousarray(B)
    lo, hi = clamp_to or _NO_CLAMP
    params = ConvParams(N, C, H, Wd, M, 3, 3, *out, 1, 1, *pads_begin, 1, 1, 1, 0, W.ctypes.data, 0,
                        None if B is None else B.ctypes.data, lo, hi, 0, 0.0, 0.0)
    run = _winograd_plan(ConvWeights(W, B), params, (N, M, *out), out, B)
    return None if run is None else run(X)


# -- shifted flat planes --------------------------------------------------------


def _strided(buf, start: int, shape, strides):
    """View of the 1-D contiguous NumPy array ``buf`` from element ``start`` (strides in elements;
    NumPy checks that the view stays inside ``buf``)."""
    it = buf.itemsize
    return np.ndarray(tuple(shape), buf.dtype, buffer=buf, offset=start * it, strides=tuple(s * it for s in strides))


class Planes:
    """X padded and split by stride phase into flat planes in which every kernel tap is a shifted slice.

    Along each axis, padded position ``p + s * q`` goes to phase ``p`` (``0 <= p < s``), cell ``q`` of a
    plane of extent ``Q = out + (k - 1) * d // s``; the planes (one per phase: just the padded X when all
    strides are 1) are flattened, rows ``(N * C, prod(Q))``, and stored one after the other in ``buf``.
    Tap ``t`` of output cell ``i`` (over the grid ``Q``) then reads cell ``i + offset[t]`` of the tap's
    phase: one slice of ``buf`` for all rows and cells, whatever the stride. Cells ``i_a >= out_a``
    are waste that :meth:`crop` drops, and a read that wraps past a row's end only reaches such cells.
    """

    def __init__(self, X, kernel, strides, dilations, pads_begin, out_shape, pad_value=0):
        N, C = X.shape[:2]
        self.N, self.C, self.out = N, C, list(out_shape)
        Q = [o + (k - 1) * d // s for o, k, s, d in zip(out_shape, kernel, strides, dilations)]
        self.Q, self.P, self.strides = Q, math.prod(Q), list(strides)
        self.R = [math.prod(Q[a + 1:]) for a in range(len(Q))]  # cell strides
        # per axis and tap: (phase, shift in cells)
        self.axis_taps = [[divmod(t * d, s)[::-1] for t in range(k)] for k, s, d in zip(kernel, strides, dilations)]
        self.block = N * C * self.P  # elements of one phase's plane
        self.slack = sum(max(sh for _, sh in taps) * r for taps, r in zip(self.axis_taps, self.R))
        phases = list(itertools.product(*(range(s) for s in strides)))
        self.buf = np.full(len(phases) * self.block + self.slack, pad_value, dtype=X.dtype)
        for i, phase in enumerate(phases):
            plane = self.buf[i * self.block:(i + 1) * self.block].reshape((N, C) + tuple(Q))
            dst, src = [slice(None)] * 2, [slice(None)] * 2
            for p, s, q, n, b in zip(phase, strides, Q, X.shape[2:], pads_begin):
                q0 = max(0, -((p - b) // s))  # first cell at or after the input's start
                x0 = p + s * q0 - b
                cnt = min(q - q0, -(-(n - x0) // s)) if n > x0 else 0
                dst.append(slice(q0, q0 + cnt))
                src.append(slice(x0, x0 + s * (cnt - 1) + 1 if cnt > 0 else x0, s))
            if all(d.stop - d.start > 0 for d in dst[2:]):
                plane[tuple(dst)] = X[tuple(src)]

    def taps(self):
        """(phase index, offset in elements) per kernel tap, row-major."""
        out = []
        for tap in itertools.product(*self.axis_taps):
            phase = offset = 0
            for (p, sh), s, r in zip(tap, self.strides, self.R):
                phase, offset = phase * s + p, offset + sh * r
            out.append((phase, offset))
        return out

    def columns(self, span: int):
        """im2col from the planes: ``(N * C, taps, span)``, tap ``t`` (row-major) holding the ``span`` grid
        cells it reads. The taps of one phase are a strided grid of shifts, so one copy per phase."""
        rows, kernel = self.N * self.C, [len(taps) for taps in self.axis_taps]
        cols = np.empty((rows,) + tuple(kernel) + (span,), dtype=self.buf.dtype)
        for i, phase in enumerate(itertools.product(*(range(s) for s in self.strides))):
            dst, shape, strides, offset = [slice(None)], [rows], [self.P], i * self.block
            for p, taps, r in zip(phase, self.axis_taps, self.R):
                ts = [t for t, (q, _) in enumerate(taps) if q == p]
                if not ts:
                    break
                step = ts[1] - ts[0] if len(ts) > 1 else 1
                sh_step = taps[ts[1]][1] - taps[ts[0]][1] if len(ts) > 1 else 0
                dst.append(slice(ts[0], ts[-1] + 1, step))
                shape.append(len(ts))
                strides.append(sh_step * r)
                offset += taps[ts[0]][1] * r
            else:
                np.copyto(cols[tuple(dst)], _strided(self.buf, offset, shape + [span], strides + [1]))
        return cols.reshape(rows, -1, span)

    def rows(self, phase: int):
        """Plane ``phase`` as ``(N, C, prod(Q))``."""
        return self.buf[phase * self.block:(phase + 1) * self.block].reshape(self.N, self.C, self.P)

    def reduce(self, ufunc):
        """``ufunc`` (np.maximum, np.add) over every window, one axis after the other (both are
        separable): ``(k_a - 1)`` whole-plane operations per axis and remaining phase. Returns the grid
        values, flat ``(N * C * prod(Q),)``."""
        n = self.block
        planes = {ph: (self.buf, i * n) for i, ph in enumerate(itertools.product(*(range(s) for s in self.strides)))}
        for a in reversed(range(len(self.Q))):
            taps, r = self.axis_taps[a], self.R[a]
            if len(taps) == 1:
                continue
            reduced = {}
            for key in {ph[:a] + (0,) + ph[a + 1:] for ph in planes}:
                acc = np.empty(n + self.slack, dtype=self.buf.dtype)
                acc[n:] = 0  # read only by wasted cells
                views = []
                for p, sh in taps:
                    src, start = planes[key[:a] + (p,) + key[a + 1:]]
                    views.append(src[start + sh * r:start + sh * r + n])
                ufunc(views[0], views[1], out=acc[:n])
                for v in views[2:]:
                    ufunc(acc[:n], v, out=acc[:n])
                reduced[key] = (acc, 0)
            planes = reduced
        src, start = planes[(0,) * len(self.Q)]  # an axis of one tap keeps its phase 0 only
        return src[start:start + n]

    def crop(self, grid, channels: int, B=None):
        """Grid values (``N * channels`` rows of ``out_0`` or more first-axis cells) -> contiguous
        ``(N, channels, *out)``, plus bias ``B`` per channel (in the same pass)."""
        Y = grid.reshape((self.N, channels, -1) + tuple(self.Q[1:]))
        Y = Y[(slice(None),) * 2 + tuple(slice(0, o) for o in self.out)]
        if B is not None:
            return Y + B.reshape((1, -1) + (1,) * len(self.out))
        return np.ascontiguousarray(Y)


class _FusedGemm:
    """The native conv GEMM (:mod:`.native_gemm`, ``cpu_kernels/gemm.c``): ``Y = clamp(W @ cols + B)`` per
    group, the weights packed with the bias (once per session: kept in the step's :class:`ConvWeights`),
    bias and clamp applied as each tile of Y is stored. :meth:`of` gives None where it does not pay
    (:func:`.native_gemm.gemm_pays`: as measured against ``np.matmul`` plus the epilogue pass) or does
    not apply (not float32, native kernels off)."""

    def __init__(self, packs, Mg, CKg, clamp_to):
        self.packs, self.Mg, self.CKg = packs, Mg, CKg
        self.lo, self.hi = clamp_to or _NO_CLAMP

    @classmethod
    def of(cls, X, W, B, group, clamp_to, L, kept=None):
        if not (X.dtype == W.dtype == np.float32 and (B is None or B.dtype == np.float32) and W.size):
            return None
        Mg, CKg = W.shape[0] // group, W.size // W.shape[0]
        if not native_gemm.gemm_pays(Mg, CKg, L) or native.function("gemm_f32") is None:
            return None
        packs = kept.packs(W, B, group, native_gemm.rows_layout(Mg, CKg, L)) if kept is not None else \
            native_gemm.packed(W, B, group, N=L)
        return None if packs is None else cls(packs, Mg, CKg, clamp_to)

    def __call__(self, x: int, ldx: int, y: int, ldy: int, L: int):
        """Y at address ``y`` (M rows of L, ``ldy`` floats apart) from the columns at address ``x``
        (C * K rows of L, ``ldx`` apart)."""
        for g, p in enumerate(self.packs):
            native_gemm.gemm_into(p, x + 4 * g * self.CKg * ldx, ldx, y + 4 * g * self.Mg * ldy, ldy, L, self.lo,
                                  self.hi)


def _conv1x1(X, W, B, group, out, L, clamp_to, kept=None):
    """A 1x1 stride-1 unpadded conv of NumPy arrays: the native GEMM where it pays, else ``np.matmul``
    into the output (one BLAS call per group and image) and the epilogue."""
    (N, C), M = X.shape[:2], W.shape[0]
    Y = np.empty((N, M) + tuple(out), dtype=X.dtype)
    gemm = _FusedGemm.of(X, W, B, group, clamp_to, L, kept) if X.size and M else None
    if gemm is not None:
        X = np.ascontiguousarray(X)
        for n in range(N):
            gemm(X[n].ctypes.data, L, native.address(Y[n]), L, L)
        return Y
    if group == 1:
        np.matmul(W.reshape(M, C), X.reshape(N, C, L), out=Y.reshape(N, M, L))
    else:
        np.matmul(W.reshape(group, M // group, C // group), X.reshape(N, group, C // group, L),
                  out=Y.reshape(N, group, M // group, L))
    return _epilogue(Y, B, clamp_to)


def _native_window_conv(name, X, W, B, count, kernel, strides, dilations, pb, out, clamp_to):
    """A 2-D float32 conv by a native kernel of the depthwise kernel's arguments (``count``: the
    depthwise multiplier, or M); None where it does not apply or native kernels are off."""
    if not (X.ndim == 4 and X.dtype == W.dtype == np.float32 and (B is None or B.dtype == np.float32)):
        return None
    fn = native.function(name)
    if fn is None:
        return None
    X, W = np.ascontiguousarray(X), np.ascontiguousarray(W)
    B = None if B is None else np.ascontiguousarray(B)
    N, C, H, Wd = X.shape
    Y = np.empty((N, W.shape[0]) + tuple(out), dtype=np.float32)
    if not Y.size:
        return Y
    native.call(fn, native.ptr(X), native.ptr(W), None if B is None else native.ptr(B), native.address(Y),
                N, C, H, Wd, count, *kernel, *out, *strides, *pb, *dilations, *(clamp_to or _NO_CLAMP))
    return Y


DIRECT_MAX_CHANNELS = 4  # a CNN's first layer: there im2col + GEMM has too short a K to run well...
DIRECT_MAX_TAPS = 256  # ...but not an STFT's long window (1 x 512 taps): that K the GEMM runs well


def _direct_fits(C: int, K: int, row: int) -> bool:
    """Whether the direct kernel suits a group-1 conv of ``C`` input channels, ``K`` taps each, and output
    rows of ``row`` cells: it fills its vectors along a row, so a row must fill half of one (an STFT's
    frames, 1 x 3 cells of 258 filters, ran 5x slower than the GEMM)."""
    return C <= DIRECT_MAX_CHANNELS and 1 < K and C * K <= DIRECT_MAX_TAPS and 2 * row >= native.vector_lanes()


def _direct(X, W, B, kernel, strides, dilations, pb, out, clamp_to=None):
    """A group-1 conv of few input channels by the native direct kernel (``cpu_kernels/direct_conv.c``),
    no im2col copy; None where it does not apply."""
    return _native_window_conv("direct_conv2d_f32", X, W, B, W.shape[0], kernel, strides,
                               dilations, pb, out, clamp_to)


def _depthwise(X, W, B, kernel, strides, dilations, pb, out, clamp_to=None):
    """Depthwise conv (``group == C``, ``M = C * multiplier``). 2-D float32: the native kernel
    (``cpu_kernels/conv.c``). Else columns copied from the planes (long rows, where im2col copies one
    short output row at a time), one batched GEMM over the channels, ``(multiplier, taps) @ (taps, cells)``
    each."""
    Y = _native_window_conv("depthwise_conv2d_f32", X, W, B, W.shape[0] // X.shape[1], kernel, strides,
                            dilations, pb, out, clamp_to)
    if Y is not None:
        return Y
    pl = Planes(X, kernel, strides, dilations, pb, out)
    N, C = X.shape[:2]
    M = W.shape[0]
    span = out[0] * pl.R[0]
    K = math.prod(kernel)
    Y = np.matmul(W.reshape(C, M // C, K), pl.columns(span).reshape(N, C, K, span))
    return _epilogue(pl.crop(Y.reshape(N * M, span), M, B), None, clamp_to)


def _kn2row(X, W, B, kernel, strides, dilations, pb, out, kept=None):
    """Conv as one GEMM per stride phase of the taps' weights ``(taps * M, C)`` with the input planes
    (no im2col copy), then one shifted add per tap of the products ``(M, plane)``."""
    pl = Planes(X, kernel, strides, dilations, pb, out)
    N, C = X.shape[:2]
    M = W.shape[0]
    P, span = pl.P, out[0] * pl.R[0]
    by_phase = {}
    for t, (phase, off) in enumerate(pl.taps()):
        by_phase.setdefault(phase, []).append((t, off))
    Wt = W.reshape(M, C, -1)
    acc = None
    for phase, items in by_phase.items():
        idx = [t for t, _ in items]
        def make(idx=idx):
            return frozen(np.ascontiguousarray(np.moveaxis(Wt[:, :, idx], 2, 0)).reshape(len(idx) * M, C))

        Wp = make() if kept is None else kept.get(("kn2row", W.dtype.str) + tuple(idx), make)
        T = len(items)
        Zbuf = np.empty(N * T * M * P + max(0, max(off for _, off in items) + span - P), dtype=X.dtype)
        np.matmul(Wp, pl.rows(phase), out=Zbuf[:N * T * M * P].reshape(N, T * M, P))
        for j, (_, off) in enumerate(items):
            v = _strided(Zbuf, j * M * P + off, (N, M, span), (T * M * P, P, 1))
            if acc is None:
                acc = v.copy()
            else:
                acc += v
    return pl.crop(acc.reshape(N * M, span), M, B)


BLOCK_BYTES = 1 << 22  # one im2col block on the CPU: cache-sized, reused for every block...
BLOCK_COLUMNS = 2048  # ...but wide enough that the GEMM's packing of W stays a small part of each block


def _im2col_gemm_blocked(X, Wm, B, kernel, strides, dilations, pb, pe, out, group, clamp_to=None, gemm=None):
    """im2col + GEMM (+ bias) a block of output rows (first spatial axis) at a time, the columns copied
    into one reused cache-sized buffer and each block's GEMM written into its slice of Y: VGG's first
    layers would otherwise write and read back 100+ MB of columns. 2-D float32: the columns come from
    the native im2col (whole rows at a time from stride-phase planes, no padded copy of X). ``gemm``: the
    native GEMM with the epilogue (:class:`_FusedGemm`) when it applies."""
    N, C = X.shape[:2]
    M, CK = Wm.shape[0], Wm.shape[1] * group
    fn = native.function("im2col2d_f32") if X.ndim == 4 and X.dtype == np.float32 else None
    Xp = np.ascontiguousarray(X if fn else pad_for_windows(np, X, kernel, strides, dilations, pb, pe, out, 0))
    st = Xp.strides
    row = math.prod(out[1:])  # output cells per first-axis index
    rows = max(1, min(out[0], max(BLOCK_BYTES // max(1, CK * row * X.dtype.itemsize), -(-BLOCK_COLUMNS // row))))
    scratch = np.empty(CK * rows * row, dtype=X.dtype)
    Y = np.empty((N, M, out[0] * row), dtype=X.dtype)
    Wg = Wm.reshape(group, M // group, CK // group)
    tap_strides = ((st[1],) + tuple(b * d for b, d in zip(st[2:], dilations))
                   + tuple(b * s for b, s in zip(st[2:], strides)))
    for n in range(N):
        for i0 in range(0, out[0], rows):
            r = min(rows, out[0] - i0)
            shape = (C,) + tuple(kernel) + (r,) + tuple(out[1:])
            cols = scratch[:CK * r * row].reshape(shape)
            if fn is not None:  # the native im2col reads X itself, unpadded
                native.call(fn, native.ptr(Xp[n]), native.ptr(scratch), C, *X.shape[2:], *kernel, *out, *strides, *pb,
                            *dilations, i0, i0 + r)
            else:
                np.copyto(cols, np.ndarray(shape, X.dtype, buffer=Xp, offset=n * st[0] + i0 * strides[0] * st[2],
                                           strides=tap_strides))
            if gemm is not None:
                gemm(native.address(scratch), r * row, native.address(Y) + 4 * (n * M * out[0] + i0) * row,
                     out[0] * row, r * row)
                continue
            Yb = Y[n, :, i0 * row:(i0 + r) * row]
            if group == 1:
                np.matmul(Wm, cols.reshape(CK, r * row), out=Yb)
            else:
                np.matmul(Wg, cols.reshape(group, CK // group, r * row), out=Yb.reshape(group, M // group, r * row))
            _epilogue(Yb, B, clamp_to)  # while the block is in cache
    return Y.reshape((N, M) + tuple(out))


def _kn2row_pays(C, M, kernel, strides, dilations, out, L):
    """Whether :func:`_kn2row` costs less than im2col for a group-1 conv: GEMM flops (over the padded
    planes for kn2row) plus floats copied, one float moved counted as 40 flops (NumPy copies vs
    OpenBLAS on one core); kn2row's GEMM has only C as inner size, hence C >= 32."""
    K = math.prod(kernel)
    P = math.prod(o + (k - 1) * d // s for o, k, s, d in zip(out, kernel, strides, dilations))
    S = math.prod(strides)
    im2col_cost = 2 * M * C * K * L + 40 * 2 * C * K * L
    kn2row_cost = 2 * M * C * K * P + 40 * (2 * K * M * P + 2 * C * S * P)
    return C >= 32 and kn2row_cost < im2col_cost




def conv(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
         pads=None, strides=None, clamp_to=None, kept: ConvWeights | None = None):
    """:func:`gpuops.ops.conv.conv` of NumPy arrays: the native depthwise kernel (else columns from
    :class:`Planes`), the native direct kernel for few input channels, Winograd where it pays,
    :func:`_kn2row` where it moves fewer bytes than im2col, else the blocked im2col; the native GEMM
    with its epilogue where it pays. ``kept``: the step's :class:`ConvWeights` (W and B constant): 2-D
    float32 convs then run as planned per input shape (:func:`_plan`)."""
    if kept is not None and W is kept.W and B is kept.B and type(X) is np.ndarray:
        key = (X.shape, clamp_to, False, native.threads())
        run = kept.runs.get(key)
        if run is None:
            run = kept.run(key, lambda: _plan(kept, X, group, kernel_shape, auto_pad, strides, dilations, pads,
                                              clamp_to))
        if run and native.enabled():
            Y = run(X)
            if Y is not None:
                return Y
    if not on_host(X, W, B):
        return _generic_conv(xp, X, W, B, auto_pad=auto_pad, dilations=dilations, group=group,
                             kernel_shape=kernel_shape, pads=pads, strides=strides, clamp_to=clamp_to)
    check_bias(B, W.shape[0])
    if kept is not None and not kept.fits(W, B):
        kept = None
    ct = compute_dtype(X.dtype)
    if ct is not None:
        check_conv_shapes(X, W, group, kernel_shape)
        if kept is not None:
            W, B = kept.W32 if kept.W32 is not None else W.astype(ct), B if B is None else (
                kept.B32 if kept.B32 is not None else B.astype(ct))
        else:
            W, B = W.astype(ct), None if B is None else B.astype(ct)
        Y = conv(xp, X.astype(ct), W, B, auto_pad=auto_pad, dilations=dilations, group=group, pads=pads,
                 strides=strides, kept=kept)
        return Y.astype(X.dtype)
    geometry = conv_shape_geometry if kept is None else kept.geometry
    kernel, strides, dilations, pb, pe, out, K, L = geometry(X, W, group, kernel_shape, auto_pad, strides,
                                                             dilations, pads)
    N, C = X.shape[:2]
    M = W.shape[0]
    if group == C and C > 1 and L > 0 and X.size:  # depthwise, 1x1 too
        return _depthwise(X, W, B, kernel, strides, dilations, pb, out, clamp_to)
    if group == 1 and _direct_fits(C, K, out[-1]) and L > 0 and X.size:
        Y = _direct(X, W, B, kernel, strides, dilations, pb, out, clamp_to)
        if Y is not None:
            return Y
    if K == 1 and L == math.prod(X.shape[2:]) and not any(pb) and not any(pe):  # 1x1, stride 1: no copy
        return _conv1x1(X, W, B, group, out, L, clamp_to, kept)
    if K > 1 and L > 0 and X.size:  # paths without an im2col copy
        if winograd.applies(X, W, kernel, strides, dilations, group, out):
            Y = _winograd(X, W, B, pb, out, clamp_to)
            if Y is not None:
                return Y
        if group == 1 and _kn2row_pays(C, M, kernel, strides, dilations, out, L):
            return _epilogue(_kn2row(X, W, B, kernel, strides, dilations, pb, out, kept), None, clamp_to)
    if L > 0:
        Wm = W.reshape(M, (C // group) * K)
        return _im2col_gemm_blocked(X, Wm, B, kernel, strides, dilations, pb, pe, out, group, clamp_to,
                                    _FusedGemm.of(X, W, B, group, clamp_to, L, kept) if M else None)
    return _generic_conv(xp, X, W, B, auto_pad=auto_pad, dilations=dilations, group=group,
                         kernel_shape=kernel_shape, pads=pads, strides=strides, clamp_to=clamp_to)


@op("Conv", since=1, device="cpu", prepare=prepare_conv)
def Conv(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
         pads=None, strides=None, prepared=None):
    if prepared is not None and W is prepared.W and B is prepared.B and type(X) is np.ndarray:
        run = prepared.runs.get((X.shape, None, False, native.threads()))  # planned by conv() below
        if run and native.enabled():
            Y = run(X)
            if Y is not None:
                return Y
    return conv(xp, X, W, B, auto_pad=auto_pad, dilations=dilations, group=group,
                kernel_shape=kernel_shape, pads=pads, strides=strides, kept=prepared)


@op("FusedConv", domain="com.microsoft", since=1, device="cpu", prepare=prepare_conv)
def FusedConv(xp, X, W, B=None, Z=None, *, activation=None, activation_params=None, auto_pad="NOTSET",
              dilations=None, group=1, kernel_shape=None, pads=None, strides=None, prepared=None):
    """activation(Conv(X, W) + B + Z). float32 with Relu or Clip (or none): without Z the clamp goes with
    the bias in the conv's own last pass; with Z, bias, Z and the clamp in one native pass after it."""
    if prepared is not None and W is prepared.W and B is prepared.B and type(X) is np.ndarray:
        key = (X.shape, activation, Z is None, native.threads())
        run = prepared.runs.get(key)
        if run is None:
            def plan():
                act = _activation(activation, activation_params) if X.dtype == _F32 else None
                return act is not None and _plan(prepared, X, group, kernel_shape, auto_pad, strides, dilations,
                                                 pads, *act)

            run = prepared.run(key, plan)
        if run and native.enabled():
            Y = run(X, Z)
            if Y is not None:
                return Y
    geometry = dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
                    strides=strides)
    if not on_host(X, W, B, Z):
        return _generic_fused_conv(xp, X, W, B, Z, activation=activation, activation_params=activation_params,
                                   **geometry)
    clamp_to = as_clamp(activation, activation_params) if X.dtype == np.float32 else None
    if Z is None and clamp_to is not None:
        return conv(xp, X, W, B, clamp_to=clamp_to if activation else None, kept=prepared, **geometry)
    residual = native.function("bias_residual_clamp_f32") if (
        Z is not None and clamp_to is not None and Z.dtype == np.float32
        and (B is None or B.dtype == np.float32)) else None
    Y = conv(xp, X, W, None if residual else B, kept=prepared, **geometry)
    if residual is not None:
        if Z.shape == Y.shape and Y.flags.c_contiguous and Y.flags.writeable:
            B, Z = None if B is None else np.ascontiguousarray(B), np.ascontiguousarray(Z)  # kept while it runs
            native.call(residual, native.ptr(Y), None if B is None else native.ptr(B), native.ptr(Z), Y.shape[0],
                        Y.shape[1], math.prod(Y.shape[2:]), *clamp_to)
            return Y
        if B is not None:  # the conv ran without it
            Y = Y + B.reshape((-1,) + (1,) * (Y.ndim - 2))
    return residual_activation(xp, Y, Z, activation, activation_params)


@op("NhwcConv", domain="com.microsoft", since=1, device="cpu")
def NhwcConv(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
             strides=None):
    """The generic NhwcConv's transposes around this module's :func:`conv`."""
    return nhwc_conv(xp, X, W, B, conv, auto_pad=auto_pad, dilations=dilations, group=group,
                     kernel_shape=kernel_shape, pads=pads, strides=strides)


@op("DepthwiseConv2d", since=1, device="cpu", prepare=prepare_conv)
def DepthwiseConv2d(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, kernel_shape=None, pads=None,
                    strides=None, prepared=None):
    """The generic DepthwiseConv2d's checks around this module's :func:`conv`."""
    return depthwise_conv2d(xp, X, W, B, lambda *a, **k: conv(*a, **k, kept=prepared), auto_pad=auto_pad,
                            dilations=dilations, kernel_shape=kernel_shape, pads=pads, strides=strides)


_SILU = (5, 0.0, 0.0)  # conv_params.h's CONV_SILU


@op("ConvSilu", domain=_private.DOMAIN, since=1, device="cpu", prepare=prepare_conv)
def ConvSilu(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
             strides=None, prepared=None):
    """SiLU(Conv(X, W, B)) (:mod:`gpuops.ops.contrib.private`): a planned float32 conv applies the SiLU in
    its last pass; else the conv, then ``y * sigmoid(y)``."""
    if prepared is not None and W is prepared.W and B is prepared.B and type(X) is np.ndarray:
        key = (X.shape, "Silu", True, native.threads())
        run = prepared.runs.get(key)
        if run is None:
            run = prepared.run(key, lambda: X.dtype == _F32 and _plan(prepared, X, group, kernel_shape, auto_pad,
                                                                      strides, dilations, pads, _NO_CLAMP, _SILU))
        if run and native.enabled():
            Y = run(X)
            if Y is not None:
                return Y
    if not on_host(X, W, B):
        return _private.ConvSilu(xp, X, W, B, auto_pad=auto_pad, dilations=dilations, group=group,
                                 kernel_shape=kernel_shape, pads=pads, strides=strides)
    Y = conv(xp, X, W, B, auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
             strides=strides, kept=prepared)
    return _private.activate(xp, Y, "Silu").astype(Y.dtype)


# -- native programs (gpuops.onnx.programs): the planned convs, the ones the ops above run --------------


def _planned_step(step, operands, key, plan_args):
    """The :class:`.planned.NativeStep` of a conv step whose weights were prepared: its planned conv for
    the input's shape (the one the op runs: planned now, under the op's key, if no run has yet)."""
    kept, X = step.prepared, operands[0]
    if kept is None or not planned.is_f32(X) or operands[1] is not kept.W or \
            (operands[2] if len(operands) > 2 else None) is not kept.B:
        return None
    a = step.attrs
    run = kept.run(key(X), lambda: _plan(kept, planned.placeholder(X), a.get("group", 1), a.get("kernel_shape"),
                                         a.get("auto_pad", "NOTSET"), a.get("strides"), a.get("dilations"),
                                         a.get("pads"), *plan_args))
    if not run:
        return None
    Z = operands[3] if len(operands) > 3 else None
    if Z is not None and not (planned.is_f32(Z) and Z.shape == run.shape):
        return None
    return planned.NativeStep(run.shape, (planned.Call(run.fn, run.address, 0, None if Z is None else 3),), holds=run)


@planned.planned("Conv")
def _conv_step(step, operands):
    return _planned_step(step, operands, lambda X: (X.shape, None, False, native.threads()), (None,))


@planned.planned("FusedConv", "com.microsoft")
def _fused_conv_step(step, operands):
    act = _activation(step.attrs.get("activation"), step.attrs.get("activation_params"))
    if act is None:
        return None
    Z = operands[3] if len(operands) > 3 else None
    return _planned_step(step, operands, lambda X: (X.shape, step.attrs.get("activation"), Z is None,
                                                    native.threads()), act)


@planned.planned("ConvSilu", _private.DOMAIN)
def _conv_silu_step(step, operands):
    return _planned_step(step, operands, lambda X: (X.shape, "Silu", True, native.threads()), (_NO_CLAMP, _SILU))
