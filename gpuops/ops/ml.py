"""Classic ML ops of the ``ai.onnx.ml`` domain: ArrayFeatureExtractor, Binarizer, LabelEncoder
(v2 lists, v4 tensors) and TreeEnsemble (v5).

LabelEncoder maps numbers on the device (sorted keys + ``searchsorted``); string inputs or string
values are looked up on the host, where string tensors live. TreeEnsemble walks every tree for every
sample at once, one level per step; the number of steps is the deepest tree's depth, known from the
attributes.
"""

from __future__ import annotations

import math

import numpy as np

from ..device import to_host
from ..errors import NodeError
from ..registry import op
from .elementwise import clamp

ML = "ai.onnx.ml"


@op("ArrayFeatureExtractor", domain=ML, since=1)
def ArrayFeatureExtractor(xp, X, Y):
    """Selects ``Y`` (flattened) along the last axis; a 1-D ``X`` gives a [1, k] result (as onnxruntime)."""
    k = int(np.prod(Y.shape))
    shape = (1, k) if X.ndim == 1 else (*X.shape[:-1], k)
    if X.dtype == object:  # strings live on the host
        return np.take(to_host(X), to_host(Y).reshape(-1).astype(np.int64), axis=-1).reshape(shape)
    return xp.reshape(xp.take(X, xp.reshape(Y, (-1,)).astype(np.int64), axis=X.ndim - 1), shape)


@op("Binarizer", domain=ML, since=1)
def Binarizer(xp, X, *, threshold=0.0):
    return (X > threshold).astype(X.dtype)


# -- LabelEncoder --------------------------------------------------------------------------------


def _one_of(named: dict):
    given = {k: v for k, v in named.items() if v is not None}
    if len(given) != 1:
        raise NodeError(f"LabelEncoder needs exactly one of {sorted(named)}, got {sorted(given) or 'none'}")
    return next(iter(given.items()))


def _label_encode(xp, X, keys, values, default, out_dtype):
    table = dict(zip(keys, values))  # a repeated key: the last one wins
    string_in = X.dtype == object
    if string_in or out_dtype == object:  # strings live on the host
        x = to_host(X)
        nan_value = next((v for k, v in table.items() if isinstance(k, float) and math.isnan(k)), default)
        flat = [nan_value if isinstance(k, float) and math.isnan(k) else table.get(k, default)
                for k in x.reshape(-1).tolist()]
        out = np.array(flat, dtype=out_dtype).reshape(x.shape)
        return out if out_dtype == object else xp.asarray(out)
    # numeric -> numeric on the device: binary search in the sorted keys
    nan_keys = [k for k in table if isinstance(k, float) and math.isnan(k)]
    plain = [k for k in table if k not in nan_keys]
    kdt = np.float64 if np.dtype(X.dtype).kind == "f" else np.int64
    k_host = np.array(plain, dtype=kdt)
    order = np.argsort(k_host, kind="stable")
    k_sorted = xp.asarray(k_host[order])
    v_sorted = xp.asarray(np.array([table[plain[i]] for i in order], dtype=out_dtype))
    x = X.astype(kdt)
    out = xp.full(tuple(X.shape), default, dtype=out_dtype)
    if plain:
        pos = clamp(xp, xp.searchsorted(k_sorted, xp.reshape(x, (-1,))), 0, len(plain) - 1)
        pos = xp.reshape(pos, tuple(X.shape))
        out = xp.where(k_sorted[pos] == x, v_sorted[pos], out)
    if nan_keys:  # a NaN key matches any NaN input
        out = xp.where(xp.isnan(x), xp.asarray(np.array(table[nan_keys[-1]], dtype=out_dtype)), out)
    return out


@op("LabelEncoder", domain=ML, since=2)
def LabelEncoder_2(xp, X, *, default_float=-0.0, default_int64=-1, default_string="_Unused", keys_floats=None,
                   keys_int64s=None, keys_strings=None, values_floats=None, values_int64s=None,
                   values_strings=None):
    _, keys = _one_of({"keys_floats": keys_floats, "keys_int64s": keys_int64s,
                               "keys_strings": keys_strings})
    vname, values = _one_of({"values_floats": values_floats, "values_int64s": values_int64s,
                                       "values_strings": values_strings})
    out_dtype, default = {"values_floats": (np.float32, default_float), "values_int64s": (np.int64, default_int64),
                          "values_strings": (object, default_string)}[vname]
    return _label_encode(xp, X, list(keys), list(values), default, out_dtype)


@op("LabelEncoder", domain=ML, since=4)
def LabelEncoder_4(xp, X, *, default_float=-0.0, default_int64=-1, default_string="_Unused", default_tensor=None,
                   keys_floats=None, keys_int64s=None, keys_strings=None, keys_tensor=None, values_floats=None,
                   values_int64s=None, values_strings=None, values_tensor=None):
    _, keys = _one_of({"keys_floats": keys_floats, "keys_int64s": keys_int64s,
                               "keys_strings": keys_strings, "keys_tensor": keys_tensor})
    vname, values = _one_of({"values_floats": values_floats, "values_int64s": values_int64s,
                                       "values_strings": values_strings, "values_tensor": values_tensor})
    if vname == "values_tensor":
        out_dtype = values.dtype if values.dtype != object else object
        if default_tensor is not None:
            default = np.asarray(default_tensor).reshape(-1)[0]
        else:
            default = "_Unused" if out_dtype == object else (-0.0 if np.dtype(out_dtype).kind == "f" else -1)
        values = values.reshape(-1).tolist()
    else:
        out_dtype, default = {"values_floats": (np.float32, default_float),
                              "values_int64s": (np.int64, default_int64),
                              "values_strings": (object, default_string)}[vname]
    keys = keys.reshape(-1).tolist() if isinstance(keys, np.ndarray) else list(keys)
    if len(keys) != len(values):
        raise NodeError(f"LabelEncoder has {len(keys)} keys but {len(values)} values")
    return _label_encode(xp, X, keys, list(values), default, out_dtype)


# -- TreeEnsemble --------------------------------------------------------------------------------

_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER = range(7)


def _tree_depth(root: int, true_ids, false_ids, true_leaf, false_leaf) -> int:
    """Number of branch nodes on the longest root-to-leaf path (host-side, from attributes)."""
    depth, frontier, seen = 0, [root], 0
    while frontier:
        depth += 1
        seen += len(frontier)
        if seen > len(true_ids) * 2 + 2:
            raise NodeError("TreeEnsemble: the node links form a cycle")
        nxt = []
        for n in frontier:
            if not true_leaf[n]:
                nxt.append(true_ids[n])
            if not false_leaf[n]:
                nxt.append(false_ids[n])
        frontier = nxt
    return depth


def _erfinv(xp, x):
    """The approximation of erf^-1 onnxruntime uses for PROBIT (Winitzki, a = 0.147)."""
    sgn = xp.where(x < 0, -1.0, 1.0)
    ln = xp.log((1.0 - x) * (1.0 + x))
    v = 2.0 / (math.pi * 0.147) + 0.5 * ln
    return sgn * xp.sqrt(-v + xp.sqrt(v * v - ln / 0.147))


def _post_transform(xp, y, post_transform: int):
    if post_transform == 0:
        return y
    if post_transform == 1:  # SOFTMAX
        e = xp.exp(y - xp.max(y, axis=1, keepdims=True))
        return e / xp.sum(e, axis=1, keepdims=True)
    if post_transform == 2:  # LOGISTIC
        return 1.0 / (1.0 + xp.exp(-y))
    if post_transform == 3:  # SOFTMAX_ZERO: softmax over the non-zero scores, zeros stay 0
        nz = y != 0
        m = xp.max(xp.where(nz, y, -xp.inf), axis=1, keepdims=True)
        e = xp.where(nz, xp.exp(y - xp.where(xp.isfinite(m), m, 0.0)), 0.0)
        s = xp.sum(e, axis=1, keepdims=True)
        return xp.where(s > 0, e / xp.where(s > 0, s, 1.0), 0.0)
    if post_transform == 4:  # PROBIT
        return math.sqrt(2.0) * _erfinv(xp, 2.0 * y - 1.0)
    raise NodeError(f"TreeEnsemble post_transform must be 0..4, got {post_transform}")


@op("TreeEnsemble", domain=ML, since=5)
def TreeEnsemble(xp, X, *, nodes_featureids, nodes_modes, nodes_splits, nodes_truenodeids, nodes_falsenodeids,
                 nodes_trueleafs, nodes_falseleafs, leaf_targetids, leaf_weights, tree_roots, n_targets=None,
                 aggregate_function=1, post_transform=0, nodes_hitrates=None,
                 nodes_missing_value_tracks_true=None, membership_values=None):
    """[N, F] -> [N, n_targets]: each tree's leaf weight added to (or averaged / min / max into) its
    target. ``post_transform`` follows the spec's numbering (1 SOFTMAX, 2 LOGISTIC); onnxruntime 1.31
    swaps those two."""
    if n_targets is None:
        n_targets = max(leaf_targetids) + 1 if leaf_targetids else 0
    if aggregate_function not in (0, 1, 2, 3):
        raise NodeError(f"TreeEnsemble aggregate_function must be 0..3, got {aggregate_function}")
    modes = np.asarray(nodes_modes).reshape(-1).astype(np.int64)
    n_nodes = len(nodes_featureids)
    true_ids, false_ids = list(nodes_truenodeids), list(nodes_falsenodeids)
    true_leaf, false_leaf = [bool(v) for v in nodes_trueleafs], [bool(v) for v in nodes_falseleafs]
    missing = list(nodes_missing_value_tracks_true or [0] * n_nodes)
    # set membership: the members of the i-th BRANCH_MEMBER node, NaN-delimited, padded with NaN
    member_rows = np.full((n_nodes, 1), np.nan)
    n_member = int(np.sum(modes == _MEMBER))
    if n_member:
        if membership_values is None:
            raise NodeError("TreeEnsemble has BRANCH_MEMBER nodes but no membership_values")
        vals = np.asarray(membership_values, dtype=np.float64).reshape(-1)
        cuts = np.flatnonzero(np.isnan(vals))
        if len(cuts) != n_member:
            raise NodeError(f"membership_values holds {len(cuts)} sets for {n_member} BRANCH_MEMBER nodes")
        sets = np.split(vals, cuts + 1)[:n_member]
        width = max(1, max(len(s) - 1 for s in sets))
        member_rows = np.full((n_nodes, width), np.nan)
        for node, s in zip(np.flatnonzero(modes == _MEMBER), sets):
            member_rows[node, :len(s) - 1] = s[:-1]

    n_trees = len(tree_roots)
    depth = max((_tree_depth(r, true_ids, false_ids, true_leaf, false_leaf) for r in tree_roots), default=0)
    dev = lambda a, dt: xp.asarray(np.asarray(a, dtype=dt))  # noqa: E731
    feat, mode_d = dev(nodes_featureids, np.int64), xp.asarray(modes)
    split = dev(np.asarray(nodes_splits).reshape(-1), np.float64)
    t_ids, f_ids = dev(true_ids, np.int64), dev(false_ids, np.int64)
    t_leaf, f_leaf = dev(true_leaf, bool), dev(false_leaf, bool)
    miss, members = dev(missing, bool), xp.asarray(member_rows)

    N = int(X.shape[0])
    x = X.astype(np.float64)
    roots = np.asarray(tree_roots, dtype=np.int64)
    # a one-node tree whose two branches are the same leaf is that leaf
    degenerate = np.array([true_leaf[r] and false_leaf[r] and true_ids[r] == false_ids[r] for r in roots], dtype=bool)
    node = xp.broadcast_to(xp.asarray(np.where(degenerate, np.asarray(true_ids)[roots] if n_trees else roots, roots)),
                           (N, n_trees))
    at_leaf = xp.broadcast_to(xp.asarray(degenerate), (N, n_trees))
    rows = xp.reshape(xp.arange(N), (N, 1))
    for _ in range(depth):
        cur = xp.where(at_leaf, 0, node)  # a valid node index where the walk already ended
        v = x[rows, feat[cur]]
        thr, m = split[cur], mode_d[cur]
        is_member = xp.any(v[..., None] == members[cur], axis=-1)
        go_true = xp.where(m == _LEQ, v <= thr,
                  xp.where(m == _LT, v < thr,
                  xp.where(m == _GTE, v >= thr,
                  xp.where(m == _GT, v > thr,
                  xp.where(m == _EQ, v == thr,
                  xp.where(m == _NEQ, v != thr, is_member))))))
        go_true = go_true | (xp.isnan(v) & miss[cur])
        node = xp.where(at_leaf, node, xp.where(go_true, t_ids[cur], f_ids[cur]))
        at_leaf = at_leaf | xp.where(go_true, t_leaf[cur], f_leaf[cur])

    ct = np.float64 if X.dtype == np.float64 else np.float32
    w = dev(np.asarray(leaf_weights).reshape(-1), ct)[node]  # [N, trees]
    hit = dev(leaf_targetids, np.int64)[node][..., None] == xp.arange(n_targets)  # [N, trees, targets]
    if aggregate_function in (0, 1):
        y = xp.sum(xp.where(hit, w[..., None], 0.0), axis=1)
        if aggregate_function == 0:
            y = y / n_trees
    else:  # MIN / MAX; a target no tree reaches scores 0 (as onnxruntime)
        pick = xp.min if aggregate_function == 2 else xp.max
        y = pick(xp.where(hit, w[..., None], xp.inf if aggregate_function == 2 else -xp.inf), axis=1)
        y = xp.where(xp.any(hit, axis=1), y, 0.0)
    return _post_transform(xp, y.astype(ct), post_transform).astype(X.dtype)
