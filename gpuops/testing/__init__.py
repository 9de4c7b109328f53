"""Test doubles for gpuops, in the spirit of ``numpy.testing`` and ``cupy.testing``.

* :mod:`gpuops.testing.cuda_standin` -- a CPU stand-in for the part of CuPy that gpuops uses, at least as
  strict as CuPy 14 (no implicit host reads, host syncs counted, stream captures checked), with its
  backend for :mod:`gpuops.backends`. It is selected as the CUDA backend by naming the module::

      GPUOPS_CUDA_BACKEND=gpuops.testing.cuda_standin python -m pytest

* :mod:`gpuops.testing.emulator` -- the CPU emulation of the CUDA execution model that the stand-in's
  ``RawModule`` runs gpuops' ``.cu`` kernels on (compiled with g++ through :func:`gpuops.native.build`).

The runtime never imports this package: it is reached only through ``$GPUOPS_CUDA_BACKEND``, the tests
and ``gpuops build-kernels --emulator``.
"""

STANDIN = "gpuops.testing.cuda_standin"  # the value of $GPUOPS_CUDA_BACKEND that selects the stand-in
