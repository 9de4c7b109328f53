"""Elementwise, activation and cast behaviour the onnx node cases leave out: mixed-dtype errors,
broadcasting with empty dimensions, C-style integer division, erf accuracy over its whole range,
string casts and the version-dependent float8 rules. Checked against onnxruntime or NumPy formulas."""

import math

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import gpuops
from gpuops.errors import GpuopsError

from tests.conformance.harness import assert_close, device_guard

DEVICES = ["cpu", "cuda"]  # "cuda" is the CPU stand-in without a GPU: it proves no implicit transfers


def _model(op_type, inputs, n_out=1, opset=18, **attrs):
    """One-node model; ``inputs`` maps names to example arrays (their dtype fixes the input type)."""
    names = list(inputs)
    node = helper.make_node(op_type, names, [f"y{i}" for i in range(n_out)], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), None) for n, v in inputs.items()],
        [helper.make_empty_tensor_value_info(f"y{i}") for i in range(n_out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return onnx.shape_inference.infer_shapes(model)  # output types, for onnxruntime


def _run(model, feeds, device="cpu"):
    sess = gpuops.InferenceSession(model, device=device)
    with device_guard(device):
        return sess.run(None, feeds)


def _check_ort(op_type, feeds, device, opset=18, **attrs):
    model = _model(op_type, feeds, opset=opset, **attrs)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = _run(model, feeds, device)
    for g, w in zip(got, want):
        assert_close(g, w, 1e-6, 1e-6)
    return got


@pytest.mark.parametrize("op_type", ["Add", "Div", "Equal", "Max", "Mod"])
def test_mixed_dtypes_are_rejected(op_type):
    feeds = {"a": np.ones(3, np.float32), "b": np.ones(3, np.float64)}
    with pytest.raises(GpuopsError, match="one element type"):
        _run(_model(op_type, feeds), feeds)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shapes", [((3, 0), (1,)), ((0, 4), (4,)), ((2, 1, 0), (3, 1)), ((0,), ())])
def test_broadcast_with_empty_dims(shapes, device):
    a, b = (np.ones(s, np.float32) for s in shapes)
    (y,) = _check_ort("Mul", {"a": a, "b": b}, device)
    assert y.shape == np.broadcast_shapes(*shapes)


def test_broadcast_mismatch_is_an_error():
    feeds = {"a": np.ones((2, 3), np.float32), "b": np.ones((0,), np.float32)}
    with pytest.raises(GpuopsError):
        _run(_model("Add", feeds), feeds)


@pytest.mark.parametrize("device", DEVICES)
def test_variadic_broadcast(device):
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal((2, 1, 3)).astype(np.float32),
             "b": rng.standard_normal((4, 1)).astype(np.float32), "c": rng.standard_normal(3).astype(np.float32)}
    for op_type in ("Sum", "Mean", "Max", "Min"):
        _check_ort(op_type, feeds, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_integer_div_and_mod_signs(dtype, device):
    a = np.array([7, -7, 7, -7, 6, -6, 0, 1], dtype)
    b = np.array([2, 2, -2, -2, 3, -4, 5, -3], dtype)
    (q,) = _check_ort("Div", {"a": a, "b": b}, device)
    np.testing.assert_array_equal(q, np.trunc(a / b).astype(dtype))  # toward zero, like C
    (r,) = _check_ort("Mod", {"a": a, "b": b}, device)
    np.testing.assert_array_equal(np.sign(r[r != 0]), np.sign(b[r != 0]))  # the divisor's sign
    (f,) = _check_ort("Mod", {"a": a, "b": b}, device, fmod=1)
    np.testing.assert_array_equal(f, np.fmod(a, b))


@pytest.mark.parametrize("device", DEVICES)
def test_pow_keeps_base_dtype(device):
    x = np.array([2, -1, 3, 1, -2], np.int32)
    y = np.array([-1, -3, 2, -2, 3], np.int64)
    (z,) = _run(_model("Pow", {"x": x, "y": y}), {"x": x, "y": y}, device)
    assert z.dtype == np.int32
    np.testing.assert_array_equal(z, np.trunc(np.power(x.astype(float), y)).astype(np.int32))
    xf = np.array([1.5, 2.0], np.float16)
    (zf,) = _run(_model("Pow", {"x": xf, "y": y[:2]}), {"x": xf, "y": y[:2]}, device)
    assert zf.dtype == np.float16


@pytest.mark.parametrize("dtype, tol", [(np.float64, 2e-15), (np.float32, 1e-6)])
def test_erf_accuracy(dtype, tol):
    x = np.concatenate([np.linspace(-7, 7, 20001), [0.0, -0.0, 1e-30, -1e-300, 2.5, np.inf, -np.inf]]).astype(dtype)
    (y,) = _run(_model("Erf", {"x": x}), {"x": x})
    want = np.array([math.erf(v) for v in x.astype(np.float64)])
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=tol, atol=0)
    (n,) = _run(_model("Erf", {"x": x}), {"x": np.array([np.nan], dtype)})
    assert np.isnan(n).all()


@pytest.mark.parametrize("device", DEVICES)
def test_clip_bounds(device):
    x = np.array([-60000, -2, 0.5, 3, np.inf, np.nan], np.float16)
    (y,) = _run(_model("Clip", {"x": x}, opset=6), {"x": x}, device)  # defaults: +-FLT_MAX, wider than float16
    np.testing.assert_array_equal(y, x)
    hi = np.array(1, np.float16)
    model = _model("Clip", {"x": x, "": hi, "hi": hi}, opset=13)  # min omitted
    model.graph.input.pop(1)
    (y,) = _run(model, {"x": x, "hi": hi}, device)
    np.testing.assert_array_equal(y, np.minimum(x, hi))


def test_cast_strings():
    s = np.array(["1.5", "+INF", "-inf", "NaN", "1e-5", "-100.5"], dtype=object)
    (f,) = _run(_model("Cast", {"s": s}, to=TensorProto.FLOAT), {"s": s})
    np.testing.assert_array_equal(f, np.array([1.5, np.inf, -np.inf, np.nan, 1e-5, -100.5], np.float32))
    i = np.array(["7", "-12", "100.5", "9007199254740993"], dtype=object)
    (n,) = _run(_model("Cast", {"i": i}, to=TensorProto.INT64), {"i": i})
    np.testing.assert_array_equal(n, [7, -12, 100, 9007199254740993])
    x = np.array([0.1, -2.5, np.nan, np.inf], np.float32)
    (t,) = _run(_model("Cast", {"x": x}, to=TensorProto.STRING), {"x": x})
    assert list(t) == ["0.1", "-2.5", "nan", "inf"]


@pytest.mark.parametrize("device", DEVICES)
def test_cast_float8_inf_by_version(device):
    x = np.array([np.inf, -np.inf, 1e6, np.nan], np.float32)
    for opset, fnuz_inf in ((19, np.nan), (24, 240.0)):
        (y,) = _run(_model("Cast", {"x": x}, opset=opset, to=TensorProto.FLOAT8E4M3FNUZ), {"x": x}, device)
        assert y.dtype == ml_dtypes.float8_e4m3fnuz
        np.testing.assert_array_equal(y.astype(np.float32)[[0, 2, 3]], [fnuz_inf, 240.0, np.nan])
    (y,) = _run(_model("Cast", {"x": x}, opset=24, to=TensorProto.FLOAT8E5M2, saturate=0), {"x": x}, device)
    np.testing.assert_array_equal(y.astype(np.float32), [np.inf, -np.inf, np.inf, np.nan])


@pytest.mark.parametrize("mode, want", [("up", [1, 2, 4, 4, 0.5]), ("down", [1, 1, 2, 4, 0.25]),
                                        ("nearest", [1, 2, 2, 4, 0.25])])
def test_cast_e8m0_round_modes(mode, want):
    x = np.array([1.0, 1.5, 2.8, 4.0, 0.3], np.float32)  # 1.5 = 1.5 * 2^0 is a tie: nearest goes up
    (y,) = _run(_model("Cast", {"x": x}, opset=24, to=TensorProto.FLOAT8E8M0, round_mode=mode), {"x": x})
    np.testing.assert_array_equal(y.astype(np.float32), want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_type", ["Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "Softplus", "Gelu", "Elu"])
def test_activations_keep_float16(op_type, device):
    x = np.linspace(-30, 30, 25).astype(np.float16)
    (y,) = _run(_model(op_type, {"x": x}, opset=20), {"x": x}, device)
    assert y.dtype == np.float16 and np.isfinite(y).all()
