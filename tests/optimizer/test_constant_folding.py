"""Constant folding and Shape -> constant."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpuops.optimizer import optimize

from .helpers import check, make_model, ops, run

F = TensorProto.FLOAT


def out(name="Y", elem=F):
    return helper.make_tensor_value_info(name, elem, None)


def _weights_from_constant_of_shape(ir_version=10, as_input=False):
    """Y = X + ConstantOfShape(shape) (the light models store their weights so)."""
    shape = np.array([2, 3], np.int64)
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["w"],
                              value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("Add", ["X", "w"], ["Y"])]
    X = np.arange(6, dtype=np.float32).reshape(2, 3)
    inputs = {"X": X}
    m = make_model(nodes, inputs, [out()], inits=[("s", shape)])
    if as_input:
        m.graph.input.append(helper.make_tensor_value_info("s", TensorProto.INT64, [2]))
    m.ir_version = ir_version
    return m, inputs


def test_constant_of_shape_folded():
    m, feeds = _weights_from_constant_of_shape()
    opt = check(m, feeds, gone=["ConstantOfShape"], level="basic")
    assert [t.name for t in opt.graph.initializer] == ["w"]


def test_overridable_initializer_is_not_folded():
    m, feeds = _weights_from_constant_of_shape(as_input=True)
    opt = check(m, feeds, kept=["ConstantOfShape"])
    fed = run(m, {**feeds, "s": np.array([1, 3], np.int64)})[0]
    np.testing.assert_array_equal(fed, feeds["X"] + np.float32(0.5))
    assert "s" in [i.name for i in opt.graph.input]


def test_ir3_initializers_are_constants():
    """Below IR 4 every initializer is listed as an input, and (as in onnxruntime) is constant."""
    m, feeds = _weights_from_constant_of_shape(ir_version=3, as_input=True)
    opt = check(m, feeds, gone=["ConstantOfShape"], present=["Constant"])
    assert not opt.graph.initializer and "s" not in [i.name for i in opt.graph.input]


def test_shape_chain_folded():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters emit for a flatten."""
    X = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    nodes = [helper.make_node("Shape", ["X"], ["sh"]),
             helper.make_node("Gather", ["sh", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
             helper.make_node("Cast", ["target"], ["target64"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["X", "target64"], ["Y"])]
    m = make_model(nodes, {"X": X}, [out()], inits=[("zero", np.array(0, np.int64)), ("axes", np.array([0])),
                                                    ("minus1", np.array([-1]))])
    opt = check(m, {"X": X}, gone=["Shape", "Gather", "Unsqueeze", "Concat", "Cast"], kept=["Reshape"],
                level="basic")
    assert len(opt.graph.node) == 1


def test_symbolic_shape_not_folded():
    X = np.ones((2, 3), np.float32)
    nodes = [helper.make_node("Shape", ["X"], ["sh"]), helper.make_node("Reshape", ["X", "sh"], ["Y"])]
    m = make_model(nodes, [helper.make_tensor_value_info("X", F, ["n", 3])], [out()])
    check(m, {"X": X}, kept=["Shape"])


def test_dequantize_of_constant_weight_folded():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((2, 4)).astype(np.float32)
    q = rng.integers(-100, 100, (4, 3)).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["w"]),
             helper.make_node("MatMul", ["X", "w"], ["Y"])]
    m = make_model(nodes, {"X": X}, [out()],
                   inits=[("q", q), ("scale", np.float32(0.05)), ("zp", np.int8(3))])
    check(m, {"X": X}, gone=["DequantizeLinear"])


def test_random_ops_not_folded():
    nodes = [helper.make_node("RandomUniform", [], ["r"], shape=[3], seed=1.0),
             helper.make_node("Add", ["r", "X"], ["Y"])]
    m = make_model(nodes, {"X": np.zeros(3, np.float32)}, [out()])
    opt = optimize(m)
    assert ops(opt)["RandomUniform"] == 1


def test_size_cap():
    m, feeds = _weights_from_constant_of_shape()
    assert ops(optimize(m, fold_limit=8))["ConstantOfShape"] == 1  # 24 bytes > 8
    assert ops(optimize(m, fold_limit=24))["ConstantOfShape"] == 0


def test_graph_output_keeps_its_producer():
    nodes = [helper.make_node("Constant", [], ["c"], value_floats=[1.0, 2.0]),
             helper.make_node("Neg", ["c"], ["Y"]), helper.make_node("Identity", ["X"], ["Z"])]
    m = make_model(nodes, {"X": np.zeros(2, np.float32)}, [out(), out("Z")])
    opt = check(m, {"X": np.zeros(2, np.float32)})
    assert ops(opt)["Neg"] == 1 and "Y" in [n.output[0] for n in opt.graph.node]


def test_failing_node_left_for_run_time():
    """A constant node that cannot run is not folded: the session reports it at run time as usual."""
    nodes = [helper.make_node("Reshape", ["c", "bad"], ["r"]), helper.make_node("Add", ["r", "X"], ["Y"])]
    m = make_model(nodes, {"X": np.zeros(2, np.float32)}, [out()],
                   inits=[("c", np.ones(3, np.float32)), ("bad", np.array([2], np.int64))])
    assert ops(optimize(m))["Reshape"] == 1


def test_unknown_level():
    import gpuops

    m, _ = _weights_from_constant_of_shape()
    with pytest.raises(gpuops.GpuopsError, match="optimize must be one of"):
        gpuops.InferenceSession(m, device="cpu", optimize="extended")
