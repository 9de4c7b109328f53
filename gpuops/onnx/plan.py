"""Plan: a graph turned, once per session, into steps the executor runs.

Each step holds its resolved op, converted attributes, sub-plans for graph attributes, the host
copies of constant shape-like inputs, what the op's ``prepare`` hook derived from its constant inputs
(:meth:`Plan.upload`; see :mod:`gpuops.registry`), and the values that die after it (liveness: a value
is released after its last consumer; graph outputs and initializers never are). Model-local functions
are inlined here (names grow linearly with nesting; recursion and nesting deeper than
:data:`MAX_FUNCTION_DEPTH` are refused).

One module, past 500 lines: building steps, inlining functions and liveness read one graph walk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto

from .. import registry
from ..dtypes import tensor_to_numpy
from ..errors import GpuopsError, ModelError, UnsupportedOpError
from ..executor.run import call_op
from ..ops.contrib.private import DOMAIN as PRIVATE_DOMAIN

MAX_FUNCTION_DEPTH = 100
"""How deeply model-local function calls may nest (onnxruntime's bound too)."""
MAX_INLINED_NODES = 1_000_000
"""How many nodes inlining functions may add to one model."""
MAX_SPARSE_DENSE_BYTES = 4 << 30
"""Largest dense tensor a sparse initializer or attribute may expand to."""


# Contrib domains onnxruntime resolves without an opset import (each has only version 1); some
# tools write such models.
IMPLICIT_DOMAINS = {"com.microsoft": 1, "com.microsoft.nchwc": 1}

@dataclass
class Step:
    name: str
    op_type: str
    domain: str
    impl: registry.OpImpl
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]  # the op's keywords: the node's attributes, n_outputs=, prepared= (Plan.upload)
    subgraphs: dict[str, "Plan"] = field(default_factory=dict)
    host_consts: dict[int, np.ndarray] = field(default_factory=dict)
    release: list[str] = field(default_factory=list)
    prepared: Any = None  # impl.prepare's result for this session's weights (also attrs["prepared"])
    prepared_from: dict | None = None  # the constant inputs it was prepared from, by name

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
    fed: set[str] = field(default_factory=set)  # graph inputs a run feeds (the top-level plan's)
    output_info: list[onnx.ValueInfoProto] = field(default_factory=list)
    by_node: "Plan | None" = None  # this plan without native programs (gpuops.onnx.programs): profiled runs

    def upload(self, device, outer: dict[str, Any] | None = None, like: "Plan | None" = None) -> None:
        """Copy initializers (this plan's and its subgraphs') to ``device`` once. Host-resident ones
        are made read-only: an op that wrote into a weight would change every later run. Then each
        step whose op has a ``prepare`` hook gets ``prepared`` from its constant inputs: initializers
        that no feed may replace, this plan's or (``outer``) an enclosing graph's.

        ``like``: an uploaded plan of the same model (a shape-specialized plan's base) whose equal
        weights and same steps' ``prepared`` are taken as they are (held once)."""
        from .shape_plans import same_array, same_step  # (sharing with a base plan)

        base = like.weights if like is not None else {}
        self.weights = {}
        for k, v in self.initializers.items():
            same = same_array(base.get(k), v)
            self.weights[k] = base[k] if same else device.asarray(v)
            if same:
                self.initializers[k] = like.initializers.get(k, v)
        for w in self.weights.values():
            if isinstance(w, np.ndarray):
                w.flags.writeable = False
        constants = {k: v for k, v in (outer or {}).items() if k not in self.produced}
        for vi in self.inputs:
            constants.pop(vi.name, None)  # a subgraph's own input hides an outer value of its name
        constants.update((k, v) for k, v in self.weights.items() if k not in self.optional_inputs)
        same_steps = {s.name: s for s in like.steps} if like is not None else {}
        for step in self.steps:
            old = same_steps.get(step.name)
            if old is not None and old.prepared is not None and same_step(step, old, constants):
                _set_prepared(step, old.prepared)
            else:
                _set_prepared(step, _prepare(step, constants))
            for sub in step.subgraphs.values():
                sub.upload(device, constants)

    def drop_weights(self) -> None:
        self.weights = {}
        self.__dict__.pop("_code", None)  # the executor's bound steps hold the prepared values too
        for step in self.steps:
            _set_prepared(step, None)
            step.prepared_from = None
            for sub in step.subgraphs.values():
                sub.drop_weights()


def _set_prepared(step: Step, prepared) -> None:
    """Keep ``prepared`` on the step and among the keywords the op is called with (a new dict: steps
    without one keep theirs, and the call costs what it did)."""
    if prepared is None and step.prepared is None:
        return
    step.prepared = prepared
    attrs = {k: v for k, v in step.attrs.items() if k != "prepared"}
    if prepared is not None:
        attrs["prepared"] = prepared
    step.attrs = attrs


def _prepare(step: Step, constants: dict[str, Any]):
    """``step.impl.prepare(constant inputs by position, attributes)``, or None without a hook."""
    prepare = step.impl.prepare
    if prepare is None:
        return None
    given = {i: constants[n] for i, n in enumerate(step.inputs) if n and n in constants}
    step.prepared_from = {n: constants[n] for n in step.inputs if n and n in constants}
    attrs = {k: v for k, v in step.attrs.items() if k != "prepared"}
    try:
        return prepare(given, attrs)
    except GpuopsError as e:
        raise type(e)(f"{step.describe()}: {e}") from e
    except Exception as e:  # a constant input the op would refuse at run time anyway
        raise ModelError(f"{step.describe()}: preparing its constant inputs failed: {type(e).__name__}: {e}") from e


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
    if a.type == T.FLOATS:  # through NumPy: a C loop over the repeated field (tree ensembles hold 10**5-10**6)
        return np.array(a.floats, dtype=np.float32).tolist() if len(a.floats) > 16 else [float(x) for x in a.floats]
    if a.type == T.INTS:
        return np.array(a.ints, dtype=np.int64).tolist() if len(a.ints) > 16 else [int(x) for x in a.ints]
    if a.type == T.STRINGS:
        return [s.decode("utf-8", errors="surrogateescape") for s in a.strings]
    if a.type == T.TENSORS:
        return [tensor_to_numpy(t) for t in a.tensors]
    if a.type == T.TYPE_PROTO:
        return a.tp
    raise ModelError(f"{where}: attribute {a.name!r} has unsupported type {a.type}")


def _sparse_to_dense(sp: onnx.SparseTensorProto) -> np.ndarray:
    """The dense tensor of a sparse one: indices are either linear (shape [NNZ]) or coordinates
    (shape [NNZ, rank]), each within the dense shape."""
    where = f"sparse tensor {sp.values.name!r}"
    dims = tuple(int(d) for d in sp.dims)
    values = tensor_to_numpy(sp.values)
    idx = tensor_to_numpy(sp.indices)
    if any(d < 0 for d in dims):
        raise ModelError(f"{where}: negative dimension in dims {list(dims)}")
    size = int(np.prod(dims, dtype=object)) if dims else 1
    if size * values.dtype.itemsize > MAX_SPARSE_DENSE_BYTES:
        raise ModelError(f"{where}: dense shape {list(dims)} is larger than "
                         f"gpuops.onnx.plan.MAX_SPARSE_DENSE_BYTES ({MAX_SPARSE_DENSE_BYTES:,} bytes)")
    if values.ndim != 1:
        raise ModelError(f"{where}: values must be 1-D, got shape {list(values.shape)}")
    nnz = values.shape[0]
    if idx.dtype.kind not in "iu" or not (idx.shape == (nnz,) or idx.shape == (nnz, len(dims))):
        raise ModelError(f"{where}: indices of shape {list(idx.shape)} ({idx.dtype}) do not fit {nnz} values "
                         f"in dims {list(dims)}: expected integer indices of shape [{nnz}] or [{nnz}, {len(dims)}]")
    idx = idx.astype(np.int64)
    bound = np.array([size] if idx.ndim == 1 else dims, dtype=np.int64)
    if idx.size and ((idx < 0).any() or (idx >= bound).any()):
        raise ModelError(f"{where}: an index is out of range for dims {list(dims)}")
    dense = np.zeros(size, dtype=values.dtype)
    flat = idx if idx.ndim == 1 else np.ravel_multi_index(tuple(idx.T), dims)
    dense[flat] = values
    return dense.reshape(dims)


def overridable(graph: onnx.GraphProto, ir_version: int | None = None) -> set[str]:
    """Initializers that are also graph inputs: a feed may replace them, so nothing may treat them
    as constants (host copies at plan time, constant folding). Before IR version 4 every initializer
    had to be listed as an input and none is overridable (as in onnxruntime)."""
    if ir_version is not None and ir_version < 4:
        return set()
    inits = {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
    return {i.name for i in graph.input if i.name in inits}


def host_xp():
    from ..device import get_device

    return get_device("cpu").xp


def node_count(plan: Plan) -> int:
    """The steps of ``plan`` and of its subgraphs' plans, at any depth."""
    return sum(1 + sum(node_count(sub) for sub in step.subgraphs.values()) for step in plan.steps)


class PlanBuilder:
    """Builds a :class:`Plan` for a graph (and, recursively, for its subgraphs)."""

    def __init__(self, opsets: dict[str, int], device: str,
                 functions: dict[tuple[str, str], onnx.FunctionProto], model: onnx.ModelProto | None = None):
        self.opsets = opsets
        self.device = device
        self.functions = functions
        self.model = model
        self._value_types: dict[str, onnx.TypeProto] | None = None
        self._tags: set[str] = set()  # name prefixes of inlined function calls, one per call

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

    def build(self, graph: onnx.GraphProto, outer: set[str] = frozenset(), top: bool = True,
              opsets: dict[str, int] | None = None, calls: tuple = ()) -> Plan:
        """The plan of ``graph``; ``outer`` names values of enclosing scopes, ``opsets`` and ``calls``
        (the chain of functions being inlined) are those of the node owning a subgraph."""
        inits = {t.name: tensor_to_numpy(t) for t in graph.initializer}
        inits.update({t.values.name: _sparse_to_dense(t) for t in graph.sparse_initializer})
        input_names = [i.name for i in graph.input]
        over = overridable(graph, self.model.ir_version if self.model is not None else None)
        fed = set(input_names) - set(inits) | over
        defined = set(input_names) | set(inits)
        if top:
            self._check_calls(graph)
        nodes = self._expand(list(graph.node), opsets, calls)
        steps: list[Step] = []
        free: set[str] = set()
        for node, node_opsets, node_calls in nodes:
            step = self._step(node, defined | outer, node_opsets, node_calls)
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
            again = [o for o in step.outputs if o in defined]
            if again:
                raise ModelError(f"{step.describe()}: output {again[0]!r} is already defined by a graph input, "
                                 "initializer or earlier node")
            if step.domain == "" and step.op_type == "Constant" and step.outputs and step.outputs[0]:
                inits[step.outputs[0]] = _fold_constant(step)  # a host-known initializer
                defined.add(step.outputs[0])
                continue
            for i in step.impl.host_inputs:
                if i < len(step.inputs) and step.inputs[i] in inits and step.inputs[i] not in fed:
                    step.host_consts[i] = inits[step.inputs[i]]
            defined.update(o for o in step.outputs if o)
            steps.append(step)
        outputs = [o.name for o in graph.output]
        for o in outputs:
            if o not in defined and o not in outer:
                raise ModelError(f"graph output {o!r} is not produced by any node, input or initializer")
        plan = Plan(graph.input, outputs, inits, steps, free,
                    optional_inputs=over, output_info=list(graph.output), fed=fed if top else set())
        plan_liveness(plan, keep=set(outputs) | set(inits))
        return plan

    # -- nodes ---------------------------------------------------------------------------------

    def _expand(self, nodes, opsets: dict[str, int] | None = None, calls: tuple = ()):
        """(node, opsets, calls) triples with model-local functions inlined, and ops that gpuops
        lacks but whose ONNX schema defines a function body expanded into that body (recursively).
        ``calls`` is the chain of functions a node was inlined from."""
        opsets = opsets or self.opsets
        out = []
        for node in nodes:
            domain = registry.canonical_domain(node.domain)
            key = (domain, node.op_type)
            fn = self.functions.get(key)
            if fn is not None and domain == PRIVATE_DOMAIN and registry.is_registered(domain, node.op_type):
                fn = None  # the optimizer's private fused op (its function: the nodes it replaced) runs as the op
            if fn is None and not registry.is_registered(domain, node.op_type) and domain in opsets:
                fn = self._schema_function(node, opsets[domain])
            if fn is None:
                out.append((node, opsets, calls))
                continue
            _check_call(calls, key)
            inner = dict(opsets)
            inner.update({registry.canonical_domain(o.domain): o.version for o in fn.opset_import})
            out.extend(self._expand(_inline(node, fn, self._tag(node)), inner, calls + (key,)))
        return out

    def _check_calls(self, graph: onnx.GraphProto) -> None:
        """Before inlining anything: refuse recursive model-local functions and calls that would
        expand to more than MAX_INLINED_NODES nodes (a few nested calls can multiply)."""
        sizes: dict[tuple[str, str], int] = {}

        def size(key, chain):
            if key not in sizes:
                _check_call(chain, key)
                sizes[key] = body(self.functions[key].node, chain + (key,))
            return sizes[key]

        def body(nodes, chain):
            total = 0
            for n in _with_subgraph_nodes(nodes):
                key = (registry.canonical_domain(n.domain), n.op_type)
                total += size(key, chain) if key in self.functions else 1
                if total > MAX_INLINED_NODES:
                    raise ModelError(f"model-local functions expand to more than {MAX_INLINED_NODES:,} nodes "
                                     f"(calls of {n.op_type!r}; gpuops.onnx.plan.MAX_INLINED_NODES)")
            return total

        body(graph.node, ())

    def _tag(self, node: onnx.NodeProto) -> str:
        """The prefix of one call's inlined names: the calling node's name, which for a node of an
        inlined body already carries its caller's prefix (so names grow linearly with depth)."""
        base = node.name or node.op_type
        tag, k = base + "/", 0
        while tag in self._tags:
            k += 1
            tag = f"{base}#{k}/"
        self._tags.add(tag)
        return tag

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

    def _step(self, node: onnx.NodeProto, visible: set[str], opsets: dict[str, int], calls: tuple = ()) -> Step:
        domain = registry.canonical_domain(node.domain)
        name = node.name or f"{node.op_type}:{node.output[0] if node.output else ''}"
        if domain not in opsets and domain in IMPLICIT_DOMAINS:
            opsets = {**opsets, domain: IMPLICIT_DOMAINS[domain]}
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
                subgraphs[a.name] = self.build(a.g, outer=visible, top=False, opsets=opsets, calls=calls)
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


def _fold_constant(step: Step) -> np.ndarray:
    """The value of a node without inputs (Constant...), through the executor's op-call path."""
    try:
        return np.asarray(call_op(step.impl, host_xp(), [], step.attrs, where=step.describe()))
    except GpuopsError as e:
        cause = e.__cause__
        if cause is None or isinstance(cause, GpuopsError):
            raise
        raise ModelError(f"{step.describe()}: {type(cause).__name__}: {cause}") from cause  # a bad attribute value


def _check_call(chain: tuple, key: tuple) -> None:
    """Refuse a call of function ``key`` from the functions in ``chain``: recursion, or nesting
    deeper than MAX_FUNCTION_DEPTH."""
    if key in chain:
        cycle = " -> ".join(name for _, name in chain[chain.index(key):] + (key,))
        raise ModelError(f"function {key[1]!r} calls itself ({cycle}): recursion is not allowed")
    if len(chain) >= MAX_FUNCTION_DEPTH:
        raise ModelError(f"function calls nest more than {MAX_FUNCTION_DEPTH} deep, from {chain[0][1]!r} down to "
                         f"{key[1]!r} (gpuops.onnx.plan.MAX_FUNCTION_DEPTH)")


def _with_subgraph_nodes(nodes):
    """``nodes`` and the nodes of their graph attributes, at any depth."""
    stack = list(nodes)
    while stack:
        n = stack.pop()
        yield n
        for a in n.attribute:
            for g in [a.g] if a.type == AttributeProto.GRAPH else a.graphs:
                stack.extend(g.node)


def _inline(node: onnx.NodeProto, fn: onnx.FunctionProto, tag: str) -> list[onnx.NodeProto]:
    """The body of function ``fn`` with its formal names bound to ``node``'s actual ones, its own
    names (values and nodes) prefixed with ``tag``."""
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
        _bind(n, name_of, given, defaults, tag)
        body.append(n)
    return body


def _bind(n: onnx.NodeProto, name_of, given: dict, defaults: dict, tag: str) -> None:
    """Rename ``n`` and its values (inside its subgraphs too: a function body is closed, so every
    name there is the function's) and replace attribute references by the caller's attributes."""
    n.name = tag + (n.name or n.op_type)
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
            a = _bind_graph(a, name_of, given, defaults, tag)
        elif a.type == AttributeProto.GRAPHS:
            a = _bind_graph(a, name_of, given, defaults, tag)
        attrs.append(a)
    del n.attribute[:]
    n.attribute.extend(attrs)


def _bind_graph(a: AttributeProto, name_of, given, defaults, tag: str) -> AttributeProto:
    b = onnx.AttributeProto()
    b.CopyFrom(a)
    for g in ([b.g] if b.type == AttributeProto.GRAPH else b.graphs):
        for vi in [*g.input, *g.output, *g.value_info]:
            vi.name = name_of(vi.name)
        for t in g.initializer:
            t.name = name_of(t.name)
        for inner in g.node:
            _bind(inner, name_of, given, defaults, tag)
    return b


def last_reads(plan: Plan) -> dict[str, int]:
    """name -> the index of the last step of ``plan`` that reads it (subgraph bodies' outer names included)."""
    last: dict[str, int] = {}
    for i, step in enumerate(plan.steps):
        for name in step.inputs:
            if name:
                last[name] = i
        for sub in step.subgraphs.values():
            for name in sub.free_names:
                last[name] = i
    return last


def plan_liveness(plan: Plan, keep: set[str]) -> None:
    plan.produced = {o for step in plan.steps for o in step.outputs if o}
    last = last_reads(plan)
    for i, step in enumerate(plan.steps):
        for name in step.outputs:  # an output nobody reads dies right after it is made
            if name:
                last.setdefault(name, i)
    for name, i in last.items():
        if name not in keep and name not in plan.free_names:
            plan.steps[i].release.append(name)
