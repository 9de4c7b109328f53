"""Planned CPU convs (gpuops/ops/cpu/conv.py, ``_plan``): a session's Conv / FusedConv with a constant
weight binds, per input shape, one native call (im2col + packed GEMM, the depthwise kernel or the
direct kernel) with its arguments set once. Checked against the generic op in float64 over strides,
pads, dilations, groups, residuals and clamps, with tolerances from float32 arithmetic: a sum of K
products is off by at most about K * eps * sum |w * x| (plus the bias, residual and their roundings)."""

import ctypes
import math
import re

import numpy as np
import pytest

from gpuops import native
from gpuops.ops import conv as generic
from gpuops.ops.cpu import conv as cpu_conv

pytestmark = pytest.mark.skipif(native.function("conv2d_gemm_planned_f32") is None,
                                reason="native CPU kernels unavailable")

RNG = np.random.default_rng(11)
EPS = float(np.finfo(np.float32).eps)

# (N, C, M, H, W, kernel, strides, pads (begin h, begin w, end h, end w), dilations, group)
CASES = {
    "3x3-small-map": (1, 8, 8, 16, 16, 3, 1, (1, 1, 1, 1), 1, 1),
    "3x3-2x2-map": (1, 64, 64, 2, 2, 3, 1, (1, 1, 1, 1), 1, 1),
    "3x3-stride2": (2, 8, 16, 16, 15, 3, 2, (1, 1, 1, 1), 1, 1),
    "1x1": (2, 24, 40, 7, 9, 1, 1, (0, 0, 0, 0), 1, 1),
    "1x1-stride2": (1, 8, 16, 16, 16, 1, 2, (0, 0, 0, 0), 1, 1),  # its cells sampled, then the direct GEMM
    "1x1-stride3-images": (2, 12, 20, 17, 14, 1, 3, (0, 0, 0, 0), 1, 1),
    "1x1-stride2-end-pads": (1, 8, 16, 15, 15, 1, 2, (0, 0, 2, 2), 1, 1),  # a last cell in the padding: planes
    "asymmetric-pads-dilation": (2, 8, 12, 9, 10, 3, 1, (2, 1, 0, 2), 2, 1),
    "grouped": (1, 12, 24, 11, 7, 3, 2, (1, 0, 1, 1), 1, 3),
    "grouped-1x1": (2, 16, 32, 5, 5, 1, 1, (0, 0, 0, 0), 1, 4),
    "depthwise": (2, 16, 16, 8, 9, 3, 1, (1, 1, 1, 1), 1, 16),
    "depthwise-multiplier-stride2": (1, 8, 24, 13, 12, 5, 2, (2, 2, 2, 2), 1, 8),
    # rows of two vectors or more (the phase planes): 3x3 and 5x5 taps unrolled, whole rows and a last
    # partial group of rows; at stride 2 the two column phases of odd and even widths split in one pass
    "depthwise-wide-rows": (1, 6, 6, 23, 41, 3, 1, (1, 1, 1, 1), 1, 6),
    "depthwise-5x5-wide-multiplier": (1, 4, 8, 18, 37, 5, 1, (2, 2, 2, 2), 1, 4),
    "depthwise-stride2-wide-odd": (1, 4, 4, 21, 75, 3, 2, (1, 0, 0, 2), 1, 4),
    "depthwise-stride2-wide-dilated": (2, 3, 3, 19, 70, 5, 2, (2, 2, 1, 1), 2, 3),
    "direct-stem": (1, 3, 8, 32, 30, 7, 2, (3, 3, 3, 3), 1, 1),
    "direct-dilated": (2, 2, 5, 13, 11, 3, 2, (0, 1, 0, 0), 2, 1),
    "long-k-blocks": (1, 96, 32, 6, 6, 3, 1, (1, 1, 1, 1), 1, 1),  # K = 864 > one k block of the GEMM
    # few input channels but a long window (more taps than DIRECT_MAX_TAPS): the GEMM, not the direct kernel
    "few-channels-long-window": (1, 2, 20, 40, 37, 12, 5, (2, 0, 3, 1), 1, 1),
    # cells on the vector lanes (short K, many cells): output rows in segments of a vector
    "rows-stride2-wide": (1, 8, 16, 40, 45, 3, 2, (1, 1, 0, 1), 1, 1),
    "rows-dilated-grouped": (2, 8, 12, 20, 37, 3, 1, (2, 2, 2, 2), 2, 2),
    "rows-1x1-stride2": (1, 16, 8, 30, 30, 1, 2, (0, 0, 0, 0), 1, 1),
    # F(2x2, 3x3): odd output sizes (a last tile half outside), several images, asymmetric pads
    "winograd": (2, 32, 40, 26, 20, 3, 1, (1, 0, 0, 1), 1, 1),
    # a map whose tiles' transforms exceed winograd.c's BLOCK_FLOATS: blocks of tile rows
    "winograd-row-blocks": (1, 32, 16, 92, 120, 3, 1, (1, 1, 1, 1), 1, 1),
}


def _case(name, seed=0):
    N, C, M, H, W, k, s, pads, d, g = CASES[name]
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, C, H, W)).astype(np.float32)
    Wt = rng.standard_normal((M, C // g, k, k)).astype(np.float32)
    B = rng.standard_normal(M).astype(np.float32)
    attrs = dict(group=g, kernel_shape=[k, k], strides=[s, s], pads=list(pads), dilations=[d, d])
    return X, Wt, B, attrs


def _bound(X, W, B, Z, attrs):
    """The float64 result and the error bound of float32 arithmetic on it: K * eps * sum |w x| plus
    the roundings of the bias, residual and the sum's own."""
    f = np.float64
    want = generic.conv(np, X.astype(f), W.astype(f), B.astype(f), **attrs)
    mag = generic.conv(np, np.abs(X).astype(f), np.abs(W).astype(f), np.abs(B).astype(f), **attrs)
    K = W[0].size
    if Z is not None:
        want = want + Z
        mag = mag + np.abs(Z)
    return want, (K + 3) * EPS * mag + 1e-30


def _activated(want, tol, activation, params):
    """The float64 activation of ``want`` and the bound on it: the activations here change an error by
    at most 1.5 times (HardSwish's slope), then add their own float32 roundings."""
    from gpuops.ops.contrib.transformer import fused_activation

    a, b = (list(params or []) + [None, None])[:2]
    got = fused_activation(np, want.copy(), activation, a, b)
    return got, 1.5 * tol + 8 * EPS * (np.abs(got) + np.abs(want))


ACTIVATIONS = {None: None, "Relu": None, "Clip": [-0.5, 0.75], "HardSigmoid": [0.3, 0.4], "HardSwish": None,
               "Sigmoid": None, "LeakyRelu": [0.1]}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("residual", [False, True])
def test_planned_convs_match_the_generic_op(name, activation, residual):
    X, W, B, attrs = _case(name)
    kept = cpu_conv.prepare_conv({1: W, 2: B}, attrs)
    shape = generic.conv(np, X, W, B, **attrs).shape
    Z = RNG.standard_normal(shape).astype(np.float32) if residual else None
    params = ACTIVATIONS[activation]
    want, tol = _activated(*_bound(X, W, B, Z, attrs), activation, params)
    for _ in range(2):  # planned on the first call, run as planned on the second
        if activation is None and not residual:
            got = cpu_conv.Conv(np, X, W, B, prepared=kept, **attrs)
        else:
            got = cpu_conv.FusedConv(np, X, W, B, Z, activation=activation, activation_params=params,
                                     prepared=kept, **attrs)
        assert got.dtype == np.float32 and got.shape == shape
        assert (np.abs(got - want) <= tol).all(), np.abs(got - want).max()
    assert all(isinstance(r, cpu_conv._Planned) for r in kept.runs.values()), kept.runs


# 1-D: (N, C, M, L, kernel, stride, pads (begin, end), dilation, group)
CASES_1D = {
    "gemm": (1, 129, 128, 3, 3, 1, (1, 1), 1, 1),
    "gemm-strided": (2, 16, 24, 37, 5, 2, (2, 1), 2, 1),
    "stft-like": (1, 1, 258, 576, 256, 128, (0, 0), 1, 1),  # one channel, 256 taps: the direct kernel
    "stft-512": (1, 1, 65, 1760, 512, 160, (0, 0), 1, 1),  # 512 taps, past DIRECT_MAX_TAPS: the GEMM
    "depthwise": (1, 12, 24, 20, 3, 1, (1, 1), 1, 12),
    "one-output-channel": (1, 128, 1, 1, 1, 1, (0, 0), 1, 1),
    "grouped": (1, 8, 8, 9, 3, 1, (1, 1), 1, 2),
}


def _case_1d(name, seed):
    """X, W, B and the attributes of 1-D case ``name``."""
    N, C, M, L, k, s, pads, d, g = CASES_1D[name]
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, C, L)).astype(np.float32)
    W = rng.standard_normal((M, C // g, k)).astype(np.float32)
    B = rng.standard_normal(M).astype(np.float32)
    return X, W, B, dict(group=g, kernel_shape=[k], strides=[s], pads=list(pads), dilations=[d])


@pytest.mark.parametrize("name", CASES_1D)
@pytest.mark.parametrize("activation", ["Relu", "Sigmoid"])
def test_planned_1d_convs_match_the_generic_op(name, activation):
    X, W, B, attrs = _case_1d(name, 5)
    kept = cpu_conv.prepare_conv({1: W, 2: B}, attrs)
    want, tol = _activated(*_bound(X, W, B, None, attrs), activation, None)
    for _ in range(2):
        got = cpu_conv.FusedConv(np, X, W, B, activation=activation, prepared=kept, **attrs)
        assert got.shape == want.shape and (np.abs(got - want) <= tol).all(), np.abs(got - want).max()
    assert all(isinstance(r, cpu_conv._Planned) for r in kept.runs.values()), kept.runs


@pytest.mark.parametrize("name", CASES_1D)
@pytest.mark.parametrize("w_stride, w_dilation, w_pad_end", [(1, 1, 0), (2, 3, 1)])
def test_convs_along_h_of_one_column_run_as_the_1d_conv(name, w_stride, w_dilation, w_pad_end):
    """A 1-D conv exported along H, on (L, 1) maps with (k, 1) kernels (magika's), lies in memory as the
    1-D conv and is planned as it (the same geometry: rows of L cells, not L rows of one): the same bits,
    whatever its stride, dilation and end pad along W (the last within the stride: one output column)."""
    X, W, B, attrs = _case_1d(name, 6)
    (k,), (s,), (d,) = attrs["kernel_shape"], attrs["strides"], attrs["dilations"]
    pads, g = attrs["pads"], attrs["group"]
    attrs_h = dict(group=g, kernel_shape=[k, 1], strides=[s, w_stride], pads=[pads[0], 0, pads[1], w_pad_end],
                   dilations=[d, w_dilation])
    X4, W4 = X[..., None], W[..., None]
    kept, kept_h = cpu_conv.prepare_conv({1: W, 2: B}, attrs), cpu_conv.prepare_conv({1: W4, 2: B}, attrs_h)
    for _ in range(2):
        want = cpu_conv.FusedConv(np, X, W, B, activation="Relu", prepared=kept, **attrs)
        got = cpu_conv.FusedConv(np, X4, W4, B, activation="Relu", prepared=kept_h, **attrs_h)
        assert got.shape == want.shape + (1,) and np.array_equal(got[..., 0], want)
    (run,), (run_h,) = kept.runs.values(), kept_h.runs.values()
    geometry = [f for f, _ in cpu_conv.ConvParams._fields_[:17]]
    assert [getattr(run_h.params, f) for f in geometry] == [getattr(run.params, f) for f in geometry]
    # padded along W: three output columns, planned as a 2-D conv
    attrs_w = dict(attrs_h, pads=[pads[0], 1, pads[1], 1], strides=[s, 1])
    want, tol = _bound(X4, W4, B, None, attrs_w)
    kept_w = cpu_conv.prepare_conv({1: W4, 2: B}, attrs_w)
    got = cpu_conv.Conv(np, X4, W4, B, prepared=kept_w, **attrs_w)
    assert got.shape == want.shape and want.shape[-1] == 3 and (np.abs(got - want) <= tol).all()


def test_the_plan_is_made_once_per_input_shape_and_bounded():
    X, W, B, attrs = _case("3x3-small-map")
    kept = cpu_conv.prepare_conv({1: W, 2: B}, attrs)
    cpu_conv.Conv(np, X, W, B, prepared=kept, **attrs)
    (key, run), = kept.runs.items()
    assert isinstance(run, cpu_conv._Planned)
    cpu_conv.Conv(np, X, W, B, prepared=kept, **attrs)
    assert kept.runs == {key: run} and kept.runs[key] is run  # reused, not planned again
    X2 = X[:, :, :12, :10].copy()
    got = cpu_conv.Conv(np, X2, W, B, prepared=kept, **attrs)  # another shape: its own plan
    assert len(kept.runs) == 2 and got.shape == (1, 8, 12, 10)
    want, tol = _bound(X2, W, B, None, attrs)
    assert (np.abs(got - want) <= tol).all()
    for h in range(1, cpu_conv.ConvWeights.MAX_RUNS + 8):  # a model fed many shapes: the cache stays bounded
        cpu_conv.Conv(np, X[:, :, :1, :h % 16 + 1], W, B, prepared=kept, **attrs)
        cpu_conv.Conv(np, X[:, :, :2, :h % 16 + 1], W, B, prepared=kept, **attrs)
        cpu_conv.Conv(np, X[:, :, :3, :h % 16 + 1], W, B, prepared=kept, **attrs)
        cpu_conv.Conv(np, X[:, :, :4, :h % 16 + 1], W, B, prepared=kept, **attrs)
        cpu_conv.Conv(np, X[:, :, :5, :h % 16 + 1], W, B, prepared=kept, **attrs)
    assert len(kept.runs) == cpu_conv.ConvWeights.MAX_RUNS


def test_planned_inputs_need_not_be_contiguous_nor_writeable():
    X, W, B, attrs = _case("3x3-stride2")
    kept = cpu_conv.prepare_conv({1: W, 2: B}, attrs)
    wide = np.repeat(X, 2, axis=3)[..., ::2]  # strided view of X's values
    ro = X.copy()
    ro.flags.writeable = False
    want, tol = _bound(X, W, B, None, attrs)
    for x in (wide, ro, X):
        got = cpu_conv.Conv(np, x, W, B, prepared=kept, **attrs)
        assert (np.abs(got - want) <= tol).all()


def test_a_residual_the_plan_cannot_take_runs_the_general_path():
    X, W, B, attrs = _case("3x3-small-map")
    kept = cpu_conv.prepare_conv({1: W, 2: B}, attrs)
    full = RNG.standard_normal((1, 8, 16, 16)).astype(np.float32)
    for Z in (full[:, :, ::-1], full[:, :, :1, :1]):  # a reversed view (copied), a broadcast one (general path)
        want, tol = _bound(X, W, B, np.broadcast_to(Z, full.shape), attrs)
        got = cpu_conv.FusedConv(np, X, W, B, Z, activation="Relu", prepared=kept, **attrs)
        assert (np.abs(got - np.maximum(want, 0)) <= tol).all()


# (the last two: more channels than cells, so the parts split the channels)
@pytest.mark.parametrize("C, M, S, rows", [(32, 48, 24, False), (8, 8, 40, True),
                                           (32, 96, 6, False), (8, 224, 10, True)])
def test_planned_convs_give_the_same_bits_on_any_number_of_threads(C, M, S, rows):
    """The output rows (or channels) are split across threads; each cell is summed as on one thread."""
    from gpuops.ops.cpu import native_gemm

    rng = np.random.default_rng(3)
    X = rng.standard_normal((2, C, S, S)).astype(np.float32)
    W = rng.standard_normal((M, C, 3, 3)).astype(np.float32)
    B = rng.standard_normal(M).astype(np.float32)
    Z = rng.standard_normal((2, M, S, S)).astype(np.float32)
    attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    kept = cpu_conv.prepare_conv({1: W, 2: B}, attrs)
    assert native_gemm.rows_layout(M, 9 * C, S * S, S) == rows  # as the plan asks, a row at a time
    params = cpu_conv.ConvParams(2, C, S, S, M, 3, 3, S, S, 1, 1, 1, 1, 1, 1, 1, rows)
    packs = kept.packs(W, B, 1, rows)
    params.weights, params.bias, params.lo, params.hi = packs[0].address, B.ctypes.data, 0.0, math.inf
    fn = native.function("conv2d_gemm_planned_f32")
    out = []
    before = native.threads()
    try:
        for threads in (1, 2, 3):
            native.set_threads(threads)
            Y = np.empty((2, M, S, S), np.float32)
            native.call(fn, ctypes.addressof(params), X.ctypes.data, Z.ctypes.data, Y.ctypes.data)
            out.append(Y)
    finally:
        native.set_threads(before)
    np.testing.assert_array_equal(out[0], out[1])
    np.testing.assert_array_equal(out[0], out[2])
    want, tol = _bound(X, W, B, Z, attrs)
    assert (np.abs(out[0] - np.maximum(want, 0)) <= tol).all()


@pytest.mark.parametrize("name", ["winograd", "winograd-row-blocks"])
def test_winograd_is_planned_with_packed_products_and_the_same_bits_on_any_number_of_threads(name):
    """F(2x2, 3x3) convs are planned as one call (no weight packed per run) whose products split their
    columns, and its transforms their channels, across threads: each cell is summed as on one thread."""
    X, W, B, attrs = _case(name)
    kept = cpu_conv.prepare_conv({1: W, 2: B}, attrs)
    before, out = native.threads(), []
    try:
        for threads in (1, 2, 3):
            native.set_threads(threads)
            out.append(cpu_conv.FusedConv(np, X, W, B, activation="Relu", prepared=kept, **attrs))
    finally:
        native.set_threads(before)
    assert {r.fn.__name__ for r in kept.runs.values()} == {"winograd_f2k3_planned_f32"}
    np.testing.assert_array_equal(out[0], out[1])
    np.testing.assert_array_equal(out[0], out[2])


def test_with_native_kernels_off_the_numpy_path_runs():
    X, W, B, attrs = _case("depthwise")
    kept = cpu_conv.prepare_conv({1: W, 2: B}, attrs)
    cpu_conv.Conv(np, X, W, B, prepared=kept, **attrs)
    want, tol = _bound(X, W, B, None, attrs)
    with native.disabled():
        got = cpu_conv.Conv(np, X, W, B, prepared=kept, **attrs)
    assert (np.abs(got - want) <= tol).all()


def test_conv_params_match_the_c_struct():
    header = (native.KERNEL_DIR / "conv_params.h").read_text()
    body = re.search(r"struct conv_params \{(.*?)\};", header, re.S)[1]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    fields = []
    for decl in body.split(";"):
        words = decl.replace("*", " * ").replace(",", " , ").split()
        if not words:
            continue
        ctype = ctypes.c_void_p if "*" in words else {"int64_t": ctypes.c_int64, "float": ctypes.c_float}[words[0]]
        names = [w for w in words if w not in ("const", "float", "int64_t", "void", "*", ",")]
        fields += [(n, ctype) for n in names]
    assert fields == cpu_conv.ConvParams._fields_


def test_the_rows_layout_cases_take_it():
    from gpuops.ops.cpu import native_gemm

    for name in ("3x3-small-map", "rows-stride2-wide", "rows-dilated-grouped", "rows-1x1-stride2"):
        X, W, B, attrs = _case(name)
        kept = cpu_conv.prepare_conv({1: W, 2: B}, attrs)
        cpu_conv.Conv(np, X, W, B, prepared=kept, **attrs)
        (run,) = kept.runs.values()
        assert run.params.rows == native_gemm.rows_layout(run.params.M // run.params.group,
                                                          W[0].size, math.prod(run.shape[2:])) == 1, name
