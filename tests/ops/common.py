"""Shared helpers of the op tests: small ONNX models built with onnx.helper, run in gpuops and in
onnxruntime (the oracle), and their outputs compared."""

from collections.abc import Mapping

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import gpuops
from gpuops.bench.exact_int8 import for_onnxruntime

from tests.conformance.harness import assert_close, device_guard, unchanged

DEVICES = ["cpu", "cuda"]  # "cuda" is the CPU stand-in without a GPU: it proves no implicit transfers


def value_info(name, elem_type=TensorProto.FLOAT, shape=None):
    """A tensor graph input or output (``shape`` None: any rank)."""
    return helper.make_tensor_value_info(name, elem_type, shape)


def sequence_info(name, elem_type=TensorProto.FLOAT):
    """A graph input or output holding a sequence of tensors."""
    return helper.make_tensor_sequence_value_info(name, elem_type, None)


def const(name, value):
    """An initializer holding ``value``."""
    return numpy_helper.from_array(np.asarray(value), name)


def make_model(nodes, inputs, outputs=None, *, inits=(), opset=18, opsets=None):
    """A model running ``nodes`` (one NodeProto or a list).

    ``inputs``: ValueInfoProtos, or example arrays by name (a dict or (name, array) pairs), which give
    each input its element type and shape. ``outputs``: ValueInfoProtos or names (left untyped: the
    runtimes infer them); by default every output of the last node. ``inits``: TensorProtos or
    (name, array) pairs. ``opsets``: {domain: version} for domains beyond ai.onnx (at ``opset``).
    """
    nodes = [nodes] if isinstance(nodes, onnx.NodeProto) else list(nodes)
    items = inputs.items() if isinstance(inputs, Mapping) else inputs
    graph_inputs = [i if isinstance(i, onnx.ValueInfoProto) else
                    helper.make_tensor_value_info(i[0], helper.np_dtype_to_tensor_dtype(i[1].dtype), i[1].shape)
                    for i in items]
    outputs = nodes[-1].output if outputs is None else outputs
    graph_outputs = [o if isinstance(o, onnx.ValueInfoProto) else onnx.ValueInfoProto(name=o) for o in outputs]
    initializers = [t if isinstance(t, onnx.TensorProto) else const(*t) for t in inits]
    graph = helper.make_graph(nodes, "g", graph_inputs, graph_outputs, initializer=initializers)
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in (opsets or {}).items()]
    return helper.make_model(graph, opset_imports=imports, ir_version=10)


def one_node_model(op_type, inputs, outputs=1, *, opset=18, domain="", opsets=None, **attrs):
    """A model of one ``op_type`` node (of ``domain``, whose version goes in ``opsets``) reading every
    graph input (``inputs``: example arrays by name). ``outputs``: the node's output names, or how
    many (named y0, y1, ...)."""
    if isinstance(outputs, int):
        outputs = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op_type, list(inputs), outputs, domain=domain, **attrs)
    return make_model(node, inputs, opset=opset, opsets=opsets)


def run_gpuops(model, feeds, device="cpu", outputs=None):
    """Run ``model`` in gpuops; on the CUDA stand-in any implicit device-to-host copy is an error."""
    sess = gpuops.InferenceSession(model, device=device)
    feeds = dict(feeds)
    with device_guard(device), unchanged(feeds):
        return sess.run(outputs, feeds)


def run_ort(model, feeds, outputs=None):
    """Run ``model`` in onnxruntime on the CPU (its int8 weights made uint8 where its int8 sums saturate:
    :mod:`gpuops.bench.exact_int8`)."""
    sess = ort.InferenceSession(for_onnxruntime(model).SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(outputs, dict(feeds))


def run_both(model, feeds, device="cpu", outputs=None):
    """``model``'s outputs from gpuops and from onnxruntime: ``(got, want)``."""
    return run_gpuops(model, feeds, device, outputs), run_ort(model, feeds, outputs)


def assert_same(got, want, rtol=1e-6, atol=1e-6, names=None):
    """Outputs alike one for one: shape and dtype equal, values within tolerance (integers, booleans
    and strings exactly); sequences element by element."""
    assert len(got) == len(want), f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        name = names[i] if names else f"output {i}"
        if isinstance(w, np.ndarray) and w.dtype == object:
            assert g.dtype == object, f"{name}: dtype {g.dtype} != expected object"
        assert_close(g, w, rtol, atol, name)


def assert_matches_ort(model, feeds, device="cpu", *, rtol=1e-6, atol=1e-6, outputs=None, only=None):
    """Run ``model`` in gpuops and onnxruntime and compare the outputs (or those at the indices in
    ``only``); returns gpuops's outputs."""
    got, want = run_both(model, feeds, device, outputs)
    names = list(outputs or [o.name for o in model.graph.output])
    keep = range(len(want)) if only is None else sorted(only)
    assert len(got) == len(want), f"{len(got)} outputs, expected {len(want)}"
    assert_same([got[k] for k in keep], [want[k] for k in keep], rtol, atol, [names[k] for k in keep])
    return got


def run_node(node, feeds, device="cpu", *, opset=18, **model):
    """Run ``node`` (or a list of nodes) on ``feeds`` in gpuops; returns its outputs. The model is
    :func:`make_model`'s, ``feeds`` giving the input types; ``model`` holds its other keywords."""
    return run_gpuops(make_model(node, feeds, opset=opset, **model), feeds, device)


def assert_node_matches_ort(node, feeds, device="cpu", *, opset=18, rtol=1e-6, atol=1e-6, **model):
    """Run ``node`` (or a list of nodes) on ``feeds`` in gpuops and onnxruntime and compare the
    outputs; returns gpuops's outputs. See :func:`run_node`."""
    return assert_matches_ort(make_model(node, feeds, opset=opset, **model), feeds, device, rtol=rtol, atol=atol)


def run_op(op_type, feeds, device="cpu", *, outputs=1, opset=18, **attrs):
    """Run one ``op_type`` node on ``feeds`` (by input name) in gpuops; returns its outputs."""
    return run_gpuops(one_node_model(op_type, feeds, outputs, opset=opset, **attrs), feeds, device)


def assert_op_matches_ort(op_type, feeds, device="cpu", *, outputs=1, opset=18, rtol=1e-6, atol=1e-6, **attrs):
    """Run one ``op_type`` node on ``feeds`` in gpuops and onnxruntime and compare the outputs; returns
    gpuops's outputs."""
    model = one_node_model(op_type, feeds, outputs, opset=opset, **attrs)
    return assert_matches_ort(model, feeds, device, rtol=rtol, atol=atol)
