"""Bad input is refused at the boundary, before any JAX tracing, with a ValueError/TypeError that
names the argument; valid edge cases work.

The battery runs every kind of bad array (wrong shape, complex/object/string dtype, NaN/inf,
empty, 1-D, sparse) through every estimator (fit and predict) and every public function that
takes user arrays: the builders, :func:`jaxtree.node_stats`, the votes and the routing. "Before
tracing" is checked on the traceback: no frame of the raised error lies inside JAX.
"""

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
import scipy.sparse

import jaxtree
from jaxtree import hsvote, validation
from small_models import small_data, small_estimators

JAX_DIR = os.path.dirname(jax.__file__)
ESTIMATORS = small_estimators()
ESTIMATOR_IDS = [type(e).__name__ for e in ESTIMATORS]


def assert_refused(call, argument):
    """``call()`` raises a ValueError/TypeError naming ``argument``, from outside JAX."""
    with pytest.raises((ValueError, TypeError)) as error:
        call()
    assert re.search(rf"\b{argument}\b", str(error.value)), str(error.value)
    inside_jax = [entry.path for entry in error.traceback
                  if str(entry.path).startswith(JAX_DIR)]
    assert not inside_jax, f"raised inside JAX: {inside_jax}"


def with_value(X, row, column, value):
    X = X.astype(np.result_type(X, value))
    X[row, column] = value
    return X


def bad_features(X):
    """``{case: bad version of the [n, D] float matrix X}``."""
    objects = X.astype(object)
    objects[1, 1] = {"not": "a number"}
    return {
        "1-D": X[:, 0],
        "3-D": X[:, :, None],
        "no rows": X[:0],
        "one row": X[:1],
        "no features": X[:, :0],
        "complex": X + 1j,
        "strings": np.full(X.shape, "a"),
        "objects": objects,
        "NaN": with_value(X, 2, 1, np.nan),
        "inf": with_value(X, 3, 0, -np.inf),
        "sparse": scipy.sparse.csr_matrix(X),
    }


def bad_predict_features(X):
    """Bad points for a tree fitted on ``X``: every bad matrix that has rows, or the wrong
    number of features."""
    cases = bad_features(X)
    del cases["no rows"], cases["one row"]  # valid for prediction: zero or one point
    cases["wrong number of features"] = X[:, :2]
    return cases


BAD_X = bad_features(small_data()[0])
BAD_POINTS = bad_predict_features(small_data()[0])


# ---------------------------------------------------------------------------------------------
# estimators
@pytest.mark.parametrize("case", list(BAD_X))
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=ESTIMATOR_IDS)
def test_fit_refuses_bad_X(estimator, case):
    X, y = small_data()
    bad = BAD_X[case]
    labels = y[:bad.shape[0]] if case in ("no rows", "one row") else y
    assert_refused(lambda: estimator.fit(bad, labels), "X")


def bad_labels(y):
    return {
        "continuous": np.linspace(0, 1, len(y)),
        "NaN": np.where(np.arange(len(y)) == 3, np.nan, y),
        "inf": np.where(np.arange(len(y)) == 3, np.inf, y),
        "2 columns": np.stack([y, y], axis=1),
        "wrong length": y[:-1],
        "None": None,
        "complex": y + 1j,
    }


@pytest.mark.parametrize("case", list(bad_labels(small_data()[1])))
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=ESTIMATOR_IDS)
def test_fit_refuses_bad_y(estimator, case):
    X, y = small_data()
    assert_refused(lambda: estimator.fit(X, bad_labels(y)[case]), "y")


@pytest.fixture(scope="module")
def fitted():
    X, y = small_data()
    return {type(e).__name__: e.fit(X, y) for e in small_estimators()}


@pytest.mark.parametrize("method", ["predict", "predict_proba"])
@pytest.mark.parametrize("case", list(BAD_POINTS))
@pytest.mark.parametrize("name", ESTIMATOR_IDS)
def test_predict_refuses_bad_X(fitted, name, case, method):
    assert_refused(lambda: getattr(fitted[name], method)(BAD_POINTS[case]), "X")


def test_continuous_targets_get_scikit_learns_message():
    X, _ = small_data()
    with pytest.raises(ValueError, match="Unknown label type"):
        ESTIMATORS[0].fit(X, X[:, 0])


# ---------------------------------------------------------------------------------------------
# functional API
def build(name, X, y):
    if name == "kd_tree":
        return jaxtree.kd_tree(X, max_depth=2)
    if name == "kd_tree(y)":
        return jaxtree.kd_tree(X, max_depth=2, y=y)
    if name == "dyadic_tree":
        return jaxtree.dyadic_tree(X, max_depth=2, y=y)
    if name == "cart_tree":
        return jaxtree.cart_tree(X, y, max_depth=2)
    return jaxtree.oblique_tree(X, y, max_depth=1)


BUILDERS = ["kd_tree", "dyadic_tree", "cart_tree", "oblique_tree"]


@pytest.mark.parametrize("case", list(BAD_X))
@pytest.mark.parametrize("builder", BUILDERS)
def test_builders_refuse_bad_X(builder, case):
    _, y = small_data()
    bad = BAD_X[case]
    labels = y[:bad.shape[0]] if case in ("no rows", "one row") else y
    assert_refused(lambda: build(builder, bad, labels), "X")


BAD_ENCODED_LABELS = {
    "2-D": lambda y: y[:, None],
    "wrong length": lambda y: y[:-1],
    "float": lambda y: y.astype(float),
    "negative": lambda y: y - 1,
    "strings": lambda y: y.astype(str),
    "complex": lambda y: y + 1j,
}


@pytest.mark.parametrize("case", list(BAD_ENCODED_LABELS))
@pytest.mark.parametrize("builder", ["kd_tree(y)", "dyadic_tree", "cart_tree", "oblique_tree"])
def test_builders_refuse_bad_y(builder, case):
    X, y = small_data()
    assert_refused(lambda: build(builder, X, BAD_ENCODED_LABELS[case](y)), "y")


@pytest.fixture(scope="module")
def tree_and_stats():
    X, y = small_data()
    tree = jaxtree.kd_tree(X, max_depth=3, y=y)
    return tree, jaxtree.node_stats(tree, X, y, 2)


def point_functions(tree, stats):
    log_w = jaxtree.pacbayes_log_weights(tree, stats, 1.0, 1.0)
    estimates = hsvote.hs_node_estimates(stats)
    node_proba = jaxtree.class_frequencies(tree, stats.counts)
    X, y = small_data()
    return {
        "route": lambda points: jaxtree.route(tree, points),
        "leaf_of": lambda points: jaxtree.leaf_of(tree, points),
        "node_stats": lambda points: jaxtree.node_stats(tree, points, y, 2),
        "vote": lambda points: jaxtree.vote(tree, stats.label, log_w, points, 2),
        "hs_vote": lambda points: jaxtree.hs_vote(tree, estimates, log_w, points),
        "posterior_predictive": lambda points: jaxtree.posterior_predictive(
            tree, node_proba, log_w, points),
    }


POINT_FUNCTIONS = ["route", "leaf_of", "node_stats", "vote", "hs_vote", "posterior_predictive"]


@pytest.mark.parametrize("case", list(BAD_POINTS))
@pytest.mark.parametrize("function", POINT_FUNCTIONS)
def test_functions_on_points_refuse_bad_X(tree_and_stats, function, case):
    call = point_functions(*tree_and_stats)[function]
    assert_refused(lambda: call(BAD_POINTS[case]), "X")


@pytest.mark.parametrize("case, labels, argument", [
    ("float", lambda y: y.astype(float), "y"),
    ("2-D", lambda y: y[:, None], "y"),
    ("wrong length", lambda y: y[:-1], "y"),
    ("out of range", lambda y: y + 1, "y"),
    ("strings", lambda y: y.astype(str), "y"),
    ("num_classes 0", None, "num_classes"),
    ("num_classes float", None, "num_classes"),
])
def test_node_stats_refuses_bad_labels(tree_and_stats, case, labels, argument):
    tree, _ = tree_and_stats
    X, y = small_data()
    num_classes = {"num_classes 0": 0, "num_classes float": 2.0}.get(case, 2)
    y = labels(y) if labels else y
    assert_refused(lambda: jaxtree.node_stats(tree, X, y, num_classes), argument)


@pytest.mark.parametrize("case", ["wrong length", "NaN", "negative", "complex"])
def test_node_stats_refuses_bad_sample_weight(tree_and_stats, case):
    tree, _ = tree_and_stats
    X, y = small_data()
    weight = {"wrong length": np.ones(len(y) - 1),
              "NaN": with_value(np.ones((len(y), 1)), 0, 0, np.nan)[:, 0],
              "negative": -np.ones(len(y)),
              "complex": np.ones(len(y)) + 1j}[case]
    assert_refused(lambda: jaxtree.node_stats(tree, X, y, 2, sample_weight=weight),
                   "sample_weight")


def test_vote_refuses_a_bad_class_count(tree_and_stats):
    tree, stats = tree_and_stats
    X, _ = small_data()
    log_w = jaxtree.pacbayes_log_weights(tree, stats, 1.0, 1.0)
    assert_refused(lambda: jaxtree.vote(tree, stats.label, log_w, X, 0), "num_classes")


def test_the_finite_check_reads_a_memory_map_block_by_block(tree_and_stats, tmp_path,
                                                             monkeypatch):
    """node_stats counts a numpy.memmap in chunks; its check must not read it whole either."""
    tree, stats = tree_and_stats
    X, y = small_data()
    monkeypatch.setattr(validation, "FINITE_CHECK_ROWS", 5)
    mapped = np.lib.format.open_memmap(tmp_path / "X.npy", mode="w+", dtype=X.dtype,
                                       shape=X.shape)
    mapped[:] = X
    np.testing.assert_array_equal(jaxtree.node_stats(tree, mapped, y, 2).counts, stats.counts)
    mapped[len(X) - 1, 2] = np.nan   # in the last block
    assert_refused(lambda: jaxtree.node_stats(tree, mapped, y, 2), "X")


def test_checks_inside_a_callers_jit_see_shapes_and_dtypes_only(tree_and_stats):
    """Under jit the values are unknown: shapes and dtypes are still checked, NaN passes."""
    tree, stats = tree_and_stats
    X, y = small_data()
    log_w = jaxtree.pacbayes_log_weights(tree, stats, 1.0, 1.0)
    scores = jax.jit(lambda points: jaxtree.vote(tree, stats.label, log_w, points, 2))
    np.testing.assert_allclose(scores(X), jaxtree.vote(tree, stats.label, log_w, X, 2))
    assert np.isfinite(np.asarray(scores(with_value(X, 0, 0, np.nan)))).all()
    with pytest.raises(ValueError, match=r"X must be \[n, 3\]"):
        scores(X[:, :2])
    with pytest.raises(TypeError, match="X has complex dtype"):
        jax.jit(lambda points: jaxtree.route(tree, points))(X + 1j)



@pytest.mark.parametrize("function", POINT_FUNCTIONS)
def test_concrete_points_closed_over_by_a_callers_jit_are_checked_not_traced(tree_and_stats,
                                                                             function):
    """A caller's jit that closes over concrete points (and λ's as arguments): the finite check
    evaluates them at trace time instead of turning them into a traced boolean."""
    tree, stats = tree_and_stats
    X, _ = small_data()
    points = jnp.asarray(X, jnp.float32)
    call = point_functions(tree, stats)[function]
    expected = call(points)
    got = jax.jit(lambda: call(points))()
    jax.tree.map(np.testing.assert_array_equal, got, expected)
    with pytest.raises(ValueError, match="NaN or infinite"):
        bad = jnp.asarray(with_value(X.copy(), 0, 0, np.nan), jnp.float32)
        jax.jit(lambda: call(bad))()

# ---------------------------------------------------------------------------------------------
# valid edge cases
def edge_cases():
    X, y = small_data()
    identical = np.ones_like(X)
    constant = X.copy()
    constant[:, 1] = 5.0
    return {
        "one class": (X, np.full(len(y), 4)),
        "two samples": (X[:2], np.array([0, 1])),
        "identical rows": (identical, y),
        "constant feature": (constant, y),
        "string labels": (X, np.array(["no", "yes"])[y]),
        "object string labels": (X, np.array(["no", "yes"], dtype=object)[y]),
        "int X": ((X * 10).astype(np.int64), y),
        "bool X": (X > 0, y),
        "float32 X": (X.astype(np.float32), y),
    }


EDGE_CASES = edge_cases()
# what the estimators differ in (their fitting and scoring of degenerate trees); the kinds of
# X and labels go through the shared validation, tested on every estimator in the slow run
TREE_CASES = ("one class", "two samples", "identical rows", "constant feature")


def edge_case(estimator, case):
    """Slow: the kinds of X and labels beyond the first estimator, and the oblique tree's cases
    of new data shapes (its split search compiles for each, ~10 s on a loaded 2-core CPU)."""
    oblique = isinstance(estimator, jaxtree.ObliqueTreeClassifier)
    slow = ((case not in TREE_CASES and estimator is not ESTIMATORS[0])
            or (oblique and case in ("two samples", "identical rows")))
    return pytest.param(estimator, case, marks=pytest.mark.slow if slow else (),
                        id=f"{type(estimator).__name__}-{case}")


@pytest.mark.parametrize("estimator, case", [edge_case(e, c) for e in ESTIMATORS
                                             for c in EDGE_CASES])
def test_valid_edge_cases_fit_and_predict(estimator, case):
    X, y = EDGE_CASES[case]
    model = estimator.fit(X, y)
    np.testing.assert_array_equal(model.classes_, np.unique(y))
    proba = model.predict_proba(X)
    assert proba.shape == (len(X), len(model.classes_))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-5)
    predicted = model.predict(X)
    assert set(predicted) <= set(model.classes_)
    if case == "one class":
        np.testing.assert_array_equal(predicted, y)
    if case == "identical rows":  # one cell: every point gets the majority label
        assert len(set(predicted)) == 1
        assert np.mean(predicted == y) >= 0.5


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=ESTIMATOR_IDS)
def test_pandas_frames_set_feature_names(estimator):
    X, y = small_data()
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    model = estimator.fit(frame, pd.Series(np.array(["no", "yes"])[y]))
    np.testing.assert_array_equal(model.feature_names_in_, ["a", "b", "c"])
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        np.testing.assert_array_equal(model.predict(frame), model.predict(X))
    with pytest.raises(ValueError, match="feature names should match"):
        model.predict(frame.rename(columns={"a": "z"}))


@pytest.mark.parametrize("case", ["two samples", "identical rows", "constant feature", "int X",
                                  "bool X"])
@pytest.mark.parametrize("builder", BUILDERS[:3])
def test_builders_take_valid_edge_cases(builder, case):
    X, y = EDGE_CASES[case]
    tree = build(builder, X, y)
    stats = jaxtree.node_stats(tree, X, y, 2)
    assert float(stats.num_samples) == len(X)
    leaves = np.asarray(jaxtree.leaf_of(tree, X))
    assert not np.asarray(tree.internal)[leaves].any()
