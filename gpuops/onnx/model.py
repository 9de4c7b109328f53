"""Loading ONNX models: path, bytes or ModelProto; external data confined to the model's folder.

Everything a model file says is checked here before planning: strings are text, graph input and
output element types are known, nodes keep their operator schema's arity and attribute types
(:mod:`gpuops.onnx.validate`: onnx's C++ shape inference may crash on nodes that do not), and
external-data metadata is well formed and stays inside the model's folder and within
:data:`MAX_EXTERNAL_DATA_BYTES`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from ..errors import ModelError
from .validate import check_nodes

MAX_EXTERNAL_DATA_BYTES = 256 << 30
"""Cap on the total external data one model may load (bytes); raise it for larger models."""

_ELEM_TYPES = frozenset(onnx.TensorProto.DataType.values())
_TENSOR_TEXT = [fd for fd in onnx.TensorProto.DESCRIPTOR.fields
                if fd.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE)]


def load_model(model) -> onnx.ModelProto:
    """A path, bytes or :class:`onnx.ModelProto` -> a checked ModelProto with its external data loaded."""
    if isinstance(model, onnx.ModelProto):
        proto, base, where = model, None, "the model"
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto, base, where = _parse(bytes(model), "<bytes>"), None, "<bytes>"
    elif isinstance(model, (str, os.PathLike)):
        path = Path(model)
        try:
            if not path.is_file():
                raise ModelError(f"model file not found: {path}")
            data, base = path.read_bytes(), path.resolve().parent
        except (OSError, ValueError, RuntimeError) as e:  # bad name, symlink loop, unreadable
            raise ModelError(f"cannot read model file {str(path)[:200]!r}: {e}") from e
        proto, where = _parse(data, str(path)), str(path)
    else:
        raise ModelError(f"model must be a path, bytes or onnx.ModelProto, not {type(model).__name__}")
    tensors = _check(proto, where)
    check_nodes(proto)  # before anything calls onnx's C++ on the model
    external = [t for t in tensors if t.data_location == onnx.TensorProto.EXTERNAL]
    if external:
        _load_external_data(external, base)
    for t in tensors:
        _check_size(t)
    if not _is_sorted(proto.graph):
        if proto is model:  # the caller's object stays as it was
            proto = onnx.ModelProto()
            proto.CopyFrom(model)
        topological_sort(proto.graph)
    return proto


def _reads(node: onnx.NodeProto) -> set[str]:
    """Every value name ``node`` reads, inside its subgraphs too (over-approximated: a name a subgraph
    makes itself cannot also be made outside, as ONNX names are unique across scopes)."""
    names = set(node.input)
    for a in node.attribute:
        for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            for n in g.node:
                names |= _reads(n)
            names.update(o.name for o in g.output)
    names.discard("")
    return names


def _order(graph: onnx.GraphProto) -> list[list[int]]:
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    return [sorted({producer[x] for x in _reads(n) if x in producer} - {i}) for i, n in enumerate(graph.node)]


def _is_sorted(graph: onnx.GraphProto) -> bool:
    return all(d < i for i, deps in enumerate(_order(graph)) for d in deps)


def topological_sort(graph: onnx.GraphProto) -> None:
    """Reorder ``graph.node`` so that every value is made before it is read, keeping the given order
    where it allows (onnxruntime accepts unsorted graphs, and onnxruntime's float16 converter writes
    some). A cycle is left as it is: the plan then names the input no earlier node makes."""
    import heapq

    deps = _order(graph)
    users: list[list[int]] = [[] for _ in deps]
    for i, ds in enumerate(deps):
        for d in ds:
            users[d].append(i)
    waiting = [len(ds) for ds in deps]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(deps):
        return
    nodes = [graph.node[i] for i in order]
    copies = []
    for n in nodes:
        c = onnx.NodeProto()
        c.CopyFrom(n)
        copies.append(c)
    del graph.node[:]
    graph.node.extend(copies)


def _parse(data: bytes, where: str) -> onnx.ModelProto:
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as e:  # protobuf's DecodeError and friends
        raise ModelError(f"{where} is not a valid ONNX model: {e}") from e
    if not proto.HasField("graph"):
        raise ModelError(f"{where} is not a valid ONNX model: it has no graph")
    return proto


def _check(proto: onnx.ModelProto, where: str) -> list[onnx.TensorProto]:
    """Walk every message of the model once: string fields must be text (protobuf hands invalid
    UTF-8 back as bytes), and graph inputs/outputs must have known element types. Returns every
    tensor of the model."""
    tensors = []
    stack: list = [proto]
    while stack:
        msg = stack.pop()
        fields = msg.ListFields()
        if isinstance(msg, onnx.TensorProto):  # (ListFields would copy the weights: only the text)
            tensors.append(msg)
            fields = [(fd, getattr(msg, fd.name)) for fd in _TENSOR_TEXT]
        for fd, value in fields:
            if fd.type == FieldDescriptor.TYPE_MESSAGE:
                stack.extend((value,) if isinstance(value, Message) else value)
            elif fd.type == FieldDescriptor.TYPE_STRING:
                for s in (value,) if isinstance(value, (str, bytes)) else value:
                    if not isinstance(s, str):
                        raise ModelError(f"{where} is not a valid ONNX model: {msg.DESCRIPTOR.name}."
                                         f"{fd.name} holds invalid UTF-8 {bytes(s)[:40]!r}")
    graphs = [proto.graph]  # attribute references belong in function bodies only
    while graphs:
        for node in graphs.pop().node:
            for a in node.attribute:
                if a.ref_attr_name:
                    raise ModelError(f"node {node.name or node.op_type!r} ({node.op_type}): attribute {a.name!r} "
                                     f"refers to {a.ref_attr_name!r} outside a function")
                graphs.extend([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)
    for kind, infos in (("input", proto.graph.input), ("output", proto.graph.output)):
        for vi in infos:
            t = vi.type
            if t.HasField("tensor_type") and t.tensor_type.elem_type not in _ELEM_TYPES:
                raise ModelError(f"graph {kind} {vi.name!r} has unknown element type {t.tensor_type.elem_type}")
    return tensors


def _check_size(t: onnx.TensorProto) -> None:
    """A tensor's dims must be non-negative and fit the data it carries (at 4 bits an element at
    least): a few bytes may not declare a huge tensor."""
    if any(d < 0 for d in t.dims):
        raise ModelError(f"tensor {t.name!r} has a negative dimension in {list(t.dims)}")
    n = 1
    for d in t.dims:
        n *= d
    size = t.ByteSize()
    if n > 2 * size + 16:
        raise ModelError(f"tensor {t.name!r}: dims {list(t.dims)} declare {n:,} elements but it holds "
                         f"only {size:,} bytes")


def _load_external_data(tensors: list[onnx.TensorProto], base: Path | None) -> None:
    if base is None:
        raise ModelError("the model uses external data: load it from a file path, not bytes")
    total = 0
    reads = []
    for t in tensors:
        where = f"initializer {t.name!r}: external data"
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        if not location or "\0" in location or len(location) > 4096:
            raise ModelError(f"{where} location {location[:100]!r} is not a valid file name")
        offset, length = (_non_negative(info.get(k), f"{where} {k}") for k in ("offset", "length"))
        try:
            target = (base / location).resolve()
            if base not in target.parents:
                raise ModelError(f"{where} path {location!r} points outside the model's folder")
            try:  # stat, not is_file(): a symlink loop raises here (Python 3.13's resolve() no longer does)
                st = target.stat()
            except FileNotFoundError:
                st = None
            if st is None or not stat.S_ISREG(st.st_mode):
                raise ModelError(f"{where} file {location!r} not found")
            size = st.st_size
        except (OSError, ValueError, RuntimeError) as e:  # name too long, symlink loop...
            raise ModelError(f"{where} path {location[:100]!r} cannot be opened: {e}") from e
        offset = offset or 0
        if offset > size:
            raise ModelError(f"{where} {location!r}: offset {offset} runs past the end of the file ({size} bytes)")
        length = size - offset if length is None else length
        if offset + length > size:
            raise ModelError(f"{where} {location!r}: offset {offset} + length {length} runs past the end "
                             f"of the file ({size} bytes)")
        total += length
        if total > MAX_EXTERNAL_DATA_BYTES:
            raise ModelError(f"the model's external data exceeds gpuops.onnx.model.MAX_EXTERNAL_DATA_BYTES "
                             f"({MAX_EXTERNAL_DATA_BYTES:,} bytes)")
        reads.append((t, target, offset, length))
    for t, target, offset, length in reads:
        try:
            with open(target, "rb") as f:
                f.seek(offset)
                t.raw_data = f.read(length)
        except OSError as e:
            raise ModelError(f"initializer {t.name!r}: cannot read external data: {e}") from e
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT


def _non_negative(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > 20:
        raise ModelError(f"{what} must be a non-negative integer, got {text[:40]!r}")
    return int(text)
