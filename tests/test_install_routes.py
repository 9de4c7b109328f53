"""Every route that installs CuPy gets one that can compile a kernel: CuPy >= 14 (13.x passes a None
kernel argument as a garbage pointer) with its [ctk] extra (NVRTC and the CUDA runtime headers,
without which no kernel compiles, CuPy's own ufuncs included)."""

import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {"build", "dist", "__pycache__", "results"}  # and hidden folders (.git, virtual environments)
HIDDEN_KEPT = {".github", ".ci"}
# a CuPy wheel requirement as written in a file: name, optional extras, optional version clause
CUPY_REQ = re.compile(r"cupy-cuda(?:\d+x|\$\{CUDA_MAJOR\}x)(\[[^\]\s\"']*\])?(\s*[=~<>!]=?\s*[\w.${}*]+)?")


def _extras() -> dict[str, list[Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {k: [Requirement(r) for r in v] for k, v in project["optional-dependencies"].items()}


def _min_version(req: Requirement) -> Version:
    lows = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
    assert lows, f"{req} has no lower bound"
    return max(lows)


@pytest.mark.parametrize("extra,package", [("cuda", "cupy-cuda12x"), ("cuda13", "cupy-cuda13x")])
def test_cuda_extras_install_cupy_14_with_the_toolkit(extra, package):
    reqs = _extras()[extra]
    cupy = [r for r in reqs if r.name.startswith("cupy")]
    assert [r.name for r in cupy] == [package]
    assert "ctk" in cupy[0].extras, f"{cupy[0]}: without [ctk] nothing brings NVRTC and the CUDA headers"
    assert _min_version(cupy[0]) >= Version("14")
    assert not cupy[0].specifier.contains("13.6.0")
    assert "nvidia-ml-py" in {r.name for r in reqs}


def test_cuda_dockerfile_installs_cupy_14_with_the_toolkit():
    text = (ROOT / "docker" / "Dockerfile.cuda").read_text()
    version = re.search(r"^ARG CUPY_VERSION=(\S+)$", text, re.M)
    assert version and Version(version.group(1)) >= Version("14")
    installs = [m.group(0) for m in CUPY_REQ.finditer(text)]
    assert installs and all("[ctk]" in i for i in installs), installs
    base = re.search(r"^ARG CUDA_IMAGE=(\S+)$", text, re.M).group(1)
    assert "-devel" in base or "[ctk]" in installs[0], "nothing brings NVRTC and the CUDA headers"


def _text_files():
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        folders = rel.parts[:-1]
        if any(f in SKIP_DIRS or f.endswith(".egg-info") or (f.startswith(".") and f not in HIDDEN_KEPT)
               for f in folders):
            continue
        if path.is_file() and path.suffix not in (".onnx", ".pb", ".png", ".whl", ".so", ".pyc", ".data") \
                and path.stat().st_size < 2e6:
            try:
                yield rel, path.read_text()
            except UnicodeDecodeError:
                continue


def _installs(rel: Path, text: str, at: int) -> bool:
    """Whether the requirement at ``text[at]`` is an install route: a requirements file, pyproject, a
    Dockerfile, or a line that installs (pip / uv / conda install)."""
    if rel.name == "pyproject.toml" or rel.name.startswith(("requirements", "Dockerfile")):
        return True
    line = text[text.rfind("\n", 0, at) + 1:text.find("\n", at) % (len(text) + 1)]
    return "install" in line


def test_no_route_installs_cupy_13_or_cupy_without_the_toolkit():
    bad = []
    for rel, text in _text_files():
        if rel == Path(__file__).relative_to(ROOT):
            continue
        for m in CUPY_REQ.finditer(text):
            if not _installs(rel, text, m.start()):
                continue  # a package named (versions reported, a machine described), not installed
            extras, clause = m.group(1) or "", m.group(2) or ""
            pinned = re.search(r"(\d+)", clause)
            if "ctk" not in extras or (pinned and int(pinned.group(1)) < 14):
                bad.append(f"{rel}: {m.group(0)}")
        for m in re.finditer(r"CUPY_VERSION\s*[=:]\s*\"?(\d+)\.", text):  # build args and overrides
            if int(m.group(1)) < 14:
                bad.append(f"{rel}: {m.group(0)}")
    assert not bad, "CuPy installed without [ctk] or below 14:\n" + "\n".join(bad)


def test_install_route_detection():
    text = "pip install cupy-cuda12x\nPACKAGES = ('cupy-cuda13x',)\n"
    found = [_installs(Path("x.sh"), text, m.start()) for m in CUPY_REQ.finditer(text)]
    assert found == [True, False]
    assert _installs(Path("requirements-gpu.txt"), "cupy-cuda12x\n", 0)
