"""Deep partition trees on the compact layout: the paper's dyadic T0, a CART T0, and scaling.

    python -m experiments.bench_deep [--repeats 21] [--skip-fit]

Prints three markdown tables and writes them to ``experiments/results/deep.md``:

1. **T0 on real data** (the paper's training sizes, one random split, seed 0): dyadic T0 on spam
   and letter with the paper's depth rule ``floor(ln n)·D``, CART T0 on letter — depth, width W,
   slots, build time, statistics time, engine pass time (PAC-Bayes weights; minimum-cost pruning),
   and peak memory (of the build: NumPy allocations by ``tracemalloc``; of one engine pass:
   XLA's buffer assignment, arguments + outputs + temporaries).
2. **Scaling with depth**: synthetic trees of fixed width W with 25 … 400 levels (and W varied at
   a fixed depth): pass time and memory per slot stay flat, i.e. O(depth·W); the complete heap
   would need ``2**(depth+1) - 1`` slots.
3. **The estimator**: ``PACBayesTreeClassifier(partition=...)`` with its defaults (the paper's depth
   rule, λ's tuned by 2-fold CV over the paper's grid) fit on spam's 2601 training points, and its
   error on 2000 test points.

Times are medians over ``--repeats`` warm calls (compile time reported separately).
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import platform
import time
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np

import jaxtree
from jaxtree.build import GrownLevel, pack
from jaxtree.engine import best_pruning, subtree_log_weights
from experiments.datasets import load, train_size

RESULTS = pathlib.Path(__file__).parent / "results" / "deep.md"


def split(name, seed=0):
    """The paper's training size and a 2000-point test set (random, ``seed``)."""
    X, y = load(name)
    y = np.unique(y, return_inverse=True)[1]
    order = np.random.default_rng(seed).permutation(len(y))
    test, train = order[:2000], order[2000:2000 + train_size(name)]
    return X[train], y[train], X[test], y[test]


def median_time(fn, repeats):
    """(first call incl. compile, median of ``repeats`` warm calls) in seconds."""
    start = time.perf_counter()
    jax.block_until_ready(fn())
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return first, float(np.median(times))


def xla_bytes(fn, *args):
    """Arguments + outputs + temporaries of the compiled ``fn(*args)`` (XLA buffer assignment)."""
    stats = jax.jit(fn).lower(*args).compile().memory_analysis()
    return stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes


def weights_pass(phi, tree):
    return subtree_log_weights(phi, tree.internal, layout=tree.layout)


def pruning_pass(cost, tree):
    return best_pruning(cost, tree.internal, layout=tree.layout)


def mib(x):
    return f"{x / 2 ** 20:.1f}"


# -- 1. T0 on real data ---------------------------------------------------------------------------
def real_trees(repeats):
    rows = []
    for name, partition in [("spam", "dyadic"), ("letter", "dyadic"), ("letter", "cart")]:
        X, y, _, _ = split(name)
        n, dims = X.shape
        tracemalloc.start()
        start = time.perf_counter()
        if partition == "dyadic":
            depth_rule = int(math.floor(math.log(n))) * dims
            tree = jaxtree.dyadic_tree(X, depth_rule, y=y, layout="auto")
        else:
            depth_rule = None
            tree = jaxtree.cart_tree(X, y)
        build = time.perf_counter() - start
        build_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        num_classes = int(y.max()) + 1
        yj = jnp.asarray(y)
        _, stats_time = median_time(lambda: jaxtree.node_stats(tree, X, yj, num_classes), repeats)
        stats = jaxtree.node_stats(tree, X, yj, num_classes)
        phi = jaxtree.pacbayes_potentials(stats, 4.0, 1.0)
        cost = stats.errors + 1.0
        compile_w, pass_w = median_time(lambda: weights_pass(phi, tree), repeats)
        _, pass_p = median_time(lambda: pruning_pass(cost, tree), repeats)
        in_tree = int(jaxtree.tree_membership(tree.internal, tree.layout).sum())
        reference = sklearn_reference(X, y) if partition == "cart" else "—"
        rows.append([name, f"{n}×{dims}", partition,
                     "—" if depth_rule is None else str(depth_rule), str(tree.depth),
                     str(tree.width), f"{tree.num_nodes:,}", f"{in_tree:,}",
                     type(tree.layout).__name__, f"{build:.2f}", mib(build_peak),
                     f"{stats_time * 1e3:.1f}", f"{compile_w:.2f}", f"{pass_w * 1e3:.2f}",
                     f"{pass_p * 1e3:.2f}", mib(xla_bytes(weights_pass, phi, tree)), reference])
    header = ["data", "n×D", "T0", "depth rule", "depth", "W", "slots", "T0 nodes", "layout",
              "build s", "build peak MiB", "stats ms", "first pass s (compile)",
              "weights pass ms", "pruning pass ms", "pass memory MiB",
              "scikit-learn DecisionTreeClassifier"]
    return header, rows


def sklearn_reference(X, y):
    """Fit time, depth and leaves of scikit-learn's unpruned tree on the same data."""
    from sklearn.tree import DecisionTreeClassifier
    start = time.perf_counter()
    model = DecisionTreeClassifier(random_state=0).fit(X, y)
    fit = time.perf_counter() - start
    return f"fit {fit:.2f} s, depth {model.get_depth()}, {model.get_n_leaves()} leaves"


# -- 2. scaling ---------------------------------------------------------------------------------------
def banded_levels(depth, width, seed=0):
    """A tree whose levels hold ``min(2**l, width)`` nodes (``width`` even): every level splits
    half of its nodes (chosen at random) once it is full."""
    rng = np.random.default_rng(seed)
    levels, parent = [], np.array([-1])
    for level in range(depth + 1):
        m = parent.shape[0]
        internal = np.zeros(m, bool)
        if level < depth:
            internal[rng.permutation(m)[:min(m, width // 2)]] = True
        levels.append(GrownLevel(parent, internal, np.zeros(m, np.int64), np.zeros(m)))
        parent = np.repeat(np.flatnonzero(internal), 2)
    return levels


def scaling(repeats):
    rows = []
    for depth, width in [(25, 128), (50, 128), (100, 128), (200, 128), (400, 128),
                         (200, 32), (200, 512)]:
        tree = pack(banded_levels(depth, width), np.zeros(1), np.ones(1), clip=False,
                    layout="compact")
        phi = -jnp.abs(jnp.asarray(np.random.default_rng(1).normal(size=tree.num_nodes),
                                   tree.threshold.dtype))
        compile_w, pass_w = median_time(lambda: weights_pass(phi, tree), repeats)
        _, pass_p = median_time(lambda: pruning_pass(-phi, tree), repeats)
        memory = xla_bytes(weights_pass, phi, tree)
        slots = tree.num_nodes
        rows.append([str(tree.depth), str(tree.width), f"{slots:,}", f"{compile_w:.2f}",
                     f"{pass_w * 1e3:.2f}", f"{pass_w / slots * 1e9:.0f}",
                     f"{pass_p * 1e3:.2f}", mib(memory), f"{memory / slots:.0f}",
                     f"{2.0 ** (tree.depth + 1) - 1:.2e}"])
    header = ["depth", "W", "slots (levels·W)", "first pass s (compile)", "weights pass ms",
              "ns / slot", "pruning pass ms", "pass memory MiB", "bytes / slot",
              "complete-heap slots"]
    return header, rows


# -- 3. the estimator ---------------------------------------------------------------------------------
def estimator_fits():
    X, y, X_test, y_test = split("spam")
    rows = []
    for partition in ("dyadic", "cart"):
        start = time.perf_counter()
        model = jaxtree.PACBayesTreeClassifier(partition=partition).fit(X, y)
        fit = time.perf_counter() - start
        error = 1 - model.score(X_test, y_test)
        params = getattr(model, "best_params_", {})
        rows.append(["spam", partition, str(model.tree_.depth), str(model.tree_.width),
                     f"{fit:.1f}", f"{error:.4f}",
                     ", ".join(f"{k}={v:.3g}" for k, v in params.items())])
    header = ["data", "T0", "depth", "W", "fit s (incl. compile, tuning)", "test error",
              "tuned λ"]
    return header, rows


def markdown(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--skip-fit", action="store_true", help="skip the estimator table")
    args = parser.parse_args(argv)
    device = f"{jax.devices()[0].device_kind} ({platform.processor() or platform.machine()})"
    parts = [f"Device: {device}, {os.cpu_count()} cores, load average "
             f"{os.getloadavg()[0]:.1f} at the start (shared machine: timings are noisy); "
             f"JAX {jax.__version__}; float32; medians of {args.repeats} warm calls.",
             "\n## T0 on real data (paper's training sizes, seed 0)\n",
             markdown(*real_trees(args.repeats)),
             "\n## Scaling: compact layout, fixed width, growing depth\n",
             markdown(*scaling(args.repeats))]
    if not args.skip_fit:
        parts += ["\n## PACBayesTreeClassifier on spam (2601 train / 2000 test, seed 0)\n",
                  markdown(*estimator_fits())]
    text = "\n".join(parts) + "\n"
    print(text)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text("# Deep trees on the compact layout (`python -m experiments.bench_deep`)"
                       "\n\n" + text)


if __name__ == "__main__":
    main()
