"""Devices: ``"cpu" | "cuda" | "cuda:N" | "auto"`` -> an array namespace.

This is the only module that moves data between host and device. CuPy is imported lazily, the
first time a CUDA device is asked for (or probed by ``"auto"``), so ``import gpuops`` needs NumPy only.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from .dtypes import device_supported
from .errors import DeviceError, FeedError

log = logging.getLogger("gpuops")


@dataclass(frozen=True)
class Device:
    """A resolved device: its kind (``"cpu"`` or ``"cuda"``), index and array namespace ``xp``."""

    kind: str
    index: int
    xp: ModuleType = field(repr=False, compare=False)
    lib: ModuleType | None = field(default=None, repr=False, compare=False)  # cupy (or its stand-in)

    def __str__(self) -> str:
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index}"

    def asarray(self, value: Any, dtype=None):
        """Host (or DLPack-capable) value -> an array on this device."""
        if self.kind == "cpu":
            return np.asarray(to_host(value), dtype=dtype)
        if isinstance(value, (np.ndarray, np.generic)) and not device_supported(np.dtype(dtype or value.dtype)):
            return np.asarray(value, dtype=dtype)  # strings, bfloat16, float8, int4...: host-resident
        with self.lib.cuda.Device(self.index):
            if not isinstance(value, (np.ndarray, np.generic, self.lib.ndarray)) and hasattr(value, "__dlpack__"):
                try:  # torch / jax / ... on a GPU: zero-copy
                    value = self.lib.from_dlpack(value)
                except Exception:  # a host tensor: one explicit copy
                    value = to_host(value)
            return self.lib.asarray(value, dtype=dtype)  # another GPU's array: one peer copy

    def classify(self, value: Any) -> str:
        """Where a feed lives: ``"host"`` (a NumPy array or scalar), ``"device"`` (already on this
        device), ``"other-device"`` (a GPU array of another device, or any GPU array for the CPU),
        ``"dlpack"`` (another library's tensor), ``"python"`` (a Python number or nested list)."""
        if isinstance(value, (np.ndarray, np.generic)):
            return "host"
        if _is_gpu_array(value):
            return "device" if self.kind == "cuda" and _device_id(value) == self.index else "other-device"
        if isinstance(value, (bool, int, float, complex, str, list, tuple)):
            return "python"
        if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
            return "dlpack"
        raise FeedError(f"a feed must be an array (NumPy, CuPy or DLPack-capable), a number or a nested "
                        f"list, not {type(value).__name__}")

    def intake(self, value: Any, dtype=None, upload=None):
        """A feed -> an array where this device keeps it, classified once (:meth:`classify`) and moved
        once. Python values are converted to ``dtype``; ``upload(host_array)`` makes the host->device copy
        (default :meth:`asarray`). Raises :class:`FeedError` for what cannot be a tensor."""
        if self.kind == "cpu" and type(value) is np.ndarray:  # the common case, without classifying it
            return value
        kind = self.classify(value)
        if kind == "device":
            return value
        if kind == "python":
            value = _from_python(value, dtype)
        elif kind == "dlpack":
            if self.kind == "cuda":
                with self.lib.cuda.Device(self.index):
                    try:  # a tensor on a GPU: zero-copy
                        value = self.lib.from_dlpack(value)
                    except (TypeError, BufferError, ValueError):
                        value = _host_from_dlpack(value)
                if _is_gpu_array(value):
                    return value if _device_id(value) == self.index else self.asarray(value)
            else:
                value = _host_from_dlpack(value)
        elif kind == "other-device":
            return self.asarray(value) if self.kind == "cuda" else to_host(value)
        if self.kind == "cpu" or not device_supported(value.dtype):
            return value  # host-resident: the CPU, or a dtype CuPy cannot hold
        return (upload or self.asarray)(np.asarray(value))

    def to_host(self, value: Any) -> np.ndarray:
        return to_host(value)

    def host_sync_count(self) -> int:
        """Host syncs on this thread so far. The stand-in counts every one (device reads, shapes that
        depend on device data, inside any library); on CuPy only gpuops' own device->host copies
        (host inputs, host-only nodes) are known."""
        if self.kind == "cpu":
            return 0
        if self.lib.__name__.startswith("gpuops.cuda_standin"):
            return self.lib.sync_count()
        return getattr(_counts, "syncs", 0)

    def declared_syncs(self):
        """A ``with`` block for an op that declares its host syncs: the CPU stand-in's strict regions
        let them through (still counted); nothing to do on CuPy."""
        if self.kind == "cuda" and self.lib.__name__.startswith("gpuops.cuda_standin"):
            return self.lib.declared_syncs()
        return contextlib.nullcontext()

    def kernel_launch_count(self) -> int | None:
        """Device op calls and kernel launches on this thread so far (the stand-in only; None on CuPy)."""
        if self.kind == "cuda" and self.lib.__name__.startswith("gpuops.cuda_standin"):
            return self.lib.launch_count()
        return None

    def owns_buffer(self, value) -> bool:
        """True when no other array can see ``value``'s memory: it owns it, or it is a view of an
        array that nothing but ``value`` holds (an op's reshaped result). With the executor's
        reference count of ``value`` this makes writing into it safe, as NumPy and CuPy views keep
        their base alive."""
        if self.kind == "cpu":
            return value.flags.writeable and sole_view(value)
        if self.lib.__name__.startswith("gpuops.cuda_standin"):
            return self.lib.owns_buffer(value)
        return sole_view(value)

    def is_native(self, value: Any) -> bool:
        """True when ``value`` is already where this device keeps it: an array of its namespace on this
        very device, or a host array of a dtype the device cannot hold."""
        if isinstance(value, np.ndarray) and not device_supported(value.dtype):
            return True
        if self.kind == "cpu":
            return isinstance(value, np.ndarray)
        return isinstance(value, self.lib.ndarray) and _device_id(value) == self.index


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


def _is_gpu_array(value) -> bool:
    return type(value).__module__.startswith(("cupy", "gpuops.cuda_standin")) and hasattr(value, "device")


def _device_id(value) -> int:
    return int(value.device.id)


def _host_from_dlpack(value) -> np.ndarray:
    try:
        return np.from_dlpack(value)
    except (BufferError, RuntimeError, TypeError, ValueError) as e:
        raise FeedError(f"cannot read a {type(value).__name__} feed through DLPack: {e}") from None


def _from_python(value, dtype) -> np.ndarray:
    """A Python number or (nested) list -> a NumPy array of ``dtype``, or a clear FeedError."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise FeedError(f"a {type(value).__name__} feed is not a tensor; pass a NumPy array")
    want = np.dtype(dtype) if dtype is not None else None
    try:
        probe = np.asarray(value)  # what the elements are, before any cast
        if probe.dtype == object and want != object:
            raise ValueError("ragged, mixed or out-of-range elements")
        if probe.dtype.kind in "US" and want is not None and want.kind not in "USO":
            raise ValueError("strings are not numbers")
        return np.asarray(value, dtype=want)
    except (ValueError, TypeError, OverflowError) as e:
        raise FeedError(f"cannot make a tensor{f' of {want}' if want else ''} from {_short(value)}: {e}") from None


def _short(value) -> str:
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


_counts = threading.local()  # gpuops' own device->host copies on this thread (see host_sync_count)


def to_host(value: Any) -> np.ndarray:
    """Any array (NumPy, CuPy, DLPack-capable) -> a NumPy array on the host."""
    if isinstance(value, np.ndarray):
        return value
    if type(value).__module__.startswith(("cupy", "gpuops.cuda_standin")):
        _counts.syncs = getattr(_counts, "syncs", 0) + 1
        return value.get()  # cupy.ndarray.get(): the explicit device -> host copy
    if hasattr(value, "__dlpack__") and not isinstance(value, np.generic):
        try:
            return np.from_dlpack(value)
        except (BufferError, RuntimeError, TypeError):
            pass
    return np.asarray(value)


STANDIN_ENV = "GPUOPS_CUDA_STANDIN"


def uses_standin() -> bool:
    """True when ``device="cuda"`` means the CPU stand-in for CuPy (``GPUOPS_CUDA_STANDIN=1``)."""
    return os.environ.get(STANDIN_ENV, "") not in ("", "0")


@functools.lru_cache(maxsize=2)
def _load_cupy(standin: bool) -> ModuleType | None:
    if standin:
        from . import cuda_standin

        return cuda_standin
    try:
        import cupy
    except Exception:  # ImportError, or a CuPy whose CUDA libraries are missing
        return None
    return cupy


def _cupy() -> ModuleType | None:
    """CuPy, or the CPU stand-in (:mod:`gpuops.cuda_standin`) when ``GPUOPS_CUDA_STANDIN=1``."""
    return _load_cupy(uses_standin())


def cuda_device_count() -> int:
    cupy = _cupy()
    if cupy is None:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


@functools.lru_cache(maxsize=None)
def _numpy_device() -> Device:
    import array_api_compat.numpy as xp

    return Device("cpu", 0, xp)


def _cuda_device(index: int) -> Device:
    return _cuda_device_of(index, uses_standin())


@functools.lru_cache(maxsize=None)
def _cuda_device_of(index: int, standin: bool) -> Device:
    n = cuda_device_count()
    if n == 0:
        why = "CuPy is not installed" if _cupy() is None else "no CUDA GPU is visible"
        raise DeviceError(f"device 'cuda:{index}' requested but {why} (pip install 'gpuops[cuda]')")
    if not 0 <= index < n:
        raise DeviceError(f"device 'cuda:{index}' requested but only {n} CUDA device(s) exist")
    lib = _cupy()
    if standin:
        return Device("cuda", index, lib.xp, lib)
    import array_api_compat.cupy as xp

    return Device("cuda", index, xp, lib)


_auto_logged = False


def get_device(spec: str | Device = "auto") -> Device:
    """Resolve a device string (``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"auto"``) to a :class:`Device`."""
    global _auto_logged
    if isinstance(spec, Device):
        return spec
    s = str(spec).strip().lower()
    if s == "cpu":
        return _numpy_device()
    if s == "auto":
        if cuda_device_count() > 0:
            return _cuda_device(0)
        if not _auto_logged:
            why = "CuPy is not installed" if _cupy() is None else "no CUDA GPU is visible"
            log.info("gpuops: device='auto' uses the CPU (%s)", why)
            _auto_logged = True
        return _numpy_device()
    if s == "cuda" or s.startswith("cuda:"):
        idx = s.partition(":")[2] or "0"
        if not idx.isdigit():
            raise DeviceError(f"bad device string {spec!r}: expected 'cuda:N'")
        return _cuda_device(int(idx))
    raise DeviceError(f"unknown device {spec!r}: use 'cpu', 'cuda', 'cuda:N' or 'auto'")


def devices() -> list[dict]:
    """The usable devices, each a dict with ``name`` and what is known of it (NVML when present)."""
    out = [{"name": "cpu", "kind": "cpu"}]
    for i in range(cuda_device_count()):
        out.append({"name": f"cuda:{i}", "kind": "cuda", **_cuda_info(i)})
    return out


def _cuda_info(index: int) -> dict:
    info: dict[str, Any] = {}
    cupy = _cupy()
    try:
        props = cupy.cuda.runtime.getDeviceProperties(index)
        info["device_name"] = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        info["memory_total"] = int(props["totalGlobalMem"])
        info["cuda_runtime"] = int(cupy.cuda.runtime.runtimeGetVersion())
        info["pci_bus_id"] = "{:04x}:{:02x}:{:02x}.0".format(
            int(props.get("pciDomainID", 0)), int(props["pciBusID"]), int(props.get("pciDeviceID", 0)))
    except Exception:
        pass
    if "pci_bus_id" not in info:  # NVML numbers GPUs in PCI order, ignoring CUDA_VISIBLE_DEVICES:
        return info  # only the bus id says which NVML device is CUDA's device `index`
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByPciBusId(info["pci_bus_id"])
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        info.update(
            device_name=_text(pynvml.nvmlDeviceGetName(h)),
            memory_total=int(mem.total),
            memory_free=int(mem.free),
            driver=_text(pynvml.nvmlSystemGetDriverVersion()),
            cuda_driver=int(pynvml.nvmlSystemGetCudaDriverVersion()),
        )
    except Exception:
        pass
    return info


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
