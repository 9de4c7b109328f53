"""The fast CPU compute paths (strided im2col, direct 1x1 GEMM, depthwise and grouped conv, float16 in
float32, exact integer GEMMs through float BLAS, RNN input projections) against onnxruntime and
against the generic formulas they replace."""

import contextlib

import array_api_compat.numpy as xnp
import numpy as np
import pytest
from onnx import helper as onnx_helper

from gpuops.ops import conv as conv_mod
from gpuops.ops import windows
from gpuops.ops import quantize as quantize_mod
from gpuops.ops.cpu import conv as cpu_conv
from gpuops.ops.cpu import quantize as cpu_quantize
from tests.ort_versions import ort_older_than

from .common import DEVICES, assert_op_matches_ort, make_model, run_op, run_ort, one_node_model

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
    """The CPU's blocked im2col / direct / depthwise paths and the generic conv against the formula: a
    stack of one strided view per tap and a batched matmul over the groups."""
    case = CONV_CASES[name]
    f = _conv_feeds(case, np.float64)
    attrs = _conv_attrs(case)
    fast = cpu_conv.conv(xnp, f["X"], f["W"], f["B"], **attrs)

    def generic(xp, X, W, B, group, strides, dilations, pads):
        kernel, s, d, pb, pe = windows.spatial_attrs(X.ndim - 2, W.shape[2:], strides, dilations, pads)
        pb, pe, out = windows.conv_geometry(X.shape[2:], kernel, s, d, pb, pe)
        cols = np.stack(list(windows.window_taps(xp, X, kernel, s, d, pb, pe, out)), axis=2)
        cols = cols.reshape(X.shape[0], -1, int(np.prod(out)))
        Y = conv_mod.grouped_matmul(xp, W.reshape(W.shape[0], -1), cols, group)
        return Y.reshape((X.shape[0], W.shape[0]) + tuple(out)) + B.reshape((1, -1) + (1,) * len(out))

    np.testing.assert_allclose(fast, generic(xnp, f["X"], f["W"], f["B"], **attrs), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(conv_mod.conv(xnp, f["X"], f["W"], f["B"], **attrs), fast, rtol=1e-12, atol=1e-12)
    monkeypatch.setattr(windows, "_as_strided", lambda xp: None)  # a namespace without as_strided
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


# -- exact integer GEMMs ------------------------------------------------------------------------


def _int_formula(a, b):
    """int32 accumulation (wrapping) of the exact int64 products."""
    return (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)


@pytest.mark.parametrize("magnitude, k, path", [
    (127, 64, "float32"),  # k * 127 * 127 < 2**24
    (255, 4096, "float64"),  # past float32's exact range, sums still below 2**31
    (255, 40000, "float64, wrapping"),  # sums past 2**31: int32 wrap-around
    (2 ** 20, 2 ** 14, "int64"),  # past float64's exact range
])
def test_exact_int_gemm_is_bit_identical_to_integer_arithmetic(magnitude, k, path):
    rng = np.random.default_rng(k)
    a = rng.integers(-magnitude, magnitude + 1, (3, k)).astype(np.int32)
    b = rng.integers(-magnitude, magnitude + 1, (k, 5)).astype(np.int32)
    a[0], b[:, 0] = magnitude, magnitude  # one extreme dot product per case
    a[1], b[:, 1] = -magnitude, magnitude
    bound = k * magnitude * magnitude
    dtype = quantize_mod.exact_dtype(bound)
    assert np.dtype(dtype).name == path.split(",")[0]
    got = quantize_mod.wrap_int32(np.matmul(a.astype(dtype), b.astype(dtype)), bound)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, _int_formula(a, b))


@pytest.mark.parametrize("device, dtype, k", [
    *((d, t, k) for d in DEVICES for t, k in [(np.uint8, 40), (np.int8, 300)]),
    ("cpu", np.uint8, 40000),  # wraps; on the stand-in the CUDA kernel's CPU emulation takes seconds
])
def test_matmul_integer_extremes_match_the_int64_formula(dtype, k, device):
    """Extreme values and zero points, short and very long (wrapping) dot products; also vs onnxruntime."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(k)
    A = rng.choice([info.min, info.max], (2, k)).astype(dtype)
    B = rng.choice([info.min, info.max], (k, 3)).astype(dtype)
    A[0], B[:, 0] = info.max, info.max
    azp, bzp = np.array(info.min, dtype), np.array(info.max if k < 1000 else 0, dtype)
    feeds = {"A": A, "B": B, "azp": azp, "bzp": bzp}
    (got,) = run_op("MatMulInteger", feeds, device)
    np.testing.assert_array_equal(got, _int_formula(A.astype(np.int32) - int(azp), B.astype(np.int32) - int(bzp)))
    if k < 1000:  # onnxruntime agrees where int32 sums do not wrap
        np.testing.assert_array_equal(got, run_ort(one_node_model("MatMulInteger", feeds), feeds)[0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["2d-grouped-dilated", "depthwise", "1x1-direct", "3d"])
def test_conv_integer_extremes_match_the_int64_formula(name, device):
    case = CONV_CASES[name]
    f = _conv_feeds(case)
    rng = np.random.default_rng(3)
    x = rng.choice([0, 255], f["X"].shape).astype(np.uint8)
    w = rng.choice([-128, 127], f["W"].shape).astype(np.int8)
    feeds = {"x": x, "w": w, "xz": np.array(255, np.uint8), "wz": np.array(-128, np.int8)}
    attrs = _conv_attrs(case)
    (got,) = run_op("ConvInteger", feeds, device, **attrs)
    want = conv_mod.conv(xnp, x.astype(np.int64) - 255, w.astype(np.int64) + 128, **attrs).astype(np.int32)
    np.testing.assert_array_equal(got, want)
    if len(case[2]) == 2 and not ort_older_than("1.24"):  # onnxruntime 1.23 has no int8-weight ConvInteger
        np.testing.assert_array_equal(got, run_ort(one_node_model("ConvInteger", feeds, **attrs), feeds)[0])


# -- recurrences --------------------------------------------------------------------------------


def _rnn_feeds(op_type, direction, seed=0, T=5, batch=3, inp=4, H=6):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op_type]
    D = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(seed)
    return {"X": rng.standard_normal((T, batch, inp)).astype(np.float32),
            "W": rng.standard_normal((D, gates * H, inp)).astype(np.float32),
            "R": rng.standard_normal((D, gates * H, H)).astype(np.float32),
            "B": rng.standard_normal((D, 2 * gates * H)).astype(np.float32)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_type", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_recurrences_with_folded_bias_match_onnxruntime(op_type, direction, device):
    feeds = _rnn_feeds(op_type, direction)
    assert_op_matches_ort(op_type, feeds, device, outputs=2, rtol=1e-5, atol=1e-5, hidden_size=6,
                          direction=direction)


def test_lstm_joint_gate_path_matches_the_gate_by_gate_path():
    """Without peepholes the i, o, f gates go through one activation call; zero peepholes take the
    gate-by-gate path, which must give the same result."""
    from gpuops.ops import rnn

    f = _rnn_feeds("LSTM", "bidirectional", seed=2)
    kw = {"direction": "bidirectional", "hidden_size": 6, "activations": ["HardSigmoid", "Tanh", "Softsign"] * 2}
    fast = rnn.LSTM(xnp, f["X"], f["W"], f["R"], f["B"], **kw)
    slow = rnn.LSTM(xnp, f["X"], f["W"], f["R"], f["B"], None, None, None, np.zeros((2, 18), np.float32), **kw)
    for a, b in zip(fast, slow):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


# -- threads ------------------------------------------------------------------------------------


def test_session_threads_are_applied_during_runs_and_restored():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import gpuops
    from gpuops import threads as threads_mod

    try:
        import scipy.linalg  # noqa: F401  (its own OpenBLAS: sessions made from now on control it too)
    except ImportError:
        pass

    feeds = {"A": np.ones((8, 8), np.float32), "B": np.ones((8, 8), np.float32)}
    model = one_node_model("MatMul", feeds)
    threads_mod.resolve(None)  # what a new session does: rescan the loaded BLAS libraries
    seen = []
    real = threads_mod.blas_threads

    def spy(n):
        seen.append(n)
        return real(n)

    before = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("gpuops.onnx.session.blas_threads", spy)
        with threads_mod.blas_threads(1):  # OpenBLAS caps a larger count at the cores it found
            inside = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
        assert inside == [1] * len(before)
        one = gpuops.InferenceSession(model, device="cpu", threads=1).run(None, feeds)
        default = gpuops.InferenceSession(model, device="cpu").run(None, feeds)
    assert seen == [1, threads_mod.default_threads()]
    assert [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"] == before
    np.testing.assert_array_equal(one[0], default[0])


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "4"])
def test_bad_thread_counts_are_refused(bad):
    import gpuops

    feeds = {"A": np.ones((2, 2), np.float32), "B": np.ones((2, 2), np.float32)}
    with pytest.raises(gpuops.GpuopsError, match="threads must be"):
        gpuops.InferenceSession(one_node_model("MatMul", feeds), device="cpu", threads=bad)


# -- float16 through float32 --------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_type, shapes, attrs", [
    ("MatMul", {"A": (2, 3, 5, 7), "B": (7, 4)}, {}),
    ("MatMul", {"A": (6,), "B": (3, 6, 2)}, {}),
    ("Gemm", {"A": (7, 5), "B": (4, 7), "C": (4,)}, {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}),
])
def test_float16_matmul_and_gemm_are_computed_in_float32(op_type, shapes, attrs, device):
    rng = np.random.default_rng(4)
    f16 = {k: rng.standard_normal(s).astype(np.float16) for k, s in shapes.items()}
    (got,) = run_op(op_type, f16, device, **attrs)
    f32 = {k: v.astype(np.float32) for k, v in f16.items()}
    (want,) = run_ort(one_node_model(op_type, f32, **attrs), f32)
    assert got.dtype == np.float16  # float32 sums rounded once: equal up to a last-bit tie of either BLAS
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float16).astype(np.float32), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_type, shapes, attrs", [
    ("MatMul", {"A": (3, 4, 5, 70), "B": (70, 9)}, {}),  # stacked rows x 2-D weight: one GEMM
    ("MatMul", {"A": (2, 5, 70), "B": (3, 1, 70, 9)}, {}),  # broadcast batch: stays batched
    ("Einsum", {"A": (40, 70), "B": (9, 70)}, {"equation": "ij,kj->ik"}),  # big enough for BLAS
    ("Einsum", {"A": (3, 40, 70), "B": (3, 70, 9)}, {"equation": "bij,bjk->bik"}),
    ("Einsum", {"A": (2, 3), "B": (3, 4)}, {"equation": "ij,jk->ik"}),  # small: einsum's own loop
])
def test_stacked_matmul_and_einsum_match_onnxruntime(op_type, shapes, attrs, device):
    rng = np.random.default_rng(5)
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    assert_op_matches_ort(op_type, feeds, device, rtol=1e-5, atol=1e-5, **attrs)


@pytest.mark.parametrize("op_type, attrs", [("MatMul", {}), ("Gemm", {"transB": 1})])
def test_a_half_weight_is_converted_to_float32_once_per_session(op_type, attrs):
    """The step's prepare hook makes the float32 copy of a constant float16 weight at plan time; every
    run uses it; closing the session drops it. Outside a session, up() converts on every call."""
    import gpuops
    from gpuops.ops import linalg

    rng = np.random.default_rng(6)
    A = rng.standard_normal((3, 256)).astype(np.float16)
    w = rng.standard_normal((256, 256)).astype(np.float16)
    node = onnx_helper.make_node(op_type, ["A", "w"], ["y"], **attrs)
    session = gpuops.InferenceSession(make_model(node, {"A": A}, inits=[("w", w)]), device="cpu", optimize="none")
    (step,) = session.plan.steps
    weight, copy = step.prepared[1]
    assert weight is session.plan.weights["w"] and copy.dtype == np.float32 and not copy.flags.writeable
    np.testing.assert_array_equal(copy, w.astype(np.float32))
    first = session.run(None, {"A": A})[0]
    assert step.prepared[1][1] is copy and step.attrs["prepared"] is step.prepared
    np.testing.assert_array_equal(session.run(None, {"A": A})[0], first)
    want = A.astype(np.float32) @ (w.astype(np.float32).T if attrs else w.astype(np.float32))
    np.testing.assert_allclose(first.astype(np.float32), want, rtol=2e-3, atol=2e-2)
    assert first.dtype == np.float16
    session.close()
    assert step.prepared is None and "prepared" not in step.attrs
    assert linalg.up(w) is not linalg.up(w)


@pytest.mark.parametrize("native_on", [True, False])
def test_a_quantized_weight_is_prepared_once_and_results_stay_exact(native_on):
    """A constant weight's pack (native) or centred copy (NumPy) is made once, kept in the step's
    prepared data, and reused: the same objects on the next call."""
    from gpuops import native

    rng = np.random.default_rng(7)
    A = rng.integers(0, 256, (3, 256), dtype=np.uint8)
    B = rng.integers(0, 256, (256, 256), dtype=np.uint8)
    zp = np.array(131, np.uint8)
    for t in (B, zp):
        t.flags.writeable = False
    with contextlib.ExitStack() as stack:
        if not native_on:
            stack.enter_context(native.disabled())
        kept = cpu_quantize.QuantWeights(B, zp)
        first = cpu_quantize.MatMulInteger(xnp, A, B, np.array(7, np.uint8), zp, prepared=kept)
        made = dict(kept._made)
        assert len(made) == 1
        again = cpu_quantize.MatMulInteger(xnp, A, B, np.array(7, np.uint8), zp, prepared=kept)
        assert kept._made.keys() == made.keys() and all(kept._made[k] is v for k, v in made.items())
    want = _int_formula(A.astype(np.int32) - 7, B.astype(np.int32) - 131)
    np.testing.assert_array_equal(first, want)
    np.testing.assert_array_equal(again, want)
