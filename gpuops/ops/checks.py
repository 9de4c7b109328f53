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

_state = threading.local()


class Deferred:
    """The checks of one run, in node order: (device values, check of their host copy, node)."""

    def __init__(self):
        self.pending: list[tuple[object, Callable, object]] = []
        self.node: object = ""  # the executor's current node (a plan Step, or text), for messages

    def check(self) -> None:
        """Read every pending check's values (one explicit transfer each) and run the checks in node
        order; the first failure raises, naming its node."""
        for values, fn, node in self.pending:
            try:
                fn(to_host(values))
            except NodeError as e:
                where = node.describe() if hasattr(node, "describe") else str(node or "")
                if where and where not in str(e):
                    raise NodeError(f"{where}: {e}") from None
                raise


def active() -> Deferred | None:
    """The innermost :func:`deferred` block's checks on this thread, if any."""
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else None


class deferred:
    """``with deferred() as d:`` collects the checks of the ops run inside the block (this thread) in
    the :class:`Deferred` ``d`` (a plain class: the executor opens one per run)."""

    __slots__ = ("d",)

    def __enter__(self) -> Deferred:
        self.d = Deferred()
        _state.stack = getattr(_state, "stack", []) + [self.d]
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
