"""The op registry: ``@op(op_type, domain=..., since=N)`` registers a plain function.

An op is written once against ``xp`` (the device's array namespace)::

    @op("LeakyRelu", since=6)
    def LeakyRelu(xp, X, *, alpha=0.01):
        return xp.where(X >= 0, X, X * alpha)

Inputs come positionally (``None`` for an omitted optional input), attributes as keyword arguments
with the spec's defaults. An op with several outputs returns a tuple; a Python ``list`` is one
sequence value. ``host_inputs`` names input positions that are shape-like (shape, axes, pads,
repeats...): the executor hands them over as NumPy arrays, pulled from the device once per session
when they are constant. ``n_outputs=True`` passes the node's output count as ``n_outputs=``.
``syncs="reason"`` declares that the op itself reads device data on the host (a data-dependent
output size, a loop condition...): on CUDA such a node synchronises with the host and cannot be
captured in a CUDA graph. Every other op, and every input outside ``host_inputs``, must stay on the
device (no ``.item()``, boolean masks, ``nonzero``, array-api-compat ``clip``...); a check of
device data (index bounds) goes through :func:`gpuops.ops.checks.require`, which a device run defers.
``inplace=True`` declares an elementwise op whose output has the broadcast shape and the element
type of its inputs and that takes ``out=`` (a ufunc's): the executor passes an input's buffer there
when that input dies at this node and nothing else refers to it (see :func:`gpuops.onnx.session.run_plan`).

A node resolves to the implementation with the highest ``since`` <= the model's opset for the
node's domain. A device override (``@op(..., device="cuda")``: the CUDA kernels of
:mod:`gpuops.ops.cuda`; ``device="cpu"``: the native kernels and NumPy-only paths of
:mod:`gpuops.ops.cpu`) is chosen on that device when its ``since`` is at least that of the generic
choice; the generic op stays as fallback and as test oracle (``resolve(..., device=None)``).

``prepare=fn`` is onnxruntime's PrePack: ``fn(constants, attrs) -> object | None`` is called once
per session, when its weights are on the device (:meth:`gpuops.onnx.plan.Plan.upload`), with
``constants`` the node's inputs that are initializers (position -> device array; feedable ones
excluded) and the node's attributes. What it returns is kept on the plan step and passed to the op
as ``prepared=`` on every run (nothing when it returns None); the op takes ``prepared=None`` for
calls outside a session. It derives what depends only on those constants (packed or transformed
weights, float32 copies of float16 ones); it must not keep a reference to anything else.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

from .errors import UnsupportedOpError

ONNX_DOMAIN = ""


def canonical_domain(domain: str) -> str:
    return ONNX_DOMAIN if domain in ("", "ai.onnx") else domain


@dataclass(frozen=True)
class OpImpl:
    op_type: str
    domain: str
    since: int
    fn: Callable
    device: str | None = None
    host_inputs: frozenset[int] = frozenset()
    n_outputs: bool = False
    syncs: str | None = None
    inplace: bool = False
    prepare: Callable | None = None

    @property
    def attributes(self) -> frozenset[str] | None:
        """Keyword names the function accepts as attributes, or None if it takes ``**kwargs``."""
        params = inspect.signature(self.fn).parameters.values()
        if any(p.kind is p.VAR_KEYWORD for p in params):
            return None
        names = frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY)
        if self.inplace:
            names -= {"out"}
        return names - {"prepared"} if self.prepare is not None else names


_REGISTRY: dict[tuple[str, str], list[OpImpl]] = {}


def op(op_type: str, *, domain: str = ONNX_DOMAIN, since: int = 1, device: str | None = None,
       host_inputs: tuple[int, ...] = (), n_outputs: bool = False, syncs: str | None = None,
       inplace: bool = False, prepare: Callable | None = None):
    """Register the decorated function as ``domain::op_type`` from opset version ``since``."""

    def register(fn: Callable) -> Callable:
        if prepare is not None and "prepared" not in inspect.signature(fn).parameters:
            raise TypeError(f"{op_type}: an op with prepare= takes a prepared= keyword")
        impl = OpImpl(op_type, canonical_domain(domain), since, fn, device, frozenset(host_inputs), n_outputs, syncs,
                      inplace, prepare)
        impls = _REGISTRY.setdefault((impl.domain, op_type), [])
        if any(i.since == since and i.device == device for i in impls):
            raise ValueError(f"{domain or 'ai.onnx'}::{op_type} since {since} registered twice")
        impls.append(impl)
        impls.sort(key=lambda i: i.since)
        return fn

    return register


def versions(domain: str, op_type: str) -> list[int]:
    """The ``since`` versions registered for an op (generic implementations)."""
    return [i.since for i in _REGISTRY.get((canonical_domain(domain), op_type), []) if i.device is None]


def is_registered(domain: str, op_type: str) -> bool:
    return (canonical_domain(domain), op_type) in _REGISTRY


def resolve(domain: str, op_type: str, opset: int, device: str | None = "cpu", node: str = "") -> OpImpl:
    """The implementation a node of ``domain::op_type`` runs with at ``opset`` on ``device``
    (``"cpu"``, ``"cuda"``; None: the generic one, which every override falls back to)."""
    domain = canonical_domain(domain)
    impls = _REGISTRY.get((domain, op_type), [])
    generic = [i for i in impls if i.device is None and i.since <= opset]
    where = f"node {node!r}: " if node else ""
    if not generic:
        have = versions(domain, op_type)
        why = (f"gpuops implements it from opset {have[0]} (versions {have})" if have else
               f"gpuops does not implement {op_type} in domain {domain or 'ai.onnx'!r} at any opset")
        raise UnsupportedOpError(f"{where}op {domain or 'ai.onnx'}::{op_type} at opset {opset} is not supported: {why}")
    best = generic[-1]
    override = [i for i in impls if i.device == device and best.since <= i.since <= opset]
    return override[-1] if override else best
