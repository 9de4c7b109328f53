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
  ``T (input_size + hidden_size + 2 + NODE_ROUNDINGS)`` terms.

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

from gpuops.selftest import EXACT_OPS, NODE_ROUNDINGS, UNIT_ROUNDOFF, _terms, gamma

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
    with its graph optimizations off (the values as the graph writes them)."""
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
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
    if node.op_type in RECURRENT_OPS:
        x, w, r = (shapes.get(node.input[i]) for i in range(3))
        if not x or not w or not r or None in x[:1] + w[2:] + r[2:]:
            raise ValueError(f"node {node.name or node.output[0]!r} ({node.op_type}): shapes unknown")
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        steps = x[1] if attrs.get("layout", 0) else x[0]
        return steps * (w[2] + r[2] + 2 + NODE_ROUNDINGS)
    return _terms(node, shapes)


def error_bounds(flat: onnx.ModelProto, values: dict) -> dict[str, float]:
    """``{value: r}``: each value a float32 implementation of ``flat`` (a graph without If:
    :func:`observe`) computes is within ``r |exact|`` (first order; see the module doc)."""
    shapes = {k: list(np.shape(v)) for k, v in values.items()}
    shapes.update({t.name: list(t.dims) for t in flat.graph.initializer})
    bound: dict[str, float] = {}
    for node in flat.graph.node:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            raise ValueError(f"node {node.name or node.output[0]!r} ({node.op_type}): loop bodies are not analysed")
        before = max((bound.get(x, 0.0) for x in node.input if x), default=0.0)
        exact = node.op_type in EXACT_OPS or node.op_type in EXTRA_EXACT
        add = 0.0 if exact else gamma(_node_terms(node, shapes) + NODE_ROUNDINGS)
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


def tolerances(model: onnx.ModelProto, feeds: dict) -> dict[str, tuple[float, str]]:
    """``{float graph output: (tolerance on max |a - b|, how it was set)}`` for two float32
    implementations of ``model`` run on ``feeds`` (the module doc)."""
    flat, values = observe(model, feeds)
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
