"""Device memory of sessions: hooks, out-of-memory mapping, graph memory lifetime."""

import numpy as np
import pytest

import gpuops

from tests.test_cuda_path import chain_model, expected_chain


def test_two_sessions_memory_hooks_nest_on_one_thread():
    # CuPy keys a thread's memory hooks by name: one name for every session made nesting raise KeyError
    a = gpuops.InferenceSession(chain_model(n=2), device="cuda")
    b = gpuops.InferenceSession(chain_model(n=2), device="cuda")
    x = np.ones((2, 256), np.float32)
    with a.memory.active():
        (y,) = b.run(None, {"x": x})
    np.testing.assert_allclose(y, expected_chain(x, 2))
    assert b.memory_stats()["allocations"] > 0
