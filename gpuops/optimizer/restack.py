"""A tensor taken apart along an axis and stacked back whole -> the tensor itself.

``Concat(Unsqueeze(Gather(x, 0)), ..., Unsqueeze(Gather(x, n - 1)), axis=a)``, each Gather of a scalar
index on axis ``a`` and each Unsqueeze restoring that axis, where ``x`` has exactly ``n`` entries on
``a``, is ``x``: the Concat becomes ``Identity(x)`` (removed by :mod:`.eliminate_noops`, the Gathers
and Unsqueezes by :mod:`.dead_code` when nothing else reads them). GPT-2 exports keep their past key
and value stacked as one (2, batch, heads, past, head) input and output; once its attention is one
node, what is left around it is such unstacking and restacking.
"""

from __future__ import annotations

import numpy as np

from .graph import Graph, attr


def _axes(graph: Graph, node) -> list[int] | None:
    axes = attr(node, "axes")
    if axes is None and len(node.input) > 1:
        axes = graph.const_value(node.input[1])
    return None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]


def _part(graph: Graph, name: str, axis: int):
    """(x, i) when ``name`` is Unsqueeze(Gather(x, i, axis), axes=[axis]) of a scalar constant i
    (axis counted from the front, as the Concat's)."""
    u = graph.producer_of(name, "Unsqueeze")
    if u is None or _axes(graph, u) != [axis]:
        return None
    g = graph.producer_of(u.input[0], "Gather")
    if g is None or attr(g, "axis", 0) != axis:
        return None
    i = graph.const_value(g.input[1])
    if i is None or i.ndim != 0 or i.dtype.kind not in "iu":
        return None
    return g.input[0], int(i)


def apply(graph: Graph) -> bool:
    changed = False
    for at, node in enumerate(graph.nodes):
        if node.op_type != "Concat" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        axis = attr(node, "axis")
        if axis is None or axis < 0:
            continue
        parts = [_part(graph, x, axis) for x in node.input]
        if any(p is None for p in parts):
            continue
        x = parts[0][0]
        shape = graph.shape(x)
        n = len(parts)
        if any(p != (x, i) for i, p in enumerate(parts)) or shape is None or len(shape) <= axis or shape[axis] != n:
            continue
        graph.nodes[at] = graph.make_node("Identity", [x], list(node.output))
        changed = True
    if changed:
        graph.invalidate()
        graph.index()
    return changed
