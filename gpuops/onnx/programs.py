"""Native programs: a CPU plan's runs of consecutive nodes whose ops have planned native kernels for one
feed-shape signature, run as one step that calls the kernels from C (``cpu_kernels/program.c``).

A small model spends as much time between its kernels as in them: the executor's loop, the op's
Python, a new NumPy array per node, and the caches those evict (a node of ResNet-18's narrow stages
takes 6 us in its kernel and 10-12 us in a run). A program does the Python once per run: it takes its
inputs, allocates its outputs and one arena for the values that live and die inside it, and hands C
the list of calls. Each node's binding (:mod:`gpuops.ops.cpu.planned`) sets its kernels' parameters
once, from the shapes of the signature, to what the op itself computes.

:func:`compile_programs` makes them for a plan whose values' shapes a run recorded (the shape-specialized
plans of :mod:`gpuops.onnx.shape_plans`). The arena places each internal value at an offset by first
fit over the run's lifetimes, allocating a node's output before freeing its inputs, so that no kernel
writes over what it reads; the inputs of a Concat of one row (batch 1, along the channels) are made
where the Concat would copy them (:func:`_placements`). A program checks its inputs' shapes and dtypes
at each run; inputs of other shapes (a value whose shape depends on data) run the nodes one by one, as
the plan would.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
from typing import Any

import numpy as np

from .. import native
from ..ops.cpu import planned as _planned
from ..threads import blas_single
from ..executor.run import call_op
from ..registry import OpImpl
from .plan import Plan, Step, last_reads, plan_liveness

log = logging.getLogger("gpuops")

DOMAIN = "ai.gpuops"
MIN_CALLS = 2  # a program of one kernel call saves nothing over the node's own step
ALIGN = 64
KEPT_ARENA_BYTES = 64 << 10
"""A program's arena up to this size is kept between its calls, one per call running at once (a larger one
is made for each call, and freed after it)."""
NONE = np.iinfo(np.int64).min  # cpu_kernels/program.c's PROGRAM_NONE
BLAS_KERNELS = frozenset({"matmul_planned_f32", "attention_program_f32"})  # products by the BLAS (blas.h)
# ops whose own steps may call the BLAS (NumPy's matmul): a product of theirs wakes its workers, which then
# spin beside the native pool through the rest of the run
BLAS_OPS = frozenset({"MatMul", "Gemm", "FusedGemm", "FusedMatMul", "Conv", "FusedConv", "ConvTranspose", "Einsum",
                      "LSTM", "GRU", "RNN", "DynamicQuantizeLSTM", "AttnLSTM", "Attention", "MultiHeadAttention",
                      "QAttention", "MatMulInteger", "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "QLinearMatMul",
                      "QGemm", "ConvInteger", "QLinearConv"})
_BLAS_SINGLE = blas_single()


# steps that never call the BLAS: ai.onnx.ml's trees, encoders and preprocessing, and the glue the classic-ML
# converters put around them (ai.onnx.ml's linear and SVM ops multiply by NumPy's matmul)
_ML_PRODUCTS = frozenset({"LinearClassifier", "LinearRegressor", "SVMClassifier", "SVMRegressor"})
_GLUE = frozenset({"Cast", "Identity", "Reshape", "Flatten", "Concat", "ArgMax", "ArgMin", "Softmax", "Sigmoid",
                   "Add", "Sub", "Mul", "Div", "Squeeze", "Unsqueeze"})


def calls_blas(plan: Plan) -> bool:
    """Whether a run of ``plan`` may call the BLAS, and so needs the session's BLAS thread count. Not a
    converted classic-ML model made of trees, encoders, native programs without BLAS products and
    their glue: there, setting the count and restoring it after every run took as long as the run."""
    got = plan.__dict__.get("_calls_blas")
    if got is None:
        got = plan.__dict__["_calls_blas"] = not all(
            (not s.subgraphs) and (
                (s.domain == DOMAIN and s.op_type == "NativeProgram" and not s.impl.fn.blas)
                or (s.domain == "ai.onnx.ml" and s.op_type not in _ML_PRODUCTS)
                or (s.domain == "" and s.op_type in _GLUE))
            for s in plan.steps)
    return got


_F32 = np.dtype(np.float32)
_addressof, _from_buffer = ctypes.addressof, ctypes.c_char.from_buffer


def compile_programs(plan: Plan, shapes: dict[str, tuple], outer: dict | None = None) -> tuple[Plan, dict] | None:
    """``plan`` with its runs of natively bound nodes as program steps, its subgraphs' too (an If's branches,
    a Loop's body: those a run recorded), and ``{"programs", "program_nodes"}``; None when no run forms
    (or native kernels are unavailable). ``shapes``: name -> (shape, dtype) of the values a run of
    ``plan`` stored; ``outer``: an enclosing plan's constants, by name."""
    if native.function("program_run") is None:
        return None
    known = dict(shapes)
    consts = {**(outer or {}), **{k: v for k, v in plan.weights.items() if k not in plan.optional_inputs}}
    bound: list[_planned.NativeStep | None] = []
    subgraphs: dict[int, dict] = {}  # step index -> its compiled subgraphs
    made = {"programs": 0, "program_nodes": 0}
    for k, step in enumerate(plan.steps):
        ns = _bind(step, known, consts)
        if ns is not None:
            for i, shape, dtype in _outputs(step, ns):
                known[step.outputs[i]] = (shape, dtype)
        bound.append(ns)
        for name, sub in step.subgraphs.items():
            got = compile_programs(sub, known, consts)
            if got is not None:
                subgraphs.setdefault(k, dict(step.subgraphs))[name] = got[0]
                for key in made:
                    made[key] += got[1][key]
    runs, i = [], 0
    while i < len(bound):
        j = i
        while j < len(bound) and bound[j] is not None:
            j += 1
        if sum(len(ns.calls) for ns in bound[i:j]) >= MIN_CALLS:
            runs.append((i, j))
        i = j + 1
    if not runs and not subgraphs:
        return None
    later = last_reads(plan)
    keep = set(plan.outputs) | set(plan.initializers)

    def copy(k: int) -> Step:
        s = plan.steps[k]
        return dataclasses.replace(s, release=[], subgraphs=subgraphs.get(k, s.subgraphs))

    steps, done = [], 0
    for i, j in runs:
        steps.extend(copy(k) for k in range(done, i))
        steps.append(Program(plan.steps[i:j], bound[i:j], known, consts, later, keep, j).step())
        made["programs"] += 1
        made["program_nodes"] += j - i
        done = j
    steps.extend(copy(k) for k in range(done, len(plan.steps)))

    def shape_of(name: str):
        got = known.get(name)
        if got is None and name in consts:
            got = (consts[name].shape, consts[name].dtype)
        return got

    if outer is None and not any(s.subgraphs or (s.op_type in BLAS_OPS and not _planned.runs_blas_free(s, shape_of))
                                 for s in steps if s.op_type != "NativeProgram"):
        for s in steps:  # nothing else wakes the BLAS's workers: the programs keep them asleep
            if s.op_type == "NativeProgram":
                s.impl.fn.blas_single = s.impl.fn.blas
    out = dataclasses.replace(plan, steps=steps, by_node=plan)
    plan_liveness(out, keep=keep)
    return out, made


def _outputs(step: Step, ns: _planned.NativeStep) -> list[tuple[int, tuple, np.dtype]]:
    """(output index, shape, dtype) of each output the bound step makes."""
    return [(0, tuple(ns.shape), np.dtype(ns.dtype))] + [(e[0], tuple(e[1]), np.dtype(e[2]) if len(e) > 2 else _F32)
                                                          for e in ns.extra]


def _bind(step: Step, known: dict, consts: dict) -> _planned.NativeStep | None:
    """The step's :class:`NativeStep` for the known shapes, or None."""
    hook = _planned.binding(step.domain, step.op_type)
    if hook is None or step.subgraphs or step.impl.device not in (None, "cpu") or not step.outputs \
            or not step.outputs[0]:
        return None
    operands: list[Any] = []
    for i, name in enumerate(step.inputs):
        if not name:
            operands.append(None)
        elif i in step.host_consts:
            operands.append(step.host_consts[i])
        elif name in consts:
            operands.append(consts[name])
        elif name in known:
            operands.append(_planned.Operand(*known[name]))
        else:
            return None
    try:
        ns = hook(step, operands)
    except Exception as e:  # noqa: BLE001 - the node runs as its own step, which reports a real error
        log.debug("gpuops: no native step for %s: %s: %s", step.describe(), type(e).__name__, e)
        return None
    if ns is None:
        return None
    made = {k for k, _, _ in _outputs(step, ns)}
    if any(o and k not in made for k, o in enumerate(step.outputs)) or (ns.alias is not None and ns.extra):
        return None  # an output the binding does not make
    for c in ns.calls:  # what the calls read at run time: run-time values (of the types the binding checked),
        for pos in (c.a, c.b, c.c, c.d):  # float32 constants, or the step's outputs that it makes
            if pos is not None and (-1 - pos not in made if pos < 0 else not (
                    type(operands[pos]) is _planned.Operand or _const_f32(operands[pos]))):
                return None
        if any(k is not None and (k >= len(step.outputs) or not step.outputs[k]) for k in (c.z, c.out)):
            return None
    if ns.alias is not None:  # a reshape of a run-time value, which keeps its dtype
        alias = operands[ns.alias]
        return ns._replace(dtype=np.dtype(alias.dtype)) if type(alias) is _planned.Operand else None
    return ns


def _const_f32(a) -> bool:
    return type(a) is np.ndarray and a.dtype == _F32 and a.flags.c_contiguous


class Program:
    """The steps ``steps[i]`` bound as ``bound[i]``, as one step: its inputs (values made before it,
    read by its calls), outputs (values read after it, or the plan's), arena layout and C step table."""

    def __init__(self, steps: list[Step], bound: list, known: dict, consts: dict, later: dict[str, int],
                 keep: set[str], end: int):
        self.nodes = steps
        self.consts = consts
        produced: dict[str, int] = {}  # value -> the index of the step that makes it
        root: dict[str, str] = {}  # value -> the value whose buffer it is (an alias's source)
        for k, (s, ns) in enumerate(zip(steps, bound)):
            for i, _, _ in _outputs(s, ns):
                produced[s.outputs[i]] = k
            out = s.outputs[0]
            root[out] = root.get(s.inputs[ns.alias], s.inputs[ns.alias]) if ns.alias is not None else out
            for e in ns.extra:
                root[s.outputs[e[0]]] = s.outputs[e[0]]
        escapes = {o for o in produced if o in keep or later.get(o, -1) >= end}
        owned = {root[o] for o in escapes}  # buffers the program returns (as themselves or reshaped)
        self.in_names: list[str] = []
        last_use: dict[str, int] = {}
        for k, (s, ns) in enumerate(zip(steps, bound)):
            reads = [pos for c in ns.calls for pos in (c.a, c.b, c.c, c.d)] + [ns.alias]
            for pos in reads:
                if pos is None or pos < 0:  # the step's own output
                    continue
                name = s.inputs[pos]
                last_use[root.get(name, name)] = k
                if name not in produced and name not in consts and name not in self.in_names:
                    self.in_names.append(name)
        place, in_place = _placements(steps, bound, produced, root, owned)
        for x, (host, _) in place.items():  # a host lives until the last read of any value made in it
            last_use[host] = max(last_use.get(host, -1), last_use.pop(x, -1))
        self.shapes = {n: tuple(known[n][0]) for n in list(self.in_names) + list(produced)}
        self.dtypes = {n: np.dtype(known[n][1]) for n in list(self.in_names) + list(produced)}
        self.in_shapes = [self.shapes[n] for n in self.in_names]
        self.in_dtypes = [np.dtype(known[n][1]) for n in self.in_names]
        self.out_names = sorted(escapes, key=lambda o: produced[o])
        self.out_roots = sorted((r for r in owned if r in produced), key=lambda o: produced[o])
        self.n_in, self.n_out = len(self.in_names), len(self.out_roots)
        const_names: list[str] = []
        loc: dict[str, int] = {n: -1 - i for i, n in enumerate(self.in_names)}
        for i, n in enumerate(self.out_roots):
            loc[n] = -1 - (self.n_in + i)

        def where(s: Step, pos: int | None) -> int:
            if pos is None:
                return NONE
            if pos < 0:  # the step's output -1 - pos
                return loc[s.outputs[-1 - pos]]
            name = s.inputs[pos]
            if name in loc:
                return loc[name]
            if name not in const_names:  # a float32 weight: an external address fixed at plan time
                const_names.append(name)
            return -1 - (self.n_in + self.n_out + const_names.index(name))

        free: list[tuple[int, int]] = []  # (offset, size) of the arena's free blocks, sorted
        size = 0
        table, holds = [], []
        for k, (s, ns) in enumerate(zip(steps, bound)):
            if ns.alias is not None:
                loc[s.outputs[0]] = loc[root[s.outputs[0]]]
            for i, shape, dtype in ([] if ns.alias is not None else _outputs(s, ns)):
                out = s.outputs[i]
                if out in loc:  # returned (an array of its own), or a host made with its first piece
                    continue
                if out in place:
                    host, at = place[out]
                    if host not in loc:
                        loc[host], size = _first_fit(free, size, self._bytes(host))
                    loc[out] = loc[host] + at
                    continue
                loc[out], size = _first_fit(free, size, _aligned(dtype.itemsize * int(np.prod(shape, dtype=np.int64))))
            for c in ns.calls:
                if (k, c.a) in in_place:  # a piece made where it is copied to
                    continue
                table.append((_planned.address(c.fn), _planned.address(c.params), where(s, c.a), where(s, c.b),
                              loc[s.outputs[c.out]], where(s, c.c), NONE if c.z is None else loc[s.outputs[c.z]],
                              where(s, c.d), 2 if c.d is not None else int(c.wide)))
                holds.append(c)
            holds.append(ns.holds)
            for r, last in list(last_use.items()):
                if last == k and r in produced and loc[r] >= 0:
                    free.append((loc[r], self._bytes(r)))
                    free.sort()
                    del last_use[r]
        self.arena_bytes = size
        self.holds = holds
        self.table = np.array(table, dtype=np.int64).reshape(-1, 9)
        self.table_address, self.n_calls = self.table.ctypes.data, len(self.table)
        self.ext = np.zeros(self.n_in + self.n_out + len(const_names), np.int64)
        for i, n in enumerate(const_names):
            self.ext[self.n_in + self.n_out + i] = consts[n].ctypes.data
        self.root = {o: root[o] for o in self.out_names}
        self.out_arrays = [(self.shapes[r], self.dtypes[r], int(np.prod(self.shapes[r])) > 0) for r in self.out_roots]
        # each output: (from the output arrays or the inputs, its index there, the shape to give it or None)
        self.out_from = [(r in produced, self.out_roots.index(r) if r in produced else self.in_names.index(r),
                          None if self.shapes[r] == self.shapes[n] else self.shapes[n])
                         for n in self.out_names for r in (root[n],)]
        self.scratch: list = []  # (ext, its address, arena or None, the arena's address) of no call running now
        self.run = native.function("program_run")
        self.blas = any(type(c) is _planned.Call and c.fn.__name__ in BLAS_KERNELS for c in holds)
        self.blas_single = False  # its products split across the native pool, the BLAS at one thread
        self.name = f"{steps[0].name}..{steps[-1].name}" if len(steps) > 1 else steps[0].name

    def _bytes(self, name: str) -> int:
        return _aligned(self.dtypes[name].itemsize * int(np.prod(self.shapes[name], dtype=np.int64)))

    def step(self) -> Step:
        """The plan step that runs this program."""
        impl = OpImpl("NativeProgram", DOMAIN, 1, self, device="cpu")
        return Step(self.name, "NativeProgram", DOMAIN, impl, list(self.in_names), list(self.out_names), {})

    def __call__(self, xp, *inputs):
        for i, (x, dtype, shape) in enumerate(zip(inputs, self.in_dtypes, self.in_shapes)):
            if type(x) is not np.ndarray or x.dtype != dtype or x.shape != shape:
                if shape == () and isinstance(x, np.generic) and x.dtype == dtype:  # NumPy's 0-d results
                    inputs = inputs[:i] + (np.array(x),) + inputs[i + 1:]
                    continue
                return self.one_by_one(xp, inputs)
        try:
            scratch = self.scratch.pop()  # (list.pop and append are atomic: concurrent calls take their own)
        except IndexError:
            scratch = self._scratch()
        ext, ext_address, arena, base = scratch
        copies = []  # inputs copied to C order, alive until the kernels are done
        for i, x in enumerate(inputs):
            try:
                ext[i] = _addressof(_from_buffer(x))
            except (TypeError, ValueError):  # read-only, or not C-contiguous
                if not x.flags.c_contiguous:
                    x = np.ascontiguousarray(x)
                    copies.append(x)
                ext[i] = x.ctypes.data
        arrays = []
        k = self.n_in
        for shape, dtype, nonempty in self.out_arrays:
            a = np.empty(shape, dtype)
            arrays.append(a)
            ext[k] = _addressof(_from_buffer(a)) if nonempty else 0
            k += 1
        if arena is None:  # a large arena: made for each call (held here while the kernels run)
            arena = np.empty(self.arena_bytes, np.uint8)
            base = _addressof(_from_buffer(arena))
        try:
            if self.blas_single and native.threads() > 1:
                with _BLAS_SINGLE:
                    rc = self.run(self.table_address, self.n_calls, base, ext_address)
            else:
                rc = self.run(self.table_address, self.n_calls, base, ext_address)
        finally:
            self.scratch.append(scratch)
        if rc:
            if rc == _planned.RERUN:
                return self.one_by_one(xp, inputs)
            raise MemoryError(f"a native kernel of {self.name} could not allocate its scratch")
        outs = []
        for made, i, shape in self.out_from:
            a = arrays[i] if made else inputs[i]  # (an input: a reshape of it)
            outs.append(a if shape is None else a.reshape(shape))
        return tuple(outs)

    def _scratch(self) -> tuple:
        """A call's own (``ext``: the addresses of its inputs, outputs and constants; ``ext``'s address; the
        arena, or None when it is made for each call; its address). Kept for the next call: an arena of at
        most :data:`KEPT_ARENA_BYTES`, and ``ext``."""
        ext = self.ext.copy()
        arena = base = None
        if self.arena_bytes <= KEPT_ARENA_BYTES:
            arena = np.empty(max(self.arena_bytes, 1), np.uint8)
            base = _addressof(_from_buffer(arena))
        return ext, _addressof(_from_buffer(ext)), arena, base

    def one_by_one(self, xp, inputs):
        """The nodes run as their own steps would (inputs of other shapes than planned, or a kernel's
        input out of its node's domain), an error naming its node."""
        env = dict(zip(self.in_names, inputs))
        for s in self.nodes:
            args = [s.host_consts[i] if i in s.host_consts else
                    (env[n] if n in env else self.consts[n]) if n else None for i, n in enumerate(s.inputs)]
            result = call_op(s.impl, xp, args, s.attrs, where=s.describe(), name=s.name)
            for name, value in zip(s.outputs, result if isinstance(result, tuple) else (result,)):
                if name:
                    env[name] = value
        return tuple(env[n] for n in self.out_names)


def _placements(steps: list[Step], bound: list, produced: dict, root: dict, owned: set):
    """(value -> (host, byte offset), the (step index, input position) of each copy that is then not
    made): the pieces of one-row Concats (``NativeStep.pieces``) that the program makes in their Concat's
    output, a host's own pieces in the host that holds it (DenseNet's chains of Concats: one buffer per
    block), for values made here as buffers of their own and not returned."""
    place: dict[str, tuple[str, int]] = {}
    in_place: set[tuple[int, int]] = set()
    for k, (s, ns) in enumerate(zip(steps, bound)):
        host = s.outputs[0]
        if host in owned:
            continue
        for pos, at in ns.pieces:
            x = s.inputs[pos]
            if x in produced and root.get(x) == x and x not in owned and x not in place:
                place[x] = (host, at)
                in_place.add((k, pos))
    for x in place:  # the outermost host of each
        host, at = place[x]
        while host in place:
            outer, more = place[host]
            host, at = outer, at + more
        place[x] = (host, at)
    return place, in_place


def _first_fit(free: list[tuple[int, int]], size: int, nbytes: int) -> tuple[int, int]:
    """(the offset of ``nbytes`` in the arena, its size after): the first free block that holds them, or the
    arena's end (made before the step's inputs are freed)."""
    for f, (off, room) in enumerate(free):
        if room >= nbytes:
            free[f] = (off + nbytes, room - nbytes)
            return off, size
    return size, size + nbytes


def _aligned(n: int) -> int:
    return max(ALIGN, -(-n // ALIGN) * ALIGN)
