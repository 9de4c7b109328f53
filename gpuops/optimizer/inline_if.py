"""An ``If`` whose condition is a constant (after constant folding, or Shape/Size of static shapes
made constant) is replaced by the nodes of the branch it takes. The branch's values get new names
unique in the model, its outputs become the ``If``'s outputs (through an Identity where a branch
output is not made by a node of the branch, or is listed twice), its initializers become
constants, and the subgraphs inside it read the renamed values."""

from __future__ import annotations

import numpy as np
import onnx

from ..dtypes import tensor_to_numpy
from .graph import Graph, attr, defined_names, subgraphs


def _rename_reads(g: onnx.GraphProto, names: dict[str, str]) -> None:
    """Rename the values a nested graph reads from outside (its own definitions shadow)."""
    names = {k: v for k, v in names.items() if k not in defined_names(g)}
    if not names:
        return
    for n in g.node:
        n.input[:] = [names.get(x, x) for x in n.input]
        for _, sub in subgraphs(n):
            _rename_reads(sub, names)
    for o in g.output:
        o.name = names.get(o.name, o.name)


def _inline(graph: Graph, node) -> list | None:
    """The nodes replacing ``node`` (an If with a constant condition), or None to keep it."""
    cond = graph.const_value(node.input[0]) if node.input and node.input[0] else None
    if cond is None or cond.size != 1:
        return None
    branch = attr(node, "then_branch" if bool(np.asarray(cond).reshape(())) else "else_branch")
    if branch is None or len(branch.output) != len(node.output) or branch.sparse_initializer or branch.input:
        return None
    produced = {o for n in branch.node for o in n.output if o}
    names = {x: graph.unique(x) for x in defined_names(branch)}
    tails = []
    for out, target in zip(branch.output, node.output):
        if not target:
            continue
        if out.name in produced and names[out.name] not in node.output:
            names[out.name] = target
        else:  # an initializer, an outer value, or an output listed twice
            tails.append(graph.make_node("Identity", [names.get(out.name, out.name)], [target]))
    for t in branch.initializer:
        graph.set_const(names[t.name], tensor_to_numpy(t))
    nodes = []
    for n in branch.node:
        c = onnx.NodeProto()
        c.CopyFrom(n)
        c.input[:] = [names.get(x, x) for x in c.input]
        c.output[:] = [names.get(x, x) for x in c.output]
        c.name = graph.unique(n.name or f"opt/{n.op_type}")
        for _, sub in subgraphs(c):
            _rename_reads(sub, names)
        nodes.append(c)
    return nodes + tails


def apply(graph: Graph) -> bool:
    out, changed = [], False
    for node in graph.nodes:
        inlined = None
        if node.op_type == "If" and node.domain in ("", "ai.onnx"):
            inlined = _inline(graph, node)
        if inlined is None:
            out.append(node)
        else:
            out.extend(inlined)
            changed = True
    if changed:
        graph.nodes = out
        graph.invalidate()
        graph.refresh_protected()
        graph.index()
    return changed
