"""A Mul by a constant along the last axis after a MatMul with constant weights (and its bias Add)
folds into the weights and bias: (x W + b) * c = x (W * c) + b * c, for c a scalar or a vector over
W's columns (any leading axes of size 1 that do not widen the output). ConvNeXt's layer scale
(``gamma * Linear(x)``, channels last) is this Mul. Computed in float64, stored in the weights'
dtype."""

from __future__ import annotations

import numpy as np

from .graph import Graph


def _column_vector(graph: Graph, c: np.ndarray, out: str, N: int):
    """c as an (N,) vector when it broadcasts along the last axis of ``out`` only."""
    if c.size == 1:
        return np.full(N, float(c.reshape(())))
    rank = len((graph.info(out) or (None, ()))[1] or ())
    if c.shape[-1] != N or any(d != 1 for d in c.shape[:-1]) or (c.ndim > 1 and c.ndim > rank):
        return None
    return c.reshape(N).astype(np.float64)


def apply(graph: Graph) -> bool:
    removed = []
    for mul in graph.nodes:
        if mul.op_type != "Mul" or mul.domain not in ("", "ai.onnx") or len(mul.input) != 2 or mul in removed:
            continue
        for a, k in ((mul.input[0], mul.input[1]), (mul.input[1], mul.input[0])):
            c = graph.const_value(k)
            if c is None or a == k or not graph.single_use(a):
                continue
            add = graph.producer_of(a, "Add")
            mm_out, bias = a, None
            if add is not None:
                for m, b in ((add.input[0], add.input[1]), (add.input[1], add.input[0])):
                    if graph.const_value(b) is not None and graph.producer_of(m, "MatMul") is not None:
                        mm_out, bias = m, b
                        break
                else:
                    continue
            mm = graph.producer_of(mm_out, "MatMul")
            W = graph.const_value(mm.input[1]) if mm is not None and graph.single_use(mm_out) else None
            if W is None or W.ndim != 2 or W.dtype.kind != "f" or c.dtype != W.dtype or mm.input[1] in graph.protected:
                continue
            v = _column_vector(graph, c, mul.output[0], W.shape[1])
            B = graph.const_value(bias) if bias else None
            if v is None or (B is not None and (B.dtype != W.dtype or B.shape[-1:] != (W.shape[1],)
                                                or any(d != 1 for d in B.shape[:-1]))):
                continue
            mm.input[1] = graph.add_const((W.astype(np.float64) * v).astype(W.dtype), mm.input[1] + "_scaled")
            last = mm
            if add is not None:
                i = list(add.input).index(bias)
                add.input[i] = graph.add_const((B.astype(np.float64) * v.reshape((1,) * (B.ndim - 1) + (-1,)))
                                               .astype(B.dtype), bias + "_scaled")
                last = add
            last.output[0] = mul.output[0]
            removed.append(mul)
            break
    return graph.remove(*removed)
