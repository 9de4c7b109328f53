"""MatMulInteger -> Cast(float) -> Mul(a_scale * b_scale) [-> Add(bias)] -> com.microsoft
MatMulIntegerToFloat (the dynamically quantized MatMuls of onnxruntime's quantizer, as onnxruntime
fuses them): one op computing ``float(product) * (a_scale * b_scale) + bias`` in float32, the same
roundings as the nodes it replaces.

The scale is a Mul of a one-element a_scale (DynamicQuantizeLinear's) by a constant b_scale (one
value, or one per output column); the bias a constant float32 vector over the columns. The scale's
Mul stays for its other readers (the q, k and v projections share one).
"""

from __future__ import annotations

from onnx import TensorProto

from .graph import MS, Graph


def _plain(node, op: str) -> bool:
    return node is not None and node.op_type == op and node.domain in ("", "ai.onnx")


def _single(graph: Graph, name: str):
    """The one reader of ``name`` (not a graph output), or None."""
    return graph.consumers[name][0] if graph.single_use(name) else None


def _scales(graph: Graph, name: str, n: int | None):
    """(a_scale, b_scale) of the scale ``name``: a float32 Mul of a one-element value by a constant of
    one value or ``n``; or None."""
    mul = graph.producer.get(name)
    if not _plain(mul, "Mul") or len(mul.input) != 2:
        return None
    for a, b in (mul.input, reversed(mul.input)):
        bv = graph.const_value(b)
        info = graph.info(a)
        if bv is None or info is None or info[0] != TensorProto.FLOAT or info[1] is None:
            continue
        if not all(isinstance(d, int) for d in info[1]) or len(info[1]) > 1 or (info[1] and info[1][0] != 1):
            continue  # a_scale: one value (a scalar, or [1])
        if bv.dtype == "float32" and bv.ndim <= 1 and (bv.size == 1 or bv.size == n):
            return a, b
    return None


def apply(graph: Graph) -> bool:
    removed = []
    for mm in list(graph.nodes):
        if not _plain(mm, "MatMulInteger") or any(n is mm for n in removed):
            continue
        cast = _single(graph, mm.output[0])
        if not _plain(cast, "Cast") or not any(a.name == "to" and a.i == TensorProto.FLOAT for a in cast.attribute):
            continue
        mul = _single(graph, cast.output[0])
        if not _plain(mul, "Mul") or len(mul.input) != 2:
            continue
        other = mul.input[1] if mul.input[0] == cast.output[0] else mul.input[0]
        b_shape = graph.shape(mm.input[1])
        n = b_shape[-1] if b_shape else None
        scales = _scales(graph, other, n)
        if scales is None or other == cast.output[0]:
            continue
        out, bias, group = mul.output[0], "", [mm, cast, mul]
        add = _single(graph, out)
        if _plain(add, "Add") and len(add.input) == 2:
            b = add.input[1] if add.input[0] == out else add.input[0]
            v = graph.const_value(b)
            if v is not None and v.dtype == "float32" and v.ndim == 1 and n is not None and v.shape == (n,):
                bias, out = b, add.output[0]
                group.append(add)
        a_zp = mm.input[2] if len(mm.input) > 2 else ""
        b_zp = mm.input[3] if len(mm.input) > 3 else ""
        inputs = [mm.input[0], mm.input[1], scales[0], scales[1], a_zp, b_zp, bias]
        while inputs and not inputs[-1]:
            inputs.pop()
        graph.use_domain(MS)
        fused = graph.make_node("MatMulIntegerToFloat", inputs, [out], domain=MS)
        graph.nodes.insert(graph.nodes.index(group[-1]), fused)
        removed += group
    return graph.remove(*removed)
