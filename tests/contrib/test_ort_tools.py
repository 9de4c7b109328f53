"""The ops onnxruntime's quantizers and transformer optimizer emit beyond the seed contrib spec, against
onnxruntime's CPU kernels (NumPy formulas where it has none, asserted), on cpu and cuda."""

import math

import numpy as np
import pytest
from onnx import helper, numpy_helper

from .helpers import (DEVICES, assert_close, check, make_model, ms_node, ort_has_kernel, rand, randint, run_gpuops,
                      run_ort)

U8, I8 = np.uint8, np.int8


def q8(dtype, *shape):
    lo, hi = (0, 256) if dtype == U8 else (-128, 128)
    return randint(lo, hi, *shape, dtype=dtype)


def f32(v):
    return np.array(v, np.float32)


def bools(*shape):
    return randint(0, 2, *shape).astype(bool)


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


# -- normalizations -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_layer_normalization_v1_at_old_opsets(dtype):
    # onnxruntime's LayerNormalization-1 (ai.onnx domain): what the optimizer writes into opset-14 models
    feeds = {"x": rand(2, 3, 8, dtype=dtype), "g": rand(8), "b": rand(8)}
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y", "m", "inv"], epsilon=1e-5)
    tol = 1e-5 if dtype == np.float32 else 2e-3
    check(node, feeds, opset=14, rtol=tol, atol=tol)


@pytest.mark.parametrize("axis", [-1, 1])
def test_simplified_layer_normalization(axis):
    feeds = {"x": rand(2, 3, 8), "s": rand(8) if axis == -1 else rand(3, 8)}
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "s"], ["y", "inv"], axis=axis, epsilon=1e-6)
    check(node, feeds, opset=14)


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_skip_simplified_layer_normalization(with_bias, dtype):
    feeds = {"x": rand(2, 4, 16, dtype=dtype), "skip": rand(2, 4, 16, dtype=dtype), "g": rand(16, dtype=dtype)}
    if with_bias:
        feeds["b"] = rand(16, dtype=dtype)
    node = ms_node("SkipSimplifiedLayerNormalization", list(feeds), ["y", "", "inv", "sum"], epsilon=1e-6)
    tol = 1e-5 if dtype == np.float32 else 3e-3
    check(node, feeds, rtol=tol, atol=tol)


def _group_norm_ref(x, gamma, beta, groups, eps, silu):
    N, C = x.shape[0], x.shape[-1]
    g = x.reshape(N, -1, groups, C // groups).astype(np.float64)
    y = (g - g.mean(axis=(1, 3), keepdims=True)) / np.sqrt(g.var(axis=(1, 3), keepdims=True) + eps)
    y = y.reshape(x.shape) * gamma + beta
    if silu:
        y = y / (1 + np.exp(-y))
    return y.astype(x.dtype)


@pytest.mark.parametrize("activation", [0, 1])
def test_group_norm_formula(activation):
    feeds = {"x": rand(2, 3, 3, 8), "g": rand(8), "b": rand(8)}
    node = ms_node("GroupNorm", list(feeds), ["y"], activation=activation, groups=4, epsilon=1e-5)
    assert not ort_has_kernel(node, feeds)
    check(node, feeds, ref=lambda x, g, b: [_group_norm_ref(x, g, b, 4, 1e-5, activation)], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("skip_shape", [(2, 3, 3, 8), (2, 8)])
def test_skip_group_norm_formula(skip_shape):
    feeds = {"x": rand(2, 3, 3, 8), "g": rand(8), "b": rand(8), "skip": rand(*skip_shape), "bias": rand(8)}
    node = ms_node("SkipGroupNorm", list(feeds), ["y", "s"], activation=1, groups=2)
    assert not ort_has_kernel(node, feeds)

    def ref(x, g, b, skip, bias):
        s = x + (skip if skip.ndim == 4 else skip[:, None, None, :]) + bias
        return [_group_norm_ref(s, g, b, 2, 1e-5, True), s]
    check(node, feeds, ref=ref, rtol=1e-4, atol=1e-5)


# -- fusions ------------------------------------------------------------------------------------

def test_quick_gelu():
    check(ms_node("QuickGelu", ["x"], ["y"], alpha=1.5), {"x": rand(3, 16, scale=3)}, atol=1e-6)


def test_gemm_fast_gelu_formula():
    feeds = {"x": rand(2, 3, 8), "w": rand(8, 6), "b": rand(6)}
    node = ms_node("GemmFastGelu", list(feeds), ["y"])
    assert not ort_has_kernel(node, feeds)
    fast = ms_node("FastGelu", ["m", "b"], ["y"])
    want = run_ort(make_model(fast, {"m": feeds["x"] @ feeds["w"], "b": feeds["b"]}),
                   {"m": feeds["x"] @ feeds["w"], "b": feeds["b"]})
    check(node, feeds, ref=lambda **_: want, atol=1e-5)


def test_bias_add_and_split_gelu_formula():
    feeds = {"x": rand(2, 5, 8), "b": rand(8), "s": rand(2, 5, 8)}
    node = ms_node("BiasAdd", list(feeds), ["y"])
    assert not ort_has_kernel(node, feeds)
    check(node, feeds, ref=lambda x, b, s: [x + b + s])
    feeds = {"x": rand(2, 5, 8), "b": rand(8)}
    node = ms_node("BiasSplitGelu", list(feeds), ["y"])
    assert not ort_has_kernel(node, feeds)
    check(node, feeds, ref=lambda x, b: [((x + b)[..., :4] * _gelu((x + b)[..., 4:])).astype(np.float32)],
          atol=1e-5)


@pytest.mark.parametrize("group", [1, 2])
def test_nhwc_conv_matches_conv(group):
    x, w, b = rand(2, 5, 6, 4), rand(6, 3, 3, 4 // group), rand(6)
    node = ms_node("NhwcConv", ["x", "w", "b"], ["y"], pads=[1, 0, 1, 0], strides=[1, 2], group=group)
    feeds = {"x": x, "w": w, "b": b}
    assert not ort_has_kernel(node, feeds)
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 0, 1, 0], strides=[1, 2], group=group)
    nchw = {"x": x.transpose(0, 3, 1, 2), "w": w.transpose(0, 3, 1, 2), "b": b}
