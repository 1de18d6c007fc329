"""Pruning baselines on the engine (docs/theory/pruning.md): C1, SN, reduced-error, minimum-error per size with
CV/SRM selection, Kearns–Mansour and optimistic pruning.

Every method is node statistics → per-node costs → one pass over the levels of T0, and returns a
leaf mask ``[nodes]`` (True at the leaves of the chosen pruning):

* **additive** methods are leaf costs for :func:`jaxtree.best_pruning` ((min, +) semiring):
  C1 (:func:`c1_leaf_cost`), SN (:func:`sn_leaf_cost`) and reduced-error pruning
  (:func:`rep_pruning`: bottom-up "replace the subtree by a leaf when the leaf's hold-out errors
  are ≤ the subtree's" is exactly the (min, +) recursion on hold-out errors, ties to the leaf);
* **minimum errors per size** (:func:`min_error_per_size`) is a (min, +) knapsack: one bottom-up
  pass whose state is a whole level, every node's table of errors per size packed in one row,
  children combined by a min-plus convolution, then a top-down back-tracking pass for the
  pruning of a chosen size (:func:`pruning_of_size`);
* **local tests** (Kearns–Mansour :func:`km_pruning`, optimistic :func:`optimistic_pruning`) are one
  bottom-up pass carrying (errors, size) of the current pruned subtree (:func:`local_test_pruning`).

Every pass is one of the layout's folds (``fold_up``, ``fold_down``, ``fold_up_levels``,
``fold_down_levels`` of :mod:`jaxtree.layout`): one array operation per level, unrolled, on the
complete layout; one ``lax.scan`` over levels on the compact one, so compile time does not grow
with depth (the paper's 400-level dyadic trees).

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

from jaxtree import shapes
from jaxtree.engine import best_pruning, tree_membership
from jaxtree.layout import resolve_layout
from jaxtree.pacbayes import node_votes
from jaxtree.stats import NodeStats
from jaxtree.tree import Tree

Array = jax.Array

#: Optimistic pruning resamples a learning set smaller than this to this many examples (Nock 2002).
RESAMPLE_SIZE = 5000


# ---------------------------------------------------------------------------------------------
# Additive methods: leaf costs for the engine's (min, +) pass
def c1_leaf_cost(stats: NodeStats, lam) -> Array:
    """C1 cost-complexity leaf cost (docs/theory/pruning.md):
    ``n·(R̂(T) + λ|π(T,S)|/n) = Σ_leaves E_A + λ·1[N_A > 0]``.

    Args:
      stats: training statistics (``counts [nodes, L]``).
      lam: scalar λ ≥ 0, the price of one non-empty leaf in training errors.

    Returns:
      ``[nodes]`` float leaf cost for :func:`jaxtree.best_pruning`.

    Example:
        T0 is the full depth-2 tree on four points (one training error at the root and at slot
        1, none below):

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> print(np.asarray(jaxtree.c1_leaf_cost(stats, 0.4)).round(3))
        [1.4 1.4 0.4 0.4 0.4 0.4 0.4]
        >>> jaxtree.best_pruning(jaxtree.c1_leaf_cost(stats, 0.4), tree.internal).tolist()
        [False, False, True, True, True, False, False]
        >>> jaxtree.best_pruning(jaxtree.c1_leaf_cost(stats, 2.0), tree.internal).tolist()
        [True, False, False, False, False, False, False]
    """
    return stats.errors + lam * (stats.total > 0)


def sn_leaf_cost(stats: NodeStats, node_depth: Array, lam) -> Array:
    """SN-pruning (Scott) leaf cost (docs/theory/pruning.md):
    ``n·(R̂(T) + λ Σ_A sqrt(max(p̂(A), ℓ_A/n)·ℓ_A/n)) = Σ_leaves E_A + λ·sqrt(max(N_A, ℓ_A)·ℓ_A)``.

    Args:
      stats: training statistics.
      node_depth: ``[nodes]`` int, ℓ_A (``tree.node_depth``).
      lam: scalar λ ≥ 0.

    Returns:
      ``[nodes]`` float leaf cost for :func:`jaxtree.best_pruning`.

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> cost = jaxtree.sn_leaf_cost(stats, tree.node_depth, 0.1)
        >>> print(np.asarray(cost).round(3))
        [1.    1.141 0.141 0.2   0.2   0.2   0.2  ]
        >>> jaxtree.best_pruning(cost, tree.internal).tolist()
        [False, False, True, True, True, False, False]
    """
    depth = node_depth.astype(stats.counts.dtype)
    return stats.errors + lam * jnp.sqrt(jnp.maximum(stats.total, depth) * depth)


def holdout_errors(counts: Array, label: Array) -> Array:
    """``[nodes]`` float: errors of a second sample (``counts [nodes, L]`` float) when each node
    predicts ``label [nodes]`` int (the labels set on the first sample).

    Example:
        Labels set on ``y``, errors counted on ``y_holdout`` (the root predicts 1: two errors):

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> y_holdout = np.array([0, 0, 1, 1])
        >>> holdout = jaxtree.node_stats(tree, X, y_holdout, num_classes=2)
        >>> holdout_err = jaxtree.holdout_errors(holdout.counts, stats.label)
        >>> print(np.asarray(holdout_err))
        [2. 0. 0. 0. 1. 0. 0.]
    """
    return NodeStats(counts=counts, label=label).errors


def rep_pruning(holdout_err: Array, internal: Array, layout=None) -> Array:
    """Reduced-error pruning (Quinlan 1987; docs/theory/pruning.md) as a leaf mask ``[nodes]``.

    Bottom-up, the current subtree at v is replaced by a leaf when the leaf's hold-out errors are
    ≤ the current subtree's. The current subtree's errors are then ``min(leaf, children)``: the
    (min, +) recursion of :func:`jaxtree.best_pruning` with ties to the leaf, so REP is that pass.

    Args:
      holdout_err: ``[nodes]`` errors on S2 with labels set on S1 (:func:`holdout_errors`).
      internal: ``[nodes]`` bool, T0 (grown on S1).
      layout: the tree's layout; None for the complete heap layout.

    Returns:
      ``[nodes]`` bool leaf mask.

    Example:
        Slot 1 makes no hold-out error as a leaf and its children one, so it is pruned:

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> y_holdout = np.array([0, 0, 1, 1])
        >>> holdout = jaxtree.node_stats(tree, X, y_holdout, num_classes=2)
        >>> holdout_err = jaxtree.holdout_errors(holdout.counts, stats.label)
        >>> jaxtree.rep_pruning(holdout_err, tree.internal).tolist()
        [False, True, True, False, False, False, False]
    """
    return best_pruning(holdout_err, internal, layout=layout)


def pruning_errors(leaf_mask: Array, errors: Array) -> Array:
    """Errors of a pruning (``leaf_mask [..., nodes]``) given per-node errors ``[nodes]``."""
    return jnp.sum(jnp.where(leaf_mask, errors, 0), axis=-1)


# ---------------------------------------------------------------------------------------------
# Local tests: Kearns–Mansour and optimistic pruning
def local_test_pruning(errors: Array, nonempty: Array, slack_const: Array, slack_per_leaf: Array,
                       internal: Array, layout=None) -> Array:
    """Bottom-up local-test pruning, one pass over the levels (docs/theory/pruning.md, KM and optimistic).

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

    Example:
        Without slack every split that removes an error stays; a slack of 2 errors
        (``sqrt(4)``) prunes to the root:

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> zero = np.zeros(7)
        >>> args = (stats.errors, stats.total > 0)
        >>> jaxtree.local_test_pruning(*args, zero, zero, tree.internal).tolist()
        [False, False, True, True, True, False, False]
        >>> jaxtree.local_test_pruning(*args, zero + 4, zero, tree.internal).tolist()
        [True, False, False, False, False, False, False]
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
    ``m_v α_v = c·sqrt(m_v·((ℓ_v + s_v)·log|H| + log(m_v/δ)))`` (docs/theory/pruning.md).

    Args:
      stats: training statistics (m_v = N_v).
      node_depth: ``[nodes]`` ℓ_v.
      log_num_tests: ``log|H|`` (:func:`log_num_tests_of`).
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
    """Optimistic-pruning (Nock 2002) squared slack ``(m_v α'_v)²`` as ``(const, per_leaf = 0)``.

    ``α'_v = c·sqrt(((ℓ_v + 2)·log n + log(1/δ)) / m_v)``; ℓ_v plays the role of Set(·) for a
    tree, n is the learning-set size. With ``resample``, a learning set smaller than
    :data:`RESAMPLE_SIZE` is treated as resampled to that size (Nock 2002): n and every m_v are
    scaled by ``r = RESAMPLE_SIZE / n`` while error rates stay, so ``(m_v α'_v)² = m_v·K_v / r``.
    ``c = 1`` is the seed's formula; it is exposed so that it can be tuned like the others.
    """
    m = stats.total
    k, scale = _optimistic_terms(stats.num_samples, node_depth.astype(m.dtype), delta, resample)
    return c ** 2 * m * k / scale, jnp.zeros_like(m)


def _optimistic_terms(n, depth, delta, resample):
    """``(K_v, r)`` of :func:`optimistic_slack`: ``K_v = (ℓ_v + 2)·log(n·r) + log(1/δ)`` and the
    resampling factor ``r`` (1 without ``resample``; ``resample`` may be traced)."""
    scale = jnp.where(resample, jnp.maximum(RESAMPLE_SIZE / jnp.maximum(n, 1), 1.0), 1.0)
    return (depth + 2) * jnp.log(n * scale) + jnp.log(1.0 / delta), scale


@jax.jit
def km_pruning(tree: Tree, stats: NodeStats, c, delta=0.05, log_num_tests=None) -> Array:
    """Kearns–Mansour bottom-up pruning (Kearns & Mansour 1998; docs/theory/pruning.md) as a leaf mask ``[nodes]``.

    Args:
      tree: T0. stats: its training statistics.
      c: scalar ≥ 0, the constant in front of the slack (1: the test as stated).
      delta: confidence δ. log_num_tests: ``log|H|``; defaults to :func:`log_num_tests_of` of
        ``tree``.

    Returns:
      ``[nodes]`` bool leaf mask (:func:`local_test_pruning` with the KM slack).

    Example:
        On four points the full slack (``c=1``) prunes to the root; a tenth of it keeps the
        split of slot 1, which removes an error:

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> jaxtree.km_pruning(tree, stats, c=1.0).tolist()
        [True, False, False, False, False, False, False]
        >>> jaxtree.km_pruning(tree, stats, c=0.1).tolist()
        [False, False, True, True, True, False, False]
    """
    if log_num_tests is None:
        log_num_tests = log_num_tests_of(tree)
    const, per_leaf = km_slack(stats, tree.node_depth, log_num_tests, c, delta)
    return local_test_pruning(stats.errors, stats.total > 0, const, per_leaf, tree.internal,
                              tree.layout)


@jax.jit
def optimistic_pruning(tree: Tree, stats: NodeStats, c=1.0, delta=0.05, resample=True) -> Array:
    """Optimistic pruning (Nock 2002) as a leaf mask ``[nodes]``; see :func:`optimistic_slack`.

    Args:
      tree: T0. stats: its training statistics.
      c: scalar ≥ 0, the constant of the slack. delta: confidence δ.
      resample: treat a sample smaller than 5000 as resampled to 5000 (Nock 2002).

    Returns:
      ``[nodes]`` bool leaf mask (:func:`local_test_pruning` with the optimistic slack).

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> jaxtree.optimistic_pruning(tree, stats).tolist()
        [False, False, True, True, True, False, False]
    """
    const, per_leaf = optimistic_slack(stats, tree.node_depth, c, delta, resample)
    return local_test_pruning(stats.errors, stats.total > 0, const, per_leaf, tree.internal,
                              tree.layout)


@jax.jit
def log_num_tests_of(tree: Tree) -> Array:
    """``log|H|`` for KM and SRM (scalar, traceable): ``|H|`` is the number of distinct split tests
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
    """Votes of the C1 pruning with ``params = {"lam": λ}`` (:func:`pruning_votes`); with
    ``params["smoothing"] = α`` too, its leaves' class frequencies smoothed by α, ``[nodes, L]``
    (:func:`jaxtree.pacbayes.node_votes`; likewise every ``*_votes`` here)."""
    cost = c1_leaf_cost(stats, params["lam"])
    return node_votes(tree, stats, best_pruning(cost, tree.internal, layout=tree.layout),
                      params.get("smoothing"))


def sn_votes(tree: Tree, stats: NodeStats, params: dict):
    """Votes of the SN pruning with ``params = {"lam": λ}``."""
    cost = sn_leaf_cost(stats, tree.node_depth, params["lam"])
    return node_votes(tree, stats, best_pruning(cost, tree.internal, layout=tree.layout),
                      params.get("smoothing"))


def km_votes(tree: Tree, stats: NodeStats, params: dict):
    """Votes of the Kearns–Mansour pruning with ``params = {"c": c}``; optional entries
    ``"delta"`` (default 0.05) and ``"log_num_tests"`` (default ``log|H|`` of T0)."""
    mask = km_pruning(tree, stats, params["c"], params.get("delta", 0.05),
                      params.get("log_num_tests"))
    return node_votes(tree, stats, mask, params.get("smoothing"))


def optimistic_votes(tree: Tree, stats: NodeStats, params: dict):
    """Votes of optimistic pruning with ``params = {"c": c}``; optional entries ``"delta"``
    (default 0.05) and ``"resample"`` (default True)."""
    mask = optimistic_pruning(tree, stats, params["c"], params.get("delta", 0.05),
                              params.get("resample", True))
    return node_votes(tree, stats, mask, params.get("smoothing"))


# ---------------------------------------------------------------------------------------------
# Minimum errors per size: a (min, +) knapsack over the tree
class SizeTable(NamedTuple):
    """Result of :func:`min_error_per_size` (``S`` = ``max_size``, ``B`` = ``S + 1 + W``).

    Attributes:
        errors: ``[S+1]`` fewest training errors of a pruning with s non-empty leaves (inf if
            none).
        holdout: ``[S+1]`` hold-out errors of that pruning (0 when no hold-out sample was given;
            inf where ``errors`` is).
        left_size: ``[levels, B]`` int32, the back-tracking choices, the tables of a level
            packed end to end: entry ``start[v] + s`` is the left child's size in v's best
            pruning of size s, -1 where v is a leaf of that pruning (used by
            :func:`pruning_of_size`).
        start: ``[nodes]`` int32, where each node's table begins in its level's row.
        largest: ``[nodes]`` int32, the largest size in each node's table (its non-empty T0
            leaves, at most S).
    """

    errors: Array
    holdout: Array
    left_size: Array
    start: Array
    largest: Array


def min_error_per_size(errors: Array, nonempty: Array, internal: Array, max_size: int,
                       holdout_err: Optional[Array] = None, layout=None) -> SizeTable:
    """For every size s, the pruning with s non-empty leaves and the fewest errors (procedure
    Compute of docs/theory/pruning.md): ``err(v, s) = min(leaf, min_{s1+s2=s} err(v_L,s1) + err(v_R,s2))``,
    ties to the leaf, then to the smallest left size s1.

    One bottom-up pass over the levels (the layout's ``fold_up_levels``: a ``lax.scan`` on the
    compact layout, so compile time does not grow with depth). A node's table holds the sizes
    ``0 … s_v``, ``s_v`` its non-empty T0 leaves (at most S, counted by ``layout.up``); the
    tables of one level are packed end to end in one row of ``B = S + 1 + W`` entries (W: the
    widest level), their places computed for all levels at once before the pass. They fit because
    the subtrees of a level are disjoint, so their sizes add up to at most the number of non-empty
    leaves of T0: memory is ``O(levels·(S + W))``, where one table of S+1 sizes per slot would
    take ``O(levels·W·S)``. Children are combined by a min-plus convolution over the sizes of the
    smaller child: ``1 + max_v min(s_vL, s_vR)`` rounds of ``O(B)`` per level (on spam's
    400-level dyadic T0, about 1600 rounds in all). The hold-out errors of the chosen prunings
    are carried along (same choices), which gives the CV curve in the same pass.

    Args:
      errors: ``[nodes]`` E_v (training errors as a leaf).
      nonempty: ``[nodes]`` bool, N_v > 0 (as node statistics give it: a node is non-empty iff
        a T0 leaf below it is).
      internal: ``[nodes]`` bool, T0.
      max_size: static int S, the largest size tabulated; at least the number of non-empty
        leaves of T0 (:func:`num_nonempty_leaves`), so that every pruning has its entry. Checked
        when the arrays are concrete (``ValueError``); under ``jit`` a smaller S gives the exact
        curve up to S where every level's tables fit in their row, else a NaN curve (never a
        wrong number).
      holdout_err: optional ``[nodes]`` errors of a hold-out sample (:func:`holdout_errors`).
      layout: the tree's layout; None for the complete heap layout.

    Returns:
      :class:`SizeTable`: ``errors`` and ``holdout`` ``[S+1]`` float (``inf`` for sizes with no
      pruning) and the back-tracking tables for :func:`pruning_of_size`.

    Example:
        No pruning has 0 leaves; the root alone (size 1) makes one error, as does {1, 2};
        {3, 4, 2} (size 3) makes none:

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> y_holdout = np.array([0, 0, 1, 1])
        >>> holdout = jaxtree.node_stats(tree, X, y_holdout, num_classes=2)
        >>> holdout_err = jaxtree.holdout_errors(holdout.counts, stats.label)
        >>> table = jaxtree.min_error_per_size(stats.errors, stats.total > 0, tree.internal,
        ...                                    max_size=4, holdout_err=holdout_err)
        >>> print(np.asarray(table.errors), np.asarray(table.holdout))
        [inf  1.  1.  0.  0.] [inf  2.  0.  1.  1.]
    """
    layout = resolve_layout(layout, errors)
    member = _membership(internal, layout)
    max_size = _checked_max_size(max_size, nonempty, internal, member)
    if holdout_err is None:   # zeros, not None: one compiled program serves both calls
        holdout_err = jnp.zeros_like(errors)
    return _min_error_per_size(errors, nonempty, internal, member, holdout_err, layout, max_size)


def _checked_max_size(max_size, nonempty, internal, member) -> int:
    """``max_size`` as an int, after checking that it covers every pruning (when the arrays are
    concrete)."""
    if isinstance(max_size, bool) or not isinstance(max_size, (int, np.integer)) or max_size < 0:
        raise ValueError(f"max_size must be an int >= 0 (static); got {max_size!r}")
    if not any(isinstance(x, jax.core.Tracer) for x in (nonempty, internal, member)):
        count = int(_nonempty_leaf_count(nonempty, internal, member))
        if count > max_size:
            raise ValueError(f"max_size={max_size} is below the {count} non-empty leaves of T0: "
                             "pass at least num_nonempty_leaves(stats, internal, layout)")
    return int(max_size)


@functools.partial(jax.jit, static_argnames=("max_size",))
def _min_error_per_size(errors, nonempty, internal, member, holdout_err, layout, max_size):
    split = member & jnp.asarray(internal, bool)
    leaf_size = (member & jnp.asarray(nonempty, bool)).astype(jnp.int32)
    # a node's largest size: its non-empty leaves (at least its own size as a leaf, for flags
    # that are not node statistics), capped at S
    largest = jnp.minimum(layout.up(leaf_size, jnp.zeros_like(leaf_size), split, jnp.maximum),
                          max_size)
    row = max_size + 1 + layout.width
    start, owner, overflow = _packed_rows(largest, layout, row)
    left = jnp.minimum(jnp.asarray(layout.left_child()), layout.num_nodes - 2)
    children = (start[left], largest[left], start[left + 1], largest[left + 1])
    top, _, left_size = layout.fold_up_levels(
        functools.partial(_knapsack_level, row=row),
        (errors, holdout_err, start, largest, leaf_size, split) + children, owner)
    # the root is the first node of its level: its table is the row's first entries
    sizes = jnp.arange(max_size + 1)
    top_errors, top_holdout = (t[:max_size + 1] for t in top)
    curve = jnp.where(sizes <= largest[0], top_errors, jnp.inf)
    curve = jnp.where(overflow, jnp.nan, curve)
    holdout = jnp.where(jnp.isfinite(curve), top_holdout, jnp.inf)
    return SizeTable(curve, holdout, left_size, start, largest)


def _packed_rows(largest: Array, layout, row: int):
    """Where each node's table sits in its level's row of ``row`` entries (sizes ``0 …
    largest``, one level's tables end to end).

    Returns ``(start [nodes], owner [levels, row], overflow)``: the entry where each node's
    table begins, the level position of the node that holds each entry (entries past the
    level's tables: its last node, beyond that node's sizes), and whether some level needs more
    than ``row`` entries. Levels occupy consecutive slots, root level first, in both layouts."""
    depth = np.asarray(layout.node_depth())
    first = np.searchsorted(depth, np.arange(layout.num_levels + 1))   # each level's first slot
    end = jnp.cumsum(largest + 1)
    before = jnp.concatenate([jnp.zeros(1, end.dtype), end])[first[:-1]]  # entries above a level
    start = end - (largest + 1) - before[depth]
    overflow = jnp.any(end[first[1:] - 1] - before > row)
    # an entry's owner is the last node of its level that starts at or before it
    position = jnp.asarray(np.arange(layout.num_nodes) - first[depth], jnp.int32)
    marks = jnp.zeros((layout.num_levels, row), jnp.int32).at[depth, start].max(position,
                                                                               mode="drop")
    return start, jax.lax.cummax(marks, axis=1), overflow


def _knapsack_level(x, owner, below, _, *, row: int):
    """One level of :func:`min_error_per_size` (a ``fold_up_levels`` step): the level's row of
    packed tables ``(errors [row], holdout [row])`` from its nodes' ``x`` (errors, hold-out
    errors, start, largest, size as a leaf, split, and the children's start and largest),
    ``owner [row]`` (:func:`_packed_rows`) and the row of the level below. Returns
    ``(row, None, left_size [row])``."""
    errors, holdout, *fields = x
    own_start, own_largest, own_leaf_size, own_split, *children_at_entry = (
        jnp.stack([f.astype(jnp.int32) for f in fields], axis=1)[owner].T)
    own_errors, own_holdout = jnp.stack([errors, holdout], axis=1)[owner].T
    size = jnp.arange(row, dtype=jnp.int32) - own_start
    in_table = size <= own_largest
    leaf = jnp.where(in_table & (size == own_leaf_size), own_errors, jnp.inf)
    no_choice = jnp.full(row, -1, jnp.int32)
    if below is None:   # the deepest level: nothing is split
        return (leaf, own_holdout), None, no_choice
    entry_split = (own_split > 0) & in_table
    start_l, largest_l, start_r, largest_r = children_at_entry
    best, best_holdout, left = _min_plus_children(
        *below, size, entry_split, (start_l, largest_l), (start_r, largest_r))
    stop = ~entry_split | (leaf <= best)
    return ((jnp.where(stop, leaf, best), jnp.where(stop, own_holdout, best_holdout)), None,
            jnp.where(stop, no_choice, left))


def _min_plus_children(errors, holdout, size, split, left, right):
    """Min-plus convolution of each entry's two children tables.

    For each entry (a node v and a size s) where ``split``: the fewest
    ``errors[start_L + i] + errors[start_R + s - i]`` over the sizes i, s - i the children have,
    ties to the smallest left size i, with the hold-out sum of the same i; ``(inf, 0, -1)``
    where v has no split of size s. ``errors``, ``holdout``: the packed row of the level below;
    ``left``, ``right``: ``(start, largest)`` of each entry's children. The rounds run over the
    sizes of each entry's smaller child (``1 + max min(largest_L, largest_R)`` rounds)."""
    (start_l, largest_l), (start_r, largest_r) = left, right
    left_smaller = largest_l <= largest_r
    start_small = jnp.where(left_smaller, start_l, start_r)
    start_big = jnp.where(left_smaller, start_r, start_l)
    largest_small = jnp.minimum(largest_l, largest_r)
    largest_big = jnp.maximum(largest_l, largest_r)
    rounds = jnp.max(jnp.where(split, largest_small, -1)) + 1
    both = jnp.stack([errors, holdout], axis=1)
    last = errors.shape[0] - 1

    def one_round(k, carry):
        best, best_holdout, best_left = carry
        rest = size - k
        valid = split & (k <= largest_small) & (rest >= 0) & (rest <= largest_big)
        candidate, candidate_holdout = (both[jnp.clip(start_small + k, 0, last)] +
                                        both[jnp.clip(start_big + rest, 0, last)]).T
        left_size = jnp.where(left_smaller, k, rest)
        better = valid & ((candidate < best) | ((candidate == best) & (left_size < best_left)))
        return (jnp.where(better, candidate, best),
                jnp.where(better, candidate_holdout, best_holdout),
                jnp.where(better, left_size, best_left))

    init = (jnp.full(size.shape, jnp.inf, errors.dtype), jnp.zeros(size.shape, holdout.dtype),
            jnp.full(size.shape, -1, jnp.int32))
    return jax.lax.fori_loop(0, rounds, one_round, init)


def pruning_of_size(table: SizeTable, size, internal: Array, layout=None) -> Array:
    """Leaf mask ``[nodes]`` of the pruning :func:`min_error_per_size` chose for ``size``
    (a scalar, may be traced; it must have a pruning: ``table.errors[size]`` finite, else the
    root alone is returned), by one top-down pass over the levels (``fold_down_levels``).

    A node is reached with a target size; it is a leaf of the pruning if its choice is -1, else its
    children are reached with targets ``choice`` and ``target - choice``.

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> table = jaxtree.min_error_per_size(stats.errors, stats.total > 0, tree.internal, 4)
        >>> jaxtree.pruning_of_size(table, 3, tree.internal).tolist()
        [False, False, True, True, True, False, False]
        >>> jaxtree.pruning_of_size(table, 2, tree.internal).tolist()
        [False, True, True, False, False, False, False]
    """
    layout = resolve_layout(layout, internal)
    return _pruning_of_size(table, jnp.asarray(size, jnp.int32), layout)


@jax.jit
def _pruning_of_size(table, size, layout):
    slot = jnp.arange(layout.num_nodes)
    is_left = jnp.asarray(layout.left_child())[jnp.asarray(layout.parent_index())] == slot
    last = table.left_size.shape[1] - 1

    def step(x, left_size_row, above, parent):
        start, largest, left, root = x
        if above is None:
            target = jnp.where(root, size, -1)
        else:
            parent_target, parent_left = parent(above)
            target = jnp.where(parent_left < 0, -1,
                               jnp.where(left, parent_left, parent_target - parent_left))
        reached = target >= 0
        choice = left_size_row[jnp.clip(start + target, 0, last)]
        left_size = jnp.where(reached & (target <= largest), choice, -1)
        return (target, left_size), reached & (left_size < 0), None

    leaves, _ = layout.fold_down_levels(
        step, (table.start, table.largest, is_left, slot == 0), table.left_size)
    return leaves


def num_nonempty_leaves(stats: NodeStats, internal: Array, layout=None) -> int:
    """Number of non-empty leaves of T0 (the largest size any pruning has); a concrete int."""
    member = _membership(internal, resolve_layout(layout, internal))
    return int(_nonempty_leaf_count(stats.total > 0, internal, member))


@jax.jit
def _nonempty_leaf_count(nonempty, internal, member):
    leaf = member & ~jnp.asarray(internal, bool)
    return jnp.sum(leaf & jnp.asarray(nonempty, bool))


#: :func:`jaxtree.tree_membership` compiled once, for the functions here that need it outside
#: their own compiled code.
_membership = jax.jit(tree_membership)


@jax.jit
def srm_select(errors_per_size: Array, n, c, delta=0.05, log_num_tests=1.0) -> Array:
    """SRM choice of size (docs/theory/pruning.md):
    ``argmin_s R̂(P_s) + c·sqrt((s·log(4|H|) + log(1/δ))/n)``
    over the sizes with a pruning (ties → the smaller size).

    Args:
      errors_per_size: ``[S+1]`` (:attr:`SizeTable.errors`).
      n: sample size; c: the bound's constant (tuned; 1 is the plain bound); delta: δ;
      log_num_tests: ``log|H|`` (:func:`log_num_tests_of`).

    Returns:
      int32 scalar, the chosen size s.

    Example:
        A small constant picks the error-free size 3; the plain bound (``c=1``) on four
        points prefers a single leaf:

        >>> import numpy as np
        >>> import jaxtree
        >>> errors_per_size = np.array([np.inf, 1.0, 1.0, 0.0, 0.0])
        >>> int(jaxtree.srm_select(errors_per_size, n=4, c=0.1))
        3
        >>> int(jaxtree.srm_select(errors_per_size, n=4, c=1.0))
        1
    """
    sizes = jnp.arange(errors_per_size.shape[0], dtype=errors_per_size.dtype)
    bound = errors_per_size / n + c * jnp.sqrt(
        jnp.maximum(sizes * (jnp.log(4.0) + log_num_tests) + jnp.log(1 / delta), 0) / n)
    return jnp.argmin(jnp.where(jnp.isfinite(errors_per_size), bound, jnp.inf))


@jax.jit
def srm_holdout_errors(errors_per_size: Array, holdout_per_size: Array, num_samples: Array, c,
                       delta, log_num_tests) -> Array:
    """``[G, k]`` hold-out errors of the prunings SRM picks: for each of G settings and each of
    k size tables, the hold-out errors (:attr:`SizeTable.holdout`) at the size
    :func:`srm_select` chooses. A setting only chooses a size, so one table per sample serves
    every setting (the CV curve of min-size pruning with SRM,
    :func:`jaxtree.select.srm_grid_errors`).

    Args:
      errors_per_size, holdout_per_size: ``[k, S+1]`` the tables' ``errors`` and ``holdout``.
      num_samples: ``[k]`` each table's sample size n.
      c, delta, log_num_tests: the settings (:func:`srm_select`), each broadcastable to
        ``[G, k]`` (``[G, 1]``: per setting; ``[1, k]``: per table).
    """
    shape = (jnp.shape(c)[0], jnp.shape(num_samples)[0])
    settings = [jnp.broadcast_to(v, shape) for v in (c, delta, log_num_tests)]

    def pick(errors, holdout, n, c, delta, log_h):
        return holdout[srm_select(errors, n, c, delta, log_h)]

    per_table = jax.vmap(pick)
    return jax.vmap(per_table, in_axes=(None, None, None, 0, 0, 0))(
        errors_per_size, holdout_per_size, num_samples, *settings)


@jax.jit
def holdout_select(table: SizeTable) -> Array:
    """CV choice of size: the fewest hold-out errors among the sizes that have a pruning (ties go
    to the smaller size)."""
    return jnp.argmin(jnp.where(jnp.isfinite(table.errors), table.holdout, jnp.inf))


def min_size_srm_votes(tree: Tree, stats: NodeStats, params: dict, max_size: int):
    """Votes of the fewest-error pruning of the size SRM picks, ``params = {"c": c}``; optional
    entries ``"delta"`` (default 0.05) and ``"log_num_tests"`` (default ``log|H|`` of T0).
    ``max_size`` is static: bind it with :func:`min_size_srm_votes_for`, to a bound on the
    number of non-empty T0 leaves. The knapsack does not depend on ``c``, so under ``vmap`` over
    ``c`` it runs once."""
    table = min_error_per_size(stats.errors, stats.total > 0, tree.internal, max_size,
                               layout=tree.layout)
    log_h = params.get("log_num_tests")
    size = srm_select(table.errors, stats.num_samples, params["c"], params.get("delta", 0.05),
                      log_num_tests_of(tree) if log_h is None else log_h)
    return node_votes(tree, stats, pruning_of_size(table, size, tree.internal, tree.layout),
                      params.get("smoothing"))


@functools.lru_cache(maxsize=None)
def min_size_srm_votes_for(max_size: int):
    """:func:`min_size_srm_votes` with ``max_size`` bound: one function object per size, so that
    the model-selection code (which compiles per votes function) reuses its compilations."""
    return functools.partial(min_size_srm_votes, max_size=int(max_size))


def size_cap(stats: NodeStats, internal: Array, layout=None) -> int:
    """A static ``max_size`` for :func:`min_error_per_size`: the number of non-empty T0 leaves
    rounded up by :func:`jaxtree.shapes.padded` (at most 25 % more), so that refits at nearby
    sizes share compilations; the sizes beyond T0's non-empty leaves have no pruning (inf)."""
    return shapes.padded(num_nonempty_leaves(stats, internal, layout))


# ---------------------------------------------------------------------------------------------
# Search ranges: each penalty in units of the one that prunes T0 to its root
#: The tuned methods' penalty parameter (C1, SN: λ; KM, optimistic, min-size with SRM: c).
PENALTY = {"c1": "lam", "sn": "lam", "km": "c", "optimistic": "c", "min_size_srm": "c"}
#: The estimators' first-stage search grid relative to :func:`root_penalty`: 10 values equally
#: spaced in log from 2^-14 to 1, i.e. the paper's grid 2^linspace(-8, 6, 10) in units of
#: ``root_penalty / 64``.
RELATIVE_GRID = 2.0 ** np.linspace(-14, 0, 10)


def root_penalty(method: str, stats: NodeStats, delta=0.05, log_num_tests=1.0,
                 resample=True) -> Array:
    """A penalty at and above which ``method`` prunes T0 to its root alone (scalar).

    It gives every penalty a scale-free unit: a search range ``root_penalty · RELATIVE_GRID``
    covers the same part of each method's path (from the root down to nearly T0) at any sample
    size, whereas a fixed range does not (C1's λ is counted in training errors: the useful λ
    grows with n; SN's, KM's and optimistic pruning's slack terms grow like sqrt(n)). With
    ``E`` the root's training errors and ``n`` its points (the sample size):

    * ``"c1"``: ``λ = E`` (any pruning with s ≥ 2 non-empty leaves costs ≥ 2λ ≥ E + λ);
    * ``"sn"``: ``λ = E / sqrt(n)`` (the root's penalty is 0 at depth 0; every other pruning
      pays ``λ Σ sqrt(N_A ℓ_A) ≥ λ sqrt(n)``);
    * ``"km"``: ``c = E / sqrt(n (log|H| + log(n/δ)))`` (the root's slack, with s ≥ 1, is at
      least E);
    * ``"optimistic"``: ``c = E / sqrt(n K / r)``, ``K = 2 log(n r) + log(1/δ)``, r the
      resampling factor (:func:`optimistic_slack`);
    * ``"min_size_srm"``: ``c = E / (sqrt(n) (sqrt(2a + b) − sqrt(a + b)))``,
      ``a = log 4 + log|H|``, ``b = log(1/δ)`` (size 1 then beats every size ≥ 2 in
      :func:`srm_select`).

    These are sufficient conditions (upper bounds on the exact collapse point); ties go to the
    root. ``log_num_tests``: ``log|H|`` (:func:`log_num_tests_of`), for ``"km"`` and
    ``"min_size_srm"``. Traceable.
    """
    if method not in PENALTY:
        raise ValueError(f"method must be one of {tuple(PENALTY)}; got {method!r}")
    errors, n = stats.errors[0], jnp.maximum(stats.total[0], 1)
    dtype = errors.dtype
    if method == "c1":
        return errors
    if method == "sn":
        return errors / jnp.sqrt(n)
    if method == "km":
        return errors / jnp.sqrt(n * (log_num_tests + jnp.log(n / delta)))
    if method == "optimistic":
        k, scale = _optimistic_terms(n, jnp.zeros((), dtype), delta, resample)
        return errors / jnp.sqrt(n * k / scale)
    a, b = jnp.log(4.0) + log_num_tests, jnp.log(1.0 / delta)
    return errors / (jnp.sqrt(n) * (jnp.sqrt(2 * a + b) - jnp.sqrt(a + b)))


# ---------------------------------------------------------------------------------------------
def _leaves_of(stops: Array, internal: Array, layout) -> Array:
    """Leaf mask of the pruning whose nodes stop where ``stops`` is True: the engine's
    back-tracking with leaf cost 0 where a node stops and 1 elsewhere (every subtree then has a
    zero-cost pruning, so exactly the stopping nodes with no stopping ancestor are leaves)."""
    return best_pruning(jnp.where(stops, 0.0, 1.0), internal, layout=layout)
