"""Models that killed the process (found by ``python -m tests.fuzz``), kept in tests/fuzz/crashers/:
each is loaded in a child process, which must survive and get a ``ModelError``.

- ``split_num_outputs.onnx``: a Split whose ``num_outputs`` (1) differs from its 2 outputs; onnx
  1.23's shape inference aborts on it (a failed bounds assertion).
- ``conv_strides_tensor.onnx``: a Conv whose ``strides`` is a TENSOR attribute holding [0, 4]; read as
  a stride of 0, it reached the native conv kernel, which died of an integer division by zero.
- ``maxpool_kernel_zero.onnx``: a MaxPool of ``kernel_shape`` [0, 2]; the native pooling kernel read
  out of bounds (onnxruntime refuses non-positive kernel sizes, strides and dilations).
- ``conv_stride_huge.onnx``: a Conv of stride 2**62; the native direct conv kernel read out of bounds
  (its sizes are 32-bit: gpuops.onnx.validate.MAX_WINDOW).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CRASHERS = sorted((Path(__file__).parent / "crashers").glob("*.onnx"))

CHILD = """
import sys
import numpy as np
import gpuops
path, device = sys.argv[1:]
try:
    sess = gpuops.InferenceSession(path, device=device)
    feeds = {a.name: np.ones([d if isinstance(d, int) else 1 for d in a.shape], a.dtype) for a in sess.get_inputs()}
    sess.run(None, feeds)
except gpuops.ModelError as e:
    print("ModelError:", e)
except gpuops.GpuopsError as e:
    print(type(e).__name__ + ":", e)
else:
    print("ran")
"""


def test_the_crashers_are_here():
    assert {p.name for p in CRASHERS} >= {"split_num_outputs.onnx", "conv_strides_tensor.onnx",
                                          "maxpool_kernel_zero.onnx", "conv_stride_huge.onnx"}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("path", CRASHERS, ids=[p.stem for p in CRASHERS])
def test_a_model_that_crashed_the_process_is_a_model_error(path, device):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", CHILD, str(path), device], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=300)
    assert p.returncode == 0, f"the process died ({p.returncode}): {p.stderr[-1000:]}"
    assert p.stdout.startswith("ModelError: node "), p.stdout + p.stderr[-1000:]
