"""The model-local ONNX functions that define gpuops' private fused ops (domain ``ai.gpuops``, see
:mod:`gpuops.ops.contrib.private`): the function's body is the ai.onnx nodes the op replaces, so the
optimized model stays valid ONNX that onnx.checker and onnxruntime accept (they inline the body), while
gpuops runs the op itself."""

from __future__ import annotations

import onnx
from onnx import helper

from ..ops.contrib.private import DOMAIN
from .graph import Graph

FUNCTIONS_IR_VERSION = 8


def define(graph: Graph, name: str, inputs, outputs, body, attributes=(), defaults=(), domains=None) -> None:
    """Add function ``DOMAIN::name`` (``body``: ai.onnx nodes from ``inputs`` to ``outputs``, and nodes of
    ``domains`` (domain -> version) if given; its attribute names, and ``defaults``: AttributeProtos of
    those with a default value) to the model, unless it is there, and import the domain (raising the
    model's IR version to 8, where model-local functions begin, when it is lower)."""
    model = graph.model
    if not any(f.domain == DOMAIN and f.name == name for f in model.functions):
        opsets = [helper.make_opsetid("", graph.opset())]
        opsets += [helper.make_opsetid(d, v) for d, v in (domains or {}).items()]
        fn = helper.make_function(DOMAIN, name, list(inputs), list(outputs), list(body), opsets, list(attributes),
                                  list(defaults))
        model.functions.append(fn)
    model.ir_version = max(model.ir_version, FUNCTIONS_IR_VERSION)
    graph.use_domain(DOMAIN)


def ref(name: str, kind: int = onnx.AttributeProto.INTS) -> onnx.AttributeProto:
    """An attribute that takes the calling node's attribute ``name``."""
    return helper.make_attribute_ref(name, kind)
