"""MatMul(A, B) + C -> Gemm(A, B, C) when A and B are 2-D (static ranks) and C broadcasts to the
(M, N) product without widening it (Gemm's unidirectional broadcast). float32 and float64 only."""

from __future__ import annotations

from onnx import TensorProto

from .graph import Graph

_FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE)


def _rank(graph: Graph, name: str):
    i = graph.info(name)
    return None if i is None or i[1] is None else len(i[1])


def apply(graph: Graph) -> bool:
    if graph.opset() < 9:
        return False
    removed = []
    for mm in graph.nodes:
        if mm.domain not in ("", "ai.onnx") or mm.op_type != "MatMul":
            continue
        y = mm.output[0]
        add = graph.only_consumer(y, "Add")
        if add is None or add in removed or graph.elem_type(y) not in _FLOATS:
            continue
        c = add.input[1] if add.input[0] == y else add.input[0]
        if c == y or _rank(graph, mm.input[0]) != 2 or _rank(graph, mm.input[1]) != 2:
            continue
        out, cinfo = graph.info(y), graph.info(c)
        if cinfo is None or cinfo[1] is None or len(cinfo[1]) > 2 or out is None or out[1] is None:
            continue
        if cinfo[0] != out[0]:
            continue
        # each dim of C is 1 or equals the product's (known) dim
        cdims = (1,) * (2 - len(cinfo[1])) + tuple(cinfo[1])
        if not all(d == 1 or (d is not None and d == o) for d, o in zip(cdims, out[1])):
            continue
        add.op_type = "Gemm"
        add.input[:] = [mm.input[0], mm.input[1], c]
        removed.append(mm)
    return graph.remove(*removed)
