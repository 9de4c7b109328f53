"""Gather on the CPU (``@op(..., device="cpu")``): one ``ndarray.take``, which checks the indices' range and
counts negative ones from the end itself, where the generic op spends a min, a max, a stack, a
remainder and then the take (six NumPy calls on the few indices of an embedding lookup or of a scalar
index). An index out of range (or an axis out of range) goes to the generic op, the fallback and test
oracle, which raises the error naming the input and the accepted bounds.
"""

from __future__ import annotations

import numpy as np

from ...registry import op
from .. import indexing as _indexing


@op("Gather", since=1, device="cpu")
def Gather(xp, data, indices, *, axis=0):
    if type(data) is np.ndarray and type(indices) is np.ndarray and indices.dtype.kind == "i":
        try:
            return data.take(indices, axis=axis)
        except IndexError:  # numpy's AxisError is one too
            pass
    return _indexing.Gather(xp, data, indices, axis=axis)
