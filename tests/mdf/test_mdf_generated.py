"""Small generated MDF models run by gpuops and by modeci-mdf's reference engine, compared run by run:
standard functions over random DAGs (edge weights, input-port reduce), state and time derivatives
with parameter conditions, graph-scheduler conditions, cycles broken by default values, array
expressions, and onnx::* functions taking attributes from node parameters."""

import random

import numpy as np
import pytest

pytest.importorskip("modeci_mdf")
pytest.importorskip("graph_scheduler")

from modeci_mdf.mdf import (Condition, ConditionSet, Edge, Function, InputPort, Node,  # noqa: E402
                            OutputPort, Parameter, ParameterCondition)

from gpuops.mdf import MDFSession  # noqa: E402

from .reference import assert_same, mdf_model, reference_graph, reference_step  # noqa: E402

DEVICES = ["cpu", "cuda"]


def compare(model, device, runs, rtol=1e-6, atol=1e-9):
    """Run ``model`` through both engines; ``runs`` is a list of (time_increment, inputs)."""
    eg = reference_graph(model)
    s = MDFSession(model, device=device)
    for i, (dt, inputs) in enumerate(runs):
        ref, order = reference_step(eg, dt, dict(inputs) if inputs else None)
        out = s.run(time_increment=dt, inputs=inputs)
        assert s.execution_trace == order, f"run {i}"
        assert_same(out, ref, rtol=rtol, atol=atol, where=f"run {i}")
    return s


def edge(sender, receiver, weight=None, sp="out", rp="inp"):
    return Edge(id=f"{sender}_{receiver}_{rp}", sender=sender, receiver=receiver, sender_port=sp, receiver_port=rp,
                parameters=None if weight is None else {"weight": weight})


STANDARD = {
    "linear": lambda r: {"slope": r.uniform(-2, 2), "intercept": r.uniform(-1, 1)},
    "logistic": lambda r: {"gain": r.uniform(0.5, 3), "bias": r.uniform(-1, 1), "offset": r.uniform(-1, 1)},
    "exponential": lambda r: {"scale": r.uniform(0.5, 2), "rate": r.uniform(-0.3, 0.3), "bias": 0.1, "offset": -0.5},
    "sin": lambda r: {"scale": r.uniform(0.5, 2)},
    "cos": lambda r: {"scale": r.uniform(0.5, 2)},
    "tanh": lambda r: {"scale": r.uniform(0.5, 2)},
    "arctan": lambda r: {"scale": r.uniform(0.5, 2)},
    "sinh": lambda r: {"scale": 0.3},
}


def random_dag(seed: int):
    r = random.Random(seed)
    n = r.randint(3, 7)
    nodes, edges = [], []
    src = Node(id="n0")
    src.parameters.append(Parameter(id="level", value=r.uniform(-1, 1)))
    src.output_ports.append(OutputPort(id="out", value="level * 2"))
    nodes.append(src)
    for i in range(1, n):
        node = Node(id=f"n{i}")
        senders = r.sample(range(i), k=min(i, r.randint(1, 3)))
        # several edges into an overwrite port: the reference keeps an arbitrary one (a set), so reduce
        reduce = r.choice(["add", "multiply"]) if len(senders) > 1 else "overwrite"
        node.input_ports.append(InputPort(id="inp", reduce=reduce))
        fname = r.choice(sorted(STANDARD))
        params = STANDARD[fname](r)
        in_node = r.random() < 0.5  # some arguments come from node parameters, some inline
        for k, v in params.items():
            if in_node:
                node.parameters.append(Parameter(id=k, value=v))
        args = {k: k for k in params} if in_node else params
        node.parameters.append(Parameter(id="f", function=fname, args={"variable0": "inp * 0.5", **args}))
        node.output_ports.append(OutputPort(id="out", value=r.choice(["f", "f + inp", "f * f - 0.25", "-f"])))
        nodes.append(node)
        edges.extend(edge(f"n{s}", node.id, r.choice([None, 1, 0.5, -1.5])) for s in senders)
    return mdf_model(*nodes, edges=edges)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(8))
def test_random_dags_of_standard_functions(seed, device):
    compare(random_dag(seed), device, [(None, None)] * 2)


def dynamics(seed: int):
    r = random.Random(seed)
    a, b, c = (r.uniform(0.2, 2) for _ in range(3))
    n = Node(id="dyn")
    n.input_ports.append(InputPort(id="drive", default_value=r.uniform(-1, 1)))
    n.parameters.extend([
        Parameter(id="k", value=a),
        Parameter(id="x", default_initial_value=1.0, time_derivative=f"-k * y + {b} * drive"),
        Parameter(id="y", default_initial_value="k / 2", time_derivative=f"{c} * x - 0.1 * y"),
        Parameter(id="count", value="count + 1"),
        Parameter(id="acc", default_initial_value=0, value="acc + x * y"),
        Parameter(id="gate", value=0.0, conditions=[
            ParameterCondition(id="up", test="x > 0.5", value="x"),
            ParameterCondition(id="down", test="x < -0.5", value="-1")]),
        Parameter(id="clipped", function="linear", args={"variable0": "x", "slope": 2, "intercept": "gate"}),
    ])
    n.output_ports.extend([OutputPort(id=o, value=v) for o, v in
                           [("x", "x"), ("y", "y"), ("count", "count"), ("acc", "acc"), ("gate", "gate"),
                            ("clipped", "clipped")]])
    return mdf_model(n)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(4))
def test_state_time_derivatives_and_parameter_conditions(seed, device):
    compare(dynamics(seed), device, [(None, None)] + [(0.05, None)] * 40, rtol=1e-9)


def _cond(r, others):
    dep = r.choice(others)
    pool = [
        lambda: Condition("Always"),
        lambda: Condition("EveryNCalls", dependencies=dep, n=r.randint(1, 3)),
        lambda: Condition("AfterNCalls", dependencies=dep, n=r.randint(1, 3)),
        lambda: Condition("BeforeNCalls", dependencies=dep, n=r.randint(2, 4)),
        lambda: Condition("AfterPass", n=r.randint(0, 3)),
        lambda: Condition("EveryNPasses", n=r.randint(1, 3)),
        # (JustRan is in the examples: graph-scheduler fails on it before anything has run)
        lambda: Condition("Not", condition=Condition("EveryNPasses", n=2)),
        lambda: Condition("Any", dependencies=[Condition("AtPass", n=1),
                                               Condition("EveryNCalls", dependencies=dep, n=2)]),
        lambda: Condition("All", dependencies=[Condition("AfterPass", n=1), Condition("EveryNPasses", n=2)]),
    ]
    return r.choice(pool)()


def scheduled(seed: int):
    r = random.Random(seed)
    ids = ["A", "B", "C", "D"][: r.randint(2, 4)]
    nodes = []
    for i, nid in enumerate(ids):
        n = Node(id=nid)
        if i:
            n.input_ports.append(InputPort(id="inp", shape=(1,)))
        n.parameters.append(Parameter(id="count", value="count + 1", default_initial_value=0))
        n.output_ports.append(OutputPort(id="out", value="count"))
        nodes.append(n)
    edges = [edge(ids[i - 1] if i == 1 or r.random() < 0.5 else ids[0], ids[i]) for i in range(1, len(ids))]
    node_specific = {nid: _cond(r, [x for x in ids if x != nid] or ids) for nid in ids if r.random() < 0.8}
    last = ids[-1]
    termination = {"environment_state_update": Condition(
        "Any", dependencies=[Condition("AfterPass", n=6),
                             Condition("AfterNCalls", dependencies=last, n=r.randint(1, 3)),
                             Condition("Threshold", dependency=ids[0], parameter="count", threshold=r.randint(5, 9),
                                       comparator=">=")])}
    return mdf_model(*nodes, edges=edges, conditions=ConditionSet(node_specific=node_specific, termination=termination))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(10))
def test_graph_scheduler_conditions(seed, device):
    compare(scheduled(seed), device, [(None, None)] * 3)


@pytest.mark.parametrize("device", DEVICES)
def test_time_interval_conditions(device):
    nodes = []
    for nid in "AB":
        n = Node(id=nid)
        n.parameters.append(Parameter(id="count", value="count + 1", default_initial_value=0))
        n.output_ports.append(OutputPort(id="out", value="count"))
        nodes.append(n)
    conditions = ConditionSet(
        node_specific={"A": Condition("TimeInterval", repeat=2, start=1, unit="ms"),
                       "B": Condition("Any", dependencies=[Condition("AtPass", n=0),
                                                           Condition("TimeInterval", repeat=3)])},
        termination={"environment_state_update": Condition("AfterPass", n=8)})
    s = compare(mdf_model(*nodes, conditions=conditions), device, [(None, None)] * 2)
    assert s.execution_trace.count("A") > 2 and "B" in s.execution_trace


@pytest.mark.parametrize("device", DEVICES)
def test_cycle_through_a_port_with_a_default_value(device):
    a, b = Node(id="A"), Node(id="B")
    a.input_ports.append(InputPort(id="inp", default_value=0.5))
    a.parameters.append(Parameter(id="v", value="inp * 0.9 + 1"))
    a.output_ports.append(OutputPort(id="out", value="v"))
    b.input_ports.append(InputPort(id="inp"))
    b.parameters.append(Parameter(id="w", function="logistic",
                                  args={"variable0": "inp", "gain": 1, "bias": 0, "offset": 0}))
    b.output_ports.append(OutputPort(id="out", value="w * 3"))
    compare(mdf_model(a, b, edges=[edge("A", "B"), edge("B", "A", 2.0)]), device, [(None, None)] * 5)


@pytest.mark.parametrize("device", DEVICES)
def test_arrays_expressions_and_node_functions(device):
    src = Node(id="src")
    src.parameters.append(Parameter(id="x", value=[[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]]))
    src.output_ports.append(OutputPort(id="out", value="x"))
    n = Node(id="n")
    n.input_ports.append(InputPort(id="inp", shape=(2, 3)))
    n.parameters.extend([
        Parameter(id="W", value=[[1.0, 0.0], [0.5, -1.0], [2.0, 1.0]]),
        Parameter(id="h", value="numpy.maximum(inp @ W, 0) + math.pi"),
        Parameter(id="s", value="numpy.sum(h * h) / 2 if numpy.sum(h) > 0 else -1"),
        Parameter(id="row", value="inp[1]"),
        Parameter(id="t", value="numpy.tanh(inp) * numpy.exp(-abs(inp))"),
    ])
    n.functions.extend([
        Function(id="g", function="logistic", args={"variable0": "t", "gain": 2, "bias": 0, "offset": 0}),
        Function(id="gv", value="A * B - inp", args={"A": "g", "B": 3}),
    ])
    n.output_ports.extend([OutputPort(id=o, value=o) for o in ("h", "s", "row", "t", "gv")])
    n.output_ports.append(OutputPort(id="first", value="h[0, 1] + row[2]"))
    compare(mdf_model(src, n, edges=[edge("src", "n", [[1, 2, 3], [0.5, 0.5, 0.5]])]), device, [(None, None)] * 2)


@pytest.mark.parametrize("device", DEVICES)
def test_inputs_are_reduced_like_edges(device):
    n = Node(id="n")
    n.input_ports.append(InputPort(id="a", reduce="add"))
    n.input_ports.append(InputPort(id="b", shape=(3,)))
    n.parameters.append(Parameter(id="p", value="a * 2 + b"))
    n.output_ports.append(OutputPort(id="out", value="p"))
    runs = [(None, {"a": 1.5, "b": np.array([1.0, 2.0, 3.0])}), (None, {"a": -2.0}), (None, None)]
    compare(mdf_model(n), device, runs)


# onnx::Op, its args, extra node parameters (attributes or inputs the args do not list), input values
ONNX_CASES = [
    ("Add", {"A": "x", "B": "y"}, {}),
    ("Sub", {"A": "x", "B": 2.5}, {}),
    ("Mul", {"A": "x"}, {"B": [[2.0, 3.0, 4.0]]}),
    ("Div", {"A": "x", "B": "y"}, {}),
    ("Pow", {"X": "abs(x)", "Y": 2.0}, {}),
    ("Abs", {"X": "x"}, {}), ("Neg", {"X": "x"}, {}), ("Relu", {"X": "x"}, {}), ("Sigmoid", {"X": "x"}, {}),
    ("Tanh", {"input": "x"}, {}), ("Exp", {"input": "x"}, {}), ("Sin", {"input": "x"}, {}), ("Cos", {"input": "x"}, {}),
    ("Floor", {"X": "x"}, {}), ("Ceil", {"X": "x"}, {}), ("Sqrt", {"X": "abs(x)"}, {}), ("Erf", {"input": "x"}, {}),
    ("Log", {"input": "abs(x) + 1"}, {}), ("Softplus", {"X": "x"}, {}), ("Reciprocal", {"X": "x + 10"}, {}),
    ("LeakyRelu", {"X": "x"}, {"alpha": 0.2}),
    ("Elu", {"X": "x"}, {"alpha": 0.5}),
    ("HardSigmoid", {"X": "x"}, {"alpha": 0.3, "beta": 0.4}),
    ("Selu", {"X": "x"}, {}),
    ("Softmax", {"input": "x"}, {"axis": 0}),
    ("LogSoftmax", {"input": "x"}, {}),
    ("MatMul", {"A": "x", "B": "W"}, {"W": [[1.0, 0.5], [0.25, -1.0], [2.0, 0.0]]}),
    ("Gemm", {"A": "x", "B": "W", "C": "bias"}, {"W": [[1.0, 0.5, 2.0], [0.25, -1.0, 3.0]], "bias": [0.1, 0.2],
                                                 "transB": 1, "alpha": 0.5}),
    ("Transpose", {"data": "x"}, {"perm": [1, 0]}),
    ("Reshape", {"data": "x", "shape": "s"}, {"s": [3, 2]}),
    ("Flatten", {"input": "x"}, {"axis": 0}),
    ("Unsqueeze", {"data": "x", "axes": "ax"}, {"ax": [0]}),
    ("Concat", {"inputs": "['x', 'y']"}, {"axis": 1}),
    ("Sum", {"data_0": "['x', 'y']"}, {}),
    ("Max", {"data_0": "['x', 'y']"}, {}),
    ("Mean", {"data_0": "['x', 'y']"}, {}),
    ("ReduceMean", {"data": "x"}, {"axes": [1], "keepdims": 0}),
    ("ReduceSum", {"data": "x", "axes": "ax"}, {"ax": [0]}),
    ("ReduceMax", {"data": "x"}, {}),
    ("ArgMax", {"data": "x"}, {"axis": 1}),
    ("Clip", {"input": "x", "min": -0.5, "max": 0.5}, {}),
    ("Where", {"condition": "x > 0", "X": "x", "Y": "y"}, {}),
    ("Greater", {"A": "x", "B": "y"}, {}),
    ("Equal", {"A": "x", "B": "x"}, {}),
    ("Cast", {"input": "x"}, {"to": 7}),
    ("Shape", {"data": "x"}, {}),
    ("Size", {"data": "x"}, {}),
    ("Identity", {"input": "x"}, {}),
    ("Tile", {"input": "x", "repeats": "r"}, {"r": [2, 1]}),
    ("Expand", {"input": "v", "shape": "s"}, {"v": [1.0, 2.0, 3.0], "s": [2, 3]}),
    ("Gather", {"data": "x", "indices": "i"}, {"i": [1, 0, 1], "axis": 1}),
    ("Slice", {"data": "x", "starts": "st", "ends": "en"}, {"st": [0, 1], "en": [1, 3]}),
    ("Pad", {"data": "x", "pads": "p"}, {"p": [1, 0, 0, 1], "mode": "constant"}),
    ("CumSum", {"x": "x", "axis": "a"}, {"a": 1}),
    ("TopK", {"X": "x", "K": "k"}, {"k": [2]}),
    ("InstanceNormalization", {"input": "x4", "scale": "sc", "B": "b"}, {"x4": [[[1.0, 2.0, 4.0], [0.5, -1.0, 2.0]]],
                                                                        "sc": [1.0, 2.0], "b": [0.0, 0.5]}),
    ("AveragePool", {"X": "x4"}, {"x4": [[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]]],
                                  "kernel_shape": [2, 2]}),
    ("MaxPool", {"X": "x4"}, {"x4": [[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]]], "kernel_shape": [2, 2],
                             "strides": [1, 1]}),
    ("Conv", {"X": "x4", "W": "w4"}, {"x4": [[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]]],
                                      "w4": [[[[1.0, 0.5], [-1.0, 2.0]]]], "pads": [1, 1, 0, 0]}),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op,args,params", ONNX_CASES, ids=[c[0] for c in ONNX_CASES])
def test_onnx_functions(op, args, params, device):
    n = Node(id=f"/{op}/node")  # an id that is not a Python name
    n.parameters.append(Parameter(id="x", value=[[0.5, -1.25, 2.0], [1.5, 0.25, -0.75]]))
    n.parameters.append(Parameter(id="y", value=[[1.0, 2.0, -3.0], [0.5, 0.5, 4.0]]))
    n.parameters.extend(Parameter(id=k, value=v) for k, v in params.items())
    # the reference engine passes every node value to variadic ops (Sum, Concat...) but those with
    # "onnx_" in their id, so those ops get their list of inputs as the converters write it
    fid = f"onnx_{op}" if any(v.startswith("[") for v in args.values() if isinstance(v, str)) else f"/{op}/f"
    n.parameters.append(Parameter(id=fid, function=f"onnx::{op}", args=args))
    n.output_ports.append(OutputPort(id="out", value=fid))
    compare(mdf_model(n), device, [(None, None)] * 2, rtol=1e-5, atol=1e-6)  # the reference computes in float32
