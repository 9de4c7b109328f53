"""Regression tests for MDF defects found by fuzzing (Hypothesis, tests/fuzz/): bounded expressions,
validated edge weights, port shapes, opsets and conditions, and onnx:: functions promoting mixed float inputs."""

import numpy as np
import pytest

pytest.importorskip("modeci_mdf")

from modeci_mdf.mdf import (Condition, ConditionSet, Edge, InputPort, Node, OutputPort,  # noqa: E402
                            Parameter)

from gpuops.errors import GpuopsError, ModelError, NodeError  # noqa: E402
from gpuops.mdf import MDFSession  # noqa: E402
from gpuops.mdf.expr import (MAX_ELEMENTS, MAX_EXPRESSION_DEPTH, MAX_EXPRESSION_LENGTH,  # noqa: E402
                             ExpressionError)

from .reference import assert_same, mdf_model, reference_graph, reference_step  # noqa: E402


def counter(nid="A", value="count + 1", ports=()):
    n = Node(id=nid)
    n.input_ports.extend(ports)
    n.parameters.append(Parameter(id="count", value=value, default_initial_value=0))
    n.output_ports.append(OutputPort(id="out", value="count"))
    return n


def session(*nodes, **kwargs):
    return MDFSession(mdf_model(*nodes, **kwargs), device="cpu")


@pytest.mark.parametrize("source", [
    "9**9**9", "pow(10, 10**9)", "(-3) ** 10**8", "'a' * 10**9", "['a', 'b'] * 10**9", "'%0999999999d' % 1",
    "numpy.zeros(10**10)", "numpy.ones((2**20, 2**20))", "numpy.full((10**5, 10**5), 1.0)", "numpy.eye(10**6)",
    "numpy.identity(10**5)", "numpy.tile([1.0, 2.0], 10**9)", "numpy.repeat([1.0], 10**9)",
    "numpy.outer(numpy.ones(10**6), numpy.ones(10**6))",
])
def test_constant_folding_is_bounded(source):
    with pytest.raises(ExpressionError, match=r"node 'A', parameter 'count'.*(bits|items|elements|not allowed)"):
        session(counter(value=source))


def test_bounds_hold_when_values_come_at_run_time():
    s = session(counter(value="inp ** 10**9", ports=[InputPort(id="inp")]))
    with pytest.raises(NodeError, match=r"node 'A', parameter 'count'.*bits"):
        s.run(inputs={"inp": 7})
    assert float(s.run(inputs={"inp": 1})["A.out"]) == 1  # the session still works


def test_big_but_bounded_values_still_fold():
    n = Node(id="A")
    n.parameters.append(Parameter(id="big", value="2 ** 4000 // 2 ** 3990"))
    n.parameters.append(Parameter(id="z", value="numpy.sum(numpy.zeros((64, 64)) + 1)"))
    n.output_ports.extend([OutputPort(id="big", value="big"), OutputPort(id="z", value="z")])
    out = MDFSession(mdf_model(n), device="cpu").run()
    assert int(out["A.big"]) == 2 ** 10 and float(out["A.z"]) == 64 * 64


@pytest.mark.parametrize("source,why", [
    ("1" * 5000, "not valid"),
    ("1+" * 100_000 + "1", "characters long"),
    ("-" * 100_000 + "1", "characters long"),
    ("1+" * 3000 + "1", "nested more than"),
    ("-" * 5000 + "count", "nested more than"),
    ("[" * 150 + "1" + "]" * 150, "nested more than"), ("abs(" * 300 + "1" + ")" * 300, "not valid|nested"),
])
def test_expression_length_and_depth_are_bounded(source, why):
    with pytest.raises(ExpressionError, match=why):
        session(counter(value=source))


def test_expressions_at_the_limits_are_accepted():
    depth = MAX_EXPRESSION_DEPTH // 2 - 2  # each unary minus adds two syntax-tree levels (op and operand)
    s = session(counter(value="-" * depth + "count + " + "+".join(["1"] * 20)))
    assert float(s.run()["A.out"]) == 20
    long = "count +" + " " * (MAX_EXPRESSION_LENGTH - 9) + "1"
    assert float(session(counter(value=long)).run()["A.out"]) == 1


@pytest.mark.parametrize("weight", ["abc", None, [1.0, "a"], {"w": 1}, [[1.0], [2.0, 3.0]], 1j])
def test_edge_weights_are_validated_at_creation(weight):
    b = counter("B", ports=[InputPort(id="inp")])
    e = Edge(id="e1", sender="A", receiver="B", sender_port="out", receiver_port="inp",
             parameters={"weight": weight})
    with pytest.raises(ModelError, match="edge 'e1': weight .* is not a number or a numeric array"):
        session(counter(), b, edges=[e])


@pytest.mark.parametrize("shape,why", [((-1, 3), "non-negative integers"), ((2 ** 20, 2 ** 20), "elements"),
                                       ((2.5,), "non-negative integers")])
def test_port_shapes_are_validated(shape, why):
    with pytest.raises(ModelError, match=f"node 'A', input port 'inp': shape .*{why}"):
        session(counter(ports=[InputPort(id="inp", shape=shape)]))
    n = counter()
    n.output_ports.append(OutputPort(id="o", value="count", shape=shape))
    with pytest.raises(ModelError, match=f"node 'A', output port 'o': shape .*{why}"):
        session(n)
    assert MAX_ELEMENTS >= 2 ** 20


@pytest.mark.parametrize("opset", ["abc", "0", 10 ** 6, "1.5"])
def test_onnx_opset_version_is_validated(opset):
    m = mdf_model(counter())
    m.onnx_opset_version = opset
    with pytest.raises(ModelError, match="onnx_opset_version .* is not an ONNX opset"):
        MDFSession(m, device="cpu")
    m.onnx_opset_version = "13"
    MDFSession(m, device="cpu").run()


def test_graph_scheduler_condition_errors_are_model_errors():
    bad = ConditionSet(termination={"environment_state_update": Condition(
        "Threshold", dependency="A", parameter="count", threshold=3, comparator="~~")})
    with pytest.raises(ModelError, match="Threshold.*ConditionError.*must be one of") as e:
        session(counter(), conditions=bad)
    assert isinstance(e.value, GpuopsError)


# (op, args): x is a float32 input, y and the numbers are float64 (the reference computes in float32)
PROMOTED = [
    ("Add", {"A": "x", "B": "y"}), ("Sub", {"A": "y", "B": "x"}), ("Mul", {"A": "x", "B": 2.5}),
    ("Div", {"A": "x", "B": "y"}), ("Clip", {"input": "x", "min": "lo", "max": 0.5}),
    ("Greater", {"A": "x", "B": "y"}), ("GreaterOrEqual", {"A": "x", "B": "y"}), ("Less", {"A": "x", "B": "y"}),
    ("LessOrEqual", {"A": "y", "B": "x"}), ("PRelu", {"X": "x", "slope": "y"}),
    ("Mean", {"data_0": "['x', 'y']"}), ("Sum", {"data_0": "['x', 'y']"}),
]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("op,args", PROMOTED, ids=[p[0] for p in PROMOTED])
def test_onnx_functions_promote_mixed_floats(op, args, device):
    n = Node(id="n")
    n.input_ports.append(InputPort(id="x"))
    n.parameters.append(Parameter(id="y", value=[0.5, -1.0, 2.0]))
    variadic = op in ("Mean", "Sum")  # the reference gives variadic ops every node value but "onnx_" ones
    if not variadic:
        n.parameters.append(Parameter(id="lo", value=-0.5))
    fid = "onnx_f" if variadic else "f"
    n.parameters.append(Parameter(id=fid, function=f"onnx::{op}", args=args))
    n.output_ports.append(OutputPort(id="out", value=fid))
    m = mdf_model(n)
    inputs = {"x": np.array([1.0, 2.0, -3.0], np.float32)}
    ref, _ = reference_step(reference_graph(m), None, dict(inputs))
    out = MDFSession(m, device=device).run(inputs=inputs)
    assert_same(out, ref, rtol=1e-6, atol=1e-7, where=op)


@pytest.mark.parametrize("batch", [None, 3])
def test_conditions_that_never_end_a_run_are_an_error(monkeypatch, batch):
    from gpuops.mdf import schedule

    monkeypatch.setattr(schedule, "MAX_STEPS", 500)
    never = ConditionSet(node_specific={"A": Condition("Never")})  # AllHaveRun (the default end) never holds
    with pytest.raises(ModelError, match="did not end the run within 500 time steps"):
        MDFSession(mdf_model(counter(), counter("B"), conditions=never), device="cpu", batch=batch)
    far = ConditionSet(termination={"environment_state_update": Condition(
        "Threshold", dependency="A", parameter="count", threshold=10 ** 9, comparator=">=")})
    s = MDFSession(mdf_model(counter(), conditions=far), device="cpu", batch=batch)
    with pytest.raises(ModelError, match="did not end the run within 500 time steps"):
        s.run()
