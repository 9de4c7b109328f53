"""Transposes moved down through layout-blind ops until they meet their inverse and cancel.

tf2onnx converts a Keras (NHWC) network to ONNX's NCHW Convs by wrapping each Conv in
``Transpose(0, 3, 1, 2) -> Conv -> Transpose(0, 2, 3, 1)`` and leaves the ops between two Convs in
NHWC; where its own transpose optimizer does not get through them (hard_swish, written out), a
Transpose pair stays around every activation and no activation reaches its Conv. Here a Transpose
with perm p moves below:

* an element-wise op of one tensor (Relu, Sigmoid, HardSwish, ... Clip with constant bounds),
* Add / Sub / Mul / Div with a constant (the constant transposed by p's inverse) or with another
  Transpose of the same perm (both inputs taken before their Transposes),
* ReduceMean (without keepdims where the kept axes stay in order, as a classifier's global pool:
  the Transpose then goes);

and a Transpose followed by its inverse cancels (the reader of the inverse reads the first
Transpose's input). A Transpose read by several nodes stays, but its inverse readers cancel. The
moves are kept only when they leave fewer Transposes than the graph had."""

from __future__ import annotations

import numpy as np

from .graph import Graph, attr

_UNARY = {"Relu", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "LeakyRelu", "Elu", "Selu", "Softplus",
          "Softsign", "Neg", "Abs", "Exp", "Erf", "Sqrt", "Reciprocal", "Identity", "Clip", "Cast"}
_BINARY = {"Add", "Sub", "Mul", "Div"}


def _perm(graph: Graph, t):
    if t is None or t.op_type != "Transpose" or t.domain not in ("", "ai.onnx"):
        return None
    p = attr(t, "perm")
    if not isinstance(p, (list, tuple)):
        return None
    p = [int(i) for i in p]
    return p if sorted(p) == list(range(len(p))) else None


def _inverse(p):
    return [int(i) for i in np.argsort(p)]


def _cancel(graph: Graph, t, p) -> bool:
    """Readers of an inverse Transpose of t's output read t's input instead."""
    done = False
    for c in list(graph.consumers.get(t.output[0], ())):
        q = _perm(graph, c)
        if q is not None and [p[i] for i in q] == list(range(len(p))):
            if c.output[0] in graph.protected:  # (a graph output keeps its name: an Identity makes it)
                c.op_type, c.input[0] = "Identity", t.input[0]
                del c.attribute[:]
            else:
                graph.rename_uses(c.output[0], t.input[0])
            done = True
    return done


def _sink(graph: Graph, t, p) -> int:
    """Move t below its one reader: 0 when it cannot, 1 when moved, 2 when moved and a Transpose
    went (t absorbed by a ReduceMean, or merged with the other input's Transpose)."""
    y = t.output[0]
    if not graph.single_use(y):
        return 0
    n = graph.consumers[y][0]
    if n.domain not in ("", "ai.onnx") or len(n.output) != 1 or not n.output[0]:
        return 0
    x = t.input[0]
    renames = n.output[0] in graph.protected  # a move renames n's output; an absorbing ReduceMean does not
    if renames and not (n.op_type == "ReduceMean" and not attr(n, "keepdims", 1)):
        return 0
    if n.op_type in _UNARY:
        if n.op_type == "Clip" and any(graph.const_value(b) is None or graph.const_value(b).size != 1
                                       for b in n.input[1:] if b):
            return 0
        if n.input[0] != y or y in n.input[1:]:
            return 0
        n.input[0] = x
        gone = 1
    elif n.op_type in _BINARY and len(n.input) == 2:
        i = list(n.input).index(y)
        other = n.input[1 - i]
        c = graph.const_value(other)
        if c is not None:
            if c.ndim > len(p):
                return 0
            c = c.reshape((1,) * (len(p) - c.ndim) + c.shape) if c.size > 1 else c
            n.input[1 - i] = graph.add_const(np.transpose(c, _inverse(p)) if c.size > 1 else c, other + "_transposed")
            n.input[i] = x
            gone = 1
        else:
            u = graph.producer.get(other)
            if _perm(graph, u) != p or not graph.single_use(other) or other == y:
                return 0
            n.input[:] = [x, u.input[0]] if i == 0 else [u.input[0], x]
            graph.remove(u)
            gone = 2
    elif n.op_type == "ReduceMean":
        axes = attr(n, "axes")
        if axes is None and len(n.input) > 1 and n.input[1]:
            axes = graph.const_value(n.input[1])
        if axes is None:
            return 0
        axes = sorted(int(a) % len(p) for a in np.asarray(axes).reshape(-1))
        kept = [p[j] for j in range(len(p)) if j not in axes]
        keepdims = attr(n, "keepdims", 1)
        if not keepdims and kept != sorted(kept):
            return 0  # the kept axes would come out in another order
        new = sorted(p[a] for a in axes)
        if attr(n, "axes") is not None:
            n.attribute.remove(next(a for a in n.attribute if a.name == "axes"))
            n.attribute.extend(graph.make_node("X", [], [], axes=new).attribute)
        else:
            n.input[1] = graph.add_const(np.array(new, np.int64), n.input[1] + "_transposed")
        n.input[0] = x
        if keepdims:  # the same rank: t goes below it
            gone = 1
        else:
            graph.rename_uses(y, x)  # (n only)
            graph.remove(t)
            return 2
    else:
        return 0
    # t now transposes n's output: n makes a fresh value, t makes n's old output name
    out = n.output[0]
    fresh = graph.unique(out + "_untransposed")
    n.output[0] = fresh
    t.input[0], t.output[0] = fresh, out
    nodes = [m for m in graph.nodes if m is not t]
    nodes.insert(nodes.index(n) + 1, t)
    graph.nodes = nodes
    graph.invalidate()
    graph.index()
    return gone


def _count(graph: Graph) -> int:
    return sum(1 for n in graph.nodes if n.op_type == "Transpose")


def apply(graph: Graph) -> bool:
    """Every Transpose goes down as far as it can, in rounds (one moving lets another through); the
    result is kept only when Transposes went, else the graph stays as written (other rewrites,
    attention's, match the order the exporters use)."""
    before = _count(graph)
    if not before:
        return False
    snapshot = graph.checkpoint()
    for _ in range(4 * len(graph.nodes) + 1):  # each move takes a Transpose one node down
        moved = False
        for name in [t.output[0] for t in graph.nodes if t.op_type == "Transpose"]:
            t = graph.producer.get(name)
            p = _perm(graph, t)
            if p is None or name in graph.protected:
                continue
            if _cancel(graph, t, p):
                graph.invalidate()
                graph.index()
                moved = True
            t = graph.producer.get(name)
            if t is not None and _sink(graph, t, p):
                moved = True
        if not moved:
            break
    dead = [n for n in graph.nodes if n.op_type == "Transpose" and all(graph.unused(o) for o in n.output)]
    graph.remove(*dead)
    if _count(graph) < before:
        return True
    graph.restore(snapshot)
    return False
