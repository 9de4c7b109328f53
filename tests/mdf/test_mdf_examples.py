"""The public MDF examples (vendored in ``tests/mdf/examples``) on cpu and cuda: EXPECTED.json, the README's
known results, and modeci-mdf's reference engine run side by side over several runs."""

import json

import numpy as np
import pytest

pytest.importorskip("modeci_mdf")

from gpuops.testing import cuda_standin  # noqa: E402
from gpuops.bench.mdf import examples_dir  # noqa: E402
from gpuops.device import uses_standin  # noqa: E402
from gpuops.errors import UnsupportedOpError  # noqa: E402
from gpuops.mdf import MDFSession  # noqa: E402

from .reference import assert_same, reference_graph, reference_step  # noqa: E402

EXAMPLES = examples_dir()
DEVICES = ["cpu", "cuda"]
EXPECTED = json.loads((EXAMPLES / "EXPECTED.json").read_text())

# every example the reference engine runs, with the time increments of the runs to compare
TIMED = {"States.json": 0.01, "NewtonCoolingModel.json": 0.1, "FN.mdf.json": 0.00005,
         "SwitchedRLC_Circuit.json": 0.001, "RNN/IAF_net.json": 0.1}
RUNNABLE = ["Simple.json", "ABCD.json", "Arrays.json", "ParametersFunctions.json", "abc_conditions.json",
            "conditions/threshold_condition.json", "conditions/everyncalls_condition.json",
            "conditions/timeinterval_condition.json", "conditions/Composite_mdf_condition.json",
            "ONNX/ab.json", "ONNX/abcd.json", "ONNX/abc_basic-mdf.json", "converted/mlp_pure_mdf.json",
            "converted/keras_to_MDF.json", "converted/simple_pytorch_to_mdf.json", "converted/inception.json",
            *TIMED]


def session(name, device):
    return MDFSession(EXAMPLES / name, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_expected_json(name, device):
    variants = [name] + ([name[:-5] + ".yaml"] if (EXAMPLES / (name[:-5] + ".yaml")).exists() else [])
    for variant in variants:
        out = session(variant, device).run()
        assert set(out) == set(EXPECTED[name]), variant
        for key, (shape, first, total) in EXPECTED[name].items():
            value = np.asarray(out[key])
            assert list(value.shape) == shape, (variant, key)
            np.testing.assert_allclose(value.ravel()[0], first, rtol=1e-6, atol=1e-9, err_msg=f"{variant} {key}")
            np.testing.assert_allclose(value.sum(), total, rtol=1e-6, atol=1e-9, err_msg=f"{variant} {key}")


@pytest.mark.parametrize("device", DEVICES)
def test_readme_values(device):
    assert float(session("Simple.json", device).run()["processing_node.output_1"]) == pytest.approx(0.6016871801828567)
    out = session("ABCD.yaml", device).run()
    assert float(out["B.out_port"]) == pytest.approx(0.99215, abs=1e-5)
    assert float(out["C.out_port"]) == pytest.approx(2014.22, abs=1e-2)
    assert float(out["D.out_port"]) == pytest.approx(-1.77375002392163, rel=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_readme_execution_orders(device):
    s = session("abc_conditions.json", device)
    s.run()
    t = s.execution_trace
    assert t[:9] == ["A", "A", "B", "A", "C", "A", "B", "A", "A"] and set(t[9:11]) == {"B", "C"} and t[11:] == ["A"]
    s = session("conditions/everyncalls_condition.json", device)
    s.run()
    assert s.execution_trace == list("AABAABAABC")
    s = session("conditions/timeinterval_condition.json", device)
    s.run()
    assert s.execution_trace == list("AAABABABABC")
    s = session("conditions/threshold_condition.json", device)
    assert float(s.run()["A.output_1"]) == 5
    assert s.execution_trace == ["A"] * 5


@pytest.mark.parametrize("device", DEVICES)
def test_states_update_parameters_one_after_another(device):
    s = session("States.json", device)
    first = s.run()
    assert float(first["sine_node.out_port"]) == 0 and float(first["counter_node.out_port"]) == 1
    level1 = float(s.run(time_increment=0.01)["sine_node.out_port"]) / 3
    level2 = float(s.run(time_increment=0.01)["sine_node.out_port"]) / 3
    assert level1 == pytest.approx(6.283185 / 0.4 * 0.01)  # level moves first, with the old rate (1)
    rate1 = (level2 - level1) / (6.283185 / 0.4 * 0.01)
    assert rate1 == pytest.approx(0.97533, abs=1e-5)  # rate then sees the new level


@pytest.mark.parametrize("device", DEVICES)
def test_many_steps(device):
    newton = session("NewtonCoolingModel.json", device)
    newton.run()
    for _ in range(500):
        out = newton.run(time_increment=0.1)
    assert float(out["cool_node.out_port"]) == pytest.approx(20 + 70 * (1 - 0.1 * 0.1) ** 500, rel=1e-9)
    rlc = session("SwitchedRLC_Circuit.json", device)
    rlc.run()
    volts = [float(rlc.run(time_increment=0.001)["V.V_out"]) for _ in range(1000)]
    assert max(abs(v) for v in volts[:499]) == 0 and max(volts) > 0.1  # switched on at t = 0.5
    fn = session("FN.mdf.json", device)
    fn.run()
    v = [float(fn.run(time_increment=0.00005)["FNpop_0.OUTPUT"]) for _ in range(2000)]
    assert min(v) < -1.5 and max(v) > 1.5 and all(abs(x) < 2.5 for x in v)  # a relaxation oscillation


def _actr(s, steps=30):
    goal, retrieval, n = {}, {}, 0
    while n < steps:
        out = s.run(inputs={"goal_input": goal, "dm_input": retrieval})
        n += 1
        if out["check_termination.check_output"]:
            return out, n
        goal = out["fire_production.fire_prod_output_to_goal"]
        retrieval = out["fire_production.fire_prod_output_to_retrieval"]
    raise AssertionError("no termination")


@pytest.mark.parametrize("device", DEVICES)
def test_actr(device):
    out, n = _actr(session("ACT-R/count.json", device))
    assert n == 5 and out["goal_buffer.goal_output"]["count"] == "four"
    out, n = _actr(session("ACT-R/addition.yaml", device))
    assert n == 7 and out["goal_buffer.goal_output"]["sum"] == "seven"


@pytest.mark.parametrize("device", DEVICES)
def test_onnx_loop_body_given_as_mdf_graph_is_a_clear_error(device):
    with pytest.raises(UnsupportedOpError, match="Loop_6.*body"):
        session("ONNX/abc.json", device)


# -- side by side with the reference engine ------------------------------------------------------

_REFERENCE: dict = {}


def _reference_runs(name):
    """The reference engine's outputs and orders for: one run, then (timed models) 30 steps, or
    (others) two more runs."""
    if name not in _REFERENCE:
        eg = reference_graph(EXAMPLES / name)
        dts = [None] + [TIMED[name]] * 30 if name in TIMED else [None] * 3
        if name == "converted/inception.json":
            dts = [None]
        _REFERENCE[name] = [(dt, *reference_step(eg, dt)) for dt in dts]
    return _REFERENCE[name]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", RUNNABLE)
def test_same_as_reference_engine(name, device):
    s = session(name, device)
    for i, (dt, ref, order) in enumerate(_reference_runs(name)):
        out = s.run(time_increment=dt)
        assert s.execution_trace == order, f"{name} run {i}"
        assert_same(out, ref, where=f"{name} run {i}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["ACT-R/count.json", "ACT-R/addition.json"])
def test_actr_same_as_reference_engine(name, device):
    eg, s = reference_graph(EXAMPLES / name), session(name, device)
    goal, retrieval = {}, {}
    for i in range(10):
        inputs = {"goal_input": goal, "dm_input": retrieval}
        ref, order = reference_step(eg, inputs=inputs)
        out = s.run(inputs=inputs)
        assert s.execution_trace == order
        # the reference's pattern matching writes "bindings" into the model's productions: compare without
        for key in ("procedural_memory.pm_output", "pattern_matching.pattern_output"):
            ref[key] = [{k: v for k, v in p.items() if k != "bindings"} for p in ref[key]]
            out[key] = [{k: v for k, v in p.items() if k != "bindings"} for p in out[key]]
        assert_same(out, ref, where=f"{name} run {i}")
        if out["check_termination.check_output"]:
            break
        goal = out["fire_production.fire_prod_output_to_goal"]
        retrieval = out["fire_production.fire_prod_output_to_retrieval"]
    assert out["check_termination.check_output"]


# -- values stay on the device ---------------------------------------------------------------------

@pytest.mark.skipif(not uses_standin(), reason="counts transfers of the CPU stand-in for CuPy")
@pytest.mark.parametrize("name", ["converted/mlp_pure_mdf.json", "converted/keras_to_MDF.json",
                                  "ONNX/abcd.json", "abc_conditions.json", "States.json"])
def test_values_stay_on_the_device(name):
    s = session(name, "cuda")
    d2h = cuda_standin.transfers["d2h"]
    with cuda_standin.strict():  # any implicit device -> host conversion raises
        for dt in (None, 0.01, 0.01):
            out = s.run(time_increment=dt, output_device="device")
    assert cuda_standin.transfers["d2h"] == d2h
    arrays = [v for v in out.values() if isinstance(v, cuda_standin.ndarray)]
    assert arrays and len(arrays) == len(out)
    host = s.run()
    assert all(isinstance(v, np.ndarray) for v in host.values())
