"""Mul and Add by a per-output-channel constant after a Conv with constant weights fold into the
weights and bias: Conv(X, W, B) * c = Conv(X, W * c, B * c) and Conv(X, W, B) + c = Conv(X, W, B + c),
for c a scalar or of shape (M, 1, ...) / (1, M, 1, ...) that does not widen the output. After an
inference BatchNormalization with constant scale and bias (densenet's BatchNormalization follows a
Concat), they fold into that scale and bias the same way."""

from __future__ import annotations

import numpy as np

from .fold_batchnorm import inference_batchnorm
from .graph import Graph


def _channel_vector(c: np.ndarray, rank: int, M: int):
    """c as an (M,) vector when it broadcasts along the channel axis of a rank-``rank`` output only."""
    if c.ndim > rank:
        return None
    shape = (1,) * (rank - c.ndim) + tuple(c.shape)
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, M):
        return None
    return np.broadcast_to(c.reshape(-1), (M,)).astype(np.float64)


def apply(graph: Graph) -> bool:
    removed = []
    for conv in graph.nodes:
        if conv.domain not in ("", "ai.onnx") or conv.op_type != "Conv" or len(conv.input) < 2:
            continue
        y = conv.output[0]
        if not graph.single_use(y):
            continue
        node = graph.consumers[y][0]
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Mul", "Add") or node in removed:
            continue
        other = node.input[1] if node.input[0] == y else node.input[0]
        W = graph.const_value(conv.input[1])
        c = graph.const_value(other)
        B = graph.const_value(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
        if W is None or c is None or W.dtype.kind != "f" or c.dtype != W.dtype or other == y:
            continue
        if len(conv.input) > 2 and conv.input[2] and B is None:
            continue
        M = W.shape[0]
        v = _channel_vector(c, W.ndim, M)
        if v is None:
            continue
        b = np.zeros(M) if B is None else B.astype(np.float64)
        inputs = list(conv.input) + [""] * (3 - len(conv.input))
        if node.op_type == "Mul":
            w = W.astype(np.float64) * v.reshape((M,) + (1,) * (W.ndim - 1))
            inputs[1] = graph.add_const(w.astype(W.dtype), conv.input[1] + "_mul")
            b = None if B is None else b * v
        else:
            b = b + v
        if b is not None:  # a bias-less Conv followed by Add gets the bias (Paddle2ONNX writes this)
            inputs[2] = graph.add_const(b.astype(W.dtype), (inputs[2] or y) + "_bias_" + node.op_type.lower())
        while inputs[-1] == "":
            inputs.pop()
        conv.input[:] = inputs
        conv.output[0] = node.output[0]
        removed.append(node)
    for bn in graph.nodes:
        if bn.domain in ("", "ai.onnx") and bn.op_type == "BatchNormalization" and bn not in removed:
            node = _into_batchnorm(graph, bn)
            if node is not None:
                removed.append(node)
    return graph.remove(*removed)


def _into_batchnorm(graph: Graph, bn):
    """Fold the Mul/Add after ``bn`` into its scale and bias; returns the folded node or None."""
    y = bn.output[0]
    if not inference_batchnorm(graph, bn) or not graph.single_use(y):
        return None
    node = graph.consumers[y][0]
    if node.domain not in ("", "ai.onnx") or node.op_type not in ("Mul", "Add"):
        return None
    other = node.input[1] if node.input[0] == y else node.input[0]
    scale, bias, c = (graph.const_value(x) for x in (bn.input[1], bn.input[2], other))
    info = graph.info(bn.input[0])
    if scale is None or bias is None or c is None or other == y or info is None or info[1] is None:
        return None
    if scale.dtype.kind != "f" or c.dtype != scale.dtype or bias.dtype != scale.dtype:
        return None
    v = _channel_vector(c, len(info[1]), scale.shape[0])
    if v is None:
        return None
    if node.op_type == "Mul":
        scale, bias = scale * v, bias * v
        bn.input[1] = graph.add_const(scale.astype(c.dtype), bn.input[1] + "_mul")
    else:
        bias = bias + v
    bn.input[2] = graph.add_const(bias.astype(c.dtype), bn.input[2] + "_" + node.op_type.lower())
    bn.output[0] = node.output[0]
    return node
