"""RNN, GRU and LSTM on the CPU (``@op(..., device="cpu")``): the weights' rearranged layouts (the
transposed R, the fused loops' gate-major W with its bias and scaled R) made once per session and
kept on the plan step (:class:`RnnWeights`, the ops' ``prepare`` hook), and the fused LSTM and GRU
loops run in C (``cpu_kernels/rnn.c``) where that beats the NumPy step loop. The generic ops of
:mod:`gpuops.ops.rnn` stay their fallback and test oracle.
"""

from __future__ import annotations

import numpy as np

from ... import native, threads
from ...registry import op
from .. import rnn as _rnn
from ..contrib import quantized as _ms_quantized
from . import planned
from .linalg import matmul_params
from ._common import Kept, frozen, on_host


class RnnWeights(Kept):
    """A recurrent step's constant W, R and B (None: absent, or not constant), and their layouts."""

    def __init__(self, W, R, B):
        super().__init__()
        self.W, self.R, self.B = W, R, B

    def fits(self, W, R, B) -> bool:
        return W is self.W and R is self.R and B is self.B

    def get(self, key, make):
        return super().get(key, lambda: frozen(make()))


def _derive(kept, W, R, B):
    return kept.get if kept is not None and kept.fits(W, R, B) else _rnn.fresh


def _prepare(run):
    """A ``prepare`` hook for a recurrent op: :class:`RnnWeights` of constant W and R (and B), their
    layouts made at plan time by ``run(kept, W, R, B, attrs)``, the op run once on one step of one
    zero input (its own derivations, for the path its attributes select). A model the op would refuse
    is left to fail at run time, where it names the problem."""

    def prepare(constants, attrs):
        W, R, B = constants.get(1), constants.get(2), constants.get(3)
        if type(W) is not np.ndarray or type(R) is not np.ndarray or W.ndim != 3 or W.dtype.kind != "f":
            return None
        if B is not None and type(B) is not np.ndarray:
            B = None
        kept = RnnWeights(W, R, B)
        try:
            run(kept, W, R, B, attrs)
        except Exception:
            pass
        return kept

    return prepare


def _zero_input(W, attrs):
    return np.zeros((1, 1, W.shape[2]), dtype=W.dtype)


def _host_xp():
    from ...device import get_device

    return get_device("cpu").xp


def _native(name, batch: int, H: int, arrays):
    """The C recurrence ``name`` of ``cpu_kernels/rnn.c``, or None. Used for float32 NumPy arrays
    where it beats the NumPy loop (measured on one core): a small per-step GEMM (then the loop's ~10
    NumPy calls a step dominate), or up to 4 rows with up to 512 hidden units (BLAS is slow on so few
    rows). Larger GEMMs are worth BLAS."""
    if not (batch * H * H < 1 << 16 or (batch <= 4 and H <= 512)):
        return None
    if not all(type(a) is np.ndarray and a.dtype == np.float32 for a in arrays):
        return None
    return native.function(name)


_BLAS_SINGLE = threads.blas_single()
SPLIT_WORK = 2 * 262144  # multiply-adds from which blas.h splits a product (2 POOL_MIN_WORK, pool_threads.h)
# multiply-adds from which a product by the pool pays: below, NumPy's matmul took half the time (a 32-step
# LSTM of 128 units, at 2 threads), and the BLAS's workers, if it woke them, spun through a short run
PRODUCT_WORK = 2 * SPLIT_WORK
_params: dict = {}  # (M, N, K, ldy) -> matmul_planned_f32's parameters


def _poolable(M: int, N: int, K: int) -> bool:
    """Whether an M x K x N product goes to :func:`_product`'s pool above one thread (at one, NumPy's matmul
    runs it, the BLAS held at one thread by the session)."""
    return M * N * K >= PRODUCT_WORK and threads.blas_sgemm() is not None and \
        native.function("matmul_planned_f32") is not None


def _pooled(M: int, N: int, K: int) -> bool:
    return native.threads() > 1 and _poolable(M, N, K)


def _product(a, b, out) -> None:
    """``out = a @ b``: a (M x K) and b (K x N) C-contiguous float32, out's rows contiguous (any distance
    apart), by the BLAS NumPy uses split across the native pool while the BLAS is held at one thread
    (``program.c`` ``matmul_planned_f32``, as programs run their products; the caller holds
    ``_BLAS_SINGLE``): NumPy's matmul would wake the BLAS's own threads, which then spin beside the
    native kernels through the rest of the run."""
    (M, K), N = a.shape, b.shape[1]
    if out.dtype != np.float32 or out.strides[1] != 4 or out.shape != (M, N):
        raise TypeError(f"a product's output must be float32 ({M}, {N}) with contiguous rows")
    ldy = out.strides[0] // 4 if M > 1 else N
    key = (M, N, K, ldy)
    p = _params.get(key)
    if p is None:
        if len(_params) > 64:
            _params.clear()
        p = _params[key] = matmul_params(M, N, K, ldy=ldy)
    native.call(native.function("matmul_planned_f32"), p.ctypes.data, native.ptr(a), native.ptr(b),
                out.ctypes.data)


def _projection_matmul(xa, wt, out=None):
    """``np.matmul(xa, wt, out=out)`` of the fused LSTM's input projection (``ops.rnn._fused_projection``:
    xa (1, D, rows, n + 1), wt (G, D, n + 1, H) C-contiguous float32, out (G, D, rows, H)), one
    :func:`_product` per gate and direction where the products are large enough for the pool."""
    G, D, K, H = wt.shape
    rows = xa.shape[2]
    if not (xa.dtype == wt.dtype == np.float32 and xa.flags.c_contiguous and wt.flags.c_contiguous) or \
            not _pooled(rows, H, K):
        return np.matmul(xa, wt, out=out)
    if out is None:
        out = np.empty((G, D, rows, H), np.float32)
    with _BLAS_SINGLE:
        for g in range(G):
            for d in range(D):
                _product(xa[0, d], wt[g, d], out[g, d])
    return out


@planned.blas_free("LSTM")
def _lstm_blas_free(step, shape_of) -> bool:
    """An LSTM of float32 inputs whose steps run in C and whose projection's products run on the pool."""
    a, ins = step.attrs, list(step.inputs) + [""] * 8
    if ins[4] or a.get("layout", 0) or not _rnn.fuses_lstm(a.get("activations"), a.get("clip"),
                                                         a.get("direction", "forward"), a.get("input_forget", 0),
                                                         ins[7] or None):
        return False
    x, r = shape_of(ins[0]), shape_of(ins[2])
    if x is None or r is None or x[1] != np.float32 or r[1] != np.float32 or len(x[0]) != 3 or len(r[0]) != 3:
        return False
    (T, batch, n), H = x[0], r[0][-1]
    return _native("lstm_f32", batch, H, ()) is not None and _poolable(T * batch, H, n + 1)


PROGRAM_MAX_WORK = 1 << 22
"""The most multiply-adds of an LSTM's projection that its program step makes with its own loops (beyond,
the op's BLAS product pays for the node's own step): silero-vad's 8 x 128 x 512 is 0.5M."""


@planned.planned("LSTM")
def _lstm_step(step, operands):
    """An LSTM of the fused loop's kind (default activations, no clip, peepholes, input_forget, sequence_lens;
    layout 0) with constant weights, its Y made: the projection and the steps in one call
    (``rnn.c``'s lstm_program_f32), Y_h then copied out of Y. The projection's sums in another order than the
    op's product (within float32 rounding of it), the steps the op's kernel."""
    X, W, R = operands[:3]
    B, lens, h0, c0, P = (operands[i] if len(operands) > i else None for i in (3, 4, 5, 6, 7))
    a = step.attrs
    fn, copy = planned.kernel("lstm_program_f32"), planned.kernel("copy_from_rows_planned")
    direction = a.get("direction", "forward")
    if fn is None or copy is None or step.impl.since < 7 or lens is not None or a.get("layout", 0) \
            or not _rnn.fuses_lstm(a.get("activations"), a.get("clip"), direction, a.get("input_forget", 0), P) \
            or not planned.is_f32(X) or X.ndim != 3 or not X.shape[0] or not step.outputs[0] \
            or any(type(v) is not np.ndarray or v.dtype != np.float32 or v.ndim != 3 for v in (W, R)) \
            or (B is not None and (type(B) is not np.ndarray or B.dtype != np.float32)):
        return None
    T, batch, n = X.shape
    D, H = R.shape[0], R.shape[-1]
    if W.shape != (D, 4 * H, n) or R.shape != (D, 4 * H, H) or D != (2 if direction == "bidirectional" else 1) \
            or (B is not None and B.shape != (D, 8 * H)) or (a.get("hidden_size") or H) != H \
            or T * batch * n * 4 * H * D > PROGRAM_MAX_WORK \
            or any(s is not None and not (planned.is_f32(s) and s.shape == (D, batch, H)) for s in (h0, c0)):
        return None
    order, scale = _rnn._LSTM_ORDER, _rnn._LSTM_SCALE
    derive = _derive(step.prepared if type(step.prepared) is RnnWeights else None, W, R, B)  # R's: the op's own
    w = derive("lstm program W", lambda: _rnn._fused_weight(np, W, order, scale, False))  # (D, n, 4H)
    b = np.zeros((D, 4 * H), np.float32) if B is None else B[:, :4 * H] + B[:, 4 * H:]
    bias = derive("lstm program bias", lambda: _rnn._fused_weight(np, b.reshape(D, 4 * H, 1), order, scale, False))
    rt = derive("lstm fused R", lambda: _rnn._fused_weight(np, R, order, scale, False))  # (D, H, 4H)
    rev1 = int(direction == "reverse")
    p = planned.params(w.ctypes.data, bias.ctypes.data, rt.ctypes.data, T, D, batch, n, H, rev1)
    want_c = len(step.outputs) > 2 and bool(step.outputs[2])
    calls = [planned.Call(fn, p, 0, None if h0 is None else 5, None if c0 is None else 6, 2 if want_c else None,
                          wide=True)]
    holds = [p, w, bias, rt]
    extra = [(2, (D, batch, H))] if want_c else []
    if len(step.outputs) > 1 and step.outputs[1]:  # Y_h: each direction's last step, a row of Y
        bh = 4 * batch * H
        at = [((0 if d == 1 or rev1 else T - 1) * D + d) * bh for d in range(D)]
        q = planned.params(D, bh, at[-1] - at[0], at[0])
        calls.append(planned.Call(copy, q, planned.OUTPUT, out=1))
        holds.append(q)
        extra.append((1, (D, batch, H)))
    return planned.NativeStep((T, D, batch, H), tuple(calls), holds=tuple(holds), extra=tuple(extra))


def _lstm_loop(XW, RT, h0, c0):
    """The fused LSTM's steps in C: XW (T, 4, D, batch, H), RT (D, H, 4H)."""
    T, _, D, batch, H = XW.shape
    fn = _native("lstm_f32", batch, H, (XW, RT, h0, c0))
    if fn is None:
        return None
    h0, c0 = np.ascontiguousarray(h0), np.ascontiguousarray(c0)
    Y, hn, cn = np.empty((T, D, batch, H), dtype=XW.dtype), np.empty_like(h0), np.empty_like(c0)
    native.call(fn, *(native.ptr(a) for a in (XW, RT, h0, c0, Y, hn, cn)), T, D, batch, H)
    return Y, [hn, cn]


def _gru_loop(XW, RT, B, h0, lbr):
    """The fused GRU's steps in C: XW (T, 3, D, batch, H), RT (D, H, 3H)."""
    T, _, D, batch, H = XW.shape
    fn = _native("gru_f32", batch, H, (XW, RT, h0) + (() if B is None else (B,)))
    if fn is None:
        return None
    h0 = np.ascontiguousarray(h0)
    rbh = np.ascontiguousarray(B[:, 5 * H:]) if lbr and B is not None else None
    Y, hn = np.empty((T, D, batch, H), dtype=XW.dtype), np.empty_like(h0)
    native.call(fn, native.ptr(XW), native.ptr(RT), None if rbh is None else native.ptr(rbh), native.ptr(h0),
                native.ptr(Y), native.ptr(hn), T, D, batch, H, int(lbr))
    return Y, [hn]


# -- RNN -----------------------------------------------------------------------------------------

_RNN_ATTRS = ("activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size")


def _run_rnn(kept, W, R, B, attrs):
    kw = {k: v for k, v in attrs.items() if k in _RNN_ATTRS + ("layout",)}
    _rnn.rnn(_host_xp(), _zero_input(W, attrs), W, R, B, **kw, derive=kept.get)


@op("RNN", since=1, device="cpu", prepare=_prepare(_run_rnn))
def RNN_1(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, *, activation_alpha=None,
          activation_beta=None, activations=None, clip=None, direction="forward",
          hidden_size=None, output_sequence=0, prepared=None):
    return RNN(xp, X, W, R, B, sequence_lens, initial_h, activation_alpha=activation_alpha,
               activation_beta=activation_beta, activations=activations, clip=clip, direction=direction,
               hidden_size=hidden_size, prepared=prepared)


@op("RNN", since=7, device="cpu", prepare=_prepare(_run_rnn))
def RNN(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, *, activation_alpha=None,
        activation_beta=None, activations=None, clip=None, direction="forward",
        hidden_size=None, layout=0, prepared=None):
    derive = _derive(prepared, W, R, B) if on_host(X, W, R, B, sequence_lens, initial_h) else _rnn.fresh
    return _rnn.rnn(xp, X, W, R, B, sequence_lens, initial_h, activation_alpha=activation_alpha,
                    activation_beta=activation_beta, activations=activations, clip=clip, direction=direction,
                    hidden_size=hidden_size, layout=layout, derive=derive)


# -- GRU -----------------------------------------------------------------------------------------

def _run_gru(kept, W, R, B, attrs):
    kw = {k: v for k, v in attrs.items() if k in _RNN_ATTRS + ("layout", "linear_before_reset")}
    _rnn.gru(_host_xp(), _zero_input(W, attrs), W, R, B, **kw, derive=kept.get)


@op("GRU", since=1, device="cpu", prepare=_prepare(_run_gru))
def GRU_1(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, *, activation_alpha=None,
          activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None,
          linear_before_reset=0, output_sequence=0, prepared=None):
    return GRU(xp, X, W, R, B, sequence_lens, initial_h, activation_alpha=activation_alpha,
               activation_beta=activation_beta, activations=activations, clip=clip, direction=direction,
               hidden_size=hidden_size, linear_before_reset=linear_before_reset, prepared=prepared)


@op("GRU", since=7, device="cpu", prepare=_prepare(_run_gru))
def GRU(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, *, activation_alpha=None,
        activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None,
        layout=0, linear_before_reset=0, prepared=None):
    kw = dict(activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations, clip=clip,
              direction=direction, hidden_size=hidden_size, layout=layout, linear_before_reset=linear_before_reset)
    if not on_host(X, W, R, B, sequence_lens, initial_h):
        return _rnn.gru(xp, X, W, R, B, sequence_lens, initial_h, **kw)
    return _rnn.gru(xp, X, W, R, B, sequence_lens, initial_h, **kw, derive=_derive(prepared, W, R, B),
                    loop=_gru_loop)


# -- LSTM ----------------------------------------------------------------------------------------

def _run_lstm(kept, W, R, B, attrs):
    kw = {k: v for k, v in attrs.items() if k in _RNN_ATTRS + ("layout", "input_forget")}
    _rnn.lstm(_host_xp(), _zero_input(W, attrs), W, R, B, **kw, derive=kept.get)


@op("LSTM", since=1, device="cpu", prepare=_prepare(_run_lstm))
def LSTM_1(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
           activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
           hidden_size=None, input_forget=0, output_sequence=0, prepared=None):
    return LSTM(xp, X, W, R, B, sequence_lens, initial_h, initial_c, P, activation_alpha=activation_alpha,
                activation_beta=activation_beta, activations=activations, clip=clip, direction=direction,
                hidden_size=hidden_size, input_forget=input_forget, prepared=prepared)


def _lstm_row(kept: RnnWeights, X, W, R, B, h0, c0):
    """A forward LSTM of default activations over one batch row ``X`` (T, 1, n), float32, its weights
    ``kept``'s: the input projection as one product by the fused gates' (n, 4H) weight plus their bias,
    then the steps in C (``lstm_f32``). A streaming model (silero-vad) runs one step a call, where the
    general driver's checks and layouts cost as much as the arithmetic. None where it does not apply."""
    if not (type(X) is np.ndarray and X.dtype == np.float32 and X.ndim == 3 and X.shape[1] == 1 and
            R.ndim == 3 and R.shape[0] == 1 and W.shape[2] == X.shape[2] and kept.fits(W, R, B)):
        return None
    T, _, n = X.shape
    H = R.shape[-1]
    states = []
    for s in (h0, c0):
        if s is None:
            s = np.zeros((1, 1, H), np.float32)
        elif not (type(s) is np.ndarray and s.dtype == np.float32 and s.shape == (1, 1, H)):
            return None
        states.append(np.ascontiguousarray(s))
    if W.shape[1] != 4 * H or R.shape[1] != 4 * H or (B is not None and B.shape != (1, 8 * H)) or not T:
        return None
    fn = _native("lstm_f32", 1, H, (W, R))
    if fn is None:
        return None
    order, scale = _rnn._LSTM_ORDER, _rnn._LSTM_SCALE
    wt = kept.get("lstm row W", lambda: _rnn._fused_weight(np, W, order, scale, False)[0])  # (n, 4H)
    rt = kept.get("lstm fused R", lambda: _rnn._fused_weight(np, R, order, scale, False))  # (1, H, 4H)
    x = X.reshape(T, n)  # its product xw (T, 4H): the fused loop's (T, 4, D, batch, H) for one row
    if _pooled(T, 4 * H, n):
        xw = np.empty((T, 4 * H), np.float32)
        with _BLAS_SINGLE:
            _product(np.ascontiguousarray(x), wt, xw)
    else:
        xw = np.matmul(x, wt)
    if B is not None:
        xw += kept.get("lstm row bias", lambda: _rnn._fused_weight(
            np, (B[:, :4 * H] + B[:, 4 * H:]).reshape(1, 4 * H, 1), order, scale, False)[0, 0])
    Y, hn, cn = np.empty((T, 1, 1, H), np.float32), np.empty((1, 1, H), np.float32), np.empty((1, 1, H), np.float32)
    native.call(fn, native.address(xw), native.ptr(rt), *(native.address(a) for a in (*states, Y, hn, cn)),
                T, 1, 1, H)
    return Y, hn, cn


@op("LSTM", since=7, device="cpu", prepare=_prepare(_run_lstm))
def LSTM(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
         activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
         hidden_size=None, input_forget=0, layout=0, prepared=None):
    if type(prepared) is RnnWeights and direction == "forward" and sequence_lens is None and not layout and \
            (hidden_size is None or hidden_size == R.shape[-1]) and \
            _rnn.fuses_lstm(activations, clip, direction, input_forget, P):
        got = _lstm_row(prepared, X, W, R, B, initial_h, initial_c)
        if got is not None:
            return got
    kw = dict(activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations, clip=clip,
              direction=direction, hidden_size=hidden_size, input_forget=input_forget, layout=layout)
    if not on_host(X, W, R, B, sequence_lens, initial_h, initial_c, P):
        return _rnn.lstm(xp, X, W, R, B, sequence_lens, initial_h, initial_c, P, **kw)
    return _rnn.lstm(xp, X, W, R, B, sequence_lens, initial_h, initial_c, P, **kw,
                     derive=_derive(prepared, W, R, B), loop=_lstm_loop, matmul=_projection_matmul)


# -- com.microsoft DynamicQuantizeLSTM -----------------------------------------------------------

class DequantizedLstmWeights:
    """DynamicQuantizeLSTM's constant 8-bit W and R with their scales and zero points, dequantized once
    into the float layout of ai.onnx LSTM (contiguous), and the :class:`RnnWeights` of that LSTM; and R
    and W kept in 8 bits for the C recurrence and input projection (:func:`_q8_recurrence`):
    ``q8 = (rq, rs, rz)``, ``projection`` (:class:`Q8Projection`)."""

    def __init__(self, params, W, R, B):
        self.params = params  # (W, R, W_scale, W_zero_point, R_scale, R_zero_point) as the node has them
        self.rnn = RnnWeights(W, R, B)
        self.q8 = _q8_recurrence(*params[1:2], *params[4:6])
        self.projection = Q8Projection(_q8_recurrence(params[0], *params[2:4]))

    def fits(self, params, B) -> bool:
        return all(a is b for a, b in zip(params, self.params)) and B is self.rnn.B


Q8_BLOCK = 64
"""Columns of ``cpu_kernels/rnn.c``'s 8-bit R blocks (its QB)."""


def _q8_recurrence(R, scale, zero_point):
    """DynamicQuantizeLSTM's R (D, H, 4H) (or W, (D, I, 4H)) of 8 bits, [D] or [D, 4H] scales and zero points, in the layout of
    ``cpu_kernels/rnn.c``'s lstm_q8_f32: (rq (D, blocks, H or I, 64) int8, the columns in the fused loop's gate
    order packed by blocks of :data:`Q8_BLOCK`; rs and rz (D, 4H) float32: each column's scale, the sigmoid
    gates' halved, and zero point); uint8 weights are shifted to int8 with their zero points. None where it
    does not apply."""
    if R.ndim != 3 or R.dtype not in (np.int8, np.uint8) or R.shape[2] % 4:
        return None
    D, K, H = R.shape[0], R.shape[1], R.shape[2] // 4
    order, gate_scale = list(_rnn._LSTM_ORDER), np.array(_rnn._LSTM_SCALE, np.float32)

    def per_column(v, default):
        v = np.full((D, 4 * H), default, np.float32) if v is None else np.asarray(v, np.float32)
        if v.size == D:
            v = np.repeat(v.reshape(D, 1), 4 * H, axis=1)
        return v.reshape(D, 4, H)[:, order] if v.size == D * 4 * H else None

    rs, rz = per_column(scale, 1.0), per_column(zero_point, 0.0)
    if rs is None or rz is None:
        return None
    q = R.reshape(D, K, 4, H)[:, :, order]
    if R.dtype == np.uint8:
        q, rz = (q.astype(np.int16) - 128).astype(np.int8), rz - 128
    rs = rs * gate_scale[None, :, None]
    blocks = -(-4 * H // Q8_BLOCK)
    packed = np.zeros((D, K, blocks * Q8_BLOCK), np.int8)
    packed[:, :, :4 * H] = q.reshape(D, K, 4 * H)
    packed = packed.reshape(D, K, blocks, Q8_BLOCK).transpose(0, 2, 1, 3)  # (D, blocks, K, 64)
    return tuple(frozen(np.ascontiguousarray(a).reshape(shape)) for a, shape in
                 ((packed, packed.shape), (rs, (D, 4 * H)), (rz, (D, 4 * H))))


class Q8Projection:
    """The fused LSTM's input projection (``matmul`` of ``ops.rnn._fused_projection``: xa (1, D, rows, I + 1),
    wt (G, D, I + 1, H), its last input row the bias) with W in 8 bits, ``w8`` (:func:`_q8_recurrence`): a
    quarter of the float weight's bytes to read (ddddocr's 2 x 512 x 2048 weight: 8 MB in float32), each
    column's scale and zero point applied after its sum (``cpu_kernels/rnn.c``'s lstm_q8_projection_f32),
    then the bias, taken from wt once. Else :func:`_projection_matmul`."""

    def __init__(self, w8):
        self.w8, self.wt, self.bias = w8, None, None

    def __call__(self, xa, wt, out=None):
        G, D, K1, H = wt.shape
        rows, w8 = xa.shape[2], self.w8
        fn = native.function("lstm_q8_projection_f32")
        if fn is None or xa.dtype != np.float32 or wt.dtype != np.float32 or not xa.flags.c_contiguous or \
                w8 is None or w8[0].shape != (D, -(-G * H // Q8_BLOCK), K1 - 1, Q8_BLOCK) or \
                (out is not None and (out.dtype != np.float32 or out.shape != (G, D, rows, H) or
                                      any(st < 0 or st % 4 for st in out.strides) or out.strides[3] != 4)):
            return _projection_matmul(xa, wt, out=out)
        if self.wt is not wt:  # (a strided read of the whole weight: 0.1-0.3 ms, once)
            self.bias = np.ascontiguousarray(wt[:, :, K1 - 1].transpose(1, 0, 2)).reshape(D, G * H)
            self.wt = wt
        if out is None:
            out = np.empty((G, D, rows, H), np.float32)
        for d in range(D):
            native.call(fn, native.ptr(xa[0, d]), *(native.ptr(a[d], a.dtype) for a in w8), native.ptr(self.bias[d]),
                        out[0, d].ctypes.data, rows, K1 - 1, K1, G * H, H, out.strides[2] // 4, out.strides[0] // 4)
        return out


def _lstm_q8_loop(q8, XW, RT, h0, c0):
    """The fused LSTM's steps in C with the 8-bit R ``q8`` (:func:`_q8_recurrence`) in place of RT."""
    T, _, D, batch, H = XW.shape
    fn = native.function("lstm_q8_f32")
    if fn is None or XW.dtype != np.float32 or q8[0].shape != (D, -(-4 * H // Q8_BLOCK), H, Q8_BLOCK):
        return _lstm_loop(XW, RT, h0, c0)
    h0, c0 = (np.ascontiguousarray(a, np.float32) for a in (h0, c0))
    Y, hn, cn = np.empty((T, D, batch, H), dtype=np.float32), np.empty_like(h0), np.empty_like(c0)
    native.call(fn, *(native.ptr(a, a.dtype) for a in (XW, *q8, h0, c0, Y, hn, cn)), T, D, batch, H)
    return Y, [hn, cn]


def _prepare_dynamic_quantize_lstm(constants, attrs):
    params = tuple(constants.get(i) for i in (1, 2, 8, 9, 10, 11))
    W, R, ws, wz, rs, rz = params
    if any(type(a) is not np.ndarray for a in (W, R, ws, rs)) or W.ndim != 3 or R.ndim != 3:
        return None
    B = constants.get(3)
    B = B if type(B) is np.ndarray else None
    try:
        Wf, Rf = (frozen(np.ascontiguousarray(_ms_quantized.dequantize_lstm_weights(np, *a)))
                  for a in ((W, ws, wz), (R, rs, rz)))
    except Exception:  # left to fail at run time, where the error names the node
        return None
    kept = DequantizedLstmWeights(params, Wf, Rf, B)
    try:
        _run_lstm(kept.rnn, Wf, Rf, B, attrs)
    except Exception:
        pass
    return kept


@op("DynamicQuantizeLSTM", domain="com.microsoft", since=1, device="cpu", prepare=_prepare_dynamic_quantize_lstm)
def DynamicQuantizeLSTM(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None,
                        W_scale=None, W_zero_point=None, R_scale=None, R_zero_point=None, *, activation_alpha=None,
                        activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None,
                        input_forget=0, prepared=None):
    """The ai.onnx LSTM (this module's, native where it pays) on the weights dequantized once per session;
    its fused loop's input projection and recurrence in C with W and R kept in 8 bits."""
    kw = dict(activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations, clip=clip,
              direction=direction, hidden_size=hidden_size, input_forget=input_forget)
    if prepared is not None and prepared.fits((W, R, W_scale, W_zero_point, R_scale, R_zero_point), B):
        _ms_quantized.check_8bit(W, R)
        if prepared.q8 is not None and on_host(X, B, sequence_lens, initial_h, initial_c, P):
            Wf, Rf = prepared.rnn.W, prepared.rnn.R
            return _rnn.lstm(xp, X, Wf, Rf, B, sequence_lens, initial_h, initial_c, P, **kw,
                             derive=_derive(prepared.rnn, Wf, Rf, B), matmul=prepared.projection,
                             loop=lambda XW, RT, h0, c0: _lstm_q8_loop(prepared.q8, XW, RT, h0, c0))
        return LSTM(xp, X, prepared.rnn.W, prepared.rnn.R, B, sequence_lens, initial_h, initial_c, P, **kw,
                    prepared=prepared.rnn)
    return _ms_quantized.DynamicQuantizeLSTM(xp, X, W, R, B, sequence_lens, initial_h, initial_c, P, W_scale,
                                             W_zero_point, R_scale, R_zero_point, **kw)
