"""Scheduling: which nodes run at each time step of one ``run()``.

A graph without conditions runs each node once per run, in the consideration sets of its
dependency toposort (what graph-scheduler does with its default conditions), computed once.
Conditions are parsed as modeci-mdf's reference engine parses them: ``{type, kwargs}``, node ids
as dependencies, ``dependencies`` accepted for ``dependency``, nested conditions, ``TimeScale.X``
strings, and ``Threshold`` reading the node's current value (copied to the host explicitly).
Termination conditions are keyed by time scale (``environment_state_update``, ``TimeScale.PASS``...).

Every condition is built as a graph-scheduler condition (which validates it) and, for the types
:class:`Machine` knows, as a closure over our own scheduler state: the same loop as
``graph_scheduler.Scheduler.run`` (passes over the consideration sets, a set repeated until no
more of its nodes become ready, call counts per time scale, "useable" counts for EveryNCalls),
without its bookkeeping. When no condition reads values or state kept across runs, one run's
steps are computed once at session creation and replayed (a static execution sequence); otherwise
the machine runs step by step. Graphs with a condition it does not know (TimeInterval, absolute
time, WhenFinished...) are scheduled by graph-scheduler itself.

One module, past 500 lines: the condition types mirror graph-scheduler's one to one and are read
beside it; the static sequence and the step machine share them.
"""

from __future__ import annotations

import inspect
import operator
import re
from typing import Callable, Iterable

import numpy as np

from .batch import Batched

from ..errors import GpuopsError, ModelError
from .load import mdf_module
from .validate import toposort_levels

_TIME_SCALE = re.compile(r"(TimeScale)?\.(.*)")
MAX_STEPS = 1_000_000  # time steps in one run: conditions that never end a run are an error, not a hang


def _too_long(where: str = "") -> ModelError:
    return ModelError(f"the scheduling conditions did not end the run within {MAX_STEPS} time steps{where} "
                      "(a termination condition that never holds, e.g. AllHaveRun with a node that never runs?)")


def has_conditions(graph) -> bool:
    c = graph.conditions
    return c is not None and bool(c.node_specific or c.termination)


class Schedule:
    """``steps()`` yields, for one run, the node ids of each time step (in graph order)."""

    def __init__(self, graph, deps: dict[str, set[str]], value_of: Callable[[str, str], object],
                 names_of: Callable[[str], set], rows: int | None = None):
        self.order = [n.id for n in graph.nodes]
        self.rows = rows  # batched sessions: conditions that read values are evaluated per row
        self._rank = {n: i for i, n in enumerate(self.order)}
        self.static: list[list[str]] | None = None
        self._first: list[list[str]] | None = None  # the first run's steps, when they differ
        self._just_ran = False
        self.scheduler = self.machine = None
        self.reads_values = False  # a condition reads node values (Threshold...)
        if not has_conditions(graph):
            self.static = toposort_levels(deps, self.order)
            return
        try:
            import graph_scheduler as gs
        except ImportError as e:
            raise ModelError(f"graph {graph.id!r} has conditions, which need graph-scheduler: "
                             f"pip install 'gpuops[mdf]' ({e})") from None
        self._gs = gs
        self._value_of, self._names_of = value_of, names_of
        self._fast: dict[int, Callable] = {}  # id(graph-scheduler condition) -> our closure
        self._dynamic = False  # a condition reads values or state kept across runs
        nodes = set(self.order)
        node_conds = {nid: self.parse(c, nodes, f"condition of node {nid!r}", nid)
                      for nid, c in (graph.conditions.node_specific or {}).items()}
        termination = {}
        for scale, c in (graph.conditions.termination or {}).items():
            termination[self._time_scale(scale, f"graph {graph.id!r}")] = self.parse(
                c, nodes, f"termination condition {scale!r}")
        try:
            self.scheduler = gs.Scheduler(graph={n: set(deps[n]) for n in self.order},
                                          conditions=node_conds, termination_conds=termination)
        except Exception as e:
            raise ModelError(f"graph {graph.id!r}: graph-scheduler rejects its conditions: {e}") from e
        self.machine = self._machine(node_conds, termination)
        if self.machine is not None and not self.machine.dynamic:
            # the same steps every run, but for JustRan, which reads the last step of the run before:
            # runs from the second on repeat when the second ends as the first does
            first = list(self.machine.run())
            last = self.machine.last
            second = list(self.machine.run()) if self._just_ran else first
            if self.machine.last == last:
                self.static, self._first = second, first

    def _machine(self, node_conds: dict, termination: dict):
        TS = self._gs.TimeScale
        fast = {nid: self._fast.get(id(c)) for nid, c in node_conds.items()}
        ends = {scale: self._fast.get(id(c)) for scale, c in termination.items()}
        if None in fast.values() or None in ends.values() or set(ends) - {TS.ENVIRONMENT_STATE_UPDATE,
                                                                           TS.ENVIRONMENT_SEQUENCE, TS.PASS}:
            return None
        order, graph = self.order, self.scheduler.graph

        def default(node):  # graph-scheduler's: Always, or EveryNCalls(sender, 1) for each sender
            senders = list(graph[node])
            return lambda st: _all(st.useable[d][node] >= 1 for d in senders)

        conds = [fast[n] if n in fast else default(n) for n in order]
        args = (order, [sorted(level, key=self._rank.__getitem__) for level in self.scheduler.consideration_queue],
                conds, ends.get(TS.ENVIRONMENT_STATE_UPDATE) or _all_have_run(order, TS.ENVIRONMENT_STATE_UPDATE),
                ends.get(TS.ENVIRONMENT_SEQUENCE) or _NEVER, self._dynamic)
        if self.rows is not None and self.reads_values:
            return RowMachine(*args, rows=self.rows)
        machine = Machine(*args)
        absolute = self.scheduler.get_absolute_conditions(self.scheduler.termination_conds)
        if absolute:  # graph-scheduler's absolute time mode: one time unit per consideration set
            machine.timed = True
            machine.interval = self.scheduler._get_absolute_consideration_set_execution_unit(
                self.scheduler.termination_conds)
            machine.first_time = min(min(c.absolute_fixed_points) if c.absolute_fixed_points else 0
                                     for c in absolute.values())
        return machine

    def steps(self) -> Iterable[list[str]]:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        if self.static is not None:
            return self.static
        if self.machine is not None:
            return self.machine.run()
        return self._scheduled()

    def _scheduled(self):
        steps = self.scheduler.run()
        for _ in range(MAX_STEPS + 1):
            try:
                ts = next(steps)
            except StopIteration:
                return
            except GpuopsError:
                raise
            except Exception as e:
                raise ModelError(f"graph-scheduler failed evaluating the conditions: {type(e).__name__}: {e}") from e
            yield sorted(ts, key=self._rank.__getitem__)
        raise _too_long()

    # -- parsing ---------------------------------------------------------------------------------

    def _time_scale(self, scale, where: str):
        ts = self._gs.TimeScale
        if isinstance(scale, ts):
            return scale
        m = _TIME_SCALE.match(str(scale))
        name = (m.group(2) if m else str(scale)).upper()
        try:
            return ts[name]
        except KeyError:
            raise ModelError(f"{where}: unknown time scale {scale!r} "
                             f"(one of {[t.name.lower() for t in ts]})") from None

    def parse(self, cond, nodes: set, where: str, owner: str | None = None):
        gs = self._gs
        if isinstance(cond, dict):
            typ, kwargs = cond.get("type"), cond.get("kwargs") or cond.get("args") or {}
        else:
            typ, kwargs = cond.type, cond.kwargs or {}
        cls = getattr(gs.condition, str(typ), None)
        if not (isinstance(cls, type) and issubclass(cls, gs.Condition)):
            raise ModelError(f"{where}: unknown condition type {typ!r}")
        where = f"{where} ({typ})"
        sig = inspect.signature(cls)
        args = {k: self._arg(k, v, nodes, where, owner) for k, v in kwargs.items()}
        if "dependencies" in args and "dependencies" not in sig.parameters and "dependency" in sig.parameters:
            args["dependency"] = args.pop("dependencies")
        if "custom_parameter_getter" in sig.parameters:
            self.reads_values = True
            if "dependency" not in args or "parameter" not in args:
                raise ModelError(f"{where}: needs 'dependency' and 'parameter'")
            dep, param = args["dependency"], args["parameter"]
            if param not in self._names_of(dep):
                raise ModelError(f"{where}: node {dep!r} has no port, parameter or function {param!r}")
            args["custom_parameter_getter"] = lambda dependency, parameter: self._value_of(dependency, parameter)
            args["custom_parameter_validator"] = lambda dependency, parameter: parameter in self._names_of(dependency)
        positional = []
        for name, p in sig.parameters.items():
            if p.kind is p.VAR_POSITIONAL and name in args:
                value = args.pop(name)
                positional = list(value) if isinstance(value, (list, tuple)) else [value]
        try:
            made = cls(*positional, **args)
        except Exception as e:  # TypeError for bad arguments, graph-scheduler's ConditionError...
            raise ModelError(f"{where}: {type(e).__name__}: {e}") from None
        self._fast[id(made)] = self._closure(cls, sig, positional, args, owner, made)
        return made

    def _closure(self, cls, sig, positional: list, args: dict, owner, made):
        """Our closure ``f(state) -> bool`` for one condition, or None for a type we do not know."""
        TS = self._gs.TimeScale
        name = cls.__name__
        default = sig.parameters["time_scale"].default if "time_scale" in sig.parameters else None
        ts = args.get("time_scale", default)
        n, dep = args.get("n"), args.get("dependency")
        fast = self._fast
        if name in ("Always", "Never"):
            return _ALWAYS if name == "Always" else _NEVER
        if name in ("All", "Any", "And", "Or"):
            kids = [*positional, *[c for v in args.values() for c in (v if isinstance(v, list) else [v])]]
            kids = [fast.get(id(c)) for c in kids]
            if None in kids:
                return None
            combine = _all if name in ("All", "And") else _any
            return lambda st: combine(k(st) for k in kids)
        if name == "Not":
            kid = fast.get(id(args.get("condition", positional[0] if positional else None)))
            return None if kid is None else (lambda st: _not(kid(st)))
        if name == "NWhen":
            kid = fast.get(id(args.get("condition", positional[0] if positional else None)))
            if kid is None or self.rows is not None:  # (a count of satisfactions: not per row)
                return None
            self._dynamic = True
            limit, seen = args.get("n", 1), [0]

            def nwhen(st):
                if seen[0] < limit and kid(st):
                    seen[0] += 1
                    return True
                return False

            return nwhen
        compare = _COMPARE.get(name)
        if name == "AtEnvironmentStateUpdateStart":
            return lambda st: st.passes == 0
        if compare is not None and name.endswith(("Pass", "Passes")) and ts == TS.ENVIRONMENT_STATE_UPDATE:
            if name == "EveryNPasses":
                return lambda st: st.passes % n == 0
            return lambda st: compare(st.passes, n)
        if compare is not None and "ConsiderationSetExecution" in name and ts == TS.ENVIRONMENT_STATE_UPDATE:
            return lambda st: compare(st.sets, n)
        if compare is not None and "EnvironmentStateUpdate" in name and ts == TS.ENVIRONMENT_SEQUENCE:
            self._dynamic = True
            return lambda st: compare(st.runs, n)
        if name == "EveryNCalls":  # calls of dep since owner last ran
            return None if owner is None else (lambda st: st.useable[dep][owner] >= n)
        if compare is not None and name.endswith(("Calls", "Call", "Combined")) and isinstance(ts, TS):
            self._dynamic |= ts.value > TS.ENVIRONMENT_STATE_UPDATE.value
            if name == "AfterNCallsCombined":
                deps = list(positional)
                return lambda st: sum(st.counts[ts][d] for d in deps) >= n
            return lambda st: compare(st.counts[ts][dep], n)
        if name == "AllHaveRun" and isinstance(ts, TS):
            self._dynamic |= ts.value > TS.ENVIRONMENT_STATE_UPDATE.value
            return _all_have_run(list(positional) or self.order, ts)
        if name == "JustRan":
            self._just_ran = True
            return lambda st: st.just_ran(dep)
        if name in ("TimeInterval", "TimeTermination") and self.rows is None:
            self._dynamic = True  # absolute time runs on across runs
            return _absolute(name, made.kwargs, owner)
        if name == "Threshold":
            self._dynamic = True
            return _threshold(self._value_of, dep, args["parameter"], args["threshold"], args.get("comparator", ">="),
                              args.get("indices"), args.get("atol", 0), args.get("rtol", 0))
        return None

    def _arg(self, key: str, value, nodes: set, where: str, owner=None):
        if isinstance(value, list):
            return [self._arg(key, v, nodes, where, owner) for v in value]
        if isinstance(value, dict) and "type" in value or isinstance(value, mdf_module().Condition):
            return self.parse(value, nodes, where, owner)
        if isinstance(value, str):
            if key in ("dependency", "dependencies") and value not in nodes:
                raise ModelError(f"{where}: {key} {value!r} is not a node of the graph")
            m = _TIME_SCALE.match(value)
            if m and value not in nodes:
                return self._time_scale(value, where)
        return value


# -- our scheduler -------------------------------------------------------------------------------

def _ALWAYS(st):
    return True


def _NEVER(st):
    return False


# comparisons of a count with n, by the condition's name
_COMPARE = {"BeforePass": operator.lt, "AtPass": operator.eq, "AfterPass": operator.gt, "AfterNPasses": operator.ge,
            "EveryNPasses": operator.eq,
            "BeforeConsiderationSetExecution": operator.lt, "AtConsiderationSetExecution": operator.eq,
            "AfterConsiderationSetExecution": operator.gt, "AfterNConsiderationSetExecutions": operator.ge,
            "BeforeEnvironmentStateUpdate": operator.lt, "AtEnvironmentStateUpdate": operator.eq,
            "AfterEnvironmentStateUpdate": operator.gt, "AfterNEnvironmentStateUpdates": operator.ge,
            "BeforeNCalls": operator.lt, "AtNCalls": operator.eq, "AfterCall": operator.gt,
            "AfterNCalls": operator.ge, "AfterNCallsCombined": operator.ge, "EveryNCalls": operator.ge}
_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def _all_have_run(nodes: list, ts):
    return lambda st: _all(st.counts[ts][d] >= 1 for d in nodes)


def _threshold(value_of, dep, parameter, threshold, comparator, indices, atol, rtol):
    def threshold_(st):
        v = value_of(dep, parameter)
        if isinstance(v, Batched):  # one value per row (host array, rows first)
            v = v.a[(slice(None), *(indices or ()))].astype(np.float64).reshape(v.a.shape[0])
        else:
            for i in indices or ():
                v = v[i]
            v = float(v)
        if comparator in ("==", "!="):
            close = np.isclose(v, threshold, atol=atol, rtol=rtol)
            return close if comparator == "==" else ~close
        return _OPS[comparator](v, threshold)

    return threshold_


def _all(values):
    """``all`` of bools or of row masks (a plain False decides at once, as graph-scheduler's All)."""
    out = True
    for v in values:
        if isinstance(v, np.ndarray):
            out = out & v
        elif not v:
            return False
    return out


def _any(values):
    out = False
    for v in values:
        if isinstance(v, np.ndarray):
            out = out | v
        elif v:
            return True
    return out


def _not(v):
    return ~v if isinstance(v, np.ndarray) else not v


def _absolute(name: str, kwargs: dict, owner):
    """TimeInterval / TimeTermination on the machine's absolute time (pint quantities, rounded as
    graph-scheduler rounds them)."""
    from graph_scheduler import _unit_registry

    precision = _unit_registry.precision
    if name == "TimeTermination":
        t, inclusive = kwargs["t"], kwargs.get("inclusive", True)
        return lambda st: st.absolute >= t if inclusive else st.absolute > t
    if owner is None:  # graph-scheduler places the interval by its owner's consideration set
        return None
    repeat, start, end = kwargs.get("repeat"), kwargs.get("start"), kwargs.get("end")
    start_in, end_in = kwargs.get("start_inclusive", True), kwargs.get("end_inclusive", True)

    def interval(st):
        now = st.absolute
        ok = True
        if repeat is not None:
            offset = start if st.exact and start is not None else st.level_of[owner] * st.interval
            ok &= round((now - offset) % repeat, precision) == 0
        if start is not None:
            ok &= now >= start if start_in else now > start
        if end is not None:
            ok &= now <= end if end_in else now < end
        return ok

    return interval


class Machine:
    """graph-scheduler's ``Scheduler.run`` loop over our own state (see the module docstring).
    ``run()`` yields the node ids of each step of one run, in graph order. In absolute time mode
    (``interval`` set: TimeInterval/TimeTermination) every consideration set is a step, empty or
    not, and advances the absolute time by ``interval``."""

    timed = False  # absolute time mode
    first_time = 0

    def __init__(self, order: list, queue: list, conds: list, end_run: Callable, end_all: Callable,
                 dynamic: bool):
        import graph_scheduler as gs

        self.order, self.queue, self.dynamic = order, queue, dynamic
        self.cond = dict(zip(order, conds))
        self.end_run, self.end_all = end_run, end_all
        self.scales = list(gs.TimeScale)
        self._pass_scales = [t for t in self.scales if t.value <= gs.TimeScale.PASS.value]
        self._run_scales = [t for t in self.scales if t.value <= gs.TimeScale.ENVIRONMENT_STATE_UPDATE.value]
        self.counts = {t: dict.fromkeys(order, 0) for t in self.scales}
        self.useable: dict = {}
        self.passes = self.sets = self.runs = 0
        self.last: set = set()
        self.level_of = {a: i for i, level in enumerate(queue) for a in level}
        self.exact = len(queue) == 1  # graph-scheduler's exact time mode (TimeInterval offsets by start)
        from graph_scheduler import _unit_registry

        self.absolute, self.interval = 0 * _unit_registry.ms, 1 * _unit_registry.ms  # graph-scheduler's Time

    def _start_time(self):
        from graph_scheduler.condition import _quantity_as_integer

        self.absolute = max(self.absolute, self.first_time).to(self.interval.u)
        try:
            self.absolute = _quantity_as_integer(self.absolute)
        except ValueError:
            pass

    def _tick(self):
        from graph_scheduler import _unit_registry

        self.absolute += self.interval
        if self.interval < 1 * self.absolute.u and isinstance(self.absolute.m, float):
            self.absolute = round(self.absolute, _unit_registry.precision)

    def just_ran(self, node) -> bool:
        return node in self.last

    def run(self):
        counts, order = self.counts, self.order
        for t in self._run_scales:
            counts[t] = dict.fromkeys(order, 0)
        self.useable = {a: dict.fromkeys(order, 0) for a in order}
        self.passes = self.sets = 0
        timed = self.timed
        if timed:
            self._start_time()
        done = lambda: self.end_run(self) or self.end_all(self)  # noqa: E731
        while not done():
            for t in self._pass_scales:
                counts[t] = dict.fromkeys(order, 0)
            changed = False
            for level in self.queue:
                if done():
                    break
                ran: list = []
                grew = True
                while grew:  # a node that runs may make others of the same set ready
                    grew = False
                    for node in level:
                        if node not in ran and self.cond[node](self):
                            ran.append(node)
                            grew = changed = True
                            for t in self.scales:
                                counts[t][node] += 1
                            for row in self.useable.values():
                                row[node] = 0
                            mine = self.useable[node]
                            for other in mine:
                                mine[other] += 1
                if ran or timed:
                    self.last = set(ran)
                    self.sets += 1
                    if self.sets > MAX_STEPS:
                        raise _too_long()
                    yield sorted(ran, key=order.index)
                    if timed:
                        self._tick()
            if not changed and not timed:
                self.last = set()
                self.sets += 1
                if self.sets > MAX_STEPS:
                    raise _too_long()
                yield []
            self.passes += 1
        self.runs += 1


class RowMachine(Machine):
    """:class:`Machine` for N rows at once, each with its own counts (conditions that read values
    differ per row): ``run()`` yields, for each step, ``[(node, rows)]`` with ``rows`` a boolean mask
    of the rows where the node runs. A row that has terminated takes no more steps."""

    def __init__(self, *args, rows: int):
        super().__init__(*args)
        self.n = rows
        z = np.zeros(rows, np.int64)
        self.counts = {t: {a: z.copy() for a in self.order} for t in self.scales}
        self.passes, self.sets, self.runs = z.copy(), z.copy(), z.copy()
        self.last_rows = {a: np.zeros(rows, bool) for a in self.order}

    def just_ran(self, node):
        return self.last_rows[node]

    def run(self):
        n, order = self.n, self.order
        zeros = lambda: np.zeros(n, np.int64)  # noqa: E731
        for t in self._run_scales:
            self.counts[t] = {a: zeros() for a in order}
        self.useable = {a: {b: zeros() for b in order} for a in order}
        self.passes, self.sets = zeros(), zeros()
        done = lambda: np.broadcast_to(self.end_run(self) | self.end_all(self), (n,))  # noqa: E731
        finished = done().copy()
        while not finished.all():
            for t in self._pass_scales:
                self.counts[t] = {a: zeros() for a in order}
            started = ~finished
            active = started.copy()
            changed = np.zeros(n, bool)
            for level in self.queue:
                active &= ~done()
                if not active.any():
                    break
                ran = {a: np.zeros(n, bool) for a in level}
                grew = True
                while grew:
                    grew = False
                    for node in level:
                        now = np.broadcast_to(self.cond[node](self), (n,)) & active & ~ran[node]
                        if now.any():
                            grew = True
                            ran[node] |= now
                            changed |= now
                            for t in self.scales:
                                self.counts[t][node] += now
                            for row in self.useable.values():
                                row[node][now] = 0
                            for other in self.useable[node].values():
                                other += now
                stepped = _any(ran.values()) if ran else np.zeros(n, bool)
                if stepped.any():
                    for a in order:
                        self.last_rows[a] = np.where(stepped, ran.get(a, False), self.last_rows[a])
                    self.sets += stepped
                    yield [(a, ran[a]) for a in level if ran[a].any()]
            idle = started & ~changed
            for a in order:
                self.last_rows[a] &= ~idle
            self.sets += idle
            self.passes += started
            if self.sets.max() > MAX_STEPS:
                raise _too_long(" in some rows")
            finished = done().copy()
        self.runs += 1
