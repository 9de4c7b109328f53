"""The legacy tree ensembles the converters write: TreeEnsembleClassifier and TreeEnsembleRegressor
(1 and 3), on the traversal of :mod:`.trees`.

They follow onnxruntime (1.32) where the spec is silent (``tree_ensemble_aggregator.h``): a tree's
root is its first node in attribute order; base_values are added only when there is one per target
(or one in all, for a single target), and a target or class that no reached leaf scores is written
as 0; a single-target regressor applies PROBIT alone of the transforms; a binary classifier whose
weights name one class derives the other class's score (``[1 - p, p]`` when every weight is >= 0,
else ``[-s, s]``; LOGISTIC: ``[logistic(-s), logistic(s)]``) and picks the label by ``p > 0.5`` or
``s > 0``.
"""

from __future__ import annotations

import numpy as np

from ...errors import NodeError
from ...registry import op
from ._common import ML, apply_transform, binary_scores, class_labels, labels_of, pick, rows_2d, transform_name
from .trees import LEAF, MODES, Forest, build_forest, leaves, scores


# -- TreeEnsembleClassifier / TreeEnsembleRegressor (1, 3) ----------------------------------------


def forest_legacy(op_type, *, nodes_treeids, nodes_nodeids, nodes_featureids, nodes_modes, nodes_values,
                  nodes_truenodeids, nodes_falsenodeids, nodes_missing_value_tracks_true, target_treeids,
                  target_nodeids, target_ids, target_weights, n_targets, combine="sum") -> Forest:
    """The legacy attributes (nodes named by (tree id, node id)) as a :class:`Forest`."""
    n = len(nodes_treeids)
    if not n:
        raise NodeError(f"{op_type}: the ensemble has no nodes")
    cols = {"nodes_nodeids": nodes_nodeids, "nodes_featureids": nodes_featureids, "nodes_modes": nodes_modes,
            "nodes_values": nodes_values, "nodes_truenodeids": nodes_truenodeids,
            "nodes_falsenodeids": nodes_falsenodeids}
    bad = [k for k, v in cols.items() if v is None or len(v) != n]
    if bad:
        raise NodeError(f"{op_type}: {bad} must have one entry per node ({n})")
    if not len(target_ids) == len(target_nodeids) == len(target_treeids) == len(target_weights):
        raise NodeError(f"{op_type}: the class/target ids, node ids, tree ids and weights differ in length")
    try:
        modes = np.array([MODES[m] for m in nodes_modes], dtype=np.int64)
    except KeyError as e:
        raise NodeError(f"{op_type}: unknown node mode {e.args[0]!r}") from None
    tree = np.asarray(nodes_treeids, np.int64)
    key = tree * (1 << 32) + np.asarray(nodes_nodeids, np.int64)
    order = np.argsort(key, kind="stable")
    sorted_keys = key[order]
    if n > 1 and (np.diff(sorted_keys) == 0).any():
        raise NodeError(f"{op_type}: a (tree id, node id) pair appears twice")

    def find(trees, nodes, what):
        k = np.asarray(trees, np.int64) * (1 << 32) + np.asarray(nodes, np.int64)
        pos = np.clip(np.searchsorted(sorted_keys, k), 0, n - 1)
        if k.size and (sorted_keys[pos] != k).any():
            raise NodeError(f"{op_type}: a {what} names a node that does not exist")
        return order[pos]

    branch = modes != LEAF
    true_ids, false_ids = np.zeros(n, np.int64), np.zeros(n, np.int64)
    true_ids[branch] = find(tree[branch], np.asarray(nodes_truenodeids)[branch], "true branch")
    false_ids[branch] = find(tree[branch], np.asarray(nodes_falsenodeids)[branch], "false branch")
    roots = np.flatnonzero(np.concatenate([[True], tree[1:] != tree[:-1]]))  # a tree starts where its id changes
    leaf_nodes = find(target_treeids, target_nodeids, "weight")
    values = np.asarray(nodes_values).reshape(-1)
    tdt = np.float64 if values.dtype == np.float64 else np.float32
    missing = np.zeros(n, bool)
    if nodes_missing_value_tracks_true:
        m = np.asarray(nodes_missing_value_tracks_true, np.int64)
        missing[:m.size] = m[:n] == 1
    return build_forest(np.asarray(nodes_featureids, np.int64), values.astype(tdt), modes, true_ids, false_ids, missing,
                   roots, target_ids, leaf_nodes, np.asarray(target_weights).reshape(-1), n_targets, combine)


def _legacy_forest(op_type, attrs, *, targets, combine="sum"):
    pre = "class" if op_type == "TreeEnsembleClassifier" else "target"
    weights = pick(op_type, a=attrs.get(f"{pre}_weights"), a_as_tensor=attrs.get(f"{pre}_weights_as_tensor"))
    values = pick(op_type, a=attrs.get("nodes_values"), a_as_tensor=attrs.get("nodes_values_as_tensor"))
    return forest_legacy(
        op_type, nodes_treeids=attrs.get("nodes_treeids") or [], nodes_nodeids=attrs.get("nodes_nodeids"),
        nodes_featureids=attrs.get("nodes_featureids"), nodes_modes=attrs.get("nodes_modes"), nodes_values=values,
        nodes_truenodeids=attrs.get("nodes_truenodeids"), nodes_falsenodeids=attrs.get("nodes_falsenodeids"),
        nodes_missing_value_tracks_true=attrs.get("nodes_missing_value_tracks_true"),
        target_treeids=attrs.get(f"{pre}_treeids") or [], target_nodeids=attrs.get(f"{pre}_nodeids") or [],
        target_ids=attrs.get(f"{pre}_ids") or [], target_weights=weights if weights is not None else [],
        n_targets=targets, combine=combine)


def prepare_classifier(constants, attrs):
    """The prepare hook of TreeEnsembleClassifier: its attributes as a :class:`Forest` (with the class
    labels and the binary case's flags), checked and built once per session."""
    labels, _ = class_labels("TreeEnsembleClassifier", attrs.get("classlabels_strings"),
                             attrs.get("classlabels_int64s"))
    if labels.size < 2:
        raise NodeError("TreeEnsembleClassifier: fewer than two class labels is not supported")
    transform_name("TreeEnsembleClassifier", attrs.get("post_transform", "NONE"))
    forest = _legacy_forest("TreeEnsembleClassifier", attrs, targets=int(labels.size))
    weights = pick("", a=attrs.get("class_weights"), b=attrs.get("class_weights_as_tensor"))
    ids = attrs.get("class_ids") or []
    forest.binary_case = labels.size == 2 and len(set(ids)) == 1
    forest.all_positive = bool(weights is None or (weights >= 0).all())
    forest.labels = labels
    return forest


def _classify(xp, forest, X, base_values, post_transform, walk):
    """onnxruntime's TreeAggregatorClassifier over all rows: (label indices, scores [N, C], whether
    the labels are the literal values 0 / 1 rather than indices)."""
    s, hit = scores(xp, forest, rows_2d(xp, X, "TreeEnsembleClassifier"), "sum", walk)
    return classified(xp, forest, s, hit, base_values, post_transform)


def classified(xp, forest, s, hit, base_values, post_transform):
    """:func:`_classify` from the summed scores ``s`` [N, C] and their "has a score" mask ``hit``."""
    s = s.astype(np.float32)
    C = forest.n_targets
    base = np.asarray([] if base_values is None else base_values, np.float32).reshape(-1)
    # onnxruntime writes a class no reached leaf scores (and no base value made) as 0
    if C > 2:
        if base.size:
            k = min(base.size, C)
            s = xp.concat([s[:, :k] + xp.asarray(base[:k]), s[:, k:]], axis=1)
            hit = xp.concat([xp.ones((int(s.shape[0]), k), dtype=bool), hit[:, k:]], axis=1)
        label = xp.argmax(xp.where(hit, s, -np.inf), axis=1)  # the first highest score among those there are
        return label, apply_transform(xp, xp.where(hit, s, np.float32(0)), post_transform), False
    s0, s1, has0, has1 = s[:, 0], s[:, 1], hit[:, 0], hit[:, 1]
    add = -1
    if base.size == 2:  # with a class-1 score, base_values[0] is unused (onnxruntime assumes both equal)
        p1 = xp.where(has1, base[1] + s0, s1 + base[1])
        p0 = xp.where(has1, -p1, s0 + base[0])
        two = xp.ones(s0.shape, dtype=bool)
    else:
        if base.size == 1:
            s0 = s0 + base[0]
        else:
            add = 3
        p0, p1, two = s0, s1, has1
    pos = xp.where(has1, p1, xp.where(has0, p0, 0.0))
    if forest.binary_case:
        label = xp.where(pos > 0.5 if forest.all_positive else pos > 0, 1, 0)
        add = 0 if forest.all_positive else 2  # (0 and 1, 2 and 3 write the same scores)
    else:  # onnxruntime labels 1 / 0 here, whatever the class labels
        label = xp.where(pos > 0, 1, 0)
    v0, v1 = xp.where(has0, p0, np.float32(0)), xp.where(has1, p1, np.float32(0))
    both = apply_transform(xp, xp.stack([v0, v1], axis=1), post_transform)
    one = binary_scores(xp, v0, post_transform, add)
    return label, xp.where(xp.reshape(two, (-1, 1)), both, one), not forest.binary_case


def tree_classifier(since, walk=leaves):
    """TreeEnsembleClassifier ``since`` as an op whose rows walk the trees by ``walk`` (the device's
    traversal: the generic :func:`.trees.leaves` or a native or CUDA one of the same signature)."""

    def TreeEnsembleClassifier(xp, X, *, base_values=None, base_values_as_tensor=None, class_ids=None,
                               class_nodeids=None, class_treeids=None, class_weights=None,
                               class_weights_as_tensor=None, classlabels_int64s=None, classlabels_strings=None,
                               nodes_falsenodeids=None, nodes_featureids=None, nodes_hitrates=None,
                               nodes_hitrates_as_tensor=None, nodes_missing_value_tracks_true=None,
                               nodes_modes=None, nodes_nodeids=None, nodes_treeids=None, nodes_truenodeids=None,
                               nodes_values=None, nodes_values_as_tensor=None, post_transform="NONE",
                               prepared=None):
        """[N, F] -> (labels [N], scores [N, classes]) as onnxruntime computes them."""
        attrs = {k: v for k, v in locals().items() if k not in ("xp", "X", "prepared")}
        forest = prepared if prepared is not None else prepare_classifier({}, attrs)
        base = pick("", a=base_values, b=base_values_as_tensor)
        label, scores, literal = _classify(xp, forest, X, base, post_transform, walk)
        if literal and forest.labels.dtype != object:
            return label.astype(np.int64), scores.astype(np.float32)
        return labels_of(xp, forest.labels, label), scores.astype(np.float32)

    return TreeEnsembleClassifier


def prepare_regressor(constants, attrs):
    """The prepare hook of TreeEnsembleRegressor: its attributes as a :class:`Forest`, checked and built
    once per session."""
    agg = attrs.get("aggregate_function", "SUM")
    if agg not in ("AVERAGE", "SUM", "MIN", "MAX"):
        raise NodeError(f"TreeEnsembleRegressor: aggregate_function must be AVERAGE, SUM, MIN or MAX, got {agg!r}")
    transform_name("TreeEnsembleRegressor", attrs.get("post_transform", "NONE"))
    n_targets = attrs.get("n_targets")
    if n_targets is None or n_targets < 1:
        raise NodeError(f"TreeEnsembleRegressor: n_targets must be >= 1, got {n_targets}")
    return _legacy_forest("TreeEnsembleRegressor", attrs, targets=int(n_targets),
                          combine={"MIN": "min", "MAX": "max"}.get(agg, "sum"))


def _regress(xp, forest, X, base_values, aggregate_function, post_transform, walk):
    """onnxruntime's TreeAggregator{Sum,Average,Min,Max} over all rows -> [N, targets] float32."""
    how = {"MIN": "min", "MAX": "max"}.get(aggregate_function, "sum")
    y, hit = scores(xp, forest, rows_2d(xp, X, "TreeEnsembleRegressor"), how, walk)
    return regressed(xp, forest, y, hit, base_values, aggregate_function, post_transform)


def regressed(xp, forest, y, hit, base_values, aggregate_function, post_transform):
    """:func:`_regress` from the aggregated leaf weights ``y`` [N, targets] and their "has a score"
    mask ``hit`` (or a row of it, [1, targets], that every row shares)."""
    y = y.astype(np.float32)
    C = forest.n_targets
    if aggregate_function == "AVERAGE":
        y = y / np.float32(max(int(forest.roots.size), 1))
    base = np.asarray([] if base_values is None else base_values, np.float32).reshape(-1)
    if C == 1:  # one target: base_values[0] when there is exactly one; of the transforms only PROBIT
        if base.size == 1:
            y = y + base[0]
        return apply_transform(xp, y, "PROBIT") if post_transform == "PROBIT" else y
    if base.size == C:  # onnxruntime 1.32: a target no reached leaf scores stays 0, base value or not
        y = xp.where(hit, y + xp.asarray(base), np.float32(0))
    return apply_transform(xp, y, post_transform)


def tree_regressor(since, walk=leaves):
    """TreeEnsembleRegressor ``since`` as an op whose rows walk the trees by ``walk`` (as
    :func:`tree_classifier`)."""

    def TreeEnsembleRegressor(xp, X, *, aggregate_function="SUM", base_values=None, base_values_as_tensor=None,
                              n_targets=None, nodes_falsenodeids=None, nodes_featureids=None, nodes_hitrates=None,
                              nodes_hitrates_as_tensor=None, nodes_missing_value_tracks_true=None, nodes_modes=None,
                              nodes_nodeids=None, nodes_treeids=None, nodes_truenodeids=None, nodes_values=None,
                              nodes_values_as_tensor=None, post_transform="NONE", target_ids=None,
                              target_nodeids=None, target_treeids=None, target_weights=None,
                              target_weights_as_tensor=None, prepared=None):
        """[N, F] -> [N, n_targets] float32 as onnxruntime computes it."""
        attrs = {k: v for k, v in locals().items() if k not in ("xp", "X", "prepared")}
        forest = prepared if prepared is not None else prepare_regressor({}, attrs)
        base = pick("", a=base_values, b=base_values_as_tensor)
        return _regress(xp, forest, X, base, aggregate_function, post_transform, walk).astype(np.float32)

    return TreeEnsembleRegressor


for _v in (1, 3):
    op("TreeEnsembleClassifier", domain=ML, since=_v, prepare=prepare_classifier)(tree_classifier(_v))
    op("TreeEnsembleRegressor", domain=ML, since=_v, prepare=prepare_regressor)(tree_regressor(_v))

