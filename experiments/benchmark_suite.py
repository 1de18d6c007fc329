"""The default PAC-Bayes tree against tuned trees on two wide suites of problems.

    python -m experiments.benchmark_suite [--suite tuning|heldout] [--quick] [--splits 3]
                                          [--pac '{"smoothing": 1}'] [--cv-repeats R]

Two suites. The **tuning** suite (below) is where the defaults were chosen: every change of
default was measured on it (``experiments/results/benchmark_suite.md``), so its ratios flatter
them. The **held-out** suite (``--suite heldout``: 37 KEEL datasets, :mod:`experiments.heldout`;
``experiments/results/benchmark_heldout.md``) is only ever used to judge them.

Problems of the tuning suite (:func:`problems`, at least 30): the seven bundled Table 1 datasets
(:mod:`experiments.datasets`, 1500 rows drawn from each), scikit-learn's breast cancer, wine,
iris and digits, and synthetic families of 100–5000 rows: ``make_classification`` with label
noise (``flip_y``), class imbalance (binary 90/10, and two 5-class families with one class near
90 % and the smallest under 1 %: 10 features, and 4 informative ones), several classes, many
uninformative features; moons, circles and blobs. Each problem is split ``--splits`` times
(seed s, 30 % test, stratified unless a class has a single point).

Models, each with its defaults on the training part:

* ``PACBayesTreeClassifier()`` (CART T0, λ's by 2-fold CV; ``--pac`` adds constructor
  arguments, to measure a change of default; ``--rule`` swaps the selection's tie rule,
  ``--leaf-cost C`` the prior's cost of a leaf, ``--leaf-error`` its error term;
  ``--cv-repeats R`` selects the λ's by R repeats of a stratified CV);
* scikit-learn's ``DecisionTreeClassifier(random_state=0)`` tuned by ``GridSearchCV`` (5
  folds) over ``ccp_alpha`` on the tree's own cost-complexity path (at most 30 values, evenly
  spaced along the path): "tuned tree", the reference of every ratio;
* hierarchical shrinkage: imodels' ``HSTreeClassifier`` on a CART tree at the shrinkage
  ``HSTreeClassifierCV`` selects (its grid, 3 folds, log-loss;
  :func:`experiments.calibration.hs_reg_param`, which scores a fold missing a rare class
  instead of failing);
* ``RandomForestClassifier(random_state=0)`` (100 trees), a reference beyond single trees;
* on the imbalanced 5-class families also C1 (``PrunedTreeClassifier()``, KD T0, coordinates
  cycled) and the PAC-Bayes vote on that same T0 (``partition="kd", split="cycle"``), and the
  pair again with the widest-spread split rule.

Reported (``experiments/results/benchmark_suite.md``, records in ``benchmark_suite.json``): per
problem the mean test error over the splits; per model the geometric mean over problems of the
ratio ``(error + 0.005) / (tuned tree's error + 0.005)`` (half a point added on both sides so
that an error-free problem counts as a tie, not as 0 or ∞), with a 95 % bootstrap interval over
the problems (:func:`problems_interval`), and the number of problems where it is at or below
the tuned tree; the PAC-Bayes tree's ratio to HS the same way. ``--quick``: one split and every
other synthetic size.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import sys
import time

import numpy as np

RESULTS = pathlib.Path(__file__).parent / "results"
FLOOR = 0.005                       # added to both errors of a ratio (module docstring)
BUNDLED_ROWS = 1500
IMBALANCED5 = [0.9, 0.05, 0.035, 0.01, 0.005]
# a second 5-class family, on which KD cells learn: with 10 features (4 informative, 2
# clusters per class) a KD tree splits each coordinate about once and C1 on it predicts the
# majority class, so the KD vote's gap to C1 would compare two constant predictors there
IMBALANCED5_LOW_DIMENSION = dict(n_features=4, n_informative=4, n_redundant=0,
                                 n_clusters_per_class=1)
MODEL_FILTER: set = set()          # --models: fit only these


def _classification(n, seed, **options):
    from sklearn.datasets import make_classification
    defaults = dict(n_features=10, n_informative=4, n_redundant=2, flip_y=0.05)
    return make_classification(n_samples=n, random_state=seed, **{**defaults, **options})


def problems(quick: bool = False) -> dict:
    """``{name: loader}``, each loader giving ``(X [n, D] float, y [n] int)``."""
    from sklearn import datasets as sk

    from experiments import datasets

    def bundled(name):
        def load():
            X, y = datasets.load(name)
            rows = np.random.default_rng(0).choice(len(y), min(BUNDLED_ROWS, len(y)),
                                                   replace=False)
            return X[rows], np.unique(y[rows], return_inverse=True)[1]
        return load

    out = {f"{name} ({BUNDLED_ROWS})": bundled(name) for name in datasets.DATASETS}
    out.update({"breast cancer": lambda: sk.load_breast_cancer(return_X_y=True),
                "wine (sklearn)": lambda: sk.load_wine(return_X_y=True),
                "iris": lambda: sk.load_iris(return_X_y=True),
                "digits": lambda: sk.load_digits(return_X_y=True)})
    synthetic = {
        "noisy 10%": [(n, dict(flip_y=0.1)) for n in (100, 300, 1000, 4000)],
        "noisy 30%": [(n, dict(flip_y=0.3)) for n in (300, 2000)],
        "imbalanced 90/10": [(n, dict(weights=[0.9, 0.1])) for n in (300, 2000)],
        "3 classes": [(n, dict(n_classes=3)) for n in (500, 2500)],
        "5 classes imbalanced": [(n, dict(n_classes=5, weights=IMBALANCED5, flip_y=0.01))
                                 for n in (1500, 5000)],
        "5 classes imbalanced, 4 features": [(n, dict(IMBALANCED5_LOW_DIMENSION, n_classes=5,
                                                      weights=IMBALANCED5, flip_y=0.01))
                                             for n in (1500, 5000)],
        "50 features, 5 informative": [(n, dict(n_features=50, n_informative=5))
                                       for n in (200, 1000)],
    }
    for family, sizes in synthetic.items():
        for n, options in sizes[::2] if quick else sizes:
            out[f"{family} ({n})"] = (lambda n=n, o=options: _classification(n, 1, **o))
    shapes = {"moons": lambda n: sk.make_moons(n, noise=0.3, random_state=1),
              "circles": lambda n: sk.make_circles(n, noise=0.15, factor=0.5, random_state=1),
              "blobs": lambda n: sk.make_blobs(n, centers=3, cluster_std=2.5, random_state=1)}
    for family, make in shapes.items():
        for n in (200, 1000, 5000)[::2] if quick else (200, 1000, 5000):
            out[f"{family} ({n})"] = (lambda make=make, n=n: make(n))
    return out


def imbalanced_multiclass(name: str) -> bool:
    return name.startswith("5 classes imbalanced")


def tuned_tree(X, y):
    """scikit-learn's tree tuned by GridSearchCV over its cost-complexity path (docstring)."""
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.tree import DecisionTreeClassifier
    path = DecisionTreeClassifier(random_state=0).cost_complexity_pruning_path(X, y)
    alphas = np.unique(path.ccp_alphas[np.linspace(0, len(path.ccp_alphas) - 2, 30).astype(int)])
    cv = StratifiedKFold(max(2, min(5, int(np.bincount(y).min()))), shuffle=True,
                         random_state=0)
    return GridSearchCV(DecisionTreeClassifier(random_state=0), {"ccp_alpha": list(alphas)},
                        cv=cv, n_jobs=1).fit(X, y)


def hierarchical_shrinkage(X, y):
    from imodels import HSTreeClassifier
    from sklearn.tree import DecisionTreeClassifier

    from experiments.calibration import hs_reg_param
    reg = hs_reg_param(X, y, int(y.max()) + 1)
    return HSTreeClassifier(DecisionTreeClassifier(random_state=0), reg).fit(X, y)


def models(name: str, pac_options: dict) -> dict:
    """``{model: fit(X, y) -> fitted estimator}`` (module docstring)."""
    from sklearn.ensemble import RandomForestClassifier

    import jaxtree
    out = {"PAC-Bayes": lambda X, y: jaxtree.PACBayesTreeClassifier(**pac_options).fit(X, y),
           "tuned tree": tuned_tree, "HS": hierarchical_shrinkage,
           "random forest": lambda X, y: RandomForestClassifier(random_state=0).fit(X, y)}
    if imbalanced_multiclass(name):
        for split in ("cycle", "spread"):
            out[f"C1 (KD, {split})"] = (lambda X, y, s=split: jaxtree.PrunedTreeClassifier(
                split=s).fit(X, y))
            out[f"KD vote ({split})"] = (lambda X, y, s=split: jaxtree.PACBayesTreeClassifier(
                partition="kd", split=s, **pac_options).fit(X, y))
    return out


def _cv_error(fitted) -> dict:
    """``{"cv_error": ...}``: a tuned jaxtree model's validation error at its selected setting
    (the CV's own estimate, to compare settings offline), or ``{}``."""
    model = getattr(fitted, "fitted_tree_", None)
    if model is None or model.search is None:
        return {}
    return {"cv_error": float(model.cv_error)}


def problem_splits(quick: bool, splits: int, keep=lambda name: True, source=problems):
    """Yield ``(problem, split, X, y, train, test)`` for every problem of ``source`` (the
    tuning suite's :func:`problems`, or :func:`experiments.heldout.problems`) that
    ``keep(name)`` keeps: ``X`` float32, ``y`` labels ``0..L-1``, split ``splits`` times (seed
    s, 30 % test, stratified unless a class has a single point)."""
    from sklearn.model_selection import train_test_split
    for name, load in source(quick).items():
        if not keep(name):
            continue
        X, y = load()
        X = np.asarray(X, np.float32)
        y = np.unique(y, return_inverse=True)[1]
        for split in range(splits):
            train, test = train_test_split(np.arange(len(y)), test_size=0.3, random_state=split,
                                           stratify=y if np.bincount(y).min() >= 2 else None)
            yield name, split, X, y, train, test


def run(quick: bool, splits: int, pac_options: dict, only=None, source=problems) -> list[dict]:
    """One record per (problem, split, model): its test error and fit seconds."""
    records = []
    keep = lambda name: not only or any(part in name for part in only)  # noqa: E731
    for name, split, X, y, train, test in problem_splits(quick, splits, keep, source):
        for model, fit in models(name, pac_options).items():
            if MODEL_FILTER and model not in MODEL_FILTER:
                continue
            start = time.perf_counter()
            fitted = fit(X[train], y[train])
            error = float(np.mean(fitted.predict(X[test]) != y[test]))
            records.append({"problem": name, "split": split, "model": model,
                            "error": error, "seconds": time.perf_counter() - start,
                            "n": len(y), "classes": int(y.max()) + 1,
                            **_cv_error(fitted)})
        print(name, split, {r["model"]: round(r["error"], 4) for r in records
                            if r["problem"] == name and r["split"] == split}, flush=True)
    return records


def summary(records: list) -> dict:
    """Per model: geometric-mean error ratio to the tuned tree with its bootstrap interval
    (:func:`problems_interval`), problems at or below it, and the number of problems; the
    PAC-Bayes tree's ratio to HS likewise; and the KD vote's gap to C1 on the imbalanced
    5-class families."""
    errors = {}
    for r in records:
        errors.setdefault(r["problem"], {}).setdefault(r["model"], []).append(r["error"])
    mean = {p: {m: float(np.mean(v)) for m, v in by.items()} for p, by in errors.items()}
    out = {}
    present = {r["model"] for r in records}
    for model in [m for m in ("PAC-Bayes", "HS", "random forest") if m in present]:
        log_ratios = _log_ratios(mean, model, "tuned tree")
        wins = sum(e[model] <= e["tuned tree"] + 1e-12 for e in mean.values())
        out[model] = {"geo_mean_ratio": float(np.exp(np.mean(log_ratios))),
                      "interval": problems_interval(log_ratios),
                      "at_or_below_tree": int(wins), "problems": len(log_ratios)}
    if {"PAC-Bayes", "HS"} <= present:
        log_ratios = _log_ratios(mean, "PAC-Bayes", "HS")
        out["PAC-Bayes / HS"] = {"geo_mean_ratio": float(np.exp(np.mean(log_ratios))),
                                 "interval": problems_interval(log_ratios)}
    rules = ("cycle", "spread")
    gaps = {p: {s: e[f"KD vote ({s})"] - e[f"C1 (KD, {s})"] for s in rules}
            for p, e in mean.items() if imbalanced_multiclass(p)
            and all(f"KD vote ({s})" in e and f"C1 (KD, {s})" in e for s in rules)}
    return {"models": out, "kd_vote_minus_c1": gaps, "mean_errors": mean}


def _log_ratios(mean: dict, model: str, reference: str) -> np.ndarray:
    """Per problem, ``log((error + FLOOR) / (reference's error + FLOOR))`` of mean errors."""
    return np.log(np.array([(e[model] + FLOOR) / (e[reference] + FLOOR)
                            for e in mean.values()]))


def problems_interval(log_ratios, draws: int = 2000, seed: int = 0) -> list:
    """95 % bootstrap interval of the geometric-mean ratio over the problems: the problems
    resampled with replacement ``draws`` times (a fixed seed), the 2.5 and 97.5 percentiles of
    the resampled geometric means. It says how far the ratio could move on another set of
    problems like these; the noise of the splits within a problem is in the per-problem means."""
    log_ratios = np.asarray(log_ratios, np.float64)
    picks = np.random.default_rng(seed).integers(0, len(log_ratios), (draws, len(log_ratios)))
    means = np.exp(log_ratios[picks].mean(axis=1))
    return [float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))]


TITLES = {"tuning": "Benchmark suite: the default PAC-Bayes tree against tuned trees",
          "heldout": "Held-out suite (KEEL, never used to choose a default): the default "
                     "PAC-Bayes tree against tuned trees"}


def report(records: list, command: str, suite: str = "tuning") -> str:
    s = summary(records)
    mean = s["mean_errors"]
    splits = max(r["split"] for r in records) + 1
    minutes = sum(r["seconds"] for r in records) / 60
    protocol = "`experiments/benchmark_suite.py`" + (
        " (problems: `experiments/heldout.py`)" if suite == "heldout" else "")
    lines = [f"# {TITLES[suite]}", "",
             f"`{command}`: {len(mean)} problems × {splits} split(s), {minutes:.0f} min of "
             f"fits on a shared 2-core CPU. Protocol: the docstring of {protocol}. Ratio: "
             f"geometric mean over problems of (error + {FLOOR}) / (tuned tree's error + "
             f"{FLOOR}).", "",
             "| model | geo-mean error ratio to the tuned tree | 95 % interval (problems "
             "resampled) | problems at or below it |",
             "|---|---|---|---|"]
    for model, v in s["models"].items():
        low, high = v["interval"]
        if model == "PAC-Bayes / HS":          # a ratio to HS, not to the tuned tree
            lines.append(f"| {model} (errors over HS's) | {v['geo_mean_ratio']:.3f} | "
                         f"{low:.3f}–{high:.3f} | |")
        else:
            lines.append(f"| {model} | {v['geo_mean_ratio']:.3f} | {low:.3f}–{high:.3f} | "
                         f"{v['at_or_below_tree']} / {v['problems']} |")
    if s["kd_vote_minus_c1"]:
        lines += ["", "Imbalanced 5-class families: KD vote's test error minus C1's on the same "
                  "T0 (points):", ""]
        for problem, gap in s["kd_vote_minus_c1"].items():
            lines.append(f"* {problem}: " + ", ".join(f"{split} {100 * g:+.2f}"
                                                      for split, g in gap.items()))
    models = list(next(iter(mean.values())))[:4]
    lines += ["", "Mean test error per problem:", "",
              "| problem | n | L | " + " | ".join(models) + " |",
              "|---|---|---|" + "---|" * len(models)]
    meta = {r["problem"]: (r["n"], r["classes"]) for r in records}
    for problem, e in mean.items():
        lines.append(f"| {problem} | {meta[problem][0]} | {meta[problem][1]} | "
                     + " | ".join(f"{e[m]:.4f}" for m in models) + " |")
    return "\n".join(lines) + "\n"


def _set_leaf_cost(cost: float) -> None:
    """Every PAC-Bayes weight of this process with the leaf cost ``cost`` instead of 1."""
    from jaxtree import pacbayes
    weights_from_counts = pacbayes._weights_from_counts
    pacbayes._weights_from_counts = (
        lambda tree, stats, error_weight, root_weight, leaf_weight, *rest, **options:
        weights_from_counts(tree, stats, error_weight, root_weight, cost * leaf_weight, *rest,
                            **options))


def _set_leaf_error(kind: str, alpha: float = 0.5) -> None:
    """Every node's ``E_A`` in this process (the PAC-Bayes posterior's error term, and any other
    method's: run it with ``--models PAC-Bayes``) replaced by a likelihood: ``"log_loss"``, the
    leaf's log-loss ``−Σ_l N_{A,l} log p̂_l(A)`` under its frequencies smoothed by ``alpha``;
    ``"marginal"``, minus the log marginal likelihood of its labels under a symmetric
    Dirichlet(``alpha``) prior (Bayesian tree averaging's leaf score)."""
    import jax.numpy as jnp
    from jax.scipy.special import gammaln

    from jaxtree.stats import NodeStats

    def errors(stats):
        counts = stats.counts
        total, classes = counts.sum(axis=1), counts.shape[1]
        if kind == "log_loss":
            proba = (counts + alpha) / (total[:, None] + classes * alpha)
            return -(counts * jnp.log(proba)).sum(axis=1)
        return -(gammaln(classes * alpha) - gammaln(total + classes * alpha)
                 + (gammaln(counts + alpha) - gammaln(alpha)).sum(axis=1))

    NodeStats.errors = property(errors)


def _set_smoothed_rule(radius: int = 1) -> None:
    """Every grid search of this process selects by the interior rule on validation losses
    averaged over the settings within ``radius`` grid steps (Chebyshev) of each setting."""
    from jaxtree import select
    interior_best = select.interior_best

    def smoothed(total, shape):
        coords = np.stack(np.unravel_index(np.arange(int(np.prod(shape))), shape), axis=1)
        near = np.abs(coords[:, None, :] - coords[None, :, :]).max(axis=2) <= radius
        return interior_best((near / near.sum(axis=1, keepdims=True)) @ total, shape)

    select.interior_best = smoothed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--splits", type=int, default=None, help="default 3, 1 with --quick")
    parser.add_argument("--pac", default="{}", help="JSON of PACBayesTreeClassifier arguments")
    parser.add_argument("--only", nargs="*", help="problems whose name contains one of these")
    parser.add_argument("--rule", choices=("interior", "simplest", "smoothed"), default="interior",
                        help="simplest: the selection's former tie-break (first of least loss, "
                             "no refit check); smoothed: the interior rule on the validation "
                             "losses averaged over each setting's neighbours in the grid; for the "
                             "measurements of docs/theory/selection.md")
    parser.add_argument("--models", nargs="*", help="only these models (the tuned tree always)")
    parser.add_argument("--leaf-cost", type=float, default=None,
                        help="the PAC-Bayes prior's cost of a non-empty leaf (the 1 of "
                             "-1[N_A > 0]) in the CV and the final weights, for the screens of "
                             "benchmark_suite.md")
    parser.add_argument("--leaf-error", choices=("log_loss", "marginal"), default=None,
                        help="E_A of every node a likelihood instead of the 0-1 error count "
                             "(log_loss: under the smoothed frequencies; marginal: the "
                             "Dirichlet-multinomial's), for the screens of benchmark_suite.md; "
                             "with --models PAC-Bayes")
    parser.add_argument("--cv-repeats", type=int, default=None,
                        help="the PAC-Bayes tree's λ's by R repeats of its stratified CV "
                             "(cv=RepeatedStratifiedKFold(n_splits=cv, n_repeats=R))")
    parser.add_argument("--suite", choices=("tuning", "heldout"), default="tuning",
                        help="tuning: this module's problems, on which the defaults were "
                             "chosen; heldout: KEEL's datasets (experiments.heldout), on which "
                             "they are only judged")
    parser.add_argument("--out", default=None,
                        help="results file stem (default benchmark_suite, or benchmark_heldout "
                             "with --suite heldout)")
    args = parser.parse_args(argv)
    source = problems
    if args.suite == "heldout":
        from experiments import heldout
        source = heldout.problems
    out = args.out or {"tuning": "benchmark_suite", "heldout": "benchmark_heldout"}[args.suite]
    splits = args.splits or (1 if args.quick else 3)
    if args.rule == "simplest":
        from jaxtree import select
        select.interior_best = lambda total, shape: select.jnp.argmin(total)
        select.MAX_REFIT_UNRESOLVED = 1.0
    if args.rule == "smoothed":
        _set_smoothed_rule()
    if args.leaf_cost is not None:
        _set_leaf_cost(args.leaf_cost)
    if args.leaf_error:
        _set_leaf_error(args.leaf_error)
    if args.models:
        MODEL_FILTER.update(args.models + ["tuned tree"])
    pac_options = json.loads(args.pac)
    if args.cv_repeats:
        from sklearn.model_selection import RepeatedStratifiedKFold
        pac_options["cv"] = RepeatedStratifiedKFold(n_splits=pac_options.get("cv", 2),
                                                    n_repeats=args.cv_repeats, random_state=0)
    records = run(args.quick, splits, pac_options, args.only, source)
    # the arguments as given (quoted for a shell), so the report says how to reproduce it
    command = " ".join(["python -m experiments.benchmark_suite",
                        shlex.join(sys.argv[1:] if argv is None else argv)]).rstrip()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{out}.json").write_text(json.dumps(records, indent=1))
    text = report(records, command, args.suite)
    (RESULTS / f"{out}.md").write_text(text)
    print(text)
    print(json.dumps(summary(records)["models"]))


if __name__ == "__main__":
    main()
