"""A run's values: their sizes and host copies (arrays, sequences of arrays, maps, None)."""

from __future__ import annotations

import numpy as np

from ..device import to_host
from ..errors import FeedError


def host_value(value):
    """A value (array, sequence, map or None) with its arrays copied to the host."""
    if value is None:
        return None
    if isinstance(value, list):
        return [host_value(v) for v in value]
    if isinstance(value, dict):
        return {k: host_value(v) for k, v in value.items()}
    if isinstance(value, (int, float, str)):  # a map's values (ZipMap's probabilities) stay Python's
        return value
    return to_host(value)


def record_shape(shapes: dict, name: str, value) -> None:
    """Note ``value``'s shape and dtype as ``shapes[name]`` when it is an array (a run recording the
    shapes of its values, for a shape-specialized plan)."""
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        shapes[name] = (tuple(shape), np.dtype(value.dtype))


def check_map(value, key_dtype: np.dtype, value_dtype: np.dtype) -> dict:
    """A map feed (a dict of key -> value with the declared types) as a dict of Python keys and NumPy
    scalars of the value type (strings stay ``str``); anything else is a :class:`FeedError`."""
    kinds = {"O": (str,), "i": (int, np.integer), "f": (float, int, np.floating, np.integer)}
    want = f"a map (dict) of {key_dtype.name if key_dtype != object else 'string'} -> " \
           f"{value_dtype.name if value_dtype != object else 'string'}"
    if not isinstance(value, dict):
        raise FeedError(f"expected {want}, got {type(value).__name__}")
    key_ok, value_ok = kinds.get(key_dtype.kind), kinds.get(value_dtype.kind)
    for k, v in value.items():
        if (key_ok and (not isinstance(k, key_ok) or isinstance(k, bool))) or \
                (value_ok and (not isinstance(v, value_ok) or isinstance(v, bool))):
            raise FeedError(f"expected {want}, got the entry {k!r}: {v!r}")
    if value_dtype.kind in "fi":
        return {k if isinstance(k, str) else int(k): value_dtype.type(v) for k, v in value.items()}
    return dict(value)


def nbytes(value) -> int:
    """Bytes of a value (an array, or a sequence of arrays); 0 for None."""
    try:
        return value.nbytes
    except AttributeError:
        return sum(nbytes(v) for v in value) if isinstance(value, list) else 0


def string_feed(arr: np.ndarray) -> np.ndarray:
    """A NumPy str (``U``) or UTF-8 bytes (``S``) array as the object array of ``str`` that string
    tensors are."""
    if arr.dtype.kind == "S":
        try:
            return np.char.decode(arr, "utf-8").astype(object)
        except UnicodeDecodeError as e:
            raise FeedError(f"a bytes string feed is not UTF-8: {e}") from None
    return arr.astype(object)
