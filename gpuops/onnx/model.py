"""Loading ONNX models: path, bytes or ModelProto; external data confined to the model's folder."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
from onnx import external_data_helper

from ..errors import ModelError


def load_model(model) -> onnx.ModelProto:
    """A path, bytes or :class:`onnx.ModelProto` -> a ModelProto with its external data loaded."""
    if isinstance(model, onnx.ModelProto):
        proto, base = model, None
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto, base = _parse(bytes(model), "<bytes>"), None
    elif isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise ModelError(f"model file not found: {path}")
        proto, base = _parse(path.read_bytes(), str(path)), path.resolve().parent
    else:
        raise ModelError(f"model must be a path, bytes or onnx.ModelProto, not {type(model).__name__}")
    _load_external_data(proto, base)
    return proto


def _parse(data: bytes, where: str) -> onnx.ModelProto:
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as e:  # protobuf's DecodeError and friends
        raise ModelError(f"{where} is not a valid ONNX model: {e}") from e
    if not proto.HasField("graph"):
        raise ModelError(f"{where} is not a valid ONNX model: it has no graph")
    return proto


def _load_external_data(proto: onnx.ModelProto, base: Path | None) -> None:
    tensors = [t for t in external_data_helper._get_all_tensors(proto)
               if external_data_helper.uses_external_data(t)]
    if not tensors:
        return
    if base is None:
        raise ModelError("the model uses external data: load it from a file path, not bytes")
    for t in tensors:
        info = external_data_helper.ExternalDataInfo(t)
        target = (base / info.location).resolve()
        if base not in target.parents:
            raise ModelError(f"initializer {t.name!r}: external data path {info.location!r} "
                             "points outside the model's folder")
        if not target.is_file():
            raise ModelError(f"initializer {t.name!r}: external data file {info.location!r} not found")
        with open(target, "rb") as f:
            f.seek(info.offset or 0)
            t.raw_data = f.read(info.length) if info.length else f.read()
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT
