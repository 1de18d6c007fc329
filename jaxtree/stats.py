"""Per-node statistics of a labelled sample on a tree (docs/theory/trees.md).

For a node (cell) A: ``N_A`` points, ``N_{A,l}`` of class l, label ``l(A) = argmax_l N_{A,l}``
(ties to the smallest label; an empty node takes its parent's label), and ``E_A = N_A − N_{A,l(A)}``,
the training errors of A as a leaf. Everything is a pure, jittable function of arrays, so the
statistics of several folds are one ``vmap`` over sample weights.

**In chunks.** Counts are sums over rows, so a sample too large for device memory is counted a
chunk at a time (:func:`count_chunks`): ``node_stats(..., chunk_size=k)`` on an array or a
``numpy.memmap`` (memory-mapped files are chunked by default), or :func:`node_stats_from_chunks`
on any iterable of ``(X, y)`` / ``(X, y, sample_weight)`` chunks. Every chunk is padded with
weight-0 rows to a power of two (one compilation per size), counted on the device (exact in
float32 while a chunk holds under 2^24 rows) and added on the host in float64.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Iterable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.tree import Tree, check_tree_points, route
from jaxtree.validation import (check_num_classes, check_sample_labels,
                                check_sample_weight, is_traced)

Array = jax.Array

#: Rows per chunk of a memory-mapped sample when no ``chunk_size`` is given.
DEFAULT_CHUNK_ROWS = 2 ** 16
#: Rows whose counts a float of this many bytes accumulates exactly, one at a time.
EXACT_ROWS = {4: 2 ** 24, 8: 2 ** 53}
_MIN_CHUNK_ROWS = 1024


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["counts", "label"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class NodeStats:
    """Statistics of a sample on a tree (a pytree, from :func:`node_stats`).

    Attributes:
      counts: ``[nodes, L]`` float (float32, or float64 with x64), ``N_{A,l}``: the number of
        points of class l in node A (weighted counts when sample weights are given).
      label: ``[nodes]`` int32, ``l(A)``, the majority class of A (ties to the smaller class;
        an empty node takes its parent's label).

    The properties ``total`` (``[nodes]``, ``N_A``), ``errors`` (``[nodes]``,
    ``E_A = N_A − N_{A, l(A)}``), ``num_samples`` (scalar, the root's count) and
    ``num_classes`` (L) derive from them.

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2, y=y)
        >>> stats = jaxtree.node_stats(tree, X, y, num_classes=2)
        >>> stats.counts.tolist()[:3]
        [[1.0, 3.0], [1.0, 1.0], [0.0, 2.0]]
        >>> stats.label.tolist(), stats.errors.tolist(), stats.num_classes
        ([1, 0, 1, 0, 1, 1, 1], [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0], 2)
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
               sample_weight: Optional[Array] = None,
               chunk_size: Optional[int] = None) -> NodeStats:
    """Class counts, labels and errors of ``(X, y)`` at every node of ``tree``.

    Args:
      tree: the tree.
      X: ``[n, D]`` points.
      y: ``[n]`` int labels in ``0..num_classes-1``.
      num_classes: L (static).
      sample_weight: optional ``[n]`` weights (e.g. a 0/1 fold mask); default all ones.
      chunk_size: count ``chunk_size`` rows at a time (bounded device memory; module docstring);
        default: all rows at once, or :data:`DEFAULT_CHUNK_ROWS` for a ``numpy.memmap`` and for
        more rows than the float dtype counts exactly one by one (2^24 in float32: a float32
        sum of ones stops growing at 2^24; the chunks' counts are added in float64).

    Returns:
      :class:`NodeStats` with ``counts [nodes, L]`` and ``label [nodes]``.

    Raises:
      ValueError, TypeError: on shapes that do not fit the tree, non-integer labels, X that is
        not real, and (checked when the arrays are concrete; under your own ``jit`` such points
        would silently count nowhere or go left) labels outside ``0..L-1``, NaN/inf in ``X`` or
        ``sample_weight``, negative weights.

    Example:
        A weight of 2 on the first point:

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2, y=y)
        >>> stats = jaxtree.node_stats(tree, X, y, 2, sample_weight=np.array([2.0, 1, 1, 1]))
        >>> stats.counts.tolist()[:3], stats.label.tolist()[:3]
        ([[2.0, 3.0], [2.0, 1.0], [0.0, 2.0]], [1, 0, 1])
    """
    _check_sample(tree, X, y, num_classes, sample_weight)
    if chunk_size is None and (isinstance(X, np.memmap) or (
            not any(map(is_traced, (X, y, sample_weight)))
            and np.shape(X)[0] > EXACT_ROWS[np.dtype(tree.threshold.dtype).itemsize])):
        chunk_size = DEFAULT_CHUNK_ROWS
    if chunk_size is None:
        return _node_stats(tree, X, y, num_classes, sample_weight)
    counts = count_chunks(tree, row_chunks(chunk_size, X, y, sample_weight), num_classes)
    return stats_from_counts(tree, counts)


def node_stats_from_chunks(tree: Tree, chunks: Iterable, num_classes: int) -> NodeStats:
    """:func:`node_stats` of the rows of ``chunks``: an iterable of ``(X, y)`` or
    ``(X, y, sample_weight)`` (``[k, D]`` real, ``[k]`` int, ``[k]`` float; k may vary), read
    once: for data that does not fit in memory at once (a generator reading a file).

    Returns:
      :class:`NodeStats` equal to :func:`node_stats` of all rows.

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2, y=y)
        >>> chunks = ((X[i:i + 3], y[i:i + 3]) for i in range(0, 4, 3))
        >>> jaxtree.node_stats_from_chunks(tree, chunks, 2).counts.tolist()[:3]
        [[1.0, 3.0], [1.0, 1.0], [0.0, 2.0]]
    """
    return stats_from_counts(tree, count_chunks(tree, chunks, num_classes))


def stats_from_counts(tree: Tree, counts) -> NodeStats:
    """:class:`NodeStats` of class counts ``[nodes, L]`` (cast to the tree's float dtype)."""
    return _counted_stats(tree, jnp.asarray(np.asarray(counts), tree.threshold.dtype))


def counted_stats(tree: Tree, counts: Array) -> NodeStats:
    """:class:`NodeStats` of class counts ``[nodes, L]`` already counted (by a builder's
    histograms, paths, or a sum over holders): the labels are :func:`node_labels`'. Traceable."""
    return NodeStats(counts=counts, label=node_labels(tree, counts))


def row_chunks(chunk_size: int, *arrays):
    """Yield tuples of consecutive ``chunk_size``-row slices of ``arrays`` (None stays None),
    read as NumPy arrays (a ``numpy.memmap`` is read one chunk at a time); no rows: one empty
    chunk."""
    if not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer; got {chunk_size!r}")
    n = np.shape(arrays[0])[0]
    for start in range(0, max(n, 1), chunk_size):
        yield tuple(None if a is None else np.asarray(a[start:start + chunk_size])
                    for a in arrays)


def count_chunks(tree: Tree, chunks: Iterable, num_classes: int, leaves_only: bool = False
                 ) -> np.ndarray:
    """Class counts of the rows of ``chunks``, added on the host in float64.

    Args:
      tree: the tree.
      chunks: iterable of ``(X, y)`` or ``(X, y, weight)``: ``X [k, D]``, ``y [k]`` int labels in
        ``0..num_classes-1``, ``weight [k]`` or ``[k, F]`` (F weightings of the rows at once, e.g.
        the folds' masks); None or absent: ones.
      num_classes: L.
      leaves_only: count each row at the T0-leaf it reaches only (not along its path).

    Returns:
      ``[nodes, L]`` float64, or ``[F, nodes, L]`` with ``[k, F]`` weights.
    """
    total = None
    for chunk in chunks:
        X, y, weight = (tuple(chunk) + (None,))[:3]
        X, y = np.asarray(X), np.asarray(y)
        _check_sample(tree, X, y, num_classes, None)
        weight = (np.ones(len(y)) if weight is None else np.asarray(weight))
        if weight.ndim not in (1, 2) or weight.shape[0] != len(y):
            raise ValueError(f"a chunk's weights must be [{len(y)}] or [{len(y)}, F]; got "
                             f"{weight.shape}")
        size = max(_MIN_CHUNK_ROWS, 1 << max(len(y) - 1, 0).bit_length())
        pad = size - len(y)
        counts = _weighted_counts(
            tree, jnp.asarray(np.pad(X, ((0, pad), (0, 0))), tree.threshold.dtype),
            jnp.asarray(np.pad(y, (0, pad)), jnp.int32),
            jnp.asarray(np.pad(weight.reshape(len(y), -1).T, ((0, 0), (0, pad))),
                        tree.threshold.dtype),
            num_classes, leaves_only)
        counts = np.asarray(counts, np.float64)
        counts = counts if weight.ndim == 2 else counts[0]
        total = counts if total is None else total + counts
    if total is None:
        raise ValueError("chunks held no rows")
    return total


@functools.partial(jax.jit, static_argnames=("num_classes", "leaves_only"))
def _weighted_counts(tree, X, y, weight, num_classes, leaves_only):
    """``[F, nodes, L]`` counts of one padded chunk under ``F`` weightings ``[F, k]``."""
    path, on_path = route(tree, X)
    if leaves_only:
        on_path = jnp.arange(path.shape[1]) == path.shape[1] - 1
        on_path = jnp.broadcast_to(on_path, path.shape)

    def one(w):
        return stats_from_paths(tree, path, on_path, y, num_classes, w).counts

    return jax.vmap(one)(weight)


@functools.partial(jax.jit, static_argnames="num_classes")
def _node_stats(tree, X, y, num_classes, sample_weight):
    path, on_path = route(tree, X)
    return stats_from_paths(tree, path, on_path, y, num_classes, sample_weight)


def _check_sample(tree, X, y, num_classes, sample_weight):
    check_num_classes(num_classes)
    check_tree_points(tree, X)
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
    return counted_stats(tree, counts)


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


# compiled once per tree shape (an eager fori_loop would compile its closure on every call)
_counted_stats = jax.jit(counted_stats)


#: Default Dirichlet pseudo-count of :func:`class_frequencies`: ½, Krichevsky–Trofimov's. Neither
#: value wins everywhere on the CART T0 (experiments/results/calibration.md): Laplace's 1 gave the
#: lower test log-loss on spam, eeg, epileptic and crowd (2 and 6 classes), ½ on digit and letter
#: (10 and 26 classes), where L·α pseudo-counts swamp a small leaf.
DEFAULT_SMOOTHING = 0.5


def class_frequencies(tree: Tree, counts: Array, smoothing=DEFAULT_SMOOTHING) -> Array:
    """``[nodes, L]`` smoothed class frequencies ``p̂(l | A)`` of every node.

    At a node with points, the mean of the class distribution's posterior under a symmetric
    Dirichlet prior of pseudo-count α = ``smoothing`` per class::

        p̂(l | A) = (N_{A,l} + α) / (N_A + L·α)

    (α = ½: Krichevsky–Trofimov; α = 1: Laplace; α = 0: the plain frequencies). An empty node
    takes its parent's ``p̂`` (as it takes its parent's label, :func:`node_labels`); an empty
    root, the uniform distribution. Every row sums to 1, every entry lies strictly inside
    (0, 1) when α > 0 and L > 1, and a row's argmax is the node's label ``l(A)`` (adding α to
    every count keeps their order; ties go to the smallest label in both).

    Args:
      tree: the tree (its layout's ``fold_down`` carries a parent's row to its empty children).
      counts: ``[nodes, L]`` class counts (``stats.counts``).
      smoothing: α ≥ 0, a scalar (may be traced: ``vmap``/``grad`` over it).

    Raises:
      ValueError: a concrete α that is negative or not finite.
    """
    check_smoothing(smoothing)
    counts = jnp.asarray(counts)
    total = counts.sum(axis=1, keepdims=True)
    nonempty = total > 0
    num_classes = counts.shape[1]
    own = jnp.where(nonempty, (counts + smoothing) / jnp.where(
        nonempty, total + num_classes * smoothing, 1.0), 1.0 / num_classes)

    def inherit(x, above):
        own_level, nonempty_level = x
        value = own_level if above is None else jnp.where(nonempty_level, own_level, above)
        return value, value

    return tree.layout.fold_down(inherit, (own, nonempty))


def check_smoothing(smoothing) -> None:
    """Raise a ValueError unless a concrete ``smoothing`` is a finite real number >= 0 (a traced
    one is not checked)."""
    if is_traced(smoothing):
        return
    value = np.asarray(smoothing)
    if value.ndim != 0 or value.dtype == bool or not (
            np.issubdtype(value.dtype, np.integer) or np.issubdtype(value.dtype, np.floating)) \
            or not np.isfinite(value) or value < 0:
        raise ValueError(f"smoothing must be a finite number >= 0 (the Dirichlet pseudo-count "
                         f"per class: 0.5 Krichevsky–Trofimov, 1 Laplace); got {smoothing!r}")
