"""The modeci-mdf reference engine as a test oracle (its chatter on stdout silenced)."""

from __future__ import annotations

import contextlib
import io

import numpy as np


def mdf_model(*nodes, edges=(), conditions=None, graph_id="g"):
    """A modeci_mdf Model of one graph holding ``nodes`` and ``edges``."""
    from modeci_mdf.mdf import Graph, Model

    g = Graph(id=graph_id)
    g.nodes.extend(nodes)
    g.edges.extend(edges)
    g.conditions = conditions
    m = Model(id="m")
    m.graphs.append(g)
    return m


def reference_graph(model, graph=None):
    from modeci_mdf.execution_engine import EvaluableGraph
    from modeci_mdf.utils import load_mdf

    if not hasattr(model, "graphs"):
        model = load_mdf(str(model))
    g = model.graphs[0] if graph is None else next(x for x in model.graphs if x.id == graph)
    with contextlib.redirect_stdout(io.StringIO()):
        return EvaluableGraph(g, verbose=False)


def reference_step(eg, time_increment=None, inputs=None):
    """One evaluate(): (outputs {"node.port": value}, execution order with each time step in graph order)."""
    rank = {n.id: i for i, n in enumerate(eg.graph.nodes)}
    before = len(eg.scheduler.execution_list[None])
    with contextlib.redirect_stdout(io.StringIO()):
        eg.evaluate(time_increment=time_increment, initializer=inputs)
    steps = eg.scheduler.execution_list[None][before:]
    order = [n.id for step in steps for n in sorted(step, key=lambda n: rank[n.id])]
    outs = {f"{nid}.{pid}": e.curr_value for nid, en in eg.enodes.items()
            for pid, e in en.evaluable_outputs.items() if e.curr_value is not None}
    return outs, order


def assert_same(ours: dict, ref: dict, rtol=1e-5, atol=1e-6, where=""):
    assert set(ref) <= set(ours), f"{where}: missing outputs {sorted(set(ref) - set(ours))}"
    for key, want in ref.items():
        got = ours[key]
        if isinstance(want, np.ndarray) and want.dtype == object:  # the reference's lists of dicts
            want = want.tolist()
        if isinstance(want, (dict, str, list)) and not _numeric(want):
            assert got == want, f"{where} {key}: {got!r} != {want!r}"
            continue
        want, got = np.asarray(want), np.asarray(got)
        assert got.shape == want.shape, f"{where} {key}: shape {got.shape} != {want.shape}"
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                   err_msg=f"{where} {key}")


def _numeric(v) -> bool:
    try:
        return np.asarray(v).dtype.kind in "biuf"
    except Exception:
        return False
