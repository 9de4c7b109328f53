"""MatMulInteger + Cast + Mul(a_scale * b_scale) [+ Add(bias)] -> com.microsoft MatMulIntegerToFloat,
and with a DynamicQuantizeLinear that only it reads -> DynamicQuantizeMatMul: the same float32
roundings, so the optimized session's outputs equal the unoptimized one's exactly."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops
from gpuops.bench.exact_int8 import for_onnxruntime
from gpuops.optimizer import optimize

from .helpers import make_model, ops

F = TensorProto.FLOAT


def _model(rng, per_column=False, bias=True, scale_first=False, bias_first=True, extra_reader=False):
    K, N = 32, 16
    inits = [("w", rng.integers(-128, 128, size=(K, N)).astype(np.int8)), ("wz", np.array(0, np.int8)),
             ("ws", rng.uniform(0.001, 0.01, size=(N,) if per_column else ()).astype(np.float32)),
             ("bias", rng.standard_normal(N).astype(np.float32))]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("Mul", ["xs", "ws"], ["s"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=F),
             helper.make_node("Mul", ["s", "accf"] if scale_first else ["accf", "s"], ["y0"])]
    out = "y0"
    if bias:
        nodes.append(helper.make_node("Add", ["bias", "y0"] if bias_first else ["y0", "bias"], ["y"]))
        out = "y"
    outputs = [helper.make_tensor_value_info(out, F, None)]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("accf", F, None))
    feeds = {"x": rng.standard_normal((2, 3, K)).astype(np.float32)}
    return make_model(nodes, feeds, outputs, inits=inits, opset=13), feeds


@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("bias,bias_first", [(True, True), (True, False), (False, False)])
@pytest.mark.parametrize("scale_first", [False, True])
def test_fused_and_exact(per_column, bias, bias_first, scale_first):
    rng = np.random.default_rng(0)
    model, feeds = _model(rng, per_column, bias, scale_first, bias_first)
    opt = optimize(model, "all", device="cpu")
    have = ops(opt)
    assert have["DynamicQuantizeMatMul"] == 1 and not have["MatMulInteger"] and not have["Cast"]
    assert not have["Add"] and not have["Mul"] and not have["DynamicQuantizeLinear"]
    got = gpuops.InferenceSession(model, device="cpu").run(None, feeds)
    want = gpuops.InferenceSession(model, device="cpu", optimize="basic").run(None, feeds)
    np.testing.assert_array_equal(got[0], want[0])
    import onnxruntime as ort

    oracle = ort.InferenceSession(for_onnxruntime(opt).SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(got[0], oracle[0], rtol=1e-6, atol=1e-6)


def test_cast_read_elsewhere_stays():
    model, feeds = _model(np.random.default_rng(1), extra_reader=True)
    assert ops(optimize(model, "all", device="cpu"))["MatMulInteger"] == 1


def test_shared_dynamic_quantize_stays():
    """Two products of one DynamicQuantizeLinear: two MatMulIntegerToFloat, the quantization once."""
    rng = np.random.default_rng(2)
    model, feeds = _model(rng, bias=False)
    graph = model.graph
    w2 = rng.integers(-128, 128, size=(32, 8)).astype(np.int8)
    from onnx import numpy_helper

    graph.initializer.append(numpy_helper.from_array(w2, "w2"))
    graph.node.extend([helper.make_node("MatMulInteger", ["xq", "w2", "xz", "wz"], ["acc2"]),
                       helper.make_node("Cast", ["acc2"], ["accf2"], to=F),
                       helper.make_node("Mul", ["xs", "ws2"], ["s2"]),
                       helper.make_node("Mul", ["accf2", "s2"], ["y2"])])
    graph.initializer.append(numpy_helper.from_array(np.array(0.004, np.float32), "ws2"))
    graph.output.append(helper.make_tensor_value_info("y2", F, None))
    have = ops(optimize(model, "all", device="cpu"))
    assert have["MatMulIntegerToFloat"] == 2 and have["DynamicQuantizeLinear"] == 1
    got = gpuops.InferenceSession(model, device="cpu").run(None, feeds)
    want = gpuops.InferenceSession(model, device="cpu", optimize="basic").run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
