"""Every kernel file compiles for sm_70, sm_80 and sm_90, with every listed instantiation present.

* nvcc (the CUDA toolkit on PATH or in $CUDA_HOME): sm_80 and sm_90, warnings as errors. nvcc 13
  dropped sm_70, which is then reported as a skip naming the NVRTC test that covers it.
* NVRTC 12 (PyPI: nvidia-cuda-nvrtc-cu12 + nvidia-cuda-runtime-cu12 for the headers), the compiler
  CuPy's RawModule uses: sm_70, sm_80 and sm_90, with CuPy's exact options and name expressions.
"""

import pytest

from gpuops import kernels

from . import toolchains

FILES = sorted(kernels.NAME_EXPRESSIONS)
ARCHS = ["sm_70", "sm_80", "sm_90"]
NVCC = toolchains.nvcc_path()
NVRTC = toolchains.nvrtc12()
_DEPRECATED = "Architectures prior to '<compute/sm>_75' are deprecated"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("file", FILES)
def test_nvcc_compiles(file, arch, tmp_path):
    if NVCC is None:
        pytest.skip("nvcc not found (neither on PATH nor in $CUDA_HOME/bin): install the CUDA toolkit")
    if arch not in toolchains.nvcc_archs(NVCC):
        pytest.skip(f"{NVCC} cannot target {arch} (nvcc 13 dropped sm_70/Volta); "
                    f"test_nvrtc_compiles[{file}-{arch}] compiles it with NVRTC 12 instead")
    cubin = toolchains.nvcc_compile(NVCC, file, arch, tmp_path)
    symbols = toolchains.cubin_kernels(cubin, tmp_path)
    if symbols is not None:  # one kernel entry per name expression
        assert len(symbols) == len(kernels.NAME_EXPRESSIONS[file]), sorted(symbols)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("file", FILES)
def test_nvrtc_compiles(file, arch):
    if NVRTC is None:
        pytest.skip("NVRTC 12 not installed: pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-runtime-cu12 "
                    "(the only compiler here that still targets sm_70)")
    cubin, lowered, log = NVRTC.compile(file, arch)
    warnings = [line for line in log.splitlines() if line.strip() and _DEPRECATED not in line]
    assert not warnings, log
    assert set(lowered) == set(kernels.NAME_EXPRESSIONS[file])
    for expr, mangled in lowered.items():
        assert mangled.encode() in cubin, f"{expr} ({mangled}) missing from the {arch} cubin"
