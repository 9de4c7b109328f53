"""RNN / GRU / LSTM beyond the onnx node cases: sequence_lens, bidirectional, clip, custom activations,
peepholes, input_forget, layout=1 and the legacy opset-1 attributes, checked against onnxruntime."""

import numpy as np
import pytest

import gpuops

from tests.ops.common import assert_same, one_node_model, run_op, run_ort
from tests.ort_versions import requires_ort


def _check(op, feeds, outputs, attrs, opset=14, device="cpu", ref_opset=None):
    """Run one node in gpuops and onnxruntime (at ``ref_opset`` if given) and compare every output.

    onnxruntime has no layout=1 kernels: its reference runs on the transposed layout-0 problem."""
    ref_attrs = {k: v for k, v in attrs.items() if k not in ("output_sequence", "layout")}
    layout = attrs.get("layout", 0)
    ref_feeds = {k: np.swapaxes(v, 0, 1) if layout and k in ("X", "initial_h", "initial_c") else v
                 for k, v in feeds.items()}
    want = run_ort(one_node_model(op, ref_feeds, outputs, opset=ref_opset or opset, **ref_attrs), ref_feeds)
    if layout:
        want = [np.transpose(w, (2, 0, 1, 3)) if w.ndim == 4 else np.swapaxes(w, 0, 1) for w in want]
    got = run_op(op, feeds, device, outputs=outputs, opset=opset, **attrs)
    assert_same(got, want, 1e-5, 1e-5, outputs)


def _feeds(rng, n_gates, D, T=5, batch=4, I=3, H=4, layout=0, seq=True, c=False, peep=False):
    f = rng.standard_normal
    X = f((T, batch, I)) if layout == 0 else f((batch, T, I))
    h0 = (D, batch, H) if layout == 0 else (batch, D, H)
    feeds = {"X": X * 2, "W": f((D, n_gates * H, I)), "R": f((D, n_gates * H, H)),
             "B": f((D, 2 * n_gates * H))}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    feeds["sequence_lens"] = (np.array([T, 2, 1, T - 1], np.int32)[:batch] if seq
                              else np.full(batch, T, np.int32))
    feeds["initial_h"] = f(h0).astype(np.float32)
    if c:
        feeds["initial_c"] = f(h0).astype(np.float32)
    if peep:
        feeds["P"] = f((D, 3 * H)).astype(np.float32)
    return feeds


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("layout", [0, 1])
def test_gru_bidirectional_sequence_lens(device, linear_before_reset, layout):
    feeds = _feeds(np.random.default_rng(1), 3, 2, layout=layout)
    _check("GRU", feeds, ["Y", "Y_h"], dict(hidden_size=4, direction="bidirectional", layout=layout,
                                           linear_before_reset=linear_before_reset), device=device)


@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_gru_clip_and_activations(direction):
    feeds = _feeds(np.random.default_rng(2), 3, 1)
    _check("GRU", feeds, ["Y", "Y_h"], dict(hidden_size=4, direction=direction, clip=0.8,
                                           activations=["HardSigmoid", "LeakyRelu"],
                                           activation_alpha=[0.3, 0.1], activation_beta=[0.4]))


@pytest.mark.parametrize("attrs", [
    dict(direction="bidirectional", clip=0.7),
    dict(direction="reverse", input_forget=1),
    dict(activations=["HardSigmoid", "Elu", "Softsign"], activation_alpha=[0.3, 1.5], activation_beta=[0.4]),
    dict(direction="bidirectional", layout=1,
         activations=["Sigmoid", "Tanh", "Tanh", "Sigmoid", "ScaledTanh", "Softplus"],
         activation_alpha=[1.2], activation_beta=[0.7]),
], ids=["bidi-clip", "reverse-input_forget", "activations", "bidi-layout1-mixed"])
def test_lstm(attrs):
    D = 2 if attrs.get("direction") == "bidirectional" else 1
    feeds = _feeds(np.random.default_rng(3), 4, D, layout=attrs.get("layout", 0), c=True, peep=True)
    _check("LSTM", feeds, ["Y", "Y_h", "Y_c"], dict(hidden_size=4, **attrs))


@pytest.mark.parametrize("attrs", [
    pytest.param(dict(direction="bidirectional", activations=["Relu", "Affine"], activation_alpha=[0.5],
                      activation_beta=[0.1]),
                 marks=requires_ort("1.24", "its RNN kernel aborts the process on the Affine activation")),
    dict(direction="reverse", activations=["ThresholdedRelu"], activation_alpha=[0.2], clip=1.5),
    dict(layout=1),
])
def test_rnn(attrs):
    D = 2 if attrs.get("direction") == "bidirectional" else 1
    feeds = _feeds(np.random.default_rng(4), 1, D, layout=attrs.get("layout", 0))
    _check("RNN", feeds, ["Y", "Y_h"], dict(hidden_size=4, **attrs))


def test_opset1_output_sequence_is_accepted():
    """Opset-1 GRU carries the (removed later) output_sequence attribute; results equal opset 7's."""
    feeds = _feeds(np.random.default_rng(5), 3, 1, seq=False)
    _check("GRU", feeds, ["Y", "Y_h"], dict(hidden_size=4, output_sequence=1, linear_before_reset=1),
           opset=3, ref_opset=7)


def test_wrong_direction_count_is_an_error():
    feeds = _feeds(np.random.default_rng(6), 1, 1)
    with pytest.raises(gpuops.GpuopsError, match="2 direction"):
        run_op("RNN", feeds, outputs=["Y"], opset=14, hidden_size=4, direction="bidirectional")
