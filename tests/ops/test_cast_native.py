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
