"""InferenceSession's feed checks on the CPU, where a NumPy feed of an input's declared type and
static shape is taken at once: other feeds still take the full checks and conversions."""

from collections.abc import Mapping

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops


def _session():
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])])
    return gpuops.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                                   device="cpu")


class _Feeds(Mapping):
    def __init__(self, d):
        self.d = d

    def __getitem__(self, k):
        return self.d[k]

    def __iter__(self):
        return iter(self.d)

    def __len__(self):
        return len(self.d)


def test_feeds_other_than_exact_arrays_are_converted_or_refused_as_before():
    sess = _session()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.ones((1, 3), np.float32)
    want = x + y
    read_only = x.copy()
    read_only.flags.writeable = False
    for feeds in ({"x": x, "y": y}, _Feeds({"x": x, "y": y}), {"x": x.tolist(), "y": y},
                  {"x": read_only, "y": y}, {"x": np.asfortranarray(x), "y": y}):
        np.testing.assert_array_equal(sess.run(None, feeds)[0], want)
    for feeds, match in (({"x": x.astype(np.float64), "y": y}, r"input 'x': expected dtype"),
                         ({"x": x.reshape(3, 2), "y": y}, r"input 'x': dimension 0 must be 2"),
                         ({"x": x[None], "y": y}, r"input 'x': expected rank 2"),
                         (_Feeds({"x": x}), r"missing input\(s\) \['y'\]"),
                         (_Feeds({"x": x, "y": y, "w": y}), r"unknown input name\(s\) \['w'\]"),
                         ({"x": np.float32(1), "y": y}, r"input 'x': expected rank 2")):
        with pytest.raises(gpuops.FeedError, match=match):
            sess.run(None, feeds)


class _Sub(np.ndarray):
    pass


def test_a_signature_that_passed_once_still_refuses_other_feeds():
    """A CPU session takes a dict of NumPy arrays of a signature that passed the checks before as it is; any
    other feed (another shape or dtype, a missing or unknown name, a list, another array type) is still
    checked, and refused naming the input."""
    sess = _session()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.ones((1, 3), np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(sess.run(None, {"x": x, "y": y})[0], x + y)
    np.testing.assert_array_equal(sess.run(None, {"y": y, "x": x.tolist()})[0], x + y)
    with pytest.raises(gpuops.NodeError):  # y's free dimension is checked by the op (2 rows against 4)
        sess.run(None, {"x": x, "y": np.ones((4, 3), np.float32)})
    for feeds, match in (({"x": x.astype(np.float64), "y": y}, r"input 'x': expected dtype"),
                         ({"x": x.reshape(3, 2), "y": y}, r"input 'x': dimension 0 must be 2"),
                         ({"x": x, "y": y.astype(np.float16)}, r"input 'y': expected dtype"),
                         ({"x": x, "y": y[None]}, r"input 'y': expected rank 2"),
                         ({"x": x}, r"missing input\(s\) \['y'\]"),
                         ({"x": x, "y": y, "w": y}, r"unknown input name\(s\) \['w'\]"),
                         ({"x": x, "y": y, 1: y}, r"unknown input name\(s\) \[1\]"),
                         ({"x": x.view(_Sub), "y": y}, None)):
        if match is None:  # an ndarray subclass takes the full path (and runs)
            np.testing.assert_array_equal(np.asarray(sess.run(None, feeds)[0]), x + y)
            continue
        with pytest.raises(gpuops.FeedError, match=match):
            sess.run(None, feeds)
    np.testing.assert_array_equal(sess.run(None, {"y": y, "x": x})[0], x + y)
