"""The PAC-Bayes tree (Nguyen & Kpotufe 2018; SPEC §2): potentials φ(A) and the weighted vote.

Functional path (all pure and jittable; ``vmap`` over ``lam1``/``lam2`` for a grid)::

    tree  = jaxtree.kd_tree(X, max_depth=12, y=y)
    stats = jaxtree.node_stats(tree, X, y, num_classes)
    phi   = jaxtree.pacbayes_potentials(stats, lam1, lam2)
    log_w = jaxtree.subtree_log_weights(phi, tree.internal, layout=tree.layout)
    proba = jaxtree.vote(tree, stats.label, log_w, X_test, num_classes)  # [n_test, L]
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxtree.engine import subtree_log_weights, tree_membership
from jaxtree.stats import NodeStats
from jaxtree.tree import Tree, check_node_arrays, route
from jaxtree.validation import check_num_classes, check_points

Array = jax.Array


def pacbayes_potentials(stats: NodeStats, lam1, lam2) -> Array:
    """Practical leaf potentials (SPEC §2): ``φ(A) = −λ1·E_A − λ2·sqrt(N_A) − 1[N_A > 0]``.

    Args:
      stats: node statistics of the training sample.
      lam1, lam2: scalars > 0 (traced values are fine: ``vmap``/``grad`` over them).

    Returns:
      ``[nodes]`` float; 0 at empty nodes.
    """
    total = stats.total
    phi = -lam1 * stats.errors - lam2 * jnp.sqrt(total) - 1.0
    return jnp.where(total > 0, phi, 0.0)


def pacbayes_theory_potentials(tree: Tree, stats: NodeStats, lam, delta=0.05) -> Array:
    """Theory leaf potentials (Theorem 1, SPEC §2):
    ``φ(A) = −λ·E_A − λ·n·sqrt(2·p̂(A)·log(|T0|/δ)/n) − 3·D0``, 0 at empty nodes.

    ``|T0|`` is the number of nodes of T0 and ``D0`` its depth.
    """
    n = stats.num_samples
    total = stats.total
    size = tree_membership(tree.internal, tree.layout).sum()
    p_hat = total / n
    penalty = lam * n * jnp.sqrt(2 * p_hat * jnp.log(size / delta) / n)
    phi = -lam * stats.errors - penalty - 3.0 * tree.depth
    return jnp.where(total > 0, phi, 0.0)


def vote(tree: Tree, label: Array, log_weights: Array, X: Array, num_classes: int) -> Array:
    """Class scores of the weighted-majority vote (SPEC §2, "Prediction").

    ``s_l(x) = Σ_{A ∈ path(x)} w(A)·1[l(A) = l]``: the scores sum to 1 and serve as
    ``predict_proba``; their argmax is ``h_Q(x)``.

    Args:
      tree: the tree.
      label: ``[nodes]`` int, node labels ``l(A)`` (``stats.label``).
      log_weights: ``[nodes]`` from :func:`jaxtree.subtree_log_weights`.
      X: ``[n, D]`` points.
      num_classes: L (static under jit).

    Returns:
      ``[n, L]`` float scores.
    """
    check_num_classes(num_classes)
    check_points(X, tree.num_features)  # values too, before tracing
    return _vote(tree, label, log_weights, X, num_classes)


@functools.partial(jax.jit, static_argnames="num_classes")
def _vote(tree, label, log_weights, X, num_classes):
    check_node_arrays(tree, label=label, log_weights=log_weights)
    path, on_path = route(tree, X)
    return scores_from_paths(path, on_path, label, log_weights, num_classes)


def scores_from_paths(path: Array, on_path: Array, label: Array, log_weights: Array,
                      num_classes: int) -> Array:
    """Vote scores ``[n, L]`` from routed points (``path``, ``on_path`` ``[n, levels]``)."""
    weight = jnp.where(on_path, jnp.exp(log_weights[path]), 0.0)
    votes = jax.nn.one_hot(label[path], num_classes, dtype=weight.dtype)
    return jnp.einsum("nk,nkl->nl", weight, votes)


def pacbayes_log_weights(tree: Tree, stats: NodeStats, lam1, lam2) -> Array:
    """``[nodes]`` log node weights of the PAC-Bayes posterior with the practical potentials."""
    phi = pacbayes_potentials(stats, lam1, lam2)
    return subtree_log_weights(phi, tree.internal, layout=tree.layout)

