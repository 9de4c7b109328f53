"""benchmarks/gpu_validate.sh and build_wheelhouse.sh, as far as a machine without a GPU can check
them: shellcheck, the list of parts (which must cover every test file), the test shards, the
commands of a dry run, and a failing part failing the run."""

import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import pytest_shard
from tests.test_repo_lint import _tool

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_validate.sh"


def _validate(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, timeout=120, **kw)


def test_shell_scripts_pass_shellcheck():
    scripts = [SCRIPT, ROOT / "benchmarks" / "build_wheelhouse.sh", ROOT / "docker" / "entrypoint.sh"]
    r = subprocess.run([_tool("shellcheck"), "--severity=style", *map(str, scripts)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _parts() -> list[str]:
    r = _validate("--list-parts")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [int(line.split()[0]) for line in lines] == list(range(1, len(lines) + 1))
    return [line.split(maxsplit=1)[1] for line in lines]


def test_parts_cover_every_test_file():
    parts = _parts()
    assert parts[:2] == ["install", "selftest"]
    assert parts[-4:] == ["memcheck", "racecheck", "bench-resnet50", "bench-suite"]
    tests = parts[2:-4]
    covered = set()
    for part in tests:
        path = re.split("[@#]", part)[0]
        covered |= {p for p in ROOT.glob(path)} if "*" in path else \
            {p for p in ROOT.joinpath(path).rglob("test_*.py")} if ROOT.joinpath(path).is_dir() else {ROOT / path}
    every = set(ROOT.glob("tests/**/test_*.py"))
    assert every <= covered, sorted(str(p.relative_to(ROOT)) for p in every - covered)
    conformance = [p for p in tests if p.startswith("tests/conformance/")]  # the largest suite: per file and device
    assert conformance and {re.split("[@#]", p)[1] for p in conformance} == {"cpu", "cuda"}
    shards = [p for p in tests if "#" in p]
    for base in {p.partition("#")[0] for p in shards}:
        n = len([p for p in shards if p.partition("#")[0] == base])
        assert [p.partition("#")[2] for p in shards if p.startswith(base + "#")] == [f"{i}/{n}" for i in range(1, n + 1)]


def _shard(spec, items: list) -> tuple[list, list]:
    deselected = []
    config = SimpleNamespace(getoption=lambda name: spec,
                             hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items)))
    items = list(items)
    pytest_shard.pytest_collection_modifyitems(config, items)
    return items, deselected


def test_shards_split_a_suite_into_disjoint_parts():
    every = [f"test_{i}" for i in range(11)]
    parts = [_shard(f"{i}/3", every) for i in (1, 2, 3)]
    assert sorted(sum((kept for kept, _ in parts), [])) == sorted(every) and all(kept for kept, _ in parts)
    for kept, deselected in parts:
        assert sorted(kept + deselected) == sorted(every)
    assert _shard(None, every) == (every, [])
    for bad in ("0/3", "4/3", "x"):
        with pytest.raises(pytest.UsageError):
            _shard(bad, every)


def test_dry_run_prints_every_command(tmp_path):
    r = _validate("--dry-run", "--wheelhouse", str(tmp_path), "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    parts = _parts()
    assert re.findall(r"^# part (\d+): (.*)$", out, re.M) == [(str(i + 1), p) for i, p in enumerate(parts)]
    assert re.search(r"^# CUPY_CACHE_DIR=/\S+ ", out, re.M)
    venv = re.search(r"^# CUPY_CACHE_DIR=(\S+)/cupy ", out, re.M).group(1) + "/venv"
    assert f"{venv}/bin/pip install --no-index --find-links {tmp_path} -e .\\[cuda\\,test\\,bench\\]" in out
    pytest_lines = [line for line in out.splitlines() if " -m pytest " in line]
    assert len(pytest_lines) == len(parts) - 4 - 2 + 2  # the test parts, and both sanitizer runs
    assert all(line.startswith("timeout 590 ") and "--junitxml" in line for line in pytest_lines)
    for part in parts:
        if "#" in part:
            assert sum(f"--shard {part.partition('#')[2]} {re.split('[@#]', part)[0]}" in line
                       for line in pytest_lines) == parts.count(part)
    assert "compute-sanitizer --tool memcheck --error-exitcode 99" in out
    assert "compute-sanitizer --tool racecheck --error-exitcode 99" in out
    assert f"{venv}/bin/gpuops selftest --device cuda --json --strict > {tmp_path}/out/selftest.json" in out
    assert f"{venv}/bin/gpuops bench --device cuda --out {tmp_path}/out/bench-resnet50 --models resnet50 " \
           "--batch 1\\,32" in out
    assert "export GPUOPS_CONFORMANCE_DEVICES=cuda" in out
    assert "nvidia-smi --query-gpu=" in out and "pip freeze" in out


def test_selected_parts_and_bad_arguments(tmp_path):
    r = _validate("--dry-run", "--cuda", "13", "--wheelhouse", str(tmp_path), "--part", "1,2")
    assert r.returncode == 0 and re.findall(r"^# part (\d+)", r.stdout, re.M) == ["1", "2"]
    assert "-e .\\[cuda13\\,test\\,bench\\]" in r.stdout
    r = _validate("--dry-run", "--part", "tests/kernels")  # by name
    assert r.returncode == 0 and re.findall(r"^# part \d+: (.*)$", r.stdout, re.M) == ["tests/kernels"]
    assert _validate("--part", "999").returncode == 2
    assert _validate("--part", "x").returncode == 2
    assert _validate("--cuda", "11").returncode == 2
    assert _validate("--bogus").returncode == 2


def test_a_failing_part_fails_the_run_and_is_in_the_summary(tmp_path):
    out = tmp_path / "results"
    r = _validate("--venv", str(tmp_path / "no-venv"), "--out", str(out), "--part", "2")
    assert r.returncode == 1
    assert "failed parts: 2:selftest" in r.stderr
    rc, _seconds = (out / "parts" / "selftest.rc").read_text().split()
    assert rc != "0"
    assert "| 2 | selftest | FAIL" in (out / "summary.md").read_text()


def test_build_wheelhouse_usage():
    script = ROOT / "benchmarks" / "build_wheelhouse.sh"
    r = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "gpu_validate.sh --wheelhouse DIR" in r.stdout
    assert subprocess.run(["bash", str(script)], capture_output=True).returncode == 2  # no DIR
    assert subprocess.run(["bash", str(script), "x", "--cuda", "11"], capture_output=True).returncode == 2
