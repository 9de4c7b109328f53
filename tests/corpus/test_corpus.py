"""The corpus of real models (benchmarks/corpus/manifest.json, gpuops.bench.corpus) against onnxruntime.

Every model runs in gpuops on ``cpu`` and on ``cuda`` (the CPU stand-in of CuPy without a GPU, under its
no-implicit-transfer guard), with the graph optimizer (``optimize="all"``, the default) and without it
(``optimize="none"``; fetched models on ``cuda`` with the optimizer only, marked ``slow``), on the
manifest's feeds, and is compared with onnxruntime's CPU provider running the same file; on the CPU
with the optimizer, the shape-specialized plan (the third run) is compared too. Tolerances are float32
error bounds derived from each model's sums (gpuops/bench/tolerance.py); integer outputs (labels) must
be equal.

Vendored models always run. Fetched ones (benchmarks/corpus/fetch.py) are skipped only when their file
is absent from the cache; a vendored file that is missing or whose sha256 differs fails.

EXPECTED_FAILURES lists what gpuops cannot run yet, with the reason: the test asserts that the failure
still happens with that error, so an entry that starts passing fails the run and must be removed. The
optimizer runs strict here (conftest.py): a rewrite that raises on a corpus model fails its test.
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import gpuops
from gpuops.bench.exact_int8 import for_onnxruntime
from gpuops.bench.corpus import FETCH_COMMAND, VENDORED, load_manifest, make_feeds, model_path

from ..conformance.harness import device_guard, unchanged
from gpuops.bench.tolerance import tolerances

ENTRIES = load_manifest()
BY_NAME = {e["name"]: e for e in ENTRIES}
# (model, optimize or "*") -> (gpuops error class, text its message must contain, root cause). Empty since
# commits 7bb84f9 (fold_mul_add_into_conv on Paddle2ONNX's bias-less Conv + Add) and 3dc2bd9 (the ai.onnx.ml
# ops skl2onnx writes: Scaler, LinearClassifier, Normalizer, TreeEnsembleRegressor)
EXPECTED_FAILURES: dict[tuple[str, str], tuple[str, str, str]] = {}


def expected_failure(name: str, optimize: str):
    return EXPECTED_FAILURES.get((name, optimize)) or EXPECTED_FAILURES.get((name, "*"))


def test_manifest():
    """Each entry names its source, licence and sha256; vendored files are here with that sha256 and a
    licence beside them; expected failures name corpus models."""
    assert len(BY_NAME) == len(ENTRIES), "duplicate names in the manifest"
    for e in ENTRIES:
        assert {"name", "kind", "file", "vendored", "source", "licence", "sha256", "feeds"} <= e.keys(), e["name"]
        assert e["kind"] in ("trained", "exported"), e["name"]
        assert ("pypi" in e["source"]) == (e["kind"] == "trained"), e["name"]
        if e["vendored"]:
            path = model_path(e)
            assert path.parent == VENDORED and path.exists(), f"{e['name']}: vendored file {path} is missing"
            assert hashlib.sha256(path.read_bytes()).hexdigest() == e["sha256"], f"{e['name']}: sha256 differs"
            if e["kind"] == "trained":
                licence = e["licence"].split("tests/corpus/models/")[-1].rstrip(")")
                assert (VENDORED / licence).exists(), f"{e['name']}: no licence file {licence}"
    for name, _ in EXPECTED_FAILURES:
        assert name in BY_NAME, f"EXPECTED_FAILURES names {name!r}, which is not in the manifest"
    vendored = {e["file"] for e in ENTRIES if e["vendored"]}
    stray = {p.name for p in VENDORED.glob("*.onnx")} - vendored
    assert not stray, f"files in {VENDORED} that the manifest does not list as vendored: {sorted(stray)}"


@functools.lru_cache(maxsize=None)
def oracle(name: str):
    """(model, feeds, onnxruntime's outputs, {output: (tolerance, how)}) of a corpus model, once per model.
    Where onnxruntime's u8 x s8 sums saturate (x86 without VNNI), it runs the model with its int8 weights
    made uint8, whose sums it computes exactly (:mod:`gpuops.bench.exact_int8`)."""
    e = BY_NAME[name]
    path = model_path(e)
    if not path.exists():
        assert not e["vendored"], f"vendored model {path} is missing"
        pytest.skip(f"{name} is fetched, not vendored, and absent from {path.parent}: run {FETCH_COMMAND}")
    model = onnx.load(str(path))
    feeds = make_feeds(e["feeds"], np.random.default_rng(0))
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    reference = for_onnxruntime(model)
    source = str(path) if reference is model else reference.SerializeToString()
    want = ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"]).run(None, feeds)
    return model, feeds, want, tolerances(reference, feeds)


def run_gpuops(model, feeds, device, optimize):
    """The outputs of each run that uses a different plan: the first run, and on the CPU with the
    optimizer the third (a feed-shape signature run twice gets a shape-specialized plan; a build that
    fails falls back to the session's plan, which fails here)."""
    sess = gpuops.InferenceSession(model, device=device, optimize=optimize)
    feeds = dict(feeds)
    runs = 3 if device == "cpu" and optimize != "none" else 1
    with device_guard(device), unchanged(feeds):
        outputs = [sess.run(None, feeds) for _ in range(runs)]
    if runs == 3:
        failed = [sig["reason"] for sig in sess.shape_plan_status()["signatures"]
                  if "specialization failed" in sig.get("reason", "")]
        assert not failed, failed
    return [outputs[0], outputs[-1]] if runs == 3 else outputs


def _cases():
    """(name, device, optimize) for every model; a fetched model (large: up to 54 MB, the integer kernels
    emulated on the stand-in take minutes) runs on the stand-in with the optimizer only, marked slow (the
    CUDA path depends on the ops; both optimizer levels run on the cpu)."""
    for name, e in BY_NAME.items():
        for device in ("cpu", "cuda"):
            for optimize in ("all", "none"):
                if device == "cpu" or e["vendored"]:
                    yield pytest.param(name, device, optimize, id=f"{name}-{device}-{optimize}")
                elif optimize == "all":
                    yield pytest.param(name, device, optimize, id=f"{name}-{device}-{optimize}", marks=pytest.mark.slow)


@pytest.mark.parametrize("name, device, optimize", list(_cases()))
def test_matches_onnxruntime(name, device, optimize):
    model, feeds, want, tols = oracle(name)
    failure = expected_failure(name, optimize)
    if failure:
        cls, text, cause = failure
        with pytest.raises(getattr(gpuops, cls)) as info:
            run_gpuops(model, feeds, device, optimize)
        assert text in str(info.value), f"{name} fails differently now ({info.value}); listed as: {cause}"
        return
    for got in run_gpuops(model, feeds, device, optimize):
        check(model, got, want, tols)


def check(model, got, want, tols):
    assert len(got) == len(want)
    for o, g, w in zip(model.graph.output, got, want):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, f"{o.name}: {g.dtype}{g.shape}, expected {w.dtype}{w.shape}"
        if o.name not in tols:  # integer outputs (labels, indices) are exact
            np.testing.assert_array_equal(g, w, err_msg=o.name)
            continue
        tol, how = tols[o.name]
        diff = float(np.max(np.abs(g.astype(np.float64) - w))) if w.size else 0.0
        assert diff <= tol, f"{o.name}: max |gpuops - onnxruntime| = {diff:.3g} > {tol:.3g} ({how})"
