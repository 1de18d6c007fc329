"""The pruning baselines and the HS vote tuned by default: the estimators' search ranges, the
choice against an independent grid search, and the options that have nothing to tune."""

import jax.numpy as jnp
import numpy as np
import pytest

import jaxtree
from jaxtree import fitting, prune, select

DEPTH = 5


def _data():
    """300 points, a noisy linear boundary: every method should beat the majority class."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 4)).astype(np.float32)
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=300) > 0, "yes", "no")
    return X, y


@pytest.mark.parametrize("method", ["c1"] + [pytest.param(m, marks=pytest.mark.slow)
                                             for m in ("sn", "km", "optimistic", "min_size")])
def test_default_pruning_is_tuned_and_does_not_collapse(method):
    X, y = _data()
    model = jaxtree.PrunedTreeClassifier(method=method, max_depth=DEPTH).fit(X, y)
    name = "lam" if method in ("c1", "sn") else "c"
    assert set(model.best_params_) == {name}
    # the first stage is the documented range: root_penalty · 2^linspace(-14, 0, 10)
    key = "min_size_srm" if method == "min_size" else method
    log_h = float(prune.log_num_tests_of(model.tree_))
    top = float(prune.root_penalty(key, model.stats_, 0.05, log_h))
    first = model.cv_results_[f"param_{name}"][model.cv_results_["stage"] == 0]
    np.testing.assert_allclose(np.sort(first), top * prune.RELATIVE_GRID, rtol=1e-5)
    majority = max(np.mean(y == "yes"), np.mean(y == "no"))
    assert model.n_leaves_ > 1 and model.score(X, y) > majority + 0.15
    # the given value is used as is
    fixed = jaxtree.PrunedTreeClassifier(method=method, max_depth=DEPTH,
                                         **model.best_params_).fit(X, y)
    assert not hasattr(fixed, "best_params_")
    np.testing.assert_array_equal(fixed.leaf_mask_, model.leaf_mask_)


def test_c1_choice_equals_an_independent_grid_search():
    X, y = _data()
    labels = (y == "yes").astype(np.int32)
    model = jaxtree.PrunedTreeClassifier(max_depth=DEPTH).fit(X, y)
    tree = jaxtree.kd_tree(X, max_depth=DEPTH, y=labels)
    stats = jaxtree.node_stats(tree, X, jnp.asarray(labels), 2)
    folds = select.prepare_folds(tree, X, jnp.asarray(labels), 2,
                                 fitting.train_masks(X, 2))
    root_errors = min(np.sum(labels), np.sum(1 - labels))
    assert float(stats.errors[0]) == root_errors
    search = select.paper_search(tree, folds, prune.c1_votes, (("lam", +1),),
                                 base_grid=root_errors * 2.0 ** np.linspace(-14, 0, 10))
    assert model.best_params_["lam"] == pytest.approx(float(search.best_params["lam"]))


@pytest.mark.slow
def test_hs_vote_is_tuned_by_grid_and_by_gradient():
    X, y = _data()
    grid = jaxtree.HSVoteClassifier(max_depth=DEPTH).fit(X, y)
    first = grid.cv_results_["param_eta"][grid.cv_results_["stage"] == 0]
    np.testing.assert_allclose(np.sort(first), select.LOG_GRID, rtol=1e-6)
    assert grid.score(X, y) > 0.8
    grad = jaxtree.HSVoteClassifier(max_depth=DEPTH, tune="gradient").fit(X, y)
    # η left at None: the descent starts from the best points of the coarse grid
    assert min(abs(np.log2(grad.cv_results_["params"][0]["eta"]) -
                   np.log2(select.COARSE_GRID))) < 1e-5
    assert grad.best_params_["eta"] > 0 and np.isfinite(grad.cv_results_["smoothed_loss"]).all()


def test_options_with_nothing_to_tune_and_refused_ones():
    X, y = _data()
    rep = jaxtree.PrunedTreeClassifier(method="rep", max_depth=DEPTH).fit(X, y)
    assert rep.best_params_ == {} and not hasattr(rep, "cv_results_")
    with pytest.raises(ValueError, match="gradient"):
        jaxtree.PrunedTreeClassifier(tune="gradient").fit(X, y)
    with pytest.raises(ValueError, match="lam"):
        jaxtree.PrunedTreeClassifier(tune=None).fit(X, y)
    with pytest.raises(ValueError, match="c is None"):
        jaxtree.PrunedTreeClassifier(method="km", tune=None).fit(X, y)
    with pytest.raises(ValueError, match="eta"):
        jaxtree.HSVoteClassifier(tune=None).fit(X, y)
    with pytest.raises(ValueError, match="lam must be >= 0"):
        jaxtree.PrunedTreeClassifier(lam=-1.0).fit(X, y)


@pytest.mark.parametrize("per_fold", [False, True])
def test_srm_cv_errors_equal_the_grid_of_prunings(per_fold):
    # min-size with SRM is tuned from one size table per fold; the generic grid prunes and
    # votes at every setting: the same [G, k] error counts, with T0 shared or grown per fold
    X, y = _data()
    labels = jnp.asarray((y == "yes").astype(np.int32))
    masks = select.fold_masks(len(y), 2, 0)
    tree = jaxtree.kd_tree(X, max_depth=DEPTH, y=labels)
    if per_fold:
        folds = select.prepare_fold_trees(
            lambda X_part, y_part: jaxtree.cart_tree(X_part, y_part, max_depth=DEPTH,
                                                     layout="compact"), X, labels, 2, masks)
    else:
        folds = select.prepare_folds(tree, X, labels, 2, masks)
    stats = jaxtree.node_stats(tree, X, labels, 2)
    top = float(prune.root_penalty("min_size_srm", stats))
    grid = {"c": jnp.asarray(top * prune.RELATIVE_GRID, jnp.float32),
            "delta": jnp.full(10, 0.1, jnp.float32)}
    if not per_fold:   # else each fold's own log|H|, as the votes function counts it
        grid["log_num_tests"] = jnp.full(10, 2.5, jnp.float32)
    expected = select.grid_errors(tree, folds, prune.min_size_srm_votes_for(2 ** DEPTH), grid)
    # a cap below the folds' trees is raised to cover them
    got = select.srm_grid_errors(tree, folds, None, grid, max_size=1)
    assert len(np.unique(np.asarray(expected))) > 2
    np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
