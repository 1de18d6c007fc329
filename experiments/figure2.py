"""Reproduce the paper's Figure 2: test error against training-set size on the multiclass datasets.

    python -m experiments.figure2                  # crowd, wine, digit, letter; C1, SN, PAC-Bayes
    python -m experiments.figure2 --quick          # three sizes, reduced grid, 1000 test points
    python -m experiments.figure2 --datasets digit --runs 3

For every dataset, partition (dyadic, KD) and training size n (250, 1000, 4000, … and the paper's
size; ``--factor 2`` for doubling sizes), the Table 2 protocol (:mod:`experiments.table2`: 2000 test points, T0 with the
paper's rules on the n training points, every parameter by 2-fold CV on the paper's grids) gives
each method's test error. Writes ``experiments/results/figure2.png`` (one panel per dataset and
partition; mean over the runs, with a band of ± one std when there are several) and
``figure2.csv`` (every run) and ``figure2.json`` (command, date, runtime, configuration).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import pathlib
import sys
import time

import numpy as np
from tqdm import tqdm

from experiments import datasets, table2

MULTICLASS = ("crowd", "wine", "digit", "letter")
METHODS = ("c1", "sn", "pacbayes")
STYLE = {"c1": ("C1 pruning", "tab:gray", "s", "--"), "sn": ("SN pruning", "tab:blue", "^", ":"),
         "pacbayes": ("PAC-Bayes tree", "tab:red", "o", "-")}


def training_sizes(name: str, smallest: int = 250, factor: int = 4) -> list[int]:
    """``smallest`` times powers of ``factor``, up to the experiments' training size of ``name``
    (included; a size within 25 % of it is left out)."""
    top = datasets.train_size(name)
    sizes = [smallest * factor ** k for k in range(20) if smallest * factor ** k * 1.25 < top]
    return sizes + [top]


def run_curves(names, runs: int, config: table2.Config, sizes_of, show_progress=True
               ) -> list[dict]:
    """Records (as :func:`experiments.table2.run_split`) for every dataset × size × run ×
    partition; ``sizes_of(name)`` lists the training sizes."""
    jobs = [(name, n, run, p) for name in names for n in sizes_of(name) for run in range(runs)
            for p in config.partitions]
    data = {name: datasets.load(name) for name in names}
    records = []
    with tqdm(total=len(jobs), disable=not show_progress, unit="tree", file=sys.stderr) as bar:
        for name, n, run, partition in jobs:
            bar.set_description(f"{name} n={n} run {run} {partition}")
            X, y = data[name]
            sized = dataclasses.replace(config, max_train=n)
            records += table2.run_split(name, X, y, partition, config.methods, sized, run)
            bar.update(1)
    return records


def write_csv(records: list[dict], path: pathlib.Path):
    fields = ["dataset", "partition", "method", "n_train", "run", "seed", "test_error",
              "cv_error", "depth", "width"]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(records)


def read_csv(path: pathlib.Path) -> list[dict]:
    """Records written by :func:`write_csv` (numbers parsed back)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for key in ("n_train", "run", "seed", "depth", "width"):
            r[key] = int(r[key])
        for key in ("test_error", "cv_error"):
            r[key] = float(r[key])
    return rows


def plot(records: list[dict], names, partitions, path: pathlib.Path, note: str = ""):
    """One panel per partition (rows) and dataset (columns): test error against n, log x-axis."""
    import matplotlib
    import matplotlib.ticker
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(partitions), len(names), figsize=(3.1 * len(names), 5.4),
                             squeeze=False, sharex="col")
    for row, partition in enumerate(partitions):
        for col, name in enumerate(names):
            ax = axes[row, col]
            for method in METHODS:
                rows = [r for r in records if r["dataset"] == name and r["method"] == method
                        and r["partition"] == partition]
                if not rows:
                    continue
                sizes = sorted({r["n_train"] for r in rows})
                errors = [[r["test_error"] for r in rows if r["n_train"] == n] for n in sizes]
                mean = np.array([np.mean(e) for e in errors])
                std = np.array([np.std(e) for e in errors])
                label, color, marker, line = STYLE[method]
                ax.plot(sizes, 100 * mean, color=color, marker=marker, linestyle=line,
                        markersize=4, linewidth=1.3, label=label)
                if max(len(e) for e in errors) > 1:
                    ax.fill_between(sizes, 100 * (mean - std), 100 * (mean + std), color=color,
                                    alpha=0.15, linewidth=0)
            ax.set_xscale("log")
            ticks = [t for t in (250, 1000, 4000, 16000)
                     if t <= max((r["n_train"] for r in records if r["dataset"] == name),
                                 default=0)]
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.grid(True, which="major", alpha=0.3)
            ax.set_title(f"{name} ({'dyadic' if partition == 'dyadic' else 'KD'} tree)",
                         fontsize=10)
            if row == len(partitions) - 1:
                ax.set_xlabel("training-set size n")
            if col == 0:
                ax.set_ylabel("test error (%)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(METHODS), frameon=False,
               bbox_to_anchor=(0.5, 1.0))
    if note:
        fig.text(0.5, 0.005, note, ha="center", va="bottom", fontsize=7, color="0.35")
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    fig.savefig(path, dpi=150)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="three sizes (250, 1000, 4000 or fewer), reduced grid, 1000 test "
                             "points")
    parser.add_argument("--datasets", nargs="+", default=list(MULTICLASS),
                        choices=list(datasets.DATASETS))
    parser.add_argument("--runs", type=int, default=1, help="random splits per size")
    parser.add_argument("--factor", type=int, default=4, help="ratio of successive sizes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", default="cycle", choices=["cycle", "spread"])
    parser.add_argument("--replot", action="store_true",
                        help="redraw the PNG from the CSV and JSON of an earlier run")
    parser.add_argument("--out", default=None,
                        help="file stem in experiments/results (default figure2, quick: "
                             "figure2_quick)")
    args = parser.parse_args(argv)
    make = table2.quick_config if args.quick else table2.full_config
    config = make(tuple(args.datasets), runs=args.runs, seed=args.seed, split=args.split,
                  methods=METHODS)
    if args.quick:
        def sizes_of(name):
            return [n for n in (250, 1000, 4000) if n <= datasets.train_size(name)]
    else:
        def sizes_of(name):
            return training_sizes(name, factor=args.factor)
    stem = args.out or ("figure2_quick" if args.quick else "figure2") + (
        "_spread" if args.split == "spread" else "")
    base = table2.RESULTS / stem
    if args.replot:
        records, meta = read_csv(base.with_suffix(".csv")), json.loads(
            base.with_suffix(".json").read_text())
    else:
        commit = table2.git_state()
        start = time.perf_counter()
        records = run_curves(args.datasets, args.runs, config, sizes_of)
        seconds = time.perf_counter() - start
        table2.RESULTS.mkdir(parents=True, exist_ok=True)
        write_csv(records, base.with_suffix(".csv"))
        command = "python -m experiments.figure2 " + " ".join(
            argv if argv is not None else sys.argv[1:])
        meta = table2.run_metadata(config, command.strip(), seconds, commit)
        base.with_suffix(".json").write_text(json.dumps(meta, indent=1))
    rule = "cycled coordinates" if args.split == "cycle" else "widest-spread coordinate"
    note = (f"{config.test_size} test points, {args.runs} run(s) per size, parameters by "
            f"2-fold CV on the paper's grids ({len(config.base_grid)} + {config.linear_size} "
            f"values), T0 split on {rule}. {meta['command']}, {meta['date_utc']}, "
            f"{meta['runtime_seconds'] / 60:.0f} min")
    plot(records, args.datasets, config.partitions, base.with_suffix(".png"), note)
    print(f"wrote {base}.png, .csv and .json")


if __name__ == "__main__":
    main()
