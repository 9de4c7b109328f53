"""``gpuops selftest``: its report on this machine's CUDA path (the CPU stand-in in CI, real CuPy on a
GPU), and a non-zero exit whenever a kernel or a model disagrees with its reference."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import helper

from gpuops import device as _device
from gpuops import kernels, selftest
from gpuops.cli import main
from gpuops.ops.cuda import conv as cuda_conv
from gpuops.ops.cuda import detection as cuda_detection
from tests.ops.common import make_model


def _selftest(capsys, *args) -> tuple[int, dict]:
    rc = main(["selftest", "--json", *args])
    return rc, json.loads(capsys.readouterr().out)


def test_selftest_checks_every_kernel_family_and_a_light_model():
    """The command as a user runs it, in a fresh process (with the small model: resnet50 takes a
    minute on the CPU stand-in)."""
    r = subprocess.run([sys.executable, "-m", "gpuops", "selftest", "--device", "cuda", "--json", "--quick"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = json.loads(r.stdout)
    assert report["ok"] and report["failures"] == []
    env = report["environment"]
    assert env["device"] == "cuda:0" and env["standin"] == _device.uses_standin()
    assert [g["name"] for g in env["gpus"]][:1] == ["cuda:0"]
    if not _device.uses_standin():
        for key in ("cupy", "cuda_runtime", "cuda_driver", "nvrtc"):
            assert not str(env[key]).startswith("unavailable"), (key, env[key])

    families = {f["family"]: f for f in report["kernels"]}
    assert list(families) == ["cupy", *selftest.FAMILIES]
    for name, file in selftest.FAMILIES.items():
        fam = families[name]
        assert fam["ok"] and fam["file"] == file and fam["instantiations"] == len(kernels.NAME_EXPRESSIONS[file])
        cases = [c.name for c in selftest.KERNEL_CASES if c.family == name]
        assert [c["name"] for c in fam["cases"]] == cases and len(cases) >= 3
        for c in fam["cases"]:
            assert c["ok"] and c["max_abs_diff"] <= 1e-2
        assert all(file in c["kernels"] for c in fam["cases"] if "empty" not in c["name"] and "no-boxes" not in c["name"])

    (model,) = report["models"]
    assert model["model"] == "light:squeezenet" and model["ok"]
    assert model["outputs"] == ["softmaxout_1", "r65"]  # and the logits before the softmax
    runs = {r["name"]: r for r in model["runs"]}
    assert list(runs) == ["cpu", "cuda", "cuda_graph"]
    assert runs["cpu"]["against"] == "onnx reference evaluator"
    assert runs["cuda"]["against"] == runs["cuda_graph"]["against"] == "cpu"
    for run in runs.values():  # relative errors, within the float32 bound (7e-4 for squeezenet)
        logits = {o["name"]: o for o in run["outputs"]}["r65"]
        assert logits["ok"] and logits["rel_err"] <= logits["tolerance"] == model["tolerances"]["r65"]
        assert 1e-4 < logits["tolerance"] < 1e-3 and run["max_rel_err"] <= run["tolerance"]
    # a light model needs no host sync between upload and download, and captures as one graph
    assert runs["cuda"]["host_syncs"] == 0 and runs["cuda"]["sync_nodes"] == []
    assert runs["cuda_graph"]["graph"] == {"captured": True, "blocking_node": None, "reason": None}


def test_the_default_model_is_resnet50(monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(selftest, "run", lambda device, model, **kw: seen.append((device, model)) or
                        {"ok": True, "environment": {}, "failures": [], "notes": []})
    for args in ([], ["--quick"], ["--model", "none"], ["--model", "x.onnx", "--device", "cpu"]):
        assert main(["selftest", "--json", *args]) == 0
    assert seen == [("auto", "light:resnet50"), ("auto", "light:squeezenet"), ("auto", None), ("cpu", "x.onnx")]


@pytest.fixture(scope="module")
def small_cnn(tmp_path_factory):
    """A small CNN (convolution, depthwise convolution with bias, Relu, pooling) as an .onnx file."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], group=8, strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["c2"], ["y"])]
    inits = [("w1", rng.standard_normal((8, 3, 3, 3)).astype(np.float32)),
             ("w2", rng.standard_normal((8, 1, 3, 3)).astype(np.float32)),
             ("b2", rng.standard_normal(8).astype(np.float32))]
    model = make_model(nodes, {"x": np.zeros((1, 3, 12, 12), np.float32)}, ["y"], inits=inits, opset=17)
    path = tmp_path_factory.mktemp("selftest") / "small_cnn.onnx"
    onnx.save(model, str(path))
    return str(path)


def test_text_report_and_cpu_device(capsys):
    assert main(["selftest", "--device", "cpu", "--quick"]) == 0
    text = capsys.readouterr().out
    assert "gpuops selftest on cpu" in text and "model light:squeezenet" in text and "selftest passed" in text
    rc, report = _selftest(capsys, "--device", "cpu", "--quick")
    assert rc == 0 and "kernels" not in report and report["notes"]
    assert [(r["name"], r["against"], r["ok"]) for r in report["models"][0]["runs"]] == \
        [("cpu", "onnx reference evaluator", True)]
    assert "vs onnx reference evaluator: max rel err" in text and "max |diff|" not in text


def test_a_wrong_kernel_under_a_uniform_softmax_fails_the_selftest(capsys, monkeypatch, tmp_path):
    """Constant weights (as in the light models) make a classifier's softmax uniform whatever the
    convolution computes: the selftest compares the logits too."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("GlobalAveragePool", ["c"], ["p"]),
             helper.make_node("Flatten", ["p"], ["logits"]), helper.make_node("Softmax", ["logits"], ["prob"])]
    model = make_model(nodes, {"x": np.zeros((1, 3, 8, 8), np.float32)}, ["prob"],
                       inits=[("w", np.full((10, 3, 3, 3), 0.1, np.float32))], opset=17)
    path = str(tmp_path / "uniform.onnx")
    onnx.save(model, path)
    monkeypatch.setattr(selftest, "kernel_checks", lambda dev: [])
    rc, report = _selftest(capsys, "--device", "cuda", "--model", path)
    assert rc == 0 and report["models"][0]["outputs"] == ["prob", "logits"]
    assert report["models"][0]["runs"][1]["new_feeds_change_outputs"]
    monkeypatch.setattr(cuda_conv, "conv", _off_by_one(cuda_conv.conv))
    rc, report = _selftest(capsys, "--device", "cuda", "--model", path)
    assert rc == 1 and report["failures"][0].startswith(f"model {path} cuda: output 'logits': relative error")
    assert [o["ok"] for o in report["models"][0]["runs"][1]["outputs"]] == [True, False]  # the softmax agrees


def _off_by_one(fn):
    def wrong(*args, **kwargs):
        y = fn(*args, **kwargs)
        return None if y is None else y + 1
    return wrong


def test_a_wrong_kernel_fails_the_selftest(capsys, monkeypatch, small_cnn):
    monkeypatch.setattr(cuda_conv, "conv", _off_by_one(cuda_conv.conv))
    rc, report = _selftest(capsys, "--device", "cuda", "--model", small_cnn)
    assert rc == 1 and not report["ok"]
    conv = next(f for f in report["kernels"] if f["family"] == "conv")
    bad = {c["name"] for c in conv["cases"] if not c["ok"]}
    float_cases = {c.name for c in selftest.KERNEL_CASES
                   if c.family == "conv" and c.op_type in ("Conv", "FusedConv") and "empty" not in c.name}
    assert bad == float_cases
    assert all(f["ok"] for f in report["kernels"] if f["family"] != "conv")
    assert any(f.startswith("kernel case conv2d-strided-dilated-bias: output 0: max |diff|")
               for f in report["failures"])
    runs = [(r["name"], r["ok"]) for r in report["models"][0]["runs"]]  # the model's convolutions are off too
    assert runs == [("cuda", False), ("cuda_graph", False)]


def test_a_kernel_that_never_runs_fails_the_selftest(capsys, monkeypatch):
    monkeypatch.setattr(cuda_detection, "roi_align", lambda *a, **k: None)  # always the generic op
    rc, report = _selftest(capsys, "--device", "cuda", "--model", "none")
    assert rc == 1 and "models" not in report
    fam = next(f for f in report["kernels"] if f["family"] == "roi_align")
    assert not fam["ok"] and all("no roi_align.cu kernel ran" in c["error"] for c in fam["cases"])
    assert all(c["max_abs_diff"] == 0 for c in fam["cases"])  # the generic op agrees with itself


def test_a_kernel_that_fails_to_compile_fails_the_selftest(capsys, monkeypatch):
    def broken(file, *args, **kwargs):
        raise RuntimeError(f"nvrtc: cannot open source file for {file}")

    monkeypatch.setattr(kernels, "get_function", broken)
    rc, report = _selftest(capsys, "--device", "cuda", "--model", "none")
    assert rc == 1
    for fam in report["kernels"][1:]:
        assert not fam["ok"] and "cannot open source file" in fam["error"] and fam["cases"] == []
    assert report["kernels"][0]["ok"]  # CuPy's own kernels still work


def test_a_model_mismatch_and_a_missing_device_fail_the_selftest(capsys, monkeypatch, small_cnn):
    from gpuops.onnx import InferenceSession

    run = InferenceSession.run

    def wrong_on_cuda(self, *args, **kwargs):
        outs = run(self, *args, **kwargs)
        return [np.asarray(o) * 1.01 for o in outs] if self.device.kind == "cuda" else outs

    monkeypatch.setattr(InferenceSession, "run", wrong_on_cuda)
    monkeypatch.setattr(selftest, "kernel_checks", lambda dev: [])
    rc, report = _selftest(capsys, "--device", "cuda", "--model", small_cnn)
    assert rc == 1
    assert [(r["name"], r["ok"]) for r in report["models"][0]["runs"]] == [("cuda", False), ("cuda_graph", False)]
    assert report["failures"][0].startswith(f"model {small_cnn} cuda: output 'y': relative error 0.01")
    monkeypatch.setattr(InferenceSession, "run", run)
    rc, report = _selftest(capsys, "--device", "cpu", "--model", small_cnn)  # against the reference evaluator
    assert rc == 0 and report["models"][0]["runs"][0]["against"] == "onnx reference evaluator"
    rc, report = _selftest(capsys, "--device", "cuda:7", "--model", "none")
    assert rc == 1 and "cuda:7" in report["failures"][0] and report["environment"]["device"] is None


@pytest.mark.parametrize("got,want,ok", [
    ([np.float32([1, 2])], [np.float32([1, 2.001])], True),
    ([np.float32([1, 2])], [np.float32([1, 2.01])], False),
    ([np.float32([1, np.nan])], [np.float32([1, 2])], False),
    ([np.float32([np.inf, np.nan])], [np.float32([np.inf, np.nan])], True),
    ([np.int8([1, 2])], [np.int16([1, 2])], False),
    ([np.int8([1, 2])], [np.int8([1, 2, 3])], False),
    ([np.float32(3)], [np.float32(3)], True),
])
def test_compare(got, want, ok):
    assert selftest.compare(got, want, rtol=1e-3)[0] is ok


def test_cli_exit_status_in_a_subprocess_is_non_zero_on_failure():
    r = subprocess.run([sys.executable, "-m", "gpuops", "selftest", "--device", "cuda:9", "--model", "none"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "selftest FAILED" in r.stdout


def test_environment_reports_the_cuda_versions_cupy_sees(monkeypatch):
    def no_driver():
        raise RuntimeError("CUDA driver version is insufficient")

    runtime = SimpleNamespace(runtimeGetVersion=lambda: 12060, driverGetVersion=no_driver, getDeviceCount=lambda: 0)
    fake = SimpleNamespace(__version__="14.2.0", cuda=SimpleNamespace(
        runtime=runtime, nvrtc=SimpleNamespace(getVersion=lambda: (12, 9)), get_cuda_path=lambda: None))
    monkeypatch.setattr(_device, "_cupy", lambda: fake)
    monkeypatch.setattr(_device, "uses_standin", lambda: False)
    monkeypatch.setattr(_device, "devices", lambda: [{"name": "cpu", "kind": "cpu"}])  # getDeviceCount() == 0
    monkeypatch.setitem(sys.modules, "cupy_backends", None)  # NVRTC through cupy.cuda.nvrtc
    env = selftest.environment(None)
    assert (env["cupy"], env["cuda_runtime"], env["nvrtc"], env["cuda_path"]) == ("14.2.0", "12.6", "12.9", None)
    assert env["cuda_driver"] == "unavailable (RuntimeError: CUDA driver version is insufficient)"
    assert env["standin"] is False and env["gpus"] == []
    text = selftest.format_report({"environment": env, "ok": True, "failures": [], "notes": []})
    assert "cuda_runtime  12.6" in text and "nvrtc         12.9" in text


@pytest.mark.skipif(__import__("gpuops").native.compiler() is None, reason="no C compiler: no native CPU kernels")
def test_selftest_on_the_cpu_checks_every_native_kernel(capsys, monkeypatch):
    """On the CPU the selftest runs one op per native kernel against its NumPy code, and fails when a
    kernel does not run (here: every kernel file unavailable)."""
    from gpuops import native

    rc, report = _selftest(capsys, "--device", "cpu", "--model", "none")
    assert rc == 0 and report["ok"]
    assert {c["file"] for c in report["native"]} == {"conv.c", "direct_conv.c", "gemm.c", "pool.c", "winograd.c",
                                                     "rnn.c", "rows.c", "quantize.c", "special.c",
                                                     "tree_ensemble.c"}
    assert all(c["ok"] and c["max_abs_diff"] <= 1e-5 for c in report["native"])
    cases = len(report["native"])
    monkeypatch.setattr(native, "function", lambda *args: None)
    rc, report = _selftest(capsys, "--device", "cpu", "--model", "none")
    assert rc == 1 and len(report["failures"]) == len(report["native"]) == cases
    assert all("kernel ran" in f for f in report["failures"])


# -- missing dependencies --------------------------------------------------------------------------

@pytest.mark.parametrize("module,package", [("array_api_compat", "array-api-compat"), ("ml_dtypes", "ml_dtypes"),
                                            ("onnx", "onnx")])
def test_a_missing_dependency_is_named_with_its_install_command(module, package, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # "import module" raises ImportError
    rc, report = _selftest(capsys, "--device", "cpu", "--model", "none")
    assert rc == 1 and not report["ok"] and len(report["failures"]) == 1
    assert f"needs the package {package}" in report["failures"][0]
    assert f"pip install '{package}>=" in report["failures"][0]


def test_missing_cupy_is_named_for_a_cuda_device(capsys, monkeypatch):
    standin = os.environ.get(_device.STANDIN_ENV)
    monkeypatch.delenv(_device.STANDIN_ENV, raising=False)  # device="cuda" means CuPy
    monkeypatch.setitem(sys.modules, "cupy", None)
    rc, report = _selftest(capsys, "--device", "cuda", "--model", "none")
    assert rc == 1 and "CuPy does not import; pip install 'gpuops[cuda]'" in report["failures"][0]
    assert selftest.missing_dependencies("auto") == []  # auto falls back to the cpu
    if standin:  # the stand-in needs no CuPy
        monkeypatch.setenv(_device.STANDIN_ENV, standin)
        assert selftest.missing_dependencies("cuda") == []


def test_a_missing_dependency_in_a_fresh_process_is_a_message_not_a_traceback():
    """``gpuops selftest`` without array-api-compat (which ``import gpuops`` does not import)."""
    code = ("import sys; sys.modules['array_api_compat'] = None; from gpuops.cli import main; "
            "raise SystemExit(main(['selftest', '--device', 'cpu']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "Traceback" not in out, out
    assert "gpuops needs the package array-api-compat" in out and "pip install 'array-api-compat>=1.9'" in out


def test_the_cli_turns_a_missing_module_into_a_message(capsys, monkeypatch):
    def missing(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'ml_dtypes'", name="ml_dtypes")

    monkeypatch.setattr(selftest, "run", missing)
    assert main(["selftest"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpuops: error: gpuops needs the package ml_dtypes") and "pip install 'ml_dtypes>=" in err

    def other(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'something_else'", name="something_else")

    monkeypatch.setattr(selftest, "run", other)
    assert main(["selftest"]) == 1  # not a dependency: a bug in gpuops, one line, the traceback with -v
    assert capsys.readouterr().err.startswith("gpuops: internal error: ModuleNotFoundError: No module named "
                                              "'something_else' (rerun with -v")
    with pytest.raises(ModuleNotFoundError):
        main(["-v", "selftest"])

    def optional(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'onnxruntime'", name="onnxruntime")

    monkeypatch.setattr(selftest, "run", optional)
    assert main(["selftest"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpuops: error: this needs the optional package onnxruntime") and "pip install onnxruntime" in err


# -- tolerances ------------------------------------------------------------------------------------

def _positive_cnn(dtype):
    """A CNN with positive weights and a positive input (no cancellation, as in the light models): conv
    3x3 over 16 channels, average pool, conv 1x1, global average pool, Gemm, Softmax."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("AveragePool", ["r1"], ["a1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["a1", "w2"], ["c2"]),
             helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], transB=1),
             helper.make_node("Softmax", ["logits"], ["prob"])]
    inits = [("w1", rng.uniform(0, 1, (32, 16, 3, 3))), ("b1", rng.uniform(0, 1, 32)),
             ("w2", rng.uniform(0, 1, (64, 32, 1, 1))), ("w3", rng.uniform(0, 1, (10, 64))),
             ("b3", rng.uniform(0, 1, 10))]
    x = rng.uniform(0, 1, (2, 16, 12, 12))
    model = make_model(nodes, {"x": x.astype(dtype)}, ["prob"], inits=[(k, v.astype(dtype)) for k, v in inits],
                       opset=17)
    return model, x


def test_error_bounds_sum_gamma_k_along_the_network():
    model, _ = _positive_cnn(np.float32)
    bound = selftest.error_bounds(model)
    g = selftest.gamma
    extra = selftest.NODE_ROUNDINGS
    c1 = g(16 * 9 + 1 + extra)
    assert bound["c1"] == bound["r1"] == pytest.approx(c1)  # Relu adds nothing
    a1 = c1 + g(4 + extra)
    assert bound["a1"] == pytest.approx(a1)
    assert bound["logits"] == pytest.approx(a1 + g(32 + extra) + g(36 + extra) + g(64 + 1 + extra))
    assert bound["prob"] == pytest.approx(bound["logits"] + g(10 + extra))
    tolerances, how = selftest.output_tolerances(selftest.with_inner_outputs(model))
    assert tolerances == {"prob": 2 * bound["prob"], "logits": 2 * bound["logits"]} and "bound" in how
    assert selftest.output_tolerances(model, rtol=0.5) == ({"prob": 0.5}, "--rtol")


def test_error_bounds_hold_against_float64():
    """Without cancellation the bound is rigorous (first order): float32 against float64, element by element."""
    import gpuops

    m32, x = _positive_cnn(np.float32)
    m64, _ = _positive_cnn(np.float64)
    m32, m64 = selftest.with_inner_outputs(m32), selftest.with_inner_outputs(m64)
    bound = selftest.error_bounds(m32)
    got = gpuops.InferenceSession(m32, device="cpu").run(None, {"x": x.astype(np.float32)})
    exact = gpuops.InferenceSession(m64, device="cpu").run(None, {"x": x})
    logits, e = got[1].astype(np.float64), exact[1]
    assert (np.abs(logits - e) <= bound["logits"] * np.abs(e)).all()
    assert np.abs(logits - e).max() > 0  # float32 did round
    # the softmax is no longer within a relative bound (logits of 1e3 off by 1e-4 move p by 1e-4 relative,
    # and its smallest values underflow): compare_outputs holds it to what its logits' difference allows
    names = [o.name for o in m32.graph.output]
    tolerances, _ = selftest.output_tolerances(m32)
    outs = selftest.compare_outputs(names, got, [a.astype(np.float32) for a in exact], tolerances,
                                    selftest.softmax_outputs(m32))
    assert all(o["ok"] for o in outs), outs


def test_no_bound_without_static_shapes_falls_back_to_the_default():
    model, _ = _positive_cnn(np.float32)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "C"
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "H"
    model.graph.input[0].type.tensor_type.shape.dim[3].dim_param = "W"
    tolerances, how = selftest.output_tolerances(model)
    assert tolerances == {"prob": selftest.DEFAULT_RTOL} and "no static shape" in how


def test_a_softmax_is_held_to_what_its_logits_allow():
    names = ["prob", "logits"]
    spec = {"prob": {"op": "Softmax", "logits": "logits", "axis": -1, "coerced": False}}
    tol = {"prob": 1e-6, "logits": 1e-6}
    # the light models' case: equal logits of 9.5e9, one ulp (1024) apart
    z = np.full((1, 1000), 9.475684e9, np.float32)
    z2 = z.copy()
    z2[0, 3] = np.nextafter(z2[0, 3], np.float32(np.inf))
    uniform, one_hot = np.full((1, 1000), 1e-3, np.float32), np.eye(1, 1000, 3, dtype=np.float32)
    prob, logits = selftest.compare_outputs(names, [one_hot, z2], [uniform, z], tol, spec)
    assert prob["ok"] and logits["ok"] and "ill-conditioned" in prob["note"] and logits["rel_err"] < 1e-6
    bad = one_hot * 2  # not a distribution
    prob, _ = selftest.compare_outputs(names, [bad, z2], [uniform, z], tol, spec)
    assert not prob["ok"] and "sums to 1" in prob["error"]
    # well-conditioned logits: the softmax is compared, to expm1(2 d) + 2 gamma(n + 8)
    z = np.linspace(-3, 3, 1000, dtype=np.float32)[None]
    p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    prob, logits = selftest.compare_outputs(names, [p * np.float32(1.001), z], [p, z], tol, spec)
    assert logits["ok"] and not prob["ok"] and prob["tolerance"] == pytest.approx(2 * selftest.gamma(1008))
    prob, _ = selftest.compare_outputs(names, [p, z + np.float32(1e-3)], [p, z], {"prob": 1e-6, "logits": 1}, spec)
    assert prob["ok"] and "note" not in prob
    assert prob["tolerance"] == pytest.approx(np.expm1(2e-3) + 2 * selftest.gamma(1008), rel=1e-3)


def test_the_reference_evaluator_follows_the_spec_for_lrn_and_batch_normalization():
    """onnx's own LRN sums over the batch axis (onnx/onnx#7805) and its opset-9 BatchNormalization uses
    batch statistics: the light models' logits would be 60% off."""
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (1, 6, 3, 4)).astype(np.float32)
    model = make_model([helper.make_node("LRN", ["x"], ["y"], size=3, alpha=0.5, beta=0.75, bias=1.0)],
                       {"x": x}, ["y"], opset=13)
    (y,) = selftest.reference_evaluator(model).run(None, {"x": x})
    padded = np.pad(x.astype(np.float64) ** 2, [(0, 0), (1, 1), (0, 0), (0, 0)])
    square_sum = padded[:, :-2] + padded[:, 1:-1] + padded[:, 2:]
    np.testing.assert_allclose(y, x / (1 + 0.5 / 3 * square_sum) ** 0.75, rtol=1e-6)
    stats = [("s", rng.uniform(0.5, 1, 6)), ("b", rng.uniform(0, 1, 6)), ("m", rng.uniform(0, 1, 6)),
             ("v", rng.uniform(0.5, 1, 6))]
    model = make_model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], {"x": x}, ["y"],
                       inits=[(k, v.astype(np.float32)) for k, v in stats], opset=9)
    (y,) = selftest.reference_evaluator(model).run(None, {"x": x})
    s, b, m, v = (a.reshape(-1, 1, 1) for _, a in stats)
    np.testing.assert_allclose(y, s * (x - m) / np.sqrt(v + 1e-5) + b, rtol=1e-5)


@pytest.mark.parametrize("name", ["bvlc_alexnet", "resnet50"])
def test_light_models_with_lrn_and_batch_normalization_pass_on_the_cpu(name):
    from gpuops.device import get_device

    rec = selftest.model_check(f"light:{name}", get_device("cpu"))
    assert rec["ok"], rec
    (run,) = rec["runs"]
    assert run["against"] == "onnx reference evaluator" and run["max_rel_err"] < 1e-2 * run["tolerance"]
