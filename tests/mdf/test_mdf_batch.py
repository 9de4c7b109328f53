"""Parameter overrides (``run(params=...)``) and batched sessions (``batch=N``): row i of a batched
session equals an unbatched session given row i's values, over many steps; overrides equal the
reference engine run on a model edited to hold the same values."""

import copy

import numpy as np
import pytest

pytest.importorskip("modeci_mdf")

from modeci_mdf.mdf import (Condition, ConditionSet, Edge, Function, InputPort, Node,  # noqa: E402
                            OutputPort, Parameter, ParameterCondition)

from gpuops.bench.mdf import examples_dir  # noqa: E402
from gpuops.errors import FeedError, GpuopsError, ModelError  # noqa: E402
from gpuops.mdf import MDFSession  # noqa: E402

from .reference import assert_same, mdf_model, reference_graph, reference_step  # noqa: E402
from .test_mdf_generated import ONNX_CASES, dynamics, random_dag, scheduled  # noqa: E402

DEVICES = ["cpu", "cuda"]
EXAMPLES = examples_dir()


# -- parameter overrides ---------------------------------------------------------------------------

def _param(model, nid, pid):
    node = next(n for n in model.graphs[0].nodes if n.id == nid)
    return next(p for p in node.parameters if p.id == pid)


@pytest.mark.parametrize("device", DEVICES)
def test_overrides_equal_the_reference_on_an_edited_model(device):
    model = dynamics(1)
    edited = copy.deepcopy(model)
    _param(edited, "dyn", "k").value = 1.7            # a value
    _param(edited, "dyn", "x").default_initial_value = -0.4   # a state with a time derivative
    eg = reference_graph(edited)
    s = MDFSession(model, device=device)
    for i, dt in enumerate([None] + [0.05] * 20):
        ref, _ = reference_step(eg, dt)
        out = s.run(time_increment=dt, params={"dyn.k": 1.7, "x": -0.4} if i == 0 else None)
        assert_same(out, ref, rtol=1e-9, atol=1e-12, where=f"run {i}")


@pytest.mark.parametrize("device", DEVICES)
def test_an_override_replaces_a_function_and_persists(device):
    model = dynamics(2)
    edited = copy.deepcopy(model)
    p = _param(edited, "dyn", "clipped")
    p.function, p.args, p.value = None, None, 0.25
    eg = reference_graph(edited)
    s = MDFSession(model, device=device)
    s.run(params={"dyn.clipped": 0.25})
    reference_step(eg)
    for i in range(3):
        ref, _ = reference_step(eg, 0.05)
        assert_same(s.run(time_increment=0.05), ref, rtol=1e-9, atol=1e-12, where=f"run {i}")


def test_a_bad_override_lists_the_parameters():
    s = MDFSession(dynamics(0), device="cpu")
    with pytest.raises(FeedError, match=r"params: 'dyn.nope' is not a parameter; the parameters are \['dyn.k', "):
        s.run(params={"dyn.nope": 1})
    with pytest.raises(FeedError, match="params must be a dict"):
        s.run(params=[1])


# -- batched sessions --------------------------------------------------------------------------------

def rows_match(model, n, device, dts, params=None, inputs=None, rtol=1e-10, atol=1e-12):
    """Run a batched session and n unbatched ones side by side; ``params``/``inputs`` (given on the
    first run) hold arrays with a leading axis of n or shared values."""
    params, inputs = params or {}, inputs or {}
    batched = MDFSession(model, device=device, batch=n)
    singles = [MDFSession(model, device=device) for _ in range(n)]

    def row(values, i):
        return {k: v[i] if isinstance(v, np.ndarray) and v.shape[:1] == (n,) else v for k, v in values.items()}

    for step, dt in enumerate(dts):
        first = step == 0
        out = batched.run(time_increment=dt, params=params if first else None, inputs=inputs if first else None)
        for i, s in enumerate(singles):
            want = s.run(time_increment=dt, params=row(params, i) if first else None,
                         inputs=row(inputs, i) if first else None)
            assert set(out) >= set(want)
            for key in set(out) - set(want):  # a node that has not run in this row: NaN there
                assert np.isnan(out[key][i]).all(), key
            for key, value in want.items():
                parts = zip(out[key], value) if isinstance(value, tuple) else [(out[key], value)]
                for got, part in parts:  # (several ONNX outputs: each has the row axis)
                    assert got.shape == (n, *np.shape(part)), (key, got.shape, np.shape(part))
                    np.testing.assert_allclose(got[i], part, rtol=rtol, atol=atol, err_msg=f"step {step} row {i} {key}")
            trace = batched.execution_trace  # one per row where conditions read values
            assert (trace[i] if trace and isinstance(trace[0], list) else trace) == s.execution_trace
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_examples_with_time_derivatives(device):
    rng = np.random.default_rng(0)
    n = 5
    rows_match(EXAMPLES / "FN.mdf.json", n, device, [None] + [0.00005] * 60,
               params={"FNpop_0.Iext": rng.uniform(0, 1, n), "a_v": rng.uniform(-1.5, -0.5, n)})
    rows_match(EXAMPLES / "States.json", n, device, [None] + [0.01] * 40,
               params={"amp": rng.uniform(1, 3, n), "sine_node.period": rng.uniform(0.2, 1, n)})
    rows_match(EXAMPLES / "NewtonCoolingModel.json", n, device, [None] + [0.1] * 40,
               params={"cooling_coeff": rng.uniform(0.05, 0.2, n), "T_a": 20.0})
    # integrate-and-fire neurons: spikes and resets are parameter conditions, which differ per row
    rows_match(EXAMPLES / "RNN" / "IAF_net.json", n, device, [None] + [0.1] * 100,
               params={"tau": rng.uniform(5, 15, n), "amplitude": rng.uniform(0, 20, (n, 8))})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(3))
def test_state_conditions_and_functions_per_row(seed, device):
    n = 6
    rng = np.random.default_rng(seed)
    # x's initial value spans both parameter conditions (x > 0.5, x < -0.5) across rows
    rows_match(dynamics(seed), n, device, [None] + [0.05] * 30,
               params={"dyn.k": rng.uniform(0.2, 2, n), "x": np.linspace(-1, 1, n)},
               inputs={"drive": rng.uniform(-1, 1, n)})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(4))
def test_weighted_edges_port_reduce_and_standard_functions(seed, device):
    n = 4
    rows_match(random_dag(seed), n, device, [None] * 3, params={"n0.level": np.linspace(-1, 1, n)})


def array_model():
    src = Node(id="src")
    src.parameters.append(Parameter(id="x", value=[[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]]))
    src.parameters.append(Parameter(id="gain", value=1.0))
    src.output_ports.append(OutputPort(id="out", value="x * gain"))
    n = Node(id="n")
    n.input_ports.append(InputPort(id="inp", shape=(2, 3)))
    n.parameters.extend([
        Parameter(id="W", value=[[1.0, 0.0], [0.5, -1.0], [2.0, 1.0]]),
        Parameter(id="h", value="numpy.maximum(inp @ W, 0) + math.pi"),
        Parameter(id="s", value="numpy.sum(h * h) / 2 if numpy.sum(h) > 4 else -1"),
        Parameter(id="row", value="inp[1]"),
        Parameter(id="col", value="numpy.mean(inp, axis=0) + max(inp[0, 0], inp[1, 2]) + sum(inp)[1]"),
        Parameter(id="both", value="(inp[0, 0] > 0) and inp[0, 1] or -5"),
        Parameter(id="band", value="0 < inp[0, 0] < 1"),
        Parameter(id="t", value="numpy.tanh(inp) * numpy.exp(-abs(inp))"),
        Parameter(id="lst", value="[inp[0, 0], 2.0, numpy.min(inp)]"),
        Parameter(id="sorted", value="numpy.transpose(inp)"),
    ])
    n.functions.extend([
        Function(id="g", function="logistic", args={"variable0": "t", "gain": 2, "bias": 0, "offset": 0}),
        Function(id="gv", value="A * B - inp", args={"A": "g", "B": 3}),
    ])
    n.output_ports.extend([OutputPort(id=o, value=o) for o in
                           ("h", "s", "row", "col", "both", "band", "t", "gv", "lst", "sorted")])
    n.output_ports.append(OutputPort(id="first", value="h[0, 1] + row[2]"))
    return mdf_model(src, n, edges=[Edge(id="e", sender="src", receiver="n", sender_port="out",
                                         receiver_port="inp", parameters={"weight": [[1, 2, 3], [0.5, 0.5, 0.5]]})])


@pytest.mark.parametrize("device", DEVICES)
def test_array_expressions_per_row(device):
    n = 5
    rows_match(array_model(), n, device, [None] * 2, params={"src.gain": np.linspace(-1.5, 2, n)})
    x = np.random.default_rng(1).normal(size=(n, 2, 3))
    rows_match(array_model(), n, device, [None] * 2, params={"src.x": x})


ROW_ONNX = ["Add", "Mul", "Div", "Relu", "Sigmoid", "LeakyRelu", "MatMul", "Gemm", "Transpose", "Reshape",
            "Concat", "Sum", "Mean", "ReduceMean", "ArgMax", "Clip", "Where", "Greater", "Softmax", "TopK",
            "Conv", "Slice", "Cast", "Shape"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op,args,params", [c for c in ONNX_CASES if c[0] in ROW_ONNX],
                         ids=[c[0] for c in ONNX_CASES if c[0] in ROW_ONNX])
def test_onnx_functions_per_row(op, args, params, device):
    n = 3
    node = Node(id="n")
    node.parameters.append(Parameter(id="x", value=[[0.5, -1.25, 2.0], [1.5, 0.25, -0.75]]))
    node.parameters.append(Parameter(id="y", value=[[1.0, 2.0, -3.0], [0.5, 0.5, 4.0]]))
    node.parameters.extend(Parameter(id=k, value=v) for k, v in params.items())
    fid = f"onnx_{op}" if any(v.startswith("[") for v in args.values() if isinstance(v, str)) else "f"
    node.parameters.append(Parameter(id=fid, function=f"onnx::{op}", args=args))
    node.output_ports.append(OutputPort(id="out", value=fid))
    x = np.random.default_rng(2).normal(size=(n, 2, 3))
    batched = {"n.x": x}
    if "x4" in params:
        batched = {"n.x4": np.random.default_rng(3).normal(size=(n, *np.shape(params["x4"])))}
    rows_match(mdf_model(node), n, device, [None] * 2, params=batched, rtol=1e-6, atol=1e-7)


def counters(ids="ABC"):
    nodes = []
    for i, nid in enumerate(ids):
        nd = Node(id=nid)
        if i:
            nd.input_ports.append(InputPort(id="inp"))
        nd.parameters.append(Parameter(id="rate", value=1.0))
        nd.parameters.append(Parameter(id="count", value="count + rate" + (" + inp" if i else ""),
                                       default_initial_value=0))
        nd.output_ports.append(OutputPort(id="out", value="count"))
        nodes.append(nd)
    edges = [Edge(id=f"e{i}", sender=ids[i - 1], receiver=ids[i], sender_port="out", receiver_port="inp",
                  parameters={"weight": 0.5}) for i in range(1, len(ids))]
    return nodes, edges


@pytest.mark.parametrize("device", DEVICES)
def test_conditions_that_read_no_values_batch(device):
    nodes, edges = counters()
    conditions = ConditionSet(
        node_specific={"B": Condition("EveryNCalls", dependencies="A", n=2),
                       "C": Condition("Any", dependencies=[Condition("AfterNCalls", dependencies="B", n=2),
                                                          Condition("AtPass", n=1)])},
        termination={"environment_state_update": Condition("AfterNCalls", dependencies="C", n=2)})
    rows_match(mdf_model(*nodes, edges=edges, conditions=conditions), 4, device, [None] * 3,
               params={"A.rate": np.array([1.0, 2.0, -1.0, 0.5])})


def _numeric_params(path):
    """Every parameter of the model with a constant float value: (key, value)."""
    s = MDFSession(path, device="cpu")
    out = []
    for nid, node in s._nodes.items():
        for p in node.params:
            v = p.known()
            if p.call is None and p.td is None and isinstance(v, float):  # (ints are often ONNX attributes)
                out.append((f"{nid}.{p.id}", float(v)))
    return out


EVERY = {"Simple.json": None, "ABCD.json": None, "Arrays.json": None, "abc_conditions.json": None,
         "conditions/threshold_condition.json": None, "conditions/everyncalls_condition.json": None,
         "conditions/timeinterval_condition.json": None, "conditions/Composite_mdf_condition.json": None,
         "ONNX/ab.json": None, "ONNX/abcd.json": None, "ONNX/abc_basic-mdf.json": None,
         "converted/simple_pytorch_to_mdf.json": None, "converted/keras_to_MDF.json": None,
         "States.json": 0.01, "NewtonCoolingModel.json": 0.1, "SwitchedRLC_Circuit.json": 0.001}


@pytest.mark.parametrize("name", sorted(EVERY))
def test_every_example_batches(name):
    """Each (non-ACT-R) example with its numeric parameters scaled differently in each row."""
    n, dt = 3, EVERY[name]
    params = {k: v * np.array([1.0, 0.5, 1.25]) for k, v in _numeric_params(EXAMPLES / name)[:4]}
    rows_match(EXAMPLES / name, n, "cpu", [None] + [dt] * 5 if dt else [None] * 2, params=params,
               rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_conditions_that_read_values_fire_per_row(device):
    ex = EXAMPLES / "conditions" / "threshold_condition.json"
    rows_match(ex, 4, device, [None] * 3, params={"A.param_A": np.array([0, 2, 7, -3])})
    s = MDFSession(ex, device=device, batch=2)
    s.run(params={"param_A": np.array([0, 3])})
    assert s.execution_trace == [["A"] * 5, ["A"] * 2]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", range(6))
def test_scheduled_graphs_with_thresholds_per_row(seed, device):
    model = scheduled(seed)  # graph-scheduler conditions, a Threshold among the termination conditions
    first = model.graphs[0].nodes[0].id
    rows_match(model, 4, device, [None] * 3, params={f"{first}.count": np.array([0, 3, 5, -2])})


def test_batch_refusals_are_clear():
    with pytest.raises(ModelError, match="ACT-R functions .* cannot be batched"):
        MDFSession(EXAMPLES / "ACT-R" / "count.json", device="cpu", batch=4)
    for bad in (0, -3, 2.5, True, "4"):
        with pytest.raises(GpuopsError, match="batch must be a positive integer"):
            MDFSession(EXAMPLES / "Simple.json", device="cpu", batch=bad)
    n = Node(id="n")
    n.parameters.append(Parameter(id="c", value="c + 1", default_initial_value=0))
    n.output_ports.append(OutputPort(id="out", value="c"))
    conditions = ConditionSet(termination={"environment_state_update": Condition("NWhen", condition=Condition(
        "Threshold", dependency="n", parameter="c", threshold=3, comparator=">="), n=1)})
    with pytest.raises(ModelError, match="cannot evaluate per row"):
        MDFSession(mdf_model(n, conditions=conditions), device="cpu", batch=2)


@pytest.mark.parametrize("device", DEVICES)
def test_onnx_inputs_that_are_a_number_per_row(device):
    n = Node(id="n")
    n.parameters.append(Parameter(id="x", value=[[0.5, -1.0, 2.0], [1.0, 0.0, -2.0]]))
    n.parameters.append(Parameter(id="s", value=0.5))
    n.parameters.append(Parameter(id="lo", value=-0.5))
    for fid, op, args in [("ss", "Add", {"A": "s", "B": "s"}), ("xs", "Mul", {"A": "x", "B": "s"}),
                          ("c", "Clip", {"input": "x", "min": "lo", "max": 1.5}), ("e", "Exp", {"input": "s"})]:
        n.parameters.append(Parameter(id=fid, function=f"onnx::{op}", args=args))
        n.output_ports.append(OutputPort(id=fid, value=fid))
    rows_match(mdf_model(n), 3, device, [None], params={"s": np.array([0.5, -2.0, 3.0]),
                                                        "lo": np.array([-0.5, 0.25, 1.0])})


@pytest.mark.parametrize("device", DEVICES)
def test_onnx_attributes_per_row(device):
    n = Node(id="n")
    n.parameters.append(Parameter(id="x", value=[[0.5, -1.0, 2.0], [1.0, 0.0, -2.0]]))
    n.parameters.append(Parameter(id="axis", value=0))
    n.parameters.append(Parameter(id="alpha", value=0.1))
    n.parameters.append(Parameter(id="f", function="onnx::Softmax", args={"input": "x"}))
    n.parameters.append(Parameter(id="g", function="onnx::LeakyRelu", args={"X": "x"}))
    n.output_ports.extend([OutputPort(id="out", value="f"), OutputPort(id="g", value="g")])
    rows_match(mdf_model(n), 3, device, [None], params={"n.axis": np.array([0, 1, -1]),
                                                        "n.alpha": np.array([0.1, 0.5, 2.0])})


@pytest.mark.parametrize("device", DEVICES)
def test_per_row_indices_and_casts(device):
    n = Node(id="n")
    n.parameters.append(Parameter(id="x", value=[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    n.parameters.append(Parameter(id="i", value=0))
    n.parameters.append(Parameter(id="v", value=0.5))
    n.output_ports.extend([OutputPort(id="a", value="x[1, i]"), OutputPort(id="b", value="x[i % 2][i]"),
                           OutputPort(id="c", value="int(v * 3) + float(i) + len(x)")])
    rows_match(mdf_model(n), 3, device, [None], params={"n.i": np.array([0, 2, 1]), "v": np.array([0.1, 0.7, 1.5])})


@pytest.mark.parametrize("device", DEVICES)
def test_unbatched_values_broadcast_and_outputs_carry_the_row_axis(device):
    s = MDFSession(EXAMPLES / "Simple.json", device=device, batch=3)
    want = MDFSession(EXAMPLES / "Simple.json", device=device).run()
    out = s.run()
    for key, value in want.items():
        assert out[key].shape == (3, *np.shape(value))
        np.testing.assert_array_equal(out[key], np.broadcast_to(value, out[key].shape))
    conditioned = ParameterCondition(id="c", test="v > 0", value="v * 2")
    nd = Node(id="n")
    nd.parameters.append(Parameter(id="v", value=1.0))
    nd.parameters.append(Parameter(id="w", value=0.0, conditions=[conditioned]))
    nd.output_ports.append(OutputPort(id="out", value="w"))
    rows_match(mdf_model(nd), 4, device, [None, None], params={"v": np.array([-1.0, 0.0, 0.5, 3.0])})
