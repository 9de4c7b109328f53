"""Profiling a run (``InferenceSession.run(..., profile=True)``): a record per node
(:class:`NodeTimer`), the run's host syncs and kernel launches, and the profile written as JSON."""

from __future__ import annotations

import json
import time

from ..device import Device
from ..memory import MemoryManager
from .values import nbytes


class NodeTimer:
    """Wall time (and device time, from CUDA events) and pool growth of one node."""

    def __init__(self, device: Device, memory: MemoryManager):
        self.device, self.memory = device, memory
        self.bytes0 = memory.used_bytes()
        self.syncs0 = device.host_sync_count()
        self.events = None
        if device.kind == "cuda":
            self.events = (device.lib.cuda.Event(), device.lib.cuda.Event())
            self.events[0].record()
        self.t0 = time.perf_counter()

    def done(self, step, outs, in_place: bool = False) -> dict:
        rec = {"node": step.name, "op": step.op_type, "in_place": in_place}
        if self.events is not None:
            self.events[1].record()
            self.events[1].synchronize()
            rec["device_ms"] = self.device.lib.cuda.get_elapsed_time(*self.events)
        rec["wall_ms"] = (time.perf_counter() - self.t0) * 1e3
        rec["output_bytes"] = sum(nbytes(v) for v in outs)
        rec["pool_bytes_delta"] = self.memory.used_bytes() - self.bytes0
        rec["host_syncs"] = self.device.host_sync_count() - self.syncs0
        return rec


def counters(device: Device) -> tuple:
    """(host syncs, kernel launches or None) of this thread so far: what :func:`summary` counts from."""
    return device.host_sync_count(), device.kernel_launch_count()


def since(device: Device, start: tuple) -> tuple:
    """The host syncs and kernel launches (None where not known) since :func:`counters` gave ``start``."""
    syncs, launches = start
    syncs = device.host_sync_count() - syncs
    launches = None if launches is None else device.kernel_launch_count() - launches
    return syncs, launches


def summary(device: Device, nodes: list, counts: tuple) -> dict:
    """A run's profile: ``{"device", "nodes", "host_syncs", "kernel_launches"}`` from the node records
    and the run's counts (:func:`since`)."""
    syncs, launches = counts
    return {
        "device": str(device),
        "nodes": nodes,
        "host_syncs": {"count": syncs,
                       "nodes": list(dict.fromkeys(r["node"] for r in nodes if r["host_syncs"]))},
        "kernel_launches": launches,
    }


def write(profile: dict, path) -> None:
    """Write a profile (:func:`summary`) as JSON."""
    with open(path, "w") as f:
        json.dump(profile, f, indent=1)
