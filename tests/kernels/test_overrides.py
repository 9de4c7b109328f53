"""The kernel-backed overrides are what a CUDA session runs: they resolve on device "cuda" wherever
the generic op exists, accept exactly the generic op's attributes, and run inside a session."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops
from gpuops import device as _device
from gpuops import registry

OVERRIDES = [("Conv", v) for v in (1, 11, 22)] + [("ConvTranspose", v) for v in (1, 11, 22)] + \
    [("QuantizeLinear", v) for v in (10, 13, 19, 21, 23, 24, 25, 28)] + \
    [("DequantizeLinear", v) for v in (10, 13, 19, 21, 23, 24, 25, 28)] + \
    [("DynamicQuantizeLinear", 11), ("RoiAlign", 10), ("RoiAlign", 16), ("RoiAlign", 22),
     ("NonMaxSuppression", 10), ("NonMaxSuppression", 11), ("MatMulInteger", 10), ("QLinearMatMul", 10),
     ("QLinearMatMul", 21), ("ConvInteger", 10), ("QLinearConv", 10)]


@pytest.mark.parametrize("op_type,opset", OVERRIDES, ids=[f"{o}-{v}" for o, v in OVERRIDES])
def test_override_resolves_on_cuda_with_the_generic_signature(op_type, opset):
    if not registry.versions("", op_type):
        pytest.skip(f"no generic {op_type} registered yet: the override activates once it exists")
    impl = registry.resolve("", op_type, opset, device="cuda")
    generic = registry.resolve("", op_type, opset, device="cpu")
    assert impl.device == "cuda", f"{op_type} at opset {opset} resolves to the generic op on CUDA"
    assert impl.attributes == generic.attributes


def _quantize_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4, 5])
    q = helper.make_tensor_value_info("q", TensorProto.INT8, [3, 4, 5])
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [4], [0.1, 0.2, 0.05, 0.3])
    zp = helper.make_tensor("zp", TensorProto.INT8, [4], [0, -3, 5, 1])
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "qdq", [x], [q, y], initializer=[scale, zp])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_quantize_dequantize_session_on_cuda_matches_cpu():
    x = (np.random.default_rng(0).standard_normal((3, 4, 5)) * 10).astype(np.float32)
    cpu = gpuops.InferenceSession(_quantize_model(), device="cpu").run(None, {"x": x})
    sess = gpuops.InferenceSession(_quantize_model(), device="cuda")
    if _device.uses_standin():  # kernels run on the emulator, and never pull data to the host implicitly
        from gpuops.testing import cuda_standin

        with cuda_standin.strict():
            cuda = sess.run(None, {"x": x})
    else:
        cuda = sess.run(None, {"x": x})
    for a, b in zip(cuda, cpu):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
