"""benchmarks/corpus/fetch.py without the network: ``--check`` passes on the vendored files and fails on a
fetched file whose sha256 is not the manifest's; a file with the pinned sha256 is not fetched again."""

import importlib.util

from gpuops.bench.corpus import MANIFEST, load_manifest

spec = importlib.util.spec_from_file_location("corpus_fetch", MANIFEST.parent / "fetch.py")
fetch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fetch)


def test_check_and_present(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPUOPS_CORPUS_DIR", str(tmp_path))
    entries = load_manifest()
    assert fetch.main(["--check"]) == 0  # vendored files match; fetched ones are absent, which is allowed
    fetched = next(e for e in entries if not e["vendored"])
    (tmp_path / fetched["file"]).write_bytes(b"not the model")
    assert fetch.main(["--check"]) == 1
    assert "SHA256 MISMATCH" in capsys.readouterr().out
    vendored = next(e for e in entries if e["vendored"])
    pinned = {**vendored, "vendored": False}  # a cached copy with the pinned sha256: nothing to download
    (tmp_path / pinned["file"]).write_bytes((fetch.model_path(vendored)).read_bytes())
    assert fetch.fetch(pinned, tmp_path / "work") == "present"
