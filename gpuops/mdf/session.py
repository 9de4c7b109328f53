"""MDFSession: an MDF graph compiled once, then evaluated with modeci-mdf's reference semantics.

One ``run()`` is one ``evaluate()`` of the reference engine:

* the scheduler yields time steps; for each node that runs, the edges into it whose sender has ever
  run deliver the sender's output port value (times the edge ``weight``) to the receiving input port,
  where ``reduce`` (overwrite/add/multiply) combines values arriving in the same run; then the node
  evaluates;
* a node evaluates its input ports, then sets each parameter to its current value (a stateful one
  that has none yet to its ``default_initial_value``), evaluates its functions, then updates its
  parameters **one after another** (a later parameter sees the new value of an earlier one): a
  ``value`` expression, a ``function`` with ``args``, or a ``time_derivative`` (the first run without
  ``time_increment`` sets it to ``default_initial_value``, later ones integrate ``value + d/dt * dt``),
  then the parameter's ``conditions`` (``where(test, value, current)``); last its output ports.

Values stay on the device between nodes; only scheduler conditions on values and the outputs
returned by ``run`` are copied to the host.

A batched session (``batch=N``) runs the same program on :class:`~gpuops.mdf.batch.Batched` values
(rows on a leading axis). When its scheduling conditions read values, each row has its own
scheduler state (:class:`~gpuops.mdf.schedule.RowMachine`): a step names the rows where a node runs,
the node is evaluated for all rows and keeps its new parameters, function values and outputs only
in those rows; input ports track per row whether a value is pending (``_Port.received``).

One module, past 500 lines: the evaluation order above is one algorithm, unbatched and batched.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from ..device import Device, get_device, to_host
from ..errors import FeedError, GpuopsError, ModelError, NodeError
from . import batch as B
from .batch import Batched
from .expr import NOT_CONST, Values, compile_expr, compile_value
from .functions import ACTR, STANDARD
from .load import load_model, select_graph
from .onnx_bridge import OnnxCall, model_opset
from .schedule import RowMachine, Schedule
from .validate import validate_graph


class MDFSession:
    """Runs one graph of an MDF model on one device.

    ``model`` is a ``.json``/``.yaml`` path or a ``modeci_mdf`` Model; ``device`` is ``"cpu"``,
    ``"cuda"``, ``"cuda:N"`` or ``"auto"``; ``graph`` is a graph id (default: the first graph).

    ``batch=N`` evaluates N independent instances of the model in lock-step: values given to
    ``run`` (``inputs``, ``params``) whose leading axis has length N give each instance its own
    value, other values are shared, and every output comes back with a leading axis of N. Row i
    equals an unbatched session given row i's values (see :mod:`gpuops.mdf.batch`).
    """

    def __init__(self, model, device: str | Device = "auto", graph: str | None = None, *, batch: int | None = None):
        self.device = get_device(device)
        self.model = load_model(model)
        self.graph = select_graph(self.model, graph)
        deps = validate_graph(self.graph)
        self.batch = _batch_size(batch, self.graph)
        self._values = Values(self.device)
        opset = model_opset(self.model)
        self._nodes = {n.id: _Node(n, self._values, opset) for n in self.graph.nodes}
        self._incoming: dict[str, list[_Edge]] = {nid: [] for nid in self._nodes}
        for e in self.graph.edges:
            self._incoming[e.receiver].append(_Edge(e, self._nodes, self._values))
        nodes, values = self._nodes, self._values  # (no reference back to the session: no cycle)
        self._schedule = Schedule(self.graph, deps, lambda nid, name: _host_value(values, nodes[nid].lookup(name)),
                                  lambda nid: nodes[nid].names, rows=self.batch)
        self._per_row = isinstance(self._schedule.machine, RowMachine)  # conditions differ per row
        if self.batch is not None and self._schedule.reads_values and not self._per_row:
            raise ModelError(f"graph {self.graph.id!r}: its conditions read values and include a type gpuops "
                             "cannot evaluate per row (NWhen, TimeInterval...); batched sessions cannot run it")
        self._ran: set[str] = set()  # nodes that have run in any run so far
        self._ran_rows = {nid: np.zeros(self.batch or 0, bool) for nid in self._nodes}  # per row, likewise
        self.execution_trace: list = []

    def run(self, time_increment: float | None = None, inputs: dict | None = None, *,
            params: dict | None = None, output_device: str = "cpu") -> dict[str, Any]:
        """One evaluation of the graph; returns ``{"node.port": value}`` for every output port that
        has a value. ``inputs`` sets input ports first (``{"node.port" or "port": value}``).

        ``params`` overrides parameters (``{"node.param" or "param": value}``) from this run on: a
        parameter defined by a value or a function takes the given value instead; a stateful one
        (a time derivative, a ``default_initial_value`` or a value that reads itself) takes it as
        its current state and as the value it is initialised to.

        Numbers and arrays come back as NumPy arrays (device arrays with ``output_device="device"``);
        ACT-R values (dicts, strings, lists) as they are."""
        if output_device not in ("cpu", "device"):
            raise GpuopsError(f"output_device must be 'cpu' or 'device', not {output_device!r}")
        dt = None if time_increment is None else _number(time_increment)
        if params:
            self._override(params)
        if inputs:
            self._feed(inputs)
        if self._per_row:
            self.execution_trace = self._run_rows(dt)
        else:
            trace = []
            for step in self._schedule.steps():
                for nid in step:
                    trace.append(nid)
                    self._ran.add(nid)
                    for edge in self._incoming[nid]:
                        if edge.sender in self._ran:
                            edge.deliver()
                    self._nodes[nid].evaluate(dt)
            self.execution_trace = trace
        out = {}
        for nid, node in self._nodes.items():
            for pid, value in node.out.items():
                if value is not None:
                    if self._per_row and not self._ran_rows[nid].all():  # rows where the node never ran
                        value = self._missing_rows(value, self._ran_rows[nid])
                    out[f"{nid}.{pid}"] = self._export(value, output_device)
        return out

    def _missing_rows(self, value, ran: np.ndarray):
        """NaN in the rows where the node has not run yet (there the port has no value)."""
        if isinstance(value, tuple):
            return tuple(self._missing_rows(v, ran) for v in value)
        v = self._values
        a = value.a if isinstance(value, Batched) else v.array(value)
        a = a.astype(np.float64) if a.dtype.kind != "f" else a
        return B.where(v.xp, Batched(v.array(ran)), Batched(a) if isinstance(value, Batched) else a, np.nan)

    # -- helpers ---------------------------------------------------------------------------------

    def _run_rows(self, dt) -> list[list[str]]:
        """One run where conditions differ per row: each step names the rows where a node runs;
        the node is evaluated for every row and its state kept only in those rows (masked
        updates). Returns one execution trace per row."""
        traces: list[list[str]] = [[] for _ in range(self.batch)]
        for step in self._schedule.steps():
            for nid, rows in step:
                for i in np.flatnonzero(rows):
                    traces[i].append(nid)
                self._ran_rows[nid] |= rows
                mask = Batched(self._values.array(rows))
                for edge in self._incoming[nid]:
                    sent = rows & self._ran_rows[edge.sender]
                    if sent.any():
                        edge.deliver(Batched(self._values.array(sent)))
                self._nodes[nid].evaluate(dt, mask)
        return traces

    def _feed(self, inputs: dict) -> None:
        if not isinstance(inputs, dict):
            raise FeedError(f"inputs must be a dict of 'node.port' (or 'port') -> value, not {type(inputs).__name__}")
        for key, value in inputs.items():
            for p in self._named(key, "ports", "inputs", "input port"):
                p.put(self._batched(value, p.default))

    def _override(self, params: dict) -> None:
        if not isinstance(params, dict):
            raise FeedError(f"params must be a dict of 'node.param' (or 'param') -> value, not {type(params).__name__}")
        for key, value in params.items():
            for p in self._named(key, "params", "params", "parameter"):
                p.override(self._batched(value, p.known()))

    def _named(self, key: str, members: str, where: str, noun: str) -> list:
        """The input ports or parameters (``members``) that a ``run()`` key names: 'node.id' or 'id'."""
        everything = [(f"{nid}.{m.id}", m) for nid, node in self._nodes.items() for m in getattr(node, members)]
        found = [m for full, m in everything if key in (full, m.id)]
        if not found:
            article = "an" if noun[0] in "aeiou" else "a"
            raise FeedError(f"{where}: {key!r} is not {article} {noun}; the {noun}s are {[f for f, _ in everything]}")
        return found

    def _batched(self, value, like):
        """A value given to ``run``: batched when it has a leading axis of N (beyond the rank of
        ``like``, the value it replaces, when that is an array)."""
        value = self._values.literal(value)
        n = self.batch
        if n is None or not hasattr(value, "shape") or not value.ndim or value.shape[0] != n:
            return value
        base = getattr(like, "ndim", 0) if not isinstance(like, (list, dict, str)) else None
        return Batched(value) if base is None or value.ndim == base + 1 else value

    def _export(self, value, where: str):
        v = self._values
        if self.batch is not None and not isinstance(value, (tuple, list, dict, str)):
            if isinstance(value, Batched):
                value = value.a
            elif isinstance(value, (bool, int, float, complex, np.generic)) or v.is_array(value):
                value = v.xp.broadcast_to(v.array(value), (self.batch, *np.shape(value))).copy()
        if isinstance(value, tuple) or isinstance(value, list) and any(
                v.is_array(x) or isinstance(x, Batched) for x in value):
            return type(value)(self._export(x, where) for x in value)  # several ONNX outputs, a sequence
        if isinstance(value, (bool, int, float, complex, np.generic)):
            return np.asarray(value) if where == "cpu" else v.array(np.asarray(value))
        if v.is_array(value):
            return to_host(value) if where == "cpu" else value
        return value


def _host_value(values: Values, value):
    """A value for scheduler conditions: device arrays are copied to the host explicitly."""
    if isinstance(value, Batched):
        return Batched(to_host(value.a))
    return to_host(value) if values.is_array(value) else value


def _number(x):
    if hasattr(x, "dtype"):
        return to_host(x).item()
    return x


def _batch_size(batch, graph) -> int | None:
    if batch is None:
        return None
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise GpuopsError(f"batch must be a positive integer (the number of instances), not {batch!r}")
    actr = sorted({f"{n.id}.{x.id}" for n in graph.nodes for x in [*n.parameters, *n.functions]
                   if x.function in ACTR})
    if actr:
        raise ModelError(f"graph {graph.id!r}: ACT-R functions ({', '.join(actr)}) work on dicts and strings, "
                         "which cannot be batched; use one session per instance")
    return int(batch)


def _where(values: Values, mask, a, b):
    if isinstance(mask, Batched) or isinstance(a, Batched) or isinstance(b, Batched):
        return B.where(values.xp, mask, a, b)
    if not any(values.is_array(x) for x in (mask, a, b)):
        return a if values.truth(mask) else b
    return values.xp.where(values.array(mask), values.array(a), values.array(b))


class _Edge:
    def __init__(self, edge, nodes: dict, values: Values):
        self.sender, self.port = edge.sender, edge.sender_port
        self.where = f"edge {edge.id!r} ({edge.sender}.{edge.sender_port} -> {edge.receiver}.{edge.receiver_port})"
        self.source = nodes[edge.sender]
        self.target = next(p for p in nodes[edge.receiver].ports if p.id == edge.receiver_port)
        weight = (edge.parameters or {}).get("weight", 1)
        self.weight = None if type(weight) in (int, float) and weight == 1 else values.literal(weight)

    def deliver(self, rows: Batched | None = None) -> None:
        if self.port not in self.source.out:  # the sender has not produced this port yet
            return
        value = self.source.out[self.port]
        if self.weight is not None:
            try:
                value = self.weight * value
            except (TypeError, ValueError) as e:  # a weight of another shape, a sender value of None...
                raise NodeError(f"{self.where}: cannot apply the weight {_describe(self.weight)} to the value "
                                f"{_describe(value)}: {e}") from None
        self.target.put(value, rows)


def _describe(x) -> str:
    shape = getattr(x, "shape", None)
    return f"of shape {tuple(shape)}" if shape is not None else repr(x)[:40]


class _Port:
    def __init__(self, port, values: Values, where: str):
        self.id, self.reduce = port.id, port.reduce or "overwrite"
        self.where = f"{where}, input port {port.id!r}"
        if port.default_value is not None:
            self.default = compile_value(port.default_value, set(), values, self.where).const
        elif port.shape is not None:
            self.default = values.device.asarray(np.zeros(tuple(port.shape)))
        else:
            self.default = 0.0
        self.pending = self.default if self.reduce == "overwrite" else None
        self.xp = values.xp
        self.received: Batched | None = None  # per-row sessions: the rows that hold a pending value

    def _reduced(self, value):
        if self.pending is None or self.reduce == "overwrite":
            return value
        return self.pending + value if self.reduce == "add" else self.pending * value

    def put(self, value, rows: Batched | None = None) -> None:
        if rows is None:  # every row (an input, or a session without per-row conditions)
            self.pending, self.received = self._reduced(value), None
            return
        if self.received is None:  # what was pending (the default at first) reached every row
            self.received = Batched(rows.a | True) if self.pending is not None else Batched(rows.a & False)
        old = self.default if self.pending is None else self.pending
        new = B.where(self.xp, self.received, self._reduced(value), value)
        self.pending = B.where(self.xp, rows, new, old)
        self.received = Batched(self.received.a | rows.a)

    def take(self, rows: Batched | None = None):
        if rows is None:
            value = self.default if self.pending is None else self.pending
            self.pending = None
            return value
        if self.pending is None or self.received is None:
            value = self.default if self.pending is None else self.pending
        else:
            value = B.where(self.xp, self.received, self.pending, self.default)
        if self.received is not None:
            self.received = Batched(self.received.a & ~rows.a)
        else:
            self.received = Batched(~rows.a) if self.pending is not None else Batched(rows.a & False)
        return value


class _Call:
    """A function applied in a node: a standard function, an expression ``value`` over ``args``, an
    ``onnx::*`` op or an ACT-R function. ``call(scope)`` evaluates the args on top of the scope."""

    def __init__(self, function: str | None, args: dict | None, value, known: set, values: Values,
                 opset: int, where: str, ports: list[str]):
        args = dict(args or {})
        inner = set(known) | set(args)
        self.args = [(name, compile_value(a, inner, values, f"{where}, argument {name!r}"))
                     for name, a in args.items()]
        names = set().union(*(e.names for _, e in self.args)) if self.args else set()
        if function is None:
            if value is None:
                raise ModelError(f"{where}: has neither a function nor a value")
            body = compile_value(value, inner, values, where)
            names |= body.names
        elif function in STANDARD:
            needed, text = STANDARD[function]
            missing = [a for a in needed if a not in inner]
            if missing:
                raise ModelError(f"{where}: function {function!r} is missing argument(s) {missing} "
                                 f"(it takes {list(needed)})")
            body = compile_expr(text, inner, values, f"{where}, function {function!r}")
            names |= body.names
        elif function.startswith("onnx::"):
            body = OnnxCall(function[6:], list(args), inner, values, opset, where, ports)
        elif function in ACTR:
            fn = ACTR[function]
            required = [p.name for p in inspect.signature(fn).parameters.values()]
            if len(args) < len(required):
                raise ModelError(f"{where}: function {function!r} is missing argument(s) "
                                 f"{required[len(args):]} (it takes {required})")
            order = list(args)
            body = lambda s: fn(*[s[a] for a in order])  # noqa: E731  (positionally, as the reference)
        elif function.isidentifier():
            raise ModelError(f"{where}: unknown function {function!r}; MDF functions are "
                             f"{sorted(STANDARD)}, the ACT-R functions {sorted(ACTR)} and onnx::<Op>")
        else:  # the reference engine evaluates any other function string as an expression
            body = compile_expr(function, inner, values, where)
            names |= body.names
        self.body = body
        self.names = names - set(args)

    def __call__(self, scope: dict):
        local = dict(scope)
        for name, expr in self.args:
            local[name] = expr(local)
        return self.body(local)


class _Param:
    def __init__(self, p, known: set, values: Values, opset: int, where: str, ports: list[str]):
        self.id, self.values = p.id, values
        self.where = f"{where}, parameter {p.id!r}"

        def compile_(v, what):
            return None if v is None else compile_value(v, known, values, f"{self.where}{what}")

        self.value = compile_(p.value, "")
        self.init = compile_(p.default_initial_value, " (default_initial_value)")
        self.td = compile_(p.time_derivative, " (time_derivative)")
        self.call = None
        if p.function is not None:
            self.call = _Call(p.function, p.args, None, known, values, opset, self.where, ports)
        self.conditions = [(compile_(_field(c, "test"), f" condition {_field(c, 'id')!r} test"),
                            compile_(_field(c, "value"), f" condition {_field(c, 'id')!r} value"))
                           for c in (p.conditions or [])]
        self.stateful = self.td is not None or self.init is not None or (
            isinstance(p.value, str) and self.value is not None and p.id in self.value.names)
        self.cur = None

    def override(self, value) -> None:
        const = compile_value(value, set(), self.values, self.where)
        if self.stateful:
            self.init = const
        else:
            self.value, self.call, self.td = const, None, None
        self.cur = value

    def known(self):
        """The value before the next evaluation when it is known without evaluating (else None)."""
        if self.cur is not None:
            return self.cur
        for e in (self.init, self.value):
            if e is not None and e.const is not NOT_CONST:
                return e.const
        return None

    def current(self, scope: dict):
        """The value before this evaluation (the reference's ``get_current_value``)."""
        if self.cur is None and (self.value is not None or self.init is not None):
            if self.stateful:
                return self.init(scope) if self.init is not None else 0.0
            self.cur = self.value(scope)
        return self.cur

    def evaluate(self, scope: dict, dt):
        if self.value is not None:
            new = self.value(scope)
        elif self.call is not None:
            new = self.call(scope)
        elif self.td is not None:
            if dt is None:
                new = self.init(scope) if self.init is not None else 0.0
            else:
                base = self.cur if self.cur is not None else scope.get(self.id, 0.0)
                new = base + self.td(scope) * dt
        else:
            new = self.cur if self.cur is not None else scope.get(self.id)
        for test, value in self.conditions:
            new = _where(self.values, test(scope), value(scope), 0.0 if new is None else new)
        self.cur = new
        return new


def _field(obj, name):
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name)


class _Node:
    def __init__(self, node, values: Values, opset: int):
        self.id, self.xp = node.id, values.xp
        where = f"node {node.id!r}"
        self.ports = [_Port(p, values, where) for p in node.input_ports]
        port_ids = [p.id for p in node.input_ports]
        known = set(port_ids) | {p.id for p in node.parameters} | {f.id for f in node.functions}
        self.names = known | {o.id for o in node.output_ports}
        self.params = [_Param(p, known, values, opset, where, port_ids) for p in node.parameters]
        calls = {f.id: _Call(f.function, f.args, f.value, known, values, opset, f"{where}, function {f.id!r}",
                             port_ids) for f in node.functions}
        self.functions = _order_functions(calls, where)
        self.outputs = [(o.id, f"{where}, output port {o.id!r}",
                         None if o.value is None else compile_value(o.value, known, values,
                                                                     f"{where}, output port {o.id!r}"))
                        for o in node.output_ports]
        self._output_shapes = {o.id: o.shape for o in node.output_ports}
        self.fn_values: dict[str, Any] = {}
        self.out: dict[str, Any] = {}

    def evaluate(self, dt, rows: Batched | None = None) -> None:
        """Evaluate the node; with ``rows`` (a batched boolean), keep the new state only in those rows."""
        if rows is not None:
            before = ([p.cur for p in self.params], dict(self.fn_values), dict(self.out))
        scope: dict[str, Any] = {}
        what = self.id
        try:
            for p in self.ports:
                what = p.where
                scope[p.id] = p.take(rows)
            for p in self.params:
                what = p.where
                scope[p.id] = p.current(scope)
            for fid, call, what in self.functions:
                scope[fid] = self.fn_values[fid] = call(scope)
            for p in self.params:
                what = p.where
                scope[p.id] = p.evaluate(scope, dt)
            for oid, what, expr in self.outputs:
                self.out[oid] = None if expr is None else expr(scope)
            if rows is not None:
                what = self.id
                self._keep(rows, *before)
        except GpuopsError:
            raise
        except Exception as e:
            raise NodeError(f"{what}: {type(e).__name__}: {e}") from e

    def _keep(self, rows: Batched, cur: list, fn_values: dict, out: dict) -> None:
        """New values only in ``rows``; the other rows keep what they had."""
        xp = self.xp

        def merge(new, old):
            if old is None or new is None or new is old:
                return new
            if isinstance(new, tuple):
                return tuple(merge(a, b) for a, b in zip(new, old))
            return B.where(xp, rows, new, old)

        for p, old in zip(self.params, cur):
            p.cur = merge(p.cur, old)
        for store, old in ((self.fn_values, fn_values), (self.out, out)):
            for k, v in store.items():
                store[k] = merge(v, old.get(k))

    def lookup(self, name: str):
        """Current value of ``name`` for scheduler conditions (defaults before the first run)."""
        for p in self.ports:
            if p.id == name:
                return p.pending if p.pending is not None else p.default
        for p in self.params:
            if p.id == name:
                if p.cur is not None:
                    return p.cur
                return p.init.const if p.init is not None and p.init.const is not NOT_CONST else 0
        if name in self.fn_values:
            return self.fn_values[name]
        if name in self.out:
            return self.out[name]
        shape = self._output_shapes.get(name)
        return np.zeros(tuple(shape)) if shape is not None else 0


def _order_functions(calls: dict[str, _Call], where: str) -> list:
    """Node functions in an order where each comes after the functions it reads."""
    ordered, placed, pending = [], set(), list(calls)
    while pending:
        ready = [f for f in pending if not (calls[f].names & set(calls)) - placed - {f}]
        if not ready:
            raise ModelError(f"{where}: functions {pending} depend on each other in a cycle")
        for f in ready:
            ordered.append((f, calls[f], f"{where}, function {f!r}"))
            placed.add(f)
            pending.remove(f)
    return ordered
