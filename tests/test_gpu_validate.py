"""benchmarks/gpu_validate.sh and gpu_prep.sh, as far as a machine without a GPU can check them:
shellcheck, a dry run of every part on the CPU stand-in of CuPy (small models, a small budget), a
failing part, the budget, no GPU at all, the preparation's size checks, and the Python of the parts."""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.test_repo_lint import _tool

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_validate.sh"
PREP = ROOT / "benchmarks" / "gpu_prep.sh"
PARTS = ["env", "selftest", "tests-kernels", "tests-cuda", "light", "zoo", "perf", "torch", "conv", "memcheck",
         "compile"]
FILES = {"summary.txt", "env.txt", "selftest.json", "perf.json", "tests.txt", "memcheck.txt", "gpu_validate.log"}
SMALL = {  # a dry run that fits in well under a minute on two cores
    "GPU_VALIDATE_MODELS": "squeezenet", "GPU_VALIDATE_ZOO": "cnn", "GPU_VALIDATE_PERF_MODEL": "squeezenet",
    "GPU_VALIDATE_BATCHES": "1", "GPU_VALIDATE_TESTS": "tests/cuda/test_host_syncs.py",
    "GPU_VALIDATE_SELFTEST_ARGS": "--quick", "GPU_VALIDATE_REPS": "1", "GPU_VALIDATE_TIME_PER_RUN": "0.01",
    "GPU_VALIDATE_INSTALL_CHECK": "0", "GPU_VALIDATE_BUDGET": "200",
}


def _validate(out: Path, standin: bool = True, timeout: int = 240, **env) -> tuple[subprocess.CompletedProcess, dict]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("GPU_VALIDATE_") and k != "GPUOPS_CUDA_BACKEND"}
    e.update(PY=sys.executable, **SMALL)
    if standin:
        e["GPUOPS_CUDA_BACKEND"] = "gpuops.testing.cuda_standin"
    e.update(env)
    r = subprocess.run(["bash", str(SCRIPT), str(out)], capture_output=True, text=True, cwd=ROOT, env=e,
                       timeout=timeout)
    text = (out / "summary.txt").read_text().partition("== key numbers")[0]  # the table of parts
    lines = {m.group(1): m.group(2) for m in re.finditer(r"^(\S+)\s+(ok\b.*|SKIPPED \(.*|FAIL.*|TIMEOUT.*)$", text, re.M)}
    return r, lines


def test_shell_scripts_pass_shellcheck():
    scripts = [SCRIPT, PREP, ROOT / "docker" / "entrypoint.sh"]
    r = subprocess.run([_tool("shellcheck"), "--severity=style", *map(str, scripts)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_usage_and_bad_arguments(tmp_path):
    r = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "GPUOPS_CUDA_BACKEND=gpuops.testing.cuda_standin" in r.stdout
    assert all(p in r.stdout for p in PARTS)
    assert subprocess.run(["bash", str(SCRIPT), "--bogus"], capture_output=True).returncode == 2
    assert subprocess.run(["bash", str(SCRIPT), str(tmp_path / "a"), "b"], capture_output=True).returncode == 2


def test_dry_run_on_the_standin_runs_or_names_every_part(tmp_path):
    out = tmp_path / "out"
    r, lines = _validate(out)
    summary = (out / "summary.txt").read_text()
    assert list(lines) == PARTS, summary
    for part, status in lines.items():
        assert status.startswith("ok") or re.match(r"SKIPPED \(.+\)", status), (part, status, r.stdout[-3000:])
    for part in ("torch", "memcheck", "compile"):  # the hardware the stand-in lacks, said so
        assert lines[part].startswith("SKIPPED (no GPU"), lines[part]
    assert "the kernel cases ran once without it: ok" in lines["memcheck"]
    assert "cuDNN SKIPPED (no GPU)" in lines["conv"]
    assert "NO (no nvidia-smi" in summary or "NO (nvidia-smi" in summary
    assert r.returncode == 0, summary
    files = {p.name for p in out.iterdir()}
    assert files == FILES and len(files) <= 8
    perf = json.loads((out / "perf.json").read_text())
    assert [m["model"] for m in perf["light"]["models"]] == ["light:squeezenet"]
    assert [m["model"] for m in perf["zoo"]["models"]] == ["zoo:cnn"]
    for m in perf["light"]["models"] + perf["zoo"]["models"]:
        assert not m["problems"] and m["graph_status"]["captured"] in (True, False)
        assert isinstance(m["cuda_syncs_per_run"], int) and m["cuda_vs_cpu"] and m["graph_replay_vs_cpu"]
    assert perf["light"]["models"][0]["judged_outputs"]  # the logits, added as a graph output
    pools = perf["light"]["models"][0]["graph_pools"]  # each graph's pool against its liveness minimum
    assert pools["signatures"] and pools["blas_workspace_bytes"] > 0
    assert all(p["over_liveness"] == round(p["memory_bytes"] / p["planned_peak_bytes"], 3)
               and 0 < p["warm_up_bytes"] <= p["memory_bytes"] for p in pools["signatures"])
    assert set(perf["squeezenet"]["runs"]) == {"ort_cpu_b1", "gpuops_cuda_b1", "gpuops_cuda_graph_b1"}
    assert perf["conv"]["shapes"] and all(not s["problems"] for s in perf["conv"]["shapes"])
    assert json.loads((out / "selftest.json").read_text())["ok"]
    assert "tests-cuda" in (out / "tests.txt").read_text()
    assert "== every part run is ok" in summary and "light:squeezenet" in summary and "x liveness" in summary
    assert "== gpu_validate done" in (out / "gpu_validate.log").read_text()


def test_a_failing_part_shows_as_failed(tmp_path):
    out = tmp_path / "out"
    r, lines = _validate(out, GPU_VALIDATE_PARTS="light,zoo", GPU_VALIDATE_MODELS="no_such_model")
    assert r.returncode == 1
    assert lines["light"].startswith("FAIL (rc=1)") and lines["zoo"].startswith("ok")
    assert all(lines[p] == "SKIPPED (not in GPU_VALIDATE_PARTS)" for p in ("selftest", "tests-cuda", "perf", "memcheck"))
    assert all(lines[p].startswith("SKIPPED (") for p in PARTS if p not in ("env", "light", "zoo"))
    assert "== FAILED: light" in (out / "summary.txt").read_text()


def test_no_part_starts_past_the_budget_and_no_gpu_skips_all(tmp_path):
    r, lines = _validate(tmp_path / "a", GPU_VALIDATE_BUDGET="24")
    assert lines["env"].startswith("ok") and r.returncode == 0
    assert all(lines[p].startswith("SKIPPED (budget spent") for p in ("selftest", "light", "perf", "conv"))
    r, lines = _validate(tmp_path / "b", standin=False)
    assert r.returncode == 1
    assert all(lines[p] == "SKIPPED (no GPU and no stand-in)" for p in PARTS[1:])


def _checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "benchmarks" / "gpu_validate.sh").write_text("echo\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True, env=env)
    (repo / ".whl").mkdir()
    return repo


def test_prep_keeps_wheels_checks_sizes_and_prints_the_command(tmp_path):
    repo = _checkout(tmp_path)
    (repo / ".whl" / "array_api_compat-1.16.0-py3-none-any.whl").write_bytes(b"0" * 1000)  # no download
    r = subprocess.run(["bash", str(PREP), str(repo)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert 'command:   bash benchmarks/gpu_validate.sh "$OUT"' in r.stdout
    assert "carry:     .whl" in r.stdout and "timeout_s: 560" in r.stdout
    assert "/.whl/" in (repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert len((repo / ".whl" / "gpuops-commit").read_text().split()[0]) == 40
    (repo / ".whl" / "big-1.0-py3-none-any.whl").write_bytes(b"0" * (6 << 20))
    r = subprocess.run(["bash", str(PREP), str(repo)], capture_output=True, text=True)
    assert r.returncode == 1 and "over 5 MiB" in r.stderr


# -- the Python of the parts ------------------------------------------------------------------------

GPU_DIR = ROOT / "benchmarks" / "gpu"


def test_the_parts_use_only_gpuops_public_api():
    allowed = {"gpuops", "gpuops.selftest", "gpuops.cli"}
    for path in sorted(GPU_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
            for n in names:
                if n.split(".")[0] == "gpuops":
                    assert n in allowed, f"{path.name} imports {n}"
            if isinstance(node, ast.ImportFrom) and node.module == "gpuops.cli":
                assert [a.name for a in node.names] == ["resolve_model_path"], path.name
            if isinstance(node, ast.ImportFrom) and node.module == "gpuops":
                assert all(not a.name.startswith("_") and a.name in ("selftest",) for a in node.names), path.name


def test_common_diffs_timing_and_feeds(monkeypatch):
    from benchmarks.gpu import common

    a = np.array([1.0, -4.0, 2.0], np.float32)
    d = common.diffs([a + np.float32(0.004), a[:2], np.array([np.inf, 1.0])], [a, a, np.array([1.0, 1.0])])
    assert d[0]["rel_to_max"] == pytest.approx(0.001, rel=1e-3) and d[0]["max_abs_ref"] == 4.0
    assert d[1]["rel_to_max"] == float("inf") and d[2]["rel_to_max"] == float("inf")
    assert common.worst(d, [0]) == pytest.approx(0.001, rel=1e-3)
    calls = []
    t = common.timed(lambda: calls.append(1), reps=5, budget=0.0, warm=2)
    assert t["runs"] == 3 and len(calls) == 5  # 2 warm-ups, at least 3 runs even past the budget
    monkeypatch.setattr(common, "MAX_REPS", 1)
    assert common.timed(lambda: None, reps=5)["runs"] == 1
    feeds = {"x": np.arange(4, dtype=np.float32), "ids": np.array([1, 2, 3])}
    f2 = common.second_feeds(feeds)
    assert f2["x"].dtype == np.float32 and not np.array_equal(f2["x"], feeds["x"])
    assert f2["ids"].tolist() == [3, 2, 1]


def test_summary_reads_pytest_results_and_model_lines(tmp_path):
    from benchmarks.gpu import summary

    (tmp_path / "tests.txt").write_text("== tests-kernels: pytest\n..F\nFAILED tests/k.py::t[cupy] - x\n"
                                        "1 failed, 2 passed in 1.0s\n== tests-cuda: pytest\n"
                                        "===== 3 passed, 1 skipped in 2.0s =====\n")
    assert summary.tests_lines((tmp_path / "tests.txt").read_text()) == [
        "tests-kernels: 1 failed, 2 passed in 1.0s", "  FAILED tests/k.py::t[cupy]", "tests-cuda: 3 passed, 1 skipped in 2.0s"]
    rec = {"model": "light:x", "problems": ["cuda_vs_cpu: 0.1"], "outputs": ["p", "logits"], "judged_outputs": ["logits"],
           "cuda_vs_cpu": [{"rel_to_max": 0.9}, {"rel_to_max": 0.1}], "graph_status": {"captured": False,
                                                                                        "blocking_node": "n2"}}
    (tmp_path / "perf.json").write_text(json.dumps({"light": {"models": [rec]}}))
    out = subprocess.run([sys.executable, "-m", "benchmarks.gpu.summary", str(tmp_path)], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "light:x" in out.stdout and "BAD rel cuda 0.1 " in out.stdout and "not captured (n2)" in out.stdout
