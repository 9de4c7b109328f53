"""Shape and Size of values whose shape inference found a fully static shape become constants."""

from __future__ import annotations

import numpy as np

from .graph import Graph, attr


def apply(graph: Graph) -> bool:
    done = []
    for node in graph.nodes:
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Shape", "Size"):
            continue
        out = node.output[0]
        if out in graph.protected or graph.is_const(node.input[0]):
            continue  # a constant input is constant folding's
        shape = graph.shape(node.input[0])
        if shape is None:
            continue
        if node.op_type == "Size":
            value = np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
        else:
            start, end = attr(node, "start", 0), attr(node, "end", None)
            value = np.array(shape[slice(start, end)], dtype=np.int64)
        graph.set_const(out, value)
        done.append(node)
    return graph.remove(*done)
