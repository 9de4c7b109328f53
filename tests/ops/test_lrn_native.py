"""LRN on the CPU (gpuops/ops/cpu/normalization.py, cpu_kernels/rows.c's lrn_f32) against the generic op,
the oracle.

Both sides square in float32 and add the window's squares in the same order, so the sums agree bit for
bit; they differ in the power: NumPy's powf is within an ulp, the kernel's sqrt(d) sqrt(sqrt(d)) for
beta 0.75 within two (three roundings of correctly rounded square roots and a product), and the
quotients then round once each. Four ulps of float32 (2^-21 relative) bound the difference."""

import numpy as np
import pytest

from gpuops import native, registry

ULPS4 = 2.0 ** -21

needs_native = pytest.mark.skipif(native.function("lrn_f32") is None,
                                  reason="no C compiler: native kernels fall back to NumPy")


def _impls():
    cpu = registry.resolve("", "LRN", 13, "cpu")
    generic = registry.resolve("", "LRN", 13, None)
    assert cpu.device == "cpu" and generic.device is None
    return cpu.fn, generic.fn


@needs_native
@pytest.mark.parametrize("shape", [(1, 64, 55, 55), (2, 7, 3, 5), (1, 3, 17), (2, 5, 2, 3, 4), (3, 1, 9, 9)])
@pytest.mark.parametrize("size, alpha, beta, bias", [(5, 1e-4, 0.75, 1.0), (3, 0.02, 0.6, 1.5), (4, 0.5, 0.75, 2.0),
                                                     (1, 1.0, 1.0, 0.5), (9, 3.0, 0.75, 1.0)])
def test_lrn_matches_the_generic_op(shape, size, alpha, beta, bias):
    cpu, generic = _impls()
    X = (np.random.default_rng(sum(shape) + size).standard_normal(shape) * 4).astype(np.float32)
    want = generic(np, X, alpha=alpha, beta=beta, bias=bias, size=size)
    got = cpu(np, X, alpha=alpha, beta=beta, bias=bias, size=size)
    assert got.dtype == np.float32 and got.shape == X.shape
    np.testing.assert_allclose(got, want, rtol=ULPS4, atol=0)


@needs_native
def test_lrn_of_specials_and_views_is_the_generic_ops():
    """NaN and infinities propagate as in NumPy (inf / inf is NaN); a strided view is read as it lies."""
    cpu, generic = _impls()
    X = np.random.default_rng(1).standard_normal((2, 8, 6, 6)).astype(np.float32)
    X[0, 3, 2, 2], X[1, 0, 0, 1], X[1, 7, 5, 5] = np.nan, np.inf, -np.inf
    for x in (X, X[:, :, ::2, 1:]):
        np.testing.assert_allclose(cpu(np, x, size=3), generic(np, x, size=3), rtol=ULPS4, atol=0, equal_nan=True)


@needs_native
def test_lrn_gives_the_same_bits_on_several_threads():
    cpu, _ = _impls()
    X = np.random.default_rng(2).standard_normal((2, 96, 27, 27)).astype(np.float32)
    one = cpu(np, X, size=5, alpha=1e-4, beta=0.75, bias=1.0)
    before = native.threads()
    native.set_threads(3)
    try:
        np.testing.assert_array_equal(cpu(np, X, size=5, alpha=1e-4, beta=0.75, bias=1.0), one)
    finally:
        native.set_threads(before)


def test_bad_size_is_the_generic_ops_error():
    cpu, _ = _impls()
    with pytest.raises(Exception, match="size must be a positive int"):
        cpu(np, np.ones((1, 3, 2, 2), np.float32), size=0)
