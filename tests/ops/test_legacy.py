"""Early-ONNX forms (opsets 1-6: ``broadcast``/``axis``, ``consumed_inputs``, Cast's string ``to``) and
the custom ops of the modified operator subset (Relu6, Dense, DepthwiseConv2d, UpSampling2D, Add_),
checked against NumPy formulas (and onnxruntime's grouped Conv for DepthwiseConv2d)."""

import numpy as np
import pytest

from gpuops.errors import GpuopsError

from tests.ops.common import DEVICES, one_node_model, run_op, run_ort

RNG = np.random.default_rng(0)


def _run(op_type, feeds, opset, device="cpu", **attrs):
    """The output of one ``op_type`` node at ``opset``, run in gpuops."""
    return run_op(op_type, feeds, device, opset=opset, **attrs)[0]


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# -- (a) early forms -------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opset", [1, 6])
def test_binary_broadcast_axis(opset, device):
    a = _f32(2, 3, 4, 5)
    cases = [(_f32(3, 4), dict(axis=1), lambda b: b[None, :, :, None]),
             (_f32(2), dict(axis=0), lambda b: b[:, None, None, None]),
             (_f32(4, 5), {}, lambda b: b),  # suffix matching
             (_f32(1), {}, lambda b: b[0])]  # a size-1 B is a scalar
    for b, kw, align in cases:
        for op_type, fn in [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply), ("Div", np.divide)]:
            y = _run(op_type, {"a": a, "b": b}, opset, device, broadcast=1, **kw)
            np.testing.assert_allclose(y, fn(a, align(b)), rtol=1e-6)
    y = _run("Pow", {"a": np.abs(a), "b": cases[0][0]}, opset, device, broadcast=1, axis=1)
    np.testing.assert_allclose(y, np.abs(a) ** cases[0][0][None, :, :, None], rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_logic_and_comparison_broadcast(device):
    a = RNG.integers(-3, 3, (3, 4)).astype(np.int32)
    b = RNG.integers(-3, 3, (3,)).astype(np.int32)
    for op_type, fn in [("Equal", np.equal), ("Less", np.less), ("Greater", np.greater)]:
        y = _run(op_type, {"a": a, "b": b}, 1, device, broadcast=1, axis=0)
        np.testing.assert_array_equal(y, fn(a, b[:, None]))
    p, q = a > 0, b > 0
    for op_type, fn in [("And", np.logical_and), ("Or", np.logical_or), ("Xor", np.logical_xor)]:
        np.testing.assert_array_equal(_run(op_type, {"a": p, "b": q}, 1, device, broadcast=1, axis=0),
                                      fn(p, q[:, None]))


def test_binary_without_broadcast_needs_equal_shapes():
    with pytest.raises(GpuopsError, match="broadcast=1"):
        _run("Add", {"a": _f32(2, 3), "b": _f32(3)}, 6)
    with pytest.raises(GpuopsError, match="cannot be broadcast"):
        _run("Add", {"a": _f32(2, 3), "b": _f32(2)}, 6, broadcast=1)  # suffix (3,) does not match


@pytest.mark.parametrize("device", DEVICES)
def test_consumed_inputs_is_ignored(device):
    x = _f32(3, 4)
    unary = {"Relu": np.maximum(x, 0), "Abs": np.abs(x), "Neg": -x, "Exp": np.exp(x), "Tanh": np.tanh(x),
             "Floor": np.floor(x), "Ceil": np.ceil(x), "Sigmoid": 1 / (1 + np.exp(-x)), "Reciprocal": 1 / x}
    for op_type, want in unary.items():
        np.testing.assert_allclose(_run(op_type, {"x": x}, 1, device, consumed_inputs=[0]), want, rtol=1e-5)
    np.testing.assert_allclose(_run("Sqrt", {"x": np.abs(x)}, 1, device, consumed_inputs=[0]), np.sqrt(np.abs(x)))
    np.testing.assert_allclose(_run("LeakyRelu", {"x": x}, 1, device, consumed_inputs=[0], alpha=0.1),
                               np.where(x >= 0, x, 0.1 * x), rtol=1e-6)
    np.testing.assert_allclose(_run("Selu", {"x": x}, 1, device),
                               1.0507 * np.where(x > 0, x, 1.6732 * (np.exp(x) - 1)), rtol=1e-5)
    np.testing.assert_allclose(_run("Clip", {"x": x}, 1, device, consumed_inputs=[0], min=-0.5),
                               np.maximum(x, -0.5))
    y = _f32(3, 4)
    np.testing.assert_allclose(_run("Sum", {"x": x, "y": y}, 1, device, consumed_inputs=[0, 0]), x + y)
    np.testing.assert_allclose(_run("Max", {"x": x, "y": y}, 1, device), np.maximum(x, y))


@pytest.mark.parametrize("device", DEVICES)
def test_prelu_per_channel(device):
    x, slope = _f32(2, 3, 4, 4), _f32(3)
    y = _run("PRelu", {"x": x, "s": slope}, 6, device)
    np.testing.assert_allclose(y, np.where(x < 0, x * slope[:, None, None], x), rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_cast_to_is_a_type_name(device):
    x = np.array([[1, -2], [3, 70000]], np.int32)
    np.testing.assert_array_equal(_run("Cast", {"x": x}, 1, device, to="FLOAT"), x.astype(np.float32))
    np.testing.assert_array_equal(_run("Cast", {"x": x}, 1, device, to="int16"), x.astype(np.int16))


# -- (b) custom ops --------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_relu6_and_add_(device):
    x = _f32(4, 5) * 8
    np.testing.assert_array_equal(_run("Relu6", {"x": x}, 7, device), np.clip(x, 0, 6))
    b = _f32(5)
    np.testing.assert_array_equal(_run("Add_", {"a": x, "b": b}, 7, device), x + b)


@pytest.mark.parametrize("device", DEVICES)
def test_dense(device):
    x, w, b = _f32(2, 3, 4), _f32(4, 6), _f32(6)
    np.testing.assert_allclose(_run("Dense", {"x": x, "w": w, "b": b}, 7, device), x @ w + b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_run("Dense", {"x": x[0], "w": w}, 7, device), x[0] @ w, rtol=1e-5, atol=1e-6)
    with pytest.raises(GpuopsError, match="Dense"):
        _run("Dense", {"x": x, "w": w.T}, 7)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("attrs", [
    {},
    dict(strides=[2, 2], pads=[1, 0, 2, 1]),
    dict(dilations=[2, 1], pads=[1, 1, 1, 1]),
    dict(auto_pad="SAME_UPPER", strides=[2, 3]),
    dict(auto_pad="SAME_LOWER"),
    dict(auto_pad="VALID", strides=[1, 2]),
])
def test_depthwise_conv2d_matches_grouped_conv(attrs, device):
    C, mult = 3, 2
    x, w, b = _f32(2, C, 7, 8), _f32(C * mult, 1, 3, 2), _f32(C * mult)
    feeds = {"x": x, "w": w, "b": b}
    got = _run("DepthwiseConv2d", feeds, 7, device, **attrs)
    want = run_ort(one_node_model("Conv", feeds, opset=11, group=C, **attrs), feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_upsampling2d(device):
    x = _f32(1, 2, 3, 4)
    np.testing.assert_array_equal(_run("UpSampling2D", {"x": x}, 7, device, size=[2, 3]),
                                  x.repeat(2, axis=2).repeat(3, axis=3))
    np.testing.assert_array_equal(_run("UpSampling2D", {"x": x}, 7, device), x.repeat(2, axis=2).repeat(2, axis=3))
    y = _run("UpSampling2D", {"x": x}, 7, device, scales=[1.0, 1.0, 1.5, 2.0])
    rows = np.floor(np.arange(4) / 1.5).astype(int)  # floor(3 * 1.5) = 4 output rows
    np.testing.assert_array_equal(y, x[:, :, rows].repeat(2, axis=3))
