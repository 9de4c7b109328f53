"""Ops stay on the device, so a model can run as a CUDA graph: no host sync inside a node unless its
op declares one (``@op(..., syncs=reason)``). On the stand-in every sync CuPy would make is counted,
those inside array-api-compat included (its ``clip`` assigns through boolean masks), so each op below
-- all of which once clipped that way or counted with ``bincount`` -- must report 0 host syncs in
``run(profile=True)`` and equal the cpu path. Index bounds checks (``gpuops.ops.checks``) are
deferred to the end of a device run. Nor may a node copy host data to the device: that stops a CUDA
graph capture. The outputs are compared on real CuPy too; syncs and copies are counted on the
stand-in only."""

import array_api_compat.numpy as anp
import numpy as np
import pytest
from onnx import helper

import gpuops
from gpuops import registry
from gpuops.errors import NodeError
from gpuops.ops import checks, indexing

from tests.ops.common import make_model

from .both import STANDIN, h2d_copies, tally

RNG = np.random.default_rng(15)
MS = "com.microsoft"


def _f(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _u8(*shape):
    return RNG.integers(0, 256, shape).astype(np.uint8)


def _s(v, dtype=np.float32):
    return np.array(v, dtype)


# name: (op, domain, opset, node inputs, feeds, initializers, attributes)
CASES = {
    "HardSigmoid": ("HardSigmoid", "", 18, ["x"], {"x": _f(3, 4, scale=4)}, {}, dict(alpha=0.3, beta=0.4)),
    "HardSwish": ("HardSwish", "", 18, ["x"], {"x": _f(3, 4, scale=4)}, {}, {}),
    "RNN-hardsigmoid-clip": ("RNN", "", 18, ["X", "W", "R"], {"X": _f(4, 2, 3)}, {"W": _f(1, 5, 3), "R": _f(1, 5, 5)},
                             dict(hidden_size=5, activations=["HardSigmoid"], clip=0.5)),
    "LSTM-clip": ("LSTM", "", 18, ["X", "W", "R"], {"X": _f(3, 2, 3)}, {"W": _f(1, 16, 3), "R": _f(1, 16, 4)},
                  dict(hidden_size=4, clip=0.3)),
    "Resize-uint8": ("Resize", "", 18, ["X", "", "scales"], {"X": _u8(1, 1, 4, 4)},
                     {"scales": _s([1, 1, 1.7, 2.3])}, dict(mode="linear")),
    "GridSample-border": ("GridSample", "", 20, ["X", "grid"], {"X": _f(1, 2, 4, 5), "grid": _f(1, 3, 3, 2, scale=1.5)},
                          {}, dict(padding_mode="border")),
    "MaxRoiPool": ("MaxRoiPool", "", 18, ["X", "rois"], {"X": _f(1, 2, 6, 6)},
                   {"rois": _s([[0, 0, 0, 3, 3], [0, 1, 2, 9, 5]])}, dict(pooled_shape=[2, 2])),
    "ReverseSequence": ("ReverseSequence", "", 18, ["x", "lens"], {"x": _f(4, 2, 3)}, {"lens": _s([3, 4], np.int64)},
                        dict(batch_axis=1, time_axis=0)),
    "QuantizeLinear-int32": ("QuantizeLinear", "", 21, ["x", "scale", "zp"],
                             {"x": RNG.integers(-3000, 3000, (3, 4)).astype(np.int32)},
                             {"scale": _s(7.0), "zp": np.array(3, np.int8)}, {}),
    "QLinearAdd": ("QLinearAdd", MS, 1, ["A", "sa", "za", "B", "sb", "zb", "sc", "zc"],
                   {"A": _u8(2, 5), "B": _u8(2, 5)},
                   {"sa": _s(0.05), "za": np.uint8(100), "sb": _s(0.1), "zb": np.uint8(7), "sc": _s(0.04),
                    "zc": np.uint8(9)}, {}),
    "QLinearGlobalAveragePool": ("QLinearGlobalAveragePool", MS, 1, ["X", "sx", "zx", "sy", "zy"],
                                 {"X": _u8(1, 2, 3, 3)},
                                 {"sx": _s(0.5), "zx": np.uint8(10), "sy": _s(0.05), "zy": np.uint8(200)}, {}),
    "CropAndResize": ("CropAndResize", MS, 1, ["X", "rois", "bi", "size"], {"X": _f(1, 2, 5, 5)},
                      {"rois": _s([[0, 0, 0.8, 1.2], [-0.2, 0.1, 0.5, 0.9]]), "bi": np.array([0, 0], np.int32),
                       "size": np.array([3, 3], np.int32)}, {}),
    "CDist-cosine": ("CDist", MS, 1, ["A", "B"], {"A": _f(3, 4), "B": _f(2, 4)}, {}, dict(metric="cosine")),
    "TfIdfVectorizer": ("TfIdfVectorizer", "", 18, ["x"], {"x": RNG.integers(1, 9, (2, 6)).astype(np.int64)}, {},
                        dict(mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=1, ngram_counts=[0, 4],
                             ngram_indexes=list(range(7)), pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7])),
}


def _model(case):
    op_type, domain, opset, inputs, feeds, inits, attrs = CASES[case]
    node = helper.make_node(op_type, inputs, ["y"], domain=domain, name="node", **attrs)
    return make_model(node, feeds, ["y"], inits=list(inits.items()), opset=18 if domain else opset,
                      opsets={domain: opset} if domain else None), feeds


@pytest.mark.parametrize("case", CASES)
def test_op_runs_on_the_device_without_host_syncs(case):
    model, feeds = _model(case)
    op_type, domain, opset = CASES[case][:3]
    assert registry.resolve(domain, op_type, opset, device="cuda").syncs is None
    (want,) = gpuops.InferenceSession(model, device="cpu").run(None, feeds)
    sess = gpuops.InferenceSession(model, device="cuda")
    (got,) = sess.run(None, feeds, profile=True)
    if STANDIN:
        assert sess.last_profile["host_syncs"] == {"count": 0, "nodes": []}
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_ops_that_read_device_data_on_the_host_declare_it():
    for domain, op_type, opset in [("", "NonZero", 13), ("", "Unique", 11), ("", "Compress", 11), ("", "Loop", 19),
                                   ("", "NonMaxSuppression", 11), (MS, "Unique", 1)]:
        assert registry.resolve(domain, op_type, opset, device="cuda").syncs, op_type


def test_deferred_bounds_checks_read_nothing_until_the_end_of_the_run():
    xp = gpuops.get_device("cuda").xp
    data = _f(5, 3)
    ok, bad = np.array([[4, -5], [0, 2]], np.int64), np.array([[1, 7]], np.int64)
    with checks.deferred() as d, tally() as t:
        good = indexing.Gather(xp, xp.asarray(data), xp.asarray(ok))
        indexing.Gather(xp, xp.asarray(data), xp.asarray(bad))  # computes (wrapped), reports later
    assert len(d.pending) == 2
    assert t is None or t.syncs == []
    np.testing.assert_array_equal(good.get(), data[ok])
    with pytest.raises(NodeError, match=r"index 7 is out of range \[-5, 4\]"):
        d.check()
    with pytest.raises(NodeError, match=r"index 7 is out of range \[-5, 4\]"):  # the cpu path: at once
        indexing.Gather(anp, data, bad)



def test_deferred_checks_are_read_in_one_transfer_per_dtype():
    """Pending checks of one dtype are read together (concatenated on the device), each check gets its
    own values back in its shape, in node order, and the first failure names its node."""
    xp = gpuops.get_device("cuda").xp
    seen = []
    values = [np.array([3, -1], np.int64), np.array([[5, 6], [7, 8]], np.int64), np.array(2, np.int32),
              np.array([9], np.int64)]
    with checks.deferred() as d:
        for i, v in enumerate(values):
            d.node = f"node {i}"
            checks.require(xp.asarray(v), lambda host, i=i: seen.append((i, host)))
    with tally() as t:
        d.check()
    assert [i for i, _ in seen] == [0, 1, 2, 3]
    for (_, host), v in zip(seen, values):
        assert host.dtype == v.dtype and host.shape == v.shape
        np.testing.assert_array_equal(host, v)
    assert t is None or len(t.syncs) == 2  # int64 and int32

    def bad(host):
        raise NodeError(f"index {int(host.max())} is out of range")

    with checks.deferred() as d:
        d.node = "Gather 'first'"
        checks.require(xp.asarray(values[0]), lambda host: None)
        d.node = "Gather 'second'"
        checks.require(xp.asarray(values[1]), bad)
    with pytest.raises(NodeError, match="Gather 'second': index 8 is out of range"):
        d.check()

NO_COPIES = {  # (op, opset, inputs: device arrays, and NumPy ones for host inputs, attributes)
    "AveragePool": ("AveragePool", 19, (_f(2, 3, 7, 6),),  # uneven counts
                    dict(kernel_shape=[3, 3], pads=[1, 0, 2, 1], strides=[2, 1], ceil_mode=1)),
    "MaxPool": ("MaxPool", 12, (_f(2, 3, 7, 6),), dict(kernel_shape=[2, 3], pads=[1, 1, 0, 1], dilations=[2, 1],
                                                       n_outputs=2)),  # with indices
    "Resize-cubic": ("Resize", 19, (_f(1, 2, 5, 6), None, _s([1, 1, 1.6, 0.7])),
                     dict(mode="cubic", exclude_outside=1, antialias=1)),
    "Resize-crop": ("Resize", 19, (_f(1, 2, 5, 6), _s([0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4]), None,
                                   np.array([1, 2, 4, 7], np.int64)),
                    dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=9)),
    "Resize-nearest": ("Resize", 19, (_f(1, 2, 5, 6), None, _s([1, 1, 2, 1.5])), dict(nearest_mode="ceil")),
    "LSTM-sequence_lens": ("LSTM", 14, (_f(4, 2, 3), _f(2, 16, 3), _f(2, 16, 4), None, np.array([4, 2], np.int32)),
                           dict(hidden_size=4, direction="bidirectional")),
    "Range-float": ("Range", 11, (_s(0.5), _s(3.7), _s(0.4)), {}),
    "Attention-masked-causal": (f"{MS}::Attention", 1, (_f(2, 3, 4), _f(4, 12), _f(12), np.array([[1, 1, 0]] * 2,
                                                                                           np.int32)),
                                dict(num_heads=2, unidirectional=1, n_outputs=1)),
    "MultiHeadAttention-masked-causal": (f"{MS}::MultiHeadAttention", 1, (_f(2, 3, 4), _f(2, 3, 4), _f(2, 3, 4),
                                                                         None, np.array([[1, 1, 0]] * 2, np.int32)),
                                         dict(num_heads=2, unidirectional=1, n_outputs=1)),
}


@pytest.mark.parametrize("case", NO_COPIES)
def test_ops_copy_nothing_from_the_host(case):
    """A host->device copy inside a node stops a CUDA graph capture (pageable memory): window counts,
    argmax indices, resize taps, RNN step masks, ranges and attention masks are built on the device."""
    xp = gpuops.get_device("cuda").xp
    op_type, opset, inputs, attrs = NO_COPIES[case]
    domain, _, op_type = op_type.rpartition("::")
    impl = registry.resolve(domain, op_type, opset, device="cuda")
    want = impl.fn(anp, *inputs, **attrs)
    args = [xp.asarray(a) if i not in impl.host_inputs and a is not None else a for i, a in enumerate(inputs)]
    before = h2d_copies()
    with tally() as t:
        got = impl.fn(xp, *args, **attrs)
    assert h2d_copies() == before and (t is None or t.syncs == [])
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(g.get(), w, rtol=1e-6, atol=1e-6)
