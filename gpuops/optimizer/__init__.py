"""Plan-time graph optimizer: rewrites an ONNX model before gpuops builds its plan.

``optimize(model, level)`` returns an optimized copy of the model (the input is not changed). The
result is a valid ONNX model using only ai.onnx and com.microsoft ops (and, for the CPU, the functions
below), which onnxruntime runs too.

Levels (as onnxruntime's graph_optimization_level):

* ``"none"``: the model as given.
* ``"basic"``: rewrites that keep to ai.onnx ops: constant folding (:mod:`.constant_folding`),
  Shape/Size of static shapes (:mod:`.shape_to_constant`), no-op removal (:mod:`.eliminate_noops`),
  common subexpressions (:mod:`.cse`), BatchNormalization into Conv/ConvTranspose/Gemm
  (:mod:`.fold_batchnorm`), Mul/Add by constants into Conv (:mod:`.fold_mul_add_into_conv`), Mul by a
  constant into the MatMul (and bias) before it (:mod:`.fold_mul_into_matmul`), Transposes moved
  down through layout-blind ops until they cancel (tf2onnx's NHWC pairs, :mod:`.sink_transposes`),
  a tensor unstacked and stacked back whole -> itself (:mod:`.restack`), a reshape of a reshape -> one
  Reshape (:mod:`.reshape_chains`), MatMul + Add -> Gemm
  (:mod:`.matmul_add_to_gemm`), Transposes into Gemm (:mod:`.transpose_into_matmul`),
  ReduceMean over the spatial axes -> GlobalAveragePool (:mod:`.reduce_mean_to_pool`), an If with a
  constant condition inlined (:mod:`.inline_if`), a classifier's label lookup (ArgMax,
  ArrayFeatureExtractor, Reshape, Cast) -> ArgMax (+ Gather) (:mod:`.argmax_labels`), a Scaler into
  the LinearClassifier / LinearRegressor it feeds (:mod:`.fold_scaler`), dead nodes (:mod:`.dead_code`).
* ``"all"``: also the com.microsoft fusions: a BatchNormalization left over becomes a 1x1
  depthwise Conv (:mod:`.batchnorm_to_conv`), Conv + Add + activation -> FusedConv
  (:mod:`.conv_fusion`), Gemm + activation -> FusedGemm (:mod:`.gemm_activation`), Transposes into
  MatMul -> FusedMatMul, SiLU / Swish -> QuickGelu (:mod:`.silu`), HardSigmoid and HardSwish
  written out -> the ops (:mod:`.hard_activations`), and the transformer patterns
  (:mod:`.attention`, :mod:`.gelu`, :mod:`.layernorm`, :mod:`.skip_layernorm`; with static shapes,
  attention whose heads any chain of layout ops splits and merges, as torch's nn.MultiheadAttention exports it:
  :mod:`.attention_layouts`); and first, QDQ groups -> QLinearConv, QLinearMatMul, QLinearAdd,
  QLinearGlobalAveragePool, QGemm, as onnxruntime fuses them (:mod:`.qdq_fusion`); MatMulInteger +
  Cast + Mul by the scales (+ Add of a bias) -> MatMulIntegerToFloat (:mod:`.matmul_integer_to_float`),
  and with the DynamicQuantizeLinear before it -> DynamicQuantizeMatMul (:mod:`.dynamic_quantize_matmul`).

With ``device="cpu"`` and level ``"all"``, a float16 graph first computes in float32
(:mod:`.float16_compute`, as onnxruntime's CPU provider does: NumPy's float16 arithmetic is
about 100x slower than float32); the graph's inputs and outputs keep their float16 types.
Then also gpuops' private fused ops (domain ``ai.gpuops``, :mod:`gpuops.ops.contrib.private`), each
defined in the model as an ONNX function whose body is the nodes it replaced (:mod:`.private_ops`), so
that the model stays valid ONNX that onnxruntime runs: squeeze-and-excitation blocks -> SqueezeExcite
(:mod:`.squeeze_excite`), Conv + SiLU -> ConvSilu (:mod:`.conv_silu`), Transpose -> LayerNormalization ->
Transpose over NCHW's channels -> LayerNormChannels (:mod:`.layernorm_channels`), Casts of int64 ids
and mask into EmbedLayerNormalization -> CastEmbedLayerNormalization (:mod:`.embed_layernorm_cast`), a
one-hot (Equal against the classes, Cast) times a constant table -> OneHotMatMul (:mod:`.one_hot_matmul`).

The rewrites run in rounds until none applies, on the main graph and then, with the same
rewrites, inside every If/Loop/Scan body (recursively; the values a body reads from the scopes
around it keep their names, and the outer graph's constants are constants there). An ``If`` whose
condition is constant is replaced by its branch (:mod:`.inline_if`).

A rewrite that fails on a graph (an exception it did not foresee) is undone and skipped for that
graph, with an :class:`OptimizerWarning`: the session runs without that rewrite there rather than
failing. ``strict=True`` (or the environment variable ``GPUOPS_OPTIMIZER_STRICT=1``, which the
optimizer's tests set) raises the exception instead.
"""

from __future__ import annotations

import os
import warnings
from functools import partial

import onnx

from ..errors import GpuopsError
from . import (argmax_labels, attention, attention_layouts, batchnorm_to_conv, constant_folding, conv_fusion, conv_silu,
               cse, dead_code, dynamic_quantize_matmul, eliminate_noops, embed_layernorm_cast, float16_compute,
               fold_batchnorm,
               fold_mul_add_into_conv, fold_mul_into_matmul, fold_scaler, gelu, gemm_activation, hard_activations,
               inline_if, layernorm, layernorm_channels, matmul_add_to_gemm, matmul_integer_to_float, one_hot_matmul,
               qdq_fusion,
               reduce_mean_to_pool, reshape_chains, restack, shape_to_constant, silu, sink_transposes, skip_layernorm,
               squeeze_excite, transpose_into_matmul)
from .constant_folding import FOLD_LIMIT
from .graph import Graph, subgraphs

LEVELS = ("none", "basic", "all")
MAX_ROUNDS = 8

__all__ = ["optimize", "save_model", "LEVELS", "FOLD_LIMIT", "OptimizerWarning"]


class OptimizerWarning(UserWarning):
    """A rewrite failed on a graph and was skipped there (the model runs without it)."""


def _passes(level: str, fold_limit: int):
    """The rewrites of ``level`` in the order of a round, as (name, function)."""
    basic = [("constant_folding", partial(constant_folding.apply, fold_limit=fold_limit)),
             ("shape_to_constant", shape_to_constant.apply), ("inline_if", inline_if.apply),
             ("eliminate_noops", eliminate_noops.apply), ("cse", cse.apply), ("restack", restack.apply),
             ("sink_transposes", sink_transposes.apply),
             ("fold_batchnorm", fold_batchnorm.apply),
             ("fold_mul_add_into_conv", fold_mul_add_into_conv.apply),
             ("fold_mul_into_matmul", fold_mul_into_matmul.apply),
             ("reduce_mean_to_pool", reduce_mean_to_pool.apply),
             ("matmul_add_to_gemm", matmul_add_to_gemm.apply), ("transpose_into_matmul", transpose_into_matmul.apply),
             ("argmax_labels", argmax_labels.apply), ("fold_scaler", fold_scaler.apply),
             ("dead_code", dead_code.apply)]
    # after the fusions, whose patterns (attention masks) hold the chains as exported
    tail = [("reshape_chains", reshape_chains.apply), ("dead_code", dead_code.apply)]
    if level == "basic":
        return basic + tail
    # qdq_fusion first: constant folding would turn a weight's DequantizeLinear into a float weight
    return [("qdq_fusion", qdq_fusion.apply)] + basic + [
        ("attention", attention.apply), ("attention_layouts", attention_layouts.apply),
        ("gelu", gelu.apply), ("silu", silu.apply),
        ("hard_activations", hard_activations.apply), ("layernorm", layernorm.apply),
        ("skip_layernorm", skip_layernorm.apply),
        ("batchnorm_to_conv", batchnorm_to_conv.apply), ("conv_fusion", conv_fusion.apply),
        ("gemm_activation", gemm_activation.apply),
        ("matmul_integer_to_float", matmul_integer_to_float.apply),
        ("dynamic_quantize_matmul", dynamic_quantize_matmul.apply),
        ("transpose_into_fused_matmul", partial(transpose_into_matmul.apply, fused_matmul=True))] + tail


def optimize(model: onnx.ModelProto, level: str = "all", *, fold_limit: int = FOLD_LIMIT,
             device: str | None = None, strict: bool | None = None) -> onnx.ModelProto:
    """An optimized copy of ``model`` at ``level`` ("none", "basic" or "all"; see the module doc).

    ``fold_limit`` caps the bytes of one folded node's outputs (default 1 GiB): a larger constant
    result (e.g. an Expand to a huge shape) is left to run time. ``device`` is the kind of device
    the model will run on ("cpu", "cuda"), for the rewrites that depend on it; None (default):
    only the device-independent ones. ``strict``: a rewrite's unexpected exception is raised
    instead of skipping the rewrite (default: the ``GPUOPS_OPTIMIZER_STRICT`` environment variable).
    """
    if level not in LEVELS:
        raise GpuopsError(f"optimize must be one of {LEVELS}, not {level!r}")
    if level == "none":
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    if strict is None:
        strict = os.environ.get("GPUOPS_OPTIMIZER_STRICT", "") not in ("", "0")
    graph = Graph(copy)
    cpu = device == "cpu" and level == "all"
    first = [("float16_compute", float16_compute.apply)] if cpu else []
    passes = _passes(level, fold_limit)
    if cpu:  # gpuops' private fused ops, which its CPU ops run (elsewhere they would run as their functions)
        passes[-1:-1] = [("squeeze_excite", squeeze_excite.apply), ("conv_silu", conv_silu.apply),
                         ("layernorm_channels", layernorm_channels.apply),
                         ("embed_layernorm_cast", embed_layernorm_cast.apply),
                         ("one_hot_matmul", one_hot_matmul.apply)]
    _optimize_graph(graph, first, passes, strict)
    return copy


def _optimize_graph(graph: Graph, first, passes, strict: bool) -> None:
    """Run ``first`` once (float16_compute: the others then see float32), then ``passes`` in rounds
    until none applies; then each If/Loop/Scan body left, recursively, and write the graph back.

    A rewrite that raises (not ``strict``) puts the graph back as it was at the start of its
    round (one snapshot per round: a snapshot per rewrite costs more than the rewrites on large
    graphs), is skipped on this graph from then on, and the round starts again without it."""
    failed: set = set()
    _rounds(graph, first, 1, failed, strict)
    _rounds(graph, passes, MAX_ROUNDS, failed, strict)
    for node in graph.nodes:
        for _, body in subgraphs(node):
            _optimize_graph(Graph(graph.model, body, outer=graph), [], passes, strict)
    graph.to_model()


def _rounds(graph: Graph, passes, rounds: int, failed: set, strict: bool) -> None:
    done = 0
    while done < rounds:
        snapshot = graph.checkpoint()
        changed = False
        try:
            for name, rewrite in passes:
                if name not in failed:
                    current = name
                    changed |= rewrite(graph)
        except Exception as e:
            if strict:
                raise
            graph.restore(snapshot)
            failed.add(current)
            warnings.warn(f"the graph optimizer's {current} rewrite failed on graph {graph.proto.name!r} "
                          f"({type(e).__name__}: {e}); it is skipped there", OptimizerWarning, stacklevel=4)
            continue  # the round again, without it
        done += 1
        if not changed:
            break


def save_model(model: onnx.ModelProto, path) -> None:
    """Write ``model`` to ``path`` (tensors over 2 GiB in all go to an external data file beside it)."""
    import os

    try:
        onnx.save_model(model, os.fspath(path))
    except ValueError:  # the 2 GiB protobuf limit
        onnx.save_model(model, os.fspath(path), save_as_external_data=True,
                        location=os.path.basename(os.fspath(path)) + ".data")
