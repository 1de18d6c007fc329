"""PAC-Bayes potentials and the weighted vote (docs/theory/pacbayes.md) against enumeration of every pruning."""

import gzip
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxtree
from jaxtree.build import dyadic_tree, kd_tree
from jaxtree.engine import subtree_log_weights, tree_membership
from jaxtree.pacbayes import (node_predictive, pacbayes_log_weights, pacbayes_potentials,
                              pacbayes_theory_potentials, vote)
from jaxtree.stats import node_stats
from jaxtree.tree import route
from test_engine import prunings
from test_tree import walk

DATA = pathlib.Path(__file__).resolve().parents[1] / "experiments" / "data"


def load(name, rows):
    """The first ``rows`` rows of a bundled dataset: ``X [rows, D]``, ``y [rows]`` in 0..L-1."""
    with gzip.open(DATA / f"{name}.csv.gz", "rt") as f:
        table = np.loadtxt(f, delimiter=",", skiprows=1, max_rows=rows)
    y = np.unique(table[:, -1], return_inverse=True)[1]
    return table[:, :-1], y


def data(seed, n=50):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = (X[:, 0] + 0.7 * rng.normal(size=n) > 0).astype(int) + (X[:, 1] > 1)
    return X, y


def reference_vote(tree, phi, label, X, num_classes):
    """``[n, L]``: Σ_T Q(T)·1[label of T's leaf containing x = l], Q(T) ∝ exp(Σ_{leaves} φ)."""
    trees = prunings(np.asarray(tree.internal))
    scores = np.array([phi[list(leaves)].sum() for leaves, _ in trees])
    q = np.exp(scores - scores.max())
    q /= q.sum()
    result = np.zeros((len(X), num_classes))
    for i, x in enumerate(X):
        path = walk(tree, x)
        for qt, (leaves, _) in zip(q, trees):
            leaf = set(path) & set(leaves)
            assert len(leaf) == 1                  # a pruning has one leaf on every path
            result[i, label[leaf.pop()]] += qt
    return result


def test_practical_potentials_formula(precision):
    X, y = data(0)
    tree = dyadic_tree(X, max_depth=4, y=y, layout="complete")
    stats = node_stats(tree, X, jnp.asarray(y), 3)
    counts = np.asarray(stats.counts, np.float64)
    total = counts.sum(axis=1)
    errors = total - counts.max(axis=1)
    expected = np.where(total > 0, -2.5 * errors - 0.5 * np.sqrt(total) - 1, 0.0)
    phi = pacbayes_potentials(stats, 2.5, 0.5)
    assert phi.dtype == precision
    np.testing.assert_allclose(np.asarray(phi), expected, rtol=1e-6)
    assert (total == 0).any()                      # empty cells were exercised


def test_theory_potentials_formula(precision):
    X, y = data(1)
    tree = kd_tree(X, max_depth=3, layout="complete")
    stats = node_stats(tree, X, jnp.asarray(y), 3)
    counts = np.asarray(stats.counts, np.float64)
    total, n = counts.sum(axis=1), len(X)
    errors = total - counts[np.arange(len(total)), np.asarray(stats.label)]
    size = np.asarray(jax.jit(tree_membership)(tree.internal)).sum()
    lam, delta = 0.7, 0.1
    expected = -lam * errors - lam * n * np.sqrt(2 * total / n * np.log(size / delta) / n) - 3 * 3
    in_tree = np.asarray(jax.jit(tree_membership)(tree.internal))
    expected = np.where(in_tree, expected, 0.0)     # every leaf of T0 pays 3·D0, empty ones too
    phi = jax.jit(pacbayes_theory_potentials)(tree, stats, lam, delta)
    np.testing.assert_allclose(np.asarray(phi),
                               expected, rtol=1e-5)


@pytest.mark.parametrize("builder", [kd_tree, dyadic_tree])
def test_vote_matches_enumeration(precision, builder):
    X, y = data(2)
    tree = builder(X, max_depth=4, min_split=4, y=y, layout="complete")
    assert len(prunings(np.asarray(tree.internal))) > 10
    stats = node_stats(tree, X, jnp.asarray(y), 3)
    X_test = np.concatenate([X[:20], np.random.default_rng(2).normal(size=(20, 2)) * 2])
    for lam1, lam2 in ((1.0, 1.0), (0.1, 0.3), (4.0, 0.05)):
        phi = pacbayes_potentials(stats, lam1, lam2)
        log_w = pacbayes_log_weights(tree, stats, lam1, lam2)
        # the counts path forms the local offsets from the counts, the potentials path from φ:
        # the same weights up to the rounding of the offsets
        np.testing.assert_allclose(
            np.exp(np.asarray(log_w)),
            np.exp(np.asarray(subtree_log_weights(phi, tree.internal, layout=tree.layout))),
            atol=1e-6 if precision == jnp.float32 else 1e-14)
        scores = np.asarray(vote(tree, stats.label, log_w, X_test, 3))
        expected = reference_vote(tree, np.asarray(phi, np.float64), np.asarray(stats.label),
                                  X_test, 3)
        atol = 1e-5 if precision == jnp.float32 else 1e-12
        np.testing.assert_allclose(scores, expected, atol=atol)
        np.testing.assert_allclose(scores.sum(axis=1), 1.0, atol=atol)
        clear = np.sort(expected, axis=1)[:, -1] - np.sort(expected, axis=1)[:, -2] > 1e-4
        np.testing.assert_array_equal(scores.argmax(axis=1)[clear],
                                      expected.argmax(axis=1)[clear])


@pytest.mark.parametrize("name,builder,depth", [("wine", kd_tree, 8), ("spam", dyadic_tree, 8)])
def test_path_sum_on_real_trees(precision, name, builder, depth):
    """Weights along every training point's root-to-leaf path sum to 1."""
    X, y = load(name, 1000)
    num_classes = int(y.max()) + 1
    tree = builder(X, max_depth=depth, y=y, split="spread", layout="complete")
    stats = node_stats(tree, X, jnp.asarray(y), num_classes)
    path, on_path = route(tree, X)
    lams = jnp.asarray([[0.05, 0.05], [1.0, 1.0], [7.4, 2.0], [4096.0, 1.0]], precision)
    log_w = jax.vmap(lambda lam: pacbayes_log_weights(tree, stats, lam[0], lam[1]))(lams)
    for row in np.asarray(log_w):
        # a node's stop and split probabilities come from one log-odds: paths sum to 1 to the
        # rounding of numbers of size 1, whatever the size of the potentials
        path_mass = np.where(np.asarray(on_path), np.exp(row)[np.asarray(path)], 0).sum(axis=1)
        np.testing.assert_allclose(path_mass, 1.0, atol=1e-5)


def test_float32_vote_agrees_with_float64():
    X, y = data(3)
    results = []
    for x64 in (False, True):
        with jax.enable_x64(x64):
            tree = kd_tree(X, max_depth=4, y=y, layout="complete")
            stats = node_stats(tree, X, jnp.asarray(y), 3)
            log_w = pacbayes_log_weights(tree, stats, 1.5, 0.5)
            results.append(np.asarray(vote(tree, stats.label, log_w, X, 3), np.float64))
    np.testing.assert_allclose(results[0], results[1], atol=1e-5)


def test_offsets_from_counts_are_the_potentials_offsets():
    """pacbayes_offsets (from the counts) equals the offsets of the potentials, practical and
    theory, with empty cells in the tree (float64; the practical ones on the compact layout
    too)."""
    with jax.enable_x64(True):
        X, y = data(5, n=80)
        tree = dyadic_tree(X, max_depth=5, y=y, layout="complete")
        stats = node_stats(tree, X[:50], jnp.asarray(y[:50]), 3)
        assert (np.asarray(stats.total)[np.asarray(tree_membership(tree.internal,
                                                                   tree.layout))] == 0).any()
        pairs = [(jaxtree.pacbayes_offsets(tree, stats, 2.5, 0.7),
                  pacbayes_potentials(stats, 2.5, 0.7)),
                 (jaxtree.pacbayes_theory_offsets(tree, stats, 0.3, 0.1),
                  pacbayes_theory_potentials(tree, stats, 0.3, 0.1))]
        for offset, phi in pairs:
            expected = jaxtree.local_offsets(phi, tree.internal, layout=tree.layout)
            np.testing.assert_allclose(np.asarray(offset), np.asarray(expected), rtol=1e-12,
                                       atol=1e-12)
        np.testing.assert_allclose(
            np.asarray(jaxtree.pacbayes_theory_log_weights(tree, stats, 0.3, 0.1)),
            np.asarray(subtree_log_weights(pairs[1][1], tree.internal, layout=tree.layout)),
            atol=1e-12)
        compact = dyadic_tree(X, max_depth=5, y=y, layout="compact")
        stats = node_stats(compact, X[:50], jnp.asarray(y[:50]), 3)
        np.testing.assert_allclose(
            np.asarray(jaxtree.pacbayes_offsets(compact, stats, 2.5, 0.7)),
            np.asarray(jaxtree.local_offsets(pacbayes_potentials(stats, 2.5, 0.7),
                                             compact.internal, layout=compact.layout)),
            rtol=1e-12, atol=1e-12)


def noisy_sample(n, seed=0, flip=0.3):
    """``n`` points in [0, 1]^3 labelled by x0 + x1 > 1, a fraction ``flip`` of labels flipped."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 3)).astype(np.float32)
    y = ((X[:, 0] + X[:, 1] > 1) ^ (rng.random(n) < flip)).astype(np.int32)
    return X, y


def weights_in_both_precisions(tree, stats, lam1, lam2):
    """``(float32, float64)`` weights of one tree and one sample (the counts are integers: the
    float64 statistics are the float32 ones, exactly)."""
    w32 = np.exp(np.asarray(pacbayes_log_weights(tree, stats, lam1, lam2), np.float64))
    with jax.enable_x64(True):
        stats64 = jaxtree.NodeStats(jnp.asarray(np.asarray(stats.counts), jnp.float64),
                                    stats.label)
        w64 = np.exp(np.asarray(pacbayes_log_weights(tree, stats64, lam1, lam2)))
    return w32, w64


def test_float32_weights_agree_with_float64_at_huge_potentials():
    """5,000 noisy points at λ1 = 4000: potentials of size ~6e6 at the root, yet the float32
    weights (offsets formed from the counts) are the float64 ones within 1e-5."""
    X, y = noisy_sample(5_000)
    tree = kd_tree(X, max_depth=9, y=y, layout="complete")
    stats = node_stats(tree, X, jnp.asarray(y), 2)
    assert 4000 * float(stats.errors[0]) > 5e6
    w32, w64 = weights_in_both_precisions(tree, stats, 4000.0, 1.0)
    np.testing.assert_allclose(w32, w64, atol=1e-5)


@pytest.mark.slow
def test_float32_weights_agree_with_float64_on_a_million_points():
    """10^6 noisy points, KD tree of depth 19, λ1 = 64 (λ1·E ≈ 2e7 at the root)."""
    X, y = noisy_sample(1_000_000)
    tree = kd_tree(X, max_depth=19, y=y, layout="complete")
    stats = node_stats(tree, X, jnp.asarray(y), 2)
    w32, w64 = weights_in_both_precisions(tree, stats, 64.0, 1.0)
    np.testing.assert_allclose(w32, w64, atol=1e-5)


def test_gradient_in_the_lambdas_is_finite_and_right():
    """d/dθ of a validation cross-entropy, λ = e^θ, with empty cells in the tree (float64, to
    compare with central differences; float32 finiteness is covered in test_engine.py)."""
    with jax.enable_x64(True):
        X, y = data(4)
        tree = dyadic_tree(X, max_depth=4, y=y, layout="complete")
        stats = node_stats(tree, X[:30], jnp.asarray(y[:30]), 3)
        assert (np.asarray(stats.total) == 0).any()

        @jax.jit
        def loss(theta):
            log_w = pacbayes_log_weights(tree, stats, jnp.exp(theta[0]), jnp.exp(theta[1]))
            scores = vote(tree, stats.label, log_w, X[30:], 3)
            return -jnp.mean(jnp.log(scores[jnp.arange(20), y[30:]] + 1e-6))

        grad_loss = jax.jit(jax.grad(loss))
        for theta in ([0.0, 0.0], [-8.0, 6.0], [10.0, -3.0]):
            assert np.isfinite(np.asarray(grad_loss(jnp.asarray(theta)))).all()
        theta = jnp.asarray([0.3, -0.2])
        for k in range(2):
            e = jnp.zeros(2).at[k].set(1e-6)
            numeric = (loss(theta + e) - loss(theta - e)) / 2e-6
            assert float(grad_loss(theta)[k]) == pytest.approx(float(numeric), rel=1e-4,
                                                                abs=1e-7)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), classes=st.integers(1, 3), distinct=st.integers(1, 4),
       log_lam=st.sampled_from([-3, 0, 3, 6]), kind=st.sampled_from(["kd", "dyadic"]))
def test_pipeline_properties(seed, classes, distinct, log_lam, kind):
    """Duplicate points, one class, empty cells, |φ| up to ~1e6·n: the scores are finite,
    non-negative and sum to 1; with a single class every point gets that class."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, distinct, (24, 2)).astype(float)
    y = rng.integers(0, classes, 24)
    builder = kd_tree if kind == "kd" else dyadic_tree
    with jax.enable_x64(True):
        tree = builder(X, max_depth=3, y=y, layout="complete")
        stats = node_stats(tree, X, jnp.asarray(y), 3)
        log_w = pacbayes_log_weights(tree, stats, 10.0 ** log_lam, 10.0 ** log_lam)
        X_test = X + rng.uniform(-1, 1, X.shape)
        scores = np.asarray(vote(tree, stats.label, log_w, X_test, 3))
    assert np.isfinite(scores).all() and (scores >= 0).all()
    np.testing.assert_allclose(scores.sum(axis=1), 1.0, atol=1e-9)
    if classes == 1:
        np.testing.assert_allclose(scores[:, 0], 1.0)


def test_vote_refuses_arrays_of_another_tree():
    X = np.random.default_rng(0).normal(size=(40, 2)).astype(np.float32)
    y = np.arange(40) % 2
    tree = jaxtree.kd_tree(X, 3, y=y)
    stats = jaxtree.node_stats(tree, X, y, 2)
    log_w = jaxtree.pacbayes_log_weights(tree, stats, 1.0, 1.0)
    with pytest.raises(ValueError, match=r"\[nodes\]"):
        jaxtree.vote(tree, stats.label, log_w[:-2], X, 2)
    assert jaxtree.vote(tree, stats.label, log_w, X, 2).shape == (40, 2)


def test_a_mixture_of_posteriors_is_the_average_of_their_weights():
    """``w(A)`` is the probability that A is a leaf of the random pruning, so a mixture of two
    posteriors over prunings has the average of their weights: a posterior again (the weights
    on every root-to-leaf path sum to 1), whose predictive is the average of the two
    predictives (``experiments/selection_screens.py`` mixes the λ grid's settings so)."""
    X, y = data(5, n=80)
    tree = kd_tree(X, max_depth=5, min_split=4, y=y, layout="complete")
    stats = node_stats(tree, X, jnp.asarray(y), 3)
    proba = jaxtree.class_frequencies(tree, stats.counts, 0.5)
    X_test = np.concatenate([X[:20], np.random.default_rng(5).normal(size=(20, 2)) * 2])
    first = pacbayes_log_weights(tree, stats, 1.0, 1.0)
    second = pacbayes_log_weights(tree, stats, 8.0, 0.05)
    mixed = jnp.log(0.3 * jnp.exp(first) + 0.7 * jnp.exp(second))
    path, on_path = route(tree, X_test)
    np.testing.assert_allclose(jnp.sum(jnp.exp(mixed)[path] * on_path, axis=1), 1.0, atol=1e-5)
    predictive = lambda log_w: np.asarray(jaxtree.posterior_predictive(  # noqa: E731
        tree, proba, log_w, X_test))
    assert np.abs(predictive(first) - predictive(second)).max() > 0.05   # two distinct posteriors
    np.testing.assert_allclose(predictive(mixed),
                               0.3 * predictive(first) + 0.7 * predictive(second), atol=1e-5)


def test_node_predictive_at_the_leaf_is_the_posterior_predictive(precision):
    """The per-node predictive of one top-down pass, read at each point's leaf: the vote of
    every pruning by enumeration (one-hot node labels) and, with smoothed class frequencies on
    a compact CART T0 grown by JAX, :func:`jaxtree.posterior_predictive`."""
    X, y = data(3)
    tree = kd_tree(X, max_depth=4, min_split=4, y=y, layout="complete")
    stats = node_stats(tree, X, jnp.asarray(y), 3)
    X_test = np.concatenate([X[:20], np.random.default_rng(3).normal(size=(20, 2)) * 2])
    leaf = np.asarray(route(tree, X_test)[0])[:, -1]
    atol = 1e-5 if precision == jnp.float32 else 1e-12
    one_hot = jax.nn.one_hot(stats.label, 3, dtype=precision)
    for lam1, lam2 in ((1.0, 1.0), (4.0, 0.05)):
        log_w = pacbayes_log_weights(tree, stats, lam1, lam2)
        expected = reference_vote(tree, np.asarray(pacbayes_potentials(stats, lam1, lam2),
                                                   np.float64), np.asarray(stats.label), X_test, 3)
        np.testing.assert_allclose(np.asarray(node_predictive(tree, one_hot, log_w))[leaf],
                                   expected, atol=atol)
    X, y = load("wine", 400)
    config = jaxtree.GrowConfig(partition="cart", max_depth=10, width=64,
                                num_classes=int(y.max()) + 1, bins=16)
    tree, _ = jaxtree.grow_tree(X, y, np.ones(len(y)), config)
    stats = node_stats(tree, X, jnp.asarray(y), config.num_classes)
    proba = jaxtree.class_frequencies(tree, stats.counts, 0.5)
    log_w = pacbayes_log_weights(tree, stats, 2.0, 0.3)
    leaf = np.asarray(route(tree, X)[0])[:, -1]
    np.testing.assert_allclose(np.asarray(node_predictive(tree, proba, log_w))[leaf],
                               jaxtree.posterior_predictive(tree, proba, log_w, X), atol=atol)
    # G posteriors at once ([nodes, G] log weights -> [nodes, L, G]): each one's pass
    settings = ((2.0, 0.3), (0.5, 4.0), (8.0, 1e-3))
    stacked = jnp.stack([pacbayes_log_weights(tree, stats, *lam) for lam in settings], axis=1)
    batched = np.asarray(node_predictive(tree, proba, stacked))
    assert batched.shape == (tree.num_nodes, config.num_classes, len(settings))
    for g, lam in enumerate(settings):
        single = node_predictive(tree, proba, pacbayes_log_weights(tree, stats, *lam))
        np.testing.assert_allclose(batched[..., g], np.asarray(single), rtol=1e-6, atol=1e-12)
