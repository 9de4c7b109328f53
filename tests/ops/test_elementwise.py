"""Elementwise, activation and cast behaviour the onnx node cases leave out: mixed-dtype errors,
broadcasting with empty dimensions, C-style integer division, erf accuracy over its whole range,
string casts and the version-dependent float8 rules. Checked against onnxruntime or NumPy formulas."""

import math

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

from gpuops.errors import GpuopsError

from tests.ops.common import DEVICES, assert_op_matches_ort, one_node_model, run_gpuops, run_op


@pytest.mark.parametrize("op_type", ["Add", "Div", "Equal", "Max", "Mod"])
def test_mixed_dtypes_are_rejected(op_type):
    feeds = {"a": np.ones(3, np.float32), "b": np.ones(3, np.float64)}
    with pytest.raises(GpuopsError, match="one element type"):
        run_op(op_type, feeds)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shapes", [((3, 0), (1,)), ((0, 4), (4,)), ((2, 1, 0), (3, 1)), ((0,), ())])
def test_broadcast_with_empty_dims(shapes, device):
    a, b = (np.ones(s, np.float32) for s in shapes)
    (y,) = assert_op_matches_ort("Mul", {"a": a, "b": b}, device)
    assert y.shape == np.broadcast_shapes(*shapes)


def test_broadcast_mismatch_is_an_error():
    feeds = {"a": np.ones((2, 3), np.float32), "b": np.ones((0,), np.float32)}
    with pytest.raises(GpuopsError):
        run_op("Add", feeds)


@pytest.mark.parametrize("device", DEVICES)
def test_variadic_broadcast(device):
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal((2, 1, 3)).astype(np.float32),
             "b": rng.standard_normal((4, 1)).astype(np.float32), "c": rng.standard_normal(3).astype(np.float32)}
    for op_type in ("Sum", "Mean", "Max", "Min"):
        assert_op_matches_ort(op_type, feeds, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_integer_div_and_mod_signs(dtype, device):
    a = np.array([7, -7, 7, -7, 6, -6, 0, 1], dtype)
    b = np.array([2, 2, -2, -2, 3, -4, 5, -3], dtype)
    (q,) = assert_op_matches_ort("Div", {"a": a, "b": b}, device)
    np.testing.assert_array_equal(q, np.trunc(a / b).astype(dtype))  # toward zero, like C
    (r,) = assert_op_matches_ort("Mod", {"a": a, "b": b}, device)
    np.testing.assert_array_equal(np.sign(r[r != 0]), np.sign(b[r != 0]))  # the divisor's sign
    (f,) = assert_op_matches_ort("Mod", {"a": a, "b": b}, device, fmod=1)
    np.testing.assert_array_equal(f, np.fmod(a, b))


@pytest.mark.parametrize("device", DEVICES)
def test_pow_keeps_base_dtype(device):
    x = np.array([2, -1, 3, 1, -2], np.int32)
    y = np.array([-1, -3, 2, -2, 3], np.int64)
    (z,) = run_op("Pow", {"x": x, "y": y}, device)
    assert z.dtype == np.int32
    np.testing.assert_array_equal(z, np.trunc(np.power(x.astype(float), y)).astype(np.int32))
    xf = np.array([1.5, 2.0], np.float16)
    (zf,) = run_op("Pow", {"x": xf, "y": y[:2]}, device)
    assert zf.dtype == np.float16


@pytest.mark.parametrize("dtype, tol", [(np.float64, 2e-15), (np.float32, 1e-6)])
def test_erf_accuracy(dtype, tol):
    x = np.concatenate([np.linspace(-7, 7, 20001), [0.0, -0.0, 1e-30, -1e-300, 2.5, np.inf, -np.inf]]).astype(dtype)
    (y,) = run_op("Erf", {"x": x})
    want = np.array([math.erf(v) for v in x.astype(np.float64)])
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=tol, atol=0)
    (n,) = run_op("Erf", {"x": np.array([np.nan], dtype)})
    assert np.isnan(n).all()


@pytest.mark.parametrize("device", DEVICES)
def test_clip_bounds(device):
    x = np.array([-60000, -2, 0.5, 3, np.inf, np.nan], np.float16)
    (y,) = run_op("Clip", {"x": x}, device, opset=6)  # defaults: +-FLT_MAX, wider than float16
    np.testing.assert_array_equal(y, x)
    hi = np.array(1, np.float16)
    model = one_node_model("Clip", {"x": x, "": hi, "hi": hi}, opset=13)  # min omitted
    model.graph.input.pop(1)
    (y,) = run_gpuops(model, {"x": x, "hi": hi}, device)
    np.testing.assert_array_equal(y, np.minimum(x, hi))


def test_cast_strings():
    s = np.array(["1.5", "+INF", "-inf", "NaN", "1e-5", "-100.5"], dtype=object)
    (f,) = run_op("Cast", {"s": s}, to=TensorProto.FLOAT)
    np.testing.assert_array_equal(f, np.array([1.5, np.inf, -np.inf, np.nan, 1e-5, -100.5], np.float32))
    i = np.array(["7", "-12", "100.5", "9007199254740993"], dtype=object)
    (n,) = run_op("Cast", {"i": i}, to=TensorProto.INT64)
    np.testing.assert_array_equal(n, [7, -12, 100, 9007199254740993])
    x = np.array([0.1, -2.5, np.nan, np.inf], np.float32)
    (t,) = run_op("Cast", {"x": x}, to=TensorProto.STRING)
    assert list(t) == ["0.1", "-2.5", "nan", "inf"]


@pytest.mark.parametrize("device", DEVICES)
def test_cast_float8_inf_by_version(device):
    x = np.array([np.inf, -np.inf, 1e6, np.nan], np.float32)
    for opset, fnuz_inf in ((19, np.nan), (24, 240.0)):
        (y,) = run_op("Cast", {"x": x}, device, opset=opset, to=TensorProto.FLOAT8E4M3FNUZ)
        assert y.dtype == ml_dtypes.float8_e4m3fnuz
        np.testing.assert_array_equal(y.astype(np.float32)[[0, 2, 3]], [fnuz_inf, 240.0, np.nan])
    (y,) = run_op("Cast", {"x": x}, device, opset=24, to=TensorProto.FLOAT8E5M2, saturate=0)
    np.testing.assert_array_equal(y.astype(np.float32), [np.inf, -np.inf, np.inf, np.nan])


@pytest.mark.parametrize("mode, want", [("up", [1, 2, 4, 4, 0.5]), ("down", [1, 1, 2, 4, 0.25]),
                                        ("nearest", [1, 2, 2, 4, 0.25])])
def test_cast_e8m0_round_modes(mode, want):
    x = np.array([1.0, 1.5, 2.8, 4.0, 0.3], np.float32)  # 1.5 = 1.5 * 2^0 is a tie: nearest goes up
    (y,) = run_op("Cast", {"x": x}, opset=24, to=TensorProto.FLOAT8E8M0, round_mode=mode)
    np.testing.assert_array_equal(y.astype(np.float32), want)


def _gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


# The formula in float64 of each activation at its default attributes, and the magnitude of the
# largest intermediate value a float16 evaluation rounds: the result itself, but for Gelu, whose
# 1 + erf(x / sqrt(2)) cancels for x < 0 (|x| times a value up to 2, halved).
FLOAT16_ACTIVATIONS = {
    "Relu": (lambda x: np.maximum(x, 0), None),
    "LeakyRelu": (lambda x: np.where(x >= 0, x, 0.01 * x), None),
    "Sigmoid": (lambda x: 1 / (1 + np.exp(-x)), None),
    "HardSigmoid": (lambda x: np.clip(0.2 * x + 0.5, 0, 1), None),
    "Softplus": (lambda x: np.log1p(np.exp(x)), None),
    "Gelu": (_gelu, np.abs),
    "Elu": (lambda x: np.where(x > 0, x, np.expm1(x)), None),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_type", sorted(FLOAT16_ACTIVATIONS))
def test_activations_keep_float16(op_type, device):
    x = np.linspace(-30, 30, 25).astype(np.float16)
    (y,) = run_op(op_type, {"x": x}, device, opset=20)
    assert y.dtype == np.float16 and np.isfinite(y).all()
    formula, intermediate = FLOAT16_ACTIVATIONS[op_type]
    want = formula(x.astype(np.float64))
    # float16 evaluation: at most 3 roundings of u = 2**-11 relative to the largest intermediate
    # value, plus the smallest float16 subnormal (2**-24) for results that flush to zero
    scale = np.abs(want) if intermediate is None else np.maximum(np.abs(want), intermediate(x.astype(np.float64)))
    tol = 3 * 2.0**-11 * scale + 2.0**-24
    err = np.abs(y.astype(np.float64) - want)
    assert (err <= tol).all(), f"{op_type}: x={x[err > tol]} got {y[err > tol]} want {want[err > tol]}"
