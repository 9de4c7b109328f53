"""com.microsoft AttnLSTM: an LSTM wrapped in a Bahdanau attention mechanism (onnxruntime's kernel).

Per direction and step t: the LSTM cell of ai.onnx LSTM (gate order i, o, f, c; peepholes; clip;
the activations of ``rnn``) runs on ``concat(X_t, ATTN_{t-1})`` - so W is ``[4H, input + attention]``
- and its output H_t queries the memory: ``ALIGN = softmax_valid(sum(V * tanh(M @ MW + H_t @ QW)))``
over the first ``memory_seq_lens`` memory steps, ``CONTEXT = ALIGN @ M``, and ``ATTN_t = concat(H_t,
CONTEXT) @ AW`` (or ``CONTEXT`` without AW). ATTN_0 is zero. With ``sequence_lens`` a finished batch
entry keeps its state and outputs zeros; the reverse direction reads each entry's own valid steps
backwards. The cell and its activations are the ones of ``gpuops.ops.rnn``.
"""

from __future__ import annotations

import numpy as np

from ...errors import NodeError
from ...registry import op
from ..elementwise import clamp
from ..rnn import Activations, lstm_cell

MS = "com.microsoft"


def _reverse_index(xp, T, lens):
    """(T, B) time index reading each entry's first ``lens`` steps backwards (the rest unchanged)."""
    t = xp.reshape(xp.arange(T, dtype=np.int64), (T, 1))
    return xp.where(t < lens[None, :], lens[None, :] - 1 - t, t)


@op("AttnLSTM", domain=MS, since=1)
def AttnLSTM(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, QW=None, MW=None,
             V=None, M=None, memory_seq_lens=None, AW=None, *, activation_alpha=None, activation_beta=None,
             activations=None, clip=None, direction="forward", hidden_size=None, input_forget=0):
    dirs = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}.get(direction)
    if dirs is None:
        raise NodeError(f"direction must be forward, reverse or bidirectional, got {direction!r}")
    if QW is None or MW is None or V is None or M is None:
        raise NodeError("AttnLSTM needs the attention inputs QW, MW, V and M")
    D = len(dirs)
    T, Bn, I = X.shape
    H = R.shape[-1]
    if hidden_size is not None and hidden_size != H:
        raise NodeError(f"hidden_size={hidden_size} but R has hidden size {H}")
    depth = M.shape[2]
    attn_size = AW.shape[2] if AW is not None else depth
    if W.shape != (D, 4 * H, I + attn_size):
        raise NodeError(f"W must be {(D, 4 * H, I + attn_size)} (input + attention columns), got {tuple(W.shape)}")
    lens = (xp.full((Bn,), T, dtype=np.int64) if sequence_lens is None else sequence_lens.astype(np.int64))
    mem_steps = M.shape[1]
    mem_lens = (xp.full((Bn,), mem_steps, dtype=np.int64) if memory_seq_lens is None
                else memory_seq_lens.astype(np.int64))
    mem_valid = xp.reshape(xp.arange(mem_steps, dtype=np.int64), (1, -1)) < mem_lens[:, None]  # (B, Tm)

    # inputs in each direction's step order, projected at once: (D, T, B, 4H)
    order = [_reverse_index(xp, T, lens) if rev else None for rev in dirs]
    Xd = xp.stack([X if o is None else xp.take_along_axis(X, xp.broadcast_to(o[:, :, None], X.shape), axis=0)
                   for o in order])
    XW = xp.matmul(xp.reshape(Xd, (D, T * Bn, I)), xp.swapaxes(W[:, :, :I], 1, 2))
    XW = xp.reshape(XW, (D, T, Bn, 4 * H))
    if B is not None:
        XW = XW + (B[:, :4 * H] + B[:, 4 * H:])[:, None, None, :]
    WA = xp.swapaxes(W[:, :, I:], 1, 2)  # (D, attn, 4H)
    RT = xp.swapaxes(R, 1, 2)  # (D, H, 4H)
    keys = xp.matmul(M[None], MW[:, None])  # (D, B, Tm, A)
    act = Activations(xp, activations, activation_alpha, activation_beta, ["Sigmoid", "Tanh", "Tanh"], D)
    pre = (lambda v: clamp(xp, v, -clip, clip)) if clip is not None else (lambda v: v)
    cell = lstm_cell(xp, P, input_forget)

    h = xp.zeros((D, Bn, H), dtype=X.dtype) if initial_h is None else initial_h
    c = xp.zeros((D, Bn, H), dtype=X.dtype) if initial_c is None else initial_c
    attn = xp.zeros((D, Bn, attn_size), dtype=X.dtype)
    zeros = xp.zeros((D, Bn, H), dtype=X.dtype)
    ys = []
    for t in range(T):
        new_h, new_c = cell(XW[:, t] + xp.matmul(attn, WA), [h, c], RT, None, act, pre)
        valid = (t < lens)[None, :, None]
        h, c = xp.where(valid, new_h, h), xp.where(valid, new_c, c)
        y = xp.where(valid, new_h, zeros)
        ys.append(y)
        # Bahdanau attention on this step's output
        query = xp.matmul(y, QW)  # (D, B, A)
        score = xp.sum(V[:, None, None, :] * xp.tanh(keys + query[:, :, None, :]), axis=-1)  # (D, B, Tm)
        score = xp.where(mem_valid[None], score, -np.inf)
        e = xp.exp(score - xp.max(score, axis=-1, keepdims=True))
        align = e / xp.sum(e, axis=-1, keepdims=True)
        context = xp.matmul(align[:, :, None, :], M[None])[:, :, 0, :]  # (D, B, depth)
        attn = xp.matmul(xp.concat([y, context], axis=-1), AW) if AW is not None else context
    Y = xp.stack(ys) if ys else xp.zeros((0, D, Bn, H), dtype=X.dtype)  # (T, D, B, H)
    if any(dirs):  # back to input time order
        Y = xp.stack([Y[:, d] if o is None else
                      xp.take_along_axis(Y[:, d], xp.broadcast_to(o[:, :, None], Y[:, d].shape), axis=0)
                      for d, o in enumerate(order)], axis=1)
    return Y, h, c
