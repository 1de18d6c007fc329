"""PAC-Bayes potentials and the weighted vote (SPEC §2) against enumeration of every pruning."""

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
from jaxtree.engine import log_partition, subtree_log_weights, tree_membership
from jaxtree.pacbayes import (pacbayes_log_weights, pacbayes_potentials,
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
    expected = np.where(total > 0, expected, 0.0)
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
        np.testing.assert_array_equal(
            np.asarray(log_w), np.asarray(subtree_log_weights(phi, tree.internal,
                                                              layout=tree.layout)))
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
    lams = jnp.asarray([[0.05, 0.05], [1.0, 1.0], [7.4, 2.0]], precision)
    log_w = jax.vmap(lambda lam: pacbayes_log_weights(tree, stats, lam[0], lam[1]))(lams)
    log_z = jax.vmap(lambda lam: log_partition(pacbayes_potentials(stats, lam[0], lam[1]),
                                               tree.internal))(lams)
    for row, scale in zip(np.asarray(log_w), np.abs(np.asarray(log_z))):
        # log-space sums of size |log Z| carry rounding eps·|log Z| (measured, float32: 7e-4 at
        # λ = 7.4 on 1500 wine points, depth 10, where |log Z| = 6381; NOTES pitfall 4)
        atol = 1e-5 + 8 * np.finfo(precision).eps * scale
        path_mass = np.where(np.asarray(on_path), np.exp(row)[np.asarray(path)], 0).sum(axis=1)
        np.testing.assert_allclose(path_mass, 1.0, atol=atol)


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
