"""Helmbold–Schapire vote over all prunings (Helmbold & Schapire 1997; docs/theory/pruning.md), binary labels.

Each node A predicts the Krichevsky–Trofimov estimate ``p_A = (N_{A,1} + ½) / (N_A + 1)`` of
P(y = 1). The prior over prunings is the context-tree-weighting one: every T0-internal node of a
pruning is independently a leaf or split with probability ½ (T0-leaves are always leaves); the
likelihood is ``exp(−η Σ_{A ∈ π(T)} loss_A)``. Its up pass (docs/theory/pruning.md)::

    β(A) = ½·e^{−η loss_A} + ½·β(A_L)·β(A_R)     (A internal in T0)
    β(A) = e^{−η loss_A}                         (A a T0-leaf)

is the engine's log-semiring pass with leaf potential ``log ½ − η loss_A`` at T0-internal nodes,
``−η loss_A`` at T0-leaves, and split potential ``log ½`` at T0-internal nodes. The prediction is
``P(y = 1 | x) = Σ_{A ∈ path(x)} w(A)·p_A`` and the vote predicts 1 iff it is > ½ (the argmax
of ``(1 − P, P)``: a tie goes to class 0).

Functional path (``vmap`` over ``eta`` for a grid)::

    leaf, split = hs_potentials(stats, tree.internal, eta, layout=tree.layout)
    log_w = jaxtree.subtree_log_weights(leaf, tree.internal, split, layout=tree.layout)
    p1 = hs_vote(tree, hs_node_estimates(stats), log_w, X_test)          # [n]
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxtree.engine import subtree_log_weights, tree_membership
from jaxtree.stats import NodeStats
from jaxtree.tree import Tree, check_node_arrays, check_tree_points, route

Array = jax.Array

LOSSES = ("log", "absolute")


def hs_node_estimates(stats: NodeStats) -> Array:
    """``[nodes]`` float: ``p_A = (N_{A,1} + ½) / (N_A + 1)`` (½ at empty nodes), the
    Krichevsky–Trofimov estimate of ``P(y = 1)`` in A; binary statistics (``L = 2``).

    Example:
        The root holds one point of class 0 and three of class 1: ``3.5 / 5 = 0.7``:

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> print(np.asarray(jaxtree.hs_node_estimates(stats)).round(3))
        [0.7   0.5   0.833 0.25  0.75  0.75  0.75 ]
    """
    _check_binary(stats)
    return (stats.counts[:, 1] + 0.5) / (stats.total + 1.0)


def hs_losses(stats: NodeStats, loss: str = "log") -> Array:
    """``[nodes]``: ``loss_A`` of the node's estimate on its own points (0 at empty nodes).

    ``"log"``: ``−Σ_{i∈A} log p_A(y_i) = −N_{A,1} log p_A − N_{A,0} log(1 − p_A)``;
    ``"absolute"``: ``Σ_{i∈A} |y_i − p_A| = N_{A,1}(1 − p_A) + N_{A,0} p_A``.
    """
    p = hs_node_estimates(stats)
    ones, zeros = stats.counts[:, 1], stats.counts[:, 0]
    if loss == "log":
        return -(ones * jnp.log(p) + zeros * jnp.log1p(-p))
    if loss == "absolute":
        return ones * (1 - p) + zeros * p
    raise ValueError(f"loss must be one of {LOSSES}; got {loss!r}")


def hs_potentials(stats: NodeStats, internal: Array, eta, loss: str = "log",
                  layout=None) -> tuple[Array, Array]:
    """Leaf and split potentials ``[nodes]`` of the HS vote for :func:`jaxtree.subtree_log_weights`.

    Args:
      stats: binary training statistics.
      internal: ``[nodes]`` bool, T0.
      eta: learning rate η > 0 (1 with the log loss is the Bayes mixture, Helmbold & Schapire's
        choice for that loss; tuned in the experiments); may be traced.
      loss: ``"log"`` (the default) or ``"absolute"``.
      layout: the tree's layout (None: complete heap).

    Returns:
      ``(leaf_potential, split_potential)``, both ``[nodes]`` float: ``−η·loss_A`` (plus
      ``log ½`` where T0 splits A) and ``log ½`` where T0 splits A (0 elsewhere).

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> leaf, split = jaxtree.hs_potentials(stats, tree.internal, eta=1.0)
        >>> print(np.asarray(leaf).round(3))
        [-2.967 -2.079 -1.058 -0.288 -0.288 -0.288 -0.288]
        >>> print(np.asarray(split).round(3))
        [-0.693 -0.693 -0.693  0.     0.     0.     0.   ]
    """
    split = jnp.asarray(internal, bool)
    split = split & tree_membership(split, layout)
    half = jnp.log(0.5)
    leaf = -eta * hs_losses(stats, loss) + jnp.where(split, half, 0.0)
    return leaf, jnp.where(split, half, 0.0).astype(leaf.dtype)


def hs_log_weights(tree: Tree, stats: NodeStats, eta, loss: str = "log") -> Array:
    """``[nodes]`` float log node weights ``log w(A)`` of the HS posterior over prunings.

    :func:`jaxtree.subtree_log_weights` of :func:`hs_potentials`; ``eta`` may be traced.

    Example:
        The weights on each root-to-leaf path sum to 1:

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> log_w = jaxtree.hs_log_weights(tree, stats, eta=1.0)
        >>> print(np.exp(np.asarray(log_w)).round(3))
        [0.287 0.219 0.394 0.493 0.493 0.319 0.319]
    """
    leaf, split = hs_potentials(stats, tree.internal, eta, loss, tree.layout)
    return subtree_log_weights(leaf, tree.internal, split, layout=tree.layout)


def hs_vote(tree: Tree, estimates: Array, log_weights: Array, X: Array) -> Array:
    """``[n]``: ``P(y = 1 | x) = Σ_{A ∈ path(x)} w(A)·p_A``; the vote predicts 1 iff it is > ½
    (the argmax of ``(1 − P, P)``).

    Args:
      estimates: ``[nodes]`` p_A (:func:`hs_node_estimates`).
      log_weights: ``[nodes]`` (:func:`hs_log_weights`).
      X: ``[n, D]`` points.

    Returns:
      ``[n]`` float, ``P(y = 1 | x)``.

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> estimates = jaxtree.hs_node_estimates(stats)
        >>> log_w = jaxtree.hs_log_weights(tree, stats, eta=1.0)
        >>> print(np.asarray(jaxtree.hs_vote(tree, estimates, log_w, X)).round(3))
        [0.434 0.681 0.768 0.768]
    """
    check_tree_points(tree, X)  # values too, before tracing
    return _hs_vote(tree, estimates, log_weights, X)


@jax.jit
def _hs_vote(tree, estimates, log_weights, X):
    check_node_arrays(tree, estimates=estimates, log_weights=log_weights)
    path, on_path = route(tree, X)
    weight = jnp.where(on_path, jnp.exp(log_weights[path]), 0.0)
    return jnp.sum(weight * estimates[path], axis=1)


def hs_votes(tree: Tree, stats: NodeStats, params: dict, loss: str = "log") -> Array:
    """Node votes ``[nodes, 2]``: ``w(A)·(1 − p_A, p_A)`` with ``params = {"eta": η}`` (log loss);
    summed along a point's root-to-leaf path they are its class scores (model-selection form)."""
    p = hs_node_estimates(stats)
    weight = jnp.exp(hs_log_weights(tree, stats, params["eta"], loss))
    return weight[:, None] * jnp.stack([1 - p, p], axis=1)


def hs_absolute_votes(tree: Tree, stats: NodeStats, params: dict) -> Array:
    """:func:`hs_votes` with the absolute loss."""
    return hs_votes(tree, stats, params, "absolute")


def _check_binary(stats: NodeStats):
    if stats.num_classes != 2:
        raise ValueError(
            f"the Helmbold–Schapire vote needs binary labels (node estimates of P(y = 1)); got "
            f"{stats.num_classes} classes. Use PACBayesTreeClassifier or PrunedTreeClassifier for "
            "multiclass problems")
