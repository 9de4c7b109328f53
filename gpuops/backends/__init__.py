"""Array-library backends: what a :class:`gpuops.device.Device` computes with.

``device="cpu"`` is NumPy's backend (:mod:`gpuops.backends.numpy`). ``device="cuda"`` is the backend of
the module named by ``$GPUOPS_CUDA_BACKEND`` -- by default :mod:`gpuops.backends.cupy` (CuPy; ``cupy``
names it too). Any importable module can be named: it provides the backend with a function
``gpuops_backend()`` that returns a :class:`~gpuops.backends.base.Backend` (or None when its library
is unavailable). The CPU stand-in of CuPy that the tests run the CUDA path on is such a module::

    GPUOPS_CUDA_BACKEND=gpuops.testing.cuda_standin python -m pytest

A backend registers itself (:func:`register`) when it is made, so :func:`owner` can tell which backend
an array belongs to (an array of CuPy is traced to CuPy's backend even before a CUDA device is asked for).
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any

from ..errors import DeviceError
from .base import Backend, LaunchLimits  # noqa: F401  (the protocol)

BACKEND_ENV = "GPUOPS_CUDA_BACKEND"
DEFAULT_CUDA = "gpuops.backends.cupy"

_registered: list[Backend] = []
_by_type: dict[type, Backend | None] = {}


def register(backend: Backend) -> None:
    """Make ``backend``'s arrays known to :func:`owner` (idempotent)."""
    if backend not in _registered:
        _registered.append(backend)
        _by_type.clear()


def registered() -> tuple[Backend, ...]:
    return tuple(_registered)


def owner(value: Any) -> Backend | None:
    """The backend ``value`` is an array of (NumPy arrays: the NumPy backend), or None."""
    t = type(value)
    try:
        return _by_type[t]
    except KeyError:
        pass
    found = next((b for b in _registered if b.is_array(value)), None)
    if found is None and t.__module__.partition(".")[0] == "cupy":
        from .cupy import gpuops_backend  # a CuPy array: CuPy imports

        b = gpuops_backend()
        found = b if b is not None and b.is_array(value) else None
    _by_type[t] = found
    return found


def of_library(lib) -> Backend | None:
    """The registered backend of an array library module (``device.lib``), or None."""
    return next((b for b in _registered if b.lib is lib), None)


def cuda_module_name() -> str:
    """The module whose backend ``device="cuda"`` uses (``$GPUOPS_CUDA_BACKEND``, default CuPy's)."""
    name = os.environ.get(BACKEND_ENV, "").strip()
    return DEFAULT_CUDA if name in ("", "cupy") else name


def cuda_is_default() -> bool:
    """True when ``device="cuda"`` means CuPy (no other backend module is named)."""
    return cuda_module_name() == DEFAULT_CUDA


def cuda() -> Backend | None:
    """The CUDA backend in use, or None when its library is unavailable (CuPy not installed). A named
    module that does not import, or has no ``gpuops_backend()``, is a :class:`DeviceError`."""
    return _cuda(cuda_module_name())


@functools.lru_cache(maxsize=None)
def _cuda(name: str) -> Backend | None:
    try:
        module = importlib.import_module(name)
    except ImportError as e:
        raise DeviceError(f"{BACKEND_ENV}={name!r}: the module does not import ({e})") from None
    hook = getattr(module, "gpuops_backend", None)
    if hook is None:
        raise DeviceError(f"{BACKEND_ENV}={name!r}: the module has no gpuops_backend() (see gpuops.backends)")
    backend = hook()
    if backend is not None:
        register(backend)
    return backend


def cpu() -> Backend:
    """The CPU backend (NumPy's)."""
    return _NUMPY


from .numpy import BACKEND as _NUMPY  # noqa: E402

register(_NUMPY)
