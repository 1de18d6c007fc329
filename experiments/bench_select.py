"""Benchmark: the paper's 200-setting 2-fold CV for the PAC-Bayes tree against scikit-learn's
GridSearchCV over 20 ``ccp_alpha`` values (2-fold), on letter (18000 × 16, 26 classes), both in
this process.

    python -m experiments.bench_select [--repeats 3] [--train 18000]

PAC-Bayes: T0 (KD tree, widest-spread splits, default depth) built once on the training set; the
folds' statistics computed once; the 100 + 100 settings (log grid, then linear grid) evaluated
in batched calls (:func:`jaxtree.select.paper_search`). Reported: the first call (which compiles),
and the median of ``--repeats`` later calls (T0 and fold statistics included each time).
scikit-learn: ``GridSearchCV(DecisionTreeClassifier(), {"ccp_alpha": 20 values}, cv=2)``
(``refit=False``; n_jobs=1). Settings per second = settings / wall-clock seconds.
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxtree
from jaxtree import select
from jaxtree.estimators import default_depth
from experiments.example import load_csv


def pacbayes_cv(X, y, num_classes):
    """The paper's protocol for the PAC-Bayes λ's; returns (result, seconds)."""
    start = time.perf_counter()
    tree = jaxtree.kd_tree(X, max_depth=default_depth("kd", *X.shape), y=y, split="spread")
    folds = select.prepare_folds(tree, X, jnp.asarray(y), num_classes,
                                 select.fold_masks(len(y), 2, seed=0))
    result = jax.block_until_ready(select.paper_search(tree, folds, select.pacbayes_votes))
    return result, time.perf_counter() - start


def sklearn_cv(X, y, alphas):
    from sklearn.model_selection import GridSearchCV
    from sklearn.tree import DecisionTreeClassifier
    start = time.perf_counter()
    search = GridSearchCV(DecisionTreeClassifier(random_state=0), {"ccp_alpha": list(alphas)},
                          cv=2, n_jobs=1, refit=False).fit(X, y)
    return search, time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train", type=int, default=18000)
    parser.add_argument("--sklearn-repeats", type=int, default=1)
    args = parser.parse_args(argv)
    X, y = load_csv("letter")
    order = np.random.default_rng(0).permutation(len(y))
    train, test = order[:args.train], order[args.train:]
    Xtr, ytr = X[train], y[train]
    labels = int(y.max()) + 1
    print(f"letter: {len(train)} × {X.shape[1]}, {labels} classes; device {jax.devices()[0]}")

    result, first = pacbayes_cv(Xtr, ytr, labels)
    times = [pacbayes_cv(Xtr, ytr, labels)[1] for _ in range(args.repeats)]
    settings = sum(len(e) for e in result.errors)
    best = {k: float(v) for k, v in result.best_params.items()}
    model = jaxtree.PACBayesTreeClassifier(split="spread", **best).fit(Xtr, ytr)
    pac_test = 1 - model.score(X[test], y[test])

    alphas = np.geomspace(1e-5, 1e-2, 20)
    sk_times = []
    for _ in range(args.sklearn_repeats):
        search, seconds = sklearn_cv(Xtr, ytr, alphas)
        sk_times.append(seconds)
    from sklearn.tree import DecisionTreeClassifier
    alpha = search.best_params_["ccp_alpha"]
    sk_model = DecisionTreeClassifier(random_state=0, ccp_alpha=alpha).fit(Xtr, ytr)
    sk_test = 1 - sk_model.score(X[test], y[test])

    pac_rate, pac_rate_first = settings / np.median(times), settings / first
    sk_rate = len(alphas) / np.median(sk_times)
    print(f"{'method':<44} {'settings':>8} {'seconds':>8} {'settings/s':>10} "
          f"{'CV error':>8} {'test error':>10}")
    print(f"{'PAC-Bayes KD, paper protocol (median)':<44} {settings:>8} "
          f"{np.median(times):>8.2f} {pac_rate:>10.1f} {float(result.best_error):>8.4f} "
          f"{pac_test:>10.4f}")
    print(f"{'PAC-Bayes KD, first call (compiles)':<44} {settings:>8} {first:>8.2f} "
          f"{pac_rate_first:>10.1f}")
    print(f"{'scikit-learn GridSearchCV ccp_alpha':<44} {len(alphas):>8} "
          f"{np.median(sk_times):>8.2f} {sk_rate:>10.2f} {1 - search.best_score_:>8.4f} "
          f"{sk_test:>10.4f}")
    print(f"ratio (settings/s, PAC-Bayes / scikit-learn): {pac_rate / sk_rate:.1f}x steady, "
          f"{pac_rate_first / sk_rate:.1f}x including compilation")
    print(f"PAC-Bayes chosen λ1={best['lam1']:.4g}, λ2={best['lam2']:.4g}; "
          f"scikit-learn ccp_alpha={alpha:.3g}; PAC-Bayes times {np.round(times, 2).tolist()}, "
          f"scikit-learn times {np.round(sk_times, 2).tolist()}")


if __name__ == "__main__":
    main()
