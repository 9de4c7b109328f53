"""Conv, pooling and normalization behaviour the onnx node cases leave out: groups, dilations, 1-D/3-D,
batch chunking, MaxPool indices in both storage orders, ceil_mode averages, old opset semantics,
training-mode statistics and seeded Dropout. Checked against onnxruntime, or a NumPy formula where
onnxruntime lacks the case, on cpu and on the CUDA path."""

import numpy as np
import pytest

from gpuops.errors import GpuopsError
from gpuops.ops import conv as conv_mod

from tests.conformance.harness import assert_close
from tests.ops.common import DEVICES, assert_op_matches_ort, run_op
from tests.ort_versions import requires_ort

RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _reseed():
    """Each test draws the same data however the tests are selected or ordered."""
    global RNG
    RNG = np.random.default_rng(7)


def _rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _check_ort(op_type, feeds, device, tol=1e-5, **kw):
    """:func:`assert_op_matches_ort` at this file's tolerance."""
    return assert_op_matches_ort(op_type, feeds, device, rtol=tol, atol=tol, **kw)


# -- Conv / ConvTranspose / DeformConv / Col2Im ------------------------------------------------------

CONV_CASES = {
    "1d_group_stride_dilation": ((2, 4, 11), (6, 2, 3), dict(group=2, strides=[2], pads=[1, 2], dilations=[2])),
    "2d_depthwise_same_lower": ((1, 6, 9, 8), (12, 1, 3, 3), dict(group=6, strides=[2, 1], auto_pad="SAME_LOWER")),
    "2d_same_upper": ((2, 3, 10, 9), (4, 3, 3, 2), dict(strides=[3, 2], auto_pad="SAME_UPPER")),
    "2d_valid": ((1, 3, 8, 8), (5, 3, 4, 3), dict(strides=[2, 2], auto_pad="VALID")),
    "2d_1x1_strided": ((2, 8, 7, 7), (4, 8, 1, 1), dict(strides=[2, 2])),
    "2d_asymmetric_pads": ((1, 2, 5, 6), (3, 2, 3, 3), dict(pads=[0, 2, 1, 0])),
    "3d_group": ((1, 4, 5, 6, 7), (6, 2, 2, 3, 2), dict(group=2, pads=[1, 0, 1, 0, 1, 1], dilations=[1, 2, 1])),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CONV_CASES, ids=list(CONV_CASES))
def test_conv_matches_onnxruntime(case, device):
    xs, ws, attrs = CONV_CASES[case]
    _check_ort("Conv", {"X": _rand(*xs), "W": _rand(*ws), "B": _rand(ws[0])}, device, **attrs)


@pytest.mark.parametrize("auto_pad, pads", [("SAME_UPPER", [2, 1, 2, 2]), ("SAME_LOWER", [2, 2, 2, 1])])
def test_conv_same_padding_counts_dilation(auto_pad, pads):
    """Dilated windows (5 and 4 wide) padded to ceil(in / stride) outputs; onnxruntime refuses
    dilation with SAME, so compare with the explicit pads the spec's formula gives."""
    X, W = _rand(1, 2, 10, 9), _rand(3, 2, 3, 2)
    got = run_op("Conv", {"X": X, "W": W}, "cpu", strides=[3, 2], dilations=[2, 3], auto_pad=auto_pad)[0]
    want = _check_ort("Conv", {"X": X, "W": W}, "cpu", strides=[3, 2], dilations=[2, 3], pads=pads)[0]
    assert got.shape == (1, 3, 4, 5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv_batches_in_chunks_when_columns_are_large(monkeypatch):
    monkeypatch.setattr(conv_mod, "COLS_BYTES", 4096)  # forces one image (or fewer) per chunk
    _check_ort("Conv", {"X": _rand(5, 3, 9, 9), "W": _rand(4, 3, 3, 3)}, "cpu", pads=[1, 1, 1, 1], strides=[2, 2])


def test_conv_float64_and_no_bias():
    X, W = _rand(1, 2, 6, 6), _rand(3, 2, 2, 2)
    want = _check_ort("Conv", {"X": X, "W": W}, "cpu")[0]  # onnxruntime has no double Conv
    got = run_op("Conv", {"X": X.astype(np.float64), "W": W.astype(np.float64)}, "cpu")[0]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv_rejects_bad_group():
    with pytest.raises(GpuopsError, match="group"):
        run_op("Conv", {"X": _rand(1, 4, 5, 5), "W": _rand(2, 4, 3, 3)}, "cpu", group=3)


CONVT_CASES = {
    "2d_group_stride_dilation_outpad": ((1, 4, 3, 4), (4, 3, 3, 2),
                                        dict(group=2, strides=[2, 3], dilations=[2, 1], output_padding=[1, 0],
                                             pads=[1, 0, 0, 2])),
    "1d_strided": ((2, 3, 5), (3, 2, 4), dict(strides=[3], pads=[1, 1])),
    "3d": ((1, 2, 3, 2, 3), (2, 2, 2, 3, 2), dict(strides=[2, 1, 2], pads=[0, 1, 1, 1, 0, 0])),
    "output_shape_even_total": ((1, 1, 3, 3), (1, 2, 3, 3), dict(strides=[3, 2], output_shape=[9, 5])),
    "same_lower_even_total": ((1, 2, 3, 3), (2, 1, 3, 3), dict(strides=[1, 1], auto_pad="SAME_LOWER")),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CONVT_CASES, ids=list(CONVT_CASES))
def test_conv_transpose_matches_onnxruntime(case, device):
    xs, ws, attrs = CONVT_CASES[case]
    out_ch = ws[1] * attrs.get("group", 1)
    _check_ort("ConvTranspose", {"X": _rand(*xs), "W": _rand(*ws), "B": _rand(out_ch)}, device, **attrs)


@pytest.mark.parametrize("opset, auto_pad, head", [(11, "SAME_UPPER", 1), (11, "SAME_LOWER", 2), (11, "NOTSET", 2),
                                                   (1, "SAME_UPPER", 2), (1, "NOTSET", 1)])
def test_conv_transpose_output_shape_splits_odd_padding_per_version(opset, auto_pad, head):
    """Full output 9 wide, output_shape 6: 3 padding units, split per the version's rule."""
    X, W = _rand(1, 1, 4), _rand(1, 1, 3)
    full = run_op("ConvTranspose", {"X": X, "W": W}, "cpu", opset=11, strides=[2])[0]
    got = run_op("ConvTranspose", {"X": X, "W": W}, "cpu", opset=opset, strides=[2], output_shape=[6],
                 auto_pad=auto_pad)[0]
    np.testing.assert_allclose(got, full[:, :, head:head + 6], rtol=1e-6)


@requires_ort("1.24", "it has no DeformConv kernel")
@pytest.mark.parametrize("device", DEVICES)
def test_deform_conv_matches_onnxruntime(device):
    K = 2 * 2
    feeds = {"X": _rand(2, 4, 6, 5), "W": _rand(6, 2, 2, 2), "offset": _rand(2, 2 * K * 2, 3, 3),
             "B": _rand(6), "mask": RNG.random((2, 2 * K, 3, 3)).astype(np.float32)}
    _check_ort("DeformConv", feeds, device, opset=19, group=2, offset_group=2, strides=[2, 1], pads=[1, 0, 0, 0],
               dilations=[1, 2], tol=1e-4)


@pytest.mark.parametrize("shape, kernel", [((1, 3, 9), (2, 3, 3)), ((1, 2, 4, 5, 4), (3, 2, 2, 3, 2))])
def test_deform_conv_with_zero_offsets_is_conv(shape, kernel):
    """The n-D sampling path: whole-pixel offsets of zero reproduce a plain convolution."""
    X, W = _rand(*shape), _rand(*kernel)
    nd, K = len(shape) - 2, int(np.prod(kernel[2:]))
    y_conv = run_op("Conv", {"X": X, "W": W}, "cpu", pads=[1] * (2 * nd))[0]
    offset = np.zeros((1, K * nd) + y_conv.shape[2:], np.float32)
    y = run_op("DeformConv", {"X": X, "W": W, "offset": offset}, "cpu", opset=19, pads=[1] * (2 * nd))[0]
    np.testing.assert_allclose(y, y_conv, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_col2im_matches_onnxruntime(device):
    image, block = np.array([7, 6], np.int64), np.array([2, 3], np.int64)
    strides, dilations, pads = [2, 1], [2, 1], [1, 0, 2, 1]
    blocks = [(n + pads[i] + pads[i + 2] - (b - 1) * d - 1) // s + 1
              for i, (n, b, s, d) in enumerate(zip(image, block, strides, dilations))]
    feeds = {"input": _rand(2, 3 * 6, int(np.prod(blocks))), "image_shape": image, "block_shape": block}
    _check_ort("Col2Im", feeds, device, strides=strides, dilations=dilations, pads=pads)


def test_col2im_inverts_non_overlapping_unfold():
    X = _rand(1, 2, 4, 6)
    cols = X.reshape(1, 2, 2, 2, 3, 2).transpose(0, 1, 3, 5, 2, 4).reshape(1, 2 * 2 * 2, 2 * 3)
    got = run_op("Col2Im", {"input": cols, "image_shape": np.array([4, 6]), "block_shape": np.array([2, 2])},
                 "cpu", strides=[2, 2])[0]
    np.testing.assert_array_equal(got, X)


# -- pooling ---------------------------------------------------------------------------------------

MAXPOOL_CASES = {
    "2d_col_major_pads": ((2, 3, 7, 6), dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1], storage_order=1)),
    "2d_ceil_dilated": ((1, 2, 8, 7), dict(kernel_shape=[2, 3], strides=[2, 2], dilations=[2, 1], ceil_mode=1)),
    "3d_dilated": ((1, 2, 5, 6, 5), dict(kernel_shape=[2, 2, 2], strides=[1, 2, 2], dilations=[2, 1, 1])),
    "3d_col_major": ((1, 2, 4, 5, 3), dict(kernel_shape=[2, 3, 2], storage_order=1, pads=[0, 1, 0, 1, 1, 1])),
    "1d_same_upper": ((2, 3, 9), dict(kernel_shape=[4], strides=[2], auto_pad="SAME_UPPER")),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", MAXPOOL_CASES, ids=list(MAXPOOL_CASES))
def test_maxpool_values_and_indices_match_onnxruntime(case, device):
    shape, attrs = MAXPOOL_CASES[case]
    got = _check_ort("MaxPool", {"X": _rand(*shape)}, device, outputs=2, **attrs)
    assert got[1].dtype == np.int64


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.float16])
def test_maxpool_small_types_pad_with_lowest(dtype):
    X = (RNG.integers(-100 if dtype != np.uint8 else 0, 100, (1, 2, 5, 5))).astype(dtype)
    if dtype == np.int8:
        X[:] = -100  # pads must not win over the data
    got = _check_ort("MaxPool", {"X": X}, "cpu", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
    assert got[0].dtype == dtype


AVGPOOL_CASES = {
    "ceil_pads_exclude": (18, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
    "ceil_pads_include": (18, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                                   count_include_pad=1)),
    "asymmetric_pads_include": (18, dict(kernel_shape=[2, 3], pads=[0, 2, 1, 0], count_include_pad=1)),
    "dilated_ceil": (19, dict(kernel_shape=[2, 2], strides=[2, 3], dilations=[2, 2], ceil_mode=1)),
    "opset7_same_upper": (7, dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER")),
    "opset10_ceil": (10, dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
}


_ORT_AVGPOOL_CEIL_INCLUDE = requires_ort(
    "1.24", "with ceil_mode and count_include_pad its AveragePool divides a window that runs past the padding "
            "by the whole kernel size")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", [pytest.param(c, marks=_ORT_AVGPOOL_CEIL_INCLUDE) if c == "ceil_pads_include" else c
                                  for c in AVGPOOL_CASES])
def test_average_pool_matches_onnxruntime(case, device):
    opset, attrs = AVGPOOL_CASES[case]
    _check_ort("AveragePool", {"X": _rand(2, 3, 7, 8)}, device, opset=opset, **attrs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("p", [1, 3])
def test_lp_pool_matches_onnxruntime(p, device):
    _check_ort("LpPool", {"X": _rand(1, 2, 7, 6)}, device, kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1],
               p=p, tol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_global_pools_on_1d_and_3d(device):
    for shape in [(2, 3, 7), (1, 2, 3, 4, 5)]:
        X = _rand(*shape)
        _check_ort("GlobalMaxPool", {"X": X}, device)
        _check_ort("GlobalAveragePool", {"X": X}, device)
        _check_ort("GlobalLpPool", {"X": X}, device, p=3, tol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_maxunpool_inverts_maxpool_indices(device):
    X = _rand(2, 3, 6, 4)
    Y, I = run_op("MaxPool", {"X": X}, device, outputs=2, kernel_shape=[2, 2], strides=[2, 2])
    out = run_op("MaxUnpool", {"X": Y, "I": I}, device, kernel_shape=[2, 2], strides=[2, 2])[0]
    want = np.zeros((2, 3, 6, 4), np.float32)  # the shape inferred from the attributes
    want.reshape(-1)[I.reshape(-1)] = Y.reshape(-1)
    np.testing.assert_array_equal(out, want)
    shape = np.array([2, 3, 7, 5], np.int64)  # output_shape pads the inferred tensor at the end
    out = run_op("MaxUnpool", {"X": Y, "I": I, "output_shape": shape}, device, kernel_shape=[2, 2], strides=[2, 2])[0]
    assert out.shape == (2, 3, 7, 5)
    np.testing.assert_array_equal(out[:, :, :6, :4], want)
    assert not out[:, :, 6:].any() and not out[:, :, :, 4:].any()


@pytest.mark.parametrize("device", DEVICES)
def test_max_roi_pool_matches_onnxruntime(device):
    rois = np.array([[0, 0, 0, 7, 5], [1, 2.4, 1.5, 6.6, 7.5], [1, -3, -2, 2, 1], [0, 6, 6, 3, 2],
                     [1, 8.2, 9, 20, 20]], np.float32)
    _check_ort("MaxRoiPool", {"X": _rand(2, 3, 8, 9), "rois": rois}, device, opset=16, pooled_shape=[3, 2],
               spatial_scale=0.75)


# -- normalization -----------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_batchnorm_inference_opsets(device):
    C = 4
    feeds = {"X": _rand(2, C, 3, 5), "scale": _rand(C), "B": _rand(C), "mean": _rand(C),
             "var": RNG.random(C).astype(np.float32) + 0.1}
    _check_ort("BatchNormalization", feeds, device, opset=9, epsilon=1e-3)
    _check_ort("BatchNormalization", {**feeds, "X": _rand(3, C)}, device, opset=15)
    per_act = {k: (_rand(C, 3, 5) if k != "var" else RNG.random((C, 3, 5)).astype(np.float32) + 0.1)
               for k in ("scale", "B", "mean", "var")}
    _check_ort("BatchNormalization", {"X": feeds["X"], **per_act}, device, opset=7, spatial=0)


def _bn_stats(X, mean, var, momentum):
    axes = (0,) + tuple(range(2, X.ndim))
    m, v = X.mean(axis=axes), X.var(axis=axes)
    return m, v, mean * momentum + m * (1 - momentum), var * momentum + v * (1 - momentum)


@pytest.mark.parametrize("device", DEVICES)
def test_batchnorm_training_outputs(device):
    C = 3
    X, s, b = _rand(4, C, 2, 3), _rand(C), _rand(C)
    mean, var = _rand(C), RNG.random(C).astype(np.float32)
    m, v, run_m, run_v = _bn_stats(X, mean, var, 0.8)
    y = (X - m.reshape(1, C, 1, 1)) / np.sqrt(v.reshape(1, C, 1, 1) + 1e-5) * s.reshape(1, C, 1, 1) + b.reshape(1, C, 1, 1)
    feeds = {"X": X, "scale": s, "B": b, "mean": mean, "var": var}
    got = run_op("BatchNormalization", feeds, device, outputs=3, opset=15, training_mode=1, momentum=0.8)
    for g, w in zip(got, [y, run_m, run_v]):
        assert_close(g, w.astype(np.float32), 1e-5, 1e-5)
    got = run_op("BatchNormalization", feeds, device, outputs=5, opset=9, momentum=0.8)
    for g, w in zip(got, [y, run_m, run_v, m, v]):
        assert_close(g, w.astype(np.float32), 1e-5, 1e-5)


def test_batchnorm_opset6_is_test_uses_the_estimates():
    C = 3
    X, s, b, mean, var = _rand(2, C, 4), _rand(C), _rand(C), _rand(C), RNG.random(C).astype(np.float32)
    feeds = {"X": X, "scale": s, "B": b, "mean": mean, "var": var}
    got = run_op("BatchNormalization", feeds, "cpu", outputs=5, opset=6, is_test=1, epsilon=1e-3)
    r = lambda a: a.reshape(1, C, 1)  # noqa: E731
    np.testing.assert_allclose(got[0], (X - r(mean)) / np.sqrt(r(var) + 1e-3) * r(s) + r(b), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[1], mean)


@pytest.mark.parametrize("device", DEVICES)
def test_instance_norm_1d_and_3d(device):
    for shape in [(2, 3, 7), (1, 2, 3, 4, 5)]:
        C = shape[1]
        _check_ort("InstanceNormalization", {"X": _rand(*shape), "s": _rand(C), "b": _rand(C)}, device, epsilon=1e-3)


@requires_ort("1.24", "its LayerNormalization refuses a bias whose shape differs from the scale's")
@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_half_input_with_float_stash(device):
    feeds = {"X": _rand(2, 3, 8, dtype=np.float16), "S": _rand(3, 8, dtype=np.float16), "B": _rand(8, dtype=np.float16)}
    got = _check_ort("LayerNormalization", feeds, device, outputs=3, opset=17, axis=1, tol=2e-3)
    assert [g.dtype for g in got] == [np.float16, np.float32, np.float32]
    assert got[1].shape == (2, 1, 1)


def test_layer_norm_double_input_keeps_double_statistics():
    X = (1 + 1e-4 * RNG.random((2, 6))).astype(np.float64)  # a tiny variance: float32 would lose it
    got = _check_ort("LayerNormalization", {"X": X, "S": np.ones(6)}, "cpu", outputs=3, opset=17, tol=1e-6)
    assert [g.dtype for g in got] == [np.float64, np.float32, np.float32]


@pytest.mark.parametrize("device", DEVICES)
def test_group_norm_scale_per_group_in_18_per_channel_in_21(device):
    X = _rand(2, 6, 3, 2)
    _check_ort("GroupNormalization", {"X": X, "s": _rand(3), "b": _rand(3)}, device, opset=18, num_groups=3,
               tol=1e-4)
    _check_ort("GroupNormalization", {"X": X, "s": _rand(6), "b": _rand(6)}, device, opset=21, num_groups=3,
               tol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_half_input(device):
    _check_ort("RMSNormalization", {"X": _rand(3, 4, 6, dtype=np.float16), "s": _rand(6, dtype=np.float16)},
               device, opset=23, tol=2e-3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("size", [3, 4])
def test_lrn_window(size, device):
    X = _rand(2, 6, 3, 2)
    got = run_op("LRN", {"X": X}, device, opset=13, size=size, alpha=0.02, beta=0.6, bias=1.5)[0]
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)  # floor / ceil of (size - 1) / 2
    sq = np.stack([(X[:, max(0, c - lo):min(6, c + hi + 1)] ** 2).sum(axis=1) for c in range(6)], axis=1)
    np.testing.assert_allclose(got, X / (1.5 + 0.02 / size * sq) ** 0.6, rtol=1e-5)
    if size % 2:  # onnxruntime takes odd sizes only
        _check_ort("LRN", {"X": X}, device, opset=13, size=size, alpha=0.02, beta=0.6, bias=1.5)


@pytest.mark.parametrize("device", DEVICES)
def test_mvn_axes(device):
    X = _rand(2, 3, 4, 5)
    got = run_op("MeanVarianceNormalization", {"X": X}, device, opset=13, axes=[1, 3])[0]
    d = X - X.mean(axis=(1, 3), keepdims=True)
    np.testing.assert_allclose(got, d / (np.sqrt((d * d).mean(axis=(1, 3), keepdims=True)) + 1e-9), rtol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization_zero_norm_gives_zero(p, device):
    X = _rand(3, 4)
    X[:, 1] = 0
    got = run_op("LpNormalization", {"X": X}, device, axis=0, p=p)[0]
    norm = np.abs(X).sum(axis=0) if p == 1 else np.sqrt((X * X).sum(axis=0))
    want = np.where(norm == 0, 0, X / np.where(norm == 0, 1, norm))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert not got[:, 1].any()


# -- Dropout -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_old_opsets_are_identity_with_typed_masks(device):
    X = _rand(3, 4)
    y, mask = run_op("Dropout", {"X": X}, device, outputs=2, opset=7, ratio=0.3)
    np.testing.assert_array_equal(y, X)
    assert mask.dtype == np.float32 and (mask == 1).all()
    y, mask = run_op("Dropout", {"X": X}, device, outputs=2, opset=10, ratio=0.3)
    assert mask.dtype == np.bool_ and mask.all()


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_training_with_seed_is_reproducible(device):
    X, r, t = _rand(4, 5), np.array(0.4, np.float32), np.array(True)
    y, mask = run_op("Dropout", {"X": X, "r": r, "t": t}, device, outputs=2, opset=13, seed=3)
    want_mask = np.random.RandomState(3).uniform(0, 1, X.shape) >= 0.4
    np.testing.assert_array_equal(mask, want_mask)
    np.testing.assert_allclose(y, X * want_mask / np.float32(0.6), rtol=1e-6)


def test_dropout_training_without_seed_scales_kept_values():
    X, r, t = np.ones((100, 100), np.float32), np.array(0.25, np.float32), np.array(True)
    y, mask = run_op("Dropout", {"X": X, "r": r, "t": t}, "cpu", outputs=2, opset=13)
    assert 0.65 < mask.mean() < 0.85
    np.testing.assert_allclose(y[mask], 1 / 0.75, rtol=1e-6)
    assert not y[~mask].any()
