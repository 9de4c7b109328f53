"""The quantized contrib ops share one quantize formula with QuantizeLinear (gpuops.ops.quantize):
round half to even, add the zero point, saturate, and NaN goes to the low end of the range, as in
onnxruntime's MLAS kernels (a plain float-to-int cast of NaN is undefined, and CPUs and GPUs differ).

A NaN arises from infinite scales: onnxruntime's quantization tool writes ``scale = inf`` for a tensor
whose calibrated range is infinite (T5's relative-position ``Log`` of 0, see tests/zoo)."""

import numpy as np
import pytest

from .helpers import DEVICES, make_model, ms_node, run_gpuops, run_ort

INF = np.float32(np.inf)


def _quantized(dtype, n=24):
    info = np.iinfo(dtype)
    return np.linspace(info.min, info.max, n).round().astype(dtype)


# (A_scale, B_scale, C_scale): NaN ratios (inf / inf), zero ratios (finite / inf), an infinite ratio. The
# infinite ratio is left out for QLinearAdd: onnxruntime computes it in fixed point, where an infinite
# ratio has no value (it returns the low end for +inf too); gpuops saturates +-inf, as the formula says.
CASES = [(op_type, scales) for op_type in ("QLinearMul", "QLinearAdd")
         for scales in ((INF, 0.5, INF), (0.25, 0.5, INF), (INF, 0.5, 0.125))
         if not (op_type == "QLinearAdd" and scales == (INF, 0.5, 0.125))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,zp", [(np.int8, 0), (np.int8, -5), (np.uint8, 128)])
@pytest.mark.parametrize("op_type,scales", CASES)
def test_binary_with_infinite_scales_matches_onnxruntime(device, dtype, zp, op_type, scales):
    a_scale, b_scale, c_scale = (np.array(s, np.float32) for s in scales)
    feeds = {"A": _quantized(dtype), "B": _quantized(dtype)[::-1].copy()}
    z = np.array(zp, dtype)
    node = ms_node(op_type, ["A", "sa", "za", "B", "sb", "zb", "sc", "zc"], ["C"])
    model = make_model(node, feeds)
    model.graph.initializer.extend(
        [_tensor(n, v) for n, v in (("sa", a_scale), ("za", z), ("sb", b_scale), ("zb", z), ("sc", c_scale), ("zc", z))])
    want = run_ort(model, feeds)[0]
    got = run_gpuops(model, feeds, device)[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,zp", [(np.int8, 3), (np.uint8, 128)])
def test_lookup_with_infinite_output_scale_matches_onnxruntime(device, dtype, zp):
    feeds = {"X": _quantized(dtype)}
    node = ms_node("QLinearSigmoid", ["X", "sx", "zx", "sy", "zy"], ["Y"])
    model = make_model(node, feeds)
    z = np.array(zp, dtype)
    model.graph.initializer.extend([_tensor("sx", np.array(0.1, np.float32)), _tensor("zx", z),
                                    _tensor("sy", np.array(INF)), _tensor("zy", z)])
    np.testing.assert_array_equal(run_gpuops(model, feeds, device)[0], run_ort(model, feeds)[0])


def _tensor(name, value):
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(value), name)
