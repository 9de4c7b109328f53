"""Self-attention whose heads are split and merged by any chain of layout ops -> com.microsoft Attention,
once the shapes are static (a shape-specialized plan's graph).

torch's ``nn.MultiheadAttention`` (and ``nn.TransformerEncoder``, ViTs) exports its attention as one
packed projection of a sequence-major input, ``Transpose(x, (1, 0, 2)) @ W_in + b_in``, taken apart by
``Reshape``, ``Unsqueeze``, ``Transpose``, ``Squeeze`` and three ``Gather`` s, each head group reshaped
and transposed again; the context goes back the same way. :mod:`.attention` matches the BERT form of
those chains; this rewrite matches any of them by what they do: with every shape static, index labels
(``arange`` over the projection's output) are carried through the chain on the host, and the chain is
replaced only where the labels arrive exactly as the Attention op's own head split puts them (and, for
the context, as its merged output, batch- or sequence-major).

Matched: ``Softmax(last axis)`` of ``Q' K'^T`` (a MatMul, or a FusedMatMul with transB), scaled by
constants; ``MatMul(softmax, V')``; Q', K' and V' made by layout ops from ``x' @ W + b`` (one packed or
three projections, constant W and b) where x' is a 3-D ``x`` (batch, sequence, hidden) or its
``Transpose (1, 0, 2)``; no mask. The layout ops: Reshape, Transpose, Squeeze, Unsqueeze, and Gather or
Slice of constant indices.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from .attention import _scaled, _scores
from .graph import MS, Graph, attr

_LAYOUT = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Gather", "Slice")


def _ints(graph: Graph, node, attr_name: str, index: int):
    v = attr(node, attr_name)
    if v is None and len(node.input) > index and node.input[index]:
        v = graph.const_value(node.input[index])
        if v is None:
            raise LookupError
    return None if v is None else [int(a) for a in np.asarray(v).reshape(-1)]


def _apply_layout(graph: Graph, node, x: np.ndarray) -> np.ndarray:
    """``node`` (a layout op of constant shape arguments) applied to the labels ``x``; LookupError when
    an argument is not constant."""
    op = node.op_type
    if op == "Reshape":
        shape = graph.shape(node.output[0])
        if shape is None:
            raise LookupError
        return x.reshape(shape)
    if op == "Transpose":
        perm = attr(node, "perm")
        return np.transpose(x, None if perm is None else list(perm))
    if op in ("Squeeze", "Unsqueeze"):
        shape = graph.shape(node.output[0])
        if shape is None:
            raise LookupError
        return x.reshape(shape)  # (labels do not move: same order, axes of size 1 only)
    if op == "Gather":
        i = graph.const_value(node.input[1])
        if i is None:
            raise LookupError
        return np.take(x, i.astype(np.int64), axis=attr(node, "axis", 0))
    if op == "Slice":
        starts, ends = _ints(graph, node, "starts", 1), _ints(graph, node, "ends", 2)
        axes = _ints(graph, node, "axes", 3) or list(range(len(starts)))
        steps = _ints(graph, node, "steps", 4) or [1] * len(starts)
        index = [slice(None)] * x.ndim
        for a, s, e, st in zip(axes, starts, ends, steps):
            index[a] = slice(s, e, st)
        return x[tuple(index)]
    raise LookupError


def _is_layout(node) -> bool:
    return node is not None and node.op_type in _LAYOUT and node.domain in ("", "ai.onnx")


def _chain_back(graph: Graph, name: str, chain: dict) -> str:
    """The value a run of layout ops makes ``name`` from (its nodes added to ``chain``)."""
    while True:
        n = graph.producer.get(name)
        if not _is_layout(n) or name in graph.protected:
            return name
        chain[id(n)] = n
        name = n.input[0]


def _projection(graph: Graph, name: str):
    """(x', W, b, [MatMul, Add]) of ``name = x' @ W + b`` with constant 2-D W and b."""
    add = graph.producer_of(name, "Add")
    if add is None:
        return None
    for mm_out, b in ((add.input[0], add.input[1]), (add.input[1], add.input[0])):
        mm = graph.producer_of(mm_out, "MatMul")
        W, B = (graph.const_value(mm.input[1]), graph.const_value(b)) if mm is not None else (None, None)
        if W is not None and B is not None and W.ndim == 2 and B.shape == (W.shape[1],) and \
                graph.consumers.get(mm_out) == [add]:
            return mm.input[0], W, B, [mm, add]
    return None


def _labels(graph: Graph, chain: dict, start: dict) -> dict:
    """Labels of every value the ``chain`` nodes make, from those of ``start`` (name -> array), in the
    graph's node order."""
    values = dict(start)
    for n in graph.nodes:
        if id(n) in chain and n.input[0] in values:
            values[n.output[0]] = _apply_layout(graph, n, values[n.input[0]])
    return values


def _match(graph: Graph, sm):
    if attr(sm, "axis", -1) not in (-1, 3):
        return None
    scores_shape = graph.shape(sm.input[0])
    pv = graph.only_consumer(sm.output[0], "MatMul")
    if scores_shape is None or len(scores_shape) != 4 or pv is None or pv.input[0] != sm.output[0]:
        return None
    Bn, N, S, T = scores_shape
    if S != T:
        return None
    nodes = [sm, pv]
    scores, scale = _scaled(graph, sm.input[0], nodes)
    product = _scores(graph, scores, nodes)
    if product is None:
        return None
    qk, alpha, k_as_is = product
    qa, qs = _scaled(graph, qk.input[0], nodes)
    ka, ks = _scaled(graph, qk.input[1], nodes)
    chain: dict = {}
    srcs = [_chain_back(graph, v, chain) for v in (qa, ka, pv.input[1])]
    projections = {s: _projection(graph, s) for s in srcs}
    if any(p is None for p in projections.values()):
        return None
    xs = {p[0] for p in projections.values()}
    if len(xs) != 1:
        return None
    (xp_,) = xs
    x, seq_major = xp_, False
    t = graph.producer_of(xp_, "Transpose")
    if t is not None and list(attr(t, "perm", [])) == [1, 0, 2]:  # (left to dead_code once unread)
        x, seq_major = t.input[0], True
    xshape = graph.shape(x)
    if xshape is None or len(xshape) != 3 or xshape[:2] != (Bn, S) or graph.elem_type(x) != TensorProto.FLOAT:
        return None
    D = xshape[2]
    # the packed weight, Q | K | V, and where each source sits in it
    if len(projections) == 1:
        (_, W, b, proj), = projections.values()
        if W.shape[0] != D or W.shape[1] % 3:
            return None
        hidden = hv = W.shape[1] // 3
        offsets = {srcs[0]: 0}
        proj_nodes = proj
    elif len(projections) == 3:
        (_, Wq, bq, pq), (_, Wk, bk, pk), (_, Wv, bv, pvn) = (projections[s] for s in srcs)
        if Wq.shape != Wk.shape or Wq.shape[0] != D or Wv.shape[0] != D:
            return None
        hidden, hv = Wq.shape[1], Wv.shape[1]
        W, b = np.concatenate([Wq, Wk, Wv], axis=1), np.concatenate([bq, bk, bv])
        offsets = {srcs[0]: 0, srcs[1]: hidden, srcs[2]: 2 * hidden}
        proj_nodes = pq + pk + pvn
    else:
        return None
    if hidden % N or hv % N:
        return None
    H, Hv = hidden // N, hv // N
    width = 2 * hidden + hv
    std = np.arange(Bn * S * width, dtype=np.int64).reshape(Bn, S, width)  # the Attention's packed q|k|v

    def source_labels(src):
        cols = std[..., offsets[src]:offsets[src] + graph.shape(src)[-1]] if len(projections) == 3 else std
        return cols.transpose(1, 0, 2) if seq_major else cols

    try:
        values = _labels(graph, chain, {s: source_labels(s) for s in srcs})
        Qh = std[..., :hidden].reshape(Bn, S, N, H).transpose(0, 2, 1, 3)
        Kh = std[..., hidden:2 * hidden].reshape(Bn, S, N, H).transpose(0, 2, 1, 3)
        Vh = std[..., 2 * hidden:].reshape(Bn, S, N, Hv).transpose(0, 2, 1, 3)
        want = {qa: Qh, ka: Kh if k_as_is else Kh.transpose(0, 1, 3, 2), pv.input[1]: Vh}
        if any(v not in values or values[v].shape != w.shape or not np.array_equal(values[v], w)
               for v, w in want.items()):
            return None
        # the context (B, N, S, Hv) back through layout ops
        out_chain: dict = {}
        end = pv.output[0]
        while (c := graph.consumers.get(end, [])) and len(c) == 1 and _is_layout(c[0]) and \
                end not in graph.protected and c[0].input[0] == end:
            out_chain[id(c[0])] = c[0]
            end = c[0].output[0]
        ctx = np.arange(Bn * N * S * Hv, dtype=np.int64).reshape(Bn, N, S, Hv)
        got = _labels(graph, out_chain, {pv.output[0]: ctx}).get(end)
    except (LookupError, ValueError, IndexError):
        return None
    merged = ctx.transpose(0, 2, 1, 3).reshape(Bn, S, hv)
    if got is None:
        return None
    if np.array_equal(got.reshape(-1), merged.reshape(-1)):
        order = "batch"
    elif np.array_equal(got.reshape(-1), merged.transpose(1, 0, 2).reshape(-1)):
        order = "sequence"
    else:
        return None
    inside = {id(n) for n in nodes} | set(chain) | set(out_chain) | {id(n) for n in proj_nodes}
    for n in list(chain.values()) + list(out_chain.values()) + proj_nodes + nodes:
        for o in n.output:
            if o == end:
                continue
            if o in graph.protected or any(id(c) not in inside for c in graph.consumers.get(o, ())):
                return None
    return dict(nodes=nodes + list(chain.values()) + list(out_chain.values()) + proj_nodes, x=x, W=W, b=b, N=N,
                head=H, scale=scale * qs * ks * alpha, sizes=None if hv == hidden else [hidden, hidden, hv],
                end=end, end_shape=graph.shape(end), order=order, batch=Bn, seq=S, hv=hv)


def apply(graph: Graph) -> bool:
    removed: list = []
    for sm in list(graph.nodes):
        if sm.op_type != "Softmax" or sm.domain not in ("", "ai.onnx") or any(sm is r for r in removed):
            continue
        m = _match(graph, sm)
        if m is None or m["end_shape"] is None or any(n is r for n in m["nodes"] for r in removed):
            continue
        attrs = {"num_heads": m["N"], "qkv_hidden_sizes": m["sizes"]}
        if not math.isclose(m["scale"], 1 / math.sqrt(m["head"]), rel_tol=1e-6):
            attrs["scale"] = m["scale"]
        end, (Bn, S, hv) = m["end"], (m["batch"], m["seq"], m["hv"])
        att = graph.unique(end + "_attention")
        new = [graph.make_node("Attention", [m["x"], graph.add_const(m["W"], "attention_qkv_weight"),
                                             graph.add_const(m["b"], "attention_qkv_bias")], [att], domain=MS,
                               **attrs)]
        if m["order"] == "sequence":
            new.append(graph.make_node("Transpose", [att], [graph.unique(att + "_sequence_major")], perm=[1, 0, 2]))
        last = new[-1].output[0]
        if tuple(m["end_shape"]) != ((Bn, S, hv) if m["order"] == "batch" else (S, Bn, hv)):
            new.append(graph.make_node("Reshape", [last, graph.add_const(np.array(m["end_shape"], np.int64),
                                                                          "shape")], [end]))
        else:
            new[-1].output[0] = end
        # after the last node it replaces: x exists by then, and end's readers all come later
        at = max(i for i, n in enumerate(graph.nodes) if any(n is r for r in m["nodes"]))
        graph.nodes[at + 1:at + 1] = new
        removed.extend(m["nodes"])
        graph.use_domain(MS)
        graph.index()
    return graph.remove(*removed)
