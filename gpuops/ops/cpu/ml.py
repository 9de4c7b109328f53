"""Classic ML ops on the CPU.

Tree ensembles: the traversal is a native kernel (``cpu_kernels/tree_ensemble.c``), a block of rows
walking one tree after another, which also sums the leaves' weights as it goes where that is all the
op needs (SUM and AVERAGE, the classifiers); otherwise the leaves are aggregated as in the generic op
(:mod:`gpuops.ops.ml.trees`). A forest with BRANCH_MEMBER nodes, non-NumPy inputs, or native kernels
off take the generic traversal.

These ops run on small batches as often as on large ones, where what a call costs besides its
arithmetic is most of its time: each node is prepared once per session (its ``prepare`` hook holds
the converted attributes, so the op is called with ``prepared=`` alone: see
:func:`gpuops.executor.run.call_keywords`), and a call on NumPy arrays does its arithmetic in as few
NumPy passes as the generic op's results allow (the same operations in the same order). Anything else
goes to the generic op. LinearClassifier (scores, labels and SOFTMAX, over a few rows) and Normalizer
are one call each of ``cpu_kernels/linear_ml.c``.
"""

from __future__ import annotations

import ctypes

import math

import numpy as np

from ... import native
from ...errors import NodeError
from ...registry import op
from ..ml import legacy_trees, linear, preprocess, trees
from ..ml._common import ML, apply_transform, class_labels, labels_of, pick, transform_name
from . import planned

_SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_addressof, _from_buffer = ctypes.addressof, ctypes.c_char.from_buffer  # (native.address, without its call)
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)


def holds_attributes(prepare):
    """Mark ``prepare`` as a hook whose result holds every attribute the op reads: the executor then
    calls the op with ``prepared=`` alone (binding a tree ensemble's two dozen keywords costs
    microseconds a call)."""
    prepare.holds_attributes = True
    return prepare


# -- tree ensembles ------------------------------------------------------------------------------


def _operands(forest: trees.Forest, X, kernel: str):
    """(native function, its arguments before the output's, rows, trees, the rows' array) for
    ``kernel`` on ``X``; None where the generic traversal must run. The forest's operands (converted to
    the comparison type) and their addresses are made once per forest and kernel."""
    if type(X) is not np.ndarray or forest.members is not None:
        return None
    cdt = _F64 if X.dtype == _F64 or forest.threshold.dtype == _F64 else _F32
    fn = native.function(f"{kernel}_{_SUFFIX[cdt]}")
    if fn is None:
        return None
    k = forest.__dict__.get("_native")
    if k is None:
        k = forest.__dict__.setdefault("_native", {})
    made = k.get(cdt.num)
    if made is None:  # the arrays are kept beside their addresses
        thr, missing = np.ascontiguousarray(forest.threshold, dtype=cdt), forest.missing.astype(np.uint8)
        made = k[cdt.num] = (thr, missing, (
            native.ptr(forest.feature, np.int32), native.ptr(thr, cdt), native.ptr(forest.mode, np.int8),
            native.ptr(forest.children, np.int32), native.ptr(missing, np.uint8), native.ptr(forest.roots, np.int32),
            native.ptr(forest.tree_depth, np.int32), native.ptr(forest.leaf_slot, np.int32)),
            (int(forest.roots.size), forest.modes_present[0] if len(forest.modes_present) == 1 else -1,
             int(forest.missing.any())))
    _, _, pointers, (T, same_mode, tracks) = made
    x = X if X.dtype == cdt and X.flags.c_contiguous else np.ascontiguousarray(X, dtype=cdt)
    N, F = int(x.shape[0]), int(x.shape[1])
    return fn, (native.ptr(x, cdt), *pointers, N, F, T, same_mode, tracks), N, T, x


def leaves(xp, forest: trees.Forest, X):
    """[N, F] -> [N, trees] leaf slots, by the native kernel where it applies."""
    got = _operands(forest, X, "tree_leaves")
    if got is None:
        return trees.leaves(xp, forest, X)
    fn, args, N, T, x = got
    out = np.empty((N, T), dtype=np.int32)
    if N * T:
        native.call(fn, *args, native.address(out))
    return out


def fused_sum(xp, forest: trees.Forest, X):
    """[N, F] -> [N, targets] float64: the reached leaves' weights summed during the walk; None where
    the native kernel does not apply."""
    got = _operands(forest, X, "tree_sum")
    if got is None:
        return None
    fn, args, N, T, x = got
    weights = forest.__dict__.get("_weights64")
    if weights is None:
        weights = forest.__dict__["_weights64"] = np.ascontiguousarray(forest.weights, dtype=np.float64)
    y = np.empty((N, forest.n_targets), dtype=np.float64)
    if y.size:
        native.call(fn, *args, native.ptr(weights, np.float64), forest.n_targets, native.address(y))
    return y


leaves.fused_sum = fused_sum


class TreeArgs(ctypes.Structure):
    """``struct tree_args`` of ``cpu_kernels/tree_ensemble.c``: a forest's operands, set once per forest
    and comparison type (a call on a few rows then converts five arguments, not eighteen)."""

    _fields_ = [(name, ctypes.c_void_p) for name in ("feature", "children", "roots", "tree_depth", "leaf_slot",
                                                     "threshold", "mode", "missing")] + [
        (name, ctypes.c_int64) for name in ("n_trees", "same_mode", "tracks_missing", "n_targets")] + [
        ("weights", ctypes.c_void_p)]


def _tree_args(forest: trees.Forest, cdt: np.dtype):
    """(the address of the forest's :class:`TreeArgs` for comparisons in ``cdt``, the struct and the
    arrays it points to), made once per forest and type."""
    kept = forest.__dict__.setdefault("_tree_args", {})
    got = kept.get(cdt.num)
    if got is None:
        thr = np.ascontiguousarray(forest.threshold, dtype=cdt)
        missing = forest.missing.astype(np.uint8)
        weights = np.ascontiguousarray(forest.weights, dtype=np.float64)
        holds = (forest.feature, forest.children, forest.roots, forest.tree_depth, forest.leaf_slot, thr,
                 forest.mode, missing, weights)
        args = TreeArgs(*(a.ctypes.data for a in holds[:8]), int(forest.roots.size),
                        forest.modes_present[0] if len(forest.modes_present) == 1 else -1,
                        int(forest.missing.any()), forest.n_targets, weights.ctypes.data)
        got = kept[cdt.num] = (ctypes.addressof(args), args, holds)
    return got


def _float32_thresholds(forest: trees.Forest) -> bool:
    """Whether the forest's float64 thresholds are all float32 values (a FLOATS attribute's are): a
    float32 row then compares with them in float32 exactly as in float64."""
    exact = forest.__dict__.get("_float32_thresholds")
    if exact is None:
        t = forest.threshold
        exact = forest.__dict__["_float32_thresholds"] = bool((t.astype(np.float32).astype(np.float64) == t).all())
    return exact


def _summing(forest: trees.Forest, dtype: np.dtype):
    """(the planned kernel, the address of the forest's :class:`TreeArgs`, the comparison type, the row
    of "has a score" every row shares [1, targets]) for rows of ``dtype``, made once per forest and
    type; None where the generic op must run."""
    kept = forest.__dict__.get("_summing")
    if kept is None:
        kept = forest.__dict__["_summing"] = {}
    if dtype in kept:
        return kept[dtype]
    got = None
    if (dtype == _F32 or dtype == _F64) and forest.uniform and forest.members is None:
        cdt = _F64 if dtype == _F64 or (forest.threshold.dtype == _F64 and not _float32_thresholds(forest)) else _F32
        fn = native.function("tree_sum_planned_f64" if cdt is _F64 else "tree_sum_planned_f32")
        if fn is not None:
            C = forest.n_targets
            row = forest.has[:1] if forest.has.shape[0] and forest.roots.size else np.zeros((1, C), dtype=bool)
            got = (fn, _tree_args(forest, cdt)[0], cdt, np.ascontiguousarray(row))
    kept[dtype] = got
    return got


def _summed(forest: trees.Forest, X):
    """(the reached leaves' weights summed per row and target [N, targets] float64, the row of "has a
    score" every row shares [1, targets]) by the native kernel, for a NumPy ``X`` of rows of floats that
    has the features the trees test; None where the generic op must run (it also gives its errors)."""
    if type(X) is not np.ndarray or X.ndim != 2 or int(X.shape[1]) < forest.n_features or not native.enabled():
        return None
    got = _summing(forest, X.dtype)
    if got is None:
        return None
    fn, args, cdt, row = got
    x = X if X.dtype == cdt and X.flags.c_contiguous else np.ascontiguousarray(X, dtype=cdt)
    N = x.shape[0]
    y = np.empty((N, row.shape[1]), dtype=np.float64)
    if not y.size:
        return y, row
    if fn(args, _addressof(_from_buffer(x)) if x.flags.writeable and x.size else x.ctypes.data, N, x.shape[1],
          _addressof(_from_buffer(y))):
        raise MemoryError(f"native kernel {fn.__name__} could not allocate its scratch")
    return y, row


class _Prepared:
    """A node prepared once per session: the generic op's prepared value and the node's attributes
    (what the generic op is called with), and what the CPU op derives from them."""

    __slots__ = ("generic", "attrs", "fast")

    def __init__(self, generic, attrs: dict, fast=None):
        self.generic, self.attrs, self.fast = generic, attrs, fast

    def fallback(self, fn, xp, *args):
        return fn(xp, *args, prepared=self.generic, **self.attrs)


def _attrs_of(attrs: dict) -> dict:
    return {k: v for k, v in attrs.items() if k != "prepared"}


@holds_attributes
def _prepare_regressor(constants, attrs):
    forest = legacy_trees.prepare_regressor(constants, attrs)
    base = pick("", a=attrs.get("base_values"), b=attrs.get("base_values_as_tensor"))
    base = None if base is None else base.astype(np.float32)  # (as the generic op reads it, once)
    agg, post = attrs.get("aggregate_function", "SUM"), attrs.get("post_transform", "NONE")
    # one target summed and no transform (PROBIT is the one a single target takes): the sums in float32
    # plus the one base value, as legacy_trees.regressed computes them
    plain = forest.n_targets == 1 and agg == "SUM" and post != "PROBIT"
    one = base[0] if base is not None and base.size == 1 else None  # (a NumPy scalar: added faster than an array)
    return _Prepared(forest, _attrs_of(attrs), (base, agg, post, plain, one))


@holds_attributes
def _prepare_classifier(constants, attrs):
    forest = legacy_trees.prepare_classifier(constants, attrs)
    base = pick("", a=attrs.get("base_values"), b=attrs.get("base_values_as_tensor"))
    return _Prepared(forest, _attrs_of(attrs), (base, attrs.get("post_transform", "NONE")))


@holds_attributes
def _prepare_v5(constants, attrs):
    return _Prepared(trees.prepare_v5(constants, attrs), _attrs_of(attrs),
                     (attrs.get("aggregate_function", 1), attrs.get("post_transform", 0)))


def _tree_regressor(since):
    generic = legacy_trees.tree_regressor(since, walk=leaves)

    def TreeEnsembleRegressor(xp, X, *, aggregate_function="SUM", base_values=None, base_values_as_tensor=None,
                              n_targets=None, nodes_falsenodeids=None, nodes_featureids=None, nodes_hitrates=None,
                              nodes_hitrates_as_tensor=None, nodes_missing_value_tracks_true=None, nodes_modes=None,
                              nodes_nodeids=None, nodes_treeids=None, nodes_truenodeids=None, nodes_values=None,
                              nodes_values_as_tensor=None, post_transform="NONE", target_ids=None,
                              target_nodeids=None, target_treeids=None, target_weights=None,
                              target_weights_as_tensor=None, prepared=None):
        """:func:`gpuops.ops.ml.legacy_trees.tree_regressor`'s op, prepared once per session."""
        if type(prepared) is not _Prepared:
            attrs = {k: v for k, v in locals().items() if k not in ("xp", "X", "prepared")}
            return generic(xp, X, prepared=prepared, **attrs)
        forest = prepared.generic
        base, agg, post, plain, one = prepared.fast
        got = _summed(forest, X) if agg in ("SUM", "AVERAGE") else None
        if got is None:
            return prepared.fallback(generic, xp, X)
        y, hit = got
        if plain:
            y = y.astype(np.float32)
            if one is not None:
                y += one
            return y
        return legacy_trees.regressed(np, forest, y, hit, base, agg, post).astype(np.float32, copy=False)

    return TreeEnsembleRegressor


def _tree_classifier(since):
    generic = legacy_trees.tree_classifier(since, walk=leaves)

    def TreeEnsembleClassifier(xp, X, *, base_values=None, base_values_as_tensor=None, class_ids=None,
                               class_nodeids=None, class_treeids=None, class_weights=None,
                               class_weights_as_tensor=None, classlabels_int64s=None, classlabels_strings=None,
                               nodes_falsenodeids=None, nodes_featureids=None, nodes_hitrates=None,
                               nodes_hitrates_as_tensor=None, nodes_missing_value_tracks_true=None,
                               nodes_modes=None, nodes_nodeids=None, nodes_treeids=None, nodes_truenodeids=None,
                               nodes_values=None, nodes_values_as_tensor=None, post_transform="NONE",
                               prepared=None):
        """:func:`gpuops.ops.ml.legacy_trees.tree_classifier`'s op, prepared once per session."""
        if type(prepared) is not _Prepared:
            attrs = {k: v for k, v in locals().items() if k not in ("xp", "X", "prepared")}
            return generic(xp, X, prepared=prepared, **attrs)
        forest = prepared.generic
        got = _summed(forest, X)
        if got is None:
            return prepared.fallback(generic, xp, X)
        s, row = got
        base, post = prepared.fast
        hit = np.empty(s.shape, dtype=bool)
        hit[...] = row
        label, scores, literal = legacy_trees.classified(np, forest, s, hit, base, post)
        if literal and forest.labels.dtype != object:
            return label.astype(np.int64), scores.astype(np.float32, copy=False)
        return labels_of(np, forest.labels, label), scores.astype(np.float32, copy=False)

    return TreeEnsembleClassifier


_generic_v5 = trees.tree_ensemble_v5(walk=leaves)


@op("TreeEnsemble", domain=ML, since=5, device="cpu", prepare=_prepare_v5)
def TreeEnsemble(xp, X, *, nodes_featureids=None, nodes_modes=None, nodes_splits=None, nodes_truenodeids=None,
                 nodes_falsenodeids=None, nodes_trueleafs=None, nodes_falseleafs=None, leaf_targetids=None,
                 leaf_weights=None, tree_roots=None, n_targets=None, aggregate_function=1, post_transform=0,
                 nodes_hitrates=None, nodes_missing_value_tracks_true=None, membership_values=None, prepared=None):
    """:func:`gpuops.ops.ml.trees.tree_ensemble_v5`'s op, prepared once per session."""
    if type(prepared) is not _Prepared:
        attrs = {k: v for k, v in locals().items() if k not in ("xp", "X", "prepared")}
        return _generic_v5(xp, X, prepared=prepared, **attrs)
    forest = prepared.generic
    agg, post = prepared.fast
    got = _summed(forest, X) if agg in (0, 1) else None
    if got is None:
        return prepared.fallback(_generic_v5, xp, X)
    return trees.v5_result(np, forest, got[0], X.dtype, agg, post)


for _v in (1, 3):
    op("TreeEnsembleClassifier", domain=ML, since=_v, device="cpu", prepare=_prepare_classifier)(_tree_classifier(_v))
    op("TreeEnsembleRegressor", domain=ML, since=_v, device="cpu", prepare=_prepare_regressor)(_tree_regressor(_v))


# -- linear models and preprocessing -------------------------------------------------------------


def _rows32(X):
    """A NumPy ``X`` of float32 rows ([N, F], or one row [F]) as [N, F]; None for anything else."""
    if type(X) is not np.ndarray or X.dtype != _F32:
        return None
    if X.ndim == 2:
        return X
    return X.reshape(1, -1) if X.ndim == 1 else None


def _softmax_rows(s):
    """:func:`gpuops.ops.ml._common.softmax` of a float32 [N, C] array made here, computed in it."""
    np.subtract(s, np.maximum.reduce(s, axis=1, keepdims=True), out=s)  # (ndarray.max and .sum, without
    np.exp(s, out=s)  # their Python wrappers)
    s /= np.add.reduce(s, axis=1, keepdims=True)
    return s


@holds_attributes
def _prepare_linear_classifier(constants, attrs):
    post = transform_name("LinearClassifier", attrs.get("post_transform", "NONE"))
    labels, _ = class_labels("LinearClassifier", attrs.get("classlabels_strings"), attrs.get("classlabels_ints"))
    inter = np.asarray(attrs.get("intercepts") or [], np.float32)
    C = inter.size if inter.size else labels.size
    W = linear.coefficient_matrix(attrs.get("coefficients"), C, "LinearClassifier", "coefficients")
    fast = None
    if C > 1 and labels.size >= C:  # (one score per class: the binary forms go to the generic op)
        same = labels.dtype == np.intp == np.int64 and np.array_equal(labels[:C], np.arange(C))  # labels: indices
        W = np.ascontiguousarray(W)
        fast = (W, inter if inter.size else None, None if same else labels, post, W.ctypes.data,
                inter.ctypes.data if inter.size else None)
    return _Prepared(None, _attrs_of(attrs), fast)


_NATIVE_MACS = 1 << 15
"""rows x features x classes up to which a LinearClassifier's scores are the native kernel's (its plain
loop over the few rows of a typical call); beyond, BLAS's product."""


def _address(a: np.ndarray) -> int:
    """The data address of a non-empty C-contiguous array, read-only (a feed) or not."""
    return native.address(a) if a.flags.writeable else a.ctypes.data


@op("LinearClassifier", domain=ML, since=1, device="cpu", prepare=_prepare_linear_classifier)
def LinearClassifier(xp, X, *, coefficients=None, classlabels_ints=None, classlabels_strings=None, intercepts=None,
                     multi_class=0, post_transform="NONE", prepared=None):
    """:func:`gpuops.ops.ml.linear.LinearClassifier`, prepared once per session."""
    if type(prepared) is not _Prepared:
        return linear.LinearClassifier(xp, X, coefficients=coefficients, classlabels_ints=classlabels_ints,
                                       classlabels_strings=classlabels_strings, intercepts=intercepts,
                                       multi_class=multi_class, post_transform=post_transform)
    x = _rows32(X)
    if x is None or prepared.fast is None or x.shape[1] != prepared.fast[0].shape[1]:
        return linear.LinearClassifier(xp, X, **prepared.attrs)
    W, inter, labels, post, w_at, b_at = prepared.fast
    N, F, C = x.shape[0], x.shape[1], W.shape[0]
    fn = native.function("linear_classifier_f32") if (post == "SOFTMAX" or post == "NONE") \
        and 0 < N * F <= _NATIVE_MACS // C else None
    if fn is not None:  # scores, labels and softmax in one call
        x = x if x.flags.c_contiguous else np.ascontiguousarray(x)
        s, best = np.empty((N, C), dtype=np.float32), np.empty(N, dtype=np.int64)
        fn(_address(x), w_at, b_at, native.address(s), native.address(best), N, F, C, post == "SOFTMAX")
        return (best if labels is None else labels[best] if labels.dtype == object else labels.take(best)), s
    s = np.matmul(x, W.T)  # (the generic op's product: the same BLAS call)
    if inter is not None:
        s += inter
    best = s.argmax(axis=1)
    label = best if labels is None else labels[best] if labels.dtype == object else labels.take(best)
    if post == "SOFTMAX":
        return label, _softmax_rows(s)
    return label, apply_transform(np, s, post)


@holds_attributes
def _prepare_scaler(constants, attrs):
    return _Prepared(None, _attrs_of(attrs), {})


@op("Scaler", domain=ML, since=1, device="cpu", prepare=_prepare_scaler)
def Scaler(xp, X, *, offset=None, scale=None, prepared=None):
    """:func:`gpuops.ops.ml.preprocess.Scaler`, its per-column values converted once per width."""
    if type(prepared) is not _Prepared:
        return preprocess.Scaler(xp, X, offset=offset, scale=scale)
    if type(X) is not np.ndarray or X.dtype != _F32 or not X.ndim:
        return preprocess.Scaler(xp, X, **prepared.attrs)
    n = X.shape[-1]
    got = prepared.fast.get(n)
    if got is None:  # (one entry per width the node meets; a wrong width raises in the generic op)
        a = prepared.attrs
        off = preprocess.per_column(a.get("offset") if a.get("offset") is not None else [0.0], n, "Scaler",
                                     "offset").astype(np.float32)
        sc = preprocess.per_column(a.get("scale") if a.get("scale") is not None else [1.0], n, "Scaler",
                                    "scale").astype(np.float32)
        got = prepared.fast[n] = (off, sc)
    off, sc = got
    y = np.subtract(X, off)
    y *= sc
    return y


_NORMS = {"MAX": 0, "L1": 1, "L2": 2}


@op("Normalizer", domain=ML, since=1, device="cpu")
def Normalizer(xp, X, *, norm="MAX"):
    """:func:`gpuops.ops.ml.preprocess.Normalizer` on float32 rows: one native call
    (``cpu_kernels/linear_ml.c``: the norms summed in order, within a row's length in ulp of NumPy's
    pairwise sums), else three NumPy passes (a row whose norm is 0 divided by 1: unchanged, as the
    generic op leaves it)."""
    x = _rows32(X)
    if x is None:
        return preprocess.Normalizer(xp, X, norm=norm)
    code = _NORMS.get(norm)
    if code is None:
        raise NodeError(f"Normalizer: norm must be MAX, L1 or L2, got {norm!r}")
    fn = native.function("normalize_rows_f32") if x.size else None
    if fn is not None:  # one pass a row
        x = x if x.flags.c_contiguous else np.ascontiguousarray(x)
        y = np.empty(X.shape, dtype=np.float32)
        fn(_address(x), native.address(y), x.shape[0], x.shape[1], code)
        return y
    if norm == "L1":
        z = np.abs(x).sum(axis=1, keepdims=True)
    elif norm == "L2":
        z = np.sqrt(np.square(x).sum(axis=1, keepdims=True))
    elif norm == "MAX":
        z = x.max(axis=1, keepdims=True)
    else:
        raise NodeError(f"Normalizer: norm must be MAX, L1 or L2, got {norm!r}")
    z[z == 0] = 1
    return np.divide(x, z).reshape(X.shape)


# -- native programs (gpuops.onnx.programs): the linear kernels above ----------------------------------------


@planned.planned("LinearClassifier", ML)
def _linear_classifier_step(step, operands):
    """Labels that are the class indices, scores as they are or by softmax: the native kernel's call."""
    prepared, X = step.prepared, operands[0]
    fn = planned.kernel("linear_classifier_planned_f32")
    if fn is None or type(prepared) is not _Prepared or prepared.fast is None or not planned.is_f32(X) \
            or X.ndim not in (1, 2) or len(step.outputs) != 2:
        return None
    W, inter, labels, post, w_at, b_at = prepared.fast
    N, F = (1, X.shape[0]) if X.ndim == 1 else X.shape
    C = W.shape[0]
    if labels is not None or post not in ("SOFTMAX", "NONE") or F != W.shape[1] or not 0 < N * F <= _NATIVE_MACS // C:
        return None
    p = planned.params(w_at, b_at or 0, N, F, C, int(post == "SOFTMAX"))
    call = planned.Call(fn, p, 0, z=1 if step.outputs[1] else None, wide=True)
    return planned.NativeStep((N,), (call,), holds=(p, prepared), dtype=np.dtype(np.int64),
                              extra=((1, (N, C)),) if step.outputs[1] else ())


@planned.planned("Normalizer", ML)
def _normalizer_step(step, operands):
    X = operands[0]
    fn = planned.kernel("normalize_rows_planned_f32")
    code = _NORMS.get(step.attrs.get("norm", "MAX"))
    if fn is None or code is None or not planned.is_f32(X) or X.ndim not in (1, 2) or not math.prod(X.shape):
        return None
    N, F = (1, X.shape[0]) if X.ndim == 1 else X.shape
    p = planned.params(N, F, code)
    return planned.NativeStep(tuple(X.shape), (planned.Call(fn, p, 0),), holds=p)
