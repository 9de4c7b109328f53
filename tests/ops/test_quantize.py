"""Quantization ops against onnxruntime (and NumPy formulas where onnxruntime lacks a type)."""

import functools

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops

from tests.ops.common import assert_node_matches_ort, make_model, run_both, run_node
from tests.ort_versions import ort_older_than

RNG = np.random.default_rng(0)
_check = functools.partial(assert_node_matches_ort, atol=0)


@pytest.mark.parametrize("zp_dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_per_tensor_ties_and_saturation(zp_dtype):
    # halves (ties round to even) and values far outside the range (saturation)
    x = np.array([-1e6, -3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 7.49, 1e6, 0.0], dtype=np.float32)
    feeds = {"x": x, "s": np.array(1.0, np.float32), "z": np.array(3, zp_dtype)}
    _check(helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"]), feeds, opset=21)


def test_quantize_per_axis_and_dequantize_roundtrip():
    x = RNG.normal(size=(2, 3, 4)).astype(np.float32) * 10
    s = np.array([0.1, 0.2, 0.05], np.float32)
    z = np.array([0, 10, 250], np.uint8)
    (q,) = _check(helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1), {"x": x, "s": s, "z": z},
                  opset=13)
    _check(helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=-2), {"q": q, "s": s, "z": z},
           opset=13)


def test_quantize_no_zero_point_is_uint8():
    x = np.array([-1.0, 0.2, 300.0], np.float32)
    (got,) = _check(helper.make_node("QuantizeLinear", ["x", "s"], ["y"]), {"x": x, "s": np.array(0.5, np.float32)},
                    opset=10)
    assert got.dtype == np.uint8


@pytest.mark.parametrize("size", [6, 7])  # 7: a remainder block
def test_quantize_dequantize_blocked(size):
    x = RNG.normal(size=(3, size)).astype(np.float32) * 5
    s = RNG.uniform(0.05, 0.5, size=(3, -(-size // 3))).astype(np.float32)
    z = RNG.integers(-20, 20, size=s.shape).astype(np.int8)
    (q,) = _check(helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1, block_size=3),
                  {"x": x, "s": s, "z": z}, opset=21)
    _check(helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1, block_size=3),
           {"q": q, "s": s, "z": z}, opset=21)


def test_quantize_output_dtype_and_blocked_shape_error():
    x = RNG.normal(size=(2, 4)).astype(np.float32)
    s = np.full((2, 2), 0.1, np.float32)
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"], axis=1, block_size=2, output_dtype=TensorProto.INT16)
    _check(node, {"x": x, "s": s}, opset=21)
    bad = helper.make_node("QuantizeLinear", ["x", "s"], ["y"], axis=1, block_size=1)  # needs 4 scales
    with pytest.raises(gpuops.GpuopsError, match="blocked"):
        run_node(bad, {"x": x, "s": s}, opset=21)


@pytest.mark.parametrize("dtype,onnx_type", [(ml_dtypes.int4, TensorProto.INT4), (ml_dtypes.uint4, TensorProto.UINT4),
                                             (ml_dtypes.int2, TensorProto.INT2), (ml_dtypes.uint2, TensorProto.UINT2)])
def test_quantize_sub_byte_matches_formula(dtype, onnx_type):
    x = np.linspace(-20, 20, 33, dtype=np.float32)
    s = np.array(2.0, np.float32)
    (got,) = run_node(helper.make_node("QuantizeLinear", ["x", "s"], ["y"], output_dtype=onnx_type), {"x": x, "s": s},
                      opset=25)
    info = ml_dtypes.iinfo(dtype)
    want = np.clip(np.rint(x / s), info.min, info.max).astype(dtype)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got.astype(np.int32), want.astype(np.int32))
    (back,) = run_node(helper.make_node("DequantizeLinear", ["q", "s"], ["y"]), {"q": got, "s": s}, opset=25)
    np.testing.assert_array_equal(back, want.astype(np.float32) * 2.0)


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2])
def test_quantize_float8_saturate(saturate, dtype):
    x = np.array([0.0, 1.3, -2.7, 1e5, -1e5, np.inf, np.nan], np.float32)
    z = np.zeros((), dtype)
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], saturate=saturate)
    (got,) = run_node(node, {"x": x, "s": np.array(1.0, np.float32), "z": z}, opset=19)
    info = ml_dtypes.finfo(dtype)
    want = (np.clip(x, info.min, info.max) if saturate else x).astype(dtype)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


def test_quantize_precision_attribute():
    x = np.array([1000.3, -77.7], np.float32)
    s = np.array(3.0, np.float16)
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"], precision=TensorProto.FLOAT,
                            output_dtype=TensorProto.INT16)
    (got,) = run_node(node, {"x": x, "s": s}, opset=23)
    np.testing.assert_array_equal(got, np.rint(x / np.float32(3.0)).astype(np.int16))


@pytest.mark.parametrize("x", [RNG.normal(size=(3, 5)).astype(np.float32) * 4,
                               np.abs(RNG.normal(size=(7,))).astype(np.float32),
                               -np.abs(RNG.normal(size=(2, 2))).astype(np.float32),
                               np.zeros((4,), np.float32)])
def test_dynamic_quantize_linear(x):
    got, want = run_both(make_model(helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"]), {"x": x},
                                    opset=11), {"x": x})
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
    np.testing.assert_array_equal(got[2], want[2])
    # onnxruntime may round a tie the other way; allow a difference of one step
    assert got[0].dtype == np.uint8 and np.max(np.abs(got[0].astype(int) - want[0].astype(int))) <= 1


@pytest.mark.parametrize("b_dtype", [np.uint8, np.int8])
def test_matmul_integer_zero_points(b_dtype):
    a = RNG.integers(0, 256, size=(2, 3, 5)).astype(np.uint8)
    if b_dtype == np.uint8:  # uint8 weights sit around a zero point of 128
        b = RNG.integers(0, 256, size=(5, 4)).astype(np.uint8)
        bz = RNG.integers(100, 156, size=(4,)).astype(np.uint8)
    else:
        b = RNG.integers(-128, 128, size=(5, 4)).astype(np.int8)
        bz = RNG.integers(-5, 5, size=(4,)).astype(np.int8)
    feeds = {"a": a, "b": b, "az": np.array(128, np.uint8), "bz": bz}
    (got,) = _check(helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"]), feeds, opset=10)
    assert got.dtype == np.int32


def test_matmul_integer_per_row_zero_point_formula():
    a = RNG.integers(0, 256, size=(3, 4)).astype(np.uint8)
    b = RNG.integers(0, 256, size=(4, 2)).astype(np.uint8)
    az = np.array([1, 2, 3], np.uint8)
    (got,) = run_node(helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"]), {"a": a, "b": b, "az": az}, opset=10)
    np.testing.assert_array_equal(got, (a.astype(np.int32) - az[:, None]) @ b.astype(np.int32))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_matmul(dtype):
    lo, hi = (0, 256) if dtype == np.uint8 else (-128, 128)
    feeds = {"a": RNG.integers(lo, hi, size=(2, 3, 8)).astype(dtype), "as": np.array(0.02, np.float32),
             "az": np.array(128 if dtype == np.uint8 else 3, dtype),
             "b": RNG.integers(lo, hi, size=(8, 5)).astype(dtype), "bs": np.array(0.03, np.float32),
             "bz": np.array(120 if dtype == np.uint8 else -5, dtype), "ys": np.array(0.4, np.float32),
             "yz": np.array(128 if dtype == np.uint8 else 7, dtype)}
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    got, want = run_both(make_model(node, feeds, opset=10), feeds)
    assert got[0].dtype == want[0].dtype
    assert np.max(np.abs(got[0].astype(int) - want[0].astype(int))) <= 1  # float rounding of ties


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 1, 1, 1], "strides": [2, 2]},
                                   {"group": 2, "dilations": [2, 1]}, {"auto_pad": "SAME_UPPER", "strides": [2, 1]}])
def test_conv_integer(attrs):
    x = RNG.integers(0, 256, size=(2, 4, 7, 6)).astype(np.uint8)
    w = RNG.integers(0, 256, size=(6, 4 // attrs.get("group", 1), 3, 3)).astype(np.uint8)
    feeds = {"x": x, "w": w, "xz": np.array(128, np.uint8), "wz": np.array(100, np.uint8)}
    (got,) = _check(helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs), feeds, opset=10)
    assert got.dtype == np.int32


def test_conv_integer_per_channel_weight_zero_point_formula():
    x = RNG.integers(0, 256, size=(1, 2, 4, 4)).astype(np.uint8)
    w = RNG.integers(0, 256, size=(3, 2, 1, 1)).astype(np.uint8)
    wz = np.array([1, 50, 200], np.uint8)
    (got,) = run_node(helper.make_node("ConvInteger", ["x", "w", "", "wz"], ["y"]), {"x": x, "w": w, "wz": wz},
                      opset=10)
    want = np.einsum("nchw,mc->nmhw", x.astype(np.int32), (w[:, :, 0, 0].astype(np.int32) - wz[:, None]))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("w_dtype", [np.uint8, np.int8])
def test_qlinear_conv(per_channel, w_dtype):
    x = RNG.integers(0, 256, size=(1, 3, 6, 6)).astype(np.uint8)
    ws = RNG.uniform(0.001, 0.01, size=(4,)).astype(np.float32) if per_channel else np.array(0.004, np.float32)
    if w_dtype == np.uint8:  # nonzero weight zero points: 128 and around it
        w = RNG.integers(0, 256, size=(4, 3, 3, 3)).astype(np.uint8)
        wz = (np.array([128, 120, 135, 100], np.uint8) if per_channel else np.array(128, np.uint8))
    else:
        w = RNG.integers(-128, 128, size=(4, 3, 3, 3)).astype(np.int8)
        wz = np.array([0, 3, -2, 5], np.int8) if per_channel else np.array(-4, np.int8)
    if per_channel and ort_older_than("1.24"):  # 1.23 refuses per-channel zero points that differ ("must be same")
        wz[:] = wz[1]
    feeds = {"x": x, "xs": np.array(0.05, np.float32), "xz": np.array(120, np.uint8), "w": w, "ws": ws,
             "wz": wz, "ys": np.array(0.2, np.float32), "yz": np.array(60, np.uint8),
             "B": RNG.integers(-1000, 1000, size=(4,)).astype(np.int32)}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "B"], ["y"], pads=[1, 1, 1, 1])
    got, want = run_both(make_model(node, feeds, opset=10), feeds)
    assert got[0].dtype == np.uint8
    assert np.max(np.abs(got[0].astype(int) - want[0].astype(int))) <= 1


def test_qlinear_matmul_float8_formula():
    f8 = ml_dtypes.float8_e4m3fn
    a = RNG.normal(size=(3, 4)).astype(f8)
    b = RNG.normal(size=(4, 2)).astype(f8)
    feeds = {"a": a, "as": np.array(0.5, np.float32), "az": np.zeros((), f8), "b": b, "bs": np.array(2.0, np.float32),
             "bz": np.zeros((), f8), "ys": np.array(0.25, np.float32), "yz": np.zeros((), f8)}
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    (got,) = run_node(node, feeds, opset=21)
    y = (a.astype(np.float32) * 0.5) @ (b.astype(np.float32) * 2.0) / 0.25
    info = ml_dtypes.finfo(f8)
    np.testing.assert_array_equal(got.astype(np.float32), np.clip(y, info.min, info.max).astype(f8).astype(np.float32))
