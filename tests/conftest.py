"""Test-wide setup.

``device="cuda"`` tests run against real CuPy when a GPU is present, and otherwise against the CPU
stand-in (:mod:`gpuops.testing.cuda_standin`, selected as the CUDA backend through
``GPUOPS_CUDA_BACKEND``), so the CUDA path is exercised in CI. Tests marked ``cuda`` need the real thing
and are skipped without it.
"""

import os
import warnings

import pytest

from gpuops import backends, testing
from gpuops import device as _device

REAL_GPU = _device.cuda_device_count() > 0 and not _device.uses_standin()
if not REAL_GPU:
    os.environ[backends.BACKEND_ENV] = testing.STANDIN


def pytest_configure(config):
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"onnx\..*")


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU with CuPy (none here; the stand-in covers the CUDA path)")
    for item in items:
        if item.get_closest_marker("cuda") and not REAL_GPU:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter):
    import sys

    module = sys.modules.get("tests.conformance.test_node_cases")  # only when this run collected it
    if module is None:
        return
    CASES, RESULTS = module.CASES, module.RESULTS
    for dev, results in RESULTS.items():
        if results:
            passed = sum(1 for v in results.values() if v == "pass")
            where = dev if dev == "cpu" or REAL_GPU else f"{dev} (CPU stand-in)"
            terminalreporter.write_line(
                f"onnx node conformance on {where}: {passed} of {len(CASES)} cases pass ({len(results)} run)")
