"""com.microsoft CropAndResize, MaxpoolWithMask, ConvTransposeWithDynamicPads and NhwcMaxPool against
onnxruntime's CPU kernels."""

import numpy as np
import pytest

from .helpers import check, ms_node, rand, randint


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("crop", [(3, 4), (1, 1), (1, 5)])
def test_crop_and_resize(mode, crop):
    rois = np.array([[0.1, 0.2, 0.8, 0.9], [0.0, 0.0, 1.0, 1.0], [-0.2, 0.5, 0.6, 1.3], [0.5, 0.5, 0.5, 0.5]],
                    np.float32)  # inside, the whole image, partly outside (extrapolated), a point
    feeds = {"x": rand(2, 3, 7, 6), "rois": rois, "bi": np.array([0, 1, 1, 0], np.int32),
             "crop": np.array(crop, np.int32)}
    check(ms_node("CropAndResize", list(feeds), ["y"], mode=mode, extrapolation_value=-2.0), feeds,
          rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("x_shape,m_shape,attrs", [
    ((1, 2, 6, 6), (1, 2, 6, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 3, 5, 7), (2, 3, 5, 7), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ((2, 2, 5, 5), (1, 1, 5, 5), {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [0, 1, 0, 1]}),
    ((2, 2, 9), (2, 2, 9), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ((1, 2, 4, 4, 4), (1, 2, 4, 4, 4), {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}),
])
def test_maxpool_with_mask(x_shape, m_shape, attrs):
    mask = (randint(0, 4, *m_shape) > 0).astype(np.int32)  # about a quarter masked
    check(ms_node("MaxpoolWithMask", ["x", "m"], ["y"], **attrs), {"x": rand(*x_shape), "m": mask})


@pytest.mark.parametrize("pads,attrs", [
    ([1, 1, 1, 1], {"strides": [2, 2]}),
    ([0, 1, 2, 0], {"strides": [2, 1], "output_padding": [1, 0]}),
    ([0, 0, 0, 0], {"group": 2, "dilations": [2, 1]}),
])
@pytest.mark.parametrize("with_bias", [False, True])
def test_conv_transpose_with_dynamic_pads(pads, attrs, with_bias):
    feeds = {"x": rand(1, 4, 4, 5), "w": rand(4, 3 if attrs.get("group", 1) == 1 else 2, 3, 3)}
    feeds["pads"] = np.array(pads, np.int64)  # onnxruntime requires the (spec-optional) Pads input
    inputs = ["x", "w", "pads"]
    if with_bias:
        feeds["b"] = rand(feeds["w"].shape[1] * attrs.get("group", 1))
        inputs.append("b")
    check(ms_node("ConvTransposeWithDynamicPads", inputs, ["y"], **attrs), feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("attrs", [{"kernel_shape": [2, 2], "strides": [2, 2]},
                                   {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "dilations": [1, 2]},
                                   {"kernel_shape": [3, 2], "ceil_mode": 1, "strides": [2, 2]}])
def test_nhwc_max_pool(dtype, attrs):
    lo, hi = (0, 256) if dtype == np.uint8 else (-128, 128)
    check(ms_node("NhwcMaxPool", ["x"], ["y"], **attrs), {"x": randint(lo, hi, 2, 7, 6, 3, dtype=dtype)})
