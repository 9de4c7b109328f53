"""The executor: runs plans on a device, and calls ops the way a plan's steps call them.

* :mod:`.run`: :func:`run_plan` (a plan's steps over a run's values, in-place reuse of dying
  buffers, liveness releases), :class:`RunContext`, :class:`Subgraph` (graph attributes) and
  :func:`call_op`, the one call of an op outside a plan (MDF's ``onnx::`` functions, constant folding);
* :mod:`.cuda_graphs`: a session's CUDA graphs, one per feed-shape signature;
* :mod:`.profile`: per-node records and the profile of a run;
* :mod:`.evaluate`: nodes evaluated ahead of a run (constant folding);
* :mod:`.values`: sizes and host copies of a run's values.

It sits under the plan layer (:mod:`gpuops.onnx.plan`, :mod:`gpuops.optimizer`) and over the device
and the ops: it imports neither plans nor sessions (see tests/test_layers.py).
"""

from .run import RunContext, Subgraph, call_op, run_plan

__all__ = ["RunContext", "Subgraph", "call_op", "run_plan"]
