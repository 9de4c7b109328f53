"""The optimizer tests run it strict: a rewrite that raises fails the test instead of being skipped."""

import pytest


@pytest.fixture(autouse=True)
def _strict_optimizer(monkeypatch):
    monkeypatch.setenv("GPUOPS_OPTIMIZER_STRICT", "1")
