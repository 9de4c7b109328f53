"""``gpuops selftest``: check an installation, as ``torch.utils.collect_env`` plus a smoke test.

It reports the versions that decide whether the CUDA path works (CuPy, the CUDA runtime, the driver,
NVRTC, the CUDA wheels installed) and the GPUs (NVML when present); compiles every kernel family of
:data:`gpuops.kernels.NAME_EXPRESSIONS` and runs each kernel-backed override against the generic op
on random and edge inputs (on the CPU: one op per native CPU kernel against its NumPy code); runs a
model (``light:resnet50`` by default) on the cpu against onnx's reference evaluator, and node by node
and as a CUDA graph against the cpu path, reporting host syncs per run and the graph-capture status.
:func:`run` returns the report (a JSON-able dict); its ``"ok"`` is False on any mismatch, error or
missing runtime dependency, and ``gpuops selftest`` then exits with 1.

A model's outputs, and the logits before a final Softmax, are compared by relative error
(``max |diff| / max |value|``) within a float32 error bound derived from the model
(:func:`error_bounds`: ``|err| <= gamma_K sum |a_i b_i|``, ``gamma_K ~ K u``, for each dot product of K
terms, summed along the network); a Softmax output is held to what its logits' difference allows
(:func:`compare_outputs`): the light models' constant weights make their logits equal and huge, so
their softmax flips between uniform and one-hot at the logits' last bit.

The kernel cases' oracle is the generic op, the one every override must match; their edge inputs
are shared with the kernel tests (``tests/kernels``).
"""
from __future__ import annotations

import importlib.metadata
import platform
import time

import numpy as np

from .. import __version__
from .. import device as _device
from ..device import Device, get_device
from ..errors import GpuopsError
from .bounds import (DEFAULT_RTOL, EXACT_OPS, NODE_ROUNDINGS, UNIT_ROUNDOFF, compare, compare_outputs, error_bounds,
                     gamma, output_tolerances, softmax_axes, softmax_outputs, terms)
from .cases import (FAMILIES, KERNEL_CASES, ROI_BATCH, ROIS, KernelCase, compile_family, cupy_check, guarded, ints,
                    kernel_checks, native_checks, nms_boxes, quantize_input, run_kernel_case)
from .models import model_check, model_inputs, reference_evaluator, with_inner_outputs

__all__ = ["DEFAULT_MODEL", "DEFAULT_RTOL", "EXACT_OPS", "FAMILIES", "KERNEL_CASES", "NODE_ROUNDINGS", "QUICK_MODEL",
           "ROI_BATCH", "ROIS", "UNIT_ROUNDOFF", "KernelCase", "compare", "compare_outputs", "compile_family",
           "cupy_check", "environment", "error_bounds", "format_report", "gamma", "guarded", "ints", "kernel_checks",
           "missing_dependencies", "model_check", "model_inputs", "native_checks", "nms_boxes", "output_tolerances",
           "quantize_input", "reference_evaluator", "run", "run_kernel_case", "softmax_axes", "softmax_outputs", "terms",
           "with_inner_outputs"]
DEFAULT_MODEL = "light:resnet50"
QUICK_MODEL = "light:squeezenet"
# installed distributions worth reporting (name prefixes), as collect_env lists pip packages
PACKAGES = ("cupy", "cuda-", "nvidia-cuda-", "nvidia-cublas", "nvidia-ml-py", "onnx", "numpy", "array-api-compat",
            "ml-dtypes", "ml_dtypes")

# -- environment ---------------------------------------------------------------------------------

def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def _query(fn):
    try:
        return fn()
    except Exception as e:
        return f"unavailable ({type(e).__name__}: {e})"[:300]


def _nvrtc(lib):
    try:
        from cupy_backends.cuda.libs import nvrtc
    except ImportError:
        nvrtc = lib.cuda.nvrtc
    return nvrtc


def environment(dev: Device | None) -> dict:
    """Versions and devices, CuPy's view of CUDA included (each item says why when unavailable)."""
    env = {"gpuops": __version__, "python": platform.python_version(), "platform": platform.platform(),
           "numpy": np.__version__, "standin": _device.uses_standin(), "device": str(dev) if dev else None}
    env["packages"] = sorted({f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()
                              if (d.metadata["Name"] or "").lower().startswith(PACKAGES)})
    lib = _device._cupy()
    if lib is None:
        env["cupy"] = "not importable (pip install 'gpuops[cuda]')"
    elif _device.uses_standin():
        env["cupy"] = f"CPU stand-in ({_device.BACKEND_ENV}={_device.cuda_backend().name}); kernels run on the CPU emulator (g++)"
    else:
        env["cupy"] = lib.__version__
        rt = lib.cuda.runtime
        env["cuda_runtime"] = _query(lambda: _cuda_version(rt.runtimeGetVersion()))
        env["cuda_driver"] = _query(lambda: _cuda_version(rt.driverGetVersion()))
        env["nvrtc"] = _query(lambda: ".".join(map(str, _nvrtc(lib).getVersion())))
        env["cuda_path"] = _query(lambda: lib.cuda.get_cuda_path())
    gpus = []
    for d in _query(_device.devices) if lib is not None else []:
        if isinstance(d, dict) and d.get("kind") == "cuda":
            if not _device.uses_standin():
                idx = int(d["name"].partition(":")[2])
                d["compute_capability"] = _query(lambda: lib.cuda.Device(idx).compute_capability)
            gpus.append(d)
    env["gpus"] = gpus
    return env


# -- the whole check -----------------------------------------------------------------------------

def missing_dependencies(device: str = "auto") -> list[str]:
    """A message for each runtime dependency that does not import (naming the package and the pip
    command that installs it); CuPy too for a ``cuda`` device (not for ``auto``, which falls back to
    the cpu, nor on the CPU stand-in)."""
    import importlib

    from ..dependencies import RUNTIME_DEPENDENCIES, missing_dependency

    modules = list(RUNTIME_DEPENDENCIES)
    if str(device).strip().lower().startswith("cuda") and not _device.uses_standin():
        modules.append("cupy")
    out = []
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as e:  # ImportError, or a broken installation (a missing shared library...)
            out.append(f"{missing_dependency(module)} [{type(e).__name__}: {e}]"[:600])
    return out


def run(device: str = "auto", model: str | None = DEFAULT_MODEL, rtol: float | None = None, atol: float = 0.0,
        strict: bool = False) -> dict:
    """The selftest report. ``model=None`` skips the model check. Model outputs are compared by
    relative error against a float32 error bound derived from the model (:func:`output_tolerances`);
    ``rtol`` replaces that bound, ``atol`` adds an absolute slack. With ``strict``, host syncs in a
    run or a model that does not capture as a CUDA graph also count as failures. A runtime
    dependency that does not import is a failure (and nothing else runs)."""
    report: dict = {"ok": False, "failures": [], "notes": []}
    dev = None
    report["failures"] += missing_dependencies(device)
    if not report["failures"]:
        try:
            dev = get_device(device)
        except GpuopsError as e:
            report["failures"].append(f"device {device!r}: {e}")
    report["environment"] = environment(dev)
    if dev is None:
        return report
    start = time.perf_counter()
    if dev.kind == "cuda":
        report["kernels"] = kernel_checks(dev)
        for fam in report["kernels"]:
            if "error" in fam:
                report["failures"].append(f"kernels {fam['family']}: {fam['error']}")
            for c in fam["cases"]:
                if not c.get("ok"):
                    report["failures"].append(f"kernel case {c['name']}: {c.get('error', 'mismatch')}")
    else:
        report["notes"].append("device cpu: no CUDA kernel checks (they need a CUDA device)")
        report["native"] = native_checks()
        if not report["native"]:
            report["notes"].append("native CPU kernels off or no C compiler: the NumPy code runs")
        for c in report["native"]:
            if not c.get("ok"):
                report["failures"].append(f"native kernel {c['name']}: {c.get('error', 'mismatch')}")
    if model:
        rec = {"model": model}
        guarded(rec, lambda: rec.update(model_check(model, dev, rtol, atol)))
        report["models"] = [rec]
        noted: set[str] = set()
        if "error" in rec and "runs" not in rec:
            report["failures"].append(f"model {model}: {rec['error']}")
        for r in rec.get("runs", []):
            if not r.get("ok"):
                report["failures"].append(f"model {model} {r['name']}: {r.get('error', 'mismatch')}")
            for o in r.get("outputs", []):
                if "note" in o and o["name"] not in noted:
                    noted.add(o["name"])
                    report["notes"].append(f"model {model} {r['name']}: output {o['name']!r} is the {o['note']}")
            if r.get("host_syncs"):
                msg = f"model {model} {r['name']}: {r['host_syncs']} host sync(s) per run at {r['sync_nodes']}"
                (report["failures"] if strict else report["notes"]).append(msg)
            if r.get("new_feeds_change_outputs") is False:
                report["notes"].append(f"model {model}: the second feeds give the same outputs, so a replay "
                                       "reading a stale feed would go unnoticed")
            graph = r.get("graph")
            if graph is not None and not graph.get("captured"):
                msg = (f"model {model}: not captured as a CUDA graph (node {graph.get('blocking_node')}: "
                       f"{graph.get('reason')})")
                (report["failures"] if strict else report["notes"]).append(msg)
    report["seconds"] = round(time.perf_counter() - start, 2)
    report["ok"] = not report["failures"]
    return report


def _rel_diff(case: dict) -> str:
    """A kernel case's largest difference relative to the largest value of the reference output."""
    if "max_rel_diff" not in case:
        return ""
    return f"rel diff {case['max_rel_diff']:.2g}" + (f" (abs {case['max_abs_diff']:.2g})" if case["max_abs_diff"] else "")


def format_report(report: dict) -> str:
    """The report as text, collect_env style."""
    env = report["environment"]
    lines = [f"gpuops selftest on {env.get('device') or 'no device'}", ""]
    for key in ("gpuops", "python", "platform", "numpy", "cupy", "cuda_runtime", "cuda_driver", "nvrtc", "cuda_path"):
        if key in env:
            lines.append(f"  {key:<13} {env[key]}")
    for g in env.get("gpus", []):
        extra = ", ".join(f"{k}={v}" for k, v in g.items() if k not in ("name", "kind"))
        lines.append(f"  {g['name']:<13} {extra}")
    if env.get("packages"):
        lines.append(f"  {'packages':<13} " + " ".join(env["packages"]))
    for fam in report.get("kernels", []):
        head = f"{fam['family']}: " + (f"{fam['instantiations']} instantiations of {fam['file']} compiled in "
                                      f"{fam['compile_s']:.2f} s" if "file" in fam else "CuPy's own kernels")
        lines += ["", head] + ([f"  ERROR {fam['error']}"] if "error" in fam else [])
        for c in fam["cases"]:
            status = "ok  " if c.get("ok") else "FAIL"
            lines.append(f"  {status} {c['name']:<36} {_rel_diff(c)}  {c.get('error', '')}".rstrip())
    if report.get("native"):
        lines += ["", "native CPU kernels (cpu_kernels/*.c) against the NumPy code"]
        for c in report["native"]:
            status = "ok  " if c.get("ok") else "FAIL"
            lines.append(f"  {status} {c['name'] + ' (' + c['file'] + ')':<36} {_rel_diff(c)}  "
                         f"{c.get('error', '')}".rstrip())
    for m in report.get("models", []):
        how = f" (tolerances: {m['tolerance_from']}; errors relative to each output's largest value)" \
            if "tolerance_from" in m else ""
        lines += ["", f"model {m['model']}{how}"] + ([f"  ERROR {m['error']}"] if "error" in m and "runs" not in m else [])
        for r in m.get("runs", []):
            status = "ok  " if r.get("ok") else "FAIL"
            parts = [f"vs {r['against']}: max rel err {r['max_rel_err']:.2g} (tolerance {r['tolerance']:.2g}, "
                     f"output {r['worst_output']!r})" if "max_rel_err" in r else
                     (f"vs {r['against']}" if "against" in r else "")]
            if "host_syncs" in r:
                parts.append(f"host syncs per run {r['host_syncs']}" + (f" {r['sync_nodes']}" if r["sync_nodes"] else ""))
            if "graph" in r:
                g = r["graph"]
                parts.append("graph captured" if g.get("captured") else
                             f"graph not captured (node {g.get('blocking_node')}: {g.get('reason')})")
            lines.append(f"  {status} {r['name']:<11} " + "; ".join(p for p in parts if p) +
                         (f"  {r['error']}" if "error" in r else ""))
    lines.append("")
    lines += [f"note: {n}" for n in report["notes"]]
    lines += [f"FAILED: {f}" for f in report["failures"]]
    lines.append("selftest passed" if report["ok"] else f"selftest FAILED ({len(report['failures'])} problem(s))")
    return "\n".join(lines)
