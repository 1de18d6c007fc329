"""Fitting on rows spread over holders equals fitting all rows in one place.

Two kinds of holders: threads in this process (tests/holders.py: fast, every builder and option,
float32 and float64) and real JAX processes started by jaxtree.launch (tests/distributed_worker.py:
the collectives, the estimator's fit, a peer that dies)."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import distributed_worker as worker
import jaxtree
from holders import holder_outcomes, run_holders
from jaxtree import build, cart, distributed, launch, shapes
from jaxtree.cart import cart_tree

ROOT = Path(__file__).resolve().parents[1]
TREE_FIELDS = ("feature", "threshold", "internal", "left_child", "shift", "inv_scale")


def assert_same_tree(tree, reference):
    assert tree.clip == reference.clip and tree.num_nodes == reference.num_nodes
    for field in TREE_FIELDS:
        np.testing.assert_array_equal(np.asarray(getattr(tree, field)),
                                      np.asarray(getattr(reference, field)), err_msg=field)


def rows(seed=0, n=400, dims=3):
    """Ties, duplicate rows, a constant column, labels 0..2."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dims)) * rng.uniform(0.5, 5, dims)
    X[: n // 4] = X[n // 4: 2 * (n // 4)]
    X[:, 0] = X[:, 0].round()
    X[:, -1] = np.where(rng.random(n) < 0.9, 1.5, X[:, -1])   # mostly one value
    y = (X[:, 1] + rng.normal(size=n) > 0).astype(int) + (X[:, 2] > 1)
    return X, y


# ---------------------------------------------------------------------------------------------
# Holders as threads
@pytest.mark.parametrize("grow", [build.grow_kd, build.grow_dyadic], ids=["kd", "dyadic"])
@pytest.mark.parametrize("split", ["cycle", "spread"])
def test_builders_over_holders_equal_one_process(precision, grow, split):
    X, y = rows()
    X = X.astype(precision)
    reference = grow(X, y, 9, 2, split, "compact")
    for holders in (1, 4):     # one holder still takes the reduced path (radix select)
        for tree in run_holders(holders, lambda Xb, yb, r: grow(Xb, yb, 9, 2, split,
                                                                "compact", r), X, y):
            assert_same_tree(tree, reference)


def test_builders_over_holders_with_an_empty_block_and_no_labels():
    X, _ = rows(1, n=60)
    reference = build.grow_kd(X, None, 6, 3, "spread", "complete")
    # 4 holders on 60 rows: the last block is empty
    for tree in run_holders(4, lambda Xb, r: build.grow_kd(Xb, None, 6, 3, "spread", "complete",
                                                           r), X):
        assert_same_tree(tree, reference)


def test_statistics_and_chunked_prediction_over_holders():
    """Counts summed over holders (one of them empty, chunks of 16 rows) equal one pass; a
    prediction in chunks equals one in a piece."""
    X, y = rows(9, n=60)
    tree = jaxtree.kd_tree(X, 5, y=y)
    reference = jaxtree.node_stats(tree, X, y, 3)
    for stats in run_holders(4, lambda Xb, yb, r: distributed.node_stats(
            tree, Xb, yb, 3, reducer=r, chunk_size=16), X, y):
        np.testing.assert_array_equal(np.asarray(stats.counts), np.asarray(reference.counts))
        np.testing.assert_array_equal(np.asarray(stats.label), np.asarray(reference.label))
    model = jaxtree.PACBayesTreeClassifier(max_depth=4, lam1=1.0, lam2=1.0).fit(X, y)
    np.testing.assert_array_equal(distributed.predict_proba(model, X, chunk_size=16),
                                  model.predict_proba(X))


def test_binned_cart_over_holders_equals_one_process(precision):
    X, y = rows(2)
    X = X.astype(precision)
    reference = cart_tree(X, y, bins=16, random_state=3)

    def grow(Xb, yb, reducer):
        return cart.grow_cart_tree(Xb, yb, None, 2, "gini", "auto", 3, 16, reducer)

    for tree in run_holders(3, grow, X, y):
        assert_same_tree(tree, reference)


def test_exact_cart_refuses_spread_rows():
    X, y = rows(3, n=30)
    with pytest.raises(ValueError, match="give bins"):
        run_holders(2, lambda Xb, yb, r: cart.grow_cart_tree(Xb, yb, None, 2, "gini", "auto", 0,
                                                             None, r), X, y)


def test_bad_block_raises_in_every_holder():
    """An error found in one block is raised in all holders (none is left in a collective)."""
    X, y = rows(4, n=90)
    X[80, 1] = np.nan                       # in the last of 3 blocks only
    outcomes = holder_outcomes(3, lambda Xb, yb, r: distributed.kd_tree(Xb, 4, y=yb, reducer=r),
                               X, y)
    assert all(isinstance(o, ValueError) for o in outcomes), outcomes
    assert "NaN" in str(outcomes[2]) and "process(es) [2]" in str(outcomes[0])


def test_blocks_must_share_the_features():
    X, y = rows(5, n=40)

    def build_on_mismatched(Xb, yb, reducer):
        return distributed.dyadic_tree(Xb[:, :2] if reducer.index == 1 else Xb, 3,
                                       reducer=reducer)

    outcomes = holder_outcomes(2, build_on_mismatched, X, y)
    assert all(isinstance(o, ValueError) and "same features" in str(o) for o in outcomes)


def one_process_fit(params, X, y, bins=None):
    """The distributed pipeline on one holder of all the rows (the reference that several
    holders or processes must equal); with ``bins``, a binned CART T0 of that many bins. The
    pipeline is the host builders' (NumPy T0, its own folds): the one-process estimator grows
    T0 inside its compiled fit and deals folds over distinct rows, so it is not the reference."""
    return run_holders(1, lambda Xb, yb, r: distributed.fit(
        jaxtree.PACBayesTreeClassifier(**params), Xb, yb, bins=bins or 256, reducer=r),
        X, y)[0]


def assert_same_fit(model, reference, X_test):
    assert_same_tree(model.tree_, reference.tree_)
    np.testing.assert_array_equal(model.classes_, reference.classes_)
    np.testing.assert_array_equal(np.asarray(model.stats_.counts),
                                  np.asarray(reference.stats_.counts))
    np.testing.assert_array_equal(np.asarray(model.stats_.label), np.asarray(reference.stats_.label))
    assert getattr(model, "best_params_", None) == getattr(reference, "best_params_", None)
    np.testing.assert_array_equal(np.asarray(model.node_log_weights_),
                                  np.asarray(reference.node_log_weights_))
    np.testing.assert_array_equal(model.predict_proba(X_test), reference.predict_proba(X_test))


@pytest.mark.parametrize("scoring", ["accuracy", "neg_log_loss"])
def test_fold_trees_over_holders_equal_row_by_row_folds(scoring):
    """A T0 grown on each fold's training rows (the one-process fit's CV for the PAC-Bayes KD
    and CART trees): the grid errors over 3 holders, from each fold tree's (leaf, class)
    counts, equal :func:`jaxtree.select.prepare_fold_trees`'s row by row on the same folds."""
    X, y = rows(6, n=300)
    masks = jaxtree.select.fold_masks(len(y), 2, 5)
    reference = jaxtree.select.prepare_fold_trees(
        lambda Xp, yp: jaxtree.kd_tree(Xp, max_depth=6, y=yp, layout="compact"), X, y, 3, masks)
    grid = {"lam1": np.array([0.5, 4.0, 32.0]), "lam2": np.array([0.1, 1.0, 0.1]),
            "smoothing": 0.5}
    votes = jaxtree.select.pacbayes_votes
    expected = np.asarray(jaxtree.select.grid_errors(None, reference, votes, grid,
                                                     scoring=scoring))

    def fold_errors(Xb, yb, reducer):
        def grow(X_rows, y_rows):
            return build.grow_kd(X_rows, y_rows, 6, 2, "cycle", "compact", reducer)

        folds = distributed.prepare_fold_trees(grow, Xb, yb, 3, 2, 5, reducer)
        return np.asarray(jaxtree.select.grid_errors(None, folds, votes, grid, scoring=scoring))

    for errors in run_holders(3, fold_errors, X, y):
        np.testing.assert_allclose(errors, expected, rtol=1e-5, atol=1e-4)
    assert expected.std() > 0          # the settings differ: the comparison can fail


@pytest.mark.slow   # the two-process test below fits a tuned CART model too
def test_tuned_fit_over_holders_equals_one_process():
    """The λ's tuned on (leaf, class) counts of the validation rows: the same CV errors, choice,
    weights and predictions as row by row in one process."""
    X, y = rows(6, n=300)
    labels = np.array([-1, 2, 7])[y]                  # any integer labels
    params = dict(partition="kd", max_depth=6)
    reference = one_process_fit(params, X, labels)
    X_test = np.random.default_rng(0).normal(size=(40, 3)) * 3
    for model in run_holders(3, lambda Xb, yb, r: distributed.fit(
            jaxtree.PACBayesTreeClassifier(**params), Xb, yb, reducer=r), X, labels):
        assert_same_fit(model, reference, X_test)
        for key in ("mean_test_score", "rank_test_score", "param_lam1", "param_lam2"):
            np.testing.assert_array_equal(model.cv_results_[key], reference.cv_results_[key])


@pytest.mark.slow
@pytest.mark.parametrize("params,bins", [
    (dict(partition="dyadic", split="spread", max_depth=12), None),
    (dict(partition="kd", split="spread", potentials="theory", lam1=0.5), None)])
def test_more_fits_over_holders_equal_one_process(params, bins):
    X, y = rows(7, n=500)
    reference = one_process_fit(params, X, y, bins)
    X_test = np.random.default_rng(1).normal(size=(40, 3)) * 3
    for model in run_holders(2, lambda Xb, yb, r: distributed.fit(
            jaxtree.PACBayesTreeClassifier(**params), Xb, yb, bins=bins or 256, reducer=r),
            X, y):
        assert_same_fit(model, reference, X_test)


@pytest.mark.slow   # ~20 s; test_two_processes_fit_like_one stays in the default suite
def test_the_distributed_cart_t0_is_the_jax_builders():
    """The fit's CART T0 is jaxtree.grow_tree's on all the rows (bin edges from exact order
    statistics over the holders: those of the rows' own quantiles), tuned or not; holders
    without a mesh (threads) cannot run its one program and say so."""
    X, y, _ = worker.data()
    for params in (dict(partition="cart", lam1=4.0, lam2=0.5),
                   dict(partition="cart", cv=3, random_state=2)):
        model = one_process_fit(params, X, y, worker.CART_BINS)
        layout = model.tree_.layout
        config = jaxtree.GrowConfig(partition="cart", max_depth=layout.depth,
                                    width=layout.width, num_classes=len(model.classes_),
                                    bins=worker.CART_BINS,
                                    min_split=jaxtree.estimators.CART_MIN_SPLIT,
                                    random_state=params.get("random_state", 0))
        reference, info = jaxtree.grow_tree(X.astype(np.float32),
                                            np.searchsorted(model.classes_, y),
                                            np.ones(len(y), np.float32), config)
        assert int(info.capped) == 0
        for field in ("internal", "feature", "threshold", "left_child"):
            np.testing.assert_array_equal(np.asarray(getattr(model.tree_, field)),
                                          np.asarray(getattr(reference, field)), err_msg=field)
    outcomes = holder_outcomes(2, lambda Xb, yb, r: distributed.fit(
        jaxtree.PACBayesTreeClassifier(partition="cart", lam1=1.0, lam2=1.0), Xb, yb,
        bins=worker.CART_BINS, reducer=r), X, y)
    assert all(isinstance(o, ValueError) and "mesh" in str(o) for o in outcomes), outcomes


ROW_SHARDED_GROW = """
import re
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import jaxtree
from jaxtree import cart, distributed
rng = np.random.default_rng(0)
X = rng.normal(size=(1000, 5)).astype(np.float32)
y = ((X[:, 0] + X[:, 1] > 0) + (X[:, 2] > 1)).astype(np.int32)
w = np.ones(len(y), np.float32)
edges = cart.quantile_edges(X, 16)
config = jaxtree.GrowConfig(partition="cart", max_depth=8, width=64, num_classes=3, bins=16)
mesh = Mesh(np.array(jax.devices()), ("rows",))
rows = lambda a: jax.device_put(a, NamedSharding(mesh, P("rows", *([None] * (a.ndim - 1)))))
program = distributed._grow_over_rows.lower(rows(X), rows(y), rows(w), edges, config).compile()
text = program.as_text()
print({op: len(re.findall(op + r"[-.\\w]*\\(", text)) for op in ("all-reduce", "all-gather", "all-to-all")})
sharded, _ = distributed._grow_over_rows(rows(X), rows(y), rows(w), edges, config)
alone, _ = jaxtree.grow_tree(X, y, w, config)
print(all(np.array_equal(np.asarray(getattr(sharded, f)), np.asarray(getattr(alone, f)))
          for f in ("internal", "feature", "threshold")))
"""


@pytest.mark.slow   # ~11 s: moved out of the default suite for its time budget
def test_a_row_sharded_grow_moves_no_rows():
    """The distributed CART grow on rows sharded over 2 devices (a subprocess with 2 forced CPU
    devices: the partitioning of a 2-process mesh): given the bin edges, its only collectives
    are all-reduces (no all-gather or all-to-all of rows), and it grows the one-device tree."""
    env = dict(os.environ, XLA_FLAGS=os.environ.get("XLA_FLAGS", "")
               + " --xla_force_host_platform_device_count=2")
    result = subprocess.run([sys.executable, "-c", ROW_SHARDED_GROW], env=env,
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    counts, same = result.stdout.strip().splitlines()[-2:]
    counts = eval(counts)                                            # a printed dict literal
    assert counts["all-reduce"] > 0 and counts["all-gather"] == 0 and counts["all-to-all"] == 0
    assert same == "True"


def test_a_distributed_fit_near_the_map_cap_releases_compiled_programs(monkeypatch):
    """As the one-process fit (tests/test_shapes.py): a process near its memory-map cap empties
    JAX's caches before it fits, says so, and fits the same model."""
    X, y = rows(9, n=120)
    params = dict(partition="kd", max_depth=4, lam1=1.0, lam2=1.0)
    kept = one_process_fit(params, X, y)
    monkeypatch.setattr(shapes, "_compilations_checked", -2)     # something compiled since
    monkeypatch.setattr(shapes, "memory_maps", lambda: (90, 100))
    releases = shapes.releases()
    with pytest.warns(RuntimeWarning, match="max_map_count"):
        released = one_process_fit(params, X, y)
    assert shapes.releases() == releases + 1
    assert_same_fit(released, kept, X)


# ---------------------------------------------------------------------------------------------
# Real processes
def test_without_the_runtime_a_clear_error():
    X, y = rows(8, n=20)
    for call in (lambda: distributed.fit(jaxtree.PACBayesTreeClassifier(), X, y),
                 lambda: jaxtree.PACBayesTreeClassifier(distributed=True).fit(X, y),
                 lambda: distributed.kd_tree(X, 3)):
        with pytest.raises(RuntimeError, match="jax.distributed.initialize"):
            call()
    with pytest.raises(RuntimeError, match="jaxtree.launch"):
        launch.initialize()


def test_launcher_kills_what_outlives_a_failure_or_the_timeout():
    """A process that fails gets its peers killed after the grace period; a run past the timeout
    is killed whole (plain Python processes: the launcher does not need JAX)."""
    sleeper = "import os, sys, time; time.sleep(60 if os.environ['JAXTREE_PROCESS_ID'] == '0' " \
              "else 0); sys.exit(int(os.environ['JAXTREE_PROCESS_ID']))"
    results = launch.launch([sys.executable, "-c", sleeper], 2, timeout=120, grace=0.5)
    assert [r.returncode for r in results][1] == 1 and results[0].killed
    assert not results[1].killed
    results = launch.launch([sys.executable, "-c", "import time; time.sleep(60)"], 2,
                            timeout=0.5)
    assert all(r.killed and r.returncode != 0 for r in results)
    with pytest.raises(launch.LaunchError, match="killed by the launcher"):
        launch.check(results)
    with pytest.raises(ValueError, match="num_processes"):
        launch.launch([sys.executable, "-c", "pass"], 0)


def run_cluster(out_dir, *args):
    return launch.launch([sys.executable, str(ROOT / "tests" / "distributed_worker.py"),
                          str(out_dir), *args], num_processes=2, timeout=900, grace=30,
                         env={"PYTHONPATH": os.pathsep.join([str(ROOT),
                                                             os.environ.get("PYTHONPATH", "")])})


@pytest.mark.parametrize("names", [
    pytest.param(["cart"], id="cart"),
    # ~25 s more on 2 cores; without a cluster, the estimator's option is checked to go through
    # distributed.fit (test_without_the_runtime_a_clear_error)
    pytest.param(["dyadic", "kd"], id="dyadic-kd", marks=pytest.mark.slow)])
def test_two_processes_fit_like_one(tmp_path, names):
    """Two JAX processes (gloo), each with a block of unequal size: T0, statistics, λ's, weights
    and predictions equal one process's, for a binned CART fit (tuned: a CART T0 grown per CV
    fold over both processes) and, in the slow set, dyadic (tuned; the estimator's
    ``distributed=True``) and KD (spread) fits."""
    launch.check(run_cluster(tmp_path, "0", ",".join(names)))
    X, y, X_test = worker.data()
    saved = [np.load(tmp_path / f"{index}.npz") for index in range(2)]
    for name, params in worker.FITS:
        if name not in names:
            continue
        reference = one_process_fit(params, X, y,
                                    worker.CART_BINS if params["partition"] == "cart" else None)
        expected = {"counts": reference.stats_.counts,
                    "log_weights": reference.node_log_weights_,
                    "proba": reference.predict_proba(X_test),
                    "lams": [reference._param("lam1"), reference._param("lam2")],
                    **{f: getattr(reference.tree_, f) for f in ("feature", "threshold",
                                                                "internal")}}
        for process in saved:
            for field, value in expected.items():
                np.testing.assert_array_equal(process[f"{name}_{field}"], np.asarray(value),
                                              err_msg=f"{name} {field}")


def test_a_dying_process_makes_the_other_fail(tmp_path):
    """Process 1 exits mid-fit (at its 12th collective, while T0 grows): process 0 gets a
    CollectiveError from its next collective instead of waiting."""
    results = run_cluster(tmp_path, "12")
    assert results[1].returncode == 3
    survivor = results[0]
    assert not survivor.killed, survivor.stderr[-2000:]
    assert survivor.returncode == 4 and "CollectiveError" in survivor.stderr
    with pytest.raises(launch.LaunchError, match="exit status 3"):
        launch.check(results)
