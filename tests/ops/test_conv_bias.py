"""A conv's bias must have one value per output channel: onnxruntime (from 1.24) refuses any other length
("bias should be 1D of size output_channels"), and gpuops does too, naming the node, on every path
(the generic op, the CPU override with its native epilogue and kept weights, the CUDA kernels):
a short bias used to be read past its end by the native epilogue."""

import numpy as np
import onnxruntime as ort
import pytest

import gpuops

from tests.ort_versions import ort_older_than

from .common import DEVICES, one_node_model

RNG = np.random.default_rng(7)


def _case(op_type, bias_len, dtype=np.float32):
    X = RNG.standard_normal((1, 4, 6, 6)).astype(dtype)
    W = RNG.standard_normal((3, 4, 3, 3) if op_type == "Conv" else (4, 3, 3, 3)).astype(dtype)
    B = RNG.standard_normal(bias_len).astype(dtype)
    return {"X": X, "W": W, "B": B}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_type", ["Conv", "ConvTranspose"])
@pytest.mark.parametrize("bias_len", [1, 2, 4])
@pytest.mark.parametrize("constant", [False, True], ids=["fed", "initializer"])
def test_a_bias_of_another_length_is_refused_naming_the_node(device, op_type, bias_len, constant):
    feeds = _case(op_type, bias_len)
    model = one_node_model(op_type, feeds, ["y"], name="the_conv")
    if constant:  # W and B constant: the CPU override keeps them per session
        from onnx import numpy_helper

        for name in ("W", "B"):
            model.graph.initializer.append(numpy_helper.from_array(feeds[name], name))
        model.graph.input.pop(2)
        model.graph.input.pop(1)
        feeds = {"X": feeds["X"]}
    if not ort_older_than("1.24"):  # the oracle refuses it too (1.23 runs it, unchecked)
        with pytest.raises(Exception):
            ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    with pytest.raises(gpuops.GpuopsError, match="the_conv.*one value per output channel"):
        gpuops.InferenceSession(model, device=device).run(None, feeds)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_type", ["Conv", "ConvTranspose"])
def test_the_right_bias_length_still_runs(device, op_type):
    feeds = _case(op_type, 3)
    model = one_node_model(op_type, feeds, ["y"])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = gpuops.InferenceSession(model, device=device).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_type,kernel,dilation,ort_refuses", [
    ("MaxPool", 6, 1, False),  # an empty output: both runtimes answer it
    ("MaxPool", 7, 1, True), ("MaxPool", 2 ** 31 - 1, 1, True), ("MaxPool", 2, 2 ** 31 - 1, True),
    ("AveragePool", 7, 1, True), ("Conv", 6, 1, True), ("Conv", 7, 1, True)])
def test_windows_larger_than_the_input_as_onnxruntime(device, op_type, kernel, dilation, ort_refuses):
    """A pool whose output dimension would be negative, and a conv whose output would be empty, are
    refused (onnxruntime: "Calculated output dimension is negative", "Invalid input shape")."""
    feeds = {"X": RNG.standard_normal((1, 1, 5, 5)).astype(np.float32)}
    if op_type == "Conv":
        feeds["W"] = RNG.standard_normal((1, 1, kernel, kernel)).astype(np.float32)
    model = one_node_model(op_type, feeds, ["y"], name="the_window", kernel_shape=[kernel, kernel],
                           dilations=[dilation, 1])
    try:
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    except Exception:
        want = None
    assert (want is None) == ort_refuses
    if ort_refuses:
        with pytest.raises(gpuops.GpuopsError, match="the_window"):
            gpuops.InferenceSession(model, device=device).run(None, feeds)
    else:
        assert gpuops.InferenceSession(model, device=device).run(None, feeds)[0].shape == want.shape
