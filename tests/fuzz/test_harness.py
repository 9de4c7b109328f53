"""The fuzz harness itself: a fuzzing process that dies (a malformed model may kill it in native
code) leaves no oracle worker behind holding its output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import os, signal, sys
import numpy as np
from tests.fuzz.models import relu_model
from tests.fuzz import oracle

got = oracle.ort_outcome(relu_model(), {"x": np.ones(2, np.float32)})
assert got[0] == "ok", got
print(*oracle._POOL._processes, flush=True)  # the worker's pid
os.kill(os.getpid(), signal.SIGSEGV)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_crashing_fuzzer_leaves_no_worker_holding_its_output():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # communicate() returns only when every holder of the pipes has gone: an orphan would hang it
    p = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == -signal.SIGSEGV, p.stderr[-2000:]
    worker = int(p.stdout.split()[0])
    deadline = time.monotonic() + 30  # the worker checks for its parent every 0.5 s
    while time.monotonic() < deadline:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(worker, signal.SIGKILL)
    pytest.fail(f"the oracle worker {worker} outlived the fuzzing process")
