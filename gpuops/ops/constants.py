"""Constants and generators: Shape, Size, Identity, Constant, ConstantOfShape, Range, EyeLike.

Their shape inputs are host inputs (see :mod:`.shape`): the output shape is known before any data
moves.
"""

from __future__ import annotations

import math

import numpy as np

from ..dtypes import np_dtype
from ..errors import NodeError
from ..registry import op
from .shape import host_ints, host_scalar


# -- Shape, Size, Identity, Constant, ConstantOfShape, Range, EyeLike --------------------------


@op("Shape", since=1)
def Shape_1(xp, data):
    return xp.asarray(np.asarray(data.shape, dtype=np.int64).reshape(-1))


@op("Shape", since=15)
def Shape(xp, data, *, start=0, end=None):
    rank = data.ndim
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = rank if end is None else min(max(end + rank if end < 0 else end, 0), rank)
    return xp.asarray(np.asarray(data.shape[start:end], dtype=np.int64).reshape(-1))


@op("Size", since=1)
def Size(xp, data):
    return xp.asarray(np.int64(math.prod(data.shape)))


@op("Identity", since=1)
def Identity(xp, input=None):
    return input  # tensors, sequences (lists) and optionals (None when empty) pass through


def _constant(xp, **attrs):
    given = {k: v for k, v in attrs.items() if v is not None}
    if len(given) != 1:
        raise NodeError(f"Constant needs exactly one value attribute, got {sorted(given) or 'none'}")
    (name, v), = given.items()
    if name in ("value", "sparse_value"):
        return v if isinstance(v, np.ndarray) and v.dtype == object else xp.asarray(v)
    if name in ("value_string", "value_strings"):  # strings stay host object arrays
        return np.array(v, dtype=object)
    dtype = np.float32 if name.startswith("value_float") else np.int64
    return xp.asarray(np.asarray(v, dtype=dtype))


@op("Constant", since=1)
def Constant_1(xp, *, value):
    return _constant(xp, value=value)


@op("Constant", since=11)
def Constant_11(xp, *, value=None, sparse_value=None):
    return _constant(xp, value=value, sparse_value=sparse_value)


@op("Constant", since=12)
def Constant(xp, *, value=None, sparse_value=None, value_float=None, value_floats=None, value_int=None,
             value_ints=None, value_string=None, value_strings=None):
    return _constant(xp, value=value, sparse_value=sparse_value, value_float=value_float,
                     value_floats=value_floats, value_int=value_int, value_ints=value_ints,
                     value_string=value_string, value_strings=value_strings)


@op("ConstantOfShape", since=9, host_inputs=(0,))
def ConstantOfShape(xp, input, *, value=None):
    value = np.zeros(1, dtype=np.float32) if value is None else np.asarray(value)
    if value.size != 1:
        raise NodeError(f"value must hold exactly one element, got shape {value.shape}")
    shape = tuple(host_ints(input))
    if any(d < 0 for d in shape):
        raise NodeError(f"shape {list(shape)} has a negative dimension")
    return xp.full(shape, host_scalar(value), dtype=value.dtype)


def range_values(xp, start, limit, delta, compute=None):
    dtype = np.asarray(start).dtype
    s, l, d = (host_scalar(v) for v in (start, limit, delta))
    if dtype.kind in "iu":
        s, l, d = int(s), int(l), int(d)
        if d == 0:
            raise NodeError("Range delta is 0")
        n = max(-((s - l) // d), 0)  # ceil((l - s) / d) in exact integer arithmetic
    else:
        ct = np.dtype(compute or dtype)
        s, l, d = (np.asarray(v).astype(ct) for v in (s, l, d))
        if d == 0:
            raise NodeError("Range delta is 0")
        n = max(math.ceil((float(l) - float(s)) / float(d)), 0)
        out = xp.arange(n, dtype=ct) * d[()] + s[()]  # NumPy scalars of ct: no host->device copy
        return out.astype(dtype)
    return xp.arange(n, dtype=dtype) * d + s if n else xp.zeros((0,), dtype=dtype)


@op("Range", since=11, host_inputs=(0, 1, 2))
def Range_11(xp, start, limit, delta):
    return range_values(xp, start, limit, delta)


@op("Range", since=27, host_inputs=(0, 1, 2))
def Range(xp, start, limit, delta, *, stash_type=1):
    if np.asarray(start).dtype not in (np.dtype(np.float16), np_dtype(16)):  # float16, bfloat16
        return range_values(xp, start, limit, delta)
    if stash_type not in (1, 11):
        raise NodeError(f"stash_type {stash_type} is not float (1) or double (11)")
    return range_values(xp, start, limit, delta, np_dtype(stash_type))


@op("EyeLike", since=9)
def EyeLike(xp, input, *, dtype=None, k=0):
    if input.ndim != 2:
        raise NodeError(f"EyeLike needs a 2-D input, got shape {tuple(input.shape)}")
    out = np_dtype(dtype) if dtype is not None else input.dtype
    return xp.eye(input.shape[0], input.shape[1], k=k, dtype=out)
