"""Small float32 models in the shapes the torch exporters write, built with onnx.helper: an MLP, a CNN
with BatchNormalization and residuals, a depthwise CNN with HardSwish and squeeze-excitation, a
BERT-like encoder with an attention mask, a GPT-like decoder with past keys / values and a ViT-like
patch embedding. Hidden sizes are tiny so that every tool variant runs in a fraction of a second.

Each builder takes ``batch``: a symbolic name (the dynamic form, as exporters write with dynamic
axes) or an int (the static-shape form), and returns a :class:`Zoo` entry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEQ, PAST = 5, 3  # sequence lengths of the transformer feeds
VOCAB, HIDDEN, HEADS, MAX_POS = 24, 16, 2, 16


@dataclass
class Zoo:
    name: str
    model: onnx.ModelProto
    feeds: Callable[[int, np.random.Generator], dict]  # batch size -> example feeds
    model_type: str | None  # onnxruntime.transformers.optimizer model type(s) that apply


class Graph:
    """A graph under construction: named initializers (seeded random weights) and nodes."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def const(self, value, prefix="c") -> str:
        n = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def weight(self, *shape, scale=None, prefix="w") -> str:
        scale = 1 / math.sqrt(shape[0] if len(shape) > 1 else 4) if scale is None else scale
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), prefix)

    def op(self, op_type, *inputs, outputs=1, domain="", **attrs):
        outs = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.name(op_type), domain=domain,
                                           **attrs))
        return outs[0] if outputs == 1 else outs

    def output(self, value: str, name: str) -> None:
        """Name the value ``value`` as the graph output ``name``."""
        for node in self.nodes:
            node.input[:] = [name if i == value else i for i in node.input]
            node.output[:] = [name if o == value else o for o in node.output]

    def model(self, inputs, outputs, opset) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "zoo", inputs, outputs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8,
                                  producer_name="pytorch")
        onnx.checker.check_model(model)
        return model


def _io(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


# -- building blocks ----------------------------------------------------------------------------

def linear(g: Graph, x, n_in, n_out, gemm=False):
    """torch.nn.Linear: Gemm(transB=1) on 2-D input, else MatMul + Add."""
    if gemm:
        return g.op("Gemm", x, g.weight(n_out, n_in), g.weight(n_out, scale=0.1), transB=1)
    return g.op("Add", g.op("MatMul", x, g.weight(n_in, n_out)), g.weight(n_out, scale=0.1))


def conv_bn(g: Graph, x, c_in, c_out, k=3, stride=1, group=1, act="Relu"):
    y = g.op("Conv", x, g.weight(c_out, c_in // group, k, k, scale=1 / math.sqrt(c_in // group * k * k)),
             kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group)
    y = g.op("BatchNormalization", y, g.const(1 + 0.1 * g.rng.standard_normal(c_out).astype(np.float32)),
             g.weight(c_out, scale=0.1), g.weight(c_out, scale=0.1),
             g.const((0.5 + g.rng.random(c_out)).astype(np.float32)), epsilon=1e-5)
    return g.op(act, y) if act else y


def layer_norm(g: Graph, x, d, opset):
    """LayerNormalization as exporters write it: the node at opset >= 17, else the decomposition."""
    scale, bias = g.const((1 + 0.1 * g.rng.standard_normal(d)).astype(np.float32)), g.weight(d, scale=0.1)
    if opset >= 17:
        return g.op("LayerNormalization", x, scale, bias, axis=-1, epsilon=1e-5)
    mean = g.op("ReduceMean", x, axes=[-1])
    d_ = g.op("Sub", x, mean)
    var = g.op("ReduceMean", g.op("Pow", d_, g.const(np.float32(2))), axes=[-1])
    std = g.op("Sqrt", g.op("Add", var, g.const(np.float32(1e-5))))
    return g.op("Add", g.op("Mul", g.op("Div", d_, std), scale), bias)


def gelu(g: Graph, x):
    """Gelu as torch exports it at these opsets: x * 0.5 * (1 + erf(x / sqrt 2))."""
    e = g.op("Erf", g.op("Div", x, g.const(np.float32(math.sqrt(2)))))
    return g.op("Mul", g.op("Mul", x, g.op("Add", e, g.const(np.float32(1)))), g.const(np.float32(0.5)))


def quick_gelu(g: Graph, x):
    """CLIP's activation: x * sigmoid(1.702 x)."""
    return g.op("Mul", x, g.op("Sigmoid", g.op("Mul", x, g.const(np.float32(1.702)))))


def _split_heads(g: Graph, x, d, key=False, seq=0):
    """(B, S, D) -> (B, N, S, h), or (B, N, h, S) for keys; ``seq``: the Reshape's sequence entry (0 or
    -1, as the model's view() call exports)."""
    r = g.op("Reshape", x, g.const(np.array([0, seq, HEADS, d // HEADS], np.int64)))
    return g.op("Transpose", r, perm=[0, 2, 3, 1] if key else [0, 2, 1, 3])


def attention(g: Graph, x, d, mask_add=None, past=None, opset=17):
    """BERT / GPT style self-attention: three projections, Q K^T / sqrt(h) (+ additive mask),
    softmax, V; with ``past`` (2, B, N, P, h) the keys / values are appended and the present returned
    (tests/contrib/test_generation.py builds its decoders with it)."""
    q = _split_heads(g, linear(g, x, d, d), d)
    k = _split_heads(g, linear(g, x, d, d), d, key=past is None)
    v = _split_heads(g, linear(g, x, d, d), d)
    present = None
    if past is not None:
        pk, pv = g.op("Split", past, outputs=2, axis=0, **({"num_outputs": 2} if opset >= 18 else {}))
        first = g.const(np.array([0], np.int64))
        pk, pv = g.op("Squeeze", pk, first), g.op("Squeeze", pv, first)
        k = g.op("Concat", pk, k, axis=-2)
        v = g.op("Concat", pv, v, axis=-2)
        present = g.op("Concat", g.op("Unsqueeze", k, g.const(np.array([0], np.int64))),
                       g.op("Unsqueeze", v, g.const(np.array([0], np.int64))), axis=0)
        k = g.op("Transpose", k, perm=[0, 1, 3, 2])
    s = g.op("Div", g.op("MatMul", q, k), g.const(np.float32(math.sqrt(d // HEADS))))
    if mask_add is not None:
        s = g.op("Add", s, mask_add)
    p = g.op("Softmax", s, axis=-1)
    o = g.op("Transpose", g.op("MatMul", p, v), perm=[0, 2, 1, 3])
    o = g.op("Reshape", o, g.const(np.array([0, 0, d], np.int64)))
    return linear(g, o, d, d), present


def bert_mask(g: Graph, mask):
    """(B, S) 0/1 int64 -> the additive (B, 1, 1, S) mask (1 - m) * -10000, as BERT exports it."""
    m = g.op("Unsqueeze", g.op("Unsqueeze", mask, g.const(np.array([1], np.int64))), g.const(np.array([2], np.int64)))
    m = g.op("Cast", m, to=TensorProto.FLOAT)
    return g.op("Mul", g.op("Sub", g.const(np.float32(1)), m), g.const(np.float32(-10000)))


# -- the zoo ------------------------------------------------------------------------------------

def mlp(batch) -> Zoo:
    g = Graph(1)
    h = g.op("Relu", linear(g, "x", 12, 24, gemm=True))
    h = g.op("LeakyRelu", linear(g, h, 24, 24, gemm=True), alpha=0.1)
    h = g.op("Sigmoid", linear(g, h, 24, 16, gemm=True))
    g.output(g.op("Softmax", linear(g, h, 16, 10, gemm=True), axis=-1), "probs")
    model = g.model([_io("x", TensorProto.FLOAT, [batch, 12])], [_io("probs", TensorProto.FLOAT, [batch, 10])], 17)
    return Zoo("mlp", model, lambda b, rng: {"x": rng.standard_normal((b, 12)).astype(np.float32)}, None)


def _image_feeds(b, rng):
    return {"pixels": rng.standard_normal((b, 3, 16, 16)).astype(np.float32)}


def cnn(batch) -> Zoo:
    g = Graph(2)
    x = conv_bn(g, "pixels", 3, 8)
    y = conv_bn(g, conv_bn(g, x, 8, 8), 8, 8, act=None)
    x = g.op("Relu", g.op("Add", y, x))  # residual
    x = g.op("MaxPool", x, kernel_shape=[2, 2], strides=[2, 2])
    x = conv_bn(g, x, 8, 16, stride=2)
    y = conv_bn(g, conv_bn(g, x, 16, 16), 16, 16, act=None)
    x = g.op("Relu", g.op("Add", x, y))
    x = g.op("AveragePool", x, kernel_shape=[2, 2], strides=[1, 1])
    x = g.op("Flatten", g.op("GlobalAveragePool", x), axis=1)
    g.output(linear(g, x, 16, 10, gemm=True), "logits")
    model = g.model([_io("pixels", TensorProto.FLOAT, [batch, 3, 16, 16])],
                    [_io("logits", TensorProto.FLOAT, [batch, 10])], 17)
    return Zoo("cnn", model, _image_feeds, None)


def depthwise_cnn(batch) -> Zoo:
    g = Graph(3)
    x = conv_bn(g, "pixels", 3, 8, stride=2, act="HardSwish")
    y = conv_bn(g, x, 8, 8, group=8, act="HardSwish")  # depthwise
    se = g.op("GlobalAveragePool", y)  # squeeze-excitation
    se = g.op("Relu", g.op("Conv", se, g.weight(4, 8, 1, 1), g.weight(4, scale=0.1), kernel_shape=[1, 1]))
    se = g.op("HardSigmoid", g.op("Conv", se, g.weight(8, 4, 1, 1), g.weight(8, scale=0.1), kernel_shape=[1, 1]),
              alpha=1 / 6, beta=0.5)
    y = conv_bn(g, g.op("Mul", y, se), 8, 8, k=1, act=None)  # pointwise
    x = g.op("Add", x, y)
    x = conv_bn(g, x, 8, 16, k=1, act="HardSwish")
    x = g.op("Flatten", g.op("GlobalAveragePool", x), axis=1)
    g.output(linear(g, g.op("HardSwish", linear(g, x, 16, 16, gemm=True)), 16, 10, gemm=True), "logits")
    model = g.model([_io("pixels", TensorProto.FLOAT, [batch, 3, 16, 16])],
                    [_io("logits", TensorProto.FLOAT, [batch, 10])], 17)
    return Zoo("depthwise_cnn", model, _image_feeds, None)


def _token_feeds(b, rng, past=False):
    feeds = {"input_ids": rng.integers(0, VOCAB, (b, SEQ)).astype(np.int64)}
    total = SEQ + (PAST if past else 0)
    mask = np.ones((b, total), np.int64)
    mask[-1, total - 2:] = 0 if b > 1 else 1  # the last sequence of a batch is padded
    feeds["attention_mask"] = mask
    if past:
        for i in range(2):
            feeds[f"past_{i}"] = rng.standard_normal((2, b, HEADS, PAST, HIDDEN // HEADS)).astype(np.float32)
    else:
        feeds["token_type_ids"] = rng.integers(0, 2, (b, SEQ)).astype(np.int64)
    return feeds


def bert(batch, layers=2, opset=14) -> Zoo:
    g = Graph(4)
    d = HIDDEN
    word = g.op("Gather", g.weight(VOCAB, d, scale=0.5), "input_ids")
    seg = g.op("Gather", g.weight(2, d, scale=0.5), "token_type_ids")
    seq_len = g.op("Gather", g.op("Shape", "input_ids"), g.const(np.int64(1)), axis=0)
    pos_ids = g.op("Slice", g.const(np.arange(MAX_POS, dtype=np.int64)[None]), g.const(np.array([0], np.int64)),
                   g.op("Unsqueeze", seq_len, g.const(np.array([0], np.int64))), g.const(np.array([1], np.int64)),
                   g.const(np.array([1], np.int64)))
    pos = g.op("Gather", g.weight(MAX_POS, d, scale=0.5), pos_ids)
    x = layer_norm(g, g.op("Add", g.op("Add", word, seg), pos), d, opset)
    mask = bert_mask(g, "attention_mask")
    for _ in range(layers):
        a, _ = attention(g, x, d, mask)
        x = layer_norm(g, g.op("Add", a, x), d, opset)
        f = linear(g, gelu(g, linear(g, x, d, 4 * d)), 4 * d, d)
        x = layer_norm(g, g.op("Add", f, x), d, opset)
    g.output(x, "last_hidden_state")
    tokens = [batch, "sequence"] if isinstance(batch, str) else [batch, SEQ]
    model = g.model([_io(n, TensorProto.INT64, tokens) for n in ("input_ids", "attention_mask", "token_type_ids")],
                    [_io("last_hidden_state", TensorProto.FLOAT, tokens + [d])], opset)
    return Zoo("bert", model, lambda b, rng: _token_feeds(b, rng), "bert")


def conv1d(g: Graph, x, n_in, n_out):
    """transformers' GPT-2 Conv1D: addmm(bias, x.view(-1, n_in), weight).view(*x.shape[:-1], n_out)."""
    y = g.op("Gemm", g.op("Reshape", x, g.const(np.array([-1, n_in], np.int64))), g.weight(n_in, n_out),
             g.weight(n_out, scale=0.1))
    lead = g.op("Slice", g.op("Shape", x), g.const(np.array([0], np.int64)), g.const(np.array([-1], np.int64)))
    return g.op("Reshape", y, g.op("Concat", lead, g.const(np.array([n_out], np.int64)), axis=0))


def _size(g: Graph, x, axis):
    """x.size(axis) as torch exported it at these opsets: Squeeze(Slice(Shape(x)))."""
    sl = g.op("Slice", g.op("Shape", x), g.const(np.array([axis], np.int64)), g.const(np.array([axis + 1], np.int64)))
    return g.op("Squeeze", sl, g.const(np.array([0], np.int64)))


def gpt2_attention(g: Graph, x, d, past, mask_add, causal_table):
    """transformers' GPT2Attention with a cache: c_attn split in three, keys / values appended to the
    past (2, B, N, P, h), present = stack(key, value), scores masked by the causal buffer
    (Where(bias[:, :, ns - nd:ns, :ns], w, -1e4)) plus the additive padding mask, c_proj."""
    q, k, v = g.op("Split", conv1d(g, x, d, 3 * d), g.const(np.array([d, d, d], np.int64)), outputs=3, axis=2)
    q, k, v = (_split_heads(g, t, d) for t in (q, k, v))
    pk, pv = g.op("Split", past, g.const(np.array([1, 1], np.int64)), outputs=2, axis=0)
    first = g.const(np.array([0], np.int64))
    k = g.op("Concat", g.op("Squeeze", pk, first), k, axis=-2)
    v = g.op("Concat", g.op("Squeeze", pv, first), v, axis=-2)
    present = g.op("Concat", g.op("Unsqueeze", k, first), g.op("Unsqueeze", v, first), axis=0)
    w = g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2]))
    w = g.op("Div", w, g.const(np.float32(math.sqrt(d // HEADS))))
    nd, ns = _size(g, w, 2), _size(g, w, 3)
    rows = g.op("Slice", causal_table, g.op("Unsqueeze", g.op("Sub", ns, nd), first), g.op("Unsqueeze", ns, first),
                g.const(np.array([2], np.int64)))
    keep = g.op("Slice", rows, first, g.op("Unsqueeze", ns, first), g.const(np.array([3], np.int64)))
    w = g.op("Where", g.op("Cast", keep, to=TensorProto.BOOL), w, g.const(np.float32(-1e4)))
    p = g.op("Softmax", g.op("Add", w, mask_add), axis=-1)
    o = g.op("Transpose", g.op("MatMul", p, v), perm=[0, 2, 1, 3])
    o = g.op("Reshape", o, g.const(np.array([0, 0, d], np.int64)))
    return conv1d(g, o, d, d), present


def gpt(batch, layers=2, opset=18) -> Zoo:
    """GPT-2 as transformers exports it with past keys / values (the shape onnxruntime's gpt2 fusion
    turns into Attention with past): pre-LN blocks, Conv1D projections (Reshape, Gemm, Reshape),
    causal self-attention over past + new tokens, a present per layer."""
    g = Graph(5)
    d = HIDDEN
    # positions continue after the past: past_length .. past_length + S - 1
    past_len = g.op("Gather", g.op("Shape", "past_0"), g.const(np.int64(3)), axis=0)
    seq_len = g.op("Gather", g.op("Shape", "input_ids"), g.const(np.int64(1)), axis=0)
    total = g.op("Add", past_len, seq_len)
    pos_ids = g.op("Unsqueeze", g.op("Range", past_len, total, g.const(np.int64(1))), g.const(np.array([0], np.int64)))
    x = g.op("Add", g.op("Gather", g.weight(VOCAB, d, scale=0.5), "input_ids"),
             g.op("Gather", g.weight(MAX_POS, d, scale=0.5), pos_ids))
    # the padding mask: attention_mask.view(batch, -1)[:, None, None, :], (1 - m) * -10000
    m = g.op("Reshape", "attention_mask", g.const(np.array([0, -1], np.int64)))
    m = g.op("Unsqueeze", g.op("Unsqueeze", m, g.const(np.array([1], np.int64))), g.const(np.array([2], np.int64)))
    mask = g.op("Mul", g.op("Sub", g.const(np.float32(1)), g.op("Cast", m, to=TensorProto.FLOAT)),
                g.const(np.float32(-10000)))
    causal = g.const(np.tril(np.ones((MAX_POS, MAX_POS), np.uint8))[None, None], "bias")
    for i in range(layers):
        a, present = gpt2_attention(g, layer_norm(g, x, d, opset), d, f"past_{i}", mask, causal)
        g.output(present, f"present_{i}")
        x = g.op("Add", x, a)
        f = conv1d(g, gelu(g, conv1d(g, layer_norm(g, x, d, opset), d, 4 * d)), 4 * d, d)
        x = g.op("Add", x, f)
    g.output(linear(g, layer_norm(g, x, d, opset), d, VOCAB), "logits")
    dyn = isinstance(batch, str)
    seq, past, tot = ("sequence", "past_sequence", "total_sequence") if dyn else (SEQ, PAST, SEQ + PAST)
    cache = [2, batch, HEADS, past, d // HEADS]
    inputs = [_io("input_ids", TensorProto.INT64, [batch, seq]), _io("attention_mask", TensorProto.INT64, [batch, tot])]
    inputs += [_io(f"past_{i}", TensorProto.FLOAT, cache) for i in range(layers)]
    outputs = ([_io("logits", TensorProto.FLOAT, [batch, seq, VOCAB])]
               + [_io(f"present_{i}", TensorProto.FLOAT, [2, batch, HEADS, tot, d // HEADS]) for i in range(layers)])
    return Zoo("gpt", g.model(inputs, outputs, opset), lambda b, rng: _token_feeds(b, rng, past=True), "gpt2")


def vit(batch, layers=2, opset=18) -> Zoo:
    """ViT: 4x4 patches by a strided Conv, a class token, learned positions, pre-LN blocks (the first
    with GELU, the next with CLIP's QuickGelu), a head."""
    g = Graph(6)
    d, patches = HIDDEN, 16
    x = g.op("Conv", "pixels", g.weight(d, 3, 4, 4, scale=0.2), g.weight(d, scale=0.1), kernel_shape=[4, 4],
             strides=[4, 4])
    x = g.op("Transpose", g.op("Reshape", x, g.const(np.array([0, d, -1], np.int64))), perm=[0, 2, 1])
    batch_dim = g.op("Gather", g.op("Shape", "pixels"), g.const(np.array([0], np.int64)), axis=0)
    cls = g.op("Expand", g.weight(1, 1, d, scale=0.5),
               g.op("Concat", batch_dim, g.const(np.array([1, 1], np.int64)), axis=0))
    x = g.op("Add", g.op("Concat", cls, x, axis=1), g.weight(1, patches + 1, d, scale=0.5))
    for i in range(layers):
        a, _ = attention(g, layer_norm(g, x, d, opset), d)
        x = g.op("Add", x, a)
        act = gelu if i == 0 else quick_gelu
        f = linear(g, act(g, linear(g, layer_norm(g, x, d, opset), d, 4 * d)), 4 * d, d)
        x = g.op("Add", x, f)
    x = g.op("Gather", layer_norm(g, x, d, opset), g.const(np.int64(0)), axis=1)
    g.output(linear(g, x, d, 10, gemm=True), "logits")
    model = g.model([_io("pixels", TensorProto.FLOAT, [batch, 3, 16, 16])],
                    [_io("logits", TensorProto.FLOAT, [batch, 10])], opset)
    return Zoo("vit", model, _image_feeds, "vit")


# -- encoder-decoder: T5 (RMSNorm, bucketed relative position bias, cross-attention caches) ------

T5_BUCKETS, T5_MAX_DISTANCE = 32, 128  # the values onnxruntime's RelativePositionBias fusion expects
FMIN = -10000.0  # masks' value (transformers writes float32's minimum: quantized, that scale loses everything else)


def _i64(*values):
    return np.array(values, np.int64)


def rms_norm(g: Graph, x, d):
    """T5LayerNorm: weight * x / sqrt(mean(x^2) + eps), as exported (Pow, ReduceMean, Add, Sqrt, Div)."""
    var = g.op("ReduceMean", g.op("Pow", x, g.const(np.float32(2))), axes=[-1], keepdims=1)
    inv = g.op("Div", g.const(np.float32(1)), g.op("Sqrt", g.op("Add", var, g.const(np.float32(1e-6)))))
    return g.op("Mul", g.const((1 + 0.1 * g.rng.standard_normal(d)).astype(np.float32)), g.op("Mul", x, inv))


def _dim(g: Graph, x, axis):
    return g.op("Gather", g.op("Shape", x), g.const(np.int64(axis)), axis=0)


def _unsq(g: Graph, x, axis=0):
    return g.op("Unsqueeze", x, g.const(_i64(axis)))


def t5_position_bias(g: Graph, query_length, key_length, bidirectional):
    """transformers' T5Attention.compute_bias: the bucket of every (query, key) distance, looked up
    in a (buckets, heads) embedding -> (1, heads, query_length, key_length)."""
    one = g.const(np.int64(1))
    keys = _unsq(g, g.op("Range", g.const(np.int64(0)), key_length, one), 0)
    rel = g.op("Sub", keys, _unsq(g, g.op("Range", g.const(np.int64(0)), query_length, one), 1))
    n = T5_BUCKETS // 2 if bidirectional else T5_BUCKETS
    if bidirectional:
        offset = g.op("Mul", g.op("Cast", g.op("Greater", rel, g.const(np.int64(0))), to=TensorProto.INT64),
                      g.const(np.int64(n)))
        rel = g.op("Abs", rel)
    else:
        zeros = g.op("ConstantOfShape", g.op("Shape", rel), value=numpy_helper.from_array(_i64(0)))
        rel = g.op("Neg", g.op("Min", rel, zeros))
    exact = n // 2
    large = g.op("Div", g.op("Log", g.op("Div", g.op("Cast", rel, to=TensorProto.FLOAT), g.const(np.float32(exact)))),
                 g.const(np.float32(math.log(T5_MAX_DISTANCE / exact))))
    large = g.op("Add", g.op("Cast", g.op("Mul", large, g.const(np.float32(n - exact))), to=TensorProto.INT64),
                 g.const(np.int64(exact)))
    large = g.op("Min", large, g.op("ConstantOfShape", g.op("Shape", large),
                                    value=numpy_helper.from_array(_i64(n - 1))))
    bucket = g.op("Where", g.op("Less", rel, g.const(np.int64(exact))), rel, large)
    if bidirectional:
        bucket = g.op("Add", offset, bucket)
    values = g.op("Gather", g.weight(T5_BUCKETS, HEADS, scale=1.0), bucket)  # (q, k, heads)
    return _unsq(g, g.op("Transpose", values, perm=[2, 0, 1]), 0)


def extended_mask(g: Graph, mask):
    """transformers' get_extended_attention_mask: (B, L) 0/1 -> (1 - m[:, None, None, :]) * FMIN."""
    m = g.op("Cast", _unsq(g, _unsq(g, mask, 1), 2), to=TensorProto.FLOAT)
    return g.op("Mul", g.op("Sub", g.const(np.float32(1)), m), g.const(np.float32(FMIN)))


def _t5_attend(g: Graph, h, q, k_t, v, bias, d):
    """softmax(q k^T + bias) v (T5 does not scale), merged back to (B, S, d) and projected."""
    p = g.op("Softmax", g.op("Add", g.op("MatMul", q, k_t), bias), axis=-1)
    o = g.op("Transpose", g.op("MatMul", p, v), perm=[0, 2, 1, 3])
    shape = g.op("Concat", _unsq(g, _dim(g, h, 0)), g.const(_i64(-1)), g.const(_i64(d)), axis=0)
    return g.op("MatMul", g.op("Reshape", o, shape), g.weight(d, d))


def _t5_ff(g: Graph, x, d):
    h = rms_norm(g, x, d)
    return g.op("Add", x, g.op("MatMul", g.op("Relu", g.op("MatMul", h, g.weight(d, 2 * d))), g.weight(2 * d, d)))


def t5_encoder(batch, layers=1, opset=17) -> Zoo:
    """T5's encoder as transformers exports it: pre-RMSNorm blocks without biases, the position bias
    (bidirectional buckets) computed in the first layer, sliced to the queries, plus the extended
    padding mask, and reused by every layer."""
    g = Graph(7)
    d = HIDDEN
    x = g.op("Gather", g.weight(VOCAB, d, scale=0.5), "input_ids")
    seq = _dim(g, "input_ids", 1)
    bias = t5_position_bias(g, seq, seq, bidirectional=True)
    bias = g.op("Slice", bias, _unsq(g, g.op("Neg", seq)), g.const(_i64(2 ** 62)), g.const(_i64(2)))
    mask = g.op("Slice", extended_mask(g, "attention_mask"), g.const(_i64(0)), _unsq(g, seq), g.const(_i64(3)))
    bias = g.op("Add", bias, mask)
    for _ in range(layers):
        h = rms_norm(g, x, d)
        q, k, v = (_split_heads(g, g.op("MatMul", h, g.weight(d, d)), d, key=i == 1, seq=-1) for i in range(3))
        x = g.op("Add", x, _t5_attend(g, h, q, k, v, bias, d))
        x = _t5_ff(g, x, d)
    g.output(rms_norm(g, x, d), "last_hidden_state")
    tokens = [batch, "sequence"] if isinstance(batch, str) else [batch, SEQ]
    model = g.model([_io(n, TensorProto.INT64, tokens) for n in ("input_ids", "attention_mask")],
                    [_io("last_hidden_state", TensorProto.FLOAT, tokens + [d])], opset)

    def feeds(b, rng):
        f = _token_feeds(b, rng)
        del f["token_type_ids"]
        return f
    return Zoo("t5_encoder", model, feeds, "t5")


def t5_decoder(batch, layers=1, opset=17) -> Zoo:
    """T5's decoder with caches, as onnxruntime's T5 export names them: per layer the self-attention
    cache past_key_self_i / past_value_self_i (B, N, P, h) extended into present_key_self_i / ...,
    and the encoder's keys / values past_key_cross_i / past_value_cross_i (B, N, L, h) attended with
    encoder_attention_mask. The self-attention bias is the unidirectional position bias over all
    P + S positions, its last S rows, plus a causal mask; cross-attention adds the padding mask to zeros."""
    g = Graph(8)
    d = HIDDEN
    x = g.op("Gather", g.weight(VOCAB, d, scale=0.5), "input_ids")
    seq, past = _dim(g, "input_ids", 1), _dim(g, "past_key_self_0", 2)
    total = g.op("Add", past, seq)
    bias = t5_position_bias(g, total, total, bidirectional=False)
    bias = g.op("Slice", bias, _unsq(g, past), _unsq(g, total), g.const(_i64(2)))
    ones = g.op("ConstantOfShape", g.op("Concat", _unsq(g, total), _unsq(g, total), axis=0),
                value=numpy_helper.from_array(np.array([1], np.float32)))
    causal = g.op("Slice", g.op("Trilu", ones, upper=0), _unsq(g, past), _unsq(g, total), g.const(_i64(0)))
    self_bias = g.op("Add", bias, g.op("Mul", g.op("Sub", g.const(np.float32(1)), causal), g.const(np.float32(FMIN))))
    enc_len = _dim(g, "encoder_attention_mask", 1)
    zeros = g.op("ConstantOfShape", g.op("Concat", g.const(_i64(1, HEADS)), _unsq(g, seq), _unsq(g, enc_len), axis=0),
                 value=numpy_helper.from_array(np.array([0], np.float32)))
    cross_bias = g.op("Add", zeros, extended_mask(g, "encoder_attention_mask"))
    for i in range(layers):
        h = rms_norm(g, x, d)
        q, k, v = (_split_heads(g, g.op("MatMul", h, g.weight(d, d)), d, seq=-1) for _ in range(3))
        k = g.op("Concat", f"past_key_self_{i}", k, axis=2)
        v = g.op("Concat", f"past_value_self_{i}", v, axis=2)
        g.output(k, f"present_key_self_{i}")
        g.output(v, f"present_value_self_{i}")
        k_t = g.op("Transpose", f"present_key_self_{i}", perm=[0, 1, 3, 2])
        a = _t5_attend(g, h, q, k_t, f"present_value_self_{i}", self_bias, d)
        x = g.op("Add", x, a)
        h = rms_norm(g, x, d)
        q = _split_heads(g, g.op("MatMul", h, g.weight(d, d)), d, seq=-1)
        a = _t5_attend(g, h, q, g.op("Transpose", f"past_key_cross_{i}", perm=[0, 1, 3, 2]), f"past_value_cross_{i}",
                       cross_bias, d)
        x = g.op("Add", x, a)
        x = _t5_ff(g, x, d)
    g.output(g.op("MatMul", rms_norm(g, x, d), g.weight(d, VOCAB)), "logits")
    dyn = isinstance(batch, str)
    s, p, t, e = ("sequence", "past_sequence", "total_sequence", "encoder_sequence") if dyn else \
        (SEQ, PAST, SEQ + PAST, SEQ)
    h = d // HEADS
    inputs = [_io("input_ids", TensorProto.INT64, [batch, s]),
              _io("encoder_attention_mask", TensorProto.INT64, [batch, e])]
    outputs = [_io("logits", TensorProto.FLOAT, [batch, s, VOCAB])]
    for i in range(layers):
        inputs += [_io(f"past_{kv}_self_{i}", TensorProto.FLOAT, [batch, HEADS, p, h]) for kv in ("key", "value")]
        inputs += [_io(f"past_{kv}_cross_{i}", TensorProto.FLOAT, [batch, HEADS, e, h]) for kv in ("key", "value")]
        outputs += [_io(f"present_{kv}_self_{i}", TensorProto.FLOAT, [batch, HEADS, t, h]) for kv in ("key", "value")]

    def feeds(b, rng):
        f = {"input_ids": rng.integers(0, VOCAB, (b, SEQ)).astype(np.int64)}
        mask = np.ones((b, SEQ), np.int64)
        mask[-1, SEQ - 2:] = 0 if b > 1 else 1
        f["encoder_attention_mask"] = mask
        for i in range(layers):
            for kv in ("key", "value"):
                f[f"past_{kv}_self_{i}"] = rng.standard_normal((b, HEADS, PAST, h)).astype(np.float32)
                f[f"past_{kv}_cross_{i}"] = rng.standard_normal((b, HEADS, SEQ, h)).astype(np.float32)
        return f
    return Zoo("t5_decoder", g.model(inputs, outputs, opset), feeds, "t5")



# -- encoder-decoder: BART / Whisper (post-LN, scaled query, key projection without bias) -----

def _linear_t(g: Graph, x, n_in, n_out, bias=True):
    """torch.nn.Linear as the TorchScript exporter writes it on 3-D input: Add(bias, MatMul)."""
    y = g.op("MatMul", x, g.weight(n_in, n_out))
    return g.op("Add", g.weight(n_out, scale=0.1), y) if bias else y


def bart_attention(g: Graph, x, kv, d, mask_add=None, cache=None):
    """transformers' BartAttention / WhisperAttention: q_proj(x) * head_size**-0.5, k_proj without bias
    (Whisper's, which onnxruntime's bart fusion expects), keys / values from ``kv`` (cross-attention
    when it is not ``x``), an optional additive mask, out_proj. ``cache``: the names of the past key,
    past value (B, N, P, h) graph inputs and of the present key / value outputs they are extended into."""
    q = _split_heads(g, g.op("Mul", _linear_t(g, x, d, d), g.const(np.float32((d // HEADS) ** -0.5))), d, seq=-1)
    k = _linear_t(g, kv, d, d, bias=False)
    v = _split_heads(g, _linear_t(g, kv, d, d), d, seq=-1)
    if cache is None:
        k = _split_heads(g, k, d, key=True, seq=-1)
    else:
        past_k, past_v, present_k, present_v = cache
        g.output(g.op("Concat", past_k, _split_heads(g, k, d, seq=-1), axis=2), present_k)
        g.output(g.op("Concat", past_v, v, axis=2), present_v)
        k, v = g.op("Transpose", present_k, perm=[0, 1, 3, 2]), present_v
    s = g.op("MatMul", q, k)
    if mask_add is not None:
        s = g.op("Add", s, mask_add)
    o = g.op("Transpose", g.op("MatMul", g.op("Softmax", s, axis=-1), v), perm=[0, 2, 1, 3])
    return _linear_t(g, g.op("Reshape", o, g.const(_i64(0, -1, d))), d, d)


def _bart_embed(g: Graph, ids, d, opset, past=None):
    """Token embedding plus the learned positions past .. past + S - 1, LayerNorm'ed."""
    start = g.const(_i64(0)) if past is None else _unsq(g, past)
    end = _unsq(g, _dim(g, ids, 1) if past is None else g.op("Add", past, _dim(g, ids, 1)))
    pos = g.op("Slice", g.weight(MAX_POS, d, scale=0.5), start, end, g.const(_i64(0)))
    return layer_norm(g, g.op("Add", g.op("Gather", g.weight(VOCAB, d, scale=0.5), ids), pos), d, opset)


def bart(batch, layers=1, opset=17) -> Zoo:
    """A BART-like encoder-decoder in one graph: post-LN blocks; the encoder unmasked (as Whisper's,
    the shape onnxruntime's bart fusion takes for encoder attention); the decoder's self-attention
    with a cache (past_key_self_i / past_value_self_i (B, N, P, h) extended into present_*) and a
    causal mask over past + new tokens (a Where, as transformers' _make_causal_mask), and
    cross-attention on the encoder's output."""
    g = Graph(9)
    d = HIDDEN
    x = _bart_embed(g, "input_ids", d, opset)
    for _ in range(layers):
        x = layer_norm(g, g.op("Add", x, bart_attention(g, x, x, d)), d, opset)
        x = layer_norm(g, g.op("Add", x, _linear_t(g, gelu(g, _linear_t(g, x, d, 4 * d)), 4 * d, d)), d, opset)
    past = _dim(g, "past_key_self_0", 2)
    y = _bart_embed(g, "decoder_input_ids", d, opset, past)
    one = g.const(np.int64(1))
    queries = g.op("Range", g.const(np.int64(0)), _dim(g, "decoder_input_ids", 1), one)
    keys = g.op("Range", g.const(np.int64(0)), g.op("Add", past, _dim(g, "decoder_input_ids", 1)), one)
    visible = g.op("Less", _unsq(g, keys, 0), g.op("Add", _unsq(g, queries, 1), g.op("Add", past, one)))
    causal = g.op("Where", visible, g.const(np.float32(0)), g.const(np.float32(-10000)))
    for i in range(layers):
        cache = (f"past_key_self_{i}", f"past_value_self_{i}", f"present_key_self_{i}", f"present_value_self_{i}")
        y = layer_norm(g, g.op("Add", y, bart_attention(g, y, y, d, causal, cache)), d, opset)
        y = layer_norm(g, g.op("Add", y, bart_attention(g, y, x, d)), d, opset)
        y = layer_norm(g, g.op("Add", y, _linear_t(g, gelu(g, _linear_t(g, y, d, 4 * d)), 4 * d, d)), d, opset)
    g.output(g.op("MatMul", y, g.weight(d, VOCAB)), "logits")
    dyn = isinstance(batch, str)
    s, p, t = ("decoder_sequence", "past_sequence", "total_sequence") if dyn else (SEQ - 1, PAST, SEQ - 1 + PAST)
    h = d // HEADS
    inputs = [_io("input_ids", TensorProto.INT64, [batch, "sequence" if dyn else SEQ]),
              _io("decoder_input_ids", TensorProto.INT64, [batch, s])]
    outputs = [_io("logits", TensorProto.FLOAT, [batch, s, VOCAB])]
    for i in range(layers):
        inputs += [_io(f"past_{kv}_self_{i}", TensorProto.FLOAT, [batch, HEADS, p, h]) for kv in ("key", "value")]
        outputs += [_io(f"present_{kv}_self_{i}", TensorProto.FLOAT, [batch, HEADS, t, h]) for kv in ("key", "value")]
    model = g.model(inputs, outputs, opset)

    def feeds(b, rng):
        f = {"input_ids": rng.integers(0, VOCAB, (b, SEQ)).astype(np.int64),
             "decoder_input_ids": rng.integers(0, VOCAB, (b, SEQ - 1)).astype(np.int64)}
        for i in range(layers):
            for kv in ("key", "value"):
                f[f"past_{kv}_self_{i}"] = rng.standard_normal((b, HEADS, PAST, h)).astype(np.float32)
        return f
    return Zoo("bart", model, feeds, "bart")

BUILDERS = {"mlp": mlp, "cnn": cnn, "depthwise_cnn": depthwise_cnn, "bert": bert, "gpt": gpt, "vit": vit,
            "t5_encoder": t5_encoder, "t5_decoder": t5_decoder, "bart": bart}
