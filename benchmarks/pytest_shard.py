"""pytest plugin: ``python -m pytest -p benchmarks.pytest_shard --shard I/N`` runs every N-th
collected test starting with the I-th, so that a long suite splits into N parts of similar length
(benchmarks/gpu_validate.sh runs each part under a time limit)."""

import pytest


def pytest_addoption(parser):
    parser.addoption("--shard", default=None, metavar="I/N", help="run the I-th of N interleaved slices of the tests")


def pytest_collection_modifyitems(config, items):
    spec = config.getoption("--shard")
    if not spec:
        return
    try:
        i, n = (int(v) for v in spec.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--shard takes I/N, got {spec!r}") from None
    if not 1 <= i <= n:
        raise pytest.UsageError(f"--shard {spec}: I must be between 1 and N")
    config.hook.pytest_deselected(items=[t for k, t in enumerate(items) if k % n != i - 1])
    items[:] = items[i - 1::n]
