"""Device memory for a session: its own CuPy ``MemoryPool``, a limit, and what it did.

The executor frees every intermediate after its last consumer (the liveness plan in
:mod:`gpuops.onnx.plan`), so the pool hands the same blocks to later nodes; this module makes that
visible (allocations vs reuses, current/peak/pooled bytes) and turns running out of memory into a
:class:`gpuops.OutOfMemoryError`. On the CPU there is no pool: only the liveness accounting is kept.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from dataclasses import dataclass, field

import numpy as np

from .device import Device
from .dtypes import device_supported


class LiveBytes:
    """Bytes of the values a run holds under the liveness plan (both devices): its feeds until their
    last use and its intermediates from their node to their last use, an output written over a
    dying input counted once."""

    __slots__ = ("current", "peak", "produced", "in_place")

    def __init__(self, current: int = 0):
        self.current = self.peak = current
        self.produced = 0  # every intermediate, as if none were ever freed
        self.in_place = 0  # outputs written into a dying input's buffer

    def hold(self, nbytes: int) -> None:
        """Bytes live from now on that no node made (the feeds; the executor counts node outputs
        inline)."""
        self.current += nbytes
        self.peak = max(self.peak, self.current)


# How each CUDA library says it ran out of memory: the exception's class name, the attribute holding
# its code, and that code. Matched by name, so CuPy's classes and the CPU stand-in's are both known.
_OOM_CODES = {
    "CUDARuntimeError": ("status", 2),  # cudaErrorMemoryAllocation (cupy_backends/cuda/api/runtime.pyx)
    "CUDADriverError": ("status", 2),  # CUDA_ERROR_OUT_OF_MEMORY (cupy_backends/cuda/api/driver.pyx)
    "CUBLASError": ("status", 3),  # CUBLAS_STATUS_ALLOC_FAILED (cupy_backends/cuda/libs/cublas.pyx)
    "CUSOLVERError": ("status", 2),  # CUSOLVER_STATUS_ALLOC_FAILED (cupy_backends/cuda/libs/cusolver.pyx)
    "CuSparseError": ("status", 3),  # CUSPARSE_STATUS_ALLOC_FAILED (cupy_backends/cuda/libs/cusparse.pyx)
    "CURANDError": ("status", 102),  # CURAND_STATUS_ALLOCATION_FAILED (cupy_backends/cuda/libs/curand.pyx)
    "CuTensorError": ("status", 3),  # CUTENSOR_STATUS_ALLOC_FAILED (cupy_backends/cuda/libs/cutensor.pyx)
    "CuFFTError": ("result", 2),  # CUFFT_ALLOC_FAILED: cuFFT's code is `.result` (cupy/cuda/cufft.pyx)
}


def is_out_of_memory(e: BaseException) -> bool:
    """True for every way CuPy and the CUDA libraries report running out of device memory:
    ``MemoryError`` (CuPy's ``cupy.cuda.memory.OutOfMemoryError`` is one), the runtime's
    ``cudaErrorMemoryAllocation``, the driver's ``CUDA_ERROR_OUT_OF_MEMORY`` (a kernel launch or a
    module load), and cuBLAS / cuSOLVER / cuSPARSE / cuRAND / cuTENSOR / cuFFT failing to allocate."""
    if isinstance(e, MemoryError):
        return True
    for cls in type(e).__mro__:
        code = _OOM_CODES.get(cls.__name__)
        if code is not None:
            return getattr(e, code[0], None) == code[1]
    return False


_hook_ids = itertools.count()
_NO_POOL = contextlib.nullcontext()


@dataclass
class MemoryManager:
    device: Device
    limit: int | float | None = None
    allocations: int = 0
    reuses: int = 0
    peak: int = 0
    plan_peak: int = 0
    produced: int = 0
    weights: int = 0  # the session's initializers on the device
    in_place: int = 0
    pool: object = field(default=None, repr=False)
    _pinned: dict = field(default_factory=dict, repr=False)  # input name -> (pinned staging, copy event)
    _staging_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self):
        if self.device.kind != "cuda":
            return
        self.pool = self.new_pool()
        manager = self

        class _Counter(self.device.backend.memory_hook):
            name = f"gpuops-{next(_hook_ids)}"  # CuPy keys a thread's hooks by name: one per session

            def alloc_postprocess(self, device_id, mem_size, mem_ptr):
                manager.allocations += 1

            def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):
                manager.reuses += 1  # every pool malloc; the fresh ones are subtracted in stats()

        self._hook = _Counter()

    def on_device(self):
        """CuPy's pool methods act on the current device: make it this session's."""
        return self.device.backend.on_device(self.device.index)

    def new_pool(self):
        """A memory pool on this session's device with its limit (a CUDA graph keeps one of its own)."""
        pool = self.device.backend.memory_pool()
        if self.limit is not None:
            with self.on_device():  # a pool's limit is per device: the current one
                if isinstance(self.limit, float) and 0 < self.limit <= 1:
                    pool.set_limit(fraction=self.limit)
                else:
                    pool.set_limit(size=int(self.limit))
        return pool

    def free_pool(self, pool) -> None:
        """Give a pool's cached blocks back to the device (once nothing uses them)."""
        with self.on_device():
            pool.free_all_blocks()

    def active(self):
        """A ``with`` block whose allocations come from this session's pool (and are counted)."""
        return _NO_POOL if self.pool is None else self._active()

    @contextlib.contextmanager
    def _active(self):
        b = self.device.backend
        with b.on_device(self.device.index), b.using_allocator(self.pool.malloc), self._hook:
            yield

    def upload(self, host: np.ndarray, key: str):
        """A host feed -> the device through a pinned staging buffer kept per input (``key``), so the
        copy is a DMA from page-locked memory; the buffer is reused once its last copy has finished.
        Threads take turns on the staging buffers."""
        if self.pool is None or not device_supported(host.dtype):
            return self.device.asarray(host)
        with self._staging_lock:
            return self._upload(host, key)

    def _upload(self, host: np.ndarray, key: str):
        b = self.device.backend
        staging, done = self._pinned.get(key, (None, None))
        if staging is None or staging.nbytes < host.nbytes:
            mem = b.pinned_memory(max(host.nbytes, 1))
            staging, done = np.frombuffer(mem, np.uint8, max(host.nbytes, 1)), b.event()
        else:
            done.synchronize()
        dtype = host.dtype.newbyteorder("=")  # CuPy holds native byte order only (big-endian is a ValueError)
        staged = staging[:host.nbytes].view(dtype).reshape(host.shape)
        np.copyto(staged, host)
        with b.on_device(self.device.index):
            out = self.device.xp.empty(host.shape, dtype=dtype)
            out.set(staged)
            done.record()
        self._pinned[key] = (staging, done)
        return out

    def used_bytes(self) -> int:
        if self.pool is None:
            return 0
        with self.on_device():
            return self.pool.used_bytes()

    def note_node(self) -> None:
        if self.pool is not None:
            self.peak = max(self.peak, self.used_bytes())

    def note_run(self, live: LiveBytes) -> None:
        if live.peak > self.plan_peak:  # (comparisons: max() costs a call each, every run)
            self.plan_peak = live.peak
        if live.produced > self.produced:
            self.produced = live.produced
        self.in_place = live.in_place

    def release_cached(self) -> None:
        if self.pool is not None:
            with self.on_device():
                self.pool.free_all_blocks()

    def close(self) -> None:
        self._pinned.clear()
        self.release_cached()

    def stats(self) -> dict:
        """current/peak/pooled bytes (the device pool's, weights included; 0 on the CPU), allocations
        vs reuses, the weights' bytes, the liveness plan's peak (feeds and intermediates: the least a
        run can hold) and how many outputs the last run wrote into a dying input."""
        pooled = limit = None
        if self.pool is not None:
            with self.on_device():
                pooled, limit = self.pool.total_bytes(), self.pool.get_limit()
        return {
            "device": str(self.device),
            "current_bytes": self.used_bytes(),
            "peak_bytes": self.peak,
            "pooled_bytes": pooled or 0,
            "allocations": self.allocations,
            "reuses": max(self.reuses - self.allocations, 0),
            "weights_bytes": self.weights,
            "planned_peak_bytes": self.plan_peak,
            "intermediates_total_bytes": self.produced,
            "in_place_outputs": self.in_place,
            "limit_bytes": limit,
        }
