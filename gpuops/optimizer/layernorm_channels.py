"""Transpose to channels-last -> LayerNormalization over the last axis -> Transpose back (ConvNeXt's
LayerNorm2d, as TorchScript and the dynamo exporter write it) -> gpuops' private LayerNormChannels
(:mod:`gpuops.ops.contrib.private`), float32, rank 4: the CPU normalizes each position over the channels of
the NCHW data in place, where the two Transposes were a node each and the second one's view a copy in the
next op. The op's function (:mod:`.private_ops`) keeps the model valid ONNX."""

from __future__ import annotations

from onnx import AttributeProto, TensorProto, helper

from ..ops.contrib.private import DOMAIN
from .graph import Graph, attr
from .private_ops import define, ref

_TO_LAST, _TO_FIRST = [0, 2, 3, 1], [0, 3, 1, 2]


def _define(graph: Graph) -> None:
    norm = helper.make_node("LayerNormalization", ["x", "Scale", "B"], ["y"], axis=-1)
    norm.attribute.append(ref("epsilon", AttributeProto.FLOAT))
    body = [helper.make_node("Transpose", ["X"], ["x"], perm=_TO_LAST), norm,
            helper.make_node("Transpose", ["y"], ["Y"], perm=_TO_FIRST)]
    define(graph, "LayerNormChannels", ["X", "Scale", "B"], ["Y"], body, {"epsilon": AttributeProto.FLOAT},
           [helper.make_attribute("epsilon", 1e-5)])


def _transpose(node, perm) -> bool:
    return node is not None and node.domain in ("", "ai.onnx") and list(attr(node, "perm", [])) == perm


def apply(graph: Graph) -> bool:
    removed = []
    for norm in graph.nodes:
        if norm.op_type != "LayerNormalization" or norm.domain not in ("", "ai.onnx") or len(norm.input) < 3 \
                or not norm.input[2] or len(norm.output) != 1 or int(attr(norm, "axis", -1)) not in (-1, 3) \
                or int(attr(norm, "stash_type", 1)) != 1:
            continue
        first = graph.producer_of(norm.input[0], "Transpose")
        last = graph.only_consumer(norm.output[0], "Transpose")
        if not _transpose(first, _TO_LAST) or not _transpose(last, _TO_FIRST) or first in removed \
                or not graph.single_use(norm.input[0]) or graph.elem_type(first.input[0]) != TensorProto.FLOAT:
            continue
        info = graph.info(first.input[0])
        if info is None or info[1] is None or len(info[1]) != 4:
            continue
        _define(graph)
        last.op_type, last.domain = "LayerNormChannels", DOMAIN
        last.input[:] = [first.input[0], norm.input[1], norm.input[2]]
        del last.attribute[:]
        last.attribute.append(helper.make_attribute("epsilon", float(attr(norm, "epsilon", 1e-5))))
        removed += [first, norm]
    return graph.remove(*removed)
