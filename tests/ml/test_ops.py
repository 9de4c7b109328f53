"""The ai.onnx.ml ops one node at a time against onnxruntime, on cpu and on the cuda stand-in: the
attribute variants the converters of tests/ml/models do not write (``*_as_tensor``, every
post_transform and aggregate function, base_values, missing-value tracking, string labels), the
map-taking ops and the errors.

Float tolerance: 1e-5 of the output's magnitude -- float32 sums of at most a few dozen terms (trees,
features) differ by order of summation by at most n x 2**-24 of the terms' magnitude.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import gpuops
from tests.ops.common import DEVICES, assert_node_matches_ort, make_model, run_both, run_gpuops, run_ort
from tests.ort_versions import ort_older_than

RNG = np.random.default_rng(26)
TOL = 1e-5


def ml(op_type, inputs, outputs, **attrs):
    return helper.make_node(op_type, inputs, outputs, domain="ai.onnx.ml", **attrs)


def check(node, feeds, device, ml_opset=3, tol=TOL):
    return assert_node_matches_ort(node, feeds, device, opset=17, opsets={"ai.onnx.ml": ml_opset}, rtol=tol,
                                   atol=tol)


# -- preprocessing -------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_scaler_normalizer_imputer(device):
    x = RNG.normal(size=(6, 4)).astype(np.float32)
    check(ml("Scaler", ["x"], ["y"], offset=[0.5, -1.0, 2.0, 0.0], scale=[2.0, 0.5, 1.0, 3.0]), {"x": x}, device)
    check(ml("Scaler", ["x"], ["y"], offset=[0.25], scale=[4.0]), {"x": x.astype(np.float64)}, device)
    xz = x.copy()
    xz[2] = 0  # a row whose norm is 0 stays as it is
    xz[3] = -np.abs(xz[3])  # MAX divides by the largest value, negative here
    for norm in ("MAX", "L1", "L2"):
        check(ml("Normalizer", ["x"], ["y"], norm=norm), {"x": xz}, device)
    xn = x.copy()
    xn[::2, 1] = np.nan
    check(ml("Imputer", ["x"], ["y"], imputed_value_floats=[1.0, 2.0, 3.0, 4.0], replaced_value_float=float("nan")),
          {"x": xn}, device)
    check(ml("Imputer", ["x"], ["y"], imputed_value_floats=[9.0], replaced_value_float=float(x[0, 0])), {"x": x},
          device)
    xi = RNG.integers(-2, 3, size=(5, 3)).astype(np.int64)
    check(ml("Imputer", ["x"], ["y"], imputed_value_int64s=[7, 8, 9], replaced_value_int64=0), {"x": xi}, device)


@pytest.mark.parametrize("device", DEVICES)
def test_one_hot_and_feature_vectorizer(device):
    xi = np.array([[1, 5], [3, 9], [5, 1]], np.int64)
    check(ml("OneHotEncoder", ["x"], ["y"], cats_int64s=[1, 3, 5]), {"x": xi}, device)
    check(ml("OneHotEncoder", ["x"], ["y"], cats_int64s=[1, 3, 5]), {"x": xi.astype(np.float32)}, device)
    xs = np.array([["a", "b"], ["zz", "a"]], dtype=object)
    check(ml("OneHotEncoder", ["x"], ["y"], cats_strings=["a", "b", "c"]), {"x": xs}, device)
    a, b = RNG.normal(size=(3, 2)).astype(np.float32), RNG.normal(size=(3, 4)).astype(np.float32)
    check(ml("FeatureVectorizer", ["a", "b"], ["y"], inputdimensions=[3, 2]), {"a": a, "b": b}, device)


def test_one_hot_unknown_category_with_zeros_0():
    node = ml("OneHotEncoder", ["x"], ["y"], cats_int64s=[1, 3], zeros=0)
    model = make_model(node, {"x": np.array([1, 2], np.int64)}, opset=17, opsets={"ai.onnx.ml": 1})
    with pytest.raises(gpuops.NodeError, match="not one of the categories"):
        gpuops.InferenceSession(model, device="cpu").run(None, {"x": np.array([1, 2], np.int64)})


# -- encoders and maps ---------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_category_mapper_and_label_encoder_1(device):
    attrs = dict(cats_strings=["cat", "dog", "eel"], cats_int64s=[10, 20, 30], default_int64=-5,
                 default_string="none")
    check(ml("CategoryMapper", ["x"], ["y"], **attrs), {"x": np.array([["dog", "x"], ["eel", "cat"]], object)},
          device)
    check(ml("CategoryMapper", ["x"], ["y"], **attrs), {"x": np.array([30, 11, 10], np.int64)}, device)
    enc = ml("LabelEncoder", ["x"], ["y"], classes_strings=["a", "b", "c"], default_int64=-1, default_string="?")
    check(enc, {"x": np.array(["c", "a", "q"], object)}, device, ml_opset=1)
    check(enc, {"x": np.array([2, 0, 7], np.int64)}, device, ml_opset=1)


def _map_model(op_type, key, value, out_type, **attrs):
    mt = helper.make_map_type_proto(key, helper.make_tensor_type_proto(value, None))
    node = ml(op_type, ["m"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_value_info("m", mt)],
                              [helper.make_tensor_value_info("y", out_type, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)],
                             ir_version=10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cast_to,form,out", [("TO_FLOAT", "DENSE", TensorProto.FLOAT),
                                              ("TO_INT64", "SPARSE", TensorProto.INT64),
                                              ("TO_STRING", "SPARSE", TensorProto.STRING),
                                              ("TO_STRING", "DENSE", TensorProto.STRING)])
def test_cast_map(device, cast_to, form, out):
    model = _map_model("CastMap", TensorProto.INT64, TensorProto.FLOAT, out, cast_to=cast_to, map_form=form,
                       max_map=6)
    got, want = run_both(model, {"m": {4: 2.5, 0: -1.0, 2: 7.0}}, device)
    np.testing.assert_array_equal(got[0], want[0])
    assert got[0].dtype == want[0].dtype


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("key,vocab,feed", [
    (TensorProto.STRING, {"string_vocabulary": ["a", "b", "c"]}, {"a": 1.5, "c": -2.0, "zz": 3.0}),
    (TensorProto.INT64, {"int64_vocabulary": [7, 3, 5]}, {5: 1.0, 7: 0.25})])
def test_dict_vectorizer(device, key, vocab, feed):
    model = _map_model("DictVectorizer", key, TensorProto.FLOAT, TensorProto.FLOAT, **vocab)
    got, want = run_both(model, {"m": feed}, device)
    assert got[0].dtype == want[0].dtype == np.float32
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("bad,match", [(np.zeros(3, np.float32), "got ndarray"), ({1: 2.0}, "entry 1"),
                                       ({"a": "x"}, "entry 'a'"), ([{"a": 1.0}], "got list")])
def test_map_feed_errors(bad, match):
    model = _map_model("DictVectorizer", TensorProto.STRING, TensorProto.FLOAT, TensorProto.FLOAT,
                       string_vocabulary=["a"])
    with pytest.raises(gpuops.FeedError, match=match):
        gpuops.InferenceSession(model, device="cpu").run(None, {"m": bad})


@pytest.mark.parametrize("device", DEVICES)
def test_zip_map_returns_a_list_of_dicts(device):
    x = RNG.random((4, 3)).astype(np.float32)
    for labels in ({"classlabels_strings": ["a", "b", "c"]}, {"classlabels_int64s": [3, 1, 2]}):
        node = ml("ZipMap", ["x"], ["y"], **labels)
        out = helper.make_value_info("y", helper.make_sequence_type_proto(helper.make_map_type_proto(
            TensorProto.STRING if "classlabels_strings" in labels else TensorProto.INT64,
            helper.make_tensor_type_proto(TensorProto.FLOAT, None))))
        model = make_model(node, {"x": x}, [out], opset=17, opsets={"ai.onnx.ml": 1})
        (got,), (want,) = run_both(model, {"x": x}, device)
        assert isinstance(got, list) and all(type(v) is float for row in got for v in row.values())
        assert [list(r) for r in got] == [list(r) for r in want]
        np.testing.assert_allclose([list(r.values()) for r in got], [list(r.values()) for r in want], rtol=1e-7)


# -- linear models and SVMs ----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
def test_linear_classifier_and_regressor(device, post):
    x = RNG.normal(size=(8, 3)).astype(np.float32)
    coef = RNG.normal(size=9).round(2).tolist()
    node = ml("LinearClassifier", ["x"], ["label", "scores"], coefficients=coef, intercepts=[0.1, -0.2, 0.3],
              classlabels_strings=["x", "y", "z"], post_transform=post)
    if post == "PROBIT":  # PROBIT wants scores in (0, 1)
        x = np.abs(x) / 20
    check(node, {"x": x}, device, ml_opset=1)
    check(ml("LinearRegressor", ["x"], ["y"], coefficients=coef, intercepts=[0.5, 0.0, 1.0], targets=3,
             post_transform=post), {"x": x}, device, ml_opset=1)
    check(ml("LinearRegressor", ["x"], ["y"], coefficients=coef[:3], intercepts=[0.25], targets=1,
             post_transform=post), {"x": x}, device, ml_opset=1)


def check_binary(make, post, feeds, device, one_score=True):
    """A binary classifier whose second score is derived from one (``make(post)`` builds its node)
    against onnxruntime. Releases before 1.28 derive it otherwise: 1.25-1.27 write ``[-p, p]`` where
    every weight is >= 0 (a regression: scikit-learn's binary forests disagree with them), so the
    test skips there; up to 1.24 LOGISTIC gave ``[1 - s, s]`` untransformed, so there the test checks
    1.28's ``[logistic(-s), logistic(s)]`` on onnxruntime's own untransformed score ``s`` (and its
    labels)."""
    if not ort_older_than("1.25") and ort_older_than("1.28"):
        pytest.skip("onnxruntime 1.25-1.27 derive a binary classifier's second score as -p (fixed in 1.28)")
    if not (ort_older_than("1.25") and post == "LOGISTIC" and one_score):
        return check(make(post), feeds, device, ml_opset=1)
    opsets = {"ai.onnx.ml": 1}
    label, score = run_gpuops(make_model(make(post), feeds, opset=17, opsets=opsets), feeds, device)
    want_label, raw = run_ort(make_model(make("NONE"), feeds, opset=17, opsets=opsets), feeds)
    s = raw[:, 1].astype(np.float64)
    np.testing.assert_array_equal(label, want_label)
    np.testing.assert_allclose(score, np.stack([1 / (1 + np.exp(s)), 1 / (1 + np.exp(-s))], axis=1), rtol=TOL,
                               atol=TOL)


@pytest.mark.parametrize("device", DEVICES)
def test_binary_linear_classifier_one_row(device):
    x = RNG.normal(size=(8, 3)).astype(np.float32)
    for labels in ({"classlabels_ints": [4, 9]}, {"classlabels_strings": ["no", "yes"]}):
        check_binary(lambda post: ml("LinearClassifier", ["x"], ["label", "scores"], coefficients=[0.5, -1.0, 2.0],
                                     intercepts=[0.1], post_transform=post, **labels), "LOGISTIC", {"x": x}, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC"])
def test_linear_svm_and_one_class_regressor(device, post):
    x = RNG.normal(size=(8, 3)).astype(np.float32)
    check(ml("SVMClassifier", ["x"], ["label", "scores"], coefficients=RNG.normal(size=9).tolist(), rho=[0.3],
             classlabels_ints=[1, 2, 3], post_transform=post, kernel_params=[0.0, 0.0, 0.0]), {"x": x}, device,
          ml_opset=1)
    sv = RNG.normal(size=(4, 3)).round(2)
    check(ml("SVMRegressor", ["x"], ["y"], coefficients=[0.5, -1.0, 0.25, 1.0], rho=[0.1], n_supports=4, one_class=1,
             support_vectors=sv.reshape(-1).tolist(), kernel_type="RBF", kernel_params=[0.5, 0.0, 0.0]), {"x": x}, device,
          ml_opset=1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("proba", [False, True])
def test_svm_classifier_with_string_labels(device, kernel, classes, proba):
    """libsvm's one-against-one SVC with string labels, every kernel, with and without Platt's
    probabilities (the converter models cover int64 labels)."""
    per_class = [3, 2, 4][:classes]
    V, pairs = sum(per_class), classes * (classes - 1) // 2
    attrs = dict(kernel_type=kernel, kernel_params=[0.3, 0.5, 3.0], vectors_per_class=per_class,
                 support_vectors=RNG.normal(size=V * 3).round(3).tolist(),
                 coefficients=RNG.normal(size=(classes - 1) * V).round(3).tolist(),
                 rho=RNG.normal(size=pairs).round(3).tolist(), classlabels_strings=["ant", "bee", "cat"][:classes])
    if proba:
        attrs.update(prob_a=(-1 - RNG.random(pairs)).round(3).tolist(), prob_b=RNG.normal(size=pairs).round(3).tolist())
    x = RNG.normal(size=(12, 3)).astype(np.float32)
    check(ml("SVMClassifier", ["x"], ["label", "scores"], **attrs), {"x": x}, device, ml_opset=1)


# -- legacy tree ensembles -----------------------------------------------------------------------


def legacy_attrs(n_trees, depth, n_features, n_targets, prefix, weights_per_leaf=1, modes=("BRANCH_LEQ",),
                 signed=True, as_tensor=None, missing=True):
    """Random complete trees in the legacy attribute form; nodes listed tree by tree, leaves last."""
    a = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
                         "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true")}
    w = {f"{prefix}_{k}": [] for k in ("treeids", "nodes_ids", "ids", "weights")}
    inner = 2 ** depth - 1
    for t in range(n_trees):
        for i in range(2 * inner + 1):
            leaf = i >= inner
            a["nodes_treeids"].append(t)
            a["nodes_nodeids"].append(i)
            a["nodes_featureids"].append(0 if leaf else int(RNG.integers(n_features)))
            a["nodes_modes"].append("LEAF" if leaf else str(RNG.choice(modes)))
            a["nodes_values"].append(0.0 if leaf else float(np.float32(RNG.normal())))
            a["nodes_truenodeids"].append(0 if leaf else 2 * i + 1)
            a["nodes_falsenodeids"].append(0 if leaf else 2 * i + 2)
            a["nodes_missing_value_tracks_true"].append(int(missing and RNG.integers(2)))
            if leaf:
                for target in RNG.choice(n_targets, size=weights_per_leaf, replace=False):
                    w[f"{prefix}_treeids"].append(t)
                    w[f"{prefix}_nodes_ids"].append(i)
                    w[f"{prefix}_ids"].append(int(target))
                    v = float(np.float32(RNG.normal() if signed else RNG.random()))
                    w[f"{prefix}_weights"].append(v)
    w[f"{prefix}_nodeids"] = w.pop(f"{prefix}_nodes_ids")
    if as_tensor:
        for k in ("nodes_values", f"{prefix}_weights"):
            a[f"{k}_as_tensor"] = helper.make_tensor(k, as_tensor, (len(a.get(k, w.get(k))),),
                                                     a.pop(k) if k in a else w.pop(k))
    return {**a, **w}


def _x(n=40, f=3):
    x = RNG.normal(size=(n, f)).astype(np.float32)
    x[::7, 0] = np.nan
    return x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
def test_tree_regressor(device, agg, post):
    attrs = legacy_attrs(4, 3, 3, 3, "target", modes=("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT"))
    check(ml("TreeEnsembleRegressor", ["x"], ["y"], n_targets=3, aggregate_function=agg, post_transform=post,
             base_values=[0.5, -0.25, 1.0], **attrs), {"x": _x()}, device, ml_opset=1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("base", [[], [0.75]])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "PROBIT"])
def test_tree_regressor_one_target(device, base, post):
    attrs = legacy_attrs(5, 2, 3, 1, "target", signed=post != "PROBIT", modes=("BRANCH_EQ", "BRANCH_NEQ", "BRANCH_LT"))
    x = _x()
    x[::3, 1] = np.round(x[::3, 1])
    if post == "PROBIT":  # scores in (0, 1): the average of weights in [0, 1)
        node = ml("TreeEnsembleRegressor", ["x"], ["y"], n_targets=1, aggregate_function="AVERAGE",
                  post_transform=post, **attrs)
    else:
        if base:
            attrs["base_values"] = base
        node = ml("TreeEnsembleRegressor", ["x"], ["y"], n_targets=1, post_transform=post, **attrs)
    check(node, {"x": x}, device, ml_opset=1)


@pytest.mark.parametrize("device", DEVICES)
def test_tree_regressor_v3_double_tensors(device):
    attrs = legacy_attrs(3, 3, 3, 2, "target", as_tensor=TensorProto.DOUBLE)
    base = helper.make_tensor("b", TensorProto.DOUBLE, (2,), [0.5, 1.5])
    check(ml("TreeEnsembleRegressor", ["x"], ["y"], n_targets=2, base_values_as_tensor=base, **attrs),
          {"x": _x().astype(np.float64)}, device, ml_opset=3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("labels", [{"classlabels_int64s": [5, 6, 7, 8]}, {"classlabels_strings": list("abcd")}])
def test_tree_classifier_multiclass(device, post, labels):
    attrs = legacy_attrs(4, 3, 3, 4, "class", weights_per_leaf=2)
    check(ml("TreeEnsembleClassifier", ["x"], ["label", "scores"], post_transform=post, base_values=[0.1, 0.0, 0.2, 0.0],
             **labels, **attrs), {"x": _x()}, device, ml_opset=1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("base", [[], [0.25], [0.25, -0.5]])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
def test_tree_classifier_binary_one_class_weights(device, signed, base, post):
    """The converters' binary form: every weight names one class; the other's score is derived."""
    attrs = legacy_attrs(3, 2, 3, 1, "class", signed=signed)
    if base:
        attrs["base_values"] = base
    check_binary(lambda p: ml("TreeEnsembleClassifier", ["x"], ["label", "scores"], classlabels_int64s=[0, 1],
                              post_transform=p, **attrs), post, {"x": _x()}, device, one_score=len(base) < 2)


@pytest.mark.parametrize("device", DEVICES)
def test_tree_classifier_binary_both_classes_v3(device):
    attrs = legacy_attrs(3, 2, 3, 2, "class", weights_per_leaf=2, as_tensor=TensorProto.FLOAT)
    check(ml("TreeEnsembleClassifier", ["x"], ["label", "scores"], classlabels_strings=["no", "yes"],
             post_transform="SOFTMAX", **attrs), {"x": _x()}, device, ml_opset=3)


@pytest.mark.parametrize("attrs,match", [
    (dict(nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[5, 0, 0]), "does not exist"),
    (dict(nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0], nodes_modes=["BRANCH_XX", "LEAF", "LEAF"]),
     "unknown node mode"),
    (dict(nodes_truenodeids=[1, 2, 0], nodes_falsenodeids=[2, 0, 0], nodes_modes=["BRANCH_LEQ"] * 2 + ["LEAF"]),
     "node links to|cycle"),
    (dict(nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0], nodes_featureids=[-1, 0, 0]),
     "negative feature id"),
    (dict(nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0], target_ids=[0, 3]), "outside 0..0"),
])
def test_bad_trees_fail_at_session_creation(attrs, match):
    base = dict(nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
                nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[0.0, 0.0, 0.0], target_treeids=[0, 0],
                target_nodeids=[1, 2], target_ids=[0, 0], target_weights=[1.0, 2.0], n_targets=1)
    base.update(attrs)
    if "cycle" in match:
        base.update(nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
                    nodes_modes=["BRANCH_LEQ", "BRANCH_LEQ", "LEAF"])  # node 1 links back to the root
    model = make_model(ml("TreeEnsembleRegressor", ["x"], ["y"], **base), {"x": np.zeros((2, 1), np.float32)},
                       opset=17, opsets={"ai.onnx.ml": 1})
    with pytest.raises(gpuops.GpuopsError, match=match):
        gpuops.InferenceSession(model, device="cpu")



@pytest.mark.parametrize("device", DEVICES)
def test_tree_input_with_too_few_features_is_a_node_error(device):
    attrs = legacy_attrs(2, 2, 3, 1, "target")
    attrs["nodes_featureids"] = [2 if f else 0 for f in attrs["nodes_featureids"]]
    model = make_model(ml("TreeEnsembleRegressor", ["x"], ["y"], n_targets=1, **attrs),
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None])], opset=17,
                       opsets={"ai.onnx.ml": 1})
    sess = gpuops.InferenceSession(model, device=device)
    with pytest.raises(gpuops.NodeError, match="feature 2, the input has 2 features"):
        sess.run(None, {"x": np.zeros((4, 2), np.float32)})
    (y,) = sess.run(None, {"x": np.zeros((0, 3), np.float32)})  # no rows: no scores
    assert y.shape == (0, 1)


@pytest.mark.parametrize("feed", [np.array(["dog", "x"]), np.array([b"dog", b"x"]), ["dog", "x"],
                                  np.array(["dog", "x"], dtype=object)])
def test_string_feeds_as_onnxruntime_takes_them(feed):
    """A string input takes NumPy str or bytes arrays and lists of str, as onnxruntime's does."""
    node = ml("CategoryMapper", ["x"], ["y"], cats_strings=["cat", "dog"], cats_int64s=[1, 2])
    model = make_model(node, [helper.make_tensor_value_info("x", TensorProto.STRING, [None])], opset=17,
                       opsets={"ai.onnx.ml": 1})
    (y,) = gpuops.InferenceSession(model, device="cpu").run(None, {"x": feed})
    np.testing.assert_array_equal(y, [2, -1])
    with pytest.raises(gpuops.FeedError, match="expected dtype tensor.string"):
        gpuops.InferenceSession(model, device="cpu").run(None, {"x": np.zeros(2, np.float32)})


def test_scrambled_trees_give_gpuops_errors_or_results_never_a_crash():
    """Random node links, feature ids and weight targets: the session refuses the model or runs it
    (the native walk reads only within the forest and the row)."""
    rng = np.random.default_rng(5)
    x = _x(16)
    for case in range(60):
        attrs = legacy_attrs(2, 2, 3, 2, "target")
        n = len(attrs["nodes_nodeids"])
        key, hi = [("nodes_truenodeids", n + 1), ("nodes_falsenodeids", n + 1), ("nodes_featureids", 5),
                   ("target_ids", 3)][case % 4]
        values = list(attrs[key])
        values[int(rng.integers(len(values)))] = int(rng.integers(-1, hi))  # one value changed
        attrs[key] = values
        model = make_model(ml("TreeEnsembleRegressor", ["x"], ["y"], n_targets=2, **attrs),
                           [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])], opset=17,
                           opsets={"ai.onnx.ml": 1})
        try:
            (y,) = gpuops.InferenceSession(model, device="cpu").run(None, {"x": x})
        except gpuops.GpuopsError:
            continue
        assert y.shape == (16, 2), case
        try:  # where onnxruntime runs it too, the results agree
            (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
                None, {"x": x})
        except Exception:  # noqa: BLE001 (onnxruntime refuses some of what it cannot walk)
            continue
        np.testing.assert_allclose(y, want, rtol=TOL, atol=TOL, err_msg=f"case {case}")
