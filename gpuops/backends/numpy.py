"""The CPU backend: NumPy arrays, through array-api-compat's NumPy namespace."""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import numpy as np

from .base import Backend, sole_view


class NumpyBackend(Backend):
    name = "numpy"
    kind = "cpu"

    @functools.cache
    def namespace(self) -> ModuleType:
        """array-api-compat's NumPy namespace, but for the functions it wraps only to pass their
        arguments on to NumPy unchanged (``matmul``, ``permute_dims``), which the ops get as NumPy's own:
        a wrapper costs more than NumPy's call on the small arrays of most nodes."""
        import array_api_compat.numpy as compat

        xp = ModuleType("gpuops.backends.numpy.xp", compat.__doc__)
        machinery = {"__name__", "__doc__", "__package__", "__loader__", "__spec__", "__path__", "__file__",
                     "__cached__", "__builtins__"}
        xp.__dict__.update({k: v for k, v in vars(compat).items() if k not in machinery})
        xp.matmul, xp.permute_dims = np.matmul, np.transpose
        return xp

    def is_array(self, value: Any) -> bool:
        return isinstance(value, np.ndarray)

    def asarray(self, value: Any, dtype=None):
        return np.asarray(value, dtype=dtype)

    def to_host(self, value: Any) -> np.ndarray:
        return np.asarray(value)

    def owns_buffer(self, value: Any) -> bool:
        return value.flags.writeable and sole_view(value)


BACKEND = NumpyBackend()
