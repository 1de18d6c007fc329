"""Test error of the pruning and voting baselines (docs/theory/pruning.md) on spam and digit, KD and dyadic T0.

    python -m experiments.baselines [--datasets spam digit] [--repeats 1] [--kd-depth 12]
                                    [--dyadic-depth 14] [--out experiments/results/baselines.md]

Protocol (docs/theory/protocol.md, scaled down to run in minutes on 2 CPU cores): per repeat one random split,
2000 test points and the paper's training size; T0 is built on the training set with
``split="spread"`` (the coordinate of largest spread; cycling coordinates leaves the late
features of spam/digit unused) at a moderate depth in the complete layout. Every method with a
parameter has it chosen by 2-fold CV on that T0 with :func:`jaxtree.select.paper_search` (the log
grid 2^linspace(-8, 6, 10), then 10 linear values from half to twice the best; ties to the
simpler model); all settings of a stage are one batched computation. The hold-out methods
(reduced-error pruning, min-size with hold-out selection) grow T0 on 2/3 of the training set and
prune/select on the other third, as reduced-error pruning prescribes; they have no parameter to tune.
The PAC-Bayes tree (tuned the same way over its (λ1, λ2) product grid) is shown for reference.
Ratios are to the C1 error on the same split, as in the paper's Table 2.
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import sys
import time

import jax.numpy as jnp
import numpy as np

import jaxtree
from jaxtree import hsvote, prune, select, shapes
from experiments.datasets import load, train_size

RESULTS = pathlib.Path(__file__).parent / "results"

#: name → (votes function, tuned parameters with their "simpler" direction). Larger λ / c prune
#: more (simpler); a smaller η lets the CTW prior (which favours small prunings) dominate.
TUNED = {
    "C1": (prune.c1_votes, (("lam", +1),)),
    "SN": (prune.sn_votes, (("lam", +1),)),
    "KM": (prune.km_votes, (("c", +1),)),
    "optimistic": (prune.optimistic_votes, (("c", +1),)),
    "min-size SRM": (None, (("c", +1),)),          # votes bound to the tree's size cap below
    "HS-vote": (hsvote.hs_votes, (("eta", -1),)),
    "PAC-Bayes": (select.pacbayes_votes, select.PACBAYES_DIRECTIONS),
}
HOLDOUT = {"REP": dict(method="rep"), "min-size CV": dict(method="min_size", selection="cv")}
ORDER = ["unpruned", "C1", "SN", "KM", "optimistic", "REP", "min-size SRM", "min-size CV",
         "HS-vote", "PAC-Bayes"]


def run_one(name, partition, depth, seed, split):
    """Test errors, chosen parameters and seconds of every method on one split."""
    X, y = load(name)
    order = np.random.default_rng(seed).permutation(len(y))
    test, train = order[:2000], order[2000:2000 + train_size(name)]
    Xtr, ytr, Xte, yte = X[train], y[train], X[test], y[test]
    num_classes = int(y.max()) + 1
    builder = jaxtree.kd_tree if partition == "kd" else jaxtree.dyadic_tree
    tree = builder(Xtr, max_depth=depth, y=ytr, split=split)
    stats = jaxtree.node_stats(tree, Xtr, jnp.asarray(ytr), num_classes)
    folds = select.prepare_folds(tree, Xtr, jnp.asarray(ytr), num_classes,
                                 select.fold_masks(len(ytr), 2, seed))
    path, on_path = jaxtree.route(tree, Xte)
    cap = shapes.padded(prune.num_nonempty_leaves(stats, tree.internal))
    rows = {}
    for method in ORDER:
        start = time.perf_counter()
        if method == "unpruned":  # T0 itself: its leaves' labels
            leaves = jaxtree.tree_membership(tree.internal) & ~tree.internal
            error, params = float(jnp.mean(jnp.argmax(select.point_scores(
                prune.pruning_votes(leaves, stats), path, on_path, num_classes), axis=1)
                != jnp.asarray(yte))), {}
        elif method in HOLDOUT:
            model = jaxtree.PrunedTreeClassifier(partition=partition, max_depth=depth,
                                                 split=split, random_state=seed,
                                                 **HOLDOUT[method]).fit(Xtr, ytr)
            error, params = 1 - model.score(Xte, yte), {}
        else:
            if method == "HS-vote" and num_classes != 2:
                continue
            votes_fn, directions = TUNED[method]
            if votes_fn is None:
                votes_fn = functools.partial(prune.min_size_srm_votes, max_size=cap)
            search = select.paper_search(tree, folds, votes_fn, directions)
            params = {k: float(v) for k, v in search.best_params.items()}
            scores = select.point_scores(votes_fn(tree, stats, params), path, on_path,
                                         num_classes)
            error = float(jnp.mean(jnp.argmax(scores, axis=1) != jnp.asarray(yte)))
        rows[method] = (error, params, time.perf_counter() - start)
    return rows, tree.depth


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    argv = list(sys.argv[1:] if argv is None else argv)
    parser.add_argument("--datasets", nargs="+", default=["spam", "digit"])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--kd-depth", type=int, default=12)
    parser.add_argument("--dyadic-depth", type=int, default=14)
    parser.add_argument("--split", default="spread", choices=["spread", "cycle"])
    parser.add_argument("--out", default=str(RESULTS / "baselines.md"))
    args = parser.parse_args(argv)
    lines = [
        "# Pruning and voting baselines (docs/theory/pruning.md)",
        "",
        f"`python -m experiments.baselines {' '.join(argv)}`".replace(" `", "`"),
        "",
        f"Test error (mean over {args.repeats} random split(s); 2000 test points, the paper's "
        f"training size), T0 with split='{args.split}', KD depth "
        f"{args.kd_depth}, dyadic depth {args.dyadic_depth}; parameters by 2-fold CV on T0 "
        "(paper's log grid then linear grid). In brackets: ratio to C1. Column unpruned: T0 itself "
        "(no pruning can do much better than a poor T0). Second table: "
        "seconds per method (CV + fit + predict, first repeat, compilation included, machine "
        "shared with other jobs).",
        "",
    ]
    header = "| dataset | T0 | " + " | ".join(ORDER) + " |"
    lines += [header, "|" + "---|" * (len(ORDER) + 2)]
    timing = ["", "| dataset | T0 | " + " | ".join(ORDER) + " |", "|" + "---|" * (len(ORDER) + 2)]
    chosen = ["", "Chosen parameters (first repeat):", ""]
    for name in args.datasets:
        for partition, depth in [("kd", args.kd_depth), ("dyadic", args.dyadic_depth)]:
            errors, first = {}, None
            for seed in range(args.repeats):
                rows, depth_built = run_one(name, partition, depth, seed, args.split)
                first = first or rows
                for method, (error, _, _) in rows.items():
                    errors.setdefault(method, []).append(error)
            mean = {m: float(np.mean(v)) for m, v in errors.items()}
            cells = [f"{mean[m]:.4f} ({mean[m] / mean['C1']:.3f})" if m in mean else "N/A"
                     for m in ORDER]
            label = f"{partition} (depth {depth_built})"
            lines.append(f"| {name} | {label} | " + " | ".join(cells) + " |")
            timing.append(f"| {name} | {label} | " + " | ".join(
                f"{first[m][2]:.1f}" if m in first else "" for m in ORDER) + " |")
            chosen.append(f"* {name} / {partition}: " + "; ".join(
                f"{m} {', '.join(f'{k}={v:.3g}' for k, v in first[m][1].items())}"
                for m in ORDER if m in first and first[m][1]))
            print(lines[-1], flush=True)
    text = "\n".join(lines + timing + chosen) + "\n"
    print(text)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


if __name__ == "__main__":
    main()
