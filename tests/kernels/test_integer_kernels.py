"""MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv on the integer GEMM and requantize
kernels (quantize.cu) and im2col<int> (conv.cu), bit-exact against the generic NumPy ops."""

import array_api_compat.numpy as npx
import numpy as np
import pytest

from gpuops.ops import quantize as generic
from gpuops.ops.cuda import conv as cuda_conv
from gpuops.ops.cuda import quantize as cuda_quant
from gpuops.selftest import ints as _ints


MATMUL_CASES = {  # A shape, B shape, a_zero_point shape, b_zero_point shape (None: absent)
    "2d": ((3, 5), (5, 4), (), ()),
    "tiles-odd": ((37, 29), (29, 23), (37,), (23,)),  # several 16x16 tiles, per-row / per-column zero points
    "batch-broadcast": ((2, 1, 6, 5), (3, 5, 7), (), None),  # A: a full copy; B: a batch suffix
    "batched-b-only": ((6, 5), (4, 5, 3), None, (3,)),
    "empty-k": ((3, 0), (0, 4), None, None),
    "empty-batch": ((0, 3, 5), (5, 4), None, None),
}


@pytest.mark.parametrize("types", [(np.uint8, np.uint8), (np.int8, np.uint8), (np.int8, np.int8)],
                         ids=["u8u8", "i8u8", "i8i8"])
@pytest.mark.parametrize("case", MATMUL_CASES)
def test_matmul_integer(dev, case, types):
    rng = np.random.default_rng(0)
    a_shape, b_shape, azp, bzp = MATMUL_CASES[case]
    A, B = _ints(rng, a_shape, types[0]), _ints(rng, b_shape, types[1])
    a_zp = None if azp is None else _ints(rng, azp, types[0])
    b_zp = None if bzp is None else _ints(rng, bzp, types[1])
    want = generic.MatMulInteger(npx, A, B, a_zp, b_zp)
    got = dev.get(cuda_quant.MatMulInteger(dev.xp, dev.put(A), dev.put(B), dev.put(a_zp), dev.put(b_zp)))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def test_matmul_integer_wraps_in_32_bits(dev):
    A = np.full((1, 40000), 255, np.uint8)  # 40000 * 255 * 255 > 2**31
    B = np.full((40000, 2), 255, np.uint8)
    want = generic.MatMulInteger(npx, A, B)
    np.testing.assert_array_equal(dev.get(cuda_quant.MatMulInteger(dev.xp, dev.put(A), dev.put(B))), want)
    assert want[0, 0] < 0


@pytest.mark.parametrize("scales", ["tensor", "row-col", "float16"])
@pytest.mark.parametrize("out", [np.uint8, np.int8])
def test_qlinear_matmul(dev, scales, out):
    rng = np.random.default_rng(1)
    a, b = _ints(rng, (2, 19, 21), np.uint8), _ints(rng, (21, 17), np.int8)
    sdt = np.float16 if scales == "float16" else np.float32
    a_scale = rng.uniform(0.01, 0.1, 19 if scales == "row-col" else ()).astype(sdt)
    b_scale = rng.uniform(0.01, 0.1, 17 if scales == "row-col" else ()).astype(sdt)
    a_zp, b_zp = _ints(rng, (), np.uint8), _ints(rng, (), np.int8)
    y_scale, y_zp = np.array(0.5, sdt), _ints(rng, (), out)
    args = (a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)
    want = generic.QLinearMatMul(npx, *args)
    got = dev.get(cuda_quant._qlinear_matmul(10)(dev.xp, *map(dev.put, args)))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


CONV_CASES = {
    "2d-strided-padded": ((2, 4, 9, 11), (6, 4, 3, 3), dict(pads=[1, 2, 0, 1], strides=[2, 1], dilations=[1, 2])),
    "grouped-negative-pads": ((1, 4, 7, 8), (6, 2, 3, 3), dict(group=2, pads=[-1, 2, 3, -2])),
    "1d": ((2, 3, 13), (5, 3, 4), dict(strides=[3], pads=[2, 1])),
    "pointwise": ((2, 8, 5, 5), (4, 8, 1, 1), {}),
}


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_integer(dev, case):
    rng = np.random.default_rng(2)
    x_shape, w_shape, attrs = CONV_CASES[case]
    x, w = _ints(rng, x_shape, np.uint8), _ints(rng, w_shape, np.int8)
    for x_zp, w_zp in [(None, None), (_ints(rng, (), np.uint8), _ints(rng, (w_shape[0],), np.int8))]:
        want = generic.ConvInteger(npx, x, w, x_zp, w_zp, **attrs)
        got = dev.get(cuda_conv.ConvInteger(dev.xp, dev.put(x), dev.put(w), dev.put(x_zp), dev.put(w_zp), **attrs))
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv(dev, per_channel, monkeypatch):
    rng = np.random.default_rng(3)
    x, w = _ints(rng, (3, 4, 8, 7), np.uint8), _ints(rng, (6, 2, 3, 3), np.int8)
    w_scale = rng.uniform(0.001, 0.01, 6 if per_channel else ()).astype(np.float32)
    w_zp = _ints(rng, (6,) if per_channel else (), np.int8)
    B = rng.integers(-5000, 5000, 6).astype(np.int32)
    args = (x, np.array(0.02, np.float32), _ints(rng, (), np.uint8), w, w_scale, w_zp, np.array(0.03, np.float32),
            _ints(rng, (), np.int8), B)
    attrs = dict(group=2, pads=[1, 1, 0, 2], strides=[1, 2])
    want = generic.QLinearConv(npx, *args, **attrs)
    monkeypatch.setattr(cuda_conv, "_COL_BYTES", 1)  # and im2col one image at a time
    got = dev.get(cuda_conv.QLinearConv(dev.xp, *map(dev.put, args), **attrs))
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, want)
