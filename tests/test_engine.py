"""The engine against brute force over every pruning (SPEC §2, "Generic engine").

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

from jaxtree.engine import (best_pruning, best_pruning_and_cost, log_beta_and_split,
                            log_partition, subtree_log_weights, tree_membership)
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


@pytest.mark.parametrize("length", [7, 1023, 1024])   # node arrays have odd lengths
def test_up_step_arithmetic_matches_numpy(precision, length):
    """log β = logaddexp(a, t) and log P(split) = log σ(t − a), elementwise, with infinities."""
    rng = np.random.default_rng(length)
    a = rng.normal(scale=30, size=length)
    t = rng.normal(scale=30, size=length)
    t[4:7] = a[4:7] + rng.normal(scale=60, size=3)   # |t - a| up to ~200: σ saturates
    a[:4] = [-np.inf, -np.inf, 5.0, 1e30]
    t[:4] = [-np.inf, 2.0, -np.inf, 1e30]
    eps = np.finfo(precision).eps
    # the reference sees the inputs as the tested precision rounds them
    a, t = (np.asarray(v.astype(precision), np.float64) for v in (a, t))
    with np.errstate(invalid="ignore", over="ignore"):
        want_beta = np.logaddexp(a, t)
        want_split = -np.logaddexp(0, -(t - a))
    got_beta, got_split = map(np.asarray, log_beta_and_split(jnp.asarray(a, precision),
                                                             jnp.asarray(t, precision)))
    # absolute error: rounding the inputs, plus at most one unit of 1 from log(1 + e)
    tol = 4 * eps * (1 + np.abs(want_beta))
    assert np.array_equal(np.isneginf(got_beta), np.isneginf(want_beta))
    finite = np.isfinite(want_beta)
    assert np.all(np.abs(got_beta[finite] - want_beta[finite]) <= tol[finite])
    # the split's log-probability is exact relative to |t - a|, not to |t|: tiny where σ ≈ 1
    assert got_split[1] == 0 and got_split[2] == -np.inf
    assert got_split[0] == got_split[3] == pytest.approx(-np.log(2))   # ties split evenly
    finite = np.isfinite(want_split) & (np.arange(length) >= 4)
    with np.errstate(invalid="ignore"):
        rounding = eps * np.abs(t - a)   # rounding d = t - a, scaled by σ(-d) <= 1
    assert np.all(np.abs(got_split[finite] - want_split[finite])
                  <= 4 * eps * (1 + np.abs(want_split[finite])) + 2 * rounding[finite])


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
    gives ½ to the root and ½ to each child (NOTES pitfall 3)."""
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
    """Finite weights on T0, ``-inf`` on padding, path sums 1, enumeration agreement in float64,
    finite gradients, for |φ| up to 1e6."""
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
    # rounding of log-space sums of size S costs about eps·S in every log weight
    magnitude = np.abs(leaf[in_tree]).sum() + np.abs(split[in_tree & internal]).sum()
    atol = 1e-9 + 32 * np.finfo(dtype).eps * max(magnitude, 1.0)
    w = np.exp(log_w)
    for path in leaf_paths(in_tree, internal):
        assert abs(w[path].sum() - 1.0) <= atol
    w_ref, _, _ = brute_force(np.where(in_tree, leaf, 0), split, internal)
    np.testing.assert_allclose(w, w_ref, atol=atol)
    np.testing.assert_allclose(grad, w_ref, atol=atol)


# -- the layout primitives the engine relies on -------------------------------------------------
def test_passes_refuse_arrays_with_extra_axes():
    # a [nodes, k] input would have its nodes mixed silently; batches go through vmap
    from jaxtree.compact import CompactLayout
    compact = CompactLayout.from_levels([np.array([-1]), np.array([0, 0])],
                                        [np.array([True]), np.array([False, False])])
    for layout in (CompleteLayout(2), compact):
        two = jnp.zeros((layout.num_nodes, 2))
        flat = jnp.zeros(layout.num_nodes)
        internal = jnp.zeros(layout.num_nodes, bool)
        with pytest.raises(ValueError, match=r"\[nodes\] arrays"):
            layout.up(two, two, internal, jnp.logaddexp)
        assert layout.up(flat, flat, internal, jnp.logaddexp).shape == flat.shape
    with pytest.raises(ValueError, match=r"\[nodes\] arrays"):
        compact.path_sum(jnp.zeros((compact.num_nodes, 2)))


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
