"""Self-attention with dynamic batch and sequence axes -> Attention: the Reshape targets are
computed from the sizes of a tensor (TorchScript: Unsqueeze(Gather(Shape(t), i)); dynamo:
Shape(t, start=i, end=i + 1)); the rewrite fuses only when those sizes are provably x's."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from .helpers import check, ops
from .test_transformer import _attention_model

N, H = 2, 4


def _dynamic(style, source, *, axes=(0, 1), form="gather", mask=False):
    """``_attention_model`` with x of shape (batch, sequence, D) and both Reshape targets read off
    ``source`` ("x", "q1": the Q projection, "z": another input of the same symbolic shape, "w": one of
    other symbols) at ``axes``."""
    m, feeds = _attention_model(style, mask=mask)
    g = m.graph
    x = next(i for i in g.input if i.name == "x")
    for d, sym in zip(x.type.tensor_type.shape.dim, ("batch", "sequence")):
        d.dim_param = sym
    if source in ("z", "w"):
        syms = ("batch", "sequence") if source == "z" else ("rows", "cols")
        g.input.append(helper.make_tensor_value_info(source, TensorProto.FLOAT, [*syms, 3]))
        feeds[source] = np.zeros(feeds["x"].shape[:2] + (3,), np.float32)
    keep = [t for t in g.initializer if t.name not in ("heads", "merged")]
    del g.initializer[:]
    g.initializer.extend(keep)
    g.initializer.extend([helper.make_tensor("NH", TensorProto.INT64, [2], [N, H]),
                          helper.make_tensor("D", TensorProto.INT64, [1], [N * H]),
                          helper.make_tensor("zero_axis", TensorProto.INT64, [1], [0])])
    sizes = []
    if form == "gather":
        g.node.insert(0, helper.make_node("Shape", [source], ["shape_of"]))
        for j, a in enumerate(axes):
            g.initializer.append(helper.make_tensor(f"i{j}", TensorProto.INT64, [], [a]))
            g.node.insert(1, helper.make_node("Gather", ["shape_of", f"i{j}"], [f"g{j}"], axis=0))
            g.node.insert(2, helper.make_node("Unsqueeze", [f"g{j}", "zero_axis"], [f"u{j}"]))
            sizes.append(f"u{j}")
    else:
        m.opset_import[0].version = 15  # Shape's start and end
        for j, a in enumerate(axes):
            g.node.insert(0, helper.make_node("Shape", [source], [f"u{j}"], start=a, end=a + 1))
            sizes.append(f"u{j}")
    at = 3 * len(axes) + 1 if form == "gather" else len(axes)
    if source == "q1":  # the Q projection's own sizes, read after it is made (TorchScript's order)
        at = len(g.node)
        shape_nodes = [n for n in g.node if n.output[0] in ("shape_of", *sizes) or n.output[0].startswith("g")]
        for n in shape_nodes:
            g.node.remove(n)
        q1 = next(i for i, n in enumerate(g.node) if n.output[0] == "q1")
        for j, n in enumerate(shape_nodes):
            g.node.insert(q1 + 1 + j, n)
        at = q1 + 1 + len(shape_nodes)
    g.node.insert(at, helper.make_node("Concat", sizes + ["NH"], ["heads"], axis=0))
    g.node.insert(at + 1, helper.make_node("Concat", sizes + ["D"], ["merged"], axis=0))
    return m, feeds


@pytest.mark.parametrize("style", ["torchscript", "dynamo"])
@pytest.mark.parametrize("source, form", [("x", "gather"), ("x", "slice"), ("q1", "gather"), ("z", "gather"),
                                          ("z", "slice")])
def test_dynamic_attention_fuses(style, source, form):
    m, feeds = _dynamic(style, source, form=form, mask=True)
    opt = check(m, feeds, present=["Attention"], gone=["Softmax", "Transpose", "Reshape"], atol=1e-4)
    assert ops(opt)["Attention"] == 1


@pytest.mark.parametrize("source, axes", [("w", (0, 1)), ("x", (1, 0)), ("z", (0, 2))])
def test_sizes_not_provably_x_are_kept(source, axes):
    """Sizes of a tensor with other symbols, swapped axes, or a third axis: left as written."""
    m, feeds = _dynamic("torchscript", source, axes=axes)
    if axes == (1, 0):  # a (sequence, batch) split: only equal sizes keep the model runnable
        feeds["x"] = feeds["x"][:1, :1]
    elif axes == (0, 2):
        feeds["z"] = np.zeros(feeds["x"].shape[:1] + (3, 3), np.float32)
        feeds["x"] = np.repeat(feeds["x"][:, :1], 3, axis=1)
    check(m, feeds, kept=["Softmax", "Reshape"], atol=1e-4)
