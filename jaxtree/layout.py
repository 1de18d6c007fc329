"""How the nodes of a tree T0 are laid out in flat arrays, and the tree primitives on them.

Every per-node array in jaxtree is one flat array ``[nodes]`` (or ``[nodes, ...]``). A *layout*
says which slot holds which node and provides the only operations the engine needs:

* ``fold_up(step, inputs)`` — a bottom-up pass with any per-node state, a pytree of scalars or
  vectors per node (one step per level, deepest first; each node sees its children's states);
* ``fold_down(step, inputs)`` — its top-down mirror (each node sees its parent's state);
* ``fold_up_levels`` / ``fold_down_levels`` — the same passes with a state that is a whole level
  (per-node arrays beside arrays of any fixed shape, e.g. the packed size tables of
  :func:`jaxtree.min_error_per_size`), per-level inputs and per-level outputs; ``fold_up`` and
  ``fold_down`` are these with a per-node step;
* ``up(leaf, split, internal, combine)`` — the semiring case of ``fold_up``:
  ``v(A) = combine(leaf(A), split(A) + v(A_L) + v(A_R))`` at internal nodes, ``v(A) = leaf(A)``
  elsewhere;
* ``path_sum(edge)`` — top-down accumulation ``s(root) = 0``, ``s(A) = s(parent(A)) + edge(A)``;
* ``sibling(x)`` — ``x`` at the other child of each node's parent;
* ``parent(x)`` — ``x`` at each node's parent (the root maps to itself).

The methods (PAC-Bayes, pruning, ...) only ever call these through :mod:`jaxtree.engine` or the
folds, so a second layout (a level-compacted one for trees hundreds of levels deep) plugs in by
implementing the same methods: every level traversal of the library is one of the two folds.

:class:`CompleteLayout` is the complete binary tree of static depth ``D0`` in heap order: node 0
is the root, node ``i`` has children ``2i+1`` and ``2i+2``, level ``l`` holds nodes
``2**l - 1 … 2**(l+1) - 2``. Its passes are one array operation per level, unrolled under jit
(faster than one fixed-width ``lax.scan`` for depths up to ~20; see ``experiments/bench.py``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.tree import Tree

Array = jax.Array


@functools.partial(jax.tree_util.register_dataclass, data_fields=[], meta_fields=["depth"])
@dataclasses.dataclass(frozen=True)
class CompleteLayout:
    """Complete binary tree of static depth ``depth`` (D0) in heap order; ``2**(D0+1) - 1`` slots.

    Slot 0 is the root and slot ``i`` has children ``2i + 1`` and ``2i + 2`` (module docstring);
    the layout of the trees that ``layout="complete"`` builds, and the one the engine assumes
    when no ``layout`` is given. A pytree with no arrays (``depth`` is static).

    Example:
        ``up`` with a combine that keeps the children's sum counts the T0-leaves below each
        node (T0 splits slots 0 and 1):

        >>> import numpy as np
        >>> import jaxtree
        >>> layout = jaxtree.CompleteLayout(depth=2)
        >>> layout.num_nodes, layout.left_child().tolist()[:3]
        (7, [1, 3, 5])
        >>> internal = np.array([True, True, False, False, False, False, False])
        >>> leaves = layout.up(np.ones(7), np.zeros(7), internal, lambda leaf, split: split)
        >>> print(np.asarray(leaves))
        [3. 2. 1. 1. 1. 1. 1.]
    """

    depth: int

    @property
    def num_nodes(self) -> int:
        return 2 ** (self.depth + 1) - 1

    @property
    def num_levels(self) -> int:
        return self.depth + 1

    @property
    def width(self) -> int:
        """Slots in the widest level (the deepest one), ``2**D0``."""
        return 2 ** self.depth

    # -- static index arrays (NumPy, built once per depth) -------------------------------------
    def left_child(self) -> np.ndarray:
        """``[nodes]`` int32: slot of each node's left child (right = left + 1); leaves of the
        layout point past the end (they never route further because they are never internal)."""
        return (2 * np.arange(self.num_nodes) + 1).astype(np.int32)

    def parent_index(self) -> np.ndarray:
        """``[nodes]`` int32: slot of each node's parent; the root is its own parent."""
        i = np.arange(self.num_nodes)
        return np.maximum((i - 1) // 2, 0).astype(np.int32)

    def node_depth(self) -> np.ndarray:
        """``[nodes]`` int32: the level of each slot."""
        return np.floor(np.log2(np.arange(self.num_nodes) + 1)).astype(np.int32)

    # -- the four primitives --------------------------------------------------------------------
    # One array op per level on per-level pieces from ``jnp.split``, joined by ``concatenate``;
    # repeats and swaps by ``stack`` + ``reshape``. Every op here has a cheap transpose (the
    # engine's gradient is JAX's transpose of its tangent rule, built from these primitives):
    # in-place ``.at[level].set`` buffers ran the forward pass ~1.5x faster but their
    # transposes pad every level to full size (50-90 ms at D0=18); per-level slices ``x[a:b]``
    # likewise. Measured with experiments/bench.py.
    def up(self, leaf: Array, split: Array, internal: Array,
           combine: Callable[[Array, Array], Array]) -> Array:
        """Bottom-up pass; all arguments ``[nodes]``; returns ``[nodes]``."""
        require_node_vectors("up", leaf, split, internal)
        _, out = self.fold_up(semiring_step(combine), (leaf, split, internal))
        return out

    def fold_up(self, step: Callable, inputs):
        """Bottom-up pass with any per-node state (:func:`semiring_step` gives :meth:`up`).

        ``step(x, children) -> (value, out)``: ``x`` is ``inputs`` (a pytree of ``[nodes, ...]``
        arrays) at one level's nodes, ``children`` is ``(left, right)``, the ``value`` pytrees of
        the level below at each node's two children (None at the deepest level); ``value`` and
        ``out`` are pytrees of arrays ``[level nodes, ...]`` (any trailing axes: a vector per
        node). Returns ``(value at the root, out over [nodes, ...])``. One step per level,
        unrolled; :meth:`fold_up_levels` is the form whose state may be a whole level.
        """
        top, out, _ = self.fold_up_levels(per_node_up(step), inputs)
        return jax.tree.map(lambda v: v[0], top), out

    def fold_down(self, step: Callable, inputs):
        """Top-down pass with any per-node state, the mirror of :meth:`fold_up`.

        ``step(x, above) -> (value, out)``: ``x`` is ``inputs`` (a pytree of ``[nodes, ...]``
        arrays) at one level's nodes, ``above`` the ``value`` pytree of the level above at each
        node's parent (None at the root's level); ``value`` and ``out`` are pytrees of arrays
        ``[level nodes, ...]``. Returns ``out`` over ``[nodes, ...]``. One step per level,
        unrolled.
        """
        out, _ = self.fold_down_levels(per_node_down(step), inputs)
        return out

    def fold_up_levels(self, step: Callable, inputs, level_inputs=None):
        """Bottom-up pass whose state is a whole level (per-node arrays and any others).

        ``step(x, x_level, below, children) -> (value, out, level_out)``: ``x`` is ``inputs``
        (``[nodes, ...]`` arrays) at the level's nodes, ``x_level`` is ``level_inputs``
        (``[levels, ...]`` arrays) at the level, ``below`` the ``value`` the step returned for
        the level below (None at the deepest level), and ``children(v)`` gives ``(left, right)``,
        a pytree ``v`` of per-node arrays of the level below at each node's two children.
        ``out`` is per node (``[level nodes, ...]``); ``level_out`` has one shape at every level.
        Returns ``(value of the root's level, out [nodes, ...], level_out [levels, ...])``.
        """
        x_levels = jax.tree.map(self._levels, inputs)
        outs, level_outs = [None] * self.num_levels, [None] * self.num_levels
        value = None
        for level in reversed(range(self.num_levels)):
            value, outs[level], level_outs[level] = step(
                self._at(x_levels, level), at_level(level_inputs, level), value, children_of)
        return value, _concatenate(outs), _stack(level_outs)

    def fold_down_levels(self, step: Callable, inputs, level_inputs=None):
        """Top-down pass whose state is a whole level, the mirror of :meth:`fold_up_levels`.

        ``step(x, x_level, above, parent) -> (value, out, level_out)``: ``above`` is the
        ``value`` of the level above (None at the root's level), ``parent(v)`` gives a pytree of
        per-node arrays of the level above at each node's parent. Returns
        ``(out [nodes, ...], level_out [levels, ...])``.
        """
        x_levels = jax.tree.map(self._levels, inputs)
        outs, level_outs = [], []
        value = None
        for level in range(self.num_levels):
            value, out, level_out = step(self._at(x_levels, level), at_level(level_inputs, level),
                                         value, _at_parents)
            outs.append(out)
            level_outs.append(level_out)
        return _concatenate(outs), _stack(level_outs)

    def path_sum(self, edge: Array) -> Array:
        """Top-down pass: ``s(root) = 0``, ``s(A) = s(parent(A)) + edge(A)``; ``[nodes, ...]``."""
        return path_sum_by_fold(self, edge)

    def sibling(self, x: Array) -> Array:
        """``x`` at each node's sibling (the root is its own sibling); ``[nodes, ...]``."""
        pairs = x[1:].reshape(-1, 2, *x.shape[1:])
        swapped = jnp.stack([pairs[:, 1], pairs[:, 0]], axis=1).reshape(-1, *x.shape[1:])
        return jnp.concatenate([x[:1], swapped])

    def parent(self, x: Array) -> Array:
        """``x`` at each node's parent (the root maps to itself); ``[nodes, ...]``."""
        return jnp.concatenate([x[:1]] + [_twice(x_l) for x_l in self._levels(x)[:-1]])

    # -- helpers -----------------------------------------------------------------------------------
    def _levels(self, x: Array) -> list[Array]:
        """``[nodes, ...]`` → one array per level (``jnp.split``: its transpose is a concatenate)."""
        return jnp.split(x, [2 ** level - 1 for level in range(1, self.num_levels)])

    @staticmethod
    def _at(x_levels, level: int):
        """The pytree of per-level lists ``x_levels`` at one level."""
        return jax.tree.map(lambda v: v[level], x_levels, is_leaf=lambda v: isinstance(v, list))


def semiring_step(combine: Callable[[Array, Array], Array]) -> Callable:
    """The :meth:`CompleteLayout.fold_up` step of ``up``: ``v = combine(leaf, split + v_L + v_R)``
    where the node is internal, ``v = leaf`` elsewhere (and at the deepest level)."""
    def step(x, children):
        leaf, split, internal = x
        if children is None:
            return leaf, leaf
        left, right = children
        value = jnp.where(internal, combine(leaf, split + (left + right)), leaf)
        return value, value
    return step


def root_path_sum(layout, x: Array) -> Array:
    """``[nodes, ...]``: the sum of ``x`` over each node's root path, the node and the root
    included (``layout.path_sum`` leaves the root's own term out)."""
    return x[0] + layout.path_sum(x)


def path_sum_by_fold(layout, edge: Array) -> Array:
    """``layout.path_sum`` as a ``fold_down``: ``s = 0`` at the root, ``s = edge`` at the other
    slots of the root's level (padding of the compact layout: they have no parent), and
    ``s(A) = s(parent(A)) + edge(A)`` below."""
    is_root = (jnp.arange(edge.shape[0]) == 0).reshape((-1,) + (1,) * (edge.ndim - 1))

    def step(x, above):
        edge_level, root = x
        sums = jnp.where(root, jnp.zeros_like(edge_level), edge_level) if above is None \
            else above + edge_level
        return sums, sums

    return layout.fold_down(step, (edge, is_root))


def per_node_up(step: Callable) -> Callable:
    """The ``fold_up_levels`` step of a ``fold_up`` step: each node sees its children's values."""
    def level_step(x, x_level, below, children):
        value, out = step(x, None if below is None else children(below))
        return value, out, None
    return level_step


def per_node_down(step: Callable) -> Callable:
    """The ``fold_down_levels`` step of a ``fold_down`` step: each node sees its parent's value."""
    def level_step(x, x_level, above, parent):
        value, out = step(x, None if above is None else parent(above))
        return value, out, None
    return level_step


def children_of(value):
    """``(left, right)``: a level's values (pytree of ``[2m, ...]``) at the children of the ``m``
    nodes above (heap order: children ``2k``, ``2k+1``)."""
    pairs = jax.tree.map(lambda v: v.reshape(-1, 2, *v.shape[1:]), value)
    return jax.tree.map(lambda p: p[:, 0], pairs), jax.tree.map(lambda p: p[:, 1], pairs)


def _at_parents(value):
    """A level's values (pytree of ``[m, ...]``) at each node of the level below (heap order)."""
    return jax.tree.map(_twice, value)


def at_level(level_inputs, level: int):
    """``level_inputs`` (pytree of ``[levels, ...]``) at one level."""
    return jax.tree.map(lambda v: v[level], level_inputs)


def _concatenate(per_level):
    """A list of per-level pytrees of ``[level nodes, ...]`` → one pytree of ``[nodes, ...]``."""
    return jax.tree.map(lambda *parts: jnp.concatenate(parts), *per_level)


def _stack(per_level):
    """A list of per-level pytrees of one shape → one pytree of ``[levels, ...]``."""
    return jax.tree.map(lambda *parts: jnp.stack(parts), *per_level)


def require_node_vectors(primitive: str, *arrays) -> None:
    """Raise unless every array is ``[nodes]`` (1-D): the pass would silently mix the nodes of
    a ``[nodes, k]`` input. Batches go through ``jax.vmap``."""
    shapes = [tuple(np.shape(x)) for x in arrays]
    if any(len(shape) != 1 for shape in shapes):
        raise ValueError(f"layout.{primitive} takes [nodes] arrays; got shapes {shapes} "
                         "(use jax.vmap for a batch)")


def _twice(x: Array) -> Array:
    """``[m, ...]`` → ``[2m, ...]``: every row repeated twice (a level's values at its children)."""
    return jnp.stack([x, x], axis=1).reshape(-1, *x.shape[1:])


def complete_layout_for(num_nodes: int) -> CompleteLayout:
    """The complete layout whose slot count is ``num_nodes`` (must be ``2**(D0+1) - 1``)."""
    depth = int(round(np.log2(num_nodes + 1))) - 1
    if depth < 0 or 2 ** (depth + 1) - 1 != num_nodes:
        raise ValueError(
            f"an array of {num_nodes} nodes is not a complete heap layout (2**(D0+1) - 1 nodes); "
            "pass layout=tree.layout for other layouts")
    return CompleteLayout(depth)


def pad_complete(tree: Tree, depth: int, num_features: int) -> Tree:
    """The same T0 (a tree in a complete layout) in the complete layout of
    ``depth`` >= its own, with ``num_features`` >= its own: in the heap a node keeps its slot in a
    deeper layout, so padding appends slots that are not internal, and features gain zero columns
    (never split on). Every result on the tree's nodes is unchanged."""
    if not isinstance(tree.layout, CompleteLayout):
        raise ValueError("pad_complete pads trees in the complete layout "
                         "(jaxtree.compact.pad_compact pads compact ones)")
    if depth < tree.layout.depth or num_features < tree.num_features:
        raise ValueError(f"cannot pad a tree of depth {tree.layout.depth} with "
                         f"{tree.num_features} features to depth {depth} and {num_features}")
    layout = CompleteLayout(depth)
    extra = layout.num_nodes - tree.num_nodes
    more = num_features - tree.num_features

    def pad(x, widths, value=0):
        """Padded on the host and device_put: jnp.pad compiles a small program per shape."""
        return jax.device_put(np.pad(np.asarray(x), widths, constant_values=value))

    coef = None if tree.coef is None else pad(tree.coef, ((0, extra), (0, more)))
    return Tree(feature=pad(tree.feature, (0, extra)),
                threshold=pad(tree.threshold, (0, extra)),
                internal=pad(tree.internal, (0, extra)),
                left_child=jax.device_put(layout.left_child()),
                node_depth=jax.device_put(layout.node_depth()),
                shift=pad(tree.shift, (0, more)),
                inv_scale=pad(tree.inv_scale, (0, more), 1),
                layout=layout, clip=tree.clip, coef=coef,
                missing_right=None if tree.missing_right is None
                else pad(tree.missing_right, (0, extra)))


def resolve_layout(layout, node_array):
    """``layout``, or the complete layout implied by the length of ``node_array`` when None."""
    return complete_layout_for(node_array.shape[0]) if layout is None else layout
