"""Residual Add + LayerNormalization -> com.microsoft SkipLayerNormalization (gpuops/optimizer/skip_layernorm.py)."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from .helpers import check, make_model, ops

rng = np.random.default_rng(0)
F = TensorProto.FLOAT
B, S, D = 2, 5, 16


def _layer(*, bias=False, reuse=False, skip_shape=(B, S, D), stats=False, opset=17):
    """x -> [MatMul(x, W) + b] + r -> LayerNormalization; ``reuse``: the sum read again (the next
    residual's Add); ``stats``: the normalization's mean read too."""
    feeds = {"x": rng.standard_normal((B, S, D)).astype(np.float32),
             "r": rng.standard_normal(skip_shape).astype(np.float32)}
    inits = [("W", rng.standard_normal((D, D)).astype(np.float32) / 4),
             ("b", rng.standard_normal(D).astype(np.float32)),
             ("g", rng.standard_normal(D).astype(np.float32)), ("beta", rng.standard_normal(D).astype(np.float32))]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"])]
    a = "m"
    if bias:
        nodes.append(helper.make_node("Add", ["b", "m"], ["mb"]))
        a = "mb"
    nodes += [helper.make_node("Add", [a, "r"], ["s"]),
              helper.make_node("LayerNormalization", ["s", "g", "beta"], ["Y"] + (["mean"] if stats else []),
                               axis=-1, epsilon=1e-6)]
    outputs = ["Y"] + (["mean"] if stats else [])
    if reuse:
        nodes.append(helper.make_node("Add", ["s", "Y"], ["Z"]))
        outputs.append("Z")
    return make_model(nodes, feeds, outputs, inits=inits, opset=opset), feeds


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("reuse", [False, True])
def test_residual_add_and_layernorm_become_one_node(bias, reuse):
    m, feeds = _layer(bias=bias, reuse=reuse)
    opt = check(m, feeds, present=["SkipLayerNormalization"], gone=["LayerNormalization"], atol=1e-5)
    (node,) = [n for n in opt.graph.node if n.op_type == "SkipLayerNormalization"]
    assert len(node.input) == (5 if bias else 4) and ops(opt)["Add"] == int(reuse)
    assert (list(node.output[1:]) == ["", "", "s"]) == reuse


@pytest.mark.parametrize("case", ["broadcast skip", "mean read"])
def test_other_forms_are_kept(case):
    m, feeds = _layer(skip_shape=(1, S, D)) if case == "broadcast skip" else _layer(stats=True)
    opt = check(m, feeds, kept=["LayerNormalization", "Add"], atol=1e-5)
    assert ops(opt)["SkipLayerNormalization"] == 0
