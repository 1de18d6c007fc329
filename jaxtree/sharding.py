"""Spreading the work over several devices with JAX's own sharding (``jax.shard_map``).

Two kinds of parallelism cover the library's work:

* **data parallel statistics** (:func:`sharded_node_stats`): the points are split over the devices,
  every device routes its share and counts it per node and class, and one ``psum`` adds the
  ``[nodes, L]`` counts; labels follow from the summed counts. The tree is replicated.
* **a batch of problems** (:func:`sharded_vmap`): a leading batch axis (a λ grid, several folds,
  several datasets of equal shape) is split over the devices and each device applies ``vmap`` to its slice
  (:func:`sharded_pacbayes_log_weights` is the λ grid of the PAC-Bayes weights).

Both pad their inputs to a multiple of the device count (padded points weigh 0; padded problems
repeat the last one and are dropped) and give the same results as one device: counts are sums of
0/1 (exact in float32 up to 2^24 points per node) and each problem is computed by the same code.
``check_vma=False``: the library's
scans start from replicated constants that become per-device values, which the varying-axes
type check would reject. A mesh is a 1-D :class:`jax.sharding.Mesh`; by default all devices (on CPU, set
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` before importing jax to get 8).
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

from jaxtree.pacbayes import pacbayes_log_weights
from jaxtree.stats import NodeStats, counted_stats, stats_from_paths
from jaxtree.tree import Tree, route

Array = jax.Array

AXIS = "devices"


def device_mesh(devices=None) -> Mesh:
    """A 1-D mesh over ``devices`` (default: every device of the default backend)."""
    devices = jax.devices() if devices is None else list(devices)
    if not devices:
        raise ValueError("device_mesh needs at least one device")
    return Mesh(np.asarray(devices), (AXIS,))


def sharded_node_stats(tree: Tree, X, y, num_classes: int, sample_weight=None,
                       mesh: Optional[Mesh] = None) -> NodeStats:
    """:func:`jaxtree.node_stats` with the points split over the devices of ``mesh``.

    Args:
      tree: the tree (replicated on every device).
      X: ``[n, D]`` points; y: ``[n]`` int labels in ``0..num_classes-1``.
      num_classes: L.
      sample_weight: optional ``[n]`` weights.
      mesh: a 1-D mesh (:func:`device_mesh`); default all devices.

    Returns:
      :class:`NodeStats` (``counts [nodes, L]``, ``label [nodes]``), equal to one device's.
    """
    mesh = device_mesh() if mesh is None else mesh
    X = jnp.asarray(X)
    y = jnp.asarray(y)
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise ValueError(f"X must be [n, D] and y [n]; got {X.shape} and {y.shape}")
    weight = (jnp.ones(X.shape[0], tree.threshold.dtype) if sample_weight is None
              else jnp.asarray(sample_weight, tree.threshold.dtype))
    X, y, weight = _pad_rows(mesh.size, X, y, weight)
    counts = _sharded_counts(tree, X, y, weight, num_classes, mesh)
    return counted_stats(tree, counts)


@functools.partial(jax.jit, static_argnames=("num_classes", "mesh"))
def _sharded_counts(tree, X, y, weight, num_classes, mesh):
    def local(tree, X, y, weight):
        path, on_path = route(tree, X)
        counts = stats_from_paths(tree, path, on_path, y, num_classes, weight).counts
        return jax.lax.psum(counts, AXIS)

    return jax.shard_map(local, mesh=mesh, in_specs=(P(), P(AXIS), P(AXIS), P(AXIS)),
                         out_specs=P(), check_vma=False)(tree, X, y, weight)


def sharded_vmap(fn: Callable, mesh: Optional[Mesh] = None) -> Callable:
    """``jax.vmap(fn)`` whose batch (the leading axis of every argument) is split over devices.

    ``fn`` takes and returns arrays / pytrees; every argument is batched (close over the shared
    ones). The batch is padded to a multiple of the device count by repeating its last entry;
    the padding is dropped from the result.
    """
    mesh = device_mesh() if mesh is None else mesh

    @jax.jit
    def mapped(*args):
        size = jax.tree_util.tree_leaves(args)[0].shape[0]
        padded = jax.tree_util.tree_map(lambda a: _pad_repeat(a, mesh.size), args)
        out = jax.shard_map(jax.vmap(fn), mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                            check_vma=False)(*padded)
        return jax.tree_util.tree_map(lambda a: a[:size], out)

    return mapped


def sharded_pacbayes_log_weights(tree: Tree, stats: NodeStats, lam1, lam2,
                                 mesh: Optional[Mesh] = None) -> Array:
    """PAC-Bayes log node weights for a grid of ``(lam1, lam2)`` (``[g]`` each), the grid split
    over the devices; returns ``[g, nodes]`` (row k: :func:`jaxtree.pacbayes_log_weights` at
    ``lam1[k], lam2[k]``)."""
    lam1, lam2 = jnp.broadcast_arrays(jnp.atleast_1d(jnp.asarray(lam1, stats.counts.dtype)),
                                      jnp.atleast_1d(jnp.asarray(lam2, stats.counts.dtype)))

    def one(l1, l2):
        return pacbayes_log_weights(tree, stats, l1, l2)

    return sharded_vmap(one, mesh)(lam1, lam2)


def _pad_rows(devices: int, *arrays):
    """Pad the leading axis to a multiple of ``devices`` with zeros (zero weight: no effect)."""
    extra = -arrays[0].shape[0] % devices
    return tuple(jnp.pad(a, [(0, extra)] + [(0, 0)] * (a.ndim - 1)) for a in arrays)


def _pad_repeat(a: Array, devices: int) -> Array:
    extra = -a.shape[0] % devices
    return jnp.concatenate([a, jnp.repeat(a[-1:], extra, axis=0)]) if extra else a
