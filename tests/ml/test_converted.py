"""Models made by the real converters (skl2onnx, onnxmltools; built by tests/ml/make_models.py and
vendored with their inputs in tests/ml/models/) against onnxruntime, computed here at test time.

Labels must be equal; scores, probabilities and regression outputs must agree within 1e-5 of the
output's magnitude. Why 1e-5: both runtimes compute in float32, and the longest sums here (a row
against ~100 support vectors, a few dozen trees or a GEMM over the features) have at most ~150
terms, so each result is within 150 x 2**-24 ~ 1e-5 of the terms' magnitude of the exact value,
whatever the order of summation.

A label may differ only where onnxruntime's own scores tie within that tolerance (a forest whose
trees vote 50/50): there either label is right, and the order of a float sum decides.
"""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import gpuops

from tests.conformance.harness import device_guard
from tests.ort_versions import ort_older_than

MODELS = pathlib.Path(__file__).parent / "models"
NAMES = sorted(p.stem for p in MODELS.glob("*.onnx"))
TOL = 1e-5  # relative to the output's largest magnitude; see the module docstring
# onnxruntime 1.25-1.27 write a binary forest's probabilities as [-p, p] (fixed in 1.28)
BINARY_FORESTS = {"decision_tree_binary", "extra_trees_binary", "random_forest_binary", "random_forest_binary_zipmap"}


def _load(name):
    model = onnx.load(MODELS / f"{name}.onnx")
    with np.load(MODELS / f"{name}.npz", allow_pickle=True) as f:
        feeds = {k: f[k] for k in f.files}
    return model, feeds


def _scores(outputs):
    """The float output of a classifier (its probabilities or scores) as an [N, C] array, if any."""
    for o in outputs[1:]:
        if isinstance(o, list):
            keys = list(o[0])
            return np.array([[row[k] for k in keys] for row in o])
        if isinstance(o, np.ndarray) and o.dtype.kind == "f" and o.ndim == 2:
            return o
    return None


def _compare_labels(got, want, scores, classes, name):
    if np.array_equal(got, want):
        return
    assert got.shape == want.shape, f"{name}: labels of shape {got.shape} != {want.shape}"
    bad = np.flatnonzero(got != want)
    assert scores is not None, f"{name}: labels differ at rows {bad.tolist()}"
    index = {c: i for i, c in enumerate(classes)}
    for r in bad:
        row = scores[r]
        tol = TOL * max(1.0, float(np.abs(row).max()))
        ours = row[index[got[r]]] if got[r] in index else -np.inf
        assert row.max() - ours <= tol, f"{name}: row {r} labelled {got[r]!r}, onnxruntime says {want[r]!r} ({row})"


def _compare(got, want, name, want_all):
    if isinstance(want, list):  # ZipMap's sequence of maps
        assert isinstance(got, list) and len(got) == len(want), f"{name}: expected a list of {len(want)} maps"
        for g, w in zip(got, want):
            assert isinstance(g, dict) and list(g) == list(w), f"{name}: map keys {list(g)} != {list(w)}"
            values = np.array(list(w.values()))
            np.testing.assert_allclose(list(g.values()), values, rtol=TOL, atol=TOL * max(1.0, np.abs(values).max()),
                                       err_msg=name)
        return
    assert isinstance(got, np.ndarray), f"{name}: expected an array, got {type(got).__name__}"
    assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
    if want.dtype == object or want.dtype.kind in "iub":
        assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != {want.dtype}"
        if want.ndim != 1:
            np.testing.assert_array_equal(got, want, err_msg=name)
            return
        scores = _scores(want_all)
        classes = list(want_all[1][0]) if isinstance(want_all[1], list) else sorted(set(want.tolist()))
        if scores is not None and not isinstance(want_all[1], list):
            classes = _class_order(want, scores)
        _compare_labels(got, want, scores, classes, name)
        return
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != {want.dtype}"
    scale = max(1.0, float(np.nanmax(np.abs(want)))) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL * scale, equal_nan=True, err_msg=name)


def _class_order(labels, scores):
    """The class of each score column, read off the rows whose label is their top score."""
    order = {}
    for lab, row in zip(labels.tolist(), scores):
        order.setdefault(int(np.argmax(row)), lab)
    return [order.get(i) for i in range(scores.shape[1])]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("name", NAMES)
def test_converted_model_matches_onnxruntime(name, device):
    if name in BINARY_FORESTS and not ort_older_than("1.25") and ort_older_than("1.28"):
        pytest.skip("onnxruntime 1.25-1.27 write a binary forest's probabilities as [-p, p] (fixed in 1.28)")
    model, feeds = _load(name)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    sess = gpuops.InferenceSession(model, device=device)
    with device_guard(device):
        got = sess.run(None, dict(feeds))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        _compare(g, w, f"{name} output {model.graph.output[i].name}", want)


def test_every_model_has_its_inputs():
    assert len(NAMES) >= 50, "tests/ml/models is missing models: run python -m tests.ml.make_models"
    for name in NAMES:
        assert (MODELS / f"{name}.npz").exists(), name
