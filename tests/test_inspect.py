"""Feature importances, export_text and plot_tree (docs/theory/importance.md) against brute force
over every pruning of small trees."""

import itertools

import matplotlib
import numpy as np
import pytest

import jaxtree
from jaxtree.inspect import impurity_decrease, split_probability
from tests.small_models import small_data, small_estimators

matplotlib.use("Agg")


def prunings(internal, left, node=0):
    """Every pruning of the subtree at ``node`` (children ``left[node]`` and ``left[node] + 1``):
    a list of ``(leaves, splits)``."""
    result = [((node,), ())]
    if internal[node]:
        for (ll, ls), (rl, rs) in itertools.product(prunings(internal, left, left[node]),
                                                    prunings(internal, left, left[node] + 1)):
            result.append((ll + rl, (node,) + ls + rs))
    return result


def gini_decrease(counts, internal, left):
    """``N_A·G(A) − N_L·G(L) − N_R·G(R)`` per node, from the counts, in plain NumPy."""
    counts = np.asarray(counts, np.float64)
    total = counts.sum(axis=1)
    impurity = total - (counts ** 2).sum(axis=1) / np.where(total > 0, total, 1)
    out = np.zeros(len(total))
    for a in np.flatnonzero(internal):
        out[a] = impurity[a] - impurity[left[a]] - impurity[left[a] + 1]
    return out


def brute_importances(model):
    """``Σ_T Q(T)·Σ_{A split by T} ΔI(A)·e_feature(A)``, Q from the practical potentials."""
    internal = np.asarray(model.tree_.internal)
    phi = np.asarray(jaxtree.pacbayes_potentials(model.stats_, model.lam1, model.lam2),
                     np.float64)
    left = np.asarray(model.tree_.left_child)
    all_prunings = prunings(internal, left)
    log_q = np.array([phi[list(leaves)].sum() for leaves, _ in all_prunings])
    q = np.exp(log_q - log_q.max())
    q /= q.sum()
    p_split = np.zeros(len(internal))
    for prob, (_, splits) in zip(q, all_prunings):
        p_split[list(splits)] += prob
    decrease = gini_decrease(model.stats_.counts, internal, left)
    importance = np.bincount(np.asarray(model.tree_.feature), weights=p_split * decrease,
                             minlength=model.n_features_in_)
    return p_split, importance / importance.sum()


@pytest.mark.parametrize("lam1, lam2", [(0.5, 1.0), (4.0, 0.25)])
def test_pacbayes_importances_equal_brute_force_over_prunings(lam1, lam2):
    X, y = small_data(n=40, dims=3, seed=1)
    model = jaxtree.PACBayesTreeClassifier(partition="kd", split="cycle", max_depth=3,
                                           lam1=lam1, lam2=lam2).fit(X, y)
    p_split, expected = brute_importances(model)
    assert len(prunings(np.asarray(model.tree_.internal),
                        np.asarray(model.tree_.left_child))) > 5   # a tree worth enumerating
    np.testing.assert_allclose(split_probability(model), p_split, atol=1e-5)
    np.testing.assert_allclose(model.feature_importances_, expected, atol=1e-5)


def test_impurity_decrease_is_the_gini_decrease_of_the_counts():
    X, y = small_data(n=40, dims=3, seed=2)
    model = jaxtree.PACBayesTreeClassifier(partition="kd", max_depth=3,
                                           lam1=1.0, lam2=1.0).fit(X, y)
    np.testing.assert_allclose(impurity_decrease(model),
                               gini_decrease(model.stats_.counts, model.tree_.internal,
                                             np.asarray(model.tree_.left_child)),
                               atol=1e-4)


def test_a_pruning_uses_exactly_its_internal_nodes():
    X, y = small_data(n=40, dims=3, seed=3)
    model = jaxtree.PrunedTreeClassifier(max_depth=3, lam=0.5).fit(X, y)
    internal = np.asarray(model.tree_.internal)
    left = np.asarray(model.tree_.left_child)
    leaves = np.asarray(model.leaf_mask_)
    # the pruning's internal nodes: T0's internal nodes with a pruning leaf strictly below
    expected = np.zeros(len(internal))
    for a in np.flatnonzero(internal):
        below, frontier = [], [left[a], left[a] + 1]
        while frontier:
            b = frontier.pop()
            below.append(b)
            if b < len(internal) and internal[b]:
                frontier += [left[b], left[b] + 1]
        expected[a] = float(leaves[below].any())
    assert 0 < expected.sum() < internal.sum()           # the pruning cut some of T0
    np.testing.assert_array_equal(split_probability(model), expected)


@pytest.mark.parametrize("model", small_estimators(), ids=lambda m: type(m).__name__)
def test_importances_sum_to_one_and_rank_the_informative_feature_first(model):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 4))
    y = (X[:, 2] > 0.1).astype(int)
    importance = model.fit(X, y).feature_importances_
    assert importance.shape == (4,) and np.all(importance >= 0)
    assert importance.sum() == pytest.approx(1.0)
    assert np.argmax(importance) == 2


def test_a_model_that_never_splits_has_zero_importances():
    X, y = small_data(n=12, dims=3)
    model = jaxtree.PrunedTreeClassifier(max_depth=3, lam=1e6).fit(X, y)
    assert model.n_leaves_ == 1
    np.testing.assert_array_equal(model.feature_importances_, np.zeros(3))


def test_export_text_shows_every_split_with_its_threshold_in_x_units():
    X, y = small_data(n=40, dims=3, seed=1)
    model = jaxtree.PACBayesTreeClassifier(partition="kd", max_depth=2, lam1=1.0,
                                           lam2=1.0).fit(X, y)
    text = jaxtree.export_text(model, feature_names=["a", "b", "c"], decimals=4)
    tree = model.tree_
    internal = np.flatnonzero(np.asarray(tree.internal))
    for node in internal:
        d = int(tree.feature[node])
        t = float(tree.threshold[node]) / float(tree.inv_scale[d]) + float(tree.shift[d])
        # the printed threshold splits the training points as the tree does
        assert f"{'abc'[d]} <= {t:.4f}" in text and f"{'abc'[d]} >  {t:.4f}" in text
    lines = text.splitlines()
    assert len(lines) == 1 + 2 * len(internal)
    assert lines[0].startswith("n=40, counts=")
    weights = np.exp(np.asarray(model.node_log_weights_))
    assert f"P(stop)={weights[0]:.4f}" in lines[0]


def test_export_text_truncates_and_checks_its_arguments():
    X, y = small_data(n=40, dims=3, seed=1)
    model = jaxtree.PrunedTreeClassifier(max_depth=3, lam=0.0).fit(X, y)
    assert "(truncated)" in jaxtree.export_text(model, max_depth=1)
    with pytest.raises(ValueError, match="feature_names"):
        jaxtree.export_text(model, feature_names=["a"])
    with pytest.raises(ValueError, match="max_depth"):
        jaxtree.export_text(model, max_depth=-1)


def test_plot_tree_draws_one_box_per_node_on_an_agg_axis():
    import matplotlib.pyplot as plt
    X, y = small_data(n=40, dims=3, seed=1)
    model = jaxtree.PACBayesTreeClassifier(partition="kd", max_depth=3, lam1=1.0,
                                           lam2=1.0).fit(X, y)
    fig, ax = plt.subplots()
    artists = jaxtree.plot_tree(model, ax=ax)
    shown = 1 + 2 * int(np.asarray(model.tree_.internal).sum())
    assert len(artists) == shown
    weights = np.exp(np.asarray(model.node_log_weights_))
    # the root's box is coloured by its probability of stopping
    colour = matplotlib.colormaps["viridis"](float(weights[0]))
    np.testing.assert_allclose(artists[-1].get_bbox_patch().get_facecolor(), colour)
    assert len(jaxtree.plot_tree(model, ax=ax, max_depth=1)) == 3
    plt.close(fig)
