"""Reshapes, Concat and data movement in native programs (:mod:`gpuops.onnx.programs`; the ops themselves are the generic
ones of :mod:`gpuops.ops.shape` and :mod:`gpuops.ops.constants`). A reshape's output is its input's
buffer seen with another shape: its shape comes from the op itself, called on a stand-in that carries
only a shape, so the rules (and errors) are the op's. A Concat copies each input's rows into place.
An op that only moves data (Transpose, Slice, Resize to the nearest, Gather of constant indices...) is
bound by its index map: the op itself run once on the input's element indices (exact in float64) says
where each output element comes from."""

from __future__ import annotations

import math
import platform

import numpy as np

from ...dtypes import np_dtype
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
    if type(X) is not planned.Operand:
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
    return planned.NativeStep(X.shape, alias=0) if type(X) is planned.Operand else None


@planned.planned("Concat")
def _concat_step(step, operands):
    fn = planned.kernel("copy_rows_planned")
    axis = step.attrs.get("axis", 1 if step.impl.since < 4 else None)
    if fn is None or not operands or axis is None or not all(
            planned.is_f32(x) or (type(x) is np.ndarray and x.dtype == np.float32) for x in operands):
        return None  # (run-time values or float32 constants: a ViT's class token)
    rank = operands[0].ndim
    axis = _shape.normalize_axis(axis, rank)
    lead, tail = operands[0].shape[:axis], operands[0].shape[axis + 1:]
    if any(x.ndim != rank or x.shape[:axis] != lead or x.shape[axis + 1:] != tail for x in operands):
        return None
    rows, inner = math.prod(lead), math.prod(tail)
    total = sum(x.shape[axis] for x in operands)
    calls, offset, holds, pieces = [], 0, [], []
    for i, x in enumerate(operands):
        n = 4 * x.shape[axis] * inner
        if n:
            p = planned.params(rows, n, 4 * total * inner, offset)
            calls.append(planned.Call(fn, p, i))
            holds.append(p)
            if rows == 1:
                pieces.append((i, offset))
        offset += n
    return planned.NativeStep(lead + (total,) + tail, tuple(calls), holds=holds, pieces=tuple(pieces))


MAX_MOVED = 1 << 22  # elements of a data movement's index map (4 or more bytes each, held by the program)


def move_step(step, operands, fill=None):
    """``fill``: the value of the output elements that come from no input element (a Pad's), which the op
    run on the indices plus one gives as 0; None: every element comes from the input."""
    X = operands[0]
    if not planned.is_f32(X) or any(type(o) is planned.Operand for o in operands[1:]):
        return None
    if step.op_type == "Resize" and step.attrs.get("mode", "nearest") != "nearest":
        return None
    n = math.prod(X.shape)
    if not n or n > MAX_MOVED:
        return None
    shift = 0 if fill is None else 1
    index = step.impl.fn(np, np.arange(shift, n + shift, dtype=np.float64).reshape(X.shape), *operands[1:],
                         **step.attrs)
    if type(index) is not np.ndarray or index.dtype != np.float64 or not 0 < index.size <= MAX_MOVED:
        return None
    flat = np.ascontiguousarray(index.reshape(-1)).astype(np.int64) - shift
    if not (np.array_equal(flat + shift, index.reshape(-1)) and flat.min() >= -shift and flat.max() < n):
        return None  # copies (and fills) only
    breaks = np.flatnonzero(np.diff(flat) != 1) + 1
    if fill is None and 4 * (breaks.size + 1) <= flat.size:  # long stretches: copied as such
        starts = np.concatenate([[0], breaks])
        lengths = np.diff(np.concatenate([starts, [flat.size]]))
        table = np.ascontiguousarray(np.stack([flat[starts], lengths], axis=1))
        fn, p = planned.kernel("runs_planned_f32"), planned.params(starts.size, table.ctypes.data)
    else:
        table = flat.astype(np.int32)
        fn = planned.kernel("gather_planned_f32")
        p = planned.params(flat.size, table.ctypes.data, float(np.float32(0.0 if fill is None else fill)))
    if fn is None:
        return None
    return planned.NativeStep(tuple(index.shape), (planned.Call(fn, p, 0),), holds=(p, table))


for _op in ("Transpose", "Slice", "Resize", "Expand", "Tile", "DepthToSpace", "SpaceToDepth"):
    planned.planned(_op)(move_step)  # (and Gather of constant indices: .indexing)


@planned.planned("Pad")
def _pad_step(step, operands):
    """Pad: the op's index map, its constant (the attribute before opset 11, else the input; 0 when
    absent) where no input element lands; run with 0 as the constant, so that padding reads 0."""
    if step.attrs.get("mode", "constant") == "constant":
        if step.impl.since >= 11:
            value = operands[2] if len(operands) > 2 else None
            if value is not None and (type(value) is not np.ndarray or value.size > 1):
                return None
            fill = 0.0 if value is None or not value.size else float(value.reshape(-1)[0])
            operands = list(operands)
            if len(operands) > 2:
                operands[2] = None
        else:
            fill = float(step.attrs.get("value", 0.0))
            step = _with_attrs(step, value=0.0)
        return move_step(step, operands, fill)
    return move_step(step, operands)  # reflect, edge, wrap: every element a copy


class _with_attrs:
    """A step seen with some attributes changed (a binding's stand-in call)."""

    def __init__(self, step, **attrs):
        self.impl, self.op_type, self.attrs = step.impl, step.op_type, {**step.attrs, **attrs}


_CASTS = {(np.dtype(np.int64), np.dtype(np.int32)): 0, (np.dtype(np.int64), np.dtype(np.float32)): 1,
          (np.dtype(np.int32), np.dtype(np.float32)): 2, (np.dtype(np.uint8), np.dtype(np.float32)): 4,
          (np.dtype(np.int8), np.dtype(np.float32)): 5}  # program.c's CAST_*
if platform.machine().lower() in ("x86_64", "amd64", "i686", "x86"):
    # float32 to int32 as NumPy's astype truncates there (cvttps2dq: INT32_MIN for NaN and out of range; on
    # other CPUs NumPy's casts of those differ)
    _CASTS[np.dtype(np.float32), np.dtype(np.int32)] = 3


def cast_step(step, operands):
    """The integer casts of index and mask inputs (int64 to int32, to float32), 8-bit integers to float32,
    and float32 to int32 (a quantized bias: Floor, then Cast), as NumPy's astype."""
    X = operands[0]
    fn = planned.kernel("cast_planned")
    if fn is None or type(X) is not planned.Operand or "to" not in step.attrs or step.attrs.get("saturate", 1) != 1:
        return None
    to = np_dtype(step.attrs["to"])
    kind = _CASTS.get((np.dtype(X.dtype), np.dtype(to)))
    if kind is None:
        return None
    p = planned.params(kind, math.prod(X.shape))
    return planned.NativeStep(X.shape, (planned.Call(fn, p, 0),), holds=p, dtype=np.dtype(to))


@planned.planned("Split")
def _split_step(step, operands):
    """Split: each output's rows copied out of the input (Concat's copy, the other way); the sizes as the op
    works them out, from a stand-in of the axis' indices."""
    fn = planned.kernel("copy_from_rows_planned")
    X = operands[0]
    if fn is None or not planned.is_f32(X) or not X.ndim or any(type(o) is planned.Operand for o in operands[1:]):
        return None
    axis = _shape.normalize_axis(step.attrs.get("axis", 0), X.ndim)
    probe = np.arange(X.shape[axis], dtype=np.float64).reshape((1,) * axis + (-1,) + (1,) * (X.ndim - axis - 1))
    parts = step.impl.fn(np, probe, *operands[1:], **step.attrs)
    parts = parts if isinstance(parts, (tuple, list)) else (parts,)
    if len(parts) != len(step.outputs):
        return None
    rows, inner, width = math.prod(X.shape[:axis]), math.prod(X.shape[axis + 1:]), X.shape[axis]
    calls, holds, shapes, offset = [], [], [], 0
    for k, part in enumerate(parts):
        size = part.shape[axis]
        if not np.array_equal(part.reshape(-1), np.arange(offset, offset + size)):
            return None
        shapes.append(X.shape[:axis] + (size,) + X.shape[axis + 1:])
        if size and rows * inner and step.outputs[k]:
            p = planned.params(rows, 4 * size * inner, 4 * width * inner, 4 * offset * inner)
            holds.append(p)
            calls.append(planned.Call(fn, p, 0, out=k))
        offset += size
    extra = tuple((k, shape) for k, shape in enumerate(shapes) if k and step.outputs[k])
    return planned.NativeStep(shapes[0], tuple(calls), holds=holds, extra=extra)
