"""Fixtures for the kernel tests: where the kernels run.

``dev`` is the CUDA emulator behind the CuPy stand-in (always, when g++ exists) and real CuPy on a
GPU (marked ``cuda``: skipped without one). Tests call the kernel-backed overrides directly with
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
        if name == "emulator":
            from gpuops.testing import cuda_standin

            self.xp = cuda_standin.xp
        else:
            import array_api_compat.cupy as xp

            self.xp = xp

    def put(self, a):
        return None if a is None else self.xp.asarray(np.asarray(a))

    def get(self, a) -> np.ndarray:
        return a.get()


@pytest.fixture(scope="session", params=["emulator", pytest.param("cupy", marks=pytest.mark.cuda)])
def dev(request):
    if request.param == "emulator" and not emulator.available():
        pytest.skip("no C++ compiler (g++) for the CUDA emulator")
    return Dev(request.param)
