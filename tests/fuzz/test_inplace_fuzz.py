"""Fuzzing buffer reuse: random graphs where element-wise ops meet every way NumPy and CuPy alias
memory (Identity, Reshape, Transpose, Flatten, Unsqueeze, Slice, Split, Expand) and values read
again later, with in-place writes allowed at any size. Property: gpuops (cpu and the cuda
stand-in, optimized or not) equals onnxruntime on every output."""

from __future__ import annotations

from unittest import mock

import numpy as np
import onnxruntime as ort
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import gpuops
from gpuops.executor import run as executor

from tests.ops.common import assert_same

from . import examples
from .oracle import DEVICES

UNARY = ["Neg", "Abs", "Tanh", "Sin", "Cos", "Relu"]
BINARY = ["Add", "Sub", "Mul"]
VIEWS = ["Identity", "Reshape", "Transpose", "Flatten", "Unsqueeze", "Slice", "Split", "Expand"]


@st.composite
def aliasing_graphs(draw):
    shapes = {"x": (2, 3, 4)}
    nodes, inits = [], []

    def const(values, dtype=np.int64):
        name = f"c{len(inits)}"
        inits.append(numpy_helper.from_array(np.asarray(values, dtype), name))
        return name

    for k in range(draw(st.integers(3, 14))):
        src = draw(st.sampled_from(sorted(shapes)))
        shape, out = shapes[src], f"v{k}"
        kind = draw(st.sampled_from(["unary", "binary", "view", "view"]))
        if kind == "unary":
            nodes.append(helper.make_node(draw(st.sampled_from(UNARY)), [src], [out]))
        elif kind == "binary":
            same = sorted(n for n, s in shapes.items() if s == shape)
            other = draw(st.sampled_from(same + ["scalar", "row"]))
            if other == "scalar":
                other = const(np.float32(0.5), np.float32)
            elif other == "row":
                other = const(np.linspace(-1, 1, shape[-1]), np.float32)
            a, b = draw(st.permutations([src, other]))
            nodes.append(helper.make_node(draw(st.sampled_from(BINARY)), [a, b], [out]))
        else:
            op = draw(st.sampled_from(VIEWS))
            if op == "Identity":
                nodes.append(helper.make_node(op, [src], [out]))
            elif op == "Reshape":
                size = int(np.prod(shape))
                shape = (size,) if len(shape) > 1 or size % 2 else (2, size // 2)
                nodes.append(helper.make_node(op, [src, const(shape)], [out]))
            elif op == "Transpose":
                perm = draw(st.permutations(range(len(shape))))
                nodes.append(helper.make_node(op, [src], [out], perm=list(perm)))
                shape = tuple(shape[p] for p in perm)
            elif op == "Flatten":
                nodes.append(helper.make_node(op, [src], [out], axis=1))
                shape = (shape[0], int(np.prod(shape[1:])))
            elif op == "Unsqueeze":
                nodes.append(helper.make_node(op, [src, const([0])], [out]))
                shape = (1, *shape)
            elif op == "Slice":
                axis, step = draw(st.integers(0, len(shape) - 1)), draw(st.sampled_from([1, 2]))
                nodes.append(helper.make_node(op, [src, const([0]), const([shape[axis]]), const([axis]),
                                                   const([step])], [out]))
                shape = tuple(-(-d // step) if i == axis else d for i, d in enumerate(shape))
            elif op == "Split":
                axis = next((i for i, d in enumerate(shape) if d % 2 == 0), None)
                if axis is None:
                    continue
                nodes.append(helper.make_node(op, [src], [out, out + "b"], axis=axis, num_outputs=2))
                shape = tuple(d // 2 if i == axis else d for i, d in enumerate(shape))
                shapes[out + "b"] = shape
            else:  # Expand: a broadcast view, read-only in NumPy
                nodes.append(helper.make_node(op, [src, const((2, *shape))], [out]))
                shape = (2, *shape)
        shapes[out] = shape
    produced = [o for n in nodes for o in n.output]
    if not produced:
        nodes.append(helper.make_node("Neg", ["x"], ["v"]))
        produced, shapes["v"] = ["v"], shapes["x"]
    outputs = sorted(set(draw(st.lists(st.sampled_from(produced), min_size=0, max_size=3))) | {produced[-1]})
    graph = helper.make_graph(
        nodes, "aliasing", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


X = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 3, 4)


@settings(max_examples=examples(60))
@given(aliasing_graphs())
def test_in_place_writes_never_change_what_an_alias_reads(model):
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": X})
    for device in DEVICES:
        for optimize in ("none", "all"):
            x = X.copy()
            with mock.patch.object(executor, "MIN_IN_PLACE_BYTES", 0):  # in place at any size
                got = gpuops.InferenceSession(model, device=device, optimize=optimize).run(None, {"x": x})
            assert_same(got, want, rtol=1e-6, atol=1e-6)
            np.testing.assert_array_equal(x, X)  # the feed is never written
