"""Fit and score the PAC-Bayes tree on a bundled UCI dataset (the README's quick example).

    python -m experiments.example [--dataset spam] [--partition kd] [--lam1 7.4] [--lam2 1.0]
"""

import argparse
import time

import numpy as np

import jaxtree
from experiments.datasets import DATASETS, load


def load_csv(name):
    """``X [n, D]`` float32, ``y [n]`` int64: every row of ``experiments/data/<name>.csv.gz``,
    sha256-checked (:func:`experiments.datasets.load`)."""
    return load(name, experiment=False)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="spam", choices=sorted(DATASETS))
    parser.add_argument("--partition", default="kd", choices=["kd", "dyadic"])
    parser.add_argument("--lam1", type=float, default=7.4)
    parser.add_argument("--lam2", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    X, y = load(args.dataset)
    order = np.random.default_rng(args.seed).permutation(len(y))
    test, train = order[:2000], order[2000:]
    start = time.perf_counter()
    model = jaxtree.PACBayesTreeClassifier(partition=args.partition, split="spread",
                                           lam1=args.lam1, lam2=args.lam2)
    model.fit(X[train], y[train])
    error = 1 - model.score(X[test], y[test])
    print(f"{args.dataset}: {len(train)} train / {len(test)} test, {args.partition} tree of "
          f"depth {model.tree_.depth}: PAC-Bayes test error {error:.4f} "
          f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
