"""Transposes moved down through layout-blind ops until they cancel (tf2onnx's NHWC pairs around
each activation), kept only when Transposes go."""

import numpy as np
from onnx import TensorProto, helper

from .helpers import check, make_model, ops

rng = np.random.default_rng(0)
F = TensorProto.FLOAT
NHWC, NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _out(*names):
    return [helper.make_tensor_value_info(n, F, None) for n in names or ("Y",)]


def test_nhwc_pair_around_an_activation_cancels_and_the_conv_takes_it():
    """Conv -> Transpose to NHWC -> + bias (C,) -> Relu6 written out -> Transpose back -> Conv."""
    X, W1, W2, b = _f32(2, 3, 6, 6), _f32(8, 3, 3, 3), _f32(4, 8, 1, 1), _f32(8)
    nodes = [helper.make_node("Conv", ["X", "W1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["c"], ["t"], perm=NHWC), helper.make_node("Add", ["t", "b"], ["a"]),
             helper.make_node("Clip", ["a", "zero", "six"], ["r"]),
             helper.make_node("Transpose", ["r"], ["u"], perm=NCHW), helper.make_node("Conv", ["u", "W2"], ["Y"])]
    inits = [("W1", W1), ("W2", W2), ("b", b), ("zero", np.float32(0)), ("six", np.float32(6))]
    m = make_model(nodes, {"X": X}, _out(), inits=inits)
    opt = check(m, {"X": X}, gone=["Transpose", "Add"], level="basic", atol=1e-5)
    assert dict(ops(opt)) == {"Conv": 2, "Clip": 1}
    assert dict(ops(check(m, {"X": X}, atol=1e-5))) == {"FusedConv": 1, "Conv": 1}


def test_two_transposed_inputs_merge_and_a_pooling_head_absorbs():
    """Add(T(a), T(b)) -> T(a + b); a mean over H and W without keepdims then needs no Transpose; a
    mean with keepdims passes it on to the Transpose back."""
    A, B = _f32(2, 4, 5, 5), _f32(2, 4, 5, 5)
    nodes = [helper.make_node("Transpose", ["A"], ["ta"], perm=NHWC),
             helper.make_node("Transpose", ["B"], ["tb"], perm=NHWC), helper.make_node("Add", ["ta", "tb"], ["s"]),
             helper.make_node("Sigmoid", ["s"], ["g"]),
             helper.make_node("ReduceMean", ["g"], ["Y"], axes=[1, 2], keepdims=0)]
    m = make_model(nodes, {"A": A, "B": B}, _out(), opset=17)
    opt = check(m, {"A": A, "B": B}, gone=["Transpose"], level="basic", rtol=1e-6, atol=1e-6)
    # (the NCHW mean over H and W is then a GlobalAveragePool)
    assert dict(ops(opt)) == {"Add": 1, "Sigmoid": 1, "GlobalAveragePool": 1, "Flatten": 1}
    nodes[-1:] = [helper.make_node("ReduceMean", ["g"], ["k"], axes=[1, 2], keepdims=1),
                  helper.make_node("Transpose", ["k"], ["Y"], perm=NCHW)]
    m = make_model(nodes, {"A": A, "B": B}, _out(), opset=17)
    check(m, {"A": A, "B": B}, gone=["Transpose"], level="basic", rtol=1e-6, atol=1e-6)


def test_transposes_that_do_not_go_stay_where_the_exporter_put_them():
    """An attention's K^T scaled then multiplied: moving the Transpose below the scale removes none,
    so the graph stays as written (the attention rewrite matches that order). A Transpose whose
    value is also a graph output stays too."""
    Q, K = _f32(2, 3, 5, 4), _f32(2, 3, 5, 4)
    nodes = [helper.make_node("Transpose", ["K"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("Mul", ["kt", "s"], ["ks"]), helper.make_node("MatMul", ["Q", "ks"], ["Y"])]
    m = make_model(nodes, {"Q": Q, "K": K}, _out(), inits=[("s", np.float32(0.5))])
    opt = check(m, {"Q": Q, "K": K}, level="basic")
    assert [n.op_type for n in opt.graph.node] == ["Transpose", "Mul", "MatMul"]
    X = _f32(2, 3, 4, 4)
    nodes = [helper.make_node("Transpose", ["X"], ["T"], perm=NHWC), helper.make_node("Relu", ["T"], ["r"]),
             helper.make_node("Transpose", ["r"], ["Y"], perm=NCHW)]
    opt = check(make_model(nodes, {"X": X}, _out("Y", "T")), {"X": X}, level="basic")
    assert ops(opt)["Transpose"] >= 1 and [o.name for o in opt.graph.output] == ["Y", "T"]
