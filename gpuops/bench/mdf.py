"""Per-``evaluate()`` time of MDF models: gpuops' MDFSession vs modeci-mdf's reference engine.

    python -m gpuops.bench.mdf [--device cpu] [--examples DIR] [--out DIR] [--quick]

Models (``MODELS``; ``--quick``: ``QUICK``): ``Simple.json``, the converted MLP, the
condition-scheduled examples (goal: >= 20x modeci-mdf per evaluate), and batched sessions of the
FitzHugh-Nagumo, oscillator (``States``) and ``IAF_net`` examples (``name@batch=N``: N instances,
one parameter varied over the rows, one ``run(time_increment=...)`` per step; goal: the time per
row <= 1/50 of an unbatched gpuops evaluate; ``instance_steps_per_s`` is the throughput).
Both engines evaluate the same graph repeatedly in one process after warm-up (the reference's
stdout chatter goes to a buffer); the outputs are checked to agree on fresh engines stepped alike,
after each of ``AGREEMENT_STEPS`` evaluates (batched: row 0, which keeps the model's own parameters,
over 20 steps). ``ratio`` is gpuops' time over modeci-mdf's (``speedup`` its inverse). Prints one JSON document with the runs and the goal ``ratios``, and
writes mdf.json under --out. ``--device cpu,cuda`` runs both; ``--gpu-batch N`` adds FN with N
instances on each CUDA device (default 10^5 FitzHugh-Nagumo instances).

The examples are the repository's ``tests/mdf/examples`` (a clone has them; an installed gpuops
does not): pass ``--examples DIR`` otherwise.
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

MODELS = ["Simple.json", "converted/mlp_pure_mdf.json", "abc_conditions.json",
          "conditions/everyncalls_condition.json", "conditions/Composite_mdf_condition.json",
          "conditions/timeinterval_condition.json", "conditions/threshold_condition.json",
          "FN.mdf.json@batch=1024", "States.json@batch=1024", "RNN/IAF_net.json@batch=1024"]
QUICK = ["Simple.json", "converted/mlp_pure_mdf.json", "abc_conditions.json", "FN.mdf.json@batch=1024"]
# in a clone of the repository: <root>/gpuops/bench/mdf.py -> <root>/tests/mdf/examples
DEFAULT_EXAMPLES = Path(__file__).resolve().parents[2] / "tests" / "mdf" / "examples"


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


# batched models: (time increment, parameter varied per row)
BATCHED = {"FN.mdf.json": (0.00005, "Iext"), "States.json": (0.01, "amp"), "IAF_net.json": (0.1, "tau")}
GOALS = {"conditions": 20, "batched_per_row": 50}


def model_spec(path: Path) -> tuple[Path, int | None]:
    """``dir/name.json@batch=N`` -> (the example as a plain file, N); gzipped examples are unpacked."""
    path = Path(path)
    name, _, batch = path.name.partition("@batch=")
    path = path.with_name(name)
    if not path.exists() and path.with_name(name + ".gz").exists():
        root = next(p for p in path.parents if (p / "EXPECTED.json").exists())
        path = examples_dir(root) / path.relative_to(root)
    return path, int(batch) if batch else None


def _reference(path: Path):
    from modeci_mdf.execution_engine import EvaluableGraph
    from modeci_mdf.utils import load_mdf

    sink = io.StringIO()
    with contextlib.redirect_stdout(sink):
        eg = EvaluableGraph(load_mdf(str(path)).graphs[0], verbose=False)

    def evaluate(dt=None):
        with contextlib.redirect_stdout(sink):
            eg.evaluate(time_increment=dt)
        sink.seek(0)
        sink.truncate()

    return eg, evaluate


def _max_diff(eg, ours: dict, row=None) -> float:
    diffs = []
    for nid, en in eg.enodes.items():
        for pid, e in en.evaluable_outputs.items():
            mine = ours[f"{nid}.{pid}"]
            mine = mine[row] if row is not None else mine
            diffs.append(float(np.max(np.abs(np.asarray(e.curr_value, np.float64) - mine))))
    return max(diffs)


def bench(path: Path, device: str, min_time: float, repeat: int) -> dict:
    """One model: gpuops per evaluate against modeci-mdf's engine. ``name@batch=N``: a batched
    session of N instances (one parameter varied over the rows), timed per row, against an unbatched
    gpuops evaluate and modeci-mdf's."""
    from gpuops.mdf import MDFSession

    path, batch = model_spec(path)
    if batch is not None:
        return bench_batched(path, batch, device, min_time, repeat)
    s = MDFSession(path, device=device)
    s.run()
    sync = None
    if s.device.kind == "cuda":
        sync = s.device.lib.cuda.Device(s.device.index).synchronize
    rec = {"model": path.name, "device": str(s.device)}
    if s.graph.conditions is not None:
        sched = s._schedule
        rec["scheduling"] = ("static sequence" if sched.static is not None else "gpuops state machine"
                             if sched.machine is not None else "graph-scheduler")
    rec["gpuops"] = per_call_ms(s.run, min_time, repeat)
    rec["gpuops_device_outputs"] = per_call_ms(
        lambda: (s.run(output_device="device"), sync and sync()), min_time, repeat)
    eg, ref_run = _reference(path)
    ref_run()
    rec["modeci_mdf"] = per_call_ms(ref_run, min_time, max(3, repeat // 2))
    rec["agreement_steps"] = AGREEMENT_STEPS
    rec["max_abs_diff"] = _agreement(path, device, AGREEMENT_STEPS)
    rec["speedup"] = rec["modeci_mdf"]["median_ms"] / rec["gpuops"]["median_ms"]
    rec["ratio"] = 1 / rec["speedup"]  # gpuops / modeci-mdf, the direction of every gpuops benchmark ratio
    if "scheduling" in rec:
        rec["goal_speedup"] = GOALS["conditions"]
    return rec


AGREEMENT_STEPS = 5


def _agreement(path: Path, device: str, steps: int) -> float:
    """Max |diff| between a fresh gpuops session and a fresh modeci-mdf engine, compared after each of
    ``steps`` evaluates (the timed ones have advanced each engine a different number of steps)."""
    from gpuops.mdf import MDFSession

    s = MDFSession(path, device=device)
    eg, ref_run = _reference(path)
    worst = 0.0
    for _ in range(steps):
        ours = s.run()
        ref_run()
        worst = max(worst, _max_diff(eg, ours))
    return worst


def bench_batched(path: Path, n: int, device: str, min_time: float, repeat: int) -> dict:
    from gpuops.mdf import MDFSession

    dt, param = BATCHED[path.name]
    single = MDFSession(path, device=device)
    single.run()
    default = next(p for node in single._nodes.values() for p in node.params if p.id == param).known()
    values = np.asarray(default, np.float64) * np.linspace(1, 1.5, n)  # row 0: the model's own value
    batched = MDFSession(path, device=device, batch=n)
    batched.run(params={param: values})
    sync = (lambda: None) if batched.device.kind != "cuda" else batched.device.lib.cuda.Device(
        batched.device.index).synchronize
    rec = {"model": f"{path.name} batch={n}", "device": str(batched.device), "batch": n,
           "time_increment": dt, "varied_parameter": param}
    row_ms = per_call_ms(lambda: (batched.run(time_increment=dt, output_device="device"), sync()), min_time, repeat)
    rec["batched_step"] = row_ms
    rec["gpuops"] = {k: v / n if k.endswith("_ms") else v for k, v in row_ms.items()}  # per row
    rec["gpuops_unbatched"] = per_call_ms(lambda: single.run(time_increment=dt), min_time, repeat)
    eg, ref_run = _reference(path)
    ref_run()
    rec["modeci_mdf"] = per_call_ms(lambda: ref_run(dt), min_time, max(3, repeat // 2))
    rec["instance_steps_per_s"] = n / (row_ms["median_ms"] / 1e3)
    rec["per_row_vs_unbatched"] = rec["gpuops_unbatched"]["median_ms"] / rec["gpuops"]["median_ms"]
    rec["goal_per_row_vs_unbatched"] = GOALS["batched_per_row"]
    rec["speedup"] = rec["modeci_mdf"]["median_ms"] / rec["gpuops"]["median_ms"]
    rec["ratio"] = 1 / rec["speedup"]  # gpuops per row / modeci-mdf per evaluate
    # agreement: row 0 (the model's own parameters) against the reference after the same steps
    check = MDFSession(path, device=device, batch=min(n, 4))
    check.run(params={param: values[:4]})
    eg, ref_run = _reference(path)
    ref_run()
    for _ in range(20):
        out = check.run(time_increment=dt)
        ref_run(dt)
    rec["max_abs_diff"] = _max_diff(eg, out, row=0)
    return rec


def ratios(runs: list[dict]) -> dict:
    """The MDF goals (``GOALS``): a condition-scheduled model at least 20x modeci-mdf per evaluate; a
    batched session's time per row at most 1/50 of an unbatched gpuops evaluate."""
    out = {}
    for r in runs:
        if "error" in r:
            continue
        if "goal_speedup" in r:
            out[f"conditions {r['model']} {r['device']} speedup"] = round(r["speedup"], 1)
        if "per_row_vs_unbatched" in r:
            out[f"batched {r['model']} {r['device']} per_row_vs_unbatched"] = round(r["per_row_vs_unbatched"], 1)
            out[f"batched {r['model']} {r['device']} instance_steps_per_s"] = round(r["instance_steps_per_s"])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N; comma-separated for several")
    p.add_argument("--examples", type=Path, default=DEFAULT_EXAMPLES,
                   help="the MDF examples folder (default: the repository's tests/mdf/examples)")
    p.add_argument("--out", type=Path, help="also write mdf.json into this folder")
    p.add_argument("--quick", action="store_true", help="shorter timing and fewer models (a smoke test)")
    p.add_argument("--gpu-batch", type=int, default=100_000, help="FN instances on CUDA devices (0: none)")
    a = p.parse_args(argv)
    try:
        import modeci_mdf  # noqa: F401
    except ImportError:
        print("python -m gpuops.bench.mdf needs modeci-mdf: pip install 'gpuops[mdf]' (nothing to compare with)",
              file=sys.stderr)
        return 2
    if a.gpu_batch < 0:
        p.error(f"--gpu-batch must be at least 0, got {a.gpu_batch}")
    if not a.examples.is_dir():
        print(f"no MDF examples at {a.examples}: they are the repository's tests/mdf/examples; pass --examples DIR",
              file=sys.stderr)
        return 1
    examples = examples_dir(a.examples)
    min_time, repeat = (0.05, 3) if a.quick else (0.5, 7)
    import modeci_mdf
    import gpuops

    models = QUICK if a.quick else MODELS
    runs = []
    for dev in a.device.split(","):
        extra = [f"FN.mdf.json@batch={a.gpu_batch}"] if a.gpu_batch and dev.startswith("cuda") else []
        for m in models + extra:
            try:
                runs.append(bench(examples / m, dev, min_time, repeat))
            except gpuops.GpuopsError as e:
                runs.append({"model": m, "device": dev, "error": str(e)})
    from .machine import describe

    doc = {"python": platform.python_version(), "gpuops": gpuops.__version__, "machine": describe(),
           "modeci_mdf": getattr(modeci_mdf, "__version__", "?"), "goals": GOALS, "ratios": ratios(runs),
           "runs": runs}
    text = json.dumps(doc, indent=1)
    print(text)
    for r in runs:
        if "error" in r:
            print(f"{r['model']:<34} {r['device']:<7} error: {r['error']}", file=sys.stderr)
            continue
        extra = f"   per row x{r['per_row_vs_unbatched']:.0f} vs unbatched" if "per_row_vs_unbatched" in r else ""
        print(f"{r['model']:<34} {r['device']:<7} gpuops {r['gpuops']['median_ms'] * 1e3:9.2f} us   "
              f"modeci_mdf {r['modeci_mdf']['median_ms'] * 1e3:10.1f} us   x{r['speedup']:.0f}{extra}", file=sys.stderr)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "mdf.json").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
