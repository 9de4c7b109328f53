"""com.microsoft quantized ops against onnxruntime's CPU kernels (NumPy formulas where it has none).

Quantized outputs must match exactly: gpuops rounds where MLAS rounds (half to even, after adding
the output zero point in QLinearAdd / QLinearMul)."""

import numpy as np
import pytest

from ..ort_versions import ort_older_than
from .helpers import check, f32, ms_node, ort_has_kernel, q8, rand, randint

U8, I8 = np.uint8, np.int8



def zp(dtype, v):
    return np.array(v, dtype)


def _weight_zero_points(dtype, n=None):
    """Nonzero weight zero points: around 128 for uint8 (what the quantizers write), small for int8;
    one per column when ``n`` is given, else a scalar."""
    if n is None:
        return zp(dtype, 128 if dtype == U8 else -3)
    return (randint(100, 156, n) if dtype == U8 else randint(-8, 8, n)).astype(dtype)


@pytest.mark.parametrize("op_type", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", [U8, I8])
@pytest.mark.parametrize("b_shape", [(2, 3, 4), (4,)])
def test_qlinear_binary(op_type, dtype, b_shape):
    feeds = {"a": q8(dtype, 2, 3, 4), "sa": f32(0.05), "za": zp(dtype, 10), "b": q8(dtype, *b_shape),
             "sb": f32(0.02), "zb": zp(dtype, -5 if dtype == I8 else 130),
             "sc": f32(0.07 if op_type == "QLinearAdd" else 0.9), "zc": zp(dtype, 3)}
    check(ms_node(op_type, list(feeds), ["c"]), feeds)


def test_mul_integer_formula():
    feeds = {"a": q8(U8, 3, 4), "za": zp(U8, 100), "b": q8(U8, 4), "zb": zp(U8, 7)}
    node = ms_node("MulInteger", list(feeds), ["c"])
    assert not ort_has_kernel(node, feeds)
    check(node, feeds, ref=lambda a, za, b, zb: [(a.astype(np.int32) - 100) * (b.astype(np.int32) - 7)])


@pytest.mark.parametrize("op_type,attrs", [("QLinearLeakyRelu", {"alpha": 0.1}), ("QLinearSigmoid", {})])
@pytest.mark.parametrize("dtype", [U8, I8])
def test_qlinear_lookup(op_type, attrs, dtype):
    sigmoid = op_type == "QLinearSigmoid"
    feeds = {"x": q8(dtype, 4, 64), "sx": f32(0.08), "zx": zp(dtype, 12), "sy": f32(0.01 if sigmoid else 0.05),
             "zy": zp(dtype, 0 if sigmoid else 40)}
    check(ms_node(op_type, list(feeds), ["y"], **attrs), feeds)


def test_qlinear_concat():
    feeds = {"sy": f32(0.1), "zy": zp(U8, 128),
             "a": q8(U8, 2, 3), "sa": f32(0.1), "za": zp(U8, 128),  # same parameters as y: a copy
             "b": q8(U8, 2, 2), "sb": f32(0.05), "zb": zp(U8, 100),
             "c": q8(U8, 2, 4), "sc": f32(0.3), "zc": zp(U8, 0)}
    check(ms_node("QLinearConcat", list(feeds), ["y"], axis=1), feeds)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2], "ceil_mode": 1, "count_include_pad": 1},
    {"kernel_shape": [2, 3], "channels_last": 1},
])
@pytest.mark.parametrize("dtype", [U8, I8])
def test_qlinear_average_pool(attrs, dtype):
    feeds = {"x": q8(dtype, 2, 3, 6, 7), "sx": f32(0.1), "zx": zp(dtype, 5), "sy": f32(0.07), "zy": zp(dtype, 2)}
    check(ms_node("QLinearAveragePool", list(feeds), ["y"], **attrs), feeds)


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("seed", range(3))
def test_qlinear_global_average_pool(channels_last, seed):
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.integers(0, 256, (2, 5, 4, 3)).astype(U8), "sx": f32(0.1), "zx": zp(U8, 120),
             "sy": f32(0.05), "zy": zp(U8, 128)}
    check(ms_node("QLinearGlobalAveragePool", list(feeds), ["y"], channels_last=channels_last), feeds)


@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([0, 2], 0), ([-1], 1)])
def test_qlinear_reduce_mean_formula(axes, keepdims):
    feeds = {"x": q8(I8, 3, 4, 5), "sx": f32(0.1), "zx": zp(I8, -3), "sy": f32(0.02), "zy": zp(I8, 1)}
    node = ms_node("QLinearReduceMean", list(feeds), ["y"], axes=axes, keepdims=keepdims)
    assert not ort_has_kernel(node, feeds)

    def ref(x, sx, zx, sy, zy):
        mean = ((x.astype(np.float32) - zx) * sx).mean(axis=tuple(axes), keepdims=bool(keepdims))
        return [np.clip(np.rint(mean / sy) + zy, -128, 127).astype(I8)]
    check(node, feeds, ref=ref)


@pytest.mark.parametrize("dtype", [U8, I8])
def test_reduce_sum_integer_formula(dtype):
    x = q8(dtype, 3, 4, 5)
    node = ms_node("ReduceSumInteger", ["x"], ["y"], axes=[1, 2], keepdims=0)
    assert not ort_has_kernel(node, {"x": x})
    out = np.uint32 if dtype == U8 else np.int32
    check(node, {"x": x}, ref=lambda x: [x.astype(np.int64).sum(axis=(1, 2)).astype(out)])


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("w_t", [U8, I8])
def test_qlinear_conv(channels_last, w_t):
    x = q8(U8, 1, 4, 5, 5)
    if channels_last:
        x = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    # per-channel weight zero points, none of them 0 for uint8 weights (128 is the usual one)
    zw = np.array([128, 120, 130, 100, 140, 128], U8) if w_t == U8 else np.array([0, 3, -2, 0, 1, 5], I8)
    if ort_older_than("1.24"):  # 1.23 refuses per-channel zero points that differ ("must be same")
        zw[:] = zw[1]
    feeds = {"x": x, "sx": f32(0.02), "zx": zp(U8, 120), "w": q8(w_t, 6, 2, 3, 3),
             "sw": np.abs(rand(6)) * 0.01 + 0.005, "zw": zw, "sy": f32(0.1), "zy": zp(U8, 128),
             "b": randint(-500, 500, 6)}
    check(ms_node("QLinearConv", list(feeds), ["y"], group=2, pads=[1, 1, 1, 1], channels_last=channels_last), feeds)


@pytest.mark.parametrize("dtype,axis", [(U8, None), (I8, None), (U8, 1), (I8, 0)])
def test_quantize_dequantize_linear(dtype, axis):
    x = rand(3, 4, scale=3)
    attrs = {} if axis is None else {"axis": axis}
    n = 1 if axis is None else x.shape[axis]
    s = (np.abs(rand(n)) * 0.05 + 0.01).reshape(() if axis is None else (n,))
    z = (q8(dtype, n) // 4).reshape(s.shape)
    q = check(ms_node("QuantizeLinear", ["x", "s", "z"], ["y"], **attrs), {"x": x, "s": s, "z": z})[0]
    check(ms_node("DequantizeLinear", ["q", "s", "z"], ["y"], **attrs), {"q": q, "s": s, "z": z})


def test_matmul_integer16():
    for a_t, b_t in [(np.int16, np.int16), (np.uint16, np.uint16), (np.int16, np.uint16)]:
        a = randint(0 if a_t == np.uint16 else -30000, 30000, 3, 5, dtype=a_t)
        b = randint(0 if b_t == np.uint16 else -30000, 30000, 5, 2, dtype=b_t)
        node = ms_node("MatMulInteger16", ["a", "b"], ["y"])
        if ort_has_kernel(node, {"a": a, "b": b}):
            check(node, {"a": a, "b": b})
        else:  # onnxruntime registers int16 x int16 only: the spec's wrapping int32 / uint32 sums
            out = np.uint32 if a_t == b_t == np.uint16 else np.int32
            check(node, {"a": a, "b": b},
                  ref=lambda a, b: [(a.astype(np.int64) @ b.astype(np.int64)).astype(np.uint32).astype(out)])


@pytest.mark.parametrize("a_t,b_t", [(U8, I8), (U8, U8), (I8, I8)])
@pytest.mark.parametrize("per_column", [False, True])
def test_matmul_integer_to_float(a_t, b_t, per_column):
    N = 6
    feeds = {"a": q8(a_t, 2, 3, 5), "b": q8(b_t, 5, N), "sa": f32(0.02),
             "sb": np.abs(rand(N)) * 0.01 + 0.001 if per_column else f32(0.03),
             "za": zp(a_t, 7), "zb": _weight_zero_points(b_t, N if per_column else None), "bias": rand(N)}
    check(ms_node("MatMulIntegerToFloat", list(feeds), ["y"]), feeds, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("b_t", [U8, I8])
@pytest.mark.parametrize("with_zp,with_bias", [(False, False), (True, True)])
def test_dynamic_quantize_matmul(b_t, with_zp, with_bias):
    N = 4
    feeds = {"a": rand(3, 6), "b": q8(b_t, 6, N), "sb": np.abs(rand(N)) * 0.02 + 0.001}
    inputs = ["a", "b", "sb"]
    if with_zp:
        feeds["zb"] = _weight_zero_points(b_t, N)
        inputs.append("zb")
    if with_bias:
        feeds["bias"] = rand(N)
        inputs.append("bias")
    check(ms_node("DynamicQuantizeMatMul", inputs, ["y"]), feeds, rtol=1e-4, atol=1e-4)


def _lstm_activation_rounding_bound(feeds):
    """How far onnxruntime's DynamicQuantizeLSTM may be from an LSTM on the dequantized weights.

    onnxruntime quantizes X (and each step's H) to uint8 with a dynamic scale over its range
    including 0: each element moves by at most half a step, dx / 2 (X) and dh / 2 (H, within
    [-1, 1], so dh <= 2 / 255). A gate's pre-activation moves by at most
    sum_k |W[k]| dx / 2 + sum_k |R[k]| dh / 2 (a row of the dequantized weights); sigmoid and tanh
    have slopes <= 1, so each of the T steps adds at most that much to the state and the outputs."""
    D = feeds["w"].shape[0]

    def dequant(w, s, z):
        shape = (D, 1, 1) if s.size == D else (D, 1, w.shape[2])
        return (w.astype(np.float64) - z.reshape(shape)) * s.reshape(shape)

    x = feeds["x"]
    dx = (max(x.max(), 0) - min(x.min(), 0)) / 255
    w_row = np.abs(dequant(feeds["w"], feeds["ws"], feeds["wz"])).sum(axis=1).max()
    r_row = np.abs(dequant(feeds["r"], feeds["rs"], feeds["rz"])).sum(axis=1).max()
    return x.shape[0] * (w_row * dx / 2 + r_row * (2 / 255) / 2)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("w_t", [U8, I8])
def test_dynamic_quantize_lstm(direction, per_channel, w_t):
    T, B, I, H = 3, 2, 4, 3
    D = 2 if direction == "bidirectional" else 1
    shape = (D, 4 * H) if per_channel else (D,)
    # onnxruntime wants one zero point for all of W (and of R), and 0 for per-channel int8 weights
    z = 128 if w_t == U8 else (0 if per_channel else -5)
    feeds = {"x": rand(T, B, I), "w": q8(w_t, D, I, 4 * H), "r": q8(w_t, D, H, 4 * H), "b": rand(D, 8 * H, scale=0.1),
             "lens": np.array([3, 2], np.int32), "h0": rand(D, B, H), "c0": rand(D, B, H),
             "p": rand(D, 3 * H, scale=0.1),
             "ws": (np.abs(rand(*shape)) * 0.005 + 0.002), "wz": np.full(shape, z, w_t),
             "rs": (np.abs(rand(*shape)) * 0.005 + 0.002), "rz": np.full(shape, z, w_t)}
    # gpuops runs the float LSTM on the dequantized weights; onnxruntime also quantizes X and H at
    # every step: agreement to that rounding (measured: at most 0.16 of the bound over 240 cases;
    # a weight zero point with its sign flipped moves the outputs by 3 to 40 times the bound)
    check(ms_node("DynamicQuantizeLSTM", list(feeds), ["y", "yh", "yc"], direction=direction, hidden_size=H), feeds,
          rtol=0, atol=_lstm_activation_rounding_bound(feeds))
