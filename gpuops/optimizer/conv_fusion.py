"""Conv [+ Add(residual)] [+ activation] -> com.microsoft FusedConv (float32 Convs only: the op
onnxruntime runs). The residual Z must have exactly the Conv output's shape (static, or the same
symbolic dims, as a dynamic batch axis gives both); the activation
is one of Relu, LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish, or Clip with constant bounds. On
CUDA, FusedConv runs the conv kernel's bias + residual + activation epilogue."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from .graph import MS, Graph, attr

_ACTIVATIONS = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Clip")


def _activation_params(graph: Graph, node):
    """The FusedConv activation_params of an activation node, or None if it cannot be fused."""
    op = node.op_type
    if op == "LeakyRelu":
        return [float(attr(node, "alpha", 0.01))]
    if op == "HardSigmoid":
        return [float(attr(node, "alpha", 0.2)), float(attr(node, "beta", 0.5))]
    if op == "Clip":
        if graph.opset() < 11:
            return [float(attr(node, "min", -3.4028234663852886e38)), float(attr(node, "max", 3.4028234663852886e38))]
        bounds = []
        for i, default in ((1, -3.4028234663852886e38), (2, 3.4028234663852886e38)):
            name = node.input[i] if len(node.input) > i else ""
            if not name:
                bounds.append(default)
                continue
            v = graph.const_value(name)
            if v is None or v.size != 1:
                return None
            bounds.append(float(np.asarray(v).reshape(())))
        return bounds
    return []


def _next(graph: Graph, y: str, ops):
    if not graph.single_use(y):
        return None
    n = graph.consumers[y][0]
    return n if n.domain in ("", "ai.onnx") and n.op_type in ops else None


def apply(graph: Graph) -> bool:
    removed = []
    for conv in graph.nodes:
        if conv.domain not in ("", "ai.onnx") or conv.op_type != "Conv":
            continue
        y = conv.output[0]
        if graph.elem_type(y) != TensorProto.FLOAT:
            continue
        last, z = conv, ""
        add = _next(graph, y, ("Add", "Sum"))
        if add is not None and len(add.input) == 2 and add not in removed:
            other = add.input[1] if add.input[0] == y else add.input[0]
            shape = graph.symbolic_shape(y)  # (a dynamic batch: the same symbol on both sides)
            if other != y and shape is not None and graph.symbolic_shape(other) == shape and \
                    graph.elem_type(other) == TensorProto.FLOAT:
                last, z = add, other
        act = _next(graph, last.output[0], _ACTIVATIONS)
        params = _activation_params(graph, act) if act is not None and act not in removed else None
        if params is None:
            act = None
        if last is conv and act is None:
            continue
        end = act or last
        inputs = list(conv.input[:3]) + [""] * (3 - len(conv.input[:3]))
        if z:
            if not inputs[2]:
                M = graph.const_value(conv.input[1])
                M = M.shape[0] if M is not None else (graph.shape(y) or (None, None))[1]
                if M is None:
                    continue
                inputs[2] = graph.add_const(np.zeros(M, np.float32), y + "_zero_bias")
            inputs.append(z)
        while inputs and not inputs[-1]:
            inputs.pop()
        attrs = {a.name: a for a in conv.attribute}
        act_name = act.op_type if act is not None else None
        end.op_type, end.domain = "FusedConv", MS
        end.input[:] = inputs
        del end.attribute[:]
        end.attribute.extend(attrs.values())
        if act is not None:
            end.attribute.append(helper.make_attribute("activation", act_name))
            if params:
                end.attribute.append(helper.make_attribute("activation_params", params))
        removed.extend(n for n in (conv, add if z else None) if n is not None and n is not end)
        graph.use_domain(MS)
    return graph.remove(*removed)
