"""BeamSearch, GreedySearch and Sampling (com.microsoft) around a tiny GPT-2 style decoder with past
keys / values, in the layout ``onnxruntime.transformers.convert_generation`` writes (the decoder as
the ``decoder`` graph attribute, its initializers moved to the main graph), compared with
onnxruntime's CPU kernels on cpu and on the cuda stand-in. Sampling replays the random engine of
onnxruntime's Linux builds and is compared with it too, besides properties that hold whatever the draws."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpuops.errors import GpuopsError

from ..zoo.models import HEADS, HIDDEN, MAX_POS, VOCAB, Graph, attention, gelu, layer_norm, linear
from ..ort_versions import requires_ort
from .helpers import DEVICES, assert_close, run_gpuops, run_ort

# onnxruntime 1.23 refuses these models outright: its graph check fails in the decoder subgraph
# ("Node (Unsqueeze_..) input arg (c_..) does not have type information set by parent node").
ORT_LOADS_GENERATION_MODELS = requires_ort(
    "1.24", "rejects the generation models' decoder subgraph (Unsqueeze input without type information)")

EOS, PAD = 5, 0
_io = helper.make_tensor_value_info


def gpt2_decoder(layers: int = 2, seed: int = 7) -> onnx.GraphProto:
    """The GPT-2 subgraph convert_generation expects: (input_ids, position_ids, attention_mask, past_i)
    int32 / float32 -> (logits, present_i), past / present [2, batch, heads, length, head_size]."""
    g = Graph(seed)
    d = HIDDEN
    u0 = g.const(np.array([0], np.int64))
    past_len = g.op("Gather", g.op("Shape", "past_0"), g.const(np.int64(3)), axis=0)
    total = g.op("Add", past_len, g.op("Gather", g.op("Shape", "input_ids"), g.const(np.int64(1)), axis=0))
    x = g.op("Add", g.op("Gather", g.weight(VOCAB, d, scale=1.0), g.op("Cast", "input_ids", to=TensorProto.INT64)),
             g.op("Gather", g.weight(MAX_POS, d, scale=0.5), g.op("Cast", "position_ids", to=TensorProto.INT64)))
    # additive mask: causal over past + new tokens, and the padded keys
    ones = g.op("ConstantOfShape", g.op("Concat", g.op("Unsqueeze", total, u0), g.op("Unsqueeze", total, u0), axis=0),
                value=numpy_helper.from_array(np.array([1], np.uint8)))
    causal = g.op("Trilu", g.op("Cast", ones, to=TensorProto.FLOAT), upper=0)
    causal = g.op("Slice", causal, g.op("Unsqueeze", past_len, u0), g.op("Unsqueeze", total, u0), u0)
    keys = g.op("Cast", g.op("Unsqueeze", "attention_mask", g.const(np.array([1, 2], np.int64))), to=TensorProto.FLOAT)
    mask = g.op("Mul", g.op("Sub", g.const(np.float32(1)), g.op("Mul", causal, keys)), g.const(np.float32(-10000)))
    for i in range(layers):
        a, present = attention(g, layer_norm(g, x, d, 17), d, mask, past=f"past_{i}", opset=17)
        g.output(present, f"present_{i}")
        x = g.op("Add", x, a)
        x = g.op("Add", x, linear(g, gelu(g, linear(g, layer_norm(g, x, d, 17), d, 4 * d)), 4 * d, d))
    # sharpened logits keep the test's choices far from ties
    g.output(g.op("Mul", linear(g, layer_norm(g, x, d, 17), d, VOCAB), g.const(np.float32(3))), "logits")
    inputs = [_io("input_ids", TensorProto.INT32, ["batch", "seq"]),
              _io("position_ids", TensorProto.INT32, ["batch", "seq"]),
              _io("attention_mask", TensorProto.INT32, ["batch", "total"])]
    inputs += [_io(f"past_{i}", TensorProto.FLOAT, [2, "batch", HEADS, "past", d // HEADS]) for i in range(layers)]
    outputs = [_io("logits", TensorProto.FLOAT, ["batch", "seq", VOCAB])]
    outputs += [_io(f"present_{i}", TensorProto.FLOAT, [2, "batch", HEADS, "total", d // HEADS]) for i in range(layers)]
    return helper.make_graph(g.nodes, "gpt2 decoder", inputs, outputs, initializer=g.inits)


DECODER = gpt2_decoder()
BEAM_INPUTS = ["input_ids", "max_length", "min_length", "num_beams", "num_return_sequences", "length_penalty",
               "repetition_penalty"]
GREEDY_INPUTS = ["input_ids", "max_length", "min_length", "repetition_penalty"]
OPTIONAL = {"vocab_mask": (TensorProto.INT32, ["vocab_size"]),
            "prefix_vocab_mask": (TensorProto.INT32, ["batch_size", VOCAB]),
            "attention_mask": (TensorProto.INT32, ["batch_size", "sequence_length"]),
            "presence_mask": (TensorProto.INT32, ["batch_size", VOCAB]), "seed": (TensorProto.INT32, [1])}


def generation_model(op_type: str, feeds: dict, outputs=("sequences",), decoder=DECODER, **attrs) -> onnx.ModelProto:
    """A model as convert_generation writes it: one generation node, the decoder's initializers moved
    to the main graph, the optional inputs it leaves out named ''."""
    inits = []
    if decoder is not None:
        decoder = onnx.GraphProto.FromString(decoder.SerializeToString())
        inits = list(decoder.initializer)
        del decoder.initializer[:]
    names = BEAM_INPUTS if op_type == "BeamSearch" else GREEDY_INPUTS
    optional = ["vocab_mask", "prefix_vocab_mask", "attention_mask"]
    optional += ["presence_mask", "seed"] if op_type == "Sampling" else []
    inputs = names + [n if n in feeds else "" for n in optional]
    while inputs[-1] == "":
        inputs.pop()
    attrs = {"eos_token_id": EOS, "pad_token_id": PAD, "model_type": 0, "no_repeat_ngram_size": 0, **attrs}
    if decoder is not None:
        attrs["decoder"] = decoder
    node = helper.make_node(op_type, inputs, list(outputs), name=f"{op_type}_gpt2", domain="com.microsoft", **attrs)
    scalar = {"length_penalty": TensorProto.FLOAT, "repetition_penalty": TensorProto.FLOAT}
    graph_inputs = [_io("input_ids", TensorProto.INT32, ["batch_size", "sequence_length"])]
    graph_inputs += [_io(n, scalar.get(n, TensorProto.INT32), [1]) for n in names[1:]]
    graph_inputs += [_io(n, *OPTIONAL[n]) for n in optional if n in feeds]
    graph = helper.make_graph([node], "generation", graph_inputs, [onnx.ValueInfoProto(name=o) for o in outputs],
                              initializer=inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def i32(v):
    return np.array([v], np.int32)


def f32(v):
    return np.array([v], np.float32)


PROMPTS = {1: np.array([[3, 7, 9, 1]], np.int32),
           2: np.array([[3, 7, 9, 1], [PAD, PAD, 4, 6]], np.int32)}  # the second one left-padded


def feeds_for(op_type, batch=1, max_length=12, min_length=0, repetition_penalty=1.0, num_beams=1,
              num_return_sequences=1, length_penalty=1.0, **optional):
    feeds = {"input_ids": PROMPTS[batch], "max_length": i32(max_length), "min_length": i32(min_length)}
    if op_type == "BeamSearch":
        feeds |= {"num_beams": i32(num_beams), "num_return_sequences": i32(num_return_sequences),
                  "length_penalty": f32(length_penalty)}
    feeds["repetition_penalty"] = f32(repetition_penalty)
    return feeds | optional


def compare(op_type, feeds, outputs=("sequences",), rtol=1e-4, atol=1e-4, **attrs):
    """Run on onnxruntime and on gpuops (cpu, cuda): sequences exactly, scores within float tolerance."""
    model = generation_model(op_type, feeds, outputs, **attrs)
    want = run_ort(model, feeds)
    for device in DEVICES:
        assert_close(run_gpuops(model, feeds, device), want, rtol, atol, f"{op_type} on {device}")
    return want


# -- greedy search ---------------------------------------------------------------------------------

GREEDY_CASES = {
    "plain": {},
    "batch2_padded": {"batch": 2},
    "eos_stops": {"batch": 2, "max_length": 16, "eos": 12},
    "repetition_penalty": {"batch": 2, "repetition_penalty": 1.7},
    "no_repeat_ngram": {"batch": 2, "no_repeat_ngram_size": 2},
    "min_length": {"batch": 2, "min_length": 14, "max_length": 16, "eos": 12},
    "vocab_mask": {"batch": 2, "vocab_mask": True},
    "prefix_vocab_mask": {"batch": 2, "prefix_vocab_mask": True},
    "attention_mask": {"batch": 2, "attention_mask": True},
}


def _optional_feeds(case: dict, batch: int) -> dict:
    rng = np.random.default_rng(3)
    feeds = {}
    if case.pop("vocab_mask", False):
        feeds["vocab_mask"] = (rng.random(VOCAB) < 0.6).astype(np.int32)
    if case.pop("prefix_vocab_mask", False):
        feeds["prefix_vocab_mask"] = (rng.random((batch, VOCAB)) < 0.3).astype(np.int32)
    if case.pop("attention_mask", False):
        feeds["attention_mask"] = (PROMPTS[batch] != PAD).astype(np.int32)
    return feeds


def _split(case: dict):
    case = dict(case)
    attrs = {k: case.pop(k) for k in ("no_repeat_ngram_size", "early_stopping") if k in case}
    if "eos" in case:
        attrs["eos_token_id"] = case.pop("eos")
    batch = case.setdefault("batch", 1)
    optional = _optional_feeds(case, batch)
    return case, optional, attrs


@ORT_LOADS_GENERATION_MODELS
@pytest.mark.parametrize("name", GREEDY_CASES)
def test_greedy_search_matches_onnxruntime(name):
    case, optional, attrs = _split(GREEDY_CASES[name])
    compare("GreedySearch", feeds_for("GreedySearch", **case, **optional), **attrs)


@ORT_LOADS_GENERATION_MODELS
def test_greedy_search_stops_when_every_sequence_ended():
    """After the last EOS (written as the pad token) the search stops. onnxruntime leaves the rest of
    its output buffer as it was (zeros in a fresh buffer, stale values in a reused one); gpuops writes 0."""
    feeds = feeds_for("GreedySearch", max_length=16)
    model = generation_model("GreedySearch", feeds, eos_token_id=12, pad_token_id=4)
    want = run_ort(model, feeds)[0]
    end = int(np.flatnonzero(want[0, 4:] == 4)[0]) + 5
    assert end < 16
    for device in DEVICES:
        got = run_gpuops(model, feeds, device)[0]
        np.testing.assert_array_equal(got[:, :end], want[:, :end])
        assert (got[:, end:] == 0).all()


@ORT_LOADS_GENERATION_MODELS
def test_init_decoder_runs_the_first_step():
    """convert_generation's separate first-step decoder (same signature) is used once."""
    model = generation_model("GreedySearch", feeds_for("GreedySearch", batch=2))
    # onnxruntime feeds both graphs the same outer-scope weights: the first-step graph negates the logits
    init = onnx.GraphProto.FromString(DECODER.SerializeToString())
    del init.initializer[:]
    last = next(n for n in init.node if "logits" in n.output)
    last.output[:] = ["raw_logits"]
    init.node.append(helper.make_node("Neg", ["raw_logits"], ["logits"]))
    model.graph.node[0].attribute.append(helper.make_attribute("init_decoder", init))
    feeds = feeds_for("GreedySearch", batch=2)
    want = run_ort(model, feeds)
    assert not np.array_equal(want[0], run_ort(generation_model("GreedySearch", feeds), feeds)[0])
    for device in DEVICES:
        assert_close(run_gpuops(model, feeds, device), want, 0, 0, f"init_decoder on {device}")


# -- beam search -----------------------------------------------------------------------------------

BEAM_CASES = {
    "one_beam": {"num_beams": 1},
    "three_beams": {"num_beams": 3},
    "return_three": {"num_beams": 3, "num_return_sequences": 3},
    "batch2_padded": {"batch": 2, "num_beams": 3, "num_return_sequences": 2},
    "length_penalty": {"batch": 2, "num_beams": 3, "num_return_sequences": 3, "length_penalty": 0.4, "eos": 12},
    "eos_early_stopping": {"batch": 2, "num_beams": 3, "num_return_sequences": 2, "eos": 12, "early_stopping": 1,
                           "max_length": 16},
    "eos_no_early_stopping": {"batch": 2, "num_beams": 2, "num_return_sequences": 2, "eos": 12, "max_length": 16},
    "repetition_penalty": {"batch": 2, "num_beams": 3, "repetition_penalty": 1.5},
    "no_repeat_ngram": {"batch": 2, "num_beams": 3, "num_return_sequences": 3, "no_repeat_ngram_size": 3},
    "min_length": {"batch": 2, "num_beams": 2, "min_length": 13, "max_length": 15, "eos": 12},
    "vocab_mask": {"batch": 2, "num_beams": 3, "vocab_mask": True},
    "prefix_vocab_mask": {"batch": 2, "num_beams": 2, "prefix_vocab_mask": True},
    "attention_mask": {"batch": 2, "num_beams": 3, "attention_mask": True},
}


@ORT_LOADS_GENERATION_MODELS
@pytest.mark.parametrize("name", BEAM_CASES)
def test_beam_search_matches_onnxruntime(name):
    case, optional, attrs = _split(BEAM_CASES[name])
    compare("BeamSearch", feeds_for("BeamSearch", **case, **optional), ("sequences", "sequences_scores"), **attrs)


@ORT_LOADS_GENERATION_MODELS
def test_beam_search_scores_output():
    """The per-step scores [max_length - sequence_length, batch, beams, vocab] (no early stop here)."""
    feeds = feeds_for("BeamSearch", batch=2, num_beams=3, num_return_sequences=2, max_length=9)
    want = compare("BeamSearch", feeds, ("sequences", "sequences_scores", "scores"), early_stopping=0)
    assert want[2].shape == (5, 2, 3, VOCAB)


# -- T5 style encoder-decoder (model_type 1) ------------------------------------------------------

HD = HIDDEN // HEADS


def _heads(g: Graph, x):
    """(B, S, D) -> (B, N, S, h)."""
    return g.op("Transpose", g.op("Reshape", x, g.const(np.array([0, 0, HEADS, HD], np.int64))), perm=[0, 2, 1, 3])


def _attend(g: Graph, q, k, v, mask=None):
    s = g.op("Div", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2])), g.const(np.float32(math.sqrt(HD))))
    if mask is not None:  # (B, S) int32 -> additive (B, 1, 1, S)
        m = g.op("Cast", g.op("Unsqueeze", mask, g.const(np.array([1, 2], np.int64))), to=TensorProto.FLOAT)
        s = g.op("Add", s, g.op("Mul", g.op("Sub", g.const(np.float32(1)), m), g.const(np.float32(-10000))))
    o = g.op("Transpose", g.op("MatMul", g.op("Softmax", s, axis=-1), v), perm=[0, 2, 1, 3])
    return g.op("Reshape", o, g.const(np.array([0, 0, HIDDEN], np.int64)))


def t5_graphs(seed: int = 21):
    """convert_generation's T5 pair in its current format: the encoder (encoder_input_ids,
    encoder_attention_mask) -> (present_key_cross_0, present_value_cross_0), and the decoder (input_ids
    [batch, 1], encoder_attention_mask, past_key_self_0, past_value_self_0, past_key_cross_0,
    past_value_cross_0) -> (logits, present_key_self_0, present_value_self_0); shared weights."""
    g, d = Graph(seed), HIDDEN
    emb = g.weight(VOCAB, d, scale=1.0)
    h = g.op("Gather", emb, g.op("Cast", "encoder_input_ids", to=TensorProto.INT64))
    x = layer_norm(g, h, d, 17)
    qkv = [_heads(g, linear(g, x, d, d)) for _ in range(3)]
    h = layer_norm(g, g.op("Add", h, linear(g, _attend(g, *qkv, "encoder_attention_mask"), d, d)), d, 17)
    g.op("Identity", h)  # the hidden states, which the older encoder format outputs
    g.output(_heads(g, linear(g, h, d, d)), "present_key_cross_0")
    g.output(_heads(g, linear(g, h, d, d)), "present_value_cross_0")
    encoder_nodes, g.nodes = g.nodes, []
    y = g.op("Gather", emb, g.op("Cast", "input_ids", to=TensorProto.INT64))
    x = layer_norm(g, y, d, 17)
    k = g.op("Concat", "past_key_self_0", _heads(g, linear(g, x, d, d)), axis=2)
    v = g.op("Concat", "past_value_self_0", _heads(g, linear(g, x, d, d)), axis=2)
    y = g.op("Add", y, linear(g, _attend(g, _heads(g, linear(g, x, d, d)), k, v), d, d))
    x = layer_norm(g, y, d, 17)
    q = _heads(g, linear(g, x, d, d))
    cross = _attend(g, q, "past_key_cross_0", "past_value_cross_0", "encoder_attention_mask")
    y = g.op("Add", y, linear(g, cross, d, d))
    g.output(g.op("Mul", linear(g, layer_norm(g, y, d, 17), d, VOCAB), g.const(np.float32(3))), "logits")
    g.output(k, "present_key_self_0")
    g.output(v, "present_value_self_0")

    def cache(name, length):
        return _io(name, TensorProto.FLOAT, ["batch", HEADS, length, HD])

    ids = [_io("encoder_input_ids", TensorProto.INT32, ["batch", "enc"]),
           _io("encoder_attention_mask", TensorProto.INT32, ["batch", "enc"])]
    encoder = helper.make_graph(encoder_nodes, "t5 encoder", ids,
                                [cache("present_key_cross_0", "enc"), cache("present_value_cross_0", "enc")])
    inputs = [_io("input_ids", TensorProto.INT32, ["batch", 1]), ids[1], cache("past_key_self_0", "past"),
              cache("past_value_self_0", "past"), cache("past_key_cross_0", "enc"), cache("past_value_cross_0", "enc")]
    outputs = [_io("logits", TensorProto.FLOAT, ["batch", 1, VOCAB]), cache("present_key_self_0", "total"),
               cache("present_value_self_0", "total")]
    return encoder, helper.make_graph(g.nodes, "t5 decoder", inputs, outputs), g.inits


ENCODER, T5_DECODER, T5_WEIGHTS = t5_graphs()


def t5_encoder_decoder_init() -> onnx.GraphProto:
    """The older encoder format: (encoder_input_ids, encoder_attention_mask, decoder_input_ids) ->
    (logits, encoder_hidden_states, present_key_self_0, present_value_self_0, present_key_cross_0,
    present_value_cross_0), the encoder and the first decoder step in one graph."""
    encoder = onnx.GraphProto.FromString(ENCODER.SerializeToString())
    next(n for n in encoder.node if n.op_type == "Identity").output[:] = ["encoder_hidden_states"]
    empty = [helper.make_node("Slice", ["present_key_cross_0", "zero", "zero", "two"], [f"past_{kv}_self_0"])
             for kv in ("key", "value")]
    rename = {"input_ids": "decoder_input_ids", "past_key_cross_0": "present_key_cross_0",
              "past_value_cross_0": "present_value_cross_0"}
    step = onnx.GraphProto.FromString(T5_DECODER.SerializeToString()).node
    for n in step:
        n.input[:] = [rename.get(i, i) for i in n.input]
    consts = [numpy_helper.from_array(np.array([v], np.int64), name) for name, v in (("zero", 0), ("two", 2))]
    outputs = [T5_DECODER.output[0], _io("encoder_hidden_states", TensorProto.FLOAT, ["batch", "enc", HIDDEN]),
               *T5_DECODER.output[1:], *encoder.output]
    inputs = [*encoder.input, _io("decoder_input_ids", TensorProto.INT32, ["batch", 1])]
    return helper.make_graph([*encoder.node, *empty, *step], "t5 encoder and decoder init", inputs, outputs,
                             initializer=consts)


def t5_model(op_type, feeds, outputs=("sequences",), encoder=ENCODER, **attrs):
    model = generation_model(op_type, feeds, outputs, decoder=T5_DECODER, encoder=encoder, model_type=1,
                             decoder_start_token_id=2, **attrs)
    model.graph.initializer.extend(T5_WEIGHTS)
    return model


T5_CASES = {
    "one_beam": {"num_beams": 1},
    "batch2_three_beams": {"batch": 2, "num_beams": 3, "num_return_sequences": 2},
    "eos_length_penalty": {"batch": 2, "num_beams": 3, "num_return_sequences": 3, "eos": 20, "length_penalty": 0.6},
    "processors": {"batch": 2, "num_beams": 2, "repetition_penalty": 1.4, "no_repeat_ngram_size": 2,
                   "vocab_mask": True},
    "attention_mask": {"batch": 2, "num_beams": 3, "attention_mask": True, "min_length": 5},
}


@ORT_LOADS_GENERATION_MODELS
@pytest.mark.parametrize("name", T5_CASES)
@pytest.mark.parametrize("encoder", ["encoder", "encoder_decoder_init"])
def test_t5_beam_search_matches_onnxruntime(name, encoder):
    case, optional, attrs = _split(T5_CASES[name])
    feeds = feeds_for("BeamSearch", **case, **optional)
    graph = ENCODER if encoder == "encoder" else t5_encoder_decoder_init()
    model = t5_model("BeamSearch", feeds, ("sequences", "sequences_scores"), encoder=graph, **attrs)
    want = run_ort(model, feeds)
    for device in DEVICES:
        assert_close(run_gpuops(model, feeds, device), want, 1e-4, 1e-4, f"T5 BeamSearch on {device}")


@ORT_LOADS_GENERATION_MODELS
def test_t5_greedy_search_is_one_beam():
    """onnxruntime's GreedySearch takes GPT-2 decoders only; gpuops' T5 greedy search equals onnxruntime's
    one-beam search (no EOS reached here)."""
    feeds = feeds_for("GreedySearch", batch=2, repetition_penalty=1.2)
    beam = feeds_for("BeamSearch", batch=2, repetition_penalty=1.2)
    want = run_ort(t5_model("BeamSearch", beam, eos_token_id=VOCAB - 1), beam)[0][:, 0]
    for device in DEVICES:
        np.testing.assert_array_equal(run_gpuops(t5_model("GreedySearch", feeds, eos_token_id=VOCAB - 1), feeds,
                                                 device)[0], want)


# -- sampling --------------------------------------------------------------------------------------

SAMPLING_CASES = {
    "default_seed": {"top_p": 0.9},
    "seeded_temperature": {"top_p": 0.8, "temperature": 1.7, "seed": 42},
    "keep_tokens": {"top_p": 0.3, "min_tokens_to_keep": 3, "seed": 3},
    "custom": {"top_p": 0.7, "custom": 1, "seed": 9},
    "processors": {"top_p": 0.95, "seed": 5, "repetition_penalty": 1.3, "no_repeat_ngram_size": 2,
                   "vocab_mask": True},
    "eos": {"top_p": 0.95, "seed": 11, "eos": 13, "max_length": 16},
}


@ORT_LOADS_GENERATION_MODELS
@pytest.mark.parametrize("name", SAMPLING_CASES)
def test_sampling_matches_onnxruntime(name):
    """The uniform draws come from libstdc++'s default_random_engine, as in onnxruntime's Linux build."""
    case = dict(SAMPLING_CASES[name])
    attrs = {k: case.pop(k) for k in ("top_p", "temperature", "min_tokens_to_keep", "custom") if k in case}
    if "seed" in case:
        case["seed"] = i32(case["seed"])
    case, optional, more = _split(case | {"batch": 2})
    compare("Sampling", feeds_for("Sampling", **case, **optional), **attrs, **more)


def _sample(feeds, device, **attrs):
    return run_gpuops(generation_model("Sampling", feeds, **attrs), feeds, device)[0]


@ORT_LOADS_GENERATION_MODELS
@pytest.mark.parametrize("device", DEVICES)
def test_sampling_with_a_tiny_top_p_is_greedy(device):
    """top_p -> 0 keeps only the most likely token: the greedy search's sequences (onnxruntime's too)."""
    for extra in ({}, {"repetition_penalty": 1.3}):
        feeds = feeds_for("GreedySearch", batch=2, **extra)
        greedy = run_ort(generation_model("GreedySearch", feeds), feeds)[0]
        sampled = run_ort(generation_model("Sampling", feeds, top_p=1e-6), feeds)[0]
        np.testing.assert_array_equal(sampled, greedy)
        np.testing.assert_array_equal(_sample(feeds, device, top_p=1e-6), greedy)
        np.testing.assert_array_equal(_sample(feeds, device, top_p=1e-6, custom=1), greedy)
        # without filtering (top_p 1), a very low temperature sharpens the distribution to its argmax
        np.testing.assert_array_equal(_sample(feeds, device, top_p=1.0, temperature=1e-3), greedy)


@pytest.mark.parametrize("device", DEVICES)
def test_sampling_is_seeded_and_stays_in_the_allowed_set(device):
    allowed = np.zeros(VOCAB, np.int32)
    allowed[[1, 2, 8, 11, 13, 17, 20]] = 1
    feeds = feeds_for("Sampling", batch=2, max_length=14, vocab_mask=allowed, seed=i32(42))
    attrs = {"top_p": 0.9, "temperature": 2.0}
    first = _sample(feeds, device, **attrs)
    np.testing.assert_array_equal(_sample(feeds, device, **attrs), first)  # the same seed, the same draws
    generated = first[:, 4:]
    assert np.isin(generated, np.flatnonzero(allowed)).all(), generated
    other = _sample(feeds | {"seed": i32(7)}, device, **attrs)
    assert not np.array_equal(other, first)  # 20 draws from a spread distribution
    if device == "cuda":
        np.testing.assert_array_equal(first, _sample(feeds, "cpu", **attrs))


@ORT_LOADS_GENERATION_MODELS
def test_sampling_presence_penalty_bars_the_masked_tokens():
    """presence_mask / presence_penalty (custom sampling) lower the masked tokens' scores: with a large
    penalty they are never chosen, as if vocab_mask excluded them (onnxruntime's CPU kernel subtracts
    the whole penalty from the first score only, so it is no oracle here)."""
    barred = np.zeros(VOCAB, np.int32)
    barred[[7, 9, 11, 20]] = 1
    greedy = feeds_for("GreedySearch", batch=2, vocab_mask=1 - barred)
    want = run_ort(generation_model("GreedySearch", greedy), greedy)[0]
    feeds = feeds_for("Sampling", batch=2, presence_mask=np.stack([barred, barred]), seed=i32(1))
    for device in DEVICES:
        got = _sample(feeds, device, top_p=1e-6, custom=1, presence_penalty=1e4)
        np.testing.assert_array_equal(got, want)


def test_sampling_filtered_logits_output():
    """The optional second output: the last step's scores after top-p filtering."""
    feeds = feeds_for("Sampling", seed=i32(1))
    model = generation_model("Sampling", feeds, ("sequences", "filtered_logits"), top_p=0.5, filter_value=-1e20,
                             eos_token_id=VOCAB - 1)
    sequences, filtered = run_gpuops(model, feeds, "cpu")
    assert filtered.shape == (1, VOCAB)
    kept = filtered[0] > -1e20
    assert 1 <= kept.sum() < VOCAB and kept[sequences[0, -1]]


# -- bad input -------------------------------------------------------------------------------------

def _error(model, feeds, device="cpu"):
    with pytest.raises(GpuopsError) as e:
        run_gpuops(model, feeds, device)
    return str(e.value)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_raise_errors_naming_the_node(device):
    feeds = feeds_for("BeamSearch", num_beams=3)
    cases = [
        (generation_model("BeamSearch", feeds, decoder=None), feeds, "'decoder' graph attribute is required"),
        (generation_model("BeamSearch", feeds), feeds | {"max_length": i32(4)}, "max_length (4)"),
        (generation_model("BeamSearch", feeds), feeds | {"num_return_sequences": i32(4)}, "num_return_sequences (4)"),
        (generation_model("BeamSearch", feeds), feeds | {"input_ids": PROMPTS[1] + VOCAB},
         ("out of range", "token ids must lie")),
        (generation_model("BeamSearch", feeds, model_type=2), feeds, "model_type 2"),
    ]
    vm = feeds_for("GreedySearch", vocab_mask=np.ones(VOCAB + 1, np.int32))
    cases.append((generation_model("GreedySearch", vm), vm, "vocab_mask must have the decoder's vocabulary size"))
    am = feeds_for("GreedySearch", attention_mask=np.ones((1, 3), np.int32))
    cases.append((generation_model("GreedySearch", am), am, "attention_mask must have shape [1, 4]"))
    no_eos = generation_model("BeamSearch", feeds)
    no_eos.graph.node[0].attribute.remove(next(a for a in no_eos.graph.node[0].attribute if a.name == "eos_token_id"))
    cases.append((no_eos, feeds, "eos_token_id and pad_token_id attributes are required"))
    wrong = onnx.GraphProto.FromString(DECODER.SerializeToString())
    wrong.input[1].name = "positions"
    for n in wrong.node:
        n.input[:] = ["positions" if i == "position_ids" else i for i in n.input]
    cases.append((generation_model("GreedySearch", feeds_for("GreedySearch"), decoder=wrong), feeds_for("GreedySearch"),
                  "inputs must start with"))
    for model, f, message in cases:
        text = _error(model, f, device)
        messages = (message,) if isinstance(message, str) else message
        assert any(m in text for m in messages) and model.graph.node[0].name in text, text
