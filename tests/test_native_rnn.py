"""The native LSTM and GRU recurrences (cpu_kernels/rnn.c) against the NumPy step loops they replace
(their oracle), over random shapes, directions, layouts, biases and initial states (larger ones take
the NumPy loop); their float32 tanh against tanh in float64; and their outputs' bounds."""

import array_api_compat.numpy as xp
import numpy as np
import pytest

from gpuops import native, registry
from gpuops.ops.cpu import rnn

needs_cc = pytest.mark.skipif(native.compiler() is None, reason="no C compiler: native kernels fall back to NumPy")
GATES = {"LSTM": 4, "GRU": 3}


def _kernel(name="lstm_f32"):
    fn = native.function(name)
    assert fn is not None, "cpu_kernels/rnn.c did not compile"
    return fn


def _inputs(rng, T, batch, I, H, D, layout, bias, states, scale=1.0, op="LSTM"):
    """LSTM or GRU inputs; weights scaled by 1/sqrt(fan-in), as trained models' are, so that the gates vary."""
    f = lambda *shape, s=scale: (rng.standard_normal(shape) * s).astype(np.float32)  # noqa: E731
    G = GATES[op]
    X = f(T, batch, I) if layout == 0 else f(batch, T, I)
    args = [X, f(D, G * H, I, s=scale / I ** 0.5), f(D, G * H, H, s=scale / H ** 0.5),
            f(D, 2 * G * H) if bias else None, None]
    shape = (D, batch, H) if layout == 0 else (batch, D, H)
    args += [f(*shape) if states else None for _ in range(G - 2)]  # initial_h (and initial_c)
    return args


def _lstm(*args, **kwargs):
    return _inputs(*args, **kwargs, op="LSTM")


def _both(args, op="LSTM", prepared=None, **attrs):
    """(native outputs, NumPy outputs) of the LSTM or GRU op (the CPU override)."""
    f = getattr(rnn, op)
    with native.disabled():
        ref = f(xp, *args, **attrs, prepared=prepared)
    return f(xp, *args, **attrs, prepared=prepared), ref


def _prepared(op, args, attrs):
    """What a session's step of ``op`` keeps: its prepare hook on constant W, R and B."""
    constants = {i: a for i, a in enumerate(args[:4]) if i and a is not None}
    return registry.resolve("", op, 14, "cpu").prepare(constants, attrs)


@needs_cc
@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("seed", range(3))
def test_matches_numpy(op, seed):
    _kernel()
    rng = np.random.default_rng(seed + 10 * (op == "GRU"))
    for case in range(30):
        D = int(rng.integers(1, 3))
        direction = "bidirectional" if D == 2 else ("forward", "reverse")[case % 2]
        T, batch = int(rng.integers(0 if case == 0 else 1, 12)), int(rng.integers(1, 7))
        I, H = int(rng.integers(1, 20)), int(rng.choice([1, 3, 4, 7, 16, 33, 130]))
        layout = int(rng.integers(0, 2))
        args = _inputs(rng, T, batch, I, H, D, layout, bias=case % 3 > 0, states=case % 4 > 0, op=op)
        attrs = dict(direction=direction, hidden_size=H, layout=layout)
        if op == "GRU":
            attrs["linear_before_reset"] = int(rng.integers(0, 2))
        prepared = _prepared(op, args, attrs) if case % 2 else None  # a session's step: the layouts kept
        got, ref = _both(args, op, prepared, **attrs)
        for g, r, name in zip(got, ref, ("Y", "Y_h", "Y_c")):
            assert g.shape == r.shape and g.dtype == np.float32, (name, g.shape, r.shape)
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=2e-6, err_msg=f"{name}: case {case} {T=} {batch=} "
                                       f"{I=} {H=} {D=} {attrs}")


@needs_cc
@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_runs_are_repeatable_and_large_values_saturate(op):
    _kernel()
    rng = np.random.default_rng(7)
    args = _inputs(rng, 9, 2, 5, 24, 2, 0, bias=True, states=False, scale=10.0, op=op)  # gates far into saturation
    attrs = {"linear_before_reset": 1} if op == "GRU" else {}
    got, ref = _both(args, op, direction="bidirectional", **attrs)
    for g, r in zip(got, ref):  # gate sums of ~100 rounded in another order: 1e-5 absolute apart at most
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
    again = getattr(rnn, op)(xp, *args, direction="bidirectional", **attrs)
    assert all(np.array_equal(a, b) for a, b in zip(got, again))


def _tanh_of(values):
    """The kernel's tanh of float32 ``values``, read through the op: initial_c = values with the
    forget gate 1 and the input and output gates 0 and 1 (sigmoid of +-30 is exactly 0 or 1 in
    float32), so c stays the values and Y = tanh(c), unrounded by any other operation."""
    H, D = 512, 2
    B = np.zeros((D, 8 * H), np.float32)
    B[:, :H], B[:, H:2 * H], B[:, 2 * H:3 * H] = -30, 30, 30  # ONNX gate order i, o, f, c
    W, R = np.zeros((D, 4 * H, 1), np.float32), np.zeros((D, 4 * H, H), np.float32)
    for a in (W, R, B):
        a.setflags(write=False)
    X, h0 = np.zeros((1, 1, 1), np.float32), np.zeros((D, 1, H), np.float32)
    c0 = np.zeros(-(-values.size // (D * H)) * D * H, np.float32)
    c0[:values.size] = values
    out = []
    for c in c0.reshape(-1, D, 1, H):
        Y, _, Yc = rnn.LSTM(xp, X, W, R, B, None, h0, c, direction="bidirectional")
        np.testing.assert_array_equal(Yc, c)
        out.append(Y.reshape(-1))
    return np.concatenate(out)[:values.size]


@needs_cc
def test_tanh_accuracy():
    """Within 3 ulp of tanh in float64 over a dense sweep of float32 (both signs, every magnitude
    up to saturation) and exact at the special values (-0 cannot be told apart through the op)."""
    _kernel()
    rng = np.random.default_rng(3)
    bits = np.arange(0, 0x41300000, 0x41300000 // 30000, dtype=np.uint32)  # 0 .. 11, evenly in the bit patterns
    x = np.concatenate([bits.view(np.float32), rng.uniform(-12, 12, 20000).astype(np.float32)])
    x = np.concatenate([x, -x])
    y = _tanh_of(x)
    want = np.tanh(x.astype(np.float64))
    ulps = np.abs(y - want) / np.spacing(want.astype(np.float32)).astype(np.float64)
    assert ulps.max() <= 3, (ulps.max(), x[ulps.argmax()])
    special = np.array([0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-40, 3e38, -3e38, 20], np.float32)
    np.testing.assert_array_equal(_tanh_of(special), np.tanh(special.astype(np.float64)).astype(np.float32))


def _guarded(shapes, run):
    """``run(outputs)`` into plain arrays and into NaN-guarded views of larger buffers: the guards
    stay NaN and both give the same outputs."""
    plain = run([np.empty(s, np.float32) for s in shapes])
    bufs = [np.full(int(np.prod(s)) + 64, np.nan, np.float32) for s in shapes]
    views = run([b[32:32 + int(np.prod(s))].reshape(s) for b, s in zip(bufs, shapes)])
    for b, v, p in zip(bufs, views, plain):
        assert np.isnan(b[:32]).all() and np.isnan(b[-32:]).all()
        np.testing.assert_array_equal(v, p)


@needs_cc
def test_kernels_write_only_their_outputs():
    lstm, gru = _kernel(), _kernel("gru_f32")
    rng = np.random.default_rng(5)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    for T, D, batch, H in [(3, 2, 2, 5), (1, 1, 1, 1), (4, 2, 3, 17), (0, 2, 1, 4)]:
        shapes = [(T, D, batch, H), (D, batch, H), (D, batch, H)]
        ins = [r(T, 4, D, batch, H), r(D, H, 4 * H) * 0.3, r(D, batch, H), r(D, batch, H)]
        _guarded(shapes, lambda outs: native.call(lstm, *(native.ptr(a) for a in ins + outs), T, D, batch, H) or outs)
        xw, rt, rbh, h0 = r(T, 3, D, batch, H), r(D, H, 3 * H) * 0.3, r(D, H), r(D, batch, H)
        for lbr, b in ((0, None), (1, None), (1, rbh)):
            _guarded(shapes[:2], lambda outs: native.call(
                gru, native.ptr(xw), native.ptr(rt), None if b is None else native.ptr(b), native.ptr(h0),
                *(native.ptr(a) for a in outs), T, D, batch, H, lbr) or outs)


def test_numpy_path_when_native_is_off():
    """Without native kernels (or for float64, or a batch past the native limit) the NumPy loop runs."""
    rng = np.random.default_rng(9)
    args = _lstm(rng, 4, 2, 3, 6, 2, 0, bias=True, states=True)
    generic = rnn.LSTM(xp, *args, direction="bidirectional", clip=1e4)  # clip selects the per-cell loop
    with native.disabled():
        fused = rnn.LSTM(xp, *args, direction="bidirectional")
    for g, f in zip(generic, fused):
        np.testing.assert_allclose(f, g, rtol=1e-5, atol=1e-6)
    args64 = [None if a is None else a.astype(np.float64) for a in args]
    for g, f in zip(rnn.LSTM(xp, *args64, direction="bidirectional"), generic):
        assert g.dtype == np.float64
        np.testing.assert_allclose(g, f, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_a_session_step_keeps_the_weight_layouts(op):
    """The prepare hook makes the fused loop's weight layouts at plan time; runs reuse them (the same
    arrays, read-only) with the native loop and the NumPy one; a call with another weight does not."""
    rng = np.random.default_rng(11)
    args = _inputs(rng, 4, 2, 3, 6, 2, 0, bias=True, states=True, op=op)
    kept = _prepared(op, args, {"direction": "bidirectional"})
    made = dict(kept._made)
    assert len(made) == 2 and not any(v.flags.writeable for v in made.values())
    got, ref = _both(args, op, kept, direction="bidirectional")
    assert kept._made == made and all(kept._made[k] is v for k, v in made.items())
    for g, r, want in zip(got, ref, getattr(rnn, op)(xp, *args, direction="bidirectional")):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(r, want, rtol=1e-5, atol=1e-6)
    other = [args[0], args[1] * 2, *args[2:]]
    np.testing.assert_allclose(getattr(rnn, op)(xp, *other, direction="bidirectional", prepared=kept)[0],
                               getattr(rnn, op)(xp, *other, direction="bidirectional")[0], rtol=1e-6)
    assert kept._made == made


@needs_cc
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("D, rows, K, H", [(2, 40, 513, 512), (1, 1, 4096, 1100), (2, 32, 65, 128), (1, 7, 0, 5),
                                           (2, 300, 20, 8)])
def test_the_projections_product_within_its_bound(threads, D, rows, K, H):
    # (1, D, rows, K) @ (4, D, K, H) into a strided output, as the fused projection calls it: large products
    # one per gate and direction on the pool with the BLAS at one thread, small ones NumPy's; each element
    # a sum of K products
    rng = np.random.default_rng(rows + K + H)
    a, b = rng.standard_normal((1, D, rows, K)).astype(np.float32), rng.standard_normal((4, D, K, H)).astype(np.float32)
    y = np.full((rows, 4, D, H), np.nan, np.float32)
    before = native.threads()
    native.set_threads(threads)
    try:
        got = rnn._projection_matmul(a, b, out=np.permute_dims(y, (1, 2, 0, 3)))
    finally:
        native.set_threads(before)
    assert got.base is y or got.base is y.base or np.shares_memory(got, y)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    u = np.finfo(np.float32).eps / 2
    gamma = K * u / (1 - K * u)
    got = np.permute_dims(y, (1, 2, 0, 3))
    assert np.all(np.abs(got - exact) <= gamma * (np.abs(a).astype(np.float64) @ np.abs(b)) + 1e-30)


@needs_cc
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("D, rows, I, H, dtype", [(2, 20, 512, 512, np.int8), (1, 13, 37, 20, np.uint8),
                                                  (2, 7, 1, 5, np.int8), (1, 1, 64, 16, np.uint8),
                                                  (2, 0, 8, 8, np.int8)])
def test_the_8_bit_projection_within_its_bound(threads, D, rows, I, H, dtype):
    # DynamicQuantizeLSTM's projection with W kept in 8 bits (rnn.c's lstm_q8_projection_f32: tiles of 1 to 6
    # rows, columns by pairs of vectors, the last ones past 4H unwritten) into the fused loop's strided
    # output: s * (x @ q - z * sum(x)) + bias against the float64 product with the dequantized weight, each
    # element two sums of I terms, a product by s and the bias: (2 I + 3) roundings of those magnitudes
    rng = np.random.default_rng(rows + I + H)
    info = np.iinfo(dtype)
    W = rng.integers(info.min, info.max + 1, (D, I, 4 * H)).astype(dtype)
    ws = (rng.random((D, 4 * H)) * 0.01 + 0.001).astype(np.float32)
    wz = rng.integers(info.min, info.max + 1, (D, 4 * H)).astype(dtype)
    w8 = rnn._q8_recurrence(W, ws, wz)
    Wf = (W.astype(np.float64) - wz[:, None, :]) * ws[:, None, :]  # (D, I, 4H), ONNX gate order
    bias = rng.standard_normal((4, D, 1, H)).astype(np.float32)
    wt = np.zeros((4, D, I + 1, H), np.float32)  # the fused weight: its values unread but for the bias row
    wt[:, :, I:] = bias
    xa = np.ones((1, D, rows, I + 1), np.float32)
    xa[..., :I] = rng.standard_normal((1, D, rows, I))
    y = np.full((rows, 4, D, H), np.nan, np.float32)
    before = native.threads()
    native.set_threads(threads)
    try:
        got = rnn.Q8Projection(w8)(xa, wt, out=np.permute_dims(y, (1, 2, 0, 3)))
    finally:
        native.set_threads(before)
    assert rows == 0 or np.shares_memory(got, y)
    order, scale = list(rnn._rnn._LSTM_ORDER), np.array(rnn._rnn._LSTM_SCALE)
    fused = (Wf.reshape(D, I, 4, H)[:, :, order] * scale[None, None, :, None])  # (D, I, 4, H)
    x = xa[0, :, :, :I].astype(np.float64)
    exact = np.einsum("dri,digh->gdrh", x, fused) + bias
    u = np.finfo(np.float32).eps / 2
    n = 2 * I + 3
    q = np.abs(W.astype(np.float64)) + np.abs(wz.astype(np.float64))[:, None, :]
    mag = np.einsum("dri,digh->gdrh", np.abs(x), (q * ws[:, None, :]).reshape(D, I, 4, H)[:, :, order]
                    * scale[None, None, :, None]) + np.abs(bias)
    got = np.permute_dims(y, (1, 2, 0, 3))
    assert np.all(np.abs(got - exact) <= n * u / (1 - n * u) * mag + 1e-30)


@needs_cc
def test_which_lstm_steps_leave_numpys_blas_alone():
    from gpuops.onnx.plan import Step

    def step(attrs, inputs=("x", "W", "R", "B")):
        impl = registry.resolve("", "LSTM", 14, "cpu")
        return Step("lstm", "LSTM", "", impl, list(inputs), ["y"], attrs)

    f32 = np.dtype(np.float32)
    shapes = {"x": ((40, 1, 512), f32), "W": ((2, 2048, 512), f32), "R": ((2, 2048, 512), f32)}
    free = lambda s, shapes=shapes: rnn._lstm_blas_free(s, shapes.get)  # noqa: E731
    assert free(step({"direction": "bidirectional", "hidden_size": 512}))
    assert not free(step({"direction": "bidirectional"}, ("x", "W", "R", "B", "lens")))  # NumPy's masked loop
    assert not free(step({"clip": 3.0}))
    assert not free(step({}), {**shapes, "x": ((40, 8, 512), f32)})  # 8 rows of 512 units: NumPy's loop
    assert not free(step({}), {**shapes, "x": ((40, 1, 512), np.dtype(np.float64))})
    assert not free(step({}), {k: v for k, v in shapes.items() if k != "x"})  # shape unknown
    small = {"x": ((32, 1, 64), f32), "W": ((2, 512, 64), f32), "R": ((2, 512, 128), f32)}  # 266k a product
    assert not free(step({"direction": "bidirectional"}), small)  # NumPy's projection: too small to pay


def test_the_split_threshold_is_the_kernels():
    import re

    header = (native.source_dir("cpu_kernels") / "pool_threads.h").read_text()
    (work,) = re.findall(r"#define POOL_MIN_WORK (\d+)", header)
    assert rnn.SPLIT_WORK == 2 * int(work)
    assert "M * N * K >= 2 * POOL_MIN_WORK" in (native.source_dir("cpu_kernels") / "blas.h").read_text()
