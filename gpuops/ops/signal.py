"""Signal processing ops: DFT (17, 20), STFT (17), Hann/Hamming/Blackman windows and MelWeightMatrix (17).

Signals carry a trailing axis of 1 (real) or 2 (real, imaginary). Transforms run on the device's FFT
(``xp.fft``); windows and mel filter banks depend only on host values, so they are built on the
host and sent to the device once.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import np_dtype
from ..errors import NodeError
from ..registry import op


def _work_dtype(dtype):
    """FFT precision for a float input dtype (half types are computed in float32)."""
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


def _to_signal(xp, x):
    """[..., 1] real or [..., 2] complex -> a real or complex array without the trailing axis."""
    if x.shape[-1] not in (1, 2):
        raise NodeError(f"the last dimension of a signal must be 1 (real) or 2 (complex), got {x.shape[-1]}")
    x = xp.astype(x, _work_dtype(x.dtype))
    if x.shape[-1] == 1:
        return x[..., 0]
    return x[..., 0] + 1j * x[..., 1]


def _from_complex(xp, y, dtype):
    return xp.astype(xp.stack([xp.real(y), xp.imag(y)], axis=-1), dtype)


def _dft(xp, input, dft_length, axis, inverse, onesided):
    rank = input.ndim
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise NodeError(f"DFT axis {axis} is out of range for an input of rank {rank}")
    axis %= rank
    n_in = input.shape[axis]
    if dft_length is not None:
        n = int(np.asarray(dft_length).reshape(()))
        if n <= 0:
            raise NodeError(f"dft_length must be positive, got {n}")
    else:
        n = 2 * (n_in - 1) if inverse and onesided else n_in
    x = _to_signal(xp, input)
    real = input.shape[-1] == 1
    if inverse and onesided:  # a one-sided spectrum back to its real signal
        y = xp.fft.irfft(x, n=n, axis=axis)
        if not real:  # irfft drops the imaginary parts of the bins at 0 and n/2; onnxruntime multiplies
            # them by 0, so a NaN or infinity there makes the whole signal NaN: so does gpuops
            used = [k for k in sorted({0, n // 2 if n % 2 == 0 else 0}) if k < n_in]
            dropped = xp.take(xp.imag(x), xp.asarray(np.array(used, np.int64)), axis=axis)
            y = xp.where(xp.any(~xp.isfinite(dropped), axis=axis, keepdims=True), xp.asarray(np.nan, dtype=y.dtype), y)
        return xp.astype(y[..., None], input.dtype)
    if inverse:
        y = xp.fft.ifft(x, n=n, axis=axis)
    elif onesided and real:
        y = xp.fft.rfft(x, n=n, axis=axis)
    else:
        y = xp.fft.fft(x, n=n, axis=axis)
        if onesided:
            y = xp.take(y, xp.arange(n // 2 + 1), axis=axis)
    return _from_complex(xp, y, input.dtype)


@op("DFT", since=17, host_inputs=(1,))
def DFT_17(xp, input, dft_length=None, *, axis=1, inverse=0, onesided=0):
    return _dft(xp, input, dft_length, axis, inverse, onesided)


@op("DFT", since=20, host_inputs=(1, 2))
def DFT(xp, input, dft_length=None, axis=None, *, inverse=0, onesided=0):
    axis = -2 if axis is None else int(np.asarray(axis).reshape(()))
    return _dft(xp, input, dft_length, axis, inverse, onesided)


@op("STFT", since=17, host_inputs=(1, 3))
def STFT(xp, signal, frame_step, window=None, frame_length=None, *, onesided=1):
    if signal.ndim != 3:
        raise NodeError(f"STFT signal must be [batch, length, 1|2], got shape {tuple(signal.shape)}")
    step = int(np.asarray(frame_step).reshape(()))
    length = signal.shape[1]
    if frame_length is not None:
        n = int(np.asarray(frame_length).reshape(()))
        if window is not None and window.shape[0] != n:
            raise NodeError(f"STFT window has {window.shape[0]} values but frame_length is {n}")
    else:
        n = window.shape[0] if window is not None else length
    if step <= 0 or not 0 < n <= length:
        raise NodeError(f"STFT needs frame_step > 0 and 0 < frame_length <= {length} (got {step}, {n})")
    n_frames = 1 + (length - n) // step
    starts = np.arange(n_frames) * step
    idx = (starts[:, None] + np.arange(n)[None, :]).reshape(-1)
    x = _to_signal(xp, signal)  # (batch, length)
    frames = xp.reshape(xp.take(x, xp.asarray(idx), axis=1), (signal.shape[0], n_frames, n))
    if window is not None:
        frames = frames * xp.astype(window, _work_dtype(window.dtype))
    if onesided and signal.shape[-1] == 1:
        y = xp.fft.rfft(frames, n=n, axis=-1)
    else:
        y = xp.fft.fft(frames, n=n, axis=-1)
        if onesided:
            y = y[..., :n // 2 + 1]
    return _from_complex(xp, y, signal.dtype)


# -- windows ------------------------------------------------------------------------------------

def _cosine_window(xp, size, periodic, output_datatype, coeffs):
    """sum_k (-1)^k coeffs[k] cos(2 pi k n / N), with N = size (periodic) or size - 1 (symmetric)."""
    size = int(np.asarray(size).reshape(()))
    if size < 0:
        raise NodeError(f"window size must be non-negative, got {size}")
    N = size if periodic else size - 1
    n = np.arange(size, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # a symmetric window of size 1 is 0/0 = NaN (as onnxruntime)
        w = sum((-1) ** k * a * np.cos(2 * np.pi * k * n / N) for k, a in enumerate(coeffs))
    return xp.asarray(w.astype(np_dtype(output_datatype)))


@op("HannWindow", since=17, host_inputs=(0,))
def HannWindow(xp, size, *, output_datatype=1, periodic=1):
    return _cosine_window(xp, size, periodic, output_datatype, (0.5, 0.5))


@op("HammingWindow", since=17, host_inputs=(0,))
def HammingWindow(xp, size, *, output_datatype=1, periodic=1):
    return _cosine_window(xp, size, periodic, output_datatype, (25 / 46, 21 / 46))


@op("BlackmanWindow", since=17, host_inputs=(0,))
def BlackmanWindow(xp, size, *, output_datatype=1, periodic=1):
    return _cosine_window(xp, size, periodic, output_datatype, (0.42, 0.5, 0.08))


@op("MelWeightMatrix", since=17, host_inputs=(0, 1, 2, 3, 4))
def MelWeightMatrix(xp, num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz, *,
                    output_datatype=1):
    n_mel, n_fft, rate = (int(np.asarray(v).reshape(())) for v in (num_mel_bins, dft_length, sample_rate))
    lo, hi = (float(np.asarray(v).reshape(())) for v in (lower_edge_hertz, upper_edge_hertz))
    if n_mel <= 0 or n_fft <= 0 or rate <= 0:
        raise NodeError("num_mel_bins, dft_length and sample_rate must be positive")
    n_bins = n_fft // 2 + 1

    def mel(hz):
        return 2595 * np.log10(1 + hz / 700)

    # num_mel_bins + 2 band edges equally spaced in mel, mapped back to DFT bin indices
    step = (mel(hi) - mel(lo)) / (n_mel + 2)
    edges_hz = 700 * (10 ** ((mel(lo) + step * np.arange(n_mel + 2)) / 2595) - 1)
    edges = np.floor_divide((n_fft + 1) * edges_hz, rate).astype(np.int64)
    left, center, right = edges[:-2], edges[1:-1], edges[2:]

    j = np.arange(n_bins)[:, None]  # spectrogram bin, one column per mel band
    rise = np.where(center > left, (j - left) / np.maximum(center - left, 1), (j == center).astype(np.float64))
    up = np.where((j >= left) & (j <= center), rise, 0.0)
    fall = (right - j) / np.maximum(right - center, 1)
    down_part = (j >= center) & (j < right)
    w = np.where(down_part, fall, up)  # both triangle sides, peak 1 at the center bin
    return xp.asarray(w.astype(np_dtype(output_datatype)))
