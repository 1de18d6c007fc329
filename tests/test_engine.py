"""The engine against brute force over every pruning (docs/theory/engine.md).

Trees are random ``internal`` masks in a complete heap layout; the reference enumerates every
pruning of T0 as a set of leaves (and of split nodes) and sums over them directly.
"""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.test_util import check_grads

from jaxtree.engine import (best_pruning, best_pruning_and_cost, child_values, local_offsets,
                            log_partition, log_sigmoid_pair, log_weights_from_offsets,
                            pruning_process, pruning_process_from_offsets, subtree_log_weights,
                            tree_membership)
from jaxtree.layout import CompleteLayout, complete_layout_for

LAYOUT_DEPTH = 5          # most tests share one shape (63 slots) to keep jit compiles few
MAX_PRUNINGS = 3000       # keep the enumeration cheap


# -- reference implementation -------------------------------------------------------------------
def random_tree(rng, depth=LAYOUT_DEPTH, p_split=0.7, max_prunings=MAX_PRUNINGS,
                tree_depth=None):
    """A random T0 of depth <= ``tree_depth`` (default ``depth``) in the complete layout of
    ``depth``.

    Returns ``(internal, in_tree)``, both ``[2**(depth+1)-1]`` bool. ``internal`` also carries
    random garbage on padding (slots below a T0-leaf): the engine must ignore it.
    """
    n = 2 ** (depth + 1) - 1
    first_deepest = 2 ** (depth if tree_depth is None else tree_depth) - 1
    while True:
        internal = np.zeros(n, bool)
        in_tree = np.zeros(n, bool)
        in_tree[0] = True
        for i in range(n):
            if in_tree[i] and i < first_deepest and rng.random() < p_split:
                internal[i] = True
                in_tree[2 * i + 1] = in_tree[2 * i + 2] = True
        if count_prunings(internal, 0) <= max_prunings:
            break
    internal[~in_tree] = rng.random((~in_tree).sum()) < 0.5
    return internal, in_tree


def count_prunings(internal, node):
    if not internal[node]:
        return 1
    return 1 + count_prunings(internal, 2 * node + 1) * count_prunings(internal, 2 * node + 2)


def prunings(internal, node=0):
    """Every pruning of the subtree at ``node``: a list of ``(leaves, splits)`` (slot tuples)."""
    result = [((node,), ())]
    if internal[node]:
        for (left_leaves, left_splits), (right_leaves, right_splits) in itertools.product(
                prunings(internal, 2 * node + 1), prunings(internal, 2 * node + 2)):
            result.append((left_leaves + right_leaves, (node,) + left_splits + right_splits))
    return result


def pruning_leaf_sets(internal):
    """Every pruning of T0 as a frozenset of its leaves."""
    return [frozenset(leaves) for leaves, _ in prunings(internal)]


def brute_force(leaf, split, internal):
    """Reference ``(w [nodes], log Z, P(split) [nodes])`` by summing over every pruning.

    ``Q(T) ∝ exp(Σ_{leaves} leaf + Σ_{splits} split)``; ``w(A) = Q(A is a leaf)``.
    """
    leaf = np.asarray(leaf, np.float64)
    split = np.zeros_like(leaf) if split is None else np.asarray(split, np.float64)
    trees = prunings(internal)
    scores = np.array([leaf[list(ls)].sum() + split[list(ss)].sum() for ls, ss in trees])
    log_z = scores.max() + np.log(np.exp(scores - scores.max()).sum())
    q = np.exp(scores - log_z)
    w = np.zeros_like(leaf)
    p_split = np.zeros_like(leaf)
    for qt, (ls, ss) in zip(q, trees):
        w[list(ls)] += qt
        p_split[list(ss)] += qt
    return w, log_z, p_split


def brute_best(leaf_cost, split_cost, internal):
    """Reference ``(mask, cost)``: the minimum-cost pruning; among ties the one with fewest
    leaves. It is also contained in every other minimum-cost pruning (checked)."""
    leaf_cost = np.asarray(leaf_cost, np.float64)
    split_cost = np.zeros_like(leaf_cost) if split_cost is None else np.asarray(split_cost,
                                                                                np.float64)
    trees = prunings(internal)
    costs = np.array([leaf_cost[list(ls)].sum() + split_cost[list(ss)].sum() for ls, ss in trees])
    best = [t for t, c in zip(trees, costs) if c == costs.min()]
    leaves, splits = min(best, key=lambda t: len(t[0]))
    for other_leaves, other_splits in best:  # the smallest optimum is inside every other one
        assert set(leaves) | set(splits) <= set(other_leaves) | set(other_splits)
    mask = np.zeros(leaf_cost.shape, bool)
    mask[list(leaves)] = True
    return mask, costs.min()


def leaf_paths(in_tree, internal):
    """Root-to-leaf paths of T0 (lists of slots), one per T0-leaf."""
    paths = []

    def walk(node, path):
        path = path + [node]
        if internal[node]:
            walk(2 * node + 1, path)
            walk(2 * node + 2, path)
        else:
            paths.append(path)
    walk(0, [])
    return paths


def random_potentials(rng, in_tree, internal, scale=3.0, with_split=True):
    """Leaf and split potentials with ``-inf`` on padding (and on non-split nodes for ``split``)."""
    leaf = np.where(in_tree, rng.normal(size=in_tree.shape) * scale, -np.inf)
    split = None
    if with_split:
        split = np.where(in_tree & internal, rng.normal(size=in_tree.shape) * scale, -np.inf)
    return leaf, split


def tolerance(dtype):
    return 2e-5 if dtype == jnp.float32 else 1e-11


def trees_for_tests(seed, count):
    """Near-complete trees of every depth 0..4, then random trees, all in the depth-5 layout."""
    rng = np.random.default_rng(seed)
    cases = [random_tree(rng, p_split=0.9, tree_depth=depth) for depth in range(LAYOUT_DEPTH)]
    cases += [random_tree(rng, LAYOUT_DEPTH, p_split=p) for p in
              np.linspace(0.3, 0.8, count)]
    return rng, cases


# -- weights and the partition function ---------------------------------------------------------
def test_weights_and_partition_match_enumeration(precision):
    rng, cases = trees_for_tests(0, 8)
    for index, (internal, in_tree) in enumerate(cases):
        leaf, split = random_potentials(rng, in_tree, internal, with_split=index % 2 == 0)
        w_ref, log_z_ref, _ = brute_force(leaf, split, internal)
        args = (jnp.asarray(leaf, precision), jnp.asarray(internal),
                None if split is None else jnp.asarray(split, precision))
        log_w = np.asarray(subtree_log_weights(*args))
        assert log_w.dtype == precision
        assert np.all(log_w[~in_tree] == -np.inf)
        np.testing.assert_allclose(np.exp(log_w), w_ref, atol=tolerance(precision))
        np.testing.assert_allclose(float(log_partition(*args)), log_z_ref,
                                   rtol=tolerance(precision), atol=tolerance(precision))


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_small_layouts_match_enumeration(depth):
    """Layouts of depth 0 (a one-node tree), 1 and 2, complete trees."""
    rng = np.random.default_rng(depth)
    internal, in_tree = random_tree(rng, depth, p_split=1.0)
    leaf, split = random_potentials(rng, in_tree, internal)
    w_ref, log_z_ref, _ = brute_force(leaf, split, internal)
    log_w = subtree_log_weights(jnp.asarray(leaf), internal, jnp.asarray(split))
    np.testing.assert_allclose(np.exp(np.asarray(log_w)), w_ref, atol=1e-5)
    assert float(log_partition(jnp.asarray(leaf), internal, jnp.asarray(split))) == \
        pytest.approx(log_z_ref, rel=1e-5)
    mask_ref, _ = brute_best(-leaf, -split, internal)
    np.testing.assert_array_equal(np.asarray(best_pruning(jnp.asarray(-leaf), internal,
                                                          jnp.asarray(-split))), mask_ref)


def test_explicit_layout_argument_matches_inferred(precision):
    rng = np.random.default_rng(1)
    internal, in_tree = random_tree(rng)
    leaf, split = random_potentials(rng, in_tree, internal)
    leaf, split = jnp.asarray(leaf, precision), jnp.asarray(split, precision)
    inferred = subtree_log_weights(leaf, internal, split)
    explicit = subtree_log_weights(leaf, internal, split, layout=CompleteLayout(LAYOUT_DEPTH))
    np.testing.assert_array_equal(np.asarray(inferred), np.asarray(explicit))


def test_bad_array_length_is_a_clear_error():
    with pytest.raises(ValueError, match="complete heap layout"):
        subtree_log_weights(jnp.zeros(6), jnp.zeros(6, bool))
    with pytest.raises(ValueError, match="complete heap layout"):
        complete_layout_for(0)


_membership = jax.jit(tree_membership)   # one compile instead of many eager level ops


def test_tree_membership():
    _, cases = trees_for_tests(2, 4)
    for internal, in_tree in cases:
        np.testing.assert_array_equal(np.asarray(_membership(jnp.asarray(internal))), in_tree)


def test_path_sum_invariant(precision):
    """Σ_{A on a root-to-leaf path} w(A) = 1 on every path of T0."""
    rng, cases = trees_for_tests(3, 6)
    for internal, in_tree in cases:
        leaf, split = random_potentials(rng, in_tree, internal, scale=10.0)
        w = np.exp(np.asarray(subtree_log_weights(jnp.asarray(leaf, precision), internal,
                                                  jnp.asarray(split, precision))))
        for path in leaf_paths(in_tree, internal):
            assert w[path].sum() == pytest.approx(1.0, abs=10 * tolerance(precision))


def test_vmap_and_jit_match_single_calls(precision):
    rng = np.random.default_rng(4)
    internal, in_tree = random_tree(rng)
    batch = jnp.asarray(np.stack([random_potentials(rng, in_tree, internal)[0]
                                  for _ in range(4)]), precision)
    mapped = jax.jit(jax.vmap(lambda a: subtree_log_weights(a, internal)))(batch)
    for row, a in zip(mapped, batch):
        np.testing.assert_allclose(np.asarray(row), np.asarray(subtree_log_weights(a, internal)),
                                   atol=tolerance(precision))
    masks = jax.jit(jax.vmap(lambda c: best_pruning(c, internal)))(-batch)
    for row, c in zip(masks, -batch):
        np.testing.assert_array_equal(np.asarray(row), np.asarray(best_pruning(c, internal)))


def test_huge_potentials_with_ties_sum_to_one_on_every_path(precision):
    """Potentials of size 1e7 with exact ties (a complete T0 of depth 3): the weights are the
    enumeration's, and every path sums to 1 (forming P(stop) from φ − log β summed to 1.75)."""
    leaf = np.array([2, 0, 1, -3, 1, -3, -4, -1, -2, 0, 4, -2, -1, 0, 1]) * 1e7
    internal = np.arange(15) < 7
    w = np.exp(np.asarray(subtree_log_weights(jnp.asarray(leaf, precision), internal),
                          np.float64))
    w_ref, _, _ = brute_force(leaf, None, internal)   # integers: exact in float64
    np.testing.assert_allclose(w, w_ref, atol=4 * np.finfo(precision).eps)
    for path in leaf_paths(np.ones(15, bool), internal):
        assert abs(w[path].sum() - 1.0) <= 4 * np.finfo(precision).eps


# -- local offsets and the branching process -----------------------------------------------------
def test_local_offsets_and_child_values_match_a_loop(precision):
    rng, cases = trees_for_tests(13, 3)
    for internal, in_tree in cases:
        leaf, split = random_potentials(rng, in_tree, internal)
        n = leaf.shape[0]
        left_ref = np.array([leaf[2 * i + 1] if 2 * i + 1 < n else 0.0 for i in range(n)])
        right_ref = np.array([leaf[2 * i + 2] if 2 * i + 2 < n else 0.0 for i in range(n)])
        # 0 where `internal` is False, and at the deepest level (which has no children)
        splits = internal & (2 * np.arange(n) + 2 < n)
        with np.errstate(invalid="ignore"):     # the same float operations, in this precision
            left_p, right_p, split_p, leaf_p = (v.astype(precision)
                                                for v in (left_ref, right_ref, split, leaf))
            offset_ref = np.where(splits, (left_p + right_p) + split_p - leaf_p, 0)
        as_jnp = lambda v: jnp.asarray(v, precision)  # noqa: E731
        left, right = child_values(as_jnp(leaf))
        np.testing.assert_array_equal(np.asarray(left), as_jnp(left_ref))
        np.testing.assert_array_equal(np.asarray(right), as_jnp(right_ref))
        offset = np.asarray(local_offsets(as_jnp(leaf), internal, as_jnp(split)))
        assert np.array_equal(offset, offset_ref, equal_nan=True)
        # the core on offsets is the engine on potentials
        np.testing.assert_array_equal(
            np.asarray(log_weights_from_offsets(jnp.asarray(offset), internal)),
            np.asarray(subtree_log_weights(as_jnp(leaf), internal, as_jnp(split))))


def test_offsets_are_what_the_weights_depend_on(precision):
    """Offsets δ are the potentials φ = 0, b = δ, and shifting φ by any c(A) with b += the
    matching change leaves the weights unchanged."""
    rng, cases = trees_for_tests(14, 3)
    for internal, in_tree in cases:
        offset = np.where(internal & in_tree, rng.normal(size=in_tree.shape) * 3, 0)
        zeros = jnp.zeros(in_tree.shape, precision)
        log_w = np.asarray(log_weights_from_offsets(jnp.asarray(offset, precision), internal))
        np.testing.assert_allclose(
            np.exp(log_w), np.exp(np.asarray(subtree_log_weights(
                zeros, internal, jnp.asarray(offset, precision)))), atol=tolerance(precision))
        w_ref, _, _ = brute_force(np.zeros(in_tree.shape), offset, internal)
        np.testing.assert_allclose(np.exp(log_w), w_ref, atol=tolerance(precision))


def test_pruning_process_matches_enumeration(precision):
    """log P(A in), log P(A splits | A in), log P(A stops | A in) against the enumeration."""
    rng, cases = trees_for_tests(15, 2)
    for internal, in_tree in cases:
        leaf, split = random_potentials(rng, in_tree, internal)
        w_ref, _, p_split_ref = brute_force(leaf, split, internal)
        process = pruning_process(jnp.asarray(leaf, precision), internal,
                                  jnp.asarray(split, precision))
        reach, split_prob, stop_prob = (np.exp(np.asarray(v, np.float64)) for v in process)
        reach_ref = w_ref + p_split_ref
        atol = tolerance(precision)
        np.testing.assert_allclose(reach, reach_ref, atol=atol)
        np.testing.assert_allclose(reach * split_prob, p_split_ref, atol=atol)
        np.testing.assert_allclose(reach * stop_prob, w_ref, atol=atol)
        np.testing.assert_allclose(split_prob + stop_prob, 1.0, atol=atol)
        # off T0: never reached, and shaped like a leaf (split 0, stop 1)
        assert np.all(process.log_reach[~in_tree] == -np.inf)
        assert np.all(split_prob[~in_tree] == 0) and np.all(stop_prob[~in_tree] == 1)
        assert np.all(split_prob[in_tree & ~internal] == 0)
        np.testing.assert_array_equal(np.asarray(process.log_weights), np.asarray(
            subtree_log_weights(jnp.asarray(leaf, precision), internal,
                                jnp.asarray(split, precision))))
        # the same process from the local offsets
        offset = local_offsets(jnp.asarray(leaf, precision), internal,
                               jnp.asarray(split, precision))
        for got, want in zip(pruning_process_from_offsets(offset, internal), process):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def kl_of_processes(q, p, internal):
    """KL(Q‖P) = Σ_A Q(A in)·KL(Bernoulli(ρ_Q(A)) ‖ Bernoulli(ρ_P(A))) over the splits of T0:
    the expected sum of the local KLs over the nodes the random pruning visits."""
    split_q, stop_q = jnp.exp(q.log_split), jnp.exp(q.log_stop)
    local = (jnp.where(split_q > 0, split_q * (q.log_split - p.log_split), 0)
             + jnp.where(stop_q > 0, stop_q * (q.log_stop - p.log_stop), 0))
    return jnp.sum(jnp.where(internal, jnp.exp(q.log_reach) * local, 0))


def test_kl_between_processes_matches_enumeration():
    """The branching-process view gives KL(Q‖P) node by node: it equals Σ_T Q(T) log Q(T)/P(T)
    by enumeration, and its gradient is finite (padding holds ±inf and NaN)."""
    rng, cases = trees_for_tests(16, 3)
    with jax.enable_x64(True):
        for internal, in_tree in cases:
            leaf_q, split_q = random_potentials(rng, in_tree, internal)
            leaf_p, split_p = random_potentials(rng, in_tree, internal, with_split=False)
            trees = prunings(internal)

            def log_q_of(leaf, split):
                split = np.zeros_like(leaf) if split is None else split
                scores = np.array([leaf[list(ls)].sum() + split[list(ss)].sum()
                                   for ls, ss in trees])
                return scores - np.logaddexp.reduce(scores)

            log_q, log_p = log_q_of(leaf_q, split_q), log_q_of(leaf_p, split_p)
            kl_ref = np.sum(np.exp(log_q) * (log_q - log_p))
            prior = pruning_process(jnp.asarray(leaf_p), internal)

            def kl(leaf):
                return kl_of_processes(pruning_process(leaf, internal, jnp.asarray(split_q)),
                                       prior, internal & in_tree)

            assert float(kl(jnp.asarray(leaf_q))) == pytest.approx(kl_ref, rel=1e-9, abs=1e-12)
            grad = np.asarray(jax.grad(kl)(jnp.asarray(leaf_q)))
            assert np.isfinite(grad).all() and np.all(grad[~in_tree] == 0)


def test_pruning_process_gradients_match_finite_differences():
    rng = np.random.default_rng(17)
    with jax.enable_x64(True):
        internal, in_tree = random_tree(rng)
        leaf, split = random_potentials(rng, in_tree, internal)
        leaf, split = np.where(in_tree, leaf, 0.0), np.where(internal & in_tree, split, 0.0)
        coef = rng.normal(size=(3,) + in_tree.shape)

        def smooth(a, b):
            reach, split_log, stop_log = pruning_process(a, internal, b)
            return jnp.sum(coef[0] * jnp.exp(reach) + coef[1] * jnp.exp(split_log)
                           + coef[2] * stop_log)

        check_grads(jax.jit(smooth), (jnp.asarray(leaf), jnp.asarray(split)), order=1,
                    modes=["rev"])


# -- argument checks -------------------------------------------------------------------------------
@pytest.mark.parametrize("function", [subtree_log_weights, log_partition, pruning_process,
                                      local_offsets])
def test_potential_functions_refuse_bad_arguments(function):
    internal, phi = jnp.zeros(7, bool), jnp.zeros(7)
    cases = [((jnp.zeros(6), internal), ValueError, "leaf_potential"),
             ((jnp.zeros((7, 2)), internal), ValueError, "leaf_potential"),
             ((jnp.zeros(7, jnp.int32), internal), TypeError, "leaf_potential"),
             ((phi, jnp.zeros(7)), TypeError, "internal"),
             ((phi, jnp.zeros((7, 1), bool)), ValueError, "internal"),
             ((phi, internal, jnp.zeros(3)), ValueError, "split_potential"),
             ((phi, internal, jnp.zeros(7, int)), TypeError, "split_potential"),
             ((jnp.zeros(6), jnp.zeros(6, bool)), ValueError, "complete heap layout")]
    for args, error, name in cases:
        with pytest.raises(error, match=name):
            function(*args)
    with pytest.raises(ValueError, match="leaf_potential must be a .nodes. array of 15"):
        function(jnp.zeros(7), jnp.zeros(15, bool), layout=CompleteLayout(3))
    # shapes and dtypes are static: refused under a caller's jit, before any pass is traced
    with pytest.raises(ValueError, match="leaf_potential"):
        jax.jit(lambda a: function(a, internal))(jnp.zeros(6))
    function(phi, internal)                        # the good call works


def test_offset_and_cost_functions_refuse_bad_arguments():
    internal = jnp.zeros(7, bool)
    for function in (log_weights_from_offsets, pruning_process_from_offsets):
        with pytest.raises(ValueError, match="offset"):
            function(jnp.zeros(5), internal)
        with pytest.raises(TypeError, match="offset"):
            function(jnp.zeros(7, bool), internal)
    with pytest.raises(ValueError, match="leaf_cost"):
        best_pruning(jnp.zeros(5), internal)
    with pytest.raises(TypeError, match="leaf_cost"):
        best_pruning(jnp.zeros(7, jnp.complex64), internal)
    with pytest.raises(TypeError, match="internal"):
        tree_membership(jnp.zeros(7, int))
    with pytest.raises(ValueError, match="x"):
        child_values(jnp.zeros((7, 2)))
    # integer costs are fine for the (min, +) semiring
    assert np.asarray(best_pruning(jnp.arange(7), internal)).tolist() == [True] + [False] * 6


# -- best pruning --------------------------------------------------------------------------------
def test_best_pruning_matches_enumeration(precision):
    """Small integer costs: many exact ties, which must go to the smaller pruning."""
    rng, cases = trees_for_tests(5, 10)
    for index, (internal, in_tree) in enumerate(cases):
        leaf = np.where(in_tree, rng.integers(-2, 4, in_tree.shape), -np.inf)
        split = (np.where(in_tree & internal, rng.integers(-1, 2, in_tree.shape), np.nan)
                 if index % 2 else None)
        mask_ref, cost_ref = brute_best(np.where(in_tree, leaf, 0), split, internal)
        args = (jnp.asarray(leaf, precision), internal,
                None if split is None else jnp.asarray(split, precision))
        mask, cost = best_pruning_and_cost(*args)
        np.testing.assert_array_equal(np.asarray(mask), mask_ref)
        np.testing.assert_array_equal(np.asarray(best_pruning(*args)), mask_ref)
        assert float(cost) == cost_ref


def test_best_pruning_exact_tie_stops_higher(precision):
    # root: leaf cost 2 == split into two children of cost 1 each -> the root alone wins.
    internal = np.array([True, False, False])
    cost = jnp.asarray([2.0, 1.0, 1.0], precision)
    np.testing.assert_array_equal(np.asarray(best_pruning(cost, internal)), [True, False, False])
    # a split cost of -1e-3 breaks the tie towards splitting
    split = jnp.asarray([-1e-3, 0.0, 0.0], precision)
    np.testing.assert_array_equal(np.asarray(best_pruning(cost, internal, split)),
                                  [False, True, True])
    # a deeper tie: the right child ties with its children, the root prefers to split
    internal = np.array([True, False, True, False, False, False, False])
    cost = jnp.asarray([10.0, 1.0, 2.0, 0.0, 0.0, 1.0, 1.0], precision)
    np.testing.assert_array_equal(np.asarray(best_pruning(cost, internal)),
                                  [False, True, True, False, False, False, False])


def test_best_pruning_is_one_leaf_per_path():
    _, cases = trees_for_tests(6, 6)
    rng = np.random.default_rng(6)
    for internal, in_tree in cases:
        mask = np.asarray(best_pruning(jnp.asarray(rng.normal(size=in_tree.shape)), internal))
        assert not mask[~in_tree].any()
        for path in leaf_paths(in_tree, internal):
            assert mask[path].sum() == 1


# -- zero temperature ---------------------------------------------------------------------------
def test_zero_temperature_limit_concentrates_on_best_pruning():
    """Potentials −cost/τ: as τ → 0 the weights tend to the best pruning's leaf indicator."""
    rng = np.random.default_rng(7)
    with jax.enable_x64(True):
        for _ in range(4):
            internal, in_tree = random_tree(rng)
            leaf_cost = np.where(in_tree, rng.normal(size=in_tree.shape), 0.0)
            split_cost = rng.normal(size=in_tree.shape) * 0.3
            mask = np.asarray(best_pruning(jnp.asarray(leaf_cost), internal,
                                           jnp.asarray(split_cost)))
            mask_ref, _ = brute_best(leaf_cost, split_cost, internal)
            np.testing.assert_array_equal(mask, mask_ref)
            trees = prunings(internal)
            costs = np.sort([leaf_cost[list(ls)].sum() + split_cost[np.asarray(ss, int)].sum()
                             for ls, ss in trees])
            gap = costs[1] - costs[0] if len(costs) > 1 else 1.0
            errors = []
            rounding = 0.0
            for factor in (1.0, 4.0, 16.0, 64.0):
                tau = gap / factor
                log_w = subtree_log_weights(jnp.asarray(-leaf_cost / tau), internal,
                                            jnp.asarray(-split_cost / tau))
                w = np.where(in_tree, np.exp(np.asarray(log_w)), 0.0)
                errors.append(np.abs(w - mask).max())
                rounding = 64 * np.finfo(np.float64).eps * (np.abs(leaf_cost).sum()
                                                            + np.abs(split_cost).sum()) / tau
            # the mass off the best pruning is at most (#prunings) · e^{-gap/τ}
            assert errors[-1] <= len(trees) * math.exp(-64.0) + rounding
            assert errors[-1] <= errors[0]


# -- precision -------------------------------------------------------------------------------------
def test_float32_agrees_with_float64():
    rng, cases = trees_for_tests(8, 6)
    for internal, in_tree in cases:
        leaf, split = random_potentials(rng, in_tree, internal, scale=20.0)
        results = {}
        for x64 in (False, True):
            with jax.enable_x64(x64):
                dtype = jnp.zeros(0).dtype
                args = (jnp.asarray(leaf, dtype), internal, jnp.asarray(split, dtype))
                results[x64] = (np.exp(np.asarray(subtree_log_weights(*args), np.float64)),
                                float(log_partition(*args)),
                                np.asarray(best_pruning(*args)))
        np.testing.assert_allclose(results[False][0], results[True][0], atol=1e-4)
        assert results[False][1] == pytest.approx(results[True][1], rel=1e-5)


@pytest.mark.parametrize("length", [15, 1023, 1024])   # node arrays have odd lengths
def test_log_sigmoid_pair_matches_numpy(precision, length):
    """(log σ(d), log σ(−d), log(1 + e^{−|d|})) elementwise, with infinities and huge d."""
    rng = np.random.default_rng(length)
    d = rng.normal(scale=30, size=length)
    d[:6] = [-np.inf, np.inf, 0.0, 1e30, -1e30, 3e7]
    d[6:9] = rng.normal(scale=200, size=3)          # σ saturates
    d = np.asarray(d.astype(precision), np.float64)  # the reference sees the rounded inputs
    want_split, want_stop = -np.logaddexp(0, -d), -np.logaddexp(0, d)
    got_split, got_stop, got_soft = map(np.asarray, log_sigmoid_pair(jnp.asarray(d, precision)))
    eps = np.finfo(precision).eps
    # log σ is exact relative to itself (never rounded at the size of d), to one unit of 1 from
    # log(1 + e) (e below eps/2 is dropped)
    for got, want in ((got_split, want_split), (got_stop, want_stop)):
        assert np.array_equal(np.isneginf(got), np.isneginf(want))
        finite = np.isfinite(want)
        assert np.all(np.abs(got[finite] - want[finite]) <= 2 * eps * (1 + np.abs(want[finite])))
    assert got_split[2] == got_stop[2] == pytest.approx(-np.log(2))      # a tie splits evenly
    assert got_split[3] == 0 and got_stop[4] == 0 and got_split[5] == 0
    np.testing.assert_allclose(got_soft, np.logaddexp(0, -np.abs(d)), atol=2 * eps)
    # both probabilities come from one d: they sum to 1 at every magnitude
    np.testing.assert_allclose(np.exp(got_split) + np.exp(got_stop), 1.0, atol=2 * eps)


# -- gradients -------------------------------------------------------------------------------------
def _weighted_mass(leaf, split, internal, coef):
    """A smooth scalar of the weights: Σ_A coef(A)·w(A) over the nodes of T0."""
    w = jnp.exp(subtree_log_weights(leaf, internal, split))
    return jnp.sum(coef * w)


_grad_log_partition_both = jax.jit(jax.grad(log_partition, argnums=(0, 2)))
_grad_weighted_mass = jax.jit(jax.grad(_weighted_mass, argnums=(0, 1)))


def test_grad_of_log_partition_is_the_weights(precision):
    """∂ log Z / ∂a(A) = w(A) and ∂ log Z / ∂b(A) = P(A is split) (and both by enumeration)."""
    rng, cases = trees_for_tests(9, 5)
    for internal, in_tree in cases:
        leaf, split = random_potentials(rng, in_tree, internal)
        w_ref, _, p_split_ref = brute_force(leaf, split, internal)
        grad_leaf, grad_split = _grad_log_partition_both(
            jnp.asarray(leaf, precision), internal, jnp.asarray(split, precision))
        log_w = subtree_log_weights(jnp.asarray(leaf, precision), internal,
                                    jnp.asarray(split, precision))
        np.testing.assert_allclose(np.asarray(grad_leaf), np.exp(np.asarray(log_w)),
                                   atol=tolerance(precision))
        np.testing.assert_allclose(np.asarray(grad_leaf), w_ref, atol=tolerance(precision))
        np.testing.assert_allclose(np.asarray(grad_split), p_split_ref,
                                   atol=tolerance(precision))


def test_grad_matches_finite_differences():
    rng = np.random.default_rng(10)
    with jax.enable_x64(True):
        internal, in_tree = random_tree(rng)
        leaf, split = random_potentials(rng, in_tree, internal)
        leaf, split = np.where(in_tree, leaf, 0.0), np.where(internal & in_tree, split, 0.0)
        coef = jnp.asarray(rng.normal(size=in_tree.shape) * in_tree)
        check_grads(jax.jit(lambda a, b: _weighted_mass(a, b, internal, coef)),
                    (jnp.asarray(leaf), jnp.asarray(split)), order=1, modes=["rev"])


@pytest.mark.parametrize("scale", [0.0, 1.0, 1e3, 1e6])
def test_grad_is_finite_for_huge_potentials_ties_and_inf_padding(precision, scale):
    """Integer potentials times ``scale`` (exact ties everywhere at scale 0); padding ±inf, NaN."""
    rng, cases = trees_for_tests(11, 3)
    for internal, in_tree in cases:
        padding = rng.choice([-np.inf, np.inf, np.nan], size=in_tree.shape)
        leaf = np.where(in_tree, rng.integers(-3, 3, in_tree.shape) * scale, padding)
        split = np.where(in_tree & internal, rng.integers(-1, 2, in_tree.shape) * scale, -np.inf)
        leaf, split = jnp.asarray(leaf, precision), jnp.asarray(split, precision)
        coef = jnp.asarray(rng.normal(size=in_tree.shape), precision)
        grads = _grad_weighted_mass(leaf, split, internal, coef)
        grads += _grad_log_partition_both(leaf, internal, split)
        for g in grads:
            assert np.isfinite(np.asarray(g)).all()
            assert np.all(np.asarray(g)[~in_tree] == 0)
        log_w = np.asarray(subtree_log_weights(leaf, internal, split))
        assert np.isfinite(log_w[in_tree]).all() and np.all(log_w[~in_tree] == -np.inf)


def test_grad_at_exact_tie_splits_evenly(precision):
    """One split with leaf potential equal to the split's: Q = (½, ½) and the gradient of log Z
    gives ½ to the root and ½ to each child."""
    internal = np.array([True, False, False])
    leaf = jnp.asarray([1e6, 5e5, 5e5], precision)
    grad = jax.grad(log_partition)(leaf, internal)
    np.testing.assert_allclose(np.asarray(grad), [0.5, 0.5, 0.5], atol=1e-6)


# -- hypothesis ------------------------------------------------------------------------------------
_grad_log_partition = jax.jit(jax.grad(log_partition))


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), log_scale=st.sampled_from([0, 2, 4, 6]),
       integer=st.booleans(), with_split=st.booleans(), x64=st.booleans())
def test_random_trees_and_huge_potentials(seed, log_scale, integer, with_split, x64):
    """Finite weights on T0, ``-inf`` on padding, path sums 1, enumeration agreement, finite
    gradients, for |φ| up to 1e6."""
    rng = np.random.default_rng(seed)
    internal, in_tree = random_tree(rng, p_split=rng.uniform(0.2, 0.8), max_prunings=500)
    scale = 10.0 ** log_scale
    leaf = rng.integers(-3, 4, in_tree.shape) if integer else rng.uniform(-1, 1, in_tree.shape)
    split = rng.integers(-1, 2, in_tree.shape) if integer else rng.uniform(-1, 1, in_tree.shape)
    leaf = np.where(in_tree, leaf * scale, -np.inf)
    # (no split potential: zeros, not None, so that hypothesis compiles one program per dtype)
    split = np.where(in_tree & internal, split * scale * with_split, -np.inf)
    with jax.enable_x64(x64):
        dtype = jnp.zeros(0).dtype
        args = (jnp.asarray(leaf, dtype), internal, jnp.asarray(split, dtype))
        log_w = np.asarray(subtree_log_weights(*args), np.float64)
        grad = np.asarray(_grad_log_partition(*args))
    assert np.isfinite(log_w[in_tree]).all() and np.all(log_w[~in_tree] == -np.inf)
    assert np.isfinite(grad).all()
    eps = np.finfo(dtype).eps
    # integer potentials: exact local offsets, so weights to rounding whatever the scale; others:
    # rounding the offsets costs about eps·S in every log-odds, S the size of the potentials
    magnitude = np.abs(leaf[in_tree]).sum() + np.abs(split[in_tree & internal]).sum()
    atol = 16 * eps if integer else 1e-9 + 32 * eps * max(magnitude, 1.0)
    w = np.exp(log_w)
    for path in leaf_paths(in_tree, internal):     # both probabilities come from one log-odds
        assert abs(w[path].sum() - 1.0) <= 16 * eps
    w_ref, _, _ = brute_force(np.where(in_tree, leaf, 0), split, internal)
    np.testing.assert_allclose(w, w_ref, atol=atol)
    np.testing.assert_allclose(grad, w_ref, atol=atol)


# -- exact at any magnitude -----------------------------------------------------------------------
# A property test over ~10^4 random trees (depth <= 6, one 127-slot layout), float32, |φ| from 1
# to ~1e30, all in one vmapped call. Seeded NumPy generation rather than hypothesis: the trees
# must come in batches of one shape for the enumeration (one incidence matrix per shape) and for
# a single compiled call. Three kinds of potentials, a third of the trees each:
#
# * "ties": integer mantissas times 2^k, each split changing the potentials by −2..2 (0, an exact
#   tie, half of the time), split potentials −1..1;
# * "integers": the same with changes drawn from ±2^i (i up to the leaves' bit count);
# * "generic": float32 values N(0, 1)·10^u, u uniform in [0, 30].
#
# Where float32 can resolve the differences of the potentials the weights must match the
# enumeration within 1e-5. The integer kinds are built so that it can, for every tree: all
# mantissas and their sums stay below 2^22, so every potential, every local offset δ and every
# sum of offsets is exact in float32 (k only places the binary point), and the enumeration is
# exact too (integer scores in float64, then exp((score − best)·2^k)). For generic potentials
# the offsets themselves are rounded (at eps·|φ|): there the bound is 1e-5 + 8·eps·Σ|φ| + |b|.
# Every tree, every kind: finite log weights on T0 (no NaN), −inf on padding (which holds ±inf,
# NaN, garbage `internal`), every root-to-leaf path summing to 1 within 1e-5, finite
# derivatives (reverse mode: ∇ log Z; forward mode: log w along a random direction), 0 on
# padding.
MAGNITUDE_DEPTH = 6
MAGNITUDE_SHAPES = 20
MAGNITUDE_PER_SHAPE = 513          # 20 × 513 = 10,260 trees
KINDS = ("ties", "integers", "generic")


def magnitude_potentials(rng, internal, in_tree, count):
    """``count`` rows of ``(phi, split [count, nodes] float64, kind [count], mantissas)``:
    exactly representable in float32 for the integer kinds, whose ``mantissas`` are
    ``(m_phi, m_split [count, nodes] int64, k [count])`` with ``phi = m_phi·2^k``."""
    nodes = in_tree.shape[0]
    kind = np.arange(count) % 3
    bits = rng.integers(0, 15, count)                      # leaves' mantissas: up to ±2^bits
    change_bits = np.floor(rng.uniform(0, bits + 1)).astype(int)
    with_split = rng.random(count) < 0.5
    m_phi = np.zeros((count, nodes), np.int64)
    m_split = np.zeros((count, nodes), np.int64)

    def uniform_int(high):                                 # uniform in [-high, high]
        return np.floor(rng.uniform(-high, high + 1)).astype(np.int64)

    for node in reversed(range(nodes)):                    # children before their parent
        if not in_tree[node]:
            continue
        if not internal[node]:
            m_phi[:, node] = uniform_int(2.0 ** bits)
            continue
        tie_change = np.where(rng.random(count) < 0.5, 0, rng.integers(-2, 3, count))
        change = np.where(kind == 0, tie_change, uniform_int(2.0 ** change_bits))
        split = np.where(kind == 0, rng.integers(-1, 2, count), uniform_int(2.0 ** change_bits))
        m_split[:, node] = split * with_split
        # δ(node) = φ_L + φ_R + b − φ_node = change
        m_phi[:, node] = m_phi[:, 2 * node + 1] + m_phi[:, 2 * node + 2] + m_split[:, node] - change
    assert np.abs(m_phi).max() < 2 ** 22
    magnitude = rng.uniform(0, 100, count)                 # |φ| up to ~2^magnitude
    k = np.round(magnitude - np.log2(np.maximum(np.abs(m_phi).max(axis=1), 1))).astype(np.int64)
    phi = m_phi * 2.0 ** k[:, None]
    split = m_split * 2.0 ** k[:, None]
    generic = kind == 2
    scale = 10.0 ** rng.uniform(0, 30, count)[:, None]
    phi[generic] = (rng.normal(size=(count, nodes)) * scale)[generic]
    split[generic] = (rng.normal(size=(count, nodes)) * scale * with_split[:, None])[generic]
    phi, split = (v.astype(np.float32).astype(np.float64) for v in (phi, split))
    assert np.array_equal(phi[~generic], (m_phi * 2.0 ** k[:, None])[~generic])
    # padding and the split potential where T0 does not split: never read
    garbage = np.array([-np.inf, np.inf, np.nan, 1e30])
    phi[:, ~in_tree] = rng.choice(garbage, size=(count, (~in_tree).sum()))
    unsplit = ~(internal & in_tree)
    split[:, unsplit] = rng.choice(garbage, size=(count, unsplit.sum()))
    return phi, split, kind, (m_phi, m_split, k)


def enumerated(internal, phi, split, mantissas, kind):
    """Reference ``(w, P(split), log Z)`` per row by enumerating every pruning of T0: exact for the
    integer kinds (integer scores, then one exp per pruning in float64), float64 for generic."""
    trees = prunings(internal)
    nodes = internal.shape[0]
    leaves = np.zeros((len(trees), nodes))
    splits = np.zeros((len(trees), nodes))
    for t, (leaf_slots, split_slots) in enumerate(trees):
        leaves[t, list(leaf_slots)] = 1
        splits[t, list(split_slots)] = 1
    m_phi, m_split, k = mantissas
    on_tree = leaves.max(axis=0) > 0
    integer = (m_phi @ leaves.T + m_split @ splits.T).astype(np.float64)  # exact: below 2^53
    generic = np.where(on_tree, phi, 0) @ leaves.T + np.where(splits.max(axis=0) > 0, split,
                                                                0) @ splits.T
    is_generic = (kind == 2)[:, None]
    scale = np.where(is_generic, 1.0, 2.0 ** k[:, None])
    scores = np.where(is_generic, generic, integer)
    best = scores.max(axis=1, keepdims=True)
    q = np.exp((scores - best) * scale)
    total = q.sum(axis=1, keepdims=True)
    q /= total
    log_z = (best * scale)[:, 0] + np.log(total[:, 0])
    return q @ leaves, q @ splits, log_z


@jax.jit
def _magnitude_outputs(phi, split, internal, direction):
    """Per row: log w, log Z, ∇ log Z (φ and b: the tangent rule transposed) and the derivative
    of log w along ``direction`` in φ (the rule in forward mode), in one vmapped call."""
    def one(a, b, tree, v):
        log_w, d_log_w = jax.jvp(lambda a: subtree_log_weights(a, tree, b), (a,), (v,))
        grad_z = jax.grad(log_partition, argnums=(0, 2))(a, tree, b)
        return log_w, log_partition(a, tree, b), grad_z, d_log_w
    return jax.vmap(one)(phi, split, internal, direction)


def magnitude_shapes(rng):
    """``MAGNITUDE_SHAPES`` random T0 of depth 1..6 (``(internal, in_tree)``, garbage
    ``internal`` on padding), each with 5 to 3000 prunings; a third of depth 6."""
    shapes = []
    while len(shapes) < MAGNITUDE_SHAPES:
        depth = MAGNITUDE_DEPTH if len(shapes) % 3 == 0 else rng.integers(1, MAGNITUDE_DEPTH + 1)
        internal, in_tree = random_tree(rng, MAGNITUDE_DEPTH, p_split=rng.uniform(0.5, 0.95),
                                        max_prunings=3000, tree_depth=depth)
        depth_reached = int(np.log2(np.flatnonzero(in_tree).max() + 1))
        if depth_reached == depth and count_prunings(internal & in_tree, 0) >= 5:
            shapes.append((internal, in_tree))
    return shapes


def test_exact_at_any_magnitude():
    rng = np.random.default_rng(2026)
    rows = []
    for internal, in_tree in magnitude_shapes(rng):
        phi, split, kind, mantissas = magnitude_potentials(rng, internal, in_tree,
                                                           MAGNITUDE_PER_SHAPE)
        reference = enumerated(internal & in_tree, phi, split, mantissas, kind)
        rows.append((internal, in_tree, phi, split, kind, mantissas, reference))
    stack = lambda i: np.concatenate([np.broadcast_to(r[i], r[2].shape) for r in rows])  # noqa
    internal, in_tree, phi, split = stack(0), stack(1), stack(2), stack(3)
    kind = np.concatenate([r[4] for r in rows])
    w_ref, p_split_ref, log_z_ref = (np.concatenate([r[6][j] for r in rows]) for j in range(3))
    assert len(kind) >= 10_000
    direction = rng.normal(size=phi.shape)
    log_w, log_z, grad_z, d_log_w = jax.device_get(_magnitude_outputs(
        jnp.asarray(phi, jnp.float32), jnp.asarray(split, jnp.float32), jnp.asarray(internal),
        jnp.asarray(direction, jnp.float32)))
    w = np.exp(np.asarray(log_w, np.float64))

    # every tree: no NaN, -inf on padding, paths sum to 1, finite gradients that vanish on padding
    assert np.isfinite(log_w[in_tree]).all() and np.all(log_w[~in_tree] == -np.inf)
    for g in grad_z + (d_log_w,):
        assert np.isfinite(g).all() and np.all(g[~in_tree] == 0)
    for internal_row, in_tree_row, w_rows in zip(
            [r[0] for r in rows], [r[1] for r in rows], np.split(w, MAGNITUDE_SHAPES)):
        for path in leaf_paths(in_tree_row, internal_row):
            assert np.abs(w_rows[:, path].sum(axis=1) - 1).max() <= 1e-5
    # where float32 resolves the offsets (the integer kinds: all of them), the enumeration within
    # 1e-5: weights, and the gradient of log Z (w and P(split))
    exact = kind < 2
    on_tree = np.where(in_tree, 1.0, 0.0)
    assert np.abs(w - w_ref)[exact].max() <= 1e-5
    assert np.abs(grad_z[0] - w_ref * on_tree)[exact].max() <= 1e-5
    assert np.abs(grad_z[1] - p_split_ref)[exact].max() <= 1e-5
    eps = np.finfo(np.float32).eps
    assert np.all(np.abs(log_z - log_z_ref)[exact]
                  <= 1e-5 + 4 * eps * (np.abs(log_z_ref) + np.abs(phi[:, 0]))[exact])
    # generic potentials: the bound that rounding the offsets allows (vacuous for huge ones)
    size = (np.where(in_tree, np.abs(np.nan_to_num(phi)), 0).sum(axis=1)
            + np.where(internal & in_tree, np.abs(np.nan_to_num(split)), 0).sum(axis=1))
    bound = 1e-5 + 8 * eps * size
    assert np.all(np.abs(w - w_ref).max(axis=1)[~exact] <= bound[~exact])
    # the test exercised what it claims: exact ties at huge magnitudes, non-trivial weights
    ties = (kind == 0) & (np.abs(phi).max(axis=1, where=in_tree, initial=0) > 1e20)
    assert ties.sum() > 500 and (w[ties] * (1 - w[ties]) > 0.1).any(axis=1).mean() > 0.25


# -- the layout primitives the engine relies on -------------------------------------------------
def test_passes_refuse_arrays_with_extra_axes():
    # a [nodes, k] input to `up` would have its nodes mixed silently; batches go through vmap.
    # path_sum sums trailing axes alike: column by column, as a vmap over them does
    from jaxtree.compact import CompactLayout
    compact = CompactLayout.from_levels([np.array([-1]), np.array([0, 0]), np.array([0, 0])],
                                        [np.array([True]), np.array([True, False]),
                                         np.array([False, False])])
    for layout in (CompleteLayout(2), compact):
        two = jnp.zeros((layout.num_nodes, 2))
        flat = jnp.zeros(layout.num_nodes)
        internal = jnp.zeros(layout.num_nodes, bool)
        with pytest.raises(ValueError, match=r"\[nodes\] arrays"):
            layout.up(two, two, internal, jnp.logaddexp)
        assert layout.up(flat, flat, internal, jnp.logaddexp).shape == flat.shape
        columns = jnp.asarray(np.random.default_rng(2).normal(size=(layout.num_nodes, 3)))
        np.testing.assert_array_equal(
            np.asarray(layout.path_sum(columns)),
            np.asarray(jax.vmap(layout.path_sum, in_axes=1, out_axes=1)(columns)))


def test_complete_layout_primitives_match_a_plain_loop(precision):
    rng = np.random.default_rng(12)
    layout = CompleteLayout(3)
    n = layout.num_nodes
    leaf, split = rng.normal(size=n), rng.normal(size=n)
    internal = rng.random(n) < 0.6
    x = rng.normal(size=n)
    up_ref = np.array(leaf)
    for i in reversed(range(n)):
        if 2 * i + 2 < n and internal[i]:
            up_ref[i] = np.logaddexp(leaf[i], split[i] + up_ref[2 * i + 1] + up_ref[2 * i + 2])
    path_ref = np.zeros(n)
    for i in range(1, n):
        path_ref[i] = path_ref[(i - 1) // 2] + x[i]
    sibling_ref = np.array([x[0]] + [x[i + 1] if i % 2 else x[i - 1] for i in range(1, n)])
    parent_ref = np.array([x[0]] + [x[(i - 1) // 2] for i in range(1, n)])
    as_jnp = lambda v: jnp.asarray(v, precision)  # noqa: E731

    @jax.jit
    def primitives(leaf, split, internal, x):
        return (layout.up(leaf, split, internal, jnp.logaddexp), layout.path_sum(x),
                layout.sibling(x), layout.parent(x))

    up, path, sibling, parent = primitives(as_jnp(leaf), as_jnp(split), jnp.asarray(internal),
                                           as_jnp(x))
    np.testing.assert_allclose(np.asarray(up), up_ref, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(path), path_ref, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(sibling), as_jnp(sibling_ref))
    np.testing.assert_array_equal(np.asarray(parent), as_jnp(parent_ref))
    np.testing.assert_array_equal(layout.node_depth(), [0, 1, 1] + [2] * 4 + [3] * 8)
    np.testing.assert_array_equal(layout.parent_index()[1:], (np.arange(1, n) - 1) // 2)
    np.testing.assert_array_equal(layout.left_child(), 2 * np.arange(n) + 1)
