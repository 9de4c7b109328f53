"""Structural checks of an MDF graph, before anything is compiled: ids, edges, conditions, cycles.

Errors name the element at fault. Expressions, functions and their arguments are checked when
they compile (:mod:`gpuops.mdf.session`), where the names each one may read are known.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..errors import ModelError
from .expr import MAX_ELEMENTS


def _duplicates(ids) -> list:
    seen, dup = set(), []
    for i in ids:
        if i in seen and i not in dup:
            dup.append(i)
        seen.add(i)
    return dup


def validate_graph(graph) -> dict[str, set[str]]:
    """Check ``graph``; returns its dependency dict (receiver -> senders) used for scheduling."""
    where = f"graph {graph.id!r}"
    nodes = {n.id: n for n in graph.nodes}
    if dup := _duplicates(n.id for n in graph.nodes):
        raise ModelError(f"{where}: duplicate node id(s) {dup}")
    for n in graph.nodes:
        names = [p.id for p in n.input_ports] + [p.id for p in n.parameters] + [f.id for f in n.functions]
        if dup := _duplicates(names):
            raise ModelError(f"node {n.id!r}: id(s) {dup} used more than once among its input ports, "
                             "parameters and functions")
        if dup := _duplicates(p.id for p in n.output_ports):
            raise ModelError(f"node {n.id!r}: duplicate output port id(s) {dup}")
        for p in n.input_ports:
            if p.reduce not in (None, "overwrite", "add", "multiply"):
                raise ModelError(f"node {n.id!r}, input port {p.id!r}: unknown reduce {p.reduce!r} "
                                 "(overwrite, add or multiply)")
        for kind, ports in (("input", n.input_ports), ("output", n.output_ports)):
            for p in ports:
                if p.shape is not None:
                    check_shape(p.shape, f"node {n.id!r}, {kind} port {p.id!r}")
    deps = {n.id: set() for n in graph.nodes}
    for e in graph.edges:
        what = f"edge {e.id!r}"
        for role, nid in (("sender", e.sender), ("receiver", e.receiver)):
            if nid not in nodes:
                raise ModelError(f"{what}: unknown {role} node {nid!r}; the nodes are {sorted(nodes)}")
        outs = [p.id for p in nodes[e.sender].output_ports]
        if e.sender_port not in outs:
            raise ModelError(f"{what}: node {e.sender!r} has no output port {e.sender_port!r} (it has {outs})")
        ins = {p.id: p for p in nodes[e.receiver].input_ports}
        if e.receiver_port not in ins:
            raise ModelError(f"{what}: node {e.receiver!r} has no input port {e.receiver_port!r} "
                             f"(it has {sorted(ins)})")
        if e.parameters and "weight" in e.parameters:
            check_weight(e.parameters["weight"], what)
        if ins[e.receiver_port].default_value is None:  # an edge into a port with a default is not a dependency
            deps[e.receiver].add(e.sender)
    conditions = graph.conditions
    if conditions is not None:
        for nid in (conditions.node_specific or {}):
            if nid not in nodes:
                raise ModelError(f"{where}: a condition is given for unknown node {nid!r}")
    cycle = find_cycle(deps)
    if cycle:
        path = " -> ".join(cycle + [cycle[0]])
        raise ModelError(f"{where}: the edges {path} form a cycle and no input port on it has a "
                         "default_value to start from; give one of these input ports a default_value")
    return deps


def check_shape(shape, where: str) -> None:
    """A port shape: non-negative integer dimensions, at most ``MAX_ELEMENTS`` elements in all."""
    dims = list(shape) if isinstance(shape, (list, tuple)) else None
    if dims is None or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 0
                               for d in dims):
        raise ModelError(f"{where}: shape {shape!r} is not a list of non-negative integers")
    if math.prod(dims) > MAX_ELEMENTS:
        raise ModelError(f"{where}: shape {list(dims)} has {math.prod(dims)} elements (at most {MAX_ELEMENTS})")


def check_weight(weight, where: str) -> None:
    """An edge weight: a number or a numeric array (nested lists)."""
    if isinstance(weight, numbers.Number) and not isinstance(weight, complex):
        return
    try:
        a = np.asarray(weight) if isinstance(weight, (list, tuple, np.ndarray)) else None
    except ValueError:  # ragged
        a = None
    if a is None or a.dtype.kind not in "biuf" or a.size > MAX_ELEMENTS:
        raise ModelError(f"{where}: weight {weight!r:.80} is not a number or a numeric array")


def find_cycle(deps: dict[str, set[str]]) -> list[str]:
    """Nodes on one dependency cycle, in sender -> receiver order ([] when acyclic)."""
    succ = {n: [] for n in deps}
    for receiver, senders in deps.items():
        for s in senders:
            succ[s].append(receiver)
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    for start in deps:
        if state.get(start):
            continue
        stack, path = [(start, iter(succ[start]))], [start]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):]
            elif not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(succ[nxt])))
                path.append(nxt)
    return []


def toposort_levels(deps: dict[str, set[str]], order: list[str]) -> list[list[str]]:
    """Consideration sets as graph-scheduler (toposort) makes them; each in ``order``."""
    rank = {n: i for i, n in enumerate(order)}
    remaining = {n: set(s) for n, s in deps.items()}
    levels = []
    while remaining:
        ready = sorted((n for n, s in remaining.items() if not s), key=rank.__getitem__)
        levels.append(ready)
        for n in ready:
            del remaining[n]
        for s in remaining.values():
            s.difference_update(ready)
    return levels
