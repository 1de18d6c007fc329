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
                smoothing=0.7).fit(X, y)
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


def test_too_deep_for_the_complete_layout():
    """Identical points with mixed labels split (everything left) down to max_depth."""
    est = model(max_depth=40)
    if "layout" in est.get_params():
        est.set_params(layout="complete")
    with pytest.raises(ValueError, match="MAX_LAYOUT_BYTES") as error:
        est.fit(np.zeros((4, 2)), [0, 1, 0, 1])
    assert "compact" in str(error.value) and "max_depth" in str(error.value)


def test_invalid_hyperparameters():
    X, y = data(4)
    with pytest.raises(ValueError, match="partition"):
        model(partition="random").fit(X, y)
    with pytest.raises(ValueError, match="lam1"):
        model(lam1=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="potentials"):
        model(potentials="other").fit(X, y)
