"""Random generators: shapes, dtypes, seeded determinism and distribution moments."""

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops

from tests.ops.common import make_model, run_op


def session(node):
    """A gpuops session of the input-less model of ``node`` (opset 22)."""
    return gpuops.InferenceSession(make_model(node, {}, opset=22), device="cpu")


def generate(op_type, feeds=None, **attrs):
    """One draw of an ``op_type`` node (opset 22) on ``feeds``."""
    return run_op(op_type, feeds or {}, opset=22, **attrs)[0]


@pytest.mark.parametrize("dtype,np_type", [(TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64),
                                           (TensorProto.FLOAT16, np.float16), (TensorProto.BFLOAT16, ml_dtypes.bfloat16)])
def test_random_normal_shape_dtype_moments(dtype, np_type):
    y = generate("RandomNormal", shape=[200, 300], dtype=dtype, mean=2.0, scale=3.0)
    assert y.shape == (200, 300) and y.dtype == np.dtype(np_type)
    v = y.astype(np.float64)
    assert abs(v.mean() - 2.0) < 0.05 and abs(v.std() - 3.0) < 0.05


def test_random_uniform_range_and_moments():
    y = generate("RandomUniform", shape=[100000], low=-1.0, high=3.0)
    assert y.dtype == np.float32 and y.shape == (100000,)
    assert y.min() >= -1.0 and y.max() < 3.0
    assert abs(y.mean() - 1.0) < 0.03 and abs(y.var() - 16 / 12) < 0.03


@pytest.mark.parametrize("op_type", ["RandomNormal", "RandomUniform"])
def test_seed_is_deterministic_across_runs_and_sessions(op_type):
    node = helper.make_node(op_type, [], ["y"], shape=[4, 5], seed=7.0)
    a = session(node).run(None, {})[0]
    s = session(node)
    np.testing.assert_array_equal(a, s.run(None, {})[0])
    np.testing.assert_array_equal(a, s.run(None, {})[0])
    other = session(helper.make_node(op_type, [], ["y"], shape=[4, 5], seed=8.0)).run(None, {})[0]
    assert not np.array_equal(a, other)


def test_unseeded_runs_differ():
    s = session(helper.make_node("RandomNormal", [], ["y"], shape=[16]))
    assert not np.array_equal(s.run(None, {})[0], s.run(None, {})[0])


def test_like_ops_take_shape_and_dtype():
    x = np.zeros((3, 7), np.float16)
    y = generate("RandomNormalLike", {"x": x}, seed=1.0)
    assert y.shape == (3, 7) and y.dtype == np.float16
    y = generate("RandomUniformLike", {"x": np.zeros((2, 2), np.int32)}, dtype=TensorProto.DOUBLE, low=5.0, high=6.0)
    assert y.dtype == np.float64 and np.all((y >= 5.0) & (y < 6.0))


def test_like_op_needs_a_float_type():
    with pytest.raises(gpuops.GpuopsError, match="floating-point"):
        generate("RandomUniformLike", {"x": np.zeros((2,), np.int32)})


def test_bernoulli_extremes_dtype_and_mean():
    p = np.array([0.0, 1.0, 0.0, 1.0], np.float32)
    y = generate("Bernoulli", {"p": p}, seed=3.0)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, p)
    y = generate("Bernoulli", {"p": np.full((50000,), 0.3)}, dtype=TensorProto.INT32)
    assert y.dtype == np.int32 and set(np.unique(y)) <= {0, 1}
    assert abs(y.mean() - 0.3) < 0.01
    b = generate("Bernoulli", {"p": np.full((5,), 0.5, np.float32)}, dtype=TensorProto.BOOL)
    assert b.dtype == bool


def test_bernoulli_seed_determinism():
    p = np.random.default_rng(0).random(64).astype(np.float32)
    np.testing.assert_array_equal(generate("Bernoulli", {"p": p}, seed=11.0), generate("Bernoulli", {"p": p}, seed=11.0))


def test_multinomial_frequencies():
    logits = np.log(np.array([[0.1, 0.2, 0.7], [0.5, 0.5, 0.0001]], np.float32))
    y = generate("Multinomial", {"x": logits}, sample_size=40000, seed=5.0, dtype=TensorProto.INT64)
    assert y.shape == (2, 40000) and y.dtype == np.int64
    freq = np.stack([np.bincount(row, minlength=3) / row.size for row in y])
    np.testing.assert_allclose(freq, np.exp(logits) / np.exp(logits).sum(1, keepdims=True), atol=0.01)
    y32 = generate("Multinomial", {"x": logits}, sample_size=3)
    assert y32.dtype == np.int32 and y32.shape == (2, 3)
