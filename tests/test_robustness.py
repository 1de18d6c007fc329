"""Every estimator with its defaults on many small random problems: none collapses.

Each generator gives a problem of one shape (48 rows, 6 features) so that the compiled programs
are shared and the whole file stays fast; the kinds are those a default must survive: separable,
noisy, imbalanced, duplicated rows, one informative feature among many, constant features, and
very small samples (2-10 rows, :func:`test_tiny_samples_give_a_model`).

Checked on each problem, for every estimator (the HS vote on the binary ones):

* the training accuracy reaches C1's (``PrunedTreeClassifier()``, cost-complexity pruning
  tuned by CV) minus :data:`MARGIN`;
* where a depth-1 tree (one threshold on one feature) separates the classes, the estimator
  predicts more than one class on the training points;
* ``predict == classes_[argmax(predict_proba)]``.
"""

import warnings

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier

import jaxtree

ROWS, FEATURES = 48, 6
#: Allowed shortfall of training accuracy against C1's (3 of the 48 points).
MARGIN = 3 / ROWS


def _labels(score, rng, noise=0.0, minority=0.5):
    """Labels 1 for the top ``minority`` share of ``score``, each flipped with prob. ``noise``."""
    y = (score > np.quantile(score, 1 - minority)).astype(int)
    flip = rng.random(len(y)) < noise
    return np.where(flip, 1 - y, y)


def separable(rng):
    X = rng.normal(size=(ROWS, FEATURES))
    return X, _labels(X[:, 0], rng)


def noisy(rng):
    X = rng.normal(size=(ROWS, FEATURES))
    return X, _labels(X[:, 0] + X[:, 1], rng, noise=0.15)


def imbalanced(rng):
    X = rng.normal(size=(ROWS, FEATURES))
    return X, _labels(X[:, 2], rng, minority=0.15)


def duplicated(rng):
    X, y = separable(rng)
    half = ROWS // 2
    return np.r_[X[:half], X[:half]], np.r_[y[:half], y[:half]]


def one_informative(rng):
    X = rng.uniform(size=(ROWS, FEATURES))
    return X, _labels(X[:, FEATURES - 1], rng, noise=0.05)


def constant_features(rng):
    X = rng.normal(size=(ROWS, FEATURES))
    X[:, :3] = 1.5
    return X, _labels(X[:, 4] - X[:, 3], rng)


def three_classes(rng):
    X = rng.normal(size=(ROWS, FEATURES))
    return X, np.digitize(X[:, 1], np.quantile(X[:, 1], [1 / 3, 2 / 3]))


def blobs(rng):
    """Two balanced, well-separated groups: the problem on which the default collapsed to the
    root's class (its CV ties went to a posterior with all but an ulp on the root)."""
    X = rng.normal(size=(ROWS, FEATURES)) * 0.3
    y = np.arange(ROWS) % 2
    X[:, :2] += 2.0 * y[:, None]
    return X, y


def repeated_categories(rng):
    """A categorical table: 4 distinct rows (two binary features, the others constant), each
    repeated with both labels; the label follows the first feature 80 % of the time. The CV that
    dealt distinct rows ``(x, y)`` to folds trained each fold on labels the other validated:
    the PAC-Bayes tree then predicted one class (on KEEL's titanic, 2,201 rows in 14 distinct
    ones, test error 0.32 against a stump's 0.21)."""
    X = np.zeros((ROWS, FEATURES))
    X[:, :2] = rng.integers(0, 2, (ROWS, 2))
    return X, np.where(rng.random(ROWS) < 0.8, X[:, 0], 1 - X[:, 0]).astype(int)


GENERATORS = [separable, noisy, imbalanced, duplicated, one_informative, constant_features,
              three_classes, blobs, repeated_categories]
ESTIMATORS = [jaxtree.PACBayesTreeClassifier, jaxtree.PrunedTreeClassifier,
              jaxtree.HSVoteClassifier, jaxtree.ObliqueTreeClassifier]
SEEDS = (0, 1)


#: Known collapses, kept visible (strict xfail: a fix makes them fail as passing): on the
#: imbalanced problem of seed 1 (7 of 48 points above a threshold on one feature) the KD tree
#: with coordinates cycled (C1's and the HS vote's default T0) splits that feature once, at a
#: cell median, so no pruning isolates the minority and CV rightly prefers the root. (Seed 0 was
#: on this list too until the folds were dealt over distinct feature vectors instead of distinct
#: rows (x, y): with the new folds both reach C1's training accuracy there.)
KNOWN_COLLAPSES = {("imbalanced", 1, "PrunedTreeClassifier"),
                   ("imbalanced", 1, "HSVoteClassifier")}
#: Known shortfalls of one seed: on the problem with one informative feature of seed 0 the HS
#: vote's CV picks η = 0.53, training accuracy 0.875 against C1's 1.0 (5 % of the labels are
#: flipped: C1 fits them); neither KD tree with cycled coordinates reaches the sixth feature,
#: the informative one, before its cells hold a point or two, and on 20 fresh samples of the
#: generator both are near chance (0.49 and 0.54). (The shortfalls of the noisy problem of
#: seed 0, the HS vote's and the PAC-Bayes tree's, were on this list until the folds were dealt
#: over distinct feature vectors; both now reach C1's training accuracy there.)
KNOWN_SHORTFALLS = {("one_informative", 0, "HSVoteClassifier")}


def _cases():
    for generator in GENERATORS:
        for seed in SEEDS:
            for estimator in ESTIMATORS:
                if estimator is jaxtree.HSVoteClassifier and generator is three_classes:
                    continue   # binary only
                case = (generator.__name__, seed, estimator.__name__)
                known = case in KNOWN_COLLAPSES | KNOWN_SHORTFALLS
                marks = [pytest.mark.xfail(strict=True, reason="KNOWN_*")] if known else []
                if seed != SEEDS[0]:    # the second seed with the slow cases (~5 s a case)
                    marks.append(pytest.mark.slow)
                yield pytest.param(generator, seed, estimator, marks=marks,
                                   id=f"{generator.__name__}-{seed}-{estimator.__name__}")


@pytest.mark.parametrize("generator, seed, estimator", list(_cases()))
def test_defaults_do_not_collapse(generator, seed, estimator):
    X, y = generator(np.random.default_rng(seed))
    reference = jaxtree.PrunedTreeClassifier().fit(X, y).score(X, y)
    model = estimator().fit(X, y)
    predicted = model.predict(X)
    np.testing.assert_array_equal(predicted,
                                  model.classes_[np.argmax(model.predict_proba(X), axis=1)])
    assert model.score(X, y) >= reference - MARGIN, (model.score(X, y), reference)
    if DecisionTreeClassifier(max_depth=1).fit(X, y).score(X, y) == 1:   # a stump separates
        assert len(np.unique(predicted)) > 1


@pytest.mark.parametrize("n", [2, pytest.param(3, marks=pytest.mark.slow),
                               pytest.param(5, marks=pytest.mark.slow),
                               pytest.param(10, marks=pytest.mark.slow)])   # ~25 s each: new shapes
def test_tiny_samples_give_a_model(n):
    """A default fit on 2-10 rows gives a model that predicts its own labels' classes; where the
    requested 2 folds cannot hold a tree grown per fold, it says so in a warning."""
    rng = np.random.default_rng(n)
    X = rng.normal(size=(n, 3))
    y = np.arange(n) % 2
    for estimator in ESTIMATORS:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = estimator().fit(X, y)
        assert set(model.predict(X)) <= {0, 1}
        np.testing.assert_array_equal(model.predict(X),
                                      model.classes_[np.argmax(model.predict_proba(X), axis=1)])
        messages = [str(w.message) for w in caught if "cross-validating" in str(w.message)]
        per_fold_trees = estimator is jaxtree.PACBayesTreeClassifier   # the CART default
        assert bool(messages) == (per_fold_trees and n <= 3), (estimator.__name__, messages)
