"""Scripts of the GPU validation run (gpu_validate.sh and its Python parts), run from a clone of the
repository. The benchmark suite itself is ``gpuops.bench``: ``gpuops bench`` or ``python -m gpuops.bench``."""
