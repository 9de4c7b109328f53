"""Native programs (gpuops/onnx/programs.py): a CPU session's third run of a signature runs its natively
bound nodes as one step, with the results the nodes give one by one."""

import ctypes
import platform
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import gpuops
from gpuops import native
from gpuops.onnx.shape_plans import ShapePlans

pytestmark = pytest.mark.skipif(native.function("program_run") is None, reason="native kernels unavailable")
F = TensorProto.FLOAT
U = float(np.finfo(np.float32).eps) / 2  # float32's unit roundoff


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, F, None) for n in outputs],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _runs(model, feeds, optimize="all"):
    """(the program session's third-run outputs, the outputs without programs, its plan's signature)."""
    prog = gpuops.InferenceSession(model, device="cpu", threads=1, optimize=optimize)
    for _ in range(3):
        got = prog.run(None, feeds)
    want = gpuops.InferenceSession(model, device="cpu", threads=1, optimize=optimize, shape_plans=0).run(None, feeds)
    (sig,) = prog.shape_plan_status()["signatures"]
    return got, want, sig


def _plan(sess, feeds):
    plan, _ = sess._shape_plans.lookup(ShapePlans.key(sess._check_feeds(feeds)))
    return plan


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def _awkward(rng, shape):
    """Normal values with NaN, infinities, signed zeros and values near the activations' kinks."""
    x = rng.standard_normal(shape).astype(np.float32) * 4
    flat = x.reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3.0, -3.0, 2.5, -2.5], np.float32)
    flat[:specials.size] = specials[:flat.size]
    return x


def test_a_cnn_runs_as_one_program_with_the_nodes_results():
    rng = np.random.default_rng(0)
    w1, b1 = rng.standard_normal((8, 3, 3, 3)), rng.standard_normal(8)
    w2, b2 = rng.standard_normal((8, 8, 3, 3)) * 0.2, rng.standard_normal(8)
    dw = rng.standard_normal((8, 1, 3, 3))
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "p1"], ["s2"]),
             helper.make_node("Relu", ["s2"], ["r2"]),
             helper.make_node("Conv", ["r2", "dw"], ["d2"], group=8, pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("AveragePool", ["d2"], ["a2"], kernel_shape=[2, 2], pads=[0, 0, 1, 1],
                              count_include_pad=1),
             helper.make_node("GlobalAveragePool", ["a2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["y"])]
    m = _model(nodes, [("x", [1, 3, 17, 17])], ["y", "r2"], [("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2),
                                                             ("dw", dw)])
    got, want, sig = _runs(m, {"x": rng.standard_normal((1, 3, 17, 17)).astype(np.float32)})
    _same(got, want)
    assert sig["programs"] == 1 and sig["program_nodes"] == sig["nodes"] == sig["base_nodes"]
    sess = gpuops.InferenceSession(m, device="cpu", threads=1)
    x = rng.standard_normal((1, 3, 17, 17)).astype(np.float32)
    for _ in range(3):
        want = sess.run(None, {"x": x})
    _same(sess.run(None, {"x": x}, profile=True), want)  # a profiled run times each node
    assert len(sess.last_profile["nodes"]) == sig["nodes"]


def test_pools_on_few_wide_planes_match_the_nodes():
    """Pools of few planes on wide maps (pool.c's separable row kernel, the phase planes where dilated)
    in a program, with NaN, infinities and signed zeros, as the nodes one by one."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["m1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["x"], ["m2"], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1],
                              ceil_mode=1),
             helper.make_node("AveragePool", ["m2"], ["a1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["a1"], ["a2"], kernel_shape=[3, 2], strides=[1, 2], pads=[1, 0, 1, 1],
                              count_include_pad=1),
             helper.make_node("MaxPool", ["m1"], ["m3"], kernel_shape=[2, 2], dilations=[2, 2]),
             helper.make_node("Add", ["m3", "m3"], ["y"])]
    m = _model(nodes, [("x", [1, 3, 23, 37])], ["y", "m1", "a2"])
    got, want, sig = _runs(m, {"x": _awkward(rng, (1, 3, 23, 37))}, optimize="basic")
    _same(got, want)
    assert sig["program_nodes"] == sig["nodes"]


@pytest.mark.parametrize("shape", [(2, 5, 508, 1), (1, 3, 7, 9), (2, 4, 13)])
def test_global_max_pools_match_the_nodes(shape):
    """GlobalMaxPool (magika's, over (508, 1) maps) in a program: each plane's largest value, a NaN in
    a plane winning, infinities and signed zeros as the node's NumPy max gives them."""
    rng = np.random.default_rng(18)
    x = _awkward(rng, shape)
    x[0, 1] = -np.inf
    x[-1, -1] = np.nan
    x[0, 0] = -0.0
    nodes = [helper.make_node("Add", ["x", "zero"], ["r"]), helper.make_node("GlobalMaxPool", ["r"], ["g"]),
             helper.make_node("Mul", ["g", "g"], ["y"])]
    m = _model(nodes, [("x", list(shape))], ["y", "g"], [("zero", np.float32(0))])
    got, want, sig = _runs(m, {"x": x}, optimize="basic")
    _same(got, want)
    np.testing.assert_array_equal(got[1], np.max(x, axis=tuple(range(2, len(shape))), keepdims=True))
    assert sig["program_nodes"] == 3


@pytest.mark.parametrize("op", ["Add", "Mul", "Max", "Sub", "Div"])
@pytest.mark.parametrize("other, swap", [((2, 5, 3, 4), False), ((5, 1, 1), False), ((1, 5, 1, 1), True),
                                         ((1,), False), ((), True)])
def test_binary_ops_broadcast_as_numpy(op, other, swap):
    rng = np.random.default_rng(1)
    c = _awkward(rng, other) if other else np.float32(rng.standard_normal())
    a, b = ("k", "r") if swap else ("r", "k")
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node(op, [a, b], ["y"]),
             helper.make_node("Relu", ["y"], ["z"])]
    m = _model(nodes, [("x", [2, 5, 3, 4])], ["z", "y"], [("k", c)], opset=13)
    got, want, sig = _runs(m, {"x": _awkward(rng, (2, 5, 3, 4))})
    _same(got, want)
    commutes = op in ("Add", "Mul", "Max")
    assert sig.get("program_nodes") == (3 if not swap or commutes or other == (2, 5, 3, 4) else None)


@pytest.mark.parametrize("op", ["Add", "Mul", "Max", "Sub", "Div"])
@pytest.mark.parametrize("other", [(2, 3, 53), (3, 1), (53,), ()])
@pytest.mark.parametrize("special", [float("nan"), -0.0, 0.0])
@pytest.mark.parametrize("swap", [False, True])
def test_binary_ops_in_vector_lanes_match_numpy_bits(op, other, special, swap):
    """Rows long enough for the kernel's vector loops, specials (NaN, signed zeros, infinities) in both
    operands at lanes past the first vector, and a special constant: the same bits as NumPy's ufunc."""
    rng = np.random.default_rng(11)
    x = _awkward(rng, (2, 3, 53))
    x.reshape(-1)[[20, 41, 70, 99]] = [np.nan, -0.0, 0.0, -np.inf]
    k = _awkward(rng, other) if other else np.float32(special)
    if other:
        k.reshape(-1)[-1] = special
    nodes = [helper.make_node("Add", ["x", "zero"], ["r"]),
             helper.make_node(op, ["k", "r"] if swap else ["r", "k"], ["y"])]
    m = _model(nodes, [("x", [2, 3, 53])], ["y"], [("k", k), ("zero", np.float32(0.0))], opset=13)
    got, want, sig = _runs(m, {"x": x})
    assert sig.get("program_nodes") == (2 if not swap or op in ("Add", "Mul", "Max") or other == (2, 3, 53) else None)
    np.testing.assert_array_equal(got[0].view(np.uint32), want[0].view(np.uint32))


@pytest.mark.parametrize("op", ["Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"])
@pytest.mark.parametrize("other", [(2, 3, 53), (3, 1), (53,), ()])
@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("dtype, constant", [(np.float32, True), (np.float32, False), (np.int32, False),
                                             (np.int64, False)])
def test_comparisons_match_numpy(op, other, swap, dtype, constant):
    """Comparisons into bools (a condition's, an If's) of values Gathers pick from a table, the other operand
    a constant (float32) or run-time value on either side (swapped as the mirrored comparison), broadcast as
    the binary ops: NaN compares false, -0 equals +0, each as NumPy's; int32 and int64 to their extremes."""
    rng = np.random.default_rng(12)
    info = np.finfo(dtype) if dtype == np.float32 else np.iinfo(dtype)
    table = np.array([info.max, info.min, 0, 1, -1, 2, -2] + ([np.nan, -0.0, np.inf] if dtype == np.float32 else []),
                     dtype)
    feeds = {"ids": rng.integers(0, table.size, (2, 3, 53)), "ids2": rng.integers(0, table.size, other)}
    nodes = [helper.make_node("Gather", ["table", "ids"], ["n"]),
             helper.make_node(op, ["k", "n"] if swap else ["n", "k"], ["y"]), helper.make_node("Not", ["y"], ["z"])]
    inits = [numpy_helper.from_array(table, "table")]
    if constant:
        inits.append(numpy_helper.from_array(table[feeds.pop("ids2")], "k"))
    else:
        nodes.insert(1, helper.make_node("Gather", ["table", "ids2"], ["k"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(k, TensorProto.INT64, v.shape)
                                           for k, v in feeds.items()],
                              [helper.make_tensor_value_info(n, TensorProto.BOOL, None) for n in ("y", "z")], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13 if op in ("Equal", "Greater", "Less") else 16)])
    got, want, sig = _runs(m, feeds, optimize="basic")
    _same(got, want)
    compare = {"Equal": np.equal, "Greater": np.greater, "GreaterOrEqual": np.greater_equal, "Less": np.less,
               "LessOrEqual": np.less_equal}[op]
    n, k = table[feeds["ids"]], numpy_helper.to_array(inits[1]) if constant else table[feeds["ids2"]]
    np.testing.assert_array_equal(got[0], compare(*((k, n) if swap else (n, k))))
    assert sig["program_nodes"] == len(nodes) - 1  # all but the Not


@pytest.mark.parametrize("op, attrs", [("Relu", {}), ("Sigmoid", {}), ("HardSwish", {}),
                                       ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4})])
def test_activations_match_the_ops_to_the_bit(op, attrs):
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Add", ["x", "x"], ["d"]), helper.make_node(op, ["d"], ["y"], **attrs),
             helper.make_node("Mul", ["y", "x"], ["z"])]
    got, want, sig = _runs(_model(nodes, [("x", [3, 7, 5])], ["z", "y"]), {"x": _awkward(rng, (3, 7, 5))},
                           optimize="basic")
    _same(got, want)
    assert sig["program_nodes"] == 3


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_concat_copies_each_input_into_place(axis):
    rng = np.random.default_rng(3)
    shapes = {0: [(2, 3, 4), (1, 3, 4), (0, 3, 4)], 1: [(2, 3, 4), (2, 1, 4), (2, 0, 4)],
              2: [(2, 3, 4), (2, 3, 2), (2, 3, 0)], -1: [(2, 3, 1), (2, 3, 5), (2, 3, 1)]}[axis]
    names = ["a", "b", "c"]
    nodes = [helper.make_node("Relu", [n], [n + "r"]) for n in names] + [
        helper.make_node("Concat", [n + "r" for n in names], ["y"], axis=axis), helper.make_node("Relu", ["y"], ["z"])]
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)}
    got, want, sig = _runs(_model(nodes, [(n, list(s)) for n, s in zip(names, shapes)], ["z"]), feeds,
                           optimize="basic")
    _same(got, want)
    assert sig["program_nodes"] == 5


def test_concat_inputs_of_one_row_are_made_in_place():
    """A one-row Concat's inputs are made in its output, without copies, a DenseNet-like chain of Concats
    in one buffer; an input that is returned, a Concat that is, and a second piece of one value are copied.
    Every value still reads as the nodes make it."""
    rng = np.random.default_rng(31)
    nodes = [helper.make_node("Relu", ["x"], ["r0"]),
             helper.make_node("Mul", ["r0", "k"], ["a1"]),
             helper.make_node("Concat", ["r0", "a1"], ["c1"], axis=1),
             helper.make_node("Mul", ["c1", "k"], ["a2"]),
             helper.make_node("Concat", ["c1", "a2"], ["c2"], axis=1),
             helper.make_node("Sigmoid", ["c2"], ["a3"]),  # returned: an array of its own
             helper.make_node("Concat", ["c2", "a3"], ["c3"], axis=1),
             helper.make_node("Concat", ["a1", "a2"], ["d"], axis=1),  # returned, its pieces already placed
             helper.make_node("Add", ["r0", "k"], ["a4"]),
             helper.make_node("Concat", ["a4", "a4"], ["e"], axis=1),
             helper.make_node("Add", ["c3", "c3"], ["y"]),
             helper.make_node("Add", ["e", "c1"], ["z"])]
    m = _model(nodes, [("x", [1, 2, 3, 3])], ["y", "z", "a3", "d", "a2"], [("k", np.float32(0.5))])
    feeds = {"x": _awkward(rng, (1, 2, 3, 3))}
    got, want, sig = _runs(m, feeds, optimize="basic")
    _same(got, want)
    assert sig["program_nodes"] == len(nodes)
    sess = gpuops.InferenceSession(m, device="cpu", threads=1, optimize="basic")
    for _ in range(3):
        sess.run(None, feeds)
    (prog,) = [s.impl.fn for s in _plan(sess, feeds).steps]
    copy = native.function("copy_rows_planned")
    copies = sum(1 for f in prog.table[:, 0] if f == ctypes.cast(copy, ctypes.c_void_p).value)
    assert copies == 5  # a2 into c2 and a3 into c3 (returned), d's two (returned), e's second a4
    _same(sess.run(None, feeds), want)


def test_reshapes_alias_and_values_read_after_the_program_escape():
    """A reshape's output shares its input's buffer; one that is a graph output, or read by a node after
    the program (Transpose, unbound), comes back as an array of its own shape: of an input too."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["x2"]),  # an input's alias, a graph output
             helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"], axis=2),
             helper.make_node("Unsqueeze", ["f", "ax"], ["u"]),
             helper.make_node("Squeeze", ["u", "ax"], ["q"]),
             helper.make_node("Identity", ["q"], ["i"]),
             helper.make_node("Mul", ["i", "i"], ["m"]),
             helper.make_node("Add", ["m", "f"], ["s"]),
             helper.make_node("Transpose", ["f"], ["t"], perm=[1, 0]),  # reads an alias after the program
             helper.make_node("Reshape", ["s", "s2"], ["y"])]
    m = _model(nodes, [("x", [2, 3, 4, 5])], ["y", "t", "x2", "u"],
               [("s1", np.array([6, 20])), ("s2", np.array([-1])), ("ax", np.array([0]))])
    for t in m.graph.initializer:
        if t.name in ("s1", "s2", "ax"):
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.int64), t.name))
    got, want, sig = _runs(m, {"x": rng.standard_normal((2, 3, 4, 5)).astype(np.float32)}, optimize="basic")
    _same(got, want)
    assert sig["programs"] == 1


def test_a_long_chain_reuses_the_arena_without_overwriting_live_values():
    rng = np.random.default_rng(5)
    nodes, prev, keep = [], "x", []
    for i in range(12):
        nodes.append(helper.make_node("Mul", [prev, "k"], [f"m{i}"]))
        other = keep[i // 2] if keep else "x"
        nodes.append(helper.make_node("Add", [f"m{i}", other], [f"a{i}"]))
        keep.append(f"a{i}")
        prev = f"a{i}"
    nodes.append(helper.make_node("Concat", [keep[0], keep[5], keep[-1]], ["y"], axis=1))
    m = _model(nodes, [("x", [1, 4, 6, 6])], ["y"], [("k", np.float32(0.75))])
    got, want, sig = _runs(m, {"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32)}, optimize="basic")
    _same(got, want)
    assert sig["program_nodes"] == len(nodes)


def test_gemm_of_one_row_is_within_the_float32_bound_of_the_product():
    """The native GEMM sums in another order than BLAS: each output within gamma_K (sum |a_i b_i| + |c|)."""
    rng = np.random.default_rng(6)
    K, N = 300, 37
    for trans in (0, 1):
        B = rng.standard_normal((N, K) if trans else (K, N)).astype(np.float32)
        C = rng.standard_normal(N).astype(np.float32)
        nodes = [helper.make_node("Relu", ["x"], ["r"]),
                 helper.make_node("Gemm", ["r", "B", "C"], ["g"], transB=trans),
                 helper.make_node("Relu", ["g"], ["y"])]
        x = rng.standard_normal((1, K)).astype(np.float32)
        got, _, sig = _runs(_model(nodes, [("x", [1, K])], ["g", "y"], [("B", B), ("C", C)]), {"x": x},
                            optimize="basic")
        assert sig["program_nodes"] == 3
        r = np.maximum(x, 0).astype(np.float64)
        W = (B.T if trans else B).astype(np.float64)
        exact = r @ W + C
        gamma = (K + 1) * U / (1 - (K + 1) * U)
        assert np.all(np.abs(got[0] - exact) <= gamma * (np.abs(r) @ np.abs(W) + np.abs(C)))


def test_other_shapes_than_planned_run_the_nodes_one_by_one():
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])]
    m = _model(nodes, [("x", ["n", 3])], ["y"])
    sess = gpuops.InferenceSession(m, device="cpu", threads=1, optimize="basic")
    x = rng.standard_normal((4, 3)).astype(np.float32)
    for _ in range(3):
        sess.run(None, {"x": x})
    (step,) = [s for s in _plan(sess, {"x": x}).steps if s.op_type == "NativeProgram"]
    program = step.impl.fn
    other = rng.standard_normal((2, 3)).astype(np.float32)
    (y,) = program(np, other)
    np.testing.assert_array_equal(y, np.maximum(other, 0) + other)
    (y,) = program(np, np.asfortranarray(rng.standard_normal((4, 3)).astype(np.float32)))  # copied to C order
    assert y.shape == (4, 3)


def test_concurrent_runs_of_one_program_agree():
    rng = np.random.default_rng(8)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"]),
             helper.make_node("Add", ["y", "c"], ["z"])]
    m = _model(nodes, [("x", [1, 4, 9, 9])], ["z"], [("w", w)])
    sess = gpuops.InferenceSession(m, device="cpu", threads=1)
    xs = [rng.standard_normal((1, 4, 9, 9)).astype(np.float32) for _ in range(4)]
    want = [gpuops.InferenceSession(m, device="cpu", threads=1, shape_plans=0).run(None, {"x": x})[0] for x in xs]
    for _ in range(3):
        sess.run(None, {"x": xs[0]})
    bad = []

    def work(k):
        for i in range(50):
            x = xs[(i + k) % 4]
            if not np.array_equal(sess.run(None, {"x": x})[0], want[(i + k) % 4]):
                bad.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad and sess.shape_plan_status()["signatures"][0]["programs"] == 1


@pytest.mark.parametrize("kept", [True, False])
def test_calls_keep_their_scratch_and_return_fresh_outputs(monkeypatch, kept):
    """A program keeps its addresses table (and an arena up to KEPT_ARENA_BYTES) for its next call; each
    call's outputs are arrays of their own, and a wide arena is made for each call and not kept."""
    from gpuops.onnx import programs
    if not kept:
        monkeypatch.setattr(programs, "KEPT_ARENA_BYTES", 0)
    rng = np.random.default_rng(9)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "x"], ["m"]),
             helper.make_node("Add", ["m", "x"], ["y"])]
    m = _model(nodes, [("x", [4, 3])], ["y"])
    sess = gpuops.InferenceSession(m, device="cpu", threads=1, optimize="basic")
    xs = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(3)]
    for _ in range(3):
        sess.run(None, {"x": xs[0]})
    (step,) = [s for s in _plan(sess, {"x": xs[0]}).steps if s.op_type == "NativeProgram"]
    program = step.impl.fn
    assert program.arena_bytes > 0
    ys = [sess.run(None, {"x": x})[0] for x in xs]
    for x, y in zip(xs, ys):
        np.testing.assert_array_equal(y, np.maximum(x, 0) * x + x)
    assert len({y.ctypes.data for y in ys}) == 3
    assert len(program.scratch) == 1
    ((ext, _, arena, _),) = program.scratch
    assert (arena is not None) == kept and list(ext[program.n_in + program.n_out:]) == list(program.ext[program.n_in + program.n_out:])


def test_no_program_without_native_kernels():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])]
    m = _model(nodes, [("x", [2, 3])], ["y"])
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    with native.disabled():
        sess = gpuops.InferenceSession(m, device="cpu", threads=1)
        for _ in range(3):
            (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0) + x)
    (sig,) = sess.shape_plan_status()["signatures"]
    assert not sig["specialized"] and "programs" not in sig


def _i64(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


@pytest.mark.parametrize("case", ["transpose", "slice", "slice_back", "resize_asym", "resize_half", "expand",
                                  "tile", "depth_to_space", "space_to_depth", "gather"])
def test_data_movement_is_bound_by_its_index_map(case):
    rng = np.random.default_rng(9)
    shape = [2, 4, 6, 6]
    consts, attrs, inputs = [], {}, ["r"]
    op = {"transpose": "Transpose", "slice": "Slice", "slice_back": "Slice", "resize_asym": "Resize",
          "resize_half": "Resize", "expand": "Expand", "tile": "Tile", "depth_to_space": "DepthToSpace",
          "space_to_depth": "SpaceToDepth", "gather": "Gather"}[case]
    if case == "transpose":
        attrs = {"perm": [0, 2, 3, 1]}
    elif case.startswith("slice"):
        back = case == "slice_back"
        consts = [_i64("st", [5, -1] if back else [1, 0]), _i64("en", [0, -7] if back else [4, 6]),
                  _i64("ax", [3, 1] if back else [1, 2]), _i64("sp", [-2, -1] if back else [2, 1])]
        inputs += ["st", "en", "ax", "sp"]
    elif case.startswith("resize"):
        consts = [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc")]
        inputs += ["", "sc"]
        attrs = {"mode": "nearest", "coordinate_transformation_mode":
                 "asymmetric" if case == "resize_asym" else "half_pixel"}
    elif case == "expand":
        shape = [2, 4, 1, 6]
        consts, inputs = [_i64("sh", [3, 2, 4, 5, 6])], ["r", "sh"]
    elif case == "tile":
        consts, inputs = [_i64("rp", [1, 2, 1, 3])], ["r", "rp"]
    elif case in ("depth_to_space", "space_to_depth"):
        attrs = {"blocksize": 2}
    else:
        consts, inputs, attrs = [_i64("ix", [[3, 0], [1, 3]])], ["r", "ix"], {"axis": 1}
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node(op, inputs, ["m"], **attrs),
             helper.make_node("Add", ["m", "m"], ["y"])]
    m = _model(nodes, [("x", shape)], ["y"], opset=18)
    m.graph.initializer.extend(consts)
    got, want, sig = _runs(m, {"x": _awkward(rng, shape)}, optimize="basic")
    _same(got, want)
    assert sig["program_nodes"] == 3


def _bound(got, exact, terms, K):
    """|got - exact| <= gamma_K * terms elementwise (Higham's bound for sums of K products, any order)."""
    gamma = K * U / (1 - K * U)
    assert np.all(np.abs(got.astype(np.float64) - exact) <= gamma * terms + 1e-30)


def test_matmul_and_gemm_by_the_blas_within_their_bounds():
    rng = np.random.default_rng(10)
    W = rng.standard_normal((24, 40)).astype(np.float32)
    G = rng.standard_normal((16, 24)).astype(np.float32)
    C = rng.standard_normal(16).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("MatMul", ["r", "W"], ["m"]),  # (2, 3, 24) @ (24, 40)
             helper.make_node("Transpose", ["m"], ["t"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["t", "q"], ["p"]),  # a run-time B: (2, 40, 3) @ (3, 5)
             helper.make_node("Reshape", ["r", "s"], ["r2"]),
             helper.make_node("Gemm", ["r2", "G", "C"], ["g"], transB=1)]  # (6, 24) x (16, 24)^T + C
    m = _model(nodes, [("x", [2, 3, 24]), ("q", [3, 5])], ["p", "g"], [("W", W), ("G", G), ("C", C)])
    m.graph.initializer.append(_i64("s", [6, 24]))
    x = rng.standard_normal((2, 3, 24)).astype(np.float32)
    q = rng.standard_normal((3, 5)).astype(np.float32)
    got, _, sig = _runs(m, {"x": x, "q": q}, optimize="basic")
    assert sig["program_nodes"] == 6
    r = np.maximum(x, 0).astype(np.float64)
    mm = r @ W
    exact_p = mm.transpose(0, 2, 1) @ q
    # p's inputs carry m's rounding: bound by the terms of both products
    terms_m = np.abs(r) @ np.abs(W)
    _bound(got[0], exact_p, (terms_m.transpose(0, 2, 1) @ np.abs(q)) * 2 + np.abs(mm.transpose(0, 2, 1)) @ np.abs(q),
           24 + 3)
    r2 = r.reshape(6, 24)
    _bound(got[1], r2 @ G.T + C, np.abs(r2) @ np.abs(G.T) + np.abs(C), 25)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_products_of_constant_weights_run_by_the_native_gemm_within_their_bounds(threads):
    """MatMul and Gemm by constant weights, from FC_MIN_WORK multiply-adds (and one row at any size), run
    by the native GEMM on the weight packed once (linalg._fc): rows of a 3-D MatMul, a Gemm with transB
    and a bias, K past the kernel's blocks of 512 (partial sums), outputs not a multiple of a panel, one
    row, a weight shared by two nodes; no BLAS call in the program, each result within the float32 bound."""
    from gpuops.ops.cpu import linalg

    rng = np.random.default_rng(14)
    W = rng.standard_normal((1100, 333)).astype(np.float32)  # K 1100
    G = rng.standard_normal((77, 333)).astype(np.float32)
    C = rng.standard_normal(77).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("MatMul", ["r", "W"], ["m"]),  # (3, 9, 1100) @ (1100, 333)
             helper.make_node("Reshape", ["m", "s"], ["m2"]),
             helper.make_node("Gemm", ["m2", "G", "C"], ["g"], transB=1),  # (27, 333) x (77, 333)^T + C
             helper.make_node("Slice", ["m2", "z", "one", "z"], ["first"]),
             helper.make_node("Gemm", ["first", "G", "C"], ["g1"], transB=1),  # one row
             helper.make_node("Relu", ["g"], ["y"])]
    m = _model(nodes, [("x", [3, 9, 1100])], ["y", "g1", "m"], [("W", W), ("G", G), ("C", C)])
    m.graph.initializer.extend([_i64("s", [27, 333]), _i64("z", [0]), _i64("one", [1])])
    x = rng.standard_normal((3, 9, 1100)).astype(np.float32)
    assert 27 * 333 * 77 < linalg.FC_MIN_WORK <= 27 * 1100 * 333
    sess = gpuops.InferenceSession(m, device="cpu", threads=threads, optimize="basic")
    for _ in range(3):
        y, g1, mm = sess.run(None, {"x": x})
    (prog,) = [s.impl.fn for s in _plan(sess, {"x": x}).steps]
    assert prog.blas  # the small Gemm's product stays with the BLAS
    r = np.maximum(x, 0).astype(np.float64)
    exact_m = r @ W
    terms_m = np.abs(r) @ np.abs(W)
    _bound(mm, exact_m, terms_m, 1100)
    m2, t2 = exact_m.reshape(27, 333), terms_m.reshape(27, 333)
    terms_g = (t2 * 2 + np.abs(m2)) @ np.abs(G.T) + np.abs(C)  # g's inputs carry m's rounding
    _bound(y, np.maximum(m2 @ G.T + C, 0), terms_g, 1100 + 334)
    _bound(g1, m2[:1] @ G.T + C, terms_g[:1], 1100 + 334)
    alone = _model(nodes[:2], [("x", [3, 9, 1100])], ["m"], [("W", W)])
    sess = gpuops.InferenceSession(alone, device="cpu", threads=threads, optimize="basic")
    for _ in range(3):
        (got,) = sess.run(None, {"x": x})
    (prog,) = [s.impl.fn for s in _plan(sess, {"x": x}).steps]
    assert not prog.blas  # the large product: the native GEMM
    np.testing.assert_array_equal(got, mm)


@pytest.mark.parametrize("threads", [2, 3])
def test_products_split_across_the_pool_with_the_blas_on_one_thread(threads):
    """At more than one thread a program whose run calls the BLAS nowhere else holds it at one thread and
    splits its products across the native pool: by rows (more rows than columns), by columns (a long
    product of few rows, and one row), each within the float32 bound; with a conv outside the programs
    (its weight a feed: no plan), the BLAS keeps its threads and the products are whole. The BLAS's count
    is the session's again after each run. (The weights are feeds: constant ones run by the native GEMM.)"""
    from gpuops import threads as _threads

    rng = np.random.default_rng(11)
    A, B = rng.standard_normal((300, 96)).astype(np.float32), rng.standard_normal((96, 6000)).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("MatMul", ["r", "A"], ["rows"]),  # (400, 300) @ (300, 96): by rows
             helper.make_node("MatMul", ["rows", "B"], ["cols"]),  # (400, 96) @ (96, 6000): by columns
             helper.make_node("Slice", ["rows", "z", "four", "z"], ["few"]),
             helper.make_node("MatMul", ["few", "B"], ["wide"]),  # (4, 96) @ (96, 6000): by columns
             helper.make_node("Slice", ["rows", "z", "one", "z"], ["first"]),
             helper.make_node("MatMul", ["first", "B"], ["row"])]  # one row: sgemv by columns
    m = _model(nodes, [("x", [400, 300]), ("A", [300, 96]), ("B", [96, 6000])], ["cols", "wide", "row"])
    m.graph.initializer.extend([_i64("z", [0]), _i64("four", [4]), _i64("one", [1])])
    x = rng.standard_normal((400, 300)).astype(np.float32)
    before = [lib[0]() for lib in _threads._handles]
    sess = gpuops.InferenceSession(m, device="cpu", threads=threads, optimize="basic")
    for _ in range(3):
        got = sess.run(None, {"x": x, "A": A, "B": B})
    (prog,) = [s.impl.fn for s in _plan(sess, {"x": x, "A": A, "B": B}).steps]
    assert prog.blas and prog.blas_single
    assert [lib[0]() for lib in _threads._handles] == before
    r = np.maximum(x, 0).astype(np.float64)
    rows = r @ A
    terms = np.abs(r) @ np.abs(A)
    _bound(got[0], rows @ B, (terms * 2 + np.abs(rows)) @ np.abs(B), 300 + 96)
    _bound(got[1], rows[:4] @ B, (terms[:4] * 2 + np.abs(rows[:4])) @ np.abs(B), 300 + 96)
    _bound(got[2], rows[:1] @ B, (terms[:1] * 2 + np.abs(rows[:1])) @ np.abs(B), 300 + 96)
    conv = [helper.make_node("Conv", ["img", "w"], ["c"])] + nodes
    m2 = _model(conv, [("x", [400, 300]), ("A", [300, 96]), ("B", [96, 6000]), ("img", [1, 2, 5, 5]),
                       ("w", [3, 2, 3, 3])], ["cols", "c"])
    m2.graph.initializer.extend([_i64("z", [0]), _i64("four", [4]), _i64("one", [1])])
    feeds = {"x": x, "A": A, "B": B, "img": rng.standard_normal((1, 2, 5, 5)).astype(np.float32),
             "w": rng.standard_normal((3, 2, 3, 3)).astype(np.float32)}
    sess2 = gpuops.InferenceSession(m2, device="cpu", threads=threads, optimize="basic")
    for _ in range(3):
        got2 = sess2.run(None, feeds)
    progs = [s.impl.fn for s in _plan(sess2, feeds).steps if s.op_type == "NativeProgram"]
    assert progs and all(p.blas and not p.blas_single for p in progs)
    np.testing.assert_allclose(got2[0], got[0], rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("threads", [1, 2])
def test_an_lstm_whose_steps_run_in_c_lets_the_programs_hold_the_blas(threads):
    """A bidirectional LSTM (its steps in C, its input projection by the pool-split product) between two
    programs: nothing calls NumPy's BLAS, so the program with the classifier's product holds the BLAS
    at one thread; with sequence_lens the LSTM runs NumPy's loop, and the products stay whole. The
    outputs are those of the session without programs."""
    rng = np.random.default_rng(12)
    I, H, T = 128, 512, 20  # the projection's products of 1.3M multiply-adds: on the pool (rnn.PRODUCT_WORK)
    f = lambda *shape, s=1.0: (rng.standard_normal(shape) * s).astype(np.float32)  # noqa: E731
    W, R, B, G = f(2, 4 * H, I, s=I ** -0.5), f(2, 4 * H, H, s=H ** -0.5), f(2, 8 * H), f(2 * H, 30)
    shape = helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([T, 2 * H])))
    for lens in (False, True):
        nodes = [helper.make_node("Relu", ["x"], ["r"]),
                 helper.make_node("LSTM", ["r", "W", "R", "B", "lens" if lens else ""], ["y"], hidden_size=H,
                                  direction="bidirectional"),
                 helper.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 1, 3]), shape,
                 helper.make_node("Reshape", ["yt", "shape"], ["flat"]),
                 helper.make_node("MatMul", ["flat", "G"], ["logits"]),
                 helper.make_node("Relu", ["logits"], ["out"])]
        m = _model(nodes, [("x", [T, 1, I])], ["out"], [("W", W), ("R", R), ("B", B), ("G", G)])
        if lens:
            m.graph.initializer.append(numpy_helper.from_array(np.array([T], np.int32), "lens"))
        x = f(T, 1, I)
        sess = gpuops.InferenceSession(m, device="cpu", threads=threads)
        for _ in range(3):
            got = sess.run(None, {"x": x})
        want = gpuops.InferenceSession(m, device="cpu", threads=threads, shape_plans=0).run(None, {"x": x})
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
        progs = [s.impl.fn for s in _plan(sess, {"x": x}).steps if s.op_type == "NativeProgram"]
        assert any(p.blas for p in progs) and all(p.blas_single is (p.blas and not lens) for p in progs)


def test_normalizations_and_gelus_run_the_ops_kernels():
    rng = np.random.default_rng(11)
    H = 16
    g, b, bias = (rng.standard_normal(H).astype(np.float32) for _ in range(3))
    pos = rng.standard_normal((5, H)).astype(np.float32)
    ms = "com.microsoft"
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"], epsilon=1e-5),
             helper.make_node("SkipLayerNormalization", ["n", "x", "g", "b", "bias"], ["s", "", "", "sum"],
                              domain=ms),
             helper.make_node("SkipLayerNormalization", ["s", "pos", "g", "b"], ["s2"], domain=ms),
             helper.make_node("BiasGelu", ["s2", "bias"], ["bg"], domain=ms),
             helper.make_node("FastGelu", ["bg", "bias"], ["fg"], domain=ms),
             helper.make_node("Gelu", ["fg"], ["ge"], domain=ms),
             helper.make_node("QuickGelu", ["ge"], ["qg"], domain=ms, alpha=1.5),
             helper.make_node("Gelu", ["qg"], ["y"], approximate="tanh")]
    m = _model(nodes, [("x", [2, 5, H])], ["y", "sum"], [("g", g), ("b", b), ("bias", bias), ("pos", pos)], opset=20)
    m.opset_import.append(helper.make_opsetid(ms, 1))
    got, want, sig = _runs(m, {"x": _awkward(rng, (2, 5, H))}, optimize="basic")
    _same(got, want)
    assert sig["program_nodes"] == len(nodes)


@pytest.mark.parametrize("mask", [None, "ranges", "keys", "queries", "past"])
def test_attention_runs_as_the_op(mask):
    rng = np.random.default_rng(12)
    Bn, S, D, N = 2, 4, 8, 2
    P = 3 if mask == "past" else 0
    W = (rng.standard_normal((D, 3 * D)) * 0.5).astype(np.float32)
    bias = rng.standard_normal(3 * D).astype(np.float32)
    inputs = ["r", "W", "bias"]
    feeds = {"x": rng.standard_normal((Bn, S, D)).astype(np.float32)}
    shapes = [("x", [Bn, S, D])]
    if mask in ("ranges", "keys", "queries"):
        m_shape = {"ranges": (Bn,), "keys": (Bn, S), "queries": (Bn, S, S)}[mask]
        feeds["mask"] = rng.integers(0, 2 if mask != "ranges" else S + 1, m_shape).astype(np.int64)
        shapes.append(("mask", list(m_shape)))
        inputs.append("mask32")
    if mask == "past":
        feeds["past"] = rng.standard_normal((2, Bn, N, P, D // N)).astype(np.float32)
        shapes.append(("past", [2, Bn, N, P, D // N]))
        inputs += ["", "past"]
    outputs = ["a", "present"] if mask == "past" else ["a"]
    nodes = [helper.make_node("Relu", ["x"], ["r"])]
    if "mask" in feeds:
        nodes.append(helper.make_node("Cast", ["mask"], ["mask32"], to=TensorProto.INT32))
    nodes += [helper.make_node("Attention", inputs, outputs, domain="com.microsoft", num_heads=N,
                               unidirectional=int(mask == "past")),
              helper.make_node("Add", ["a", "r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.INT64 if n == "mask" else F, s)
                                           for n, s in shapes],
                              [helper.make_tensor_value_info(n, F, None) for n in ["y"] + outputs[1:]],
                              [numpy_helper.from_array(W, "W"), numpy_helper.from_array(bias, "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    got, want, sig = _runs(model, feeds, optimize="basic")
    assert sig["program_nodes"] == len(nodes)
    for g, w in zip(got, want):  # the projection by the BLAS's sgemm, the op's by its own loops or NumPy's: sums
        # of D products in other orders (gamma_D of their terms), carried through the scores and the softmax
        np.testing.assert_allclose(g, w, rtol=8 * D * U, atol=8 * D * U * float(np.abs(w).max()))


@pytest.mark.parametrize("mask", [None, "ranges", "keys", "queries"])
@pytest.mark.parametrize("zero_point", [True, False])
def test_quantized_attention_runs_as_the_op(mask, zero_point):
    """QAttention after DynamicQuantizeLinear (quantize_dynamic's BERT layers): its 8-bit projection and the
    attention kernel in one call, the mask as Attention's binding takes it; the bits of the nodes run one by
    one (the same kernels)."""
    rng = np.random.default_rng(23)
    Bn, S, D, N = 2, 5, 8, 2
    I32, ms = TensorProto.INT32, "com.microsoft"
    inits = [numpy_helper.from_array(rng.integers(-128, 128, (D, 3 * D)).astype(np.int8), "W"),
             numpy_helper.from_array((rng.standard_normal(3 * D) * 0.1).astype(np.float32), "bias"),
             numpy_helper.from_array(np.array(0.02, np.float32), "ws"),
             numpy_helper.from_array(np.array(0, np.int8), "wz")]
    feeds = {"x": rng.standard_normal((Bn, S, D)).astype(np.float32)}
    shapes = [("x", TensorProto.FLOAT, [Bn, S, D])]
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("DynamicQuantizeLinear", ["r"], ["q", "qs", "qz"])]
    inputs = ["q", "W", "bias", "qs", "ws", "", "qz" if zero_point else "", "wz"]
    if mask:
        m_shape = {"ranges": (Bn,), "keys": (Bn, S), "queries": (Bn, S, S)}[mask]
        feeds["mask"] = rng.integers(0, 2 if mask != "ranges" else S + 1, m_shape).astype(np.int64)
        shapes.append(("mask", TensorProto.INT64, list(m_shape)))
        nodes.append(helper.make_node("Cast", ["mask"], ["mask32"], to=I32))
        inputs[5] = "mask32"
    nodes += [helper.make_node("QAttention", inputs, ["a"], domain=ms, num_heads=N),
              helper.make_node("Add", ["a", "r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in shapes],
                              [helper.make_tensor_value_info("y", F, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ms, 1)])
    got, want, sig = _runs(model, feeds, optimize="basic")
    assert sig["programs"] == 1 and sig["program_nodes"] == len(nodes)
    _same(got, want)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("batch, states, bias, outputs", [(1, True, True, 3), (3, False, False, 1),
                                                          (2, True, False, 2), (3, False, True, 3)])
def test_lstms_run_in_the_program(direction, batch, states, bias, outputs):
    """A small LSTM of constant weights (silero-vad's) in the program: its projection by the program kernel's
    own loops, then the op's steps in C; Y in time order (a backward direction flipped), Y_h each direction's
    last step, Y_c its state. Within the float32 rounding of the projection's sums carried through T steps."""
    rng = np.random.default_rng(24)
    T, n, H = 5, 6, 8
    D = 2 if direction == "bidirectional" else 1
    W = (rng.standard_normal((D, 4 * H, n)) / np.sqrt(n)).astype(np.float32)
    R = (rng.standard_normal((D, 4 * H, H)) / np.sqrt(H)).astype(np.float32)
    inits = [("W", W), ("R", R)] + ([("B", rng.standard_normal((D, 8 * H)) * 0.3)] if bias else [])
    names = ["Y", "Y_h", "Y_c"][:outputs]
    inputs = ["r", "W", "R", "B" if bias else ""] + (["", "h0", "c0"] if states else [])
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("LSTM", inputs, names, hidden_size=H, direction=direction),
             helper.make_node("Add", ["Y", "Y"], ["y2"])]
    shapes = [("x", [T, batch, n])] + ([("h0", [D, batch, H]), ("c0", [D, batch, H])] if states else [])
    m = _model(nodes, shapes, ["y2"] + names[1:], inits, opset=14)
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes}
    got, want, sig = _runs(m, feeds, optimize="basic")
    assert sig["programs"] == 1 and sig["program_nodes"] == len(nodes)
    mag = float(np.abs(feeds["x"]).max()) * np.abs(W).sum(axis=2).max() + np.abs(R).sum(axis=2).max() + (
        float(np.abs(np.asarray(inits[2][1])).max()) * 2 if bias else 0.0)
    tol = 4 * T * (n + H + 2) * U * mag
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=0, atol=tol)


def test_embedding_lookups_and_integer_casts():
    rng = np.random.default_rng(13)
    table = rng.standard_normal((7, 3)).astype(np.float32)
    table8 = rng.integers(0, 256, (7, 3)).astype(np.uint8)  # a quantized embedding's rows, bytes
    nodes = [helper.make_node("Gather", ["table8", "ids"], ["q"]),
             helper.make_node("Cast", ["q"], ["qf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["ids"], ["i32"], to=TensorProto.INT32),
             helper.make_node("Gather", ["table", "i32"], ["e32"]),
             helper.make_node("Gather", ["table", "ids"], ["e64"]),
             helper.make_node("Cast", ["ids"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["i32"], ["f2"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["f", "f2"], ["s"]),
             helper.make_node("Add", ["e32", "e64"], ["e"]),
             helper.make_node("Add", ["e", "qf"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 5])],
                              [helper.make_tensor_value_info(n, F, None) for n in ("y", "s")],
                              [numpy_helper.from_array(table, "table"), numpy_helper.from_array(table8, "table8")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ids = np.array([[0, 6, -1, -7, 3], [2, 2, 5, 1, 4]], np.int64)
    got, want, sig = _runs(m, {"ids": ids}, optimize="basic")
    _same(got, want)
    assert sig["program_nodes"] == len(nodes)
    sess = gpuops.InferenceSession(m, device="cpu", threads=1, optimize="basic")
    for _ in range(3):
        sess.run(None, {"ids": ids})
    with pytest.raises(gpuops.GpuopsError, match="Gather"):  # the node's own error, from a rerun of the nodes
        sess.run(None, {"ids": np.where(ids == 5, 7, ids)})


@pytest.mark.parametrize("itype", [TensorProto.INT32, TensorProto.INT64])
def test_a_one_hot_times_a_table_copies_its_rows_in_the_program(itype):
    """OneHotMatMul (jax's one_hot into a dense layer, gpuops.optimizer.one_hot_matmul) as gather_rows_planned's
    one-hot calls: the table's rows, zeros for bytes below 0 or past the classes, as the op gives them."""
    rng = np.random.default_rng(14)
    D, E = 9, 4
    dtype = helper.tensor_dtype_to_np_dtype(itype)
    nodes = [helper.make_node("Unsqueeze", ["A", "axis"], ["a"]), helper.make_node("Equal", ["a", "R"], ["hot"]),
             helper.make_node("Cast", ["hot"], ["onehot"], to=F), helper.make_node("MatMul", ["onehot", "W"], ["m"]),
             helper.make_node("Add", ["m", "B"], ["y"]), helper.make_node("Relu", ["y"], ["Y"])]
    inits = [numpy_helper.from_array(np.arange(D, dtype=dtype)[None, None], "R"),
             numpy_helper.from_array(np.array([-1], np.int64), "axis"),
             numpy_helper.from_array(rng.standard_normal((D, E)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal(E).astype(np.float32), "B")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("A", itype, [2, 6])],
                              [helper.make_tensor_value_info("Y", F, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    A = np.array([[0, 8, -1, 9, 3, 3], [np.iinfo(dtype).min, np.iinfo(dtype).max, 5, 1, 2, 0]], dtype)
    got, want, sig = _runs(m, {"A": A})
    _same(got, want)
    assert sig["program_nodes"] == sig["nodes"]
    assert "OneHotMatMul" in {n.op_type for n in gpuops.optimizer.optimize(m, device="cpu").graph.node}
    plain = gpuops.InferenceSession(m, device="cpu", optimize="none").run(None, {"A": A})
    np.testing.assert_array_equal(got[0], plain[0])


@pytest.mark.parametrize("signed, with_bias", [(True, True), (False, False)])
def test_dynamically_quantized_products_run_in_the_program(signed, with_bias):
    """DynamicQuantizeMatMul (quantize_dynamic's MatMuls) in a program: its quantizer and product in one
    call, the bits of the op's own kernels; a NaN in A reruns the nodes, the op's generic code."""
    rng = np.random.default_rng(15)
    K, N = 24, 20
    ms = "com.microsoft"
    dtype = np.int8 if signed else np.uint8
    inits = [("B1", rng.integers(-60, 60, (K, N)).astype(np.int8).astype(dtype) if signed
              else rng.integers(0, 255, (K, N)).astype(np.uint8)), ("s1", np.float32(0.01)),
             ("z1", np.array(0 if signed else 128, dtype)), ("b1", rng.standard_normal(N).astype(np.float32)),
             ("B2", rng.integers(-60, 60, (N, K)).astype(dtype) if signed else rng.integers(0, 255, (N, K)).astype(
                 np.uint8)), ("s2", rng.uniform(0.005, 0.02, K).astype(np.float32))]
    nodes = [helper.make_node("DynamicQuantizeMatMul", ["x", "B1", "s1", "z1"] + (["b1"] if with_bias else []),
                              ["h"], domain=ms),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("DynamicQuantizeMatMul", ["r", "B2", "s2"], ["y"], domain=ms)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [3, 5, K])],
                              [helper.make_tensor_value_info("y", F, None)],
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(ms, 1)])
    x = rng.standard_normal((3, 5, K)).astype(np.float32)
    got, want, sig = _runs(m, {"x": x}, optimize="basic")
    _same(got, want)
    assert sig["programs"] == 1 and sig["program_nodes"] == len(nodes)
    sess = gpuops.InferenceSession(m, device="cpu", threads=1, optimize="basic")
    for _ in range(3):
        sess.run(None, {"x": x})
    x[1, 2, 3] = np.nan
    unplanned = gpuops.InferenceSession(m, device="cpu", threads=1, optimize="basic", shape_plans=0)
    _same(sess.run(None, {"x": x}), unplanned.run(None, {"x": x}))


def test_an_8_bit_cnn_runs_as_one_program():
    rng = np.random.default_rng(14)
    C, M = 3, 8
    w = rng.integers(-20, 20, (M, C, 3, 3)).astype(np.int8)
    B = rng.integers(-50, 50, M).astype(np.int32)
    u8, s8 = TensorProto.UINT8, TensorProto.INT8
    inits = [numpy_helper.from_array(np.array(v, t), n) for n, v, t in [
        ("xs", 0.05, np.float32), ("xz", 128, np.uint8), ("ws", 0.02, np.float32), ("wz", 0, np.int8),
        ("ys", 0.1, np.float32), ("yz", 120, np.uint8), ("as", 0.2, np.float32), ("az", 100, np.uint8)]]
    inits += [numpy_helper.from_array(w, "w"), numpy_helper.from_array(B, "B")]
    ms = "com.microsoft"
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["q"]),
             helper.make_node("QLinearConv", ["q", "xs", "xz", "w", "ws", "wz", "ys", "yz", "B"], ["c"],
                              pads=[1, 1, 1, 1]),
             helper.make_node("QLinearAdd", ["c", "ys", "yz", "c", "ys", "yz", "as", "az"], ["a"], domain=ms),
             helper.make_node("QLinearGlobalAveragePool", ["a", "as", "az", "ys", "yz"], ["p"], domain=ms),
             helper.make_node("DequantizeLinear", ["a", "as", "az"], ["y"]),
             helper.make_node("DequantizeLinear", ["p", "ys", "yz"], ["py"])]  # 8 values: the op's NumPy code
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, C, 16, 16])],
                              [helper.make_tensor_value_info("y", F, None),
                               helper.make_tensor_value_info("p", u8, None),
                               helper.make_tensor_value_info("py", F, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(ms, 1)])
    assert s8  # (the weights are int8)
    got, want, sig = _runs(m, {"x": (rng.standard_normal((1, C, 16, 16)) * 3).astype(np.float32)}, optimize="basic")
    _same(got, want)
    assert sig["program_nodes"] == len(nodes)


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                                   dict(kernel_shape=[2, 3], strides=[1, 2], pads=[0, 2, 1, 0], dilations=[2, 1]),
                                   dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
                                   dict(kernel_shape=[9, 11]),  # the whole map
                                   dict(kernel_shape=[2, 2], strides=[3, 3], pads=[1, 1, 1, 0])])
def test_8_bit_max_pools_run_in_the_program(signed, attrs):
    """MaxPool between a quantization and a dequantization (a QDQ ResNet's stem): each window's largest
    cell of the map, as the op gives it, to the extremes of uint8 and int8."""
    rng = np.random.default_rng(17)
    q = TensorProto.INT8 if signed else TensorProto.UINT8
    dtype = np.int8 if signed else np.uint8
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"), numpy_helper.from_array(np.array(3, dtype), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]), helper.make_node("MaxPool", ["xq"], ["m"], **attrs),
             helper.make_node("DequantizeLinear", ["m", "s", "z"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 3, 9, 11])],
                              [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("m", q, None)],
                              inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = (rng.standard_normal((2, 3, 9, 11)) * 8).astype(np.float32)
    x.reshape(-1)[:4] = [1e3, -1e3, 12.7, -13.1]  # saturated at both ends
    got, want, sig = _runs(m, {"x": x}, optimize="basic")
    _same(got, want)
    assert sig["program_nodes"] == 3


def test_an_8_bit_max_pool_with_a_window_of_padding_only_runs_the_op():
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("MaxPool", ["xq"], ["m"], kernel_shape=[2, 2], pads=[2, 2, 0, 0]),
             helper.make_node("DequantizeLinear", ["m", "s", "z"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"), numpy_helper.from_array(np.array(3, np.uint8), "z")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 2, 5, 5])],
                              [helper.make_tensor_value_info("y", F, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    got, want, sig = _runs(m, {"x": np.ones((1, 2, 5, 5), np.float32)}, optimize="basic")
    _same(got, want)
    assert sig.get("program_nodes", 0) < 3


@pytest.mark.parametrize("signed", [False, True])
def test_an_8_bit_mlp_runs_as_one_program(signed):
    # QLinearMatMul's product in the program, bit for bit the op's: A's zero point a constant, the weight's
    # scale per column in one layer; a zero point computed at run time keeps its node out of the program
    rng = np.random.default_rng(15)
    a_t, w_t = (np.int8, np.int8) if signed else (np.uint8, np.uint8)
    lo, hi = (-128, 128) if signed else (0, 256)
    d = 96
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(7, a_t), "z"),
             numpy_helper.from_array(np.array(0.003, np.float32), "ws0"),
             numpy_helper.from_array((rng.random(d) * 0.004 + 0.001).astype(np.float32), "ws1")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q0"])]
    for i in range(2):
        inits.append(numpy_helper.from_array(rng.integers(lo, hi, (d, d)).astype(w_t), f"w{i}"))
        inits.append(numpy_helper.from_array(np.array(3, w_t), f"wz{i}"))
        nodes.append(helper.make_node("QLinearMatMul", [f"q{i}", "s", "z", f"w{i}", f"ws{i}", f"wz{i}", "s", "z"],
                                      [f"q{i + 1}"]))
    nodes.append(helper.make_node("DequantizeLinear", ["q2", "s", "z"], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [6, d])],
                              [helper.make_tensor_value_info("y", F, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = (rng.standard_normal((6, d)) * 4).astype(np.float32)  # (DequantizeLinear: native from 512 values)
    got, want, sig = _runs(m, {"x": x}, optimize="basic")
    _same(got, want)
    assert sig["program_nodes"] == len(nodes)
    # DynamicQuantizeLinear's zero point is a run-time value: that product runs as its own step
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q0", "xs", "xz"]),
             helper.make_node("QLinearMatMul", ["q0", "xs", "xz", "w0", "ws0", "wz0", "s", "z"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s", "z"], ["y"])]
    if not signed:
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [6, d])],
                                  [helper.make_tensor_value_info("y", F, None)], inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        got, want, sig = _runs(m, {"x": x}, optimize="basic")
        _same(got, want)


@pytest.mark.parametrize("signed", [False, True])
def test_integer_convs_run_in_the_program(signed):
    """ConvInteger (quantize_dynamic's convs) in a program: the zero point DynamicQuantizeLinear makes read
    at run time, a constant one, and none; the bits of the nodes run one by one."""
    rng = np.random.default_rng(16)
    C, M = 4, 8
    wt = np.dtype(np.int8 if signed else np.uint8)

    def ints(shape):
        return rng.integers(np.iinfo(wt).min, np.iinfo(wt).max + 1, shape).astype(wt)

    inits = [numpy_helper.from_array(v, n) for n, v in [
        ("w1", ints((M, C, 3, 3))), ("z1", ints(())), ("w2", ints((M, M, 1, 1))), ("z2", ints(M)),
        ("w3", ints((M, M, 3, 3))), ("xz", np.array(200, np.uint8)), ("s", np.array(0.01, np.float32))]]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "qs", "qz"]),
             helper.make_node("ConvInteger", ["q", "w1", "qz", "z1"], ["c1"], pads=[1] * 4, strides=[2, 2]),
             helper.make_node("ConvInteger", ["q", "w1", "xz", "z1"], ["c2"], pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Cast", ["c1"], ["f1"], to=F),
             helper.make_node("Cast", ["c2"], ["f2"], to=F),
             helper.make_node("Add", ["f1", "f2"], ["f"]),
             helper.make_node("Mul", ["f", "s"], ["g"]),
             helper.make_node("Relu", ["g"], ["r"]),
             helper.make_node("DynamicQuantizeLinear", ["r"], ["q2", "qs2", "qz2"]),
             helper.make_node("ConvInteger", ["q2", "w2", "qz2", "z2"], ["d1"]),
             helper.make_node("ConvInteger", ["q2", "w3"], ["d2"], pads=[1] * 4),
             helper.make_node("Cast", ["d1"], ["e1"], to=F),
             helper.make_node("Cast", ["d2"], ["e2"], to=F),
             helper.make_node("Add", ["e1", "e2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, C, 15, 17])],
                              [helper.make_tensor_value_info("y", F, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    got, want, sig = _runs(m, {"x": rng.standard_normal((1, C, 15, 17)).astype(np.float32)}, optimize="basic")
    _same(got, want)
    assert sig["programs"] == 1 and sig["program_nodes"] == len(nodes)


def _dynamic_conv_model(M=8, C=4):
    """A conv as onnxruntime's quantize_dynamic writes it: x quantized at run time, the bias quantized with
    x's scale (Mul, Div, Floor, Cast to int32), added to ConvInteger's int32 sums, the sum scaled back."""
    rng = np.random.default_rng(19)
    I32 = TensorProto.INT32
    inits = [numpy_helper.from_array(v, n) for n, v in [
        ("w", rng.integers(0, 256, (M, C, 3, 3)).astype(np.uint8)), ("wz", np.array(131, np.uint8)),
        ("ws", np.array(0.004, np.float32)), ("b", (rng.standard_normal(M) * 3).astype(np.float32)),
        ("shape", np.array([1, M, 1, 1], np.int64))]]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "qs", "qz"]),
             helper.make_node("Mul", ["qs", "ws"], ["s"]),
             helper.make_node("Div", ["b", "s"], ["bs"]),
             helper.make_node("Floor", ["bs"], ["bf"]),
             helper.make_node("Cast", ["bf"], ["bq"], to=I32),
             helper.make_node("ConvInteger", ["q", "w", "qz", "wz"], ["acc"], pads=[1] * 4),
             helper.make_node("Reshape", ["bq", "shape"], ["bq4"]),
             helper.make_node("Add", ["acc", "bq4"], ["sum"]),
             helper.make_node("Cast", ["sum"], ["f"], to=F),
             helper.make_node("Mul", ["f", "s"], ["y"]),
             helper.make_node("Relu", ["y"], ["r"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, C, 9, 11])],
                              [helper.make_tensor_value_info("r", F, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), len(nodes)


def test_a_dynamically_quantized_conv_runs_as_one_program():
    """quantize_dynamic's conv, bias quantization included, is one program with the bits of its nodes; a
    NaN in x reruns the nodes (DynamicQuantizeLinear's generic code)."""
    m, n = _dynamic_conv_model()
    rng = np.random.default_rng(20)
    x = (rng.standard_normal((1, 4, 9, 11)) * 2).astype(np.float32)
    got, want, sig = _runs(m, {"x": x}, optimize="basic")
    _same(got, want)
    assert sig["programs"] == 1 and sig["program_nodes"] == n
    sess = gpuops.InferenceSession(m, device="cpu", threads=1, optimize="basic")
    for _ in range(3):
        sess.run(None, {"x": x})
    unplanned = gpuops.InferenceSession(m, device="cpu", threads=1, optimize="basic", shape_plans=0)
    for value in (np.nan, np.inf):
        bad = x.copy()
        bad[0, 1, 2, 3] = value
        with np.errstate(invalid="ignore", divide="ignore"):
            _same(sess.run(None, {"x": bad}), unplanned.run(None, {"x": bad}))
    zeros = np.zeros_like(x)  # a range of 0: scale 1
    _same(sess.run(None, {"x": zeros}), unplanned.run(None, {"x": zeros}))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul"])
@pytest.mark.parametrize("other", [(2, 5, 3), (5, 1), (1,), (3,)])
def test_int32_arithmetic_wraps_around_as_numpy(op, other):
    rng = np.random.default_rng(21)
    I32 = TensorProto.INT32
    big = np.iinfo(np.int32)

    def ints(shape):
        v = rng.integers(big.min, big.max, shape, dtype=np.int64).astype(np.int32)
        v.reshape(-1)[:2] = [big.max, big.min][:v.size]
        return v

    nodes = [helper.make_node("Cast", ["x"], ["a"], to=I32), helper.make_node("Cast", ["k"], ["b"], to=I32),
             helper.make_node(op, ["a", "b"], ["c"]), helper.make_node(op, ["b", "a"], ["d"]),
             helper.make_node("Add", ["c", "d"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT64, [2, 5, 3]),
                                           helper.make_tensor_value_info("k", TensorProto.INT64, list(other))],
                              [helper.make_tensor_value_info(n, I32, None) for n in ("y", "c")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    feeds = {"x": ints((2, 5, 3)).astype(np.int64), "k": ints(other).astype(np.int64)}
    got, want, sig = _runs(m, feeds, optimize="basic")
    _same(got, want)
    a, b = feeds["x"].astype(np.int32), feeds["k"].astype(np.int32)
    np.testing.assert_array_equal(got[1], {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op](a, b))
    commutes = op != "Sub" or other == (2, 5, 3)  # b - a with b broadcast has no kernel
    assert sig["program_nodes"] == (len(nodes) if commutes else 3)


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="float32 to int32 out of range is NumPy's own on other CPUs: not bound there")
def test_float_to_int32_truncates_and_gives_int32_min_as_numpy_on_x86():
    rng = np.random.default_rng(22)
    x = (rng.standard_normal((4, 33)) * 1e3).astype(np.float32)
    x.reshape(-1)[:10] = [np.nan, np.inf, -np.inf, 2.1e9, 2147483648.0, -2147483648.0, -2.2e9, -0.7, 0.7, -1.5]
    nodes = [helper.make_node("Add", ["x", "x"], ["d"]), helper.make_node("Cast", ["d"], ["i"], to=TensorProto.INT32),
             helper.make_node("Cast", ["i"], ["y"], to=F)]
    got, want, sig = _runs(_model(nodes, [("x", [4, 33])], ["y"]), {"x": x}, optimize="basic")
    _same(got, want)
    assert sig["program_nodes"] == 3
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got[0], (x + x).astype(np.int32).astype(np.float32))


@pytest.mark.parametrize("case", ["softmax", "softmax_1", "log_softmax", "split", "split_1"])
def test_softmax_and_split(case):
    """(ConvNeXt's LayerNormChannels, a private op, runs in programs on the corpus: tests/corpus.)"""
    rng = np.random.default_rng(15)
    shape, opset, outputs, extra_inits = [2, 6, 4, 3], 18, ["y"], []
    if case.startswith("softmax") or case == "log_softmax":
        op = "LogSoftmax" if case == "log_softmax" else "Softmax"
        opset = 11 if case == "softmax_1" else 18
        mid = [helper.make_node(op, ["r"], ["y"], axis=2 if case == "softmax_1" else -1)]
    elif case.startswith("split"):
        outputs = ["y", "y2", "y3"]
        if case == "split":
            extra_inits = [_i64("sp", [1, 3, 2])]
            mid = [helper.make_node("Split", ["r", "sp"], ["s0", "s1", "s2"], axis=1)]
        else:
            mid = [helper.make_node("Split", ["r"], ["s0", "s1", "s2"], axis=-1, num_outputs=3)]
        mid += [helper.make_node("Relu", [f"s{k}"], [o]) for k, o in enumerate(outputs)]
    nodes = [helper.make_node("Relu", ["x"], ["r"])] + mid
    m = _model(nodes, [("x", shape)], outputs, opset=opset)
    m.graph.initializer.extend(extra_inits)
    got, want, sig = _runs(m, {"x": _awkward(rng, shape)}, optimize="basic")
    _same(got, want)
    assert sig["program_nodes"] == len(nodes)


def test_if_branches_get_their_programs():
    """Both: the one a run took from its recorded shapes, the other from the outer values' shapes."""
    rng = np.random.default_rng(16)

    def branch(name, k):
        nodes = [helper.make_node("Relu", ["x"], [f"{name}_r"]), helper.make_node("Mul", [f"{name}_r", k], [f"{name}_m"]),
                 helper.make_node("Add", [f"{name}_m", "x"], [f"{name}_y"])]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_y", F, None)])

    nodes = [helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0),
             helper.make_node("Greater", ["mx", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=branch("then", "k1"), else_branch=branch("else", "k2"))]
    m = _model(nodes, [("x", [3, 4])], ["y"], [("zero", np.float32(0)), ("k1", np.float32(2)), ("k2", np.float32(-3))])
    for x in (np.abs(rng.standard_normal((3, 4))).astype(np.float32), -np.abs(rng.standard_normal((3, 4)))
              .astype(np.float32)):
        got, want, sig = _runs(m, {"x": x}, optimize="basic")
        _same(got, want)
        assert sig["programs"] == 3 and sig["program_nodes"] == 8  # and the condition's ReduceMax and Greater


def _ulps(got, want, n):
    """got within n float32 ulps of want (NaN where NaN, infinities equal)."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    fin = np.isfinite(want)
    assert np.array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
    spacing = np.spacing(np.abs(want[fin])).astype(np.float64)
    assert np.all(np.abs(got[fin].astype(np.float64) - want[fin]) <= n * spacing)


@pytest.mark.parametrize("op, exact", [("Sqrt", True), ("Reciprocal", True), ("Neg", True), ("Abs", True),
                                       ("Erf", True), ("Floor", True), ("Ceil", True), ("Tanh", False), ("Exp", False), ("Log", False),
                                       ("Pow2", False), ("Clip", True), ("Clip6", True)])
def test_more_activations(op, exact):
    rng = np.random.default_rng(17)
    inits, opset, attrs, inputs = [], 13, {}, ["r"]
    if op.startswith("Pow"):
        inits, inputs, name = [("e", np.float32(2.0))], ["r", "e"], "Pow"
    elif op == "Clip":
        inits, inputs, name = [("lo", np.float32(-1.5)), ("hi", np.float32(2.0))], ["r", "lo", "hi"], "Clip"
    elif op == "Clip6":
        opset, name, attrs = 10, "Clip", {"min": -1.5, "max": 2.0}
    else:
        name = op
    nodes = [helper.make_node("Mul", ["x", "x"], ["r"]) if op == "Log" else
             helper.make_node("Add", ["x", "x"], ["r"]), helper.make_node(name, inputs, ["y"], **attrs),
             helper.make_node("Add", ["y", "y"], ["z"])]
    m = _model(nodes, [("x", [4, 33])], ["z", "y"], inits, opset=opset)
    got, want, sig = _runs(m, {"x": _awkward(rng, (4, 33))}, optimize="basic")
    assert sig["program_nodes"] == 3
    if exact:
        _same(got, want)
    else:  # libm's against NumPy's own loops (Pow: x * x, against powf): NumPy documents its float32 exp
        for g, w in zip(got, want):  # and log within 2.52 and 3.83 ulps, glibc its expf, logf, tanhf, powf
            _ulps(g, w, 6)  # within 1-2; the two apart by at most their sum


def test_tanh_lanes_are_within_two_ulps_of_the_exact_value():
    """The programs' Tanh (special.c's vtanh: a polynomial below 0.625, a quotient of exponentials above)
    over a dense range, both sides of the switch, tiny and huge values, signed zeros, infinities, NaN."""
    x = np.concatenate([np.linspace(-12, 12, 400_001, dtype=np.float32), np.logspace(-38, 1.2, 20_001, dtype=np.float32),
                        np.float32([0.625, np.nextafter(np.float32(0.625), np.float32(0)), 9.0, 1e-45])])
    x = np.concatenate([x, -x, np.float32([np.inf, -np.inf, np.nan])])
    y = np.empty_like(x)
    p = np.array([8, x.size, 0, 0], np.int64)  # special.c's UNARY_TANH
    native.call(native.function("unary_planned_f32"), p.ctypes.data, x.ctypes.data, None, y.ctypes.data)
    fin = np.isfinite(x)
    exact = np.tanh(x[fin].astype(np.float64))
    spacing = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(y[fin] - exact) <= 2 * spacing)
    assert np.array_equal(np.signbit(y[fin]), np.signbit(x[fin]))  # -0.0 gives -0.0
    assert y[-3] == 1 and y[-2] == -1 and np.isnan(y[-1])


def test_exp_lanes_are_within_two_ulps_of_the_exact_value():
    """The programs' Exp (vmath.h's vexp) over its whole normal range, where 2^n takes two halves (n up
    to 128), at its ends, past them (+inf above 88.72, 0 below -87.34, where e^x is subnormal: at most
    1.2e-38 off), and at infinities and NaN."""
    top, bottom = np.float32(88.72283935546875), np.float32(-87.33654475)
    x = np.concatenate([np.linspace(-87.3, 88.7, 600_001, dtype=np.float32), np.logspace(-38, 1, 10_001, dtype=np.float32),
                        np.float32([top, np.nextafter(top, np.float32(0)), 1e-45, 0.0])])
    x = np.concatenate([x, -x, np.float32([np.nextafter(top, np.float32(100)), 100.0, -90.0, -200.0, np.inf, -np.inf,
                                           np.nan])])
    y = np.empty_like(x)
    p = np.array([9, x.size, 0, 0], np.int64)  # special.c's UNARY_EXP
    native.call(native.function("unary_planned_f32"), p.ctypes.data, x.ctypes.data, None, y.ctypes.data)
    normal = np.isfinite(x) & (x >= bottom) & (x <= top)
    exact = np.exp(x[normal].astype(np.float64))
    spacing = np.spacing(np.minimum(exact, np.finfo(np.float32).max).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(y[normal] - exact) <= 2 * spacing)
    assert np.all(y[np.isfinite(x) & (x < bottom)] <= 1.2e-38)
    assert np.array_equal(y[-7:-1], np.float32([np.inf, np.inf, 0, 0, np.inf, 0])) and np.isnan(y[-1])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_is_a_copy_with_its_constant(mode):
    rng = np.random.default_rng(18)
    inputs = ["r", "pads"] + (["cv"] if mode == "constant" else [])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Pad", inputs, ["p"], mode=mode),
             helper.make_node("Add", ["p", "p"], ["y"])]
    m = _model(nodes, [("x", [2, 3, 5])], ["y"], [("cv", np.float32(-2.5))], opset=13)
    m.graph.initializer.append(_i64("pads", [0, 1, 2, 0, 2, 1]))
    got, want, sig = _runs(m, {"x": _awkward(rng, (2, 3, 5))}, optimize="basic")
    _same(got, want)
    assert sig["program_nodes"] == 3


@pytest.mark.parametrize("rows", [1, 5])
def test_classic_ml_linear_models_and_fused_gemm(rows):
    rng = np.random.default_rng(19)
    F, C, H = 6, 4, 8
    ml, ms = "ai.onnx.ml", "com.microsoft"
    W1 = rng.standard_normal((F, H)).astype(np.float32)
    b1 = rng.standard_normal(H).astype(np.float32)
    coef = rng.standard_normal(C * H).astype(np.float32)
    nodes = [helper.make_node("FusedGemm", ["x", "W1", "b1"], ["h"], domain=ms, activation="Relu"),
             helper.make_node("FusedGemm", ["h", "W2", "b2"], ["h2"], domain=ms, activation="Tanh", transB=1),
             helper.make_node("LinearClassifier", ["h2"], ["label", "scores"], domain=ml, coefficients=coef.tolist(),
                              intercepts=rng.standard_normal(C).tolist(), classlabels_ints=list(range(C)),
                              post_transform="SOFTMAX"),
             helper.make_node("Normalizer", ["scores"], ["y"], domain=ml, norm="L2")]
    W2 = rng.standard_normal((H, H)).astype(np.float32)
    b2 = rng.standard_normal(H).astype(np.float32)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, F])],
                              [helper.make_tensor_value_info("label", TensorProto.INT64, None),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(a, n) for n, a in (("W1", W1), ("b1", b1), ("W2", W2),
                                                                          ("b2", b2))])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(ml, 1),
                                                helper.make_opsetid(ms, 1)])
    got, want, sig = _runs(m, {"x": rng.standard_normal((rows, F)).astype(np.float32)}, optimize="basic")
    assert sig["program_nodes"] == 4
    np.testing.assert_array_equal(got[0], want[0])
    # the products by the native GEMM or the BLAS, in other orders: two sums of at most 8 terms (gamma_8 ~ 5e-7
    # of their terms' sums, within 10x of the results here), then tanh, softmax and the norm, a few roundings
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


def test_gemm_with_alpha_and_a_run_time_bias_as_kmeans_writes_it():
    """skl2onnx's KMeans: -2 X C^T + |X|^2 (a column) + |C|^2 (a row)."""
    rng = np.random.default_rng(20)
    X = rng.standard_normal((9, 5)).astype(np.float32)
    Cc = rng.standard_normal((4, 5)).astype(np.float32)
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"]),
             helper.make_node("ReduceSum", ["sq", "ax"], ["n2"], keepdims=1),
             helper.make_node("Gemm", ["x", "C", "n2"], ["g"], alpha=-2.0, transB=1),
             helper.make_node("Add", ["c2", "g"], ["d"]),
             helper.make_node("Sqrt", ["d"], ["y"])]
    m = _model(nodes, [("x", [9, 5])], ["y"], [("C", Cc), ("c2", (Cc * Cc).sum(1))], opset=13)
    m.graph.initializer.append(_i64("ax", [1]))
    got, _, sig = _runs(m, {"x": X}, optimize="basic")
    assert sig["program_nodes"] == len(nodes)
    x64, c64 = X.astype(np.float64), Cc.astype(np.float64)
    d = -2 * x64 @ c64.T + (x64 ** 2).sum(1, keepdims=True) + (c64 ** 2).sum(1)
    terms = 2 * np.abs(x64) @ np.abs(c64.T) + (x64 ** 2).sum(1, keepdims=True) + (c64 ** 2).sum(1)
    gamma = 8 * U / (1 - 8 * U)  # 5 products and 3 additions, in any order (sqrt's rounding: below)
    assert np.all(np.abs(got[0].astype(np.float64) ** 2 - d) <= gamma * terms + 4 * U * np.abs(d))


def test_concat_of_a_constant_and_float16_casts():
    rng = np.random.default_rng(21)
    token = rng.standard_normal((1, 1, 4)).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Concat", ["tok", "r"], ["c"], axis=1),
             helper.make_node("Cast", ["c"], ["h"], to=TensorProto.FLOAT16),
             helper.make_node("Cast", ["h"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["f", "c"], ["y"])]
    m = _model(nodes, [("x", [1, 6, 4])], ["y", "h"], [("tok", token)], opset=13)
    m.graph.output[1].type.tensor_type.elem_type = TensorProto.FLOAT16
    got, want, sig = _runs(m, {"x": _awkward(rng, (1, 6, 4))}, optimize="basic")
    _same(got, want)
    assert sig["program_nodes"] == len(nodes) and got[1].dtype == np.float16


def test_one_row_products_by_the_matrix_vector_routine():
    """A one-row MatMul, and a one-row Gemm with alpha (not the packed path), by the BLAS's sgemv."""
    rng = np.random.default_rng(22)
    K, N = 300, 50
    B = rng.standard_normal((K, N)).astype(np.float32)
    G = rng.standard_normal((N, K)).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("MatMul", ["r", "B"], ["m"]),
             helper.make_node("Gemm", ["r", "G"], ["g"], transB=1, alpha=0.5), helper.make_node("Add", ["m", "g"], ["y"])]
    x = rng.standard_normal((1, K)).astype(np.float32)
    got, _, sig = _runs(_model(nodes, [("x", [1, K])], ["m", "g"], [("B", B), ("G", G)]), {"x": x}, optimize="basic")
    assert sig["program_nodes"] == 3  # (the Add is dead)
    r = np.maximum(x, 0).astype(np.float64)
    _bound(got[0], r @ B, np.abs(r) @ np.abs(B), K)
    _bound(got[1], 0.5 * r @ G.T, 0.5 * np.abs(r) @ np.abs(G.T), K + 1)


def test_attention_of_one_token_with_past():
    """A decoder's step: one query row (the projection by sgemv), a past of three."""
    rng = np.random.default_rng(23)
    D, N = 8, 2
    W = (rng.standard_normal((D, 3 * D)) * 0.5).astype(np.float32)
    feeds = {"x": rng.standard_normal((1, 1, D)).astype(np.float32),
             "past": rng.standard_normal((2, 1, N, 3, D // N)).astype(np.float32)}
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Attention", ["r", "W", "", "", "past"], ["a", "present"], domain="com.microsoft",
                              num_heads=N, unidirectional=1),
             helper.make_node("Add", ["a", "r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 1, D]),
                                           helper.make_tensor_value_info("past", F, [2, 1, N, 3, D // N])],
                              [helper.make_tensor_value_info(n, F, None) for n in ("y", "present")],
                              [numpy_helper.from_array(W, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    got, want, sig = _runs(model, feeds, optimize="basic")
    assert sig["program_nodes"] == 3
    for g, w in zip(got, want):  # the projection's sums in sgemv's order, NumPy's in sgemm's: within D terms
        np.testing.assert_allclose(g, w, rtol=8 * D * U, atol=8 * D * U * float(np.abs(w).max()))


@pytest.mark.parametrize("op, axes, keep", [("ReduceSum", [-1], 1), ("ReduceMean", [1, 2], 0),
                                            ("ReduceSumSquare", [2], 1), ("ReduceMax", [-1], 0),
                                            ("ReduceMin", [1, 2], 1), ("ArgMax", -1, 0), ("ArgMin", 2, 1)])
def test_reductions_of_rows(op, axes, keep):
    rng = np.random.default_rng(24)
    x = _awkward(rng, (3, 5, 40))
    x[1] = np.abs(x[1])  # rows without NaN or infinities, beside the awkward first row
    x[2] = rng.standard_normal((5, 40)).astype(np.float32)
    arg = op.startswith("Arg")
    inputs, inits = ["r"], []
    attrs = {"axis": axes, "keepdims": keep} if arg else {"keepdims": keep}
    if not arg:
        inputs.append("ax")
    nodes = [helper.make_node("Add", ["x", "x"], ["r"]), helper.make_node(op, inputs, ["y"], **attrs)]
    nodes.append(helper.make_node("Add", ["y", "y"], ["z"]) if not arg else helper.make_node("Identity", ["y"], ["z"]))
    m = _model(nodes, [("x", [3, 5, 40])], ["z"], opset=18)
    if not arg:
        m.graph.initializer.append(_i64("ax", axes))
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64 if arg else F
    got, want, sig = _runs(m, {"x": x}, optimize="basic")
    assert sig["program_nodes"] == 3 - arg  # (the optimizer removes the Identity)
    if op in ("ReduceSum", "ReduceMean", "ReduceSumSquare"):  # sums in other orders: gamma_n of the terms
        r = (x.astype(np.float64) * 2)
        red = tuple(a % 3 for a in axes)
        terms = np.sum(r * r if op == "ReduceSumSquare" else np.abs(r), axis=red, keepdims=bool(keep)) * 2
        terms = terms / (200 if op == "ReduceMean" else 1)
        n = 200 if op == "ReduceMean" else 40
        finite = np.isfinite(want[0])
        assert np.array_equal(np.isnan(got[0]), np.isnan(want[0]))
        assert np.all(np.abs(got[0][finite].astype(np.float64) - want[0][finite]) <=
                      (n + 2) * U * terms[finite] + 1e-30)
    else:
        _same(got, want)


@pytest.mark.parametrize("name, touches_blas", [("skl_forest", False), ("skl_logreg", False), ("skl_mlp", True)])
def test_classic_ml_runs_leave_the_blas_thread_count_alone(name, touches_blas):
    # a tree ensemble, or a native program without BLAS products, runs without setting the BLAS count and
    # restoring it (which took as long as the run); a model with a product still runs at the session's count
    import os

    import onnx

    from gpuops import threads

    m = onnx.load(os.path.join(os.path.dirname(__file__), "corpus", "models", f"{name}.onnx"))
    (x,) = m.graph.input
    features = x.type.tensor_type.shape.dim[1].dim_value
    feeds = {x.name: np.random.default_rng(0).standard_normal((5, features)).astype(np.float32)}
    sess = gpuops.InferenceSession(m, device="cpu", threads=1)
    for _ in range(3):  # the third runs the shape-specialized plan
        sess.run(None, feeds)
    if not threads._handles:
        pytest.skip("no BLAS library found")
    seen = []
    real = threads._handles
    threads._handles = [(lambda get=get: (seen.append("get"), get())[1], put) for get, put in real]
    try:
        sess.run(None, feeds)
    finally:
        threads._handles = real
    assert bool(seen) is touches_blas


def test_a_numpy_scalar_from_a_step_outside_runs_the_program(monkeypatch):
    """A 0-d value that a NumPy step outside the programs made (NumPy returns a scalar, not an array: a
    Mul of two int64 0-d arrays, as silero_vad's sample-rate arithmetic) feeds a program as its planned
    0-d input: the program runs its kernels, not its nodes one by one."""
    from gpuops.onnx import programs

    nodes = [helper.make_node("Mul", ["s", "two"], ["m"]),
             helper.make_node("Cast", ["m"], ["c"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "c"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 3]),
                                           helper.make_tensor_value_info("s", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", F, None)], [_i64("two", 2)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    feeds = {"x": x, "s": np.array(5, np.int64)}
    sess = gpuops.InferenceSession(m, device="cpu", threads=1, optimize="basic")
    for _ in range(2):
        sess.run(None, feeds)
    assert [s.op_type for s in _plan(sess, feeds).steps] == ["Mul", "NativeProgram"]
    monkeypatch.setattr(programs.Program, "one_by_one", lambda *a: pytest.fail("ran one node at a time"))
    np.testing.assert_array_equal(sess.run(None, feeds)[0], x + 10)
