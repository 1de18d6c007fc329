"""GPU check: the same results on the GPU as on the CPU, then the benchmark table on the GPU.

    python -m experiments.gpu_check [--full] [--sections pieces fit bench]
    python -m experiments.gpu_check --device cpu --small      # the same script on this CPU

Runs in under 5 minutes. Exits 0 with a message when no GPU is visible (``jax.devices('gpu')``
fails or is empty) and ``--device cpu`` is not given. Otherwise:

1. ``pieces`` — correctness: on one problem per piece — node statistics of a KD tree, PAC-Bayes
   log weights, their gradient with respect to λ1, the best pruning, the vote, and a vmapped λ
   grid — the GPU result (``jax.device_put`` onto the GPU) is compared with the CPU result
   (float32; weights to 1e-4 absolute, counts and masks exactly);
2. ``fit`` — the whole fit on the device (:func:`fit_section`): the jitted
   :func:`jaxtree.fitting.fit_with_config` (T0 grown, counted, λ's tuned by the CV grid, weights)
   on 10⁵ rows × 20 features for KD and binned-CART T0, its first call and its warm median, and
   whether its model equals the CPU's; a ``jax.vmap`` over 64 bootstrap weight vectors against a
   loop of 64 jitted calls (KD T0, 20,000 rows); a 1,000-tree
   :class:`jaxtree.PACBayesForestClassifier` fit on 4,000 rows (first fit, then a refit on 3,900
   rows, the same padded shape);
3. ``bench`` — the benchmark of :mod:`experiments.bench` on the GPU (``--quick`` sizes unless
   ``--full``).

``--small`` divides every size of ``fit`` by 20 (a dry run of the script on a CPU).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

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


def _timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    return time.perf_counter() - start, out


def _problem(n: int, dims: int, seed: int = 0):
    """``(X [n, dims] float32, y [n] int32)``: 3 classes from two features, 10 % label noise."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dims)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] ** 2 > 1).astype(np.int32) + (X[:, 2] > 1)
    flip = rng.random(n) < 0.1
    return X, np.where(flip, rng.integers(0, 3, n), y).astype(np.int32)


def _whole_fit(X, y, partition: str, device):
    """The jitted whole fit on ``device``: ``(first call s, warm median s, model)``."""
    from jaxtree import fitting
    config = fitting.fit_config(len(y), X.shape[1], num_classes=3, partition=partition)
    fit = jax.jit(lambda X, y, w: fitting.fit_with_config(X, y, w, None, config))
    args = [jax.device_put(a, device) for a in (X, y, np.ones(len(y), np.float32))]
    first, model = _timed(lambda: fit(*args))
    warm = statistics.median(_timed(lambda: fit(*args))[0] for _ in range(3))
    return first, warm, jax.device_get(model)


def fit_section(device, scale: int = 1) -> bool:
    """The whole fit, a vmapped batch of bootstrap fits and a 1,000-tree forest on ``device``
    (module docstring); sizes divided by ``scale``. Returns whether every model on the device
    equals the CPU's (the same tree and λ's)."""
    from jaxtree import fitting
    cpu = jax.devices("cpu")[0]
    same = True
    X, y = _problem(100_000 // scale, 20)
    for partition in ("kd", "cart"):
        first, warm, model = _whole_fit(X, y, partition, device)
        line = f"  fit {partition} n={len(y)}: first call {first:.2f} s, warm {warm:.3f} s"
        if device.platform != "cpu":
            _, cpu_warm, reference = _whole_fit(X, y, partition, cpu)
            equal = (np.array_equal(model.tree.internal, reference.tree.internal)
                     and np.allclose(model.lam1, reference.lam1)
                     and np.allclose(model.lam2, reference.lam2))
            same &= bool(equal)
            line += f"; CPU warm {cpu_warm:.3f} s; same model as the CPU: {equal}"
        print(line, flush=True)

    X, y = _problem(20_000 // scale, 20, seed=1)
    bootstraps = 64
    weights = np.asarray(jax.random.poisson(jax.random.PRNGKey(0), 1.0, (bootstraps, len(y))),
                         np.float32)
    config = fitting.fit_config(len(y), X.shape[1], num_classes=3, partition="kd")
    fit = lambda X, y, w: fitting.fit_with_config(X, y, w, None, config)   # noqa: E731
    one, batch = jax.jit(fit), jax.jit(jax.vmap(fit, in_axes=(None, None, 0)))
    X_d, y_d, w_d = (jax.device_put(a, device) for a in (X, y, weights))
    first_batch, batched = _timed(lambda: batch(X_d, y_d, w_d))
    jax.block_until_ready(one(X_d, y_d, w_d[0]))
    vmapped = statistics.median(_timed(lambda: batch(X_d, y_d, w_d))[0] for _ in range(3))
    loop = statistics.median(_timed(lambda: [one(X_d, y_d, w) for w in w_d])[0]
                             for _ in range(3))
    looped = [jax.device_get(one(X_d, y_d, w)) for w in w_d[:4]]
    identical = all(np.array_equal(np.asarray(batched.tree.internal[b]), looped[b].tree.internal)
                    for b in range(4))
    print(f"  vmap of {bootstraps} bootstrap fits (kd, n={len(y)}): first call "
          f"{first_batch:.2f} s, warm {vmapped:.3f} s; loop of jitted fits {loop:.3f} s "
          f"({vmapped / loop:.2f}x the loop); first 4 equal the loop's: {identical}", flush=True)
    same &= bool(identical)

    from jaxtree.forest import PACBayesForestClassifier
    trees = 1000 // scale
    X, y = _problem(4000 // scale, 20, seed=2)
    with jax.default_device(device):
        first, forest = _timed(lambda: PACBayesForestClassifier(
            n_estimators=trees, random_state=0).fit(X, y))
        rows = len(y) * 39 // 40
        refit, _ = _timed(lambda: PACBayesForestClassifier(
            n_estimators=trees, random_state=1).fit(X[:rows], y[:rows]))
    print(f"  forest of {trees} trees, n={len(y)}: first fit {first:.2f} s, refit on {rows} rows "
          f"{refit:.2f} s, OOB accuracy {forest.oob_score_:.3f}", flush=True)
    return same


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the full benchmark sizes")
    parser.add_argument("--sections", nargs="*", default=["pieces", "fit", "bench"],
                        choices=["pieces", "fit", "bench"])
    parser.add_argument("--device", choices=["gpu", "cpu"], default="gpu",
                        help="cpu: run the fit section on the CPU (a dry run of the script)")
    parser.add_argument("--small", action="store_true", help="fit section sizes divided by 20")
    args = parser.parse_args(argv)
    scale = 20 if args.small else 1
    if args.device == "cpu":
        return 0 if fit_section(jax.devices("cpu")[0], scale) else 1
    gpus = gpu_devices()
    if not gpus:
        print(f"No GPU found (jax {jax.__version__}, devices: {jax.devices()}); nothing to check. "
              "Install jax[cuda12] on a machine with an NVIDIA GPU to run this check.")
        return 0
    bad = []
    if "pieces" in args.sections:
        bad = check_pieces(gpus[0])
    if "fit" in args.sections:
        print(f"Whole fit on {gpus[0].device_kind}:")
        if not fit_section(gpus[0], scale):
            bad.append("fit")
    if "bench" in args.sections:
        from experiments import bench
        with jax.default_device(gpus[0]):
            bench.run(quick=not args.full)
    return 1 if bad else 0


def check_pieces(gpu) -> list[str]:
    """The pieces on the GPU against the CPU; names of those that differ."""
    cpu = jax.devices("cpu")[0]
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4000, 5)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] ** 2 > 1).astype(np.int64) + (X[:, 2] > 1)
    X_test = rng.normal(size=(1000, 5)).astype(np.float32)
    results = {}
    for device in (cpu, gpu):
        with jax.default_device(device):
            inputs = [jax.device_put(v, device) for v in (X, y, X_test)]
            results[device.platform] = jax.device_get(
                pipeline(*inputs, jnp.asarray(4.0, jnp.float32)))
    print(f"GPU {gpu.device_kind} against CPU:")
    bad = compare(results["cpu"], results["gpu"])
    print("GPU results match the CPU." if not bad else f"MISMATCH in: {', '.join(bad)}")
    return bad


if __name__ == "__main__":
    sys.exit(main())
