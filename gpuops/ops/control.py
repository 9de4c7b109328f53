"""Control flow: If, Loop and Scan.

Graph attributes arrive as :class:`gpuops.onnx.session.Subgraph` callables (``body(*inputs) -> list``)
that see the enclosing scope. Values are tensors, sequences (Python lists) or optionals (``None`` when
empty), and pass through these ops untouched. Branch conditions, trip counts and sequence lengths are
``host_inputs``; a Loop's per-iteration condition is read with :func:`gpuops.device.to_host`, the one
device->host transfer each iteration needs to decide whether to go on.
"""

import numpy as np

from ..device import to_host
from ..dtypes import np_dtype
from ..errors import NodeError
from ..registry import op


def _scalar(value, what: str):
    """The single element of a host array (a condition or a count) as a Python value."""
    value = np.asarray(value)
    if value.size != 1:
        raise NodeError(f"{what} must hold a single element, got shape {value.shape}")
    return value.item()


def _empty_scan_output(xp, body, index: int):
    """A scan output of zero iterations: shape ``(0, *element shape)`` and the element type the body
    declares for output ``index`` where it declares them (``Subgraph.output_types``), else float ``(0,)``."""
    types = getattr(body, "output_types", None)
    tt = types[index].tensor_type if types and types[index].HasField("tensor_type") else None
    dtype = np_dtype(tt.elem_type) if tt is not None and tt.elem_type else np.dtype(np.float32)
    dims = list(tt.shape.dim) if tt is not None and tt.HasField("shape") else None
    shape = (0,)
    if dims is not None and all(d.HasField("dim_value") for d in dims):
        shape += tuple(d.dim_value for d in dims)
    return xp.zeros(shape, dtype=dtype)


def _stack(xp, items: list, what: str):
    """Per-iteration tensors stacked along a new axis 0 (every iteration must give one shape)."""
    first = items[0]
    for t, item in enumerate(items):
        if isinstance(item, list) or item is None:
            kind = "a sequence" if isinstance(item, list) else "an empty optional"
            raise NodeError(f"{what} must be a tensor, got {kind} in iteration {t}")
        if tuple(item.shape) != tuple(first.shape) or item.dtype != first.dtype:
            raise NodeError(f"{what} changed from {first.dtype}{list(first.shape)} in iteration 0 to "
                            f"{item.dtype}{list(item.shape)} in iteration {t}")
    return xp.stack(items, axis=0)


def _axis(axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise NodeError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


# -- If --------------------------------------------------------------------------------------------

@op("If", since=1, host_inputs=(0,))
def If(xp, cond, *, then_branch, else_branch):
    if len(then_branch.output_names) != len(else_branch.output_names):
        raise NodeError(f"then_branch has {len(then_branch.output_names)} outputs but else_branch has "
                        f"{len(else_branch.output_names)}")
    branch = then_branch if _scalar(cond, "If condition") else else_branch
    return tuple(branch())


# -- Loop ------------------------------------------------------------------------------------------

@op("Loop", since=1, host_inputs=(0, 1), syncs="reads the body's condition output after every iteration")
def Loop(xp, M=None, cond=None, *v_initial, body):
    n_carried = len(body.input_names) - 2
    if n_carried < 0:
        raise NodeError(f"the Loop body needs at least 2 inputs (iteration_num, cond), has {n_carried + 2}")
    if len(v_initial) > n_carried:
        raise NodeError(f"Loop got {len(v_initial)} loop-carried values but its body takes {n_carried}")
    # trailing empty optionals are dropped by the executor: put them back
    carried = list(v_initial) + [None] * (n_carried - len(v_initial))
    n_scan = len(body.output_names) - 1 - n_carried
    if n_scan < 0:
        raise NodeError(f"the Loop body has {len(body.output_names)} outputs, fewer than "
                        f"1 + {n_carried} (cond + loop-carried values)")
    trip = None if M is None else int(_scalar(M, "Loop trip count M"))
    go = True if cond is None else bool(_scalar(cond, "Loop condition"))
    cond_value = xp.asarray(go)
    scans: list[list] = [[] for _ in range(n_scan)]
    i = 0
    # like onnxruntime, the body's condition output is honoured even when the cond input is omitted
    while go and (trip is None or i < trip):
        outs = body(xp.asarray(i, dtype=xp.int64), cond_value, *carried)
        cond_value, carried = outs[0], list(outs[1:1 + n_carried])
        for k, value in enumerate(outs[1 + n_carried:]):
            scans[k].append(value)
        go = bool(_scalar(to_host(cond_value), "Loop body condition output"))
        i += 1
    stacked = [_stack(xp, s, f"Loop scan output {k}") if s else _empty_scan_output(xp, body, 1 + n_carried + k)
               for k, s in enumerate(scans)]
    return tuple(carried + stacked)


# -- Scan ------------------------------------------------------------------------------------------

def _scan_body_counts(body, n_inputs: int, num_scan_inputs: int) -> tuple[int, int]:
    n_state = n_inputs - num_scan_inputs
    if num_scan_inputs < 1 or n_state < 0:
        raise NodeError(f"num_scan_inputs={num_scan_inputs} does not fit {n_inputs} state and scan inputs")
    if len(body.input_names) != n_inputs:
        raise NodeError(f"the Scan body takes {len(body.input_names)} inputs, the node gives {n_inputs}")
    n_out = len(body.output_names) - n_state
    if n_out < 0:
        raise NodeError(f"the Scan body has {len(body.output_names)} outputs, fewer than its {n_state} states")
    return n_state, n_out


def _flags(values, n: int, what: str) -> list[int]:
    values = [0] * n if values is None else list(values)
    if len(values) != n:
        raise NodeError(f"{what} has {len(values)} entries, expected {n}")
    return values


@op("Scan", since=8, host_inputs=(0,))
def Scan8(xp, sequence_lens=None, *initial_state_and_scan_inputs, body, num_scan_inputs, directions=None):
    # opset 8: axis 0 of states and scan inputs is a batch axis, axis 1 of scan inputs the sequence axis
    args = initial_state_and_scan_inputs
    n_state, n_out = _scan_body_counts(body, len(args), num_scan_inputs)
    states, scans = args[:n_state], args[n_state:]
    dirs = _flags(directions, num_scan_inputs, "directions")
    batch, seq_len = scans[0].shape[0], scans[0].shape[1]
    if batch == 0:
        raise NodeError("Scan (opset 8) needs a non-empty batch")
    for s in scans:
        if s.ndim < 2 or s.shape[:2] != (batch, seq_len):
            raise NodeError(f"every scan input needs shape [batch={batch}, sequence={seq_len}, ...], "
                            f"got {list(s.shape)}")
    lens = [seq_len] * batch
    if sequence_lens is not None:
        lens = [int(n) for n in np.asarray(sequence_lens).reshape(-1)]
        if len(lens) != batch or any(not 0 <= n <= seq_len for n in lens):
            raise NodeError(f"sequence_lens {lens} must give {batch} lengths in [0, {seq_len}]")
    final_states: list[list] = [[] for _ in range(n_state)]
    steps: list[list] = [[[] for _ in range(batch)] for _ in range(n_out)]  # [output][batch][t]
    for b in range(batch):
        st = [s[b] for s in states]
        for t in range(lens[b]):
            elems = [s[b, lens[b] - 1 - t if d else t] for s, d in zip(scans, dirs)]
            outs = body(*st, *elems)
            st = outs[:n_state]
            for k, value in enumerate(outs[n_state:]):
                steps[k][b].append(value)
        for k, value in enumerate(st):
            final_states[k].append(value)
    results = [_stack(xp, f, f"Scan state {k}") for k, f in enumerate(final_states)]
    for k, per_batch in enumerate(steps):
        sample = next((items[0] for items in per_batch if items), None)
        if sample is None:
            raise NodeError("Scan cannot shape a scan output when every sequence is empty")
        what = f"Scan output {n_state + k}"
        # past a sequence's length the scan output is undefined: zeros here
        rows = [_stack(xp, items + [xp.zeros_like(sample)] * (seq_len - len(items)), what)
                for items in per_batch]
        results.append(_stack(xp, rows, what))
    return tuple(results)


@op("Scan", since=9)
def Scan(xp, *initial_state_and_scan_inputs, body, num_scan_inputs, scan_input_axes=None,
         scan_input_directions=None, scan_output_axes=None, scan_output_directions=None):
    args = initial_state_and_scan_inputs
    n_state, n_out = _scan_body_counts(body, len(args), num_scan_inputs)
    states = list(args[:n_state])
    in_axes = _flags(scan_input_axes, num_scan_inputs, "scan_input_axes")
    in_dirs = _flags(scan_input_directions, num_scan_inputs, "scan_input_directions")
    out_axes = _flags(scan_output_axes, n_out, "scan_output_axes")
    out_dirs = _flags(scan_output_directions, n_out, "scan_output_directions")
    scans = []  # each scan input with its sequence axis moved first and in iteration order
    for s, axis, d in zip(args[n_state:], in_axes, in_dirs):
        s = xp.moveaxis(s, _axis(axis, s.ndim, "scan_input_axes entry"), 0)
        scans.append(xp.flip(s, axis=0) if d else s)
    seq_len = scans[0].shape[0]
    if any(s.shape[0] != seq_len for s in scans):
        raise NodeError(f"scan inputs differ in sequence length: {[s.shape[0] for s in scans]}")
    steps: list[list] = [[] for _ in range(n_out)]
    for t in range(seq_len):
        outs = body(*states, *[s[t] for s in scans])
        states = list(outs[:n_state])
        for k, value in enumerate(outs[n_state:]):
            steps[k].append(value)
    results = []
    for k, (items, axis, d) in enumerate(zip(steps, out_axes, out_dirs)):
        if items:
            out = _stack(xp, items[::-1] if d else items, f"Scan output {n_state + k}")
        else:
            out = _empty_scan_output(xp, body, n_state + k)
        results.append(xp.moveaxis(out, 0, _axis(axis, out.ndim, "scan_output_axes entry")))
    return tuple(states + results)
