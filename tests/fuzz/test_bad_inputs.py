"""Regressions: bad inputs found by trying gpuops as a new user would. Each gets a gpuops error
naming its node, or onnxruntime's result (onnxruntime is the oracle, run in this process: these
models are well formed)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import gpuops
from gpuops.errors import ModelError, NodeError

from tests.ops.common import make_model
from tests.ort_versions import ort_older_than, requires_ort

from .models import initializer_model
from .oracle import DEVICES

ort.set_default_logger_severity(4)


def _ort(model, feeds):
    """("ok", outputs) or ("error", message) from onnxruntime's CPU provider."""
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return "ok", sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - a refusal is the answer
        return "error", str(e)


def _agree(model, feeds, node_name, aborts_before=None):
    """gpuops on every device answers as onnxruntime does: the same values, or a NodeError naming
    ``node_name`` where onnxruntime refuses. ``aborts_before``: the onnxruntime version from which it
    refuses the input with an error; an older one aborts the process, so it is not asked and the
    answer is its refusal."""
    if aborts_before is not None and ort_older_than(aborts_before):
        want = ("error", f"onnxruntime < {aborts_before} aborts the process")
    else:
        want = _ort(model, feeds)
    for device in DEVICES:
        sess = gpuops.InferenceSession(model, device=device)
        if want[0] == "error":
            with pytest.raises(NodeError, match=node_name):
                sess.run(None, feeds)
        else:
            got = sess.run(None, feeds)
            for g, w in zip(got, want[1]):
                assert g.shape == w.shape, f"{device}: shape {g.shape}, onnxruntime {w.shape}"
                np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{device}: NaN positions")
                finite = np.abs(w[np.isfinite(w)])
                scale = max(1.0, float(finite.max())) if finite.size else 1.0
                # float32 sums (or an FFT) of at most 8 terms: 8 * eps of the largest magnitude
                np.testing.assert_allclose(g, w, rtol=0, atol=8 * np.finfo(np.float32).eps * scale, err_msg=device)
    return want[0]


def test_external_data_offset_past_the_end_is_a_model_error(tmp_path):
    (tmp_path / "w.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    t = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3], data_location=TensorProto.EXTERNAL)
    t.external_data.add(key="location", value="w.bin")
    t.external_data.add(key="offset", value="100")  # the file has 24 bytes; no length given
    onnx.save(initializer_model(weight=t), tmp_path / "m.onnx")
    with pytest.raises(ModelError, match="offset 100 runs past the end of the file"):
        gpuops.InferenceSession(tmp_path / "m.onnx", device="cpu")


@pytest.mark.parametrize("bad", [-1, 16, 2 ** 40])
def test_max_unpool_index_out_of_range(bad):
    node = helper.make_node("MaxUnpool", ["x", "i"], ["y"], name="unpool", kernel_shape=[2, 2], strides=[2, 2])
    feeds = {"x": np.arange(1, 5, dtype=np.float32).reshape(1, 1, 2, 2),
             "i": np.array([0, 5, 10, bad], np.int64).reshape(1, 1, 2, 2)}
    # onnxruntime 1.23 (the last for Python 3.10) aborts the process on an index past the output
    assert _agree(make_model(node, feeds), feeds, "unpool", aborts_before="1.24" if bad >= 0 else None) == "error"
    feeds["i"] = np.array([0, 5, 10, 15], np.int64).reshape(1, 1, 2, 2)  # and in range: onnxruntime's values
    assert _agree(make_model(node, feeds), feeds, "unpool") == "ok"


@pytest.mark.parametrize("lens", [[5, 1], [-1, 1], [2 ** 40, 1], pytest.param([0, 4], marks=requires_ort(
    "1.24", "it writes zeros for a sequence of length 0 instead of copying it unchanged"))])
def test_reverse_sequence_lengths_outside_the_time_axis(lens):
    node = helper.make_node("ReverseSequence", ["x", "l"], ["y"], name="rev", batch_axis=1, time_axis=0)
    feeds = {"x": np.arange(8, dtype=np.float32).reshape(4, 2), "l": np.array(lens, np.int64)}
    want = _agree(make_model(node, feeds), feeds, "rev")
    assert want == ("ok" if all(0 <= v <= 4 for v in lens) else "error")


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceProd", "ReduceMax", "ReduceMean"])
@pytest.mark.parametrize("keepdims", [0, 1, 2, 2 ** 31 - 1, 2 ** 63 - 1, -1])
def test_reduce_keepdims_other_than_one_drops_the_axes(op, keepdims):
    node = helper.make_node(op, ["x", "a"], ["y"], name="red", keepdims=keepdims)
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "a": np.array([1], np.int64)}
    assert _agree(make_model(node, feeds, opset=18), feeds, "red") == "ok"


@requires_ort("1.24", "it refuses inverse one-sided DFT ('is_onesided and inverse attributes cannot be enabled "
                      "at the same time')")
@pytest.mark.parametrize("n", [None, 4, 6, 7])
@pytest.mark.parametrize("where", [(0, 0, 0), (0, 0, 1), (0, 2, 1), (0, 3, 1), (0, 3, 0)])
def test_inverse_onesided_dft_with_nan_matches_onnxruntime(n, where):
    x = np.random.default_rng(0).standard_normal((1, 4, 2)).astype(np.float32)
    x[where] = np.nan
    inputs = ["x", "n" if n is not None else "", "ax"]
    feeds = {"x": x, "ax": np.array(1, np.int64), **({"n": np.array(n, np.int64)} if n is not None else {})}
    node = helper.make_node("DFT", inputs, ["y"], name="dft", inverse=1, onesided=1)
    assert _agree(make_model(node, feeds, opset=20), feeds, "dft") == "ok"
