"""Linear models and support vector machines: LinearClassifier, LinearRegressor, SVMClassifier,
SVMRegressor.

All compute in float32 (the spec's output type), as onnxruntime does. Where the spec is silent they
follow onnxruntime (``linearclassifier.cc``, ``svmclassifier.cc``, ``svmregressor.cc``):

- a binary LinearClassifier with one row of coefficients labels by ``score > 0`` and writes
  ``[1 - s, s]`` (no other transform applied); a 2-class SVM without probabilities writes
  ``[-s, s]`` (``[1 - s, s]`` with a post_transform other than NONE) and labels by the pairwise vote;
- SVM probabilities are libsvm's: Platt's sigmoid per pair of classes (``1 - logistic(A s + B)``,
  clipped to [1e-7, 1 - 1e-7]) coupled by Wu, Lin and Weng's iterative method (at most 100 rounds,
  stopping at an error of 0.005 / classes), then ``post_transform``;
- the linear SVM (no support vectors) scores ``x . coef_c + rho[0]`` per class.
"""

from __future__ import annotations

import numpy as np

from ...errors import NodeError
from ...registry import op
from ._common import ML, apply_transform, binary_scores, class_labels, labels_of, rows_2d, transform_name


def _floats(xp, X, op_type):
    return rows_2d(xp, X, op_type).astype(np.float32)


def coefficient_matrix(values, rows: int, op_type: str, what: str) -> np.ndarray:
    """``values`` as a float32 matrix of ``rows`` rows (a clear error naming ``op_type`` and ``what``
    when their count is not a multiple of it)."""
    a = np.asarray(values, dtype=np.float32).reshape(-1)
    if rows <= 0 or a.size % rows:
        raise NodeError(f"{op_type}: {what} has {a.size} values, not a multiple of {rows}")
    return a.reshape(rows, -1)


def _check_features(X, n: int, op_type: str):
    if int(X.shape[1]) != n:
        raise NodeError(f"{op_type}: the model has {n} features, the input {int(X.shape[1])}")


@op("LinearClassifier", domain=ML, since=1)
def LinearClassifier(xp, X, *, coefficients, classlabels_ints=None, classlabels_strings=None, intercepts=None,
                     multi_class=0, post_transform="NONE"):
    """[N, F] -> (labels [N], scores [N, classes]): ``X @ coefficients.T + intercepts``."""
    post = transform_name("LinearClassifier", post_transform)
    labels, _ = class_labels("LinearClassifier", classlabels_strings, classlabels_ints)
    inter = np.asarray(intercepts or [], np.float32)
    C = inter.size if inter.size else labels.size
    W = coefficient_matrix(coefficients, C, "LinearClassifier", "coefficients")
    x = _floats(xp, X, "LinearClassifier")
    _check_features(x, W.shape[1], "LinearClassifier")
    s = xp.matmul(x, xp.asarray(W.T))
    if inter.size:
        s = s + xp.asarray(inter)
    if C == 1:  # one score: the positive class when it is > 0
        pos = xp.reshape(s, (-1,)) > 0
        two = labels.size == 2
        values = labels if two else np.array(["0", "1"] if labels.dtype == object else [0, 1], labels.dtype)
        label = labels_of(xp, values, pos.astype(np.int64))
        if not two:
            return label, apply_transform(xp, s, post) if post == "PROBIT" else s
        return label, binary_scores(xp, xp.reshape(s, (-1,)), post, 1)
    if labels.size < C:
        raise NodeError(f"LinearClassifier: {C} classes but {labels.size} class labels")
    return labels_of(xp, labels, xp.argmax(s, axis=1)), apply_transform(xp, s, post)


@op("LinearRegressor", domain=ML, since=1)
def LinearRegressor(xp, X, *, coefficients=None, intercepts=None, post_transform="NONE", targets=1):
    """[N, F] -> [N, targets]: ``X @ coefficients.T + intercepts`` (intercepts used only when there
    is one per target, as onnxruntime)."""
    post = transform_name("LinearRegressor", post_transform)
    W = coefficient_matrix(coefficients if coefficients is not None else [], int(targets), "LinearRegressor",
                           "coefficients")
    x = _floats(xp, X, "LinearRegressor")
    _check_features(x, W.shape[1], "LinearRegressor")
    y = xp.matmul(x, xp.asarray(W.T))
    inter = np.asarray(intercepts or [], np.float32)
    if inter.size == targets:
        y = y + xp.asarray(inter)
    if post == "NONE" or (targets == 1 and post != "PROBIT"):
        return y
    return apply_transform(xp, y, post)


# -- SVMs ----------------------------------------------------------------------------------------


def _kernel(xp, x, sv, kernel_type: str, params):
    """[N, F] x [V, F] -> [N, V]: the kernel of every row against every support vector."""
    gamma, coef0, degree = (list(params or []) + [0.0, 0.0, 0.0])[:3]
    svd = xp.asarray(sv)
    if kernel_type == "RBF":  # |x - sv|^2 expanded, in float64 so that the expansion costs no accuracy
        x64, sv64 = x.astype(np.float64), sv.astype(np.float64)
        d = (xp.sum(x64 * x64, axis=1, keepdims=True) - 2.0 * xp.matmul(x64, xp.asarray(sv64.T))
             + xp.asarray(np.sum(sv64 * sv64, axis=1)))
        return xp.exp(-float(np.float32(gamma)) * xp.maximum(d, 0.0)).astype(np.float32)
    k = xp.matmul(x, svd.T)
    if kernel_type == "LINEAR":
        return k
    k = np.float32(gamma) * k + np.float32(coef0)
    if kernel_type == "POLY":
        return k ** np.float32(degree)
    if kernel_type == "SIGMOID":
        return xp.tanh(k)
    raise NodeError(f"SVM kernel_type must be LINEAR, POLY, RBF or SIGMOID, got {kernel_type!r}")


def _coupling(xp, r, C: int):
    """Wu-Lin-Weng pairwise coupling of [N, C, C] pairwise probabilities -> [N, C], in float32, every
    row iterated until its own error is below 0.005 / C (at most 100 rounds), as libsvm does."""
    N = int(r.shape[0])
    f = np.float32
    Q = xp.zeros((N, C, C), dtype=f)
    rT2 = xp.transpose(r, (0, 2, 1)) ** 2  # rT2[n, i, j] = r[n, j, i]^2
    eye = xp.asarray(np.eye(C, dtype=bool))
    diag = xp.sum(xp.where(eye, 0.0, rT2), axis=2).astype(f)
    Q = xp.where(eye, diag[:, :, None], -xp.transpose(r, (0, 2, 1)) * r).astype(f)
    p = xp.full((N, C), f(1.0 / C), dtype=f)
    eps = f(0.005 / C)
    for _ in range(100):
        Qp = xp.sum(Q * p[:, None, :], axis=2)
        pQp = xp.sum(p * Qp, axis=1)
        active = xp.max(xp.abs(Qp - pQp[:, None]), axis=1) >= eps
        if isinstance(active, np.ndarray) and not active.any():  # every row has converged (read on the host only)
            break
        for i in range(C):
            Qii = Q[:, i, i]
            diff = (-Qp[:, i] + pQp) / Qii
            diff = xp.where(active, diff, 0.0).astype(f)
            p = xp.concat([p[:, :i], (p[:, i] + diff)[:, None], p[:, i + 1:]], axis=1)
            pQp = (pQp + diff * (diff * Qii + 2 * Qp[:, i])) / (1 + diff) / (1 + diff)
            Qp = (Qp + diff[:, None] * Q[:, i, :]) / (1 + diff)[:, None]
            p = p / (1 + diff)[:, None]
    return p


@op("SVMClassifier", domain=ML, since=1)
def SVMClassifier(xp, X, *, classlabels_ints=None, classlabels_strings=None, coefficients=None, kernel_params=None,
                  kernel_type="LINEAR", post_transform="NONE", prob_a=None, prob_b=None, rho=None,
                  support_vectors=None, vectors_per_class=None):
    """[N, F] -> (labels [N], scores): libsvm's one-against-one SVC, or a linear SVM."""
    post = transform_name("SVMClassifier", post_transform)
    labels, _ = class_labels("SVMClassifier", classlabels_strings, classlabels_ints)
    C = int(labels.size)
    coef = np.asarray(coefficients or [], np.float32)
    rho = np.asarray(rho or [], np.float32)
    prob_a, prob_b = np.asarray(prob_a or [], np.float32), np.asarray(prob_b or [], np.float32)
    if coef.size == 0 or rho.size == 0 or prob_a.size != prob_b.size:
        raise NodeError("SVMClassifier: coefficients and rho are required; prob_a and prob_b go together")
    x = _floats(xp, X, "SVMClassifier")
    per_class = [int(v) for v in vectors_per_class or []]
    if any(v < 0 for v in per_class):
        raise NodeError(f"SVMClassifier: vectors_per_class must not be negative, got {per_class}")
    V = sum(per_class)
    all_positive = bool((coef >= 0).all())
    if V == 0:  # linear SVM: one row of coefficients per class
        W = coefficient_matrix(coef, C, "SVMClassifier", "coefficients")
        _check_features(x, W.shape[1], "SVMClassifier")
        s = xp.matmul(x, xp.asarray(W.T)) + rho[0]
        top = xp.argmax(s, axis=1)
        if C == 2 and prob_a.size == 0:
            best = xp.max(s, axis=1)
            win = best >= 0.5 if all_positive else best > 0
            top = xp.where(win, 1, top)
        return labels_of(xp, labels, top), apply_transform(xp, s, post)
    if len(per_class) != C:
        raise NodeError(f"SVMClassifier: vectors_per_class has {len(per_class)} entries for {C} class labels")
    sv = coefficient_matrix(support_vectors or [], V, "SVMClassifier", "support_vectors")
    _check_features(x, sv.shape[1], "SVMClassifier")
    pairs = [(i, j) for i in range(C) for j in range(i + 1, C)]
    if coef.size < (C - 1) * V or rho.size < len(pairs) or (prob_a.size and prob_a.size < len(pairs)):
        raise NodeError("SVMClassifier: coefficients, rho or prob_a/prob_b are too short for the classes")
    coef = coef[:(C - 1) * V].reshape(C - 1, V)
    start = np.concatenate([[0], np.cumsum(per_class)]).astype(np.int64)
    A = np.zeros((V, len(pairs)), np.float32)  # the one-against-one decision functions as one matrix
    for p, (i, j) in enumerate(pairs):
        A[start[i]:start[i + 1], p] = coef[j - 1, start[i]:start[i + 1]]
        A[start[j]:start[j + 1], p] = coef[i, start[j]:start[j + 1]]
    K = _kernel(xp, x, sv, kernel_type, kernel_params)
    s = (xp.matmul(K, xp.asarray(A)) + xp.asarray(rho[:len(pairs)])).astype(np.float32)  # [N, pairs]
    votes = xp.zeros((int(x.shape[0]), C), dtype=np.int64)
    for p, (i, j) in enumerate(pairs):
        pos = (s[:, p] > 0).astype(np.int64)
        votes = votes + xp.asarray(np.eye(C, dtype=np.int64)[i]) * pos[:, None] \
            + xp.asarray(np.eye(C, dtype=np.int64)[j]) * (1 - pos)[:, None]
    label = labels_of(xp, labels, xp.argmax(votes, axis=1))
    if prob_a.size:
        val = 1.0 - _logistic32(xp, s * xp.asarray(prob_a[:len(pairs)]) + xp.asarray(prob_b[:len(pairs)]))
        val = xp.minimum(xp.maximum(val, np.float32(1e-7)), np.float32(1 - 1e-7)).astype(np.float32)
        r = xp.zeros((int(x.shape[0]), C, C), dtype=np.float32)
        for p, (i, j) in enumerate(pairs):
            hot_ij = xp.asarray(_onehot2(C, i, j))
            hot_ji = xp.asarray(_onehot2(C, j, i))
            r = r + hot_ij * val[:, p, None, None] + hot_ji * (1 - val[:, p])[:, None, None]
        return label, apply_transform(xp, _coupling(xp, r, C), post)
    if C > 2:
        return label, apply_transform(xp, s, post)
    return label, binary_scores(xp, s[:, 0], post, 2 if post == "NONE" else 0)


def _onehot2(C, i, j):
    m = np.zeros((C, C), np.float32)
    m[i, j] = 1
    return m


def _logistic32(xp, v):
    p = 1.0 / (1.0 + xp.exp(-xp.abs(v)))
    return xp.where(v < 0, 1.0 - p, p).astype(np.float32)


@op("SVMRegressor", domain=ML, since=1)
def SVMRegressor(xp, X, *, coefficients=None, kernel_params=None, kernel_type="LINEAR", n_supports=0, one_class=0,
                 post_transform="NONE", rho=None, support_vectors=None):
    """[N, F] -> [N, 1]: ``K(x, support_vectors) @ coefficients + rho[0]`` (or the linear form),
    +-1 for a one-class SVM. onnxruntime applies no post_transform here, nor does gpuops."""
    transform_name("SVMRegressor", post_transform)
    coef = np.asarray(coefficients or [], np.float32)
    rho = np.asarray(rho or [], np.float32)
    if coef.size == 0 or rho.size == 0:
        raise NodeError("SVMRegressor: coefficients and rho are required")
    x = _floats(xp, X, "SVMRegressor")
    if n_supports > 0:
        sv = coefficient_matrix(support_vectors or [], int(n_supports), "SVMRegressor", "support_vectors")
        _check_features(x, sv.shape[1], "SVMRegressor")
        if coef.size < n_supports:
            raise NodeError(f"SVMRegressor: {coef.size} coefficients for {n_supports} support vectors")
        K = _kernel(xp, x, sv, kernel_type, kernel_params)
        y = xp.matmul(K, xp.asarray(coef[:n_supports].reshape(-1, 1))) + rho[0]
    else:
        _check_features(x, coef.size, "SVMRegressor")
        y = xp.matmul(x, xp.asarray(coef.reshape(-1, 1))) + rho[0]
    y = y.astype(np.float32)
    if one_class:
        y = xp.where(y > 0, np.float32(1), np.float32(-1))
    return y
