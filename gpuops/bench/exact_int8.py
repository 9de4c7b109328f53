"""onnxruntime as an exact oracle for 8-bit models on every x86 CPU.

onnxruntime's u8 x s8 GEMMs (MatMulInteger, ConvInteger, QLinearConv, QGemm, the QDQ convs and matmuls
it fuses, DynamicQuantizeLSTM, QAttention...) run on ``vpmaddubsw`` on x86 CPUs without VNNI (AVX2,
AVX-512 before Cascade Lake): it adds two u8 x s8 products into an int16 that saturates, so a sum of
them is wrong wherever two products exceed 32767 together (255 x 127 x 2 = 64770). With VNNI, and for
u8 x u8 everywhere, its sums are exact int32 ones, as the spec asks.

:func:`unsigned_weights` rewrites a model's int8 weights to uint8 (``w + 128`` and zero point ``+ 128``:
the same ``w - zero_point``, so the same model), which onnxruntime then runs on its exact u8 x u8
kernels; in a QDQ model with int8 activations, those become uint8 too. :func:`u8s8_saturates` tells
whether this machine's onnxruntime needs that, and :func:`for_onnxruntime` gives the model to check
against. The bench and the tests compare gpuops' outputs with onnxruntime's on the rewritten model
there; the bench times the model as it is.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnx.shape_inference
from onnx import TensorProto, helper, numpy_helper

# (domain, op) -> ([(weight input, its zero point input)], the activation's zero point input or None): the
# int8 operands of integer products. onnxruntime has no s8 x u8 kernels: with an int8 activation (its zero
# point an int8 initializer; a model that quantizes activations to int8, for DequantizeLinear's fused
# products) the weights stay as they are.
WEIGHTS = {
    ("", "MatMulInteger"): ([(1, 3)], 2),
    ("", "ConvInteger"): ([(1, 3)], 2),
    ("", "QLinearConv"): ([(3, 5)], 2),
    ("com.microsoft", "QLinearConv"): ([(3, 5)], 2),
    ("", "QLinearMatMul"): ([(3, 5)], 2),
    ("", "DequantizeLinear"): ([(0, 2)], None),
    ("com.microsoft", "DequantizeLinear"): ([(0, 2)], None),
    ("com.microsoft", "QGemm"): ([(3, 5)], 2),
    ("com.microsoft", "DynamicQuantizeMatMul"): ([(1, 3)], None),
    ("com.microsoft", "MatMulIntegerToFloat"): ([(1, 5)], 4),
    ("com.microsoft", "QAttention"): ([(1, 7)], None),
    ("com.microsoft", "DynamicQuantizeLSTM"): ([(1, 9), (2, 11)], None),
}


@functools.lru_cache(maxsize=None)
def u8s8_saturates() -> bool:
    """Whether onnxruntime's u8 x s8 MatMulInteger saturates here (probed on 255 x 127 sums)."""
    import onnxruntime as ort

    B = numpy_helper.from_array(np.full((64, 8), 127, np.int8), "B")
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["A", "B"], ["Y"])], "probe",
                              [helper.make_tensor_value_info("A", TensorProto.UINT8, [4, 64])],
                              [helper.make_tensor_value_info("Y", TensorProto.INT32, [4, 8])], [B])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)  # onnxruntime >= 1.14
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    y = sess.run(None, {"A": np.full((4, 64), 255, np.uint8)})[0]
    return bool((y != 255 * 127 * 64).any())


def unsigned_weights(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """A copy of ``model`` whose int8 weights of integer products (:data:`WEIGHTS`) are uint8 ``w + 128``
    with zero point ``zp + 128`` (128 for an absent one); None when it has none. An initializer is
    shifted in place of the original; a weight fed or computed (its type known from the graph or from
    shape inference) goes through Cast, Add 128 and Cast before the node. Other nodes are left as they
    are."""
    if not any(_key(n) in WEIGHTS for graph in _graphs(model.graph) for n in graph.node):
        return None  # no integer products: not worth a copy and shape inference (a float model's bench run)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(out)
    except Exception:  # noqa: BLE001 - only initializers' and declared types are then known
        inferred = out
    types = {}
    for graph in _graphs(inferred.graph):
        types.update({t.name: t.data_type for t in graph.initializer})
        types.update({v.name: v.type.tensor_type.elem_type for v in (*graph.input, *graph.value_info, *graph.output)})
    replaced: set = set()
    if not _rewrite(out.graph, {}, types, set(), replaced):
        return None
    used = set()
    for graph in _graphs(out.graph):
        used |= {x for n in graph.node for x in n.input} | {o.name for o in graph.output}
    for graph in _graphs(out.graph):
        keep = [t for t in graph.initializer if t.name not in replaced - used]
        del graph.initializer[:]
        graph.initializer.extend(keep)
    return out


def _graphs(graph: onnx.GraphProto):
    """``graph`` and every subgraph in it, at any depth."""
    yield graph
    for node in graph.node:
        for sub in _subgraphs(node):
            yield from _graphs(sub)


def _key(node: onnx.NodeProto) -> tuple:
    """``node``'s key in :data:`WEIGHTS`: its domain ("ai.onnx" as "") and op type."""
    return node.domain if node.domain != "ai.onnx" else "", node.op_type


def _subgraphs(node: onnx.NodeProto) -> list:
    return [g for a in node.attribute for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)]


def _rewrite(graph: onnx.GraphProto, outer: dict, types: dict, taken: set, replaced: set) -> bool:
    inits = dict(outer)
    inits.update({t.name: t for t in graph.initializer})
    taken |= set(types) | {y for n in graph.node for y in n.output}
    made: dict[str, str] = {}  # original name (or a zero point's stand-in key) -> its uint8 form
    nodes: list = []

    def int8(name: str) -> bool:
        return bool(name) and types.get(name) == TensorProto.INT8

    signed_q = [n for n in graph.node if n.op_type == "QuantizeLinear" and len(n.input) > 2 and int8(n.input[2])]
    # int8 activations that only QuantizeLinear writes and only DequantizeLinear reads (a QDQ model) become
    # uint8 with the rest: Q with zero point + 128 writes q + 128, which DQ with zero point + 128 reads back
    readers = {}
    for n in graph.node:
        for i, x in enumerate(n.input):
            readers.setdefault(x, []).append((n, i))
    outputs = {o.name for o in graph.output}
    qdq = all(n.output[0] not in outputs and all(r.op_type == "DequantizeLinear" and i == 0 and len(r.input) > 2
                                                 and int8(r.input[2]) for r, i in readers.get(n.output[0], []))
              for n in signed_q)
    signed_q = {id(n) for n in signed_q}
    shifted_activations: set = set()

    def unsigned(name: str, zero: np.ndarray | None) -> str:
        key = name or f"<zero {zero.shape}>"
        if key not in made:
            new = made[key] = _fresh(f"{name or 'zero_point'}_u8", taken)
            if name and name not in inits:  # fed or computed: shifted by the graph, before its first reader
                wide, plus = _fresh(f"{name}_i32", taken), _fresh(f"{name}_i32_u8", taken)
                nodes.extend([helper.make_node("Cast", [name], [wide], to=TensorProto.INT32),
                              helper.make_node("Add", [wide, _fresh("c128", taken)], [plus]),
                              helper.make_node("Cast", [plus], [new], to=TensorProto.UINT8)])
                graph.initializer.append(numpy_helper.from_array(np.array(128, np.int32), nodes[-2].input[1]))
                return new
            base = numpy_helper.to_array(inits[name]) if name else zero
            replaced.add(name)
            graph.initializer.append(numpy_helper.from_array((base.astype(np.int16) + 128).astype(np.uint8), new))
        return made[key]

    changed = False
    for node in graph.node:
        for sub in _subgraphs(node):
            changed |= _rewrite(sub, inits, types, taken, replaced)
        weights, activation = WEIGHTS.get(_key(node), ([], None))
        if id(node) in signed_q and qdq:
            node.input[2] = unsigned(node.input[2], None)
            shifted_activations.add(node.output[0])
            changed = True
        if node.op_type == "DequantizeLinear" and node.input[0] in shifted_activations:
            node.input[2] = unsigned(node.input[2], None)
            nodes.append(node)
            continue
        if activation is None:
            signed = node.op_type == "DequantizeLinear" and bool(signed_q) and not qdq
        else:
            signed = len(node.input) > activation and int8(node.input[activation])
        for w, zp in [] if signed else weights:
            name = node.input[w] if len(node.input) > w else ""
            zname = node.input[zp] if len(node.input) > zp else ""
            shape = () if zname else _zero_shape(node, inits)
            if not int8(name) or (zname and not int8(zname)) or shape is None:
                continue
            node.input[w] = unsigned(name, None)
            while len(node.input) <= zp:
                node.input.append("")
            node.input[zp] = unsigned(zname, None if zname else np.zeros(shape, np.int8))
            changed = True
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return changed


def _zero_shape(node: onnx.NodeProto, inits: dict) -> tuple | None:
    """The shape of the zero point standing in for an absent one: a scalar, but a DequantizeLinear's is
    its scale's (per axis, blocked), known only for an initializer scale (else None)."""
    if node.op_type != "DequantizeLinear":
        return ()
    return tuple(inits[node.input[1]].dims) if node.input[1] in inits else None


def _fresh(name: str, taken: set) -> str:
    out, i = name, 0
    while out in taken:
        i += 1
        out = f"{name}_{i}"
    taken.add(out)
    return out


def for_onnxruntime(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model to give onnxruntime as an oracle: ``model``, with :func:`unsigned_weights` where its
    u8 x s8 sums saturate."""
    return (u8s8_saturates() and unsigned_weights(model)) or model
