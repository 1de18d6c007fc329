"""GPU check: the same results on the GPU as on the CPU, then the benchmark table on the GPU.

    python -m experiments.gpu_check [--full]

Runs in under 5 minutes. Exits 0 with a message when no GPU is visible (``jax.devices('gpu')``
fails or is empty). Otherwise:

1. correctness: on one problem per piece — node statistics of a KD tree, PAC-Bayes log weights,
   their gradient with respect to λ1, the best pruning, the vote, and a vmapped λ grid — the GPU
   result (``jax.device_put`` onto the GPU) is compared with the CPU result (float32; weights to
   1e-4 absolute, counts and masks exactly);
2. the benchmark of :mod:`experiments.bench` on the GPU (``--quick`` sizes unless ``--full``).
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

import jaxtree


def gpu_devices() -> list:
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


def pipeline(X, y, X_test, lam):
    """Every piece of the library on one problem; returns a dict of arrays."""
    tree = jaxtree.kd_tree(np.asarray(X), max_depth=12, y=np.asarray(y))
    stats = jaxtree.node_stats(tree, X, y, 3)
    log_w = jaxtree.pacbayes_log_weights(tree, stats, lam, 1.0)
    grad = jax.grad(lambda l: jnp.sum(jnp.exp(jaxtree.pacbayes_log_weights(tree, stats, l, 1.0))
                                      * stats.total))(lam)
    grid = jax.vmap(lambda l: jaxtree.pacbayes_log_weights(tree, stats, l, 1.0))(
        jnp.asarray(2.0 ** np.linspace(-8, 6, 10), jnp.float32))
    pruning = jaxtree.best_pruning(stats.errors + 2.0, tree.internal, layout=tree.layout)
    scores = jaxtree.vote(tree, stats.label, log_w, X_test, 3)
    return dict(counts=stats.counts, label=stats.label, log_w=log_w, grad=grad, grid=grid,
                pruning=pruning, scores=scores)


def compare(cpu: dict, gpu: dict) -> list[str]:
    """Names of the pieces whose GPU result differs from the CPU one."""
    bad = []
    for name in cpu:
        a, b = np.asarray(cpu[name]), np.asarray(gpu[name])
        if a.dtype == bool or np.issubdtype(a.dtype, np.integer) or name == "counts":
            same = np.array_equal(a, b)
        else:
            if name in ("log_w", "grid"):
                a, b = np.exp(a), np.exp(b)
            same = np.allclose(a, b, atol=1e-4, rtol=1e-4)
        print(f"  {name:<8} {'same' if same else 'DIFFERENT'}"
              f"{'' if same or a.dtype == bool else f' (max |diff| {np.max(np.abs(a - b)):.3g})'}")
        if not same:
            bad.append(name)
    return bad


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the full benchmark sizes")
    args = parser.parse_args(argv)
    gpus = gpu_devices()
    if not gpus:
        print(f"No GPU found (jax {jax.__version__}, devices: {jax.devices()}); nothing to check. "
              "Install jax[cuda12] on a machine with an NVIDIA GPU to run this check.")
        return 0
    cpu = jax.devices("cpu")[0]
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4000, 5)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] ** 2 > 1).astype(np.int64) + (X[:, 2] > 1)
    X_test = rng.normal(size=(1000, 5)).astype(np.float32)
    results = {}
    for device in (cpu, gpus[0]):
        with jax.default_device(device):
            inputs = [jax.device_put(v, device) for v in (X, y, X_test)]
            results[device.platform] = jax.device_get(
                pipeline(*inputs, jnp.asarray(4.0, jnp.float32)))
    print(f"GPU {gpus[0].device_kind} against CPU:")
    bad = compare(results["cpu"], results["gpu"])
    print("GPU results match the CPU." if not bad else f"MISMATCH in: {', '.join(bad)}")

    from experiments import bench
    with jax.default_device(gpus[0]):
        bench.run(quick=not args.full)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
