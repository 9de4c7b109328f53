"""Nodes that pass their input through unchanged are removed: Identity, inference-mode Dropout
(its mask unused), Reshape, Squeeze, Unsqueeze and Expand to the same static shape, a Slice of steps 1
that keeps the whole static shape, Cast to the same type, Transpose with the identity permutation,
Flatten of a 2-D value at axis 1. Graph output names are kept: when the removed node makes a graph output, the
producer of its input is renamed to make that output instead (if nothing else reads it)."""

from __future__ import annotations

import numpy as np

from .graph import Graph, attr


def _same_shape(graph: Graph, node) -> bool:
    a = graph.shape(node.input[0])
    return a is not None and a == graph.shape(node.output[0])


def _noop(graph: Graph, node) -> bool:
    op = node.op_type
    if op == "Identity":
        return True
    if op == "Dropout":
        if any(o for o in node.output[1:] if not graph.unused(o)):
            return False
        if graph.opset() < 7 and attr(node, "is_test", 0) == 0:
            return False  # before opset 7 Dropout is a training op unless is_test
        if len(node.input) > 2 and node.input[2]:
            mode = graph.const_value(node.input[2])
            return mode is not None and not bool(np.asarray(mode).any())
        return True
    if op in ("Reshape", "Squeeze", "Unsqueeze", "Expand"):
        return _same_shape(graph, node)
    if op == "Slice":  # steps of 1 (a step of -1 over the whole axis reverses it)
        if graph.opset() < 10 or len(node.input) < 5 or not node.input[4]:
            return _same_shape(graph, node)
        steps = graph.const_value(node.input[4])
        return steps is not None and bool((np.asarray(steps) == 1).all()) and _same_shape(graph, node)
    if op == "Cast":
        t = graph.elem_type(node.input[0])
        return t is not None and t == attr(node, "to")
    if op == "Flatten":  # of a 2-D value at axis 1 (or -1)
        i = graph.info(node.input[0])
        return i is not None and i[1] is not None and len(i[1]) == 2 and attr(node, "axis", 1) in (1, -1)
    if op == "Transpose":
        perm = attr(node, "perm")
        return perm is not None and list(perm) == list(range(len(perm)))
    return False


def apply(graph: Graph) -> bool:
    removed = []
    for node in graph.nodes:
        if node.domain not in ("", "ai.onnx") or not node.input or not node.input[0] or not _noop(graph, node):
            continue
        x, y = node.input[0], node.output[0]
        if y not in graph.protected:
            graph.rename_uses(y, x)
        else:
            src = graph.producer.get(x)
            if src is None or x in graph.protected or len(graph.consumers.get(x, ())) != 1 or y in src.input:
                continue
            src.output[:] = [y if o == x else o for o in src.output]
            graph.producer[y] = src
        removed.append(node)
    return graph.remove(*removed)
