"""Helmbold–Schapire vote against brute-force enumeration of prunings with the CTW prior."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtree
from jaxtree import hsvote
from test_engine import pruning_leaf_sets


def random_tree(seed, n=60, depth=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2)).astype(np.float32)
    X[rng.random(n) < 0.2, 1] = 0.0
    y = ((X[:, 0] + rng.normal(size=n)) > 0).astype(np.int32)
    tree = jaxtree.kd_tree(X, depth, min_split=int(rng.integers(2, 5)), y=y,
                           split="spread" if seed % 2 else "cycle")
    return tree, X, y


def brute_force(tree, counts, eta, loss):
    """Node weights and P(y=1|leaf of T0) by enumerating prunings with the CTW prior: every node of
    a pruning that is internal in T0 contributes ½ (leaf or split), likelihood exp(-η Σ loss)."""
    internal = np.asarray(tree.internal)
    ones, total = counts[:, 1], counts.sum(1)
    p = (ones + 0.5) / (total + 1)
    if loss == "log":
        node_loss = -(ones * np.log(p) + (total - ones) * np.log(1 - p))
    else:
        node_loss = ones * (1 - p) + (total - ones) * p
    everything = pruning_leaf_sets(internal)
    weight = np.zeros(len(internal))
    posterior = []
    for leaves in everything:
        nodes = set(leaves)
        for a in leaves:           # ancestors of the leaves are the pruning's internal nodes
            while a > 0:
                a = (a - 1) // 2
                nodes.add(a)
        prior = 0.5 ** sum(internal[a] for a in nodes)
        posterior.append(prior * math.exp(-eta * sum(node_loss[a] for a in leaves)))
    posterior = np.asarray(posterior)
    total_mass = posterior.sum()
    for q, leaves in zip(posterior, everything):
        for a in leaves:
            weight[a] += q / total_mass
    return weight, p, total_mass


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("loss", ["log", "absolute"])
def test_weights_equal_brute_force_ctw_prior(precision, seed, loss):
    tree, X, y = random_tree(seed)
    stats = jaxtree.node_stats(tree, X, y, 2)
    eta = [0.05, 0.3, 1.0][seed]
    expected, p, mass = brute_force(tree, np.asarray(stats.counts, np.float64), eta, loss)
    log_w = hsvote.hs_log_weights(tree, stats, eta, loss)
    tol = 1e-4 if precision == jnp.float32 else 1e-10
    np.testing.assert_allclose(np.exp(np.asarray(log_w)), expected, atol=tol)
    leaf, split = hsvote.hs_potentials(stats, tree.internal, eta, loss)
    assert float(jaxtree.log_partition(leaf, tree.internal, split)) == pytest.approx(
        math.log(mass), rel=tol, abs=tol)
    # the vote: P(y=1|x) = Σ over prunings of Q(T)·p(leaf of T containing x)
    path = np.asarray(jaxtree.route(tree, X)[0])
    on_path = np.asarray(jaxtree.route(tree, X)[1])
    direct = np.sum(np.where(on_path, expected[path] * p[path], 0.0), axis=1)
    vote = hsvote.hs_vote(tree, hsvote.hs_node_estimates(stats), log_w, X)
    np.testing.assert_allclose(np.asarray(vote), direct, atol=tol)


def test_ctw_prior_is_proper(precision):
    tree, X, y = random_tree(4)
    stats = jaxtree.node_stats(tree, X, y, 2)
    leaf, split = hsvote.hs_potentials(stats, tree.internal, 0.0)
    assert float(jaxtree.log_partition(leaf, tree.internal, split)) == pytest.approx(0.0, abs=1e-6)


def test_eta_grid_is_one_vmap():
    tree, X, y = random_tree(5)
    stats = jaxtree.node_stats(tree, X, y, 2)
    etas = jnp.asarray(2.0 ** np.linspace(-8, 6, 10))
    est = hsvote.hs_node_estimates(stats)

    def proba(eta):
        return hsvote.hs_vote(tree, est, hsvote.hs_log_weights(tree, stats, eta), X)

    batched = np.asarray(jax.vmap(proba)(etas))
    looped = np.stack([np.asarray(proba(eta)) for eta in etas])
    np.testing.assert_allclose(batched, looped, rtol=1e-5, atol=1e-6)


def test_refuses_multiclass():
    tree, X, _ = random_tree(0)
    y = np.arange(len(X)) % 3
    stats = jaxtree.node_stats(tree, X, y, 3)
    with pytest.raises(ValueError, match="binary"):
        hsvote.hs_log_weights(tree, stats, 1.0)


def test_estimator_matches_functional_path_and_refuses_multiclass():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 3)).astype(np.float32)
    y = np.where(X[:, 0] > 0, 7, 3)
    model = jaxtree.HSVoteClassifier(max_depth=5, eta=0.5).fit(X, y)
    stats = jaxtree.node_stats(model.tree_, X, (y == 7).astype(int), 2)
    p = hsvote.hs_vote(model.tree_, hsvote.hs_node_estimates(stats),
                       hsvote.hs_log_weights(model.tree_, stats, 0.5), X)
    np.testing.assert_allclose(model.predict_proba(X)[:, 1], np.asarray(p), rtol=1e-6)
    np.testing.assert_array_equal(model.predict(X), np.where(np.asarray(p) > 0.5, 7, 3))
    assert model.score(X, y) > 0.9
    with pytest.raises(ValueError, match="two classes"):
        jaxtree.HSVoteClassifier().fit(X, np.arange(200) % 3)


def test_predict_is_the_argmax_of_predict_proba_at_a_tie():
    """Two points of each class in mirror-image cells: at η → 0 every node keeps its prior
    weight and P = ½ exactly at every point; predict is then classes_[argmax] = the first class
    (it used to threshold P ≥ ½ to the second)."""
    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    y = np.array([3, 7, 7, 3])
    model = jaxtree.HSVoteClassifier(max_depth=1, eta=1e-12).fit(X, y)
    proba = model.predict_proba(X)
    np.testing.assert_array_equal(proba[:, 1], 0.5)
    np.testing.assert_array_equal(model.predict(X), model.classes_[np.argmax(proba, axis=1)])
    np.testing.assert_array_equal(model.predict(X), 3)


def test_hs_vote_refuses_arrays_of_another_tree():
    X = np.random.default_rng(0).normal(size=(40, 2)).astype(np.float32)
    y = np.arange(40) % 2
    tree = jaxtree.kd_tree(X, 3, y=y)
    estimates = jnp.full(tree.num_nodes, 0.5)
    with pytest.raises(ValueError, match=r"log_weights must be \[nodes\]"):
        hsvote.hs_vote(tree, estimates, jnp.zeros(tree.num_nodes - 2), X)
