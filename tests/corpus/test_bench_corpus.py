"""``gpuops bench --corpus`` on two small corpus models: the JSON records both runtimes' times at the
thread count asked for, their ratio, agreement, the geomean and the machine (CPU model, vector
extensions, BLAS core type); a model gpuops cannot run is reported with the error (and the bench exits
1)."""

import json

import pytest

from gpuops.bench import main


def test_bench_corpus(tmp_path, capsys):
    rc = main(["--corpus", "--quick", "--threads", "1", "--models", "skl_mlp,skl_logreg", "--out", str(tmp_path)])
    assert rc == 1, capsys.readouterr().out  # skl_logreg: tests/corpus/test_corpus.py's EXPECTED_FAILURES
    result = json.loads((tmp_path / "corpus.json").read_text())
    runs = {r["model"]: r for r in result["runs"]}
    assert set(runs) == {"skl_mlp", "skl_logreg"}
    r = runs["skl_mlp"]
    assert r["threads"] == 1 and r["optimize"] == "all" and r["agree"] and "error" not in r
    assert r["ratio"] == r["gpuops"]["median_ms"] / r["onnxruntime"]["median_ms"] > 0
    assert "Scaler" in runs["skl_logreg"]["error"] and "ratio" not in runs["skl_logreg"]
    assert result["geomean"]["1"] == pytest.approx(r["ratio"])  # exp(log(x)) of one ratio
    machine = result["env"]["machine"]
    assert machine["cpu_model"] and isinstance(machine["vector_extensions"], list) and "blas" in machine
    assert "| skl_mlp |" in (tmp_path / "corpus.md").read_text()
