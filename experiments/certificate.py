"""The PAC-Bayes certificate of certified PAC-Bayes trees on the seven Table 2 datasets.

    python -m experiments.certificate                     # all seven, KD and dyadic T0
    python -m experiments.certificate --datasets spam letter --partitions kd
    python -m experiments.certificate --partitions cart   # the estimator's default T0

Per dataset, one random split (``--seed``) into 2000 test points and the paper's training size
(:func:`experiments.datasets.train_size`). Every model is fitted with ``certify=True``: half of
the training set (S0) builds T0 (KD or dyadic, coordinates cycled as in the paper, the
estimator's default depth for S0's size; or the estimator's default CART T0) and its labels and the practical prior's counts; the
other half (S) fits the posterior. Two ways of choosing λ1, λ2 on S:

* **cv**: the paper's protocol, 2-fold CV on S over the two-stage grid (``tune="auto"``);
* **bound**: the certificate's bound minimised (``tune="bound"``: log grid, then 100 Adam steps).

For each model the table gives the certificate on S at δ = 0.05 (Gibbs risk R̂(Q), KL(Q‖P), the
bound on the Gibbs risk, the majority-vote bound 2·bound) and, on the 2000 held-out test points,
the Gibbs classifier's error ``E_{T∼Q} R_test(h_T) = mean(1 − s_y(x))`` and the majority vote's.
A bound is *valid on this split* when it is not below the corresponding test error.
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import sys
import time

import jax
import numpy as np

import jaxtree
from experiments import datasets
from experiments.table2 import git_state, split_indices

RESULTS = pathlib.Path(__file__).parent / "results"
TUNING = {"cv": "auto", "bound": "bound"}
DELTA = 0.05


def run_one(name: str, X, y, partition: str, tuning: str, seed: int) -> dict:
    """One certified fit and its certificate and test errors."""
    train, test = split_indices(len(y), datasets.train_size(name), datasets.TEST_SIZE, seed)
    start = time.perf_counter()
    split = {} if partition == "cart" else {"split": "cycle"}
    model = jaxtree.PACBayesTreeClassifier(partition=partition, certify=True,
                                           tune=TUNING[tuning], delta=DELTA, **split,
                                           proba="majority",   # the Gibbs error from the scores
                                           random_state=seed).fit(X[train], y[train])
    seconds = time.perf_counter() - start
    result = model.certificate(delta=DELTA)
    proba = model.predict_proba(X[test])
    classes = np.searchsorted(model.classes_, y[test])
    return {"dataset": name, "partition": partition, "tuning": tuning, "seed": seed,
            "n_train": len(train), "n_S": int(result.n), "depth": model.tree_.depth,
            "lam1": model._param("lam1"), "lam2": model._param("lam2"),
            "gibbs_risk": result.gibbs_risk, "kl": result.kl, "bound": result.bound,
            "majority_vote_bound": result.majority_vote_bound, "lam": result.lam,
            "test_gibbs": float(1 - proba[np.arange(len(test)), classes].mean()),
            "test_vote": float(np.mean(model.classes_[np.argmax(proba, axis=1)] != y[test])),
            "seconds": seconds}


def markdown(records: list[dict], metas: list[dict]) -> str:
    """The table; ``metas``: one per run that produced records (several when runs of different
    datasets were made in parallel and combined with ``--combine``)."""
    meta = metas[0]
    lines = ["# The PAC-Bayes certificate of certified PAC-Bayes trees", ""]
    for m in metas:
        lines += [f"Command: `{m['command']}`  ",
                  f"Date: {m['date_utc']}; runtime {m['runtime_seconds'] / 60:.1f} min on "
                  f"{m['device']} (a 2-core machine shared with other jobs), JAX {m['jax']}, "
                  f"commit {m['git_commit']}  "]
    lines += [
        "",
        "One random split per dataset (seed " + str(meta["seed"]) + "): 2000 test points, the "
        "paper's training size (crowd: 8545). `certify=True`: half of the training set (S0) "
        "builds T0 (KD or dyadic with coordinates cycled, at the estimator's default depth for "
        "S0; or the estimator's default CART T0), its labels and the practical prior "
        "P(T) ∝ e^{−|π(T, S0)|}; the posterior, Q ∝ P·e^{−λ1·ΣE − λ2·Σ√N} with the counts of "
        "S, is fitted on the other half "
        "(S, n = |S|). λ's by 2-fold CV on S (paper's grid, `cv`) or by minimising the bound "
        "(`bound`). Certificate at δ = 0.05: R̂(Q) and KL(Q‖P) on S, the bound on the Gibbs "
        "risk (Proposition 1 at its best λ) and the majority-vote bound (2×). Test columns: "
        "Gibbs error E_{T∼Q} R_test(h_T) and majority-vote error on the 2000 test points. "
        "A bound ≥ 1 says nothing.", "",
        "| dataset | T0 | λ by | n | λ1 | λ2 | R̂(Q) | KL | Gibbs bound | test Gibbs | "
        "vote bound | test vote |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append(
            f"| {r['dataset']} | {r['partition']} | {r['tuning']} | {r['n_S']} | "
            f"{r['lam1']:.3g} | {r['lam2']:.3g} | {r['gibbs_risk']:.4f} | {r['kl']:.1f} | "
            f"{r['bound']:.4f} | {r['test_gibbs']:.4f} | {r['majority_vote_bound']:.4f} | "
            f"{r['test_vote']:.4f} |")
    lines += ["", summary(records)]
    return "\n".join(lines) + "\n"


def summary(records: list[dict]) -> str:
    """Counts computed from the records (no hand-written numbers)."""
    bound = [r for r in records if r["tuning"] == "bound"]
    nonvacuous = sorted({r["dataset"] for r in bound if r["bound"] < 1})
    below_half = sorted({r["dataset"] for r in bound if r["bound"] < 0.5})
    violated = [(r["dataset"], r["partition"], r["tuning"]) for r in records
                if r["bound"] < r["test_gibbs"] or r["majority_vote_bound"] < r["test_vote"]]
    done = {(r["dataset"], r["partition"], r["tuning"]) for r in records}
    partitions = sorted({r["partition"] for r in records})
    missing = [f"{d} {p} {t}" for d in datasets.DATASETS for p in partitions
               for t in TUNING if (d, p, t) not in done]
    return (("Not run (stopped for time): " + ", ".join(missing) + ". "
             if missing else "") +
            f"With λ by the bound, the Gibbs bound is below 1 on {len(nonvacuous)} of "
            f"{len({r['dataset'] for r in bound})} datasets ({', '.join(nonvacuous) or 'none'}) "
            f"and below 0.5 on {len(below_half)} ({', '.join(below_half) or 'none'}). "
            f"Bounds below the measured test error: "
            f"{', '.join('/'.join(v) for v in violated) if violated else 'none'}.")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(datasets.DATASETS),
                        choices=list(datasets.DATASETS))
    parser.add_argument("--partitions", nargs="+", default=["kd", "dyadic"],
                        choices=["kd", "dyadic", "cart"])
    parser.add_argument("--tuning", nargs="+", default=list(TUNING), choices=list(TUNING))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="certificate", help="file stem in experiments/results")
    parser.add_argument("--combine", nargs="+", metavar="STEM",
                        help="run nothing: write --out from the records of earlier runs "
                             "(experiments/results/STEM.json), e.g. runs of different datasets "
                             "made in parallel")
    args = parser.parse_args(argv)
    command = "python -m experiments.certificate " + " ".join(
        sys.argv[1:] if argv is None else argv)
    if args.combine:
        parts = [json.loads(RESULTS.joinpath(f"{stem}.json").read_text())
                 for stem in args.combine]
        records = [r for part in parts for r in part["records"]]
        metas = [part["meta"] for part in parts]
        text = markdown(records, metas) + f"\nCombined by `{command.strip()}`.\n"
        RESULTS.joinpath(f"{args.out}.md").write_text(text)
        RESULTS.joinpath(f"{args.out}.json").write_text(json.dumps(
            {"meta": metas, "records": records}, indent=1))
        print(text)
        return
    commit = git_state()
    start = time.perf_counter()
    records = []
    for name in args.datasets:
        X, y = datasets.load(name)
        for partition in args.partitions:
            for tuning in args.tuning:
                records.append(run_one(name, X, y, partition, tuning, args.seed))
                print(json.dumps(records[-1]), flush=True)
                meta = {"command": command.strip(), "git_commit": commit, "seed": args.seed,
                        "date_utc": datetime.datetime.now(datetime.timezone.utc)
                        .strftime("%Y-%m-%d %H:%M UTC"),
                        "runtime_seconds": time.perf_counter() - start,
                        "device": str(jax.devices()[0]), "jax": jax.__version__}
                RESULTS.joinpath(f"{args.out}.md").write_text(markdown(records, [meta]))
                RESULTS.joinpath(f"{args.out}.json").write_text(json.dumps(
                    {"meta": meta, "records": records}, indent=1))
    print(RESULTS.joinpath(f"{args.out}.md").read_text())


if __name__ == "__main__":
    main()
