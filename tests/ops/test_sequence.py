"""Sequence and optional ops beyond the onnx node cases: negative positions, out-of-range positions,
uneven and zero-length splits, ConcatFromSequence axes, SequenceMap with tensor inputs and several
outputs, optionals of tensors and sequences; checked against onnxruntime."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpuops

from tests.conformance.harness import assert_close, device_guard

F, I32, I64, B = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL
DEVICES = ["cpu", "cuda"]  # "cuda" is the CPU stand-in without a GPU: it proves no implicit transfers


def _vi(name, t=F, shape=None):
    return helper.make_tensor_value_info(name, t, shape)


def _seq(name, t=F):
    return helper.make_tensor_sequence_value_info(name, t, None)


def _model(nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _run(model, feeds, device="cpu"):
    sess = gpuops.InferenceSession(model, device=device)
    with device_guard(device):
        return sess.run(None, feeds)


def _check(model, feeds, device):
    want, got = _ort(model, feeds), _run(model, feeds, device)
    assert len(got) == len(want)
    for o, g, w in zip(model.graph.output, got, want):
        assert_close(g, w, 1e-6, 1e-6, o.name)
    return got


THREE = {"x": np.arange(4, dtype=np.float32), "y": np.arange(6, dtype=np.float32).reshape(2, 3) - 3,
         "z": np.array([7.5], np.float32)}


def _three(nodes, outputs, inits=(), opset=18):
    """A model building the sequence [x, y, z] (differently shaped tensors) and running ``nodes``."""
    return _model([helper.make_node("SequenceConstruct", ["x", "y", "z"], ["s"])] + nodes,
                  [_vi("x", F, [4]), _vi("y", F, [2, 3]), _vi("z", F, [1])], outputs, inits, opset)


# -- positions ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("position", [0, 1, 2, -1, -2, -3, None])
def test_sequence_erase_positions(device, position):
    ins, inits = ["s"], []
    if position is not None:
        ins.append("p")
        inits.append(_const("p", np.int64(position)))
    model = _three([helper.make_node("SequenceErase", ins, ["out"]),
                    helper.make_node("SequenceLength", ["out"], ["n"])], [_seq("out"), _vi("n", I64, [])], inits)
    out, n = _check(model, THREE, device)
    assert len(out) == 2 and n == 2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("position", [0, 2, -1, -3])
def test_sequence_at_negative_and_positive(device, position):
    model = _three([helper.make_node("SequenceAt", ["s", "p"], ["t"])], [_vi("t")],
                   [_const("p", np.int32(position))])
    (t,) = _check(model, THREE, device)
    np.testing.assert_array_equal(t, list(THREE.values())[position])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("position", [0, 3, -1, -3, None])
def test_sequence_insert_positions(device, position):
    ins, inits = ["s", "w"], [_const("w", np.full((2, 2), 9, np.float32))]
    if position is not None:
        ins.append("p")
        inits.append(_const("p", np.int64(position)))
    model = _three([helper.make_node("SequenceInsert", ins, ["out"])], [_seq("out")], inits)
    (out,) = _check(model, THREE, device)
    assert len(out) == 4


def test_position_computed_on_the_device():
    """A position produced by a node (not a constant) is read from the device explicitly."""
    model = _three([helper.make_node("Sub", ["a", "b"], ["p"]), helper.make_node("SequenceAt", ["s", "p"], ["t"])],
                   [_vi("t")], [_const("a", np.int64(1)), _const("b", np.int64(3))])
    for device in DEVICES:
        _check(model, THREE, device)


@pytest.mark.parametrize("op, position", [
    ("SequenceAt", 3), ("SequenceAt", -4),
    ("SequenceInsert", 4), ("SequenceInsert", -4),
    ("SequenceErase", 3), ("SequenceErase", -4),
])
def test_position_out_of_range_is_a_node_error(op, position):
    ins = ["s", "w", "p"] if op == "SequenceInsert" else ["s", "p"]
    model = _three([helper.make_node(op, ins, ["out"], name="bad")],
                   [_vi("out") if op == "SequenceAt" else _seq("out")],
                   [_const("p", np.int64(position)), _const("w", np.zeros(1, np.float32))])
    with pytest.raises(Exception):  # onnxruntime refuses it too
        _ort(model, THREE)
    with pytest.raises(gpuops.NodeError, match=rf"'bad'.*position {position} is out of range"):
        _run(model, THREE)


def test_erase_from_an_empty_sequence_is_a_node_error():
    model = _model([helper.make_node("SequenceEmpty", [], ["e"]), helper.make_node("SequenceErase", ["e"], ["out"])],
                   [], [_seq("out")])
    with pytest.raises(gpuops.NodeError, match="empty sequence"):
        _run(model, {})


def test_sequence_feed_and_empty_sequence_of_a_dtype():
    model = _model([helper.make_node("SequenceEmpty", [], ["e"], dtype=I64),
                    helper.make_node("SequenceLength", ["e"], ["n0"]),
                    helper.make_node("SequenceInsert", ["e", "n0"], ["one"]),
                    helper.make_node("SequenceLength", ["s"], ["n"]),
                    helper.make_node("SequenceAt", ["s", "m1"], ["last"])],
                   [_seq("s")], [_seq("one", I64), _vi("n", I64, []), _vi("last")],
                   [_const("m1", np.int64(-1))])
    feeds = {"s": [np.ones((2, 2), np.float32), np.arange(3, dtype=np.float32)]}
    one, n, last = _check(model, feeds, "cpu")
    assert n.dtype == np.int64 and n.shape == () and one[0].dtype == np.int64


# -- SplitToSequence / ConcatFromSequence ------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("split, attrs", [
    (np.int64(4), dict(axis=1)),                  # uneven: the last piece is shorter
    (np.int32(10), dict(axis=-1)),                # one piece
    (np.array([1, 0, 9], np.int64), dict(axis=1)),  # a zero-length piece
    (np.array([2, 1], np.int32), dict(axis=0, keepdims=0)),  # keepdims is ignored with split
    (None, dict(axis=-1, keepdims=0)),
    (None, dict(axis=0)),
])
def test_split_to_sequence(device, split, attrs):
    x = np.arange(30, dtype=np.float32).reshape(3, 10)
    ins, inits = ["x"], []
    if split is not None:
        ins.append("split")
        inits.append(_const("split", split))
    model = _model([helper.make_node("SplitToSequence", ins, ["s"], **attrs)], [_vi("x", F, [3, 10])],
                   [_seq("s")], inits)
    _check(model, {"x": x}, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis, new_axis", [(0, 0), (-1, 0), (1, 1), (-1, 1), (2, 1), (-3, 1)])
def test_concat_from_sequence_axes(device, axis, new_axis):
    model = _model([helper.make_node("SequenceConstruct", ["a", "b", "a"], ["s"]),
                    helper.make_node("ConcatFromSequence", ["s"], ["out"], axis=axis, new_axis=new_axis)],
                   [_vi("a", F, [2, 3]), _vi("b", F, [2, 3])], [_vi("out")])
    feeds = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": -np.ones((2, 3), np.float32)}
    _check(model, feeds, device)


def test_concat_from_sequence_bad_axis_is_a_node_error():
    model = _model([helper.make_node("SequenceConstruct", ["a"], ["s"]),
                    helper.make_node("ConcatFromSequence", ["s"], ["out"], axis=2)],
                   [_vi("a", F, [2, 3])], [_vi("out")])
    with pytest.raises(gpuops.NodeError, match="axis 2 is out of range"):
        _run(model, {"a": np.ones((2, 3), np.float32)})


# -- SequenceMap -------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_sequence_map_two_outputs_sequence_and_tensor_inputs(device):
    body = helper.make_graph(
        [helper.make_node("Add", ["x", "bias"], ["sum"]),
         helper.make_node("ReduceSum", ["sum"], ["tot"], keepdims=0),
         helper.make_node("Mul", ["tot", "k"], ["scaled"])],
        "body", [_vi("x", F, None), _vi("bias", F, [1]), _vi("k", F, [])],
        [_vi("sum", F, None), _vi("scaled", F, [])])
    model = _three([helper.make_node("SplitToSequence", ["ks"], ["kseq"], keepdims=0),
                    helper.make_node("SequenceMap", ["s", "bias", "kseq"], ["sums", "scaled"], body=body)],
                   [_seq("sums"), _seq("scaled")], [_const("bias", np.array([0.5], np.float32)),
                                                   _const("ks", np.array([1, -2, 3], np.float32))])
    sums, scaled = _check(model, THREE, device)
    assert [s.shape for s in sums] == [(4,), (2, 3), (1,)]


def test_sequence_map_sequences_of_different_lengths_is_a_node_error():
    body = helper.make_graph([helper.make_node("Add", ["x", "y"], ["o"])], "body",
                             [_vi("x", F, None), _vi("y", F, None)], [_vi("o", F, None)])
    model = _three([helper.make_node("SequenceErase", ["s"], ["short"]),
                    helper.make_node("SequenceMap", ["s", "short"], ["o"], body=body)], [_seq("o")])
    with pytest.raises(gpuops.NodeError, match="input 1 has 2 elements, input_sequence has 3"):
        _run(model, THREE)


# -- optional ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_optional_of_tensor_and_sequence(device):
    seq_type = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None))
    model = _three([helper.make_node("Optional", ["x"], ["ox"]),
                    helper.make_node("Optional", ["s"], ["os"]),
                    helper.make_node("Optional", [], ["none"], type=seq_type),
                    helper.make_node("OptionalHasElement", ["ox"], ["has_x"]),
                    helper.make_node("OptionalHasElement", ["none"], ["has_none"]),
                    helper.make_node("OptionalHasElement", ["y"], ["has_plain"]),  # opset 18: a plain tensor
                    helper.make_node("OptionalGetElement", ["os"], ["s_back"]),
                    helper.make_node("OptionalGetElement", ["z"], ["z_back"])],  # opset 18: passes through
                   [_vi("has_x", B, []), _vi("has_none", B, []), _vi("has_plain", B, []), _seq("s_back"),
                    _vi("z_back")])
    has_x, has_none, has_plain, s_back, z_back = _check(model, THREE, device)
    assert has_x and not has_none and has_plain and has_x.shape == () and len(s_back) == 3


def test_optional_get_element_of_an_empty_optional_is_a_node_error():
    model = _model([helper.make_node("Optional", [], ["none"], type=helper.make_tensor_type_proto(F, None)),
                    helper.make_node("OptionalGetElement", ["none"], ["out"], name="get")],
                   [], [_vi("out")], opset=15)
    with pytest.raises(gpuops.NodeError, match="'get'.*empty optional"):
        _run(model, {})
