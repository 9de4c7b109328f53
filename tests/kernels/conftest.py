"""Fixtures for the kernel tests: where the kernels run.

``dev`` is the CUDA emulator behind the CuPy stand-in (always, when g++ exists), once with its own
small launch shapes and once with a GPU's, and real CuPy on a GPU (marked ``cuda``: skipped without
one). Tests call the kernel-backed overrides directly with
``dev.xp`` and compare with an oracle computed on the host.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpuops.ops  # noqa: F401  (the generic ops: fallbacks and oracles)
import gpuops.ops.cuda  # noqa: F401  (the overrides under test)
from gpuops.testing import emulator


class Dev:
    def __init__(self, name: str):
        self.name = name
        if name.startswith("emulator"):
            from gpuops.testing import cuda_standin

            self.xp = cuda_standin.xp
        else:
            import array_api_compat.cupy as xp

            self.xp = xp

    def put(self, a):
        return None if a is None else self.xp.asarray(np.asarray(a))

    def get(self, a) -> np.ndarray:
        return a.get()


@pytest.fixture(scope="module",  # module: the GPU shapes end with the module that set them
                params=["emulator", "emulator-gpu-shapes", pytest.param("cupy", marks=pytest.mark.cuda)])
def dev(request):
    """Where the kernels run: the emulator with its own launch shapes (a few blocks of at most 128
    threads, NMS's select block of 32, at most 4 grid layers), the emulator with a GPU's launch shapes
    (:data:`gpuops.backends.base.GPU_LIMITS`: a block per 256 elements, NMS's block of 128, every grid
    layer), or real CuPy."""
    if request.param.startswith("emulator") and not emulator.available():
        pytest.skip("no C++ compiler (g++) for the CUDA emulator")
    if request.param == "emulator-gpu-shapes":
        from gpuops.backends.base import GPU_LIMITS
        from gpuops.testing import cuda_standin

        saved = cuda_standin.BACKEND.launch_limits
        cuda_standin.BACKEND.launch_limits = GPU_LIMITS
        try:
            yield Dev(request.param)
        finally:
            cuda_standin.BACKEND.launch_limits = saved
        return
    yield Dev(request.param)
