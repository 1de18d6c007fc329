"""scikit-learn conventions of the estimator shell (PACBayesTreeClassifier)."""

import numpy as np
import pytest
from sklearn.base import clone, is_classifier
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import jax.numpy as jnp

from jaxtree import (NotFittedError, PACBayesTreeClassifier, class_frequencies, kd_tree,
                     node_stats, pacbayes_potentials, pacbayes_theory_potentials,
                     posterior_predictive, subtree_log_weights, vote)


def model(**params):
    """A small, untuned PAC-Bayes tree (λ's given, so nothing is selected by CV)."""
    params = {"partition": "kd", "split": "cycle", "max_depth": 3, "lam1": 1.0, "lam2": 1.0,
              **params}
    return PACBayesTreeClassifier(**params)


def data(seed=0, n=60):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.8)
    return X, y


def test_clone_and_params_round_trip():
    est = model(partition="dyadic", min_split=4)
    params = est.get_params()
    assert params["partition"] == "dyadic" and params["min_split"] == 4
    copy = clone(est)
    assert copy is not est and copy.get_params() == params
    other = PACBayesTreeClassifier()
    assert other.set_params(**params) is other and other.get_params() == params
    X, y = data()
    est.fit(X, y)
    refit = clone(est)
    assert not hasattr(refit, "tree_")         # clone returns an unfitted copy
    assert "PACBayesTreeClassifier(" in repr(est)


def test_model_selection_and_pipelines_accept_it():
    """scikit-learn >= 1.6 needs ``__sklearn_tags__`` for these (cross_val_score, GridSearchCV)."""
    X, y = data(5)
    assert is_classifier(model())
    scores = cross_val_score(model(), X, y, cv=2)
    assert scores.shape == (2,) and (scores > 0.5).all()
    search = GridSearchCV(model(), {"lam1": [0.5, 2.0]}, cv=2).fit(X, y)
    assert search.best_params_["lam1"] in (0.5, 2.0)
    pipe = make_pipeline(StandardScaler(), model()).fit(X, y)
    assert pipe.score(X, y) > 0.7


def test_a_single_class_is_predicted_everywhere():
    X, _ = data(6)
    est = model().fit(X, np.full(len(X), "only"))
    np.testing.assert_array_equal(est.predict(X[:5]), ["only"] * 5)
    np.testing.assert_allclose(est.predict_proba(X[:5]), np.ones((5, 1)), rtol=1e-6)


@pytest.mark.parametrize("potentials, proba", [("practical", "predictive"),
                                               ("theory", "majority")])
def test_estimator_equals_the_functional_path(potentials, proba):
    """The shell adds no math: build → stats → potentials → weights → vote (or posterior
    predictive) gives its scores."""
    X, y = data(7)
    est = model(lam1=2.0, lam2=0.5, min_split=3, potentials=potentials, proba=proba,
                smoothing=0.7, softness=0).fit(X, y)
    tree = kd_tree(X, max_depth=3, min_split=3, y=y, layout="complete")
    stats = node_stats(tree, X, jnp.asarray(y), 3)
    phi = (pacbayes_potentials(stats, 2.0, 0.5) if potentials == "practical"
           else pacbayes_theory_potentials(tree, stats, 2.0, 0.05))
    log_w = subtree_log_weights(phi, tree.internal, layout=tree.layout)
    expected = (posterior_predictive(tree, class_frequencies(tree, stats.counts, 0.7), log_w, X)
                if proba == "predictive" else vote(tree, stats.label, log_w, X, 3))
    np.testing.assert_allclose(est.predict_proba(X), np.asarray(expected), atol=1e-6)


def test_set_params_rejects_unknown_names():
    with pytest.raises(ValueError, match="max_dept"):
        model().set_params(max_dept=3)


@pytest.mark.parametrize("labels", [np.array(["spam", "eggs", "ham"]), np.array([-5, 0, 7])])
def test_arbitrary_label_values(precision, labels):
    X, y = data(1)
    y_values = labels[y]
    est = model().fit(X, y_values)
    np.testing.assert_array_equal(est.classes_, np.sort(labels))
    encoded = model().fit(X, np.searchsorted(np.sort(labels), y_values))
    # the columns of predict_proba follow classes_: same scores as with labels 0..L-1
    proba = est.predict_proba(X)
    np.testing.assert_allclose(proba, encoded.predict_proba(X))
    assert proba.shape == (len(X), 3) and proba.dtype == precision
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-5)
    predicted = est.predict(X)
    np.testing.assert_array_equal(predicted, est.classes_[proba.argmax(axis=1)])
    assert set(predicted) <= set(labels)
    assert est.score(X, y_values) == pytest.approx(np.mean(predicted == y_values))
    assert est.score(X, y_values) > 0.7
    assert est.n_features_in_ == 3
    assert est.node_log_weights_.shape == (est.tree_.num_nodes,)


def test_one_leaf_tree_predicts_the_majority_class(precision):
    X, _ = data(2, n=7)
    y = np.array(["b", "a", "b", "c", "b", "a", "c"])
    est = model(max_depth=0, smoothing=0.5).fit(X, y)
    # T0 is the root alone (tree_ may be padded to a shape this process compiled before)
    assert not np.asarray(est.tree_.internal).any()
    np.testing.assert_array_equal(est.predict(X[:3]), ["b", "b", "b"])
    # the root's class frequencies (2, 3, 2 of 7) smoothed by ½ per class
    np.testing.assert_allclose(est.predict_proba(X[:2]), [[2.5 / 8.5, 3.5 / 8.5, 2.5 / 8.5]] * 2,
                               rtol=1e-6)
    # ties between classes go to the smallest label
    tied = model(max_depth=0).fit(X[:4], np.array([3, 1, 3, 1]))
    np.testing.assert_array_equal(tied.predict(X), [1] * len(X))


def test_not_fitted_error_before_fit():
    X, _ = data()
    for method in ("predict", "predict_proba"):
        with pytest.raises(NotFittedError):
            getattr(model(), method)(X)
    assert issubclass(NotFittedError, SklearnNotFittedError)


def test_bad_input_raises_scikit_learns_errors():
    """The estimators validate with scikit-learn's utilities (its messages); the full battery
    over every estimator and function is in test_bad_input.py."""
    X, y = data(3)
    bad = X.copy()
    bad[4, 2] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        model().fit(bad, y)
    bad[4, 2] = -np.inf
    with pytest.raises(ValueError, match="Input X contains infinity"):
        model().fit(bad, y)
    with pytest.raises(ValueError, match="Expected 2D array"):
        model().fit(X[:, 0], y)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        model().fit(X, y[:-1])
    with pytest.raises(ValueError, match="1 sample"):
        model().fit(X[:1], y[:1])
    with pytest.raises(ValueError, match="Unknown label type"):
        model().fit(X, X[:, 0])
    est = model().fit(X, y)
    with pytest.raises(ValueError, match="X has 2 features, but PACBayesTreeClassifier is "
                                         "expecting 3 features"):
        est.predict(X[:, :2])
    with pytest.raises(ValueError, match="Expected 2D array"):
        est.predict(X[0])
    with pytest.raises(ValueError, match="Input X contains infinity"):
        est.predict(bad)


def test_invalid_hyperparameters():
    X, y = data(4)
    with pytest.raises(ValueError, match="partition"):
        model(partition="random").fit(X, y)
    with pytest.raises(ValueError, match="lam1"):
        model(lam1=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="potentials"):
        model(potentials="other").fit(X, y)


# ---------------------------------------------------------------------------------------------
# sample_weight and class_weight
def weighted_estimators():
    from jaxtree import HSVoteClassifier, ObliqueTreeClassifier, PrunedTreeClassifier
    # the default (CART) and dyadic trees are slow here: scikit-learn's sample-weight
    # equivalence check runs on the default constructor in the default suite
    slow = pytest.mark.slow
    return [PACBayesTreeClassifier(partition="kd"),
            pytest.param(PACBayesTreeClassifier(partition="dyadic"), marks=slow),
            pytest.param(PACBayesTreeClassifier(partition="cart"), marks=slow),
            pytest.param(PACBayesTreeClassifier(certify=True), marks=slow),
            PrunedTreeClassifier(), PrunedTreeClassifier(method="rep"), HSVoteClassifier(),
            ObliqueTreeClassifier(max_depth=2, n_restarts=1, n_jumps=1, n_cycles=1)]


@pytest.mark.parametrize("est", weighted_estimators(), ids=lambda e: repr(e)[:60])
def test_integer_sample_weights_equal_repeated_rows(est):
    """Weights reach T0, the statistics, the CV folds and the hold-out splits: an integer
    weight is that many copies of the row, weight 0 the row left out."""
    X, y = data(11, n=80)
    y = (y > 0).astype(int)
    counts = np.random.default_rng(2).integers(0, 3, size=len(y))
    if "certify" in est.get_params() and est.certify:
        counts = (counts > 0).astype(int)    # a certificate counts points: weights 0 or 1
    rows = np.repeat(np.arange(len(y)), counts)
    weighted = clone(est).fit(X, y, sample_weight=counts)
    repeated = clone(est).fit(X[rows], y[rows])
    X_test = data(12, n=40)[0]
    np.testing.assert_allclose(weighted.predict_proba(X_test), repeated.predict_proba(X_test),
                               rtol=1e-5, atol=1e-6)
    assert getattr(weighted, "best_params_", None) == getattr(repeated, "best_params_", None)


def test_class_weight_balanced_raises_balanced_accuracy():
    from sklearn.metrics import balanced_accuracy_score
    from sklearn.datasets import make_classification
    X, y = make_classification(n_samples=1200, n_features=6, weights=[0.93], flip_y=0.02,
                               class_sep=0.6, random_state=3)
    train, test = slice(0, 800), slice(800, None)
    plain = PACBayesTreeClassifier(partition="kd").fit(X[train], y[train])
    balanced = PACBayesTreeClassifier(partition="kd", class_weight="balanced").fit(X[train],
                                                                                   y[train])
    scores = [balanced_accuracy_score(y[test], m.predict(X[test])) for m in (plain, balanced)]
    assert scores[1] > scores[0] + 0.02, scores
    # a dict is the same as the weights it gives each row
    by_dict = PACBayesTreeClassifier(partition="kd", class_weight={0: 1.0, 1: 4.0}).fit(
        X[train], y[train])
    by_rows = PACBayesTreeClassifier(partition="kd").fit(
        X[train], y[train], sample_weight=np.where(y[train] == 1, 4.0, 1.0))
    np.testing.assert_allclose(by_dict.predict_proba(X[test]), by_rows.predict_proba(X[test]),
                               rtol=1e-6)


def test_bad_sample_weights_raise_value_errors():
    X, y = data(13)
    with pytest.raises(ValueError, match="sample_weight"):
        model().fit(X, y, sample_weight=np.ones(3))
    with pytest.raises(ValueError, match="sample_weight"):
        model().fit(X, y, sample_weight=-np.ones(len(y)))
    with pytest.raises(ValueError, match="sample_weight"):
        model().fit(X, y, sample_weight=np.zeros(len(y)))
    with pytest.raises(ValueError, match="certify"):
        model(certify=True).fit(X, y, sample_weight=np.full(len(y), 0.5))
    with pytest.raises(ValueError, match="class_weight"):
        model(class_weight="often").fit(X, y)
    from jaxtree import ObliqueTreeClassifier
    with pytest.raises(ValueError, match="integer sample weights"):
        ObliqueTreeClassifier(max_depth=1).fit(X, y, sample_weight=np.full(len(y), 0.5))


@pytest.mark.parametrize("partition", ["kd", "dyadic"])
def test_estimator_agrees_with_the_pure_fit(partition):
    """Given λ's, the estimator's scores are ``jaxtree.fit``'s on the same parameters."""
    import jaxtree
    X, y = data(14, n=90)
    est = PACBayesTreeClassifier(partition=partition, lam1=3.0, lam2=0.7).fit(X, y)
    pure = jaxtree.fit(X.astype(np.float32), y, num_classes=3, partition=partition,
                       lam1=3.0, lam2=0.7, softness=jaxtree.soft.DEFAULT_SOFTNESS)
    np.testing.assert_allclose(est.predict_proba(X), jaxtree.predict_proba(pure, X), atol=1e-5)


@pytest.mark.parametrize("partition", ["cart", pytest.param("kd", marks=pytest.mark.slow)])
def test_cv_takes_explicit_splits_as_gridsearchcv_does(partition):
    """``cv`` as (train, test) index pairs: the folds that the default ``cv`` deals, given
    explicitly, give the same tuned model."""
    from jaxtree import fitting
    X, y = data(3)
    dealt = PACBayesTreeClassifier(partition=partition).fit(X, y)
    masks = fitting.train_masks(X, dealt.cv)
    splits = [(np.flatnonzero(m), np.flatnonzero(~m)) for m in masks]
    given = PACBayesTreeClassifier(partition=partition, cv=splits).fit(X, y)
    assert given.best_params_ == dealt.best_params_
    np.testing.assert_array_equal(given.predict_proba(X), dealt.predict_proba(X))


@pytest.mark.slow
def test_cv_takes_a_scikit_learn_splitter():
    from sklearn.model_selection import KFold
    X, y = data(3)
    assert PACBayesTreeClassifier(cv=KFold(3)).fit(X, y).score(X, y) > 0.8
