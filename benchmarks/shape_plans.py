"""Shape-specialized CPU plans against the session's own plan and onnxruntime, at equal threads.

``python -m benchmarks.shape_plans [--threads 1] [--seconds 3]`` builds the zoo's BERT-like encoder
(dynamic batch and sequence axes) and GPT-2-like decoder (with past keys / values) at two widths
(the zoo's tiny one, where dispatch dominates, and hidden 256 / sequence 64), and times, alternating
run for run in one process: gpuops with ``shape_plans=0`` (before), gpuops with its specialized plan
(after), and onnxruntime (``intra_op_num_threads`` = ``inter_op_num_threads``'s 1 and ``--threads``).
Prints nodes, median milliseconds, the ratios gpuops / onnxruntime and, from ``profile=True``, the
time of the shape arithmetic before and after, and writes them as JSON
(``--out``), with the machine's CPU model, its vector extensions and the thread count.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np


def _cpu() -> dict:
    model, flags = platform.processor(), []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and not model:
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = [x for x in line.split(":", 1)[1].split() if x.startswith(("avx", "fma", "amx"))]
                    break
    except OSError:
        pass
    return {"model": model, "vector_extensions": sorted(set(flags))}


def _models(wide: bool):
    from tests.zoo import models as zoo

    if wide:
        zoo.HIDDEN, zoo.HEADS, zoo.SEQ, zoo.PAST, zoo.MAX_POS, zoo.VOCAB = 256, 4, 64, 32, 128, 1000
    else:
        zoo.HIDDEN, zoo.HEADS, zoo.SEQ, zoo.PAST, zoo.MAX_POS, zoo.VOCAB = 16, 2, 5, 3, 16, 24
    rng = np.random.default_rng(0)
    out = []
    for build in (zoo.bert, zoo.gpt):
        z = build("batch")
        out.append((f"{z.name}-h{zoo.HIDDEN}-s{zoo.SEQ}", z.model, z.feeds(1, rng)))
    return out


SHAPE_OPS = {"Shape", "Size", "Unsqueeze", "Squeeze", "Concat", "Slice", "Range", "ConstantOfShape", "Gather",
             "Cast", "Equal", "Sub", "Add", "Mul", "Div"}


def _profile(sess, feeds, runs: int = 20) -> dict:
    """Per run: the plan's node time (``profile=True``) and the part of it spent on shape arithmetic
    (the ops above on outputs of at most 64 bytes: shapes and indices, not activations)."""
    total = shape = 0.0
    for _ in range(runs):
        sess.run(None, feeds, profile=True)
        for n in sess.last_profile["nodes"]:
            total += n["wall_ms"]
            if n["op"] in SHAPE_OPS and n["output_bytes"] <= 64:
                shape += n["wall_ms"]
    return {"node_ms": total / runs, "shape_ms": shape / runs}


def _time(runners: dict, seconds: float) -> dict:
    for f in runners.values():
        for _ in range(3):
            f()
    times = {k: [] for k in runners}
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for k, f in runners.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def main(argv=None) -> dict:
    import onnxruntime as ort

    import gpuops

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    results = {"cpu": _cpu(), "threads": a.threads, "date": time.strftime("%Y-%m-%d"), "models": {}}
    for wide in (False, True):
        for name, model, feeds in _models(wide):
            so = ort.SessionOptions()
            so.intra_op_num_threads = so.inter_op_num_threads = a.threads
            o = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            before = gpuops.InferenceSession(model, device="cpu", threads=a.threads, shape_plans=0)
            after = gpuops.InferenceSession(model, device="cpu", threads=a.threads)
            for _ in range(2):
                after.run(None, feeds)
            (sig,) = after.shape_plan_status()["signatures"]
            ms = _time({"before": lambda: before.run(None, feeds), "after": lambda: after.run(None, feeds),
                        "onnxruntime": lambda: o.run(None, feeds)}, a.seconds)
            row = {"nodes_before": sig["base_nodes"], "nodes_after": sig["nodes"], "ms": ms,
                   "profile_before": _profile(before, feeds), "profile_after": _profile(after, feeds),
                   "ratio_before": ms["before"] / ms["onnxruntime"], "ratio_after": ms["after"] / ms["onnxruntime"]}
            results["models"][name] = row
            print(f"{name:18s} nodes {row['nodes_before']:4d} -> {row['nodes_after']:4d}  "
                  f"gpuops/onnxruntime {row['ratio_before']:.2f}x -> {row['ratio_after']:.2f}x  "
                  f"(ms: {ms['before']:.3f} -> {ms['after']:.3f}, onnxruntime {ms['onnxruntime']:.3f}; shape arithmetic "
                  f"{row['profile_before']['shape_ms']:.3f} of {row['profile_before']['node_ms']:.3f} ms -> "
                  f"{row['profile_after']['shape_ms']:.3f} of {row['profile_after']['node_ms']:.3f})", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
