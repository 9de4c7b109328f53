"""Shape-specialized plans of a CPU session: one per feed-shape signature, kept in a bounded cache.

Exports with dynamic axes recompute their shape arithmetic (``Shape``, ``Gather``, ``Unsqueeze``,
``Concat``... into a ``Reshape``'s target) on every run, and the optimizer, not knowing the shapes,
leaves the fusions that need them undone. Once a signature (the feeds' names, shapes and dtypes) has
been run twice, the session builds a plan for it (:func:`build_plan`): the model specialized to those
shapes (:func:`gpuops.onnx.specialize.specialize_model`: every value that depends only on shapes
folded, from the shapes the second run recorded), passed through the session's optimizer again, and
planned. Later runs of that signature run it. A signature seen once (a decoder's growing past) costs
one dictionary lookup; its second run pays the recording (a dict subclass over the run's values) and
the build, which copies the model once (0.07-0.26 s for tests/zoo's two-layer BERT and GPT-2 at
hidden 16 and 256, measured 2026-11-27 on a loaded 2-core machine).

The specialized plan takes the session's weights and prepared operands as they are wherever they did
not change (:meth:`gpuops.onnx.plan.Plan.upload` with ``like``), so it holds only what the optimizer
made anew. The cache is bounded in signatures (``capacity``) and in those bytes (``max_bytes``): the
least recently used plans go first. A plan that would not save a node, or whose build fails (said once,
in the log), is remembered as "run the session's plan" for its signature; a recording run that fails
(bad feeds) leaves the signature to be recorded by its next run. Thread-safe: lookups and
insertions are under a lock; a build runs outside it, once per signature (concurrent runs of a
signature being built run the session's plan).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

log = logging.getLogger("gpuops")

DEFAULT_CACHE = 8
"""Signatures a CPU session keeps specialized plans for (``InferenceSession(..., shape_plans=N)``)."""
MAX_BYTES = 256 << 20
"""Bytes of new weights and prepared operands all of a session's specialized plans may hold."""
MAX_SEEN = 1024
"""Signatures counted while not yet specialized (beyond them the oldest is forgotten)."""


class Entry:
    """One signature: its plan (None: the session's plan runs), the bytes it holds alone, what it did."""

    __slots__ = ("plan", "bytes", "info", "runs")

    def __init__(self, plan, nbytes: int, info: dict):
        self.plan, self.bytes, self.info, self.runs = plan, nbytes, info, 0


class ShapePlans:
    """The specialized plans of one session. ``build(feeds, shapes) -> (plan or None, bytes, info)``
    makes one (feeds: name -> array; shapes: name -> (shape, dtype) of every value a run stored)."""

    def __init__(self, build: Callable, capacity: int = DEFAULT_CACHE, max_bytes: int = MAX_BYTES):
        self.build, self.capacity, self.max_bytes = build, capacity, max_bytes
        self.lock = threading.Lock()
        self.entries: OrderedDict[tuple, Entry] = OrderedDict()
        self.seen: OrderedDict[tuple, int] = OrderedDict()
        self.building: set[tuple] = set()
        self.bytes = 0
        self.builds = self.evictions = 0
        self._warned = False
        self.recent: Entry | None = None  # the entry the last lookup found

    @staticmethod
    def key(feeds: dict[str, Any]) -> tuple | None:
        """The signature of ``feeds``; None when a feed has no shape (a sequence)."""
        try:
            if len(feeds) == 1:  # the common case, at a third of the cost
                [(k, v)] = feeds.items()
                return ((k, v.shape, v.dtype),)
            return tuple([(k, feeds[k].shape, feeds[k].dtype) for k in sorted(feeds)])
        except AttributeError:
            return None

    def lookup(self, key: tuple):
        """(the specialized plan of ``key`` or None, whether this run should record its values' shapes
        and then call :meth:`add`)."""
        e = self.entries.get(key)  # (a dict read is atomic)
        if e is not None and e is self.recent:  # the last signature again: already the most recently used
            e.runs += 1  # (a statistic: outside the lock, concurrent runs may undercount it)
            return e.plan, False
        with self.lock:
            e = self.entries.get(key)
            if e is not None:
                self.entries.move_to_end(key)
                e.runs += 1
                self.recent = e
                return e.plan, False
            if key in self.building:
                return None, False
            n = self.seen.pop(key, 0) + 1
            if n >= 2:
                self.building.add(key)
                return None, True
            self.seen[key] = n
            if len(self.seen) > MAX_SEEN:
                self.seen.popitem(last=False)
            return None, False

    def add(self, key: tuple, feeds: dict[str, Any], shapes: dict[str, tuple]) -> None:
        """Build and keep the plan of ``key`` (after a run that recorded ``shapes``)."""
        try:
            plan, nbytes, info = self.build(feeds, shapes)
        except Exception as e:  # noqa: BLE001 - the session's plan runs this signature, as before
            plan, nbytes, info = None, 0, {"reason": f"specialization failed: {type(e).__name__}: {e}"}
            if not self._warned:
                self._warned = True
                log.warning("gpuops: a shape-specialized plan could not be built; the session's plan runs "
                            "instead (%s: %s)", type(e).__name__, e)
        if plan is not None and nbytes > self.max_bytes:
            plan, info = None, {**info, "reason": f"its {nbytes:,} new bytes exceed the cache's {self.max_bytes:,}"}
            nbytes = 0
        entry = Entry(plan, nbytes if plan is not None else 0, info)
        with self.lock:
            self.building.discard(key)
            self.builds += 1
            self.entries[key] = entry
            self.recent = None  # (the new entry is the most recently used now)
            self.bytes += entry.bytes
            while len(self.entries) > self.capacity or self.bytes > self.max_bytes:
                _, old = self.entries.popitem(last=False)
                if old is self.recent:
                    self.recent = None
                self.bytes -= old.bytes
                self.evictions += 1

    def abandon(self, key: tuple) -> None:
        """The run that was to record ``key``'s shapes failed: the next run of ``key`` records them."""
        with self.lock:
            self.building.discard(key)
            self.seen[key] = 1

    def status(self) -> dict:
        """``{"signatures": [{"shapes", "specialized", "nodes", "base_nodes", "folded", "bytes", "runs",
        "reason"}], "bytes", "builds", "evictions"}``."""
        with self.lock:
            sigs = [{"shapes": {k: (tuple(s), str(d)) for k, s, d in key}, "specialized": e.plan is not None,
                     "bytes": e.bytes, "runs": e.runs, **e.info} for key, e in self.entries.items()]
            return {"signatures": sigs, "bytes": self.bytes, "builds": self.builds, "evictions": self.evictions}

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.seen.clear()
            self.recent = None
            self.bytes = 0


DEPTH = 6  # containers deep: a prepared conv's planned runs hold their packs 4 levels down


def owned_bytes(plan, base) -> int:
    """Bytes ``plan`` holds that ``base`` does not: weights, prepared operands and native programs' packs and
    tables not shared (what base's prepared operands hold, the planned convs a program calls among them,
    is the base's)."""
    seen = {id(v) for v in base.weights.values()}
    for s in base.steps:
        if s.prepared is not None:
            _deep_nbytes(s.prepared, seen, DEPTH)  # (marks what it holds as seen)
    total = 0
    for v in plan.weights.values():
        if id(v) not in seen:
            seen.add(id(v))
            total += getattr(v, "nbytes", 0)
    for s in plan.steps:
        if s.prepared is not None and id(s.prepared) not in seen:
            total += _deep_nbytes(s.prepared, seen, DEPTH)
        holds = getattr(s.impl.fn, "holds", None)  # a native program's packs, tables and parameters
        if holds is not None:
            total += _deep_nbytes(holds, seen, DEPTH)
    return total


def _deep_nbytes(obj, seen: set, depth: int) -> int:
    """The bytes of the arrays ``obj`` holds (in tuples, lists, dicts and attributes, ``depth`` deep)."""
    if id(obj) in seen or depth < 0:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return obj.nbytes if obj.base is None or id(obj.base) not in seen else 0
    if isinstance(obj, (tuple, list)):
        return sum(_deep_nbytes(v, seen, depth - 1) for v in obj)
    if isinstance(obj, dict):
        return sum(_deep_nbytes(v, seen, depth - 1) for v in obj.values())
    if isinstance(obj, (str, bytes, int, float, bool)) or obj is None:
        return 0
    fields = getattr(obj, "__dict__", None) or {}
    values = list(fields.values()) + [getattr(obj, k, None) for k in getattr(type(obj), "__slots__", ())]
    return sum(_deep_nbytes(v, seen, depth - 1) for v in values)


# -- what a specialized plan takes from its base as it is (gpuops.onnx.plan.Plan.upload's ``like``) --------

def same_array(b, v) -> bool:
    """Whether array ``b`` (a base plan's weight) can stand for initializer ``v``: same shape, dtype, data."""
    return (isinstance(b, np.ndarray) and isinstance(v, np.ndarray) and b.shape == v.shape and b.dtype == v.dtype
            and (b is v or np.array_equal(b, v, equal_nan=b.dtype.kind in "fc")))


def same_step(a, b, constants: dict[str, Any]) -> bool:
    """Whether step ``a`` would prepare what ``b`` did: the same op, inputs (its constant ones the very
    arrays ``b`` was prepared from) and attributes, and no subgraphs."""
    if (a.op_type, a.domain, a.impl.fn, a.inputs) != (b.op_type, b.domain, b.impl.fn, b.inputs) \
            or a.subgraphs or b.subgraphs:
        return False
    given = b.prepared_from or {}
    if any((n in constants) != (n in given) or (n in given and constants[n] is not given[n])
           for n in a.inputs if n):
        return False
    ka = {k: v for k, v in a.attrs.items() if k != "prepared"}
    kb = {k: v for k, v in b.attrs.items() if k != "prepared"}
    if ka.keys() != kb.keys():
        return False
    for k, v in ka.items():
        w = kb[k]
        if isinstance(v, np.ndarray) or isinstance(w, np.ndarray):
            if not (isinstance(v, np.ndarray) and isinstance(w, np.ndarray) and v.shape == w.shape
                    and v.dtype == w.dtype and np.array_equal(v, w)):
                return False
        else:
            try:
                if type(v) is not type(w) or bool(v != w):
                    return False
            except Exception:  # lists of arrays: not compared, prepared again
                return False
    return True
