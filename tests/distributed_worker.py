"""One process of the local clusters that ``tests/test_distributed.py`` launches.

``python tests/distributed_worker.py OUT_DIR [DIE_AFTER [NAMES]]``: joins the cluster, fits on its
block of the shared test data and saves what it fitted to ``OUT_DIR/<process>.npz``. With
``DIE_AFTER=k`` (0: none), process 1 exits abruptly at its k-th collective (a peer dying mid-fit);
a process that gets a :class:`jaxtree.distributed.CollectiveError` prints it and exits with status
4. ``NAMES``: the fits of :data:`FITS` to run, comma-separated (default: all).
"""

import os
import sys
import traceback

import numpy as np

import jaxtree
from jaxtree import distributed, launch

# the fits checked against one process (name, estimator parameters, CART bins)
FITS = [("dyadic", dict(partition="dyadic", max_depth=10)),
        ("kd", dict(partition="kd", split="spread", lam1=4.0, lam2=0.5)),
        ("cart", dict(partition="cart"))]      # tuned: the CV grows a CART T0 per fold
CART_BINS = 16


def data(n=700, n_test=60, seed=0):
    """The shared test data (every process and the test build the same)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4)) * [1.0, 3.0, 0.5, 2.0]
    X[:, 0] = X[:, 0].round()                      # ties
    X[: n // 5] = X[n // 5: 2 * n // 5]            # duplicate rows
    y = np.where(X[:, 1] + rng.normal(size=n) > 0, 5, -2) + (X[:, 2] > 0.4)
    return X, y, rng.normal(size=(n_test, 4)) * 2


def block(n, index, count):
    """Rows of process ``index``: contiguous and of unequal sizes."""
    cuts = np.linspace(0, n, count + 1).astype(int)
    cuts[1:-1] += n // 7
    return slice(cuts[index], cuts[index + 1])


class DyingReducer(distributed.ProcessReducer):
    """Process 1 exits without a word at its ``die_after``-th reduction."""

    def __init__(self, die_after):
        super().__init__()
        self.die_after = die_after

    def _reduce(self, array, op):
        if self.index == 1 and self.reductions + 1 >= self.die_after:
            os._exit(3)
        return super()._reduce(array, op)


def main(out_dir, die_after=0, names=None):
    reducer = DyingReducer(die_after) if die_after else distributed.ProcessReducer()
    X, y, X_test = data()
    rows = block(len(X), reducer.index, reducer.size)
    saved = {}
    for name, params in FITS:
        if names is not None and name not in names:
            continue
        if name == "dyadic" and not die_after:   # the estimator's option
            model = jaxtree.PACBayesTreeClassifier(**params, distributed=True).fit(X[rows],
                                                                                   y[rows])
        else:
            model = distributed.fit(jaxtree.PACBayesTreeClassifier(**params), X[rows], y[rows],
                                    bins=CART_BINS, reducer=reducer)
        for field in ("feature", "threshold", "internal"):
            saved[f"{name}_{field}"] = np.asarray(getattr(model.tree_, field))
        saved[f"{name}_counts"] = np.asarray(model.stats_.counts)
        saved[f"{name}_log_weights"] = np.asarray(model.node_log_weights_)
        saved[f"{name}_proba"] = model.predict_proba(X_test)
        saved[f"{name}_lams"] = np.array([model._param("lam1"), model._param("lam2")])
    np.savez(os.path.join(out_dir, f"{reducer.index}.npz"), **saved)


if __name__ == "__main__":
    launch.initialize()
    try:
        main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0,
             sys.argv[3].split(",") if len(sys.argv) > 3 else None)
    except distributed.CollectiveError:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(4)   # at once: JAX's shutdown would wait for the dead peer's heartbeat
