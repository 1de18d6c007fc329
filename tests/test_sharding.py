"""Sharded statistics and λ grids equal the one-device results (8 CPU devices, in a subprocess:
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` must be set before jax is imported)."""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtree
from jaxtree import sharding

SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    import jaxtree
    from jaxtree import sharding
    assert len(jax.devices()) == 8, jax.devices()
    mesh = sharding.device_mesh()
    for x64 in (False, True):
        with jax.enable_x64(x64):
            rng = np.random.default_rng(0)
            X = rng.normal(size=(1003, 3))           # not a multiple of 8
            y = rng.integers(0, 3, 1003)
            weight = rng.random(1003)
            for tree in (jaxtree.kd_tree(X, max_depth=6, y=y),
                         jaxtree.dyadic_tree(X, max_depth=9, y=y, layout="compact")):
                for w in (None, weight):
                    one = jaxtree.node_stats(tree, X, y, 3, w)
                    many = sharding.sharded_node_stats(tree, X, y, 3, w, mesh=mesh)
                    # 0/1 counts are exact; weighted sums may differ in the last bits (order)
                    np.testing.assert_allclose(np.asarray(many.counts), np.asarray(one.counts),
                                               rtol=1e-12 if x64 else 1e-5)
                    if w is None:
                        np.testing.assert_array_equal(np.asarray(many.counts),
                                                      np.asarray(one.counts))
                        np.testing.assert_array_equal(np.asarray(many.label),
                                                      np.asarray(one.label))
                if x64:
                    continue  # the grids below run in float32 only (compiles are slow)
                stats = jaxtree.node_stats(tree, X, y, 3)
                lam1 = 2.0 ** np.linspace(-8, 6, 9)  # 9 settings over 8 devices
                lam2 = lam1[::-1]
                grid = np.asarray(sharding.sharded_pacbayes_log_weights(tree, stats, lam1, lam2))
                assert grid.shape == (9, tree.num_nodes)
                for k in range(9):
                    ref = np.asarray(jaxtree.pacbayes_log_weights(tree, stats, lam1[k], lam2[k]))
                    # a vmapped pass may round differently: log-space sums of size |log Z|
                    # carry about eps·|log Z| in every log weight
                    phi = jaxtree.pacbayes_potentials(stats, lam1[k], lam2[k])
                    log_z = float(jaxtree.log_partition(phi, tree.internal, layout=tree.layout))
                    atol = 64 * np.finfo(grid.dtype).eps * max(1.0, abs(log_z))
                    np.testing.assert_allclose(np.exp(grid[k]), np.exp(ref), atol=atol)
                    assert np.array_equal(np.isinf(grid[k]), np.isinf(ref))
                # a batch of problems: vmap over devices equals a plain vmap
                batch = jnp.asarray(rng.normal(size=(11, tree.num_nodes)))
                fn = lambda a: jaxtree.subtree_log_weights(a, tree.internal, layout=tree.layout)
                np.testing.assert_array_equal(np.asarray(sharding.sharded_vmap(fn, mesh)(batch)),
                                              np.asarray(jax.vmap(fn)(batch)))
    print("SHARDING-OK")
""")


@pytest.mark.slow   # 50 s (a subprocess with 8 host devices); the in-process mesh test stays
def test_eight_devices_match_one_device():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
               JAX_PLATFORMS="cpu")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SHARDING-OK" in result.stdout


def test_one_device_mesh_in_process(precision):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(101, 2))
    y = rng.integers(0, 2, 101)
    tree = jaxtree.kd_tree(X, max_depth=4, y=y)
    mesh = sharding.device_mesh(jax.devices()[:1])
    one = jaxtree.node_stats(tree, X, y, 2)
    many = sharding.sharded_node_stats(tree, X, y, 2, mesh=mesh)
    np.testing.assert_array_equal(np.asarray(many.counts), np.asarray(one.counts))
    assert many.counts.dtype == precision
    grid = sharding.sharded_pacbayes_log_weights(tree, one, [1.0, 2.0], 1.0, mesh=mesh)
    np.testing.assert_allclose(np.asarray(grid[1]),
                               np.asarray(jaxtree.pacbayes_log_weights(tree, one, 2.0, 1.0)),
                               rtol=1e-6)


def test_bad_input_is_a_clear_error():
    tree = jaxtree.kd_tree(np.random.default_rng(2).normal(size=(20, 2)), max_depth=2)
    with pytest.raises(ValueError, match="X must be"):
        sharding.sharded_node_stats(tree, jnp.zeros(5), jnp.zeros(5, int), 2)
    with pytest.raises(ValueError, match="at least one device"):
        sharding.device_mesh([])
