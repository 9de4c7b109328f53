"""Fuzz properties (see tests/fuzz/__init__.py). Example counts are small and derandomized here;
``python -m tests.fuzz --minutes N`` runs them as a campaign."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import gpuops
from gpuops.errors import GpuopsError

from tests.ops.common import make_model

from . import examples, indexing, mdf
from .models import initializer_model
from .mutate import SEEDS, corrupted_bytes, feed_values, mutated_models
from .oracle import DEVICES, attempt, check_model, ort_outcome, quiet, same


@settings(max_examples=examples(200))
@given(mutated_models())
def test_mutated_models(case):
    _, model, feeds = case
    check_model(model, feeds)


@settings(max_examples=examples(100))
@given(corrupted_bytes())
def test_corrupted_model_bytes(data):
    check_model(data, SEEDS["mlp"][1], devices=("cpu",))


SESSIONS = {}


def _session(name, device):
    """One session per seed and device, shared by the examples: errors must not spoil it."""
    if (name, device) not in SESSIONS:
        model, feeds = SEEDS[name]
        SESSIONS[name, device] = (gpuops.InferenceSession(model, device=device), ort_outcome(model, feeds)[1])
    return SESSIONS[name, device]


@settings(max_examples=examples(100))
@given(st.data())
def test_mutated_feeds(data):
    name = data.draw(st.sampled_from(sorted(SEEDS)))
    model, good = SEEDS[name]
    feeds = dict(good)
    key = data.draw(st.sampled_from(sorted(feeds) + ["extra", 7]))
    what = data.draw(st.sampled_from(["value", "value", "missing", "extra"]))
    if what == "missing":
        feeds.pop(key, None)
    elif what == "extra" or key not in feeds:
        feeds[key] = good[next(iter(good))]
    else:
        feeds[key] = data.draw(feed_values(good[key]))
    for device in DEVICES:
        sess, want = _session(name, device)
        got = attempt(sess.run, None, feeds)
        if got[0] == "ok":
            ref = ort_outcome(model, {k: np.asarray(v) for k, v in feeds.items()}) if _arrays(feeds) else ("skip",)
            if ref[0] == "ok":
                same(got[1], ref[1], f"{device} {name}")
        ok = attempt(sess.run, None, dict(good))
        assert ok[0] == "ok", f"{device}: the session fails after a bad feed: {ok[1]}"
        same(ok[1], want, f"{device} {name} after a bad feed")


def _arrays(feeds):
    return all(isinstance(k, str) and isinstance(v, np.ndarray) and v.dtype != object for k, v in feeds.items())


@pytest.mark.parametrize("op", sorted(indexing.CASES))
@settings(max_examples=examples(25))
@given(data=st.data())
def test_indexing_ops_refuse_what_onnxruntime_refuses(op, data):
    nodes, feeds, valid = indexing.CASES[op](data.draw)
    model = make_model(nodes, feeds, opset=18)
    want = ort_outcome(model, feeds)
    fixed = {**feeds, **(valid or {})}
    fixed_want = ort_outcome(model, fixed) if valid else ("skip", None)
    for device in DEVICES:
        made = attempt(gpuops.InferenceSession, model, device=device)
        if made[0] == "error":
            assert want[0] != "ok", f"{device}: gpuops refused a model onnxruntime runs: {made[1]}"
            continue
        sess = made[1]
        got = attempt(sess.run, None, feeds)
        if want[0] == "error":
            assert got[0] == "error", f"{device}: gpuops answered {got[1]} where onnxruntime raised: {want[1]}"
        elif want[0] == "ok":
            assert got[0] == "ok", f"{device}: gpuops raised where onnxruntime answers: {got[1]}"
            same(got[1], want[1], f"{device} {op}")
        if fixed_want[0] == "ok":
            again = attempt(sess.run, None, fixed)
            assert again[0] == "ok", f"{device}: the session fails after an error: {again[1]}"
            same(again[1], fixed_want[1], f"{device} {op} after an error")


# -- MDF ---------------------------------------------------------------------------------------------

def _eval_expression(source, device):
    from gpuops.device import get_device, to_host
    from gpuops.mdf.expr import Values, compile_expr

    values = Values(get_device(device))
    scope = {k: values.literal(v) for k, v in mdf.SCOPE.items()}
    fn = compile_expr(source, set(scope), values, "node 'n', parameter 'p'")
    try:
        value = fn(scope)
    except GpuopsError:
        raise
    except Exception as e:  # a running expression fails as the node does: NodeError
        raise gpuops.NodeError(f"{type(e).__name__}: {e}") from e
    return to_host(value) if hasattr(value, "shape") else value


@settings(max_examples=examples(150))
@given(st.one_of(mdf.scalar_expressions, mdf.array_expressions))
def test_mdf_expressions_match_python(source):
    want = mdf.oracle(source)
    for device in DEVICES:
        got = attempt(_eval_expression, source, device)
        if got[0] == "ok" and want is not None:
            np.testing.assert_allclose(np.asarray(got[1], dtype=np.float64), np.asarray(want, dtype=np.float64),
                                       rtol=1e-9, atol=1e-12, err_msg=f"{device}: {source}")


@pytest.mark.parametrize("source", mdf.HOSTILE, ids=range(len(mdf.HOSTILE)))
def test_hostile_mdf_expressions_are_refused_quickly(source):
    """Each hostile expression is refused with a GpuopsError (or, for the few within gpuops' limits,
    gives Python's own value), on every device, within ``mdf.REFUSE_SECONDS``."""
    for device in DEVICES:
        t0 = time.monotonic()
        got = attempt(_eval_expression, source, device)
        took = time.monotonic() - t0
        assert took < mdf.REFUSE_SECONDS, f"{device}: {source[:60]!r} took {took:.1f} s"
        if source in mdf.BOUNDED:
            assert got[0] == "ok", f"{device}: {source!r} is within the limits but raised {got[1]}"
            want = mdf.python_value(source)
            if isinstance(want, str):
                assert got[1] == want
            else:
                np.testing.assert_array_equal(np.asarray(got[1], np.float64), np.asarray(want, np.float64))
        else:
            assert got[0] == "error", f"{device}: {source[:60]!r} was evaluated to {str(got[1])[:80]}"


def _mdf_model(weight, shape, value, function, opset):
    from modeci_mdf.mdf import Edge, InputPort, Node, OutputPort, Parameter

    from tests.mdf.reference import mdf_model

    a = Node(id="a")
    a.parameters.append(Parameter(id="level", value=value))
    a.output_ports.append(OutputPort(id="out", value="level"))
    b = Node(id="b")
    b.input_ports.append(InputPort(id="inp", shape=shape))
    b.parameters.append(Parameter(id="f", function=function, args={"variable0": "inp", "scale": 2}))
    b.output_ports.append(OutputPort(id="out", value="f"))
    e = Edge(id="e", sender="a", receiver="b", sender_port="out", receiver_port="inp",
             parameters=None if weight is None else {"weight": weight})
    model = mdf_model(a, b, edges=[e])
    if opset is not None:
        model.onnx_opset_version = opset
    return model


@settings(max_examples=examples(40))
@example(weight=[1.0, 2.0], shape=None, value=[1.0, 2.0, 3.0], function="sin", opset=None)  # weight of another length
@example(weight=0.5, shape=None, value=None, function="sin", opset=None)  # a weight applied to None
@given(weight=st.sampled_from([None, 1, 0.5, -2.0, "abc", "2 * 3", [1.0, 2.0], float("nan"), {"x": 1}, True]),
       shape=st.sampled_from([None, [1], [3], [-1, 3], [2 ** 20, 2 ** 20], "abc", [0]]),
       value=st.sampled_from([1.0, [1.0, 2.0, 3.0], "1 + 2", "unknown(1)", "9**9**9", "level", None, "abc", [[1], [2, 3]]]),
       function=st.sampled_from(["sin", "tanh", "nope", "", "onnx::Relu"]),
       opset=st.sampled_from([None, 13, "abc", -1, 10 ** 9]))
def test_mutated_mdf_models(weight, shape, value, function, opset):
    pytest.importorskip("modeci_mdf")
    from gpuops.mdf import MDFSession

    with quiet():
        try:
            model = _mdf_model(weight, shape, value, function, opset)
        except Exception:  # modeci_mdf refuses to build it: nothing to give gpuops
            return
    for device in DEVICES:
        made = attempt(MDFSession, model, device=device)
        if made[0] == "ok":
            first = attempt(made[1].run)
            again = attempt(made[1].run)
            assert again[0] == first[0], f"{device}: second run {again[0]}, first {first[0]}"


@settings(max_examples=examples(60))
@given(meta=st.dictionaries(st.sampled_from(["location", "offset", "length", "checksum", "basepath", "bogus"]),
                            st.one_of(st.sampled_from(["w.bin", "./w.bin", "sub/../w.bin", "../w.bin", "/etc/passwd",
                                                       "w.bin\0", "loop", "sub", "0", "8", "-8", "24", "1e3", "abc",
                                                       str(2 ** 62), str(10 ** 12), "x" * 300]),
                                      st.text(max_size=8)), max_size=4))
def test_external_data_metadata(meta):
    with tempfile.TemporaryDirectory() as tmp:
        _check_external(Path(tmp), meta)


def _check_external(folder, meta):
    data = b"\0" * 8 + np.arange(6, dtype=np.float32).tobytes()
    (folder / "w.bin").write_bytes(data)
    (folder / "sub").mkdir()
    (folder / "loop").symlink_to("loop")
    t = onnx.TensorProto(name="w", data_type=onnx.TensorProto.FLOAT, dims=[2, 3],
                         data_location=onnx.TensorProto.EXTERNAL)
    for k, v in meta.items():
        t.external_data.add(key=k, value=v)
    onnx.save(initializer_model(weight=t), folder / "m.onnx")
    x = np.ones((2, 3), np.float32)
    for device in DEVICES:
        got = attempt(lambda: gpuops.InferenceSession(folder / "m.onnx", device=device).run(None, {"x": x}))
        if got[0] == "ok":  # then it read the 24 bytes at the offset given
            offset = int(meta.get("offset", 0))
            w = np.frombuffer(data[offset:offset + 24], np.float32).reshape(2, 3)
            np.testing.assert_array_equal(got[1][0], w + 1)
