"""The folds of both layouts against plain recursions over the tree: states that are vectors and
pairs per node (``fold_up``, ``fold_down``) and states that are a whole level
(``fold_up_levels``, ``fold_down_levels``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtree.build import level_slots
from test_compact import packed, random_levels

K = 3   # length of the per-node vectors


def vectors_in(levels, layout, seed):
    """``(tree, slots, w, flat)``: the tree of ``levels`` in ``layout``, each level's slots, random
    int vectors ``w[level] [m, K]`` and the same placed in a flat ``[nodes, K]`` array (0 on
    padding)."""
    rng = np.random.default_rng(seed)
    w = [rng.integers(-5, 9, size=(len(level.internal), K)) for level in levels]
    tree = packed(levels, layout)
    slots = level_slots(levels, tree.layout)
    flat = np.zeros((tree.layout.num_nodes, K), np.int32)
    for s, v in zip(slots, w):
        flat[s] = v
    return tree, slots, w, jnp.asarray(flat)


def children_index(levels, level, index):
    """Index, in the next level, of the left child of node ``index`` of ``level``."""
    return 2 * (np.cumsum(levels[level].internal)[index] - 1)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("layout", ["complete", "compact"])
def test_fold_up_with_vector_and_pair_states_matches_a_recursion(seed, layout):
    # state per node: (sum of w over the leaves of its subtree [K], number of those leaves)
    levels = random_levels(seed, 5)
    tree, slots, w, flat = vectors_in(levels, layout, seed)

    def reference(level, index):
        if not levels[level].internal[index]:
            return w[level][index], 1
        child = children_index(levels, level, index)
        (left, nl), (right, nr) = reference(level + 1, child), reference(level + 1, child + 1)
        return left + right, nl + nr

    def step(x, children):
        w_level, internal = x
        if children is None:
            return (w_level, jnp.ones(w_level.shape[0], jnp.int32)), w_level
        (left, nl), (right, nr) = children
        total = jnp.where(internal[:, None], left + right, w_level)
        count = jnp.where(internal, nl + nr, 1)
        return (total, count), total * count[:, None]

    root, out = jax.jit(lambda w, i, lay: lay.fold_up(step, (w, i)))(flat, tree.internal,
                                                                     tree.layout)
    out = np.asarray(out)
    assert out.shape == (tree.layout.num_nodes, K)
    for level, s in enumerate(slots):
        for index in range(len(s)):
            total, count = reference(level, index)
            np.testing.assert_array_equal(out[s[index]], total * count)
    total, count = reference(0, 0)
    np.testing.assert_array_equal(root[0], total)
    assert int(root[1]) == count


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("layout", ["complete", "compact"])
def test_fold_down_with_vector_and_pair_states_matches_a_recursion(seed, layout):
    # state per node: (sum of w over its ancestors and itself [K], its depth)
    levels = random_levels(seed, 5)
    tree, slots, w, flat = vectors_in(levels, layout, seed)
    reference = {(0, 0): (w[0][0], 0)}
    for level in range(1, len(levels)):
        parents = np.flatnonzero(levels[level - 1].internal)
        for index in range(len(levels[level].internal)):
            above, depth = reference[(level - 1, parents[index // 2])]
            reference[(level, index)] = (above + w[level][index], depth + 1)

    def step(x, above):
        w_level, = x
        if above is None:
            total, depth = w_level, jnp.zeros(w_level.shape[0], jnp.int32)
        else:
            total, depth = above[0] + w_level, above[1] + 1
        return (total, depth), 100 * depth[:, None] + total

    out = np.asarray(jax.jit(lambda w, lay: lay.fold_down(step, (w,)))(flat, tree.layout))
    for (level, index), (total, depth) in reference.items():
        np.testing.assert_array_equal(out[slots[level][index]], 100 * depth + total)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("layout", ["complete", "compact"])
def test_level_folds_carry_a_whole_level(seed, layout):
    # up: per node, the number of leaves below; per level, the running sum over the levels so far
    # (deepest first) of Σ w[:, 0] + a per-level input. Down: per node, its parent's per-level
    # running count of levels above; per level, that count. Padding slots hold w = 0.
    levels = random_levels(seed, 5)
    tree, slots, w, flat = vectors_in(levels, layout, seed)
    num_levels = tree.layout.num_levels
    bonus = jnp.arange(num_levels, dtype=jnp.int32) * 1000

    def up(x, bonus_level, below, children):
        w_level, internal = x
        ones = jnp.ones(w_level.shape[0], jnp.int32)
        if below is None:
            leaves, running = ones, jnp.int32(0)
        else:
            left, right = children(below[0])
            leaves, running = jnp.where(internal, left + right, 1), below[1]
        running = running + jnp.sum(w_level[:, 0]) + bonus_level
        return (leaves, running), leaves, running

    def down(x, bonus_level, above, parent):
        own, = x
        seen = jnp.int32(0) if above is None else above[1] + 1
        from_parent = own if above is None else parent(above[0])
        return (own + seen, seen), from_parent, seen + bonus_level

    @jax.jit
    def run(w, internal, lay):
        top, leaves, running = lay.fold_up_levels(up, (w, internal), bonus)
        from_parent, seen = lay.fold_down_levels(down, (leaves,), bonus)
        return top[0][0], leaves, running, from_parent, seen

    root_leaves, leaves, running, from_parent, seen = (np.asarray(a) for a in run(
        flat, tree.internal, tree.layout))
    count = {}
    for level in reversed(range(len(levels))):
        for index, split in enumerate(levels[level].internal):
            child = children_index(levels, level, index) if split else None
            count[(level, index)] = (count[(level + 1, child)] + count[(level + 1, child + 1)]
                                     if split else 1)
            assert leaves[slots[level][index]] == count[(level, index)]
    assert root_leaves == count[(0, 0)]
    sums = np.array([w[level][:, 0].sum() if level < len(levels) else 0
                     for level in range(num_levels)])
    expected_running = np.cumsum((sums + np.asarray(bonus))[::-1])[::-1]
    np.testing.assert_array_equal(running, expected_running)
    np.testing.assert_array_equal(seen, np.arange(num_levels) * 1001)
    for level in range(1, len(levels)):
        parents = np.flatnonzero(levels[level - 1].internal)
        for index in range(len(levels[level].internal)):
            parent = (level - 1, parents[index // 2])
            assert from_parent[slots[level][index]] == count[parent] + level - 1
