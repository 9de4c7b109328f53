"""The corpus runs the optimizer strict: a rewrite that raises on a corpus model fails the test instead of
being skipped (each rewrite is tested on every corpus model)."""

import pytest


@pytest.fixture(autouse=True)
def _strict_optimizer(monkeypatch):
    monkeypatch.setenv("GPUOPS_OPTIMIZER_STRICT", "1")
