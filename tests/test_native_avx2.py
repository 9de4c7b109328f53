"""The native kernels' tests again with the kernels built for AVX2 (``-march=x86-64-v3``) on a CPU with
AVX-512: there common.h's vectors are 8 floats rather than 16 (transposes, horizontal sums, tiles and
block sizes of their own), code the machine's own build never takes. On an AVX2 CPU the plain runs
already cover it."""

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from gpuops import native

ROOT = Path(__file__).resolve().parent.parent
TESTS = ["tests/test_native.py", "tests/test_native_rnn.py", "tests/test_native_gemm.py", "tests/test_conv_epilogue.py",
         "tests/test_native_quantize.py", "tests/test_native_threads.py", "tests/ops/test_conv_planned.py",
         "tests/ops/test_cnn_cpu_paths.py", "tests/ops/test_cpu_transformer.py", "tests/ops/test_private_ops.py"]


def test_avx2_kernels_pass_the_native_tests(tmp_path):
    if native.compiler() is None:
        pytest.skip("no C compiler: native kernels fall back to NumPy")
    if platform.machine().lower() not in ("x86_64", "amd64") or native.vector_lanes() != 16:
        pytest.skip("not an AVX-512 x86-64 CPU: the plain runs build the 8-float kernels")
    env = {**os.environ, "GPUOPS_NATIVE_CFLAGS": "-march=x86-64-v3", "GPUOPS_NATIVE_CACHE": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly",
                        *TESTS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-8000:]
