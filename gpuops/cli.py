"""Command line: ``gpuops run MODEL.onnx``, ``gpuops info``, ``gpuops selftest``, ``gpuops bench``,
``gpuops build-kernels``."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

from . import __version__
from .dependencies import missing_dependency, missing_optional
from .device import devices, get_device
from .errors import GpuopsError
from .models import random_feed, resolve_model_path  # resolve_model_path: the benchmarks' too


class UsageError(Exception):
    """A bad command line (exit status 2, like argparse's own errors)."""


def int_at_least(low: int):
    """An argparse type: an integer >= ``low`` (argparse turns the ValueError into a one-line usage error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value
    parse.__name__ = f"integer >= {low}"
    return parse


positive_int = int_at_least(1)


def load_input(item: str) -> tuple[str, np.ndarray]:
    """``NAME=FILE.npy`` -> (name, array); never unpickles."""
    name, sep, path = item.partition("=")
    if not sep or not name:
        raise UsageError(f"--input takes NAME=FILE.npy, got {item!r}")
    try:
        with open(path, "rb") as f:
            value = np.load(f, allow_pickle=False)
            if not isinstance(value, np.ndarray):  # an .npz archive
                raise ValueError("not a single array")
    except (OSError, ValueError, EOFError, MemoryError) as e:
        raise UsageError(f"--input {name}: cannot load {path!r} as a .npy array "
                         f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'empty'})") from None
    return name, value


def output_path(path: str | None, suffixes: tuple[str, ...], option: str) -> Path | None:
    """Check before any work that ``path`` can be written: a known suffix, an existing folder."""
    if path is None:
        return None
    p = Path(path)
    if p.suffix.lower() not in suffixes:
        raise UsageError(f"{option} {path!r}: the file name must end with {' or '.join(suffixes)}")
    if not p.parent.is_dir():
        raise UsageError(f"{option} {path!r}: the folder {str(p.parent)!r} does not exist")
    return p


def summary(value) -> str:
    """Shape, dtype, min/max/mean (and NaN count), and for a classifier's scores ([batch, classes])
    the arg max of each row."""
    arr = np.asarray(value)
    text = f"{arr.dtype}{list(arr.shape)}"
    if arr.dtype.kind not in "biuf" or arr.size == 0:
        return text
    v = arr.astype(np.float64)
    nan = np.isnan(v)
    if nan.all():
        return text + "  all NaN"
    text += f"  min {np.nanmin(v):.6g}  max {np.nanmax(v):.6g}  mean {np.nanmean(v):.6g}"
    if nan.any():
        text += f"  ({int(nan.sum())} NaN)"
    if arr.dtype.kind == "f" and arr.ndim >= 2 and arr.shape[1] > 1 and all(d == 1 for d in arr.shape[2:]):
        top = np.argmax(np.where(nan, -np.inf, v).reshape(arr.shape[0], arr.shape[1]), axis=1)
        shown = ", ".join(str(int(i)) for i in top[:8]) + (", ..." if len(top) > 8 else "")
        text += f"  argmax [{shown}]"
    return text


def cmd_run(a) -> int:
    from .onnx import InferenceSession

    out_path = output_path(a.output, (".npz",), "--output")
    given = dict(load_input(item) for item in a.input)  # bad files are refused before the model loads
    a.model = resolve_model_path(a.model)
    t0 = time.perf_counter()
    sess = InferenceSession(a.model, device=a.device, optimized_model_path=a.save_optimized, threads=a.threads)
    t_load = time.perf_counter() - t0
    rng = np.random.default_rng(a.seed)
    feeds = {arg.name: given.pop(arg.name) if arg.name in given else random_feed(arg, rng, a.batch)
             for arg in sess.get_inputs()}
    feeds.update(given)  # unknown names: let the session report them
    outs = sess.run(None, feeds)  # warm-up (and the result)
    times = []
    for _ in range(a.repeat):
        t = time.perf_counter()
        outs = sess.run(None, feeds)
        times.append(time.perf_counter() - t)
    names = [arg.name for arg in sess.get_outputs()]
    print(f"model   {a.model}")
    threads = f"   threads {sess.threads}" if sess.device.kind == "cpu" else ""
    print(f"device  {sess.device}{threads}   load {t_load * 1e3:.1f} ms")
    for arg in sess.get_inputs():
        print(f"input   {arg.name}: {feeds[arg.name].dtype}{list(feeds[arg.name].shape)}")
    for name, out in zip(names, outs):
        print(f"output  {name}: {summary(out)}")
    if times:
        print(f"latency median {np.median(times) * 1e3:.2f} ms over {len(times)} run(s) after one warm-up")
    else:
        print("latency not timed (--repeat 0: the outputs are those of the one warm-up run)")
    if out_path is not None:
        from .batch import save_npz

        save_npz(out_path, dict(zip(names, outs)))
        print(f"wrote   {out_path} ({', '.join(names)})")
    return 0


def cmd_info(a) -> int:
    from . import native

    info = {"gpuops": __version__, "numpy": np.__version__, "devices": devices(),
            "default_device": str(get_device("auto")), "native_cpu_kernels": native.status()}
    try:
        import onnx

        info["onnx"] = onnx.__version__
    except ImportError:
        pass
    if a.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"gpuops {info['gpuops']}  (numpy {info['numpy']}, onnx {info.get('onnx')})")
    print(f"default device: {info['default_device']}")
    for d in info["devices"]:
        extra = ", ".join(f"{k}={v}" for k, v in d.items() if k not in ("name", "kind"))
        print(f"  {d['name']}" + (f": {extra}" if extra else ""))
    nat = info["native_cpu_kernels"]
    print("native CPU kernels: " + ("off (GPUOPS_NATIVE=0)" if not nat["enabled"] else
                                    f"built by {nat['compiler']} at the first CPU session (or gpuops build-kernels), "
                                    f"cached in {nat['cache']}"
                                    if nat["compiler"] else "unavailable (no C compiler; NumPy code runs)"))
    return 0


def cmd_build_kernels(a) -> int:
    """Compile every native CPU kernel file (and, with --emulator, the CUDA kernel files for the CPU
    emulator) into the cache now, so that no session compiles; prints what it built and where."""
    from . import native

    failed = 0

    def report(title: str, compiler: str | None, cache, records) -> None:
        nonlocal failed
        version = native.compiler_version(compiler).splitlines()[0] if compiler else ""
        print(f"{title}: {compiler} ({version}), cache {cache}")
        for r in records:
            name = r["file"] + (f" ({r['kernels']} kernels)" if "kernels" in r else "")
            if "error" in r:
                failed += 1
                print(f"  FAILED  {name}:\n    " + r["error"].replace("\n", "\n    "))
            else:
                took = f"{r['seconds']:6.2f} s" if r["built"] else "        "
                print(f"  {'built ' if r['built'] else 'cached'}  {name:<28} {took}  {r['path']}")

    cc = native.compiler()
    if cc is None:
        print(f"native CPU kernels: {native.missing_compiler()}")
        failed += 1
    else:
        cache = native.private_cache("GPUOPS_NATIVE_CACHE", "native")
        report("native CPU kernels", cc, cache, native.build_all())
        if not native.ENABLED:
            print("  (GPUOPS_NATIVE=0 is set: sessions will not use them)")
    if a.emulator:
        from .testing import emulator

        try:
            cxx = emulator.compiler()
        except emulator.CompileError as e:
            print(f"emulated CUDA kernels: {e}")
            failed += 1
        else:
            report("emulated CUDA kernels", cxx, emulator.cache_dir(), emulator.build_kernel_files())
    return 1 if failed else 0


def cmd_selftest(a) -> int:
    from . import selftest

    model = None if a.model == "none" else a.model or (selftest.QUICK_MODEL if a.quick else selftest.DEFAULT_MODEL)
    report = selftest.run(a.device, model, rtol=a.rtol, atol=a.atol, strict=a.strict)
    print(json.dumps(report, indent=1, default=str) if a.json else selftest.format_report(report))
    return 0 if report["ok"] else 1


def cmd_batch(a) -> int:
    from .batch import Progress, check_output, model_inputs, n_rows, prepare_columns, read_table, write_table

    check_output(a.output)  # before any work: what the output needs (pyarrow...), where it goes
    if a.ray is not None:
        from .ray import import_ray

        import_ray()
    model = resolve_model_path(a.model)
    table = read_table(a.input)
    table, columns = prepare_columns(table, model_inputs(model), cast=a.cast)
    bar = Progress(n_rows(table))
    t0 = time.perf_counter()
    if a.ray is None:
        from .batch import run_table

        out = run_table(model, table, batch_size=a.batch_size, device=a.device, progress=bar,
                        input_columns=columns)
    else:
        from .ray import run_table as ray_run_table

        out = ray_run_table(model, table, batch_size=a.batch_size, device=a.device, address=a.ray or None,
                            workers=a.workers, progress=bar, input_columns=columns)
    bar.close()
    write_table(a.output, out)
    elapsed = time.perf_counter() - t0
    print(f"{n_rows(out)} rows -> {a.output} in {elapsed:.2f} s ({n_rows(out) / max(elapsed, 1e-9):,.1f} rows/s)")
    return 0


def cmd_bench(args: list[str]) -> int:
    from .bench import main as bench_main  # imported only here: the suite is not part of ``import gpuops``

    return bench_main(args)


def build_parser() -> argparse.ArgumentParser:
    """The ``gpuops`` command line (``bench`` takes its own options: :mod:`gpuops.bench.runner`)."""
    ap = argparse.ArgumentParser(prog="gpuops", description=__doc__)
    ap.add_argument("--version", action="version", version=f"gpuops {__version__}")
    ap.add_argument("-v", "--verbose", action="store_true", help="log what gpuops does (and show tracebacks)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a model (random inputs of the declared shapes unless given)")
    r.add_argument("model", help="an .onnx path, or light:NAME for a model the onnx package ships")
    r.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu, cuda or cuda:N")
    r.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="feed input NAME from a .npy file (repeat for several inputs); inputs not given get "
                        "random values of their declared shape and dtype")
    r.add_argument("--output", metavar="FILE.npz", help="save the outputs there, one array per output name")
    r.add_argument("--threads", type=positive_int, default=None,
                   help="CPU: threads of the run (default: gpuops.threads.default_threads(), the physical cores)")
    r.add_argument("--repeat", type=int_at_least(0), default=3,
                   help="timed runs after one warm-up (default 3; 0: the one untimed run only)")
    r.add_argument("--batch", type=positive_int, default=1,
                   help="size given to symbolic dimensions (such as a batch axis) of random inputs (default 1)")
    r.add_argument("--seed", type=int_at_least(0), default=0, help="seed of the random inputs (default 0)")
    r.add_argument("--save-optimized", metavar="PATH", help="write the optimized model (valid ONNX) there")
    r.set_defaults(fn=cmd_run)
    i = sub.add_parser("info", help="version and devices")
    i.add_argument("--json", action="store_true", help="print it as JSON")
    i.set_defaults(fn=cmd_info)
    t = sub.add_parser("selftest", help="check the installation: versions, every kernel family, a model on "
                       "cpu and cuda (exits 1 on any mismatch)")
    t.add_argument("--device", default="auto", help="auto, cuda, cuda:N or cpu")
    t.add_argument("--json", action="store_true", help="print the report as JSON")
    t.add_argument("--model", default=None, help="model to compare (default light:resnet50; 'none' to skip)")
    t.add_argument("--quick", action="store_true", help="a small model (light:squeezenet) instead of resnet50")
    t.add_argument("--strict", action="store_true", help="host syncs and graphs that do not capture fail too")
    t.add_argument("--rtol", type=float, default=None,
                   help="tolerance on each model output's max |diff| / max |value| (default: a float32 error "
                        "bound derived from the model)")
    t.add_argument("--atol", type=float, default=0.0, help="absolute slack added to the model tolerance")
    t.set_defaults(fn=cmd_selftest)
    b = sub.add_parser("batch", help="run every row of a table (Parquet, .npy/.npz file or folder) through a model")
    b.add_argument("model", help="an .onnx path, or light:NAME")
    b.add_argument("--input", required=True,
                   help="a .parquet file; an .npz file (one column per array); an .npy file (one column, named "
                        "after the file; it feeds a model of one input whatever its name); or a folder of .npy "
                        "columns / .npz shards. The first axis of every column is the row")
    b.add_argument("--output", required=True,
                   help="a .parquet file, an .npz file, or a folder (one .npy per column): the input's columns "
                        "and one per model output")
    b.add_argument("--cast", action="store_true",
                   help="convert a column of another width of the same kind (float64, int32...) to the model "
                        "input's dtype; without it such a column is refused, as gpuops run refuses it")
    b.add_argument("--batch-size", type=positive_int, default=64, help="rows per run (default 64)")
    b.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu, cuda or cuda:N")
    b.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run on Ray actors, one per GPU: a local Ray, or the cluster at ADDRESS")
    b.add_argument("--workers", type=positive_int, default=None, help="Ray actors (default: one per GPU, or 1)")
    b.set_defaults(fn=cmd_batch)
    k = sub.add_parser("build-kernels", help="compile the native CPU kernels (and, with --emulator, the CUDA "
                       "kernels for the CPU emulator) into the cache ahead of time")
    k.add_argument("--emulator", action="store_true", help="also the CUDA kernels, for the CPU emulator (g++)")
    k.set_defaults(fn=cmd_build_kernels)
    sub.add_parser("bench", help="benchmark suite: gpuops bench --help", add_help=False)
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # its options belong to the benchmark runner
        return guarded(lambda: cmd_bench(argv[1:]), verbose=False)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose or a.cmd == "run" else logging.WARNING,
                        format="%(message)s")
    return guarded(lambda: a.fn(a), verbose=a.verbose)


def guarded(fn, verbose: bool) -> int:
    """Run a command; what goes wrong is one line on stderr, never a traceback (but with --verbose, for
    a failure gpuops did not expect)."""
    try:
        return fn()
    except GpuopsError as e:
        print(f"gpuops: error: {e}", file=sys.stderr)
        return 1
    except UsageError as e:
        print(f"gpuops: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpuops: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - a bug in gpuops: one line, the traceback on request
        # a runtime or optional dependency missing: say which, and how to install it
        message = (missing_dependency(e.name or "") or missing_optional(e.name or "")
                   if isinstance(e, ModuleNotFoundError) else None)
        if message is not None:
            print(f"gpuops: error: {message} ({e})", file=sys.stderr)
            return 1
        if verbose:
            raise
        first = str(e).splitlines()[0] if str(e) else ""
        print(f"gpuops: internal error: {type(e).__name__}: {first[:300]} (rerun with -v for the traceback, "
              f"and please report it)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
