"""onnxruntime's own model tools, each as a variant: float32 model in, transformed model out.

- ``opt-L<level>[-gpu]``: onnxruntime.transformers.optimizer.optimize_model with the entry's model
  type, opt_level and use_gpu. With opt_level > 0 the tool first has an onnxruntime session rewrite
  the model (FusedConv, FusedGemm, NCHWc...) and save it; its helper for that imports torch only to
  look for ROCm, so that step is taken here with onnxruntime directly (the same session options), then
  optimize_model runs its python fusions. With use_gpu and no CUDA provider the tool skips that step.
- ``opt-...-mha`` / ``-packed``: fusions to MultiHeadAttention, or the fused Attention converted to
  PackedAttention by convert_to_packing_mode; ``opt-bart-mha-gpu``: the bart fusion with
  MultiHeadAttention, which it needs for cross-attention.
- ``qdyn-...``: quantize_dynamic (int8 / uint8 weights, per-channel, reduce_range), also on the
  optimized BERT (QAttention, QEmbedLayerNormalization).
- ``qstatic-<format>-<activations><weights>...``: quantize_static QOperator / QDQ with a calibration
  reader, int8 / uint8 (and int16 / uint16 activations in QDQ), per-channel, reduce_range.
- ``fp16``: the optimizer's OnnxModel.convert_float_to_float16 with keep_io_types (float32 graph
  inputs and outputs); ``fp16-converter``: onnxruntime.transformers.float16 on its own;
  ``opt-fp16-gpu``: optimize_model(use_gpu=True) then the float16 conversion (float16 contrib ops).
- ``nbits-<format>-<sym|asym>[-matmul]``: the 4-bit weight-only MatMulNBitsQuantizer (MatMulNBits, or
  QDQ DequantizeLinear with blocked int4 weights), Gather included (GatherBlockQuantized) but for
  ``-matmul``, the form for models that opset 21 breaks (see _nbits_applies).
- ``bnb4-<fp4|nf4>``: the MatMulBnb4Quantizer (FP4 / NormalFloat4 weights, MatMulBnb4).
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx

logging.getLogger("onnxruntime").setLevel(logging.ERROR)
logging.getLogger("root").setLevel(logging.ERROR)


@dataclass(frozen=True)
class Variant:
    name: str
    apply: Callable  # (model, zoo entry, workdir) -> model
    tol: float  # relative tolerance (of the output's magnitude) against onnxruntime
    applies: Callable = field(default=lambda zoo: True)
    model_tol: dict = field(default_factory=dict)  # model name -> its own tolerance (explained where set)

    def tol_for(self, model_name: str) -> float:
        return self.model_tol.get(model_name, self.tol)


def _save(model, workdir, name):
    path = os.path.join(workdir, name + ".onnx")
    onnx.save(model, path)
    return path


def original(model, zoo, workdir):
    return model


def _ort_offline(model, opt_level, workdir):
    """What optimize_by_onnxruntime does on the CPU provider: a session saving its optimized graph."""
    import onnxruntime as ort

    levels = {1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC, 2: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
              99: ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
    options = ort.SessionOptions()
    options.graph_optimization_level = levels[opt_level]
    options.optimized_model_filepath = os.path.join(workdir, f"ort_o{opt_level}.onnx")
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return onnx.load(options.optimized_model_filepath)


def _optimize(model, zoo, model_type, opt_level, use_gpu, workdir=None, **options):
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    if opt_level and not use_gpu:
        model = _ort_offline(model, opt_level, workdir)
    fusion = FusionOptions(model_type)
    for k, v in options.items():
        setattr(fusion, k, v)
    optimized = optimize_model(model, model_type=model_type, num_heads=2, hidden_size=16, opt_level=0,
                               use_gpu=use_gpu, optimization_options=fusion)
    return _saved(optimized, workdir)


def _saved(onnx_model, workdir):
    """The model as the tools save it (save_model_to_file sorts the nodes and imports com.microsoft)."""
    path = os.path.join(workdir or tempfile.mkdtemp(), "optimized.onnx")
    onnx_model.save_model_to_file(path)
    return onnx.load(path)


def optimizer(model_type, opt_level, use_gpu=False, **options):
    """The optimizer with ``model_type`` (None: the zoo entry's own, "bert" for the CNNs and the MLP)."""
    def apply(model, zoo, workdir):
        return _optimize(model, zoo, model_type or zoo.model_type or "bert", opt_level, use_gpu, workdir, **options)
    return apply


def packed(model, zoo, workdir):
    from onnxruntime.transformers.convert_to_packing_mode import PackingMode
    from onnxruntime.transformers.onnx_model import OnnxModel

    fused = OnnxModel(_optimize(model, zoo, "bert", 0, True, workdir))
    PackingMode(fused).convert()
    return _saved(fused, workdir)


def qdyn(optimized_first=False, weight="QInt8", **kw):
    def apply(model, zoo, workdir):
        from onnxruntime.quantization import QuantType, quantize_dynamic

        from onnxruntime.quantization.shape_inference import quant_pre_process

        src = _save(model, workdir, "f32")
        if optimized_first:  # the quantizer needs the contrib ops' output types: symbolic shape inference
            src = _save(_optimize(model, zoo, zoo.model_type, 0, False, workdir), workdir, "optimized")
            quant_pre_process(src, src, skip_optimization=True, skip_onnx_shape=True)
        out = os.path.join(workdir, "qdyn.onnx")
        quantize_dynamic(src, out, weight_type=getattr(QuantType, weight), **kw)
        return onnx.load(out)
    return apply


class _Calibration:
    """Four batches of random feeds, of the model's batch size where it is static."""

    def __init__(self, zoo):
        rng = np.random.default_rng(7)
        dim = zoo.model.graph.input[0].type.tensor_type.shape.dim[0]
        batch = dim.dim_value if dim.HasField("dim_value") else 1
        self.batches = iter([zoo.feeds(batch, rng) for _ in range(4)])

    def get_next(self):
        return next(self.batches, None)


def qstatic(fmt, activation, weight, **kw):
    def apply(model, zoo, workdir):
        from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
        from onnxruntime.quantization.shape_inference import quant_pre_process

        src = _save(model, workdir, "f32")
        pre = os.path.join(workdir, "pre.onnx")
        quant_pre_process(src, pre, skip_symbolic_shape=True)
        out = os.path.join(workdir, "qstatic.onnx")
        quantize_static(pre, out, _Calibration(zoo), quant_format=getattr(QuantFormat, fmt),
                        activation_type=getattr(QuantType, activation), weight_type=getattr(QuantType, weight), **kw)
        return onnx.load(out)
    return apply


def fp16(model, zoo, workdir):
    """The optimizer's float16 conversion (OnnxModel.convert_float_to_float16), saved by the tool."""
    from onnxruntime.transformers.onnx_model import OnnxModel

    m = OnnxModel(model)
    m.convert_float_to_float16(keep_io_types=True)
    return _saved(m, workdir)


def optimized_fp16(model, zoo, workdir):
    """The usual GPU flow: optimize_model(use_gpu=True), then convert_float_to_float16(keep_io_types)."""
    from onnxruntime.transformers.onnx_model import OnnxModel

    m = OnnxModel(_optimize(model, zoo, zoo.model_type or "bert", 0, True, workdir))
    m.convert_float_to_float16(keep_io_types=True)
    return _saved(m, workdir)


def fp16_converter(model, zoo, workdir):
    """onnxruntime.transformers.float16.convert_float_to_float16 used on its own."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    return convert_float_to_float16(model, keep_io_types=True)


def nbits(fmt, symmetric, gather=True):
    def apply(model, zoo, workdir):
        from onnxruntime.quantization import QuantFormat
        from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

        # the tool's QDQ form skips Gather
        ops = ("MatMul", "Gather") if fmt == "QOperator" and gather else ("MatMul",)
        config = DefaultWeightOnlyQuantConfig(block_size=16, is_symmetric=symmetric,
                                              quant_format=getattr(QuantFormat, fmt), op_types_to_quantize=ops)
        q = MatMulNBitsQuantizer(model, algo_config=config)
        q.process()
        return q.model.model
    return apply


def bnb4(quant_type):
    def apply(model, zoo, workdir):
        from onnxruntime.quantization.matmul_bnb4_quantizer import MatMulBnb4Quantizer

        q = MatMulBnb4Quantizer(model, quant_type, 16)
        q.process()
        return q.model.model
    return apply


def _transformer(zoo):
    return zoo.model_type is not None


def _valid_at_opset_21(zoo):
    """Whether the model stays valid with its ai.onnx import raised to 21 and nothing else changed."""
    model = onnx.ModelProto()
    model.CopyFrom(zoo.model)
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = 21
    model.ir_version = max(model.ir_version, 10)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError:
        return False
    return True


def _nbits_applies(zoo):
    """MatMul weights to quantize, and a model the tool's output keeps valid. The tool needs int4
    tensors (opset 21) for its QDQ form and for Gather (GatherBlockQuantized's int4 data), and then
    only raises the model's ai.onnx import to 21 without converting its nodes
    (MatMulNBitsQuantizer.process warns "the generated model may not be a valid model"): a model below
    opset 18 with ReduceMean (axes an attribute until opset 18: the zoo's BERT and T5 RMSNorm) becomes
    invalid, for onnxruntime too. Such models run the MatMul-only QOperator form below."""
    return _transformer(zoo) and _valid_at_opset_21(zoo)


def _nbits_matmul_applies(zoo):
    """The QOperator form quantizing MatMul only writes com.microsoft MatMulNBits nodes and leaves the
    ai.onnx opset alone: what the tool offers the models the forms above would break."""
    return _transformer(zoo) and not _valid_at_opset_21(zoo)


def _bert(zoo):
    return zoo.model_type == "bert"


# Tolerances of |gpuops - onnxruntime| relative to max(1, |output|), per variant. Measured worst on
# 2026-11-27 (x86-64, onnxruntime 1.32; every model, both shape forms, batches 1 and 3, cpu and the
# stand-in), and what sets each:
# - float32 graphs (the optimizer's outputs; 4-bit and bnb4 weights, which both runtimes dequantize to
#   the same float32 values): measured <= 4.8e-7. The zoo's dot products have at most a few hundred
#   terms, each layer's float32 sum off by ~sqrt(K) u of its magnitude (u = 6e-8) in another order,
#   over a dozen layers: ~1e-6; 1e-5 leaves a margin of 20 over the measurement.
F32_TOL = 1e-5
# - integer pipelines (QOperator; quantize_dynamic, against onnxruntime running the graph as written,
#   as its fused kernels round differently): the integer parts agree exactly and the float parts to
#   float32 rounding: measured <= 7.2e-7. quantize_dynamic's models also quantize activations at run
#   time (DynamicQuantizeLinear), where a float32 ulp before the quantizer can move a value one 8-bit
#   step, which no fixed tolerance covers on every machine (vit on the stand-in: 7.1e-3 of the output
#   with OpenBLAS's Haswell kernels, bit-equal with its SkylakeX ones). This tolerance holds those
#   models with their quantizers pinned to onnxruntime's values (measured <= 3.1e-7 with either kernel
#   set, 2026-11-28); the quantizers' own results may differ from onnxruntime's only across rounding
#   ties that their inputs' float32 differences explain, and the model as written is held to this plus
#   the bound counting one 8-bit step per quantizer on each output's path
#   (tests/zoo/dynamic_quantization.py).
EXACT_Q_TOL = F32_TOL
# - QDQ with 8-bit activations: the float ops between a DequantizeLinear and the next QuantizeLinear
#   sum in another order than onnxruntime's, so a value within a float32 ulp of a rounding boundary
#   lands one 8-bit step away (cnn: 4 of the AveragePool's quantized outputs, one step of 0.019
#   each), and the output moves by that step times the layers' gains: measured 5.6e-3.
QDQ8_TOL = 2e-2
# - QDQ with 16-bit activations: the same flips, with steps 256 times smaller: measured 1.5e-4.
QDQ16_TOL = 1e-3
# - float16 graphs: float16 rounding (u = 4.9e-4) of each op's output where the two runtimes compute
#   some ops (LayerNormalization, Softmax, attention) in float32 and others not: measured 2.6e-3
#   (t5_decoder, opt-fp16-gpu), about five float16 roundings; 1e-2 is twenty.
F16_TOL = 1e-2
# - vit, static QOperator with uint8 weights: one QLinearAdd (the residual after the class token) has an
#   element whose exact value is 138.500004: MLAS computes its fixed part zc - (ra za + rb zb) with a
#   contracted multiply-add and gets 138.50002 (-> 139); gpuops' float32 a ra + b rb + zc is 138.5 (-> 138,
#   half to even). The one step (0.058 after the last DequantizeLinear) is 2.3e-2 of the output.
QLINEAR_ADD_TIE_TOL = 3e-2
# - t5_decoder after the optimizer, quantize_dynamic: onnxruntime runs RelativePositionBias on CUDA only,
#   so the oracle is the float32 source and the error is the dynamic quantization itself: 2.5e-2.
QUANTIZED_VS_FLOAT_TOL = 5e-2

VARIANTS = [
    Variant("f32", original, F32_TOL),
    *[Variant(f"opt-L{level}{'-gpu' if gpu else ''}", optimizer(None, level, gpu), F32_TOL)
      for level in (0, 1, 2, 99) for gpu in (False, True)],
    Variant("opt-mha-gpu", optimizer("bert", 0, True, use_multi_head_attention=True), F32_TOL, _transformer),
    Variant("opt-packed", packed, F32_TOL, _bert),
    Variant("opt-bart-mha-gpu", optimizer("bart", 0, True, use_multi_head_attention=True), F32_TOL,
            lambda z: z.model_type == "bart"),
    Variant("opt-clip", optimizer("clip", 0), F32_TOL, lambda z: z.name == "vit"),
    Variant("qdyn-s8", qdyn(), EXACT_Q_TOL),
    Variant("qdyn-u8-perchannel-reducerange", qdyn(weight="QUInt8", per_channel=True, reduce_range=True),
            EXACT_Q_TOL),
    Variant("qdyn-optimized", qdyn(optimized_first=True), EXACT_Q_TOL, _transformer,
            {"t5_decoder": QUANTIZED_VS_FLOAT_TOL}),
    Variant("qstatic-QOperator-u8s8", qstatic("QOperator", "QUInt8", "QInt8"), EXACT_Q_TOL,
            model_tol={"vit": QLINEAR_ADD_TIE_TOL}),
    Variant("qstatic-QOperator-u8u8-perchannel", qstatic("QOperator", "QUInt8", "QUInt8", per_channel=True),
            EXACT_Q_TOL, model_tol={"vit": QLINEAR_ADD_TIE_TOL}),
    Variant("qstatic-QOperator-s8s8-reducerange", qstatic("QOperator", "QInt8", "QInt8", reduce_range=True),
            EXACT_Q_TOL),
    Variant("qstatic-QDQ-u8s8", qstatic("QDQ", "QUInt8", "QInt8"), QDQ8_TOL),
    Variant("qstatic-QDQ-s8s8-perchannel", qstatic("QDQ", "QInt8", "QInt8", per_channel=True), QDQ8_TOL),
    Variant("qstatic-QDQ-u16s8", qstatic("QDQ", "QUInt16", "QInt8"), QDQ16_TOL),
    Variant("qstatic-QDQ-s16s16", qstatic("QDQ", "QInt16", "QInt16"), QDQ16_TOL),
    Variant("qstatic-QDQ-u16u16", qstatic("QDQ", "QUInt16", "QUInt16"), QDQ16_TOL),
    Variant("fp16", fp16, F16_TOL),
    Variant("fp16-converter", fp16_converter, F16_TOL),
    Variant("opt-fp16-gpu", optimized_fp16, F16_TOL),
    Variant("nbits-QOperator-sym", nbits("QOperator", True), F32_TOL, _nbits_applies),
    Variant("nbits-QOperator-asym", nbits("QOperator", False), F32_TOL, _nbits_applies),
    Variant("nbits-QDQ-asym", nbits("QDQ", False), F32_TOL, _nbits_applies),
    Variant("nbits-QOperator-sym-matmul", nbits("QOperator", True, gather=False), F32_TOL, _nbits_matmul_applies),
    Variant("bnb4-fp4", bnb4(0), F32_TOL, _transformer),
    Variant("bnb4-nf4", bnb4(1), F32_TOL, _transformer),
]
