"""The compact layout: brute force on small trees, agreement with the complete layout, depth."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp

import jaxtree
from jaxtree.build import GrownLevel, level_slots, pack
from jaxtree.compact import CompactLayout, pad_compact
from jaxtree.engine import (best_pruning, log_partition, subtree_log_weights,
                            tree_membership)
from jaxtree.layout import CompleteLayout
from experiments.example import load_csv


# -- helpers ---------------------------------------------------------------------------------------
def random_levels(seed, depth, dims=3, p_split=0.7):
    """Random tree of depth <= ``depth`` as grown levels (root always split when depth > 0)."""
    rng = np.random.default_rng(seed)
    levels, parent = [], np.array([-1])
    for level in range(depth + 1):
        m = parent.shape[0]
        internal = (rng.random(m) < p_split) | (level == 0)
        internal &= level < depth
        feature = np.where(internal, rng.integers(dims, size=m), 0)
        threshold = np.where(internal, rng.random(m), 0.0)
        levels.append(GrownLevel(parent, internal, feature, threshold))
        if not internal.any():
            break
        parent = np.repeat(np.flatnonzero(internal), 2)
    return levels


def packed(levels, layout, dims=3):
    return pack(levels, np.zeros(dims), np.ones(dims), clip=False, layout=layout)


def prunings(levels, node=(0, 0)):
    """Every pruning of the subtree at ``node`` = (level, index): (leaves, internal nodes)."""
    level, index = node
    yield [node], []
    if levels[level].internal[index]:
        child = 2 * (np.cumsum(levels[level].internal)[index] - 1)
        for (l_leaves, l_int), (r_leaves, r_int) in itertools.product(
                list(prunings(levels, (level + 1, child))),
                list(prunings(levels, (level + 1, child + 1)))):
            yield l_leaves + r_leaves, [node] + l_int + r_int


def brute_force(levels, slots, leaf, split):
    """Log weights and the best pruning's leaves by enumeration; ``{slot: value}`` dicts."""
    nodes = [(l, k) for l, level in enumerate(levels) for k in range(len(level.internal))]
    slot = {node: slots[node[0]][node[1]] for node in nodes}
    all_prunings = list(prunings(levels))
    score = np.array([sum(leaf[slot[a]] for a in leaves) + sum(split[slot[a]] for a in inner)
                      for leaves, inner in all_prunings])
    log_z = logsumexp(score)
    log_w = {slot[a]: logsumexp([s for s, (leaves, _) in zip(score, all_prunings)
                                 if a in leaves]) - log_z for a in nodes}
    best_leaves = all_prunings[int(np.argmax(score))][0]   # max score = min cost of -score
    return log_w, log_z, {slot[a] for a in best_leaves}


def spam(n, offset=0):
    """``n`` spam rows in a fixed random order (the file is sorted by label)."""
    X, y = load_csv("spam")
    rows = np.random.default_rng(0).permutation(len(y))[offset:offset + n]
    return X[rows], y[rows]


def tol(dtype):
    return 1e-9 if dtype == jnp.float64 else 2e-4


# -- brute force ---------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [2, 3])
def test_engine_matches_brute_force_on_compact_layout(precision, seed):
    levels = random_levels(seed, depth=4)
    tree = packed(levels, "compact")
    slots = level_slots(levels, tree.layout)
    rng = np.random.default_rng(100 + seed)
    leaf = rng.normal(size=tree.num_nodes) * 3
    split = rng.normal(size=tree.num_nodes)
    log_w, log_z, best = brute_force(levels, slots, leaf, split)

    got = subtree_log_weights(jnp.asarray(leaf, precision), tree.internal,
                              jnp.asarray(split, precision), layout=tree.layout)
    mask = best_pruning(-jnp.asarray(leaf, precision), tree.internal,
                        -jnp.asarray(split, precision), layout=tree.layout)
    in_tree = np.zeros(tree.num_nodes, bool)
    in_tree[list(log_w)] = True
    expected = np.full(tree.num_nodes, -np.inf)
    expected[list(log_w)] = list(log_w.values())
    assert np.array_equal(np.isfinite(got), in_tree)
    np.testing.assert_allclose(got[in_tree], expected[in_tree], atol=tol(precision) * 10)
    assert np.array_equal(np.asarray(tree_membership(tree.internal, tree.layout)), in_tree)
    assert set(np.flatnonzero(mask)) == best
    log_z_got, grad = jax.value_and_grad(log_partition)(
        jnp.asarray(leaf, precision), tree.internal, jnp.asarray(split, precision),
        layout=tree.layout)
    np.testing.assert_allclose(log_z_got, log_z, rtol=tol(precision))
    np.testing.assert_allclose(grad, np.exp(expected), atol=tol(precision))


def test_single_node_tree(precision):
    tree = packed([GrownLevel(np.array([-1]), np.array([False]), np.array([0]),
                              np.array([0.0]))], "compact")
    assert (tree.depth, tree.width, tree.num_nodes) == (0, 2, 2)
    log_w = subtree_log_weights(jnp.array([-3.0, 7.0], precision), tree.internal,
                                layout=tree.layout)
    assert log_w[0] == 0 and log_w[1] == -jnp.inf
    assert list(best_pruning(jnp.ones(2, precision), tree.internal,
                             layout=tree.layout)) == [True, False]


# -- agreement with the complete layout -------------------------------------------------------------
def assert_layouts_agree(complete, compact, levels, X, y, num_classes, precision):
    """Statistics, weights, best prunings and predictions agree slot for slot."""
    a = np.concatenate(level_slots(levels, complete.layout))
    b = np.concatenate(level_slots(levels, compact.layout))
    stats = [jaxtree.node_stats(t, X, y, num_classes) for t in (complete, compact)]
    np.testing.assert_array_equal(stats[0].counts[a], stats[1].counts[b])
    np.testing.assert_array_equal(stats[0].label[a], stats[1].label[b])
    phi = [jaxtree.pacbayes_potentials(s, 3.0, 0.5) for s in stats]
    log_w = [subtree_log_weights(p, t.internal, layout=t.layout)
             for p, t in zip(phi, (complete, compact))]
    np.testing.assert_allclose(log_w[0][a], log_w[1][b], atol=tol(precision))
    assert np.isfinite(log_w[1][b]).all() and np.isinf(np.delete(log_w[1], b)).all()
    cost = [s.errors + 2.0 for s in stats]
    masks = [best_pruning(c, t.internal, layout=t.layout) for c, t in zip(cost, (complete, compact))]
    np.testing.assert_array_equal(masks[0][a], masks[1][b])
    assert masks[1].sum() == masks[1][b].sum()
    votes = [jaxtree.vote(t, s.label, w, X, num_classes)
             for t, s, w in zip((complete, compact), stats, log_w)]
    np.testing.assert_allclose(votes[0], votes[1], atol=tol(precision))


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_random_trees_agree(precision, seed):
    X, y = spam(1500)
    levels = random_levels(seed, depth=8, dims=X.shape[1], p_split=0.75)
    assert len(levels) == 9  # shares the depth-8 complete layout's compilations below
    lo, span = X.min(axis=0), np.maximum(X.max(axis=0) - X.min(axis=0), 1e-6)
    complete, compact = (pack(levels, lo, 1 / span, clip=True, layout=name)
                         for name in ("complete", "compact"))
    assert_layouts_agree(complete, compact, levels, X, jnp.asarray(y), 2, precision)


@pytest.mark.parametrize("builder, depth", [
    ("kd_tree", 8), pytest.param("dyadic_tree", 8, marks=pytest.mark.slow),
    pytest.param("kd_tree", 14, marks=pytest.mark.slow),
    pytest.param("dyadic_tree", 14, marks=pytest.mark.slow)])
def test_real_data_trees_agree(precision, builder, depth):
    X, y = spam(1500)
    build = getattr(jaxtree, builder)
    trees = [build(X, depth, y=y, split="spread", layout=name) for name in ("complete", "compact")]
    levels = _levels_of(trees[0])
    assert isinstance(trees[0].layout, CompleteLayout)
    assert isinstance(trees[1].layout, CompactLayout)
    assert trees[0].depth == trees[1].depth == depth
    assert_layouts_agree(*trees, levels, X, jnp.asarray(y), 2, precision)


def _levels_of(tree):
    """Grown levels back from a complete-layout tree (test helper)."""
    internal = np.asarray(tree.internal)
    in_tree = np.asarray(tree_membership(tree.internal, tree.layout))
    levels, slots = [], np.array([0])
    for level in range(tree.num_levels):
        flags = internal[slots]
        parent = np.array([-1]) if level == 0 else np.repeat(np.flatnonzero(prev), 2)
        levels.append(GrownLevel(parent, flags, np.asarray(tree.feature)[slots],
                                 np.asarray(tree.threshold)[slots]))
        prev = flags
        slots = np.stack([2 * slots[flags] + 1, 2 * slots[flags] + 2], axis=1).ravel()
        if not slots.size:
            break
    assert sum(len(level.internal) for level in levels) == in_tree.sum()
    return levels


# -- deep trees -----------------------------------------------------------------------------------
def numpy_route(tree, X):
    """Reference routing: one NumPy step per level."""
    Z = np.asarray(jaxtree.tree.scale_points(tree, X))
    feature, threshold = np.asarray(tree.feature), np.asarray(tree.threshold)
    internal, left = np.asarray(tree.internal), np.asarray(tree.left_child)
    node = np.zeros(len(X), np.int64)
    for _ in range(tree.depth):
        split = internal[node]
        right = Z[np.arange(len(X)), feature[node]] > threshold[node]
        node = np.where(split, left[np.where(split, node, 0)] + right, node)
    return node


def test_paper_depth_dyadic_tree_on_compact_layout(precision):
    X, y = spam(2601)
    depth = int(np.floor(np.log(len(X)))) * X.shape[1]
    tree = jaxtree.dyadic_tree(X, depth, y=y, layout="auto")
    assert isinstance(tree.layout, CompactLayout)
    assert 300 < tree.depth <= depth and tree.width < 1000
    assert tree.num_nodes == tree.num_levels * tree.width
    X_test = spam(1000, offset=2601)[0]
    path, on_path = jaxtree.route(tree, X_test)
    np.testing.assert_array_equal(path[:, -1], numpy_route(tree, X_test))
    stats = jaxtree.node_stats(tree, X, jnp.asarray(y), 2)
    log_w = subtree_log_weights(jaxtree.pacbayes_potentials(stats, 2.0, 1.0), tree.internal,
                                layout=tree.layout)
    on_path_weight = jnp.where(on_path, jnp.exp(log_w[path]), 0.0).sum(axis=1)
    np.testing.assert_allclose(on_path_weight, 1.0, atol=tol(precision) * 10)
    assert stats.total[0] == len(X)


def test_layout_choice_and_errors():
    full = random_levels(0, depth=6, p_split=1.0)
    heap = packed(full, "auto")
    assert isinstance(heap.layout, CompleteLayout) and (heap.depth, heap.width) == (6, 64)
    deep = random_levels(1, depth=40, p_split=0.6)
    assert len(deep) > 25
    assert isinstance(packed(deep, "auto").layout, CompactLayout)
    with pytest.raises(ValueError, match="compact"):
        packed(deep, "complete")
    with pytest.raises(ValueError, match="unknown layout"):
        packed(full, "heap")
    with pytest.raises(ValueError, match="children"):
        CompactLayout.from_levels([np.array([-1]), np.array([0])], [np.array([True]),
                                                                    np.array([False])])


def test_compact_layout_is_a_pytree_under_jit_and_vmap():
    tree = packed(random_levels(3, depth=4), "compact")
    leaves, treedef = jax.tree_util.tree_flatten(tree.layout)
    assert len(leaves) == 2
    assert jax.tree_util.tree_unflatten(treedef, leaves).width == tree.width
    phi = -jnp.abs(jnp.asarray(np.random.default_rng(0).normal(size=tree.num_nodes)))
    scales = jnp.array([0.5, 1.0, 2.0])
    batched = jax.vmap(lambda s: subtree_log_weights(s * phi, tree.internal,
                                                     layout=tree.layout))(scales)
    for row, s in zip(batched, scales):
        np.testing.assert_allclose(row, subtree_log_weights(s * phi, tree.internal,
                                                            layout=tree.layout), rtol=1e-5)
    depth = jax.jit(lambda t: t.node_depth.max())(tree)
    assert depth == tree.depth


def test_padding_a_compact_tree_changes_no_result():
    X, y = load_csv("wine")
    X, y = X[:300], y[:300]
    tree = jaxtree.dyadic_tree(X, 24, y=y, layout="compact")
    padded = pad_compact(tree, tree.num_levels + 5, tree.width + 6)
    assert (padded.num_levels, padded.width) == (tree.num_levels + 5, tree.width + 6)
    results = []
    for t in (tree, padded):
        stats = jaxtree.node_stats(t, X, y, 7)
        log_w = jaxtree.pacbayes_log_weights(t, stats, 2.0, 0.5)
        results.append((float(stats.errors[0]), np.asarray(jaxtree.vote(t, stats.label, log_w, X, 7))))
    assert results[0][0] == results[1][0]
    np.testing.assert_allclose(results[0][1], results[1][1], atol=1e-6)
    with pytest.raises(ValueError, match="cannot pad"):
        pad_compact(tree, tree.num_levels - 1, tree.width)


def per_level_values_in(levels, values, layout):
    """``(tree, slots, flat)``: the tree of ``levels`` packed in ``layout``, each level's slots, and
    the per-level int ``values`` placed in a flat ``[nodes]`` array (0 on padding)."""
    tree = packed(levels, layout)
    slots = level_slots(levels, tree.layout)
    flat = np.zeros(tree.layout.num_nodes, np.int32)
    for s, v in zip(slots, values):
        flat[s] = v
    return tree, slots, jnp.asarray(flat)


@pytest.mark.parametrize("seed", range(3))
def test_fold_up_matches_a_plain_recursion_on_both_layouts(seed):
    # a pytree state: (number of leaves, height) of each node's subtree, and an int output
    levels = random_levels(seed, 5)
    rng = np.random.default_rng(seed)
    weight = [rng.integers(1, 9, size=len(level.internal)) for level in levels]

    def reference(level, index):
        if not levels[level].internal[index]:
            return 1, 0
        child = 2 * (np.cumsum(levels[level].internal)[index] - 1)
        (ll, lh), (rl, rh) = reference(level + 1, child), reference(level + 1, child + 1)
        return ll + rl, 1 + max(lh, rh)

    def step(x, children):
        w, internal = x
        if children is None:
            return (jnp.ones_like(w), jnp.zeros_like(w)), w
        (ll, lh), (rl, rh) = children
        leaves = jnp.where(internal, ll + rl, 1)
        height = jnp.where(internal, 1 + jnp.maximum(lh, rh), 0)
        return (leaves, height), w * leaves + height

    for layout in ("complete", "compact"):
        tree, slots, w_flat = per_level_values_in(levels, weight, layout)
        out = np.asarray(jax.jit(lambda w, i, lay: lay.fold_up(step, (w, i))[1])(
            w_flat, tree.internal, tree.layout))
        for level, (s, w) in enumerate(zip(slots, weight)):
            for index in range(len(s)):
                leaves, height = reference(level, index)
                assert out[s[index]] == w[index] * leaves + height, (layout, level, index)


@pytest.mark.parametrize("seed", range(3))
def test_fold_down_matches_a_plain_recursion_on_both_layouts(seed):
    # a pytree state: (depth, sum of the ancestors' weights) of each node, and an int output
    levels = random_levels(seed, 5)
    rng = np.random.default_rng(seed)
    weight = [rng.integers(1, 9, size=len(level.internal)) for level in levels]
    reference = {(0, 0): (0, 0)}   # (level, index) -> (depth, sum of weights above)
    for level in range(1, len(levels)):
        parents = np.flatnonzero(levels[level - 1].internal)
        for index in range(len(levels[level].internal)):
            p = parents[index // 2]
            depth, above = reference[(level - 1, p)]
            reference[(level, index)] = (depth + 1, above + weight[level - 1][p])

    def step(x, above):
        w, = x
        depth, total = (jnp.zeros_like(w), jnp.zeros_like(w)) if above is None else above
        return (depth + 1, total + w), 100 * depth + total

    for layout in ("complete", "compact"):
        tree, slots, w_flat = per_level_values_in(levels, weight, layout)
        out = np.asarray(jax.jit(lambda w, lay: lay.fold_down(step, (w,)))(w_flat, tree.layout))
        for (level, index), (depth, above) in reference.items():
            assert out[slots[level][index]] == 100 * depth + above, (layout, level, index)


def test_padding_keeps_an_oblique_tree():
    # both padders must carry the hyperplanes (coef) of an oblique tree, or routing goes wrong
    from jaxtree.layout import pad_complete
    X, y = load_csv("spam")
    X, y = X[:300, :6], y[:300]
    complete = jaxtree.oblique_tree(X, y, max_depth=4, method="moc1")
    assert complete.coef is not None and isinstance(complete.layout, CompleteLayout)
    compact = jaxtree.oblique_tree(X, y, max_depth=4, method="moc1", layout="compact")
    wider = np.pad(X, ((0, 0), (0, 2)))
    cases = [(complete, pad_complete(complete, complete.depth + 2, 8), X, wider),
             (compact, pad_compact(compact, compact.num_levels + 2, compact.width + 4), X, X)]
    for tree, padded, X_tree, X_padded in cases:
        assert padded.coef.shape == (padded.num_nodes, X_padded.shape[1])
        stats = jaxtree.node_stats(tree, X_tree, y, 2)
        padded_stats = jaxtree.node_stats(padded, X_padded, y, 2)
        # the same partition: every point reaches a node with the same statistics
        np.testing.assert_array_equal(
            np.asarray(stats.counts)[np.asarray(jaxtree.leaf_of(tree, X_tree))],
            np.asarray(padded_stats.counts)[np.asarray(jaxtree.leaf_of(padded, X_padded))])
    with pytest.raises(ValueError, match="cannot pad"):
        pad_complete(complete, complete.depth - 1, 6)
