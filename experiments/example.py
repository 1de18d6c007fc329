"""Fit and score the PAC-Bayes tree on a bundled UCI dataset (the README's quick example).

    python -m experiments.example [--dataset spam] [--partition kd] [--lam1 7.4] [--lam2 1.0]
"""

import argparse
import gzip
import pathlib
import time

import numpy as np

import jaxtree

DATA = pathlib.Path(__file__).parent / "data"


def load_csv(name):
    """``X [n, D]`` float32, ``y [n]`` int from ``experiments/data/<name>.csv.gz``."""
    with gzip.open(DATA / f"{name}.csv.gz", "rt") as f:
        table = np.loadtxt(f, delimiter=",", skiprows=1)
    return table[:, :-1].astype(np.float32), table[:, -1].astype(np.int64)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="spam")
    parser.add_argument("--partition", default="kd", choices=["kd", "dyadic"])
    parser.add_argument("--lam1", type=float, default=7.4)
    parser.add_argument("--lam2", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    X, y = load_csv(args.dataset)
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
