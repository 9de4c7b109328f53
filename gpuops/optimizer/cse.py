"""Common subexpression elimination: of two nodes with the same op, inputs and attributes, the
later one goes and its readers read the earlier one's outputs. Nondeterministic ops, nodes with
subgraphs and nodes that make protected values (graph outputs) are kept."""

from __future__ import annotations

from ..registry import canonical_domain
from .constant_folding import nondeterministic
from .graph import Graph, has_subgraph


def _key(node):
    attrs = tuple(sorted((a.name, a.SerializeToString()) for a in node.attribute))
    return canonical_domain(node.domain), node.op_type, tuple(node.input), len(node.output), attrs


def apply(graph: Graph) -> bool:
    seen: dict = {}
    removed = []
    for node in graph.nodes:
        if has_subgraph(node) or nondeterministic(node):
            continue
        if not node.output or not any(node.output):
            continue
        key = _key(node)
        first = seen.get(key)
        if first is None:
            seen[key] = node
            continue
        if any(o in graph.protected for o in node.output if o) or any(
                o and not f for o, f in zip(node.output, first.output)):
            continue
        for o, f in zip(node.output, first.output):
            if o:
                graph.rename_uses(o, f)
        removed.append(node)
    return graph.remove(*removed)
