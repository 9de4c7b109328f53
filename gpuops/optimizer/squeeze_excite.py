"""Squeeze-and-excitation blocks -> one of gpuops' private SqueezeExcite ops
(:mod:`gpuops.ops.contrib.private`), float32 only:

    X * gate(conv2(inner(conv1(GlobalAveragePool(X)))))

with 1x1 convs of constant weights and biases, as MobileNetV3 (inner Relu or HardSwish, gate
HardSigmoid) and EfficientNet (SiLU, Sigmoid) export them, after :mod:`.conv_fusion`, :mod:`.silu` and
:mod:`.conv_silu` have fused their activations: five nodes that each do little on a small map become one
(on the CPU: one native call). The op's function (:mod:`.private_ops`) keeps the model valid ONNX."""

from __future__ import annotations

from onnx import AttributeProto, TensorProto, helper

from ..ops.contrib.private import DOMAIN
from .conv_silu import silu_conv
from .graph import MS, Graph, attr
from .private_ops import define, ref

_GATES = {"Sigmoid", "HardSigmoid"}


def _inner_body(name: str) -> list:
    """The ai.onnx nodes of the inner activation, c1 -> h."""
    if name == "Relu":
        return [helper.make_node("Relu", ["c1"], ["h"])]
    if name == "HardSwish":  # HardSwish is x * HardSigmoid(x) of alpha 1/6, beta 1/2 (and from opset 14 only)
        return [helper.make_node("HardSigmoid", ["c1"], ["t"], alpha=1 / 6, beta=0.5),
                helper.make_node("Mul", ["c1", "t"], ["h"])]
    return [helper.make_node("Sigmoid", ["c1"], ["t"]), helper.make_node("Mul", ["c1", "t"], ["h"])]


def _define(graph: Graph, inner: str, gate: str) -> str:
    name = f"SqueezeExcite{inner}{gate}"
    body = [helper.make_node("GlobalAveragePool", ["X"], ["p"]), helper.make_node("Conv", ["p", "W1", "B1"], ["c1"]),
            *_inner_body(inner), helper.make_node("Conv", ["h", "W2", "B2"], ["c2"])]
    if gate == "Sigmoid":
        body.append(helper.make_node("Sigmoid", ["c2"], ["g"]))
        attributes, defaults = (), ()
    else:
        hs = helper.make_node("HardSigmoid", ["c2"], ["g"])
        hs.attribute.extend([ref("alpha", AttributeProto.FLOAT), ref("beta", AttributeProto.FLOAT)])
        body.append(hs)
        attributes, defaults = (), (helper.make_attribute("alpha", 0.2), helper.make_attribute("beta", 0.5))
    body.append(helper.make_node("Mul", ["X", "g"], ["Y"]))
    define(graph, name, ["X", "W1", "B1", "W2", "B2"], ["Y"], body, attributes, defaults)
    return name


def _pointwise(graph: Graph, conv) -> bool:
    """Whether ``conv`` is a plain 1x1 conv (group 1, no padding) with a bias."""
    return (len(conv.input) == 3 and all(conv.input) and attr(conv, "group", 1) == 1
            and not any(attr(conv, "pads", None) or ()) and attr(conv, "auto_pad", b"NOTSET") in (b"NOTSET", b"VALID")
            and all(d == 1 for d in (attr(conv, "dilations", None) or ())))


def _stage(graph: Graph, value: str, acts):
    """(conv node, activation, [nodes]) of the 1x1 conv + activation (one of ``acts``) making ``value``
    (used once), or None. An activation's parameters: (alpha, beta) of a HardSigmoid, else ()."""
    if not graph.single_use(value):
        return None
    node = graph.producer.get(value)
    if node is None:
        return None
    act = attr(node, "activation", b"")
    act = act.decode() if isinstance(act, bytes) else act
    if node.op_type == "FusedConv" and node.domain == MS and act in acts and len(node.input) <= 3:
        params = list(attr(node, "activation_params", None) or ())
        if act == "HardSigmoid":
            params = (params + [0.2, 0.5][len(params):])[:2]
        elif params:
            return None
        return node, act, tuple(float(p) for p in params), [node]
    if "Silu" not in acts:
        return None
    conv = node if (node.op_type, node.domain) == ("ConvSilu", DOMAIN) else silu_conv(graph, node)
    return None if conv is None else (conv, "Silu", (), [node] if conv is node else [node, conv])


def _match(graph: Graph, mul, x: str, g: str):
    """(inner, gate, (alpha, beta), W1, B1, W2, B2, nodes) of the block from x to ``mul``'s gate g, or None."""
    gate = _stage(graph, g, _GATES)
    if gate is None:
        return None
    conv2, gate_act, params, nodes2 = gate
    inner = _stage(graph, conv2.input[0], ("Relu", "HardSwish", "Silu"))
    if inner is None:
        return None
    conv1, inner_act, _, nodes1 = inner
    pool = graph.producer_of(conv1.input[0], "GlobalAveragePool")
    if pool is None or pool.input[0] != x or not graph.single_use(conv1.input[0]):
        return None
    if not (_pointwise(graph, conv1) and _pointwise(graph, conv2)):
        return None
    shape = graph.symbolic_shape(x)
    W1, B1, W2, B2 = (graph.const_value(n) for n in (*conv1.input[1:3], *conv2.input[1:3]))
    if shape is None or len(shape) != 4 or any(v is None for v in (W1, B1, W2, B2)) or W1.ndim != 4:
        return None
    C, R = shape[1], W1.shape[0]
    if W1.shape != (R, C, 1, 1) or W2.shape != (C, R, 1, 1) or B1.shape != (R,) or B2.shape != (C,):
        return None
    return (inner_act, gate_act, params, list(conv1.input[1:3]) + list(conv2.input[1:3]),
            [pool] + nodes1 + nodes2)


def apply(graph: Graph) -> bool:
    removed = []
    for mul in graph.nodes:
        if mul.op_type != "Mul" or mul.domain not in ("", "ai.onnx") or len(mul.input) != 2 or mul in removed:
            continue
        for x, g in ((mul.input[0], mul.input[1]), (mul.input[1], mul.input[0])):
            shape = graph.symbolic_shape(x)
            if graph.elem_type(x) != TensorProto.FLOAT or shape is None or graph.symbolic_shape(mul.output[0]) != shape:
                continue
            found = _match(graph, mul, x, g)
            if found is None or any(n in removed for n in found[4]):
                continue
            inner, gate, params, weights, nodes = found
            mul.op_type, mul.domain = _define(graph, inner, gate), DOMAIN
            mul.input[:] = [x] + weights
            del mul.attribute[:]
            if gate == "HardSigmoid":
                mul.attribute.extend([helper.make_attribute("alpha", params[0]),
                                      helper.make_attribute("beta", params[1])])
            removed.extend(nodes)
            break
    return graph.remove(*removed)
