"""BatchNormalization (inference form) after a Conv, ConvTranspose or Gemm with constant weights
is folded into them: with s = scale / sqrt(var + epsilon), the weights of output channel m are
scaled by s[m] and the bias becomes (B - mean) * s + bias. Computed in float64, stored in the
weights' dtype."""

from __future__ import annotations

import numpy as np

from .graph import Graph, attr, set_attrs


def inference_batchnorm(graph: Graph, bn) -> bool:
    """``bn`` normalizes with its stored statistics (inference), per channel, its other outputs unread."""
    if len(bn.input) < 5 or any(o for o in bn.output[1:] if not graph.unused(o)):
        return False
    if attr(bn, "training_mode", 0) or attr(bn, "spatial", 1) != 1:
        return False
    return graph.opset() >= 7 or attr(bn, "is_test", 0) != 0


def bn_params(graph: Graph, bn):
    if not inference_batchnorm(graph, bn):
        return None
    vals = [graph.const_value(x) for x in bn.input[1:5]]
    if any(v is None or v.ndim != 1 for v in vals):
        return None
    scale, bias, mean, var = (v.astype(np.float64) for v in vals)
    s = scale / np.sqrt(var + float(attr(bn, "epsilon", 1e-5)))
    return s, bias - mean * s


def _fold(graph: Graph, node, s, shift) -> bool:
    """Scale ``node``'s output channels by s and add shift (in place). False if not applicable."""
    W = graph.const_value(node.input[1])
    if W is None or W.dtype.kind != "f" or node.input[1] in graph.protected:
        return False
    B = graph.const_value(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if len(node.input) > 2 and node.input[2] and B is None:
        return False
    M = s.shape[0]
    w = W.astype(np.float64)
    if node.op_type == "Conv":
        if W.shape[0] != M:
            return False
        w = w * s.reshape((M,) + (1,) * (W.ndim - 1))
        b = shift if B is None else (B.astype(np.float64) * s + shift) if B.shape == (M,) else None
    elif node.op_type == "ConvTranspose":
        g = int(attr(node, "group", 1))
        if W.ndim < 3 or W.shape[1] * g != M or W.shape[0] % g:
            return False
        shaped = w.reshape((g, W.shape[0] // g, W.shape[1], -1)) * s.reshape((g, 1, M // g, 1))
        w = shaped.reshape(W.shape)
        b = shift if B is None else (B.astype(np.float64) * s + shift) if B.shape == (M,) else None
    else:  # Gemm: Y = alpha A B' + beta C, channels along B's output axis
        if W.ndim != 2:
            return False
        trans_b = int(attr(node, "transB", 0))
        if W.shape[0 if trans_b else 1] != M:
            return False
        w = w * float(attr(node, "alpha", 1.0)) * (s[:, None] if trans_b else s[None, :])
        if B is None:
            b = shift
        else:
            if B.ndim > 2:
                return False
            b = B.astype(np.float64) * float(attr(node, "beta", 1.0)) * s + shift
        set_attrs(node, alpha=None, beta=None)
    if b is None:
        return False
    inputs = list(node.input) + [""] * (3 - len(node.input))
    inputs[1] = graph.add_const(w.astype(W.dtype), inputs[1] + "_bn")
    inputs[2] = graph.add_const(b.astype(W.dtype), (inputs[2] or node.output[0]) + "_bias_bn")
    node.input[:] = inputs
    return True


def apply(graph: Graph) -> bool:
    removed = []
    for node in graph.nodes:
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Conv", "ConvTranspose", "Gemm"):
            continue
        y = node.output[0]
        bn = graph.only_consumer(y, "BatchNormalization")
        if bn is None or bn.input[0] != y:
            continue
        params = bn_params(graph, bn)
        if params is None or not _fold(graph, node, *params):
            continue
        node.output[0] = bn.output[0]
        removed.append(bn)
    return graph.remove(*removed)
