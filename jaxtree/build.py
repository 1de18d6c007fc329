"""Builders of the partition tree T0 (docs/theory/trees.md): KD and dyadic trees, grown level by level.

A builder scales the features, grows the tree one level at a time with NumPy array operations
(no loop over nodes or points), and packs the levels into a layout. Growing yields, per level,
the nodes that exist (:class:`GrownLevel`); packing places them into slots. The builders run
once per fit, outside jit: the shape of T0 depends on the data.

Split rules (docs/theory/trees.md):

* **KD**: features divided by their training standard deviation; a node at depth ℓ splits
  coordinate ``ℓ mod D`` (or, with ``split="spread"``, the coordinate in which its points have
  the widest interquartile range) at the median of its points; ``<= median`` goes left.
* **dyadic**: features min–max scaled to ``[0, 1]`` (test points clipped); a node splits the
  chosen coordinate at the midpoint of its cell.

Stopping: a node is not split when ℓ = ``max_depth``, when it holds fewer than ``min_split``
points, or (when labels are given) when it is pure. Every split creates two children; a child may
be empty.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import numpy as np

from jaxtree.collective import LOCAL, feature_std, order_statistics
from jaxtree.compact import CompactLayout
from jaxtree.layout import CompleteLayout
from jaxtree.tree import Tree, tree_from_numpy
from jaxtree.validation import check_features, check_labels  # also used by cart and oblique

# A complete layout stores ~2**(D0+1) slots of several per-node arrays (tree, statistics and
# weights). Above this many bytes we refuse and say what to do instead.
MAX_LAYOUT_BYTES = 2 ** 31
_BYTES_PER_SLOT = 64
_COMPACT_INDEX_BYTES = 8  # child_pos and parent_pos, int32
LAYOUTS = ("auto", "complete", "compact")


@dataclasses.dataclass
class GrownLevel:
    """The nodes that exist at one level of T0, in order (``m`` nodes).

    Attributes:
        parent: ``[m]`` int, index of each node's parent in the previous level (-1 at the
            root); the two children of a parent are adjacent, left first.
        internal: ``[m]`` bool, True where the node is split.
        feature: ``[m]`` int, split feature (0 at leaves).
        threshold: ``[m]`` float, split threshold in scaled units (0 at leaves).
    """

    parent: np.ndarray
    internal: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray


def kd_tree(X, max_depth: int, min_split: int = 2, y=None, split: str = "cycle",
            layout: str = "complete") -> Tree:
    """KD tree T0 on ``X`` (docs/theory/trees.md).

    Args:
      X: ``[n, D]`` training points.
      max_depth: largest depth of a node.
      min_split: nodes with fewer points are not split (>= 2).
      y: optional ``[n]`` int labels; when given, pure nodes are not split.
      split: ``"cycle"`` (coordinate ``depth mod D``) or ``"spread"`` (widest spread).
      layout: ``"complete"`` (heap), ``"compact"`` (levels padded to the widest) or ``"auto"``
        (whichever takes less memory); see :func:`pack`.

    Returns:
      a :class:`Tree` whose scaling divides each feature by its standard deviation; float
      arrays in the dtype of ``X`` as JAX holds it (float32, or float64 with x64 enabled).
      Each split is at the median of the node's points along its feature (in scaled units).

    Example:
        Four points of one feature; the root splits at the median (1.5, scaled by
        1/std = 0.894), its children at 0.5 and 2.5:

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> tree.internal.tolist()
        [True, True, True, False, False, False, False]
        >>> print((np.asarray(tree.threshold[:3]) / np.asarray(tree.inv_scale)).round(3))
        [1.5 0.5 2.5]
        >>> jaxtree.kd_tree(X, max_depth=2, y=np.array([0, 1, 1, 1])).internal.tolist()
        [True, True, False, False, False, False, False]
    """
    X, y = _check_build_input(X, y, max_depth, min_split, split)
    return grow_kd(X, y, max_depth, min_split, split, layout)


def grow_kd(X, y, max_depth, min_split, split, layout, reducer=LOCAL) -> Tree:
    """:func:`kd_tree` on checked input whose rows may be spread over several holders:
    ``reducer`` (:mod:`jaxtree.collective`) combines their statistics; every holder returns
    the same tree, the one of all rows in one place."""
    std = feature_std(X, reducer)
    inv_scale = np.where(std > 0, 1.0 / np.where(std > 0, std, 1.0), 1.0).astype(X.dtype)
    shift = np.zeros(X.shape[1], X.dtype)
    Z = (X - shift) * inv_scale
    levels = grow(Z, y, max_depth, min_split, split, "median", level_statistics(Z, reducer))
    return pack(levels, shift, inv_scale, clip=False, layout=layout)


def dyadic_tree(X, max_depth: int, min_split: int = 2, y=None, split: str = "cycle",
                layout: str = "complete") -> Tree:
    """Dyadic tree T0 on ``X`` (docs/theory/trees.md): cells are dyadic boxes of ``[0, 1]^D``.

    Arguments and result as :func:`kd_tree`. The tree min–max scales each feature with the
    training data and clips test points to ``[0, 1]``; every split halves its cell along the
    feature, wherever the points lie (a cell with fewer than ``min_split`` points, or a pure
    one when ``y`` is given, is not split).

    Example:
        The points scale to 0, 0.25, 0.5 and 1; the root halves ``[0, 1]`` at 0.5, its left
        cell (three points) at 0.25; the right cell holds one point and is not split:

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [4.0]])
        >>> tree = jaxtree.dyadic_tree(X, max_depth=2)
        >>> tree.internal.tolist(), tree.clip
        ([True, True, False, False, False, False, False], True)
        >>> print(np.asarray(tree.threshold[:2]).round(3))
        [0.5  0.25]
        >>> jaxtree.leaf_of(tree, np.array([[-5.0], [9.0]])).tolist()
        [3, 2]
    """
    X, y = _check_build_input(X, y, max_depth, min_split, split)
    return grow_dyadic(X, y, max_depth, min_split, split, layout)


def grow_dyadic(X, y, max_depth, min_split, split, layout, reducer=LOCAL) -> Tree:
    """:func:`dyadic_tree` on checked input whose rows may be spread over holders
    (:func:`grow_kd`)."""
    empty = np.full(X.shape[1], np.inf, X.dtype)
    lo = reducer.min(X.min(axis=0) if len(X) else empty).astype(X.dtype)
    hi = reducer.max(X.max(axis=0) if len(X) else -empty).astype(X.dtype)
    span = hi - lo
    inv_scale = np.where(span > 0, 1.0 / np.where(span > 0, span, 1.0), 1.0).astype(X.dtype)
    Z = np.clip((X - lo) * inv_scale, 0, 1)
    levels = grow(Z, y, max_depth, min_split, split, "midpoint", level_statistics(Z, reducer))
    return pack(levels, lo, inv_scale, clip=True, layout=layout)


def grow(Z: np.ndarray, y: Optional[np.ndarray], max_depth: int, min_split: int, split: str,
         rule: str, statistics) -> list[GrownLevel]:
    """Grow T0 level by level on scaled points ``Z`` ``[n, D]``.

    ``rule``: ``"median"`` (KD) or ``"midpoint"`` (dyadic) thresholds. ``statistics``
    (:func:`level_statistics`) gives the order statistics of the level's points and, through its
    ``reducer``, the sums over every holder of rows: with rows spread over processes each holds
    its block, and all grow the same levels.
    """
    n, dims = Z.shape
    reducer = statistics.reducer
    num_labels = None if y is None else int(reducer.max(np.array([y.max() + 1 if n else 0]))[0])
    node = np.zeros(n, np.int64)          # index of each live point's node within the level
    points = np.arange(n)                 # which points are still in split nodes
    parent = np.array([-1])
    cells = (np.zeros((1, dims), Z.dtype), np.ones((1, dims), Z.dtype))
    levels = []
    for depth in range(max_depth + 1):
        m = parent.shape[0]
        count = reducer.sum(np.bincount(node, minlength=m))
        splits = (count >= min_split) & (depth < max_depth)
        if y is not None:
            splits &= ~_pure(reducer.sum(_class_counts(node, y[points], m, num_labels)))
        if split == "cycle":
            feature = np.full(m, depth % dims, np.int64)
        else:
            feature = statistics.widest_spread(points, node, count, splits)
        if rule == "median":
            threshold = statistics.median_thresholds(points, node, feature, count, splits)
        else:
            threshold = _midpoint_thresholds(cells, feature)
        threshold = np.where(splits, threshold, 0).astype(Z.dtype)
        value = Z[points, feature[node]]
        levels.append(GrownLevel(parent, splits, np.where(splits, feature, 0), threshold))
        if not splits.any():
            break
        # children of split node k are 2*rank(k) and 2*rank(k)+1 in the next level
        rank = np.cumsum(splits) - 1
        live = splits[node]
        go_right = value[live] > threshold[node[live]]
        node = 2 * rank[node[live]] + go_right
        points = points[live]
        parent = np.repeat(np.flatnonzero(splits), 2)
        cells = _child_cells(cells, splits, feature, threshold)
    return levels


def pack(levels: list[GrownLevel], shift, inv_scale, clip: bool, layout: str = "complete"
         ) -> Tree:
    """Place grown levels into a layout and return the :class:`Tree`.

    ``layout``: ``"complete"`` (heap, :class:`CompleteLayout`), ``"compact"`` (every level padded
    to the widest, :class:`CompactLayout`) or ``"auto"`` (whichever takes less memory).
    """
    lay = make_layout(levels, layout)
    feature = np.zeros(lay.num_nodes, np.int32)
    threshold = np.zeros(lay.num_nodes, levels[0].threshold.dtype)
    internal = np.zeros(lay.num_nodes, bool)
    for slots, level in zip(level_slots(levels, lay), levels):
        feature[slots] = level.feature
        threshold[slots] = level.threshold
        internal[slots] = level.internal
    return tree_from_numpy(feature, threshold, internal, lay, shift, inv_scale, clip)


def make_layout(levels: list[GrownLevel], layout: str):
    """The layout (``"complete"``, ``"compact"`` or ``"auto"``) that will hold ``levels``; ``auto``
    picks the one whose slots take fewer bytes (the compact layout also stores two index arrays)."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; expected one of {LAYOUTS}")
    depth = len(levels) - 1
    width = CompactLayout.width_for([len(level.internal) for level in levels])
    compact_bytes = (depth + 1) * width * (_BYTES_PER_SLOT + _COMPACT_INDEX_BYTES)
    if layout == "auto":
        layout = "compact" if compact_bytes < (2 ** (depth + 1) - 1) * _BYTES_PER_SLOT else \
            "complete"
    if layout == "complete":
        _check_complete_fits(depth)
        return CompleteLayout(depth)
    if compact_bytes > MAX_LAYOUT_BYTES:
        raise ValueError(
            f"a tree of {depth + 1} levels and width {width:,} needs {(depth + 1) * width:,} "
            f"slots in the compact layout (~{compact_bytes / 2 ** 30:.1f} GiB), over "
            f"jaxtree.build.MAX_LAYOUT_BYTES; lower max_depth or raise min_split")
    return CompactLayout.from_levels([level.parent for level in levels],
                                     [level.internal for level in levels])


def level_slots(levels: list[GrownLevel], layout) -> list[np.ndarray]:
    """Per level, ``[m]``: the slot of each grown node in ``layout``."""
    if isinstance(layout, CompactLayout):
        return [layout.slots(index, len(level.internal)) for index, level in enumerate(levels)]
    slots = [np.array([0])]
    for level in levels[1:]:
        side = np.arange(level.parent.shape[0]) % 2
        slots.append(2 * slots[-1][level.parent] + 1 + side)
    return slots


# ---------------------------------------------------------------------------------------------
def sorted_node_rank_keys(node, rank, m: int, n: int) -> np.ndarray:
    """Keys ``node·n + rank`` sorted along the last axis: points ordered by node, then by value
    (``rank < n``: a value's rank in its column, :func:`column_order`; ``node < m``). Decode with
    ``keys // n`` (node) and ``keys % n`` (rank). int32 keys when they fit: they sort about 2x
    faster than int64, and sorting integers beats an argsort of (node, value) pairs."""
    key_type = np.int32 if m * n < 2 ** 31 else np.int64
    return np.sort(node.astype(key_type) * n + rank, axis=-1)


def _sorted_by_node(sorted_columns, rank, node, feature, m):
    """``(values, nodes)``: each point's value in its node's split feature, sorted by (node,
    value) (ties by position), and the node at each position. ``rank`` ``[p]`` is the point's
    rank in that feature's column of ``sorted_columns`` ``[D, n]``."""
    n = sorted_columns.shape[1]
    keys = sorted_node_rank_keys(node, rank, m, n)
    nodes = keys // n
    return sorted_columns[feature[nodes], keys % n], nodes


def level_statistics(Z: np.ndarray, reducer=LOCAL):
    """The order statistics that :func:`grow` needs, for points ``Z`` held in one place
    (:class:`SortedStatistics`) or spread over the holders that ``reducer`` combines
    (:class:`ReducedStatistics`)."""
    return SortedStatistics(Z) if reducer is LOCAL else ReducedStatistics(Z, reducer)


def median_rule(low, high, largest, below, has_below, xp=np):
    """KD threshold of each node from order statistics of its values in the split feature: the
    median ``(low + high) / 2`` of the two middle values (equal for an odd count).

    Tie rule: ``<= median`` goes left, except when the median is also the node's largest value
    (more than half the points share it), which would send every point left; the threshold is
    then the midpoint between ``below`` (the largest value under ``largest``, where
    ``has_below``) and ``largest``, so the tied values go right. A node whose values are all
    equal keeps the median (its right child is empty). ``xp``: the array module (NumPy, or
    ``jax.numpy`` in :mod:`jaxtree.grow`).
    """
    median = (low + high) / 2
    degenerate = (median >= largest) & has_below
    return xp.where(degenerate, (below + largest) / 2, median)


def spread_rule(quartile1, quartile3, smallest, largest, xp=np):
    """Per node (``[k, D]`` order statistics of each coordinate), the coordinate whose points have
    the widest interquartile range (first on ties; the widest range when every interquartile
    range is 0).

    The interquartile range, not the range: on standardized features a coordinate that is almost
    always 0 has a huge range from its few non-zero values, and a range rule keeps cutting those
    few points off (digit's KD tree became a chain of 47 splits with 0.80 test error).
    ``xp``: the array module, as :func:`median_rule`.
    """
    spread = quartile3 - quartile1
    return xp.where(spread.max(axis=1) > 0, xp.argmax(spread, axis=1),
                    xp.argmax(largest - smallest, axis=1))


def _quartile_ranks(count):
    """``(rank of Q1, rank of Q3)`` among ``count`` sorted values (0-based)."""
    return (count - 1) // 4, -(-3 * (count - 1) // 4)


class SortedStatistics:
    """Order statistics of points held in one place, by sorting: every point's rank in every
    column is computed once (on first use); sorting integer keys (node, rank) then orders each
    node's values, and the ranks of a subset keep their order."""

    reducer = LOCAL

    def __init__(self, Z: np.ndarray):
        self.Z = Z
        self._order = functools.cache(lambda: column_order(Z))

    def median_thresholds(self, points, node, feature, count, splits):
        """``[m]`` :func:`median_rule` thresholds (of nodes with points)."""
        m = len(count)
        if not len(node):
            return np.zeros(m)
        ranks, sorted_columns = self._order()
        sorted_values, sorted_nodes = _sorted_by_node(sorted_columns, ranks[points, feature[node]],
                                                      node, feature, m)
        start = np.concatenate([[0], np.cumsum(count)[:-1]])
        last = np.minimum(start + np.maximum(count, 1) - 1, len(node) - 1)
        low = sorted_values[np.minimum(start + (np.maximum(count, 1) - 1) // 2, len(node) - 1)]
        high = sorted_values[np.minimum(start + np.maximum(count, 1) // 2, len(node) - 1)]
        # first position of each node's largest value (its copies end the node's run), and the
        # value just before it (if in the node)
        is_max = sorted_values == sorted_values[last][sorted_nodes]
        first_of_max = start + count - np.bincount(sorted_nodes[is_max], minlength=m)
        below = sorted_values[np.maximum(first_of_max - 1, 0)]
        threshold = median_rule(low, high, sorted_values[last], below, first_of_max > start)
        return np.where(count > 0, threshold, 0)

    def widest_spread(self, points, node, count, splits):
        """``[m]`` the :func:`spread_rule` coordinate of every split node (0 elsewhere)."""
        feature = np.zeros(len(count), np.int64)
        chosen = splits[node]
        if not chosen.any():
            return feature
        ranks, sorted_columns = self._order()
        nc = node[chosen]
        # sort every column within each node: key = node, then the value's rank in its column
        n = sorted_columns.shape[1]
        keys = sorted_node_rank_keys(nc, ranks[points[chosen]].T, len(count), n)   # [D, p]
        sorted_cols = np.take_along_axis(sorted_columns, keys % n, axis=1).T       # [p, D]
        nodes = np.flatnonzero(splits)
        size = count[nodes]
        start = np.concatenate([[0], np.cumsum(size)[:-1]])
        rank1, rank3 = _quartile_ranks(size)
        feature[nodes] = spread_rule(sorted_cols[start + rank1], sorted_cols[start + rank3],
                                     sorted_cols[start], sorted_cols[start + size - 1])
        return feature


class ReducedStatistics:
    """Order statistics of points spread over holders (processes): exact medians and quartiles
    by :func:`jaxtree.collective.order_statistics`, extremes by the reducer's max and min; every
    holder gets the values that sorting all points in one place gives."""

    def __init__(self, Z: np.ndarray, reducer, radix_bits: Optional[int] = None):
        self.Z = Z
        self.reducer = reducer
        self.radix_bits = radix_bits

    def median_thresholds(self, points, node, feature, count, splits):
        """``[m]`` :func:`median_rule` thresholds of the split nodes (0 elsewhere)."""
        nodes = np.flatnonzero(splits)
        threshold = np.zeros(len(count), self.Z.dtype)
        if not len(nodes):
            return threshold
        segment = _segment_of(node, splits)
        value = self.Z[points, feature[node]]
        ranks = np.stack([(count[nodes] - 1) // 2, count[nodes] // 2], axis=1)
        middle = order_statistics(value[:, None], segment, ranks, self.reducer,
                                  self.radix_bits)[:, 0]
        largest = self._extreme(value, segment, len(nodes), np.maximum)
        under = np.where(value < largest[np.maximum(segment, 0)], value, -np.inf)
        below = self._extreme(under, segment, len(nodes), np.maximum)
        threshold[nodes] = median_rule(middle[:, 0], middle[:, 1], largest, below,
                                       below > -np.inf)
        return threshold

    def widest_spread(self, points, node, count, splits):
        """``[m]`` the :func:`spread_rule` coordinate of every split node (0 elsewhere)."""
        nodes = np.flatnonzero(splits)
        feature = np.zeros(len(count), np.int64)
        if not len(nodes):
            return feature
        segment = _segment_of(node, splits)
        values = self.Z[points]
        quartiles = order_statistics(values, segment, np.stack(_quartile_ranks(count[nodes]), 1),
                                     self.reducer, self.radix_bits)       # [k, D, 2]
        smallest = self._extreme(values, segment, len(nodes), np.minimum)
        largest = self._extreme(values, segment, len(nodes), np.maximum)
        feature[nodes] = spread_rule(quartiles[..., 0], quartiles[..., 1], smallest, largest)
        return feature

    def _extreme(self, values, segment, k, ufunc):
        """Per segment (``[k]`` or ``[k, D]``), the max or min over all holders."""
        fill = -np.inf if ufunc is np.maximum else np.inf
        local = np.full((k,) + values.shape[1:], fill, values.dtype)
        keep = segment >= 0
        ufunc.at(local, segment[keep], values[keep])
        reduce = self.reducer.max if ufunc is np.maximum else self.reducer.min
        return reduce(local).astype(values.dtype)


def _segment_of(node, splits):
    """``[p]`` each point's index among the split nodes (-1 in nodes that do not split)."""
    return np.where(splits[node], (np.cumsum(splits) - 1)[node], -1)


def _midpoint_thresholds(cells, feature):
    """Midpoint of each node's cell in its split feature."""
    lo, hi = cells
    rows = np.arange(len(feature))
    return (lo[rows, feature] + hi[rows, feature]) / 2


def column_order(Z):
    """``(ranks [n, D], sorted_columns [D, n])``: each value's rank in its column (ties in order
    of position) and every column sorted (one stable argsort per column, on contiguous rows)."""
    columns = np.ascontiguousarray(Z.T)
    order = np.argsort(columns, axis=1, kind="stable")
    ranks = np.empty(order.shape, np.int32 if Z.shape[0] < 2 ** 31 else np.int64)
    np.put_along_axis(ranks, order, np.arange(Z.shape[0]), axis=1)
    return ranks.T, np.take_along_axis(columns, order, axis=1)


def _class_counts(node, y, m, num_labels):
    """``[m, num_labels]`` int: how many points of each label every node holds."""
    return np.bincount(node * num_labels + y, minlength=m * num_labels).reshape(m, num_labels)


def _pure(class_counts):
    """``[m]`` bool: nodes whose points carry at most one label."""
    return (class_counts > 0).sum(axis=1) <= 1


def _child_cells(cells, splits, feature, threshold):
    lo, hi = cells
    k = np.flatnonzero(splits)
    f = feature[k]
    lo_children = np.repeat(lo[k], 2, axis=0)
    hi_children = np.repeat(hi[k], 2, axis=0)
    rows = np.arange(len(k))
    hi_children[2 * rows, f] = threshold[k]        # left child: [lo, t]
    lo_children[2 * rows + 1, f] = threshold[k]    # right child: (t, hi]
    return lo_children, hi_children


def _check_complete_fits(depth):
    needed = (2 ** (depth + 1) - 1) * _BYTES_PER_SLOT
    if needed > MAX_LAYOUT_BYTES:
        raise ValueError(
            f"a tree of depth {depth} needs 2**{depth + 1} - 1 slots in the complete "
            f"layout (~{needed / 2 ** 30:.3g} GiB with its statistics), over the limit "
            f"jaxtree.build.MAX_LAYOUT_BYTES = {MAX_LAYOUT_BYTES / 2 ** 30:.0f} GiB; "
            "lower max_depth, raise min_split, or use a layout that stores only the nodes that "
            "exist (layout='compact')")


def _check_build_input(X, y, max_depth, min_split, split):
    X = check_features(X)
    if y is not None:
        y = check_labels(y, X.shape[0])
    if not isinstance(max_depth, (int, np.integer)) or max_depth < 0:
        raise ValueError(f"max_depth must be an integer >= 0; got {max_depth!r}")
    if not isinstance(min_split, (int, np.integer)) or min_split < 2:
        raise ValueError(f"min_split must be an integer >= 2; got {min_split!r}")
    if split not in ("cycle", "spread"):
        raise ValueError(f"split must be 'cycle' or 'spread'; got {split!r}")
    return X, y
