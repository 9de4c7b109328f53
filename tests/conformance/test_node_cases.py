"""The onnx package's node conformance cases, run through gpuops on cpu.

Cases gpuops cannot pass yet are listed, one per line with a reason, in ``expected_failures.txt``.
A listed case that passes fails the run too (remove it from the file), so the list only shrinks.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from .harness import check_case, load_expected_failures

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from onnx.backend.test.case.node import collect_testcases

    CASES = sorted(collect_testcases(), key=lambda c: c.name)

HERE = Path(__file__).parent
XFAIL = load_expected_failures(HERE / "expected_failures.txt")
# cases that fail through the CUDA path only (CuPy or its stand-in) — a documented delta, ideally empty
XFAIL_CUDA = {**XFAIL, **load_expected_failures(HERE / "expected_failures_cuda.txt")}
DEVICES = os.environ.get("GPUOPS_CONFORMANCE_DEVICES", "cpu,cuda").split(",")
RESULTS: dict[str, dict[str, str]] = {d: {} for d in DEVICES}


def test_case_count():
    assert len(CASES) == 1884, "the onnx package's node suite changed size; update the harness"


def test_expected_failures_name_real_cases():
    names = {c.name for c in CASES}
    stale = sorted(set(XFAIL) - names)
    assert not stale, f"expected_failures.txt lists cases that do not exist: {stale[:10]}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("device", DEVICES)
def test_node_case(case, device):
    reason = (XFAIL if device == "cpu" else XFAIL_CUDA).get(case.name)
    try:
        check_case(case, device)
    except Exception:
        RESULTS[device][case.name] = "fail"
        if reason is not None:
            pytest.xfail(reason)
        raise
    RESULTS[device][case.name] = "pass"
    if reason is not None:
        pytest.fail(f"{case.name} passes on {device} now: remove it from the expected-failure file ({reason})")
