"""Tree ensembles on one traversal: the :class:`Forest` every variant becomes, its walk, the
aggregation of the leaves' weights, and TreeEnsemble (5); the legacy TreeEnsembleClassifier /
TreeEnsembleRegressor are in :mod:`.legacy_trees`.

Every variant is turned once per session (the ``prepare`` hook) into a :class:`Forest`: one flat
array of nodes where a leaf is a node whose two children are itself, so that walking all trees for
all rows is ``depth`` identical steps over an [rows, trees] array of node indices -- no loop per row
or per tree, and no bookkeeping of which walks ended. Leaves map to rows of a dense [leaves, targets]
weight matrix (and a has-weight mask, for MIN/MAX and the classifier's "has a score" rules). The
device overrides (:mod:`gpuops.ops.cpu.ml`, :mod:`gpuops.ops.cuda.ml`) pass their own walk.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from ...errors import NodeError
from ...registry import op
from ._common import ML, apply_transform, rows_2d

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER, LEAF = range(8)
MODES = {"BRANCH_LEQ": LEQ, "BRANCH_LT": LT, "BRANCH_GTE": GTE, "BRANCH_GT": GT, "BRANCH_EQ": EQ,
         "BRANCH_NEQ": NEQ, "LEAF": LEAF}
CHUNK = 1 << 22  # rows x trees x targets per pass: bounds the traversal's temporary arrays


@dataclass
class Forest:
    """Trees as flat arrays (host, NumPy); :meth:`on` gives their copies on a device, made once."""

    feature: np.ndarray  # int32 [nodes]; 0 at leaves
    threshold: np.ndarray  # float32 or float64 [nodes]
    mode: np.ndarray  # int8 [nodes]; at leaves a mode the forest uses, so their tests need no extra case
    children: np.ndarray  # int32 [2 * nodes]: (true, false) per node; a leaf's are itself
    missing: np.ndarray  # bool [nodes]: NaN goes the true way
    roots: np.ndarray  # int32 [trees]
    depth: int  # steps from a root to the deepest leaf
    tree_depth: np.ndarray  # int32 [trees]: the same per tree
    leaf_slot: np.ndarray  # int32 [nodes]: the row of ``weights`` of a leaf
    weights: np.ndarray  # float64 [leaves, targets]
    has: np.ndarray  # bool [leaves, targets]: the leaf carries a weight for the target
    modes_present: tuple = ()  # the branch modes the forest uses
    members: np.ndarray | None = None  # float64 [nodes, width]: BRANCH_MEMBER sets, NaN-padded
    _on: dict = field(default_factory=dict, repr=False)

    @property
    def n_targets(self) -> int:
        return int(self.weights.shape[1])

    @functools.cached_property
    def n_features(self) -> int:
        """Features a row needs: one past the highest feature a node tests."""
        return int(self.feature.max(initial=-1)) + 1

    @functools.cached_property
    def uniform(self) -> bool:
        """Every leaf has weights for the same targets (then "has a score" does not depend on the row)."""
        return bool(self.has.shape[0] == 0 or (self.has == self.has[:1]).all())

    def on(self, xp) -> dict:
        key = getattr(xp, "__name__", str(id(xp)))
        dev = self._on.get(key)
        if dev is None:
            names = ("feature", "threshold", "mode", "children", "missing", "roots", "leaf_slot", "weights", "has")
            dev = {k: xp.asarray(getattr(self, k)) for k in names}
            if self.members is not None:
                dev["members"] = xp.asarray(self.members)
            self._on[key] = dev
        return dev


def _depths(children: np.ndarray, is_leaf: np.ndarray, roots: np.ndarray) -> np.ndarray:
    """Per tree, the branch nodes on its longest root-to-leaf path, found level by level over every
    tree at once; a cycle in the links is a NodeError."""
    T = roots.size
    depth = np.zeros(T, dtype=np.int32)
    keep = ~is_leaf[roots]
    nodes, tree = roots[keep], np.arange(T, dtype=np.int64)[keep]
    level = 0
    while nodes.size:
        level += 1
        if level > is_leaf.size:
            raise NodeError("tree ensemble: the node links form a cycle")
        depth[tree] = level
        nxt = np.concatenate([children[2 * nodes], children[2 * nodes + 1]]).astype(np.int64)
        tr = np.concatenate([tree, tree])
        keep = ~is_leaf[nxt]
        both = np.unique(nxt[keep] * T + tr[keep])  # a node reached twice is walked once
        nodes, tree = both // T, both % T
    return depth


def build_forest(feature, threshold, modes, true_ids, false_ids, missing, roots, leaf_targets, leaf_nodes, leaf_weights,
            n_targets, combine="sum", members=None) -> Forest:
    """A :class:`Forest` from global node links (leaves are nodes of mode LEAF) and the (leaf node,
    target, weight) triples; several weights of one leaf and target are combined by ``combine``."""
    n = len(modes)
    is_leaf = modes == LEAF
    idx = np.arange(n, dtype=np.int64)
    children = np.empty(2 * n, dtype=np.int32)
    children[0::2] = np.where(is_leaf, idx, true_ids)
    children[1::2] = np.where(is_leaf, idx, false_ids)
    if n and ((children < 0) | (children >= n)).any():
        raise NodeError("tree ensemble: a node links to a node that does not exist")
    if n and (np.asarray(feature)[~is_leaf] < 0).any():
        raise NodeError("tree ensemble: a node tests a negative feature id")
    leaf_slot = np.cumsum(is_leaf, dtype=np.int64) - 1
    n_leaves = int(is_leaf.sum())
    weights = np.zeros((n_leaves, n_targets), dtype=np.float64)
    has = np.zeros((n_leaves, n_targets), dtype=bool)
    leaf_targets = np.asarray(leaf_targets, dtype=np.int64)
    leaf_nodes = np.asarray(leaf_nodes, dtype=np.int64)
    if leaf_targets.size:
        if leaf_targets.min() < 0 or leaf_targets.max() >= n_targets:
            raise NodeError(f"tree ensemble: a target or class id is outside 0..{n_targets - 1}")
        keep = is_leaf[leaf_nodes]  # weights on a branch node are never reached (as onnxruntime)
        slots, tgt, w = leaf_slot[leaf_nodes[keep]], leaf_targets[keep], np.asarray(leaf_weights, np.float64)[keep]
        has[slots, tgt] = True
        if combine == "sum":
            np.add.at(weights, (slots, tgt), w)
        else:
            weights[:] = np.inf if combine == "min" else -np.inf
            (np.minimum if combine == "min" else np.maximum).at(weights, (slots, tgt), w)
            weights[~has] = 0.0
    tree_depth = _depths(children, is_leaf, np.asarray(roots, dtype=np.int64)) if n else np.zeros(0, np.int32)
    present = tuple(sorted({int(m) for m in np.unique(modes[~is_leaf])}))
    walk_modes = np.where(is_leaf, present[0] if present else LEQ, modes).astype(np.int8)
    return Forest(feature=np.where(is_leaf, 0, feature).astype(np.int32), threshold=threshold,
                  mode=walk_modes, modes_present=present, children=children, missing=np.asarray(missing, bool),
                  roots=np.asarray(roots, dtype=np.int32), depth=int(tree_depth.max(initial=0)),
                  tree_depth=tree_depth,
                  leaf_slot=np.where(is_leaf, leaf_slot, 0).astype(np.int32), weights=weights, has=has,
                  members=members)


# -- traversal -----------------------------------------------------------------------------------


def _go_true(xp, v, thr, mode, modes_present, members_at):
    """The branch test of each node (``mode`` per element), for the modes the forest uses."""
    tests = {LEQ: lambda: v <= thr, LT: lambda: v < thr, GTE: lambda: v >= thr, GT: lambda: v > thr,
             EQ: lambda: v == thr, NEQ: lambda: v != thr,
             MEMBER: lambda: xp.any(v[..., None] == members_at(), axis=-1)}
    present = list(modes_present)
    if not present:
        return xp.zeros(v.shape, dtype=bool)
    go = tests[present[0]]()
    for m in present[1:]:
        go = xp.where(mode == m, tests[m](), go)
    return go


def leaves(xp, forest: Forest, X):
    """[N, F] -> [N, trees] leaf slots (rows of ``forest.weights``), all rows and trees walked together."""
    d = forest.on(xp)
    cdt = np.float64 if X.dtype == np.float64 or forest.threshold.dtype == np.float64 else np.float32
    N, F = int(X.shape[0]), int(X.shape[1])
    T = int(forest.roots.size)
    present = forest.modes_present
    tracks = bool(forest.missing.any())
    x = xp.reshape(X.astype(cdt), (-1,))
    thr_all = d["threshold"].astype(cdt) if forest.threshold.dtype != cdt else d["threshold"]
    out = xp.empty((N, T), dtype=np.int32)
    step = max(1, CHUNK // max(T, 1))
    for start in range(0, N, step):  # row chunks bound the memory; each is one array program
        n = min(step, N - start)
        base = xp.reshape(xp.arange(start * F, (start + n) * F, F, dtype=np.int64), (n, 1))
        node = xp.broadcast_to(d["roots"], (n, T))
        for _ in range(forest.depth):
            v = xp.take(x, base + d["feature"][node], axis=0)
            go = _go_true(xp, v, thr_all[node], d["mode"][node] if len(present) > 1 else None, present,
                          lambda: d["members"][node])
            if tracks:
                go = go | (xp.isnan(v) & d["missing"][node])
            node = xp.take(d["children"], 2 * node + xp.logical_not(go).astype(np.int32), axis=0)
        out[start:start + n] = xp.take(d["leaf_slot"], node, axis=0)
    return out


def aggregate(xp, forest: Forest, slots, how: str):
    """Per row and target: the (sum | min | max) of the reached leaves' weights (float64) and whether
    any reached leaf has a weight for it. MIN/MAX over no weight give 0."""
    d = forest.on(xp)
    N, T = (int(s) for s in slots.shape)
    C = forest.n_targets
    y = xp.zeros((N, C), dtype=np.float64)
    hit = None if forest.uniform else xp.zeros((N, C), dtype=bool)
    step = max(1, CHUNK // max(T * C, 1))
    for start in range(0, N, step):
        s = slots[start:start + step]
        w = xp.take(d["weights"], s, axis=0)  # [n, T, C]
        if how == "sum":
            y[start:start + step] = xp.sum(w, axis=1)
        if hit is not None or how != "sum":
            h = xp.take(d["has"], s, axis=0)
            if hit is not None:
                hit[start:start + step] = xp.any(h, axis=1)
            if how != "sum":
                fill = np.inf if how == "min" else -np.inf
                r = (xp.min if how == "min" else xp.max)(xp.where(h, w, fill), axis=1)
                y[start:start + step] = xp.where(xp.isfinite(r) | xp.any(h, axis=1), r, 0.0)
    if hit is None:
        row = forest.has[0] if forest.has.shape[0] and T else np.zeros(C, dtype=bool)
        hit = xp.broadcast_to(xp.asarray(row), (N, C))
    return y, hit


def scores(xp, forest: Forest, X, how: str, walk=leaves):
    """:func:`aggregate` of ``walk``'s leaves; a sum is taken from ``walk.fused_sum`` (a traversal that
    adds the weights as it goes) where it has one and every leaf has weights for the same targets."""
    need = forest.n_features
    if int(X.shape[1]) < need:  # the walks would read past a row
        raise NodeError(f"tree ensemble: the trees test feature {need - 1}, the input has {int(X.shape[1])} features")
    fused = getattr(walk, "fused_sum", None) if how == "sum" and forest.uniform else None
    y = None if fused is None else fused(xp, forest, X)
    if y is None:
        return aggregate(xp, forest, walk(xp, forest, X), how)
    N, C = int(X.shape[0]), forest.n_targets
    row = forest.has[0] if forest.has.shape[0] and forest.roots.size else np.zeros(C, dtype=bool)
    return y, xp.broadcast_to(xp.asarray(row), (N, C))


# -- TreeEnsemble (5) ----------------------------------------------------------------------------


def prepare_v5(constants, attrs):
    """The prepare hook of TreeEnsemble (5): its attributes as a :class:`Forest`, built once per session."""
    return forest_v5(**{k: v for k, v in attrs.items() if k not in ("aggregate_function", "post_transform")})


def forest_v5(*, nodes_featureids, nodes_modes, nodes_splits, nodes_truenodeids, nodes_falsenodeids,
              nodes_trueleafs, nodes_falseleafs, leaf_targetids, leaf_weights, tree_roots, n_targets=None,
              nodes_hitrates=None, nodes_missing_value_tracks_true=None, membership_values=None) -> Forest:
    nb, nl = len(nodes_featureids), len(leaf_targetids)
    lens = {len(nodes_truenodeids), len(nodes_falsenodeids), len(nodes_trueleafs), len(nodes_falseleafs),
            int(np.asarray(nodes_modes).size), int(np.asarray(nodes_splits).size), nb}
    if len(lens) != 1 or int(np.asarray(leaf_weights).size) != nl:
        raise NodeError("TreeEnsemble: the nodes_* (or leaf_*) attributes differ in length")
    if n_targets is None:
        n_targets = max(leaf_targetids) + 1 if nl else 0
    branch_modes = np.asarray(nodes_modes).reshape(-1).astype(np.int64)
    if ((branch_modes < 0) | (branch_modes > MEMBER)).any():
        raise NodeError("TreeEnsemble: nodes_modes must be 0..6")
    modes = np.concatenate([branch_modes, np.full(nl, LEAF)])
    t_leaf, f_leaf = np.asarray(nodes_trueleafs, bool), np.asarray(nodes_falseleafs, bool)
    true_ids = np.concatenate([np.asarray(nodes_truenodeids, np.int64) + np.where(t_leaf, nb, 0), np.zeros(nl)])
    false_ids = np.concatenate([np.asarray(nodes_falsenodeids, np.int64) + np.where(f_leaf, nb, 0), np.zeros(nl)])
    for ids, leaf in ((nodes_truenodeids, t_leaf), (nodes_falsenodeids, f_leaf)):
        ids = np.asarray(ids, np.int64)
        if ((ids < 0) | (ids >= np.where(leaf, nl, nb))).any():
            raise NodeError("TreeEnsemble: a node links to a node or leaf that does not exist")
    roots = np.asarray(tree_roots, np.int64)
    if ((roots < 0) | (roots >= nb)).any():
        raise NodeError("TreeEnsemble: a tree root is not a node")
    splits = np.asarray(nodes_splits).reshape(-1)
    tdt = np.float64 if splits.dtype == np.float64 else np.float32
    threshold = np.concatenate([splits.astype(tdt), np.zeros(nl, tdt)])
    missing = np.concatenate([np.asarray(nodes_missing_value_tracks_true or [0] * nb, bool), np.zeros(nl, bool)])
    members = None
    is_member = branch_modes == MEMBER
    if is_member.any():
        if membership_values is None:
            raise NodeError("TreeEnsemble has BRANCH_MEMBER nodes but no membership_values")
        vals = np.asarray(membership_values, dtype=np.float64).reshape(-1)
        cuts = np.flatnonzero(np.isnan(vals))
        if len(cuts) != int(is_member.sum()):
            raise NodeError(f"membership_values holds {len(cuts)} sets for {int(is_member.sum())} BRANCH_MEMBER nodes")
        sets = np.split(vals, cuts + 1)[:len(cuts)]
        members = np.full((nb + nl, max(1, max(len(s) - 1 for s in sets))), np.nan)
        for node, s in zip(np.flatnonzero(is_member), sets):
            members[node, :len(s) - 1] = s[:-1]
    return build_forest(np.concatenate([np.asarray(nodes_featureids, np.int64), np.zeros(nl, np.int64)]), threshold,
                   modes, true_ids.astype(np.int64), false_ids.astype(np.int64), missing, roots,
                   leaf_targetids, nb + np.arange(nl), np.asarray(leaf_weights).reshape(-1), n_targets,
                   members=members)


def _v5_transform(xp, y, post_transform: int):
    """TreeEnsemble's post_transform by the spec's numbering (1 SOFTMAX, 2 LOGISTIC)."""
    if post_transform == 0:
        return y
    if post_transform == 1:
        return apply_transform(xp, y, "SOFTMAX")
    if post_transform == 2:
        return 1.0 / (1.0 + xp.exp(-y))
    if post_transform == 3:  # SOFTMAX_ZERO: softmax over the non-zero scores, zeros stay 0
        nz = y != 0
        m = xp.max(xp.where(nz, y, -xp.inf), axis=1, keepdims=True)
        e = xp.where(nz, xp.exp(y - xp.where(xp.isfinite(m), m, 0.0)), 0.0)
        s = xp.sum(e, axis=1, keepdims=True)
        return xp.where(s > 0, e / xp.where(s > 0, s, 1.0), 0.0)
    if post_transform == 4:
        return apply_transform(xp, y, "PROBIT")
    raise NodeError(f"TreeEnsemble post_transform must be 0..4, got {post_transform}")


def tree_ensemble_v5(walk=leaves):
    """TreeEnsemble (5) as an op whose rows walk the trees by ``walk`` (the device's traversal)."""

    def TreeEnsemble(xp, X, *, nodes_featureids, nodes_modes, nodes_splits, nodes_truenodeids, nodes_falsenodeids,
                     nodes_trueleafs, nodes_falseleafs, leaf_targetids, leaf_weights, tree_roots, n_targets=None,
                     aggregate_function=1, post_transform=0, nodes_hitrates=None,
                     nodes_missing_value_tracks_true=None, membership_values=None, prepared=None):
        """[N, F] -> [N, n_targets]: each tree's leaf weight added to (or averaged / min / max into) its
        target. ``post_transform`` follows the spec's numbering (1 SOFTMAX, 2 LOGISTIC); onnxruntime 1.31
        swaps those two."""
        if aggregate_function not in (0, 1, 2, 3):
            raise NodeError(f"TreeEnsemble aggregate_function must be 0..3, got {aggregate_function}")
        forest = prepared if prepared is not None else prepare_v5({}, dict(
            nodes_featureids=nodes_featureids, nodes_modes=nodes_modes, nodes_splits=nodes_splits,
            nodes_truenodeids=nodes_truenodeids, nodes_falsenodeids=nodes_falsenodeids, nodes_trueleafs=nodes_trueleafs,
            nodes_falseleafs=nodes_falseleafs, leaf_targetids=leaf_targetids, leaf_weights=leaf_weights,
            tree_roots=tree_roots, n_targets=n_targets, nodes_hitrates=nodes_hitrates,
            nodes_missing_value_tracks_true=nodes_missing_value_tracks_true, membership_values=membership_values))
        y, _ = scores(xp, forest, rows_2d(xp, X, "TreeEnsemble"), {2: "min", 3: "max"}.get(aggregate_function, "sum"),
                      walk)
        return v5_result(xp, forest, y, X.dtype, aggregate_function, post_transform)

    return TreeEnsemble


def v5_result(xp, forest: Forest, y, dtype, aggregate_function: int, post_transform: int):
    """TreeEnsemble's output of type ``dtype`` from the aggregated leaf weights ``y`` [N, targets]."""
    if aggregate_function == 0:
        y = y / max(int(forest.roots.size), 1)
    ct = np.float64 if dtype == np.float64 else np.float32
    return _v5_transform(xp, y.astype(ct), post_transform).astype(dtype)


op("TreeEnsemble", domain=ML, since=5, prepare=prepare_v5)(tree_ensemble_v5())
