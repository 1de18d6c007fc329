"""Screens of the λ selection on the wide benchmark's splits, none a default.

    python -m experiments.selection_screens choice RUN.json [RUN.json ...]
    python -m experiments.selection_screens mixture [--quick] [--splits FIRST STOP]
    python -m experiments.selection_screens min_split_mixture [--quick] [--splits FIRST STOP]
    python -m experiments.selection_screens fixed [--quick] [--splits FIRST STOP]

``choice``: given the records of several runs of :mod:`experiments.benchmark_suite` that differ
in one setting (each run's ``--out`` JSON), pick on every (problem, split) the run whose
PAC-Bayes tree has the least cross-validation error at its selected λ's (``cv_error``; a tie
goes to the first run given) — the setting tuned by the same CV as the λ's, which is what adding
it to the grid would do — and report the geometric-mean error ratio of the chosen models to the
tuned tree, beside each run's own and the oracle's (the least test error on each split, which
no selection can know).

``mixture``: instead of the one selected setting, the posterior mixture of the grid's settings
whose mean CV accuracy is within a tolerance of the best (or weighted by ``exp`` of the CV
score): the posterior predictive is linear in the node weights ``w(A)`` (the posterior
probability that A is a leaf of the random pruning), so a mixture of the settings' posteriors is
one weight vector, their average, and costs nothing at prediction. Each variant is reported on
the same fits as the default (the first row, which reproduces the default's run).

``min_split_mixture``: the default fitted with ``min_split`` 2, 3, 5 and 10 (each its own CV of
the λ's), and the equal-weight averages of their predictives over several subsets of those
values. A T0 grown with a larger ``min_split`` is a pruning of one grown with a smaller (up to
exact ties between features), so each posterior is one over the prunings of the ``min_split`` 2
tree, and so is their mixture: an average over the prior's size setting instead of a choice.

``fixed``: what the CV's choice of the λ's is worth. On the same fits as the default, the test
error of every setting of the paper's first (log) grid held fixed on every problem, the best of
them in hindsight reported (no tuning at all, its λ's chosen on these very test sets), and the
least test error among the 200 searched settings of each split (an oracle of the selection,
optimistic: it picks among 200 noisy test errors), and the error of the setting chosen by its
error on a random half of the test points, scored on the other half (averaged over 50 halvings):
what a fresh validation sample of 15 % of the data, never seen by the fit, would choose.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from experiments.benchmark_suite import problem_splits, summary

PAC = "PAC-Bayes"


def _pac_by_split(records: list) -> dict:
    return {(r["problem"], r["split"]): r for r in records if r["model"] == PAC}


def _ratio(reference: list, pac_records: list) -> dict:
    """The PAC-Bayes row of :func:`experiments.benchmark_suite.summary` for ``pac_records``
    against the other models' records of ``reference``, on the same (problem, split)s."""
    keys = {(r["problem"], r["split"]) for r in pac_records}
    others = [r for r in reference if r["model"] != PAC and (r["problem"], r["split"]) in keys]
    return summary(others + pac_records)["models"][PAC]


def choice(paths: list[str]) -> None:
    runs = {path: json.load(open(path)) for path in paths}
    reference = runs[paths[0]]
    pac = {path: _pac_by_split(records) for path, records in runs.items()}
    keys = sorted(set.intersection(*(set(by) for by in pac.values())))
    for path in paths:
        print(f"{path}: {_ratio(reference, [pac[path][k] for k in keys])}")
    chosen = [min((pac[path][k] for path in paths), key=lambda r: r["cv_error"]) for k in keys]
    oracle = [min((pac[path][k] for path in paths), key=lambda r: r["error"]) for k in keys]
    print(f"chosen by the least CV error: {_ratio(reference, chosen)}")
    print(f"oracle (least test error): {_ratio(reference, oracle)}")


def _wrong_of_mixture(model, X_test, y_test):
    """``wrong(mixing)``: ``[n_test]`` bool, the test points misclassified by the posterior
    mixture of ``model``'s grid settings (``cv_results_``, both stages) with weights ``mixing``
    ``[settings]`` (a one-hot vector: one setting's posterior)."""
    import jax
    import jax.numpy as jnp

    from jaxtree.pacbayes import pacbayes_log_weights, posterior_predictive
    cv = model.cv_results_
    log_w = np.asarray(jax.vmap(pacbayes_log_weights, in_axes=(None, None, 0, 0))(
        model.tree_, model.stats_, jnp.asarray(cv["param_lam1"], jnp.float32),
        jnp.asarray(cv["param_lam2"], jnp.float32)), np.float64)          # [settings, nodes]

    def wrong(mixing):
        weight = (mixing / mixing.sum()) @ np.exp(log_w)                   # [nodes]
        with np.errstate(divide="ignore"):
            mixed = jnp.asarray(np.log(weight), jnp.float32)
        proba = posterior_predictive(model.tree_, model.node_proba_, mixed, X_test)
        return model.classes_[np.argmax(np.asarray(proba), 1)] != y_test

    return wrong


def _mixture_errors(model, X_test, y_test) -> dict:
    """Test error of the default's predictions and of each mixture of its grid's settings."""
    wrong = _wrong_of_mixture(model, X_test, y_test)
    error = lambda mixing: float(np.mean(wrong(mixing)))                  # noqa: E731
    score = np.asarray(model.cv_results_["mean_test_score"], np.float64)
    best, n = score.max(), model.stats_.total[0]
    return {"default": float(np.mean(model.predict(X_test) != y_test)),
            "tied at the best": error((score >= best - 1e-7).astype(float)),
            "within 0.5 points": error((score >= best - 0.005).astype(float)),
            "within 1 point": error((score >= best - 0.01).astype(float)),
            "within 2 points": error((score >= best - 0.02).astype(float)),
            "exp(n/2 · score)": error(np.exp((score - best) * float(n) / 2))}


FIXED = "fixed "


def _chosen_on_half(wrong: np.ndarray, halvings: int = 50, seed: int = 0) -> float:
    """Mean test error, on the other half, of the setting of least error on a random half of
    the test points (``wrong`` ``[settings, n_test]``; settings tied there averaged), over
    ``halvings`` random halvings: a selection by a fresh validation sample of that size."""
    rng = np.random.default_rng(seed)
    errors = []
    for _ in range(halvings):
        order = rng.permutation(wrong.shape[1])
        chosen_on, scored_on = order[:len(order) // 2], order[len(order) // 2:]
        on_half = wrong[:, chosen_on].mean(axis=1)
        errors.append(wrong[on_half == on_half.min()][:, scored_on].mean())
    return float(np.mean(errors))


def _fixed_settings(X_train, y_train, X_test, y_test) -> dict:
    """Test error of the default, of each setting of the first (log) grid, the least over all
    the searched settings, and that of a setting chosen on half the test points (the ``fixed``
    screen)."""
    import jaxtree
    model = jaxtree.PACBayesTreeClassifier().fit(X_train, y_train)
    wrong_of = _wrong_of_mixture(model, X_test, y_test)
    cv = model.cv_results_
    wrong = np.array([wrong_of(one_hot) for one_hot in np.eye(len(cv["stage"]))])
    fixed = {f"{FIXED}lam1={cv['param_lam1'][i]:.4g}, lam2={cv['param_lam2'][i]:.4g}": e
             for i, e in enumerate(wrong.mean(axis=1)) if cv["stage"][i] == 0}
    return {"default": float(np.mean(model.predict(X_test) != y_test)),
            "least test error among the searched settings": float(wrong.mean(axis=1).min()),
            "chosen on half the test points, scored on the other half": _chosen_on_half(wrong),
            **fixed}


def _mixtures_of_settings(X_train, y_train, X_test, y_test) -> dict:
    import jaxtree
    model = jaxtree.PACBayesTreeClassifier().fit(X_train, y_train)
    return _mixture_errors(model, X_test, y_test)


MIN_SPLITS = (2, 3, 5, 10)
MIN_SPLIT_MIXTURES = ((2, 5), (3, 5), (5, 10), (2, 5, 10), (3, 5, 10), (2, 3, 5, 10))


def _mixtures_over_min_split(X_train, y_train, X_test, y_test) -> dict:
    """Test error of the default at each of :data:`MIN_SPLITS` and of the equal-weight
    averages of their predictives over :data:`MIN_SPLIT_MIXTURES`."""
    import jaxtree
    proba = {m: jaxtree.PACBayesTreeClassifier(min_split=m).fit(X_train, y_train)
             .predict_proba(X_test) for m in MIN_SPLITS}
    classes = np.unique(y_train)
    predictives = {f"min_split {m}": proba[m] for m in MIN_SPLITS}
    predictives.update({"mixture of " + "+".join(map(str, ms)):
                        np.mean([proba[m] for m in ms], axis=0) for ms in MIN_SPLIT_MIXTURES})
    return {k: float(np.mean(classes[np.argmax(p, 1)] != y_test)) for k, p in predictives.items()}


def screen(errors_of, quick: bool, reference_path: str, splits: range,
           shown=lambda variant: True) -> dict:
    """Print ``errors_of(X_train, y_train, X_test, y_test)`` (``{variant: test error}``, those
    that ``shown`` names) on the wide benchmark's ``splits`` of every problem; return each
    variant's ratio to the tuned tree (whose records come from ``reference_path``;
    :func:`experiments.benchmark_suite.summary`'s row)."""
    variants: dict = {}
    for name, split, X, y, train, test in problem_splits(quick, splits.stop):
        if split not in splits:
            continue
        errors = errors_of(X[train], y[train], X[test], y[test])
        print(name, split, {k: round(v, 4) for k, v in errors.items() if shown(k)}, flush=True)
        for variant, e in errors.items():
            variants.setdefault(variant, []).append(
                {"problem": name, "split": split, "model": PAC, "error": e, "n": len(y),
                 "classes": int(y.max()) + 1, "seconds": 0.0})
    reference = json.load(open(reference_path))
    return {variant: _ratio(reference, records) for variant, records in variants.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="screen", required=True)
    sub.add_parser("choice").add_argument("runs", nargs="+", help="benchmark_suite JSON records")
    for name in ("mixture", "min_split_mixture", "fixed"):
        variant = sub.add_parser(name)
        variant.add_argument("--quick", action="store_true")
        variant.add_argument("--splits", type=int, nargs=2, default=None,
                             metavar=("FIRST", "STOP"),
                             help="the splits FIRST..STOP-1 of each problem (default 0 1 2; "
                                  "--quick 0)")
        variant.add_argument("--reference", default="experiments/results/benchmark_suite.json",
                             help="records of the other models (the tuned tree's errors)")
    args = parser.parse_args(argv)
    if args.screen == "choice":
        choice(args.runs)
        return
    first, stop = args.splits or (0, 1 if args.quick else 3)
    errors_of = {"mixture": _mixtures_of_settings, "min_split_mixture": _mixtures_over_min_split,
                 "fixed": _fixed_settings}[args.screen]
    ratios = screen(errors_of, args.quick, args.reference, range(first, stop),
                    shown=lambda variant: not variant.startswith(FIXED))
    if args.screen == "fixed":       # the best three fixed settings, not all hundred
        fixed = sorted((v for v in ratios if v.startswith(FIXED)),
                       key=lambda v: ratios[v]["geo_mean_ratio"])
        ratios = {**{v: r for v, r in ratios.items() if not v.startswith(FIXED)},
                  **{v: ratios[v] for v in fixed[:3]}}
    for variant, ratio in ratios.items():
        print(f"{variant}: {ratio}")


if __name__ == "__main__":
    main()
