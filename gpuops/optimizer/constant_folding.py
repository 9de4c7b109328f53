"""Constant folding: a node whose inputs are all constant is evaluated once, at plan time, with
gpuops' own op on the cpu device (:func:`gpuops.executor.evaluate.evaluate_node`: the op called as a
run calls it), and its outputs become constants.

Not folded: nondeterministic ops (Random*, Bernoulli, Multinomial, Dropout), nodes with subgraphs, nodes that
produce a graph output (it keeps its producer), results that are not plain tensors (sequences,
optionals), results larger than the size cap (``fold_limit`` bytes for all of a node's outputs
together), and nodes whose evaluation fails: they are left for run time, where the error names
the node as usual.
"""

from __future__ import annotations

import numpy as np

from ..executor.evaluate import evaluate_node, is_tensor, nondeterministic
from .graph import Graph, has_subgraph

FOLD_LIMIT = 1 << 30  # default size cap in bytes of a node's folded outputs


def evaluate(graph: Graph, node) -> tuple:
    """The node's outputs computed on the cpu device from constant inputs (raises on failure)."""
    return evaluate_node(node, graph.opsets, [graph.value(x) if x else None for x in node.input])


def foldable(graph: Graph, node) -> bool:
    if nondeterministic(node):
        return False
    if has_subgraph(node) or not any(node.output):
        return False
    if any(o in graph.protected for o in node.output if o):
        return False
    return all(graph.is_const(x) for x in node.input if x)


def apply(graph: Graph, fold_limit: int = FOLD_LIMIT) -> bool:
    folded = []
    for node in graph.nodes:
        if not foldable(graph, node):
            continue
        try:
            outs = evaluate(graph, node)
        except Exception:
            continue  # left for run time
        if len(outs) < len(node.output) or not all(is_tensor(outs[i]) for i, o in enumerate(node.output) if o):
            continue
        if sum(np.asarray(outs[i]).nbytes for i, o in enumerate(node.output) if o) > fold_limit:
            continue
        for i, o in enumerate(node.output):
            if o:
                graph.set_const(o, np.asarray(outs[i]))
        folded.append(node)
    return graph.remove(*folded)

