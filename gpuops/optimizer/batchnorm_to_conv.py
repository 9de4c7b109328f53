"""An inference BatchNormalization that no Conv or Gemm before it absorbed (DenseNet's and pre-activation
ResNets' BatchNormalization -> Relu -> Conv, after a Concat or a pool) becomes the per-channel affine map
it is, a 1x1 depthwise Conv: W[c] = scale / sqrt(var + epsilon), B = bias - mean * W[c] (computed in
float64, stored in float32). :mod:`.conv_fusion` then takes the activation after it into a FusedConv:
one pass over the tensor where BatchNormalization and Relu took three. float32 inputs of rank 3 or more
only (as FusedConv)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from .fold_batchnorm import bn_params
from .graph import Graph


def apply(graph: Graph) -> bool:
    changed = False
    for bn in graph.nodes:
        if bn.domain not in ("", "ai.onnx") or bn.op_type != "BatchNormalization":
            continue
        x = bn.input[0]
        info = graph.info(x)
        if info is None or info[0] != TensorProto.FLOAT or info[1] is None or len(info[1]) < 3:
            continue
        params = bn_params(graph, bn)
        if params is None or (info[1][1] is not None and info[1][1] != params[0].shape[0]):
            continue
        s, shift = params
        C = s.shape[0]
        w = graph.add_const(s.reshape((C,) + (1,) * (len(info[1]) - 1)).astype(np.float32), bn.input[1] + "_as_conv")
        b = graph.add_const(shift.astype(np.float32), bn.input[2] + "_as_conv")
        bn.op_type, bn.domain = "Conv", ""
        bn.input[:] = [x, w, b]
        del bn.output[1:]
        del bn.attribute[:]
        bn.attribute.append(helper.make_attribute("group", C))
        changed = True
    if changed:
        graph.invalidate()
        graph.index()
    return changed
