"""InferenceSession: the onnxruntime-shaped entry point. model -> plan -> device arrays -> ops."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import onnx

from .. import ops as _ops  # noqa: F401  (registers every op family)
from ..device import Device, get_device
from ..dtypes import np_dtype, type_name
from ..errors import FeedError, GpuopsError, ModelError, NodeError
from .model import load_model
from .plan import Plan, PlanBuilder, Step


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output: ``name``, ``shape`` (ints, dim names or None) and ``type``."""

    name: str
    shape: list[int | str | None] | None
    type: str
    dtype: np.dtype | None = None


def _node_arg(vi: onnx.ValueInfoProto) -> NodeArg:
    t = vi.type
    if t.HasField("tensor_type"):
        tt = t.tensor_type
        shape = None
        if tt.HasField("shape"):
            shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
        return NodeArg(vi.name, shape, type_name(tt.elem_type), np_dtype(tt.elem_type) if tt.elem_type else None)
    kind = t.WhichOneof("value") or "unknown"
    return NodeArg(vi.name, None, kind.replace("_type", ""))


class InferenceSession:
    """Runs an ONNX model on one device.

    ``model`` is a path, bytes or :class:`onnx.ModelProto`; ``device`` is ``"cpu"``, ``"cuda"``,
    ``"cuda:N"`` or ``"auto"``. Unsupported ops fail here, at creation, naming the node.
    """

    def __init__(self, model, device: str | Device = "auto"):
        self.device = get_device(device)
        self.model = load_model(model)
        opsets = {}
        for imp in self.model.opset_import:
            opsets[imp.domain if imp.domain != "ai.onnx" else ""] = imp.version
        if not self.model.opset_import:
            opsets[""] = 1
        functions = {(f.domain if f.domain != "ai.onnx" else "", f.name): f for f in self.model.functions}
        self.opsets = opsets
        self.plan = PlanBuilder(opsets, self.device.kind, functions, self.model).build(self.model.graph)
        self.plan.upload(self.device)
        init_names = set(self.plan.initializers)
        self._inputs = [_node_arg(vi) for vi in self.plan.inputs if vi.name not in init_names]
        self._optional_inputs = [_node_arg(vi) for vi in self.plan.inputs if vi.name in init_names]
        self._outputs = [_node_arg(vi) for vi in self.model.graph.output]

    # -- introspection -------------------------------------------------------------------------

    def get_inputs(self) -> list[NodeArg]:
        """Required graph inputs (inputs that are also initializers are optional and not listed)."""
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        return list(self._optional_inputs)

    # -- running -------------------------------------------------------------------------------

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any]) -> list:
        """Run the graph; returns the requested outputs (all if ``None``) as NumPy arrays."""
        names = [o.name for o in self._outputs] if not output_names else list(output_names)
        known = {o.name for o in self._outputs}
        for n in names:
            if n not in known:
                raise FeedError(f"unknown output name {n!r}; the model's outputs are {sorted(known)}")
        env = dict(self.plan.weights)
        env.update(self._check_feeds(input_feed))
        run_plan(self.plan, env, self.device)
        return [_to_host(env[n]) for n in names]

    def _check_feeds(self, feed: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(feed, Mapping):
            raise FeedError(f"input_feed must be a dict of name -> array, not {type(feed).__name__}")
        args = {a.name: a for a in self._inputs + self._optional_inputs}
        unknown = [k for k in feed if k not in args]
        if unknown:
            raise FeedError(f"unknown input name(s) {unknown}; the model's inputs are "
                            f"{[a.name for a in self._inputs]}")
        missing = [a.name for a in self._inputs if a.name not in feed]
        if missing:
            raise FeedError(f"missing input(s) {missing}")
        out = {}
        for name, value in feed.items():
            arg = args[name]
            if arg.dtype is None:  # sequence / optional / map inputs pass through
                out[name] = value if value is None or isinstance(value, list) else self.device.asarray(value)
                continue
            arr = value if self.device.is_native(value) else self.device.asarray(_as_array(value, arg))
            if arr.dtype != arg.dtype:
                raise FeedError(f"input {name!r}: expected dtype {arg.type} ({arg.dtype}), got {arr.dtype}")
            if arg.shape is not None:
                if arr.ndim != len(arg.shape):
                    raise FeedError(f"input {name!r}: expected rank {len(arg.shape)} (shape {arg.shape}), "
                                    f"got shape {tuple(arr.shape)}")
                for axis, (want, got) in enumerate(zip(arg.shape, arr.shape)):
                    if isinstance(want, int) and want > 0 and want != got:
                        raise FeedError(f"input {name!r}: dimension {axis} must be {want} "
                                        f"(shape {arg.shape}), got shape {tuple(arr.shape)}")
            out[name] = arr
        return out


def _as_array(value, arg: NodeArg):
    if isinstance(value, (int, float, bool, list, tuple)) and not isinstance(value, np.ndarray):
        return np.asarray(value, dtype=arg.dtype)
    return value


def _to_host(value):
    from ..device import to_host

    if value is None:
        return None
    if isinstance(value, list):
        return [_to_host(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_host(v) for k, v in value.items()}
    return to_host(value)


class Subgraph:
    """A graph attribute bound to the scope it runs in: ``body(*inputs) -> list of outputs``."""

    def __init__(self, plan: Plan, outer: Mapping[str, Any], device: Device):
        self.plan, self.outer, self.device = plan, outer, device

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.plan.inputs]

    @property
    def output_names(self) -> list[str]:
        return list(self.plan.outputs)

    def __call__(self, *inputs) -> list:
        env = _Scope(self.outer)
        env.update(self.plan.weights)
        for vi, value in zip(self.plan.inputs, inputs):
            env[vi.name] = value
        run_plan(self.plan, env, self.device)
        return [env[n] for n in self.plan.outputs]


class _Scope(dict):
    """Local values of a subgraph run, falling back to the enclosing scope's."""

    def __init__(self, outer: Mapping[str, Any]):
        super().__init__()
        self.outer = outer

    def __missing__(self, key):
        return self.outer[key]


def run_plan(plan: Plan, env: dict, device: Device) -> None:
    """Execute ``plan``'s steps in order over ``env`` (name -> value), releasing dead values."""
    xp = device.xp
    for step in plan.steps:
        args = _gather(step, env, device)
        attrs = step.attrs
        if step.subgraphs:
            attrs = {**attrs, **{k: Subgraph(p, env, device) for k, p in step.subgraphs.items()}}
        try:
            result = step.impl.fn(xp, *args, **attrs)
        except GpuopsError as e:
            if step.name in str(e):
                raise
            raise type(e)(f"{step.describe()}: {e}") from e
        except Exception as e:
            raise NodeError(f"{step.describe()} failed: {type(e).__name__}: {e}") from e
        outs = result if isinstance(result, tuple) else (result,)
        if len(outs) < sum(1 for o in step.outputs if o):
            raise NodeError(f"{step.describe()} produced {len(outs)} output(s), the node expects "
                            f"{len(step.outputs)}")
        for name, value in zip(step.outputs, outs):
            if name:
                env[name] = value
        for name in step.release:
            env.pop(name, None)


def _gather(step: Step, env: dict, device: Device) -> list:
    args = []
    for i, name in enumerate(step.inputs):
        if not name:
            args.append(None)
        elif i in step.host_consts:
            args.append(step.host_consts[i])
        else:
            try:
                value = env[name]
            except KeyError:
                raise NodeError(f"{step.describe()}: input {name!r} has no value") from None
            if i in step.impl.host_inputs and value is not None:
                value = device.to_host(value)  # explicit transfer of a computed shape-like input
            args.append(value)
    while args and args[-1] is None:
        args.pop()
    return args
