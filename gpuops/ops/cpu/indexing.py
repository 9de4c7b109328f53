"""Gather on the CPU (``@op(..., device="cpu")``): one ``ndarray.take``, which checks the indices' range and
counts negative ones from the end itself, where the generic op spends a min, a max, a stack, a
remainder and then the take (six NumPy calls on the few indices of an embedding lookup or of a scalar
index). An index out of range (or an axis out of range) goes to the generic op, the fallback and test
oracle, which raises the error naming the input and the accepted bounds.
"""

from __future__ import annotations

import math

import numpy as np

from ...registry import op
from .. import indexing as _indexing
from . import planned
from . import shape as _shape


@op("Gather", since=1, device="cpu")
def Gather(xp, data, indices, *, axis=0):
    if type(data) is np.ndarray and type(indices) is np.ndarray and indices.dtype.kind == "i":
        try:
            return data.take(indices, axis=axis)
        except IndexError:  # numpy's AxisError is one too
            pass
    return _indexing.Gather(xp, data, indices, axis=axis)


# -- native programs (gpuops.onnx.programs): an embedding lookup, rows of a constant table ---------------


@planned.planned("Gather")
def _gather_step(step, operands):
    """Rows of a constant of numbers (a float32 embedding, an 8-bit quantized one) by run-time int64 or int32
    indices (axis 0), copied as bytes; constant indices move data (:mod:`.shape`'s index maps)."""
    data, indices = operands
    if type(indices) is not planned.Operand:
        return _shape.move_step(step, operands)
    fn = planned.kernel("gather_rows_planned")
    if fn is None or step.attrs.get("axis", 0) not in (0, -data.ndim if type(data) is np.ndarray else 0) \
            or type(data) is not np.ndarray or data.dtype.kind not in "fiub" or not data.flags.c_contiguous \
            or not data.ndim or indices.dtype not in (np.dtype(np.int64), np.dtype(np.int32)):
        return None
    p = planned.params(data.shape[0], data.itemsize * math.prod(data.shape[1:]), data.ctypes.data,
                       math.prod(indices.shape), int(indices.dtype == np.int32))
    return planned.NativeStep(tuple(indices.shape) + data.shape[1:], (planned.Call(fn, p, 1),), holds=(p, data),
                              dtype=data.dtype)

