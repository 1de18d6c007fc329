"""The :class:`Tree` pytree (a partition tree T0 in some layout) and routing points down it.

A tree is a set of flat per-node arrays in a layout (:mod:`jaxtree.layout`) plus the feature
scaling that its builder applied (prediction applies the same). An internal node ``A`` sends a
scaled point ``z`` to its right child iff ``z[feature[A]] > threshold[A]`` (``<=`` goes left; the
tie rule is pinned by a test), to the slot ``left_child[A] + 1`` if right, ``left_child[A]`` if left.
An oblique tree (:mod:`jaxtree.oblique`) holds a hyperplane per node in ``coef``: right iff
``coef[A]·z >= threshold[A]`` (docs/theory/oblique.md).

**Missing values.** A tree with ``missing_right`` (the CART trees of :func:`jaxtree.grow_tree`)
routes a point whose ``feature[A]`` coordinate is NaN to the right child iff
``missing_right[A]``, the side the split learnt for missing values (docs/theory/missing.md);
the other trees refuse NaN.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import jax
import jax.numpy as jnp

from jaxtree.validation import check_points, float_dtype

Array = jax.Array


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["feature", "threshold", "internal", "left_child", "node_depth", "shift",
                 "inv_scale", "layout", "coef", "missing_right"],
    meta_fields=["clip"])
@dataclasses.dataclass(frozen=True)
class Tree:
    """A partition tree T0 (``nodes`` = the layout's slot count, ``D`` = number of features).

    Attributes:
        feature: ``[nodes]`` int32, split feature of internal nodes (0 elsewhere).
        threshold: ``[nodes]`` float, split threshold in scaled units (0 elsewhere).
        internal: ``[nodes]`` bool, True where T0 splits the node.
        left_child: ``[nodes]`` int32, slot of the left child (the right child is the next slot).
        node_depth: ``[nodes]`` int32, depth ℓ_A of each slot (root 0).
        shift: ``[D]`` float; a point ``x`` is scaled to ``(x - shift) * inv_scale``.
        inv_scale: ``[D]`` float (see ``shift``).
        layout: the layout (:class:`jaxtree.layout.CompleteLayout` or a compact one).
        clip: static bool; clip scaled points to ``[0, 1]`` (dyadic trees).
        coef: ``[nodes, D]`` float hyperplane normals of an oblique tree (``feature`` unused),
            or None for an axis-aligned tree.
        missing_right: ``[nodes]`` bool, True where a point missing (NaN) in ``feature[A]`` goes
            to the right child; None for a tree that refuses NaN (module docstring).

    Float arrays are float32, or float64 with ``jax_enable_x64``. A point goes to the left
    child of an axis-aligned node when its scaled ``feature`` coordinate is ``<= threshold``.
    Trees come from the builders (:func:`jaxtree.kd_tree`, :func:`jaxtree.dyadic_tree`,
    :func:`jaxtree.cart_tree`, :func:`jaxtree.oblique_tree`); a Tree is a pytree (``jit``,
    ``vmap`` and ``tree_map`` see its arrays; ``layout`` and ``clip`` are static).

    Example:
        A depth-2 KD tree on four points of one feature; with ``y`` given, the pure right
        child (slot 2) is not split:

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> y = np.array([0, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2, y=y)
        >>> tree.layout, tree.num_nodes
        (CompleteLayout(depth=2), 7)
        >>> tree.internal.tolist()
        [True, True, False, False, False, False, False]
        >>> tree.left_child.tolist()[:2], tree.node_depth.tolist()
        ([1, 3], [0, 1, 1, 2, 2, 2, 2])
        >>> print(np.asarray(tree.threshold).round(3))
        [1.342 0.447 0.    0.    0.    0.    0.   ]
    """

    feature: Array
    threshold: Array
    internal: Array
    left_child: Array
    node_depth: Array
    shift: Array
    inv_scale: Array
    layout: object
    clip: bool = False
    coef: Optional[Array] = None
    missing_right: Optional[Array] = None

    @property
    def num_nodes(self) -> int:
        """Number of slots in the layout (padding included)."""
        return self.internal.shape[0]

    @property
    def num_levels(self) -> int:
        """Number of levels (depth + 1)."""
        return self.layout.num_levels

    @property
    def depth(self) -> int:
        """Depth of T0 (the deepest level that holds a node)."""
        return self.layout.num_levels - 1

    @property
    def width(self) -> int:
        """Slots per level: W of a compact layout, ``2**depth`` (the deepest level) of the heap."""
        return getattr(self.layout, "width", 2 ** self.depth)

    @property
    def num_features(self) -> int:
        return self.shift.shape[0]

    @property
    def routes_missing(self) -> bool:
        """Whether NaN coordinates are routed (by ``missing_right``) rather than refused."""
        return self.missing_right is not None


def check_node_arrays(tree: Tree, **arrays) -> None:
    """Raise unless every named array is ``[nodes]`` for ``tree`` (shapes are static, so this
    works under ``jit``): a gather past the end of a shorter array would clamp silently."""
    wrong = {name: list(a.shape) for name, a in arrays.items() if a.shape != (tree.num_nodes,)}
    if wrong:
        raise ValueError(f"{', '.join(wrong)} must be [nodes] = [{tree.num_nodes}] for this "
                         f"tree; got {wrong}")


def check_tree_points(tree: Tree, X, name: str = "X") -> None:
    """Raise unless ``X`` holds points to route down ``tree``: ``[n, D]``, real, finite — or NaN
    where the tree routes missing values (:attr:`Tree.routes_missing`). Shapes only when
    traced."""
    check_points(X, tree.num_features, name, allow_nan=tree.routes_missing)


def scale_points(tree: Tree, X: Array) -> Array:
    """``[n, D]`` → ``[n, D]``: the builder's scaling (and clipping, for dyadic trees)."""
    Z = (jnp.asarray(X, tree.threshold.dtype) - tree.shift) * tree.inv_scale
    return jnp.clip(Z, 0.0, 1.0) if tree.clip else Z


def route(tree: Tree, X: Array) -> tuple[Array, Array]:
    """Root-to-leaf paths of a batch of points.

    Args:
      tree: the tree.
      X: ``[n, D]`` real (int, float or bool), finite, unscaled points; NaN (missing) allowed
        where the tree routes it (:attr:`Tree.routes_missing`).

    Returns:
      path: ``[n, levels]`` int32, the slot of the node containing each point at each level; after
        the point's leaf the leaf is repeated.
      on_path: ``[n, levels]`` bool, True at the levels where ``path`` is a distinct node (the
        nodes of the root-to-leaf path).

    Raises:
      ValueError, TypeError: ``X`` of another shape than ``[n, D]``, not real, or (when
        concrete) holding inf, or NaN that the tree does not route.

    Example:
        Points 2 and 3 stop at slot 2, a leaf of T0 at level 1 (its slot is repeated, and
        ``on_path`` is False, at level 2):

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> tree = jaxtree.kd_tree(X, max_depth=2, y=np.array([0, 1, 1, 1]))
        >>> path, on_path = jaxtree.route(tree, X)
        >>> path.tolist()
        [[0, 1, 3], [0, 1, 4], [0, 2, 2], [0, 2, 2]]
        >>> on_path.tolist()
        [[True, True, True], [True, True, True], [True, True, False], [True, True, False]]
    """
    check_tree_points(tree, X)
    return _route(tree, X)


@jax.jit
def _route(tree: Tree, X: Array) -> tuple[Array, Array]:
    Z = scale_points(tree, X)
    rows = jnp.arange(Z.shape[0])

    def step(node, _):
        if tree.coef is None:
            value = Z[rows, tree.feature[node]]
            go_right = value > tree.threshold[node]
            if tree.missing_right is not None:
                go_right = jnp.where(jnp.isnan(value), tree.missing_right[node], go_right)
        else:
            go_right = jnp.einsum("nd,nd->n", Z, tree.coef[node]) >= tree.threshold[node]
        go_right = go_right.astype(node.dtype)
        child = tree.left_child[node] + go_right
        nxt = jnp.where(tree.internal[node], child, node)
        return nxt, nxt

    root = jnp.zeros(Z.shape[0], jnp.int32)
    _, deeper = jax.lax.scan(step, root, None, length=tree.num_levels - 1)
    path = jnp.concatenate([root[:, None], deeper.T], axis=1)
    on_path = jnp.concatenate(
        [jnp.ones_like(path[:, :1], bool), path[:, 1:] != path[:, :-1]], axis=1)
    return path, on_path


def leaf_of(tree: Tree, X: Array) -> Array:
    """``[n]`` int32: the slot of the T0-leaf containing each ``[n, D]`` point of ``X``.

    The last column of :func:`route`'s ``path``; raises as :func:`route` does.

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> tree = jaxtree.kd_tree(X, max_depth=2, y=np.array([0, 1, 1, 1]))
        >>> jaxtree.leaf_of(tree, np.array([[0.8], [2.5], [-9.0]])).tolist()
        [4, 2, 3]
    """
    path, _ = route(tree, X)
    return path[:, -1]


def tree_from_numpy(feature, threshold, internal, layout, shift, inv_scale, clip) -> Tree:
    """Assemble a :class:`Tree` from NumPy arrays (used by the builders)."""
    dtype = float_dtype()
    return Tree(
        feature=jnp.asarray(feature, jnp.int32),
        threshold=jnp.asarray(threshold, dtype),
        internal=jnp.asarray(internal, bool),
        left_child=jnp.asarray(layout.left_child(), jnp.int32),
        node_depth=jnp.asarray(layout.node_depth(), jnp.int32),
        shift=jnp.asarray(shift, dtype),
        inv_scale=jnp.asarray(inv_scale, dtype),
        layout=layout,
        clip=bool(clip),
    )

