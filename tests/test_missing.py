"""Missing values (NaN) in a CART T0: each split learns the side that missing values take, as
scikit-learn's trees do (>= 1.3); the other trees refuse NaN with a clear error.

The JAX builder is checked against scikit-learn's ``DecisionTreeClassifier`` itself: with as
many bins as rows every distinct value is a cut, so on continuous data (no ties) the two grow the
same partition of the training rows, with the same side for the missing values at every node.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.tree import DecisionTreeClassifier

import jaxtree
from jaxtree.grow import GrowConfig, grow_tree


def problem(seed, n=300, dims=4, missing=0.25):
    """Continuous features, labels from features 0-2, NaN at random in every feature; on every
    third seed feature 3 is missing exactly for class 1 (its missingness is the signal)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dims))
    y = ((X[:, 0] + 0.5 * X[:, 1] + 0.5 * rng.normal(size=n)) > 0).astype(int)
    if seed % 2:
        y = y + (X[:, 2] > 1)
    X_missing = np.where(rng.random(X.shape) < missing, np.nan, X)
    if seed % 3 == 0:
        X_missing[:, 3] = np.where(y == 1, np.nan, X[:, 3])
    return X, X_missing, y


def same_partition(a, b) -> bool:
    """Whether two labellings of the same rows (leaf ids) group the rows alike."""
    return len(set(zip(a, b))) == len(set(a)) == len(set(b))


def grown(X, y, missing, depth=2, **options):
    config = GrowConfig(partition="cart", max_depth=depth, width=2 ** (depth + 1),
                        bins=2 * len(X), num_classes=int(y.max()) + 1, missing=missing,
                        **options)
    tree, info = grow_tree(X, y, np.ones(len(y)), config)
    assert int(info.capped) == 0
    return tree


def matched_nodes(tree, reference):
    """``(ours, theirs)``: the root and its children as slots of a compact tree of width 8 and
    as scikit-learn's node ids, those that split in both (the rest must be leaves in both)."""
    sk = reference.tree_
    theirs = np.array([0, sk.children_left[0], sk.children_right[0]])
    ours = np.array([0, 8, 9])
    splits = sk.children_left[theirs] != -1
    np.testing.assert_array_equal(np.asarray(tree.internal)[ours], splits)
    return ours[splits], theirs[splits]


def assert_same_splits(tree, reference):
    ours, theirs = matched_nodes(tree, reference)
    np.testing.assert_array_equal(np.asarray(tree.feature)[ours], reference.tree_.feature[theirs])
    np.testing.assert_array_equal(np.asarray(tree.missing_right)[ours],
                                  ~reference.tree_.missing_go_to_left[theirs].astype(bool))


@pytest.mark.parametrize("seed", [0, 1, 2, 3] + [pytest.param(s, marks=pytest.mark.slow)
                                                  for s in range(4, 12)])
def test_splits_learnt_with_missing_values_are_scikit_learns(seed):
    _, X, y = problem(seed)
    reference = DecisionTreeClassifier(max_depth=2, random_state=0).fit(X, y)
    tree = grown(X, y, missing=True)
    assert same_partition(np.asarray(jaxtree.leaf_of(tree, X)), reference.apply(X))
    assert_same_splits(tree, reference)


@pytest.mark.parametrize("seed", [1, 5, 9])
def test_a_tree_grown_without_missing_values_sends_them_to_the_larger_child(seed):
    """scikit-learn's rule where a split saw no missing value: the child with more samples
    (ties: right)."""
    X, _, y = problem(seed)
    reference = DecisionTreeClassifier(max_depth=2, random_state=0).fit(X, y)
    assert_same_splits(grown(X, y, missing=False), reference)


def test_missing_goes_right_on_a_tie_in_size():
    X = np.array([[0.0], [1.0], [2.0], [3.0], [8.0], [9.0], [11.0], [12.0]])
    tree = grown(X, (X[:, 0] > 5).astype(int), missing=False, depth=1)
    assert bool(tree.missing_right[0])
    assert int(jaxtree.leaf_of(tree, np.array([[np.nan]]))[0]) == 5     # slot 4 + 1: right


@pytest.mark.parametrize("max_features", [None, pytest.param(2, marks=pytest.mark.slow)])
def test_the_missing_value_program_grows_the_same_tree_on_complete_data(max_features):
    X, _, y = problem(2, n=200)
    key = jax.random.key(3)
    trees = [grow_tree(X, y, np.ones(len(y)), GrowConfig(
        partition="cart", max_depth=8, width=64, max_features=max_features, missing=missing),
        key)[0] for missing in (False, True)]
    for field in ("feature", "threshold", "internal", "missing_right"):
        np.testing.assert_array_equal(np.asarray(getattr(trees[0], field)),
                                      np.asarray(getattr(trees[1], field)), err_msg=field)


def test_missingness_alone_can_be_the_split():
    """Class 0 exactly where the feature is missing (scikit-learn's own test of this): the split
    separates the missing rows (threshold +inf, missing right)."""
    X = np.array([[np.nan] * 4 + [0, 1, 2, 3, 8, 9, 11, 12]]).T
    y = np.array([0] * 4 + [1] * 4 + [2] * 4)
    tree = grown(X, y, missing=True)
    leaf = np.asarray(jaxtree.leaf_of(tree, X))
    assert same_partition(leaf, y)
    test = np.array([[np.nan], [3.0], [12.0]])
    np.testing.assert_array_equal(
        [y[leaf == t][0] for t in np.asarray(jaxtree.leaf_of(tree, test))], [0, 1, 2])


@pytest.mark.slow
def test_integer_weights_repeat_rows_with_missing_values():
    _, X, y = problem(4, n=120)
    weight = np.random.default_rng(0).integers(0, 3, len(y))
    config = GrowConfig(partition="cart", max_depth=6, width=64, missing=True)
    weighted = grow_tree(X, y, weight.astype(float), config)[0]
    repeated = grow_tree(np.repeat(X, weight, 0), np.repeat(y, weight), np.ones(weight.sum()),
                         config)[0]
    for field in ("feature", "threshold", "internal", "missing_right"):
        np.testing.assert_array_equal(np.asarray(getattr(weighted, field)),
                                      np.asarray(getattr(repeated, field)), err_msg=field)


def test_builders_and_routing_refuse_nan_they_cannot_route():
    X, X_missing, y = problem(0, n=60)
    with pytest.raises(ValueError, match="missing=True"):
        grow_tree(X_missing, y, np.ones(len(y)), GrowConfig(partition="cart", max_depth=3))
    with pytest.raises(ValueError, match="GrowConfig.missing"):
        grow_tree(X_missing, y, np.ones(len(y)), GrowConfig(partition="kd", missing=True))
    kd = jaxtree.kd_tree(X, max_depth=3)
    assert not kd.routes_missing
    with pytest.raises(ValueError, match="NaN"):
        jaxtree.route(kd, X_missing)
    cart = grown(X, y, missing=False)
    with pytest.raises(ValueError, match="infinite"):
        jaxtree.route(cart, np.where(np.isnan(X_missing), np.inf, X))


# -- the estimators -----------------------------------------------------------------------------
def cart_estimators():
    slow = pytest.mark.slow
    return [jaxtree.PACBayesTreeClassifier(),
            pytest.param(jaxtree.PrunedTreeClassifier(partition="cart"), marks=slow),
            pytest.param(jaxtree.HSVoteClassifier(partition="cart"), marks=slow),
            jaxtree.PACBayesForestClassifier(n_estimators=8, random_state=0)]


@pytest.mark.parametrize("estimator", cart_estimators(),
                         ids=["PACBayesTree", "PrunedTree", "HSVote", "PACBayesForest"])
def test_cart_estimators_fit_and_predict_with_missing_values(estimator):
    _, X, y = problem(0, n=240, missing=0.15)      # binary; feature 3 missing iff class 1
    assert estimator.__sklearn_tags__().input_tags.allow_nan
    model = estimator.fit(X[:160], y[:160])
    proba = model.predict_proba(X[160:])
    assert np.isfinite(proba).all()
    np.testing.assert_allclose(proba.sum(axis=1), 1, atol=1e-5)
    assert model.score(X[160:], y[160:]) > 0.95    # it reads the missingness of feature 3
    infinite = np.where(np.isnan(X), np.inf, X)
    with pytest.raises(ValueError, match="infinity"):
        model.predict(infinite[:5])
    with pytest.raises(ValueError, match="infinity"):
        clone(estimator).fit(infinite[:160], y[:160])


def test_a_model_fitted_on_complete_data_predicts_rows_with_missing_values():
    X, X_missing, y = problem(1, n=240)
    model = jaxtree.PACBayesTreeClassifier().fit(X[:160], y[:160])
    assert model.predict(X_missing[160:]).shape == (80,)
    assert model.score(X_missing[160:], y[160:]) > 0.5


@pytest.mark.parametrize("estimator", [jaxtree.PACBayesTreeClassifier(partition="kd"),
                                       jaxtree.PACBayesTreeClassifier(partition="dyadic"),
                                       jaxtree.PrunedTreeClassifier(),
                                       jaxtree.ObliqueTreeClassifier(max_depth=2)],
                         ids=lambda e: f"{type(e).__name__}({getattr(e, 'partition', '')})")
def test_other_trees_refuse_missing_values(estimator):
    _, X, y = problem(0, n=60)
    assert not estimator.__sklearn_tags__().input_tags.allow_nan
    with pytest.raises(ValueError, match="NaN"):
        estimator.fit(X, y)


def test_the_side_of_missing_values_is_saved_and_shown(tmp_path):
    _, X, y = problem(3, n=200)
    model = jaxtree.PACBayesTreeClassifier().fit(X, y)
    model.save(tmp_path / "model.npz")
    loaded = jaxtree.load(tmp_path / "model.npz")
    np.testing.assert_array_equal(np.asarray(loaded.tree_.missing_right),
                                  np.asarray(model.tree_.missing_right))
    np.testing.assert_array_equal(loaded.predict_proba(X), model.predict_proba(X))
    text = jaxtree.export_text(model)
    splits = int(np.asarray(model.tree_.internal).sum())
    assert text.count(" or NaN") == splits


def test_the_pure_fit_learns_missing_values_under_jit():
    _, X, y = problem(3, n=200)
    X, y = jnp.asarray(X, jnp.float32), jnp.asarray((y > 0).astype(np.int32))
    eager = jaxtree.fit(X, y, num_classes=2, partition="cart", width=64, lam1=4.0, lam2=1.0)
    assert eager.tree.routes_missing
    jitted = jax.jit(lambda X, y: jaxtree.fit(
        X, y, num_classes=2, partition="cart", width=64, lam1=4.0, lam2=1.0, missing=True))(X, y)
    np.testing.assert_allclose(jaxtree.predict_proba(jitted, X),
                               jaxtree.predict_proba(eager, X), atol=1e-6)
    with pytest.raises(ValueError, match="partition='cart'"):
        jaxtree.fit(X, y, num_classes=2, partition="kd", lam1=4.0, lam2=1.0)
    with pytest.raises(ValueError, match="missing=True"):
        jaxtree.fit(X, y, num_classes=2, partition="cart", lam1=4.0, lam2=1.0, missing=False)
