"""Plan: a graph turned, once per session, into steps the executor runs.

Each step holds its resolved op, converted attributes, sub-plans for graph attributes, the host
copies of constant shape-like inputs, and the values that die after it (liveness: a value is
released after its last consumer; graph outputs and initializers never are). Model-local functions
are inlined here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, numpy_helper

from .. import registry
from ..errors import ModelError, UnsupportedOpError


@dataclass
class Step:
    name: str
    op_type: str
    domain: str
    impl: registry.OpImpl
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]
    subgraphs: dict[str, "Plan"] = field(default_factory=dict)
    host_consts: dict[int, np.ndarray] = field(default_factory=dict)
    release: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return f"node {self.name!r} ({self.domain + '::' if self.domain else ''}{self.op_type})"


@dataclass
class Plan:
    inputs: list[onnx.ValueInfoProto]
    outputs: list[str]
    initializers: dict[str, np.ndarray]
    steps: list[Step]
    free_names: set[str]  # names read from an enclosing scope (subgraphs only)
    optional_inputs: set[str] = field(default_factory=set)
    weights: dict[str, Any] = field(default_factory=dict)  # initializers on the session's device
    produced: set[str] = field(default_factory=set)  # values made by this plan's steps
    output_info: list[onnx.ValueInfoProto] = field(default_factory=list)

    def upload(self, device) -> None:
        """Copy initializers (this plan's and its subgraphs') to ``device`` once."""
        self.weights = {k: device.asarray(v) for k, v in self.initializers.items()}
        for step in self.steps:
            for sub in step.subgraphs.values():
                sub.upload(device)

    def drop_weights(self) -> None:
        self.weights = {}
        for step in self.steps:
            for sub in step.subgraphs.values():
                sub.drop_weights()


def tensor_to_numpy(t: onnx.TensorProto) -> np.ndarray:
    try:
        return numpy_helper.to_array(t)
    except Exception as e:
        raise ModelError(f"tensor {t.name!r} cannot be read: {e}") from e


def _attr_value(a: AttributeProto, where: str):
    T = AttributeProto
    if a.type == T.FLOAT:
        return float(a.f)
    if a.type == T.INT:
        return int(a.i)
    if a.type == T.STRING:
        return a.s.decode("utf-8", errors="surrogateescape")
    if a.type == T.TENSOR:
        return tensor_to_numpy(a.t)
    if a.type == T.SPARSE_TENSOR:
        return _sparse_to_dense(a.sparse_tensor)
    if a.type == T.FLOATS:
        return [float(x) for x in a.floats]
    if a.type == T.INTS:
        return [int(x) for x in a.ints]
    if a.type == T.STRINGS:
        return [s.decode("utf-8", errors="surrogateescape") for s in a.strings]
    if a.type == T.TENSORS:
        return [tensor_to_numpy(t) for t in a.tensors]
    if a.type == T.TYPE_PROTO:
        return a.tp
    raise ModelError(f"{where}: attribute {a.name!r} has unsupported type {a.type}")


def _sparse_to_dense(sp: onnx.SparseTensorProto) -> np.ndarray:
    values = tensor_to_numpy(sp.values)
    idx = tensor_to_numpy(sp.indices).astype(np.int64)
    dense = np.zeros(int(np.prod(sp.dims)), dtype=values.dtype)
    flat = idx if idx.ndim == 1 else np.ravel_multi_index(tuple(idx.T), tuple(sp.dims))
    dense[flat] = values
    return dense.reshape(tuple(sp.dims))


def _host_xp():
    from ..device import get_device

    return get_device("cpu").xp


class PlanBuilder:
    """Builds a :class:`Plan` for a graph (and, recursively, for its subgraphs)."""

    def __init__(self, opsets: dict[str, int], device: str,
                 functions: dict[tuple[str, str], onnx.FunctionProto], model: onnx.ModelProto | None = None):
        self.opsets = opsets
        self.device = device
        self.functions = functions
        self.model = model
        self._value_types: dict[str, onnx.TypeProto] | None = None

    @property
    def value_types(self) -> dict[str, onnx.TypeProto]:
        """Types of the model's values from shape inference (made on first need: context-dependent
        function bodies depend on their input types)."""
        if self._value_types is None:
            self._value_types = {}
            if self.model is not None:
                try:
                    inferred = onnx.shape_inference.infer_shapes(self.model).graph
                except Exception:
                    inferred = self.model.graph
                for vi in [*inferred.input, *inferred.value_info, *inferred.output]:
                    self._value_types[vi.name] = vi.type
                for t in inferred.initializer:
                    self._value_types[t.name] = onnx.helper.make_tensor_type_proto(t.data_type, t.dims)
        return self._value_types

    def build(self, graph: onnx.GraphProto, outer: set[str] = frozenset(), top: bool = True) -> Plan:
        inits = {t.name: tensor_to_numpy(t) for t in graph.initializer}
        inits.update({t.values.name: _sparse_to_dense(t) for t in graph.sparse_initializer})
        input_names = [i.name for i in graph.input]
        defined = set(input_names) | set(inits)
        nodes = self._expand(list(graph.node), "")
        steps: list[Step] = []
        free: set[str] = set()
        for node, opsets in nodes:
            step = self._step(node, defined | outer, opsets)
            for i, name in enumerate(step.inputs):
                if name and name not in defined:
                    if name in outer:
                        free.add(name)
                    else:
                        raise ModelError(f"{step.describe()}: input {name!r} is not produced by any "
                                         "earlier node, graph input or initializer")
            for sub in step.subgraphs.values():
                for name in sub.free_names:
                    if name not in defined:
                        free.add(name)
            if step.domain == "" and step.op_type == "Constant":  # folded: a host-known initializer
                inits[step.outputs[0]] = np.asarray(step.impl.fn(_host_xp(), **step.attrs))
                defined.add(step.outputs[0])
                continue
            for i in step.impl.host_inputs:
                if i < len(step.inputs) and step.inputs[i] in inits:
                    step.host_consts[i] = inits[step.inputs[i]]
            defined.update(o for o in step.outputs if o)
            steps.append(step)
        outputs = [o.name for o in graph.output]
        for o in outputs:
            if o not in defined and o not in outer:
                raise ModelError(f"graph output {o!r} is not produced by any node, input or initializer")
        plan = Plan(graph.input, outputs, inits, steps, free,
                    optional_inputs={n for n in input_names if n in inits}, output_info=list(graph.output))
        _plan_liveness(plan, keep=set(outputs) | set(inits))
        return plan

    # -- nodes ---------------------------------------------------------------------------------

    def _expand(self, nodes, prefix: str, opsets: dict[str, int] | None = None):
        """(node, opsets) pairs with model-local functions inlined, and ops that gpuops lacks but
        whose ONNX schema defines a function body expanded into that body (recursively)."""
        opsets = opsets or self.opsets
        out = []
        for node in nodes:
            domain = registry.canonical_domain(node.domain)
            fn = self.functions.get((domain, node.op_type))
            if fn is None and not registry.is_registered(domain, node.op_type) and domain in opsets:
                fn = self._schema_function(node, opsets[domain])
            if fn is None:
                out.append((node, opsets))
                continue
            inner = dict(opsets)
            inner.update({registry.canonical_domain(o.domain): o.version for o in fn.opset_import})
            out.extend(self._expand(_inline(node, fn, prefix), prefix + (node.name or node.op_type) + "/", inner))
        return out

    def _schema_function(self, node: onnx.NodeProto, version: int) -> onnx.FunctionProto | None:
        """The function body ONNX defines for an op (context-dependent ones need input types)."""
        try:
            schema = onnx.defs.get_schema(node.op_type, version, node.domain)
        except onnx.defs.SchemaError:
            return None
        body = None
        fn_versions = [v for v in schema.function_opset_versions if v <= version]
        ctx_versions = [v for v in schema.context_dependent_function_opset_versions if v <= version]
        if fn_versions:
            body = schema.get_function_with_opset_version(max(fn_versions))
        elif ctx_versions:
            types = [self.value_types.get(x) or onnx.TypeProto() for x in node.input]
            try:
                body = schema.get_context_dependent_function_with_opset_version(
                    max(ctx_versions), node.SerializeToString(), [t.SerializeToString() for t in types])
            except Exception:
                return None
        if not body:
            return None
        fn = onnx.FunctionProto()
        fn.ParseFromString(body)
        given = {a.name for a in node.attribute}
        for name, attr in schema.attributes.items():  # the schema's defaults stand in for absent attributes
            if name not in given and attr.default_value.name:
                fn.attribute_proto.append(attr.default_value)
        return fn

    def _step(self, node: onnx.NodeProto, visible: set[str], opsets: dict[str, int]) -> Step:
        domain = registry.canonical_domain(node.domain)
        name = node.name or f"{node.op_type}:{node.output[0] if node.output else ''}"
        if domain not in opsets:
            raise UnsupportedOpError(f"node {name!r} ({node.op_type}) uses domain {node.domain!r}, "
                                     "which the model does not import")
        impl = registry.resolve(domain, node.op_type, opsets[domain], self.device, node=name)
        where = f"node {name!r} ({node.op_type})"
        attrs: dict[str, Any] = {}
        subgraphs: dict[str, Plan] = {}
        for a in node.attribute:
            if a.ref_attr_name:
                raise ModelError(f"{where}: attribute {a.name!r} refers to {a.ref_attr_name!r} outside a function")
            if a.type == AttributeProto.GRAPH:
                subgraphs[a.name] = self.build(a.g, outer=visible, top=False)
            elif a.type == AttributeProto.GRAPHS:
                raise UnsupportedOpError(f"{where}: graph-list attributes are not supported")
            else:
                attrs[a.name] = _attr_value(a, where)
        accepted = impl.attributes
        if accepted is not None:
            unknown = set(attrs) | set(subgraphs)
            unknown -= accepted
            if unknown:
                raise ModelError(f"{where}: unknown attribute(s) {sorted(unknown)}; "
                                 f"{node.op_type} takes {sorted(accepted)}")
        if impl.n_outputs:
            attrs["n_outputs"] = len(node.output)
        return Step(name, node.op_type, domain, impl, list(node.input), list(node.output), attrs, subgraphs)


def _inline(node: onnx.NodeProto, fn: onnx.FunctionProto, prefix: str) -> list[onnx.NodeProto]:
    """The body of function ``fn`` with its formal names bound to ``node``'s actual ones."""
    tag = prefix + (node.name or node.op_type) + "/"
    rename = {f: a for f, a in zip(fn.input, node.input)}
    rename.update({f: "" for f in fn.input[len(node.input):]})
    rename.update({f: a for f, a in zip(fn.output, node.output)})

    def name_of(x: str) -> str:
        return rename.get(x, tag + x) if x else ""

    given = {a.name: a for a in node.attribute}
    defaults = {a.name: a for a in fn.attribute_proto}
    body = []
    for inner in fn.node:
        n = onnx.NodeProto()
        n.CopyFrom(inner)
        n.name = tag + (inner.name or inner.op_type)
        _bind(n, name_of, given, defaults)
        body.append(n)
    return body


def _bind(n: onnx.NodeProto, name_of, given: dict, defaults: dict) -> None:
    """Rename ``n``'s values (inside its subgraphs too: a function body is closed, so every name
    there is the function's) and replace attribute references by the caller's attributes."""
    n.input[:] = [name_of(x) for x in n.input]
    n.output[:] = [name_of(x) for x in n.output]
    attrs = []
    for a in n.attribute:
        if a.ref_attr_name:
            src = given.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
            if src is None:
                continue
            b = onnx.AttributeProto()
            b.CopyFrom(src)
            b.name = a.name
            a = b
        elif a.type == AttributeProto.GRAPH:
            a = _bind_graph(a, name_of, given, defaults)
        elif a.type == AttributeProto.GRAPHS:
            a = _bind_graph(a, name_of, given, defaults)
        attrs.append(a)
    del n.attribute[:]
    n.attribute.extend(attrs)


def _bind_graph(a: AttributeProto, name_of, given, defaults) -> AttributeProto:
    b = onnx.AttributeProto()
    b.CopyFrom(a)
    for g in ([b.g] if b.type == AttributeProto.GRAPH else b.graphs):
        for vi in [*g.input, *g.output, *g.value_info]:
            vi.name = name_of(vi.name)
        for t in g.initializer:
            t.name = name_of(t.name)
        for inner in g.node:
            _bind(inner, name_of, given, defaults)
    return b


def _plan_liveness(plan: Plan, keep: set[str]) -> None:
    plan.produced = {o for step in plan.steps for o in step.outputs if o}
    last: dict[str, int] = {}
    for i, step in enumerate(plan.steps):
        for name in step.inputs:
            if name:
                last[name] = i
        for sub in step.subgraphs.values():
            for name in sub.free_names:
                last[name] = i
        for name in step.outputs:  # an output nobody reads dies right after it is made
            if name:
                last.setdefault(name, i)
    for name, i in last.items():
        if name not in keep and name not in plan.free_names:
            plan.steps[i].release.append(name)
