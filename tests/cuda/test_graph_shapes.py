"""Shape-specialized CUDA graphs: the plan specialized to a feed-shape signature (shape computations
folded on the host), one captured graph per signature in an LRU cache, a failed signature left alone,
graph memory at the liveness minimum, replays from many threads, and decoding with a past by length
buckets. The specialize() tests run on the cpu device; the graph tests on CuPy, or its CPU stand-in."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops
from gpuops import device as _device
from gpuops.executor import RunContext, run_plan
from gpuops.onnx.specialize import MAX_ELEMENTS, ShapeRecorder, signature, specialize

from tests.conformance.harness import assert_close
from tests.ops.common import make_model
from tests.test_cuda_path import chain_model, expected_chain
from tests.zoo.models import BUILDERS

from .both import run_in_threads

STANDIN = _device.uses_standin()
io = helper.make_tensor_value_info
i64 = lambda *v: np.array(v, np.int64)  # noqa: E731


# -- specialize(): the plan layer ------------------------------------------------------------------

def reshape_by_shape_model():
    """y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [2, 3])): x (N, 6) -> (N, 2, 3), as exporters
    write x.view(x.size(0), 2, 3)."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"], name="shape"),
             helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0, name="gather"),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="unsqueeze"),
             helper.make_node("Concat", ["n1", "tail"], ["target"], axis=0, name="concat"),
             helper.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    return make_model(nodes, [io("x", TensorProto.FLOAT, ["N", 6])], [io("y", TensorProto.FLOAT, ["N", 2, 3])],
                      inits=[("zero", np.array(0, np.int64)), ("axes", i64(0)), ("tail", i64(2, 3))], opset=17)


def _run(sess, plan, feeds):
    env = dict(plan.weights)
    env.update(feeds)
    run_plan(plan, env, RunContext(sess.device, sess.memory))
    return [env[n] for n in sess._output_names]


def test_specialize_folds_the_shape_chain_on_the_host_and_keeps_the_result():
    sess = gpuops.InferenceSession(reshape_by_shape_model(), device="cpu", optimize="none")
    before = [(s.name, list(s.release), dict(s.host_consts)) for s in sess.plan.steps]
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    spec = specialize(sess.plan, {"x": x})
    assert spec.folded == ["shape", "gather", "unsqueeze", "concat"]
    assert [s.op_type for s in spec.plan.steps] == ["Reshape", "Relu"]
    np.testing.assert_array_equal(spec.constants["target"], [4, 2, 3])
    reshape = spec.plan.steps[0]
    np.testing.assert_array_equal(reshape.host_consts[1], [4, 2, 3])  # read on the host: no device copy
    assert "target" not in spec.plan.weights  # only host inputs read it
    assert spec.signature == signature({"x": x}) == (("x", (4, 6), "float32"),)
    np.testing.assert_array_equal(_run(sess, spec.plan, {"x": x})[0], sess.run(None, {"x": x})[0])
    np.testing.assert_array_equal(_run(sess, spec.plan, {"x": x})[0], np.maximum(x.reshape(4, 2, 3), 0))
    # the session's plan is untouched, and still serves any batch
    assert [(s.name, list(s.release), dict(s.host_consts)) for s in sess.plan.steps] == before
    x7 = np.ones((7, 6), np.float32)
    assert sess.run(None, {"x": x7})[0].shape == (7, 2, 3)


def test_specialize_takes_a_signature_of_shapes_and_dtypes():
    sess = gpuops.InferenceSession(reshape_by_shape_model(), device="cpu", optimize="none")
    by_shapes = specialize(sess.plan, {"x": ((3, 6), np.float32)})
    by_key = specialize(sess.plan, (("x", (3, 6), "float32"),))
    for spec in (by_shapes, by_key):
        np.testing.assert_array_equal(spec.plan.steps[0].host_consts[1], [3, 2, 3])


def gelu_shape_model():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Gelu", ["h"], ["g"], domain="com.microsoft", name="gelu"),
             helper.make_node("Shape", ["g"], ["s"], name="shape"),
             helper.make_node("Reshape", ["g", "s"], ["y"], name="reshape")]
    return make_model(nodes, [io("x", TensorProto.FLOAT, ["N", 8])], [io("y", TensorProto.FLOAT, None)],
                      inits=[("w", np.linspace(-1, 1, 40, dtype=np.float32).reshape(8, 5))],
                      opsets={"com.microsoft": 1})


def test_shape_of_an_intermediate_is_folded_from_inferred_or_observed_shapes():
    # Shape(MatMul(x, w)): ONNX's shape inference knows MatMul; a contrib op it does not know is run on
    # zeros of its input shapes (small), or its shape comes from a run (ShapeRecorder)
    model = gelu_shape_model()
    sess = gpuops.InferenceSession(model, device="cpu", optimize="none")
    x = np.ones((3, 8), np.float32)
    spec = specialize(sess.plan, {"x": x}, opsets=sess.opsets)
    assert spec.folded == ["shape"] and spec.shapes["g"] == ((3, 5), np.float32)
    np.testing.assert_array_equal(spec.plan.steps[-1].host_consts[1], [3, 5])
    rec = ShapeRecorder(sess.plan.weights)
    rec.update({"x": x})
    run_plan(sess.plan, rec, RunContext(sess.device, sess.memory, keep_all=True))
    assert rec.shapes["g"] == ((3, 5), np.float32)
    big = np.ones((20000, 8), np.float32)  # too large to probe, and nothing observed: the Shape stays
    assert "shape" not in specialize(sess.plan, {"x": big}, opsets=sess.opsets).folded
    rec = ShapeRecorder(sess.plan.weights)
    rec.update({"x": big})
    run_plan(sess.plan, rec, RunContext(sess.device, sess.memory, keep_all=True))
    assert specialize(sess.plan, {"x": big}, opsets=sess.opsets, shapes=rec.shapes).folded == ["shape"]


def test_specialize_folds_only_small_values_that_depend_on_shapes():
    # ConstantOfShape(Shape(x)): int64 of x's size is folded up to MAX_ELEMENTS elements; a float one of
    # that size is not (it is data, not shape arithmetic), nor anything depending on the feed's values
    def model(dtype):
        nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
                 helper.make_node("ConstantOfShape", ["s"], ["c"], name="cos",
                                  value=helper.make_tensor("v", dtype, [1], [1])),
                 helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT, name="cast"),
                 helper.make_node("Add", ["x", "cf"], ["y"], name="add")]
        return make_model(nodes, [io("x", TensorProto.FLOAT, ["N", "M"])], [io("y", TensorProto.FLOAT, None)])

    ints = gpuops.InferenceSession(model(TensorProto.INT64), device="cpu", optimize="none")
    floats = gpuops.InferenceSession(model(TensorProto.FLOAT), device="cpu", optimize="none")
    folded = lambda sess, shape: specialize(sess.plan, {"x": (shape, np.float32)}).folded  # noqa: E731
    assert folded(ints, (8, 8)) == ["shape", "cos", "cast"]  # 64 floats: still shape arithmetic's size
    assert folded(ints, (8, 9)) == ["shape", "cos"]  # 72: the float values stay on the device
    side = int(np.sqrt(MAX_ELEMENTS)) + 1
    assert folded(ints, (side, side)) == ["shape"]  # more than MAX_ELEMENTS int64
    assert folded(floats, (8, 9)) == ["shape"]
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    spec = specialize(ints.plan, {"x": x})
    assert [s.op_type for s in spec.plan.steps] == ["Add"]
    np.testing.assert_array_equal(_run(ints, spec.plan, {"x": x})[0], x + 1)
    assert "cf" in spec.plan.weights  # read by Add on the device


def test_specialize_leaves_feed_values_and_fed_initializers_alone():
    # y = Reshape(x, shape_in) with an overridable initializer: a constant only when the run does not feed it
    nodes = [helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape")]
    model = make_model(nodes, [io("x", TensorProto.FLOAT, [2, 6]), io("target", TensorProto.INT64, [2])],
                       [io("y", TensorProto.FLOAT, None)], inits=[("target", i64(3, 4))])
    sess = gpuops.InferenceSession(model, device="cpu", optimize="none")
    spec = specialize(sess.plan, {"x": ((2, 6), np.float32)})
    np.testing.assert_array_equal(spec.plan.steps[0].host_consts[1], [3, 4])
    fed = specialize(sess.plan, {"x": ((2, 6), np.float32), "target": ((2,), np.int64)})
    assert 1 not in fed.plan.steps[0].host_consts


@pytest.mark.parametrize("name", ["bert", "gpt"])
def test_specialized_zoo_models_lose_every_shape_node_and_match(name):
    z = BUILDERS[name]("batch")
    feeds = z.feeds(2, np.random.default_rng(0))
    sess = gpuops.InferenceSession(z.model, device="cpu")
    spec = specialize(sess.plan, feeds, opsets=sess.opsets)
    assert not [s for s in spec.plan.steps if s.op_type in ("Shape", "Size")]
    assert len(spec.folded) >= (4 if name == "bert" else 40)
    for got, want in zip(_run(sess, spec.plan, feeds), sess.run(None, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# -- graphs per signature --------------------------------------------------------------------------

def _syncs_of(dev, fn):
    """(fn's result, the host syncs it made, its kernel launches or None where the backend cannot count
    them: CuPy)."""
    s, k = dev.host_sync_count(), dev.kernel_launch_count()
    out = fn()
    return out, dev.host_sync_count() - s, None if k is None else dev.kernel_launch_count() - k


@pytest.mark.parametrize("name", ["bert", "gpt"])
def test_dynamic_axes_transformers_capture_and_replay_without_host_syncs(name):
    # TorchScript-style exports with a symbolic batch: their Shape nodes stopped the capture at once
    z = BUILDERS[name]("batch")
    sess = gpuops.InferenceSession(z.model, device="cuda", cuda_graph=True)
    dev = sess.device
    node_by_node = gpuops.InferenceSession(z.model, device="cuda")
    for batch in (2, 3):
        feeds = z.feeds(batch, np.random.default_rng(batch))
        want = gpuops.InferenceSession(z.model, device="cpu").run(None, feeds)
        node_by_node.run(None, feeds, profile=True)
        assert node_by_node.last_profile["host_syncs"]["count"] > 0  # shape reads
        got = sess.run(None, feeds)
        assert sess.cuda_graph_status() == {"captured": True, "blocking_node": None, "reason": None}
        again, syncs, _ = _syncs_of(dev, lambda: sess.run(None, feeds, output_device="device"))
        # a replay reads nothing on the host but the deferred index checks (the embeddings': several of
        # one dtype, read at once), which a node-by-node run reads after its last node too
        assert len(sess._graphs.current.checks.pending) >= 2 and syncs == 1
        for out, w, g, a in zip(z.model.graph.output, want, got, again):
            assert_close(g, w, 1e-5, 1e-5, out.name)
            assert_close(dev.to_host(a), w, 1e-5, 1e-5, out.name)
    st = sess.cuda_graph_status(per_signature=True)
    assert [s["shapes"]["input_ids"][0] for s in st["signatures"]] == [2, 3]
    for s in st["signatures"]:
        assert s["captured"] and s["replays"] == 2 and s["folded_nodes"] >= 4
        assert not [x for x in s_steps(sess, s) if x.op_type in ("Shape", "Size")]


def s_steps(sess, record):
    key = tuple((k, tuple(record["shapes"][k]), record["dtypes"][k]) for k in sorted(record["shapes"]))
    return sess._graphs.graphs[key].plan.steps


def test_shapes_no_inference_knows_come_from_the_warm_up(monkeypatch):
    # a contrib op on too large an input to probe: the Shape after it stays in the first specialization,
    # the warm-up records the shape and the plan is specialized again before the capture
    import gpuops.onnx.specialize as sp

    sess = gpuops.InferenceSession(gelu_shape_model(), device="cuda", cuda_graph=True, optimize="none")
    cpu = gpuops.InferenceSession(gelu_shape_model(), device="cpu", optimize="none")
    x = np.random.default_rng(2).standard_normal((20000, 8)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], cpu.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    (rec,) = sess.cuda_graph_status(per_signature=True)["signatures"]
    assert rec["captured"] and rec["folded_nodes"] == 1
    # and a shape inference that is wrong: the warm-up fails or disagrees, and the run's shapes win
    real = sp._infer_onnx
    monkeypatch.setattr(sp, "_infer_onnx", lambda step, *a: [((1, 5), np.dtype(np.float32))] if step.name == "mm"
                        else real(step, *a))
    x = np.random.default_rng(3).standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], cpu.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert sess.cuda_graph_status() == {"captured": True, "blocking_node": None, "reason": None}
    np.testing.assert_array_equal(sess._graphs.current.plan.steps[-1].host_consts[1], [3, 5])


def test_two_feed_shapes_keep_two_graphs():
    sess = gpuops.InferenceSession(chain_model(n=4), device="cuda", cuda_graph=True)
    rng = np.random.default_rng(3)
    graphs = {}
    for shape in [(2, 256), (5, 256), (2, 256), (5, 256), (2, 256)]:
        x = rng.standard_normal(shape).astype(np.float32)
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(y, expected_chain(x, 4), rtol=1e-6)
        graphs.setdefault(shape, sess._graphs.current.graph)
        assert sess._graphs.current.graph is graphs[shape]  # replayed, never captured again
        assert sess._graphs.key[0][1] == shape
    st = sess.cuda_graph_status(per_signature=True)
    assert st["captures"] == 2 and st["evictions"] == 0 and st["cache_size"] == 8
    assert {tuple(s["shapes"]["x"]): s["replays"] for s in st["signatures"]} == {(2, 256): 3, (5, 256): 2}


def test_the_least_recently_used_graph_is_evicted_and_its_memory_freed():
    sess = gpuops.InferenceSession(chain_model(n=2), device="cuda", cuda_graph=True, cuda_graph_cache=2)
    run = lambda n: sess.run(None, {"x": np.ones((n, 256), np.float32)})  # noqa: E731
    run(1)
    first = sess._graphs.current
    pool = first.pool
    run(2)
    run(1)  # 1 is now the most recent: 2 goes first
    run(3)
    cached = lambda: [k[0][1][0] for k in sess._graphs.graphs]  # noqa: E731
    assert cached() == [1, 3]
    st = sess.cuda_graph_status(per_signature=True)
    assert st["evictions"] == 1 and st["captures"] == 3
    run(4)
    assert cached() == [3, 4] and first.graph is None  # 1 evicted, its pool emptied
    with sess.device.lib.cuda.Device(sess.device.index):
        assert pool.total_bytes() == 0
    np.testing.assert_allclose(run(1)[0], expected_chain(np.ones((1, 256), np.float32), 2))  # captured again
    assert cached() == [4, 1] and sess.cuda_graph_status(per_signature=True)["captures"] == 5
    with pytest.raises(gpuops.GpuopsError, match="cuda_graph_cache"):
        gpuops.InferenceSession(chain_model(n=2), device="cuda", cuda_graph=True, cuda_graph_cache=0)


def test_a_signature_that_cannot_be_captured_does_not_disable_the_others(monkeypatch):
    # Relu reads its input on the host for one batch size only: that signature's capture fails, runs
    # node by node from then on (no second capture attempt), and the other batch sizes still capture
    from gpuops.executor.cuda_graphs import CudaGraphs

    sess = gpuops.InferenceSession(chain_model(n=4), device="cuda", cuda_graph=True)
    xp = sess.device.xp
    real = xp.maximum

    def maximum(a, *args, **kwargs):
        if getattr(a, "shape", (0,))[0] == 3:
            a.get()  # an explicit device->host copy: a sync, refused inside a capture
        return real(a, *args, **kwargs)

    monkeypatch.setattr(xp, "maximum", maximum)
    attempts = []
    capture = CudaGraphs._capture
    monkeypatch.setattr(CudaGraphs, "_capture", lambda self, e, f: (attempts.append(e.key), capture(self, e, f))[1])
    for n in (2, 3, 3, 4, 3, 2):
        x = np.random.default_rng(n).standard_normal((n, 256)).astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], expected_chain(x, 4), rtol=1e-6)
        st = sess.cuda_graph_status()
        assert st["captured"] is (n != 3)
        if n == 3:
            assert st["blocking_node"] == "relu0" and "capture" in st["reason"]
            assert not sess._graphs.usable
    assert [k[0][1][0] for k in attempts] == [2, 3, 4]
    sigs = {s["shapes"]["x"][0]: s for s in sess.cuda_graph_status(per_signature=True)["signatures"]}
    assert sigs[3]["captured"] is False and sigs[3]["blocking_node"] == "relu0"
    assert sigs[2]["captured"] and sigs[2]["replays"] == 2 and sigs[4]["replays"] == 1


def test_a_graph_holds_no_more_than_its_run_needs():
    # Warm-up and capture on the graph's stream: the capture reuses every block the warm-up freed (CuPy's
    # pool keeps free blocks per stream; a warm-up on another stream would hold a second set). On a GPU
    # the capture also frees each intermediate after its last use, so the pool is the liveness minimum
    # with the feed held; the stand-in's graph keeps every array it captured alive, so there the
    # graph's buffers are all of them, and its pool must hold nothing more.
    n, width = 6, 4096
    sess = gpuops.InferenceSession(chain_model(n=n, width=width), device="cuda", cuda_graph=True, optimize="none")
    x = np.ones((4, width), np.float32)
    sess.run(None, {"x": x})
    (rec,) = sess.cuda_graph_status(per_signature=True)["signatures"]
    assert rec["captured"]
    entry = sess._graphs.current
    with sess.device.lib.cuda.Device(sess.device.index):
        used, total = entry.pool.used_bytes(), entry.pool.total_bytes()
    assert total == rec["memory_bytes"]
    if STANDIN:  # no output written over its input in the capture (the stand-in's graph refers to them all)
        assert rec["planned_peak_bytes"] == 3 * x.nbytes  # the held feed, a dying input and its output
        assert used == (n + 1) * x.nbytes  # the feed and every intermediate, kept by the stand-in's graph
        assert total <= 1.1 * used
    else:
        assert total <= 1.1 * rec["planned_peak_bytes"]


def test_threads_replaying_concurrently_get_their_own_outputs():
    sess = gpuops.InferenceSession(chain_model(n=4), device="cuda", cuda_graph=True)
    lib = sess.device.lib
    rng = np.random.default_rng(5)
    feeds = [rng.standard_normal((2 + i % 3, 256)).astype(np.float32) for i in range(12)]
    for x in feeds[:3]:
        sess.run(None, {"x": x})  # three signatures captured
    got = {}

    def worker(t):
        # half the threads on a non-blocking stream of their own, which nothing orders implicitly
        ctx = lib.cuda.Stream(non_blocking=True) if t % 2 else lib.cuda.Stream.null
        with ctx:
            for r in range(8):
                i = (t * 7 + r) % len(feeds)
                y = sess.run(None, {"x": feeds[i]}, output_device="device" if r % 2 else "cpu")[0]
                got[(t, r)] = (i, sess.device.to_host(y))

    errors = run_in_threads(worker)
    assert not errors, errors[:3]
    assert len(got) == 64
    for i, y in got.values():
        np.testing.assert_allclose(y, expected_chain(feeds[i], 4), rtol=1e-6)
    st = sess.cuda_graph_status(per_signature=True)
    assert st["captures"] == 3 and sum(s["replays"] for s in st["signatures"]) == 64 + 3


# -- decoding with a past by length buckets --------------------------------------------------------

def test_decoding_with_length_buckets_replays_one_graph_per_bucket():
    from benchmarks.decode_graphs import decode, per_token, reference, with_position_ids, zoo_gpt

    model = with_position_ids(zoo_gpt())
    prompt = np.random.default_rng(0).integers(0, 24, (2, 5)).astype(np.int64)
    steps = 8
    want, want_logits = reference(model, prompt, steps)
    graphs = decode(model, prompt, steps, cuda_graph=True)
    plain = decode(model, prompt, steps, cuda_graph=False)
    for r in (graphs, plain):
        np.testing.assert_array_equal(r["tokens"], want)
        for g, w in zip(r["logits"], want_logits):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    kinds = [s["graph"] for s in graphs["steps"]]
    # the prompt's bucket (past 4), then past 5..8 padded to 8, 9..11 to 12: three captures
    assert kinds == ["captured", "captured", "replayed", "replayed", "replayed", "captured", "replayed", "replayed"]
    replay, node = per_token(graphs["steps"], "replayed"), per_token(plain["steps"], "node by node")
    assert replay["host_syncs"] <= 1 < node["host_syncs"]  # the two embeddings' deferred index checks, in one read
    if STANDIN:  # CuPy counts no launches
        assert replay["kernel_launches"] < node["kernel_launches"] / 10
