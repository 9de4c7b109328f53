"""Self-attention written out -> com.microsoft Attention or QAttention (one node, packed Q/K/V projection).

Matched, as TorchScript and the dynamo exporter write a BERT / GPT-style layer (without past)::

    q|k|v = MatMul(x, W) + b  ->  Reshape (B, S, N, H)  ->  Transpose (0, 2, 1, 3)
    K^T   = Transpose (0, 2, 3, 1) of the reshaped k, or Transpose (0, 1, 3, 2) of k's heads
    scores = MatMul(Q, K^T), scaled by Div/Mul with a constant (or Q and K each by a constant)
    [+ (1 - Cast(Unsqueeze(mask))) * filter]   the padding mask of a raw (B, T) 0/1 input
    [+ a 4-D additive bias (b, n, S, T)]       attention_bias
    [Where(causal, scores, fill) or + causal]  a constant lower-triangular mask: unidirectional
    Softmax(last axis) -> MatMul(., V) -> Transpose (0, 2, 1, 3) -> Reshape (B, S, N * Hv)

With past key/values (generation, GPT-2 style): K's and V's heads are each Concat(past, heads,
axis=2) first, and those concatenations (the present values, usually graph outputs) are remade
from the Attention's present output; the two pasts are stacked into its (2, B, N, P, H) past.

Q, K and V must read the same 3-D x with constant weights and biases. Dynamically quantized projections
(com.microsoft MatMulIntegerToFloat of one DynamicQuantizeLinear's outputs, constant 8-bit weights, scales,
zero points and biases; equal sizes, no past or additive bias) make a com.microsoft QAttention instead: the
weights side by side, their scales and zero points one value or one per column. The padding mask becomes
``mask_index`` (cast to int32, as onnxruntime takes it) with ``mask_filter_value`` = filter.

Dynamic batch and sequence axes: a Reshape target may be computed, ``Concat`` of the batch and
sequence sizes read off a tensor (``Unsqueeze(Gather(Shape(t), i))`` as TorchScript writes it,
``Shape(t, start=i, end=i + 1)`` as the dynamo exporter does) and the constant head sizes. Each
read size must be provably x's size on that axis: the same axis of x or of a value of the
pattern, or an axis of the same symbolic dim (``dim_param``); 0 (copy) and one -1 also do. The
Shape nodes that read values of the pattern are then made to read x. Without past key/values
and causal masks only (their checks need static sizes).

One module, past 500 lines: the float and the dynamically quantized forms share one matcher of the
scores, mask and head layouts (:func:`_match`); only their projections differ.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto, helper

from .graph import MS, Graph, attr

_MINUS_BIG = -1e4  # a fill at or below this masks a key


def _node(graph: Graph, name: str, op: str, nodes: list, single=True):
    """The ai.onnx ``op`` node making ``name`` (recorded in ``nodes``), if ``name`` is read only once."""
    n = graph.producer_of(name, op)
    if n is None or (single and not graph.single_use(name)):
        return None
    nodes.append(n)
    return n


def _scalar(graph: Graph, name: str):
    v = graph.const_value(name)
    return None if v is None or v.size != 1 else float(np.asarray(v, np.float64).reshape(()))


def _dim_readers(graph: Graph, name: str, inside: list):
    """The Shape nodes reading ``name`` outside the pattern (``inside``) when they are its only
    readers there and expose only its axes 0 and 1 (batch and sequence), else None."""
    readers = []
    for c in graph.consumers.get(name, ()):
        if c in inside:
            continue
        if c.op_type != "Shape" or c.domain not in ("", "ai.onnx") or c.output[0] in graph.protected:
            return None
        start, end = attr(c, "start", 0), attr(c, "end")
        if start < 0 or (end is not None and not start < end <= 2):
            return None
        if end is None:  # the whole shape: only Gathers of axes 0 and 1 may read it
            for g in graph.consumers.get(c.output[0], ()):
                i = graph.const_value(g.input[1]) if g.op_type == "Gather" and len(g.input) > 1 else None
                if i is None or i.size != 1 or attr(g, "axis", 0) != 0 or int(i.reshape(())) + start not in (0, 1):
                    return None
        readers.append(c)
    return readers


def _one_node_and_readers(graph: Graph, name: str, op: str, nodes: list, readers: list):
    """As :func:`_node`, but ``name`` may also be read by Shape nodes exposing its batch and
    sequence sizes (recorded in ``readers``: they read x instead once fused)."""
    n = graph.producer_of(name, op)
    if n is None or name in graph.protected:
        return None
    others = [c for c in graph.consumers.get(name, ()) if c.op_type != "Shape"]
    dims = _dim_readers(graph, name, others)
    if len(others) != 1 or dims is None:
        return None
    nodes.append(n)
    readers += dims
    return n


def _target(graph: Graph, name: str):
    """The entries of a Reshape target: ints, or (tensor, axis) for a size read off a tensor."""
    v = graph.const_value(name)
    if v is not None:
        return [int(d) for d in np.asarray(v).reshape(-1)]
    cat = graph.producer_of(name, "Concat")
    if cat is None or attr(cat, "axis", 0) not in (0, -1):
        return None
    out = []
    for x in cat.input:
        v = graph.const_value(x)
        if v is not None:
            out += [int(d) for d in np.asarray(v).reshape(-1)]
            continue
        dim = _size_of(graph, x)
        if dim is None:
            return None
        out.append(dim)
    return out


def _size_of(graph: Graph, name: str):
    """(t, axis) when ``name`` is the 1-element size of t's axis: Shape(t, start=i, end=i + 1) or
    Unsqueeze(Gather(Shape(t), i), 0)."""
    sh = graph.producer_of(name, "Shape")
    if sh is not None:
        start, end = attr(sh, "start", 0), attr(sh, "end")
        return (sh.input[0], start) if start >= 0 and end == start + 1 else None
    u = graph.producer_of(name, "Unsqueeze")
    if u is None:
        return None
    axes = attr(u, "axes")
    if axes is None and len(u.input) > 1:
        axes = graph.const_value(u.input[1])
    g = graph.producer_of(u.input[0], "Gather")
    if axes is None or [int(a) for a in np.asarray(axes).reshape(-1)] != [0] or g is None or attr(g, "axis", 0) != 0:
        return None
    i, sh = graph.const_value(g.input[1]), graph.producer_of(g.input[0], "Shape")
    if i is None or i.size != 1 or sh is None or attr(sh, "end") is not None or int(i.reshape(())) < 0:
        return None
    return sh.input[0], attr(sh, "start", 0) + int(i.reshape(()))


def _leading(graph: Graph, target, x: str, same: set) -> bool:
    """The first two entries of ``target`` are x's batch and sequence sizes (the Reshape's input
    has them as its leading axes; ``same``: values whose axes 0 and 1 are x's)."""
    lead = target[:2]
    if sum(1 for e in lead if e == -1) + sum(1 for e in target[2:] if e == -1) > 1:
        return False
    xs = graph.symbolic_shape(x) or (graph.info(x) or (None, None))[1]
    for i, e in enumerate(lead):
        if e in (0, -1):  # copies the input's axis; one -1 is the rest of the size
            continue
        if isinstance(e, int):
            if xs is None or xs[i] != e:
                return False
        elif not (e[1] == i and e[0] in same):
            ts = graph.symbolic_shape(e[0])
            if ts is None or xs is None or len(ts) <= e[1] or xs[i] is None or ts[e[1]] != xs[i]:
                return False
    return True


def _heads(graph: Graph, name: str, nodes: list, perm, readers: list):
    """(x, W, b, reshape target) of Transpose(perm) <- Reshape(4-D) <- Add(MatMul(x, W), b)."""
    t = _node(graph, name, "Transpose", nodes)
    if t is None or list(attr(t, "perm", [])) != perm:
        return None
    r = _node(graph, t.input[0], "Reshape", nodes)
    shape = _target(graph, r.input[1]) if r is not None else None
    if shape is None or len(shape) != 4 or not all(isinstance(d, int) for d in shape[2:]):
        return None
    add = _one_node_and_readers(graph, r.input[0], "Add", nodes, readers)
    if add is None:
        return _quantized_heads(graph, r.input[0], nodes, readers, shape)
    for mm_out, b in ((add.input[0], add.input[1]), (add.input[1], add.input[0])):
        mm = graph.producer_of(mm_out, "MatMul")
        if mm is not None and graph.single_use(mm_out):
            W, B = graph.const_value(mm.input[1]), graph.const_value(b)
            if W is not None and B is not None and W.ndim == 2 and B.shape == (W.shape[1],):
                nodes.append(mm)
                return mm.input[0], W, B, shape, add.output[0], None
    return None


def _quantized_heads(graph: Graph, name: str, nodes: list, readers: list, shape):
    """As :func:`_heads` for a com.microsoft MatMulIntegerToFloat(A, W, a_scale, w_scale, a_zero, w_zero, b)
    with a constant 8-bit W and constant w_scale, w_zero and b, each one value or one per column: x is
    then (A, a_scale, a_zero) and the last entry (w_scale, w_zero or None)."""
    n = graph.producer.get(name)
    if n is None or n.op_type != "MatMulIntegerToFloat" or n.domain != MS or name in graph.protected \
            or len(n.input) < 4:
        return None
    others = [c for c in graph.consumers.get(name, ()) if c.op_type != "Shape"]
    dims = _dim_readers(graph, name, others)
    if len(others) != 1 or dims is None:
        return None
    ins = list(n.input) + [""] * (7 - len(n.input))
    W, ws = graph.const_value(ins[1]), graph.const_value(ins[3])
    wz = graph.const_value(ins[5]) if ins[5] else None
    B = graph.const_value(ins[6]) if ins[6] else None
    if W is None or W.ndim != 2 or W.dtype not in (np.int8, np.uint8) or ws is None or ws.dtype != np.float32 \
            or (ins[5] and wz is None) or (ins[6] and B is None):
        return None
    cols = W.shape[1]
    if ws.ndim > 1 or ws.size not in (1, cols) or (wz is not None and (
            wz.ndim > 1 or wz.size not in (1, cols) or wz.dtype != W.dtype)):
        return None
    if B is None:
        B = np.zeros(cols, np.float32)
    elif B.shape != (cols,) or B.dtype != np.float32:
        return None
    nodes.append(n)
    readers += dims
    return (ins[0], ins[2], ins[4]), W, B, shape, name, (ws, wz)


def _per_column(values: list, sizes: list, dtype):
    """One value when ``values`` (arrays of one value or one per column, None: 0) are one value all
    equal, else the values of all the columns, in order (``sizes`` columns each)."""
    flat = [np.zeros(1, dtype) if v is None else np.asarray(v, dtype).reshape(-1) for v in values]
    if all(f.size == 1 for f in flat) and all(f[0] == flat[0][0] for f in flat):
        return flat[0].reshape(())
    return np.concatenate([np.broadcast_to(f, (n,)) for f, n in zip(flat, sizes)])


def _with_past(graph: Graph, name: str, nodes: list, pasts: list):
    """``name``'s heads, through Concat(past, heads, axis=2) when there is one (past recorded)."""
    cat = graph.producer_of(name, "Concat")
    if cat is None or len(cat.input) != 2 or attr(cat, "axis") not in (2, -2):
        return name
    nodes.append(cat)
    pasts.append((cat.input[0], cat.output[0]))
    return cat.input[1]


def _key_heads(graph: Graph, name: str, nodes: list, pasts: list, readers: list):
    t = graph.producer_of(name, "Transpose")
    if t is not None and list(attr(t, "perm", [])) == [0, 1, 3, 2] and graph.single_use(name):
        nodes.append(t)
        return _heads(graph, _with_past(graph, t.input[0], nodes, pasts), nodes, [0, 2, 1, 3], readers)
    return _heads(graph, name, nodes, [0, 2, 3, 1], readers)


def _scaled(graph: Graph, name: str, nodes: list):
    """(input, factor) through an optional Mul/Div by a scalar constant."""
    for op in ("Mul", "Div"):
        n = graph.producer_of(name, op)
        if n is None or not graph.single_use(name):
            continue
        for a, c in ((n.input[0], n.input[1]), (n.input[1], n.input[0]) if op == "Mul" else (None, None)):
            v = _scalar(graph, c) if c else None
            if v is not None and v != 0:
                nodes.append(n)
                return a, (v if op == "Mul" else 1 / v)
    return name, 1.0


def _is_causal(c: np.ndarray, S: int, T: int, masked) -> bool:
    c = np.asarray(c)
    if c.ndim < 2 or c.shape[-2:] != (S, T) or any(d != 1 for d in c.shape[:-2]):
        return False
    keep = np.arange(T)[None, :] <= np.arange(S)[:, None] + (T - S)
    return bool(np.array_equal(~masked(c.reshape(S, T)), keep))


def _padding_mask(graph: Graph, term: str, nodes: list):
    """(raw mask input, filter) of (1 - Cast(Unsqueeze(Unsqueeze(mask)))) * filter."""
    mul = graph.producer_of(term, "Mul")
    if mul is None:
        return None
    for s, c in ((mul.input[0], mul.input[1]), (mul.input[1], mul.input[0])):
        fill, sub = _scalar(graph, c), graph.producer_of(s, "Sub")
        if fill is None or sub is None or _scalar(graph, sub.input[0]) != 1.0:
            continue
        x, chain = sub.input[1], [mul, sub]
        cast = graph.producer_of(x, "Cast")
        if cast is not None:
            chain.append(cast)
            x = cast.input[0]
        axes = []
        while (u := graph.producer_of(x, "Unsqueeze")) is not None:
            a = attr(u, "axes")
            if a is None and len(u.input) > 1:
                a = graph.const_value(u.input[1])
            if a is None:
                return None
            axes = [int(v) for v in np.asarray(a).reshape(-1)] + axes
            chain.append(u)
            x = u.input[0]
        info = graph.info(x)
        if sorted(axes) != [1, 2] or info is None or info[1] is None or len(info[1]) != 2:
            return None
        return x, fill
    return None


def _reaches_matmul(graph: Graph, name: str, depth: int) -> bool:
    """Whether ``name`` is a MatMul's (or FusedMatMul's) output, or one through up to ``depth``
    Add/Where/Mul/Div."""
    n = graph.producer.get(name)
    if n is not None and n.op_type == "FusedMatMul" and n.domain == MS:
        return True
    if n is None or n.domain not in ("", "ai.onnx"):
        return False
    if n.op_type == "MatMul":
        return True
    return depth > 0 and n.op_type in ("Add", "Where", "Mul", "Div") and any(
        _reaches_matmul(graph, x, depth - 1) for x in n.input if x)


def _scores(graph: Graph, name: str, nodes: list):
    """(the node of the scores Q K^T, its factor, whether it reads K's heads as they are) for a MatMul,
    or a com.microsoft FusedMatMul with transB (K's heads transposed in the product, alpha scaling it:
    what :mod:`.transpose_into_matmul` made of the MatMul and K's Transpose before the shapes were
    known)."""
    n = _node(graph, name, "MatMul", nodes)
    if n is not None:
        return n, 1.0, False
    n = graph.producer.get(name)
    if n is None or n.op_type != "FusedMatMul" or n.domain != MS or not graph.single_use(name):
        return None
    if attr(n, "transA", 0) or attr(n, "transBatchA", 0) or attr(n, "transBatchB", 0) or attr(n, "transB", 0) != 1:
        return None
    nodes.append(n)
    return n, float(attr(n, "alpha", 1.0)), True


def _match(graph: Graph, sm):
    nodes = [sm]
    axis = attr(sm, "axis", -1 if graph.opset() >= 13 else 1)
    if axis not in (-1, 3):
        return None
    # after the softmax: context, heads merged
    pv = graph.only_consumer(sm.output[0], "MatMul")
    if pv is None or pv.input[0] != sm.output[0]:
        return None
    nodes.append(pv)
    ctx_t = graph.only_consumer(pv.output[0], "Transpose")
    if ctx_t is None or list(attr(ctx_t, "perm", [])) != [0, 2, 1, 3]:
        return None
    nodes.append(ctx_t)
    readers: list = []  # Shape nodes reading batch and sequence sizes off the pattern's values
    finals = [c for c in graph.consumers.get(ctx_t.output[0], ()) if c.op_type != "Shape"]
    final = finals[0] if len(finals) == 1 and finals[0].op_type == "Reshape" and \
        finals[0].domain in ("", "ai.onnx") and finals[0].input[0] == ctx_t.output[0] else None
    dims = _dim_readers(graph, ctx_t.output[0], finals) if final is not None else None
    if final is None or dims is None or ctx_t.output[0] in graph.protected:
        return None
    readers += dims
    nodes.append(final)
    pasts: list = []  # (past, present) of K, then V
    v_pasts: list = []
    v = _heads(graph, _with_past(graph, pv.input[1], nodes, v_pasts), nodes, [0, 2, 1, 3], readers)
    # before the softmax: masks, scale, scores
    s, causal, fill, mask, bias = sm.input[0], False, None, None, None
    for _ in range(3):
        where = _node(graph, s, "Where", nodes)
        if where is not None:
            cond, f = graph.const_value(where.input[0]), _scalar(graph, where.input[2])
            if cond is None or f is None or f > _MINUS_BIG or causal:
                return None
            causal, fill, s = cond, f, where.input[1]
            continue
        add = _node(graph, s, "Add", nodes)
        if add is None:
            break
        sides = [(a, t) for a, t in ((add.input[0], add.input[1]), (add.input[1], add.input[0]))
                 if _reaches_matmul(graph, a, 4)]
        if len(sides) != 1:
            return None
        a, term = sides[0]
        c = graph.const_value(term)
        if c is not None and causal is False:
            causal, fill = c, None
        elif mask is None and (pm := _padding_mask(graph, term, [])) is not None:
            mask = pm
        elif bias is None and c is None:
            bias = term
        else:
            return None
        s = a
    scores, scale = _scaled(graph, s, nodes)
    product = _scores(graph, scores, nodes)
    if product is None or v is None:
        return None
    qk, alpha, k_as_is = product
    scale *= alpha
    qa, qs = _scaled(graph, qk.input[0], nodes)
    ka, ks = _scaled(graph, qk.input[1], nodes)
    q = _heads(graph, qa, nodes, [0, 2, 1, 3], readers)
    k = _heads(graph, _with_past(graph, ka, nodes, pasts), nodes, [0, 2, 1, 3], readers) if k_as_is else \
        _key_heads(graph, ka, nodes, pasts, readers)
    pasts += v_pasts
    if len(pasts) not in (0, 2):
        return None
    if q is None or k is None:
        return None
    (x, Wq, bq, sq, pq, qq), (xk, Wk, bk, sk, pk, qk_), (xv, Wv, bv, sv, pv_, qv) = q, k, v
    quantized = qq is not None
    xa = x[0] if quantized else x  # the tensor of the input's shape
    info = graph.symbolic_shape(xa)  # ints, or symbols for dynamic batch and sequence axes
    if xk != x or xv != x or info is None or len(info) != 3:
        return None
    if quantized:  # QAttention: one weight type and zero point presence, equal sizes, no past or bias
        if qk_ is None or qv is None or graph.elem_type(xa) not in (TensorProto.UINT8, TensorProto.INT8) \
                or not Wq.dtype == Wk.dtype == Wv.dtype or len({z is None for _, z in (qq, qk_, qv)}) != 1 \
                or pasts or v_pasts or bias is not None or Wv.shape != Wq.shape:
            return None
    elif qk_ is not None or qv is not None or graph.elem_type(x) != TensorProto.FLOAT:
        return None
    Bn, S, D = info
    if not isinstance(D, int):
        return None
    N = sq[2]
    if Wq.shape != Wk.shape or Wv.shape[0] != D or Wq.shape[0] != D or N <= 0 or sk[2] != N or sv[2] != N:
        return None
    hidden, hv = Wq.shape[1], Wv.shape[1]
    if hidden % N or hv % N or sq[3] not in (-1, hidden // N) or sv[3] not in (-1, hv // N):
        return None
    same = {xa, pq, pk, pv_, ctx_t.output[0]}  # values whose axes 0 and 1 are x's
    if not all(_leading(graph, t, xa, same) for t in (sq, sk, sv)):
        return None
    out = _target(graph, final.input[1])
    if out is None or len(out) != 3 or out[2] not in (-1, hv) or not _leading(graph, out, xa, same):
        return None
    static = all(isinstance(d, int) for d in info)
    if not static and (pasts or causal is not False):
        return None
    T = S
    if pasts:
        shapes = [graph.shape(p) for p, _ in pasts]
        if shapes[0] is None or shapes[0] != shapes[1] or len(shapes[0]) != 4 or \
                shapes[0][:2] != (Bn, N) or shapes[0][3] != hidden // N or hv != hidden:
            return None
        T = S + shapes[0][2]
    masked = (lambda m: m <= _MINUS_BIG) if fill is None else (lambda m: ~m.astype(bool))
    if causal is not False and not _is_causal(causal, S, T, masked):
        return None
    if bias is not None:
        b = graph.symbolic_shape(bias)
        if b is None or len(b) != 4 or b[0] not in (1, Bn) or b[1] not in (1, N) or tuple(b[2:]) != (S, T):
            return None
    presents = {c for _, c in pasts}  # remade from the Attention's present output, after it: read there
    at = graph.nodes.index(final)  # by the nodes after it only (GPT-2's stacked present output, say)
    if any(c not in nodes and graph.nodes.index(c) < at for p in presents for c in graph.consumers.get(p, ())):
        return None
    if any(o in graph.protected for n in nodes if n is not final for o in n.output if o not in presents):
        return None
    quant = None
    if quantized:
        sizes = [Wq.shape[1]] * 3
        zeros = [z for _, z in (qq, qk_, qv)]
        quant = dict(A=x, w_scale=_per_column([s for s, _ in (qq, qk_, qv)], sizes, np.float32),
                     w_zero=None if zeros[0] is None else _per_column(zeros, sizes, Wq.dtype))
    return dict(nodes=nodes, final=final, x=xa, quant=quant, W=np.concatenate([Wq, Wk, Wv], axis=1),
                b=np.concatenate([bq, bk, bv]), N=N, scale=scale * qs * ks, head=hidden // N,
                causal=causal is not False, mask=mask, bias=bias, sizes=None if hv == hidden else [hidden, hidden, hv],
                pasts=pasts, readers=readers, present=(2, Bn, N, T, hidden // N) if pasts else None)


def apply(graph: Graph) -> bool:
    removed = []
    for sm in graph.nodes:
        if sm.op_type != "Softmax" or sm.domain not in ("", "ai.onnx") or sm in removed:
            continue
        m = _match(graph, sm)
        if m is None or any(n in removed for n in m["nodes"]):
            continue
        final = m["final"]
        mask_index = ""
        attrs = {"num_heads": m["N"], "unidirectional": int(m["causal"]), "qkv_hidden_sizes": m["sizes"]}
        if m["mask"] is not None:
            raw, fill = m["mask"]
            mask_index = raw
            if graph.elem_type(raw) != TensorProto.INT32:
                mask_index = graph.unique(raw + "_int32")
                graph.nodes.insert(graph.nodes.index(final), graph.make_node("Cast", [raw], [mask_index],
                                                                            to=TensorProto.INT32))
            attrs["mask_filter_value"] = fill
        if not math.isclose(m["scale"], 1 / math.sqrt(m["head"]), rel_tol=1e-6):
            attrs["scale"] = m["scale"]
        inputs = [m["x"], graph.add_const(m["W"], "attention_qkv_weight"),
                  graph.add_const(m["b"], "attention_qkv_bias"), mask_index]
        op = "Attention"
        if m["quant"] is not None:  # onnxruntime's QAttention: the same, its product as MatMulIntegerToFloat's
            q, op = m["quant"], "QAttention"
            (A, a_scale, a_zero), w_zero = q["A"], q["w_zero"]
            del attrs["qkv_hidden_sizes"]
            w_zero = "" if w_zero is None else graph.add_const(w_zero, "attention_qkv_weight_zero")
            inputs = inputs[:3] + [a_scale, graph.add_const(q["w_scale"], "attention_qkv_weight_scale"), mask_index,
                                   a_zero, w_zero]
        outputs, extra = [final.output[0]], []
        if m["pasts"]:
            (pk, ck), (pv, cv) = m["pasts"]
            inputs.append(_stack(graph, pk, pv, extra))
            outputs.append(graph.unique("attention_present"))
            # its static shape, which ONNX's inference cannot give a com.microsoft output (.restack reads it)
            graph.proto.value_info.append(helper.make_tensor_value_info(outputs[1], TensorProto.FLOAT, m["present"]))
            graph.invalidate()
            for i, name in enumerate((ck, cv)):  # present (2, B, N, T, H) -> the two graph values it replaces
                extra.append(graph.make_node("Gather", [outputs[1], graph.add_const(np.array(i, np.int64), "index")],
                                             [name], axis=0))
        if m["bias"] is not None:
            inputs += [""] * (5 - len(inputs)) + [m["bias"]]
        while inputs and not inputs[-1]:
            inputs.pop()
        node = graph.make_node(op, inputs, outputs, domain=MS, **attrs)
        at = graph.nodes.index(final)
        graph.nodes[at:at + 1] = [n for n in extra if n.op_type != "Gather"] + [node] + \
            [n for n in extra if n.op_type == "Gather"]
        removed.extend(n for n in m["nodes"] if n is not final)
        for r in m["readers"]:  # batch and sequence sizes: read off x now
            r.input[0] = m["x"]
        graph.use_domain(MS)
    return graph.remove(*removed)


def _stack(graph: Graph, k: str, v: str, extra: list) -> str:
    """Nodes (appended to ``extra``) stacking the past K and V (B, N, P, H) into (2, B, N, P, H)."""
    parts = []
    for name in (k, v):
        out = graph.unique(name + "_unsqueezed")
        if graph.opset() >= 13:
            extra.append(graph.make_node("Unsqueeze", [name, graph.add_const(np.array([0], np.int64), "axes")], [out]))
        else:
            extra.append(graph.make_node("Unsqueeze", [name], [out], axes=[0]))
        parts.append(out)
    past = graph.unique("attention_past")
    extra.append(graph.make_node("Concat", parts, [past], axis=0))
    return past
