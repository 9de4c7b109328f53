"""ReduceMean over the spatial axes -> GlobalAveragePool (squeeze-excitation and classifier heads
as the torch exporters write them), and the Flatten of a 2-D value that is then a no-op."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from .helpers import check, make_model, ops

rng = np.random.default_rng(0)
F = TensorProto.FLOAT


def _out():
    return [helper.make_tensor_value_info("Y", F, None)]


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("axes", [[2, 3], [-1, -2], [3, 2]])
@pytest.mark.parametrize("keepdims", [1, 0])
def test_spatial_reduce_mean_becomes_global_average_pool(opset, axes, keepdims):
    X = rng.standard_normal((2, 5, 6, 7)).astype(np.float32)
    if opset >= 18:
        nodes = [helper.make_node("ReduceMean", ["X", "axes"], ["Y"], keepdims=keepdims)]
        inits = [("axes", np.array(axes, np.int64))]
    else:
        nodes = [helper.make_node("ReduceMean", ["X"], ["Y"], axes=axes, keepdims=keepdims)]
        inits = []
    m = make_model(nodes, {"X": X}, _out(), inits=inits, opset=opset)
    # a mean of 42 values: the two kernels sum in other orders, a few eps apart
    opt = check(m, {"X": X}, gone=["ReduceMean"], present=["GlobalAveragePool"], rtol=1e-6, atol=1e-6)
    assert dict(ops(opt)) == ({"GlobalAveragePool": 1} if keepdims else {"GlobalAveragePool": 1, "Flatten": 1})


def test_head_flatten_after_the_pool_goes():
    """TorchScript's head: mean((2, 3)) then Flatten(1): one GlobalAveragePool and one Flatten."""
    X = rng.standard_normal((2, 5, 4, 4)).astype(np.float32)
    nodes = [helper.make_node("ReduceMean", ["X"], ["m"], axes=[2, 3], keepdims=0),
             helper.make_node("Flatten", ["m"], ["Y"], axis=1)]
    opt = check(make_model(nodes, {"X": X}, _out(), opset=17), {"X": X}, rtol=1e-6, atol=1e-6)
    assert dict(ops(opt)) == {"GlobalAveragePool": 1, "Flatten": 1}


@pytest.mark.parametrize("axes, shape", [([1, 2, 3], (2, 5, 4, 4)), ([2], (2, 5, 4, 4)), ([2, 3], (2, 5, 4, 4, 3))])
def test_other_reductions_kept(axes, shape):
    X = rng.standard_normal(shape).astype(np.float32)
    m = make_model([helper.make_node("ReduceMean", ["X"], ["Y"], axes=axes)], {"X": X}, _out(), opset=17)
    check(m, {"X": X}, kept=["ReduceMean"], rtol=1e-6, atol=1e-6)


def test_mean_over_the_last_axis_of_a_3d_value_kept():
    """(batch, sequence, hidden): a LayerNorm's mean, not a pool."""
    X = rng.standard_normal((2, 5, 8)).astype(np.float32)
    m = make_model([helper.make_node("ReduceMean", ["X"], ["Y"], axes=[-1])], {"X": X}, _out(), opset=17)
    check(m, {"X": X}, kept=["ReduceMean"], rtol=1e-6, atol=1e-6)
