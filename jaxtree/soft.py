"""Soft routing: a point crosses each split of T0 by a probability instead of a hard test.

A hard split sends ``x`` right iff ``z = x[f] > t``. Soft routing sends it right with
probability ``Φ((u(z) − u(t)) / σ)``, where ``u`` maps a coordinate to its rank among the
training sample's values of that feature (a fraction in [0, 1]: ``u(t)`` is the share of the
sample at or below the cut), ``Φ`` is the standard normal CDF and ``σ`` the softness. The node
weights of the posterior are unchanged; a point's prediction becomes the mixture, over the
nodes it may reach, of what the hard prediction gives there:

    p(l | x) = Σ_A r(A | x) · w(A) · p̂(l | A),

with ``r(A | x)`` the product of the crossing probabilities along A's root path (1 at the root,
``Σ_A r(A | x) w(A) = 1`` as on a hard path). ``σ = 0`` is the hard vote. Ranks rather than raw
coordinates make ``σ`` one number for every feature and make the routing, like the tree itself,
invariant to monotone transforms of a feature and blind to outliers: a point one or two
training ranks from a cut is about as likely to fall on either side, one 10 % of the sample
away from it (at σ = 0.05) crosses with probability Φ(−2) ≈ 0.02. This smooths the
staircase boundary of a partition where the training sample cannot say on which side of a cut
a new point belongs (docs/theory/pacbayes.md, "Soft routing"; the screens that chose
``DEFAULT_SOFTNESS`` are in ``experiments/results/benchmark_suite.md``).

Ranks are read off ``KNOTS`` weighted quantiles of each feature (:func:`quantile_knots`), so a
fitted model stores ``[D, KNOTS]`` numbers, not its training sample. A NaN coordinate (a CART T0
that routes missing values) crosses its splits by their learnt side, as in hard routing.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxtree.layout import root_path_sum
from jaxtree.tree import Tree, scale_points

Array = jax.Array

DEFAULT_SOFTNESS = 0.05    # σ in rank units: the best screened (benchmark_suite.md)
KNOTS = 256                # weighted quantiles stored per feature
MAX_BLOCK = 1 << 24        # nodes × points handled at once (64 MiB of float32)


@functools.partial(jax.jit, static_argnames="knots")
def quantile_knots(tree: Tree, X: Array, weight: Array, knots: int = KNOTS) -> Array:
    """``[D, knots]`` the weighted quantiles of each scaled feature of the sample ``X`` ``[n, D]``
    (``weight`` ``[n]``, 0 for padding) at the levels ``k / (knots − 1)``: the first and last
    are the smallest and largest values of rows of positive weight. NaN values are left out."""
    Z = scale_points(tree, X)

    def column(values):
        kept = jnp.where(jnp.isnan(values), 0.0, weight)
        order = jnp.argsort(jnp.where(jnp.isnan(values), jnp.inf, values))
        cumulative = jnp.cumsum(kept[order])
        total = cumulative[-1]
        levels = jnp.linspace(0.0, 1.0, knots, dtype=cumulative.dtype)
        targets = jnp.maximum(levels * total, total * jnp.finfo(cumulative.dtype).eps)
        at = jnp.searchsorted(cumulative, targets, side="left")
        return values[order][jnp.minimum(at, values.shape[0] - 1)]

    return jax.vmap(column, in_axes=1)(Z)


def _ranks(knots: Array, values: Array) -> Array:
    """Ranks in knot units of ``values`` ``[n]`` among one feature's sorted ``knots`` ``[K]``:
    a value equal to knots ``a..b−1`` has the run's middle ``(a + b) / 2``, one between two
    knots the linear interpolation of theirs, one below (above) every knot 0 (K)."""
    count = knots.shape[0]
    # each knot's run middle (K × K comparisons: K is small)
    middles = ((knots[None, :] < knots[:, None]).sum(1)
               + (knots[None, :] <= knots[:, None]).sum(1)) / 2
    below = jnp.searchsorted(knots, values, side="left")
    upto = jnp.searchsorted(knots, values, side="right")
    low, high = jnp.clip(below - 1, 0, count - 1), jnp.clip(below, 0, count - 1)
    lower, upper = knots[low], knots[high]
    gap = jnp.where(upper > lower, upper - lower, 1.0)
    between = middles[low] + (values - lower) / gap * (middles[high] - middles[low])
    inside = jnp.where(below == 0, 0.0, jnp.where(below == count, float(count), between))
    return jnp.where(upto > below, (below + upto) / 2, inside)


def crossing_logits(tree: Tree, knots: Array, X: Array, softness) -> Array:
    """``[nodes, n]`` the standardised rank distance ``(u(z) − u(t)) / σ`` of each point to each
    node's cut (meaningless at leaves); ``u(t)`` is the share of knots at or below the cut."""
    return _crossing_logits(tree, knots, scale_points(tree, X), softness)


def _crossing_logits(tree: Tree, knots: Array, Z: Array, softness) -> Array:
    """:func:`crossing_logits` of points already scaled by the tree (``Z`` ``[n, D]``)."""
    count = knots.shape[1]
    point_ranks = jax.vmap(_ranks, in_axes=(0, 1))(knots, Z)            # [D, n]
    node_knots = knots[tree.feature]                                      # [nodes, K]
    cut_ranks = jax.vmap(lambda k, t: jnp.searchsorted(k, t, side="right"))(
        node_knots, tree.threshold)
    return (point_ranks[tree.feature] - cut_ranks[:, None]) / (count * softness)


def log_reach(tree: Tree, knots: Array, X: Array, softness) -> Array:
    """``[nodes, n]`` ``log r(A | x)``: the log-probability that soft routing takes each point
    ``X`` ``[n, D]`` through each node (0 at the root; module docstring)."""
    Z = scale_points(tree, X)
    logits = _crossing_logits(tree, knots, Z, softness)
    log_right, log_left = jax.scipy.stats.norm.logcdf(logits), jax.scipy.stats.norm.logcdf(-logits)
    if tree.missing_right is not None:
        missing = jnp.isnan(Z[:, tree.feature].T)
        side = tree.missing_right[:, None]
        log_right = jnp.where(missing, jnp.where(side, 0.0, -jnp.inf), log_right)
        log_left = jnp.where(missing, jnp.where(side, -jnp.inf, 0.0), log_left)
    nodes = tree.num_nodes
    slots = jnp.arange(nodes)
    left = jnp.where(tree.internal, tree.left_child, nodes)          # out of range: dropped
    edge = jnp.full((nodes, X.shape[0]), -jnp.inf, logits.dtype)
    edge = edge.at[left].set(log_left, mode="drop").at[left + 1].set(log_right, mode="drop")
    edge = jnp.where((slots == 0)[:, None], 0.0, edge)
    return root_path_sum(tree.layout, edge)


@jax.jit
def soft_scores(tree: Tree, knots: Array, node_predictions: Array, log_weights: Array,
                X: Array, softness) -> Array:
    """``[n, L]`` ``Σ_A r(A | x) · w(A) · node_predictions[A]`` for the points ``X`` ``[n, D]``:
    the posterior predictive under soft routing with ``node_predictions`` the nodes' class
    frequencies ``[nodes, L]`` (or one-hot labels for the weighted-majority vote), in blocks of
    at most :data:`MAX_BLOCK` node × point entries."""
    block = max(1, min(X.shape[0], MAX_BLOCK // tree.num_nodes))
    blocks = -(-X.shape[0] // block)
    padded = jnp.concatenate([X, jnp.repeat(X[-1:], blocks * block - X.shape[0], axis=0)])

    def one_block(points):
        mass = jnp.exp(log_reach(tree, knots, points, softness) + log_weights[:, None])
        return mass.T @ node_predictions

    scores = jax.lax.map(one_block, padded.reshape(blocks, block, X.shape[1]))
    return scores.reshape(blocks * block, -1)[:X.shape[0]]
