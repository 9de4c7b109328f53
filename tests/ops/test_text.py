"""String ops and TfIdfVectorizer against onnxruntime; ImageDecoder against Pillow."""

import functools
import io

import numpy as np
import pytest
from onnx import helper

import gpuops

from tests.ops.common import assert_node_matches_ort, make_model, run_gpuops

_check = functools.partial(assert_node_matches_ort, atol=0)


def strings(*values, shape=None):
    a = np.array(values, dtype=object)
    return a.reshape(shape) if shape else a


@pytest.mark.parametrize("attrs,x", [
    ({"stopwords": ["the", "A"], "case_change_action": "LOWER"}, strings("The", "cat", "a", "sat", "THE")),
    ({"stopwords": ["the", "A"], "is_case_sensitive": 1, "case_change_action": "UPPER"},
     strings("The", "cat", "A", "the", shape=(1, 4))),
    ({"stopwords": ["x"], "case_change_action": "NONE"}, strings("x", "X", shape=(1, 2))),
    ({"stopwords": ["x"]}, strings("X", "x")),
    ({"case_change_action": "UPPER"}, strings("straße", "ok", "éa")),
    ({"case_change_action": "LOWER", "stopwords": ["ÉTÉ"]}, strings("été", "Ωx", "ABC")),
])
def test_string_normalizer(attrs, x):
    # onnxruntime needs an installed locale; C.UTF-8 is the one every system has
    _check(helper.make_node("StringNormalizer", ["x"], ["y"], locale="C.UTF-8", **attrs), {"x": x}, opset=10)


def test_string_normalizer_rejects_2d_with_several_rows():
    feeds = {"x": strings("a", "b", shape=(2, 1))}
    model = make_model(helper.make_node("StringNormalizer", ["x"], ["y"]), feeds, opset=10)
    with pytest.raises(gpuops.GpuopsError, match=r"\[1, C\]"):
        run_gpuops(model, feeds)


@pytest.mark.parametrize("attrs", [{}, {"delimiter": ","}, {"delimiter": ",", "maxsplit": 1}, {"maxsplit": 1},
                                   {"delimiter": "ab"}])
def test_string_split(attrs):
    x = strings("a,b,,c", "  lead  and trail ", "", "one", "xabyabz", "a,b c", shape=(2, 3))
    _check(helper.make_node("StringSplit", ["x"], ["y", "z"], **attrs), {"x": x}, opset=20)


def test_string_split_empty_input():
    got = _check(helper.make_node("StringSplit", ["x"], ["y", "z"]), {"x": np.zeros((0, 2), dtype=object)},
                 opset=20)
    assert got[0].shape == (0, 2, 0)


def test_string_concat_broadcast():
    _check(helper.make_node("StringConcat", ["x", "y"], ["z"]),
           {"x": strings("a", "é", "", shape=(3, 1)), "y": strings("1", "2")}, opset=20)


@pytest.mark.parametrize("pattern", [r"\d+", r"[a-z]+@[a-z]+\.com", r"a|ab", r"(?i)BOB.*", ""])
def test_regex_full_match(pattern):
    _check(helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern),
           {"x": strings("123", "12a", "bob@site.com", "Bob@site.com", "ab", "", shape=(2, 3))}, opset=20)


TFIDF_POOL = dict(ngram_counts=[0, 4], ngram_indexes=[0, 1, 2, 3, 4, 5, 6],
                  pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7])


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("min_n,max_n,skip", [(1, 1, 0), (2, 2, 0), (1, 2, 0), (1, 2, 3), (2, 2, 5)])
def test_tfidf_int(mode, min_n, max_n, skip):
    x = np.array([[1, 1, 3, 3, 3, 7], [8, 6, 7, 5, 6, 8], [5, 6, 7, 8, 6, 7]], np.int32)
    attrs = dict(TFIDF_POOL, mode=mode, min_gram_length=min_n, max_gram_length=max_n, max_skip_count=skip)
    if mode != "TF":
        attrs["weights"] = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]
    _check(helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs), {"x": x}, opset=9)
    _check(helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs), {"x": x[1].astype(np.int64)}, opset=9)


def test_tfidf_strings_with_shared_output_index():
    attrs = dict(mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=1, ngram_counts=[0, 3],
                 ngram_indexes=[0, 1, 2, 3, 1], pool_strings=["a", "b", "c", "a", "b", "b", "c"])
    x = strings("a", "b", "c", "a", "x", "b", "b", "c", shape=(2, 4))
    _check(helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs), {"x": x}, opset=9)


def test_image_decoder_png():
    PIL = pytest.importorskip("PIL.Image")
    pixels = np.random.default_rng(0).integers(0, 256, size=(5, 7, 3), dtype=np.uint8)
    buf = io.BytesIO()
    PIL.fromarray(pixels).save(buf, format="PNG")
    data = np.frombuffer(buf.getvalue(), dtype=np.uint8)
    for fmt, want in (("RGB", pixels), ("BGR", pixels[:, :, ::-1]),
                      ("Grayscale", np.asarray(PIL.fromarray(pixels).convert("L"))[:, :, None])):
        model = make_model(helper.make_node("ImageDecoder", ["x"], ["y"], pixel_format=fmt), {"x": data}, opset=20)
        (got,) = run_gpuops(model, {"x": data})
        assert got.dtype == np.uint8
        np.testing.assert_array_equal(got, want)


def test_image_decoder_rejects_garbage():
    pytest.importorskip("PIL.Image")
    data = np.frombuffer(b"not an image", dtype=np.uint8)
    model = make_model(helper.make_node("ImageDecoder", ["x"], ["y"]), {"x": data}, opset=20)
    with pytest.raises(gpuops.GpuopsError, match="cannot decode"):
        run_gpuops(model, {"x": data})


def test_tfidf_empty_input_and_large_pool():
    attrs = dict(TFIDF_POOL, mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=0)
    _check(helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs), {"x": np.zeros((0,), np.int64)}, opset=9)
    rng = np.random.default_rng(1)
    unigrams = rng.choice(100000, size=3000, replace=False)
    bigrams = np.unique(rng.choice(unigrams[:60], size=(4000, 2)), axis=0)  # onnxruntime rejects repeats
    total = 3000 + len(bigrams)
    attrs = dict(mode="TFIDF", min_gram_length=1, max_gram_length=2, max_skip_count=2,
                 ngram_counts=[0, 3000], ngram_indexes=list(range(total)),
                 pool_int64s=[int(v) for v in np.concatenate([unigrams, bigrams.reshape(-1)])],
                 weights=[float(w) for w in rng.uniform(0.5, 2, size=total)])
    x = rng.choice(np.concatenate([unigrams[:50], [-5, 7]]), size=(8, 40)).astype(np.int64)
    _check(helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs), {"x": x}, opset=9)
