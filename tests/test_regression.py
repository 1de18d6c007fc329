"""The regressors (docs/theory/regression.md) against brute force over prunings, scikit-learn's
regression tree and a plain loop over the CV grid."""

import itertools

import numpy as np
import pytest
from sklearn.tree import DecisionTreeRegressor
from sklearn.utils.estimator_checks import (check_estimator,
                                            check_sample_weight_equivalence_on_dense_data)

import jaxtree
from jaxtree import fitting, regression


def prunings(tree, node=0):
    """Every pruning of the subtree of ``tree`` at ``node`` as a tuple of its leaves."""
    result = [(node,)]
    if tree.internal[node]:
        left = int(tree.left_child[node])
        for leaves in itertools.product(prunings(tree, left), prunings(tree, left + 1)):
            result.append(leaves[0] + leaves[1])
    return result


def data(n=60, dims=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dims))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.normal(size=n)
    return X, y


def membership(tree, X):
    """``[n, nodes]`` bool: point i lies in node A (from the routed paths)."""
    path, on_path = jaxtree.route(tree, X)
    member = np.zeros((len(X), tree.num_nodes), bool)
    for i, (p, o) in enumerate(zip(np.asarray(path), np.asarray(on_path))):
        member[i, p[o]] = True
    return member


def plain_stats(tree, X, z):
    """``(N_A, mean_A, SSE_A)`` per node by direct sums (empty nodes: N = SSE = 0)."""
    member = membership(tree, X)
    total = member.sum(axis=0).astype(float)
    mean = np.array([z[m].mean() if m.any() else np.nan for m in member.T])
    sse = np.array([np.square(z[m] - z[m].mean()).sum() if m.any() else 0.0 for m in member.T])
    return total, mean, sse


def test_node_statistics_equal_direct_sums():
    X, y = data()
    tree = jaxtree.kd_tree(X, max_depth=4)
    stats = regression.regression_stats(tree, X, y)
    total, mean, sse = plain_stats(tree, X, y)
    np.testing.assert_allclose(stats.total, total)
    full = total > 0
    np.testing.assert_allclose(np.asarray(stats.mean)[full], mean[full], atol=1e-5)
    np.testing.assert_allclose(stats.sse, sse, atol=1e-4)


def test_cart_tree_predicts_as_scikit_learns_regression_tree():
    X, y = data(n=80, seed=1)
    X_test, _ = data(n=200, seed=2)
    model = jaxtree.PrunedTreeRegressor(max_depth=4, lam=0.0, tune=None).fit(X, y)
    reference = DecisionTreeRegressor(max_depth=4, random_state=0).fit(X, y)
    np.testing.assert_allclose(model.predict(X_test), reference.predict(X_test), atol=1e-5)
    np.testing.assert_allclose(model.predict(X), reference.predict(X), atol=1e-5)


@pytest.mark.parametrize("lam1, lam2", [(0.5, 1.0), (4.0, 0.1)])
def test_posterior_mean_equals_brute_force_over_prunings(lam1, lam2):
    X, y = data(n=40, seed=3)
    X_test, _ = data(n=30, seed=4)
    model = jaxtree.PACBayesTreeRegressor(partition="kd", max_depth=3, lam1=lam1,
                                          lam2=lam2).fit(X, y)
    tree = model.tree_
    z = (y - y.mean()) / y.std()
    total, mean, sse = plain_stats(tree, X, z)
    every = prunings(tree)
    assert len(every) > 5
    # φ(A) = −λ1·SSE_A/s² − λ2·√N_A − 1[N_A > 0]; s² = 1 for the standardised targets
    phi = np.where(total > 0, -lam1 * sse - lam2 * np.sqrt(total) - 1.0, 0.0)
    log_q = np.array([phi[list(leaves)].sum() for leaves in every])
    q = np.exp(log_q - log_q.max())
    q /= q.sum()
    parent_mean = mean.copy()          # an empty node predicts its parent's mean
    internal, left_child = np.asarray(tree.internal), np.asarray(tree.left_child)
    for a in np.argsort(np.asarray(tree.node_depth), kind="stable"):
        if internal[a]:
            for child in (left_child[a], left_child[a] + 1):
                if np.isnan(parent_mean[child]):
                    parent_mean[child] = parent_mean[a]
    member = membership(tree, X_test)
    expected = np.zeros(len(X_test))
    for prob, leaves in zip(q, every):
        leaves = list(leaves)
        leaf = np.asarray(leaves)[np.argmax(member[:, leaves], axis=1)]
        expected += prob * parent_mean[leaf]
    np.testing.assert_allclose(model.predict(X_test), expected * y.std() + y.mean(),
                               rtol=1e-4, atol=1e-4)


def test_cost_complexity_pruning_is_the_least_penalised_pruning():
    X, y = data(n=50, seed=5)
    lam = 1.5
    model = jaxtree.PrunedTreeRegressor(partition="kd", max_depth=3, lam=lam).fit(X, y)
    z = (y - y.mean()) / y.std()
    total, _, sse = plain_stats(model.tree_, X, z)
    every = prunings(model.tree_)
    cost = [sum(sse[a] + lam * (total[a] > 0) for a in leaves) for leaves in every]
    best = every[int(np.argmin(cost))]
    assert set(np.flatnonzero(np.asarray(model.leaf_mask_))) == set(best)
    assert 1 < model.n_leaves_ < len(every[-1])


@pytest.mark.parametrize("weighted", [False, True])
def test_cv_errors_equal_a_plain_loop_over_per_fold_trees(weighted):
    X, y = data(n=48, seed=6)
    weight = np.random.default_rng(9).uniform(0.5, 2.0, len(y)) if weighted else np.ones(len(y))
    model = jaxtree.PACBayesTreeRegressor(max_depth=3, lam2=1.0, cv=3).fit(
        X, y, sample_weight=weight if weighted else None)
    results = model.cv_results_
    # the distinct rows (x, y) dealt by their hash (the targets' float32 bits as labels)
    masks = fitting.train_masks(X, 3, 0)
    # the weighted standardisation, then the model's dtype (float32 unless x64)
    shift = np.average(y, weights=weight)
    scale = np.sqrt(np.average(np.square(y - shift), weights=weight))
    assert (model.y_shift_, model.y_scale_) == (pytest.approx(shift), pytest.approx(scale))
    dtype = np.asarray(model.tree_.threshold).dtype
    X, z = X.astype(dtype), ((y - shift) / scale).astype(dtype)
    for i in (0, 7, len(results["params"]) - 1):
        params = results["params"][i]
        for f, mask in enumerate(masks):
            # the fold's T0 and statistics on its training part, in the full fit's units
            tree = regression.regression_tree(X[mask], z[mask], max_depth=3,
                                              sample_weight=weight[mask])
            stats = regression.regression_stats(tree, X[mask], z[mask], weight[mask])
            log_w = jaxtree.pacbayes_log_weights(tree, stats, params["lam1"], 1.0)
            pred = np.asarray(regression.posterior_mean(tree, stats, log_w, X[~mask]))
            mse = np.average(np.square(pred - z[~mask]), weights=weight[~mask]) * scale ** 2
            np.testing.assert_allclose(-results[f"split{f}_test_score"][i], mse, rtol=1e-3)
    # the selected (last-stage) setting scores the best, up to the selection's tie tolerance
    score = results["mean_test_score"]
    chosen = [i for i, p in enumerate(results["params"]) if results["stage"][i] == 1
              and p["lam1"] == pytest.approx(model.best_params_["lam1"])]
    assert score[chosen[0]] == pytest.approx(score.max(), rel=1e-5)


def test_tuned_regressor_beats_the_mean_and_ranks_the_informative_feature_first():
    X, y = data(n=200, seed=7)
    X_test, y_test = data(n=200, seed=8)
    model = jaxtree.PACBayesTreeRegressor().fit(X, y)
    assert model.score(X_test, y_test) > 0.5
    importance = model.feature_importances_
    assert importance.sum() == pytest.approx(1.0) and np.argmax(importance) == 0
    assert "x0 <= " in jaxtree.export_text(model, max_depth=2)


@pytest.mark.parametrize("make", [
    lambda: jaxtree.PACBayesTreeRegressor(max_depth=3, lam1=1.0, lam2=1.0),
    lambda: jaxtree.PrunedTreeRegressor(partition="kd", max_depth=3, lam=1.0)])
def test_save_and_load_predict_the_same(make, tmp_path):
    X, y = data()
    model = make().fit(X, y)
    model.save(tmp_path / "model.npz")
    loaded = jaxtree.load(tmp_path / "model.npz")
    assert type(loaded) is type(model)
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


@pytest.mark.parametrize("params, match", [
    ({"partition": "ball"}, "partition"), ({"tune": "bound"}, "tune"), ({"cv": 1}, "cv"),
    ({"lam1": -1.0}, "lam1"), ({"lam1": None, "tune": None}, "lam1"),
    ({"cv_trees": "x"}, "cv_trees")])
def test_bad_parameters_raise_value_errors_naming_them(params, match):
    X, y = data(n=20)
    with pytest.raises(ValueError, match=match):
        jaxtree.PACBayesTreeRegressor(**{"lam1": 1.0, "lam2": 1.0, **params}).fit(X, y)


# sample_weight: the tuned fits (CART per fold, a shared KD tree) see every count weighted
WEIGHTED_MODELS = [lambda: jaxtree.PACBayesTreeRegressor(max_depth=4),
                   lambda: jaxtree.PrunedTreeRegressor(partition="kd", max_depth=4)]


@pytest.mark.parametrize("make", WEIGHTED_MODELS)
def test_integer_sample_weights_equal_repeated_rows(make):
    X, y = data(n=40, seed=10)
    X_test, _ = data(n=50, seed=11)
    counts = np.random.default_rng(12).integers(1, 4, len(y))
    weighted = make().fit(X, y, sample_weight=counts)
    repeated = make().fit(np.repeat(X, counts, axis=0), np.repeat(y, counts))
    assert weighted.best_params_ == pytest.approx(repeated.best_params_)
    np.testing.assert_allclose(weighted.node_total_[0], counts.sum(), rtol=1e-6)
    np.testing.assert_allclose(weighted.predict(X_test), repeated.predict(X_test), atol=1e-5)


@pytest.mark.parametrize("make", WEIGHTED_MODELS)
def test_zero_sample_weights_equal_removed_rows(make):
    X, y = data(n=40, seed=13)
    X_test, _ = data(n=50, seed=14)
    keep = np.random.default_rng(15).random(len(y)) < 0.7
    weighted = make().fit(X, y, sample_weight=keep.astype(float))
    removed = make().fit(X[keep], y[keep])
    assert weighted.best_params_ == pytest.approx(removed.best_params_)
    np.testing.assert_allclose(weighted.predict(X_test), removed.predict(X_test), atol=1e-5)


def test_cart_tree_compares_min_split_with_the_nodes_weight():
    X, y = data(n=3, seed=16)
    assert regression.regression_tree(X, y, sample_weight=np.ones(3)).internal[0]
    assert not regression.regression_tree(X, y, sample_weight=np.full(3, 0.5)).internal[0]


@pytest.mark.parametrize("make", [jaxtree.PACBayesTreeRegressor, jaxtree.PrunedTreeRegressor])
def test_scikit_learn_sample_weight_equivalence_with_default_tuning(make):
    """scikit-learn's check passes its own CV splits (``cv``: a list of (train, test))."""
    check_sample_weight_equivalence_on_dense_data(make.__name__, make())


@pytest.mark.parametrize("weight, match", [
    (-np.ones(20), "sample_weight"), (np.ones(19), "sample_weight"),
    (np.zeros(20), "sample_weight"), (np.full(20, np.nan), "sample_weight")])
def test_bad_sample_weights_raise_value_errors_naming_them(weight, match):
    X, y = data(n=20)
    with pytest.raises(ValueError, match=match):
        jaxtree.PrunedTreeRegressor(lam=1.0).fit(X, y, sample_weight=weight)
    with pytest.raises(ValueError, match=match):
        regression.regression_tree(X, y, sample_weight=weight)


def test_scikit_learn_checks_pass_with_given_lambdas():
    check_estimator(jaxtree.PrunedTreeRegressor(max_depth=3, lam=1.0, tune=None))


@pytest.mark.slow
@pytest.mark.parametrize("make", [jaxtree.PACBayesTreeRegressor, jaxtree.PrunedTreeRegressor])
def test_scikit_learn_checks_pass_on_the_default_constructors(make):
    check_estimator(make())
