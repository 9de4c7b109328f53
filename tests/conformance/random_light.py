"""Random-weight variants of the onnx package's light models (built at test time, never stored).

The light models keep their architecture but store every weight as a constant (``ConstantOfShape``
of 0.02, or small initializers), so their outputs are nearly uniform and a wrong kernel can still
match them. :func:`random_variant` gives each weight tensor a seeded random value of the same shape
and dtype, chosen by what consumes it, so that activations stay of order one through the network:

* Conv ``W`` and Gemm/MatMul ``B``: He-normal, std ``sqrt(2 / fan_in)``;
* biases (Conv ``B``, Gemm ``C``), BatchNormalization ``B`` and ``mean``, Add by a constant: N(0, 0.1);
* BatchNormalization ``scale`` and ``var``, Mul by a constant: U[0.5, 1.5].

A weight may reach its consumer through Unsqueeze/Reshape (densenet's and inception_v2's
Scale layers, inception_v1's classifier); the role is that of the final consumer. The variant also
exposes the input of the final Softmax as an extra graph output, ``LOGITS`` (a model without a
Softmax already outputs its logits).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnx.backend.test.loader import DATA_DIR

MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
          "squeezenet", "vgg19", "zfnet512"]
LOGITS = "gpuops_test_logits"
_PASS_THROUGH = ("Unsqueeze", "Reshape")


def light_model(name: str) -> onnx.ModelProto:
    meta = json.loads((Path(DATA_DIR) / "real" / f"test_{name}" / "data.json").read_text())
    return onnx.load(str(Path(DATA_DIR).parent.parent.parent.parent / meta["url"]))  # url: from site-packages


def _normal(rng: np.random.Generator, shape, std: float) -> np.ndarray:
    """N(0, std**2) samples, quantized to 256 random levels: a table lookup is much cheaper than a
    Gaussian draw for vgg19's 100M-parameter Gemm."""
    table = rng.standard_normal(256).astype(np.float32) * np.float32(std)
    return table[np.frombuffer(rng.bytes(math.prod(shape)), np.uint8)].reshape(shape)


def _init(op_type: str, index: int, shape: tuple[int, ...], attrs: dict, rng: np.random.Generator):
    """A float32 array for input ``index`` of an ``op_type`` node, whose value there has ``shape``."""
    if (op_type, index) == ("Conv", 1):
        return _normal(rng, shape, math.sqrt(2.0 / math.prod(shape[1:])))
    if (op_type, index) in (("Gemm", 1), ("MatMul", 1)):
        return _normal(rng, shape, math.sqrt(2.0 / (shape[-1] if attrs.get("transB", 0) else shape[0])))
    if (op_type, index) in (("BatchNormalization", 1), ("BatchNormalization", 4), ("Mul", 1)):
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    if (op_type, index) in (("Conv", 2), ("Gemm", 2), ("BatchNormalization", 2), ("BatchNormalization", 3),
                            ("Add", 1)):
        return _normal(rng, shape, 0.1)
    raise ValueError(f"no random initialization for input {index} of {op_type}")


def random_variant(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """A copy of the light ``model`` with random weights (see the module doc) and the ``LOGITS`` output."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    rng = np.random.default_rng(seed)
    consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for i, x in enumerate(node.input):
            consumers.setdefault(x, []).append((node, i))
    sources = {n.output[0]: n for n in graph.node if n.op_type == "ConstantOfShape"}
    shapes = {name: tuple(int(d) for d in consts[n.input[0]]) for name, n in sources.items()}
    shapes.update({t.name: tuple(t.dims) for t in graph.initializer
                   if t.data_type == onnx.TensorProto.FLOAT and t.name in consumers})

    weights = {}
    for name, shape in shapes.items():
        value, (node, index) = name, consumers[name][0]
        at = shape
        while node.op_type in _PASS_THROUGH:
            if node.op_type == "Reshape":
                target = [d if d else at[i] for i, d in enumerate(consts[node.input[1]])]
                at = np.empty(at, np.uint8).reshape(target).shape
            value = node.output[0]
            (node, index), = consumers[value]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        weights[name] = _init(node.op_type, index, at, attrs, rng).reshape(shape)

    keep = [n for n in graph.node if n.output[0] not in weights]
    used = {x for n in keep for x in n.input}
    inputs = [i for i in graph.input if i.name not in consts]
    inits = [t for t in graph.initializer if t.name in used and t.name not in weights]
    for field, items in ((graph.node, keep), (graph.input, inputs), (graph.initializer, inits)):
        items = list(items)
        del field[:]
        field.extend(items)
    for name, w in weights.items():  # big: written in place, not copied by extend()
        t = graph.initializer.add()
        t.name, t.data_type, t.raw_data = name, onnx.TensorProto.FLOAT, w.tobytes()
        t.dims.extend(w.shape)
    model.ir_version = max(model.ir_version, 4)  # initializers need not be graph inputs

    last = graph.node[-1]
    logits = last.input[0] if last.op_type == "Softmax" else graph.output[0].name
    out = graph.output.add()
    out.CopyFrom(graph.output[0])  # Softmax keeps the shape
    out.name = LOGITS
    graph.node.append(helper.make_node("Identity", [logits], [LOGITS], name=LOGITS))
    return model


@contextlib.contextmanager
def node_outputs(model: onnx.ModelProto):
    """While open, every node's first output is also a graph output of ``model`` (changed in place:
    vgg19 is too big to copy cheaply), after the model's own outputs and in node order."""
    count = len(model.graph.output)
    have = {o.name for o in model.graph.output}
    for node in model.graph.node:
        if node.output[0] not in have:
            model.graph.output.add().name = node.output[0]
            have.add(node.output[0])
    try:
        yield model
    finally:
        del model.graph.output[count:]


def random_input(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    """Standard-normal float32 feeds for the model's graph inputs."""
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}


# Random variants are compared with onnxruntime per output, ``max |got - want| <= TOL * max |want|``:
# the reasoning (float32 dot products of up to 25088 terms over ~60 layers, measured worst 3e-6 of
# the scale) is in tests/conformance/test_light_models_random.py.
TOL = 1e-4


@functools.lru_cache(maxsize=None)
def random_case(name: str, seed: int = 0):
    """``(model, feeds, oracle)`` of the random-weight variant of light model ``name``: onnxruntime's
    (CPU, 2 threads) outputs by name. Built once per process; do not change the model."""
    import onnxruntime as ort

    model = random_variant(light_model(name), seed)
    feeds = random_input(model)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return model, feeds, dict(zip([o.name for o in model.graph.output], sess.run(None, feeds)))


def check_random_outputs(name: str, model: onnx.ModelProto, got, oracle: dict, tol: float = TOL) -> None:
    """Every output of ``model`` (``got``, in graph-output order) within ``tol`` of its scale of
    onnxruntime's; the logits must not be degenerate (a constant or non-finite vector checks nothing)."""
    logits = oracle[LOGITS]
    assert np.isfinite(logits).all() and logits.std() > 0.05 * np.abs(logits).max(), f"{name}: degenerate logits"
    for out, g in zip(model.graph.output, got):
        want = oracle[out.name]
        g = np.asarray(g)
        assert g.shape == want.shape and g.dtype == want.dtype, f"{name} {out.name}: {g.shape} {g.dtype}"
        err = float(np.abs(g - want).max() / max(np.abs(want).max(), np.finfo(want.dtype).tiny))
        assert err <= tol, f"{name} {out.name}: off by {err:.3g} of its scale (tolerance {tol})"
