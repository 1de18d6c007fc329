"""Benchmark: the paper's 200-setting 2-fold CV for the PAC-Bayes tree against scikit-learn's
GridSearchCV over 20 ``ccp_alpha`` values (2-fold), on letter (18000 × 16, 26 classes), both in
this process.

    python -m experiments.bench_select [--repeats 3] [--train 18000]

PAC-Bayes: T0 built once on the training set (a KD tree, widest-spread splits, default depth,
complete layout; and a CART tree grown to purity, compact layout); the folds' statistics computed
once; the 100 + 100 settings (log grid, then linear grid) evaluated in batched calls
(:func:`jaxtree.select.paper_search`). Reported: the first call (which compiles), and the median
of ``--repeats`` later calls (T0 and fold statistics included each time); the test error (2000
held-out points) of the vote refitted on the training set with the chosen λ's.
scikit-learn: ``GridSearchCV(DecisionTreeClassifier(), {"ccp_alpha": 20 values}, cv=2)``
over 0 and 19 values from 1e-6 to 1e-2 (geometric), ``refit=False``, n_jobs=1; its test error
is that of the tree refitted with the chosen ``ccp_alpha``. Settings per second = settings /
wall-clock seconds.
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxtree
from jaxtree import select
from jaxtree.cart import cart_tree
from jaxtree.estimators import default_depth
from experiments.example import load_csv


def pacbayes_cv(X, y, num_classes, partition="kd"):
    """The paper's protocol for the PAC-Bayes λ's on a KD or CART T0; returns
    (tree, result, seconds)."""
    start = time.perf_counter()
    if partition == "kd":
        tree = jaxtree.kd_tree(X, max_depth=default_depth("kd", *X.shape), y=y, split="spread")
    else:
        tree = cart_tree(X, y)
    folds = select.prepare_folds(tree, X, jnp.asarray(y), num_classes,
                                 select.fold_masks(len(y), 2, seed=0))
    result = jax.block_until_ready(select.paper_search(tree, folds, select.pacbayes_votes))
    return tree, result, time.perf_counter() - start


def test_error(tree, X, y, num_classes, params, X_test, y_test):
    """Test error of the PAC-Bayes vote on ``tree`` refitted on ``(X, y)`` with ``params``."""
    stats = jaxtree.node_stats(tree, X, jnp.asarray(y), num_classes)
    log_w = jaxtree.pacbayes_log_weights(tree, stats, params["lam1"], params["lam2"])
    scores = jaxtree.vote(tree, stats.label, log_w, X_test, num_classes)
    return float(np.mean(np.argmax(np.asarray(scores), axis=1) != y_test))


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

    rows = {}
    for partition in ("kd", "cart"):
        tree, result, first = pacbayes_cv(Xtr, ytr, labels, partition)
        times = [pacbayes_cv(Xtr, ytr, labels, partition)[2] for _ in range(args.repeats)]
        best = {k: float(v) for k, v in result.best_params.items()}
        rows[partition] = (result, first, np.median(times), best, tree.num_levels - 1,
                           test_error(tree, Xtr, ytr, labels, best, X[test], y[test]))
    settings = sum(len(e) for e in rows["kd"][0].errors)

    alphas = np.r_[0.0, np.geomspace(1e-6, 1e-2, 19)]
    sk_times = []
    for _ in range(args.sklearn_repeats):
        search, seconds = sklearn_cv(Xtr, ytr, alphas)
        sk_times.append(seconds)
    from sklearn.tree import DecisionTreeClassifier
    alpha = search.best_params_["ccp_alpha"]
    sk_model = DecisionTreeClassifier(random_state=0, ccp_alpha=alpha).fit(Xtr, ytr)
    sk_test = 1 - sk_model.score(X[test], y[test])

    sk_rate = len(alphas) / np.median(sk_times)
    print(f"{'method':<46} {'settings':>8} {'seconds':>8} {'settings/s':>10} {'ratio':>6} "
          f"{'CV error':>8} {'test error':>10}")
    for partition, (result, first, median, best, depth, error) in rows.items():
        name = f"PAC-Bayes, {partition.upper()} T0 (depth {depth})"
        print(f"{name + ', median':<46} {settings:>8} {median:>8.2f} {settings / median:>10.1f} "
              f"{settings / median / sk_rate:>5.1f}x {float(result.best_error):>8.4f} "
              f"{error:>10.4f}")
        print(f"{name + ', first call':<46} {settings:>8} {first:>8.2f} {settings / first:>10.1f} "
              f"{settings / first / sk_rate:>5.1f}x")
    print(f"{'scikit-learn GridSearchCV ccp_alpha (CART)':<46} {len(alphas):>8} "
          f"{np.median(sk_times):>8.2f} {sk_rate:>10.2f} {1:>5.1f}x "
          f"{1 - search.best_score_:>8.4f} {sk_test:>10.4f}")
    print("ratio = settings/s against scikit-learn's; 'first call' includes compilation. "
          "Chosen: " + "; ".join(f"{p.upper()} λ1={r[3]['lam1']:.4g}, λ2={r[3]['lam2']:.4g}"
                                 for p, r in rows.items())
          + f"; scikit-learn ccp_alpha={alpha:.3g}")


if __name__ == "__main__":
    main()
