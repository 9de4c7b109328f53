"""The onnx package's nine "light" model tests (resnet50, vgg19, densenet121, ...), run through gpuops
on cpu and cuda (real CuPy, or the CPU stand-in in strict no-implicit-transfer mode).

As onnx's backend runner does for ``onnx/backend/test/data/light``: the model's one graph input is fed
``arange(n).reshape(shape) / n`` as float32 (``Runner.generate_dummy_data(random=False)``). Each run's
wall time is printed and kept as the ``seconds`` user property.

What is compared, and to what tolerance (:func:`check_light_outputs`): the light models' weights are
positive constants, so all 1000 logits of a classifier are about equal and huge (up to 1e31): their
last bit is worth 1e3 and more, and a one-ulp difference between two correct float32 implementations
(another BLAS core type, another summation order) turns the stored uniform softmax (0.001 each) into
one-hot. So the logits (the input of the final Softmax, exposed as an extra graph output) are compared
with onnxruntime's, relative to their largest value, within the float32 error bound
:func:`gpuops.selftest.output_tolerances` derives from the model (for a dot product of K terms,
``|err| <= gamma_K sum |a_i b_i|``, ``gamma_K ~ K u``, summed along the network); a softmax is held to
what its logits' difference allows, and compared with the stored output only where that tolerance is
below 1 (see :func:`gpuops.selftest.compare_outputs`).

This is onnx's conformance check on its stored data, and no more: every weight of a light model is
one repeated constant, so a convolution with its kernel flipped computes the same thing. Kernels are
checked on the random-weight variants of the same models (test_light_models_random.py here,
tests/cuda/test_graph_capture_models.py for CUDA graphs).
"""

from __future__ import annotations

import functools
import json
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import gpuops
from gpuops import selftest

from .harness import device_guard

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from onnx.backend.test.loader import DATA_DIR
    from onnx.backend.test.runner import Runner

MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
          "squeezenet", "vgg19", "zfnet512"]
DEVICES = os.environ.get("GPUOPS_CONFORMANCE_DEVICES", "cpu,cuda").split(",")


def _case(name: str):
    meta = json.loads((Path(DATA_DIR) / "real" / f"test_{name}" / "data.json").read_text())
    path = Path(DATA_DIR).parent.parent.parent.parent / meta["url"]  # url is relative to site-packages
    model = onnx.load(str(path))
    inits = {t.name for t in model.graph.initializer}
    feeds = {x.name: Runner.generate_dummy_data(x, seed=0, name=name, random=False)
             for x in model.graph.input if x.name not in inits}
    prefix = str(path)[: -len(".onnx")]
    expected = [numpy_helper.to_array(onnx.load_tensor(f"{prefix}_output_{i}.pb"))
                for i in range(len(model.graph.output))]
    return model, feeds, expected, meta["rtol"], meta["atol"]


@dataclass(frozen=True)
class LightCase:
    """A light model with its logits exposed (:func:`gpuops.selftest.with_inner_outputs`), its feeds,
    onnxruntime's outputs (the oracle), onnx's stored outputs (the original graph outputs), and the
    tolerances of :func:`gpuops.selftest.output_tolerances`."""

    name: str
    model: onnx.ModelProto
    feeds: dict
    oracle: list
    stored: list
    tolerances: dict
    softmax: dict

    @property
    def names(self) -> list[str]:
        return [o.name for o in self.model.graph.output]


@functools.lru_cache(maxsize=None)
def light_case(name: str) -> LightCase:
    """The :class:`LightCase` of ``name`` (built once per process; do not change its model)."""
    import onnxruntime as ort

    model, feeds, stored, _, _ = _case(name)
    model = selftest.with_inner_outputs(model)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    oracle = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)
    tolerances, _how = selftest.output_tolerances(model)
    return LightCase(name, model, feeds, oracle, stored, tolerances, selftest.softmax_outputs(model))


def check_light_outputs(case: LightCase, got: list) -> None:
    """``got`` (gpuops' outputs of ``case.model``) against onnxruntime's, and against the stored outputs
    where they carry information: a stored softmax is compared only when the logits' error bound
    ``delta`` (two implementations' logits may differ by ``tolerance * max |logit|``) leaves a tolerance
    ``expm1(2 delta) + 2 gamma(n + 8)`` below 1; the constant-weight light models' huge logits leave
    none but for shufflenet's and inception_v2's."""
    got = [np.asarray(g) for g in got]
    outs = selftest.compare_outputs(case.names, got, case.oracle, case.tolerances, case.softmax)
    bad = [f"{o['name']}: {o.get('error')}" for o in outs if not o["ok"]]
    assert not bad, f"{case.name} vs onnxruntime: " + "; ".join(bad)
    oracle = dict(zip(case.names, case.oracle))
    for name, g, e in zip(case.names, got, case.stored):
        assert np.isfinite(e).all()
        tol = case.tolerances[name]
        spec = case.softmax.get(name)
        if spec is not None:
            logits = oracle[spec["logits"]]
            delta = case.tolerances[spec["logits"]] * float(np.abs(logits).max())
            n = int(np.prod([g.shape[a] for a in selftest.softmax_axes(spec, g.ndim)]))
            tol = float(np.expm1(min(2 * delta, 700.0))) + 2 * selftest.gamma(n + selftest.NODE_ROUNDINGS)
            if spec["op"] == "LogSoftmax":
                tol = 2 * delta / float(np.abs(e).max()) + 2 * selftest.gamma(n + selftest.NODE_ROUNDINGS)
            if tol >= 1:
                continue  # ill-conditioned: compare_outputs checked its rows' sums
        (rec,) = selftest.compare_outputs([name], [g], [e], {name: tol})
        assert rec["ok"], f"{case.name} vs the stored output {name}: {rec.get('error')}"


def test_light_model_list_is_complete():
    on_disk = sorted(p.name[len("light_"):-len(".onnx")] for p in (Path(DATA_DIR) / "light").glob("light_*.onnx"))
    assert on_disk == MODELS


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("device", DEVICES)
def test_light_model(name, device, request):
    case = light_case(name)
    sess = gpuops.InferenceSession(case.model, device=device)
    start = time.perf_counter()
    with device_guard(device):
        got = sess.run(None, case.feeds)
    seconds = time.perf_counter() - start
    request.node.user_properties.append(("seconds", round(seconds, 3)))
    print(f"light {name} on {device}: {seconds:.2f}s")
    check_light_outputs(case, got)


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet"])
def test_a_wrong_result_fails_the_check(name):
    """The check is not vacuous: logits off by 1% of their largest value fail it, on the ill-conditioned
    squeezenet (whose softmax it cannot compare) as on shufflenet (whose stored softmax it compares)."""
    case = light_case(name)
    got = [np.array(o, copy=True) for o in case.oracle]
    check_light_outputs(case, got)
    logits = case.softmax[case.names[0]]["logits"]
    i = case.names.index(logits)
    got[i] = got[i] + np.float32(0.01) * np.abs(got[i]).max()
    with pytest.raises(AssertionError, match=f"{logits}: relative error"):
        check_light_outputs(case, got)
