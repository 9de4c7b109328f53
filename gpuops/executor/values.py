"""A run's values: their sizes and host copies (arrays, sequences of arrays, maps, None)."""

from __future__ import annotations

from ..device import to_host


def host_value(value):
    """A value (array, sequence, map or None) with its arrays copied to the host."""
    if value is None:
        return None
    if isinstance(value, list):
        return [host_value(v) for v in value]
    if isinstance(value, dict):
        return {k: host_value(v) for k, v in value.items()}
    return to_host(value)


def nbytes(value) -> int:
    """Bytes of a value (an array, or a sequence of arrays); 0 for None."""
    try:
        return value.nbytes
    except AttributeError:
        return sum(nbytes(v) for v in value) if isinstance(value, list) else 0
