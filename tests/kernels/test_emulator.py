"""The CPU emulator of the CUDA execution model itself: barriers, shared memory, atomics, built-in
indices, launch checks and the compile cache (kernels in emulator_probe.cu)."""

import os
from pathlib import Path

import numpy as np
import pytest

from gpuops import native
from gpuops.testing import emulator

pytestmark = pytest.mark.skipif(not emulator.available(), reason="no C++ compiler (g++) for the CUDA emulator")

PROBE = (Path(__file__).parent / "emulator_probe.cu").read_text()
EXPRS = ["rotate_through_shared<64>", "rotate_without_barrier<64>", "block_sum<128>", "coordinates",
         "divergent_barrier", "barrier_votes"]


@pytest.fixture(scope="module")
def mod():
    return emulator.RawModule(code=PROBE, options=("-std=c++17",), name_expressions=EXPRS)


def test_syncthreads_is_a_real_barrier(mod):
    x = np.arange(5 * 64, dtype=np.int32)
    want = np.roll(x.reshape(5, 64), -1, axis=1).ravel()
    y = np.zeros_like(x)
    mod.get_function("rotate_through_shared<64>")((5,), (64,), (x, y))
    np.testing.assert_array_equal(y, want)
    # Without the barrier a thread reads its neighbour's slot before the neighbour wrote it:
    # the emulator does not run a block's threads to completion one by one by accident.
    y[:] = 0
    mod.get_function("rotate_without_barrier<64>")((5,), (64,), (x, y))
    assert not np.array_equal(y, want)


def test_shared_memory_is_per_block_and_atomics_add_up(mod):
    rng = np.random.default_rng(0)
    n = 1000  # not a multiple of the block size
    a = rng.integers(-50, 50, n).astype(np.float32)  # integers: float sums are exact in any order
    out = np.zeros(8, np.float32)
    total = np.zeros(1, np.float32)
    hits = np.zeros(1, np.uint64)
    mod.get_function("block_sum<128>")((8,), (128,), (a, out, total, hits, np.int32(n)))
    np.testing.assert_array_equal(out, np.add.reduceat(np.pad(a, (0, 24)), np.arange(0, 1024, 128)))
    assert total[0] == a.sum() and hits[0] == n


def test_builtin_indices_cover_3d_grids_and_blocks(mod):
    grid, block = (2, 3, 4), (3, 2, 2)
    out = np.full(6 * 24 * 12, -1, np.int32)
    mod.get_function("coordinates")(grid, block, (out,))
    got = {tuple(r) for r in out.reshape(-1, 6)}
    want = {(bx, by, bz, tx, ty, tz) for bx in range(2) for by in range(3) for bz in range(4)
            for tx in range(3) for ty in range(2) for tz in range(2)}
    assert got == want


def test_divergent_barrier_is_reported(mod):
    with pytest.raises(emulator.LaunchError, match="divergent __syncthreads"):
        mod.get_function("divergent_barrier")((1,), (32,), (np.zeros(32, np.int32),))


def test_barrier_votes(mod):
    pred = (np.arange(32) % 3 == 0).astype(np.int32)
    out = np.zeros(2, np.int32)
    mod.get_function("barrier_votes")((1,), (32,), (pred, out))
    assert list(out) == [pred.sum(), 1]


def test_arguments_are_checked_against_the_kernel_signature(mod):
    f = mod.get_function("rotate_through_shared<64>")
    x = np.zeros(64, np.int32)
    assert [repr(p) for p in f.params] == ["const int32*", "int32*"]
    with pytest.raises(emulator.LaunchError, match="dtype int64"):
        f((1,), (64,), (x, np.zeros(64, np.int64)))
    with pytest.raises(emulator.LaunchError, match="takes 2 arguments"):
        f((1,), (64,), (x,))
    with pytest.raises(emulator.LaunchError, match="not C-contiguous"):
        f((1,), (64,), (x, np.zeros(128, np.int32)[::2]))
    readonly = np.zeros(64, np.int32)
    readonly.flags.writeable = False
    with pytest.raises(emulator.LaunchError, match="read-only"):
        f((1,), (64,), (x, readonly))
    g = mod.get_function("block_sum<128>")
    args = (np.zeros(4, np.float32), np.zeros(1, np.float32), np.zeros(1, np.float32), np.zeros(1, np.uint64))
    with pytest.raises(emulator.LaunchError, match="int64"):  # a Python int travels as int64, as in CuPy
        g((1,), (128,), (*args, 4))


def test_launch_configuration_is_checked(mod):
    f = mod.get_function("rotate_through_shared<64>")
    x = np.zeros(64, np.int32)
    with pytest.raises(emulator.LaunchError, match="invalid configuration"):
        f((1,), (2048,), (x, x.copy()))
    with pytest.raises(emulator.LaunchError, match="invalid configuration"):
        f((0,), (64,), (x, x.copy()))
    with pytest.raises(emulator.LaunchError, match="dynamic shared memory"):
        f((1,), (64,), (x, x.copy()), shared_mem=256)


def test_extern_c_kernels_and_raw_kernel():
    code = ('extern "C" __global__ void twice(const float* x, float* y, int n) {\n'
            '    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)\n'
            '        y[i] = 2 * x[i];\n}\n')
    x = np.arange(37, dtype=np.float32)
    y = np.zeros_like(x)
    emulator.RawKernel(code, "twice")((3,), (8,), (x, y, np.int32(37)))
    np.testing.assert_array_equal(y, 2 * x)
    y[:] = 0
    emulator.RawModule(code=code).get_function("twice")((1,), (16,), (x, y, np.int32(37)))
    np.testing.assert_array_equal(y, 2 * x)


def test_compile_errors_and_cache(tmp_path, monkeypatch):
    """A compile error carries the compiler's command line and stderr; the library is built once, by
    the native kernels' routine (a sha256 beside it), and a damaged one is rebuilt."""
    monkeypatch.setenv("GPUOPS_EMU_CACHE", str(tmp_path))
    with pytest.raises(emulator.CompileError, match="kernel.cu") as e:
        emulator.RawModule(code="__global__ void broken(int* x) { x[0] = undeclared; }", name_expressions=["broken"])
    assert isinstance(e.value, native.BuildError)
    assert e.value.command[0] == emulator.compiler() and "-std=c++20" in e.value.command
    assert "undeclared" in e.value.stderr and "-std=c++20" in str(e.value) and "undeclared" in str(e.value)
    assert list(tmp_path.iterdir()) == []  # nothing half-built left behind
    code = "__global__ void one(int* x) { x[threadIdx.x] = 1; }"
    emulator.RawModule(code=code, name_expressions=["one"])
    libs = list(tmp_path.glob("*.so"))
    assert len(libs) == 1 and libs[0].name.startswith("emu-") and native.intact(libs[0])
    emulator.RawModule(code=code, name_expressions=["one"])  # cached: no second library
    assert len(list(tmp_path.glob("*.so"))) == 1
    cut = libs[0].with_suffix(".cut")  # truncated (renamed over it: the loaded library stays mapped)
    cut.write_bytes(libs[0].read_bytes()[:100])
    os.replace(cut, libs[0])
    monkeypatch.setattr(emulator, "_libraries", {})
    x = np.zeros(4, np.int32)
    emulator.RawModule(code=code, name_expressions=["one"]).get_function("one")((1,), (4,), (x,))
    assert native.intact(libs[0]) and x.tolist() == [1, 1, 1, 1]


def test_missing_compiler_and_unfit_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUOPS_EMU_CXX", str(tmp_path / "no-such-g++"))
    with pytest.raises(emulator.CompileError, match="GPUOPS_EMU_CXX='.*no-such-g\\+\\+' is not an executable"):
        emulator.RawModule(code="__global__ void k(int* x) {}", name_expressions=["k"])
    monkeypatch.delenv("GPUOPS_EMU_CXX")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("GPUOPS_EMU_CACHE", str(shared))
    with pytest.warns(RuntimeWarning, match="writable by its group or by others"):
        emulator.RawModule(code="__global__ void k2(int* x) { x[0] = 2; }", name_expressions=["k2"])
    assert list(shared.iterdir()) == []


def test_include_paths_of_the_options_are_absolute(tmp_path, monkeypatch):
    """The compiler runs in a temporary folder: a relative -I of the caller's options still means the
    caller's folder."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "three.h").write_text("#define THREE 3\n")
    monkeypatch.chdir(tmp_path)
    code = '#include "three.h"\n__global__ void three(int* x) { x[0] = THREE; }\n'
    x = np.zeros(1, np.int32)
    mod = emulator.RawModule(code=code, options=("-I", "inc"), name_expressions=["three"])
    mod.get_function("three")((1,), (1,), (x,))
    assert x[0] == 3


def test_build_kernel_files_matches_what_the_standin_compiles():
    """``gpuops build-kernels --emulator`` builds the very libraries the CuPy stand-in loads: the same
    cache keys (a second build finds them all)."""
    from gpuops import kernels

    first = emulator.build_kernel_files()
    assert [r["file"] for r in first] == sorted(kernels.NAME_EXPRESSIONS)
    assert all("error" not in r for r in first), first
    again = emulator.build_kernel_files()
    assert [r["path"] for r in again] == [r["path"] for r in first] and not any(r["built"] for r in again)
    b = emulator._build(kernels.source("nms.cu"), kernels.OPTIONS, kernels.NAME_EXPRESSIONS["nms.cu"])
    nms = next(r["path"] for r in first if r["file"] == "nms.cu")
    assert str(emulator.cache_dir() / f"emu-{native.key(b)}.so") == nms
