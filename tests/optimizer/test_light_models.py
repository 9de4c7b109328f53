"""The onnx package's light models: the optimizer folds their ConstantOfShape weights and their
BatchNormalizations and fuses their convolutions; unoptimized plans still give the stored outputs
(the conformance suite checks the default, optimized, plans); the optimized model saved by the
session loads in onnxruntime and gives onnxruntime's results on the original. Outputs are compared
with their logits, within float32 bounds (:func:`gpuops.selftest.compare_outputs`): the softmax of the
constant-weight models' huge, equal logits turns on the last bit of each, which differs between BLAS
kernels (OpenBLAS's Haswell and SkylakeX ones)."""

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import gpuops
from gpuops import selftest
from gpuops.optimizer import optimize
from tests.conformance.harness import device_guard
from tests.ort_versions import ort_older_than
from tests.conformance.test_light_models import MODELS, _case, check_light_outputs, light_case

from .helpers import ops


@pytest.mark.parametrize("name", MODELS)
def test_light_model_optimized(name):
    model = _case(name)[0]
    before, after = ops(model), ops(optimize(model))
    assert after["ConstantOfShape"] == 0 and after["Dropout"] == 0
    # BatchNormalizations fold into the Conv before them, or (densenet's after a Concat) become one
    assert after["BatchNormalization"] == 0 and after["FusedConv"] > 0
    convs = after["Conv"] + after["FusedConv"]
    assert before["Conv"] < convs < before["Conv"] + before["BatchNormalization"] if name == "densenet121" else \
        convs == before["Conv"]
    case = light_case(name)
    check_light_outputs(case, gpuops.InferenceSession(case.model, device="cpu", optimize="none").run(None, case.feeds))


def _ort(model_or_path, feeds):
    data = model_or_path.SerializeToString() if isinstance(model_or_path, onnx.ModelProto) else str(model_or_path)
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)


def _agree(names, got, want, tolerances, softmax, what):
    bad = [f"{o['name']}: {o.get('error')}" for o in selftest.compare_outputs(names, got, want, tolerances, softmax)
           if not o["ok"]]
    assert not bad, f"{what}: " + "; ".join(bad)


@pytest.mark.parametrize("name", ["squeezenet", "resnet50", "densenet121"])
def test_saved_optimized_model_runs_in_onnxruntime(name, tmp_path):
    model, feeds, *_ = _case(name)
    path = tmp_path / "opt.onnx"
    gpuops.InferenceSession(model, device="cpu", optimized_model_path=path)
    saved = onnx.load(str(path))
    onnx.checker.check_model(saved)
    assert {o.domain for o in saved.opset_import} <= {"", "ai.onnx", "com.microsoft"}
    assert {n.domain for n in saved.graph.node} <= {"", "ai.onnx", "com.microsoft"}
    assert ops(saved)["FusedConv"] > 0
    case = light_case(name)  # the original's outputs and logits, by onnxruntime; the saved model's logits too
    inner = selftest.with_inner_outputs(saved)
    assert len(inner.graph.output) == len(case.names)
    if not ort_older_than("1.24"):  # 1.23's NCHWc rewrite of FusedConv with a residual input (Z) computes
        # other values (ResNet-50's logits 8% apart; a one-node FusedConv with Z fails there: "output and sum shape
        # must match"); 1.32 agrees within the bound
        _agree(case.names, _ort(inner, feeds), case.oracle, case.tolerances, case.softmax,
               "onnxruntime: optimized vs original")
    check_light_outputs(case, gpuops.InferenceSession(case.model, device="cpu").run(None, case.feeds))


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
    model = selftest.with_inner_outputs(saved)  # the logits too
    names = [o.name for o in model.graph.output]
    tolerances, _ = selftest.output_tolerances(model)
    _agree(names, gpuops.InferenceSession(model, device="cpu", optimize="none").run(None, feeds), _ort(model, feeds),
           tolerances, selftest.softmax_outputs(model), "gpuops vs onnxruntime on the saved model")


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
