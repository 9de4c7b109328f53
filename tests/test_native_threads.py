"""Threads of the CPU ops (gpuops/threads.py) and of the native kernels (cpu_kernels/pool_threads.h):
the default and GPUOPS_NUM_THREADS, the same bits from 1 thread as from several (the work is split
into independent outputs, each computed as in one part), concurrent callers, a forked child, and
one warning line per cause when the kernels cannot be built."""

import multiprocessing
import os
import subprocess
import sys
import threading
import warnings

import array_api_compat.numpy as xp
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import gpuops
from gpuops import native, threads
from gpuops.ops.cpu import conv, native_gemm, pool, softmax, winograd
from gpuops.ops.cpu.activation import Gelu
from gpuops.ops.cpu.elementwise import Sigmoid, erf

needs_cc = pytest.mark.skipif(native.compiler() is None, reason="no C compiler: native kernels fall back to NumPy")


@pytest.fixture
def native_threads():
    """Set the native kernels' thread count inside a test; restored after it."""
    before = native._threads
    yield native.set_threads
    native.set_threads(before)


def _with(set_threads, n, f):
    set_threads(n)
    return f()


# Each case is large enough that 3 threads split it (POOL_MIN_WORK multiply-adds, or 16k elements, per part),
# with an odd thread count so that parts are uneven, and NaN / infinities in the inputs.
def _cases():
    rng = np.random.default_rng(7)

    def image(*shape):
        X = rng.standard_normal(shape).astype(np.float32)
        X.flat[rng.integers(0, X.size, 3)] = [np.nan, np.inf, -np.inf]
        return X

    X = image(2, 24, 30, 37)
    Xa = image(8, 24, 64, 64)
    Xb = image(12, 40, 28, 28)  # channel blocks (many planes of short rows)
    dw = rng.standard_normal((48, 1, 3, 3)).astype(np.float32)
    dwb = rng.standard_normal((40, 1, 3, 3)).astype(np.float32)
    bn = rng.standard_normal((24, 1, 1, 1)).astype(np.float32)
    first = rng.standard_normal((33, 3, 7, 7)).astype(np.float32)
    img = image(1, 3, 61, 59)
    B = rng.standard_normal(48).astype(np.float32)
    A = rng.standard_normal((70, 300)).astype(np.float32)
    cols = image(300, 777)
    wide = image(5, 40000)
    wino_x, wino_w = image(1, 64, 28, 27), rng.standard_normal((48, 64, 3, 3)).astype(np.float32)
    wino_b = rng.standard_normal(48).astype(np.float32)
    wide_x, wide_w = image(2, 64, 60, 61), rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    im2col_x, strided_w = image(1, 96, 64, 64), rng.standard_normal((48, 96, 3, 3)).astype(np.float32)
    pointwise = rng.standard_normal((24, 24, 1, 1)).astype(np.float32)

    return {
        "depthwise planes": lambda: conv.Conv(xp, X, dw, B, group=24, pads=[1, 1, 1, 1]),
        "depthwise blocks": lambda: conv.Conv(xp, Xb, dwb, None, group=40, strides=[2, 2], pads=[1, 1, 1, 1]),
        "depthwise affine": lambda: conv.Conv(xp, Xa, bn, None, group=24),
        "direct conv": lambda: conv.Conv(xp, img, first, None, strides=[2, 2], pads=[3, 3, 3, 3]),
        "winograd conv": lambda: conv.Conv(xp, wino_x, wino_w, wino_b, pads=[1, 1, 1, 1]),
        "winograd blocks": lambda: conv.Conv(xp, wide_x, wide_w, None, pads=[1, 1, 1, 1]),  # threads take blocks
        "im2col conv": lambda: conv.Conv(xp, im2col_x, strided_w, B, strides=[2, 2], pads=[1, 1, 1, 1]),
        "residual epilogue": lambda: conv.FusedConv(xp, Xa, pointwise, B[:24], Xa, activation="Relu"),
        # the activation pass after a whole depthwise, direct or Winograd conv, split across the threads
        "depthwise hard sigmoid": lambda: conv.FusedConv(xp, X, dw, B, group=24, pads=[1, 1, 1, 1],
                                                         activation="HardSigmoid", activation_params=[0.2, 0.5],
                                                         prepared=conv.ConvWeights(dw, B)),
        "direct leaky relu": lambda: conv.FusedConv(xp, img, first, None, strides=[2, 2], pads=[3, 3, 3, 3],
                                                    activation="LeakyRelu", activation_params=[0.1],
                                                    prepared=conv.ConvWeights(first, None)),
        "winograd silu": lambda: conv.ConvSilu(xp, wino_x, wino_w, wino_b, pads=[1, 1, 1, 1],
                                               prepared=conv.ConvWeights(wino_w, wino_b)),
        "max pool planes": lambda: pool.MaxPool(xp, Xa, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        "average pool blocks": lambda: pool.AveragePool(xp, Xb, kernel_shape=[3, 3], strides=[2, 2],
                                                        pads=[1, 1, 1, 1]),
        "gemm channels": lambda: native_gemm.gemm(native_gemm.packed(A, B[:1].repeat(70), rows=False)[0], cols),
        "gemm cells": lambda: native_gemm.gemm(native_gemm.packed(A, None, rows=True)[0], cols, clamp_to=(0.0, 6.0)),
        "erf": lambda: erf(xp, wide),
        "gelu": lambda: Gelu(xp, wide),
        "erf float64": lambda: erf(xp, wide.astype(np.float64)),
        "sigmoid": lambda: Sigmoid(xp, wide),
        "softmax": lambda: softmax.Softmax(xp, wide, axis=-1),
    }


CASES = _cases()


@needs_cc
@pytest.mark.parametrize("case", CASES)
def test_same_bits_from_any_thread_count(case, native_threads):
    f = CASES[case]
    if case == "winograd conv":
        assert winograd.pays(64, 48, 1, (28, 27))  # the conv takes the Winograd path
    one = _with(native_threads, 1, f)
    for n in (2, 3, 8):
        got = _with(native_threads, n, f)
        assert got.shape == one.shape and got.dtype == one.dtype
        np.testing.assert_array_equal(got, one, err_msg=f"{case}: {n} threads")


def _int8_models():
    """MatMulInteger and QLinearMatMul of 4 rows by a 1024 x 1030 int8 weight (a last group of 2 columns):
    the native 8-bit GEMM a session runs with its weight packed."""
    rng = np.random.default_rng(9)
    B = onnx.numpy_helper.from_array(rng.integers(-128, 128, (1024, 1030), dtype=np.int8), "B")
    consts = [onnx.numpy_helper.from_array(np.array(v, dtype), n) for v, dtype, n in
              [(3, np.uint8, "za"), (-2, np.int8, "zb"), (0.02, np.float32, "sa"), (0.01, np.float32, "sb"),
               (0.5, np.float32, "sy"), (128, np.uint8, "zy")]]
    a = helper.make_tensor_value_info("A", TensorProto.UINT8, [4, 1024])
    models = []
    for node, elem in ((helper.make_node("MatMulInteger", ["A", "B", "za", "zb"], ["Y"]), TensorProto.INT32),
                       (helper.make_node("QLinearMatMul", ["A", "sa", "za", "B", "sb", "zb", "sy", "zy"], ["Y"]),
                        TensorProto.UINT8)):
        y = helper.make_tensor_value_info("Y", elem, [4, 1030])
        g = helper.make_graph([node], "g", [a], [y], initializer=[B, *consts])
        models.append(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    return models, {"A": rng.integers(0, 256, (4, 1024), dtype=np.uint8)}


@needs_cc
def test_8bit_gemms_same_bits_from_any_thread_count(native_threads):
    from gpuops.ops.cpu import qgemm

    models, feeds = _int8_models()
    calls, real = [], qgemm.run

    def spy(plan, *args):  # the int8 GEMM of cpu_kernels/qgemm.c, which these products take
        calls.append(plan.fn.__name__)
        return real(plan, *args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(qgemm, "run", spy)
        for model in models:
            one = gpuops.InferenceSession(model, device="cpu", threads=1).run(None, feeds)[0]
            for n in (2, 3, 8):
                np.testing.assert_array_equal(gpuops.InferenceSession(model, device="cpu", threads=n)
                                              .run(None, feeds)[0], one)
    assert calls.count("qgemm_u8") == 2 * 4


def _int8_row_split_models():
    """8-bit convs of 64 -> 256 channels on an 8 x 20 map (3 blocks of 64 columns: on more than one thread
    each block's rows are split too) and products of 64 rows by 40 columns (one block), each output kind:
    QLinearConv (8 bits, per-channel weight zero points and scales: the per-row corrections and
    multipliers), ConvInteger (int32), MatMulInteger (int32, per-column zero points) and
    DynamicQuantizeMatMul (float)."""
    rng = np.random.default_rng(11)
    init = onnx.numpy_helper.from_array
    w = rng.integers(-128, 128, (256, 64, 3, 3), dtype=np.int8)
    conv_consts = [init(w, "w"), init(np.array(0.02, np.float32), "xs"), init(np.array(7, np.uint8), "xz"),
                   init(rng.uniform(0.001, 0.01, 256).astype(np.float32), "ws"),
                   init(rng.integers(-3, 4, 256).astype(np.int8), "wz"), init(np.array(0.5, np.float32), "ys"),
                   init(np.array(100, np.uint8), "yz")]
    b = rng.integers(-128, 128, (300, 40), dtype=np.int8)
    mm_consts = [init(b, "b"), init(rng.integers(-5, 5, 40).astype(np.int8), "bz"),
                 init(rng.uniform(0.001, 0.01, 40).astype(np.float32), "bs"), init(np.array(3, np.uint8), "az")]
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 64, 8, 20])
    a = helper.make_tensor_value_info("a", TensorProto.UINT8, [64, 300])
    f = helper.make_tensor_value_info("f", TensorProto.FLOAT, [64, 300])
    cases = [(helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], pads=[1] * 4),
              x, TensorProto.UINT8, conv_consts, "", 10),
             (helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1] * 4), x, TensorProto.INT32,
              conv_consts, "", 10),
             (helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"]), a, TensorProto.INT32, mm_consts, "", 10),
             (helper.make_node("DynamicQuantizeMatMul", ["f", "b", "bs", "bz"], ["y"], domain="com.microsoft"), f,
              TensorProto.FLOAT, mm_consts, "com.microsoft", 13)]
    feeds = {"x": rng.integers(0, 256, (1, 64, 8, 20), dtype=np.uint8), "a": rng.integers(0, 256, (64, 300), dtype=np.uint8),
             "f": rng.standard_normal((64, 300)).astype(np.float32)}
    models = []
    for node, inp, elem, consts, domain, opset in cases:
        g = helper.make_graph([node], "g", [inp], [helper.make_tensor_value_info("y", elem, None)], initializer=consts)
        opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
        models.append((helper.make_model(g, opset_imports=opsets), {inp.name: feeds[inp.name]}))
    return models


@needs_cc
def test_8bit_gemms_with_rows_split_across_threads_keep_their_bits(native_threads):
    for model, feeds in _int8_row_split_models():
        one = gpuops.InferenceSession(model, device="cpu", threads=1).run(None, feeds)[0]
        with native.disabled():
            np.testing.assert_array_equal(one, gpuops.InferenceSession(model, device="cpu").run(None, feeds)[0])
        for n in (2, 3, 8):
            got = gpuops.InferenceSession(model, device="cpu", threads=n).run(None, feeds)[0]
            np.testing.assert_array_equal(got, one, err_msg=f"{model.graph.node[0].op_type}: {n} threads")


@needs_cc
@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_bidirectional_recurrences_same_bits_on_two_threads(op, native_threads):
    """A bidirectional layer's two directions on threads of their own (each 16 x 2 x 64 x 4 x 64
    multiply-adds, past POOL_MIN_WORK), its outputs the same bits as on one."""
    from gpuops.ops.cpu import rnn
    from tests.test_native_rnn import _inputs

    args = _inputs(np.random.default_rng(10), 16, 2, 24, 64, 2, 0, True, True, op=op)
    f = getattr(rnn, op)
    one = _with(native_threads, 1, lambda: f(xp, *args, direction="bidirectional", hidden_size=64))
    two = _with(native_threads, 2, lambda: f(xp, *args, direction="bidirectional", hidden_size=64))
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


@needs_cc
def test_concurrent_callers_share_a_pool(native_threads):
    """Callers in several Python threads (sessions run concurrently): one uses the pool, the others run
    their parts themselves; every result is right."""
    f = CASES["depthwise planes"]
    want = _with(native_threads, 1, f)
    native_threads(3)
    got, barrier = [], threading.Barrier(4)

    def call():
        barrier.wait()
        for _ in range(5):
            got.append(f())

    ts = [threading.Thread(target=call) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert len(got) == 20
    for g in got:
        np.testing.assert_array_equal(g, want)


@needs_cc
@pytest.mark.parametrize("threads_, parts", [(2, 8), (3, 12), (3, 7)])
def test_each_thread_takes_a_contiguous_segment_of_the_parts(native_threads, threads_, parts):
    """threads_run gives each thread of a run a contiguous segment of the parts, taken in order, and
    then the last part of the segment with most left (dealt one by one, neighbouring parts went to
    different cores, and splits gained less or nothing). Every part runs once."""
    import ctypes
    import time

    native_threads(threads_)
    assert native.function("threads_get") is not None and native._pool is not None
    run = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(native._pool[0])
    taken: dict = {}

    @ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    def part(ctx, p, n):
        taken.setdefault(threading.get_ident(), []).append(p)
        time.sleep(0.005)  # lets the other threads in (each part holds the GIL only briefly)

    assert run(ctypes.cast(part, ctypes.c_void_p), None, parts) == 0
    assert sorted(p for seq in taken.values() for p in seq) == list(range(parts))
    assert taken[threading.get_ident()][0] == 0  # the caller's segment is the first
    for seq in taken.values():
        own = 1
        while own < len(seq) and seq[own] == seq[own - 1] + 1:
            own += 1
        for s in range(threads_):  # what it took from others' segments: each from the back
            stolen = [p for p in seq[own:] if parts * s // threads_ <= p < parts * (s + 1) // threads_]
            assert stolen == sorted(stolen, reverse=True), seq


def _child(q):
    q.put(CASES["max pool planes"]().tobytes())


@needs_cc
@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork here")
def test_a_forked_child_starts_its_own_workers(native_threads):
    native_threads(3)
    want = CASES["max pool planes"]()  # the parent's workers now exist
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork in a process with threads (3.12+)
        p = ctx.Process(target=_child, args=(q,))
        p.start()
    got = q.get(timeout=120)
    p.join(timeout=60)
    assert p.exitcode == 0
    assert got == want.tobytes()


# -- the thread count -------------------------------------------------------------------------------

def test_default_is_the_physical_cores_capped(monkeypatch):
    monkeypatch.delenv(threads.ENV, raising=False)
    cores = threads.physical_cores()
    assert 1 <= cores <= threads.available_cpus()
    assert threads.default_threads() == min(cores, threads.MAX_DEFAULT_THREADS)
    monkeypatch.setattr(threads, "physical_cores", lambda: 128)
    assert threads.default_threads() == threads.MAX_DEFAULT_THREADS


@pytest.mark.parametrize("raw, want", [("3", 3), (" 2 ", 2), ("1", 1), ("64", 64), ("", None)])
def test_the_environment_variable_sets_the_default(monkeypatch, raw, want):
    monkeypatch.setenv(threads.ENV, raw)
    expected = want if want is not None else min(threads.physical_cores(), threads.MAX_DEFAULT_THREADS)
    assert threads.default_threads() == expected
    assert threads.resolve(None) == expected
    assert threads.resolve(5) == 5  # threads= wins


def _matmul_model():
    a = helper.make_tensor_value_info("A", TensorProto.FLOAT, [2, 2])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 2])
    graph = helper.make_graph([helper.make_node("MatMul", ["A", "A"], ["Y"])], "g", [a], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("raw", ["0", "-1", "two", "2.5", "1e3", "0x4"])
def test_a_bad_environment_variable_is_refused_naming_it(monkeypatch, raw):
    monkeypatch.setenv(threads.ENV, raw)
    with pytest.raises(gpuops.GpuopsError, match=f"GPUOPS_NUM_THREADS must be a positive integer, not '{raw}'"):
        gpuops.InferenceSession(_matmul_model(), device="cpu")
    s = gpuops.InferenceSession(_matmul_model(), device="cpu", threads=2)  # an explicit count needs no default
    assert s.threads == 2


@needs_cc
def test_a_session_sets_the_native_threads_for_its_runs(native_threads):
    native_threads(1)
    s = gpuops.InferenceSession(_matmul_model(), device="cpu", threads=3)
    s.run(None, {"A": np.ones((2, 2), np.float32)})
    assert native._threads == 3 and native.function("threads_get")() == 3


_ONE_POOL = """
import os
from gpuops import native
from tests.test_native_threads import CASES, _with
names = ("depthwise planes", "max pool planes", "gemm cells", "sigmoid", "softmax", "winograd conv")
for f in names:  # their files loaded, no worker started
    _with(native.set_threads, 1, CASES[f])
before = len(os.listdir("/proc/self/task"))
native.set_threads(3)
for _ in range(2):
    for f in names:
        CASES[f]()
print(len(os.listdir("/proc/self/task")) - before)
"""


@needs_cc
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts the process's threads in /proc")
def test_the_kernels_of_every_file_share_one_pool():
    """Kernels of six files split across 3 threads, in a fresh process: 2 workers in all (a pool per
    file left the workers of the last one polling beside the next one's)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", _ONE_POOL], cwd=root, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert r.returncode == 0, r.stderr[-3000:]
    assert int(r.stdout.split()[-1]) == 2


# -- one line per cause when the kernels cannot be built ---------------------------------------------

@pytest.fixture
def fresh(monkeypatch, tmp_path):
    for name, value in (("_loaded", {}), ("_functions", {}), ("_failures", {}), ("_warned", set()),
                        ("_announced", False), ("_pool", None)):
        monkeypatch.setattr(native, name, value)
    monkeypatch.setenv("GPUOPS_NATIVE_CACHE", str(tmp_path / "cache"))
    return tmp_path


def _script(path, body):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _warnings_of(f):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        f()
    return [w for w in got if issubclass(w.category, RuntimeWarning) and "native CPU kernels" in str(w.message)]


def test_a_missing_compiler_is_one_line(fresh, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent")
    got = _warnings_of(native.prepare)
    assert len(got) == 1
    message = str(got[0].message)
    assert "\n" not in message and "CC='/nonexistent' is not an executable" in message and "set CC" not in message
    assert _warnings_of(native.prepare) == []  # once per process


def test_a_compiler_failing_every_file_is_one_line(fresh, monkeypatch):
    cc = _script(fresh / "badcc", 'case "$1" in --version) echo badcc 1.0;; *) echo "x.c:1: error: no way" >&2; exit 1;; esac\n')
    monkeypatch.setenv("CC", cc)
    got = _warnings_of(native.prepare)
    assert len(got) == 1, [str(w.message) for w in got]
    message = str(got[0].message)
    assert "\n" not in message and "failed (exit status 1)" in message and "error: no way" in message
    assert set(native.status()["failures"]) == set(native.FILES)  # each file's full reason is kept


def test_two_causes_are_two_lines(fresh, monkeypatch):
    # fails on gemm.c with one error, on every other file with another
    cc = _script(fresh / "pickycc", 'case "$1" in --version) echo pickycc 1.0; exit 0;; esac\n'
                                    'for a in "$@"; do case "$a" in gemm.c) echo "error: gemm refused" >&2; '
                                    'exit 2;; esac; done\necho "error: refused" >&2; exit 1\n')
    monkeypatch.setenv("CC", cc)
    got = sorted(str(w.message) for w in _warnings_of(native.prepare))
    assert len(got) == 2, got
    assert "gemm refused" in got[0] + got[1] and "error: refused" in got[0] + got[1]
    assert all("\n" not in m for m in got)


def test_fallback_warning_printed_once_in_a_fresh_process(tmp_path):
    """What a user sees: with CC pointing nowhere, exactly one line on stderr for the kernels."""
    import subprocess
    import sys

    env = dict(os.environ, CC=str(tmp_path / "no-cc"), GPUOPS_NATIVE_CACHE=str(tmp_path / "cache"),
               PYTHONWARNINGS="default")
    code = ("import numpy as np, gpuops\nfrom tests.test_native_threads import _matmul_model\n"
            "s = gpuops.InferenceSession(_matmul_model(), device='cpu')\n"
            "s.run(None, {'A': np.ones((2, 2), np.float32)})\n"
            "gpuops.InferenceSession(_matmul_model(), device='cpu')\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "native CPU kernels unavailable" in lines[0] and "no-cc" in lines[0], r.stderr


def test_blas_counts_are_restored_after_nested_and_concurrent_blocks():
    """The BLAS count is the process's: blocks open at once (nested here, as concurrent runs overlap)
    each set their count, and the counts found before the first come back when the last closes; a
    library already at the count is not set again."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    threads.resolve(None)  # what a session does: scan the BLAS libraries loaded now

    def counts():
        return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]

    before = counts()
    if not before:
        pytest.skip("no BLAS library found")
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        outer = counts()
        with threads.blas_threads(1):
            assert counts() == [1] * len(before)
            with threads.blas_threads(1):
                assert counts() == [1] * len(before)
            assert counts() == [1] * len(before)  # an inner block leaves the outer one's count
        assert counts() == outer
    assert counts() == before
    sets = []
    real = threads._handles
    threads._handles = [(get, lambda n, put=put: (sets.append(n), put(n))) for get, put in real]
    try:
        with threadpoolctl.threadpool_limits(1, user_api="blas"):
            with threads.blas_threads(1):
                pass
        assert sets == []  # already 1: nothing set, nothing restored
    finally:
        threads._handles = real


def test_a_run_that_calls_the_blas_sets_its_count_and_restores_it(monkeypatch):
    """A session's run of a model with a product sets each BLAS library's count to the session's threads and
    restores the count found before; with no library to set (threadpoolctl absent), it opens no block."""
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                              [onnx.numpy_helper.from_array(np.ones((3, 4), np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = gpuops.InferenceSession(model, device="cpu", threads=1, shape_plans=0)
    x = np.ones((2, 3), np.float32)
    sets = []
    monkeypatch.setattr(threads, "_handles", [(lambda: 3, sets.append)])
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.full((2, 4), 3, np.float32))
    assert sets == [1, 3]
    entered = []
    monkeypatch.setattr(threads, "_handles", [])
    monkeypatch.setattr(threads.blas_threads, "__enter__", lambda self: entered.append(self))
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.full((2, 4), 3, np.float32))
    assert entered == []
