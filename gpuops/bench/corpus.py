"""The corpus of real models: ``gpuops bench --corpus [--threads N] [--models a,b] [--out DIR]``.

The corpus is listed in the repository's ``benchmarks/corpus/manifest.json``: trained models that ship
inside PyPI packages and models written by real exporters and converters (torch's TorchScript and
dynamo exporters, skl2onnx). Each entry names its file, where it comes from, its licence, its sha256 and
how to make its feeds. Files of at most ~2 MB whose licence allows it are vendored in
``tests/corpus/models/``; the others are fetched into :func:`cache_dir` by ``python
benchmarks/corpus/fetch.py`` (a model whose file is absent is skipped, and said so).

The bench runs every model present through gpuops (``device="cpu"``, default options) and onnxruntime's
CPU provider in one process, their timed runs alternating (:func:`gpuops.bench.cpu_peers.alternate`), at
the same thread count, 1 and 2 unless ``--threads`` is given; it reports ``gpuops / onnxruntime`` per
model and the geomean, with the machine (:mod:`gpuops.bench.machine`: CPU model, vector extensions, BLAS
core type, threads) and the load average before and after, so that a number can be reproduced. At 1 thread both runtimes run on the calling thread, so
the ratio of their thread CPU times (``cpu_ratio``) is also reported: it moves less with other
processes' load than the wall-clock ratio. A model gpuops cannot run with its default options is reported with the
error, and timed with ``optimize="none"`` as well (marked; not in the geomean). Outputs agree when their
largest difference is within ``--atol + --rtol * max |onnxruntime's|`` or within the float32 error bound
derived from the model's sums (:mod:`gpuops.bench.tolerance`, the corpus tests' bound), whichever is
larger; the bench exits 1 when some model's do not.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "benchmarks" / "corpus" / "manifest.json"
VENDORED = ROOT / "tests" / "corpus" / "models"
CACHE_ENV = "GPUOPS_CORPUS_DIR"
FETCH_COMMAND = "python benchmarks/corpus/fetch.py"


def cache_dir() -> Path:
    """Where fetched corpus models live: ``$GPUOPS_CORPUS_DIR``, else ``~/.cache/gpuops/corpus``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "gpuops" / "corpus")


def load_manifest(path: Path = MANIFEST) -> list[dict]:
    """The manifest's model entries (a checkout of the repository is needed: the corpus is not installed
    with gpuops)."""
    return json.loads(Path(path).read_text())["models"]


def model_path(entry: dict) -> Path:
    """Where ``entry``'s file is (vendored) or goes (fetched); it may not exist."""
    return (VENDORED if entry["vendored"] else cache_dir()) / entry["file"]


def _page(shape, rng) -> np.ndarray:
    """A synthetic text page for OCR models: dark bars (lines of "text", broken into "words") on a light
    background with a little noise, normalised to [-1, 1] as the PaddleOCR pipelines do."""
    n, c, h, w = shape
    img = np.full(shape, 0.92, np.float32)
    line = max(4, h // 6)
    for b in range(n):
        for top in range(line // 2, h - line, 2 * line):
            x = int(rng.integers(0, max(1, w // 8)))
            while x < w:
                word = int(rng.integers(w // 16 + 1, w // 4 + 2))
                img[b, :, top:top + line, x:x + word] = rng.uniform(0.05, 0.3)
                x += word + int(rng.integers(2, max(3, w // 20)))
    img += rng.normal(0, 0.02, shape).astype(np.float32)
    return ((np.clip(img, 0, 1) - 0.5) / 0.5).astype(np.float32)


def make_feeds(spec: dict, rng: np.random.Generator) -> dict:
    """Feeds from a manifest ``feeds`` spec: ``{input: {"dtype", "shape", "dist", ...}}`` with ``dist`` one
    of ``normal`` (``scale``), ``uniform`` / ``integers`` (``low``, ``high``; ``high`` excluded for
    integers), ``value`` (``value``: a scalar or nested list), ``zeros``, ``mask`` (ones; row ``b`` has its
    last ``b`` positions zero: padded sequences) and ``page`` (:func:`_page`)."""
    out = {}
    for name, s in spec.items():
        dtype, shape, dist = np.dtype(s["dtype"]), tuple(s.get("shape", ())), s["dist"]
        if dist == "normal":
            v = rng.standard_normal(shape) * s.get("scale", 1.0)
        elif dist == "uniform":
            v = rng.uniform(s["low"], s["high"], shape)
        elif dist == "integers":
            v = rng.integers(s["low"], s["high"], shape)
        elif dist == "value":
            v = np.asarray(s["value"])
        elif dist == "zeros":
            v = np.zeros(shape)
        elif dist == "mask":
            v = np.ones(shape)
            for b in range(1, shape[0]):
                v[b, shape[1] - min(b, shape[1] - 1):] = 0
        elif dist == "page":
            v = _page(shape, rng)
        else:
            raise ValueError(f"input {name!r}: unknown feed distribution {dist!r}")
        out[name] = np.asarray(v).astype(dtype)
    return out


def _loadavg() -> list[float] | None:
    """The 1, 5 and 15 minute load averages: other processes' load moves wall-clock ratios."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def bench_entry(entry: dict, threads: int, a, derived: dict | None = None) -> dict:
    """One model at one thread count: gpuops (default options; ``optimize="none"`` as well when those
    fail) against onnxruntime, runs alternating. ``derived``: the models' error bounds by name
    (:func:`derived_bounds`), kept across thread counts: the same model and feeds give the same bounds."""
    import gpuops

    from .cpu_peers import alternate, ort_reference, ort_session, outputs_agree

    path = model_path(entry)
    feeds = make_feeds(entry["feeds"], np.random.default_rng(0))
    rec = {"model": entry["name"], "kind": entry["kind"], "threads": threads}
    model = _load(path)
    ort = ort_session(model, threads)
    want = ort_reference(model, ort)(feeds)
    derived = {} if derived is None else derived
    if entry["name"] not in derived:
        derived[entry["name"]] = derived_bounds(model, feeds)
    bounds, rec["bounds"] = derived[entry["name"]]
    for optimize in ("all", "none"):
        try:
            sess = gpuops.InferenceSession(str(path), device="cpu", threads=threads, optimize=optimize)
            got = sess.run(None, feeds)
        except gpuops.GpuopsError as e:
            rec.setdefault("error", f"optimize={optimize!r}: {type(e).__name__}: {e}"[:400])
            continue
        t = alternate({"gpuops": lambda f: sess.run(None, f), "onnxruntime": ort}, feeds, a.warmup, a.repeat,
                      a.budget, threads)
        agree, diff = outputs_agree(got, want, a.rtol, a.atol, bounds)
        rec.update(optimize=optimize, gpuops=t["gpuops"], onnxruntime=t["onnxruntime"], agree=agree,
                   max_abs_diff=diff, ratio=t["gpuops"]["median_ms"] / t["onnxruntime"]["median_ms"])
        if threads == 1:  # both run on the calling thread: their CPU times are what a run costs, load aside
            rec["cpu_ratio"] = t["gpuops"]["cpu_median_ms"] / max(t["onnxruntime"]["cpu_median_ms"], 1e-9)
        break
    return rec


def derived_bounds(model, feeds: dict) -> tuple[list | None, dict | str]:
    """(per output, the float32 error bound two implementations of ``model`` may differ by on these feeds,
    None for a non-float output; how each was set), by :mod:`.tolerance`, the corpus tests' bound:
    quantized models round values to 8 bits (one near a tie may go either way in two correct runtimes),
    and onnxruntime's DynamicQuantizeLSTM rounds its activations at every step where gpuops keeps them
    in float, both by more than a fixed relative tolerance allows. (None, the reason) where the model
    cannot be analysed (a loop body, say)."""
    from .tolerance import tolerances

    try:
        tol = tolerances(model, feeds)
    except Exception as e:  # the fixed --rtol/--atol then decide alone
        return None, f"none derived ({type(e).__name__}: {e})"[:300]
    return ([tol[o.name][0] if o.name in tol else None for o in model.graph.output],
            {name: how for name, (_, how) in tol.items()})


def _load(path: Path):
    import onnx

    return onnx.load(str(path))


def run(a, environment) -> int:
    """The ``--corpus`` entry of ``gpuops bench``: writes ``corpus.json`` and ``corpus.md`` under ``--out``."""
    if not MANIFEST.exists():
        print(f"gpuops bench --corpus: no {MANIFEST}: the corpus is part of the repository, not of an installed "
              "gpuops; run it from a checkout")
        return 2
    names = [n for n in a.models.split(",") if n]
    entries = [e for e in load_manifest() if not names or e["name"] in names]
    unknown = set(names) - {e["name"] for e in entries}
    if unknown:
        print(f"gpuops bench --corpus: not in the corpus: {', '.join(sorted(unknown))}")
        return 2
    present = [e for e in entries if model_path(e).exists()]
    absent = [e["name"] for e in entries if not model_path(e).exists()]
    if absent:
        print(f"gpuops bench --corpus: {len(absent)} model(s) not fetched ({FETCH_COMMAND}): {', '.join(absent)}")
    thread_counts = [a.threads] if a.threads else [1, 2]
    load = {"before": _loadavg()}
    runs, derived = [], {}
    for threads in thread_counts:
        for e in present:
            try:
                runs.append(bench_entry(e, threads, a, derived))
            except Exception as err:  # onnxruntime refusing a model is reported, not fatal
                runs.append({"model": e["name"], "kind": e["kind"], "threads": threads,
                             "error": f"{type(err).__name__}: {err}"[:400]})
            r = runs[-1]
            print(f"{r['model']:>36} {threads} thread(s): "
                  + (f"{r['ratio']:.2f}x" + (" (optimize='none')" if r["optimize"] == "none" else "")
                     if "ratio" in r else r["error"][:120]), flush=True)
    load["after"] = _loadavg()
    geomean = {t: _geomean(r["ratio"] for r in runs if r["threads"] == t and r.get("optimize") == "all")
               for t in thread_counts}
    cpu_geomean = _geomean(r["cpu_ratio"] for r in runs if "cpu_ratio" in r and r["optimize"] == "all")
    result = {"env": {**environment("cpu"), "load_average": load}, "settings": vars(a),
              "absent": absent, "runs": runs, "geomean": geomean, "cpu_time_geomean_1_thread": cpu_geomean}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "corpus.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "corpus.md").write_text(markdown(result))
    print(markdown(result))
    print(f"wrote {out / 'corpus.json'}, {out / 'corpus.md'}")
    return 0 if all(r.get("agree") for r in runs) else 1


def markdown(result: dict) -> str:
    from .machine import one_line

    env = result["env"]
    lines = [f"gpuops / onnxruntime on the corpus (CPU, runs alternating, in blocks above one thread, equal "
             f"threads) — {env['date']}", "",
             f"- {one_line(env['machine'])}",
             f"- commit {env.get('git_commit')}, onnxruntime {env.get('onnxruntime')}; load average (1, 5, 15 min) "
             f"{env['load_average']['before']} before, {env['load_average']['after']} after", "",
             "| model | kind | threads | gpuops ms | onnxruntime ms | gpuops / onnxruntime | CPU time ratio "
             "| outputs agree |", "|---|---|---|---|---|---|---|---|"]
    for r in result["runs"]:
        if "ratio" not in r:
            lines.append(f"| {r['model']} | {r['kind']} | {r['threads']} | error: {r['error'][:100]} | | | | |")
            continue
        mark = f" (optimize='none'; the default fails: {r['error'].split(': ', 1)[1][:90]})" if r["optimize"] == "none" else ""
        lines.append(f"| {r['model']}{mark} | {r['kind']} | {r['threads']} | {r['gpuops']['median_ms']:.3f} | "
                     f"{r['onnxruntime']['median_ms']:.3f} | {r['ratio']:.2f}x | "
                     + (f"{r['cpu_ratio']:.2f}x | " if "cpu_ratio" in r else "– | ") +
                     f"{'yes' if r['agree'] else 'NO'} ({r['max_abs_diff']:.1e}) |")
    lines += ["", "- outputs agree: max |gpuops - onnxruntime| (in brackets) within atol + rtol max |onnxruntime| "
              f"({result['settings'].get('atol')}, {result['settings'].get('rtol')}) or the model's derived float32 "
              "error bound (gpuops/bench/tolerance.py; `bounds` in corpus.json), whichever is larger"]
    for t, g in result["geomean"].items():
        lines.append(f"- geomean at {t} thread(s), default options: " + (f"{g:.2f}x" if g else "–"))
    if result["cpu_time_geomean_1_thread"]:
        lines.append(f"- geomean of the CPU time ratios at 1 thread (the calling thread's CPU time; less "
                     f"sensitive to other processes' load): {result['cpu_time_geomean_1_thread']:.2f}x")
    if result["absent"]:
        lines.append(f"- not fetched ({FETCH_COMMAND}): {', '.join(result['absent'])}")
    return "\n".join(lines) + "\n"
