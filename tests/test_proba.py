"""Probabilities: smoothed class frequencies, the posterior predictive over prunings, the hard-label
vote kept beside it, and selection by log-loss / Brier score. References are brute force (every
pruning enumerated, every point walked) and scikit-learn's metrics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.metrics import brier_score_loss, log_loss

import jaxtree
from jaxtree import fitting, select
from jaxtree.build import dyadic_tree, kd_tree
from jaxtree.pacbayes import node_votes, pacbayes_log_weights, pacbayes_potentials
from jaxtree.stats import class_frequencies, node_stats
from small_models import small_data, small_estimators
from test_engine import prunings
from test_tree import walk

L = 3


def data(seed, n=60):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = (X[:, 0] + 0.7 * rng.normal(size=n) > 0).astype(int) + (X[:, 1] > 1)
    return X, y


def reference_frequencies(tree, X, y, alpha):
    """``({node: [L] row}`` of every node of T0 (slots under a leaf are not nodes), by walking
    every training point: ``(N_{A,l} + α) / (N_A + L·α)`` at a node with points; an empty node
    takes the row of its nearest non-empty ancestor."""
    counts = np.zeros((tree.num_nodes, L))
    for x, label in zip(X, y):
        for node in walk(tree, x):
            counts[node, label] += 1
    parent = {int(c): p for p in range(tree.num_nodes) if np.asarray(tree.internal)[p]
              for c in (np.asarray(tree.left_child)[p], np.asarray(tree.left_child)[p] + 1)}
    out = {}
    for node in sorted(set(parent) | {0}):   # parents come before their children
        total = counts[node].sum()
        out[node] = ((counts[node] + alpha) / (total + L * alpha) if total > 0
                     else out[parent[node]] if node in parent else np.full(L, 1.0 / L))
    return out


def reference_predictive(tree, phi, node_proba, X):
    """``[n, L]``: Σ_T Q(T)·p̂(· | leaf of T containing x), Q(T) ∝ exp(Σ_{leaves} φ)."""
    trees = prunings(np.asarray(tree.internal))
    scores = np.array([phi[list(leaves)].sum() for leaves, _ in trees])
    q = np.exp(scores - scores.max())
    q /= q.sum()
    out = np.zeros((len(X), node_proba.shape[1]))
    for i, x in enumerate(X):
        path = set(walk(tree, x))
        for qt, (leaves, _) in zip(q, trees):
            (leaf,) = path & set(leaves)
            out[i] += qt * node_proba[leaf]
    return out


def small_problem(builder=dyadic_tree, seed=0, layout="complete"):
    X, y = data(seed)
    tree = builder(X, max_depth=4, min_split=4, y=y, layout=layout)
    return X, y, tree, node_stats(tree, X, jnp.asarray(y), L)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_class_frequencies_match_walked_counts(precision, alpha):
    X, y, tree, stats = small_problem()
    assert (np.asarray(stats.total) == 0).any()          # empty cells are exercised
    freq = class_frequencies(tree, stats.counts, alpha)
    assert freq.dtype == precision and freq.shape == (tree.num_nodes, L)
    expected = reference_frequencies(tree, X, y, alpha)
    nodes = sorted(expected)
    np.testing.assert_allclose(np.asarray(freq)[nodes], [expected[n] for n in nodes],
                               rtol=1e-6 if precision == jnp.float32 else 1e-12)
    # the argmax of a node's row is its label l(A) (ties to the smallest label in both)
    np.testing.assert_array_equal(np.asarray(freq)[nodes].argmax(axis=1),
                                  np.asarray(stats.label)[nodes])


@pytest.mark.slow
def test_class_frequencies_vmap_and_grad_over_the_smoothing():
    X, y, tree, stats = small_problem()
    alphas = jnp.asarray([0.0, 0.5, 2.0])
    batched = jax.vmap(lambda a: class_frequencies(tree, stats.counts, a))(alphas)
    for a, row in zip(alphas, batched):
        np.testing.assert_allclose(row, class_frequencies(tree, stats.counts, float(a)),
                                   rtol=1e-6)
    # the derivative in α against a finite difference
    f = lambda a: class_frequencies(tree, stats.counts, a)[0, 0]
    h = 1e-3
    np.testing.assert_allclose(jax.grad(f)(0.5), (f(0.5 + h) - f(0.5 - h)) / (2 * h), rtol=1e-2)


@pytest.mark.parametrize("builder", [pytest.param(kd_tree, marks=pytest.mark.slow), dyadic_tree])
def test_posterior_predictive_matches_enumeration(precision, builder):
    """Σ_A w(A)·p̂(· | A) along the path is the average over every pruning of its leaf's p̂;
    rows sum to 1 and lie strictly inside (0, 1) when the prior is > 0."""
    X, y, tree, stats = small_problem(builder)
    assert len(prunings(np.asarray(tree.internal))) > 10
    X_test = np.concatenate([X[:20], np.random.default_rng(3).normal(size=(20, 2)) * 2])
    node_proba = class_frequencies(tree, stats.counts, 0.5)
    atol = 1e-5 if precision == jnp.float32 else 1e-12
    for lam1, lam2 in ((1.0, 1.0), (0.1, 0.3), (8.0, 0.05)):
        log_w = pacbayes_log_weights(tree, stats, lam1, lam2)
        proba = np.asarray(jaxtree.posterior_predictive(tree, node_proba, log_w, X_test))
        phi = np.asarray(pacbayes_potentials(stats, lam1, lam2), np.float64)
        np.testing.assert_allclose(proba, reference_predictive(
            tree, phi, np.asarray(node_proba, np.float64), X_test), atol=atol)
        np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=atol)
        assert (proba > 0).all() and (proba < 1).all()


def test_zero_prior_on_one_pruning_gives_its_leaf_frequencies(precision):
    """All weight on one pruning and α = 0: the training points' class frequencies in the
    pruning leaf that holds x (the leaf's own counts; an empty leaf takes its parent's)."""
    X, y, tree, stats = small_problem(kd_tree)
    node_proba = class_frequencies(tree, stats.counts, 0.0)
    X_test = np.random.default_rng(4).normal(size=(30, 2))
    for leaves, _ in prunings(np.asarray(tree.internal))[::7]:
        log_w = np.full(tree.num_nodes, -np.inf)
        log_w[list(leaves)] = 0.0
        proba = np.asarray(jaxtree.posterior_predictive(tree, node_proba, jnp.asarray(log_w),
                                                        X_test))
        for x, row in zip(X_test, proba):
            (leaf,) = set(walk(tree, x)) & set(leaves)
            members = [label for point, label in zip(X, y) if leaf in walk(tree, point)]
            if members:
                np.testing.assert_allclose(row, np.bincount(members, minlength=L) / len(members),
                                           atol=1e-6)


def test_majority_option_reproduces_the_hard_vote_exactly():
    """``proba="majority"`` is the paper's vote, bit for bit; the votes functions without a
    smoothing give the pair ``(w, l(A))`` as before."""
    X, y, tree, stats = small_problem(kd_tree)
    est = jaxtree.PACBayesTreeClassifier(partition="kd", split="cycle", max_depth=4,
                                         min_split=4, lam1=2.0, lam2=0.5,
                                         proba="majority", softness=0).fit(X, y)
    log_w = pacbayes_log_weights(tree, stats, 2.0, 0.5)
    np.testing.assert_array_equal(est.predict_proba(X),
                                  np.asarray(jaxtree.vote(tree, stats.label, log_w, X, L)))
    weight, label = select.pacbayes_votes(tree, stats, {"lam1": 2.0, "lam2": 0.5})
    np.testing.assert_array_equal(weight, jnp.exp(log_w))
    np.testing.assert_array_equal(label, stats.label)
    mask = jnp.asarray(np.asarray(tree.internal) == 0)
    weight, label = node_votes(tree, stats, mask)
    np.testing.assert_array_equal(weight, mask.astype(weight.dtype))
    # a pruning's hard vote: one-hot leaf labels
    pruned = jaxtree.PrunedTreeClassifier(max_depth=4, min_split=4, lam=0.5,
                                          proba="majority").fit(X, y)
    proba = pruned.predict_proba(X)
    assert set(np.unique(proba)) <= {0.0, 1.0}
    np.testing.assert_array_equal(pruned.classes_[proba.argmax(axis=1)], pruned.predict(X))


def deepest_marked(tree, X, marked):
    """``[n]`` the deepest node of ``marked`` ``[nodes]`` on each point's path (the library's
    routing, which oblique splits need)."""
    path, on_path = (np.asarray(a) for a in jaxtree.route(tree, jnp.asarray(X, jnp.float32)))
    hit = on_path & marked[path]
    return path[np.arange(len(X)), hit.shape[1] - 1 - np.argmax(hit[:, ::-1], axis=1)]


@pytest.mark.parametrize("kind", ["PrunedTreeClassifier",
                                  pytest.param("ObliqueTreeClassifier", marks=pytest.mark.slow)])
def test_estimators_give_smoothed_leaf_frequencies(kind):
    """PrunedTreeClassifier: the pruning leaf's class frequencies smoothed by α;
    ObliqueTreeClassifier (leaf vote): its T0 leaf's. ``predict`` is their argmax. (The shared
    small settings and data: what other tests compiled serves here.)"""
    X, y = small_data()
    alpha = 0.5
    (est,) = [e for e in small_estimators() if type(e).__name__ == kind]
    est.set_params(smoothing=alpha).fit(X, y)
    leaves = (np.asarray(est.leaf_mask_) if hasattr(est, "leaf_mask_")
              else ~np.asarray(est.tree_.internal))
    train_leaf = deepest_marked(est.tree_, X, leaves)
    X_test = X + 0.01
    proba = est.predict_proba(X_test)
    for leaf, row in zip(deepest_marked(est.tree_, X_test, leaves), proba):
        counts = np.bincount(y[train_leaf == leaf], minlength=2)
        if counts.sum():
            np.testing.assert_allclose(row, (counts + alpha) / (counts.sum() + 2 * alpha),
                                       rtol=1e-5)
    assert (proba > 0).all() and (proba < 1).all()
    np.testing.assert_array_equal(est.predict(X_test), est.classes_[np.argmax(proba, axis=1)])


@pytest.mark.parametrize("num_classes", [2, 3])
def test_point_losses_are_scikit_learns(num_classes):
    rng = np.random.default_rng(num_classes)
    scores = rng.uniform(size=(40, num_classes)) ** 3
    scores[0] = np.eye(num_classes)[1]                     # a hard 0/1 row
    label = rng.integers(0, num_classes, 40)
    label[0] = 0                                           # ... that is wrong: clipped log-loss
    proba = scores / scores.sum(axis=1, keepdims=True)
    with jax.enable_x64(True):
        losses = lambda s: np.asarray(select.point_losses(jnp.asarray(scores), jnp.asarray(label),
                                                          s))
        np.testing.assert_allclose(losses("neg_log_loss").mean(),
                                   log_loss(label, proba, labels=np.arange(num_classes)),
                                   rtol=1e-10)
        brier = (brier_score_loss(label, proba[:, 1]) if num_classes == 2 else
                 brier_score_loss(label, proba, labels=np.arange(num_classes)))
        np.testing.assert_allclose(losses("neg_brier_score").mean(), brier, rtol=1e-10)
        np.testing.assert_array_equal(losses("accuracy"), proba.argmax(axis=1) != label)


@pytest.mark.parametrize("scoring", ["neg_log_loss",
                                     pytest.param("neg_brier_score", marks=pytest.mark.slow)])
def test_grid_scores_are_the_folds_losses(scoring):
    """``grid_errors`` with a probabilistic scoring: each fold's summed loss equals the one of the
    posterior predictive fitted on the fold's training part, scored by scikit-learn."""
    X, y, tree, _ = small_problem(kd_tree)
    masks = select.fold_masks(len(y), 2, seed=1)
    folds = select.prepare_folds(tree, X, jnp.asarray(y), L, masks)
    grid = {"lam1": jnp.asarray([0.5, 4.0]), "lam2": jnp.asarray([1.0, 0.1]),
            "smoothing": jnp.asarray([0.5, 0.5])}
    losses = np.asarray(select.grid_errors(tree, folds, select.pacbayes_votes, grid,
                                           scoring=scoring))
    for g in range(2):
        for f, train in enumerate(masks):
            stats = node_stats(tree, X[train], jnp.asarray(y[train]), L)
            log_w = pacbayes_log_weights(tree, stats, grid["lam1"][g], grid["lam2"][g])
            proba = np.asarray(jaxtree.posterior_predictive(
                tree, class_frequencies(tree, stats.counts, 0.5), log_w, X[~train]), np.float64)
            proba /= proba.sum(axis=1, keepdims=True)     # float32 rows, to float64 rounding
            truth = y[~train]
            expected = (log_loss(truth, proba, labels=np.arange(L), normalize=False)
                        if scoring == "neg_log_loss" else
                        np.sum((proba - np.eye(L)[truth]) ** 2))
            np.testing.assert_allclose(losses[g, f], expected, rtol=1e-4)


@pytest.mark.slow
def test_estimator_selects_by_log_loss():
    X, y, tree, _ = small_problem(kd_tree)
    est = jaxtree.PACBayesTreeClassifier(partition="kd", split="cycle", max_depth=4,
                                         min_split=4, scoring="neg_log_loss").fit(X, y)
    masks = fitting.train_masks(X, 2)      # the estimator's folds (distinct x, seed 0)
    folds = select.prepare_folds(tree, X, jnp.asarray(y), L, masks)
    result = select.paper_search(tree, folds, select.pacbayes_votes,
                                 fixed={"smoothing": 0.5}, scoring="neg_log_loss")
    assert est.best_params_ == pytest.approx({k: float(v) for k, v in
                                              result.best_params.items()})
    scores = est.cv_results_["mean_test_score"]
    assert scores.max() == pytest.approx(-float(result.best_error), rel=1e-6)
    assert (scores < 0).all()                  # negated log-losses, as scikit-learn reports



def test_predict_proba_stays_in_the_unit_interval(monkeypatch):
    # a weighted sum of node frequencies whose weights sum to 1 in float32 can overshoot 1 by an
    # ulp (seen on spam); scikit-learn's log_loss refuses such a row, so predict_proba clips it
    X, y, _, _ = small_problem(kd_tree)
    est = jaxtree.PACBayesTreeClassifier(partition="kd", max_depth=4, lam1=1.0, lam2=1.0,
                                         tune=None).fit(X, y)
    exact = est.predict_proba(X)
    overshoot = np.float32(1) + np.finfo(np.float32).eps
    monkeypatch.setattr(type(est), "_scores", lambda self, X_: np.where(
        np.arange(L) == 0, overshoot, np.float32(-1e-8)) * np.ones((len(X_), L), np.float32))
    clipped = est.predict_proba(X)
    assert clipped.max() == 1 and clipped.min() == 0
    log_loss(y, clipped, labels=np.arange(L))                 # accepted
    monkeypatch.undo()
    np.testing.assert_array_equal(est.predict_proba(X), exact)

@pytest.mark.slow
def test_gradient_tuning_on_the_validation_log_loss():
    """At temperature 1 the smoothed loss of the predictive votes is the validation log-loss:
    its gradient in log λ matches a finite difference, and Adam at that temperature lowers it
    from the starting point."""
    X, y, tree, _ = small_problem(kd_tree)
    folds = select.prepare_folds(tree, X, jnp.asarray(y), L, select.fold_masks(len(y), 2, 0))
    fixed = {"smoothing": 0.5}
    with jax.enable_x64(True):
        tree64 = jax.tree.map(lambda a: a.astype(jnp.float64)
                              if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)
        folds64 = jax.tree.map(lambda a: a.astype(jnp.float64)
                               if jnp.issubdtype(a.dtype, jnp.floating) else a, folds)
        loss = lambda t: select.smoothed_loss(tree64, folds64, select.pacbayes_votes,
                                              {"lam1": t, "lam2": jnp.float64(0.0)}, 1.0,
                                              fixed=fixed, loss="log")[0]
        h = 1e-5
        np.testing.assert_allclose(jax.grad(loss)(jnp.float64(0.3)),
                                   (loss(0.3 + h) - loss(0.3 - h)) / (2 * h), rtol=1e-5)
    result = select.gradient_tune(tree, folds, select.pacbayes_votes,
                                  {"lam1": 2.0 ** -6, "lam2": 2.0 ** -6}, steps=15,
                                  tau_start=1.0, tau_end=1.0, fixed=fixed)
    assert min(r["loss"] for r in result.path) < result.path[0]["loss"]


@pytest.mark.parametrize("params, message", [
    ({"proba": "soft"}, "proba must be one of"),
    ({"smoothing": -0.5}, "smoothing must be a finite number >= 0"),
    ({"smoothing": float("nan")}, "smoothing must be a finite number >= 0"),
    ({"scoring": "roc_auc"}, "scoring must be one of"),
    ({"scoring": "neg_log_loss", "tune": "gradient"}, "selects on the grid"),
])
def test_bad_options_are_refused_before_fitting(params, message):
    X, y = data(0, n=12)
    with pytest.raises(ValueError, match=message):
        jaxtree.PACBayesTreeClassifier(max_depth=2, lam1=1.0, lam2=1.0, **params).fit(X, y)
    if "scoring" not in params:
        with pytest.raises(ValueError, match=message):
            jaxtree.PrunedTreeClassifier(max_depth=2, **params).fit(X, y)
    tree = small_problem()[2]
    with pytest.raises(ValueError, match="smoothing must be"):
        class_frequencies(tree, jnp.ones((tree.num_nodes, L)), -1.0)
    log_w = jnp.zeros(tree.num_nodes)
    with pytest.raises(ValueError, match="node_proba must be"):
        jaxtree.posterior_predictive(tree, jnp.ones((tree.num_nodes - 1, L)), log_w, X[:, :2])
    with pytest.raises(ValueError, match="node_proba"):
        jaxtree.posterior_predictive(tree, jnp.full((tree.num_nodes, L), jnp.nan), log_w,
                                     X[:, :2])
