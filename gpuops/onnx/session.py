"""InferenceSession: the onnxruntime-shaped entry point. model -> plan -> device arrays -> ops."""

from __future__ import annotations

import operator
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

import logging

import numpy as np
import onnx

from .. import native
from .. import ops as _ops  # noqa: F401  (registers every op family)
from ..device import Device, get_device, to_host
from ..dtypes import device_supported, np_dtype, type_name
from ..errors import FeedError, GpuopsError, NodeError, OutOfMemoryError
from ..memory import LiveBytes, MemoryManager, is_out_of_memory  # noqa: F401  (is_out_of_memory: re-exported)
from ..ops import checks
from ..registry import canonical_domain
from ..optimizer import optimize as optimize_model
from ..optimizer import save_model
from ..threads import blas_threads
from ..threads import resolve as resolve_threads
from .model import load_model
from .cuda_graphs import DEFAULT_CACHE, CudaGraphs
from .plan import Plan, PlanBuilder, Step

log = logging.getLogger("gpuops")


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
    ``memory_limit`` (bytes, or a fraction of the GPU's memory) caps this session's device pool;
    running past it raises :class:`gpuops.OutOfMemoryError` naming the node, and the session stays usable.
    ``cuda_graph=True`` (CUDA only) captures the whole run as a CUDA graph for each set of feed shapes
    (a signature) and replays it, the plan first specialized to those shapes (shape computations done
    on the host: :mod:`gpuops.onnx.specialize`); ``cuda_graph_cache`` graphs are kept, the least
    recently used dropped first. A signature whose graph cannot be captured (a node reads device
    values on the host, as Loop and NonZero do) runs node by node, logged once
    (:meth:`cuda_graph_status` says which node blocked it); the others are still captured. Each CUDA
    graph keeps a memory pool of its own, with the same limit (see :mod:`gpuops.onnx.cuda_graphs`).

    Concurrency, as in onnxruntime: :meth:`run` is thread-safe. Many threads may call it on one session
    at once, on every device; each call has its own values, feed staging is taken in turns, and the
    CUDA graphs (their static buffers are shared) are captured and replayed by one thread at a time.
    :attr:`last_profile` is the profile of the last profiled call to finish. :meth:`close` must not
    race with running calls.
    ``optimize`` is the graph optimizer's level, ``"all"`` (default), ``"basic"`` or ``"none"``
    (see :mod:`gpuops.optimizer`); ``optimized_model_path`` saves the optimized model there.
    ``threads``: BLAS threads of the CPU ops during :meth:`run` (default: half of the available
    CPUs, which holds up when other processes load the machine; see :mod:`gpuops.threads`).
    """

    def __init__(self, model, device: str | Device = "auto", *, memory_limit: int | float | None = None,
                 cuda_graph: bool = False, cuda_graph_cache: int = DEFAULT_CACHE, optimize: str = "all",
                 optimized_model_path=None, threads: int | None = None):
        self.device = get_device(device)
        self.threads = resolve_threads(threads)
        self.model = optimize_model(load_model(model), optimize, device=self.device.kind)
        if optimized_model_path is not None:
            save_model(self.model, optimized_model_path)
        opsets = {canonical_domain(imp.domain): imp.version for imp in self.model.opset_import} or {"": 1}
        functions = {(canonical_domain(f.domain), f.name): f for f in self.model.functions}
        self.opsets = opsets
        self.plan = PlanBuilder(opsets, self.device.kind, functions, self.model).build(self.model.graph)
        if self.device.kind == "cpu":
            native.prepare()  # the native CPU kernels compile (once, cached) here, not in the first run()
        self.memory = MemoryManager(self.device, memory_limit)
        with self.memory.active():
            self.plan.upload(self.device)
        self.memory.weights = _weight_bytes(self.plan)
        init_names = set(self.plan.initializers)
        self._inputs = [_node_arg(vi) for vi in self.plan.inputs if vi.name not in init_names]
        self._optional_inputs = [_node_arg(vi) for vi in self.plan.inputs if vi.name in self.plan.optional_inputs]
        self._outputs = [_node_arg(vi) for vi in self.model.graph.output]
        self._output_names = [o.name for o in self._outputs]
        self._output_set = frozenset(self._output_names)
        self._feed_args = {a.name: a for a in self._inputs + self._optional_inputs}
        self._required = frozenset(a.name for a in self._inputs)
        # (type, shape) of the inputs declared with a static shape: a CPU feed that is a NumPy array of
        # exactly those passes every check at once
        self._static_feeds = {a.name: (a.dtype, tuple(a.shape)) for a in self._feed_args.values()
                              if self.device.kind == "cpu" and a.dtype is not None and a.shape is not None
                              and all(type(d) is int and d > 0 for d in a.shape)}
        self.last_profile: dict | None = None
        self._graphs = CudaGraphs(self, cuda_graph_cache) if cuda_graph and self.device.kind == "cuda" else None
        self._host_nodes: set = set()  # (op, dtypes) already logged as running on the host
        self._closed = False

    # -- introspection -------------------------------------------------------------------------

    def get_inputs(self) -> list[NodeArg]:
        """Required graph inputs (inputs that are also initializers are optional and not listed)."""
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        return list(self._optional_inputs)

    def memory_stats(self) -> dict:
        """Device pool bytes (current, peak, pooled), allocations vs reuses, and the liveness plan's
        peak next to the total of all intermediates (what a run without releases would hold)."""
        return self.memory.stats()

    # -- running -------------------------------------------------------------------------------

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], *,
            output_device: str = "cpu", profile: bool = False) -> list:
        """Run the graph; returns the requested outputs (all if ``None``).

        Outputs are NumPy arrays, or device arrays with ``output_device="device"`` (CuPy arrays on
        CUDA). Feeds may be NumPy, CuPy or any DLPack-capable arrays (taken without a host copy when
        they already live on this device). ``profile=True`` runs node by node and sets
        :attr:`last_profile` to ``{"device", "nodes", "host_syncs", "kernel_launches"}``: a record per
        node (times, bytes, ``host_syncs``), the host syncs between feed upload and output download
        (``{"count", "nodes"}``: how many, and the nodes where they happened) and the device op calls.
        On the CPU stand-in of CuPy every sync and launch is counted; on CuPy, host syncs count
        gpuops' own device->host copies (host inputs, host-only nodes) and ``kernel_launches`` is None.
        """
        if self._closed:
            raise GpuopsError("the session is closed")
        if output_names:
            names = list(output_names)
            known = self._output_set
            for n in names:
                if n not in known:
                    raise FeedError(f"unknown output name {n!r}; the model's outputs are {sorted(known)}")
        else:
            names = self._output_names
        if output_device not in ("cpu", "device"):
            raise GpuopsError(f"output_device must be 'cpu' or 'device', not {output_device!r}")
        ctx = RunContext(self.device, self.memory, [] if profile else None, host_nodes_logged=self._host_nodes)
        try:
            with self.memory.active(), blas_threads(self.threads):
                feeds = self._check_feeds(input_feed)
                outs = self._graphs.run(feeds, names) if self._graphs is not None and not profile else None
                if outs is None:
                    env = dict(self.plan.weights)
                    env.update(feeds)
                    fed = self.plan.fed
                    ctx.live.hold(sum(_nbytes(v) for k, v in feeds.items() if k in fed))
                    feeds = None  # env's alone: a feed is freed after its last use
                    if profile:
                        syncs, launches = self.device.host_sync_count(), self.device.kernel_launch_count()
                    if self.device.kind == "cpu":  # NumPy checks run at once (checks.require)
                        pending = None
                        run_plan(self.plan, env, ctx)
                    else:
                        with checks.deferred() as pending:  # index checks, read once the run is done
                            run_plan(self.plan, env, ctx)
                    outs = [env[n] for n in names]
                    del env
                    self.memory.note_run(ctx.live)
                    if profile:
                        syncs = self.device.host_sync_count() - syncs
                        launches = None if launches is None else self.device.kernel_launch_count() - launches
                    if pending is not None and pending.pending:
                        pending.check()
        except OutOfMemoryError:
            self.memory.release_cached()
            raise
        self.last_profile = None if not profile else {
            "device": str(self.device),
            "nodes": ctx.profile,
            "host_syncs": {"count": syncs,
                           "nodes": list(dict.fromkeys(r["node"] for r in ctx.profile if r["host_syncs"]))},
            "kernel_launches": launches,
        }
        if output_device == "device":
            return [_callers(v) for v in outs]
        host = []
        for name, v in zip(names, outs):
            if type(v) is np.ndarray:
                host.append(v if v.flags.writeable else v.copy())  # (_callers)
                continue
            try:
                host.append(_to_host(v))
            except Exception as e:  # the device->host copy needs host memory too
                raise _oom_or(e, lambda: NodeError(f"copying output {name!r} to the host failed: {e}"),
                              f"copying output {name!r} ({_nbytes(v):,} bytes) to the host ran out of memory") from e
        return host

    def save_profile(self, path) -> None:
        """Write :attr:`last_profile` (from ``run(..., profile=True)``) as JSON."""
        import json

        if self.last_profile is None:
            raise GpuopsError("no profile recorded: call run(..., profile=True) first")
        with open(path, "w") as f:
            json.dump(self.last_profile, f, indent=1)

    def cuda_graph_status(self, per_signature: bool = False) -> dict:
        """Whether the last run's feed shapes ran as a captured CUDA graph (``cuda_graph=True``):
        ``{"captured": bool, "blocking_node": str | None, "reason": str | None}``; when capture
        failed, the node that broke it and why. ``per_signature=True`` adds ``"signatures"``, a record
        per feed-shape signature seen and not evicted (``shapes``, ``dtypes``, ``captured``,
        ``reason``, ``blocking_node``, ``nodes`` and ``folded_nodes`` of its specialized plan,
        ``memory_bytes`` of its pool, ``planned_peak_bytes`` the liveness minimum with the feeds held,
        ``replays``), ``"cache_size"``, ``"evictions"``, ``"captures"`` and ``"blas_workspace_bytes"`` (the
        graphs' shared cuBLAS workspace). See docs/cuda_graphs.md."""
        g = self._graphs
        if g is None:
            why = ("cuda_graph is off" if self.device.kind == "cuda"
                   else f"CUDA graphs need a CUDA device, not {self.device}")
            out = {"captured": False, "blocking_node": None, "reason": why}
            if per_signature:
                out.update(signatures=[], cache_size=0, evictions=0, captures=0, blas_workspace_bytes=0)
            return out
        with g.lock:
            return g.status(per_signature)

    def close(self) -> None:
        """Release every device buffer this session holds (weights and CUDA graphs included)."""
        if self._graphs is not None:
            with self._graphs.lock:
                self._graphs.release()
        self.plan.drop_weights()
        self.memory.close()
        self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_feeds(self, feed: Mapping[str, Any]) -> dict[str, Any]:
        if type(feed) is not dict and not isinstance(feed, Mapping):  # the ABC check is slow
            raise FeedError(f"input_feed must be a dict of name -> array, not {type(feed).__name__}")
        args = self._feed_args
        names = feed.keys()
        if not names <= args.keys():
            raise FeedError(f"unknown input name(s) {[k for k in feed if k not in args]}; the model's inputs are "
                            f"{[a.name for a in self._inputs]}")
        if not names >= self._required:
            raise FeedError(f"missing input(s) {[a.name for a in self._inputs if a.name not in feed]}")
        out = {}
        static = self._static_feeds
        for name, value in feed.items():
            want = static.get(name)
            if want is not None and type(value) is np.ndarray and value.dtype == want[0] and value.shape == want[1]:
                out[name] = value
                continue
            arg = args[name]
            try:  # classified once, moved once (Device.intake)
                if arg.dtype is None:  # sequence / optional inputs: their tensors go to the device too
                    out[name] = _feed_to_device(self.device, value)
                    continue
                arr = self.device.intake(value, arg.dtype,
                                         upload=lambda host, key=name: self.memory.upload(host, key))
            except FeedError as e:
                raise FeedError(f"input {name!r}: {e}") from None
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


def _feed_to_device(device: Device, value):
    if value is None:
        return None
    if isinstance(value, list):
        return [_feed_to_device(device, v) for v in value]
    return device.intake(value)


def _to_host(value):
    if value is None:
        return None
    if isinstance(value, list):
        return [_to_host(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_host(v) for k, v in value.items()}
    return to_host(value)


@dataclass
class RunContext:
    """What one run carries besides values: the device, memory accounting, the profile being made."""

    device: Device
    memory: MemoryManager
    profile: list | None = None
    live: LiveBytes = field(default_factory=LiveBytes)
    host_nodes_logged: set = field(default_factory=set)
    keep_all: bool = False  # no liveness releases (a CUDA graph capture keeps its buffers)
    xp: Any = None  # the namespace the ops get, when not the device's (a stream capture's)
    failed_node: str | None = None  # the innermost node that raised


class Subgraph:
    """A graph attribute bound to the scope it runs in: ``body(*inputs) -> list of outputs``."""

    def __init__(self, plan: Plan, outer: Mapping[str, Any], ctx: RunContext):
        self.plan, self.outer, self.ctx = plan, outer, ctx

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.plan.inputs]

    @property
    def output_names(self) -> list[str]:
        return list(self.plan.outputs)

    @property
    def output_types(self) -> list[onnx.TypeProto]:
        """Declared output types (e.g. the element shape of an empty scan output)."""
        return [vi.type for vi in self.plan.output_info]

    def __call__(self, *inputs) -> list:
        env = _Scope(self.outer)
        env.update(self.plan.weights)
        for vi, value in zip(self.plan.inputs, inputs):
            env[vi.name] = value
        run_plan(self.plan, env, self.ctx)
        return [env[n] for n in self.plan.outputs]


class _Scope(dict):
    """Local values of a subgraph run, falling back to the enclosing scope's."""

    def __init__(self, outer: Mapping[str, Any]):
        super().__init__()
        self.outer = outer

    def __missing__(self, key):
        return self.outer[key]


def _callers(value):
    """An output for the caller to keep and change: never a (read-only) CPU weight or view of one."""
    return value.copy() if type(value) is np.ndarray and not value.flags.writeable else value


def _weight_bytes(plan: Plan) -> int:
    return sum(map(_nbytes, plan.weights.values())) + sum(
        _weight_bytes(sub) for step in plan.steps for sub in step.subgraphs.values())


def _nbytes(value) -> int:
    try:
        return value.nbytes
    except AttributeError:
        return sum(_nbytes(v) for v in value) if isinstance(value, list) else 0


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
            _Code(s, s.impl.fn, s.attrs, _lookup(s), s.outputs[0] if len(s.outputs) == 1 and s.outputs[0] else None,
                  sum(1 for o in s.outputs if o), tuple(s.outputs),
                  tuple((n, n in plan.produced or n in plan.fed) for n in s.release), bool(s.impl.syncs),
                  _reusable(s, plan), s.subgraphs)
            for s in plan.steps]
    return code


def _lookup(step: Step):
    """``env -> tuple of input values`` for a node whose inputs are all named, computed values."""
    if not step.inputs or not all(step.inputs) or step.host_consts or step.impl.host_inputs or step.subgraphs:
        return None
    get = operator.itemgetter(*step.inputs)
    return get if len(step.inputs) > 1 else lambda env: (get(env),)


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
            except GpuopsError as e:
                ctx.failed_node = ctx.failed_node or step.name
                if step.name in str(e):
                    raise
                raise type(e)(f"{step.describe()}: {e}") from e
            except Exception as e:
                ctx.failed_node = ctx.failed_node or step.name
                limit = ctx.memory.stats()["limit_bytes"]
                raise _oom_or(e, lambda: NodeError(f"{step.describe()} failed: {type(e).__name__}: {e}"),
                              f"{step.describe()} ran out of device memory on {device}"
                              + (f" (session memory_limit {limit:,} bytes)" if limit else "")) from e
            if subgraphs:
                cur, peak, made = live.current, live.peak, live.produced
            if into is not None:  # the input's buffer is now the output's: it dies here, not after
                cur -= _nbytes(env.pop(into[1]))
                live.in_place += 1
            if single is not None and type(result) is not tuple:
                env[single] = result
                try:
                    nb = result.nbytes
                except AttributeError:  # a sequence, or None
                    nb = _nbytes(result)
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
                        nb += _nbytes(value)
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
                            cur -= _nbytes(value)
            args = result = outs = value = None  # the values are env's alone: a dead one is freed, and
            # one that dies at the next node has no reference left but env's and its arguments'
    finally:
        live.current, live.peak, live.produced = cur, peak, made


def _oom_or(e: BaseException, other, message: str) -> GpuopsError:
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
    return get_device("cpu").xp, [_to_host(a) for a in args]


def _to_device(device: Device, result):
    if isinstance(result, tuple):
        return tuple(_to_device(device, r) for r in result)
    if isinstance(result, list):
        return [_to_device(device, r) for r in result]
    return result if result is None else device.asarray(result)


class NodeTimer:
    """Wall time (and device time, from CUDA events) and pool growth of one node."""

    def __init__(self, device: Device, memory: MemoryManager):
        self.device, self.memory = device, memory
        self.bytes0 = memory.used_bytes()
        self.syncs0 = device.host_sync_count()
        self.events = None
        if device.kind == "cuda":
            self.events = (device.lib.cuda.Event(), device.lib.cuda.Event())
            self.events[0].record()
        self.t0 = time.perf_counter()

    def done(self, step: Step, outs, in_place: bool = False) -> dict:
        rec = {"node": step.name, "op": step.op_type, "in_place": in_place}
        if self.events is not None:
            self.events[1].record()
            self.events[1].synchronize()
            rec["device_ms"] = self.device.lib.cuda.get_elapsed_time(*self.events)
        rec["wall_ms"] = (time.perf_counter() - self.t0) * 1e3
        rec["output_bytes"] = sum(_nbytes(v) for v in outs)
        rec["pool_bytes_delta"] = self.memory.used_bytes() - self.bytes0
        rec["host_syncs"] = self.device.host_sync_count() - self.syncs0
        return rec


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
