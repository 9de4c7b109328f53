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


def test_peers_bench_alternates_with_onnxruntime_and_reports_goals(tmp_path):
    from benchmarks.__main__ import main

    rc = main(["--peers", "--quick", "--threads", "1", "--models", "squeezenet,quantized_mlp",
               "--out", str(tmp_path)])
    result = json.loads((tmp_path / "peers.json").read_text())
    assert [(r["model"], r["variant"]) for r in result["runs"]] == [
        ("squeezenet", "float32"), ("squeezenet", "float16"), ("quantized_mlp", "float32")]
    for r in result["runs"]:
        assert "error" not in r, r.get("error")
        assert r["threads"] == 1 and (r["agree"] or r["variant"] == "float16"), r
        assert r["ratio"] == r["gpuops"]["median_ms"] / r["onnxruntime"]["median_ms"]
        assert r["gpuops"]["runs"] == r["onnxruntime"]["runs"] >= 2  # alternating: as many runs each
    d = result["dispatch"]
    assert d["nodes"] == 1000 and d["gpuops"]["us_per_node"] > 0 and d["onnxruntime"]["us_per_node"] > 0
    assert d["gpuops"]["cpu_us_per_node"] > 0 and d["onnxruntime"]["cpu_us_per_node"] > 0
    goals = result["goals"]
    assert set(goals["light"]["ratios"]) == {"squeezenet"}
    assert set(goals["float16_over_float32"]["ratios"]) == {"squeezenet"}
    assert set(goals["generated"]["ratios"]) == {"quantized_mlp"}
    assert rc == 0
    md = (tmp_path / "peers.md").read_text()
    assert "gpuops / onnxruntime" in md and "µs/node" in md and "Goals" in md and "- dispatch:" in md
    pytest.importorskip("matplotlib")
    assert (tmp_path / "peers.png").stat().st_size > 1000
