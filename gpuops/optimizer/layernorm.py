"""Layer normalization written out -> one op.

TorchScript (opset < 17) emits ``d = x - ReduceMean(x); y = d / Sqrt(ReduceMean(Pow(d, 2)) + eps)``,
then ``y * gamma + beta``, all over the last axis. With ai.onnx opset >= 17 this becomes
ai.onnx LayerNormalization(x, gamma, beta, axis=-1). Below opset 17, when x is the sum of two
3-D tensors of the same shape (static, or the same symbolic dims: a residual connection, as in
BERT, with dynamic batch and sequence axes), it becomes
com.microsoft SkipLayerNormalization(a, b, gamma, beta); otherwise (opset 12 to 16) gpuops'
LayerNormalization over the last axis (a private op, defined in the model by the function
:func:`_function_body` makes, :mod:`.private_ops`). (The dynamo exporter
and TorchScript at opset >= 17 emit LayerNormalization itself.)"""

from __future__ import annotations

import numpy as np
from onnx import AttributeProto, TensorProto, helper

from . import private_ops
from .graph import MS, Graph, attr

_FLOATS = (TensorProto.FLOAT,)  # what onnxruntime's CPU kernels of both ops take


def _last_axis(graph: Graph, node, rank) -> bool:
    """A ReduceMean over exactly the last axis, keeping dims."""
    if node is None or node.op_type != "ReduceMean" or not attr(node, "keepdims", 1):
        return False
    axes = attr(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = graph.const_value(node.input[1])
    if axes is None:
        return False
    axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    return len(axes) == 1 and axes[0] in (-1, rank - 1)


def _consumer(graph: Graph, name: str, op: str, nodes):
    for n in graph.consumers.get(name, ()):
        if n.op_type == op and n.domain in ("", "ai.onnx"):
            nodes.append(n)
            return n
    return None


def _match(graph: Graph, rm1):
    """(x, gamma, beta, epsilon, nodes, output) of the pattern rooted at the first ReduceMean."""
    x = rm1.input[0]
    info = graph.info(x)
    shape = info[1] if info else None  # the rank and the last (normalized) axis must be known
    if shape is None or shape[-1:] in ((), (None,)) or info[0] not in _FLOATS or \
            not _last_axis(graph, rm1, len(shape)):
        return None
    nodes = [rm1]
    sub = graph.only_consumer(rm1.output[0], "Sub")
    if sub is None or sub.input != [x, rm1.output[0]]:
        return None
    nodes.append(sub)
    d = sub.output[0]
    if d in graph.protected or len(graph.consumers.get(d, ())) != 2:
        return None
    pow_ = _consumer(graph, d, "Pow", nodes)
    div = _consumer(graph, d, "Div", nodes)
    if pow_ is None or div is None or div.input[0] != d:
        return None
    two = graph.const_value(pow_.input[1])
    if two is None or two.size != 1 or float(two.reshape(())) != 2.0:
        return None
    rm2 = graph.only_consumer(pow_.output[0], "ReduceMean")
    if not _last_axis(graph, rm2, len(shape)):
        return None
    nodes.append(rm2)
    add = graph.only_consumer(rm2.output[0], "Add")
    if add is None:
        return None
    nodes.append(add)
    eps = graph.const_value(add.input[1] if add.input[0] == rm2.output[0] else add.input[0])
    if eps is None or eps.size != 1:
        return None
    sqrt = graph.only_consumer(add.output[0], "Sqrt")
    if sqrt is None or div.input[1] != sqrt.output[0] or not graph.single_use(sqrt.output[0]):
        return None
    nodes.append(sqrt)
    mul = graph.only_consumer(div.output[0], "Mul")
    if mul is None:
        return None
    nodes.append(mul)
    gamma = mul.input[1] if mul.input[0] == div.output[0] else mul.input[0]
    badd = graph.only_consumer(mul.output[0], "Add")
    if badd is None:
        return None
    nodes.append(badd)
    beta = badd.input[1] if badd.input[0] == mul.output[0] else badd.input[0]
    for p in (gamma, beta):
        v = graph.const_value(p)
        if v is None or v.shape != (shape[-1],):
            return None
    if any(o in graph.protected for n in nodes[:-1] for o in n.output):
        return None
    for n in nodes[:-1]:  # every intermediate stays inside the pattern
        for o in n.output:
            if any(c not in nodes for c in graph.consumers.get(o, ())):
                return None
    return x, gamma, beta, float(eps.reshape(())), nodes, badd


def _residual(graph: Graph, x: str, nodes):
    """The Add making ``x`` from two 3-D tensors of its symbolic shape, read by the pattern alone; or None."""
    res = graph.producer_of(x, "Add")
    shape = graph.symbolic_shape(x)  # dynamic axes: both operands of the same symbolic shape
    if res is None or shape is None or len(shape) != 3 or \
            [graph.symbolic_shape(i) for i in res.input] != [shape, shape] or \
            any(c not in nodes for c in graph.consumers.get(x, ())) or x in graph.protected:
        return None
    return res


def _function_body() -> list:
    """The private LayerNormalization's body for opsets 12 to 16 (a Constant's ``value_float`` taking the
    node's ``epsilon``; ReduceMean's ``axes`` an attribute)."""
    eps = helper.make_node("Constant", [], ["eps"])
    eps.attribute.add(name="value_float", type=AttributeProto.FLOAT, ref_attr_name="epsilon")
    return [helper.make_node("ReduceMean", ["X"], ["mean"], axes=[-1]),
            helper.make_node("Sub", ["X", "mean"], ["d"]),
            helper.make_node("Mul", ["d", "d"], ["d2"]),
            helper.make_node("ReduceMean", ["d2"], ["var"], axes=[-1]),
            eps,
            helper.make_node("Add", ["var", "eps"], ["var_eps"]),
            helper.make_node("Sqrt", ["var_eps"], ["std"]),
            helper.make_node("Div", ["d", "std"], ["norm"]),
            helper.make_node("Mul", ["norm", "Scale"], ["scaled"]),
            helper.make_node("Add", ["scaled", "B"], ["Y"])]


def _become(graph: Graph, node, op_type: str, domain: str, inputs, **attrs) -> None:
    node.op_type, node.domain = op_type, domain
    node.input[:] = inputs
    del node.attribute[:]
    node.attribute.extend(graph.make_node("X", [], [], **attrs).attribute)
    if domain == private_ops.DOMAIN:
        private_ops.define(graph, op_type, ["X", "Scale", "B"], ["Y"], _function_body(), ["epsilon"])
    elif domain:
        graph.use_domain(domain)


def apply(graph: Graph) -> bool:
    removed = []
    for rm1 in graph.nodes:
        if rm1.op_type != "ReduceMean" or rm1.domain not in ("", "ai.onnx") or rm1 in removed:
            continue
        m = _match(graph, rm1)
        if m is None:
            continue
        x, gamma, beta, eps, nodes, last = m
        opset = graph.opset()
        res = _residual(graph, x, nodes) if opset < 17 else None
        if opset >= 17:
            _become(graph, last, "LayerNormalization", "", [x, gamma, beta], axis=-1, epsilon=eps)
        elif res is not None:
            _become(graph, last, "SkipLayerNormalization", MS, [res.input[0], res.input[1], gamma, beta], epsilon=eps)
            nodes = nodes + [res]
        elif opset >= 12:  # (the function that defines the op for other runtimes needs opset 12)
            _become(graph, last, "LayerNormalization", private_ops.DOMAIN, [x, gamma, beta], epsilon=eps)
        else:
            continue
        removed.extend(n for n in nodes if n is not last)
    return graph.remove(*removed)
