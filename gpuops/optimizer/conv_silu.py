"""Conv + SiLU (the QuickGelu of alpha 1 that :mod:`.silu` makes of ``x * sigmoid(x)``) -> gpuops'
private ConvSilu (:mod:`gpuops.ops.contrib.private`), float32 only: the CPU's planned conv applies the
SiLU in its last pass over the output, where EfficientNet's QuickGelu nodes were a pass of their own.
onnxruntime's FusedConv has no SiLU; the op's function (:mod:`.private_ops`) keeps the model valid ONNX."""

from __future__ import annotations

import numpy as np
from onnx import AttributeProto, TensorProto, helper

from ..ops.contrib.private import DOMAIN
from .graph import MS, Graph, attr
from .private_ops import define, ref

_CONV = {"auto_pad": AttributeProto.STRING, "dilations": AttributeProto.INTS, "group": AttributeProto.INT,
         "kernel_shape": AttributeProto.INTS, "pads": AttributeProto.INTS, "strides": AttributeProto.INTS}


def _define(graph: Graph) -> None:
    conv = helper.make_node("Conv", ["X", "W", "B"], ["y"])
    conv.attribute.extend(ref(k, t) for k, t in _CONV.items())
    body = [conv, helper.make_node("Sigmoid", ["y"], ["s"]), helper.make_node("Mul", ["y", "s"], ["Y"])]
    define(graph, "ConvSilu", ["X", "W", "B"], ["Y"], body, _CONV)


def silu_conv(graph: Graph, node):
    """The ai.onnx Conv (a single use, float32) whose SiLU ``node`` (a QuickGelu of alpha 1) is, or None."""
    if node.op_type != "QuickGelu" or node.domain != MS or float(attr(node, "alpha", 1.702)) != 1.0:
        return None
    conv = graph.producer_of(node.input[0], "Conv")
    if conv is None or conv.domain not in ("", "ai.onnx") or not graph.single_use(node.input[0]) \
            or graph.elem_type(node.input[0]) != TensorProto.FLOAT or len(conv.input) < 2:
        return None
    return conv


def apply(graph: Graph) -> bool:
    removed = []
    for act in graph.nodes:
        conv = silu_conv(graph, act)
        if conv is None or conv in removed:
            continue
        inputs = list(conv.input[:3])
        if len(inputs) < 3 or not inputs[2]:
            W = graph.const_value(inputs[1])
            if W is None:
                continue
            inputs[2:] = [graph.add_const(np.zeros(W.shape[0], np.float32), conv.output[0] + "_zero_bias")]
        _define(graph)
        act.op_type, act.domain = "ConvSilu", DOMAIN
        act.input[:] = inputs
        del act.attribute[:]
        act.attribute.extend(a for a in conv.attribute if a.name in _CONV)
        removed.append(conv)
    return graph.remove(*removed)
