"""Helpers shared by the CPU overrides: the host check and the per-step store of prepared data."""

from __future__ import annotations

import threading

import numpy as np

from ...registry import resolve


def generic(op_type: str, since: int, domain: str = ""):
    """The generic implementation an override at version ``since`` stands in for (its fallback)."""
    return resolve(domain, op_type, since, device=None).fn


def on_host(*arrays) -> bool:
    """True when every given array (None: an omitted input) is a NumPy array. A CUDA override falls
    back to the implementation the CPU gets, so an override here can be handed CuPy arrays: those go
    to the generic op."""
    for a in arrays:
        if a is not None and type(a) is not np.ndarray:
            return False
    return True


class Kept:
    """What a node derives from its constant inputs (a prepare hook's result, kept on the plan step
    for the session's life): made at plan time where that is known to pay, else at first need by
    :meth:`get`, once (concurrent runs wait for the one making it)."""

    MAX_ITEMS = 64  # keyed by input shape too: a model fed many shapes recomputes past this many

    def __init__(self):
        self._made: dict = {}
        self._lock = threading.Lock()

    def get(self, key, make):
        """``make()``'s value, kept under ``key``; a None result is not kept."""
        value = self._made.get(key)
        if value is not None:
            return value
        with self._lock:
            value = self._made.get(key)
            if value is None:
                value = make()
                if value is not None and len(self._made) < self.MAX_ITEMS:
                    self._made[key] = value
        return value

    def put(self, key, value) -> None:
        self._made[key] = value


def frozen(a):
    """``a`` as it is kept: read-only (what a run gets must not be able to change it)."""
    if isinstance(a, np.ndarray):
        a.flags.writeable = False
    return a
