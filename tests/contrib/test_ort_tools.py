"""The ops onnxruntime's quantizers and transformer optimizer emit beyond the seed contrib spec, against
onnxruntime's CPU kernels (NumPy formulas where it has none, asserted), on cpu and cuda."""

import math

import numpy as np
import pytest
from onnx import helper, numpy_helper

from ..ort_versions import ort_older_than, requires_ort
from .helpers import (DEVICES, assert_close, check, f32, make_model, ms_node, ort_has_kernel, q8, rand, randint,
                      run_gpuops, run_ort)

U8, I8 = np.uint8, np.int8


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


@requires_ort("1.24", "its SkipSimplifiedLayerNormalization returns an empty inv_std_var output")
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


_ORT_SATURATES_INT8_SOFTMAX = requires_ort(
    "1.24", "its int8 QLinearSoftmax wraps a certain row's 256 steps around (-1) instead of saturating to 127")


@pytest.mark.parametrize("dtype,zy", [(U8, 5), pytest.param(I8, 0, marks=_ORT_SATURATES_INT8_SOFTMAX),
                                      pytest.param(I8, -128, marks=_ORT_SATURATES_INT8_SOFTMAX)])
def test_qlinear_softmax_saturates_a_certain_row(dtype, zy):
    # one dominant logit per row: its probability rounds to 1 / y_scale = 256 steps, past the type
    low = 0 if dtype == U8 else -60
    x = np.full((3, 5), low, dtype)
    x[np.arange(3), [0, 2, 4]] = low + 170
    x[1, 1] = low + 160  # a second candidate: a row that is not quite certain
    feeds = {"x": x, "sx": f32(0.07502239), "zx": np.array(10, dtype), "sy": f32(1 / 256), "zy": np.array(zy, dtype)}
    check(ms_node("QLinearSoftmax", list(feeds), ["y"], opset=13, axis=-1), feeds)


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
    if zero_points == "none":
        names = ["a", "b", "s", "", "", "bias"]
    else:
        names = ["a", "b", "s", "zp", "", "bias"]
    node = ms_node("MatMulNBits", names, ["y"], K=K, N=N, bits=bits, block_size=bs)
    ref = None
    if zero_points == "float" and bits == 8:  # onnxruntime's CPU build takes float zero points with 4 bits only
        # (onnxruntime 1.23 still creates a session for it, so the formula below is the reference either way)
        assert ort_older_than("1.24") or not ort_has_kernel(node, feeds)

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


# -- attention ----------------------------------------------------------------------------------

@pytest.mark.parametrize("form", ["3d", "packed_qkv", "packed_kv", "cross_bnsh"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_multi_head_attention_forms(form, with_bias):
    B, S, L, N, h = 2, 4, 6, 2, 4
    D = N * h
    feeds = {}
    if form == "packed_qkv":
        feeds["q"] = rand(B, S, N, 3, h)
        names = ["q", "", ""]
    elif form == "packed_kv":
        feeds |= {"q": rand(B, S, D), "kv": rand(B, L, N, 2, h)}
        names = ["q", "kv", ""]
    elif form == "cross_bnsh":
        feeds |= {"q": rand(B, S, D), "k": rand(B, N, L, h), "v": rand(B, N, L, h)}
        names = ["q", "k", "v"]
    else:
        feeds |= {"q": rand(B, S, D), "k": rand(B, L, D), "v": rand(B, L, D)}
        names = ["q", "k", "v"]
    if with_bias and form != "cross_bnsh":
        feeds["bias"] = rand(3 * D)
        names.append("bias")
    node = ms_node("MultiHeadAttention", names, ["y"], num_heads=N)
    ref = None
    if form.startswith("packed"):  # onnxruntime's CPU kernel lacks packed forms: the same inputs unpacked
        q = feeds["q"]
        if form == "packed_qkv":
            q, k, v = (q[:, :, :, i].reshape(B, S, D) for i in range(3))
        else:
            k, v = (feeds["kv"][:, :, :, i].reshape(B, L, D) for i in range(2))
        plain = {"q": q, "k": k, "v": v} | ({"bias": feeds["bias"]} if with_bias else {})
        want = run_ort(make_model(ms_node("MultiHeadAttention", list(plain), ["y"], num_heads=N), plain), plain)
        ref = lambda **_: want  # noqa: E731
    check(node, feeds, ref=ref, atol=1e-5)


@pytest.mark.parametrize("mask", ["none", "lengths", "raw2d", "raw3d"])
@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_multi_head_attention_past_mask_bias(mask, causal, dtype):
    B, S, P, N, h = 2, 3, 4, 2, 4
    D, T = N * h, S + P
    feeds = {"q": rand(B, S, D, dtype=dtype), "k": rand(B, S, D, dtype=dtype), "v": rand(B, S, D, dtype=dtype),
             "bias": rand(3 * D, dtype=dtype)}
    names = ["q", "k", "v", "bias"]
    if mask == "lengths":
        feeds["m"] = np.array([T, T - 2], np.int32)
    elif mask == "raw2d":
        feeds["m"] = randint(0, 2, B, T)
        feeds["m"][:, 0] = 1
    elif mask == "raw3d":
        feeds["m"] = randint(0, 2, B, S, T)
        feeds["m"][..., 0] = 1
    names.append("m" if mask != "none" else "")
    feeds |= {"ab": rand(1, N, S, T, dtype=dtype), "pk": rand(B, N, P, h, dtype=dtype),
              "pv": rand(B, N, P, h, dtype=dtype)}
    names += ["ab", "pk", "pv"]
    node = ms_node("MultiHeadAttention", names, ["y", "present_k", "present_v"], num_heads=N,
                   unidirectional=causal, scale=0.3)
    tol = 1e-5 if dtype == np.float32 else 3e-3
    check(node, feeds, rtol=tol, atol=tol)


@pytest.mark.parametrize("layout", ["3d", "4d"])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("positions", ["ids", "offset"])
def test_rotary_embedding(layout, interleaved, positions):
    B, S, N, h, M = 2, 3, 2, 8, 10
    x = rand(B, S, N * h) if layout == "3d" else rand(B, N, S, h)
    theta = np.arange(M)[:, None] / (10000 ** (np.arange(h // 2) / (h // 2)))
    pos = randint(0, M, B, S).astype(np.int64) if positions == "ids" else np.array([4], np.int64)
    feeds = {"x": x, "pos": pos, "cos": np.cos(theta).astype(np.float32), "sin": np.sin(theta).astype(np.float32)}
    attrs = {"num_heads": N} if layout == "3d" else {}
    check(ms_node("RotaryEmbedding", list(feeds), ["y"], interleaved=interleaved, **attrs), feeds, atol=1e-5)


def test_rotary_embedding_partial_formula():
    # rotary_embedding_dim < head size: the tail of each head passes through
    B, S, N, h, rd, M = 1, 3, 2, 8, 4, 6
    theta = np.arange(M)[:, None] * np.array([1.0, 0.1])
    feeds = {"x": rand(B, N, S, h), "pos": np.arange(S, dtype=np.int64)[None], "cos": np.cos(theta).astype(np.float32),
             "sin": np.sin(theta).astype(np.float32)}

    def ref(x, pos, cos, sin):
        c, s_ = cos[pos][:, None], sin[pos][:, None]
        a, b = x[..., :2], x[..., 2:4]
        return [np.concatenate([a * c - b * s_, b * c + a * s_, x[..., 4:]], -1)]
    check(ms_node("RotaryEmbedding", list(feeds), ["y"], rotary_embedding_dim=rd, num_heads=N), feeds, ref=ref,
          atol=1e-6)


def _gqa_feeds(B, S, P, N, Nkv, h, lengths, packed, rotary, dtype=np.float32):
    feeds = {}
    if packed:
        feeds["q"] = rand(B, S, (N + 2 * Nkv) * h, dtype=dtype)
        names = ["q", "", ""]
    else:
        feeds |= {"q": rand(B, S, N * h, dtype=dtype), "k": rand(B, S, Nkv * h, dtype=dtype),
                  "v": rand(B, S, Nkv * h, dtype=dtype)}
        names = ["q", "k", "v"]
    if P:
        feeds |= {"pk": rand(B, Nkv, P, h, dtype=dtype), "pv": rand(B, Nkv, P, h, dtype=dtype)}
        names += ["pk", "pv"]
    else:
        names += ["", ""]
    total = max(lengths)
    feeds |= {"seqlens_k": np.array(lengths, np.int32) - 1, "total": np.array(total, np.int32)}
    names += ["seqlens_k", "total"]
    if rotary:
        theta = np.arange(32)[:, None] / (10000 ** (np.arange(h // 2) / (h // 2)))
        feeds |= {"cos": np.cos(theta).astype(dtype), "sin": np.sin(theta).astype(dtype)}
        names += ["cos", "sin"]
    return feeds, names


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("rotary", [0, 1])
@pytest.mark.parametrize("phase", ["prompt", "decode", "decode_ragged"])
def test_group_query_attention(packed, rotary, phase):
    B, N, Nkv, h = 2, 4, 2, 16  # onnxruntime's rotary needs head sizes in multiples of 16
    if phase == "prompt":
        S, P, lengths = 5, 0, [5, 5]
    elif phase == "decode":
        S, P, lengths = 1, 6, [7, 7]
    else:  # batch 1 holds fewer past keys in the same buffer
        S, P, lengths = 1, 6, [7, 4]
    feeds, names = _gqa_feeds(B, S, P, N, Nkv, h, lengths, packed, rotary)
    node = ms_node("GroupQueryAttention", names, ["y", "pk_out", "pv_out"], num_heads=N, kv_num_heads=Nkv,
                   do_rotary=rotary)
    if phase != "decode_ragged":
        check(node, feeds, atol=1e-5)
    else:  # onnxruntime leaves the unused tail of present undefined: compare the valid part
        model = make_model(node, feeds)
        want = run_ort(model, feeds)
        for device in DEVICES:
            got = run_gpuops(model, feeds, device)
            np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
            for g, w in zip(got[1:], want[1:]):
                for b, n in enumerate(lengths):
                    np.testing.assert_allclose(g[b, :, :n], w[b, :, :n], rtol=1e-5, atol=1e-5)


@requires_ort("1.24", "its GroupQueryAttention gives a different output for a right-padded first prompt")
def test_group_query_attention_padded_prompt():
    # the first prompt of a batch whose second sequence holds 3 of the 5 tokens (right padding)
    feeds, names = _gqa_feeds(2, 5, 0, 2, 1, 16, [5, 3], False, 0)
    check(ms_node("GroupQueryAttention", names, ["y", "pk_out", "pv_out"], num_heads=2, kv_num_heads=1), feeds,
          atol=1e-5)


@requires_ort("1.24", "its GroupQueryAttention schema requires the present_key and present_value outputs")
@pytest.mark.parametrize("attrs", [{"local_window_size": 2}, {"softcap": 2.0}, {"smooth_softmax": 1},
                                   {"scale": 0.2}])
def test_group_query_attention_options(attrs):
    feeds, names = _gqa_feeds(2, 5, 0, 2, 1, 8, [5, 5], False, 0)
    node = ms_node("GroupQueryAttention", names, ["y"], num_heads=2, kv_num_heads=1, **attrs)
    check(node, feeds, atol=1e-5)


def test_group_query_attention_float16():
    feeds, names = _gqa_feeds(1, 1, 4, 2, 2, 16, [5], False, 1, np.float16)
    node = ms_node("GroupQueryAttention", names, ["y", "pk_out", "pv_out"], num_heads=2, kv_num_heads=2, do_rotary=1)
    check(node, feeds, rtol=3e-3, atol=3e-3)


@pytest.mark.parametrize("share", [0, 1])
def test_decoder_masked_multi_head_attention(share):
    B, N, h, M, P = 2, 2, 8, 6, 3
    D = N * h
    feeds = {"q": rand(B, 1, D), "k": rand(B, 1, D), "v": rand(B, 1, D)}
    mask = np.ones((B, P + 1), np.int32)
    mask[1, 0] = 0
    feeds["m"] = mask
    if share:
        feeds |= {"pk": rand(B, N, M, h), "pv": rand(B, N, M, h), "plen": np.array(P, np.int32)}
    else:
        feeds |= {"pk": rand(B, N, P, h), "pv": rand(B, N, P, h), "plen": np.array(P, np.int32)}
    feeds["bias"] = rand(3 * D)
    names = ["q", "k", "v", "m", "", "pk", "pv", "plen", "", "", "bias"]
    node = ms_node("DecoderMaskedMultiHeadAttention", names, ["y", "pk_out", "pv_out"], num_heads=N,
                   past_present_share_buffer=share)
    if not share:  # onnxruntime's CPU kernel takes the shared buffer only: MultiHeadAttention with past
        mha = ms_node("MultiHeadAttention", ["q", "k", "v", "bias", "m", "", "pk", "pv"],
                      ["y", "pk_out", "pv_out"], num_heads=N)
        mfeeds = {k: feeds[k] for k in ["q", "k", "v", "bias", "m", "pk", "pv"]}
        want = run_ort(make_model(mha, mfeeds), mfeeds)
        check(node, feeds, ref=lambda **_: want, atol=1e-5)
    else:
        check(node, feeds, atol=1e-5)


def test_decoder_masked_multi_head_attention_beam_search():
    # beams reorder the cached steps: step t of beam j comes from the beam cache_indirection[b, j, t] names
    B, beam, N, h, M, P = 2, 2, 2, 8, 6, 3
    D = N * h
    feeds = {"q": rand(B * beam, 1, D), "k": rand(B * beam, 1, D), "v": rand(B * beam, 1, D),
             "pk": rand(B * beam, N, M, h), "pv": rand(B * beam, N, M, h), "plen": np.array(P, np.int32),
             "beam": np.array(beam, np.int32), "indirection": randint(0, beam, B, beam, M)}
    names = ["q", "k", "v", "", "", "pk", "pv", "plen", "beam", "indirection"]
    node = ms_node("DecoderMaskedMultiHeadAttention", names, ["y", "pk_out", "pv_out"], num_heads=N,
                   past_present_share_buffer=1)
    check(node, feeds, atol=1e-5)


def _mha_per_sequence(q, k, v, bias, lengths, N):
    """Unpadded MultiHeadAttention of each sequence alone (onnxruntime), concatenated: the packed oracle."""
    outs, start = [], 0
    for n in lengths:
        f = {"q": q[None, start:start + n], "k": k[None, start:start + n], "v": v[None, start:start + n],
             "bias": bias}
        outs.append(run_ort(make_model(ms_node("MultiHeadAttention", ["q", "k", "v", "bias"], ["y"],
                                               num_heads=N), f), f)[0][0])
        start += n
    return np.concatenate(outs)


def test_packed_multi_head_attention_formula():
    lengths, S, N, h = [3, 1, 4], 4, 2, 4
    T, D = sum(lengths), N * h
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    offset = np.array([b * S + s for b, n in enumerate(lengths) for s in range(n)] +
                      [b * S + s for b, n in enumerate(lengths) for s in range(n, S)], np.int32).reshape(3, S)
    feeds = {"q": rand(T, D), "k": rand(T, D), "v": rand(T, D), "bias": rand(3 * D), "off": offset, "cu": cu}
    node = ms_node("PackedMultiHeadAttention", list(feeds), ["y"], num_heads=N)
    assert not ort_has_kernel(node, feeds)
    want = _mha_per_sequence(feeds["q"], feeds["k"], feeds["v"], feeds["bias"], lengths, N)
    check(node, feeds, ref=lambda **_: [want], atol=1e-5)
    # packed QKV (T, N, 3, h) gives the same
    qkv = np.stack([t.reshape(T, N, h) for t in (feeds["q"], feeds["k"], feeds["v"])], axis=2)
    pfeeds = {"qkv": qkv, "bias": feeds["bias"], "off": offset, "cu": cu}
    check(ms_node("PackedMultiHeadAttention", ["qkv", "", "", "bias", "off", "cu"], ["y"], num_heads=N), pfeeds,
          ref=lambda **_: [want], atol=1e-5)


def test_packed_attention_formula():
    lengths, S, N, h = [2, 4], 4, 2, 4
    T, D = sum(lengths), N * h
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    offset = np.array([0, 1, 4, 5, 6, 7, 2, 3], np.int32).reshape(2, S)
    feeds = {"x": rand(T, D), "w": rand(D, 3 * D), "b": rand(3 * D), "off": offset, "cu": cu}
    node = ms_node("PackedAttention", list(feeds), ["y"], num_heads=N)
    assert not ort_has_kernel(node, feeds)
    qkv = feeds["x"] @ feeds["w"]
    want = _mha_per_sequence(qkv[:, :D], qkv[:, D:2 * D], qkv[:, 2 * D:], feeds["b"], lengths, N)
    check(node, feeds, ref=lambda **_: [want], atol=1e-5)


def test_decoder_masked_self_attention_formula():
    B, N, h, M, P = 2, 2, 4, 5, 2
    D = N * h
    feeds = {"x": rand(B, 1, D), "w": rand(D, 3 * D), "b": rand(3 * D), "past": rand(2, B, N, M, h),
             "plen": np.array(P, np.int32)}
    node = ms_node("DecoderMaskedSelfAttention", ["x", "w", "b", "", "past", "", "plen"], ["y", "present"],
                   num_heads=N, past_present_share_buffer=1)
    assert not ort_has_kernel(node, feeds)
    afeeds = {"x": feeds["x"], "w": feeds["w"], "b": feeds["b"],
              "past": np.ascontiguousarray(feeds["past"][:, :, :, :P])}
    y, present = run_ort(make_model(ms_node("Attention", ["x", "w", "b", "", "past"], ["y", "present"],
                                            num_heads=N), afeeds), afeeds)
    want_present = feeds["past"].copy()
    want_present[:, :, :, :P + 1] = present
    check(node, feeds, ref=lambda **_: [y, want_present], atol=1e-5)


def test_remove_and_restore_padding_formula():
    counts = np.array([3, 1, 4], np.int32)
    x = rand(3, 4, 6)
    feeds = {"x": x, "n": counts}
    node = ms_node("RemovePadding", ["x", "n"], ["tokens", "offset", "cu", "longest"])
    assert not ort_has_kernel(node, feeds)
    valid = np.arange(4)[None, :] < counts[:, None]
    flat = np.arange(12).reshape(3, 4)
    offset = np.concatenate([flat[valid], flat[~valid]]).reshape(3, 4).astype(np.int32)
    tokens = x[valid]
    check(node, feeds, ref=lambda x, n: [tokens, offset, np.array([0, 3, 4, 8], np.int32), np.array([4], np.int32)])
    restore = ms_node("RestorePadding", ["t", "offset"], ["y"])
    feeds = {"t": tokens, "offset": offset}
    assert not ort_has_kernel(restore, feeds)
    check(restore, feeds, ref=lambda t, offset: [np.where(valid[..., None], x, 0).astype(np.float32)])


@pytest.mark.parametrize("op_type,domain", [("QOrderedLongformerAttention", "com.microsoft"),
                                             ("WhisperBeamSearch", "com.microsoft")])
def test_tool_emitted_op_gpuops_lacks_fails_at_session_creation(op_type, domain):
    # onnxruntime has these (CUDA-only longformer, Whisper's search loop); gpuops does not yet
    import gpuops
    from gpuops.errors import UnsupportedOpError

    node = ms_node(op_type, ["x"], ["y"], domain=domain)
    node.name = "the_node"
    with pytest.raises(UnsupportedOpError, match=rf"'the_node'.*{domain}::{op_type} at opset 1"):
        gpuops.InferenceSession(make_model(node, {"x": rand(2, 2)}), device="cpu")


@pytest.mark.parametrize("quant_type", [0, 1])
@pytest.mark.parametrize("transB", [1, 0])
def test_matmul_bnb4(quant_type, transB):
    N, K, bs = 6, 20, 16  # N * K not a multiple of the block size
    n = N * K
    feeds = {"a": rand(2, 3, K if transB else N), "b": randint(0, 256, (n + 1) // 2).astype(np.uint8),
             "absmax": (rand(-(-n // bs)) ** 2 + 0.1).astype(np.float32)}
    node = ms_node("MatMulBnb4", list(feeds), ["y"], K=K, N=N, block_size=bs, quant_type=quant_type, transB=transB)
    ref = None
    if not transB:  # the spec's A (.., N) @ W (N, K); onnxruntime's CPU kernel computes transB=1 only
        eye = {"a": np.eye(K, dtype=np.float32), "b": feeds["b"], "absmax": feeds["absmax"]}
        w_t = run_ort(make_model(ms_node("MatMulBnb4", list(eye), ["w"], K=K, N=N, block_size=bs,
                                         quant_type=quant_type), eye), eye)[0]  # I @ W^T
        ref = lambda a, b, absmax: [(a @ w_t.T).astype(np.float32)]  # noqa: E731
    check(node, feeds, ref=ref, rtol=1e-5, atol=1e-5)
