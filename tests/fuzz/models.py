"""Small models the reliability tests and the fuzzer start from."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LOCAL = "local"
OPSETS = [helper.make_opsetid("", 18), helper.make_opsetid(LOCAL, 1)]


def functions_model(depth: int, *, calls: int = 1, callee=lambda k: k - 1, subgraph: bool = False) -> onnx.ModelProto:
    """``y = F{depth-1}(x)``: F0(x) = -relu(x); Fk(x) = -F{callee(k)}(x) summed over ``calls`` calls
    (``subgraph``: the call sits in an If branch). ``callee`` may point back up to make recursion."""
    fns = []
    for k in range(depth):
        if k == 0:
            body = [helper.make_node("Relu", ["x"], ["t"], name="r")]
        else:
            body = [helper.make_node(f"F{callee(k)}", ["x"], [f"c{i}"], domain=LOCAL, name=f"c{i}") for i in range(calls)]
            body.append(helper.make_node("Sum", [f"c{i}" for i in range(calls)], ["t"], name="s"))
        if subgraph and k:
            then = helper.make_graph(body, "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
            body = [helper.make_node("Constant", [], ["cond"], value=numpy_helper.from_array(np.array(True))),
                    helper.make_node("If", ["cond"], ["t"], name="if", then_branch=then, else_branch=then)]
        body.append(helper.make_node("Neg", ["t"], ["y"], name="n"))
        fns.append(helper.make_function(LOCAL, f"F{k}", ["x"], ["y"], body, OPSETS))
    g = helper.make_graph([helper.make_node(f"F{depth - 1}", ["x"], ["y"], domain=LOCAL, name="top")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    return helper.make_model(g, opset_imports=OPSETS, functions=fns, ir_version=10)


def overridable_model() -> onnx.ModelProto:
    """Initializers that are also graph inputs and that ops read at plan time: Reshape's shape,
    Range's limit, Expand's shape (through ConstantOfShape's)."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Range", ["start", "limit", "delta"], ["q"]),
             helper.make_node("ConstantOfShape", ["eshape"], ["c"], value=numpy_helper.from_array(np.ones(1, np.float32))),
             helper.make_node("Expand", ["c", "eshape"], ["e"])]
    inits = {"shape": np.array([2, 3], np.int64), "start": np.array(0, np.int64), "limit": np.array(4, np.int64),
             "delta": np.array(1, np.int64), "eshape": np.array([2, 2], np.int64)}
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    inputs += [helper.make_tensor_value_info(k, TensorProto.INT64, list(v.shape)) for k, v in inits.items() if k != "delta"]
    g = helper.make_graph(nodes, "g", inputs, [onnx.ValueInfoProto(name=n) for n in ("r", "q", "e")],
                          initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=OPSETS[:1], ir_version=10)


def relu_model(elem_type=TensorProto.FLOAT) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", elem_type, [2])],
                          [helper.make_tensor_value_info("y", elem_type, [2])])
    return helper.make_model(g, opset_imports=OPSETS[:1], ir_version=10)


def initializer_model(weight: onnx.TensorProto | None = None, sparse: onnx.SparseTensorProto | None = None):
    """``y = x + w`` with ``w`` a (possibly external or sparse) initializer of shape [2, 3]."""
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          initializer=[weight] if weight is not None else [],
                          sparse_initializer=[sparse] if sparse is not None else [])
    return helper.make_model(g, opset_imports=OPSETS[:1], ir_version=10)


def sparse_tensor(values, indices, dims, name="w") -> onnx.SparseTensorProto:
    return helper.make_sparse_tensor(numpy_helper.from_array(np.asarray(values, np.float32), name),
                                     numpy_helper.from_array(np.asarray(indices, np.int64), ""), dims)
