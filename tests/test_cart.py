"""CART T0: the same partition as scikit-learn and as a plain recursive reference; the binned
mode against the reference restricted to quantile edges."""

import math

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier

import jaxtree
from jaxtree import cart
from jaxtree.compact import CompactLayout


def partition(leaf):
    """The partition of the training points into leaves, as a set of sets."""
    return {frozenset(np.flatnonzero(leaf == value)) for value in np.unique(leaf)}


def ours(X, y, **kwargs):
    return partition(np.asarray(jaxtree.leaf_of(jaxtree.cart_tree(X, y, **kwargs), X)))


def sklearn_partition(X, y, criterion, random_state=0, **kwargs):
    model = DecisionTreeClassifier(criterion=criterion, max_features=None,
                                   random_state=random_state, **kwargs).fit(X, y)
    return partition(model.apply(X))


def box_data(seed, n=500):
    """Continuous features (no ties), labels from axis-aligned boxes (large, clean nodes)."""
    X = np.random.default_rng(seed).random((n, 4)).astype(np.float32)
    y = (((X[:, 0] > 0.3) & (X[:, 1] < 0.6)).astype(int) + 2 * (X[:, 2] > 0.8)
         + ((X[:, 3] > 0.4) & (X[:, 0] < 0.15)))
    return X, y


# -- against scikit-learn -------------------------------------------------------------------------
@pytest.mark.parametrize("criterion", ["gini", "entropy"])
def test_one_feature_deep_tree_matches_sklearn(precision, criterion):
    # one feature: no ties between features, so scikit-learn's choice is unique; grown to
    # purity through many small nodes
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 1)).astype(np.float32)
    y = rng.integers(3, size=400)
    tree = jaxtree.cart_tree(X, y, criterion=criterion)
    assert tree.threshold.dtype == precision and tree.depth > 10
    assert partition(np.asarray(jaxtree.leaf_of(tree, X))) == sklearn_partition(X, y, criterion)


@pytest.mark.parametrize("criterion", ["gini", "entropy"])
def test_matches_sklearn_wherever_its_tree_is_unique(criterion):
    # With several features, equal impurity decreases are broken by scikit-learn's random
    # feature order. Where every random_state gives the same partition, ours must equal it.
    compared = 0
    for seed in range(6):
        X, y = box_data(seed)
        theirs = [sklearn_partition(X, y, criterion, random_state=r) for r in range(4)]
        if all(p == theirs[0] for p in theirs):
            assert ours(X, y, criterion=criterion) == theirs[0]
            compared += 1
    assert compared >= 2


def test_max_depth_and_min_split_match_sklearn():
    X, y = box_data(0, n=800)
    for kwargs, theirs in [({"max_depth": 3}, {"max_depth": 3}),
                           ({"min_split": 40}, {"min_samples_split": 40})]:
        assert ours(X, y, **kwargs) == sklearn_partition(X, y, "gini", **theirs)


# -- against a plain recursive reference (the documented tie rule, ties in values) ----------------
def reference_cart(X, y, num_classes, min_split=2, random_state=0, edges=None):
    """Leaves (arrays of rows) of greedy Gini CART, one node at a time, level by level: best
    proxy ``Σ L²/n_L + Σ R²/n_R``; ties between features to the higher priority
    (``cart.tie_priority``, as ``cart_tree`` documents), then the smaller threshold. Thresholds:
    the node's values but its largest, or ``edges[f]``; with edges, scores tie within the
    relative ``cart.TIE_TOLERANCE`` of a feature's best and of the node's best."""
    tol = 0.0 if edges is None else cart.TIE_TOLERANCE
    seed = cart.tie_seed(random_state)
    level, leaves, depth = [np.arange(len(y))], [], 0
    while level:
        priority = cart.tie_priority(seed, depth, len(level), X.shape[1])
        below = []
        for k, rows in enumerate(level):
            counts = np.bincount(y[rows], minlength=num_classes)
            per_feature = []                   # (best score, priority, left, right) per feature
            if len(rows) >= min_split and counts.max() < len(rows):
                for f in range(X.shape[1]):
                    cuts = np.unique(X[rows, f])[:-1] if edges is None else edges[f]
                    scored = []
                    for low in cuts:
                        left, right = rows[X[rows, f] <= low], rows[X[rows, f] > low]
                        if not len(left) or not len(right):
                            continue
                        cl = np.bincount(y[left], minlength=num_classes)
                        cr = counts - cl
                        scored.append(((cl ** 2).sum() / len(left) + (cr ** 2).sum() / len(right),
                                       left, right))
                    if scored:
                        top = max(score for score, _, _ in scored)
                        first = next(c for c in scored if c[0] >= top - tol * abs(top))
                        per_feature.append((top, priority[k, f], first[1], first[2]))
            if not per_feature:
                leaves.append(rows)
                continue
            top = max(c[0] for c in per_feature)
            near = [c for c in per_feature if c[0] >= top - tol * abs(top)]
            best = max(near, key=lambda c: c[1])           # first of the highest priority
            below += [best[2], best[3]]
        level = below
        depth += 1
    return leaves


@pytest.mark.parametrize("seed", [0, 1])
def test_matches_plain_reference_with_tied_values(seed):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 6, size=(150, 3)).astype(np.float32)   # many equal values
    y = (X[:, 0] + X[:, 1] + rng.integers(0, 3, size=150)).astype(int) % 3
    for kwargs in ({}, {"min_split": 12}, {"random_state": 7}):
        expected = {frozenset(leaf) for leaf in reference_cart(X, y, 3, **kwargs)}
        assert ours(X, y, **kwargs) == expected


def quantile_edges(X, bins):
    """Per feature, the distinct values of ranks ceil(j·n/bins) - 1 (j = 1..bins-1) below the
    largest, by sorting."""
    ordered = np.sort(X, axis=0)
    ranks = [math.ceil(j * len(X) / bins) - 1 for j in range(1, bins)]
    return [np.unique(column[ranks][column[ranks] < column[-1]]) for column in ordered.T]


@pytest.mark.parametrize("bins", [3, 8])
def test_binned_matches_reference_on_quantile_edges(bins):
    rng = np.random.default_rng(bins)
    X = rng.integers(0, 9, size=(160, 3)).astype(np.float32) * [1, 1, 0.25]
    X[:, 2] += rng.normal(size=160).astype(np.float32)         # one feature without ties
    y = (X[:, 0] + X[:, 1] + rng.integers(0, 3, size=160)).astype(int) % 3
    edges = quantile_edges(X, bins)
    for found, expected in zip(cart.bin_edges(X, bins), edges):
        np.testing.assert_array_equal(found, expected)
    binned = cart.bin_index(X, edges)
    for f, e in enumerate(edges):                 # bin <= b holds exactly the values <= edge b
        for b, edge in enumerate(e):
            np.testing.assert_array_equal(binned[:, f] <= b, X[:, f] <= edge)
    for kwargs in ({}, {"min_split": 12, "random_state": 5}):
        expected = {frozenset(leaf) for leaf in reference_cart(X, y, 3, edges=edges, **kwargs)}
        assert ours(X, y, bins=bins, **kwargs) == expected


def test_binned_with_a_bin_per_row_splits_like_exact_gini():
    """bins >= n: every distinct value but the largest is an edge, so the binned tree makes the
    exact tree's splits (same features and leaves; thresholds at data values, not midpoints)."""
    X, y = box_data(4, n=200)
    X[:, 0] = X[:, 0].round(1)
    exact = jaxtree.cart_tree(X, y, random_state=1)
    binned = jaxtree.cart_tree(X, y, random_state=1, bins=256)
    np.testing.assert_array_equal(np.asarray(binned.internal), np.asarray(exact.internal))
    np.testing.assert_array_equal(np.asarray(binned.feature), np.asarray(exact.feature))
    np.testing.assert_array_equal(np.asarray(jaxtree.leaf_of(binned, X)),
                                  np.asarray(jaxtree.leaf_of(exact, X)))
    split = np.asarray(binned.internal)
    features, thresholds = np.asarray(binned.feature)[split], np.asarray(binned.threshold)[split]
    assert all(t in X[:, f] for f, t in zip(features, thresholds))


def test_binned_cut_is_the_middle_edge_of_the_gap_between_a_nodes_values():
    """A node whose rows of feature 1 are 0 (class 0) and 8 (class 1), with edges 0..7 from
    other rows: all 8 cuts split it alike, and the cut is the middle one, edge 3 (the exact
    tree's midpoint is 4), in the NumPy and in the JAX builder."""
    gap = np.repeat([[0, 0], [0, 8]], 10, axis=0)                  # group 0: values 0 and 8
    fill = np.stack([np.ones(35), np.repeat(np.arange(1, 8), 5)], axis=1)   # group 1: 1..7
    X = np.concatenate([gap, fill]).astype(np.float32)
    y = np.concatenate([np.repeat([0, 1], 10), np.full(35, 2)])
    exact = jaxtree.cart_tree(X, y)
    binned = jaxtree.cart_tree(X, y, bins=64)
    config = jaxtree.GrowConfig(partition="cart", max_depth=3, width=8, num_classes=3, bins=64)
    grown, _ = jaxtree.grow_tree(X, y, np.ones(len(y)), config)
    for tree, cut in ((exact, 4.0), (binned, 3.0), (grown, 3.0)):
        internal = np.asarray(tree.internal)
        feature = np.asarray(tree.feature)[internal]
        threshold = np.asarray(tree.threshold)[internal]
        assert feature.tolist() == [0, 1] and threshold[1] == cut


def test_ties_between_features_are_broken_at_random():
    # two identical features: every split ties between them, and the seed picks one
    X = np.repeat(np.arange(8, dtype=np.float32)[:, None], 2, axis=1)
    y = np.arange(8) % 2
    trees = [jaxtree.cart_tree(X, y, random_state=seed) for seed in range(6)]
    used = {tuple(np.asarray(t.feature)[np.asarray(t.internal)]) for t in trees}
    assert len(used) > 1 and set().union(*used) == {0, 1}



def test_node_hash_draws_uniform_subsets_and_uniform_numbers():
    """node_hash's bits, the forest's random draws: the 3 largest of 10 hashes pick each feature
    for 3/10 of 4,000 (level, node) pairs (binomial sd 0.007; 0.03 is 4 sd), every pair of
    features together about as often as chance (1/15: sd 0.004), NumPy and JAX agree, and the
    top 24 bits (the random splitter's uniforms) fill [0, 1) evenly."""
    import jax.numpy as jnp
    bits = np.concatenate([cart.node_hash(7, depth, np.arange(1000), 10) for depth in range(4)])
    assert bits.dtype == np.uint32
    np.testing.assert_array_equal(
        np.asarray(cart.node_hash(jnp.uint32(7), jnp.int32(2), jnp.arange(1000), 10, xp=jnp)),
        bits[2000:3000])
    chosen = np.argsort(-bits.astype(np.int64), axis=1)[:, :3]
    picked = np.zeros((len(bits), 10), bool)
    np.put_along_axis(picked, chosen, True, axis=1)
    assert np.abs(picked.mean(axis=0) - 0.3).max() < 0.03
    together = (picked[:, :, None] & picked[:, None, :]).mean(axis=0)[~np.eye(10, dtype=bool)]
    assert np.abs(together - 1 / 15).max() < 0.02
    uniform = (bits >> 8) * 2.0 ** -24
    assert uniform.min() >= 0 and uniform.max() < 1
    counts = np.histogram(uniform, bins=10, range=(0, 1))[0] / uniform.size
    assert np.abs(counts - 0.1).max() < 0.01


# -- rules and API --------------------------------------------------------------------------------
def test_leaves_are_pure_unless_small_or_unsplittable():
    X = np.array([[0.0], [0.0], [1.0], [2.0], [2.0], [3.0]], np.float32)
    y = np.array([0, 1, 1, 0, 0, 1])
    tree = jaxtree.cart_tree(X, y)
    assert ours(X, y) == {frozenset({0, 1}), frozenset({2}), frozenset({3, 4}), frozenset({5})}
    assert tree.depth == 3


def test_threshold_between_adjacent_floats_keeps_the_partition():
    low = np.float32(1.0)
    X = np.array([[low], [np.nextafter(low, np.float32(2))]], np.float32)
    tree = jaxtree.cart_tree(X, np.array([0, 1]))
    assert ours(X, np.array([0, 1])) == {frozenset({0}), frozenset({1})}
    assert tree.threshold[0] == low           # the midpoint rounds up to the larger value


def test_deep_tree_uses_the_compact_layout_and_the_engine_runs_on_it(precision):
    X, y = box_data(3, n=400)
    noise = np.random.default_rng(0).random(400) < 0.2
    y = np.where(noise, (y + 1) % 4, y)                      # label noise: a deep tree
    tree = jaxtree.cart_tree(X, y)
    assert isinstance(tree.layout, CompactLayout) and tree.depth > 10
    stats = jaxtree.node_stats(tree, X, y, 4)
    assert (stats.errors[np.asarray(tree.internal) == 0] == 0).all()   # grown to purity
    log_w = jaxtree.subtree_log_weights(jaxtree.pacbayes_potentials(stats, 1.0, 1.0),
                                        tree.internal, layout=tree.layout)
    proba = jaxtree.vote(tree, stats.label, log_w, X, 4)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-4)
    small = jaxtree.cart_tree(X, y, max_depth=3, layout="complete")
    assert small.depth == 3 and small.num_nodes == 15


@pytest.mark.parametrize("kwargs, message", [
    ({"criterion": "log_loss"}, "criterion"), ({"min_split": 1}, "min_split"),
    ({"max_depth": -1}, "max_depth"), ({"layout": "heap"}, "layout"), ({"bins": 1}, "bins"),
    ({"bins": 2.5}, "bins")])
def test_bad_arguments(kwargs, message):
    X, y = box_data(0, n=20)
    with pytest.raises(ValueError, match=message):
        jaxtree.cart_tree(X, y, **kwargs)
    with pytest.raises(ValueError, match="samples"):
        jaxtree.cart_tree(X, y[:-1])


@pytest.mark.parametrize("criterion", ["gini", "entropy"])
def test_integer_sample_weights_grow_the_tree_of_repeated_rows(criterion):
    X, y = box_data(5, n=300)
    X[:, 1] = X[:, 1].round(1)                                    # ties in one feature
    weight = np.random.default_rng(6).integers(0, 4, size=300)    # zeros: rows left out
    weighted = jaxtree.cart_tree(X, y, criterion=criterion, sample_weight=weight)
    repeated = jaxtree.cart_tree(np.repeat(X, weight, axis=0), np.repeat(y, weight),
                                 criterion=criterion)
    assert weighted.layout.num_nodes == repeated.layout.num_nodes
    for name in ("internal", "feature", "threshold"):
        np.testing.assert_array_equal(np.asarray(getattr(weighted, name)),
                                      np.asarray(getattr(repeated, name)))


def test_sample_weights_scale_freely_and_are_checked():
    # weights times 4 give the same tree: the Gini proxy scales by exactly 4 (a power of two), and
    # with weights >= 1 any two rows pass min_split=2 either way
    X, y = box_data(7, n=200)
    weight = np.random.default_rng(8).random(200) + 1.0
    trees = [jaxtree.cart_tree(X, y, sample_weight=c * weight, min_split=2) for c in (1.0, 4.0)]
    for name in ("internal", "feature", "threshold"):
        np.testing.assert_array_equal(np.asarray(getattr(trees[0], name)),
                                      np.asarray(getattr(trees[1], name)))
    with pytest.raises(ValueError, match="sample_weight"):
        jaxtree.cart_tree(X, y, sample_weight=-weight)
    with pytest.raises(ValueError, match="sample_weight"):
        jaxtree.cart_tree(X, y, sample_weight=weight[:-1])
    with pytest.raises(ValueError, match="bins"):
        jaxtree.cart_tree(X, y, sample_weight=weight, bins=8)
