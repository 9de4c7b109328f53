"""SiLU / Swish written out -> com.microsoft QuickGelu (``x * sigmoid(alpha * x)``; SiLU is alpha 1).

TorchScript, the dynamo exporter, tf2onnx (``tf.nn.swish``) and Paddle2ONNX (``silu``, ``swish``)
all emit ``Mul(x, Sigmoid(x))``, the operands in either order; CLIP's QuickGelu and a Swish with a
constant beta emit ``Mul(x, Sigmoid(Mul(x, alpha)))``. One node instead of two, and one array pass
fewer (:mod:`gpuops.ops.cpu.activation` computes it as ``x / (1 + exp(-alpha x))``). float32 only:
onnxruntime's CPU QuickGelu is float only.

Opset 22 and later also have ai.onnx Swish; QuickGelu keeps the rewrite valid at every opset and
in every onnxruntime that runs the model."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .graph import MS, Graph


def _alpha(graph: Graph, sig, x: str):
    """(alpha, scaling Mul or None) when ``sig`` computes sigmoid(alpha * x), else None."""
    if sig.input[0] == x:
        return 1.0, None
    m = graph.producer_of(sig.input[0], "Mul")
    if m is None or not graph.single_use(sig.input[0]) or x not in m.input:
        return None
    c = m.input[1] if m.input[0] == x else m.input[0]
    v = graph.const_value(c)
    if v is None or v.size != 1 or c == x:
        return None
    return float(np.asarray(v, np.float64).reshape(())), m


def apply(graph: Graph) -> bool:
    removed = []
    for mul in graph.nodes:
        if mul.op_type != "Mul" or mul.domain not in ("", "ai.onnx") or len(mul.input) != 2 or mul in removed:
            continue
        for x, s in ((mul.input[0], mul.input[1]), (mul.input[1], mul.input[0])):
            sig = graph.producer_of(s, "Sigmoid")
            if sig is None or not graph.single_use(s) or graph.elem_type(x) != TensorProto.FLOAT:
                continue
            found = _alpha(graph, sig, x)
            if found is None:
                continue
            alpha, scale = found
            mul.op_type, mul.domain = "QuickGelu", MS
            mul.input[:] = [x]
            del mul.attribute[:]
            mul.attribute.extend(graph.make_node("X", [], [], alpha=alpha).attribute)
            removed.extend(n for n in (sig, scale) if n is not None)
            graph.use_domain(MS)
            break
    return graph.remove(*removed)
