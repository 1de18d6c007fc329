"""Node statistics (docs/theory/trees.md) against plain loops over points and nodes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxtree
from jaxtree.build import dyadic_tree, kd_tree
from jaxtree.layout import CompleteLayout
from jaxtree import stats as stats_module
from jaxtree.stats import (count_chunks, node_labels, node_stats, node_stats_from_chunks,
                           row_chunks)
from jaxtree.tree import tree_from_numpy
from test_tree import walk


def reference_stats(tree, X, y, num_classes, weight=None):
    """``(counts [nodes, L], label [nodes], errors [nodes])`` by walking every point."""
    weight = np.ones(len(X)) if weight is None else weight
    counts = np.zeros((tree.num_nodes, num_classes))
    for x, label, w in zip(X, y, weight):
        for node in walk(tree, x):
            counts[node, label] += w
    parent = np.asarray(tree.layout.parent_index())
    label = np.zeros(tree.num_nodes, int)
    for node in range(tree.num_nodes):             # heap order: parents come first
        label[node] = np.argmax(counts[node]) if counts[node].sum() > 0 else label[parent[node]]
    errors = counts.sum(axis=1) - counts[np.arange(tree.num_nodes), label]
    return counts, label, errors


def assert_stats_equal(stats, counts, label, errors):
    np.testing.assert_allclose(np.asarray(stats.counts), counts, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(stats.label), label)
    np.testing.assert_allclose(np.asarray(stats.errors), errors, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(stats.total), counts.sum(axis=1), rtol=1e-6)


def data(seed, n=60, classes=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2)).round(1)
    y = rng.integers(0, classes, n)
    return X, y


@pytest.mark.parametrize("builder", [kd_tree, dyadic_tree])
def test_counts_labels_errors_match_a_loop(precision, builder):
    X, y = data(0)
    tree = builder(X, max_depth=4, y=y, layout="complete")
    stats = node_stats(tree, X, jnp.asarray(y), 3)
    assert stats.counts.dtype == precision and stats.counts.shape == (tree.num_nodes, 3)
    assert stats.label.dtype == jnp.int32 and stats.num_classes == 3
    assert_stats_equal(stats, *reference_stats(tree, X, y, 3))
    assert float(stats.num_samples) == len(X)


def test_statistics_of_another_sample_have_empty_chains(precision):
    """A sample unlike the training one leaves whole subtrees empty: labels come from the
    nearest non-empty ancestor."""
    X, y = data(1)
    tree = kd_tree(X, max_depth=4, layout="complete")
    X_other, y_other = X[:5] + 0.01, np.array([2, 2, 1, 0, 1])
    counts, label, errors = reference_stats(tree, X_other, y_other, 3)
    stats = node_stats(tree, X_other, jnp.asarray(y_other), 3)
    assert_stats_equal(stats, counts, label, errors)
    # the case is real: some empty node has an empty parent (a chain of inheritance)
    parent = tree.layout.parent_index()
    empty = counts.sum(axis=1) == 0
    internal = np.asarray(tree.internal)
    chain = empty & empty[parent] & internal[parent]
    assert chain.any()


def test_label_ties_go_to_the_smallest_and_empty_nodes_inherit(precision):
    layout = CompleteLayout(2)
    internal = np.array([True, True, True, False, False, False, False])
    tree = tree_from_numpy(np.zeros(7), np.zeros(7), internal, layout, [0.0], [1.0], False)
    counts = jnp.asarray([[3, 3, 1],    # tie 0/1 -> 0
                          [0, 2, 2],    # tie 1/2 -> 1
                          [0, 0, 0],    # empty -> root's 0
                          [0, 0, 0],    # empty -> parent's 1
                          [1, 0, 5],
                          [0, 0, 0],    # empty chain -> 0
                          [0, 4, 4]],   # tie -> 1
                         precision)
    np.testing.assert_array_equal(np.asarray(node_labels(tree, counts)), [0, 1, 0, 1, 2, 0, 1])


def test_sample_weight_equals_subsetting_and_duplicating(precision):
    X, y = data(2)
    tree = dyadic_tree(X, max_depth=4, layout="complete")
    rng = np.random.default_rng(2)
    mask = rng.random(len(X)) < 0.5
    weighted = node_stats(tree, X, jnp.asarray(y), 3, jnp.asarray(mask, precision))
    subset = node_stats(tree, X[mask], jnp.asarray(y[mask]), 3)
    np.testing.assert_array_equal(np.asarray(weighted.counts), np.asarray(subset.counts))
    np.testing.assert_array_equal(np.asarray(weighted.label), np.asarray(subset.label))
    repeats = rng.integers(0, 4, len(X))
    weighted = node_stats(tree, X, jnp.asarray(y), 3, jnp.asarray(repeats, precision))
    assert_stats_equal(weighted, *reference_stats(tree, np.repeat(X, repeats, 0),
                                                  np.repeat(y, repeats), 3))


def test_fold_statistics_are_one_vmap(precision):
    X, y = data(3)
    tree = kd_tree(X, max_depth=4, layout="complete")
    folds = jnp.asarray(np.random.default_rng(3).random((3, len(X))) < 0.5, precision)
    batched = jax.jit(jax.vmap(lambda w: node_stats(tree, X, jnp.asarray(y), 3, w)))(folds)
    for k, w in enumerate(folds):
        single = node_stats(tree, X, jnp.asarray(y), 3, w)
        np.testing.assert_array_equal(np.asarray(batched.counts[k]), np.asarray(single.counts))
        np.testing.assert_array_equal(np.asarray(batched.label[k]), np.asarray(single.label))


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), n=st.sampled_from([2, 5, 30]),
       classes=st.integers(1, 3),
       distinct=st.integers(1, 4), kind=st.sampled_from(["kd", "dyadic"]))
def test_random_samples_match_a_loop(seed, n, classes, distinct, kind):
    """Duplicate points, a single class, empty cells (stats on a fresh sample of the same law)."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, distinct, (n, 2)).astype(float)
    y = rng.integers(0, classes, n)
    builder = kd_tree if kind == "kd" else dyadic_tree
    tree = builder(X, max_depth=3, layout="complete")
    X_new = rng.integers(0, distinct, (n, 2)).astype(float) + rng.uniform(-1, 1, (n, 2))
    for sample_X in (X, X_new):
        stats = node_stats(tree, sample_X, jnp.asarray(y), 3)
        counts, label, errors = reference_stats(tree, sample_X, y, 3)
        assert_stats_equal(stats, counts, label, errors)
        assert (np.asarray(stats.errors) >= 0).all()


def test_bad_samples_are_clear_errors():
    X = np.random.default_rng(0).normal(size=(30, 3)).astype(np.float32)
    y = np.arange(30) % 3
    tree = jaxtree.kd_tree(X, 3, y=y)
    with pytest.raises(ValueError, match="labels must lie in"):
        jaxtree.node_stats(tree, X, y, 2)            # label 2 would count nowhere
    with pytest.raises(ValueError, match=r"X must be \[n, 3\]"):
        jaxtree.node_stats(tree, X[:, :2], y, 3)
    with pytest.raises(ValueError, match="y must be"):
        jaxtree.node_stats(tree, X, y[:-1], 3)
    with pytest.raises(ValueError, match="sample_weight"):
        jaxtree.node_stats(tree, X, y, 3, sample_weight=np.ones(29))
    # inside a caller's jit the labels are not concrete: shapes are still checked, values not
    total = jax.jit(lambda y: jaxtree.node_stats(tree, X, y, 3).total[0])(jnp.asarray(y))
    assert float(total) == 30


# -- in chunks ------------------------------------------------------------------------------------
def test_chunked_statistics_equal_one_pass(precision, tmp_path):
    """Chunks of 7 rows, a memory-mapped file and an iterable of uneven chunks (with weights)
    give the one-pass statistics: exact counts, equal labels."""
    X, y = data(5, n=101)
    tree = kd_tree(X, max_depth=5, y=y, layout="complete")
    one = node_stats(tree, X, y, 3)
    mapped = np.lib.format.open_memmap(tmp_path / "X.npy", mode="w+", dtype=X.dtype,
                                       shape=X.shape)
    mapped[:] = X
    for stats in (node_stats(tree, X, y, 3, chunk_size=7), node_stats(tree, mapped, y, 3),
                  node_stats_from_chunks(tree, ((X[a:b], y[a:b]) for a, b in
                                                [(0, 50), (50, 51), (51, 101)]), 3)):
        assert stats.counts.dtype == precision
        np.testing.assert_array_equal(np.asarray(stats.counts), np.asarray(one.counts))
        np.testing.assert_array_equal(np.asarray(stats.label), np.asarray(one.label))
    weight = np.random.default_rng(5).random(len(X))
    chunked = node_stats_from_chunks(tree, ((X[a:a + 30], y[a:a + 30], weight[a:a + 30])
                                            for a in range(0, 101, 30)), 3)
    np.testing.assert_allclose(np.asarray(chunked.counts),
                               reference_stats(tree, X, y, 3, weight)[0], rtol=1e-5)


def test_count_chunks_at_leaves_and_under_several_weightings():
    X, y = data(6, n=80)
    tree = dyadic_tree(X, max_depth=4, y=y, layout="complete")
    masks = np.random.default_rng(6).random((len(X), 2)) < 0.5          # [rows, F]
    along_path = count_chunks(tree, row_chunks(16, X, y, masks), 3)      # [F, nodes, L]
    at_leaves = count_chunks(tree, row_chunks(16, X, y, masks), 3, leaves_only=True)
    leaf = np.asarray(jaxtree.leaf_of(tree, X))
    for f in range(2):
        np.testing.assert_array_equal(along_path[f], reference_stats(tree, X, y, 3,
                                                                     masks[:, f])[0])
        expected = np.zeros((tree.num_nodes, 3))
        np.add.at(expected, (leaf, y), masks[:, f])
        np.testing.assert_array_equal(at_leaves[f], expected)
    with pytest.raises(ValueError, match="chunk_size"):
        next(row_chunks(0, X))
    with pytest.raises(ValueError, match="no rows"):
        node_stats_from_chunks(tree, [], 3)


def test_more_rows_than_float32_counts_one_by_one_are_counted_in_chunks(monkeypatch):
    """Past 2^24 rows a float32 sum of ones stops growing: node_stats then counts in chunks
    added in float64 (here the limit is lowered to 50 rows; the slow test below crosses 2^24)."""
    X, y = data(7, n=120)
    tree = kd_tree(X, max_depth=4, y=y, layout="complete")
    reference = reference_stats(tree, X, y, 3)
    monkeypatch.setitem(stats_module.EXACT_ROWS, 4, 50)
    monkeypatch.setitem(stats_module.EXACT_ROWS, 8, 50)
    monkeypatch.setattr(stats_module, "DEFAULT_CHUNK_ROWS", 32)
    assert_stats_equal(node_stats(tree, X, y, 3), *reference)


@pytest.mark.slow
def test_root_count_past_two_to_the_24():
    n = 2 ** 24 + 5
    X = np.zeros((n, 1), np.float32)
    tree = kd_tree(np.array([[0.0], [1.0]]), max_depth=1, layout="complete")
    stats = node_stats(tree, X, np.zeros(n, np.int32), 1)
    assert float(stats.counts[0, 0]) == float(np.float32(n))     # not 2^24
