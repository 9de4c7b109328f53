"""The backend protocol: what :class:`gpuops.device.Device` asks of an array library.

A backend adapts one array library (NumPy, CuPy, or anything that models CuPy) to one interface:

* **devices and arrays** -- :attr:`Backend.kind` (``"cpu"`` / ``"cuda"``), :meth:`Backend.namespace`
  (the array-API namespace the ops get), :meth:`Backend.device_count`, :meth:`Backend.on_device`,
  :meth:`Backend.current_device`;
  :meth:`Backend.is_array` (is this value one of mine) and :meth:`Backend.device_id` (on which device),
  :meth:`Backend.asarray` / :meth:`Backend.from_dlpack` (onto a device) and :meth:`Backend.to_host`
  (the explicit device->host copy);
* **sync accounting** -- :meth:`Backend.host_sync_count`, :meth:`Backend.declared_syncs`,
  :meth:`Backend.kernel_launch_count` (None where the library cannot count them);
* **buffer ownership** -- :meth:`Backend.owns_buffer`, for the executor's in-place writes;
* **kernels** -- :attr:`Backend.launch_limits` (the grid and block sizes :mod:`gpuops.kernels` may use)
  and :meth:`Backend.raw_module` (compiles a ``.cu`` source, CuPy's ``RawModule`` convention);
* **allocator and streams** -- :meth:`Backend.memory_pool`, :attr:`Backend.memory_hook`,
  :meth:`Backend.using_allocator`, :meth:`Backend.pinned_memory`, :meth:`Backend.event`,
  :meth:`Backend.elapsed_ms`, :meth:`Backend.stream`, :meth:`Backend.current_stream`;
* **cuBLAS** -- :meth:`Backend.cublas_api`, the C API object :class:`gpuops.cublas.CaptureBlas` calls;
* **dtypes** -- :meth:`Backend.holds_bfloat16`.

The defaults here are a host library's (no device, nothing to count, no kernels); the CUDA backends
override them. A backend is made once per process and registered (:func:`gpuops.backends.register`),
so that an array can be traced back to its backend (:func:`gpuops.backends.owner`).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np


@dataclass(frozen=True)
class LaunchLimits:
    """The launch configurations a backend's kernels take (see :func:`gpuops.kernels.launch_config`).

    A GPU wants many blocks; an emulation of the CUDA execution model on the CPU pays a context switch
    per emulated thread, so it wants a few blocks of few threads, each looping over more elements."""

    max_blocks: int = 65535  # blocks of a 1-D grid-stride launch
    max_threads: int | None = None  # threads of a grid-stride block (None: what the caller asks)
    max_grid_z: int = 65535  # the z extent of a 3-D grid (a batch of tiles)
    nms_select_block: int = 128  # nms.cu: nms_select's block


GPU_LIMITS = LaunchLimits()


class Backend:
    """One array library behind :class:`gpuops.device.Device` (see the module docstring)."""

    name: str = "backend"  # how the backend is known: "numpy", "cupy", or its module's name
    kind: str = "cpu"  # "cpu" or "cuda"
    lib: ModuleType | None = None  # the CuPy-like module of a CUDA backend (None on the CPU)
    emulated: bool = False  # kernels run on a CPU emulation of the CUDA execution model, not a GPU
    launch_limits: LaunchLimits = GPU_LIMITS
    memory_hook: type | None = None  # the base class of allocation observers (CuPy's MemoryHook)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    # -- devices and arrays ---------------------------------------------------------------------------

    def namespace(self) -> ModuleType:
        """The array-API namespace (``xp``) the ops compute with."""
        raise NotImplementedError

    def device_count(self) -> int:
        return 1

    def device_properties(self, index: int) -> dict:
        """What the library knows of device ``index`` (CUDA's ``cudaDeviceProp`` keys); {} when nothing."""
        return {}

    def runtime_version(self) -> int | None:
        return None

    def on_device(self, index: int):
        """A ``with`` block in which device ``index`` is the current one."""
        return contextlib.nullcontext()

    def current_device(self) -> int:
        """This thread's current device."""
        return 0

    def is_array(self, value: Any) -> bool:
        """True when ``value`` is an array of this library."""
        raise NotImplementedError

    def device_id(self, value: Any) -> int:
        """The device an array of this library lives on."""
        return 0

    def asarray(self, value: Any, dtype=None):
        """Host data (or another device's array) -> an array of this library on the current device."""
        raise NotImplementedError

    def from_dlpack(self, value: Any):
        """Another library's device tensor -> a zero-copy array (TypeError, BufferError or ValueError
        when it is not on a device this library reaches)."""
        raise TypeError(f"{self.name} imports no DLPack device tensors")

    def to_host(self, value: Any) -> np.ndarray:
        """The explicit device->host copy of an array of this library."""
        return np.asarray(value)

    # -- sync accounting --------------------------------------------------------------------------------

    def host_sync_count(self) -> int:
        """Host syncs on this thread so far (what the library can count)."""
        return 0

    def declared_syncs(self):
        """A ``with`` block for an op that declares its host syncs (a checking library lets them through)."""
        return contextlib.nullcontext()

    def kernel_launch_count(self) -> int | None:
        """Device op calls and kernel launches on this thread so far; None where they are not counted."""
        return None

    # -- buffers ----------------------------------------------------------------------------------------

    def owns_buffer(self, value: Any) -> bool:
        """True when no other array can see ``value``'s memory (see :func:`sole_view`)."""
        return sole_view(value)

    # -- kernels ----------------------------------------------------------------------------------------

    def raw_module(self, code: str, options: tuple, name_expressions: tuple):
        """``code`` compiled for the current device, with CuPy's ``RawModule`` interface
        (``get_function(name)(grid, block, args, shared_mem=0)``)."""
        raise TypeError(f"{self.name} runs no CUDA kernels")

    # -- allocator and streams --------------------------------------------------------------------------

    def memory_pool(self):
        """A new device memory pool (CuPy's ``MemoryPool`` interface); None on the CPU."""
        return None

    def using_allocator(self, malloc):
        """A ``with`` block whose device allocations come from ``malloc`` (a pool's)."""
        return contextlib.nullcontext()

    def pinned_memory(self, nbytes: int):
        """Page-locked host memory (a buffer) for host->device copies."""
        return bytearray(nbytes)

    def event(self, **kwargs):
        raise TypeError(f"{self.name} has no device events")

    def elapsed_ms(self, start, end) -> float:
        raise TypeError(f"{self.name} has no device events")

    def stream(self, non_blocking: bool = False):
        raise TypeError(f"{self.name} has no streams")

    def current_stream(self):
        return None

    # -- cuBLAS -----------------------------------------------------------------------------------------

    def cublas_api(self):
        """The cuBLAS C API object (``create``, ``destroy``, ``set_stream``, ``set_workspace``,
        ``gemm_strided_batched``) over this library's arrays and streams."""
        raise TypeError(f"{self.name} has no cuBLAS")

    # -- dtypes -----------------------------------------------------------------------------------------

    def holds_bfloat16(self) -> bool:
        """Whether this library's arrays can be bfloat16 (ml_dtypes')."""
        return True


# -- what the backends share ------------------------------------------------------------------------

_counts = threading.local()  # gpuops' own device->host copies on this thread (libraries that count none)


def count_host_copy() -> None:
    _counts.syncs = getattr(_counts, "syncs", 0) + 1


def host_copies() -> int:
    """gpuops' own device->host copies on this thread so far."""
    return getattr(_counts, "syncs", 0)


def _base_refs(a) -> int:
    base = a.base
    return sys.getrefcount(base)


_BASE_HELD_ONCE = _base_refs(np.empty(1).reshape(1))  # measured: interpreters count differently


def sole_view(a) -> bool:
    """``a`` (a NumPy or CuPy array) owns its memory, or its base is an array that only ``a`` holds."""
    if a.base is None:
        return True
    if _base_refs(a) != _BASE_HELD_ONCE:  # counted before binding the base here
        return False
    base = a.base
    return type(base) is type(a) and base.base is None
