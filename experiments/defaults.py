"""Every estimator with its default settings, as a new user would call it, on the seven datasets.

    python -m experiments.defaults [--datasets spam digit] [--out experiments/results/defaults.md]

One random split per dataset (seed 0, as run 0 of ``experiments.table2``: the paper's training
size, 2000 test points), and for each estimator ``Estimator(**defaults).fit(X_train, y_train)``
with nothing set but the method: ``PrunedTreeClassifier(method=m)`` for every pruning method
(tuned penalties, KD T0), ``HSVoteClassifier()`` (binary datasets) and
``PACBayesTreeClassifier()``. The table gives each test error beside the majority-class error
(the error of predicting the training set's most frequent label everywhere): a method whose error
is the majority's has collapsed to the root. Seconds are wall-clock fit times in one process on a
possibly shared machine (compilations included: the first fit of each estimator compiles).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import time

import numpy as np

from experiments import datasets
from experiments.table2 import split_indices

RESULTS = pathlib.Path(__file__).parent / "results" / "defaults.md"
#: (column label, estimator class name, keyword arguments): the defaults, method aside.
ESTIMATORS = [("C1", "PrunedTreeClassifier", {"method": "c1"}),
              ("SN", "PrunedTreeClassifier", {"method": "sn"}),
              ("KM", "PrunedTreeClassifier", {"method": "km"}),
              ("optimistic", "PrunedTreeClassifier", {"method": "optimistic"}),
              ("REP", "PrunedTreeClassifier", {"method": "rep"}),
              ("min-size SRM", "PrunedTreeClassifier", {"method": "min_size"}),
              ("min-size CV", "PrunedTreeClassifier", {"method": "min_size", "selection": "cv"}),
              ("HS", "HSVoteClassifier", {}),
              ("PAC-Bayes", "PACBayesTreeClassifier", {})]


def run_dataset(name: str) -> dict:
    """``{"majority": error, label: (test error, best_params, seconds)}`` on one split."""
    import jaxtree
    X, y = datasets.load(name)
    train, test = split_indices(len(y), datasets.train_size(name), datasets.TEST_SIZE, 0)
    labels, counts = np.unique(y[train], return_counts=True)
    row = {"majority": float(np.mean(y[test] != labels[np.argmax(counts)])),
           "n_train": len(train), "classes": len(labels)}
    for label, cls, kwargs in ESTIMATORS:
        if cls == "HSVoteClassifier" and len(labels) != 2:
            continue
        start = time.perf_counter()
        model = getattr(jaxtree, cls)(**kwargs).fit(X[train], y[train])
        seconds = time.perf_counter() - start
        row[label] = (1 - model.score(X[test], y[test]), getattr(model, "best_params_", None),
                      seconds)
        print(name, label, row[label], flush=True)
    return row


def markdown(rows: dict) -> str:
    labels = [label for label, _, _ in ESTIMATORS]
    head = ["dataset", "n train", "classes", "majority"] + labels
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in rows.items():
        cells = [name, str(row["n_train"]), str(row["classes"]), f"{row['majority']:.4f}"]
        cells += [f"{row[label][0]:.4f}" if label in row else "N/A" for label in labels]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Chosen parameters (`best_params_`; `{}`: nothing to tune) and fit seconds:", "",
              "| dataset | " + " | ".join(labels) + " |", "|" + "---|" * (len(labels) + 1)]
    for name, row in rows.items():
        cells = [name]
        for label in labels:
            if label not in row:
                cells.append("N/A")
                continue
            params = row[label][1] or {}
            text = ", ".join(f"{k}={v:.3g}" for k, v in params.items()) or "{}"
            cells.append(f"{text}; {row[label][2]:.0f} s")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(datasets.DATASETS),
                        choices=list(datasets.DATASETS))
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS)
    args = parser.parse_args(argv)
    command = "python -m experiments.defaults" + (
        "" if args.datasets == list(datasets.DATASETS) else " --datasets " + " ".join(
            args.datasets))
    start, load = time.perf_counter(), os.getloadavg()[0]
    rows = {}
    for name in args.datasets:
        rows[name] = run_dataset(name)
        header = (f"# Every estimator with its defaults\n\nCommand: `{command}`; "
                  f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
                  f"{(time.perf_counter() - start) / 60:.1f} min; {platform.machine()}, "
                  f"{os.cpu_count()} cores, load average {load:.1f} at the start (shared "
                  f"machine). One split per dataset (seed 0, the paper's training size, 2000 "
                  f"test points), KD T0, every parameter at its default (the penalties tuned "
                  f"by 2-fold CV). Test error; majority = predicting the most frequent "
                  f"training label.\n\n")
        args.out.write_text(header + markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main()
