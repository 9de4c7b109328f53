"""Sequence and optional ops beyond the onnx node cases: negative positions, out-of-range positions,
uneven and zero-length splits, ConcatFromSequence axes, SequenceMap with tensor inputs and several
outputs, optionals of tensors and sequences; checked against onnxruntime."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops

from tests.ops.common import (DEVICES, assert_matches_ort, const, make_model, run_gpuops, run_ort, sequence_info,
                              value_info)

F, I32, I64, B = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL


THREE = {"x": np.arange(4, dtype=np.float32), "y": np.arange(6, dtype=np.float32).reshape(2, 3) - 3,
         "z": np.array([7.5], np.float32)}


def _three(nodes, outputs, inits=(), opset=18):
    """A model building the sequence [x, y, z] (differently shaped tensors) and running ``nodes``."""
    return make_model([helper.make_node("SequenceConstruct", ["x", "y", "z"], ["s"])] + nodes,
                      [value_info("x", F, [4]), value_info("y", F, [2, 3]), value_info("z", F, [1])], outputs,
                      inits=inits, opset=opset)


# -- positions ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("position", [0, 1, 2, -1, -2, -3, None])
def test_sequence_erase_positions(device, position):
    ins, inits = ["s"], []
    if position is not None:
        ins.append("p")
        inits.append(const("p", np.int64(position)))
    model = _three([helper.make_node("SequenceErase", ins, ["out"]),
                    helper.make_node("SequenceLength", ["out"], ["n"])],
                   [sequence_info("out"), value_info("n", I64, [])], inits)
    out, n = assert_matches_ort(model, THREE, device)
    assert len(out) == 2 and n == 2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("position", [0, 2, -1, -3])
def test_sequence_at_negative_and_positive(device, position):
    model = _three([helper.make_node("SequenceAt", ["s", "p"], ["t"])], [value_info("t")],
                   [const("p", np.int32(position))])
    (t,) = assert_matches_ort(model, THREE, device)
    np.testing.assert_array_equal(t, list(THREE.values())[position])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("position", [0, 3, -1, -3, None])
def test_sequence_insert_positions(device, position):
    ins, inits = ["s", "w"], [const("w", np.full((2, 2), 9, np.float32))]
    if position is not None:
        ins.append("p")
        inits.append(const("p", np.int64(position)))
    model = _three([helper.make_node("SequenceInsert", ins, ["out"])], [sequence_info("out")], inits)
    (out,) = assert_matches_ort(model, THREE, device)
    assert len(out) == 4


def test_position_computed_on_the_device():
    """A position produced by a node (not a constant) is read from the device explicitly."""
    model = _three([helper.make_node("Sub", ["a", "b"], ["p"]), helper.make_node("SequenceAt", ["s", "p"], ["t"])],
                   [value_info("t")], [const("a", np.int64(1)), const("b", np.int64(3))])
    for device in DEVICES:
        assert_matches_ort(model, THREE, device)


@pytest.mark.parametrize("op, position", [
    ("SequenceAt", 3), ("SequenceAt", -4),
    ("SequenceInsert", 4), ("SequenceInsert", -4),
    ("SequenceErase", 3), ("SequenceErase", -4),
])
def test_position_out_of_range_is_a_node_error(op, position):
    ins = ["s", "w", "p"] if op == "SequenceInsert" else ["s", "p"]
    model = _three([helper.make_node(op, ins, ["out"], name="bad")],
                   [value_info("out") if op == "SequenceAt" else sequence_info("out")],
                   [const("p", np.int64(position)), const("w", np.zeros(1, np.float32))])
    with pytest.raises(Exception):  # onnxruntime refuses it too
        run_ort(model, THREE)
    with pytest.raises(gpuops.NodeError, match=rf"'bad'.*position {position} is out of range"):
        run_gpuops(model, THREE)


def test_erase_from_an_empty_sequence_is_a_node_error():
    model = make_model([helper.make_node("SequenceEmpty", [], ["e"]),
                        helper.make_node("SequenceErase", ["e"], ["out"])], [], [sequence_info("out")])
    with pytest.raises(gpuops.NodeError, match="empty sequence"):
        run_gpuops(model, {})


def test_sequence_feed_and_empty_sequence_of_a_dtype():
    model = make_model([helper.make_node("SequenceEmpty", [], ["e"], dtype=I64),
                        helper.make_node("SequenceLength", ["e"], ["n0"]),
                        helper.make_node("SequenceInsert", ["e", "n0"], ["one"]),
                        helper.make_node("SequenceLength", ["s"], ["n"]),
                        helper.make_node("SequenceAt", ["s", "m1"], ["last"])],
                       [sequence_info("s")], [sequence_info("one", I64), value_info("n", I64, []), value_info("last")],
                       inits=[const("m1", np.int64(-1))])
    feeds = {"s": [np.ones((2, 2), np.float32), np.arange(3, dtype=np.float32)]}
    one, n, last = assert_matches_ort(model, feeds)
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
        inits.append(const("split", split))
    model = make_model([helper.make_node("SplitToSequence", ins, ["s"], **attrs)], [value_info("x", F, [3, 10])],
                       [sequence_info("s")], inits=inits)
    assert_matches_ort(model, {"x": x}, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis, new_axis", [(0, 0), (-1, 0), (1, 1), (-1, 1), (2, 1), (-3, 1)])
def test_concat_from_sequence_axes(device, axis, new_axis):
    model = make_model([helper.make_node("SequenceConstruct", ["a", "b", "a"], ["s"]),
                        helper.make_node("ConcatFromSequence", ["s"], ["out"], axis=axis, new_axis=new_axis)],
                       [value_info("a", F, [2, 3]), value_info("b", F, [2, 3])], [value_info("out")])
    feeds = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": -np.ones((2, 3), np.float32)}
    assert_matches_ort(model, feeds, device)


def test_concat_from_sequence_bad_axis_is_a_node_error():
    model = make_model([helper.make_node("SequenceConstruct", ["a"], ["s"]),
                        helper.make_node("ConcatFromSequence", ["s"], ["out"], axis=2)],
                       [value_info("a", F, [2, 3])], [value_info("out")])
    with pytest.raises(gpuops.NodeError, match="axis 2 is out of range"):
        run_gpuops(model, {"a": np.ones((2, 3), np.float32)})


# -- SequenceMap -------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_sequence_map_two_outputs_sequence_and_tensor_inputs(device):
    body = helper.make_graph(
        [helper.make_node("Add", ["x", "bias"], ["sum"]),
         helper.make_node("ReduceSum", ["sum"], ["tot"], keepdims=0),
         helper.make_node("Mul", ["tot", "k"], ["scaled"])],
        "body", [value_info("x", F, None), value_info("bias", F, [1]), value_info("k", F, [])],
        [value_info("sum", F, None), value_info("scaled", F, [])])
    model = _three([helper.make_node("SplitToSequence", ["ks"], ["kseq"], keepdims=0),
                    helper.make_node("SequenceMap", ["s", "bias", "kseq"], ["sums", "scaled"], body=body)],
                   [sequence_info("sums"), sequence_info("scaled")], [const("bias", np.array([0.5], np.float32)),
                                                   const("ks", np.array([1, -2, 3], np.float32))])
    sums, scaled = assert_matches_ort(model, THREE, device)
    assert [s.shape for s in sums] == [(4,), (2, 3), (1,)]


def test_sequence_map_sequences_of_different_lengths_is_a_node_error():
    body = helper.make_graph([helper.make_node("Add", ["x", "y"], ["o"])], "body",
                             [value_info("x", F, None), value_info("y", F, None)], [value_info("o", F, None)])
    model = _three([helper.make_node("SequenceErase", ["s"], ["short"]),
                    helper.make_node("SequenceMap", ["s", "short"], ["o"], body=body)], [sequence_info("o")])
    with pytest.raises(gpuops.NodeError, match="input 1 has 2 elements, input_sequence has 3"):
        run_gpuops(model, THREE)


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
                   [value_info("has_x", B, []), value_info("has_none", B, []), value_info("has_plain", B, []),
                    sequence_info("s_back"), value_info("z_back")])
    has_x, has_none, has_plain, s_back, z_back = assert_matches_ort(model, THREE, device)
    assert has_x and not has_none and has_plain and has_x.shape == () and len(s_back) == 3


def test_optional_get_element_of_an_empty_optional_is_a_node_error():
    model = make_model([helper.make_node("Optional", [], ["none"], type=helper.make_tensor_type_proto(F, None)),
                        helper.make_node("OptionalGetElement", ["none"], ["out"], name="get")],
                       [], [value_info("out")], opset=15)
    with pytest.raises(gpuops.NodeError, match="'get'.*empty optional"):
        run_gpuops(model, {})
