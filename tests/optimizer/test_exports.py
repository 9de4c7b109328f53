"""The optimizer on real exports (``exports/``, written by ``make_exports.py`` with torch's
TorchScript and dynamo exporters and by ``make_tf_exports.py`` with tf2onnx from Keras, dynamic
axes, random weights): the fusions fire as on the hand-built patterns, and the optimized model
gives the unoptimized model's results in gpuops (cpu and the CUDA path) and onnxruntime's on the
original, at two batch sizes / sequence lengths."""

import os

import numpy as np
import onnx
import pytest

from gpuops.optimizer import optimize

from .helpers import check, ops

HERE = os.path.join(os.path.dirname(__file__), "exports")
FILES = sorted(f[:-5] for f in os.listdir(HERE) if f.endswith(".onnx"))

# what every export of an architecture must become (op: count; 0 = gone), at level "all"
EXPECTED = {
    "efficientnet_silu": {"QuickGelu": 8, "Sigmoid": 0, "BatchNormalization": 0, "FusedConv": 4, "Add": 0},
    "efficientnet_swish_tf2onnx": {"QuickGelu": 5, "Sigmoid": 0},
    # tf2onnx leaves NHWC Transposes around each written-out hard_swish: they cancel, and every
    # activation reaches its Conv
    "mobilenetv3_hardswish_tf2onnx": {"FusedConv": 7, "Conv": 0, "HardSwish": 0, "HardSigmoid": 0, "Clip": 0,
                                      "Div": 0, "Transpose": 5},
    "mobilenetv3_hardswish": {"FusedConv": 12, "HardSigmoid": 0, "HardSwish": 0, "Conv": 0, "Add": 0},
    "bert_encoder": {"BiasGelu": 2, "Erf": 0, "Attention": 2, "Softmax": 0, "Transpose": 0, "Reshape": 0,
                     "Concat": 0, "MatMul": 6},  # MatMul: the two FFN projections and the output one per layer
    "gpt2_tanh_gelu": {"FastGelu": 1, "Tanh": 0, "Attention": 1, "Softmax": 0, "Transpose": 0, "Reshape": 0},
}


def _feeds(model: onnx.ModelProto, batch: int, seq: int):
    rng = np.random.default_rng(batch * 100 + seq)
    names = [i.name for i in model.graph.input]
    if names == ["image"]:  # NCHW from torch, NHWC from Keras
        dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:]]
        return {"image": rng.standard_normal((batch, *dims)).astype(np.float32)}
    mask = np.ones((batch, seq), np.int64)
    mask[-1, seq // 2:] = 0  # padding in the last row
    return {"input_ids": rng.integers(0, 50, (batch, seq)), "attention_mask": mask,
            "token_type_ids": (np.arange(seq) >= seq // 2).astype(np.int64)[None].repeat(batch, 0)}


@pytest.mark.parametrize("name", FILES)
def test_export_is_fused_and_matches(name):
    model = onnx.load(os.path.join(HERE, name + ".onnx"))
    arch = name if name in EXPECTED else next(a for a in EXPECTED if name.startswith(a))
    opt = optimize(model, "all")
    have = ops(opt)
    assert {op: have[op] for op in EXPECTED[arch]} == EXPECTED[arch], dict(have)
    if arch in ("bert_encoder", "gpt2_tanh_gelu"):  # every LayerNorm is one op (below opset 17, the
        # embeddings' one, after a broadcast sum, gpuops' own LayerNormalization)
        assert have["LayerNormalization"] + have["SkipLayerNormalization"] == {"bert": 5, "gpt2": 3}[arch[:4]], \
            dict(have)
    for batch, seq in ((1, 5), (3, 9)):
        # float32 sums of at most a few hundred products of O(1) values, in another order after
        # folding and fusing: a few hundred eps of the output's magnitude (~1-10)
        check(model, _feeds(model, batch, seq), rtol=1e-4, atol=1e-4)
