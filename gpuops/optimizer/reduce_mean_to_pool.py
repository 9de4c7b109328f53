"""ReduceMean over every spatial axis of a float32 (N, C, H, W, ...) tensor -> GlobalAveragePool.

``x.mean((2, 3), keepdim=True)`` (the squeeze-excitation of EfficientNet, MobileNetV3, RegNet as
TorchScript and the dynamo exporter write it) is a ReduceMean; GlobalAveragePool is the same
numbers by a kernel made for it (about 3x faster on the CPU). Without keepdims the pooled
(N, C, 1, ...) tensor is flattened to (N, C) after it."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .graph import Graph, attr


def _axes(graph: Graph, node):
    axes = attr(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = graph.const_value(node.input[1])
        if axes is None:
            return None
    return None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]


def apply(graph: Graph) -> bool:
    changed = False
    out = []
    for node in graph.nodes:
        out.append(node)
        if node.op_type != "ReduceMean" or node.domain not in ("", "ai.onnx") or not node.input:
            continue
        info = graph.info(node.input[0])
        # images (rank 4 and up): a 3-D mean over its last axis is a LayerNorm's, left to its rewrite
        if info is None or info[0] != TensorProto.FLOAT or info[1] is None or len(info[1]) < 4:
            continue
        rank = len(info[1])
        axes = _axes(graph, node)
        if axes is None or sorted(a % rank for a in axes) != list(range(2, rank)):
            continue
        keep = attr(node, "keepdims", 1)
        y = node.output[0]
        pooled = y if keep else graph.unique(y + "_pooled")
        node.op_type = "GlobalAveragePool"
        node.input[:] = node.input[:1]
        node.output[:] = [pooled]
        del node.attribute[:]
        if not keep:
            out.append(graph.make_node("Flatten", [pooled], [y], axis=1))
        changed = True
    if changed:
        graph.nodes = out
        graph.invalidate()
        graph.index()
    return changed
