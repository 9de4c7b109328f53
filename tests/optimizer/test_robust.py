"""A rewrite never fails a session: the bias-less Conv + Add that Paddle2ONNX writes folds, and a
rewrite that raises on a graph is undone and skipped there, with a warning (strict mode raises)."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops
from gpuops import optimizer
from gpuops.optimizer import OptimizerWarning, optimize

from .helpers import check, make_model, ops

rng = np.random.default_rng(0)
F = TensorProto.FLOAT


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("op", ["Add", "Mul"])
@pytest.mark.parametrize("shape", [(1, 4, 1, 1), (4, 1, 1), ()])
def test_biasless_conv_then_add_or_mul_folds(op, shape):
    """Paddle2ONNX: Conv(X, W) without bias, then Add of the bias as a (1, M, 1, 1) constant."""
    X, W, c = _f32(2, 3, 6, 6), _f32(4, 3, 3, 3), _f32(*shape)
    nodes = [helper.make_node("Conv", ["X", "W"], ["c"], pads=[1, 1, 1, 1]), helper.make_node(op, ["c", "k"], ["Y"])]
    m = make_model(nodes, {"X": X}, [helper.make_tensor_value_info("Y", F, None)], inits=[("W", W), ("k", c)])
    opt = check(m, {"X": X}, gone=[op], kept=["Conv"], level="basic", atol=1e-4)
    (conv,) = opt.graph.node
    assert len(conv.input) == (3 if op == "Add" else 2)  # Add created the bias; Mul needs none


def test_biasless_conv_add_relu_becomes_one_fused_conv():
    X, W, b = _f32(1, 3, 6, 6), _f32(8, 3, 3, 3), _f32(1, 8, 1, 1)
    nodes = [helper.make_node("Conv", ["X", "W"], ["c"]), helper.make_node("Add", ["c", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["Y"])]
    m = make_model(nodes, {"X": X}, [helper.make_tensor_value_info("Y", F, None)], inits=[("W", W), ("b", b)])
    opt = check(m, {"X": X}, gone=["Add", "Relu", "Conv"], present=["FusedConv"], atol=1e-4)
    assert len(opt.graph.node) == 1


def _model():
    X, W = _f32(1, 3, 5, 5), _f32(4, 3, 3, 3)
    nodes = [helper.make_node("Conv", ["X", "W"], ["c"]), helper.make_node("Relu", ["c"], ["Y"])]
    return make_model(nodes, {"X": X}, [helper.make_tensor_value_info("Y", F, None)], inits=[("W", W)]), X


def _broken(graph):
    """A rewrite that edits the graph, then fails (as a rewrite meeting a pattern it did not foresee)."""
    for n in graph.nodes:
        n.op_type = "Half-done"
    graph.nodes[0].input.append("no such value")
    raise IndexError("list index out of range")


def test_a_failing_rewrite_is_undone_and_skipped_with_a_warning(monkeypatch):
    monkeypatch.delenv("GPUOPS_OPTIMIZER_STRICT")
    calls = []
    real = optimizer.conv_fusion.apply

    def failing(graph):
        calls.append(1)
        _broken(graph)

    monkeypatch.setattr(optimizer.conv_fusion, "apply", failing)
    m, X = _model()
    with pytest.warns(OptimizerWarning, match=r"conv_fusion rewrite failed .*IndexError"):
        opt = optimize(m, "all")
    assert len(calls) == 1  # skipped on this graph from then on
    assert dict(ops(opt)) == {"Conv": 1, "Relu": 1}  # as before the failing rewrite ran
    with pytest.warns(OptimizerWarning):
        sess = gpuops.InferenceSession(m, device="cpu")
    monkeypatch.setattr(optimizer.conv_fusion, "apply", real)
    want = gpuops.InferenceSession(m, device="cpu", optimize="none").run(None, {"X": X})[0]
    np.testing.assert_array_equal(sess.run(None, {"X": X})[0], want)


def test_strict_mode_raises_the_rewrites_exception(monkeypatch):
    monkeypatch.setattr(optimizer.conv_fusion, "apply", _broken)
    m, _ = _model()
    with pytest.raises(IndexError):
        optimize(m, "all")  # GPUOPS_OPTIMIZER_STRICT=1 in these tests
    monkeypatch.delenv("GPUOPS_OPTIMIZER_STRICT")
    with pytest.raises(IndexError):
        optimize(m, "all", strict=True)


def test_a_model_a_rewrite_cannot_read_still_gets_a_gpuops_error(monkeypatch):
    """A malformed attribute: a session refuses the node at load (gpuops.onnx.validate); the optimizer
    called on the model itself skips the rewrite that trips on it."""
    monkeypatch.delenv("GPUOPS_OPTIMIZER_STRICT")
    node = helper.make_node("Transpose", ["x"], ["y"], name="bad")
    node.attribute.append(helper.make_attribute("perm", 1))  # INTS in the spec; an INT here
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, [3, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(gpuops.ModelError, match="node 'bad' \\(Transpose\\): attribute 'perm' is INT"):
        gpuops.InferenceSession(model, device="cpu").run(None, {"x": np.zeros((2, 3), np.float32)})
    with pytest.warns(OptimizerWarning, match="eliminate_noops"):
        optimize(model, "all", device="cpu")


def test_negative_dims_are_unknown_not_equal():
    """Paddle2ONNX declares a dynamic batch as dim_value -1: two such values are not known to have
    the same shape, so a residual Z of another input stays an Add (FusedConv needs Z of Y's shape),
    while one of the same symbolic dims fuses."""
    X, W = _f32(2, 3, 5, 5), _f32(3, 3, 1, 1)
    nodes = [helper.make_node("Conv", ["X", "W"], ["c"]), helper.make_node("Add", ["c", "Z"], ["Y"])]
    for dims, fused in (([-1, 3, 5, 5], False), (["n", 3, 5, 5], True)):
        inputs = [helper.make_tensor_value_info(name, F, dims) for name in ("X", "Z")]
        m = make_model(nodes, inputs, [helper.make_tensor_value_info("Y", F, None)], inits=[("W", W)])
        for z in (X, X[:1]):  # a Z of batch 1 broadcasts: only the unfused model may take it
            if fused and z is not X:
                continue
            opt = check(m, {"X": X, "Z": z}, atol=1e-5)
            assert (dict(ops(opt)) == {"FusedConv": 1}) == fused, dict(ops(opt))
