"""The MLPerf-shaped bench scenarios: queueing arithmetic, and a quick run that writes JSON and plots."""

import json
import time

import numpy as np

from gpuops.bench import scenarios
from gpuops.bench import main as bench_main


class _Fixed:
    """A stand-in target whose every query takes ``service`` seconds."""

    def __init__(self, service):
        self.service = service

    def once(self):
        time.sleep(self.service)


def test_percentiles_are_numpys():
    times = list(np.random.default_rng(0).exponential(0.01, 101))
    p = scenarios.percentiles(times)
    for q in (50, 90, 99):
        assert p[f"p{q}_ms"] == np.percentile(np.asarray(times) * 1e3, q)
    assert p["n"] == 101


def test_server_queueing_latency():
    # far below capacity a query waits for nobody: latency ~ service time
    light = scenarios.serve(_Fixed(0.002), qps=20, queries=10, seed=0)
    assert min(light) >= 0.002 and np.median(light) < 0.02
    # far above capacity the queue grows: each query waits for every one before it
    heavy = scenarios.serve(_Fixed(0.002), qps=5000, queries=20, seed=0)
    assert heavy[-1] > 10 * 0.002 and heavy[-1] > heavy[0]


def test_quick_scenarios_write_json_and_plots(tmp_path):
    rc = bench_main(["--scenario", "single-stream,offline", "--quick", "--device", "cpu", "--models", "lstm",
                     "--batch", "1,2", "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "scenarios.json").read_text())
    assert result["env"]["numpy"] == np.__version__
    ss, off = result["results"]
    assert ss["scenario"] == "single-stream" and ss["latency"]["n"] == len(ss["samples_ms"]) > 0
    assert ss["latency"]["p50_ms"] <= ss["latency"]["p90_ms"] <= ss["latency"]["p99_ms"]
    assert ss["cold_ms"] > 0 and "warmup_ms" in ss
    assert [s["batch"] for s in off["sweep"]] == [1, 2]
    assert off["best_throughput"] == max(s["throughput"] for s in off["sweep"])
    assert (tmp_path / "latency_lstm.png").stat().st_size > 0
    assert (tmp_path / "throughput_lstm.png").stat().st_size > 0


def test_telemetry_energy_per_inference():
    class FakeSampler:
        def summary(self):
            return {"power_w": {"mean": 200.0, "max": 250.0}, "gpu_util": {"mean": 80.0, "max": 99.0},
                    "mem_used": {"mean": 1e9, "max": 2e9}}

    t = scenarios._telemetry(FakeSampler(), seconds=2.0, inferences=100)
    assert t == {"power_avg_w": 200.0, "power_peak_w": 250.0, "energy_per_inference_j": 200.0 * 2.0 / 100,
                 "sm_util_avg_pct": 80.0, "mem_peak_bytes": 2e9}


def test_no_telemetry_without_nvml():
    class NoSamples:
        def summary(self):
            return None

    assert scenarios._telemetry(NoSamples(), 1.0, 1) is None
