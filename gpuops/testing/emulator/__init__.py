"""Run CUDA kernels on the CPU: the same ``.cu`` source, compiled with g++ against ``cuda_emu.h``.

The API mirrors CuPy's, so code written for ``cupy.RawModule`` runs unchanged::

    mod = RawModule(code=src, options=("-std=c++17",), name_expressions=["scale<float>"])
    fn = mod.get_function("scale<float>")
    fn((blocks,), (threads,), (x, y, np.int32(n)))      # numpy arrays are the "device" pointers

How it works. The source is prefixed with ``#include "cuda_emu.h"`` (which defines the CUDA
qualifiers, built-in variables, barriers, atomics and intrinsics; see that header) and suffixed with
one ``extern "C"`` wrapper per name expression::

    extern "C" int gpuops_launch_0(unsigned gx, ..., unsigned bz, void** args, char* err, int errlen)
        { return cuda_emu::launch(&scale<float>, dim3(gx, gy, gz), dim3(bx, by, bz), args, err, errlen); }
    extern "C" const char* gpuops_signature_0() { return cuda_emu::signature(&scale<float>); }

``cuda_emu::launch`` unpacks ``args`` (one pointer per kernel parameter, pointing at the value) by
the kernel's parameter types with a variadic template; the signature string (``"pc:f4,p:f4,i4"``:
const float*, float*, int) lets the Python side check every argument before launching, stricter than
CuPy: a Python ``int`` is passed as int64 (as CuPy does), so it must meet a ``long long`` parameter;
arrays must be C-contiguous, of the pointee's size and kind, and writeable for non-const pointees; an
absent pointer is an 8-byte integer zero (``None`` is refused: CuPy 13 launches it as a garbage pointer).

The shared library is compiled once per (source, name expressions, defines, headers, compiler and
its version) by the compile-and-cache routine of the native CPU kernels (:func:`gpuops.native.build`:
a private cache folder, atomic publication, a sha256 checked at every load, a timeout), in
``$GPUOPS_EMU_CACHE`` (default ``~/.cache/gpuops/emulator``), with ``$GPUOPS_EMU_CXX`` (default
``g++``, 12 or later: ``__half`` is ``_Float16``). A failure raises :class:`CompileError` with the
compiler's command line and stderr. ``gpuops build-kernels --emulator`` compiles gpuops' own kernel
files ahead of time (:func:`build_kernel_files`). Launches release the GIL. ``GPUOPS_EMU_WORKERS`` sets
how many OS threads run blocks in parallel (default: up to 4).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ... import native

HEADER_DIR = Path(__file__).resolve().parent
HEADER = HEADER_DIR / "cuda_emu.h"
CXX_FLAGS = ("-std=c++20", "-O2", "-pthread", "-shared", "-fPIC", "-ffp-contract=off", "-w")
MAX_THREADS_PER_BLOCK = 1024


class CompileError(native.BuildError):
    """The kernel source could not be compiled or loaded: the message holds the compiler's command line
    and its output (also in ``command`` and ``stderr``)."""


class LaunchError(RuntimeError):
    """A launch was misconfigured, or a kernel failed (e.g. a divergent ``__syncthreads``)."""


def available() -> bool:
    """True when a C++ compiler for the emulator is installed."""
    return shutil.which(_cxx()) is not None


def _cxx() -> str:
    return os.environ.get("GPUOPS_EMU_CXX", "g++")


def compiler() -> str:
    """The C++ compiler's path (raises :class:`CompileError` naming what was looked for)."""
    path = shutil.which(_cxx())
    if path is None:
        given = os.environ.get("GPUOPS_EMU_CXX")
        raise CompileError(f"emulator: no C++ compiler: GPUOPS_EMU_CXX={given!r} is not an executable file or on PATH"
                           if given else "emulator: no C++ compiler: 'g++' is not on PATH (install g++ 12 or later, "
                           "or set GPUOPS_EMU_CXX)")
    return path


def cache_dir() -> Path:
    """The folder the emulator's libraries are cached in (private: see :func:`gpuops.native.private_cache`)."""
    return native.private_cache("GPUOPS_EMU_CACHE", "emulator")


# -- compiling -----------------------------------------------------------------------------------

_lock = threading.Lock()
_libraries: dict[native.Build, ctypes.CDLL] = {}


def _wrapper_source(code: str, name_expressions: tuple[str, ...]) -> str:
    lines = ['#include "cuda_emu.h"', '#line 1 "kernel.cu"', code, ""]
    for i, expr in enumerate(name_expressions):
        lines.append(
            f"extern \"C\" int gpuops_launch_{i}(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, "
            f"unsigned bz, void** args, char* err, int errlen) {{ return cuda_emu::launch(&{expr}, "
            f"dim3(gx, gy, gz), dim3(bx, by, bz), args, err, errlen); }}")
        lines.append(f"extern \"C\" const char* gpuops_signature_{i}() {{ return cuda_emu::signature(&{expr}); }}")
    return "\n".join(lines) + "\n"


def _compiler_options(options) -> list[str]:
    """The options g++ understands from an NVRTC option list: defines and include directories (made
    absolute: the compiler runs in a temporary folder). The rest (``-std=``, ``--fmad=``, ``-arch=``...)
    concern the GPU compiler and are dropped."""
    out, it = [], iter(options)
    for opt in it:
        if opt in ("-D", "-I", "-U", "--define-macro", "--include-path"):
            flag = {"--define-macro": "-D", "--include-path": "-I"}.get(opt, opt)
            out.append(flag + next(it, ""))
        elif opt.startswith(("-D", "-I", "-U")):
            out.append(opt)
        elif opt.startswith(("--define-macro=", "--include-path=")):
            out.append(("-D" if opt.startswith("--define") else "-I") + opt.split("=", 1)[1])
    return ["-I" + os.path.abspath(o[2:]) if o.startswith("-I") and len(o) > 2 else o for o in out]


def _headers() -> tuple[str, ...]:
    """The emulator's headers (cuda_emu.h, include/*.h): their text is part of every cache key."""
    return tuple(p.read_text() for p in (HEADER, *sorted((HEADER_DIR / "include").glob("*.h"))))


def _build(code: str, options, name_expressions: tuple[str, ...]) -> native.Build:
    return native.Build(stem="emu", compiler=compiler(), source=_wrapper_source(code, name_expressions),
                        filename="kernel.cpp", flags=(*CXX_FLAGS, *_compiler_options(options)),
                        includes=(str(HEADER_DIR), str(HEADER_DIR / "include")), depends=_headers())


def _compile(code: str, options, name_expressions: tuple[str, ...]) -> ctypes.CDLL:
    b = _build(code, options, name_expressions)
    lib = _libraries.get(b)
    if lib is None:
        with _lock:
            lib = _libraries.get(b)
            if lib is None:
                so, _ = native.build(b, cache_dir(), error=CompileError)
                lib = _libraries[b] = native.load(so, error=CompileError)
    return lib


def build_kernel_files(files=None) -> list[dict]:
    """For ``gpuops build-kernels --emulator``: gpuops' CUDA kernel files (``cuda_kernels/``), each with
    all its instantiations, compiled in parallel as the CuPy stand-in will ask for them (or found in the
    cache): ``[{"file", "path", "built", "seconds", "kernels"} or {"file", "error"}]``, in file order."""
    from ... import kernels

    files = sorted(kernels.NAME_EXPRESSIONS) if files is None else list(files)
    cache = cache_dir()

    def one(file):
        t = time.perf_counter()
        exprs = kernels.NAME_EXPRESSIONS[file]
        try:
            so, built = native.build(_build(kernels.source(file), kernels.OPTIONS, exprs), cache, error=CompileError)
        except native.BuildError as e:
            return {"file": file, "error": str(e)}
        return {"file": file, "path": str(so), "built": built, "seconds": time.perf_counter() - t,
                "kernels": len(exprs)}

    with ThreadPoolExecutor(max(1, min(len(files), os.cpu_count() or 1))) as ex:
        return list(ex.map(one, files))


# -- arguments -----------------------------------------------------------------------------------

_KIND = {"f": "f", "i": "i", "u": "u", "b": "b"}


class _Param:
    """One kernel parameter, parsed from the signature string."""

    def __init__(self, text: str):
        self.text = text
        self.pointer = text.startswith("p")
        self.const = text.startswith("pc")
        value = text.split(":", 1)[1] if self.pointer else text
        self.kind, self.size = value[0], int(value[1:])

    def __repr__(self):
        names = {"f": "float", "i": "int", "u": "uint", "b": "bool", "v": "void", "s": "struct"}
        t = f"{names[self.kind]}{self.size * 8 if self.kind != 'v' else ''}"
        return (f"const {t}*" if self.const else f"{t}*") if self.pointer else t


def _dtype_matches(dtype: np.dtype, p: _Param) -> bool:
    if p.kind == "v":
        return True
    if dtype.itemsize != p.size:
        return False
    kind = _KIND.get(dtype.kind)
    # ml_dtypes types (int4, float8, bfloat16...) are stored in bytes the kernel reinterprets.
    return kind is None or kind == p.kind or (p.kind in "iu" and kind in "iub")


def _is_null(a) -> bool:
    """An 8-byte integer zero (a Python int travels as int64): what a GPU reads as a null pointer."""
    if isinstance(a, int) and not isinstance(a, bool):
        return a == 0
    return isinstance(a, np.integer) and a.dtype.itemsize == 8 and a == 0


def _pack(args, params: list[_Param], name: str):
    """ctypes storage for each argument and the ``void*`` array pointing at them."""
    if len(args) != len(params):
        raise LaunchError(f"kernel {name} takes {len(params)} arguments ({', '.join(map(repr, params))}), "
                          f"got {len(args)}")
    keep, argv = [], (ctypes.c_void_p * max(len(args), 1))()
    for i, (a, p) in enumerate(zip(args, params)):
        where = f"kernel {name}, argument {i} ({p!r})"
        if p.pointer:
            if a is None:
                raise LaunchError(f"{where}: None is not a null pointer (CuPy 13 launches it as a garbage "
                                  "pointer); pass an 8-byte integer zero, e.g. np.uint64(0)")
            if _is_null(a):
                slot = ctypes.c_void_p(None)
            elif isinstance(a, np.ndarray):
                if not a.flags.c_contiguous:
                    raise LaunchError(f"{where}: the array is not C-contiguous")
                if not _dtype_matches(a.dtype, p):
                    raise LaunchError(f"{where}: got an array of dtype {a.dtype}")
                if not p.const and not a.flags.writeable:
                    raise LaunchError(f"{where}: the array is read-only but the kernel may write it")
                slot = ctypes.c_void_p(a.ctypes.data)
            else:
                raise LaunchError(f"{where}: expected an array or a null pointer (an 8-byte integer zero), "
                                  f"got {a!r}")
        else:
            if isinstance(a, np.ndarray):
                raise LaunchError(f"{where}: got an array for a by-value parameter")
            if isinstance(a, bool):
                a = np.bool_(a)
            elif isinstance(a, int):  # as CuPy does
                a = np.int64(a)
            elif isinstance(a, float):
                a = np.float64(a)
            if not isinstance(a, np.generic):
                raise LaunchError(f"{where}: unsupported argument type {type(a).__name__}")
            if not (a.dtype.itemsize == p.size and (p.kind == "s" or _KIND.get(a.dtype.kind) == p.kind)):
                raise LaunchError(f"{where}: got {a.dtype} (pass a numpy scalar of the parameter's type)")
            slot = ctypes.create_string_buffer(a.tobytes(), p.size)
        keep.append(slot)
        argv[i] = ctypes.addressof(slot)
    return keep, argv


def _dim3(v, what: str) -> tuple[int, int, int]:
    t = (v,) if isinstance(v, (int, np.integer)) else tuple(v)
    if not 1 <= len(t) <= 3:
        raise LaunchError(f"{what} must have 1 to 3 dimensions, got {v!r}")
    t = tuple(int(x) for x in t) + (1,) * (3 - len(t))
    if min(t) < 1:
        raise LaunchError(f"invalid configuration argument: {what} {t} has a zero or negative dimension")
    return t


class Function:
    """A launchable kernel: ``fn(grid, block, args, shared_mem=0)`` as ``cupy.cuda.Function``."""

    def __init__(self, lib: ctypes.CDLL, index: int, name: str):
        self.name = name
        self._launch = getattr(lib, f"gpuops_launch_{index}")
        self._launch.restype = ctypes.c_int
        self._launch.argtypes = [ctypes.c_uint] * 6 + [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        sig = getattr(lib, f"gpuops_signature_{index}")
        sig.restype = ctypes.c_char_p
        text = sig().decode()
        self.params = [_Param(t) for t in text.split(",")] if text else []

    def __call__(self, grid, block, args, shared_mem=0, stream=None, **kwargs):
        if shared_mem:
            raise LaunchError("dynamic shared memory is not emulated: declare __shared__ arrays with a static size")
        g, b = _dim3(grid, "grid"), _dim3(block, "block")
        if b[0] * b[1] * b[2] > MAX_THREADS_PER_BLOCK or b[2] > 64:
            raise LaunchError(f"invalid configuration argument: block {b} exceeds the CUDA limits "
                              f"({MAX_THREADS_PER_BLOCK} threads, z <= 64)")
        if g[0] >= 2**31 or g[1] > 65535 or g[2] > 65535:
            raise LaunchError(f"invalid configuration argument: grid {g} exceeds the CUDA limits")
        keep, argv = _pack(tuple(args), self.params, self.name)
        err = ctypes.create_string_buffer(1024)
        if self._launch(*g, *b, ctypes.cast(argv, ctypes.c_void_p), err, len(err)):
            raise LaunchError(f"kernel {self.name}: {err.value.decode()}")
        del keep


class RawModule:
    """``cupy.RawModule`` on the CPU: ``RawModule(code=..., options=..., name_expressions=[...])``."""

    def __init__(self, code: str | None = None, *, path: str | None = None, options=(), name_expressions=(),
                 backend="nvrtc", translate_cucomplex=False, jitify=False, **kwargs):
        if code is None:
            if path is None:
                raise ValueError("RawModule needs code or path")
            code = Path(path).read_text()
        self.code = code
        self.options = tuple(options)
        self.name_expressions = tuple(name_expressions)
        self._lib = _compile(code, self.options, self.name_expressions) if self.name_expressions else None
        self._extra: dict[str, Function] = {}

    def get_function(self, name: str) -> Function:
        if name in self.name_expressions:
            return Function(self._lib, self.name_expressions.index(name), name)
        if name not in self._extra:  # an extern "C" kernel (CuPy finds those without name expressions)
            self._extra[name] = Function(_compile(self.code, self.options, (name,)), 0, name)
        return self._extra[name]


class RawKernel:
    """``cupy.RawKernel(code, name, options=())``: one kernel, callable directly."""

    def __init__(self, code: str, name: str, options=(), **kwargs):
        self._fn = RawModule(code=code, options=options, name_expressions=(name,)).get_function(name)
        self.name = name

    def __call__(self, grid, block, args, shared_mem=0, **kwargs):
        self._fn(grid, block, args, shared_mem=shared_mem)

