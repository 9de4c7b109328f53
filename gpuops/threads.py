"""Thread count of the CPU ops, set per session run: the BLAS library under them (NumPy's OpenBLAS)
and the native kernels (the session passes the count to :func:`gpuops.native.set_threads`; their one
pool's workers poll for a fraction of a millisecond after a call, yielding their core, then sleep).

The default, as onnxruntime's, is the number of physical cores this process may use (SMT siblings
counted once), at most :data:`MAX_DEFAULT_THREADS`; ``GPUOPS_NUM_THREADS`` replaces it, and a
session's ``threads=`` replaces both. Multithreaded OpenBLAS busy-waits for its worker threads, so on
a machine whose cores other processes load, fewer threads can be faster (``gpuops bench --peers``
measures both). The BLAS count is applied around each :meth:`InferenceSession.run`, where it differs,
and restored afterwards (:class:`blas_threads`), the libraries found through ``threadpoolctl`` when it
is installed (an optional dependency); without it, the BLAS keeps its own setting
(``OPENBLAS_NUM_THREADS``) and only the native kernels follow ``threads``.
Native programs of a run that calls the BLAS nowhere else hold it at one thread and split their
products across the native kernels' pool (:class:`blas_single`): OpenBLAS's workers, once woken,
spin through the rest of the run.
"""

from __future__ import annotations

import logging
import os
import threading

from .errors import GpuopsError

log = logging.getLogger("gpuops")

_controllers: list | None = None


def available_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


ENV = "GPUOPS_NUM_THREADS"
MAX_DEFAULT_THREADS = 16
"""The default's cap: past it a model's ops rarely have the parallel work, and a many-core server's
other processes keep their cores (``threads=`` or ``GPUOPS_NUM_THREADS`` go past it)."""


def physical_cores() -> int:
    """Physical cores among the CPUs this process may use: SMT siblings (Linux's
    ``topology/thread_siblings_list``) counted once; the CPU count where the topology is unknown."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
    cores = set()
    for c in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list") as f:
                cores.add(f.read().strip())
        except OSError:
            return max(1, len(cpus))
    return max(1, len(cores))


def _positive(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GpuopsError(f"{what} must be a positive integer or None, not {value!r}")
    return value


def from_env() -> int | None:
    """``GPUOPS_NUM_THREADS`` as a count (None when unset or empty); a clear error for anything else."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    try:
        n = int(raw, 10)
    except ValueError:
        n = 0
    if n < 1:
        raise GpuopsError(f"{ENV} must be a positive integer, not {os.environ[ENV]!r}")
    return n


def default_threads() -> int:
    """``GPUOPS_NUM_THREADS`` when set, else the physical cores, at most :data:`MAX_DEFAULT_THREADS`."""
    env = from_env()
    return env if env is not None else min(physical_cores(), MAX_DEFAULT_THREADS)


def _blas_controllers(refresh: bool = False) -> list:
    """threadpoolctl's controllers of the BLAS libraries loaded now (cached; ``refresh`` rescans, as
    each new session does: SciPy, say, may have loaded a second OpenBLAS since)."""
    global _controllers, _handles
    if _controllers is None or refresh:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _controllers = []
        else:
            _controllers = [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]
        _handles = [_handle(c) for c in _controllers]
    return _controllers


_handles: list = []  # (get, set) of each controller's thread count, as _handle makes them
_AFFIXES = [(p, s) for p in ("", "scipy_") for s in ("", "64_", "_64")]  # OpenBLAS builds' symbol names


def _handle(c) -> tuple:
    """(get, set) of controller ``c``'s thread count. A pthreads OpenBLAS (NumPy's) is called through
    its own ``openblas_{get,set}_num_threads``: a C call each, where threadpoolctl's methods cost a
    microsecond (each run sets the count and restores it). Other libraries go through threadpoolctl."""
    if getattr(c, "internal_api", None) == "openblas" and getattr(c, "threading_layer", None) == "pthreads":
        import ctypes

        try:
            lib = ctypes.CDLL(c.filepath, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_GLOBAL)
        except OSError:
            lib = None
        for pre, suf in _AFFIXES if lib is not None else ():
            get = getattr(lib, f"{pre}openblas_get_num_threads{suf}", None)
            put = getattr(lib, f"{pre}openblas_set_num_threads{suf}", None)
            if get is not None and put is not None:
                get.argtypes, get.restype = (), ctypes.c_int
                put.argtypes, put.restype = (ctypes.c_int,), None
                return get, put
    return c.get_num_threads, c.set_num_threads


_sgemm: list = []  # [blas_sgemm()'s tuple or None], found once


def blas_sgemm() -> tuple[int, bool, int, int] | None:
    """(the address of ``cblas_sgemm`` of the OpenBLAS NumPy uses, whether its integers are 64-bit, the addresses
    of its ``cblas_sgemv`` and ``openblas_get_num_threads``), or None (threadpoolctl absent, another BLAS): for
    native programs' matrix products, which then run as NumPy would run them (a one-row product by the
    matrix-vector routine), split across the native pool while the BLAS runs on one thread. An OpenBLAS built
    for 64-bit integers names its symbols with a 64 suffix."""
    if not _sgemm:
        import ctypes

        found = None
        for c in _blas_controllers():
            if getattr(c, "internal_api", None) != "openblas":
                continue
            try:
                lib = ctypes.CDLL(c.filepath, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_GLOBAL)
            except OSError:
                continue
            for pre, suf in _AFFIXES:
                gemm = getattr(lib, f"{pre}cblas_sgemm{suf}", None)
                gemv = getattr(lib, f"{pre}cblas_sgemv{suf}", None)
                count = getattr(lib, f"{pre}openblas_get_num_threads{suf}", None)
                if gemm is not None and gemv is not None:
                    found = (ctypes.cast(gemm, ctypes.c_void_p).value, "64" in suf,
                             ctypes.cast(gemv, ctypes.c_void_p).value,
                             0 if count is None else ctypes.cast(count, ctypes.c_void_p).value)
                    break
            if found:
                break
        _sgemm.append(found)
    return _sgemm[0]


def resolve(threads: int | None) -> int:
    """The thread count for ``threads`` (None: :func:`default_threads`); a clear error for bad values."""
    found = _blas_controllers(refresh=True)
    if threads is None:
        return default_threads()
    _positive(threads, "threads")
    if not found:
        log.warning("threads=%d sets the native kernels' threads only: threadpoolctl is not installed "
                    "(pip install threadpoolctl) to set the BLAS's", threads)
    return threads


def blas_controlled() -> bool:
    """Whether :class:`blas_threads` sets any library's count (threadpoolctl found a BLAS): without one, a
    run need not open the block."""
    if _controllers is None:
        _blas_controllers()
    return bool(_handles)


_lock = threading.Lock()
_runs = 0  # blas_threads blocks open now, in any thread
_open: list = []  # while _runs > 0: [get, set, count found before the first block, count now] per library


class blas_threads:
    """``with blas_threads(n):`` runs the enclosed code with ``n`` BLAS threads, then restores the
    counts found before it (a plain class: it wraps every run, where a generator's overhead shows). A
    session sets the native kernels' count beside it (:func:`gpuops.native.set_threads`).

    The BLAS count is the process's: blocks open at once in several threads share it. The first
    records the counts it finds, each sets its own ``n`` where the count differs (the last one set
    holds), and the last to close restores the recorded counts; a count is set only when it changes."""

    __slots__ = ("n",)

    def __init__(self, n: int):
        self.n = n

    def __enter__(self):
        global _runs, _open
        n = self.n
        with _lock:
            if not _runs:
                if _controllers is None:
                    _blas_controllers()
                _open = [[get, put, found, found] for get, put in _handles for found in (get(),)]
            _runs += 1
            for lib in _open:
                if lib[3] != n:
                    lib[1](n)
                    lib[3] = n

    def __exit__(self, *exc):
        global _runs
        with _lock:
            _runs -= 1
            if not _runs:
                for _, put, found, now in _open:
                    if now != found:
                        put(found)


class blas_single:
    """``with blas_single():`` inside a :class:`blas_threads` block: the BLAS at one thread, then at the
    block's count again. Native programs run their matrix products so, split across the native kernels'
    pool (``cpu_kernels/blas.h``), where nothing else in the run calls the BLAS: woken by a product,
    OpenBLAS's workers spin through the rest of the run and take a core from the pool (magika at 2
    threads ran no faster than at one)."""

    __slots__ = ()

    def __enter__(self):
        with _lock:
            for lib in _open if _runs else ():
                if lib[3] != 1:
                    lib[1](1)

    def __exit__(self, *exc):
        with _lock:
            for lib in _open if _runs else ():
                if lib[3] != 1:
                    lib[1](lib[3])
