"""A one-hot written as Equal against the classes, Cast to float32, then MatMul by a constant table (JAX's
``jax.nn.one_hot`` followed by a dense layer, as jax2tf exports it: magika's byte embedding) -> gpuops'
private OneHotMatMul (:mod:`gpuops.ops.contrib.private`), whose CPU kernel copies the table's rows that
the indices name instead of forming the one-hot and multiplying: for magika's 2 x 2048 bytes of 257 classes,
a float32 tensor of 2.1 million cells and a product of 67 million multiply-adds are gone.

Applies where the classes are a constant ``0, 1, ..., D - 1`` of integers (of shape ``(1, ..., 1, D)``),
the table a constant float32 (D, E) of finite numbers (a product with an infinity or NaN would spread
NaN through a row that the copy would not), and the Equal and the Cast read by the next node alone. Its
function (:mod:`.private_ops`) is the three nodes, so the model stays valid ONNX."""

from __future__ import annotations

from onnx import TensorProto, helper

from ..ops.contrib.private import DOMAIN, one_hot_classes, one_hot_table
from .graph import Graph, attr
from .private_ops import define

NAME = "OneHotMatMul"


def _define(graph: Graph) -> None:
    body = [helper.make_node("Equal", ["A", "R"], ["hot"]),
            helper.make_node("Cast", ["hot"], ["onehot"], to=TensorProto.FLOAT),
            helper.make_node("MatMul", ["onehot", "W"], ["Y"])]
    define(graph, NAME, ["A", "R", "W"], ["Y"], body)


def apply(graph: Graph) -> bool:
    removed = []
    for node in graph.nodes:
        if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx"):
            continue
        cast = graph.producer_of(node.input[0], "Cast")
        if cast is None or not graph.single_use(node.input[0]) or attr(cast, "to", None) != TensorProto.FLOAT:
            continue
        equal = graph.producer_of(cast.input[0], "Equal")
        if equal is None or not graph.single_use(cast.input[0]):
            continue
        for r in (1, 0):  # the classes on either side
            R = graph.const_value(equal.input[r])
            if one_hot_classes(R) and one_hot_table(graph.const_value(node.input[1]), R.size):
                break
        else:
            continue
        _define(graph)
        node.op_type, node.domain = NAME, DOMAIN
        node.input[:] = [equal.input[1 - r], equal.input[r], node.input[1]]
        removed += [cast, equal]
    return graph.remove(*removed)
