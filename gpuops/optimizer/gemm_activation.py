"""Gemm + activation -> com.microsoft FusedGemm (float32): Relu, LeakyRelu, Sigmoid, Tanh,
HardSigmoid (the classifier heads of alexnet, vgg19, zfnet512)."""

from __future__ import annotations

from onnx import TensorProto

from .graph import MS, Graph, attr, set_attrs

_DEFAULTS = {"Relu": {}, "Sigmoid": {}, "Tanh": {}, "LeakyRelu": {"alpha": 0.01},
             "HardSigmoid": {"alpha": 0.2, "beta": 0.5}}


def apply(graph: Graph) -> bool:
    removed = []
    for gemm in graph.nodes:
        if gemm.domain not in ("", "ai.onnx") or gemm.op_type != "Gemm" or not graph.single_use(gemm.output[0]):
            continue
        if graph.elem_type(gemm.output[0]) != TensorProto.FLOAT:
            continue
        act = graph.consumers[gemm.output[0]][0]
        if act.domain not in ("", "ai.onnx") or act.op_type not in _DEFAULTS or act in removed:
            continue
        params = {f"activation_{k}": float(attr(act, k, v)) for k, v in _DEFAULTS[act.op_type].items()}
        gemm.op_type, gemm.domain = "FusedGemm", MS
        set_attrs(gemm, activation=act.op_type, **params)
        gemm.output[0] = act.output[0]
        removed.append(act)
        graph.use_domain(MS)
    return graph.remove(*removed)
