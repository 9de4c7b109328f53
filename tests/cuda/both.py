"""What the CUDA-path tests share so that their value comparisons run on real CuPy as on the CPU
stand-in: the stand-in's instrumentation (host syncs, host->device copies, launches) where it exists
and nothing where it does not, and one runner for many threads."""

from __future__ import annotations

import contextlib
import sys
import threading

from gpuops import device as _device

STANDIN = _device.uses_standin()


def standin():
    """The stand-in module, or None on real CuPy."""
    if not STANDIN:
        return None
    from gpuops.testing import cuda_standin

    return cuda_standin


@contextlib.contextmanager
def tally():
    """The stand-in's :func:`~gpuops.testing.cuda_standin.tally` (``.syncs``, ``.launches``), or None on
    real CuPy, which counts nothing: assert on it only when it is not None."""
    sd = standin()
    if sd is None:
        yield None
        return
    with sd.tally() as t:
        yield t


def h2d_copies() -> int | None:
    """Host->device copies so far (the stand-in's count), None on real CuPy."""
    sd = standin()
    return None if sd is None else sd.transfers["h2d"]


def run_in_threads(worker, n: int = 8) -> list:
    """``worker(t)`` for t in range(n), each on its own thread, switching threads as often as Python
    allows (shared buffers show up as wrong results); the exceptions they raised."""
    errors = []

    def guarded(t):
        try:
            worker(t)
        except Exception as e:  # noqa: BLE001 - returned to the test
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=guarded, args=(t,)) for t in range(n)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(interval)
    return errors
