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
        import array_api_compat.numpy as xp

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
