"""Benchmark: the whole fit in JAX (:func:`jaxtree.fit`) against the host pipeline and
scikit-learn, both sides in one process.

    python -m experiments.bench_fit [--sections grow vmap refit cv first forest] [--repeats 3]
                                    [--sizes 10000 100000] [--large] [--out PATH]

Sections (each prints medians and ratios and replaces its part of ``--out``):

* ``grow``: T0 grown by :func:`jaxtree.grow_tree`, jitted and warm, against the NumPy builders at
  10⁴ and 10⁵ rows × 20 features (10⁶ with ``--large``), dyadic / KD / binned CART
  (:mod:`experiments.bench_grow`). Target: ≤ 1× from 10⁵ rows.

* ``vmap``: 64 bootstrap weight vectors (Poisson(1) counts) on 2,000 rows of spam, KD T0 (64
  CART fits at once, with their per-fold trees and bin histograms, need ~33 GB on a CPU):
  ``jax.vmap`` of the jitted fit over the weights, against a loop of 64 calls of the same jitted
  fit and against 64 ``PACBayesTreeClassifier(...).fit(X, y, sample_weight=w)``; the models of
  the batch and of the loop are compared (T0, λ's, log weights), and the CPU seconds of each
  side are reported beside the wall-clock ones (how many cores each kept busy). Target: ≤ 0.5×
  the loop.
* ``refit``: per dataset (spam, wine and a synthetic 5-class set of 10 features), one warm-up
  default fit on 2,000 rows, then default fits at 8 sizes from 2,000 to 3,500 rows (shuffled
  order), each followed by scikit-learn's tuned tree (``GridSearchCV`` over ``ccp_alpha``,
  :func:`experiments.bench_refit.tuned_tree`) on the same rows; the programs compiled per refit
  (target 0) and the median time ratio (target ≤ 1×).
* ``cv``: ``cross_val_score(PACBayesTreeClassifier(), X, y, cv=5)`` on breast cancer, the first
  call of a fresh process (import excluded) against the tuned tree's, medians of ``--repeats``
  processes. Target ≤ 1.5×.
* ``first``: the first default fit of a fresh process on 3,000 rows of spam (import excluded)
  against the tuned tree's first fit in that process, medians of ``--repeats`` processes.
  Target ≤ 5×.
* ``forest``: per dataset (eeg, spam, letter), :class:`jaxtree.PACBayesForestClassifier` (100
  trees, defaults) fitted on 4,000 rows (the first fit of the process at that bucket, compiles)
  and then on 6 sizes from 3,600 to 3,950 rows (the same bucket of
  :func:`jaxtree.shapes.padded`: compiled; medians, one fit is noisy on a shared machine),
  each beside ``RandomForestClassifier(100)`` with ``n_jobs=1`` and 2 on the same rows; ours
  with its default ``n_jobs`` (a thread per core) and, on the compiled sizes, with
  ``n_jobs=1``. Target: the compiled fit ≤ 3× the forest with ``n_jobs=1``.

Times are wall-clock seconds on a shared machine: both sides run in turn, read the ratios.
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import platform
import statistics
import subprocess
import sys
import time

import jax
import numpy as np

import jaxtree
from experiments import bench_grow, datasets
from experiments.bench_refit import CompileMeter, timed, tuned_tree
from jaxtree import fitting

RESULTS = pathlib.Path(__file__).parent / "results"
BOOTSTRAPS = 64
REFIT_SIZES = np.linspace(2000, 3500, 8).astype(int)


def synthetic_five_classes(n=6000):
    """A 5-class problem of 10 features that no experiment here tunes on."""
    from sklearn.datasets import make_classification
    return make_classification(n_samples=n, n_features=10, n_informative=6, n_classes=5,
                               n_clusters_per_class=2, flip_y=0.05, random_state=11)


def shuffled(X, y, seed=0):
    order = np.random.default_rng(seed).permutation(len(y))
    return np.asarray(X, np.float32)[order], np.asarray(y)[order]


# ---------------------------------------------------------------------------------------------
def vmap_section(repeats: int) -> dict:
    X, y = shuffled(*datasets.load("spam"))
    X, y = X[:2000], y[:2000].astype(np.int32)
    weights = np.asarray(jax.random.poisson(jax.random.PRNGKey(0), 1.0, (BOOTSTRAPS, len(y))),
                         np.float32)
    # KD T0: 64 CART fits at once (per-fold trees, bin histograms) need ~33 GB on the CPU
    config = fitting.fit_config(len(y), X.shape[1], num_classes=2, partition="kd")
    # the data are arguments, not constants of the program (XLA would fold their sorts)
    fit = lambda X, y, w: fitting.fit_with_config(X, y, w, None, config)   # noqa: E731
    one = jax.jit(fit)
    batch = jax.jit(jax.vmap(fit, in_axes=(None, None, 0)))
    X, y = jax.device_put(X), jax.device_put(y)
    jax.block_until_ready(one(X, y, weights[0]))
    batched = jax.block_until_ready(batch(X, y, weights))     # warm: both compiled
    looped = [one(X, y, w) for w in weights]
    identical = all(
        np.array_equal(batched.tree.internal[b], looped[b].tree.internal)
        and np.allclose(batched.lam1[b], looped[b].lam1)
        and np.allclose(batched.log_weights[b], looped[b].log_weights, atol=1e-5)
        for b in range(BOOTSTRAPS))
    vmapped = [wall_and_cpu(lambda: jax.block_until_ready(batch(X, y, weights)))
               for _ in range(repeats)]
    loop = [wall_and_cpu(lambda: jax.block_until_ready([one(X, y, w) for w in weights]))
            for _ in range(repeats)]
    X_host, y_host = np.asarray(X), np.asarray(y)
    estimator = [timed(lambda: [jaxtree.PACBayesTreeClassifier(partition="kd").fit(
                                    X_host, y_host, sample_weight=w)
                                for w in weights]) for _ in range(max(1, repeats // 2))]
    return {"vmap_s": float(np.median([w for w, _ in vmapped])),
            "loop_s": float(np.median([w for w, _ in loop])),
            "vmap_cpu_s": float(np.median([c for _, c in vmapped])),
            "loop_cpu_s": float(np.median([c for _, c in loop])),
            "estimators_s": float(np.median(estimator)), "identical": bool(identical)}


def wall_and_cpu(fn) -> tuple[float, float]:
    """``(wall seconds, CPU seconds of this process's threads)`` of ``fn()``: their ratio is
    the number of cores the run kept busy."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def refit_problems():
    spam = datasets.load("spam")
    wine = datasets.load("wine")
    return {"spam": shuffled(*spam), "wine": shuffled(*wine),
            "synthetic-5": shuffled(*synthetic_five_classes())}


def refit_section(partitions) -> dict:
    meter = CompileMeter()
    out = {}
    for name, (X, y) in refit_problems().items():
        for partition in partitions:
            jaxtree.PACBayesTreeClassifier(partition=partition).fit(X[:2000], y[:2000])
            tuned_tree().fit(X[:2000], y[:2000])
            rows = []
            for n in np.random.default_rng(1).permutation(REFIT_SIZES):
                meter.reset()
                ours = timed(lambda: jaxtree.PACBayesTreeClassifier(partition=partition).fit(
                    X[:n], y[:n]))
                compiled = meter.count
                theirs = timed(lambda: tuned_tree().fit(X[:n], y[:n]))
                rows.append((int(n), ours, theirs, compiled))
                print(f"  {name} {partition} n={n}: ours {ours:.2f} s ({compiled} programs "
                      f"compiled), scikit-learn {theirs:.2f} s", flush=True)
            out[f"{name}/{partition}"] = rows
    return out


FOREST_SIZES = (4000, 3900, 3700, 3800, 3600, 3950, 3750)


def forest_section() -> dict:
    from sklearn.ensemble import RandomForestClassifier
    from jaxtree.forest import PACBayesForestClassifier
    out = {}
    for name in ("eeg", "spam", "letter"):
        X, y = shuffled(*datasets.load(name))
        rows = []
        for n in FOREST_SIZES:
            ours = timed(lambda: PACBayesForestClassifier(random_state=0).fit(X[:n], y[:n]))
            one_thread = timed(lambda: PACBayesForestClassifier(random_state=0, n_jobs=1).fit(
                X[:n], y[:n]))          # at the first size: its own programs compile
            rf = [timed(lambda: RandomForestClassifier(100, random_state=0, n_jobs=jobs).fit(
                X[:n], y[:n])) for jobs in (1, 2)]
            rows.append((n, ours, *rf, one_thread))
            print(f"  forest {name} n={n}: ours {ours:.2f} s ({one_thread:.2f} s with 1 thread), "
                  f"random forest {rf[0]:.2f} s (1 job) {rf[1]:.2f} s (2 jobs)", flush=True)
        out[name] = rows
    return out


def fresh_processes(code: str, repeats: int) -> dict:
    """:func:`fresh_process` ``repeats`` times: the median of each timing (a first call's
    compile time varies by ~10 % between processes)."""
    runs = [fresh_process(code) for _ in range(repeats)]
    return {**{key: statistics.median(run[key] for run in runs) for key in runs[0]},
            "processes": repeats}


def fresh_process(code: str) -> dict:
    """Run ``code`` (which prints one JSON line last) in a fresh interpreter at the repo root."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=pathlib.Path(__file__).parent.parent)
    if done.returncode:
        raise RuntimeError(f"the fresh process failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


FIRST_FIT = """
import json, numpy as np, jaxtree
from experiments import datasets, bench_fit
from experiments.bench_refit import timed, tuned_tree
X, y = bench_fit.shuffled(*datasets.load("spam"))
X, y = X[:3000], y[:3000]
ours = timed(lambda: jaxtree.PACBayesTreeClassifier().fit(X, y))
theirs = timed(lambda: tuned_tree().fit(X, y))
print(json.dumps({"ours": ours, "sklearn": theirs}))
"""

FIRST_CV = """
import json, jaxtree
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import cross_val_score
from experiments.bench_refit import timed, tuned_tree
X, y = load_breast_cancer(return_X_y=True)
ours = timed(lambda: cross_val_score(jaxtree.PACBayesTreeClassifier(), X, y, cv=5))
theirs = timed(lambda: cross_val_score(tuned_tree(), X, y, cv=5))
print(json.dumps({"ours": ours, "sklearn": theirs}))
"""


# ---------------------------------------------------------------------------------------------
def section_texts(results: dict) -> dict:
    """``{section: markdown}`` of the measured sections."""
    texts = {}
    if "vmap" in results:
        r = results["vmap"]
        texts["vmap"] = "\n".join([
            "## vmap", "", "64 bootstrap fits (spam, 2,000 rows, KD T0, λ's by the CV grid), "
            f"median of repeats, jax {jax.__version__} on {platform.machine()}:", "",
            "| vmap | loop of jitted fits | 64 estimator fits | vmap / loop | identical |",
            "|---|---|---|---|---|",
            f"| {r['vmap_s']:.2f} s | {r['loop_s']:.2f} s | {r['estimators_s']:.2f} s | "
            f"{r['vmap_s'] / r['loop_s']:.2f}× | {r['identical']} |", "",
            "CPU time of the process's threads (cores kept busy = CPU / wall): vmap "
            f"{r['vmap_cpu_s']:.1f} s ({r['vmap_cpu_s'] / r['vmap_s']:.2f} cores), loop "
            f"{r['loop_cpu_s']:.1f} s ({r['loop_cpu_s'] / r['loop_s']:.2f} cores): "
            f"the batch does {r['vmap_cpu_s'] / r['loop_cpu_s']:.2f}× the loop's work.", ""])
    if "refit" in results:
        lines = ["## refit", "", "Refits at 8 sizes from 2,000 to 3,500 rows after one warm-up "
                 "fit on 2,000 ({}):".format(datetime.date.today()), "",
                 "| dataset / T0 | programs compiled (sum) | median ours | median tuned tree | "
                 "ratio |", "|---|---|---|---|---|"]
        for key, rows in results["refit"].items():
            ours = np.median([r[1] for r in rows])
            theirs = np.median([r[2] for r in rows])
            lines.append(f"| {key} | {sum(r[3] for r in rows)} | {ours:.2f} s | "
                         f"{theirs:.2f} s | {ours / theirs:.2f}× |")
        texts["refit"] = "\n".join(lines + [""])
    if "forest" in results:
        lines = ["## forest", "", "100 trees, defaults; the first fit of the process at 4,000 "
                 "rows, then fits at 6 sizes from 3,600 to 3,950 rows (compiled; medians) "
                 "({}):".format(datetime.date.today()), "",
                 "| dataset | first fit | compiled fits (median) | compiled, `n_jobs=1` | "
                 "random forest 1 job | 2 jobs | compiled / 1 job | compiled / 2 jobs |",
                 "|---|---|---|---|---|---|---|---|"]
        for key, rows in results["forest"].items():
            compiled, one_job, two_jobs, one_thread = (
                np.median([r[c] for r in rows[1:]]) for c in (1, 2, 3, 4))
            lines.append(f"| {key} | {rows[0][1]:.2f} s | {compiled:.2f} s | {one_thread:.2f} s "
                         f"| {one_job:.2f} s | {two_jobs:.2f} s | {compiled / one_job:.2f}× | "
                         f"{compiled / two_jobs:.2f}× |")
        texts["forest"] = "\n".join(lines + [""])
    for name, title in (("cv", "cross_val_score(cv=5) on breast cancer, first call of a "
                               "process"),
                        ("first", "first default fit of a process, 3,000 rows of spam")):
        if name in results:
            r = results[name]
            texts[name] = "\n".join([f"## {name}", "",
                                      f"{title} (medians of {r['processes']} fresh processes):", "",
                                      "| ours | tuned tree | ratio |", "|---|---|---|",
                                      f"| {r['ours']:.2f} s | {r['sklearn']:.2f} s | "
                                      f"{r['ours'] / r['sklearn']:.2f}× |", ""])
    return texts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sections", nargs="+",
                        default=["grow", "vmap", "refit", "cv", "first", "forest"],
                        choices=["grow", "vmap", "refit", "cv", "first", "forest"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--large", action="store_true", help="grow: also 10^6 rows")
    parser.add_argument("--partitions", nargs="+", default=["cart", "kd"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS / "bench_fit.md")
    args = parser.parse_args(argv)
    results = {}
    if "grow" in args.sections:
        sizes = args.sizes + ([1_000_000] if args.large else [])
        bench_grow.write_section(args.out, "grow", bench_grow.grow_section(sizes, args.repeats))
    if "vmap" in args.sections:
        results["vmap"] = vmap_section(args.repeats)
        print(results["vmap"], flush=True)
    if "refit" in args.sections:
        results["refit"] = refit_section(args.partitions)
    for name, code in (("cv", FIRST_CV), ("first", FIRST_FIT)):
        if name in args.sections:
            results[name] = fresh_processes(code, args.repeats)
            print(name, results[name], flush=True)
    if "forest" in args.sections:
        results["forest"] = forest_section()
    for name, text in section_texts(results).items():
        print(text)
        bench_grow.write_section(args.out, name, text)


if __name__ == "__main__":
    main()
