"""DFT / STFT / window / MelWeightMatrix beyond the onnx node cases, checked against onnxruntime and
NumPy: dft_length padding and truncation, inverse transforms, complex signals, output dtypes."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import gpuops
from tests.conformance.harness import device_guard

RNG = np.random.default_rng(0)


def _model(op, feeds, attrs, opset, inputs=None):
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in feeds.items()]
    node = helper.make_node(op, list(feeds) if inputs is None else inputs, ["Y"], **attrs)
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _gpuops(op, feeds, attrs, opset, inputs=None, device="cpu"):
    sess = gpuops.InferenceSession(_model(op, feeds, attrs, opset, inputs), device=device)
    with device_guard(device):
        return sess.run(None, feeds)[0]


def _same(op, feeds, attrs, opset, inputs=None, device="cpu", tol=1e-4):
    got = _gpuops(op, feeds, attrs, opset, inputs, device)
    model = _model(op, feeds, attrs, opset, inputs)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def _complex(a):
    return a[..., 0] + 1j * a[..., 1]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("dft_length", [5, 8, 12])
@pytest.mark.parametrize("attrs", [dict(), dict(onesided=1), dict(inverse=1)])
def test_dft_v20_dft_length(device, dft_length, attrs):
    feeds = {"x": RNG.standard_normal((2, 8, 3, 1)).astype(np.float32),
             "dft_length": np.array(dft_length, np.int64), "axis": np.array(1, np.int64)}
    _same("DFT", feeds, attrs, 20, device=device)


@pytest.mark.parametrize("axis", [0, 1, -2, -3])
def test_dft_v17_complex_axis(axis):
    x = RNG.standard_normal((4, 6, 2)).astype(np.float32)
    got = _gpuops("DFT", {"x": x}, dict(axis=axis), 17)
    np.testing.assert_allclose(_complex(got), np.fft.fft(_complex(x), axis=axis % 3), rtol=1e-5, atol=1e-5)


def test_dft_inverse_roundtrip_float64():
    x = RNG.standard_normal((3, 7, 2))
    y = _gpuops("DFT", {"x": x}, dict(axis=1), 17)
    back = _gpuops("DFT", {"x": y}, dict(axis=1, inverse=1), 17)
    assert back.dtype == np.float64
    np.testing.assert_allclose(back, x, atol=1e-12)


def test_dft_irfft_with_odd_length():
    x = RNG.standard_normal((2, 9, 1)).astype(np.float32)
    spectrum = _gpuops("DFT", {"x": x, "axis": np.array(1, np.int64)}, dict(onesided=1), 20, inputs=["x", "", "axis"])
    back = _gpuops("DFT", {"x": spectrum, "n": np.array(9, np.int64), "axis": np.array(1, np.int64)},
                   dict(inverse=1, onesided=1), 20)
    assert back.shape == x.shape
    np.testing.assert_allclose(back, x, rtol=1e-5, atol=1e-5)


def test_dft_bad_axis():
    feeds = {"x": np.ones((2, 4, 1), np.float32)}
    model = _model("DFT", feeds, dict(axis=2), 17)
    with pytest.raises(gpuops.GpuopsError, match="axis"):
        gpuops.InferenceSession(model, device="cpu").run(None, feeds)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_window_and_length(device, onesided):
    feeds = {"signal": RNG.standard_normal((2, 50, 1)).astype(np.float32), "frame_step": np.array(6, np.int64),
             "window": np.hanning(12).astype(np.float32), "frame_length": np.array(12, np.int64)}
    _same("STFT", feeds, dict(onesided=onesided), 17, device=device)


def test_stft_complex_signal():
    s = RNG.standard_normal((1, 40, 2)).astype(np.float32)
    feeds = {"signal": s, "frame_step": np.array(5, np.int64), "frame_length": np.array(10, np.int64)}
    got = _gpuops("STFT", feeds, dict(onesided=0), 17, inputs=["signal", "frame_step", "", "frame_length"])
    frames = np.stack([_complex(s)[0, i:i + 10] for i in range(0, 31, 5)])
    np.testing.assert_allclose(_complex(got[0]), np.fft.fft(frames, axis=-1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size", [1, 7, 10])
def test_windows(op, periodic, size):
    _same(op, {"size": np.array(size, np.int64)}, dict(periodic=periodic), 17, tol=1e-6)


def test_window_output_datatype_double():
    got = _gpuops("HannWindow", {"size": np.array(9, np.int32)}, dict(output_datatype=TensorProto.DOUBLE,
                                                                     periodic=0), 17)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, np.hanning(9), atol=1e-15)


@pytest.mark.parametrize("params", [(8, 16, 8192, 0.0, 4096.0), (10, 64, 16000, 20.0, 7600.0),
                                    (5, 31, 22050, 300.0, 8000.0)])
def test_melweightmatrix(params):
    names = ["num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz"]
    feeds = {k: np.array(v, np.int64 if i < 3 else np.float32) for i, (k, v) in enumerate(zip(names, params))}
    _same("MelWeightMatrix", feeds, dict(), 17, tol=1e-6)
