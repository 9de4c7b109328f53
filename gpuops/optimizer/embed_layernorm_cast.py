"""com.microsoft EmbedLayerNormalization fed by Casts of int64 ids and mask to int32 (an exporter's int64
inputs: onnxruntime's op takes int32) -> gpuops' private CastEmbedLayerNormalization
(:mod:`gpuops.ops.contrib.private`), whose CPU kernel wraps the int64 values to int32 as it reads them:
the Casts, three nodes of a small BERT's run, are gone, the results the same (a wrapped id out of range
is still the op's error). Its function (:mod:`.private_ops`) is the Casts and the op, so the model
stays valid ONNX.

Applies where input_ids, segment_ids and mask are all given (position_ids may be; the op's third output,
the embeddings' sum, is not used), each a Cast to int32 or already int32, at least one such a Cast of an
int64 value read by this node alone."""

from __future__ import annotations

from onnx import AttributeProto, TensorProto, helper

from ..ops.contrib.private import DOMAIN
from .graph import MS, Graph
from .private_ops import define, ref

NAME = "CastEmbedLayerNormalization"
_IDS = (0, 1, 7)  # input_ids, segment_ids, mask
_ATTRS = {"epsilon": AttributeProto.FLOAT, "mask_index_type": AttributeProto.INT}
_INPUTS = ["input_ids", "segment_ids", "word_embedding", "position_embedding", "segment_embedding", "gamma", "beta",
           "mask", "position_ids"]


def _define(graph: Graph) -> None:
    body = [helper.make_node("Cast", [_INPUTS[i]], [_INPUTS[i] + "_int32"], to=TensorProto.INT32) for i in _IDS]
    ln = helper.make_node("EmbedLayerNormalization", [x + "_int32" if i in _IDS else x for i, x in enumerate(_INPUTS)],
                          ["output", "mask_index"], domain=MS)
    ln.attribute.extend(ref(k, t) for k, t in _ATTRS.items())
    body.append(ln)
    define(graph, NAME, _INPUTS, ["output", "mask_index"], body, _ATTRS, domains={MS: 1})


def _cast_source(graph: Graph, name: str):
    """(the int64 value a single-use Cast to int32 reads, that Cast) for ``name``, or (None, None)."""
    cast = graph.producer_of(name, "Cast")
    if cast is None or not graph.single_use(name) or len(cast.attribute) != 1 or cast.attribute[0].name != "to" \
            or cast.attribute[0].i != TensorProto.INT32 or graph.elem_type(cast.input[0]) != TensorProto.INT64:
        return None, None
    return cast.input[0], cast


def apply(graph: Graph) -> bool:
    removed = []
    for node in graph.nodes:
        if node.op_type != "EmbedLayerNormalization" or node.domain != MS:
            continue
        inputs, outputs = list(node.input), list(node.output)
        while outputs and not outputs[-1]:
            outputs.pop()
        if len(inputs) < 8 or not all(inputs[:8]) or len(outputs) != 2 or not all(outputs):
            continue
        casts = {}
        for i in _IDS:
            source, cast = _cast_source(graph, inputs[i])
            if cast is not None:
                casts[i] = (source, cast)
            elif graph.elem_type(inputs[i]) != TensorProto.INT32:
                break
        else:
            if not casts:
                continue
            _define(graph)
            for i, (source, cast) in casts.items():
                inputs[i] = source
                removed.append(cast)
            node.op_type, node.domain = NAME, DOMAIN
            node.input[:] = inputs
            node.output[:] = outputs
            kept = [a for a in node.attribute if a.name in _ATTRS]
            del node.attribute[:]
            node.attribute.extend(kept)
    return graph.remove(*removed)
