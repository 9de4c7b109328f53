"""The onnx package's node conformance cases, run through gpuops on cpu.

Cases gpuops cannot pass yet are listed, one per line with a reason, in ``expected_failures.txt``.
A listed case that passes fails the run too (remove it from the file), so the list only shrinks.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from .harness import check_case, load_expected_failures

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from onnx.backend.test.case.node import collect_testcases

    CASES = sorted(collect_testcases(), key=lambda c: c.name)

DEVICE = os.environ.get("GPUOPS_CONFORMANCE_DEVICE", "cpu")
XFAIL = load_expected_failures(Path(__file__).with_name("expected_failures.txt"))
RESULTS: dict[str, str] = {}


def test_case_count():
    assert len(CASES) == 1884, "the onnx package's node suite changed size; update the harness"


def test_expected_failures_name_real_cases():
    names = {c.name for c in CASES}
    stale = sorted(set(XFAIL) - names)
    assert not stale, f"expected_failures.txt lists cases that do not exist: {stale[:10]}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case, record_property):
    reason = XFAIL.get(case.name)
    try:
        check_case(case, DEVICE)
    except Exception as e:
        RESULTS[case.name] = "fail"
        if reason is not None:
            pytest.xfail(reason)
        raise
    RESULTS[case.name] = "pass"
    if reason is not None:
        pytest.fail(f"{case.name} passes now: remove it from expected_failures.txt ({reason})")
