"""The properties every fuzz case checks, given concrete models and feeds."""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import threading
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, TimeoutError
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from hypothesis import reject

import gpuops
from gpuops.errors import GpuopsError, UnsupportedOpError

from tests.ops.common import assert_same

DEVICES = ("cpu", "cuda")  # "cuda" is the CPU stand-in of CuPy without a GPU
MAX_ELEMENTS = 1 << 20  # cases whose inferred tensors are larger are skipped (memory, time)
ort.set_default_logger_severity(4)


@contextlib.contextmanager
def quiet():
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def attempt(fn, *args, **kwargs):
    """("ok", value) or ("error", GpuopsError); any other exception escapes: that is a finding."""
    try:
        with quiet():
            return "ok", fn(*args, **kwargs)
    except GpuopsError as e:
        return "error", e


def ort_outcome(model: onnx.ModelProto, feeds: dict, *, bound: bool = False):
    """onnxruntime's answer: ("ok", outputs), ("error", message), or ("skip", None) for models the
    onnx checker refuses or that kill onnxruntime (they run in a worker process: onnx and
    onnxruntime abort on some malformed models). ``bound``: first reject the Hypothesis case when
    a tensor may be too large or a Loop may not end (see :func:`_bounded`)."""
    global _POOL
    if _POOL is None:
        _POOL = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_setup,
                                    initargs=(os.getpid(),))
    try:
        answer = _POOL.submit(_oracle, model.SerializeToString(), feeds, bound).result(timeout=120)
    except (BrokenProcessPool, TimeoutError):  # the worker died or hangs: a new one next time
        for p in list(getattr(_POOL, "_processes", {}).values()):
            p.kill()
        _POOL.shutdown(wait=False, cancel_futures=True)
        _POOL, answer = None, ("skip", None)
    if answer[0] == "reject":
        reject()
    return answer


_POOL = None


def _worker_setup(parent: int) -> None:
    """The oracle worker never outlives the fuzzing process (which a malformed model may kill) and
    never holds its stdout or stderr: it writes to the null device, and a thread ends it once its
    parent is gone."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _oracle(data: bytes, feeds: dict, bound: bool):
    model = onnx.ModelProto()
    model.ParseFromString(data)
    if bound and not _bounded(model):
        return "reject", None
    try:
        with quiet():
            onnx.checker.check_model(model, full_check=True)
    except Exception:
        return "skip", None
    try:
        with quiet():
            sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
            return "ok", sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - any refusal is an answer
        return "error", f"{type(e).__name__}: {e}"


def _bounded(model: onnx.ModelProto) -> bool:
    """False when a Loop may not end (no trip count, or a large one: a model may legitimately loop
    forever, in onnxruntime too) or shape inference (with data propagation) finds a tensor too
    large to fuzz with."""
    inits = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Loop":
            m = inits.get(node.input[0]) if node.input else None
            try:
                if m is None or abs(int(numpy_helper.to_array(m))) > 100:
                    return False
            except Exception:
                return False
    try:
        with quiet():
            inferred = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    except Exception:
        return True
    for vi in [*inferred.value_info, *inferred.output, *inferred.input]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            size = 1
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_value"):
                    size *= max(d.dim_value, 1)
            if size > MAX_ELEMENTS:
                return False
    return True


def same(got, want, what: str) -> None:
    assert_same([np.asarray(g) for g in got], [np.asarray(w) for w in want], rtol=1e-4, atol=1e-5,
                names=[f"{what} output {i}" for i in range(len(want))])


def check_model(model, feeds: dict, *, ort_must_agree: bool = False, devices=DEVICES):
    """Load and run ``model`` (a ModelProto or serialized bytes) on every device: only GpuopsErrors;
    results equal onnxruntime's where both answer; a second run gives the same outcome.
    ``ort_must_agree``: gpuops must also refuse exactly what onnxruntime refuses (at run time)."""
    proto = model if isinstance(model, onnx.ModelProto) else None
    if os.environ.get("GPUOPS_FUZZ_DUMP"):  # a campaign keeps the case at hand, should it hang
        with open(os.environ["GPUOPS_FUZZ_DUMP"], "wb") as f:
            f.write(proto.SerializeToString() if proto is not None else model)
    want = ort_outcome(proto, feeds, bound=True) if proto is not None else ("skip", None)
    for device in devices:
        made = attempt(gpuops.InferenceSession, model, device=device)
        if made[0] == "error":
            if ort_must_agree and want[0] == "ok" and not isinstance(made[1], UnsupportedOpError):
                raise AssertionError(f"{device}: gpuops refused a model onnxruntime runs: {made[1]}")
            continue
        sess = made[1]
        first = attempt(sess.run, None, dict(feeds))
        if first[0] == "ok" and want[0] == "ok":
            same(first[1], want[1], device)
        if ort_must_agree and want[0] != "skip":
            assert first[0] == want[0], (f"{device}: gpuops {first[0]} ({first[1] if first[0] == 'error' else ''}) "
                                         f"where onnxruntime {want[0]} ({want[1] if want[0] == 'error' else ''})")
        again = attempt(sess.run, None, dict(feeds))
        assert again[0] == first[0], f"{device}: second run {again[0]}, first {first[0]}"
        if first[0] == "ok":
            same(again[1], first[1], f"{device} second run")
