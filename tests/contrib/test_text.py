"""com.microsoft Tokenizer, MurmurHash3 and WordConvEmbedding against onnxruntime's CPU kernels;
TorchEmbedding (no CPU kernel) against its row-gather formula."""

import numpy as np
import pytest

from .helpers import check, ms_node, ort_has_kernel, rand, randint


def strings(*values, shape=None):
    a = np.array(values, dtype=object)
    return a.reshape(shape) if shape else a


@pytest.mark.parametrize("x,attrs", [
    (strings("Hello World", "I love computer science !"), {"separators": [" "]}),
    (strings("a,b;;c", "dd;e", "", "f", shape=(2, 2)), {"separators": [";", ","], "pad_value": "#", "mark": 1}),
    (strings("abcdef", "ab cd"), {"separators": ["b", "cd"], "mincharnum": 2}),
    (strings("one1two22three", "4four"), {"separators": ["[0-9]+"]}),
    (strings("héllo", "wörld!"), {"separators": [""], "mark": 1}),
    (strings("Hello, World 42", "x yz"), {"tokenexp": "[a-zA-Z]+", "mark": 1}),
    (strings("aaa bb c", "dddd"), {"tokenexp": "[a-z]+", "mincharnum": 2}),
    (strings(" ", "  "), {"separators": [" "]}),  # everything is a separator: [C, 0]
])
def test_tokenizer(x, attrs):
    full = {"mark": 0, "pad_value": "<pad>", "mincharnum": 1, **attrs}
    check(ms_node("Tokenizer", ["x"], ["y"], **full), {"x": x})


@pytest.mark.parametrize("x", [
    np.array([0, 1, -7, 123456789], np.int32), np.array([[1, 2], [3, 2**32 - 1]], np.uint32),
    np.array([0, -1, 2**40 + 3], np.int64), np.array([5, 2**63 + 1], np.uint64),
    np.array([0.0, -1.5, 3.25], np.float32), np.array([1e300, -0.0], np.float64),
    strings("", "a", "ab", "abc", "abcd", "hello world", "héllo"),
])
@pytest.mark.parametrize("attrs", [{}, {"positive": 0, "seed": 42}])
def test_murmur_hash3(x, attrs):
    check(ms_node("MurmurHash3", ["x"], ["y"], **attrs), {"x": x})


@pytest.mark.parametrize("width", [2, 3])
def test_word_conv_embedding(width):
    words = np.array([[3, 5, 1, 0, 0, 0], [2, 0, 0, 0, 0, 0], [4, 4, 4, 4, 4, 4], [7, 1, 2, 3, 0, 0]], np.int32)
    feeds = {"seq": words, "w": rand(5, 1, width, 4), "b": rand(5), "c": rand(8, 4)}
    check(ms_node("WordConvEmbedding", list(feeds), ["y"], conv_window_size=width), feeds, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("weight_dtype", [np.float32, np.int64])
def test_torch_embedding_formula(weight_dtype):
    w = randint(-50, 50, 10, 4).astype(weight_dtype)
    idx = np.array([[1, 9, 0], [3, 3, -1]], np.int64)
    node = ms_node("TorchEmbedding", ["w", "i", "p"], ["y"])
    feeds = {"w": w, "i": idx, "p": np.array(0, np.int64)}
    assert not ort_has_kernel(node, feeds)
    check(node, feeds, ref=lambda w, i, p: [w[i]])
