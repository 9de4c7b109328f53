"""Predictable misuse of contrib ops fails with a GpuopsError that names the node and the problem."""

import numpy as np
import pytest

import gpuops
from gpuops.errors import GpuopsError

from .helpers import make_model, ms_node, rand


@pytest.mark.parametrize("node,feeds,message", [
    (ms_node("CDist", ["a", "b"], ["c"], metric="wminkowski"), {"a": rand(2, 3), "b": rand(2, 3)}, "needs weights"),
    (ms_node("Attention", ["x", "w", "bias", "m"], ["y"], num_heads=2),
     {"x": rand(2, 4, 8), "w": rand(8, 24), "bias": rand(24), "m": np.ones((3,), np.int32)}, "mask_index of shape"),
    (ms_node("Attention", ["x", "w", "bias"], ["y"], num_heads=2, do_rotary=1),
     {"x": rand(2, 4, 8), "w": rand(8, 24), "bias": rand(24)}, "do_rotary"),
    (ms_node("ReorderOutput", ["x"], ["y"], domain="com.microsoft.nchwc", channels=3),
     {"x": rand(1, 32, 2, 2)}, "does not fit"),
    (ms_node("Tokenizer", ["x"], ["y"], mark=0, mincharnum=1, pad_value="", separators=[" "], tokenexp="a"),
     {"x": np.array(["a b"], dtype=object)}, "exactly one"),
    (ms_node("QLinearConcat", ["s", "z", "a", "sa"], ["y"], axis=0),
     {"s": np.array(0.1, np.float32), "z": np.array(0, np.uint8), "a": np.zeros(2, np.uint8),
      "sa": np.array(0.1, np.float32)}, "triples"),
    (ms_node("TorchEmbedding", ["w", "i"], ["y"]), {"w": rand(4, 2), "i": np.array([1, 4], np.int64)},
     "index 4 is out of range"),
])
def test_misuse_raises_a_clear_error(node, feeds, message):
    sess = gpuops.InferenceSession(make_model(node, feeds), device="cpu")
    with pytest.raises(GpuopsError, match=message):
        sess.run(None, feeds)
