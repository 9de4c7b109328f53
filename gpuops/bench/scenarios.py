"""MLPerf-shaped inference scenarios: ``gpuops bench --scenario single-stream|offline|server|ray|all``.

- **SingleStream**: one query (batch 1) at a time; p50/p90/p99 latency.
- **Offline**: throughput over a sweep of batch sizes, and the best one.
- **Server**: queries arrive as a Poisson process at a target QPS (fixed seed) and queue for one
  session; the latency of a query runs from its arrival to its answer. Reports p99 under load at each
  QPS tried, and the highest QPS whose p99 stays under ``--p99-bound-ms`` (a bisection).
- **Ray**: rows/s through ``gpuops batch --ray`` machinery with 1 and 2 workers, and the scaling
  efficiency ``thr(2) / (2 * thr(1))``.

Cold time (session creation + first run) and warm-up are recorded apart from the timed runs. On a GPU
each scenario carries NVML telemetry: average/peak power, energy per inference, SM utilisation and
peak memory. Results: ``scenarios.json`` (with machine and software versions) and PNG plots (latency
histogram, throughput against batch size).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

import gpuops

from . import models as M
from .telemetry import GpuSampler

SCENARIOS = ("single-stream", "offline", "server", "ray")


def percentiles(times_s: list[float]) -> dict:
    ms = np.asarray(times_s) * 1e3
    return {"p50_ms": float(np.percentile(ms, 50)), "p90_ms": float(np.percentile(ms, 90)),
            "p99_ms": float(np.percentile(ms, 99)), "mean_ms": float(ms.mean()), "n": int(ms.size)}


def _telemetry(sampler: GpuSampler, seconds: float, inferences: int) -> dict | None:
    s = sampler.summary()
    if s is None:
        return None
    power = s["power_w"]
    return {"power_avg_w": power["mean"], "power_peak_w": power["max"],
            "energy_per_inference_j": power["mean"] * seconds / max(inferences, 1),
            "sm_util_avg_pct": s["gpu_util"]["mean"], "mem_peak_bytes": s["mem_used"]["max"]}


class Target:
    """A model at a batch size: its session, feeds and the device index for telemetry."""

    def __init__(self, bm: M.BenchModel, device: str, batch: int = 1):
        t0 = time.perf_counter()
        self.model = bm.make(batch)
        self.feeds = bm.feeds(self.model, batch, np.random.default_rng(0))
        self.session = gpuops.InferenceSession(self.model, device=device)
        self.session.run(None, self.feeds)
        self.cold_s = time.perf_counter() - t0
        self.gpu = self.session.device.index if self.session.device.kind == "cuda" else None

    def warm(self, runs: int) -> float:
        t0 = time.perf_counter()
        for _ in range(runs):
            self.session.run(None, self.feeds)
        return time.perf_counter() - t0

    def once(self) -> float:
        t = time.perf_counter()
        self.session.run(None, self.feeds)
        return time.perf_counter() - t


def single_stream(bm: M.BenchModel, device: str, queries: int, warmup: int) -> dict:
    t = Target(bm, device, 1)
    warm_s = t.warm(warmup)
    with GpuSampler(t.gpu or 0) as sampler:
        t0 = time.perf_counter()
        times = [t.once() for _ in range(queries)]
        wall = time.perf_counter() - t0
    return {"scenario": "single-stream", "cold_ms": t.cold_s * 1e3, "warmup_ms": warm_s * 1e3,
            "latency": percentiles(times), "samples_ms": [x * 1e3 for x in times],
            "telemetry": _telemetry(sampler, wall, queries)}


def offline(bm: M.BenchModel, device: str, batches: list[int], runs: int, warmup: int) -> dict:
    sweep = []
    for b in (batches if bm.batchable else [1]):
        t = Target(bm, device, b)
        warm_s = t.warm(warmup)
        with GpuSampler(t.gpu or 0) as sampler:
            t0 = time.perf_counter()
            times = [t.once() for _ in range(runs)]
            wall = time.perf_counter() - t0
        sweep.append({"batch": b, "cold_ms": t.cold_s * 1e3, "warmup_ms": warm_s * 1e3,
                      "throughput": b * runs / wall, "latency": percentiles(times),
                      "telemetry": _telemetry(sampler, wall, b * runs)})
    best = max(sweep, key=lambda r: r["throughput"])
    return {"scenario": "offline", "sweep": sweep, "best_batch": best["batch"], "best_throughput": best["throughput"]}


def serve(target: Target, qps: float, queries: int, seed: int) -> list[float]:
    """Latencies of ``queries`` Poisson arrivals at ``qps`` queued for one session (real time)."""
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(1.0 / qps, queries))
    start = time.perf_counter()
    latencies = []
    for arrival in arrivals:  # a query that arrived while the session was busy has been waiting
        now = time.perf_counter() - start
        if now < arrival:
            time.sleep(arrival - now)
        target.once()
        latencies.append(time.perf_counter() - start - arrival)
    return latencies


def server(bm: M.BenchModel, device: str, qps: float | None, queries: int, p99_bound_ms: float, seed: int,
           warmup: int, steps: int = 5) -> dict:
    t = Target(bm, device, 1)
    warm_s = t.warm(warmup)
    service = np.median([t.once() for _ in range(5)])
    qps = qps or 0.5 / service  # half of what one session can serve
    tried = []
    with GpuSampler(t.gpu or 0) as sampler:
        t0 = time.perf_counter()
        p = percentiles(serve(t, qps, queries, seed))
        wall = time.perf_counter() - t0
        tried.append({"qps": qps, **p})
        lo, hi = 0.0, 1.0 / service  # the session cannot serve more than 1/service QPS for long
        for _ in range(steps):
            mid = (lo + hi) / 2
            r = percentiles(serve(t, mid, queries, seed))
            tried.append({"qps": mid, **r})
            lo, hi = (mid, hi) if r["p99_ms"] <= p99_bound_ms else (lo, mid)
    ok = [r["qps"] for r in tried if r["p99_ms"] <= p99_bound_ms]
    return {"scenario": "server", "cold_ms": t.cold_s * 1e3, "warmup_ms": warm_s * 1e3, "target_qps": qps,
            "latency_at_target": p, "p99_bound_ms": p99_bound_ms, "max_qps_under_bound": max(ok) if ok else None,
            "tried": tried, "seed": seed, "telemetry": _telemetry(sampler, wall, queries)}


def ray_scaling(bm: M.BenchModel, device: str, rows: int, batch: int) -> dict:
    """Rows/s of gpuops.ray with 1 and 2 workers on a local Ray (CPU here; one actor per GPU on a GPU box),
    actor start-up included, as a batch job pays it."""
    try:
        import ray
    except ImportError:
        return {"scenario": "ray", "error": "Ray is not installed (pip install 'gpuops[ray]')"}
    from gpuops import ray as gray

    model = bm.make(batch)
    feeds = bm.feeds(model, rows, np.random.default_rng(0))
    out = {"scenario": "ray", "rows": rows, "batch": batch, "workers": {}}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        gray.run_table(model, {k: v for k, v in feeds.items()}, batch_size=batch, device=device, workers=1)  # warm
        for n in (1, 2):
            t0 = time.perf_counter()
            gray.run_table(model, feeds, batch_size=batch, device=device, workers=n)
            out["workers"][n] = {"rows_per_s": rows / (time.perf_counter() - t0)}
    finally:
        ray.shutdown()
    out["scaling_efficiency"] = out["workers"][2]["rows_per_s"] / (2 * out["workers"][1]["rows_per_s"])
    return out


def plots(result: dict, out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    paths = []
    for r in result["results"]:
        if r.get("scenario") == "single-stream" and "samples_ms" in r:
            fig, ax = plt.subplots(figsize=(6, 4))
            ax.hist(r["samples_ms"], bins=40)
            for k, color in (("p50_ms", "tab:green"), ("p90_ms", "tab:orange"), ("p99_ms", "tab:red")):
                ax.axvline(r["latency"][k], ls="--", lw=1, color=color, label=f"{k[:3]} {r['latency'][k]:.2f} ms")
            ax.set_xlabel("latency (ms)")
            ax.set_ylabel("queries")
            ax.set_title(f"SingleStream latency: {r['model']} on {r['device']}")
            ax.legend(fontsize=8)
            paths.append(out / f"latency_{r['model']}.png")
        elif r.get("scenario") == "offline":
            fig, ax = plt.subplots(figsize=(6, 4))
            ax.plot([s["batch"] for s in r["sweep"]], [s["throughput"] for s in r["sweep"]], "o-")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("batch size")
            ax.set_ylabel("items/s")
            ax.set_title(f"Offline throughput: {r['model']} on {r['device']}")
            paths.append(out / f"throughput_{r['model']}.png")
        else:
            continue
        fig.tight_layout()
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


def run(a, environment) -> int:
    """The ``--scenario`` entry of ``gpuops bench``."""
    chosen = SCENARIOS if a.scenario == "all" else tuple(s.strip() for s in a.scenario.split(","))
    unknown = [s for s in chosen if s not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}; choose from {list(SCENARIOS)} or 'all'")
    names = [n for n in a.models.split(",") if n] or ["transformer_encoder"]
    queries = 30 if a.quick else 200
    batches = [int(b) for b in a.batch.split(",")] if a.batch != "1" else ([1, 4, 16] if a.quick else [1, 2, 4, 8, 16, 32, 64])
    results = []
    for dev in a.device.split(","):
        for bm in M.suite(names):
            for s in chosen:
                t0 = time.perf_counter()
                if s == "single-stream":
                    r = single_stream(bm, dev, queries, a.warmup)
                elif s == "offline":
                    r = offline(bm, dev, batches, max(3, queries // 10), a.warmup)
                elif s == "server":
                    r = server(bm, dev, a.qps, queries, a.p99_bound_ms, a.seed, a.warmup, steps=3 if a.quick else 6)
                else:
                    r = ray_scaling(bm, dev, rows=256 if a.quick else 4096, batch=16 if a.quick else 64)
                r.update(model=bm.name, device=dev, seconds=time.perf_counter() - t0)
                results.append(r)
                print(_summary(r), flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"env": environment(a.device), "results": results}
    (out / "scenarios.json").write_text(json.dumps(result, indent=1, default=str))
    for p in [out / "scenarios.json", *plots(result, out)]:
        print(f"wrote {p}")
    return 0


def _summary(r: dict) -> str:
    head = f"{r['scenario']:>13}  {r['model']} on {r['device']}: "
    if "error" in r:
        return head + r["error"]
    if r["scenario"] == "single-stream":
        lat = r["latency"]
        return head + f"p50 {lat['p50_ms']:.2f} ms, p90 {lat['p90_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms (cold {r['cold_ms']:.0f} ms)"
    if r["scenario"] == "offline":
        return head + f"best {r['best_throughput']:.1f} items/s at batch {r['best_batch']}"
    if r["scenario"] == "server":
        return head + (f"p99 {r['latency_at_target']['p99_ms']:.2f} ms at {r['target_qps']:.1f} QPS; max QPS with p99 <= "
                       f"{r['p99_bound_ms']} ms: {r['max_qps_under_bound'] or 0:.1f}")
    return head + (f"{r['workers'][1]['rows_per_s']:.0f} rows/s with 1 worker, {r['workers'][2]['rows_per_s']:.0f} "
                   f"with 2 (scaling efficiency {r['scaling_efficiency']:.2f})")
