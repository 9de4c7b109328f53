"""What a CPU op offers a native program (:mod:`gpuops.onnx.programs`): for one node and the shapes
of its inputs, the planned native kernels that compute its output, called from C one after another.

A binding is registered per op type (``@planned("Conv")``) beside the op it mirrors, and returns a
:class:`NativeStep` or None (the node then runs as a step of its own). It sees the plan step (its
attributes, ``prepared`` and the op's ``since``) and each input as an :class:`Operand` (a value of
known shape and dtype computed at run time), a constant array (a weight, or a shape-like input known
at plan time), or None (omitted). A binding must compute what the op computes, to the bit where the op
runs the same kernel, and within float32 rounding of the op elsewhere.

Each kernel call is ``int fn(const void* params, const void* a, const void* b, void* y)``, for a wide
one ``int fn(const void* params, const void* a, const void* b, void* y, const void* c, void* z)``, and for
one with a fourth input ``d`` the same with ``const void* d`` last (``cpu_kernels/program.c``): the
``*_planned_*`` and ``*_program_*`` functions of the kernel files.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable, NamedTuple

import numpy as np

from ... import native

F32 = np.dtype(np.float32)


class Operand(NamedTuple):
    """An input computed at run time: its shape and dtype for this signature."""

    shape: tuple
    dtype: np.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)


RERUN = 2  # a call's status: run the nodes one by one (cpu_kernels/program.c)
OUTPUT = -1  # a call's operand position that reads the step's output (a later pass over it)


def output(k: int) -> int:
    """A call's operand position that reads the step's output ``k``, which an earlier call of the step wrote
    (:data:`OUTPUT` is output 0)."""
    return -1 - k


class Call(NamedTuple):
    """One kernel call: ``fn`` (a ctypes function of :mod:`gpuops.native`) with ``params`` (an array or
    ctypes structure it reads, or its address as an int), reading inputs ``a`` and ``b`` (input
    positions, :data:`OUTPUT` or another :func:`output`, or None), writing output ``out`` (an output index). A
    ``wide`` kernel, ``fn(params, a, b, y, c, z)``, also reads input ``c`` and writes output ``z``; with ``d``
    (an input), ``fn(params, a, b, y, c, z, d)``."""

    fn: Any
    params: Any
    a: int | None
    b: int | None = None
    c: int | None = None
    z: int | None = None
    wide: bool = False
    out: int = 0
    d: int | None = None


class NativeStep(NamedTuple):
    """A node as a program computes it: ``calls`` in order, writing its output 0 (``dtype``, ``shape``) and
    the outputs ``extra`` lists as (index, shape), float32, or (index, shape, dtype); or, with no calls, ``alias``: output 0 is input
    ``alias`` seen with ``shape`` (a reshape). ``holds``: what the calls' parameters point into (kept alive
    with the program). A call returns 0, non-zero when its scratch could not be allocated, or
    :data:`RERUN` (its input is out of the node's domain: an index out of range), which runs the program's
    nodes one by one, so that the node raises its own error. ``pieces``: (input position, byte offset) of
    the inputs that calls copy whole into one range of output 0 (a Concat of one row), which a program
    may make there instead, without the copy."""

    shape: tuple
    calls: tuple = ()
    alias: int | None = None
    holds: Any = None
    extra: tuple = ()
    dtype: np.dtype = np.dtype(np.float32)
    pieces: tuple = ()


_BINDINGS: dict[tuple[str, str], Callable] = {}


def planned(op_type: str, domain: str = ""):
    """Register the decorated ``binding(step, operands) -> NativeStep | None`` for ``domain::op_type``."""
    def register(fn: Callable) -> Callable:
        if (domain, op_type) in _BINDINGS:
            raise ValueError(f"{domain or 'ai.onnx'}::{op_type}: a native step is registered twice")
        _BINDINGS[(domain, op_type)] = fn
        return fn
    return register


def binding(domain: str, op_type: str) -> Callable | None:
    return _BINDINGS.get((domain, op_type))


_BLAS_FREE: dict[tuple[str, str], Callable] = {}


def blas_free(op_type: str, domain: str = ""):
    """Register the decorated ``test(step, shape_of) -> bool`` for ``domain::op_type``, an op that may call
    NumPy's BLAS (``gpuops.onnx.programs.BLAS_OPS``): whether a run of ``step`` at these shapes will not
    (``shape_of(name)``: the value's (shape, dtype), or None where unknown). Where every such step says so,
    the programs hold the BLAS at one thread and split their products across the native pool."""
    def register(fn: Callable) -> Callable:
        _BLAS_FREE[(domain, op_type)] = fn
        return fn
    return register


def runs_blas_free(step, shape_of: Callable) -> bool:
    """The registered :func:`blas_free` test of ``step`` (False where there is none)."""
    test = _BLAS_FREE.get((step.domain, step.op_type))
    return test is not None and bool(test(step, shape_of))


def params(*values) -> np.ndarray:
    """A planned kernel's int64 parameters: ints as they are, floats as a double's bits (``param_float``
    in ``cpu_kernels/common.h``)."""
    out = np.empty(len(values), np.int64)
    for i, v in enumerate(values):
        out[i] = np.float64(v).view(np.int64) if isinstance(v, float) else int(v)
    out.flags.writeable = False
    return out


def address(obj) -> int:
    """The address of a kernel (a ctypes function), a ctypes structure, an array, or an int as it is."""
    if isinstance(obj, int):
        return obj
    if isinstance(obj, np.ndarray):
        return obj.ctypes.data
    if isinstance(obj, ctypes._CFuncPtr):
        return ctypes.cast(obj, ctypes.c_void_p).value
    return ctypes.addressof(obj)


def kernel(name: str):
    """The native kernel ``name``, or None (native kernels off or unavailable: no program)."""
    return native.function(name)


def is_f32(x) -> bool:
    """Whether ``x`` is a float32 run-time operand."""
    return type(x) is Operand and x.dtype == F32


def placeholder(x: Operand) -> np.ndarray:
    """A read-only float32 array of ``x``'s shape holding no memory (for shape-only calls)."""
    return np.broadcast_to(np.zeros((), x.dtype), x.shape)
