"""com.microsoft.nchwc ops against onnxruntime's CPU kernels, with gpuops set to onnxruntime's block size
(read off ReorderInput's padded output: GPUOPS_NCHWC_BLOCK_SIZE, which a session reads when it is
created), and a CNN that onnxruntime's own optimizer rewrote into the NCHWc family run by gpuops."""

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpuops
from gpuops.ops.contrib import nchwc

from .helpers import check, make_model, ms_node, rand, run_gpuops, run_ort

NCHWC = "com.microsoft.nchwc"


def _onnxruntime_block_size() -> int:
    x = np.zeros((1, 4, 1, 1), np.float32)
    return run_ort(make_model(ms_node("ReorderInput", ["x"], ["y"], domain=NCHWC), {"x": x}), {"x": x})[0].shape[1]


BLOCK = _onnxruntime_block_size()


@pytest.fixture(autouse=True)
def onnxruntime_block_size(monkeypatch):
    monkeypatch.setenv(nchwc.BLOCK_SIZE_ENV, str(BLOCK))


def node(op_type, inputs, outputs=("y",), **attrs):
    return ms_node(op_type, inputs, outputs, domain=NCHWC, **attrs)


def test_block_size_setting(monkeypatch):
    monkeypatch.delenv(nchwc.BLOCK_SIZE_ENV, raising=False)
    assert nchwc.block_size() == 8
    monkeypatch.setenv(nchwc.BLOCK_SIZE_ENV, "16")
    assert nchwc.block_size() == 16
    for bad in ("4", "x"):
        monkeypatch.setenv(nchwc.BLOCK_SIZE_ENV, bad)
        with pytest.raises(gpuops.NodeError, match="must be 8 or 16"):
            nchwc.block_size()


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_session_keeps_the_block_size_it_was_created_with(monkeypatch, device):
    """The block size is a session's: read from the environment when it is created (each op's prepare
    hook), unchanged by a later change of the environment; a call outside a session passes its own."""
    x = rand(1, 20, 3, 4)
    model = make_model(node("ReorderInput", ["x"]), {"x": x})
    sessions = {}
    for size in (8, 16):
        monkeypatch.setenv(nchwc.BLOCK_SIZE_ENV, str(size))
        sessions[size] = gpuops.InferenceSession(model, device=device)
    monkeypatch.setenv(nchwc.BLOCK_SIZE_ENV, "4")  # a bad value: read by no session now
    for size, sess in sessions.items():
        (y,) = sess.run(None, {"x": x})
        assert y.shape == (1, -(-20 // size) * size, 3, 4)
        assert sess.plan.steps[0].prepared in (size, getattr(sess.plan.steps[0].prepared, "block", None))
    import array_api_compat.numpy as xp

    y16 = nchwc.ReorderInput(xp, x, prepared=16)
    np.testing.assert_array_equal(y16, sessions[16].run(None, {"x": x})[0])
    with pytest.raises(gpuops.NodeError, match="must be 8 or 16"):
        nchwc.ReorderInput(xp, x)  # the environment's, read now
    with pytest.raises(gpuops.NodeError, match="GPUOPS_NCHWC_BLOCK_SIZE"):
        gpuops.InferenceSession(model, device=device)


@pytest.mark.parametrize("channels", [4, 8, 20])
@pytest.mark.parametrize("channels_last", [0, 1])
def test_reorder_input(channels, channels_last):
    x = rand(2, 3, 5, channels) if channels_last else rand(2, channels, 3, 5)
    check(node("ReorderInput", ["x"], channels_last=channels_last), {"x": x})


@pytest.mark.parametrize("channels_last", [0, 1])
def test_reorder_output(channels_last):
    check(node("ReorderOutput", ["x"], channels=2 * BLOCK - 3, channels_last=channels_last),
          {"x": rand(2, 2 * BLOCK, 3, 4)})


@pytest.mark.parametrize("case", ["nchwc", "nchw_input", "depthwise", "grouped_pointwise", "sum"])
def test_conv(case):
    b = BLOCK
    attrs = {}
    if case == "nchwc":
        feeds = {"x": rand(1, 2 * b, 5, 5), "w": rand(2 * b, 2 * b, 3, 3, scale=0.2), "b": rand(2 * b)}
        attrs = {"pads": [1, 1, 1, 1], "activation": "Relu"}
    elif case == "nchw_input":
        feeds = {"x": rand(1, 3, 7, 6), "w": rand(b, 3, 3, 3, scale=0.3), "b": rand(b)}
        attrs = {"strides": [2, 2], "pads": [1, 0, 1, 0], "activation": "LeakyRelu", "activation_params": [0.2]}
    elif case == "depthwise":
        feeds = {"x": rand(1, 2 * b, 5, 6), "w": rand(2 * b, 1, 3, 3), "b": rand(2 * b)}
        attrs = {"group": 2 * b, "pads": [1, 1, 1, 1], "dilations": [1, 2], "activation": "Clip",
                 "activation_params": [-0.5, 0.5]}
    elif case == "grouped_pointwise":
        feeds = {"x": rand(1, 4 * b, 3, 4), "w": rand(2 * b, 2 * b, 1, 1, scale=0.2)}
        attrs = {"group": 2}
    else:  # Conv + Add fusion: Sum is added before the activation
        feeds = {"x": rand(1, b, 4, 4), "w": rand(b, b, 3, 3, scale=0.2), "b": rand(b), "sum": rand(1, b, 2, 2)}
        attrs = {"activation": "Sigmoid"}
    check(node("Conv", list(feeds), **attrs), feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op_type,attrs", [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2], "ceil_mode": 1, "strides": [2, 2]}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [3, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1, "strides": [2, 1]}),
    ("AveragePool", {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"}),
])
def test_pool(op_type, attrs):
    check(node(op_type, ["x"], **attrs), {"x": rand(2, 2 * BLOCK, 7, 6)}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op_type", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(op_type):
    check(node(op_type, ["x"]), {"x": rand(2, BLOCK, 5, 3)}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode,ctm", [("nearest", "asymmetric"), ("linear", "asymmetric"), ("linear", "half_pixel"),
                                      ("linear", "align_corners")])
def test_upsample(mode, ctm):
    check(node("Upsample", ["x"], scales=[1, 1, 2, 3], mode=mode, coordinate_transformation_mode=ctm),
          {"x": rand(1, BLOCK, 3, 4)}, rtol=1e-5, atol=1e-6)


def _cnn() -> onnx.ModelProto:
    """conv (3 -> 16) - relu - maxpool - depthwise conv - conv + residual add - global pool."""
    rng = np.random.default_rng(5)

    def init(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=16),
        helper.make_node("Conv", ["c2", "w3", "b3"], ["c3"]),
        helper.make_node("Add", ["c3", "p1"], ["a3"]),
        helper.make_node("Relu", ["a3"], ["r3"]),
        helper.make_node("GlobalAveragePool", ["r3"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 1, 1])],
                              initializer=[init("w1", 16, 3, 3, 3), init("b1", 16), init("w2", 16, 1, 3, 3),
                                           init("b2", 16), init("w3", 16, 16, 1, 1), init("b3", 16)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def test_model_rewritten_by_onnxruntime_into_nchwc(tmp_path):
    model = _cnn()
    path = os.fspath(tmp_path / "nchwc.onnx")
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.optimized_model_filepath = path
    x = rand(1, 3, 16, 16)
    want = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    optimized = onnx.load(path)
    used = {(n.domain, n.op_type) for n in optimized.graph.node}
    assert {(NCHWC, "Conv"), (NCHWC, "MaxPool"), (NCHWC, "ReorderOutput")} <= used, used
    for device in ("cpu", "cuda"):
        got = run_gpuops(optimized, {"x": x}, device)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
    # and the same model unoptimized on gpuops agrees
    np.testing.assert_allclose(gpuops.InferenceSession(model, device="cpu").run(None, {"x": x})[0], want[0],
                               rtol=1e-4, atol=1e-5)
