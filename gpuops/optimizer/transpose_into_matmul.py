"""Transposes fold into the matrix product that reads them: a 2-D Transpose(perm=[1, 0]) feeding
Gemm toggles transA / transB; a Transpose swapping the last two axes feeding MatMul makes a
com.microsoft FusedMatMul with transA / transB (level "all" only). The Transpose must have no
other reader."""

from __future__ import annotations

from onnx import TensorProto

from .graph import MS, Graph, attr, set_attrs


def _swap_last_two(graph: Graph, name: str):
    """The input of a single-use Transpose that swaps the last two axes of ``name``'s value."""
    t = graph.producer_of(name, "Transpose")
    if t is None or not graph.single_use(name):
        return None
    perm = attr(t, "perm")
    if perm is None:  # default: reversed axes; a swap of the last two only for rank 2
        info = graph.info(t.input[0])
        if info is None or info[1] is None or len(info[1]) != 2:
            return None
        perm = [1, 0]
    perm = list(perm)
    n = len(perm)
    if n < 2 or perm != list(range(n - 2)) + [n - 1, n - 2]:
        return None
    return t


def apply(graph: Graph, fused_matmul: bool = False) -> bool:
    removed = []
    for node in graph.nodes:
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Gemm", "MatMul"):
            continue
        if node.op_type == "MatMul" and (not fused_matmul or graph.elem_type(node.output[0]) != TensorProto.FLOAT):
            continue
        changed = {}
        for i, key in ((0, "transA"), (1, "transB")):
            t = _swap_last_two(graph, node.input[i])
            if t is None or t in removed or (node.op_type == "Gemm" and len(attr(t, "perm", [1, 0])) != 2):
                continue
            node.input[i] = t.input[0]
            changed[key] = 1 - int(attr(node, key, 0))
            removed.append(t)
        if not changed:
            continue
        if node.op_type == "MatMul":
            node.op_type, node.domain = "FusedMatMul", MS
            graph.use_domain(MS)
        set_attrs(node, **changed)
    return graph.remove(*removed)
