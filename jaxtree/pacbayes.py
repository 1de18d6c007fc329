"""The PAC-Bayes tree (Nguyen & Kpotufe 2018; docs/theory/pacbayes.md): potentials φ(A) and the weighted vote.

Functional path (all pure and jittable; ``vmap`` over ``lam1``/``lam2`` for a grid)::

    tree  = jaxtree.kd_tree(X, max_depth=12, y=y)
    stats = jaxtree.node_stats(tree, X, y, num_classes)
    log_w = jaxtree.pacbayes_log_weights(tree, stats, lam1, lam2)
    node_proba = jaxtree.class_frequencies(tree, stats.counts, 0.5)          # [nodes, L]
    proba = jaxtree.posterior_predictive(tree, node_proba, log_w, X_test)    # [n_test, L]
    hard  = jaxtree.vote(tree, stats.label, log_w, X_test, num_classes)      # the paper's vote

The posterior predictive averages the pruning leaves' smoothed class frequencies under the
posterior over prunings: probabilities that can be ranked, thresholded and averaged. The vote of
hard node labels (the paper's ``h_Q``) is mostly 0 or 1 once λ is tuned; it is kept for the
paper's Table 2 (``docs/theory/pacbayes.md``, "Probabilities: the posterior predictive").

The weights come from the local offsets of the potentials (:mod:`jaxtree.engine`), formed here
from the counts: ``δ(A) = φ(A_L) + φ(A_R) − φ(A)`` is
``−λ1·(E_L + E_R − E_A) − λ2·(√N_L + √N_R − √N_A) − (1[N_L>0] + 1[N_R>0] − 1[N_A>0])``, whose
error difference is an exact integer, rather than the difference of potentials of size
``λ1·E_A`` (≈ 3e7 at the root for 10⁶ noisy points at λ1 = 64, where float32 rounds at 2).
``pacbayes_potentials`` + :func:`jaxtree.subtree_log_weights` give the same weights up to that
rounding.

Two readings of the practical penalty:

* ``"practical"`` (the paper's, Nguyen & Kpotufe 2018, Sec. 5):
  ``φ(A) = −λ1·E_A − λ2·sqrt(N_A) − 1[N_A > 0]``;
* ``"authors"`` (the authors' public code): the penalty grows with the depth ℓ_A of A (root 0),
  ``φ(A) = −λ1·E_A − λ2·sqrt(8·ℓ_A·max(N_A, ℓ_A)) − 1[N_A > 0]`` (their
  ``λ_pen·n·sqrt(2·p̃·ℓ/n)`` with ``p̃ = 4·max(N_A/n, ℓ/n)``), 0 at empty nodes. The root costs
  nothing beyond its errors, and a node's penalty grows like ``sqrt(ℓ_A·N_A)``: deep cells pay
  more than in the paper's reading, where the penalty of a pruning is ``Σ sqrt(N_A)`` whatever the
  depth. (The code names the two constants λ_err and λ_pen: they are ``lam1`` and ``lam2`` here.)
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.engine import child_values, log_weights_from_offsets, tree_membership
from jaxtree.layout import root_path_sum
from jaxtree.stats import NodeStats, class_frequencies
from jaxtree.tree import Tree, check_node_arrays, check_tree_points, route
from jaxtree.validation import check_finite, check_num_classes, check_real

Array = jax.Array


@jax.jit
def pacbayes_potentials(stats: NodeStats, lam1, lam2, prior_stats=None) -> Array:
    """Practical leaf potentials (docs/theory/pacbayes.md): ``φ(A) = −λ1·E_A − λ2·sqrt(N_A) − 1[N_A > 0]``.

    Jitted: run eagerly, its half-dozen jnp ops would each compile for every new tree shape.

    Args:
      stats: node statistics of the training sample.
      lam1, lam2: scalars > 0 (traced values are fine: ``vmap``/``grad`` over them).
      prior_stats: the statistics of the sample S0 that T0 and the practical prior come from
        when it is not the training sample (``certify``): the leaf cost is then ``1[A holds
        points of S0]``, the prior's own, so that the posterior is the prior times
        ``e^{−λ1·E − λ2·√N}`` (docs/theory/pacbayes.md, "The certificate"). None: ``stats``.

    Returns:
      ``[nodes]`` float (the dtype of ``stats.counts``); 0 at nodes empty in both samples.

    Example:
        The root (3 of class 1, 1 of class 0): ``−1 − √4 − 1 = −4``:

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2, y=y)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> print(np.asarray(jaxtree.pacbayes_potentials(stats, 1.0, 1.0)).round(3))
        [-4.    -3.414 -2.414 -2.    -2.     0.     0.   ]
    """
    occupied = _occupied(stats, prior_stats)
    leaf_cost = occupied.astype(stats.counts.dtype)
    phi = -lam1 * stats.errors - lam2 * jnp.sqrt(stats.total) - leaf_cost
    return jnp.where(occupied | (stats.total > 0), phi, 0.0)


def pacbayes_authors_potentials(tree: Tree, stats: NodeStats, lam1, lam2) -> Array:
    """Leaf potentials of the authors' public code (module docstring):
    ``φ(A) = −λ1·E_A − λ2·sqrt(8·ℓ_A·max(N_A, ℓ_A)) − 1[N_A > 0]``, 0 at empty nodes.

    Args:
      tree: T0 (``node_depth`` gives ℓ_A).
      stats: node statistics of the training sample.
      lam1, lam2: scalars > 0 (λ_err and λ_pen of the code; traced values are fine).

    Returns:
      ``[nodes]`` float.
    """
    total = stats.total
    phi = -lam1 * stats.errors - lam2 * _authors_penalty(tree, total) - 1.0
    return jnp.where(total > 0, phi, 0.0)


def pacbayes_theory_potentials(tree: Tree, stats: NodeStats, lam, delta=0.05) -> Array:
    """Theory leaf potentials (Theorem 1, docs/theory/pacbayes.md):
    ``φ(A) = −λ·E_A − λ·n·sqrt(2·p̂(A)·log(|T0|/δ)/n) − 3·D0`` at every node of T0, empty ones
    too (``−3·D0``: the prior ``e^{−3·D0·|π(T)|}`` counts every leaf, so the posterior is that
    prior times the data term); 0 off T0.

    ``|T0|`` is the number of nodes of T0 and ``D0`` its depth: the deepest level that holds a
    node of T0, not the layout's (a layout padded to a shared shape has more levels).

    Args:
      tree: T0 (for ``|T0|`` and ``D0``).
      stats: node statistics of the training sample.
      lam: scalar λ > 0. delta: confidence δ in (0, 1).

    Returns:
      ``[nodes]`` float (the dtype of ``stats.counts``).

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2, y=y)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> phi = jaxtree.pacbayes_theory_potentials(tree, stats, lam=1.0)
        >>> print(np.asarray(phi).round(3))
        [-13.07  -11.292 -10.292  -9.035  -9.035   0.      0.   ]
    """
    n = stats.num_samples
    p_hat = stats.total / n
    penalty = lam * n * jnp.sqrt(2 * p_hat * _theory_log_term(tree, delta) / n)
    phi = -lam * stats.errors - penalty - 3.0 * _deepest_level(tree)
    return jnp.where(_in_tree(tree), phi, 0.0)


def pacbayes_offsets(tree: Tree, stats: NodeStats, lam1, lam2, prior_stats=None) -> Array:
    """``[nodes]`` local offsets ``δ(A) = φ(A_L) + φ(A_R) − φ(A)`` of :func:`pacbayes_potentials`
    from the counts (0 where T0 does not split A): the input of
    :func:`jaxtree.log_weights_from_offsets` and :func:`jaxtree.pruning_process_from_offsets`.

    ``E_L + E_R − E_A`` is formed from the error counts (an exact integer for integer counts
    below 2**24 in float32) and ``√N_L + √N_R − √N_A`` without cancellation, so δ carries a few
    roundings of its own size, not of ``λ1·E_A``.

    Args:
      tree: T0. stats: its training statistics. lam1, lam2: scalars (may be traced).
      prior_stats: as in :func:`pacbayes_potentials` (None: ``stats``).

    Returns:
      ``[nodes]`` float (the dtype of ``stats.counts``).

    Example:
        At the root: ``φ(1) + φ(2) − φ(0) = −3.414 − 2.414 + 4``:

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2, y=y)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> print(np.asarray(jaxtree.pacbayes_offsets(tree, stats, 1.0, 1.0)).round(3))
        [-1.828 -0.586  0.     0.     0.     0.     0.   ]
    """
    return _count_offsets(tree, stats, lam1, lam2, 1.0, prior_stats)


def pacbayes_theory_offsets(tree: Tree, stats: NodeStats, lam, delta=0.05) -> Array:
    """``[nodes]`` local offsets of :func:`pacbayes_theory_potentials`, from the counts as in
    :func:`pacbayes_offsets` (its penalty is ``λ·sqrt(2·log(|T0|/δ))·√N_A``).

    Arguments as :func:`pacbayes_theory_potentials`; ``[nodes]`` float result.

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2, y=y)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> offsets = jaxtree.pacbayes_theory_offsets(tree, stats, lam=1.0)
        >>> print(np.asarray(offsets).round(3))
        [-8.514 -6.778  0.     0.     0.     0.     0.   ]
    """
    return _count_offsets(tree, stats, *_theory_coefficients(tree, lam, delta),
                          every_leaf=True)


def pacbayes_authors_offsets(tree: Tree, stats: NodeStats, lam1, lam2) -> Array:
    """``[nodes]`` local offsets of :func:`pacbayes_authors_potentials` (the error change from the
    counts, as in :func:`pacbayes_offsets`)."""
    return _authors_offsets(tree, stats, lam1, lam2)


def pacbayes_authors_log_weights(tree: Tree, stats: NodeStats, lam1, lam2) -> Array:
    """``[nodes]`` log node weights with the authors' potentials."""
    return _authors_log_weights(tree, stats, lam1, lam2)


def pacbayes_log_weights(tree: Tree, stats: NodeStats, lam1, lam2, leaf_cost=1.0,
                         prior_stats=None) -> Array:
    """``[nodes]`` log node weights of the PAC-Bayes posterior with the practical potentials
    (from :func:`pacbayes_offsets`).

    Args:
      tree: T0. stats: its training statistics (:func:`jaxtree.node_stats`).
      lam1, lam2: scalars > 0, λ1 and λ2 (may be traced: ``vmap`` / ``grad`` over them).
      leaf_cost: the prior's cost of a non-empty leaf (the 1 of ``−1[N_A > 0]``; another
        constant to tune, e.g. by gradient).
      prior_stats: as in :func:`pacbayes_potentials` (None: ``stats``).

    Returns:
      ``[nodes]`` float ``log w(A)`` (``-inf`` off T0), the input of :func:`vote`.

    Example:
        The weights on each root-to-leaf path sum to 1 (0.8 + 0.2 on the right):

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2, y=y)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> log_w = jaxtree.pacbayes_log_weights(tree, stats, 1.0, 1.0)
        >>> print(np.exp(np.asarray(log_w)).round(3))
        [0.8   0.129 0.2   0.072 0.072 0.    0.   ]
    """
    return _weights_from_counts(tree, stats, lam1, lam2, leaf_cost, prior_stats)


def pacbayes_theory_log_weights(tree: Tree, stats: NodeStats, lam, delta=0.05) -> Array:
    """``[nodes]`` log node weights with the theory potentials (from
    :func:`pacbayes_theory_offsets`).

    Arguments as :func:`pacbayes_theory_potentials`; ``[nodes]`` float ``log w(A)``.

    Example:
        On four points the theory's penalty leaves all the weight on the root:

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2, y=y)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> log_w = jaxtree.pacbayes_theory_log_weights(tree, stats, lam=1.0)
        >>> print(np.exp(np.asarray(log_w)).round(3))
        [1. 0. 0. 0. 0. 0. 0.]
    """
    return _weights_from_counts(tree, stats, *_theory_coefficients(tree, lam, delta),
                                every_leaf=True)


def _theory_log_term(tree: Tree, delta):
    """``log(|T0| / δ)``."""
    return jnp.log(tree_membership(tree.internal, tree.layout).sum() / delta)


def _deepest_level(tree: Tree):
    """D0: the deepest level holding a node of T0 (not the layout's depth, which padding to a
    shared shape may raise)."""
    in_tree = tree_membership(tree.internal, tree.layout)
    return jnp.max(jnp.where(in_tree, tree.node_depth, 0))


def _theory_coefficients(tree: Tree, lam, delta):
    """The theory potentials as ``−a·E_A − b·√N_A − c`` (``c`` at every node of T0):
    ``(a, b, c)`` (``λ·n·sqrt(2·(N/n)·L/n) = λ·sqrt(2·L)·√N``)."""
    return lam, lam * jnp.sqrt(2 * _theory_log_term(tree, delta)), 3.0 * _deepest_level(tree)


def _occupied(stats: NodeStats, prior_stats=None) -> Array:
    """``[nodes]`` bool: the nodes that pay the practical leaf cost, those holding points of
    ``prior_stats`` (S0, which the practical prior counts) or else of ``stats``."""
    return (stats if prior_stats is None else prior_stats).total > 0


def _in_tree(tree: Tree) -> Array:
    """``[nodes]`` bool: the nodes of T0, every one of which pays the theory reading's leaf cost
    (its prior ``e^{−3·D0·|π(T)|}`` counts every leaf)."""
    return tree_membership(tree.internal, tree.layout)


@functools.partial(jax.jit, static_argnames="every_leaf")
def _count_offsets(tree: Tree, stats: NodeStats, error_weight, root_weight, leaf_weight,
                   prior_stats=None, every_leaf=False):
    """``δ`` of ``φ = −error_weight·E − root_weight·√N − leaf_weight·1[A pays the leaf cost]``:
    every node of T0 with ``every_leaf`` (:func:`_in_tree`, the theory prior's), else the
    occupied ones (:func:`_occupied`, the practical prior's)."""
    errors, total = stats.errors, stats.total
    pays = _in_tree(tree) if every_leaf else _occupied(stats, prior_stats)
    paying = pays.astype(errors.dtype)
    (errors_l, total_l, paying_l), (errors_r, total_r, paying_r) = child_values(
        (errors, total, paying), tree.layout)
    error_change = (errors_l + errors_r) - errors
    leaf_change = paying_l + paying_r - paying
    offset = (-error_weight * error_change - root_weight * _root_gain(total_l, total_r, total)
              - leaf_weight * leaf_change)
    return jnp.where(tree.internal, offset, 0)


def _authors_penalty(tree: Tree, total: Array) -> Array:
    """``sqrt(8·ℓ_A·max(N_A, ℓ_A))`` where ``N_A > 0``, else 0 (``[nodes]``)."""
    depth = tree.node_depth.astype(total.dtype)
    return jnp.where(total > 0, jnp.sqrt(8 * depth * jnp.maximum(total, depth)), 0)


@jax.jit
def _authors_offsets(tree: Tree, stats: NodeStats, lam1, lam2):
    errors, total = stats.errors, stats.total
    penalty = _authors_penalty(tree, total)
    (errors_l, total_l, pen_l), (errors_r, total_r, pen_r) = child_values(
        (errors, total, penalty), tree.layout)
    nonempty_change = ((total_l > 0).astype(errors.dtype) + (total_r > 0).astype(errors.dtype)
                       - (total > 0).astype(errors.dtype))
    offset = (-lam1 * ((errors_l + errors_r) - errors) - lam2 * ((pen_l + pen_r) - penalty)
              - nonempty_change)
    return jnp.where(tree.internal, offset, 0)


@jax.jit
def _authors_log_weights(tree, stats, lam1, lam2):
    return log_weights_from_offsets(_authors_offsets(tree, stats, lam1, lam2), tree.internal,
                                    tree.layout)


@functools.partial(jax.jit, static_argnames="every_leaf")
def _weights_from_counts(tree, stats, error_weight, root_weight, leaf_weight, prior_stats=None,
                         every_leaf=False):
    """Log weights from :func:`_count_offsets`, as one program."""
    offset = _count_offsets(tree, stats, error_weight, root_weight, leaf_weight, prior_stats,
                            every_leaf)
    return log_weights_from_offsets(offset, tree.internal, tree.layout)


def _root_gain(left, right, parent):
    """``√L + √R − √P`` as ``(L + R − P + 2·√L·√R) / (√L + √R + √P)`` (0 when all three are 0):
    no difference of two square roots of size ``√P`` (``L + R − P`` is 0 for counts of a split)."""
    root_l, root_r, root_p = jnp.sqrt(left), jnp.sqrt(right), jnp.sqrt(parent)
    denominator = root_l + root_r + root_p
    numerator = (left + right - parent) + 2 * root_l * root_r
    return jnp.where(denominator > 0, numerator / jnp.where(denominator > 0, denominator, 1), 0)


def vote(tree: Tree, label: Array, log_weights: Array, X: Array, num_classes: int) -> Array:
    """Class scores of the paper's weighted-majority vote of hard node labels (Nguyen & Kpotufe
    2018, Sec. 3; the scores of its Table 2).

    ``s_l(x) = Σ_{A ∈ path(x)} w(A)·1[l(A) = l]``: the scores sum to 1 and their argmax is
    ``h_Q(x)``. Once λ is tuned the weight sits on few nodes and the scores are mostly 0 or 1;
    :func:`posterior_predictive` gives probabilities (``docs/theory/pacbayes.md``).

    Args:
      tree: the tree.
      label: ``[nodes]`` int, node labels ``l(A)`` (``stats.label``).
      log_weights: ``[nodes]`` from :func:`jaxtree.subtree_log_weights`.
      X: ``[n, D]`` points.
      num_classes: L (static under jit).

    Returns:
      ``[n, L]`` float scores (the dtype of ``log_weights``).

    Example:
        Points 0 and 1 get weight 0.2 (0.129) for class 0 from the root-path nodes labelled 0:

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2, y=y)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> log_w = jaxtree.pacbayes_log_weights(tree, stats, 1.0, 1.0)
        >>> scores = jaxtree.vote(tree, stats.label, log_w, X, num_classes=2)
        >>> print(np.asarray(scores).round(3))
        [[0.2   0.8  ]
         [0.129 0.871]
         [0.    1.   ]
         [0.    1.   ]]
    """
    check_num_classes(num_classes)
    check_tree_points(tree, X)  # values too, before tracing
    return _vote(tree, label, log_weights, X, num_classes)


@functools.partial(jax.jit, static_argnames="num_classes")
def _vote(tree, label, log_weights, X, num_classes):
    check_node_arrays(tree, label=label, log_weights=log_weights)
    path, on_path = route(tree, X)
    return scores_from_paths(path, on_path, label, log_weights, num_classes)


def scores_from_paths(path: Array, on_path: Array, label: Array, log_weights: Array,
                      num_classes: int) -> Array:
    """Vote scores ``[n, L]`` from routed points (``path``, ``on_path`` ``[n, levels]``).

    :func:`vote` after :func:`jaxtree.route`: for scoring the same routed points under many
    weights (e.g. a ``vmap`` over λ) without routing them again.

    Args:
      path, on_path: ``[n, levels]`` int32 and bool, from :func:`jaxtree.route`.
      label: ``[nodes]`` int node labels. log_weights: ``[nodes]`` float.
      num_classes: L.

    Returns:
      ``[n, L]`` float scores.

    Example:
        Scores of point 0 under two settings of λ1, in one ``vmap`` (a larger λ1 trusts the
        deeper nodes, where point 0 is in a leaf of class 0):

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2, y=y)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> import jax
        >>> path, on_path = jaxtree.route(tree, X[:1])
        >>> log_w = jax.vmap(lambda lam1: jaxtree.pacbayes_log_weights(tree, stats, lam1, 1.0))(
        ...     np.array([1.0, 4.0]))
        >>> scores = jax.vmap(lambda w: jaxtree.scores_from_paths(path, on_path, stats.label, w, 2)
        ...                   )(log_w)
        >>> print(np.asarray(scores[:, 0]).round(3))
        [[0.2   0.8  ]
         [0.662 0.338]]
    """
    return predictive_from_paths(path, on_path, jax.nn.one_hot(label, num_classes,
                                                               dtype=log_weights.dtype),
                                 log_weights)


def posterior_predictive(tree: Tree, node_proba: Array, log_weights: Array, X: Array) -> Array:
    """Class probabilities of the posterior over prunings: the posterior predictive
    ``p(l | x) = Σ_{A ∈ path(x)} w(A)·p̂(l | A)``.

    Each pruning predicts at ``x`` the class distribution ``p̂(· | A)`` of its leaf A that
    contains ``x``; averaged under the posterior Q over prunings, the leaf A gets its weight
    ``w(A)`` (``docs/theory/pacbayes.md``). With ``node_proba`` the one-hot rows of the node
    labels this is :func:`vote`. Rows sum to 1; their entries lie strictly inside (0, 1) when
    ``node_proba``'s do (:func:`jaxtree.class_frequencies` with smoothing > 0).

    Args:
      tree: the tree.
      node_proba: ``[nodes, L]`` class distributions of the nodes
        (:func:`jaxtree.class_frequencies`).
      log_weights: ``[nodes]`` from :func:`jaxtree.subtree_log_weights` (or a pruning's:
        0 at its leaves, −inf elsewhere).
      X: ``[n, D]`` points.

    Returns:
      ``[n, L]`` float probabilities.
    """
    check_tree_points(tree, X)  # values too, before tracing
    shape = np.shape(node_proba)
    if len(shape) != 2 or shape[0] != tree.num_nodes:
        raise ValueError(f"node_proba must be [nodes, L] = [{tree.num_nodes}, L] for this tree; "
                         f"got shape {shape}")
    check_real(node_proba, "node_proba")
    check_finite(node_proba, "node_proba")
    return _posterior_predictive(tree, node_proba, log_weights, X)


@jax.jit
def _posterior_predictive(tree, node_proba, log_weights, X):
    check_node_arrays(tree, log_weights=log_weights)
    path, on_path = route(tree, X)
    return predictive_from_paths(path, on_path, node_proba, log_weights)


def predictive_from_paths(path: Array, on_path: Array, node_proba: Array,
                          log_weights: Array) -> Array:
    """:func:`posterior_predictive` ``[n, L]`` of routed points (``path``, ``on_path``
    ``[n, levels]`` from :func:`jaxtree.route`)."""
    weight = jnp.where(on_path, jnp.exp(log_weights[path]), 0.0)
    return jnp.einsum("nk,nkl->nl", weight, node_proba[path].astype(weight.dtype))


def node_predictive(tree: Tree, node_proba: Array, log_weights: Array) -> Array:
    """``[nodes, L]`` the posterior predictive of a point whose leaf in T0 is each node:
    ``Σ_{B on the root path of A, A included} w(B)·p̂(· | B)``, one top-down pass
    (``layout.path_sum``) instead of a sum along each point's path. A point's row is this at
    its deepest ``path`` entry (:func:`jaxtree.route` repeats the leaf): the same numbers as
    :func:`predictive_from_paths` up to the order of the sum.

    ``log_weights`` ``[nodes]``, or ``[nodes, G]`` the weights of G posteriors (e.g. a λ grid)
    at once: ``[nodes, L, G]``, one pass whose rows are contiguous (a forest's out-of-bag grid:
    0.39 s against 0.42 s for a ``vmap`` over the settings, 100 letter trees)."""
    batch = log_weights.ndim - 1
    weight = jnp.exp(log_weights)[:, None]
    proba = node_proba.astype(log_weights.dtype).reshape(node_proba.shape + (1,) * batch)
    contribution = weight * proba
    return root_path_sum(tree.layout, contribution)


def node_votes(tree: Tree, stats: NodeStats, weight: Array, smoothing=None):
    """Node votes (the form of :func:`jaxtree.select.point_scores`) of per-node weights.

    ``smoothing`` None: the hard-label vote, the pair ``(weight [nodes], l(A) [nodes])``;
    a number α ≥ 0: the posterior predictive, ``[nodes, L]`` rows ``weight(A)·p̂(· | A)`` with
    ``p̂`` the class frequencies smoothed by α (:func:`jaxtree.class_frequencies`). ``weight``:
    ``[nodes]`` node weights ``w(A)``, or a pruning's leaf mask (bool is cast).
    """
    weight = weight.astype(stats.counts.dtype)
    if smoothing is None:
        return weight, stats.label
    return weight[:, None] * class_frequencies(tree, stats.counts, smoothing)

