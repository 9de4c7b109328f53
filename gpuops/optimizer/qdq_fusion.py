"""QDQ node groups -> the quantized ops onnxruntime turns them into, so that a QDQ model computes in
8 bits as it does there: DequantizeLinear -> Conv -> QuantizeLinear -> QLinearConv,
DequantizeLinear -> MatMul -> QuantizeLinear -> QLinearMatMul, com.microsoft's QLinearAdd,
QLinearGlobalAveragePool and QGemm for Add, GlobalAveragePool and Gemm between them (a Gemm also
without the QuantizeLinear: its output float32); and the pair dropped around MaxPool, Flatten,
Reshape, Transpose, Squeeze and Unsqueeze where both have the same scale and zero point (they move
or select values, which a quantize of the dequantized value gives back exactly).

The results are those of onnxruntime, which fuses these same groups (its QDQ selectors) and runs the
fused ops: a group is fused only where onnxruntime fuses it -- every input from a DequantizeLinear and
the one consumer of the output a QuantizeLinear, per-tensor 8-bit activations of one type in and out
(a Conv's or MatMul's int8 activations only with int8 weights), a Conv's bias an int32
DequantizeLinear (taken as it is: the fused op's bias scale is x_scale * w_scale) -- and where this
package's fused ops compute what onnxruntime's do (constant scalar scales and zero points, given;
a Conv's weight constant, per output channel along axis 0 or per tensor). Other groups stay as they
are. The DequantizeLinear nodes left unread go with the dead code.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .graph import MS, Graph, attr

_BYTES = (TensorProto.UINT8, TensorProto.INT8)


def _plain(node) -> bool:
    return node.domain in ("", "ai.onnx")


def _qdq(graph: Graph, node, op: str):
    """``node`` if it is a plain ``op`` (QuantizeLinear / DequantizeLinear) of 8 bits with a constant
    per-tensor float32 scale and a constant zero point, its attributes the defaults; else None."""
    if node is None or node.op_type != op or not _plain(node) or len(node.input) != 3:
        return None
    if attr(node, "block_size", 0) or attr(node, "output_dtype", 0) or attr(node, "precision", 0):
        return None
    scale, zero = graph.const_value(node.input[1]), graph.const_value(node.input[2])
    if scale is None or zero is None or scale.size != 1 or scale.dtype != np.float32 or scale.ndim > 1:
        return None
    if zero.size != 1 or zero.ndim > 1 or zero.dtype not in (np.uint8, np.int8):
        return None
    return node


def _dq(graph: Graph, name: str):
    """The per-tensor 8-bit DequantizeLinear producing ``name`` (:func:`_qdq`), or None."""
    return _qdq(graph, graph.producer.get(name), "DequantizeLinear")


def _q_after(graph: Graph, node):
    """The per-tensor QuantizeLinear that alone reads ``node``'s one output (not a graph output)."""
    if len(node.output) != 1 or not graph.single_use(node.output[0]):
        return None
    return _qdq(graph, graph.consumers[node.output[0]][0], "QuantizeLinear")


def _dtype(graph: Graph, qdq) -> int:
    """The 8-bit type of a Q/DQ pair's quantized side: its zero point's."""
    return TensorProto.UINT8 if graph.value(qdq.input[2]).dtype == np.uint8 else TensorProto.INT8


def _weight_dq(graph: Graph, name: str, ndim: int, channel_axis: int):
    """The DequantizeLinear of a constant 8-bit ``ndim``-D weight with float32 scales and a zero point of
    each scale's shape, per tensor or per channel of ``channel_axis`` (a conv's output channels, a Gemm's
    output columns), or None."""
    node = graph.producer.get(name)
    if node is None or node.op_type != "DequantizeLinear" or not _plain(node) or len(node.input) != 3:
        return None
    if attr(node, "block_size", 0) or attr(node, "output_dtype", 0):
        return None
    w, scale, zero = (graph.const_value(x) for x in node.input)
    if w is None or scale is None or zero is None or w.dtype not in (np.uint8, np.int8) or w.ndim != ndim:
        return None
    if scale.dtype != np.float32 or zero.dtype != w.dtype or scale.shape != zero.shape:
        return None
    if scale.size == 1 and scale.ndim <= 1:
        return node
    if scale.shape == (w.shape[channel_axis],) and attr(node, "axis", 1) in (channel_axis, channel_axis - ndim):
        return node
    return None


def _bias(graph: Graph, name: str):
    """The DequantizeLinear of an int32 bias, or None."""
    node = graph.producer.get(name)
    if node is None or node.op_type != "DequantizeLinear" or not _plain(node):
        return None
    return node if graph.elem_type(node.input[0]) == TensorProto.INT32 else None


def _fuse_conv(graph: Graph, conv):
    if len(conv.input) not in (2, 3) or (len(conv.input) == 3 and not conv.input[2]):
        return None
    q = _q_after(graph, conv)
    dx = _dq(graph, conv.input[0])
    dw = _weight_dq(graph, conv.input[1], 4, 0)
    if q is None or dx is None or dw is None:
        return None
    x_type, y_type = _dtype(graph, dx), _dtype(graph, q)
    w_type = TensorProto.UINT8 if graph.value(dw.input[0]).dtype == np.uint8 else TensorProto.INT8
    if x_type != y_type or (x_type == TensorProto.INT8 and w_type != TensorProto.INT8):
        return None
    inputs = [*dx.input, *dw.input, *q.input[1:]]
    if len(conv.input) == 3:
        db = _bias(graph, conv.input[2])
        if db is None:
            return None
        inputs.append(db.input[0])
    attrs = {a.name: a for a in conv.attribute}
    node = graph.make_node("QLinearConv", inputs, q.output)
    node.attribute.extend(attrs.values())
    return node, q


def _fuse_matmul(graph: Graph, mm):
    q = _q_after(graph, mm)
    da, db = _dq(graph, mm.input[0]), _dq(graph, mm.input[1])
    if q is None or da is None or db is None:
        return None
    a_type, b_type, y_type = _dtype(graph, da), _dtype(graph, db), _dtype(graph, q)
    if a_type != y_type or (a_type == TensorProto.INT8 and b_type != TensorProto.INT8):
        return None
    return graph.make_node("QLinearMatMul", [*da.input, *db.input, *q.input[1:]], q.output), q


def _fuse_add(graph: Graph, add):
    q = _q_after(graph, add)
    da, db = _dq(graph, add.input[0]), _dq(graph, add.input[1])
    if q is None or da is None or db is None or not _dtype(graph, da) == _dtype(graph, db) == _dtype(graph, q):
        return None
    graph.use_domain(MS)
    return graph.make_node("QLinearAdd", [*da.input, *db.input, *q.input[1:]], q.output, domain=MS), q


def _fuse_pool(graph: Graph, pool):
    q = _q_after(graph, pool)
    dx = _dq(graph, pool.input[0])
    if q is None or dx is None or _dtype(graph, dx) != _dtype(graph, q):
        return None
    graph.use_domain(MS)
    return graph.make_node("QLinearGlobalAveragePool", [*dx.input, *q.input[1:]], q.output, domain=MS,
                           channels_last=0), q


def _fuse_gemm(graph: Graph, gemm):
    """Gemm -> com.microsoft QGemm: out quantized when a QuantizeLinear follows, else float32."""
    if len(gemm.input) not in (2, 3) or (len(gemm.input) == 3 and not gemm.input[2]) or len(gemm.output) != 1:
        return None
    q = _q_after(graph, gemm)
    da = _dq(graph, gemm.input[0])
    db = _weight_dq(graph, gemm.input[1], 2, 0 if attr(gemm, "transB", 0) else 1)
    if da is None or db is None:
        return None
    a_type = _dtype(graph, da)
    b_type = TensorProto.UINT8 if graph.value(db.input[0]).dtype == np.uint8 else TensorProto.INT8
    if (a_type == TensorProto.INT8 and b_type != TensorProto.INT8) or (q is not None and _dtype(graph, q) != a_type):
        return None
    if q is None and (graph.elem_type(gemm.output[0]) != TensorProto.FLOAT or any(
            n.op_type == "QuantizeLinear" for n in graph.consumers.get(gemm.output[0], ()))):
        return None  # (a QuantizeLinear this cannot take: onnxruntime leaves the group alone too)
    bias = ""
    if len(gemm.input) == 3:
        d = _bias(graph, gemm.input[2])
        if d is None or attr(gemm, "beta", 1.0) != 1.0:
            return None
        bias = d.input[0]
    inputs = [*da.input, *db.input, bias] + ([] if q is None else list(q.input[1:]))
    graph.use_domain(MS)
    node = graph.make_node("QGemm", inputs, gemm.output if q is None else q.output, domain=MS,
                           alpha=float(attr(gemm, "alpha", 1.0)), transA=attr(gemm, "transA", 0),
                           transB=attr(gemm, "transB", 0))
    return node, q


# ops that move or select values: Q(op(DQ(x))) with one scale and zero point is op(x) exactly
_DATA_MOVEMENT = {"MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze"}


def _drop_qdq(graph: Graph, node):
    if len(node.output) != 1 or not node.input:
        return None
    q = _q_after(graph, node)
    dq = _dq(graph, node.input[0])
    if q is None or dq is None:
        return None
    for a, b in zip(dq.input[1:], q.input[1:]):
        va, vb = graph.value(a), graph.value(b)
        if va.dtype != vb.dtype or va.reshape(()) != vb.reshape(()):
            return None
    new = graph.make_node(node.op_type, [dq.input[0], *node.input[1:]], q.output)
    new.attribute.extend(node.attribute)
    return new, q


_FUSIONS = {"Conv": _fuse_conv, "MatMul": _fuse_matmul, "Add": _fuse_add, "GlobalAveragePool": _fuse_pool,
            "Gemm": _fuse_gemm, **{op: _drop_qdq for op in _DATA_MOVEMENT}}


def apply(graph: Graph) -> bool:
    removed = []
    for node in list(graph.nodes):
        fuse = _FUSIONS.get(node.op_type)
        if fuse is None or not _plain(node) or any(n is node for n in removed):
            continue
        fused = fuse(graph, node)
        if fused is None:
            continue
        new, q = fused
        graph.nodes.insert(graph.nodes.index(node if q is None else q), new)  # where the output was made
        removed += [node] if q is None else [node, q]
    return graph.remove(*removed)
