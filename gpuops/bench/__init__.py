"""gpuops' benchmark suite: ``gpuops bench`` or ``python -m gpuops.bench`` (options: ``--help``).

Not imported by ``import gpuops``. Its peers are optional and checked before a run starts:
onnxruntime (``--peers`` needs it; the suite compares with it), torch, modeci-mdf (the MDF models),
matplotlib (plots), nvidia-ml-py (GPU telemetry), Ray (``--scenario ray``); ``pip install
'gpuops[bench]'`` installs the common ones.

Modules: ``runner`` (the command line and the suite), ``models``, ``peers``, ``torch_peers``,
``cpu_peers`` (``--peers``), ``corpus`` (``--corpus``), ``scenarios`` (``--scenario``), ``mdf`` (also ``python -m
gpuops.bench.mdf``), ``report``, ``telemetry``; ``kernels`` (``python -m gpuops.bench.kernels``, the
CUDA kernels on a GPU) and ``optimizer_latency`` (``python -m gpuops.bench.optimizer_latency``) are
measurement scripts of their own.
"""

from __future__ import annotations


def main(argv=None) -> int:
    """``gpuops bench ARGS``: see :func:`gpuops.bench.runner.main`."""
    from .runner import main as run

    return run(argv)
