"""Transformer patterns as the torch exporters write them out -> one op each."""

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

from gpuops.optimizer import optimize

from .helpers import check, make_model, ops

rng = np.random.default_rng(0)
F = TensorProto.FLOAT


def _out():
    return [helper.make_tensor_value_info("Y", F, None)]


def _gelu_nodes(form):
    """x * 0.5 * (1 + erf(x / sqrt 2)) in the orders the exporters use."""
    if form == "torchscript":  # Div, Erf, Add, Mul(x, .), Mul(., 0.5)
        return [helper.make_node("Div", ["X", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["X", "a"], ["m"]),
                helper.make_node("Mul", ["m", "half"], ["Y"])]
    if form == "dynamo":  # Mul(x, 1/sqrt 2), Erf, Add, Mul(0.5, .), Mul(x, .)
        return [helper.make_node("Mul", ["X", "rsqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                helper.make_node("Add", ["one", "e"], ["a"]), helper.make_node("Mul", ["half", "a"], ["m"]),
                helper.make_node("Mul", ["X", "m"], ["Y"])]
    # (x * 0.5) * (1 + erf(x / sqrt 2))
    return [helper.make_node("Mul", ["X", "half"], ["h"]), helper.make_node("Div", ["X", "sqrt2"], ["d"]),
            helper.make_node("Erf", ["d"], ["e"]), helper.make_node("Add", ["e", "one"], ["a"]),
            helper.make_node("Mul", ["h", "a"], ["Y"])]


GELU_CONSTS = [("sqrt2", np.float32(math.sqrt(2))), ("rsqrt2", np.float32(1 / math.sqrt(2))),
               ("one", np.float32(1)), ("half", np.float32(0.5))]


@pytest.mark.parametrize("form", ["torchscript", "dynamo", "half_first"])
def test_gelu(form):
    X = rng.standard_normal((2, 5, 8)).astype(np.float32)
    m = make_model(_gelu_nodes(form), {"X": X}, _out(), inits=GELU_CONSTS, opset=14)
    opt = check(m, {"X": X}, gone=["Erf", "Mul", "Div", "Add"], present=["Gelu"])
    assert len(opt.graph.node) == 1


def test_gelu_with_other_scale_kept():
    X = rng.standard_normal((2, 8)).astype(np.float32)
    consts = [(n, np.float32(0.7)) if n == "half" else (n, v) for n, v in GELU_CONSTS]
    m = make_model(_gelu_nodes("torchscript"), {"X": X}, _out(), inits=consts, opset=14)
    assert ops(optimize(m))["Erf"] == 1


def _layernorm_nodes(x):
    """TorchScript's LayerNorm below opset 17 (axes as an attribute before opset 18)."""
    return [helper.make_node("ReduceMean", [x], ["mu"], axes=[-1]),
            helper.make_node("Sub", [x, "mu"], ["d"]),
            helper.make_node("Pow", ["d", "two"], ["sq"]),
            helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
            helper.make_node("Add", ["var", "eps"], ["ve"]),
            helper.make_node("Sqrt", ["ve"], ["std"]),
            helper.make_node("Div", ["d", "std"], ["n"]),
            helper.make_node("Mul", ["n", "gamma"], ["g"]),
            helper.make_node("Add", ["g", "beta"], ["Y"])]


def _ln_consts(H):
    return [("two", np.float32(2)), ("eps", np.float32(1e-5)), ("gamma", rng.standard_normal(H).astype(np.float32)),
            ("beta", rng.standard_normal(H).astype(np.float32))]


def test_layernorm_opset17():
    X = rng.standard_normal((2, 4, 16)).astype(np.float32)
    m = make_model(_layernorm_nodes("X"), {"X": X}, _out(), inits=_ln_consts(16), opset=17)
    opt = check(m, {"X": X}, present=["LayerNormalization"], gone=["ReduceMean", "Pow", "Sqrt", "Div"], atol=1e-4)
    assert len(opt.graph.node) == 1


def test_skip_layernorm_below_opset17():
    """Below opset 17 (no ai.onnx LayerNormalization), the residual form becomes SkipLayerNormalization."""
    A, B = (rng.standard_normal((2, 4, 16)).astype(np.float32) for _ in range(2))
    nodes = [helper.make_node("Add", ["A", "B"], ["x"])] + _layernorm_nodes("x")
    m = make_model(nodes, {"A": A, "B": B}, _out(), inits=_ln_consts(16), opset=14)
    opt = check(m, {"A": A, "B": B}, present=["SkipLayerNormalization"], gone=["ReduceMean", "Add"], atol=1e-4)
    assert len(opt.graph.node) == 1


def test_layernorm_below_opset17_without_residual_kept():
    X = rng.standard_normal((2, 4, 16)).astype(np.float32)
    m = make_model(_layernorm_nodes("X"), {"X": X}, _out(), inits=_ln_consts(16), opset=14)
    assert ops(optimize(m))["ReduceMean"] == 2
