"""Small settings of every estimator, shared by the scikit-learn checks, the bad-input battery and
the persistence tests: shallow trees and given λ's (no CV tuning), so that the many small fits
those tests make stay fast. They still fit scikit-learn's 300-point blobs to the > 0.83 training
accuracy its checks ask for (max_depth=4; depth 3 gives 0.82 on the binary problem)."""

import numpy as np

import jaxtree


def small_estimators():
    """Fresh instances, one per estimator class of jaxtree."""
    return [
        jaxtree.PACBayesTreeClassifier(partition="kd", split="cycle", max_depth=4, lam1=1.0,
                                       lam2=1.0),
        jaxtree.PrunedTreeClassifier(max_depth=4, lam=1.0),
        jaxtree.HSVoteClassifier(max_depth=4, eta=1.0),
        jaxtree.ObliqueTreeClassifier(max_depth=2, n_restarts=1, n_jumps=1, n_cycles=1),
    ]



def small_data(n=12, dims=3, seed=0):
    """Points ``[n, dims]`` and binary labels 0/1. The tests that fit estimators use these
    shapes, so that what JAX compiled for one test serves the next."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dims))
    return X, (X[:, 0] + X[:, 1] > 0).astype(int)
