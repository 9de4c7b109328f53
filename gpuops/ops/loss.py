"""Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (reduction none/sum/mean,
ignore_index, per-class weights; SoftmaxCrossEntropyLoss can also return the log-probabilities).

float16/bfloat16 inputs are computed in float32 and cast back.
"""

from __future__ import annotations

import numpy as np

from ..errors import NodeError
from ..registry import op


def _compute_dtype(dtype):
    return np.float64 if dtype == np.float64 else np.float32


def _nll(xp, log_prob, target, weight, ignore_index, reduction, out_dtype):
    """Loss of log-probabilities [N, C, d...] against class labels [N, d...]."""
    if reduction not in ("none", "sum", "mean"):
        raise NodeError(f"reduction must be 'none', 'sum' or 'mean', got {reduction!r}")
    if log_prob.ndim < 2 or tuple(target.shape) != (log_prob.shape[0], *log_prob.shape[2:]):
        raise NodeError(f"input of shape {tuple(log_prob.shape)} needs a target of shape "
                        f"(N, d1, ...), got {tuple(target.shape)}")
    t = target.astype(np.int64)
    ignored = None if ignore_index is None else t == ignore_index
    if ignored is not None:
        t = xp.where(ignored, 0, t)  # any valid class; the sample's weight becomes 0
    loss = -xp.take_along_axis(log_prob, xp.expand_dims(t, axis=1), axis=1)[:, 0]
    w = None
    if weight is not None:
        w = xp.take(weight.astype(loss.dtype), xp.reshape(t, (-1,)), axis=0)
        w = xp.reshape(w, tuple(t.shape))
    if ignored is not None:
        w = xp.where(ignored, 0.0, 1.0 if w is None else w).astype(loss.dtype)
    if w is not None:
        loss = loss * w
    if reduction == "sum":
        loss = xp.sum(loss)
    elif reduction == "mean":
        loss = xp.mean(loss) if w is None else xp.sum(loss) / xp.sum(w)
    return loss.astype(out_dtype)


@op("NegativeLogLikelihoodLoss", since=12)  # 13 and 22 only add types
def NegativeLogLikelihoodLoss(xp, input, target, weight=None, *, ignore_index=None, reduction="mean"):
    x = input.astype(_compute_dtype(input.dtype))
    return _nll(xp, x, target, weight, ignore_index, reduction, input.dtype)


@op("SoftmaxCrossEntropyLoss", since=12)  # 13 only adds types
def SoftmaxCrossEntropyLoss(xp, scores, labels, weights=None, *, ignore_index=None, reduction="mean"):
    """Returns (loss, log_prob); log_prob = log(softmax(scores, axis=1))."""
    if scores.ndim < 2:
        raise NodeError(f"scores must be [N, C, ...], got shape {tuple(scores.shape)}")
    x = scores.astype(_compute_dtype(scores.dtype))
    shifted = x - xp.max(x, axis=1, keepdims=True)
    log_prob = shifted - xp.log(xp.sum(xp.exp(shifted), axis=1, keepdims=True))
    loss = _nll(xp, log_prob, labels, weights, ignore_index, reduction, scores.dtype)
    return loss, log_prob.astype(scores.dtype)
