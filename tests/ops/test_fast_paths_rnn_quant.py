"""The fused LSTM and GRU step loops (default activations, no clip / peepholes / input_forget /
sequence_lens) and the float-exact integer GEMM + requantization of QLinearMatMul / MatMulInteger, against
onnxruntime and against the generic per-cell loop; weights as initializers (kept per weight) and as
feeds that change between runs."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops

from tests.ops.common import assert_same, make_model, one_node_model, run_gpuops, run_ort, value_info

DEVICES = ["cpu", "cuda"]


def _lstm_feeds(rng, D, T=6, batch=3, I=5, H=4, layout=0, dtype=np.float32, bias=True, states=True, gates=4):
    f = lambda *shape: (rng.standard_normal(shape) * 0.8).astype(dtype)  # noqa: E731
    feeds = {"X": f(T, batch, I) if layout == 0 else f(batch, T, I), "W": f(D, gates * H, I),
             "R": f(D, gates * H, H)}
    if bias:
        feeds["B"] = f(D, 2 * gates * H)
    if states:
        shape = (D, batch, H) if layout == 0 else (batch, D, H)
        feeds["initial_h"] = f(*shape)
        if gates == 4:
            feeds["initial_c"] = f(*shape)
    return feeds


def _lstm_node(feeds, op="LSTM", **attrs):
    names = ["X", "W", "R", "B", "", "initial_h", "initial_c"]
    inputs = [n if n in feeds else "" for n in names]
    while inputs and not inputs[-1]:
        inputs.pop()
    return helper.make_node(op, inputs, ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"], **attrs)


def _to_layout0(feeds):
    return {k: np.swapaxes(v, 0, 1) if k in ("X", "initial_h", "initial_c") else v for k, v in feeds.items()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("batch", [1, 3])  # 1: the projection GEMM writes the step blocks directly
def test_fused_lstm_matches_onnxruntime(device, direction, layout, batch):
    D = 2 if direction == "bidirectional" else 1
    feeds = _lstm_feeds(np.random.default_rng(10 + layout), D, layout=layout, batch=batch)
    node = _lstm_node(feeds, hidden_size=4, direction=direction, layout=layout)
    got = run_gpuops(make_model(node, feeds, opset=14), feeds, device)
    ref_feeds = _to_layout0(feeds) if layout else feeds  # onnxruntime has no layout=1 LSTM
    want = run_ort(make_model(_lstm_node(ref_feeds, hidden_size=4, direction=direction), ref_feeds, opset=14),
                   ref_feeds)
    if layout:
        want = [np.transpose(want[0], (2, 0, 1, 3))] + [np.swapaxes(w, 0, 1) for w in want[1:]]
    assert_same(got, want, 1e-5, 1e-5, ["Y", "Y_h", "Y_c"])


@pytest.mark.parametrize("device", DEVICES)
def test_fused_lstm_without_bias_or_states_and_with_named_default_activations(device):
    feeds = _lstm_feeds(np.random.default_rng(11), 2, bias=False, states=False)
    acts = ["sigmoid", "TANH", "Tanh"] * 2  # spelled out for both directions: still the defaults
    model = make_model(_lstm_node(feeds, hidden_size=4, direction="bidirectional", activations=acts), feeds, opset=14)
    assert_same(run_gpuops(model, feeds, device), run_ort(model, feeds), 1e-5, 1e-5)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_fused_lstm_equals_the_generic_cell_loop(dtype):
    """onnxruntime's LSTM is float32 only: the oracle is gpuops' per-cell loop, which a clip too
    large to bind selects (it changes no value)."""
    feeds = _lstm_feeds(np.random.default_rng(12), 2, dtype=dtype)
    got = run_gpuops(make_model(_lstm_node(feeds, hidden_size=4, direction="bidirectional"), feeds, opset=14), feeds)
    generic = make_model(_lstm_node(feeds, hidden_size=4, direction="bidirectional", clip=1e4), feeds, opset=14)
    want = run_gpuops(generic, feeds)
    assert all(g.dtype == np.dtype(dtype) for g in got)
    tol = 1e-12 if dtype == np.float64 else 2e-3
    assert_same(got, want, tol, tol)


def test_fused_lstm_empty_sequence_returns_the_initial_states():
    feeds = _lstm_feeds(np.random.default_rng(13), 2, T=0)
    y, y_h, y_c = run_gpuops(make_model(_lstm_node(feeds, hidden_size=4, direction="bidirectional"), feeds,
                                        opset=14), feeds)
    assert y.shape == (0, 2, 3, 4)
    np.testing.assert_array_equal(y_h, feeds["initial_h"])
    np.testing.assert_array_equal(y_c, feeds["initial_c"])


def test_fused_lstm_weights_kept_per_session_and_fed_weights_follow_each_run():
    """Initializer weights: their prepared copies are kept, and a second session with other weights of
    the same shapes gets its own. Fed weights: every run uses the values it is given."""
    rng = np.random.default_rng(14)
    for _ in range(2):  # two models: the second's weights must not reuse the first's prepared copies
        feeds = _lstm_feeds(rng, 2)
        x = {"X": feeds.pop("X")}
        inits = list(feeds.items())
        model = make_model(_lstm_node({**x, **feeds}, hidden_size=4, direction="bidirectional"), x, inits=inits,
                           opset=14)
        sess = gpuops.InferenceSession(model, device="cpu")
        want = run_ort(model, x)
        for _ in range(2):
            assert_same(sess.run(None, x), want, 1e-5, 1e-5)
    feeds = _lstm_feeds(rng, 1)
    model = make_model(_lstm_node(feeds, hidden_size=4), feeds, opset=14)
    sess = gpuops.InferenceSession(model, device="cpu")
    for scale in (1.0, -0.5):  # the same arrays, changed in place between runs
        feeds["R"] *= scale
        feeds["W"] *= scale
        assert_same(sess.run(None, feeds), run_ort(model, feeds), 1e-5, 1e-5)


@pytest.mark.parametrize("T,H,bias,states", [(1, 128, True, True), (5, 4, True, False), (3, 16, False, True)])
def test_one_row_lstm_path_matches_onnxruntime(T, H, bias, states, monkeypatch):
    """A forward LSTM of one batch row with initializer weights (a streaming model's step) takes the CPU's
    one-row path (the projection by the kept fused weight, the steps in C), where it applies."""
    from gpuops.ops.cpu import rnn as cpu_rnn

    taken = []
    row = cpu_rnn._lstm_row
    monkeypatch.setattr(cpu_rnn, "_lstm_row", lambda *a: taken.append(row(*a)) or taken[-1])
    feeds = _lstm_feeds(np.random.default_rng(15 + T), 1, T=T, batch=1, I=6, H=H, bias=bias, states=states)
    fed = {k: feeds.pop(k) for k in ("X", "initial_h", "initial_c") if k in feeds}
    model = make_model(_lstm_node({**fed, **feeds}, hidden_size=H), fed, inits=list(feeds.items()), opset=14)
    sess = gpuops.InferenceSession(model, device="cpu")
    for _ in range(2):
        assert_same(sess.run(None, fed), run_ort(model, fed), 1e-5, 1e-5, ["Y", "Y_h", "Y_c"])
    assert taken and all(t is not None for t in taken)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("direction,layout,batch", [("forward", 0, 3), ("reverse", 1, 1), ("bidirectional", 0, 1),
                                                    ("bidirectional", 1, 3)])
def test_fused_gru_matches_onnxruntime(device, linear_before_reset, direction, layout, batch):
    D = 2 if direction == "bidirectional" else 1
    feeds = _lstm_feeds(np.random.default_rng(15 + layout), D, layout=layout, batch=batch, gates=3)
    attrs = dict(op="GRU", hidden_size=4, direction=direction, linear_before_reset=linear_before_reset)
    got = run_gpuops(make_model(_lstm_node(feeds, layout=layout, **attrs), feeds, opset=14), feeds, device)
    ref_feeds = _to_layout0(feeds) if layout else feeds
    want = run_ort(make_model(_lstm_node(ref_feeds, **attrs), ref_feeds, opset=14), ref_feeds)
    if layout:
        want = [np.transpose(want[0], (2, 0, 1, 3)), np.swapaxes(want[1], 0, 1)]
    assert_same(got, want, 1e-5, 1e-5, ["Y", "Y_h"])


@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_fused_gru_without_bias_or_state_and_against_the_generic_cell_loop(linear_before_reset):
    rng = np.random.default_rng(16)
    feeds = _lstm_feeds(rng, 2, bias=False, states=False, gates=3)
    attrs = dict(op="GRU", hidden_size=4, direction="bidirectional", linear_before_reset=linear_before_reset)
    model = make_model(_lstm_node(feeds, **attrs), feeds, opset=14)
    assert_same(run_gpuops(model, feeds), run_ort(model, feeds), 1e-5, 1e-5)
    feeds = _lstm_feeds(rng, 2, dtype=np.float64, gates=3)  # float64: the per-cell loop (a clip that never binds)
    got = run_gpuops(make_model(_lstm_node(feeds, **attrs), feeds, opset=14), feeds)
    want = run_gpuops(make_model(_lstm_node(feeds, clip=1e4, **attrs), feeds, opset=14), feeds)
    assert_same(got, want, 1e-12, 1e-12)


# -- quantized GEMMs --------------------------------------------------------------------------------


def _qmatmul_case(rng, a_type, b_type, M=3, K=40, N=6, per_row=False, per_col=False):
    lo = {np.uint8: 0, np.int8: -128}
    a = rng.integers(lo[a_type], lo[a_type] + 256, (2, M, K)).astype(a_type)
    b = rng.integers(lo[b_type], lo[b_type] + 256, (K, N)).astype(b_type)
    # zero points near the middle: centred products of both signs (random ones would mostly saturate)
    a_zp = np.asarray(lo[a_type] + 128 + rng.integers(-10, 10, M if per_row else ())).astype(a_type)
    b_zp = np.asarray(lo[b_type] + 128 + rng.integers(-10, 10, N if per_col else ())).astype(b_type)
    return a, b, a_zp, b_zp


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("types", [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8)])
@pytest.mark.parametrize("K", [40, 1000])  # 1000: partial sums may pass 2**24, so float64 is the exact type
def test_qlinearmatmul_matches_onnxruntime(device, types, K):
    rng = np.random.default_rng(K)
    a, b, a_zp, b_zp = _qmatmul_case(rng, *types, K=K)
    y_zp = np.array(7, types[0])
    y_scale = np.array(0.02 * 0.003 * 74 ** 2 * K ** 0.5 / 50, np.float32)  # outputs spread over about +-50
    feeds = {"a": a, "a_scale": np.array(0.02, np.float32), "a_zp": a_zp, "b": b,
             "b_scale": np.array(0.003, np.float32), "b_zp": b_zp, "y_scale": y_scale, "y_zp": y_zp}
    model = one_node_model("QLinearMatMul", feeds, ["y"], opset=10)
    got, want = run_gpuops(model, feeds, device), run_ort(model, feeds)
    assert_same(got, want, 0, 0)
    assert len(np.unique(want[0])) > 5  # neither saturated nor constant: the rounding is exercised


@pytest.mark.parametrize("per_row,per_col", [(True, False), (False, True), (True, True)])
def test_qlinearmatmul_per_row_and_per_column_parameters(per_row, per_col):
    """Per-row a and per-column b scales / zero points (opset 21 allows them); the oracle is the
    formula in int64 arithmetic (onnxruntime accepts only per-column b)."""
    rng = np.random.default_rng(20)
    a, b, a_zp, b_zp = _qmatmul_case(rng, np.uint8, np.int8, M=4, N=5, per_row=per_row, per_col=per_col)
    a_s = rng.uniform(0.01, 0.03, a_zp.shape).astype(np.float32)
    b_s = rng.uniform(0.001, 0.004, b_zp.shape).astype(np.float32)
    y_s, y_zp = np.array(0.02, np.float32), np.array(100, np.uint8)
    feeds = {"a": a, "a_scale": a_s, "a_zp": a_zp, "b": b, "b_scale": b_s, "b_zp": b_zp, "y_scale": y_s,
             "y_zp": y_zp}
    (got,) = run_gpuops(one_node_model("QLinearMatMul", feeds, ["y"], opset=21), feeds)
    col = lambda p: p.reshape(-1, 1) if p.ndim else p  # noqa: E731
    acc = (a.astype(np.int64) - col(a_zp)) @ (b.astype(np.int64) - b_zp)
    mult = col(a_s) * b_s / y_s
    want = np.clip(np.rint(acc.astype(np.float32) * mult.astype(np.float32)) + 100, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_matmulinteger_and_quantize_chain_with_fed_weights(device):
    """MatMulInteger, then QuantizeLinear / DequantizeLinear of saturating values, with the weight a
    feed changed in place between runs (its kept centred copy must not be reused)."""
    rng = np.random.default_rng(21)
    a, b, a_zp, b_zp = _qmatmul_case(rng, np.uint8, np.int8, K=64)
    nodes = [helper.make_node("MatMulInteger", ["a", "b", "a_zp", "b_zp"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("QuantizeLinear", ["f", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    feeds = {"a": a, "b": b, "a_zp": a_zp, "b_zp": b_zp, "s": np.array(40.0, np.float32), "z": np.array(-3, np.int8)}
    model = make_model(nodes, feeds, [value_info("acc", TensorProto.INT32), value_info("q", TensorProto.INT8),
                                      value_info("y")], opset=13)
    sess = gpuops.InferenceSession(model, device=device)
    for _ in range(2):
        want = run_ort(model, feeds)
        assert np.any(want[1] == 127) and np.any(want[1] == -128)  # both ends saturate
        assert_same(sess.run(None, feeds), want, 0, 0)
        feeds["b"] //= 2
