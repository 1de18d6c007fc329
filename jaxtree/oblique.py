"""Perceptron (oblique) decision trees (docs/theory/oblique.md; Bennett, Wu, Cristianini & Shawe-Taylor):
OC1, FAT, MOC1, MOC2 and the margin bound of Theorem 0.1.

An oblique T0 is an ordinary :class:`jaxtree.Tree` whose ``coef`` holds a unit normal per internal
node: a scaled point ``z`` goes right iff ``coef[A]·z >= threshold[A]``. Statistics, PAC-Bayes
weights and every pruning method therefore work on it unchanged::

    tree  = jaxtree.oblique_tree(X, y, max_depth=4, method="oc1")   # or "moc1", "moc2", "axis"
    tree  = jaxtree.fat(tree, X)                                    # FAT post-processing
    stats = jaxtree.node_stats(tree, X, y, num_classes)
    log_w = jaxtree.pacbayes_log_weights(tree, stats, lam1, lam2)   # the PAC-Bayes vote
    bound = jaxtree.tree_margin_bound(tree, X, delta=0.05)

**Split search** (one jitted call per level, all nodes of the level at once with segment
operations over the points; the hyperplane is ``w̃ = (w, b)`` acting on ``z̃ = (z, −1)``):

* start from the best axis-parallel split (a line search over the threshold of every feature);
* ``n_cycles`` passes of coefficient perturbation: for each coordinate ``d`` of ``w̃`` in turn, an
  exact line search ``w̃ + α·e_d`` over every breakpoint the node's points induce
  (``α = −V_j/s_j`` with ``V_j = w̃·z̃_j``, ``s_j = z̃_jd``), keeping the best;
* ``n_jumps`` random jumps: a line search along a random direction, then another pass;
* ``n_restarts`` random restarts from a random hyperplane through the node's centroid; the best
  hyperplane over all starts wins. A move is kept only if it strictly improves the goodness.

Within an interval between two breakpoints every α gives the same partition; the search takes
the α that is farthest (in distance to the hyperplane) from the two bounding points.

**Goodness** of a split of node A (``n = N_A``):

* OC1 — twoing value ``(|T_L|/n)(|T_R|/n)(Σ_l | |L_l|/|T_L| − |R_l|/|T_R| |)²`` (0 if a side is empty);
* MOC1 — twoing + ``margin_weight``·margin, margin = min distance of A's points to the
  hyperplane (counted only when both sides are non-empty). In the line search the margin is
  estimated by the two breakpoints bounding the interval (an upper bound on the true margin);
  a move is kept only if the exact goodness improves;
* MOC2 — *modified twoing*: points closer than ``band`` to the hyperplane (scaled units) count
  on neither side, while ``n`` still counts them: ``(|T_L|/n)(|T_R|/n)(Σ_l |…|)²`` with the band's
  points left out of L and R. Crowding the hyperplane costs goodness, so the search prefers
  hyperplanes in empty corridors. (The line search uses the band of the current ‖w‖; the exact
  goodness decides.)

**FAT**: at every internal node, relabel its training points by side and replace the hyperplane by
the maximum-margin one separating the two groups. Solver: pairwise Frank–Wolfe (Gilbert's
nearest-point algorithm with away steps) on the distance between the two convex hulls, whose
half is the hard-margin SVM's margin; vectorized over all internal nodes at once with segment
operations — pure JAX (no QP solver or scikit-learn in the core), cheap per step (O(points·D)),
and every iterate is a separating direction whose margin is known exactly. A node keeps its OC1
hyperplane unless the new one has a larger margin, so FAT never shrinks a margin and never
changes the partition of the training points.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.build import GrownLevel, check_features, check_labels, pack
from jaxtree.tree import Tree, route, scale_points

Array = jax.Array

METHODS = ("oc1", "fat", "moc1", "moc2", "axis")
_INF = jnp.inf


def oblique_tree(X, y, max_depth: int, method: str = "oc1", min_split: int = 2,
                 n_restarts: int = 2, n_jumps: int = 2, n_cycles: int = 2,
                 margin_weight: float = 0.01, band: float = 0.05, fat_steps: int = 2000,
                 random_state: int = 0, layout: str = "complete") -> Tree:
    """Grow a perceptron decision tree T0 on ``X`` ``[n, D]`` with labels ``y`` ``[n]`` in 0..L−1.

    Args:
      max_depth: largest depth of a node.
      method: ``"oc1"``, ``"fat"`` (OC1 then :func:`fat`), ``"moc1"``, ``"moc2"``, or ``"axis"``
        (the best axis-parallel twoing split only: an axis-aligned tree on the same machinery).
      min_split: nodes with fewer points are not split; pure nodes are not split.
      n_restarts, n_jumps, n_cycles: OC1's random restarts R, random jumps J and coefficient
        perturbation passes per start.
      margin_weight: C of MOC1. band: half-width of MOC2's band (scaled units).
      fat_steps: iterations of the max-margin solver (FAT).
      random_state: seed of the jax.random key.
      layout: passed to :func:`jaxtree.build.pack`.

    Returns:
      a :class:`Tree` with ``coef [nodes, D]`` (unit normals, 0 at non-internal slots) and
      ``threshold``; features are standardized (``shift`` = mean, ``inv_scale`` = 1/std). A
      point goes left when ``coef · x_scaled <= threshold``.

    Example:
        The AND of two bits: one oblique split puts the point (1, 1) alone in a leaf (which
        side is left depends on the random search):

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
        >>> y = np.array([0, 0, 0, 1])
        >>> tree = jaxtree.oblique_tree(X, y, max_depth=1)
        >>> tree.internal.tolist(), tree.coef.shape
        ([True, False, False], (3, 2))
        >>> leaves = jaxtree.leaf_of(tree, X).tolist()
        >>> len(set(leaves[:3])), leaves[3] != leaves[0]
        (1, True)
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}")
    X = check_features(X)
    y = check_labels(y, X.shape[0])
    for name, value in [("max_depth", max_depth), ("n_restarts", n_restarts),
                        ("n_jumps", n_jumps), ("n_cycles", n_cycles), ("fat_steps", fat_steps)]:
        if not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0; got {value!r}")
    if not isinstance(min_split, (int, np.integer)) or min_split < 2:
        raise ValueError(f"min_split must be an integer >= 2; got {min_split!r}")
    if not (margin_weight >= 0 and band >= 0):
        raise ValueError(f"margin_weight and band must be >= 0; got {margin_weight}, {band}")
    search = dict(
        tau=band if method == "moc2" else 0.0,
        C=margin_weight if method == "moc1" else 0.0,
        n_cycles=0 if method == "axis" else n_cycles,
        n_jumps=0 if method == "axis" else n_jumps,
        n_restarts=0 if method == "axis" else n_restarts)
    shift = X.mean(axis=0)
    std = X.std(axis=0)
    inv_scale = np.where(std > 0, 1.0 / np.where(std > 0, std, 1.0), 1.0).astype(X.dtype)
    levels, coefs = _grow(X, y, shift, inv_scale, max_depth, min_split,
                          jax.random.PRNGKey(random_state), search, layout)
    # pack places every grown node in a slot; carrying each node's running index in `feature`
    # tells which grown node (hence which normal) landed in which slot, in any layout.
    tree = pack(levels, shift, inv_scale, clip=False, layout=layout)
    coef = np.concatenate(coefs)[np.asarray(tree.feature)]
    coef = np.where(np.asarray(tree.internal)[:, None], coef, 0)
    tree = dataclasses.replace(tree, feature=jnp.zeros_like(tree.feature),
                               coef=jnp.asarray(coef, tree.threshold.dtype))
    return fat(tree, X, fat_steps) if method == "fat" else tree


def twoing(left: Array, right: Array) -> Array:
    """Twoing value of splits from class counts ``left, right`` ``[..., L]`` (total ``n`` = their
    sum): ``(|T_L|/n)(|T_R|/n)(Σ_l | L_l/|T_L| − R_l/|T_R| |)²``, 0 when a side is empty.

    Returns:
      ``[...]`` float, one value per split (the counts' batch shape).

    Example:
        A split that separates the classes, then two splits of one batch:

        >>> import numpy as np
        >>> import jaxtree
        >>> print(np.asarray(jaxtree.twoing(np.array([3.0, 0.0]), np.array([0.0, 1.0]))))
        0.75
        >>> left = np.array([[2.0, 1.0], [1.0, 1.0]])
        >>> right = np.array([[1.0, 0.0], [2.0, 0.0]])
        >>> print(np.asarray(jaxtree.twoing(left, right)).round(3))
        [0.083 0.25 ]
    """
    return _twoing(left, right, left.sum(-1) + right.sum(-1))


@jax.jit
def node_margins(tree: Tree, X: Array) -> Array:
    """``[nodes]``: at every internal node, the smallest distance of the points of ``X`` that reach
    it to its hyperplane (scaled units; ``inf`` where no point reaches it, 0 elsewhere).

    ``X`` is ``[n, D]`` unscaled points; the result is float.

    Example:
        After :func:`fat`, the root's hyperplane is the max-margin one between (1, 1) and the
        other three points (standardized units: a margin of ``1/√2``):

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
        >>> y = np.array([0, 0, 0, 1])
        >>> tree = jaxtree.oblique_tree(X, y, max_depth=1)
        >>> wide = jaxtree.fat(tree, X, num_steps=200)
        >>> print(np.asarray(jaxtree.node_margins(wide, X)).round(3))
        [0.707 0.    0.   ]
    """
    dist, mask, path = _node_distances(tree, X)
    smallest = jax.ops.segment_min(jnp.where(mask, jnp.abs(dist), _INF).ravel(), path.ravel(),
                                   tree.num_nodes)
    return jnp.where(tree.internal, smallest, 0.0)


def fat(tree: Tree, X: Array, num_steps: int = 2000) -> Tree:
    """FAT (docs/theory/oblique.md): replace each internal hyperplane by the maximum-margin hyperplane between
    the node's training points on its two sides (pairwise Frank–Wolfe, ``num_steps`` steps).

    A node keeps its hyperplane when the new one's margin is not larger (e.g. a side is empty).
    Returns the tree with new ``coef`` (unit normals) and ``threshold``.

    Args:
      tree: an oblique tree (``coef`` ``[nodes, D]``), e.g. from :func:`oblique_tree`.
      X: ``[n, D]`` its training points (unscaled).
      num_steps: static int, Frank–Wolfe iterations.

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
        >>> y = np.array([0, 0, 0, 1])
        >>> tree = jaxtree.oblique_tree(X, y, max_depth=1)
        >>> wide = jaxtree.fat(tree, X, num_steps=200)
        >>> print(np.abs(np.asarray(wide.coef[0])).round(3))
        [0.707 0.707]
    """
    if tree.coef is None:
        raise ValueError("fat needs an oblique tree (tree.coef is None); grow one with "
                         "oblique_tree")
    coef, threshold = _fat(tree, jnp.asarray(check_features(X), tree.threshold.dtype), num_steps)
    return dataclasses.replace(tree, coef=coef, threshold=threshold)


def margin_bound(margins, radius, m, delta=0.05):
    """Theorem 0.1 (docs/theory/oblique.md): generalization error bound of a perceptron tree.

    ``ε ≤ (130 R²/m)·(D′·log(4em)·log(4m) + log((4m)^{K+1}·C(2K, K)/((K+1)·δ)))`` with
    ``D′ = Σ_i 1/γ_i²`` over the ``K`` decision nodes.

    Args:
      margins: ``[K]`` margins γ_i of the decision nodes (> 0; a zero margin gives ``inf``).
      radius: R, radius of a ball around the origin holding the data.
      m: sample size. delta: confidence.

    Returns:
      float scalar ε (vacuous, > 1, for small samples or margins).

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> print(round(float(jaxtree.margin_bound(np.array([0.5, 0.25]), radius=1.0, m=1000)), 1))
        204.1
    """
    margins = np.asarray(margins, np.float64)
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1); got {delta}")
    if m < 1:
        raise ValueError(f"m must be >= 1; got {m}")
    if np.any(margins <= 0):
        return math.inf
    k = margins.size
    d_prime = float(np.sum(1.0 / margins ** 2))
    log_count = ((k + 1) * math.log(4 * m) + math.lgamma(2 * k + 1) - 2 * math.lgamma(k + 1)
                 - math.log((k + 1) * delta))
    return 130 * radius ** 2 / m * (d_prime * math.log(4 * math.e * m) * math.log(4 * m)
                                    + log_count)


def tree_margin_bound(tree: Tree, X, delta=0.05) -> float:
    """:func:`margin_bound` of a fitted perceptron tree on its training points ``X``: margins from
    :func:`node_margins` at the internal nodes, R = the largest norm of a scaled point.

    ``X`` is ``[n, D]``; returns a Python float.

    Example:
        Four points give a vacuous bound (the margin bound needs thousands of points):

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
        >>> y = np.array([0, 0, 0, 1])
        >>> tree = jaxtree.oblique_tree(X, y, max_depth=1)
        >>> wide = jaxtree.fat(tree, X, num_steps=200)
        >>> round(jaxtree.tree_margin_bound(wide, X), 1)
        1914.9
    """
    X = jnp.asarray(check_features(X), tree.threshold.dtype)
    internal = np.asarray(tree.internal)
    margins = np.asarray(node_margins(tree, X))[internal]
    radius = float(jnp.max(jnp.linalg.norm(scale_points(tree, X), axis=1)))
    return margin_bound(margins, radius, X.shape[0], delta)


# ---------------------------------------------------------------------------------------------
# Growing, level by level
def _grow(X, y, shift, inv_scale, max_depth, min_split, key, search, layout):
    """Grow level by level; returns (GrownLevel list, per-level ``[m, D]`` unit normals). A
    level's ``feature`` holds each node's running index over all levels (see ``oblique_tree``).
    For the complete layout the list always has ``max_depth + 1`` levels (trailing ones empty),
    so every tree of one ``max_depth`` has the same shapes and shares compiled code."""
    n, dims = X.shape
    num_classes = int(y.max()) + 1
    Z = np.asarray((X - shift) * inv_scale)
    width = _pow2(max(1, min(2 ** max(max_depth - 1, 0), n // min_split + 1)))
    rows = -(-n // 256) * 256                      # pad points so CV folds share one compile
    Zt = np.zeros((rows, dims + 1), X.dtype)
    Zt[:n, :dims], Zt[:n, dims] = Z, -1.0
    onehot = np.zeros((rows, num_classes), X.dtype)
    onehot[np.arange(n), y] = 1.0
    Zt, onehot = jnp.asarray(Zt), jnp.asarray(onehot)
    node = np.zeros(n, np.int64)                   # each live point's node within the level
    points = np.arange(n)
    parent = np.array([-1])
    levels, coefs, offset = [], [], 0
    for depth in range(max_depth + 1):
        m = parent.shape[0]
        count = np.bincount(node, minlength=m)
        seen = np.zeros((m, num_classes), bool)
        seen[node, y[points]] = True
        splits = (count >= min_split) & (depth < max_depth) & (seen.sum(axis=1) > 1)
        coef = np.zeros((m, dims), X.dtype)
        threshold = np.zeros(m, X.dtype)
        if splits.any():
            rank = np.cumsum(splits) - 1
            segment = np.full(rows, width, np.int32)
            live = splits[node]
            segment[points[live]] = rank[node[live]]
            hyper = np.asarray(_split_level(
                Zt, onehot, jnp.asarray(segment),
                jax.random.fold_in(key, depth), search["tau"], search["C"], width,
                search["n_cycles"], search["n_jumps"], search["n_restarts"]))
            hyper = hyper[rank[splits]]
            norm = np.linalg.norm(hyper[:, :dims], axis=1)
            norm = np.where(norm > 0, norm, 1.0)
            coef[splits] = hyper[:, :dims] / norm[:, None]
            threshold[splits] = hyper[:, dims] / norm
        levels.append(GrownLevel(parent, splits, offset + np.arange(m), threshold))
        coefs.append(coef)
        offset += m
        if not splits.any():
            break
        live = splits[node]
        points = points[live]
        point_coef = np.zeros((rows, dims), X.dtype)        # fixed shapes: one compile
        point_threshold = np.zeros(rows, X.dtype)
        point_coef[points], point_threshold[points] = coef[node[live]], threshold[node[live]]
        side = np.asarray(_goes_right(Zt, point_coef, point_threshold))[points]
        node = 2 * rank[node[live]] + side
        parent = np.repeat(np.flatnonzero(splits), 2)
    if layout == "complete":  # empty levels down to max_depth: one shape per max_depth
        empty = np.zeros(0, np.int64)
        levels += [GrownLevel(empty, empty.astype(bool), empty, empty.astype(X.dtype))
                   for _ in range(max_depth + 1 - len(levels))]
    return levels, coefs


@jax.jit
def _goes_right(Zt, coef, threshold):
    """``[n]`` bool: ``coef_i·z_i >= threshold_i`` (the routing rule of :func:`jaxtree.route`)."""
    return jnp.einsum("nd,nd->n", Zt[:, :coef.shape[1]], coef) >= threshold


def _pow2(k):
    return 1 << (int(k) - 1).bit_length()


@functools.partial(jax.jit, static_argnums=6)
def _split_level(Zt, onehot, segment, key, tau, C, m, n_cycles, n_jumps, n_restarts):
    """Best hyperplane ``w̃ = (w, b)`` ``[m, D+1]`` of every node of a level.

    Zt: ``[n, D+1]`` augmented points ``(z, −1)``; onehot: ``[n, L]`` class indicators (0 rows
    for padding); segment: ``[n]`` node of each point in ``0..m−1`` (``m`` = not split here).

    One loop of line searches (a single traced body keeps compilation short), in this order:
    ``D`` axis steps (feature t's threshold, from ``w = e_t``); then for each start k = 0..R
    (k = 0: the best axis-parallel split; k ≥ 1: a random hyperplane through the node's
    centroid) ``n_cycles + n_jumps`` rounds of one jump step (a random direction; the zero
    direction, a no-op, in the first ``n_cycles`` rounds) and ``D + 1`` coordinate steps.
    """
    dims = Zt.shape[1] - 1
    ctx = (Zt, onehot, segment, tau, C, m)
    weight = onehot.sum(1)
    centroid = (jax.ops.segment_sum(Zt[:, :dims] * weight[:, None], segment, m)
                / jnp.maximum(jax.ops.segment_sum(weight, segment, m), 1)[:, None])
    block = jnp.maximum((n_cycles + n_jumps) * (dims + 2), 1)   # steps per start
    eye = jnp.eye(dims + 1, dtype=Zt.dtype)

    def step(t, state):
        current, best = state
        u = jnp.maximum(t - dims, 0)
        k, v = u // block, u % block
        round_, j = v // (dims + 2), v % (dims + 2)
        step_key = jax.random.fold_in(key, t)
        axis = t < dims
        # resets: an axis hyperplane, or the start of restart k
        w = jax.random.normal(step_key, (m, dims), Zt.dtype)
        w = w / jnp.linalg.norm(w, axis=1, keepdims=True)
        random = jnp.concatenate([w, (w * centroid).sum(1, keepdims=True)], axis=1)
        start = jax.lax.cond(
            axis, lambda: (jnp.broadcast_to(eye[jnp.minimum(t, dims)], (m, dims + 1)),
                           jnp.full(m, -_INF, Zt.dtype)),
            lambda: jax.lax.cond(k == 0, lambda: best,
                                 lambda: (random, _goodness(ctx, random))))
        current = jax.tree_util.tree_map(
            lambda a, b: jnp.where(axis | (v == 0), a, b), start, current)
        jump = jnp.where(round_ >= n_cycles,
                         jax.random.normal(step_key, (m, dims + 1), Zt.dtype), 0.0)
        r = jnp.where(axis, eye[dims], jnp.where(j == 0, jump, eye[jnp.maximum(j - 1, 0)]))
        current = _perturb(ctx, current, jnp.broadcast_to(r, (m, dims + 1)))
        return current, _keep_better(best, current)

    empty = (jnp.zeros((m, dims + 1), Zt.dtype), jnp.full(m, -_INF, Zt.dtype))
    total = dims + (n_restarts + 1) * block
    return jax.lax.fori_loop(0, total, step, (empty, empty))[1][0]


def _keep_better(a, b):
    better = b[1] > a[1]
    return jnp.where(better[:, None], b[0], a[0]), jnp.where(better, b[1], a[1])


def _perturb(ctx, state, r):
    """Line search of every node's ``w̃`` along its direction ``r`` ``[m, D+1]``; a node moves iff
    the exact goodness strictly improves. state: ``(hyper [m, D+1], goodness [m])``."""
    Zt, onehot, segment, tau, C, m = ctx
    hyper, good = state
    dims = Zt.shape[1] - 1
    V = jnp.einsum("nd,nd->n", Zt, hyper[segment])
    s = jnp.einsum("nd,nd->n", Zt, r[segment])
    w, rw = hyper[:, :dims], r[:, :dims]
    alpha = _line_search(V, s, segment, onehot, (w * w).sum(1), (w * rw).sum(1),
                         (rw * rw).sum(1), tau, C, m)
    moved = hyper + alpha[:, None] * r
    return _keep_better(state, (moved, _goodness(ctx, moved)))


def _goodness(ctx, hyper):
    """``[m]`` exact goodness of hyperplanes ``hyper`` ``[m, D+1]`` (see the module docstring)."""
    Zt, onehot, segment, tau, C, m = ctx
    dims = Zt.shape[1] - 1
    norm = jnp.linalg.norm(hyper[:, :dims], axis=1)
    dist = (jnp.einsum("nd,nd->n", Zt, hyper[segment])
            / jnp.maximum(norm, jnp.finfo(Zt.dtype).tiny)[segment])
    band = jnp.abs(dist) < tau
    right = jax.ops.segment_sum(onehot * ((dist >= 0) & ~band)[:, None], segment, m)
    left = jax.ops.segment_sum(onehot * ((dist < 0) & ~band)[:, None], segment, m)
    total = jax.ops.segment_sum(onehot, segment, m).sum(1)
    live = onehot.sum(1) > 0
    margin = jax.ops.segment_min(jnp.where(live, jnp.abs(dist), _INF), segment, m)
    return _score(left, right, total, margin, C)


def _score(left, right, total, margin, C):
    """Twoing of ``left, right`` ``[..., L]`` of nodes with ``total`` points, + C·margin where both
    sides are non-empty."""
    both = (left.sum(-1) > 0) & (right.sum(-1) > 0)
    return _twoing(left, right, total) + jnp.where(both & (C > 0), C * margin, 0.0)


def _twoing(left, right, total):
    size_l, size_r = left.sum(-1), right.sum(-1)
    tiny = jnp.finfo(left.dtype).tiny
    diff = jnp.abs(left / jnp.maximum(size_l, tiny)[..., None]
                   - right / jnp.maximum(size_r, tiny)[..., None]).sum(-1)
    n = jnp.maximum(total, tiny)
    value = (size_l / n) * (size_r / n) * diff ** 2
    return jnp.where((size_l > 0) & (size_r > 0), value, 0.0)


def _line_search(V, s, segment, onehot, wn2, wr, rr, tau, C, m):
    """``[m]`` step α along the line ``w̃ + α·r`` that maximizes each node's search goodness.

    V, s: ``[n]`` ``w̃·z̃`` and ``r·z̃`` of every point; wn2, wr, rr: ``[m]`` ``‖w‖²``, ``w·r``,
    ``‖r‖²`` (normal parts only) so that ``‖w + α r‖² = wn2 + 2α·wr + α²·rr``.

    Each point with ``s ≠ 0`` gives two events: it enters the band ``|V + αs| < τ‖w‖`` and leaves
    it (for τ = 0 both sit at its breakpoint ``−V/s``). Sorting events by (node, α) and summing
    their class-count changes gives the counts of both sides in every interval between events.
    """
    n, _ = onehot.shape
    dtype = V.dtype
    live = (segment < m) & (onehot.sum(1) > 0)
    total = jax.ops.segment_sum(onehot, segment, m).sum(1)
    half = tau * jnp.sqrt(wn2)[segment]
    moving = live & (s != 0)
    fixed = live & (s == 0)
    # at α → −∞ points with s > 0 are left, s < 0 right; points with s = 0 stay put
    left0 = jax.ops.segment_sum(onehot * ((moving & (s > 0)) | (fixed & (V < -half)))[:, None],
                                segment, m)
    right0 = jax.ops.segment_sum(onehot * ((moving & (s < 0)) | (fixed & (V >= half)))[:, None],
                                 segment, m)
    fixed_gap = jax.ops.segment_min(jnp.where(fixed, jnp.abs(V), _INF), segment, m)
    safe = jnp.where(moving, s, 1.0)
    brk, width, pos = -V / safe, half / jnp.abs(safe), (s > 0)[:, None]
    y = onehot * moving[:, None]
    zero = jnp.zeros_like(y)
    d_left = jnp.concatenate([jnp.where(pos, -y, zero), jnp.where(pos, zero, y)])
    d_right = jnp.concatenate([jnp.where(pos, zero, -y), jnp.where(pos, y, zero)])
    key = jnp.tile(jnp.where(moving, segment, m), 2)
    at = jnp.concatenate([brk - width, brk + width])
    slope = jnp.tile(jnp.abs(safe), 2)
    key, at, order = jax.lax.sort((key, at, jnp.arange(2 * n)), num_keys=2)
    d_left, d_right, slope = d_left[order], d_right[order], slope[order]

    def running(delta, start):
        csum = jnp.cumsum(delta, axis=0)
        per_node = jax.ops.segment_sum(delta, key, m)
        base = jnp.cumsum(per_node, axis=0) - per_node
        return start[key] + csum - base[key]

    left, right = running(d_left, left0), running(d_right, right0)
    same = jnp.append(key[1:] == key[:-1], False)
    at_next, slope_next = jnp.roll(at, -1), jnp.roll(slope, -1)
    valid = (key < m) & (~same | (at_next > at))
    # the α in (at, at_next) farthest from both bounding points, and that distance × ‖w‖
    alpha = jnp.where(same, (slope * at + slope_next * at_next) / (slope + slope_next),
                      at + 1 + jnp.abs(at))
    gap = jnp.where(same, slope * slope_next * (at_next - at) / (slope + slope_next),
                    slope * (1 + jnp.abs(at)))
    good = _search_score(left, right, total[key], gap, fixed_gap[key], alpha,
                         wn2[key], wr[key], rr[key], C)
    good = jnp.where(valid, good, -_INF)
    # the interval before each node's first event
    index = jnp.arange(2 * n)
    first = jax.ops.segment_min(jnp.where(key < m, index, 2 * n), key, m)
    has = first < 2 * n
    first = jnp.minimum(first, 2 * n - 1)
    alpha0 = at[first] - 1 - jnp.abs(at[first])
    good0 = _search_score(left0, right0, total, slope[first] * (1 + jnp.abs(at[first])),
                          fixed_gap, alpha0, wn2, wr, rr, C)
    best = jax.ops.segment_max(good, key, m)
    pick = jax.ops.segment_min(jnp.where(valid & (good == best[key]), index, 2 * n), key, m)
    alpha_best = jnp.where(good0 >= best, alpha0, alpha[jnp.minimum(pick, 2 * n - 1)])
    return jnp.where(has, alpha_best, 0.0).astype(dtype)


def _search_score(left, right, total, gap, fixed_gap, alpha, wn2, wr, rr, C):
    norm = jnp.sqrt(jnp.maximum(wn2 + 2 * alpha * wr + alpha ** 2 * rr, 0.0))
    margin = jnp.minimum(gap, fixed_gap) / jnp.maximum(norm, jnp.finfo(norm.dtype).tiny)
    return _score(left, right, total, margin, C)


# ---------------------------------------------------------------------------------------------
# FAT and margins
def _node_distances(tree, X):
    """Signed distances ``[n, levels]`` of each point to the hyperplane of each node on its path,
    the mask of (point, internal node) pairs and the path ``[n, levels]``."""
    path, on_path = route(tree, X)
    Z = scale_points(tree, X)
    coef = tree.coef[path]                                    # [n, levels, D]
    norm = jnp.maximum(jnp.linalg.norm(coef, axis=-1), jnp.finfo(Z.dtype).tiny)
    dist = (jnp.einsum("nd,nkd->nk", Z, coef) - tree.threshold[path]) / norm
    return dist, on_path & tree.internal[path], path


@jax.jit
def _fat(tree, X, num_steps):
    """Pairwise Frank–Wolfe on ``min ‖p − q‖`` over p ∈ hull(right points), q ∈ hull(left points)
    of every internal node at once; the iterate ``x = p − q`` is the normal.

    ``p = Σ a_i z_i`` and ``q = Σ a_j z_j`` carry convex weights ``a`` over the (point, node)
    pairs. A step moves weight from the worst used vertex to the best vertex on both sides (exact
    line search, capped by the weight available), which converges linearly on polytopes where
    plain Frank–Wolfe (Gilbert's algorithm) zig-zags. The margin of an iterate,
    ``(min_right x·z − max_left x·z) / (2‖x‖)``, is not monotone in the steps: the best is kept.
    """
    dist, mask, path = _node_distances(tree, X)
    Z = scale_points(tree, X)
    nodes = tree.num_nodes
    flat = path.ravel()
    size = flat.shape[0]
    Zi = Z[jnp.broadcast_to(jnp.arange(Z.shape[0])[:, None], path.shape).ravel()]  # [pairs, D]
    right = (mask & (dist >= 0)).ravel()
    left = (mask & (dist < 0)).ravel()
    index = jnp.arange(size)
    tiny = jnp.finfo(Z.dtype).tiny

    def uniform(side):
        return side / jnp.maximum(jax.ops.segment_sum(side.astype(Z.dtype), flat, nodes),
                                  1)[flat]

    def arg(values, where, pick):
        """Per node, the pair with the ``pick`` (min/max) value among ``where``: (index, value)."""
        best = pick(jnp.where(where, values, _INF if pick is jax.ops.segment_min else -_INF),
                    flat, nodes)
        chosen = jax.ops.segment_min(jnp.where(where & (values == best[flat]), index, size),
                                     flat, nodes)
        return jnp.minimum(chosen, size - 1), best

    def step(_, state):
        x, weight, best_x, best_margin = state
        proj = (Zi * x[flat]).sum(1)
        used = weight > 0
        r_in, low = arg(proj, right, jax.ops.segment_min)          # toward: smallest x·z on right
        r_out, _ = arg(proj, right & used, jax.ops.segment_max)    # away: largest used
        l_in, high = arg(proj, left, jax.ops.segment_max)
        l_out, _ = arg(proj, left & used, jax.ops.segment_min)
        margin = (low - high) / (2 * jnp.maximum(jnp.linalg.norm(x, axis=1), tiny))
        improved = margin > best_margin
        best_x = jnp.where(improved[:, None], x, best_x)
        best_margin = jnp.where(improved, margin, best_margin)
        direction = Zi[r_in] - Zi[r_out] - Zi[l_in] + Zi[l_out]
        cap = jnp.minimum(weight[r_out], weight[l_out])
        gamma = jnp.clip(-(x * direction).sum(1) / jnp.maximum((direction ** 2).sum(1), tiny),
                         0, cap)
        gamma = jnp.where(tree.internal, gamma, 0.0)
        weight = (weight.at[r_out].add(-gamma).at[r_in].add(gamma)
                  .at[l_out].add(-gamma).at[l_in].add(gamma))
        return x + gamma[:, None] * direction, jnp.maximum(weight, 0.0), best_x, best_margin

    p0 = jax.ops.segment_sum(Zi * uniform(right)[:, None], flat, nodes)
    q0 = jax.ops.segment_sum(Zi * uniform(left)[:, None], flat, nodes)
    state = (p0 - q0, uniform(right) + uniform(left), p0 - q0, jnp.full(nodes, -_INF, Z.dtype))
    _, _, x, _ = jax.lax.fori_loop(0, num_steps + 1, step, state)
    norm = jnp.maximum(jnp.linalg.norm(x, axis=1), tiny)
    proj = (Zi * x[flat]).sum(1)
    low = jax.ops.segment_min(jnp.where(right, proj, _INF), flat, nodes)
    high = jax.ops.segment_max(jnp.where(left, proj, -_INF), flat, nodes)
    new_margin = (low - high) / (2 * norm)
    old_margin = jax.ops.segment_min(jnp.where(mask, jnp.abs(dist), _INF).ravel(), flat, nodes)
    better = tree.internal & (new_margin > old_margin) & jnp.isfinite(new_margin)
    coef = jnp.where(better[:, None], x / norm[:, None], tree.coef)
    threshold = jnp.where(better, (low + high) / (2 * norm), tree.threshold)
    return coef, threshold
