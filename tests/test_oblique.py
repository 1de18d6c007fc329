"""Perceptron decision trees: twoing, OC1's line search, FAT, MOC goodness, the margin bound.

Every tree here has the same shapes (200 points, 3 features, depth 3, one restart/jump/pass), so
the split search compiles once per precision. Tests that grow trees run float64 only with -m slow
(they are compile-bound; the numeric kernels are checked in both precisions).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtree
from jaxtree import oblique
from jaxtree.engine import best_pruning
from jaxtree.layout import CompleteLayout
from jaxtree.tree import Tree, route, scale_points

SEARCH = dict(max_depth=3, n_restarts=1, n_jumps=1, n_cycles=1)


@pytest.fixture(params=[False, pytest.param(True, marks=pytest.mark.slow)],
                ids=["float32", "float64"])
def grow_precision(request):
    """Like ``precision``, for tests that grow trees (compile-bound): float64 only with -m slow."""
    with jax.enable_x64(request.param):
        yield jnp.zeros(0).dtype


def separable(seed=0, n=200, gap=0.15):
    """Points in 3-D labelled by a random hyperplane, with a corridor of half-width ``gap``."""
    rng = np.random.default_rng(seed)
    normal = rng.normal(size=3)
    normal /= np.linalg.norm(normal)
    X = rng.normal(size=(4 * n, 3))
    margin = X @ normal - 0.2
    X, margin = X[np.abs(margin) > gap][:n], margin[np.abs(margin) > gap][:n]
    return X.astype(np.float32), (margin > 0).astype(np.int64)


def xor_blobs(seed=1, n=200):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = ((X[:, 0] + 0.5 * X[:, 2] > 0) ^ (X[:, 1] - 0.3 * X[:, 2] > 0.2)).astype(np.int64)
    return X.astype(np.float32), y


def brute_margins(tree, X):
    """Per internal slot: min distance of the points that reach it to its hyperplane (a loop)."""
    Z = np.asarray(scale_points(tree, jnp.asarray(X)), np.float64)
    path, on_path = (np.asarray(a) for a in route(tree, jnp.asarray(X)))
    coef, threshold = np.asarray(tree.coef, np.float64), np.asarray(tree.threshold, np.float64)
    out = {}
    for node in np.flatnonzero(np.asarray(tree.internal)):
        reach = ((path == node) & on_path).any(axis=1)
        dist = (Z[reach] @ coef[node] - threshold[node]) / np.linalg.norm(coef[node])
        out[node] = np.abs(dist).min()
    return out


def test_twoing_against_hand_computation(precision):
    left = jnp.asarray([[3.0, 1.0], [2.0, 0.0], [0.0, 0.0]], precision)
    right = jnp.asarray([[1.0, 3.0], [1.0, 3.0], [2.0, 5.0]], precision)
    # (4/8)(4/8)(|3/4-1/4| + |1/4-3/4|)^2 = 0.25;  (2/6)(4/6)(|1-1/4| + |0-3/4|)^2 = 0.5; empty: 0
    np.testing.assert_allclose(oblique.twoing(left, right), [0.25, 0.5, 0.0], rtol=1e-6)


def test_line_search_is_exact(precision):
    """The chosen step attains the best twoing over every interval of the breakpoints."""
    rng = np.random.default_rng(3)
    n, m = 60, 2
    V = jnp.asarray(rng.normal(size=n), precision)
    s = jnp.asarray(np.where(rng.random(n) < 0.1, 0.0, rng.normal(size=n)), precision)
    segment = jnp.asarray(rng.integers(0, m + 1, size=n), jnp.int32)   # m = not in a node
    onehot = jax.nn.one_hot(rng.integers(0, 3, size=n), 3, dtype=precision)
    ones = jnp.ones(m, precision)
    search = jax.jit(oblique._line_search, static_argnums=9)
    alpha = np.asarray(search(V, s, segment, onehot, ones, 0 * ones, ones, 0.0, 0.0, m))
    V, s, segment, onehot = (np.asarray(a, np.float64) for a in (V, s, segment, onehot))

    def value(k, a):
        """Twoing of node k's points at step a, in NumPy."""
        inside = segment == k
        right = V[inside] + a * s[inside] >= 0
        left_counts, right_counts = onehot[inside][~right].sum(0), onehot[inside][right].sum(0)
        size_l, size_r = left_counts.sum(), right_counts.sum()
        if size_l == 0 or size_r == 0:
            return 0.0
        diff = np.abs(left_counts / size_l - right_counts / size_r).sum()
        return size_l * size_r / inside.sum() ** 2 * diff ** 2

    for k in range(m):
        inside = (segment == k) & (s != 0)
        brk = np.sort(-V[inside] / s[inside])
        candidates = np.concatenate([[brk[0] - 1], (brk[1:] + brk[:-1]) / 2, [brk[-1] + 1]])
        best = max(value(k, a) for a in candidates)
        assert value(k, alpha[k]) == pytest.approx(best, rel=1e-5)


def test_oblique_route_tie_rule(precision):
    """Right iff coef·z >= threshold: a point on the hyperplane goes right."""
    layout = CompleteLayout(1)
    tree = Tree(feature=jnp.zeros(3, jnp.int32), threshold=jnp.asarray([1.0, 0, 0], precision),
                internal=jnp.asarray([True, False, False]),
                left_child=jnp.asarray(layout.left_child(), jnp.int32),
                node_depth=jnp.asarray(layout.node_depth(), jnp.int32),
                shift=jnp.zeros(2, precision), inv_scale=jnp.ones(2, precision), layout=layout,
                coef=jnp.asarray([[1.0, 1.0], [0, 0], [0, 0]], precision))
    X = jnp.asarray([[0.5, 0.5], [0.5, 0.25], [2.0, -0.5]], precision)
    np.testing.assert_array_equal(jaxtree.leaf_of(tree, X), [2, 1, 2])


def test_oc1_separates_linearly_separable_data_at_the_root(grow_precision):
    X, y = separable()
    tree = jaxtree.oblique_tree(X, y, method="oc1", **SEARCH)
    path, _ = route(tree, X)
    side = np.asarray(path[:, 1]) == 2
    assert (side == (y == 1)).all() or (side == (y == 0)).all()
    # the children are pure, so the root is the only decision node
    assert int(tree.internal.sum()) == 1
    # no axis-parallel split separates these points: the search did leave its start
    for feature in X.T:
        order = np.sort(feature)
        for t in (order[1:] + order[:-1]) / 2:
            assert 0 < ((feature > t) != (y == 1)).sum() < len(y)


def test_fat_enlarges_every_margin_and_keeps_the_partition(grow_precision):
    X, y = xor_blobs()
    tree = jaxtree.oblique_tree(X, y, method="oc1", **SEARCH)
    wide = jaxtree.fat(tree, X)
    # same partition of the training points: the relabeled sides are still separated
    np.testing.assert_array_equal(route(tree, X)[0], route(wide, X)[0])
    before, after = brute_margins(tree, X), brute_margins(wide, X)
    assert len(before) >= 3
    for node in before:
        assert after[node] >= before[node] * (1 - 1e-5)
    assert sum(after.values()) > sum(before.values())
    np.testing.assert_allclose(
        np.asarray(jaxtree.node_margins(wide, X))[list(after)], list(after.values()), rtol=1e-4)


def test_fat_margin_is_the_hard_margin_svm(grow_precision):
    """At the root of a separable problem FAT reaches the margin of a hard-margin SVM."""
    svm = pytest.importorskip("sklearn.svm")
    X, y = separable(seed=2)
    tree = jaxtree.oblique_tree(X, y, method="fat", **SEARCH)
    Z = np.asarray(scale_points(tree, jnp.asarray(X)), np.float64)
    reference = svm.SVC(kernel="linear", C=1e8, tol=1e-6).fit(Z, y)
    optimum = 1 / np.linalg.norm(reference.coef_)
    assert float(jaxtree.node_margins(tree, X)[0]) == pytest.approx(optimum, rel=0.02)


def test_moc_goodness_against_hand_computation(precision):
    """One node, points at signed distances -2, -0.5, 0.05, 1, 3 from x = 0 (classes 0 0 1 1 0)."""
    z = jnp.asarray([-2.0, -0.5, 0.05, 1.0, 3.0], precision)
    Zt = jnp.stack([z, -jnp.ones_like(z)], axis=1)
    onehot = jax.nn.one_hot(jnp.asarray([0, 0, 1, 1, 0]), 2, dtype=precision)
    segment = jnp.zeros(5, jnp.int32)
    hyper = jnp.asarray([[2.0, 0.0]], precision)           # 2x >= 0: distances as above

    def goodness(tau, C):
        return float(oblique._goodness((Zt, onehot, segment, tau, C, 1), hyper)[0])

    plain = (2 / 5) * (3 / 5) * (abs(1 - 1 / 3) + abs(0 - 2 / 3)) ** 2
    assert goodness(0.0, 0.0) == pytest.approx(plain, rel=1e-6)
    assert goodness(0.0, 0.5) == pytest.approx(plain + 0.5 * 0.05, rel=1e-6)      # MOC1
    # MOC2, band 0.1: the point at 0.05 counts on neither side, n stays 5
    banded = (2 / 5) * (2 / 5) * (abs(1 - 1 / 2) + abs(0 - 1 / 2)) ** 2
    assert goodness(0.1, 0.0) == pytest.approx(banded, rel=1e-6)


def test_margin_bound_against_the_formula():
    margins, radius, m, delta = np.array([0.5, 0.25, 1.0]), 2.0, 1000, 0.05
    k = 3
    d_prime = 1 / 0.25 + 1 / 0.0625 + 1
    direct = 130 * radius ** 2 / m * (
        d_prime * math.log(4 * math.e * m) * math.log(4 * m)
        + math.log((4 * m) ** (k + 1) * math.comb(2 * k, k) / ((k + 1) * delta)))
    assert jaxtree.margin_bound(margins, radius, m, delta) == pytest.approx(direct, rel=1e-12)
    assert jaxtree.margin_bound([0.5, 0.0], radius, m, delta) == math.inf


def test_estimator_margins_and_bound(grow_precision):
    X, y = xor_blobs()
    model = jaxtree.ObliqueTreeClassifier(method="fat", **SEARCH).fit(X, y + 5)
    margins = brute_margins(model.tree_, X)
    np.testing.assert_allclose(model.margins_, list(margins.values()), rtol=1e-4)
    Z = np.asarray(scale_points(model.tree_, jnp.asarray(X)), np.float64)
    radius = np.linalg.norm(Z, axis=1).max()
    k, inv = len(margins), sum(1 / g ** 2 for g in margins.values())
    direct = 130 * radius ** 2 / len(y) * (
        inv * math.log(4 * math.e * len(y)) * math.log(4 * len(y))
        + math.log((4 * len(y)) ** (k + 1) * math.comb(2 * k, k) / ((k + 1) * 0.1)))
    assert model.margin_bound(0.1) == pytest.approx(direct, rel=1e-4)
    assert model.score(X, y + 5) > 0.8
    assert set(model.predict(X)) <= {5, 6}


def test_pacbayes_vote_and_pruning_on_an_oblique_tree(grow_precision):
    X, y = xor_blobs()
    tree = jaxtree.oblique_tree(X, y, method="moc2", **SEARCH)
    stats = jaxtree.node_stats(tree, X, jnp.asarray(y), 2)
    log_w = jaxtree.pacbayes_log_weights(tree, stats, 2.0, 1.0)
    path, on_path = route(tree, X)
    path_sum = jnp.where(on_path, jnp.exp(log_w[path]), 0.0).sum(axis=1)
    np.testing.assert_allclose(path_sum, 1.0, rtol=1e-5)
    model = jaxtree.ObliqueTreeClassifier(method="moc1", vote="pacbayes", lam1=2.0,
                                          **SEARCH).fit(X, y)
    np.testing.assert_allclose(model.predict_proba(X).sum(axis=1), 1.0, rtol=1e-5)
    # a pruning by the (min, +) pass: cost-complexity with a large penalty keeps only the root
    leaves = best_pruning(stats.errors + 1000.0 * (stats.total > 0), tree.internal,
                          layout=tree.layout)
    assert bool(leaves[0]) and int(leaves.sum()) == 1


def test_bad_input():
    X, y = xor_blobs()
    with pytest.raises(ValueError, match="method"):
        jaxtree.oblique_tree(X, y, max_depth=2, method="cart")
    with pytest.raises(ValueError, match="n_jumps"):
        jaxtree.oblique_tree(X, y, max_depth=2, n_jumps=-1)
    with pytest.raises(ValueError, match="vote"):
        jaxtree.ObliqueTreeClassifier(vote="mean").fit(X, y)
    with pytest.raises(ValueError, match="coef"):
        jaxtree.fat(jaxtree.kd_tree(X, max_depth=2), X)
    with pytest.raises(ValueError, match="delta"):
        jaxtree.margin_bound([1.0], 1.0, 10, delta=0)
