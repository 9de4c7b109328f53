"""The onnx package's nine "light" model tests (resnet50, vgg19, densenet121, ...), run through gpuops
on cpu and cuda (real CuPy, or the CPU stand-in in strict no-implicit-transfer mode).

As onnx's backend runner does for ``onnx/backend/test/data/light``: the model's one graph input is fed
``arange(n).reshape(shape) / n`` as float32 (``Runner.generate_dummy_data(random=False)``), the
expected output is the stored ``light_<name>_output_0.pb`` and rtol/atol come from the model's
``data/real/test_<name>/data.json``. Each run's wall time is printed and kept as the ``seconds`` user property.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import gpuops

from .harness import assert_close, device_guard

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


def test_light_model_list_is_complete():
    on_disk = sorted(p.name[len("light_"):-len(".onnx")] for p in (Path(DATA_DIR) / "light").glob("light_*.onnx"))
    assert on_disk == MODELS


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("device", DEVICES)
def test_light_model(name, device, request):
    model, feeds, expected, rtol, atol = _case(name)
    sess = gpuops.InferenceSession(model, device=device)
    start = time.perf_counter()
    with device_guard(device):
        got = sess.run(None, feeds)
    seconds = time.perf_counter() - start
    request.node.user_properties.append(("seconds", round(seconds, 3)))
    print(f"light {name} on {device}: {seconds:.2f}s")
    assert len(got) == len(expected)
    for out, g, e in zip(model.graph.output, got, expected):
        assert np.isfinite(e).all()
        assert_close(g, e, rtol, atol, out.name)
