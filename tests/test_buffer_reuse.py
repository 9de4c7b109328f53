"""Buffer reuse: an elementwise op writes into a dying input's buffer, never into one anything else
can still see (a view, a second name, a feed, a weight), and a run's device memory stays at the
liveness plan's minimum."""

import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpuops
from gpuops.device import get_device
from gpuops.executor import run as executor

from tests.ops.common import DEVICES


def model(nodes, inputs, outputs, inits=(), opset=17):
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "reuse", [vi(n, t, s) for n, t, s in inputs],
                          [vi(n, t, s) for n, t, s in outputs],
                          [numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def run(m, feeds, device):
    sess = gpuops.InferenceSession(m, device=device, optimize="none")
    out = sess.run(None, feeds, profile=True)
    return sess, out


F = TensorProto.FLOAT


@pytest.fixture(autouse=True)
def small_arrays_too(monkeypatch):
    """The tests' arrays are small; the executor writes in place from MIN_IN_PLACE_BYTES on."""
    monkeypatch.setattr(executor, "MIN_IN_PLACE_BYTES", 0)

X = np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6)


@pytest.mark.parametrize("device", DEVICES)
def test_a_chain_writes_into_its_dying_inputs(device):
    nodes = [helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Mul", ["b", "two"], ["c"]), helper.make_node("Neg", ["c"], ["y"])]
    m = model(nodes, [("x", F, [4, 6])], [("y", F, [4, 6])], [("two", np.float32(2))])
    sess, (y,) = run(m, {"x": X.copy()}, device)
    np.testing.assert_allclose(y, -2 * np.exp(X), rtol=1e-6)
    in_place = [r["in_place"] for r in sess.last_profile["nodes"]]
    assert in_place == [False, True, True, True]  # the feed is never written over
    assert sess.memory_stats()["in_place_outputs"] == 3


@pytest.mark.parametrize("device", DEVICES)
def test_feeds_and_weights_are_never_written(device):
    w = np.full((4, 6), 3.0, np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Add", ["w", "x"], ["b"]),
             helper.make_node("Neg", ["w"], ["c"]), helper.make_node("Sum", ["a", "b", "c"], ["y"])]
    m = model(nodes, [("x", F, [4, 6])], [("y", F, [4, 6])], [("w", w)])
    x = X.copy()
    sess = gpuops.InferenceSession(m, device=device, optimize="none")
    for _ in range(2):
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(y, np.maximum(X, 0) + (w + X) - w, rtol=1e-6)
    np.testing.assert_array_equal(x, X)


@pytest.mark.parametrize("device", DEVICES)
def test_a_value_seen_through_a_view_is_not_written(device):
    # r is a view of a (Reshape); a dies at Relu while r is still to be read
    shape = numpy_helper.from_array(np.array([6, 4], np.int64), "shape")
    back = numpy_helper.from_array(np.array([4, 6], np.int64), "back")
    nodes = [helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Reshape", ["a", "shape"], ["r"]),
             helper.make_node("Neg", ["a"], ["b"]), helper.make_node("Reshape", ["r", "back"], ["r2"]),
             helper.make_node("Add", ["r2", "b"], ["y"])]
    m = model(nodes, [("x", F, [4, 6])], [("y", F, [4, 6])])
    m.graph.initializer.extend([shape, back])
    _, (y,) = run(m, {"x": X}, device)
    np.testing.assert_allclose(y, np.zeros_like(X), atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_a_view_of_a_matmul_result_shared_by_two_names_is_not_written(device):
    # MatMul's output is a view of its own temporary; Split and Identity alias it further
    w = np.eye(6, dtype=np.float32) * 2
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Identity", ["m"], ["i"]),
             helper.make_node("Split", ["m"], ["s1", "s2"], axis=0, num_outputs=2),
             helper.make_node("Neg", ["s1"], ["n1"]), helper.make_node("Neg", ["i"], ["ni"]),
             helper.make_node("Concat", ["n1", "s2"], ["c"], axis=0), helper.make_node("Sub", ["c", "ni"], ["y"])]
    m = model(nodes, [("x", F, [4, 6])], [("y", F, [4, 6])], [("w", w)], opset=18)
    _, (y,) = run(m, {"x": X}, device)
    m2 = 2 * X
    np.testing.assert_allclose(y, np.concatenate([-m2[:2], m2[2:]]) + m2, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_broadcasting_uses_only_an_input_of_the_output_shape(device):
    nodes = [helper.make_node("Exp", ["row"], ["r"]), helper.make_node("Exp", ["x"], ["e"]),
             helper.make_node("Add", ["r", "e"], ["y"])]  # r (1x6) cannot hold y (4x6); e can
    m = model(nodes, [("row", F, [1, 6]), ("x", F, [4, 6])], [("y", F, [4, 6])])
    row = X[:1] / 2
    sess, (y,) = run(m, {"row": row, "x": X}, device)
    np.testing.assert_allclose(y, np.exp(row) + np.exp(X), rtol=1e-6)
    assert sess.last_profile["nodes"][-1]["in_place"]


@pytest.mark.parametrize("device", DEVICES)
def test_arrays_under_the_threshold_get_fresh_buffers(device, monkeypatch):
    monkeypatch.setattr(executor, "MIN_IN_PLACE_BYTES", X.nbytes + 1)
    m = model([helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])],
              [("x", F, [4, 6])], [("y", F, [4, 6])])
    sess, (y,) = run(m, {"x": X}, device)
    np.testing.assert_allclose(y, -np.exp(X), rtol=1e-6)
    assert sess.memory_stats()["in_place_outputs"] == 0


@pytest.mark.parametrize("device", DEVICES)
def test_integer_and_mixed_inputs_are_left_alone(device):
    i64 = TensorProto.INT64
    nodes = [helper.make_node("Abs", ["k"], ["a"]), helper.make_node("Add", ["a", "k"], ["y"])]
    m = model(nodes, [("k", i64, [5])], [("y", i64, [5])])
    k = np.arange(-2, 3)
    sess, (y,) = run(m, {"k": k}, device)
    np.testing.assert_array_equal(y, np.abs(k) + k)
    assert sess.memory_stats()["in_place_outputs"] == 0


@pytest.mark.parametrize("device", DEVICES)
def test_loop_body_values_reuse_inside_and_carried_values_are_kept(device):
    body = helper.make_graph(
        [helper.make_node("Exp", ["v_in"], ["e"]), helper.make_node("Neg", ["e"], ["n"]),
         helper.make_node("Add", ["n", "v_in"], ["v_out"]), helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("v_in", F, [4, 6])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", F, [4, 6])])
    loop = helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)
    m = model([loop], [("M", TensorProto.INT64, []), ("x", F, [4, 6])], [("y", F, [4, 6])])
    _, (y,) = run(m, {"M": np.array(3), "x": X / 4}, device)
    want = X / 4
    for _ in range(3):
        want = want - np.exp(want)
    np.testing.assert_allclose(y, want, rtol=1e-5)


def test_owns_buffer_tells_views_and_shared_bases_apart():
    cpu = get_device("cpu")
    fresh = np.ones(6)
    assert cpu.owns_buffer(fresh)
    reshaped = np.ones(6).reshape(2, 3)  # a view of a base only it holds (bound first: pytest's
    assert cpu.owns_buffer(reshaped)  # assertion rewriting keeps intermediate values alive)
    held = np.ones(6)
    view = held.reshape(2, 3)
    assert not cpu.owns_buffer(view)
    a, b = np.split(np.ones(6), 2)  # two views of one base
    assert not cpu.owns_buffer(a)
    ro = np.ones(6)
    ro.flags.writeable = False
    assert not cpu.owns_buffer(ro)


def test_a_device_array_seen_through_a_view_is_not_alone():
    # the executor's test: no reference but its own (CuPy: a view holds its base) and owns_buffer
    cuda = get_device("cuda")
    xp = cuda.xp
    a = xp.ones(6)
    alone = sys.getrefcount(a)
    assert cuda.owns_buffer(a)
    v = a.reshape(2, 3)
    assert sys.getrefcount(a) > alone or not cuda.owns_buffer(a)
    del v
    assert sys.getrefcount(a) == alone and cuda.owns_buffer(a)
    assert xp.asarray(a) is a  # CuPy returns the very array, not a second one over its memory
    out = xp.zeros(6)
    assert xp.add(a, a, out=out) is out


LIGHT = ["squeezenet", "shufflenet", "inception_v1"]


@pytest.mark.parametrize("optimize", ["none", "all"])
@pytest.mark.parametrize("name", LIGHT)
def test_light_model_device_peak_is_within_10_percent_of_the_liveness_minimum(name, optimize):
    from gpuops.models import resolve_model_path

    m = onnx.load(resolve_model_path(f"light:{name}"))
    sess = gpuops.InferenceSession(m, device="cuda", optimize=optimize)
    (arg,) = sess.get_inputs()
    x = np.random.default_rng(0).random([d if isinstance(d, int) else 1 for d in arg.shape], dtype=np.float32)
    sess.run(None, {arg.name: x})
    st = sess.memory_stats()
    assert st["peak_bytes"] - st["weights_bytes"] <= 1.1 * st["planned_peak_bytes"]
    if optimize == "none":
        assert st["in_place_outputs"] > 0  # the unfused Relus run in place


def test_cpu_chain_holds_no_more_than_the_liveness_minimum():
    # NumPy reports its allocations to tracemalloc: what the run really held, against the plan
    import tracemalloc

    n, width = 12, 1 << 16
    nodes, prev = [], "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        nodes.append(helper.make_node(["Exp", "Neg", "Tanh"][i % 3], [prev], [out]))
        prev = out
    m = model(nodes, [("x", F, [4, width])], [("y", F, [4, width])])
    sess = gpuops.InferenceSession(m, device="cpu", optimize="none")
    x = np.random.default_rng(1).random((4, width), dtype=np.float32)
    sess.run(None, {"x": x})
    tracemalloc.start()
    try:
        (y,) = sess.run(None, {"x": x})
        held = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    st = sess.memory_stats()
    assert st["planned_peak_bytes"] == 2 * x.nbytes and st["in_place_outputs"] == n - 1
    assert held <= 1.1 * st["planned_peak_bytes"] - x.nbytes  # the feed was allocated before


def test_device_asarray_with_copy_true_copies():
    # array-api-compat's asarray(copy=True) is cupy.array(copy=True) on CuPy: a new buffer (ops that
    # must not alias their input, Clip without bounds say, rely on it)
    cuda = get_device("cuda")
    xp = cuda.xp
    a = xp.arange(6, dtype=xp.float32)
    for c in (xp.asarray(a[::2], copy=True), xp.asarray(a, copy=True), cuda.lib.array(a)):
        c[...] = -1
    np.testing.assert_array_equal(cuda.to_host(a), np.arange(6, dtype=np.float32))
    assert xp.asarray(a) is a and xp.asarray(a, copy=False) is a
    with pytest.raises(ValueError):
        xp.asarray(a, dtype=xp.float64, copy=False)  # a copy is needed


def test_cpu_weights_are_read_only_and_outputs_writable():
    # an op writing into a weight would change every later run: NumPy refuses it; an output that is a
    # weight (or a view of one) comes back as the caller's own copy
    w = np.arange(6, dtype=np.float32)
    shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
    m = model([helper.make_node("Reshape", ["w", "shape"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])],
              [("x", F, [2, 3])], [("r", F, [2, 3]), ("y", F, [2, 3])], [("w", w)])
    m.graph.initializer.append(shape)
    sess = gpuops.InferenceSession(m, device="cpu", optimize="none")
    assert all(not a.flags.writeable for a in sess.plan.weights.values())
    r, y = sess.run(None, {"x": np.ones((2, 3), np.float32)})
    r += 1  # the caller's copy
    (r2,) = sess.run(["r"], {"x": np.ones((2, 3), np.float32)}, output_device="device")
    r2 += 1
    (r3,) = sess.run(["r"], {"x": np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(r3, w.reshape(2, 3))
