"""Building the native kernels (gpuops/native.py): the compile-and-cache routine the CUDA emulator
shares (private folder, sha256 checked at load, atomic publication, timeout, errors that carry the
command and stderr), compilation before any run (prepare, `gpuops build-kernels`), and the NumPy
fallback with one accurate warning when there is no compiler or a build fails."""

import ctypes
import os
import stat
import subprocess
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import array_api_compat.numpy as xp
import numpy as np
import pytest

from gpuops import cli, native
from gpuops.ops.cpu import pool, softmax

needs_cc = pytest.mark.skipif(native.compiler() is None, reason="no C compiler: native kernels fall back to NumPy")
ANNOUNCE = "gpuops: compiling native CPU kernels"


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A process state where nothing is loaded, warned or announced yet, and an empty cache folder."""
    for name, value in (("_loaded", {}), ("_functions", {}), ("_failures", {}), ("_warned", set()),
                        ("_announced", False), ("_pool", None)):
        monkeypatch.setattr(native, name, value)
    cache = tmp_path / "cache"
    monkeypatch.setenv("GPUOPS_NATIVE_CACHE", str(cache))
    return cache


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _maxpool(X):
    return pool.MaxPool(xp, X, kernel_shape=[3, 3], pads=[1, 1, 1, 1])


X = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)


# -- no compiler, a failing compiler: NumPy, one warning that says why ------------------------------

@pytest.mark.parametrize("cc_set", [True, False])
def test_missing_compiler_falls_back_to_numpy_with_one_accurate_warning(fresh, monkeypatch, tmp_path, cc_set):
    if cc_set:
        monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
        says = f"CC='{tmp_path / 'no-such-cc'}' is not an executable"
    else:
        monkeypatch.delenv("CC", raising=False)
        monkeypatch.setenv("PATH", str(tmp_path))  # no cc on it
        says = "'cc' is not on PATH"
    with pytest.warns(RuntimeWarning, match="no C compiler") as got:
        y = _maxpool(X)
    assert len(got) == 1 and says in str(got[0].message)
    assert ("set CC" in str(got[0].message)) == (not cc_set)  # no advice to set what is set
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per process, whatever else is asked for
        assert native.prepare() == {f: "unavailable" for f in native.FILES}
        y2 = _maxpool(X)
        softmax.Softmax(xp, X, axis=-1)
    with native.disabled():
        ref = _maxpool(X)
    np.testing.assert_array_equal(y, ref)
    np.testing.assert_array_equal(y2, ref)
    assert native.status()["files"]["pool.c"] == "unavailable"
    assert "no C compiler" in native.status()["failures"]["pool.c"]


def test_compile_error_carries_the_command_and_stderr(fresh, monkeypatch, tmp_path):
    cc = _script(tmp_path / "badcc", "echo 'error: this compiler refuses everything' >&2\nexit 1\n")
    monkeypatch.setenv("CC", cc)
    with pytest.raises(native.BuildError) as e:
        native.build(native.native_build("rows.c"), native.private_cache("GPUOPS_NATIVE_CACHE", "native"))
    assert e.value.command[0] == cc and "rows.c" in e.value.command and "-march=native" in e.value.command
    assert "refuses everything" in e.value.stderr and e.value.returncode == 1
    message = str(e.value)
    assert "failed (exit status 1) on rows.c" in message and "-O3 -march=native" in message
    assert "refuses everything" in message
    with pytest.warns(RuntimeWarning, match="refuses everything"):
        assert native.function("depthwise_conv2d_f32") is None
    assert list(fresh.iterdir()) == []  # nothing half-built left behind


def test_a_hung_compiler_is_given_up_on(fresh, monkeypatch, tmp_path):
    monkeypatch.setattr(native, "COMPILE_SECONDS", 1)
    # answers --version, then hangs in a child process (as a driver's cc1 would): all of it is killed
    cc = _script(tmp_path / "slowcc", 'case "$1" in --version) echo slowcc 1.0;; *) sleep 30 & wait;; esac\n')
    monkeypatch.setenv("CC", cc)
    t = __import__("time").perf_counter()
    with pytest.warns(RuntimeWarning, match=r"timed out after 1 s \(first for cpu_kernels/conv.c\)"):
        assert native.function("depthwise_conv2d_f32") is None
    assert __import__("time").perf_counter() - t < 15


# -- the cache --------------------------------------------------------------------------------------

@needs_cc
def test_compiled_once_into_a_private_cache_and_shared_by_threads(fresh):
    got, barrier = [], threading.Barrier(4)

    def first_use():
        barrier.wait()
        got.append(native.function("pool2d_f32"))

    threads = [threading.Thread(target=first_use) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4 and all(isinstance(f, ctypes._CFuncPtr) for f in got) and len({id(f) for f in got}) == 1
    files = sorted(p.name for p in fresh.iterdir())  # pool.c's, and the thread pool's that it binds
    assert len(files) == 4 and files[0].startswith("pool-") and files[1] == files[0] + ".sha256"
    assert files[2].startswith("threads-") and files[3] == files[2] + ".sha256"
    assert fresh.stat().st_mode & 0o077 == 0
    for so in (fresh / files[0], fresh / files[2]):
        assert so.stat().st_mode & 0o022 == 0 and native.intact(so)
    assert native.status()["files"] == {"pool.c": "compiled", "threads.c": "compiled"}


@needs_cc
@pytest.mark.parametrize("damage", ["truncated", "corrupted", "digest missing", "replaced"])
def test_a_damaged_library_is_rebuilt_not_loaded(fresh, damage):
    """In a new process (a library loaded once stays loaded): a cached library whose bytes no longer
    match its sha256 is compiled again, and the kernels work."""
    so, built = native.build(native.native_build("rows.c"), native.private_cache("GPUOPS_NATIVE_CACHE", "native"))
    assert built and native.intact(so)
    data = so.read_bytes()
    if damage == "truncated":
        so.write_bytes(data[: len(data) // 3])
    elif damage == "corrupted":  # same size, the code section scribbled over: loading it would crash
        so.write_bytes(data[:64] + b"\xcc" * (len(data) - 128) + data[-64:])
    elif damage == "digest missing":
        Path(str(so) + ".sha256").unlink()
    else:  # another file renamed over it
        other, _ = native.build(native.native_build("special.c"), so.parent)
        os.replace(other, so)
    assert not native.intact(so)
    code = ("import numpy as np, array_api_compat.numpy as xp\n"
            "from gpuops import native\nfrom gpuops.ops.cpu import softmax\n"
            "assert native.prepare(['rows.c']) == {'rows.c': 'compiled'}\n"
            "x = np.arange(12, dtype=np.float32).reshape(3, 4)\n"
            "y = softmax.Softmax(xp, x, axis=-1)\n"
            "e = np.exp(x - x.max(1, keepdims=True)); assert np.allclose(y, e / e.sum(1, keepdims=True))\n")
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert ANNOUNCE in r.stderr  # compiled again
    assert native.intact(so) and so.read_bytes() == data


@needs_cc
def test_a_cache_folder_others_can_write_is_not_used(fresh, monkeypatch, tmp_path):
    """A folder others can write into is refused (a library found there would be loaded): the kernels
    are compiled into a temporary private folder for this process, with one warning saying why."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("GPUOPS_NATIVE_CACHE", str(shared))
    with pytest.warns(RuntimeWarning, match="writable by its group or by others") as got:
        assert native.function("pool2d_f32") is not None
    assert len(got) == 1
    assert list(shared.iterdir()) == []
    where = native.private_cache("GPUOPS_NATIVE_CACHE", "native")
    assert where != shared and str(where) in str(got[0].message) and native.unfit(where) is None
    assert any(p.name.startswith("pool-") for p in where.iterdir())


@needs_cc
def test_a_sticky_shared_folder_gets_a_private_subfolder(fresh, monkeypatch, tmp_path):
    """A folder like /tmp (others write in it, but cannot touch what is not theirs) holds a private
    gpuops-<uid> folder: no warning, and it is kept across processes."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    monkeypatch.setenv("GPUOPS_NATIVE_CACHE", str(tmp))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert native.function("row_mean_f32") is not None
    own = tmp / f"gpuops-{os.getuid()}"
    assert native.private_cache("GPUOPS_NATIVE_CACHE", "native") == own
    assert stat.S_IMODE(own.stat().st_mode) == 0o700 and any(p.name.startswith("rows-") for p in own.iterdir())


def test_unfit_folders(tmp_path, monkeypatch):
    mine = tmp_path / "mine"
    assert native.unfit(mine) is None and stat.S_IMODE(mine.stat().st_mode) == 0o700  # made private
    group = tmp_path / "group"
    group.mkdir(mode=0o775)
    group.chmod(0o775)
    assert "writable by its group" in native.unfit(group)
    afile = tmp_path / "file"
    afile.write_text("")
    assert native.unfit(afile) is not None
    if os.getuid() == 0:  # a folder another user made (a root-made /tmp folder, seen by a user)
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o755)
        os.chown(theirs, 65534, 65534)
        assert "owned by another user" in native.unfit(theirs)

    class NoExec:
        f_flag = os.ST_NOEXEC

    monkeypatch.setattr(native.os, "statvfs", lambda d: NoExec())
    assert "noexec" in native.unfit(tmp_path / "noexec")


# -- compiled before any run ------------------------------------------------------------------------

@needs_cc
def test_prepare_compiles_everything_once_with_one_line(fresh, monkeypatch, capfd):
    assert native.prepare() == {f: "compiled" for f in native.FILES}
    err = capfd.readouterr().err
    assert err.count(ANNOUNCE) == 1
    assert f"{ANNOUNCE} (once, cached in {fresh})" in err
    assert sorted(p.name.split("-")[0] for p in fresh.glob("*.so")) == sorted(Path(f).stem for f in native.FILES)

    def no_build(*args, **kwargs):
        raise AssertionError("a kernel was compiled after prepare()")

    monkeypatch.setattr(native, "build", no_build)  # the runs after it compile nothing
    softmax.Softmax(xp, X, axis=-1)
    _maxpool(X)
    assert native.prepare() == {f: "compiled" for f in native.FILES}
    assert capfd.readouterr().err == ""


@needs_cc
def test_a_warm_cache_costs_next_to_nothing(fresh):
    native.prepare()
    code = ("import time; from gpuops import native; t = time.perf_counter(); s = native.prepare(); "
            "print(time.perf_counter() - t, set(s.values()))")
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    seconds, states = r.stdout.split(maxsplit=1)
    assert states.strip() == "{'compiled'}" and ANNOUNCE not in r.stderr
    assert float(seconds) < 0.25, seconds  # measured: ~15 ms (a --version call, hashes, dlopen)


@needs_cc
def test_build_kernels_command(fresh, capsys):
    assert cli.main(["build-kernels"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"native CPU kernels: {native.compiler()} (") and f"cache {fresh}" in out
    for f in native.FILES:
        line = next(line for line in out.splitlines() if f" {f} " in line)
        assert line.split()[0] == "built" and str(fresh / Path(f).stem) in line
    assert cli.main(["build-kernels"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["cached"] * len(native.FILES)


def test_build_kernels_without_a_compiler(fresh, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    assert cli.main(["build-kernels"]) == 1
    assert "no C compiler: CC=" in capsys.readouterr().out


@needs_cc
def test_no_helper_is_left_uninlined_by_mismatched_options(tmp_path):
    """gcc inlines no function into one whose optimize or target options differ from its own: a
    ``#pragma GCC optimize`` placed after a header's helpers left vmath.h's vector helpers (vload,
    vselect, vexp_neg) as calls in special.c, and QuickGelu took 1.3-1.4x as long. Each kernel file, built
    with its flags and -Winline, has no such failed inlining (the compiler's own size limits may stay)."""
    if "clang" in native.compiler_version(native.compiler()):
        pytest.skip("clang: its -Winline reports nothing")

    def failures(file):
        b = native.native_build(file)
        cmd = [b.compiler, *(f"-I{d}" for d in b.includes), *b.flags, "-Winline", "-c", "-o",
               str(tmp_path / (b.stem + ".o")), str(native.KERNEL_DIR / file)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=native.COMPILE_SECONDS)
        assert r.returncode == 0, r.stderr
        return [line for line in r.stderr.splitlines() if "inlining failed" in line and "mismatch" in line]

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        found = dict(zip(native.FILES, pool.map(failures, native.FILES)))
    assert not any(found.values()), {f: lines for f, lines in found.items() if lines}


def test_optimize_pragmas_come_before_the_includes():
    """A ``#pragma GCC optimize`` applies to the functions defined after it: placed after the includes,
    the headers' helpers keep other options (not inlined where those differ, as special.c's were; not
    contracted, as direct_conv.c's multiply-adds were)."""
    late = []
    for path in sorted(native.KERNEL_DIR.glob("*.c")):
        lines = path.read_text().splitlines()
        pragmas = [i for i, line in enumerate(lines) if line.startswith("#pragma GCC optimize")]
        includes = [i for i, line in enumerate(lines) if line.startswith("#include")]
        if pragmas and includes and max(pragmas) > min(includes):
            late.append(path.name)
    assert not late, late
