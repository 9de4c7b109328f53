"""Reshapes and Concat in native programs (:mod:`gpuops.onnx.programs`; the ops themselves are the generic
ones of :mod:`gpuops.ops.shape` and :mod:`gpuops.ops.constants`). A reshape's output is its input's
buffer seen with another shape: its shape comes from the op itself, called on a stand-in that carries
only a shape, so the rules (and errors) are the op's. A Concat copies each input's rows into place."""

from __future__ import annotations

import math

import numpy as np

from .. import shape as _shape
from . import planned


class _Shaped:
    """A value's shape and nothing else, for a reshape op's arithmetic."""

    __slots__ = ("shape",)

    def __init__(self, shape):
        self.shape = tuple(shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)


class _ShapeOnly:
    """The namespace a reshape op gets: ``reshape`` returns the shape it was asked for."""

    @staticmethod
    def reshape(data, shape):
        return _Shaped(shape)


def _alias_step(step, operands):
    X = operands[0]
    if not planned.is_f32(X):
        return None
    args = [_Shaped(X.shape)] + [o for o in operands[1:]]
    if any(type(o) is planned.Operand for o in args[1:]):  # a shape computed at run time
        return None
    out = step.impl.fn(_ShapeOnly, *args, **step.attrs)
    if type(out) is not _Shaped or math.prod(out.shape) != math.prod(X.shape):
        return None
    return planned.NativeStep(out.shape, alias=0)


for _op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"):
    planned.planned(_op)(_alias_step)


@planned.planned("Identity")
def _identity_step(step, operands):
    X = operands[0] if operands else None
    return planned.NativeStep(X.shape, alias=0) if planned.is_f32(X) else None


@planned.planned("Concat")
def _concat_step(step, operands):
    fn = planned.kernel("copy_rows_planned")
    axis = step.attrs.get("axis", 1 if step.impl.since < 4 else None)
    if fn is None or not operands or axis is None or not all(planned.is_f32(x) for x in operands):
        return None
    rank = operands[0].ndim
    axis = _shape.normalize_axis(axis, rank)
    lead, tail = operands[0].shape[:axis], operands[0].shape[axis + 1:]
    if any(x.ndim != rank or x.shape[:axis] != lead or x.shape[axis + 1:] != tail for x in operands):
        return None
    rows, inner = math.prod(lead), math.prod(tail)
    total = sum(x.shape[axis] for x in operands)
    calls, offset, holds = [], 0, []
    for i, x in enumerate(operands):
        n = 4 * x.shape[axis] * inner
        if n:
            p = planned.params(rows, n, 4 * total * inner, offset)
            calls.append(planned.Call(fn, p, i))
            holds.append(p)
        offset += n
    return planned.NativeStep(lead + (total,) + tail, tuple(calls), holds=holds)
