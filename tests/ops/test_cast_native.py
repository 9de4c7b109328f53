"""Cast float32 <-> float16 on the CPU by the native kernel (gpuops/ops/cpu/cast.py, cpu_kernels/cast.c):
bit for bit NumPy's astype (round to nearest even, overflow to inf, subnormals), NaN staying NaN, for
every Cast version; other casts and inputs go to the generic op."""

import numpy as np
import pytest
from onnx import TensorProto

from gpuops import native
import gpuops.ops  # noqa: F401  (registers the ops)
from gpuops.registry import resolve

pytestmark = pytest.mark.skipif(native.function("cast_f32_f16") is None, reason="native CPU kernels unavailable")

RNG = np.random.default_rng(5)
_VERSIONS = (6, 19, 24)


def _cast(x, to, since):
    return resolve("", "Cast", since, "cpu").fn(np, x, to=to)


def _same_bits(got, want):
    """Equal bit patterns, or NaN in both (a signalling NaN comes out quiet)."""
    bits = {2: np.uint16, 4: np.uint32}[want.itemsize]
    same = got.view(bits) == want.view(bits)
    return bool((same | (np.isnan(got) & np.isnan(want))).all())


@pytest.mark.parametrize("since", _VERSIONS)
def test_float32_to_float16_is_numpys_rounding(since):
    bits = RNG.integers(0, 2 ** 32, 300_006, dtype=np.uint64).astype(np.uint32)
    edges = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 65504, 65519.996, 65520, 1e-8, 2.9802322e-08,
                      2.9802326e-08, 5.9604645e-08, 6.097555e-05, 6.1035156e-05, 1 + 2 ** -11, 1 + 3 * 2 ** -11],
                     np.float32)
    for x in (bits.view(np.float32).reshape(6, -1), edges, edges[::-1], RNG.standard_normal((2, 5)).astype(np.float32)):
        with np.errstate(over="ignore"):
            want = x.astype(np.float16)
        got = _cast(x, TensorProto.FLOAT16, since)
        assert got.dtype == np.float16 and got.shape == x.shape and _same_bits(got, want)


@pytest.mark.parametrize("since", _VERSIONS)
def test_float16_to_float32_is_exact(since):
    h = np.arange(2 ** 16 + 3, dtype=np.uint32).astype(np.uint16).view(np.float16)  # every pattern, a tail
    got = _cast(h, TensorProto.FLOAT, since)
    assert got.dtype == np.float32 and _same_bits(got, h.astype(np.float32))
    square = h[:4096].reshape(64, 64)[:, ::3]  # not contiguous
    assert _same_bits(_cast(square, TensorProto.FLOAT, since), square.astype(np.float32))


def test_other_casts_and_empty_inputs_are_the_generic_ops():
    x = RNG.standard_normal((3, 4))
    assert _same_bits(_cast(x, TensorProto.FLOAT16, 19), x.astype(np.float16))  # float64: NumPy's
    assert _cast(np.zeros((0, 3), np.float32), TensorProto.FLOAT16, 6).shape == (0, 3)
    assert (_cast(np.float32([1.5, -2.0]), TensorProto.INT32, 6) == [1, -2]).all()


_PLAIN = [TensorProto.BOOL, TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16,
          TensorProto.INT32, TensorProto.UINT32, TensorProto.INT64, TensorProto.UINT64, TensorProto.FLOAT16,
          TensorProto.FLOAT, TensorProto.DOUBLE]


@pytest.mark.parametrize("since", _VERSIONS)
def test_casts_between_numpys_types_are_the_generic_ops(since):
    """int64 -> int32 (wrapping), float -> int (truncating), NaN -> bool and the rest: the generic op's
    values and types, the input untouched; strings, ml_dtypes types and a bad round_mode still its own."""
    generic = resolve("", "Cast", since, None).fn
    values = np.array([0, 1, -1, 2 ** 31, -2 ** 31 - 1, 2 ** 40 + 5, 7, -300], np.int64)
    floats = np.array([0.0, -0.5, 1.9, -2.7, np.nan, 1e3, 65504.0, -0.0])
    sources = [values, values.astype(np.int32), values.astype(np.uint8), values.astype(bool),
               values.reshape(2, 4)[:, ::2], np.zeros((0, 2), np.int64)]
    sources += [floats.astype(t) for t in (np.float64, np.float32, np.float16)]
    for x in sources:
        keep = x.copy()
        for to in _PLAIN:
            with np.errstate(all="ignore"):
                want, got = generic(np, x, to=to), _cast(x, to, since)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
            assert got is not x and not np.shares_memory(got, x)
        np.testing.assert_array_equal(x, keep)
    strings = np.array(["1", "-2"], object)
    np.testing.assert_array_equal(_cast(strings, TensorProto.INT64, since), generic(np, strings, to=TensorProto.INT64))
    np.testing.assert_array_equal(_cast(values, TensorProto.STRING, since), generic(np, values, to=TensorProto.STRING))
    b = _cast(floats.astype(np.float32), TensorProto.BFLOAT16, since)
    assert b.dtype == generic(np, floats.astype(np.float32), to=TensorProto.BFLOAT16).dtype
    if since >= 24:
        with pytest.raises(Exception, match="round_mode"):
            resolve("", "Cast", since, "cpu").fn(np, values, to=TensorProto.INT32, round_mode="sideways")
