"""Shape and tensor-manipulation ops: Reshape, Transpose, (Un)Squeeze, Concat, Split, Slice, Expand,
Tile, Pad, Flatten, DepthToSpace, SpaceToDepth, CenterCropPad, Trilu, ReverseSequence. (Shape, Size,
Identity and the constant-making ops are :mod:`.constants`; the ops that select by value,
:mod:`.selection`.)

Shape-like inputs (shape, axes, pads, repeats, split, starts/ends, k, depth...) are host inputs:
the output shape is worked out in Python and only the data moves on the device. Ops whose output
shape depends on tensor values (Compress, Unique, NonZero) let the array library size the result
(on CuPy that is one synchronisation inside ``nonzero``).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import NodeError
from ..registry import op
from .checks import require
from .elementwise import clamp

# -- helpers, shared with .constants and .selection ----------------------------------------------


def host_ints(values) -> list[int]:
    """A host array / list / scalar of integers -> a list of Python ints."""
    if type(values) is np.ndarray and values.dtype.kind in "iu":
        return values.ravel().tolist()
    a = np.asarray(values).reshape(-1)
    return a.tolist() if a.dtype.kind in "iu" else [int(v) for v in a]


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` normalised to [0, rank); negative counts from the back."""
    axis = int(axis)
    if not -rank <= axis < rank:
        raise NodeError(f"{what} {axis} is out of range for rank {rank} (accepted [{-rank}, {rank - 1}])")
    return axis % rank


def normalize_axes(axes, rank: int, what: str = "axes") -> list[int]:
    out = [normalize_axis(a, rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise NodeError(f"{what} {list(axes)} repeat an axis")
    return out


def host_scalar(value):
    """A host scalar (0-d or 1-element array) -> its NumPy scalar."""
    return np.asarray(value).reshape(-1)[0]


# -- Reshape, Flatten, Squeeze, Unsqueeze, Transpose -----------------------------------------


def _reshape_target(in_shape: tuple[int, ...], shape: list[int], allowzero: int) -> tuple[int, ...]:
    if shape and min(shape) > 0 and math.prod(shape) == math.prod(in_shape):  # every dimension given
        return tuple(shape)
    out = list(shape)
    for i, d in enumerate(out):
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise NodeError(f"shape {shape}: 0 at position {i} copies an input dimension, but the "
                                f"input {in_shape} has rank {len(in_shape)}")
            out[i] = in_shape[i]
        elif d < -1:
            raise NodeError(f"shape {shape} has an invalid dimension {d}")
    total = math.prod(in_shape)
    if out.count(-1) > 1:
        raise NodeError(f"shape {shape} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or total % known:
            raise NodeError(f"cannot reshape {in_shape} to {shape}: the -1 dimension cannot be inferred")
        out[out.index(-1)] = total // known
    if math.prod(out) != total:
        raise NodeError(f"cannot reshape {in_shape} ({total} elements) to {shape}")
    return tuple(out)


@op("Reshape", since=1)
def Reshape_1(xp, data, *, shape=None, consumed_inputs=None):
    if shape is None:
        raise NodeError("Reshape-1 needs the 'shape' attribute")
    return xp.reshape(data, _reshape_target(tuple(data.shape), list(shape), 0))


@op("Reshape", since=5, host_inputs=(1,))
def Reshape_5(xp, data, shape):
    return xp.reshape(data, _reshape_target(tuple(data.shape), host_ints(shape), 0))


@op("Reshape", since=14, host_inputs=(1,))
def Reshape(xp, data, shape, *, allowzero=0):
    shape = host_ints(shape)
    if allowzero and 0 in shape and -1 in shape:
        raise NodeError(f"shape {shape} has both 0 and -1 while allowzero=1")
    return xp.reshape(data, _reshape_target(tuple(data.shape), shape, allowzero))


@op("Flatten", since=1)
def Flatten(xp, input, *, axis=1):
    rank = input.ndim
    if not -rank <= axis <= rank:
        raise NodeError(f"axis {axis} is out of range for rank {rank} (accepted [{-rank}, {rank}])")
    axis = axis + rank if axis < 0 else axis
    shape = tuple(input.shape)
    return xp.reshape(input, (math.prod(shape[:axis]), math.prod(shape[axis:])))


def _squeeze(xp, data, axes):
    if axes is None:
        axes = [i for i, d in enumerate(data.shape) if d == 1]
    axes = normalize_axes(axes, data.ndim)
    for a in axes:
        if data.shape[a] != 1:
            raise NodeError(f"cannot squeeze axis {a} of shape {tuple(data.shape)}: its size is not 1")
    return xp.reshape(data, tuple(d for i, d in enumerate(data.shape) if i not in axes))


def _unsqueeze(xp, data, axes):
    rank = data.ndim + len(axes)
    axes = set(normalize_axes(axes, rank))
    dims = iter(data.shape)
    return xp.reshape(data, tuple([1 if i in axes else next(dims) for i in range(rank)]))


@op("Squeeze", since=1)
def Squeeze_1(xp, data, *, axes=None):
    return _squeeze(xp, data, axes)


@op("Squeeze", since=13, host_inputs=(1,))
def Squeeze(xp, data, axes=None):
    return _squeeze(xp, data, None if axes is None else host_ints(axes))


@op("Unsqueeze", since=1)
def Unsqueeze_1(xp, data, *, axes):
    return _unsqueeze(xp, data, axes)


@op("Unsqueeze", since=13, host_inputs=(1,))
def Unsqueeze(xp, data, axes):
    return _unsqueeze(xp, data, host_ints(axes))


@op("Transpose", since=1)
def Transpose(xp, data, *, perm=None):
    rank = data.ndim
    perm = list(range(rank))[::-1] if perm is None else normalize_axes(perm, rank, "perm")
    if len(perm) != rank:
        raise NodeError(f"perm {perm} does not name every axis of a rank-{rank} input")
    return xp.permute_dims(data, tuple(perm))


# -- Concat, Split -------------------------------------------------------------------------------


@op("Concat", since=1)
def Concat_1(xp, *inputs, axis=1):
    return Concat(xp, *inputs, axis=axis)


@op("Concat", since=4)
def Concat(xp, *inputs, axis=None):
    if axis is None:
        raise NodeError("Concat needs the 'axis' attribute")
    if not inputs:
        raise NodeError("Concat needs at least one input")
    axis = normalize_axis(axis, inputs[0].ndim)
    return xp.concat(list(inputs), axis=axis)


def _split(xp, input, axis: int, sizes: list[int] | None, n_outputs: int):
    axis = normalize_axis(axis, input.ndim)
    dim = input.shape[axis]
    if sizes is None:
        if n_outputs < 1 or dim % n_outputs:
            raise NodeError(f"cannot split dimension {dim} (axis {axis}) into {n_outputs} equal parts")
        sizes = [dim // n_outputs] * n_outputs
    if any(s < 0 for s in sizes) or sum(sizes) != dim:
        raise NodeError(f"split sizes {sizes} do not add up to dimension {dim} of axis {axis}")
    if len(sizes) != n_outputs:
        raise NodeError(f"split has {len(sizes)} parts but the node has {n_outputs} outputs")
    out, start = [], 0
    for s in sizes:
        index = [slice(None)] * input.ndim
        index[axis] = slice(start, start + s)
        out.append(input[tuple(index)])
        start += s
    return tuple(out)


@op("Split", since=1, host_inputs=(1,), n_outputs=True)
def Split_1(xp, input, split_input=None, *, axis=0, split=None, n_outputs):
    # Split-1 takes the sizes from its optional second input or from the ``split`` attribute.
    sizes = host_ints(split_input) if split_input is not None else (None if split is None else list(split))
    return _split(xp, input, axis, sizes, n_outputs)


@op("Split", since=2, n_outputs=True)
def Split_2(xp, input, *, axis=0, split=None, n_outputs):
    return _split(xp, input, axis, None if split is None else list(split), n_outputs)


@op("Split", since=13, host_inputs=(1,), n_outputs=True)
def Split_13(xp, input, split=None, *, axis=0, n_outputs):
    return _split(xp, input, axis, None if split is None else host_ints(split), n_outputs)


@op("Split", since=18, host_inputs=(1,), n_outputs=True)
def Split(xp, input, split=None, *, axis=0, num_outputs=None, n_outputs):
    if split is not None and num_outputs is not None:
        raise NodeError("Split takes either the 'split' input or the 'num_outputs' attribute, not both")
    if num_outputs is not None:
        if num_outputs != n_outputs:
            raise NodeError(f"num_outputs={num_outputs} but the node has {n_outputs} outputs")
        dim = input.shape[normalize_axis(axis, input.ndim)]
        chunk = -(-dim // num_outputs)  # ceil: the last part is the smaller one
        sizes = [max(0, min(chunk, dim - i * chunk)) for i in range(num_outputs)]
        return _split(xp, input, axis, sizes, n_outputs)
    return _split(xp, input, axis, None if split is None else host_ints(split), n_outputs)


# -- Slice ---------------------------------------------------------------------------------------


def _slice(data, starts: list[int], ends: list[int], axes: list[int] | None, steps: list[int] | None):
    rank = data.ndim
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise NodeError(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in length")
    index = [slice(None)] * rank
    for a, s, e, st in zip(normalize_axes(axes, rank), starts, ends, steps):
        n = data.shape[a]
        if st == 0:
            raise NodeError(f"slice step on axis {a} is 0")
        s = s + n if s < 0 else s
        e = e + n if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), n), min(max(e, 0), n)
        else:  # walking backwards: start in [0, n-1], end in [-1, n-1] (-1 = past the front)
            s, e = min(max(s, 0), n - 1), min(max(e, -1), n - 1)
        index[a] = slice(s, e if e >= 0 else None, st)
    return data[tuple(index)]


@op("Slice", since=1)
def Slice_1(xp, data, *, starts, ends, axes=None):
    return _slice(data, list(starts), list(ends), None if axes is None else list(axes), None)


@op("Slice", since=10, host_inputs=(1, 2, 3, 4))
def Slice(xp, data, starts, ends, axes=None, steps=None):
    return _slice(data, host_ints(starts), host_ints(ends), None if axes is None else host_ints(axes),
                  None if steps is None else host_ints(steps))


# -- Expand, Tile, Pad, CenterCropPad ----------------------------------------------------------


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise NodeError(f"shapes {a} and {b} do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(out)


@op("Expand", since=8, host_inputs=(1,))
def Expand(xp, input, shape):
    return xp.broadcast_to(input, _broadcast_shape(tuple(input.shape), tuple(host_ints(shape))))


@op("Tile", since=1, host_inputs=(1, 2))
def Tile_1(xp, input, tiles, axis):
    reps = [1] * input.ndim
    reps[normalize_axis(int(host_scalar(axis)), input.ndim)] = int(host_scalar(tiles))
    return xp.tile(input, tuple(reps))


@op("Tile", since=6, host_inputs=(1,))
def Tile(xp, input, repeats):
    reps = host_ints(repeats)
    if len(reps) != input.ndim or any(r < 0 for r in reps):
        raise NodeError(f"repeats {reps} must be {input.ndim} non-negative numbers (input rank {input.ndim})")
    return xp.tile(input, tuple(reps))


def _pad(xp, data, pads: list[int], mode: str, value, axes: list[int] | None, modes: tuple[str, ...]):
    if mode not in modes:
        raise NodeError(f"unsupported pad mode {mode!r}; this opset accepts {list(modes)}")
    rank = data.ndim
    axes = list(range(rank)) if axes is None else normalize_axes(axes, rank)
    if len(pads) != 2 * len(axes):
        raise NodeError(f"pads {pads} must hold 2 values per padded axis ({len(axes)} axes)")
    width = [[0, 0] for _ in range(rank)]
    for i, a in enumerate(axes):
        width[a] = [pads[i], pads[i + len(axes)]]
    # Negative pads crop first; the rest pads the cropped tensor.
    crop = []
    for (b, e), n in zip(width, data.shape):
        lo, hi = max(-b, 0), n - max(-e, 0)
        if hi < lo:
            raise NodeError(f"negative pads {pads} remove more than the {n} elements of an axis")
        crop.append(slice(lo, hi))
    data = data[tuple(crop)]
    width = tuple((max(b, 0), max(e, 0)) for b, e in width)
    if not any(b or e for b, e in width):
        return data
    if mode == "constant":
        fill = np.asarray(0 if value is None else value).astype(data.dtype)[()]
        out = xp.full(tuple(n + b + e for (b, e), n in zip(width, data.shape)), fill, dtype=data.dtype)
        out[tuple(slice(b, b + n) for (b, _), n in zip(width, data.shape))] = data
        return out
    for (b, e), n in zip(width, data.shape):
        if (b or e) and n == 0:
            raise NodeError(f"{mode!r} padding of an empty axis")
    if mode in ("reflect", "edge") and all(b < n and e < n for (b, e), n in zip(width, data.shape)):
        return _pad_by_slices(xp, data, width, mode == "reflect")
    return xp.pad(data, width, mode=mode)


def _pad_by_slices(xp, data, width, reflect: bool):
    """Reflect or edge padding of at most ``n - 1`` per side, one axis at a time: the mirrored (or
    repeated) edge slices concatenated around the data, as ``np.pad`` gives, in a fraction of its time."""
    for a, ((b, e), n) in enumerate(zip(width, data.shape)):
        if not (b or e):
            continue
        at = (slice(None),) * a
        if reflect:  # mirrored about the edge element, which is not repeated
            before = data[at + (slice(b, 0, -1),)]
            after = data[at + (slice(n - 2, n - 2 - e if n - 2 - e >= 0 else None, -1),)]
        else:
            shape = list(data.shape)
            before = xp.broadcast_to(data[at + (slice(0, 1),)], tuple(shape[:a] + [b] + shape[a + 1:]))
            after = xp.broadcast_to(data[at + (slice(n - 1, n),)], tuple(shape[:a] + [e] + shape[a + 1:]))
        data = xp.concat([before, data, after], axis=a)
    return data


@op("Pad", since=1)
def Pad_1(xp, data, *, paddings, mode="constant", value=0.0):
    return _pad(xp, data, list(paddings), mode, value, None, ("constant", "reflect", "edge"))


@op("Pad", since=2)
def Pad_2(xp, data, *, pads, mode="constant", value=0.0):
    return _pad(xp, data, list(pads), mode, value, None, ("constant", "reflect", "edge"))


@op("Pad", since=11, host_inputs=(1, 2))
def Pad_11(xp, data, pads, constant_value=None, *, mode="constant"):
    value = None if constant_value is None or constant_value.size == 0 else host_scalar(constant_value)
    return _pad(xp, data, host_ints(pads), mode, value, None, ("constant", "reflect", "edge"))


@op("Pad", since=18, host_inputs=(1, 2, 3))
def Pad_18(xp, data, pads, constant_value=None, axes=None, *, mode="constant"):
    value = None if constant_value is None or constant_value.size == 0 else host_scalar(constant_value)
    return _pad(xp, data, host_ints(pads), mode, value, None if axes is None else host_ints(axes),
                ("constant", "reflect", "edge"))


@op("Pad", since=19, host_inputs=(1, 2, 3))
def Pad(xp, data, pads, constant_value=None, axes=None, *, mode="constant"):
    value = None if constant_value is None or constant_value.size == 0 else host_scalar(constant_value)
    return _pad(xp, data, host_ints(pads), mode, value, None if axes is None else host_ints(axes),
                ("constant", "reflect", "edge", "wrap"))


@op("CenterCropPad", since=18, host_inputs=(1,))
def CenterCropPad(xp, input_data, shape, *, axes=None):
    rank = input_data.ndim
    axes = list(range(rank)) if axes is None else normalize_axes(axes, rank)
    shape = host_ints(shape)
    if len(shape) != len(axes):
        raise NodeError(f"shape {shape} must have one size per axis {axes}")
    crop = [slice(None)] * rank
    width = [(0, 0)] * rank
    for a, want in zip(axes, shape):
        n = input_data.shape[a]
        if want < n:  # crop window starts rounded down
            lo = (n - want) // 2
            crop[a] = slice(lo, lo + want)
        elif want > n:  # an odd padding puts the extra element on the right
            lo = (want - n) // 2
            width[a] = (lo, want - n - lo)
    out = input_data[tuple(crop)]
    if any(b or e for b, e in width):
        out = xp.pad(out, tuple(width), mode="constant")
    return out


# -- DepthToSpace, SpaceToDepth ---------------------------------------------------------------


def _dims4(input, what: str):
    if input.ndim != 4:
        raise NodeError(f"{what} needs a 4-D NCHW input, got shape {tuple(input.shape)}")
    return tuple(input.shape)


def _depth_to_space(xp, input, blocksize: int, mode: str):
    b, c, h, w = _dims4(input, "DepthToSpace")
    bs = blocksize
    if bs <= 0 or c % (bs * bs):
        raise NodeError(f"channels {c} are not divisible by blocksize^2 = {bs * bs}")
    if mode == "DCR":
        t = xp.reshape(input, (b, bs, bs, c // (bs * bs), h, w))
        t = xp.permute_dims(t, (0, 3, 4, 1, 5, 2))
    elif mode == "CRD":
        t = xp.reshape(input, (b, c // (bs * bs), bs, bs, h, w))
        t = xp.permute_dims(t, (0, 1, 4, 2, 5, 3))
    else:
        raise NodeError(f"unknown mode {mode!r} (expected 'DCR' or 'CRD')")
    return xp.reshape(t, (b, c // (bs * bs), h * bs, w * bs))


@op("DepthToSpace", since=1)
def DepthToSpace_1(xp, input, *, blocksize):
    return _depth_to_space(xp, input, blocksize, "DCR")


@op("DepthToSpace", since=11)
def DepthToSpace(xp, input, *, blocksize, mode="DCR"):
    return _depth_to_space(xp, input, blocksize, mode)


def _space_to_depth(xp, input, blocksize: int, mode: str):
    b, c, h, w = _dims4(input, "SpaceToDepth")
    bs = blocksize
    if bs <= 0 or h % bs or w % bs:
        raise NodeError(f"spatial size {h}x{w} is not divisible by blocksize {bs}")
    t = xp.reshape(input, (b, c, h // bs, bs, w // bs, bs))
    if mode == "DCR":
        t = xp.permute_dims(t, (0, 3, 5, 1, 2, 4))
    elif mode == "CRD":
        t = xp.permute_dims(t, (0, 1, 3, 5, 2, 4))
    else:
        raise NodeError(f"unknown mode {mode!r} (expected 'DCR' or 'CRD')")
    return xp.reshape(t, (b, c * bs * bs, h // bs, w // bs))


@op("SpaceToDepth", since=1)
def SpaceToDepth_1(xp, input, *, blocksize):
    return _space_to_depth(xp, input, blocksize, "DCR")


@op("SpaceToDepth", since=28)
def SpaceToDepth(xp, input, *, blocksize, mode="DCR"):
    return _space_to_depth(xp, input, blocksize, mode)


# -- Trilu, ReverseSequence ---------------------------------------------------------------------


@op("Trilu", since=14, host_inputs=(1,))
def Trilu(xp, input, k=None, *, upper=1):
    if input.ndim < 2:
        raise NodeError(f"Trilu needs an input of rank >= 2, got shape {tuple(input.shape)}")
    k = 0 if k is None else int(host_scalar(k))
    # any int64 k is valid: past the matrix's diagonals it keeps all or nothing (no overflow at -2**63)
    k = min(max(k, -int(input.shape[-2])), int(input.shape[-1]))
    return xp.triu(input, k=k) if upper else xp.tril(input, k=k)


@op("ReverseSequence", since=10)
def ReverseSequence(xp, input, sequence_lens, *, batch_axis=1, time_axis=0):
    if input.ndim < 2 or {batch_axis, time_axis} != {0, 1}:
        raise NodeError(f"batch_axis={batch_axis} and time_axis={time_axis} must be 0 and 1 "
                        f"(input rank {input.ndim} >= 2)")
    T, B = input.shape[time_axis], input.shape[batch_axis]
    if tuple(sequence_lens.shape) != (B,):
        raise NodeError(f"sequence_lens has shape {tuple(sequence_lens.shape)}, the batch axis has {B} entries")
    lens = sequence_lens.astype(np.int64)
    if B:  # a length outside [0, T] is refused, as onnxruntime does (the check may be deferred on a device)
        require(xp.stack([xp.min(lens), xp.max(lens)]), lambda lohi: _check_lengths(lohi, T))
    t = xp.reshape(xp.arange(T, dtype=np.int64), (T, 1))
    lens = xp.reshape(clamp(xp, lens, 0, T), (1, B))  # clamped: a deferred check's run stays in range
    src = xp.where(t < lens, lens - 1 - t, t)  # (T, B): the time step each output step reads
    if time_axis == 1:
        src = src.T
    src = xp.reshape(src, tuple(src.shape) + (1,) * (input.ndim - 2))
    return xp.take_along_axis(input, xp.broadcast_to(src, tuple(input.shape)), axis=time_axis)


def _check_lengths(lohi, T: int) -> None:
    for v in lohi.tolist():
        if not 0 <= v <= T:
            raise NodeError(f"sequence length {v} is out of range [0, {T}] (the time axis has {T} steps)")
