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

Each split's errors go to ``experiments/results/vs_sklearn[_<cv-trees>]/<dataset>_<split>.json``
(a split already there is not rerun, so several processes may share the work); after every
split the table ``experiments/results/vs_sklearn[_<cv-trees>].md`` is rewritten from all the
records there (per dataset: mean ± std of the test errors over the splits, their ratio, wins),
so an interrupted run leaves a labelled partial table.
"""

import argparse
import json
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


def report(records: list, cv_trees: str) -> str:
    """The Markdown table of ``records`` (dicts: dataset, split, ours, theirs, seconds)."""
    names = [n for n in datasets.DATASETS if any(r["dataset"] == n for r in records)]
    lines = ["# PAC-Bayes vote on a CART T0 against scikit-learn's CV-tuned ccp_alpha tree", "",
             f"`python -m experiments.vs_sklearn --cv-trees {cv_trees} --splits S --datasets ...` "
             f"(one record per split; {sum(r['seconds'] for r in records) / 60:.0f} min of "
             f"fits in all on {jax.devices()[0]}, a machine shared with other jobs). Protocol: "
             "the docstring of `experiments/vs_sklearn.py`; per-fold T0: "
             f"`cv_trees=\"{cv_trees}\"`.", "",
             "| dataset | splits | PAC-Bayes (CART T0) | scikit-learn ccp_alpha | ratio | "
             "splits won / lost |", "|---|---|---|---|---|---|"]
    ratios, ties_or_wins = [], 0
    for name in names:
        rows = sorted((r for r in records if r["dataset"] == name), key=lambda r: r["split"])
        ours = np.array([r["ours"] for r in rows])
        theirs = np.array([r["theirs"] for r in rows])
        ratio = ours.mean() / theirs.mean()
        ratios.append(ratio)
        ties_or_wins += ours.mean() <= theirs.mean() + TIE
        lines.append(f"| {name} | {', '.join(str(r['split']) for r in rows)} | "
                     f"{ours.mean():.4f} ± {ours.std():.4f} | "
                     f"{theirs.mean():.4f} ± {theirs.std():.4f} | {ratio:.3f} | "
                     f"{int((ours < theirs).sum())} / {int((ours > theirs).sum())} |")
    if ratios:
        lines += ["", f"Ties (mean errors within {100 * TIE:.1f} points) or wins on "
                      f"{ties_or_wins} of {len(ratios)} datasets; geometric mean of the error "
                      f"ratio {np.exp(np.mean(np.log(ratios))):.3f}."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(datasets.DATASETS),
                        choices=list(datasets.DATASETS))
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--cv-trees", default="auto", choices=["auto", "shared", "per_fold"])
    args = parser.parse_args(argv)
    stem = "vs_sklearn" + ("" if args.cv_trees == "auto" else f"_{args.cv_trees}")
    folder = RESULTS / stem
    folder.mkdir(parents=True, exist_ok=True)
    data = {name: datasets.load(name) for name in args.datasets}
    for s in range(args.splits):         # every dataset's split s before any split s + 1
        for name, (X, y) in data.items():
            size = datasets.train_size(name)
            path = folder / f"{name}_{s}.json"
            if path.exists():
                continue
            order = np.random.default_rng(s).permutation(len(y))
            test, train = order[:datasets.TEST_SIZE], order[datasets.TEST_SIZE:][:size]
            start = time.perf_counter()
            ours, theirs = one_split(X, y, train, test, args.cv_trees)
            record = {"dataset": name, "split": s, "ours": float(ours),
                      "theirs": float(theirs), "seconds": time.perf_counter() - start}
            path.write_text(json.dumps(record))
            print(record, flush=True)
            records = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
            (RESULTS / f"{stem}.md").write_text(report(records, args.cv_trees))
    print((RESULTS / f"{stem}.md").read_text())


if __name__ == "__main__":
    main()
