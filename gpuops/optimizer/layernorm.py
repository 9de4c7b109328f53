"""Layer normalization written out -> one op.

TorchScript (opset < 17) emits ``d = x - ReduceMean(x); y = d / Sqrt(ReduceMean(Pow(d, 2)) + eps)``,
then ``y * gamma + beta``, all over the last axis. With ai.onnx opset >= 17 this becomes
ai.onnx LayerNormalization(x, gamma, beta, axis=-1). Below opset 17, when x is the sum of two
3-D tensors of the same shape (static, or the same symbolic dims: a residual connection, as in
BERT, with dynamic batch and sequence axes), it becomes
com.microsoft SkipLayerNormalization(a, b, gamma, beta); otherwise (opset 12 to 16) gpuops'
LayerNormalization over the last axis (a private op, defined in the model by the function
:func:`_function_body` makes, :mod:`.private_ops`). (The dynamo exporter
and TorchScript at opset >= 17 emit LayerNormalization itself.)

jax2tf (flax's LayerNorm, as tf2onnx writes it: magika) computes the variance from the moments instead:
``m = ReduceSum(x) * (1/n)``, ``v = Max(0, ReduceSum(x * x) * (1/n) - m * m)``, each statistic reduced
without its axes and broadcast back by Reshape (+ Expand) to a shape that Concat builds from the input's
Shape, then ``(x - m) * (Reciprocal(Sqrt(v + eps)) * gamma) + beta``. In exact arithmetic that is the same
LayerNorm (the clamp a no-op; the fused op's centred variance only loses less to cancellation), and it
becomes the same node, under the same conditions: the reduced axes the last ones (one below opset 17), a
broadcast back provably to the input's shape with those axes 1 (:func:`_restores`), epsilon a scalar
constant, gamma and beta constants varying along the normalized axes only, no intermediate read
elsewhere. (:func:`_match_moments`.)"""

from __future__ import annotations

import numpy as np
from onnx import AttributeProto, TensorProto, helper

from . import private_ops
from .graph import MS, Graph, attr

_FLOATS = (TensorProto.FLOAT,)  # what onnxruntime's CPU kernels of both ops take


def _axes(graph: Graph, node) -> list[int] | None:
    """A reduction's axes, from its attribute (before opset 18) or its constant second input; None if unknown."""
    axes = attr(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = graph.const_value(node.input[1])
    return None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]


def _last_axis(graph: Graph, node, rank) -> bool:
    """A ReduceMean over exactly the last axis, keeping dims."""
    if node is None or node.op_type != "ReduceMean" or not attr(node, "keepdims", 1):
        return False
    axes = _axes(graph, node)
    return axes is not None and len(axes) == 1 and axes[0] in (-1, rank - 1)


def _contained(graph: Graph, nodes) -> bool:
    """Whether every value the pattern's nodes make but the last is read by the pattern alone (and is
    not a graph output)."""
    inner = [o for n in nodes[:-1] for o in n.output]
    return not any(o in graph.protected or any(c not in nodes for c in graph.consumers.get(o, ())) for o in inner)


def _consumer(graph: Graph, name: str, op: str, nodes):
    for n in graph.consumers.get(name, ()):
        if n.op_type == op and n.domain in ("", "ai.onnx"):
            nodes.append(n)
            return n
    return None


def _match(graph: Graph, rm1):
    """(x, gamma, beta, epsilon, nodes, output) of the pattern rooted at the first ReduceMean."""
    x = rm1.input[0]
    info = graph.info(x)
    shape = info[1] if info else None  # the rank and the last (normalized) axis must be known
    if shape is None or shape[-1:] in ((), (None,)) or info[0] not in _FLOATS or \
            not _last_axis(graph, rm1, len(shape)):
        return None
    nodes = [rm1]
    sub = graph.only_consumer(rm1.output[0], "Sub")
    if sub is None or sub.input != [x, rm1.output[0]]:
        return None
    nodes.append(sub)
    d = sub.output[0]
    if d in graph.protected or len(graph.consumers.get(d, ())) != 2:
        return None
    pow_ = _consumer(graph, d, "Pow", nodes)
    div = _consumer(graph, d, "Div", nodes)
    if pow_ is None or div is None or div.input[0] != d:
        return None
    two = graph.const_value(pow_.input[1])
    if two is None or two.size != 1 or float(two.reshape(())) != 2.0:
        return None
    rm2 = graph.only_consumer(pow_.output[0], "ReduceMean")
    if not _last_axis(graph, rm2, len(shape)):
        return None
    nodes.append(rm2)
    add = graph.only_consumer(rm2.output[0], "Add")
    if add is None:
        return None
    nodes.append(add)
    eps = graph.const_value(add.input[1] if add.input[0] == rm2.output[0] else add.input[0])
    if eps is None or eps.size != 1:
        return None
    sqrt = graph.only_consumer(add.output[0], "Sqrt")
    if sqrt is None or div.input[1] != sqrt.output[0] or not graph.single_use(sqrt.output[0]):
        return None
    nodes.append(sqrt)
    mul = graph.only_consumer(div.output[0], "Mul")
    if mul is None:
        return None
    nodes.append(mul)
    gamma = mul.input[1] if mul.input[0] == div.output[0] else mul.input[0]
    badd = graph.only_consumer(mul.output[0], "Add")
    if badd is None:
        return None
    nodes.append(badd)
    beta = badd.input[1] if badd.input[0] == mul.output[0] else badd.input[0]
    for p in (gamma, beta):
        v = graph.const_value(p)
        if v is None or v.shape != (shape[-1],):
            return None
    if not _contained(graph, nodes):
        return None
    return x, gamma, beta, float(eps.reshape(())), nodes, badd


def _residual(graph: Graph, x: str, nodes):
    """The Add making ``x`` from two 3-D tensors of its symbolic shape, read by the pattern alone; or None."""
    res = graph.producer_of(x, "Add")
    shape = graph.symbolic_shape(x)  # dynamic axes: both operands of the same symbolic shape
    if res is None or shape is None or len(shape) != 3 or \
            [graph.symbolic_shape(i) for i in res.input] != [shape, shape] or \
            any(c not in nodes for c in graph.consumers.get(x, ())) or x in graph.protected:
        return None
    return res


def _function_body() -> list:
    """The private LayerNormalization's body for opsets 12 to 16 (a Constant's ``value_float`` taking the
    node's ``epsilon``; ReduceMean's ``axes`` an attribute)."""
    eps = helper.make_node("Constant", [], ["eps"])
    eps.attribute.add(name="value_float", type=AttributeProto.FLOAT, ref_attr_name="epsilon")
    return [helper.make_node("ReduceMean", ["X"], ["mean"], axes=[-1]),
            helper.make_node("Sub", ["X", "mean"], ["d"]),
            helper.make_node("Mul", ["d", "d"], ["d2"]),
            helper.make_node("ReduceMean", ["d2"], ["var"], axes=[-1]),
            eps,
            helper.make_node("Add", ["var", "eps"], ["var_eps"]),
            helper.make_node("Sqrt", ["var_eps"], ["std"]),
            helper.make_node("Div", ["d", "std"], ["norm"]),
            helper.make_node("Mul", ["norm", "Scale"], ["scaled"]),
            helper.make_node("Add", ["scaled", "B"], ["Y"])]


def _become(graph: Graph, node, op_type: str, domain: str, inputs, **attrs) -> None:
    node.op_type, node.domain = op_type, domain
    node.input[:] = inputs
    del node.attribute[:]
    node.attribute.extend(graph.make_node("X", [], [], **attrs).attribute)
    if domain == private_ops.DOMAIN:
        private_ops.define(graph, op_type, ["X", "Scale", "B"], ["Y"], _function_body(), ["epsilon"])
    elif domain:
        graph.use_domain(domain)


_ONNX = ("", "ai.onnx")


def _node(n, *ops) -> bool:
    return n is not None and n.op_type in ops and n.domain in _ONNX


def _scalar(graph: Graph, name: str, rank: int):
    """The float of a one-element constant that broadcasting cannot raise above ``rank``, or None."""
    v = graph.const_value(name)
    if v is None or v.size != 1 or v.ndim > rank or v.dtype.kind != "f" or not np.isfinite(v).all():
        return None
    return float(v.reshape(()))


def _other(node, name: str):
    """The input of the binary ``node`` that is not ``name`` (None if both or neither are)."""
    a, b = node.input[0], node.input[1]
    return b if a == name and b != name else a if b == name and a != name else None


def _reduction(graph: Graph, node, x: str, rank: int):
    """(axes, keepdims) of a ReduceSum / ReduceMean of ``x`` over its last axes; or None."""
    if not _node(node, "ReduceSum", "ReduceMean") or node.input[0] != x:
        return None
    axes = _axes(graph, node)
    if not axes or any(not -rank <= a < rank for a in axes):
        return None
    axes = sorted({a % rank for a in axes})
    if axes != list(range(rank - len(axes), rank)):
        return None
    return tuple(axes), bool(attr(node, "keepdims", 1))


def _mean(graph: Graph, red, n: int, rank: int, nodes):
    """The mean that ``red`` (a reduction over ``n`` elements, of output rank ``rank``) makes: itself for a
    ReduceMean, a ReduceSum's single Mul by 1/n or Div by n; None otherwise."""
    out = red.output[0]
    if red.op_type == "ReduceMean":
        return out
    scale = graph.consumers.get(out, ())
    if len(scale) != 1 or out in graph.protected or not _node(scale[0], "Mul", "Div"):
        return None
    s = scale[0]
    c = _other(s, out) if s.op_type == "Mul" else (s.input[1] if s.input[0] == out else None)
    c = None if c is None else _scalar(graph, c, rank)
    if c is None or not np.isclose(c * n if s.op_type == "Mul" else c / n, 1.0, rtol=1e-6, atol=0):
        return None
    nodes.append(s)
    return s.output[0]


def _squared(graph: Graph, name: str):
    """The consumers of ``name`` that square it: Mul(name, name) or Pow(name, 2)."""
    out = []
    for c in graph.consumers.get(name, ()):
        if c in out:
            continue
        if _node(c, "Mul") and list(c.input) == [name, name] or \
                _node(c, "Pow") and c.input[0] == name and _scalar(graph, c.input[1], 0) == 2.0:
            out.append(c)
    return out


def _entries(graph: Graph, name: str, depth: int = 0):
    """A 1-D int64/int32 shape tensor's entries, each an int where constant and None where not; None when its
    length is not known. Follows Cast and Concat (axis 0)."""
    v = graph.const_value(name)
    if v is not None:
        return [int(e) for e in v.reshape(-1)] if v.ndim == 1 and v.dtype.kind in "iu" else None
    n = graph.producer.get(name)
    if depth < 8 and _node(n, "Cast") and attr(n, "to") in (TensorProto.INT64, TensorProto.INT32):
        return _entries(graph, n.input[0], depth + 1)
    if depth < 8 and _node(n, "Concat") and int(attr(n, "axis", 0)) in (0, -1):
        parts = [_entries(graph, i, depth + 1) for i in n.input]
        return None if any(p is None for p in parts) else [e for p in parts for e in p]
    shape = graph.shape(name)
    return [None] * shape[0] if shape is not None and len(shape) == 1 else None


def _restores(graph: Graph, node, shape, axes, restored: bool):
    """Whether ``node`` (of a statistic: ``restored`` when it already has ``shape`` with ``axes`` 1, else
    without ``axes``) gives it that kept-dims shape. A Reshape's target must be provably that: as long as
    the input's rank, 1 at ``axes``, equal to the input's static dims at all other axes but at most one
    (the element count fixes that one, whatever it is at run time). An Expand keeps it (same target, or
    ones); an Unsqueeze at ``axes`` restores it."""
    rank = len(shape)
    if _node(node, "Unsqueeze"):
        ua = _axes(graph, node)
        return not restored and ua is not None and sorted(a % rank for a in ua) == list(axes)
    if _node(node, "Expand"):
        if not restored:
            return False
        e = _entries(graph, node.input[1])
        return e is not None and len(e) <= rank and all(d == 1 for d in e) or \
            graph.producer.get(node.input[0]) is not None and \
            _node(graph.producer[node.input[0]], "Reshape") and graph.producer[node.input[0]].input[1] == node.input[1]
    if _node(node, "Reshape"):
        e = _entries(graph, node.input[1])
        if e is None or len(e) != rank or any(e[a] != 1 for a in axes):
            return False
        loose = [i for i in range(rank) if i not in axes and not (shape[i] is not None and shape[i] > 0
                                                                    and e[i] == shape[i])]
        return len(loose) <= 1
    return False


def _affine(graph: Graph, name: str, shape, axes):
    """A float32 constant that broadcasts along ``axes`` of a tensor of ``shape`` only, as an array of the
    normalized dims' shape; or None."""
    v = graph.const_value(name)
    rank, k = len(shape), len(axes)
    norm = tuple(shape[rank - k:])
    if v is None or v.dtype != np.float32 or v.ndim > rank or any(d is None for d in norm):
        return None
    full = (1,) * (rank - v.ndim) + tuple(v.shape)
    if any(d != 1 for d in full[:rank - k]) or any(d not in (1, n) for d, n in zip(full[rank - k:], norm)):
        return None
    return np.ascontiguousarray(np.broadcast_to(v.reshape(full[rank - k:]), norm), dtype=np.float32)


def _match_moments(graph: Graph, red1):
    """(x, gamma, beta, epsilon, nodes, last, axes) of jax2tf's LayerNorm rooted at the reduction of x; or
    None. gamma and beta are arrays of the normalized dims' shape."""
    x = red1.input[0]
    info = graph.info(x)
    shape = info[1] if info else None
    if shape is None or not shape or info[0] not in _FLOATS:
        return None
    rank = len(shape)
    r = _reduction(graph, red1, x, rank)
    if r is None:
        return None
    axes, keep = r
    n = int(np.prod([shape[a] or 0 for a in axes]))
    if n <= 0:
        return None
    srank = rank if keep else rank - len(axes)
    nodes = [red1]
    m = _mean(graph, red1, n, srank, nodes)
    sq = _squared(graph, x)
    if m is None or len(sq) != 1:
        return None
    nodes.append(sq[0])
    red2 = graph.consumers.get(sq[0].output[0], ())
    if len(red2) != 1 or _reduction(graph, red2[0], sq[0].output[0], rank) != r:
        return None
    nodes.append(red2[0])
    m2 = _mean(graph, red2[0], n, srank, nodes)
    users = list({id(c): c for c in graph.consumers.get(m, ())}.values())
    mm = _squared(graph, m)
    if m2 is None or len(users) != 2 or len(mm) != 1:
        return None
    nodes.append(mm[0])
    var = graph.consumers.get(mm[0].output[0], ())
    if len(var) != 1 or not _node(var[0], "Sub") or list(var[0].input) != [m2, mm[0].output[0]]:
        return None
    nodes.append(var[0])
    # the mean, broadcast back, subtracted from x
    cur, restored = m, keep
    user = next(u for u in users if u is not mm[0])
    while not _node(user, "Sub"):
        if not _restores(graph, user, shape, axes, restored):
            return None
        nodes.append(user)
        cur, restored = user.output[0], True
        following = graph.consumers.get(cur, ())
        if len(following) != 1:
            return None
        user = following[0]
    if not restored or list(user.input) != [x, cur]:
        return None
    sub = user
    nodes.append(sub)
    # the variance: [Max(0)] + eps, Sqrt, [Reciprocal, [Mul gamma]], broadcast back anywhere along
    cur, restored, stage, eps, gamma = var[0].output[0], keep, 0, None, None
    while True:
        following = graph.consumers.get(cur, ())
        if len(following) != 1:
            return None
        c = following[0]
        if _node(c, "Reshape", "Expand", "Unsqueeze") and _restores(graph, c, shape, axes, restored):
            restored = True
        elif _node(c, "Max") and stage == 0 and len(c.input) == 2 and \
                _other(c, cur) is not None and _scalar(graph, _other(c, cur), rank) == 0.0:
            pass
        elif _node(c, "Add") and stage == 0 and _other(c, cur) is not None and \
                _scalar(graph, _other(c, cur), rank) is not None:
            eps, stage = _scalar(graph, _other(c, cur), rank), 1
        elif _node(c, "Sqrt") and stage == 1:
            stage = 2
        elif stage == 2 and (_node(c, "Reciprocal") or _node(c, "Div") and c.input[1] == cur and
                             _scalar(graph, c.input[0], rank) == 1.0):
            stage = 3
        elif _node(c, "Mul") and stage == 3 and restored and gamma is None and _other(c, cur) is not None \
                and graph.is_const(_other(c, cur)):
            gamma = _affine(graph, _other(c, cur), shape, axes)
            if gamma is None:
                return None
        else:
            break
        nodes.append(c)
        cur = c.output[0]
    # (x - mean) * the reciprocal, or / the deviation
    if not restored or stage not in (2, 3) or not (
            stage == 3 and _node(c, "Mul") and _other(c, cur) == sub.output[0] or
            stage == 2 and _node(c, "Div") and list(c.input) == [sub.output[0], cur]):
        return None
    nodes.append(c)
    last, beta = c, None
    for op in ("Mul", "Add"):
        following = graph.consumers.get(last.output[0], ())
        if op == "Mul" and gamma is not None or len(following) != 1 or not _node(following[0], op):
            continue
        o = _other(following[0], last.output[0])
        v = None if o is None or not graph.is_const(o) else _affine(graph, o, shape, axes)
        if v is None:
            continue
        if op == "Mul":
            gamma = v
        else:
            beta = v
        last = following[0]
        nodes.append(last)
    if not _contained(graph, nodes):
        return None
    norm = tuple(shape[rank - len(axes):])
    gamma = np.ones(norm, np.float32) if gamma is None else gamma
    beta = np.zeros(norm, np.float32) if beta is None else beta
    return x, gamma, beta, eps, nodes, last, axes


def apply(graph: Graph) -> bool:
    removed = []
    for rm1 in graph.nodes:
        if rm1.op_type not in ("ReduceMean", "ReduceSum") or rm1.domain not in _ONNX or rm1 in removed:
            continue
        m = _match(graph, rm1) if rm1.op_type == "ReduceMean" else None
        if m is not None:
            x, gamma, beta, eps, nodes, last = m
            k = 1
        else:
            m = _match_moments(graph, rm1)
            if m is None or any(n in removed for n in m[4]):
                continue
            x, gamma, beta, eps, nodes, last, axes = m
            k = len(axes)
            if k != 1 and graph.opset() < 17 or graph.opset() < 12:
                continue  # (gpuops' op and SkipLayerNormalization normalize the last axis alone)
            gamma = graph.add_const(gamma, f"{last.output[0]}_gamma")
            beta = graph.add_const(beta, f"{last.output[0]}_beta")
        opset = graph.opset()
        res = _residual(graph, x, nodes) if opset < 17 else None
        if opset >= 17:
            _become(graph, last, "LayerNormalization", "", [x, gamma, beta], axis=-k, epsilon=eps)
        elif res is not None:
            _become(graph, last, "SkipLayerNormalization", MS, [res.input[0], res.input[1], gamma, beta], epsilon=eps)
            nodes = nodes + [res]
        elif opset >= 12:  # (the function that defines the op for other runtimes needs opset 12)
            _become(graph, last, "LayerNormalization", private_ops.DOMAIN, [x, gamma, beta], epsilon=eps)
        else:
            continue
        removed.extend(n for n in nodes if n is not last)
    return graph.remove(*removed)
