"""A Scaler read only by a LinearClassifier or LinearRegressor is folded into its coefficients.

``Scaler`` computes ``(x - offset) * scale`` per column and the linear model ``s_c = sum_k z_k W_ck +
b_c``; so ``s_c = sum_k x_k (scale_k W_ck) + (b_c - sum_k offset_k scale_k W_ck)``: new coefficients
and intercepts, computed in float64 and rounded once to float32, and one node less (skl2onnx's
StandardScaler + LogisticRegression pipelines).

The rounding changes. Unfolded, each score is within about (F + 3) u of the exact one relative to
sum_k |(x_k - offset_k) scale_k W_ck| + |b_c| (u = 2^-24, F features: the subtraction, the product and
the sum each round); folded, relative to sum_k |x_k scale_k W_ck| + sum_k |offset_k scale_k W_ck| +
|b_c|. For features a few scaled units from their offsets (what a scaler is fitted for) the second is
larger by about the offsets in scaled units, |offset_k scale_k|: the fold applies only where that is at
most 64 for every feature (at most 6 of float32's 24 bits). Scores of a few units then move by ~1e-6
at most (onnxruntime's differ from exact sums by a few 1e-7); only a label whose two highest scores
are that close may change.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .graph import Graph, attr, set_attrs

_ML = "ai.onnx.ml"
MAX_OFFSET = 64.0
"""The largest |offset_k * scale_k| (a feature's offset in scaled units) the fold accepts."""


def _classes(node) -> int | None:
    """The linear model's rows of coefficients, as its op counts them; None when unknown."""
    if node.op_type == "LinearRegressor":
        return int(attr(node, "targets", 1))
    inter = attr(node, "intercepts") or []
    labels = attr(node, "classlabels_ints") or attr(node, "classlabels_strings") or []
    return len(inter) or len(labels) or None


def _fold(graph: Graph, scaler, model) -> bool:
    coef = attr(model, "coefficients")
    rows = _classes(model)
    if not coef or not rows or len(coef) % rows:
        return False
    W = np.asarray(coef, np.float32).astype(np.float64).reshape(rows, -1)
    F = W.shape[1]
    offset = np.asarray(attr(scaler, "offset", [0.0]), np.float32).reshape(-1)
    scale = np.asarray(attr(scaler, "scale", [1.0]), np.float32).reshape(-1)
    if offset.size not in (1, F) or scale.size not in (1, F):
        return False
    offset = np.broadcast_to(offset.astype(np.float64), (F,))
    scale = np.broadcast_to(scale.astype(np.float64), (F,))
    if not (np.isfinite(offset).all() and np.isfinite(scale).all()) or np.abs(offset * scale).max() > MAX_OFFSET:
        return False
    inter = np.asarray(attr(model, "intercepts") or [], np.float32).astype(np.float64)
    if model.op_type == "LinearRegressor" and inter.size != rows:
        if inter.size:  # (intercepts of another count are ignored: onnxruntime's reading)
            return False
        inter = np.zeros(rows)
    elif inter.size == 0:
        inter = np.zeros(rows)
    Wf = W * scale
    bf = inter - Wf @ offset
    Wf32, bf32 = Wf.astype(np.float32), bf.astype(np.float32)
    if not (np.isfinite(Wf32).all() and np.isfinite(bf32).all()):
        return False
    set_attrs(model, coefficients=Wf32.reshape(-1).tolist(), intercepts=bf32.tolist())
    model.input[0] = scaler.input[0]
    return True


def apply(graph: Graph) -> bool:
    done = []
    for node in graph.nodes:
        if node.op_type not in ("LinearClassifier", "LinearRegressor") or node.domain != _ML or not node.input:
            continue
        scaler = graph.producer.get(node.input[0])
        if scaler is None or scaler.op_type != "Scaler" or scaler.domain != _ML \
                or not graph.single_use(node.input[0]) or graph.elem_type(scaler.input[0]) != TensorProto.FLOAT:
            continue
        if _fold(graph, scaler, node):
            done.append(scaler)
    return graph.remove(*done)
