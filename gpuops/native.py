"""Native CPU kernels: ``cpu_kernels/*.c``, compiled on first use with the system C compiler and loaded
with ctypes, as the CUDA kernels are compiled on first use with NVRTC.

Some of the CPU path's hot loops have no single NumPy call: a depthwise conv's per-channel
multiply-add over nine taps, a pooling window, an LSTM step's gate arithmetic, a uint8 GEMV. NumPy
spends several whole-array passes (or a Python loop of small calls) on each, which keeps models such
as ShuffleNet several times slower than onnxruntime. These kernels are plain C loops that the
compiler vectorises for the CPU it runs on (``-O3 -march=native``; ``$GPUOPS_NATIVE_CFLAGS`` adds flags).

They are optional. Without a C compiler (``$CC``, else ``cc``), with ``GPUOPS_NATIVE=0``, or when a
file fails to compile (reported once, as a warning), :func:`function` returns None and the op runs its
NumPy code, which stays the fallback and the test oracle (:func:`disabled`). Nothing is compiled at
``import gpuops``.

Each file is compiled once per (source, compiler, flags, CPU) and cached in ``$GPUOPS_NATIVE_CACHE``
(default ``~/.cache/gpuops/native``), written atomically so concurrent processes agree. The folder
must be private to the user (a library found there is loaded), and a compiler gets
:data:`COMPILE_SECONDS`. The kernels trust their arguments: the wrappers in the ops pass C-contiguous arrays
of the declared types and consistent sizes (:func:`ptr` checks the arrays).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np

# cpu_kernels/ sits beside the package in a clone (editable installs); wheels carry a copy inside it
KERNEL_DIR = next((d for d in (Path(__file__).resolve().parent.parent / "cpu_kernels",
                               Path(__file__).resolve().parent / "cpu_kernels") if d.is_dir()),
                  Path(__file__).resolve().parent.parent / "cpu_kernels")

FLAGS = ("-O3", "-march=native", "-std=c11", "-fPIC", "-shared", "-fno-math-errno", "-fopenmp-simd")
# GCC only (clang rejects it): short copy and fill loops stay loops, not libc calls per row
GCC_FLAGS = ("-fno-tree-loop-distribute-patterns",)
LIBS = ("-lm",)  # after the source: special.c's erf


def flags(version: str = "") -> tuple[str, ...]:
    """:data:`FLAGS` (and :data:`GCC_FLAGS` unless ``version``, the compiler's ``--version``, says clang),
    then ``$GPUOPS_NATIVE_CFLAGS`` (e.g. ``-march=x86-64-v3`` for a cache shared by several kinds of CPU,
    or sanitizers: the tests run every kernel under ``-fsanitize=address``)."""
    own = FLAGS if "clang" in version else FLAGS + GCC_FLAGS
    return own + tuple(shlex.split(os.environ.get("GPUOPS_NATIVE_CFLAGS", "")))


# The C parameter types kernels use: pointers to arrays, sizes and flags, float parameters.
PTR, INT, FLOAT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float

_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL | None] = {}
_functions: dict[tuple[str, str], object] = {}


class _Off(threading.local):
    depth = 0  # nested disabled() blocks in this thread


_off = _Off()

ENABLED = os.environ.get("GPUOPS_NATIVE", "1") != "0"  # read once, at import


def enabled() -> bool:
    """Whether native kernels may be used now (not turned off by ``GPUOPS_NATIVE=0`` at start-up or
    by :func:`disabled`)."""
    return ENABLED and not _off.depth


@contextmanager
def disabled():
    """Run the NumPy code instead of native kernels in this thread (tests use it as the oracle)."""
    _off.depth += 1
    try:
        yield
    finally:
        _off.depth -= 1


def compiler() -> str | None:
    """The C compiler's path, or None."""
    return shutil.which(os.environ.get("CC", "cc"))


def user_cache(env: str, name: str) -> Path:
    """``$env`` when set, else ``gpuops/<name>`` in the user's cache folder (``$XDG_CACHE_HOME`` or ~/.cache)."""
    d = os.environ.get(env)
    if d:
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpuops" / name


def cache_dir() -> Path:
    return user_cache("GPUOPS_NATIVE_CACHE", "native")


def _cpu_id() -> str:
    """What ``-march=native`` depends on: the machine and, on Linux, the CPU's feature flags."""
    features = ""
    try:
        with open("/proc/cpuinfo") as f:
            features = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return platform.machine() + platform.processor() + features


COMPILE_SECONDS = 300  # a compiler that takes longer is given up on (the NumPy code runs)


def _private(d: Path) -> None:
    """Refuse a cache folder that someone else could write into: a library found there is loaded."""
    st = d.stat()
    if hasattr(os, "getuid") and (st.st_uid != os.getuid() or st.st_mode & 0o022):
        raise RuntimeError(f"the kernel cache {d} is writable by others or not owned by this user; "
                           f"set GPUOPS_NATIVE_CACHE to a private folder")


def _compile(file: str) -> ctypes.CDLL:
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC)")
    src = (KERNEL_DIR / file).read_text() + "".join(h.read_text() for h in sorted(KERNEL_DIR.glob("*.h")))
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=COMPILE_SECONDS).stdout
    key = hashlib.sha256("\0".join([src, cc, version, *flags(version), _cpu_id()]).encode()).hexdigest()[:32]
    d = cache_dir()
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    _private(d)
    so = d / f"{Path(file).stem}-{key}.so"
    if not so.exists():
        with tempfile.TemporaryDirectory(dir=d) as tmp:
            out = Path(tmp) / "kernel.so"
            r = subprocess.run([cc, *flags(version), "-o", str(out), str(KERNEL_DIR / file), *LIBS],
                               capture_output=True, text=True, timeout=COMPILE_SECONDS)
            if r.returncode:
                raise RuntimeError(f"{cc} failed on cpu_kernels/{file}:\n{r.stderr[-4000:]}")
            os.replace(out, so)  # atomic: concurrent builders of the same key agree
    return ctypes.CDLL(str(so))


def _library(file: str) -> ctypes.CDLL | None:
    lib = _loaded.get(file, False)
    if lib is not False:
        return lib
    with _lock:
        if file not in _loaded:
            try:
                _loaded[file] = _compile(file)
            except Exception as e:  # noqa: BLE001 - any failure means "use NumPy", said once
                warnings.warn(f"gpuops: native CPU kernels of cpu_kernels/{file} unavailable, using NumPy: {e}",
                              RuntimeWarning, stacklevel=3)
                _loaded[file] = None
        return _loaded[file]


def function(file: str, name: str, argtypes: tuple):
    """The ctypes function ``name`` of ``cpu_kernels/<file>`` taking ``argtypes`` (:data:`PTR`,
    :data:`INT`, :data:`FLOAT`) and returning an int status (see :func:`call`), compiled on first use;
    None when native kernels are off or unavailable (the caller then runs its NumPy code)."""
    if not enabled():
        return None
    fn = _functions.get((file, name))
    if fn is None:
        lib = _library(file)
        if lib is None:
            return None
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
        _functions[file, name] = fn
    return fn


def call(fn, *args) -> None:
    """Run kernel ``fn``; a non-zero status (its scratch could not be allocated) raises MemoryError."""
    if fn(*args):
        raise MemoryError(f"native kernel {fn.__name__} could not allocate its scratch")


def status() -> dict:
    """For ``gpuops info``: the compiler, the cache, and the files loaded so far (compiled or unavailable)."""
    return {"enabled": enabled(), "compiler": compiler(), "cache": str(cache_dir()),
            "files": {f: "compiled" if lib is not None else "unavailable" for f, lib in sorted(_loaded.items())}}


_addressof, _from_buffer = ctypes.addressof, ctypes.c_char.from_buffer


def address(a: np.ndarray) -> int:
    """The data address of a writeable, non-empty array the caller has just made or checked (no
    checks: :func:`ptr` is the checked form)."""
    return _addressof(_from_buffer(a))


def ptr(a: np.ndarray, dtype=np.float32) -> int:
    """The data address of ``a``, after checking what every kernel assumes: C-contiguous ``dtype``."""
    if a.dtype != dtype or not a.flags.c_contiguous:
        raise TypeError(f"native kernel argument must be a C-contiguous {np.dtype(dtype)} array, "
                        f"got {a.dtype} with strides {a.strides}")
    if a.flags.writeable and a.size:  # a quarter of the cost of a.ctypes.data, which read-only arrays need
        return address(a)
    return a.ctypes.data
