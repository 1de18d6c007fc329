"""The KD and dyadic builders (docs/theory/trees.md) against a plain recursive reference builder."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxtree.build import check_features, dyadic_tree, kd_tree
from jaxtree.tree import leaf_of


def reference_tree(Z, y, kind, max_depth, min_split, split):
    """Grow T0 node by node on scaled points ``Z`` ``[n, D]`` (heap slots).

    Returns ``{slot: (internal, feature, threshold, point indices)}`` and ``{point: leaf slot}``.
    """
    nodes, leaf = {}, {}
    dims = Z.shape[1]

    def grow(slot, idx, depth, lo, hi):
        pure = y is not None and len(np.unique(y[idx])) <= 1
        if depth == max_depth or len(idx) < min_split or pure:
            nodes[slot] = (False, 0, 0.0, idx)
            leaf.update({int(i): slot for i in idx})
            return
        if split == "cycle":
            f = depth % dims
        else:
            f = widest_interquartile_range(Z[idx])
        if kind == "kd":
            v = Z[idx, f]
            t = np.median(v)
            if t >= v.max() and (v < v.max()).any():  # median is the max: tied max values go right
                t = (v[v < v.max()].max() + v.max()) / 2
        else:
            t = (lo[f] + hi[f]) / 2
        t = Z.dtype.type(t)
        nodes[slot] = (True, f, t, idx)
        go_left = Z[idx, f] <= t
        hi_left, lo_right = hi.copy(), lo.copy()
        hi_left[f] = lo_right[f] = t
        grow(2 * slot + 1, idx[go_left], depth + 1, lo, hi_left)
        grow(2 * slot + 2, idx[~go_left], depth + 1, lo_right, hi)

    grow(0, np.arange(len(Z)), 0, np.zeros(dims, Z.dtype), np.ones(dims, Z.dtype))
    return nodes, leaf


def scaled(tree, X):
    """The tree's scaling applied in NumPy."""
    Z = (X.astype(np.asarray(tree.shift).dtype) - np.asarray(tree.shift)) * np.asarray(
        tree.inv_scale)
    return np.clip(Z, 0, 1) if tree.clip else Z


def check_against_reference(tree, X, y, kind, max_depth, min_split, split):
    Z = scaled(tree, X)
    nodes, leaf = reference_tree(Z, y, kind, max_depth, min_split, split)
    internal = np.asarray(tree.internal)
    feature, threshold = np.asarray(tree.feature), np.asarray(tree.threshold)
    assert tree.depth == max(int(np.log2(slot + 1)) for slot in nodes)
    in_tree = np.zeros(tree.num_nodes, bool)
    in_tree[list(nodes)] = True
    np.testing.assert_array_equal(internal & in_tree, internal)  # nothing split outside T0
    for slot, (split_here, f, t, _) in nodes.items():
        assert internal[slot] == split_here, slot
        if split_here:
            assert feature[slot] == f, slot
            np.testing.assert_allclose(threshold[slot], t, rtol=1e-6, atol=1e-7)
    # the training points reach the leaves the grower put them in
    routed = np.asarray(leaf_of(tree, X))
    np.testing.assert_array_equal(routed, [leaf[i] for i in range(len(X))])


def data(seed, n=80, dims=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dims)) * rng.uniform(0.5, 5, dims)
    X[: n // 4] = X[n // 4: n // 2]                # duplicate points
    X[:, 0] = X[:, 0].round()                      # many ties in the first coordinate
    y = (X[:, 1] + rng.normal(size=n) > 0).astype(int) + (X[:, 2] > 1)
    return X, y


# the shapes are few on purpose: every new tree depth compiles routing once
CASES = [("kd", "cycle", 5, 2, True), ("kd", "spread", 5, 5, False),
         ("kd", "cycle", 4, 2, False), ("dyadic", "cycle", 5, 2, True),
         ("dyadic", "spread", 5, 3, False), ("dyadic", "spread", 4, 2, True)]


@pytest.mark.parametrize("kind,split,max_depth,min_split,with_labels", CASES)
def test_builder_matches_reference(precision, kind, split, max_depth, min_split, with_labels):
    X, y = data(max_depth + min_split)
    builder = kd_tree if kind == "kd" else dyadic_tree
    labels = y if with_labels else None
    tree = builder(X, max_depth=max_depth, min_split=min_split, y=labels, split=split,
                   layout="complete")
    check_against_reference(tree, X, labels, kind, max_depth, min_split, split)


def test_kd_scaling_is_the_standard_deviation(precision):
    X, _ = data(0)
    X[:, 2] = 7.0                                   # a constant feature keeps scale 1
    tree = kd_tree(X, max_depth=2, layout="complete")
    std = X.astype(precision).std(axis=0)
    np.testing.assert_allclose(np.asarray(tree.inv_scale)[:2], 1 / std[:2], rtol=1e-5)
    assert np.asarray(tree.inv_scale)[2] == 1.0
    np.testing.assert_array_equal(np.asarray(tree.shift), 0)
    assert not tree.clip


def test_dyadic_scaling_is_min_max_and_clips(precision):
    X, _ = data(1)
    tree = dyadic_tree(X, max_depth=3, layout="complete")
    np.testing.assert_allclose(np.asarray(tree.shift), X.min(axis=0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(tree.inv_scale), 1 / np.ptp(X, axis=0), rtol=1e-5)
    assert tree.clip
    # test points outside the training range route like the clipped (extreme) points
    far = np.array([X.min(axis=0) - 100, X.max(axis=0) + 100])
    edge = np.array([X.min(axis=0), X.max(axis=0)])
    np.testing.assert_array_equal(np.asarray(leaf_of(tree, far)), np.asarray(leaf_of(tree, edge)))


def test_kd_median_split_small_example(precision):
    """Odd count: the middle point goes left; even count: the mean of the two middle ones."""
    odd = kd_tree(np.array([[5.0], [1.0], [3.0], [2.0], [4.0]]), max_depth=1, layout="complete")
    even = kd_tree(np.array([[1.0], [4.0], [2.0], [3.0]]), max_depth=1, layout="complete")
    for tree, expected, left in ((odd, 3.0, 3), (even, 2.5, 2)):
        t = float(tree.threshold[0]) / float(tree.inv_scale[0])
        assert t == pytest.approx(expected, rel=1e-6)
        leaves = np.asarray(leaf_of(tree, np.array([[1.0], [2.0], [3.0], [4.0]])))
        assert (leaves == 1).sum() == left


def test_point_on_the_median_goes_left(precision):
    """The tie rule pinned on training points: values equal to the median are routed left."""
    X = np.array([[0.0], [1.0], [1.0], [1.0], [2.0]])
    tree = kd_tree(X, max_depth=1, layout="complete")
    np.testing.assert_array_equal(np.asarray(leaf_of(tree, X)), [1, 1, 1, 1, 2])


def test_dyadic_midpoints_and_coordinate_cycling(precision):
    """On a 2-D grid: depth ℓ splits coordinate ℓ mod 2 at the middle of the node's cell."""
    grid = np.stack(np.meshgrid(np.arange(9.0), np.arange(9.0) * 10), -1).reshape(-1, 2)
    tree = dyadic_tree(grid, max_depth=3, layout="complete")
    internal = np.asarray(tree.internal)
    assert internal[:7].all() and not internal[7:].any()
    np.testing.assert_array_equal(np.asarray(tree.feature)[:7], [0, 1, 1, 0, 0, 0, 0])
    np.testing.assert_allclose(np.asarray(tree.threshold)[:7],
                               [0.5, 0.5, 0.5, 0.25, 0.25, 0.75, 0.75])
    # (4, 0) scales to (0.5, 0): on the root's midpoint -> left (1), then left (3), then
    # right of 0.25 (8)
    assert int(leaf_of(tree, np.array([[4.0, 0.0]]))[0]) == 8


def widest_interquartile_range(V):
    """Plain reference of split="spread": widest interquartile range, else widest range."""
    v, c = np.sort(V, axis=0), len(V)
    spread = v[-(-3 * (c - 1) // 4)] - v[(c - 1) // 4]
    return int(np.argmax(spread) if spread.max() > 0 else np.argmax(v[-1] - v[0]))


def test_spread_picks_the_widest_coordinate(precision):
    """Dyadic: a two-cluster coordinate has the widest interquartile range at the root; inside
    each cluster another coordinate wins."""
    rng = np.random.default_rng(3)
    X = rng.uniform(size=(200, 3))
    X[:, 1] = rng.integers(0, 2, 200) * 0.9 + 0.1 * X[:, 1]   # clusters near 0 and near 1
    tree = dyadic_tree(X, max_depth=2, split="spread", layout="complete")
    feature = np.asarray(tree.feature)
    assert feature[0] == 1
    assert feature[1] in (0, 2) and feature[2] in (0, 2)
    # KD: one far outlier inflates a feature's range, not its interquartile range: not chosen;
    # the two-cluster feature (widest interquartile range after standardizing) is.
    X = rng.normal(size=(50, 3))
    X[0, 1] = 100.0
    X[:, 2] = np.where(rng.integers(0, 2, 50) == 1, 1.0, -1.0) + 0.1 * X[:, 2]
    assert int(kd_tree(X, max_depth=1, split="spread", layout="complete").feature[0]) == 2
    assert int(kd_tree(X, max_depth=1, split="cycle", layout="complete").feature[0]) == 0


def test_spread_ignores_rare_values_on_digit_like_data(precision):
    """A coordinate that is almost always 0 is not split while others vary (the range rule
    split it first and grew a chain)."""
    rng = np.random.default_rng(0)
    X = rng.integers(0, 17, size=(400, 4)).astype(float)
    X[:, 3] = 0.0
    X[:5, 3] = 16.0
    tree = kd_tree(X, max_depth=3, split="spread", layout="complete")
    assert 3 not in set(np.asarray(tree.feature)[np.asarray(tree.internal)].tolist())


def test_stopping_rules(precision):
    X, y = data(4)
    full = kd_tree(X, max_depth=3, layout="complete")
    internal = np.asarray(full.internal)
    assert full.depth == 3 and not internal[7:].any()       # max_depth
    assert internal[:7].all()                               # 80 points: every node splits
    # min_split: only nodes with >= min_split points split
    tree = kd_tree(X, max_depth=5, min_split=15, layout="complete")
    check_against_reference(tree, X, None, "kd", 5, 15, "cycle")
    counts = np.bincount(np.asarray(leaf_of(tree, X)), minlength=tree.num_nodes)
    depth = np.asarray(tree.node_depth)
    assert np.all(depth[counts >= 15] == 5) and (counts[(counts > 0) & (depth < 5)] < 15).all()
    # purity: a pure root is not split when labels are given, and is split without them
    assert not bool(kd_tree(X, max_depth=3, y=np.zeros(len(X), int)).internal[0])
    assert bool(kd_tree(X, max_depth=3).internal[0])
    # a one-leaf tree
    assert kd_tree(X, max_depth=0).num_nodes == 1


def test_empty_children_exist(precision):
    """Dyadic cells with no points are kept (a split always creates both children)."""
    X = np.array([[0.0, 0.0], [0.1, 0.05], [0.2, 0.1], [1.0, 1.0]])
    tree = dyadic_tree(X, max_depth=3, layout="complete")
    check_against_reference(tree, X, None, "dyadic", 3, 2, "cycle")
    nodes, _ = reference_tree(scaled(tree, X), None, "dyadic", 3, 2, "cycle")
    empty = [slot for slot, (_, _, _, idx) in nodes.items() if len(idx) == 0]
    assert empty and not np.asarray(tree.internal)[empty].any()
    # identical points: no threshold separates them, so the right child is empty
    same = np.ones((6, 2))
    tree = kd_tree(same, max_depth=2, layout="complete")
    np.testing.assert_array_equal(np.asarray(tree.internal)[:3], [True, True, False])
    np.testing.assert_array_equal(np.asarray(leaf_of(tree, same)), 3)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), n=st.integers(2, 40),
       kind=st.sampled_from(["kd", "dyadic"]), split=st.sampled_from(["cycle", "spread"]),
       classes=st.integers(1, 3), distinct=st.integers(1, 5))
def test_random_data_matches_reference(seed, n, kind, split, classes, distinct):
    """Few distinct values (duplicates, ties, constant features), one class or several."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, distinct, size=(n, 2)) * rng.uniform(0.1, 10, 2)
    y = rng.integers(0, classes, n)
    builder = kd_tree if kind == "kd" else dyadic_tree
    tree = builder(X, max_depth=4, y=y, split=split, layout="complete")
    check_against_reference(tree, check_features(X), y, kind, 4, 2, split)


def test_bad_input_raises_clear_errors():
    X = np.random.default_rng(5).normal(size=(10, 2))
    with pytest.raises(ValueError, match="2-D"):
        kd_tree(X[:, 0], max_depth=2)
    with pytest.raises(ValueError, match="at least 2 samples"):
        kd_tree(X[:1], max_depth=2)
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        dyadic_tree(bad, max_depth=2)
    bad[3, 1] = np.inf
    with pytest.raises(ValueError, match="infinite"):
        dyadic_tree(bad, max_depth=2)
    with pytest.raises(ValueError, match="max_depth"):
        kd_tree(X, max_depth=-1)
    with pytest.raises(ValueError, match="min_split"):
        kd_tree(X, max_depth=2, min_split=1)
    with pytest.raises(ValueError, match="split"):
        kd_tree(X, max_depth=2, split="random")
    with pytest.raises(ValueError, match="samples but y has"):
        kd_tree(X, max_depth=2, y=np.zeros(9, int))


def test_complete_layout_too_deep_names_the_limit_and_the_alternative():
    """Identical points with mixed labels keep splitting (everything goes left) to max_depth."""
    X, y = np.zeros((4, 1)), np.array([0, 1, 0, 1])
    with pytest.raises(ValueError, match="MAX_LAYOUT_BYTES") as error:
        kd_tree(X, max_depth=40, y=y, layout="complete")
    assert "compact" in str(error.value) and "max_depth" in str(error.value)


def test_kd_median_that_is_the_maximum_sends_tied_values_right(precision):
    """Most points share the largest value: '<= median' would send all of them left; the split
    instead separates the smaller values from the tied maximum (both children non-empty)."""
    X = np.array([[0.0], [1.0], [5.0], [5.0], [5.0], [5.0]])
    tree = kd_tree(X, max_depth=1)
    leaves = np.asarray(leaf_of(tree, X))
    assert leaves.tolist() == [1, 1, 2, 2, 2, 2]
