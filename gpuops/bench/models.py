"""Benchmark models: the onnx package's light models plus generated ones (fixed seeds, onnx.helper)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LIGHT = ["resnet50", "vgg19", "densenet121", "inception_v1", "inception_v2", "squeezenet", "shufflenet",
         "bvlc_alexnet", "zfnet512"]


@dataclass
class BenchModel:
    name: str
    make: Callable[[int], onnx.ModelProto]  # batch -> model
    feeds: Callable[[onnx.ModelProto, int, np.random.Generator], dict]
    kind: str = "onnx"
    batchable: bool = True


def light_path(name: str) -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx")


def random_feeds(model: onnx.ModelProto, batch: int, rng: np.random.Generator) -> dict:
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else batch for d in tt.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[vi.name] = rng.integers(0, 16, shape).astype(dtype)
    return feeds


def _w(rng, name, *shape, scale=0.05):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def transformer_encoder(batch: int, seq: int = 64, d: int = 256, heads: int = 4, layers: int = 2) -> onnx.ModelProto:
    """A post-norm BERT-style encoder (MatMul/Softmax/LayerNormalization/Gelu via Erf), opset 17."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    h = "x"
    dh = d // heads
    inits.append(numpy_helper.from_array(np.array([batch, seq, heads, dh], np.int64), "shape_split"))
    inits.append(numpy_helper.from_array(np.array([batch, seq, d], np.int64), "shape_merge"))
    inits.append(numpy_helper.from_array(np.array(1 / np.sqrt(dh), np.float32), "scale"))
    for c, v in [("half", 0.5), ("one", 1.0), ("rsqrt2", 1 / np.sqrt(2))]:
        inits.append(numpy_helper.from_array(np.array(v, np.float32), c))
    for i in range(layers):
        p = f"l{i}_"
        for n in ("q", "k", "v", "o"):
            inits.append(_w(rng, p + n, d, d))
        inits += [_w(rng, p + "ff1", d, 4 * d), _w(rng, p + "ff2", 4 * d, d),
                  numpy_helper.from_array(np.ones(d, np.float32), p + "g1"),
                  numpy_helper.from_array(np.zeros(d, np.float32), p + "b1"),
                  numpy_helper.from_array(np.ones(d, np.float32), p + "g2"),
                  numpy_helper.from_array(np.zeros(d, np.float32), p + "b2")]
        for n in ("q", "k", "v"):
            nodes += [helper.make_node("MatMul", [h, p + n], [p + n + "_p"]),
                      helper.make_node("Reshape", [p + n + "_p", "shape_split"], [p + n + "_r"]),
                      helper.make_node("Transpose", [p + n + "_r"], [p + n + "_t"],
                                       perm=[0, 2, 3, 1] if n == "k" else [0, 2, 1, 3])]
        nodes += [helper.make_node("MatMul", [p + "q_t", p + "k_t"], [p + "s"]),
                  helper.make_node("Mul", [p + "s", "scale"], [p + "ss"]),
                  helper.make_node("Softmax", [p + "ss"], [p + "a"], axis=-1),
                  helper.make_node("MatMul", [p + "a", p + "v_t"], [p + "ctx"]),
                  helper.make_node("Transpose", [p + "ctx"], [p + "ctx_t"], perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", [p + "ctx_t", "shape_merge"], [p + "ctx_m"]),
                  helper.make_node("MatMul", [p + "ctx_m", p + "o"], [p + "att"]),
                  helper.make_node("Add", [h, p + "att"], [p + "r1"]),
                  helper.make_node("LayerNormalization", [p + "r1", p + "g1", p + "b1"], [p + "n1"], axis=-1),
                  helper.make_node("MatMul", [p + "n1", p + "ff1"], [p + "f1"]),
                  helper.make_node("Mul", [p + "f1", "rsqrt2"], [p + "f1s"]),
                  helper.make_node("Erf", [p + "f1s"], [p + "erf"]),
                  helper.make_node("Add", [p + "erf", "one"], [p + "erf1"]),
                  helper.make_node("Mul", [p + "f1", p + "erf1"], [p + "g_a"]),
                  helper.make_node("Mul", [p + "g_a", "half"], [p + "gelu"]),
                  helper.make_node("MatMul", [p + "gelu", p + "ff2"], [p + "f2"]),
                  helper.make_node("Add", [p + "n1", p + "f2"], [p + "r2"]),
                  helper.make_node("LayerNormalization", [p + "r2", p + "g2", p + "b2"], [p + "out"], axis=-1)]
        h = p + "out"
    nodes.append(helper.make_node("Identity", [h], ["y"]))
    g = helper.make_graph(nodes, "encoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, d])], inits)
    return _model(g, 17)


def lstm_model(batch: int, seq: int = 32, inp: int = 64, hidden: int = 128) -> onnx.ModelProto:
    """A bidirectional LSTM followed by a linear head, opset 14."""
    rng = np.random.default_rng(1)
    inits = [_w(rng, "W", 2, 4 * hidden, inp), _w(rng, "R", 2, 4 * hidden, hidden), _w(rng, "B", 2, 8 * hidden),
             _w(rng, "head", 2 * hidden, 10), numpy_helper.from_array(np.array([seq, batch, 2 * hidden], np.int64), "shp")]
    nodes = [helper.make_node("LSTM", ["x", "W", "R", "B"], ["Y", "Y_h"], hidden_size=hidden, direction="bidirectional"),
             helper.make_node("Transpose", ["Y"], ["Yt"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["Yt", "shp"], ["Yr"]),
             helper.make_node("MatMul", ["Yr", "head"], ["y"])]
    g = helper.make_graph(nodes, "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, inp])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [seq, batch, 10])], inits)
    return _model(g, 14)


def quantized_mlp(batch: int, d: int = 512, layers: int = 3) -> onnx.ModelProto:
    """QuantizeLinear -> (QLinearMatMul)^n -> DequantizeLinear, uint8, opset 13."""
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(128, np.uint8), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q0"])]
    for i in range(layers):
        inits.append(numpy_helper.from_array(rng.integers(0, 256, (d, d)).astype(np.uint8), f"w{i}"))
        inits.append(numpy_helper.from_array(np.array(0.002, np.float32), f"ws{i}"))
        nodes.append(helper.make_node("QLinearMatMul", [f"q{i}", "s", "z", f"w{i}", f"ws{i}", "z", "s", "z"], [f"q{i + 1}"]))
    nodes.append(helper.make_node("DequantizeLinear", [f"q{layers}", "s", "z"], ["y"]))
    g = helper.make_graph(nodes, "qmlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, d])], inits)
    return _model(g, 13)


def _model(graph: onnx.GraphProto, opset: int) -> onnx.ModelProto:
    # IR 10 (onnx 1.16): new enough for these opsets, old enough for every onnxruntime peer
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def suite(names: list[str] | None = None) -> list[BenchModel]:
    models = [BenchModel(n, lambda b, n=n: onnx.load(light_path(n)), random_feeds, batchable=False) for n in LIGHT]
    models += [BenchModel("transformer_encoder", transformer_encoder, random_feeds),
               BenchModel("lstm", lstm_model, random_feeds),
               BenchModel("quantized_mlp", quantized_mlp, random_feeds)]
    if names:
        known = {m.name for m in models}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise SystemExit(f"unknown benchmark model(s) {unknown}; choose from {sorted(known)}")
        models = [m for m in models if m.name in names]
    return models
