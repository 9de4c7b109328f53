"""The test zoo: small architectures in exporter shapes (tests/zoo/models.py) through every model tool
of onnxruntime (tests/zoo/variants.py), each result run by gpuops and compared with onnxruntime's CPU
build on the same model.

Every (model, variant) pair runs in the dynamic form (symbolic batch and sequence axes) at batch
sizes 1 and 3, on ``cpu`` and on ``cuda`` (the CPU stand-in of CuPy without a GPU, under its
no-implicit-transfer guard). The static-shape form (a model per batch size, the tool run on each)
runs on ``cpu`` at both batch sizes for every pair too, and on ``cuda`` for the float32, optimizer
level 99, QOperator and float16 variants: the CUDA path depends on the ops, not on the shape form.

The whole zoo takes about 165 s of CPU time (measured: 124 s user + 41 s system, one pytest process);
most of it is the tools themselves (symbolic shape inference, calibration).

Oracles: onnxruntime on the tool's output (its int8 weights made uint8 where onnxruntime's u8 x s8 sums
saturate: gpuops.bench.exact_int8). For QDQ models its sessions fuse DequantizeLinear ->
op -> QuantizeLinear groups into integer kernels that round differently (by design), so QDQ
variants, and quantize_dynamic's (whose fused MatMulIntegerToFloat / DynamicQuantizeMatMul kernels
round differently), compare with onnxruntime running the graph as written (optimizations disabled). The
packed-attention model needs onnxruntime's CUDA kernels (RemovePadding, PackedAttention), so it
compares with the float32 model on the tokens that are not padding; so do models holding ops that
onnxruntime implements on CUDA only (T5's RelativePositionBias) and the few tool outputs onnxruntime
cannot load (SOURCE_ORACLE).

Models that quantize activations at run time (quantize_dynamic's DynamicQuantizeLinear), against
onnxruntime on the tool's output, compare as tests/zoo/dynamic_quantization.py explains: a float32
ulp before a quantizer may move a value one 8-bit step, so the model also runs with its quantizers
pinned to onnxruntime's values, where the rest must agree within the variant's tolerance and each
quantizer's result may differ from onnxruntime's only across a rounding tie that the float32
differences of its input explain; the model as written is held to the quantization steps' bound.

test_optimizer_fuses checks that the transformer optimizer does fuse the encoder-decoder and GPT-2
entries into the contrib ops those model types are for.
"""

from __future__ import annotations

import copy
import functools
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from gpuops.bench.exact_int8 import for_onnxruntime
from gpuops.ops.contrib import nchwc

from ..contrib.test_nchwc import BLOCK
from ..ops.common import run_gpuops
from ..ort_versions import requires_ort
from .dynamic_quantization import Oracle, quantizes_at_run_time
from .models import BUILDERS
from .variants import VARIANTS

BATCHES = (1, 3)
# ops the tools emit that onnxruntime implements on CUDA only: such a model compares with its float32 source
CUDA_ONLY = {"RelativePositionBias", "GatedRelativePositionBias"}
STATIC_ON_CUDA = ("f32", "opt-L99", "qstatic-QOperator-u8s8", "fp16")
# The tool's output runs, but onnxruntime cannot load it: compared with the float32 source instead.
SOURCE_ORACLE = {("gpt", f"opt-L{level}", "static"): "onnxruntime fails to initialize a session on the tool's "
                 "output (graph.cc: 'AddInitializedOrtValue Attempt to replace the existing tensor')"
                 for level in (1, 2, 99)}
SOURCE_ORACLE["bart", "opt-L1", "static"] = SOURCE_ORACLE["gpt", "opt-L1", "static"]
# Known failures, (model, variant, form) -> reason; strict, so each one reports the day it passes.
_T5_QATTENTION = ("the tool's output is invalid: quantize_dynamic turns T5's fused Attention (no bias, the relative "
                  "position bias as attention_bias) into a QAttention without its required bias input and drops the "
                  "attention_bias; onnxruntime rejects the model too")
KNOWN = {
    ("bart", "qdyn-optimized", "dynamic"): "the tool fails: quant_pre_process's symbolic shape inference does not "
                                           "complete on the optimized BART with symbolic axes",
    ("t5_encoder", "qdyn-optimized", "dynamic"): _T5_QATTENTION,
    ("t5_encoder", "qdyn-optimized", "static"): _T5_QATTENTION,
}

# The oracle cannot run the tool's output before onnxruntime 1.24 (Python 3.10 gets at most 1.23).
_ORT_S8_CONV_INTEGER = "it has no ConvInteger kernel for the int8 (s8) activations quantize_dynamic emits for Conv"
_ORT_FP16_INIT = ("its session initialization fails on the float16 model (graph_utils.cc GetIndexFromName: "
                  "'itr != node_args.end()')")
_ORT_QSOFTMAX_WRAP = ("its int8 QLinearSoftmax wraps a probability of 1 (quantized 128 with scale 1/256, zero point "
                      "-128) round to -128 instead of saturating at 127; 1.24 and later saturate, as gpuops does")
OLD_ORT = {("t5_decoder", "qstatic-QOperator-s8s8-reducerange", "dynamic"): _ORT_QSOFTMAX_WRAP,
           **{(m, v, f): _ORT_S8_CONV_INTEGER for m, v in [("cnn", "qdyn-s8"), ("depthwise_cnn", "qdyn-s8"),
                                                            ("vit", "qdyn-s8"), ("vit", "qdyn-optimized")]
              for f in ("dynamic", "static")},
           **{(m, v, f): _ORT_FP16_INIT for m in ("bert", "t5_encoder", "t5_decoder")
              for v in ("fp16", "fp16-converter") for f in ("dynamic", "static")}}


def _marks(m, v, f):
    marks = [pytest.mark.xfail(strict=True, reason=KNOWN[m, v, f])] if (m, v, f) in KNOWN else []
    return marks + ([requires_ort("1.24", OLD_ORT[m, v, f])] if (m, v, f) in OLD_ORT else [])


CASES = [pytest.param(m, v, f, id=f"{m}-{v.name}-{f}", marks=_marks(m, v.name, f))
         for m in BUILDERS for v in VARIANTS if v.applies(BUILDERS[m]("batch")) for f in ("dynamic", "static")]


@functools.lru_cache(maxsize=None)
def transformed(model_name: str, batch, variant_name: str):
    """The tool's output for this model form (cached: every device and batch size reuses it)."""
    zoo = BUILDERS[model_name](batch)
    variant = next(v for v in VARIANTS if v.name == variant_name)
    with tempfile.TemporaryDirectory() as workdir:
        return zoo, variant.apply(copy.deepcopy(zoo.model), zoo, workdir)


def _source_oracle(zoo, model, variant, form) -> bool:
    """Whether the tool's output compares with its float32 source (the module doc)."""
    return bool(variant.name == "opt-packed" or (zoo.name, variant.name, form) in SOURCE_ORACLE
                or CUDA_ONLY & {n.op_type for n in model.graph.node})


def _oracle(zoo, model, variant, form, feeds):
    options = ort.SessionOptions()
    if _source_oracle(zoo, model, variant, form):
        options = None
        model = zoo.model
    elif "QDQ" in variant.name or variant.name.startswith("qdyn"):
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(for_onnxruntime(model).SerializeToString(), options, providers=["CPUExecutionProvider"])
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
def _nchwc_block(monkeypatch):
    # onnxruntime's NCHWc rewrite (opt_level 99) bakes in its block size; sessions read it when created
    monkeypatch.setenv(nchwc.BLOCK_SIZE_ENV, str(BLOCK))


@pytest.mark.parametrize("model_name,variant,form", CASES)
def test_zoo(model_name, variant, form):
    for batch in BATCHES:
        zoo, model = transformed(model_name, "batch" if form == "dynamic" else batch, variant.name)
        feeds = zoo.feeds(batch, np.random.default_rng(batch))
        # activations quantized at run time: quantizers pinned, and their roundings explained (dynamic_quantization)
        pinned = quantizes_at_run_time(model) and not _source_oracle(zoo, model, variant, form)
        oracle = Oracle(model, feeds) if pinned else None
        want = None if pinned else _oracle(zoo, model, variant, form, feeds)
        keep = feeds["attention_mask"].astype(bool) if variant.name == "opt-packed" else None
        devices = ("cpu", "cuda") if form == "dynamic" or variant.name in STATIC_ON_CUDA else ("cpu",)
        for device in devices:
            got = run_gpuops(model, feeds, device)
            what = f"{model_name} {variant.name} {form} batch {batch} on {device}"
            if pinned:
                assert len(got) == len(model.graph.output), what
                oracle.check(got, device, variant.tol_for(model_name), what)
            else:
                _check(got, want, variant.tol_for(model_name), what, keep)


# The contrib ops the transformer optimizer (opt_level 0, the entry's model type) must emit
FUSED = {
    "bart": {"Attention", "SkipLayerNormalization"},
    "gpt": {"Attention", "SkipLayerNormalization", "EmbedLayerNormalization"},
    "t5_encoder": {"Attention", "RelativePositionBias", "SimplifiedLayerNormalization",
                   "SkipSimplifiedLayerNormalization"},
    "t5_decoder": {"MultiHeadAttention", "RelativePositionBias", "SimplifiedLayerNormalization",
                   "SkipSimplifiedLayerNormalization"},
}


@pytest.mark.parametrize("model_name", sorted(FUSED))
def test_optimizer_fuses(model_name):
    for form in ("batch", 3):
        zoo, model = transformed(model_name, form, "opt-L0")
        ops = {n.op_type for n in model.graph.node}
        assert FUSED[model_name] <= ops, f"{model_name} {form}: {sorted(FUSED[model_name] - ops)} not fused"
        inputs = {i.name for i in model.graph.input}
        attention = [n for n in model.graph.node if n.op_type in ("Attention", "MultiHeadAttention")]
        if model_name == "gpt":  # GPT-2's Attention with past (2, B, N, P, h) and present
            assert all(len(n.input) > 4 and n.input[4] in inputs and len(n.output) == 2 for n in attention)
        if model_name == "bart":  # the decoder's attentions need MultiHeadAttention: causal with a cache, cross
            _, mha = transformed(model_name, form, "opt-bart-mha-gpu")
            mha = [n for n in mha.graph.node if n.op_type == "MultiHeadAttention"]
            assert sorted((_attribute(n, "unidirectional"), len(n.input) > 6 and n.input[6] in inputs)
                          for n in mha) == [(0, False), (1, True)]
        if model_name == "t5_decoder":  # self-attention with a cache and bias, cross-attention on the encoder's
            past = [n for n in attention if len(n.input) > 6 and n.input[6] in inputs]
            cross = [n for n in attention if n.input[1] in inputs]
            assert len(past) == len(cross) == len(attention) // 2 > 0


def _attribute(node, name):
    return next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == name), 0)
