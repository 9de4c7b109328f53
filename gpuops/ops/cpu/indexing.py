"""Gather on the CPU (``@op(..., device="cpu")``): one ``ndarray.take``, which checks the indices' range and
counts negative ones from the end itself, where the generic op spends a min, a max, a stack, a
remainder and then the take (six NumPy calls on the few indices of an embedding lookup or of a scalar
index). An index out of range (or an axis out of range) goes to the generic op, the fallback and test
oracle, which raises the error naming the input and the accepted bounds.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ...registry import op
from .. import indexing as _indexing
from ..contrib import private as _private
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
                       math.prod(indices.shape), int(indices.dtype == np.int32), 0)
    return planned.NativeStep(tuple(indices.shape) + data.shape[1:], (planned.Call(fn, p, 1),), holds=(p, data),
                              dtype=data.dtype)



# -- a one-hot times a table: the table's rows ---------------------------------------------------------


class OneHotTable(NamedTuple):
    """OneHotMatMul's constant classes R (``0, ..., D - 1``) and table W (finite float32), kept by the step."""

    R: np.ndarray
    W: np.ndarray


def prepare_one_hot(constants: dict, attrs: dict) -> OneHotTable | None:
    R, W = constants.get(1), constants.get(2)
    if not (_private.one_hot_classes(R) and _private.one_hot_table(W, R.size)):
        return None
    return OneHotTable(R, np.ascontiguousarray(W))


def _one_hot_rows(prepared, A, R, W) -> bool:
    """Whether OneHotMatMul of these arrays is the rows of ``prepared.W`` that A names: R and W the kept
    constants, A of integers with a last axis of 1 broadcast against R's (1, ..., 1, D)."""
    return (prepared is not None and R is prepared.R and W is prepared.W and type(A) is np.ndarray
            and A.dtype.kind in "iu" and A.ndim >= R.ndim and A.shape[-1:] == (1,))


@op("OneHotMatMul", domain=_private.DOMAIN, since=1, device="cpu", prepare=prepare_one_hot)
def OneHotMatMul(xp, A, R, W, *, prepared=None):
    """The rows of the table that A names (zeros for an A outside ``[0, D)``), where the step kept R and W;
    else the generic op (a one-hot and a product)."""
    if not _one_hot_rows(prepared, A, R, W):
        return _private.OneHotMatMul(xp, A, R, W)
    index = A[..., 0]
    inside = (index >= 0) & (index < R.size)
    rows = prepared.W.take(np.where(inside, index, 0), axis=0)
    rows[~inside] = 0
    return rows


@planned.planned("OneHotMatMul", _private.DOMAIN)
def _one_hot_step(step, operands):
    """The table's rows by run-time int64 or int32 indices, a row of zeros for one outside ``[0, D)``."""
    A = operands[0]
    fn, kept = planned.kernel("gather_rows_planned"), step.prepared
    if fn is None or type(kept) is not OneHotTable or type(A) is not planned.Operand or A.shape[-1:] != (1,) \
            or A.ndim < kept.R.ndim or A.dtype not in (np.dtype(np.int64), np.dtype(np.int32)):
        return None
    W = kept.W
    p = planned.params(W.shape[0], W.itemsize * W.shape[1], W.ctypes.data, math.prod(A.shape),
                       int(A.dtype == np.int32), 1)
    return planned.NativeStep(tuple(A.shape[:-1]) + W.shape[1:], (planned.Call(fn, p, 0),), holds=(p, W))
