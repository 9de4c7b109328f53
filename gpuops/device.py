"""Devices: ``"cpu" | "cuda" | "cuda:N" | "auto"`` -> a :class:`Device`: a backend and an array namespace.

This is the only module that moves data between host and device. A device holds a backend
(:mod:`gpuops.backends`): NumPy's for the CPU, and for CUDA the backend of the module that
``$GPUOPS_CUDA_BACKEND`` names (CuPy's by default). CuPy is imported lazily, the first time a CUDA device
is asked for (or probed by ``"auto"``), so ``import gpuops`` needs NumPy only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from . import backends
from .backends import BACKEND_ENV, Backend
from .dtypes import device_supported
from .errors import DeviceError, FeedError

log = logging.getLogger("gpuops")


@dataclass(frozen=True)
class Device:
    """A resolved device: its kind (``"cpu"`` or ``"cuda"``), index and backend, whose array namespace
    is ``xp`` and whose CuPy-like module (None on the CPU) is ``lib``."""

    kind: str
    index: int
    backend: Backend = field(repr=False, compare=False)
    xp: ModuleType = field(init=False, repr=False, compare=False)
    lib: ModuleType | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "xp", self.backend.namespace())
        object.__setattr__(self, "lib", self.backend.lib)

    def __str__(self) -> str:
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index}"

    def asarray(self, value: Any, dtype=None):
        """Host (or DLPack-capable) value -> an array on this device."""
        if self.kind == "cpu":
            return np.asarray(to_host(value), dtype=dtype)
        if isinstance(value, (np.ndarray, np.generic)) and not device_supported(np.dtype(dtype or value.dtype)):
            return np.asarray(value, dtype=dtype)  # strings, bfloat16, float8, int4...: host-resident
        b = self.backend
        with b.on_device(self.index):
            if not isinstance(value, (np.ndarray, np.generic)) and not b.is_array(value) \
                    and hasattr(value, "__dlpack__"):
                try:  # torch / jax / ... on a GPU: zero-copy
                    value = b.from_dlpack(value)
                except Exception:  # a host tensor: one explicit copy
                    value = to_host(value)
            return b.asarray(value, dtype=dtype)  # another GPU's array: one peer copy

    def classify(self, value: Any) -> str:
        """Where a feed lives: ``"host"`` (a NumPy array or scalar), ``"device"`` (already on this
        device), ``"other-device"`` (a GPU array of another device, or any GPU array for the CPU),
        ``"dlpack"`` (another library's tensor), ``"python"`` (a Python number or nested list)."""
        if isinstance(value, (np.ndarray, np.generic)):
            return "host"
        b = _device_backend(value)
        if b is not None:
            same = b is self.backend and b.device_id(value) == self.index
            return "device" if same else "other-device"
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
                b = self.backend
                with b.on_device(self.index):
                    try:  # a tensor on a GPU: zero-copy
                        value = b.from_dlpack(value)
                    except (TypeError, BufferError, ValueError):
                        value = _host_from_dlpack(value)
                if b.is_array(value):
                    return value if b.device_id(value) == self.index else self.asarray(value)
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
        """Host syncs on this thread so far: what the backend counts (a checking stand-in counts every
        one; on CuPy only gpuops' own device->host copies are known)."""
        return self.backend.host_sync_count()

    def declared_syncs(self):
        """A ``with`` block for an op that declares its host syncs: a checking backend lets them
        through (still counted); nothing to do on CuPy."""
        return self.backend.declared_syncs()

    def kernel_launch_count(self) -> int | None:
        """Device op calls and kernel launches on this thread so far (None where the backend cannot
        count them, as on CuPy)."""
        return self.backend.kernel_launch_count()

    def owns_buffer(self, value) -> bool:
        """True when no other array can see ``value``'s memory: it owns it, or it is a view of an
        array that nothing but ``value`` holds (an op's reshaped result). With the executor's
        reference count of ``value`` this makes writing into it safe, as NumPy and CuPy views keep
        their base alive."""
        return self.backend.owns_buffer(value)

    def is_native(self, value: Any) -> bool:
        """True when ``value`` is already where this device keeps it: an array of its namespace on this
        very device, or a host array of a dtype the device cannot hold."""
        if isinstance(value, np.ndarray) and not device_supported(value.dtype):
            return True
        if self.kind == "cpu":
            return isinstance(value, np.ndarray)
        return self.backend.is_array(value) and self.backend.device_id(value) == self.index


def _device_backend(value) -> Backend | None:
    """The backend of a device (not host) array, or None."""
    b = backends.owner(value)
    return b if b is not None and b.kind != "cpu" else None


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


def to_host(value: Any) -> np.ndarray:
    """Any array (NumPy, CuPy, DLPack-capable) -> a NumPy array on the host."""
    if isinstance(value, np.ndarray):
        return value
    b = _device_backend(value)
    if b is not None:
        return b.to_host(value)  # the explicit device -> host copy
    if hasattr(value, "__dlpack__") and not isinstance(value, np.generic):
        try:
            return np.from_dlpack(value)
        except (BufferError, RuntimeError, TypeError):
            pass
    return np.asarray(value)


def uses_standin() -> bool:
    """True when ``device="cuda"`` is not CuPy but a stand-in of it: ``$GPUOPS_CUDA_BACKEND`` names
    another backend module (e.g. the CPU stand-in that runs the CUDA path in CI)."""
    return not backends.cuda_is_default()


STANDIN_ENV = BACKEND_ENV  # the variable that selects a stand-in (its older name; tests still use it)


def cuda_backend() -> Backend | None:
    """The CUDA backend in use (None when its library, CuPy, is unavailable)."""
    return backends.cuda()


def cuda_library() -> ModuleType | None:
    """The CUDA backend's CuPy-like module (``cupy`` by default), or None when unavailable."""
    b = backends.cuda()
    return None if b is None else b.lib


_cupy = cuda_library  # the older name


def cuda_device_count() -> int:
    b = backends.cuda()
    return 0 if b is None else b.device_count()


def _numpy_device() -> Device:
    return _device_of(backends.cpu(), 0)


def _cuda_device(index: int) -> Device:
    b = backends.cuda()
    known = _devices.get((b, index))
    if known is not None:
        return known
    n = 0 if b is None else b.device_count()
    if n == 0:
        why = "CuPy is not installed" if b is None else "no CUDA GPU is visible"
        raise DeviceError(f"device 'cuda:{index}' requested but {why} (pip install 'gpuops[cuda]')")
    if not 0 <= index < n:
        raise DeviceError(f"device 'cuda:{index}' requested but only {n} CUDA device(s) exist")
    return _device_of(b, index)


_devices: dict[tuple[Backend, int], Device] = {}


def _device_of(backend: Backend, index: int) -> Device:
    d = _devices.get((backend, index))
    if d is None:
        d = _devices.setdefault((backend, index), Device(backend.kind, index, backend))
    return d


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
            why = "CuPy is not installed" if backends.cuda() is None else "no CUDA GPU is visible"
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
    b = backends.cuda()
    try:
        props = b.device_properties(index)
        info["device_name"] = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        info["memory_total"] = int(props["totalGlobalMem"])
        info["cuda_runtime"] = b.runtime_version()
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
