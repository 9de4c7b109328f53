"""Node checks against the ONNX operator schemas, run when a model is loaded, before any call into
onnx's C++ (shape inference, function expansion) and before any kernel sees an attribute.

onnx's C++ shape inference trusts a node's arity and attribute types: a node that breaks them may
abort or crash the process instead of raising (onnx 1.23: a Split whose ``num_outputs`` differs from
its outputs; a Conv whose ``strides`` is a tensor reaches a kernel as a stride of 0). onnxruntime
refuses such nodes while checking the graph, with the same rules checked here:

- the number of inputs and outputs lies within the schema's bounds;
- every attribute the schema declares has the schema's type;
- a Split's ``num_outputs`` equals its number of outputs;
- a convolution's or pooling's ``kernel_shape``, ``strides`` and ``dilations`` are positive and its
  ``pads`` non-negative (onnx's shape inference says so in strict mode; onnxruntime refuses the model),
  each at most :data:`MAX_WINDOW` (the native CPU kernels take 32-bit sizes: a stride of 2**62 made
  one read out of bounds).

Nodes of domains or versions onnx has no schema for (custom ops, com.microsoft) are left to the plan,
which names what it does not support.
"""

from __future__ import annotations

import functools

import onnx
from onnx import defs

from ..errors import ModelError

_ONNX_DOMAINS = {"": "", "ai.onnx": "", "ai.onnx.ml": "ai.onnx.ml", "ai.onnx.preview.training":
                 "ai.onnx.preview.training"}
_TYPE_NAMES = {v: k for k, v in onnx.AttributeProto.AttributeType.items()}
_WINDOW_OPS = frozenset({"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "DeformConv", "MaxPool",
                         "AveragePool", "LpPool", "MaxUnpool"})
_WINDOW_LOW = {"kernel_shape": 1, "strides": 1, "dilations": 1, "pads": 0}
MAX_WINDOW = 2 ** 31 - 1
"""Largest kernel size, stride, dilation or pad a convolution or pooling node may declare."""


@functools.lru_cache(maxsize=4096)
def _schema(op_type: str, domain: str, version: int):
    try:
        return defs.get_schema(op_type, version, domain)
    except defs.SchemaError:
        return None


def check_nodes(model: onnx.ModelProto) -> None:
    """Raise :class:`ModelError` naming the first node (of the graph, its subgraphs or a model-local
    function) that breaks its operator schema's arity or attribute types."""
    opsets = {_ONNX_DOMAINS.get(o.domain, o.domain): o.version for o in model.opset_import}
    _check_nodes(model.graph.node, opsets, "")
    for f in model.functions:
        own = {**opsets, **{_ONNX_DOMAINS.get(o.domain, o.domain): o.version for o in f.opset_import}}
        _check_nodes(f.node, own, f" in function {f.name!r}")


def _check_nodes(nodes, opsets: dict[str, int], where: str) -> None:
    stack = [nodes]
    while stack:
        for node in stack.pop():
            _check_node(node, opsets, where)
            for a in node.attribute:
                stack.extend([g.node for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)])


def _check_node(node: onnx.NodeProto, opsets: dict[str, int], where: str) -> None:
    domain = _ONNX_DOMAINS.get(node.domain)
    version = opsets.get(domain) if domain is not None else None
    if version is None or not isinstance(version, int) or version < 1:
        return
    schema = _schema(node.op_type, domain, version)
    if schema is None:
        return
    name = f"node {node.name or node.op_type!r} ({node.op_type}){where}"
    op = f"{node.op_type}-{schema.since_version}"
    for kind, count, low, high in (("input", len(node.input), schema.min_input, schema.max_input),
                                   ("output", len(node.output), schema.min_output, schema.max_output)):
        if not low <= count <= high:
            bound = f"{low}" if low == high else f"{low} to {high}" if high < 2 ** 31 - 1 else f"at least {low}"
            raise ModelError(f"{name}: has {count} {kind}(s); {op} takes {bound}")
    declared = schema.attributes
    for a in node.attribute:
        spec = declared.get(a.name)
        if spec is not None and int(a.type) != int(spec.type):
            raise ModelError(f"{name}: attribute {a.name!r} is {_TYPE_NAMES.get(a.type, a.type)}, {op} "
                             f"wants {spec.type.name}")
        if node.op_type == "Split" and domain == "" and a.name == "num_outputs" and a.i != len(node.output):
            raise ModelError(f"{name}: num_outputs={a.i} but the node has {len(node.output)} output(s)")
        low = _WINDOW_LOW.get(a.name) if node.op_type in _WINDOW_OPS and domain == "" else None
        if low is not None and any(not low <= v <= MAX_WINDOW for v in a.ints):
            bound = "positive" if low else "non-negative"
            raise ModelError(f"{name}: {a.name} {list(a.ints)[:8]} must be {bound} and at most {MAX_WINDOW:,}")
