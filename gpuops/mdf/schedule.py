"""Scheduling: which nodes run at each time step of one ``run()``.

A graph without conditions runs each node once per run, in the consideration sets of its
dependency toposort (what graph-scheduler does with its default conditions), computed once. A
graph with conditions is scheduled by ``graph_scheduler`` itself, with MDF conditions parsed as
modeci-mdf's reference engine parses them: ``{type, kwargs}``, node ids as dependencies,
``dependencies`` accepted for ``dependency``, nested conditions, ``TimeScale.X`` strings, and
``Threshold`` reading the node's current value (copied to the host explicitly) through a
custom parameter getter. Termination conditions are keyed by time scale
(``environment_state_update``, ``TimeScale.PASS``...).
"""

from __future__ import annotations

import inspect
import re
from typing import Callable, Iterable

from ..errors import GpuopsError, ModelError
from .load import mdf_module
from .validate import toposort_levels

_TIME_SCALE = re.compile(r"(TimeScale)?\.(.*)")


def has_conditions(graph) -> bool:
    c = graph.conditions
    return c is not None and bool(c.node_specific or c.termination)


class Schedule:
    """``steps()`` yields, for one run, the node ids of each time step (in graph order)."""

    def __init__(self, graph, deps: dict[str, set[str]], value_of: Callable[[str, str], object],
                 names_of: Callable[[str], set]):
        self.order = [n.id for n in graph.nodes]
        self._rank = {n: i for i, n in enumerate(self.order)}
        self.static: list[list[str]] | None = None
        self.scheduler = None
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
        nodes = set(self.order)
        node_conds = {nid: self.parse(c, nodes, f"condition of node {nid!r}")
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

    def steps(self) -> Iterable[list[str]]:
        if self.static is not None:
            return self.static
        return self._scheduled()

    def _scheduled(self):
        steps = self.scheduler.run()
        while True:
            try:
                ts = next(steps)
            except StopIteration:
                return
            except GpuopsError:
                raise
            except Exception as e:
                raise ModelError(f"graph-scheduler failed evaluating the conditions: {type(e).__name__}: {e}") from e
            yield sorted(ts, key=self._rank.__getitem__)

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

    def parse(self, cond, nodes: set, where: str):
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
        args = {k: self._arg(k, v, nodes, where) for k, v in kwargs.items()}
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
            return cls(*positional, **args)
        except Exception as e:  # TypeError for bad arguments, graph-scheduler's ConditionError...
            raise ModelError(f"{where}: {type(e).__name__}: {e}") from None

    def _arg(self, key: str, value, nodes: set, where: str):
        if isinstance(value, list):
            return [self._arg(key, v, nodes, where) for v in value]
        if isinstance(value, dict) and "type" in value or isinstance(value, mdf_module().Condition):
            return self.parse(value, nodes, where)
        if isinstance(value, str):
            if key in ("dependency", "dependencies") and value not in nodes:
                raise ModelError(f"{where}: {key} {value!r} is not a node of the graph")
            m = _TIME_SCALE.match(value)
            if m and value not in nodes:
                return self._time_scale(value, where)
        return value
