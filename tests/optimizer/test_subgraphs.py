"""The optimizer inside If/Loop/Scan bodies (with the values they read from outside), and an If
whose condition is constant (or computed from static shapes) replaced by its branch."""

from collections import Counter

import numpy as np
import pytest
from onnx import TensorProto, helper

from gpuops.optimizer import optimize

from .helpers import check, make_model

rng = np.random.default_rng(0)
F = TensorProto.FLOAT


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def all_ops(graph) -> Counter:
    """Op types of ``graph`` and of every graph nested in it."""
    c = Counter()
    for n in graph.node:
        c[n.op_type] += 1
        for a in n.attribute:
            for g in ([a.g] if a.type == a.GRAPH else list(a.graphs)):
                c += all_ops(g)
    return c


def _vi(name, shape=None, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def _conv_bn_relu(x, y, prefix, M=4, C=3):
    """Conv (weights ``{prefix}W``) -> BatchNormalization -> Relu, with its initializers."""
    nodes = [helper.make_node("Conv", [x, f"{prefix}W"], [f"{prefix}c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", [f"{prefix}c"] + [f"{prefix}{k}" for k in "sbmv"], [f"{prefix}n"]),
             helper.make_node("Relu", [f"{prefix}n"], [y])]
    inits = [(f"{prefix}W", _f32(M, C, 3, 3))] + [(f"{prefix}{k}", _f32(M)) for k in "sbm"]
    inits.append((f"{prefix}v", rng.random(M).astype(np.float32) + 0.5))
    return nodes, inits



def _branch(name, nodes, out, inits=()):
    from tests.ops.common import const
    return helper.make_graph(nodes, name, [], [_vi(out)], initializer=[const(*t) for t in inits])


def _if_model(cond_nodes, X):
    """then: Conv-BN-Relu on X (weights in the branch); else: Conv-BN-Relu with outer weights."""
    then_nodes, then_inits = _conv_bn_relu("X", "t_y", "t_")
    else_nodes, else_inits = _conv_bn_relu("X", "e_y", "e_")
    then_g = _branch("then", then_nodes, "t_y", then_inits)
    else_g = _branch("else", else_nodes, "e_y")  # its weights are the main graph's initializers
    if_node = helper.make_node("If", ["cond"], ["Y"], then_branch=then_g, else_branch=else_g)
    return make_model(cond_nodes + [if_node], {"X": X}, [_vi("Y")], inits=else_inits)


def test_if_on_a_static_shape_is_inlined_and_its_branch_optimized():
    """The condition is computed from X's static shape: Shape -> Gather -> Equal folds, the If goes,
    and the branch's Conv-BN-Relu becomes one FusedConv."""
    def model(X):
        cond = [helper.make_node("Shape", ["X"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["n"]),
                helper.make_node("Equal", ["n", "two"], ["cond"])]
        m = _if_model(cond, X)
        m.graph.initializer.extend([helper.make_tensor("zero", TensorProto.INT64, [], [0]),
                                    helper.make_tensor("two", TensorProto.INT64, [], [2])])
        return m

    X = _f32(2, 3, 6, 6)
    opt = check(model(X), {"X": X}, gone=["If", "BatchNormalization", "Shape"], present=["FusedConv"], atol=1e-4)
    assert all_ops(opt.graph) == {"FusedConv": 1}
    X = X[:1]  # the else branch, with the main graph's weights
    opt = check(model(X), {"X": X}, gone=["If"], level="basic", atol=1e-4)
    assert all_ops(opt.graph) == {"Relu": 1, "Conv": 1}


def test_if_on_a_fed_condition_keeps_the_if_and_optimizes_both_branches():
    X = _f32(1, 3, 6, 6)
    m = _if_model([], X)
    m.graph.input.append(_vi("cond", [], TensorProto.BOOL))
    for c in (True, False):
        feeds = {"X": X, "cond": np.array(c)}
        opt = check(m, feeds, kept=["If"], atol=1e-4)
        assert all_ops(opt.graph) == {"If": 1, "FusedConv": 2}, all_ops(opt.graph)


def test_branch_outputs_that_no_branch_node_makes():
    """A branch returning an outer value, its own initializer, or one value twice."""
    X = _f32(3, 4)
    k = _f32(3, 4)
    then_g = helper.make_graph([helper.make_node("Relu", ["X"], ["r"])], "then", [],
                               [_vi("X"), _vi("k"), _vi("r"), _vi("r")],
                               initializer=[helper.make_tensor("k", F, [3, 4], k.ravel())])
    else_g = helper.make_graph([helper.make_node("Neg", ["X"], ["q"])], "else", [],
                               [_vi("q"), _vi("q"), _vi("X"), _vi("q")])
    nodes = [helper.make_node("If", ["c"], ["a", "b", "d", "e"], then_branch=then_g, else_branch=else_g)]
    for value in (True, False):
        m = make_model(nodes, {"X": X}, [_vi(o) for o in "abde"],
                       inits=[helper.make_tensor("c", TensorProto.BOOL, [], [value])])
        opt = check(m, {"X": X}, gone=["If"], level="basic")
        assert [o.name for o in opt.graph.output] == list("abde")


def test_inlined_branch_with_a_nested_loop_reading_branch_values():
    """The branch's values are renamed when inlined; the Loop inside it reads them under the new names."""
    X = _f32(2, 3)
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "t"], ["acc2"]), helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("acc", [2, 3])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("acc2", [2, 3])])
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["X", "X"], ["t"]),
         helper.make_node("Loop", ["trip", "", "X"], ["l"], body=body)], "then", [], [_vi("l")])
    else_g = helper.make_graph([helper.make_node("Identity", ["X"], ["x2"])], "else", [], [_vi("x2")])
    nodes = [helper.make_node("If", ["c"], ["Y"], then_branch=then_g, else_branch=else_g)]
    m = make_model(nodes, {"X": X}, [_vi("Y")], inits=[helper.make_tensor("c", TensorProto.BOOL, [], [True]),
                                                       helper.make_tensor("trip", TensorProto.INT64, [], [3])])
    opt = check(m, {"X": X}, gone=["If"], kept=["Loop"], level="basic")
    # (the body's Identity of its condition stays: a body output is kept as made by a node)
    assert all_ops(opt.graph) == {"Mul": 1, "Loop": 1, "Add": 1, "Identity": 1}


def test_loop_body_folds_with_outer_constants_and_fuses():
    """A Loop body computing from a constant of the main graph: the constant arithmetic folds
    inside the body, its MatMul + Add becomes a Gemm, and the Gemm takes the Relu (FusedGemm)."""
    X, W = _f32(2, 4), _f32(4, 4)
    body = helper.make_graph(
        [helper.make_node("Mul", ["W", "half"], ["w2"]),  # outer constants only: folds in the body
         helper.make_node("MatMul", ["acc", "w2"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["ad"]),
         helper.make_node("Relu", ["ad"], ["acc2"]), helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("acc", [2, 4])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("acc2", [2, 4])])
    nodes = [helper.make_node("Loop", ["trip", "", "X"], ["Y"], body=body)]
    m = make_model(nodes, {"X": X}, [_vi("Y")],
                   inits=[("W", W), ("half", np.array(0.5, np.float32)), ("b", _f32(4)),
                          helper.make_tensor("trip", TensorProto.INT64, [], [3])])
    opt = check(m, {"X": X}, kept=["Loop"], atol=1e-5)
    assert all_ops(opt.graph) == {"Loop": 1, "FusedGemm": 1, "Identity": 1}, all_ops(opt.graph)
    opt = check(m, {"X": X}, kept=["Loop"], level="basic", atol=1e-5)
    assert all_ops(opt.graph) == {"Loop": 1, "Gemm": 1, "Relu": 1, "Identity": 1}, all_ops(opt.graph)


def test_scan_body_is_optimized():
    X = _f32(5, 3)
    body = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["xi"]), helper.make_node("Add", ["s", "xi"], ["s2"]),
         helper.make_node("Neg", ["s2"], ["y"])],
        "body", [_vi("s", [3]), _vi("x", [3])], [_vi("s2", [3]), _vi("y", [3])])
    nodes = [helper.make_node("Scan", ["s0", "X"], ["S", "Y"], body=body, num_scan_inputs=1)]
    m = make_model(nodes, {"X": X}, [_vi("S"), _vi("Y")], inits=[("s0", np.zeros(3, np.float32))])
    opt = check(m, {"X": X}, gone=["Identity"], kept=["Scan"], level="basic")
    assert all_ops(opt.graph) == {"Scan": 1, "Add": 1, "Neg": 1}


def test_if_inside_a_loop_body_on_a_constant_is_inlined():
    X = _f32(2, 3)
    then_g = helper.make_graph([helper.make_node("Add", ["acc", "one"], ["t"])], "then", [], [_vi("t")])
    else_g = helper.make_graph([helper.make_node("Sub", ["acc", "one"], ["e"])], "else", [], [_vi("e")])
    body = helper.make_graph(
        [helper.make_node("Greater", ["one", "zero"], ["pos"]),  # outer constants: folds to True
         helper.make_node("If", ["pos"], ["acc2"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("acc", [2, 3])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("acc2", [2, 3])])
    nodes = [helper.make_node("Loop", ["trip", "", "X"], ["Y"], body=body)]
    m = make_model(nodes, {"X": X}, [_vi("Y")],
                   inits=[("one", np.array(1.0, np.float32)), ("zero", np.array(0.0, np.float32)),
                          helper.make_tensor("trip", TensorProto.INT64, [], [4])])
    opt = check(m, {"X": X}, kept=["Loop"], level="basic")
    assert all_ops(opt.graph) == {"Loop": 1, "Add": 1, "Identity": 1}, all_ops(opt.graph)


@pytest.mark.parametrize("level", ["basic", "all"])
def test_optimizing_twice_changes_nothing_more(level):
    X = _f32(1, 3, 6, 6)
    m = _if_model([], X)
    m.graph.input.append(_vi("cond", [], TensorProto.BOOL))
    once = optimize(m, level)
    assert all_ops(optimize(once, level).graph) == all_ops(once.graph)
