"""Several GPUs in one process without Ray: one session per device, each driven by its own thread."""

import threading

import numpy as np
import pytest

import gpuops
from gpuops.batch import run_batch

from .models import mlp, rows


def _cuda_count() -> int:
    return sum(1 for d in gpuops.devices() if d["kind"] == "cuda")


@pytest.mark.skipif(_cuda_count() < 2, reason="needs two CUDA devices (the stand-in has two)")
def test_sessions_on_two_gpus_in_threads_match_cpu():
    model, table = mlp(), rows(64)
    want = run_batch(gpuops.InferenceSession(model, device="cpu"), table)
    sessions = [gpuops.InferenceSession(model, device=f"cuda:{i}") for i in range(2)]
    shards = [{k: v[i::2] for k, v in table.items()} for i in range(2)]  # each GPU takes every other row
    results: list = [None, None]
    errors: list = []

    def work(i):
        try:
            out = []
            for start in range(0, len(shards[i]["id"]), 8):
                out.append(run_batch(sessions[i], {k: v[start:start + 8] for k, v in shards[i].items()}))
            results[i] = {k: np.concatenate([o[k] for o in out]) for k in out[0]}
        except Exception as e:  # noqa: BLE001 - reported below, with the thread
            errors.append((i, e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, s in enumerate(sessions):
        assert str(s.device) == f"cuda:{i}" and s.memory_stats()["device"] == f"cuda:{i}"
    for k in ("y", "s"):
        got = np.empty_like(want[k])
        got[0::2], got[1::2] = results[0][k], results[1][k]
        np.testing.assert_allclose(got, want[k], rtol=1e-5, atol=1e-6)
