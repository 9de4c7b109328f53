"""The QOrdered* int8 ops of onnxruntime's transformer optimizer. onnxruntime has CUDA kernels only,
so the oracle is each op's formula, written here in float64 NumPy: dequantize, the float op, quantize
(round half to even, saturate to int8), zero points 0 as the fusions require. gpuops computes in
float32, so a value within float rounding of a .5 boundary may round the other way: the comparison
allows one step there (and only there), and is exact where the tests make the arithmetic exact
(power-of-two scales). The end-to-end test quantizes a BERT encoder to QDQ, lets optimize_model write
the QOrdered ops, and compares with onnxruntime running the QDQ model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpuops.bench.exact_int8 import for_onnxruntime
from gpuops.errors import NodeError, UnsupportedOpError

from .helpers import DEVICES, f32, make_model, ms_node, ort_has_kernel, q8, rand, run_gpuops

ROW, COL, COL32 = 1, 0, 2


def quantize(y, scale):
    return np.clip(np.rint(y / np.float64(scale)), -128, 127).astype(np.int8)


def col_order(w):
    """An ORDER_COL weight as the fusions write it: dims (K, N) kept, the bytes of w.T."""
    return np.ascontiguousarray(w.T).reshape(w.shape)


def assert_quantized(got, want_q, want_real, tol):
    """``got`` equals ``want_q`` except, by one step, where ``want_real`` (the value before rounding)
    lies within ``tol`` of a rounding boundary; such places must be rare."""
    got = np.asarray(got)
    assert got.dtype == np.int8 and got.shape == want_q.shape
    frac = np.abs(want_real - np.floor(want_real) - 0.5)
    near = (frac < tol) & (np.abs(want_real) < 128)
    diff = np.abs(got.astype(np.int32) - want_q.astype(np.int32))
    assert not diff[~near].any(), f"{int((diff[~near] > 0).sum())} values differ away from a rounding boundary"
    assert diff.max(initial=0) <= 1 and near.sum() <= max(2, 0.02 * near.size)


def run(node, feeds, check):
    """Run ``node`` on gpuops' cpu and cuda and ``check`` each result; onnxruntime has no CPU kernel."""
    assert not ort_has_kernel(node, feeds)
    model = make_model(node, feeds)
    for device in DEVICES:
        check(run_gpuops(model, feeds, device)[0])


# -- QOrderedMatMul -----------------------------------------------------------------------------

def matmul_ref(A, sA, W, sB, sY, bias=None, C=None, sC=None):
    y = np.matmul(A.astype(np.int64), W.astype(np.int64)) * (np.float64(sA) * np.asarray(sB, np.float64) / sY)
    if bias is not None:
        y = y + bias  # not divided by scale_Y: the spec's "1d bias, not scaled with scale_Y"
    if C is not None:
        y = y + C * (np.float64(sC) / sY)
    return y


@pytest.mark.parametrize("a_shape,b_batch,sA,sB,sY", [
    ((5, 24), None, 0.02, 0.01, 0.05),
    ((3, 4, 24), None, 0.03, 0.005, 0.02),
    ((2, 4, 24), 1, 0.01, 0.02, 0.003),  # small scale_Y: many outputs saturate
    ((2, 4, 24), 2, 0.05, 0.01, 0.1),
])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("c_batch", [None, 0, 1, "full"])
def test_qordered_matmul(a_shape, b_batch, sA, sB, sY, with_bias, c_batch):
    K, N = a_shape[-1], 8
    A = q8(np.int8, *a_shape)
    W = q8(np.int8, *(((b_batch,) if b_batch else ()) + (K, N)))
    B = np.stack([col_order(w) for w in W]) if b_batch else col_order(W)
    feeds = {"A": A, "sA": f32(sA), "B": B, "sB": f32(sB), "sY": f32(sY)}
    inputs = ["A", "sA", "B", "sB", "sY", "bias" if with_bias else ""]
    bias = rand(N, scale=20) if with_bias else None
    if with_bias:
        feeds["bias"] = bias
    C = None
    if c_batch is not None:
        M = a_shape[-2]
        batch = a_shape[0] if c_batch == "full" and len(a_shape) == 3 else 1
        C = q8(np.int8, M, N) if c_batch == 0 else q8(np.int8, batch, M, N)
        feeds.update(C=C, sC=f32(0.04))
        inputs += ["C", "sC"]
    node = ms_node("QOrderedMatMul", inputs, ["Y"], order_A=ROW, order_B=COL, order_Y=ROW)
    y = matmul_ref(A, f32(sA), W, f32(sB), f32(sY), bias, C, f32(0.04) if C is not None else None)
    if A.ndim == 2 and y.ndim == 3:
        y = y[0]
    run(node, feeds, lambda got: assert_quantized(got, np.clip(np.rint(y), -128, 127).astype(np.int8), y, 1e-3))


def test_qordered_matmul_per_column_scale_and_rounding_ties():
    # power-of-two scales keep every product exact in float32: halves must round to even, exactly
    K, N = 16, 6
    A, W = q8(np.int8, 2, 5, K), q8(np.int8, K, N)
    sB = (2.0 ** -np.arange(1, N + 1)).astype(np.float32)
    feeds = {"A": A, "sA": f32(0.25), "B": col_order(W), "sB": sB, "sY": f32(8.0),
             "bias": f32([0.5, -0.5, 1.5, 0, 2.5, -1.5])}
    node = ms_node("QOrderedMatMul", list(feeds), ["Y"], order_A=ROW, order_B=COL, order_Y=ROW)
    y = matmul_ref(A, 0.25, W, sB.astype(np.float64), 8.0, feeds["bias"].astype(np.float64))
    assert (y - np.floor(y) == 0.5).any()  # the data has ties
    run(node, feeds, lambda got: np.testing.assert_array_equal(got, np.clip(np.rint(y), -128, 127).astype(np.int8)))


# -- QOrderedLayerNormalization -----------------------------------------------------------------

@pytest.mark.parametrize("shape,sX,sY,eps", [((2, 3, 16), 0.05, 0.02, 1e-5), ((1, 7, 32), 0.01, 0.05, 1e-12),
                                             ((4, 8), 0.1, 0.008, 1e-3)])
@pytest.mark.parametrize("gamma_dtype", [np.float32, np.float16])
@pytest.mark.parametrize("with_beta", [True, False])
def test_qordered_layer_normalization(shape, sX, sY, eps, gamma_dtype, with_beta):
    X = q8(np.int8, *shape)
    D = shape[-1]
    gamma = (1 + 0.5 * rand(D)).astype(gamma_dtype)
    beta = (0.3 * rand(D)).astype(gamma_dtype)
    feeds = {"X": X, "sX": f32(sX), "gamma": gamma}
    if with_beta:
        feeds["beta"] = beta
    feeds["sY"] = f32(sY)
    node = ms_node("QOrderedLayerNormalization", ["X", "sX", "gamma", "beta" if with_beta else "", "sY"], ["Y"],
                   epsilon=eps, order_X=ROW, order_Y=ROW)
    x = X * np.float64(f32(sX))
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + np.float64(np.float32(eps))) * gamma.astype(np.float64)
    if with_beta:
        y = y + beta.astype(np.float64)
    real = y / np.float64(f32(sY))
    run(node, feeds, lambda got: assert_quantized(got, quantize(y, f32(sY)), real, 1e-3))


# -- QOrderedGelu -------------------------------------------------------------------------------

@pytest.mark.parametrize("sX,sY", [(0.05, 0.02), (0.1, 0.1), (0.02, 0.001)])
@pytest.mark.parametrize("order", [ROW, COL32])  # elementwise: any layout, the same on both sides
def test_qordered_gelu(sX, sY, order):
    X = np.arange(-128, 128, dtype=np.int8).reshape(4, 8, 8)  # every code
    feeds = {"X": X, "sX": f32(sX), "sY": f32(sY)}
    node = ms_node("QOrderedGelu", ["X", "sX", "sY"], ["Y"], order_X=order, order_Y=order)
    x = X * np.float64(f32(sX))
    y = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    run(node, feeds, lambda got: assert_quantized(got, quantize(y, f32(sY)), y / np.float64(f32(sY)), 1e-4))


# -- QOrderedAttention --------------------------------------------------------------------------

def attention_ref(X, s, W, sw, bias, N, masked):
    """The staged formula: Q, K, V, scores, probabilities and output each quantized to int8."""
    def q(v, scale):
        return np.clip(np.rint(v / np.float64(scale)), -128, 127)

    Bn, S, _ = X.shape
    H = W["q"].shape[1]
    h = H // N
    heads = {}
    for k in "qkv":
        y = q(X.astype(np.float64) @ (W[k] * sw[k].astype(np.float64)) * s["in"] + bias[k], s[k])
        heads[k] = y.reshape(Bn, S, N, h).transpose(0, 2, 1, 3)
    scores = q(heads["q"] @ heads["k"].transpose(0, 1, 3, 2) * (np.float64(s["q"]) * s["k"]), s["qk"])
    logits = scores * np.float64(s["qk"]) / math.sqrt(h) + np.where(masked, -10000.0, 0.0)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    probs = q(e / e.sum(-1, keepdims=True), s["sm"])
    real = probs @ heads["v"] * (np.float64(s["sm"]) * s["v"]) / np.float64(s["out"])
    return real.transpose(0, 2, 1, 3).reshape(Bn, S, H)


def attention_case(Bn, S, Kin, H, N, per_channel, mask_kind, unidirectional=0):
    X = q8(np.int8, Bn, S, Kin)
    W = {k: q8(np.int8, Kin, H) for k in "qkv"}
    sw = {k: (f32(0.002 + 0.004 * np.abs(rand(H))) if per_channel else f32(0.004)) for k in "qkv"}
    bias = {k: rand(H, scale=0.3) for k in "qkv"}
    s = {"in": f32(0.02), "q": f32(0.05), "k": f32(0.04), "v": f32(0.06), "qk": f32(0.5), "sm": f32(1 / 127),
         "out": f32(0.03)}
    lengths = np.array([S] + [max(1, S - 2 - i) for i in range(Bn - 1)], np.int32)
    keys = np.arange(S)
    masked = np.zeros((Bn, 1, S, S), bool)
    mask = None
    if mask_kind == "lengths":
        mask = lengths
        masked = (keys[None, :] >= lengths[:, None])[:, None, None, :]
    elif mask_kind == "end_start":
        start = np.minimum(1, lengths - 1).astype(np.int32)
        mask = np.concatenate([lengths, start])
        masked = ((keys[None, :] >= lengths[:, None]) | (keys[None, :] < start[:, None]))[:, None, None, :]
    elif mask_kind == "raw":
        mask = (keys[None, :] < lengths[:, None]).astype(np.int32)
        masked = (mask == 0)[:, None, None, :]
    elif mask_kind == "raw3d":
        mask = (bits(Bn, S, S) | (keys[None, None, :] == 0)).astype(np.int32)
        masked = (mask == 0)[:, None, :, :]
    if unidirectional:
        masked = masked | (keys[None, :] > keys[:, None])[None, None]
    feeds = {"input": X, "scale_input": s["in"], "scale_Q_gemm": s["q"], "scale_K_gemm": s["k"],
             "scale_V_gemm": s["v"], "Q_weight": col_order(W["q"]), "K_weight": col_order(W["k"]),
             "V_weight": col_order(W["v"]), "scale_Q_weight": sw["q"], "scale_K_weight": sw["k"],
             "scale_V_weight": sw["v"], "Q_bias": bias["q"], "K_bias": bias["k"], "V_bias": bias["v"],
             "scale_QKT_gemm": s["qk"], "scale_QKT_softmax": s["sm"], "scale_values_gemm": s["out"]}
    inputs = list(feeds)
    if mask is not None:
        feeds["mask_index"] = mask
        inputs.append("mask_index")
    node = ms_node("QOrderedAttention", inputs, ["Y"], num_heads=N, order_input=ROW, order_weight=COL,
                   order_output=ROW, qkv_hidden_sizes=[H, H, H], unidirectional=unidirectional)
    return node, feeds, attention_ref(X, s, W, sw, bias, N, masked)


def bits(*shape):
    return q8(np.int8, *shape) > 0


@pytest.mark.parametrize("mask_kind", [None, "lengths", "end_start", "raw", "raw3d"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qordered_attention(mask_kind, per_channel):
    node, feeds, real = attention_case(3, 6, 16, 16, 2, per_channel, mask_kind)
    want = np.clip(np.rint(real), -128, 127).astype(np.int8)
    run(node, feeds, lambda got: assert_quantized(got, want, real, 1e-3))


def test_qordered_attention_unidirectional_and_one_head():
    node, feeds, real = attention_case(2, 5, 8, 12, 1, False, "raw", unidirectional=1)
    want = np.clip(np.rint(real), -128, 127).astype(np.int8)
    run(node, feeds, lambda got: assert_quantized(got, want, real, 1e-3))


# -- refusals -----------------------------------------------------------------------------------

def _session_run(node, feeds):
    import gpuops

    node.name = "the_node"
    return gpuops.InferenceSession(make_model(node, feeds), device="cpu").run(None, feeds)


@pytest.mark.parametrize("orders,bad", [(dict(order_A=ROW, order_B=ROW, order_Y=ROW), "order_B=1 \\(ORDER_ROW\\)"),
                                        (dict(order_A=COL32, order_B=3, order_Y=COL32), "order_A=2 \\(ORDER_COL32\\)")])
def test_qordered_matmul_refuses_other_orders(orders, bad):
    feeds = {"A": q8(np.int8, 4, 8), "sA": f32(0.1), "B": q8(np.int8, 8, 4), "sB": f32(0.1), "sY": f32(0.1)}
    with pytest.raises(UnsupportedOpError, match=rf"'the_node'.*QOrderedMatMul.*{bad} is not supported"):
        _session_run(ms_node("QOrderedMatMul", list(feeds), ["Y"], **orders), feeds)


def test_qordered_refusals_name_the_node():
    X = {"X": q8(np.int8, 2, 8), "sX": f32(0.1)}
    with pytest.raises(UnsupportedOpError, match=r"'the_node'.*order_X=1 \(ORDER_ROW\) and order_Y=2"):
        _session_run(ms_node("QOrderedGelu", ["X", "sX", "sX"], ["Y"], order_X=ROW, order_Y=COL32), X)
    feeds = {**X, "g": rand(8), "sY": f32(0.1)}
    with pytest.raises(UnsupportedOpError, match=r"'the_node'.*order_X=2 \(ORDER_COL32\) is not supported"):
        _session_run(ms_node("QOrderedLayerNormalization", ["X", "sX", "g", "", "sY"], ["Y"], order_X=COL32,
                             order_Y=COL32), feeds)
    feeds = {"A": q8(np.int8, 4, 8), "sA": f32(0.1), "B": q8(np.int8, 8, 4), "sB": f32(0.1), "sY": f32(0.1),
             "bias": rand(4), "C": q8(np.int8, 4, 4)}
    with pytest.raises(NodeError, match=r"'the_node'.*C needs scale_C"):
        _session_run(ms_node("QOrderedMatMul", list(feeds), ["Y"], order_A=ROW, order_B=COL, order_Y=ROW), feeds)
    node, feeds, _ = attention_case(1, 4, 8, 8, 2, False, None)
    with pytest.raises(UnsupportedOpError, match=r"'the_node'.*order_weight=1 \(ORDER_ROW\) is not supported"):
        next(a for a in node.attribute if a.name == "order_weight").i = ROW
        _session_run(node, feeds)


# -- end to end: quantize_static (QDQ) + optimize_model(model_type="bert") ----------------------

def _encoder():
    """A BERT encoder layer in the shape torch writes at opset 20 (LayerNormalization and Gelu nodes),
    on float hidden states with a 0/1 attention mask. The biases of the projections that become
    QOrderedMatMul (attention output, both FFN layers) are 0: the op adds its bias unscaled (the spec,
    and onnxruntime's kernel and test), while fusion_qordered_matmul passes the float bias of the
    QDQ graph, so the fused model equals the QDQ model only for a zero bias."""
    from onnx import TensorProto, numpy_helper

    from ..zoo.models import HIDDEN, Graph, _io, attention, bert_mask, layer_norm, linear

    g, d, opset = Graph(7), HIDDEN, 20
    x = layer_norm(g, "hidden", d, opset)
    a, _ = attention(g, x, d, bert_mask(g, "attention_mask"), opset=opset)
    x = layer_norm(g, g.op("Add", a, x), d, opset)
    x = layer_norm(g, g.op("Add", linear(g, g.op("Gelu", linear(g, x, d, 4 * d)), 4 * d, d), x), d, opset)
    g.output(x, "out")
    producer = {o: n.op_type for n in g.nodes for o in n.output}
    feeds_reshape = {n.input[0] for n in g.nodes if n.op_type == "Reshape"}
    for n in g.nodes:  # a bias Add after a MatMul, outside the Q / K / V projections (which a Reshape reads)
        if n.op_type == "Add" and producer.get(n.input[0]) == "MatMul" and n.output[0] not in feeds_reshape:
            t = next(t for t in g.inits if t.name == n.input[1])
            t.CopyFrom(numpy_helper.from_array(np.zeros(t.dims, np.float32), t.name))
    dims = ["batch", "sequence"]
    return g.model([_io("hidden", TensorProto.FLOAT, dims + [d]), _io("attention_mask", TensorProto.INT64, dims)],
                   [_io("out", TensorProto.FLOAT, dims + [d])], opset)


def _encoder_feeds(batch, rng):
    mask = np.ones((batch, 8), np.int64)
    mask[-1, 5:] = 0 if batch > 1 else 1  # the last sequence of a batch is padded
    return {"hidden": rng.standard_normal((batch, 8, 16)).astype(np.float32), "attention_mask": mask}


def _matches_qdq_source(fused, qdq_path, out_scale, rng):
    """gpuops on the fused model (cpu and cuda, batch 1 and 3) against onnxruntime CPU on its QDQ
    source. The same int8 pipeline runs on both sides; only float32 rounding inside
    LayerNormalization, Gelu and the requantizations differs, which may move a value at a rounding
    boundary by one step of its tensor: two steps of the output's scale are allowed, and 98% of the
    values must be equal."""
    import onnx
    import onnxruntime as ort

    import gpuops

    from ..conformance.harness import device_guard

    oracle = ort.InferenceSession(for_onnxruntime(onnx.load(qdq_path)).SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        feeds = _encoder_feeds(batch, rng)
        want = oracle.run(None, feeds)[0]
        for device in DEVICES:
            sess = gpuops.InferenceSession(fused, device=device)
            with device_guard(device):
                got = sess.run(None, feeds)[0]
            np.testing.assert_allclose(got, want, rtol=0, atol=2.01 * out_scale)
            assert np.mean(got == want) > 0.98


def test_optimizer_qordered_fusions_on_a_qdq_bert(tmp_path):
    import logging

    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.transformers.optimizer import optimize_model

    logging.getLogger("onnxruntime").setLevel(logging.ERROR)
    rng = np.random.default_rng(3)
    f32_path, qdq_path = str(tmp_path / "f32.onnx"), str(tmp_path / "qdq.onnx")
    onnx.save(_encoder(), f32_path)

    class Calibration:
        batches = iter([_encoder_feeds(2, rng) for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)

    # what the fusions match: int8 symmetric activations and weights (zero points 0, constant
    # per-tensor scales), MatMul -> bias Add -> QuantizeLinear (the MatMul's own output not quantized)
    # and DequantizeLinear -> LayerNormalization / Gelu -> QuantizeLinear
    quantize_static(f32_path, qdq_path, Calibration(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    op_types_to_quantize=["MatMul", "LayerNormalization", "Gelu"],
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True,
                                   "OpTypesToExcludeOutputQuantization": ["MatMul"]})
    fused = optimize_model(qdq_path, model_type="bert", num_heads=2, hidden_size=16, opt_level=0)
    fused.save_model_to_file(str(tmp_path / "fused.onnx"))
    fused = onnx.load(str(tmp_path / "fused.onnx"))
    counts = {t: sum(n.op_type == t for n in fused.graph.node) for t in
              ("QOrderedMatMul", "QOrderedLayerNormalization", "QOrderedGelu", "QOrderedAttention")}
    # onnxruntime's quantizer puts Q/DQ on MatMul inputs, so the attention core never shows the
    # pattern FusionQOrderedAttention matches (Q/DQ after each MatMul, none between Transpose and MatMul)
    assert counts == {"QOrderedMatMul": 3, "QOrderedLayerNormalization": 3, "QOrderedGelu": 1,
                      "QOrderedAttention": 0}
    last = next(n for n in fused.graph.node if n.output[0] == "out")  # DequantizeLinear
    out_scale = float(onnx.numpy_helper.to_array(next(t for t in fused.graph.initializer if t.name == last.input[1])))
    _matches_qdq_source(fused, qdq_path, out_scale, rng)


def _trt_style_encoder(scales=None):
    """The same layer with Q/DQ pairs where NVIDIA's int8 tools put them (after each MatMul and
    bias Add, none between a Transpose and a MatMul) - the pattern FusionQOrderedAttention matches -
    and int8 weights with per-column scales. ``scales`` None: the float model and the list of the
    tensors to quantize; else their scales, in that order."""
    from onnx import TensorProto

    from ..zoo.models import HEADS, HIDDEN, Graph, _io, _split_heads, bert_mask

    g, d, marks = Graph(11), HIDDEN, []

    def qdq(x):
        marks.append(x)
        if scales is None:
            return x
        s, z = g.const(np.float32(scales[len(marks) - 1]), "s"), g.const(np.int8(0), "z")
        return g.op("DequantizeLinear", g.op("QuantizeLinear", x, s, z), s, z)

    def dense(x, n_in, n_out, bias=True):  # zero biases where QOrderedMatMul takes them (see _encoder)
        w = (g.rng.standard_normal((n_in, n_out)) / math.sqrt(n_in)).astype(np.float32)
        b = g.const((g.rng.standard_normal(n_out) * 0.1 * bias).astype(np.float32), "b")
        if scales is not None:
            s = (np.abs(w).max(0) / 127).astype(np.float32)
            w = g.op("DequantizeLinear", g.const(np.rint(w / s).astype(np.int8), "wq"), g.const(s, "ws"),
                     g.const(np.zeros(n_out, np.int8), "wz"), axis=1)
        else:
            w = g.const(w, "w")
        return g.op("Add", g.op("MatMul", x, w), b)

    def ln(x):
        gamma, beta = (1 + 0.1 * g.rng.standard_normal(d)), 0.1 * g.rng.standard_normal(d)
        return qdq(g.op("LayerNormalization", qdq(x), g.const(gamma.astype(np.float32)),
                        g.const(beta.astype(np.float32)), axis=-1, epsilon=1e-5))

    x = ln("hidden")
    q, k, v = (_split_heads(g, qdq(dense(x, d, d)), d, key=key) for key in (False, True, False))
    s = g.op("Div", qdq(g.op("MatMul", q, k)), g.const(np.float32(math.sqrt(d // HEADS))))
    p = qdq(g.op("Softmax", g.op("Add", s, bert_mask(g, "attention_mask")), axis=-1))
    o = g.op("Transpose", qdq(g.op("MatMul", p, v)), perm=[0, 2, 1, 3])
    x = ln(g.op("Add", dense(g.op("Reshape", o, g.const(np.array([0, 0, d], np.int64))), d, d, bias=False), x))
    f = dense(qdq(g.op("Gelu", qdq(dense(x, d, 4 * d, bias=False)))), 4 * d, d, bias=False)
    g.output(ln(g.op("Add", f, x)), "out")
    marks[-1] = "out"
    dims = ["batch", "sequence"]
    model = g.model([_io("hidden", TensorProto.FLOAT, dims + [d]), _io("attention_mask", TensorProto.INT64, dims)],
                    [_io("out", TensorProto.FLOAT, dims + [d])], 20)
    return model, marks


def test_optimizer_qordered_attention_on_a_tensorrt_style_qdq_bert(tmp_path):
    import onnx
    import onnxruntime as ort
    from onnxruntime.transformers.optimizer import optimize_model

    rng = np.random.default_rng(4)
    model, marks = _trt_style_encoder()
    model.graph.output.extend([onnx.ValueInfoProto(name=n) for n in marks if n not in ("hidden", "out")])
    calibration = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    amax = dict.fromkeys(marks, 0.0)
    for _ in range(4):  # max calibration: scale = max |x| / 127
        feeds = _encoder_feeds(2, rng)
        values = {**dict(zip([o.name for o in calibration.get_outputs()], calibration.run(None, feeds))), **feeds}
        amax = {n: max(a, float(np.abs(values[n]).max())) for n, a in amax.items()}
    qdq, _ = _trt_style_encoder([amax[n] / 127 for n in marks])
    qdq_path = str(tmp_path / "qdq.onnx")
    onnx.save(qdq, qdq_path)
    fused = optimize_model(qdq_path, model_type="bert", num_heads=2, hidden_size=16, opt_level=0)
    fused.save_model_to_file(str(tmp_path / "fused.onnx"))
    fused = onnx.load(str(tmp_path / "fused.onnx"))
    ops = sorted(n.op_type for n in fused.graph.node if n.op_type.startswith("QOrdered"))
    assert ops == ["QOrderedAttention", "QOrderedGelu"] + ["QOrderedLayerNormalization"] * 3 + ["QOrderedMatMul"] * 3
    _matches_qdq_source(fused, qdq_path, amax["out"] / 127, rng)
