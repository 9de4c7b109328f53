"""The key numbers of a gpu_validate.sh run, from the files in its output folder, for summary.txt.

    python3 -m benchmarks.gpu.summary OUT
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from .common import fmt
from .light import line


def load(out: Path, name: str) -> dict:
    try:
        return json.loads((out / name).read_text())
    except FileNotFoundError:
        return {}
    except ValueError as e:
        return {"_error": f"{name}: {e}"}


def selftest_lines(st: dict) -> list[str]:
    if "ok" not in st:
        return [f"selftest: {st.get('_error', 'no report')}"] if st else []
    env = st.get("environment", {})
    out = [f"selftest ok={st['ok']} failures={len(st['failures'])}" + (f": {'; '.join(st['failures'])[:600]}"
                                                                         if st["failures"] else "")]
    out.append("  versions: " + ", ".join(f"{k} {env[k]}" for k in ("gpuops", "python", "numpy", "cupy", "cuda_runtime",
                                                                      "cuda_driver", "nvrtc") if k in env))
    out += [f"  note: {n}"[:300] for n in st.get("notes", [])]
    return out


def run_lines(model: str, res: dict) -> list[str]:
    out = []
    for key, r in res.get("runs", {}).items():
        if "host_feeds" not in r:
            out.append(f"{model} {key}: {r.get('problems') or r.get('error') or r.get('skipped') or r}"[:300])
            continue
        parts = [f"host {fmt(r['host_feeds']['median_ms'], 4)} ms"]
        if "device_feeds" in r:
            parts.append(f"device-resident {fmt(r['device_feeds']['median_ms'], 4)} ms")
        if "images_per_s" in r:
            parts.append(f"{r['images_per_s']} img/s")
        if "syncs_per_run" in r:
            parts.append(f"syncs {r['syncs_per_run']}")
        if "graph_status" in r:
            g = r["graph_status"]
            parts.append("graph captured" if g.get("captured") else f"graph not captured ({g.get('blocking_node')})")
        if "logits_rel_vs_ort" in r:
            parts.append(f"logits vs ort {fmt(r['logits_rel_vs_ort'])}")
        if r.get("problems"):
            parts.append("PROBLEM " + "; ".join(r["problems"])[:200])
        out.append(f"{model} {key}: " + ", ".join(parts))
    return out


def torch_lines(perf: dict) -> list[str]:
    out = []
    for key in ("torch_eager", "torch_compile"):
        rec = perf.get(key, {})
        if "skipped" in rec:
            out.append(f"{key}: SKIPPED ({rec['skipped']})")
        for k, v in rec.items():
            if isinstance(v, dict) and "median_ms" in v:
                out.append(f"{key} {k}: {fmt(v['median_ms'], 4)} ms" +
                           (f" (compile {v['compile_s']} s)" if "compile_s" in v else ""))
    ours = perf.get("resnet50", {}).get("runs", {})
    for b in (1, 32):
        theirs = perf.get("torch_eager", {}).get(f"eager_tf32_off_b{b}", {}).get("median_ms")
        best = [r["device_feeds"]["median_ms"] for k, r in ours.items()
                if k.startswith("gpuops_cuda") and k.endswith(f"_b{b}") and "device_feeds" in r]
        if theirs and best:
            out.append(f"resnet50 b{b}: gpuops (best, device-resident) {fmt(min(best), 4)} ms vs torch eager TF32 off "
                       f"{fmt(theirs, 4)} ms: torch/gpuops {min(best) and theirs / min(best):.2f}")
    return out


def conv_lines(conv: dict) -> list[str]:
    out = []
    for r in conv.get("shapes", []):
        text = (f"conv {r['shape']}: gpuops {r.get('gpuops_tflops', '-')} TFLOP/s, cupy.matmul {r.get('matmul_tflops', '-')}"
                f", cuDNN {r.get('cudnn_tflops', r.get('cudnn', '-'))}; rel diff vs ort {fmt(r.get('rel_diff_vs_ort'))}"
                f", vs cuDNN {fmt(r.get('rel_diff_vs_cudnn'))}")
        if r.get("problems"):
            text += " PROBLEM " + "; ".join(r["problems"])[:200]
        out.append(text)
    return out


def tests_lines(text: str) -> list[str]:
    """The result line of each pytest run in tests.txt, and its failed tests (10 at most)."""
    out = []
    for section in re.split(r"^== ", text, flags=re.M)[1:]:
        name = section.split(":", 1)[0]
        results = re.findall(r"^=*\s*(\d+ (?:passed|failed|skipped|error|deselected).*?)\s*=*$", section, re.M)
        failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", section, re.M)
        out.append(f"{name}: {results[-1] if results else 'no result line (see tests.txt)'}")
        out += [f"  FAILED {f}" for f in failed[:10]] + ([f"  ... {len(failed) - 10} more"] if len(failed) > 10 else [])
    return out


def main(argv=None) -> int:
    out = Path((argv or sys.argv[1:])[0])
    perf = load(out, "perf.json")
    lines = selftest_lines(load(out, "selftest.json"))
    tests = out / "tests.txt"
    if tests.exists():
        lines += tests_lines(tests.read_text(errors="replace"))
    for key in ("light", "zoo"):
        lines += [line(m) for m in perf.get(key, {}).get("models", [])]
    for key, res in perf.items():
        if isinstance(res, dict) and "runs" in res:
            lines += run_lines(key, res)
    lines += torch_lines(perf) + conv_lines(perf.get("conv", {}))
    memcheck = out / "memcheck.txt"
    if memcheck.exists():
        lines += [m for m in memcheck.read_text(errors="replace").splitlines() if "ERROR SUMMARY" in m][-1:]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
