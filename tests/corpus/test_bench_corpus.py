"""``gpuops bench --corpus`` on two small corpus models: the JSON records both runtimes' times at the
thread count asked for, their ratio, agreement, the geomean and the machine (CPU model, vector
extensions, BLAS core type)."""

import json

import pytest

from gpuops.bench import main


def test_bench_corpus(tmp_path, capsys):
    rc = main(["--corpus", "--quick", "--threads", "1", "--models", "skl_mlp,skl_logreg", "--out", str(tmp_path)])
    assert rc == 0, capsys.readouterr().out
    result = json.loads((tmp_path / "corpus.json").read_text())
    runs = {r["model"]: r for r in result["runs"]}
    assert set(runs) == {"skl_mlp", "skl_logreg"}
    for r in runs.values():
        assert r["threads"] == 1 and r["optimize"] == "all" and r["agree"] and "error" not in r
        assert r["ratio"] == r["gpuops"]["median_ms"] / r["onnxruntime"]["median_ms"] > 0
    geomean = (runs["skl_mlp"]["ratio"] * runs["skl_logreg"]["ratio"]) ** 0.5
    assert result["geomean"]["1"] == pytest.approx(geomean)
    machine = result["env"]["machine"]
    assert machine["cpu_model"] and isinstance(machine["vector_extensions"], list) and "blas" in machine
    assert "| skl_mlp |" in (tmp_path / "corpus.md").read_text()
