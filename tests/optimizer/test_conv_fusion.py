"""Conv + Add(residual) + activation -> com.microsoft FusedConv."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops
from gpuops.optimizer import optimize

from ..ort_versions import ORT_VERSION, ort_older_than, requires_ort
from .helpers import DEVICES, check, make_model, ops

rng = np.random.default_rng(0)
F = TensorProto.FLOAT
ACTIVATIONS = [("Relu", {}), ("LeakyRelu", {"alpha": 0.2}), ("Sigmoid", {}), ("Tanh", {}),
               ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("HardSwish", {}), ("Clip", None)]


def _model(residual: bool, act, bias=True):
    X, W, B = (rng.standard_normal(s).astype(np.float32) for s in ((1, 3, 6, 6), (4, 3, 3, 3), (4,)))
    Z = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["X", "W", "B"] if bias else ["X", "W"], ["c"], pads=[1, 1, 1, 1])]
    y, inits = "c", [("W", W), ("B", B), ("lo", np.float32(-0.5)), ("hi", np.float32(0.5))]
    if residual:
        nodes.append(helper.make_node("Add", ["Z", y], ["s"]))
        y = "s"
    if act is not None:
        name, attrs = act
        inputs = [y, "lo", "hi"] if name == "Clip" else [y]
        nodes.append(helper.make_node(name, inputs, ["Y"], **(attrs or {})))
    else:
        nodes[-1].output[0] = "Y"
    feeds = {"X": X, "Z": Z} if residual else {"X": X}
    return make_model(nodes, feeds, [helper.make_tensor_value_info("Y", F, None)], inits=inits), feeds


@pytest.mark.parametrize("act", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
@pytest.mark.parametrize("residual", [True, False])
def test_conv_activation_fused(act, residual):
    if ort_older_than("1.24") and residual:
        pytest.skip(f"onnxruntime {ORT_VERSION} < 1.24: its NCHWc Conv fails on FusedConv's residual input "
                    "('Compute output and sum shape must match')")
    if ort_older_than("1.24") and act[0] == "HardSwish":
        pytest.skip(f"onnxruntime {ORT_VERSION} < 1.24: its FusedConv kernel has no HardSwish activation")
    m, feeds = _model(residual, act)
    opt = check(m, feeds, gone=["Conv", act[0], "Add"], present=["FusedConv"], atol=1e-5)
    assert len(opt.graph.node) == 1


@requires_ort("1.24", "its NCHWc Conv fails on FusedConv's residual input ('Compute output and sum shape must match')")
def test_conv_residual_without_bias():
    m, feeds = _model(True, None, bias=False)
    check(m, feeds, gone=["Conv", "Add"], present=["FusedConv"])


def test_basic_level_keeps_ai_onnx():
    m, _ = _model(True, ACTIVATIONS[0])
    assert set(ops(optimize(m, "basic"))) == {"Conv", "Add", "Relu"}


def test_broadcast_residual_not_fused():
    """Z must have the conv output's exact shape (FusedConv adds it elementwise, unbroadcast)."""
    m, feeds = _model(True, ACTIVATIONS[0])
    feeds["Z"] = feeds["Z"][:, :, :1, :1].copy()
    m.graph.input[1].CopyFrom(helper.make_tensor_value_info("Z", F, [1, 4, 1, 1]))
    check(m, feeds, kept=["Conv", "Add", "Relu"], gone=["FusedConv"])


def test_fusion_reduces_steps_and_kernel_launches():
    """Fewer plan steps on both devices, and fewer kernel launches per run on the CUDA path (counted
    by the profile where the device counts them: the CPU stand-in of CuPy)."""
    m, feeds = _model(True, ACTIVATIONS[0])
    launches = {}
    for level in ("none", "all"):
        for device in DEVICES:
            sess = gpuops.InferenceSession(m, device=device, optimize=level)
            assert len(sess.plan.steps) == (3 if level == "none" else 1)
            sess.run(None, feeds, profile=True)
            if device == "cuda":
                launches[level] = sess.last_profile["kernel_launches"]
    if launches["none"] is not None:
        assert launches["all"] < launches["none"], launches
