"""Composite quantized contrib ops on the CPU with constant weights: QGemm and QAttention take the
weight's centred copy (and the native GEMM's pack) made once per session by the cpu MatMulInteger,
as MatMulIntegerToFloat does. Checked against onnxruntime with the weights as initializers, and
checked that the session kept the weight (the path the feeds-only tests never reach)."""

import numpy as np
import pytest
from onnx import numpy_helper

import gpuops

from .helpers import f32, make_model, ms_node, q8, rand, randint, run_ort

U8, I8 = np.uint8, np.int8


def _with_initializers(node, feeds, constant):
    model = make_model(node, {k: v for k, v in feeds.items() if k not in constant})
    model.graph.initializer.extend(numpy_helper.from_array(feeds[k], k) for k in constant)
    return model


def _run_cpu(model, feeds, op_type):
    sess = gpuops.InferenceSession(model, device="cpu")
    steps = [s for s in sess.plan.steps if s.op_type == op_type]
    assert len(steps) == 1 and steps[0].prepared is not None, f"{op_type} kept no weight"
    return sess.run(None, feeds)


@pytest.mark.parametrize("a_type,b_type", [(U8, U8), (U8, I8), (I8, I8)])
@pytest.mark.parametrize("transB", [0, 1])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("output", ["float", "quantized"])
def test_qgemm_with_a_constant_weight_matches_onnxruntime(a_type, b_type, transB, per_column, output):
    M, K, N = 4, 40, 24
    feeds = {"a": q8(a_type, M, K), "sa": f32(0.04), "za": np.array(7 if a_type == U8 else -3, a_type),
             "b": q8(b_type, *((N, K) if transB else (K, N))),
             "sb": (rand(N) ** 2 * 0.01 + 0.001) if per_column else f32(0.02),
             "zb": q8(b_type, N) if per_column else np.array(5, b_type), "c": randint(-500, 500, N)}
    if output == "quantized":
        feeds |= {"sy": f32(1.5), "zy": np.array(120 if a_type == U8 else 5, a_type)}
    node = ms_node("QGemm", list(feeds), ["y"], transB=transB, alpha=0.75)
    model = _with_initializers(node, feeds, ("b", "zb"))
    run_feeds = {k: v for k, v in feeds.items() if k not in ("b", "zb")}
    want = run_ort(model, run_feeds)[0]
    got = _run_cpu(model, run_feeds, "QGemm")[0]
    if output == "quantized":  # the same float32 product rounded: at most one step apart at a tie
        assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
    else:  # exact int32 accumulation times float32 scales: a few float32 roundings
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("per_column", [False, True])
def test_qattention_with_a_constant_weight_matches_onnxruntime(signed, per_column):
    """Per tensor; or a scale and zero point per column with a raw 0/1 key mask (B, T) and a filter value,
    as the optimizer's fusion of quantized projections writes it."""
    B, S, D = 2, 5, 16
    wt = np.int8 if signed else np.uint8
    feeds = {"x": randint(0, 255, B, S, D, dtype=np.uint8), "w": q8(wt, D, 3 * D), "bias": rand(3 * D),
             "xs": f32(0.02), "ws": f32(0.01), "xzp": np.array(120, np.uint8),
             "wzp": np.array(3 if signed else 128, wt)}
    attrs = {}
    if per_column:
        feeds["ws"] = (np.abs(rand(3 * D)) * 0.01 + 0.005).astype(np.float32)
        feeds["wzp"] = randint(-5, 5, 3 * D, dtype=wt) if signed else randint(120, 136, 3 * D, dtype=wt)
        feeds["mask"] = np.ones((B, S), np.int32)
        feeds["mask"][1, 3:] = 0
        attrs["mask_filter_value"] = float(np.finfo(np.float32).min)
    node = ms_node("QAttention", ["x", "w", "bias", "xs", "ws", "mask" if per_column else "", "xzp", "wzp"], ["y"],
                   num_heads=2, **attrs)
    model = _with_initializers(node, feeds, ("w", "bias", "ws", "wzp"))
    run_feeds = {k: feeds[k] for k in ("x", "xs", "xzp") + (("mask",) if per_column else ())}
    want = run_ort(model, run_feeds)[0]
    got = _run_cpu(model, run_feeds, "QAttention")[0]
    # exact integer products scaled in float32, then a float32 softmax and weighted sum of D terms
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("w_t", [U8, I8])
def test_dynamic_quantize_lstm_with_constant_weights_matches_onnxruntime(direction, per_channel, w_t):
    from .test_quantized import _lstm_activation_rounding_bound

    T, B, I, H = 5, 2, 6, 8
    D = 2 if direction == "bidirectional" else 1
    shape = (D, 4 * H) if per_channel else (D,)
    z = 128 if w_t == U8 else (0 if per_channel else -5)  # what onnxruntime accepts (see test_quantized)
    feeds = {"x": rand(T, B, I), "w": q8(w_t, D, I, 4 * H), "r": q8(w_t, D, H, 4 * H), "b": rand(D, 8 * H, scale=0.1),
             "ws": (np.abs(rand(*shape)) * 0.005 + 0.002), "wz": np.full(shape, z, w_t),
             "rs": (np.abs(rand(*shape)) * 0.005 + 0.002), "rz": np.full(shape, z, w_t)}
    node = ms_node("DynamicQuantizeLSTM", ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"], ["y", "yh", "yc"],
                   direction=direction, hidden_size=H)
    model = _with_initializers(node, feeds, ("w", "r", "b", "ws", "wz", "rs", "rz"))
    want = run_ort(model, {"x": feeds["x"]})
    got = _run_cpu(model, {"x": feeds["x"]}, "DynamicQuantizeLSTM")
    bound = _lstm_activation_rounding_bound(feeds)  # onnxruntime also quantizes X and H at every step
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=bound)
    # and the generic op (the weights fed, so nothing is kept): the same float32 LSTM, its dot products
    # of I + H terms summed in another order (BLAS against the native loop), T steps: well inside 1e-5
    generic = gpuops.InferenceSession(make_model(node, feeds), device="cpu").run(None, feeds)
    for g, w in zip(got, generic):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_dynamic_quantize_lstm_projection_runs_in_8_bits_on_the_native_pool(monkeypatch):
    """With constant weights the input projection reads W in 8 bits (cpu_kernels/rnn.c's
    lstm_q8_projection_f32, split across the native pool by columns): neither NumPy's matmul nor the BLAS
    runs it (NumPy's matmul woke OpenBLAS's workers, which then spun beside the native kernels through the
    rest of each run: ddddocr_common_old at 2 threads, 41% of the samples in blas_thread_server). A column
    is summed the same way on any number of threads: the one-thread run's bits at two."""
    from gpuops.ops.cpu import rnn as cpu_rnn

    if gpuops.native.function("lstm_q8_projection_f32") is None:
        pytest.skip("native kernels unavailable")
    fallback = []
    monkeypatch.setattr(cpu_rnn, "_projection_matmul", lambda *a, **k: fallback.append(1))
    calls = []
    fn = gpuops.native.function("lstm_q8_projection_f32")
    monkeypatch.setattr(cpu_rnn.native, "function", lambda name, _f=gpuops.native.function: (
        (lambda *a: calls.append(a[6:9]) or fn(*a)) if name == "lstm_q8_projection_f32" else _f(name)))
    T, B, I, H, D = 32, 1, 128, 256, 2
    shape = (D, 4 * H)
    feeds = {"x": rand(T, B, I), "w": q8(I8, D, I, 4 * H), "r": q8(I8, D, H, 4 * H), "b": rand(D, 8 * H, scale=0.1),
             "ws": (np.abs(rand(*shape)) * 0.005 + 0.002), "wz": np.zeros(shape, I8),
             "rs": (np.abs(rand(*shape)) * 0.0005 + 0.0002), "rz": np.zeros(shape, I8)}
    node = ms_node("DynamicQuantizeLSTM", ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"], ["y", "yh", "yc"],
                   direction="bidirectional", hidden_size=H)
    model = _with_initializers(node, feeds, ("w", "r", "b", "ws", "wz", "rs", "rz"))
    one = gpuops.InferenceSession(model, device="cpu", threads=1).run(None, {"x": feeds["x"]})
    two = gpuops.InferenceSession(model, device="cpu", threads=2).run(None, {"x": feeds["x"]})
    assert not fallback and calls and all(c == (T * B, I, I + 1) for c in calls)  # rows, K, x's row length
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("H", [20, 64])
@pytest.mark.parametrize("w_t", [U8, I8])
def test_dynamic_quantize_lstm_recurrence_in_8_bits_matches_the_float_lstm(H, w_t, monkeypatch):
    """With constant weights the CPU runs the recurrence on R kept in 8 bits (cpu_kernels/rnn.c's
    lstm_q8_f32: 4H columns in blocks of 64, the last one padded when 4H is not a multiple of 64), each
    column's scale and zero point applied after its sum: the float LSTM on the dequantized weights up to
    the order of the float32 sums (H + I terms a gate, T steps)."""
    from gpuops.ops.cpu import rnn as cpu_rnn

    used = []
    loop = cpu_rnn._lstm_q8_loop
    monkeypatch.setattr(cpu_rnn, "_lstm_q8_loop", lambda *a: used.append(1) or loop(*a))
    T, B, I, D = 4, 2, 5, 2
    shape = (D, 4 * H)
    feeds = {"x": rand(T, B, I), "w": q8(w_t, D, I, 4 * H), "r": q8(w_t, D, H, 4 * H), "b": rand(D, 8 * H, scale=0.1),
             "ws": (np.abs(rand(*shape)) * 0.005 + 0.002), "wz": q8(w_t, *shape),
             "rs": (np.abs(rand(*shape)) * 0.005 + 0.002), "rz": q8(w_t, *shape)}
    node = ms_node("DynamicQuantizeLSTM", ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"], ["y", "yh", "yc"],
                   direction="bidirectional", hidden_size=H)
    model = _with_initializers(node, feeds, ("w", "r", "b", "ws", "wz", "rs", "rz"))
    got = _run_cpu(model, {"x": feeds["x"]}, "DynamicQuantizeLSTM")
    assert used
    generic = gpuops.InferenceSession(make_model(node, feeds), device="cpu").run(None, feeds)  # fed: float R
    for g, w in zip(got, generic):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
