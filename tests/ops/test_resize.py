"""Resize / Upsample / GridSample beyond the onnx node cases, checked against onnxruntime or NumPy:
legacy Upsample attributes, Resize-10 rounding, antialiased cubic resize of a 3-D tensor, opset-11
coordinate modes, GridSample-16 mode names and volumetric sampling."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import gpuops
from tests.conformance.harness import device_guard

RNG = np.random.default_rng(0)


def _model(op, feeds, attrs, opset, inputs=None):
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in feeds.items()]
    node = helper.make_node(op, list(feeds) if inputs is None else inputs, ["Y"], **attrs)
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _gpuops(op, feeds, attrs, opset, inputs=None, device="cpu"):
    sess = gpuops.InferenceSession(_model(op, feeds, attrs, opset, inputs), device=device)
    with device_guard(device):
        return sess.run(None, feeds)[0]


def _ort(op, feeds, attrs, opset, inputs=None):
    model = _model(op, feeds, attrs, opset, inputs)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _same(op, feeds, attrs, opset, inputs=None, device="cpu", tol=1e-5):
    got = _gpuops(op, feeds, attrs, opset, inputs, device)
    want = _ort(op, feeds, attrs, opset, inputs)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# -- Upsample -----------------------------------------------------------------------------------

def test_upsample_v1_nearest_legacy_attributes():
    X = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    got = _gpuops("Upsample", {"X": X}, dict(height_scale=2.0, width_scale=3.0), 1)
    np.testing.assert_array_equal(got, np.repeat(np.repeat(X, 2, axis=2), 3, axis=3))


def test_upsample_v1_bilinear_legacy_attributes():
    X = RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)
    got = _gpuops("Upsample", {"X": X}, dict(height_scale=2.0, width_scale=2.5, mode="bilinear"), 1)
    # asymmetric coordinates, the last input row / column repeated past the edge
    ys, xs = np.arange(6) / 2.0, np.arange(10) / 2.5
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, 2), np.minimum(x0 + 1, 3)
    wy, wx = (ys - y0)[:, None], (xs - x0)[None, :]
    top = X[:, :, y0][..., x0] * (1 - wx) + X[:, :, y0][..., x1] * wx
    bottom = X[:, :, y1][..., x0] * (1 - wx) + X[:, :, y1][..., x1] * wx
    np.testing.assert_allclose(got, top * (1 - wy) + bottom * wy, rtol=1e-6, atol=1e-6)
    # the same as opset 9's Upsample with a scales input, in onnxruntime
    want = _ort("Upsample", {"X": X, "scales": np.array([1, 1, 2, 2.5], np.float32)}, dict(mode="linear"), 9)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_upsample_v1_needs_4d():
    model = _model("Upsample", {"X": np.ones((2, 3, 4), np.float32)}, dict(height_scale=2.0, width_scale=2.0), 1)
    with pytest.raises(gpuops.GpuopsError, match="4-D"):
        gpuops.InferenceSession(model, device="cpu").run(None, {"X": np.ones((2, 3, 4), np.float32)})


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_v7_scales_attribute(mode):
    X = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    _same("Upsample", {"X": X}, dict(scales=[1.0, 1.5, 2.25], mode=mode), 7)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_v9_scales_input(mode):
    feeds = {"X": RNG.standard_normal((1, 2, 3, 5)).astype(np.float32),
             "scales": np.array([1, 1, 2.5, 1.6], np.float32)}
    _same("Upsample", feeds, dict(mode=mode), 9)


# -- Resize -------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 0.6, 0.45], [1, 1, 1.7, 0.8]])
def test_resize_v10(mode, scales):
    """Resize-10: asymmetric coordinates; nearest rounds up when downsampling (onnxruntime)."""
    feeds = {"X": RNG.standard_normal((1, 2, 7, 9)).astype(np.float32), "scales": np.array(scales, np.float32)}
    _same("Resize", feeds, dict(mode=mode), 10)


def _ort_resize_4d(X4, scales4, attrs):
    feeds = {"X": X4, "roi": np.array([], np.float32), "scales": np.array(scales4, np.float32)}
    return _ort("Resize", feeds, attrs, 19)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_resize_cubic_antialias_3d(device, exclude_outside):
    """All three axes of a 3-D tensor; onnxruntime resizes only inner axes of 4-D tensors with cubic
    antialias, so its answer is two separable passes of that."""
    X = RNG.standard_normal((6, 7, 9)).astype(np.float32)
    s = [0.5, 0.6, 1.4]
    attrs = dict(mode="cubic", antialias=1, exclude_outside=exclude_outside, cubic_coeff_a=-0.5)
    got = _gpuops("Resize", {"X": X, "roi": np.array([], np.float32), "scales": np.array(s, np.float32)},
                  attrs, 19, device=device)
    inner = _ort_resize_4d(X[None], [1, 1, s[1], s[2]], attrs)[0]  # (6, 4, 12)
    outer = _ort_resize_4d(np.transpose(inner, (1, 0, 2))[None], [1, 1, s[0], 1], attrs)[0]
    want = np.transpose(outer, (1, 0, 2))
    assert got.shape == want.shape == (3, 4, 12)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_resize_linear_antialias_3d_sizes():
    feeds = {"X": RNG.standard_normal((5, 8, 11)).astype(np.float32), "sizes": np.array([3, 3, 5], np.int64)}
    _same("Resize", feeds, dict(mode="linear", antialias=1), 19, inputs=["X", "", "", "sizes"])


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
    _same("Resize", feeds, attrs, 11)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_tf_crop_and_resize_extrapolation(mode):
    feeds = {"X": RNG.standard_normal((1, 2, 6, 6)).astype(np.float32),
             "roi": np.array([0, 0, -0.23, 0.31, 1, 1, 0.87, 1.29], np.float32),
             "sizes": np.array([1, 2, 4, 9], np.int64)}
    _same("Resize", feeds, dict(mode=mode, coordinate_transformation_mode="tf_crop_and_resize",
                                extrapolation_value=-7.0), 13, inputs=["X", "roi", "", "sizes"])


def test_resize_int8_nearest_keeps_dtype():
    X = RNG.integers(-128, 128, (1, 1, 3, 4)).astype(np.int8)
    got = _gpuops("Resize", {"X": X, "scales": np.array([1, 1, 2, 2], np.float32)}, dict(mode="nearest"), 19,
                  inputs=["X", "", "scales"])
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, np.repeat(np.repeat(X, 2, axis=2), 2, axis=3))


def test_resize_needs_scales_or_sizes():
    feeds = {"X": np.ones((1, 1, 2, 2), np.float32)}
    model = _model("Resize", feeds, dict(mode="nearest"), 19, inputs=["X"])
    with pytest.raises(gpuops.GpuopsError, match="scales"):
        gpuops.InferenceSession(model, device="cpu").run(None, feeds)


# -- GridSample ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_gridsample_v16(mode, padding_mode, align_corners):
    feeds = {"X": RNG.standard_normal((2, 3, 5, 6)).astype(np.float32),
             "grid": RNG.uniform(-1.5, 1.5, (2, 4, 7, 2)).astype(np.float32)}
    _same("GridSample", feeds, dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners), 16)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_gridsample_volumetric(device, mode, padding_mode):
    feeds = {"X": RNG.standard_normal((2, 2, 5, 3, 4)).astype(np.float32),
             "grid": RNG.uniform(-1.3, 1.3, (2, 3, 2, 4, 3)).astype(np.float32)}
    _same("GridSample", feeds, dict(mode=mode, padding_mode=padding_mode), 20, device=device)
