"""``onnx::*`` MDF functions, run by gpuops' own ONNX ops on the session's device.

As in modeci-mdf's reference engine, an ONNX function takes its inputs and attributes by ONNX name
from the function's ``args`` and, for names the args do not give, from the node's input ports and
parameters (``axis``, ``pads``, ``B``... set as node parameters); ops are those of ONNX opset 15
unless the model says otherwise (``onnx_opset_version``). Python numbers become 1-d tensors and
int32 becomes int64, as the reference does; float32 results come back as float64. Conversions of
values that do not change between calls (constants) are made once. The op is called as a model's node
is (:func:`gpuops.executor.call_op`: host inputs, declared syncs, errors naming the node).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx.defs import OpSchema

from .. import ops as _ops  # noqa: F401  (registers the op families)
from .. import registry
from ..device import to_host
from ..errors import ModelError, UnsupportedOpError
from ..executor.run import call_op, node_error
from . import batch as B
from .batch import Batched
from .expr import Values

DEFAULT_OPSET = 15
# ops whose inputs share one type in ONNX but may mix float32 and float64 in MDF (numbers are float64,
# fed arrays may be float32): their numeric inputs are promoted as NumPy would, for MDF calls only
_PROMOTED = frozenset(["Add", "Sub", "Mul", "Div", "Clip", "Greater", "GreaterOrEqual", "Less", "LessOrEqual",
                       "Mean", "Sum", "PRelu", "Max", "Min"])
_A = OpSchema.AttrType
_GRAPH_ATTRS = (_A.GRAPH, _A.GRAPHS)

# ops that act element by element (inputs broadcast): batched inputs run in one call, aligned by row
_ROWWISE = frozenset("""Abs Neg Relu Sigmoid Tanh Exp Log Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh
    Floor Ceil Round Sqrt Erf Softplus Softsign Reciprocal LeakyRelu Elu Selu Celu HardSigmoid HardSwish Sign
    Not IsNaN IsInf Identity Cast Add Sub Mul Div Pow Mod Greater GreaterOrEqual Less LessOrEqual Equal And
    Or Xor Where Max Min Sum Mean PRelu Clip""".split())


def model_opset(model) -> int:
    """The model's ``onnx_opset_version`` (default 15), checked to be an ONNX opset gpuops knows."""
    value = getattr(model, "onnx_opset_version", None)
    if value is None or value == "":
        return DEFAULT_OPSET
    newest = onnx.defs.onnx_opset_version()
    try:
        opset = int(str(value).strip())
    except ValueError:
        opset = None
    if opset is None or not 1 <= opset <= newest:
        raise ModelError(f"MDF model {model.id!r}: onnx_opset_version {value!r} is not an ONNX opset "
                         f"(an integer from 1 to {newest})")
    return opset


def schema(op_type: str, opset: int) -> OpSchema:
    try:
        return onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        try:
            return onnx.defs.get_schema(op_type)
        except onnx.defs.SchemaError:
            raise UnsupportedOpError(f"onnx::{op_type} is not an ONNX operator") from None


class OnnxCall:
    """One ``onnx::Op`` function of one node: ``call(scope)`` where ``scope`` holds the node's
    values with the function's evaluated args on top."""

    def __init__(self, op_type: str, arg_names: list[str], available: set, values: Values, opset: int,
                 where: str, ports: list[str] = ()):
        self.op_type, self.values, self.where = op_type, values, where
        self.describe = f"{where}: onnx::{op_type}"  # what an error of the op starts with
        s = schema(op_type, opset)
        self.impl = registry.resolve("", op_type, max(opset, s.since_version), values.device.kind, node=where)
        self.inputs = [i.name for i in s.inputs]
        self.variadic = bool(s.inputs) and s.inputs[0].option == OpSchema.FormalParameterOption.Variadic
        self.attr_types = {name: a.type for name, a in s.attributes.items()}
        # variadic inputs (Sum, Concat...): the non-attribute args in order, else the node's input ports
        self.arg_names = [a for a in arg_names if a not in self.attr_types] or list(ports)
        accepted = self.impl.attributes
        for name, a in s.attributes.items():
            if a.type in _GRAPH_ATTRS and (a.required or name in available):
                raise UnsupportedOpError(f"{where}: onnx::{op_type} needs graph attribute {name!r}; graph "
                                         "attributes (If/Loop/Scan bodies) given as MDF values are not supported")
            if name in available and "onnx_" not in name and accepted is not None and name not in accepted:
                raise UnsupportedOpError(f"{where}: gpuops' onnx::{op_type} does not take attribute {name!r}")
        required = [i.name for i in s.inputs if i.option == OpSchema.FormalParameterOption.Single]
        if not self.variadic:
            missing = [n for n in required if n not in available]
            if missing:
                raise ModelError(f"{where}: onnx::{op_type} is missing input(s) {missing} "
                                 "(give them as args or as node input ports/parameters)")
        self.n_outputs = len(s.outputs)
        self._memo: dict[tuple, tuple] = {}  # (name, kind) -> (source value, converted) for constants

    def __call__(self, scope: dict) -> Any:
        xp = self.values.xp
        if self.variadic:
            inputs = [self._tensor(f"{i}", v, False) for i, v in enumerate(self._variadic(scope))]
        else:
            inputs = []
            for i, name in enumerate(self.inputs):
                v = scope.get(name)
                inputs.append(None if v is None else self._tensor(name, v, i in self.impl.host_inputs))
            while inputs and inputs[-1] is None:
                inputs.pop()
        if self.op_type in _PROMOTED:
            inputs = _promoted(inputs)
        attrs, row_attrs = {}, {}
        for name, typ in self.attr_types.items():
            v = scope.get(name)
            if isinstance(v, Batched) and "onnx_" not in name:  # an attribute that differs per row
                row_attrs[name] = (v, typ)
            elif v is not None and "onnx_" not in name:
                attrs[name] = self._memoised((name, "attr"), v, lambda v=v, typ=typ: _attribute(v, typ))
        if self.impl.n_outputs:  # every output the schema has, as the reference asks onnxruntime for
            if self.op_type == "Split":
                attrs["n_outputs"] = int(attrs.get("num_outputs", 0)) or self._split_count(inputs, attrs)
            elif self.op_type == "BatchNormalization" and not attrs.get("training_mode"):
                attrs["n_outputs"] = 1
            else:
                attrs["n_outputs"] = self.n_outputs
        try:
            if row_attrs or B.is_batched(*inputs):
                result = self._batched(xp, inputs, attrs, row_attrs)
            else:
                result = self._call(xp, inputs, attrs)
        except Exception as e:  # batching's own errors (the op's errors name the node already)
            err = node_error(e, self.describe, self.where)
            if err is e:
                raise
            raise err from e
        return self._result(result, attrs)

    def _call(self, xp, inputs: list, attrs: dict):
        return call_op(self.impl, xp, inputs, attrs, where=self.describe, name=self.where,
                       device=self.values.device)

    def _batched(self, xp, inputs: list, attrs: dict, row_attrs: dict):
        """The op on inputs or attributes some of which are batched: in one call when it acts element
        by element (and its attributes and host inputs, Clip's bounds, are the same for every row),
        else once per row."""
        host = self.impl.host_inputs
        fixed = inputs[1:] if self.op_type == "Clip" else [x for i, x in enumerate(inputs) if i in host]
        if self.op_type in _ROWWISE and not row_attrs and not B.is_batched(*fixed):
            result = self._call(xp, B.aligned(*inputs), attrs)
            return tuple(Batched(r) for r in result) if isinstance(result, tuple) else Batched(result)
        n = next(v.n for v in [*inputs, *(a for a, _ in row_attrs.values())] if isinstance(v, Batched))
        rows = []
        for r in range(n):
            xs = [x.a[r] if isinstance(x, Batched) else x for x in inputs]
            at = {**attrs, **{k: _attribute(v.a[r], typ) for k, (v, typ) in row_attrs.items()}}
            rows.append(self._call(xp, xs, at))  # host inputs copied to the host there
        return B.stack(xp, rows)

    def _variadic(self, scope: dict) -> list:
        out = []
        for name in self.arg_names:
            v = scope.get(name)
            if isinstance(v, (list, tuple)):  # e.g. "['_122', '_123']": a list of names
                out.extend(scope[x] if isinstance(x, str) else x for x in v)
            elif v is not None:
                out.append(v)
        return out

    def _split_count(self, inputs, attrs) -> int:
        split = attrs.get("split")
        if split is None and len(inputs) > 1 and inputs[1] is not None:
            split = to_host(inputs[1]).ravel()
        return len(split) if split is not None else 1

    def _memoised(self, key, v, convert):
        hit = self._memo.get(key)
        if hit is not None and hit[0] is v:
            return hit[1]
        out = convert()
        self._memo[key] = (v, out)
        return out

    def _tensor(self, name: str, v, host: bool):
        values = self.values

        def convert():
            if isinstance(v, list) and v and all(values.is_array(x) for x in v):
                return v  # a sequence
            if isinstance(v, Batched):  # a scalar per row becomes 1-d, as a number does
                v2 = Batched(v.a.reshape(-1, 1)) if v.ndim == 0 else v
                return v2.astype(np.int64) if v2.dtype == np.int32 else v2
            if isinstance(v, (bool, int, float)):
                a = values.array(np.atleast_1d(v))
            elif values.is_array(v):
                a = v
            else:
                a = values.array(np.asarray(v))
            if a.dtype == np.int32:
                a = a.astype(np.int64)
            if self.op_type == "Reshape" and name == "shape":
                a = a.reshape(-1)
            return to_host(a) if host else a

        return self._memoised((name, host), v, convert)

    def _result(self, result, attrs):
        if isinstance(result, tuple) and len(result) == 1:
            result = result[0]
        if isinstance(result, np.ndarray) and not self.values.is_array(result):
            result = self.values.array(result)
        if getattr(result, "dtype", None) == np.float32:
            result = result.astype(np.float64)
        return result


def _promoted(inputs: list) -> list:
    """Numeric inputs of different dtypes cast to the type NumPy would give them together."""
    dtypes = {x.dtype for x in inputs if hasattr(x, "dtype") and x.dtype.kind in "biuf"}
    if len(dtypes) < 2:
        return inputs
    common = np.result_type(*dtypes)
    return [x.astype(common) if hasattr(x, "dtype") and x.dtype.kind in "biuf" and x.dtype != common else x
            for x in inputs]


def _attribute(v, typ):
    """A node value as the ONNX attribute type the schema declares."""
    host = to_host(v) if hasattr(v, "dtype") and not isinstance(v, np.ndarray) else v
    if typ == _A.INT:
        return int(np.asarray(host).reshape(-1)[0]) if not isinstance(host, (int, bool)) else int(host)
    if typ == _A.FLOAT:
        return float(np.asarray(host).reshape(-1)[0]) if not isinstance(host, (int, float)) else float(host)
    if typ == _A.STRING:
        return host.decode() if isinstance(host, bytes) else str(host)
    if typ == _A.INTS:
        return [int(x) for x in np.asarray(host).reshape(-1)]
    if typ == _A.FLOATS:
        return [float(x) for x in np.asarray(host).reshape(-1)]
    if typ == _A.STRINGS:
        return [str(x) for x in np.asarray(host).reshape(-1)]
    if typ == _A.TENSOR:
        a = np.asarray(host)
        return a.astype(np.int64) if a.dtype == np.int32 else a
    return host
