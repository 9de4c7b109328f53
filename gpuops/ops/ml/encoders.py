"""Encoders and maps: LabelEncoder (1-4), CategoryMapper, CastMap, DictVectorizer, ZipMap.

Strings live on the host (NumPy object arrays), and so do maps (Python dicts) and ZipMap's sequence
of maps (a list of dicts, as onnxruntime's Python API returns it). LabelEncoder maps numbers on the
device (sorted keys + ``searchsorted``). Where the spec is silent they follow onnxruntime: CastMap
pads a SPARSE map with 0 (the string ``"0.f"`` for TO_STRING) and writes floats as C's ``%f``;
DictVectorizer gives a [1, vocabulary] row with 0 where the map has no key; ZipMap's values are
Python floats.
"""

from __future__ import annotations

import math

import numpy as np

from ...device import to_host
from ...errors import NodeError
from ...registry import op
from ..elementwise import clamp
from ._common import ML

# -- LabelEncoder --------------------------------------------------------------------------------


def _one_of(named: dict):
    given = {k: v for k, v in named.items() if v is not None}
    if len(given) != 1:
        raise NodeError(f"LabelEncoder needs exactly one of {sorted(named)}, got {sorted(given) or 'none'}")
    return next(iter(given.items()))


def _label_encode(xp, X, keys, values, default, out_dtype):
    table = dict(zip(keys, values))  # a repeated key: the last one wins
    string_in = X.dtype == object
    if string_in or out_dtype == object:  # strings live on the host
        x = to_host(X)
        nan_value = next((v for k, v in table.items() if isinstance(k, float) and math.isnan(k)), default)
        flat = [nan_value if isinstance(k, float) and math.isnan(k) else table.get(k, default)
                for k in x.reshape(-1).tolist()]
        out = np.array(flat, dtype=out_dtype).reshape(x.shape)
        return out if out_dtype == object else xp.asarray(out)
    # numeric -> numeric on the device: binary search in the sorted keys
    nan_keys = [k for k in table if isinstance(k, float) and math.isnan(k)]
    plain = [k for k in table if k not in nan_keys]
    kdt = np.float64 if np.dtype(X.dtype).kind == "f" else np.int64
    k_host = np.array(plain, dtype=kdt)
    order = np.argsort(k_host, kind="stable")
    k_sorted = xp.asarray(k_host[order])
    v_sorted = xp.asarray(np.array([table[plain[i]] for i in order], dtype=out_dtype))
    x = X.astype(kdt)
    out = xp.full(tuple(X.shape), default, dtype=out_dtype)
    if plain:
        pos = clamp(xp, xp.searchsorted(k_sorted, xp.reshape(x, (-1,))), 0, len(plain) - 1)
        pos = xp.reshape(pos, tuple(X.shape))
        out = xp.where(k_sorted[pos] == x, v_sorted[pos], out)
    if nan_keys:  # a NaN key matches any NaN input
        out = xp.where(xp.isnan(x), xp.asarray(np.array(table[nan_keys[-1]], dtype=out_dtype)), out)
    return out


@op("LabelEncoder", domain=ML, since=2)
def LabelEncoder_2(xp, X, *, default_float=-0.0, default_int64=-1, default_string="_Unused", keys_floats=None,
                   keys_int64s=None, keys_strings=None, values_floats=None, values_int64s=None,
                   values_strings=None):
    _, keys = _one_of({"keys_floats": keys_floats, "keys_int64s": keys_int64s,
                               "keys_strings": keys_strings})
    vname, values = _one_of({"values_floats": values_floats, "values_int64s": values_int64s,
                                       "values_strings": values_strings})
    out_dtype, default = {"values_floats": (np.float32, default_float), "values_int64s": (np.int64, default_int64),
                          "values_strings": (object, default_string)}[vname]
    return _label_encode(xp, X, list(keys), list(values), default, out_dtype)


@op("LabelEncoder", domain=ML, since=4)
def LabelEncoder_4(xp, X, *, default_float=-0.0, default_int64=-1, default_string="_Unused", default_tensor=None,
                   keys_floats=None, keys_int64s=None, keys_strings=None, keys_tensor=None, values_floats=None,
                   values_int64s=None, values_strings=None, values_tensor=None):
    _, keys = _one_of({"keys_floats": keys_floats, "keys_int64s": keys_int64s,
                               "keys_strings": keys_strings, "keys_tensor": keys_tensor})
    vname, values = _one_of({"values_floats": values_floats, "values_int64s": values_int64s,
                                       "values_strings": values_strings, "values_tensor": values_tensor})
    if vname == "values_tensor":
        out_dtype = values.dtype if values.dtype != object else object
        if default_tensor is not None:
            default = np.asarray(default_tensor).reshape(-1)[0]
        else:
            default = "_Unused" if out_dtype == object else (-0.0 if np.dtype(out_dtype).kind == "f" else -1)
        values = values.reshape(-1).tolist()
    else:
        out_dtype, default = {"values_floats": (np.float32, default_float),
                              "values_int64s": (np.int64, default_int64),
                              "values_strings": (object, default_string)}[vname]
    keys = keys.reshape(-1).tolist() if isinstance(keys, np.ndarray) else list(keys)
    if len(keys) != len(values):
        raise NodeError(f"LabelEncoder has {len(keys)} keys but {len(values)} values")
    return _label_encode(xp, X, keys, list(values), default, out_dtype)




@op("LabelEncoder", domain=ML, since=1)
def LabelEncoder_1(xp, X, *, classes_strings=None, default_int64=-1, default_string="_Unused"):
    """string -> int64 (the position in ``classes_strings``) or int64 -> string."""
    classes = list(classes_strings or [])
    if X.dtype == object:
        return _label_encode(xp, X, classes, list(range(len(classes))), default_int64, np.int64)
    return _label_encode(xp, X, list(range(len(classes))), classes, default_string, object)


@op("CategoryMapper", domain=ML, since=1)
def CategoryMapper(xp, X, *, cats_int64s=None, cats_strings=None, default_int64=-1, default_string="_Unused"):
    """string -> int64 or int64 -> string through the pairs (cats_strings[i], cats_int64s[i])."""
    ints, strings = list(cats_int64s or []), list(cats_strings or [])
    if len(ints) != len(strings):
        raise NodeError(f"CategoryMapper: {len(strings)} cats_strings but {len(ints)} cats_int64s")
    if X.dtype == object:
        return _label_encode(xp, X, strings, ints, default_int64, np.int64)
    if np.dtype(X.dtype) != np.int64:
        raise NodeError(f"CategoryMapper: input must be string or int64, got {X.dtype}")
    return _label_encode(xp, X, ints, strings, default_string, object)


def _map_of(value, op_type: str) -> dict:
    if not isinstance(value, dict):
        raise NodeError(f"{op_type}: input must be a map (dict), got {type(value).__name__}")
    return value


def _c_float(v: float) -> str:
    return "%f" % v


@op("CastMap", domain=ML, since=1)
def CastMap(xp, X, *, cast_to="TO_FLOAT", map_form="DENSE", max_map=1):
    """map(int64 -> string | float) -> [1, n]: the values in key order (DENSE), or at their key's
    position up to ``max_map`` (SPARSE)."""
    m = _map_of(X, "CastMap")
    casts = {"TO_FLOAT": (np.float32, 0.0), "TO_INT64": (np.int64, 0), "TO_STRING": (object, "0.f")}
    if cast_to not in casts:
        raise NodeError(f"CastMap: cast_to must be TO_FLOAT, TO_STRING or TO_INT64, got {cast_to!r}")
    if map_form not in ("DENSE", "SPARSE"):
        raise NodeError(f"CastMap: map_form must be DENSE or SPARSE, got {map_form!r}")
    dtype, pad = casts[cast_to]

    def cast(v):
        try:
            if cast_to == "TO_STRING":
                return v if isinstance(v, str) else _c_float(float(v))
            if cast_to == "TO_FLOAT":
                return float(v)
            return int(v) if isinstance(v, str) else int(float(v))
        except ValueError:
            raise NodeError(f"CastMap: cannot cast {v!r} with {cast_to}") from None

    keys = sorted(int(k) for k in m)
    if map_form == "DENSE":
        out = [cast(m[k]) for k in keys]
    else:
        if keys and keys[0] < 0:
            raise NodeError(f"CastMap: a SPARSE map cannot have the negative key {keys[0]}")
        out = [pad] * int(max_map)
        for k in keys:
            if k < max_map:
                out[k] = cast(m[k])
    arr = np.array(out, dtype=dtype).reshape(1, -1)
    return arr if dtype is object else xp.asarray(arr)


@op("DictVectorizer", domain=ML, since=1)
def DictVectorizer(xp, X, *, int64_vocabulary=None, string_vocabulary=None):
    """map -> [1, vocabulary]: each key's value at its position in the vocabulary, 0 elsewhere."""
    m = _map_of(X, "DictVectorizer")
    vocab = list(string_vocabulary or []) or list(int64_vocabulary or [])
    if not vocab:
        raise NodeError("DictVectorizer: int64_vocabulary or string_vocabulary is required")
    values = list(m.values())
    if values and all(isinstance(v, str) for v in values):
        out = np.full((1, len(vocab)), "", dtype=object)
    else:  # the values' type: a feed's map holds NumPy scalars of its declared type
        dt = np.asarray(values[0]).dtype if values else np.dtype(np.float32)
        dt = dt if dt in (np.float32, np.float64, np.int64) else np.dtype(np.int64 if dt.kind in "iu" else np.float32)
        out = np.zeros((1, len(vocab)), dtype=dt)
    index = {k: i for i, k in enumerate(vocab)}
    for k, v in m.items():
        i = index.get(k if isinstance(k, str) else int(k))
        if i is not None:
            out[0, i] = v
    return out if out.dtype == object else xp.asarray(out)


@op("ZipMap", domain=ML, since=1, syncs="a sequence of maps is built on the host")
def ZipMap(xp, X, *, classlabels_int64s=None, classlabels_strings=None):
    """[N, C] float -> a list of N dicts {class label: probability}, keys in sorted order."""
    labels = list(classlabels_strings or []) or [int(v) for v in classlabels_int64s or []]
    if not labels:
        raise NodeError("ZipMap: classlabels_strings or classlabels_int64s is required")
    x = to_host(X)
    if x.ndim == 1:
        x = x.reshape(1, -1)
    if x.ndim != 2 or x.shape[1] != len(labels):
        raise NodeError(f"ZipMap: input of shape {x.shape} does not have one column per class ({len(labels)})")
    order = sorted(range(len(labels)), key=labels.__getitem__)  # keys in order, as onnxruntime's std::map
    keys = [labels[i] for i in order]
    return [dict(zip(keys, row)) for row in x[:, order].astype(np.float64).tolist()]
