"""Per-``evaluate()`` time of MDF models: gpuops' MDFSession vs modeci-mdf's reference engine.

    python -m benchmarks.mdf [--device cpu] [--examples DIR] [--out DIR] [--quick]

Models: ``Simple.json`` and ``converted/mlp_pure_mdf.json`` (the MLP; the goal is >= 20x on cpu).
Both engines evaluate the same graph repeatedly in one process after warm-up (the reference's
stdout chatter goes to a buffer); the outputs are checked to agree. Prints one JSON document, and
writes mdf.json under --out.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import gzip
import io
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

MODELS = ["Simple.json", "converted/mlp_pure_mdf.json"]
DEFAULT_EXAMPLES = Path(__file__).resolve().parents[1] / "tests" / "mdf" / "examples"


@functools.lru_cache(maxsize=None)
def examples_dir(src: Path = DEFAULT_EXAMPLES) -> Path:
    """The MDF examples as plain files: ``src`` itself, or (when it holds ``*.json.gz``) a temporary
    copy with those unpacked, removed at exit."""
    src = Path(src)
    packed = sorted(src.rglob("*.json.gz"))
    if not packed:
        return src
    dst = Path(tempfile.mkdtemp(prefix="gpuops-mdf-examples-"))
    atexit.register(shutil.rmtree, dst, True)
    shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.gz"))
    for f in packed:
        with gzip.open(f) as z:
            (dst / f.relative_to(src).with_suffix("")).write_bytes(z.read())
    return dst


def per_call_ms(fn, min_time: float, repeat: int) -> dict:
    """Median and best of ``repeat`` batches; each batch calls ``fn`` for about ``min_time`` seconds."""
    fn()
    n, t = 1, 0.0
    while t < min_time / 4:  # size a batch
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        n *= 2
    n = max(1, int(n * min_time / max(t, 1e-9) / 2))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - t0) / n * 1e3)
    return {"median_ms": float(np.median(times)), "min_ms": float(min(times)), "calls": n * repeat}


def bench(path: Path, device: str, min_time: float, repeat: int) -> dict:
    from modeci_mdf.execution_engine import EvaluableGraph
    from modeci_mdf.utils import load_mdf

    from gpuops.mdf import MDFSession

    s = MDFSession(path, device=device)
    ours = s.run()
    sync = None
    if s.device.kind == "cuda":
        sync = s.device.lib.cuda.Device(s.device.index).synchronize
    rec = {"model": path.name, "device": str(s.device)}
    rec["gpuops"] = per_call_ms(s.run, min_time, repeat)
    rec["gpuops_device_outputs"] = per_call_ms(
        lambda: (s.run(output_device="device"), sync and sync()), min_time, repeat)
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink):
        eg = EvaluableGraph(load_mdf(str(path)).graphs[0], verbose=False)

        def ref_run():
            eg.evaluate()
            sink.seek(0)
            sink.truncate()

        ref_run()
        rec["modeci_mdf"] = per_call_ms(ref_run, min_time, max(3, repeat // 2))
    diffs = []
    for nid, en in eg.enodes.items():
        for pid, e in en.evaluable_outputs.items():
            diffs.append(float(np.max(np.abs(np.asarray(e.curr_value, np.float64) - ours[f"{nid}.{pid}"]))))
    rec["max_abs_diff"] = max(diffs)
    rec["speedup"] = rec["modeci_mdf"]["median_ms"] / rec["gpuops"]["median_ms"]
    return rec


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--examples", type=Path, default=DEFAULT_EXAMPLES)
    p.add_argument("--out", type=Path)
    p.add_argument("--quick", action="store_true", help="shorter timing (a smoke test)")
    a = p.parse_args(argv)
    try:
        import modeci_mdf  # noqa: F401
    except ImportError:
        print("modeci-mdf is not installed (pip install 'gpuops[mdf]'): nothing to compare with")
        return 0
    if not a.examples.is_dir():
        print(f"no MDF examples at {a.examples}")
        return 1
    examples = examples_dir(a.examples)
    min_time, repeat = (0.05, 3) if a.quick else (0.5, 7)
    import modeci_mdf
    import gpuops

    runs = [bench(examples / m, a.device, min_time, repeat) for m in MODELS]
    doc = {"python": platform.python_version(), "gpuops": gpuops.__version__,
           "modeci_mdf": getattr(modeci_mdf, "__version__", "?"), "runs": runs}
    text = json.dumps(doc, indent=1)
    print(text)
    for r in runs:
        print(f"{r['model']:<22} {r['device']:<7} gpuops {r['gpuops']['median_ms'] * 1e3:9.1f} us   "
              f"modeci_mdf {r['modeci_mdf']['median_ms'] * 1e3:10.1f} us   x{r['speedup']:.0f}", file=sys.stderr)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "mdf.json").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
