"""Gather / Scatter ops beyond the onnx node cases: clear errors for out-of-range indices, every
scatter reduction with many duplicate indices (checked against NumPy's unbuffered ``ufunc.at``),
GatherElements with indices smaller than data, GatherND batch_dims, the reduction sets each opset
accepts, and TensorScatter's linear and circular modes."""

import functools

import numpy as np
import pytest
from onnx import helper

import gpuops
from gpuops.errors import NodeError

from tests.conformance.harness import assert_close
from tests.ops.common import DEVICES, assert_node_matches_ort, run_node

RNG = np.random.default_rng(0)
_check = functools.partial(assert_node_matches_ort, rtol=1e-5, atol=1e-5)


DATA = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)


# -- out-of-range indices ------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op, indices, attrs, bound", [
    ("Gather", np.array([0, 4], np.int64), {"axis": 1}, r"\[-4, 3\]"),
    ("Gather", np.array([[-4, 1]], np.int32), {}, r"\[-3, 2\]"),
    ("GatherElements", np.full((3, 4, 5), 5, np.int64), {"axis": -1}, r"\[-5, 4\]"),
    ("GatherND", np.array([[2, 4]], np.int64), {}, r"\[-4, 3\].*component 1"),
])
def test_gather_out_of_range_index_is_an_error(device, op, indices, attrs, bound):
    node = helper.make_node(op, ["data", "indices"], ["y"], name="g1", **attrs)
    with pytest.raises(NodeError, match=rf"g1.*input 'indices': index -?\d+ is out of range {bound}"):
        run_node(node, [("data", DATA), ("indices", indices)], device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op, indices, updates", [
    ("ScatterElements", np.array([[[3]]], np.int64), np.ones((1, 1, 1), np.float32)),
    ("ScatterND", np.array([[0, -5]], np.int64), np.ones((1, 5), np.float32)),
])
def test_scatter_out_of_range_index_is_an_error(device, op, indices, updates):
    node = helper.make_node(op, ["data", "indices", "updates"], ["y"])
    with pytest.raises(NodeError, match="input 'indices': index -?\\d+ is out of range"):
        run_node(node, [("data", DATA), ("indices", indices), ("updates", updates)], device)


# -- gathers ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_scalar_and_negative_indices(device, axis):
    node = helper.make_node("Gather", ["data", "indices"], ["y"], axis=axis)
    _check(node, [("data", DATA), ("indices", np.array(-1, np.int64))], device)
    _check(node, [("data", DATA), ("indices", np.array([[-2, 0], [1, -1]], np.int32))], device)


@pytest.mark.parametrize("device", DEVICES)
def test_gather_elements_indices_smaller_than_data(device):
    indices = np.array([[[0, -1], [4, 2]]], np.int64)  # shape (1, 2, 2) inside data (3, 4, 5)
    node = helper.make_node("GatherElements", ["data", "indices"], ["y"], axis=2)
    _check(node, [("data", DATA), ("indices", indices)], device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch_dims, indices", [
    (0, np.array([[[0, 1], [2, -1]]], np.int64)),
    (1, np.array([[1], [-1], [0]], np.int64)),
    (1, np.array([[[1, 4], [0, 0]], [[3, 3], [2, 1]], [[0, -2], [1, 1]]], np.int64)),
    (2, np.array([[[1], [4], [0], [2]]] * 3, np.int64)),
])
def test_gather_nd_batch_dims(device, batch_dims, indices):
    node = helper.make_node("GatherND", ["data", "indices"], ["y"], batch_dims=batch_dims)
    _check(node, [("data", DATA), ("indices", indices)], device)


# -- scatters ------------------------------------------------------------------------------------

_AT = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min", "none"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_scatter_elements_reductions_with_many_duplicates(device, reduction, dtype):
    data = RNG.integers(-3, 4, (6, 40)).astype(dtype)
    indices = RNG.integers(-6, 6, (150, 40))  # ~25 updates per target along axis 0
    updates = RNG.integers(-2, 3, (150, 40)).astype(dtype)
    if reduction == "mul":
        updates = RNG.choice(np.array([-1, 1, 2], dtype), (150, 40))
    node = helper.make_node("ScatterElements", ["data", "indices", "updates"], ["y"], axis=0,
                            reduction=reduction)
    (got,) = run_node(node, [("data", data), ("indices", indices), ("updates", updates)], device)
    want = data.copy()
    cols = np.broadcast_to(np.arange(40), indices.shape)
    if reduction == "none":  # the spec leaves duplicates open; gpuops keeps the last in input order
        for r, c, u in zip(indices.ravel() % 6, cols.ravel(), updates.ravel()):
            want[r, c] = u
    else:
        _AT[reduction].at(want, (indices % 6, cols), updates)
    assert_close(got, want, 1e-5, 1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_scatter_nd_reductions_with_duplicates(device, reduction):
    data = RNG.random((4, 3, 2)).astype(np.float32)
    indices = np.stack([RNG.integers(-4, 4, 30), RNG.integers(-3, 3, 30)], axis=1)
    updates = RNG.random((30, 2)).astype(np.float32) + 0.5
    node = helper.make_node("ScatterND", ["data", "indices", "updates"], ["y"], reduction=reduction)
    (got,) = run_node(node, [("data", data), ("indices", indices), ("updates", updates)], device)
    want = data.copy()
    _AT[reduction].at(want, (indices[:, 0] % 4, indices[:, 1] % 3), updates)
    assert_close(got, want, 1e-5, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_scatter_against_onnxruntime(device):
    data = RNG.random((3, 4, 5)).astype(np.float32)
    idx = np.array([[[0, -1, 2], [4, 1, 3]]], np.int64)
    upd = RNG.random((1, 2, 3)).astype(np.float32)
    for op, opset, attrs in (("Scatter", 9, {"axis": 2}), ("ScatterElements", 11, {"axis": -1}),
                             ("ScatterElements", 16, {"axis": 2, "reduction": "mul"})):
        node = helper.make_node(op, ["data", "indices", "updates"], ["y"], **attrs)
        _check(node, [("data", data), ("indices", idx if op != "Scatter" else idx % 5), ("updates", upd)],
               device, opset=opset)
    node = helper.make_node("ScatterND", ["data", "indices", "updates"], ["y"], reduction="add")
    _check(node, [("data", data), ("indices", np.array([[1, -1], [0, 2]], np.int64)),
                  ("updates", RNG.random((2, 5)).astype(np.float32))], device, opset=16)


@pytest.mark.parametrize("op, opset", [("ScatterElements", 16), ("ScatterND", 16), ("ScatterND", 11)])
def test_reduction_sets_follow_the_opset(op, opset):
    node = helper.make_node(op, ["data", "indices", "updates"], ["y"], reduction="max")
    idx = np.zeros((1, 1), np.int64)
    inputs = [("data", np.zeros((2, 2), np.float32)), ("indices", idx), ("updates", np.zeros((1, 2) if
              op == "ScatterND" else (1, 1), np.float32))]
    with pytest.raises(gpuops.GpuopsError, match="max|reduction"):
        run_node(node, inputs, opset=opset)


@pytest.mark.parametrize("device", DEVICES)
def test_scatter_empty_updates(device):
    node = helper.make_node("ScatterND", ["data", "indices", "updates"], ["y"])
    (got,) = run_node(node, [("data", DATA), ("indices", np.zeros((0, 1), np.int64)),
                             ("updates", np.zeros((0, 4, 5), np.float32))], device)
    np.testing.assert_array_equal(got, DATA)


# -- TensorScatter ---------------------------------------------------------------------------------

def _tensor_scatter_reference(past, update, write, axis, circular):
    """The spec's pseudocode."""
    out = past.copy()
    max_len, seq = past.shape[axis], update.shape[axis]
    for prefix in np.ndindex(past.shape[:axis]):
        for s in range(seq):
            pos = write[prefix[0]] + s
            out[(*prefix, pos % max_len if circular else pos)] = update[(*prefix, s)]
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis", [1, -2, 2])
def test_tensor_scatter(device, mode, axis):
    past = RNG.random((3, 2, 6, 4)).astype(np.float32)
    ax = axis % 4
    ushape = list(past.shape)
    ushape[ax] = 2
    update = RNG.random(ushape).astype(np.float32)
    max_len = past.shape[ax]
    write = np.array([0, max_len - 2, (max_len - 2) // 2] if mode == "linear" else [5, 0, 3], np.int64)
    node = helper.make_node("TensorScatter", ["past", "update", "write"], ["y"], axis=axis, mode=mode)
    (got,) = run_node(node, [("past", past), ("update", update), ("write", write)], device, opset=24)
    np.testing.assert_array_equal(got, _tensor_scatter_reference(past, update, write, ax, mode == "circular"))


def test_tensor_scatter_linear_overflow_is_an_error():
    node = helper.make_node("TensorScatter", ["past", "update", "write"], ["y"])
    inputs = [("past", np.zeros((2, 4, 3), np.float32)), ("update", np.ones((2, 2, 3), np.float32)),
              ("write", np.array([0, 3], np.int64))]
    with pytest.raises(NodeError, match="write_indices"):
        run_node(node, inputs, opset=24)
