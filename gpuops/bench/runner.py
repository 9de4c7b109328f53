"""Run the benchmark suite: ``gpuops bench [--quick] [--device auto] [--models a,b] [--out DIR]``
(or ``python -m gpuops.bench``).

Each model runs through gpuops and, in the same process, through every installed peer
(onnxruntime CPU, and its CUDA EP with onnxruntime-gpu; PyTorch for the generated models; the onnx
ReferenceEvaluator for small graphs; modeci-mdf for the MDF models), with warm-up and repeated timed runs; the report gives median/p90 latency, throughput, the ratio of
gpuops' median to each peer's (``ratio``, gpuops / peer, in every mode: below 1 means gpuops is
faster), whether outputs agree, gpuops' memory stats and, on a GPU, NVML telemetry. On the CPU every
runtime gets the same thread count (``--threads``, default gpuops' own default). Result files record
the machine (:mod:`gpuops.bench.machine`: CPU model, vector extensions, BLAS and its core type,
threads). A peer that is not installed is named, with how to install it, before the run starts.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import gpuops

from . import models as M
from .peers import onnxruntime_sessions, reference_evaluator
from .report import write_all
from .telemetry import GpuSampler
from .torch_peers import torch_peers


def time_runs(fn, feeds, warmup: int, repeat: int, budget_s: float) -> dict:
    for _ in range(warmup):
        fn(feeds)
    times = []
    t_end = time.perf_counter() + budget_s
    while len(times) < repeat and (len(times) < 2 or time.perf_counter() < t_end):
        t = time.perf_counter()
        fn(feeds)
        times.append(time.perf_counter() - t)
    return {"median_ms": float(np.median(times) * 1e3), "p90_ms": float(np.percentile(times, 90) * 1e3),
            "runs": len(times)}


def max_abs_diff(a: list, b: list) -> float:
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)))) if np.size(x) else 0.0
               for x, y in zip(a, b))


def bench_one(bm: M.BenchModel, batch: int, device: str, a) -> dict:
    rec = {"model": bm.name, "batch": batch, "device": device}
    model = bm.make(batch)
    feeds = bm.feeds(model, batch, np.random.default_rng(0))
    sess = gpuops.InferenceSession(model, device=device, cuda_graph=a.cuda_graph, threads=a.threads)
    rec["cuda_graph"] = a.cuda_graph
    rec["device"] = str(sess.device)
    ours = sess.run(None, feeds)
    with GpuSampler(sess.device.index if sess.device.kind == "cuda" else 0) as sampler:
        g = time_runs(lambda f: sess.run(None, f), feeds, a.warmup, a.repeat, a.budget)
    g["throughput"] = batch / (g["median_ms"] / 1e3)
    rec["gpuops"] = g
    rec["memory"] = sess.memory_stats()
    if sess.device.kind == "cuda":
        rec["telemetry"] = sampler.summary()
    rec["threads"] = a.threads
    peers = {**onnxruntime_sessions(model, rec["device"], a.threads),
             **torch_peers(bm.name, model, rec["device"], a.threads),
             **reference_evaluator(model)}
    rec["peers"], rec["agree"] = {}, True
    for name, fn in peers.items():
        try:
            theirs = fn(feeds)
            t = time_runs(fn, feeds, a.warmup, a.repeat if name != "onnx-reference" else 2, a.budget)
        except Exception as e:  # a peer that fails is reported, not fatal
            rec["peers"][name] = {"error": f"{type(e).__name__}: {e}"[:200]}
            continue
        diff = max_abs_diff(ours, theirs)
        scale = max(float(np.max(np.abs(np.asarray(x, np.float64)))) if np.size(x) else 0.0 for x in theirs)
        ok = diff <= a.atol + a.rtol * scale
        rec["agree"] &= ok
        rec["peers"][name] = {**t, "ratio": g["median_ms"] / t["median_ms"], "max_abs_diff": diff, "agree": ok}
    sess.close()
    return rec


def mdf_runs(a) -> list[dict]:
    """MDF models against modeci-mdf's engine (when it and the examples are present)."""
    from . import mdf

    if not installed("modeci_mdf") or not mdf.DEFAULT_EXAMPLES.is_dir():  # said before the run
        return []
    min_time, repeat = (0.05, 3) if a.quick else (0.5, 7)
    out = []
    for dev in a.device.split(","):
        for m in mdf.MODELS:
            try:
                out.append(mdf.bench(mdf.DEFAULT_EXAMPLES / m, dev, min_time, repeat))
            except gpuops.GpuopsError as e:
                out.append({"model": m, "device": dev, "error": str(e)})
    return out


# optional packages: import name -> (what it is called, how to install it)
OPTIONAL = {"onnxruntime": ("onnxruntime", "pip install onnxruntime"),
            "torch": ("torch", "pip install torch"),
            "modeci_mdf": ("modeci-mdf", "pip install 'gpuops[mdf]'"),
            "matplotlib": ("matplotlib", "pip install matplotlib"),
            "pynvml": ("nvidia-ml-py", "pip install nvidia-ml-py"),
            "threadpoolctl": ("threadpoolctl", "pip install threadpoolctl"),
            "ray": ("Ray", "pip install 'gpuops[ray]'")}


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def requirements(a) -> tuple[list[str], list[str]]:
    """What the chosen options need and is missing: (errors: the run cannot start; notes: the run
    goes on without that part). Checked before any work starts."""
    from .scenarios import SCENARIOS
    from .torch_peers import BUILDERS

    errors, notes = [], []

    def need(module, option):
        if not installed(module):
            name, how = OPTIONAL[module]
            errors.append(f"gpuops bench {option} needs {name}: {how}")

    def note(module, what):
        if not installed(module):
            name, how = OPTIONAL[module]
            notes.append(f"{name} is not installed, so {what} ({how})")

    names = [n for n in a.models.split(",") if n]
    if a.scenario:
        chosen = SCENARIOS if a.scenario == "all" else [s.strip() for s in a.scenario.split(",")]
        if "ray" in chosen and a.scenario == "all":
            note("ray", "the ray scenario is skipped")
        elif "ray" in chosen:
            need("ray", "--scenario ray")
        note("matplotlib", "the scenario plots are not drawn")
    elif a.corpus:
        need("onnxruntime", "--corpus")
    elif a.forest:
        need("onnxruntime", "--forest")
    elif a.peers:
        need("onnxruntime", "--peers")
        if a.conv_shapes:
            need("threadpoolctl", "--conv-shapes")
        note("matplotlib", "peers.png is not drawn")
    else:
        note("onnxruntime", "gpuops is compared with no onnxruntime peer")
        torch_models = [n for n in BUILDERS if not names or n in names]
        if torch_models:
            note("torch", f"{' and '.join(torch_models)} have no PyTorch peer")
        if not a.no_mdf:
            from . import mdf

            if not installed("modeci_mdf"):
                note("modeci_mdf", "the MDF models are skipped (or pass --no-mdf)")
            elif not mdf.DEFAULT_EXAMPLES.is_dir():
                notes.append("the MDF models are skipped: their examples are the repository's tests/mdf/examples, "
                             "not installed with gpuops (python -m gpuops.bench.mdf --examples DIR runs them)")
        note("matplotlib", "ratios.png and memory.png are not drawn")
    if not a.peers and _uses_cuda(a.device):
        note("pynvml", "no GPU telemetry is recorded")
    return errors, notes


def _uses_cuda(device: str) -> bool:
    devs = [d.strip() for d in device.split(",")]
    if any(d.startswith("cuda") for d in devs):
        return True
    return "auto" in devs and any(d["kind"] == "cuda" for d in gpuops.devices())


def environment(device: str, threads: int | None = None) -> dict:
    from .machine import cpu_model, describe

    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "python": platform.python_version(), "numpy": np.__version__, "gpuops": gpuops.__version__,
           "cpu": cpu_model(), "device": device, "threads": threads, "machine": describe(threads)}
    env["git_commit"] = git_commit()
    for mod in ("onnx", "onnxruntime", "cupy", "torch"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception:
            pass
    cuda = [d for d in gpuops.devices() if d["kind"] == "cuda"]
    env["gpu"] = cuda[0].get("device_name") if cuda and device != "cpu" else None
    env["devices"] = gpuops.devices()
    return env


def git_commit() -> str | None:
    """The commit of the checkout gpuops runs from (None for an installed gpuops: its folder is not
    the top of a git work tree)."""
    root = Path(gpuops.__file__).resolve().parents[1]
    try:
        top, head = subprocess.run(["git", "rev-parse", "--show-toplevel", "HEAD"], capture_output=True,
                                   text=True, cwd=root, check=True, timeout=10).stdout.splitlines()
    except Exception:
        return None
    return head if Path(top).resolve() == root else None


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value
    return parse


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
    return value


def _batches(text: str) -> str:
    parse = _int_at_least(1)
    for item in text.split(","):
        parse(item)
    return text


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gpuops bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto; comma-separated for several")
    ap.add_argument("--models", default="", help="comma-separated names (default: all)")
    ap.add_argument("--batch", default="1", type=_batches,
                    help="comma-separated batch sizes (light models run at 1)")
    ap.add_argument("--warmup", type=_int_at_least(0), default=2, help="untimed runs before the timed ones (default 2)")
    ap.add_argument("--repeat", type=_int_at_least(1), default=20,
                    help="timed runs per model and runtime, at most (default 20; see --budget)")
    ap.add_argument("--budget", type=_non_negative_float, default=10.0,
                    help="seconds of timed runs per model and runtime, after at least 2 runs (default 10)")
    ap.add_argument("--rtol", type=_non_negative_float, default=1e-3,
                    help="outputs agree when max |diff| <= atol + rtol * max |peer output| (default 1e-3)")
    ap.add_argument("--atol", type=_non_negative_float, default=1e-4, help="see --rtol (default 1e-4)")
    ap.add_argument("--quick", action="store_true", help="a few minutes on 2 CPU cores")
    ap.add_argument("--out", default="bench-results", help="folder for the result files (default bench-results)")
    ap.add_argument("--no-mdf", action="store_true", help="skip the MDF models")
    ap.add_argument("--peers", action="store_true",
                    help="CPU: gpuops and onnxruntime alternate run for run with the same thread count; "
                         "adds float16 variants, the dispatch chain and the CPU goals (light models <= 1.5x "
                         "onnxruntime, geomean <= 1.2x; float16 <= 3x float32; quantized_mlp, lstm <= 2x; "
                         "dispatch <= 1.5 us/node); needs onnxruntime")
    ap.add_argument("--threads", type=_int_at_least(1), default=None,
                    help="CPU threads of gpuops and of every CPU peer alike (onnxruntime's intra-op threads, "
                         "torch's threads), in every mode (default: gpuops' default, "
                         "gpuops.threads.default_threads(); --forest: 1; --corpus: 1 and 2)")
    ap.add_argument("--no-float16", action="store_true", help="--peers: skip the float16 variants")
    ap.add_argument("--corpus", action="store_true",
                    help="CPU: the corpus of real models (benchmarks/corpus/manifest.json) against onnxruntime, runs "
                         "alternating, at 1 and 2 threads (or --threads); needs onnxruntime")
    ap.add_argument("--forest", action="store_true",
                    help="a 500-tree, depth-8 tree ensemble on 100k rows against onnxruntime at equal threads "
                         "(--threads, default 1; goal: <= 1x); needs onnxruntime")
    ap.add_argument("--conv-shapes", action="store_true",
                    help="--peers: GFLOP/s of every light-model Conv shape against np.matmul of the same GEMM")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="CUDA: gpuops runs each model as a captured CUDA graph (InferenceSession(cuda_graph=True))")
    ap.add_argument("--scenario", default=None,
                    help="MLPerf-style scenarios instead of the suite: single-stream, offline, server, ray "
                         "(comma-separated) or all; --models picks the model (default transformer_encoder)")
    ap.add_argument("--qps", type=_non_negative_float, default=None,
                    help="--scenario server: target QPS (default: half capacity)")
    ap.add_argument("--p99-bound-ms", type=_non_negative_float, default=50.0,
                    help="--scenario server: p99 latency bound")
    ap.add_argument("--seed", type=_int_at_least(0), default=0, help="--scenario server: seed of the Poisson arrivals")
    return ap


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    errors, notes = requirements(a)
    for line in errors:
        print(line, file=sys.stderr)
    if errors:
        return 2
    for line in notes:
        print(f"gpuops bench: {line}", file=sys.stderr)
    if a.quick:
        a.warmup, a.repeat, a.budget = 1, 3, 1.0
    if a.forest:
        from .ml import run as run_forest

        return run_forest(a, lambda device: environment(device, a.threads))
    if a.corpus:
        from .corpus import run as run_corpus

        return run_corpus(a, lambda device: environment(device, a.threads))
    a.threads = a.threads or _default_threads()  # every runtime of the other modes gets this many
    if a.scenario:
        from .scenarios import run as run_scenarios

        return run_scenarios(a, lambda device: environment(device, a.threads))
    if a.peers:
        return peers_main(a)
    names = [n for n in a.models.split(",") if n]
    batches = [int(b) for b in a.batch.split(",")]
    suite = M.suite(names or None)
    jobs = [(bm, b, dev) for dev in a.device.split(",") for bm in suite
            for b in (batches if bm.batchable else [1])]
    try:
        from tqdm import tqdm
    except ImportError:
        def tqdm(x, **kw):
            return x
    runs = []
    bar = tqdm(jobs, desc="bench", unit="model", file=sys.stderr)
    for bm, b, dev in bar:
        if hasattr(bar, "set_postfix_str"):
            bar.set_postfix_str(f"{bm.name} b{b} {dev}")
        try:
            runs.append(bench_one(bm, b, dev, a))
        except gpuops.GpuopsError as e:
            runs.append({"model": bm.name, "batch": b, "device": dev, "error": str(e)})
    result = {"env": environment(a.device, a.threads), "settings": vars(a), "runs": runs,
              "mdf": [] if a.no_mdf else mdf_runs(a)}
    paths = write_all(result, Path(a.out))
    print(paths[1].read_text())
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0 if all("error" not in r and r["agree"] for r in runs) else 1


def _default_threads() -> int:
    try:
        from gpuops.threads import default_threads
    except ImportError:  # a gpuops from before threads= (a baseline checkout)
        return max(1, (os.cpu_count() or 2) // 2)
    return default_threads()


def peers_main(a) -> int:
    from . import cpu_peers

    result = cpu_peers.run(a)
    result = {"env": environment("cpu", a.threads), "settings": vars(a), **result}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "peers.json", out / "peers.md"]
    paths[0].write_text(json.dumps(result, indent=1, default=str))
    paths[1].write_text(cpu_peers.markdown(result))
    paths += cpu_peers.plot(result, out / "peers.png")
    print(paths[1].read_text())
    print("wrote " + ", ".join(str(p) for p in paths))
    # float16 variants may overflow where onnxruntime keeps float32 between nodes: reported, not fatal
    return 0 if all("error" not in r and (r.get("agree", True) or r["variant"] == "float16")
                    for r in result["runs"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
