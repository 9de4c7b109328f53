"""InferenceSession: the onnxruntime-shaped entry point. model -> optimizer -> plan -> executor
(:mod:`gpuops.executor`) -> device arrays -> ops. Here: the session's creation, feed checks and
uploads, and the outputs handed back; running the plan is the executor's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import onnx

from .. import native
from .. import ops as _ops  # noqa: F401  (registers every op family)
from ..device import Device, get_device
from ..dtypes import np_dtype, type_name
from ..errors import FeedError, GpuopsError, NodeError, OutOfMemoryError
from ..executor import profile as _profile
from ..executor.cuda_graphs import DEFAULT_CACHE, CudaGraphs
from ..executor.run import RunContext, oom_or, run_plan
from ..executor.values import check_map, host_value, nbytes, string_feed
from ..memory import MemoryManager, is_out_of_memory
from ..ops import checks
from ..registry import canonical_domain
from ..optimizer import optimize as optimize_model
from ..optimizer import save_model
from ..threads import blas_controlled, blas_threads
from ..threads import resolve as resolve_threads
from . import programs, specialize
from .model import load_model
from .plan import Plan, PlanBuilder, node_count
from .shape_plans import DEFAULT_CACHE as DEFAULT_SHAPE_PLANS
from .shape_plans import ShapePlans, owned_bytes

MAX_SIGNATURES = 1024
"""Feed signatures a CPU session remembers as having passed the feed checks (beyond them it starts over)."""


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
    graph keeps a memory pool of its own, with the same limit (see :mod:`gpuops.executor.cuda_graphs`).

    Concurrency, as in onnxruntime: :meth:`run` is thread-safe. Many threads may call it on one session
    at once, on every device; each call has its own values, feed staging is taken in turns, and the
    CUDA graphs (their static buffers are shared) are captured and replayed by one thread at a time.
    :attr:`last_profile` is the profile of the last profiled call to finish. :meth:`close` must not
    race with running calls.
    ``optimize`` is the graph optimizer's level, ``"all"`` (default), ``"basic"`` or ``"none"``
    (see :mod:`gpuops.optimizer`); ``optimized_model_path`` saves the optimized model there.
    ``shape_plans`` (CPU): how many feed-shape signatures get a plan of their own, the model specialized
    to those shapes and optimized again, once a signature has run twice (0: none; see
    :mod:`gpuops.onnx.shape_plans`; :meth:`shape_plan_status` says what each did).
    ``threads``: threads of the CPU ops (the BLAS and the native kernels) during :meth:`run` (default:
    ``GPUOPS_NUM_THREADS``, else the physical cores up to 16, as onnxruntime's; see :mod:`gpuops.threads`).
    """

    def __init__(self, model, device: str | Device = "auto", *, memory_limit: int | float | None = None,
                 cuda_graph: bool = False, cuda_graph_cache: int = DEFAULT_CACHE, optimize: str = "all",
                 optimized_model_path=None, threads: int | None = None, shape_plans: int = DEFAULT_SHAPE_PLANS):
        self.device = get_device(device)
        self.threads = resolve_threads(threads)
        if isinstance(shape_plans, bool) or not isinstance(shape_plans, int) or shape_plans < 0:
            raise GpuopsError(f"shape_plans must be a non-negative integer, not {shape_plans!r}")
        self._optimize = optimize
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
        self._map_feeds = {vi.name: (np_dtype(vi.type.map_type.key_type),
                                     np_dtype(vi.type.map_type.value_type.tensor_type.elem_type))
                           for vi in self.plan.inputs if vi.type.HasField("map_type")}
        # (type, rank, (axis, size) of each static dimension) of the inputs declared with a type and rank:
        # a CPU feed that is a NumPy array of those passes every check at once
        self._static_feeds = {a.name: (a.dtype, len(a.shape), tuple((i, d) for i, d in enumerate(a.shape)
                                                                   if type(d) is int and d > 0))
                              for a in self._feed_args.values()
                              if self.device.kind == "cpu" and a.dtype is not None and a.dtype != object
                              and a.shape is not None}
        # signatures (ShapePlans.key) of CPU feed dicts of NumPy arrays that passed the checks as they were
        self._valid_signatures: set | None = set() if self.device.kind == "cpu" else None
        self.last_profile: dict | None = None
        self._graphs = (CudaGraphs(self, cuda_graph_cache, specializer=specialize)
                        if cuda_graph and self.device.kind == "cuda" else None)
        self._host_nodes: set = set()  # (op, dtypes) already logged as running on the host
        self._shape_plans = (ShapePlans(self._specialized_plan, shape_plans)
                             if self.device.kind == "cpu" and shape_plans and optimize != "none" else None)
        self._blas = blas_threads(self.threads)  # entered by every run (its state is the module's)
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
        names = self._requested(output_names) if output_names else self._output_names
        if output_device != "cpu" and output_device != "device":
            raise GpuopsError(f"output_device must be 'cpu' or 'device', not {output_device!r}")
        ctx = RunContext(self.device, self.memory, [] if profile else None, None, self._host_nodes)
        native.set_threads(self.threads)  # the native kernels' pools (kept: each run sets its own)
        counts = None
        try:
            if self.memory.pool is None:
                outs, counts = self._run(names, input_feed, ctx, profile)
            else:
                with self.memory.active():
                    outs, counts = self._run(names, input_feed, ctx, profile)
        except OutOfMemoryError:
            self.memory.release_cached()
            raise
        if profile:
            self.last_profile = _profile.summary(self.device, ctx.profile, counts)
        elif self.last_profile is not None:
            self.last_profile = None
        if output_device == "device":
            return [_callers(v) for v in outs]
        for v in outs:
            if type(v) is not np.ndarray or not v.flags.writeable:
                break
        else:
            return outs  # (the common case: every output a NumPy array the caller may change)
        host = []
        for name, v in zip(names, outs):
            if type(v) is np.ndarray:
                host.append(v if v.flags.writeable else v.copy())  # (_callers)
                continue
            try:
                host.append(host_value(v))
            except Exception as e:  # the device->host copy needs host memory too
                raise oom_or(e, lambda: NodeError(f"copying output {name!r} to the host failed: {e}"),
                             f"copying output {name!r} ({nbytes(v):,} bytes) to the host ran out of memory") from e
        return host

    def _requested(self, output_names: Sequence[str]) -> list[str]:
        names = list(output_names)
        known = self._output_set
        for n in names:
            if n not in known:
                raise FeedError(f"unknown output name {n!r}; the model's outputs are {sorted(known)}")
        return names

    def _run(self, names: list[str], input_feed, ctx: RunContext, profile: bool):
        """The run inside its thread count and memory pool: (the outputs, the profile's device counters)."""
        feeds, key = self._feeds(input_feed)
        if self._graphs is not None and not profile:
            with self._blas:
                outs = self._graphs.run(feeds, names)
            if outs is not None:
                return outs, None
        plan, record = self.plan, False
        if self._shape_plans is not None and key is not None:
            plan, record = self._shape_plans.lookup(key)
            plan = plan or self.plan
            if profile and plan.by_node is not None:  # node by node, each timed
                plan = plan.by_node
        env = specialize.ShapeRecorder(plan.weights) if record else dict(plan.weights)
        env.update(feeds)
        shapes_of = {k: (v.shape, v.dtype) for k, v in feeds.items()} if record else None
        fed = plan.fed
        live = ctx.live
        held = 0
        for k, v in feeds.items():  # (a loop: a comprehension costs a function call)
            if k in fed:
                held += nbytes(v)
        live.current = live.peak = held
        feeds = v = None  # env's alone: a feed (an uploaded one) is freed after its last use
        counts = _profile.counters(self.device) if profile else None
        pending = None
        if self.device.kind == "cpu":  # NumPy checks run at once (checks.require)
            try:
                if programs.calls_blas(plan) and blas_controlled():
                    with self._blas:
                        run_plan(plan, env, ctx)
                else:
                    run_plan(plan, env, ctx)
            except BaseException:
                if record:
                    self._shape_plans.abandon(key)  # the next run of these shapes records them
                raise
        else:
            with checks.deferred() as pending, self._blas:  # index checks, read once the run is done
                run_plan(plan, env, ctx)
        outs = [env[n] for n in names]
        if record:
            self._shape_plans.add(key, shapes_of, env.shapes)
        del env
        self.memory.note_run(live)
        if profile:
            counts = _profile.since(self.device, counts)
        if pending is not None and pending.pending:
            pending.check()
        return outs, counts

    def save_profile(self, path) -> None:
        """Write :attr:`last_profile` (from ``run(..., profile=True)``) as JSON."""
        if self.last_profile is None:
            raise GpuopsError("no profile recorded: call run(..., profile=True) first")
        _profile.write(self.last_profile, path)

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

    def shape_plan_status(self) -> dict:
        """The CPU session's shape-specialized plans (``shape_plans``): per signature kept, its feed
        ``shapes``, whether it has a plan of its own (``specialized``; else why not, ``reason``), its
        ``nodes`` against the session plan's ``base_nodes``, the nodes folded away (``folded``), the
        ``bytes`` it holds alone and its ``runs``; and the cache's ``bytes``, ``builds`` and ``evictions``."""
        if self._shape_plans is None:
            return {"signatures": [], "bytes": 0, "builds": 0, "evictions": 0}
        return self._shape_plans.status()

    def specialized_model(self, feeds: Mapping[str, Any]) -> onnx.ModelProto:
        """The ONNX model a shape-specialized plan for ``feeds``' shapes is built from (after the
        optimizer's second pass): for inspection, or ``optimized_model_path``-style saving."""
        feeds = self._check_feeds(feeds)
        env = specialize.ShapeRecorder(self.plan.weights)
        env.update(feeds)
        with blas_threads(self.threads):
            run_plan(self.plan, env, RunContext(self.device, self.memory))
        model, _ = self._specialize(feeds, env.shapes)
        return model

    def _shapes_vary(self) -> bool:
        """Whether a signature could teach the optimizer anything: a feed has a dimension that is not
        static, or the plan computes shapes (``Shape``/``Size`` left). Else it already knew them all."""
        if any(st.domain == "" and st.op_type in ("Shape", "Size") for st in self.plan.steps):
            return True
        return any(a.shape is None or not all(type(d) is int and d > 0 for d in a.shape)
                   for a in self._feed_args.values())

    def _specialize(self, feeds, shapes):
        return specialize.specialize_model(
            self.model, self.plan, feeds, shapes=shapes, opsets=self.opsets,
            optimizer=lambda m: optimize_model(m, self._optimize, device=self.device.kind))

    def _specialized_plan(self, feeds, shapes):
        """(the plan for ``feeds``' shapes or None when it saves nothing, the bytes it holds alone, what it
        did): for :class:`ShapePlans`. The model specialized to the shapes (where they can vary) and
        optimized again, then its runs of natively bound nodes made native programs
        (:mod:`gpuops.onnx.programs`)."""
        base = node_count(self.plan)
        plan, info, nbytes = self.plan, {"nodes": base, "base_nodes": base, "folded": 0}, 0
        if self._shapes_vary():
            model, spec = self._specialize(feeds, shapes)
            opsets = {canonical_domain(imp.domain): imp.version for imp in model.opset_import} or {"": 1}
            functions = {(canonical_domain(f.domain), f.name): f for f in model.functions}
            built = PlanBuilder(opsets, self.device.kind, functions, model).build(model.graph)
            info = {"nodes": node_count(built), "base_nodes": base, "folded": len(spec.folded)}
            if info["nodes"] < base:
                built.upload(self.device, like=self.plan)
                plan, nbytes = built, owned_bytes(built, self.plan)
        compiled = programs.compile_programs(plan, {**feeds, **shapes})
        if compiled is not None:
            plan, made = compiled
            info.update(made)
            nbytes = owned_bytes(plan, self.plan)
        elif plan is self.plan:
            return None, 0, {**info, "reason": "specializing saves no node, and no native program forms"}
        return plan, nbytes, info

    def close(self) -> None:
        """Release every device buffer this session holds (weights and CUDA graphs included)."""
        if self._shape_plans is not None:
            self._shape_plans.clear()
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

    def _feeds(self, feed: Mapping[str, Any]) -> tuple[dict[str, Any], tuple | None]:
        """The checked feeds (:meth:`_check_feeds`) and, on the CPU, their signature (``ShapePlans.key``;
        None where a feed has no shape). On the CPU the checks of a NumPy feed read only its name, dtype and
        shape, and take it as it is: a dict of NumPy arrays whose signature passed them before passes again."""
        valid = self._valid_signatures
        if valid is None:
            return self._check_feeds(feed), None
        if type(feed) is dict:
            key = _signature(feed)
            if key in valid:
                return feed, key
        feeds = self._check_feeds(feed)
        key = ShapePlans.key(feeds)
        if key is not None and type(feed) is dict and all(type(v) is np.ndarray and v is feed[k]
                                                          for k, v in feeds.items()):
            if len(valid) >= MAX_SIGNATURES:
                valid.clear()
            valid.add(key)
        return feeds, key

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
            if want is not None and type(value) is np.ndarray and value.dtype == want[0] and value.ndim == want[1]:
                shape = value.shape
                for axis, size in want[2]:
                    if shape[axis] != size:
                        break
                else:
                    out[name] = value
                    continue
            arg = args[name]
            try:  # classified once, moved once (Device.intake)
                if arg.dtype is None:  # sequence / optional inputs: their tensors go to the device too
                    kv = self._map_feeds.get(name)  # a map (ai.onnx.ml) stays a dict on the host
                    out[name] = check_map(value, *kv) if kv else _feed_to_device(self.device, value)
                    continue
                arr = self.device.intake(value, arg.dtype,
                                         upload=lambda host, key=name: self.memory.upload(host, key))
            except FeedError as e:
                raise FeedError(f"input {name!r}: {e}") from None
            except Exception as e:  # the device (or a pinned staging buffer) could not hold it
                if not is_out_of_memory(e):
                    raise
                raise OutOfMemoryError(f"uploading input {name!r} ({nbytes(value):,} bytes) ran out of memory on "
                                       f"{self.device}") from e
            if arr.dtype != arg.dtype and arg.dtype == object and arr.dtype.kind in "US":
                arr = string_feed(arr)  # NumPy strings (or a list of str) feed a string input, as in onnxruntime
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


def _signature(feed: dict) -> tuple | None:
    """``ShapePlans.key`` of a dict of NumPy arrays; None when a value is anything else."""
    for v in feed.values():
        if type(v) is not np.ndarray:
            return None
    try:
        return ShapePlans.key(feed)
    except TypeError:  # names that do not sort (not all str): the checks refuse them
        return None


def _feed_to_device(device: Device, value):
    if value is None:
        return None
    if isinstance(value, list):
        return [_feed_to_device(device, v) for v in value]
    return device.intake(value)



def _callers(value):
    """An output for the caller to keep and change: never a (read-only) CPU weight or view of one."""
    return value.copy() if type(value) is np.ndarray and not value.flags.writeable else value


def _weight_bytes(plan: Plan) -> int:
    return sum(map(nbytes, plan.weights.values())) + sum(
        _weight_bytes(sub) for step in plan.steps for sub in step.subgraphs.values())

