"""The executor's per-step input lookup (``gpuops.executor.run._lookup``): nodes whose shape-like inputs
are constants (a Squeeze's axes, a Slice's bounds, a Reshape's target) read their inputs by a bound lookup
instead of the general gather; a shape-like input computed at run time still goes through the gather,
which moves it to the host. Results match onnxruntime either way."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops
from gpuops.executor.run import _code
from tests.conformance.harness import device_guard
from tests.ops.common import DEVICES, make_model, run_ort


def _model():
    nodes = [helper.make_node("Unsqueeze", ["x", "ax0"], ["u"]),
             helper.make_node("Slice", ["u", "starts", "ends", "ax2"], ["s"]),
             helper.make_node("Reshape", ["s", "shape"], ["r"]),
             helper.make_node("Shape", ["s"], ["target"]),  # a computed shape-like input
             helper.make_node("Reshape", ["r", "target"], ["y"], name="computed_target"),
             helper.make_node("Add", ["y", "y"], ["z"])]
    inits = [("ax0", np.array([0], np.int64)), ("starts", np.array([1], np.int64)),
             ("ends", np.array([5], np.int64)), ("ax2", np.array([2], np.int64)),
             ("shape", np.array([-1], np.int64))]
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    out = [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)]
    return make_model(nodes, {"x": x}, out, inits=inits, opset=13), {"x": x}


@pytest.mark.parametrize("device", DEVICES)
def test_constant_shape_inputs_are_bound_and_computed_ones_gathered(device):
    model, feeds = _model()
    sess = gpuops.InferenceSession(model, device=device, optimize="none")
    bound = {c.step.name or c.step.op_type: c.lookup is not None for c in _code(sess.plan)}
    assert bound["computed_target"] is False  # its target comes from Shape: gathered, moved to the host
    assert sum(bound.values()) == len(bound) - 1
    with device_guard(device):
        (got,) = sess.run(None, feeds)
    (want,) = run_ort(model, feeds)
    np.testing.assert_array_equal(got, want)
