"""Shape and tensor ops beyond the onnx node cases: the attribute forms of early opsets (Reshape-1,
Slice-1, Squeeze/Unsqueeze-1/11, Split-2, Pad-2), Slice clamping, Pad's negative pads and modes,
Unique with every output, and the other versions the suite leaves out; checked against onnxruntime
(opset >= 7) or a NumPy formula (older opsets, which onnxruntime does not load)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpuops
from gpuops.errors import NodeError

from tests.conformance.harness import assert_close
from tests.ops.common import DEVICES, assert_node_matches_ort, make_model, run_node
from tests.ort_versions import requires_ort

F, I64 = TensorProto.FLOAT, TensorProto.INT64
INT64_MAX = np.iinfo(np.int64).max


X = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)


# -- Reshape, Squeeze, Unsqueeze, Flatten, Shape ---------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_reshape_1_attribute_form(device):
    node = helper.make_node("Reshape", ["x"], ["y"], shape=[0, -1])
    (got,) = run_node(node, [("x", X)], device, opset=1)
    np.testing.assert_array_equal(got, X.reshape(2, 12))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape, allowzero", [([0, -1], 0), ([4, 0, 2], 0), ([-1], 0), ([3, 0], 1)])
def test_reshape_zero_and_minus_one(device, shape, allowzero):
    x = np.zeros((0, 3), np.float32) if allowzero else X
    node = helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=allowzero)
    assert_node_matches_ort(node, [("x", x)], device, inits=[("s", np.array(shape, np.int64))])


def test_reshape_errors():
    node = helper.make_node("Reshape", ["x", "s"], ["y"])
    for bad in ([5, -1], [-1, -1], [7]):
        sess = gpuops.InferenceSession(make_model(node, [("x", X)], inits=[("s", np.array(bad, np.int64))]), "cpu")
        with pytest.raises(NodeError, match="reshape|-1"):
            sess.run(None, {"x": X})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opset", [1, 11])
def test_squeeze_unsqueeze_attribute_forms(device, opset):
    x = X.reshape(2, 1, 3, 1, 4)
    axes = [1, 3] if opset == 1 else [-2, 1]
    (got,) = run_node(helper.make_node("Squeeze", ["x"], ["y"], axes=axes), [("x", x)], device, opset=opset)
    np.testing.assert_array_equal(got, X)
    (got,) = run_node(helper.make_node("Squeeze", ["x"], ["y"]), [("x", x)], device, opset=opset)
    np.testing.assert_array_equal(got, X)  # no axes: every size-1 axis
    axes = [0, 4] if opset == 1 else [-1, 0]
    (got,) = run_node(helper.make_node("Unsqueeze", ["x"], ["y"], axes=axes), [("x", X)], device, opset=opset)
    np.testing.assert_array_equal(got, X.reshape(1, 2, 3, 4, 1))


def test_squeeze_of_a_non_unit_axis_fails():
    node = helper.make_node("Squeeze", ["x", "a"], ["y"])
    sess = gpuops.InferenceSession(make_model(node, [("x", X)], inits=[("a", np.array([1], np.int64))]), "cpu")
    with pytest.raises(NodeError, match="size is not 1"):
        sess.run(None, {"x": X})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis", [0, 3, -3])
def test_flatten(device, axis):
    assert_node_matches_ort(helper.make_node("Flatten", ["x"], ["y"], axis=axis), [("x", X)], device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("start, end", [(-2, None), (1, -1), (5, 9), (-9, 1)])
def test_shape_start_end(device, start, end):
    attrs = {"start": start} | ({"end": end} if end is not None else {})
    assert_node_matches_ort(helper.make_node("Shape", ["x"], ["y"], **attrs), [("x", X)], device)


# -- Slice ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_slice_1_attribute_form(device):
    node = helper.make_node("Slice", ["x"], ["y"], starts=[1, -3], ends=[1000, -1], axes=[0, 2])
    assert_node_matches_ort(node, [("x", X)], device, opset=9)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("starts, ends, axes, steps", [
    ([-1], [-INT64_MAX], [2], [-1]),          # whole axis backwards
    ([10], [-10], [2], [-2]),                 # start past the end clamps to n-1
    ([0, 1], [INT64_MAX, INT64_MAX], [1, 2], [2, 2]),
    ([-100], [100], [-1], [3]),
    ([2], [0], [2], [1]),                     # empty
    ([1, 3], [0, -5], [1, 2], [-1, -1]),
])
def test_slice_clamping(device, starts, ends, axes, steps):
    node = helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])
    inits = [("s", np.array(starts, np.int64)), ("e", np.array(ends, np.int64)),
             ("a", np.array(axes, np.int64)), ("t", np.array(steps, np.int64))]
    assert_node_matches_ort(node, [("x", X)], device, inits=inits)


@pytest.mark.parametrize("device", DEVICES)
def test_slice_with_computed_starts(device):
    """Starts/ends fed at run time (not constant) are pulled to the host explicitly."""
    node = helper.make_node("Slice", ["x", "s", "e"], ["y"])
    assert_node_matches_ort(node, [("x", X), ("s", np.array([1, 1], np.int32)), ("e", np.array([2, 3], np.int32))],
                            device)


# -- Concat, Split -------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_split_2_attribute_form(device):
    node = helper.make_node("Split", ["x"], ["a", "b"], axis=2, split=[1, 3])
    assert_node_matches_ort(node, [("x", X)], device, opset=11)
    node = helper.make_node("Split", ["x"], ["a", "b"], axis=-1)  # equal parts by output count
    assert_node_matches_ort(node, [("x", X)], device, opset=11)


@pytest.mark.parametrize("device", DEVICES)
def test_split_18_num_outputs_uneven(device):
    x = np.arange(7, dtype=np.int64)
    node = helper.make_node("Split", ["x"], ["a", "b", "c"], num_outputs=3)
    got = assert_node_matches_ort(node, [("x", x)], device)
    assert [len(g) for g in got] == [3, 3, 1]


def test_split_that_does_not_divide_fails():
    node = helper.make_node("Split", ["x"], ["a", "b", "c"], axis=2)
    sess = gpuops.InferenceSession(make_model(node, [("x", X)], opset=13), "cpu")
    with pytest.raises(NodeError, match="equal parts"):
        sess.run(None, {"x": X})


@pytest.mark.parametrize("device", DEVICES)
def test_concat_with_empty_input(device):
    node = helper.make_node("Concat", ["a", "b"], ["y"], axis=1)
    assert_node_matches_ort(node, [("a", X), ("b", np.zeros((2, 0, 4), np.float32))], device)


# -- Expand, Tile, Pad, CenterCropPad ---------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [[3, 1], [2, 1, 1, 1], [1], [4, 2, 3, 4]])
def test_expand(device, shape):
    node = helper.make_node("Expand", ["x", "s"], ["y"])
    assert_node_matches_ort(node, [("x", X)], device, inits=[("s", np.array(shape, np.int64))])


@pytest.mark.parametrize("device", DEVICES)
def test_tile(device):
    node = helper.make_node("Tile", ["x", "r"], ["y"])
    assert_node_matches_ort(node, [("x", X)], device, inits=[("r", np.array([1, 0, 3], np.int64))])
    assert_node_matches_ort(node, [("x", X)], device, inits=[("r", np.array([2, 1, 2], np.int64))])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_2_attribute_form(device, mode):
    pads = [0, 1, 2, 0, 1, 1]
    node = helper.make_node("Pad", ["x"], ["y"], pads=pads, mode=mode, value=-1.5)
    assert_node_matches_ort(node, [("x", X)], device, opset=10)


@pytest.mark.parametrize("device", DEVICES)
def test_pad_1_paddings(device):
    node = helper.make_node("Pad", ["x"], ["y"], paddings=[1, 0, 0, 0, 2, 1], value=3.0)
    (got,) = run_node(node, [("x", X)], device, opset=1)
    np.testing.assert_array_equal(got, np.pad(X, [(1, 0), (0, 2), (0, 1)], constant_values=3.0))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[1, -1, 0, 0, 1, -2], [-1, 0, -1, 0, -2, -1], [0, 2, 3, 1, 1, 2]])
def test_pad_modes_and_negative_pads(device, mode, pads):
    node = helper.make_node("Pad", ["x", "p", "v"], ["y"], mode=mode)
    inits = [("p", np.array(pads, np.int64)), ("v", np.array(7.0, np.float32))]
    assert_node_matches_ort(node, [("x", X)], device, opset=19, inits=inits)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("pads", [[1, 2, 3, 1, 2, 3], [0, 0, 3, 0, 0, 3], [1, 0, 0, 0, 1, 2]])
def test_pad_of_up_to_n_minus_1_on_every_axis(device, mode, pads):
    """Reflect and edge padding of at most n - 1 per side (mirrored or repeated slices concatenated
    axis by axis), and constant padding (the data copied into a filled output), as onnxruntime pads."""
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) * 0.5 - 3
    node = helper.make_node("Pad", ["x", "p", "v"], ["y"], mode=mode)
    inits = [("p", np.array(pads, np.int64)), ("v", np.array(-2.5, np.float32))]
    assert_node_matches_ort(node, [("x", x)], device, opset=18, inits=inits)


@pytest.mark.parametrize("device", DEVICES)
def test_pad_18_axes_and_int_data(device):
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    node = helper.make_node("Pad", ["x", "p", "", "a"], ["y"])
    assert_node_matches_ort(node, [("x", x)], device,
                            inits=[("p", np.array([2, 1], np.int64)), ("a", np.array([-1], np.int64))])


def test_pad_wrap_needs_opset_19():
    node = helper.make_node("Pad", ["x", "p"], ["y"], mode="wrap")
    model = make_model(node, [("x", X)], opset=18, inits=[("p", np.ones(6, np.int64))])
    sess = gpuops.InferenceSession(model, "cpu")
    with pytest.raises(NodeError, match="wrap"):
        sess.run(None, {"x": X})


@pytest.mark.parametrize("device", DEVICES)
def test_center_crop_pad_odd_sizes(device):
    node = helper.make_node("CenterCropPad", ["x", "s"], ["y"], axes=[2, 0])
    (got,) = run_node(node, [("x", X)], device, inits=[("s", np.array([1, 5], np.int64))])
    want = np.zeros((5, 3, 1), np.float32)
    want[1:3] = X[:, :, 1:2]  # crop 4 -> 1 starts at (4 - 1) // 2; pad 2 -> 5 puts 1 before, 2 after
    np.testing.assert_array_equal(got, want)


# -- Constant, ConstantOfShape, Range, EyeLike ------------------------------------------------

@pytest.mark.parametrize("attr, value, want", [
    ("value_float", 1.5, np.float32(1.5)),
    ("value_floats", [1.0, 2.5], np.array([1.0, 2.5], np.float32)),
    ("value_int", 7, np.int64(7)),
    ("value_ints", [1, -2, 3], np.array([1, -2, 3], np.int64)),
    ("value_string", "abc", np.array("abc", dtype=object)),
    ("value_strings", ["a", "bc"], np.array(["a", "bc"], dtype=object)),
])
def test_constant_value_attributes(attr, value, want):
    node = helper.make_node("Constant", [], ["y"], **{attr: value})
    (got,) = run_node(node, [])
    assert_close(got, want, 0, 0, attr)


def test_constant_sparse_value():
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("v", F, [2], [5.0, 6.0]), helper.make_tensor("i", I64, [2], [1, 4]), [2, 3])
    node = helper.make_node("Constant", [], ["y"], sparse_value=sparse)
    (got,) = run_node(node, [])
    np.testing.assert_array_equal(got, np.array([[0, 5, 0], [0, 6, 0]], np.float32))


def test_constant_needs_one_value():
    node = helper.make_node("Constant", [], ["y"], value_int=1, value_float=2.0)
    with pytest.raises(NodeError, match="exactly one"):
        gpuops.InferenceSession(make_model(node, []), "cpu")


@pytest.mark.parametrize("device", DEVICES)
def test_constant_of_shape(device):
    value = numpy_helper.from_array(np.array([-3], np.int32), "value")
    node = helper.make_node("ConstantOfShape", ["s"], ["y"], value=value)
    assert_node_matches_ort(node, [("s", np.array([2, 0, 3], np.int64))], device)
    assert_node_matches_ort(helper.make_node("ConstantOfShape", ["s"], ["y"]), [("s", np.array([], np.int64))], device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opset", [11, 27])
@pytest.mark.parametrize("start, limit, delta", [
    (np.int64(10), np.int64(-7), np.int64(-3)), (np.int32(0), np.int32(5), np.int32(7)),
    (np.float32(1), np.float32(1), np.float32(1)), (np.float64(-1.5), np.float64(2.0), np.float64(0.25)),
    (np.int16(5), np.int16(0), np.int16(1)), (np.float16(0.5), np.float16(7), np.float16(0.75)),
])
def test_range(device, opset, start, limit, delta):
    """Range against the spec's formula (onnxruntime stops at opset 26 and has no int16/float16 Range)."""
    node = helper.make_node("Range", ["a", "b", "c"], ["y"])
    inputs = [("a", np.asarray(start)), ("b", np.asarray(limit)), ("c", np.asarray(delta))]
    (got,) = run_node(node, inputs, device, opset=opset)
    n = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
    want = (start + np.arange(n) * delta).astype(start.dtype)
    assert_close(got, want, 1e-3, 1e-3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [-2, 0, 3, 7])
def test_eyelike(device, k):
    node = helper.make_node("EyeLike", ["x"], ["y"], k=k, dtype=TensorProto.INT32)
    assert_node_matches_ort(node, [("x", np.zeros((3, 5), np.float32))], device)


# -- DepthToSpace, SpaceToDepth, Trilu, ReverseSequence --------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_round_trip(device, mode):
    x = np.random.default_rng(0).random((2, 8, 3, 5), dtype=np.float32)
    assert_node_matches_ort(helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode=mode), [("x", x)], device)
    node = helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2)
    x = np.random.default_rng(1).random((1, 3, 4, 6), dtype=np.float32)
    assert_node_matches_ort(node, [("x", x)], device)


@pytest.mark.parametrize("device", DEVICES)
def test_depth_to_space_1(device):
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 2, 2)
    (got,) = run_node(helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2), [("x", x)], device, opset=1)
    want = x.reshape(1, 2, 2, 1, 2, 2).transpose(0, 3, 4, 1, 5, 2).reshape(1, 1, 4, 4)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 2])
def test_trilu_batched(device, upper, k):
    x = np.arange(2 * 3 * 4, dtype=np.int64).reshape(2, 3, 4)
    if k is None:
        assert_node_matches_ort(helper.make_node("Trilu", ["x"], ["y"], upper=upper), [("x", x)], device)
    else:
        assert_node_matches_ort(helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper), [("x", x)], device,
                                inits=[("k", np.array(k, np.int64))])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [-2**63, -4, -3, 4, 5, 2**63 - 1])
def test_trilu_takes_any_int64_k(device, k):
    """Past the matrix's diagonals k keeps everything or nothing; -2**63 does not overflow (found by fuzzing)."""
    x = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    for upper, oracle in ((1, np.triu), (0, np.tril)):
        node = helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)
        (got,) = run_node(node, [("x", x), ("k", np.array(k, np.int64))], device)
        np.testing.assert_array_equal(got, oracle(x, min(max(k, -3), 4)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch_axis, time_axis", [
    (0, 1),
    pytest.param(1, 0, marks=requires_ort(
        "1.24", "its ReverseSequence zeroes a zero-length sequence instead of copying it through"))])
def test_reverse_sequence_with_trailing_dims(device, batch_axis, time_axis):
    x = np.arange(3 * 4 * 2, dtype=np.float32).reshape(3, 4, 2)
    lens = np.array([2, 4, 1] if batch_axis == 0 else [1, 3, 2, 0], np.int64)
    node = helper.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=batch_axis, time_axis=time_axis)
    assert_node_matches_ort(node, [("x", x), ("l", lens)], device)


# -- Compress, Unique, NonZero, Where, OneHot ---------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis", [None, 1, -1])
def test_compress_short_condition(device, axis):
    cond = np.array([True, False, True])
    attrs = {} if axis is None else {"axis": axis}
    assert_node_matches_ort(helper.make_node("Compress", ["x", "c"], ["y"], **attrs), [("x", X), ("c", cond)], device)


def test_compress_condition_past_the_end_fails():
    node = helper.make_node("Compress", ["x", "c"], ["y"], axis=0)
    sess = gpuops.InferenceSession(make_model(node, [("x", X), ("c", np.ones(3, bool))]), "cpu")
    with pytest.raises(NodeError, match="past the end"):
        sess.run(None, {"x": X, "c": np.ones(3, bool)})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_unique_all_outputs(device, sorted_, axis):
    x = np.array([[3, 1, 3, 2], [0, 5, 0, 5], [3, 1, 3, 2]], np.int64)
    attrs = {"sorted": sorted_} | ({} if axis is None else {"axis": axis})
    node = helper.make_node("Unique", ["x"], ["y", "i", "inv", "c"], **attrs)
    assert_node_matches_ort(node, [("x", x)], device)


@pytest.mark.parametrize("device", DEVICES)
def test_unique_large_float(device):
    x = np.random.default_rng(2).integers(0, 50, 1000).astype(np.float32)
    node = helper.make_node("Unique", ["x"], ["y", "i", "inv", "c"], sorted=0)
    assert_node_matches_ort(node, [("x", x)], device)


@pytest.mark.parametrize("device", DEVICES)
def test_unique_empty(device):
    node = helper.make_node("Unique", ["x"], ["y", "i", "inv", "c"])
    assert_node_matches_ort(node, [("x", np.zeros((0,), np.float32))], device)


@pytest.mark.parametrize("device", DEVICES)
def test_nonzero(device):
    x = np.array([[[0, 1], [2, 0]], [[0, 0], [3, 4]]], np.int32)
    assert_node_matches_ort(helper.make_node("NonZero", ["x"], ["y"]), [("x", x)], device)
    assert_node_matches_ort(helper.make_node("NonZero", ["x"], ["y"]), [("x", np.zeros((2, 0), np.float32))], device)


@pytest.mark.parametrize("device", DEVICES)
def test_where_broadcasts(device):
    node = helper.make_node("Where", ["c", "x", "y"], ["z"])
    assert_node_matches_ort(node, [("c", np.array([True, False, True, False])), ("x", X), ("y", np.float32([[-1]]))],
                            device)


@pytest.mark.parametrize("device", DEVICES)
def test_onehot_9_negative_indices_are_off(device):
    """OneHot-9 puts indices outside [0, depth) at off_value; OneHot-11 counts negatives from the end."""
    ind = np.array([[0, -1], [3, 5]], np.int64)
    values = np.array([2, 9], np.int32)
    depth = np.array(4, np.int64)
    for opset, wrapped in ((9, False), (11, True)):
        node = helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=0)
        (got,) = run_node(node, [("i", ind), ("v", values)], device, opset=opset, inits=[("d", depth)])
        k = np.where(ind < 0, ind + 4, ind) if wrapped else ind
        want = np.where(np.arange(4).reshape(4, 1, 1) == k[None], 9, 2).astype(np.int32)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_identity_passes_everything(device):
    assert_node_matches_ort(helper.make_node("Identity", ["x"], ["y"]), [("x", X)], device)
