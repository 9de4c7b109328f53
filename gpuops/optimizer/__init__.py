"""Plan-time graph optimizer: rewrites an ONNX model before gpuops builds its plan.

``optimize(model, level)`` returns an optimized copy of the model (the input is not changed). The
result is a valid ONNX model using only ai.onnx and com.microsoft ops, which onnxruntime runs too.

Levels (as onnxruntime's graph_optimization_level):

* ``"none"``: the model as given.
* ``"basic"``: rewrites that keep to ai.onnx ops: constant folding (:mod:`.constant_folding`),
  Shape/Size of static shapes (:mod:`.shape_to_constant`), no-op removal (:mod:`.eliminate_noops`),
  common subexpressions (:mod:`.cse`), BatchNormalization into Conv/ConvTranspose/Gemm
  (:mod:`.fold_batchnorm`), Mul/Add by constants into Conv (:mod:`.fold_mul_add_into_conv`),
  MatMul + Add -> Gemm (:mod:`.matmul_add_to_gemm`), Transposes into Gemm (:mod:`.transpose_into_matmul`),
  dead nodes (:mod:`.dead_code`).
* ``"all"``: also the com.microsoft fusions: a BatchNormalization left over becomes a 1x1
  depthwise Conv (:mod:`.batchnorm_to_conv`), Conv + Add + activation -> FusedConv
  (:mod:`.conv_fusion`), Gemm + activation -> FusedGemm (:mod:`.gemm_activation`), Transposes into
  MatMul -> FusedMatMul, and the transformer patterns
  (:mod:`.attention`, :mod:`.gelu`, :mod:`.layernorm`).

With ``device="cpu"`` and level ``"all"``, a float16 graph first computes in float32
(:mod:`.float16_compute`, as onnxruntime's CPU provider does: NumPy's float16 arithmetic is
about 100x slower than float32); the graph's inputs and outputs keep their float16 types.

The rewrites run in rounds until none applies. Only the main graph is rewritten (subgraphs of
If/Loop/Scan run as given; the values they read from the main graph keep their names).
"""

from __future__ import annotations

from functools import partial

import onnx

from ..errors import GpuopsError, ModelError
from . import (attention, batchnorm_to_conv, constant_folding, conv_fusion, cse, dead_code, eliminate_noops,
               float16_compute, fold_batchnorm, fold_mul_add_into_conv, gelu, gemm_activation, layernorm,
               matmul_add_to_gemm, shape_to_constant, transpose_into_matmul)
from .constant_folding import FOLD_LIMIT
from .graph import Graph

LEVELS = ("none", "basic", "all")
MAX_ROUNDS = 8

__all__ = ["optimize", "save_model", "LEVELS", "FOLD_LIMIT"]


def _passes(level: str, fold_limit: int):
    basic = [partial(constant_folding.apply, fold_limit=fold_limit), shape_to_constant.apply, eliminate_noops.apply,
             cse.apply, fold_batchnorm.apply, fold_mul_add_into_conv.apply, matmul_add_to_gemm.apply,
             transpose_into_matmul.apply, dead_code.apply]
    if level == "basic":
        return basic
    return basic + [attention.apply, gelu.apply, layernorm.apply, batchnorm_to_conv.apply, conv_fusion.apply,
                    gemm_activation.apply, partial(transpose_into_matmul.apply, fused_matmul=True), dead_code.apply]


def optimize(model: onnx.ModelProto, level: str = "all", *, fold_limit: int = FOLD_LIMIT,
             device: str | None = None) -> onnx.ModelProto:
    """An optimized copy of ``model`` at ``level`` ("none", "basic" or "all"; see the module doc).

    ``fold_limit`` caps the bytes of one folded node's outputs (default 1 GiB): a larger constant
    result (e.g. an Expand to a huge shape) is left to run time. ``device`` is the kind of device
    the model will run on ("cpu", "cuda"), for the rewrites that depend on it; None (default):
    only the device-independent ones.
    """
    if level not in LEVELS:
        raise GpuopsError(f"optimize must be one of {LEVELS}, not {level!r}")
    if level == "none":
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = Graph(copy)
    if device == "cpu" and level == "all":
        _apply(float16_compute.apply, graph)  # once, first: the other rewrites then see float32
    passes = _passes(level, fold_limit)
    for _ in range(MAX_ROUNDS):
        changed = False
        for p in passes:
            changed |= _apply(p, graph)
        if not changed:
            break
    return graph.to_model()


def _apply(rewrite, graph: Graph) -> bool:
    """One rewrite; a model it cannot read (a malformed attribute, a node with too few inputs...)
    is a ModelError, never a raw exception."""
    try:
        return rewrite(graph)
    except GpuopsError:
        raise
    except Exception as e:
        fn = getattr(rewrite, "func", rewrite)
        name = f"{fn.__module__.rsplit('.', 1)[-1]}"
        raise ModelError(f"the graph optimizer's {name} rewrite cannot read this model ({type(e).__name__}: {e}); "
                         "the model is malformed, or run it with optimize='none'") from e


def save_model(model: onnx.ModelProto, path) -> None:
    """Write ``model`` to ``path`` (tensors over 2 GiB in all go to an external data file beside it)."""
    import os

    try:
        onnx.save_model(model, os.fspath(path))
    except ValueError:  # the 2 GiB protobuf limit
        onnx.save_model(model, os.fspath(path), save_as_external_data=True,
                        location=os.path.basename(os.fspath(path)) + ".data")
