"""DFT / STFT / window / MelWeightMatrix beyond the onnx node cases, checked against onnxruntime and
NumPy: dft_length padding and truncation, inverse transforms, complex signals, output dtypes."""

import functools

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops

from tests.ops.common import assert_op_matches_ort, run_node, run_op

RNG = np.random.default_rng(0)
_same = functools.partial(assert_op_matches_ort, rtol=1e-4, atol=1e-4)


def _complex(a):
    return a[..., 0] + 1j * a[..., 1]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("dft_length", [5, 8, 12])
@pytest.mark.parametrize("attrs", [dict(), dict(onesided=1), dict(inverse=1)])
def test_dft_v20_dft_length(device, dft_length, attrs):
    feeds = {"x": RNG.standard_normal((2, 8, 3, 1)).astype(np.float32),
             "dft_length": np.array(dft_length, np.int64), "axis": np.array(1, np.int64)}
    _same("DFT", feeds, device, opset=20, **attrs)


@pytest.mark.parametrize("axis", [0, 1, -2, -3])
def test_dft_v17_complex_axis(axis):
    x = RNG.standard_normal((4, 6, 2)).astype(np.float32)
    got = run_op("DFT", {"x": x}, opset=17, axis=axis)[0]
    np.testing.assert_allclose(_complex(got), np.fft.fft(_complex(x), axis=axis % 3), rtol=1e-5, atol=1e-5)


def test_dft_inverse_roundtrip_float64():
    x = RNG.standard_normal((3, 7, 2))
    y = run_op("DFT", {"x": x}, opset=17, axis=1)[0]
    back = run_op("DFT", {"x": y}, opset=17, axis=1, inverse=1)[0]
    assert back.dtype == np.float64
    np.testing.assert_allclose(back, x, atol=1e-12)


def test_dft_irfft_with_odd_length():
    x = RNG.standard_normal((2, 9, 1)).astype(np.float32)
    node = helper.make_node("DFT", ["x", "", "axis"], ["Y"], onesided=1)
    (spectrum,) = run_node(node, {"x": x, "axis": np.array(1, np.int64)}, opset=20)
    back = run_op("DFT", {"x": spectrum, "n": np.array(9, np.int64), "axis": np.array(1, np.int64)}, opset=20,
                  inverse=1, onesided=1)[0]
    assert back.shape == x.shape
    np.testing.assert_allclose(back, x, rtol=1e-5, atol=1e-5)


def test_dft_bad_axis():
    feeds = {"x": np.ones((2, 4, 1), np.float32)}
    with pytest.raises(gpuops.GpuopsError, match="axis"):
        run_op("DFT", feeds, opset=17, axis=2)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_window_and_length(device, onesided):
    feeds = {"signal": RNG.standard_normal((2, 50, 1)).astype(np.float32), "frame_step": np.array(6, np.int64),
             "window": np.hanning(12).astype(np.float32), "frame_length": np.array(12, np.int64)}
    _same("STFT", feeds, device, opset=17, onesided=onesided)


def test_stft_complex_signal():
    s = RNG.standard_normal((1, 40, 2)).astype(np.float32)
    feeds = {"signal": s, "frame_step": np.array(5, np.int64), "frame_length": np.array(10, np.int64)}
    (got,) = run_node(helper.make_node("STFT", ["signal", "frame_step", "", "frame_length"], ["Y"], onesided=0), feeds,
                      opset=17)
    frames = np.stack([_complex(s)[0, i:i + 10] for i in range(0, 31, 5)])
    np.testing.assert_allclose(_complex(got[0]), np.fft.fft(frames, axis=-1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size", [1, 7, 10])
def test_windows(op, periodic, size):
    _same(op, {"size": np.array(size, np.int64)}, opset=17, rtol=1e-6, atol=1e-6, periodic=periodic)


def test_window_output_datatype_double():
    got = run_op("HannWindow", {"size": np.array(9, np.int32)}, opset=17, output_datatype=TensorProto.DOUBLE,
                 periodic=0)[0]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, np.hanning(9), atol=1e-15)


@pytest.mark.parametrize("params", [(8, 16, 8192, 0.0, 4096.0), (10, 64, 16000, 20.0, 7600.0),
                                    (5, 31, 22050, 300.0, 8000.0)])
def test_melweightmatrix(params):
    names = ["num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz"]
    feeds = {k: np.array(v, np.int64 if i < 3 else np.float32) for i, (k, v) in enumerate(zip(names, params))}
    _same("MelWeightMatrix", feeds, opset=17, rtol=1e-6, atol=1e-6)
