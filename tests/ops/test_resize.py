"""Resize / Upsample / GridSample beyond the onnx node cases, checked against onnxruntime or NumPy:
legacy Upsample attributes, Resize-10 rounding, antialiased cubic resize of a 3-D tensor, opset-11
coordinate modes, GridSample-16 mode names and volumetric sampling."""

import functools

import numpy as np
import pytest
from onnx import helper

import gpuops

from tests.ops.common import (assert_node_matches_ort, assert_op_matches_ort, one_node_model, run_node, run_op,
                              run_ort)

RNG = np.random.default_rng(0)
_same = functools.partial(assert_op_matches_ort, rtol=1e-5, atol=1e-5)


# -- Upsample -----------------------------------------------------------------------------------

def test_upsample_v1_nearest_legacy_attributes():
    X = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    got = run_op("Upsample", {"X": X}, opset=1, height_scale=2.0, width_scale=3.0)[0]
    np.testing.assert_array_equal(got, np.repeat(np.repeat(X, 2, axis=2), 3, axis=3))


def test_upsample_v1_bilinear_legacy_attributes():
    X = RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)
    got = run_op("Upsample", {"X": X}, opset=1, height_scale=2.0, width_scale=2.5, mode="bilinear")[0]
    # asymmetric coordinates, the last input row / column repeated past the edge
    ys, xs = np.arange(6) / 2.0, np.arange(10) / 2.5
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, 2), np.minimum(x0 + 1, 3)
    wy, wx = (ys - y0)[:, None], (xs - x0)[None, :]
    top = X[:, :, y0][..., x0] * (1 - wx) + X[:, :, y0][..., x1] * wx
    bottom = X[:, :, y1][..., x0] * (1 - wx) + X[:, :, y1][..., x1] * wx
    np.testing.assert_allclose(got, top * (1 - wy) + bottom * wy, rtol=1e-6, atol=1e-6)
    # the same as opset 9's Upsample with a scales input, in onnxruntime
    feeds = {"X": X, "scales": np.array([1, 1, 2, 2.5], np.float32)}
    want = run_ort(one_node_model("Upsample", feeds, opset=9, mode="linear"), feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_upsample_v1_needs_4d():
    with pytest.raises(gpuops.GpuopsError, match="4-D"):
        run_op("Upsample", {"X": np.ones((2, 3, 4), np.float32)}, opset=1, height_scale=2.0, width_scale=2.0)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_v7_scales_attribute(mode):
    X = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    _same("Upsample", {"X": X}, opset=7, scales=[1.0, 1.5, 2.25], mode=mode)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_v9_scales_input(mode):
    feeds = {"X": RNG.standard_normal((1, 2, 3, 5)).astype(np.float32),
             "scales": np.array([1, 1, 2.5, 1.6], np.float32)}
    _same("Upsample", feeds, opset=9, mode=mode)


# -- Resize -------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 0.6, 0.45], [1, 1, 1.7, 0.8]])
def test_resize_v10(mode, scales):
    """Resize-10: asymmetric coordinates; nearest rounds up when downsampling (onnxruntime)."""
    feeds = {"X": RNG.standard_normal((1, 2, 7, 9)).astype(np.float32), "scales": np.array(scales, np.float32)}
    _same("Resize", feeds, opset=10, mode=mode)


def _ort_resize_4d(X4, scales4, attrs):
    feeds = {"X": X4, "roi": np.array([], np.float32), "scales": np.array(scales4, np.float32)}
    return run_ort(one_node_model("Resize", feeds, opset=19, **attrs), feeds)[0]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_resize_cubic_antialias_3d(device, exclude_outside):
    """All three axes of a 3-D tensor; onnxruntime resizes only inner axes of 4-D tensors with cubic
    antialias, so its answer is two separable passes of that."""
    X = RNG.standard_normal((6, 7, 9)).astype(np.float32)
    s = [0.5, 0.6, 1.4]
    attrs = dict(mode="cubic", antialias=1, exclude_outside=exclude_outside, cubic_coeff_a=-0.5)
    got = run_op("Resize", {"X": X, "roi": np.array([], np.float32), "scales": np.array(s, np.float32)}, device,
                 opset=19, **attrs)[0]
    inner = _ort_resize_4d(X[None], [1, 1, s[1], s[2]], attrs)[0]  # (6, 4, 12)
    outer = _ort_resize_4d(np.transpose(inner, (1, 0, 2))[None], [1, 1, s[0], 1], attrs)[0]
    want = np.transpose(outer, (1, 0, 2))
    assert got.shape == want.shape == (3, 4, 12)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_resize_linear_antialias_3d_sizes():
    feeds = {"X": RNG.standard_normal((5, 8, 11)).astype(np.float32), "sizes": np.array([3, 3, 5], np.int64)}
    node = helper.make_node("Resize", ["X", "", "", "sizes"], ["Y"], mode="linear", antialias=1)
    assert_node_matches_ort(node, feeds, opset=19, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attrs", [
    dict(mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn"),
    dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="ceil"),
    dict(mode="nearest", coordinate_transformation_mode="pytorch_half_pixel", nearest_mode="round_prefer_ceil"),
    dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
    dict(mode="cubic", coordinate_transformation_mode="half_pixel", exclude_outside=1, cubic_coeff_a=-0.5),
    dict(mode="cubic", coordinate_transformation_mode="asymmetric"),
])
def test_resize_v11_coordinate_modes(attrs):
    feeds = {"X": RNG.standard_normal((1, 2, 5, 6)).astype(np.float32), "roi": np.array([], np.float32),
             "scales": np.array([], np.float32), "sizes": np.array([1, 2, 8, 4], np.int64)}
    _same("Resize", feeds, opset=11, **attrs)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_tf_crop_and_resize_extrapolation(mode):
    feeds = {"X": RNG.standard_normal((1, 2, 6, 6)).astype(np.float32),
             "roi": np.array([0, 0, -0.23, 0.31, 1, 1, 0.87, 1.29], np.float32),
             "sizes": np.array([1, 2, 4, 9], np.int64)}
    node = helper.make_node("Resize", ["X", "roi", "", "sizes"], ["Y"], mode=mode,
                            coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-7.0)
    assert_node_matches_ort(node, feeds, opset=13, rtol=1e-5, atol=1e-5)


def test_resize_int8_nearest_keeps_dtype():
    X = RNG.integers(-128, 128, (1, 1, 3, 4)).astype(np.int8)
    node = helper.make_node("Resize", ["X", "", "scales"], ["Y"], mode="nearest")
    (got,) = run_node(node, {"X": X, "scales": np.array([1, 1, 2, 2], np.float32)}, opset=19)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, np.repeat(np.repeat(X, 2, axis=2), 2, axis=3))


def test_resize_needs_scales_or_sizes():
    feeds = {"X": np.ones((1, 1, 2, 2), np.float32)}
    with pytest.raises(gpuops.GpuopsError, match="scales"):
        run_op("Resize", feeds, opset=19, mode="nearest")


# -- GridSample ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_gridsample_v16(mode, padding_mode, align_corners):
    feeds = {"X": RNG.standard_normal((2, 3, 5, 6)).astype(np.float32),
             "grid": RNG.uniform(-1.5, 1.5, (2, 4, 7, 2)).astype(np.float32)}
    _same("GridSample", feeds, opset=16, mode=mode, padding_mode=padding_mode, align_corners=align_corners)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_gridsample_volumetric(device, mode, padding_mode):
    feeds = {"X": RNG.standard_normal((2, 2, 5, 3, 4)).astype(np.float32),
             "grid": RNG.uniform(-1.3, 1.3, (2, 3, 2, 4, 3)).astype(np.float32)}
    _same("GridSample", feeds, device, opset=20, mode=mode, padding_mode=padding_mode)
