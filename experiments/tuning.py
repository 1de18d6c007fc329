"""Grid search against gradient tuning of the PAC-Bayes λ's on the seven datasets (KD tree).

    python -m experiments.tuning [--seed 0] [--steps 60] [--out experiments/results/tuning.md]

For each dataset, one random split (``--seed``): 2000 test points and the paper's training size
(docs/theory/protocol.md; crowd has 10545 rows, so 8545). T0: KD tree, widest-spread splits, default depth,
built on the training set. Both methods use the same 2-fold CV folds:

* **grid**: the paper's protocol (:func:`jaxtree.select.paper_search`): 100 + 100 settings;
* **gradient**: Adam on the smoothed validation loss from λ1 = λ2 = 1
  (:func:`jaxtree.select.gradient_tune`, default schedule and early stopping);
* **grid → gradient**: the same, started from the grid's choice.

"Validation error" is the 2-fold CV error of the chosen λ's; "test error" is that of the model
refitted on the whole training set with them. "Evaluations" counts loss evaluations, each one
setting on both folds (a gradient step is a forward and a backward pass). To share one
compilation, the datasets are padded to one shape (:func:`jaxtree.select.stack_problems`):
padding rows have weight 0, so every number equals an unpadded run's.
"""

import argparse
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxtree
from jaxtree import select, shapes
from jaxtree.estimators import default_depth
from experiments.example import load_csv

TRAIN_SIZES = {"spam": 2601, "eeg": 12980, "epileptic": 9500, "crowd": 8546, "wine": 4497,
               "digit": 3620, "letter": 18000}
TEST_SIZE = 2000
RESULTS = pathlib.Path(__file__).parent / "results"


def split(name, seed):
    """``(X_train, y_train, X_test, y_test)`` with labels encoded 0..L-1."""
    X, y = load_csv(name)
    y = np.unique(y, return_inverse=True)[1]
    order = np.random.default_rng(seed).permutation(len(y))
    test = order[:TEST_SIZE]
    train = order[TEST_SIZE:TEST_SIZE + TRAIN_SIZES[name]]
    return X[train], y[train], X[test], y[test]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--datasets", nargs="*", default=list(TRAIN_SIZES))
    parser.add_argument("--out", default=str(RESULTS / "tuning.md"))
    args = parser.parse_args(argv)
    start = time.perf_counter()
    data = {name: split(name, args.seed) for name in args.datasets}
    trees = [jaxtree.kd_tree(Xtr, max_depth=default_depth("kd", *Xtr.shape), y=ytr,
                             split="spread") for Xtr, ytr, _, _ in data.values()]
    tree_b, X_b, y_b, w_b = select.stack_problems(
        trees, [d[0] for d in data.values()], [d[1] for d in data.values()])
    num_classes = max(int(d[1].max()) + 1 for d in data.values())
    n, dims = X_b.shape[1], X_b.shape[2]
    masks = [shapes.pad_fold_masks(select.fold_masks(len(d[1]), 2, args.seed), n)
             for d in data.values()]
    valid_size = max(int((~m).sum(axis=1).max()) for m in masks)

    rows, chosen = [], {"grid": [], "gradient": [], "grid → gradient": []}
    for p, name in enumerate(data):
        tree = jax.tree.map(lambda a: a[p], tree_b)
        folds = select.prepare_folds(tree, X_b[p], y_b[p], num_classes, masks[p], w_b[p],
                                     valid_size=valid_size)
        grid = select.paper_search(tree, folds, select.pacbayes_votes)
        grid_best = {k: float(v) for k, v in grid.best_params.items()}
        grad = select.gradient_tune(tree, folds, select.pacbayes_votes,
                                    {"lam1": 1.0, "lam2": 1.0}, steps=args.steps)
        both = select.gradient_tune(tree, folds, select.pacbayes_votes, grid_best,
                                    steps=args.steps)
        results = {"grid": (grid_best, float(grid.best_error),
                            sum(len(e) for e in grid.errors)),
                   "gradient": (grad.best_params, grad.best_error, grad.evaluations),
                   "grid → gradient": (both.best_params, both.best_error, both.evaluations)}
        for method, (params, error, evaluations) in results.items():
            chosen[method].append(params)
            rows.append([name, method, error, None, evaluations, params])
        print(f"{name}: done ({time.perf_counter() - start:.0f} s)", flush=True)

    X_test = jnp.stack([jnp.pad(jnp.asarray(d[2], X_b.dtype), ((0, 0), (0, dims - d[2].shape[1])))
                        for d in data.values()])
    for method, params in chosen.items():
        params_b = {k: jnp.asarray([q[k] for q in params], X_b.dtype) for k in params[0]}
        scores = select.batch_fit_scores(tree_b, X_b, y_b, w_b, params_b, X_test, num_classes,
                                         select.pacbayes_votes)
        for p, d in enumerate(data.values()):
            error = float(np.mean(np.argmax(np.asarray(scores[p]), axis=1) != d[3]))
            next(r for r in rows if r[0] == list(data)[p] and r[1] == method)[3] = error
    report(rows, args, time.perf_counter() - start)


def report(rows, args, seconds):
    lines = ["# Tuning the PAC-Bayes λ's: grid search against gradient tuning", "",
             f"`python -m experiments.tuning --seed {args.seed} --steps {args.steps}` "
             f"(KD tree, split=\"spread\", one split per dataset, 2-fold CV; "
             f"{seconds:.0f} s in all on {jax.devices()[0]}).", "",
             "| dataset | method | validation error | test error | evaluations | λ1 | λ2 |",
             "|---|---|---|---|---|---|---|"]
    for name, method, val, test, evaluations, params in rows:
        lines.append(f"| {name} | {method} | {val:.4f} | {test:.4f} | {evaluations} | "
                     f"{params['lam1']:.4g} | {params['lam2']:.4g} |")
    test = {(r[0], r[1]): r[3] for r in rows}
    names = list(dict.fromkeys(r[0] for r in rows))
    for method in ("gradient", "grid → gradient"):
        close = sum(test[(n, method)] <= test[(n, "grid")] + 0.005 for n in names)
        lines += ["", f"{method}: test error within 0.5 points of the grid's (or better) on "
                      f"{close} of {len(names)} datasets."]
    text = "\n".join(lines) + "\n"
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
