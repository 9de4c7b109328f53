"""CUDA graphs of a session (``InferenceSession(..., cuda_graph=True)``): one captured graph per feed-shape
signature, kept in a least-recently-used cache (``cuda_graph_cache`` graphs, default 8).

For a new signature (the feeds' names, shapes and dtypes) the session's plan is specialized to it
(:func:`gpuops.onnx.specialize.specialize`: ``Shape`` / ``Size`` and the shape arithmetic fed from
them become constants computed on the host, so nothing is copied to or read from the host inside the
run; the session hands the specializer in, as the executor imports nothing of the plan layer), warmed
up and captured. Warm-up and capture run on the graphs' stream and allocate from a memory pool of the
graph's own (with the session's limit): CuPy's pool keeps freed blocks per stream,
so the capture reuses the very blocks the warm-up freed, and both run with the liveness plan's
releases. A private pool whose freed blocks only the capture itself reuses, in stream order, is what
a replay needs (no other allocation can take them), so a graph holds the liveness minimum of its run
with its feeds held (its static input buffers), not every intermediate. When shape inference could
not tell some value's shape, the warm-up records it and the plan is specialized again (and warmed up
again).

All graphs of a session replay on one stream (the lock serialises them anyway), so they share one
cuBLAS handle and workspace for their GEMMs (CuPy refuses cuBLAS inside a capture:
:mod:`gpuops.cublas`). A replay: the host waits for the work enqueued so far on the caller's stream
(its feed uploads; no device read), then on the graphs' stream the feeds are copied into the static
inputs, the graph launched, the deferred index checks read and the outputs copied, and the caller's
stream waits for an event after those copies. Everything that touches the shared buffers is thus in
order on one stream: another thread's replay can neither overwrite the inputs before this launch read
them nor the outputs before they were copied, and the caller's later work sees the copies.

A signature whose capture fails (a node reads device values on the host, as Loop and NonZero do) runs
node by node from then on, without retrying the capture; the other signatures are not affected.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from types import ModuleType

from ..cublas import CaptureBlas, capture_namespace
from ..errors import GpuopsError, NodeError, OutOfMemoryError
from ..ops import checks
from .run import RunContext, oom_or, run_plan
from .values import nbytes

log = logging.getLogger("gpuops")

DEFAULT_CACHE = 8
"""Captured graphs a session keeps by default (``InferenceSession(..., cuda_graph_cache=N)``)."""
MAX_FAILED = 256
"""Signatures remembered as not capturable (beyond them the oldest is forgotten, and retried)."""


def _wait_for(lib, stream) -> None:
    """The host waits for the work enqueued so far on ``stream`` (the caller's: its feed uploads), which
    the graphs' stream then follows without an event wait. The caller's stream waits for the graphs'
    with an event (at capture; a replay orders both ways with events)."""
    ready = lib.cuda.Event(disable_timing=True)
    ready.record(stream)
    ready.synchronize()


def _unsure(spec, shapes: dict) -> bool:
    """Whether a warm-up of ``spec``'s plan saw what its specialization did not know: a ``Shape`` or
    ``Size`` left (a shape inference could not tell), or a shape other than inferred."""
    if any(st.domain == "" and st.op_type in ("Shape", "Size") for st in spec.plan.steps):
        return True
    known = spec.shapes
    return any(k in known and (tuple(known[k][0]) != v[0] or known[k][1] != v[1]) for k, v in shapes.items())


class GraphEntry:
    """One signature: its specialized plan, captured graph, stream, pool and buffers (or why not)."""

    def __init__(self, key):
        self.key = key
        self.captured = False
        self.reason: str | None = None
        self.blocking_node: str | None = None
        self.plan = self.graph = self.stream = self.inputs = self.env = self.pool = self.checks = None
        self.nodes = self.folded = 0
        self.memory_bytes = self.planned_peak_bytes = self.warm_up_bytes = 0
        self.replays = 0

    def describe(self) -> dict:
        return {
            "shapes": {k: list(shape) for k, shape, _ in self.key},
            "dtypes": {k: dtype for k, _, dtype in self.key},
            "captured": self.captured,
            "reason": self.reason,
            "blocking_node": self.blocking_node,
            "nodes": self.nodes,  # steps of the specialized plan (each a kernel or more per replay)
            "folded_nodes": self.folded,  # steps computed on the host at capture
            "memory_bytes": self.memory_bytes,  # the graph's pool: what it holds on the device
            "planned_peak_bytes": self.planned_peak_bytes,  # the liveness minimum, feeds held
            # the pool after the warm-up, before the capture: the node-by-node run's high-water mark,
            # the ops' own scratch (im2col columns, GEMM results) included
            "warm_up_bytes": self.warm_up_bytes,
            "replays": self.replays,
        }

    def release(self, memory) -> None:
        pool = self.pool
        self.plan = self.graph = self.stream = self.inputs = self.env = self.pool = self.checks = None
        self.captured = False
        if pool is not None:
            memory.free_pool(pool)


class CudaGraphs:
    """The captured graphs of a session, by feed-shape signature (see the module's doc).

    ``session``: an :class:`gpuops.InferenceSession` (its plan, device, memory, opsets); ``specializer``:
    the plan's shape specializer, :mod:`gpuops.onnx.specialize` (``signature``, ``specialize``,
    ``Specialized``, ``ShapeRecorder``)."""

    def __init__(self, session, capacity: int = DEFAULT_CACHE, *, specializer: ModuleType):
        if type(capacity) is not int or capacity < 1:
            raise GpuopsError(f"cuda_graph_cache must be a positive int, not {capacity!r}")
        self.session = session
        self.specializer = specializer
        self.capacity = capacity
        self.graphs: OrderedDict = OrderedDict()  # signature -> captured GraphEntry, least recent first
        self.failed: OrderedDict = OrderedDict()  # signature -> GraphEntry that could not be captured
        self.last: GraphEntry | None = None  # the entry of the last run
        self.evictions = self.captures = 0
        self.stream = self.blas = self.xp = None  # made at the first capture (see _stream)
        self.lock = threading.Lock()

    # what callers of the one-graph version read: the last run's signature
    @property
    def usable(self) -> bool:
        """False when the last run's signature could not be captured."""
        return self.last is None or self.last.captured

    @property
    def key(self):
        return None if self.last is None else self.last.key

    @property
    def current(self) -> GraphEntry | None:
        return self.last

    def run(self, feeds: dict, names: list[str]) -> list | None:
        """The outputs ``names`` from the signature's graph (captured on first sight), or None when
        this signature runs node by node (sequence and optional feeds always do)."""
        if not all(hasattr(v, "shape") and hasattr(v, "dtype") for v in feeds.values()):
            return None
        key = self.specializer.signature(feeds)
        with self.lock:
            entry = self.graphs.get(key)
            if entry is not None:
                self.graphs.move_to_end(key)
            else:
                entry = self.failed.get(key)
                if entry is None:
                    entry = self._add(key, feeds)
                else:
                    self.failed.move_to_end(key)
            self.last = entry
            if not entry.captured:
                return None
            return self._replay(entry, feeds, names)

    def _add(self, key, feeds: dict) -> GraphEntry:
        while len(self.graphs) >= self.capacity:
            self._evict()
        entry = GraphEntry(key)
        try:
            self._capture(entry, feeds)
        except OutOfMemoryError:
            if not self.graphs:
                raise
            while self.graphs:  # the other signatures' graphs make room, and the capture is tried again
                self._evict()
            self._capture(entry, feeds)
        if entry.captured:
            self.graphs[key] = entry
        else:
            self.failed[key] = entry
            while len(self.failed) > MAX_FAILED:
                self.failed.popitem(last=False)
        return entry

    def _evict(self) -> None:
        _, old = self.graphs.popitem(last=False)
        old.release(self.session.memory)
        self.evictions += 1

    def _stream(self):
        """The graphs' stream, and the cuBLAS handle bound to it (CuPy refuses cuBLAS inside a capture:
        the captured GEMMs go through this handle, with a workspace of its own that every graph's GEMMs
        write into; the graphs replay one at a time on this one stream, so they may share it)."""
        if self.stream is None:
            s, lib = self.session, self.session.device.lib
            stream = lib.cuda.Stream(non_blocking=True)
            with stream:  # the workspace comes from the session's pool, for the session's lifetime
                self.blas = CaptureBlas(s.device, stream)
            self.stream, self.xp = stream, capture_namespace(s.device.xp, self.blas)
        return self.stream

    def _capture(self, entry: GraphEntry, feeds: dict) -> None:
        """Specialize, warm up and capture the plan for ``entry``'s signature, on the graphs' stream and
        a pool of the graph's own; on a failure other than running out of memory, ``entry`` says why."""
        s, lib = self.session, self.session.device.lib
        stream = self._stream()
        pool = s.memory.new_pool()
        _wait_for(lib, lib.cuda.get_current_stream())  # the feeds' uploads
        warm_ctx = self._ctx()
        ctx = self._ctx()  # the capture's
        try:
            with lib.cuda.using_allocator(pool.malloc), stream:
                inputs = {k: v.copy() for k, v in feeds.items()}  # the graph's static inputs
                spec = self._specialize(entry.key, inputs)  # from the feed shapes alone
                try:
                    shapes = self._warm_up(spec.plan, inputs, warm_ctx)
                except OutOfMemoryError:
                    raise
                except Exception:  # the plan as it is tells the real shapes (or fails the same way)
                    shapes, spec = self._warm_up(s.plan, inputs, self._ctx()), None
                if spec is None or _unsure(spec, shapes):  # specialized again from what the run saw
                    spec = self._specialize(entry.key, inputs, shapes)
                    warm_ctx = self._ctx()
                    self._warm_up(spec.plan, inputs, warm_ctx)
                with s.memory.on_device():
                    warm_up_bytes = pool.total_bytes()
                env = dict(spec.plan.weights, **inputs)
                ctx.live.hold(sum(nbytes(v) for v in inputs.values()))
                with checks.deferred() as captured:
                    stream.begin_capture()
                    try:
                        run_plan(spec.plan, env, ctx)
                    except BaseException:
                        with contextlib.suppress(Exception):  # "capture invalidated" would hide the cause
                            stream.end_capture()
                        raise
                    graph = stream.end_capture()
            s.memory.note_run(ctx.live)
        except OutOfMemoryError:
            s.memory.free_pool(pool)
            raise
        except Exception as e:  # a node synchronised with the host inside the capture
            s.memory.free_pool(pool)
            entry.blocking_node = ctx.failed_node or warm_ctx.failed_node
            # in gpuops' words: CuPy's own say "the current stream is capturing, so D2H transfers ..."
            entry.reason = "not captured: " + (str(e) if isinstance(e, GpuopsError) else f"{type(e).__name__}: {e}")
            log.info("gpuops: feed shapes %s cannot run as a CUDA graph (%s); they run node by node",
                     {k: shape for k, shape, _ in entry.key}, entry.reason)
            return
        entry.captured = True
        self.captures += 1
        entry.plan, entry.graph, entry.stream, entry.pool = spec.plan, graph, stream, pool
        entry.inputs, entry.env, entry.checks = inputs, env, captured
        entry.nodes, entry.folded = len(spec.plan.steps), len(s.plan.steps) - len(spec.plan.steps)
        entry.planned_peak_bytes, entry.warm_up_bytes = ctx.live.peak, warm_up_bytes
        with s.memory.on_device():
            entry.memory_bytes = pool.total_bytes()

    def _specialize(self, key, inputs: dict, shapes=None):
        s = self.session
        try:
            return self.specializer.specialize(s.plan, key, device=s.device, opsets=s.opsets, shapes=shapes,
                                               keep=inputs)
        except OutOfMemoryError:
            raise
        except Exception as e:  # not expected: the plan as it is still runs, and may still be captured
            log.warning("gpuops: specializing the plan to feed shapes %s failed (%s: %s); capturing it as it is",
                        {k: shape for k, shape, _ in key}, type(e).__name__, e)
            return self.specializer.Specialized(s.plan, key)

    def _warm_up(self, plan, inputs: dict, ctx: RunContext) -> dict:
        """One run of ``plan`` (lazy initialisation, and the pool's blocks for the capture to reuse);
        the shapes of the values it made."""
        env = self.specializer.ShapeRecorder(plan.weights)
        env.update(inputs)
        with checks.deferred():  # unread: the capture records the same checks, read after each replay
            run_plan(plan, env, ctx)
        return env.shapes

    def _replay(self, e: GraphEntry, feeds: dict, names: list[str]) -> list:
        s, lib = self.session, self.session.device.lib
        caller = lib.cuda.get_current_stream()
        uploaded = lib.cuda.Event(disable_timing=True)
        uploaded.record(caller)
        e.stream.wait_event(uploaded)  # the feeds' uploads, without a host wait
        with e.stream:  # in order on the graphs' stream: after the last replay's output copies
            for k, buf in e.inputs.items():
                buf[...] = feeds[k]
            try:
                e.graph.launch(stream=e.stream)
            except Exception as ex:
                raise oom_or(ex, lambda: NodeError(f"the CUDA graph failed: {type(ex).__name__}: {ex}"),
                             f"the CUDA graph ran out of device memory on {s.device}") from ex
            e.replays += 1
            e.checks.check()  # the captured checks' values, refreshed by the replay
            outs = [e.env[n].copy() for n in names]  # before another replay may write the outputs
            copied = lib.cuda.Event(disable_timing=True)
            copied.record(e.stream)
        caller.wait_event(copied)  # what the caller does next with the outputs (or the feeds' memory)
        return outs

    def status(self, per_signature: bool = False) -> dict:
        e = self.last
        if e is None:
            out = {"captured": False, "blocking_node": None, "reason": "not captured yet: run() once first"}
        else:
            out = {"captured": e.captured, "blocking_node": e.blocking_node, "reason": e.reason}
        if per_signature:
            out["signatures"] = [x.describe() for x in (*self.failed.values(), *self.graphs.values())]
            out["cache_size"] = self.capacity
            out["evictions"] = self.evictions
            out["captures"] = self.captures
            ws = None if self.blas is None else self.blas.workspace
            out["blas_workspace_bytes"] = 0 if ws is None else ws.nbytes  # shared by the graphs
        return out

    def release(self) -> None:
        """Drop every graph and its buffers, then give its pool's memory back."""
        for e in (*self.graphs.values(), *self.failed.values()):
            e.release(self.session.memory)
        self.graphs.clear()
        self.failed.clear()
        if self.last is not None:
            self.last.release(self.session.memory)
        if self.blas is not None:
            self.blas.close()
        self.stream = self.blas = self.xp = None

    def _ctx(self) -> RunContext:
        """A warm-up's or capture's run: GEMMs through the graphs' own cuBLAS handle (the warm-up's too,
        so that it allocates what the capture will), all buffers released after their last use."""
        s = self.session
        return RunContext(s.device, s.memory, host_nodes_logged=s._host_nodes, xp=self.xp)
