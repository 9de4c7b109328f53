"""Shape-specialized CPU plans (gpuops/onnx/shape_plans.py, gpuops/onnx/specialize.py's specialize_model):
a signature run twice gets a plan of the model specialized to its shapes and optimized again; the
results match onnxruntime and the session's own plan; the cache is bounded in signatures and bytes,
shares the session's weights, and is safe from many threads."""

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import gpuops
from gpuops.onnx import shape_plans
from tests.zoo import models as zoo

ort = pytest.importorskip("onnxruntime")

EPS = np.finfo(np.float32).eps


def _ort(model, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def _close(got, want, terms):
    """float32 sums of ``terms`` products, reordered by a fusion: each output within terms x eps of the
    values' magnitude (at least 1: layer norms keep these models' activations near unit scale)."""
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(g, w, rtol=0, atol=4 * terms * EPS * scale)


# the longest sums in the zoo's transformers: the feed-forward's 4 x HIDDEN inner products
TERMS = 4 * zoo.HIDDEN


def _three_runs(sess, feeds):
    return [sess.run(None, feeds) for _ in range(3)]


@pytest.mark.parametrize("build", [zoo.bert, zoo.gpt])
def test_a_signature_run_twice_gets_a_smaller_plan_with_the_same_results(build):
    z = build("batch")
    rng = np.random.default_rng(0)
    feeds = z.feeds(2, rng)
    sess = gpuops.InferenceSession(z.model, device="cpu")
    runs = _three_runs(sess, feeds)
    want = _ort(z.model, feeds)
    for got in runs:
        _close(got, want, TERMS)
    status = sess.shape_plan_status()
    (sig,) = status["signatures"]
    assert sig["specialized"] and sig["runs"] == 1 and status["builds"] == 1
    assert sig["nodes"] < sig["base_nodes"] and sig["folded"] > 0
    assert sig["shapes"] == {k: (v.shape, str(v.dtype)) for k, v in feeds.items()}
    sess.run(None, feeds, profile=True)  # the profile is the specialized plan's
    assert len(sess.last_profile["nodes"]) == sig["nodes"]
    kinds = {st.op_type for st in sess._shape_plans.entries[next(iter(sess._shape_plans.entries))].plan.steps}
    assert "Shape" not in kinds  # every shape computation folded


def test_static_shape_fusions_fire_on_a_dynamic_axes_bert():
    """BERT with dynamic axes: its attention, skip layer norms and bias Gelu fuse on the dynamic plan
    already (the optimizer proves sizes equal through the model's symbolic dims) and stay fused in
    the specialized plan, where the shape arithmetic left around them is folded away."""
    z = zoo.bert("batch")
    feeds = z.feeds(2, np.random.default_rng(1))
    sess = gpuops.InferenceSession(z.model, device="cpu")
    base_kinds = {st.op_type for st in sess.plan.steps}
    _three_runs(sess, feeds)
    plan = next(iter(sess._shape_plans.entries.values())).plan
    plan = plan.by_node or plan  # (the nodes its native programs run)
    kinds = {st.op_type for st in plan.steps}
    assert "Attention" in base_kinds and "Attention" in kinds
    assert "Shape" in base_kinds and "Shape" not in kinds and len(plan.steps) < len(sess.plan.steps)
    model = sess.specialized_model(feeds)
    assert all(d.HasField("dim_value") for vi in model.graph.input for d in vi.type.tensor_type.shape.dim)
    assert "Attention" in {n.op_type for n in model.graph.node}


def test_each_signature_its_own_plan_bounded_and_least_recently_used_first():
    z = zoo.gpt("batch")
    sess = gpuops.InferenceSession(z.model, device="cpu", shape_plans=2)
    rng = np.random.default_rng(2)
    batches = [1, 2, 3]
    feeds = {b: z.feeds(b, rng) for b in batches}
    for b in batches:
        for got in _three_runs(sess, feeds[b]):
            _close(got, _ort(z.model, feeds[b]), TERMS)
    status = sess.shape_plan_status()
    assert len(status["signatures"]) == 2 and status["evictions"] == 1 and status["builds"] == 3
    kept = [s["shapes"]["input_ids"][0][0] for s in status["signatures"]]
    assert kept == [2, 3]  # batch 1's plan went first
    assert status["bytes"] == sum(s["bytes"] for s in status["signatures"])


def test_a_signature_seen_once_costs_no_build():
    z = zoo.gpt("batch")
    sess = gpuops.InferenceSession(z.model, device="cpu")
    rng = np.random.default_rng(3)
    for b in (1, 2, 3, 4):
        sess.run(None, z.feeds(b, rng))
    assert sess.shape_plan_status()["builds"] == 0


def test_memory_bound_and_shared_weights(monkeypatch):
    z = zoo.bert("batch")
    feeds = z.feeds(2, np.random.default_rng(4))
    sess = gpuops.InferenceSession(z.model, device="cpu")
    _three_runs(sess, feeds)
    plan = next(iter(sess._shape_plans.entries.values())).plan
    shared = [k for k, v in plan.weights.items() if sess.plan.weights.get(k) is v]
    assert shared  # the embedding tables and unchanged weights are the session's own arrays
    sig = sess.shape_plan_status()["signatures"][0]
    assert sig["bytes"] == shape_plans.owned_bytes(plan, sess.plan)
    assert sig["bytes"] < sum(v.nbytes for v in plan.weights.values())

    small = gpuops.InferenceSession(z.model, device="cpu")
    small._shape_plans.max_bytes = 16
    runs = _three_runs(small, feeds)
    (sig,) = small.shape_plan_status()["signatures"]
    assert not sig["specialized"] and "exceed" in sig["reason"]
    want = _ort(z.model, feeds)
    for got in runs:
        _close(got, want, TERMS)


def test_a_model_with_nothing_to_specialize_keeps_its_plan():
    """Dynamic axes, but nothing that depends on them to fold or fuse: the session plan runs."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    sess = gpuops.InferenceSession(m, device="cpu")
    feeds = {"x": np.array([[-1, 0, 1, 2]], np.float32)}
    for got in _three_runs(sess, feeds):
        np.testing.assert_array_equal(got[0], [[0, 0, 1, 2]])
    (sig,) = sess.shape_plan_status()["signatures"]
    assert not sig["specialized"] and sig["reason"] == "specializing saves no node, and no native program forms"
    static = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])], [y]), opset_imports=m.opset_import)
    sess = gpuops.InferenceSession(static, device="cpu")  # static shapes: nothing to specialize, no program
    _three_runs(sess, feeds)
    (sig,) = sess.shape_plan_status()["signatures"]
    assert not sig["specialized"] and sig["nodes"] == sig["base_nodes"] == 1 and sig["folded"] == 0


def test_a_failed_recording_run_leaves_the_session_usable():
    z = zoo.bert("batch")
    rng = np.random.default_rng(5)
    feeds = z.feeds(2, rng)
    bad = dict(feeds, input_ids=np.full_like(feeds["input_ids"], zoo.VOCAB + 5))  # out of the embedding
    sess = gpuops.InferenceSession(z.model, device="cpu")
    for _ in range(3):  # the second would have recorded the shapes
        with pytest.raises(gpuops.GpuopsError):
            sess.run(None, bad)
    assert sess.shape_plan_status()["builds"] == 0 and not sess._shape_plans.building
    want = _ort(z.model, feeds)
    for got in _three_runs(sess, feeds):  # the first good run records them
        _close(got, want, TERMS)
    (sig,) = sess.shape_plan_status()["signatures"]
    assert sig["specialized"] and sig["runs"] == 2


def test_many_threads_many_signatures():
    z = zoo.gpt("batch")
    sess = gpuops.InferenceSession(z.model, device="cpu", shape_plans=2)
    rng = np.random.default_rng(6)
    cases = [z.feeds(b, rng) for b in (1, 2, 3)]
    wants = [_ort(z.model, f) for f in cases]
    errors, barrier = [], threading.Barrier(6)

    def worker(i):
        barrier.wait()
        try:
            for k in range(8):
                j = (i + k) % 3
                _close(sess.run(None, cases[j]), wants[j], TERMS)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=300)
    assert not errors, errors[0]
    status = sess.shape_plan_status()
    assert len(status["signatures"]) <= 2 and not sess._shape_plans.building


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_bad_shape_plans_are_refused(bad):
    with pytest.raises(gpuops.GpuopsError, match="shape_plans must be"):
        gpuops.InferenceSession(zoo.mlp(1).model, device="cpu", shape_plans=bad)


def test_off_with_zero_or_without_optimizer():
    z = zoo.bert("batch")
    feeds = z.feeds(2, np.random.default_rng(7))
    for kw in ({"shape_plans": 0}, {"optimize": "none"}):
        sess = gpuops.InferenceSession(z.model, device="cpu", **kw)
        _three_runs(sess, feeds)
        assert sess.shape_plan_status()["builds"] == 0


def test_overridable_initializers_fed_or_not():
    """An initializer that is also a graph input: a signature that feeds it keeps it an input; one that
    does not makes it a constant of its plan. Both give what onnxruntime gives."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    shape = helper.make_node("Shape", ["x"], ["s"])
    nodes = [shape, helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Reshape", ["a", "s"], ["y"])]
    init = onnx.numpy_helper.from_array(np.array([1, 2, 3], np.float32), "b")
    m = helper.make_model(helper.make_graph(nodes, "g", [x, b], [y], initializer=[init]),
                          opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = gpuops.InferenceSession(m, device="cpu")
    xs = np.arange(6, dtype=np.float32).reshape(2, 3)
    for feeds in ({"x": xs}, {"x": xs, "b": np.array([10, 20, 30], np.float32)}):
        want = _ort(m, feeds)
        for got in _three_runs(sess, feeds):
            np.testing.assert_array_equal(got[0], want[0])
    assert sess.shape_plan_status()["builds"] == 2


@pytest.mark.parametrize("name", sorted(zoo.BUILDERS))
@pytest.mark.parametrize("fp16", [False, True], ids=["f32", "fp16"])
def test_every_zoo_model_in_its_dynamic_form(name, fp16):
    """Every architecture of the zoo, as exporters write it with dynamic axes (and as float16, which the
    optimizer computes in float32 on the CPU: the second pass must leave that as it is), at two batch
    sizes, three runs each: what onnxruntime gives, whatever the plan."""
    z = zoo.BUILDERS[name]("batch")
    model = z.model
    if fp16:
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = convert_float_to_float16(model, keep_io_types=False)
    sess = gpuops.InferenceSession(model, device="cpu")
    base = gpuops.InferenceSession(model, device="cpu", shape_plans=0)
    rng = np.random.default_rng(8)
    for b in (1, 3):
        feeds = z.feeds(b, rng)
        if fp16:
            feeds = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in feeds.items()}
        want = base.run(None, feeds)
        for got in _three_runs(sess, feeds):
            if fp16:  # float32 compute either way; the outputs round to float16 (one ulp apart at most)
                for g, w in zip(got, want):
                    np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=2 * 2.0 ** -10,
                                               atol=4 * TERMS * EPS * max(1.0, float(np.abs(w).max())))
            else:
                _close(got, want, TERMS)
    assert sess.shape_plan_status()["builds"] in (0, 2)


def _if_model():
    """A network inside the branches of an If on a feed's value (as silero-vad's exports are), each
    branch reshaping by shape arithmetic and holding an If on a shape (inlined once shapes are known)."""
    f = TensorProto.FLOAT
    i64 = TensorProto.INT64

    def branch(tag, scale):
        c = lambda name, v: helper.make_node("Constant", [], [f"{tag}_{name}"],  # noqa: E731
                                             value=helper.make_tensor(f"{tag}_{name}_t", i64, [1], [v]))
        inner_then = helper.make_graph([helper.make_node("Identity", [f"{tag}_r"], [f"{tag}_it"])],
                                       f"{tag}_inner_then", [], [helper.make_tensor_value_info(f"{tag}_it", f, None)])
        inner_else = helper.make_graph([helper.make_node("Neg", [f"{tag}_r"], [f"{tag}_ie"])],
                                       f"{tag}_inner_else", [], [helper.make_tensor_value_info(f"{tag}_ie", f, None)])
        nodes = [
            helper.make_node("Shape", ["x"], [f"{tag}_s"]),
            c("zero", 0), c("minus1", -1), c("wide", 4),
            helper.make_node("Gather", [f"{tag}_s", f"{tag}_zero"], [f"{tag}_n"], axis=0),
            helper.make_node("Concat", [f"{tag}_n", f"{tag}_minus1"], [f"{tag}_target"], axis=0),
            helper.make_node("Reshape", ["x", f"{tag}_target"], [f"{tag}_flat"]),
            helper.make_node("Mul", [f"{tag}_flat", f"{tag}_k"], [f"{tag}_r"]),
            helper.make_node("Gather", [f"{tag}_s", f"{tag}_minus1"], [f"{tag}_last"], axis=0),
            helper.make_node("Greater", [f"{tag}_last", f"{tag}_wide"], [f"{tag}_gt"]),
            helper.make_node("Squeeze", [f"{tag}_gt"], [f"{tag}_cond"]),
            helper.make_node("If", [f"{tag}_cond"], [f"{tag}_y"], then_branch=inner_then, else_branch=inner_else),
        ]
        inits = [helper.make_tensor(f"{tag}_k", f, [], [scale])]
        return helper.make_graph(nodes, f"{tag}_branch", [], [helper.make_tensor_value_info(f"{tag}_y", f, None)],
                                 inits)

    g = helper.make_graph(
        [helper.make_node("Equal", ["sr", "sr16k"], ["is16k"]),
         helper.make_node("If", ["is16k"], ["y"], then_branch=branch("a", 2.0), else_branch=branch("b", 3.0))],
        "wrapped", [helper.make_tensor_value_info("x", f, ["n", "t", "c"]),
                    helper.make_tensor_value_info("sr", i64, [])],
        [helper.make_tensor_value_info("y", f, None)], [helper.make_tensor("sr16k", i64, [], [16000])])
    # IR version 8: onnxruntime 1.23 reads 11 at most
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("width", [3, 5])
def test_shape_arithmetic_inside_if_branches_is_folded(width):
    """An If on a feed's value keeps its branches, but their shape arithmetic is folded for the signature
    and an If on a shape inside them is inlined: the specialized plan has fewer nodes at every depth,
    and both branches, taken in any order, give onnxruntime's results."""
    model = _if_model()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, width)).astype(np.float32)
    sess = gpuops.InferenceSession(model, device="cpu")
    for sr in (16000, 8000, 16000, 8000, 8000, 16000):
        feeds = {"x": x, "sr": np.array(sr, np.int64)}
        (got,) = sess.run(None, feeds)
        (want,) = _ort(model, feeds)
        np.testing.assert_array_equal(got, want)  # one exact multiply by 2 or 3, maybe negated
    (sig,) = sess.shape_plan_status()["signatures"]
    assert sig["specialized"] and sig["folded"] > 0
    # per branch, base: 9 nodes (the Constants are initializers) and the inner If's two one-node bodies;
    # specialized: Reshape, Mul and the inner If's Neg (width 3) or nothing (width 5: an Identity, removed)
    assert sig["base_nodes"] == 2 + 2 * (9 + 2) and sig["nodes"] == 2 + 2 * (2 + (width <= 4))
