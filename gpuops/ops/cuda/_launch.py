"""Helpers shared by the kernel-backed overrides."""

from __future__ import annotations

import numpy as np

from ... import kernels
from ...registry import resolve


def generic(op_type: str, since: int, domain: str = ""):
    """The generic implementation an override at version ``since`` stands in for (its fallback)."""
    return resolve(domain, op_type, since, device=None).fn


def on_device(*arrays) -> bool:
    """True when every given array (None: an omitted input) is a CUDA device array. The session runs
    nodes with host-only dtypes (float8, int4, ...) on the host, with NumPy arrays: those go to the
    generic op."""
    return all(a is None or kernels.is_device_array(a) for a in arrays)


def contiguous(xp, a):
    """``a`` as a C-contiguous device array (kernels index raw memory)."""
    return xp.ascontiguousarray(a)


# An absent pointer argument. CuPy 13 launches a ``None`` argument as a garbage pointer (CuPy issue
# 9046; 14 passes NULL), so no launch passes None: an 8-byte zero scalar is a null pointer in both.
NULL = np.uint64(0)


def optional(xp, a):
    """An optional kernel operand: ``a`` as a C-contiguous device array, or :data:`NULL` when absent."""
    return NULL if a is None else contiguous(xp, a)


def launch(file: str, name: str, like, n: int, args: tuple, block: int = 256, exact_block: bool = False):
    """Run kernel ``name`` of ``cuda_kernels/<file>`` over ``n`` elements (grid-stride), on the device
    of the array ``like``."""
    backend, device = kernels.backend_of(like), kernels.device_of(like)
    grid, threads = kernels.launch_config(n, backend, block, exact_block)
    fn = kernels.get_function(file, name, backend, device)
    with backend.on_device(device):
        fn(grid, threads, args)


def i32(v) -> np.int32:
    v = int(v)
    if not -(2**31) <= v < 2**31:
        raise OverflowError(f"{v} does not fit the kernel's 32-bit parameter")
    return np.int32(v)


def i64(v) -> np.int64:
    return np.int64(int(v))


def f32(v) -> np.float32:
    return np.float32(v)
