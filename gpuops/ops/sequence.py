"""Sequence and optional ops.

A sequence is a Python ``list`` of device arrays; ops build new lists and never change the one they
are given (it may be read elsewhere). An optional is ``None`` when empty and the held value itself
(tensor or list) otherwise, so ``Optional``/``OptionalGetElement`` pass values through and every
opset's input-type variants (v15 optional-only, v18 tensor/sequence too) share one implementation.
Positions and split lengths are ``host_inputs``: small host values.
"""

import numpy as np

from ..errors import NodeError
from ..registry import op


def _sequence(value, what: str = "input_sequence") -> list:
    if not isinstance(value, list):
        kind = "an empty optional" if value is None else f"a tensor {type(value).__name__}"
        raise NodeError(f"{what} must be a sequence, got {kind}")
    return value


def _position(position, n: int, upper: int, what: str) -> int:
    """A host scalar position in ``[-n, upper]`` -> its non-negative index."""
    position = np.asarray(position)
    if position.size != 1 or position.dtype.kind not in "iu":
        raise NodeError(f"{what} must be an integer scalar, got {position.dtype} of shape {position.shape}")
    p = int(position.reshape(()))
    if not -n <= p <= upper:
        raise NodeError(f"{what} {p} is out of range [{-n}, {upper}] for a sequence of {n} tensor(s)")
    return p + n if p < 0 else p


@op("SequenceConstruct", since=11)
def SequenceConstruct(xp, *inputs):
    if any(x.dtype != inputs[0].dtype for x in inputs[1:]):
        raise NodeError(f"SequenceConstruct needs one element type, got {[str(x.dtype) for x in inputs]}")
    return list(inputs)


@op("SequenceEmpty", since=11)
def SequenceEmpty(xp, *, dtype=1):
    return []  # a list carries no element type: the tensors put in later do


@op("SequenceAt", since=11, host_inputs=(1,))
def SequenceAt(xp, input_sequence, position):
    seq = _sequence(input_sequence)
    return seq[_position(position, len(seq), len(seq) - 1, "SequenceAt position")]


@op("SequenceInsert", since=11, host_inputs=(2,))
def SequenceInsert(xp, input_sequence, tensor, position=None):
    seq = _sequence(input_sequence)
    if seq and tensor.dtype != seq[0].dtype:
        raise NodeError(f"cannot insert a {tensor.dtype} tensor into a sequence of {seq[0].dtype}")
    p = len(seq) if position is None else _position(position, len(seq), len(seq), "SequenceInsert position")
    return seq[:p] + [tensor] + seq[p:]


@op("SequenceErase", since=11, host_inputs=(1,))
def SequenceErase(xp, input_sequence, position=None):
    seq = _sequence(input_sequence)
    if position is None:
        if not seq:
            raise NodeError("SequenceErase on an empty sequence")
        return seq[:-1]
    p = _position(position, len(seq), len(seq) - 1, "SequenceErase position")
    return seq[:p] + seq[p + 1:]


@op("SequenceLength", since=11)
def SequenceLength(xp, input_sequence):
    return xp.asarray(len(_sequence(input_sequence)), dtype=xp.int64)


@op("SplitToSequence", since=11, host_inputs=(1,))
def SplitToSequence(xp, input, split=None, *, axis=0, keepdims=1):
    if not -input.ndim <= axis < input.ndim:
        raise NodeError(f"axis {axis} is out of range for a rank-{input.ndim} input")
    axis %= input.ndim
    size = input.shape[axis]
    lead = (slice(None),) * axis
    if split is None:  # pieces of length 1, the axis dropped unless keepdims
        return [input[lead + ((slice(i, i + 1),) if keepdims else (i,))] for i in range(size)]
    split = np.asarray(split)
    if split.ndim == 0:
        chunk = int(split)
        if chunk <= 0:
            raise NodeError(f"split must be positive, got {chunk}")
        lengths = [min(chunk, size - start) for start in range(0, size, chunk)]
    elif split.ndim == 1:
        lengths = [int(v) for v in split]
        if any(n < 0 for n in lengths) or sum(lengths) != size:
            raise NodeError(f"split {lengths} must be non-negative and sum to the axis size {size}")
    else:
        raise NodeError(f"split must be a scalar or 1-D, got shape {split.shape}")
    ends = [int(e) for e in np.cumsum(lengths)]
    return [input[lead + (slice(e - n, e),)] for n, e in zip(lengths, ends)]


@op("ConcatFromSequence", since=11)
def ConcatFromSequence(xp, input_sequence, *, axis, new_axis=0):
    seq = _sequence(input_sequence)
    if not seq:
        raise NodeError("ConcatFromSequence needs a non-empty sequence")
    rank = seq[0].ndim + (1 if new_axis else 0)
    if not -rank <= axis < rank:
        raise NodeError(f"axis {axis} is out of range for rank {rank}{' (new_axis=1)' if new_axis else ''}")
    axis %= rank
    return xp.stack(seq, axis=axis) if new_axis else xp.concat(seq, axis=axis)


@op("SequenceMap", since=17)
def SequenceMap(xp, input_sequence, *additional_inputs, body):
    inputs = [_sequence(input_sequence)] + list(additional_inputs)
    if len(inputs) > len(body.input_names):
        raise NodeError(f"SequenceMap got {len(inputs)} inputs but its body takes {len(body.input_names)}")
    inputs += [None] * (len(body.input_names) - len(inputs))  # trailing empty optionals come back
    n = len(inputs[0])
    for i, x in enumerate(inputs[1:], 1):
        if isinstance(x, list) and len(x) != n:
            raise NodeError(f"SequenceMap input {i} has {len(x)} elements, input_sequence has {n}")
    outputs: list[list] = [[] for _ in body.output_names]
    for i in range(n):
        outs = body(*[x[i] if isinstance(x, list) else x for x in inputs])
        for out, value in zip(outputs, outs):
            out.append(value)
    return tuple(outputs)


# -- optional ----------------------------------------------------------------------------------------

@op("Optional", since=15)
def Optional(xp, input=None, *, type=None):
    if input is None and type is None:
        raise NodeError("Optional without an input needs the 'type' attribute")
    return input


@op("OptionalHasElement", since=15)
def OptionalHasElement(xp, input=None):
    return xp.asarray(input is not None)


@op("OptionalGetElement", since=15)
def OptionalGetElement(xp, input=None):
    if input is None:
        raise NodeError("OptionalGetElement on an empty optional")
    return input
