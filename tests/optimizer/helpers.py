"""Helpers of the optimizer tests: optimize a model, check which ops it has, and check that the
optimized model gives the unoptimized one's results in gpuops (cpu and the CUDA path) and in
onnxruntime."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx

import gpuops
from gpuops.bench.exact_int8 import for_onnxruntime
from gpuops.optimizer import optimize
from tests.conformance.harness import assert_close, device_guard
from tests.ops.common import DEVICES, make_model, run_ort  # noqa: F401  (make_model re-exported)
from tests.ort_versions import ort_older_than


def ops(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in model.graph.node)


def run(model, feeds, device="cpu", level="all"):
    sess = gpuops.InferenceSession(model, device=device, optimize=level)
    with device_guard(device):
        return sess.run(None, dict(feeds))


def check(model, feeds, *, gone=(), present=(), kept=(), level="all", rtol=1e-5, atol=1e-5, ort=True):
    """Optimize ``model`` at ``level``: the op types in ``gone`` disappear, those in ``present``
    appear, those in ``kept`` stay; on every device the optimized session gives the unoptimized
    one's outputs; the optimized model passes onnx's checker (if the original does) and
    onnxruntime runs it to the same results. Returns the optimized model."""
    opt = optimize(model, level)
    have = ops(opt)
    assert not [o for o in gone if o in have], f"not rewritten: {dict(have)}"
    assert all(have[o] for o in present), f"missing {present}: {dict(have)}"
    assert all(have[o] for o in kept), f"lost {kept}: {dict(have)}"
    assert [o.name for o in opt.graph.output] == [o.name for o in model.graph.output]
    for device in DEVICES:
        want = run(model, feeds, device, "none")
        got = run(model, feeds, device, level)
        for name, g, w in zip([o.name for o in model.graph.output], got, want):
            assert_close(g, w, rtol, atol, f"{device} {name}")
        if device == "cpu":
            reference = want
    if _valid(model):
        onnx.checker.check_model(opt)
    if ort:
        for g, w in zip(_oracle(model, opt, feeds), reference):
            assert_close(np.asarray(g), w, rtol, atol, "onnxruntime")
    return opt


def _oracle(model, opt, feeds):
    """onnxruntime's outputs of the optimized model. Before 1.24, onnxruntime lacks forms the rewrites
    emit (FusedConv's HardSwish, QuickGelu of float64) and its own rewrites fail on some graphs (QuickGelu
    fused for float64, which it cannot run; an NCHWc Conv + Sum on a dynamic batch): there it runs the
    model as given, its optimizations off."""
    if not ort_older_than("1.24"):
        return run_ort(opt, feeds)
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    given = model if _newer_contrib_forms(opt) else opt
    return ort.InferenceSession(for_onnxruntime(given).SerializeToString(), options, providers=["CPUExecutionProvider"]).run(
        None, dict(feeds))


def _newer_contrib_forms(model: onnx.ModelProto) -> bool:
    return any(n.domain == "com.microsoft" and (n.op_type == "QuickGelu" or any(
        a.name == "activation" and a.s == b"HardSwish" for a in n.attribute)) for n in model.graph.node)


def _valid(model) -> bool:
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError:
        return False
    return True


def check_cpu_private(model, feeds, present, absent=(), rtol=1e-5, atol=1e-5):
    """The model optimized for the CPU has the op types ``present`` (gpuops' private fused ops, or what a
    rewrite must leave) and not ``absent``; the private ops appear only with ``device="cpu"``; the model
    passes onnx's full check; onnxruntime and gpuops run it to the original model's results."""
    opt = optimize(model, "all", device="cpu")
    have = ops(opt)
    assert all(have[o] for o in present), dict(have)
    assert not [o for o in absent if have[o]], dict(have)
    assert not any(n.domain == "ai.gpuops" for n in optimize(model, "all").graph.node)  # the CPU's only
    onnx.checker.check_model(opt, full_check=True)
    for g, w in zip(run_ort(opt, feeds), run_ort(model, feeds)):
        assert_close(np.asarray(g), w, rtol, atol, "onnxruntime")
    plain = gpuops.InferenceSession(model, device="cpu", optimize="none").run(None, feeds)
    for g, w in zip(gpuops.InferenceSession(model, device="cpu").run(None, feeds), plain):
        assert_close(g, w, rtol, atol, "gpuops")
    return opt
