"""The forest on problems its defaults were not tuned on: the benchmark suite's problems but the
seven bundled datasets (where experiments/forest.py measures it).

    python -m experiments.forest_wide [--quick] [--splits 1]

Problems and splits: :func:`experiments.benchmark_suite.problem_splits` without the bundled
Table 1 datasets, ``--splits`` splits each. Forests of 100 trees, each with its defaults but
the splitter: ``PACBayesForestClassifier(splitter="best")`` (the default), ``splitter="mixed"``
(half the trees with random cuts, docs/theory/forest.md) and scikit-learn's
``RandomForestClassifier(100)``, the reference. Reported (``results/forest_wide.md``): the mean
test error per problem and, per forest, the geometric mean over problems of
``(error + 0.005) / (random forest's error + 0.005)`` and the problems at or below it.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import numpy as np

from experiments.benchmark_suite import FLOOR, problem_splits

RESULTS = pathlib.Path(__file__).parent / "results"
FORESTS = ("PAC-Bayes forest", "PAC-Bayes forest, mixed", "random forest")


def fit_forest(name: str, X, y, seed: int):
    from sklearn.ensemble import RandomForestClassifier

    from jaxtree import PACBayesForestClassifier
    if name == "random forest":
        return RandomForestClassifier(100, random_state=seed).fit(X, y)
    splitter = "mixed" if name.endswith("mixed") else "best"
    return PACBayesForestClassifier(splitter=splitter, random_state=seed).fit(X, y)


def run(quick: bool, splits: int) -> list[dict]:
    records = []
    # the bundled datasets are experiments/forest.py's
    for problem, split, X, y, train, test in problem_splits(
            quick, splits, lambda name: not name.endswith("(1500)")):
        for forest in FORESTS:
            fitted = fit_forest(forest, X[train], y[train], split)
            records.append({"problem": problem, "split": split, "forest": forest,
                            "error": float(np.mean(fitted.predict(X[test]) != y[test]))})
        print(problem, split, {r["forest"]: round(r["error"], 4) for r in records[-3:]},
              flush=True)
    return records


def report(records: list, command: str) -> str:
    errors = {}
    for r in records:
        errors.setdefault(r["problem"], {}).setdefault(r["forest"], []).append(r["error"])
    mean = {p: {f: float(np.mean(v)) for f, v in by.items()} for p, by in errors.items()}
    splits = max(r["split"] for r in records) + 1
    lines = ["# The forest on held-out problems", "",
             f"`{command}`: {len(mean)} problems × {splits} split(s); protocol in the docstring "
             f"of `experiments/forest_wide.py`. Ratio: geometric mean over problems of "
             f"(error + {FLOOR}) / (random forest's error + {FLOOR}).", "",
             "| forest | geo-mean error ratio to the random forest | problems at or below it |",
             "|---|---|---|"]
    for forest in FORESTS[:-1]:
        ratios = [(e[forest] + FLOOR) / (e["random forest"] + FLOOR) for e in mean.values()]
        wins = sum(e[forest] <= e["random forest"] + 1e-12 for e in mean.values())
        lines.append(f"| {forest} | {np.exp(np.mean(np.log(ratios))):.3f} | {wins} / "
                     f"{len(ratios)} |")
    lines += ["", "Mean test error per problem:", "",
              "| problem | " + " | ".join(FORESTS) + " |", "|---|" + "---|" * len(FORESTS)]
    for problem, e in mean.items():
        lines.append(f"| {problem} | " + " | ".join(f"{e[f]:.4f}" for f in FORESTS) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="every other synthetic size (benchmark_suite's --quick)")
    parser.add_argument("--splits", type=int, default=1)
    args = parser.parse_args(argv)
    records = run(args.quick, args.splits)
    command = "python -m experiments.forest_wide" + (" --quick" if args.quick else "") + \
        f" --splits {args.splits}"
    (RESULTS / "forest_wide.md").write_text(report(records, command))
    (RESULTS / "forest_wide.json").write_text(json.dumps(records, indent=1))
    print(report(records, command))


if __name__ == "__main__":
    main()
