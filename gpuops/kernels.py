"""gpuops' custom CUDA kernels: lazy, cached loading of ``cuda_kernels/*.cu`` per device.

A kernel file is compiled the first time one of its kernels is asked for on a device, with all the
template instantiations listed in :data:`NAME_EXPRESSIONS` (one compilation per file and device),
through the array's backend (:meth:`gpuops.backends.base.Backend.raw_module`) -- CuPy's ``RawModule``
(NVRTC) on a GPU, or whatever a stand-in backend compiles with (the CPU stand-in of the tests: an
emulation of the CUDA execution model). The backend also says how kernels may be launched
(:attr:`~gpuops.backends.base.Backend.launch_limits`). Nothing is compiled or imported at
``import gpuops`` time.

    backend, device = kernels.backend_of(x), kernels.device_of(x)
    fn = kernels.get_function("conv.cu", "im2col<float>", backend, device)
    grid, block = kernels.launch_config(n, backend)
    with backend.on_device(device):
        fn(grid, block, (x, col, np.int64(n), np.int32(d), ...))  # CuPy's launch convention

Kernel files include ``common.cuh`` with ``#include "common.cuh"``; :func:`source` inlines such local
includes, so a module is one self-contained string (and CuPy's compile cache, keyed by the source,
sees changes to the shared header).
"""

from __future__ import annotations

import re
import threading

from . import backends
from .backends import Backend
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
    "conv.cu": (*(f"{k}<{t}>" for k in ("im2col", "col2im", "conv_epilogue", "depthwise_conv") for t in _FLOATS),
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
    "tree_ensemble.cu": tuple(f"{k}<{t}>" for k in ("tree_leaves", "tree_sum") for t in ("float", "double")),
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
    """True for an array of a CUDA backend (CuPy's, or a stand-in's), which kernels can be launched on."""
    b = backends.owner(array)
    return b is not None and b.kind == "cuda"


def backend_of(array) -> Backend:
    """The backend of a CUDA device array (:func:`gpuops.backends.owner`)."""
    b = backends.owner(array)
    if b is None or b.kind != "cuda":
        raise TypeError(f"not a CUDA device array: {type(array).__name__}")
    return b


def _backend(backend) -> Backend:
    """A backend, given itself or its array library module (``device.lib``)."""
    if isinstance(backend, Backend):
        return backend
    b = backends.of_library(backend)
    if b is None:
        raise TypeError(f"no backend is registered for {backend!r}")
    return b


_lock = threading.Lock()
_modules: dict[tuple, object] = {}
_functions: dict[tuple, object] = {}


def device_of(array) -> int:
    """The CUDA device index an array lives on."""
    dev = getattr(array, "device", None)
    return int(getattr(dev, "id", 0) or 0)


def get_function(file: str, name_expression: str, backend, device: int | None = None):
    """The kernel ``name_expression`` of ``cuda_kernels/<file>`` for ``device`` (default: the current
    one) of ``backend`` (a :class:`~gpuops.backends.base.Backend`, or its array library module),
    compiled on first use -- all of the file's instantiations at once -- and cached per device.
    Launch it on that device (``with backend.on_device(device)``), CuPy-style:
    ``fn(grid, block, args, shared_mem=0)``."""
    if name_expression not in NAME_EXPRESSIONS.get(file, ()):
        raise KeyError(f"{name_expression!r} is not an instantiation listed for {file} in NAME_EXPRESSIONS")
    backend = _backend(backend)
    if device is None:
        device = backend.current_device()
    key = (backend.name, device, file)
    fn = _functions.get((*key, name_expression))
    if fn is not None:
        return fn
    with _lock, backend.on_device(device):
        module = _modules.get(key)
        if module is None:
            module = backend.raw_module(source(file), OPTIONS, NAME_EXPRESSIONS[file])
            _modules[key] = module
        fn = _functions[(*key, name_expression)] = module.get_function(name_expression)
    return fn


def launch_config(n: int, backend, block: int = 256,
                  exact_block: bool = False) -> tuple[tuple[int], tuple[int]]:
    """(grid, block) for a grid-stride kernel over ``n`` elements, within the backend's
    :attr:`~gpuops.backends.base.Backend.launch_limits`: on a GPU up to 65535 blocks; on an emulation
    of the CUDA execution model a few blocks of at most 128 threads (unless ``exact_block``), as each
    emulated thread costs a context switch while more loop iterations per thread are free."""
    limits = _backend(backend).launch_limits
    if limits.max_threads is not None and not exact_block:
        block = min(block, limits.max_threads)
    return (max(1, min(-(-n // block), limits.max_blocks)),), (block,)
