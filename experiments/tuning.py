"""Grid search against gradient tuning of the PAC-Bayes constants on the seven datasets (KD tree).

    python -m experiments.tuning [--seeds 0 1 2 3 4] [--steps 60] [--grid3]
                                 [--votes predictive|majority] [--out PATH]

For each dataset and each seed of ``--seeds``, one random split: 2000 test points and the
paper's training size (Nguyen & Kpotufe 2018, Sec. 5; crowd has 10545 rows, so 8545). T0: KD
tree, widest-spread splits, default depth, built on the training set. Every method uses the
same 2-fold CV folds and scores what ``PACBayesTreeClassifier`` predicts by default: the
argmax of the posterior predictive (node frequencies smoothed by ½; ``--votes majority``: the
paper's vote of hard labels):

* **grid**: the paper's protocol (:func:`jaxtree.select.paper_search`): 100 + 100 settings of
  (λ1, λ2);
* **gradient**: :func:`jaxtree.select.gradient_tune` with its defaults: Adam in log λ on the
  tempered log-loss of the votes, from the 3 best points of a coarse 5 × 5 grid (moved at once,
  one vmapped call per step);
* **gradient from (1, 1)**: the same loss from λ1 = λ2 = 1 alone (the start that stalled with
  the smoothed 0-1 loss);
* **gradient, 3 parameters**: λ1, λ2 and the prior's leaf cost (1 in the paper), from the 3
  best points of a coarse 5 × 5 × 5 grid;
* **grid, 3 parameters** (``--grid3``): the paper's protocol on the three: 1000 + 1000 settings.

"Validation error" is the 2-fold CV error of the chosen setting; "test error" is that of the
model refitted on the whole training set with it. The summary averages over the splits: on one
split, two settings that CV cannot tell apart can differ by half a point of test error (crowd,
seed 0), so a comparison of tuning methods needs several. "Evaluations" counts settings evaluated on
both folds (a gradient step at one start is one, a forward and a backward pass; the coarse grid
is included). To share compilations, the problems with one number of classes are padded to one
shape (:func:`run_problems`).
"""

import argparse
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxtree
from jaxtree import select, shapes
from jaxtree.estimators import default_depth
from jaxtree.stats import DEFAULT_SMOOTHING
from experiments.example import load_csv

TRAIN_SIZES = {"spam": 2601, "eeg": 12980, "epileptic": 9500, "crowd": 8546, "wine": 4497,
               "digit": 3620, "letter": 18000}
TEST_SIZE = 2000
RESULTS = pathlib.Path(__file__).parent / "results"
NAMES = ("lam1", "lam2", "leaf_cost")


def split(name, seed):
    """``(X_train, y_train, X_test, y_test)`` with labels encoded 0..L-1."""
    X, y = load_csv(name)
    y = np.unique(y, return_inverse=True)[1]
    order = np.random.default_rng(seed).permutation(len(y))
    test = order[:TEST_SIZE]
    train = order[TEST_SIZE:TEST_SIZE + TRAIN_SIZES[name]]
    return X[train], y[train], X[test], y[test]


def tune_one(tree, folds, steps, grid3, fixed):
    """``{method: (params, validation error, evaluations)}`` on one dataset; ``fixed``: the
    votes' parameters that are not tuned (the smoothing of the posterior predictive)."""
    votes = select.pacbayes_votes
    grid = select.paper_search(tree, folds, votes, fixed=fixed)
    out = {"grid": ({k: float(v) for k, v in grid.best_params.items()},
                    float(grid.best_error), sum(len(e) for e in grid.errors))}
    runs = {"gradient": dict(init=None),
            "gradient from (1, 1)": dict(init={"lam1": 1.0, "lam2": 1.0}),
            "gradient, 3 parameters": dict(init=None, directions=select.PACBAYES3_DIRECTIONS)}
    for method, options in runs.items():
        result = select.gradient_tune(tree, folds, votes, steps=steps, fixed=fixed, **options)
        out[method] = (result.best_params, result.best_error, result.evaluations)
    if grid3:
        result = select.paper_search(tree, folds, votes, select.PACBAYES3_DIRECTIONS,
                                     fixed=fixed)
        out["grid, 3 parameters"] = ({k: float(v) for k, v in result.best_params.items()},
                                     float(result.best_error),
                                     sum(len(e) for e in result.errors))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                        help="one split (and CV folds) per seed")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--grid3", action="store_true",
                        help="also the paper's grid over three parameters (2000 settings)")
    parser.add_argument("--datasets", nargs="*", default=list(TRAIN_SIZES))
    parser.add_argument("--votes", default="predictive", choices=["predictive", "majority"],
                        help="what is scored: the posterior predictive (the estimator's "
                             "default) or the paper's hard-label vote")
    parser.add_argument("--out", default=str(RESULTS / "tuning.md"))
    args = parser.parse_args(argv)
    fixed = {"smoothing": DEFAULT_SMOOTHING} if args.votes == "predictive" else {}
    start = time.perf_counter()
    splits = {(name, seed): split(name, seed) for name in args.datasets for seed in args.seeds}
    by_classes = {}
    for key, (_, y_train, _, y_test) in splits.items():
        by_classes.setdefault(int(max(y_train.max(), y_test.max())) + 1, []).append(key)
    rows = []
    for keys in by_classes.values():
        rows += run_problems(args, {key: splits[key] for key in keys}, fixed, start)
        jax.clear_caches()   # these programs, before the next group's (memory maps)
    order = {name: i for i, name in enumerate(args.datasets)}
    rows.sort(key=lambda r: order[r["dataset"]])
    report(rows, args, time.perf_counter() - start)


def run_problems(args, splits, fixed, start):
    """The rows of every method on ``splits`` (``{(dataset, seed): split}``), problems with
    one number of classes L. They are padded to one shape
    (:func:`jaxtree.select.stack_problems`) to share compilations; padding rows and columns
    have weight 0 and are never split on, so every number equals an unpadded run's. Only
    problems with one L are stacked: the smoothed posterior predictive spreads α over L
    classes."""
    data = list(splits.values())
    trees = [jaxtree.kd_tree(Xtr, max_depth=default_depth("kd", *Xtr.shape), y=ytr,
                             split="spread") for Xtr, ytr, _, _ in data]
    tree_b, X_b, y_b, w_b = select.stack_problems(trees, [d[0] for d in data],
                                                  [d[1] for d in data])
    num_classes = max(int(max(d[1].max(), d[3].max())) + 1 for d in data)
    n, dims = X_b.shape[1], X_b.shape[2]
    masks = [shapes.pad_fold_masks(select.fold_masks(len(d[1]), 2, seed), n)
             for d, (_, seed) in zip(data, splits)]
    valid_size = max(int((~m).sum(axis=1).max()) for m in masks)

    rows = []
    for p, (name, seed) in enumerate(splits):
        tree = jax.tree.map(lambda a: a[p], tree_b)
        folds = select.prepare_folds(tree, X_b[p], y_b[p], num_classes, masks[p], w_b[p],
                                     valid_size=valid_size)
        for method, (params, error, evaluations) in tune_one(tree, folds, args.steps,
                                                             args.grid3, fixed).items():
            rows.append({"dataset": name, "seed": seed, "method": method,
                         "validation": error, "evaluations": evaluations, "params": params})
        print(f"{name}, seed {seed}: done ({time.perf_counter() - start:.0f} s)", flush=True)

    X_test = jnp.stack([jnp.pad(jnp.asarray(d[2], X_b.dtype),
                                ((0, 0), (0, dims - d[2].shape[1]))) for d in data])
    for method in dict.fromkeys(r["method"] for r in rows):
        chosen = [r for r in rows if r["method"] == method]            # in problem order
        params_b = {k: jnp.asarray([r["params"].get(k, 1.0) for r in chosen], X_b.dtype)
                    for k in NAMES}
        params_b.update({k: jnp.full(len(chosen), v, X_b.dtype) for k, v in fixed.items()})
        scores = select.batch_fit_scores(tree_b, X_b, y_b, w_b, params_b, X_test, num_classes,
                                         select.pacbayes_votes)
        for p, (row, d) in enumerate(zip(chosen, data)):
            row["test"] = float(np.mean(np.argmax(np.asarray(scores[p]), axis=1) != d[3]))
    return rows


def report(rows, args, seconds):
    seeds = " ".join(str(s) for s in args.seeds)
    command = (f"python -m experiments.tuning --seeds {seeds} --steps {args.steps}"
               + (" --grid3" if args.grid3 else "") + f" --votes {args.votes}")
    names = list(dict.fromkeys(r["dataset"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    mean = {(n, m): {key: np.mean([r[key] for r in rows if (r["dataset"], r["method"]) == (n, m)])
                     for key in ("validation", "test", "evaluations")}
            for n in names for m in methods}
    std = {(n, m): np.std([r["test"] for r in rows if (r["dataset"], r["method"]) == (n, m)])
           for n in names for m in methods}
    lines = ["# Tuning the PAC-Bayes constants: grid search against gradient tuning", "",
             f"`{command}` (KD tree, split=\"spread\", {len(args.seeds)} splits per dataset, "
             f"2-fold CV; {seconds:.0f} s in all on {jax.devices()[0]}, a machine shared with "
             "other jobs). Methods: see the docstring of `experiments/tuning.py`.", "",
             f"## Means over the {len(args.seeds)} splits", "",
             "| dataset | method | validation error | test error (± std) | evaluations |",
             "|---|---|---|---|---|"]
    for n in names:
        for m in methods:
            a = mean[(n, m)]
            lines.append(f"| {n} | {m} | {a['validation']:.4f} | {a['test']:.4f} ± "
                         f"{std[(n, m)]:.4f} | {a['evaluations']:.0f} |")
    lines.append("")
    test = {(r["dataset"], r["seed"], r["method"]): r["test"] for r in rows}
    cases = list(dict.fromkeys((r["dataset"], r["seed"]) for r in rows))
    for m in methods:
        if m == "grid":
            continue
        close = sum(mean[(n, m)]["test"] <= mean[(n, "grid")]["test"] + 0.005 for n in names)
        better = sum(mean[(n, m)]["test"] < mean[(n, "grid")]["test"] for n in names)
        close_split = sum(test[(n, s, m)] <= test[(n, s, "grid")] + 0.005 for n, s in cases)
        evaluations = np.mean([r["evaluations"] for r in rows if r["method"] == m])
        lines.append(f"* {m}: mean test error within 0.5 points of the grid's (or better) on "
                     f"{close} of {len(names)} datasets, lower on {better}; split by split "
                     f"within 0.5 points on {close_split} of {len(cases)}; "
                     f"{evaluations:.0f} evaluations on average (grid: 200).")
    lines += ["", "## Every split", "",
              "| dataset | seed | method | validation error | test error | evaluations | λ1 | "
              "λ2 | leaf cost |", "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (names.index(r["dataset"]), r["seed"])):
        p = r["params"]
        lines.append(f"| {r['dataset']} | {r['seed']} | {r['method']} | {r['validation']:.4f} | "
                     f"{r['test']:.4f} | {r['evaluations']} | {p['lam1']:.4g} | "
                     f"{p['lam2']:.4g} | {p.get('leaf_cost', 1.0):.4g} |")
    text = "\n".join(lines) + "\n"
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
