"""float16 graphs computed in float32 (CPU only): NumPy's float16 arithmetic is not vectorised and
runs about 100x slower than float32, as onnxruntime's CPU provider avoids by running nodes without
a float16 kernel in float32 between inserted Casts.

The whole main graph is rewritten at once:

* float16 initializers, Constant / ConstantOfShape tensors, dtype attributes (RandomX, EyeLike,
  Bernoulli, SequenceEmpty, window ops, DequantizeLinear...) and value types become float32;
* each float16 graph input is cast to float32 after it, each float16 graph output is cast back
  before it: the graph's input and output names and types are unchanged;
* an explicit Cast to float16 keeps its rounding: it stays a Cast to float16, followed by a Cast
  to float32 for the nodes that read it (a graph output it makes stays float16 as it was). A Cast
  or CastLike from a float16 value first rounds the float32 value to float16.

Intermediate values are not rounded to float16, as in onnxruntime's float32 fallback, so results
differ from float16 arithmetic within float16 precision (and values beyond float16's range stay
finite until a Cast or a graph output). A graph with anything this pass cannot convert safely
(subgraphs, ops of other domains, BitCast, Cast with a string ``to``, sparse tensors, a Cast or
CastLike whose types inference cannot tell...) is left as it is.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, numpy_helper

from ..registry import canonical_domain
from .graph import Graph, attr, has_subgraph, set_attrs

F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT
# INT attributes that name an output or compute element type
_DTYPE_ATTRS = {"dtype", "output_dtype", "output_datatype", "precision", "softmax_precision", "stash_type"}


class _Unsupported(Exception):
    pass


def apply(graph: Graph) -> bool:
    """Rewrite ``graph`` to compute in float32; False (and the graph untouched) when it has no
    float16 or holds something this pass does not convert."""
    try:
        plan = _plan(graph)
    except _Unsupported:
        return False
    if plan is None:
        return False
    _rewrite(graph, *plan)
    return True


def _plan(graph: Graph):
    """Check everything before any edit: (float16 graph inputs, float16 graph outputs, the Cast /
    CastLike nodes to rewrite with their (input type, target type)), or None when the graph has
    no float16 at all."""
    g = graph.model.graph
    if not _any_f16(graph):
        return None
    if len(g.sparse_initializer):
        raise _Unsupported
    casts = {}
    for n in graph.nodes:
        if canonical_domain(n.domain) != "" or has_subgraph(n) or n.op_type == "BitCast":
            raise _Unsupported
        if any(a.type in (AttributeProto.SPARSE_TENSOR, AttributeProto.SPARSE_TENSORS, AttributeProto.TENSORS,
                          AttributeProto.TYPE_PROTOS) for a in n.attribute):
            raise _Unsupported
        if n.op_type in ("Cast", "CastLike"):
            to = attr(n, "to") if n.op_type == "Cast" else graph.elem_type(n.input[1])
            if not isinstance(to, int):
                raise _Unsupported  # Cast-1's string `to`, or a CastLike target inference cannot tell
            src = graph.elem_type(n.input[0])
            if src is None and to != F16:
                raise _Unsupported
            if F16 in (src, to):
                casts[id(n)] = (src, to)
    if any(v.type.WhichOneof("value") not in (None, "tensor_type") for v in [*g.input, *g.output]):
        raise _Unsupported  # sequences, optionals, maps
    inputs = [i.name for i in g.input if _elem(i.type) == F16]
    outputs = []
    for o in g.output:
        t = _elem(o.type) or graph.elem_type(o.name)
        if t is None:
            raise _Unsupported  # its type could change unseen
        if t == F16 and o.name not in outputs:
            if o.name in graph.input_names or o.name in graph._protos:
                raise _Unsupported
            outputs.append(o.name)
    return inputs, outputs, casts


def _any_f16(graph: Graph) -> bool:
    """float16 appears somewhere: every float16 value comes from one of these."""
    g = graph.model.graph
    if any(_has_f16(v.type) for v in [*g.input, *g.output, *g.value_info]):
        return True
    if any(t.data_type == F16 for t in g.initializer) or any(
            graph.value(c).dtype == np.float16 for c in graph.consts if c not in graph._protos):
        return True
    for n in graph.nodes:
        for a in n.attribute:
            if ((a.type == AttributeProto.TENSOR and a.t.data_type == F16)
                    or (a.type == AttributeProto.TYPE_PROTO and _has_f16(a.tp))
                    or (a.type == AttributeProto.INT and a.name in _DTYPE_ATTRS | {"to"} and a.i == F16)
                    or has_subgraph(n)):
                return True  # (a subgraph may hold float16: the checks refuse it)
    return False


def _rewrite(graph: Graph, inputs: list[str], outputs: list[str], casts: dict) -> None:
    g = graph.model.graph
    for name in list(graph.consts):
        if name in graph.input_names:
            continue  # an IR < 4 initializer-input keeps its declared float16: the Cast after it folds
        t = graph._protos.get(name)
        if (t.data_type == F16) if t is not None else graph.value(name).dtype == np.float16:
            graph.set_const(name, graph.value(name).astype(np.float32))

    nodes, renames = [], {}
    for x in inputs:  # read in float32 from here on
        renames[x] = graph.unique(f"{x}_float32")
        nodes.append(graph.make_node("Cast", [x], [renames[x]], to=F32))
    made_f16 = set()
    for n in graph.nodes:  # first: a node listed before the Cast it reads (an unsorted graph) reads float32 too
        if id(n) in casts and casts[id(n)][1] == F16:
            renames[n.output[0]] = graph.unique(f"{n.output[0]}_float32")
    for n in graph.nodes:
        n.input[:] = [renames.get(x, x) for x in n.input]
        for a in n.attribute:
            _convert_attr(a)
        if id(n) not in casts:
            nodes.append(n)
            continue
        src, to = casts[id(n)]
        x, y = n.input[0], n.output[0]
        if n.op_type == "CastLike":
            saturate = attr(n, "saturate")
            n = graph.make_node("Cast", [x], [y], to=to)
            set_attrs(n, saturate=saturate)
        if src == F16 and to != F16:  # the value computed in float32 stands for a float16 one
            rounded = graph.unique(f"{y}_float16")
            nodes.append(graph.make_node("Cast", [x], [rounded], to=F16))
            n.input[0] = rounded
        nodes.append(n)
        if to == F16:  # y stays the float16 value; its readers get it in float32
            made_f16.add(y)
            nodes.append(graph.make_node("Cast", [y], [renames[y]], to=F32))

    for y in outputs:
        if y in made_f16:
            continue
        wide = graph.unique(f"{y}_float32")
        for n in nodes:
            n.output[:] = [wide if v == y else v for v in n.output]
            n.input[:] = [wide if v == y else v for v in n.input]
        nodes.append(graph.make_node("Cast", [wide], [y], to=F16))
    keep = made_f16 | set(inputs) | set(outputs)  # values that stay float16
    for vi in g.value_info:
        if vi.name not in keep:
            _retype(vi.type)
    graph.nodes = nodes
    graph.index()
    graph.invalidate()


def _convert_attr(a: AttributeProto) -> None:
    if a.type == AttributeProto.TENSOR and a.t.data_type == F16:
        a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float32), a.t.name))
    elif a.type == AttributeProto.TYPE_PROTO:
        _retype(a.tp)
    elif a.type == AttributeProto.INT and a.name in _DTYPE_ATTRS and a.i == F16:
        a.i = F32


def _elem(tp: onnx.TypeProto):
    return tp.tensor_type.elem_type if tp.HasField("tensor_type") else None


def _inner(tp: onnx.TypeProto):
    kind = tp.WhichOneof("value")
    if kind in ("sequence_type", "optional_type"):
        return [getattr(tp, kind).elem_type]
    if kind == "map_type":
        return [tp.map_type.value_type]
    return []


def _has_f16(tp: onnx.TypeProto) -> bool:
    return _elem(tp) == F16 or any(_has_f16(t) for t in _inner(tp))


def _retype(tp: onnx.TypeProto) -> None:
    if _elem(tp) == F16:
        tp.tensor_type.elem_type = F32
    for t in _inner(tp):
        _retype(t)
