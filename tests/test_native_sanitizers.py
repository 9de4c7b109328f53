"""Every native CPU kernel's tests again, with the kernels built under AddressSanitizer and
UndefinedBehaviorSanitizer: an out-of-bounds read or write, a misaligned load or an overflow in a
kernel fails here even where the results happen to come out right."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuops import native

ROOT = Path(__file__).resolve().parent.parent
NATIVE_TESTS = ["tests/test_native.py", "tests/test_native_rnn.py", "tests/test_native_quantize.py",
                "tests/test_conv_epilogue.py", "tests/test_native_gemm.py", "tests/test_native_threads.py",
                "tests/ml/test_native_trees.py", "tests/ml/test_native_linear.py", "tests/ops/test_qgemm_native.py",
                "tests/ops/test_cpu_transformer.py", "tests/ops/test_private_ops.py", "tests/ops/test_cast_native.py",
                "tests/test_programs.py", "tests/ops/test_conv_planned.py"]


def _runtime(cc: str, name: str) -> str | None:
    """The sanitizer runtime's path (``cc -print-file-name`` echoes the bare name when it has none)."""
    r = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True)
    path = r.stdout.strip()
    return path if r.returncode == 0 and os.path.isabs(path) and os.path.exists(path) else None


def test_native_kernels_are_clean_under_sanitizers(tmp_path):
    cc = native.compiler()
    if cc is None:
        pytest.skip("no C compiler: native kernels fall back to NumPy")
    libs = [_runtime(cc, "libasan.so"), _runtime(cc, "libubsan.so")]
    if None in libs:
        pytest.skip(f"{cc} has no AddressSanitizer/UndefinedBehaviorSanitizer runtime")
    env = {**os.environ,
           "GPUOPS_NATIVE_CFLAGS": "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer",
           "GPUOPS_NATIVE_CACHE": str(tmp_path / "cache"), "LD_PRELOAD": ":".join(libs),
           "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0", "UBSAN_OPTIONS": "print_stacktrace=1"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-s", "-p", "no:cacheprovider",  # -s: the
                        "-p", "no:randomly", *NATIVE_TESTS], cwd=ROOT, env=env, capture_output=True,  # reports
                       text=True, timeout=900)
    report = (r.stdout + r.stderr)[-8000:]
    assert r.returncode == 0, report
    assert "AddressSanitizer" not in report and "runtime error" not in report, report
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "cache").glob("*.so")) == [
        "attention", "cast", "conv", "direct_conv", "gemm", "linear_ml", "pool", "program", "qgemm", "quantize", "rnn",
        "rows", "special", "threads", "tree_ensemble", "winograd"]
