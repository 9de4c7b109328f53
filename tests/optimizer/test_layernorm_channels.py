"""ConvNeXt's LayerNorm2d (Transpose to NHWC -> LayerNormalization over the last axis -> Transpose back)
-> gpuops' private LayerNormChannels on the CPU (gpuops/optimizer/layernorm_channels.py): the model stays
valid ONNX (onnx's full check), onnxruntime runs the optimized model to the original's results and gpuops
to its unoptimized ones; forms that do not fit are kept, and without ``device="cpu"`` nothing changes."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from .helpers import check_cpu_private, make_model

rng = np.random.default_rng(5)
F = TensorProto.FLOAT
C = 24


def _f32(*shape, scale=1.0, shift=0.0):
    return (rng.standard_normal(shape) * scale + shift).astype(np.float32)


def _model(*, axis=-1, back=(0, 3, 1, 2), extra_output=False, epsilon=1e-6):
    """X -> 2x2 conv -> LayerNorm2d -> 1x1 conv -> Y."""
    nodes = [helper.make_node("Conv", ["X", "W0", "B0"], ["x"], strides=[2, 2]),
             helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "g", "b"], ["n"], axis=axis, epsilon=epsilon),
             helper.make_node("Transpose", ["n"], ["u"], perm=list(back)),
             helper.make_node("Conv", ["u", "W1", "B1"], ["Y"])]
    inits = [("W0", _f32(C, 3, 2, 2)), ("B0", _f32(C, shift=2.0)), ("g", _f32(C)), ("b", _f32(C)),
             ("W1", _f32(8, C, 1, 1)), ("B1", _f32(8))]
    outputs = [helper.make_tensor_value_info("Y", F, [2, 8, 9, 7] if back == (0, 3, 1, 2) else [2, 8, 7, 9])]
    if extra_output:
        outputs.append(helper.make_tensor_value_info("n", F, [2, 9, 7, C]))
    feeds = {"X": _f32(2, 3, 18, 14)}
    return make_model(nodes, feeds, outputs, inits=inits, opset=18), feeds


@pytest.mark.parametrize("axis", [-1, 3])
def test_layer_norm_2d_becomes_one_node(axis):
    model, feeds = _model(axis=axis)
    opt = check_cpu_private(model, feeds, ["LayerNormChannels"], ["Transpose", "LayerNormalization"])
    assert len(opt.graph.node) == 3 and len(opt.functions) == 1


@pytest.mark.parametrize("case", ["normalized-value-read-elsewhere", "other-permutation"])
def test_forms_that_do_not_fit_are_kept(case):
    if case == "normalized-value-read-elsewhere":
        model, feeds = _model(extra_output=True)
    else:
        model, feeds = _model(back=(0, 3, 2, 1))
    check_cpu_private(model, feeds, ["Transpose", "LayerNormalization"], ["LayerNormChannels"])
