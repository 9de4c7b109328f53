"""Our scheduler (gpuops.mdf.schedule.Machine) step by step against graph-scheduler, the oracle, on
random graphs with random conditions of every type the machine knows (nested, in termination
conditions too), over several runs; and which examples get a static execution sequence."""

import random

import pytest

pytest.importorskip("modeci_mdf")
pytest.importorskip("graph_scheduler")

from modeci_mdf.mdf import Condition, ConditionSet, Edge, InputPort, Node, OutputPort  # noqa: E402

from gpuops.bench.mdf import examples_dir  # noqa: E402
from gpuops.mdf import MDFSession  # noqa: E402
from gpuops.mdf.schedule import Schedule  # noqa: E402
from gpuops.mdf.validate import validate_graph  # noqa: E402

from .reference import mdf_model  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*is dependent on:UserWarning")  # owners in their own conditions
SCALES = ["TimeScale.ENVIRONMENT_STATE_UPDATE", "TimeScale.PASS", "TimeScale.ENVIRONMENT_SEQUENCE"]


def leaf(r, owner, ids):
    dep = r.choice([i for i in ids if i != owner] or ids)
    n = r.randint(0, 3)
    scale = r.choice(SCALES)
    pool = [
        ("Always", {}), ("Never", {}),
        ("EveryNCalls", {"dependency": dep, "n": r.randint(1, 3)}),
        ("AfterNCalls", {"dependency": dep, "n": r.randint(1, 3), "time_scale": scale}),
        ("AfterCall", {"dependency": dep, "n": n, "time_scale": scale}),
        ("AtNCalls", {"dependency": dep, "n": n}),
        ("BeforeNCalls", {"dependency": dep, "n": r.randint(1, 4), "time_scale": scale}),
        ("AfterNCallsCombined", {"dependencies": r.sample(ids, k=2), "n": r.randint(1, 4)}),
        ("AllHaveRun", {"dependencies": r.sample(ids, k=2)}),
        ("AfterPass", {"n": n}), ("AfterNPasses", {"n": n}), ("AtPass", {"n": n}), ("BeforePass", {"n": n + 1}),
        ("EveryNPasses", {"n": r.randint(1, 3)}),
        ("AtConsiderationSetExecution", {"n": n}), ("AfterConsiderationSetExecution", {"n": n}),
        ("BeforeConsiderationSetExecution", {"n": n + 2}), ("AfterNConsiderationSetExecutions", {"n": n}),
        ("AtEnvironmentStateUpdate", {"n": r.randint(0, 2)}), ("AfterNEnvironmentStateUpdates", {"n": 1}),
        ("BeforeEnvironmentStateUpdate", {"n": 2}), ("AfterEnvironmentStateUpdate", {"n": 0}),
        ("AtEnvironmentStateUpdateStart", {}),
        ("Threshold", {"dependency": dep, "parameter": "count", "threshold": r.randint(1, 4),
                       "comparator": r.choice(["<", "<=", ">", ">=", "==", "!="])}),
    ]
    if r.random() < 0.15:  # absolute time: every consideration set is a step
        pool = [("TimeInterval", {"repeat": r.randint(1, 3), "start": r.randint(0, 3), "unit": "ms"}),
                ("TimeTermination", {"t": r.randint(2, 9)})]
    if owner is None:  # (EveryNCalls and TimeInterval need an owner: no termination condition has one)
        pool = [c for c in pool if c[0] not in ("EveryNCalls", "TimeInterval")] or [("AfterPass", {"n": n})]
    typ, kwargs = r.choice(pool)
    return Condition(typ, **kwargs)


# (JustRan is tested on its own: graph-scheduler fails on it before anything has run)


def condition(r, owner, ids, depth=0):
    if depth < 2 and r.random() < 0.35:
        kind = r.choice(["All", "Any", "And", "Or", "Not", "NWhen"])
        if kind == "Not":
            return Condition("Not", condition=condition(r, owner, ids, depth + 1))
        if kind == "NWhen":
            return Condition("NWhen", condition=condition(r, owner, ids, depth + 1), n=r.randint(1, 3))
        return Condition(kind, dependencies=[condition(r, owner, ids, depth + 1) for _ in range(r.randint(2, 3))])
    return leaf(r, owner, ids)


def random_graph(seed):
    r = random.Random(seed)
    ids = ["A", "B", "C", "D"][: r.randint(2, 4)]
    nodes = []
    for i, nid in enumerate(ids):
        n = Node(id=nid)
        n.input_ports.append(InputPort(id="inp"))
        n.output_ports.append(OutputPort(id="out", value="inp"))
        nodes.append(n)
    edges = [Edge(id=f"e{i}", sender=r.choice(ids[:i]), receiver=ids[i], sender_port="out", receiver_port="inp")
             for i in range(1, len(ids)) if r.random() < 0.7]
    node_specific = {nid: condition(r, nid, ids) for nid in ids if r.random() < 0.8}
    ends = [Condition("AfterPass", n=r.randint(2, 6))] + [condition(r, None, ids) for _ in range(r.randint(0, 2))]
    termination = {"environment_state_update": Condition("Any", dependencies=ends)}
    return mdf_model(*nodes, edges=edges, conditions=ConditionSet(node_specific=node_specific,
                                                                   termination=termination)).graphs[0]


def traces(graph, use_machine: bool, runs=4):
    """Steps of several runs; Threshold reads how often the node has run so far ("count")."""
    ran = {n.id: 0 for n in graph.nodes}
    schedule = Schedule(graph, validate_graph(graph), lambda nid, name: ran[nid], lambda nid: {"count"})
    if use_machine and schedule.machine is None:
        return None
    # graph-scheduler considers the nodes of a consideration set in set (hash) order, ours in graph
    # order: the oracle gets graph order too, where conditions make the order matter
    queue = schedule.scheduler._consideration_queues[-1]
    queue[:] = [sorted(level, key=schedule.order.index) for level in queue]
    out = []
    for _ in range(runs):
        steps = schedule.steps() if use_machine else schedule._scheduled()  # ours: static or step by step
        run = []
        for step in steps:
            run.append(sorted(step))
            for nid in step:
                ran[nid] += 1
        out.append(run)
    return out


@pytest.mark.parametrize("seed", range(80))
def test_machine_equals_graph_scheduler_step_by_step(seed):
    graph = random_graph(seed)
    ours = traces(graph, True)
    assert ours is not None, "every condition type here is one the machine knows"
    assert ours == traces(graph, False)


@pytest.mark.parametrize("name,static", [("abc_conditions.json", True), ("conditions/everyncalls_condition.json", True),
                                         ("conditions/Composite_mdf_condition.json", True),
                                         ("conditions/threshold_condition.json", False)])
def test_examples_get_a_static_sequence_unless_values_decide(name, static):
    s = MDFSession(examples_dir() / name, device="cpu")
    assert s._schedule.machine is not None
    assert (s._schedule.static is not None) == static


@pytest.mark.parametrize("termination", ["AfterPass", "JustRan"])
def test_just_ran_reads_the_step_before_even_across_runs(termination):
    nodes = []
    for nid in "ABC":
        n = Node(id=nid)
        n.input_ports.append(InputPort(id="inp"))
        n.output_ports.append(OutputPort(id="out", value="inp"))
        nodes.append(n)
    edges = [Edge(id=f"e{a}", sender=a, receiver=b, sender_port="out", receiver_port="inp") for a, b in ["AB", "BC"]]
    conditions = {"A": Condition("EveryNPasses", n=2), "B": Condition("Any", dependencies=[
        Condition("JustRan", dependency="A"), Condition("AtPass", n=1)]), "C": Condition("JustRan", dependency="B")}
    ends = [Condition("AfterNCalls", dependency="C", n=2), Condition("JustRan", dependency="A")]
    ends = Condition("All", dependencies=ends) if termination == "JustRan" else Condition("AfterPass", n=5)
    graph = mdf_model(*nodes, edges=edges, conditions=ConditionSet(node_specific=conditions,
                                                      termination={"environment_state_update": ends})).graphs[0]
    assert traces(graph, True) == traces(graph, False)
