"""Models on cuda, node by node and with ``cuda_graph=True``, against gpuops' cpu path.

    python3 -m benchmarks.gpu.light OUT/perf.json --light squeezenet,resnet50 --zoo cnn,bert,gpt

``--light``: the onnx package's light models (``light:NAME``) with their logits (the input of the
final Softmax) added as graph outputs: their constant weights make the softmax outputs ill-conditioned
(uniform, or dominated by rounding), so the verdict is on the logits, relative to max |logit|; the cpu
path is also checked against onnx's stored softmax outputs (reported, not judged). ``--zoo``: the
test zoo's exporter-shaped models (tests/zoo/models.py) in their dynamic-axes form, every output
judged, run at batch 2, replayed with new values, then at batch 3 (a new shape signature).

For each: host syncs per run (outputs left on the device), the session's ``cuda_graph_status()``,
latency (host feeds and outputs, as a caller sees it). Records go under ``light`` and ``zoo``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

import numpy as np
import onnx
from onnx import numpy_helper

import gpuops
from gpuops import selftest
from gpuops.cli import resolve_model_path

from .common import MODE, REAL, RTOL, SYNCS, cuda_device, device_sync, diffs, fmt, merge, second_feeds, short, timed, worst

LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
         "vgg19", "zfnet512"]
ZOO = ["cnn", "bert", "gpt"]


def _cuda_runs(rec: dict, model, feeds: dict, feeds2: dict, want: list, want2: list, judged: list[int], dev,
               extra_shape: tuple[dict, list] | None = None) -> None:
    """The cuda session (node by node) and the cuda_graph session of ``model`` into ``rec``."""
    host = dev.to_host
    sync = lambda: device_sync(dev)  # noqa: E731
    s = gpuops.InferenceSession(model, device="cuda")
    s.run(None, feeds)  # compiles the kernels, warms the pool
    got, rec["cuda_syncs_per_run"], rec["cuda_sync_sites"] = SYNCS.measure(
        dev, lambda: s.run(None, feeds, output_device="device"))
    rec["cuda_vs_cpu"] = diffs(got, want, host)
    s.run(None, feeds, profile=True)
    rec["cuda_gpuops_counted_syncs"] = s.last_profile["host_syncs"]
    rec["cuda_latency"] = timed(lambda: s.run(None, feeds), sync)
    rec["cuda_memory"] = s.memory_stats()
    s.close()

    g = gpuops.InferenceSession(model, device="cuda", cuda_graph=True)
    first = g.run(None, feeds)  # captures (or finds the node that cannot be captured)
    rec["graph_status"] = g.cuda_graph_status()
    rec["graph_vs_cpu"] = diffs(first, want, host)
    replay, rec["graph_syncs_per_replay"], rec["graph_sync_sites"] = SYNCS.measure(
        dev, lambda: g.run(None, feeds2, output_device="device"))
    rec["graph_replay_vs_cpu"] = diffs(replay, want2, host)
    rec["graph_latency"] = timed(lambda: g.run(None, feeds), sync)
    if extra_shape is not None:  # another batch: a new shape signature, captured on its own
        feeds3, want3 = extra_shape
        rec["graph_new_shape_vs_cpu"] = diffs(g.run(None, feeds3), want3, host)
        rec["graph_status_new_shape"] = g.cuda_graph_status()
    rec["graph_memory"] = g.memory_stats()
    rec["graph_pools"] = graph_pools(g.cuda_graph_status(per_signature=True))
    g.close()
    over = [p["over_warm_up"] for p in rec["graph_pools"]["signatures"] if p["over_warm_up"] > GRAPH_MEMORY_BOUND]
    if REAL and over:  # the stand-in's graph keeps every array it captured: there the bound cannot hold
        rec["problems"].append(f"a graph's pool holds {max(over):.2f}x its warm-up's > {GRAPH_MEMORY_BOUND}")

    for key in ("cuda_vs_cpu", "graph_vs_cpu", "graph_replay_vs_cpu", "graph_new_shape_vs_cpu"):
        if key in rec and worst(rec[key], judged) > RTOL:
            rec["problems"].append(f"{key}: {fmt(worst(rec[key], judged))} of max |ref| > {RTOL:g}")


GRAPH_MEMORY_BOUND = 1.1
"""A captured graph's own pool against the warm-up run's, on the same stream and pool: the capture may
reuse the warm-up's blocks but not take a second set (CuPy's pool keeps freed blocks per stream)."""


def graph_pools(status: dict) -> dict:
    """Each captured signature's pool bytes against the warm-up's high-water mark in that pool and the
    liveness minimum of its values (which leaves out the ops' scratch: im2col columns, GEMM results).
    The graphs' shared cuBLAS workspace (``blas_workspace_bytes``: 32 MiB on Hopper, taken once per
    session from the session's pool, not a graph's) is recorded beside them: on the light models it is
    most of the graph memory above the weights."""
    sigs = [{"shapes": s["shapes"], "memory_bytes": s["memory_bytes"], "warm_up_bytes": s["warm_up_bytes"],
             "planned_peak_bytes": s["planned_peak_bytes"],
             "over_warm_up": round(s["memory_bytes"] / max(s["warm_up_bytes"], 1), 3),
             "over_liveness": round(s["memory_bytes"] / max(s["planned_peak_bytes"], 1), 3)}
            for s in status.get("signatures", []) if s.get("captured")]
    return {"signatures": sigs, "blas_workspace_bytes": status.get("blas_workspace_bytes", 0)}


def light_inputs(path: str, inputs) -> tuple[dict, list]:
    """The feeds onnx's backend test runner gives a light model (``arange(n) / n`` in each input's
    shape) and the outputs stored beside it (``<model>_output_<i>.pb``)."""
    feeds = {}
    for a in inputs:
        n = int(np.prod(a.shape))
        feeds[a.name] = (np.arange(n, dtype=np.float32) / n).astype(np.float32).reshape(a.shape)
    prefix = path[: -len(".onnx")]
    stored = []
    while os.path.exists(f"{prefix}_output_{len(stored)}.pb"):
        stored.append(numpy_helper.to_array(onnx.load_tensor(f"{prefix}_output_{len(stored)}.pb")))
    return feeds, stored


def light_model(name: str, dev) -> dict:
    rec: dict = {"model": f"light:{name}", "problems": []}
    path = resolve_model_path(f"light:{name}")
    model = selftest.with_inner_outputs(path)  # the logits become graph outputs after the stored ones
    cpu = gpuops.InferenceSession(model, device="cpu")
    rec["outputs"] = [o.name for o in cpu.get_outputs()]
    feeds, stored = light_inputs(path, cpu.get_inputs())
    feeds2 = second_feeds(feeds)
    want, want2 = cpu.run(None, feeds), cpu.run(None, feeds2)
    judged = list(range(len(stored), len(want))) or list(range(len(want)))  # the logits
    rec["judged_outputs"] = [rec["outputs"][i] for i in judged]
    if stored:
        d = diffs(want[:len(stored)], stored)
        rec["cpu_vs_stored"] = {"ok": worst(d) <= 1e-3, "diffs": d,
                                "note": "the stored softmax outputs: reported, not judged (ill-conditioned)"}
    rec["cpu_latency"] = timed(lambda: cpu.run(None, feeds), reps=10, warm=1)
    _cuda_runs(rec, model, feeds, feeds2, want, want2, judged, dev)
    return rec


def zoo_model(name: str, dev, batch: int = 2) -> dict:
    from tests.zoo.models import BUILDERS

    rec: dict = {"model": f"zoo:{name}", "form": "dynamic axes", "batch": batch, "problems": []}
    zoo = BUILDERS[name]("batch")
    cpu = gpuops.InferenceSession(zoo.model, device="cpu")
    rec["outputs"] = [o.name for o in cpu.get_outputs()]
    feeds = zoo.feeds(batch, np.random.default_rng(0))
    feeds2 = zoo.feeds(batch, np.random.default_rng(1))
    feeds3 = zoo.feeds(batch + 1, np.random.default_rng(2))
    want, want2, want3 = (cpu.run(None, f) for f in (feeds, feeds2, feeds3))
    judged = list(range(len(want)))
    rec["cpu_latency"] = timed(lambda: cpu.run(None, feeds), reps=10, warm=1)
    _cuda_runs(rec, zoo.model, feeds, feeds2, want, want2, judged, dev, extra_shape=(feeds3, want3))
    return rec


def line(rec: dict) -> str:
    """One line per model, for the log and summary.txt."""
    judged = [i for i, o in enumerate(rec.get("outputs", [])) if o in rec.get("judged_outputs", rec.get("outputs", []))]
    rel = lambda k: fmt(worst(rec[k], judged)) if k in rec else "-"  # noqa: E731
    ms = lambda k: fmt(rec.get(k, {}).get("median_ms"), 3)  # noqa: E731
    status = rec.get("graph_status", {})
    graph = "captured" if status.get("captured") else f"not captured ({status.get('blocking_node')})" if status else "-"
    text = (f"{rec['model']:<18} {'ok ' if not rec['problems'] else 'BAD'} rel cuda {rel('cuda_vs_cpu')} "
            f"graph {rel('graph_vs_cpu')} replay {rel('graph_replay_vs_cpu')}"
            + (f" new-shape {rel('graph_new_shape_vs_cpu')}" if "graph_new_shape_vs_cpu" in rec else "")
            + f" | syncs {rec.get('cuda_syncs_per_run', '-')}/{rec.get('graph_syncs_per_replay', '-')} | graph {graph}"
            f" | ms cpu {ms('cpu_latency')} cuda {ms('cuda_latency')} graph {ms('graph_latency')}")
    pools = rec.get("graph_pools", {}).get("signatures", [])
    if pools:
        text += (f" | graph pool {max(p['over_warm_up'] for p in pools):.2f}x warm-up,"
                 f" {max(p['over_liveness'] for p in pools):.2f}x liveness"
                 f" (+ cuBLAS workspace {rec['graph_pools']['blas_workspace_bytes'] >> 20} MiB)")
    if "cpu_vs_stored" in rec and not rec["cpu_vs_stored"]["ok"]:
        text += " | cpu vs stored softmax differs (ill-conditioned; not judged)"
    if rec["problems"]:
        text += " | " + "; ".join(rec["problems"])[:300]
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    ap.add_argument("out", help="the JSON file to merge the records into")
    ap.add_argument("--light", default="", help="light model names, comma-separated")
    ap.add_argument("--zoo", default="", help="zoo builder names, comma-separated")
    ap.add_argument("--batch", type=int, default=2, help="the zoo models' batch")
    a = ap.parse_args(argv)
    dev = cuda_device()
    bad = 0
    for key, names, fn in (("light", a.light, light_model), ("zoo", a.zoo, zoo_model)):
        names = [n for n in names.split(",") if n]
        if not names:
            continue
        results = {"mode": MODE, "device": str(dev), "rtol_of_max": RTOL, "sync_counter_works": SYNCS.works(dev),
                   "models": []}
        for name in names:
            t0 = time.perf_counter()
            try:
                rec = fn(name, dev) if key == "light" else fn(name, dev, a.batch)
            except Exception as e:
                rec = {"model": f"{key}:{name}", "problems": [short(e)], "where": traceback.format_exc(limit=-4)[-2000:]}
            rec["seconds"] = round(time.perf_counter() - t0, 1)
            bad += bool(rec["problems"])
            results["models"].append(rec)
            merge(a.out, key, results)
            print(line(rec), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
