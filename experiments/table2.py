"""Reproduce the paper's Table 2 (Nguyen & Kpotufe 2018) on the seven UCI datasets.

    python -m experiments.table2                   # the full protocol (docs/theory/protocol.md)
    python -m experiments.table2 --quick           # one run, reduced grid, smaller sets (minutes)
    python -m experiments.table2 --datasets spam digit --runs 2
    python -m experiments.table2 --split spread            # T0 on the widest-spread coordinate
    python -m experiments.table2 --methods c1 pacbayes km optimistic   # a subset of the columns
    python -m experiments.table2 --potentials authors      # the authors' code's penalty
    python -m experiments.table2 --merge a.json b.json     # one table of runs made apart

Outputs go to ``experiments/results/table2[_quick][_spread].{md,csv,json}`` (``--out`` renames),
saved after every dataset so that an interrupted run leaves a labelled partial table.

Protocol (docs/theory/protocol.md), per dataset and run r = 0..runs-1: a random split (seed ``seed + r``) into
2000 test points and a training set of the paper's size (:func:`experiments.datasets.train_size`);
T0 built on the whole training set, once per partition:

* **dyadic**: features min–max scaled, a node at depth ℓ splits coordinate ``ℓ mod D`` (the
  paper's rule: coordinates cycled) at its cell's midpoint, up to the paper's depth
  ``⌊ln n⌋·D`` (spam: 399 levels), stopping at pure nodes or nodes of < 2 points;
* **KD**: features divided by their standard deviation, coordinate ``ℓ mod D`` split at the
  median, up to depth ``⌈log2 n⌉`` (about one point per leaf), same stopping.

Every method's parameters are chosen by 2-fold cross-validation on the paper's grids (log grid of
10 values 2^-8 … 2^6, then 10 values from half to twice the best; product grids for the
PAC-Bayes λ1, λ2) with :func:`jaxtree.select.paper_search` (ties go to the simpler model); the
model is refitted on the whole training set and scored on the test set. The table reports each
method's test error divided by C1's on the same split (mean ± std over the runs) beside the
paper's ratio, and the absolute errors. Every run is written to CSV and JSON. Methods: C1 (the
baseline), SN, PAC-Bayes and HS-vote (binary datasets) as in the paper, and the other pruning
methods of :mod:`jaxtree.prune` on the same T0 and splits (second ratio table):

* Kearns–Mansour, optimistic pruning and min-size with SRM: their constant ``c`` tuned like the
  other penalties, on the same grids (δ = 0.05, |H| the distinct split tests of T0);
* reduced-error pruning (REP) and min-size with the size chosen on a hold-out part (CV): these
  have nothing to tune. The training set is split at random (seed of the run) into S1 (two
  thirds: node labels and training errors) and S2 (a third: hold-out errors); T0 is the one
  built on the whole training set, as for every other column.

``--potentials authors`` replaces the PAC-Bayes column by the reading of the authors' public code
(:func:`jaxtree.pacbayes_authors_potentials`: the penalty grows with the depth of a node) and its
tuning protocol (:func:`jaxtree.select.sequential_search` on one 65/35 hold-out split:
λ1 (their λ_err) on the log grid with 1 added, then 10 linear values, with λ2 = 1; then λ2 the
same way); the other columns are unchanged. Outputs get the suffix ``_authors``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import functools
import json
import math
import pathlib
import platform
import subprocess
import sys
import time
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from experiments import datasets
from jaxtree import shapes
from jaxtree.build import dyadic_tree, kd_tree
from jaxtree.hsvote import hs_votes
from jaxtree import prune
from jaxtree.prune import c1_votes, km_votes, optimistic_votes, pruning_votes, sn_votes
from jaxtree.select import (LOG_GRID, LINEAR_GRID_SIZE, PACBAYES_DIRECTIONS, fold_masks,
                            holdout_masks, pacbayes_authors_votes, pacbayes_votes, paper_search,
                            point_scores, prepare_folds, sequential_search)
from jaxtree.stats import node_stats
from jaxtree.tree import route

RESULTS = pathlib.Path(__file__).parent / "results"
PARTITIONS = ("dyadic", "kd")

#: The paper's Table 2: ratio of each method's test error to C1's (docs/theory/protocol.md).
PAPER_TABLE2 = {
    "spam": {"dyadic": {"sn": 1.118, "pacbayes": 0.975, "hs": 1.224},
             "kd": {"sn": 1.048, "pacbayes": 1.020, "hs": 1.075}},
    "eeg": {"dyadic": {"sn": 0.979, "pacbayes": 0.993, "hs": 1.029},
            "kd": {"sn": 1.000, "pacbayes": 0.990, "hs": 1.000}},
    "epileptic": {"dyadic": {"sn": 0.993, "pacbayes": 0.992, "hs": 0.951},
                  "kd": {"sn": 0.977, "pacbayes": 0.987, "hs": 0.907}},
    "crowd": {"dyadic": {"sn": 0.991, "pacbayes": 1.020}, "kd": {"sn": 1.001, "pacbayes": 1.017}},
    "wine": {"dyadic": {"sn": 1.035, "pacbayes": 0.991}, "kd": {"sn": 1.010, "pacbayes": 0.997}},
    "digit": {"dyadic": {"sn": 1.000, "pacbayes": 0.936}, "kd": {"sn": 0.994, "pacbayes": 0.997}},
    "letter": {"dyadic": {"sn": 1.005, "pacbayes": 0.993}, "kd": {"sn": 1.000, "pacbayes": 1.001}},
}


# ---------------------------------------------------------------------------------------------
# Methods: a votes function (jaxtree.select's interface) and the tuned parameters
@dataclasses.dataclass(frozen=True)
class Method:
    """A column of the table: ``votes(tree, stats, params)`` (node votes, ``[nodes, L]`` or
    ``(weight, label)``: :mod:`jaxtree.select`) and its tuned parameters
    ``((name, direction), ...)`` (direction: which values are simpler, for ties)."""

    label: str
    votes: Optional[Callable]
    directions: tuple
    binary_only: bool = False


#: Ties go to the simpler model (jaxtree.select): a larger λ or c prunes more; a smaller η
#: leaves the HS posterior closer to its prior. ``votes`` None: the votes function depends on
#: T0 (min-size with SRM: its table's static size, :func:`votes_of`); no ``directions``: a
#: hold-out method with nothing to tune (:func:`holdout_fit`).
METHODS = {
    "c1": Method("C1", c1_votes, (("lam", +1),)),
    "sn": Method("SN", sn_votes, (("lam", +1),)),
    "pacbayes": Method("PAC-Bayes", pacbayes_votes, PACBAYES_DIRECTIONS),
    "hs": Method("HS", hs_votes, (("eta", -1),), binary_only=True),
    "rep": Method("REP", None, ()),
    "min_size_cv": Method("min-size CV", None, ()),
    "min_size_srm": Method("min-size SRM", None, (("c", +1),)),
    "km": Method("KM", km_votes, (("c", +1),)),
    "optimistic": Method("optimistic", optimistic_votes, (("c", +1),)),
}
#: Methods of the paper's Table 2 (C1 is the baseline of the ratios).
PAPER_METHODS = ("sn", "pacbayes", "hs")
#: The other pruning methods (not in the paper's table), ratios to C1 in a second table.
OTHER_METHODS = ("rep", "min_size_cv", "min_size_srm", "km", "optimistic")
#: Fraction of the training set held out (S2) by REP and min-size CV.
HOLDOUT = 1 / 3


@dataclasses.dataclass(frozen=True)
class Config:
    """What one invocation runs (recorded in the outputs)."""

    datasets: tuple
    runs: int
    seed: int
    methods: tuple
    partitions: tuple
    base_grid: tuple
    linear_size: int
    max_train: Optional[int]     # cap on the training size (quick mode), None: the paper's
    test_size: int
    split: str = "cycle"         # T0's split coordinate: "cycle" (the paper's) or "spread"
    folds: int = 2
    potentials: str = "practical"  # PAC-Bayes: "practical" (the paper's) or "authors"


def full_config(datasets_=tuple(datasets.DATASETS), runs=5, seed=0, split="cycle",
                methods=("c1",) + PAPER_METHODS + OTHER_METHODS, potentials="practical"
                ) -> Config:
    """The paper's protocol (docs/theory/protocol.md)."""
    return Config(tuple(datasets_), runs, seed, tuple(methods), PARTITIONS,
                  tuple(float(v) for v in LOG_GRID), LINEAR_GRID_SIZE, None,
                  datasets.TEST_SIZE, split, potentials=potentials)


def quick_config(datasets_=tuple(datasets.DATASETS), runs=1, seed=0, split="cycle",
                 methods=("c1",) + PAPER_METHODS + OTHER_METHODS, potentials="practical"
                 ) -> Config:
    """One run, a 5-value log grid then 5 linear values, training sets capped at 1500 points and
    1000 test points: the shape of the experiment in a few minutes."""
    return Config(tuple(datasets_), runs, seed, tuple(methods), PARTITIONS,
                  tuple(float(v) for v in 2.0 ** np.linspace(-8, 6, 5)), 5, 1500, 1000, split,
                  potentials=potentials)


# ---------------------------------------------------------------------------------------------
def paper_depth(partition: str, n: int, dims: int) -> int:
    """Depth of T0: the paper's ``⌊ln n⌋·D`` for dyadic trees, ``⌈log2 n⌉`` for KD trees."""
    if partition == "dyadic":
        return int(math.floor(math.log(n))) * dims
    return max(1, int(math.ceil(math.log2(n))))


def build_tree(partition: str, X: np.ndarray, y: np.ndarray, split: str = "cycle"):
    """T0 on the training set (:func:`paper_depth`; purity / 2-point stopping), in whichever
    layout takes less memory, padded to a shared shape (:func:`jaxtree.shapes.pad_tree`) so that
    the runs of a dataset share array shapes and jit compiles each function once per dataset."""
    builder = dyadic_tree if partition == "dyadic" else kd_tree
    tree = builder(X, max_depth=paper_depth(partition, *X.shape), y=y, split=split,
                   layout="auto")
    return shapes.pad_tree(tree, X.shape[0])


def split_indices(n: int, train: int, test: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random disjoint ``(train [train], test [test])`` indices of ``n`` points."""
    if train + test > n:
        raise ValueError(f"{train} training + {test} test points exceed the {n} available")
    order = np.random.default_rng(seed).permutation(n)
    return order[test:test + train], order[:test]


@functools.partial(jax.jit, static_argnames="votes_fn")
def _test_errors(tree, stats, votes_fn, params, path, on_path, y):
    """Number of test points (routed: ``path``, ``on_path`` ``[m, levels]``; labels ``y [m]``)
    that the fitted method misclassifies."""
    scores = point_scores(votes_fn(tree, stats, params), path, on_path, stats.num_classes)
    return jnp.sum(jnp.argmax(scores, axis=1) != y)


def votes_of(key: str, tree, stats) -> Callable:
    """The votes function of method ``key`` on T0 (``stats``: of the whole training set)."""
    if key == "min_size_srm":
        return prune.min_size_srm_votes_for(prune.size_cap(stats, tree.internal, tree.layout))
    return METHODS[key].votes


def holdout_fit(key: str, tree, X, y, num_classes: int, seed: int):
    """REP (``key="rep"``) or min-size with the size of fewest hold-out errors
    (``"min_size_cv"``) on T0: labels and training errors from S1, hold-out errors from S2
    (a random :data:`HOLDOUT` of ``X [n, D]``, ``y [n]``, seeded). Returns ``(votes, hold-out
    error rate of the chosen pruning)``, ``votes`` as :func:`jaxtree.prune.pruning_votes`."""
    order = np.random.default_rng(seed).permutation(len(y))
    held = max(1, int(round(HOLDOUT * len(y))))
    grow, prune_part = np.sort(order[held:]), np.sort(order[:held])
    stats = node_stats(tree, jnp.asarray(X[grow]), jnp.asarray(y[grow]), num_classes)
    counts = node_stats(tree, jnp.asarray(X[prune_part]), jnp.asarray(y[prune_part]),
                        num_classes).counts
    holdout_err = prune.holdout_errors(counts, stats.label)
    if key == "rep":
        mask = prune.rep_pruning(holdout_err, tree.internal, tree.layout)
    else:
        table = prune.min_error_per_size(stats.errors, stats.total > 0, tree.internal,
                                         prune.size_cap(stats, tree.internal, tree.layout),
                                         holdout_err, tree.layout)
        mask = prune.pruning_of_size(table, prune.holdout_select(table), tree.internal,
                                     tree.layout)
    return (pruning_votes(mask, stats),
            float(prune.pruning_errors(mask, holdout_err)) / len(prune_part))


@functools.partial(jax.jit, static_argnames="num_classes")
def _votes_test_errors(votes, path, on_path, y, num_classes):
    """:func:`_test_errors` of given node votes (``(weight, label)``, ``[nodes]`` each)."""
    scores = point_scores(votes, path, on_path, num_classes)
    return jnp.sum(jnp.argmax(scores, axis=1) != y)


def run_split(name: str, X, y, partition: str, methods, config: Config, run: int,
              progress=None) -> list[dict]:
    """Every method on one split and one partition; one record per method."""
    seed = config.seed + run
    num_classes = int(y.max()) + 1
    n_train = datasets.train_size(name)
    if config.max_train is not None:
        n_train = min(n_train, config.max_train)
    train, test = split_indices(len(y), n_train, config.test_size, seed)
    start = time.perf_counter()
    tree = build_tree(partition, X[train], y[train], config.split)
    X_train, y_train = jnp.asarray(X[train]), jnp.asarray(y[train])
    folds = prepare_folds(tree, X_train, y_train, num_classes,
                          jnp.asarray(fold_masks(n_train, config.folds, seed)))
    stats = node_stats(tree, X_train, y_train, num_classes)
    path, on_path = route(tree, jnp.asarray(X[test]))
    y_test = jnp.asarray(y[test])
    build_seconds = time.perf_counter() - start
    records = []
    for key in methods:
        method = METHODS[key]
        if method.binary_only and num_classes != 2:
            continue
        start = time.perf_counter()
        if key == "pacbayes" and config.potentials == "authors":
            votes = pacbayes_authors_votes
            result = _authors_search(tree, X_train, y_train, num_classes, config, seed)
        elif method.directions:
            votes = votes_of(key, tree, stats)
            result = paper_search(tree, folds, votes, method.directions,
                                  base_grid=np.asarray(config.base_grid),
                                  linear_size=config.linear_size)
        if method.directions:
            params = {k: float(v) for k, v in result.best_params.items()}
            cv_error = float(result.best_error)
            errors = int(_test_errors(tree, stats, votes, result.best_params, path, on_path,
                                      y_test))
        else:
            node_votes, cv_error = holdout_fit(key, tree, X[train], y[train], num_classes, seed)
            params = {}
            errors = int(_votes_test_errors(node_votes, path, on_path, y_test, num_classes))
        records.append({
            "dataset": name, "partition": partition, "run": run, "seed": seed, "method": key,
            "n_train": n_train, "n_test": config.test_size, "num_classes": num_classes,
            "depth": tree.depth, "width": tree.width, "slots": tree.num_nodes,
            "layout": type(tree.layout).__name__, "params": params,
            "cv_error": cv_error, "test_error": errors / config.test_size,
            "seconds": time.perf_counter() - start, "build_seconds": build_seconds})
        if progress is not None:
            progress(key)
    base = next(r["test_error"] for r in records if r["method"] == "c1")
    for record in records:
        record["ratio"] = record["test_error"] / base if base > 0 else float("nan")
    return records


def _authors_search(tree, X_train, y_train, num_classes, config, seed):
    """The authors' code's protocol: λ1 then λ2 (:func:`jaxtree.select.sequential_search`) on
    one 65/35 hold-out split of the training set."""
    holdout = prepare_folds(tree, X_train, y_train, num_classes,
                            jnp.asarray(holdout_masks(len(y_train), 0.35, seed)))
    grid = np.unique(np.r_[np.asarray(config.base_grid), 1.0])
    return sequential_search(tree, holdout, pacbayes_authors_votes, PACBAYES_DIRECTIONS,
                             base_grid=grid, linear_size=config.linear_size)


def run_experiment(config: Config, show_progress: bool = True,
                   on_dataset: Optional[Callable] = None) -> list[dict]:
    """All datasets × runs × partitions × methods of ``config``; a list of records.
    ``on_dataset(records_so_far)`` is called after each dataset (to save partial results)."""
    if "c1" not in config.methods:
        raise ValueError("C1 is the baseline of every ratio: keep it in the methods")
    data = {name: datasets.load(name) for name in config.datasets}
    total = sum(config.runs * len(config.partitions) *
                sum(1 for m in config.methods
                    if not (METHODS[m].binary_only and int(data[name][1].max()) + 1 != 2))
                for name in config.datasets)
    records = []
    with tqdm(total=total, disable=not show_progress, unit="fit", file=sys.stderr) as bar:
        for name in config.datasets:
            X, y = data[name]
            for run in range(config.runs):
                for partition in config.partitions:
                    bar.set_description(f"{name} run {run} {partition}")
                    records += run_split(name, X, y, partition, config.methods, config, run,
                                         progress=lambda key: bar.update(1))
            if on_dataset is not None:
                on_dataset(records)
            # the next dataset has other shapes: drop this one's compiled programs (a run that
            # keeps all of them exhausts the process's memory maps, ~65k on Linux, and XLA's
            # compiler then fails with "Cannot allocate memory" on letter)
            jax.clear_caches()
            shapes.forget_shapes()
    return records


# ---------------------------------------------------------------------------------------------
# Reporting
def summarize(records: list[dict]) -> dict:
    """``{(dataset, partition, method): {"ratio": (mean, std), "error": (mean, std), "runs": k}}``."""
    groups = {}
    for r in records:
        groups.setdefault((r["dataset"], r["partition"], r["method"]), []).append(r)
    out = {}
    for key, rows in groups.items():
        ratio = np.array([r["ratio"] for r in rows])
        error = np.array([r["test_error"] for r in rows])
        out[key] = {"ratio": (float(ratio.mean()), float(ratio.std())),
                    "error": (float(error.mean()), float(error.std())), "runs": len(rows)}
    return out


def markdown_table(records: list[dict], config: Config) -> str:
    """The ratio table (ours beside the paper's) and the absolute-error table, in Markdown."""
    summary = summarize(records)
    names = [n for n in config.datasets if any(k[0] == n for k in summary)]
    lines = ["### Ratio of test error to C1 pruning (mean ± std over runs; paper in brackets)", ""]
    head = ["dataset"] + [f"{'dyadic' if p == 'dyadic' else 'KD'} {METHODS[m].label}"
                          for p in config.partitions for m in PAPER_METHODS
                          if m in config.methods]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        cells = [name]
        for p in config.partitions:
            for m in PAPER_METHODS:
                if m not in config.methods:
                    continue
                paper = PAPER_TABLE2.get(name, {}).get(p, {}).get(m)
                s = summary.get((name, p, m))
                if s is None:
                    cells.append("N/A")
                else:
                    mean, std = s["ratio"]
                    cells.append(f"{mean:.3f} ± {std:.3f} ({paper:.3f})" if paper is not None
                                 else f"{mean:.3f} ± {std:.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    others = [m for m in OTHER_METHODS if m in config.methods]
    if others:
        lines += ["", "### Ratio of test error to C1 pruning, the other pruning methods (mean ± "
                  "std over runs; not in the paper)", ""]
        head = ["dataset"] + [f"{'dyadic' if p == 'dyadic' else 'KD'} {METHODS[m].label}"
                              for p in config.partitions for m in others]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for name in names:
            cells = [name]
            for p in config.partitions:
                for m in others:
                    s = summary.get((name, p, m))
                    cells.append("N/A" if s is None else
                                 "{:.3f} ± {:.3f}".format(*s["ratio"]))
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "### Test error (mean ± std over runs)", ""]
    head = ["dataset", "partition", "n train", "T0 layout depth / width (padded)"] + [
        METHODS[m].label for m in config.methods]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        for p in config.partitions:
            rows = [r for r in records if r["dataset"] == name and r["partition"] == p
                    and r["method"] == "c1"]
            if not rows:
                continue
            shape = f"{np.median([r['depth'] for r in rows]):.0f} / " \
                    f"{np.median([r['width'] for r in rows]):.0f}"
            cells = [name, p, str(rows[0]["n_train"]), shape]
            for m in config.methods:
                s = summary.get((name, p, m))
                cells.append("N/A" if s is None else
                             f"{s['error'][0]:.4f} ± {s['error'][1]:.4f}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_results(records: list[dict], config: Config, stem: str, command: str,
                  seconds: float, out_dir=RESULTS, commit: str = "") -> pathlib.Path:
    """Write ``<stem>.md`` (tables and how they were made), ``<stem>.csv`` and ``<stem>.json``
    (every run) into ``out_dir``; returns the Markdown path."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = run_metadata(config, command, seconds, commit)
    (out_dir / f"{stem}.json").write_text(json.dumps({"meta": meta, "runs": records}, indent=1))
    fields = [k for k in records[0] if k != "params"] + ["params"] if records else []
    with open(out_dir / f"{stem}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for r in records:
            writer.writerow({**r, "params": json.dumps(r["params"])})
    done = [name for name in config.datasets if any(r["dataset"] == name for r in records)]
    partial = "" if len(done) == len(config.datasets) else (
        f"\n**Partial results** (run interrupted or in progress): finished "
        f"{', '.join(done)} of {', '.join(config.datasets)}.\n")
    md = out_dir / f"{stem}.md"
    md.write_text(header_text(meta) + partial + "\n" + markdown_table(records, config))
    return md


def merge_results(paths, stem: str, out_dir=RESULTS) -> pathlib.Path:
    """Write ``<stem>.{md,csv,json}`` from the records of several runs' JSON files (one protocol,
    different datasets): their commands are listed and their runtimes added."""
    parts = [json.loads(pathlib.Path(path).read_text()) for path in paths]
    records = [r for part in parts for r in part["runs"]]
    metas = [part["meta"] for part in parts]
    protocol = [{k: v for k, v in m["config"].items() if k != "datasets"} for m in metas]
    if any(p != protocol[0] for p in protocol):
        raise ValueError("the runs to merge differ in their protocol (config besides datasets)")
    names = [n for m in metas for n in m["config"]["datasets"]]
    config = Config(**{**{k: tuple(v) if isinstance(v, list) else v
                          for k, v in metas[0]["config"].items()},
                       "datasets": tuple(dict.fromkeys(names))})
    command = "; ".join(m["command"] for m in metas) + "; then python -m experiments.table2 " \
        "--merge " + " ".join(str(p) for p in paths)
    commits = sorted({m["git_commit"] for m in metas})
    return write_results(records, config, stem, command,
                         sum(m["runtime_seconds"] for m in metas), out_dir,
                         commit=", ".join(commits))


def git_state() -> str:
    """The commit of the code that runs, with a warning when ``jaxtree/`` or ``experiments/``
    (results aside) have uncommitted changes (empty outside a git checkout)."""
    root = pathlib.Path(__file__).parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=root).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "jaxtree", "experiments",
                                ":!experiments/results"],
                               capture_output=True, text=True, cwd=root).stdout.strip()
    except OSError:
        return ""
    return commit + (" (with uncommitted changes)" if commit and dirty else "")


def run_metadata(config: Config, command: str, seconds: float, commit: str = "") -> dict:
    return {"command": command, "date_utc": datetime.datetime.now(datetime.timezone.utc)
            .strftime("%Y-%m-%d %H:%M UTC"), "runtime_seconds": round(seconds, 1),
            "git_commit": commit, "jax": jax.__version__, "device": str(jax.devices()[0]),
            "machine": platform.platform(), "config": dataclasses.asdict(config)}


def header_text(meta: dict) -> str:
    c = meta["config"]
    grid = c["base_grid"]
    rule = "cycled (ℓ mod D, the paper's rule)" if c["split"] == "cycle" else "widest spread"
    return (
        f"# Table 2 reproduced\n\n"
        f"Command: `{meta['command']}`  \n"
        f"Date: {meta['date_utc']}; runtime {meta['runtime_seconds'] / 60:.1f} min on "
        f"{meta['device']} ({meta['machine']}), JAX {meta['jax']}, commit {meta['git_commit']}\n\n"
        f"Runs: {c['runs']} random split(s) per dataset (split and fold seeds "
        f"{c['seed']} … {c['seed'] + c['runs'] - 1}); {c['test_size']} test points; training "
        f"size the paper's" + (f" capped at {c['max_train']}" if c["max_train"] else "") +
        f" (crowd: 8545, see experiments/datasets.py). Parameters by {c['folds']}-fold CV: "
        f"log grid of {len(grid)} values {grid[0]:.4g} … {grid[-1]:.4g}, then {c['linear_size']} "
        f"linear values from half to twice the best (product grids for PAC-Bayes λ1, λ2). "
        f"T0: dyadic to depth ⌊ln n⌋·D, KD to depth ⌈log2 n⌉, split coordinate: {rule}, "
        f"stopping at pure nodes or < 2 points. Ratio = method's test error / C1's on the same "
        f"split, averaged over runs. HS-vote is binary only (N/A). REP and min-size CV: labels "
        f"and training errors from a random two thirds of the training set, hold-out errors "
        f"from the other third, on the same T0; KM, optimistic and min-size SRM: c on the same "
        f"grids, δ = 0.05. wine: the 7 labels present "
        f"(paper: 11).\n" + ("" if c.get("potentials", "practical") == "practical" else
        "\nPAC-Bayes: the authors' public code's reading: penalty λ2·sqrt(8·ℓ·max(N_A, ℓ)) "
        "(ℓ the depth of A), λ1 then λ2 tuned one at a time on one 65/35 hold-out split "
        "(log grid with 1 added, then 10 linear values), the other parameter at 1 until chosen."
        "\n"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="one run, reduced grid, training sets capped at 1500 points")
    parser.add_argument("--datasets", nargs="+", default=list(datasets.DATASETS),
                        choices=list(datasets.DATASETS))
    parser.add_argument("--runs", type=int, default=None, help="random splits per dataset")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", default="cycle", choices=["cycle", "spread"],
                        help="T0's split coordinate: cycled (the paper's rule) or widest spread")
    parser.add_argument("--methods", nargs="+", default=None, choices=list(METHODS),
                        help="methods to run (default: all). C1 is always needed: it is the "
                             "ratios' baseline")
    parser.add_argument("--potentials", default="practical", choices=["practical", "authors"],
                        help="PAC-Bayes penalty and tuning: the paper's, or the authors' public "
                             "code's (depth-dependent penalty, λ's one at a time on a 65/35 "
                             "hold-out)")
    parser.add_argument("--out", default=None,
                        help="file stem in experiments/results (default table2, quick: "
                             "table2_quick)")
    parser.add_argument("--merge", nargs="+", metavar="JSON",
                        help="no fitting: write one table of these runs' .json files (runs of "
                             "one protocol on different datasets, e.g. letter run apart)")
    args = parser.parse_args(argv)
    if args.merge:
        path = merge_results([pathlib.Path(p) for p in args.merge], args.out or "table2")
        print(f"wrote {path} (+ .csv, .json)")
        return
    make = quick_config if args.quick else full_config
    options = {"runs": args.runs, "methods": args.methods and tuple(args.methods),
               "potentials": args.potentials}
    config = make(tuple(args.datasets), seed=args.seed, split=args.split,
                  **{k: v for k, v in options.items() if v is not None})
    command = "python -m experiments.table2 " + " ".join(argv if argv is not None
                                                         else sys.argv[1:])
    commit = git_state()          # of the code that runs, taken before it runs
    stem = args.out or ("table2" + ("_quick" if args.quick else "")
                        + ("_spread" if args.split == "spread" else "")
                        + ("_authors" if args.potentials == "authors" else ""))
    start = time.perf_counter()

    def save(records):            # after each dataset, so that an interrupted run leaves a table
        write_results(records, config, stem, command.strip(), time.perf_counter() - start,
                      commit=commit)

    records = run_experiment(config, on_dataset=save)
    seconds = time.perf_counter() - start
    path = write_results(records, config, stem, command.strip(), seconds, commit=commit)
    print(markdown_table(records, config))
    print(f"wrote {path} (+ .csv, .json) in {seconds / 60:.1f} min")


if __name__ == "__main__":
    main()
