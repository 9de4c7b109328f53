"""``gpuops bench --peers``: gpuops against onnxruntime on the CPU, run for run in one process.

For every model the two runtimes get the same thread count (gpuops' ``threads=``, onnxruntime's
``intra_op_num_threads``) and their timed runs alternate (gpuops, onnxruntime, gpuops, ...; in blocks
of a few runs at more than one thread: :func:`alternate`), so load from other processes hits both
alike. Reported per model: both medians and their ratio ``gpuops / onnxruntime`` (below 1: gpuops is
faster). Beyond the suite's models:

- float16 variants of the light models (converted at bench time with onnxruntime's float16 converter,
  inputs and outputs kept float32), timed against gpuops' own float32 run of the same model;
- ``dispatch``: a chain of 1000 one-element Adds, per-node microseconds of both runtimes;
- ``conv_gflops``: each distinct Conv of the light models run alone through gpuops' Conv op, in
  GFLOP/s, next to one ``np.matmul`` of the same GEMM size per group (``--conv-shapes``).

The CPU goals (``GOALS``) are evaluated in ``goals``: the light models at most 1.5x onnxruntime's
time, their geomean at most 1.2x; float16 at most 3x gpuops' own float32 time; quantized_mlp and lstm
at most 2x onnxruntime; the dispatch chain at most 1.5 µs of thread CPU time per node.
"""

from __future__ import annotations

import inspect
import math
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

import gpuops

from . import models as M

GOALS = {"light_max": 1.5, "light_geomean": 1.2, "float16_over_float32": 3.0, "generated_max": 2.0,
         "dispatch_us": 1.5}
GENERATED_GOAL_MODELS = ("quantized_mlp", "lstm")


def gpuops_session(model, threads: int):
    """A CPU session with ``threads`` BLAS threads (an older gpuops without ``threads=``: threadpoolctl
    around each run, so a baseline checkout can be measured the same way)."""
    if "threads" in inspect.signature(gpuops.InferenceSession).parameters:
        sess = gpuops.InferenceSession(model, device="cpu", threads=threads)
        return lambda feeds: sess.run(None, feeds)
    from threadpoolctl import threadpool_limits

    sess = gpuops.InferenceSession(model, device="cpu")

    def run(feeds):
        with threadpool_limits(threads, user_api="blas"):
            return sess.run(None, feeds)
    return run


def ort_session(model, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda feeds: sess.run(None, feeds)


def ort_reference(model, run):
    """onnxruntime's outputs to check gpuops' against: ``run``'s (the timed session's), but on a CPU where
    its u8 x s8 products saturate, those of the model with unsigned weights (:mod:`.exact_int8`)."""
    from .exact_int8 import for_onnxruntime

    exact = for_onnxruntime(model)
    return run if exact is model else ort_session(exact, 1)


BLOCK = 5  # timed runs in a row per runtime when they use more than one thread (see alternate)
SETTLE_S = 0.05  # the pause before each block, in which the other runtime's spinning workers park


def alternate(fns: dict, feeds, warmup: int, repeat: int, budget_s: float, threads: int = 1) -> dict:
    """Median/p90 ms of each callable, their timed runs interleaved; ``cpu_median_ms`` is the calling
    thread's CPU time (what a one-thread run costs, less sensitive to other processes' load).

    At one thread the runs alternate one by one. With more, each callable runs :data:`BLOCK` timed runs
    in a row after a pause (:data:`SETTLE_S`) and an untimed run, the order of the callables reversed
    each round: a runtime's workers keep spinning for a while after its run (onnxruntime's pool, OpenBLAS's
    threads) and would hold a core through the other's next runs, which no user of one runtime sees. (On
    the 2-core Xeon of 2026-11-28 onnxruntime's workers slowed gpuops' squeezenet 1.7x for about 25 ms
    after its last run, the untimed run included; with a 20-50 ms pause neither runtime's times moved.)"""
    for fn in fns.values():
        for _ in range(warmup):
            fn(feeds)
    times = {k: [] for k in fns}
    cpu = {k: [] for k in fns}
    block = 1 if threads <= 1 else BLOCK
    order = list(fns.items())
    t_end = time.perf_counter() + budget_s
    done = 0
    while done < repeat and not (done >= 2 and time.perf_counter() > t_end):
        n = min(block, repeat - done)
        for k, fn in order:
            if block > 1:
                time.sleep(SETTLE_S)  # the other runtime's spinning workers park
                fn(feeds)
            for _ in range(n):
                t, c = time.perf_counter(), time.thread_time()
                fn(feeds)
                cpu[k].append(time.thread_time() - c)
                times[k].append(time.perf_counter() - t)
        done += n
        if block > 1:
            order.reverse()
    return {k: {"median_ms": float(np.median(v) * 1e3), "p90_ms": float(np.percentile(v, 90) * 1e3),
                "cpu_median_ms": float(np.median(cpu[k]) * 1e3), "runs": len(v)} for k, v in times.items()}


def outputs_agree(a, b, rtol, atol, bounds=None) -> tuple[bool, float]:
    """Outputs within ``atol + rtol * max|b|``, or within ``bounds[i]`` where that is larger (an error bound
    derived from the model's arithmetic: :mod:`.tolerance`); equal infinities and NaN in both count as
    equal (a float16 variant may overflow, in both runtimes alike)."""
    diff, ok = 0.0, True
    for i, (x, y) in enumerate(zip(a, b)):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if x.shape != y.shape:
            return False, float("inf")
        if x.size:
            same = (x == y) | (np.isnan(x) & np.isnan(y))
            gap = np.where(same, 0.0, np.abs(x - y))
            d = float("inf") if np.isnan(gap).any() else float(np.max(gap))  # NaN on one side only
            finite = np.abs(y[np.isfinite(y)])
            diff = max(diff, d)
            allowed = atol + rtol * (float(finite.max()) if finite.size else 0.0)
            ok &= d <= max(allowed, bounds[i] if bounds and bounds[i] is not None else 0.0)
    return bool(ok), diff


def float16_variant(model: onnx.ModelProto) -> onnx.ModelProto:
    """A float16 copy of ``model`` (weights and compute; inputs and outputs stay float32), made by
    onnxruntime's converter. Outputs may differ from onnxruntime's where values overflow float16:
    onnxruntime's CPU EP runs float16 Conv in float32 and drops the Cast pairs between nodes."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # the converter edits the model it is given
    return toposorted(convert_float_to_float16(copy, keep_io_types=True, disable_shape_infer=True))


def toposorted(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its graph's nodes in topological order (the converter appends the input Casts
    last, which the ONNX spec does not allow and gpuops refuses)."""
    done = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer} | {""}
    pending, order = list(model.graph.node), []
    while pending:
        ready = [n for n in pending if all(i in done for i in n.input)]
        if not ready:
            raise ValueError("the graph has a cycle or an undefined input")
        for n in ready:
            order.append(n)
            done.update(n.output)
        pending = [n for n in pending if all(n is not r for r in ready)]
    del model.graph.node[:]
    model.graph.node.extend(order)
    return model


def dispatch_chain(n: int = 1000) -> onnx.ModelProto:
    """``n`` one-element Adds in a chain: the cost of running a node, nothing else."""
    nodes = [helper.make_node("Add", ["x" if i == 0 else f"t{i}", "one"], [f"t{i + 1}" if i < n - 1 else "y"])
             for i in range(n)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
                          [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def bench_model(name: str, model, feeds, a, variant: str = "float32") -> dict:
    rec = {"model": name, "variant": variant, "threads": a.threads}
    fns = {"gpuops": gpuops_session(model, a.threads)}
    try:
        fns["onnxruntime"] = ort_session(model, a.threads)
        want = ort_reference(model, fns["onnxruntime"])(feeds)
    except Exception as e:  # a peer that cannot run the model is reported
        fns.pop("onnxruntime", None)
        rec["onnxruntime_error"] = f"{type(e).__name__}: {e}"[:200]
    got = fns["gpuops"](feeds)
    t = alternate(fns, feeds, a.warmup, a.repeat, a.budget, a.threads)
    rec["gpuops"] = t["gpuops"]
    if "onnxruntime" in t:
        rec["onnxruntime"] = t["onnxruntime"]
        rec["ratio"] = t["gpuops"]["median_ms"] / t["onnxruntime"]["median_ms"]
        tol = (1e-2, 1e-2) if variant == "float16" else (a.rtol, a.atol)
        rec["agree"], rec["max_abs_diff"] = outputs_agree(got, want, *tol)
    return rec


def dispatch(a, n: int = 1000) -> dict:
    model = dispatch_chain(n)
    feeds = {"x": np.zeros(1, np.float32)}
    fns = {"gpuops": gpuops_session(model, a.threads), "onnxruntime": ort_session(model, a.threads)}
    t = alternate(fns, feeds, a.warmup, max(a.repeat, 5), a.budget, a.threads)
    return {"nodes": n, **{k: {**v, "us_per_node": v["median_ms"] * 1e3 / n,
                               "cpu_us_per_node": v["cpu_median_ms"] * 1e3 / n} for k, v in t.items()},
            "ratio": t["gpuops"]["median_ms"] / t["onnxruntime"]["median_ms"]}


def conv_gflops(names: list[str], repeat: int = 5) -> list[dict]:
    """Achieved GFLOP/s of gpuops' Conv on each distinct Conv of the named light models (run alone,
    threads as set by the caller) and of ``np.matmul`` on the same GEMM (M/group x K, K x L, per group)."""
    import array_api_compat.numpy as xp
    from onnx import shape_inference

    from gpuops.ops.cpu.conv import conv

    def best(fn):
        fn()
        ts = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return min(ts)

    rows, seen = [], set()
    rng = np.random.default_rng(0)
    for name in names:
        model = shape_inference.infer_shapes(onnx.load(M.light_path(name)))
        shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
                  for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output)}
        shapes.update({t.name: list(t.dims) for t in model.graph.initializer})
        for node in model.graph.node:
            if node.op_type != "Conv":
                continue
            attrs = {at.name: helper.get_attribute_value(at) for at in node.attribute}
            x, w = shapes.get(node.input[0]), shapes.get(node.input[1])
            if not x or not w or 0 in x:
                continue
            key = (tuple(x), tuple(w), tuple(sorted((k, str(v)) for k, v in attrs.items() if k != "kernel_shape")))
            if key in seen:
                continue
            seen.add(key)
            X = rng.standard_normal(x).astype(np.float32)
            W = rng.standard_normal(w).astype(np.float32)
            kw = {k: attrs[k] for k in ("group", "strides", "pads", "dilations", "auto_pad") if k in attrs}
            Y = conv(xp, X, W, **kw)
            g = kw.get("group", 1)
            M_, K, L = w[0], math.prod(w[1:]), math.prod(Y.shape[2:])
            flops = 2.0 * x[0] * M_ * K * L
            A, B = rng.standard_normal((M_ // g, K)).astype(np.float32), rng.standard_normal((K, L)).astype(np.float32)
            t_conv = best(lambda: conv(xp, X, W, **kw))
            t_mm = best(lambda: [np.matmul(A, B) for _ in range(g * x[0])])
            rows.append({"model": name, "x": x, "w": w, "attrs": {k: str(v) for k, v in kw.items()},
                         "gemm": [M_ // g, K, L, g], "conv_ms": t_conv * 1e3, "matmul_ms": t_mm * 1e3,
                         "conv_gflops": flops / t_conv / 1e9, "matmul_gflops": flops / t_mm / 1e9,
                         "conv_over_matmul": t_conv / t_mm})
    return rows


def goals(runs: list[dict]) -> dict:
    def ratio(model, variant="float32"):
        r = next((r for r in runs if r["model"] == model and r["variant"] == variant), None)
        return r.get("ratio") if r else None

    light = {m: ratio(m) for m in M.LIGHT if ratio(m) is not None}
    out = {"targets": GOALS}
    if light:
        gm = math.exp(sum(math.log(v) for v in light.values()) / len(light))
        out["light"] = {"ratios": light, "geomean": gm, "max": max(light.values()),
                        "met": max(light.values()) <= GOALS["light_max"] and gm <= GOALS["light_geomean"]}
    f16 = {}
    for m in M.LIGHT:
        r16 = next((r for r in runs if r["model"] == m and r["variant"] == "float16"), None)
        r32 = next((r for r in runs if r["model"] == m and r["variant"] == "float32"), None)
        if r16 and r32:
            f16[m] = r16["gpuops"]["median_ms"] / r32["gpuops"]["median_ms"]
    if f16:
        out["float16_over_float32"] = {"ratios": f16, "met": max(f16.values()) <= GOALS["float16_over_float32"]}
    gen = {m: ratio(m) for m in GENERATED_GOAL_MODELS if ratio(m) is not None}
    if gen:
        out["generated"] = {"ratios": gen, "met": max(gen.values()) <= GOALS["generated_max"]}
    return out


def run(a) -> dict:
    """The --peers suite: returns the result dict (``runs``, ``dispatch``, ``conv_gflops``, ``goals``)."""
    names = [n for n in a.models.split(",") if n]
    suite = M.suite(names or None)
    runs = []
    try:
        from tqdm import tqdm
    except ImportError:
        def tqdm(x, **kw):
            return x
    for bm in tqdm(suite, desc="peers", unit="model"):
        model = bm.make(1)
        feeds = bm.feeds(model, 1, np.random.default_rng(0))
        variants = ["float32"] + (["float16"] if bm.name in M.LIGHT and not a.no_float16 else [])
        for variant in variants:
            try:
                m = model if variant == "float32" else float16_variant(model)
                with np.errstate(over="ignore", invalid="ignore"):  # float16 overflow is reported, not warned
                    runs.append(bench_model(bm.name, m, feeds, a, variant))
            except gpuops.GpuopsError as e:
                runs.append({"model": bm.name, "variant": variant, "error": str(e)[:300]})
    result = {"runs": runs, "dispatch": dispatch(a)}
    if a.conv_shapes:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(a.threads, user_api="blas"):
            result["conv_gflops"] = conv_gflops([n for n in M.LIGHT if not names or n in names])
    result["goals"] = goals(runs)
    return result


def markdown(result: dict) -> str:
    from .machine import one_line

    env = result["env"]
    machine = one_line(env["machine"]) if "machine" in env else env["cpu"]
    threads = result['settings']['threads']
    lines = [f"gpuops vs onnxruntime (CPU, {threads} thread(s), runs alternating{' in blocks' if threads > 1 else ''}) — "
             f"{machine} — {env['date']}", "",
             "| model | variant | gpuops ms | onnxruntime ms | gpuops / onnxruntime | outputs agree |",
             "|---|---|---|---|---|---|"]
    for r in result["runs"]:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['variant']} | error: {r['error'][:80]} | | | |")
            continue
        o = r.get("onnxruntime")
        lines.append(f"| {r['model']} | {r['variant']} | {r['gpuops']['median_ms']:.2f} | "
                     + (f"{o['median_ms']:.2f} | {r['ratio']:.2f}x | "
                        f"{'yes' if r['agree'] else 'NO'} ({r['max_abs_diff']:.1e}) |" if o else
                        f"– ({r.get('onnxruntime_error', '')[:60]}) | – | – |"))
    d = result["dispatch"]
    lines += ["", f"dispatch ({d['nodes']}-node chain of one-element Adds): gpuops {d['gpuops']['us_per_node']:.2f} "
              f"µs/node, onnxruntime {d['onnxruntime']['us_per_node']:.2f} µs/node ({d['ratio']:.1f}x); "
              f"thread CPU time gpuops {d['gpuops']['cpu_us_per_node']:.2f} µs/node, onnxruntime "
              f"{d['onnxruntime']['cpu_us_per_node']:.2f}"]
    g = result["goals"]
    lines += ["", "CPU goals:"]
    if "light" in g:
        lines.append(f"- light models: max {g['light']['max']:.2f}x (goal ≤ {GOALS['light_max']}x), geomean "
                     f"{g['light']['geomean']:.2f}x (goal ≤ {GOALS['light_geomean']}x): "
                     f"{'met' if g['light']['met'] else 'not met'}")
    if "float16_over_float32" in g:
        f = g["float16_over_float32"]
        lines.append(f"- float16 / float32 gpuops time: max {max(f['ratios'].values()):.2f}x (goal ≤ "
                     f"{GOALS['float16_over_float32']}x): {'met' if f['met'] else 'not met'}")
    if "generated" in g:
        lines.append(f"- {', '.join(f'{k} {v:.2f}x' for k, v in g['generated']['ratios'].items())} (goal ≤ "
                     f"{GOALS['generated_max']}x): {'met' if g['generated']['met'] else 'not met'}")
    us = d["gpuops"]["cpu_us_per_node"]
    lines.append(f"- dispatch: {us:.2f} µs/node of thread CPU time (goal ≤ {GOALS['dispatch_us']}): "
                 f"{'met' if us <= GOALS['dispatch_us'] else 'not met'}")
    if result.get("conv_gflops"):
        lines += ["", "| model | X | W | attrs | GEMM (M/g, K, L, g) | conv GFLOP/s | matmul GFLOP/s | conv / matmul time |",
                  "|---|---|---|---|---|---|---|---|"]
        for c in result["conv_gflops"]:
            attrs = ", ".join(f"{k}={v}" for k, v in c["attrs"].items())
            lines.append(f"| {c['model']} | {c['x']} | {c['w']} | {attrs} | {c['gemm']} | {c['conv_gflops']:.1f} | "
                         f"{c['matmul_gflops']:.1f} | {c['conv_over_matmul']:.2f} |")
    return "\n".join(lines) + "\n"


def plot(result: dict, path) -> list:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    runs = [r for r in result["runs"] if "ratio" in r]
    if not runs:
        return []
    fig, ax = plt.subplots(figsize=(max(6, len(runs) * 0.6), 4))
    colors = ["C0" if r["variant"] == "float32" else "C1" for r in runs]
    ax.bar(range(len(runs)), [r["ratio"] for r in runs], color=colors)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(GOALS["light_max"], color="r", lw=0.8, ls="--", label=f"goal {GOALS['light_max']}x")
    ax.set_yscale("log")
    ax.set_xticks(range(len(runs)), [f"{r['model']}\n{r['variant']}" for r in runs], fontsize=6, rotation=45)
    ax.set_ylabel("gpuops / onnxruntime latency (log)")
    ax.set_title(f"gpuops vs onnxruntime CPU, {result['settings']['threads']} thread(s), alternating")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
