"""Kernel-backed overrides of generic ops on CUDA (``@op(..., device="cuda")``), calling
:mod:`gpuops.kernels`. Importing this package registers them.

Each override takes exactly the generic op's inputs and attributes, handles the dtypes its kernels
are built for (float32/float16 data; the quantized types) and hands anything else to the generic op.
"""

from . import conv, detection, ml, quantize  # noqa: F401
