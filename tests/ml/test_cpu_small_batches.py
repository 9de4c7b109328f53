"""The CPU overrides of the classic ML ops (gpuops/ops/cpu/ml.py) against the generic ops they stand
in for: prepared once per session and called with ``prepared=`` alone, they compute the same NumPy
operations in the same order, so float32 results are equal bit for bit (LinearClassifier and Normalizer
with native kernels off; their kernels' results: tests/ml/test_native_linear.py); the tree ensembles
sum their float64 leaf weights in the native kernel's order (within trees x 2**-53 of the sum of magnitudes,
then rounded to float32: compared to 1 ulp of float32)."""

import numpy as np
import pytest
from onnx import helper

import gpuops
from gpuops import native
from gpuops.executor.run import _code
from gpuops.ops.ml import legacy_trees, linear, preprocess, trees
from tests.ml.test_native_linear import check_linear
from tests.ml.test_ops import legacy_attrs, ml
from tests.ops.common import make_model

RNG = np.random.default_rng(5)


def _session(node, feeds):
    model = make_model(node, feeds, opset=17, opsets={"ai.onnx.ml": 3})
    return gpuops.InferenceSession(model, device="cpu", threads=1)


def _rows(n=13, f=4):
    x = RNG.normal(size=(n, f)).astype(np.float32)
    x[2 % n] = 0
    x[5 % n, 1] = np.nan
    return x


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("labels", [{"classlabels_ints": [3, 1, 4]}, {"classlabels_ints": [0, 1, 2]},
                                    {"classlabels_strings": ["a", "b", "c"]}])
@pytest.mark.parametrize("one_row", [False, True])
def test_linear_classifier_equals_the_generic_op(post, labels, one_row):
    attrs = dict(coefficients=RNG.normal(size=12).astype(np.float32).tolist(),
                 intercepts=[0.5, -1.0, 0.25], post_transform=post, multi_class=1, **labels)
    x = _rows()
    if one_row:
        x = x[0]
    sess = _session(ml("LinearClassifier", ["x"], ["label", "scores"], **attrs), {"x": x})
    (code,) = _code(sess.plan)
    assert set(code.attrs) == {"prepared"}  # the op binds one keyword a call
    if native.enabled() and post in ("NONE", "SOFTMAX"):  # the native kernel's: within its bounds
        check_linear(x, attrs, sess.run(None, {"x": x}))
    with native.disabled():
        got = sess.run(None, {"x": x})
    want = linear.LinearClassifier(np, x, **attrs)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[0].dtype == want[0].dtype and got[1].dtype == np.float32


def test_linear_classifier_with_the_wrong_width_names_the_node():
    attrs = dict(coefficients=[1.0] * 12, classlabels_ints=[0, 1, 2])
    node = helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml", name="lin", **attrs)
    model = make_model(node, [helper.make_tensor_value_info("x", 1, [None, None])], opset=17,
                       opsets={"ai.onnx.ml": 1})
    sess = gpuops.InferenceSession(model, device="cpu")
    with pytest.raises(gpuops.NodeError, match="lin.*4 features, the input 5"):
        sess.run(None, {"x": np.ones((2, 5), np.float32)})


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("per_column", [False, True])
def test_scaler_equals_the_generic_op(dtype, per_column):
    attrs = dict(offset=[0.5, -1.0, 2.0, 0.0], scale=[2.0, 0.5, 1.0, 3.0]) if per_column else \
        dict(offset=[0.25], scale=[4.0])
    x = _rows().astype(dtype)
    got = _session(ml("Scaler", ["x"], ["y"], **attrs), {"x": x}).run(None, {"x": x})[0]
    want = preprocess.Scaler(np, x, **attrs)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got, want)


def test_scaler_of_the_wrong_width_is_refused():
    node = helper.make_node("Scaler", ["x"], ["y"], domain="ai.onnx.ml", name="sc", offset=[1.0, 2.0], scale=[1.0])
    model = make_model(node, [helper.make_tensor_value_info("x", 1, [None, None])], opset=17,
                       opsets={"ai.onnx.ml": 1})
    with pytest.raises(gpuops.NodeError, match="sc.*offset has 2 values for 3 columns"):
        gpuops.InferenceSession(model, device="cpu").run(None, {"x": np.ones((2, 3), np.float32)})


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("shape", [(13, 4), (4,)])
def test_normalizer_equals_the_generic_op(norm, shape):
    x = _rows()[:, :shape[-1]] if len(shape) == 2 else _rows()[0]
    x = x.copy()
    if len(shape) == 2:
        x[3] = -np.abs(x[3])  # MAX: the largest value is negative
        x[4, 0] = -0.0
    with native.disabled():  # (the native kernel's results: tests/ml/test_native_linear.py)
        got = _session(ml("Normalizer", ["x"], ["y"], norm=norm), {"x": x}).run(None, {"x": x})[0]
    want = preprocess.Normalizer(np, x, norm=norm)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def _ulp32(got, want):
    np.testing.assert_allclose(got, want, rtol=2.0 ** -23, atol=2.0 ** -40)


@pytest.mark.parametrize("agg", ["SUM", "AVERAGE"])
@pytest.mark.parametrize("targets,base", [(1, [0.5]), (3, [0.5, -0.25, 1.0]), (3, [])])
def test_tree_regressor_equals_the_generic_op(agg, targets, base):
    attrs = dict(legacy_attrs(6, 3, 4, targets, "target", modes=("BRANCH_LEQ", "BRANCH_LT")), n_targets=targets,
                 aggregate_function=agg)
    if base:
        attrs["base_values"] = base
    x = _rows(40)
    sess = _session(ml("TreeEnsembleRegressor", ["x"], ["y"], **attrs), {"x": x})
    (code,) = _code(sess.plan)
    assert set(code.attrs) == {"prepared"}
    got = sess.run(None, {"x": x})[0]
    want = legacy_trees.tree_regressor(1)(np, x, **attrs)
    assert got.dtype == want.dtype == np.float32
    _ulp32(got, want)


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC"])
@pytest.mark.parametrize("classes", [2, 4])
def test_tree_classifier_equals_the_generic_op(post, classes):
    attrs = dict(legacy_attrs(5, 3, 4, classes, "class", weights_per_leaf=classes), post_transform=post,
                 classlabels_int64s=list(range(10, 10 + classes)), base_values=[0.1] * classes)
    x = _rows(40)
    got = _session(ml("TreeEnsembleClassifier", ["x"], ["label", "scores"], **attrs), {"x": x}).run(None, {"x": x})
    want = legacy_trees.tree_classifier(1)(np, x, **attrs)
    np.testing.assert_array_equal(got[0], want[0])
    _ulp32(got[1], want[1])


def test_tree_ensemble_5_equals_the_generic_op():
    attrs = dict(nodes_featureids=[0, 1, 2], nodes_modes=helper.make_tensor("m", 2, (3,), [0, 1, 0]),
                 nodes_splits=helper.make_tensor("s", 1, (3,), [0.1, -0.2, 0.3]), nodes_truenodeids=[1, 0, 1],
                 nodes_falsenodeids=[2, 1, 2], nodes_trueleafs=[0, 1, 1], nodes_falseleafs=[0, 1, 1],
                 leaf_targetids=[0, 1, 0], leaf_weights=helper.make_tensor("w", 1, (3,), [1.5, -2.0, 0.25]),
                 tree_roots=[0], n_targets=2, aggregate_function=0, post_transform=2)
    node = helper.make_node("TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", **attrs)
    x = _rows(9, 3)
    model = make_model(node, {"x": x}, opset=21, opsets={"ai.onnx.ml": 5})
    got = gpuops.InferenceSession(model, device="cpu").run(None, {"x": x})[0]
    from onnx import numpy_helper
    plain = {k: numpy_helper.to_array(v) if not isinstance(v, (list, int)) else v for k, v in attrs.items()}
    want = trees.tree_ensemble_v5()(np, x, **plain)
    assert got.dtype == want.dtype == np.float32
    _ulp32(got, want)


def test_array_feature_extractor_of_int32_indices():
    x = RNG.normal(size=(3, 6)).astype(np.float32)
    idx = np.array([[4, 0]], np.int32)
    got = preprocess.ArrayFeatureExtractor(np, x, idx)
    np.testing.assert_array_equal(got, x[:, [4, 0]])
    assert preprocess.ArrayFeatureExtractor(np, x[0], np.array(2)).shape == (1, 1)


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_arg_and_sum_square_overrides_equal_the_generic_ops(keepdims, axis):
    import array_api_compat.numpy as xp

    from gpuops.ops import reduce as generic
    from gpuops.ops.cpu import reduce as cpu
    from gpuops.ops.cpu._common import generic as generic_of

    x = RNG.normal(size=(16, 8)).astype(np.float32)
    x[3, 2] = np.nan
    x[5, 1] = x[5, 6]  # a tie: the first index wins
    for name in ("ArgMax", "ArgMin"):
        for last in (0, 1):
            got = getattr(cpu, name)(xp, x, axis=axis, keepdims=keepdims, select_last_index=last)
            want = getattr(generic, name)(xp, x, axis=axis, keepdims=keepdims, select_last_index=last)
            assert got.dtype == want.dtype == np.int64
            np.testing.assert_array_equal(got, want)
    axes = np.array([axis], np.int64)
    for data in (x, x.astype(np.float64), x.astype(np.float16)):
        got = cpu.ReduceSumSquare(xp, data, axes, keepdims=keepdims)
        want = generic_of("ReduceSumSquare", 18)(xp, data, axes, keepdims=keepdims)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_arg_max_of_a_bad_axis_names_the_node():
    node = helper.make_node("ArgMax", ["x"], ["y"], axis=2, name="am")
    x = np.ones((2, 3), np.float32)
    with pytest.raises(gpuops.GpuopsError, match="am.*axis 2 is out of range"):
        gpuops.InferenceSession(make_model(node, {"x": x}, opset=17), device="cpu").run(None, {"x": x})


@pytest.mark.parametrize("n", [3, 17, 1000])
def test_long_numeric_attributes_convert_to_the_same_python_values(n):
    """Plans convert INTS and FLOATS of more than 16 values through NumPy: the same Python ints and
    floats (float32 values, infinities, NaN and -0.0 included) as one by one."""
    from gpuops.onnx.plan import _attr_value

    floats = (RNG.normal(size=n).astype(np.float32).tolist() + [np.inf, -0.0, np.nan, 1e-45, 3.4e38])[:n]
    ints = (RNG.integers(-2**40, 2**40, size=n).tolist() + [2**63 - 1, -2**63])[:n]
    got_f = _attr_value(helper.make_attribute("f", floats), "node")
    got_i = _attr_value(helper.make_attribute("i", ints), "node")
    assert [type(v) for v in got_f] == [float] * n and [type(v) for v in got_i] == [int] * n
    np.testing.assert_array_equal(np.array(got_f), np.array(floats, np.float32).astype(np.float64))
    assert np.all(np.signbit(got_f) == np.signbit(np.array(floats, np.float32)))
    assert got_i == ints
