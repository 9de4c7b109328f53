"""jax2tf's LayerNorm (flax's, as tf2onnx 1.16 writes it in magika): the variance from the moments, each
statistic reduced without its axis and broadcast back by Reshape + Expand to a shape built from the input's
Shape -> LayerNormalization (gpuops/optimizer/layernorm.py); its near misses stay as they are."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops
from gpuops.optimizer import optimize
from gpuops.ops.contrib.private import DOMAIN as PRIVATE

from .helpers import check, make_model, ops

rng = np.random.default_rng(0)
F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
B, S, D = 2, 6, 16
WRITTEN = ("ReduceSum", "Sqrt", "Reciprocal", "Max", "Expand", "Sub")


def _model(*, dims=(D,), axis=-1, gamma_shape=None, beta_shape=None, eps_input=False, mean_read=False,
           square_read=False, opset=15, offset=0.0):
    """x of shape (batch, *dims) -> magika's LayerNorm over ``axis`` (gamma and beta of the given shapes,
    default (1, *dims) with 1 at every axis but ``axis``); ``eps_input``: epsilon a graph input;
    ``mean_read`` / ``square_read``: the mean, or the mean's square, is an output too."""
    rank = len(dims) + 1
    axis %= rank
    n = dims[axis - 1]
    kept = [1 if i == axis else d for i, d in enumerate((0,) + dims)]  # the kept-dims shape, batch first
    stat = (1,) + tuple(n if i == axis else 1 for i in range(1, rank))
    gamma_shape = stat if gamma_shape is None else gamma_shape
    beta_shape = stat if beta_shape is None else beta_shape
    X = (rng.standard_normal((B,) + dims) * 2 + offset).astype(np.float32)
    x = helper.make_tensor_value_info("x", F, ["batch", *dims])
    inits = [("axes", np.array([axis], np.int64)), ("recip", np.float32(1 / n)), ("zero", np.float32(0)),
             ("starts", np.array([0], np.int64)), ("ends", np.array([1], np.int64)),
             ("gamma", rng.uniform(0.5, 2, gamma_shape).astype(np.float32)),
             ("beta", rng.standard_normal(beta_shape).astype(np.float32))]
    inputs, feeds = [x], {"x": X}
    if eps_input:
        inputs.append(helper.make_tensor_value_info("eps", F, []))
        feeds["eps"] = np.array(1e-6, np.float32)
    else:
        inits.append(("eps", np.float32(1e-6)))
    pieces = []
    for i, d in enumerate(kept[1:], 1):
        inits.append((f"k{i}", np.array([d], np.int32)))
        pieces.append(f"k{i}")
    nodes = [  # the kept-dims shape, from the batch of x's Shape
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Cast", ["shape"], ["shape32"], to=I32),
        helper.make_node("Slice", ["shape32", "starts", "ends", "starts"], ["batch"]),
        helper.make_node("Concat", ["batch", *pieces], ["kept32"], axis=0),
        helper.make_node("Cast", ["kept32"], ["kept"], to=I64),
        # magika's LayerNorm_1, node for node
        helper.make_node("ReduceSum", ["x", "axes"], ["sum"], keepdims=0, noop_with_empty_axes=1),
        helper.make_node("Mul", ["sum", "recip"], ["mean"]),
        helper.make_node("Mul", ["mean", "mean"], ["mean2"]),
        helper.make_node("Reshape", ["mean", "kept"], ["mean_r"]),
        helper.make_node("Expand", ["mean_r", "kept"], ["mean_b"]),
        helper.make_node("Sub", ["x", "mean_b"], ["d"]),
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "axes"], ["sum2"], keepdims=0, noop_with_empty_axes=1),
        helper.make_node("Mul", ["sum2", "recip"], ["msq"]),
        helper.make_node("Sub", ["msq", "mean2"], ["var"]),
        helper.make_node("Max", ["zero", "var"], ["var0"]),
        helper.make_node("Reshape", ["var0", "kept"], ["var_r"]),
        helper.make_node("Expand", ["var_r", "kept"], ["var_b"]),
        helper.make_node("Add", ["var_b", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["std"]),
        helper.make_node("Reciprocal", ["std"], ["inv"]),
        helper.make_node("Mul", ["inv", "gamma"], ["scale"]),
        helper.make_node("Mul", ["d", "scale"], ["y"]),
        helper.make_node("Add", ["y", "beta"], ["Y"]),
    ]
    outputs = [helper.make_tensor_value_info("Y", F, None)]
    if mean_read:
        outputs.append(helper.make_tensor_value_info("mean", F, None))
    if square_read:
        outputs.append(helper.make_tensor_value_info("mean2", F, None))
    return make_model(nodes, inputs, outputs, inits=inits, opset=opset), feeds


@pytest.mark.parametrize("dims", [(D,), (S, D)], ids=["rank2", "rank3"])
def test_magika_form_becomes_gpuops_layernorm(dims):
    """Below opset 17 (magika's 15): gpuops' LayerNormalization, one plan step, its function valid ONNX."""
    m, feeds = _model(dims=dims)
    opt = check(m, feeds, present=["LayerNormalization"], gone=WRITTEN, atol=1e-4)
    assert [(n.domain, n.op_type) for n in opt.graph.node] == [(PRIVATE, "LayerNormalization")]
    (node,) = opt.graph.node
    assert node.input[0] == "x" and node.output[0] == "Y"
    assert [round(a.f, 9) for a in node.attribute if a.name == "epsilon"] == [1e-6]
    sess = gpuops.InferenceSession(m, device="cpu", threads=1)
    assert [(s.domain, s.op_type) for s in sess.plan.steps] == [(PRIVATE, "LayerNormalization")]


def test_magika_form_at_opset17_is_onnx_layernorm():
    m, feeds = _model(dims=(S, D), opset=17)
    opt = check(m, feeds, present=["LayerNormalization"], gone=WRITTEN, atol=1e-4)
    assert [(n.domain, n.op_type) for n in opt.graph.node] == [("", "LayerNormalization")]


def test_gamma_and_beta_of_one_element_broadcast():
    """gamma and beta constant along the normalized axis too (a (1, 1) constant) still fuse, as full vectors."""
    m, feeds = _model(gamma_shape=(1, 1), beta_shape=(1,))
    check(m, feeds, present=["LayerNormalization"], gone=WRITTEN, atol=1e-4)


def test_large_mean_within_float32_bounds():
    """With a mean large against the spread the written-out variance loses digits to cancellation; the fused
    op's centred one does not: both stay within float32 LayerNorm bounds of each other."""
    m, feeds = _model(offset=30.0)
    check(m, feeds, present=["LayerNormalization"], gone=WRITTEN, rtol=1e-3, atol=1e-3)


def test_beta_along_another_axis_stays_an_add():
    """A bias varying along another axis is no LayerNormalization's B: the LayerNorm fuses without it (B zero)
    and the Add stays after it."""
    m, feeds = _model(dims=(S, D), beta_shape=(1, S, 1))
    opt = check(m, feeds, present=["LayerNormalization", "Add"], gone=WRITTEN, atol=1e-4)
    assert [n.op_type for n in opt.graph.node] == ["LayerNormalization", "Add"]


@pytest.mark.parametrize("case", ["middle axis", "gamma along another axis", "mean read", "mean's square read",
                                  "epsilon an input"])
def test_near_misses_are_kept(case):
    """Not a LayerNorm that LayerNormalization can run, or a value of the pattern read elsewhere: nothing fuses
    (and the results stay the model's)."""
    kwargs = {"middle axis": dict(dims=(S, D), axis=1),  # magika's LayerNorm_0: over axis 1 of 3
              "gamma along another axis": dict(dims=(S, D), gamma_shape=(1, S, 1)),
              "mean read": dict(mean_read=True),
              "mean's square read": dict(square_read=True),
              "epsilon an input": dict(eps_input=True)}[case]
    m, feeds = _model(**kwargs)
    opt = check(m, feeds, kept=["ReduceSum", "Sqrt", "Reciprocal"], atol=1e-4)
    assert ops(opt)["LayerNormalization"] == 0


def test_reshape_to_another_shape_is_kept():
    """The mean broadcast back along the wrong axis (its Reshape to (1, batch) of a square input): no fusion."""
    m, _ = _model()
    g = m.graph
    for n in g.node:
        if n.op_type == "Concat":
            n.input[:] = [n.input[1], n.input[0]]  # (1, batch) instead of (batch, 1)
    X = rng.standard_normal((D, D)).astype(np.float32)
    assert ops(optimize(m))["LayerNormalization"] == 0
    want = gpuops.InferenceSession(m, device="cpu", optimize="none").run(None, {"x": X})
    got = gpuops.InferenceSession(m, device="cpu").run(None, {"x": X})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
