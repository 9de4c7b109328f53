"""Dead code: nodes none of whose outputs is read (by a node, a subgraph or as a graph output)
are removed, e.g. a mask computation that every fused attention layer stopped reading."""

from __future__ import annotations

from .graph import Graph


def apply(graph: Graph) -> bool:
    removed_any = False
    while True:
        dead = [n for n in graph.nodes if n.output and all(graph.unused(o) for o in n.output)]
        if not dead:
            return removed_any
        removed_any = graph.remove(*dead)
