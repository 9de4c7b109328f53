"""Reduce*, ArgMax/ArgMin, CumSum, TopK and the Softmax family beyond the onnx node cases: old opsets
(axes attribute, coerced-2-D softmax), computed axes inputs, integer and float16 data, errors.
Oracle: onnxruntime on a one-node model, or a NumPy formula."""

import numpy as np
import pytest
from onnx import helper

import gpuops

from tests.ops.common import DEVICES, assert_node_matches_ort, run_node

RNG = np.random.default_rng(0)
KINDS = ["Sum", "Mean", "Max", "Min", "Prod", "L1", "L2", "LogSum", "LogSumExp", "SumSquare"]


def _check(nodes, feeds, opset, rtol=1e-5, atol=1e-6):
    """Compare the outputs of the last node with onnxruntime on every device."""
    for device in DEVICES:
        assert_node_matches_ort(nodes, feeds, device, opset=opset, rtol=rtol, atol=atol)


def positive(*shape, dtype=np.float32):
    return RNG.uniform(0.5, 2.0, shape).astype(dtype)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("axes, keepdims", [([1], 1), ([0, -1], 0), (None, 1), (None, 0)])
def test_reduce_axes_attribute_opset11(kind, axes, keepdims):
    kw = {"keepdims": keepdims} | ({"axes": axes} if axes is not None else {})
    node = helper.make_node("Reduce" + kind, ["x"], ["y"], **kw)
    _check([node], {"x": positive(2, 3, 4)}, 11)


@pytest.mark.parametrize("kind", KINDS)
def test_reduce_axes_input_opset18(kind):
    node = helper.make_node("Reduce" + kind, ["x", "axes"], ["y"], keepdims=0)
    _check([node], {"x": positive(2, 3, 4), "axes": np.array([2, 0], np.int64)}, 18)


def test_reduce_sum_axes_from_a_computed_tensor():
    nodes = [helper.make_node("Add", ["a", "b"], ["axes"]),
             helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)]
    feeds = {"x": positive(2, 3, 4), "a": np.array([0, -3], np.int64), "b": np.array([2, 1], np.int64)}
    _check(nodes, feeds, 13)
    (y,) = run_node(nodes, feeds, opset=13)
    np.testing.assert_allclose(y, feeds["x"].sum(axis=(1, 2), keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("noop", [0, 1])
def test_reduce_omitted_axes_with_noop(noop):
    node = helper.make_node("ReduceMean", ["x"], ["y"], keepdims=0, noop_with_empty_axes=noop)
    x = positive(3, 4)
    (y,) = run_node([node], {"x": x}, opset=18)
    np.testing.assert_allclose(y, x if noop else x.mean(), rtol=1e-6)


@pytest.mark.parametrize("kind", ["Sum", "Max", "Min", "Prod"])
def test_reduce_int32_keeps_dtype(kind):
    node = helper.make_node("Reduce" + kind, ["x", "axes"], ["y"], keepdims=1)
    x = RNG.integers(-5, 6, (3, 4)).astype(np.int32)
    _check([node], {"x": x, "axes": np.array([1], np.int64)}, 18)


@pytest.mark.parametrize("kind", ["Sum", "Mean", "L2", "LogSumExp"])
def test_reduce_float16(kind):
    node = helper.make_node("Reduce" + kind, ["x", "axes"], ["y"], keepdims=0)
    feeds = {"x": positive(4, 64, dtype=np.float16), "axes": np.array([1], np.int64)}
    _check([node], feeds, 18, rtol=2e-3, atol=1e-3)


def test_reduce_log_sum_exp_is_stable():
    node = helper.make_node("ReduceLogSumExp", ["x"], ["y"], axes=[1], keepdims=0)
    x = np.array([[1000.0, 1000.0], [-1000.0, -1000.0]], np.float32)
    (y,) = run_node([node], {"x": x}, opset=13)
    np.testing.assert_allclose(y, [1000 + np.log(2), -1000 + np.log(2)], rtol=1e-6)


@pytest.mark.parametrize("kind, largest", [("Max", False), ("Min", True)])
def test_reduce_empty_set_int(kind, largest):
    node = helper.make_node("Reduce" + kind, ["x", "axes"], ["y"], keepdims=0)
    feeds = {"x": np.zeros((2, 0), np.int32), "axes": np.array([1], np.int64)}
    (y,) = run_node([node], feeds, opset=18)
    info = np.iinfo(np.int32)
    np.testing.assert_array_equal(y, np.full(2, info.max if largest else info.min, np.int32))


def test_reduce_axis_out_of_range():
    node = helper.make_node("ReduceSum", ["x"], ["y"], axes=[2])
    with pytest.raises(gpuops.GpuopsError, match="axis 2 is out of range"):
        run_node([node], {"x": positive(2, 3)}, opset=11)


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("opset, extra", [(11, {}), (13, {"select_last_index": 1})])
def test_arg_with_ties(op_type, opset, extra):
    node = helper.make_node(op_type, ["x"], ["y"], axis=-1, keepdims=0, **extra)
    x = RNG.integers(0, 3, (4, 6)).astype(np.float32)
    _check([node], {"x": x}, opset)


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_cumsum_3d(exclusive, reverse, dtype):
    node = helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
    feeds = {"x": RNG.integers(-5, 6, (2, 3, 4)).astype(dtype), "axis": np.array(-2, np.int32)}
    _check([node], feeds, 14)


def test_cumprod_exclusive_reverse_formula():
    node = helper.make_node("CumProd", ["x", "axis"], ["y"], exclusive=1, reverse=1)
    x = positive(3, 4)
    (y,) = run_node([node], {"x": x, "axis": np.array(1, np.int64)}, opset=26)
    want = np.flip(np.cumprod(np.flip(x, 1), axis=1), 1)
    want = np.concatenate([want[:, 1:], np.ones((3, 1), np.float32)], axis=1)
    np.testing.assert_allclose(y, want, rtol=1e-6)


def test_topk_opset1_k_attribute():
    node = helper.make_node("TopK", ["x"], ["v", "i"], k=2, axis=0)
    _check([node], {"x": positive(5, 3)}, 1)


def test_topk_opset10_k_input():
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"])
    _check([node], {"x": positive(3, 7), "k": np.array([4], np.int64)}, 10)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_topk_ties_lower_index_first(largest, dtype):
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=largest)
    feeds = {"x": RNG.integers(0, 3, (3, 8)).astype(dtype), "k": np.array([5], np.int64)}
    _check([node], feeds, 11)


def test_topk_k_out_of_range():
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"])
    with pytest.raises(gpuops.GpuopsError, match="k=9 is out of range"):
        run_node([node], {"x": positive(2, 3), "k": np.array([9], np.int64)}, opset=11)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_softmax_family_coerced_2d_opset11(op_type, axis):
    node = helper.make_node(op_type, ["x"], ["y"], axis=axis)
    x = RNG.integers(0, 4, (2, 3, 4)).astype(np.float32)  # repeated values exercise Hardmax ties
    _check([node], {"x": x}, 11)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_family_default_axis_opset1(op_type):
    node = helper.make_node(op_type, ["x"], ["y"])
    _check([node], {"x": positive(2, 3, 4) * 50}, 1)


def test_softmax_float16_large_values():
    node = helper.make_node("Softmax", ["x"], ["y"], axis=0)
    x = np.array([[60000, -60000], [60000, 0]], np.float16)
    _check([node], {"x": x}, 13, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
@pytest.mark.parametrize("shape,axes", [((1, 1), [1]), ((3, 4, 5), [-1]), ((3, 4, 5), [0, 2]), ((3, 4, 5), [0, 1, 2]),
                                        ((2, 0, 3), [2]), ((2, 0, 3), [1]), ((4,), [])])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_cpu_reduce_mean_equals_the_generic_op(dtype, shape, axes, keepdims):
    """The CPU's ReduceMean (one NumPy reduction, the sum divided in place) gives the generic op's very
    array: shape, type and bits; empty axes, empty slices and other types go to the generic op."""
    from gpuops.ops.cpu._common import generic
    from gpuops.ops.cpu.reduce import ReduceMean, ReduceMean_1

    x = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    pairs = [(ReduceMean(np, x, np.array(axes, np.int64), keepdims=keepdims),
              generic("ReduceMean", 18)(np, x, np.array(axes, np.int64), keepdims=keepdims))]
    if axes:
        pairs.append((ReduceMean_1(np, x, axes=axes, keepdims=keepdims),
                      generic("ReduceMean", 1)(np, x, axes=axes, keepdims=keepdims)))
    for got, want in pairs:
        assert type(got) is np.ndarray and got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
