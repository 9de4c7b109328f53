"""Gelu of float16 computes in float32 on every device, as onnxruntime does: in float16, ``1 + erf``
cancels for x below about -3.5 and the result became 0 where float16 holds it (-1.5e-6 at x = -5)."""

import math

import numpy as np
import pytest

from .common import DEVICES, one_node_model, run_gpuops


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_float16_gelu_is_relatively_exact_in_the_tail(device, approximate):
    x = np.linspace(-6, 3, 181).astype(np.float16)
    x64 = x.astype(np.float64)
    if approximate == "none":
        want = 0.5 * x64 * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x64]))
    else:
        want = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    model = one_node_model("Gelu", {"X": x}, ["Y"], opset=20, approximate=approximate)
    got = run_gpuops(model, {"X": x}, device)[0].astype(np.float64)
    # float32 arithmetic: 1 + erf (or tanh) is off by a few 2**-24 absolute, times 0.5 |x|; then one float16
    # rounding of the result: 2**-11 relative, or float16's subnormal step 2**-24 absolute
    bound = 2 ** -10 * np.abs(want) + 2 * np.abs(x64) * 2 ** -24 + 2 ** -24
    assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) / bound)
