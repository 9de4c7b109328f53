"""The mutable view of one graph of a model (the main graph, or an If/Loop/Scan body) that the
rewrites work on.

Nodes stay ``onnx.NodeProto`` objects (edited in place); constants are NumPy arrays. A value is
*constant* when it is an initializer that is not also a graph input, or a value a rewrite folded.
Initializers that are graph inputs are overridable (the caller may feed them) and never constant,
except in models of IR version < 4, where every initializer must be listed as an input and
onnxruntime treats them all as constants; gpuops does the same here.

*Protected* values (graph outputs, and names that subgraphs read from this scope) keep their name
and their producer: a rewrite may not rename them or fuse their producer away.

A body's view (``Graph(model, body, outer=graph)``) sees the names it reads from the scopes around
it (*captured*) as values it has no producer for; a captured constant of the outer graph is a
constant here too (read-only: it stays the outer graph's). New names are unique across all scopes.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from ..dtypes import onnx_dtype, tensor_to_numpy
from ..registry import canonical_domain
from .standins import standin

MS = "com.microsoft"
_FRESH = re.compile(r"unk__\d+$")  # the dims onnx's shape inference names
# values that shape inference sees with their data (shape vectors, axes, scalars); larger
# constants are declared as typed inputs so inference stays cheap
_INFER_CONST_ELEMENTS = 4096


def attr(node: onnx.NodeProto, name: str, default=None):
    """The value of ``node``'s attribute ``name``, or ``default``."""
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def set_attrs(node: onnx.NodeProto, **values) -> None:
    """Set (or, with ``None``, remove) attributes of ``node``."""
    keep = [a for a in node.attribute if a.name not in values]
    del node.attribute[:]
    node.attribute.extend(keep)
    for k, v in values.items():
        if v is not None:
            node.attribute.append(helper.make_attribute(k, v))


def has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute)


def subgraphs(node: onnx.NodeProto):
    """The node's graph attributes, as (attribute, graph) pairs."""
    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            yield a, a.g
        elif a.type == AttributeProto.GRAPHS:
            for g in a.graphs:
                yield a, g


def defined_names(g: onnx.GraphProto) -> set[str]:
    """The values a graph defines itself: inputs, initializers, node outputs."""
    names = {i.name for i in g.input} | {t.name for t in g.initializer}
    names |= {t.values.name for t in g.sparse_initializer}
    return names | {o for n in g.node for o in n.output if o}


def _all_names(g: onnx.GraphProto, out: set[str]) -> None:
    out |= defined_names(g)
    out.update(n.name for n in g.node)
    for n in g.node:
        for _, sub in subgraphs(n):
            _all_names(sub, out)


def _subgraph_reads(node: onnx.NodeProto, out: set[str]) -> None:
    """Every name a node's subgraphs read (their own locals included: a superset is safe)."""
    for a in node.attribute:
        graphs = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)
        for g in graphs:
            for n in g.node:
                out.update(n.input)
                _subgraph_reads(n, out)
            out.update(o.name for o in g.output)


class Graph:
    """The main graph of ``model`` (which the optimizer owns and edits), or with ``proto`` and
    ``outer`` one of its If/Loop/Scan bodies, nested in the graph ``outer``."""

    def __init__(self, model: onnx.ModelProto, proto: onnx.GraphProto | None = None, outer: Graph | None = None):
        self.model = model
        self.proto = g = model.graph if proto is None else proto
        self.outer = outer
        self.nodes: list[onnx.NodeProto] = list(g.node)
        self.input_names = [i.name for i in g.input]
        self.output_names = [o.name for o in g.output]
        self._protos = {t.name: t for t in g.initializer}
        # in a body, an initializer that is also an input is a formal parameter, whatever the IR version
        overridable = set(self.input_names) & set(self._protos) if model.ir_version >= 4 or outer else set()
        self._arrays: dict[str, np.ndarray] = {}
        self.consts: set[str] = set(self._protos) - overridable
        self.changed_consts: set[str] = set()
        if outer is None:
            self.opsets = {canonical_domain(o.domain): o.version for o in model.opset_import}
            self._names: set[str] = set()
            _all_names(g, self._names)
            self.captured: set[str] = set()
        else:  # shared with the outer graph: one opset table, names unique across scopes
            self.opsets, self._names = outer.opsets, outer._names
            reads = {x for n in self.nodes for x in n.input if x}
            reads |= {o.name for o in g.output}
            for n in self.nodes:
                _subgraph_reads(n, reads)
            self.captured = reads - defined_names(g)
        self._shapes: dict[str, tuple] | None = None
        self._known: dict[str, tuple] = {}  # every (elem_type, symbolic shape) inference has found so far
        self._runs = 0
        self.refresh_protected()
        self.index()

    def refresh_protected(self) -> None:
        """Recompute the protected names (after nodes with subgraphs came or went)."""
        reads: set[str] = set()
        for n in self.nodes:
            _subgraph_reads(n, reads)
        self.protected = set(self.output_names) | reads

    # -- structure -----------------------------------------------------------------------------

    def index(self) -> None:
        """Recompute producers and consumers (call after structural edits)."""
        self.producer: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for n in self.nodes:
            for x in n.input:
                if x:
                    self.consumers.setdefault(x, []).append(n)
            for o in n.output:
                if o:
                    self.producer[o] = n

    def single_use(self, name: str) -> bool:
        """``name`` is read by exactly one node and is not protected."""
        return name not in self.protected and len(self.consumers.get(name, ())) == 1

    def unused(self, name: str) -> bool:
        return not name or (name not in self.protected and not self.consumers.get(name))

    def only_consumer(self, name: str, op_type: str):
        """The one consumer of ``name`` if it is a ``op_type`` node of ai.onnx, else None."""
        if not self.single_use(name):
            return None
        n = self.consumers[name][0]
        return n if n.op_type == op_type and canonical_domain(n.domain) == "" else None

    def producer_of(self, name: str, op_type: str):
        n = self.producer.get(name)
        return n if n is not None and n.op_type == op_type and canonical_domain(n.domain) == "" else None

    def remove(self, *nodes: onnx.NodeProto) -> bool:
        """Drop ``nodes`` and re-index; True when there were any (a rewrite's "changed")."""
        if not nodes:
            return False
        ids = {id(n) for n in nodes}
        self.nodes = [n for n in self.nodes if id(n) not in ids]
        self.invalidate()
        self.index()
        return True

    def rename_uses(self, old: str, new: str) -> None:
        """Make every node that reads ``old`` read ``new`` (``old`` must not be protected)."""
        for n in self.consumers.get(old, ()):
            n.input[:] = [new if x == old else x for x in n.input]
        self.consumers.setdefault(new, []).extend(self.consumers.pop(old, []))

    def unique(self, base: str) -> str:
        name, i = base, 0
        while name in self._names:
            i += 1
            name = f"{base}_{i}"
        self._names.add(name)
        return name

    def opset(self, domain: str = "") -> int:
        return self.opsets.get(domain, 0)

    def use_domain(self, domain: str, version: int = 1) -> None:
        if domain not in self.opsets:
            self.opsets[domain] = version
            self.model.opset_import.append(helper.make_opsetid(domain, version))

    def make_node(self, op_type: str, inputs, outputs, domain: str = "", **attrs) -> onnx.NodeProto:
        return helper.make_node(op_type, list(inputs), list(outputs), name=self.unique(f"opt/{op_type}"),
                                domain=domain, **{k: v for k, v in attrs.items() if v is not None})

    def checkpoint(self):
        """A snapshot of everything a rewrite may edit, for :meth:`restore`: the rewrites edit
        nodes in place, so a rewrite that fails halfway is undone from this."""
        nodes = []
        for n in self.nodes:
            c = onnx.NodeProto()
            c.CopyFrom(n)
            nodes.append(c)
        opset_import = [(o.domain, o.version) for o in self.model.opset_import]
        value_info = [vi.SerializeToString() for vi in self.proto.value_info]
        return (nodes, dict(self._arrays), set(self.consts), set(self.changed_consts), dict(self.opsets),
                opset_import, value_info)

    def restore(self, snapshot) -> None:
        """Put the graph back as it was at :meth:`checkpoint`."""
        nodes, arrays, consts, changed, opsets, opset_import, value_info = snapshot
        self.nodes = list(nodes)
        self._arrays, self.consts, self.changed_consts = dict(arrays), set(consts), set(changed)
        self.opsets.clear()  # (shared with the other scopes; names taken meanwhile stay taken)
        self.opsets.update(opsets)
        del self.model.opset_import[:]
        self.model.opset_import.extend(helper.make_opsetid(d, v) for d, v in opset_import)
        del self.proto.value_info[:]
        for b in value_info:
            self.proto.value_info.add().ParseFromString(b)
        self.invalidate()
        self.refresh_protected()
        self.index()

    # -- constants -----------------------------------------------------------------------------

    def is_const(self, name: str) -> bool:
        if name in self.captured:
            return self.outer.is_const(name)
        return bool(name) and name in self.consts

    def value(self, name: str) -> np.ndarray:
        if name in self.captured:
            return self.outer.value(name)
        if name not in self._arrays:
            self._arrays[name] = tensor_to_numpy(self._protos[name])
        return self._arrays[name]

    def const_value(self, name: str):
        """The constant's array, or None when ``name`` is not constant."""
        return self.value(name) if self.is_const(name) else None

    def set_const(self, name: str, array: np.ndarray) -> None:
        """``name`` now holds the constant ``array`` (its producer, if any, is the caller's to remove)."""
        self._arrays[name] = np.asarray(array)
        self.consts.add(name)
        self.changed_consts.add(name)
        self._names.add(name)

    def add_const(self, array: np.ndarray, base: str) -> str:
        name = self.unique(base)
        self.set_const(name, array)
        return name

    # -- shapes --------------------------------------------------------------------------------

    def invalidate(self) -> None:
        self._shapes = None

    def info(self, name: str):
        """(elem_type, shape) of a value from shape inference; dims are ints or None. None if unknown."""
        if self.is_const(name):
            v = self.value(name)
            try:
                return onnx_dtype(v.dtype), tuple(v.shape)
            except Exception:
                return None
        if self._shapes is None:
            self._shapes = self._infer()
        return self._shapes.get(name)

    def symbolic_shape(self, name: str):
        """The shape of a value with each dim an int or a symbol (dim_param: dims of the same
        symbol are equal), or None when a dim or the rank is unknown. Two values of the same
        symbolic shape have the same shape at run time."""
        if self.is_const(name):
            return self.shape(name)
        if self._shapes is None:
            self._shapes = self._infer()
        i = self._known.get(name) if name in self._shapes else None
        if i is None or i[1] is None or any(d is None for d in i[1]):
            return None
        return i[1]

    def shape(self, name: str):
        """The fully static shape of a value, or None."""
        i = self.info(name)
        if i is None or i[1] is None or any(d is None for d in i[1]):
            return None
        return i[1]

    def elem_type(self, name: str):
        i = self.info(name)
        return i[0] if i else None

    def _infer(self) -> dict[str, tuple]:
        m = onnx.ModelProto()
        m.ir_version = max(self.model.ir_version, 4)
        m.opset_import.extend(self.model.opset_import)
        m.functions.extend(self.model.functions)
        g = m.graph
        restore = []  # outputs of com.microsoft nodes without a stand-in: typed as found before
        for n in self.nodes:
            nodes = standin(n, self.opsets.get("", 0)) if canonical_domain(n.domain) == MS else None
            if nodes:
                g.node.extend(nodes)
                restore += n.output[1:]
            else:
                g.node.append(n)
                if canonical_domain(n.domain) != "":
                    restore += n.output
        g.input.extend(self.proto.input)
        declared = set(self.input_names)
        for name in sorted(self.captured):  # typed as the outer graph knows them
            info = self.outer.info(name)
            if info is not None and not self.outer.is_const(name):
                g.input.append(helper.make_tensor_value_info(name, info[0], info[1]))
        outer_consts = [c for c in self.captured if self.outer.is_const(c)]
        for name in self._live_consts() + outer_consts:
            t = None if name in self._arrays or name in self.captured else self._protos[name]
            array = self.value(name) if t is None else None
            dims = list(t.dims) if t is not None else list(array.shape)
            try:
                if int(np.prod(dims)) <= _INFER_CONST_ELEMENTS:
                    g.initializer.append(t if t is not None else numpy_helper.from_array(array, name))
                elif name not in declared:
                    elem = t.data_type if t is not None else onnx_dtype(array.dtype)
                    g.input.append(helper.make_tensor_value_info(name, elem, dims))
            except Exception:  # a dtype ONNX cannot hold: inference goes on without the value
                pass
        # (a declared shape with a dim onnx named afresh says less than inference: it is inferred again)
        g.value_info.extend(vi for vi in self.proto.value_info if not any(
            _FRESH.match(d.dim_param) for d in vi.type.tensor_type.shape.dim if d.HasField("dim_param")))
        # a fused node's outputs keep the name and value of the node's they replaced, and so the type
        typed = {vi.name for vi in g.value_info} | set(declared)
        for o in restore:
            if o and o in self._known and o not in typed:
                elem, shape = self._known[o]
                g.value_info.append(helper.make_tensor_value_info(o, elem, None if shape is None else list(shape)))
                typed.add(o)
        g.output.extend(self.proto.output)
        try:
            inferred = onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True).graph
        except Exception:
            inferred = g
        out, symbolic = {}, {}
        for vi in [*inferred.input, *inferred.value_info, *inferred.output]:
            t = vi.type
            if not t.HasField("tensor_type") or not t.tensor_type.elem_type:
                continue
            tt = t.tensor_type
            shape = sym = None
            if tt.HasField("shape"):
                # (a negative dim_value, as Paddle2ONNX writes for a dynamic batch, is unknown too)
                shape = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None
                              for d in tt.shape.dim)
                sym = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else self._symbol(d.dim_param)
                            if d.HasField("dim_param") else None for d in tt.shape.dim)
            out[vi.name] = (tt.elem_type, shape)
            symbolic[vi.name] = (tt.elem_type, sym)
        self._known.update(symbolic)
        self._runs += 1
        return out

    def _symbol(self, name: str) -> str:
        """A dim_param as kept across inference runs: onnx names the unknown dims it meets
        ``unk__N`` afresh in every run, so those get the run's number (the model's own stay)."""
        return f"{name}@{self._runs}" if _FRESH.match(name) else name

    # -- output --------------------------------------------------------------------------------

    def _live_consts(self) -> list[str]:
        used = {x for n in self.nodes for x in n.input} | self.protected
        return [c for c in self.consts if c in used]

    def to_model(self) -> onnx.ModelProto:
        """Write the edited graph back into the model (a body: into its GraphProto); unused
        constants are dropped. (Tensors are filled in place: a light model's folded weights are
        hundreds of MB.)"""
        g = self.proto
        live = set(self._live_consts())
        dropped = {t for t in self._protos if t in self.consts and t not in live}
        for i in reversed(range(len(g.initializer))):
            t = g.initializer[i]
            if t.name in dropped:
                del g.initializer[i]  # folded away (in IR < 4 its graph input goes too)
            elif t.name in self.changed_consts:
                _fill(t, t.name, self._arrays[t.name])
        new = sorted(live - set(self._protos))
        if dropped:
            keep = [i for i in g.input if i.name not in dropped]
            del g.input[:]
            g.input.extend(keep)
        del g.node[:]
        for name in new:
            if self.model.ir_version < 4:  # an initializer must be a graph input there; a Constant node is not
                n = g.node.add()
                n.op_type, n.name = "Constant", self.unique("opt/Constant")
                n.output.append(name)
                a = n.attribute.add()
                a.name, a.type = "value", AttributeProto.TENSOR
                _fill(a.t, name, self._arrays[name])
            else:
                _fill(g.initializer.add(), name, self._arrays[name])
        g.node.extend(self.nodes)
        produced = {o for n in self.nodes for o in n.output}
        vis = [vi for vi in g.value_info if vi.name in produced]
        del g.value_info[:]
        g.value_info.extend(vis)
        return self.model


def _fill(t: onnx.TensorProto, name: str, array: np.ndarray) -> None:
    """Write ``array`` into the tensor ``t`` (raw bytes for NumPy's own numeric types)."""
    array = np.asarray(array)
    if array.dtype.kind in "biufc" and array.dtype.type.__module__ == "numpy" and array.dtype.byteorder != ">":
        t.Clear()
        t.name = name
        t.data_type = onnx_dtype(array.dtype)
        t.dims.extend(array.shape)
        t.raw_data = np.ascontiguousarray(array).tobytes()
    else:
        t.CopyFrom(numpy_helper.from_array(array, name))
