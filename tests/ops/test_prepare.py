"""The ``prepare`` hook of the registry (onnxruntime's PrePack): called once per session, when its
weights are on the device, with the node's constant inputs (initializers no feed may replace, an
enclosing graph's included) and attributes; its result reaches the op as ``prepared=`` on every run
and nowhere else; a model cannot set it as an attribute; closing the session drops it. And the CPU
overrides resolve as the CUDA ones do, the generic op staying their fallback."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops
from gpuops import registry
from gpuops.errors import ModelError

from .common import make_model

DOMAIN = "test.prepare"
CALLS = []  # (constants, attrs) per prepare call
SEEN = []  # prepared per op call


def _prepare(constants, attrs):
    CALLS.append((dict(constants), dict(attrs)))
    if not constants:
        return None
    return {"sum": {i: float(np.sum(a)) for i, a in constants.items()}}


@registry.op("Scaled", domain=DOMAIN, since=1, prepare=_prepare)
def Scaled(xp, X, W=None, *, alpha=1.0, prepared=None):
    SEEN.append(prepared)
    return X * alpha + (0 if W is None else xp.sum(W))


@pytest.fixture(autouse=True)
def _clear():
    CALLS.clear()
    SEEN.clear()


def _model(node, x, inits=(), inputs=None):
    return make_model(node, inputs or {"x": x}, inits=inits, opsets={DOMAIN: 1})


def test_prepare_runs_once_per_session_and_its_result_reaches_every_run():
    x, w = np.ones((2, 3), np.float32), np.arange(4, dtype=np.float32)
    node = helper.make_node("Scaled", ["x", "w"], ["y"], domain=DOMAIN, alpha=2.0)
    session = gpuops.InferenceSession(_model(node, x, [("w", w)]), device="cpu", optimize="none")
    assert len(CALLS) == 1
    (constants, attrs), = CALLS
    assert list(constants) == [1] and constants[1] is session.plan.weights["w"] and attrs == {"alpha": 2.0}
    for _ in range(3):
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], x * 2 + 6)
    assert len(CALLS) == 1 and SEEN == [{"sum": {1: 6.0}}] * 3
    (step,) = session.plan.steps
    assert step.prepared is SEEN[0] and step.attrs == {"alpha": 2.0, "prepared": SEEN[0]}
    session.close()
    assert step.prepared is None and step.attrs == {"alpha": 2.0}


def test_nothing_is_passed_without_constants_or_for_a_feedable_initializer():
    x, w = np.ones((2, 3), np.float32), np.arange(4, dtype=np.float32)
    node = helper.make_node("Scaled", ["x", "w"], ["y"], domain=DOMAIN)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
              helper.make_tensor_value_info("w", TensorProto.FLOAT, [4])]  # w is also a graph input
    session = gpuops.InferenceSession(_model(node, x, [("w", w)], inputs), device="cpu", optimize="none")
    assert CALLS == [({}, {})]
    np.testing.assert_array_equal(session.run(None, {"x": x, "w": w * 0})[0], x)
    assert SEEN == [None] and "prepared" not in session.plan.steps[0].attrs


def test_a_subgraph_step_sees_the_enclosing_graphs_constants():
    x, w = np.ones((2, 3), np.float32), np.arange(4, dtype=np.float32)
    body = helper.make_graph([helper.make_node("Scaled", ["x", "w"], ["z"], domain=DOMAIN)], "then", [],
                             [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["z2"])], "else", [],
                              [helper.make_tensor_value_info("z2", TensorProto.FLOAT, None)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=other)
    session = gpuops.InferenceSession(_model(node, x, [("w", w), ("c", np.array(True))]), device="cpu",
                                      optimize="none")
    (constants, _), = CALLS
    assert list(constants) == [1] and constants[1] is session.plan.weights["w"]
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], x + 6)
    assert SEEN == [{"sum": {1: 6.0}}]


def test_a_model_cannot_set_prepared():
    x = np.ones((2, 3), np.float32)
    node = helper.make_node("Scaled", ["x"], ["y"], domain=DOMAIN, prepared=1)
    with pytest.raises(ModelError, match="unknown attribute"):
        gpuops.InferenceSession(_model(node, x), device="cpu", optimize="none")


def test_an_op_with_prepare_takes_prepared():
    with pytest.raises(TypeError, match="prepared="):
        registry.op("NoPrepared", domain=DOMAIN, since=1, prepare=_prepare)(lambda xp, X: X)


def _broken(constants, attrs):
    raise ValueError("bad weight")


registry.op("Broken", domain=DOMAIN, since=1, prepare=_broken)(lambda xp, X, W, *, prepared=None: X)


def test_a_failing_prepare_names_the_node():
    x = np.ones((2, 3), np.float32)
    node = helper.make_node("Broken", ["x", "w"], ["y"], domain=DOMAIN, name="the_node")
    with pytest.raises(ModelError, match="the_node.*bad weight"):
        gpuops.InferenceSession(_model(node, x, [("w", x)]), device="cpu", optimize="none")


def test_cpu_overrides_resolve_like_cuda_ones():
    """A CPU session gets the CPU override (at each generic version), device=None the generic op."""
    for op_type, opset in (("Conv", 1), ("Conv", 22), ("Softmax", 11), ("Softmax", 13), ("LSTM", 14)):
        cpu = registry.resolve("", op_type, opset, "cpu")
        generic = registry.resolve("", op_type, opset, None)
        assert cpu.device == "cpu" and generic.device is None and cpu.since >= generic.since
        assert cpu.attributes == generic.attributes  # the same attributes: prepared= is no attribute
    assert registry.resolve("", "Relu", 14, "cpu").device is None  # no override: the generic op
