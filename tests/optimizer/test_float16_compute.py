"""float16 graphs computed in float32 on the cpu (gpuops.optimizer.float16_compute): the results stay
within float16 tolerance of onnxruntime's on the same float16 model, the graph's inputs and outputs
keep their names and types, explicit Casts to float16 keep their rounding, and the rewrite is left
out on cuda, at level "basic", and for graphs it does not handle."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import gpuops
from gpuops.optimizer import float16_compute, optimize
from gpuops.optimizer.graph import Graph
from tests.conformance.harness import assert_close, device_guard
from tests.conformance.test_light_models import _case
from tests.ort_versions import requires_ort

from .helpers import _valid, make_model, ops, run_ort

H, F = TensorProto.FLOAT16, TensorProto.FLOAT
RNG = np.random.default_rng(0)


def _h(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float16)


def _io(model, inits=()):
    """The graph's inputs (bar ``inits``: IR < 4 models list their weights as inputs) and outputs."""
    return [(v.name, v.type.SerializeToString()) for v in [*model.graph.input, *model.graph.output]
            if v.name not in inits]


def _run(model, feeds, device="cpu", level="all"):
    sess = gpuops.InferenceSession(model, device=device, optimize=level)
    with device_guard(device):
        return sess.run(None, dict(feeds)), sess.model


def _check(model, feeds, oracle, *, tol=1e-2):
    """On the cpu at "all" the model is rewritten (no float16 weights left, I/O as declared) and
    gives ``oracle``'s results on ``model`` within ``tol``; onnxruntime runs the rewritten model to
    the same results. Returns the rewritten model."""
    got, opt = _run(model, feeds)
    inputs = {i.name for i in model.graph.input}
    assert not [t.name for t in opt.graph.initializer if t.data_type == H and t.name not in inputs]
    inits = {t.name for t in model.graph.initializer}
    assert _io(opt, inits) == _io(model, inits)
    if _valid(model):
        onnx.checker.check_model(opt)
    want = oracle(model, feeds)
    for out, g, w in zip(model.graph.output, got, want):
        assert g.dtype == np.float16 or out.type.tensor_type.elem_type != H
        assert_close(g.astype(np.float32), np.asarray(w, np.float32), tol, tol, out.name)
    for out, g, w in zip(model.graph.output, run_ort(opt, feeds), want):
        assert_close(np.asarray(g, np.float32), np.asarray(w, np.float32), tol, tol, f"onnxruntime {out.name}")
    return opt


def _ref(model, feeds):
    return ReferenceEvaluator(model).run(None, dict(feeds))


def _out(name, elem=H):
    return helper.make_tensor_value_info(name, elem, None)


def _mlp():
    nodes = [helper.make_node("MatMul", ["X", "W1"], ["h"]), helper.make_node("Add", ["h", "B1"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Gemm", ["r", "W2", "B2"], ["g"]),
             helper.make_node("Softmax", ["g"], ["Y"], axis=-1)]
    inits = [("W1", _h(16, 32, scale=0.25)), ("B1", _h(32)), ("W2", _h(32, 8, scale=0.25)), ("B2", _h(8))]
    return make_model(nodes, {"X": _h(4, 16)}, [_out("Y")], inits=inits), {"X": _h(4, 16)}


def _cnn():
    def bn(x, y, c):
        return (helper.make_node("BatchNormalization", [x, f"{y}_s", f"{y}_b", f"{y}_m", f"{y}_v"], [y]),
                [(f"{y}_s", (1 + _h(c, scale=0.1)).astype(np.float16)), (f"{y}_b", _h(c, scale=0.1)),
                 (f"{y}_m", _h(c, scale=0.1)), (f"{y}_v", (1 + np.abs(_h(c, scale=0.1))).astype(np.float16))])

    bn1, i1 = bn("c1", "n1", 8)
    bn2, i2 = bn("c2", "n2", 8)
    nodes = [helper.make_node("Conv", ["X", "K1", "KB1"], ["c1"], pads=[1, 1, 1, 1]), bn1,
             helper.make_node("Relu", ["n1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "K2"], ["c2"], pads=[1, 1, 1, 1]), bn2,
             helper.make_node("Add", ["n2", "p"], ["res"]), helper.make_node("Relu", ["res"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["gap"]), helper.make_node("Flatten", ["gap"], ["f"]),
             helper.make_node("Gemm", ["f", "W", "B"], ["g"], transB=1),
             helper.make_node("Softmax", ["g"], ["Y"], axis=1)]
    inits = [("K1", _h(8, 3, 3, 3, scale=0.3)), ("KB1", _h(8, scale=0.1)), ("K2", _h(8, 8, 3, 3, scale=0.2)),
             ("W", _h(5, 8, scale=0.5)), ("B", _h(5, scale=0.1)), *i1, *i2]
    x = _h(2, 3, 12, 12)
    return make_model(nodes, {"X": x}, [_out("Y"), _out("r2")], inits=inits), {"X": x}


@pytest.mark.parametrize("build", [_mlp, pytest.param(_cnn, marks=requires_ort(
    "1.24", "its NCHWc Conv fails on the fused residual ('Compute output and sum shape must match')"))])
def test_float16_models_match_onnxruntime(build):
    model, feeds = build()
    opt = _check(model, feeds, run_ort)
    assert [n.op_type for n in opt.graph.node if n.op_type == "Cast"] == ["Cast"] * (1 + len(model.graph.output))
    # the plain float16 computation agrees too
    for g, w in zip(_run(model, feeds, level="none")[0], _run(model, feeds)[0]):
        assert_close(g.astype(np.float32), w.astype(np.float32), 1e-2, 1e-2)


def test_converted_squeezenet():
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model, feeds, *_ = _case("squeezenet")
    m16 = convert_float_to_float16(model, keep_io_types=False)
    feeds = {k: v.astype(np.float16) for k, v in feeds.items()}
    opt = _check(m16, feeds, run_ort)
    assert ops(opt)["FusedConv"] > 0 and ops(opt)["Cast"] == 2  # its weights (IR 3 inputs) folded to float32
    tensors = [a.t for n in opt.graph.node for a in n.attribute if a.type == onnx.AttributeProto.TENSOR]
    assert tensors and not [t for t in tensors if t.data_type == H]


def test_explicit_casts_keep_float16_rounding():
    """float32 graph I/O with a float16 section (keep_io_types style): 1 + 2**-12 rounds to 1 in
    float16, so doubling it gives exactly 2, not 2 + 2**-11, and 70000 is inf, as in onnx's
    reference evaluator and gpuops' plain float16 plan. (onnxruntime 1.32 on CPU drops this
    rounding: it removes the Cast pair float32 -> float16 -> float32 around its float32 Add.)"""
    x = np.array([1 + 2 ** -12, 3.14159, 70000.0, -2.5e-8], np.float32)
    nodes = [helper.make_node("Cast", ["X"], ["h"], to=H), helper.make_node("Add", ["h", "h"], ["d"]),
             helper.make_node("Mul", ["d", "half"], ["m"]), helper.make_node("Cast", ["m"], ["Y"], to=F),
             helper.make_node("Cast", ["d"], ["Z"], to=H), helper.make_node("Clip", ["d", "lo", "hi"], ["cl"]),
             helper.make_node("Cast", ["cl"], ["I"], to=TensorProto.INT32)]
    model = make_model(nodes, {"X": x}, [_out("Y", F), _out("Z"), _out("I", TensorProto.INT32)],
                       inits=[("half", np.array(0.5, np.float16)), ("lo", np.array(-100, np.float16)),
                              ("hi", np.array(100, np.float16))])
    model = onnx.shape_inference.infer_shapes(model)  # value_info of the float16 values, which stay float16
    assert {vi.name for vi in model.graph.value_info if vi.type.tensor_type.elem_type == H} >= {"h", "d"}
    with np.errstate(over="ignore"):  # 70000 is beyond float16
        got, opt = _run(model, {"X": x})
        want = _ref(model, {"X": x})
        plain = _run(model, {"X": x}, level="none")[0]
    for g, w, p in zip(got, want, plain):
        np.testing.assert_array_equal(p, w)
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    assert ops(opt)["Cast"] > ops(model)["Cast"]


def test_input_cast_listed_after_its_reader():
    """onnxconverter-common's keep_io_types models list the graph input's Cast to float16 after the nodes
    that read it (onnxruntime sorts the graph): those nodes read the float32 value made from it too, so
    that onnxruntime still runs the rewritten model (no node of float32 weights reads a float16 value)."""
    x = np.array([[1 + 2 ** -12, 3.14159, -2.5e-8]], np.float32)
    w = _h(3, 4)
    nodes = [helper.make_node("MatMul", ["h", "w"], ["Y"]), helper.make_node("Cast", ["X"], ["h"], to=H)]
    model = make_model(nodes, {"X": x}, [_out("Y")], inits=[("w", w)])
    got = _run(model, {"X": x})[0]
    opt = optimize(model, "all", device="cpu")  # (a session sorts the graph first)
    matmul = next(n for n in opt.graph.node if n.op_type == "MatMul")
    assert matmul.input[0] != "h" and not [t for t in opt.graph.initializer if t.data_type == H]
    want = _ref(make_model(nodes[::-1], {"X": x}, [_out("Y")], inits=[("w", w)]), {"X": x})
    assert_close(got[0].astype(np.float32), want[0].astype(np.float32), 1e-3, 1e-3, "Y")
    assert_close(np.asarray(run_ort(opt, {"X": x})[0], np.float32), want[0].astype(np.float32), 1e-3, 1e-3,
                 "onnxruntime Y")


def test_dtype_attributes_and_cast_like():
    """Constant and ConstantOfShape tensors, EyeLike's dtype, RandomUniformLike's, CastLike to a
    float16 value and from one: all converted consistently (oracle: onnx's reference evaluator)."""
    x = _h(3, 3)
    nodes = [helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(_h(3, 3))),
             helper.make_node("Shape", ["X"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["c"],
                              value=numpy_helper.from_array(np.array([0.75], np.float16))),
             helper.make_node("EyeLike", ["s3"], ["e"], dtype=H),
             helper.make_node("Add", ["X", "k"], ["a"]), helper.make_node("Mul", ["a", "c"], ["m"]),
             helper.make_node("Add", ["m", "e"], ["Y"]),
             helper.make_node("CastLike", ["i", "X"], ["cl"]),
             helper.make_node("CastLike", ["Y", "i"], ["J"]),
             helper.make_node("RandomUniformLike", ["i"], ["u"], dtype=H, low=5.0, high=5.0),
             helper.make_node("Add", ["cl", "u"], ["Z"])]
    model = make_model(nodes, {"X": x}, [_out("Y"), _out("Z"), _out("J", TensorProto.INT64)],
                       inits=[("s3", np.zeros((3, 3), np.int64)), ("i", np.arange(9, dtype=np.int64).reshape(3, 3))])
    opt = _check(model, {"X": x}, _ref)
    assert not [n for n in opt.graph.node if n.op_type == "CastLike"]
    assert all(helper.get_attribute_value(a) != H for n in opt.graph.node for a in n.attribute if a.name == "dtype")


def test_float16_graph_output_read_inside():
    """A float16 graph output that other nodes read, and one that an explicit Cast makes."""
    x = _h(2, 5)
    nodes = [helper.make_node("Sigmoid", ["X"], ["A"]), helper.make_node("Cast", ["A"], ["B"], to=H),
             helper.make_node("Mul", ["A", "B"], ["C"])]
    model = onnx.shape_inference.infer_shapes(make_model(nodes, {"X": x}, [_out("A"), _out("B"), _out("C")]))
    _check(model, {"X": x}, run_ort, tol=2e-3)


@pytest.mark.parametrize("device,level", [("cuda", "all"), ("cpu", "basic")])
def test_not_rewritten_on_cuda_or_basic(device, level):
    model, feeds = _mlp()
    got, opt = _run(model, feeds, device, level)
    assert not ops(opt)["Cast"]
    assert all(t.data_type == H for t in opt.graph.initializer)
    for g, w in zip(got, run_ort(model, feeds)):
        assert g.dtype == np.float16
        assert_close(g.astype(np.float32), w.astype(np.float32), 1e-2, 1e-2)
    assert ops(optimize(model, "all"))["Cast"] == 0  # device None: device-independent passes only


def _if_model():
    branch = helper.make_graph([helper.make_node("Neg", ["a"], ["o"])], "b", [], [_out("o")])
    nodes = [helper.make_node("Relu", ["X"], ["a"]),
             helper.make_node("If", ["cond"], ["Y"], then_branch=branch, else_branch=branch)]
    return make_model(nodes, {"X": _h(3)}, [_out("Y")], inits=[("cond", np.array(True))])


def _contrib_model():
    nodes = [helper.make_node("Gelu", ["X"], ["Y"], domain="com.microsoft")]
    return make_model(nodes, {"X": _h(3)}, [_out("Y")], opsets={"com.microsoft": 1})


def _bitcast_model():
    nodes = [helper.make_node("Relu", ["X"], ["a"]), helper.make_node("BitCast", ["a"], ["Y"], to=TensorProto.INT16)]
    return make_model(nodes, {"X": _h(3)}, [_out("Y", TensorProto.INT16)], opset=24)


@pytest.mark.parametrize("build", [_if_model, _contrib_model, _bitcast_model])
def test_unsupported_graph_left_unchanged(build):
    model = build()
    graph = Graph(onnx.ModelProto.FromString(model.SerializeToString()))
    assert float16_compute.apply(graph) is False
    assert graph.to_model().SerializeToString() == model.SerializeToString()
    assert all(t.data_type == H for t in optimize(model, "all", device="cpu").graph.initializer if t.name != "cond")


def test_graph_without_float16_untouched():
    x = np.ones((2, 2), np.float32)
    model = make_model([helper.make_node("Cast", ["X"], ["Y"], to=TensorProto.DOUBLE)], {"X": x})
    assert float16_compute.apply(Graph(model)) is False


@requires_ort("1.24", "session creation segfaults on a float16 MatMul whose initializer is also a graph input")
def test_overridable_initializer_stays_float16():
    """An initializer that is also a graph input keeps its float16 type and may still be fed."""
    w = _h(4, 4)
    model = make_model([helper.make_node("MatMul", ["X", "W"], ["m"]), helper.make_node("Relu", ["m"], ["Y"])],
                       [_out("X"), helper.make_tensor_value_info("W", H, [4, 4])], [_out("Y")], inits=[("W", w)])
    x = _h(2, 4)
    opt = _check(model, {"X": x}, run_ort)
    assert [t.data_type for t in opt.graph.initializer if t.name == "W"] == [H]
    _check(model, {"X": x, "W": _h(4, 4)}, run_ort)
