"""A classifier's label lookup as the converters write it -> ArgMax without keepdims (+ Gather).

skl2onnx ends a classifier (MLPClassifier, and others that score every class) with the label of the
highest score looked up in a constant list of class labels::

    ArgMax(P, axis=1, keepdims=1) -> ArrayFeatureExtractor(classes, .) -> Reshape(., [-1]) [-> Cast(to)]

The ArgMax's [N, 1] indices select [1, N] labels that the Reshape flattens to [N]. The same labels
are ``Gather(classes, ArgMax(P, axis=1, keepdims=0))``, with the classes cast once here to the Cast's
type (only where every class converts exactly); where the classes are 0, 1, ..., C - 1 as int64, the
ArgMax's indices are the labels themselves and the Gather goes too. Four nodes become one or two, and
the values are the same. The rewrite applies when every index the ArgMax can give names a class (the
scores' last dim is static and at most the number of classes: a lookup past the classes would fail at
run time, and its rewrite must too), and the intermediate values feed nothing else.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from .graph import Graph, attr, set_attrs

_ML = "ai.onnx.ml"


def _flat_target(graph: Graph, node) -> bool:
    """A Reshape to the constant shape [-1]."""
    if len(node.input) < 2:
        return False
    shape = graph.const_value(node.input[1])
    return shape is not None and np.asarray(shape).reshape(-1).tolist() == [-1]


def _labels_as(classes: np.ndarray, to: int | None):
    """``classes`` in the Cast's type ``to`` (None: no Cast), or None where a class would not convert
    exactly (strings cast, a value out of range or rounded)."""
    if to is None:
        return classes
    if classes.dtype.kind not in "iub" or to in (TensorProto.STRING, TensorProto.UNDEFINED):
        return None
    try:
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(to))
    except (KeyError, TypeError, ValueError):
        return None
    if dt.kind not in "iuf":
        return None
    got = classes.astype(dt)
    return got if np.array_equal(got.astype(np.int64), classes.astype(np.int64)) else None


def _match(graph: Graph, afe):
    """(argmax, the chain's nodes after the ArgMax, the labels in the result type) for an
    ArrayFeatureExtractor that ends a label lookup, else None."""
    if len(afe.input) != 2 or len(afe.output) != 1:
        return None
    classes = graph.const_value(afe.input[0])
    argmax = graph.producer_of(afe.input[1], "ArgMax")
    if classes is None or classes.ndim != 1 or argmax is None or not graph.single_use(afe.input[1]):
        return None
    scores = graph.info(argmax.input[0])
    if scores is None or scores[1] is None or len(scores[1]) != 2 or attr(argmax, "keepdims", 1) != 1 \
            or attr(argmax, "axis", 0) not in (1, -1):
        return None
    last = scores[1][1]
    if last is None or not 0 < last <= classes.size:
        return None
    reshape = graph.only_consumer(afe.output[0], "Reshape")
    if reshape is None or not _flat_target(graph, reshape):
        return None
    chain = [afe, reshape]
    cast = graph.only_consumer(reshape.output[0], "Cast")
    if cast is not None:
        chain.append(cast)
    labels = _labels_as(classes, attr(cast, "to") if cast is not None else None)
    return None if labels is None else (argmax, chain, labels)


def apply(graph: Graph) -> bool:
    found = [m for n in graph.nodes if n.op_type == "ArrayFeatureExtractor" and n.domain == _ML
             for m in [_match(graph, n)] if m is not None]
    if not found:
        return False
    drop, emit = set(), {}
    for argmax, chain, labels in found:
        out = chain[-1].output[0]
        drop.update(id(n) for n in chain)
        set_attrs(argmax, keepdims=0)
        if labels.dtype == np.int64 and np.array_equal(labels, np.arange(labels.size)):
            argmax.output[0] = out
            continue
        index = graph.unique(argmax.output[0] + "_index")
        argmax.output[0] = index
        emit[id(chain[-1])] = graph.make_node("Gather", [graph.add_const(labels, "labels"), index], [out], axis=0)
    graph.nodes = [emit.get(id(n), n) for n in graph.nodes if id(n) not in drop or id(n) in emit]
    graph.invalidate()
    graph.index()
    return True
