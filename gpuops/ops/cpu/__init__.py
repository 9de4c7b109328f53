"""CPU overrides of generic ops (``@op(..., device="cpu")``): the native kernels (``cpu_kernels/*.c``
through :mod:`gpuops.native`) and the paths that only NumPy arrays allow (strided views over one
buffer, in-place epilogues, BLAS-shaped layouts). Importing this package registers them.

Each override takes exactly the generic op's inputs and attributes (plus ``prepared=`` where it has a
``prepare`` hook: what it derives from its constant inputs once per session, see
:mod:`gpuops.registry`), handles what its paths are built for and hands anything else -- CuPy arrays
included, as a CUDA override's fallback resolves to the CPU's implementation -- to the generic op,
which stays the fallback and the test oracle (``native.disabled()`` turns the native kernels off).
"""

from . import (activation, attention, cast, conv, elementwise, embedding, indexing, linalg, ml,  # noqa: F401
               nchwc, normalization, pool, quantize, reduce, rnn, shape, softmax)
