"""Recurrent ops: RNN, GRU, LSTM (forward / reverse / bidirectional, layout 0 and 1).

The input projection ``X @ W^T + Wb`` is one matmul over every time step and direction. The
recurrence is a Python loop over time steps only; both directions of a bidirectional op advance
together (a reverse direction walks time backwards), batched over the leading direction axis.
With ``sequence_lens``, a batch entry's state freezes once past its length and its ``Y`` is 0 there;
a reverse direction starts at its own last valid step (as onnxruntime does). An LSTM or GRU with the
default activations and no clip (LSTM: no peepholes or input_forget) nor ``sequence_lens`` runs a
fused loop instead (:func:`_fused_lstm`, :func:`_fused_gru`): same formulas, fewer and in-place array
ops per step. The weights' rearranged copies come through a ``derive(key, make)`` hook: made on
every call here; the CPU override (:mod:`gpuops.ops.cpu.rnn`) keeps them per session and runs the
fused loops in C (``cpu_kernels/rnn.c``) where that pays.

One module, past 500 lines: the three ops share the projection, the time loop, ``sequence_lens``
and the fused loops.
"""

from __future__ import annotations

from ..errors import NodeError
from ..registry import op
from .elementwise import clamp


def fresh(key, make):
    """The generic ``derive`` hook: every call derives the weights' layouts anew."""
    return make()

# Activation name -> (default alpha, default beta); None: the function takes no such parameter.
_ACT_PARAMS = {
    "relu": (None, None), "tanh": (None, None), "sigmoid": (None, None), "softsign": (None, None),
    "softplus": (None, None), "affine": (1.0, 0.0), "leakyrelu": (0.01, None),
    "thresholdedrelu": (1.0, None), "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5),
    "elu": (1.0, None),
}


def _sigmoid(xp, x):
    return xp.tanh(x * 0.5) * 0.5 + 0.5  # never overflows; three ops instead of a branch on the sign


def _activation(xp, name: str, a, b):
    n = name.lower()
    if n == "relu":
        return lambda x: xp.maximum(x, 0)
    if n == "tanh":
        return xp.tanh
    if n == "sigmoid":
        return lambda x: _sigmoid(xp, x)
    if n == "softsign":
        return lambda x: x / (1 + xp.abs(x))
    if n == "softplus":
        return lambda x: xp.log1p(xp.exp(-xp.abs(x))) + xp.maximum(x, 0)
    if n == "affine":
        return lambda x: x * a + b
    if n == "leakyrelu":
        return lambda x: xp.where(x >= 0, x, x * a)
    if n == "thresholdedrelu":
        return lambda x: xp.where(x > a, x, xp.zeros_like(x))
    if n == "scaledtanh":
        return lambda x: xp.tanh(x * b) * a
    if n == "hardsigmoid":
        return lambda x: clamp(xp, x * a + b, 0, 1)
    if n == "elu":
        return lambda x: xp.where(x >= 0, x, xp.expm1(x) * a)
    raise NodeError(f"unsupported RNN activation {name!r}")


class Activations:
    """The per-direction activation functions; applied once to all directions when they agree."""

    def __init__(self, xp, names, alphas, betas, defaults, n_dirs):
        names = list(names) if names else list(defaults)
        if len(names) == len(defaults) and n_dirs == 2:
            names = names * 2
        if len(names) != len(defaults) * n_dirs:
            raise NodeError(f"expected {len(defaults) * n_dirs} activations, got {len(names)}")
        alphas, betas = list(alphas or []), list(betas or [])
        specs = []
        for name in names:  # alphas/betas are consumed only by the functions that take them
            if name.lower() not in _ACT_PARAMS:
                raise NodeError(f"unsupported RNN activation {name!r}")
            da, db = _ACT_PARAMS[name.lower()]
            a = float(alphas.pop(0)) if da is not None and alphas else da
            b = float(betas.pop(0)) if db is not None and betas else db
            specs.append((name.lower(), a, b))
        k = len(defaults)
        self.xp = xp
        self.specs = [specs[d * k:(d + 1) * k] for d in range(n_dirs)]
        self.fns = [[_activation(xp, *s) for s in ds] for ds in self.specs]
        self.shared = all(ds == self.specs[0] for ds in self.specs)

    def __call__(self, i: int, x):
        """Activation ``i`` (f, g, h...) applied to ``x`` of shape (directions, ...)."""
        if self.shared:
            return self.fns[0][i](x)
        return self.xp.stack([fns[i](x[d]) for d, fns in enumerate(self.fns)])


def _recurrence(xp, X, W, R, B, sequence_lens, states, *, n_gates, hidden_size, direction, activations,
                acts, clip, layout, cell, fold_rb=False, fused=None, derive=fresh):
    """Shared driver: returns ``(Y, *final_states)`` in the node's layout. ``fold_rb``: the cell only
    adds the recurrence bias to ``h @ R^T``, so it joins the input projection once for all steps.
    ``fused(xp, X, W, R, B, states, dirs)``, when given, replaces the step loop for inputs without
    ``sequence_lens``: it returns the outputs in step order ``(T, D, batch, H)`` and the final states.
    ``derive(key, make)``: the weights' layouts (:func:`fresh`, or kept per session)."""
    dirs = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}.get(direction)
    if dirs is None:
        raise NodeError(f"direction must be forward, reverse or bidirectional, got {direction!r}")
    D = len(dirs)
    if W.shape[0] != D or R.shape[0] != D:
        raise NodeError(f"direction={direction!r} needs {D} direction(s) in W and R, got {W.shape[0]}")
    if layout:
        X = xp.swapaxes(X, 0, 1)
        states = [None if s is None else xp.swapaxes(s, 0, 1) for s in states]
    T, batch, in_size = X.shape
    H = R.shape[-1]
    if hidden_size is not None and hidden_size != H:
        raise NodeError(f"hidden_size={hidden_size} but R has hidden size {H}")
    if W.shape[1] != n_gates * H or R.shape[1] != n_gates * H:
        raise NodeError(f"W and R need {n_gates * H} rows ({n_gates} gates x hidden size {H})")
    GH = n_gates * H
    states = [xp.zeros((D, batch, H), dtype=X.dtype) if s is None else s for s in states]
    if fused is not None and sequence_lens is None:
        Y, states = fused(xp, X, W, R, B, states, dirs)
        return _finish(xp, Y, states, dirs, layout)

    # input projection of every step and direction in one matmul: (D, T, batch, G*H)
    XW = xp.matmul(xp.reshape(X, (1, T * batch, in_size)), xp.swapaxes(W, 1, 2))
    XW = xp.reshape(XW, (D, T, batch, GH))
    Rb = None
    if B is not None and fold_rb:
        XW = XW + (B[:, :GH] + B[:, GH:])[:, None, None, :]
    elif B is not None:
        XW = XW + B[:, None, None, :GH]
        Rb = B[:, None, GH:]
    if any(dirs):  # step order: a reverse direction sees time backwards
        XW = xp.stack([xp.flip(XW[d], axis=0) if rev else XW[d] for d, rev in enumerate(dirs)])
    valid = None
    if sequence_lens is not None:
        t = xp.arange(T, dtype=xp.int64)  # built on the device: no host->device copy in a CUDA graph capture
        t_of_step = xp.stack([T - 1 - t if rev else t for rev in dirs])
        lens = xp.astype(sequence_lens, xp.int64)
        valid = (t_of_step[:, :, None] < lens[None, None, :])[..., None]  # (D, T, batch, 1)
        zeros = xp.zeros((D, batch, H), dtype=X.dtype)

    act = Activations(xp, activations, *acts, D)
    pre = (lambda v: clamp(xp, v, -clip, clip)) if clip is not None else (lambda v: v)
    RT = derive("rnn R^T", lambda: _contiguous_transpose(xp, R))  # (D, H, G*H), row-major for the GEMMs
    ys = []
    for k in range(T):
        new = cell(XW[:, k], states, RT, Rb, act, pre)
        if valid is None:
            ys.append(new[0])
        else:
            m = valid[:, k]
            new = [xp.where(m, n, s) for n, s in zip(new, states)]
            ys.append(xp.where(m, new[0], zeros))
        states = new
    Y = xp.stack(ys) if ys else xp.zeros((0, D, batch, H), dtype=X.dtype)  # (T, D, batch, H)
    return _finish(xp, Y, states, dirs, layout)


def _finish(xp, Y, states, dirs, layout):
    """``(Y, *states)`` in the node's layout from ``Y`` in step order (a reverse direction's steps
    walk time backwards)."""
    if any(dirs):
        steps, Y = Y, xp.empty(Y.shape, dtype=Y.dtype)
        for d, rev in enumerate(dirs):
            Y[:, d] = steps[::-1, d] if rev else steps[:, d]
    if layout:
        return (xp.permute_dims(Y, (2, 0, 1, 3)), *(xp.swapaxes(s, 0, 1) for s in states))
    return (Y, *states)


def _contiguous_transpose(xp, R):
    """R (D, G*H, H) -> R^T (D, H, G*H) in row-major order: the per-step GEMM reads it about twice as
    fast as the transposed view."""
    RT = xp.permute_dims(R, (0, 2, 1))
    return xp.reshape(xp.reshape(RT, (-1,)), RT.shape)  # flattening copies in row-major order


def _rnn_cell(xp):
    def cell(xw, states, RT, Rb, act, pre):
        (h,) = states
        g = xw + xp.matmul(h, RT)
        if Rb is not None:
            g = g + Rb
        return [act(0, pre(g))]

    return cell


def _gru_cell(xp, linear_before_reset):
    def cell(xw, states, RT, Rb, act, pre):
        (h,) = states
        H = h.shape[-1]
        if linear_before_reset:
            hr = xp.matmul(h, RT)
            if Rb is not None:
                hr = hr + Rb
        else:
            hr = xp.matmul(h, RT[..., :2 * H])
            if Rb is not None:
                hr = hr + Rb[..., :2 * H]
        z = act(0, pre(xw[..., :H] + hr[..., :H]))
        r = act(0, pre(xw[..., H:2 * H] + hr[..., H:2 * H]))
        if linear_before_reset:
            c = xw[..., 2 * H:] + r * hr[..., 2 * H:]
        else:
            c = xw[..., 2 * H:] + xp.matmul(r * h, RT[..., 2 * H:])
            if Rb is not None:
                c = c + Rb[..., 2 * H:]
        c = act(1, pre(c))
        return [(1 - z) * c + z * h]

    return cell


def lstm_cell(xp, P, input_forget):
    def cell(xw, states, RT, Rb, act, pre):
        h, c = states
        H = h.shape[-1]
        g = xw + xp.matmul(h, RT)
        if Rb is not None:
            g = g + Rb
        if P is None and not input_forget:  # gates i, o, f are contiguous and share activation f
            iof = act(0, pre(g[..., :3 * H]))
            c = iof[..., 2 * H:] * c + iof[..., :H] * act(1, pre(g[..., 3 * H:]))
            return [iof[..., H:2 * H] * act(2, c), c]
        gi, go, gf, gc = (g[..., j * H:(j + 1) * H] for j in range(4))  # gate order i, o, f, c
        if P is not None:
            gi = gi + P[:, None, :H] * c
            gf = gf + P[:, None, 2 * H:] * c
        i = act(0, pre(gi))
        f = 1 - i if input_forget else act(0, pre(gf))
        c = f * c + i * act(1, pre(gc))
        if P is not None:
            go = go + P[:, None, H:2 * H] * c
        o = act(0, pre(go))
        return [o * act(2, c), c]

    return cell


# The fused loops keep their gates gate-major. LSTM order of the ONNX gates (i, o, f, c): c's
# candidate first, then the sigmoid gates o, f, i; its work buffer is [cell state, c~, o, f, i], so
# that [f, i] * [cell state, c~] is one product. GRU: the ONNX order (z, r, h). Sigmoid gates' weight
# rows are halved (exact): sigmoid(x) = tanh(x / 2) / 2 + 1/2.
_LSTM_ORDER, _LSTM_SCALE = (3, 1, 2, 0), (1.0, 0.5, 0.5, 0.5)
_GRU_ORDER, _GRU_SCALE = (0, 1, 2), (0.5, 0.5, 1.0)


def _fused_weight(xp, M, order, scale, gate_major: bool):
    """A per-direction weight (D, G*H, n) transposed for ``x @ M^T``, its G gates in ``order``, each
    scaled by ``scale``: (G, D, n, H) if ``gate_major``, else (D, n, G*H)."""
    G = len(order)
    D, H, n = M.shape[0], M.shape[1] // G, M.shape[2]
    M = xp.reshape(M, (D, G, H, n))
    M = xp.stack([M[:, j] * s for j, s in zip(order, scale)])  # (G, D, H, n)
    M = xp.permute_dims(M, (0, 1, 3, 2) if gate_major else (1, 3, 0, 2))
    M = xp.reshape(M, (-1,))  # flattening copies in row-major order
    return xp.reshape(M, (G, D, n, H) if gate_major else (D, n, G * H))


def _fused_projection(xp, X, W, B, bias, dirs, order, scale, tag, derive=fresh, matmul=None):
    """``X @ W^T + bias(B)`` of every step in step order (a reverse direction reads X backwards),
    laid out (T, G, D, batch, H) so that each step's slice is one contiguous block. ``bias(B)`` (B may
    be None) is the (D, G*H) bias: it joins the weight (``derive``'d under ``tag``) as a last input
    column of ones. ``matmul`` (default ``xp.matmul``) multiplies (1, D, T*batch, n+1) by that weight
    (G, D, n+1, H), into ``out`` when given."""
    matmul = matmul or xp.matmul
    T, batch, n_in = X.shape
    D, G = len(dirs), len(order)
    H = W.shape[1] // G

    def weight():
        b = xp.reshape(bias(B), (D, G * H, 1))
        return _fused_weight(xp, xp.concat([W, b], axis=2), order, scale, True)

    WT = derive(tag, weight)  # (G, D, n_in + 1, H)
    Xa = xp.empty((1, D, T, batch, n_in + 1), dtype=X.dtype)
    for d, rev in enumerate(dirs):
        Xa[0, d, ..., :n_in] = X[::-1] if rev else X
    Xa[..., n_in] = 1
    Xa = xp.reshape(Xa, (1, D, T * batch, n_in + 1))
    XW = xp.empty((T, G, D, batch, H), dtype=X.dtype)
    if batch == 1:  # the GEMM writes there directly
        matmul(Xa, WT, out=xp.permute_dims(XW[:, :, :, 0], (1, 2, 0, 3)))
    else:
        XW[...] = xp.permute_dims(xp.reshape(matmul(Xa, WT), (G, D, T, batch, H)), (2, 0, 1, 3, 4))
    return XW




def _fused_lstm(xp, X, W, R, B, states, dirs, derive=fresh, loop=None, matmul=None):
    """The LSTM of the default activations (sigmoid, tanh, tanh) without clip, peepholes or
    input_forget. Per step: one GEMM per direction, then eight elementwise ops writing into
    preallocated buffers; the first moves the gates into the gate-major work buffer, where every
    later operand is one contiguous block. ``loop(XW, RT, h0, c0)``, when given, may run the steps
    instead (returning ``(Y, [h, c])``, or None where it does not apply); ``matmul`` is the input
    projection's product (:func:`_fused_projection`)."""
    T, batch, _ = X.shape
    D, H = len(dirs), R.shape[-1]
    dt = X.dtype
    RT = derive("lstm fused R", lambda: _fused_weight(xp, R, _LSTM_ORDER, _LSTM_SCALE, False))  # (D, H, 4H)
    XW = _fused_projection(xp, X, W, B, lambda B: xp.zeros((D, 4 * H), dtype=dt) if B is None else
                           B[:, :4 * H] + B[:, 4 * H:], dirs, _LSTM_ORDER, _LSTM_SCALE, "lstm fused W", derive, matmul)

    h0, c0 = states
    if loop is not None:
        done = loop(XW, RT, h0, c0)
        if done is not None:
            return done
    work = xp.empty((5, D, batch, H), dtype=dt)  # [c, c~, o, f, i]
    work[0] = c0
    gates, sig, fi, cg, c, o = work[1:], work[2:], work[3:], work[:2], work[0], work[2]
    hR = xp.empty((D, batch, 4 * H), dtype=dt)
    hR_gates = xp.permute_dims(xp.reshape(hR, (D, batch, 4, H)), (2, 0, 1, 3))
    prod = xp.empty((2, D, batch, H), dtype=dt)
    p0, p1 = prod[0], prod[1]
    tc = xp.empty((D, batch, H), dtype=dt)
    Y = xp.empty((T, D, batch, H), dtype=dt)
    matmul, add, mul, tanh = xp.matmul, xp.add, xp.multiply, xp.tanh
    h = h0
    for xw, y in [(XW[k], Y[k]) for k in range(T)]:
        matmul(h, RT, out=hR)
        add(hR_gates, xw, out=gates)
        tanh(gates, out=gates)
        mul(sig, 0.5, out=sig)
        add(sig, 0.5, out=sig)
        mul(fi, cg, out=prod)  # [f * c, i * c~]
        add(p0, p1, out=c)
        tanh(c, out=tc)
        mul(o, tc, out=y)
        h = y
    return Y, [xp.asarray(h, copy=True), xp.asarray(c, copy=True)]


def _fused_gru(linear_before_reset, derive=fresh, loop=None):
    def fused(xp, X, W, R, B, states, dirs):
        """The GRU of the default activations (sigmoid, tanh) without clip. Per step: the recurrent
        GEMMs (z and r, and h's: one GEMM with ``linear_before_reset``, after r without), then about
        ten elementwise ops into preallocated buffers; h' = h~ + z * (h - h~). ``loop(XW, RT, B, h0,
        linear_before_reset)``, when given, may run the steps instead (returning ``(Y, [h])``, or None
        where it does not apply)."""
        T, batch, _ = X.shape
        D, H = len(dirs), R.shape[-1]
        dt = X.dtype
        lbr = bool(linear_before_reset)

        def bias(B):  # z, r: Wb + Rb; h: Wbh, and Rbh unless it sits inside r * (...)
            if B is None:
                return xp.zeros((D, 3 * H), dtype=dt)
            Rb = B[:, 3 * H:]
            if lbr:
                Rb = xp.concat([Rb[:, :2 * H], xp.zeros((D, H), dtype=dt)], axis=1)
            return B[:, :3 * H] + Rb

        XW = _fused_projection(xp, X, W, B, bias, dirs, _GRU_ORDER, _GRU_SCALE, ("gru fused W", lbr), derive)
        RT = derive("gru fused R", lambda: _fused_weight(xp, R, _GRU_ORDER, _GRU_SCALE, False))  # D, H, 3H
        if loop is not None:
            done = loop(XW, RT, B, states[0], lbr)
            if done is not None:
                return done
        n = 3 if lbr else 2
        hR = xp.empty((D, batch, n * H), dtype=dt)
        hR_g = xp.permute_dims(xp.reshape(hR, (D, batch, n, H)), (2, 0, 1, 3))
        hR_zr, hR_h = hR_g[:2], hR_g[n - 1]  # hR_h: h's gate, with linear_before_reset
        zr = xp.empty((2, D, batch, H), dtype=dt)
        z, r = zr[0], zr[1]
        hh, diff, rh = (xp.empty((D, batch, H), dtype=dt) for _ in range(3))
        Y = xp.empty((T, D, batch, H), dtype=dt)
        RT_zr, RT_h = RT[..., :n * H], RT[..., 2 * H:]
        Rbh = None if not lbr or B is None else xp.reshape(B[:, 5 * H:], (D, 1, H))
        matmul, add, sub, mul, tanh = xp.matmul, xp.add, xp.subtract, xp.multiply, xp.tanh
        h = states[0]
        for xw_zr, xw_h, y in [(XW[k, :2], XW[k, 2], Y[k]) for k in range(T)]:
            matmul(h, RT_zr, out=hR)
            add(hR_zr, xw_zr, out=zr)
            tanh(zr, out=zr)
            mul(zr, 0.5, out=zr)
            add(zr, 0.5, out=zr)
            if lbr:  # h~ = tanh(xw_h + r * (h @ Rh^T + Rbh))
                if Rbh is not None:
                    add(hR_h, Rbh, out=hh)
                    mul(r, hh, out=hh)
                else:
                    mul(r, hR_h, out=hh)
            else:  # h~ = tanh(xw_h + (r * h) @ Rh^T), Rbh in xw_h
                mul(r, h, out=rh)
                matmul(rh, RT_h, out=hh)
            add(hh, xw_h, out=hh)
            tanh(hh, out=hh)
            sub(h, hh, out=diff)
            mul(z, diff, out=diff)
            add(hh, diff, out=y)
            h = y
        return Y, [xp.asarray(h, copy=True)]

    return fused


def _default_activations(activations, defaults, D) -> bool:
    """``activations`` names the spec defaults, for one direction or for each of ``D``."""
    names = [a.lower() for a in activations or defaults]
    d = [a.lower() for a in defaults]
    return names in (d, d * D)


@op("RNN", since=1)
def RNN_1(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, *, activation_alpha=None,
          activation_beta=None, activations=None, clip=None, direction="forward",
          hidden_size=None, output_sequence=0):
    return RNN(xp, X, W, R, B, sequence_lens, initial_h, activation_alpha=activation_alpha,
               activation_beta=activation_beta, activations=activations, clip=clip, direction=direction,
               hidden_size=hidden_size)


@op("RNN", since=7)
def RNN(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, *, activation_alpha=None,
        activation_beta=None, activations=None, clip=None, direction="forward",
        hidden_size=None, layout=0):
    return rnn(xp, X, W, R, B, sequence_lens, initial_h, activation_alpha=activation_alpha,
               activation_beta=activation_beta, activations=activations, clip=clip, direction=direction,
               hidden_size=hidden_size, layout=layout)


def rnn(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, *, activation_alpha=None,
        activation_beta=None, activations=None, clip=None, direction="forward",
        hidden_size=None, layout=0, derive=fresh):
    """RNN, the weights' layouts by ``derive`` (see :func:`_recurrence`)."""
    # the spec default ['Tanh', 'Tanh'] covers two directions; one direction uses the first
    acts = list(activations or [])
    if direction != "bidirectional" and len(acts) == 2:
        acts = acts[:1]
    return _recurrence(xp, X, W, R, B, sequence_lens, [initial_h], n_gates=1, hidden_size=hidden_size,
                       direction=direction, activations=acts, acts=(activation_alpha, activation_beta, ["Tanh"]),
                       clip=clip, layout=layout, cell=_rnn_cell(xp), fold_rb=True, derive=derive)


@op("GRU", since=1)  # linear_before_reset arrived in GRU-3; harmless to accept here
def GRU_1(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, *, activation_alpha=None,
          activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None,
          linear_before_reset=0, output_sequence=0):
    return GRU(xp, X, W, R, B, sequence_lens, initial_h, activation_alpha=activation_alpha,
               activation_beta=activation_beta, activations=activations, clip=clip, direction=direction,
               hidden_size=hidden_size, linear_before_reset=linear_before_reset)


@op("GRU", since=7)
def GRU(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, *, activation_alpha=None,
        activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None,
        layout=0, linear_before_reset=0):
    return gru(xp, X, W, R, B, sequence_lens, initial_h, activation_alpha=activation_alpha,
               activation_beta=activation_beta, activations=activations, clip=clip, direction=direction,
               hidden_size=hidden_size, layout=layout, linear_before_reset=linear_before_reset)


def fuses_gru(activations, clip, direction) -> bool:
    """Whether a GRU runs the fused loop (:func:`_fused_gru`)."""
    D = 2 if direction == "bidirectional" else 1
    return clip is None and _default_activations(activations, ["Sigmoid", "Tanh"], D)


def gru(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, *, activation_alpha=None,
        activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None,
        layout=0, linear_before_reset=0, derive=fresh, loop=None):
    """GRU, the weights' layouts by ``derive`` and the fused loop's steps by ``loop`` (see
    :func:`_fused_gru`)."""
    fused = _fused_gru(linear_before_reset, derive, loop) if fuses_gru(activations, clip, direction) else None
    return _recurrence(xp, X, W, R, B, sequence_lens, [initial_h], n_gates=3, hidden_size=hidden_size,
                       direction=direction, activations=activations,
                       acts=(activation_alpha, activation_beta, ["Sigmoid", "Tanh"]),
                       clip=clip, layout=layout, cell=_gru_cell(xp, linear_before_reset), fused=fused,
                       derive=derive)


@op("LSTM", since=1)
def LSTM_1(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
           activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
           hidden_size=None, input_forget=0, output_sequence=0):
    return LSTM(xp, X, W, R, B, sequence_lens, initial_h, initial_c, P, activation_alpha=activation_alpha,
                activation_beta=activation_beta, activations=activations, clip=clip, direction=direction,
                hidden_size=hidden_size, input_forget=input_forget)


@op("LSTM", since=7)
def LSTM(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
         activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
         hidden_size=None, input_forget=0, layout=0):
    return lstm(xp, X, W, R, B, sequence_lens, initial_h, initial_c, P, activation_alpha=activation_alpha,
                activation_beta=activation_beta, activations=activations, clip=clip, direction=direction,
                hidden_size=hidden_size, input_forget=input_forget, layout=layout)


def fuses_lstm(activations, clip, direction, input_forget, P=None) -> bool:
    """Whether an LSTM runs the fused loop (:func:`_fused_lstm`)."""
    D = 2 if direction == "bidirectional" else 1
    return (P is None and not input_forget and clip is None
            and _default_activations(activations, ["Sigmoid", "Tanh", "Tanh"], D))


def lstm(xp, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
         activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
         hidden_size=None, input_forget=0, layout=0, derive=fresh, loop=None, matmul=None):
    """LSTM, the weights' layouts by ``derive``, and the fused loop's steps by ``loop`` and its input
    projection's product by ``matmul`` (see :func:`_fused_lstm`)."""
    fused = None
    if fuses_lstm(activations, clip, direction, input_forget, P):
        def fused(xp, X, W, R, B, states, dirs):
            return _fused_lstm(xp, X, W, R, B, states, dirs, derive, loop, matmul)
    return _recurrence(xp, X, W, R, B, sequence_lens, [initial_h, initial_c], n_gates=4,
                       hidden_size=hidden_size, direction=direction, activations=activations,
                       acts=(activation_alpha, activation_beta, ["Sigmoid", "Tanh", "Tanh"]),
                       clip=clip, layout=layout, cell=lstm_cell(xp, P, input_forget), fold_rb=True,
                       fused=fused, derive=derive)
