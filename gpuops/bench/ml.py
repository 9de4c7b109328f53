"""A large tree ensemble: gpuops against onnxruntime at equal threads.

    python -m gpuops.bench.ml [--trees 500] [--depth 8] [--rows 100000] [--threads 1] [--device cpu]
    gpuops bench --forest [...]   (the same, with the suite's --threads, --device, --repeat, --out)

The model is what the converters write for a random forest regressor: one TreeEnsembleRegressor
(ai.onnx.ml 3) of ``--trees`` complete trees of depth ``--depth`` (BRANCH_LEQ, random features and
thresholds, seeded), scored on ``--rows`` rows of ``--features`` standard-normal features. Both
runtimes run in this process, alternating run for run after a warm-up; the report gives each one's
median time and the ratio gpuops / onnxruntime (goal: <= 1.0 on the CPU), and checks that their
outputs agree (1e-4 of the output's magnitude: float32 sums over the trees, in different orders).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

GOAL = 1.0  # gpuops / onnxruntime on the CPU


def forest_model(trees: int, depth: int, features: int, seed: int = 0):
    """A TreeEnsembleRegressor of ``trees`` complete trees of ``depth`` levels, as skl2onnx writes them."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    inner, n = 2 ** depth - 1, 2 ** (depth + 1) - 1
    ids = np.arange(n)
    leaf = ids >= inner
    per_tree = dict(nodes_nodeids=ids, nodes_modes=np.where(leaf, "LEAF", "BRANCH_LEQ"),
                    nodes_truenodeids=np.where(leaf, 0, 2 * ids + 1), nodes_falsenodeids=np.where(leaf, 0, 2 * ids + 2))
    attrs = {k: np.tile(v, trees).tolist() for k, v in per_tree.items()}
    attrs["nodes_treeids"] = np.repeat(np.arange(trees), n).tolist()
    attrs["nodes_featureids"] = np.where(np.tile(leaf, trees), 0, rng.integers(features, size=trees * n)).tolist()
    attrs["nodes_values"] = np.where(np.tile(leaf, trees), 0.0, rng.normal(scale=0.8, size=trees * n)) \
        .astype(np.float32).tolist()
    attrs["target_treeids"] = np.repeat(np.arange(trees), inner + 1).tolist()
    attrs["target_nodeids"] = np.tile(ids[leaf], trees).tolist()
    attrs["target_ids"] = [0] * (trees * (inner + 1))
    attrs["target_weights"] = (rng.normal(size=trees * (inner + 1)) / trees).astype(np.float32).tolist()
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml", n_targets=1,
                            aggregate_function="SUM", **attrs)
    graph = helper.make_graph([node], "forest", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, features])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)],
                             ir_version=8)


def bench(trees=500, depth=8, rows=100_000, features=20, threads=1, device="cpu", repeat=5, warmup=1) -> dict:
    """Median seconds per run of gpuops and onnxruntime (alternating) and their ratio."""
    import onnxruntime as ort

    import gpuops

    model = forest_model(trees, depth, features)
    x = np.random.default_rng(1).normal(size=(rows, features)).astype(np.float32)
    blob = model.SerializeToString()
    t0 = time.perf_counter()
    sess = gpuops.InferenceSession(blob, device=device, threads=threads)
    create_gpuops = time.perf_counter() - t0
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    t0 = time.perf_counter()
    ref = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
    create_ort = time.perf_counter() - t0
    times = {"gpuops": [], "onnxruntime": []}
    first = {}
    runs = {"gpuops": lambda: sess.run(None, {"X": x})[0], "onnxruntime": lambda: ref.run(None, {"X": x})[0]}
    for i in range(warmup + repeat):
        for name, fn in runs.items():  # alternating, so that both see the same machine load
            t0 = time.perf_counter()
            out = fn()
            dt = time.perf_counter() - t0
            first.setdefault(name, out)
            if i >= warmup:
                times[name].append(dt)
    got, want = first["gpuops"], first["onnxruntime"]
    scale = float(np.abs(want).max()) or 1.0
    agree = bool(np.allclose(got, want, rtol=1e-4, atol=1e-4 * scale))
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"model": f"forest{trees}x{depth}", "trees": trees, "depth": depth, "rows": rows, "features": features,
            "threads": threads, "device": device, "repeat": repeat, "create_s": {"gpuops": create_gpuops,
                                                                                 "onnxruntime": create_ort},
            "median_s": med, "runs_s": times, "ratio": med["gpuops"] / med["onnxruntime"], "goal": GOAL,
            "agree": agree, "max_abs_diff": float(np.abs(got - want).max())}


def run(a, environment=None) -> int:
    """``gpuops bench --forest``: one forest run with the suite's ``--threads`` (default 1), ``--device``
    (``auto`` is the CPU: the goal is against onnxruntime's CPU), ``--repeat`` (at most 5) and
    ``--out``; ``--quick`` scores 10,000 rows once. Writes forest.json."""
    result = bench(rows=10_000 if a.quick else 100_000, threads=a.threads or 1,
                   device="cpu" if a.device == "auto" else a.device, repeat=1 if a.quick else max(1, min(a.repeat, 5)))
    doc = {"env": environment(result["device"]) if environment else {"python": platform.python_version()}, **result}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "forest.json").write_text(json.dumps(doc, indent=1, default=str))
    print(json.dumps({k: doc[k] for k in ("model", "rows", "threads", "device", "median_s", "ratio", "agree")},
                     indent=1))
    print(f"wrote {out / 'forest.json'}")
    return 0 if result["agree"] else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpuops.bench.ml", description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", type=int, default=500)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1, help="threads of both runtimes")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=None, help="folder to write forest.json into")
    a = ap.parse_args(argv)
    result = bench(a.trees, a.depth, a.rows, a.features, a.threads, a.device, a.repeat)
    print(json.dumps(result, indent=1))
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "forest.json").write_text(json.dumps(result, indent=1))
    return 0 if result["agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
