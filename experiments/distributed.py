"""A fit on rows spread over N local processes (jaxtree.distributed), against one process.

    python -m experiments.distributed --processes N --data PATH.npz --out PATH.json
        [--partition kd|dyadic|cart] [--lam1 X --lam2 Y] [--max-depth D] [--bins K]
        [--cv-trees auto|shared|per_fold]
    python -m experiments.distributed --make-data PATH.npz [--rows 1000000]
    python -m experiments.distributed --report [--rows 1000000] [--processes 1 2 4]
    python -m experiments.distributed --rewrite

The first form reads ``X_train``, ``y_train`` and ``X_test`` from the ``.npz``, gives each of N
local processes (:mod:`jaxtree.launch`, gloo collectives) a contiguous block of the training rows,
fits :class:`jaxtree.PACBayesTreeClassifier` with :func:`jaxtree.distributed.fit` (the λ's tuned
by the paper's protocol when omitted) and writes JSON: ``processes``, ``fit_seconds`` (the slowest
process, from a common start), ``bytes_communicated`` (the payload each process put into the
collectives; a ring all-reduce moves about twice that over the wire), ``reductions``, ``phases``
(seconds, reductions and bytes of T0, statistics, tuning and weights), the λ's, the tree's size,
and ``proba``: ``predict_proba(X_test)`` as nested lists, checked identical in every process.

``--make-data`` writes the synthetic set of ``experiments.scaling`` (8 standard normal features,
2 classes from a noisy nonlinear rule; 2000 test rows). ``--report`` makes it (``--rows``), runs
1, 2 and 4 processes, checks that every run's ``proba`` equals the 1-process run's, measures
per-row costs on a 10x smaller set, and writes ``experiments/results/distributed.md`` (and
``distributed.json``) with the table and a projection of a fit on 10⁹ rows over 64 hosts.
``--rewrite`` writes the report again from ``distributed.json`` without fitting.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from experiments.scaling import synthetic

RESULTS = Path(__file__).resolve().parent / "results"
TEST_ROWS = 2000


# ---------------------------------------------------------------------------------------------
# One process of a run
def worker(args) -> None:
    """Join the cluster, fit on this process's block, write this process's part of the JSON."""
    from jaxtree import launch

    launch.initialize()
    import jaxtree
    from jaxtree import distributed

    reducer = distributed.ProcessReducer()
    data = np.load(args.data)
    n = data["y_train"].shape[0]
    bounds = np.linspace(0, n, reducer.size + 1).astype(int)
    rows = slice(bounds[reducer.index], bounds[reducer.index + 1])
    X, y = data["X_train"][rows], data["y_train"][rows]
    X_test = data["X_test"]
    fits = []
    for _ in range(1 + args.warm):               # the first fit compiles; later ones are warm
        model = jaxtree.PACBayesTreeClassifier(partition=args.partition, lam1=args.lam1,
                                               lam2=args.lam2, max_depth=args.max_depth,
                                               cv_trees=args.cv_trees)
        before = (reducer.reductions, reducer.bytes_reduced)
        reducer.sum(np.zeros(1))                 # a common start
        start = time.perf_counter()
        distributed.fit(model, X, y, bins=args.bins, reducer=reducer)
        fits.append({"fit_seconds": time.perf_counter() - start, "phases": model.profile_,
                     "reductions": reducer.reductions - before[0] - 1,
                     "bytes_communicated": reducer.bytes_reduced - before[1] - 256 * 8})
    proba = distributed.predict_proba(model, X_test)
    tree = model.tree_
    depth = np.asarray(tree.node_depth)[np.asarray(tree.internal)]
    part = {"process": reducer.index, "fits": fits,
            "rows_here": int(bounds[reducer.index + 1] - bounds[reducer.index]),
            "lam1": float(model._param("lam1")), "lam2": float(model._param("lam2")),
            "tree_levels": int(tree.num_levels), "tree_slots": int(tree.num_nodes),
            "splits_per_level": np.bincount(depth, minlength=tree.num_levels).tolist(),
            "proba": proba.tolist()}
    with open(f"{args.out}.part{reducer.index}", "w") as file:
        json.dump(part, file)


def run(processes: int, data: str, out: str, partition="kd", lam1=None, lam2=None,
        max_depth=None, bins=256, warm=0, timeout=3600.0, cv_trees="auto") -> dict:
    """Launch ``processes`` workers on ``data``; merge their parts into ``out`` (JSON).
    ``warm``: fits repeated after the first (timed apart: no compilation)."""
    from jaxtree import launch

    command = [sys.executable, "-m", "experiments.distributed", "--data", data, "--out", out,
               "--partition", partition, "--bins", str(bins), "--warm", str(warm),
               "--cv-trees", cv_trees]
    for flag, value in (("--lam1", lam1), ("--lam2", lam2), ("--max-depth", max_depth)):
        if value is not None:
            command += [flag, str(value)]
    root = str(Path(__file__).resolve().parents[1])
    launch.check(launch.launch(command, processes, timeout=timeout,
                               env={"PYTHONPATH": os.pathsep.join(
                                   [root, os.environ.get("PYTHONPATH", "")])}))
    parts = []
    for index in range(processes):
        with open(f"{out}.part{index}") as file:
            parts.append(json.load(file))
        os.remove(f"{out}.part{index}")
    if any(p["proba"] != parts[0]["proba"] for p in parts):
        raise RuntimeError("the processes disagree on predict_proba")

    def fit_summary(k):
        fits = [p["fits"][k] for p in parts]
        return {"fit_seconds": max(f["fit_seconds"] for f in fits),
                "bytes_communicated": fits[0]["bytes_communicated"],
                "reductions": fits[0]["reductions"],
                "phase_seconds": {name: max(f["phases"][name]["seconds"] for f in fits)
                                  for name in fits[0]["phases"]},
                "phases": fits[0]["phases"]}

    first = fit_summary(0)
    result = {"processes": processes, "rows": int(np.load(data)["y_train"].shape[0]),
              "partition": partition, "bins": bins if partition == "cart" else None,
              "max_depth": max_depth, "lam1": parts[0]["lam1"], "lam2": parts[0]["lam2"],
              "tuned": lam1 is None or lam2 is None,
              "fit_seconds": first["fit_seconds"],
              "bytes_communicated": first["bytes_communicated"],
              "reductions": first["reductions"], "first_fit": first,
              "warm_fits": [fit_summary(k) for k in range(1, warm + 1)],
              "rows_per_process": [p["rows_here"] for p in parts],
              "tree_levels": parts[0]["tree_levels"], "tree_slots": parts[0]["tree_slots"],
              "splits_per_level": parts[0]["splits_per_level"],
              "proba_identical_across_processes": True,
              "proba": parts[0]["proba"]}
    with open(out, "w") as file:
        json.dump(result, file)
    return result


def make_data(path: str, rows: int, seed: int = 0) -> None:
    X, y = synthetic(rows + TEST_ROWS, seed)
    np.savez(path, X_train=X[:rows], y_train=y[:rows], X_test=X[rows:], y_test=y[rows:])


# ---------------------------------------------------------------------------------------------
# The report
# (partition, max_depth, warm fits): KD at its default depth ceil(log2 n), timed warm too for the
# per-node costs; dyadic and CART capped (their default depths grow T0s of ~n nodes; a CART
# level reduces nodes × features × 256 bins × classes counts)
SETTINGS = (("kd", None, 1), ("dyadic", 16, 0), ("cart", 12, 0))
# the per-row costs: warm 1-process KD fits of this depth on n and n/10 rows (the same nodes)
COST_DEPTH = 14


def report(rows: int, process_counts, folder: Path) -> None:
    data = str(folder / f"synthetic_{rows}.npz")
    make_data(data, rows)
    runs = {}
    for partition, depth, warm in SETTINGS:
        for processes in process_counts:
            out = str(folder / f"{partition}_{processes}.json")
            runs[partition, processes] = run(processes, data, out, partition, max_depth=depth,
                                             warm=warm)
            print(json.dumps(_summary(runs[partition, processes])), flush=True)
    # the 1-process runs against the estimator's own fit on all rows in this process, at the λ's
    # the run tuned: the tree, its statistics and the weights are the same computation; the
    # tuning is not (the distributed fit deals its CV folds over row positions, the estimator
    # over distinct feature vectors), so the λ's are given
    import jaxtree

    arrays = np.load(data)
    alone = {}
    for partition, depth, _ in SETTINGS:
        tuned = runs[partition, process_counts[0]]
        model = jaxtree.PACBayesTreeClassifier(partition=partition, max_depth=depth,
                                               lam1=tuned["lam1"], lam2=tuned["lam2"],
                                               bins=256 if partition == "cart" else None)
        proba = model.fit(arrays["X_train"], arrays["y_train"]).predict_proba(arrays["X_test"])
        alone[partition] = bool(np.array_equal(np.asarray(tuned["proba"], proba.dtype), proba))
    small_data = str(folder / f"synthetic_{rows // 10}.npz")
    make_data(small_data, rows // 10)
    costs = [run(1, path, str(folder / "kd_cost.json"), "kd", max_depth=COST_DEPTH, warm=1)
             for path in (data, small_data)]
    write_report(runs, alone, costs, rows, process_counts)


def rewrite_report() -> None:
    """Write ``distributed.md`` again from ``distributed.json`` (its runs' summaries), without
    fitting: for a change of the report's text or of the projection's formulas."""
    with open(RESULTS / "distributed.json") as file:
        stored = json.load(file)
    runs = {(key.rsplit("_", 1)[0], int(key.rsplit("_", 1)[1])): run
            for key, run in stored["runs"].items()}
    counts = sorted({n for _, n in runs})
    write_report(runs, stored["equal_to_estimator_fit"], stored["cost_runs"],
                 next(iter(runs.values()))["rows"], counts)


def _summary(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "proba"}


def write_report(runs, alone, costs, rows, process_counts) -> None:
    first = process_counts[0]
    lines = [
        "# Fitting on rows spread over processes", "",
        f"`python -m experiments.distributed --report --rows {rows}` "
        f"({time.strftime('%Y-%m-%d')}; {platform.machine()}, {os.cpu_count()} CPU cores shared "
        "with other work; the JAX processes run on this one machine and reduce with gloo over "
        "localhost).", "",
        f"Synthetic set of `experiments.scaling`: {rows:,} training rows, 8 standard normal "
        f"features, 2 classes; {TEST_ROWS} test rows. Each process holds a contiguous block of "
        "the rows; `jaxtree.distributed.fit` grows T0 from collective statistics, tunes λ1, λ2 "
        "by the paper's protocol (2-fold CV, 200 settings, split over the processes) and "
        "computes the weights.", "",
        "| T0 | processes | first fit (s) | warm fit (s): T0 / statistics / folds / grid / "
        "weights | collectives | bytes per process | λ1, λ2 | proba vs 1 process |",
        "|---|---|---|---|---|---|---|---|"]
    for (partition, processes), r in runs.items():
        same = r["proba_equal_to_1_process"] = (
            r["proba"] == runs[partition, first]["proba"] if "proba" in r
            else r["proba_equal_to_1_process"])          # a run read back by --rewrite
        label = {"kd": "KD", "dyadic": "dyadic", "cart": "CART, 256 bins"}[partition]
        internal = sum(r["splits_per_level"])
        warm = "–"
        if r["warm_fits"]:
            w = r["warm_fits"][0]
            phases = w["phase_seconds"]
            warm = (f"{w['fit_seconds']:.1f}: {phases['tree']:.1f} / "
                    f"{phases['statistics']:.1f} / {phases['folds']:.1f} / "
                    f"{phases['tuning'] - phases['folds']:.1f} / {phases['weights']:.2f}")
        lines.append(
            f"| {label} (depth {r['tree_levels'] - 1}, {internal:,} splits) | {processes} | "
            f"{r['fit_seconds']:.1f} | {warm} | {r['reductions']:,} | "
            f"{r['bytes_communicated'] / 2 ** 20:,.1f} MiB | {r['lam1']:.3g}, {r['lam2']:.3g} | "
            f"{'equal' if same else 'DIFFERENT'} |")
    lines += [
        "", "*proba vs 1 process*: the test set's `predict_proba` compared bit for bit with the "
        "1-process run's (every run also checks that all its processes agree). "
        + " ".join(f"The 1-process {p} run's equals `PACBayesTreeClassifier(partition=\"{p}\""
                   f"{', bins=256' if p == 'cart' else ''}, lam1=…, lam2=…).fit` at its λ's on "
                   f"all rows in one process: {'yes' if ok else 'NO'}."
                   for p, ok in alone.items())
        + " (The λ's are given because the two tune apart: the distributed fit deals its CV "
        "folds over row positions, the estimator over distinct feature vectors.) Where the "
        "estimator grows a T0 per CV fold (CART and KD), so does the distributed fit, over "
        "the fold's rows of every process.",
        "Seconds: wall time of the slowest process from a common start. The first fit compiles "
        "(each process compiles the same programs); warm fits do not. The machine has 2 cores "
        f"shared with other work (load average {os.getloadavg()[1]:.1f} at the end of the "
        "runs), so the timings are noisy; growing T0 is NumPy on one core per process, so 2 and "
        "4 processes can use both cores. The table shows what spreading the rows costs, not how "
        "the fit scales. Bytes: the payload each process puts into the all-reduces (int64 "
        "counts and float64 values, padded to powers of 4); a ring all-reduce sends and "
        "receives about twice that per process.", ""]
    lines += projection(runs["kd", first], *costs)
    (RESULTS / "distributed.md").write_text("\n".join(lines) + "\n")
    with open(RESULTS / "distributed.json", "w") as file:
        json.dump({"runs": {f"{p}_{n}": _summary(r) for (p, n), r in runs.items()},
                   "cost_runs": [_summary(c) for c in costs],
                   "equal_to_estimator_fit": alone}, file, indent=1)


# The projection's cluster (stated in the note)
HOSTS = 64
TOTAL_ROWS = 10 ** 9
PROJECTED_DEPTH = 20
BANDWIDTH = 10e9        # bytes/s per host for all-reduce traffic (100 Gb/s Ethernet)
LATENCY = 1e-3          # seconds per all-reduce over 64 hosts (a ring of ~15 µs hops)
LARGEST_PIECE = 4 ** 9  # values per collective (jaxtree.distributed)
CV_FOLDS = 2            # the estimator's default cv: a KD T0 grown per fold
FEATURES = 8            # of the synthetic set (experiments.scaling)


def _radix_select(queries: int) -> list[int]:
    """Entries of the all-reduces of a radix select of ``queries`` ranks (digit width as
    :func:`jaxtree.collective.order_statistics` picks it, 32-bit keys)."""
    bits = next((b for b in (8, 4) if queries << b <= 2 ** 16), 2)
    return [queries << bits] * (32 // bits)


def kd_level_payload(nodes: int, splits: int, classes: int = 2,
                     features: int = FEATURES) -> tuple[int, int]:
    """``(bytes, collectives)`` one level of a KD T0 with the estimators' default split (widest
    spread) puts into the all-reduces, per process (8 bytes an entry): node and class counts;
    for the split coordinate, the two quartile ranks of every coordinate (a radix select) and
    each coordinate's smallest and largest value; for the threshold, the two middle ranks in
    that coordinate, its largest value and the one below it."""
    entries = [nodes, nodes * classes]
    if splits:
        entries += _radix_select(2 * splits * features) + [splits * features] * 2
        entries += _radix_select(2 * splits) + [splits, splits]
    return 8 * sum(entries), sum(-(-e // LARGEST_PIECE) for e in entries)


def projection(big, cost_big, cost_small) -> list[str]:
    """A fit on 10⁹ rows over 64 hosts from warm 1-process KD fits: ``cost_big`` and
    ``cost_small`` (depth :data:`COST_DEPTH` on n and n/10 rows: the same nodes, so their
    difference is the rows' cost) and ``big`` (the default depth on n rows: the rest of its
    time is the nodes')."""
    warm = {"big": big["warm_fits"][0], "cost_big": cost_big["warm_fits"][0],
            "cost_small": cost_small["warm_fits"][0]}

    def seconds(name, phase):
        p = warm[name]["phase_seconds"]
        return p["tuning"] - p["folds"] if phase == "grid" else p[phase]

    phases = ("tree", "statistics", "folds")
    levels = cost_big["tree_levels"]
    extra_rows = cost_big["rows"] - cost_small["rows"]
    per_row_level = {phase: max(seconds("cost_big", phase) - seconds("cost_small", phase), 0.0)
                     / extra_rows / levels for phase in phases}
    splits = sum(big["splits_per_level"])
    per_split = {phase: max(seconds("big", phase) - per_row_level[phase] * big["rows"]
                            * big["tree_levels"], 0.0) / splits for phase in phases}
    measured = [kd_level_payload(1 if level == 0 else 2 * big["splits_per_level"][level - 1],
                                 big["splits_per_level"][level])
                for level in range(big["tree_levels"])]
    formula_bytes = sum(b for b, _ in measured)
    depth = PROJECTED_DEPTH
    rows_here = TOTAL_ROWS // HOSTS
    projected_splits = 2 ** depth - 1
    level_costs = [kd_level_payload(2 ** level, 2 ** level if level < depth else 0)
                   for level in range(depth + 1)]
    # T0 and, as the estimator's CV grows a KD tree per fold, one T0 per fold at the same depth
    # (full at this size: ~476 rows per leaf of a fold)
    trees = 1 + CV_FOLDS
    tree_bytes = trees * sum(b for b, _ in level_costs)
    collectives = trees * sum(c for _, c in level_costs)
    wire = 2 * tree_bytes / BANDWIDTH
    local = {phase: per_row_level[phase] * rows_here * (depth + 1)
             + per_split[phase] * projected_splits for phase in phases}
    # the λ grid: (leaf, class) pairs per fold (~2 per leaf: 2^20 leaves of ~950 rows) against
    # the measured run's, times the levels; the settings split over the hosts
    pseudo = 2 * 2 ** depth
    measured_pseudo = warm["big"]["phases"]["folds"]["pseudo_points"]
    grid = (seconds("big", "grid") * pseudo / measured_pseudo * (depth + 1)
            / big["tree_levels"] / HOSTS)
    slots = 2 ** (depth + 1) - 1
    weights = seconds("big", "weights") * slots / big["tree_slots"]
    total = sum(local.values()) + wire + collectives * LATENCY + grid + weights
    ns = lambda seconds_: f"{seconds_ * 1e9:,.0f} ns"      # noqa: E731
    us = lambda seconds_: f"{seconds_ * 1e6:,.1f} µs"      # noqa: E731
    return [
        "## Projection: 10⁹ rows over 64 hosts (on paper)", "",
        f"**Measured here**, warm 1-process KD fits. Per row and level of T0 (depth "
        f"{COST_DEPTH} on {cost_big['rows']:,} and {cost_small['rows']:,} rows: the same nodes, "
        f"so the difference is the rows'): growing T0 {ns(per_row_level['tree'])}, node "
        f"statistics {ns(per_row_level['statistics'])}, the folds (each fold's T0 grown on its "
        f"rows, and their statistics) "
        f"{ns(per_row_level['folds'])}. Per split node (the default-depth fit on "
        f"{big['rows']:,} rows, {splits:,} splits, less its rows' share): "
        f"{us(per_split['tree'])}, {us(per_split['statistics'])}, {us(per_split['folds'])}. The "
        f"λ grid took {seconds('big', 'grid'):.1f} s on {measured_pseudo:,} (leaf, class) pairs "
        f"per fold, the weights {seconds('big', 'weights'):.2f} s on {big['tree_slots']:,} slots. "
        f"Collective payload of that T0's growth: "
        f"{warm['big']['phases']['tree']['bytes'] / 2 ** 20:.1f} MiB measured (arrays padded "
        f"to powers of 4) against {formula_bytes / 2 ** 20:.1f} MiB by the per-level formula "
        "below.", "",
        f"**Setting**: {TOTAL_ROWS:,} rows, 8 features, 2 classes, {HOSTS} hosts of "
        f"{rows_here:,} rows, a KD T0 of depth {depth} (`max_depth={depth}`: "
        f"{2 ** depth:,} leaves of ~{TOTAL_ROWS // 2 ** depth:,} rows; the default depth "
        "⌈log2 n⌉ = 30 needs 2³¹ slots, past the layout's limit), λ's tuned. Network assumed: "
        f"{BANDWIDTH / 1e9:.0f} GB/s per host for all-reduce traffic (a ring moves ~2x the "
        f"payload), {LATENCY * 1e3:.0f} ms per all-reduce of {HOSTS} hosts.", "",
        "Per level with m nodes of which s split, each host reduces 8-byte values: m node "
        "counts, 2m class counts; to choose each split node's coordinate (widest spread, the "
        f"estimators' default), a radix select of the 2 quartile ranks in each of the {FEATURES} "
        f"coordinates (2·{FEATURES}·s ranks) and 2·{FEATURES}·s extremes; for its threshold, a "
        "radix select of the 2 middle ranks (2s ranks) and 2s extremes. A radix select of q "
        "ranks takes 8-bit digits in 4 rounds while q·256 ≤ 2¹⁶, then 4-bit in 8 rounds, then "
        "2-bit in 16 rounds: 1024, 128 or 64 counts per rank.", "",
        "| part | scales with | estimate |", "|---|---|---|",
        f"| grow T0, local | rows per host × levels; split nodes | {local['tree']:.0f} s |",
        f"| grow T0 and the {CV_FOLDS} folds' T0s, collectives | nodes per level | "
        f"{tree_bytes / 2 ** 30:.2f} GiB payload: "
        f"{wire:.2f} s on the wire + {collectives} all-reduces × {LATENCY * 1e3:.0f} ms = "
        f"{collectives * LATENCY:.1f} s |",
        f"| node statistics | rows per host × levels; one sum of nodes × classes | "
        f"{local['statistics']:.0f} s |",
        f"| the folds' T0s and statistics | rows per host × levels; sums of folds × nodes × "
        f"classes | "
        f"{local['folds']:.0f} s |",
        f"| λ grid (200 settings) | (leaf, class) pairs × levels × settings / hosts | "
        f"{grid:.0f} s |",
        f"| weights (replicated) | slots | {weights:.1f} s |",
        f"| **total** | | **~{total:.0f} s** |", "",
        "Not counted: reading the rows (0.5 GB of float32 per host), compilation (each host "
        "compiles the same programs once), and each host drawing the fold permutation of all "
        "10⁹ rows (`jaxtree.select.fold_masks`: 8 GB of int64 and ~10 s per host; a counter-based "
        "draw per block would remove it). Growing T0 runs in NumPy on one core per host. The "
        "radix histograms make a level's traffic grow with its nodes, not its rows: at level 19, "
        "2¹⁹ nodes × 2 ranks × 64 counts × 8 bytes ≈ 0.5 GiB, as much as the level's rows per "
        "host (0.5 GB); a deeper T0 would send more than its rows."]


# ---------------------------------------------------------------------------------------------
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m experiments.distributed",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--data")
    parser.add_argument("--out")
    parser.add_argument("--partition", default="kd", choices=["kd", "dyadic", "cart"])
    parser.add_argument("--lam1", type=float)
    parser.add_argument("--lam2", type=float)
    parser.add_argument("--max-depth", type=int)
    parser.add_argument("--bins", type=int, default=256)
    parser.add_argument("--cv-trees", default="auto", choices=["auto", "shared", "per_fold"],
                        help="the estimator's cv_trees: which T0 the CV folds use")
    parser.add_argument("--warm", type=int, default=0,
                        help="fits to repeat after the first, timed apart (no compilation)")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--make-data")
    parser.add_argument("--rows", type=int, default=10 ** 6)
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--rewrite", action="store_true",
                        help="write the report again from results/distributed.json, no fits")
    args = parser.parse_args(argv)
    from jaxtree import launch

    if launch.ENV_PROCESS_ID in os.environ:
        worker(args)
    elif args.make_data:
        make_data(args.make_data, args.rows)
    elif args.rewrite:
        rewrite_report()
    elif args.report:
        with tempfile.TemporaryDirectory() as folder:
            report(args.rows, args.processes, Path(folder))
    else:
        if not (args.data and args.out) or len(args.processes) != 1:
            parser.error("give --processes N (one number), --data and --out (or --report)")
        result = run(args.processes[0], args.data, args.out, args.partition, args.lam1,
                     args.lam2, args.max_depth, args.bins, args.warm, args.timeout,
                     args.cv_trees)
        print(json.dumps({k: v for k, v in result.items() if k != "proba"}))


if __name__ == "__main__":
    main()
