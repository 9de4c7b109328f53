"""Constant folding: a node whose inputs are all constant is evaluated once, at plan time, with
gpuops' own op on the cpu device, and its outputs become constants.

Not folded: nondeterministic ops (Random*, Bernoulli, Multinomial, Dropout), nodes with subgraphs, nodes that
produce a graph output (it keeps its producer), results that are not plain tensors (sequences,
optionals), results larger than the size cap (``fold_limit`` bytes for all of a node's outputs
together), and nodes whose evaluation fails: they are left for run time, where the error names
the node as usual.
"""

from __future__ import annotations

import numpy as np

from ..device import get_device
from ..dtypes import onnx_dtype
from ..onnx.plan import PlanBuilder
from .graph import Graph, has_subgraph

_RANDOM = ("Random", "Bernoulli", "Multinomial", "Dropout")
FOLD_LIMIT = 1 << 30  # default size cap in bytes of a node's folded outputs


def nondeterministic(node) -> bool:
    """Random* ops, Bernoulli, Multinomial, and the Dropout family (random in training mode)."""
    return any(k in node.op_type for k in _RANDOM)


def evaluate(graph: Graph, node, builder: PlanBuilder | None = None):
    """The node's outputs computed on the cpu device from constant inputs (raises on failure)."""
    builder = builder or PlanBuilder(graph.opsets, "cpu", {})
    step = builder._step(node, set(), graph.opsets)
    args = [graph.value(x) if x else None for x in node.input]
    for i in step.impl.host_inputs:
        if i < len(args) and args[i] is not None:
            args[i] = np.asarray(args[i])
    while args and args[-1] is None:
        args.pop()
    result = step.impl.fn(get_device("cpu").xp, *args, **step.attrs)
    return result if isinstance(result, tuple) else (result,)


def foldable(graph: Graph, node) -> bool:
    if nondeterministic(node):
        return False
    if has_subgraph(node) or not any(node.output):
        return False
    if any(o in graph.protected for o in node.output if o):
        return False
    return all(graph.is_const(x) for x in node.input if x)


def apply(graph: Graph, fold_limit: int = FOLD_LIMIT) -> bool:
    builder = PlanBuilder(graph.opsets, "cpu", {})
    folded = []
    for node in graph.nodes:
        if not foldable(graph, node):
            continue
        try:
            outs = evaluate(graph, node, builder)
        except Exception:
            continue  # left for run time
        if len(outs) < len(node.output) or not all(_tensor(outs[i]) for i, o in enumerate(node.output) if o):
            continue
        if sum(np.asarray(outs[i]).nbytes for i, o in enumerate(node.output) if o) > fold_limit:
            continue
        for i, o in enumerate(node.output):
            if o:
                graph.set_const(o, np.asarray(outs[i]))
        folded.append(node)
    return graph.remove(*folded)


def _tensor(value) -> bool:
    if not isinstance(value, (np.ndarray, np.generic)):
        return False
    try:
        onnx_dtype(np.asarray(value).dtype)
    except Exception:
        return False
    return True
