"""Scaling table: fit time and peak memory against n, and time against the λ batch size.

    python -m experiments.scaling [--out experiments/results/scaling.md] [--sizes 1e4 1e5 1e6]

Synthetic data: n points in 8 dimensions (standard normal), 2 classes (a noisy nonlinear rule).
A fit is the functional path on a KD tree of depth ceil(log2 n) in the complete layout:
``kd_tree`` → ``node_stats`` → ``pacbayes_potentials`` → ``subtree_log_weights``; "first" includes
compilation, "warm" is the median of 3 later fits. Each n runs in a fresh subprocess so that its
peak resident memory (``ru_maxrss``, the whole process: Python, JAX and the data) is its own.
The λ batch: ``vmap`` of potentials + weights over B settings of (λ1, λ2) on the n=1e5 tree
(median of 3 warm calls; per-setting time = time / B).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

DIMS = 8
BATCHES = (1, 4, 16, 64, 256)


def synthetic(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, DIMS)).astype(np.float32)
    y = (X[:, 0] * X[:, 1] + 0.5 * X[:, 2] + 0.3 * rng.normal(size=n) > 0).astype(np.int64)
    return X, y


def fit(X, y, depth):
    import jax
    import jaxtree
    tree = jaxtree.kd_tree(X, max_depth=depth, y=y)
    stats = jaxtree.node_stats(tree, X, y, 2)
    phi = jaxtree.pacbayes_potentials(stats, 4.0, 1.0)
    return tree, stats, jax.block_until_ready(
        jaxtree.subtree_log_weights(phi, tree.internal, layout=tree.layout))


def measure_one(n: int, batches) -> dict:
    """Fit time and peak memory for n points (run in its own process); λ batches if asked."""
    import jax
    import jax.numpy as jnp
    import jaxtree
    X, y = synthetic(n)
    depth = int(np.ceil(np.log2(n)))
    start = time.perf_counter()
    tree, stats, _ = fit(X, y, depth)
    first = time.perf_counter() - start
    warm = []
    for _ in range(3):
        start = time.perf_counter()
        fit(X, y, depth)
        warm.append(time.perf_counter() - start)
    row = dict(n=n, depth=depth, nodes=tree.num_nodes, first_s=first,
               warm_s=float(np.median(warm)),
               peak_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if batches:
        @jax.jit
        def weights(lam1, lam2):
            def one(l1, l2):
                phi = jaxtree.pacbayes_potentials(stats, l1, l2)
                return jaxtree.subtree_log_weights(phi, tree.internal, layout=tree.layout)
            return jax.vmap(one)(lam1, lam2)

        row["batches"] = []
        for b in batches:
            lam = jnp.asarray(2.0 ** np.linspace(-8, 6, b), jnp.float32)
            weights(lam, lam[::-1]).block_until_ready()
            times = []
            for _ in range(3):
                start = time.perf_counter()
                weights(lam, lam[::-1]).block_until_ready()
                times.append(time.perf_counter() - start)
            row["batches"].append(dict(batch=b, seconds=float(np.median(times))))
    return row


def run_subprocess(n: int, batches) -> dict:
    cmd = [sys.executable, "-m", "experiments.scaling", "--one", str(n)]
    if batches:
        cmd += ["--batches", *map(str, batches)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def markdown(rows: list[dict], header: str) -> str:
    lines = ["# Scaling (experiments/scaling.py)", "", header, "",
             "Command: `python -m experiments.scaling` (each n in a fresh process).", "",
             "## Fit time and peak memory against n", "",
             "KD tree of depth ceil(log2 n), complete layout, float32; fit = build + node "
             "statistics + potentials + weights. Peak memory = the process's maximum resident "
             "set (Python + JAX + data).", "",
             "| n | depth | nodes | first fit (s, compiles) | warm fit (s, median of 3) "
             "| peak memory (MiB) |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['n']:,} | {r['depth']} | {r['nodes']:,} | {r['first_s']:.2f} "
                     f"| {r['warm_s']:.2f} | {r['peak_mib']:.0f} |")
    for r in rows:
        if "batches" not in r:
            continue
        lines += ["", f"## Time against the λ batch size (n = {r['n']:,}, {r['nodes']:,} "
                      "nodes)", "",
                  "`vmap` of potentials + weights over B settings of (λ1, λ2); median of 3 warm "
                  "calls.", "", "| B | time (ms) | per setting (ms) | speed-up vs B=1 |",
                  "|---|---|---|---|"]
        base = r["batches"][0]["seconds"]
        for b in r["batches"]:
            lines.append(f"| {b['batch']} | {b['seconds'] * 1e3:.1f} "
                         f"| {b['seconds'] / b['batch'] * 1e3:.2f} "
                         f"| {base * b['batch'] / b['seconds']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="experiments/results/scaling.md")
    parser.add_argument("--sizes", type=float, nargs="+", default=[1e4, 1e5, 1e6])
    parser.add_argument("--batch-size-n", type=float, default=1e5)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--batches", type=int, nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(args.one, args.batches)))
        return
    import jax
    rows = []
    for n in map(int, args.sizes):
        rows.append(run_subprocess(n, BATCHES if n == int(args.batch_size_n) else None))
        print(json.dumps(rows[-1]), flush=True)
    load = os.getloadavg()[0]
    header = (f"Device: {jax.devices()[0].platform}, {os.cpu_count()} CPUs, jax "
              f"{jax.__version__}; load average {load:.1f} when finished (the machine was "
              "shared: times are noisy).")
    text = markdown(rows, header)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
