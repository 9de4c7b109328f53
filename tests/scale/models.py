"""Small models for the batch / Ray tests."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp(batch: int | str = "N", seed: int = 0) -> onnx.ModelProto:
    """x [batch, 4] float32, k [batch] int64 -> y = relu(x @ W + b) [batch, 3], s = sum(y) + k [batch]."""
    rng = np.random.default_rng(seed)
    W = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["z"]),
             helper.make_node("Relu", ["z"], ["y"]),
             helper.make_node("ReduceSum", ["y", "axes"], ["r"], keepdims=0),
             helper.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["r", "kf"], ["s"])]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4]),
         helper.make_tensor_value_info("k", TensorProto.INT64, [batch])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [batch])],
        [W, b, axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def rows(n: int, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, 4)).astype(np.float32), "k": rng.integers(0, 9, n).astype(np.int64),
            "id": np.arange(n, dtype=np.int64)}


def reference(model: onnx.ModelProto, table: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The expected outputs: onnx's reference evaluator, one row at a time."""
    from onnx.reference import ReferenceEvaluator

    ref = ReferenceEvaluator(model)
    outs = [ref.run(None, {"x": table["x"][i:i + 1], "k": table["k"][i:i + 1]}) for i in range(len(table["id"]))]
    return {"y": np.concatenate([o[0] for o in outs]), "s": np.concatenate([o[1] for o in outs])}
