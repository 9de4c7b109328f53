"""Fuzz campaign: ``python -m tests.fuzz --minutes N [--only NAME] [--scale K]``.

Runs every fuzz property of tests/fuzz/test_fuzz.py and test_inplace_fuzz.py again and again with
fresh random examples (Hypothesis's ``campaign`` profile) until the time is up; prints each distinct failure once (with
Hypothesis's reproduction blob) and exits 1 if there was any. A property running longer than
``--stall`` seconds gets its stacks dumped; the model being checked is in ``$GPUOPS_FUZZ_DUMP``
(default ``gpuops-fuzz-current.onnx`` in the temporary folder).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import resource
import sys
import tempfile
import time
import traceback


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--only", default="", help="run only the properties whose name contains this")
    ap.add_argument("--scale", type=float, default=5.0, help="examples per round, as a multiple of CI's")
    ap.add_argument("--stall", type=float, default=120.0, help="dump the stacks of a property running this long (s)")
    ap.add_argument("--memory-gb", type=float, default=16.0, help="address-space cap of this process")
    a = ap.parse_args(argv)
    os.environ["GPUOPS_FUZZ_SCALE"] = str(a.scale)
    os.environ.setdefault("GPUOPS_FUZZ_DUMP", os.path.join(tempfile.gettempdir(), "gpuops-fuzz-current.onnx"))
    os.environ.setdefault("GPUOPS_CUDA_BACKEND", "gpuops.testing.cuda_standin")  # the CPU stand-in of CuPy
    cap = int(a.memory_gb * 2 ** 30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))
    faulthandler.enable()  # a crash in native code prints where it happened; the case is in $GPUOPS_FUZZ_DUMP
    print(f"the case being checked is written to {os.environ['GPUOPS_FUZZ_DUMP']}", flush=True)
    from hypothesis import settings

    settings.load_profile("campaign")  # before the properties are decorated
    from tests.conftest import REAL_GPU  # noqa: F401  (sets the stand-in up like the test suite)
    from tests.fuzz import indexing, mdf, test_fuzz, test_inplace_fuzz

    props = {name: fn for module in (test_fuzz, test_inplace_fuzz) for name, fn in vars(module).items()
             if name.startswith("test_") and callable(fn)}
    runs = []
    for name, fn in props.items():
        if name == "test_indexing_ops_refuse_what_onnxruntime_refuses":
            runs += [(f"{name}[{op}]", fn, {"op": op}) for op in sorted(indexing.CASES)]
        elif name == "test_hostile_mdf_expressions_are_refused_quickly":
            runs += [(f"{name}[{i}]", fn, {"source": s}) for i, s in enumerate(mdf.HOSTILE)]
        else:
            runs.append((name, fn, {}))
    runs = [r for r in runs if a.only in r[0]]
    end = time.monotonic() + 60 * a.minutes
    failures: dict[str, str] = {}
    rounds = 0
    while time.monotonic() < end:
        rounds += 1
        for name, fn, kwargs in runs:
            if time.monotonic() >= end:
                break
            faulthandler.dump_traceback_later(a.stall)
            try:
                fn(**kwargs)
            except Exception:
                text = traceback.format_exc()
                key = name + text.strip().splitlines()[-1][:200]
                if key not in failures:
                    failures[key] = text
                    print(f"FAIL {name}\n{text}", flush=True)
    faulthandler.cancel_dump_traceback_later()
    print(f"{rounds} round(s) of {len(runs)} properties in {a.minutes} min: {len(failures)} distinct failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
