"""gpuops benchmark suite: ``gpuops bench`` or ``python -m benchmarks``."""
