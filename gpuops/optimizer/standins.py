"""ai.onnx stand-ins for com.microsoft nodes, for shape inference only.

ONNX shape inference knows no com.microsoft op, so the values after a fused node would lose their
types and shapes, and with them every rewrite that needs one. The inference copy of a graph gets,
in place of such a node, ai.onnx nodes making outputs of the same type and shape from the same
inputs; the symbolic dims (a dynamic batch or sequence axis) then flow through as through the
nodes the fusion replaced. A node without a stand-in keeps the type its outputs had before."""

from __future__ import annotations

from onnx import helper

# output 0 has input 0's type and shape
_SAME_AS_FIRST = {"QuickGelu", "Gelu", "BiasGelu", "FastGelu", "SkipLayerNormalization",
                  "SkipSimplifiedLayerNormalization", "BiasAdd"}
_CONV = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
_GEMM = ("alpha", "beta", "transA", "transB")


def standin(node, opset: int):
    """ai.onnx nodes standing in for the com.microsoft ``node`` (its first output only), or None."""
    op, out = node.op_type, node.output[0]
    if not node.input or not node.input[0] or not out:
        return None
    keep = [a for a in node.attribute]
    if op in _SAME_AS_FIRST or (op == "Attention" and not any(a.name == "qkv_hidden_sizes" for a in keep)):
        return [helper.make_node("Identity", [node.input[0]], [out])]  # (Attention: (B, S, D) -> (B, S, D))
    if op in ("MatMulIntegerToFloat", "DynamicQuantizeMatMul") and len(node.input) > 1 and node.input[1]:
        a, w = out + "_standin_a", out + "_standin_b"
        return [helper.make_node("Cast", [node.input[0]], [a], to=1),
                helper.make_node("Cast", [node.input[1]], [w], to=1), helper.make_node("MatMul", [a, w], [out])]
    if op == "QAttention" and len(node.input) > 1 and node.input[1]:  # (B, S, D) x (D, 3H) -> (B, S, H)
        a, w, p = out + "_standin_input", out + "_standin_weight", out + "_standin_qkv"
        split = {"num_outputs": 3} if opset >= 18 else {}
        return [helper.make_node("Cast", [node.input[0]], [a], to=1),
                helper.make_node("Cast", [node.input[1]], [w], to=1), helper.make_node("MatMul", [a, w], [p]),
                helper.make_node("Split", [p], [out, out + "_standin_k", out + "_standin_v"], axis=-1, **split)]
    if op == "FusedConv":
        n = helper.make_node("Conv", list(node.input[:3]), [out])
        n.attribute.extend(a for a in keep if a.name in _CONV)
        return [n]
    if op == "FusedGemm" and opset >= 11:
        n = helper.make_node("Gemm", list(node.input[:3]), [out])
        n.attribute.extend(a for a in keep if a.name in _GEMM)
        return [n]
    return None
