"""The fast CPU compute paths (strided im2col, direct 1x1 GEMM, vectorised depthwise conv, float16 in
float32, exact integer GEMMs through float BLAS, RNN input projections) against onnxruntime and
against the generic formulas they replace."""

import array_api_compat.numpy as xnp
import numpy as np
import pytest

from gpuops.ops import conv as conv_mod

from .common import DEVICES, assert_op_matches_ort, run_op, run_ort, one_node_model

# N, C, spatial, M, kernel, group, strides, dilations, pads
CONV_CASES = {
    "1d": (2, 4, (9,), 6, (3,), 1, (2,), (1,), (1, 0)),
    "2d-grouped-dilated": (1, 6, (7, 8), 4, (3, 2), 2, (1, 2), (2, 1), (1, 0, 2, 1)),
    "3d": (2, 3, (5, 6, 4), 2, (2, 3, 1), 1, (1, 1, 2), (1, 2, 1), (0, 1, 0, 1, 0, 1)),
    "depthwise": (1, 8, (10, 10), 8, (3, 3), 8, (2, 2), (1, 1), (1, 1, 1, 1)),
    "depthwise-mult2-dilated": (2, 4, (6, 7), 8, (3, 3), 4, (1, 1), (2, 2), (2, 2, 2, 2)),
    "1x1-direct": (2, 6, (5, 5), 4, (1, 1), 1, (1, 1), (1, 1), (0, 0, 0, 0)),
    "1x1-strided-grouped": (1, 6, (5, 5), 6, (1, 1), 3, (2, 2), (1, 1), (0, 0, 0, 0)),
    "1x1-padded": (1, 4, (6, 6), 4, (1, 1), 2, (1, 1), (1, 1), (1, 1, 1, 1)),
    "3d-depthwise": (1, 3, (4, 5, 6), 3, (2, 2, 3), 3, (1, 2, 1), (1, 1, 2), (1, 0, 0, 0, 1, 1)),
}


def _conv_feeds(case, dtype=np.float32, seed=0):
    N, C, spatial, M, kernel, group, *_ = case
    rng = np.random.default_rng(seed)
    return {"X": rng.standard_normal((N, C) + spatial).astype(dtype),
            "W": rng.standard_normal((M, C // group) + kernel).astype(dtype),
            "B": rng.standard_normal(M).astype(dtype)}


def _conv_attrs(case):
    *_, group, strides, dilations, pads = case
    return {"group": group, "strides": list(strides), "dilations": list(dilations), "pads": list(pads)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(CONV_CASES))
def test_conv_paths_match_onnxruntime(name, device):
    case = CONV_CASES[name]
    assert_op_matches_ort("Conv", _conv_feeds(case), device, rtol=1e-5, atol=1e-5, **_conv_attrs(case))


@pytest.mark.parametrize("name", sorted(CONV_CASES))
def test_conv_paths_match_the_tap_by_tap_formula(name, monkeypatch):
    """The strided im2col / direct / depthwise paths against the generic path: a stack of one strided
    view per tap and a batched matmul over the groups."""
    case = CONV_CASES[name]
    f = _conv_feeds(case, np.float64)
    attrs = _conv_attrs(case)
    fast = conv_mod.conv(xnp, f["X"], f["W"], f["B"], **attrs)

    def generic(xp, X, W, B, group, strides, dilations, pads):
        kernel, s, d, pb, pe = conv_mod.spatial_attrs(X.ndim - 2, W.shape[2:], strides, dilations, pads)
        pb, pe, out = conv_mod.conv_geometry(X.shape[2:], kernel, s, d, pb, pe)
        cols = np.stack(list(conv_mod.window_taps(xp, X, kernel, s, d, pb, pe, out)), axis=2)
        cols = cols.reshape(X.shape[0], -1, int(np.prod(out)))
        Y = conv_mod.grouped_matmul(xp, W.reshape(W.shape[0], -1), cols, group)
        return Y.reshape((X.shape[0], W.shape[0]) + tuple(out)) + B.reshape((1, -1) + (1,) * len(out))

    np.testing.assert_allclose(fast, generic(xnp, f["X"], f["W"], f["B"], **attrs), rtol=1e-12, atol=1e-12)
    monkeypatch.setattr(conv_mod, "_as_strided", lambda xp: None)  # a namespace without as_strided
    np.testing.assert_allclose(conv_mod.conv(xnp, f["X"], f["W"], f["B"], **attrs), fast, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["2d-grouped-dilated", "depthwise", "1x1-direct", "3d"])
def test_float16_conv_is_computed_in_float32(name, device):
    """float16 Conv equals the float32 conv of the same values rounded once to float16."""
    case = CONV_CASES[name]
    f16 = _conv_feeds(case, np.float16, seed=1)
    attrs = _conv_attrs(case)
    (got,) = run_op("Conv", f16, device, **attrs)
    f32 = {k: v.astype(np.float32) for k, v in f16.items()}
    (want,) = run_ort(one_node_model("Conv", f32, **attrs), f32)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float16).astype(np.float32),
                               rtol=2e-3, atol=2e-3)
