"""resnet50 (the onnx package's light model; ``--model`` another) at batch 1 and 32: gpuops on cuda, node by node and with
``cuda_graph=True``, fed from the host and from device-resident arrays, against onnxruntime's CPU
provider on the same model and inputs (its logits are a graph output; the verdict is on them).

    python3 -m benchmarks.gpu.perf OUT/perf.json --batches 1,32 [--model resnet50]

The record goes under the model's name (``resnet50``): per run its latency (median and min ms), images/s, host syncs per
run, graph status, memory stats and the difference from onnxruntime.
"""

from __future__ import annotations

import argparse
import sys
import traceback

import numpy as np
import onnx
from onnx import numpy_helper

import gpuops
from gpuops.cli import resolve_model_path

from .common import MODE, REAL, RTOL, SYNCS, cuda_device, device_sync, diffs, fmt, merge, short, timed, worst


def batched(path: str, n: int) -> onnx.ModelProto:
    """The light model at batch ``n`` (its input and output, and a Reshape's constant [1, C] before
    the classifier), with the input of its final Softmax (the logits) as a second output."""
    m = onnx.load(path)
    inits = {t.name: t for t in m.graph.initializer}
    for vi in [i for i in m.graph.input if i.name not in inits] + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if dims and dims[0].dim_value == 1:
            dims[0].dim_value = n
    outputs = {o.name for o in m.graph.output}
    for node in m.graph.node:
        if node.op_type == "Reshape" and node.input[1] in inits:
            a = numpy_helper.to_array(inits[node.input[1]]).copy()
            if a.size and a[0] == 1:
                a[0] = n
                inits[node.input[1]].CopyFrom(numpy_helper.from_array(a, node.input[1]))
        if node.op_type == "Softmax" and node.output[0] in outputs:
            m.graph.output.append(onnx.helper.make_tensor_value_info(node.input[0], onnx.TensorProto.FLOAT, None))
    del m.graph.value_info[:]
    return m


def onnxruntime_cpu(m: onnx.ModelProto, feeds: dict, res: dict, b: int):
    try:
        import onnxruntime as ort
    except ImportError as e:
        res["runs"][f"ort_cpu_b{b}"] = {"skipped": short(e)}
        return None
    so = ort.SessionOptions()
    so.log_severity_level = 4
    o = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    ref = o.run(None, feeds)
    res["runs"][f"ort_cpu_b{b}"] = {"host_feeds": timed(lambda: o.run(None, feeds), reps=20, warm=1),
                                    "onnxruntime": ort.__version__}
    return ref


def gpuops_cuda(m: onnx.ModelProto, feeds: dict, ref, graph: bool, dev, b: int) -> dict:
    r: dict = {"problems": []}
    s = gpuops.InferenceSession(m, device="cuda", cuda_graph=graph)
    got = s.run(None, feeds)
    sync = lambda: device_sync(dev)  # noqa: E731
    r["host_feeds"] = timed(lambda: s.run(None, feeds), sync)
    xd = {k: dev.asarray(v) for k, v in feeds.items()}  # device-resident feeds, outputs left there
    _, r["syncs_per_run"], r["sync_sites"] = SYNCS.measure(dev, lambda: s.run(None, xd, output_device="device"))
    r["device_feeds"] = timed(lambda: s.run(None, xd, output_device="device"), sync, reps=30)
    if graph:
        r["graph_status"] = s.cuda_graph_status()
    r["memory"] = s.memory_stats()
    best = min(r["host_feeds"]["median_ms"], r["device_feeds"]["median_ms"])
    r["images_per_s"] = round(b / best * 1e3, 1)
    if ref is not None:
        r["vs_ort"] = diffs(got, ref, dev.to_host)
        rel = worst(r["vs_ort"], [len(ref) - 1])  # the logits
        r["logits_rel_vs_ort"] = rel
        if rel > RTOL * 10:  # different algorithms and summation orders than gpuops' cpu path
            r["problems"].append(f"logits differ from onnxruntime by {fmt(rel)} of max |logit| > {RTOL * 10:g}")
    s.close()
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--model", default="resnet50", help="a light model")
    a = ap.parse_args(argv)
    dev = cuda_device()
    res: dict = {"mode": MODE, "model": f"light:{a.model} (constant weights)", "device": str(dev), "runs": {}}
    path = resolve_model_path(f"light:{a.model}")
    bad = 0
    for b in [int(x) for x in a.batches.split(",") if x]:
        m = batched(path, b)
        inits = {t.name for t in m.graph.initializer}
        x = next(i for i in m.graph.input if i.name not in inits)
        shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
        feeds = {x.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
        try:
            ref = onnxruntime_cpu(m, feeds, res, b)
        except Exception as e:
            ref, res["runs"][f"ort_cpu_b{b}"] = None, {"error": short(e)}
        print(f"ort_cpu_b{b}", res["runs"][f"ort_cpu_b{b}"], flush=True)
        for graph in (False, True):
            key = f"gpuops_cuda{'_graph' if graph else ''}_b{b}"
            try:
                r = gpuops_cuda(m, feeds, ref, graph, dev, b)
            except Exception as e:
                r = {"problems": [short(e, 1500)], "where": traceback.format_exc(limit=-3)[-1500:]}
            bad += bool(r["problems"])
            res["runs"][key] = r
            merge(a.out, a.model, res)
            print(key, {k: v for k, v in r.items() if k in ("host_feeds", "device_feeds", "syncs_per_run",
                                                               "logits_rel_vs_ort", "problems")}, flush=True)
    if REAL:
        res["note"] = "on a GPU, device_feeds is the number to compare with torch's eager runs"
    merge(a.out, a.model, res)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
