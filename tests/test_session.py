"""InferenceSession: loading, planning, feed validation, errors, liveness, registry resolution."""

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpuops
from gpuops import registry


def _model(nodes, inputs, outputs, inits=(), opset=17, **kw):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kw)


def _vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def add_relu_model():
    return _model([helper.make_node("Add", ["x", "y"], ["s"], name="add"),
                   helper.make_node("Relu", ["s"], ["z"], name="relu")],
                  [_vi("x", [2, 3]), _vi("y", ["N", 3])], [_vi("z", [2, 3])])


def test_run_and_introspection():
    sess = gpuops.InferenceSession(add_relu_model(), device="cpu")
    assert [(i.name, i.shape, i.type) for i in sess.get_inputs()] == [
        ("x", [2, 3], "tensor(float)"), ("y", ["N", 3], "tensor(float)")]
    assert [o.name for o in sess.get_outputs()] == ["z"]
    x = np.array([[1, -2, 3], [-4, 5, -6]], np.float32)
    y = np.ones((2, 3), np.float32)
    (z,) = sess.run(None, {"x": x, "y": y})
    np.testing.assert_array_equal(z, np.maximum(x + y, 0))
    assert isinstance(z, np.ndarray)


def test_model_from_bytes_and_path(tmp_path):
    m = add_relu_model()
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    feeds = {"x": np.ones((2, 3), np.float32), "y": np.ones((2, 3), np.float32)}
    for src in (m.SerializeToString(), str(path), path):
        np.testing.assert_array_equal(gpuops.InferenceSession(src, device="cpu").run(None, feeds)[0], 2)


@pytest.mark.parametrize("feeds, match", [
    ({"x": np.ones((2, 3), np.float32)}, r"missing input\(s\) \['y'\]"),
    ({"x": np.ones((2, 3), np.float32), "y": np.ones((2, 3), np.float32), "w": 1}, r"unknown input name\(s\) \['w'\]"),
    ({"x": np.ones((2, 3), np.float64), "y": np.ones((2, 3), np.float32)}, r"input 'x': expected dtype tensor\(float\)"),
    ({"x": np.ones((2, 4), np.float32), "y": np.ones((2, 3), np.float32)}, r"input 'x': dimension 1 must be 3"),
    ({"x": np.ones((6,), np.float32), "y": np.ones((2, 3), np.float32)}, r"input 'x': expected rank 2"),
])
def test_bad_feeds(feeds, match):
    sess = gpuops.InferenceSession(add_relu_model(), device="cpu")
    with pytest.raises(gpuops.FeedError, match=match):
        sess.run(None, feeds)


def test_symbolic_dim_accepts_any_size_and_unknown_output_name_is_an_error():
    sess = gpuops.InferenceSession(add_relu_model(), device="cpu")
    feeds = {"x": np.ones((2, 3), np.float32), "y": np.ones((1, 3), np.float32)}
    assert sess.run(["z"], feeds)[0].shape == (2, 3)
    with pytest.raises(gpuops.FeedError, match="unknown output name 'nope'"):
        sess.run(["nope"], feeds)


def test_unsupported_op_fails_at_creation_naming_node_op_and_versions():
    m = _model([helper.make_node("Add", ["x", "x"], ["y"], name="my_add")], [_vi("x", [1])], [_vi("y", [1])], opset=5)
    with pytest.raises(gpuops.UnsupportedOpError) as e:
        registry.resolve("", "Add", 0)
    assert "ai.onnx::Add at opset 0" in str(e.value) and "versions [" in str(e.value)
    m = _model([helper.make_node("FrobnicateX", ["x"], ["y"], name="weird")], [_vi("x", [1])], [_vi("y", [1])])
    with pytest.raises(gpuops.UnsupportedOpError, match=r"node 'weird': op ai.onnx::FrobnicateX at opset 17 "
                                                        r"is not supported: gpuops does not implement FrobnicateX "
                                                        r"in domain 'ai.onnx' at any opset"):
        gpuops.InferenceSession(m, device="cpu")
    m = _model([helper.make_node("Thing", ["x"], ["y"], name="t", domain="com.acme")], [_vi("x", [1])], [_vi("y", [1])])
    with pytest.raises(gpuops.UnsupportedOpError, match="domain 'com.acme'"):
        gpuops.InferenceSession(m, device="cpu")


def test_unknown_attribute_is_a_model_error():
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="r", bogus=3)], [_vi("x", [1])], [_vi("y", [1])])
    with pytest.raises(gpuops.ModelError, match=r"node 'r' \(Relu\): unknown attribute\(s\) \['bogus'\]"):
        gpuops.InferenceSession(m, device="cpu")


def test_malformed_models():
    with pytest.raises(gpuops.ModelError, match="not a valid ONNX model"):
        gpuops.InferenceSession(b"\x00garbage\xff" * 7, device="cpu")
    with pytest.raises(gpuops.ModelError, match="model file not found"):
        gpuops.InferenceSession("/nonexistent/model.onnx", device="cpu")
    m = _model([helper.make_node("Relu", ["nowhere"], ["y"], name="r")], [_vi("x", [1])], [_vi("y", [1])])
    with pytest.raises(gpuops.ModelError, match="input 'nowhere' is not produced"):
        gpuops.InferenceSession(m, device="cpu")


def test_initializer_that_is_also_an_input_is_an_optional_feed():
    w = numpy_helper.from_array(np.full((2, 3), 5, np.float32), "y")
    m = _model([helper.make_node("Add", ["x", "y"], ["z"])], [_vi("x", [2, 3]), _vi("y", [2, 3])],
               [_vi("z", [2, 3])], inits=[w], opset=8)
    sess = gpuops.InferenceSession(m, device="cpu")
    assert [i.name for i in sess.get_inputs()] == ["x"]
    x = np.zeros((2, 3), np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], 5)
    np.testing.assert_array_equal(sess.run(None, {"x": x, "y": np.ones((2, 3), np.float32)})[0], 1)


def test_external_data_loads_and_must_stay_inside_the_model_folder(tmp_path):
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    m = _model([helper.make_node("Add", ["x", "w"], ["z"])], [_vi("x", [2, 3])], [_vi("z", [2, 3])], inits=[w])
    path = tmp_path / "m.onnx"
    onnx.save(m, path, save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin",
              size_threshold=0)
    out = gpuops.InferenceSession(str(path), device="cpu").run(None, {"x": np.ones((2, 3), np.float32)})[0]
    np.testing.assert_array_equal(out, np.arange(6).reshape(2, 3) + 1)
    evil = onnx.load(path, load_external_data=False)
    for e in evil.graph.initializer[0].external_data:
        if e.key == "location":
            e.value = "../../etc/passwd"
    (tmp_path / "evil.onnx").write_bytes(evil.SerializeToString())
    with pytest.raises(gpuops.ModelError, match="outside the model's folder"):
        gpuops.InferenceSession(str(tmp_path / "evil.onnx"), device="cpu")
    with pytest.raises(gpuops.ModelError, match="external data"):
        gpuops.InferenceSession(evil.SerializeToString(), device="cpu")


def test_liveness_releases_each_intermediate_after_its_last_consumer():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="n0"),
             helper.make_node("Relu", ["a"], ["b"], name="n1"),
             helper.make_node("Add", ["a", "b"], ["c"], name="n2"),
             helper.make_node("Relu", ["c"], ["y"], name="n3")]
    sess = gpuops.InferenceSession(_model(nodes, [_vi("x", [2])], [_vi("y", [2])]), device="cpu")
    released = {s.name: sorted(s.release) for s in sess.plan.steps}
    assert released == {"n0": ["x"], "n1": [], "n2": ["a", "b"], "n3": ["c"]}


def test_registry_picks_highest_since_not_above_opset_and_device_overrides():
    calls = []

    @registry.op("ZzTest", domain="test.gpuops", since=1)
    def v1(xp, X):
        return X

    @registry.op("ZzTest", domain="test.gpuops", since=5)
    def v5(xp, X):
        return X

    @registry.op("ZzTest", domain="test.gpuops", since=5, device="cuda")
    def v5_cuda(xp, X):
        return X

    assert registry.resolve("test.gpuops", "ZzTest", 4).fn is v1
    assert registry.resolve("test.gpuops", "ZzTest", 9).fn is v5
    assert registry.resolve("test.gpuops", "ZzTest", 4, device="cuda").fn is v1
    assert registry.resolve("test.gpuops", "ZzTest", 9, device="cuda").fn is v5_cuda
    assert registry.versions("test.gpuops", "ZzTest") == [1, 5]
    with pytest.raises(ValueError, match="registered twice"):
        registry.op("ZzTest", domain="test.gpuops", since=5)(v1)
    assert not calls


def test_devices_and_device_strings():
    assert gpuops.devices()[0]["name"] == "cpu"
    assert str(gpuops.get_device("cpu")) == "cpu"
    with pytest.raises(gpuops.DeviceError, match="unknown device"):
        gpuops.get_device("tpu")
    with pytest.raises(gpuops.DeviceError, match="cuda:x"):
        gpuops.get_device("cuda:x")
    if not any(d["kind"] == "cuda" for d in gpuops.devices()):
        assert str(gpuops.get_device("auto")) == "cpu"
        with pytest.raises(gpuops.DeviceError, match="requested but"):
            gpuops.InferenceSession(add_relu_model(), device="cuda:0")


def test_import_does_not_import_cupy():
    code = "import sys, gpuops; gpuops.InferenceSession; assert 'cupy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_node_failure_is_wrapped_with_the_node_name():
    m = _model([helper.make_node("Add", ["x", "y"], ["z"], name="bad_add")],
               [_vi("x", ["A"]), _vi("y", ["B"])], [_vi("z", ["C"])])
    sess = gpuops.InferenceSession(m, device="cpu")
    with pytest.raises(gpuops.NodeError, match=r"node 'bad_add' \(Add\)"):
        sess.run(None, {"x": np.ones(3, np.float32), "y": np.ones(4, np.float32)})


def test_gradient_is_unsupported_with_a_clear_error_at_creation():
    node = helper.make_node("Gradient", ["x"], ["dx"], name="grad", domain="ai.onnx.preview.training",
                            xs=["x"], y="x")
    g = helper.make_graph([node], "g", [_vi("x", [1])], [_vi("dx", [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ai.onnx.preview.training", 1)])
    with pytest.raises(gpuops.UnsupportedOpError,
                       match=r"node 'grad': op ai.onnx.preview.training::Gradient at opset 1 is not supported"):
        gpuops.InferenceSession(m, device="cpu")
