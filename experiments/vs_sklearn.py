"""The tuned PAC-Bayes vote on a CART T0 against scikit-learn's CV-tuned ``ccp_alpha`` tree, on
the seven Table 2 datasets.

    python -m experiments.vs_sklearn [--datasets spam ...] [--splits 5] [--cv-trees auto]

Per dataset and split s = 0..splits-1: a random split (seed s) into 2000 test points and a
training set of the paper's size (:func:`experiments.datasets.train_size`).

* Ours: ``PACBayesTreeClassifier(partition="cart")`` with its defaults: λ1, λ2 by the paper's
  2-fold protocol, each fold's T0 grown on the fold's training part (``cv_trees="auto"``; pass
  ``--cv-trees shared`` for one T0 of all the points, as before), then T0 grown on the whole
  training set and the vote refitted with the chosen λ's.
* scikit-learn: ``GridSearchCV(DecisionTreeClassifier(random_state=0), ccp_alpha ∈ {0} ∪ 19
  geometric values from 1e-6 to 1e-2, cv=2)``, refitted with the chosen ``ccp_alpha`` (the
  definition of ``experiments/cart_vs_ccp.py``).

Writes ``experiments/results/vs_sklearn[_<cv-trees>].md`` (per dataset: mean ± std of the test
errors over the splits, their ratio, wins) after every split, so an interrupted run leaves a
labelled partial table.
"""

import argparse
import pathlib
import time

import jax
import numpy as np

import jaxtree
from experiments import datasets
from experiments.cart_vs_ccp import ALPHAS

RESULTS = pathlib.Path(__file__).parent / "results"
TIE = 0.005        # a dataset is a tie when the mean errors differ by at most half a point


def one_split(X, y, train, test, cv_trees):
    """``(our test error, scikit-learn's test error)`` on one split."""
    from sklearn.model_selection import GridSearchCV
    from sklearn.tree import DecisionTreeClassifier
    ours = jaxtree.PACBayesTreeClassifier(partition="cart", cv_trees=cv_trees)
    ours.fit(X[train], y[train])
    search = GridSearchCV(DecisionTreeClassifier(random_state=0), {"ccp_alpha": list(ALPHAS)},
                          cv=2, n_jobs=1).fit(X[train], y[train])
    return 1 - ours.score(X[test], y[test]), 1 - search.score(X[test], y[test])


def report(errors: dict, args, seconds: float) -> str:
    command = ("python -m experiments.vs_sklearn --splits " + str(args.splits)
               + " --cv-trees " + args.cv_trees
               + (" --datasets " + " ".join(args.datasets)
                  if list(args.datasets) != list(datasets.DATASETS) else ""))
    lines = ["# PAC-Bayes vote on a CART T0 against scikit-learn's CV-tuned ccp_alpha tree", "",
             f"`{command}` ({seconds / 60:.0f} min on {jax.devices()[0]}, a machine shared with "
             "other jobs). Protocol: the docstring of `experiments/vs_sklearn.py`; per-fold T0: "
             f"`cv_trees=\"{args.cv_trees}\"`.", "",
             "| dataset | splits | PAC-Bayes (CART T0) | scikit-learn ccp_alpha | ratio | "
             "splits won / lost |", "|---|---|---|---|---|---|"]
    ratios, ties_or_wins = [], 0
    for name, rows in errors.items():
        rows = np.asarray(rows)
        ours, theirs = rows[:, 0], rows[:, 1]
        ratio = ours.mean() / theirs.mean()
        ratios.append(ratio)
        ties_or_wins += ours.mean() <= theirs.mean() + TIE
        lines.append(f"| {name} | {len(rows)} | {ours.mean():.4f} ± {ours.std():.4f} | "
                     f"{theirs.mean():.4f} ± {theirs.std():.4f} | {ratio:.3f} | "
                     f"{int((ours < theirs).sum())} / {int((ours > theirs).sum())} |")
    if ratios:
        lines += ["", f"Ties (mean errors within {100 * TIE:.1f} points) or wins on "
                      f"{ties_or_wins} of {len(ratios)} datasets; geometric mean of the error "
                      f"ratio {np.exp(np.mean(np.log(ratios))):.3f}."]
    done = sum(len(v) for v in errors.values())
    if done < len(args.datasets) * args.splits:
        lines += ["", f"**Partial results**: {done} of {len(args.datasets) * args.splits} "
                      "splits done."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(datasets.DATASETS),
                        choices=list(datasets.DATASETS))
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--cv-trees", default="auto", choices=["auto", "shared", "per_fold"])
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out or RESULTS / (
        "vs_sklearn" + ("" if args.cv_trees == "auto" else f"_{args.cv_trees}") + ".md"))
    start, errors = time.perf_counter(), {}
    for name in args.datasets:
        X, y = datasets.load(name)
        size = datasets.train_size(name)
        for s in range(args.splits):
            order = np.random.default_rng(s).permutation(len(y))
            test, train = order[:datasets.TEST_SIZE], order[datasets.TEST_SIZE:][:size]
            errors.setdefault(name, []).append(one_split(X, y, train, test, args.cv_trees))
            print(name, s, errors[name][-1], f"{time.perf_counter() - start:.0f} s", flush=True)
            out.write_text(report(errors, args, time.perf_counter() - start))
    print(out.read_text())


if __name__ == "__main__":
    main()
