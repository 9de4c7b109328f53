"""Conv / ConvTranspose / FusedConv kernels (conv.cu via gpuops/ops/cuda/conv.py) against NumPy.

The oracle is a direct NumPy convolution in float64 (one strided window per kernel tap), which
handles what onnxruntime rejects (negative pads); onnxruntime checks the auto_pad / output_shape
cases and the oracle itself.
"""

import itertools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from gpuops.ops.cuda import conv as cuda_conv


def _crop_or_pad(a, begin, end):
    """Pad (positive) or crop (negative) the spatial axes of a [N, C, ...] array."""
    a = np.pad(a, [(0, 0), (0, 0)] + [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)])
    index = [slice(None), slice(None)]
    for i, (b, e) in enumerate(zip(begin, end)):
        index.append(slice(max(-b, 0), a.shape[2 + i] - max(-e, 0)))
    return a[tuple(index)]


def ref_conv(X, W, B=None, pads=None, strides=None, dilations=None, group=1):
    nd = X.ndim - 2
    pads = pads or [0] * 2 * nd
    strides = strides or [1] * nd
    dilations = dilations or [1] * nd
    Xp = _crop_or_pad(X.astype(np.float64), pads[:nd], pads[nd:])
    K = W.shape[2:]
    out = [max(0, (Xp.shape[2 + i] - (K[i] - 1) * dilations[i] - 1) // strides[i] + 1) for i in range(nd)]
    N, M = X.shape[0], W.shape[0]
    Y = np.zeros((N, M, *out))
    Cg, Mg = W.shape[1], M // group
    if min(out, default=1) > 0:
        for tap in itertools.product(*(range(k) for k in K)):
            window = Xp[(slice(None), slice(None)) + tuple(
                slice(tap[i] * dilations[i], tap[i] * dilations[i] + strides[i] * (out[i] - 1) + 1, strides[i])
                for i in range(nd))]
            for g in range(group):
                Y[:, g * Mg:(g + 1) * Mg] += np.einsum("nc...,mc->nm...", window[:, g * Cg:(g + 1) * Cg],
                                                       W[(slice(g * Mg, (g + 1) * Mg), slice(None), *tap)])
    if B is not None:
        Y += B.reshape((1, M) + (1,) * nd)
    return Y


def ref_conv_transpose(X, W, B=None, pads=None, strides=None, dilations=None, group=1, output_padding=None):
    nd = X.ndim - 2
    pads = pads or [0] * 2 * nd
    strides = strides or [1] * nd
    dilations = dilations or [1] * nd
    output_padding = output_padding or [0] * nd
    N, C = X.shape[:2]
    Cg, Mg = C // group, W.shape[1]
    K, In = W.shape[2:], X.shape[2:]
    full = [strides[i] * (In[i] - 1) + (K[i] - 1) * dilations[i] + 1 + output_padding[i] for i in range(nd)]
    Y = np.zeros((N, Mg * group, *full))
    for tap in itertools.product(*(range(k) for k in K)):
        index = tuple(slice(tap[i] * dilations[i], tap[i] * dilations[i] + strides[i] * (In[i] - 1) + 1, strides[i])
                      for i in range(nd))
        for g in range(group):
            contrib = np.einsum("nc...,cm->nm...", X[:, g * Cg:(g + 1) * Cg].astype(np.float64),
                                W[(slice(g * Cg, (g + 1) * Cg), slice(None), *tap)])
            Y[(slice(None), slice(g * Mg, (g + 1) * Mg)) + index] += contrib
    Y = _crop_or_pad(Y, [-p for p in pads[:nd]], [-p for p in pads[nd:]])
    if B is not None:
        Y += B.reshape((1, -1) + (1,) * nd)
    return Y


def ort_run(op_type, inputs, attrs, opset=17):
    names = [f"in{i}" for i in range(len(inputs))]
    vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
          for n, a in zip(names, inputs)]
    out = helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(inputs[0].dtype), None)
    model = helper.make_model(helper.make_graph([helper.make_node(op_type, names, ["y"], **attrs)], "g", vi, [out]),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip(names, inputs)))[0]


def _data(rng, x_shape, w_shape, bias, dtype=np.float32):
    X = rng.standard_normal(x_shape).astype(dtype)
    W = rng.standard_normal(w_shape).astype(dtype)
    B = rng.standard_normal(w_shape[0]).astype(dtype) if bias else None
    return X, W, B


CONV_CASES = {
    "2d-strided-dilated": ((2, 4, 9, 11), (6, 4, 3, 3), dict(pads=[1, 2, 0, 1], strides=[2, 1], dilations=[1, 2])),
    "2d-grouped-negative-pads": ((2, 4, 9, 11), (6, 2, 3, 3), dict(group=2, pads=[-1, 2, 3, -2])),
    "2d-oversized-pads": ((1, 3, 4, 5), (2, 3, 3, 2), dict(pads=[6, 5, 7, 9], strides=[3, 2])),
    "1d-depthwise-multiplier": ((2, 4, 13), (8, 1, 3), dict(group=4, strides=[2], pads=[2, 1], dilations=[2])),
    "2d-depthwise-odd": ((1, 5, 7, 13), (5, 1, 3, 3), dict(group=5, pads=[1, 1, 1, 1])),
    "3d": ((1, 3, 5, 6, 7), (4, 3, 2, 3, 2), dict(pads=[1, 0, 1, 0, 2, 1], strides=[2, 1, 2])),
    "pointwise": ((3, 8, 5, 7), (4, 8, 1, 1), {}),
    "pointwise-one-image": ((1, 8, 5, 7), (4, 8, 1, 1), {}),
    "pointwise-grouped": ((2, 6, 3, 3), (4, 3, 1, 1), dict(group=2)),
    "no-bias": ((1, 2, 6, 6), (3, 2, 2, 2), dict(strides=[2, 2])),
    "empty-batch": ((0, 2, 6, 6), (3, 2, 3, 3), {}),
}  # an empty output (a window larger than the input) is refused before any kernel: tests/ops/test_conv_bias.py


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv(dev, case):
    x_shape, w_shape, attrs = CONV_CASES[case]
    X, W, B = _data(np.random.default_rng(len(case)), x_shape, w_shape, bias=case != "no-bias")
    Y = dev.get(cuda_conv.conv(dev.xp, dev.put(X), dev.put(W), dev.put(B), **attrs))
    want = ref_conv(X, W, B, attrs.get("pads"), attrs.get("strides"), attrs.get("dilations"), attrs.get("group", 1))
    assert Y.dtype == np.float32 and Y.shape == want.shape
    np.testing.assert_allclose(Y, want, rtol=1e-5, atol=1e-5)


def test_the_numpy_oracle_agrees_with_onnxruntime():
    X, W, B = _data(np.random.default_rng(1), (2, 4, 9, 11), (6, 2, 3, 3), bias=True)
    attrs = dict(group=2, pads=[1, 2, 0, 1], strides=[2, 1], dilations=[1, 2])
    np.testing.assert_allclose(ref_conv(X, W, B, **attrs), ort_run("Conv", [X, W, B], attrs), rtol=1e-5, atol=1e-5)
    X, W, _ = _data(np.random.default_rng(2), (1, 4, 5, 6), (4, 3, 3, 3), bias=False)
    B = np.arange(6, dtype=np.float32)
    attrs = dict(group=2, pads=[1, 0, 0, 2], strides=[2, 3], output_padding=[1, 0])
    np.testing.assert_allclose(ref_conv_transpose(X, W, B, **attrs), ort_run("ConvTranspose", [X, W, B], attrs),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_auto_pad(dev, auto_pad):
    X, W, B = _data(np.random.default_rng(3), (1, 3, 7, 6, 5), (4, 3, 2, 3, 2), bias=True)
    attrs = dict(auto_pad=auto_pad, strides=[2, 1, 2])
    Y = dev.get(cuda_conv.conv(dev.xp, dev.put(X), dev.put(W), dev.put(B), **attrs))
    np.testing.assert_allclose(Y, ort_run("Conv", [X, W, B], attrs), rtol=1e-5, atol=1e-5)


def test_conv_float16(dev):
    X, W, B = _data(np.random.default_rng(4), (2, 4, 8, 9), (6, 4, 3, 3), bias=True, dtype=np.float16)
    Y = dev.get(cuda_conv.conv(dev.xp, dev.put(X), dev.put(W), dev.put(B), pads=[1, 1, 1, 1]))
    assert Y.dtype == np.float16
    want = ref_conv(X.astype(np.float32), W.astype(np.float32), B.astype(np.float32), pads=[1, 1, 1, 1])
    np.testing.assert_allclose(Y.astype(np.float32), want, rtol=2e-2, atol=3e-2)
    Yd = dev.get(cuda_conv.conv(dev.xp, dev.put(X[:, :2]), dev.put(W[:4, :1]), None, group=2))  # depthwise, half
    np.testing.assert_allclose(Yd.astype(np.float32), ref_conv(X[:, :2].astype(np.float32),
                               W[:4, :1].astype(np.float32), group=2), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("images", [1, 2])
def test_conv_im2col_in_chunks_of_images(dev, monkeypatch, images):
    # one GEMM per chunk of images (the last one shorter), its [M, n, O] result written out as [n, M, O]
    # with the bias, the residual input's rows of those images and the activation
    monkeypatch.setattr(cuda_conv, "_COL_BYTES", images * 2 * 9 * 25 * 4)
    rng = np.random.default_rng(5)
    X, W, B = _data(rng, (3, 2, 5, 5), (3, 2, 3, 3), bias=True)
    Z = rng.standard_normal((3, 3, 5, 5)).astype(np.float32)
    Y = dev.get(cuda_conv.conv(dev.xp, dev.put(X), dev.put(W), dev.put(B), pads=[1, 1, 1, 1]))
    np.testing.assert_allclose(Y, ref_conv(X, W, B, pads=[1, 1, 1, 1]), rtol=1e-5, atol=1e-5)
    Y = dev.get(cuda_conv.conv(dev.xp, dev.put(X), dev.put(W), dev.put(B), pads=[1, 1, 1, 1], Z=dev.put(Z),
                               act=cuda_conv.activation_code("Relu", None)))
    np.testing.assert_allclose(Y, np.maximum(ref_conv(X, W, B, pads=[1, 1, 1, 1]) + Z, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pointwise", [False, True])
def test_one_image_adds_its_epilogue_in_place(dev, pointwise):
    rng = np.random.default_rng(10)
    X, W, B = _data(rng, (1, 4, 6, 5), (3, 4, 1, 1) if pointwise else (3, 4, 3, 3), bias=True)
    Z = rng.standard_normal((1, 3, 6, 5) if pointwise else (1, 3, 4, 3)).astype(np.float32)
    act = cuda_conv.activation_code("LeakyRelu", [0.1])
    Y = dev.get(cuda_conv.conv(dev.xp, dev.put(X), dev.put(W), dev.put(B), Z=dev.put(Z), act=act))
    v = ref_conv(X, W, B) + Z
    np.testing.assert_allclose(Y, np.where(v >= 0, v, 0.1 * v), rtol=1e-5, atol=1e-5)


ACTIVATIONS = {
    "Relu": (None, lambda v: np.maximum(v, 0)),
    "LeakyRelu": ([0.2], lambda v: np.where(v >= 0, v, 0.2 * v)),
    "Sigmoid": (None, lambda v: 1 / (1 + np.exp(-v))),
    "Tanh": (None, np.tanh),
    "Clip": ([-0.5, 0.7], lambda v: np.clip(v, -0.5, 0.7)),
    "HardSigmoid": (None, lambda v: np.clip(0.2 * v + 0.5, 0, 1)),
}


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_fused_conv_epilogue(dev, activation):
    params, f = ACTIVATIONS[activation]
    rng = np.random.default_rng(6)
    X, W, B = _data(rng, (2, 3, 6, 7), (4, 3, 3, 3), bias=True)
    Z = rng.standard_normal((2, 4, 4, 5)).astype(np.float32)
    act = cuda_conv.activation_code(activation, params)
    Y = dev.get(cuda_conv.conv(dev.xp, dev.put(X), dev.put(W), dev.put(B), act=act, Z=dev.put(Z)))
    np.testing.assert_allclose(Y, f(ref_conv(X, W, B) + Z), rtol=1e-5, atol=1e-5)
    Yd = dev.get(cuda_conv.conv(dev.xp, dev.put(X), dev.put(W[:3, :1]), dev.put(B[:3]), group=3, act=act))
    np.testing.assert_allclose(Yd, f(ref_conv(X, W[:3, :1], B[:3], group=3)), rtol=1e-5, atol=1e-5)


TRANSPOSE_CASES = {
    "2d-strided-output-padding": ((2, 4, 5, 6), (4, 3, 3, 3), dict(strides=[2, 2], pads=[1, 0, 0, 1],
                                                                   output_padding=[1, 0])),
    "1d-grouped-dilated": ((1, 4, 5), (4, 2, 4), dict(group=2, strides=[3], dilations=[2])),
    "2d-negative-pads": ((1, 2, 4, 3), (2, 3, 2, 3), dict(strides=[2, 1], pads=[-1, 1, 2, -2])),
    "3d": ((1, 2, 3, 4, 3), (2, 2, 2, 2, 2), dict(strides=[2, 2, 2], pads=[0, 1, 0, 1, 0, 1])),
    "odd-no-bias": ((2, 3, 7, 5), (3, 1, 3, 2), dict(strides=[1, 2])),
    "empty-batch": ((0, 3, 7, 5), (3, 1, 3, 2), {}),
}


@pytest.mark.parametrize("case", TRANSPOSE_CASES)
def test_conv_transpose(dev, case):
    x_shape, w_shape, attrs = TRANSPOSE_CASES[case]
    rng = np.random.default_rng(len(case))
    X = rng.standard_normal(x_shape).astype(np.float32)
    W = rng.standard_normal(w_shape).astype(np.float32)
    B = None if "no-bias" in case else rng.standard_normal(w_shape[1] * attrs.get("group", 1)).astype(np.float32)
    Y = dev.get(cuda_conv.conv_transpose(dev.xp, dev.put(X), dev.put(W), dev.put(B), **attrs))
    want = ref_conv_transpose(X, W, B, **attrs)
    assert Y.shape == want.shape
    np.testing.assert_allclose(Y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attrs", [dict(strides=[2, 2], output_shape=[10, 12]),
                                   dict(strides=[3, 2], output_shape=[14, 11], auto_pad="SAME_UPPER"),
                                   dict(strides=[2, 2], auto_pad="SAME_UPPER"),
                                   dict(strides=[2, 3], auto_pad="SAME_LOWER")],
                         ids=["output_shape", "output_shape-same-upper", "same-upper", "same-lower"])
def test_conv_transpose_output_shape_and_auto_pad(dev, attrs):
    rng = np.random.default_rng(7)
    X = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
    W = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    B = rng.standard_normal(3).astype(np.float32)
    Y = dev.get(cuda_conv.conv_transpose(dev.xp, dev.put(X), dev.put(W), dev.put(B), **attrs))
    np.testing.assert_allclose(Y, ort_run("ConvTranspose", [X, W, B], attrs), rtol=1e-5, atol=1e-5)


def test_conv_transpose_float16(dev):
    rng = np.random.default_rng(8)
    X = rng.standard_normal((1, 4, 5, 5)).astype(np.float16)
    W = rng.standard_normal((4, 2, 3, 3)).astype(np.float16)
    Y = dev.get(cuda_conv.conv_transpose(dev.xp, dev.put(X), dev.put(W), None, strides=[2, 2], group=2))
    want = ref_conv_transpose(X.astype(np.float32), W.astype(np.float32), strides=[2, 2], group=2)
    assert Y.dtype == np.float16
    np.testing.assert_allclose(Y.astype(np.float32), want, rtol=2e-2, atol=3e-2)


def test_other_dtypes_use_the_generic_op(dev):
    X = np.ones((1, 1, 3, 3), np.float64)
    assert cuda_conv.conv(dev.xp, dev.put(X), dev.put(X), None) is None
    assert cuda_conv.conv_transpose(dev.xp, dev.put(X), dev.put(X), None) is None


@pytest.mark.parametrize("opset", [1, 11])
@pytest.mark.parametrize("auto_pad", ["NOTSET", "SAME_UPPER", "SAME_LOWER"])
def test_conv_transpose_odd_padding_split_matches_the_generic_op(dev, opset, auto_pad):
    """With an output_shape, the odd unit of padding goes to the head or tail by opset and auto_pad."""
    from gpuops import registry

    rng = np.random.default_rng(9)
    X = rng.standard_normal((1, 2, 4, 5)).astype(np.float32)
    W = rng.standard_normal((2, 3, 3, 2)).astype(np.float32)
    attrs = dict(auto_pad=auto_pad, strides=[2, 2], output_shape=[8, 9])
    override = registry.resolve("", "ConvTranspose", opset, device="cuda").fn
    generic = registry.resolve("", "ConvTranspose", opset, device="cpu").fn
    Y = dev.get(override(dev.xp, dev.put(X), dev.put(W), **attrs))
    import array_api_compat.numpy as npx

    np.testing.assert_allclose(Y, generic(npx, X, W, **attrs), rtol=1e-5, atol=1e-5)
