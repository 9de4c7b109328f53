"""The nine light models with random weights, against onnxruntime (CPU) as oracle.

``test_light_models`` compares with the stored outputs, but the light models' weights are constants,
so their softmax is uniform and a wrong kernel still passes. Here each model is rebuilt at test time
with seeded random weights (:mod:`.random_light`) and its pre-softmax logits exposed as an output;
gpuops runs it on cpu with ``optimize="all"`` and ``"none"`` and on cuda (real CuPy, or the CPU
stand-in in strict mode) with ``optimize="all"``, on a standard-normal input. With ``optimize="none"``
on cpu every node's first output is compared too, and a failure names the first node that is off
(global pooling averages much of a local error away before the logits).

Tolerance: ``max |got - expected| <= TOL * max |expected|`` per output. The logits are sums of
thousands of products of mixed sign, so many of them are near zero and an element-wise rtol means
nothing there; their scale is the largest one (it ranges from ~0.5 to ~1e6 over these models, as the
random BatchNormalization statistics do not track the real activations). gpuops and onnxruntime both
accumulate in float32 but in different orders: each dot product of length K (up to 25088, vgg19's
fc6) carries a relative rounding error of about sqrt(K) * 6e-8 <= 1e-5, and ~60 layers add theirs.
Measured worst: 7e-7 of the scale for the outputs, 3e-6 for a node (cpu and the stand-in alike). TOL = 1e-4 leaves two orders of
margin while a convolution off by 1e-3 of its output's rms (logits off by ~9e-3) or correlating with its
flipped kernel (~3e-2) fails (``test_a_wrong_conv_is_caught``).

Runtime: the file takes ~36 s of CPU time (user + sys) and 125 s wall measured on 2 cores shared
with other jobs (load average ~11); per model, all configs: vgg19 38 s, zfnet512 25 s, bvlc_alexnet
15 s, densenet121 14 s, resnet50 11 s, inception_v2 7 s, inception_v1 5 s, shufflenet and squeezenet
2 s. vgg19 costs most (140M random parameters, 560 MB of weights to generate, serialize for
onnxruntime and run): the cuda config, whose stand-in added 18 s wall there, runs on ``CUDA_MODELS``,
every model but vgg19, whose layer types the others cover.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np
import onnxruntime as ort
import pytest

import gpuops
from gpuops.ops import conv as conv_module
from gpuops.ops.contrib import transformer
from gpuops.ops.cpu import conv as cpu_conv

from .harness import device_guard
from .random_light import LOGITS, MODELS, TOL, light_model, node_outputs, random_input, random_variant

CUDA_MODELS = [m for m in MODELS if m != "vgg19"]
CONFIGS = [("cpu", "all"), ("cpu", "none"), ("cuda", "all")]


def _oracle(model, feeds):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in model.graph.output], sess.run(None, feeds)))


def _build(name):
    """The random variant, its feeds, and onnxruntime's value of every node's first output."""
    model = random_variant(light_model(name))
    feeds = random_input(model)
    with node_outputs(model):
        return model, feeds, _oracle(model, feeds)


def _run(model, feeds, device="cpu", optimize="all"):
    sess = gpuops.InferenceSession(model, device=device, optimize=optimize)
    with device_guard(device):
        got = sess.run(None, feeds)
    return dict(zip([o.name for o in model.graph.output], (np.asarray(g) for g in got)))


def _errors(got, expected) -> dict[str, float]:
    """Each output's max abs difference from the oracle as a fraction of its scale."""
    errors = {}
    for name, g in got.items():
        e = expected[name]
        if e.dtype.kind != "f":
            continue
        assert g.shape == e.shape and g.dtype == e.dtype, f"{name}: {g.shape} {g.dtype} != {e.shape} {e.dtype}"
        errors[name] = float(np.abs(g - e).max() / max(np.abs(e).max(), np.finfo(e.dtype).tiny))
    return errors


def _worst(got, expected) -> tuple[str, float]:
    errors = _errors(got, expected)
    name = max(errors, key=errors.get)
    return name, errors[name]


def test_random_variant_replaces_every_constant_weight():
    model = random_variant(light_model("inception_v2"))
    assert not [n for n in model.graph.node if n.op_type == "ConstantOfShape"]
    for t in model.graph.initializer:
        if t.data_type == 1 and np.prod(t.dims) > 1:
            assert len(np.unique(np.frombuffer(t.raw_data, np.float32))) > 1, t.name


@pytest.mark.parametrize("name", MODELS)
def test_light_model_random_weights(name, request):
    """Every config's outputs; on cpu with ``optimize="none"`` every node's, naming the first that is off."""
    model, feeds, expected = _build(name)
    logits = expected[LOGITS]
    assert np.isfinite(logits).all() and logits.std() > 0.05 * np.abs(logits).max(), "degenerate logits"
    order = {n.output[0]: (i, n.op_type) for i, n in enumerate(model.graph.node)}
    failures = []
    for device, optimize in CONFIGS:
        if device == "cuda" and name not in CUDA_MODELS:
            continue
        start = time.perf_counter()
        with node_outputs(model) if (device, optimize) == ("cpu", "none") else contextlib.nullcontext():
            errors = _errors(_run(model, feeds, device, optimize), expected)
        seconds = time.perf_counter() - start
        worst = max(errors, key=errors.get)
        request.node.user_properties.append((f"{device}/{optimize}", {"seconds": round(seconds, 2),
                                                                       "error": errors[worst]}))
        print(f"light {name} (random) on {device} optimize={optimize}: {seconds:.2f}s, {len(errors)} outputs, "
              f"{worst} off by {errors[worst]:.2g}")
        bad = sorted((out for out, err in errors.items() if not err <= TOL), key=lambda out: order[out][0])
        if bad:
            first = bad[0]
            failures.append(f"{device} optimize={optimize}: {len(bad)} outputs off, the first {first!r} "
                            f"({order[first][1]}) by {errors[first]:.3g} of its scale "
                            f"(tolerance {TOL})")
    assert not failures, f"{name}: " + "; ".join(failures)


def _off_by_a_little(conv):
    def wrong(xp, *args, **kwargs):
        Y = conv(xp, *args, **kwargs)
        return Y + 1e-3 * xp.sqrt(xp.mean(Y * Y))

    return wrong


def _flipped_kernel(conv):
    def wrong(xp, X, W, *args, **kwargs):
        return conv(xp, X, xp.flip(W, axis=(-2, -1)), *args, **kwargs)

    return wrong


@pytest.mark.parametrize("optimize", ["none", "all"])
@pytest.mark.parametrize("breakage", [_off_by_a_little, _flipped_kernel])
def test_a_wrong_conv_is_caught(breakage, optimize, monkeypatch):
    """The comparison is strong: a conv off by 1e-3 of its output's rms, or correlating with the
    flipped kernel, fails it (the generic Conv and FusedConv, which ``optimize="all"`` makes, and their
    CPU overrides, which the CPU session runs)."""
    model, feeds, expected = _build("squeezenet")
    monkeypatch.setattr(conv_module, "conv", breakage(conv_module.conv))
    monkeypatch.setattr(transformer, "_conv", breakage(transformer._conv))
    monkeypatch.setattr(cpu_conv, "conv", breakage(cpu_conv.conv))
    monkeypatch.setattr(cpu_conv, "_plan", lambda *a, **k: None)  # planned convs would not call conv()
    out, err = _worst(_run(model, feeds, "cpu", optimize), expected)
    assert err > 10 * TOL, f"{breakage.__name__}: {out} off by only {err:.3g}"
