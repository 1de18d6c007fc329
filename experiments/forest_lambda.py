"""Which λ's the forest should choose among: every setting of a wide grid, on held-out problems
and on the seven bundled datasets.

    python -m experiments.forest_lambda [--splits 3]

Problems and splits: :func:`experiments.benchmark_suite.problem_splits` without its bundled
datasets (30 % test), and the seven bundled datasets as ``experiments/forest.py`` splits them
(2000 test points, ``min(train size, 4000)`` training points). On each, one default
:class:`jaxtree.PACBayesForestClassifier` (100 trees; the trees do not depend on λ) and, at each
setting of :data:`WIDE_GRID` (every other value of the paper's λ1 grid × two λ2's: the forest's
grid before 2026-12-05), the forest's out-of-bag error, out-of-bag Brier score and test error;
beside it scikit-learn's ``RandomForestClassifier(100)``. A *rule* picks a setting from the
out-of-bag figures alone (:data:`RULES`); reported (``results/forest_lambda.md``) per rule and
group of problems: the geometric mean over problems of ``(error + 0.005) / (random forest's
error + 0.005)`` of the test error at the setting it picks, and the problems at or below the
random forest. ``oracle`` (the setting of least test error) is a bound on what any rule can do.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import jax.numpy as jnp
import numpy as np

from experiments import datasets
from experiments.benchmark_suite import FLOOR, problem_splits
from experiments.forest import bundled_split
from jaxtree import shapes
from jaxtree.forest import LAMBDA_GRID, PACBayesForestClassifier, grid_predictive_sums
from jaxtree.select import LOG_GRID
from jaxtree.validation import float_dtype

RESULTS = pathlib.Path(__file__).parent / "results"
WIDE_GRID = tuple((float(a), float(b)) for a in LOG_GRID[1::2]
                  for b in (2.0 ** -14, LOG_GRID[0]))
LARGEST = [WIDE_GRID.index(setting) for setting in LAMBDA_GRID]     # the forest's grid


def _first_min(values, among):
    return among[int(np.argmin(np.asarray(values)[among]))]


#: rule name -> (OOB errors [G], OOB Brier scores [G]) -> index into WIDE_GRID
RULES = {
    "OOB error, all 10 settings (first of ties)":
        lambda err, brier: _first_min(err, list(range(len(WIDE_GRID)))),
    "OOB Brier, all 10 settings": lambda err, brier: _first_min(brier, list(range(len(WIDE_GRID)))),
    "OOB error, the forest's 4 settings (λ1 7.4 and 64)":
        lambda err, brier: _first_min(err, LARGEST),
    **{f"fixed λ1 = {WIDE_GRID[g][0]:.3g}, λ2 = 2^{np.log2(WIDE_GRID[g][1]):.0f}":
       (lambda err, brier, g=g: g) for g in range(len(WIDE_GRID))},
}


def _sums(forest, X, tree_weight):
    rows = shapes.padded(len(X))
    sums = grid_predictive_sums(forest.trees_, forest.stats_, forest.node_proba_,
                                jnp.asarray(WIDE_GRID, float_dtype()), shapes.pad_rows(X, rows),
                                jnp.asarray(shapes.pad_rows(tree_weight.T, rows).T,
                                            float_dtype()), jobs=2)
    return np.asarray(sums)[:, :len(X)]


def measure(problem, group, split, X, y, train, test) -> dict:
    """Per setting of :data:`WIDE_GRID`: OOB error, OOB Brier score, test error."""
    from sklearn.ensemble import RandomForestClassifier
    forest = PACBayesForestClassifier(random_state=split, n_jobs=2).fit(X[train], y[train])
    y_train = np.searchsorted(forest.classes_, y[train])
    oob = _sums(forest, X[train], forest.oob_mask_.astype(float))
    covered = forest.oob_mask_.any(axis=0)
    p = oob[:, covered] / oob[:, covered].sum(axis=-1, keepdims=True)
    labels = y_train[covered]
    onehot = np.eye(p.shape[-1])[labels]
    test_sums = _sums(forest, X[test], np.ones((len(forest.oob_mask_), len(test))))
    rf = RandomForestClassifier(100, random_state=split, n_jobs=2).fit(X[train], y[train])
    return {"problem": problem, "group": group, "split": split,
            "oob_error": (p.argmax(-1) != labels).mean(axis=1).tolist(),
            "oob_brier": ((p - onehot) ** 2).sum(-1).mean(axis=1).tolist(),
            "test_error": (forest.classes_[test_sums.argmax(-1)] != y[test]).mean(axis=1).tolist(),
            "random_forest": float(np.mean(rf.predict(X[test]) != y[test]))}


def run(splits: int) -> list[dict]:
    records = []
    for problem, split, X, y, train, test in problem_splits(
            False, splits, lambda name: not name.endswith("(1500)")):
        records.append(measure(problem, "held-out", split, X, y, train, test))
        print(problem, split, flush=True)
    for name in datasets.DATASETS:
        X, y = datasets.load(name)
        for split in range(splits):
            train, test = bundled_split(name, len(y), split)
            records.append(measure(name, "bundled", split, X.astype(np.float32), y, train, test))
            print(name, split, flush=True)
    return records


def report(records: list, command: str) -> str:
    rules = dict(RULES, oracle=None)
    lines = ["# Which λ's the forest chooses among", "",
             f"`{command}`; protocol in the docstring of `experiments/forest_lambda.py`. Ratio: "
             f"geometric mean over problems of (error + {FLOOR}) / (random forest's error + "
             f"{FLOOR}) of the test error at the setting each rule picks from out-of-bag "
             f"figures (means over the splits).", ""]
    for group in ("held-out", "bundled"):
        mine = [r for r in records if r["group"] == group]
        problems = list(dict.fromkeys(r["problem"] for r in mine))
        lines += [f"## {group} ({len(problems)} problems × "
                  f"{max(r['split'] for r in mine) + 1} splits)", "",
                  "| rule | geo-mean error ratio to the random forest | at or below it |",
                  "|---|---|---|"]
        for name, rule in rules.items():
            ratios, wins = [], 0
            for problem in problems:
                runs = [r for r in mine if r["problem"] == problem]
                picks = [int(np.argmin(r["test_error"])) if rule is None
                         else rule(r["oob_error"], r["oob_brier"]) for r in runs]
                ours = np.mean([r["test_error"][g] for r, g in zip(runs, picks)])
                theirs = np.mean([r["random_forest"] for r in runs])
                ratios.append((ours + FLOOR) / (theirs + FLOOR))
                wins += ours <= theirs + 1e-12
            lines.append(f"| {name} | {np.exp(np.mean(np.log(ratios))):.3f} | {wins} / "
                         f"{len(problems)} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=3)
    args = parser.parse_args(argv)
    records = run(args.splits)
    command = f"python -m experiments.forest_lambda --splits {args.splits}"
    (RESULTS / "forest_lambda.json").write_text(json.dumps(records, indent=1))
    text = report(records, command)
    (RESULTS / "forest_lambda.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
