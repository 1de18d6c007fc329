"""The Tree pytree and routing (tree.py) against a plain per-point walk."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtree.build import dyadic_tree, kd_tree
from jaxtree.layout import CompleteLayout
from jaxtree.tree import leaf_of, route, scale_points, tree_from_numpy


def walk(tree, x):
    """Reference routing of one unscaled point: the list of slots from the root to its leaf."""
    dtype = np.asarray(tree.threshold).dtype
    z = (np.asarray(x, dtype) - np.asarray(tree.shift)) * np.asarray(tree.inv_scale)
    if tree.clip:
        z = np.clip(z, 0, 1)
    internal, feature = np.asarray(tree.internal), np.asarray(tree.feature)
    threshold, left = np.asarray(tree.threshold), np.asarray(tree.left_child)
    path = [0]
    while internal[path[-1]]:
        node = path[-1]
        path.append(int(left[node] + (z[feature[node]] > threshold[node])))
    return path


def one_split_tree(threshold, dtype):
    """Root splits feature 1 at ``threshold``; no scaling."""
    layout = CompleteLayout(1)
    return tree_from_numpy(feature=[1, 0, 0], threshold=np.array([threshold, 0, 0], dtype),
                           internal=[True, False, False], layout=layout,
                           shift=np.zeros(2), inv_scale=np.ones(2), clip=False)


@pytest.mark.parametrize("builder", [kd_tree, dyadic_tree])
def test_route_matches_a_per_point_walk(precision, builder):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3)).round(1)           # rounding makes duplicates and ties
    tree = builder(X, max_depth=5, min_split=3)
    X_test = np.concatenate([X, rng.normal(size=(40, 3)) * 2])
    path, on_path = (np.asarray(a) for a in route(tree, X_test))
    assert path.shape == on_path.shape == (len(X_test), tree.num_levels)
    assert path.dtype == np.int32 and on_path.dtype == bool
    for row, mask, x in zip(path, on_path, X_test):
        expected = walk(tree, x)
        np.testing.assert_array_equal(row[mask], expected)
        assert mask[:len(expected)].all() and not mask[len(expected):].any()
        assert (row[len(expected):] == expected[-1]).all()  # the leaf repeats
    leaves = np.asarray(leaf_of(tree, X_test))
    np.testing.assert_array_equal(leaves, path[:, -1])
    internal = np.asarray(tree.internal)
    assert not internal[leaves].any()


def test_point_on_a_threshold_goes_left(precision):
    """The tie rule: right iff ``z[feature] > threshold``."""
    t = np.asarray(0.3, precision)
    tree = one_split_tree(t, precision)
    above = np.nextafter(t, np.asarray(1, precision))
    below = np.nextafter(t, np.asarray(0, precision))
    X = np.array([[9.0, t], [9.0, above], [9.0, below], [-9.0, t]], precision)
    np.testing.assert_array_equal(np.asarray(leaf_of(tree, X)), [1, 2, 1, 1])


def test_scale_points_and_clip(precision):
    layout = CompleteLayout(0)
    shift, inv_scale = np.array([1.0, -2.0]), np.array([0.5, 4.0])
    X = np.array([[1.0, -2.0], [3.0, -1.75], [-5.0, 10.0]])
    expected = (X - shift) * inv_scale
    for clip in (False, True):
        tree = tree_from_numpy([0], [0.0], [False], layout, shift, inv_scale, clip)
        Z = np.asarray(scale_points(tree, X))
        assert Z.dtype == precision
        np.testing.assert_allclose(Z, np.clip(expected, 0, 1) if clip else expected, rtol=1e-6)


def test_one_node_tree_routes_everything_to_the_root(precision):
    tree = kd_tree(np.random.default_rng(1).normal(size=(5, 2)), max_depth=0)
    assert tree.num_nodes == 1 and tree.depth == 0 and tree.num_levels == 1
    path, on_path = route(tree, np.zeros((3, 2)))
    np.testing.assert_array_equal(np.asarray(path), np.zeros((3, 1)))
    assert np.asarray(on_path).all()


def test_tree_is_a_pytree_for_jit_and_vmap(precision):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(40, 2))
    tree = kd_tree(X, max_depth=3, layout="complete")
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    rebuilt = jax.tree_util.tree_unflatten(treedef, leaves)
    assert rebuilt.layout == tree.layout and rebuilt.clip == tree.clip
    batches = jnp.asarray(rng.normal(size=(3, 10, 2)), precision)
    mapped = jax.jit(jax.vmap(leaf_of, in_axes=(None, 0)))(tree, batches)
    for row, batch in zip(mapped, batches):
        np.testing.assert_array_equal(np.asarray(row), np.asarray(leaf_of(tree, batch)))
    assert tree.num_features == 2 and tree.num_nodes == 15 and tree.depth == 3
