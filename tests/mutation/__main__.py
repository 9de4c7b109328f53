"""``python -m tests.mutation [--quick] [--only NAME ...] [--out DIR] [--jobs N]``: run the mutation
campaign of :mod:`tests.mutation.mutants` and print ``killed K of N`` with the survivors named.

The repository's files (tracked, and untracked ones git does not ignore) are copied into a temporary
folder; each mutant is applied there, its tests run (``pytest -x``, CUDA on the CPU stand-in), and the
file is restored. Each distinct test selection runs unmutated first: a mutant "killed" by tests that
fail anyway would mean nothing. Native
and emulator builds are cached in the temporary folder (their cache keys hash the source, so a
mutated kernel is compiled anew). ``--out DIR`` writes ``results.json`` and ``summary.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .mutants import MUTANTS, Mutant

ROOT = Path(__file__).resolve().parents[2]


def _copy_tree(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)


def _env(tree: Path, cache: Path) -> dict:
    env = dict(os.environ)
    env.update(PYTHONPATH=str(tree), GPUOPS_CUDA_BACKEND="gpuops.testing.cuda_standin",
               GPUOPS_NATIVE_CACHE=str(cache / "native"), GPUOPS_EMU_CACHE=str(cache / "emulator"),
               PYTHONDONTWRITEBYTECODE="1")
    return env


def _pytest(tree: Path, env: dict, args, timeout: float) -> tuple[int, float, str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *args]
    start = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        rc, out = -1, f"timed out after {timeout:.0f} s"
    return rc, time.perf_counter() - start, out


def _summary_line(out: str) -> str:
    lines = [ln for ln in out.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


def run_mutant(m: Mutant, tree: Path, env: dict, timeout: float) -> dict:
    path = tree / m.file
    text = path.read_text()
    if text.count(m.old) != 1:
        return {"name": m.name, "status": "error", "why": f"the old text occurs {text.count(m.old)} times"}
    path.write_text(text.replace(m.old, m.new))
    try:
        rc, seconds, out = _pytest(tree, env, m.tests, timeout)
    finally:
        path.write_text(text)
    # pytest: 0 all passed, 1 some failed; 2-5 interrupted, internal, usage or no tests collected
    status = {0: "survived", 1: "killed", -1: "killed (timed out)"}.get(rc, "error")
    return {"name": m.name, "file": m.file, "tests": list(m.tests), "status": status, "rc": rc,
            "seconds": round(seconds, 1), "pytest": _summary_line(out)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.mutation")
    ap.add_argument("--quick", action="store_true", help="the quick set only")
    ap.add_argument("--only", nargs="*", default=None, help="mutants by name")
    ap.add_argument("--out", type=Path, default=None, help="folder for results.json and summary.txt")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant's tests")
    ap.add_argument("--jobs", type=int, default=1, help="mutants run at once, each in its own copy")
    a = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if (not a.quick or m.quick) and (a.only is None or m.name in a.only)]
    if not chosen:
        print("no mutant chosen")
        return 2
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpuops-mutation-") as tmp:
        trees = []
        for j in range(max(1, min(a.jobs, len(chosen)))):
            tree = Path(tmp) / f"repo{j}"
            _copy_tree(tree)
            trees.append(tree)
        cache = Path(tmp) / "cache"
        selections = list(dict.fromkeys(m.tests for m in chosen))  # each distinct one, unmutated

        def unmutated(j):  # lane j of the copies: selections j, j + jobs, ...
            tree = trees[j]
            return [(sel, rc, out) for sel in selections[j::len(trees)]
                    for rc, _, out in [_pytest(tree, _env(tree, cache), sel, a.timeout)]]

        with ThreadPoolExecutor(len(trees)) as ex:
            bad = [(sel, _summary_line(out)) for lane in ex.map(unmutated, range(len(trees)))
                   for sel, rc, out in lane if rc != 0]
        print(f"unmutated: {len(selections) - len(bad)} of {len(selections)} test selections pass "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
        if bad:
            for sel, why in bad:
                print(f"  fails unmutated: {' '.join(sel)}: {why}")
            print("the unmutated tests fail: no campaign")
            return 2

        def one(i_m):
            i, m = i_m
            tree = trees[i % len(trees)]
            r = run_mutant(m, tree, _env(tree, cache), a.timeout)
            print(f"{r['status']:>18}  {m.name}  ({r.get('seconds', 0)} s)", flush=True)
            return r

        if len(trees) == 1:
            results = [one(x) for x in enumerate(chosen)]
        else:  # mutant i runs in copy i % jobs: no two at once in one copy
            with ThreadPoolExecutor(len(trees)) as ex:
                lanes = [[x for x in enumerate(chosen) if x[0] % len(trees) == j] for j in range(len(trees))]
                results = sorted((r for lane in ex.map(lambda ln: [one(x) for x in ln], lanes) for r in lane),
                                 key=lambda r: [m.name for m in chosen].index(r["name"]))
    killed = [r for r in results if r["status"].startswith("killed")]
    survived = [r["name"] for r in results if r["status"] == "survived"]
    errors = [r["name"] for r in results if r["status"] == "error"]
    total = time.perf_counter() - start
    lines = [f"killed {len(killed)} of {len(results)}",
             f"survivors: {', '.join(survived) if survived else 'none'}"]
    if errors:
        lines.append(f"errors (the mutant's tests did not run): {', '.join(errors)}")
    lines.append(f"{total:.0f} s wall, {'--quick' if a.quick else 'full set'}, jobs {a.jobs}, "
                 f"{os.cpu_count()} CPUs, Python {platform.python_version()}")
    print("\n".join(lines))
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "results.json").write_text(json.dumps(
            {"quick": a.quick, "killed": len(killed), "total": len(results), "survivors": survived,
             "errors": errors, "wall_seconds": round(total), "mutants": results}, indent=1) + "\n")
        (a.out / "summary.txt").write_text("\n".join(lines) + "\n\n" + "\n".join(
            f"{r['status']:>18}  {r['name']:45s} {r.get('seconds', 0):6} s  {r.get('pytest', r.get('why', ''))}"
            for r in results) + "\n")
    return 0 if not survived and not errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
