"""Native CPU kernels: ``cpu_kernels/*.c``, compiled with the system C compiler and loaded with ctypes;
and the one compile-and-cache routine (:func:`build`) that they and the CUDA emulator
(:mod:`gpuops.testing.emulator`) share.

Some of the CPU path's hot loops have no single NumPy call: a depthwise conv's per-channel
multiply-add over nine taps, a pooling window, an LSTM step's gate arithmetic, a uint8 GEMV. NumPy
spends several whole-array passes (or a Python loop of small calls) on each, which keeps models such
as ShuffleNet several times slower than onnxruntime. These kernels are plain C loops that the
compiler vectorises for the CPU it runs on (``-O3 -march=native``; ``$GPUOPS_NATIVE_CFLAGS`` adds flags).

When they are compiled. :func:`prepare` compiles every file at once (in parallel) or finds it in the
cache, and loads it: a CPU session calls it when it is created, ``gpuops build-kernels`` ahead of
time. The first compilation in a process says so on stderr, once ("gpuops: compiling native CPU
kernels (once, cached in ...)"); a warm cache costs a few milliseconds. A kernel asked for before
(:func:`function`, an op called outside a session) has its file compiled then. Nothing is compiled at
``import gpuops``.

They are optional. Without a C compiler (``$CC``, else ``cc``), with ``GPUOPS_NATIVE=0``, or when a
file fails to compile (one warning per process, saying why), :func:`function` returns None and the op
runs its NumPy code, which stays the fallback and the test oracle (:func:`disabled`).

The functions Python calls are declared once, in :mod:`gpuops.native_abi` (checked against the C
prototypes by ``tests/test_native_abi.py``); :func:`function` builds their ctypes bindings from there.
The kernels trust their arguments: the wrappers in the ops pass C-contiguous arrays of the declared
types and consistent sizes (:func:`ptr` checks the arrays).

The cache (:func:`build`). A library is compiled once per (source, headers, compiler and its
version, flags, CPU) into a private folder (:func:`private_cache`: owned by the user, not writable by
its group or others, on a file system that allows executables), to a temporary name, then renamed
into place, so that concurrent processes agree; the sha256 of the library is stored beside it
(``.so.sha256``) and checked each time it is loaded, so a truncated or corrupted library is rebuilt,
never loaded. A compiler gets :data:`COMPILE_SECONDS`; a failure raises :class:`BuildError`, which
carries the compiler's command line and its stderr.

One module, past 500 lines: the build (compiler, flags, cache and its integrity checks), the loading
and the calls are one trust boundary, reviewed together.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import os
import platform
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import native_abi
from .native_abi import FILES


def source_dir(name: str) -> Path:
    """The folder of the kernel sources ``name`` (``cpu_kernels``, ``cuda_kernels``): beside the package
    in a clone (editable installs), inside it in a wheel."""
    package = Path(__file__).resolve().parent
    for d in (package.parent / name, package / name):
        if d.is_dir():
            return d
    return package.parent / name


KERNEL_DIR = source_dir("cpu_kernels")

FLAGS = ("-O3", "-march=native", "-std=c11", "-fPIC", "-shared", "-fno-math-errno", "-fopenmp-simd", "-pthread")
# GCC only (clang rejects it): short copy and fill loops stay loops, not libc calls per row
GCC_FLAGS = ("-fno-tree-loop-distribute-patterns",)
LIBS = ("-lm",)  # after the source: special.c's erf
COMPILE_SECONDS = 300  # a compiler that takes longer is given up on (the NumPy code runs)


def flags(version: str = "") -> tuple[str, ...]:
    """:data:`FLAGS` (and :data:`GCC_FLAGS` unless ``version``, the compiler's ``--version``, says clang),
    then ``$GPUOPS_NATIVE_CFLAGS`` (e.g. ``-march=x86-64-v3`` for a cache shared by several kinds of CPU,
    or sanitizers: the tests run every kernel under ``-fsanitize=address``)."""
    own = FLAGS if "clang" in version else FLAGS + GCC_FLAGS
    return own + tuple(shlex.split(os.environ.get("GPUOPS_NATIVE_CFLAGS", "")))


_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL | None] = {}  # file -> library, or None when unavailable
_failures: dict[str, str] = {}  # file -> why it is unavailable
_functions: dict[str, object] = {}  # name -> bound ctypes function


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


def missing_compiler() -> str:
    """What to say when :func:`compiler` finds none: what was looked for, and (only when CC is unset) to set CC."""
    cc = os.environ.get("CC")
    if cc:
        return f"no C compiler: CC={cc!r} is not an executable file or on PATH"
    return "no C compiler: 'cc' is not on PATH (install one, e.g. gcc, or set CC)"


# -- the private cache folder ---------------------------------------------------------------------

def user_cache(env: str, name: str) -> Path:
    """``$env`` when set, else ``gpuops/<name>`` in the user's cache folder (``$XDG_CACHE_HOME`` or ~/.cache)."""
    d = os.environ.get(env)
    if d:
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpuops" / name


def cache_dir() -> Path:
    """Where the native kernels' libraries are cached (before :func:`private_cache`'s checks)."""
    return user_cache("GPUOPS_NATIVE_CACHE", "native")


def unfit(d: Path) -> str | None:
    """Why folder ``d`` cannot hold libraries this process loads, or None; made (0700) when missing. A
    library found there is loaded, so the folder must be the user's own and writable by nobody else,
    and its file system must allow executable mappings (not ``noexec``)."""
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = d.stat()
    except OSError as e:
        return f"cannot be created or read ({e.strerror or e})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"is owned by another user (uid {st.st_uid}, this process runs as uid {os.getuid()})"
    if st.st_mode & 0o022:
        return f"is writable by its group or by others (mode {stat.S_IMODE(st.st_mode):o})"
    if not os.access(d, os.W_OK | os.X_OK):
        return "is not writable"
    try:
        if os.statvfs(d).f_flag & getattr(os, "ST_NOEXEC", 0):
            return "is on a file system mounted noexec (libraries cannot be loaded from it)"
    except (OSError, AttributeError):
        pass
    return None


_caches: dict[str, Path] = {}
_temporary: list[str] = []


def private_cache(env: str, name: str) -> Path:
    """The folder to cache ``name``'s libraries in: :func:`user_cache` when it is fit (:func:`unfit`).
    Else, in a sticky folder that others can write (``/tmp``), a private ``gpuops-<uid>`` folder inside
    it; else a temporary folder for this process only, with one warning naming the problem."""
    wanted = user_cache(env, name)
    got = _caches.get(str(wanted))
    if got is not None:
        return got
    with _lock:
        got = _caches.get(str(wanted))
        if got is not None:
            return got
        problem = unfit(wanted)
        got = wanted
        if problem is not None:
            got = None
            try:
                sticky = wanted.is_dir() and wanted.stat().st_mode & stat.S_ISVTX
            except OSError:
                sticky = False
            if sticky and hasattr(os, "getuid"):  # others cannot rename or replace what this user makes in it
                own = wanted / f"gpuops-{os.getuid()}"
                if unfit(own) is None:
                    got = own
            if got is None:
                got = _temporary_folder(name)
                warnings.warn(f"gpuops: the kernel cache {wanted} {problem}; this process compiles into {got}, "
                              f"removed at exit (set {env} to a folder of your own to keep the libraries)",
                              RuntimeWarning, stacklevel=2)
        _caches[str(wanted)] = got
        return got


def _temporary_folder(name: str) -> Path:
    """A new private folder, removed at exit: in the temporary folder, else (``noexec``) in /var/tmp or
    /dev/shm."""
    got = None
    for base in (None, "/var/tmp", "/dev/shm"):
        try:
            got = Path(tempfile.mkdtemp(prefix=f"gpuops-{name}-", dir=base))
        except OSError:
            continue
        _temporary.append(str(got))
        if unfit(got) is None:
            break
    if got is None:
        raise BuildError(f"no folder to compile {name} kernels in: the temporary folders cannot be written")
    return got


def _remove_temporary() -> None:
    for d in _temporary:
        shutil.rmtree(d, ignore_errors=True)


atexit.register(_remove_temporary)


# -- the compile-and-cache routine ----------------------------------------------------------------

class BuildError(RuntimeError):
    """A library could not be built or loaded. ``command``: the compiler's command line (a list; empty
    when no compiler ran), ``stderr``: what it printed, ``returncode``: its exit status (None if it did
    not finish)."""

    def __init__(self, message: str, command=(), stderr: str = "", returncode: int | None = None):
        super().__init__(message)
        self.command, self.stderr, self.returncode = list(command), stderr, returncode


@dataclass(frozen=True)
class Build:
    """What a shared library is built from: ``source`` (the translation unit's text) compiled, as
    ``filename`` in a fresh folder, by ``compiler`` with ``-I`` each of ``includes`` (searched first),
    ``flags``, then ``libs``. ``depends``: the text of everything else the library depends on (headers,
    the CPU it is tuned for), hashed into its key with the rest; include folders' paths are not, so a
    moved install keeps its cache. ``stem`` starts the library's file name."""

    stem: str
    compiler: str
    source: str
    filename: str
    flags: tuple[str, ...] = ()
    includes: tuple[str, ...] = ()
    libs: tuple[str, ...] = ()
    depends: tuple[str, ...] = field(default=(), repr=False)

    def command(self, output: str) -> list[str]:
        return [self.compiler, *(f"-I{d}" for d in self.includes), *self.flags, "-o", output, self.filename,
                *self.libs]


_versions: dict[str, str] = {}


def compiler_version(path: str, error=BuildError) -> str:
    """``path --version`` (cached per process): part of every cache key, so that a new compiler rebuilds."""
    v = _versions.get(path)
    if v is None:
        cmd = [path, "--version"]
        try:
            _, v, _ = _run(cmd)
        except subprocess.TimeoutExpired:
            raise error(f"{path} --version timed out after {COMPILE_SECONDS} s", cmd) from None
        except OSError as e:
            raise error(f"cannot run the compiler {path}: {e}", cmd) from None
        _versions[path] = v
    return v


def _run(cmd: list[str], cwd=None) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``cmd``, killed with all its children (a compiler driver's cc1,
    as, ld) after :data:`COMPILE_SECONDS` (raising TimeoutExpired with what it had printed)."""
    with subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, errors="replace", start_new_session=True) as p:
        try:
            out, err = p.communicate(timeout=COMPILE_SECONDS)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (AttributeError, OSError):
                p.kill()
            out, err = p.communicate()
            raise subprocess.TimeoutExpired(cmd, COMPILE_SECONDS, out, err) from None
    return p.returncode, out, err


def key(b: Build, error=BuildError) -> str:
    """The cache key of a build: a hash of everything the library depends on."""
    parts = [b.source, b.filename, b.compiler, compiler_version(b.compiler, error), *b.flags, "\0", *b.libs, "\0",
             *b.depends]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def _digest_path(so: Path) -> Path:
    return so.with_name(so.name + ".sha256")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def intact(so: Path) -> bool:
    """Whether ``so`` is a library this user built that has not changed since: a regular file of this
    user's, writable by nobody else, whose sha256 is the one stored beside it."""
    try:
        st = os.lstat(so)
        digest = _digest_path(so).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o022 or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
        return False
    try:
        return _sha256(so) == digest
    except OSError:
        return False


_build_locks: dict[str, threading.Lock] = {}


def build(b: Build, cache: Path, *, error=BuildError, on_compile=None) -> tuple[Path, bool]:
    """The library built from ``b``, from ``cache`` when it holds it intact (:func:`intact`), else
    compiled into it: ``(path, whether it was compiled now)``. The compiler runs in a temporary folder
    inside ``cache`` for at most :data:`COMPILE_SECONDS`; the library and its sha256 are renamed into
    place. A missing compiler, a failure or a timeout raises ``error`` (a :class:`BuildError`) with the
    command line and the compiler's stderr. ``on_compile()`` is called before compiling."""
    so = cache / f"{b.stem}-{key(b, error)}.so"
    with _lock:
        lock = _build_locks.setdefault(str(so), threading.Lock())
    with lock:
        if intact(so):
            return so, False
        for stale in (so, _digest_path(so)):  # missing, truncated, corrupted or foreign: rebuilt
            try:
                stale.unlink()
            except OSError:
                pass
        if on_compile is not None:
            on_compile()
        with tempfile.TemporaryDirectory(dir=cache, prefix=".build-") as tmp:
            Path(tmp, b.filename).write_text(b.source)
            cmd = b.command("lib.so")
            where = f"(in a temporary folder holding {b.filename})"
            try:
                rc, _, err = _run(cmd, cwd=tmp)
            except subprocess.TimeoutExpired as e:
                err = e.stderr or ""
                raise error(f"{b.compiler} timed out after {COMPILE_SECONDS} s on {b.filename}:\n$ {shlex.join(cmd)}  "
                            f"{where}\n{err[-4000:]}", cmd, err) from None
            except OSError as e:
                raise error(f"cannot run the compiler {b.compiler}: {e}\n$ {shlex.join(cmd)}", cmd) from None
            if rc:
                raise error(f"{b.compiler} failed (exit status {rc}) on {b.filename}:\n$ {shlex.join(cmd)}  "
                            f"{where}\n{err[-8000:]}", cmd, err, rc)
            out = Path(tmp, "lib.so")
            os.chmod(out, 0o700)
            Path(tmp, "lib.so.sha256").write_text(_sha256(out) + "\n")
            os.replace(out, so)  # atomic: concurrent builders of the same key agree
            os.replace(Path(tmp, "lib.so.sha256"), _digest_path(so))
    return so, True


def load(so: Path, error=BuildError) -> ctypes.CDLL:
    """``ctypes.CDLL(so)``, its failure as ``error`` saying what may be wrong."""
    try:
        return ctypes.CDLL(str(so))
    except OSError as e:
        raise error(f"cannot load {so}: {e} (is its folder on a file system mounted noexec? set the cache "
                    f"variable to another folder)") from None


# -- the native kernels -----------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _cpu_id() -> str:
    """What ``-march=native`` depends on: the machine and, on Linux, the CPU's feature flags (read
    once: kernel choices ask on every call)."""
    features = ""
    try:
        with open("/proc/cpuinfo") as f:
            features = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return platform.machine() + platform.processor() + features


_vector_lanes: int | None = None


def vector_lanes() -> int:
    """float32 lanes of the widest vectors the kernels are compiled for: 16 where the CPU has AVX-512F
    (and ``$GPUOPS_NATIVE_CFLAGS`` does not target an older x86-64 level), else 8 (AVX2; other CPUs).
    Kernel-choice thresholds that depend on how a tile fills the lanes use it. The variable is read on
    the first call (kernel choices ask on every call), as a process builds each kernel file once."""
    global _vector_lanes
    lanes = _vector_lanes
    if lanes is None:
        lanes = _vector_lanes = _lanes(os.environ.get("GPUOPS_NATIVE_CFLAGS", ""))
    return lanes


@functools.lru_cache(maxsize=8)
def _lanes(extra: str) -> int:
    older = any(f in extra for f in ("x86-64-v2", "x86-64-v3", "haswell", "no-avx512"))
    return 16 if " avx512f" in _cpu_id() and not older else 8


def native_build(file: str) -> Build:
    """How ``cpu_kernels/<file>`` is built (raises :class:`BuildError` without a compiler)."""
    cc = compiler()
    if cc is None:
        raise BuildError(missing_compiler())
    version = compiler_version(cc)
    headers = tuple(h.read_text() for h in sorted(KERNEL_DIR.glob("*.h")))
    return Build(stem=Path(file).stem, compiler=cc, source=(KERNEL_DIR / file).read_text(), filename=file,
                 flags=flags(version), includes=(str(KERNEL_DIR),), libs=LIBS, depends=(*headers, _cpu_id()))


_announced = False


def _announce() -> None:
    """The one line a process prints before its first compilation."""
    global _announced
    with _lock:
        if _announced:
            return
        _announced = True
    d = private_cache("GPUOPS_NATIVE_CACHE", "native")
    where = f"for this process only, in {d}" if str(d) in _temporary else f"once, cached in {d}"
    print(f"gpuops: compiling native CPU kernels ({where})", file=sys.stderr, flush=True)


_warned: set = set()  # the causes warned about in this process


def cause(file: str, why: str) -> str:
    """``why`` (a :class:`BuildError`'s message) in one line, the same for every file it stops: its first
    line with the file's name taken out, and the compiler's first error line when it printed one."""
    lines = why.splitlines() or [""]
    head = lines[0].replace(f" on {file}", "").replace(file, "a kernel file").rstrip(":")
    errors = [ln.strip() for ln in lines[1:] if "error" in ln.lower() and not ln.startswith("$ ")]
    if errors:
        head += f": {errors[0][:200]}"
    return head


def _unavailable(file: str, why: str) -> None:
    """Record why ``file`` is unavailable; one warning line per cause and process (a compiler that fails
    on every file warns once; the rest are in status() and ``gpuops build-kernels``)."""
    _failures[file] = why
    line = cause(file, why)
    with _lock:
        first = line not in _warned
        _warned.add(line)
    if first:  # no source line echoed: the warning is the one line
        warnings.warn_explicit(f"gpuops: native CPU kernels unavailable, using NumPy: {line} "
                               f"(first for cpu_kernels/{file})", RuntimeWarning, "gpuops", 0)


_file_locks = {f: threading.Lock() for f in FILES}


def _library(file: str) -> ctypes.CDLL | None:
    lib = _loaded.get(file, False)
    if lib is not False:
        return lib
    with _file_locks.setdefault(file, threading.Lock()):
        if file not in _loaded:
            try:
                so, _ = build(native_build(file), private_cache("GPUOPS_NATIVE_CACHE", "native"),
                              on_compile=_announce)
                lib = load(so)
                missing = [k.name for k in native_abi.KERNELS.values() if k.file == file and not hasattr(lib, k.name)]
                if missing:
                    raise BuildError(f"{so} lacks the declared functions {missing}")
                if file == THREADS_FILE:
                    with _lock:
                        _bind_pool(lib)
                else:
                    binder = getattr(lib, f"{Path(file).stem}_bind_threads", None)
                    if binder is not None and _pool is None:
                        _library(THREADS_FILE)
                    if binder is not None and _pool is not None:  # else its kernels run on the calling thread
                        binder.argtypes, binder.restype = (ctypes.c_void_p, ctypes.c_void_p), ctypes.c_int
                        binder(_pool[0], _pool[1])
                _loaded[file] = lib
            except Exception as e:  # noqa: BLE001 - any failure means "use NumPy", said once
                _unavailable(file, str(e))
                _loaded[file] = None
        return _loaded[file]


THREADS_FILE = "threads.c"  # the one thread pool the other files' kernels share
_threads = 1  # the native kernels' thread count (set_threads)
_pool: tuple | None = None  # (threads_run's address, threads_get's, threads_set) once THREADS_FILE is loaded


def _bind_pool(lib) -> None:
    """Keep THREADS_FILE's functions (called with _lock held), its count set to :func:`threads`'."""
    global _pool
    put = lib.threads_set
    put.argtypes, put.restype = (ctypes.c_int64,), ctypes.c_int
    put(_threads)
    _pool = tuple(ctypes.cast(f, ctypes.c_void_p).value for f in (lib.threads_run, lib.threads_get)) + (put,)


def threads() -> int:
    """The native kernels' thread count now (:func:`set_threads`)."""
    return _threads


def set_threads(n: int) -> None:
    """Let the native kernels split their work across ``n`` threads (the process's one pool:
    cpu_kernels/threads.c, pool_threads.h). A session sets its ``threads`` at the start of each run; the
    count is the process's, so sessions of different counts running at once share the last one set."""
    global _threads
    if n == _threads:
        return
    with _lock:
        _threads = n
        if _pool is not None:
            _pool[2](n)


def function(name: str):
    """The ctypes function ``name`` of the native kernels, typed by its declaration in
    :mod:`gpuops.native_abi` (its file is compiled if :func:`prepare` has not run); None when native
    kernels are off or unavailable (the caller then runs its NumPy code). Call it with :func:`call`."""
    if not enabled():
        return None
    fn = _functions.get(name)
    if fn is None:
        k = native_abi.KERNELS.get(name)
        if k is None:
            raise KeyError(f"native kernel {name!r} is not declared in gpuops/native_abi.py")
        lib = _library(k.file)
        if lib is None:
            return None
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = k.argtypes, k.restype
        _functions[name] = fn
    return fn


def call(fn, *args) -> None:
    """Run kernel ``fn``; a non-zero status (its scratch could not be allocated) raises MemoryError."""
    if fn(*args):
        raise MemoryError(f"native kernel {fn.__name__} could not allocate its scratch")


def prepare(files=None) -> dict[str, str]:
    """Compile (or find in the cache) and load the native kernel files -- all of them by default -- in
    parallel, before any kernel is needed: what a CPU session calls when it is created. The first
    compilation prints one line; failures give the one warning of :func:`function`. Returns
    ``{file: "compiled" | "unavailable"}``; nothing when native kernels are off."""
    if not enabled():
        return {}
    files = list(FILES if files is None else files)
    todo = [f for f in files if f not in _loaded]
    if todo and compiler() is None:
        _unavailable(todo[0], missing_compiler())
        for f in todo:
            _failures[f] = missing_compiler()
            _loaded.setdefault(f, None)
    elif len(todo) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(len(todo), os.cpu_count() or 1)) as ex:
            list(ex.map(_library, todo))
    elif todo:
        _library(todo[0])
    return {f: "compiled" if _loaded.get(f) is not None else "unavailable" for f in files}


def build_all(files=None) -> list[dict]:
    """For ``gpuops build-kernels``: each file compiled (in parallel) or found in the cache, not
    loaded: ``[{"file", "path", "built", "seconds"} or {"file", "error"}]``, in file order."""
    files = list(FILES if files is None else files)
    cache = private_cache("GPUOPS_NATIVE_CACHE", "native")

    def one(file):
        t = time.perf_counter()
        try:
            so, built = build(native_build(file), cache)
        except BuildError as e:
            return {"file": file, "error": str(e)}
        return {"file": file, "path": str(so), "built": built, "seconds": time.perf_counter() - t}

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, min(len(files), os.cpu_count() or 1))) as ex:
        return list(ex.map(one, files))


def status() -> dict:
    """For ``gpuops info``: the compiler, the cache, and the files loaded so far (compiled or unavailable,
    with why)."""
    return {"enabled": enabled(), "compiler": compiler(), "cache": str(cache_dir()),
            "files": {f: "compiled" if lib is not None else "unavailable" for f, lib in sorted(_loaded.items())},
            "failures": dict(sorted(_failures.items()))}


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
