"""What a benchmark result must say about the machine it was measured on: the CPU model, its vector
extensions, the BLAS library with the core type it picked (OpenBLAS chooses its kernels by CPU, or by
``OPENBLAS_CORETYPE``), and the thread count both runtimes ran with. The same model on two x86
machines can differ by 1.5x against onnxruntime; a result without these cannot be compared."""

from __future__ import annotations

import os
import platform

# the extensions that decide which GEMM and conv kernels OpenBLAS, MLAS and the compiler use
VECTOR_EXTENSIONS = ("SSE42", "AVX", "F16C", "FMA3", "AVX2", "AVX512F", "AVX512BW", "AVX512VL", "AVX512_VNNI",
                     "AVX512_BF16", "AVX512FP16", "AVXVNNI", "AMX_TILE", "AMX_INT8", "AMX_BF16", "ASIMD", "SVE")
BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def cpu_model() -> str:
    """The CPU's marketing name (Linux: /proc/cpuinfo's ``model name``), else what platform knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_id() -> str | None:
    """x86 CPUID's family, model and stepping (Linux: /proc/cpuinfo), e.g. ``family 25 model 1 stepping
    1`` (AMD Zen 3): a virtual machine's model name may be only ``AMD EPYC``, which names no core."""
    fields = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("cpu family", "model", "stepping") and key not in fields:
                    fields[key] = value.strip()
                if not line.strip():
                    break
    except OSError:
        return None
    if "cpu family" not in fields or "model" not in fields:
        return None
    return f"family {fields['cpu family']} model {fields['model']}" + (
        f" stepping {fields['stepping']}" if "stepping" in fields else "")


def vector_extensions() -> list[str]:
    """The vector extensions NumPy detected on this CPU (of :data:`VECTOR_EXTENSIONS`)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as features
        except ImportError:
            return []
    return [name for name in VECTOR_EXTENSIONS if features.get(name)]


def blas() -> list[dict]:
    """threadpoolctl's view of the BLAS libraries loaded now: library, version, the core type it
    runs (``architecture``) and its threading layer; empty without threadpoolctl. (Its thread count
    outside a run is not recorded: sessions set ``threads`` during their runs.)"""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    keep = ("internal_api", "version", "architecture", "threading_layer")
    return [{k: lib.get(k) for k in keep} for lib in threadpool_info() if lib.get("user_api") == "blas"]


def describe(threads: int | None = None) -> dict:
    """The machine section of a result file."""
    try:
        available = len(os.sched_getaffinity(0))
    except AttributeError:
        available = os.cpu_count()
    try:
        load = [round(v, 2) for v in os.getloadavg()]  # other processes' load: how far to trust wall times
    except (AttributeError, OSError):
        load = None
    return {"cpu_model": cpu_model(), "cpu_id": cpu_id(), "arch": platform.machine(), "cpus": os.cpu_count(),
            "cpus_available": available, "vector_extensions": vector_extensions(), "blas": blas(),
            "blas_env": {k: os.environ[k] for k in BLAS_ENV if k in os.environ}, "threads": threads,
            "load_average_1_5_15_min": load}


def one_line(machine: dict) -> str:
    """The machine in a line: ``CPU (extensions; BLAS and core type, threads; load average)``."""
    libs = ", ".join(f"{b.get('internal_api')} {b.get('version')} {b.get('architecture') or ''}".strip()
                     for b in machine.get("blas", [])) or "BLAS unknown (no threadpoolctl)"
    core = machine.get("blas_env", {}).get("OPENBLAS_CORETYPE")
    threads = machine.get("threads")
    load = machine.get("load_average_1_5_15_min")
    extensions = ", ".join(machine.get("vector_extensions", [])) or "no vector extensions found"
    cid = f", {machine['cpu_id']}" if machine.get("cpu_id") else ""
    text = f"{machine.get('cpu_model')}{cid} ({extensions}; {libs}"
    if core:
        text += f", OPENBLAS_CORETYPE={core}"
    if threads:
        text += f", {threads} thread(s)"
    if load:
        text += f"; load average {load[0]} on {machine.get('cpus')} CPUs"
    return text + ")"
