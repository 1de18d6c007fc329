"""How good are the probabilities? Log-loss, Brier score, ROC AUC and calibration of every model.

    python -m experiments.calibration                          # 7 datasets, 5 splits
    python -m experiments.calibration --datasets spam --splits 1 --out /tmp/calibration
    python -m experiments.calibration --merge a.json b.json    # one report of several runs

Writes ``<out>.md`` (the tables, how they were made, the targets checked), ``<out>.json`` (every
split's metrics, the selected parameters and the reliability bins) and
``<out>_<dataset>.png`` (reliability diagrams of :data:`DIAGRAMS`); default
``experiments/results/calibration``. Splits run split-major (split 0 of every dataset first) and
the outputs are rewritten after each, so an interrupted run reports whole splits.

Protocol, per dataset and split ``s`` (seed ``s``): the split of :mod:`experiments.table2` (2000
test points, the paper's training size). On the training set:

* **PAC-Bayes on the paper's trees** (KD and dyadic T0 as in Table 2,
  :func:`experiments.table2.build_tree`; one T0 for both CV folds, the paper's protocol):
  ``hard``, the paper's vote of hard node labels with λ1, λ2 selected by 2-fold CV accuracy
  (:func:`jaxtree.select.paper_search`); ``pred (λ of hard)`` and ``pred α=1 (λ of hard)``, the
  posterior predictive with Krichevsky–Trofimov (α = ½) or Laplace (α = 1) smoothing at the
  same λ's, so only the votes change.
* **jaxtree's estimators on a CART T0**, fitted as a user fits them (T0 grown to purity on each
  CV fold's training part for the selection, then on all the training points): ``cart PAC-Bayes
  pred`` is ``PACBayesTreeClassifier()`` (the defaults: posterior predictive, α = ½, λ's by CV
  accuracy of its argmax); ``hard (λ of pred)`` the same fitted model with ``proba="majority"``;
  ``pred α=1`` is ``PACBayesTreeClassifier(smoothing=1)``; ``pred-ll`` is
  ``PACBayesTreeClassifier(scoring="neg_log_loss")`` (λ's by CV log-loss). ``C1``:
  ``PrunedTreeClassifier(method="c1", partition="cart")`` (λ tuned by CV), its pruning leaf's
  hard label (``hard``) or smoothed frequencies (``pred``); ``HS-vote``:
  ``HSVoteClassifier(partition="cart")`` (binary data only).
* **scikit-learn**: ``DecisionTreeClassifier(random_state=0)`` with ``ccp_alpha`` by
  ``GridSearchCV`` (cv=2) over {0} ∪ 19 geometric values from 1e-6 to 1e-2, as in
  :mod:`experiments.cart_vs_ccp`; its ``predict_proba`` (the leaf's class frequencies).
* **hierarchical shrinkage**: ``imodels.HSTreeClassifier`` (Agarwal et al. 2022) on
  ``DecisionTreeClassifier(random_state=0)`` grown to purity, its shrinkage chosen as
  ``imodels.HSTreeClassifierCV`` does (its default grid, 3 unshuffled folds, log-loss;
  :func:`hs_reg_param`, which places each fold's columns by label so that a fold missing a
  class is scored).

Metrics on the test points: log-loss (scikit-learn's ``log_loss``, which clips probabilities to
the float dtype's eps), Brier score (the sum over classes of ``(p_l − 1[y = l])²``, halved for two
classes as scikit-learn's ``brier_score_loss`` does), ROC AUC (binary; for multiclass the mean of
the one-vs-rest AUCs over the classes present in the test set), expected calibration error (top
label, 15 equal-width confidence bins) and the test error of the argmax. Columns of a class
absent from a training set get probability 0 (as scikit-learn's trees give it).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import pathlib
import platform
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import datasets
from experiments.table2 import build_tree, split_indices
from jaxtree import HSVoteClassifier, PACBayesTreeClassifier, PrunedTreeClassifier
from jaxtree.select import (PACBAYES_DIRECTIONS, fold_masks, pacbayes_votes, paper_search,
                            point_scores, prepare_folds)
from jaxtree.stats import node_stats
from jaxtree.tree import route

RESULTS = pathlib.Path(__file__).parent / "results"
ALPHAS = np.r_[0.0, np.geomspace(1e-6, 1e-2, 19)]   # experiments.cart_vs_ccp's ccp_alpha grid
ECE_BINS = 15
#: imodels.HSTreeClassifierCV's default shrinkage grid.
HS_REG_PARAMS = np.array([0, 0.1, 1, 10, 50, 100, 500], dtype=float)
#: Datasets whose reliability diagrams are drawn, and the models drawn.
DIAGRAMS = ("spam", "letter")
DIAGRAM_MODELS = ("cart PAC-Bayes hard (λ of pred)", "cart PAC-Bayes pred",
                  "cart PAC-Bayes pred-ll", "scikit-learn ccp", "HS (imodels)")
KT, LAPLACE = 0.5, 1.0


# ---------------------------------------------------------------------------------------------
# Metrics
def metrics(y: np.ndarray, proba: np.ndarray) -> dict:
    """Test metrics of ``proba`` ``[m, L]`` (rows summing to 1) against labels ``y`` ``[m]``."""
    from sklearn.metrics import log_loss, roc_auc_score
    num_classes = proba.shape[1]
    proba = np.asarray(proba, np.float64)
    onehot = np.eye(num_classes)[y]
    brier = np.sum((proba - onehot) ** 2, axis=1) * (0.5 if num_classes == 2 else 1.0)
    if num_classes == 2:
        auc = roc_auc_score(y, proba[:, 1])
    else:
        present = [c for c in range(num_classes) if 0 < np.sum(y == c) < len(y)]
        auc = float(np.mean([roc_auc_score(y == c, proba[:, c]) for c in present]))
    return {"log_loss": float(log_loss(y, proba, labels=np.arange(num_classes))),
            "brier": float(brier.mean()), "auc": float(auc),
            "ece": expected_calibration_error(y, proba),
            "error": float(np.mean(np.argmax(proba, axis=1) != y)),
            "extreme": float(np.mean((proba.max(axis=1) >= 1 - 1e-6)))}


def reliability_bins(y: np.ndarray, proba: np.ndarray, bins: int = ECE_BINS) -> dict:
    """Top-label reliability: per equal-width confidence bin, the number of points, the summed
    confidence and the number predicted correctly (lists of ``bins`` numbers)."""
    confidence = proba.max(axis=1)
    correct = np.argmax(proba, axis=1) == y
    index = np.clip((confidence * bins).astype(int), 0, bins - 1)
    return {"count": np.bincount(index, minlength=bins).tolist(),
            "confidence": np.bincount(index, confidence, minlength=bins).tolist(),
            "correct": np.bincount(index, correct, minlength=bins).tolist()}


def expected_calibration_error(y: np.ndarray, proba: np.ndarray, bins: int = ECE_BINS) -> float:
    """``Σ_b (n_b / n)·|accuracy_b − confidence_b|`` over equal-width bins of the top-label
    confidence."""
    table = {k: np.asarray(v) for k, v in reliability_bins(y, proba, bins).items()}
    return float(np.abs(table["correct"] - table["confidence"]).sum() / len(y))


def full_columns(proba: np.ndarray, classes: np.ndarray, num_classes: int) -> np.ndarray:
    """``[m, num_classes]`` from a scikit-learn ``predict_proba`` over its ``classes_``."""
    out = np.zeros((proba.shape[0], num_classes))
    out[:, np.asarray(classes, int)] = proba
    return out


# ---------------------------------------------------------------------------------------------
# Models
def test_proba(votes, path, on_path, num_classes) -> np.ndarray:
    """``[m, L]`` scores of node ``votes`` at the routed test points, normalised to sum to 1."""
    scores = np.asarray(point_scores(votes, path, on_path, num_classes), np.float64)
    return scores / scores.sum(axis=1, keepdims=True)


def label_blind_models(tree, X_train, y_train, X_test, num_classes, seed):
    """``{model: (proba [m, L], params)}`` of the PAC-Bayes vote on a KD or dyadic ``tree``
    (one T0 for all folds, as in Table 2): the hard vote, λ's selected by accuracy, and the
    posterior predictive at the same λ's (only the votes change)."""
    folds = prepare_folds(tree, X_train, y_train, num_classes,
                          jnp.asarray(fold_masks(len(y_train), 2, seed)))
    stats = node_stats(tree, X_train, y_train, num_classes)
    path, on_path = route(tree, X_test)
    result = paper_search(tree, folds, pacbayes_votes, PACBAYES_DIRECTIONS)
    hard = {k: float(v) for k, v in result.best_params.items()}

    def proba(params):
        votes = pacbayes_votes(tree, stats, params)
        return test_proba(votes, path, on_path, num_classes)

    out = {"PAC-Bayes hard": (proba(hard), hard)}
    for label, smoothing in (("", KT), (" α=1", LAPLACE)):
        out[f"PAC-Bayes pred{label} (λ of hard)"] = (proba({**hard, "smoothing": smoothing}),
                                                      hard)
    return out


def cart_models(X_train, y_train, X_test, num_classes):
    """``{model: (proba [m, L], params)}`` of jaxtree's estimators on a CART T0, as a user
    fits them (module docstring): T0 grown on each CV fold's training part, refitted on all."""
    def fitted(model):
        model.fit(X_train, y_train)
        params = {k: float(v) for k, v in getattr(model, "best_params_", {}).items()}
        return model, params

    def proba(model):
        return full_columns(model.predict_proba(X_test), model.classes_, num_classes)

    def majority(model):
        hard = copy.copy(model)
        hard.proba = "majority"      # the paper's vote of hard labels, at the same parameters
        return proba(hard)

    out = {}
    for label, options in (("pred", {}), ("pred α=1", {"smoothing": LAPLACE}),
                           ("pred-ll", {"scoring": "neg_log_loss"})):
        model, params = fitted(PACBayesTreeClassifier(**options))
        out[f"PAC-Bayes {label}"] = (proba(model), params)
        if label == "pred":
            out["PAC-Bayes hard (λ of pred)"] = (majority(model), params)
    model, params = fitted(PrunedTreeClassifier(method="c1", partition="cart"))
    out["C1 hard"], out["C1 pred"] = (majority(model), params), (proba(model), params)
    if num_classes == 2:
        model, params = fitted(HSVoteClassifier(partition="cart"))
        out["HS-vote"] = (proba(model), params)
    return out


def sklearn_models(X_train, y_train, X_test, num_classes):
    """``{model: (proba [m, L], params)}`` of scikit-learn's CV-tuned tree and of imodels'
    hierarchical shrinkage (module docstring)."""
    from imodels import HSTreeClassifier
    from sklearn.model_selection import GridSearchCV
    from sklearn.tree import DecisionTreeClassifier
    search = GridSearchCV(DecisionTreeClassifier(random_state=0), {"ccp_alpha": list(ALPHAS)},
                          cv=2, n_jobs=1).fit(X_train, y_train)
    tree = search.best_estimator_
    out = {"scikit-learn ccp": (full_columns(tree.predict_proba(X_test), tree.classes_,
                                             num_classes),
                                {"ccp_alpha": float(search.best_params_["ccp_alpha"])})}
    reg_param = hs_reg_param(X_train, y_train, num_classes)
    hs = HSTreeClassifier(DecisionTreeClassifier(random_state=0), reg_param).fit(X_train, y_train)
    out["HS (imodels)"] = (full_columns(hs.predict_proba(X_test), hs.classes_, num_classes),
                           {"reg_param": reg_param})
    return out


def hs_reg_param(X, y, num_classes) -> float:
    """The shrinkage that ``imodels.HSTreeClassifierCV`` selects — its default grid, 3 unshuffled
    folds, the least mean log-loss — with each fold's columns placed by label, so that a fold
    whose training part misses a class (wine's rarest) is scored (imodels' own CV then fails)."""
    from imodels import HSTreeClassifier
    from sklearn.metrics import log_loss
    from sklearn.model_selection import KFold
    from sklearn.tree import DecisionTreeClassifier
    grid = HS_REG_PARAMS
    losses = np.zeros(len(grid))
    for train, test in KFold(n_splits=3).split(X):
        tree = DecisionTreeClassifier(random_state=0).fit(X[train], y[train])
        for i, reg_param in enumerate(grid):
            hs = HSTreeClassifier(copy.deepcopy(tree), reg_param).fit(X[train], y[train])
            proba = full_columns(hs.predict_proba(X[test]), hs.classes_, num_classes)
            losses[i] += log_loss(y[test], proba, labels=np.arange(num_classes)) / 3
    return float(grid[int(np.argmin(losses))])


def run_split(name: str, X, y, split: int, max_train=None) -> list[dict]:
    """Every model on one split of ``name`` (training set capped at ``max_train`` points when
    given); one record per model."""
    num_classes = int(y.max()) + 1
    n_train = datasets.train_size(name)
    n_train = n_train if max_train is None else min(n_train, max_train)
    train, test = split_indices(len(y), n_train, datasets.TEST_SIZE, split)
    X_train, y_train, X_test, y_test = X[train], y[train], X[test], y[test]
    models = {}
    for partition in ("kd", "dyadic", "cart"):
        start = time.perf_counter()
        if partition == "cart":
            fitted = cart_models(X_train, y_train, X_test, num_classes)
        else:
            fitted = label_blind_models(build_tree(partition, X_train, y_train),
                                        jnp.asarray(X_train), jnp.asarray(y_train),
                                        jnp.asarray(X_test), num_classes, split)
        seconds = (time.perf_counter() - start) / len(fitted)
        models.update({f"{partition} {k}": (*v, seconds) for k, v in fitted.items()})
    start = time.perf_counter()
    fitted = sklearn_models(X_train, y_train, X_test, num_classes)
    seconds = (time.perf_counter() - start) / len(fitted)
    models.update({k: (*v, seconds) for k, v in fitted.items()})
    return [{"dataset": name, "split": split, "n_train": n_train, "model": model,
             "params": params,
             "seconds": seconds, **metrics(y_test, proba),
             "reliability": reliability_bins(y_test, proba)}
            for model, (proba, params, seconds) in models.items()]


# ---------------------------------------------------------------------------------------------
# Report
METRICS = (("log_loss", "log-loss"), ("brier", "Brier"), ("auc", "ROC AUC"),
           ("ece", "ECE"), ("error", "test error"), ("extreme", "share of 0/1 rows"))
TARGET_MODELS = ("cart PAC-Bayes pred", "cart PAC-Bayes pred α=1", "cart PAC-Bayes pred-ll")


def mean_table(records, key) -> dict:
    """``{(dataset, model): mean of key over splits}``."""
    groups = {}
    for r in records:
        groups.setdefault((r["dataset"], r["model"]), []).append(r[key])
    return {k: float(np.mean(v)) for k, v in groups.items()}


def markdown(records, names, command, seconds, stem) -> str:
    models = list(dict.fromkeys(r["model"] for r in records))
    splits = {n: len({r["split"] for r in records if r["dataset"] == n}) for n in names}
    sizes = {n: next(r["n_train"] for r in records if r["dataset"] == n) for n in names}
    lines = ["# Probabilities: log-loss, Brier score, ROC AUC and calibration", "",
             f"Command: `{command}`  ",
             f"Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; runtime "
             f"{seconds / 60:.1f} min on a shared 2-core CPU machine ({platform.platform()}), "
             f"JAX {jax.__version__}, commit {_commit()}", "",
             "Splits per dataset (seeds 0, 1, …): "
             + ", ".join(f"{n} {k}" for n, k in splits.items())
             + "; 2000 test points; training points: "
             + ", ".join(f"{n} {k}" for n, k in sizes.items())
             + ". Protocol and model names: the docstring of `experiments/calibration.py` "
             "(kd / dyadic / cart: the T0; `hard`: the vote of hard labels; `pred`: the "
             "posterior predictive, smoothing α = ½ unless `α=1`, λ by CV accuracy; `pred-ll`: "
             "λ by CV log-loss; the cart rows are jaxtree's estimators with a T0 grown per CV "
             "fold). Means over the splits.", ""]
    for key, title in METRICS:
        table = mean_table(records, key)
        lines += [f"## {title}", "", "| model | " + " | ".join(names) + " |",
                  "|---|" + "---|" * len(names)]
        for model in models:
            cells = [f"{table[(n, model)]:.4f}" if (n, model) in table else "N/A"
                     for n in names]
            lines.append(f"| {model} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Targets (computed from the tables above)", ""]
    loss, auc = mean_table(records, "log_loss"), mean_table(records, "auc")
    for model in TARGET_MODELS:
        if not all((n, model) in loss for n in names):
            continue
        below_sklearn = [n for n in names if loss[(n, model)] <= loss[(n, "scikit-learn ccp")]]
        near_hs = [n for n in names if loss[(n, model)] <= 1.05 * loss[(n, "HS (imodels)")]]
        auc_ok = [n for n in names if auc[(n, model)] >= auc[(n, "scikit-learn ccp")]]
        lines += [f"* `{model}`: log-loss ≤ scikit-learn's tuned tree on {len(below_sklearn)}/"
                  f"{len(names)} ({', '.join(below_sklearn) or '-'}); within 5 % of hierarchical "
                  f"shrinkage or better on {len(near_hs)}/{len(names)} "
                  f"({', '.join(near_hs) or '-'}); ROC AUC ≥ scikit-learn's on {len(auc_ok)}/"
                  f"{len(names)} ({', '.join(auc_ok) or '-'})."]
    lines += ["", "## Reliability diagrams", ""]
    lines += [f"![{n}]({stem}_{n}.png)" for n in DIAGRAMS if n in names]
    return "\n".join(lines) + "\n"


def reliability_png(records, name, path) -> None:
    """Top-label reliability diagram of :data:`DIAGRAM_MODELS` on ``name``, all splits pooled."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.plot([0, 1], [0, 1], color="grey", lw=1, ls=":")
    for model in DIAGRAM_MODELS:
        rows = [r["reliability"] for r in records if r["dataset"] == name and r["model"] == model]
        if not rows:
            continue
        count, confidence, correct = (np.sum([r[k] for r in rows], axis=0)
                                      for k in ("count", "confidence", "correct"))
        keep = count > 0
        ax.plot(confidence[keep] / count[keep], correct[keep] / count[keep], marker="o", ms=3,
                label=model)
    ax.set_xlabel("confidence (top-label probability)")
    ax.set_ylabel("accuracy")
    ax.set_title(f"{name}: reliability, {ECE_BINS} bins, test points of all splits")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=pathlib.Path(__file__).parent).stdout.strip()
    except OSError:
        return "unknown"


def write_report(records, names, command, seconds, out: pathlib.Path) -> None:
    """``<out>.json``, ``<out>.md`` and the reliability diagrams of ``records``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"command": command, "seconds": seconds,
                                                    "runs": records}))
    done = [n for n in names if any(r["dataset"] == n for r in records)]
    out.with_suffix(".md").write_text(markdown(records, done, command, seconds, out.name))
    for name in DIAGRAMS:
        if name in done:
            reliability_png(records, name, out.parent / f"{out.name}_{name}.png")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(datasets.DATASETS))
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--max-train", type=int,
                        help="cap on the training-set size (default: the paper's sizes)")
    parser.add_argument("--out", default=str(RESULTS / "calibration"),
                        help="path stem of the outputs (.md, .json, _<dataset>.png)")
    parser.add_argument("--merge", nargs="+", metavar="JSON",
                        help="no fitting: write the report of these runs' .json files together")
    args = parser.parse_args(argv)
    command = "python -m experiments.calibration" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    out = pathlib.Path(args.out)
    if args.merge:
        parts = [json.loads(pathlib.Path(path).read_text()) for path in args.merge]
        records = [r for part in parts for r in part["runs"]]
        command = "; ".join(part["command"] for part in parts) + "; then " + command
        order = [n for n in datasets.DATASETS if any(r["dataset"] == n for r in records)]
        write_report(records, order, command, sum(part["seconds"] for part in parts), out)
        return
    start = time.perf_counter()
    records = []
    for split in range(args.splits):   # split-major: an interrupted run covers every dataset
        for name in args.datasets:
            X, y = datasets.load(name)
            records += run_split(name, X, y, split, args.max_train)
            print(f"{name} split {split}: {time.perf_counter() - start:.0f} s", flush=True)
            write_report(records, args.datasets, command, time.perf_counter() - start, out)


if __name__ == "__main__":
    main()
