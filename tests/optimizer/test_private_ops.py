"""The CPU's private fused ops (gpuops/optimizer/squeeze_excite.py, conv_silu.py): squeeze-and-excitation
blocks and Conv + SiLU in the forms TorchScript and the dynamo exporter write them become one
``ai.gpuops`` node each, whose model-local function keeps the model valid ONNX: onnx's full check
passes, onnxruntime runs it to its results on the model as given, and gpuops runs it to its own
unoptimized results. Without ``device="cpu"`` nothing is rewritten."""

import numpy as np
import pytest
from onnx import TensorProto, helper


from .helpers import check_cpu_private, make_model, ops

rng = np.random.default_rng(3)
F = TensorProto.FLOAT
C, R = 16, 4


def _f32(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _inner(kind, x, out):
    if kind == "Relu":
        return [helper.make_node("Relu", [x], [out])]
    if kind == "HardSwish":
        return [helper.make_node("HardSwish", [x], [out])]
    return [helper.make_node("Sigmoid", [x], [out + "_s"]), helper.make_node("Mul", [x, out + "_s"], [out])]


def _gate(kind, x, out):
    if kind == "Sigmoid":
        return [helper.make_node("Sigmoid", [x], [out])]
    return [helper.make_node("HardSigmoid", [x], [out], alpha=1 / 6, beta=0.5)]


def _se_model(inner, gate, *, pool="GlobalAveragePool", gate_first=False, batch="N", extra_output=False,
              fed_weight=False):
    """X -> 3x3 conv -> SE block -> Y (X's batch axis ``batch``: a symbol or a number; ``fed_weight``: W2 a
    graph input)."""
    conv1 = helper.make_node("Conv", ["p", "W1", "B1"], ["c1"])
    if pool == "GlobalAveragePool":
        squeeze = [helper.make_node("GlobalAveragePool", ["x"], ["p"])]
    else:  # the dynamo exporter's mean over the spatial axes
        squeeze = [helper.make_node("ReduceMean", ["x", "axes"], ["p"], keepdims=1)]
    nodes = [helper.make_node("Conv", ["X", "W0", "B0"], ["x"], pads=[1, 1, 1, 1]), *squeeze, conv1,
             *_inner(inner, "c1", "h"), helper.make_node("Conv", ["h", "W2", "B2"], ["c2"]), *_gate(gate, "c2", "g"),
             helper.make_node("Mul", ["g", "x"] if gate_first else ["x", "g"], ["Y"])]
    inits = [("W0", _f32(C, 3, 3, 3)), ("B0", _f32(C)), ("W1", _f32(R, C, 1, 1, scale=0.5)), ("B1", _f32(R)),
             ("W2", _f32(C, R, 1, 1, scale=0.5)), ("B2", _f32(C)), ("axes", np.array([2, 3], np.int64))]
    outputs = [helper.make_tensor_value_info("Y", F, [batch, C, 9, 11])]
    if extra_output:
        outputs.append(helper.make_tensor_value_info("p", F, [batch, C, 1, 1]))
    feeds = {"X": _f32(2, 3, 9, 11)}
    if fed_weight:
        feeds["W2"] = inits.pop(4)[1]
    model = make_model(nodes, feeds, outputs, inits=inits, opset=18)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = batch
    return model, feeds


@pytest.mark.parametrize("inner", ["Relu", "HardSwish", "Silu"])
@pytest.mark.parametrize("gate", ["Sigmoid", "HardSigmoid"])
def test_squeeze_excite_becomes_one_node(inner, gate):
    model, feeds = _se_model(inner, gate)
    opt = check_cpu_private(model, feeds, [f"SqueezeExcite{inner}{gate}"], ["GlobalAveragePool", "Mul", "HardSigmoid"])
    assert len(opt.graph.node) == 2 and len(opt.functions) == 1


def test_dynamo_forms_become_one_node():
    """ReduceMean for the pool, the gate before x in the Mul, a fixed batch, and the SiLU conv before
    the block: ConvSilu and SqueezeExcite."""
    model, feeds = _se_model("Silu", "Sigmoid", pool="ReduceMean", gate_first=True, batch="2")
    nodes = list(model.graph.node)
    nodes[0].output[0] = "x0"
    silu = [helper.make_node("Sigmoid", ["x0"], ["x0_s"]), helper.make_node("Mul", ["x0_s", "x0"], ["x"])]
    del model.graph.node[:]
    model.graph.node.extend([nodes[0], *silu, *nodes[1:]])
    opt = check_cpu_private(model, feeds, ["ConvSilu", "SqueezeExciteSiluSigmoid"], ["ReduceMean", "Conv", "Sigmoid", "Mul"])
    assert ops(opt) == {"ConvSilu": 1, "SqueezeExciteSiluSigmoid": 1}


def test_conv_silu_without_a_bias():
    X = _f32(1, 4, 10, 10)
    nodes = [helper.make_node("Conv", ["X", "W"], ["c"], strides=[2, 2], pads=[0, 1, 1, 0]),
             helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["Y"])]
    model = make_model(nodes, {"X": X}, [helper.make_tensor_value_info("Y", F, [1, 8, 5, 5])],
                       inits=[("W", _f32(8, 4, 3, 3))], opset=13)
    check_cpu_private(model, {"X": X}, ["ConvSilu"], ["Conv", "Sigmoid", "Mul", "QuickGelu"])


@pytest.mark.parametrize("case", ["pooled-value-read-elsewhere", "weight-not-constant"])
def test_blocks_that_do_not_fit_are_kept(case):
    if case == "pooled-value-read-elsewhere":
        model, feeds = _se_model("Relu", "Sigmoid", extra_output=True)
    else:
        model, feeds = _se_model("Relu", "Sigmoid", fed_weight=True)
    check_cpu_private(model, feeds, ["GlobalAveragePool", "Mul"], ["SqueezeExciteReluSigmoid"])


def _embed_model(case):
    """int64 ids, segments and mask Cast to int32 into com.microsoft EmbedLayerNormalization, as
    onnxruntime's transformer optimizer leaves an exported BERT."""
    B, S, D = 2, 6, 16
    rng = np.random.default_rng(3)
    feeds = {"ids": rng.integers(0, 30, (B, S)).astype(np.int64), "seg": rng.integers(0, 2, (B, S)).astype(np.int64),
             "mask": np.array([[1] * S, [1] * (S - 2) + [0, 0]], np.int64)}
    inits = [("word", _f32(30, D)), ("pos", _f32(S + 2, D)), ("segemb", _f32(2, D)), ("gamma", _f32(D)),
             ("beta", _f32(D)), ("pid", np.arange(S, dtype=np.int32)[None])]
    nodes = [helper.make_node("Cast", [x], [x + "32"], to=TensorProto.INT32) for x in ("ids", "seg", "mask")]
    inputs = ["ids32", "seg32", "word", "pos", "segemb", "gamma", "beta", "mask32", "pid"]
    outputs = ["y", "mask_index"]
    if case == "no-position-ids":
        inputs = inputs[:8]
    if case == "int32-mask":  # the mask fed as int32: no Cast of its own
        feeds["mask"] = feeds["mask"].astype(np.int32)
        nodes = nodes[:2]
        inputs[7] = "mask"
    if case == "sum-read":
        outputs.append("sum")
    if case == "mask-cast-read-elsewhere":
        nodes.append(helper.make_node("ReduceSum", ["mask32"], ["mask_total"], keepdims=0))
    nodes.append(helper.make_node("EmbedLayerNormalization", inputs, outputs, domain="com.microsoft", epsilon=1e-5))
    nodes.append(helper.make_node("ReduceMean", ["y"], ["pooled"], axes=[1], keepdims=0))
    info = helper.make_tensor_value_info
    graph_outputs = [info("pooled", F, [B, D]), info("mask_index", TensorProto.INT32, [B])]
    if case == "sum-read":
        graph_outputs.append(info("sum", F, [B, S, D]))
    if case == "mask-cast-read-elsewhere":
        graph_outputs.append(info("mask_total", TensorProto.INT32, []))
    model = make_model(nodes, feeds, graph_outputs, inits=inits, opset=17, opsets={"com.microsoft": 1})
    model.graph.value_info.append(info("y", F, [B, S, D]))  # (onnx infers no com.microsoft op's types)
    return model, feeds


@pytest.mark.parametrize("case", ["all", "no-position-ids", "int32-mask", "mask-cast-read-elsewhere"])
def test_embed_layernorm_takes_its_id_casts_in(case):
    model, feeds = _embed_model(case)
    opt = check_cpu_private(model, feeds, ["CastEmbedLayerNormalization"], ["EmbedLayerNormalization"])
    assert ops(opt)["Cast"] == (1 if case == "mask-cast-read-elsewhere" else 0)


def test_embed_layernorm_with_its_sum_read_is_kept():
    model, feeds = _embed_model("sum-read")
    check_cpu_private(model, feeds, ["EmbedLayerNormalization", "Cast"], ["CastEmbedLayerNormalization"])


def _one_hot_model(case):
    """jax.nn.one_hot of int32 bytes (Unsqueeze, Equal against the classes 0..D-1, Cast) into a dense layer
    (MatMul, Add), as jax2tf exports magika's embedding; the bytes run below 0 and past D."""
    D, E = 11, 6
    rng = np.random.default_rng(5)
    R = np.arange(D, dtype=np.int64 if case == "int64" else np.int32)[None, None]
    W = _f32(D, E)
    if case == "table-with-inf":
        W[3, 2] = np.inf
    if case == "classes-from-1":
        R = R + 1
    feeds = {"A": rng.integers(-2, D + 2, (2, 9)).astype(R.dtype)}
    equal = ["R", "a"] if case == "classes-first" else ["a", "R"]
    nodes = [helper.make_node("Unsqueeze", ["A", "axis"], ["a"]), helper.make_node("Equal", equal, ["hot"]),
             helper.make_node("Cast", ["hot"], ["onehot"], to=F), helper.make_node("MatMul", ["onehot", "W"], ["m"]),
             helper.make_node("Add", ["m", "B"], ["Y"])]
    outputs = [helper.make_tensor_value_info("Y", F, [2, 9, E])]
    if case == "one-hot-read-elsewhere":
        outputs.append(helper.make_tensor_value_info("onehot", F, [2, 9, D]))
    inits = [("axis", np.array([-1], np.int64)), ("R", R), ("W", W), ("B", _f32(E))]
    return make_model(nodes, feeds, outputs, inits=inits, opset=17), feeds


@pytest.mark.parametrize("case", ["jax", "classes-first", "int64"])
def test_a_one_hot_times_a_table_becomes_its_rows(case):
    model, feeds = _one_hot_model(case)
    opt = check_cpu_private(model, feeds, ["OneHotMatMul"], ["Equal", "Cast", "MatMul"])
    import gpuops

    got = gpuops.InferenceSession(model, device="cpu").run(None, feeds)[0]
    np.testing.assert_array_equal(got, gpuops.InferenceSession(model, device="cpu", optimize="none").run(None, feeds)[0])
    assert ops(opt)["OneHotMatMul"] == 1 and len(opt.functions) == 1


@pytest.mark.parametrize("case", ["table-with-inf", "classes-from-1", "one-hot-read-elsewhere"])
def test_one_hots_that_are_not_a_tables_rows_are_kept(case):
    model, feeds = _one_hot_model(case)
    check_cpu_private(model, feeds, ["Equal", "Cast", "MatMul"], ["OneHotMatMul"])
