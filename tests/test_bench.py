"""The benchmark runner writes JSON, Markdown and PNG with ratios to onnxruntime."""

import json

import pytest

pytest.importorskip("onnxruntime")


def test_quick_bench_writes_reports(tmp_path):
    from benchmarks.__main__ import main

    rc = main(["--quick", "--no-mdf", "--models", "transformer_encoder,quantized_mlp", "--device", "cpu",
               "--batch", "2", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "bench.json").read_text())
    assert [r["model"] for r in result["runs"]] == ["transformer_encoder", "quantized_mlp"]
    for r in result["runs"]:
        assert "error" not in r, r.get("error")
        assert r["agree"], r["peers"]
        assert r["peers"]["onnxruntime-cpu"]["ratio"] > 0
        assert r["gpuops"]["median_ms"] > 0 and r["memory"]["planned_peak_bytes"] > 0
    assert rc == 0
    md = (tmp_path / "bench.md").read_text()
    assert "ratio vs onnxruntime-cpu" in md and "transformer_encoder" in md
    pytest.importorskip("matplotlib")
    assert (tmp_path / "ratios.png").stat().st_size > 1000 and (tmp_path / "memory.png").stat().st_size > 1000


def test_torch_versions_of_the_generated_models_agree_with_gpuops(tmp_path):
    pytest.importorskip("torch", reason="torch is an optional benchmark peer")
    from benchmarks.__main__ import main

    main(["--quick", "--no-mdf", "--models", "transformer_encoder,lstm", "--device", "cpu", "--batch", "3",
          "--out", str(tmp_path)])
    for r in json.loads((tmp_path / "bench.json").read_text())["runs"]:
        assert r["peers"]["torch-cpu"]["agree"], r["peers"]["torch-cpu"]
