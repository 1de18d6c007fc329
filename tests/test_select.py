"""Model selection: the vmapped grid equals a plain loop, batches equal one-by-one fits,
gradient tuning is finite and lowers the smoothed loss, the estimator's ``tune`` option."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.base import clone

import jaxtree
from jaxtree import estimators, fitting, hsvote, prune, select
from jaxtree.pacbayes import node_predictive

L = 3
DEPTH = 4


def _data(seed=0, n=150, dims=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dims))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5).astype(int)
    flip = rng.random(n) < 0.2
    y = np.where(flip, rng.integers(0, L, n), y)
    return X.astype(np.float32), y


def _problem(seed=0, n=150, dims=3, depth=DEPTH):
    X, y = _data(seed, n, dims)
    tree = jaxtree.kd_tree(X, max_depth=depth, y=y, split="spread")
    return tree, X, y


SMALL_GRID = select.product_grid({"lam1": 2.0 ** np.array([-2, 0, 3]),
                                  "lam2": 2.0 ** np.array([-4, 2])},
                                 select.PACBAYES_DIRECTIONS)


def _loop_errors(tree, X, y, masks, grid):
    """Reference: refit every (setting, fold) one at a time on the fold's own subsample."""
    out = np.zeros((len(grid["lam1"]), len(masks)))
    log_weights = jax.jit(jaxtree.pacbayes_log_weights)
    for g in range(len(grid["lam1"])):
        for f, train in enumerate(masks):
            stats = jaxtree.node_stats(tree, X[train], jnp.asarray(y[train]), L)
            log_w = log_weights(tree, stats, grid["lam1"][g], grid["lam2"][g])
            scores = jaxtree.vote(tree, stats.label, log_w, X[~train], L)
            out[g, f] = np.sum(np.argmax(np.asarray(scores), axis=1) != y[~train])
    return out


@pytest.mark.parametrize("smoothing", [None, 0.5], ids=["hard votes", "predictive"])
@pytest.mark.parametrize("points", [400, 20], ids=["node sums", "path sums"])
def test_routed_scores_equal_the_sums_along_each_path(smoothing, points):
    """The grid's scores by way of each node's root-path sum (T0 with fewer slots than the
    points' path entries: 400 points) are the sums along each point's path; with fewer points
    (20) they are those sums themselves."""
    X, y = _data(seed=3, n=400)
    tree = jaxtree.cart_tree(X, y, layout="compact")
    stats = jax.jit(jaxtree.node_stats, static_argnames="num_classes")(
        tree, X, jnp.asarray(y), num_classes=L)
    # λ's that leave weight on the root (whose term the node sums add apart)
    params = {"lam1": 0.1, "lam2": 4.0, **({} if smoothing is None else {"smoothing": smoothing})}
    votes = select.pacbayes_votes(tree, stats, params)
    path, on_path = jaxtree.route(tree, X[:points])
    assert (tree.num_nodes < path.size) == (points == 400)
    np.testing.assert_allclose(select.routed_scores(tree, votes, path, on_path, L),
                               select.point_scores(votes, path, on_path, L), rtol=1e-5, atol=1e-7)


def test_grid_errors_equal_plain_loop(precision):
    tree, X, y = _problem()
    masks = select.fold_masks(len(y), 3, seed=1)
    folds = select.prepare_folds(tree, X, jnp.asarray(y), L, masks)
    grid = jax.tree.map(lambda v: jnp.asarray(v, precision), SMALL_GRID)
    expected = _loop_errors(tree, X, y, masks, grid)
    assert expected.min() < expected.max()          # the grid matters on this problem
    np.testing.assert_array_equal(select.grid_errors(tree, folds, select.pacbayes_votes, grid),
                                  expected)
    # chunked evaluation (with a remainder chunk) gives the same numbers
    np.testing.assert_array_equal(
        select.grid_errors(tree, folds, select.pacbayes_votes, grid, batch_size=4), expected)


def test_c1_grid_errors_equal_plain_loop():
    """The same machinery serves a pruning baseline (C1 via the engine's best pruning)."""
    tree, X, y = _problem()
    masks = select.fold_masks(len(y), 2, seed=0)
    folds = select.prepare_folds(tree, X, jnp.asarray(y), L, masks)
    grid = {"lam": jnp.asarray([0.0, 0.5, 2.0, 8.0, 100.0])}
    expected = np.zeros((5, 2))
    for g, lam in enumerate(grid["lam"]):
        for f, train in enumerate(masks):
            stats = jaxtree.node_stats(tree, X[train], jnp.asarray(y[train]), L)
            leaves = jaxtree.best_pruning(stats.errors + lam * (stats.total > 0), tree.internal)
            log_w = jnp.where(leaves, 0.0, -jnp.inf)
            scores = jaxtree.vote(tree, stats.label, log_w, X[~train], L)
            expected[g, f] = np.sum(np.argmax(np.asarray(scores), axis=1) != y[~train])
    assert expected.min() < expected.max()
    np.testing.assert_array_equal(select.grid_errors(tree, folds, prune.c1_votes, grid),
                                  expected)


def test_fold_masks_validate_every_point_once():
    masks = select.fold_masks(11, 3, seed=0)
    assert masks.shape == (3, 11)
    np.testing.assert_array_equal((~masks).sum(axis=0), np.ones(11))
    assert set((~masks).sum(axis=1)) == {3, 4}
    with pytest.raises(ValueError, match="folds"):
        select.fold_masks(5, 1)


def test_product_grid_is_ordered_simplest_first():
    grid = select.product_grid({"lam1": np.array([1.0, 2.0]), "lam2": np.array([3.0, 4.0])},
                               select.PACBAYES_DIRECTIONS)
    np.testing.assert_array_equal(grid["lam1"], [1, 1, 2, 2])   # smaller λ1 first
    np.testing.assert_array_equal(grid["lam2"], [4, 3, 4, 3])   # larger λ2 first


def test_paper_search_follows_the_protocol():
    tree, X, y = _problem()
    masks = select.fold_masks(len(y), 2, seed=0)
    folds = select.prepare_folds(tree, X, jnp.asarray(y), L, masks)
    done = []
    result = select.paper_search(tree, folds, select.pacbayes_votes, progress=done.append)
    assert done == [100, 100]
    grid0, grid1 = result.grids
    np.testing.assert_allclose(np.unique(grid0["lam1"]), 2.0 ** np.linspace(-8, 6, 10),
                               rtol=1e-6)
    np.testing.assert_array_equal(result.errors[0], select.grid_errors(
        tree, folds, select.pacbayes_votes, grid0))
    total0 = np.asarray(result.errors[0]).sum(axis=1)
    best0 = _deepest_tied(total0, (10, 10))
    for name in ("lam1", "lam2"):
        np.testing.assert_allclose(np.unique(grid1[name]),
                                   grid0[name][best0] * np.linspace(0.5, 2, 10), rtol=1e-5)
    total1 = np.asarray(result.errors[1]).sum(axis=1)
    best1 = _deepest_tied(total1, (10, 10))
    assert float(result.best_params["lam1"]) == float(grid1["lam1"][best1])
    assert float(result.best_error) == pytest.approx(total1.min() / len(y))


def test_paper_search_with_a_host_side_errors_fn_equals_its_loop():
    # the default search runs its two stages as one lax.scan (one copy of the grid's passes);
    # an errors_fn that leaves JAX (as the distributed fit's does) runs them one after the other
    tree, X, y = _problem()
    folds = select.prepare_folds(tree, X, jnp.asarray(y), L, select.fold_masks(len(y), 2))
    calls = []

    def on_the_host(*args, **kwargs):
        calls.append(1)
        return jnp.asarray(np.asarray(select.grid_errors(*args, **kwargs)))

    looped = select.paper_search(tree, folds, select.pacbayes_votes)
    stepped = select.paper_search(tree, folds, select.pacbayes_votes, errors_fn=on_the_host)
    assert len(calls) == 2
    for a, b in zip(jax.tree.leaves(looped), jax.tree.leaves(stepped)):
        np.testing.assert_array_equal(a, b)


def _deepest_tied(total, shape):
    """Brute force of the selection rule: loop over the settings of least loss, measure each
    one's distance in grid steps to the nearest worse setting or past the grid's edge, keep the
    first of the largest."""
    best, best_depth = None, -1
    cells = list(np.ndindex(*shape))
    tied = [c for c, t in zip(cells, total) if t == total.min()]
    for cell in tied:
        depth = min(min(i + 1, n - i) for i, n in zip(cell, shape))
        for other, t in zip(cells, total):
            if t != total.min():
                depth = min(depth, max(abs(a - b) for a, b in zip(cell, other)))
        if depth > best_depth:
            best, best_depth = cell, depth
    return int(np.ravel_multi_index(best, shape))


def test_interior_best_is_the_deepest_tied_setting():
    rng = np.random.default_rng(3)
    for shape in [(7,), (4, 6), (3, 3, 4)]:
        for _ in range(20):
            total = rng.integers(0, 3, size=int(np.prod(shape))).astype(float)
            assert int(select.interior_best(total, shape)) == _deepest_tied(total, shape)


def test_ties_go_to_the_centre_of_the_grid():
    """Every setting is error-free on a one-class sample: the whole grid is tied, and the
    deepest setting is its centre (the first of the four central cells, the simpler side)."""
    X, _ = _data()
    y = np.zeros(len(X), int)
    tree = jaxtree.kd_tree(X, max_depth=DEPTH)
    folds = select.prepare_folds(tree, X, jnp.asarray(y), L, select.fold_masks(len(y), 2))
    result = select.paper_search(tree, folds, select.pacbayes_votes)
    assert float(result.best_error) == 0
    assert float(result.best_params["lam1"]) == pytest.approx(
        2.0 ** np.linspace(-8, 6, 10)[4] * np.linspace(0.5, 2, 10)[4])
    assert float(result.best_params["lam2"]) == pytest.approx(
        2.0 ** np.linspace(-8, 6, 10)[5] * np.linspace(0.5, 2, 10)[5])


def test_a_float32_search_after_a_float64_one_in_the_same_process():
    """After a float64 search, ``jnp.asarray`` handed the paper's module-level log grid (a NumPy
    array) back as float64 to a float32 search in the same process, whose two-stage loop then
    failed on mixed dtypes. The grid now takes the folds' float dtype."""
    X = np.arange(8.0)[:, None]
    y = np.array([0, 0, 1, 0, 1, 1, 1, 1])
    with jax.enable_x64(True):
        problems = jaxtree.stack_problems([jaxtree.kd_tree(X, max_depth=2)], [X], [y])
        jaxtree.batch_paper_search(*problems, np.stack([select.fold_masks(8, 2)]), 2,
                                   select.pacbayes_votes)
    with jax.enable_x64(False):
        tree = jaxtree.kd_tree(X, max_depth=2)
        _, cv_results = jaxtree.tune(tree, X, y, 2, select.pacbayes_votes,
                                     select.PACBAYES_DIRECTIONS)
    assert cv_results["param_lam1"].dtype == np.float32


def test_unresolved_votes_are_charged_as_ties():
    """Scores equal up to one ulp are a tie: half an error for two classes, whatever the
    argmax; a clear winner is the plain 0-1 error."""
    one = float(np.nextafter(np.float32(0.5), np.float32(1)))
    scores = jnp.asarray([[0.5, one], [one, 0.5], [0.9, 0.1], [0.2, 0.8]], jnp.float32)
    label = jnp.asarray([0, 0, 1, 1])
    np.testing.assert_array_equal(select.point_losses(scores, label), [0.5, 0.5, 1, 0])


def test_a_collapsed_refit_is_skipped():
    """Two separated groups of equal size: at the grid's simplest corner the posterior puts
    all but an ulp on the root (class counts equal), so every refit prediction is a tie, and
    the estimator takes a tied setting whose refit resolves its predictions."""
    X = np.r_[np.linspace(-2, -1, 20), np.linspace(1, 2, 20)][:, None]
    y = np.r_[np.zeros(20, int), np.ones(20, int)]
    tree = jaxtree.kd_tree(X, max_depth=3)
    corner = {"lam1": 2.0 ** -9, "lam2": 128.0, "smoothing": 0.5}
    stats = jaxtree.node_stats(tree, X, y, 2)
    assert select.refit_unresolved(tree, stats, select.pacbayes_votes, corner) == 1
    model = jaxtree.PACBayesTreeClassifier(partition="kd", max_depth=3).fit(X, y)
    assert model.score(X, y) == 1
    params = {**model.best_params_, "smoothing": 0.5}
    assert select.refit_unresolved(tree, stats, select.pacbayes_votes, params) == 0


@pytest.mark.parametrize("votes_fn, params", [
    (select.pacbayes_votes, {"lam1": 2.0 ** -9, "lam2": 128.0, "smoothing": 0.5}),
    (select.pacbayes_votes, {"lam1": 2.0, "lam2": 0.5, "smoothing": 0.5}),
    (select.pacbayes_votes, {"lam1": 2.0, "lam2": 0.5}),
    (prune.c1_votes, {"lam": 0.1}),
    (hsvote.hs_votes, {"eta": 0.3}),
])
def test_the_refit_outcome_equals_routing_the_training_points(votes_fn, params):
    """The refit check reads the leaves' root-path votes off the statistics: the same
    unresolved share and predicted classes as the engine's scores of the routed points
    (weights 1 and 3), for predictive, hard-label and HS votes, at a tie and away from it."""
    X = np.r_[np.linspace(-2, -1, 20), np.linspace(1, 2, 20), np.linspace(3, 4, 20)][:, None]
    y = np.r_[np.zeros(20, int), np.ones(20, int), np.tile([0, 1, 1], 7)[:20]]
    weight = np.r_[np.ones(40), np.full(20, 3.0)].astype(np.float32)
    tree = jaxtree.kd_tree(X, max_depth=3)
    stats = jaxtree.node_stats(tree, X, y, 2, weight)
    params = jax.tree.map(jnp.float32, params)
    path, on_path = jaxtree.route(tree, jnp.asarray(X, jnp.float32))
    scores = select.point_scores(votes_fn(tree, stats, params), path, on_path, 2)
    tied = np.asarray(select.tied_at_top(scores)).sum(axis=1) > 1
    unresolved, one_class = select.refit_outcome(tree, stats, votes_fn, params)
    assert unresolved == pytest.approx(weight @ tied / weight.sum(), abs=1e-6)
    assert one_class == (np.unique(np.asarray(scores).argmax(axis=1)).size == 1)


def test_estimators_check_the_refit_of_their_own_statistics(monkeypatch):
    """An estimator pads its sample with rows of weight 0 before tuning (so that fits of
    nearby sizes share a compiled program): the refit check sees the statistics of the model it
    fits, the sample weights in, the padding out."""
    X = np.r_[np.linspace(-2, -1, 20), np.linspace(1, 2, 20)][:, None]
    y = np.r_[np.zeros(20, int), np.ones(20, int)]
    seen = []
    check = select.refit_outcome
    monkeypatch.setattr(select, "refit_outcome", lambda tree, stats, *args: (
        seen.append(np.asarray(stats.counts[0]).tolist()), check(tree, stats, *args))[1])
    for estimator in (jaxtree.PrunedTreeClassifier(), jaxtree.HSVoteClassifier()):
        seen.clear()
        estimator.fit(X, y, sample_weight=np.r_[np.ones(20), np.full(20, 2.0)])
        assert seen and all(root == [20, 40] for root in seen)


def _imbalanced_separated():
    """90 points of class 0 and 10 of class 1 apart, on a KD T0 of depth 3."""
    X = np.r_[np.linspace(-2, 0, 90), np.linspace(1, 2, 10)][:, None].astype(np.float32)
    y = np.r_[np.zeros(90, int), np.ones(10, int)]
    return X, y, jaxtree.kd_tree(X, max_depth=3)


def test_tune_skips_a_refit_that_predicts_one_class():
    """Validation errors that put the least loss (below the majority vote's) on the grid's
    simplest corner, where the refit on all points votes class 0 everywhere: the choice is the
    least loss among both stages' settings whose refit is not collapsed, as a plain loop over
    the settings finds it with the engine's own weights. Where the least loss does not beat the
    majority vote, voting the majority is a fair choice and is kept. Gradient tuning's path is
    checked alike."""
    X, y, tree = _imbalanced_separated()
    stats = jaxtree.node_stats(tree, X, y, 2)
    proba = jaxtree.class_frequencies(tree, stats.counts, 0.5)
    fixed = {"smoothing": 0.5}
    folds = select.prepare_folds(tree, X, jnp.asarray(y), 2, select.fold_masks(100, 2))
    search = select.paper_search(tree, folds, select.pacbayes_votes, fixed=fixed)

    def collapsed(grid, i):
        log_w = jaxtree.pacbayes_log_weights(tree, stats, grid["lam1"][i], grid["lam2"][i])
        return select.refit_collapsed(tree, stats, proba, log_w)

    grid = search.grids[0]              # both stages the log grid: the corner in each
    corner = [i for i in range(100) if collapsed(grid, i)]
    assert corner and not all(collapsed(grid, i) for i in range(100))

    def choice(errors):
        errors = np.asarray(search.errors[0], np.float64) * 0 + errors[:, None] / 2
        rigged = dataclasses.replace(search, grids=(grid, grid), errors=(errors, errors))
        return select._resolved_choice(tree, stats, select.pacbayes_votes, rigged,
                                       select.PACBAYES_DIRECTIONS, fixed, "accuracy")

    errors = 2.0 + np.asarray(search.errors[0]).sum(axis=1)       # all above 1 error
    errors[corner[0]] = 1.0                    # 1 error in 100 points, below the majority's 10
    chosen = choice(errors)
    passing = [i for i in range(100) if not collapsed(grid, i)]
    least = min(errors[i] for i in passing)
    assert any(errors[i] == least and np.isclose(grid["lam1"][i], chosen["lam1"])
               and np.isclose(grid["lam2"][i], chosen["lam2"]) for i in passing)
    errors = np.full(100, 11.0)
    errors[corner[0]] = 10.0                   # the majority vote's 10 errors: not beaten
    kept = choice(errors)
    assert (kept["lam1"], kept["lam2"]) == (grid["lam1"][corner[0]], grid["lam2"][corner[0]])
    # gradient tuning's path, checked alike: its least error first, then the next ones
    setting = [{name: float(grid[name][i]) for name in ("lam1", "lam2")} for i in range(100)]
    resolved = next(i for i in range(100) if not collapsed(grid, i))
    path = [{"params": setting[i], "error": e}
            for i, e in ((corner[0], 0.01), (resolved, 0.2), (corner[-1], 0.15))]
    walk = select.GradientResult(best_params=setting[corner[0]], best_error=0.01, path=path,
                                 evaluations=3)
    assert select._resolved_path_choice(tree, stats, select.pacbayes_votes, walk,
                                        fixed) == setting[resolved]


def test_refit_collapsed_means_one_class_at_every_occupied_leaf():
    """90 points of class 0 and 10 of class 1 apart: a posterior all on the root predicts
    class 0 for all (collapsed), one trusting the leaves does not; one class alone is never
    collapsed."""
    X = np.r_[np.linspace(-2, 0, 90), np.linspace(1, 2, 10)][:, None].astype(np.float32)
    y = np.r_[np.zeros(90, int), np.ones(10, int)]
    tree = jaxtree.kd_tree(X, max_depth=3)
    stats = jaxtree.node_stats(tree, X, y, 2)
    proba = jaxtree.class_frequencies(tree, stats.counts, 0.5)

    def collapsed(lam1, lam2, stats=stats):
        log_w = jaxtree.pacbayes_log_weights(tree, stats, lam1, lam2)
        return bool(select.refit_collapsed(tree, stats, proba, log_w))

    assert collapsed(2.0 ** -9, 128.0) and not collapsed(8.0, 0.01)
    occupied = ~np.asarray(tree.internal) & (np.asarray(stats.total) > 0)
    for lam1, lam2 in [(2.0 ** -9, 128.0), (8.0, 0.01), (0.5, 2.0), (2.0, 0.5)]:
        # the host-side check agrees with the engine's per-node predictive
        engine = node_predictive(tree, proba,
                                 jaxtree.pacbayes_log_weights(tree, stats, lam1, lam2))
        labels = np.unique(np.asarray(engine).argmax(axis=1)[occupied])
        assert collapsed(lam1, lam2) == (labels.size == 1)
    one_class = jaxtree.node_stats(tree, X, np.zeros(100, int), 2)
    assert not collapsed(8.0, 0.01, one_class)


def test_a_refit_that_predicts_one_class_is_skipped():
    """5 imbalanced classes (the wide benchmark's 1,500-row problem, split 1), KD T0 by the
    widest spread shared by the folds (the CV of trees grown per fold, the default, does not
    run into it): the CV's best settings (error 0.087, below the majority's 0.107) refit to a
    vote of the majority class for every training point. The fit takes, among both
    stages' settings whose refit is not collapsed, the least CV error, as a plain loop over
    the settings finds it."""
    from sklearn.datasets import make_classification
    from sklearn.model_selection import train_test_split
    X, y = make_classification(n_samples=1500, random_state=1, n_features=10, n_informative=4,
                               n_redundant=2, n_classes=5, weights=[0.9, 0.05, 0.035, 0.01,
                                                                    0.005], flip_y=0.01)
    train, _ = train_test_split(np.arange(1500), test_size=0.3, random_state=1, stratify=y)
    X, y = X[train].astype(np.float32), y[train]
    model = jaxtree.PACBayesTreeClassifier(partition="kd", split="spread",
                                           cv_trees="shared").fit(X, y)
    assert len(np.unique(model.predict(X))) > 1
    fitted, cv = model.fitted_tree_, model.cv_results_
    settings = [{"lam1": jnp.float32(a), "lam2": jnp.float32(b)}
                for a, b in zip(cv["param_lam1"], cv["param_lam2"])]
    collapsed = np.array([bool(select.refit_collapsed(
        fitted.tree, fitted.stats, fitted.node_proba,
        jaxtree.pacbayes_log_weights(fitted.tree, fitted.stats, p["lam1"], p["lam2"])))
        for p in settings])
    score = np.asarray(cv["mean_test_score"])
    assert collapsed[np.argmax(score)] and score.max() > 1 - np.bincount(y).max() / len(y)
    assert np.isclose(float(fitted.cv_error), 1 - score[~collapsed].max(), atol=1e-6)
    chosen = np.flatnonzero(np.isclose(cv["param_lam1"], model.best_params_["lam1"])
                            & np.isclose(cv["param_lam2"], model.best_params_["lam2"]))
    assert chosen.size and not collapsed[chosen].any()
    pure = jaxtree.fit(X, y, num_classes=5, partition="kd", split="spread",   # eager: the same
                       cv_trees="shared")
    assert not select.refit_collapsed(pure.tree, pure.stats, pure.node_proba, pure.log_weights)


@pytest.mark.slow   # 30 s; stack_problems and batch_fit_scores run in experiments.tuning too
def test_batched_problems_equal_one_by_one():
    problems = [_problem(0), _problem(1, 120, 2, DEPTH - 1), _problem(2)]
    trees, Xs, ys = zip(*problems)
    masks = [select.fold_masks(len(y), 2, seed=s) for s, y in enumerate(ys)]
    tree_b, X_b, y_b, w_b = select.stack_problems(trees, Xs, ys)
    n = X_b.shape[1]
    masks_b = np.stack([np.pad(m, ((0, 0), (0, n - m.shape[1])), constant_values=True)
                        for m in masks])
    batch = select.batch_paper_search(tree_b, X_b, y_b, w_b, masks_b, L, select.pacbayes_votes)
    X_test = [_data(10 + p, 40, X.shape[1])[0] for p, X in enumerate(Xs)]
    dims = X_b.shape[2]
    X_test_b = jnp.stack([jnp.pad(x, ((0, 0), (0, dims - x.shape[1]))) for x in X_test])
    scores_b = select.batch_fit_scores(tree_b, X_b, y_b, w_b, batch.best_params, X_test_b, L,
                                       select.pacbayes_votes)
    for p, (tree, X, y) in enumerate(problems):
        folds = select.prepare_folds(tree, X, jnp.asarray(y), L, masks[p])
        one = select.paper_search(tree, folds, select.pacbayes_votes)
        for stage in range(2):
            np.testing.assert_array_equal(batch.errors[stage][p], one.errors[stage])
        for name in ("lam1", "lam2"):
            assert float(batch.best_params[name][p]) == float(one.best_params[name])
        stats = jaxtree.node_stats(tree, X, jnp.asarray(y), L)
        log_w = jaxtree.pacbayes_log_weights(tree, stats, *one.best_params.values())
        np.testing.assert_allclose(scores_b[p], jaxtree.vote(tree, stats.label, log_w,
                                                             X_test[p], L), atol=1e-5)


def test_gradient_tuning_is_finite_and_lowers_the_loss(precision):
    tree, X, y = _problem()
    folds = select.prepare_folds(tree, X, jnp.asarray(y), L, select.fold_masks(len(y), 2))
    # constant temperature: the smoothed loss is one fixed function along the path
    result = select.gradient_tune(tree, folds, select.pacbayes_votes,
                                  {"lam1": 1.0, "lam2": 1.0}, steps=25,
                                  tau_start=0.5, tau_end=0.5, patience=100)
    losses = np.array([r["loss"] for r in result.path])
    assert np.isfinite(losses).all()
    assert losses[-1] < losses[0] - 0.01
    assert result.best_error <= result.path[0]["error"]
    assert result.evaluations == len(result.path) == 25
    # the corners of the parameter box (huge and tiny potentials), default schedule: no NaN
    for start in ({"lam1": 2.0 ** 12, "lam2": 2.0 ** -14}, {"lam1": 2.0 ** -14, "lam2": 2.0 ** 12},
                  {"lam1": 2.0 ** -14, "lam2": 2.0 ** -14}):
        result = select.gradient_tune(tree, folds, select.pacbayes_votes, start, steps=4,
                                      patience=100)
        values = [[r["loss"], *r["params"].values()] for r in result.path]
        assert np.isfinite(values).all()


@pytest.mark.slow   # 90 s; the default run tunes by gradient in the two tests around it
def test_gradient_tuning_leaves_a_flat_start(precision):
    """From λ1 = λ2 = 1 with a large penalty the vote is the root's majority label with weight
    1 − 1e-12: the old smoothed 0-1 loss has a gradient of 0 there; the log-loss moves, and the
    multi-start default (the coarse grid's best 3) reaches the grid's validation error."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(400, 3)).astype(np.float32)
    y = ((X[:, 0] > 0.8) | (rng.random(400) < 0.05)).astype(int)      # 20 % positives
    tree = jaxtree.kd_tree(X, max_depth=7, y=y, split="spread")
    folds = select.prepare_folds(tree, X, jnp.asarray(y), 2, select.fold_masks(len(y), 2))
    start = {"lam1": 1.0, "lam2": 8.0}
    theta = {k: jnp.log(jnp.asarray(v, precision)) for k, v in start.items()}
    grads = {}
    for loss in ("zero_one", "log"):
        grads[loss] = jax.grad(lambda t: select.smoothed_loss(
            tree, folds, select.pacbayes_votes, t, 1.0, loss=loss)[0])(theta)
    assert max(abs(float(g)) for g in grads["zero_one"].values()) < 1e-6
    assert max(abs(float(g)) for g in grads["log"].values()) > 1e-4
    stuck = select.gradient_tune(tree, folds, select.pacbayes_votes, start, steps=15,
                                 loss="zero_one")
    moved = select.gradient_tune(tree, folds, select.pacbayes_votes, start, steps=15)
    assert moved.best_error < stuck.best_error
    grid = select.paper_search(tree, folds, select.pacbayes_votes)
    default = select.gradient_tune(tree, folds, select.pacbayes_votes, steps=15)
    assert default.evaluations == 25 + len(default.path)
    assert default.best_error <= float(grid.best_error) + 0.01


def _planted(seed=0, n=400):
    """Labels that depend on x0 only, except in a small box that only fold 0's *validation*
    part touches, where fold 0's validation points carry label 2 (absent elsewhere)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, size=(n, 2)).astype(np.float32)
    y = (X[:, 0] > 0.5).astype(int)
    masks = select.fold_masks(n, 2, seed=0)
    box = (X[:, 1] > 0.9) & (X[:, 0] < 0.3)
    planted = box & ~masks[0]                  # validated in fold 0, trained on in fold 1
    X[box & masks[0], 1] = rng.uniform(0, 0.85, size=(box & masks[0]).sum())   # leave the box
    y[planted] = 2
    return X, y, masks, planted


def _leaf_training_counts(tree, stats, X):
    """Training points (of ``stats``) in the T0-leaf of each point of ``X``."""
    return np.asarray(stats.total)[np.asarray(jaxtree.leaf_of(tree, X))]


def test_per_fold_trees_never_see_the_validation_fold():
    X, y, masks, planted = _planted()
    assert planted.sum() >= 2
    build = lambda X_part, y_part: jaxtree.cart_tree(X_part, y_part, layout="compact")
    per_fold = select.prepare_fold_trees(build, X, y, 3, masks)
    # fold 0's T0 is the tree grown on fold 0's training part alone (no label 2 anywhere)
    alone = build(X[masks[0]], y[masks[0]])
    tree0 = jax.tree.map(lambda a: a[0], per_fold.tree)
    stats0 = jax.tree.map(lambda a: a[0], per_fold.train)
    assert np.asarray(stats0.counts)[:, 2].sum() == 0
    np.testing.assert_array_equal(np.asarray(jaxtree.leaf_of(tree0, X)) >= 0, True)
    np.testing.assert_array_equal(_leaf_training_counts(tree0, stats0, X),
                                  _leaf_training_counts(alone, jaxtree.node_stats(
                                      alone, X[masks[0]], jnp.asarray(y[masks[0]]), 3), X))
    # so every validation point falls in a leaf holding fold-0 training points; one T0 grown on
    # all points carves the planted cell out, and its leaves hold only validation points
    assert (_leaf_training_counts(tree0, stats0, X[planted]) > 0).all()
    full = build(X, y)
    shared = select.prepare_folds(full, X, jnp.asarray(y), 3, masks)
    shared0 = jax.tree.map(lambda a: a[0], shared.train)
    assert (_leaf_training_counts(full, shared0, X[planted]) == 0).any()
    # the grid runs over (setting, fold) in one call and equals per-fold refits one at a time
    errors = select.grid_errors(full, per_fold, select.pacbayes_votes, SMALL_GRID)
    for f, mask in enumerate(masks):
        alone = build(X[mask], y[mask])
        stats = jaxtree.node_stats(alone, X[mask], jnp.asarray(y[mask]), 3)
        for g in range(len(SMALL_GRID["lam1"])):
            log_w = jaxtree.pacbayes_log_weights(alone, stats, SMALL_GRID["lam1"][g],
                                                 SMALL_GRID["lam2"][g])
            scores = jaxtree.vote(alone, stats.label, log_w, X[~mask], 3)
            assert int(errors[g, f]) == int(np.sum(np.argmax(np.asarray(scores), 1) != y[~mask]))


def _binned_cart(n, min_split=2):
    """The host twin of the estimators' CART T0 for a sample of ``n`` rows: 64 quantile bins,
    at most ``2·ceil(log2 n)`` levels (:func:`jaxtree.fitting.default_max_depth`), nodes of
    fewer than ``min_split`` points not split (the PAC-Bayes tree's default:
    ``CART_MIN_SPLIT``; the baselines': 2)."""
    depth = fitting.default_max_depth("cart", n, 2)
    return lambda X_part, y_part: jaxtree.cart_tree(X_part, y_part, max_depth=depth,
                                                    min_split=min_split,
                                                    bins=fitting.DEFAULT_BINS, layout="compact")


def test_estimator_grows_cart_t0_per_fold():
    X, y, masks, _ = _planted()
    model = jaxtree.PACBayesTreeClassifier(partition="cart").fit(X, y)
    assert model.cv == 2                      # the default (docs/theory/selection.md)
    assert {f"split{f}_test_score" for f in range(3)} & set(model.cv_results_) == \
        {f"split{f}_test_score" for f in range(2)}
    masks = fitting.train_masks(X, 2)      # the estimator's folds (distinct x, seed 0)
    folds = select.prepare_fold_trees(_binned_cart(len(y), estimators.CART_MIN_SPLIT), X, y, 3,
                                      masks)
    best = select.paper_search(None, folds, select.pacbayes_votes,     # the CV scores the
                               fixed={"smoothing": model.smoothing}).best_params  # predictive
    assert model.best_params_ == pytest.approx({k: float(v) for k, v in best.items()})
    # refitted on all points (T0 padded to a shared shape: compare its splits)
    assert int(model.tree_.internal.sum()) == int(
        _binned_cart(len(y), estimators.CART_MIN_SPLIT)(X, y).internal.sum())
    shared = jaxtree.PACBayesTreeClassifier(partition="cart", cv_trees="shared").fit(X, y)
    assert not np.array_equal(shared.cv_results_["mean_test_score"],
                              model.cv_results_["mean_test_score"])
    with pytest.raises(ValueError, match="cv_trees"):
        jaxtree.PACBayesTreeClassifier(partition="cart", cv_trees="fold").fit(X, y)


@pytest.mark.parametrize("cv_trees,partition,free_empty_nodes,per_fold", [
    ("auto", "cart", False, True), ("auto", "kd", False, False), ("auto", "dyadic", False, False),
    ("auto", "kd", True, True), ("auto", "dyadic", True, False), ("shared", "cart", True, False),
    ("shared", "kd", True, False), ("per_fold", "kd", False, True)])
def test_which_cv_grows_t0_per_fold(cv_trees, partition, free_empty_nodes, per_fold):
    assert fitting.per_fold_trees(cv_trees, partition, free_empty_nodes) is per_fold


def test_pacbayes_cv_grows_a_kd_t0_per_fold_and_c1_shares_it():
    """``cv_trees="auto"``: the PAC-Bayes posterior (no cost at empty nodes) is cross-validated
    on KD trees grown per fold, C1 (one minimising pruning, which free splits into empty cells
    do not change) on T0 of all points."""
    X, y, _, _ = _planted()
    kd = dict(partition="kd", split="cycle")
    scores = {mode: jaxtree.PACBayesTreeClassifier(cv_trees=mode, **kd).fit(X, y).cv_results_[
        "mean_test_score"] for mode in ("auto", "per_fold", "shared")}
    np.testing.assert_array_equal(scores["auto"], scores["per_fold"])
    assert not np.array_equal(scores["auto"], scores["shared"])
    scores = {mode: jaxtree.PrunedTreeClassifier(cv_trees=mode, **kd).fit(X, y).cv_results_[
        "mean_test_score"] for mode in ("auto", "per_fold", "shared")}
    np.testing.assert_array_equal(scores["auto"], scores["shared"])
    assert not np.array_equal(scores["auto"], scores["per_fold"])



@pytest.mark.parametrize("method", [pytest.param("c1", marks=pytest.mark.slow),
                                    pytest.param("hs", marks=pytest.mark.slow)])
def test_baselines_grow_cart_t0_per_fold(method):   # the estimator's twin runs by default
    X, y, masks, _ = _planted()
    y = np.minimum(y, 1)                                       # HSVoteClassifier: binary only
    model, votes_fn, name = {
        "c1": (jaxtree.PrunedTreeClassifier(method="c1", partition="cart", proba="majority"),
               prune.c1_votes, "lam"),
        "hs": (jaxtree.HSVoteClassifier(partition="cart"), hsvote.hs_votes, "eta")}[method]
    model.fit(X, y)
    masks = fitting.train_masks(X, 2)
    folds = select.prepare_fold_trees(_binned_cart(len(y)), X, y, 2, masks)
    direction = -1 if method == "hs" else +1
    best = select.paper_search(None, folds, votes_fn, ((name, direction),),
                               base_grid=model._search_grid()).best_params
    assert model.best_params_ == pytest.approx({k: float(v) for k, v in best.items()})
    shared = clone(model).set_params(cv_trees="shared").fit(X, y)
    assert not np.array_equal(shared.cv_results_["mean_test_score"],
                              model.cv_results_["mean_test_score"])
    with pytest.raises(ValueError, match="cv_trees"):
        clone(model).set_params(cv_trees="fold").fit(X, y)

def test_estimator_tuning_options():
    X, y = _data()
    labels = np.array(["a", "b", "c"])[y]
    kd = dict(partition="kd", max_depth=DEPTH, split="spread")
    auto = jaxtree.PACBayesTreeClassifier(**kd, cv_trees="shared").fit(X, labels)
    tree = jaxtree.kd_tree(X, max_depth=DEPTH, y=y, split="spread")    # shared by the folds
    folds = select.prepare_folds(tree, X, jnp.asarray(y), L,
                                 fitting.train_masks(X, auto.cv))
    # the estimator selects λ on the probabilities predict_proba gives (the posterior predictive)
    best = select.paper_search(tree, folds, select.pacbayes_votes,
                               fixed={"smoothing": auto.smoothing}).best_params
    assert auto.best_params_ == pytest.approx({k: float(v) for k, v in best.items()})
    results = auto.cv_results_
    assert len(results["params"]) == 200 and results["rank_test_score"].min() == 1
    stage1 = -np.asarray(results["mean_test_score"][100:])
    chosen = results["params"][_deepest_tied(stage1, (10, 10)) + 100]
    assert chosen == pytest.approx(auto.best_params_)
    fixed = jaxtree.PACBayesTreeClassifier(**kd,
                                           **auto.best_params_).fit(X, labels)
    assert not hasattr(fixed, "best_params_")
    np.testing.assert_allclose(auto.predict_proba(X), fixed.predict_proba(X), atol=1e-6)
    # auto with one λ given tunes only the other
    half = jaxtree.PACBayesTreeClassifier(**kd, lam2=2.0).fit(X, y)
    assert set(half.best_params_) == {"lam1"} and half._param("lam2") == 2.0
    grad = jaxtree.PACBayesTreeClassifier(**kd, tune="gradient",
                                          lam1=0.5, lam2=0.5).fit(X, y)
    assert grad.cv_results_["params"][0] == pytest.approx({"lam1": 0.5, "lam2": 0.5})
    assert np.isfinite(grad.cv_results_["smoothed_loss"]).all()
    with pytest.raises(ValueError, match="tune"):
        jaxtree.PACBayesTreeClassifier(partition="kd", tune="random").fit(X, y)
    with pytest.raises(ValueError, match="lam1"):
        jaxtree.PACBayesTreeClassifier(partition="kd", tune=None).fit(X, y)


@pytest.mark.slow
def test_gradient_tuning_without_a_start_moves_three():
    X, y = _data()
    # without a start: the best 3 of the coarse grid, all moved at once
    multi = jaxtree.PACBayesTreeClassifier(partition="kd", max_depth=DEPTH, split="spread",
                                           tune="gradient").fit(X, y)
    assert set(multi.cv_results_["start"]) == {0, 1, 2}


# ---------------------------------------------------------------------------------------------
# The authors' reading of the penalty
def _authors_reference_weights(tree, counts, lam_err, lam_pen):
    """A transcription of the authors' public code, node by node in float64: per node the error
    rate E/n and the penalty sqrt(2·p̃·ℓ/n), p̃ = 4·max(N/n, ℓ/n) (0 at empty nodes), the prior
    e^-1 at non-empty nodes, ``expPhi = exp(−(λ_pen·penalty + λ_err·E/n)·n)·prior``; the
    bottom-up ``β(A) = expPhi(A) + β(L)·β(R)`` and top-down ``α(child) = α(A)·β(sibling)``
    recursions; weight ``expPhi·α``, divided here by ``β(root)`` to give probabilities."""
    internal = np.asarray(tree.internal)
    left = np.asarray(tree.left_child)
    depth = np.asarray(tree.node_depth)
    n = counts[0].sum()
    exp_phi, beta, alpha = {}, {}, {}

    def up(node):
        info = counts[node]
        total = info.sum()
        emp_error = (total - info.max()) / n
        if total > 0:
            temp = depth[node] / n
            penalty = np.sqrt(2 * (4 * max(total / n, temp)) * temp)
        else:
            penalty = 0.0
        prior = np.exp(-1) if total > 0 else 1.0
        exp_phi[node] = np.exp(-(penalty * lam_pen + emp_error * lam_err) * n) * prior
        beta[node] = exp_phi[node]
        if internal[node]:
            beta[node] += up(left[node]) * up(left[node] + 1)
        return beta[node]

    def down(node, a):
        alpha[node] = a
        if internal[node]:
            down(left[node], a * beta[left[node] + 1])
            down(left[node] + 1, a * beta[left[node]])

    up(0)
    down(0, 1.0)
    return {node: exp_phi[node] * alpha[node] / beta[0] for node in exp_phi}


@pytest.mark.parametrize("layout", ["complete", pytest.param("compact", marks=pytest.mark.slow)])
def test_authors_potentials_against_a_transcription_of_their_code(precision, layout):
    X, y = _data(3, n=60)
    tree = jaxtree.kd_tree(X, max_depth=5, y=y, split="spread", layout=layout)
    stats = jaxtree.node_stats(tree, X, jnp.asarray(y), L)
    counts = np.asarray(stats.counts, np.float64)
    total = counts.sum(axis=1)
    assert (np.asarray(tree.internal) & (total > 0)).sum() > 5
    for lam_err, lam_pen in ((1.0, 1.0), (0.3, 0.05), (2.5, 0.4)):
        expected = _authors_reference_weights(tree, counts, lam_err, lam_pen)
        nodes = np.array(sorted(expected))
        log_w = jaxtree.pacbayes_authors_log_weights(tree, stats, lam_err, lam_pen)
        tol = 2e-5 if precision == jnp.float32 else 1e-12
        np.testing.assert_allclose(np.exp(np.asarray(log_w))[nodes],
                                   [expected[v] for v in nodes], atol=tol)
        # the potentials themselves: the same formula written with depths and counts
        depth = np.asarray(tree.node_depth, np.float64)
        phi = np.where(total > 0, -lam_err * (total - counts.max(axis=1))
                       - lam_pen * np.sqrt(8 * depth * np.maximum(total, depth)) - 1, 0.0)
        np.testing.assert_allclose(
            np.asarray(jaxtree.pacbayes_authors_potentials(tree, stats, lam_err, lam_pen))[nodes],
            phi[nodes], rtol=1e-6)
    # the depth makes it another penalty than the paper's: the weights differ
    paper = jaxtree.pacbayes_log_weights(tree, stats, 1.0, 1.0)
    assert not np.allclose(np.exp(np.asarray(paper))[nodes], [
        _authors_reference_weights(tree, counts, 1.0, 1.0)[v] for v in nodes], atol=1e-3)


def test_small_sample_folds():
    """At most n folds; per-fold trees need 2 training points in every fold (n - ceil(n/k)),
    reached with more folds where possible, else one shared T0; a warning whenever the
    request is changed."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert select.small_sample_folds(4, 2, True) == (2, True)
        assert select.small_sample_folds(10, 5, False) == (5, False)
    for n, folds, per_fold, expected in [(2, 2, True, (2, False)), (3, 2, True, (3, True)),
                                         (3, 5, False, (3, False)), (4, 5, True, (4, True))]:
        with pytest.warns(UserWarning, match="cross-validating"):
            assert select.small_sample_folds(n, folds, per_fold) == expected
        k, grown = expected
        if grown:
            masks = select.fold_masks(n, k)
            assert masks.sum(axis=1).min() >= 2
    with pytest.raises(ValueError, match="cv"):
        select.small_sample_folds(10, 1, False)
