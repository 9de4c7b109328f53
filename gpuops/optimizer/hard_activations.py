"""HardSigmoid and HardSwish written out -> one op.

The exporters write them so (``R(x)`` = ``Clip(Add(x, 3), 0, 6)``, relu6 of x + 3):

* TorchScript below opset 14: HardSwish as ``Mul(x, HardSigmoid(x, alpha=1/6, beta=0.5))``;
* Paddle2ONNX below opset 14: ``Div(Mul(x, R(x)), 6)``; tf2onnx (Keras ``hard_swish``):
  ``Mul(Mul(x, R(x)), 1/6)``, the factor in either place;
* tf2onnx (Keras ``hard_sigmoid``): ``Div(R(x), 6)`` or ``Mul(R(x), 1/6)``.

``R(x) / 6`` becomes ``HardSigmoid(x, alpha=1/6, beta=0.5)``; ``x * R(x) / 6`` and
``x * HardSigmoid(x, 1/6, 0.5)`` become ai.onnx HardSwish (opset >= 14). Below opset 14, where
ai.onnx has no HardSwish, a HardSwish of a float32 Conv's output becomes com.microsoft FusedConv
with the HardSwish activation, and otherwise stays ``x * HardSigmoid(x)`` (two nodes for four).
:mod:`.conv_fusion` then takes a HardSigmoid or HardSwish after a Conv into its epilogue."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from .graph import MS, Graph, attr, set_attrs

_SIXTH = 1 / 6


def _scalar(graph: Graph, name: str, want: float) -> bool:
    v = graph.const_value(name) if name else None
    return v is not None and v.size == 1 and v.dtype.kind == "f" and \
        math.isclose(float(np.asarray(v, np.float64).reshape(())), want, rel_tol=1e-6)


def _other(node, name):
    return node.input[1] if node.input[0] == name else node.input[0]


def _relu6_plus_3(graph: Graph, name: str, nodes: list):
    """x when ``name`` is Clip(Add(x, 3), 0, 6), read only where the pattern reads it."""
    clip = graph.producer_of(name, "Clip")
    if clip is None or not graph.single_use(name):
        return None
    if graph.opset() < 11:
        lo, hi = attr(clip, "min"), attr(clip, "max")
        bounds = lo is not None and hi is not None and float(lo) == 0 and float(hi) == 6
    else:
        bounds = len(clip.input) == 3 and _scalar(graph, clip.input[1], 0.0) and _scalar(graph, clip.input[2], 6.0)
    add = graph.producer_of(clip.input[0], "Add")
    if not bounds or add is None or not graph.single_use(clip.input[0]):
        return None
    for x, c in ((add.input[0], add.input[1]), (add.input[1], add.input[0])):
        if _scalar(graph, c, 3.0):
            nodes += [clip, add]
            return x
    return None


def _divided_by_6(graph: Graph, node):
    """The input of ``node`` when it is Div(a, 6) or Mul(a, 1/6), else None."""
    if node.op_type == "Div" and _scalar(graph, node.input[1], 6.0):
        return node.input[0]
    if node.op_type == "Mul":
        for a, c in ((node.input[0], node.input[1]), (node.input[1], node.input[0])):
            if _scalar(graph, c, _SIXTH):
                return a
    return None


def _hard_sigmoid_of(graph: Graph, name: str, nodes: list):
    """x when ``name`` is HardSigmoid(x, 1/6, 0.5) (single use)."""
    hs = graph.producer_of(name, "HardSigmoid")
    if hs is None or not graph.single_use(name):
        return None
    if not (math.isclose(attr(hs, "alpha", 0.2), _SIXTH, rel_tol=1e-6) and attr(hs, "beta", 0.5) == 0.5):
        return None
    nodes.append(hs)
    return hs.input[0]


def _swish_input(graph: Graph, mul, nodes: list):
    """x when the Mul ``mul`` is x * HardSigmoid(x) or x * R(x) (the latter then divided by 6)."""
    for x, s in ((mul.input[0], mul.input[1]), (mul.input[1], mul.input[0])):
        found: list = []
        if _hard_sigmoid_of(graph, s, found) == x:
            nodes += found
            return x, False
        if _relu6_plus_3(graph, s, found) == x:
            nodes += found
            return x, True
    return None, None


def _rewrite(graph: Graph, node, op: str, x: str, **attrs) -> None:
    node.op_type, node.domain = op, ""
    node.input[:] = [x]
    del node.attribute[:]
    set_attrs(node, **attrs)


def _as_hard_swish(graph: Graph, node, x: str, removed: list) -> bool:
    """Make ``node`` compute HardSwish(x): the ai.onnx op, or below opset 14 a FusedConv taking the
    Conv that makes x, or x * HardSigmoid(x) (reusing ``removed``'s last HardSigmoid if any)."""
    if graph.opset() >= 14:
        _rewrite(graph, node, "HardSwish", x)
        return True
    conv = graph.producer_of(x, "Conv")
    if conv is not None and graph.elem_type(x) == TensorProto.FLOAT and x not in graph.protected and \
            all(c is node or c in removed for c in graph.consumers.get(x, ())):
        node.op_type, node.domain = "FusedConv", MS
        node.input[:] = list(conv.input)
        del node.attribute[:]
        node.attribute.extend(conv.attribute)
        set_attrs(node, activation="HardSwish")
        removed.append(conv)
        graph.use_domain(MS)
        return True
    return False


def apply(graph: Graph) -> bool:
    removed, changed = [], False
    for node in list(graph.nodes):
        if node.domain not in ("", "ai.onnx") or node in removed or node.op_type not in ("Div", "Mul"):
            continue
        nodes: list = []
        a = _divided_by_6(graph, node)
        x = _relu6_plus_3(graph, a, nodes) if a is not None else None
        if x is not None:  # R(x) / 6
            _rewrite(graph, node, "HardSigmoid", x, alpha=_SIXTH, beta=0.5)
            removed += nodes
            changed = True
            continue
        inner = graph.producer_of(a, "Mul") if a is not None and graph.single_use(a) else None
        if inner is not None:
            nodes = []
            x, relu6 = _swish_input(graph, inner, nodes)
            if x is not None and relu6:  # x * R(x) / 6
                if _as_hard_swish(graph, node, x, removed + nodes + [inner]):
                    removed += nodes + [inner]
                else:  # below opset 14 and not after a Conv: x * HardSigmoid(x)
                    clip, add = nodes
                    _rewrite(graph, clip, "HardSigmoid", x, alpha=_SIXTH, beta=0.5)
                    inner.input[:] = [x, clip.output[0]]
                    inner.output[0] = node.output[0]
                    removed += [add, node]
                changed = True
                continue
        if node.op_type == "Mul":
            nodes = []
            x, relu6 = _swish_input(graph, node, nodes)
            if x is not None and not relu6 and _as_hard_swish(graph, node, x, removed + nodes):
                removed += nodes
                changed = True
    if removed:
        graph.remove(*removed)
    elif changed:
        graph.invalidate()
        graph.index()
    return changed
