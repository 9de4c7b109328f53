"""Float32 error bounds for comparing two implementations of a corpus model.

The rule is :func:`gpuops.selftest.error_bounds`' (Higham's ``gamma_K``: a float32 sum of K terms is
off by at most ``gamma_K sum |a_i b_i|``, whatever the summation order, so any BLAS kernel, blocking
or FMA use is covered; a node adds ``gamma(K + NODE_ROUNDINGS)`` to the largest relative error of its
inputs), extended to what real models hold:

- ``If`` nodes are replaced by the branch the feeds take (:func:`flatten_ifs`), and onnxruntime reports
  every value of that flat graph: the shapes are the ones of this run (dynamic axes included), and
  the magnitudes of squashing functions' arguments are known;
- recurrences (``LSTM``/``GRU``/``RNN``): a step sums ``input_size + hidden_size`` products and two
  biases, and each step's error feeds the next, so a sequence of T steps counts
  ``T (input_size + hidden_size + 2 + NODE_ROUNDINGS)`` terms;
- the contrib ops the transformer optimizer writes count their chained sums (Attention: the QKV
  projection, a head's dot product, the softmax and the weighted sum over the keys; quantize_dynamic's
  QAttention the same after its exact integer projection);
- float16 values round with float16's unit roundoff; quantized values add one rounding step
  (:func:`error_bounds`), and DynamicQuantizeLSTM one per time step (it quantizes its input and hidden
  state to 8 bits at each step: onnxruntime's kernel does, and an implementation computing in float
  differs from it by that much).

Two implementations then differ by at most ``2 r max |exact|`` on an output (``r`` its bound). An output
made by a squashing function (Sigmoid, Softmax, HardSigmoid, Tanh) carries its argument's error as an
absolute error, scaled by the function's slope (at most 1): its tolerance is ``2 r max |argument|``,
plus :data:`SQUASH_ABS` for a value that one implementation computes as ``1 - q`` (onnxruntime's
Sigmoid near 0 is exact only to float32's absolute ``u``).

First-order bounds are relative to the exact values; where sums cancel (``x - mean`` in a LayerNorm,
random-sign weights) they hold relative to the largest value in practice, not by proof, as in
:mod:`gpuops.selftest`.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from .exact_int8 import for_onnxruntime
from ..selftest import EXACT_OPS, NODE_ROUNDINGS, UNIT_ROUNDOFF
from ..selftest import terms as selftest_terms

SQUASH_OPS = ("Sigmoid", "Softmax", "HardSigmoid", "Tanh")
SQUASH_ABS = 4 * UNIT_ROUNDOFF  # two results each within u of a value in [0, 1] (a sigmoid computed as 1 - q)
# ops between a squashing node and a graph output that keep an absolute error as it is (an average at most)
PASS_OPS = ("Identity", "Squeeze", "Unsqueeze", "Reshape", "Flatten", "Transpose", "Slice", "Gather", "ReduceMean")
RECURRENT_OPS = ("LSTM", "GRU", "RNN")
# not sums: integer and comparison ops whose results are exact, or element-wise float ops of bounded error
# beyond EXACT_OPS (a cast between float types rounds once, which NODE_ROUNDINGS covers)
EXTRA_EXACT = frozenset({"Cast", "CastLike", "GreaterOrEqual", "LessOrEqual", "Xor", "IsNaN", "IsInf",
                         "Trilu", "ScatterND", "ScatterElements", "OneHot"})


def _ort_values(model: onnx.ModelProto, feeds: dict, names: list[str]) -> dict:
    """``{name: value}`` of the named values of ``model``'s top-level graph, computed by onnxruntime
    with its graph optimizations off (the values as the graph writes them; int8 weights made unsigned
    where its int8 sums saturate: :mod:`gpuops.bench.exact_int8`)."""
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(for_onnxruntime(model))
    del m.graph.output[:]
    m.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return dict(zip(names, sess.run(names, feeds)))


def flatten_ifs(model: onnx.ModelProto, feeds: dict) -> onnx.ModelProto:
    """A copy of ``model`` whose ``If`` nodes are replaced by the branch these feeds take (conditions
    computed by onnxruntime; nested Ifs one level per round), branch outputs renamed through Identity:
    the computation that runs, as one flat graph whose every value onnxruntime can report."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    while True:
        ifs = [n for n in m.graph.node if n.op_type == "If"]
        if not ifs:
            return m
        conds = _ort_values(m, feeds, sorted({n.input[0] for n in ifs}))
        nodes = []
        for node in m.graph.node:
            if node.op_type != "If":
                nodes.append(node)
                continue
            taken = "then_branch" if bool(conds[node.input[0]]) else "else_branch"
            branch = next(a.g for a in node.attribute if a.name == taken)
            m.graph.initializer.extend(branch.initializer)
            nodes.extend(branch.node)
            nodes.extend(helper.make_node("Identity", [b.name], [y]) for b, y in zip(branch.output, node.output))
        del m.graph.node[:]
        m.graph.node.extend(nodes)


def observe(model: onnx.ModelProto, feeds: dict) -> tuple[onnx.ModelProto, dict]:
    """``(flat, values)``: the flattened ``model`` (:func:`flatten_ifs`) and every value of it for these
    feeds, by onnxruntime: the shapes the bounds need and the magnitudes of squashing functions'
    arguments."""
    flat = flatten_ifs(model, feeds)
    graph_inputs = {i.name for i in flat.graph.input}
    names = list(dict.fromkeys(y for n in flat.graph.node for y in n.output if y and y not in graph_inputs))
    values = _ort_values(flat, feeds, names)
    values.update(feeds)
    return flat, values


def _node_terms(node, shapes: dict) -> int:
    """Terms summed per output element, for the ops the corpus holds beyond :func:`gpuops.selftest.terms`'s."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def shape(i):
        s = shapes.get(node.input[i]) if len(node.input) > i and node.input[i] else None
        if s is None:
            raise ValueError(f"node {node.name or node.output[0]!r} ({node.op_type}): input {i} has no shape")
        return s

    op = node.op_type
    if op in RECURRENT_OPS:
        x, w, r = shape(0), shape(1), shape(2)
        steps = x[1] if attrs.get("layout", 0) else x[0]
        return steps * (w[2] + r[2] + 2 + NODE_ROUNDINGS)
    if op == "DynamicQuantizeLSTM":  # W [directions, input, 4 hidden], R [directions, hidden, 4 hidden]
        return shape(0)[0] * (shape(1)[1] + shape(2)[1] + 2 + NODE_ROUNDINGS)
    if op == "Attention":  # QKV projection, Q.K over a head, softmax and weighted sum over the keys
        total = shape(0)[1] + (shape(4)[3] if len(node.input) > 4 and node.input[4] else 0)
        return shape(1)[0] + 1 + shape(1)[1] // 3 // attrs["num_heads"] + 2 * total
    if op == "QAttention":  # Attention with an integer QKV projection (exact): its scale and bias, then the same
        total = shape(0)[1] + (shape(8)[3] if len(node.input) > 8 and node.input[8] else 0)
        return 2 + shape(1)[1] // 3 // attrs["num_heads"] + 2 * total
    if op in ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "EmbedLayerNormalization",
              "QEmbedLayerNormalization"):
        return shape(2)[-1] if op.endswith("EmbedLayerNormalization") else shape(0)[-1]
    if op in ("FusedMatMul", "MatMulInteger", "MatMulIntegerToFloat", "QGemm", "QLinearMatMul", "DynamicQuantizeMatMul"):
        return 0 if "Integer" in op and op != "MatMulIntegerToFloat" else shape(0)[-1]
    if op in ("TreeEnsembleRegressor", "TreeEnsembleClassifier"):  # one leaf value per tree, summed
        return len(set(attrs.get("nodes_treeids", []))) + 1
    if op == "TreeEnsemble":
        return len(attrs.get("tree_roots", [])) + 1
    if op in ("LinearClassifier", "LinearRegressor"):  # a dot product over the features, an intercept
        return shape(0)[-1] + 1
    if op == "Normalizer":  # the norm sums a row
        return shape(0)[-1]
    if op in ("QLinearConv", "ConvInteger", "QLinearGlobalAveragePool", "QLinearAdd", "QLinearMul"):
        return 0  # integer sums are exact; the requantization's rounding is the output's step
    return selftest_terms(node, shapes)


def _unit_roundoff(value) -> float:
    """The unit roundoff of the float type a value is stored in (float32's for wider and integer types)."""
    dtype = np.asarray(value).dtype
    return 2.0 ** -11 if dtype == np.float16 else 2.0 ** -8 if dtype.name == "bfloat16" else UNIT_ROUNDOFF


def _step(value) -> float:
    """A quantized (8- or 16-bit integer) value's rounding step relative to its largest magnitude: at
    most ``2 / (max q - min q)``, as ``max |q - zero_point| >= (max q - min q) / 2`` whatever the zero
    point."""
    q = np.asarray(value)
    return 2.0 / max(1, int(q.max()) - int(q.min())) if q.size else 0.0


def error_bounds(flat: onnx.ModelProto, values: dict) -> dict[str, float]:
    """``{value: r}``: each value an implementation of ``flat`` (a graph without If: :func:`observe`)
    computes is within ``r |exact|`` (first order; see the module doc). A node adds ``gamma_K`` in the
    unit roundoff of its output's type (float16 ``2**-11``); a node that rounds to an 8- or 16-bit integer
    (QuantizeLinear, DynamicQuantizeLinear, the QLinear ops) adds one rounding step of its output
    (:func:`_step`), since two implementations may round a value near a tie apart."""
    shapes = {k: list(np.shape(v)) for k, v in values.items()}
    shapes.update({t.name: list(t.dims) for t in flat.graph.initializer})
    bound: dict[str, float] = {}
    for node in flat.graph.node:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            raise ValueError(f"node {node.name or node.output[0]!r} ({node.op_type}): loop bodies are not analysed")
        before = max((bound.get(x, 0.0) for x in node.input if x), default=0.0)
        exact = node.op_type in EXACT_OPS or node.op_type in EXTRA_EXACT
        terms = 0 if exact else _node_terms(node, shapes) + NODE_ROUNDINGS
        y0 = values.get(node.output[0])
        u = _unit_roundoff(y0)
        add = 0.0 if exact else terms * u / (1 - terms * u) if terms * u < 1 else float("inf")
        if not exact and y0 is not None and np.asarray(y0).dtype.kind in "iu" and np.asarray(y0).dtype.itemsize <= 2:
            add += _step(y0)
        if node.op_type == "DynamicQuantizeLSTM":  # X and h quantized to 8 bits inside, at every step
            add += shapes[node.input[0]][0] * 2 / 255
        for y in node.output:
            bound[y] = before + add
    return bound


def squash_argument(flat: onnx.ModelProto, output: str) -> str | None:
    """The argument of the squashing node (Sigmoid, Softmax...) that makes ``output``, through
    :data:`PASS_OPS` (an If's output is an Identity once flattened), or None."""
    producer = {y: n for n in flat.graph.node for y in n.output}
    node = producer.get(output)
    while node is not None and node.op_type in PASS_OPS:
        node = producer.get(node.input[0])
    return node.input[0] if node is not None and node.op_type in SQUASH_OPS else None


def tolerances(model: onnx.ModelProto, feeds: dict, observed: tuple | None = None) -> dict[str, tuple[float, str]]:
    """``{float graph output: (tolerance on max |a - b|, how it was set)}`` for two float32
    implementations of ``model`` run on ``feeds`` (the module doc). ``observed``: what :func:`observe`
    returned for them, when the caller has it."""
    flat, values = observed if observed is not None else observe(model, feeds)
    bound = error_bounds(flat, values)
    out = {}
    for o in model.graph.output:
        v = values[o.name]
        if np.asarray(v).dtype.kind != "f":
            continue
        r, arg = bound.get(o.name, 0.0), squash_argument(flat, o.name)
        if arg is None:
            scale = float(np.max(np.abs(v))) if np.size(v) else 0.0
            out[o.name] = (2 * r * scale, f"2 x {r:.2g} (relative bound) x max|value| {scale:.3g}")
        else:
            scale = float(np.max(np.abs(values[arg]))) if np.size(values[arg]) else 0.0
            out[o.name] = (2 * r * scale + SQUASH_ABS, f"2 x {r:.2g} (relative bound) x max|argument| {scale:.3g} "
                           f"of its squashing function + {SQUASH_ABS:.2g}")
    return out
