"""Seed models with their feeds, and Hypothesis strategies that mutate them."""

from __future__ import annotations

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from .models import OPSETS, functions_model, overridable_model

EDGE_INTS = [-2 ** 63, -2 ** 31, -7, -2, -1, 0, 1, 2, 3, 5, 2 ** 31 - 1, 2 ** 63 - 1]
EDGE_FLOATS = [float("nan"), float("inf"), -float("inf"), 0.0, -1.0, 1e-30, 1e30]
ints = st.one_of(st.sampled_from(EDGE_INTS), st.integers(-4, 6))
floats = st.one_of(st.sampled_from(EDGE_FLOATS), st.floats(-4, 4, width=32))
texts = st.one_of(st.sampled_from(["", "x", "y", "w", "none", "NOTSET", "SAME_UPPER", "\0", "é" * 3]),
                  st.text(max_size=12))
ELEM_TYPES = sorted(TensorProto.DataType.values()) + [999, 12345]


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def _model(nodes, inputs, outputs, inits=(), functions=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=[numpy_helper.from_array(v, k) for k, v in inits])
    return helper.make_model(g, opset_imports=OPSETS, functions=list(functions), ir_version=10)


def _seeds():
    rng = np.random.default_rng(0)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    seeds = {}
    seeds["mlp"] = (_model(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Add", ["m", "b"], ["a"], name="add"),
         helper.make_node("Relu", ["a"], ["r"], name="relu"), helper.make_node("Softmax", ["r"], ["s"], name="sm", axis=-1),
         helper.make_node("ReduceSum", ["s", "axes"], ["y"], name="rs", keepdims=1),
         helper.make_node("LeakyRelu", ["a"], ["z"], name="lr", alpha=0.1)],
        [vi("x", [2, 4])], [vi("y", None), vi("z", None)],
        [("w", f32(4, 3)), ("b", f32(3)), ("axes", np.array([1], np.int64))]), {"x": f32(2, 4)})
    seeds["conv"] = (_model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1],
                          dilations=[1, 1], group=1, kernel_shape=[3, 3]),
         helper.make_node("MaxPool", ["c"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("BatchNormalization", ["p", "s", "bb", "mean", "var"], ["n"], name="bn", epsilon=1e-5),
         helper.make_node("Flatten", ["n"], ["y"], name="flat", axis=1)],
        [vi("x", [1, 2, 5, 5])], [vi("y", None)],
        [("w", f32(3, 2, 3, 3)), ("b", f32(3)), ("s", f32(3)), ("bb", f32(3)), ("mean", f32(3)),
         ("var", np.abs(f32(3)) + 0.5)]), {"x": f32(1, 2, 5, 5)})
    seeds["shape"] = (_model(
        [helper.make_node("Transpose", ["x"], ["t"], name="tr", perm=[1, 0, 2]),
         helper.make_node("Reshape", ["t", "shape"], ["r"], name="rs"),
         helper.make_node("Slice", ["r", "starts", "ends", "axes", "steps"], ["s"], name="sl"),
         helper.make_node("Concat", ["s", "s"], ["c"], name="cat", axis=0),
         helper.make_node("Gather", ["c", "idx"], ["g"], name="ga", axis=1),
         helper.make_node("Cast", ["g"], ["k"], name="cast", to=TensorProto.DOUBLE),
         helper.make_node("Unsqueeze", ["k", "uaxes"], ["y"], name="un"),
         helper.make_node("Split", ["x"], ["y0", "y1"], name="split", axis=2, num_outputs=2)],
        [vi("x", [2, 3, 4])], [vi("y", [1, 6, 3], TensorProto.DOUBLE), vi("y0", None), vi("y1", None)],
        [("shape", np.array([3, -1], np.int64)), ("starts", np.array([0, 1], np.int64)),
         ("ends", np.array([3, 7], np.int64)), ("axes", np.array([0, 1], np.int64)), ("steps", np.array([1, 2], np.int64)),
         ("idx", np.array([0, 2, -1], np.int64)), ("uaxes", np.array([0], np.int64))]), {"x": f32(2, 3, 4)})
    then = helper.make_graph([helper.make_node("Add", ["x", "one"], ["t"], name="then_add")], "then", [],
                             [vi("t", [3])], initializer=[numpy_helper.from_array(np.ones(3, np.float32), "one")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [], [vi("e", [3])])
    body = helper.make_graph([helper.make_node("Add", ["acc", "x"], ["acc_out"], name="body_add"),
                              helper.make_node("Identity", ["cond"], ["cond_out"], name="body_id")], "body",
                             [vi("i", [], TensorProto.INT64), vi("cond", [], TensorProto.BOOL), vi("acc", [3])],
                             [vi("cond_out", [], TensorProto.BOOL), vi("acc_out", [3])])
    seeds["control"] = (_model(
        [helper.make_node("If", ["c"], ["iy"], name="if", then_branch=then, else_branch=other),
         helper.make_node("Loop", ["n", "", "iy"], ["y"], name="loop", body=body)],
        [vi("x", [3]), vi("c", [], TensorProto.BOOL)], [vi("y", [3])], [("n", np.array(3, np.int64))]),
        {"x": f32(3), "c": np.array(True)})
    scale = helper.make_function("local", "Scale", ["x"], ["y"], [
        helper.make_node("Constant", [], ["a"], value_float=1.0, name="k"),
        helper.make_node("Mul", ["x", "a"], ["y"], name="mul")], OPSETS, attributes=["alpha"])
    scale.node[0].attribute[0].ref_attr_name = "alpha"
    fm = functions_model(3)
    fm.functions.append(scale)
    fm.graph.node.append(helper.make_node("Scale", ["y"], ["z"], domain="local", name="scale", alpha=2.5))
    fm.graph.output.append(vi("z", [3]))
    seeds["functions"] = (fm, {"x": f32(3)})
    seeds["overridable"] = (overridable_model(), {"x": f32(2, 3)})
    return seeds


def _typed(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its graph outputs typed as shape inference finds them (the checker wants shapes)."""
    inferred = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(model).graph.output}
    for o in model.graph.output:
        o.CopyFrom(inferred[o.name])
    onnx.checker.check_model(model, full_check=True)
    return model


SEEDS = {k: (_typed(m), f) for k, (m, f) in _seeds().items()}


def _nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Every node: the graph's, its subgraphs', the functions'."""
    out, stack = [], [*model.graph.node, *(n for f in model.functions for n in f.node)]
    while stack:
        n = stack.pop()
        out.append(n)
        for a in n.attribute:
            stack.extend(a.g.node if a.type == AttributeProto.GRAPH else [])
    return out


def _value_names(model):
    names = {x for n in _nodes(model) for x in [*n.input, *n.output]}
    return sorted(names | {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer})


def _attribute_value(draw, a: AttributeProto):
    kind = draw(st.sampled_from(["same", "other", "ref"]))
    t = a.type if kind == "same" else draw(st.sampled_from([AttributeProto.INT, AttributeProto.FLOAT,
                                                             AttributeProto.STRING, AttributeProto.INTS,
                                                             AttributeProto.FLOATS, AttributeProto.TENSOR]))
    if kind == "ref":
        return helper.make_attribute_ref(a.name, a.type)
    if t == AttributeProto.INT:
        return helper.make_attribute(a.name, draw(ints))
    if t == AttributeProto.FLOAT:
        return helper.make_attribute(a.name, draw(floats))
    if t == AttributeProto.STRING:
        return helper.make_attribute(a.name, draw(texts))
    if t == AttributeProto.INTS:
        return helper.make_attribute(a.name, draw(st.lists(ints, max_size=6)), attr_type=AttributeProto.INTS)
    if t == AttributeProto.FLOATS:
        return helper.make_attribute(a.name, draw(st.lists(floats, max_size=6)), attr_type=AttributeProto.FLOATS)
    if t == AttributeProto.TENSOR:
        arr = np.array(draw(st.lists(ints, max_size=4)), np.int64)
        return helper.make_attribute(a.name, numpy_helper.from_array(arr))
    b = AttributeProto()
    b.CopyFrom(a)
    return b


def mutate_attribute(draw, model):
    nodes = [n for n in _nodes(model)]
    n = draw(st.sampled_from(nodes))
    what = draw(st.sampled_from(["change", "change", "remove", "add"]) if n.attribute else st.just("add"))
    if what == "add":
        n.attribute.append(helper.make_attribute(draw(st.sampled_from(["axis", "alpha", "bogus", "to", "perm"])),
                                                 draw(ints)))
        return
    i = draw(st.integers(0, len(n.attribute) - 1))
    if what == "remove":
        del n.attribute[i]
    elif n.attribute[i].type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
        g = n.attribute[i].g
        choice = draw(st.sampled_from(["drop_output", "drop_input", "add_input", "drop_node"]))
        if choice == "drop_output" and g.output:
            del g.output[-1]
        elif choice == "drop_input" and g.input:
            del g.input[-1]
        elif choice == "add_input":
            g.input.append(vi(draw(texts), None))
        elif g.node:
            del g.node[draw(st.integers(0, len(g.node) - 1))]
    else:
        n.attribute[i].CopyFrom(_attribute_value(draw, n.attribute[i]))


def mutate_shape(draw, model):
    infos = [*model.graph.input, *model.graph.output]
    v = draw(st.sampled_from(infos))
    tt = v.type.tensor_type
    what = draw(st.sampled_from(["dim", "rank", "unknown", "param"]))
    if what == "dim" and len(tt.shape.dim):
        tt.shape.dim[draw(st.integers(0, len(tt.shape.dim) - 1))].dim_value = draw(st.sampled_from([0, 1, 2, 3, 5]))
    elif what == "rank":
        tt.shape.dim.add().dim_value = draw(st.sampled_from([1, 2]))
    elif what == "unknown":
        tt.ClearField("shape")
    elif len(tt.shape.dim):
        tt.shape.dim[0].dim_param = draw(texts)


def mutate_dtype(draw, model):
    targets = [*model.graph.input, *model.graph.output, *model.graph.initializer]
    t = draw(st.sampled_from(targets))
    elem = draw(st.sampled_from(ELEM_TYPES))
    if isinstance(t, onnx.TensorProto):
        t.data_type = elem
    else:
        t.type.tensor_type.elem_type = elem


def mutate_name(draw, model):
    names = _value_names(model) + ["", "nowhere"]
    nodes = _nodes(model)
    what = draw(st.sampled_from(["input", "output", "graph_output", "drop_node", "dup_node", "swap", "init"]))
    n = draw(st.sampled_from(nodes))
    if what == "input" and n.input:
        n.input[draw(st.integers(0, len(n.input) - 1))] = draw(st.sampled_from(names))
    elif what == "output" and n.output:
        n.output[draw(st.integers(0, len(n.output) - 1))] = draw(st.sampled_from(names))
    elif what == "graph_output":
        model.graph.output[0].name = draw(st.sampled_from(names))
    elif what == "drop_node" and len(model.graph.node) > 1:
        del model.graph.node[draw(st.integers(0, len(model.graph.node) - 1))]
    elif what == "dup_node":
        model.graph.node.append(model.graph.node[draw(st.integers(0, len(model.graph.node) - 1))])
    elif what == "swap" and len(model.graph.node) > 1:
        i = draw(st.integers(0, len(model.graph.node) - 2))
        a, b = onnx.NodeProto(), onnx.NodeProto()
        a.CopyFrom(model.graph.node[i])
        b.CopyFrom(model.graph.node[i + 1])
        model.graph.node[i].CopyFrom(b)
        model.graph.node[i + 1].CopyFrom(a)
    elif what == "init" and model.graph.initializer:
        model.graph.initializer[draw(st.integers(0, len(model.graph.initializer) - 1))].name = draw(st.sampled_from(names))


def mutate_function(draw, model):
    if not model.functions:
        model.functions.extend(functions_model(2).functions)
    f = draw(st.sampled_from(list(model.functions)))
    what = draw(st.sampled_from(["recurse", "formal", "drop", "unknown_call", "opset", "ref", "output"]))
    if what == "recurse" and f.node:
        n = f.node[draw(st.integers(0, len(f.node) - 1))]
        n.op_type, n.domain = draw(st.sampled_from([x.name for x in model.functions])), "local"
    elif what == "formal" and f.input:
        f.input[0] = draw(texts)
    elif what == "output" and f.output:
        f.output[0] = draw(texts)
    elif what == "drop":
        model.functions.remove(f)
    elif what == "unknown_call":
        f.node.append(helper.make_node(draw(texts) or "Nope", list(f.input), ["q"], domain="local"))
    elif what == "opset":
        f.opset_import[0].version = draw(st.sampled_from([0, 1, 7, 99, -1]))
    elif f.node:
        f.node[0].attribute.append(helper.make_attribute_ref(draw(st.sampled_from(["alpha", "missing"])),
                                                             draw(st.sampled_from([AttributeProto.FLOAT,
                                                                                   AttributeProto.INT]))))


def mutate_initializer(draw, model):
    if not model.graph.initializer:
        return
    t = draw(st.sampled_from(list(model.graph.initializer)))
    what = draw(st.sampled_from(["dims", "truncate", "external", "extra_dims"]))
    if what == "dims" and len(t.dims):
        t.dims[draw(st.integers(0, len(t.dims) - 1))] = draw(st.sampled_from([-1, 0, 1, 2, 7, 2 ** 40]))
    elif what == "extra_dims":
        t.dims.append(draw(st.sampled_from([0, 1, 2])))
    elif what == "truncate":
        try:
            data = numpy_helper.to_array(t).tobytes()
        except Exception:  # an earlier mutation broke it already
            return
        t.ClearField("float_data")
        t.ClearField("int64_data")
        t.raw_data = data[:draw(st.integers(0, max(len(data) - 1, 0)))]
    else:
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value=draw(texts))


MUTATIONS = [mutate_attribute, mutate_shape, mutate_dtype, mutate_name, mutate_function, mutate_initializer]


@st.composite
def mutated_models(draw):
    """(seed name, mutated ModelProto, the seed's feeds)."""
    name = draw(st.sampled_from(sorted(SEEDS)))
    seed, feeds = SEEDS[name]
    model = onnx.ModelProto()
    model.CopyFrom(seed)
    for mutation in draw(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3)):
        mutation(draw, model)
    return name, model, feeds


@st.composite
def corrupted_bytes(draw):
    """A seed model's serialization, truncated or with bytes overwritten."""
    data = bytearray(SEEDS[draw(st.sampled_from(sorted(SEEDS)))][0].SerializeToString())
    if draw(st.booleans()):
        data = data[:draw(st.integers(0, len(data) - 1))]
    for _ in range(draw(st.integers(1, 4))):
        if data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)


def feed_values(arr: np.ndarray):
    """Values to feed in place of ``arr``: wrong kinds, dtypes, shapes, layouts, and right ones."""
    return st.one_of(
        st.sampled_from([None, {}, {1, 2}, object(), b"bytes", "text", [1, [2, 3]], ["a", "b"], 2 ** 80, -2 ** 80,
                         float("nan"), 1.5, True, (), [], np.array("s"), np.array([{}], dtype=object)]),
        st.sampled_from([np.float64, np.float16, np.int64, np.int32, np.bool_, np.complex64, ">f4", np.uint8]).map(
            lambda d: arr.astype(d)),
        st.sampled_from(["T", "flat", "empty", "extra", "nan", "inf", "noncontig", "list", "readonly"]).map(
            lambda k: _variant(arr, k)),
    )


def _variant(arr, kind):
    if kind == "T":
        return np.ascontiguousarray(arr.T)
    if kind == "flat":
        return arr.ravel()
    if kind == "empty":
        return np.zeros((0,) + arr.shape[1:], arr.dtype)
    if kind == "extra":
        return arr[None]
    if kind == "nan":
        return np.full_like(arr, np.nan) if arr.dtype.kind == "f" else arr
    if kind == "inf":
        return np.full_like(arr, np.inf) if arr.dtype.kind == "f" else arr
    if kind == "noncontig":
        return np.repeat(arr, 2, axis=-1)[..., ::2] if arr.ndim else arr
    if kind == "list":
        return arr.tolist()
    out = arr.copy()
    out.flags.writeable = False
    return out
