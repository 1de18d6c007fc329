"""Benchmark: refits at new training sizes and cross-validation, the default PAC-Bayes estimator
against scikit-learn's tuned tree, both in this process.

    python -m experiments.bench_refit [--dataset crowd] [--partitions kd dyadic cart]
                                      [--cache-check] [--out PATH]

**Refits.** For each partition (KD, dyadic, CART T0 of ``PACBayesTreeClassifier(partition=...)``,
every other parameter at its default: λ's by the paper's 2-fold protocol), one warm-up fit on
3000 rows, then fits on the first ``n`` rows of a fixed shuffle of the dataset for 10 sizes
``n`` from 2000 to 4000 (``linspace``, in a shuffled order). Each of our fits is followed by
scikit-learn's tuned tree on the same rows: ``GridSearchCV(DecisionTreeClassifier(random_state=0),
{"ccp_alpha": {0} ∪ 19 geometric values from 1e-6 to 1e-2}, cv=2, n_jobs=1)`` (the definition of
``experiments/bench_select.py`` and ``experiments/cart_vs_ccp.py``, refitted on the rows, as an
estimator's ``fit`` is). Reported: the median fit time of each and their ratio; our mean (it
counts the fits that compiled); how many of our fits compiled something and for how long.

**Cross-validation.** ``cross_val_score(estimator, X, y, cv=5)`` on scikit-learn's breast-cancer
data (569 × 30, shipped with scikit-learn), the default ``PACBayesTreeClassifier()`` against the
tuned tree above: the first call in this process (it compiles, unless the persistent cache
holds the programs), then a second call on other folds (``KFold(5, shuffle=True)``); in a
fresh process, the first call after one untimed fit on all the rows (the refits' protocol: a
warm-up fit, then the timed work).
``--cache-check`` also runs the first call in two fresh processes sharing an empty persistent
compilation cache (:func:`jaxtree.enable_compilation_cache`): the second process is what a
script or a CI job pays once the cache is warm.

``--profile`` lists instead the compilations of one cold default fit per partition (each in a
fresh process, on 3000 rows, then a refit on 3001): programs and seconds of tracing, lowering and
XLA compilation per jitted function, from JAX's compile log — what a new user pays before the
first result.

Times are wall-clock seconds on whatever else the machine runs: both sides are timed in turn,
so the ratios are what to read.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import pathlib
import platform
import re
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np

import jaxtree
from experiments import datasets
from experiments.cart_vs_ccp import ALPHAS

RESULTS = pathlib.Path(__file__).parent / "results"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
WARM_UP_SIZE = 3000
SIZES = np.linspace(2000, 4000, 10).astype(int)


class CompileMeter:
    """Counts JAX's backend compilations (and their seconds) between :meth:`reset` calls."""

    def __init__(self):
        self.count, self.seconds = 0, 0.0
        jax.monitoring.register_event_duration_secs_listener(self._record)

    def _record(self, event, duration, **_):
        if event == COMPILE_EVENT:
            self.count += 1
            self.seconds += duration

    def reset(self):
        self.count, self.seconds = 0, 0.0


def tuned_tree():
    """scikit-learn's tree with ``ccp_alpha`` chosen by 2-fold ``GridSearchCV`` (module docstring)."""
    from sklearn.model_selection import GridSearchCV
    from sklearn.tree import DecisionTreeClassifier
    return GridSearchCV(DecisionTreeClassifier(random_state=0), {"ccp_alpha": list(ALPHAS)},
                        cv=2, n_jobs=1)


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def refits(X, y, partition, meter):
    """``{"ours": [s], "sklearn": [s], "compiles": [count], "compile_s": [s]}`` over SIZES."""
    out = {"ours": [], "sklearn": [], "compiles": [], "compile_s": [], "sizes": []}
    model = jaxtree.PACBayesTreeClassifier(partition=partition)
    model.fit(X[:WARM_UP_SIZE], y[:WARM_UP_SIZE])
    tuned_tree().fit(X[:WARM_UP_SIZE], y[:WARM_UP_SIZE])
    for n in np.random.default_rng(1).permutation(SIZES):
        meter.reset()
        out["ours"].append(timed(lambda: jaxtree.PACBayesTreeClassifier(
            partition=partition).fit(X[:n], y[:n])))
        out["compiles"].append(meter.count)
        out["compile_s"].append(meter.seconds)
        out["sklearn"].append(timed(lambda: tuned_tree().fit(X[:n], y[:n])))
        out["sizes"].append(int(n))
        print(f"  {partition} n={n}: ours {out['ours'][-1]:.2f} s ({meter.count} compilations, "
              f"{meter.seconds:.2f} s), scikit-learn {out['sklearn'][-1]:.2f} s", flush=True)
    return out


def cross_validation(second=True, warm_up=False):
    """``(ours, sklearn)`` seconds of ``cross_val_score`` (cv=5) on breast cancer: the first
    call, and when ``second`` a second call on shuffled folds. ``warm_up``: one fit of the
    default estimator on all the rows first (not timed), as the refits have."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import KFold, cross_val_score
    X, y = load_breast_cancer(return_X_y=True)
    if warm_up:
        jaxtree.PACBayesTreeClassifier().fit(X, y)
    rows = [(timed(lambda: cross_val_score(jaxtree.PACBayesTreeClassifier(), X, y, cv=5)),
             timed(lambda: cross_val_score(tuned_tree(), X, y, cv=5)))]
    if second:
        folds = KFold(5, shuffle=True, random_state=1)
        rows.append((timed(lambda: cross_val_score(jaxtree.PACBayesTreeClassifier(), X, y,
                                                   cv=folds)),
                     timed(lambda: cross_val_score(tuned_tree(), X, y, cv=folds))))
    return rows


def cached_cross_validation():
    """The first ``cross_val_score`` call in two fresh processes sharing an empty persistent
    cache: ``[(ours, sklearn) of the first process, of the second]``."""
    with tempfile.TemporaryDirectory() as cache:
        setup = f"jaxtree.enable_compilation_cache({cache!r})"
        return [fresh_cross_validation(setup) for _ in range(2)]


def fresh_cross_validation(setup="pass", warm_up=False):
    """``(ours, sklearn)`` of the first ``cross_val_score`` call in a fresh process that runs
    ``setup`` (Python, with jaxtree imported) first; ``warm_up`` as :func:`cross_validation`."""
    code = (f"import json, jaxtree; from experiments import bench_refit; {setup}; "
            f"print(json.dumps(bench_refit.cross_validation(False, {warm_up})[0]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=pathlib.Path(__file__).parent.parent)
    if done.returncode:
        raise RuntimeError(f"the cross-validation process failed:\n{done.stderr}")
    return tuple(json.loads(done.stdout.strip().splitlines()[-1]))


#: JAX's compile log (``jax_log_compiles``): the three stages of a compilation, per function
STAGES = {
    "trace": re.compile(r"Finished tracing (.+) for jit in ([0-9.e-]+) sec"),
    "lower": re.compile(r"Finished jaxpr to MLIR module conversion jit\((.+)\) in ([0-9.e-]+) sec"),
    "compile": re.compile(r"Finished XLA compilation of jit\((.+)\) in ([0-9.e-]+) sec"),
}


def compile_profile(dataset: str, partition: str, n: int = WARM_UP_SIZE) -> dict:
    """``{"fit": s, "refit": s, "functions": {name: {"programs": count, stage: s, ...}}}`` of a
    cold fit on ``n`` rows (its tracing, lowering and XLA compilation per jitted function, from
    JAX's compile log) and of a refit on ``n + 1``; run it in a fresh process."""
    functions = {}

    class Log(logging.Handler):
        def emit(self, record):
            message = record.getMessage()
            for stage, pattern in STAGES.items():
                found = pattern.search(message)
                if found:
                    entry = functions.setdefault(found.group(1), {"programs": 0})
                    entry[stage] = entry.get(stage, 0.0) + float(found.group(2))
                    entry["programs"] += stage == "compile"

    jax.config.update("jax_log_compiles", True)
    logger = logging.getLogger("jax")
    logger.addHandler(Log())
    logger.propagate = False     # keep JAX's compile log out of the terminal
    X, y = datasets.load(dataset)
    order = np.random.default_rng(0).permutation(len(y))
    fit = timed(lambda: jaxtree.PACBayesTreeClassifier(partition=partition).fit(
        X[order[:n]], y[order[:n]]))
    profile = {"fit": fit, "functions": dict(functions)}
    functions.clear()
    profile["refit"] = timed(lambda: jaxtree.PACBayesTreeClassifier(partition=partition).fit(
        X[order[:n + 1]], y[order[:n + 1]]))
    profile["refit_programs"] = sum(entry["programs"] for entry in functions.values())
    return profile


def _stage_seconds(entry) -> float:
    return sum(entry.get(stage, 0.0) for stage in STAGES)


def profile_lines(dataset: str, partitions) -> list:
    """:func:`compile_profile` of each partition in a fresh process, as Markdown lines."""
    lines = [f"## Compilations of a cold default fit ({dataset}, {WARM_UP_SIZE} rows; then a "
             f"refit on {WARM_UP_SIZE + 1})", "",
             "Per jitted function: programs compiled, and seconds spent tracing it to a jaxpr, "
             "lowering it to MLIR and compiling it with XLA (JAX's compile log). JAX's own "
             "small eager programs count too.", ""]
    for partition in partitions:
        code = ("import json; from experiments import bench_refit; print(json.dumps("
                f"bench_refit.compile_profile({dataset!r}, {partition!r})))")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              cwd=pathlib.Path(__file__).parent.parent)
        if done.returncode:
            raise RuntimeError(f"the profiling process failed:\n{done.stderr}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        functions = sorted(result["functions"].items(), key=lambda kv: -_stage_seconds(kv[1]))
        totals = {stage: sum(e.get(stage, 0.0) for _, e in functions) for stage in STAGES}
        lines += [f"**{partition}**: fit {result['fit']:.2f} s, of which tracing "
                  f"{totals['trace']:.2f} s, lowering {totals['lower']:.2f} s and XLA "
                  f"compilation {totals['compile']:.2f} s of "
                  f"{sum(e['programs'] for _, e in functions)} programs; refit "
                  f"{result['refit']:.2f} s ({result['refit_programs']} programs compiled)", "",
                  "| function | programs | trace (s) | lower (s) | compile (s) |",
                  "|---|---|---|---|---|"]
        row = "| {} | {} | {:.2f} | {:.2f} | {:.2f} |"
        big = [(name, e) for name, e in functions if _stage_seconds(e) >= 0.05]
        small = [e for _, e in functions if _stage_seconds(e) < 0.05]
        lines += [row.format(f"`{name}`", e["programs"], *(e.get(s, 0.0) for s in STAGES))
                  for name, e in big]
        lines += [row.format(f"{len(small)} others (each < 0.05 s)",
                             sum(e["programs"] for e in small),
                             *(sum(e.get(s, 0.0) for e in small) for s in STAGES)), ""]
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="crowd", choices=list(datasets.DATASETS))
    parser.add_argument("--partitions", nargs="+", default=["kd", "dyadic", "cart"],
                        choices=["kd", "dyadic", "cart"])
    parser.add_argument("--cache-check", action="store_true",
                        help="also time cross_val_score in two fresh processes sharing a "
                             "persistent compilation cache")
    parser.add_argument("--profile", action="store_true",
                        help="list the compilations of a cold default fit per partition instead")
    parser.add_argument("--out", default=None, help="write the Markdown report to this path")
    args = parser.parse_args(argv)
    command = f"Command: `python -m experiments.bench_refit {' '.join(argv or sys.argv[1:])}`"
    if args.profile:
        lines = profile_lines(args.dataset, args.partitions)
        report = "\n".join(lines[:2] + [command + " (a shared machine: read each function's "
                                        "share of the compile time)", ""] + lines[2:]) + "\n"
        print(report)
        if args.out:
            pathlib.Path(args.out).write_text(report)
        return
    start = time.perf_counter()
    meter = CompileMeter()
    cv_rows = cross_validation()        # first: the process has compiled nothing yet
    X, y = datasets.load(args.dataset)
    order = np.random.default_rng(0).permutation(len(y))
    X, y = X[order], y[order]
    refit_rows = {p: refits(X, y, p, meter) for p in args.partitions}
    warmed = [fresh_cross_validation(warm_up=True)]
    cached = cached_cross_validation() if args.cache_check else []

    lines = ["# Refits and cross-validation against scikit-learn's tuned tree", "",
              command + "  ",
              f"Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}; "
              f"runtime {(time.perf_counter() - start) / 60:.1f} min on {jax.devices()[0]} "
              f"({platform.platform()}), JAX {jax.__version__}; a shared machine: read the "
              "ratios.", "",
              f"## Refits: {args.dataset} ({X.shape[1]} features, {int(y.max()) + 1} classes), "
              f"10 sizes from {SIZES[0]} to {SIZES[-1]} rows after a warm-up fit on "
              f"{WARM_UP_SIZE}", "",
              "| partition | ours, median (s) | scikit-learn, median (s) | ratio of medians "
              "| ours, mean (s) | fits that compiled | compile time, total (s) |",
              "|---|---|---|---|---|---|---|"]
    for partition, r in refit_rows.items():
        ours, theirs = np.median(r["ours"]), np.median(r["sklearn"])
        lines.append(f"| {partition} | {ours:.3f} | {theirs:.3f} | {ours / theirs:.2f} | "
                     f"{np.mean(r['ours']):.3f} | {sum(c > 0 for c in r['compiles'])} of "
                     f"{len(r['compiles'])} | {sum(r['compile_s']):.1f} |")
    lines += ["", "## cross_val_score (cv=5), breast cancer (569 × 30)", "",
              "| call | ours (s) | scikit-learn (s) | ratio |", "|---|---|---|---|"]
    names = ["first call in the process", "second call (other folds)",
             "fresh process, first call after one fit on all 569 rows",
             "fresh process, empty persistent cache", "fresh process, warm persistent cache"]
    for name, (ours, theirs) in zip(names, cv_rows + warmed + cached):
        lines.append(f"| {name} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f} |")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        pathlib.Path(args.out).write_text(report)


if __name__ == "__main__":
    main()
