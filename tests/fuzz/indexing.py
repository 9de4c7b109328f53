"""Indexing ops with drawn (often out-of-range) indices, axes and counts: ``draw -> (node, feeds, valid)``,
``valid`` holding in-range replacements for the drawn index inputs."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from onnx import AttributeProto, helper

from .mutate import EDGE_INTS

DATA = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
index = st.one_of(st.integers(-6, 6), st.sampled_from(EDGE_INTS))
axis = st.one_of(st.integers(-3, 2), st.sampled_from([-2 ** 63, 2 ** 63 - 1]))


def _i64(draw, shape, elements=index):
    n = int(np.prod(shape))
    return np.array(draw(st.lists(elements, min_size=n, max_size=n)), np.int64).reshape(shape)


def _shape(draw, max_rank=2):
    return tuple(draw(st.lists(st.integers(0, 3), min_size=0, max_size=max_rank)))


def gather(draw):
    idx = _i64(draw, _shape(draw))
    return helper.make_node("Gather", ["data", "i"], ["y"], axis=draw(axis)), {"data": DATA, "i": idx}, {"i": 0 * idx}


def gather_elements(draw):
    idx = _i64(draw, draw(st.sampled_from([(3, 4), (2, 4), (3, 1), (1, 2)])))
    return (helper.make_node("GatherElements", ["data", "i"], ["y"], axis=draw(axis)), {"data": DATA, "i": idx},
            {"i": 0 * idx})


def gather_nd(draw):
    last = draw(st.integers(0, 3))
    idx = _i64(draw, (draw(st.integers(0, 3)), last))
    return (helper.make_node("GatherND", ["data", "i"], ["y"], batch_dims=draw(st.sampled_from([0, 0, 1, 2, -1]))),
            {"data": DATA, "i": idx}, {"i": 0 * idx})


def scatter_elements(draw):
    idx = _i64(draw, draw(st.sampled_from([(3, 4), (2, 4), (1, 2)])))
    upd = np.ones(idx.shape, np.float32)
    node = helper.make_node("ScatterElements", ["data", "i", "u"], ["y"], axis=draw(axis),
                            reduction=draw(st.sampled_from(["add", "mul", "max", "min"])))
    return node, {"data": DATA, "i": idx, "u": upd}, {"i": 0 * idx}


def scatter_nd(draw):
    last = draw(st.integers(1, 2))
    idx = _i64(draw, (draw(st.integers(1, 3)), last))
    upd = np.ones(idx.shape[:1] + DATA.shape[last:], np.float32)
    node = helper.make_node("ScatterND", ["data", "i", "u"], ["y"],
                            reduction=draw(st.sampled_from(["add", "mul", "max", "min"])))
    return node, {"data": DATA, "i": idx, "u": upd}, {"i": 0 * idx}


def one_hot(draw):
    idx = _i64(draw, _shape(draw))
    node = helper.make_node("OneHot", ["i", "depth", "values"], ["y"], axis=draw(axis))
    feeds = {"i": idx, "depth": np.array(draw(st.sampled_from([0, 1, 5, -3])), np.int64),
             "values": np.array([0, 1], np.float32)}
    return node, feeds, {"i": 0 * idx, "depth": np.array(5, np.int64)}


def slice_(draw):
    k = draw(st.integers(1, 3))
    vals = {n: _i64(draw, (k,)) for n in ("starts", "ends")}
    vals["axes"] = _i64(draw, (k,), st.integers(-3, 2))
    vals["steps"] = _i64(draw, (k,), st.sampled_from([-2 ** 63, -3, -1, 0, 1, 2, 2 ** 63 - 1]))
    valid = {"starts": np.zeros(1, np.int64), "ends": np.ones(1, np.int64), "axes": np.zeros(1, np.int64),
             "steps": np.ones(1, np.int64)}
    return helper.make_node("Slice", ["data", "starts", "ends", "axes", "steps"], ["y"]), {"data": DATA, **vals}, valid


def compress(draw):
    cond = np.array(draw(st.lists(st.booleans(), max_size=6)), bool)
    return (helper.make_node("Compress", ["data", "c"], ["y"], axis=draw(axis)), {"data": DATA, "c": cond},
            {"c": np.ones(3, bool)})


def top_k(draw):
    return (helper.make_node("TopK", ["data", "k"], ["v", "i"], axis=draw(axis)),
            {"data": DATA, "k": np.array([draw(index)], np.int64)}, {"k": np.array([1], np.int64)})


def split(draw):
    sizes = _i64(draw, (draw(st.integers(1, 3)),), st.integers(-1, 5))
    return (helper.make_node("Split", ["data", "s"], [f"y{i}" for i in range(len(sizes))], axis=draw(axis)),
            {"data": DATA, "s": sizes}, None)


def cumsum(draw):
    return (helper.make_node("CumSum", ["data", "a"], ["y"], reverse=draw(st.sampled_from([0, 1]))),
            {"data": DATA, "a": np.array(draw(axis), np.int64)}, {"a": np.array(0, np.int64)})


def reverse_sequence(draw):
    lens = _i64(draw, (4,))
    return (helper.make_node("ReverseSequence", ["data", "l"], ["y"], batch_axis=1, time_axis=0),
            {"data": DATA, "l": lens}, {"l": np.ones(4, np.int64)})


def tile(draw):
    reps = _i64(draw, (draw(st.integers(1, 3)),), st.integers(-2, 3))
    return helper.make_node("Tile", ["data", "r"], ["y"]), {"data": DATA, "r": reps}, {"r": np.ones(2, np.int64)}


def pad(draw):
    pads = _i64(draw, (draw(st.sampled_from([2, 4, 5])),), st.integers(-5, 4))
    mode = draw(st.sampled_from(["constant", "reflect", "edge", "wrap"]))
    return (helper.make_node("Pad", ["data", "p"], ["y"], mode=mode), {"data": DATA, "p": pads},
            {"p": np.zeros(4, np.int64)})


def unsqueeze(draw):
    axes = _i64(draw, (draw(st.integers(0, 3)),), axis)
    return helper.make_node("Unsqueeze", ["data", "a"], ["y"]), {"data": DATA, "a": axes}, {"a": np.zeros(1, np.int64)}


def squeeze(draw):
    axes = _i64(draw, (draw(st.integers(0, 2)),), axis)
    data = DATA.reshape(3, 1, 4)
    return helper.make_node("Squeeze", ["data", "a"], ["y"]), {"data": data, "a": axes}, {"a": np.ones(1, np.int64)}


def transpose(draw):
    perm = draw(st.lists(st.integers(-1, 2), max_size=3))
    node = helper.make_node("Transpose", ["data"], ["y"])
    node.attribute.append(helper.make_attribute("perm", perm, attr_type=AttributeProto.INTS))
    return node, {"data": DATA}, None


def reshape(draw):
    shape = _i64(draw, (draw(st.integers(0, 3)),), st.one_of(st.integers(-2, 12), st.sampled_from(EDGE_INTS)))
    return (helper.make_node("Reshape", ["data", "s"], ["y"], allowzero=draw(st.sampled_from([0, 1]))),
            {"data": DATA, "s": shape}, {"s": np.array([4, 3], np.int64)})


def expand(draw):
    shape = _i64(draw, (draw(st.integers(0, 3)),), st.integers(-1, 3))
    return helper.make_node("Expand", ["data", "s"], ["y"]), {"data": DATA, "s": shape}, {"s": np.ones(1, np.int64)}


def sequence_at(draw):
    nodes = helper.make_node("SequenceConstruct", ["data", "data"], ["seq"])
    at = helper.make_node("SequenceAt", ["seq", "p"], ["y"])
    return [nodes, at], {"data": DATA, "p": np.array(draw(index), np.int64)}, {"p": np.array(1, np.int64)}


def sequence_erase(draw):
    nodes = [helper.make_node("SequenceConstruct", ["data", "data"], ["seq"]),
             helper.make_node("SequenceErase", ["seq", "p"], ["s2"]),
             helper.make_node("SequenceLength", ["s2"], ["y"])]
    return nodes, {"data": DATA, "p": np.array(draw(index), np.int64)}, {"p": np.array(-1, np.int64)}


def depth_to_space(draw):
    data = np.arange(16, dtype=np.float32).reshape(1, 4, 2, 2)
    return (helper.make_node("DepthToSpace", ["data"], ["y"], blocksize=draw(st.sampled_from([-1, 0, 1, 2, 3, 2 ** 31 - 1]))),
            {"data": data}, None)


def max_unpool(draw):
    data = np.ones((1, 1, 2, 2), np.float32)
    idx = _i64(draw, (1, 1, 2, 2), st.one_of(st.integers(-2, 18), st.sampled_from(EDGE_INTS)))
    return (helper.make_node("MaxUnpool", ["data", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
            {"data": data, "i": idx}, {"i": np.array([0, 3, 8, 15], np.int64).reshape(1, 1, 2, 2)})


def trilu(draw):
    return (helper.make_node("Trilu", ["data", "k"], ["y"], upper=draw(st.sampled_from([0, 1]))),
            {"data": DATA, "k": np.array(draw(index), np.int64)}, {"k": np.array(0, np.int64)})


def roi_align(draw):
    x = np.arange(2 * 1 * 4 * 4, dtype=np.float32).reshape(2, 1, 4, 4)
    rois = np.array([[0, 0, 3, 3]], np.float32)
    b = np.array([draw(index)], np.int64)
    return (helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"], output_height=2, output_width=2),
            {"x": x, "rois": rois, "b": b}, {"b": np.zeros(1, np.int64)})


flag = st.sampled_from([0, 1])
keepdims = st.one_of(flag, st.sampled_from(EDGE_INTS))  # only 1 keeps the axes (onnxruntime)


def reduce(draw):
    op = draw(st.sampled_from(["ReduceSum", "ReduceProd", "ReduceMax", "ReduceMean", "ReduceL2", "ReduceLogSumExp"]))
    axes = _i64(draw, (draw(st.integers(0, 2)),), axis)
    node = helper.make_node(op, ["data", "a"], ["y"], keepdims=draw(keepdims), noop_with_empty_axes=draw(flag))
    return node, {"data": DATA, "a": axes}, {"a": np.array([0], np.int64)}


def arg_max(draw):
    op = draw(st.sampled_from(["ArgMax", "ArgMin"]))
    node = helper.make_node(op, ["data"], ["y"], axis=draw(axis), keepdims=draw(keepdims), select_last_index=draw(flag))
    return node, {"data": DATA}, None


def dft(draw):
    # dft_length stays small: a length of 2**31 is a legitimate 16 GB transform, not an index error
    node = helper.make_node("DFT", ["data", "n"], ["y"], axis=draw(st.integers(-4, 3)), inverse=draw(flag),
                            onesided=draw(flag))
    data = DATA.reshape(3, 4, 1) if draw(st.booleans()) else np.stack([DATA, -DATA], axis=-1)
    return node, {"data": data, "n": np.array(draw(st.integers(-2, 9)), np.int64)}, {"n": np.array(4, np.int64)}


def axis_ops(draw):
    op = draw(st.sampled_from(["Concat", "Flatten", "Softmax", "LogSoftmax", "Hardmax", "LpNormalization"]))
    node = helper.make_node(op, ["data", "data"] if op == "Concat" else ["data"], ["y"], axis=draw(axis))
    return node, {"data": DATA}, None


def eye_like(draw):
    return helper.make_node("EyeLike", ["data"], ["y"], k=draw(index)), {"data": DATA}, None


def split_to_sequence(draw):
    split = draw(st.one_of(st.integers(-2, 5).map(lambda v: np.array(v, np.int64)),
                           st.lists(st.integers(-1, 4), min_size=1, max_size=3).map(lambda v: np.array(v, np.int64))))
    nodes = [helper.make_node("SplitToSequence", ["data", "s"], ["seq"], axis=draw(axis), keepdims=draw(flag)),
             helper.make_node("SequenceLength", ["seq"], ["y"])]
    return nodes, {"data": DATA, "s": split}, {"s": np.array(1, np.int64)}


def sequence_insert(draw):
    nodes = [helper.make_node("SequenceConstruct", ["data", "data"], ["seq"]),
             helper.make_node("SequenceInsert", ["seq", "data", "p"], ["s2"]),
             helper.make_node("SequenceAt", ["s2", "p"], ["y"])]
    return nodes, {"data": DATA, "p": np.array(draw(index), np.int64)}, {"p": np.array(0, np.int64)}


def scatter_elements_plain(draw):
    idx = _i64(draw, draw(st.sampled_from([(3, 4), (2, 4), (1, 2)])))
    node = helper.make_node("ScatterElements", ["data", "i", "u"], ["y"], axis=draw(axis))
    return node, {"data": DATA, "i": idx, "u": np.ones(idx.shape, np.float32)}, {"i": 0 * idx}


def center_crop_pad(draw):
    k = draw(st.integers(1, 2))
    node = helper.make_node("CenterCropPad", ["data", "s"], ["y"])
    node.attribute.append(helper.make_attribute("axes", draw(st.lists(axis, min_size=k, max_size=k)),
                                                attr_type=AttributeProto.INTS))
    shape = _i64(draw, (k,), st.integers(-1, 6))
    return node, {"data": DATA, "s": shape}, {"s": np.full(k, 2, np.int64)}


CASES = {f.__name__.rstrip("_"): f for f in [
    gather, gather_elements, gather_nd, scatter_elements, scatter_nd, one_hot, slice_, compress, top_k, split, cumsum,
    reverse_sequence, tile, pad, unsqueeze, squeeze, transpose, reshape, expand, sequence_at, sequence_erase,
    depth_to_space, max_unpool, trilu, roi_align, reduce, arg_max, dft, axis_ops, eye_like, split_to_sequence,
    sequence_insert, scatter_elements_plain, center_crop_pad]}
