"""com.microsoft math ops against onnxruntime's CPU kernels; Rfft / Irfft / ComplexMul(Conj) /
IsAllFinite (no CPU kernel) against NumPy formulas, CDist's other metrics against scipy (when installed)."""

import numpy as np
import pytest

from .helpers import check, ms_node, ort_has_kernel, rand, randint


# -- FFT ----------------------------------------------------------------------------------------

def _as_pairs(z, dtype):
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


@pytest.mark.parametrize("signal_ndim,onesided,normalized", [(1, 1, 0), (1, 0, 1), (2, 1, 1), (2, 0, 0)])
def test_rfft_formula(signal_ndim, onesided, normalized):
    x = rand(2, 6, 8)
    node = ms_node("Rfft", ["x"], ["y"], signal_ndim=signal_ndim, onesided=onesided, normalized=normalized)
    assert not ort_has_kernel(node, {"x": x})
    axes = tuple(range(3 - signal_ndim, 3))

    def ref(x):
        transform = np.fft.rfftn if onesided else np.fft.fftn
        z = transform(x.astype(np.float64), axes=axes, norm="ortho" if normalized else None)
        return [_as_pairs(z, np.float32)]
    check(node, {"x": x}, ref=ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("signal_ndim,onesided,normalized", [(1, 1, 0), (1, 1, 1), (2, 1, 0), (1, 0, 0)])
def test_irfft_formula(signal_ndim, onesided, normalized):
    signal = rand(2, 4, 8).astype(np.float64)
    axes = tuple(range(3 - signal_ndim, 3))
    norm = "ortho" if normalized else None
    z = (np.fft.rfftn if onesided else np.fft.fftn)(signal, axes=axes, norm=norm)
    x = _as_pairs(z, np.float32)
    node = ms_node("Irfft", ["x"], ["y"], signal_ndim=signal_ndim, onesided=onesided, normalized=normalized)
    assert not ort_has_kernel(node, {"x": x})
    # the inverse gives the signal back
    check(node, {"x": x}, ref=lambda x: [signal.astype(np.float32)], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op_type,conj", [("ComplexMul", False), ("ComplexMulConj", True)])
def test_complex_mul_formula(op_type, conj):
    a, b = rand(3, 4, 2), rand(4, 2)
    node = ms_node(op_type, ["a", "b"], ["c"])
    assert not ort_has_kernel(node, {"a": a, "b": b})

    def ref(a, b):
        za, zb = a[..., 0] + 1j * a[..., 1], b[..., 0] + 1j * b[..., 1]
        return [_as_pairs(za * (np.conj(zb) if conj else zb), np.float32)]
    check(node, {"a": a, "b": b}, ref=ref, rtol=1e-5, atol=1e-6)


# -- CDist --------------------------------------------------------------------------------------

@pytest.mark.parametrize("metric", ["sqeuclidean", "euclidean"])
def test_cdist_onnxruntime(metric):
    check(ms_node("CDist", ["a", "b"], ["c"], metric=metric), {"a": rand(5, 3), "b": rand(4, 3)}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("metric", ["cityblock", "chebyshev", "braycurtis", "canberra", "cosine", "correlation",
                                    "minkowski", "jensenshannon", "seuclidean", "mahalanobis"])
def test_cdist_scipy_metrics(metric):
    distance = pytest.importorskip("scipy.spatial.distance")
    a, b = np.abs(rand(6, 3)) + 0.1, np.abs(rand(5, 3)) + 0.1
    check(ms_node("CDist", ["a", "b"], ["c"], metric=metric), {"a": a, "b": b},
          ref=lambda a, b: [distance.cdist(a.astype(np.float64), b.astype(np.float64), metric)
                            .astype(np.float32)], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("metric", ["hamming", "dice", "jaccard", "matching", "rogerstanimoto", "russellrao",
                                    "sokalmichener", "sokalsneath", "yule"])
def test_cdist_boolean_metrics(metric):
    distance = pytest.importorskip("scipy.spatial.distance")
    a, b = randint(0, 2, 6, 8).astype(np.float32), randint(0, 2, 5, 8).astype(np.float32)
    a[0] = 1.0  # no all-false rows (yule / sokalsneath would divide 0 by 0 differently)
    # scipy >= 1.15 dropped sokalmichener, which was the same formula as rogerstanimoto
    ref_metric = "rogerstanimoto" if metric == "sokalmichener" else metric
    check(ms_node("CDist", ["a", "b"], ["c"], metric=metric), {"a": a, "b": b},
          ref=lambda a, b: [distance.cdist(a != 0, b != 0, ref_metric).astype(np.float32)],
          rtol=1e-5, atol=1e-6)


# -- tensor ops ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-5), (np.float64, 1e-12), (np.float16, 2e-3)])
def test_inverse(dtype, tol):
    x = (rand(3, 4, 4) + 4 * np.eye(4, dtype=np.float32)).astype(dtype)
    check(ms_node("Inverse", ["x"], ["y"]), {"x": x}, rtol=tol * 10, atol=tol)


@pytest.mark.parametrize("upper,k", [(1, None), (0, 1), (1, -2), (0, -1)])
def test_trilu(upper, k):
    feeds = {"x": rand(2, 4, 5)}
    if k is not None:
        feeds["k"] = np.array(k, np.int64)
    check(ms_node("Trilu", list(feeds), ["y"], upper=upper), feeds)


@pytest.mark.parametrize("start,limit,delta", [(0, 10, 3), (5, -4, -2), (1.5, 4.0, 0.5), (2, 7, None)])
def test_range(start, limit, delta):
    dtype = np.float32 if isinstance(start, float) else np.int32
    feeds = {"s": np.array(start, dtype), "l": np.array(limit, dtype)}
    if delta is not None:
        feeds["d"] = np.array(delta, dtype)
    check(ms_node("Range", list(feeds), ["y"]), feeds)


def _unique_first_occurrence(x):
    values, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return [values[order], rank[inverse.reshape(-1)].astype(np.int64), counts[order].astype(np.int64)]


@pytest.mark.parametrize("x", [np.array([0.5, -1, 0.5, 2, 2, 7], np.float32), np.array([2, 1, 1, 3, 4, 3], np.int64),
                               np.array(["b", "a", "b", "c"], dtype=object)])
def test_unique(x):
    node = ms_node("Unique", ["x"], ["y", "idx", "counts"])
    # onnxruntime registers float only; other types against the spec's example semantics
    check(node, {"x": x}, ref=None if ort_has_kernel(node, {"x": x}) else _unique_first_occurrence)


@pytest.mark.parametrize("indices", [np.array([[0, 0], [1, 1]], np.int64), np.array([[1], [0]], np.int32),
                                     np.array([[[0, 1]], [[1, 0]]], np.int64)])
def test_gather_nd(indices):
    check(ms_node("GatherND", ["d", "i"], ["y"]), {"d": rand(2, 2, 3), "i": indices})


@pytest.mark.parametrize("axis", [0, 2, -1])
def test_expand_dims(axis):
    check(ms_node("ExpandDims", ["x", "a"], ["y"]), {"x": rand(2, 3), "a": np.array(axis, np.int32)})


@pytest.mark.parametrize("mode,pads,value", [("constant", [0, 2, 1, 0], 1.5), ("reflect", [1, 1, 1, 2], None),
                                             ("edge", [[0, 1, 2, 1]], None), ("constant", [1, -1, 0, 1], None)])
def test_pad(mode, pads, value):
    feeds = {"x": rand(3, 4), "p": np.array(pads, np.int64)}
    if value is not None:
        feeds["v"] = np.array([value], np.float32)
    check(ms_node("Pad", list(feeds), ["y"], mode=mode), feeds)


@pytest.mark.parametrize("attrs", [{}, {"isinf_only": 1}, {"isnan_only": 1}])
def test_is_all_finite_formula(attrs):
    good, inf, nan = rand(3), np.array([1, np.inf], np.float32), np.array([np.nan], np.float32)
    node = ms_node("IsAllFinite", ["a", "b"], ["y"], **attrs)
    assert not ort_has_kernel(node, {"a": good, "b": good})
    for b in (good, inf, nan):
        if attrs.get("isinf_only"):
            want = not np.isinf(b).any()
        elif attrs.get("isnan_only"):
            want = not np.isnan(b).any()
        else:
            want = bool(np.isfinite(b).all())
        check(node, {"a": good, "b": b}, ref=lambda a, b: [np.array(want)])
