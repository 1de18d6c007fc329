"""Pruning baselines on the engine (SPEC §3): C1, SN, reduced-error, minimum-error per size with
CV/SRM selection, Kearns–Mansour and optimistic pruning.

Every method is node statistics → per-node costs → one pass over the levels of T0, and returns a
leaf mask ``[nodes]`` (True at the leaves of the chosen pruning):

* **additive** methods are leaf costs for :func:`jaxtree.best_pruning` ((min, +) semiring):
  C1 (:func:`c1_leaf_cost`), SN (:func:`sn_leaf_cost`) and reduced-error pruning
  (:func:`rep_pruning`: bottom-up "replace the subtree by a leaf when the leaf's hold-out errors
  are ≤ the subtree's" is exactly the (min, +) recursion on hold-out errors, ties to the leaf);
* **minimum errors per size** (:func:`min_error_per_size`) is a (min, +) knapsack: a per-level pass
  over arrays ``[level nodes, sizes]`` whose children are combined by a min-plus convolution,
  followed by a top-down back-tracking pass for the pruning of a chosen size;
* **local tests** (Kearns–Mansour :func:`km_pruning`, optimistic :func:`optimistic_pruning`) are one
  bottom-up per-level pass carrying (errors, size) of the current pruned subtree
  (:func:`local_test_pruning`).

The level passes here use only the static structure every layout provides (``node_depth()``,
``left_child()``; the right child is ``left_child + 1``), so they run on any layout. They cannot be
written with ``layout.up`` alone: its values are one scalar per node, combined by addition, while
the knapsack combines vectors by min-plus convolution and the local tests decide on a (errors,
size) pair with per-node constants. The passes are unrolled over levels under ``jit``: fine for
the complete layout (≤ ~20 levels); on a compact layout hundreds of levels deep they compile
slowly (a ``lax.scan`` form would be the next step).

All functions are pure and jittable; the penalties (``lam``, ``c``, ``delta``) may be traced, so a
grid of penalties is one ``jax.vmap``::

    stats = jaxtree.node_stats(tree, X, y, L)
    masks = jax.vmap(lambda lam: jaxtree.best_pruning(
        jaxtree.c1_leaf_cost(stats, lam), tree.internal, layout=tree.layout))(lams)  # [G, nodes]

Sizes: the size of a pruning is its number of leaves that contain training points, ``|π(T, S)|``
(as in C1); empty leaves are free. Ties always go to the smaller pruning (a node becomes a leaf).
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.engine import best_pruning, tree_membership
from jaxtree.layout import resolve_layout
from jaxtree.stats import NodeStats
from jaxtree.tree import Tree

Array = jax.Array

#: Optimistic pruning resamples a learning set smaller than this to this many examples (seed 002).
RESAMPLE_SIZE = 5000


# ---------------------------------------------------------------------------------------------
# Additive methods: leaf costs for the engine's (min, +) pass
def c1_leaf_cost(stats: NodeStats, lam) -> Array:
    """C1 cost-complexity leaf cost (SPEC §3):
    ``n·(R̂(T) + λ|π(T,S)|/n) = Σ_leaves E_A + λ·1[N_A > 0]``.

    Args:
      stats: training statistics (``counts [nodes, L]``).
      lam: scalar λ ≥ 0, the price of one non-empty leaf in training errors.

    Returns:
      ``[nodes]`` leaf cost for :func:`jaxtree.best_pruning`.
    """
    return stats.errors + lam * (stats.total > 0)


def sn_leaf_cost(stats: NodeStats, node_depth: Array, lam) -> Array:
    """SN-pruning (Scott) leaf cost (SPEC §3):
    ``n·(R̂(T) + λ Σ_A sqrt(max(p̂(A), ℓ_A/n)·ℓ_A/n)) = Σ_leaves E_A + λ·sqrt(max(N_A, ℓ_A)·ℓ_A)``.

    Args:
      stats: training statistics.
      node_depth: ``[nodes]`` int, ℓ_A (``tree.node_depth``).
      lam: scalar λ ≥ 0.

    Returns:
      ``[nodes]`` leaf cost for :func:`jaxtree.best_pruning`.
    """
    depth = node_depth.astype(stats.counts.dtype)
    return stats.errors + lam * jnp.sqrt(jnp.maximum(stats.total, depth) * depth)


def holdout_errors(counts: Array, label: Array) -> Array:
    """``[nodes]``: errors of a second sample (``counts [nodes, L]``) when each node predicts
    ``label [nodes]`` (the labels set on the first sample)."""
    return NodeStats(counts=counts, label=label).errors


def rep_pruning(holdout_err: Array, internal: Array, layout=None) -> Array:
    """Reduced-error pruning (seed 001; SPEC §3) as a leaf mask ``[nodes]``.

    Bottom-up, the current subtree at v is replaced by a leaf when the leaf's hold-out errors are
    ≤ the current subtree's. The current subtree's errors are then ``min(leaf, children)``: the
    (min, +) recursion of :func:`jaxtree.best_pruning` with ties to the leaf, so REP is that pass.

    Args:
      holdout_err: ``[nodes]`` errors on S2 with labels set on S1 (:func:`holdout_errors`).
      internal: ``[nodes]`` bool, T0 (grown on S1).
    """
    return best_pruning(holdout_err, internal, layout=layout)


def pruning_errors(leaf_mask: Array, errors: Array) -> Array:
    """Errors of a pruning (``leaf_mask [..., nodes]``) given per-node errors ``[nodes]``."""
    return jnp.sum(jnp.where(leaf_mask, errors, 0), axis=-1)


# ---------------------------------------------------------------------------------------------
# Local tests: Kearns–Mansour and optimistic pruning
def local_test_pruning(errors: Array, nonempty: Array, slack_const: Array, slack_per_leaf: Array,
                       internal: Array, layout=None) -> Array:
    """Bottom-up local-test pruning, one pass over the levels (SPEC §3, KM and optimistic).

    At an internal node v whose children are already processed, the current subtree T_v has
    ``err_T`` errors and ``s_T`` (non-empty) leaves; v becomes a leaf iff
    ``errors_v ≤ err_T + sqrt(max(slack_const_v + slack_per_leaf_v · s_T, 0))``
    (the test on error *rates* ``E_v/m_v ≤ err_T/m_v + α_v`` multiplied by ``m_v``).

    Args:
      errors: ``[nodes]`` E_v, errors of v as a leaf.
      nonempty: ``[nodes]`` bool, N_v > 0 (a leaf's size).
      slack_const, slack_per_leaf: ``[nodes]`` float, the squared slack ``(m_v α_v)²`` is
        ``slack_const + slack_per_leaf · s_T``.
      internal: ``[nodes]`` bool, T0.
      layout: the tree's layout; None for the complete heap layout.

    Returns:
      ``[nodes]`` bool leaf mask of the pruned tree.
    """
    return _local_test_pruning(errors, nonempty, slack_const, slack_per_leaf, internal,
                               resolve_layout(layout, errors))


@jax.jit
def _local_test_pruning(errors, nonempty, slack_const, slack_per_leaf, internal, layout):
    internal = tree_membership(internal, layout) & jnp.asarray(internal, bool)
    size = nonempty.astype(errors.dtype)

    def step(x, children):
        err, lsize, a, b, split = x
        if children is None:
            return (err, lsize), ~split
        (err_l, size_l), (err_r, size_r) = children
        err_t, size_t = err_l + err_r, size_l + size_r
        slack = jnp.sqrt(jnp.maximum(a + b * size_t, 0))
        stop = ~split | (err <= err_t + slack)
        return (jnp.where(stop, err, err_t), jnp.where(stop, lsize, size_t)), stop

    _, stops = layout.fold_up(step, (errors, size, slack_const, slack_per_leaf, internal))
    return _leaves_of(stops, internal, layout)


def km_slack(stats: NodeStats, node_depth: Array, log_num_tests, c, delta=0.05):
    """Kearns–Mansour squared slack ``(m_v α_v)²`` as ``(const, per_leaf)`` ``[nodes]`` each:
    ``m_v α_v = c·sqrt(m_v·((ℓ_v + s_v)·log|H| + log(m_v/δ)))`` (SPEC §3).

    Args:
      stats: training statistics (m_v = N_v).
      node_depth: ``[nodes]`` ℓ_v.
      log_num_tests: log|H| (:func:`log_num_tests_of`).
      c: the constant of α (the O(·) of Kearns & Mansour; tuned, default 1 in the estimator).
      delta: confidence δ (0.05 by default, the usual choice; the seed leaves it open).
    """
    m = stats.total
    depth = node_depth.astype(m.dtype)
    log_m = jnp.log(jnp.maximum(m, 1) / delta)
    const = c ** 2 * m * (depth * log_num_tests + log_m)
    per_leaf = c ** 2 * m * log_num_tests
    return const, per_leaf


def optimistic_slack(stats: NodeStats, node_depth: Array, c=1.0, delta=0.05, resample=True):
    """Optimistic-pruning (seed 002) squared slack ``(m_v α'_v)²`` as ``(const, per_leaf = 0)``.

    ``α'_v = c·sqrt(((ℓ_v + 2)·log n + log(1/δ)) / m_v)``; ℓ_v plays the role of Set(·) for a
    tree, n is the learning-set size. With ``resample``, a learning set smaller than
    :data:`RESAMPLE_SIZE` is treated as resampled to that size (seed 002): n and every m_v are
    scaled by ``r = RESAMPLE_SIZE / n`` while error rates stay, so ``(m_v α'_v)² = m_v·K_v / r``.
    ``c = 1`` is the seed's formula; it is exposed so that it can be tuned like the others.
    """
    m = stats.total
    n = stats.num_samples
    scale = jnp.maximum(RESAMPLE_SIZE / jnp.maximum(n, 1), 1.0) if resample else 1.0
    depth = node_depth.astype(m.dtype)
    k = (depth + 2) * jnp.log(n * scale) + jnp.log(1.0 / delta)
    return c ** 2 * m * k / scale, jnp.zeros_like(m)


def km_pruning(tree: Tree, stats: NodeStats, c, delta=0.05, log_num_tests=None) -> Array:
    """Kearns–Mansour bottom-up pruning (seed 001, slides 13–24) as a leaf mask ``[nodes]``.

    ``log_num_tests`` (log|H|) defaults to :func:`log_num_tests_of` of ``tree``."""
    if log_num_tests is None:
        log_num_tests = log_num_tests_of(tree)
    const, per_leaf = km_slack(stats, tree.node_depth, log_num_tests, c, delta)
    return local_test_pruning(stats.errors, stats.total > 0, const, per_leaf, tree.internal,
                              tree.layout)


def optimistic_pruning(tree: Tree, stats: NodeStats, c=1.0, delta=0.05, resample=True) -> Array:
    """Optimistic pruning (seed 002) as a leaf mask ``[nodes]``; see :func:`optimistic_slack`."""
    const, per_leaf = optimistic_slack(stats, tree.node_depth, c, delta, resample)
    return local_test_pruning(stats.errors, stats.total > 0, const, per_leaf, tree.internal,
                              tree.layout)


def log_num_tests_of(tree: Tree) -> Array:
    """log|H| for KM and SRM (scalar, traceable): |H| is the number of distinct split tests
    (feature, threshold) that T0 uses — the tests any of its prunings can contain — at least 2.
    (Kearns & Mansour count the tests of the node class H; T0's own tests are the ones a pruning
    can choose from.)"""
    internal = tree.internal & tree_membership(tree.internal, tree.layout)
    feature = jnp.where(internal, tree.feature, -1)
    threshold = jnp.where(internal, tree.threshold, 0)
    order = jnp.lexsort((threshold, feature))
    feature, threshold = feature[order], threshold[order]
    new = (feature[1:] != feature[:-1]) | (threshold[1:] != threshold[:-1])
    distinct = jnp.sum(new & (feature[1:] >= 0)) + (feature[0] >= 0)
    return jnp.log(jnp.maximum(distinct, 2).astype(tree.threshold.dtype))


def pruning_votes(leaf_mask: Array, stats: NodeStats) -> tuple[Array, Array]:
    """A pruning as node votes ``(weight [nodes], label [nodes])``: weight 1 at its leaves, so a
    point's vote summed along its root-to-leaf path is its pruning leaf's label (the form
    :func:`jaxtree.scores_from_paths` and the model-selection code consume)."""
    return leaf_mask.astype(stats.counts.dtype), stats.label


def c1_votes(tree: Tree, stats: NodeStats, params: dict):
    """Votes of the C1 pruning with ``params = {"lam": λ}`` (:func:`pruning_votes`)."""
    cost = c1_leaf_cost(stats, params["lam"])
    return pruning_votes(best_pruning(cost, tree.internal, layout=tree.layout), stats)


def sn_votes(tree: Tree, stats: NodeStats, params: dict):
    """Votes of the SN pruning with ``params = {"lam": λ}``."""
    cost = sn_leaf_cost(stats, tree.node_depth, params["lam"])
    return pruning_votes(best_pruning(cost, tree.internal, layout=tree.layout), stats)


def km_votes(tree: Tree, stats: NodeStats, params: dict):
    """Votes of the Kearns–Mansour pruning with ``params = {"c": c}`` (δ = 0.05, |H| of T0)."""
    return pruning_votes(km_pruning(tree, stats, params["c"]), stats)


def optimistic_votes(tree: Tree, stats: NodeStats, params: dict):
    """Votes of optimistic pruning with ``params = {"c": c}`` (δ = 0.05, resampling on)."""
    return pruning_votes(optimistic_pruning(tree, stats, params["c"]), stats)


# ---------------------------------------------------------------------------------------------
# Minimum errors per size: a (min, +) knapsack over the tree
class SizeTable(NamedTuple):
    """Result of :func:`min_error_per_size` (``S`` = ``max_size``).

    errors:  ``[S+1]`` fewest training errors of a pruning with s non-empty leaves (inf if none).
    holdout: ``[S+1]`` hold-out errors of that pruning (0 when no hold-out sample was given).
    choice:  per level, ``[level nodes, S_level+1]`` int32: the left child's size in the best
      split for each size, or -1 where the node is a leaf (used by :func:`pruning_of_size`).
    """

    errors: Array
    holdout: Array
    choice: tuple


def min_error_per_size(errors: Array, nonempty: Array, internal: Array, max_size: int,
                       holdout_err: Optional[Array] = None, layout=None) -> SizeTable:
    """For every size s, the pruning with s non-empty leaves and the fewest errors (seed 001,
    procedure Compute; SPEC §3): ``err(v, s) = min(leaf, min_{s1+s2=s} err(v_L,s1) + err(v_R,s2))``.

    One bottom-up pass over the levels with a size axis capped per level (a node at height h has at
    most ``min(max_size, 2**h)`` leaves); children are combined by a min-plus convolution. The
    hold-out errors of the chosen prunings are carried along (same choices), which gives the CV
    curve in the same pass.

    Args:
      errors: ``[nodes]`` E_v (training errors as a leaf).
      nonempty: ``[nodes]`` bool, N_v > 0.
      internal: ``[nodes]`` bool, T0.
      max_size: static int S, the largest size tabulated (the number of non-empty T0 leaves
        covers every pruning: :func:`num_nonempty_leaves`).
      holdout_err: optional ``[nodes]`` errors of a hold-out sample (:func:`holdout_errors`).
      layout: the tree's layout; None for the complete heap layout.
    """
    layout = resolve_layout(layout, errors)
    return _min_error_per_size(errors, nonempty, internal, holdout_err, layout, int(max_size))


@functools.partial(jax.jit, static_argnames=("max_size",))
def _min_error_per_size(errors, nonempty, internal, holdout_err, layout, max_size):
    internal = tree_membership(internal, layout) & jnp.asarray(internal, bool)
    if holdout_err is None:
        holdout_err = jnp.zeros_like(errors)
    last = layout.num_levels - 1

    def step(level, x, children):
        err, err2, size, split = x
        width = min(max_size, 2 ** (last - level)) + 1
        sizes = jnp.arange(width)
        leaf = jnp.where(sizes == size[:, None].astype(jnp.int32), err[:, None], jnp.inf)
        leaf2 = jnp.broadcast_to(err2[:, None], leaf.shape)
        if children is None:
            return (leaf, leaf2), jnp.full(leaf.shape, -1, jnp.int32)
        (a, a2), (b, b2) = children
        best, best2, left = _min_plus_convolution(a, a2, b, b2, width)
        stop = ~split[:, None] | (leaf <= best)
        return ((jnp.where(stop, leaf, best), jnp.where(stop, leaf2, best2)),
                jnp.where(stop, -1, left))

    values, choice = [], []
    for value, ch in _up_levels(layout, (errors, holdout_err, nonempty, internal), step):
        values.append(value)
        choice.append(ch)
    root, root2 = values[0]
    pad = max_size + 1 - root.shape[1]
    return SizeTable(jnp.pad(root[0], (0, pad), constant_values=jnp.inf),
                     jnp.pad(root2[0], (0, pad)), tuple(choice))


def _min_plus_convolution(a, a2, b, b2, width):
    """``best[:, s] = min_i a[:, i] + b[:, s-i]`` for s < width (first minimiser i kept) with the
    companion sums ``a2[:, i] + b2[:, s-i]`` of the same i. a, b: ``[m, w_child]``."""
    m, w_child = a.shape
    pad = jnp.full((m, width), jnp.inf, a.dtype)
    b_pad = jnp.concatenate([pad, b, pad], axis=1)
    b2_pad = jnp.concatenate([jnp.zeros_like(pad), b2, jnp.zeros_like(pad)], axis=1)

    def body(i, carry):
        best, best2, left = carry
        start = width - i
        cand = a[:, i, None] + jax.lax.dynamic_slice_in_dim(b_pad, start, width, axis=1)
        cand2 = a2[:, i, None] + jax.lax.dynamic_slice_in_dim(b2_pad, start, width, axis=1)
        better = cand < best
        return (jnp.where(better, cand, best), jnp.where(better, cand2, best2),
                jnp.where(better, i, left))

    init = (jnp.full((m, width), jnp.inf, a.dtype), jnp.zeros((m, width), a.dtype),
            jnp.full((m, width), -1, jnp.int32))
    return jax.lax.fori_loop(0, min(w_child, width), body, init)


def pruning_of_size(table: SizeTable, size, internal: Array, layout=None) -> Array:
    """Leaf mask ``[nodes]`` of the pruning :func:`min_error_per_size` chose for ``size``
    (a scalar, may be traced; it must have a pruning: ``table.errors[size]`` finite, else the
    root alone is returned), by one top-down pass over the levels.

    A node is reached with a target size; it is a leaf of the pruning if its choice is -1, else its
    children are reached with targets ``choice`` and ``target - choice``.
    """
    layout = resolve_layout(layout, internal)
    return _pruning_of_size(table.choice, jnp.asarray(size, jnp.int32), layout)


@jax.jit
def _pruning_of_size(choice, size, layout):
    starts = _level_starts(layout)
    target = size[None]                                   # the root's target size
    leaves = []
    for level, ch in enumerate(choice):
        reached = target >= 0
        left_size = jnp.take_along_axis(ch, jnp.clip(target, 0, ch.shape[1] - 1)[:, None], 1)
        left_size = jnp.where(reached, left_size[:, 0], -1)
        leaves.append(reached & (left_size < 0))
        if level + 1 < len(choice):
            # children of split nodes get their targets; everything else stays unreached (-1).
            count = starts[level + 2] - starts[level + 1]
            go = left_size >= 0
            left, right = (jnp.where(go, pos, count)
                           for pos in _child_positions(layout, starts, level))
            child_target = jnp.full(count, -1, jnp.int32)
            child_target = child_target.at[left].set(left_size, mode="drop")
            target = child_target.at[right].set(target - left_size, mode="drop")
    return jnp.concatenate(leaves)


def num_nonempty_leaves(stats: NodeStats, internal: Array, layout=None) -> int:
    """Number of non-empty leaves of T0 (the largest size any pruning has); a concrete int."""
    layout = resolve_layout(layout, internal)
    leaf = tree_membership(internal, layout) & ~jnp.asarray(internal, bool)
    return int(jnp.sum(leaf & (stats.total > 0)))


def srm_select(errors_per_size: Array, n, c, delta=0.05, log_num_tests=1.0) -> Array:
    """SRM choice of size (seed 001; SPEC §3):
    ``argmin_s R̂(P_s) + c·sqrt((s·log(4|H|) + log(1/δ))/n)``
    over the sizes with a pruning (ties → the smaller size).

    Args:
      errors_per_size: ``[S+1]`` (:attr:`SizeTable.errors`).
      n: sample size; c: the bound's constant (tuned; 1 is the plain bound); delta: δ;
      log_num_tests: log|H| (:func:`log_num_tests_of`).
    """
    sizes = jnp.arange(errors_per_size.shape[0], dtype=errors_per_size.dtype)
    bound = errors_per_size / n + c * jnp.sqrt(
        jnp.maximum(sizes * (jnp.log(4.0) + log_num_tests) + jnp.log(1 / delta), 0) / n)
    return jnp.argmin(jnp.where(jnp.isfinite(errors_per_size), bound, jnp.inf))


def holdout_select(table: SizeTable) -> Array:
    """CV choice of size: the fewest hold-out errors among the sizes that have a pruning (ties go
    to the smaller size)."""
    return jnp.argmin(jnp.where(jnp.isfinite(table.errors), table.holdout, jnp.inf))


def min_size_srm_votes(tree: Tree, stats: NodeStats, params: dict, max_size: int):
    """Votes of the fewest-error pruning of the size SRM picks, ``params = {"c": c}`` (δ = 0.05,
    |H| of T0). ``max_size`` is static: bind it (``functools.partial``) to a bound on the number of
    non-empty T0 leaves. The knapsack does not depend on ``c``, so under ``vmap`` over ``c`` it
    runs once."""
    table = min_error_per_size(stats.errors, stats.total > 0, tree.internal, max_size,
                               layout=tree.layout)
    size = srm_select(table.errors, stats.num_samples, params["c"], 0.05, log_num_tests_of(tree))
    return pruning_votes(pruning_of_size(table, size, tree.internal, tree.layout), stats)


# ---------------------------------------------------------------------------------------------
# Level passes of the knapsack
def _level_starts(layout) -> np.ndarray:
    """``[levels + 1]`` static slot bounds: level ``l`` holds slots ``starts[l] … starts[l+1]-1``.

    Both layouts store levels in consecutive slots, root level first (the complete heap and the
    level-major compact layout); the passes below rely on it."""
    depth = np.asarray(layout.node_depth())
    if np.any(np.diff(depth) < 0):
        raise ValueError("level passes need a layout whose levels occupy consecutive slots")
    return np.searchsorted(depth, np.arange(layout.num_levels + 1))


def _child_positions(layout, starts, level):
    """``(left, right)`` ``[level nodes]``: positions of each node's children within the next
    level (data for the compact layout; meaningless, but in range, where a node is not split)."""
    left = jnp.asarray(layout.left_child())[starts[level]:starts[level + 1]] - starts[level + 1]
    left = jnp.clip(left, 0, starts[level + 2] - starts[level + 1] - 2)
    return left, left + 1


def _up_levels(layout, inputs, step):
    """Bottom-up over levels, deepest first, unrolled: ``step(level, x, children) ->
    (value, out)`` with ``x`` the ``inputs`` pytree (``[nodes, ...]`` leaves) at the level's
    slots and ``children`` ``(left, right)``, the next level's values at each node's children
    (None at the deepest level). Returns ``(value, out)`` per level, root level first.

    The knapsack needs it (its tables widen level by level, so ``step`` depends on ``level``);
    methods whose state has a fixed shape use ``layout.fold_up`` (a ``lax.scan`` on the
    compact layout, which compiles in seconds where this unrolled loop takes minutes on the
    paper's 400-level dyadic trees)."""
    starts = _level_starts(layout)
    results = [None] * layout.num_levels
    value = None
    for level in reversed(range(layout.num_levels)):
        x = jax.tree_util.tree_map(lambda v: v[starts[level]:starts[level + 1]], inputs)
        children = None
        if value is not None:
            left, right = _child_positions(layout, starts, level)
            children = (jax.tree_util.tree_map(lambda v: v[left], value),
                        jax.tree_util.tree_map(lambda v: v[right], value))
        value, out = step(level, x, children)
        results[level] = (value, out)
    return results


def _leaves_of(stops: Array, internal: Array, layout) -> Array:
    """Leaf mask of the pruning whose nodes stop where ``stops`` is True: the engine's
    back-tracking with leaf cost 0 where a node stops and 1 elsewhere (every subtree then has a
    zero-cost pruning, so exactly the stopping nodes with no stopping ancestor are leaves)."""
    return best_pruning(jnp.where(stops, 0.0, 1.0), internal, layout=layout)
