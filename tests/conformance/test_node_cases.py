"""The onnx package's node conformance cases, run through gpuops on cpu.

Cases gpuops cannot pass yet are listed, one per line, in ``expected_failures.txt``: the exception
type the case fails with, a text its message contains, and the reason. A listed case that fails in
another way fails the run (its failure is new, and the entry no longer explains it), and so does a
listed case that passes (remove it from the file), so the list only shrinks.
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
    """Every case of the installed onnx package is collected, once (their number changes with onnx)."""
    names = [c.name for c in CASES]
    assert names and len(set(names)) == len(names)
    assert all(c.model.graph.node and c.data_sets for c in CASES)


def test_expected_failures_name_real_cases():
    names = {c.name for c in CASES}
    stale = sorted(set(XFAIL_CUDA) - names)
    assert not stale, f"the expected-failure files list cases that do not exist: {stale[:10]}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("device", DEVICES)
def test_node_case(case, device):
    expected = (XFAIL if device == "cpu" else XFAIL_CUDA).get(case.name)
    try:
        check_case(case, device)
    except Exception as e:
        RESULTS[device][case.name] = "fail"
        if expected is None:
            raise
        if expected.explains(e):
            pytest.xfail(expected.reason)
        raise AssertionError(f"{case.name} fails on {device} for a reason its expected-failure entry does not "
                             f"record (it expects {expected.exception} with {expected.match!r})") from e
    RESULTS[device][case.name] = "pass"
    if expected is not None and _draws(case):  # random ops: the stored values are one draw of many
        pytest.xfail(f"{expected.reason} (this run's draws happened to match the stored ones)")
    if expected is not None:
        pytest.fail(f"{case.name} passes on {device} now: remove it from the expected-failure file "
                    f"({expected.reason})")


RANDOM_OPS = {"Bernoulli", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial"}


def _draws(case) -> bool:
    """Whether the case's outputs are random draws (a Bernoulli of 10 values matches by chance now and then)."""
    return any(n.op_type in RANDOM_OPS for n in case.model.graph.node) or any(
        n.op_type in RANDOM_OPS for f in case.model.functions for n in f.node)


def test_an_expected_failure_must_fail_the_recorded_way(tmp_path):
    entry = XFAIL["test_bernoulli"]
    assert entry.explains(AssertionError(f"\n{entry.match.replace(' ', chr(10))}\n more"))
    assert not entry.explains(AssertionError("y: shape (3,) != expected (10,)"))
    assert not entry.explains(ValueError(entry.match))
    path = tmp_path / "x.txt"
    path.write_text(entry.line("test_bernoulli") + "\n")
    assert load_expected_failures(path) == {"test_bernoulli": entry}
    path.write_text("test_bernoulli  # a reason alone\n")
    with pytest.raises(ValueError, match="is not"):
        load_expected_failures(path)
