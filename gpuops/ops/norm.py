"""Normalization ops: BatchNormalization, InstanceNormalization, LayerNormalization,
GroupNormalization, RMSNormalization, LRN, MeanVarianceNormalization, LpNormalization, Dropout.

Statistics use the population variance (divide by the element count). ``stash_type`` picks the
precision of the statistics stage; the scale/shift stage runs in the input's dtype.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import np_dtype
from ..errors import NodeError
from ..registry import op


def _channel_shape(X, param):
    """Broadcast a per-channel parameter (C,) — or a per-activation one (C, D1, ...) — against X."""
    if param.ndim == 1:
        return param.reshape((1, -1) + (1,) * (X.ndim - 2))
    return param.reshape((1,) + tuple(param.shape))


def _moments(xp, X, axes):
    mean = xp.mean(X, axis=axes, keepdims=True)
    d = X - mean
    return mean, d, xp.mean(d * d, axis=axes, keepdims=True)


def _norm_axis(axis, rank):
    if not -rank <= axis < rank:
        raise NodeError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


# -- BatchNormalization -------------------------------------------------------------------------


def _bn_inference(xp, X, scale, B, mean, var, epsilon):
    inv = scale / xp.sqrt(var + epsilon)  # fold into one multiply-add over X
    Y = X * _channel_shape(X, inv)
    Y += _channel_shape(X, B - mean * inv)  # into Y: one buffer, not two
    return Y


def _bn_training(xp, X, scale, B, mean, var, epsilon, momentum):
    axes = (0,) + tuple(range(2, X.ndim))
    stash = xp.float32 if X.dtype.itemsize < 4 else X.dtype  # half types: statistics in float32
    Xs = X.astype(stash)
    cur_mean, d, cur_var = _moments(xp, Xs, axes)
    Y = (d / xp.sqrt(cur_var + epsilon)) * _channel_shape(X, scale.astype(stash)) + _channel_shape(X, B.astype(stash))
    cur_mean = xp.reshape(cur_mean, (-1,))
    cur_var = xp.reshape(cur_var, (-1,))
    run_mean = mean * momentum + cur_mean.astype(mean.dtype) * (1 - momentum)
    run_var = var * momentum + cur_var.astype(var.dtype) * (1 - momentum)
    return Y.astype(X.dtype), run_mean, run_var, cur_mean.astype(X.dtype), cur_var.astype(X.dtype)


def _bn_1d(X):
    return X.ndim == 1  # a rank-1 input of size N: C is 1


@op("BatchNormalization", since=1, n_outputs=True)
def BatchNormalization_1(xp, X, scale, B, mean, var, *, consumed_inputs=None, epsilon=1e-5, is_test=0,
                         momentum=0.9, spatial=1, n_outputs=1):
    """Opsets 1-9: training statistics (outputs mean, var, saved_mean, saved_var) only when the node
    asks for them; a single-output node normalises with the given estimates (inference). With
    ``is_test`` the extra outputs, which the spec leaves unfilled, pass the estimates through."""
    shape = X.shape
    if _bn_1d(X):
        X = X.reshape((-1, 1))
    if n_outputs == 1 or is_test:
        Y = _bn_inference(xp, X, scale, B, mean, var, epsilon).reshape(shape)
        return Y if n_outputs == 1 else (Y, mean, var, mean, var)
    if not spatial:
        raise NodeError("training-mode BatchNormalization with spatial=0 is not supported")
    Y, *stats = _bn_training(xp, X, scale, B, mean, var, epsilon, momentum)
    return (Y.reshape(shape), *stats)


@op("BatchNormalization", since=14, n_outputs=True)
def BatchNormalization(xp, X, scale, B, input_mean, input_var, *, epsilon=1e-5, momentum=0.9,
                       training_mode=0, n_outputs=1):
    shape = X.shape
    if _bn_1d(X):
        X = X.reshape((-1, 1))
    if not training_mode:
        return _bn_inference(xp, X, scale, B, input_mean, input_var, epsilon).reshape(shape)
    Y, run_mean, run_var, _, _ = _bn_training(xp, X, scale, B, input_mean, input_var, epsilon, momentum)
    return Y.reshape(shape), run_mean, run_var


# -- Instance / Layer / Group / RMS normalization -----------------------------------------------


@op("InstanceNormalization", since=1)
def InstanceNormalization(xp, input, scale, B, *, consumed_inputs=None, epsilon=1e-5):
    if input.ndim < 3:
        raise NodeError(f"input must have rank >= 3 (N, C, D1, ...), got shape {tuple(input.shape)}")
    _, d, var = _moments(xp, input, tuple(range(2, input.ndim)))
    return d / xp.sqrt(var + epsilon) * _channel_shape(input, scale) + _channel_shape(input, B)


def _stash_dtype(xp, stash_type, X):
    """(dtype the statistics are computed in, dtype of Mean/InvStdDev outputs). The statistics never
    run below the input's own precision (a double input with the default float stash stays double,
    as in onnxruntime); the outputs take the ``stash_type`` dtype."""
    dt = np_dtype(stash_type)
    if not np.issubdtype(dt, np.floating) and dt.kind != "V":
        raise NodeError(f"stash_type {stash_type} is not a floating-point type")
    try:
        compute = np.result_type(dt, X.dtype)
    except TypeError:
        compute = dt
    return compute, dt


@op("LayerNormalization", since=17)
def LayerNormalization(xp, X, Scale, B=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    axis = _norm_axis(axis, X.ndim)
    compute, stash = _stash_dtype(xp, stash_type, X)
    mean, d, var = _moments(xp, X.astype(compute), tuple(range(axis, X.ndim)))
    inv_std = 1 / xp.sqrt(var + epsilon)
    Y = (d * inv_std).astype(X.dtype) * Scale
    if B is not None:
        Y = Y + B
    return Y, mean.astype(stash), inv_std.astype(stash)


@op("RMSNormalization", since=23)
def RMSNormalization(xp, X, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    axis = _norm_axis(axis, X.ndim)
    Xs = X.astype(_stash_dtype(xp, stash_type, X)[0])
    ms = xp.mean(Xs * Xs, axis=tuple(range(axis, X.ndim)), keepdims=True)
    return (Xs / xp.sqrt(ms + epsilon)).astype(X.dtype) * scale


def _group_norm(xp, X, scale, bias, epsilon, num_groups, stash):
    if X.ndim < 2 or num_groups is None or num_groups < 1 or X.shape[1] % num_groups:
        raise NodeError(f"num_groups={num_groups} must divide the channel count of X {tuple(X.shape)}")
    N, C = X.shape[:2]
    Xg = xp.reshape(X.astype(stash), (N, num_groups, -1))
    _, d, var = _moments(xp, Xg, (2,))
    Y = xp.reshape((d / xp.sqrt(var + epsilon)).astype(X.dtype), X.shape)
    return Y * _channel_shape(X, scale) + _channel_shape(X, bias)


@op("GroupNormalization", since=18)
def GroupNormalization_18(xp, X, scale, bias, *, epsilon=1e-5, num_groups=None):
    """Opset 18: ``scale`` and ``bias`` hold one value per group."""
    per = X.shape[1] // num_groups if num_groups else 1
    scale, bias = xp.repeat(scale, per), xp.repeat(bias, per)
    return _group_norm(xp, X, scale, bias, epsilon, num_groups, X.dtype)


@op("GroupNormalization", since=21)
def GroupNormalization(xp, X, scale, bias, *, epsilon=1e-5, num_groups=None, stash_type=1):
    """Opset 21: ``scale`` and ``bias`` hold one value per channel."""
    return _group_norm(xp, X, scale, bias, epsilon, num_groups, _stash_dtype(xp, stash_type, X)[0])


# -- LRN, MVN, LpNormalization ------------------------------------------------------------------


@op("LRN", since=1)
def LRN(xp, X, *, alpha=1e-4, beta=0.75, bias=1.0, size=None):
    """Y = X / (bias + alpha / size * sum of X^2 over the channel window) ^ beta."""
    if not size or size < 1:
        raise NodeError(f"size must be a positive int, got {size}")
    if X.ndim < 2:
        raise NodeError(f"X must have rank >= 2 (N, C, ...), got shape {tuple(X.shape)}")
    C = X.shape[1]
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2  # floor / ceil of (size-1)/2
    sq = X * X
    width = [(0, 0), (before, after)] + [(0, 0)] * (X.ndim - 2)
    sqp = xp.pad(sq, width, mode="constant")
    total = sqp[:, 0:C]
    for j in range(1, size):  # loop over the channel window taps
        total = total + sqp[:, j:j + C]
    return X / (bias + (alpha / size) * total) ** beta


@op("MeanVarianceNormalization", since=9)
def MeanVarianceNormalization(xp, X, *, axes=(0, 2, 3)):
    """(X - E[X]) / (sqrt(Var[X]) + 1e-9), the epsilon of the ONNX function body."""
    axes = tuple(_norm_axis(a, X.ndim) for a in axes)
    _, d, var = _moments(xp, X, axes)
    return d / (xp.sqrt(var) + 1e-9)


@op("LpNormalization", since=1)
def LpNormalization(xp, input, *, axis=-1, p=2):
    axis = _norm_axis(axis, input.ndim)
    if p == 1:
        norm = xp.sum(xp.abs(input), axis=axis, keepdims=True)
    elif p == 2:
        norm = xp.sqrt(xp.sum(input * input, axis=axis, keepdims=True))
    else:
        raise NodeError(f"p must be 1 or 2, got {p}")
    safe = xp.where(norm == 0, xp.ones_like(norm), norm)
    return xp.where(norm == 0, xp.zeros_like(input), input / safe)


# -- Dropout ------------------------------------------------------------------------------------


@op("Dropout", since=1, n_outputs=True)
def Dropout_1(xp, data, *, consumed_inputs=None, is_test=0, ratio=0.5, n_outputs=1):
    """Opsets 1-9 run as inference (identity), whatever ``is_test``; the mask (dtype of data) is all ones."""
    if n_outputs == 1:
        return data
    return data, xp.ones_like(data)


@op("Dropout", since=10, n_outputs=True)
def Dropout_10(xp, data, *, ratio=0.5, n_outputs=1):
    """Opsets 10-11: inference (identity) with a boolean all-true mask."""
    if n_outputs == 1:
        return data
    return data, xp.ones(data.shape, dtype=xp.bool)


@op("Dropout", since=12, host_inputs=(2,), n_outputs=True)
def Dropout(xp, data, ratio=None, training_mode=None, *, seed=None, n_outputs=1):
    """Identity unless ``training_mode`` is true. In training, ``mask = U[0, 1) >= ratio`` with the
    uniform draws made on the host by NumPy's legacy generator (``RandomState(seed)``), so a seeded
    node yields the same mask on every device and as ``np.random.seed(seed); np.random.uniform``."""
    training = training_mode is not None and bool(np.asarray(training_mode).reshape(-1)[0])
    if not training:
        return data if n_outputs == 1 else (data, xp.ones(data.shape, dtype=xp.bool))
    rng = np.random.RandomState(seed) if seed is not None else np.random.RandomState()
    draws = xp.asarray(rng.uniform(0, 1.0, tuple(data.shape)))
    r = xp.asarray(0.5, dtype=xp.float64) if ratio is None else ratio.astype(xp.float64)
    mask = draws >= r
    scale = (1 / (1 - r)).astype(data.dtype)
    Y = xp.where(mask, data * scale, xp.zeros_like(data))
    return Y if n_outputs == 1 else (Y, mask)
