"""A Scaler folded into the LinearClassifier / LinearRegressor it feeds: one node less, and scores within
the bound of gpuops/optimizer/fold_scaler.py: (F + 3) u of sum_k |x_k scale_k W_ck| + |offset_k scale_k
W_ck| + |b_c| for each of the two float32 sums (u = 2^-24), a softmax probability moving by at most
twice its scores' move."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from gpuops.optimizer import optimize

from ..ort_versions import ort_older_than
from .helpers import check, make_model, ops

RNG = np.random.default_rng(7)
U = 2.0 ** -24


def _model(F=4, C=3, op="LinearClassifier", post="SOFTMAX", offset=None, scale=None, extra=None, normalizer=True,
           dtype=TensorProto.FLOAT):
    offset = RNG.uniform(1, 6, F).astype(np.float32) if offset is None else np.asarray(offset, np.float32)
    scale = RNG.uniform(0.3, 2.5, F).astype(np.float32) if scale is None else np.asarray(scale, np.float32)
    W = RNG.normal(size=(C, F)).astype(np.float32)
    b = RNG.normal(size=C).astype(np.float32)
    nodes = [helper.make_node("Scaler", ["X"], ["z"], domain="ai.onnx.ml", offset=offset.tolist(),
                              scale=scale.tolist())]
    if op == "LinearClassifier":
        nodes.append(helper.make_node(op, ["z"], ["label", "scores"], domain="ai.onnx.ml",
                                      coefficients=W.reshape(-1).tolist(), intercepts=b.tolist(),
                                      classlabels_ints=list(range(max(C, 2))), post_transform=post, multi_class=1))
        outs = ["label", "scores"]
        if normalizer:
            nodes.append(helper.make_node("Normalizer", ["scores"], ["probabilities"], domain="ai.onnx.ml", norm="L1"))
            outs = ["label", "probabilities"]
    else:
        nodes.append(helper.make_node(op, ["z"], ["y"], domain="ai.onnx.ml", coefficients=W.reshape(-1).tolist(),
                                      intercepts=b.tolist(), targets=C))
        outs = ["y"]
    if extra:
        outs.append("z")
    x = helper.make_tensor_value_info("X", dtype, [None, F])
    return make_model(nodes, [x], outs, opset=18, opsets={"ai.onnx.ml": 1}), (offset, scale, W, b)


def _bound(x, params):
    offset, scale, W, b = (np.asarray(p, np.float64) for p in params)
    F = W.shape[1]
    offset, scale = np.broadcast_to(offset, (F,)), np.broadcast_to(scale, (F,))
    folded = np.abs(x.astype(np.float64)) @ np.abs(W * scale).T + np.abs(W * scale) @ np.abs(offset) + np.abs(b)
    plain = np.abs(x.astype(np.float64) - offset) @ np.abs(W * scale).T + np.abs(b)
    return float(((F + 3) * U * (folded + plain)).max())


def _rows(F, n=9):
    return RNG.uniform(0.5, 7.5, (n, F)).astype(np.float32)


@pytest.mark.parametrize("post", ["SOFTMAX", "NONE", "LOGISTIC"])
@pytest.mark.parametrize("F, C", [(4, 3), (10, 5), (6, 1)])
def test_scaler_folded_into_linear_classifier(post, F, C):
    m, params = _model(F, C, post=post)
    x = _rows(F)
    d = _bound(x, params)
    # NONE: the scores move by d; SOFTMAX, LOGISTIC: a probability by at most 2 d; L1 normalizing: 2 d more
    atol = 3 * d if post == "NONE" else 8 * d + 1e-7
    # onnxruntime before 1.25 gives a one-score classifier's LOGISTIC scores untransformed ([1 - s, s]; see
    # tests/ml/test_ops.py's check_binary): there gpuops' unoptimized run is the only oracle
    ort = not (C == 1 and post == "LOGISTIC" and ort_older_than("1.25"))
    opt = check(m, {"X": x}, gone=["Scaler"], kept=["LinearClassifier"], level="basic", rtol=0, atol=atol, ort=ort)
    assert len(opt.graph.node) == len(m.graph.node) - 1


def test_scaler_folded_into_linear_regressor():
    m, params = _model(5, 2, op="LinearRegressor", offset=[1.0], scale=[0.5])
    x = _rows(5)
    check(m, {"X": x}, gone=["Scaler"], kept=["LinearRegressor"], level="basic", rtol=0, atol=3 * _bound(x, params))


@pytest.mark.parametrize("case", ["scaled value read elsewhere", "offset far from the data", "float64 rows",
                                  "offsets of another width"])
def test_scaler_left_alone(case):
    kw = {}
    if case == "scaled value read elsewhere":
        kw["extra"] = True
    elif case == "offset far from the data":
        kw.update(offset=[1000.0, 0, 0, 0], scale=[1.0, 1, 1, 1])
    elif case == "float64 rows":
        kw["dtype"] = TensorProto.DOUBLE
    else:
        kw.update(offset=[1.0, 2.0], scale=[1.0])
    m, _ = _model(**kw)
    assert ops(optimize(m, "basic"))["Scaler"] == 1
