"""The tuned PAC-Bayes vote on a CART T0 against scikit-learn's CV-tuned ``ccp_alpha`` tree.

    python -m experiments.cart_vs_ccp [--dataset letter] [--splits 5] [--out PATH]

Protocol (docs/theory/protocol.md): per split, a random training set of the dataset's size and 2000 test points.
Ours: ``cart_tree`` grown to purity on the training set (Gini, ties between features broken by
``random_state=0``), the PAC-Bayes λ's by the paper's 2-fold protocol
(:func:`jaxtree.select.paper_search`), the vote refitted on the training set. scikit-learn:
``GridSearchCV(DecisionTreeClassifier(random_state=0), ccp_alpha ∈ {0} ∪ 19 geometric values
from 1e-6 to 1e-2, cv=2)``, the tree refitted with the chosen ``ccp_alpha``. Prints one row per
split and the mean; ``--out`` also writes them as a Markdown table.
"""

import argparse

import jax.numpy as jnp
import numpy as np

from experiments.bench_select import sklearn_cv, test_error
from experiments import datasets
from jaxtree import select
from jaxtree.cart import cart_tree

ALPHAS = np.r_[0.0, np.geomspace(1e-6, 1e-2, 19)]
TEST_SIZE = datasets.TEST_SIZE


def one_split(X, y, num_classes, train, test):
    """``(λ's, our test error, chosen ccp_alpha, scikit-learn's test error)`` on one split."""
    from sklearn.tree import DecisionTreeClassifier
    Xtr, ytr = X[train], y[train]
    tree = cart_tree(Xtr, ytr)
    folds = select.prepare_folds(tree, Xtr, jnp.asarray(ytr), num_classes,
                                 select.fold_masks(len(ytr), 2, seed=0))
    result = select.paper_search(tree, folds, select.pacbayes_votes)
    best = {name: float(value) for name, value in result.best_params.items()}
    ours = test_error(tree, Xtr, ytr, num_classes, best, X[test], y[test])
    search, _ = sklearn_cv(Xtr, ytr, ALPHAS)
    alpha = search.best_params_["ccp_alpha"]
    model = DecisionTreeClassifier(random_state=0, ccp_alpha=alpha).fit(Xtr, ytr)
    return best, ours, alpha, 1 - model.score(X[test], y[test])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="letter")
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--out", help="write the table (Markdown) to this path")
    args = parser.parse_args(argv)
    X, y = datasets.load(args.dataset)
    num_classes = int(y.max()) + 1
    size = datasets.train_size(args.dataset)
    lines = [f"# PAC-Bayes vote on a CART T0 against scikit-learn's CV-tuned ccp_alpha "
             f"({args.dataset}, {size} training / {TEST_SIZE} test points)", "",
             "`python -m experiments.cart_vs_ccp --dataset " + args.dataset
             + f" --splits {args.splits}`", "",
             "| split | λ1 | λ2 | PAC-Bayes test error | ccp_alpha | scikit-learn test error "
             "| difference (points) |", "|---|---|---|---|---|---|---|"]
    errors = []
    for split in range(args.splits):
        order = np.random.default_rng(split).permutation(len(y))
        best, ours, alpha, theirs = one_split(X, y, num_classes, order[:size],
                                              order[size:size + TEST_SIZE])
        errors.append((ours, theirs))
        lines.append(f"| {split} | {best['lam1']:.4g} | {best['lam2']:.4g} | {ours:.4f} | "
                     f"{alpha:.3g} | {theirs:.4f} | {100 * (ours - theirs):+.2f} |")
        print(lines[-1], flush=True)
    ours, theirs = np.mean(errors, axis=0)
    lines.append(f"| mean | | | {ours:.4f} | | {theirs:.4f} | {100 * (ours - theirs):+.2f} |")
    print(lines[-1])
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
