"""QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear kernels (quantize.cu via
gpuops/ops/cuda/quantize.py) against the generic NumPy ops: bit-exact, for every target type."""

import array_api_compat.numpy as npx
import ml_dtypes
import numpy as np
import pytest

from gpuops.ops import quantize as generic
from gpuops.ops.cuda import quantize as cuda_quant
from gpuops.selftest import quantize_input as _input

INTS = [np.uint8, np.int8, np.uint16, np.int16, ml_dtypes.uint4, ml_dtypes.int4, ml_dtypes.uint2, ml_dtypes.int2]
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the oracle's 1e9 inputs

FLOAT8 = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz]


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint8 if a.dtype.itemsize == 1 else np.uint16)


def _same(got: np.ndarray, want: np.ndarray):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(_bits(got), _bits(want))


def _params(rng, layout, scale_dtype, target, float8):
    shape = {"tensor": (), "axis": (5,), "block": (3, 2, 7)}[layout]
    scale = rng.uniform(0.1, 2, shape).astype(scale_dtype)
    if float8:
        return scale, None
    info = ml_dtypes.iinfo(target)
    return scale, rng.integers(int(info.min), int(info.max) + 1, shape).astype(target)


def _storage(a):
    """The bytes of a (possibly host-only typed) array as the device holds them."""
    return None if a is None else a.view(cuda_quant.storage_dtype(a.dtype))


@pytest.mark.parametrize("layout", ["tensor", "axis", "block"])
@pytest.mark.parametrize("scale_dtype", [np.float32, np.float16])
@pytest.mark.parametrize("target", INTS + FLOAT8, ids=lambda t: np.dtype(t).name)
def test_quantize_and_dequantize_match_the_generic_op(dev, target, scale_dtype, layout):
    rng = np.random.default_rng(0)
    x = _input(rng)
    scale, zp = _params(rng, layout, scale_dtype, target, target in FLOAT8)
    kw = dict(axis=1, block_size=3 if layout == "block" else 0)
    out = dict(output_dtype=_onnx(target)) if target in FLOAT8 else {}  # float8 has no zero point to type it
    for saturate in (0, 1):
        want = generic._quantize(npx, x, scale, zp, saturate=saturate, **kw, **out)
        got = cuda_quant.quantize_to(dev.xp, dev.put(x), dev.put(scale), dev.put(_storage(zp)), target,
                                     saturate=saturate, **kw)
        _same(dev.get(got), _storage(want))
    q = generic._quantize(npx, x, scale, zp, **kw, **out)
    assert q.dtype == np.dtype(target)
    for output_dtype in (0, 1, 10):  # the scale's type, float32, float16
        want = generic._dequantize(npx, q, scale, zp, output_dtype=output_dtype, **kw)
        got = dev.get(cuda_quant.dequantize_from(dev.xp, dev.put(_storage(q)), target, dev.put(scale),
                                                 dev.put(_storage(zp)), output_dtype=output_dtype, **kw))
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", [np.uint8, np.int8, np.uint16, np.int16], ids=lambda t: np.dtype(t).name)
def test_the_ops_on_device_types(dev, target):
    rng = np.random.default_rng(5)
    x = _input(rng)
    scale, zp = _params(rng, "axis", np.float32, target, False)
    want = generic._quantize(npx, x, scale, zp, axis=1)
    _same(dev.get(cuda_quant.quantize(dev.xp, dev.put(x), dev.put(scale), dev.put(zp), axis=1)), want)
    got = dev.get(cuda_quant.dequantize(dev.xp, dev.put(want), dev.put(scale), dev.put(zp), axis=1))
    np.testing.assert_array_equal(got, generic._dequantize(npx, want, scale, zp, axis=1))


def test_host_only_output_types_come_back_on_the_host(dev):
    from gpuops.dtypes import onnx_dtype

    x = _input(np.random.default_rng(6))
    scale = np.array(0.25, np.float32)
    for target in (ml_dtypes.float8_e4m3fn, ml_dtypes.int4):
        got = cuda_quant.quantize(dev.xp, dev.put(x), dev.put(scale), None, output_dtype=onnx_dtype(target))
        assert isinstance(got, np.ndarray)  # float8 / int4 cannot live on the device
        _same(got, generic._quantize(npx, x, scale, None, output_dtype=onnx_dtype(target)))
    # host inputs (a node the session runs on the host) go to the generic op
    assert cuda_quant.quantize(dev.xp, x, scale, None) is None
    assert cuda_quant.dequantize(dev.xp, np.zeros(3, np.uint8), scale) is None


@pytest.mark.parametrize("target", FLOAT8, ids=lambda t: np.dtype(t).name)
def test_float8_rounding_of_every_float16_value(dev, target):
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16)  # every half, NaN and inf included
    scale = np.array(1.0, np.float16)
    for saturate in (0, 1):
        with np.errstate(all="ignore"):
            want = generic._quantize(npx, x, scale, None, saturate=saturate, output_dtype=_onnx(target))
        got = cuda_quant.quantize_to(dev.xp, dev.put(x), dev.put(scale), None, target, saturate=saturate)
        _same(dev.get(got), _storage(want))
    codes = np.arange(256, dtype=np.uint8)  # and every float8 code back
    for scale in (np.array(1.0, np.float32), np.array(0.37, np.float16)):
        want = generic._dequantize(npx, codes.view(target), scale)
        got = dev.get(cuda_quant.dequantize_from(dev.xp, dev.put(codes), target, dev.put(scale)))
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", FLOAT8, ids=lambda t: np.dtype(t).name)
def test_float8_nan_keeps_its_sign(dev, target):
    # a GPU's division returns a NaN without its operand's sign: the kernel must read it from storage
    neg_nan = np.array(0xFFC00001, np.uint32).view(np.float32)
    x = np.array([neg_nan, -neg_nan, 1.5, -2.0], np.float32)
    for scale in (np.array(1.0, np.float32), neg_nan.reshape(()), np.array(-neg_nan, np.float32)):
        with np.errstate(all="ignore"):
            want = generic._quantize(npx, x, scale, None, saturate=1, output_dtype=_onnx(target))
        got = cuda_quant.quantize_to(dev.xp, dev.put(x), dev.put(scale), None, target, saturate=1)
        _same(dev.get(got), _storage(want))


def _onnx(dtype) -> int:
    from gpuops.dtypes import onnx_dtype

    return onnx_dtype(dtype)


def test_int32_dequantize_and_edge_shapes(dev):
    rng = np.random.default_rng(1)
    x = rng.integers(-(2**31), 2**31 - 1, (4, 9), dtype=np.int64).astype(np.int32)
    scale = np.array(1e-3, np.float32)
    np.testing.assert_array_equal(dev.get(cuda_quant.dequantize(dev.xp, dev.put(x), dev.put(scale))),
                                  generic._dequantize(npx, x, scale))
    for shape in [(0, 5), (5, 0), ()]:  # empty and scalar inputs
        xs = rng.standard_normal(shape).astype(np.float32)
        s, z = np.array(0.1, np.float32), np.array(3, np.uint8)
        _same(dev.get(cuda_quant.quantize(dev.xp, dev.put(xs), dev.put(s), dev.put(z))),
              generic._quantize(npx, xs, s, z))
    # an odd blocked case: the last block is partial, the axis is the last one
    xs = _input(rng, (4, 6, 11))
    s = rng.uniform(0.1, 2, (4, 6, 3)).astype(np.float32)
    z = rng.integers(-8, 8, (4, 6, 3)).astype(ml_dtypes.int4)
    got = cuda_quant.quantize_to(dev.xp, dev.put(xs), dev.put(s), dev.put(_storage(z)), ml_dtypes.int4, axis=-1,
                                 block_size=4)
    _same(dev.get(got), _storage(generic._quantize(npx, xs, s, z, axis=-1, block_size=4)))


def test_unsupported_cases_use_the_generic_op(dev):
    x = np.ones((2, 3), np.float32)
    assert cuda_quant.quantize(dev.xp, dev.put(x), dev.put(np.ones(4, np.float32)), None) is None  # bad axis length
    assert cuda_quant.quantize(dev.xp, dev.put(x.astype(np.float64)), dev.put(np.array(1.0)), None) is None


@pytest.mark.parametrize("case", ["random", "empty", "all-zero", "positive", "negative", "float16", "odd-large"])
def test_dynamic_quantize_linear(dev, case):
    rng = np.random.default_rng(2)
    x = {"random": (rng.standard_normal((3, 50)) * 7).astype(np.float32),
         "empty": np.zeros((0, 4), np.float32),
         "all-zero": np.zeros(5, np.float32),
         "positive": rng.uniform(0.5, 3, 77).astype(np.float32),
         "negative": -rng.uniform(0.5, 3, 77).astype(np.float32),
         "float16": (rng.standard_normal(100) * 3).astype(np.float16),
         "odd-large": (rng.standard_normal(12345) * 9).astype(np.float32)}[case]
    want = generic.DynamicQuantizeLinear(npx, x)
    got = cuda_quant.DynamicQuantizeLinear(dev.xp, dev.put(x))
    for g, w in zip(got, want):
        g = dev.get(g)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
