"""DynamicQuantizeLinear -> com.microsoft MatMulIntegerToFloat -> com.microsoft DynamicQuantizeMatMul
(onnxruntime's fusion of a dynamically quantized MatMul): where the MatMulIntegerToFloat alone reads
the DynamicQuantizeLinear's three outputs (as A, a_scale and a_zero_point), one node computes both,
with the same arithmetic. A DynamicQuantizeLinear that several products share (q, k, v) stays.
"""

from __future__ import annotations

from .graph import MS, Graph


def apply(graph: Graph) -> bool:
    removed = []
    for mm in list(graph.nodes):
        if mm.op_type != "MatMulIntegerToFloat" or mm.domain != MS or len(mm.input) < 5:
            continue
        dq = graph.producer.get(mm.input[0])
        if dq is None or dq.op_type != "DynamicQuantizeLinear" or dq.domain not in ("", "ai.onnx"):
            continue
        if len(dq.output) != 3 or list(dq.output) != [mm.input[0], mm.input[2], mm.input[4]]:
            continue
        if not all(graph.single_use(o) for o in dq.output) or any(n is dq for n in removed):
            continue
        b_zero = mm.input[5] if len(mm.input) > 5 else ""
        bias = mm.input[6] if len(mm.input) > 6 else ""
        inputs = [dq.input[0], mm.input[1], mm.input[3], b_zero, bias]
        while inputs and not inputs[-1]:
            inputs.pop()
        fused = graph.make_node("DynamicQuantizeMatMul", inputs, mm.output, domain=MS)
        graph.nodes.insert(graph.nodes.index(mm), fused)
        removed += [dq, mm]
    return graph.remove(*removed)
