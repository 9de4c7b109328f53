"""The CUDA backend of CuPy, and the base of backends that model CuPy's API.

:class:`CupyBackend` adapts any module with CuPy's interface (``ndarray``, ``asarray``, ``from_dlpack``,
``RawModule`` and ``cuda``: ``Device``, ``MemoryPool``, ``MemoryHook``, ``using_allocator``, ``Stream``,
``Event``, ``runtime``...) to :class:`gpuops.backends.base.Backend`. For CuPy itself, the array-API
namespace is array-api-compat's, the cuBLAS C API is ctypes over the ``libcublas`` CuPy loaded
(:class:`gpuops.cublas.CtypesCublas`), and the host syncs counted are gpuops' own device->host copies.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import numpy as np

from . import register
from .base import Backend, count_host_copy, host_copies, sole_view


class CupyBackend(Backend):
    kind = "cuda"

    def __init__(self, lib: ModuleType, name: str | None = None, xp: ModuleType | None = None):
        self.lib = lib
        self.name = name or lib.__name__
        self._xp = xp
        self.memory_hook = lib.cuda.MemoryHook

    def namespace(self) -> ModuleType:
        if self._xp is None:
            import array_api_compat.cupy as xp

            self._xp = xp
        return self._xp

    # -- devices and arrays ---------------------------------------------------------------------------

    def device_count(self) -> int:
        try:
            return int(self.lib.cuda.runtime.getDeviceCount())
        except Exception:  # no driver, no device
            return 0

    def device_properties(self, index: int) -> dict:
        return self.lib.cuda.runtime.getDeviceProperties(index)

    def runtime_version(self) -> int | None:
        return int(self.lib.cuda.runtime.runtimeGetVersion())

    def on_device(self, index: int):
        return self.lib.cuda.Device(index)

    def current_device(self) -> int:
        return int(self.lib.cuda.Device().id)

    def is_array(self, value: Any) -> bool:
        return isinstance(value, self.lib.ndarray)

    def device_id(self, value: Any) -> int:
        return int(value.device.id)

    def asarray(self, value: Any, dtype=None):
        return self.lib.asarray(value, dtype=dtype)

    def from_dlpack(self, value: Any):
        return self.lib.from_dlpack(value)

    def to_host(self, value: Any) -> np.ndarray:
        count_host_copy()
        return value.get()  # cupy.ndarray.get(): the explicit device -> host copy

    # -- sync accounting ------------------------------------------------------------------------------

    def host_sync_count(self) -> int:
        """On CuPy only gpuops' own device->host copies (host inputs, host-only nodes) are known."""
        return host_copies()

    # -- buffers --------------------------------------------------------------------------------------

    def owns_buffer(self, value: Any) -> bool:
        return sole_view(value)

    # -- kernels --------------------------------------------------------------------------------------

    def raw_module(self, code: str, options: tuple, name_expressions: tuple):
        return self.lib.RawModule(code=code, options=options, name_expressions=name_expressions)

    # -- allocator and streams ------------------------------------------------------------------------

    def memory_pool(self):
        return self.lib.cuda.MemoryPool()

    def using_allocator(self, malloc):
        return self.lib.cuda.using_allocator(malloc)

    def pinned_memory(self, nbytes: int):
        return self.lib.cuda.alloc_pinned_memory(nbytes)

    def event(self, **kwargs):
        return self.lib.cuda.Event(**kwargs)

    def elapsed_ms(self, start, end) -> float:
        return self.lib.cuda.get_elapsed_time(start, end)

    def stream(self, non_blocking: bool = False):
        return self.lib.cuda.Stream(non_blocking=non_blocking)

    def current_stream(self):
        return self.lib.cuda.get_current_stream()

    # -- cuBLAS ---------------------------------------------------------------------------------------

    def cublas_api(self):
        from ..cublas import CtypesCublas

        return CtypesCublas(self.lib)

    # -- dtypes ---------------------------------------------------------------------------------------

    @functools.cached_property
    def _bfloat16(self) -> bool:
        """CuPy >= 14 holds bfloat16 on NumPy >= 2.1.2 with ml_dtypes (``cupy/_core/_scalar.pyx``)."""
        try:
            major = int(str(self.lib.__version__).split(".")[0])
            import ml_dtypes  # noqa: F401
        except (ImportError, ValueError, AttributeError):
            return False
        return major >= 14 and np.lib.NumpyVersion(np.__version__) >= "2.1.2"

    def holds_bfloat16(self) -> bool:
        return self._bfloat16


@functools.cache
def gpuops_backend() -> CupyBackend | None:
    """CuPy's backend, or None when CuPy does not import (not installed, or its CUDA libraries are
    missing)."""
    try:
        import cupy
    except Exception:
        return None
    backend = CupyBackend(cupy, "cupy")
    register(backend)
    return backend
