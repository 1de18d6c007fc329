"""Forests on the seven Table 2 datasets: test error, out-of-bag error and out-of-bag bounds.

    python -m experiments.forest                           # 7 datasets, 3 splits
    python -m experiments.forest --datasets spam wine --splits 1 --forests rf
    python -m experiments.forest --mvb /path/to/MajorityVoteBounds   # mvb's own forest beside
    python -m experiments.forest --splits 5 --seeds 3 --forests pacbayes-mixed pacbayes rf et \
        --mvb CHECKOUT

Per dataset and split r (seed ``seed + r``): 2000 test points and ``min(train_size, 4000)``
training points (:func:`experiments.datasets.train_size`, capped to keep the pairwise OOB work
small). Every forest of :data:`FOREST_MAKERS` (100 trees) is fitted on the training set; from its
trees' predictions on their out-of-bag points, :func:`jaxtree.vote_bounds.forest_certificate`
gives the first-order and tandem bounds (δ = 0.05) for uniform weights and for weights that
minimise each bound; the ρ-weighted vote's test error is reported beside every bound (a bound is
*valid on this split* when it is not below it). Fit times are wall-clock seconds with
``n_jobs=1`` and ``n_jobs=2`` (medians over the splits).

``--seeds S`` fits every forest S times on each split, with seeds ``seed + r + 1000 s``
(s = 0 .. S-1; s = 0 is the one-seed protocol's forest), and means go over splits and seeds:
one 100-tree forest's test error moves by 0.1–0.4 points from seed to seed on these datasets
(a standard deviation, for scikit-learn's random forest and jaxtree's alike), as much as the
forests differ, so one seed per split ranks them by chance. Only the first seed's fits are
timed (twice, one per ``n_jobs``); the others are fitted once.

``--mvb PATH`` imports the ``mvb`` package from a checkout of the authors' repository
(``StephanLorenzen/MajorityVoteBounds``, not a dependency of jaxtree) and adds its
RandomForestClassifier (100 trees, ``max_features="sqrt"``, bootstrap, uniform ρ) with its own
PBkl and TND bounds on the same splits.

A forest maker is ``maker(X, y, seed, n_jobs) -> FittedForest``, registered in
:data:`FOREST_MAKERS`: scikit-learn's forests (the default run) and jaxtree's
:class:`jaxtree.forest.PACBayesForestClassifier` (``pacbayes``: default parameters;
``pacbayes-all-features``: ``max_features=None``; ``pacbayes-half-samples``: bootstraps of
``n/2`` draws, ``max_samples=0.5``; ``pacbayes-random``: ``splitter="random"``;
``pacbayes-mixed``: ``splitter="mixed"``), whose ``test err``
and bounds are those of the uniform vote of its trees' labels.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import pathlib
import sys
import time
from typing import Callable, Optional

import numpy as np
from sklearn.ensemble import ExtraTreesClassifier, RandomForestClassifier

from experiments import datasets
from experiments.table2 import git_state, split_indices
from jaxtree.forest import LAMBDA_GRID, PACBayesForestClassifier
from jaxtree.vote_bounds import forest_certificate

RESULTS = pathlib.Path(__file__).parent / "results"
DELTA = 0.05
TREES = 100
MAX_TRAIN = 4000
WEIGHTS = ("uniform", "first_order", "tandem")


@dataclasses.dataclass
class FittedForest:
    """What the experiment reads from a fitted forest.

    tree_predictions: ``X [n, D] -> [m, n]`` int, every tree's predicted labels.
    predict: ``X [n, D] -> [n]`` int, the forest's own ``predict`` (the mean of the trees'
      class probabilities, for scikit-learn's forests and jaxtree's alike): what a user gets.
    oob_mask: ``[m, n_train]`` bool, training point out of bag for tree h (None: no bootstrap).
    oob_error: the forest's own out-of-bag error estimate (None without one).
    settings: how many settings the forest chose among on its OOB data (the bounds are
      computed at δ / settings, a union bound; 1 when the OOB data were not used).
    """

    tree_predictions: Callable[[np.ndarray], np.ndarray]
    predict: Callable[[np.ndarray], np.ndarray]
    oob_mask: Optional[np.ndarray]
    oob_error: Optional[float]
    settings: int = 1


def sklearn_forest(cls, **params) -> Callable:
    """A maker for a scikit-learn forest class (``estimators_samples_`` gives the bootstrap)."""

    def make(X, y, seed, n_jobs):
        bootstrap = params.get("bootstrap", cls is RandomForestClassifier)
        forest = cls(n_estimators=TREES, random_state=seed, n_jobs=n_jobs, oob_score=bootstrap,
                     **params).fit(X, y)
        mask = None
        if bootstrap:
            mask = np.ones((TREES, len(y)), bool)
            for h, sample in enumerate(forest.estimators_samples_):
                mask[h, sample] = False
        predict = lambda Z: np.stack([t.predict(Z) for t in forest.estimators_]).astype(np.int64)
        return FittedForest(predict, forest.predict, mask,
                            1 - forest.oob_score_ if bootstrap else None)

    return make


def pacbayes_forest(**params) -> Callable:
    """A maker for jaxtree's :class:`jaxtree.forest.PACBayesForestClassifier` (``n_jobs``:
    its threads; the forest is the same for any)."""

    def make(X, y, seed, n_jobs):
        forest = PACBayesForestClassifier(n_estimators=TREES, random_state=seed, n_jobs=n_jobs,
                                          **params).fit(X, y)
        return FittedForest(lambda Z: np.asarray(forest.predict_trees(Z), np.int64),
                            forest.predict, forest.oob_mask_, 1 - forest.oob_score_,
                            forest.lambda_settings_)

    return make


#: name -> maker(X, y, seed, n_jobs) -> FittedForest
FOREST_MAKERS = {
    "pacbayes": pacbayes_forest(),
    "pacbayes-all-features": pacbayes_forest(max_features=None),
    "pacbayes-half-samples": pacbayes_forest(max_samples=0.5),
    "pacbayes-random": pacbayes_forest(splitter="random"),
    "pacbayes-mixed": pacbayes_forest(splitter="mixed"),
    "rf": sklearn_forest(RandomForestClassifier),
    "et": sklearn_forest(ExtraTreesClassifier),
    "et-bootstrap": sklearn_forest(ExtraTreesClassifier, bootstrap=True),
}


def vote(predictions, rho, num_classes) -> np.ndarray:
    """The ρ-weighted majority vote ``[n]`` of ``predictions`` ``[m, n]`` (ties: lowest label)."""
    scores = np.zeros((num_classes, predictions.shape[1]))
    for h in range(predictions.shape[0]):
        np.add.at(scores, (predictions[h], np.arange(predictions.shape[1])), rho[h])
    return np.argmax(scores, axis=0)


def run_forest(name, make, X, y, train, test, seed, num_classes, timed=True):
    """One forest on one split: one record with errors, bounds and fit times (``timed``: fitted
    with ``n_jobs=2`` and ``n_jobs=1``, both timed; else once, with 2 jobs, untimed)."""
    times = {1: None, 2: None}
    for n_jobs in (2, 1) if timed else (2,):
        start = time.perf_counter()
        forest = make(X[train], y[train], seed, n_jobs)
        times[n_jobs] = time.perf_counter() - start if timed else None
    test_pred = forest.tree_predictions(X[test])
    record = {"forest": name, "fit_s_jobs1": times[1], "fit_s_jobs2": times[2],
              "test_error": float(np.mean(vote(test_pred, np.full(TREES, 1 / TREES),
                                                num_classes) != y[test])),
              "predict_error": float(np.mean(forest.predict(X[test]) != y[test])),
              "oob_error": forest.oob_error}
    if forest.oob_mask is None:
        return record
    oob_pred = forest.tree_predictions(X[train])
    for weights in WEIGHTS:
        cert = forest_certificate(forest.oob_mask, oob_pred, y[train], DELTA / forest.settings,
                                  weights)
        record[weights] = {
            "first_order": float(cert.first_order), "tandem": float(cert.tandem),
            "gibbs_risk": float(cert.gibbs_risk), "tandem_risk": float(cert.tandem_risk),
            "kl": float(cert.kl), "n_min": int(cert.n_min), "n2_min": int(cert.n2_min),
            "test_error": float(np.mean(vote(test_pred, cert.rho, num_classes) != y[test]))}
    return record


def run_mvb(X, y, train, test, seed, timed=True):
    """mvb's own random forest and bounds (uniform ρ) on the same split (``timed``: keep its
    fit time)."""
    import mvb
    start = time.perf_counter()
    rf = mvb.RandomForestClassifier(TREES, max_features="sqrt", random_state=seed,
                                    sample_mode="bootstrap")
    rf.fit(X[train], y[train])
    fit = time.perf_counter() - start
    _, risk = rf.predict(X[test], y[test])
    bounds, stats = rf.bounds(stats=rf.stats())
    return {"forest": "mvb-rf", "fit_s_jobs1": fit if timed else None,
            "test_error": float(risk),
            "predict_error": float(risk),
            "oob_error": None, "uniform": {
                "first_order": float(bounds["PBkl"]), "tandem": float(bounds["TND"]),
                "gibbs_risk": float(stats["gibbs_risk"]),
                "tandem_risk": float(stats["tandem_risk"]), "kl": 0.0,
                "n_min": int(stats["n_min"]), "n2_min": int(stats["n2_min"]),
                "test_error": float(risk)}}


def bundled_split(name: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(train, test)`` indices of split ``seed`` of bundled dataset ``name`` (``n`` rows):
    :data:`datasets.TEST_SIZE` test points, ``min(train size, MAX_TRAIN)`` training points."""
    return split_indices(n, min(datasets.train_size(name), MAX_TRAIN), datasets.TEST_SIZE, seed)


def run_experiment(names, forests, splits, seed, mvb_path=None, show_progress=True, seeds=1):
    if mvb_path is not None:
        sys.path.insert(0, str(mvb_path))
    records = []
    for name in names:
        X, y = datasets.load(name)
        X = X.astype(np.float64)
        num_classes = int(y.max()) + 1
        n_train = min(datasets.train_size(name), MAX_TRAIN)
        for r in range(splits):
            train, test = bundled_split(name, len(y), seed + r)
            for s in range(seeds):
                forest_seed, timed = seed + r + 1000 * s, s == 0
                runs = [(f, lambda f=f: run_forest(f, FOREST_MAKERS[f], X, y, train, test,
                                                   forest_seed, num_classes, timed))
                        for f in forests]
                if mvb_path is not None:
                    runs.append(("mvb-rf", lambda: run_mvb(X, y, train, test, forest_seed,
                                                           timed)))
                for forest, run in runs:
                    record = dict(run(), dataset=name, split=r, forest_seed=s, n_train=n_train)
                    records.append(record)
                    if show_progress:
                        u = record.get("uniform", {})
                        print(f"{name} split {r} seed {s} {forest}: test "
                              f"{record['test_error']:.4f} "
                              f"FO {u.get('first_order', float('nan')):.3f} "
                              f"TND {u.get('tandem', float('nan')):.3f}", flush=True)
    return records


def _present(values, statistic=np.mean):
    """``statistic`` of the values that are not None (nan if none is)."""
    values = [v for v in values if v is not None]
    return float(statistic(values)) if values else float("nan")


def summarize(records) -> list[dict]:
    """One row per (dataset, forest): means over splits and seeds (times: medians of the timed
    fits)."""
    rows = []
    keys = sorted({(r["dataset"], r["forest"]) for r in records},
                  key=lambda k: (list(datasets.DATASETS).index(k[0]), k[1]))
    for dataset, forest in keys:
        rs = [r for r in records if r["dataset"] == dataset and r["forest"] == forest]
        row = {"dataset": dataset, "forest": forest,
               "splits": len({r["split"] for r in rs}), "fits": len(rs),
               "n_train": rs[0]["n_train"],
               "test_error": _present([r["test_error"] for r in rs]),
               "predict_error": _present([r["predict_error"] for r in rs]),
               "oob_error": _present([r["oob_error"] for r in rs]),
               "fit_s_jobs1": _present([r["fit_s_jobs1"] for r in rs], np.median),
               "fit_s_jobs2": _present([r.get("fit_s_jobs2") for r in rs], np.median)}
        for weights in WEIGHTS:
            if weights in rs[0]:
                for key in rs[0][weights]:
                    row[f"{weights}.{key}"] = _present([r[weights][key] for r in rs])
                row[f"{weights}.valid"] = all(
                    min(r[weights]["first_order"], r[weights]["tandem"]) >=
                    r[weights]["test_error"] for r in rs)
        rows.append(row)
    return rows


def _f(x, digits=3):
    return "—" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{digits}f}"


def markdown(rows, args, records) -> str:
    lines = [
        "# Forests: test error, out-of-bag error and out-of-bag bounds",
        "",
        f"`python -m experiments.forest {' '.join(args)}`".replace(" `", "`"),
        "",
        f"{TREES} trees, δ = {DELTA}, 2000 test points, training sets of min(Table 2 size, "
        f"{MAX_TRAIN}) points; means over the splits and the forest seeds of each split "
        "(`--seeds`; fit times: medians of the first seed's fits, seconds, on a machine "
        "shared with other jobs). FO = first-order bound 2·kl⁻¹ on the Gibbs loss, TND = tandem "
        "bound 4·kl⁻¹ on the tandem loss (Masegosa et al. 2020; `jaxtree.vote_bounds`); "
        "n = min OOB size of a tree, n₂ = of a pair. *opt FO / opt TND*: ρ minimising that bound, "
        "with the test error of that ρ-weighted vote. *predict err*: the forest's `predict` "
        "(mean of the trees' class probabilities); *vote err*: the uniform vote of the trees' "
        "labels, which the bounds certify. `valid`: the better bound is at or above "
        "the vote's test error on every split and seed. jaxtree's forests (`pacbayes*`) chose "
        f"λ among {len(LAMBDA_GRID)} settings by OOB error: their bounds are at "
        f"δ/{len(LAMBDA_GRID)} "
        "(a union bound). `et` is "
        "scikit-learn's ExtraTrees default (no bootstrap, so no OOB data). `mvb-rf`: the "
        "authors' `mvb` package's own random forest and bounds (uniform ρ) on the same "
        "splits, where it was run (`--mvb`).",
        "",
        "| dataset | forest | n | predict err | vote err | OOB err | FO | TND | n / n₂ "
        "| opt FO (test) "
        "| opt TND (test) | valid | fit 1 job | fit 2 jobs |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        has = "uniform.first_order" in r
        opt = lambda w, b: (f"{_f(r[f'{w}.{b}'])} ({_f(r[f'{w}.test_error'])})"
                            if f"{w}.{b}" in r else "—")
        lines.append(
            f"| {r['dataset']} | {r['forest']} | {r['n_train']} | {_f(r['predict_error'], 4)} | "
            f"{_f(r['test_error'], 4)} | "
            f"{_f(r['oob_error'], 4)} | {_f(r.get('uniform.first_order'))} | "
            f"{_f(r.get('uniform.tandem'))} | "
            + (f"{r['uniform.n_min']:.0f} / {r['uniform.n2_min']:.0f}" if has else "—")
            + f" | {opt('first_order', 'first_order')} | {opt('tandem', 'tandem')} | "
            f"{_valid(r) if has else '—'} | {_f(r['fit_s_jobs1'], 2)} | {_f(r['fit_s_jobs2'], 2)} |")
    return "\n".join(lines + [""] + versus(rows, "rf", records)) + "\n"


def split_differences(records, forest, reference, dataset) -> np.ndarray:
    """``[splits]`` the forest's mean predict error over the seeds of each split minus the
    reference's (the splits where both ran)."""
    def per_split(name):
        rs = [r for r in records if r["forest"] == name and r["dataset"] == dataset]
        return {k: np.mean([r["predict_error"] for r in rs if r["split"] == k])
                for k in {r["split"] for r in rs}}
    ours, theirs = per_split(forest), per_split(reference)
    return np.array([ours[k] - theirs[k] for k in sorted(ours.keys() & theirs.keys())])


def versus(rows, reference, records) -> list[str]:
    """Lines comparing each forest's predict error with ``reference``'s on the same datasets:
    the datasets where it is at most the reference's, the geometric mean of the ratios, and per
    dataset the mean difference ± its standard error over the splits (each split's seeds
    averaged first)."""
    errors = {(r["dataset"], r["forest"]): r["predict_error"] for r in rows}
    lines = []
    for forest in sorted({r["forest"] for r in rows} - {reference}):
        pairs = [(e, errors[d, reference]) for (d, f), e in errors.items()
                 if f == forest and (d, reference) in errors]
        if not pairs:
            continue
        wins = sum(e <= ref for e, ref in pairs)
        geo = float(np.exp(np.mean([np.log(max(e, 1e-4) / max(ref, 1e-4)) for e, ref in pairs])))
        spread = []
        for dataset in dict.fromkeys(d for (d, f) in errors if f == forest):
            diff = split_differences(records, forest, reference, dataset)
            if len(diff) > 1:
                spread.append(f"{dataset} {1000 * diff.mean():+.1f} ± "
                              f"{1000 * diff.std(ddof=1) / np.sqrt(len(diff)):.1f}")
        lines.append(f"* `{forest}` against `{reference}` (predict error): at or below on {wins} "
                     f"of {len(pairs)} datasets, geometric-mean ratio {geo:.3f}"
                     + (f"; difference per dataset (thousandths, ± standard error over the "
                        f"splits): {', '.join(spread)}." if spread else "."))
    return lines


def _valid(row) -> str:
    return "yes" if all(row.get(f"{w}.valid", True) for w in WEIGHTS) else "NO"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(datasets.DATASETS))
    parser.add_argument("--forests", nargs="+", default=["rf", "et", "et-bootstrap"],
                        choices=list(FOREST_MAKERS))
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=1,
                        help="forests fitted per split (seeds seed + split + 1000 s)")
    parser.add_argument("--mvb", type=pathlib.Path, default=None,
                        help="checkout of StephanLorenzen/MajorityVoteBounds (holds mvb/)")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS / "forest.md")
    args = parser.parse_args(argv)
    shown = list(sys.argv[1:] if argv is None else argv)
    if args.mvb is not None:   # the results name no path outside the repository
        shown[shown.index("--mvb") + 1] = "CHECKOUT"
    records = []
    for name in args.datasets:   # the files are rewritten after each dataset
        records += run_experiment([name], args.forests, args.splits, args.seed, args.mvb,
                                  seeds=args.seeds)
        rows = summarize(records)
        args.out.write_text(markdown(rows, shown, records))
        args.out.with_suffix(".json").write_text(json.dumps(
            {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
             "git": git_state(), "argv": shown, "records": records, "rows": rows}, indent=1))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
