"""The benchmark runner (``gpuops.bench``) writes JSON, Markdown and PNG with ratios to onnxruntime,
runs from an installed gpuops (no checkout beside it), and names a missing optional peer before it
starts."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_quick_bench_writes_reports(tmp_path):
    pytest.importorskip("onnxruntime")
    from gpuops.bench import main

    rc = main(["--quick", "--no-mdf", "--models", "transformer_encoder,quantized_mlp", "--device", "cpu",
               "--batch", "2", "--threads", "1", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "bench.json").read_text())
    assert [r["model"] for r in result["runs"]] == ["transformer_encoder", "quantized_mlp"]
    for r in result["runs"]:
        assert "error" not in r, r.get("error")
        assert r["agree"], r["peers"]
        ort = r["peers"]["onnxruntime-cpu"]
        assert ort["ratio"] == r["gpuops"]["median_ms"] / ort["median_ms"]  # gpuops / peer, as --peers
        assert r["threads"] == 1 and r["gpuops"]["median_ms"] > 0 and r["memory"]["planned_peak_bytes"] > 0
    assert rc == 0
    machine = result["env"]["machine"]
    assert machine["threads"] == result["env"]["threads"] == 1 and machine["cpu_model"]
    assert machine["vector_extensions"] is not None and isinstance(machine["blas"], list)
    if machine["arch"] in ("x86_64", "AMD64") and Path("/proc/cpuinfo").exists():  # CPUID names the core
        assert machine["cpu_id"].startswith("family ") and " model " in machine["cpu_id"]
    md = (tmp_path / "bench.md").read_text()
    assert "gpuops / onnxruntime-cpu" in md and "transformer_encoder" in md
    assert "every runtime ran 1 thread(s)" in md and machine["cpu_model"] in md
    pytest.importorskip("matplotlib")
    assert (tmp_path / "ratios.png").stat().st_size > 1000 and (tmp_path / "memory.png").stat().st_size > 1000


def test_torch_versions_of_the_generated_models_agree_with_gpuops(tmp_path):
    pytest.importorskip("torch", reason="torch is an optional benchmark peer")
    from gpuops.bench import main

    main(["--quick", "--no-mdf", "--models", "transformer_encoder,lstm", "--device", "cpu", "--batch", "3",
          "--out", str(tmp_path)])
    for r in json.loads((tmp_path / "bench.json").read_text())["runs"]:
        assert r["peers"]["torch-cpu"]["agree"], r["peers"]["torch-cpu"]


def test_peers_bench_alternates_with_onnxruntime_and_reports_goals(tmp_path):
    pytest.importorskip("onnxruntime")
    from gpuops.bench import main

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
    assert "gpuops / onnxruntime" in md and "µs/node" in md and "CPU goals:" in md and "- dispatch:" in md
    pytest.importorskip("matplotlib")
    assert (tmp_path / "peers.png").stat().st_size > 1000


def _installed_copy(tmp_path) -> Path:
    """The gpuops package alone in a folder, as a non-editable install leaves it in site-packages:
    no benchmarks/, tests/ or cpu_kernels/ beside it, and not a git work tree."""
    site = tmp_path / "site-packages"
    shutil.copytree(ROOT / "gpuops", site / "gpuops", ignore=shutil.ignore_patterns("__pycache__"))
    return site


def _run_installed(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)  # ahead of the editable install's finder, which comes last
    cwd.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_bench_runs_from_an_installed_copy_without_the_checkout(tmp_path):
    site = _installed_copy(tmp_path)
    cwd = tmp_path / "elsewhere"
    code = ("import os, sys, gpuops, gpuops.bench; print(gpuops.__file__); print(gpuops.bench.__file__); "
            "print(any(os.path.isdir(p) and os.path.samefile(p, sys.argv[1]) for p in sys.path))")
    r = _run_installed(site, cwd, "-c", code, str(ROOT))
    assert r.returncode == 0, r.stderr
    pkg, bench, root_on_path = r.stdout.split()
    assert Path(pkg).parent == site / "gpuops" and Path(bench).parent == site / "gpuops" / "bench"
    assert root_on_path == "False"  # the repository is not importable: nothing can fall back on it
    for cmd in (["-m", "gpuops", "bench", "--help"], ["-m", "gpuops.bench", "--help"]):
        r = _run_installed(site, cwd, *cmd)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("usage: gpuops bench") and "--peers" in r.stdout and "--scenario" in r.stdout
    out = tmp_path / "out"
    r = _run_installed(site, cwd, "-m", "gpuops", "bench", "--quick", "--no-mdf", "--device", "cpu",
                       "--models", "quantized_mlp", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads((out / "bench.json").read_text())
    assert [run["model"] for run in result["runs"]] == ["quantized_mlp"] and "error" not in result["runs"][0]
    assert result["env"]["git_commit"] is None  # an installed copy is no checkout


def test_import_gpuops_leaves_the_bench_out():
    code = "import sys, gpuops; print(sorted(m for m in sys.modules if m.startswith('gpuops.bench')))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def _without(monkeypatch, *missing):
    from gpuops.bench import runner

    real = runner.installed
    monkeypatch.setattr(runner, "installed", lambda module: module not in missing and real(module))
    return runner


def test_a_missing_peer_is_named_before_the_run_starts(monkeypatch, tmp_path, capsys):
    runner = _without(monkeypatch, "onnxruntime", "threadpoolctl", "ray")
    monkeypatch.setattr(runner, "peers_main", lambda a: pytest.fail("the run started"))
    assert runner.main(["--peers", "--conv-shapes", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["gpuops bench --peers needs onnxruntime: pip install onnxruntime",
                   "gpuops bench --conv-shapes needs threadpoolctl: pip install threadpoolctl"]
    assert runner.main(["--scenario", "single-stream,ray", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == "gpuops bench --scenario ray needs Ray: pip install 'gpuops[ray]'"
    assert not any(tmp_path.iterdir())


def test_optional_peers_that_are_missing_are_noted(monkeypatch):
    runner = _without(monkeypatch, "onnxruntime", "torch", "modeci_mdf", "matplotlib", "pynvml")
    errors, notes = runner.requirements(runner.build_parser().parse_args(["--device", "cuda"]))
    assert errors == []
    text = "\n".join(notes)
    for needed in ("pip install onnxruntime", "pip install torch", "pip install 'gpuops[mdf]'",
                   "pip install matplotlib", "pip install nvidia-ml-py"):
        assert needed in text, text
    assert "transformer_encoder and lstm have no PyTorch peer" in text
    # only what the chosen options use
    errors, notes = runner.requirements(runner.build_parser().parse_args(
        ["--device", "cpu", "--no-mdf", "--models", "squeezenet"]))
    assert errors == [] and not any(w in "\n".join(notes) for w in ("torch", "modeci", "nvidia-ml-py"))


def test_the_bench_gives_onnxruntime_gpuops_thread_count(monkeypatch):
    pytest.importorskip("onnxruntime")
    from gpuops.bench import peers
    from tests.fuzz.models import relu_model

    seen = []
    import onnxruntime as ort

    real = ort.InferenceSession

    def spy(data, opts=None, **kw):
        seen.append(opts.intra_op_num_threads)
        return real(data, opts, **kw)

    monkeypatch.setattr(ort, "InferenceSession", spy)
    peers.onnxruntime_sessions(relu_model(), "cpu", 3)
    assert seen == [3]


def test_the_mdf_bench_compares_engines_stepped_alike():
    pytest.importorskip("modeci_mdf")
    from gpuops.bench import mdf

    r = mdf.bench(mdf.DEFAULT_EXAMPLES / "conditions/timeinterval_condition.json", "cpu", min_time=0.01, repeat=2)
    # timing them apart once gave 9.7e+02; stepped alike, float64 on both sides, the few steps' values
    # (at most ~1e3) agree to rounding: 1e3 * 5 steps * eps(float64) ~ 1e-12, bounded at 1e-9
    assert r["max_abs_diff"] <= 1e-9, r
    assert r["ratio"] == 1 / r["speedup"] and r["agreement_steps"] == mdf.AGREEMENT_STEPS


@pytest.mark.parametrize("threads, pattern", [(1, "abababab"), (2, "aaaaaabbbbbbbbbbbbaaaaaa")])
def test_runs_alternate_one_by_one_at_one_thread_and_in_blocks_above(threads, pattern):
    """At more than one thread each runtime runs a block (an untimed settling run, then BLOCK timed ones),
    the order reversed each round, so that one's spinning workers do not run into the other's timings."""
    from gpuops.bench import cpu_peers

    calls = []
    fns = {"a": lambda f: calls.append("a"), "b": lambda f: calls.append("b")}
    repeat = 4 if threads == 1 else 2 * cpu_peers.BLOCK
    t = cpu_peers.alternate(fns, None, 0, repeat, 60.0, threads)
    assert "".join(calls) == pattern and cpu_peers.BLOCK == 5
    assert t["a"]["runs"] == t["b"]["runs"] == repeat
