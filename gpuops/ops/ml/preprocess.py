"""Feature preprocessing: ArrayFeatureExtractor, Binarizer, FeatureVectorizer, Imputer, Normalizer,
OneHotEncoder, Scaler.

Where the spec is silent they follow onnxruntime: Normalizer's MAX divides by the row's largest
value (not its largest magnitude) and leaves a row whose norm is 0 unchanged; OneHotEncoder compares
float inputs as int64 and, with ``zeros=0``, refuses a value outside the categories; Scaler and
Imputer take one value for all columns or one per column.
"""

from __future__ import annotations

import numpy as np

from ...device import to_host
from ...errors import NodeError
from ...ops import checks
from ...registry import op
from ._common import ML, rows_2d


@op("ArrayFeatureExtractor", domain=ML, since=1)
def ArrayFeatureExtractor(xp, X, Y):
    """Selects ``Y`` (flattened) along the last axis; a 1-D ``X`` gives a [1, k] result (as onnxruntime)."""
    k = int(Y.size)
    shape = (1, k) if X.ndim == 1 else (*X.shape[:-1], k)
    if X.dtype == object:  # strings live on the host
        return np.take(to_host(X), to_host(Y).reshape(-1).astype(np.int64), axis=-1).reshape(shape)
    index = xp.reshape(Y, (-1,))
    if index.dtype != np.int64:
        index = index.astype(np.int64)
    return xp.reshape(xp.take(X, index, axis=X.ndim - 1), shape)


@op("Binarizer", domain=ML, since=1)
def Binarizer(xp, X, *, threshold=0.0):
    return (X > threshold).astype(X.dtype)


def per_column(values, n: int, op_type: str, what: str) -> np.ndarray:
    """``values`` (one for all ``n`` columns, or one per column) as a float64 vector; an error naming
    ``op_type`` and ``what`` for any other count."""
    v = np.asarray(values if values is not None else [], dtype=np.float64).reshape(-1)
    if v.size not in (1, n):
        raise NodeError(f"{op_type}: {what} has {v.size} values for {n} columns (1 or {n} expected)")
    return v


@op("Scaler", domain=ML, since=1)
def Scaler(xp, X, *, offset=None, scale=None):
    """``(X - offset) * scale`` per column, float32."""
    n = int(X.shape[-1]) if X.ndim else 1
    off = per_column(offset if offset is not None else [0.0], n, "Scaler", "offset").astype(np.float32)
    sc = per_column(scale if scale is not None else [1.0], n, "Scaler", "scale").astype(np.float32)
    return ((X.astype(np.float32) - xp.asarray(off)) * xp.asarray(sc)).astype(np.float32)


@op("Normalizer", domain=ML, since=1)
def Normalizer(xp, X, *, norm="MAX"):
    """Each row divided by its MAX, L1 or L2 norm (float32); a row whose norm is 0 is left as is."""
    if X.ndim > 2:
        raise NodeError(f"Normalizer: input must be 1-D or 2-D, got shape {tuple(X.shape)}")
    x = X.astype(np.float32)
    x2 = xp.reshape(x, (1, -1)) if X.ndim == 1 else x
    if norm == "MAX":
        z = xp.max(x2, axis=1, keepdims=True)
    elif norm == "L1":
        z = xp.sum(xp.abs(x2), axis=1, keepdims=True)
    elif norm == "L2":
        z = xp.sqrt(xp.sum(x2 * x2, axis=1, keepdims=True))
    else:
        raise NodeError(f"Normalizer: norm must be MAX, L1 or L2, got {norm!r}")
    y = xp.where(z != 0, x2 / xp.where(z != 0, z, 1.0), x2).astype(np.float32)
    return xp.reshape(y, tuple(X.shape))


@op("Imputer", domain=ML, since=1)
def Imputer(xp, X, *, imputed_value_floats=None, imputed_value_int64s=None, replaced_value_float=0.0,
            replaced_value_int64=0):
    """Values equal to the replaced value (NaN: any NaN) become the column's imputed value."""
    n = int(X.shape[-1]) if X.ndim else 1
    if np.dtype(X.dtype).kind == "f":
        if not imputed_value_floats:
            raise NodeError("Imputer: a float input needs imputed_value_floats")
        fill = xp.asarray(per_column(imputed_value_floats, n, "Imputer", "imputed_value_floats").astype(X.dtype))
        hit = xp.isnan(X) if np.isnan(replaced_value_float) else X == np.dtype(X.dtype).type(replaced_value_float)
    else:
        if not imputed_value_int64s:
            raise NodeError("Imputer: an integer input needs imputed_value_int64s")
        v = np.asarray(imputed_value_int64s, np.int64)
        if v.size not in (1, n):
            raise NodeError(f"Imputer: imputed_value_int64s has {v.size} values for {n} columns")
        fill = xp.asarray(v.astype(X.dtype))
        hit = X == replaced_value_int64
    return xp.where(hit, fill, X)


@op("OneHotEncoder", domain=ML, since=1)
def OneHotEncoder(xp, X, *, cats_int64s=None, cats_strings=None, zeros=1):
    """X.shape + [categories] float32: 1 where the value is the category."""
    if cats_strings:
        cats = list(cats_strings)
        x = to_host(X)
        if x.dtype != object:
            raise NodeError("OneHotEncoder: cats_strings needs a string input")
        index = {c: i for i, c in enumerate(cats)}
        pos = np.array([index.get(v, -1) for v in x.reshape(-1).tolist()], np.int64).reshape(x.shape)
        if not zeros and (pos < 0).any():
            raise NodeError("OneHotEncoder: a value is not one of the categories (zeros=0)")
        return xp.asarray((pos[..., None] == np.arange(len(cats))).astype(np.float32))
    if not cats_int64s:
        raise NodeError("OneHotEncoder: cats_int64s or cats_strings is required")
    if X.dtype == object:
        raise NodeError("OneHotEncoder: a string input needs cats_strings")
    cats = xp.asarray(np.asarray(cats_int64s, np.int64))
    hot = X.astype(np.int64)[..., None] == cats
    if not zeros:
        checks.require(xp.all(xp.any(hot, axis=-1)), _all_known)
    return hot.astype(np.float32)


def _all_known(ok):
    if not bool(ok):
        raise NodeError("OneHotEncoder: a value is not one of the categories (zeros=0)")


@op("FeatureVectorizer", domain=ML, since=1)
def FeatureVectorizer(xp, *inputs, inputdimensions=None):
    """The inputs side by side as [N, sum(inputdimensions)] float32, each cut or zero-padded to its
    dimension."""
    dims = list(inputdimensions or [])
    if len(dims) != len(inputs):
        raise NodeError(f"FeatureVectorizer: {len(inputs)} inputs but {len(dims)} inputdimensions")
    parts = []
    for x, d in zip(inputs, dims):
        x2 = rows_2d(xp, x, "FeatureVectorizer").astype(np.float32) if x.ndim <= 2 else \
            xp.reshape(x, (int(x.shape[0]), -1)).astype(np.float32)
        have = int(x2.shape[1])
        if have >= d:
            parts.append(x2[:, :d])
        else:
            parts.append(xp.concat([x2, xp.zeros((int(x2.shape[0]), d - have), dtype=np.float32)], axis=1))
    rows = {int(p.shape[0]) for p in parts}
    if len(rows) > 1:
        raise NodeError(f"FeatureVectorizer: the inputs have different numbers of rows {sorted(rows)}")
    return xp.concat(parts, axis=1)
