"""A label-aware T0: CART (greedy Gini or entropy splits), grown level by level with array ops.

Every node of a level looks for its best axis-aligned split at once: per feature, the points of
the level are sorted by (node, value), prefix class counts along that order give the class
counts left of every cut, and a per-node maximum picks the best cut (no loop over nodes; a loop
over levels and features). The rule is scikit-learn's ``DecisionTreeClassifier`` with
``max_features=None``: a cut lies between two consecutive distinct values of a node's points,
the threshold is their midpoint (``<=`` goes left), the best cut maximises the impurity
decrease; ties between features go to a random one (a pseudo-random priority per node and
feature, :func:`tie_priority`, seeded by ``random_state``: scikit-learn visits features in a random
order per node and keeps the first best), then to the smaller threshold. The priority is an
integer hash of (seed, depth, node, feature), so the JAX builder (:mod:`jaxtree.grow`) computes
the very same one inside ``jit``. Random, not "smallest feature index": on letter the
fixed rule always favoured the box-position features 0 and 1 in the many small tied nodes, and
the grown tree's test error was about 1 point worse than scikit-learn's (0.1245 against 0.112 on
one split; 0.112 with random ties). A node is split unless it is pure, holds fewer than
``min_split`` points, sits at ``max_depth`` or has all its points equal. Values count as distinct
when they differ at all (scikit-learn: by more than 1e-7).

The tree is grown to purity by default, so it is deep (letter: ~30 levels) and packed into the
compact layout (:mod:`jaxtree.compact`) by ``layout="auto"``. Features are not scaled.

**Binned mode** (``bins=K``, as LightGBM's and XGBoost's ``hist`` methods): every feature is cut
once, at the root, into at most K bins by its quantiles — the edges are the distinct values among
the order statistics of ranks ``ceil(j·n/K) − 1``, j = 1..K−1, below the column's largest value
(a value held by fewer than n/K rows may share a bin with a neighbour) — and a node's cuts are
the bin edges: the score of "bins ≤ b go left" comes from the node's class histogram per bin, and
the threshold is edge b itself (``<= edge`` goes left, as the binning does). Consecutive edges
split a node's rows alike when the bins between them hold none of its rows; of such a run the
cut is the middle edge (:func:`middle_cut`), the binned form of a midpoint between the node's
values (the first edge would hug the values left of the gap). The histograms are
sums of per-row counts, so rows spread over processes give the same tree as rows in one place
(:mod:`jaxtree.distributed`); with ``K ≥ n`` every distinct value is an edge and the binned tree
splits the training rows exactly as the exact one (its thresholds are edges between the node's
values, not midpoints). Binned scores tie when within a relative ``TIE_TOLERANCE``
(:func:`near_best`): the same rule in float32 (JAX) and float64 (NumPy) then picks the same cut,
as exact equality of rounded scores would not.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.build import (GrownLevel, check_features, check_labels, column_order, pack,
                           sorted_node_rank_keys)
from jaxtree.validation import check_sample_weight
from jaxtree.collective import LOCAL, order_statistics
from jaxtree.tree import Tree

CRITERIA = ("gini", "entropy")
# histogram entries (node, feature, bin, class) counted and reduced at once by the binned search
_HISTOGRAM_BUDGET = 2 ** 22
#: binned scores within this relative distance of a node's best tie (module docstring)
TIE_TOLERANCE = 1e-6
_GOLDEN, _MIX1, _MIX2, _NODE, _FEATURE = 0x9E3779B1, 0x85EBCA6B, 0xC2B2AE35, 0x27D4EB2F, 0x165667B1


def cart_tree(X, y, max_depth: Optional[int] = None, min_split: int = 2,
              criterion: str = "gini", layout: str = "auto", random_state=0,
              bins: Optional[int] = None, sample_weight=None) -> Tree:
    """CART tree T0 on ``X`` ``[n, D]`` with labels ``y`` ``[n]`` (ints in ``0..L-1``).

    Args:
      X: ``[n, D]`` training points.
      y: ``[n]`` int labels.
      max_depth: largest depth of a node; None grows until every node is pure or small.
      min_split: nodes with fewer points are not split (>= 2; scikit-learn's
        ``min_samples_split``).
      criterion: ``"gini"`` or ``"entropy"``.
      layout: ``"auto"`` (the layout that takes less memory), ``"compact"`` or ``"complete"``.
      random_state: seed (or ``numpy.random.Generator``) of the tie-breaking between features
        (:func:`tie_seed`).
      bins: None (exact: every cut between distinct values) or K >= 2: cuts at the edges of at
        most K quantile bins per feature (module docstring, "Binned mode").
      sample_weight: None or ``[n]`` weights >= 0 (exact mode only; :func:`jaxtree.grow_tree`
        grows weighted binned trees): class counts, ``min_split`` and the impurities count each
        row with its weight, a row of weight 0 is left out, and an integer weight k grows the
        tree of the row repeated k times.

    Returns:
      a :class:`jaxtree.Tree` on unscaled features (``shift`` 0, ``inv_scale`` 1): each split
      is the midpoint between two consecutive distinct values of its feature.

    Example:
        The Gini split at 3.5 leaves a pure right side (slot 3 of the compact layout, two slots
        per level); the left side needs two more splits:

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.arange(8.0)[:, None]
        >>> y = np.array([0, 0, 1, 0, 1, 1, 1, 1])
        >>> tree = jaxtree.cart_tree(X, y)
        >>> tree.depth, np.asarray(tree.threshold)[np.asarray(tree.internal)].tolist()
        (3, [3.5, 1.5, 2.5])
        >>> jaxtree.leaf_of(tree, X).tolist()
        [4, 4, 6, 7, 3, 3, 3, 3]
    """
    X = check_features(X)
    y = check_labels(y, X.shape[0])
    if max_depth is not None and (not isinstance(max_depth, (int, np.integer)) or max_depth < 0):
        raise ValueError(f"max_depth must be None or an integer >= 0; got {max_depth!r}")
    if not isinstance(min_split, (int, np.integer)) or min_split < 2:
        raise ValueError(f"min_split must be an integer >= 2; got {min_split!r}")
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}; got {criterion!r}")
    check_bins(bins)
    if sample_weight is not None:
        check_sample_weight(sample_weight, X.shape[0])
        if bins is not None:
            raise ValueError("sample_weight needs the exact split search (bins=None); grow a "
                             "weighted binned tree with jaxtree.grow_tree")
        sample_weight = np.asarray(sample_weight, np.float64)
        keep = sample_weight > 0
        X, y, sample_weight = X[keep], y[keep], sample_weight[keep]
    return grow_cart_tree(X, y, max_depth, min_split, criterion, layout, random_state, bins,
                          weight=sample_weight)


def grow_cart_tree(X, y, max_depth, min_split, criterion, layout, random_state, bins,
                   reducer=LOCAL, weight=None) -> Tree:
    """:func:`cart_tree` on checked input; with ``bins``, the rows may be spread over holders
    that ``reducer`` combines (:func:`grow_cart`); ``weight``: positive row weights or None."""
    levels = grow_cart(X, y, max_depth, min_split, criterion, tie_seed(random_state), bins,
                       reducer, weight)
    dims = X.shape[1]
    return pack(levels, np.zeros(dims, X.dtype), np.ones(dims, X.dtype), clip=False,
                layout=layout)


def tie_seed(random_state) -> int:
    """The uint32 seed of :func:`tie_priority` drawn from ``random_state`` (an int, None or a
    ``numpy.random.Generator``, as ``numpy.random.default_rng`` takes)."""
    return int(np.random.default_rng(random_state).integers(2 ** 32, dtype=np.uint32))


def tie_priority(seed, depth, m: int, dims: int, xp=np):
    """``[m, dims]`` int32 in ``[1, 2**30]``: the priority of each (node, feature) of level
    ``depth`` in ties between features (higher wins; equal priorities: the smaller feature),
    from :func:`node_hash` of nodes ``0..m-1``."""
    h = node_hash(seed, depth, xp.arange(m), dims, xp)
    return (h >> xp.uint32(2)).astype(xp.int32) + 1


def node_hash(seed, depth, nodes, dims: int, xp=np):
    """``[len(nodes), dims]`` uint32: an integer hash (murmur3's finalizer) of (seed, depth, node,
    feature) in wrapping uint32 arithmetic, so NumPy and ``jax.numpy`` (``xp``; ``seed``,
    ``depth`` and ``nodes`` may be traced) give the same numbers. Cheap random bits per (node,
    feature) of a level: elementwise integer arithmetic, where a counter-based generator's
    rounds cost a grown tree's level more than its split search."""
    u32 = xp.uint32
    node = xp.asarray(nodes).astype(u32)[:, None] * u32(_NODE)
    feature = xp.arange(dims, dtype=u32)[None, :] * u32(_FEATURE)
    level = xp.zeros((1, 1), u32) + xp.asarray(depth).astype(u32)    # arrays wrap silently
    level = _mix32(xp.asarray(seed, u32) ^ (level * u32(_GOLDEN)), xp)
    return _mix32(_mix32(level ^ node, xp) ^ feature, xp)


def _mix32(h, xp):
    h = h ^ (h >> xp.uint32(16))
    h = h * xp.uint32(_MIX1)
    h = h ^ (h >> xp.uint32(13))
    h = h * xp.uint32(_MIX2)
    return h ^ (h >> xp.uint32(16))


def near_best(score, best, xp=np):
    """True where ``score`` ties with ``best`` (both finite scores, broadcast): within the relative
    ``TIE_TOLERANCE`` below it (module docstring, "Binned mode")."""
    return (score > -xp.inf) & (score >= best - TIE_TOLERANCE * xp.abs(best))


def middle_cut(joins, first, xp=np):
    """``[...]`` the middle (lower middle on an even run) of the run of cuts that split a node's
    rows as cut ``first`` ``[...]`` does: cut c joins the run when ``joins[..., c]``
    (``[..., C]``: bin c holds none of the node's rows and edge c exists, :func:`gap_joins`).
    Those cuts score the same; the middle one is the binned form of a midpoint between the
    node's values, where the first would hug the values left of the gap."""
    index = xp.arange(joins.shape[-1])
    broken = ~joins & (index > first[..., None])
    end = xp.where(broken.any(axis=-1), xp.argmax(broken, axis=-1) - 1, joins.shape[-1] - 1)
    return (first + end) // 2


def gap_joins(hist, has_edge):
    """``[m, F, K-1]`` bool, :func:`middle_cut`'s ``joins``: cut c ("bins <= c go left") splits
    the node's rows as cut c-1 does — bin c is empty in the class histograms ``hist``
    ``[m, F, L, K]`` — and its edge exists (``has_edge`` ``[F, K-1]``)."""
    return (hist.sum(axis=2)[..., :-1] == 0) & has_edge


def pick_split(feature_best, feature_cut, priority, xp=np):
    """Per node, the feature chosen among those whose best score ``feature_best`` ``[m, D]``
    ties with the node's best (:func:`near_best`): the one of highest ``priority`` ``[m, D]``
    (:func:`tie_priority`; the first on equal priorities). Returns ``(feature [m], cut [m],
    found [m])``: ``cut`` is ``feature_cut`` ``[m, D]`` at the chosen feature; ``found`` is
    False where no feature has a cut (every score -inf)."""
    near = near_best(feature_best, feature_best.max(axis=1, keepdims=True), xp)
    chosen = xp.argmax(xp.where(near, priority, 0), axis=1)
    cut = xp.take_along_axis(feature_cut, chosen[:, None], axis=1)[:, 0]
    return chosen, cut, near.any(axis=1)


def check_bins(bins) -> None:
    """Raise unless ``bins`` is None or an integer >= 2."""
    if bins is not None and (not isinstance(bins, (int, np.integer)) or isinstance(bins, bool)
                             or bins < 2):
        raise ValueError(f"bins must be None (exact splits) or an integer >= 2; got {bins!r}")


def grow_cart(X: np.ndarray, y: np.ndarray, max_depth: Optional[int], min_split: int,
              criterion: str, seed: int, bins: Optional[int] = None,
              reducer=LOCAL, weight=None) -> list[GrownLevel]:
    """Grow the CART tree level by level; returns the levels for :func:`jaxtree.build.pack`.

    ``seed``: of :func:`tie_priority`. With ``bins``, the rows may be spread over holders that
    ``reducer`` combines
    (:mod:`jaxtree.collective`): each passes its block and all grow the levels of all rows.
    ``weight``: None (every row counts 1) or ``[n]`` positive row weights (exact mode).
    """
    n, dims = X.shape
    num_classes = int(reducer.max(np.array([y.max() + 1 if n else 0]))[0])
    if weight is not None and bins is not None:
        raise ValueError("row weights need the exact split search (bins=None)")
    if bins is None:
        if reducer is not LOCAL:
            raise ValueError("the exact CART split search needs every row in one place; give "
                             "bins to grow from histograms")
        rank = column_order(X)[0]             # [n, D] each value's rank in its column

        def search(points, node, counts, candidate, priority):
            return best_splits(X[points], y[points], rank[points], node, counts, candidate,
                               criterion, priority, None if weight is None else weight[points])
    else:
        edges = bin_edges(X, bins, reducer)
        binned = bin_index(X, edges)

        def search(points, node, counts, candidate, priority):
            return best_binned_splits(binned[points], y[points], node, counts, candidate,
                                      criterion, priority, edges, reducer)

    node = np.zeros(n, np.int64)          # node of each live point within the level
    points = np.arange(n)                 # points still in nodes that split
    parent = np.array([-1])
    levels = []
    depth = 0
    while True:
        m = parent.shape[0]
        counts = reducer.sum(np.bincount(
            node * num_classes + y[points], None if weight is None else weight[points],
            minlength=m * num_classes).reshape(m, num_classes))
        total = counts.sum(axis=1)
        candidate = (total >= min_split) & (counts.max(axis=1) < total)
        if max_depth is not None:
            candidate &= depth < max_depth
        priority = tie_priority(seed, depth, m, dims)
        feature, threshold = search(points, node, counts, candidate, priority)
        splits = feature >= 0
        levels.append(GrownLevel(parent, splits, np.maximum(feature, 0), threshold))
        if not splits.any():
            return levels
        # children of split node k are 2*rank(k) and 2*rank(k)+1 in the next level
        child_rank = np.cumsum(splits) - 1
        live = splits[node]
        node, points = node[live], points[live]
        go_right = X[points, feature[node]] > threshold[node]
        node = 2 * child_rank[node] + go_right
        parent = np.repeat(np.flatnonzero(splits), 2)
        depth += 1


def bin_edges(X: np.ndarray, bins: int, reducer=LOCAL) -> list[np.ndarray]:
    """Per feature, the sorted bin edges (module docstring, "Binned mode") of the rows of ``X``
    ``[n, D]`` over all holders: exact order statistics (:func:`jaxtree.collective.order_statistics`),
    so every split of the rows gives the same edges."""
    quantiles = quantile_edges(X, bins, reducer)
    return [np.unique(q[np.isfinite(q)]) for q in quantiles]


def quantile_edges(X: np.ndarray, bins: int, reducer=LOCAL) -> np.ndarray:
    """``[D, bins - 1]`` each feature's values of rank ``ceil(i·n / bins) - 1``, ``i = 1 ..
    bins - 1``, over the rows of all holders, with repeats kept and +inf at or above the
    feature's largest value: :func:`bin_edges` before the repeats are dropped, the form that
    :func:`jaxtree.grow_tree` takes as ``edges``."""
    n = int(reducer.sum(np.array([X.shape[0]], np.int64))[0])
    ranks = -(-np.arange(1, bins) * n // bins) - 1
    quantiles = order_statistics(X, np.zeros(X.shape[0], np.int64), ranks[None], reducer)[0]
    largest = reducer.max(X.max(axis=0) if len(X) else np.full(X.shape[1], -np.inf))
    return np.where(quantiles < largest[:, None], quantiles, np.inf).astype(X.dtype)


def bin_index(X: np.ndarray, edges: list[np.ndarray]) -> np.ndarray:
    """``[n, D]`` int32: each value's bin, the number of its feature's edges below it (so bin
    ``<= b`` holds exactly the values ``<= edges[b]``)."""
    return np.stack([np.searchsorted(e, X[:, f], side="left") for f, e in enumerate(edges)],
                    axis=1).astype(np.int32)


def best_binned_splits(binned: np.ndarray, y: np.ndarray, node: np.ndarray, counts: np.ndarray,
                       candidate: np.ndarray, criterion: str, priority: np.ndarray,
                       edges: list[np.ndarray], reducer=LOCAL) -> tuple[np.ndarray, np.ndarray]:
    """Best bin-edge cut of every candidate node of a level, from class histograms per bin.

    Args:
      binned: ``[k, D]`` the level's points' bins (:func:`bin_index`); y: ``[k]`` labels.
      node: ``[k]`` node of each point (``0..m-1``); counts: ``[m, L]`` class counts per node
        (over all holders).
      candidate, criterion, priority: as :func:`best_splits`.
      edges: per feature, its bin edges (:func:`bin_edges`).
      reducer: sums the histograms over the holders of rows.

    Returns:
      as :func:`best_splits`: ``feature [m]`` (-1 where no cut) and ``threshold [m]`` (the edge).

    The score of a cut is :func:`best_splits`'s, from the left and right class counts; scores
    tie within :func:`near_best`, and ties go to the feature of higher priority
    (:func:`pick_split`), then to the smallest edge, moved to the middle of the gap between the
    node's values that it cuts (:func:`middle_cut`). The histograms ``[nodes, features,
    L, K]`` are counted and reduced in blocks of about 4M entries.
    """
    m, num_classes = counts.shape
    dims = binned.shape[1]
    dtype = edges[0].dtype if edges else np.float64
    feature = np.full(m, -1, np.int64)
    threshold = np.zeros(m, dtype)
    nodes = np.flatnonzero(candidate)
    if not len(nodes):
        return feature, threshold
    num_bins = max(len(e) for e in edges) + 1
    per_node = num_bins * num_classes
    node_block = max(1, _HISTOGRAM_BUDGET // per_node)
    feature_block = max(1, _HISTOGRAM_BUDGET // (min(len(nodes), node_block) * per_node))
    index = np.full(m, -1, np.int64)
    for b0 in range(0, len(nodes), node_block):
        block = nodes[b0:b0 + node_block]
        index[block] = np.arange(len(block))
        rows = np.flatnonzero(index[node] >= 0)
        feature_best = np.empty((len(block), dims))
        feature_cut = np.empty((len(block), dims), np.int64)
        for f0 in range(0, dims, feature_block):
            features = np.arange(f0, min(dims, f0 + feature_block))
            slot = ((index[node[rows], None] * len(features) + features - f0) * num_classes
                    + y[rows, None]) * num_bins + binned[rows][:, features]
            hist = np.bincount(slot.ravel(), minlength=len(block) * len(features) * per_node)
            hist = reducer.sum(hist).reshape(len(block), len(features), num_classes, num_bins)
            cuts = np.array([len(edges[f]) for f in features])
            has_edge = np.arange(num_bins - 1) < cuts[:, None]
            score = cut_scores(hist, criterion, has_edge)
            feature_best[:, features] = score.max(axis=2)
            # the first (smallest edge) cut tied with the feature's best, moved to the middle
            # of the gap between the node's values that it cuts
            first = np.argmax(near_best(score, feature_best[:, features, None]), axis=2)
            feature_cut[:, features] = middle_cut(gap_joins(hist, has_edge), first)
        chosen, cut, found = pick_split(feature_best, feature_cut, priority[block])
        feature[block[found]] = chosen[found]
        threshold[block[found]] = [edges[f][c] for f, c in zip(chosen[found], cut[found])]
        index[block] = -1
    return feature, threshold


def cut_scores(hist, criterion: str, has_edge, xp=np):
    """``[m, F, K-1]`` score of "bins <= b go left" (-inf where a side is empty or ``has_edge``
    ``[F, K-1]`` is False) from class histograms ``hist`` ``[m, F, L, K]`` (:func:`best_splits`'s
    proxy of the impurity decrease). ``xp``: NumPy or ``jax.numpy``. Bins are the last axis: the
    cumulative sums run along contiguous memory and the sums over classes add whole rows of
    bins (under JAX on a CPU, the scores of a ``[244, 7, 2, 64]`` level took 1.0 ms against
    2.2 ms with classes last)."""
    total = hist.sum(axis=3, keepdims=True)
    left = _left_of_cuts(hist, xp)
    right = total - left
    # the sides' sizes from the class-summed histogram (L times smaller than left and right):
    # each pass over the [m, F, L, K-1] sides is a separate kernel on a CPU
    n_left = _left_of_cuts(hist.sum(axis=2), xp)
    n_right = total.sum(axis=2) - n_left
    if criterion == "gini":
        score = ((left * left).sum(axis=2) / xp.maximum(n_left, 1)
                 + (right * right).sum(axis=2) / xp.maximum(n_right, 1))
    else:
        score = (_xlogx(left, xp).sum(axis=2) - _xlogx(n_left, xp)
                 + _xlogx(right, xp).sum(axis=2) - _xlogx(n_right, xp))
    return xp.where((n_left > 0) & (n_right > 0) & has_edge, score, -xp.inf)


def _left_of_cuts(hist, xp):
    """``[..., K-1]`` cumulative sums of ``hist`` ``[..., K]`` over its bins (the last axis) up
    to each cut. Under JAX a product with the ``[K, K-1]`` upper-triangular matrix of ones (at
    full float32 precision, which accelerators' default matrix units do not keep), so no slice
    copies the result: on a CPU the cumulative sums of a ``[256, 4, 26, 64]``
    histogram (one level of a letter forest's tree) took 0.9 ms, against 2.9 ms for a parallel
    prefix scan and 6.7 ms for ``cumsum`` (a windowed reduction in XLA). Sums of integer
    weights are exact in any order, so the three agree to the bit on bootstrap counts."""
    if xp is np:
        return np.cumsum(hist, axis=-1)[..., :-1]
    bins = hist.shape[-1]
    upper = jnp.triu(jnp.ones((bins, bins - 1), hist.dtype))
    return jax.lax.dot_general(hist, upper, (((hist.ndim - 1,), (0,)), ((), ())),
                               precision=jax.lax.Precision.HIGHEST)


def best_splits(X: np.ndarray, y: np.ndarray, rank: np.ndarray, node: np.ndarray,
                counts: np.ndarray, candidate: np.ndarray, criterion: str,
                priority: np.ndarray, weight=None) -> tuple[np.ndarray, np.ndarray]:
    """Best cut of every candidate node of a level.

    Args:
      X: ``[k, D]`` the level's points; y: ``[k]`` labels; rank: ``[k, D]`` global value order.
      node: ``[k]`` node of each point (``0..m-1``); counts: ``[m, L]`` class counts per node.
      candidate: ``[m]`` bool, nodes that may split.
      criterion: ``"gini"`` or ``"entropy"``.
      priority: ``[m, D]`` int (:func:`tie_priority`): where features tie, the one of higher
        priority wins.
      weight: None or ``[k]`` positive weights of the points (``counts`` their sums).

    Returns:
      feature: ``[m]`` int, the split feature (-1 where no cut exists or the node is no candidate);
      threshold: ``[m]`` float (X's dtype), the midpoint of the cut (0 where no split).

    Scores are scikit-learn's proxy of the impurity decrease, ``S(L)/n_L + S(R)/n_R`` with
    ``S = Σ_l N_l²`` (gini) or ``S(L) - h(n_L) + S(R) - h(n_R)`` with ``S = Σ_l h(N_l)``,
    ``h(c) = c ln c`` (entropy), kept per cut by running sums along the sorted points (no
    ``[points, classes]`` arrays).
    """
    m = counts.shape[0]
    feature = np.full(m, -1, np.int64)
    threshold = np.zeros(m, X.dtype)
    best = np.full(m, -np.inf)
    best_priority = np.full(m, -np.inf)
    keep = candidate[node]
    if not keep.any():
        return feature, threshold
    X, y, rank, node = X[keep].T.copy(), y[keep], rank[keep].T, node[keep]
    weight = np.ones(len(node)) if weight is None else weight[keep]
    h = np.square if criterion == "gini" else _xlogx
    size = np.bincount(node, minlength=m)
    first = np.cumsum(size) - size        # where each node starts in (node, value) order
    sorted_node = np.sort(node)           # the node at each position of that order
    start = first[sorted_node]
    node_weight = counts.sum(axis=1)[sorted_node]
    has_next = np.arange(len(node)) - start + 1 < size[sorted_node]   # a next point in the node
    h_total = h(counts).sum(axis=1)[sorted_node]
    # order by (node, value): sorted integer keys (node, rank), then each key's point through the
    # inverse of the ranks (distinct within a column), ~3x an int64 argsort
    n_total = int(rank.max()) + 1
    point_of_rank = np.empty(n_total, np.int64)
    for f in range(X.shape[0]):
        point_of_rank[rank[f]] = np.arange(len(node))
        order = point_of_rank[sorted_node_rank_keys(node, rank[f], m, n_total) % n_total]
        value, label, w = X[f, order], y[order], weight[order]
        n_left = _running_sum(w, start)
        n_right = node_weight - n_left
        seen = _earlier_same_class(sorted_node, label, counts.shape[1], w)  # L_c before the point
        remaining = counts[sorted_node, label] - seen                        # R_c before the point
        h_left = _running_sum(h(seen + w) - h(seen), start)
        h_right = h_total + _running_sum(h(remaining - w) - h(remaining), start)
        if criterion == "gini":
            score = h_left / n_left + h_right / np.where(n_right > 0, n_right, 1)
        else:
            score = h_left - h(n_left) + h_right - h(n_right)
        # a cut after position i needs a next point in the node with a larger value
        cuttable = has_next & np.append(value[1:] > value[:-1], False)
        best, best_priority = keep_best_cuts(score, cuttable, value, sorted_node, first, size,
                                             f, priority[:, f], best, best_priority, feature,
                                             threshold)
    return feature, threshold


def keep_best_cuts(score, cuttable, value, sorted_node, first, size, f, priority, best,
                   best_priority, feature, threshold):
    """One feature's step of a greedy split search over points in (node, value) order: where
    feature ``f``'s best cut of a node beats the node's best so far (``best``; ties to the larger
    ``priority``), record it in ``feature`` and ``threshold`` (in place; the first, smallest
    cut that attains the score, its threshold the midpoint of the two values). Returns the
    updated ``(best, best_priority)`` ``[m]``."""
    m = len(size)
    score = np.where(cuttable, score, -np.inf)
    node_best = np.full(m, -np.inf)
    node_best[size > 0] = np.maximum.reduceat(score, first[size > 0])
    tie = (node_best == best) & (node_best > -np.inf) & (priority > best_priority)
    better = (node_best > best) | tie
    at = np.flatnonzero(cuttable & (score == node_best[sorted_node]) & better[sorted_node])
    nodes, first_at = np.unique(sorted_node[at], return_index=True)
    cut = at[first_at]
    low, high = value[cut], value[cut + 1]
    mid = low / 2 + high / 2
    threshold[nodes] = np.where(mid < high, mid, low)
    feature[nodes] = f
    return np.where(better, node_best, best), np.where(better, priority, best_priority)


def _earlier_same_class(node, label, num_classes, weight):
    """``[k]``: the weight of the earlier points (in the given order) that share each point's node
    and class."""
    group = node * num_classes + label
    by_group = np.argsort(group, kind="stable")
    g = group[by_group]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    before = np.cumsum(weight[by_group]) - weight[by_group]
    seen = np.empty(len(g))
    seen[by_group] = before - np.repeat(before[starts], np.diff(np.r_[starts, len(g)]))
    return seen


def _running_sum(increment, start):
    """Cumulative sum of ``increment`` restarted at each node's first index ``start`` ``[k]``."""
    total = np.cumsum(increment)
    return total - (total[start] - increment[start])


def _xlogx(c, xp=np):
    c = xp.asarray(c, np.float64) if xp is np else c
    return c * xp.log(xp.where(c > 0, c, 1))
