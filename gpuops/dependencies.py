"""gpuops' runtime dependencies, and what to tell the user when one does not import."""

from __future__ import annotations


# pyproject's [project] dependencies: import name -> distribution name
RUNTIME_DEPENDENCIES = {"numpy": "numpy", "onnx": "onnx", "array_api_compat": "array-api-compat",
                        "ml_dtypes": "ml_dtypes"}
CUPY_HINT = "pip install 'gpuops[cuda]' (CUDA 12) or 'gpuops[cuda13]' (CUDA 13)"
# optional packages some commands use: import name -> what to install
OPTIONAL_DEPENDENCIES = {"onnxruntime": "onnxruntime", "pyarrow": "pyarrow", "modeci_mdf": "'gpuops[mdf]'",
                         "graph_scheduler": "'gpuops[mdf]'", "ray": "'gpuops[ray]'", "pynvml": "nvidia-ml-py",
                         "threadpoolctl": "threadpoolctl", "matplotlib": "matplotlib", "torch": "torch"}


def _requirement(dist: str) -> str:
    """``dist`` with the version gpuops asks for (e.g. ``array-api-compat>=1.9``), as installed."""
    import importlib.metadata
    import re

    def norm(name):
        return re.sub(r"[-_.]+", "-", name).lower()

    try:
        for req in importlib.metadata.requires("gpuops") or []:
            spec, _, marker = req.partition(";")
            if "extra" not in marker and norm(re.split(r"[\s\[<>=!~]", spec.strip(), maxsplit=1)[0]) == norm(dist):
                return spec.strip().replace(" ", "")
    except importlib.metadata.PackageNotFoundError:
        pass
    return dist


def missing_dependency(module: str) -> str | None:
    """What to tell the user when ``module`` (a runtime dependency, or CuPy) does not import; None
    for any other module."""
    top = (module or "").partition(".")[0]
    if top in ("cupy", "cupy_backends"):
        return f"CuPy does not import; {CUPY_HINT}"
    dist = RUNTIME_DEPENDENCIES.get(top)
    if dist is None:
        return None
    return f"gpuops needs the package {dist}, which does not import: pip install '{_requirement(dist)}'"


def missing_optional(module: str) -> str | None:
    """What to tell the user when an optional package ``module`` does not import; None for any other."""
    top = (module or "").partition(".")[0]
    install = OPTIONAL_DEPENDENCIES.get(top)
    return None if install is None else f"this needs the optional package {top}, which does not import: pip install {install}"
