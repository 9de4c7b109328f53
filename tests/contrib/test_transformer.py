"""com.microsoft transformer ops against onnxruntime's CPU kernels (NumPy formulas where it has none)."""

import math

import numpy as np
import pytest

import gpuops

from ..ort_versions import requires_ort
from .helpers import DEVICES, check, make_model, ms_node, ort_has_kernel, rand, randint, run_ort


# -- Gelu family --------------------------------------------------------------------------------

def test_gelu_and_bias_gelu():
    x, b = rand(2, 3, 8, scale=2), rand(8)
    check(ms_node("Gelu", ["x"], ["y"]), {"x": x})
    check(ms_node("BiasGelu", ["x", "b"], ["y"]), {"x": x, "b": b})


@pytest.mark.parametrize("with_bias", [False, True])
def test_fast_gelu(with_bias):
    feeds = {"x": rand(3, 5, 16, scale=3)}
    if with_bias:
        feeds["b"] = rand(16)
    check(ms_node("FastGelu", list(feeds), ["y"]), feeds, atol=1e-5)


def _softmax(x, axes):
    e = np.exp(x - x.max(axis=axes, keepdims=True))
    return e / e.sum(axis=axes, keepdims=True)


@pytest.mark.parametrize("data_shape,bias_shape,attrs,expand", [
    ((2, 3, 4, 5), (2, 4, 5), {"broadcast_axis": 1, "softmax_axis": 2}, 1),  # bias repeats over axis 1
    ((2, 3, 4, 5), (2, 3, 4, 5), {"softmax_axis": 3}, None),
    ((2, 3, 6), (2, 6), {"broadcast_axis": 1, "softmax_axis": 2}, 1),
    ((4, 3, 5), (4, 3, 5), {"softmax_axis": 1}, None),  # softmax over the flattened trailing dims
])
def test_bias_softmax_formula(data_shape, bias_shape, attrs, expand):
    # onnxruntime has no CPU kernel: softmax(data + bias) over dims softmax_axis.. from the spec
    x, b = rand(*data_shape), rand(*bias_shape)
    node = ms_node("BiasSoftmax", ["x", "b"], ["y"], **attrs)
    assert not ort_has_kernel(node, {"x": x, "b": b})
    sm = attrs["softmax_axis"]

    def ref(x, b):
        bb = np.expand_dims(b, expand) if expand is not None else b
        return [_softmax(x + bb, tuple(range(sm, x.ndim))).astype(np.float32)]
    check(node, {"x": x, "b": b}, ref=ref)


@pytest.mark.parametrize("bias_shape,inner", [((2, 1, 1, 5), 1), ((1, 3, 4, 5), 0), ((4, 5), 0)])
def test_bias_softmax_later_schema_formula(bias_shape, inner):
    # onnxruntime's later attributes: the fused Add's NumPy broadcasting, softmax over axis.. (here the last)
    x, b = rand(2, 3, 4, 5), rand(*bias_shape)
    node = ms_node("BiasSoftmax", ["x", "b"], ["y"], axis=3, is_inner_broadcast=inner)
    check(node, {"x": x, "b": b}, ref=lambda x, b: [_softmax(x + b, (3,)).astype(np.float32)])


def test_bias_dropout_formula():
    x, b, r = rand(2, 3, 8), rand(8), rand(2, 3, 8)
    node = ms_node("BiasDropout", ["x", "b", "r"], ["y", "mask"])
    assert not ort_has_kernel(node, {"x": x, "b": b, "r": r})
    # inference (no training_mode): output = data + bias + residual, mask all true
    check(node, {"x": x, "b": b, "r": r},
          ref=lambda x, b, r: [x + b + r, np.ones(x.shape, dtype=bool)])


def test_bias_dropout_training_matches_seeded_dropout():
    x, b = rand(4, 16), rand(16)
    ratio, train = np.array(0.25, np.float32), np.array(True)
    node = ms_node("BiasDropout", ["x", "b", "", "ratio", "t"], ["y", "mask"], seed=7)
    feeds = {"x": x, "b": b, "ratio": ratio, "t": train}

    def ref(x, b, ratio, t):  # ai.onnx Dropout's seeded draws (see gpuops.ops.norm.Dropout)
        keep = np.random.RandomState(7).uniform(0, 1.0, x.shape) >= 0.25
        return [np.where(keep, (x + b) / np.float32(0.75), 0).astype(np.float32), keep]
    check(node, feeds, ref=ref)


# -- matmul / gemm / conv fusions ---------------------------------------------------------------

@pytest.mark.parametrize("op_type", ["FusedMatMul", "TransposeMatMul"])
@pytest.mark.parametrize("a_shape,b_shape,attrs", [
    ((3, 4), (4, 5), {}),
    ((2, 4, 3), (2, 4, 5), {"transA": 1, "alpha": 0.5}),
    ((2, 3, 4), (5, 4), {"transB": 1}),
    ((2, 4, 3), (4, 5), {"transA": 1, "transB": 0, "alpha": 2.0}),
])
def test_fused_matmul(op_type, a_shape, b_shape, attrs):
    check(ms_node(op_type, ["a", "b"], ["y"], **attrs), {"a": rand(*a_shape), "b": rand(*b_shape)}, rtol=1e-5)


@pytest.mark.parametrize("a_shape,b_shape,attrs", [
    ((4, 2, 3), (2, 3, 5), {"transBatchA": 1}),
    ((2, 3, 4), (5, 2, 4), {"transBatchB": 1, "transB": 1}),
    ((4, 2, 3), (4, 2, 5), {"transBatchA": 1, "transBatchB": 1, "transA": 1}),
])
def test_fused_matmul_batch_transposes(a_shape, b_shape, attrs):
    check(ms_node("FusedMatMul", ["a", "b"], ["y"], **attrs), {"a": rand(*a_shape), "b": rand(*b_shape)})


@pytest.mark.parametrize("activation,extra", [
    ("Relu", {}), ("LeakyRelu", {"activation_alpha": 0.2}), ("Tanh", {}), ("Sigmoid", {}),
    ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.4}), ("Elu", {"activation_alpha": 0.7}),
    ("Selu", {"activation_alpha": 1.5, "activation_gamma": 2.0}), ("Softplus", {}), ("Softsign", {}),
    ("ThresholdedRelu", {"activation_alpha": 0.2}), ("ScaledTanh", {"activation_alpha": 2.0, "activation_beta": 0.5}),
    ("ParametricSoftplus", {"activation_alpha": 2.0, "activation_beta": 0.5}),
])
def test_fused_gemm(activation, extra):
    feeds = {"a": rand(5, 4), "b": rand(3, 4), "c": rand(3)}
    check(ms_node("FusedGemm", ["a", "b", "c"], ["y"], activation=activation, transB=1, alpha=0.8, beta=0.5, **extra),
          feeds, atol=1e-5)


@pytest.mark.parametrize("activation,params", [("", None), ("Relu", None), ("LeakyRelu", [0.1]),
                                               ("Clip", [-0.5, 0.5]), ("Sigmoid", None), ("Tanh", None),
                                               ("HardSigmoid", [0.3, 0.4]), pytest.param("HardSwish", None, marks=requires_ort(
                                                   "1.24", "its FusedConv kernel has no HardSwish activation"))])
@pytest.mark.parametrize("with_z", [False, True])
def test_fused_conv(activation, params, with_z):
    feeds = {"x": rand(1, 4, 6, 6), "w": rand(6, 2, 3, 3), "b": rand(6)}
    inputs = ["x", "w", "b"]
    if with_z:
        feeds["z"] = rand(1, 6, 3, 3)
        inputs.append("z")
    attrs = {"group": 2, "pads": [1, 1, 0, 0], "strides": [2, 2]}
    if activation:
        attrs["activation"] = activation
    if params:
        attrs["activation_params"] = params
    check(ms_node("FusedConv", inputs, ["y"], **attrs), feeds, rtol=1e-4, atol=1e-5)


# -- normalizations -----------------------------------------------------------------------------

@requires_ort("1.24", "its SkipLayerNormalization returns empty mean and inv_std_var outputs")
@pytest.mark.parametrize("with_beta,with_bias", [(False, False), (True, False), (True, True)])
def test_skip_layer_normalization(with_beta, with_bias):
    H = 16
    feeds = {"x": rand(2, 3, H), "skip": rand(2, 3, H), "gamma": rand(H)}
    inputs = ["x", "skip", "gamma"]
    if with_beta:
        feeds["beta"] = rand(H)
        inputs.append("beta")
    if with_bias:
        feeds["bias"] = rand(H)
        inputs.append("bias")
    check(ms_node("SkipLayerNormalization", inputs, ["y", "mean", "inv_std", "sum"], epsilon=1e-5), feeds,
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("variant", ["full", "no_segment", "no_mask", "position_ids"])
def test_embed_layer_normalization(variant):
    B, S, H = 2, 5, 8
    ids = randint(0, 20, B, S)
    feeds = {"ids": ids, "seg": randint(0, 2, B, S), "word": rand(20, H), "pos": rand(8, H), "segemb": rand(2, H),
             "gamma": rand(H), "beta": rand(H), "mask": np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)}
    inputs = ["ids", "seg", "word", "pos", "segemb", "gamma", "beta", "mask"]
    if variant == "no_segment":
        inputs[1] = inputs[4] = ""
    if variant == "no_mask":
        inputs = inputs[:-1]
    if variant == "position_ids":
        feeds["pid"] = randint(0, 8, B, S)
        inputs.append("pid")
    feeds = {k: v for k, v in feeds.items() if k in inputs}
    outputs = ["y", "mask_index"] + (["sum"] if variant != "no_mask" else [])
    check(ms_node("EmbedLayerNormalization", inputs, outputs, epsilon=1e-5), feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bad", ["ids", "seg", "pid"])
def test_embed_layer_normalization_out_of_range_ids_name_the_node(bad):
    """The CPU's native kernel finds the id; the error is the generic op's, naming the node and the input."""
    B, S, H = 2, 5, 8
    feeds = {"ids": randint(0, 20, B, S), "seg": randint(0, 2, B, S), "word": rand(20, H), "pos": rand(8, H),
             "segemb": rand(2, H), "gamma": rand(H), "beta": rand(H), "mask": randint(0, 2, B, S),
             "pid": randint(0, 8, B, S)}
    feeds[bad][1, 2] = {"ids": 20, "seg": -3, "pid": 8}[bad]
    node = ms_node("EmbedLayerNormalization", list(feeds), ["y", "mask_index"], name="embed_ln", epsilon=1e-5)
    sess = gpuops.InferenceSession(make_model(node, feeds), device="cpu")
    name = {"ids": "input_ids", "seg": "segment_ids", "pid": "position_ids"}[bad]
    with pytest.raises(gpuops.GpuopsError, match=rf"(?s)embed_ln.*input '{name}': index"):
        sess.run(None, feeds)


# -- attention ----------------------------------------------------------------------------------

def _attention_feeds(B=2, S=4, D=8, hidden=8):
    return {"x": rand(B, S, D), "w": rand(D, 3 * hidden, scale=0.5), "bias": rand(3 * hidden)}


@pytest.mark.parametrize("mask,attrs", [
    (None, {}),
    (None, {"unidirectional": 1}),
    (np.array([3, 4], np.int32), {}),  # key lengths
    (np.array([4, 3, 0, 1], np.int32), {}),  # end and start positions
    (np.array([[1, 1, 0, 1], [1, 0, 1, 1]], np.int32), {"unidirectional": 1}),  # raw 2-D mask
    (np.array([[[1, 1, 0, 1]] * 4, [[1, 1, 1, 0]] * 4], np.int32), {"scale": 0.3}),  # 3-D mask
    (None, {"qkv_hidden_sizes": [8, 8, 4]}),
])
def test_attention(mask, attrs):
    feeds = _attention_feeds()
    if attrs.get("qkv_hidden_sizes"):
        feeds["w"], feeds["bias"] = rand(8, 20, scale=0.5), rand(20)
    inputs = ["x", "w", "bias"]
    if mask is not None:
        feeds["mask"] = mask
        inputs.append("mask")
    check(ms_node("Attention", inputs, ["y"], num_heads=2, **attrs), feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention_with_past_and_present(unidirectional):
    feeds = _attention_feeds(S=3)
    feeds["mask"] = np.array([[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]], np.int32)  # past 2 + sequence 3
    feeds["past"] = rand(2, 2, 2, 2, 4)
    check(ms_node("Attention", ["x", "w", "bias", "mask", "past"], ["y", "present"], num_heads=2,
                  unidirectional=unidirectional), feeds, rtol=1e-4, atol=1e-5)


def test_attention_megatron_mask_equals_its_3d_slice():
    # onnxruntime's CPU kernel lacks the (B, 1, M, M) mask; its CUDA kernel reads rows P.. of it, which is
    # the (B, S, T) mask the CPU kernel takes
    feeds = _attention_feeds(S=3)
    feeds["past"] = rand(2, 2, 2, 2, 4)
    mask4 = np.tril(np.ones((6, 6), np.int32))[None, None].repeat(2, axis=0)
    mask4[1, 0, :, 0] = 0
    model3 = make_model(ms_node("Attention", ["x", "w", "bias", "mask", "past"], ["y", "present"], num_heads=2),
                        {**feeds, "mask": np.ascontiguousarray(mask4[:, 0, 2:5, :5])})
    node = ms_node("Attention", ["x", "w", "bias", "mask", "past"], ["y", "present"], num_heads=2)
    check(node, {**feeds, "mask": mask4},
          ref=lambda mask, **f: run_ort(model3, {**f, "mask": np.ascontiguousarray(mask[:, 0, 2:5, :5])}),
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("with_mask", [False, True])
def test_qattention(signed, with_mask):
    B, S, D = 2, 4, 8
    wt = np.int8 if signed else np.uint8
    feeds = {"x": randint(0, 255, B, S, D, dtype=np.uint8), "w": randint(-60, 60, D, 24, dtype=wt) if signed else
             randint(0, 255, D, 24, dtype=wt), "bias": rand(24), "xs": np.array(0.02, np.float32),
             "ws": np.array(0.01, np.float32)}
    inputs = ["x", "w", "bias", "xs", "ws"]
    inputs.append("mask" if with_mask else "")
    if with_mask:
        feeds["mask"] = np.array([2, 4], np.int32)
    feeds["xzp"], feeds["wzp"] = np.array(120, np.uint8), np.array(3 if signed else 128, wt)
    inputs += ["xzp", "wzp"]
    check(ms_node("QAttention", inputs, ["y"], num_heads=2), feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_qattention_without_its_bias_is_refused_naming_the_node(device):
    import gpuops

    feeds = {"x": randint(0, 255, 1, 2, 8, dtype=np.uint8), "w": randint(0, 255, 8, 24, dtype=np.uint8),
             "xs": np.array(0.02, np.float32), "ws": np.array(0.01, np.float32)}
    node = ms_node("QAttention", ["x", "w", "", "xs", "ws"], ["y"], num_heads=2)
    node.name = "qatt"
    sess = gpuops.InferenceSession(make_model(node, feeds), device=device)
    with pytest.raises(gpuops.errors.NodeError, match="'qatt'.*needs its bias"):
        sess.run(None, feeds)


def _longformer_reference(input, weight, bias, mask, global_weight, global_bias, global_, num_heads, window):
    """Token by token from the spec: local window + global keys; global tokens attend to everything."""
    B, S, D = input.shape
    h = D // num_heads
    out = np.zeros((B, S, D), np.float64)

    def proj(w, b):
        qkv = input.astype(np.float64) @ w + b
        return qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:]
    q, k, v = proj(weight, bias)
    qg, kg, vg = proj(global_weight, global_bias)
    for b in range(B):
        for n in range(num_heads):
            sl = slice(n * h, (n + 1) * h)
            for i in range(S):
                if global_[b, i]:
                    keys = list(range(S))
                    qi, kk, vv = qg[b, i, sl], kg[b, :, sl], vg[b, :, sl]
                else:
                    keys = [j for j in range(S) if abs(i - j) <= window or global_[b, j]]
                    qi, kk, vv = q[b, i, sl], k[b, :, sl], v[b, :, sl]
                s = np.array([qi @ kk[j] / math.sqrt(h) + mask[b, j] for j in keys])
                p = np.exp(s - s.max())
                p /= p.sum()
                out[b, i, sl] = sum(pj * vv[j] for pj, j in zip(p, keys))
    return [out.astype(np.float32)]


def test_longformer_attention_formula():
    B, S, D, N, W = 2, 8, 8, 2, 2
    feeds = {"x": rand(B, S, D), "w": rand(D, 3 * D, scale=0.4), "b": rand(3 * D), "mask": np.zeros((B, S), np.float32),
             "gw": rand(D, 3 * D, scale=0.4), "gb": rand(3 * D), "g": np.zeros((B, S), np.int32)}
    feeds["mask"][1, 6:] = -10000.0
    feeds["g"][0, 0] = feeds["g"][1, 3] = 1
    node = ms_node("LongformerAttention", list(feeds), ["y"], num_heads=N, window=W)
    assert not ort_has_kernel(node, feeds)
    check(node, feeds, ref=lambda x, w, b, mask, gw, gb, g: _longformer_reference(x, w, b, mask, gw, gb, g, N, W),
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op_type,shapes,attrs", [
    ("Gelu", [(2, 8)], {}), ("BiasGelu", [(2, 8), (8,)], {}), ("FastGelu", [(2, 8), (8,)], {}),
    ("SkipLayerNormalization", [(2, 3, 8), (2, 3, 8), (8,), (8,)], {}), ("FusedMatMul", [(3, 4), (4, 5)], {}),
    ("Attention", [(2, 3, 8), (8, 24), (24,)], {"num_heads": 2}),
])
def test_float16(op_type, shapes, attrs):
    # half precision in, computed in float32, rounded back (onnxruntime agrees to an ulp or two)
    feeds = {f"i{k}": rand(*shape, scale=0.5).astype(np.float16) for k, shape in enumerate(shapes)}
    check(ms_node(op_type, list(feeds), ["y"], **attrs), feeds, rtol=4e-3, atol=4e-3)


def test_sample_op_echoes():
    x = rand(3, 4)
    check(ms_node("SampleOp", ["x"], ["y"]), {"x": x})
