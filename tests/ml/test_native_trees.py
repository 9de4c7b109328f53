"""The native tree traversal (cpu_kernels/tree_ensemble.c via gpuops/ops/cpu/ml.py) against the
generic NumPy traversal of gpuops/ops/ml/trees.py: the same leaf for every row and tree, and the
same sums (the kernel adds the trees in order in float64; NumPy sums the same float64 values in
another order: within trees x 2**-53 of the sum of magnitudes)."""

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

from gpuops import native
from gpuops.ops.cpu import ml as cpu_ml
from gpuops.ops.ml import legacy_trees, trees

from tests.ml.test_ops import legacy_attrs

needs_cc = pytest.mark.skipif(native.compiler() is None or not native.enabled(),
                              reason="no C compiler or native kernels off: the NumPy traversal runs")
RNG = np.random.default_rng(11)
MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")


def _forest(n_trees, depth, n_targets, modes, missing=True, double=False, per_leaf=1):
    attrs = legacy_attrs(n_trees, depth, 4, n_targets, "target", modes=modes, missing=missing,
                         weights_per_leaf=per_leaf, as_tensor=TensorProto.DOUBLE if double else None)
    attrs = {k: numpy_helper.to_array(v) if isinstance(v, TensorProto) else v for k, v in attrs.items()}
    return legacy_trees.prepare_regressor({}, dict(n_targets=n_targets, **attrs))


def _rows(n, dtype=np.float32):
    x = RNG.normal(size=(n, 4)).astype(dtype)
    x[::5, 0] = np.nan
    x[1::4, 2] = np.round(x[1::4, 2])
    return x


@needs_cc
@pytest.mark.parametrize("modes", [MODES[:1], MODES[1:2], MODES])
@pytest.mark.parametrize("missing", [False, True])
@pytest.mark.parametrize("double", [False, True])
def test_leaves_and_sums_match_numpy(modes, missing, double):
    forest = _forest(11, 5, 3, modes, missing, double, per_leaf=2)
    x = _rows(263, np.float64 if double else np.float32)  # not a multiple of the kernel's row blocks
    want = trees.leaves(np, forest, x)
    np.testing.assert_array_equal(cpu_ml.leaves(np, forest, x), want)
    y = cpu_ml.fused_sum(np, forest, x)
    ref, _ = trees.aggregate(np, forest, want, "sum")
    bound = 11 * 2.0 ** -53 * np.abs(forest.weights).max() * 2 * 11  # trees x eps x the sum of magnitudes
    np.testing.assert_allclose(y, ref, rtol=0, atol=bound)


@needs_cc
def test_trees_of_different_depths():
    """Each tree is walked its own depth: a forest of deep and one-split trees (leaves loop on
    themselves, so a shallow tree's walk ends on its leaf)."""
    deep = legacy_attrs(3, 6, 4, 1, "target", modes=MODES[:1])
    shallow = legacy_attrs(4, 1, 4, 1, "target", modes=MODES[:1])
    attrs = {k: deep[k] + ([t + 3 for t in shallow[k]] if k.endswith("treeids") else shallow[k]) for k in deep}
    forest = legacy_trees.prepare_regressor({}, dict(n_targets=1, **attrs))
    assert list(forest.tree_depth) == [6, 6, 6, 1, 1, 1, 1]
    x = _rows(50)
    np.testing.assert_array_equal(cpu_ml.leaves(np, forest, x), trees.leaves(np, forest, x))


@needs_cc
def test_kernels_write_only_their_outputs():
    forest = _forest(5, 3, 2, MODES[:2])
    x = _rows(37)
    guard = 64
    n = 37 * 5
    buf = np.full(n + 2 * guard, -7, dtype=np.int32)
    fn, args, *_ = cpu_ml._operands(forest, x, "tree_leaves")
    assert fn(*args, buf[guard:].ctypes.data) == 0
    assert (buf[:guard] == -7).all() and (buf[guard + n:] == -7).all()
    assert (buf[guard:guard + n] >= 0).all()
    sums = np.full(37 * 2 + 2 * guard, np.nan)
    fn, args, *_ = cpu_ml._operands(forest, x, "tree_sum")
    w = np.ascontiguousarray(forest.weights)
    assert fn(*args, w.ctypes.data, 2, sums[guard:].ctypes.data) == 0
    assert np.isnan(sums[:guard]).all() and np.isnan(sums[guard + 74:]).all() and not np.isnan(sums[guard:guard + 74]).any()


def test_without_native_kernels_the_numpy_traversal_runs():
    forest = _forest(4, 3, 1, MODES[:1])
    x = _rows(20)
    with native.disabled():
        assert cpu_ml.fused_sum(np, forest, x) is None
        np.testing.assert_array_equal(cpu_ml.leaves(np, forest, x), trees.leaves(np, forest, x))


@needs_cc
def test_same_bits_from_any_thread_count():
    """Rows are split across threads in blocks; each row's leaves and sum do not depend on the split."""
    forest = _forest(40, 6, 2, MODES[:2])
    x = _rows(30_000)  # enough blocks of rows for three parts of the kernels' least work each
    before = native._threads
    try:
        results = []
        for n in (1, 3):
            native.set_threads(n)
            results.append((cpu_ml.leaves(np, forest, x), cpu_ml.fused_sum(np, forest, x)))
    finally:
        native.set_threads(before)
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])
