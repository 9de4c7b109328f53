"""The MDF benchmark runs, agrees with modeci-mdf, and reports the batched and condition ratios."""

import json

import pytest

pytest.importorskip("modeci_mdf")


def test_mdf_benchmark_quick(tmp_path):
    from gpuops.bench.mdf import main

    assert main(["--quick", "--device", "cpu", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "mdf.json").read_text())
    runs = {r["model"]: r for r in doc["runs"]}
    assert set(runs) == {"Simple.json", "mlp_pure_mdf.json", "abc_conditions.json", "FN.mdf.json batch=1024"}
    for r in runs.values():
        assert r["max_abs_diff"] < 1e-9 and r["gpuops"]["median_ms"] > 0
    assert runs["abc_conditions.json"]["scheduling"] == "static sequence"
    fn = runs["FN.mdf.json batch=1024"]
    assert fn["batch"] == 1024 and fn["instance_steps_per_s"] > 0 and fn["per_row_vs_unbatched"] > 0
    assert doc["ratios"]["batched FN.mdf.json batch=1024 cpu per_row_vs_unbatched"] == round(fn["per_row_vs_unbatched"], 1)
