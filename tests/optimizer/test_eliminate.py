"""No-op removal (Identity, Dropout, Reshape/Cast/Transpose that change nothing) and CSE."""

import numpy as np
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
