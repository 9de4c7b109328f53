"""GPU compilers for the kernel compile tests: nvcc (the CUDA toolkit) and NVRTC through ctypes.

nvcc 13 no longer targets sm_70 (Volta), so sm_70 is compiled with NVRTC 12 -- the compiler CuPy
itself uses for RawModule -- from the PyPI wheels ``nvidia-cuda-nvrtc-cu12`` (libnvrtc) and
``nvidia-cuda-runtime-cu12`` (the CUDA headers, for <cuda_fp16.h>). Both compile the same
translation unit: the kernel file with its includes inlined, plus every name expression of
:data:`gpuops.kernels.NAME_EXPRESSIONS` instantiated.
"""

from __future__ import annotations

import ctypes
import glob
import os
import shutil
import subprocess
from pathlib import Path

from gpuops import kernels


def translation_unit(file: str) -> str:
    """The kernel file plus a host function taking the address of every listed instantiation (which
    makes the front end instantiate each kernel template for the device)."""
    exprs = kernels.NAME_EXPRESSIONS[file]
    table = ",\n".join(f"        (void*)&{e}" for e in exprs)
    return (f"{kernels.source(file)}\n"
            f"void* gpuops_instance(int i) {{\n    static void* const all[] = {{\n{table}\n    }};\n"
            f"    return all[i];\n}}\n")


# -- nvcc ----------------------------------------------------------------------------------------

def nvcc_path() -> str | None:
    for cand in (shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if cand and os.path.exists(cand):
            return cand
    return None


def nvcc_archs(nvcc: str) -> set[str]:
    r = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True)
    return {a.replace("compute_", "sm_") for a in r.stdout.split()}


def nvcc_compile(nvcc: str, file: str, arch: str, tmp: Path) -> bytes:
    src = tmp / file
    src.write_text(translation_unit(file))
    out = tmp / f"{file}.{arch}.cubin"
    cmd = [nvcc, "-std=c++17", "--fmad=false", f"-arch={arch}", "-cubin", "-Werror", "all-warnings",
           "-o", str(out), str(src)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return out.read_bytes()


def cubin_kernels(cubin: bytes, tmp: Path) -> set[str] | None:
    """The kernel entry symbols of a cubin (an ELF file), via readelf; None without binutils."""
    readelf = shutil.which("readelf")
    if not readelf:
        return None
    path = tmp / "probe.cubin"
    path.write_bytes(cubin)
    r = subprocess.run([readelf, "-sW", str(path)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in r.stdout.splitlines() if " FUNC " in line and " GLOBAL " in line}


# -- NVRTC ---------------------------------------------------------------------------------------

class Nvrtc:
    """libnvrtc loaded with ctypes: source + name expressions -> (cubin, {expression: mangled name})."""

    def __init__(self, lib_path: str, include_dirs: list[str]):
        self.lib = ctypes.CDLL(lib_path)
        self.include_dirs = include_dirs
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        self.version = (major.value, minor.value)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def _check(self, status: int, what: str, prog=None):
        if status:
            log = self._log(prog) if prog is not None else ""
            raise AssertionError(f"NVRTC {what}: {self.lib.nvrtcGetErrorString(status).decode()}\n{log}")

    def _log(self, prog) -> str:
        n = ctypes.c_size_t()
        self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        self.lib.nvrtcGetProgramLog(prog, buf)
        return buf.value.decode(errors="replace")

    def compile(self, file: str, arch: str) -> tuple[bytes, dict[str, str], str]:
        prog = ctypes.c_void_p()
        src = kernels.source(file).encode()
        self._check(self.lib.nvrtcCreateProgram(ctypes.byref(prog), src, file.encode(), 0, None, None), "create")
        try:
            exprs = kernels.NAME_EXPRESSIONS[file]
            for e in exprs:
                self._check(self.lib.nvrtcAddNameExpression(prog, e.encode()), f"name expression {e}")
            opts = [*kernels.OPTIONS, f"-arch={arch}", *(f"-I{d}" for d in self.include_dirs)]
            arr = (ctypes.c_char_p * len(opts))(*(o.encode() for o in opts))
            self._check(self.lib.nvrtcCompileProgram(prog, len(opts), arr), f"compile {file} for {arch}", prog)
            log = self._log(prog)
            lowered = {}
            for e in exprs:
                name = ctypes.c_char_p()
                self._check(self.lib.nvrtcGetLoweredName(prog, e.encode(), ctypes.byref(name)), f"lowered name {e}")
                lowered[e] = name.value.decode()
            n = ctypes.c_size_t()
            self._check(self.lib.nvrtcGetCUBINSize(prog, ctypes.byref(n)), "cubin size")
            buf = ctypes.create_string_buffer(n.value)
            self._check(self.lib.nvrtcGetCUBIN(prog, buf), "cubin")
            return buf.raw, lowered, log
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


def nvrtc12() -> Nvrtc | None:
    """NVRTC 12 with CUDA 12 headers from the PyPI wheels, or None when they are not installed."""
    try:
        import nvidia.cuda_nvrtc
        import nvidia.cuda_runtime
    except ImportError:
        return None
    libs = [p for d in nvidia.cuda_nvrtc.__path__ for p in glob.glob(os.path.join(d, "lib", "libnvrtc.so.12*"))]
    includes = [os.path.join(d, "include") for d in nvidia.cuda_runtime.__path__
                if os.path.exists(os.path.join(d, "include", "cuda_fp16.h"))]
    if not libs or not includes:
        return None
    return Nvrtc(sorted(libs)[0], includes)
