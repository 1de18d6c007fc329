"""Soft routing (jaxtree.soft): against a brute-force walk of every root path, its limits, its
invariance to monotone transforms, missing values, and the estimator's option."""

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

import jaxtree
from jaxtree import soft
from jaxtree.tree import scale_points


def _fitted(X, y, **options):
    params = dict(lam1=4.0, lam2=0.5, softness=0.05)
    return jaxtree.PACBayesTreeClassifier(**{**params, **options}).fit(X, y)


def _brute_force_scores(model, X, softness):
    """The mixture over nodes by walking each point down every branch, with ranks from
    ``np.interp`` over the knots (distinct here: a continuous sample of more rows than knots)."""
    tree = model.tree_
    knots = np.asarray(model.quantile_knots_, np.float64)
    count = knots.shape[1]
    Z = np.asarray(scale_points(tree, X), np.float64)
    feature, threshold = np.asarray(tree.feature), np.asarray(tree.threshold, np.float64)
    internal, left = np.asarray(tree.internal), np.asarray(tree.left_child)
    mass = np.exp(np.asarray(model.node_log_weights_, np.float64))[:, None] \
        * np.asarray(model.node_proba_, np.float64)
    scores = np.zeros((len(X), mass.shape[1]))
    for i, z in enumerate(Z):
        stack = [(0, 1.0)]
        while stack:
            node, reach = stack.pop()
            scores[i] += reach * mass[node]
            if internal[node]:
                f = feature[node]
                rank = np.interp(z[f], knots[f], np.arange(count) + 0.5, left=0.0, right=count)
                cut = np.sum(knots[f] <= threshold[node])
                right = norm.cdf((rank - cut) / (count * softness))
                stack += [(left[node], reach * (1 - right)), (left[node] + 1, reach * right)]
    return scores


@pytest.mark.parametrize("partition", ["cart", "kd"])
def test_soft_scores_equal_a_walk_down_every_branch(partition):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 3)).astype(np.float32)
    y = (X[:, 0] + 0.5 * X[:, 1] + rng.normal(scale=0.5, size=600) > 0).astype(int)
    model = _fitted(X, y, partition=partition, max_depth=5, softness=0.1)
    assert len(np.unique(np.asarray(model.quantile_knots_)[0])) == soft.KNOTS
    points = rng.normal(size=(40, 3)).astype(np.float32)
    expected = _brute_force_scores(model, points, 0.1)
    np.testing.assert_allclose(model.predict_proba(points), expected, atol=2e-5)
    assert not np.allclose(expected, _fitted(X, y, partition=partition, max_depth=5,
                                              softness=0).predict_proba(points), atol=1e-3)


def test_a_vanishing_softness_is_the_hard_vote():
    rng = np.random.default_rng(1)
    X = rng.integers(0, 6, size=(150, 2)).astype(np.float32)    # ties: values on the cuts
    y = (X[:, 0] + X[:, 1] + rng.integers(0, 3, 150) > 6).astype(int)
    hard = _fitted(X, y, softness=0)
    np.testing.assert_allclose(_fitted(X, y, softness=1e-6).predict_proba(X),
                               hard.predict_proba(X), atol=1e-5)


def test_rows_sum_to_one_and_a_large_softness_tends_to_the_root():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 2)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    proba = _fitted(X, y, softness=0.05).predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1, atol=1e-5)
    blurred = _fitted(X, y, softness=1e6).predict_proba(X)
    # every point spread evenly over each split: the same mixture everywhere
    np.testing.assert_allclose(blurred, np.broadcast_to(blurred[:1], blurred.shape), atol=1e-4)


def test_a_monotone_transform_of_a_feature_keeps_the_predictions():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 2)).astype(np.float32)               # fewer rows than knots
    y = (X[:, 0] * X[:, 1] + 0.3 * rng.normal(size=200) > 0).astype(int)
    warped = X.copy()
    warped[:, 0] = np.exp(2 * X[:, 0]) + 5
    options = dict(partition="kd", split="cycle", max_depth=4)      # cuts at the same ranks
    proba = _fitted(X, y, **options).predict_proba(X)
    np.testing.assert_allclose(_fitted(warped, y, **options).predict_proba(warped), proba,
                               atol=1e-5)


def test_a_missing_value_crosses_each_split_by_its_learnt_side():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(400, 2)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    X[rng.random(400) < 0.2, 0] = np.nan
    y[np.isnan(X[:, 0])] = 1                                       # missing means class 1
    model = _fitted(X, y)
    proba = model.predict_proba(np.array([[np.nan, 0.0], [np.nan, 2.0]], np.float32))
    assert np.all(np.isfinite(proba)) and np.all(proba[:, 1] > 0.9)


def test_the_pure_fit_and_the_estimator_predict_alike():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 3)).astype(np.float32)
    y = (X[:, 0] + X[:, 2] > 0).astype(np.int32)
    model = jaxtree.fit(X, y, num_classes=2, partition="kd", lam1=4.0, lam2=0.5, softness=0.05)
    estimator = _fitted(X, y, partition="kd", split="spread")
    np.testing.assert_allclose(jaxtree.predict_proba(model, X), estimator.predict_proba(X),
                               atol=1e-5)


def test_softness_auto_is_hard_with_certify_and_a_given_softness_is_refused_there():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(200, 2)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    given = dict(lam1=4.0, lam2=0.5)                  # no CV: the routing is what is checked
    assert jaxtree.PACBayesTreeClassifier(**given).fit(X, y).softness_ == soft.DEFAULT_SOFTNESS
    certified = jaxtree.PACBayesTreeClassifier(certify=True, **given).fit(X, y)
    assert certified.softness_ == 0 and certified.quantile_knots_ is None
    for options in ({"certify": True}, {"distributed": True}):
        with pytest.raises(ValueError, match="softness"):
            jaxtree.PACBayesTreeClassifier(softness=0.1, **options).fit(X, y)


@pytest.mark.parametrize("softness", [-0.1, float("nan"), float("inf"), "soft", True])
def test_a_bad_softness_is_named(softness):
    X = np.arange(8.0)[:, None]
    y = np.array([0, 0, 0, 1, 0, 1, 1, 1])
    with pytest.raises(ValueError, match="softness"):
        jaxtree.PACBayesTreeClassifier(softness=softness).fit(X, y)
    with pytest.raises(ValueError, match="softness"):
        jaxtree.fit(X, y, num_classes=2, lam1=1.0, lam2=1.0, softness=softness)


def test_a_saved_model_predicts_the_same_soft_scores(tmp_path):
    rng = np.random.default_rng(7)
    X = rng.normal(size=(200, 2)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    model = jaxtree.PACBayesTreeClassifier().fit(X, y)
    model.save(tmp_path / "model.npz")
    loaded = jaxtree.load(tmp_path / "model.npz")
    np.testing.assert_array_equal(loaded.predict_proba(X), model.predict_proba(X))
    assert loaded.softness_ == model.softness_ > 0


def test_knots_are_weighted_quantiles_ignoring_padding():
    values = np.array([[3.0], [1.0], [2.0], [100.0]], np.float32)
    weight = jnp.array([1.0, 1.0, 1.0, 0.0])
    tree = jaxtree.kd_tree(values[:3], max_depth=1)
    knots = np.asarray(soft.quantile_knots(tree, values, weight, knots=5))
    Z = np.asarray(scale_points(tree, values[:3]))[:, 0]
    assert knots[0, 0] == Z.min() and knots[0, -1] == Z.max()
    assert set(knots[0]) <= set(Z)
