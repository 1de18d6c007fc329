"""PACBayesForestClassifier: the stacked, vmapped and chunked forest against a plain loop over
its trees with the one-tree functional API, its out-of-bag attributes and its certificate."""

import jax
import numpy as np
import pytest

import jaxtree
from jaxtree import fitting
from jaxtree import forest as F
from jaxtree import vote_bounds as vb


def data(n=90, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)).astype(np.float32)
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int) + (X[:, 2] > 1).astype(int)
    return X, y


def tree_at(trees, h):
    return jax.tree.map(lambda a: a[h], trees)


def loop_predictives(forest, X_fit, y_fit, X, lam=None):
    """[m, n, L] each tree's posterior predictive at ``lam`` (default the forest's), one tree at
    a time (public one-tree API)."""
    lam = forest.lam_ if lam is None else lam
    out = []
    for h, w in enumerate(forest.sample_weights_):
        tree = tree_at(forest.trees_, h)
        stats = jaxtree.node_stats(tree, X_fit, y_fit, len(forest.classes_), sample_weight=w)
        proba = jaxtree.class_frequencies(tree, stats.counts, forest.smoothing)
        log_w = jaxtree.pacbayes_log_weights(tree, stats, *lam)
        out.append(np.asarray(jaxtree.posterior_predictive(tree, proba, log_w, X)))
    return np.stack(out)


def test_forest_equals_a_loop_over_its_trees():
    X, y = data()
    X_test, _ = data(40, seed=1)
    forest = F.PACBayesForestClassifier(n_estimators=5, max_features=2, random_state=0)
    forest.fit(X, np.array(["a", "b", "c"])[y])       # labels of any kind, encoded
    assert forest.classes_.tolist() == ["a", "b", "c"]
    w = forest.sample_weights_
    assert w.shape == (5, 90) and (w.sum(axis=1) == 90).all()
    np.testing.assert_array_equal(forest.oob_mask_, w == 0)
    assert forest.lam_ in F.LAMBDA_GRID
    # predict_proba: the mean of the trees' predictives
    per_tree = loop_predictives(forest, X, y, X_test)
    np.testing.assert_allclose(forest.predict_proba(X_test), per_tree.mean(axis=0), atol=1e-5)
    # several settings at once, in 2 threads (5 trees: chunks of 3 and 2 + a padding tree):
    # the weighted sums and every tree's labels at each setting
    settings = F.LAMBDA_GRID[:3]
    weight = np.random.default_rng(0).random((5, 40)).astype(np.float32)
    sums, labels = F.grid_predictive_sums(
        forest.trees_, forest.stats_, forest.node_proba_, np.asarray(settings, np.float32),
        X_test, weight, jobs=2, labels=True)
    assert sums.shape == (3, 40, 3) and labels.shape == (5, 40, 3) and labels.dtype == np.int8
    for g, lam in enumerate(settings):
        at = loop_predictives(forest, X, y, X_test, lam)
        np.testing.assert_allclose(sums[g], np.einsum("mn,mnl->nl", weight, at), atol=1e-5)
        np.testing.assert_array_equal(labels[..., g], at.argmax(axis=2))
    # out of bag: the mean over the trees that did not see the point
    train = loop_predictives(forest, X, y, X)
    mask = forest.oob_mask_
    covered = mask.any(axis=0)
    oob = np.einsum("mn,mnl->nl", mask, train)[covered]
    oob /= oob.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(forest.oob_decision_function_[covered], oob, atol=1e-5)
    assert np.isnan(forest.oob_decision_function_[~covered]).all()
    np.testing.assert_allclose(forest.oob_score_, np.mean(oob.argmax(1) == y[covered]))
    # the certificate is that of the trees' own labels on their OOB points
    labels = train.argmax(axis=2)
    np.testing.assert_array_equal(forest.oob_predictions_, labels)
    cert = forest.certificate(delta=0.1)
    # λ was chosen out of bag among the grid's settings: a union bound over them
    assert forest.lambda_settings_ == len(F.LAMBDA_GRID) and cert.delta == 0.1
    expected = vb.forest_certificate(mask, labels, y, delta=0.1 / len(F.LAMBDA_GRID))
    assert (cert.first_order, cert.tandem) == (expected.first_order, expected.tandem)
    assert forest.certificate(weights="first_order").first_order <= cert.first_order + 1e-12
    # max_features=2 of 3 per node (jaxtree.grow_tree, tested in test_grow.py): the trees of
    # the bootstraps differ from each other
    internal = np.asarray(forest.trees_.internal)
    assert len({internal[h].tobytes() for h in range(len(internal))}) > 1
    np.testing.assert_array_equal(forest.predict_trees(X), forest.classes_[labels])


@pytest.mark.slow
def test_given_lambdas_and_feature_subsets():
    X, y = data()
    forest = F.PACBayesForestClassifier(n_estimators=6, max_features=1, lam1=4.0, lam2=0.1,
                                        random_state=3).fit(X, y)
    assert forest.lam_ == (4.0, 0.1) and forest.lambda_settings_ == 1
    # one feature drawn per node, not per tree: a tree's splits use several features
    used = [np.unique(np.asarray(tree_at(forest.trees_, h).feature)[
        np.asarray(tree_at(forest.trees_, h).internal)]) for h in range(6)]
    assert max(len(u) for u in used) > 1


def test_max_samples_draws_smaller_bootstraps_and_the_forest_round_trips(tmp_path):
    X, y = data()
    # scikit-learn's convention: a fraction of n draws (round(0.5 * 90) = 45) or an int
    assert F._num_draws(None, 90) == 90 and F._num_draws(0.5, 90) == 45
    assert F._num_draws(7, 90) == 7 and F._num_draws(0.001, 90) == 1
    forest = F.PACBayesForestClassifier(n_estimators=3, max_samples=0.5,
                                        random_state=0).fit(X, y)
    assert (forest.sample_weights_.sum(axis=1) == 45).all()
    full = F.PACBayesForestClassifier(n_estimators=3, random_state=0).fit(X, y)
    # half the draws: more points out of bag in every tree
    assert (forest.oob_mask_.sum(axis=1) > full.oob_mask_.sum(axis=1)).all()
    forest.save(tmp_path / "forest.npz")
    loaded = jaxtree.load(tmp_path / "forest.npz")
    assert type(loaded) is F.PACBayesForestClassifier and loaded.max_samples == 0.5
    np.testing.assert_array_equal(loaded.predict_proba(X), forest.predict_proba(X))
    assert loaded.certificate().tandem == forest.certificate().tandem


@pytest.mark.slow   # ~10 s: moved out of the default suite for its time budget
def test_threads_do_not_change_the_forest():
    """n_jobs splits the trees into chunks run by threads (3 threads for 5 trees: chunks of 2,
    the last padded); the forest, its out-of-bag estimates and its predictions are the same."""
    X, y = data()
    X_test, _ = data(40, seed=1)
    one, three = (F.PACBayesForestClassifier(n_estimators=5, random_state=0, n_jobs=jobs).fit(X, y)
                  for jobs in (1, 3))
    for name in ("feature", "threshold", "internal"):
        np.testing.assert_array_equal(np.asarray(getattr(one.trees_, name)),
                                      np.asarray(getattr(three.trees_, name)))
    assert one.lam_ == three.lam_
    np.testing.assert_array_equal(one.oob_predictions_, three.oob_predictions_)
    np.testing.assert_allclose(one.oob_decision_function_, three.oob_decision_function_,
                               rtol=1e-6)
    np.testing.assert_allclose(one.predict_proba(X_test), three.predict_proba(X_test), rtol=1e-6)
    np.testing.assert_array_equal(one.predict_trees(X_test), three.predict_trees(X_test))


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_samples=0.0), "max_samples"), (dict(max_samples=1000), "max_samples"),
    (dict(max_samples="half"), "max_samples"),
    (dict(n_estimators=0), "n_estimators"), (dict(max_features="all"), "max_features"),
    (dict(partition="kd"), "partition"), (dict(lam1=-1.0), "lam1"),
    (dict(splitter="extra"), "splitter"), (dict(n_jobs=0), "n_jobs"),
    (dict(n_jobs=1.5), "n_jobs"), (dict(smoothing=-0.1), "smoothing"),
    (dict(smoothing=float("nan")), "smoothing"),
])
def test_bad_parameters_name_themselves(kwargs, match):
    X, y = data(30)
    with pytest.raises(ValueError, match=match):
        F.PACBayesForestClassifier(**kwargs).fit(X, y)


def test_mixed_forest_is_half_best_half_random_trees():
    """splitter='mixed': the first ceil(m/2) trees are those of splitter='best', the
    others those of splitter='random' (same seed: same samples and keys); with NaN in X every
    tree takes the best cut."""
    X, y = data(120)
    X_test, _ = data(50, seed=1)
    params = dict(n_estimators=5, random_state=0, lam1=4.0, lam2=0.01)
    mixed, best, random = (F.PACBayesForestClassifier(splitter=s, **params).fit(X, y)
                           for s in ("mixed", "best", "random"))
    assert F.PACBayesForestClassifier().splitter == "best"
    labels = mixed.predict_trees(X_test)
    np.testing.assert_array_equal(labels[:3], best.predict_trees(X_test)[:3])
    np.testing.assert_array_equal(labels[3:], random.predict_trees(X_test)[3:])
    np.testing.assert_array_equal(mixed.oob_predictions_[3:], random.oob_predictions_[3:])
    assert not np.array_equal(labels[3:], best.predict_trees(X_test)[3:])
    assert F.tree_splitters("mixed", 5, False) == {"best": (0, 3), "random": (3, 5)}
    assert F.tree_splitters("mixed", 1, False) == {"best": (0, 1)}
    assert F.tree_splitters("mixed", 4, True) == {"best": (0, 4)}
    X[0, 0] = np.nan
    mixed, best = (F.PACBayesForestClassifier(splitter=s, **params).fit(X, y)
                   for s in ("mixed", "best"))
    np.testing.assert_array_equal(mixed.predict_trees(X_test), best.predict_trees(X_test))


@pytest.mark.slow
def test_a_width_that_random_cuts_needed_does_not_widen_later_best_cut_forests(monkeypatch):
    """The layout width that an earlier fit needed is remembered per splitter: random-cut trees
    grow wider levels (letter: 1,024 slots, best cuts 256), and a best-cut forest fitted after
    them kept their width (and cost) though its own trees fit the narrower one."""
    monkeypatch.setattr(fitting, "_KNOWN_LAYOUTS", {})
    X, y = data(120)
    params = dict(n_estimators=5, random_state=0, lam1=4.0, lam2=0.01)  # the mixed test's
    best = F.PACBayesForestClassifier(splitter="best", **params).fit(X, y).trees_
    fitting._KNOWN_LAYOUTS.clear()
    F.PACBayesForestClassifier(splitter="random", **params).fit(X, y)
    assert fitting._KNOWN_LAYOUTS
    for key, (width, depth) in fitting._KNOWN_LAYOUTS.items():  # as if the random cuts had
        fitting._KNOWN_LAYOUTS[key] = (2 * width, depth)        # needed more
    after = F.PACBayesForestClassifier(splitter="best", **params).fit(X, y).trees_
    assert after.feature.shape == best.feature.shape
    np.testing.assert_array_equal(after.feature, best.feature)


@pytest.mark.slow
def test_random_splitter_forest():
    """splitter='random': other trees than the best splitter's, as accurate on an easy problem,
    no NaN."""
    X, y = data(200)
    best = F.PACBayesForestClassifier(n_estimators=8, splitter="best", random_state=0).fit(X, y)
    random = F.PACBayesForestClassifier(n_estimators=8, splitter="random",
                                        random_state=0).fit(X, y)
    assert not np.array_equal(np.asarray(best.trees_.threshold),
                              np.asarray(random.trees_.threshold))
    np.testing.assert_array_equal(random.sample_weights_, best.sample_weights_)
    X_test, y_test = data(300, seed=1)
    assert random.score(X_test, y_test) > 0.8 and random.oob_score_ > 0.8
    X[0, 0] = np.nan
    with pytest.raises(ValueError, match="splitter"):
        F.PACBayesForestClassifier(n_estimators=2, splitter="random").fit(X, y)


def test_certificate_needs_bootstrap():
    X, y = data(30)
    forest = F.PACBayesForestClassifier(n_estimators=2, bootstrap=False, random_state=0)
    with pytest.raises(ValueError, match="bootstrap=True"):
        forest.fit(X, y).certificate()
    assert forest.lam_ in F.LAMBDA_GRID


@pytest.mark.slow
def test_check_estimator():
    from sklearn.utils.estimator_checks import check_estimator
    check_estimator(F.PACBayesForestClassifier(n_estimators=3))


@pytest.mark.parametrize("num_classes", [2, 26, F.UNROLLED_ARGMAX + 6])
def test_argmax_over_classes_is_jnp_argmax(num_classes):
    """The trees' labels: the first largest class, as ``jnp.argmax`` (ties included), unrolled
    or (many classes) not, in the smallest int dtype."""
    values = np.random.default_rng(num_classes).integers(0, 4, (50, num_classes, 3))
    values = values.astype(np.float32)                                   # many ties
    labels = F._argmax_classes(jax.numpy.asarray(values))
    np.testing.assert_array_equal(np.asarray(labels), values.argmax(axis=1))
    assert labels.dtype == np.int8
