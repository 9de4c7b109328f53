"""The parts of ``benchmarks/gpu_validate.sh`` written in Python, one module per part.

Each runs as ``python3 -m benchmarks.gpu.<part> OUT/perf.json ...`` from the repository root, merges
its record into that JSON file under its own key, prints one line per item, and exits 1 when a check
failed (its record then has a non-empty ``problems`` list). ``GPU_VALIDATE_MODE`` (``gpu``,
``standin``) says whether CuPy is the real one; without it the mode follows ``GPUOPS_CUDA_BACKEND``
(``gpuops.testing.cuda_standin``: the stand-in).
"""
