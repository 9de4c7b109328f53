"""What the ai.onnx.ml ops share: attribute helpers and the score transforms of the legacy ops.

The legacy classifiers and regressors (LinearClassifier, SVM*, TreeEnsemble{Classifier,Regressor})
name their ``post_transform`` with a string and apply it as onnxruntime does (``ml_common.h``):
float32 arithmetic, a logistic that never overflows, SOFTMAX_ZERO leaving zero scores at zero, and
PROBIT through the Winitzki approximation of erf^-1 (a = 0.147).
"""

from __future__ import annotations

import math

import numpy as np

from ...device import to_host
from ...errors import NodeError

ML = "ai.onnx.ml"

TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")


def pick(op_type: str, **named):
    """The one attribute of ``named`` that is set (a ``*_as_tensor`` twin wins), as a 1-D NumPy
    array, or None when none is."""
    given = [(k, v) for k, v in named.items() if v is not None]
    if not given:
        return None
    tensors = [v for k, v in given if k.endswith("_as_tensor")]
    value = tensors[0] if tensors else given[0][1]
    return np.asarray(value).reshape(-1)


def transform_name(op_type: str, post_transform) -> str:
    if post_transform not in TRANSFORMS:
        raise NodeError(f"{op_type}: post_transform must be one of {list(TRANSFORMS)}, got {post_transform!r}")
    return post_transform


def rows_2d(xp, X, op_type: str):
    """``X`` as [N, C] float (a 1-D ``X`` is one row, as onnxruntime reads it)."""
    if X.ndim == 1:
        X = xp.reshape(X, (1, -1))
    if X.ndim != 2:
        raise NodeError(f"{op_type}: input must be 1-D or 2-D, got shape {tuple(X.shape)}")
    return X


def logistic(xp, v):
    """onnxruntime's ComputeLogistic: 1 / (1 + exp(-|v|)), mirrored for negative ``v``."""
    p = 1.0 / (1.0 + xp.exp(-xp.abs(v)))
    return xp.where(v < 0, 1.0 - p, p)


def probit(xp, v):
    """sqrt(2) * erfinv(2v - 1) with onnxruntime's approximation of erfinv."""
    x = 2.0 * v - 1.0
    sgn = xp.where(x < 0, -1.0, 1.0)
    ln = xp.log((1.0 - x) * (1.0 + x))
    a = 2.0 / (math.pi * 0.147) + 0.5 * ln
    return math.sqrt(2.0) * sgn * xp.sqrt(-a + xp.sqrt(a * a - ln / 0.147))


def softmax(xp, s):
    e = xp.exp(s - xp.max(s, axis=1, keepdims=True))
    return e / xp.sum(e, axis=1, keepdims=True)


def softmax_zero(xp, s):
    """onnxruntime's ComputeSoftmaxZero: scores within 1e-7 of zero stay zero; the maximum is taken
    over every score, zeros included."""
    m = xp.max(s, axis=1, keepdims=True)
    nz = xp.abs(s) > 1e-7
    e = xp.where(nz, xp.exp(s - m), 0.0)
    return e / xp.sum(e, axis=1, keepdims=True)


def apply_transform(xp, s, post_transform: str):
    """Scores [N, C] (C >= 2, or any C for PROBIT/LOGISTIC) after ``post_transform``."""
    fn = {"LOGISTIC": logistic, "SOFTMAX": softmax, "SOFTMAX_ZERO": softmax_zero, "PROBIT": probit}.get(post_transform)
    return s if fn is None else fn(xp, s).astype(s.dtype)


def binary_scores(xp, s, post_transform: str, add_second_class: int):
    """onnxruntime's (1.32) two scores from one per row ([N]) -> [N, 2]: LOGISTIC gives
    [logistic(-s), logistic(s)]; otherwise ``add_second_class`` 0 or 1 (all weights >= 0) gives
    [1 - s, s] and 2 or 3 (mixed signs) [-s, s]; SOFTMAX and SOFTMAX_ZERO are not applied. PROBIT
    writes probit(s) and leaves the second score unset: 0 here."""
    if post_transform == "PROBIT":
        p = probit(xp, s)
        return xp.stack([p, xp.zeros_like(p)], axis=1)
    if post_transform == "LOGISTIC":
        return xp.stack([logistic(xp, -s), logistic(xp, s)], axis=1)
    if add_second_class in (0, 1):
        return xp.stack([1.0 - s, s], axis=1)
    return xp.stack([-s, s], axis=1)


def class_labels(op_type: str, strings, ints):
    """The class labels (a host array: object for strings, int64 otherwise) and whether they are strings."""
    if strings:
        return np.array(list(strings), dtype=object), True
    if ints is None:
        raise NodeError(f"{op_type}: classlabels_strings or classlabels_int64s is required")
    return np.asarray(list(ints), dtype=np.int64).reshape(-1), False


def labels_of(xp, labels: np.ndarray, index):
    """Class labels for device indices ``index``: strings are looked up on the host."""
    if labels.dtype == object:
        return labels[to_host(index).astype(np.int64)]
    return xp.take(xp.asarray(labels), index.astype(np.int64), axis=0)


def f32(xp, X):
    """``X`` as float32, the arithmetic type of the legacy ops (double inputs: float64)."""
    return X.astype(np.float64) if X.dtype == np.float64 else X.astype(np.float32)

