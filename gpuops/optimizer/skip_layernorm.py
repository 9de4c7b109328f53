"""A residual Add before a LayerNormalization -> com.microsoft SkipLayerNormalization (onnxruntime's fusion).

Matched: ai.onnx LayerNormalization(Add(a, b), gamma[, beta]) over the last axis (stash_type 1, its mean
and inverse deviation unread), a and b float32 of the same 3-D shape (static, or the same symbolic
dims), gamma and beta constants of the last axis' size. When one of a and b is read only by the Add and is
itself Add(m, bias) of a constant bias of that size (a projection's bias, as the exporters write
``Linear``), the bias is taken in too: SkipLayerNormalization(m, other, gamma, beta, bias). The Add's sum,
read by other nodes too (the next residual), becomes the node's fourth output (input + skip + bias).
(:mod:`.layernorm` makes the same node of a layer normalization written out below opset 17.)
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .graph import MS, Graph, attr


def _const_row(graph: Graph, name: str, n: int) -> bool:
    v = graph.const_value(name)
    return v is not None and v.dtype == np.float32 and v.shape == (n,)


def _bias(graph: Graph, name: str, shape, n: int):
    """(m, bias, the Add) when ``name`` is read once and is Add(m, bias), m of ``shape``, bias constant (n,)."""
    add = graph.producer_of(name, "Add")
    if add is None or not graph.single_use(name):
        return None
    for m, c in ((add.input[0], add.input[1]), (add.input[1], add.input[0])):
        if _const_row(graph, c, n) and graph.symbolic_shape(m) == shape:
            return m, c, add
    return None


def _match(graph: Graph, ln):
    """(inputs, the Add's other readers, nodes removed) of a LayerNormalization ``ln``, or None."""
    if len(ln.input) < 2 or any(o for o in ln.output[1:]) or attr(ln, "stash_type", 1) != 1:
        return None
    x = ln.input[0]
    add = graph.producer_of(x, "Add")
    shape = graph.symbolic_shape(x)
    if add is None or shape is None or len(shape) != 3 or not isinstance(shape[-1], int) \
            or attr(ln, "axis", -1) not in (-1, len(shape) - 1) or graph.elem_type(x) != TensorProto.FLOAT:
        return None
    a, b = add.input
    n = shape[-1]
    beta = ln.input[2] if len(ln.input) > 2 else ""
    if [graph.symbolic_shape(a), graph.symbolic_shape(b)] != [shape, shape] or not _const_row(graph, ln.input[1], n) \
            or (beta and not _const_row(graph, beta, n)):
        return None
    removed, bias = [add], ""
    for side, other in ((a, b), (b, a)):
        got = _bias(graph, side, shape, n)
        if got is not None:
            a, bias, badd = got
            b = other
            removed.append(badd)
            break
    shared = [c for c in graph.consumers.get(x, ()) if c is not ln]
    at = graph.nodes.index(ln)
    if any(graph.nodes.index(c) < at for c in shared):  # the sum is made where the LayerNormalization was
        return None
    return [a, b, ln.input[1], beta, bias], bool(shared) or x in graph.protected, removed


def apply(graph: Graph) -> bool:
    removed = []
    for ln in list(graph.nodes):
        if ln.op_type != "LayerNormalization" or ln.domain not in ("", "ai.onnx") or ln in removed:
            continue
        m = _match(graph, ln)
        if m is None or any(n in removed for n in m[2]):
            continue
        inputs, keep_sum, nodes = m
        while not inputs[-1]:
            inputs.pop()
        outputs = [ln.output[0]] + (["", "", ln.input[0]] if keep_sum else [])
        fused = graph.make_node("SkipLayerNormalization", inputs, outputs, domain=MS,
                                epsilon=float(attr(ln, "epsilon", 1e-5)))
        graph.nodes[graph.nodes.index(ln)] = fused
        removed += nodes
        graph.use_domain(MS)
    return graph.remove(*removed)
