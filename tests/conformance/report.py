"""Run the onnx node conformance cases outside pytest and report, per case, pass or why it fails.

    python -m tests.conformance.report -k conv            # cases whose name contains "conv"
    python -m tests.conformance.report --summary          # failure reasons grouped, pass count
    python -m tests.conformance.report --write-expected   # rewrite expected_failures.txt
"""

from __future__ import annotations

import argparse
import collections
import warnings
from pathlib import Path

from .harness import ExpectedFailure, check_case, load_expected_failures

EXPECTED = Path(__file__).with_name("expected_failures.txt")


def reason_for(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return f"{type(e).__name__}: {msg}"[:160]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", action="append", default=[], help="substring of case names (repeatable)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--write-expected", action="store_true")
    ap.add_argument("-q", action="store_true", help="print failures only")
    a = ap.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        cases = sorted(collect_testcases(), key=lambda c: c.name)
    if a.k:
        cases = [c for c in cases if any(k in c.name for k in a.k)]
    old = load_expected_failures(EXPECTED)
    fails: dict[str, str] = {}
    errors: dict[str, BaseException] = {}
    for c in cases:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                check_case(c, a.device)
        except Exception as e:  # noqa: BLE001 - a report of every failure
            fails[c.name] = reason_for(e)
            errors[c.name] = e
            if not a.summary:
                print(f"FAIL {c.name}: {fails[c.name]}")
        else:
            if not a.summary and not a.q:
                print(f"pass {c.name}")
    if a.summary:
        by = collections.Counter(r.split(":")[0] + ":" + r.split(":")[1][:70] for r in fails.values())
        for r, n in by.most_common():
            print(f"{n:5d}  {r}")
    print(f"{len(cases) - len(fails)} passed, {len(fails)} failed")
    if a.write_expected:
        ran = {c.name for c in cases}
        # curated entries survive while they still explain the failure; new failures get the
        # exception's first words as their reason, to be replaced by a real one
        keep = {k: v for k, v in old.items() if (k in fails and v.explains(errors[k])) or k not in ran}
        keep.update({k: ExpectedFailure.of(errors[k], v) for k, v in fails.items() if k not in keep})
        lines = [keep[k].line(k) for k in sorted(keep)]
        head = ('# onnx node cases gpuops does not pass yet, one per line: '
                'name  # ExceptionType "text in its message" -- ')
        EXPECTED.write_text(head + "reason\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
