"""The graph optimizer's effect on the light models' CPU latency (a measurement script, not a test).

    python -m gpuops.bench.optimizer_latency [--repeat N] [MODEL ...]

For each of the onnx package's light models (random inputs, seed 0), sessions at optimize="none",
"basic" and "all" run alternately on cpu (one warm-up each); prints the median latency per level, the
all/none ratio, node counts and session-creation time.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnx

import gpuops

from . import models as M

LEVELS = ("none", "basic", "all")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=sorted(M.LIGHT), choices=sorted(M.LIGHT), metavar="MODEL")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    print(f"{'model':14} {'nodes none->all':>16} {'create all s':>12} " + " ".join(f"{lv + ' ms':>10}" for lv in LEVELS)
          + f" {'all/none':>9}")
    for name in a.models:
        model = onnx.load(M.light_path(name))
        feeds = M.random_feeds(model, 1, np.random.default_rng(0))
        sessions, create = {}, {}
        for lv in LEVELS:
            t = time.perf_counter()
            sessions[lv] = gpuops.InferenceSession(model, device="cpu", optimize=lv)
            create[lv] = time.perf_counter() - t
            sessions[lv].run(None, feeds)
        times = {lv: [] for lv in LEVELS}
        for _ in range(a.repeat):
            for lv in LEVELS:
                t = time.perf_counter()
                sessions[lv].run(None, feeds)
                times[lv].append(time.perf_counter() - t)
        med = {lv: statistics.median(v) * 1e3 for lv, v in times.items()}
        nodes = f"{len(sessions['none'].plan.steps)}->{len(sessions['all'].plan.steps)}"
        print(f"{name:14} {nodes:>16} {create['all']:>12.2f} " + " ".join(f"{med[lv]:>10.1f}" for lv in LEVELS)
              + f" {med['all'] / med['none']:>9.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
