"""The MDF benchmark runs, agrees with modeci-mdf, and is faster than it."""

import json

import pytest

pytest.importorskip("modeci_mdf")


def test_mdf_benchmark_quick(tmp_path):
    from benchmarks.mdf import main

    assert main(["--quick", "--device", "cpu", "--out", str(tmp_path)]) == 0
    runs = {r["model"]: r for r in json.loads((tmp_path / "mdf.json").read_text())["runs"]}
    assert set(runs) == {"Simple.json", "mlp_pure_mdf.json"}
    for r in runs.values():
        assert r["max_abs_diff"] < 1e-9 and r["gpuops"]["median_ms"] > 0
    assert runs["mlp_pure_mdf.json"]["speedup"] >= 20  # the goal; it measures in the hundreds
