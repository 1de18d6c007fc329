"""The one engine: bottom-up / top-down passes over a tree T0 in the log or the (min, +) semiring.

Every method in jaxtree reduces to per-node potentials and one of the two functions here
(SPEC §2, "Generic engine"):

* :func:`subtree_log_weights` — log-semiring. For a leaf potential ``a(A)`` and a split potential
  ``b(A)`` (default 0) the distribution over prunings T of T0 is
  ``Q(T) ∝ Π_{A ∈ leaves(T)} e^{a(A)} · Π_{A ∈ internal(T)} e^{b(A)}`` and the result is
  ``log w(A) = log Σ_{T : A ∈ leaves(T)} Q(T)``.
* :func:`best_pruning` — (min, +) semiring: the pruning minimising
  ``Σ_{leaves} c_leaf + Σ_{internal} c_split``, as a leaf mask.

All per-node arrays are flat ``[nodes]`` in the tree's layout (:mod:`jaxtree.layout`); with no
``layout`` argument the complete heap layout is inferred from the length ``2**(D0+1) - 1``.
Nodes that are not in T0 (descendants of a T0-leaf: padding) get ``-inf`` weight / ``False``.
Both functions are pure, jit-, vmap- and grad-compatible. Whatever padding holds (``±inf``, NaN,
``internal = True``) never reaches a node of T0 — a leaf of T0 splits with probability 0 — and
its gradient is 0.

The forward pass is one ``fold_up`` (log β and the log-probability of each split, one ``exp`` and
one ``log`` per internal node) and one ``fold_down`` (reach and weights). Gradients of the weights
come from a hand-written tangent rule (``custom_jvp``, built from the layout primitives only) that
forward mode evaluates directly and reverse mode transposes: about 3x the forward pass at D0=18
(``experiments/bench.py``), where differentiating the passes op by op cost 20-35x.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from jaxtree.layout import resolve_layout

Array = jax.Array


def subtree_log_weights(leaf_potential: Array, internal: Array,
                        split_potential: Optional[Array] = None, layout=None) -> Array:
    """Log node weights ``log w(A)`` of the distribution over prunings (SPEC §2, Algorithms 1–2).

    Args:
      leaf_potential: ``[nodes]`` float, ``a(A)`` (for PAC-Bayes: φ(A)).
      internal: ``[nodes]`` bool, True where T0 splits the node.
      split_potential: ``[nodes]`` float ``b(A)`` or None (0).
      layout: the tree's layout (``tree.layout``); None means the complete heap layout.

    Returns:
      ``[nodes]`` float: ``log w(A)``; ``-inf`` on padding. On every root-to-leaf path of T0 the
      weights sum to 1.
    """
    log_w, _ = _log_weights_and_partition(leaf_potential, internal, split_potential,
                                          resolve_layout(layout, leaf_potential))
    return log_w


def log_partition(leaf_potential: Array, internal: Array,
                  split_potential: Optional[Array] = None, layout=None) -> Array:
    """``log β(root) = log Σ_T Π e^{potentials}``: the log normaliser of :func:`subtree_log_weights`.

    Its gradient with respect to ``leaf_potential`` is exactly the node weights ``w(A)``."""
    _, log_z = _log_weights_and_partition(leaf_potential, internal, split_potential,
                                          resolve_layout(layout, leaf_potential))
    return log_z


def best_pruning(leaf_cost: Array, internal: Array, split_cost: Optional[Array] = None,
                 layout=None) -> Array:
    """Leaves of the minimum-cost pruning of T0, by one (min, +) up pass and a back-tracking pass.

    The cost of a pruning T is ``Σ_{A ∈ leaves(T)} leaf_cost(A) + Σ_{A ∈ internal(T)} split_cost(A)``.
    Ties go to the smaller pruning: a node stops (becomes a leaf) when its leaf cost is ``<=`` the
    best cost of splitting it.

    Args:
      leaf_cost: ``[nodes]`` float.
      internal: ``[nodes]`` bool, True where T0 splits the node.
      split_cost: ``[nodes]`` float or None (0).
      layout: the tree's layout; None means the complete heap layout.

    Returns:
      ``[nodes]`` bool, True exactly at the leaves of the minimum-cost pruning.
    """
    mask, _ = best_pruning_and_cost(leaf_cost, internal, split_cost, layout)
    return mask


def best_pruning_and_cost(leaf_cost: Array, internal: Array, split_cost: Optional[Array] = None,
                          layout=None) -> tuple[Array, Array]:
    """:func:`best_pruning` and the minimum cost (a scalar) together."""
    return _best_pruning_and_cost(leaf_cost, internal, split_cost, resolve_layout(layout, leaf_cost))


@jax.jit
def _best_pruning_and_cost(leaf_cost, internal, split_cost, layout):
    layout, internal, in_tree = _prepare(internal, layout)
    leaf = jnp.where(in_tree, leaf_cost, 0)
    split = _split_or_zero(split_cost, leaf)
    best = layout.up(leaf, split, internal, jnp.minimum)
    # min() returns one of its arguments exactly, so best == leaf iff leaf <= split + children.
    stops = ~internal | (best == leaf)
    # A node is reached when no ancestor stopped; it is a pruning leaf if it is reached and stops.
    stopped_above = layout.path_sum(layout.parent(stops))   # bool: + is "or"
    return in_tree & stops & ~stopped_above, best[0]


def tree_membership(internal: Array, layout=None) -> Array:
    """``[nodes]`` bool: True at the nodes of T0 (the root and every child of an internal node)."""
    _, _, in_tree = _prepare(internal, resolve_layout(layout, internal))
    return in_tree


# ---------------------------------------------------------------------------------------------
@jax.jit
def _log_weights_and_partition(leaf_potential, internal, split_potential, layout):
    internal = jnp.asarray(internal, bool)
    split = _split_or_zero(split_potential, leaf_potential)
    return _weights(leaf_potential, split, internal, layout)


@jax.custom_jvp
def _weights(leaf, split, internal, layout):
    """``(log w [nodes], log β(root))``.

    Nodes of T0 need no mask here: a leaf of T0 splits with probability 0, so every node below
    it has reach 0 whatever its potentials and ``internal`` flags (padding may hold ``±inf``,
    NaN or ``internal = True``). Gradients are masked by the tangent rule."""
    log_w, log_z, _, _ = _weights_and_reach(leaf, split, internal, layout)
    return log_w, log_z


def _weights_and_reach(leaf, split, internal, layout):
    """``(log w, log β(root), log r, log ρ)``: the weights, the log normaliser, and what the
    tangent rule reuses: ``log r(A)``, the log-probability that A is in the pruning (−inf off
    T0), and ``log ρ(A)``, that A splits given that it is in (−inf where T0 does not split A)."""
    log_z, (log_beta, log_split) = layout.fold_up(_beta_and_split, (leaf, split, internal))
    log_stop = jnp.where(internal, leaf - log_beta, 0)
    # log w(A) = log P(A is in the pruning) + log P(A stops | A is in): both from local
    # log-probabilities, never from log α(A) − log β(root), a difference of two numbers of size
    # |log Z| that float32 rounds at |log Z|·6e-8 (SPEC §2's α, β give the same value exactly).
    root = jnp.arange(leaf.shape[0]) == 0
    log_w, log_reach = layout.fold_down(_reach_and_weight, (log_split, log_stop, root))
    return log_w, log_z, log_reach, log_split


def _reach_and_weight(x, above):
    """The down pass's step: ``log r(A) = log r(p) + log ρ(p)`` for A's parent ``p`` (0 at the
    root, −inf at slots of the root's level that are not the root), and
    ``log w(A) = log r(A) + log P(A stops | A is in)`` (−inf where ``r = 0``)."""
    log_split, log_stop, root = x
    log_reach = jnp.where(root, 0, -jnp.inf).astype(log_stop.dtype) if above is None else above
    log_w = jnp.where(log_reach > -jnp.inf, log_reach + log_stop, -jnp.inf)
    return log_reach + log_split, (log_w, log_reach)


def _beta_and_split(x, children):
    """The up pass's step: ``log β(A) = logaddexp(a, t)`` with ``t = b + log β(A_L) + log β(A_R)``
    at internal nodes (``a`` elsewhere), and the log-probability that A splits given that it is
    in the pruning (−inf at nodes that do not split), by :func:`log_beta_and_split`.

    Both come out of one step so that XLA fuses the level into one loop whose output holds a
    ``log``: it keeps such outputs in memory. Computing the split probability in a second pass
    cost one more ``exp`` and ``log`` per node (the pass ran ~2x slower)."""
    leaf, split, internal = x
    if children is None:
        return leaf, (leaf, jnp.full_like(leaf, -jnp.inf))
    left, right = children
    log_beta, log_split = log_beta_and_split(leaf, split + (left + right))
    log_beta = jnp.where(internal, log_beta, leaf)
    return log_beta, (log_beta, jnp.where(internal, log_split, -jnp.inf))


def _children(in_tree):
    """``[nodes]`` bool: nodes of T0 other than the root."""
    return in_tree & (jnp.arange(in_tree.shape[0]) > 0)


@_weights.defjvp
def _weights_jvp(primals, tangents):
    """Tangents of ``(log w, log β(root))`` by four more passes over the layout.

    With ``r(A)`` the probability that A is in the pruning, ``ρ(A)`` that A is split given that
    it is in, ``w(A) = r(A)(1-ρ(A))``, ``s(A) = r(A)ρ(A)``:

    * ``d log β(root) = Σ_A w(A) da(A) + s(A) db(A)``; more generally
      ``d log β(A) = U(A) / r(A)`` with ``U`` the subtree sum (an up pass with +) of
      ``w·da + s·db``;
    * ``d log α`` is the path sum of ``db(parent) + d log β(sibling)``, and
      ``d log w = da + d log α − d log β(root)``.

    Only primitives are used, so every layout gets it; the map is linear in ``(da, db)`` and JAX
    transposes it into the reverse pass (an up pass and two path sums: no per-level residuals
    and no transpose of the ``logaddexp`` recursion, which cost 20-35x the forward pass).
    The tangent of ``log β(A)`` is dropped (set to 0) where ``r(A)`` underflows; that only
    changes the tangents of log weights of nodes whose weight itself underflows (``w <= r``).
    """
    leaf, split, internal, layout = primals
    d_leaf, d_split = tangents[0], tangents[1]
    log_w, log_z, log_reach, log_split = _weights_and_reach(*primals)
    # The nodes of T0 that the pruning reaches with positive probability: elsewhere log w is
    # −inf for every nearby potential, and its tangent is 0.
    in_tree = log_reach > -jnp.inf
    parent = layout.parent
    child = _children(in_tree)
    reach = jnp.exp(log_reach)
    # w = r·(1 − ρ): exact at ties of huge potentials (ρ = ½), where exp(log w) = exp(a − log β)
    # is off by ulp(log β) (NOTES pitfall 3). 1 − exp rather than −expm1: XLA:CPU's expm1 on
    # odd lengths made this one loop 2.8 ms of a 6 ms gradient at D0=18; the cost is an
    # absolute error of eps·r in w where ρ ≈ 1.
    weight = reach * (1 - jnp.exp(log_split))
    # w(parent)·da(parent) + s(parent)·db(parent), half carried by each child (s(parent) = r(A))
    from_parent = jnp.where(child, 0.5 * (parent(weight * d_leaf) + reach * parent(d_split)), 0)
    own = jnp.where(in_tree & ~internal, weight * d_leaf, 0)
    subtree = layout.up(own + from_parent, jnp.zeros_like(own), internal, jnp.add) - from_parent
    tiny = jnp.finfo(reach.dtype).tiny ** 0.5
    d_log_beta = subtree * jnp.where(reach > tiny, 1 / jnp.where(reach > tiny, reach, 1), 0)
    d_log_alpha = layout.path_sum(
        jnp.where(in_tree, parent(d_split) + layout.sibling(d_log_beta), 0))
    d_log_w = jnp.where(in_tree, d_leaf + d_log_alpha - d_log_beta[0], 0)
    return (log_w, log_z), (d_log_w, d_log_beta[0])


def _prepare(internal, layout):
    internal = jnp.asarray(internal, bool)
    # A node is in T0 iff every ancestor is internal; padding below a leaf is ignored even if
    # marked internal.
    # path_sum of booleans: ``+`` on bool is logical or, so this is "some ancestor is a leaf",
    # at one byte per node instead of an int32 count.
    leaf_above = layout.path_sum(~layout.parent(internal))
    in_tree = ~leaf_above
    return layout, internal & in_tree, in_tree


def _split_or_zero(split_potential, like):
    """The split potential as an array like ``like`` (zeros for None). Its values where T0 does
    not split are never read: the passes select the leaf potential there."""
    if split_potential is None:
        return jnp.zeros_like(like)
    return jnp.asarray(split_potential, like.dtype)


def log_beta_and_split(leaf: Array, through: Array) -> tuple[Array, Array]:
    """``(log(e^a + e^t), log σ(t − a))`` elementwise, from one ``exp`` and one ``log``.

    With ``a`` the log-weight of stopping at a node and ``t`` that of splitting it, these are
    ``log β`` and the log-probability of the split. Both come from ``d = t − a`` and
    ``log(1 + e^{-|d|})``, so ``log σ(d)`` is exact to rounding even where ``d`` is huge
    (it is not ``t − log β``, which float32 rounds at ``|t|·6e-8``). ``d`` is NaN only when
    ``a = t = ±inf``; it is taken as 0 there (``log β = ±inf``, ties split ½).
    """
    diff = through - leaf
    diff = jnp.where(jnp.isnan(diff), 0, diff)
    soft = _log1p_exp_neg(jnp.abs(diff))
    return jnp.maximum(leaf, through) + soft, jnp.minimum(diff, 0) - soft


def _log1p_exp_neg(z: Array) -> Array:
    """``log(1 + e^{-z})`` for ``z >= 0``.

    Written ``log(1 + e)`` rather than ``log1p(e)``: XLA:CPU's ``log1p`` fused after ``exp`` ran
    about 10x slower on arrays of odd length — every node array of a complete T0 has
    ``2**(D0+1) - 1`` slots — (``jax.nn.log_sigmoid``: 11.4 ms against 1.0 ms on 2**20 - 1
    floats). The two differ by less than one unit in the last place of 1 (``e`` below
    ``eps/2`` is dropped), i.e. a relative error below ``eps`` in a weight ``e^{log w}``.
    """
    return jnp.log(1 + jnp.exp(-z))
