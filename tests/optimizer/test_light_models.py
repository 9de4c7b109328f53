"""The onnx package's light models: the optimizer folds their ConstantOfShape weights and their
BatchNormalizations and fuses their convolutions; unoptimized plans still give the stored outputs
(the conformance suite checks the default, optimized, plans); the optimized model saved by the
session loads in onnxruntime and gives onnxruntime's results on the original."""

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import gpuops
from gpuops.optimizer import optimize
from tests.conformance.harness import assert_close, device_guard
from tests.conformance.test_light_models import MODELS, _case, check_light_outputs, light_case

from .helpers import ops


@pytest.mark.parametrize("name", MODELS)
def test_light_model_optimized(name):
    model, feeds, expected, rtol, atol = _case(name)
    before, after = ops(model), ops(optimize(model))
    assert after["ConstantOfShape"] == 0 and after["Dropout"] == 0
    # BatchNormalizations fold into the Conv before them, or (densenet's after a Concat) become one
    assert after["BatchNormalization"] == 0 and after["FusedConv"] > 0
    convs = after["Conv"] + after["FusedConv"]
    assert before["Conv"] < convs < before["Conv"] + before["BatchNormalization"] if name == "densenet121" else \
        convs == before["Conv"]
    got = gpuops.InferenceSession(model, device="cpu", optimize="none").run(None, feeds)
    for out, g, e in zip(model.graph.output, got, expected):
        assert_close(g, e, rtol, atol, out.name)


def _ort(model_or_path, feeds):
    data = model_or_path.SerializeToString() if isinstance(model_or_path, onnx.ModelProto) else str(model_or_path)
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("name", ["squeezenet", "resnet50", "densenet121"])
def test_saved_optimized_model_runs_in_onnxruntime(name, tmp_path):
    model, feeds, expected, rtol, atol = _case(name)
    path = tmp_path / "opt.onnx"
    sess = gpuops.InferenceSession(model, device="cpu", optimized_model_path=path)
    saved = onnx.load(str(path))
    onnx.checker.check_model(saved)
    assert {o.domain for o in saved.opset_import} <= {"", "ai.onnx", "com.microsoft"}
    assert {n.domain for n in saved.graph.node} <= {"", "ai.onnx", "com.microsoft"}
    assert ops(saved)["FusedConv"] > 0
    want = _ort(model, feeds)
    for g, w, e in zip(_ort(path, feeds), want, sess.run(None, feeds)):
        assert_close(g, w, rtol, atol, "onnxruntime: optimized vs original")
        assert_close(e, w, rtol, atol, "gpuops vs onnxruntime")


def test_cli_save_optimized(tmp_path):
    path = tmp_path / "squeezenet.opt.onnx"
    r = subprocess.run([sys.executable, "-m", "gpuops", "run", "light:squeezenet", "--device", "cpu", "--repeat", "1",
                        "--save-optimized", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    saved = onnx.load(str(path))
    assert ops(saved)["ConstantOfShape"] == 0
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    inits = {t.name for t in saved.graph.initializer}
    feeds = {i.name: x for i in saved.graph.input if i.name not in inits}
    for g, w in zip(_ort(path, feeds), gpuops.InferenceSession(path, device="cpu", optimize="none").run(None, feeds)):
        assert_close(g, w, 1e-4, 1e-5)


def test_fewer_kernel_launches_on_the_cuda_path():
    """squeezenet on the CUDA path: the folded weights and fused convolutions launch fewer kernels
    (counted where the device counts them: the CPU stand-in of CuPy; on CuPy only the steps)."""
    case = light_case("squeezenet")  # its logits, within their float32 bound (the softmax is ill-conditioned)
    counts = {}
    for level in ("none", "all"):
        sess = gpuops.InferenceSession(case.model, device="cuda", optimize=level)
        with device_guard("cuda"):
            got = sess.run(None, case.feeds, profile=True)
        check_light_outputs(case, got)
        counts[level] = (len(sess.plan.steps), sess.last_profile["kernel_launches"])
    assert counts["all"][0] < counts["none"][0] / 2
    if counts["none"][1] is not None:
        assert counts["all"][1] < counts["none"][1], counts
