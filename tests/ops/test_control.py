"""If / Loop / Scan beyond the onnx node cases: outer-scope values read from nested subgraphs, every
Loop operating mode, Scan axes and directions (opset 9+) and sequence_lens (opset 8), checked against
onnxruntime; and clear errors for misuse."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops

from tests.ops.common import (DEVICES, assert_matches_ort, const, make_model, run_gpuops, run_ort, sequence_info,
                              value_info)

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


# -- Loop --------------------------------------------------------------------------------------------

def _nested_if_loop(M=True, cond=True):
    """Loop whose body holds an If; the branches read the body's y_in, the outer graph's a and b, and
    an outer initializer through two scope levels. The body stops once y passes `limit`."""
    then_b = helper.make_graph([helper.make_node("Add", ["y_in", "a"], ["t"])], "then", [], [value_info("t")])
    else_b = helper.make_graph([helper.make_node("Mul", ["y_in", "b"], ["e"])], "else", [], [value_info("e")])
    body = helper.make_graph(
        [helper.make_node("Less", ["i", "switch"], ["early"]),
         helper.make_node("If", ["early"], ["y_out"], then_branch=then_b, else_branch=else_b),
         helper.make_node("ReduceSum", ["y_out"], ["total"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["cond_out"]),
         helper.make_node("Identity", ["y_out"], ["scan"])],
        "body", [value_info("i", I64, []), value_info("cond_in", B, []), value_info("y_in", F, [3])],
        [value_info("cond_out", B, []), value_info("y_out", F, [3]), value_info("scan", F, [3])])
    inputs = [value_info("a", F, [3]), value_info("b", F, [3]), value_info("y0", F, [3])]
    loop_in = ["M" if M else "", "cond" if cond else "", "y0"]
    if M:
        inputs.append(value_info("M", I64, []))
    if cond:
        inputs.append(value_info("cond", B, []))
    nodes = [helper.make_node("Loop", loop_in, ["y", "ys"], body=body)]
    inits = [const("switch", np.int64(2)), const("limit", np.float32(100))]
    return make_model(nodes, inputs, [value_info("y"), value_info("ys")], inits=inits, opset=13)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("M, cond, trips", [
    (True, True, 5),      # for ... while: stops at M
    (True, True, 20),     # stops when the body's condition turns false
    (True, False, 3),     # for loop (the body's condition still ends it early, as in onnxruntime)
    (False, True, None),  # while loop
    (False, False, None), # no M, no cond: only the body's condition ends it
])
def test_loop_with_nested_if_reading_outer_scope(device, M, cond, trips):
    feeds = {"a": np.array([1, 2, 3], np.float32), "b": np.array([2, 1.5, 1], np.float32),
             "y0": np.array([0.5, -1, 2], np.float32)}
    if M:
        feeds["M"] = np.array(trips, np.int64)
    if cond:
        feeds["cond"] = np.array(True)
    y, ys = assert_matches_ort(_nested_if_loop(M, cond), feeds, device)
    assert ys.shape[0] >= 3


@pytest.mark.parametrize("device", DEVICES)
def test_loop_that_never_runs_returns_its_initial_values(device):
    feeds = {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32), "y0": np.arange(3, dtype=np.float32),
             "M": np.array(0, np.int64), "cond": np.array(True)}
    # the zero-trip scan output has no element shape to take: only the carried value is compared
    assert_matches_ort(_nested_if_loop(), feeds, device, only={0})
    feeds.update(M=np.array(4, np.int64), cond=np.array(False))
    assert_matches_ort(_nested_if_loop(), feeds, device, only={0})


@pytest.mark.parametrize("device", DEVICES)
def test_loop_scan_output_of_scalars_stacks_along_a_new_axis(device):
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["f"], to=F),
         helper.make_node("Mul", ["f", "f"], ["sq"]),
         helper.make_node("Add", ["acc_in", "sq"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [value_info("i", I64, []), value_info("cond_in", B, []), value_info("acc_in", F, [])],
        [value_info("cond_out", B, []), value_info("acc_out", F, []), value_info("sq", F, [])])
    model = make_model([helper.make_node("Loop", ["M", "", "acc0"], ["acc", "squares"], body=body)],
                       [value_info("M", I64, []), value_info("acc0", F, [])],
                       [value_info("acc"), value_info("squares")], opset=16)
    feeds = {"M": np.array(4, np.int64), "acc0": np.array(0.5, np.float32)}
    _, squares = assert_matches_ort(model, feeds, device)
    np.testing.assert_array_equal(squares, np.arange(4, dtype=np.float32) ** 2)


def test_loop_scan_output_changing_shape_is_an_error():
    body = helper.make_graph(
        [helper.make_node("Add", ["i", "one"], ["n"]),
         helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
         helper.make_node("Expand", ["one_f", "n1"], ["grow"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [value_info("i", I64, []), value_info("cond_in", B, [])],
        [value_info("cond_out", B, []), value_info("grow", F, None)])
    inits = [const("one", np.int64(1)), const("zero", np.array([0], np.int64)), const("one_f", np.float32(1))]
    model = make_model([helper.make_node("Loop", ["M", ""], ["out"], body=body)], [value_info("M", I64, [])],
                       [value_info("out")], inits=inits, opset=16)
    with pytest.raises(gpuops.NodeError, match="Loop scan output 0 changed"):
        run_gpuops(model, {"M": np.array(3, np.int64)})


# -- If ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flag", [True, False])
def test_if_sequence_output_built_from_outer_values(device, flag):
    then_b = helper.make_graph([helper.make_node("SequenceConstruct", ["x", "y"], ["s"])], "then", [],
                               [sequence_info("s", F)])
    else_b = helper.make_graph([helper.make_node("Add", ["x", "y"], ["xy"]),
                                helper.make_node("SequenceConstruct", ["xy"], ["s2"])], "else", [],
                               [sequence_info("s2", F)])
    model = make_model([helper.make_node("If", ["c"], ["out"], then_branch=then_b, else_branch=else_b)],
                       [value_info("c", B, [1]), value_info("x", F, [2]), value_info("y", F, [2])],
                       [sequence_info("out", F)], opset=16)
    feeds = {"c": np.array([flag]), "x": np.array([1, 2], np.float32), "y": np.array([3, 5], np.float32)}
    (out,) = assert_matches_ort(model, feeds, device)
    assert len(out) == (2 if flag else 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flag", [True, False])
def test_if_branches_that_pass_outer_values_on(device, flag):
    """A branch of Identity chains (openWakeWord's else: the score computed before the If) returns the
    enclosing scope's values as they are; the other branch computes; a profiled run runs the branch's nodes.
    Each output as onnxruntime gives it."""
    then_b = helper.make_graph([helper.make_node("Identity", ["x"], ["x1"]), helper.make_node("Identity", ["x1"], ["x2"]),
                                helper.make_node("Identity", ["y"], ["y1"])], "then", [], [value_info("x2"), value_info("y1")])
    else_b = helper.make_graph([helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("Identity", ["s"], ["s2"]),
                                helper.make_node("Identity", ["x"], ["x3"])], "else", [], [value_info("s2"), value_info("x3")])
    nodes = [helper.make_node("Mul", ["a", "a"], ["x"]), helper.make_node("Neg", ["a"], ["y"]),
             helper.make_node("If", ["c"], ["o1", "o2"], then_branch=then_b, else_branch=else_b),
             helper.make_node("Add", ["o1", "o2"], ["out"])]
    model = make_model(nodes, [value_info("c", B, []), value_info("a", F, [3])], [value_info("out"), value_info("o1")],
                       opset=16)
    feeds = {"c": np.array(flag), "a": np.array([1, -2, 0.5], np.float32)}
    assert_matches_ort(model, feeds, device)
    if device == "cpu":
        sess = gpuops.InferenceSession(model, device="cpu")
        plain = sess.run(None, feeds)
        profiled = sess.run(None, feeds, profile=True)
        for p, q in zip(plain, profiled):
            np.testing.assert_array_equal(p, q)
        assert [r["op"] for r in sess.last_profile["nodes"]].count("If") == 1
        from gpuops.executor import run as executor

        plans = []
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(executor, "run_plan", lambda plan, env, ctx, _run=executor.run_plan: (plans.append(plan),
                                                                                             _run(plan, env, ctx)))
            sess.run(None, feeds)
        assert len(plans) == (0 if flag else 1)  # the branch that passes values on runs no plan of its own


def test_if_condition_with_several_elements_is_an_error():
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "b", [], [value_info("o")])
    model = make_model([helper.make_node("If", ["c"], ["out"], then_branch=branch, else_branch=branch)],
                       [value_info("c", B, [2]), value_info("x", F, [2])], [value_info("out")], opset=16)
    with pytest.raises(gpuops.NodeError, match="If condition must hold a single element"):
        run_gpuops(model, {"c": np.array([True, False]), "x": np.ones(2, np.float32)})


# -- Scan --------------------------------------------------------------------------------------------

def _scan_body():
    """State s [2]; two scan elements x, r [2]; outputs s + x * r and (s, x - r) per step."""
    return helper.make_graph(
        [helper.make_node("Mul", ["x", "r"], ["xr"]),
         helper.make_node("Add", ["s_in", "xr"], ["s_out"]),
         helper.make_node("Sub", ["x", "r"], ["d"]),
         helper.make_node("Identity", ["s_out"], ["s_copy"])],
        "body", [value_info("s_in", F, [2]), value_info("x", F, [2]), value_info("r", F, [2])],
        [value_info("s_out", F, [2]), value_info("s_copy", F, [2]), value_info("d", F, [2])])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_axes, in_dirs, out_axes, out_dirs", [
    ([0, 0], [0, 1], [0, 0], [0, 0]),    # bidirectional: the same input forward and backward
    ([1, -1], [1, 0], [1, -1], [1, 0]),  # scan along axis 1 / the last axis, prepend one output
    ([1, 0], [0, 0], [-2, 0], [0, 1]),
])
def test_scan9_axes_and_directions(device, in_axes, in_dirs, out_axes, out_dirs):
    rng = np.random.default_rng(0)
    T = 4
    shape_x = [T, 2] if in_axes[0] == 0 else [2, T]
    shape_r = [T, 2] if in_axes[1] == 0 else [2, T]
    node = helper.make_node("Scan", ["s0", "X", "R"], ["s", "out_s", "out_d"], body=_scan_body(),
                            num_scan_inputs=2, scan_input_axes=in_axes, scan_input_directions=in_dirs,
                            scan_output_axes=out_axes, scan_output_directions=out_dirs)
    model = make_model(node, [value_info("s0", F, [2]), value_info("X", F, shape_x), value_info("R", F, shape_r)],
                       [value_info("s"), value_info("out_s"), value_info("out_d")], opset=16)
    feeds = {"s0": rng.standard_normal(2).astype(np.float32),
             "X": rng.standard_normal(shape_x).astype(np.float32),
             "R": rng.standard_normal(shape_r).astype(np.float32)}
    assert_matches_ort(model, feeds, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("directions", [[0, 0], [1, 0], [0, 1]])
def test_scan8_batch_sequence_lens_and_directions(device, directions):
    rng = np.random.default_rng(1)
    batch, T = 3, 4
    node = helper.make_node("Scan", ["lens", "s0", "X", "R"], ["s", "out_s", "out_d"], body=_scan_body(),
                            num_scan_inputs=2, directions=directions)
    model = make_model(node, [value_info("lens", I64, [batch]), value_info("s0", F, [batch, 2]),
                              value_info("X", F, [batch, T, 2]), value_info("R", F, [batch, T, 2])],
                       [value_info("s"), value_info("out_s"), value_info("out_d")], opset=8)
    lens = np.array([4, 2, 3], np.int64)
    feeds = {"lens": lens, "s0": rng.standard_normal((batch, 2)).astype(np.float32),
             "X": rng.standard_normal((batch, T, 2)).astype(np.float32),
             "R": rng.standard_normal((batch, T, 2)).astype(np.float32)}
    want = run_ort(model, feeds)
    got = run_gpuops(model, feeds, device)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    for g, w in zip(got[1:], want[1:]):  # past a sequence's length scan outputs are undefined
        assert g.shape == w.shape and g.dtype == w.dtype
        for b, n in enumerate(lens):
            np.testing.assert_allclose(g[b, :n], w[b, :n], rtol=1e-6)


def test_scan_inputs_of_different_lengths_are_an_error():
    node = helper.make_node("Scan", ["s0", "X", "R"], ["s", "out_s", "out_d"], body=_scan_body(),
                            num_scan_inputs=2)
    model = make_model(node, [value_info("s0", F, [2]), value_info("X", F, [3, 2]), value_info("R", F, [4, 2])],
                       [value_info("s"), value_info("out_s"), value_info("out_d")], opset=16)
    feeds = {"s0": np.zeros(2, np.float32), "X": np.zeros((3, 2), np.float32), "R": np.zeros((4, 2), np.float32)}
    with pytest.raises(gpuops.NodeError, match="differ in sequence length"):
        run_gpuops(model, feeds)
