"""gpuops' private fused ops on the CPU (gpuops/ops/contrib/private.py, their CPU overrides in
gpuops/ops/cpu/conv.py and pool.py, the native squeeze_excite_f32 and the planned conv's SiLU epilogue)
against float64 references, with error bounds from float32 arithmetic propagated through each step."""

import numpy as np
import pytest

from gpuops import native
from gpuops.errors import NodeError
from gpuops.ops.contrib import private
from gpuops.ops.cpu import conv as cpu_conv
from gpuops.registry import resolve

from .test_conv_planned import CASES, _bound, _case

pytestmark = pytest.mark.skipif(native.function("squeeze_excite_f32") is None, reason="native CPU kernels unavailable")

EPS = float(np.finfo(np.float32).eps)


def _silu(v):
    return v / (1 + np.exp(-v))


@pytest.mark.parametrize("name", CASES)
def test_conv_silu_matches_conv_then_silu(name):
    X, W, B, attrs = _case(name)
    X.flat[:3] = [40.0, -40.0, 0.0]
    want, tol = _bound(X, W, B, None, attrs)
    # SiLU's slope lies in [-0.1, 1.1]: the conv's error at most 1.1 times, plus the SiLU's own roundings
    # (its e^x within 2 ulp, a division and a product)
    tol = 1.1 * tol + 8 * EPS * np.abs(want)
    want = _silu(want)
    kept = cpu_conv.prepare_conv({1: W, 2: B}, attrs)
    for _ in range(2):  # planned on the first call, run as planned on the second
        got = cpu_conv.ConvSilu(np, X, W, B, prepared=kept, **attrs)
        assert got.dtype == np.float32 and got.shape == want.shape
        assert (np.abs(got - want) <= tol).all(), np.abs(got - want).max()
    assert all(isinstance(r, cpu_conv._Planned) for r in kept.runs.values()), kept.runs
    for got in (cpu_conv.ConvSilu(np, X, W, B, **attrs), private.ConvSilu(np, X, W, B, **attrs)):  # unplanned
        assert (np.abs(got - want) <= tol).all(), np.abs(got - want).max()


def test_conv_silu_keeps_nan_and_float64():
    X, W, B, attrs = _case("depthwise")
    X[0, 0, 3, 3] = np.nan
    got = cpu_conv.ConvSilu(np, X, W, B, prepared=cpu_conv.prepare_conv({1: W, 2: B}, attrs), **attrs)
    assert np.isnan(got[0, 0, 2:5, 2:5]).all() and np.isfinite(got[0, 1]).all()
    f = np.float64
    got = cpu_conv.ConvSilu(np, X.astype(f), W.astype(f), B.astype(f), **attrs)
    assert got.dtype == f and np.isnan(got[0, 0, 3, 3])


_SLOPES = {"Relu": 1.0, "HardSwish": 1.5, "Silu": 1.1, "Sigmoid": 0.25}


def _se_reference(X, W1, B1, W2, B2, inner, gate, alpha, beta):
    """The float64 block and its bound: each step's error carried through the next (a sum of n products
    rounds by at most n * eps * the sum of their magnitudes; an activation scales an error by at most its
    slope and adds a few roundings of its own)."""
    f = np.float64
    X, W1, B1, W2, B2 = (a.astype(f) for a in (X, W1, B1, W2, B2))
    N, C, H, W = X.shape
    w1, w2 = W1.reshape(W1.shape[:2]), W2.reshape(W2.shape[:2])
    p = X.mean(axis=(2, 3))
    e_p = (H * W + 1) * EPS * np.abs(X).mean(axis=(2, 3))
    c1 = p @ w1.T + B1
    e_c1 = (C + 1) * EPS * (np.abs(p) @ np.abs(w1).T + np.abs(B1)) + e_p @ np.abs(w1).T
    h = private.activate(np, c1, inner)
    e_h = _SLOPES[inner] * e_c1 + 8 * EPS * np.abs(h)
    c2 = h @ w2.T + B2
    e_c2 = (W1.shape[0] + 1) * EPS * (np.abs(h) @ np.abs(w2).T + np.abs(B2)) + e_h @ np.abs(w2).T
    g = private.activate(np, c2, gate, alpha, beta)
    e_g = (_SLOPES[gate] if gate == "Sigmoid" else abs(alpha)) * e_c2 + 8 * EPS
    Y = X * g[:, :, None, None]
    return Y, np.abs(X) * e_g[:, :, None, None] + EPS * np.abs(Y) + 1e-30


@pytest.mark.parametrize("inner", private.INNER)
@pytest.mark.parametrize("gate", private.GATES)
@pytest.mark.parametrize("shape", [(2, 24, 7, 9), (1, 40, 1, 1), (1, 3, 5, 50), (1, 64, 96, 96)])
@pytest.mark.parametrize("threads", [1, 2])
def test_squeeze_excite_matches_the_reference(inner, gate, shape, threads):
    rng = np.random.default_rng(sum(shape))
    N, C, H, W = shape
    R = max(1, C // 4)
    X = rng.standard_normal(shape).astype(np.float32)
    W1, W2 = (rng.standard_normal(s).astype(np.float32) / 3 for s in ((R, C, 1, 1), (C, R, 1, 1)))
    B1, B2 = rng.standard_normal(R).astype(np.float32), rng.standard_normal(C).astype(np.float32)
    alpha, beta = (1 / 6, 0.5) if gate == "HardSigmoid" else (0.2, 0.5)
    want, tol = _se_reference(X, W1, B1, W2, B2, inner, gate, alpha, beta)
    op = f"SqueezeExcite{inner}{gate}"
    old = native.threads()
    native.set_threads(threads)
    try:
        got = resolve(private.DOMAIN, op, 1, "cpu").fn(np, X, W1, B1, W2, B2, alpha=alpha, beta=beta)
    finally:
        native.set_threads(old)
    assert got.dtype == np.float32 and got.shape == shape
    assert (np.abs(got - want) <= tol).all(), np.abs(got - want).max()
    generic = private.squeeze_excite(np, X, W1, B1, W2, B2, inner, gate, alpha, beta)
    assert (np.abs(generic - want) <= tol).all(), np.abs(generic - want).max()


def test_squeeze_excite_errors_name_the_shapes():
    X = np.ones((1, 8, 4, 4), np.float32)
    W1, B1, B2 = np.ones((2, 8, 1, 1), np.float32), np.ones(2, np.float32), np.ones(8, np.float32)
    for fn in (resolve(private.DOMAIN, "SqueezeExciteReluSigmoid", 1, "cpu").fn, private.squeeze_excite):
        args = (np, X, W1, B1, np.ones((8, 3, 1, 1), np.float32), B2) + (("Relu", "Sigmoid") if fn is
                                                                          private.squeeze_excite else ())
        with pytest.raises(NodeError, match=r"weights .*\(8, 3, 1, 1\).* do not fit an input of shape \(1, 8, 4, 4\)"):
            fn(*args)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.int8])
@pytest.mark.parametrize("shape, classes", [((2, 7, 1), (1, 1, 9)), ((1,), (9,)), ((3, 1), (9,)), ((4, 2, 1), (9,))])
def test_one_hot_matmul_copies_the_rows_it_names(dtype, shape, classes):
    """The CPU's OneHotMatMul (rows of the kept table, zero rows outside [0, D)) against the generic op's
    one-hot and product: the same numbers (each product sums one row and zeros), for indices below 0,
    in range and past D, of every integer type; and the generic op where nothing was kept."""
    from gpuops.ops.cpu import indexing

    rng = np.random.default_rng(4)
    D, E = classes[-1], 5
    R = np.arange(D, dtype=dtype).reshape(classes)
    W = rng.standard_normal((D, E)).astype(np.float32)
    W[0, 0] = -0.0
    info = np.iinfo(dtype)
    A = rng.integers(max(info.min, -3), D + 3, shape).astype(dtype)
    A.flat[:2] = [info.min, info.max][:A.size]
    kept = indexing.prepare_one_hot({1: R, 2: W}, {})
    assert kept is not None
    want = private.OneHotMatMul(np, A, R, W)
    got = indexing.OneHotMatMul(np, A, R, W, prepared=kept)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert indexing._one_hot_rows(kept, A, R, W)
    np.testing.assert_array_equal(indexing.OneHotMatMul(np, A, R, W), want)


def test_one_hot_matmul_keeps_only_classes_0_to_d_and_finite_tables():
    from gpuops.ops.cpu import indexing

    R, W = np.arange(4, dtype=np.int64)[None], np.ones((4, 2), np.float32)
    assert indexing.prepare_one_hot({1: R, 2: W}, {}) is not None
    for r, w in [(R + 1, W), (R[:, ::-1], W), (R.astype(np.float32), W), (R, W[:3]), (R, W.astype(np.float64)),
                 (R, np.where(np.eye(4, 2) > 0, np.inf, W).astype(np.float32)), (np.tile(R, (2, 1)), W)]:
        assert indexing.prepare_one_hot({1: r, 2: w}, {}) is None
    A = np.array([[0, 3, 2, 3], [1, 1, 2, 0]], np.int64)  # a last axis of D, not 1: the generic op's elementwise

    kept = indexing.prepare_one_hot({1: R, 2: W}, {})
    assert not indexing._one_hot_rows(kept, A, R, W)
    np.testing.assert_array_equal(indexing.OneHotMatMul(np, A, R, W, prepared=kept), private.OneHotMatMul(np, A, R, W))
