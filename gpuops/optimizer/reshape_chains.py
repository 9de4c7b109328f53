"""A reshape of a reshape -> one Reshape of the first one's input.

Reshape, Squeeze, Unsqueeze and Flatten only relabel a tensor's shape. Where one of them reads the output
of another and its own output shape is static, it becomes ``Reshape(x, target)`` of the first one's input
``x`` (the first is left to :mod:`.dead_code` when nothing else reads it; one whose output has x's shape
is then removed by :mod:`.eliminate_noops`). TorchScript exports (and shape-specialized plans, where the
shapes become static) squeeze and unsqueeze the same tensor back and forth around RNNs and convs."""

from __future__ import annotations

import numpy as np

from .graph import Graph

_RESHAPES = ("Reshape", "Squeeze", "Unsqueeze", "Flatten")


def apply(graph: Graph) -> bool:
    changed = False
    for node in graph.nodes:
        if node.op_type not in _RESHAPES or node.domain not in ("", "ai.onnx") or not node.input:
            continue
        first = graph.producer.get(node.input[0])
        if first is None or first.op_type not in _RESHAPES or first.domain not in ("", "ai.onnx") or \
                not first.input or not first.input[0]:
            continue
        target = graph.shape(node.output[0])
        if target is None or 0 in target or graph.opset() < 5:  # (Reshape takes its target as an input from 5)
            continue
        x = first.input[0]
        node.op_type = "Reshape"
        node.input[:] = [x, graph.add_const(np.array(target, np.int64), f"{node.output[0]}_shape")]
        del node.attribute[:]
        changed = True  # (a later link of the chain reads this node's new input: nodes are in order)
    if changed:
        graph.index()
    return changed
