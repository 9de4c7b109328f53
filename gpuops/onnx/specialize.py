"""Shape specialization: a plan for one feed-shape signature, its shape computations done on the host.

Exported transformers compute shapes at run time: ``Shape`` / ``Size`` of a value, then ``Gather``,
``Unsqueeze``, ``Concat``, ``Slice``, ``Range``, arithmetic... into the shape input of a ``Reshape``,
the positions of an embedding, a causal mask. On a device each of those nodes is a small kernel, and
the host inputs at the end of the chain (a ``Reshape``'s shape) are read back: a host sync per read,
and a CUDA graph capture stops at the first ``Shape`` (its result is copied from pageable host memory).

Once the shapes of the feeds are fixed -- a *signature*: name -> (shape, dtype) -- all of that is
known on the host. :func:`specialize` walks the plan in order with what it knows of each value:

* its value, when the value is a constant (an initializer the run does not feed) or was folded;
* else its shape and dtype: from the signature for feeds, from ``shapes`` (what a run observed)
  when given, else from ONNX's shape inference of the node (ai.onnx ops, with the constant inputs'
  data), else by running the op's own function on zeros of the input shapes when they are small (the
  registry's rule makes that exact: an op's output shape depends only on its input shapes and its
  ``host_inputs`` unless it declares ``syncs``).

``Shape`` and ``Size`` of a value whose shape is known, and every node whose inputs are all known
values, are run on the host with the op's own function on NumPy (as constant folding does) and
become constants of the new plan; the nodes are gone. Bounded: a value that depends on the feeds'
shapes is folded only when it has at most ``max_elements`` elements and is an integer or bool (or a
float of at most :data:`MAX_FLOAT_ELEMENTS`, the scalars of shape arithmetic like ``Cast`` to float,
``Mul`` by a scale, ``Floor``); a value made from constants only (no feed shape involved), of at
most ``max_constant_bytes``. Random ops, nodes with subgraphs and sequences are never folded; for a
model (:func:`specialize_model`) the branches of ``If`` nodes are folded too, with the shapes their
scope has (whole networks sit in the branches of exports that test a feed's value, as silero-vad's do),
and an ``If`` whose condition became a constant is then inlined by the optimizer.

The new plan shares the unchanged steps' ops and sub-plans with the original; its folded constants
are in ``initializers`` (host), the host inputs they feed in the steps' ``host_consts`` and, where a
remaining step reads them on the device (or they are graph outputs), in ``weights`` (uploaded to
``device`` in the caller's allocator context). The original plan is not changed.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .. import registry
from ..executor.evaluate import is_tensor as _tensor, nondeterministic
from ..executor.run import call_op
from ..executor.values import record_shape
from .plan import Plan, Step, host_xp, plan_liveness

MAX_ELEMENTS = 4096
"""Largest value (elements) that depends on the feeds' shapes and is folded."""
MAX_FLOAT_ELEMENTS = 64
"""Largest floating-point value that depends on the feeds' shapes and is folded (scalars of shape
arithmetic; a float mask or table stays on the device)."""
MAX_CONSTANT_BYTES = 1 << 20
"""Largest value made from constants only (no feed shape involved) that is folded."""
MAX_PROBE_ELEMENTS = 1 << 16
"""Largest total input size (elements) for which an output shape nothing else knows is found by
running the op on zeros."""

# ops whose output can be much larger than their inputs: folded only when the output's size is known first
_GROWING = frozenset({"ConstantOfShape", "Expand", "Tile", "Range", "Pad", "Resize", "Upsample", "EyeLike",
                      "OneHot", "RandomNormalLike", "RandomUniformLike"})

Signature = tuple  # ((name, shape tuple, dtype str), ...) sorted by name


def signature(feeds: Mapping[str, Any]) -> Signature:
    """The feed-shape signature of ``feeds`` (name -> array): ``((name, shape, dtype), ...)`` sorted by
    name, hashable (CUDA graphs key their cache by it)."""
    return tuple((k, tuple(v.shape), str(v.dtype)) for k, v in sorted(feeds.items()))


def _shapes_of(feeds) -> dict[str, tuple[tuple, np.dtype]]:
    """name -> (shape, dtype) from a signature tuple, a mapping name -> (shape, dtype) or name -> array."""
    items = feeds if isinstance(feeds, tuple) else feeds.items()
    out = {}
    for item in items:
        if len(item) == 3:
            name, shape, dtype = item
        else:
            name, v = item
            shape, dtype = (v.shape, v.dtype) if hasattr(v, "shape") else v
        out[name] = (tuple(int(d) for d in shape), np.dtype(dtype))
    return out


@dataclass
class Specialized:
    """The result of :func:`specialize`."""

    plan: Plan  # the specialized plan
    signature: Signature
    folded: list[str] = field(default_factory=list)  # the nodes gone (their values are constants)
    constants: dict[str, np.ndarray] = field(default_factory=dict)  # the folded values
    shapes: dict[str, tuple] = field(default_factory=dict)  # name -> (shape, dtype) of every value known


class ShapeRecorder(dict):
    """A run's values (``run_plan``'s ``env``) that records the shape and dtype of every value a node
    stores: ``shapes`` for :func:`specialize` (exact, whatever the ops); the bodies of subgraphs run in
    its scope record theirs into it too."""

    __slots__ = ("shapes",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.shapes: dict[str, tuple] = {}

    def __setitem__(self, name, value):
        record_shape(self.shapes, name, value)
        super().__setitem__(name, value)


def specialize(plan: Plan, feeds, *, device=None, opsets: Mapping[str, int] | None = None,
               shapes: Mapping[str, tuple] | None = None, keep: Iterable[str] = (),
               max_elements: int = MAX_ELEMENTS, max_constant_bytes: int = MAX_CONSTANT_BYTES,
               branches: bool = False) -> Specialized:
    """``plan`` specialized to the feed shapes ``feeds`` (a :func:`signature`, or name -> array or
    (shape, dtype)): the values that depend only on shapes and constants computed on the host (see the
    module's doc). ``device``: where the new constants that remaining steps read on the device go
    (default: they stay NumPy arrays, right for the cpu). ``opsets``: the model's opset imports, for
    ONNX's shape inference (default: each op's registered version). ``shapes``: name -> (shape, dtype)
    of values as a run observed them (:class:`ShapeRecorder`), preferred to inference. ``keep``:
    values the new plan's liveness never releases besides the outputs (a CUDA graph keeps its feeds).
    ``branches``: fold inside the branches of ``If`` nodes too (their values join ``folded`` and
    ``constants``; the new plan's If steps keep their branches as they were: this is for
    :func:`specialize_model`, which drops those nodes from the model's branches)."""
    sig = _shapes_of(feeds)
    hints = dict(shapes or {})
    xp = host_xp()
    consts: dict[str, np.ndarray] = {k: v for k, v in plan.initializers.items() if k not in sig}
    pure = set(consts)  # values made from constants only
    known: dict[str, tuple] = {k: (tuple(v.shape), v.dtype) for k, v in consts.items() if hasattr(v, "shape")}
    known.update(sig)
    folded: list[str] = []
    new_consts: dict[str, np.ndarray] = {}
    steps = _fold_steps(plan.steps, consts=consts, pure=pure, known=known, hints=hints, xp=xp, opsets=opsets,
                        max_elements=max_elements, max_constant_bytes=max_constant_bytes, folded=folded,
                        new_consts=new_consts, branches=branches)
    key = tuple((k, shape, str(dtype)) for k, (shape, dtype) in sorted(sig.items()))
    return Specialized(_build(plan, steps, consts, new_consts, device, set(keep)), key, folded, new_consts, known)


# -- folding -------------------------------------------------------------------------------------

def _fold_steps(steps, *, consts, pure, known, hints, xp, opsets, max_elements, max_constant_bytes, folded,
                new_consts, branches) -> list[Step]:
    """The steps that stay, after folding the others into ``consts`` and ``new_consts`` (their names in
    ``folded``); ``branches``: inside the branches of If nodes as well, which run once per run with
    the scope's shapes (a Loop or Scan body runs at each iteration with other shapes: left as it is)."""
    kept = []
    for step in steps:
        outs, is_pure = _fold(step, consts, pure, known, xp, opsets, max_elements, max_constant_bytes)
        if outs is not None:
            for name, value in outs.items():
                consts[name] = new_consts[name] = value
                known[name] = (value.shape, value.dtype)
                if is_pure:
                    pure.add(name)
            folded.append(step.name)
            continue
        kept.append(step)
        if branches and step.domain == "" and step.op_type == "If":
            for sub in step.subgraphs.values():
                for name, value in sub.initializers.items():
                    consts[name] = value
                    pure.add(name)
                    if hasattr(value, "shape"):
                        known[name] = (tuple(value.shape), value.dtype)
                _fold_steps(sub.steps, consts=consts, pure=pure, known=known, hints=hints, xp=xp, opsets=opsets,
                            max_elements=max_elements, max_constant_bytes=max_constant_bytes, folded=folded,
                            new_consts=new_consts, branches=branches)
        for name, info in zip(step.outputs, _output_shapes(step, consts, known, hints, opsets)):
            if name and info is not None:
                known[name] = info
    return kept


def _fold(step: Step, consts, pure, known, xp, opsets, max_elements, max_constant_bytes):
    """(the node's outputs computed on the host, name -> array, or None when it stays; whether they
    come from constants only)."""
    if step.subgraphs or nondeterministic(step) or not any(step.outputs) or step.impl.syncs:
        return None, False
    names = [n for n in step.inputs if n]
    shape_op = step.domain == "" and step.op_type in ("Shape", "Size")
    if shape_op:
        info = known.get(step.inputs[0]) if step.inputs and step.inputs[0] else None
        if info is None:
            return None, False
        args = [np.broadcast_to(np.zeros((), info[1]), info[0])]  # the shape, without the data
    elif all(n in consts for n in names):
        args = [consts[n] if n else None for n in step.inputs]
    else:
        return None, False
    is_pure = not shape_op and all(n in pure for n in names)
    if not is_pure and step.op_type in _GROWING:  # check the size before making the value
        sizes = _infer_onnx(step, consts, known, opsets)
        if sizes is None or any(s is None or not _small(s[0], s[1], max_elements) for s in sizes):
            return None, False
    while args and args[-1] is None:
        args.pop()
    impl = _host_impl(step)
    attrs = dict(step.attrs)
    if impl.n_outputs:
        attrs["n_outputs"] = len(step.outputs)
    else:
        attrs.pop("n_outputs", None)
    try:
        with np.errstate(all="ignore"):
            result = call_op(impl, xp, args, attrs, where=step.describe())
    except Exception:  # left for run time, where the error names the node
        return None, False
    result = result if isinstance(result, tuple) else (result,)
    if len(result) < sum(1 for o in step.outputs if o):
        return None, False
    out = {}
    for name, value in zip(step.outputs, result):
        if not name:
            continue
        if not _tensor(value):
            return None, False
        value = np.asarray(value)
        if is_pure:
            if value.nbytes > max_constant_bytes:
                return None, False
        elif not _small(value.shape, value.dtype, max_elements):
            return None, False
        out[name] = value
    return out, is_pure


def _small(shape, dtype, max_elements: int) -> bool:
    size = math.prod(shape)
    return size <= max_elements and (np.dtype(dtype).kind in "iub" or size <= MAX_FLOAT_ELEMENTS)


def _host_impl(step: Step) -> registry.OpImpl:
    """The op the host runs for a step: its own when generic, the generic one under a device's kernel."""
    if step.impl.device in (None, "cpu"):
        return step.impl
    return registry.resolve(step.domain, step.op_type, step.impl.since, "cpu", node=step.name)


# -- shapes of the values that stay --------------------------------------------------------------

def _output_shapes(step: Step, consts, known, hints, opsets) -> list:
    """(shape, dtype) or None per output of a step that stays on the device."""
    outs = [hints.get(n) if n else None for n in step.outputs]
    if all(o is not None for o, n in zip(outs, step.outputs) if n) or step.subgraphs:
        return outs
    inferred = _infer_onnx(step, consts, known, opsets) or _probe(step, consts, known)
    if inferred is None:
        return outs
    return [o if o is not None else i for o, i in zip(outs, inferred)]


def _infer_onnx(step: Step, consts, known, opsets) -> list | None:
    """ONNX's shape inference of one ai.onnx node from its inputs' types (and constant inputs' data)."""
    if step.domain != "" or step.subgraphs:
        return None
    version = (opsets or {}).get("", step.impl.since)
    try:
        schema = onnx.defs.get_schema(step.op_type, version, "")
        types, data = {}, {}
        for n in step.inputs:
            if not n:
                continue
            if n not in known:
                return None
            shape, dtype = known[n]
            types[n] = helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)
            if n in consts and np.asarray(consts[n]).size <= MAX_ELEMENTS:
                data[n] = numpy_helper.from_array(np.asarray(consts[n]), n)
        node = helper.make_node(step.op_type, step.inputs, [o or "" for o in step.outputs],
                                **_attr_protos(step))
        result = onnx.shape_inference.infer_node_outputs(schema, node, types, data,
                                                         opset_imports=[helper.make_opsetid("", version)])
    except Exception:
        return None
    out = []
    for name in step.outputs:
        tp = result.get(name) if name else None
        if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
            out.append(None)
            continue
        dims = tp.tensor_type.shape.dim
        if not all(d.HasField("dim_value") for d in dims) or not tp.tensor_type.elem_type:
            out.append(None)
            continue
        out.append((tuple(d.dim_value for d in dims), helper.tensor_dtype_to_np_dtype(tp.tensor_type.elem_type)))
    return out


def _attr_protos(step: Step) -> dict:
    attrs = {}
    for k, v in step.attrs.items():
        if k == "n_outputs" and step.impl.n_outputs:
            continue
        if isinstance(v, np.ndarray):
            v = numpy_helper.from_array(v)
        elif isinstance(v, list) and v and isinstance(v[0], np.ndarray):
            v = [numpy_helper.from_array(t) for t in v]
        elif isinstance(v, list) and not v:
            continue  # an empty list's type is unknown: inference does without it
        attrs[k] = v
    return attrs


def _probe(step: Step, consts, known) -> list | None:
    """Output shapes from running the op's own function on zeros of the input shapes: exact for an op
    without ``syncs`` once its host inputs are known; only for small inputs."""
    if step.impl.syncs or step.subgraphs or nondeterministic(step):
        return None
    args = []
    for i, n in enumerate(step.inputs):
        if not n:
            args.append(None)
        elif n in consts:
            args.append(consts[n])
        elif i in step.impl.host_inputs or n not in known:
            return None
        else:
            args.append(known[n])
    total = sum(math.prod(a[0]) for a in args if isinstance(a, tuple))
    if total > MAX_PROBE_ELEMENTS:
        return None
    args = [np.zeros(a[0], a[1]) if isinstance(a, tuple) else a for a in args]
    while args and args[-1] is None:
        args.pop()
    impl = _host_impl(step)
    attrs = dict(step.attrs)
    if not impl.n_outputs:
        attrs.pop("n_outputs", None)
    try:
        with np.errstate(all="ignore"):
            result = call_op(impl, host_xp(), args, attrs, where=step.describe())
    except Exception:
        return None
    result = result if isinstance(result, tuple) else (result,)
    return [(tuple(r.shape), np.dtype(r.dtype)) if hasattr(r, "shape") else None for r in result] + \
        [None] * (len(step.outputs) - len(result))


# -- the new plan --------------------------------------------------------------------------------

def _build(plan: Plan, steps: list[Step], consts: dict, new_consts: dict, device, keep: set[str]) -> Plan:
    inits = dict(plan.initializers)
    inits.update(new_consts)
    out_steps = []
    on_device: set[str] = set(plan.outputs) & set(new_consts)
    for step in steps:
        host_consts = dict(step.host_consts)
        for i, n in enumerate(step.inputs):
            if n in consts and i in step.impl.host_inputs:
                host_consts[i] = consts[n]  # overridable initializers too, when this signature does not feed them
            elif n in new_consts:
                on_device.add(n)
        for sub in step.subgraphs.values():
            on_device.update(n for n in sub.free_names if n in new_consts)
        out_steps.append(dataclasses.replace(step, host_consts=host_consts, release=[]))
    weights = dict(plan.weights)
    for n in on_device:
        value = new_consts[n]
        if device is None:
            weights[n] = value
        else:
            weights[n] = device.asarray(value)
        if isinstance(weights[n], np.ndarray):
            weights[n].flags.writeable = False
    new = Plan(plan.inputs, list(plan.outputs), inits, out_steps, set(plan.free_names),
               optional_inputs=set(plan.optional_inputs), weights=weights, fed=set(plan.fed),
               output_info=list(plan.output_info))
    plan_liveness(new, keep=set(plan.outputs) | set(inits) | keep)
    return new


# -- a specialized ONNX model, for the optimizer to run on again -----------------------------------

def specialize_model(model: onnx.ModelProto, plan: Plan, feeds, *, shapes: Mapping[str, tuple] | None = None,
                     opsets: Mapping[str, int] | None = None, optimizer=None,
                     max_elements: int = MAX_ELEMENTS) -> tuple[onnx.ModelProto, Specialized]:
    """``model`` (whose plan is ``plan``) specialized to the feed shapes ``feeds``, as an ONNX model:
    the graph inputs fed get the signature's static dimensions, overridable initializers the
    signature does not feed are plain constants, the nodes :func:`specialize` folds are gone (their
    values are initializers: Reshape / Expand / Slice targets are static), and every value's shape
    that is known (``shapes``: what a run observed) is in ``value_info``. Then ``optimizer(model)``
    (e.g. :func:`gpuops.optimizer.optimize` at the session's level) runs on it, so that rewrites that
    need static shapes fire. Returns (the model, :class:`Specialized` of the plan-level folding)."""
    spec = specialize(plan, feeds, opsets=opsets, shapes=shapes, max_elements=max_elements, branches=True)
    sig = _shapes_of(feeds)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name for t in g.initializer} | {t.values.name for t in g.sparse_initializer}
    inputs = []
    for vi in g.input:
        if vi.name in sig:
            vi.type.tensor_type.shape.Clear()
            for d in sig[vi.name][0]:
                vi.type.tensor_type.shape.dim.add().dim_value = d
            inputs.append(vi)
        elif vi.name not in inits:
            inputs.append(vi)  # (a required input: the signature has them all)
    del g.input[:]
    g.input.extend(inputs)
    _drop_folded(g, spec)
    return (optimizer(m) if optimizer is not None else m), spec


def _drop_folded(g: onnx.GraphProto, spec: Specialized) -> None:
    """Remove from ``g`` the nodes :func:`specialize` folded, their values now initializers of ``g``
    where still read, and give the values left their known shapes (``value_info``); the same inside
    the branches of ``g``'s If nodes, where it folded too."""
    consts = spec.constants
    nodes, gone = [], set()
    for n in g.node:
        if any(n.output) and all(o in consts for o in n.output if o):
            gone.update(o for o in n.output if o)
        else:
            nodes.append(n)
    needed = {o.name for o in g.output}
    for n in nodes:
        needed.update(_names_read(n))
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(numpy_helper.from_array(np.asarray(consts[k]), k) for k in sorted(gone & needed))
    produced = {o for n in nodes for o in n.output if o}
    del g.value_info[:]
    for name in sorted(produced - {o.name for o in g.output}):
        info = spec.shapes.get(name)
        if info is None:
            continue
        try:
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(info[1]))
        except (KeyError, TypeError, ValueError):
            continue
        g.value_info.append(helper.make_tensor_value_info(name, elem, list(info[0])))
    for n in nodes:
        if n.op_type == "If" and n.domain in ("", "ai.onnx"):
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    _drop_folded(a.g, spec)


def _names_read(node: onnx.NodeProto) -> set[str]:
    """Values a node reads: its inputs and every input of its subgraphs' nodes (at any depth)."""
    out = {i for i in node.input if i}
    for a in node.attribute:
        for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
            for n in sub.node:
                out |= _names_read(n)
    return out
