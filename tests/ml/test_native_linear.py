"""LinearClassifier and Normalizer by cpu_kernels/linear_ml.c (via gpuops/ops/cpu/ml.py) against the
generic NumPy ops of gpuops/ops/ml.

The bounds come from the arithmetic (u = 2**-24, float32's unit roundoff): the kernel sums a row's
F products in order and BLAS in its own order, each within F u of the sum of the products' magnitudes,
and both then add the intercept (u of the result): the scores differ by at most 2 (F + 1) u (|x| |W|^T
+ |b|). A softmax probability moves by at most 2 d p when the scores move by d; the kernel's e^x is
within 2 ulp, the sum of C of them within C u, and it multiplies by 1 / sum (2 rounding steps) where
NumPy divides: (C + 8) u p more. Normalizer's L1 and L2 norms are sums of n non-negative terms (in
order here, pairwise in NumPy): each within n u of the exact norm, the quotients within 1 ulp more,
so (2 n + 2) u of the value; MAX is exact."""

import numpy as np
import pytest

import gpuops
from gpuops import native
from gpuops.ops.cpu import ml as cpu_ml
from gpuops.ops.ml import linear, preprocess

from tests.ml.test_ops import ml
from tests.ops.common import make_model

needs_cc = pytest.mark.skipif(native.compiler() is None or not native.enabled(),
                              reason="no C compiler or native kernels off: the NumPy code runs")
RNG = np.random.default_rng(17)
U = 2.0 ** -24


def _session(node, feeds):
    model = make_model(node, feeds, opset=17, opsets={"ai.onnx.ml": 3})
    return gpuops.InferenceSession(model, device="cpu", threads=1)


def _linear(F, C, intercepts=True, post="SOFTMAX"):
    attrs = dict(coefficients=RNG.normal(size=F * C).astype(np.float32).tolist(), classlabels_ints=list(range(C)),
                 post_transform=post, multi_class=1)
    if intercepts:
        attrs["intercepts"] = RNG.normal(size=C).astype(np.float32).tolist()
    return attrs


def score_bound(x, attrs):
    C = len(attrs.get("intercepts") or attrs.get("classlabels_ints") or attrs["classlabels_strings"])
    W = np.abs(np.asarray(attrs["coefficients"], np.float64).reshape(C, -1))
    b = np.abs(np.asarray(attrs.get("intercepts", [0.0] * C), np.float64))
    return 2 * (W.shape[1] + 1) * U * (np.abs(x.astype(np.float64)) @ W.T + b)


@needs_cc
@pytest.mark.parametrize("F, C", [(4, 3), (1, 2), (17, 5), (64, 10), (3, 33)])
@pytest.mark.parametrize("post", ["NONE", "SOFTMAX"])
@pytest.mark.parametrize("intercepts", [True, False])
@pytest.mark.parametrize("n", [1, 16, 70])
def test_linear_classifier_matches_numpy(F, C, post, intercepts, n):
    attrs = _linear(F, C, intercepts, post)
    x = RNG.normal(size=(n, F)).astype(np.float32)
    if n > 1:
        x[1, 0] = np.nan  # a NaN score: the row's label is its first NaN, its probabilities NaN
    got = _session(ml("LinearClassifier", ["x"], ["label", "scores"], **attrs), {"x": x}).run(None, {"x": x})
    check_linear(x, attrs, got)


def check_linear(x, attrs, got):
    """``got`` (labels, scores) are the generic op's within the module's bounds (a label may differ only at
    a near tie of the two highest scores)."""
    label, scores = got
    x = x.reshape(-1, x.shape[-1])
    want_label, want = linear.LinearClassifier(np, x, **attrs)
    assert label.dtype == want_label.dtype and scores.dtype == np.float32 and scores.shape == want.shape
    raw = linear.LinearClassifier(np, x, **{**attrs, "post_transform": "NONE"})[1].astype(np.float64)
    d = score_bound(x, attrs)
    nan = np.isnan(raw).any(axis=1)
    top2 = np.sort(np.where(np.isnan(raw), 0.0, raw), axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0] > 2 * d.max(axis=1)) | nan
    np.testing.assert_array_equal(label[clear], want_label[clear])
    C = want.shape[1]
    if attrs["post_transform"] == "NONE":
        tol = d
    else:
        tol = np.abs(want) * (2 * d.max(axis=1, keepdims=True) + (C + 8) * U) + 1e-37
    np.testing.assert_array_equal(np.isnan(scores), np.isnan(want))
    ok = ~np.isnan(want)
    assert (np.abs(scores[ok] - want[ok]) <= tol[ok]).all()


@needs_cc
@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("n", [1, 3, 8, 9, 40, 300])
def test_normalizer_matches_numpy(norm, n):
    x = RNG.normal(size=(12, n)).astype(np.float32)
    x[2] = 0  # a norm of 0: the row stays as it is
    x[3] = -np.abs(x[3])  # MAX of a negative row
    x[4, 0] = np.nan
    got = cpu_ml.Normalizer(np, x, norm=norm)
    want = preprocess.Normalizer(np, x, norm=norm)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    tol = 0 if norm == "MAX" else (2 * n + 2) * U
    ok = ~np.isnan(want)
    assert (np.abs(got[ok] - want[ok]) <= tol * np.abs(want[ok])).all()


@needs_cc
def test_kernels_off_give_the_numpy_results():
    attrs = _linear(4, 3)
    x = RNG.normal(size=(5, 4)).astype(np.float32)
    sess = _session(ml("LinearClassifier", ["x"], ["label", "scores"], **attrs), {"x": x})
    with native.disabled():
        got = sess.run(None, {"x": x})
        norm = cpu_ml.Normalizer(np, x, norm="L2")
    want = linear.LinearClassifier(np, x, **attrs)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(norm, preprocess.Normalizer(np, x, norm="L2"))


def test_read_only_and_strided_rows():
    attrs = _linear(4, 3)
    x = RNG.normal(size=(6, 8)).astype(np.float32)[:, ::2]  # not contiguous
    ro = np.ascontiguousarray(x)
    ro.flags.writeable = False
    sess = _session(ml("LinearClassifier", ["x"], ["label", "scores"], **attrs), {"x": ro})
    a, b = sess.run(None, {"x": x}), sess.run(None, {"x": ro})
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(cpu_ml.Normalizer(np, x, norm="L1"), cpu_ml.Normalizer(np, ro, norm="L1"))
