"""Input checks that need device data (index bounds, batch indices), without a host sync per node.

An op hands :func:`require` a small device array of the values a check needs (an index's min and
max) and a function that raises :class:`NodeError` from their host copy. Outside a
:func:`deferred` block the check runs at once: on NumPy that is free, on a device it is one explicit
read. Inside one -- for the executor to open around a run on a device -- the arrays are kept and
:meth:`Deferred.check` reads them all after the last node, where the outputs are read anyway, and
raises the first failure. The run's values are then discarded, so an op whose check is deferred
must compute without faulting on bad data (indices clamped into range, as CuPy's gathers wrap).
A CUDA graph keeps the arrays its capture recorded: a replay refreshes them, and the same
:class:`Deferred` checks them again.
"""

from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from ..device import to_host
from ..errors import NodeError

class _State(threading.local):
    stack: tuple = ()  # the open deferred blocks' checks (a class default: reading it costs no AttributeError)


_state = _State()


class Deferred:
    """The checks of one run, in node order: (device values, check of their host copy, node)."""

    def __init__(self):
        self.pending: list[tuple[object, Callable, object]] = []
        self.node: object = ""  # the executor's current node (a plan Step, or text), for messages

    def check(self) -> None:
        """Read every pending check's values (one explicit transfer for all those of a dtype) and run
        the checks in node order; the first failure raises, naming its node."""
        for (_, fn, node), host in zip(self.pending, read_all([v for v, _, _ in self.pending])):
            try:
                fn(host)
            except NodeError as e:
                where = node.describe() if hasattr(node, "describe") else str(node or "")
                if where and where not in str(e):
                    raise NodeError(f"{where}: {e}") from None
                raise


def read_all(values: list) -> list:
    """Host copies of ``values`` (device arrays, in order), read in one transfer per array type and
    dtype: those of a group are concatenated on the device first (a replay of a BERT reads its
    embeddings' index bounds in one go, not one per Gather)."""
    groups: dict[tuple, list[int]] = {}
    for i, v in enumerate(values):
        groups.setdefault((type(v), v.dtype), []).append(i)
    out: list = [None] * len(values)
    for idx in groups.values():
        if len(idx) == 1:
            out[idx[0]] = to_host(values[idx[0]])
            continue
        from array_api_compat import array_namespace  # (imported with the device's namespace already)

        xp = array_namespace(values[idx[0]])
        flat = to_host(xp.concat([xp.reshape(values[i], (-1,)) for i in idx]))
        start = 0
        for i in idx:
            v = values[i]
            out[i] = flat[start:start + v.size].reshape(v.shape)
            start += v.size
    return out


def active() -> Deferred | None:
    """The innermost :func:`deferred` block's checks on this thread, if any."""
    stack = _state.stack
    return stack[-1] if stack else None


class deferred:
    """``with deferred() as d:`` collects the checks of the ops run inside the block (this thread) in
    the :class:`Deferred` ``d`` (a plain class: the executor opens one per run)."""

    __slots__ = ("d",)

    def __enter__(self) -> Deferred:
        self.d = Deferred()
        _state.stack = (*_state.stack, self.d)
        return self.d

    def __exit__(self, *exc):
        _state.stack = _state.stack[:-1]


def require(values, check: Callable) -> None:
    """Run ``check(host copy of values)`` (it raises ``NodeError`` on bad input) now, or defer it to
    the end of the run inside :func:`deferred` when ``values`` live on a device; the caller's
    computation must then stay safe on bad input."""
    d = active()
    if d is None or isinstance(values, np.ndarray):
        check(to_host(values))
    else:
        d.pending.append((values, check, d.node))
