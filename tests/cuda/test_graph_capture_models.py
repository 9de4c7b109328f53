"""The goal of issue 12, checked on the stand-in: the onnx package's nine light models (with random
weights: their stored constant weights give a uniform softmax that a wrong kernel still matches) and real
architectures built with onnx.helper (a MobileNet-style CNN with Clip, HardSwish, HardSigmoid and
depthwise convolutions; a BERT-style encoder with an attention mask; a GPT-style decoder with past
keys / values) run on ``device="cuda", cuda_graph=True`` as one captured CUDA graph, with no host
sync between the feed upload and the output download, and give the cpu path's results.

The stand-in counts every sync CuPy would make (``run(profile=True)``) and refuses them, and
host->device copies, during a capture, as CuPy does; on real CuPy the outputs are compared all the
same (and a capture that syncs fails there too), the sync counts only on the stand-in. A capture
costs three runs of the emulated kernels (warm-up, capture, replay): the nine captures take about a
minute on 2 cores.
"""

import math
from functools import partial

import numpy as np
import pytest
from onnx import TensorProto, helper

import gpuops
from gpuops import device as _device
from gpuops.errors import NodeError

from tests.conformance.harness import assert_close
from tests.conformance.random_light import MODELS, check_random_outputs, random_case
from tests.zoo.models import BUILDERS, Graph

STANDIN = _device.uses_standin()
NO_SYNCS = {"count": 0, "nodes": []}

CAPTURED = {"captured": True, "blocking_node": None, "reason": None}


def _captured_run(model, feeds):
    sess = gpuops.InferenceSession(model, device="cuda", cuda_graph=True)
    got = sess.run(None, feeds)
    assert sess.cuda_graph_status() == CAPTURED
    return sess, got


@pytest.mark.parametrize("name", MODELS)
def test_light_model_runs_without_host_syncs(name):
    """The random-weight variant's outputs and logits against onnxruntime
    (:func:`tests.conformance.random_light.check_random_outputs`)."""
    model, feeds, oracle = random_case(name)
    sess = gpuops.InferenceSession(model, device="cuda")
    got = sess.run(None, feeds, profile=True)
    check_random_outputs(name, model, got, oracle)
    if STANDIN:  # CuPy counts only gpuops' own transfers
        assert sess.last_profile["host_syncs"] == NO_SYNCS


@pytest.mark.parametrize("name", MODELS)
def test_light_model_runs_as_one_captured_graph(name):
    model, feeds, oracle = random_case(name)
    _, got = _captured_run(model, feeds)
    check_random_outputs(name, model, got, oracle)


def mobilenet(batch=2):
    """MobileNetV2/V3 blocks: ReLU6 as Clip(0, 6), depthwise 3x3, HardSwish, a HardSigmoid
    squeeze-excitation gate, a residual and a linear head."""
    g = Graph(7)

    def conv(x, c_in, c_out, k, stride=1, group=1):
        w = g.weight(c_out, c_in // group, k, k, scale=1 / math.sqrt(c_in // group * k * k))
        return g.op("Conv", x, w, g.weight(c_out, scale=0.1), kernel_shape=[k, k], strides=[stride, stride],
                    pads=[k // 2] * 4, group=group)

    relu6 = (g.const(np.float32(0)), g.const(np.float32(6)))
    x = g.op("Clip", conv("pixels", 3, 8, 3, stride=2), *relu6)
    y = g.op("Clip", conv(conv(x, 8, 16, 1), 16, 16, 3, group=16), *relu6)  # expand, depthwise
    y = g.op("HardSwish", y)
    se = g.op("Relu", conv(g.op("GlobalAveragePool", y), 16, 4, 1))
    y = g.op("Mul", y, g.op("HardSigmoid", conv(se, 4, 16, 1), alpha=1 / 6, beta=0.5))
    x = g.op("Add", x, conv(y, 16, 8, 1))  # project, residual
    x = g.op("Clip", conv(x, 8, 8, 5, stride=2, group=8), g.const(np.float32(-1)), g.const(np.float32(1)))
    x = g.op("Flatten", g.op("GlobalAveragePool", g.op("HardSwish", x)), axis=1)
    g.output(g.op("Gemm", x, g.weight(10, 8), g.weight(10, scale=0.1), transB=1), "logits")
    io = helper.make_tensor_value_info
    return g.model([io("pixels", TensorProto.FLOAT, [batch, 3, 16, 16])],
                   [io("logits", TensorProto.FLOAT, [batch, 10])], 17)


def _zoo(name):
    z = BUILDERS[name](2)
    return z.model, z.feeds(2, np.random.default_rng(0))


ARCHITECTURES = {
    "mobilenet": lambda: (mobilenet(), {"pixels": np.random.default_rng(0).standard_normal((2, 3, 16, 16))
                                        .astype(np.float32)}),
    **{name: partial(_zoo, name) for name in ("depthwise_cnn", "bert", "gpt")},
}


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_architecture_runs_as_one_captured_graph_without_host_syncs(name):
    model, feeds = ARCHITECTURES[name]()
    want = gpuops.InferenceSession(model, device="cpu").run(None, feeds)
    prof = gpuops.InferenceSession(model, device="cuda")
    node_by_node = prof.run(None, feeds, profile=True)
    if STANDIN:
        assert prof.last_profile["host_syncs"] == NO_SYNCS
    sess, got = _captured_run(model, feeds)
    again = sess.run(None, feeds)  # a replay
    for out, w, a, b, c in zip(model.graph.output, want, node_by_node, got, again):
        for g in (a, b, c):
            assert_close(g, w, 1e-5, 1e-5, out.name)


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_out_of_range_token_id_is_a_node_error_and_the_session_recovers(cuda_graph):
    """Index checks stay errors on the device, whether a node runs them at once or the run reads
    them after its last node (a replayed graph included)."""
    model, feeds = _zoo("bert")
    want = gpuops.InferenceSession(model, device="cpu").run(None, feeds)
    sess = gpuops.InferenceSession(model, device="cuda", cuda_graph=cuda_graph)
    sess.run(None, feeds)
    bad = dict(feeds, input_ids=feeds["input_ids"].copy())
    bad["input_ids"][1, 2] = 1000
    with pytest.raises(NodeError, match=r"node '.*index 1000 is out of range"):
        sess.run(None, bad)
    for out, w, g in zip(model.graph.output, want, sess.run(None, feeds)):
        assert_close(g, w, 1e-5, 1e-5, out.name)
