"""The CPU paths of Conv and pooling: on shifted flat planes (:class:`gpuops.ops.cpu.conv.Planes`) Conv
without an im2col copy (``_kn2row``), depthwise Conv and separable max/sum windows, and the blocked
im2col, against the tap-by-tap formulas (one strided view per kernel tap) and onnxruntime."""

import array_api_compat.numpy as xnp
import numpy as np
import pytest

from gpuops import native
from gpuops.ops import conv as conv_mod
from gpuops.ops import pool as generic_pool
from gpuops.ops import windows
from gpuops.ops.cpu import conv as cpu_conv
from gpuops.ops.cpu import pool as cpu_pool
from gpuops.ops.cpu import winograd

from .common import DEVICES, assert_op_matches_ort

# N, C, spatial, M, kernel, strides, dilations, pads
KN2ROW_CASES = {
    "3x3-pad1": (1, 12, (9, 8), 5, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    "strided-phases": (2, 7, (11, 10), 3, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    "stride3-dilated": (1, 5, (13, 12), 4, (3, 2), (3, 2), (2, 3), (2, 0, 1, 2)),
    "crop-negative-pads": (1, 6, (8, 9), 2, (2, 3), (1, 2), (1, 1), (-1, 1, 0, -2)),
    "5x5-unpadded": (2, 4, (7, 7), 3, (5, 5), (1, 1), (1, 1), (0, 0, 0, 0)),
    "1d": (2, 6, (17,), 4, (3,), (2,), (2,), (2, 1)),
    "3d": (1, 5, (5, 6, 4), 3, (3, 2, 2), (1, 2, 1), (1, 1, 2), (1, 0, 1, 1, 1, 0)),
}


def _generic_conv(X, W, strides, dilations, pads, group=1):
    """im2col as a stack of one strided view per tap, and one matmul per group."""
    kernel, s, d, pb, pe = windows.spatial_attrs(X.ndim - 2, W.shape[2:], strides, dilations, pads)
    pb, pe, out = windows.conv_geometry(X.shape[2:], kernel, s, d, pb, pe)
    cols = np.stack(list(windows.window_taps(xnp, X, kernel, s, d, pb, pe, out)), axis=2)
    Y = conv_mod.grouped_matmul(xnp, W.reshape(W.shape[0], -1), cols.reshape(X.shape[0], -1, int(np.prod(out))),
                                group)
    return Y.reshape((X.shape[0], W.shape[0]) + tuple(out)), (kernel, s, d, pb, out)


def _conv_inputs(case, dtype=np.float64, seed=0):
    N, C, spatial, M, kernel, *_ = case
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((N, C) + spatial).astype(dtype), rng.standard_normal((M, C) + kernel).astype(dtype),
            rng.standard_normal(M).astype(dtype))


@pytest.mark.parametrize("name", sorted(KN2ROW_CASES))
def test_kn2row_matches_the_tap_by_tap_formula(name):
    case = KN2ROW_CASES[name]
    X, W, B = _conv_inputs(case)
    *_, strides, dilations, pads = case
    want, (kernel, s, d, pb, out) = _generic_conv(X, W, strides, dilations, pads)
    got = cpu_conv._kn2row(X, W, B, kernel, s, d, pb, out)
    assert got.flags.c_contiguous
    np.testing.assert_allclose(got, want + B.reshape((1, -1) + (1,) * len(out)), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cpu_conv._kn2row(X, W, None, kernel, s, d, pb, out), want, rtol=1e-12, atol=1e-12)


def test_kn2row_runs_where_it_pays_and_keeps_its_weights_per_step(monkeypatch):
    """DenseNet's growth conv (32 outputs from 128 channels, 3x3) takes the path, a square one does not;
    the rearranged weights are computed once for the step's weight (its prepared ConvWeights)."""
    assert cpu_conv._kn2row_pays(128, 32, [3, 3], [1, 1], [1, 1], [28, 28], 28 * 28)
    assert not cpu_conv._kn2row_pays(64, 64, [3, 3], [1, 1], [1, 1], [56, 56], 56 * 56)
    assert not cpu_conv._kn2row_pays(16, 4, [3, 3], [1, 1], [1, 1], [28, 28], 28 * 28)  # inner size too small
    rng = np.random.default_rng(1)
    X = rng.standard_normal((1, 128, 14, 14)).astype(np.float32)
    W = rng.standard_normal((32, 128, 3, 3)).astype(np.float32)
    W.flags.writeable = False
    calls = []
    real = cpu_conv._kn2row
    monkeypatch.setattr(cpu_conv, "_kn2row", lambda *a: calls.append(1) or real(*a))
    kept = cpu_conv.prepare_conv({1: W}, {"pads": [1, 1, 1, 1]})
    with native.disabled():  # else the Winograd kernels take this conv
        got = cpu_conv.conv(xnp, X, W, pads=[1, 1, 1, 1], kept=kept)
        made = {k: v for k, v in kept._made.items() if k[0] == "kn2row"}
        got_again = cpu_conv.conv(xnp, X, W, pads=[1, 1, 1, 1], kept=kept)
    assert len(calls) == 2
    assert made and all(kept._made[k] is v and not v.flags.writeable for k, v in made.items())
    want, _ = _generic_conv(X.astype(np.float64), W.astype(np.float64), [1, 1], [1, 1], [1, 1, 1, 1])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got_again, got)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["3x3-pad1", "strided-phases", "stride3-dilated", "3d"])
def test_kn2row_convs_match_onnxruntime(name, device, monkeypatch):
    monkeypatch.setattr(cpu_conv, "_kn2row_pays", lambda *a: True)  # small shapes: force the path
    case = KN2ROW_CASES[name]
    X, W, B = _conv_inputs(case, np.float32)
    *_, strides, dilations, pads = case
    assert_op_matches_ort("Conv", {"X": X, "W": W, "B": B}, device, rtol=1e-5, atol=1e-5, strides=list(strides),
                          dilations=list(dilations), pads=list(pads))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pads", [[1, 1, 1, 1], [0, 1, 1, 0]])
def test_winograd_convs_match_onnxruntime(pads, device):
    """3x3 stride-1 convs with enough channels and tiles take F(2x2, 3x3) on the CPU (native kernels)."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((2, 64, 27, 20)).astype(np.float32)
    W = (rng.standard_normal((24, 64, 3, 3)) / 24).astype(np.float32)
    B = rng.standard_normal(24).astype(np.float32)
    assert device != "cpu" or native.compiler() is None or winograd.applies(X, W, [3, 3], [1, 1], [1, 1], 1, [27, 20])
    assert_op_matches_ort("Conv", {"X": X, "W": W, "B": B}, device, rtol=1e-5, atol=1e-5, pads=pads)


@pytest.mark.parametrize("group", [1, 3])
@pytest.mark.parametrize("name", ["strided-phases", "stride3-dilated", "crop-negative-pads", "1d", "3d"])
def test_blocked_im2col_matches_the_tap_by_tap_formula(name, group, monkeypatch):
    """A block per output row (the smallest blocks) and one block for all, on a transposed (not
    C-contiguous) input, with groups."""
    N, C, spatial, M, kernel, strides, dilations, pads = KN2ROW_CASES[name]
    rng = np.random.default_rng(5)
    X = rng.standard_normal((N, C * group) + spatial[::-1]).transpose((0, 1) + tuple(range(len(spatial) + 1, 1, -1)))
    W = rng.standard_normal((M * group, C) + kernel)
    B = rng.standard_normal(M * group)
    want, (_, _, _, _, out) = _generic_conv(X, W, strides, dilations, pads, group)
    want = want + B.reshape((1, -1) + (1,) * len(out))
    attrs = {"group": group, "strides": list(strides), "dilations": list(dilations), "pads": list(pads)}
    np.testing.assert_allclose(cpu_conv.conv(xnp, X, W, B, **attrs), want, rtol=1e-12, atol=1e-12)
    monkeypatch.setattr(cpu_conv, "BLOCK_BYTES", 1)
    monkeypatch.setattr(cpu_conv, "BLOCK_COLUMNS", 1)
    monkeypatch.setattr(cpu_conv, "_kn2row_pays", lambda *a: False)
    np.testing.assert_allclose(cpu_conv.conv(xnp, X, W, B, **attrs), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("multiplier", [1, 2])
@pytest.mark.parametrize("name", sorted(KN2ROW_CASES))
def test_depthwise_matches_the_tap_by_tap_formula(name, multiplier, monkeypatch):
    """Depthwise (group == C) columns gathered from the planes, one copy per stride phase."""
    N, C, spatial, _, kernel, strides, dilations, pads = KN2ROW_CASES[name]
    rng = np.random.default_rng(6)
    X = rng.standard_normal((N, C) + spatial)
    W = rng.standard_normal((C * multiplier, 1) + kernel)
    B = rng.standard_normal(C * multiplier)
    want, (_, _, _, _, out) = _generic_conv(X, W, strides, dilations, pads, group=C)
    calls = []
    real = cpu_conv._depthwise
    monkeypatch.setattr(cpu_conv, "_depthwise", lambda *a: calls.append(1) or real(*a))
    got = cpu_conv.conv(xnp, X, W, B, group=C, strides=list(strides), dilations=list(dilations), pads=list(pads))
    assert calls and got.flags.c_contiguous
    np.testing.assert_allclose(got, want + B.reshape((1, -1) + (1,) * len(out)), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["strided-phases", "stride3-dilated", "1d"])
def test_depthwise_convs_match_onnxruntime(name, device):
    N, C, spatial, _, kernel, strides, dilations, pads = KN2ROW_CASES[name]
    rng = np.random.default_rng(7)
    feeds = {"X": rng.standard_normal((N, C) + spatial).astype(np.float32),
             "W": rng.standard_normal((C, 1) + kernel).astype(np.float32),
             "B": rng.standard_normal(C).astype(np.float32)}
    assert_op_matches_ort("Conv", feeds, device, rtol=1e-5, atol=1e-5, group=C, strides=list(strides),
                          dilations=list(dilations), pads=list(pads))


# spatial, kernel, strides, dilations, pads, ceil_mode
POOL_CASES = {
    "3x3-s1-pad1": ((9, 10), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 0),
    "3x3-s2-unpadded": ((11, 11), (3, 3), (2, 2), (1, 1), (0, 0, 0, 0), 0),
    "3x3-s2-end-pad": ((12, 12), (3, 3), (2, 2), (1, 1), (0, 0, 1, 1), 0),
    "ceil-overhang": ((10, 7), (3, 2), (2, 3), (1, 1), (1, 0, 0, 0), 1),
    "dilated-asymmetric": ((13, 9), (2, 3), (3, 1), (2, 2), (1, 2, 0, 1), 0),
    "1d": ((15,), (4,), (2,), (1,), (1, 2), 1),
    "3d": ((5, 6, 7), (2, 3, 2), (1, 2, 1), (1, 1, 2), (1, 0, 1, 0, 1, 1), 0),
    "1x1-strided": ((7, 8), (1, 1), (2, 3), (1, 1), (0, 0, 0, 0), 0),
    "whole-input": ((7, 5), (7, 5), (1, 1), (1, 1), (0, 0, 0, 0), 0),  # the Global* reduction
    "whole-input-strided-ceil": ((6, 6), (6, 6), (3, 2), (1, 1), (0, 0, 0, 0), 1),
}


def _pool_attrs(case):
    _, kernel, strides, dilations, pads, ceil_mode = case
    return {"kernel_shape": list(kernel), "strides": list(strides), "dilations": list(dilations),
            "pads": list(pads), "ceil_mode": ceil_mode}


def _tap_by_tap(X, case, pad_value, reduce):
    kernel, s, d, pb, pe, out = windows.pool_geometry(X, *(_pool_attrs(case)[k] for k in (
        "kernel_shape", "strides", "dilations", "pads")), "NOTSET", case[-1])
    acc = None
    for v in windows.window_taps(xnp, X, kernel, s, d, pb, pe, out, pad_value):
        acc = v.copy() if acc is None else reduce(acc, v)
    return acc, (kernel, s, d, pb, pe, out)


@pytest.mark.parametrize("pool_mod", [cpu_pool, generic_pool], ids=["cpu", "generic"])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("name", sorted(POOL_CASES))
def test_separable_pools_match_the_tap_by_tap_formulas(name, order, pool_mod):
    case = POOL_CASES[name]
    rng = np.random.default_rng(2)
    X = np.asarray(rng.standard_normal((2, 3) + case[0]), order=order)
    attrs = _pool_attrs(case)
    want, _ = _tap_by_tap(X, case, -np.inf, np.maximum)
    np.testing.assert_array_equal(pool_mod.MaxPool(xnp, X, **attrs), want)
    total, (kernel, s, d, pb, pe, out) = _tap_by_tap(X, case, 0, np.add)
    for include_pad in (0, 1):
        counts = windows.window_counts(xnp, X.shape[2:], kernel, s, d, pb, pe, out, include_pad, X.dtype)
        np.testing.assert_allclose(pool_mod.AveragePool(xnp, X, count_include_pad=include_pad, **attrs),
                                   total / counts, rtol=1e-12, atol=1e-12)
    sq, _ = _tap_by_tap(X * X, case, 0, np.add)
    np.testing.assert_allclose(pool_mod.LpPool(xnp, X, **attrs), np.sqrt(sq), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pool_mod", [cpu_pool, generic_pool], ids=["cpu", "generic"])
def test_integer_max_pool_pads_with_the_type_minimum(pool_mod):
    X = np.random.default_rng(3).integers(-128, 128, (1, 2, 7, 7)).astype(np.int8)
    X[..., 0, :] = -128
    case = POOL_CASES["3x3-s1-pad1"]
    want, _ = _tap_by_tap(X, case, -128, np.maximum)
    got = pool_mod.MaxPool(xnp, X, **_pool_attrs(case))
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_type", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("name", ["3x3-s1-pad1", "3x3-s2-unpadded", "3x3-s2-end-pad", "ceil-overhang", "3d",
                                  "whole-input"])
def test_pools_match_onnxruntime(name, op_type, device):
    case = POOL_CASES[name]
    X = np.random.default_rng(4).standard_normal((2, 3) + case[0]).astype(np.float32)
    attrs = _pool_attrs(case)
    del attrs["dilations"]  # AveragePool takes them only from opset 19
    assert_op_matches_ort(op_type, {"X": X}, device, rtol=1e-5, atol=1e-6, opset=18, **attrs)
