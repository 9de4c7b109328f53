"""gpuops' custom CUDA kernels: lazy, cached loading of ``cuda_kernels/*.cu`` per device.

A kernel file is compiled the first time one of its kernels is asked for on a device, with all the
template instantiations listed in :data:`NAME_EXPRESSIONS` (one compilation per file and device),
through the backend's ``RawModule`` -- CuPy's (NVRTC) on a GPU, or the CPU emulator's under the CuPy
stand-in (:mod:`gpuops.cuda_standin`). Nothing is compiled or imported at ``import gpuops`` time.

    backend, device = kernels.backend_of(x), kernels.device_of(x)
    fn = kernels.get_function("conv.cu", "im2col<float>", backend, device)
    grid, block = kernels.launch_config(n, backend)
    with backend.cuda.Device(device):
        fn(grid, block, (x, col, np.int64(n), np.int32(d), ...))  # CuPy's launch convention

Kernel files include ``common.cuh`` with ``#include "common.cuh"``; :func:`source` inlines such local
includes, so a module is one self-contained string (and CuPy's compile cache, keyed by the source,
sees changes to the shared header).
"""

from __future__ import annotations

import re
import threading
from types import ModuleType

from .native import source_dir

# cuda_kernels/ sits beside the package in a clone (editable installs); wheels carry a copy inside it
KERNEL_DIR = source_dir("cuda_kernels")

# NVRTC options: C++17, and no FMA contraction so float results follow the reference formulas'
# rounding (the kernels are memory-bound; the GEMMs run in cuBLAS and are unaffected).
OPTIONS = ("-std=c++17", "--fmad=false")

_FLOATS = ("float", "__half")
_BYTES = ("unsigned char", "signed char")
_QUANT = (*_BYTES, "unsigned short", "short")

NAME_EXPRESSIONS: dict[str, tuple[str, ...]] = {
    "conv.cu": (*(f"{k}<{t}>" for k in ("im2col", "col2im", "bias_activation", "depthwise_conv") for t in _FLOATS),
                "im2col<int>"),
    "quantize.cu": (
        *(f"quantize_linear<{x}, {s}, {q}>" for x in _FLOATS for s in _FLOATS for q in _QUANT),
        *(f"dequantize_linear<{q}, {s}, {y}>" for q in (*_QUANT, "int") for s in _FLOATS for y in _FLOATS),
        *(f"{k}<{t}>" for k in ("minmax_reduce", "dynamic_quantize") for t in _FLOATS),
        *(f"gemm_s32<{a}, {b}>" for a in _BYTES for b in _BYTES), "gemm_s32<int, int>",
        *(f"requantize<{t}>" for t in _BYTES),
    ),
    "roi_align.cu": tuple(f"roi_align<{t}>" for t in _FLOATS),
    "nms.cu": (*(f"{k}<{t}>" for k in ("nms_mask", "nms_select") for t in _FLOATS), "nms_gather"),
}

# Fixed block sizes some kernels are written for (their shared-memory arrays have this size).
DQ_BLOCK = 256  # quantize.cu: minmax_reduce
QG_TILE = 16  # quantize.cu: gemm_s32 runs (QG_TILE, QG_TILE) blocks
NMS_BLOCK = 64  # nms.cu: nms_mask

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.M)
_PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\s*$", re.M)


def source(file: str) -> str:
    """The kernel file's text with its local ``#include "..."`` files inlined (each once)."""
    seen: set[str] = set()

    def expand(name: str) -> str:
        if name in seen:
            return ""
        seen.add(name)
        text = _PRAGMA_ONCE.sub("", (KERNEL_DIR / name).read_text())
        return _INCLUDE.sub(lambda m: expand(m.group(1)), text)

    return expand(file)


def is_device_array(array) -> bool:
    """True for a CuPy array (or the CPU stand-in's), which kernels can be launched on."""
    return type(array).__module__.startswith(("cupy", "gpuops.cuda_standin"))


def backend_of(array) -> ModuleType:
    """The CuPy-like module an array belongs to: ``cupy``, or the CPU stand-in."""
    mod = type(array).__module__
    if mod.startswith("gpuops.cuda_standin"):
        from . import cuda_standin

        return cuda_standin
    if mod.startswith("cupy"):
        import cupy

        return cupy
    raise TypeError(f"not a CUDA device array: {type(array).__name__}")


def emulated(backend: ModuleType) -> bool:
    """True when kernels run on the CPU emulator rather than a GPU."""
    return not backend.__name__.startswith("cupy")


_lock = threading.Lock()
_modules: dict[tuple, object] = {}
_functions: dict[tuple, object] = {}


def device_of(array) -> int:
    """The CUDA device index an array lives on."""
    dev = getattr(array, "device", None)
    return int(getattr(dev, "id", 0) or 0)


def get_function(file: str, name_expression: str, backend: ModuleType, device: int | None = None):
    """The kernel ``name_expression`` of ``cuda_kernels/<file>`` for ``device`` (default: the current
    one), compiled on first use -- all of the file's instantiations at once -- and cached per device.
    Launch it on that device (``with backend.cuda.Device(device)``), CuPy-style:
    ``fn(grid, block, args, shared_mem=0)``."""
    if name_expression not in NAME_EXPRESSIONS.get(file, ()):
        raise KeyError(f"{name_expression!r} is not an instantiation listed for {file} in NAME_EXPRESSIONS")
    if device is None:
        device = int(backend.cuda.Device().id)
    key = (backend.__name__, device, file)
    fn = _functions.get((*key, name_expression))
    if fn is not None:
        return fn
    with _lock, backend.cuda.Device(device):
        module = _modules.get(key)
        if module is None:
            module = backend.RawModule(code=source(file), options=OPTIONS, name_expressions=NAME_EXPRESSIONS[file])
            _modules[key] = module
        fn = _functions[(*key, name_expression)] = module.get_function(name_expression)
    return fn


def launch_config(n: int, backend: ModuleType, block: int = 256,
                  exact_block: bool = False) -> tuple[tuple[int], tuple[int]]:
    """(grid, block) for a grid-stride kernel over ``n`` elements. On the emulator, a few blocks of
    at most 128 threads (unless ``exact_block``): each emulated thread costs a context switch, while
    more loop iterations per thread are free."""
    if emulated(backend):
        block = block if exact_block else min(block, 128)
        return (max(1, min(-(-n // block), 8)),), (block,)
    return (max(1, min(-(-n // block), 65535)),), (block,)
