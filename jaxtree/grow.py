"""T0 grown by JAX inside ``jit``: dyadic, KD and binned-CART builders at static shapes.

:func:`grow_tree` grows the same trees as the NumPy builders (:func:`jaxtree.dyadic_tree`,
:func:`jaxtree.kd_tree`, :func:`jaxtree.cart_tree` with ``bins=K``) node for node, but as one
pure function: a ``lax.scan`` over the ``max_depth + 1`` levels (compile time flat in depth),
every shape fixed by the :class:`GrowConfig` and ``X.shape`` — never by the data — so it runs
under ``jax.jit``, ``jax.vmap`` (over bootstrap weights or stacked datasets) and lowers for any
platform (no host callbacks).

Every level has ``W`` (``config.width``) positions; the tree lands in a
:class:`jaxtree.CompactLayout` of ``max_depth + 1`` levels of ``W`` slots, the layout that the
NumPy builders' trees take after :func:`jaxtree.compact.pad_compact`. Each row carries its
position in the current level (``W`` once it sits in a leaf, or from the start when its weight is
0). Per level:

* class counts per node by a segment sum of the weights; a node is a candidate to split as in
  the NumPy builders (at least ``min_split`` weight, below ``max_depth``, not pure);
* the split rule: **dyadic** halves the node's cell; **KD** takes the weighted median of the
  node's values (a sort of the level's rows by (node, value) and a search in the cumulative
  weights); ``split="spread"`` chooses the coordinate of widest interquartile range, with every
  column's rows kept sorted by (node, value) from level to level: a split node's rows are
  partitioned stably into its children's (cumulative counts, no sort), and each node's
  quantiles are searched among its own rows only (half the time of a grow that sorted each
  column at every level); a level whose candidates each hold copies of one point (repeated
  points of several labels, which a dyadic or KD tree splits down to its depth limit with one
  child empty) skips the search, and once no node holds two different rows the order is no
  longer kept (spam's dyadic tree: 456 levels, most of them such chains); **CART** counts
  class histograms per node × feature × quantile bin by one segment sum, scores every bin edge
  by cumulative sums over bins (as the ``hist`` methods of GPU gradient-boosting libraries do)
  and keeps the best by :func:`jaxtree.cart`'s tie rule;
* **missing values** (CART, ``GrowConfig.missing``): a NaN sits in an extra bin of its
  feature; every cut is scored with the node's missing rows on the left and on the right, and
  the better side is kept in ``Tree.missing_right`` (the side of larger weight where the node
  had no missing rows in that feature, ties right, as scikit-learn's trees); one more candidate splits the
  missing rows from the others (threshold +inf, missing right). Without ``missing`` the
  program has no extra bin and the tree still carries ``missing_right`` (the larger side), so
  it can route NaN at prediction;
* the split nodes' children take positions ``2·rank, 2·rank + 1`` of the next level. Only
  ``W / 2`` nodes of a level can split: a node whose rank is past that stays a leaf and is counted
  in :attr:`GrowInfo.capped` (zero means the tree is the uncapped one).

Weights: 0 removes a row, an integer weight counts as that many copies of the row (weighted
medians, quantiles and histograms are order statistics and sums of the weights).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.build import median_rule, spread_rule
from jaxtree.cart import (CRITERIA, cut_scores, gap_joins, middle_cut, near_best, node_hash,
                          pick_split, tie_priority, tie_seed)
from jaxtree.compact import CompactLayout
from jaxtree.tree import Tree
from jaxtree.validation import float_dtype, holds_nan

Array = jax.Array
PARTITIONS = ("dyadic", "kd", "cart")
SPLITS = ("cycle", "spread")
SPLITTERS = ("best", "random")


@dataclasses.dataclass(frozen=True)
class GrowConfig:
    """Static options of :func:`grow_tree` (frozen and hashable: a ``jit`` static argument).

    Attributes:
      partition: ``"dyadic"``, ``"kd"`` or ``"cart"``.
      max_depth: depth of the layout; nodes at this depth are leaves.
      width: W, the positions per level (even, >= 2); at most ``W / 2`` nodes of a level split.
      num_classes: L; labels are ``0..L-1``.
      min_split: nodes of smaller total weight are not split (>= 2).
      split: dyadic and KD: ``"cycle"`` (coordinate ``depth mod D``) or ``"spread"`` (widest
        interquartile range); CART ignores it.
      criterion: CART: ``"gini"`` or ``"entropy"``.
      bins: CART: K >= 2 quantile bins per feature (:func:`jaxtree.cart_tree`'s ``bins``).
      max_features: None, or the size of the random subset of features that each node may split
        on (CART and ``split="spread"``; needs a ``key``).
      random_state: CART: the seed of the ties between features (:func:`jaxtree.cart.tie_seed`),
        as ``cart_tree``'s. A randomized tree (``max_features`` or ``splitter="random"``)
        mixes bits of its ``key`` into that seed: the trees of a forest break ties each its own
        way.
      stop_pure: dyadic and KD: pure nodes are not split (the NumPy builders given ``y``); CART
        never splits a pure node.
      missing: CART: ``X`` may hold NaN, a missing value, whose side each split learns (module
        docstring). A separate program (an extra histogram bin, twice the cut scores); without
        it NaN in ``X`` is refused.
      splitter: CART: ``"best"`` (every bin edge of every feature scored) or ``"random"``
        (Extra-Trees-style, Geurts, Ernst & Wehenkel 2006, on the bins: for each feature one cut
        drawn uniformly among the bin edges between the node's lowest and highest bin, and
        the best of those cuts kept; needs a ``key``, not with ``missing``).
      max_distinct: CART: None, or a bound on the distinct values of every column (NaN aside;
        :func:`distinct_bound`). A column's finite bin edges are fewer than its distinct values
        (an edge lies below the column's largest value), so the histograms then hold
        ``min(bins, max_distinct)`` bins (:func:`histogram_bins`): the same tree at lower cost
        (letter's 16 integer-valued features: 16 bins instead of 64).

    Example:
        A config is a static ``jit`` argument (hashable); :func:`check_grow_config` names the
        field that is out of range:

        >>> import jaxtree
        >>> from jaxtree.grow import check_grow_config
        >>> config = jaxtree.GrowConfig(partition="cart", max_depth=12, width=256, bins=32)
        >>> hash(config) == hash(jaxtree.GrowConfig(partition="cart", max_depth=12, width=256))
        True
        >>> check_grow_config(jaxtree.GrowConfig(width=7))
        Traceback (most recent call last):
        ...
        ValueError: GrowConfig.width must be an even integer >= 2; got 7
    """

    partition: str = "kd"
    max_depth: int = 8
    width: int = 64
    num_classes: int = 2
    min_split: int = 2
    split: str = "cycle"
    criterion: str = "gini"
    bins: int = 32
    max_features: Optional[int] = None
    random_state: int = 0
    stop_pure: bool = True
    missing: bool = False
    splitter: str = "best"
    max_distinct: Optional[int] = None


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["capped", "depth", "counts", "depth_capped"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class GrowInfo:
    """What :func:`grow_tree` reports besides the tree.

    Attributes:
      capped: ``[]`` int32, nodes that would have split but stayed leaves because their level
        already had ``W / 2`` splits (0: the tree is the one without a width cap).
      depth: ``[]`` int32, the deepest level that holds a node.
      depth_capped: ``[]`` int32, nodes on the layout's last level (``max_depth``) that would
        have split, were the layout deeper, because ``depth_limit`` lies below them (0 when
        ``depth_limit`` is at most ``max_depth``, the default: those nodes are leaves by the
        rule).
      counts: ``[nodes, L]`` float, the summed weight of each class at each slot of the tree:
        the level histograms the builder counted anyway, equal to
        :func:`jaxtree.node_stats` ``(tree, X, y, L, sample_weight=weight).counts`` (up to the
        order of float additions), without routing the rows through the tree again.

    Example:
        Eight distinct points want a full KD tree of depth 3 (four splits at level 2), but a
        width of 4 lets only two nodes of a level split: two nodes are capped.

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.arange(8.0)[:, None]
        >>> config = jaxtree.GrowConfig(max_depth=3, width=4, stop_pure=False)
        >>> tree, info = jaxtree.grow_tree(X, np.zeros(8, int), np.ones(8), config)
        >>> int(info.capped), int(info.depth)
        (2, 3)
        >>> info.counts.shape                 # [(max_depth + 1) · width, L = config.num_classes]
        (16, 2)
    """

    capped: Array
    depth: Array
    counts: Array
    depth_capped: Array


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_grow_config(config: GrowConfig) -> None:
    """Raise ValueError naming the first field of ``config`` that is out of range."""
    if not isinstance(config, GrowConfig):
        raise ValueError(f"config must be a jaxtree.GrowConfig; got {type(config).__name__}")
    rules = [
        ("partition", config.partition in PARTITIONS, f"one of {PARTITIONS}"),
        ("max_depth", _is_int(config.max_depth) and config.max_depth >= 0, "an integer >= 0"),
        ("width", _is_int(config.width) and config.width >= 2 and config.width % 2 == 0,
         "an even integer >= 2"),
        ("num_classes", _is_int(config.num_classes) and config.num_classes >= 1,
         "an integer >= 1"),
        ("min_split", _is_int(config.min_split) and config.min_split >= 2, "an integer >= 2"),
        ("split", config.split in SPLITS, f"one of {SPLITS}"),
        ("criterion", config.criterion in CRITERIA, f"one of {CRITERIA}"),
        ("bins", _is_int(config.bins) and config.bins >= 2, "an integer >= 2"),
        ("max_features", config.max_features is None
         or (_is_int(config.max_features) and config.max_features >= 1),
         "None or an integer >= 1"),
        ("max_features", config.max_features is None or config.partition == "cart"
         or config.split == "spread",
         "None unless partition='cart' or split='spread' (a cycled coordinate has no choice)"),
        ("random_state", _is_int(config.random_state), "an integer"),
        ("stop_pure", isinstance(config.stop_pure, bool), "a bool"),
        ("missing", isinstance(config.missing, bool), "a bool"),
        ("missing", not config.missing or config.partition == "cart",
         "False unless partition='cart' (only CART learns where missing values go)"),
        ("splitter", config.splitter in SPLITTERS, f"one of {SPLITTERS}"),
        ("max_distinct", config.max_distinct is None
         or (_is_int(config.max_distinct) and config.max_distinct >= 2), "None or an integer >= 2"),
        ("splitter", config.splitter == "best" or (config.partition == "cart"
                                                   and not config.missing),
         "'best' unless partition='cart' without missing (random cuts: CART's, observed "
         "values)"),
    ]
    for field, ok, expected in rules:
        if not ok:
            raise ValueError(f"GrowConfig.{field} must be {expected}; got "
                             f"{getattr(config, field)!r}")


def grow_tree(X, y, weight, config: GrowConfig, key=None,
              depth_limit=None, presorted=None, edges=None) -> tuple[Tree, GrowInfo]:
    """Grow T0 on weighted rows inside ``jit`` (module docstring).

    Args:
      X: ``[n, D]`` float features: finite, or NaN (missing) with ``config.missing``.
      y: ``[n]`` int labels in ``0..num_classes-1``.
      weight: ``[n]`` float, >= 0: 0 removes a row (padding, bootstrap), an integer ``k`` counts
        as ``k`` copies of it.
      config: the static options (:class:`GrowConfig`).
      key: a ``jax.random`` key, needed with ``config.max_features``.
      depth_limit: ``[]`` int, may be traced: nodes at this depth are leaves, the levels below
        it stay empty (default ``config.max_depth``, the layout's depth). A depth that follows
        the data (a default depth of the sample's size) can so change without changing the
        compiled program. A larger value than ``config.max_depth`` grows the same tree (the
        layout ends there) and counts in ``GrowInfo.depth_capped`` the nodes of the last level
        that it would split.
      presorted: None, or :func:`presort` of ``(X, config)``: the weight-free part of the CART
        bins (each column sorted), computed once outside a ``lax.map`` of many grows on the same
        ``X`` (bootstrap weights) instead of once per grow; the same tree.
      edges: None, or CART's ``[D, bins - 1]`` bin edges computed elsewhere (each column's
        quantiles at weighted ranks ``ceil(i·n / bins) - 1``, sorted, repeats kept, +inf at or
        above its largest value), used instead of these rows' own: over the rows of every process
        when ``X`` is one block of them (:func:`jaxtree.distributed.grow_cart_t0`). A grow
        given the edges sorts no rows, so under a row sharding the only collectives left are
        the sums of the per-level class counts and histograms.

    Returns:
      tuple: ``(tree, info)``, a :class:`jaxtree.Tree` in a compact layout of depth
      ``max_depth`` and width W, (max_depth + 1)·W slots (scaling and clipping as the NumPy
      builder of the partition), and :class:`GrowInfo`.

    Runs under ``jax.jit`` and ``jax.vmap`` (``config`` is static). Raises ValueError on a bad
    config, on shapes that do not fit, or on a missing key, before tracing.

    Example:
        The dyadic tree of four points equals ``dyadic_tree``'s (slots ``level * W + p``):

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [4.0]])
        >>> config = jaxtree.GrowConfig(partition="dyadic", max_depth=2, width=2,
        ...                             stop_pure=False)
        >>> tree, info = jaxtree.grow_tree(X, np.zeros(4, int), np.ones(4), config)
        >>> np.asarray(tree.internal).tolist(), int(info.capped)
        ([True, False, True, False, False, False], 0)
        >>> print(np.asarray(tree.threshold)[[0, 2]])
        [0.5  0.25]
    """
    check_grow_config(config)
    if np.ndim(X) != 2 or np.shape(X)[0] < 1 or np.shape(X)[1] < 1:
        raise ValueError(f"X must be [n, D] with n, D >= 1; got shape {np.shape(X)}")
    if not config.missing and holds_nan(X):
        raise ValueError("X holds NaN: pass GrowConfig(partition='cart', missing=True) to learn "
                         "where missing values go, or impute them first")
    n, dims = np.shape(X)
    for name, value in (("y", y), ("weight", weight)):
        if np.shape(value) != (n,):
            raise ValueError(f"{name} must be [{n}] (one per row of X); got shape "
                             f"{np.shape(value)}")
    if config.splitter == "random" and key is None:
        raise ValueError("key is needed with GrowConfig.splitter='random' (random cuts); pass "
                         "key=jax.random.key(seed)")
    if config.max_features is not None:
        if key is None:
            raise ValueError("key is needed with GrowConfig.max_features (a random subset of "
                             "features per node); pass key=jax.random.key(seed)")
        if config.max_features > dims:
            raise ValueError(f"GrowConfig.max_features must be <= D = {dims}; got "
                             f"{config.max_features}")
    if edges is not None and (config.partition != "cart" or config.missing
                              or np.shape(edges) != (dims, config.bins - 1)):
        raise ValueError(f"edges must be [D, bins - 1] = [{dims}, {config.bins - 1}] with "
                         f"partition='cart' and missing=False; got shape {np.shape(edges)} for "
                         f"partition={config.partition!r}, missing={config.missing}")
    if depth_limit is None:
        depth_limit = config.max_depth
    elif not isinstance(depth_limit, jax.core.Tracer) and not (
            np.ndim(depth_limit) == 0 and np.asarray(depth_limit) >= 0):
        raise ValueError(f"depth_limit must be an int >= 0 (or None: config.max_depth); got "
                         f"{depth_limit!r}")
    return _grow(X, y, weight, key, jnp.asarray(depth_limit, jnp.int32), config, presorted,
                 edges)


def distinct_bound(X, bins: int) -> Optional[int]:
    """:attr:`GrowConfig.max_distinct` for the rows of ``X`` ``[n, D]`` (host arrays): the
    largest number of distinct values in a column (NaN aside), rounded up to a power of 2 so
    that samples of one dataset share a program; None where that reaches ``bins`` (no saving)."""
    X = np.asarray(X)
    most = max((len(np.unique(column[~np.isnan(column)])) for column in X.T), default=1)
    bound = 1 << max(1, int(most - 1).bit_length())
    return bound if bound < bins else None


def histogram_bins(config: GrowConfig) -> int:
    """The bins of a CART level's histograms: ``bins``, or fewer with ``max_distinct``."""
    if config.max_distinct is None:
        return config.bins
    return min(config.bins, config.max_distinct)


def presort(X, config: GrowConfig):
    """The part of a CART grow that depends on ``X`` alone, not on the weights: each column's
    sort (:func:`_column_order`, a missing value sorted as +inf), or None for the other
    partitions (theirs follow the weights' scaling). Pass it as ``grow_tree(presorted=...)`` to
    many grows on the same ``X``: a forest's 100 bootstrap trees sorted spam's 57 columns 100
    times, 0.9 s of its 3.9 s of growing."""
    if config.partition != "cart":
        return None
    X = jnp.asarray(X, float_dtype())
    return _column_order(jnp.where(jnp.isnan(X), jnp.inf, X) if config.missing else X)


@functools.partial(jax.jit, static_argnames="config")
def _grow(X, y, weight, key, depth_limit, config: GrowConfig, presorted=None, edges=None):
    dtype = float_dtype()
    X = jnp.asarray(X, dtype)
    y = jnp.asarray(y, jnp.int32)
    weight = jnp.asarray(weight, dtype)
    live = weight > 0
    Z, shift, inv_scale = _scale(X, weight, live, config.partition)
    W = config.width
    start = jnp.where(live, 0, W).astype(jnp.int32)      # each row's position at the root
    split_rule, advance, rule_state = _split_rule(Z, y, weight, start, config, key, presorted,
                                                  edges)

    def level(carry, depth):
        pos, state, capped, deeper = carry
        counts = _node_counts(pos, y, weight, W, config.num_classes)
        total = counts.sum(axis=1)
        # the rule's candidates; on the layout's last level they stay leaves, counted when
        # depth_limit would split them
        candidate = (total >= config.min_split) & (depth < depth_limit)
        if config.stop_pure or config.partition == "cart":
            candidate &= (counts > 0).sum(axis=1) > 1
        feature, threshold, found, missing_right = split_rule(pos, state, depth, candidate)
        beyond = candidate & found & (depth >= config.max_depth)
        splits = candidate & found & ~beyond
        rank = jnp.cumsum(splits, dtype=jnp.int32) - 1
        over = splits & (rank >= W // 2)
        splits &= ~over
        feature = jnp.where(splits, feature, 0).astype(jnp.int32)
        threshold = jnp.where(splits, threshold, 0).astype(dtype)
        missing_right &= splits
        pos = _route_rows(Z, pos, splits, rank, feature, threshold, missing_right)
        state = advance(state, pos, splits, rank, feature, threshold)
        return ((pos, state, capped + over.sum(dtype=jnp.int32),
                 deeper + beyond.sum(dtype=jnp.int32)),
                (splits, feature, threshold, missing_right, counts))

    zero = jnp.zeros((), jnp.int32)
    (_, _, capped, deeper), (split, feature, threshold, missing_right, counts) = jax.lax.scan(
        level, (start, rule_state, zero, zero),
        jnp.arange(config.max_depth + 1, dtype=jnp.int32))
    layout = _layout(split)
    tree = Tree(feature=feature.reshape(-1), threshold=threshold.reshape(-1),
                internal=split.reshape(-1), left_child=layout.left_child(),
                node_depth=jnp.asarray(layout.node_depth()), shift=shift, inv_scale=inv_scale,
                layout=layout, clip=config.partition == "dyadic",
                missing_right=missing_right.reshape(-1) if config.partition == "cart" else None)
    depth = split.any(axis=1).sum().astype(jnp.int32)
    return tree, GrowInfo(capped=capped.astype(jnp.int32), depth=depth,
                          counts=counts.reshape(-1, config.num_classes), depth_capped=deeper)


# -- scaling and per-level pieces -----------------------------------------------------------------
def _scale(X, weight, live, partition):
    """``(Z, shift, inv_scale)``: the NumPy builder's scaling, over the rows of positive weight
    (dyadic: min–max to ``[0, 1]``, clipped; KD: divided by the weighted standard deviation;
    CART: none)."""
    dims = X.shape[1]
    if partition == "cart":
        return X, jnp.zeros(dims, X.dtype), jnp.ones(dims, X.dtype)
    if partition == "dyadic":
        lo = jnp.where(live[:, None], X, jnp.inf).min(axis=0)
        hi = jnp.where(live[:, None], X, -jnp.inf).max(axis=0)
        lo = jnp.where(jnp.isfinite(lo), lo, 0)
        span = hi - lo
        inv_scale = jnp.where(span > 0, 1 / jnp.where(span > 0, span, 1), 1).astype(X.dtype)
        return jnp.clip((X - lo) * inv_scale, 0, 1), lo, inv_scale
    total = jnp.maximum(weight.sum(), jnp.finfo(X.dtype).tiny)
    # deviations from one row's values, so that a constant column's are exactly 0: its float32
    # mean need not equal its value (0.1 in 7 rows: a std of 7e-9, a scale of 1.3e8)
    centred = X - X[jnp.argmax(live)]
    mean = weight @ centred / total
    std = jnp.sqrt(weight @ jnp.square(centred - mean) / total)
    inv_scale = jnp.where(std > 0, 1 / jnp.where(std > 0, std, 1), 1).astype(X.dtype)
    return X * inv_scale, jnp.zeros(dims, X.dtype), inv_scale


def _node_counts(pos, y, weight, W, num_classes):
    """``[W, L]`` summed weight of each class at each position (rows at ``W`` dropped)."""
    segment = pos * num_classes + y
    counts = jax.ops.segment_sum(weight, segment, num_segments=(W + 1) * num_classes)
    return counts[:W * num_classes].reshape(W, num_classes)


def _route_rows(Z, pos, splits, rank, feature, threshold, missing_right):
    """Each row's position in the next level (``W`` once its node does not split); a NaN value
    goes where ``missing_right`` says."""
    W = splits.shape[0]
    extend = lambda a, fill: jnp.concatenate([a, jnp.full(1, fill, a.dtype)])  # noqa: E731
    f = extend(feature, 0)[pos]
    value = jnp.take_along_axis(Z, f[:, None], axis=1)[:, 0]
    go_right = jnp.where(jnp.isnan(value), extend(missing_right, False)[pos],
                         value > extend(threshold, 0)[pos])
    child = 2 * extend(rank, 0)[pos] + go_right
    return jnp.where(extend(splits, False)[pos], child, W).astype(jnp.int32)


def _child_cells(cells, splits, rank, feature, threshold):
    """The dyadic cells ``(lo, hi)`` ``[W, D]`` of the next level's positions (left child
    ``[lo, t]``, right child ``(t, hi]``); positions without a node keep garbage."""
    lo, hi = cells
    W = splits.shape[0]
    target = jnp.where(splits, 2 * rank, W)
    index = jnp.arange(W, dtype=jnp.int32)
    parent = jnp.zeros(W, jnp.int32).at[target].set(index, mode="drop")
    parent = parent.at[target + 1].set(index, mode="drop")
    right = jnp.arange(W) % 2 == 1
    f, t = feature[parent], threshold[parent]
    rows = jnp.arange(W)
    lo_child = lo[parent].at[rows, f].set(jnp.where(right, t, lo[parent, f]))
    hi_child = hi[parent].at[rows, f].set(jnp.where(right, hi[parent, f], t))
    return lo_child, hi_child


def _layout(split):
    """The :class:`CompactLayout` of the grown levels ``split`` ``[levels, W]`` (bool): children of
    the ``k``-th split node at ``2k, 2k + 1``; padding hangs below the level's first leaf, as
    :meth:`CompactLayout.from_levels` places them."""
    levels, W = split.shape
    rank = jnp.cumsum(split, axis=1, dtype=jnp.int32) - 1
    child_pos = jnp.where(split, 2 * rank, 0).astype(jnp.int32)

    def parents(above, above_rank):
        target = jnp.where(above, 2 * above_rank, W)
        out = jnp.full(W, jnp.argmin(above), jnp.int32)
        out = out.at[target].set(jnp.arange(W, dtype=jnp.int32), mode="drop")
        return out.at[target + 1].set(jnp.arange(W, dtype=jnp.int32), mode="drop")

    parent_pos = jnp.concatenate([jnp.arange(W, dtype=jnp.int32)[None],
                                  jax.vmap(parents)(split[:-1], rank[:-1])])
    return CompactLayout(child_pos, parent_pos, levels - 1, W)


# -- split rules ----------------------------------------------------------------------------------
def _split_rule(Z, y, weight, start, config: GrowConfig, key, presorted=None, edges=None):
    """``(rule, advance, state)``: ``rule(pos, state, depth, candidate) -> (feature [W],
    threshold [W], found [W], missing_right [W])`` of a level, ``advance(state, next_pos, splits,
    rank, feature, threshold)`` the rule's state at the next level (the dyadic cells; for
    ``split="spread"`` each column's rows in position order and each position's smallest and
    largest values; ``()`` for CART), ``state`` the root level's."""
    W, dims = config.width, Z.shape[1]
    # two independent 32-bit seeds from the key, hashed with (level, position, feature) into
    # each level's draws (:func:`jaxtree.cart.node_hash`): threefry's rounds for a level's
    # [W, D] uniforms took 17 % of a spam forest's growing
    seeds = None if key is None else jax.random.bits(key, (2,), jnp.uint32)
    # a randomized tree (feature subsets or random cuts) breaks ties between features by its
    # own key too: with one seed for every tree of a forest, the trees broke ties alike
    randomized = key is not None and (config.max_features is not None
                                      or config.splitter == "random")
    tie_bits = jax.random.bits(jax.random.fold_in(key, 2), (), jnp.uint32) if randomized \
        else jnp.uint32(0)

    def subsets(depth, at):
        """``[len(at), k]`` int32, increasing along a row: the features that positions ``at``
        of level ``depth`` may split on, ``k = max_features`` drawn at random without
        replacement (the ``k`` largest of the position's ``D`` hashes)."""
        bits = (node_hash(seeds[0], depth, at, dims, xp=jnp) >> 1).astype(jnp.int32)
        return jnp.sort(_largest(bits, config.max_features), axis=1)

    def cut_draws(depth, at):
        """``[len(at), D]`` uniforms in [0, 1) (24 random bits): the random cut of each
        (position, feature)."""
        bits = node_hash(seeds[1], depth, at, dims, xp=jnp) >> 8
        return bits.astype(Z.dtype) * 2.0 ** -24

    if config.partition == "cart":
        rule = _cart_rule(Z, y, weight, config, None if config.max_features is None
                          else subsets, presorted,
                          cut_draws if config.splitter == "random" else None, edges, tie_bits)
        return rule, lambda state, *_: state, ()
    # the cycle visits coordinates 0..max_depth-1 (mod D) only: rank just those (the deepest
    # level never splits, so its coordinate's clamped rank is unused)
    spread = config.split == "spread"
    used = dims if spread else min(dims, max(1, config.max_depth))
    order = None if config.partition == "dyadic" and not spread else _column_order(Z[:, :used])
    cells = (jnp.zeros((W, dims), Z.dtype), jnp.ones((W, dims), Z.dtype)) \
        if config.partition == "dyadic" else ()
    # with the widest spread, every column's rows are kept sorted by (position, value) from
    # level to level (a stable partition per level) instead of sorted afresh, beside each
    # position's smallest and largest value per column
    by_position = (_rows_by_value(order[0], start, W), *_extremes(Z, start, W)) if spread \
        else ()

    def spread_split(pos, by_position, candidate):
        """``(feature [W], medians)``: the widest-spread coordinate of each position and, for
        KD, its values of weighted ranks ``floor((c - 1) / 2)`` and ``floor(c / 2)`` there
        (``()`` for dyadic, which cuts its cell's middle)."""
        by_value, smallest, largest = by_position
        kd = config.partition == "kd"

        def searched():
            blocks = _position_blocks(by_value, order[0], weight, pos, W)
            feature = _widest_spread(blocks, order[1], smallest, largest)
            return feature, _medians(blocks, order[1], feature) if kd else ()

        def all_rows_alike():     # every order statistic of a position is its one value
            feature = spread_rule(smallest, smallest, smallest, largest, xp=jnp).astype(jnp.int32)
            value = jnp.take_along_axis(smallest, feature[:, None], 1)[:, 0]
            return feature, (value, value) if kd else ()

        # a level whose candidates each hold copies of one row (repeated points of several
        # labels, which a dyadic tree halves down to its depth cap) needs no search
        varied = jnp.any(largest > smallest, axis=1)
        return jax.lax.cond(jnp.any(candidate & varied), searched, all_rows_alike)

    def rule(pos, state, depth, candidate):
        cells, by_position = state
        if spread:
            feature, medians = spread_split(pos, by_position, candidate)
        else:
            feature = jnp.full(W, depth % dims, jnp.int32)
            if config.partition == "kd":
                medians = _cycled_medians(order, weight, pos, feature, W)
        if config.partition == "dyadic":
            lo, hi = cells
            f = feature[:, None]
            threshold = (jnp.take_along_axis(lo, f, 1) + jnp.take_along_axis(hi, f, 1))[:, 0] / 2
        else:
            threshold = _median_thresholds(Z, pos, feature, W, *medians)
        return feature, threshold, jnp.ones(W, bool), jnp.zeros(W, bool)

    def advance(state, next_pos, splits, rank, feature, threshold):
        cells, by_position = state
        if config.partition == "dyadic":
            cells = _child_cells(cells, splits, rank, feature, threshold)
        if spread:
            smallest, largest = _extremes(Z, next_pos, W)
            # once no position holds two different rows, no level below searches the order
            by_value = jax.lax.cond(jnp.any(largest > smallest),
                                    lambda order: _children_in_order(order, next_pos, W),
                                    lambda order: order, by_position[0])
            by_position = (by_value, smallest, largest)
        return cells, by_position

    return rule, advance, (cells, by_position)


def _sortable(x):
    """Integers in the order of the floats ``x`` (their bits, negatives' magnitude bits flipped;
    the map is its own inverse): XLA sorts a lone integer array several times faster than floats
    or several arrays."""
    itype = jnp.int32 if x.dtype == jnp.float32 else jnp.int64
    bits = jax.lax.bitcast_convert_type(x, itype)
    return bits ^ ((bits >> (8 * x.dtype.itemsize - 1)) & jnp.iinfo(itype).max)


def _column_order(Z):
    """``(rank [D, n] int32, values [D, n])``: each value's rank in its column (equal values share
    the rank of the first) and every column sorted."""
    keys = _sortable(Z).T
    ordered = jnp.sort(keys, axis=1)
    rank = jax.vmap(lambda o, k: jnp.searchsorted(o, k, side="left"))(ordered, keys)
    values = jax.lax.bitcast_convert_type(_sortable(jax.lax.bitcast_convert_type(
        ordered, Z.dtype)), Z.dtype)
    return rank.astype(jnp.int32), values


def _segments(pos, rank, weight, W):
    """Rows sorted by (position, rank): ``(sorted ranks [n], cumulative weight [n], weight before
    each position [W], weight at each position [W])``. One integer sort of ``pos * n + rank``
    when it fits in the index type, else a sort on two keys. Equal keys are one run whose weight
    the cumulative sum adds at its first row, so a search in it lands on a run's first row."""
    n = pos.shape[0]
    if (W + 1) * n <= jnp.iinfo(pos.dtype).max:
        key = pos * n + rank
        ordered = jnp.sort(key)
        first = jnp.searchsorted(ordered, key, side="left")
        cumulative = jnp.cumsum(jax.ops.segment_sum(weight, first, num_segments=n))
        bounds = jnp.searchsorted(ordered, jnp.arange(W + 1, dtype=key.dtype) * n, side="left")
        ranks = ordered % n
    else:
        pos, ranks, weight = jax.lax.sort((pos, rank, weight), num_keys=2)
        cumulative = jnp.cumsum(weight)
        bounds = jnp.searchsorted(pos, jnp.arange(W + 1, dtype=pos.dtype), side="left")
    before = jnp.concatenate([jnp.zeros(1, cumulative.dtype), cumulative])[bounds]
    return ranks, cumulative, before[:-1], before[1:] - before[:-1]


def _order_statistic(ranks, cumulative, before, rank):
    """``[W]`` the column rank of the value of weighted rank ``rank`` (0-based) at each position:
    the first sorted row whose cumulative weight passes ``before + rank`` (an integer weight k:
    k copies)."""
    index = jnp.searchsorted(cumulative, before + rank, side="right")
    return ranks[jnp.minimum(index, ranks.shape[0] - 1)]


def _rows_by_value(rank, start, W):
    """``[D, n]`` int32: each column's rows in the order of their values (``rank`` ``[D, n]``),
    the rows of no node last: the rows by (position, value) at the root, where ``start``
    ``[n]`` puts every row of positive weight at position 0 and the others at ``W``."""
    n = rank.shape[1]
    key = jnp.where(start < W, rank, rank + n)
    return jnp.argsort(key, axis=1).astype(jnp.int32)


def _children_in_order(by_position, next_pos, W):
    """``[D, n]`` each column's rows by (next position, value) from ``by_position``, its rows by
    (position, value): a stable partition of each split node's rows into its children's (the
    ``k``-th split node's at ``2k``, ``2k + 1``), the rows of no node (``W``) last. The children
    keep their parent's order of values, so no sort: each row's new index is where its child's
    rows start plus the rows of that child before it, counted by cumulative sums."""
    n = by_position.shape[1]
    at = next_pos[by_position]                                          # [D, n]
    rows = jnp.bincount(next_pos, length=W + 1)
    start = jnp.cumsum(rows) - rows
    placed = at < W
    left, right = placed & (at % 2 == 0), placed & (at % 2 == 1)
    lefts_before = jnp.cumsum(left, axis=1, dtype=jnp.int32) - left
    rights_before = jnp.cumsum(right, axis=1, dtype=jnp.int32) - right
    # the rows of earlier nodes' left (right) children: all of them precede a node's rows
    earlier_lefts = jnp.cumsum(rows[0:W:2]) - rows[0:W:2]
    earlier_rights = jnp.cumsum(rows[1:W:2]) - rows[1:W:2]
    node = jnp.minimum(at // 2, W // 2 - 1)
    within = jnp.where(left, lefts_before - earlier_lefts[node],
                       jnp.where(right, rights_before - earlier_rights[node],
                                 jnp.arange(n) - lefts_before - rights_before))
    columns = jnp.arange(by_position.shape[0])[:, None]
    return jnp.zeros_like(by_position).at[columns, start[at] + within].set(by_position)


def _position_blocks(by_position, rank, weight, pos, W):
    """``(sorted ranks [D, n], cumulative weight [D, n], weight before each position [D, W],
    weight at each position [D, W], first row of each position [W + 1])`` of every column, from
    its rows by (position, value): what :func:`_segments` gives for one column from a sort, and
    where each position's rows start in it."""
    rows = jnp.bincount(pos, length=W + 1)
    start = (jnp.cumsum(rows) - rows).astype(jnp.int32)                  # [W + 1]
    cumulative = jnp.cumsum(weight[by_position], axis=1)
    before = jnp.concatenate([jnp.zeros_like(cumulative[:, :1]), cumulative], axis=1)[:, start]
    ranks = jnp.take_along_axis(rank, by_position, axis=1)
    return ranks, cumulative, before[:, :-1], before[:, 1:] - before[:, :-1], start


def _block_statistic(blocks, values, rank_of, column):
    """The value of weighted rank ``rank_of(c)`` (0-based) of each position's rows (total weight
    ``c``) in column ``column`` (``[D, W]`` or ``[W]`` int, broadcast against the positions;
    ``blocks``: :func:`_position_blocks`): :func:`_order_statistic`'s search, but only over the
    position's own rows, in as many halvings as the largest position needs."""
    ranks, cumulative, before, count, start = blocks
    W = start.shape[0] - 1
    column = jnp.broadcast_to(column, jnp.broadcast_shapes(jnp.shape(column), (W,)))
    at = jnp.arange(W)
    target = before[column, at] + rank_of(count[column, at])
    last = cumulative.shape[1] - 1
    low, high = jnp.broadcast_to(start[:W], column.shape), jnp.broadcast_to(start[1:], column.shape)
    halvings = jnp.ceil(jnp.log2(jnp.max(start[1:] - start[:W]) + 1.0)).astype(jnp.int32)

    def halve(_, bounds):                    # the first row whose cumulative weight passes target
        low, high = bounds
        middle = (low + high) // 2
        passed = cumulative[column, jnp.minimum(middle, last)] > target
        return jnp.where(passed, low, middle + 1), jnp.where(passed, middle, high)

    low, _ = jax.lax.fori_loop(0, halvings, halve, (low, high))
    return values[column, ranks[column, jnp.minimum(low, last)]]


def _segment_extreme(value, pos, W, largest: bool):
    """``[W, ...]`` max (or min) of ``value`` ``[n, ...]`` at each position."""
    reduce = jax.ops.segment_max if largest else jax.ops.segment_min
    return reduce(value, pos, num_segments=W + 1)[:W]


def _cycled_medians(order, weight, pos, feature, W):
    """``([W], [W])`` the values of weighted ranks ``floor((c - 1) / 2)`` and ``floor(c / 2)``
    of each position's rows (total weight ``c``) in its split feature, from one sort of the
    level's rows by (position, value)."""
    rank, values = order
    f = jnp.concatenate([feature, jnp.zeros(1, feature.dtype)])[pos]
    ranks, cumulative, before, count = _segments(pos, rank[f, jnp.arange(pos.shape[0])], weight,
                                                 W)
    low = values[feature, _order_statistic(ranks, cumulative, before, jnp.floor((count - 1) / 2))]
    high = values[feature, _order_statistic(ranks, cumulative, before, jnp.floor(count / 2))]
    return low, high


def _medians(blocks, values, feature):
    """:func:`_cycled_medians` from every column's blocks (:func:`_position_blocks`)."""
    return (_block_statistic(blocks, values, lambda c: jnp.floor((c - 1) / 2), feature),
            _block_statistic(blocks, values, lambda c: jnp.floor(c / 2), feature))


def _median_thresholds(Z, pos, feature, W, low, high):
    """``[W]`` the KD threshold (:func:`jaxtree.build.median_rule`) of each position from the
    values ``low``, ``high`` of weighted ranks ``floor((c - 1) / 2)`` and ``floor(c / 2)`` of
    its rows in its split feature."""
    f = jnp.concatenate([feature, jnp.zeros(1, feature.dtype)])[pos]
    value = jnp.take_along_axis(Z, f[:, None], axis=1)[:, 0]
    largest = _segment_extreme(value, pos, W, True)
    under = jnp.where(value < jnp.concatenate([largest, jnp.full(1, -jnp.inf)])[pos], value,
                      -jnp.inf)
    below = _segment_extreme(under, pos, W, True)
    return median_rule(low, high, largest, below, below > -jnp.inf, xp=jnp)


def _widest_spread(blocks, values, smallest, largest):
    """``[W]`` the :func:`jaxtree.build.spread_rule` coordinate of each position, from weighted
    quartiles of its rows in every column (``blocks``: :func:`_position_blocks`) and their
    extremes ``[W, D]``."""
    every_column = jnp.arange(values.shape[0])[:, None]
    q1 = _block_statistic(blocks, values, lambda c: jnp.floor((c - 1) / 4), every_column).T
    q3 = _block_statistic(blocks, values, lambda c: jnp.ceil(3 * (c - 1) / 4), every_column).T
    return spread_rule(q1, q3, smallest, largest, xp=jnp).astype(jnp.int32)


def _extremes(Z, pos, W):
    """``([W, D], [W, D])`` the smallest and largest value of each column at each position
    (+inf and -inf where it holds no row)."""
    return _segment_extreme(Z, pos, W, False), _segment_extreme(Z, pos, W, True)


def _bin_edges(Z, weight, bins, missing: bool, presorted=None):
    """``[D, K-1]`` the quantile edges of :func:`jaxtree.cart.bin_edges` over the weighted rows,
    with repeats kept (:func:`_distinct_edges` moves them out) and edges at or above a column's
    largest value set to +inf (an infinite edge only adds empty bins, whose cuts score -inf). With
    ``missing``, a column's NaN rows count as weight 0 (its quantiles are its observed values')."""
    dims, n = Z.shape[1], Z.shape[0]
    if missing:
        weights = jnp.where(jnp.isnan(Z), 0, weight[:, None]).T                   # [D, n]
        Z = jnp.where(jnp.isnan(Z), jnp.inf, Z)
    else:
        weights = jnp.broadcast_to(weight, (dims, n))

    def column_edges(rank, values, column, column_weight):
        ranks = jnp.ceil(jnp.arange(1, bins, dtype=Z.dtype) * column_weight.sum() / bins) - 1
        # the weight of each distinct value at its first sorted position (rows of weight 0 add
        # nothing), so the search lands on the value of weighted rank r
        cumulative = jnp.cumsum(jax.ops.segment_sum(column_weight, rank, num_segments=n))
        edges = values[jnp.searchsorted(cumulative, ranks, side="right")]
        largest = jnp.where(column_weight > 0, column, -jnp.inf).max()
        return jnp.where(edges < largest, edges, jnp.inf)

    order = _column_order(Z) if presorted is None else presorted
    return jax.vmap(column_edges)(*order, Z.T, weights)


def _distinct_edges(edges):
    """``[D, K-1]``: each row's distinct finite edges first, in increasing order, then +inf
    (as :func:`jaxtree.cart.bin_edges` lists them), from sorted ``edges`` with repeats: a cut's
    index then counts distinct edges, as the middle of a gap (:func:`_middle_cut`) needs."""
    repeat = jnp.concatenate([jnp.zeros_like(edges[:, :1], bool),
                              edges[:, 1:] == edges[:, :-1]], axis=1)
    return jnp.sort(jnp.where(repeat, jnp.inf, edges), axis=1)


def _cut_candidates(hist, has_edge, criterion: str, missing: bool):
    """Every candidate split of every (slot, feature) from class histograms ``hist``
    ``[m, F, L, K (+1)]`` (with ``missing``, bin K holds the rows missing in that feature) and
    ``has_edge`` ``[m, F, K-1]``.

    Returns ``(score [m, F, C], cut [C], right [C])``: candidate c cuts at bin edge ``cut[c]``
    and sends the missing rows right iff ``right[c]``. Without ``missing`` the candidates are the
    K-1 edges. With it, each edge twice — missing left, then right (so a tie, as where no row is
    missing, keeps the left one and the first edge, as without ``missing``) — and last the split
    of the missing rows from the others (edge K-1: +inf, missing right)."""
    if not missing:
        bins = hist.shape[3]
        return (cut_scores(hist, criterion, has_edge, xp=jnp),
                np.arange(bins - 1), np.zeros(bins - 1, bool))
    observed, lost = hist[..., :-1], hist[..., -1:]
    bins = observed.shape[3]
    no = jnp.zeros_like(has_edge[..., :1])
    # missing left: their bin first (its own cut, the missing-only split, is taken below)
    left = cut_scores(jnp.concatenate([lost, observed], axis=3), criterion,
                      jnp.concatenate([no, has_edge], axis=-1), xp=jnp)[:, :, 1:]
    right = cut_scores(jnp.concatenate([observed, lost], axis=3), criterion,
                       jnp.concatenate([has_edge, ~no], axis=-1), xp=jnp)
    paired = jnp.stack([left, right[:, :, :-1]], axis=3).reshape(*left.shape[:2], -1)
    score = jnp.concatenate([paired, right[:, :, -1:]], axis=2)
    cut = np.append(np.repeat(np.arange(bins - 1), 2), bins - 1)
    side = np.append(np.tile([False, True], bins - 1), True)
    return score, cut, side


def _largest(values, k: int):
    """``[m, k]`` int32: the columns of the ``k`` largest of each row of ``values`` ``[m, D]``
    (non-negative; equal values: the smaller column first), as ``lax.top_k``'s indices, by k
    rounds of an argmax: on a CPU ``top_k`` sorts every row (a letter level's ``[64, 16]``, k = 4:
    57 µs against 6 µs; epileptic's ``[256, 178]``, k = 13: 4.5 ms against 0.8 ms)."""
    column = jnp.arange(values.shape[1], dtype=jnp.int32)

    def take_largest(j, carry):
        rest, chosen = carry
        largest = jnp.argmax(rest, axis=1).astype(jnp.int32)
        return (jnp.where(column == largest[:, None], -1, rest),
                chosen.at[:, j].set(largest))

    chosen = jnp.zeros((values.shape[0], k), jnp.int32)
    return jax.lax.fori_loop(0, k, take_largest, (values, chosen))[1]


def _cart_rule(Z, y, weight, config: GrowConfig, subsets, presorted=None, cut_draws=None,
               edges=None, tie_bits=0):
    """The binned CART split rule (:func:`jaxtree.cart.best_binned_splits`'s, node for node).
    ``subsets``: None (every feature) or ``(depth, at) -> [len(at), k]`` the features that
    positions ``at`` may split on; then only those k columns are counted and scored.
    ``cut_draws``: None (every cut scored), or ``(depth, at) -> [len(at), D]`` uniforms: the
    random splitter's cuts (:func:`_random_cuts`). ``edges``: None (the quantiles of these
    rows), or the ``[D, K-1]`` edges to use."""
    W, (n, dims), L = config.width, Z.shape, config.num_classes
    if edges is None:
        edges = _bin_edges(Z, weight, config.bins, config.missing, presorted)   # [D, bins-1]
    # every finite edge is among the first histogram_bins(config) - 1 distinct ones: the rest
    # are +inf, whose bins stay empty, and are not counted
    edges = _distinct_edges(jnp.asarray(edges, Z.dtype))[:, :histogram_bins(config) - 1]
    K = edges.shape[1] + 1
    # the unrolled binary search: the default scan's loop took 3.7 ms against 2.6 ms for
    # spam's 4,096 rows × 57 features, once per grown tree
    binned = jax.vmap(lambda e, c: jnp.searchsorted(e, c, side="left", method="scan_unrolled"),
                      out_axes=1)(edges, Z.T).astype(jnp.int32)              # [n, D]
    seed = jnp.uint32(tie_seed(config.random_state)) ^ jnp.asarray(tie_bits, jnp.uint32)
    has_edge = jnp.isfinite(edges)
    k = dims if subsets is None else config.max_features
    if config.missing:                  # bin K: missing; its cut's threshold is +inf
        binned = jnp.where(jnp.isnan(Z), K, binned)
        edges = jnp.concatenate([edges, jnp.full((dims, 1), jnp.inf, edges.dtype)], axis=1)
    bins = K + config.missing

    def search(width, slot, depth, at):
        """The rule on ``width`` candidate slots: row i counts in slot ``slot[i]`` (dropped at
        ``width`` or above), slot j is position ``at[j]`` of the level; padded to W slots."""
        priority = tie_priority(seed, depth, W, dims, xp=jnp)[at]         # [width, D]
        if subsets is None:
            features = jnp.broadcast_to(jnp.arange(dims, dtype=jnp.int32), (width, dims))
            row_bins = binned
        else:
            features = subsets(depth, at)                                  # [width, k]
            priority = jnp.take_along_axis(priority, features, axis=1)
            row_features = jnp.concatenate([features, features[:1]])[jnp.minimum(slot, width)]
            row_bins = jnp.take_along_axis(binned, row_features, axis=1)   # [n, k]
        if cut_draws is not None:
            u = jnp.take_along_axis(cut_draws(depth, at), features, axis=1)  # [width, k]
            feature, cut, found, missing_right = _random_cuts(
                slot, row_bins, y, weight, u, features, has_edge, priority, width, K, L,
                config.criterion)
            pad = (0, W - width)
            return (jnp.pad(feature, pad), jnp.pad(edges[feature, cut], pad),
                    jnp.pad(found, pad), jnp.pad(missing_right, pad))
        # each row's (slot, j-th feature of its slot, class, bin) cell
        segment = ((jnp.minimum(slot, width)[:, None] * k + jnp.arange(k, dtype=jnp.int32))
                   * L + y[:, None]) * bins + row_bins
        # (the rows of slot ``width`` fall past the last segment: dropped, with no slice to copy)
        hist = jax.ops.segment_sum(jnp.broadcast_to(weight[:, None], (n, k)).reshape(-1),
                                   segment.reshape(-1), num_segments=width * k * L * bins)
        hist = hist.reshape(width, k, L, bins)
        slot_has_edge = has_edge[features]                                 # [width, k, K-1]
        score, cut_of, right_of = _cut_candidates(hist, slot_has_edge, config.criterion,
                                                  config.missing)
        feature_best = score.max(axis=2)
        first = jnp.argmax(near_best(score, feature_best[:, :, None], xp=jnp), axis=2)
        feature_cut = _middle_cut(first, hist, slot_has_edge, config.missing)
        chosen, candidate, found = pick_split(feature_best, feature_cut, priority, xp=jnp)
        feature = jnp.take_along_axis(features, chosen[:, None], axis=1)[:, 0]
        cut = jnp.asarray(cut_of)[candidate]
        missing_right = _missing_side(hist[jnp.arange(width), chosen], cut,
                                      jnp.asarray(right_of)[candidate], config.missing)
        pad = (0, W - width)
        return (jnp.pad(feature, pad), jnp.pad(edges[feature, cut], pad),
                jnp.pad(found, pad), jnp.pad(missing_right, pad))

    # only the level's candidates are searched, packed into the first slots, at the smallest
    # width that holds them: the cost of a level follows its candidates, not W. Rungs a factor
    # 2 apart (W/32 .. W): with rungs W/32, W/4, W a level of 70 candidates in a 256-wide
    # letter tree paid for 256 (a forest's 100 trees grew in 3.5 s against 7.6 s)
    widths = sorted({max(1, W >> shift) for shift in range(6)})

    def rule(pos, state, depth, candidate):
        slot_of = jnp.where(candidate, jnp.cumsum(candidate, dtype=jnp.int32) - 1, W)
        at = jnp.zeros(W, jnp.int32).at[slot_of].set(jnp.arange(W, dtype=jnp.int32),
                                                     mode="drop")
        slot = jnp.concatenate([slot_of, jnp.full(1, W, jnp.int32)])[pos]
        branch = jnp.searchsorted(jnp.array(widths), candidate.sum(), side="left")
        feature, threshold, found, missing_right = jax.lax.switch(
            branch, [lambda s, d, a, width=width: search(width, s, d, a[:width])
                     for width in widths], slot, depth, at)
        back = jnp.minimum(slot_of, W - 1)
        return feature[back], threshold[back], found[back] & candidate, missing_right[back]

    return rule


def _random_cuts(slot, row_bins, y, weight, u, features, has_edge, priority, width, bins,
                 num_classes, criterion):
    """The random splitter on ``width`` slots: for each slot's j-th feature the cut after bin
    ``lowest + floor(u · (highest - lowest))`` (the slot's lowest and highest bin of positive
    weight in that feature: both children non-empty), scored as the best splitter scores a cut;
    the best feature by :func:`jaxtree.cart.pick_split`. Only ``[width, k, L]`` class counts left
    of the cuts are summed (the best splitter sums ``[width, k, bins, L]`` histograms). Returns
    ``(feature, cut, found, missing_right)`` ``[width]`` (missing to the larger child)."""
    n, k = row_bins.shape
    L = num_classes
    rows = jnp.minimum(slot, width)
    cell = (rows[:, None] * k + jnp.arange(k, dtype=jnp.int32)).reshape(-1)      # [n k]
    live = (weight > 0)[:, None]
    cells = (width + 1) * k
    lowest = jax.ops.segment_min(jnp.where(live, row_bins, bins).reshape(-1), cell,
                                 num_segments=cells)[:width * k].reshape(width, k)
    highest = jax.ops.segment_max(jnp.where(live, row_bins, -1).reshape(-1), cell,
                                  num_segments=cells)[:width * k].reshape(width, k)
    spread = jnp.maximum(highest - lowest, 0)
    cut = jnp.clip(lowest + jnp.floor(u * spread).astype(jnp.int32), 0, bins - 2)
    go_left = row_bins <= jnp.concatenate([cut, cut[:1]])[rows]                   # [n, k]
    left = jax.ops.segment_sum((weight[:, None] * go_left).reshape(-1),
                               cell * L + jnp.repeat(y, k), num_segments=cells * L)
    left = left[:width * k * L].reshape(width, k, L)
    total = jax.ops.segment_sum(weight, rows * L + y, num_segments=(width + 1) * L)
    total = total[:width * L].reshape(width, 1, L)
    valid = (spread > 0) & jnp.take_along_axis(has_edge[features], cut[..., None], axis=2)[..., 0]
    score = cut_scores(jnp.stack([left, total - left], axis=3), criterion, valid[..., None],
                       xp=jnp)[..., 0]                                            # [width, k]
    chosen, chosen_cut, found = pick_split(score, cut, priority, xp=jnp)
    feature = jnp.take_along_axis(features, chosen[:, None], axis=1)[:, 0]
    sides = left[jnp.arange(width), chosen].sum(axis=1)
    larger_right = total[:, 0].sum(axis=1) - sides >= sides
    return feature, chosen_cut, found, larger_right


def _middle_cut(first, hist, has_edge, missing: bool):
    """``[m, F]`` the candidate (:func:`_cut_candidates`) ``first`` ``[m, F]`` moved to the
    middle of the gap between the node's values that its edge cuts
    (:func:`jaxtree.cart.middle_cut`), on the same side for the missing rows (so that where
    none is missing the cut is the one without ``missing``); the split of the missing rows from
    the others stays. ``hist`` ``[m, F, L, K (+1)]``, ``has_edge`` ``[m, F, K-1]``."""
    if not missing:
        return middle_cut(gap_joins(hist, has_edge), first, xp=jnp)
    joins = gap_joins(hist[..., :-1], has_edge)
    edge, side = first // 2, first % 2
    last = 2 * joins.shape[2]                      # the missing-only split
    middle = middle_cut(joins, jnp.minimum(edge, joins.shape[2] - 1), xp=jnp)
    return jnp.where(first == last, first, 2 * middle + side)


def _missing_side(hist, cut, scored_right, missing: bool):
    """``[m]`` bool, where each node's missing values go: ``scored_right`` (the better side)
    where the node had rows missing in its split feature, else the child of larger weight (ties
    right, as scikit-learn's trees). ``hist`` ``[m, L, K (+1)]``: the node's class histogram in
    its split feature; ``cut`` ``[m]``: its cut's bin edge."""
    weights = hist.sum(axis=1)
    observed = weights[:, :-1] if missing else weights
    left = jnp.take_along_axis(jnp.cumsum(observed, axis=1),
                               jnp.minimum(cut, observed.shape[1] - 1)[:, None], axis=1)[:, 0]
    larger_right = observed.sum(axis=1) - left >= left
    if not missing:
        return larger_right
    return jnp.where(weights[:, -1] > 0, scored_right, larger_right)
