"""The selftest's model check: a model run on the cpu against onnx's reference evaluator, and on
a device node by node and as a CUDA graph against the cpu path."""

from __future__ import annotations

import math

import numpy as np

from ..device import Device
from .bounds import compare_outputs, output_tolerances, softmax_outputs, worst
from .cases import guarded

# -- models --------------------------------------------------------------------------------------

def model_inputs(spec: str, inputs, seed: int = 0) -> dict:
    """Feeds for the model ``spec`` with graph ``inputs`` (:class:`NodeArg`): a ``light:NAME`` model
    gets the input onnx's backend test runner gives it (``arange(n) / n``), any other model random
    feeds of its declared shapes (batch 1)."""
    from ..models import random_feed

    if not spec.startswith("light:"):
        rng = np.random.default_rng(seed)
        return {a.name: random_feed(a, rng, 1) for a in inputs}
    feeds = {}
    for a in inputs:
        n = int(np.prod(a.shape))
        feeds[a.name] = (np.arange(n, dtype=np.float32).reshape(a.shape) / n).astype(np.float32)
    return feeds


def with_inner_outputs(model):
    """``model`` (a path or an ``onnx.ModelProto``, copied) with, as extra graph outputs, the data input
    of each node that makes a graph output: a classifier's logits before its Softmax, which the
    comparisons hold to the float32 error bound (the softmax of the light models' huge, equal logits
    is not comparable; see :func:`compare_outputs`)."""
    import onnx

    model = onnx.load(model) if isinstance(model, str) else onnx.ModelProto.FromString(model.SerializeToString())
    outputs = {o.name for o in model.graph.output}
    hidden = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer} | outputs
    for node in model.graph.node:
        if outputs.intersection(node.output) and node.input and node.input[0] not in hidden:
            model.graph.output.append(onnx.ValueInfoProto(name=node.input[0]))
            hidden.add(node.input[0])
    return model


def reference_evaluator(model):
    """onnx's ReferenceEvaluator for ``model``, with two of its ops replaced by the spec's, both of
    which put the light models' logits far off (onnx 1.23 still):

    * LRN sums the squares of channels ``c`` that run over the batch size instead of the channel count
      (onnx/onnx#7805): bvlc_alexnet, zfnet512, inception_v1;
    * BatchNormalization before opset 14 computes batch statistics (training mode) whenever
      ``momentum`` is set, which its schema's default always does, though one output means
      inference: resnet50, shufflenet, inception_v2, densenet121."""
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun

    class LRN(OpRun):
        op_domain = ""

        def _run(self, x, alpha=None, beta=None, bias=None, size=None):
            # square_sum[n, c] = sum of x[n, i]**2, max(0, c - floor((size-1)/2)) <= i <= min(C-1, c + ceil((size-1)/2))
            below, above = (size - 1) // 2, math.ceil((size - 1) / 2)
            square_sum = np.zeros_like(x)
            for c in range(x.shape[1]):
                square_sum[:, c] = np.sum(x[:, max(0, c - below):c + above + 1] ** 2, axis=1)
            return ((x / (bias + (alpha / size) * square_sum) ** beta).astype(x.dtype),)

    class BatchNormalization(OpRun):
        op_domain = ""

        def _run(self, x, scale, bias, mean, var, epsilon=1e-5, **attrs):
            if "training_mode" in attrs:  # opset 14
                training = bool(attrs["training_mode"])
            elif "is_test" in attrs:  # opset 6
                training = not attrs["is_test"]
            else:  # opsets 7 to 13: the optional outputs are the training mode's
                training = len(self.onnx_node.output) > 1
            if training:
                raise NotImplementedError("training-mode BatchNormalization is not checked")
            shape = (-1,) + (1,) * (x.ndim - 2)
            y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + epsilon) * scale.reshape(shape)
            return ((y + bias.reshape(shape)).astype(x.dtype),)

    return ReferenceEvaluator(model, new_ops=[LRN, BatchNormalization])


def _second_feeds(feeds: dict) -> dict:
    """Different values of the same shapes (a graph replay must not read the previous feed)."""
    return {k: (v[::-1].copy() if v.ndim else v) if v.dtype.kind != "f" else (v * -0.5 + 0.25).astype(v.dtype)
            for k, v in feeds.items()}


def model_check(spec: str, dev: Device, rtol: float | None = None, atol: float = 0.0) -> dict:
    """``spec`` on the cpu path, against onnx's reference evaluator (a light model, or any model when
    ``dev`` is the cpu), and on a CUDA ``dev`` node by node (with the host syncs of the run) and as a
    CUDA graph (capture, then a replay on different feeds), each against the cpu path. Every graph
    output and the logits before it are compared by relative error against :func:`output_tolerances`
    (``rtol`` overrides the derived bound; ``atol`` adds an absolute slack).

    The light models' stored outputs are not used: they hold only the softmax, whose values are
    arbitrary at the last bit of their logits (:func:`compare_outputs`)."""
    from ..models import resolve_model_path
    from ..onnx import InferenceSession

    rec: dict = {"model": spec, "runs": []}
    model = with_inner_outputs(resolve_model_path(spec))
    tolerances, how = output_tolerances(model, rtol)
    softmax = softmax_outputs(model)
    cpu_sess = InferenceSession(model, device="cpu")
    feeds = model_inputs(spec, cpu_sess.get_inputs())
    feeds2 = _second_feeds(feeds)
    cpu = cpu_sess.run(None, feeds)
    cpu2 = cpu_sess.run(None, feeds2)
    names = [o.name for o in cpu_sess.get_outputs()]
    rec.update(outputs=names, tolerances=tolerances, tolerance_from=how)

    def check(got, want) -> tuple[bool, list[dict], str]:
        outs = compare_outputs(names, got, want, tolerances, softmax, atol)
        why = "; ".join(f"output {o['name']!r}: {o['error']}" for o in outs if not o["ok"])
        return all(o["ok"] for o in outs), outs, why

    def record(name: str, got, want, against: str, **extra) -> dict:
        ok, outs, why = check(got, want)
        run = {"name": name, "against": against, "ok": ok, "outputs": outs, **extra}
        w = worst(outs)
        if w is not None:
            run.update(max_rel_err=w["rel_err"], tolerance=w["tolerance"], worst_output=w["name"])
        if why:
            run["error"] = why
        rec["runs"].append(run)
        return run

    if spec.startswith("light:") or dev.kind != "cuda":  # the reference evaluator is slow on big models
        record("cpu", cpu, reference_evaluator(model).run(None, feeds), "onnx reference evaluator")
    if dev.kind == "cuda":
        def node_by_node():
            sess = InferenceSession(model, device=dev)
            got = sess.run(None, feeds, profile=True)
            syncs = sess.last_profile["host_syncs"]
            record("cuda", got, cpu, "cpu", host_syncs=int(syncs["count"]), sync_nodes=list(syncs["nodes"]))
            sess.close()

        def graph():
            sess = InferenceSession(model, device=dev, cuda_graph=True)
            first = sess.run(None, feeds)  # captures
            replay = sess.run(None, feeds2)
            status = sess.cuda_graph_status()
            # a replay that read the previous feed shows only where the two feeds' outputs differ
            run = record("cuda_graph", first, cpu, "cpu", graph=status,
                         new_feeds_change_outputs=not check(cpu, cpu2)[0])
            ok, outs, why = check(replay, cpu2)
            w = worst(outs)
            run["ok"] = run["ok"] and ok
            if w is not None and w["rel_err"] > run.get("max_rel_err", -1.0):
                run.update(max_rel_err=w["rel_err"], tolerance=w["tolerance"], worst_output=w["name"] + " (replay)")
            if why:
                run["error"] = "; ".join(filter(None, [run.get("error"), f"replay on new feeds: {why}"]))
            sess.close()

        for name, fn in (("cuda", node_by_node), ("cuda_graph", graph)):
            item = {"name": name}
            if not guarded(item, fn):
                rec["runs"].append(item)
    rec["ok"] = bool(rec["runs"]) and all(r.get("ok") for r in rec["runs"])
    return rec
