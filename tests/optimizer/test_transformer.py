"""Transformer patterns as the torch exporters write them out -> one op each."""

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops
from gpuops.optimizer import optimize
from gpuops.ops.contrib.private import DOMAIN as PRIVATE

from .helpers import check, make_model, ops

rng = np.random.default_rng(0)
F = TensorProto.FLOAT


def _out():
    return [helper.make_tensor_value_info("Y", F, None)]


def _gelu_nodes(form):
    """x * 0.5 * (1 + erf(x / sqrt 2)) in the orders the exporters use."""
    if form == "torchscript":  # Div, Erf, Add, Mul(x, .), Mul(., 0.5)
        return [helper.make_node("Div", ["X", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["X", "a"], ["m"]),
                helper.make_node("Mul", ["m", "half"], ["Y"])]
    if form == "dynamo":  # Mul(x, 1/sqrt 2), Erf, Add, Mul(0.5, .), Mul(x, .)
        return [helper.make_node("Mul", ["X", "rsqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                helper.make_node("Add", ["one", "e"], ["a"]), helper.make_node("Mul", ["half", "a"], ["m"]),
                helper.make_node("Mul", ["X", "m"], ["Y"])]
    # (x * 0.5) * (1 + erf(x / sqrt 2))
    return [helper.make_node("Mul", ["X", "half"], ["h"]), helper.make_node("Div", ["X", "sqrt2"], ["d"]),
            helper.make_node("Erf", ["d"], ["e"]), helper.make_node("Add", ["e", "one"], ["a"]),
            helper.make_node("Mul", ["h", "a"], ["Y"])]


GELU_CONSTS = [("sqrt2", np.float32(math.sqrt(2))), ("rsqrt2", np.float32(1 / math.sqrt(2))),
               ("one", np.float32(1)), ("half", np.float32(0.5))]


@pytest.mark.parametrize("form", ["torchscript", "dynamo", "half_first"])
def test_gelu(form):
    X = rng.standard_normal((2, 5, 8)).astype(np.float32)
    m = make_model(_gelu_nodes(form), {"X": X}, _out(), inits=GELU_CONSTS, opset=14)
    opt = check(m, {"X": X}, gone=["Erf", "Mul", "Div", "Add"], present=["Gelu"])
    assert len(opt.graph.node) == 1


def test_tanh_gelu():
    """GPT-2's 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) -> FastGelu."""
    X = rng.standard_normal((2, 5, 8)).astype(np.float32)
    nodes = [helper.make_node("Mul", ["half", "X"], ["h"]), helper.make_node("Pow", ["X", "three"], ["p"]),
             helper.make_node("Mul", ["c", "p"], ["cp"]), helper.make_node("Add", ["X", "cp"], ["i"]),
             helper.make_node("Mul", ["k", "i"], ["ki"]), helper.make_node("Tanh", ["ki"], ["t"]),
             helper.make_node("Add", ["one", "t"], ["a"]), helper.make_node("Mul", ["h", "a"], ["Y"])]
    consts = [("half", np.float32(0.5)), ("three", np.float32(3)), ("c", np.float32(0.044715)),
              ("k", np.float32(math.sqrt(2 / math.pi))), ("one", np.float32(1))]
    m = make_model(nodes, {"X": X}, _out(), inits=consts, opset=14)
    opt = check(m, {"X": X}, gone=["Tanh", "Pow", "Mul", "Add"], present=["FastGelu"])
    assert len(opt.graph.node) == 1


def test_tanh_gelu_of_jax2tf():
    """jax2tf's x (0.5 (1 + tanh(sqrt(2 / pi) (x + x (x (0.044715 x)))))) (magika) -> FastGelu."""
    X = rng.standard_normal((2, 5, 8)).astype(np.float32) * 3
    nodes = [helper.make_node("Mul", ["c", "X"], ["m"]), helper.make_node("Mul", ["X", "m"], ["m1"]),
             helper.make_node("Mul", ["X", "m1"], ["m2"]), helper.make_node("Add", ["X", "m2"], ["i"]),
             helper.make_node("Mul", ["k", "i"], ["ki"]), helper.make_node("Tanh", ["ki"], ["t"]),
             helper.make_node("Add", ["one", "t"], ["a"]), helper.make_node("Mul", ["half", "a"], ["h"]),
             helper.make_node("Mul", ["X", "h"], ["Y"])]
    consts = [("half", np.float32(0.5)), ("c", np.float32(0.044715)), ("k", np.float32(0.7978846)),
              ("one", np.float32(1))]
    m = make_model(nodes, {"X": X}, _out(), inits=consts, opset=14)
    opt = check(m, {"X": X}, gone=["Tanh", "Mul", "Add"], present=["FastGelu"])
    assert len(opt.graph.node) == 1


@pytest.mark.parametrize("form", ["torchscript", "tanh"])
def test_bias_gelu(form):
    """The projection's bias add before the activation goes into BiasGelu / FastGelu."""
    A = rng.standard_normal((2, 5, 8)).astype(np.float32)
    first = [helper.make_node("Add", ["A", "bias"], ["X"])]
    if form == "tanh":
        rest = [helper.make_node("Mul", ["half", "X"], ["h"]), helper.make_node("Pow", ["X", "three"], ["p"]),
                helper.make_node("Mul", ["c", "p"], ["cp"]), helper.make_node("Add", ["X", "cp"], ["i"]),
                helper.make_node("Mul", ["k", "i"], ["ki"]), helper.make_node("Tanh", ["ki"], ["t"]),
                helper.make_node("Add", ["one", "t"], ["a"]), helper.make_node("Mul", ["h", "a"], ["Y"])]
    else:
        rest = _gelu_nodes("torchscript")
    consts = GELU_CONSTS + [("bias", rng.standard_normal(8).astype(np.float32)), ("three", np.float32(3)),
                            ("c", np.float32(0.044715)), ("k", np.float32(math.sqrt(2 / math.pi)))]
    m = make_model(first + rest, {"A": A}, _out(), inits=consts, opset=14)
    opt = check(m, {"A": A}, present=["BiasGelu" if form == "torchscript" else "FastGelu"])
    assert len(opt.graph.node) == 1 and len(opt.graph.node[0].input) == 2


def test_gelu_with_other_scale_kept():
    X = rng.standard_normal((2, 8)).astype(np.float32)
    consts = [(n, np.float32(0.7)) if n == "half" else (n, v) for n, v in GELU_CONSTS]
    m = make_model(_gelu_nodes("torchscript"), {"X": X}, _out(), inits=consts, opset=14)
    assert ops(optimize(m))["Erf"] == 1


def _layernorm_nodes(x):
    """TorchScript's LayerNorm below opset 17 (axes as an attribute before opset 18)."""
    return [helper.make_node("ReduceMean", [x], ["mu"], axes=[-1]),
            helper.make_node("Sub", [x, "mu"], ["d"]),
            helper.make_node("Pow", ["d", "two"], ["sq"]),
            helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
            helper.make_node("Add", ["var", "eps"], ["ve"]),
            helper.make_node("Sqrt", ["ve"], ["std"]),
            helper.make_node("Div", ["d", "std"], ["n"]),
            helper.make_node("Mul", ["n", "gamma"], ["g"]),
            helper.make_node("Add", ["g", "beta"], ["Y"])]


def _ln_consts(H):
    return [("two", np.float32(2)), ("eps", np.float32(1e-5)), ("gamma", rng.standard_normal(H).astype(np.float32)),
            ("beta", rng.standard_normal(H).astype(np.float32))]


def test_layernorm_opset17():
    X = rng.standard_normal((2, 4, 16)).astype(np.float32)
    m = make_model(_layernorm_nodes("X"), {"X": X}, _out(), inits=_ln_consts(16), opset=17)
    opt = check(m, {"X": X}, present=["LayerNormalization"], gone=["ReduceMean", "Pow", "Sqrt", "Div"], atol=1e-4)
    assert len(opt.graph.node) == 1


def test_skip_layernorm_below_opset17():
    """Below opset 17 (no ai.onnx LayerNormalization), the residual form becomes SkipLayerNormalization."""
    A, B = (rng.standard_normal((2, 4, 16)).astype(np.float32) for _ in range(2))
    nodes = [helper.make_node("Add", ["A", "B"], ["x"])] + _layernorm_nodes("x")
    m = make_model(nodes, {"A": A, "B": B}, _out(), inits=_ln_consts(16), opset=14)
    opt = check(m, {"A": A, "B": B}, present=["SkipLayerNormalization"], gone=["ReduceMean", "Add"], atol=1e-4)
    assert len(opt.graph.node) == 1


@pytest.mark.parametrize("opset", [12, 14, 16])
def test_layernorm_below_opset17_without_residual_is_gpuops_own_op(opset):
    """Below opset 17, a LayerNorm not fed by a residual Add (as openWakeWord's verifier writes it) becomes
    gpuops' LayerNormalization, defined in the model as a function: onnx's checker and onnxruntime read
    it through the function, and gpuops' plan runs its registered op (one step)."""
    X = rng.standard_normal((2, 4, 16)).astype(np.float32)
    m = make_model(_layernorm_nodes("X"), {"X": X}, _out(), inits=_ln_consts(16), opset=opset)
    m.ir_version = 7  # (as TorchScript writes opset 12-13; model-local functions need 8)
    opt = check(m, {"X": X}, present=["LayerNormalization"], gone=["ReduceMean", "Pow", "Sqrt", "Div"], atol=1e-4)
    assert [(n.domain, n.op_type) for n in opt.graph.node] == [(PRIVATE, "LayerNormalization")]
    assert [(f.domain, f.name) for f in opt.functions] == [(PRIVATE, "LayerNormalization")]
    assert opt.ir_version >= 8
    sess = gpuops.InferenceSession(m, device="cpu")
    assert [(s.domain, s.op_type) for s in sess.plan.steps] == [(PRIVATE, "LayerNormalization")]


def test_layernorm_of_a_residual_stream_read_elsewhere_is_gpuops_own_op():
    """A pre-norm block: the residual sum feeds the LayerNorm and the next residual, so no
    SkipLayerNormalization (which would hide the sum); the LayerNorm alone becomes gpuops' op."""
    A, B = (rng.standard_normal((2, 4, 16)).astype(np.float32) for _ in range(2))
    nodes = [helper.make_node("Add", ["A", "B"], ["x"])] + _layernorm_nodes("x") + [
        helper.make_node("Add", ["x", "Y"], ["Z"])]
    outs = [helper.make_tensor_value_info("Z", F, None)]
    m = make_model(nodes, {"A": A, "B": B}, outs, inits=_ln_consts(16), opset=14)
    opt = check(m, {"A": A, "B": B}, present=["LayerNormalization"], gone=["ReduceMean"], atol=1e-4)
    assert ops(opt)["Add"] == 2


def test_layernorm_inside_an_if_branch_is_defined_once():
    X = rng.standard_normal((2, 4, 16)).astype(np.float32)
    then = helper.make_graph(_layernorm_nodes("X"), "then", [], [helper.make_tensor_value_info("Y", F, None)])
    other = helper.make_graph([helper.make_node("Identity", ["X"], ["Y2"])], "else", [],
                              [helper.make_tensor_value_info("Y2", F, None)])
    nodes = [helper.make_node("If", ["c"], ["Y"], then_branch=then, else_branch=other)]
    for c in (True, False):
        feeds = {"X": X, "c": np.array(c)}
        m = make_model(nodes, feeds, _out(), inits=_ln_consts(16), opset=14)
        opt = check(m, feeds, atol=1e-4)
        assert [f.name for f in opt.functions] == ["LayerNormalization"]


def test_layernorm_below_opset12_kept():
    """(The function defining gpuops' op needs a Constant's value_float: opset 12.)"""
    X = rng.standard_normal((2, 4, 16)).astype(np.float32)
    m = make_model(_layernorm_nodes("X"), {"X": X}, _out(), inits=_ln_consts(16), opset=11)
    assert ops(optimize(m))["ReduceMean"] == 2


def _attention_model(style, *, mask=False, causal=False, bias=False, past=0, B=2, S=5, N=2, H=4, weights=None):
    """One self-attention layer as an exporter writes it: TorchScript (Div by sqrt(H), K^T by one
    Transpose (0, 2, 3, 1), HF's padding mask) or dynamo (Q and K each times H^-1/4, K's heads then
    Transpose (0, 1, 3, 2)); optionally causal (a constant lower-triangular Where) and an additive
    (B, 1, S, S) bias input; with ``past`` (its length P), K's and V's heads are concatenated after past
    key and value inputs (B, N, P, H) and those concatenations are graph outputs, as GPT-2 exports.
    ``weights`` int8 or uint8: the projections dynamically quantized, as onnxruntime's quantize_dynamic
    writes them (one DynamicQuantizeLinear of x, MatMulIntegerToFloat with a bias each): int8 weights
    with a zero point 0 and a scale each, uint8 ones with a zero point and a scale per column for q."""
    D = N * H
    T = S + past
    x = rng.standard_normal((B, S, D)).astype(np.float32)
    feeds = {"x": x}
    inits = [("one", np.float32(1)), ("filter", np.float32(-10000.0)), ("sqrtH", np.float32(math.sqrt(H))),
             ("qscale", np.float32(H ** -0.25)), ("heads", np.array([B, S, N, H], np.int64)),
             ("merged", np.array([B, S, D], np.int64)), ("neg", np.float32(np.finfo(np.float32).min)),
             ("tril", np.tril(np.ones((S, T), bool), T - S)[None, None])]
    nodes = []
    if weights is not None:
        nodes.append(helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]))
    for p in "qkv":
        if weights is None:
            inits += [(f"W{p}", rng.standard_normal((D, D)).astype(np.float32) / 3),
                      (f"b{p}", rng.standard_normal(D).astype(np.float32))]
            nodes += [helper.make_node("MatMul", ["x", f"W{p}"], [f"{p}0"]),
                      helper.make_node("Add", [f"b{p}", f"{p}0"] if p == "k" else [f"{p}0", f"b{p}"], [f"{p}1"])]
        else:
            info = np.iinfo(weights)
            per_column = weights == np.uint8 and p == "q"
            zero = rng.integers(100, 156, D if per_column else (), dtype=weights) if weights == np.uint8 else \
                np.zeros((), weights)
            scale = rng.uniform(0.01, 0.02, D if per_column else ()).astype(np.float32)
            inits += [(f"W{p}", rng.integers(info.min, info.max, (D, D), dtype=weights)), (f"ws{p}", scale),
                      (f"wz{p}", zero), (f"b{p}", rng.standard_normal(D).astype(np.float32))]
            nodes.append(helper.make_node("MatMulIntegerToFloat", ["xq", f"W{p}", "xs", f"ws{p}", "xz", f"wz{p}",
                                                                   f"b{p}"], [f"{p}1"], domain="com.microsoft"))
        nodes.append(helper.make_node("Reshape", [f"{p}1", "heads"], [f"{p}2"]))
    if style == "torchscript":
        nodes += [helper.make_node("Transpose", ["q2"], ["Q"], perm=[0, 2, 1, 3]),
                  helper.make_node("Transpose", ["k2"], ["Kt"], perm=[0, 2, 3, 1]),
                  helper.make_node("MatMul", ["Q", "Kt"], ["qk"]),
                  helper.make_node("Div", ["qk", "sqrtH"], ["s0"])]
    else:
        k_heads = "K0"
        if past:
            k_heads = "present_k"
            feeds["past_k"] = rng.standard_normal((B, N, past, H)).astype(np.float32)
        nodes += [helper.make_node("Transpose", ["q2"], ["Q0"], perm=[0, 2, 1, 3]),
                  helper.make_node("Transpose", ["k2"], ["K0"], perm=[0, 2, 1, 3])]
        if past:
            nodes.append(helper.make_node("Concat", ["past_k", "K0"], [k_heads], axis=2))
        nodes += [helper.make_node("Transpose", [k_heads], ["K1"], perm=[0, 1, 3, 2]),
                  helper.make_node("Mul", ["Q0", "qscale"], ["Q"]), helper.make_node("Mul", ["K1", "qscale"], ["Kt"]),
                  helper.make_node("MatMul", ["Q", "Kt"], ["s0"])]
    s = "s0"
    if causal:
        nodes.append(helper.make_node("Where", ["tril", s, "neg"], ["s1"]))
        s = "s1"
    if mask:
        m = np.ones((B, T), np.int64)
        m[0, -2:] = 0
        feeds["mask"] = m
        nodes += [helper.make_node("Unsqueeze", ["mask", "ax1"], ["m1"]),
                  helper.make_node("Unsqueeze", ["m1", "ax2"], ["m2"]),
                  helper.make_node("Cast", ["m2"], ["m3"], to=TensorProto.FLOAT),
                  helper.make_node("Sub", ["one", "m3"], ["m4"]), helper.make_node("Mul", ["m4", "filter"], ["m5"]),
                  helper.make_node("Add", [s, "m5"], ["s2"])]
        inits += [("ax1", np.array([1])), ("ax2", np.array([2]))]
        s = "s2"
    if bias:
        feeds["bias"] = rng.standard_normal((B, 1, S, S)).astype(np.float32)
        nodes.append(helper.make_node("Add", ["bias", s], ["s3"]))
        s = "s3"
    v_heads, outputs = "V", _out()
    nodes += [helper.make_node("Softmax", [s], ["p"], axis=-1),
              helper.make_node("Transpose", ["v2"], ["V"], perm=[0, 2, 1, 3])]
    if past:
        v_heads = "present_v"
        feeds["past_v"] = rng.standard_normal((B, N, past, H)).astype(np.float32)
        nodes.append(helper.make_node("Concat", ["past_v", "V"], [v_heads], axis=2))
        outputs += [helper.make_tensor_value_info(n, F, None) for n in ("present_k", "present_v")]
    nodes += [helper.make_node("MatMul", ["p", v_heads], ["c0"]),
              helper.make_node("Transpose", ["c0"], ["c1"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["c1", "merged"], ["Y"])]
    return make_model(nodes, feeds, outputs, inits=inits, opset=14,
                      opsets=None if weights is None else {"com.microsoft": 1}), feeds


ATTENTION_CASES = [("torchscript", {}), ("torchscript", {"mask": True}), ("dynamo", {"causal": True}),
                   ("dynamo", {"mask": True, "causal": True}), ("torchscript", {"bias": True}),
                   ("dynamo", {"causal": True, "past": 3}), ("dynamo", {"causal": True, "mask": True, "past": 3})]



def _gpt2_model(B=2, S=3, N=2, H=4, P=4):
    """A GPT-2 layer's attention as exports with past write it once the optimizer saw dynamic shapes
    (tests/corpus' gpt2_tiny after shape specialization): the past key and value stacked in one
    (2, B, N, P, H) input, unstacked by Gathers; scores by a com.microsoft FusedMatMul with transB (what
    transpose_into_matmul made of K's Transpose and the MatMul), scaled by a Div, a constant causal mask
    added; the present key and value stacked back into one (2, B, N, T, H) output."""
    D, T = N * H, S + P
    feeds = {"x": rng.standard_normal((B, S, D)).astype(np.float32),
             "past": rng.standard_normal((2, B, N, P, H)).astype(np.float32)}
    causal = np.where(np.tril(np.ones((S, T), bool), P), 0, np.finfo(np.float32).min).astype(np.float32)
    inits = [("heads", np.array([B, S, N, H], np.int64)), ("merged", np.array([B, S, D], np.int64)),
             ("sqrtH", np.float32(math.sqrt(H))), ("i0", np.array(0, np.int64)), ("i1", np.array(1, np.int64)),
             ("ax0", np.array([0], np.int64)), ("causal", causal[None, None])]
    nodes = [helper.make_node("Gather", ["past", "i0"], ["past_k"], axis=0),
             helper.make_node("Gather", ["past", "i1"], ["past_v"], axis=0)]
    for p in "qkv":
        inits += [(f"W{p}", rng.standard_normal((D, D)).astype(np.float32) / 3),
                  (f"b{p}", rng.standard_normal(D).astype(np.float32))]
        nodes += [helper.make_node("MatMul", ["x", f"W{p}"], [f"{p}0"]),
                  helper.make_node("Add", [f"{p}0", f"b{p}"], [f"{p}1"]),
                  helper.make_node("Reshape", [f"{p}1", "heads"], [f"{p}2"]),
                  helper.make_node("Transpose", [f"{p}2"], [f"{p.upper()}"], perm=[0, 2, 1, 3])]
    nodes += [helper.make_node("Concat", ["past_k", "K"], ["present_k"], axis=2),
              helper.make_node("Concat", ["past_v", "V"], ["present_v"], axis=2),
              helper.make_node("FusedMatMul", ["Q", "present_k"], ["qk"], domain="com.microsoft", transB=1),
              helper.make_node("Div", ["qk", "sqrtH"], ["s0"]), helper.make_node("Add", ["s0", "causal"], ["s1"]),
              helper.make_node("Softmax", ["s1"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "present_v"], ["c0"]),
              helper.make_node("Transpose", ["c0"], ["c1"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["c1", "merged"], ["Y"]),
              helper.make_node("Unsqueeze", ["present_k", "ax0"], ["pk"]),
              helper.make_node("Unsqueeze", ["present_v", "ax0"], ["pv"]),
              helper.make_node("Concat", ["pk", "pv"], ["present"], axis=0)]
    outputs = _out() + [helper.make_tensor_value_info("present", F, None)]
    model = make_model(nodes, feeds, outputs, inits=inits, opset=14)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model, feeds


def test_gpt2_attention_with_stacked_past_and_a_fused_matmul_is_one_node():
    """The scores' FusedMatMul (transB, its alpha joining the scale) is matched, the past and present
    stacks become the Attention's own past input and present output (.restack), and nothing else is
    left."""
    m, feeds = _gpt2_model()
    opt = check(m, feeds, present=["Attention"], atol=1e-4)
    assert [n.op_type for n in opt.graph.node] == ["Attention"]
    (node,) = opt.graph.node
    assert list(node.input) == ["x", node.input[1], node.input[2], "", "past"]
    assert list(node.output) == ["Y", "present"]



def _mha_model(B=2, S=5, N=2, H=4, heads_order=(0, 1, 2)):
    """Self-attention as torch exports nn.MultiheadAttention: the sequence-major input's packed
    projection taken apart by Reshape, Unsqueeze, Transpose, Squeeze and three Gathers, each part
    reshaped to (S, B * N, H) and transposed, then (B, N, S, H); the context back to (S * B, D) for the
    out projection, (S, B, D) and batch-major again. ``heads_order``: which Gather index feeds Q, K, V
    (another order than (0, 1, 2) is not the Attention op's packing)."""
    D = N * H
    x = rng.standard_normal((B, S, D)).astype(np.float32)
    inits = [("Win", rng.standard_normal((D, 3 * D)).astype(np.float32) / 3),
             ("bin", rng.standard_normal(3 * D).astype(np.float32)),
             ("Wout", rng.standard_normal((D, D)).astype(np.float32) / 3),
             ("bout", rng.standard_normal(D).astype(np.float32)),
             ("s_b_3_d", np.array([S, B, 3, D], np.int64)), ("ax0", np.array([0], np.int64)),
             ("ax3", np.array([3], np.int64)), ("s_bn_h", np.array([S, B * N, H], np.int64)),
             ("b_n_s_h", np.array([B, N, S, H], np.int64)), ("sb_d", np.array([S * B, D], np.int64)),
             ("s_b_d", np.array([S, B, D], np.int64)), ("scale", np.float32(H ** -0.25))]
    inits += [(f"i{i}", np.array(i, np.int64)) for i in range(3)]
    nodes = [helper.make_node("Transpose", ["x"], ["xs"], perm=[1, 0, 2]),
             helper.make_node("MatMul", ["xs", "Win"], ["p0"]), helper.make_node("Add", ["bin", "p0"], ["p1"]),
             helper.make_node("Reshape", ["p1", "s_b_3_d"], ["p2"]),
             helper.make_node("Unsqueeze", ["p2", "ax0"], ["p3"]),
             helper.make_node("Transpose", ["p3"], ["p4"], perm=[3, 1, 2, 0, 4]),
             helper.make_node("Squeeze", ["p4", "ax3"], ["p5"])]
    for part, i in zip("qkv", heads_order):
        nodes += [helper.make_node("Gather", ["p5", f"i{i}"], [f"{part}0"], axis=0),
                  helper.make_node("Reshape", [f"{part}0", "s_bn_h"], [f"{part}1"]),
                  helper.make_node("Transpose", [f"{part}1"], [f"{part}2"], perm=[1, 0, 2]),
                  helper.make_node("Reshape", [f"{part}2", "b_n_s_h"], [f"{part}3"])]
    nodes += [helper.make_node("Transpose", ["k3"], ["kt"], perm=[0, 1, 3, 2]),
              helper.make_node("Mul", ["q3", "scale"], ["qs"]), helper.make_node("Mul", ["kt", "scale"], ["ks"]),
              helper.make_node("MatMul", ["qs", "ks"], ["sc"]), helper.make_node("Softmax", ["sc"], ["pr"], axis=-1),
              helper.make_node("MatMul", ["pr", "v3"], ["c0"]),
              helper.make_node("Transpose", ["c0"], ["c1"], perm=[2, 0, 1, 3]),
              helper.make_node("Reshape", ["c1", "sb_d"], ["c2"]),
              helper.make_node("Gemm", ["c2", "Wout", "bout"], ["c3"]),
              helper.make_node("Reshape", ["c3", "s_b_d"], ["c4"]),
              helper.make_node("Transpose", ["c4"], ["Y"], perm=[1, 0, 2])]
    return make_model(nodes, {"x": x}, _out(), inits=inits, opset=14), {"x": x}


@pytest.mark.parametrize("heads_order", [(0, 1, 2), (1, 0, 2)])
def test_attention_split_by_any_layout_chain(heads_order):
    """nn.MultiheadAttention's export, with static shapes: its chains of layout ops are followed by
    index labels, and the attention becomes one node (the context merged sequence-major: one Transpose
    back) -- but not when the chains split the packed projection otherwise than Q | K | V."""
    m, feeds = _mha_model(heads_order=heads_order)
    fused = heads_order == (0, 1, 2)
    opt = check(m, feeds, present=["Attention"] if fused else [], kept=[] if fused else ["Softmax"], atol=1e-4)
    have = ops(opt)
    if fused:
        assert have["Softmax"] == have["Gather"] == have["Squeeze"] == 0 and have["Attention"] == 1
        assert len(opt.graph.node) <= 6  # Attention, its Transpose back, Reshape, Gemm, Reshape, Transpose
    else:
        assert have["Attention"] == 0

def test_restack_needs_the_whole_axis_in_order():
    """A Concat of Unsqueezed Gathers is the gathered tensor only with every index of its axis, in
    order: part of the axis, or another order, stays."""
    x = rng.standard_normal((3, 2)).astype(np.float32)
    for idx in ([0, 1, 2], [0, 1], [1, 0, 2]):
        nodes = [helper.make_node("Gather", ["x", f"i{i}"], [f"g{j}"], axis=0) for j, i in enumerate(idx)]
        nodes += [helper.make_node("Unsqueeze", [f"g{j}", "ax0"], [f"u{j}"]) for j in range(len(idx))]
        nodes.append(helper.make_node("Concat", [f"u{j}" for j in range(len(idx))], ["Y"], axis=0))
        inits = [("ax0", np.array([0], np.int64))] + [(f"i{i}", np.array(i, np.int64)) for i in range(3)]
        m = make_model(nodes, {"x": x}, _out(), inits=inits, opset=14)
        opt = check(m, {"x": x}, level="basic")
        assert (ops(opt)["Concat"] == 0) == (idx == [0, 1, 2]), idx

@pytest.mark.parametrize("style,kw", ATTENTION_CASES, ids=[f"{s}-{'-'.join(k) or 'plain'}" for s, k in ATTENTION_CASES])
def test_attention(style, kw):
    m, feeds = _attention_model(style, **kw)
    gone = ["Softmax", "MatMul", "Transpose", "Reshape", "Where"] + ([] if "past" in kw else ["Unsqueeze"])
    opt = check(m, feeds, present=["Attention"], gone=gone, atol=1e-4)
    # + the Cast of the mask; with past, Unsqueeze x2 and Concat make past, Gather x2 split present
    assert ops(opt)["Attention"] == 1 and len(opt.graph.node) == 1 + ("mask" in kw) + 5 * ("past" in kw)


@pytest.mark.parametrize("weights", [np.int8, np.uint8])
@pytest.mark.parametrize("style,kw", [("torchscript", {"mask": True}), ("dynamo", {"causal": True})])
def test_quantized_attention(style, kw, weights):
    """Dynamically quantized q, k and v projections -> one QAttention of their weights side by side (a
    scale, a zero point per column where they differ), reading the DynamicQuantizeLinear's outputs."""
    m, feeds = _attention_model(style, weights=weights, **kw)
    opt = check(m, feeds, present=["QAttention", "DynamicQuantizeLinear"],
                gone=["MatMulIntegerToFloat", "Softmax", "MatMul", "Transpose", "Reshape", "Where", "Unsqueeze"],
                atol=1e-4)
    assert len(opt.graph.node) == 2 + ("mask" in kw)
    (qa,) = [n for n in opt.graph.node if n.op_type == "QAttention"]
    inits = {i.name: i for i in opt.graph.initializer}
    per_column = weights == np.uint8
    assert [d for d in inits[qa.input[4]].dims] == [3 * 8]  # the three scales differ
    assert list(inits[qa.input[7]].dims) == ([3 * 8] if per_column else [])


def test_quantized_attention_with_a_float_projection_kept():
    """q quantized, k and v float: no one weight for the three; the pattern stays."""
    m, feeds = _attention_model("torchscript", weights=np.int8, mask=True)
    g = m.graph
    (mk,) = [n for n in g.node if n.output[0] == "k1"]
    g.node.remove(mk)
    g.node.insert(0, helper.make_node("MatMul", ["x", "Wkf"], ["k1"]))
    g.initializer.append(helper.make_tensor("Wkf", F, [8, 8], rng.standard_normal(64).astype(np.float32)))
    opt = check(m, feeds, gone=["QAttention", "Attention"], kept=["Softmax", "MatMulIntegerToFloat"], atol=1e-4)
    assert ops(opt)["MatMulIntegerToFloat"] == 2
