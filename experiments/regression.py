"""The regressors against scikit-learn's tuned regression tree and hierarchical shrinkage.

    python -m experiments.regression [--splits 5] [--kd] [--out experiments/results/regression.md]

Problems (all bundled or generated, no network): scikit-learn's diabetes; ``make_friedman1/2/3``;
the wine quality scores of the bundled wine data (quality as a number, 2000 rows drawn per
split); ``make_sparse_uncorrelated``; ``make_regression`` (a linear target); a piecewise-constant
target (a step in two of five coordinates); a smooth product ``sin(3·x0)·cos(2·x1)``; an
interaction ``x0·x1``. Each split draws 30 % of the rows as the test set (seeded by the split
number); every method fits on the rest.

Methods: ``PACBayesTreeRegressor()`` and ``PrunedTreeRegressor()`` with their defaults (CART T0
grown per fold, λ by the paper's 2-fold protocol on squared error); scikit-learn's
``DecisionTreeRegressor(random_state=0)`` with ``ccp_alpha`` chosen by ``GridSearchCV`` (5-fold,
squared error) over 0 and 24 values of its training set's pruning path (quantiles of the path's
alphas); imodels' ``HSTreeRegressorCV()`` (its defaults: a 20-leaf CART tree, the shrinkage λ by
CV). Reported: test MSE per problem (mean over splits), the ratio of each method's MSE to the
tuned tree's, their geometric mean over problems (each problem's ratio the geometric mean over
its splits) and the number of problems where a method is at or below the tuned tree.

``--kd`` (``experiments/results/regression_kd.md``): the PAC-Bayes regressor on a KD T0
(``PACBayesTreeRegressor(partition="kd")``), its CV on KD trees grown per fold (the default) and
on one KD tree of all the points shared by the folds (``cv_trees="shared"``), beside the tuned
tree (docs/theory/selection.md, "One tree per fold").
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

PROBLEMS = ("diabetes", "friedman1", "friedman2", "friedman3", "wine_quality",
            "sparse_uncorrelated", "linear", "steps", "smooth", "interaction")


def load_problem(name: str, seed: int):
    """``(X, y)`` of a problem (generated ones with ``seed``)."""
    from sklearn import datasets as sk
    rng = np.random.default_rng(seed)
    if name == "diabetes":
        return sk.load_diabetes(return_X_y=True)
    if name == "friedman1":
        return sk.make_friedman1(1000, noise=1.0, random_state=seed)
    if name == "friedman2":
        return sk.make_friedman2(1000, noise=100.0, random_state=seed)
    if name == "friedman3":
        return sk.make_friedman3(1000, noise=0.1, random_state=seed)
    if name == "wine_quality":
        from experiments import datasets
        X, y = datasets.load("wine")
        rows = rng.choice(len(y), 2000, replace=False)
        return X[rows].astype(np.float64), y[rows].astype(np.float64)
    if name == "sparse_uncorrelated":
        return sk.make_sparse_uncorrelated(1000, n_features=8, random_state=seed)
    if name == "linear":
        return sk.make_regression(1000, n_features=8, n_informative=4, noise=20.0,
                                  random_state=seed)
    X = rng.uniform(-1, 1, size=(1000, 5))
    if name == "steps":
        signal = 2.0 * (X[:, 0] > 0.2) + 1.0 * (X[:, 1] > -0.4) - 1.5 * (X[:, 0] < -0.5)
    elif name == "smooth":
        signal = np.sin(3 * X[:, 0]) * np.cos(2 * X[:, 1])
    elif name == "interaction":
        signal = X[:, 0] * X[:, 1] * 4
    else:
        raise ValueError(f"unknown problem {name!r}; one of {PROBLEMS}")
    return X, signal + 0.5 * rng.normal(size=len(signal))


def tuned_sklearn_tree(X, y):
    """``DecisionTreeRegressor`` with ``ccp_alpha`` by 5-fold ``GridSearchCV``."""
    from sklearn.model_selection import GridSearchCV
    from sklearn.tree import DecisionTreeRegressor
    path = DecisionTreeRegressor(random_state=0).cost_complexity_pruning_path(X, y)
    alphas = np.unique(np.r_[0.0, np.quantile(path.ccp_alphas, np.linspace(0, 1, 24))])
    search = GridSearchCV(DecisionTreeRegressor(random_state=0), {"ccp_alpha": alphas}, cv=5,
                          scoring="neg_mean_squared_error")
    return search.fit(X, y)


def methods(kd: bool = False):
    """``{name: a function fitting a fresh model on (X, y)}`` (``kd``: the ``--kd`` set)."""
    import jaxtree

    if kd:
        return {"pacbayes_kd": lambda X, y: jaxtree.PACBayesTreeRegressor(partition="kd").fit(X, y),
                "pacbayes_kd_shared": lambda X, y: jaxtree.PACBayesTreeRegressor(
                    partition="kd", cv_trees="shared").fit(X, y),
                "sklearn_ccp": tuned_sklearn_tree}
    from imodels import HSTreeRegressorCV

    def hs(X, y):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return HSTreeRegressorCV().fit(X, y)

    return {"pacbayes": lambda X, y: jaxtree.PACBayesTreeRegressor().fit(X, y),
            "pruned_c1": lambda X, y: jaxtree.PrunedTreeRegressor().fit(X, y),
            "sklearn_ccp": tuned_sklearn_tree,
            "hs_cv": hs}


def run(splits: int, kd: bool = False):
    """``{problem: {method: [MSE per split]}}`` and the seconds each method took in all."""
    from sklearn.model_selection import train_test_split
    fits = methods(kd)
    mse = {p: {m: [] for m in fits} for p in PROBLEMS}
    seconds = dict.fromkeys(fits, 0.0)
    for problem in PROBLEMS:
        for split in range(splits):
            X, y = load_problem(problem, split)
            X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3,
                                                                random_state=split)
            for name, fit in fits.items():
                start = time.perf_counter()
                model = fit(X_train, y_train)
                prediction = model.predict(X_test)
                seconds[name] += time.perf_counter() - start
                mse[problem][name].append(float(np.mean((prediction - y_test) ** 2)))
            print(problem, split, {m: round(v[-1], 4) for m, v in mse[problem].items()},
                  flush=True)
    return mse, seconds


def summary(mse, reference="sklearn_ccp"):
    """``(ratios {method: {problem: geo-mean ratio over splits}}, geo-mean over problems,
    problems at or below the reference)``."""
    names = list(next(iter(mse.values())))
    ratios = {m: {p: float(np.exp(np.mean(np.log(np.divide(mse[p][m], mse[p][reference])))))
                  for p in mse} for m in names}
    geo = {m: float(np.exp(np.mean(np.log(list(ratios[m].values()))))) for m in names}
    wins = {m: sum(r <= 1.0 for r in ratios[m].values()) for m in names}
    return ratios, geo, wins


def markdown(mse, seconds, splits, command) -> str:
    ratios, geo, wins = summary(mse)
    names = list(seconds)
    title = "# Regression: test MSE against scikit-learn's tuned tree" + (
        " and hierarchical shrinkage" if "hs_cv" in names else "")
    lines = [title, "",
             f"`{command}` "
             "(protocol in the module docstring of `experiments/regression.py`).",
             f"{len(mse)} problems × {splits} random 70/30 splits. Columns: the mean test MSE "
             "over the splits, and in brackets the ratio to `sklearn_ccp` (the geometric mean of "
             "the per-split ratios).",
             "",
             "| problem | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(names)]
    for problem in mse:
        cells = [f"{np.mean(mse[problem][m]):.4g} ({ratios[m][problem]:.3f})" for m in names]
        lines.append(f"| {problem} | " + " | ".join(cells) + " |")
    lines += ["",
              "| | " + " | ".join(names) + " |",
              "|---|" + "---|" * len(names),
              "| geometric-mean MSE ratio to sklearn_ccp | "
              + " | ".join(f"{geo[m]:.3f}" for m in names) + " |",
              f"| problems at or below sklearn_ccp (of {len(mse)}) | "
              + " | ".join(str(wins[m]) for m in names) + " |",
              "| fit + predict seconds, all splits | "
              + " | ".join(f"{seconds[m]:.0f}" for m in names) + " |",
              ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--kd", action="store_true",
                        help="the PAC-Bayes regressor on a KD T0, CV trees per fold and shared")
    parser.add_argument("--out", default=None,
                        help="default experiments/results/regression.md (regression_kd.md with "
                             "--kd)")
    args = parser.parse_args()
    out = args.out or ("experiments/results/regression_kd.md" if args.kd
                       else "experiments/results/regression.md")
    mse, seconds = run(args.splits, args.kd)
    command = f"python -m experiments.regression --splits {args.splits}" + (
        " --kd" if args.kd else "")
    text = markdown(mse, seconds, args.splits, command)
    print(text)
    with open(out, "w") as file:
        file.write(text)


if __name__ == "__main__":
    main()
