"""Regression tests for the defects found by fuzzing that the ONNX loader, planner and CLI own: each
one once crashed, hung or gave a wrong answer; now it gives the oracle's answer or a GpuopsError."""

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpuops
from gpuops.onnx import model as model_mod
from gpuops.onnx import plan as plan_mod
from tests.fuzz.models import functions_model, initializer_model, overridable_model, relu_model, sparse_tensor
from tests.ops.common import DEVICES, assert_same, run_gpuops, run_ort

X = np.array([-1.5, 2.0, 3.0], np.float32)


# -- item 1: nested model-local functions ---------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_deeply_nested_functions_match_onnxruntime_with_linear_names(device):
    model = functions_model(24)
    sess = gpuops.InferenceSession(model, device=device)
    assert max(len(s.name) + sum(map(len, s.outputs)) for s in sess.plan.steps) < 24 * 12
    assert_same(sess.run(None, {"x": X}), run_ort(model, {"x": X}))


def test_functions_nested_to_the_bound_run_and_deeper_is_refused():
    depth = plan_mod.MAX_FUNCTION_DEPTH
    assert_same(run_gpuops(functions_model(depth), {"x": X}), run_ort(functions_model(depth), {"x": X}))
    with pytest.raises(gpuops.ModelError, match=r"nest more than 100 deep, from 'F100' down to 'F0'"):
        gpuops.InferenceSession(functions_model(depth + 1), device="cpu")


@pytest.mark.parametrize("callee, cycle", [(lambda k: k, "F3 -> F3"), (lambda k: 3 if k == 1 else k - 1,
                                                                      "F3 -> F2 -> F1 -> F3")])
@pytest.mark.parametrize("subgraph", [False, True])
def test_recursive_functions_are_refused(callee, cycle, subgraph):
    with pytest.raises(gpuops.ModelError, match=f"calls itself \\({cycle}\\)"):
        gpuops.InferenceSession(functions_model(4, callee=callee, subgraph=subgraph), device="cpu")


def test_functions_that_multiply_past_the_node_bound_are_refused():
    with pytest.raises(gpuops.ModelError, match="expand to more than 1,000,000 nodes"):
        gpuops.InferenceSession(functions_model(24, calls=2), device="cpu")
    model = functions_model(5, calls=2)  # 16 Relus: repeated calls get names of their own
    assert_same(run_gpuops(model, {"x": X}), run_ort(model, {"x": X}))


def test_functions_inside_subgraphs_inline():
    model = functions_model(6, subgraph=True)
    assert_same(run_gpuops(model, {"x": X}), run_ort(model, {"x": X}))


# -- item 3: overridable initializers read at plan time ---------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_fed_overridable_initializers_win_over_plan_time_constants(device):
    model = overridable_model()
    assert plan_mod.overridable(model.graph) == {"shape", "start", "limit", "eshape"}
    sess = gpuops.InferenceSession(model, device=device)
    assert {a.name for a in sess.get_overridable_initializers()} == {"shape", "start", "limit", "eshape"}
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for extra in ({}, {"shape": np.array([3, 2], np.int64), "limit": np.array(7, np.int64),
                       "eshape": np.array([3, 1], np.int64)}, {}):
        feeds = {"x": x, **extra}
        got, want = sess.run(None, feeds), run_ort(model, feeds)
        assert_same(got, want)
    assert got[0].shape == (2, 3)  # and the initializers again once no feed overrides them


def test_before_ir_4_initializers_listed_as_inputs_are_constants_as_in_onnxruntime():
    model = overridable_model()
    model.ir_version = 3
    assert plan_mod.overridable(model.graph, model.ir_version) == set()
    sess = gpuops.InferenceSession(model, device="cpu")
    assert sess.get_overridable_initializers() == [] and [a.name for a in sess.get_inputs()] == ["x"]
    x = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    assert_same(sess.run(None, x), run_ort(model, x))
    with pytest.raises(gpuops.FeedError, match="unknown input name"):
        sess.run(None, {**x, "shape": np.array([3, 2], np.int64)})
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument):
        run_ort(model, {**x, "shape": np.array([3, 2], np.int64)})


# -- found by the fuzzer ------------------------------------------------------------------------------

def test_constant_with_a_bad_attribute_value_is_a_model_error():
    node = helper.make_node("Constant", [], ["c"], name="k")
    node.attribute.append(helper.make_attribute("value_float", ""))  # a string where a float belongs
    model = helper.make_model(helper.make_graph([node], "g", [], [helper.make_tensor_value_info("c", 1, None)]),
                              opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(gpuops.ModelError, match="node 'k' \\(Constant\\): attribute 'value_float' is STRING"):
        gpuops.InferenceSession(model, device="cpu")


def test_split_with_num_outputs_unlike_its_outputs_is_refused_before_shape_inference():
    # onnx's shape inference (and onnxruntime) abort the process on this model: never reach it
    node = helper.make_node("Split", ["x"], ["y0", "y1"], name="split", axis=0, num_outputs=1)
    model = helper.make_model(helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [4])],
                                                [helper.make_tensor_value_info("y0", 1, None),
                                                 helper.make_tensor_value_info("y1", 1, None)]),
                              opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(gpuops.ModelError, match="node 'split' \\(Split\\): num_outputs=1 but the node has 2"):
        gpuops.InferenceSession(model, device="cpu")


def test_attribute_references_outside_functions_are_refused_at_load():
    model = relu_model()
    model.graph.node[0].attribute.append(helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT))
    with pytest.raises(gpuops.ModelError, match="node 'relu' \\(Relu\\): attribute 'alpha' refers to 'alpha' outside"):
        gpuops.InferenceSession(model, device="cpu")


def test_a_value_defined_twice_is_a_model_error_as_in_onnxruntime():
    model = relu_model()
    model.graph.node.append(helper.make_node("Neg", ["y"], ["x"], name="again"))
    with pytest.raises(gpuops.ModelError, match="node 'again' \\(Neg\\): output 'x' is already defined"):
        gpuops.InferenceSession(model, device="cpu")
    with pytest.raises(Exception, match="Duplicate definition|already"):
        run_ort(model, {"x": np.ones(2, np.float32)})


# -- item 10: sparse initializers -------------------------------------------------------------------

def test_valid_sparse_initializers_match_onnxruntime():
    x = np.ones((2, 3), np.float32)
    for sp in (sparse_tensor([1, 2], [0, 5], [2, 3]), sparse_tensor([1, 2], [[0, 1], [1, 2]], [2, 3])):
        model = initializer_model(sparse=sp)
        assert_same(run_gpuops(model, {"x": x}), run_ort(model, {"x": x}))


@pytest.mark.parametrize("sp, match", [
    (sparse_tensor([1], [0], [2, -3]), "negative dimension"),
    (sparse_tensor([1, 2], [0], [2, 3]), r"indices of shape \[1\]"),
    (sparse_tensor([1, 2], [[0, 1, 2], [1, 1, 1]], [2, 3]), r"indices of shape \[2, 3\]"),
    (sparse_tensor([[1, 2]], [0], [2, 3]), "values must be 1-D"),
    (sparse_tensor([1], [6], [2, 3]), "out of range"),
    (sparse_tensor([1], [-1], [2, 3]), "out of range"),
    (sparse_tensor([1], [[0, 3]], [2, 3]), "out of range"),
    (sparse_tensor([1], [0], [1 << 20, 1 << 20]), "larger than"),
])
def test_bad_sparse_initializers_are_model_errors(sp, match):
    with pytest.raises(gpuops.ModelError, match=match):
        gpuops.InferenceSession(initializer_model(sparse=sp), device="cpu")


# -- item 11: external data -------------------------------------------------------------------------

W = np.arange(6, dtype=np.float32).reshape(2, 3)


def _external(tmp_path, **meta):
    """A model at tmp_path/m.onnx whose initializer w lives in tmp_path/w.bin with ``meta``."""
    (tmp_path / "w.bin").write_bytes(b"\0" * 8 + W.tobytes())
    t = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3], data_location=TensorProto.EXTERNAL)
    for k, v in {"location": "w.bin", "offset": "8", "length": str(W.nbytes), **meta}.items():
        if v is not None:
            t.external_data.add(key=k, value=v)
    path = tmp_path / "m.onnx"
    onnx.save(initializer_model(weight=t), path)
    return path


def test_external_data_loads(tmp_path):
    (got,) = gpuops.InferenceSession(_external(tmp_path), device="cpu").run(None, {"x": np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(got, W + 1)


@pytest.mark.parametrize("meta, match", [
    ({"offset": "abc"}, "offset must be a non-negative integer"),
    ({"offset": "-8"}, "offset must be a non-negative integer"),
    ({"length": "1e3"}, "length must be a non-negative integer"),
    ({"location": "w.bin\0.txt"}, "not a valid file name"),
    ({"location": ""}, "not a valid file name"),
    ({"location": None}, "not a valid file name"),
    ({"length": str(10 ** 12)}, "runs past the end of the file"),
    ({"offset": str(2 ** 62)}, "runs past the end of the file"),
    ({"offset": "9" * 40}, "offset must be a non-negative integer"),
    ({"location": "x" * 5000}, "not a valid file name"),
    ({"location": "y" * 300}, "cannot be opened"),
    ({"location": "../w.bin"}, "outside the model's folder"),
    ({"location": "loop"}, "cannot be opened"),
    ({"length": "4"}, "cannot be read"),  # too few bytes for a [2, 3] float tensor
])
def test_bad_external_data_metadata_is_a_model_error(tmp_path, meta, match):
    os.symlink("loop", tmp_path / "loop")
    with pytest.raises(gpuops.ModelError, match=match):
        gpuops.InferenceSession(_external(tmp_path, **meta), device="cpu")


def test_total_external_data_is_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(model_mod, "MAX_EXTERNAL_DATA_BYTES", W.nbytes - 1)
    with pytest.raises(gpuops.ModelError, match="MAX_EXTERNAL_DATA_BYTES"):
        gpuops.InferenceSession(_external(tmp_path), device="cpu")


# -- item 15: unknown element types, corrupted files --------------------------------------------------

def test_unknown_graph_input_element_type_is_a_model_error():
    with pytest.raises(gpuops.ModelError, match="graph input 'x' has unknown element type 999"):
        gpuops.InferenceSession(relu_model(999), device="cpu")


@pytest.mark.parametrize("dims, match", [([1 << 40], "declare 1,099,511,627,776 elements"),
                                         ([2, -3], "negative dimension")])
def test_initializer_dims_must_fit_its_data(dims, match):
    t = numpy_helper.from_array(W, "w")
    t.dims[:] = dims
    with pytest.raises(gpuops.ModelError, match=match):  # before the optimizer sees it
        gpuops.InferenceSession(initializer_model(weight=t), device="cpu")


def test_corrupted_model_file_is_a_model_error(tmp_path):
    model = functions_model(3)
    data = model.SerializeToString().replace(b"top", b"\xff\xfe\xfd")  # a name no longer UTF-8
    path = tmp_path / "bad.onnx"
    path.write_bytes(data)
    with pytest.raises(gpuops.ModelError, match="invalid UTF-8"):
        gpuops.InferenceSession(str(path), device="cpu")
    for cut in (1, 7, len(data) // 2, len(data) - 1):
        path.write_bytes(model.SerializeToString()[:cut])
        with pytest.raises(gpuops.GpuopsError):
            gpuops.InferenceSession(path, device="cpu")


def _unsorted_model():
    """y = relu(x + 1) * 2, with the nodes listed consumers first (as onnxruntime's float16 converter
    writes its Cast nodes); the If branch reads a value made by a node listed after the If."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    branch = helper.make_graph([helper.make_node("Relu", ["s"], ["r"]),
                                helper.make_node("Mul", ["r", "two"], ["b_out"])], "branch", [],
                               [helper.make_tensor_value_info("b_out", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch),
             helper.make_node("Add", ["x", "one"], ["s"]),
             helper.make_node("Constant", [], ["c"], value=helper.make_tensor("cv", TensorProto.BOOL, [], [True]))]
    graph = helper.make_graph(nodes, "unsorted", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])], [one, two])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("optimize", ["none", "all"])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_unsorted_graph_runs_like_onnxruntime(device, optimize):
    import onnxruntime as ort

    model = _unsorted_model()
    before = model.SerializeToString()
    x = np.array([-2.0, 0.5, 3.0], np.float32)
    want = ort.InferenceSession(before, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = gpuops.InferenceSession(model, device=device, optimize=optimize).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert model.SerializeToString() == before  # the caller's model is not reordered in place


def test_cyclic_graph_is_a_model_error():
    nodes = [helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])]
    graph = helper.make_graph(nodes, "cycle", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(gpuops.ModelError, match="not produced by any earlier node"):
        gpuops.InferenceSession(model, device="cpu", optimize="none")


@pytest.mark.parametrize("device", DEVICES)
def test_contrib_node_without_its_domain_import_runs_like_onnxruntime(device):
    node = helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10  # onnx's default IR version can be newer than an older onnxruntime (1.23: 11) loads
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(gpuops.InferenceSession(model, device=device).run(None, {"x": x})[0], want[0],
                               rtol=1e-6, atol=1e-7)
    other = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    other.graph.node[0].domain = "com.example"
    with pytest.raises(gpuops.UnsupportedOpError, match="does not import"):
        gpuops.InferenceSession(other, device=device)


def test_optimizer_on_a_malformed_model_skips_the_rewrite_and_the_op_names_the_node():
    """A session refuses the node at load (its attribute has the wrong type for the schema); the
    optimizer called on its own skips the rewrite that cannot read the node (a warning says which)."""
    node = helper.make_node("Transpose", ["x"], ["y"], name="bad_perm")
    node.attribute.append(helper.make_attribute("perm", 1))  # INTS in the spec; an INT here
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(gpuops.ModelError, match="node 'bad_perm' \\(Transpose\\): attribute 'perm' is INT"):
        gpuops.InferenceSession(model, device="cpu", optimize="all")
    with pytest.warns(gpuops.optimizer.OptimizerWarning, match="eliminate_noops rewrite failed"):
        gpuops.optimizer.optimize(model, "all", device="cpu", strict=False)
