"""The native float32 GEMM of convolutions (``cpu_kernels/gemm.c``): ``Y = A @ B + bias``, clamped to
``[lo, hi]`` (a fused Relu or Clip), where A (M x K) is a conv's weights, packed with its bias
(:func:`packed`; a session packs a weight once, kept on its plan step: :mod:`.conv`), and B (K x N)
its columns.

The kernel copies each tile's columns of B (or a conv's taps, read from its input in place of an
im2col copy) into a strip that every panel of the weight then reads in order, keeps output channels
on the vector lanes (small maps, 7x7 = 49 cells, leave no lanes empty) or the cells
(:func:`rows_layout`: short K, large maps), and adds the bias and clamps in its store. Against
``np.matmul`` (OpenBLAS) plus the native bias-and-clamp pass, on one thread: as fast or faster on most
conv shapes (one core of the AVX-512 Xeon, 2026-11-28: 95-153 GF/s against OpenBLAS's 68-122);
:func:`gemm_pays` says where. When native kernels are off :func:`packed` and :func:`gemm` return None
and callers use ``np.matmul``.
"""

from __future__ import annotations

import math
import threading
import weakref

import numpy as np

from ... import native


class Packed:
    """A weight (M x K float32) packed for :func:`gemm` by the kernel, with its bias (M float32 or
    None): read-only arrays and their data addresses. ``rows``: the layout (cells on the vector lanes,
    for short K; else channels)."""

    __slots__ = ("pack", "address", "bias", "bias_address", "M", "K", "rows")

    def __init__(self, pack: np.ndarray, bias: np.ndarray | None, M: int, K: int, rows: bool):
        self.pack, self.address, self.M, self.K, self.rows = pack, pack.ctypes.data, M, K, rows
        self.bias, self.bias_address = bias, None if bias is None else bias.ctypes.data


def _pack(A: np.ndarray, bias, rows: bool) -> Packed:
    A = np.ascontiguousarray(A, dtype=np.float32)
    M, K = A.shape
    width = native.function("gemm_pack_width_f32")(rows)
    pack = np.empty(max(-(-M // width) * width * K, 1), np.float32)
    native.call(native.function("gemm_pack_f32"), native.ptr(A), K, M, K, rows, native.ptr(pack))
    pack.flags.writeable = False
    if bias is not None:
        bias = np.array(bias, dtype=np.float32)  # a copy: read-only below
        bias.flags.writeable = False
    return Packed(pack, bias, M, K, rows)


_constant_packs: dict = {}  # (id(B), trans_b, id(bias)) -> (weak refs to B and bias, Packed)
_constant_lock = threading.Lock()


def constant_pack(B: np.ndarray, trans_b: bool, bias: np.ndarray | None = None) -> Packed | None:
    """The channels-layout pack of a fully connected layer's constant weight, W = B (M x K) with
    ``trans_b``, else B.T (B: K x M), with its bias (M,): made once per weight array and kept while the
    arrays live, so that a session's plans for several feed shapes share it. None when native kernels
    are unavailable."""
    key = (id(B), bool(trans_b), id(bias))
    with _constant_lock:
        hit = _constant_packs.get(key)
        if hit is not None and hit[0][0]() is B and (bias is None or hit[0][1]() is bias):
            return hit[1]
    got = packed(np.ascontiguousarray(B if trans_b else B.T), bias, rows=False)
    if not got:
        return None
    refs = (weakref.ref(B), None if bias is None else weakref.ref(bias))
    with _constant_lock:
        _constant_packs[key] = (refs, got[0])
    for a in (B, bias):
        if a is not None:
            weakref.finalize(a, _constant_packs.pop, key, None)
    return got[0]


def rows_layout(M: int, K: int, N: int | None = None, row: int | None = None) -> bool:
    """Whether the cells-on-lanes layout beats the channels-on-lanes one for products with N cells
    (None: large maps): for short K, where the transposed store costs as much as the sums, or channels
    that fill the lanes poorly; never on small maps (7x7), whose cells would; and with 16 lanes on every
    map of 784 cells or more (one core of the AVX-512 Xeon, 2026-11-28: 1.1-1.5x faster there, its
    tiles storing rows as they lie) whose output rows (``row`` cells, where a conv reads its columns a
    row at a time) fill a vector -- those read through phase planes only below K 256: since the channels
    layout moves a tile's cells into its strip a vector at a time, 3x3 convs of 32-128 input channels
    on 28x28-80x80 maps ran 0.85-1.02x of the cells layout's time there (16 channels: 1.02-1.3x). With
    8 lanes (the same Xeon, x86-64-v3, 2026-11-28, in a session's Conv + Relu; both layouts within
    0.93-1.04x of each other again after the strips' vector moves): on every product of 96 or more cells
    read as rows of B (a 1x1 conv's, ``row`` None) at 0.85-1.0x of the channels layout's time, and on
    convs of 3025 cells or more (0.88x on 55x55 maps; 27x27 and 28x28 ones ran at 0.9-1.1x, resnet50's
    3x3 at 1.1x). Lanes:
    :func:`gpuops.native.vector_lanes` (16 with AVX-512, 8 with AVX2)."""
    lanes = native.vector_lanes()
    if N is None or (N >= 784 and lanes == 16 and (row is None or (row >= lanes and K < 256))):
        return True
    if lanes == 8 and N >= 96 and (row is None or N >= 3025):
        return True
    return N >= 96 and (K < 96 or M / (-(-M // lanes) * lanes) < 0.8)


def pack_width(rows: bool) -> int:
    """Output channels per tile of a pack in layout ``rows`` (channels fill a weight's pack to a multiple
    of it): 8 cells-on-lanes (6 with 8 lanes), a vector's lanes otherwise."""
    return (8 if native.vector_lanes() == 16 else 6) if rows else native.vector_lanes()


def packed(W: np.ndarray, bias: np.ndarray | None = None, group: int = 1, N: int | None = None,
           rows: bool | None = None) -> tuple[Packed, ...] | None:
    """The weights ``W`` (M, ...) float32, and the ``bias`` (M,) added to their products, as ``group``
    packed matrices, group g holding rows ``[g M / group, (g + 1) M / group)`` of ``W.reshape(M, -1)``.
    ``N``: the cells of the products to come, if known; ``rows``: the layout (None:
    :func:`rows_layout`). None when native kernels are unavailable or ``W`` is not float32."""
    if not isinstance(W, np.ndarray) or W.dtype != np.float32 or W.ndim < 1 or W.shape[0] % group:
        return None
    if bias is not None and np.shape(bias) != (W.shape[0],):
        raise ValueError(f"packed: bias of shape {np.shape(bias)} for {W.shape[0]} output rows")
    if native.function("gemm_pack_f32") is None:
        return None
    Mg, K = W.shape[0] // group, math.prod(W.shape[1:])
    if rows is None:
        rows = rows_layout(Mg, K, N)
    A = W.reshape(W.shape[0], K)
    return tuple(_pack(A[g * Mg:(g + 1) * Mg], None if bias is None else bias[g * Mg:(g + 1) * Mg], rows)
                 for g in range(group))


_F32 = np.dtype(np.float32)


def _rows(a: np.ndarray, cols: int) -> tuple[int, int] | None:
    """(data address, row stride in floats) of 2-D float32 ``a`` whose rows are contiguous and at
    least ``cols`` apart, else None."""
    if a.dtype != _F32 or a.ndim != 2:
        return None
    flags = a.flags
    if flags.c_contiguous:
        return native.address(a) if flags.writeable and a.size else a.ctypes.data, max(cols, 1)
    rows, step = a.strides
    if (a.shape[1] > 1 and step != 4) or rows % 4 or (a.shape[0] > 1 and rows < 4 * cols):
        return None
    return a.ctypes.data, rows // 4 if a.shape[0] > 1 else max(cols, 1)


def gemm(p: Packed, B: np.ndarray, clamp_to=None, out: np.ndarray | None = None) -> np.ndarray | None:
    """``clip(A @ B + bias[:, None], lo, hi)`` for the packed ``A`` (M x K) and its bias and ``B``
    (K x N float32, rows may be strided), ``clamp_to = (lo, hi)`` or None (NaN stays NaN, as
    ``np.clip``), into ``out`` (M x N float32, rows may be strided, not overlapping B) when given.
    None when native kernels are unavailable."""
    fn = native.function("gemm_f32")
    if fn is None:
        return None
    M, K = p.M, p.K
    if B.ndim != 2 or B.shape[0] != K:
        raise ValueError(f"gemm: B of shape {B.shape} for a packed {M} x {K} weight")
    N = B.shape[1]
    b = _rows(B, N)
    if b is None:
        B = np.ascontiguousarray(B, dtype=np.float32)
        b = native.ptr(B), max(N, 1)
    if out is None:
        out = np.empty((M, N), np.float32)
        y = native.address(out) if out.size else 0, max(N, 1)
    else:
        y = _rows(out, N) if out.shape == (M, N) and out.flags.writeable else None
        if y is None:
            raise ValueError(f"gemm: out must be a writeable ({M}, {N}) float32 array with contiguous rows")
    if M and N:
        lo, hi = _NO_CLAMP if clamp_to is None else clamp_to
        native.call(fn, p.address, b[0], b[1], p.bias_address, y[0], y[1], M, K, N, p.rows, lo, hi)
    return out


_NO_CLAMP = (-math.inf, math.inf)


def fc(p: Packed, X: np.ndarray, clamp_to=None) -> np.ndarray | None:
    """A fully connected layer, ``clip(X @ A.T + bias, lo, hi)``, for the packed ``A`` (M x K, channels
    layout) and X (N x K float32): :func:`gemm` with X's rows as its cells, read and written as rows
    (``cpu_kernels/gemm.c`` ``fc_f32``). None when native kernels are unavailable."""
    fn = native.function("fc_f32")
    if fn is None:
        return None
    if p.rows or X.ndim != 2 or X.shape[1] != p.K:
        raise ValueError(f"fc: X of shape {X.shape} for a packed {p.M} x {p.K} weight (channels layout)")
    X = np.ascontiguousarray(X, dtype=np.float32)
    N = X.shape[0]
    out = np.empty((N, p.M), np.float32)
    if p.M and N:
        lo, hi = _NO_CLAMP if clamp_to is None else clamp_to
        native.call(fn, p.address, native.ptr(X), p.K, p.bias_address, native.address(out), p.M, p.M, p.K, N, lo, hi)
    return out


def gemm_into(p: Packed, b: int, ldb: int, y: int, ldy: int, N: int, lo: float, hi: float) -> bool:
    """:func:`gemm` by addresses, for callers that have checked their buffers (a conv's columns and
    output rows): B (K rows of N floats, ``ldb`` apart) at ``b``, Y (M rows, ``ldy`` apart) at ``y``.
    False when native kernels are unavailable."""
    fn = native.function("gemm_f32")
    if fn is None:
        return False
    if p.M and N:
        native.call(fn, p.address, b, ldb, p.bias_address, y, ldy, p.M, p.K, N, p.rows, lo, hi)
    return True


MR = {16: 14, 8: 6}  # cells per tile of the channels layout, by vector lanes (cpu_kernels/gemm.c)


def gemm_pays(M: int, K: int, N: int, threads: int | None = None) -> bool:
    """Whether :func:`gemm` beats ``np.matmul`` plus the native bias-and-clamp pass on an M x K x N
    product at ``threads`` threads (None: the native kernels' count now).

    One thread, AVX-512 (first measured on another machine): it wins by 1.2-2x with cold caches almost
    everywhere, so this asks for no loss with warm ones. Not for fewer channels than a vector's lanes,
    nor for short K where channels leave lanes empty (M % lanes) -- unless the cells take the lanes
    (:func:`rows_layout`) -- or small maps have many channels. Re-measured 2026-11-27 on an Intel Xeon
    KVM guest (CPUID family 6 model 167, AVX-512 with VNNI, 2 cores), warm caches, against OpenBLAS:
    the cells-on-lanes layout at 17-24 channels, K 64-147, 784-3025 cells runs at 0.71-0.90x (now
    taken); 7x7 maps at 0.76-0.97x; channels on the lanes with K >= 96 and 196 or more cells at
    1.05-1.4x (kept: the cold-cache gain is larger).

    AVX2 (:func:`gpuops.native.vector_lanes` 8; the same machine with the kernels built for x86-64-v3
    and ``OPENBLAS_CORETYPE=Haswell``), re-measured 2026-11-28 on the distinct convs of the light
    models (vgg19's of 112x112 cells and more left out) as a session's Conv + Relu, warm caches, in the
    layout :func:`rows_layout` picks: the kernel ran at 0.6-1.0x of OpenBLAS's time (im2col plus
    OpenBLAS for the convs of more than one tap) on all of them but three strided 1x1 convs of resnet50
    (1.0-1.08x), so it runs every product of at least a vector's channels and K >= 16. (The 2026-11-27
    rules, measured before the strips, kept OpenBLAS for channels on 8 lanes.) End to end, against
    those rules: squeezenet 0.83x of its time, inception_v1, inception_v2 and densenet121 0.82-0.84x,
    resnet50 0.90x.

    2026-11-28, the same Xeon (AVX-512 with FP16): with the cells on the lanes the kernel runs 8-24
    channels and K 16-96 on 2704-10816 cells at 0.55-0.61x of OpenBLAS, so those are taken too (a
    single channel, 2.4-2.9x, is not).

    More threads: the kernel splits the cells (columns) in tiles of MR across them, or the channels in
    panels where they outnumber the cells (small maps), where OpenBLAS splits rows too; with too few of
    either to keep every thread busy (a 7x7 map of 64 channels at 4 threads) OpenBLAS runs. (The split
    is the reason, not a measurement: a 2-core machine other processes load gives no stable
    multi-thread timings.)"""
    lanes = native.vector_lanes()
    threads = native.threads() if threads is None else threads
    if threads > 1 and -(-N // MR.get(lanes, 6)) < 2 * threads and not (M > N and -(-M // (2 * lanes)) >= threads):
        return False
    cells = rows_layout(M, K, N) and N >= 96
    if M < lanes:
        return lanes == 16 and cells and M >= pack_width(True) and K >= 16
    if lanes < 16:
        return K >= 16
    if M % lanes:
        if cells:
            return K >= 16
        return K >= (256 if N >= 96 else 1152)
    if N < 96 and M >= 256:
        return K >= 96
    return K >= 32 or N >= 784
