"""The executor: runs a plan's steps over a run's values (``run_plan``), and calls one op the way a
step's op is called (``call_op``).

Plans (:class:`gpuops.onnx.plan.Plan` and its steps) are built above this package and read here as
they are: the executor imports nothing of the plan layer. :func:`run_plan` binds each step once per
plan (:func:`_code`), then per node: gathers the inputs, calls the op (into a dying input's buffer for
``inplace`` ops: in-place reuse), stores the outputs and releases the values that die there, keeping
the live bytes. :func:`call_op` is that per-node call on its own, for ops called outside a plan (MDF's
``onnx::`` functions, constant folding): the same host inputs, syncs and errors naming the node; the
loop of :func:`run_plan` makes the same call inline (it is the per-node cost of every model).
"""

from __future__ import annotations

import logging
import operator
import sys
from typing import Any, Mapping, NamedTuple

import numpy as np

from ..device import Device, get_device, to_host
from ..dtypes import device_supported
from ..errors import GpuopsError, NodeError, OutOfMemoryError
from ..memory import LiveBytes, MemoryManager, is_out_of_memory
from ..ops import checks
from .profile import NodeTimer
from .values import host_value, nbytes, record_shape

log = logging.getLogger("gpuops")


class RunContext:
    """What one run carries besides values: the device, memory accounting, the profile being made
    (a plain class: one is made per run)."""

    __slots__ = ("device", "memory", "profile", "live", "host_nodes_logged", "keep_all", "xp", "failed_node")

    def __init__(self, device: Device, memory: MemoryManager, profile: list | None = None,
                 live: LiveBytes | None = None, host_nodes_logged: set | None = None, keep_all: bool = False,
                 xp: Any = None):
        self.device, self.memory, self.profile = device, memory, profile
        self.live = LiveBytes() if live is None else live
        self.host_nodes_logged = set() if host_nodes_logged is None else host_nodes_logged
        self.keep_all = keep_all  # no liveness releases (a CUDA graph capture keeps its buffers)
        self.xp = xp  # the namespace the ops get, when not the device's (a stream capture's)
        self.failed_node: str | None = None  # the innermost node that raised


class Subgraph:
    """A graph attribute bound to the scope it runs in: ``body(*inputs) -> list of outputs``."""

    __slots__ = ("plan", "outer", "ctx")

    def __init__(self, plan: Plan, outer: Mapping[str, Any], ctx: RunContext):
        self.plan, self.outer, self.ctx = plan, outer, ctx

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.plan.inputs]

    @property
    def output_names(self) -> list[str]:
        """The body's output names (the plan's own list, to read: an If checks its branches' on every run)."""
        return self.plan.outputs

    @property
    def output_types(self) -> list:
        """Declared output types, ``onnx.TypeProto`` (e.g. the element shape of an empty scan output)."""
        return [vi.type for vi in self.plan.output_info]

    def __call__(self, *inputs) -> list:
        shapes = getattr(self.outer, "shapes", None)  # a run recording its values' shapes records the bodies'
        through = _passed_through(self.plan)
        if through is not None and shapes is None and self.ctx.profile is None:
            return [self.outer[n] for n in through]
        env = _Scope(self.outer) if shapes is None else _RecordingScope(self.outer, shapes)
        env.update(self.plan.weights)
        for vi, value in zip(self.plan.inputs, inputs):
            env[vi.name] = value
        run_plan(self.plan, env, self.ctx)
        return [env[n] for n in self.plan.outputs]


def _passed_through(plan: Plan) -> list[str] | None:
    """The enclosing scope's values that a body's outputs are, where the body only passes them on (Identity
    nodes, or none: an If's branch that returns a value computed before it); None for a body that computes.
    Kept on the plan."""
    through = plan.__dict__.get("_through", ())
    if through != ():
        return through
    source: dict[str, str] = {}
    for s in plan.steps:
        if s.op_type != "Identity" or s.domain not in ("", "ai.onnx") or len(s.inputs) != 1 or len(s.outputs) != 1 \
                or s.subgraphs:
            source = None
            break
        source[s.outputs[0]] = source.get(s.inputs[0], s.inputs[0])
    through = None if source is None else [source.get(n, n) for n in plan.outputs]
    if through is not None and not all(n in plan.free_names for n in through):
        through = None
    plan.__dict__["_through"] = through
    return through


class _Scope(dict):
    """Local values of a subgraph run, falling back to the enclosing scope's."""

    def __init__(self, outer: Mapping[str, Any]):
        super().__init__()
        self.outer = outer

    def __missing__(self, key):
        return self.outer[key]


class _RecordingScope(_Scope):
    """A :class:`_Scope` that records the shape and dtype of each value stored into ``shapes`` (the
    enclosing run's: ONNX value names are unique across a graph and its subgraphs)."""

    def __init__(self, outer: Mapping[str, Any], shapes: dict):
        super().__init__(outer)
        self.shapes = shapes

    def __setitem__(self, name, value):
        record_shape(self.shapes, name, value)
        super().__setitem__(name, value)


class _Code(NamedTuple):
    """A step bound for execution at plan time: what :func:`run_plan` needs, without re-deriving it."""

    step: Step
    fn: Any
    attrs: dict
    lookup: Any  # env -> the input values, when gathering is plain lookups (else None: _gather)
    single: str | None  # the output's name when the node names exactly one
    n_required: int  # outputs the node names
    outputs: tuple
    release: tuple  # (name, produced here: counted in the live bytes)
    syncs: bool
    reuse: tuple  # inputs whose buffer may take the output (``inplace`` ops): (position, name)
    subgraphs: dict  # graph attributes' plans (empty for most nodes)


def _code(plan: Plan) -> list[_Code]:
    code = plan.__dict__.get("_code")
    if code is None:
        code = plan.__dict__["_code"] = [
            _Code(s, s.impl.fn, call_keywords(s), _lookup(s),
                  s.outputs[0] if len(s.outputs) == 1 and s.outputs[0] else None, sum(1 for o in s.outputs if o),
                  tuple(s.outputs),
                  tuple((n, n in plan.produced or n in plan.fed) for n in s.release), bool(s.impl.syncs),
                  _reusable(s, plan), s.subgraphs)
            for s in plan.steps]
    return code


def call_keywords(step: Step) -> dict:
    """The keywords a step's op is called with: its attributes (and ``prepared=``), or ``prepared=``
    alone (with ``n_outputs=``) where the op's prepare hook is marked ``holds_attributes``: its result
    holds every attribute the op reads, and binding a keyword costs a call a tenth of a microsecond
    (a tree ensemble has two dozen)."""
    if step.prepared is None or not getattr(step.impl.prepare, "holds_attributes", False):
        return step.attrs
    keep = {"prepared": step.prepared}
    if "n_outputs" in step.attrs:
        keep["n_outputs"] = step.attrs["n_outputs"]
    return keep


def _lookup(step: Step):
    """``env -> tuple of input values`` for a node whose inputs are all named, and whose shape-like inputs
    (``host_inputs``) are all constants (``host_consts``: a Reshape's target, a Squeeze's axes), taken as
    they are; None where :func:`_gather` must move a computed one to the host."""
    inputs, consts = step.inputs, step.host_consts
    if not inputs or not all(inputs) or step.subgraphs or \
            any(i not in consts for i in step.impl.host_inputs if i < len(inputs)):
        return None
    if not consts:
        get = operator.itemgetter(*inputs)
        return get if len(inputs) > 1 else lambda env: (get(env),)
    fixed = [consts.get(i) for i in range(len(inputs))]
    (pos, name), *more = [(i, n) for i, n in enumerate(inputs) if i not in consts] or [(None, None)]
    if pos is None:
        every = tuple(fixed)
        return lambda env: every
    if more:
        return None

    def get_one(env):
        args = fixed.copy()
        args[pos] = env[name]
        return args
    return get_one


def _reusable(step: Step, plan: Plan) -> tuple:
    """Inputs of an ``inplace`` op that die at it and were made by this plan (not a feed, weight,
    output or outer-scope value), each read once by the node: the output may be written over them."""
    if not step.impl.inplace or step.subgraphs or step.host_consts:
        return ()
    return tuple((i, n) for i, n in enumerate(step.inputs)
                 if n and n in step.release and n in plan.produced and step.inputs.count(n) == 1)


def _refs(args: list, i: int) -> int:
    return sys.getrefcount(args[i])


def _sole_refs() -> int:
    """The reference count :func:`_refs` sees for a value only the executor holds (in its values
    and a step's arguments); measured, since interpreters count references differently."""
    env = {"v": np.empty(1)}
    args = [env["v"]]
    return _refs(args, 0)


_SOLE_REFS = _sole_refs()


MIN_IN_PLACE_BYTES = 4096
"""Smaller outputs get fresh buffers: NumPy's cache makes those cheap, and its overlap check makes
``out=`` dearer than a new array for a few elements (from 4 KiB on, ``out=`` is as fast or faster, and
spares large arrays their page faults)."""


def _dying_buffer(args: list, reuse: tuple, device: Device):
    """The first of ``reuse`` (position, name) whose buffer can hold the output: a float array of
    the output's shape (the others broadcast to it) and type that nobody else can see (only the
    executor references it, and it is no view). Returns (position, name) or None."""
    for i, name in reuse:  # counted first: a name bound here to the array would count too
        if (args[i].nbytes >= MIN_IN_PLACE_BYTES and _refs(args, i) == _SOLE_REFS and _fits(args, i)
                and device.owns_buffer(args[i])):
            return i, name
    return None


def _fits(args: list, i: int) -> bool:
    a = args[i]
    if a.dtype.kind != "f":
        return False
    shape = a.shape
    for j, b in enumerate(args):
        if j != i and b is not None and (b.dtype != a.dtype or (b.shape != shape and (
                b.ndim > len(shape) or any(d != 1 and d != s for d, s in zip(b.shape[::-1], shape[::-1]))))):
            return False
    return True


def run_plan(plan: Plan, env: dict, ctx: RunContext) -> None:
    """Execute ``plan``'s steps in order over ``env`` (name -> value), releasing dead values."""
    device = ctx.device
    xp, live, profile, on_cpu = ctx.xp or device.xp, ctx.live, ctx.profile, device.kind == "cpu"
    note_node = ctx.memory.note_node if ctx.memory.pool is not None else None
    pending, keep_all = checks.active(), ctx.keep_all
    cur, peak, made = live.current, live.peak, live.produced  # kept here, stored back at the end
    try:
        # unpacked, and the common cases first: this loop is the per-node cost of every model
        for step, fn, attrs, lookup, single, n_required, outputs, release, syncs, reuse, subgraphs in _code(plan):
            if pending is not None:
                pending.node = step  # described only if its check fails
            if lookup is None:  # subgraphs, host or omitted inputs
                args = _gather(step, env, device)
            else:
                try:
                    args = lookup(env)
                except KeyError:
                    args = _gather(step, env, device)  # raises, naming the missing input
                if args[-1] is None:  # an optional output left unset upstream
                    args = _gather(step, env, device)
            if subgraphs:
                attrs = {**attrs, **{k: Subgraph(p, env, ctx) for k, p in subgraphs.items()}}
                live.current, live.peak, live.produced = cur, peak, made  # the bodies count on
            if profile is not None:
                timer = NodeTimer(device, ctx.memory)
            step_xp = xp
            if not on_cpu and any(_host_resident(a) for a in args):
                step_xp, args = _on_host(step, args, ctx)
            into = None
            if reuse and (len(reuse) > 1 or args[reuse[0][0]].nbytes >= MIN_IN_PLACE_BYTES) and not keep_all \
                    and step_xp is xp:
                into = _dying_buffer(args, reuse, device)
            try:
                if into is not None:
                    result = fn(step_xp, *args, out=args[into[0]], **attrs)
                elif syncs and step_xp is xp:
                    with device.declared_syncs():
                        result = fn(step_xp, *args, **attrs)
                else:  # without an empty ** when there are no attributes: measurably cheaper
                    result = fn(step_xp, *args, **attrs) if attrs else fn(step_xp, *args)
                if step_xp is not xp:
                    result = _to_device(device, result)
            except Exception as e:
                ctx.failed_node = ctx.failed_node or step.name
                err = node_error(e, step.describe(), step.name, device, ctx.memory)
                if err is e:
                    raise
                raise err from e
            if subgraphs:
                cur, peak, made = live.current, live.peak, live.produced
            if into is not None:  # the input's buffer is now the output's: it dies here, not after
                cur -= nbytes(env.pop(into[1]))
                live.in_place += 1
            if single is not None and type(result) is not tuple:
                env[single] = result
                try:
                    nb = result.nbytes
                except AttributeError:  # a sequence, or None
                    nb = nbytes(result)
                outs = None
            else:
                outs = result if isinstance(result, tuple) else (result,)
                if len(outs) < n_required:
                    raise NodeError(f"{step.describe()} produced {len(outs)} output(s), the node expects "
                                    f"{len(step.outputs)}")
                nb = 0
                for name, value in zip(outputs, outs):
                    if name:
                        env[name] = value
                        nb += nbytes(value)
            cur += nb
            made += nb
            if cur > peak:
                peak = cur
            if profile is not None:
                profile.append(timer.done(step, (result,) if outs is None else outs, in_place=into is not None))
            if note_node is not None:
                note_node()
            if not keep_all:
                for name, counted in release:
                    value = env.pop(name, None)
                    if counted and value is not None:
                        try:
                            cur -= value.nbytes
                        except AttributeError:
                            cur -= nbytes(value)
            args = result = outs = value = None  # the values are env's alone: a dead one is freed, and
            # one that dies at the next node has no reference left but env's and its arguments'
    finally:
        live.current, live.peak, live.produced = cur, peak, made


def oom_or(e: BaseException, other, message: str) -> GpuopsError:
    """``OutOfMemoryError(message)`` when ``e`` means the device ran out of memory, else ``other()``."""
    if is_out_of_memory(e):
        return OutOfMemoryError(f"{message}: {type(e).__name__}: {e}")
    return other()


def _host_resident(value) -> bool:
    if isinstance(value, list):
        return any(_host_resident(v) for v in value)
    return isinstance(value, np.ndarray) and not device_supported(value.dtype)


def _on_host(step: Step, args: list, ctx: RunContext):
    """The one place a node of a CUDA session runs on the host: an input of a dtype CuPy cannot
    hold (strings, bfloat16, float8, int4...). Its other inputs are copied explicitly."""
    key = (step.op_type, tuple(sorted({str(a.dtype) for a in args if _host_resident(a)})))
    if key not in ctx.host_nodes_logged:
        ctx.host_nodes_logged.add(key)
        log.info("gpuops: %s runs on the host on %s: CuPy has no %s", step.describe(), ctx.device,
                 ", ".join(key[1]))
    return get_device("cpu").xp, [host_value(a) for a in args]


def _to_device(device: Device, result):
    if isinstance(result, tuple):
        return tuple(_to_device(device, r) for r in result)
    if isinstance(result, list):
        return [_to_device(device, r) for r in result]
    return result if result is None else device.asarray(result)


def call_op(impl, xp, args: list, attrs: dict, *, where: str, name: str | None = None,
            device: Device | None = None):
    """Call op ``impl`` (a :class:`gpuops.registry.OpImpl`) on ``args`` with ``attrs`` as
    :func:`run_plan` calls a step's op: inputs at ``impl.host_inputs`` copied to the host explicitly,
    trailing omitted (None) inputs dropped, an op that declares host syncs (``impl.syncs``) run inside
    ``device.declared_syncs()``, and a failure raised naming the node (:func:`node_error`). ``attrs``
    hold everything the op takes as keywords, ``n_outputs`` and graph attributes (callables) included.
    ``where`` describes the node (``node 'x' (Op)``); ``name`` is what an error that already names the
    node contains (default: ``where``). Returns the op's result as the op returns it."""
    if impl.host_inputs or (args and args[-1] is None):
        args = list(args)
        while args and args[-1] is None:
            args.pop()
        for i in impl.host_inputs:
            if i < len(args) and args[i] is not None:
                args[i] = device.to_host(args[i]) if device is not None else to_host(args[i])
    try:
        if impl.syncs and device is not None:
            with device.declared_syncs():
                return impl.fn(xp, *args, **attrs)
        return impl.fn(xp, *args, **attrs)
    except Exception as e:
        err = node_error(e, where, where if name is None else name, device)
        if err is e:
            raise
        raise err from e


def node_error(e: Exception, where: str, name: str, device: Device | None = None,
               memory: MemoryManager | None = None) -> Exception:
    """The error to raise for ``e``, raised by the op of the node ``where`` describes: a
    :class:`GpuopsError` that names the node (contains ``name``) as it is, another one with ``where``
    prefixed; any other exception a :class:`NodeError`, or an :class:`OutOfMemoryError` when the
    device ran out of memory (``memory``: the session's, whose limit the message gives)."""
    if isinstance(e, GpuopsError):
        return e if name in str(e) else type(e)(f"{where}: {e}")
    limit = memory.stats()["limit_bytes"] if memory is not None else None
    return oom_or(e, lambda: NodeError(f"{where} failed: {type(e).__name__}: {e}"),
                  f"{where} ran out of device memory" + (f" on {device}" if device is not None else "")
                  + (f" (session memory_limit {limit:,} bytes)" if limit else ""))


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

