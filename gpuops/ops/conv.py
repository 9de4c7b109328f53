"""Convolution ops: Conv, ConvTranspose, DeformConv, Col2Im, CausalConvWithState.

Convolutions run as im2col + one GEMM per group. ``im2col`` is one copy out of a strided view
(``as_strided``) of the padded input, and a 1x1 stride-1 unpadded kernel is a direct GEMM on the
input. On the CPU the columns are built a block of output rows at a time into one reused
cache-sized buffer (:func:`_im2col_gemm_blocked`), and a group-1 conv with fewer output than input
channels (DenseNet's 3x3 growth convs) skips the im2col copy: one GEMM of every tap's weights with
the input (:class:`Planes`), then a shifted add per tap (:func:`_kn2row`). With the native CPU
kernels (:mod:`gpuops.native`), float32 3x3 stride-1 convs with enough channels run as Winograd
F(2x2, 3x3) (:mod:`.winograd`), depthwise convs and convs of at most 4 input channels as C loops, and
the GEMMs of the 1x1 and blocked im2col convs, where it pays, as a C GEMM over weights packed once
that adds the bias and clamps as it stores each tile (:class:`_FusedGemm`, :mod:`.native_gemm`).
float16/bfloat16 convolve in float32 and are cast back, as onnxruntime does on CPU.
``col2im`` loops over kernel taps only, never over output pixels. The geometry helpers (``spatial_attrs``,
``conv_geometry``) and the window helpers are shared with the pooling ops, and are the pieces a
device override of Conv reuses; the generic :func:`conv` stays its fallback and test oracle.
"""

from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np

from .. import native
from ..errors import NodeError
from ..registry import op
from .linalg import derived, up
from . import native_gemm, winograd
from .elementwise import clamp

# -- geometry (host-side Python ints) ---------------------------------------------------------------


def spatial_attrs(nd: int, kernel_shape, strides=None, dilations=None, pads=None):
    """Normalised per-axis lists: kernel, strides, dilations, pads_begin, pads_end."""
    strides = list(strides) if strides else [1] * nd
    dilations = list(dilations) if dilations else [1] * nd
    pads = list(pads) if pads else [0] * (2 * nd)
    if len(kernel_shape) != nd or len(strides) != nd or len(dilations) != nd or len(pads) != 2 * nd:
        raise NodeError(f"kernel_shape/strides/dilations/pads do not match {nd} spatial axes "
                        f"(kernel_shape={list(kernel_shape)}, strides={strides}, dilations={dilations}, "
                        f"pads={pads})")
    return list(kernel_shape), strides, dilations, pads[:nd], pads[nd:]


def window_extent(k: int, d: int) -> int:
    """Span of a dilated kernel along one axis."""
    return (k - 1) * d + 1


def auto_pads(auto_pad: str, in_shape, kernel, strides, dilations):
    """(pads_begin, pads_end) for ``auto_pad`` SAME_UPPER / SAME_LOWER / VALID."""
    begin, end = [], []
    for n, k, s, d in zip(in_shape, kernel, strides, dilations):
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = -(-n // s)
            total = max(0, (out - 1) * s + window_extent(k, d) - n)
            small, big = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else big)
            end.append(big if auto_pad == "SAME_UPPER" else small)
        elif auto_pad == "VALID":
            begin.append(0)
            end.append(0)
        else:
            raise NodeError(f"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, not {auto_pad!r}")
    return begin, end


def conv_geometry(in_shape, kernel, strides, dilations, pads_begin, pads_end, auto_pad="NOTSET",
                  ceil_mode=0):
    """Resolve padding and output shape of a sliding window op.

    Returns ``(pads_begin, pads_end, out_shape)``. With ``ceil_mode`` (explicit pads only) the last
    window may hang over the end padding; windows that would start in the end padding are dropped.
    """
    if auto_pad and auto_pad != "NOTSET":
        pads_begin, pads_end = auto_pads(auto_pad, in_shape, kernel, strides, dilations)
    out = []
    for n, k, s, d, pb, pe in zip(in_shape, kernel, strides, dilations, pads_begin, pads_end):
        span = n + pb + pe - window_extent(k, d)
        if ceil_mode and (not auto_pad or auto_pad == "NOTSET"):
            o = -(-span // s) + 1
            if (o - 1) * s >= n + pb:
                o -= 1
        else:
            o = span // s + 1
        out.append(max(o, 0))
    return list(pads_begin), list(pads_end), out


# -- sliding windows ----------------------------------------------------------------------------


def pad_spatial(xp, X, pads_begin, pads_end, value=0):
    """Pad the spatial axes (2..) of X; negative pads crop."""
    if not any(pads_begin) and not any(pads_end):
        return X
    if min(pads_begin) < 0 or min(pads_end) < 0:
        X = X[(slice(None), slice(None)) + tuple(
            slice(max(-b, 0), n - max(-e, 0)) for b, e, n in zip(pads_begin, pads_end, X.shape[2:]))]
        pads_begin = [max(b, 0) for b in pads_begin]
        pads_end = [max(e, 0) for e in pads_end]
    # a filled buffer and one interior copy: several times cheaper than xp.pad on small images
    Xp = xp.full(tuple(X.shape[:2]) + tuple(n + b + e for n, b, e in zip(X.shape[2:], pads_begin, pads_end)),
                 value, dtype=X.dtype)
    Xp[(slice(None), slice(None)) + tuple(slice(b, b + n) for b, n in zip(pads_begin, X.shape[2:]))] = X
    return Xp


def pad_for_windows(xp, X, kernel, strides, dilations, pads_begin, pads_end, out_shape, pad_value):
    """X padded so that every window of the output grid lies inside it (``ceil_mode`` overhang too)."""
    ext_end = [max(0, (o - 1) * s + window_extent(k, d) - (n + b + e)) + e
               for n, k, s, d, b, e, o in zip(X.shape[2:], kernel, strides, dilations, pads_begin,
                                              pads_end, out_shape)]
    return pad_spatial(xp, X, pads_begin, ext_end, pad_value)


def _as_strided(xp):
    """``as_strided`` of the library behind ``xp`` (NumPy, CuPy and the stand-in have one), or None."""
    return getattr(getattr(getattr(xp, "lib", None), "stride_tricks", None), "as_strided", None)


def _strided_view(as_strided, x, shape, strides):
    if isinstance(x, np.ndarray) and x.flags.c_contiguous:  # NumPy's as_strided costs ~10 us a call
        return np.ndarray(shape, x.dtype, buffer=x, strides=strides)
    return as_strided(x, shape, strides)


def window_taps(xp, X, kernel, strides, dilations, pads_begin, pads_end, out_shape, pad_value=0):
    """Yield, for each kernel tap in row-major order, the view of padded X that the tap sees at
    every output position: shape ``(N, C, *out_shape)``.

    The input is padded once (with extra end padding when ``ceil_mode`` windows overhang).
    """
    Xp = pad_for_windows(xp, X, kernel, strides, dilations, pads_begin, pads_end, out_shape, pad_value)
    for tap in itertools.product(*(range(k) for k in kernel)):
        yield Xp[(slice(None), slice(None)) + tuple(
            slice(t * d, t * d + (o - 1) * s + 1 if o > 0 else t * d, s)
            for t, d, s, o in zip(tap, dilations, strides, out_shape))]


def im2col(xp, X, kernel, strides, dilations, pads_begin, pads_end, out_shape, pad_value=0):
    """X ``(N, C, *in)`` -> columns ``(N, C, K, *out)`` with ``K = prod(kernel)`` taps (row-major)."""
    as_strided = _as_strided(xp)
    if as_strided is not None and all(o > 0 for o in out_shape):
        Xp = pad_for_windows(xp, X, kernel, strides, dilations, pads_begin, pads_end, out_shape, pad_value)
        st = tuple(Xp.strides)  # bytes; the view (N, C, *kernel, *out) stays inside Xp
        view = _strided_view(as_strided, Xp, tuple(Xp.shape[:2]) + tuple(kernel) + tuple(out_shape),
                             st[:2] + tuple(b * d for b, d in zip(st[2:], dilations))
                             + tuple(b * s for b, s in zip(st[2:], strides)))
        return xp.reshape(view, tuple(X.shape[:2]) + (math.prod(kernel),) + tuple(out_shape))
    taps = list(window_taps(xp, X, kernel, strides, dilations, pads_begin, pads_end, out_shape, pad_value))
    if len(taps) == 1:
        return xp.expand_dims(taps[0], 2)
    return xp.stack(taps, axis=2)


def col2im(xp, cols, image_shape, kernel, strides, dilations, offset=None):
    """Scatter-add columns ``(N, C, K, *blocks)`` into an image ``(N, C, *image_shape)``.

    Tap ``t`` of block ``b`` lands at ``offset + b * stride + t * dilation`` (``offset`` defaults to
    0); contributions outside the image are dropped. The adjoint of :func:`im2col`.
    """
    N, C, _ = cols.shape[:3]
    blocks = cols.shape[3:]
    offset = offset or [0] * len(blocks)
    # work on a buffer big enough for every tap, then crop to the image
    lo = [min(0, off) for off in offset]
    hi = [max(n, off + (b - 1) * s + window_extent(k, d)) if b > 0 else n
          for n, off, b, s, k, d in zip(image_shape, offset, blocks, strides, kernel, dilations)]
    buf = xp.zeros((N, C) + tuple(h - lo_ for h, lo_ in zip(hi, lo)), dtype=cols.dtype)
    if all(b > 0 for b in blocks):
        for i, tap in enumerate(itertools.product(*(range(k) for k in kernel))):
            idx = tuple(slice(off - lo_ + t * d, off - lo_ + t * d + (b - 1) * s + 1, s)
                        for off, lo_, t, d, b, s in zip(offset, lo, tap, dilations, blocks, strides))
            buf[(slice(None), slice(None)) + idx] += cols[:, :, i]
    return buf[(slice(None), slice(None)) + tuple(slice(-lo_, -lo_ + n) for lo_, n in zip(lo, image_shape))]


# -- shifted flat planes (NumPy fast paths) --------------------------------------------------------


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


_NO_CLAMP = (-math.inf, math.inf)
class _FusedGemm:
    """The native conv GEMM (:mod:`.native_gemm`, ``cpu_kernels/gemm.c``): ``Y = clamp(W @ cols + B)`` per
    group, the weights packed once per weight array with the bias, bias and clamp applied as each tile
    of Y is stored. :meth:`of` gives None where it does not pay (:func:`.native_gemm.gemm_pays`: as
    measured against ``np.matmul`` plus the epilogue pass) or does not apply (not float32, native
    kernels off)."""

    def __init__(self, packs, Mg, CKg, clamp_to):
        self.packs, self.Mg, self.CKg = packs, Mg, CKg
        self.lo, self.hi = clamp_to or _NO_CLAMP

    @classmethod
    def of(cls, X, W, B, group, clamp_to, L):
        if not (X.dtype == W.dtype == np.float32 and (B is None or B.dtype == np.float32) and W.size):
            return None
        Mg, CKg = W.shape[0] // group, W.size // W.shape[0]
        if not native_gemm.gemm_pays(Mg, CKg, L):
            return None
        packs = native_gemm.packed(W, B, group, N=L)
        return None if packs is None else cls(packs, Mg, CKg, clamp_to)

    def __call__(self, x: int, ldx: int, y: int, ldy: int, L: int):
        """Y at address ``y`` (M rows of L, ``ldy`` floats apart) from the columns at address ``x``
        (C * K rows of L, ``ldx`` apart)."""
        for g, p in enumerate(self.packs):
            native_gemm.gemm_into(p, x + 4 * g * self.CKg * ldx, ldx, y + 4 * g * self.Mg * ldy, ldy, L, self.lo,
                                  self.hi)


def _conv1x1(X, W, B, group, out, L, clamp_to):
    """A 1x1 stride-1 unpadded conv of NumPy arrays: the native GEMM where it pays, else ``np.matmul``
    into the output (one BLAS call per group and image) and the epilogue."""
    (N, C), M = X.shape[:2], W.shape[0]
    Y = np.empty((N, M) + tuple(out), dtype=X.dtype)
    gemm = _FusedGemm.of(X, W, B, group, clamp_to, L) if X.size and M else None
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
    return _epilogue(np, Y, B, clamp_to)


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


DIRECT_MAX_CHANNELS = 4  # a CNN's first layer: there im2col + GEMM has too short a K to run well


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
    return _epilogue(np, pl.crop(Y.reshape(N * M, span), M, B), None, clamp_to)


def _kn2row(X, W, B, kernel, strides, dilations, pb, out):
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
        Wp = derived((W,), ("kn2row",) + tuple(idx),
                     lambda: np.ascontiguousarray(np.moveaxis(Wt[:, :, idx], 2, 0)).reshape(len(idx) * M, C))
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
            _epilogue(np, Yb, B, clamp_to)  # while the block is in cache
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


def grouped_matmul(xp, W, cols, group):
    """``W (M, C/group * K)`` times columns ``(N, C * K, L)`` per group -> ``(N, M, L)``."""
    N, CK, L = cols.shape
    M = W.shape[0]
    if group == 1:
        return xp.matmul(W, cols)
    Wg = xp.reshape(W, (group, M // group, CK // group))
    Y = xp.matmul(Wg, xp.reshape(cols, (N, group, CK // group, L)))
    return xp.reshape(Y, (N, M, L))


def _check_conv_shapes(X, W, group, kernel_shape, transpose=False):
    if X.ndim < 3:
        raise NodeError(f"X must have rank >= 3 (N, C, D1, ...), got shape {tuple(X.shape)}")
    if W.ndim != X.ndim:
        raise NodeError(f"W rank {W.ndim} does not match X rank {X.ndim}")
    if group < 1 or X.shape[1] % group:
        raise NodeError(f"group={group} does not divide the {X.shape[1]} input channels")
    if transpose:
        if W.shape[0] != X.shape[1]:
            raise NodeError(f"W has {W.shape[0]} input channels, X has {X.shape[1]}")
    elif W.shape[1] * group != X.shape[1] or W.shape[0] % group:
        raise NodeError(f"W shape {tuple(W.shape)} does not fit X with {X.shape[1]} channels and group={group}")
    if kernel_shape and list(kernel_shape) != list(W.shape[2:]):
        raise NodeError(f"kernel_shape {list(kernel_shape)} does not match W shape {tuple(W.shape)}")


def _add_bias(Y, B):
    if B is None:
        return Y
    b = B.reshape((1, -1) + (1,) * (Y.ndim - 2))
    if isinstance(Y, np.ndarray) and Y.flags.writeable:  # Y is a fresh result: add in place
        Y += b
        return Y
    return Y + b


def _epilogue(xp, Y, B, clamp_to):
    """``Y + B`` per channel, then clamped to ``clamp_to = (lo, hi)`` when given (a fused Relu or Clip,
    NaN staying NaN). Y is ``(N, M, ...)`` or a 2-D block of M rows; a writeable NumPy Y is updated in
    place, float32 in one pass by the native kernel."""
    if B is None and clamp_to is None:
        return Y
    lo, hi = clamp_to or _NO_CLAMP
    writeable = isinstance(Y, np.ndarray) and Y.flags.writeable
    fn = native.function("bias_clamp_f32") if (
        writeable and Y.dtype == np.float32 and (B is None or B.dtype == np.float32) and Y.size
        and Y.strides[-1] == 4 and (Y.ndim == 2 or Y.flags.c_contiguous)) else None
    if fn is None:
        bias = None if B is None else xp.reshape(B, (-1,) + (1,) * (Y.ndim - 2 if Y.ndim > 2 else 1))
        if not writeable:
            Y = Y if bias is None else Y + bias
            return Y if clamp_to is None else xp.minimum(xp.maximum(Y, lo), hi)
        if bias is not None:
            Y += bias
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


_HALF = {np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}


def compute_dtype(dtype) -> np.dtype | None:
    """float32 for the half types (no BLAS for them: onnxruntime computes them in float32 on CPU too)."""
    return np.dtype(np.float32) if np.dtype(dtype) in _HALF else None


# -- Conv ---------------------------------------------------------------------------------------

COLS_BYTES = 1 << 28  # bound on one im2col buffer; bigger batches are convolved a chunk of images at a time


_GEOMETRIES: dict = {}


def _geometry(X, W, group, kernel_shape, auto_pad, strides, dilations, pads):
    """(kernel, strides, dilations, pads_begin, pads_end, out, K, L) of a conv, its shapes checked; kept per
    shapes and attributes, which a model's Conv meets again on every run."""
    key = (tuple(X.shape), tuple(W.shape), group, auto_pad, *(None if v is None else tuple(v)
                                                              for v in (kernel_shape, strides, dilations, pads)))
    g = _GEOMETRIES.get(key)
    if g is None:
        _check_conv_shapes(X, W, group, kernel_shape)
        kernel, s, d, pb, pe = spatial_attrs(X.ndim - 2, W.shape[2:], strides, dilations, pads)
        pb, pe, out = conv_geometry(X.shape[2:], kernel, s, d, pb, pe, auto_pad)
        g = (*map(tuple, (kernel, s, d, pb, pe, out)), math.prod(kernel), math.prod(out))
        if len(_GEOMETRIES) >= 4096:
            _GEOMETRIES.clear()
        _GEOMETRIES[key] = g
    return g


def conv(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
         pads=None, strides=None, clamp_to=None):
    """N-D convolution: im2col + one GEMM per group (depthwise included: one batched matmul over the
    channels beats a multiply-add per tap); direct GEMM for unpadded stride-1 1x1 kernels; on the
    CPU, the native depthwise kernel (else columns from :class:`Planes`), Winograd where it pays,
    :func:`_kn2row` where it moves fewer bytes than im2col, else the blocked im2col. ``clamp_to``:
    ``(lo, hi)`` of a fused Relu or Clip, applied with the bias (float32 only: see FusedConv)."""
    ct = compute_dtype(X.dtype)
    if ct is not None:
        _check_conv_shapes(X, W, group, kernel_shape)
        Y = conv(xp, X.astype(ct), up(W), None if B is None else up(B), auto_pad=auto_pad,
                 dilations=dilations, group=group, pads=pads, strides=strides)
        return Y.astype(X.dtype)
    kernel, strides, dilations, pb, pe, out, K, L = _geometry(X, W, group, kernel_shape, auto_pad, strides,
                                                              dilations, pads)
    N, C = X.shape[:2]
    M = W.shape[0]
    if isinstance(X, np.ndarray) and group == C and C > 1 and L > 0 and X.size:  # CPU depthwise, 1x1 too
        return _depthwise(X, W, B, kernel, strides, dilations, pb, out, clamp_to)
    if isinstance(X, np.ndarray) and group == 1 and C <= DIRECT_MAX_CHANNELS and K > 1 and L > 0 and X.size:
        Y = _direct(X, W, B, kernel, strides, dilations, pb, out, clamp_to)
        if Y is not None:
            return Y
    Wm = xp.reshape(W, (M, (C // group) * K))
    if K == 1 and L == math.prod(X.shape[2:]) and not any(pb) and not any(pe):  # 1x1, stride 1: no copy
        if isinstance(X, np.ndarray):
            return _conv1x1(X, W, B, group, out, L, clamp_to)
        Y = grouped_matmul(xp, Wm, xp.reshape(X, (N, C, L)), group)
        return _epilogue(xp, xp.reshape(Y, (N, M) + tuple(out)), B, clamp_to)
    if isinstance(X, np.ndarray) and K > 1 and L > 0 and X.size:  # CPU: paths without an im2col copy
        if winograd.applies(X, W, kernel, strides, dilations, group, out):
            return winograd.conv3x3(X, W, B, pb, out, clamp_to)
        if group == 1 and _kn2row_pays(C, M, kernel, strides, dilations, out, L):
            return _epilogue(xp, _kn2row(X, W, B, kernel, strides, dilations, pb, out), None, clamp_to)
    if isinstance(X, np.ndarray) and L > 0:
        return _im2col_gemm_blocked(X, Wm, B, kernel, strides, dilations, pb, pe, out, group, clamp_to,
                                    _FusedGemm.of(X, W, B, group, clamp_to, L) if M else None)
    step = max(1, COLS_BYTES // max(1, C * K * L * X.dtype.itemsize))  # images per column buffer
    parts = []
    for n0 in range(0, max(N, 1), step):
        Xn = X[n0:n0 + step]
        cols = im2col(xp, Xn, kernel, strides, dilations, pb, pe, out)
        parts.append(grouped_matmul(xp, Wm, xp.reshape(cols, (Xn.shape[0], C * K, L)), group))
    Y = parts[0] if len(parts) == 1 else xp.concat(parts, axis=0)
    return _epilogue(xp, xp.reshape(Y, (N, M) + tuple(out)), B, clamp_to)


@op("Conv", since=1)
def Conv(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
         pads=None, strides=None):
    return conv(xp, X, W, B, auto_pad=auto_pad, dilations=dilations, group=group,
                kernel_shape=kernel_shape, pads=pads, strides=strides)


# -- ConvTranspose ------------------------------------------------------------------------------


def _conv_transpose(xp, X, W, B, auto_pad, dilations, group, kernel_shape, output_padding,
                    output_shape, pads, strides, same_upper_head_small):
    _check_conv_shapes(X, W, group, kernel_shape, transpose=True)
    nd = X.ndim - 2
    kernel, strides, dilations, pb, pe = spatial_attrs(nd, W.shape[2:], strides, dilations, pads)
    output_padding = list(output_padding) if output_padding else [0] * nd
    if len(output_padding) != nd:
        raise NodeError(f"output_padding {output_padding} does not match {nd} spatial axes")
    in_shape = X.shape[2:]
    full = [s * (n - 1) + op_ + window_extent(k, d)
            for n, s, op_, k, d in zip(in_shape, strides, output_padding, kernel, dilations)]
    if output_shape:
        output_shape = list(output_shape)[-nd:]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        output_shape = [n * s for n, s in zip(in_shape, strides)]
    if output_shape:  # pads are derived from the requested shape
        pb, pe = [], []
        for f, o in zip(full, output_shape):
            total = f - o
            small, big = total // 2, total - total // 2
            head_small = (auto_pad == "SAME_UPPER") == same_upper_head_small
            pb.append(small if head_small else big)
            pe.append(big if head_small else small)
        out = list(output_shape)
    else:
        if auto_pad == "VALID":
            pb, pe = [0] * nd, [0] * nd
        out = [f - b - e for f, b, e in zip(full, pb, pe)]
    N, C = X.shape[:2]
    Mg = W.shape[1]
    K = math.prod(kernel)
    Lin = math.prod(in_shape)
    # columns = W^T X per group: (N, G, Mg*K, Lin)
    Wg = xp.reshape(W, (group, C // group, Mg * K))
    Xg = xp.reshape(X, (N, group, C // group, Lin))
    cols = xp.matmul(xp.matrix_transpose(Wg), Xg)
    cols = xp.reshape(cols, (N, group * Mg, K) + tuple(in_shape))
    Y = col2im(xp, cols, out, kernel, strides, dilations, offset=[-b for b in pb])
    return _add_bias(Y, B)


@op("ConvTranspose", since=1)
def ConvTranspose_1(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                    output_padding=None, output_shape=None, pads=None, strides=None):
    # opset 1: with output_shape, the odd padding unit goes to the head only for SAME_UPPER
    return _conv_transpose(xp, X, W, B, auto_pad, dilations, group, kernel_shape, output_padding,
                           output_shape, pads, strides, same_upper_head_small=False)


@op("ConvTranspose", since=11)
def ConvTranspose(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                  output_padding=None, output_shape=None, pads=None, strides=None):
    # opset 11+: SAME_UPPER puts the odd padding unit at the end (tail), others at the head
    return _conv_transpose(xp, X, W, B, auto_pad, dilations, group, kernel_shape, output_padding,
                           output_shape, pads, strides, same_upper_head_small=True)


# -- DeformConv ---------------------------------------------------------------------------------


@op("DeformConv", since=19)
def DeformConv(xp, X, W, offset, B=None, mask=None, *, dilations=None, group=1, kernel_shape=None,
               offset_group=1, pads=None, strides=None):
    """Deformable convolution: each tap samples X (multilinear, zero outside) at its regular
    position plus a learned offset, optionally scaled by ``mask``; then a grouped matmul."""
    _check_conv_shapes(X, W, group, kernel_shape)
    nd = X.ndim - 2
    kernel, strides, dilations, pb, pe = spatial_attrs(nd, W.shape[2:], strides, dilations, pads)
    _, _, out = conv_geometry(X.shape[2:], kernel, strides, dilations, pb, pe)
    N, C = X.shape[:2]
    M = W.shape[0]
    OG = offset_group
    K = math.prod(kernel)
    L = math.prod(out)
    in_shape = X.shape[2:]
    if C % OG:
        raise NodeError(f"offset_group={OG} does not divide the {C} input channels")
    if tuple(offset.shape) != (N, OG * K * nd) + tuple(out):
        raise NodeError(f"offset shape {tuple(offset.shape)} != expected {(N, OG * K * nd) + tuple(out)}")
    # regular sampling positions per tap and output pixel (host), then + offsets (device)
    grids = np.meshgrid(*(np.arange(o) for o in out), indexing="ij")
    taps = np.array(list(itertools.product(*(range(k) for k in kernel)))).reshape((K, nd) + (1,) * nd)
    base = np.stack([g * s - b for g, s, b in zip(grids, strides, pb)])  # (nd, *out)
    base = base[None] + taps * np.array(dilations).reshape((1, nd) + (1,) * nd)  # (K, nd, *out)
    pdt = xp.float64 if offset.dtype == xp.float64 else xp.float32  # coordinates in at least float32
    pos = xp.reshape(offset, (N, OG, K, nd) + tuple(out)).astype(pdt) + xp.asarray(base, dtype=pdt)
    pos = xp.reshape(pos, (N, OG, K, nd, L))
    # gather rows of X laid out as (N*OG*prod(in), C/OG)
    S = math.prod(in_shape)
    Cg = C // OG
    Xt = xp.reshape(xp.matrix_transpose(xp.reshape(X, (N, OG, Cg, S))), (N * OG * S, Cg))
    row0 = xp.reshape(xp.arange(N * OG, dtype=xp.int64) * S, (N, OG, 1, 1))
    low = [xp.floor(pos[:, :, :, i]) for i in range(nd)]
    sampled = None
    for corner in itertools.product((0, 1), repeat=nd):
        weight = None
        flat = row0
        valid = None
        stride = S
        for i, c in enumerate(corner):
            stride //= in_shape[i]
            idx = low[i] + c
            w = 1 - xp.abs(pos[:, :, :, i] - idx)
            ok = (idx >= 0) & (idx <= in_shape[i] - 1)
            weight = w if weight is None else weight * w
            valid = ok if valid is None else valid & ok
            flat = flat + clamp(xp, idx, 0, in_shape[i] - 1).astype(xp.int64) * stride
        weight = xp.where(valid, weight, xp.zeros_like(weight))  # (N, OG, K, L)
        vals = xp.take(Xt, xp.reshape(flat, (-1,)), axis=0)  # (N*OG*K*L, Cg)
        term = xp.reshape(vals, (N, OG, K, L, Cg)) * weight[..., None]
        sampled = term if sampled is None else sampled + term
    if mask is not None:
        sampled = sampled * xp.reshape(mask, (N, OG, K, L, 1))
    cols = xp.reshape(xp.permute_dims(sampled, (0, 1, 4, 2, 3)), (N, C * K, L)).astype(X.dtype)
    Y = grouped_matmul(xp, xp.reshape(W, (M, (C // group) * K)), cols, group)
    return _add_bias(xp.reshape(Y, (N, M) + tuple(out)), B)


# -- Col2Im -------------------------------------------------------------------------------------


@op("Col2Im", since=18, host_inputs=(1, 2))
def Col2Im(xp, input, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    image = [int(v) for v in image_shape]
    block = [int(v) for v in block_shape]
    nd = len(image)
    kernel, strides, dilations, pb, pe = spatial_attrs(nd, block, strides, dilations, pads)
    _, _, blocks = conv_geometry(image, kernel, strides, dilations, pb, pe)
    N, CK, L = input.shape
    K = math.prod(kernel)
    if CK % K or L != math.prod(blocks):
        raise NodeError(f"input shape {tuple(input.shape)} does not fit block_shape {block} over image "
                        f"{image} ({math.prod(blocks)} blocks expected)")
    cols = xp.reshape(input, (N, CK // K, K) + tuple(blocks))
    return col2im(xp, cols, image, kernel, strides, dilations, offset=[-b for b in pb])


# -- CausalConvWithState ------------------------------------------------------------------------


@op("CausalConvWithState", since=27)
def CausalConvWithState(xp, input, weight, bias=None, past_state=None, *, activation="none"):
    """Depthwise causal 1-D conv over ``concat(past_state, input)``; also returns the carry state."""
    if activation not in ("none", "silu", "swish"):
        raise NodeError(f"activation must be 'none', 'silu' or 'swish', not {activation!r}")
    if input.ndim != 3 or weight.ndim != 3:
        raise NodeError(f"input and weight must be rank 3, got {tuple(input.shape)} and {tuple(weight.shape)}")
    Bn, C, T = input.shape
    k = weight.shape[2]
    if past_state is None:
        past_state = xp.zeros((Bn, C, k - 1), dtype=input.dtype)
    padded = xp.concat([past_state, input], axis=2)
    acc = xp.float32 if input.dtype.itemsize < 4 else input.dtype  # accumulate half types in float32
    P, Wt = padded.astype(acc), weight.astype(acc)
    Y = xp.zeros((Bn, C, T), dtype=acc)
    for j in range(k):  # depthwise: one multiply-add per tap
        Y = Y + P[:, :, j:j + T] * Wt[None, :, 0, j:j + 1]
    Y = _add_bias(Y, None if bias is None else bias.astype(acc)).astype(input.dtype)
    if activation != "none":  # SiLU, evaluated in float32 for half types
        Y32 = Y.astype(acc)
        Y = (Y32 / (1 + xp.exp(-Y32))).astype(input.dtype)
    return Y, padded[:, :, padded.shape[2] - (k - 1):]
