"""Cold fits of every pruning method on the paper's deepest T0, and the knapsack's compile time.

    python -m experiments.bench_prune [--repeats 3] [--out experiments/results/bench_prune.md]

1. **Cold fit** of ``PrunedTreeClassifier`` for each method (C1, SN, KM, optimistic, REP,
   min-size with SRM and with CV), ``HSVoteClassifier`` and ``PACBayesTreeClassifier`` on
   spam's dyadic T0 (the paper's 2601 training points of one random split, seed 0, as in
   ``experiments.table2``; the paper's depth rule ``floor(ln n)·D``, 399 levels, compact
   layout) with their default settings (penalties tuned by 2-fold CV), each fit in a fresh
   Python process so that every compilation is included; the median of ``--repeats``
   processes.
2. **Knapsack compile time against depth** (:func:`jaxtree.prune.min_error_per_size` on the
   compact layout): the same T0 cut at fewer levels and padded with empty levels to more, all at
   the same width W; first call (compile) and warm call.

The machine may be shared: times are medians of fresh processes (wall clock, and the CPU time
of the fitting process, which load from other processes inflates less), and the depth rows are
measured in one process.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import platform
import subprocess
import sys
import time

import numpy as np

RESULTS = pathlib.Path(__file__).parent / "results" / "bench_prune.md"
#: (label, estimator class name, keyword arguments besides T0's): the default settings
FITS = [("C1", "PrunedTreeClassifier", {"method": "c1"}),
        ("SN", "PrunedTreeClassifier", {"method": "sn"}),
        ("KM", "PrunedTreeClassifier", {"method": "km"}),
        ("optimistic", "PrunedTreeClassifier", {"method": "optimistic"}),
        ("REP", "PrunedTreeClassifier", {"method": "rep"}),
        ("min-size, SRM", "PrunedTreeClassifier", {"method": "min_size", "selection": "srm"}),
        ("min-size, CV", "PrunedTreeClassifier", {"method": "min_size", "selection": "cv"}),
        ("HS vote", "HSVoteClassifier", {}),
        ("PAC-Bayes", "PACBayesTreeClassifier", {})]


def spam_training_set():
    """The paper's 2601 training points of spam (split seed 0, as ``experiments.table2``)."""
    from experiments import datasets
    from experiments.table2 import split_indices
    X, y = datasets.load("spam")
    train, _ = split_indices(len(y), datasets.train_size("spam"), datasets.TEST_SIZE, 0)
    return X[train], y[train]


def one_fit(index: int) -> dict:
    """Fit ``FITS[index]`` in this (fresh) process; seconds from before the import of jaxtree."""
    start = time.perf_counter()
    import jaxtree
    X, y = spam_training_set()
    loaded, loaded_cpu = time.perf_counter(), time.process_time()
    depth = int(math.floor(math.log(X.shape[0]))) * X.shape[1]
    _, cls, kwargs = FITS[index]
    model = getattr(jaxtree, cls)(partition="dyadic", max_depth=depth, **kwargs)
    model.fit(X, y)
    end = time.perf_counter()
    return {"fit_s": end - loaded, "fit_cpu_s": time.process_time() - loaded_cpu,
            "with_import_s": end - start, "depth": model.tree_.depth,
            "width": model.tree_.width, "leaves": getattr(model, "n_leaves_", ""),
            "params": getattr(model, "best_params_", {})}


def cold_fits(repeats: int) -> tuple[list, list]:
    rows = []
    for index, (label, _, kwargs) in enumerate(FITS):
        runs = [json.loads(subprocess.run(
            [sys.executable, "-m", "experiments.bench_prune", "--one", str(index)],
            check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
            for _ in range(repeats)]
        median = {key: float(np.median([r[key] for r in runs]))
                  for key in ("fit_s", "fit_cpu_s", "with_import_s")}
        r = runs[0]
        tuned = ", ".join(f"{k}={v:.3g}" for k, v in r["params"].items())
        rows.append([label, ", ".join(f"{k}={v}" for k, v in kwargs.items() if k != "method"),
                     tuned, f"{r['depth']}", f"{r['width']}", f"{r['leaves']}",
                     f"{median['fit_s']:.1f}", f"{median['fit_cpu_s']:.1f}",
                     f"{median['with_import_s']:.1f}"])
    header = ["method", "options", "tuned (best_params_)", "T0 depth", "W", "pruning leaves",
              "cold fit s (median)", "its CPU s", "with imports s"]
    return header, rows


def knapsack_depths() -> tuple[list, list]:
    """Compile and warm time of the knapsack on spam's dyadic T0 at several depths, one W."""
    import jax
    import jax.numpy as jnp
    import jaxtree
    from jaxtree import prune
    from jaxtree.compact import pad_compact
    from experiments.bench_deep import median_time
    X, y = spam_training_set()
    full_depth = int(math.floor(math.log(X.shape[0]))) * X.shape[1]
    trees = {d: jaxtree.dyadic_tree(X, max_depth=d, y=y, layout="compact")
             for d in (100, full_depth)}
    width = max(t.width for t in trees.values())
    cases = [(d, pad_compact(t, t.num_levels, width)) for d, t in trees.items()]
    deepest = trees[full_depth]
    cases.append((full_depth, pad_compact(deepest, 4 * deepest.num_levels, width)))
    rows = []
    for depth, tree in cases:
        stats = jaxtree.node_stats(tree, jnp.asarray(X), jnp.asarray(y), 2)
        leaves = prune.num_nonempty_leaves(stats, tree.internal, tree.layout)
        size = 1 << (leaves - 1).bit_length()

        def table():
            return prune.min_error_per_size(stats.errors, stats.total > 0, tree.internal, size,
                                            layout=tree.layout).errors

        wall, cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(table())
        first, cpu = time.perf_counter() - wall, time.process_time() - cpu
        _, warm = median_time(table, 5)
        rows.append([str(depth), str(tree.num_levels), str(tree.width), str(leaves), str(size),
                     f"{first:.2f}", f"{cpu:.2f}", f"{warm:.3f}"])
    header = ["T0 depth", "levels (padded)", "W", "non-empty leaves", "S", "first call s",
              "its CPU s", "warm call s (median)"]
    return header, rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(one_fit(args.one)))
        return
    from experiments.bench_deep import markdown
    load_before = os.getloadavg()[0]
    sections = [("Cold fit with the default (tuned) settings on spam's dyadic T0 (fresh process "
                 "each)", cold_fits(args.repeats)),
                ("Knapsack against depth (compact layout, one W)", knapsack_depths())]
    text = [f"# Pruning methods on a deep T0\n\nCommand: `python -m experiments.bench_prune "
            f"--repeats {args.repeats}`; {platform.machine()}, {platform.python_version()}, "
            f"{os.cpu_count()} cores, load average {load_before:.1f} before and "
            f"{os.getloadavg()[0]:.1f} after (other processes share the cores: wall times "
            "stretch with the load, CPU times much less).\n"]
    for title, (header, rows) in sections:
        table = markdown(header, rows)
        print(f"\n## {title}\n\n{table}")
        text.append(f"## {title}\n\n{table}\n")
    args.out.write_text("\n".join(text))


if __name__ == "__main__":
    main()
