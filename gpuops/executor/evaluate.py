"""ONNX nodes evaluated ahead of a run, outside any plan: constant folding
(:mod:`gpuops.optimizer.constant_folding`) computes a node whose inputs are all constant with gpuops'
own op on the cpu device, through :func:`gpuops.executor.run.call_op` (host inputs, syncs and errors as
in a run). Shape specialization (:mod:`gpuops.onnx.specialize`) shares the rules of what is never
evaluated ahead (:func:`nondeterministic`) and what a folded value may be (:func:`is_tensor`).

A node's op and attributes are resolved as the plan builder (:mod:`gpuops.onnx.plan`) resolves them:
the registry's op for the node's opset (contrib domains without an opset import at version 1),
attributes converted to the values the ops take (str, ints, floats, NumPy arrays), attributes the op
does not take refused, ``n_outputs`` given to ops that take it. Graph and sparse attributes are not
evaluated here (the node is left for the plan, which handles both).
"""

from __future__ import annotations

import numpy as np
from onnx import AttributeProto, helper, numpy_helper

from .. import registry
from ..device import get_device
from ..dtypes import onnx_dtype
from ..errors import ModelError, UnsupportedOpError
from .run import call_op

IMPLICIT_DOMAINS = {"com.microsoft": 1, "com.microsoft.nchwc": 1}
"""Contrib domains onnxruntime resolves without an opset import (each has only version 1)."""

_RANDOM = ("Random", "Bernoulli", "Multinomial", "Dropout")
_NOT_HERE = (AttributeProto.GRAPH, AttributeProto.GRAPHS, AttributeProto.SPARSE_TENSOR,
             AttributeProto.SPARSE_TENSORS)


def nondeterministic(node) -> bool:
    """Random* ops, Bernoulli, Multinomial, and the Dropout family (random in training mode): never
    evaluated ahead of a run. ``node``: an ``onnx.NodeProto`` or a plan step."""
    return any(k in node.op_type for k in _RANDOM)


def is_tensor(value) -> bool:
    """Whether ``value`` can be a constant of a model: a NumPy array (or scalar) of an ONNX type."""
    if not isinstance(value, (np.ndarray, np.generic)):
        return False
    try:
        onnx_dtype(np.asarray(value).dtype)
    except Exception:
        return False
    return True


def describe(node) -> str:
    return f"node {node.name or node.op_type!r} ({node.domain + '::' if node.domain else ''}{node.op_type})"


def attribute_value(a: AttributeProto, where: str):
    """An ONNX attribute as the ops take it: str for strings, NumPy arrays for tensors, lists for
    repeated values."""
    if a.ref_attr_name:
        raise ModelError(f"{where}: attribute {a.name!r} refers to {a.ref_attr_name!r} outside a function")
    if a.type in _NOT_HERE:
        raise UnsupportedOpError(f"{where}: attribute {a.name!r} is not evaluated ahead of a run")
    T = AttributeProto
    value = helper.get_attribute_value(a)
    if a.type == T.STRING:
        return value.decode("utf-8", errors="surrogateescape")
    if a.type == T.STRINGS:
        return [s.decode("utf-8", errors="surrogateescape") for s in value]
    if a.type == T.TENSOR:
        return numpy_helper.to_array(value)
    if a.type == T.TENSORS:
        return [numpy_helper.to_array(t) for t in value]
    if a.type in (T.FLOAT, T.INT, T.FLOATS, T.INTS, T.TYPE_PROTO):
        return value
    raise ModelError(f"{where}: attribute {a.name!r} has unsupported type {a.type}")


def node_op(node, opsets: dict[str, int], device: str = "cpu") -> tuple[registry.OpImpl, dict]:
    """The op ``node`` runs with on ``device`` at the model's ``opsets``, and its attributes."""
    domain = registry.canonical_domain(node.domain)
    where = describe(node)
    if domain not in opsets and domain in IMPLICIT_DOMAINS:
        opsets = {**opsets, domain: IMPLICIT_DOMAINS[domain]}
    if domain not in opsets:
        raise UnsupportedOpError(f"{where} uses domain {node.domain!r}, which the model does not import")
    impl = registry.resolve(domain, node.op_type, opsets[domain], device, node=node.name or node.op_type)
    attrs = {a.name: attribute_value(a, where) for a in node.attribute}
    accepted = impl.attributes
    if accepted is not None and not set(attrs) <= accepted:
        raise ModelError(f"{where}: unknown attribute(s) {sorted(set(attrs) - accepted)}; "
                         f"{node.op_type} takes {sorted(accepted)}")
    if impl.n_outputs:
        attrs["n_outputs"] = len(node.output)
    return impl, attrs


def evaluate_node(node, opsets: dict[str, int], inputs: list) -> tuple:
    """``node``'s outputs computed on the cpu device from ``inputs`` (one value or None per node
    input), as a tuple; raises as a run would (naming the node)."""
    impl, attrs = node_op(node, opsets, "cpu")
    cpu = get_device("cpu")
    result = call_op(impl, cpu.xp, inputs, attrs, where=describe(node), device=cpu)
    return result if isinstance(result, tuple) else (result,)
