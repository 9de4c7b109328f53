"""The CPU paths of transformer ops (gpuops/ops/cpu/normalization.py, embedding.py, attention.py, indexing.py,
softmax.py, activation.py's Gelu forms and the native kernels of cpu_kernels/rows.c, attention.c, special.c) against
the generic ops they stand in for, which stay the oracle.

Tolerances come from the arithmetic: both sides compute in float32 and differ in the order of their
sums (a sum of n terms is within n * u * sum|terms| of the exact one, u = 2^-24, for either order) and
in the exp they use (NumPy's within an ulp, the kernels' within two); where a path is taken by the
generic op itself (other dtypes, forms the kernels do not take) the results are equal."""

import math

import ml_dtypes
import numpy as np
import pytest
from onnx import helper, numpy_helper

import gpuops
from gpuops import native, registry
from gpuops.errors import NodeError
from gpuops.ops.cpu import embedding as cpu_embed
from gpuops.ops.cpu import normalization as cpu_norm

MS = "com.microsoft"
U32 = 2.0 ** -24  # float32's unit roundoff
U16 = 2.0 ** -11
ERF_SERIES = 4e-6  # the generic erf's (NumPy series) accuracy, relative: tests/test_native.py's test_native_erf


def _impls(op_type, domain="", opset=17):
    cpu = registry.resolve(domain, op_type, opset, "cpu")
    generic = registry.resolve(domain, op_type, opset, None)
    assert cpu.device == "cpu" and generic.device is None
    return cpu.fn, generic.fn


def _rng(seed=0):
    return np.random.default_rng(seed)


def _f32(*shape, seed=0, scale=1.0, shift=0.0):
    return (_rng(seed).standard_normal(shape) * scale + shift).astype(np.float32)


def _norm_bound(x, g, b, axes, eps, simplified=False):
    """How far two float32 layer normalizations of x may differ: the mean and the mean square are sums of
    n terms (each within n u of their magnitude for either order), which move t = (x - mean) * inv by
    (n + 2) u (1 + mean|x| inv)(1 + |t|); the scale and shift round twice more (|t g| and |y|)."""
    x = x.astype(np.float64)
    n = math.prod(x.shape[a] for a in axes)
    mean = 0.0 if simplified else x.mean(axis=axes, keepdims=True)
    d = x - mean
    inv = 1 / np.sqrt((d * d).mean(axis=axes, keepdims=True) + eps)
    t = d * inv
    g = np.abs(g.astype(np.float64))
    b = 0 if b is None else np.abs(b.astype(np.float64))
    scale = 1 + np.abs(x).mean(axis=axes, keepdims=True) * inv
    return 2 * U32 * ((n + 2) * scale * (1 + np.abs(t)) * g + 2 * np.abs(t) * g + 2 * b) + 1e-30


def _within(got, want, bound):
    """got within bound of want, element by element (equal infinities and signed zeros included)."""
    with np.errstate(invalid="ignore"):
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        diff = np.where(same, 0.0, np.abs(got.astype(np.float64) - want.astype(np.float64)))
        ok = same | (diff <= bound)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert ok.all(), f"max excess {np.max(np.where(ok, 0.0, diff - bound))}"


def _equal(got, want):
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


# -- LayerNormalization ---------------------------------------------------------------------------

LN_CASES = {  # X shape, axis, Scale shape, B shape (None: absent)
    "bert": ((2, 12, 32), -1, (32,), (32,)),
    "convnext": ((1, 16, 16, 16), -1, (16,), (16,)),
    "no-bias": ((3, 7, 20), -1, (20,), None),
    "two-axes": ((3, 5, 7, 9), 2, (7, 9), (9,)),
    "leading-ones": ((4, 33), 1, (1, 33), (1, 1, 33)),
    "long-rows": ((3, 1000), -1, (1000,), (1000,)),
    "one-value": ((5, 1), -1, (1,), (1,)),
    "axis-0": ((2, 3, 17), 0, (2, 3, 17), (3, 17)),
}


@pytest.mark.parametrize("name", sorted(LN_CASES))
@pytest.mark.parametrize("shift", [0.0, 3.0])
def test_layer_norm_matches_the_generic_op(name, shift):
    shape, axis, gs, bs = LN_CASES[name]
    X = _f32(*shape, shift=shift)
    g, b = _f32(*gs, seed=1), None if bs is None else _f32(*bs, seed=2)
    axes = tuple(range(axis % X.ndim, X.ndim))
    for opset, domain in ((17, ""), (1, "")):
        cpu, generic = _impls("LayerNormalization", domain, opset)
        for prepared in (None, cpu_norm.prepare_params(1, 2)({1: g} if b is None else {1: g, 2: b}, {})):
            got = cpu(np, X, g, b, axis=axis, epsilon=1e-5, prepared=prepared)
            want = generic(np, X, g, b, axis=axis, epsilon=1e-5)
            np.testing.assert_array_equal(cpu(np, X, g, b, axis=axis, epsilon=1e-5, prepared=prepared, n_outputs=1),
                                          got[0])  # a node with Y alone: the statistics not computed
            _within(got[0], want[0], _norm_bound(X, g, b, axes, 1e-5))
            for s, w in zip(got[1:], want[1:]):  # mean and 1 / std: the two sums' orders
                assert s.shape == w.shape and s.dtype == w.dtype == np.float32
            n = math.prod(X.shape[axis:])
            scale = np.abs(X.astype(np.float64)).mean(axis=axes, keepdims=True)
            _within(got[1], want[1], 2 * (n + 2) * U32 * scale + 1e-30)
            _within(got[2], want[2], 2 * (n + 4) * U32 * want[2] * (1 + scale * want[2]))


def test_layer_norm_keeps_the_sizes_of_each_shape_with_the_prepared_parameters():
    """A prepared step keeps each input shape's sizes; a later call of that shape (with those parameters)
    gives the same bits as the first, another Scale or a strided input the full path's."""
    cpu, _ = _impls("LayerNormalization")
    g, b = _f32(16, seed=1), _f32(16, seed=2)
    prepared = cpu_norm.prepare_params(1, 2)({1: g, 2: b}, {})
    for shape in ((3, 16), (2, 5, 16), (3, 16)):
        X = _f32(*shape, seed=len(shape))
        first = cpu(np, X, g, b, prepared=prepared)
        assert (X.shape, -1) in prepared
        for a, c in zip(cpu(np, X, g, b, prepared=prepared), first):
            np.testing.assert_array_equal(a, c)
        for a, c in zip(cpu(np, X, g.copy(), b, prepared=prepared), cpu(np, X, g.copy(), b)):
            np.testing.assert_array_equal(a, c)
    X = _f32(3, 32, seed=5)[:, ::2]
    for a, c in zip(cpu(np, X, g, b, prepared=prepared), cpu(np, X.copy(), g, b)):
        np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize("shape", [(1, 16, 16, 16), (2, 33, 3, 7), (1, 128, 2, 2), (3, 20, 5), (2, 7, 2, 3, 5)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm_of_a_channels_last_view_reads_the_channels_first_data(shape, with_bias):
    """LayerNormalization over the last axis of a Transpose's channels-last view of channels-first data
    (ConvNeXt's permute -> LayerNorm) by rows.c's layernorm_channels_f32, without a copy: within the sums'
    bounds of the generic op, Y C-contiguous; the same bits again from the kept sizes, and as the kernel
    gives them for any position count (16 positions a tile, the last one partial); a NaN stays in its
    position."""
    cpu, generic = _impls("LayerNormalization")
    C = shape[1]
    data = _f32(*shape, shift=2.0)
    data[(0, C - 1) + (0,) * (len(shape) - 2)] = np.nan
    X = data.transpose(0, *range(2, len(shape)), 1)
    g, b = _f32(C, seed=1), _f32(C, seed=2) if with_bias else None
    axes = (X.ndim - 1,)
    prepared = cpu_norm.prepare_params(1, 2)({1: g} if b is None else {1: g, 2: b}, {})
    got, want = cpu(np, X, g, b, epsilon=1e-5, prepared=prepared), generic(np, X, g, b, epsilon=1e-5)
    assert got[0].flags.c_contiguous and (X.shape, X.strides) in prepared
    _within(got[0], want[0], _norm_bound(X, g, b, axes, 1e-5))
    assert np.isnan(got[0][(0,) * (X.ndim - 1)]).all() and np.isnan(got[0]).sum() == C
    scale = np.abs(X.astype(np.float64)).mean(axis=axes, keepdims=True)
    _within(got[1], want[1], 2 * (C + 2) * U32 * scale + 1e-30)
    _within(got[2], want[2], 2 * (C + 4) * U32 * want[2] * (1 + scale * want[2]))
    for a, c in zip(cpu(np, X, g, b, epsilon=1e-5, prepared=prepared), got):
        np.testing.assert_array_equal(a, c)
    for a, c in zip(cpu(np, X, g, b, epsilon=1e-5), got):
        np.testing.assert_array_equal(a, c)
    np.testing.assert_array_equal(cpu(np, X, g, b, epsilon=1e-5, prepared=prepared, n_outputs=1), got[0])


@pytest.mark.parametrize("shape", [(1, 16, 16, 16), (2, 33, 3, 7), (1, 128, 2, 2)])
def test_layer_norm_channels_matches_its_function(shape):
    """gpuops' private LayerNormChannels (ConvNeXt's LayerNorm2d over NCHW's channels) by rows.c's
    layernorm_channels_f32 writing planes: within the sums' bounds of the generic op (its function's
    Transpose -> LayerNormalization -> Transpose), Y NCHW; a NaN stays in its position; a rank other than
    4 is a NodeError from the generic op."""
    cpu = registry.resolve("ai.gpuops", "LayerNormChannels", 1, "cpu").fn
    generic = registry.resolve("ai.gpuops", "LayerNormChannels", 1, None).fn
    C = shape[1]
    X = _f32(*shape, shift=2.0)
    X[0, C - 1, 0, 0] = np.nan
    g, b = _f32(C, seed=1), _f32(C, seed=2)
    prepared = cpu_norm.prepare_params(1, 2)({1: g, 2: b}, {})
    got, want = cpu(np, X, g, b, epsilon=1e-5, prepared=prepared), generic(np, X, g, b, epsilon=1e-5)
    assert got.flags.c_contiguous and got.shape == X.shape
    Xl = X.transpose(0, 2, 3, 1)
    _within(got.transpose(0, 2, 3, 1), np.ascontiguousarray(want.transpose(0, 2, 3, 1)),
            _norm_bound(Xl, g, b, (3,), 1e-5))
    assert np.isnan(got[0, :, 0, 0]).all() and np.isnan(got).sum() == C
    np.testing.assert_array_equal(cpu(np, X, g, b, epsilon=1e-5), got)
    with pytest.raises(NodeError, match="rank 4"):
        cpu(np, X[0], g, b, epsilon=1e-5)


def test_layer_norm_in_float16_and_bfloat16_is_computed_in_float32():
    """Half data: the statistics in float32 on both sides; the generic op rounds t = (x - mean) inv to
    float16, then t * Scale and + B in float16 (three roundings), the CPU path the float32 result once."""
    X, g, b = _f32(4, 24, 48, shift=1.0), _f32(48, seed=1), _f32(48, seed=2)
    cpu, generic = _impls("LayerNormalization")
    for dtype, u in ((np.float16, U16), (ml_dtypes.bfloat16, 2.0 ** -8)):
        Xh, gh, bh = X.astype(dtype), g.astype(dtype), b.astype(dtype)
        got, want = cpu(np, Xh, gh, bh, epsilon=1e-5), generic(np, Xh, gh, bh, epsilon=1e-5)
        assert got[0].dtype == want[0].dtype == dtype
        t = np.abs(want[0].astype(np.float64) - bh.astype(np.float64))  # |t g| as the generic op has it
        y = np.abs(want[0].astype(np.float64))
        bound = u * (2 * t + 2 * y) + u * t + _norm_bound(Xh, gh, bh, (2,), 1e-5)
        _within(got[0], want[0], bound)
        np.testing.assert_allclose(got[1], want[1], rtol=0, atol=100 * U32)


def test_layer_norm_forms_the_kernel_does_not_take_are_the_generic_ops():
    cpu, generic = _impls("LayerNormalization")
    X = _f32(2, 3, 8)
    cases = [(X.astype(np.float64), _f32(8).astype(np.float64), None, {}),  # float64
             (X, _f32(2, 1, 8), _f32(8), {}),  # Scale broadcast over the batch
             (X, _f32(8), _f32(8), {"stash_type": 11}),  # double statistics
             (X[:, :, ::2], _f32(4), None, {})]  # a strided input: made contiguous, then the kernel
    for Xc, g, b, kw in cases[:3]:
        _equal(cpu(np, Xc, g, b, **kw), generic(np, Xc, g, b, **kw))
    Xc, g, b, kw = cases[3]
    got, want = cpu(np, Xc, g, b), generic(np, Xc, g, b)
    _within(got[0], want[0], _norm_bound(Xc, g, b, (2,), 1e-5))
    with native.disabled():
        _equal(cpu(np, X, _f32(8), None), generic(np, X, _f32(8), None))
    with pytest.raises(NodeError, match="axis 3 is out of range"):
        cpu(np, X, _f32(8), None, axis=3)


def test_simplified_layer_norm_matches_the_generic_op():
    cpu, generic = _impls("SimplifiedLayerNormalization")
    X = _f32(3, 10, 40, shift=0.5)
    for g in (_f32(40, seed=1), _f32(40, seed=1).astype(np.float16)):
        got, want = cpu(np, X, g, epsilon=1e-6), generic(np, X, g, epsilon=1e-6)
        assert got[0].dtype == want[0].dtype == g.dtype
        bound = _norm_bound(X, g, None, (2,), 1e-6, simplified=True)
        if g.dtype == np.float16:
            bound = bound + U16 * np.abs(want[0].astype(np.float64))
        _within(got[0], want[0], bound)
        np.testing.assert_allclose(got[1], want[1], rtol=2 * 44 * U32, atol=0)


# -- SkipLayerNormalization and the embedding form --------------------------------------------------

@pytest.mark.parametrize("skip_shape", [(2, 12, 32), (12, 32), (1, 12, 32), (32,)])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("with_beta", [True, False])
def test_skip_layer_norm_matches_the_generic_op(skip_shape, with_bias, with_beta):
    cpu, generic = _impls("SkipLayerNormalization", MS, 1)
    X, skip = _f32(2, 12, 32), _f32(*skip_shape, seed=3)
    g, beta, bias = _f32(32, seed=1), _f32(32, seed=2) if with_beta else None, _f32(32, seed=4) if with_bias else None
    prepared = cpu_norm.prepare_params(2, 3, 4)({i: a for i, a in ((2, g), (3, beta), (4, bias)) if a is not None}, {})
    got = cpu(np, X, skip, g, beta, bias, epsilon=1e-12, prepared=prepared)
    want = generic(np, X, skip, g, beta, bias, epsilon=1e-12)
    np.testing.assert_array_equal(got[3], want[3])  # the sum: the same additions in the same order
    _within(got[0], want[0], _norm_bound(want[3], g, beta, (2,), 1e-12))
    for s, w in zip(got[1:3], want[1:3]):
        assert s.shape == w.shape == (2, 12, 1) and s.dtype == w.dtype == np.float32
    got2 = cpu(np, X.reshape(24, 32), np.broadcast_to(skip, X.shape).reshape(24, 32), g, beta, bias, epsilon=1e-12)
    np.testing.assert_array_equal(got2[0].reshape(X.shape), got[0])


def test_skip_layer_norm_keeps_the_sizes_of_each_pair_of_shapes_with_the_prepared_parameters():
    """A prepared step keeps the sizes of each (input, skip) pair of shapes; a later call of those shapes
    (with those parameters) gives the same values, and other parameters or shapes are derived again."""
    cpu, _ = _impls("SkipLayerNormalization", MS, 1)
    g, beta, bias = _f32(32, seed=1), _f32(32, seed=2), _f32(32, seed=4)
    prepared = cpu_norm.prepare_params(2, 3, 4)({2: g, 3: beta, 4: bias}, {})
    for shapes in (((2, 12, 32), (2, 12, 32)), ((2, 12, 32), (12, 32)), ((3, 32), (3, 32))):
        X, skip = _f32(*shapes[0]), _f32(*shapes[1], seed=3)
        first = cpu(np, X, skip, g, beta, bias, epsilon=1e-12, prepared=prepared)
        assert shapes in prepared
        for a, c in zip(cpu(np, X, skip, g, beta, bias, epsilon=1e-12, prepared=prepared), first):
            np.testing.assert_array_equal(a, c)
        for a, c in zip(cpu(np, X, skip, g.copy(), beta, None, epsilon=1e-12, prepared=prepared),
                        cpu(np, X, skip, g.copy(), beta, None, epsilon=1e-12)):
            np.testing.assert_array_equal(a, c)
        for n in (1, 2, 3, 4):  # a node's outputs only: Y alone, or Y and the statistics, or all with the sum
            got = cpu(np, X, skip, g, beta, bias, epsilon=1e-12, prepared=prepared, n_outputs=n)
            got = (got,) if n == 1 else got
            assert len(got) == n
            for a, c in zip(got, first):
                np.testing.assert_array_equal(a, c)


def test_skip_simplified_layer_norm_matches_the_generic_op():
    cpu, generic = _impls("SkipSimplifiedLayerNormalization", MS, 1)
    X, skip, g, bias = _f32(2, 5, 64), _f32(2, 5, 64, seed=3), _f32(64, seed=1), _f32(64, seed=4)
    got, want = cpu(np, X, skip, g, bias, epsilon=1e-6), generic(np, X, skip, g, bias, epsilon=1e-6)
    np.testing.assert_array_equal(got[3], want[3])
    _within(got[0], want[0], _norm_bound(want[3], g, None, (2,), 1e-6, simplified=True))
    _within(got[1], want[1], 2 * 66 * U32 * np.abs(want[3].astype(np.float64)).mean(axis=2, keepdims=True))


def test_skip_layer_norm_forms_the_kernel_does_not_take_are_the_generic_ops():
    cpu, generic = _impls("SkipLayerNormalization", MS, 1)
    X, g = _f32(2, 4, 8), _f32(8, seed=1)
    for args in [(X.astype(np.float16), X.astype(np.float16), g.astype(np.float16)),  # float16: rounded sums
                 (X, _f32(2, 1, 8), g)]:  # a skip broadcast over the sequence
        _equal(cpu(np, *args, epsilon=1e-5), generic(np, *args, epsilon=1e-5))
    with pytest.raises(NodeError, match="2-D or 3-D"):
        cpu(np, X[None], X[None], g)


def _embed_inputs(B=2, S=7, D=24, vocab=50, seed=0):
    rng = _rng(seed)
    return dict(input_ids=rng.integers(-vocab, vocab, (B, S)).astype(np.int32),
                segment_ids=rng.integers(0, 2, (B, S)).astype(np.int32),
                word_embedding=_f32(vocab, D, seed=1), position_embedding=_f32(S + 3, D, seed=2),
                segment_embedding=_f32(2, D, seed=3), gamma=_f32(D, seed=4), beta=_f32(D, seed=5),
                mask=(rng.random((B, S)) > 0.3).astype(np.int32))


EMBED_FORMS = ["all", "no-segment", "segment-table-only", "position-ids", "1d-position-ids", "batch-position-ids",
               "int64-ids", "int64-all", "no-mask", "int64-mask", "bool-mask", "float-mask", "wide-mask", "no-beta",
               "one-row"]


def _embed_form(form):
    f = _embed_inputs(B=1, S=1) if form == "one-row" else _embed_inputs()
    B, S = f["input_ids"].shape
    if form == "no-segment":
        f["segment_ids"] = f["segment_embedding"] = None
    elif form == "segment-table-only":  # no segment_ids: the table is not used
        f["segment_ids"] = None
    elif form == "position-ids":
        f["position_ids"] = np.arange(S, dtype=np.int32)[::-1].copy()[None]
    elif form == "1d-position-ids":
        f["position_ids"] = _rng(8).integers(-S - 3, S + 3, (S,)).astype(np.int32)
    elif form == "batch-position-ids":
        f["position_ids"] = _rng(7).integers(0, S + 3, (B, S)).astype(np.int64)
    elif form == "int64-ids":
        f["input_ids"] = f["input_ids"].astype(np.int64)
    elif form == "int64-all":
        for k in ("input_ids", "segment_ids", "mask"):
            f[k] = f[k].astype(np.int64)
        f["position_ids"] = np.arange(S, dtype=np.int64)[None]
    elif form == "no-mask":
        f["mask"] = None
    elif form == "int64-mask":
        f["mask"] = f["mask"].astype(np.int64) * _rng(9).integers(0, 3, (B, S))  # 2s are not counted
    elif form == "bool-mask":
        f["mask"] = f["mask"].astype(bool)
    elif form == "float-mask":
        f["mask"] = f["mask"].astype(np.float32)
    elif form == "wide-mask":  # more columns than the sequence, another batch
        f["mask"] = (_rng(10).random((B + 1, S + 4)) > 0.5).astype(np.int32)
    elif form == "no-beta":
        f["beta"] = None
    return f


@pytest.mark.parametrize("outputs", [1, 2, 3])
@pytest.mark.parametrize("form", EMBED_FORMS)
def test_embed_layer_norm_matches_the_generic_op(form, outputs):
    cpu, generic = _impls("EmbedLayerNormalization", MS, 1)
    f = _embed_form(form)
    consts = {i: f[k] for i, k in ((2, "word_embedding"), (3, "position_embedding"), (4, "segment_embedding"),
                                   (5, "gamma"), (6, "beta")) if f[k] is not None}
    prepared = cpu_embed.prepare_embed(consts, {})
    want = generic(np, **f, epsilon=1e-12)
    for _ in range(2):  # the second call on the tables and parameters kept in prepared
        got = cpu(np, **f, epsilon=1e-12, prepared=prepared, n_outputs=outputs)
        got = (got,) if outputs == 1 else got
        assert len(got) == outputs
        if outputs > 2:
            np.testing.assert_array_equal(got[2], want[2])  # word + position + segment, in that order
        if outputs > 1:
            _equal(got[1], want[1])
        _within(got[0], want[0], _norm_bound(want[2], f["gamma"], f["beta"], (2,), 1e-12))
    assert "embed" in prepared
    if f.get("position_ids") is not None:  # constant position ids: their address kept
        pids = f["position_ids"].copy()
        pids.flags.writeable = False
        kept = cpu_embed.prepare_embed({**consts, 8: pids}, {})
        assert kept["position_ids"][0] is pids
        got = cpu(np, **dict(f, position_ids=pids), epsilon=1e-12, prepared=kept, n_outputs=3)
        np.testing.assert_array_equal(got[2], want[2])
        _within(got[0], want[0], _norm_bound(want[2], f["gamma"], f["beta"], (2,), 1e-12))
        _equal(got[1], want[1])
    fed = cpu_embed.prepare_embed({5: f["gamma"]}, {})  # the tables fed: nothing of them is kept
    got = cpu(np, **f, epsilon=1e-12, prepared=fed, n_outputs=3)
    np.testing.assert_array_equal(got[2], want[2])
    _within(got[0], want[0], _norm_bound(want[2], f["gamma"], f["beta"], (2,), 1e-12))
    assert "embed" not in fed


@pytest.mark.parametrize("form", [f for f in EMBED_FORMS if f != "wide-mask"])
def test_embed_layer_norm_forms_take_the_kernel(form):
    if native.function("embed_layernorm_f32") is None:
        pytest.skip("native kernels unavailable")
    f = _embed_form(form)
    args = [f.get(k) for k in ("input_ids", "segment_ids", "word_embedding", "position_embedding",
                               "segment_embedding", "gamma", "beta", "mask", "position_ids")]
    assert cpu_embed.embed_norm(*args, 1e-12, None) is not None


def test_embed_layer_norm_without_native_kernels_is_the_generic_op():
    cpu, generic = _impls("EmbedLayerNormalization", MS, 1)
    f = _embed_form("all")
    with native.disabled():
        _equal(cpu(np, **f, epsilon=1e-12), generic(np, **f, epsilon=1e-12))


def test_embed_layer_norm_bad_ids_are_the_generic_ops_errors():
    cpu, _ = _impls("EmbedLayerNormalization", MS, 1)
    f = _embed_inputs()
    for name, bad in (("input_ids", 50), ("input_ids", -51), ("segment_ids", 2)):
        g = dict(f)
        g[name] = g[name].copy()
        g[name][1, 3] = bad
        with pytest.raises(NodeError, match=rf"input '{name}': index {bad} is out of range"):
            cpu(np, **g)
    g = dict(f, position_ids=np.full((1, 7), 10, np.int32))
    with pytest.raises(NodeError, match="input 'position_ids': index 10 is out of range"):
        cpu(np, **g)
    g = dict(f, position_ids=np.full((2, 7), -11, np.int64))
    with pytest.raises(NodeError, match="input 'position_ids': index -11 is out of range"):
        cpu(np, **g)
    g = dict(f, input_ids=f["input_ids"].astype(np.int64))
    g["input_ids"][0, 0] = 2 ** 40
    with pytest.raises(NodeError, match=rf"input 'input_ids': index {2 ** 40} is out of range"):
        cpu(np, **g, n_outputs=2)
    with pytest.raises(NodeError, match="exceeds the 10 position embeddings"):
        cpu(np, **dict(f, input_ids=np.zeros((2, 11), np.int32), segment_ids=None))


@pytest.mark.parametrize("form", ["int64", "int32", "no-position-ids", "bool-mask", "float-mask", "wide-mask"])
def test_cast_embed_layer_norm_is_the_casts_then_the_op(form):
    """gpuops' private CastEmbedLayerNormalization: its int64 ids and mask wrapped to int32 as Cast does
    (2^32 + 3 is 3, 2^32 + 1 in the mask a 1), then EmbedLayerNormalization; the CPU's kernel wraps them
    as it reads them."""
    from gpuops.ops.contrib import private

    cpu = registry.resolve(private.DOMAIN, "CastEmbedLayerNormalization", 1, "cpu")
    generic = registry.resolve(private.DOMAIN, "CastEmbedLayerNormalization", 1, None)
    assert cpu.device == "cpu" and generic.device is None
    ln, _ = _impls("EmbedLayerNormalization", MS, 1)
    f = _embed_inputs()
    B, S = f["input_ids"].shape
    f["position_ids"] = np.arange(S, dtype=np.int32)[None]
    wraps = np.int64(2 ** 32) * _rng(11).integers(-2, 3, (B, S))
    if form != "int32":
        f["input_ids"] = f["input_ids"].astype(np.int64) + wraps
        f["segment_ids"] = f["segment_ids"].astype(np.int64) - wraps
        f["mask"] = f["mask"].astype(np.int64) + wraps
    if form == "no-position-ids":
        del f["position_ids"]
    elif form == "bool-mask":
        f["mask"] = (f["mask"] % 2).astype(bool)
    elif form == "float-mask":
        f["mask"] = (f["mask"] % 2).astype(np.float32) + 0.25  # cast to int32 first: 1.25 is a 1
    elif form == "wide-mask":
        f["mask"] = np.concatenate([f["mask"], f["mask"][:1]], axis=0)
    cast = {k: (v.astype(np.int32) if k in ("input_ids", "segment_ids", "mask") else v) for k, v in f.items()}
    want = ln(np, **cast, epsilon=1e-12)
    for got in (cpu.fn(np, **f, epsilon=1e-12, prepared=cpu_embed.prepare_embed({5: f["gamma"], 6: f["beta"]}, {})),
                generic.fn(np, **f, epsilon=1e-12)):
        assert len(got) == 2
        _equal(got[1], want[1])
        _within(got[0], want[0], _norm_bound(want[2], f["gamma"], f["beta"], (2,), 1e-12))
    args = [f.get(k) for k in ("input_ids", "segment_ids", "word_embedding", "position_embedding",
                               "segment_embedding", "gamma", "beta", "mask", "position_ids")]
    if form in ("int64", "no-position-ids"):  # the kernel's own wrapping, not a fallback
        assert cpu_embed.embed_norm(*args, 1e-12, None, 2, narrow=True) is not None


def test_cast_embed_layer_norm_bad_ids_are_the_generic_ops_errors():
    from gpuops.ops.contrib import private

    cpu = registry.resolve(private.DOMAIN, "CastEmbedLayerNormalization", 1, "cpu").fn
    f = _embed_inputs()
    f["input_ids"] = f["input_ids"].astype(np.int64)
    f["input_ids"][1, 2] = 2 ** 32 + 50  # 50 once wrapped: out of the 50 words
    with pytest.raises(NodeError, match="input 'input_ids': index 50 is out of range"):
        cpu(np, **f)


# -- Gather ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("indices", [np.array([[3, -1], [0, 2]]), np.array(-2), np.array([1], np.int32),
                                     np.zeros((0, 2), np.int64)])
def test_gather_matches_the_generic_op(axis, indices):
    cpu, generic = _impls("Gather", opset=13)
    data = _f32(4, 5, 6)
    _equal(cpu(np, data, indices, axis=axis), generic(np, data, indices, axis=axis))


def test_gather_errors_name_the_bounds():
    cpu, _ = _impls("Gather", opset=13)
    data = _f32(4, 5)
    with pytest.raises(NodeError, match=r"index 4 is out of range \[-4, 3\]"):
        cpu(np, data, np.array([[0, 4]]))
    with pytest.raises(NodeError, match=r"index -6 is out of range \[-5, 4\]"):
        cpu(np, data, np.array(-6), axis=1)
    with pytest.raises(NodeError, match="axis 2 is out of range"):
        cpu(np, data, np.array(0), axis=2)


def test_gather_of_a_constant_table_in_a_session_names_the_node():
    table = _f32(10, 4)
    node = helper.make_node("Gather", ["table", "ids"], ["y"], name="lookup")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("ids", 7, [None, None])],
                              [helper.make_tensor_value_info("y", 1, None)],
                              initializer=[numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    session = gpuops.InferenceSession(model, device="cpu")
    np.testing.assert_array_equal(session.run(None, {"ids": np.array([[1, -1, 9]])})[0], table[[1, 9, 9]][None])
    with pytest.raises(NodeError, match=r"lookup.*index 10 is out of range \[-10, 9\]"):
        session.run(None, {"ids": np.array([[10]])})


# -- Softmax --------------------------------------------------------------------------------------

def _softmax_rows(n, seed=0):
    x = _f32(6, n, seed=seed, scale=4.0)
    x[1, ::3] = -1e4  # masked keys
    x[2, : max(1, n // 2)] = -np.inf
    x[3] = -np.inf  # all -inf: NaN either way
    if n > 1:
        x[4, 1] = np.nan
    x[5] *= 30  # e^(x - max) below the float32 range
    return x


@pytest.mark.parametrize("n", [1, 12, 16, 17, 65, 1024])
def test_softmax_rows_match_the_generic_op(n):
    x = _softmax_rows(n)
    for op_type, log in (("Softmax", False), ("LogSoftmax", True)):
        cpu, generic = _impls(op_type, opset=13)
        got, want = cpu(np, x), generic(np, x)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        # e^(x - max) within 2 ulp here and 1 there, the sums of n terms in other orders, 1 / s
        rel = (n + 8) * 2 * U32
        if log:
            bound = rel * (1 + np.abs(want[ok].astype(np.float64)))
        else:
            bound = rel * np.abs(want[ok].astype(np.float64)) + 1.2e-38  # flushed below e^-87.3
        _within(got[ok], want[ok], bound)


# -- QuickGelu ------------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [1.0, 1.702])
def test_quick_gelu_matches_the_generic_op(alpha):
    cpu, generic = _impls("QuickGelu", MS, 1)
    x = np.concatenate([_f32(4099, scale=6.0), [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -88.0, -200.0, 90.0],
                        np.linspace(-60, 60, 1001)]).astype(np.float32)
    got, want = cpu(np, x, alpha=alpha), generic(np, x, alpha=alpha)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    # e^-|z| within 2 ulp (1 there), 1 + e, the quotient and the product: a few ulp of the result
    _within(got[ok], want[ok], 8 * U32 * np.abs(want[ok].astype(np.float64)) + 1e-36)
    strided = x.reshape(-1, 3)[:, ::2]
    np.testing.assert_array_equal(cpu(np, strided, alpha=alpha), cpu(np, strided.copy(), alpha=alpha))
    _equal(cpu(np, x.astype(np.float64), alpha=alpha), generic(np, x.astype(np.float64), alpha=alpha))


# -- Attention ------------------------------------------------------------------------------------

def _attention_bound(x, W, bias, N, sizes, alpha, past=None):
    """The scores' sums of hq products, in another order (hq u sum|q k| alpha each side), move each
    probability by that much relatively; e^ and the softmax's sum (T terms) add (T + 8) u; the output's
    sum of T products p v another T u sum p|v|: all times max|v| (past: its keys and values too)."""
    qkv = x.reshape(-1, x.shape[-1]).astype(np.float64) @ W.astype(np.float64) + (0 if bias is None else bias)
    B, S, _ = x.shape
    hq = sizes[0] // N

    def heads(t, h):
        return np.abs(t).reshape(B, S, N, h).transpose(0, 2, 1, 3)

    q, k, v = (heads(qkv[:, :sizes[0]], hq), heads(qkv[:, sizes[0]:2 * sizes[0]], hq),
               heads(qkv[:, 2 * sizes[0]:], sizes[2] // N))
    if past is not None:
        k, v = np.concatenate([np.abs(past[0]), k], axis=2), np.concatenate([np.abs(past[1]), v], axis=2)
    T = k.shape[2]
    qk = np.einsum("bnsh,bnth->bnst", q, k).max() * alpha
    return 4 * U32 * (hq * qk + 2 * T + 8) * v.max() + 1e-30


MASKS = {
    "none": lambda B, S: None,
    "lengths": lambda B, S: np.array([S, S // 2][:B], np.int32),
    "lengths-int64-beyond": lambda B, S: np.array([S + 5, -1], np.int64),
    "zero-length": lambda B, S: np.array([0, S], np.int32),
    "end-start": lambda B, S: np.array([S - 1, S, 2, 0], np.int32),
    "raw": lambda B, S: (np.arange(S)[None] < np.array([[S], [3]])).astype(np.int32),
    "raw-bool": lambda B, S: np.arange(S)[None] < np.array([[S - 2], [4]]),
    "raw-3d": lambda B, S: (_rng(9).random((B, S, S)) > 0.4).astype(np.int64),
}


@pytest.mark.parametrize("mask", sorted(MASKS))
@pytest.mark.parametrize("unidirectional", [0, 1])
@pytest.mark.parametrize("filter_value", [-10000.0, -3.4028234663852886e38])
def test_attention_matches_the_generic_op(mask, unidirectional, filter_value):
    cpu, generic = _impls("Attention", MS, 1)
    B, S, D, N = 2, 12, 32, 4
    x, W, bias = _f32(B, S, D), _f32(D, 3 * D, seed=1, scale=0.3), _f32(3 * D, seed=2)
    m = MASKS[mask](B, S)
    kw = dict(num_heads=N, unidirectional=unidirectional, mask_filter_value=filter_value)
    got, want = cpu(np, x, W, bias, m, **kw), generic(np, x, W, bias, m, **kw)
    bound = _attention_bound(x, W, bias, N, [D] * 3, 1 / math.sqrt(D // N))
    if mask == "zero-length":  # a row of masked keys only: its scores + filter are rounded to ulp(filter)
        # steps, which the two sides' other sums can round apart: that much more on each probability
        v = np.abs(x.reshape(-1, D).astype(np.float64) @ W[:, 2 * D:] + bias[2 * D:]).max()
        bound += 2 * float(np.spacing(np.float32(-filter_value))) * v
    _within(got, want, bound)


@pytest.mark.parametrize("shape", [(1, 65, 32, 4), (3, 5, 48, 2), (1, 40, 128, 2), (2, 17, 16, 8)])
def test_attention_shapes_and_sizes(shape):
    cpu, generic = _impls("Attention", MS, 1)
    B, S, D, N = shape
    x, W = _f32(B, S, D), _f32(D, 3 * D, seed=1, scale=0.3)
    got, want = cpu(np, x, W, None, num_heads=N), generic(np, x, W, None, num_heads=N)
    _within(got, want, _attention_bound(x, W, None, N, [D] * 3, 1 / math.sqrt(D // N)))
    sizes = [D, D, D // 2]  # another value size, and a scale of its own
    W2 = _f32(D, sum(sizes), seed=3, scale=0.3)
    kw = dict(num_heads=N, qkv_hidden_sizes=sizes, scale=0.3)
    got, want = cpu(np, x, W2, None, **kw), generic(np, x, W2, None, **kw)
    _within(got, want, _attention_bound(x, W2, None, N, sizes, 0.3))


@pytest.mark.parametrize("mask", ["none", "lengths", "raw", "raw-3d"])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention_with_past_and_present_matches_the_generic_op(mask, unidirectional):
    """The past's keys and values first (T = P + S keys), the present (2, B, N, T, h) as the generic op
    stacks it: the same values, copied."""
    cpu, generic = _impls("Attention", MS, 1)
    B, S, D, N, P = 2, 3, 32, 4, 7
    x, W, bias = _f32(B, S, D), _f32(D, 3 * D, seed=1, scale=0.3), _f32(3 * D, seed=2)
    past = _f32(2, B, N, P, D // N, seed=4)
    T = P + S
    m = {"none": None, "lengths": np.array([T, T - 4], np.int32),
         "raw": (np.arange(T)[None] != np.array([[2], [8]])).astype(np.int32),
         "raw-3d": (_rng(9).random((B, S, T)) > 0.3).astype(np.int32)}[mask]
    kw = dict(num_heads=N, unidirectional=unidirectional, n_outputs=2)
    got, want = cpu(np, x, W, bias, m, past, **kw), generic(np, x, W, bias, m, past, **kw)
    np.testing.assert_array_equal(got[1], want[1])
    bound = _attention_bound(x, W, bias, N, [D] * 3, 1 / math.sqrt(D // N), past)
    _within(got[0], want[0], bound)
    _within(cpu(np, x, W, bias, m, past, num_heads=N, unidirectional=unidirectional), want[0], bound)
    if mask == "none":  # no past: the present is this run's keys and values
        np.testing.assert_array_equal(cpu(np, x, W, bias, None, None, num_heads=N, n_outputs=2)[1],
                                      generic(np, x, W, bias, None, None, num_heads=N, n_outputs=2)[1])


@pytest.mark.parametrize("shape", [(2, 12, 32, 4), (1, 17, 16, 2), (3, 1, 8, 1), (2, 40, 64, 4)])
@pytest.mark.parametrize("unidirectional", [0, 1])
@pytest.mark.parametrize("with_bias", [True, False])
def test_attention_with_prepared_weights_is_the_unprepared_path(shape, unidirectional, with_bias):
    """With constant weights (the prepare hook's dict), the shapes' work is kept per input and mask shape,
    whatever the mask's form and dtype on later calls; a small projection is attention_planned_f32's (its sums
    in another order than the BLAS's: within the bound of the generic op; the kernel after it the same), a
    large one np.matmul's (the same bits as without the hook)."""
    from gpuops.ops.cpu import attention as cpu_attention

    cpu, generic = _impls("Attention", MS, 1)
    B, S, D, N = shape
    x, W, bias = _f32(B, S, D), _f32(D, 3 * D, seed=1, scale=0.3), _f32(3 * D, seed=2) if with_bias else None
    kw = dict(num_heads=N, unidirectional=unidirectional, mask_filter_value=-3.4028234663852886e38)
    prepared = cpu_attention.prepare({1: W, 2: bias} if with_bias else {1: W}, kw)
    projected = B * S * D * 3 * D <= cpu_attention.PROJECT_MAX
    masks = [None, np.arange(B, dtype=np.int32) % (S + 1), np.arange(B, dtype=np.int64) % (S + 1),
             np.concatenate([np.full(B, S, np.int32), np.arange(B, dtype=np.int32) % S]),
             np.full((2 * B,), S, np.int32)[::2], (_rng(3).random((B, S)) > 0.3).astype(np.int32)]
    bound = _attention_bound(x, W, bias, N, [D] * 3, 1 / math.sqrt(D // N))
    for m in masks * 2:  # the second round on the kept plans
        want = cpu(np, x, W, bias, m, **kw)
        got = cpu(np, x, W, bias, m, prepared=prepared, **kw)
        kernel_mask = m is not None and m.ndim == 1 and m.dtype == np.int32 and m.flags.c_contiguous
        if projected and (m is None or kernel_mask):
            if m is None or m.min() > 0:  # (a row of masked keys only: softmax of rounded filters)
                _within(got, generic(np, x, W, bias, m, **kw), bound)
            _within(got, want, 2 * bound)
        else:
            _equal(got, want)
    assert {v[-1] is not None for k, v in prepared.items() if type(k) is tuple} == {projected}
    W2 = _f32(D, 3 * D, seed=5, scale=0.3)  # not the prepared weights: the unprepared path
    _equal(cpu(np, x, W2, bias, prepared=prepared, **kw), cpu(np, x, W2, bias, **kw))
    _equal(cpu(np, x.astype(np.float16), W, bias, prepared=prepared, **kw),
           generic(np, x.astype(np.float16), W, bias, **kw))
    assert cpu_attention.prepare({1: W}, dict(kw, do_rotary=1)) is None
    assert cpu_attention.prepare({2: bias}, kw) is None  # the weights fed


def test_attention_forms_the_kernel_does_not_take_are_the_generic_ops():
    cpu, generic = _impls("Attention", MS, 1)
    B, S, D, N = 2, 5, 16, 2
    x, W, bias = _f32(B, S, D), _f32(D, 3 * D, seed=1, scale=0.3), _f32(3 * D, seed=2)
    cases = [((x, W, bias, None, None, _f32(B, N, S, S, seed=5)), {}),  # attention_bias
             ((x, W, bias, np.ones((B, 1, 8, 8), np.int32)), {}),  # the (B, 1, M, M) mask
             ((x.astype(np.float16), W.astype(np.float16), bias.astype(np.float16)), {})]
    for args, kw in cases:
        _equal(cpu(np, *args, num_heads=N, **kw), generic(np, *args, num_heads=N, **kw))
    with pytest.raises(NodeError, match="qkv_hidden_sizes"):
        cpu(np, x, W, bias, num_heads=N, qkv_hidden_sizes=[16, 8, 24])
    with pytest.raises(NodeError, match="past must be"):
        cpu(np, x, W, bias, None, _f32(2, B, N, 3, seed=4), num_heads=N)


# -- Gelu forms -----------------------------------------------------------------------------------

def _gelu_inputs():
    x = np.concatenate([_f32(4093, scale=4.0), [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -40.0, 1e20, -1e20],
                        np.linspace(-12, 12, 1001)]).astype(np.float32)
    return x[:5100].reshape(-1, 60)


def test_bias_gelu_matches_the_generic_op():
    """The float32 sum, then Gelu in double (the CPU Gelu's kernel): that Gelu of A + B bit for bit; the
    generic op's within its erf's accuracy (times |x| / 2) and a few ulp of the result."""
    cpu, generic = _impls("BiasGelu", MS, 1)
    gelu, _ = _impls("Gelu", opset=20)
    A, B = _gelu_inputs(), _f32(60, seed=1)
    got, want = cpu(np, A, B), generic(np, A, B)
    np.testing.assert_array_equal(got, gelu(np, A + B))
    s = np.abs((A + B).astype(np.float64))
    with np.errstate(invalid="ignore"):
        _within(got, want, 8 * U32 * np.abs(want.astype(np.float64)) + ERF_SERIES * s + 1e-40)
    ms, ms_generic = _impls("Gelu", MS, 1)
    np.testing.assert_array_equal(ms(np, A), gelu(np, A))
    for args in ((A, B[:1]), (A[:, :1], B)):  # other broadcasts: the sum, then the CPU Gelu
        np.testing.assert_array_equal(cpu(np, *args), gelu(np, args[0] + args[1]))
    A16, B16 = A.astype(np.float16), B.astype(np.float16)
    half, want = cpu(np, A16, B16), generic(np, A16, B16)  # both in float32, rounded to float16 once
    s = np.abs((A16 + B16).astype(np.float64))
    with np.errstate(invalid="ignore"):
        _within(half, want, 2 * U16 * np.abs(want.astype(np.float64)) + ERF_SERIES * s + 2.0 ** -24)


@pytest.mark.parametrize("with_bias", [True, False])
def test_fast_gelu_matches_the_generic_op(with_bias):
    """x sigmoid(2 z) for x (1 + tanh z) / 2: a few ulp of the result, and the generic op's 1 + tanh z
    rounding (|x| u) where z < 0."""
    cpu, generic = _impls("FastGelu", MS, 1)
    X, bias = _gelu_inputs(), _f32(60, seed=1) if with_bias else None
    got, want = cpu(np, X, bias), generic(np, X, bias)
    s = np.abs((X if bias is None else X + bias).astype(np.float64))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    _within(got, want, 16 * U32 * np.abs(want.astype(np.float64)) + 2 * U32 * s + 1e-37)
    tanh, tanh_generic = _impls("Gelu", opset=20)
    np.testing.assert_array_equal(tanh(np, X, approximate="tanh"), cpu(np, X))
    _equal(cpu(np, X.astype(np.float16), None if bias is None else bias.astype(np.float16)),
           generic(np, X.astype(np.float16), None if bias is None else bias.astype(np.float16)))


@pytest.mark.parametrize("op_type", ["BiasGelu", "FastGelu"])
def test_gelu_with_a_prepared_bias_is_the_unprepared_path(op_type):
    """A constant bias's address kept by the prepare hook: the same bits; another bias, or one the hook does
    not keep (float16, 2-D), is taken as without it."""
    from gpuops.ops.cpu import activation as cpu_activation

    cpu, _ = _impls(op_type, MS, 1)
    X, bias = _gelu_inputs(), _f32(60, seed=1)
    bias.flags.writeable = False  # as the session's constants
    prepared = cpu_activation.prepare_bias({1: bias}, {})
    assert prepared is not None and prepared[0] is bias
    np.testing.assert_array_equal(cpu(np, X, bias, prepared=prepared), cpu(np, X, bias))
    other = _f32(60, seed=2)
    np.testing.assert_array_equal(cpu(np, X, other, prepared=prepared), cpu(np, X, other))
    for b in (bias.astype(np.float16), bias[None], np.zeros(0, np.float32)):
        assert cpu_activation.prepare_bias({1: b}, {}) is None
    assert cpu_activation.prepare_bias({}, {}) is None


def test_kernels_give_the_same_bits_on_several_threads():
    """Rows (and attention's (batch, head) pairs) are independent parts: any split gives the same bits."""
    X, g, b = _f32(64, 40, 512), _f32(512, seed=1), _f32(512, seed=2)
    x, W = _f32(4, 64, 64), _f32(64, 192, seed=1, scale=0.3)
    ln, _ = _impls("LayerNormalization")
    att, _ = _impls("Attention", MS, 1)
    sm, _ = _impls("Softmax", opset=13)
    qg, _ = _impls("QuickGelu", MS, 1)
    bg, _ = _impls("BiasGelu", MS, 1)
    fg, _ = _impls("FastGelu", MS, 1)

    def run():
        return (ln(np, X, g, b)[0], att(np, x, W, None, num_heads=4), sm(np, X), qg(np, X), bg(np, X, b),
                fg(np, X, b))

    one = run()
    before = native.threads()
    native.set_threads(3)
    try:
        for a, c in zip(one, run()):
            np.testing.assert_array_equal(a, c)
    finally:
        native.set_threads(before)


# -- in a session: the prepared constants ----------------------------------------------------------

def test_sessions_use_the_prepared_parameters_and_match_onnxruntime():
    """A LayerNormalization, a SkipLayerNormalization and an Attention with constant parameters, run
    twice (the prepared data serves every run), against onnxruntime."""
    import onnxruntime as ort

    B, S, D, N = 2, 6, 16, 2
    consts = {"g": _f32(D, seed=1), "b": _f32(D, seed=2), "W": _f32(D, 3 * D, seed=3, scale=0.3),
              "qb": _f32(3 * D, seed=4), "bias": _f32(D, seed=5)}
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], epsilon=1e-5),
             helper.make_node("Attention", ["ln", "W", "qb", "len"], ["att"], domain=MS, num_heads=N),
             helper.make_node("SkipLayerNormalization", ["att", "x", "g", "b", "bias"], ["y", "", "", "sum"],
                              domain=MS, epsilon=1e-5)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [B, S, D]),
                                           helper.make_tensor_value_info("len", 6, [B])],
                              [helper.make_tensor_value_info("y", 1, None), helper.make_tensor_value_info("sum", 1, None)],
                              initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
                              ir_version=10)
    feeds = {"x": _f32(B, S, D, seed=6), "len": np.array([S, 3], np.int32)}
    session = gpuops.InferenceSession(model, device="cpu", optimize="none")
    steps = {s.op_type: s for s in session.plan.steps}
    assert isinstance(steps["LayerNormalization"].prepared[1], cpu_norm.Param)
    assert sorted(steps["SkipLayerNormalization"].prepared) == [2, 3, 4]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for _ in range(2):
        got = session.run(None, feeds)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
