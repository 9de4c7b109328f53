"""Thread count of the BLAS library under the CPU ops (NumPy's OpenBLAS), set per session run.

Multithreaded OpenBLAS busy-waits for its worker threads: when other processes hold the cores its
latency collapses (several times slower than one thread on a busy 2-core machine; see
``gpuops bench --peers``). The default is therefore half of the CPUs this process may use (about
the physical cores on SMT machines), at least one. The count is applied through ``threadpoolctl``
when it is installed (an optional dependency) around each :meth:`InferenceSession.run`, and restored
afterwards; without it, the BLAS keeps its own setting (``OPENBLAS_NUM_THREADS``).
"""

from __future__ import annotations

import logging
import os

from .errors import GpuopsError

log = logging.getLogger("gpuops")

_controllers: list | None = None


def available_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_threads() -> int:
    """Half of the available CPUs, at least one."""
    return max(1, available_cpus() // 2)


def _blas_controllers(refresh: bool = False) -> list:
    """threadpoolctl's controllers of the BLAS libraries loaded now (cached; ``refresh`` rescans, as
    each new session does: SciPy, say, may have loaded a second OpenBLAS since)."""
    global _controllers
    if _controllers is None or refresh:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _controllers = []
        else:
            _controllers = [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]
    return _controllers


def resolve(threads: int | None) -> int:
    """The thread count for ``threads`` (None: :func:`default_threads`); a clear error for bad values."""
    found = _blas_controllers(refresh=True)
    if threads is None:
        return default_threads()
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise GpuopsError(f"threads must be a positive integer or None, not {threads!r}")
    if not found:
        log.warning("threads=%d has no effect: threadpoolctl is not installed (pip install threadpoolctl)",
                    threads)
    return threads


class blas_threads:
    """``with blas_threads(n):`` runs the enclosed code with ``n`` BLAS threads, then restores the
    previous counts (a plain class: it wraps every run, where a generator's overhead shows)."""

    __slots__ = ("n", "changed")

    def __init__(self, n: int):
        self.n = n
        self.changed: list = []

    def __enter__(self):
        self.changed = []
        for c in _blas_controllers():
            old = c.get_num_threads()
            if old != self.n:
                c.set_num_threads(self.n)
                self.changed.append((c, old))

    def __exit__(self, *exc):
        for c, old in self.changed:
            c.set_num_threads(old)
