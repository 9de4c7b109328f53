"""The test zoo: small architectures in exporter shapes (tests/zoo/models.py) through every model tool
of onnxruntime (tests/zoo/variants.py), each result run by gpuops and compared with onnxruntime's CPU
build on the same model.

Every (model, variant) pair runs in the dynamic form (symbolic batch and sequence axes) at batch
sizes 1 and 3, on ``cpu`` and on ``cuda`` (the CPU stand-in of CuPy without a GPU, under its
no-implicit-transfer guard). The static-shape form (a model per batch size, the tool run on each)
runs on ``cpu`` at both batch sizes for every pair too, and on ``cuda`` for the float32, optimizer
level 99, QOperator and float16 variants: the CUDA path depends on the ops, not on the shape form.

The whole zoo takes about 100 s of CPU time (measured: 74 s user + 24 s system, one pytest process);
most of it is the tools themselves (symbolic shape inference, calibration).

Oracles: onnxruntime on the tool's output. For QDQ models its sessions fuse DequantizeLinear ->
op -> QuantizeLinear groups into integer kernels that round differently (by design), so QDQ
variants compare with onnxruntime running the graph as written (optimizations disabled). The
packed-attention model needs onnxruntime's CUDA kernels (RemovePadding, PackedAttention), so it
compares with the float32 model on the tokens that are not padding.
"""

from __future__ import annotations

import copy
import functools
import tempfile

import numpy as np
import onnxruntime as ort
import pytest

from gpuops.ops.contrib import nchwc

from ..contrib.test_nchwc import BLOCK
from ..ops.common import run_gpuops
from .models import BUILDERS
from .variants import VARIANTS

BATCHES = (1, 3)
STATIC_ON_CUDA = ("f32", "opt-L99", "qstatic-QOperator-u8s8", "fp16")
# Known failures, (model, variant, form) -> reason; strict, so each one reports the day it passes.
_GPT_STATIC = ("the tool's output is invalid: on the static-shape GPT, the python fusions after onnxruntime's "
               "offline optimization leave a Transpose(perm 0,2,1,3) on a 3-D tensor, which onnxruntime rejects too")
KNOWN = {
    **{("gpt", f"opt-L{level}", "static"): _GPT_STATIC for level in (1, 2, 99)},
    ("gpt", "qdyn-optimized", "dynamic"): "the tool fails: quant_pre_process's symbolic shape inference does not "
                                          "complete on the optimized GPT with symbolic axes (quantize_dynamic needs "
                                          "it for the contrib ops)",
}

CASES = [pytest.param(m, v, f, id=f"{m}-{v.name}-{f}",
                      marks=[pytest.mark.xfail(strict=True, reason=KNOWN[m, v.name, f])] if (m, v.name, f) in KNOWN
                      else [])
         for m in BUILDERS for v in VARIANTS if v.applies(BUILDERS[m]("batch")) for f in ("dynamic", "static")]


@functools.lru_cache(maxsize=None)
def transformed(model_name: str, batch, variant_name: str):
    """The tool's output for this model form (cached: every device and batch size reuses it)."""
    zoo = BUILDERS[model_name](batch)
    variant = next(v for v in VARIANTS if v.name == variant_name)
    with tempfile.TemporaryDirectory() as workdir:
        return zoo, variant.apply(copy.deepcopy(zoo.model), zoo, workdir)


def _oracle(zoo, model, variant, feeds):
    options = ort.SessionOptions()
    if variant.name == "opt-packed":
        options = None
        model = zoo.model
    elif "QDQ" in variant.name:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _check(got, want, tol, what, keep=None):
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, \
            f"{what} output {i}: {g.shape} {g.dtype} != {w.shape} {w.dtype}"
        if keep is not None and g.ndim >= 2 and g.shape[:2] == keep.shape:
            g, w = g[keep], w[keep]
        err = np.abs(g.astype(np.float64) - w).max() / max(1.0, float(np.abs(w).max()))
        assert err <= tol, f"{what} output {i}: error {err:.3g} > {tol} (relative to max(1, |output|))"


@pytest.fixture(autouse=True)
def _nchwc_block():
    nchwc.set_block_size(BLOCK)  # onnxruntime's NCHWc rewrite (opt_level 99) bakes in its block size
    yield
    nchwc.set_block_size(None)


@pytest.mark.parametrize("model_name,variant,form", CASES)
def test_zoo(model_name, variant, form):
    for batch in BATCHES:
        zoo, model = transformed(model_name, "batch" if form == "dynamic" else batch, variant.name)
        feeds = zoo.feeds(batch, np.random.default_rng(batch))
        want = _oracle(zoo, model, variant, feeds)
        keep = feeds["attention_mask"].astype(bool) if variant.name == "opt-packed" else None
        devices = ("cpu", "cuda") if form == "dynamic" or variant.name in STATIC_ON_CUDA else ("cpu",)
        for device in devices:
            got = run_gpuops(model, feeds, device)
            _check(got, want, variant.tol, f"{model_name} {variant.name} {form} batch {batch} on {device}", keep)
