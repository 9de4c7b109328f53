"""``gpuops bench --corpus`` on two small corpus models: the JSON records both runtimes' times at the
thread count asked for, their ratio, agreement (with each float output's derived error bound), the
geomean and the machine (CPU model, vector extensions, BLAS core type)."""

import json

import numpy as np
import onnx
import pytest

from gpuops.bench import main
from gpuops.bench.corpus import load_manifest, model_path
from gpuops.bench.cpu_peers import outputs_agree


def test_bench_corpus(tmp_path, capsys):
    rc = main(["--corpus", "--quick", "--threads", "1", "--models", "skl_mlp,skl_logreg", "--out", str(tmp_path)])
    assert rc == 0, capsys.readouterr().out
    result = json.loads((tmp_path / "corpus.json").read_text())
    runs = {r["model"]: r for r in result["runs"]}
    assert set(runs) == {"skl_mlp", "skl_logreg"}
    manifest = {e["name"]: e for e in load_manifest()}
    for name, r in runs.items():
        assert r["threads"] == 1 and r["optimize"] == "all" and r["agree"] and "error" not in r
        assert r["ratio"] == r["gpuops"]["median_ms"] / r["onnxruntime"]["median_ms"] > 0
        model = onnx.load(str(model_path(manifest[name])))
        floats = {o.name for o in model.graph.output
                  if o.type.tensor_type.elem_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)}
        assert floats and set(r["bounds"]) == floats  # every float output's bound, and how it was derived
        assert all("relative bound" in how for how in r["bounds"].values())
    geomean = (runs["skl_mlp"]["ratio"] * runs["skl_logreg"]["ratio"]) ** 0.5
    assert result["geomean"]["1"] == pytest.approx(geomean)
    machine = result["env"]["machine"]
    assert machine["cpu_model"] and isinstance(machine["vector_extensions"], list) and "blas" in machine
    text = (tmp_path / "corpus.md").read_text()
    assert "| skl_mlp |" in text and "derived float32 error bound" in text


def test_outputs_agree_within_the_larger_of_the_fixed_tolerance_and_the_derived_bound():
    want = [np.array([10.0, -20.0], np.float32), np.array([1.0, 2.0], np.float32)]
    fixed = 1e-4 + 1e-3 * 20.0  # atol + rtol * max |want[0]|
    off = [want[0] + np.float32(2 * fixed), want[1]]
    assert outputs_agree(want, want, 1e-3, 1e-4) == (True, 0.0)
    assert not outputs_agree(off, want, 1e-3, 1e-4)[0]
    assert outputs_agree(off, want, 1e-3, 1e-4, [3 * fixed, None])[0]  # a quantized model's bound
    assert not outputs_agree(off, want, 1e-3, 1e-4, [1.5 * fixed, None])[0]
    assert not outputs_agree(off, want, 1e-3, 1e-4, [None, 1.0])[0]  # each output by its own bound
    tight = outputs_agree([want[0] + np.float32(fixed / 2), want[1]], want, 1e-3, 1e-4, [0.0, 0.0])
    assert tight[0]  # a bound below the fixed tolerance does not tighten it


def test_bench_corpus_derives_a_models_bounds_once_for_both_thread_counts(tmp_path, monkeypatch):
    from gpuops.bench import tolerance

    calls, real = [], tolerance.tolerances
    monkeypatch.setattr(tolerance, "tolerances", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert main(["--corpus", "--quick", "--models", "skl_logreg", "--out", str(tmp_path)]) == 0
    runs = json.loads((tmp_path / "corpus.json").read_text())["runs"]
    assert [r["threads"] for r in runs] == [1, 2] and len(calls) == 1
    assert runs[0]["bounds"] == runs[1]["bounds"] and all(r["agree"] for r in runs)
