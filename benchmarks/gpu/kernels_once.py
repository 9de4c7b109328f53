"""Every selftest kernel case once, for compute-sanitizer: on a GPU each array gets its own
cudaMalloc (CuPy's pools off), so an out-of-bounds access lands outside an allocation.

    compute-sanitizer --tool memcheck --error-exitcode 99 python3 -m benchmarks.gpu.kernels_once

Prints one line per kernel family; exits 1 when a case fails (a mismatch, or no kernel launched).
"""

from __future__ import annotations

import sys

from gpuops import selftest

from .common import REAL, cuda_device


def main() -> int:
    dev = cuda_device()
    if REAL:
        dev.lib.cuda.set_allocator(None)
        dev.lib.cuda.set_pinned_memory_allocator(None)
    bad = 0
    for fam in selftest.kernel_checks(dev):
        failed = [(c["name"], c.get("error", "mismatch")) for c in fam["cases"] if not c.get("ok")]
        ok = "error" not in fam and not failed
        bad += not ok
        print(f"{fam['family']:<10} {'ok' if ok else 'FAIL'} {len(fam['cases'])} cases",
              fam.get("error", ""), failed or "", flush=True)
    if REAL:
        dev.lib.cuda.Device().synchronize()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
