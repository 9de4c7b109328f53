"""What the GPU-validation parts share: the mode, a host-sync counter, timers, diffs, JSON records."""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Callable

import numpy as np

warnings.filterwarnings("ignore", category=RuntimeWarning)  # the light models overflow float32 on purpose


def _mode() -> str:
    mode = os.environ.get("GPU_VALIDATE_MODE", "")
    if mode:
        return mode
    return "standin" if os.environ.get("GPUOPS_CUDA_BACKEND", "") not in ("", "cupy") else "gpu"


MODE = _mode()  # "gpu": real CuPy on a GPU; "standin": gpuops' CPU stand-in of CuPy (a dry run)
REAL = MODE == "gpu"
RTOL = float(os.environ.get("GPU_VALIDATE_RTOL", "1e-4"))  # of max |reference|, for logits and outputs
TIME_PER_RUN = float(os.environ.get("GPU_VALIDATE_TIME_PER_RUN", "1.0"))  # seconds per latency measurement
MAX_REPS = int(os.environ.get("GPU_VALIDATE_REPS", "0"))  # > 0: at most this many timed runs (a dry run)


def cuda_device():
    """gpuops' CUDA device: real CuPy on a GPU, the CPU stand-in with
    GPUOPS_CUDA_BACKEND=gpuops.testing.cuda_standin."""
    import gpuops

    return gpuops.get_device("cuda")


def array_lib(dev):
    """The CuPy of ``dev``: ``cupy`` on a GPU, the stand-in's CuPy-like module otherwise."""
    return dev.lib


# -- host syncs -------------------------------------------------------------------------------------

class HostSyncs:
    """Host syncs on this thread. On a GPU every CuPy device->host read (``ndarray.get()``, ``item``,
    ``bool``/``int``, boolean masks, ``nonzero``...) calls ``cupy._core.syncdetect._declare_synchronize``:
    wrapping it counts them all, each attributed to the gpuops function that caused it. The stand-in
    counts every sync itself (``Device.host_sync_count``)."""

    def __init__(self):
        self.n = 0
        self.sites: Counter = Counter()
        self.hooked = False

    def hook(self) -> bool:
        if self.hooked or not REAL:
            return self.hooked
        import cupy._core.syncdetect as sd

        original = sd._declare_synchronize

        def counting(*args, **kwargs):
            self.n += 1
            f, where = sys._getframe(1), "?"
            while f is not None:
                name = f.f_code.co_filename.replace(os.sep, "/")
                if "/gpuops/" in name and not name.endswith("/gpuops/device.py"):
                    where = f"{os.path.basename(name)}:{f.f_code.co_name}"
                    break
                f = f.f_back
            self.sites[where] += 1
            return original(*args, **kwargs)

        sd._declare_synchronize = counting
        self.hooked = True
        return True

    def count(self, dev) -> int:
        return self.n if self.hooked else dev.host_sync_count()

    def measure(self, dev, fn: Callable) -> tuple:
        """(``fn()``, the host syncs it made, {gpuops function: count} on a GPU); the device is
        synchronized after the count."""
        before, self.sites = self.count(dev), Counter()
        value = fn()
        n = self.count(dev) - before
        device_sync(dev)
        return value, n, dict(self.sites)

    def works(self, dev) -> bool | None:
        """Whether the counter sees a device->host copy (None: not a GPU)."""
        if not self.hooked:
            return None
        before = self.n
        array_lib(dev).arange(3).get()
        return self.n > before


SYNCS = HostSyncs()
SYNCS.hook()


def device_sync(dev) -> None:
    """Wait for every stream of the device (a CUDA graph replays on its own); no-op on the stand-in."""
    if REAL:
        array_lib(dev).cuda.runtime.deviceSynchronize()


# -- timing -----------------------------------------------------------------------------------------

def timed(fn: Callable, after: Callable = lambda: None, reps: int = 20, budget: float | None = None,
          warm: int = 2) -> dict:
    """Median and min of ``fn(); after()`` in ms: at most ``reps`` runs, at least 3, and no new run
    past ``budget`` seconds (default GPU_VALIDATE_TIME_PER_RUN); GPU_VALIDATE_REPS caps the runs."""
    budget = TIME_PER_RUN if budget is None else budget
    least = 3
    if MAX_REPS > 0:
        reps, least, warm = min(reps, MAX_REPS), min(3, MAX_REPS), min(warm, 1)
    for _ in range(warm):
        fn()
    after()
    ts: list[float] = []
    end = time.perf_counter() + budget
    while len(ts) < reps and (len(ts) < least or time.perf_counter() < end):
        t = time.perf_counter()
        fn()
        after()
        ts.append(time.perf_counter() - t)
    a = np.array(ts) * 1e3
    return {"median_ms": round(float(np.median(a)), 4), "min_ms": round(float(a.min()), 4), "runs": len(ts)}


# -- comparisons ------------------------------------------------------------------------------------

def diffs(got: list, ref: list, to_host: Callable = np.asarray) -> list[dict]:
    """Per output: max |got - ref| and that relative to max |ref| (what a tolerance is judged on)."""
    out = []
    for g, w in zip(got, ref):
        g, w = np.asarray(to_host(g), np.float64), np.asarray(to_host(w), np.float64)
        if g.shape != w.shape:
            out.append({"shape": [list(g.shape), list(w.shape)], "rel_to_max": float("inf")})
            continue
        if not g.size:
            out.append({"max_abs_diff": 0.0, "rel_to_max": 0.0})
            continue
        finite = np.isfinite(w)
        if not np.array_equal(finite, np.isfinite(g)):
            out.append({"nonfinite_mismatch": int((finite != np.isfinite(g)).sum()), "rel_to_max": float("inf")})
            continue
        d = float(np.max(np.abs(g[finite] - w[finite]), initial=0.0))
        scale = float(np.max(np.abs(w[finite]), initial=0.0))
        out.append({"max_abs_diff": d, "max_abs_ref": scale, "rel_to_max": d / scale if scale else d})
    return out


def worst(d: list[dict], which: list[int] | None = None) -> float:
    """The largest relative difference among outputs ``which`` (all by default)."""
    picked = [d[i] for i in which] if which is not None else d
    return max((x["rel_to_max"] for x in picked), default=0.0)


def second_feeds(feeds: dict) -> dict:
    """Other values of the same shapes and dtypes: a graph replay must not read the previous feeds."""
    out = {}
    for k, v in feeds.items():
        if v.dtype.kind == "f":
            out[k] = (v * -0.5 + 0.25).astype(v.dtype)
        else:
            out[k] = np.ascontiguousarray(v[::-1]) if v.ndim else v
    return out


def short(e: BaseException, n: int = 400) -> str:
    return f"{type(e).__name__}: {e}"[:n]


# -- records ----------------------------------------------------------------------------------------

def merge(path: str | os.PathLike, key: str, value) -> None:
    """Set ``key`` of the JSON object in ``path`` (created when absent) to ``value``."""
    p = Path(path)
    data = {}
    if p.exists() and p.stat().st_size:
        try:
            data = json.loads(p.read_text())
        except ValueError:
            data = {"_unreadable_before": p.read_text()[:2000]}
    data[key] = value
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    tmp.replace(p)


def fmt(x, digits: int = 2) -> str:
    """A number in a few significant digits (``-`` for None)."""
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)
