"""The one engine: bottom-up / top-down passes over a tree T0 in the log or the (min, +) semiring.

Every method in jaxtree reduces to per-node potentials and one of the two semirings here
(Nguyen & Kpotufe 2018, Sec. 4, whose Algorithms 1–2 compute the same weights):

* log semiring — for a leaf potential ``φ(A)`` and a split potential ``b(A)`` (default 0) the
  distribution over prunings T of T0 is
  ``Q(T) ∝ Π_{A ∈ leaves(T)} e^{φ(A)} · Π_{A ∈ internal(T)} e^{b(A)}``.
  :func:`subtree_log_weights` gives ``log w(A) = log Q(A is a leaf of T)``, :func:`log_partition`
  the log normaliser and :func:`pruning_process` the same distribution as a branching process.
* (min, +) semiring — :func:`best_pruning`: the pruning minimising
  ``Σ_{leaves} c_leaf + Σ_{internal} c_split``, as a leaf mask.

**The branching process.** ``Q`` is the law of a random pruning grown from the root: a node A that
is in the pruning splits with probability ``σ(d(A))`` (its children are then in the pruning) and
stops — becomes a leaf — with probability ``σ(−d(A))``; a leaf of T0 always stops. The log-odds
``d(A)`` are local: with ``g(A) = softplus(d(A))`` (``g = 0`` at leaves of T0),

    d(A) = δ(A) + g(A_L) + g(A_R),     δ(A) = b(A) + φ(A_L) + φ(A_R) − φ(A),

``δ(A)`` being the *local offset* of A: the change of ``log Q`` (unnormalised) when the leaf A of
a pruning is split into two leaves. Then ``log P(A splits | A in) = log σ(d)``,
``log P(A stops | A in) = log σ(−d)``, ``log P(A in) = Σ_{ancestors P} log σ(d(P))`` and
``log w(A) = log P(A in) + log P(A stops | A in)``; also ``log β(A) = φ(A) + g(A)`` is the log
partition function of the subtree at A (``log β(root)`` is :func:`log_partition`).

Why this form: both probabilities of a node come from the same ``d``, so the weights on every
root-to-leaf path sum to 1 up to the rounding of numbers of size 1, whatever the size of the
potentials; and ``d`` only ever adds local offsets and terms ``log(1 + e^{−|d|}) ≤ log 2``, never
subtracts two potentials of size ``|φ|`` after they were rounded. (Forming the stop probability
as ``φ − log β`` instead is off by ``ulp(log β)``: ≥ 1 above 1e7 in float32, where weights on a
path summed to 1.75.) Each node's ``d`` is carried as two floats, the sum of local offsets and the
sum of ``log(1 + e^{−|d|})`` terms below it, added only to form ``σ``: a node whose offset cancels
a huge offset of its child keeps the small terms that rounding that child's ``d`` would lose. So
``d`` is exact whenever the offsets and their partial sums are (integer counts times λ's: see
:func:`jaxtree.pacbayes.pacbayes_offsets`, which forms δ from counts, not from potentials).

The functions on offsets (:func:`log_weights_from_offsets`,
:func:`pruning_process_from_offsets`) are the engine's core; the potentials-based ones form δ by
:func:`local_offsets` (one gather of the children) and call them.

All per-node arrays are flat ``[nodes]`` in the tree's layout (:mod:`jaxtree.layout`); with no
``layout`` argument the complete heap layout is inferred from the length ``2**(D0+1) - 1``.
Nodes that are not in T0 (descendants of a T0-leaf: padding) get ``-inf`` weight / ``False``.
Every function is pure, jit-, vmap- and grad-compatible; its arguments are checked (shapes,
dtypes) before anything is traced. Whatever padding holds (``±inf``, NaN, ``internal = True``)
never reaches a node of T0 — a leaf of T0 splits with probability 0 — and its gradient is 0.
Potentials at nodes of T0 may be ``+inf``, and split potentials ``−inf`` (a split never taken);
a leaf potential of ``−inf`` at an internal node of T0 (a node that may not stop) is not
supported (``δ`` would be ``+inf − inf`` at its parent).

The forward pass is one ``fold_up`` (the log-odds and both log-probabilities of each node, one
``exp`` and one ``log`` per internal node) and one ``fold_down`` (reach and weights). Gradients
come from a hand-written tangent rule (``custom_jvp``, built from the layout primitives only) that
forward mode evaluates directly and reverse mode transposes (``experiments/bench.py`` measures
its cost against the pass; differentiating the passes op by op cost 20-35x).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.layout import complete_layout_for

Array = jax.Array


class PruningProcess(NamedTuple):
    """The distribution over prunings as a branching process (see the module docstring).

    Each field is ``[nodes]`` float:

    * ``log_reach`` — ``log P(A is a node of the random pruning)``: 0 at the root, ``−inf`` off
      T0 and below a split of probability 0;
    * ``log_split`` — ``log P(A splits | A is in)``: ``−inf`` where T0 does not split A;
    * ``log_stop`` — ``log P(A stops | A is in)`` (A is a leaf of the pruning): 0 where T0 does
      not split A.

    Where ``log_reach = −inf`` (padding, or below a split of probability 0) the node looks like
    a leaf of T0: ``log_split = −inf``, ``log_stop = 0``. ``log_split`` and ``log_stop`` come
    from one log-odds ``d``: ``e^{log_split} + e^{log_stop} = 1`` to rounding. The log node
    weights are :attr:`log_weights`; the probability that the pruning splits A is
    ``e^{log_reach + log_split}``. Expectations over the random pruning are sums over nodes,
    e.g. ``KL(Q‖P) = Σ_A P_Q(A in)·Σ_{x ∈ {split, stop}} P_Q(x | A)·(log P_Q(x | A) −
    log P_P(x | A))`` for two processes on one T0 (terms with ``P_Q(x | A) = 0`` dropped: they
    are ``0·(−inf + inf)`` in floating point), or a Gibbs risk ``Σ_A w(A)·E_A``.

    Example:
        T0 splits the root (slot 0) and its left child (slot 1) of a depth-2 heap; with zero
        potentials its three prunings are equally likely, so the root splits with probability
        2/3 and slot 1, when in, with probability 1/2:

        >>> import numpy as np
        >>> import jaxtree
        >>> internal = np.array([True, True, False, False, False, False, False])
        >>> process = jaxtree.pruning_process(np.zeros(7), internal)
        >>> print(np.exp(np.asarray(process.log_reach)).round(3))
        [1.    0.667 0.667 0.333 0.333 0.    0.   ]
        >>> print(np.exp(np.asarray(process.log_split)).round(3))
        [0.667 0.5   0.    0.    0.    0.    0.   ]
        >>> print(np.exp(np.asarray(process.log_weights)).round(3))
        [0.333 0.333 0.667 0.333 0.333 0.    0.   ]
    """

    log_reach: Array
    log_split: Array
    log_stop: Array

    @property
    def log_weights(self) -> Array:
        """``[nodes]``: ``log w(A) = log_reach + log_stop`` (``−inf`` where ``log_reach`` is)."""
        return self.log_reach + self.log_stop


# -- public functions on potentials ------------------------------------------------------------
def subtree_log_weights(leaf_potential: Array, internal: Array,
                        split_potential: Optional[Array] = None, layout=None) -> Array:
    """Log node weights ``log w(A) = log Q(A is a leaf of the pruning)``.

    Args:
      leaf_potential: ``[nodes]`` float, ``φ(A)`` (for PAC-Bayes: the node's potential).
      internal: ``[nodes]`` bool, True where T0 splits the node.
      split_potential: ``[nodes]`` float ``b(A)`` or None (0).
      layout: the tree's layout (``tree.layout``); None means the complete heap layout.

    Returns:
      ``[nodes]`` float: ``log w(A)``; ``-inf`` on padding. On every root-to-leaf path of T0 the
      weights sum to 1.

    Raises:
      ValueError, TypeError: on arrays that are not ``[nodes]`` for the layout, potentials that
        are not floats, or ``internal`` that is not bool.

    ``Q(T) ∝ Π_{A ∈ leaves(T)} e^{φ(A)}·Π_{A ∈ internal(T)} e^{b(A)}`` over the prunings T of
    T0. Float results in the potentials' dtype; differentiable (``grad``, ``vmap``, ``jit``).

    Example:
        T0 splits slots 0 and 1 of a depth-2 heap; it has three prunings: {0}, {1, 2} and
        {2, 3, 4}. With zero potentials each has probability 1/3, so slot 2 is a leaf with
        probability 2/3; slots 5 and 6 are not nodes of T0 (``-inf``):

        >>> import numpy as np
        >>> import jaxtree
        >>> internal = np.array([True, True, False, False, False, False, False])
        >>> log_w = jaxtree.subtree_log_weights(np.zeros(7), internal)
        >>> print(np.exp(np.asarray(log_w)).round(3))
        [0.333 0.333 0.667 0.333 0.333 0.    0.   ]
        >>> bool(np.isneginf(log_w[5]))
        True
    """
    layout = _checked_layout(internal, layout, leaf_potential=leaf_potential,
                             split_potential=split_potential)
    return _weights_of_potentials(leaf_potential, internal, split_potential, layout)


def log_partition(leaf_potential: Array, internal: Array,
                  split_potential: Optional[Array] = None, layout=None) -> Array:
    """``log β(root) = log Σ_T Π e^{potentials}``, the log normaliser of
    :func:`subtree_log_weights`.

    Computed as ``φ(root) + softplus(d(root))``. Its gradient with respect to ``leaf_potential``
    is the node weights ``w(A)``, with respect to ``split_potential`` ``P(A splits)``. Arguments
    as :func:`subtree_log_weights`; returns a scalar of the potentials' float dtype.

    Example:
        Three prunings of potential 0: ``log 3``; the gradient is the node weights:

        >>> import numpy as np
        >>> import jaxtree
        >>> internal = np.array([True, True, False, False, False, False, False])
        >>> print(np.asarray(jaxtree.log_partition(np.zeros(7), internal)).round(3))
        1.099
        >>> import jax
        >>> grad = jax.grad(jaxtree.log_partition)(np.zeros(7, np.float32), internal)
        >>> print(np.asarray(grad).round(3))
        [0.333 0.333 0.667 0.333 0.333 0.    0.   ]
    """
    layout = _checked_layout(internal, layout, leaf_potential=leaf_potential,
                             split_potential=split_potential)
    return _log_partition(leaf_potential, internal, split_potential, layout)


def pruning_process(leaf_potential: Array, internal: Array,
                    split_potential: Optional[Array] = None, layout=None) -> PruningProcess:
    """The distribution of :func:`subtree_log_weights` as a branching process: per-node
    ``log P(A in)``, ``log P(A splits | A in)``, ``log P(A stops | A in)``
    (:class:`PruningProcess`). Arguments as :func:`subtree_log_weights`; differentiable, with
    gradients that are finite (0 at nodes never reached).

    Returns:
      :class:`PruningProcess` of three ``[nodes]`` float arrays.

    Example:
        A leaf potential of ``log 2`` at slot 2 doubles the weight of the two prunings where
        slot 2 is a leaf: the root splits with probability 4/5:

        >>> import numpy as np
        >>> import jaxtree
        >>> internal = np.array([True, True, False, False, False, False, False])
        >>> phi = np.array([0.0, 0.0, np.log(2.0), 0.0, 0.0, 0.0, 0.0])
        >>> process = jaxtree.pruning_process(phi, internal)
        >>> print(np.exp(np.asarray(process.log_split[:2])).round(3))
        [0.8 0.5]
    """
    layout = _checked_layout(internal, layout, leaf_potential=leaf_potential,
                             split_potential=split_potential)
    return _process_of_potentials(leaf_potential, internal, split_potential, layout)


def local_offsets(leaf_potential: Array, internal: Array,
                  split_potential: Optional[Array] = None, layout=None) -> Array:
    """``[nodes]``: ``δ(A) = b(A) + φ(A_L) + φ(A_R) − φ(A)`` where ``internal`` (0 elsewhere), the
    local offsets that :func:`log_weights_from_offsets` and :func:`pruning_process_from_offsets`
    take. Arguments as :func:`subtree_log_weights`; float result in the potentials' dtype.

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> internal = np.array([True, True, False, False, False, False, False])
        >>> phi = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0])
        >>> print(np.asarray(jaxtree.local_offsets(phi, internal)))
        [4. 7. 0. 0. 0. 0. 0.]
    """
    layout = _checked_layout(internal, layout, leaf_potential=leaf_potential,
                             split_potential=split_potential)
    return _jitted_local_offsets(leaf_potential, internal, split_potential, layout)


# -- public functions on local offsets (the core) ----------------------------------------------
def log_weights_from_offsets(offset: Array, internal: Array, layout=None) -> Array:
    """Log node weights ``log w(A)`` from the local offsets ``δ`` (see the module docstring).

    Args:
      offset: ``[nodes]`` float, ``δ(A)``; read only where ``internal``.
      internal: ``[nodes]`` bool, True where T0 splits the node.
      layout: the tree's layout; None means the complete heap layout.

    Returns:
      ``[nodes]`` float, as :func:`subtree_log_weights` for any potentials with these offsets.

    Example:
        The offsets of the potentials, not the potentials themselves, set the weights; here
        large offsets make the deepest pruning, {2, 3, 4}, nearly certain:

        >>> import numpy as np
        >>> import jaxtree
        >>> internal = np.array([True, True, False, False, False, False, False])
        >>> phi = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0])
        >>> offsets = jaxtree.local_offsets(phi, internal)
        >>> log_w = jaxtree.log_weights_from_offsets(offsets, internal)
        >>> bool(np.allclose(log_w, jaxtree.subtree_log_weights(phi, internal)))
        True
        >>> print(np.exp(np.asarray(log_w)).round(3))
        [0.    0.001 1.    0.999 0.999 0.    0.   ]
    """
    layout = _checked_layout(internal, layout, offset=offset)
    return _jitted_log_weights(offset, internal, layout)


def pruning_process_from_offsets(offset: Array, internal: Array, layout=None) -> PruningProcess:
    """:func:`pruning_process` from the local offsets ``δ`` (arguments as
    :func:`log_weights_from_offsets`): a node A of the pruning splits with probability
    ``σ(d(A))``, ``d(A) = δ(A) + softplus(d(A_L)) + softplus(d(A_R))`` (module docstring).

    Returns:
      :class:`PruningProcess` of three ``[nodes]`` float arrays.

    Example:
        Slot 1: ``σ(1) = 0.731``; the root: ``σ(0 + softplus(1)) = 0.788``:

        >>> import numpy as np
        >>> import jaxtree
        >>> internal = np.array([True, True, False, False, False, False, False])
        >>> process = jaxtree.pruning_process_from_offsets(np.array([0.0, 1, 0, 0, 0, 0, 0]),
        ...                                                internal)
        >>> print(np.exp(np.asarray(process.log_split[:2])).round(3))
        [0.788 0.731]
    """
    layout = _checked_layout(internal, layout, offset=offset)
    return _jitted_pruning_process(offset, internal, layout)


def child_values(x, layout=None):
    """``(x at the left child, x at the right child)`` of each node: ``x`` is a ``[nodes]`` array
    or a pytree of them, and so is each of the two results. 0 at the slots of the deepest level,
    unspecified (some slot's value) at other nodes that T0 does not split. A gather: JAX
    differentiates (and transposes) it by itself.

    Example:
        On the depth-2 heap (slot ``i``'s children are ``2i + 1`` and ``2i + 2``):

        >>> import numpy as np
        >>> import jaxtree
        >>> left, right = jaxtree.child_values(np.arange(7.0))
        >>> print(np.asarray(left)[:3], np.asarray(right)[:3])
        [1. 3. 5.] [2. 4. 6.]
    """
    leaves = jax.tree.leaves(x)
    if not leaves:
        raise ValueError("child_values needs at least one [nodes] array")
    layout = complete_layout_for(np.shape(leaves[0])[0]) if layout is None else layout
    for leaf in leaves:
        _require_node_array("x", leaf, layout)
    return _child_values(x, layout)


# -- the (min, +) semiring ----------------------------------------------------------------------
def best_pruning(leaf_cost: Array, internal: Array, split_cost: Optional[Array] = None,
                 layout=None) -> Array:
    """Leaves of the minimum-cost pruning of T0, by one (min, +) up pass and a back-tracking pass.

    The cost of a pruning T is
    ``Σ_{A ∈ leaves(T)} leaf_cost(A) + Σ_{A ∈ internal(T)} split_cost(A)``.
    Ties go to the smaller pruning: a node stops (becomes a leaf) when its leaf cost is ``<=`` the
    best cost of splitting it.

    Args:
      leaf_cost: ``[nodes]`` float or int.
      internal: ``[nodes]`` bool, True where T0 splits the node.
      split_cost: ``[nodes]`` float or int, or None (0).
      layout: the tree's layout; None means the complete heap layout.

    Returns:
      ``[nodes]`` bool, True exactly at the leaves of the minimum-cost pruning.

    Example:
        Stopping at the root costs 3; splitting it costs ``min(2, 0 + 1) + 0 = 1``, so the
        pruning splits the root and slot 1:

        >>> import numpy as np
        >>> import jaxtree
        >>> internal = np.array([True, True, False, False, False, False, False])
        >>> leaf_cost = np.array([3, 2, 0, 0, 1, 0, 0])
        >>> jaxtree.best_pruning(leaf_cost, internal).tolist()
        [False, False, True, True, True, False, False]
    """
    mask, _ = best_pruning_and_cost(leaf_cost, internal, split_cost, layout)
    return mask


def best_pruning_and_cost(leaf_cost: Array, internal: Array, split_cost: Optional[Array] = None,
                          layout=None) -> tuple[Array, Array]:
    """:func:`best_pruning` and the minimum cost (a scalar) together.

    Returns:
      ``(leaf_mask, cost)``: ``[nodes]`` bool and a scalar of ``leaf_cost``'s dtype.

    Example:
        A split cost of 3 at the root makes stopping there (cost 3) the cheaper choice:

        >>> import numpy as np
        >>> import jaxtree
        >>> internal = np.array([True, True, False, False, False, False, False])
        >>> leaf_cost = np.array([3, 2, 0, 0, 1, 0, 0])
        >>> mask, cost = jaxtree.best_pruning_and_cost(leaf_cost, internal)
        >>> mask.tolist(), int(cost)
        ([False, False, True, True, True, False, False], 1)
        >>> split_cost = np.array([3, 0, 0, 0, 0, 0, 0])
        >>> mask, cost = jaxtree.best_pruning_and_cost(leaf_cost, internal, split_cost)
        >>> mask.tolist(), int(cost)
        ([True, False, False, False, False, False, False], 3)
    """
    layout = _checked_layout(internal, layout, real=True, leaf_cost=leaf_cost,
                             split_cost=split_cost)
    return _best_pruning_and_cost(leaf_cost, internal, split_cost, layout)


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
    """``[nodes]`` bool: True at the nodes of T0 (the root and every child of an internal node).

    Args:
      internal: ``[nodes]`` bool, True where T0 splits the node.
      layout: the tree's layout; None means the complete heap layout.

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> internal = np.array([True, True, False, False, False, False, False])
        >>> jaxtree.tree_membership(internal).tolist()
        [True, True, True, True, True, False, False]
    """
    layout = _checked_layout(internal, layout)
    _, _, in_tree = _prepare(internal, layout)
    return in_tree


# ---------------------------------------------------------------------------------------------
# Input checks: on static shapes and dtypes only, so they run under a caller's jit too.
def _checked_layout(internal, layout, real=False, **node_arrays):
    """The layout (inferred from ``internal``'s length when None), after checking that
    ``internal`` is a bool ``[nodes]`` array and every named array (None allowed) a ``[nodes]``
    float array (``real``: int also allowed). Raises ValueError/TypeError naming the argument."""
    _require_dtype("internal", internal, np.bool_, "a bool array (True where T0 splits the node)")
    if np.ndim(internal) != 1:
        raise ValueError(f"internal must be a [nodes] array; got shape {tuple(np.shape(internal))}"
                         " (use jax.vmap for a batch)")
    layout = complete_layout_for(np.shape(internal)[0]) if layout is None else layout
    _require_node_array("internal", internal, layout)
    for name, array in node_arrays.items():
        if array is None:
            continue
        if real:
            _require_dtype(name, array, np.number, "an array of real numbers",
                           exclude=np.complexfloating)
        else:
            _require_dtype(name, array, np.floating, "a float array")
        _require_node_array(name, array, layout)
    return layout


def _require_node_array(name, array, layout):
    shape = tuple(np.shape(array))
    if shape != (layout.num_nodes,):
        raise ValueError(f"{name} must be a [nodes] array of {layout.num_nodes} entries for this "
                         f"layout; got shape {shape} (one entry per node slot of the tree, "
                         "tree.layout's; use jax.vmap for a batch)")


def _require_dtype(name, array, kind, what, exclude=None):
    dtype = array.dtype if hasattr(array, "dtype") else np.asarray(array).dtype
    if not np.issubdtype(dtype, kind) or (exclude is not None and np.issubdtype(dtype, exclude)):
        raise TypeError(f"{name} must be {what}; got dtype {dtype}"
                        + (" (convert it with .astype(float))" if kind is np.floating else ""))


# ---------------------------------------------------------------------------------------------
# The log semiring: potentials -> offsets -> process. One jit per public entry point, so that an
# eager call compiles (and dispatches) one program.
@jax.jit
def _weights_of_potentials(leaf_potential, internal, split_potential, layout):
    offset = _local_offsets(leaf_potential, internal, split_potential, layout)
    return _log_weights(offset, internal, layout)


@jax.jit
def _process_of_potentials(leaf_potential, internal, split_potential, layout):
    offset = _local_offsets(leaf_potential, internal, split_potential, layout)
    return _pruning_process(offset, internal, layout)


def _local_offsets(leaf_potential, internal, split_potential, layout):
    split = _split_or_zero(split_potential, leaf_potential)
    _, offset = layout.fold_up(_offset_step, (leaf_potential, split, internal))
    return offset


def _offset_step(x, children):
    """``δ = b + φ(A_L) + φ(A_R) − φ(A)`` where ``internal``, 0 elsewhere (the deepest level has
    no children); the value handed up is the potential itself."""
    leaf, split, internal = x
    if children is None:
        return leaf, jnp.zeros_like(leaf)
    left, right = children
    return leaf, jnp.where(internal, (left + right) + split - leaf, 0)


@jax.jit
def _log_partition(leaf_potential, internal, split_potential, layout):
    offset = _local_offsets(leaf_potential, internal, split_potential, layout)
    _, root_softplus = _process(offset, jnp.asarray(internal, bool), layout)
    return leaf_potential[0] + root_softplus


def _log_weights(offset, internal, layout):
    (log_w, _, _, _), _ = _process(offset, jnp.asarray(internal, bool), layout)
    return log_w


def _pruning_process(offset, internal, layout):
    (_, log_reach, log_split, log_stop), _ = _process(offset, jnp.asarray(internal, bool), layout)
    reached = log_reach > -jnp.inf
    return PruningProcess(log_reach, jnp.where(reached, log_split, -jnp.inf),
                          jnp.where(reached, log_stop, 0))


_jitted_local_offsets = jax.jit(_local_offsets)
_jitted_log_weights = jax.jit(_log_weights)
_jitted_pruning_process = jax.jit(_pruning_process)


@jax.jit
def _child_values(x, layout):
    def step(x_level, below):
        if below is None:
            zero = jax.tree.map(jnp.zeros_like, x_level)
            return x_level, (zero, zero)
        return x_level, below

    _, (left, right) = layout.fold_up(step, x)
    return left, right


@jax.custom_jvp
def _process(offset, internal, layout):
    """``((log w, log r, log ρ, log(1 − ρ)) [nodes], g(root))`` from the local offsets.

    ``r(A)``: probability that A is in the pruning; ``ρ(A)``: that it splits given that it is in
    (``log ρ = −inf``, ``log(1 − ρ) = 0`` where ``internal`` is False); ``g(root)``: the softplus
    of the root's log-odds (0 if the root is not split).

    Nodes of T0 need no mask here: a leaf of T0 splits with probability 0, so every node below
    it has reach 0 whatever its offsets and ``internal`` flags (padding may hold ``±inf``, NaN or
    ``internal = True``). Gradients are masked by the tangent rule."""
    root_value, (offsets, small, log_split) = layout.fold_up(_odds_step, (offset, internal))
    # log P(A stops | A in) = log σ(−d) = −softplus(d) = −g(A) (0 where the pair is 0: no split)
    log_stop = -(offsets + small)
    root = jnp.arange(offset.shape[0]) == 0
    log_w, log_reach = layout.fold_down(_reach_and_weight, (log_split, log_stop, root))
    return (log_w, log_reach, log_split, log_stop), _carried_sum(root_value)


def _odds_step(x, children):
    """The up pass's step. A node's log-odds ``d = δ + g(A_L) + g(A_R)`` (nothing splits at the
    deepest level) and ``g = softplus(d)`` where ``internal``, 0 elsewhere, handed to the parent
    as a pair ``(offsets, small)`` of sum ``g``: the sum of the local offsets of A and of the
    nodes below it that count in full in ``g`` (those reached from A through nodes of ``d > 0``),
    and the sum of their terms ``log(1 + e^{−|d|}) ∈ [0, log 2]``. ``d`` is formed once per node
    from the two, so offsets that cancel are never rounded at the size of a child's ``d`` (see
    the module docstring). Outputs the pair and ``log σ(d)`` (−inf where not ``internal``).

    The pair is both the value and an output (XLA then keeps each level's pair in memory once:
    a step whose outputs differ from its value made the pass 3-5x slower, its fusions reaching
    back over two levels). ``d`` is NaN only where an offset is NaN or infinite offsets of both
    signs meet (padding, or conflicting infinite potentials); it is taken as 0 there."""
    offset, internal = x
    if children is None:
        zero = jnp.zeros_like(offset)
        pair = (zero, zero)
        return pair, pair + (jnp.full_like(offset, -jnp.inf),)
    (offsets_l, small_l), (offsets_r, small_r) = children
    offsets = offset + (offsets_l + offsets_r)
    small = small_l + small_r
    log_odds = offsets + small
    log_odds = jnp.where(jnp.isnan(log_odds), 0, log_odds)
    log_split, _, soft = log_sigmoid_pair(log_odds)
    # softplus(d) = max(d, 0) + soft: the offsets and small terms count where d > 0
    positive = internal & (log_odds > 0)
    pair = (jnp.where(positive, offsets, 0),
            jnp.where(internal, jnp.where(positive, small, 0) + soft, 0))
    return pair, pair + (jnp.where(internal, log_split, -jnp.inf),)


def _carried_sum(value):
    """``g`` from the pair :func:`_odds_step` hands up (no ``inf − inf``: the small part is
    finite)."""
    offsets, small = value
    return offsets + small


def _reach_and_weight(x, above):
    """The down pass's step: ``log r(A) = log r(p) + log ρ(p)`` for A's parent ``p`` (0 at the
    root, −inf at slots of the root's level that are not the root), and
    ``log w(A) = log r(A) + log P(A stops | A is in)`` (−inf where ``r = 0``: both terms are
    ``<= 0`` and never NaN, padding included)."""
    log_split, log_stop, root = x
    log_reach = jnp.where(root, 0, -jnp.inf).astype(log_stop.dtype) if above is None else above
    return log_reach + log_split, (log_reach + log_stop, log_reach)


@_process.defjvp
def _process_jvp(primals, tangents):
    """Tangents of :func:`_process`'s outputs by one more up pass and one path sum.

    With ``ρ = σ(d)`` and ``g' = σ(d) = ρ``: ``dd(A) = dδ(A) + ρ(A_L)·dd(A_L) + ρ(A_R)·dd(A_R)``
    over the split nodes (an up pass whose value is ``dg = ρ·dd``); then
    ``d log ρ = (1 − ρ)·dd``, ``d log(1 − ρ) = −ρ·dd``, ``d log r`` is the path sum of
    ``d log ρ(parent)``, ``d log w = d log r + d log(1 − ρ)`` and ``d g(root) = ρ·dd`` at the root.

    Only primitives are used, so every layout gets it; the map is linear in ``dδ`` and JAX
    transposes it into the reverse pass (no per-level residuals, no transpose of the forward
    recursion). ``1 − ρ`` is ``e^{log(1 − ρ)}``, exact where ``ρ ≈ 1``. Tangents are 0 where the
    output is ``−inf`` (a node never reached, or a probability that is 0).
    """
    offset, internal, layout = primals
    d_offset = tangents[0]
    outputs = _process(offset, internal, layout)
    (log_w, log_reach, log_split, log_stop), _ = outputs
    splits = internal & (log_reach > -jnp.inf)
    split_prob = jnp.where(splits, jnp.exp(log_split), 0)
    stop_prob = jnp.exp(log_stop)
    d_root_softplus, d_log_odds = layout.fold_up(
        _log_odds_tangent_step, (jnp.where(splits, d_offset, 0), split_prob))
    d_log_split = jnp.where(splits & (log_split > -jnp.inf), stop_prob * d_log_odds, 0)
    d_log_stop = jnp.where(splits & (log_stop > -jnp.inf), -split_prob * d_log_odds, 0)
    d_log_reach = jnp.where(log_reach > -jnp.inf, layout.path_sum(layout.parent(d_log_split)), 0)
    d_log_w = jnp.where(log_w > -jnp.inf, d_log_reach + d_log_stop, 0)
    return outputs, ((d_log_w, d_log_reach, d_log_split, d_log_stop), d_root_softplus)


def _log_odds_tangent_step(x, children):
    """The tangent's up step: ``dd = dδ + dg(A_L) + dg(A_R)``, handing up ``dg = ρ·dd`` (inputs
    are 0 where A is not a reached split, so nothing else reaches the sums)."""
    d_offset, split_prob = x
    d_log_odds = d_offset if children is None else d_offset + (children[0] + children[1])
    return split_prob * d_log_odds, d_log_odds


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
    """The split potential (or cost) as an array like ``like`` (zeros for None). Its values where
    T0 does not split are never read: the passes select the leaf's there."""
    if split_potential is None:
        return jnp.zeros_like(like)
    return jnp.asarray(split_potential, like.dtype)


def log_sigmoid_pair(log_odds: Array) -> tuple[Array, Array, Array]:
    """``(log σ(d), log σ(−d), log(1 + e^{−|d|}))`` elementwise, from one ``exp`` and one ``log``.

    ``log σ(d) = min(d, 0) − log(1 + e^{−|d|})``: exact to rounding even where ``|d|`` is huge
    (``d − softplus(d)`` rounds at ``ulp(d)``), and ``σ(d) + σ(−d) = 1`` to rounding. The
    third output is the softplus of ``−|d|``: ``softplus(d) = max(d, 0) + log(1 + e^{−|d|})``."""
    soft = _log1p_exp_neg(jnp.abs(log_odds))
    return jnp.minimum(log_odds, 0) - soft, jnp.minimum(-log_odds, 0) - soft, soft


def _log1p_exp_neg(z: Array) -> Array:
    """``log(1 + e^{-z})`` for ``z >= 0``.

    Written ``log(1 + e)`` rather than ``log1p(e)``: XLA:CPU's ``log1p`` fused after ``exp`` ran
    about 10x slower on arrays of odd length — every node array of a complete T0 has
    ``2**(D0+1) - 1`` slots — (``jax.nn.log_sigmoid``: 11.4 ms against 1.0 ms on 2**20 - 1
    floats). The two differ by less than one unit in the last place of 1 (``e`` below
    ``eps/2`` is dropped), i.e. a relative error below ``eps`` in a weight ``e^{log w}``.
    """
    return jnp.log(1 + jnp.exp(-z))
