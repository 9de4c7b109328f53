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
    want = run_ort(make_model(conv, nchw), nchw)[0].transpose(0, 2, 3, 1)
    check(node, feeds, ref=lambda **_: [want], atol=1e-5)


# -- quantized ----------------------------------------------------------------------------------

@pytest.mark.parametrize("a_type,b_type", [(U8, U8), (U8, I8), (I8, I8)])
@pytest.mark.parametrize("output", ["float", "quantized"])
@pytest.mark.parametrize("per_column", [False, True])
def test_qgemm(a_type, b_type, output, per_column):
    M, K, N = 3, 10, 5
    feeds = {"a": q8(a_type, M, K), "sa": f32(0.04), "za": np.array(7 if a_type == U8 else -3, a_type),
             "b": q8(b_type, N, K), "sb": (rand(N) ** 2 * 0.01 + 0.001) if per_column else f32(0.02),
             "zb": (q8(b_type, N) if per_column else np.array(1, b_type)), "c": randint(-500, 500, N)}
    if output == "quantized":
        feeds |= {"sy": f32(1.5), "zy": np.array(120 if a_type == U8 else 5, a_type)}
    node = ms_node("QGemm", list(feeds), ["y"], transB=1, alpha=0.75)
    check(node, feeds, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [U8, I8])
@pytest.mark.parametrize("opset,axis,shape", [(13, -1, (3, 7)), (13, 1, (2, 4, 5)), (12, 1, (2, 3, 4))])
def test_qlinear_softmax(dtype, opset, axis, shape):
    zy = 0 if dtype == U8 else -128
    feeds = {"x": q8(dtype, *shape), "sx": f32(0.07), "zx": np.array(3, dtype), "sy": f32(1 / 256),
             "zy": np.array(zy, dtype)}
    check(ms_node("QLinearSoftmax", list(feeds), ["y"], opset=opset, axis=axis), feeds)


@pytest.mark.parametrize("dtype", [U8, I8])
def test_qlinear_where(dtype):
    feeds = {"c": bools(3, 4), "x": q8(dtype, 3, 4), "sx": f32(0.05), "zx": np.array(2, dtype),
             "y": q8(dtype, 4), "sy": f32(0.1), "zy": np.array(-1 if dtype == I8 else 100, dtype),
             "sz": f32(0.08), "zz": np.array(10, dtype)}
    check(ms_node("QLinearWhere", list(feeds), ["z"]), feeds)


def test_qembed_layer_normalization():
    B, S, V, P, D = 2, 5, 20, 8, 16
    mask = np.ones((B, S), np.int32)
    mask[1, 3:] = 0
    feeds = {"ids": randint(0, V, B, S), "seg": randint(0, 2, B, S), "we": q8(U8, V, D), "pe": q8(U8, P, D),
             "se": q8(U8, 2, D), "g": q8(U8, D), "b": q8(U8, D), "mask": mask,
             "wes": f32(0.01), "pes": f32(0.02), "ses": f32(0.015), "gs": f32(0.008), "bs": f32(0.004),
             "wez": np.array(128, U8), "pez": np.array(120, U8), "sez": np.array(130, U8), "gz": np.array(0, U8),
             "bz": np.array(127, U8)}
    node = ms_node("QEmbedLayerNormalization", list(feeds), ["y", "mask_index"], epsilon=1e-12)
    check(node, feeds, rtol=1e-4, atol=1e-4)


def _pack_nbits(q, bits):
    """(rows, n) values -> (rows, n * bits / 8) bytes, low bits first."""
    per = 8 // bits
    q = q.reshape(q.shape[0], -1, per).astype(np.uint8)
    return sum((q[..., i] << (bits * i)) for i in range(per)).astype(np.uint8)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("zero_points", ["none", "packed", "float"])
@pytest.mark.parametrize("K", [32, 40])
def test_matmul_nbits(bits, zero_points, K):
    N, bs = 6, 16
    kb = -(-K // bs)
    q = randint(0, 1 << bits, N, kb * bs)
    feeds = {"a": rand(2, 3, K), "b": _pack_nbits(q, bits).reshape(N, kb, bs * bits // 8),
             "s": (rand(N * kb) ** 2 * 0.1 + 0.01).astype(np.float32)}
    if zero_points == "packed":
        zq = randint(0, 1 << bits, N, -(-kb * bits // 8) * 8 // bits)
        feeds["zp"] = _pack_nbits(zq, bits)
    elif zero_points == "float":
        feeds["zp"] = rand(N * kb)
    feeds["bias"] = rand(N)
    names = list(feeds)
    if zero_points == "none":
        names = ["a", "b", "s", "", "", "bias"]
    else:
        names = ["a", "b", "s", "zp", "", "bias"]
    node = ms_node("MatMulNBits", names, ["y"], K=K, N=N, bits=bits, block_size=bs)
    ref = None
    if zero_points == "float" and bits == 8:  # onnxruntime's CPU build takes float zero points with 4 bits only
        assert not ort_has_kernel(node, feeds)

        def ref(a, b, s, zp, bias):
            blocks = np.arange(K) // bs
            w = (q[:, :K] - zp.reshape(N, kb)[:, blocks]) * s.reshape(N, kb)[:, blocks]
            return [(a @ w.T + bias).astype(np.float32)]
    check(node, feeds, ref=ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("form", ["uint8", "int4", "uint4"])
@pytest.mark.parametrize("with_zp", [False, True])
def test_gather_block_quantized(form, with_zp):
    import ml_dtypes

    rows, cols, bs = 5, 32, 16
    if form == "uint8":
        q = randint(0, 16, rows, cols)
        data = _pack_nbits(q, 4)
        zp = _pack_nbits(randint(0, 16, rows, cols // bs), 4) if with_zp else None
    else:
        t = ml_dtypes.int4 if form == "int4" else ml_dtypes.uint4
        lo, hi = (-8, 8) if form == "int4" else (0, 16)
        data = randint(lo, hi, rows, cols).astype(t)
        zp = randint(lo, hi, rows, cols // bs).astype(t) if with_zp else None
    # 4-bit tensors cannot be onnxruntime feeds: data and zero points are initializers
    inits = {"data": data} | ({} if zp is None else {"zp": zp})
    feeds = {"idx": np.array([[4, 0], [-1, 2]], np.int64), "s": rand(rows, cols // bs)}
    node = ms_node("GatherBlockQuantized", ["data", "idx", "s"] + (["zp"] if zp is not None else []), ["y"],
                   block_size=bs, quantize_axis=1, gather_axis=0)
    model = make_model(node, feeds)
    model.graph.initializer.extend(numpy_helper.from_array(v, k) if v.dtype == np.uint8 else _int4_tensor(k, v)
                                   for k, v in inits.items())
    want = run_ort(model, feeds)
    for device in DEVICES:
        assert_close(run_gpuops(model, feeds, device), want, 0, 0, f"GatherBlockQuantized on {device}")


def _int4_tensor(name, v):
    from onnx import TensorProto

    kind = TensorProto.INT4 if v.dtype.name == "int4" else TensorProto.UINT4
    return helper.make_tensor(name, kind, v.shape, v.astype(np.int8).reshape(-1).tolist())


