"""Per-node statistics of a labelled sample on a tree (SPEC §1, "Labels").

For a node (cell) A: ``N_A`` points, ``N_{A,l}`` of class l, label ``l(A) = argmax_l N_{A,l}``
(ties to the smallest label; an empty node takes its parent's label), and ``E_A = N_A − N_{A,l(A)}``,
the training errors of A as a leaf. Everything is a pure, jittable function of arrays, so the
statistics of several folds are one ``vmap`` over sample weights.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.tree import Tree, route
from jaxtree.validation import (check_num_classes, check_points, check_sample_labels,
                                check_sample_weight)

Array = jax.Array


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["counts", "label"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class NodeStats:
    """Statistics of a sample on a tree.

    counts: ``[nodes, L]`` float, ``N_{A,l}`` (weighted counts when sample weights are given).
    label:  ``[nodes]`` int32, ``l(A)``.
    """

    counts: Array
    label: Array

    @property
    def num_classes(self) -> int:
        return self.counts.shape[1]

    @property
    def total(self) -> Array:
        """``[nodes]``: ``N_A``."""
        return self.counts.sum(axis=1)

    @property
    def errors(self) -> Array:
        """``[nodes]``: ``E_A = N_A − N_{A, l(A)}``."""
        return self.total - jnp.take_along_axis(self.counts, self.label[:, None], axis=1)[:, 0]

    @property
    def num_samples(self) -> Array:
        """Scalar ``n`` (the root's count)."""
        return self.total[0]


def node_stats(tree: Tree, X: Array, y: Array, num_classes: int,
               sample_weight: Optional[Array] = None) -> NodeStats:
    """Class counts, labels and errors of ``(X, y)`` at every node of ``tree``.

    Args:
      tree: the tree.
      X: ``[n, D]`` points.
      y: ``[n]`` int labels in ``0..num_classes-1``.
      num_classes: L (static).
      sample_weight: optional ``[n]`` weights (e.g. a 0/1 fold mask); default all ones.

    Returns:
      :class:`NodeStats` with ``counts [nodes, L]`` and ``label [nodes]``.

    Raises:
      ValueError, TypeError: on shapes that do not fit the tree, non-integer labels, X that is
        not real, and (checked when the arrays are concrete; under your own ``jit`` such points
        would silently count nowhere or go left) labels outside ``0..L-1``, NaN/inf in ``X`` or
        ``sample_weight``, negative weights.
    """
    _check_sample(tree, X, y, num_classes, sample_weight)
    return _node_stats(tree, X, y, num_classes, sample_weight)


@functools.partial(jax.jit, static_argnames="num_classes")
def _node_stats(tree, X, y, num_classes, sample_weight):
    path, on_path = route(tree, X)
    return stats_from_paths(tree, path, on_path, y, num_classes, sample_weight)


def _check_sample(tree, X, y, num_classes, sample_weight):
    check_num_classes(num_classes)
    check_points(X, tree.num_features)
    n = np.shape(X)[0]
    check_sample_labels(y, n, num_classes)
    if sample_weight is not None:
        check_sample_weight(sample_weight, n)


def stats_from_paths(tree: Tree, path: Array, on_path: Array, y: Array, num_classes: int,
                     sample_weight: Optional[Array] = None) -> NodeStats:
    """:func:`node_stats` from already routed points (``path``, ``on_path`` from :func:`route`)."""
    dtype = tree.threshold.dtype
    weight = jnp.ones(path.shape[0], dtype) if sample_weight is None else sample_weight
    contribution = on_path.astype(dtype) * weight.astype(dtype)[:, None]
    labels = jnp.broadcast_to(y[:, None], path.shape)
    counts = jnp.zeros((tree.num_nodes, num_classes), dtype)
    counts = counts.at[path.ravel(), labels.ravel()].add(contribution.ravel())
    return NodeStats(counts=counts, label=node_labels(tree, counts))


def node_labels(tree: Tree, counts: Array) -> Array:
    """``[nodes]`` int32: majority label (ties → smallest), empty nodes take their parent's.

    An empty node's parent may itself be empty (statistics of a sample other than the one that
    grew the tree), so the parent's label is propagated down level by level.
    """
    own = jnp.argmax(counts, axis=1).astype(jnp.int32)
    nonempty = counts.sum(axis=1) > 0

    def inherit(_, label):
        return jnp.where(nonempty, own, tree.layout.parent(label))

    return jax.lax.fori_loop(0, tree.num_levels, inherit, own)
