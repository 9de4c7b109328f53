"""No-op removal (Identity, Dropout, Reshape/Squeeze/Unsqueeze/Expand/Slice/Cast/Transpose that change
nothing), reshape chains into one Reshape, and CSE."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from gpuops.optimizer import optimize

from .helpers import check, make_model, ops

F = TensorProto.FLOAT
X = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)


def _out(*names):
    return [helper.make_tensor_value_info(n, F, None) for n in names]


def test_noops_removed():
    nodes = [helper.make_node("Identity", ["X"], ["a"]),
             helper.make_node("Dropout", ["a"], ["b"]),
             helper.make_node("Reshape", ["b", "shape"], ["c"]),
             helper.make_node("Cast", ["c"], ["d"], to=TensorProto.FLOAT),
             helper.make_node("Transpose", ["d"], ["e"], perm=[0, 1]),
             helper.make_node("Neg", ["e"], ["Y"])]
    m = make_model(nodes, {"X": X}, _out("Y"), inits=[("shape", np.array([2, 3], np.int64))])
    opt = check(m, {"X": X}, gone=["Identity", "Dropout", "Reshape", "Cast", "Transpose"], level="basic")
    assert [n.input[0] for n in opt.graph.node] == ["X"]


def test_graph_output_names_kept():
    """An Identity making a graph output: its input's producer makes that output instead; an Identity
    from a graph input to a graph output stays."""
    nodes = [helper.make_node("Neg", ["X"], ["n"]), helper.make_node("Identity", ["n"], ["Y"]),
             helper.make_node("Identity", ["X"], ["Z"])]
    m = make_model(nodes, {"X": X}, _out("Y", "Z"))
    opt = check(m, {"X": X}, level="basic")
    assert [(n.op_type, n.output[0]) for n in opt.graph.node] == [("Neg", "Y"), ("Identity", "Z")]


def test_shape_ops_that_keep_the_shape_removed():
    nodes = [helper.make_node("Squeeze", ["X", "none"], ["a"]),  # no axes on a shape without 1s: nothing
             helper.make_node("Expand", ["a", "same"], ["b"]),
             helper.make_node("Slice", ["b", "zero", "big", "ax3", "one"], ["c"]),
             helper.make_node("Slice", ["c", "zero", "big"], ["d"]),
             helper.make_node("Neg", ["d"], ["Y"])]
    inits = [("none", np.array([], np.int64)), ("same", np.array([2, 3, 4], np.int64)),
             ("zero", np.array([0], np.int64)), ("big", np.array([2 ** 62], np.int64)),
             ("ax3", np.array([2], np.int64)), ("one", np.array([1], np.int64))]
    X3 = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    m = make_model(nodes, {"X": X3}, _out("Y"), inits=inits)
    opt = check(m, {"X": X3}, gone=["Squeeze", "Expand", "Slice"], level="basic")
    assert [n.input[0] for n in opt.graph.node] == ["X"]


def test_a_reversing_slice_of_the_same_shape_kept():
    nodes = [helper.make_node("Slice", ["X", "last", "before", "ax", "back"], ["Y"])]
    inits = [("last", np.array([-1], np.int64)), ("before", np.array([-(2 ** 62)], np.int64)),
             ("ax", np.array([1], np.int64)), ("back", np.array([-1], np.int64))]
    m = make_model(nodes, {"X": X}, _out("Y"), inits=inits)
    check(m, {"X": X}, kept=["Slice"], level="basic")


@pytest.mark.parametrize("ops_chain", [("Squeeze", "Unsqueeze"), ("Unsqueeze", "Flatten"),
                                       ("Reshape", "Squeeze", "Unsqueeze"), ("Flatten", "Reshape")])
def test_reshape_chains_become_one_reshape(ops_chain):
    """Each link reads the first one's input; the links nothing reads any more go. A chain back to the
    input's own shape disappears."""
    X4 = np.random.default_rng(2).standard_normal((2, 1, 3, 1)).astype(np.float32)
    makers = {"Squeeze": lambda i, o: helper.make_node("Squeeze", [i, "ax1"], [o]),
              "Unsqueeze": lambda i, o: helper.make_node("Unsqueeze", [i, "ax0"], [o]),
              "Flatten": lambda i, o: helper.make_node("Flatten", [i], [o], axis=2),
              "Reshape": lambda i, o: helper.make_node("Reshape", [i, "target"], [o])}
    nodes, x = [], "X"
    for k, op_type in enumerate(ops_chain):
        nodes.append(makers[op_type](x, f"r{k}"))
        x = f"r{k}"
    nodes.append(helper.make_node("Neg", [x], ["Y"]))
    inits = [("ax1", np.array([1], np.int64)), ("ax0", np.array([0], np.int64)), ("target", np.array([2, 1, 3], np.int64))]
    m = make_model(nodes, {"X": X4}, _out("Y"), inits=inits)
    opt = check(m, {"X": X4}, level="basic")
    shaping = [n for n in opt.graph.node if n.op_type != "Neg"]
    assert len(shaping) <= 1 and all(n.op_type == "Reshape" and n.input[0] == "X" for n in shaping), \
        [n.op_type for n in opt.graph.node]


def test_a_reshape_read_elsewhere_stays_for_its_other_reader():
    X4 = np.random.default_rng(3).standard_normal((1, 3, 1)).astype(np.float32)
    nodes = [helper.make_node("Squeeze", ["X", "ax"], ["s"]),
             helper.make_node("Unsqueeze", ["s", "ax"], ["u"]),  # back to X's shape: gone
             helper.make_node("Neg", ["s"], ["A"]), helper.make_node("Neg", ["u"], ["B"])]
    m = make_model(nodes, {"X": X4}, _out("A", "B"), inits=[("ax", np.array([2], np.int64))])
    opt = check(m, {"X": X4}, level="basic")
    assert ops(opt) == {"Squeeze": 1, "Neg": 2}
    assert [n.input[0] for n in opt.graph.node if n.op_type == "Neg"] == ["s", "X"]


def test_changing_reshape_and_cast_kept():
    nodes = [helper.make_node("Reshape", ["X", "shape"], ["r"]),
             helper.make_node("Cast", ["r"], ["Y"], to=TensorProto.DOUBLE)]
    m = make_model(nodes, {"X": X}, [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, None)],
                   inits=[("shape", np.array([3, 2], np.int64))])
    check(m, {"X": X}, kept=["Reshape", "Cast"])


def test_training_dropout_kept():
    nodes = [helper.make_node("Dropout", ["X", "", "t"], ["Y", "mask"], seed=0)]
    m = make_model(nodes, {"X": X}, _out("Y"), inits=[("t", np.array(True))])
    assert ops(optimize(m))["Dropout"] == 1


def test_cse():
    nodes = [helper.make_node("Exp", ["X"], ["a"]), helper.make_node("Exp", ["X"], ["b"]),
             helper.make_node("Softmax", ["a"], ["sa"], axis=0), helper.make_node("Softmax", ["b"], ["sb"], axis=0),
             helper.make_node("Softmax", ["b"], ["sc"], axis=1),
             helper.make_node("Sum", ["sa", "sb", "sc"], ["Y"])]
    m = make_model(nodes, {"X": X}, _out("Y"))
    opt = check(m, {"X": X}, level="basic")
    assert ops(opt) == {"Exp": 1, "Softmax": 2, "Sum": 1}


def test_cse_keeps_random_ops():
    nodes = [helper.make_node("RandomNormalLike", ["X"], ["a"]), helper.make_node("RandomNormalLike", ["X"], ["b"]),
             helper.make_node("Sub", ["a", "b"], ["Y"])]
    m = make_model(nodes, {"X": X}, _out("Y"))
    assert ops(optimize(m))["RandomNormalLike"] == 2


def test_values_read_by_subgraphs_keep_their_names():
    """An If branch reads ``a`` (made by an Identity) from the main graph: the Identity stays."""
    branch = helper.make_graph([helper.make_node("Neg", ["a"], ["r"])], "then", [], _out("r"))
    other = helper.make_graph([helper.make_node("Abs", ["a"], ["r2"])], "else", [], _out("r2"))
    nodes = [helper.make_node("Identity", ["X"], ["a"]),
             helper.make_node("If", ["cond"], ["Y"], then_branch=branch, else_branch=other)]
    m = make_model(nodes, {"X": X, "cond": np.array(True)}, _out("Y"))
    opt = check(m, {"X": X, "cond": np.array(True)})
    assert ops(opt) == {"Identity": 1, "If": 1}
