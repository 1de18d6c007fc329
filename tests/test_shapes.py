"""Bucketed shapes: the rule, and padding that changes no result, bit for bit (statistics, folds,
weights, validation errors); the persistent compilation cache."""

import contextlib
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtree
from jaxtree import select, shapes
from jaxtree.compact import CompactLayout

L = 3


def _data(n, seed=0, dims=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dims)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5).astype(int)
    y = np.where(rng.random(n) < 0.2, rng.integers(0, L, n), y)
    return X, y


@pytest.fixture(autouse=True)
def fresh_shapes():
    """Every test starts with no shapes used (they are shared process-wide)."""
    shapes.forget_shapes()
    yield
    shapes.forget_shapes()


@pytest.fixture
def no_floors(monkeypatch):
    """The bucket rule alone, without the floors of small shapes (tested on their own)."""
    for name in ("MIN_LEVELS", "MIN_WIDTH", "MIN_ROWS"):
        monkeypatch.setattr(shapes, name, 0)


def real_slots(values, tree, padded):
    """The entries of per-node ``values`` of ``padded`` (a padded copy of ``tree``) at the
    slots of ``tree``: the same slot in a heap, ``(level, position)`` in a compact layout."""
    values = np.asarray(values)
    if not isinstance(tree.layout, CompactLayout):
        return values[:tree.num_nodes]
    grid = values.reshape(padded.num_levels, padded.width, *values.shape[1:])
    return grid[:tree.num_levels, :tree.width].reshape(tree.num_nodes, *values.shape[1:])


def test_bucket_rule():
    sizes = np.arange(0, 5000)
    buckets = np.array([shapes.bucket(int(s)) for s in sizes])
    assert (buckets >= sizes).all() and (buckets % 2 == 0).all()
    assert (np.diff(buckets) >= 0).all()                                   # monotone
    assert all(shapes.bucket(b) == b for b in buckets)                     # idempotent
    big = sizes >= 8
    assert (buckets[big] <= 1.25 * sizes[big]).all()                       # ≤ 25 % padding
    # at most three significant bits
    assert all(len(bin(b).rstrip("0")) - 2 <= 3 for b in buckets.tolist() if b > 0)
    assert sorted({shapes.bucket(s) for s in range(2000, 4001)}) == [2048, 2560, 3072, 3584, 4096]
    assert [shapes.bucket(s) for s in (0, 1, 2, 3, 9, 17, 33)] == [0, 2, 2, 4, 10, 20, 40]
    with pytest.raises(ValueError, match="size"):
        shapes.bucket(-1)


def test_exact_shapes_turns_padding_off():
    assert shapes.padded(1000) == 1024
    with shapes.exact_shapes():
        assert shapes.padded(1000) == 1000 and not shapes.bucketing()
        with pytest.raises(RuntimeError):
            with shapes.exact_shapes():
                raise RuntimeError
        assert not shapes.bucketing()          # an inner context restores the outer one
    assert shapes.bucketing() and shapes.padded(1000) == 1024


def test_pad_rows_and_masks():
    x = np.arange(6.0).reshape(3, 2)
    np.testing.assert_array_equal(shapes.pad_rows(x, 5), np.r_[x, np.zeros((2, 2))])
    padded = shapes.pad_rows(jnp.asarray(x), 4, value=7)
    assert isinstance(padded, jax.Array) and padded.shape == (4, 2) and (padded[3] == 7).all()
    with pytest.raises(ValueError, match="cannot pad"):
        shapes.pad_rows(x, 2)
    masks = shapes.pad_fold_masks(select.fold_masks(5, 2), 8)
    assert masks.shape == (2, 8) and masks[:, 5:].all()     # padding: training in every fold


def test_padded_sample_gives_identical_statistics(precision):
    X, y = _data(203)
    tree = jaxtree.kd_tree(X, max_depth=6, y=y)
    Xp, yp, wp = shapes.pad_sample(X, y)
    assert Xp.shape[0] == shapes.bucket(203) == 224 and (wp[203:] == 0).all()
    exact = jaxtree.node_stats(tree, X, jnp.asarray(y), L)
    padded = jaxtree.node_stats(tree, Xp, jnp.asarray(yp), L, sample_weight=jnp.asarray(wp))
    np.testing.assert_array_equal(exact.counts, padded.counts)
    np.testing.assert_array_equal(exact.label, padded.label)


@pytest.mark.parametrize("partition", ["cart", pytest.param("dyadic", marks=pytest.mark.slow)])
def test_padded_compact_tree_gives_identical_weights(partition, precision):
    X, y = _data(300, seed=1)
    tree = (jaxtree.cart_tree(X, y) if partition == "cart"
            else jaxtree.dyadic_tree(X, max_depth=40, y=y, layout="compact"))
    assert isinstance(tree.layout, CompactLayout)
    padded = shapes.pad_tree(tree)
    assert (padded.num_levels, padded.width) == (
        max(shapes.bucket(tree.num_levels), shapes.MIN_LEVELS),
        max(shapes.bucket(tree.width), shapes.MIN_WIDTH))
    assert padded.num_nodes > tree.num_nodes       # this tree's shape is not a bucket
    results = []
    for t in (tree, padded):
        stats = jaxtree.node_stats(t, X, jnp.asarray(y), L)
        log_w = jaxtree.pacbayes_log_weights(t, stats, 3.0, 0.5)
        results.append((stats.counts, log_w, jaxtree.vote(t, stats.label, log_w, X, L)))
    (counts, log_w, proba), (counts_p, log_w_p, proba_p) = results
    np.testing.assert_array_equal(counts, real_slots(counts_p, tree, padded))
    np.testing.assert_array_equal(log_w, real_slots(log_w_p, tree, padded))
    assert np.isneginf(np.asarray(log_w_p)).sum() == (np.isneginf(np.asarray(log_w)).sum()
                                                      + padded.num_nodes - tree.num_nodes)
    np.testing.assert_array_equal(proba, proba_p)
    with shapes.exact_shapes():
        assert shapes.pad_tree(tree) is tree


def test_theory_potentials_ignore_padding(precision):
    # their D0 is T0's depth, not the padded layout's
    from jaxtree.compact import pad_compact
    from jaxtree.layout import pad_complete
    X, y = _data(150, seed=6)
    complete = jaxtree.kd_tree(X, max_depth=4, y=y)
    compact = jaxtree.kd_tree(X, max_depth=4, y=y, layout="compact")
    for tree, padded in ((complete, pad_complete(complete, 5, complete.num_features)),
                         (compact, pad_compact(compact, compact.num_levels + 3,
                                               compact.width + 2))):
        phi = [jaxtree.pacbayes_theory_potentials(t, jaxtree.node_stats(t, X, y, L), 2.0)
               for t in (tree, padded)]
        np.testing.assert_array_equal(phi[0], real_slots(phi[1], tree, padded))


def test_complete_tree_keeps_its_depth_or_reuses_one_level_more():
    X, y = _data(100)
    shallow, deep = (jaxtree.kd_tree(X, max_depth=d, y=y) for d in (5, 6))
    assert shapes.pad_tree(deep) is deep                # nothing used yet: its own depth
    reused = shapes.pad_tree(shallow)                   # depth 6 is used: twice the slots
    assert reused.layout.depth == 6
    np.testing.assert_array_equal(reused.internal[:shallow.num_nodes], shallow.internal)
    shapes.forget_shapes()
    shapes.pad_tree(jaxtree.kd_tree(X, max_depth=7, y=y))
    assert shapes.pad_tree(shallow) is shallow          # depth 7 would be 4x: not reused


def test_used_shapes_are_reused_within_the_factor(no_floors):
    X, y = _data(400, seed=3)
    big = jaxtree.cart_tree(X, y)
    small = jaxtree.cart_tree(X[:150], y[:150])
    tiny = jaxtree.cart_tree(X[:12], y[:12])
    assert small.num_levels <= big.num_levels and small.width <= big.width
    padded_big = shapes.pad_tree(big, 400)
    assert (padded_big.num_levels, padded_big.width) == (shapes.bucket(big.num_levels),
                                                        shapes.bucket(big.width))
    assert shapes.sample_size(padded_big, 400) == 448
    padded_small = shapes.pad_tree(small, 300)
    big_slots = padded_big.num_nodes
    if big_slots <= shapes.REUSE_FACTOR * shapes.bucket(small.num_levels) * shapes.bucket(
            small.width):
        assert padded_small.layout.width == padded_big.layout.width
    assert shapes.sample_size(padded_big, 300) == 448          # 448 <= 2 * bucket(300) = 640
    assert shapes.sample_size(padded_big, 150) == 160          # 448 > 2 * 160: a new bucket
    assert shapes.sample_size(padded_big, 140) == 160          # ... reused from now on
    padded_tiny = shapes.pad_tree(tiny, 12)
    assert (padded_tiny.num_levels, padded_tiny.width) == (shapes.bucket(tiny.num_levels),
                                                          shapes.bucket(tiny.width))
    with shapes.exact_shapes():
        assert shapes.pad_tree(small, 150) is small and shapes.sample_size(small, 150) == 150


def test_bucketed_folds_give_identical_errors(precision, no_floors):
    # 203 points in 3 folds: exact validation parts of 68, 68 and 67 points; bucketed, the
    # sample is padded to 224 and every part to 75 slots
    X, y = _data(203, seed=2)
    tree = jaxtree.kd_tree(X, max_depth=5, y=y, split="spread")
    masks = select.fold_masks(203, 3, seed=1)
    grid = select.product_grid({"lam1": 2.0 ** np.array([-3, 0, 4]),
                                "lam2": 2.0 ** np.array([-4, -1, 2])},
                               select.PACBAYES_DIRECTIONS)
    out = {}
    for bucketed in (True, False):
        with contextlib.nullcontext() if bucketed else shapes.exact_shapes():
            folds = select.prepare_folds(tree, X, jnp.asarray(y), L, masks)
            out[bucketed] = (folds, select.grid_errors(tree, folds, select.pacbayes_votes, grid))
    (folds_b, errors_b), (folds_e, errors_e) = out[True], out[False]
    assert folds_b.path.shape[1] == 75 and folds_e.path.shape[1] == 68
    np.testing.assert_array_equal(folds_b.train.counts, folds_e.train.counts)
    np.testing.assert_array_equal(folds_b.weight.sum(axis=1), folds_e.weight.sum(axis=1))
    np.testing.assert_array_equal(errors_b, errors_e)
    assert np.asarray(errors_e).min() < np.asarray(errors_e).max()   # the grid matters here



def test_small_problems_share_the_floor_shape():
    # the five training parts of a 5-fold CV of 300 points grow CART trees of different levels
    # and widths; each takes the floor shape, so one compiled program serves every fold
    X, y = _data(300, seed=7)
    masks = select.fold_masks(300, 5, seed=0)
    trees = [jaxtree.cart_tree(X[m], y[m]) for m in masks]
    assert len({(t.num_levels, t.width) for t in trees}) > 1
    padded = [shapes.pad_tree(t, int(m.sum())) for t, m in zip(trees, masks)]
    assert {(t.num_levels, t.width) for t in padded} == {(shapes.MIN_LEVELS, shapes.MIN_WIDTH)}
    assert {shapes.sample_size(t, int(m.sum())) for t, m in zip(padded, masks)} == {
        shapes.MIN_ROWS}

def test_validation_slots():
    masks = select.fold_masks(10, 3)                      # parts of 4, 3, 3 points
    assert select.validation_slots(masks) == 4
    uneven = np.ones((2, 10), bool)
    uneven[0, :9] = False                                 # a validation part of 9 points
    assert select.validation_slots(uneven) == 10          # padded(9) > ceil(10 / 2)
    X, y = _data(10)
    with pytest.raises(ValueError, match="train_masks"):
        select.prepare_folds(jaxtree.kd_tree(X, max_depth=2), X, y, L, masks[:, :5])


ENABLE_CACHE = """
import pathlib, sys
import jax, jax.numpy as jnp
from jaxtree import shapes
path = shapes.enable_compilation_cache(sys.argv[1])
assert path.is_dir() and jax.config.jax_compilation_cache_dir == str(path)
# a program compiled now is written to the cache
jax.jit(lambda v: jnp.cumsum(v * 3.0) - 1)(jnp.ones(4093)).block_until_ready()
assert any(path.iterdir())
"""


def test_enable_compilation_cache(tmp_path, monkeypatch):
    """In a process of its own: the cache is global JAX state."""
    import subprocess
    import sys
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert shapes.default_cache_dir() == tmp_path / "xdg" / "jaxtree" / "jax"
    done = subprocess.run([sys.executable, "-c", ENABLE_CACHE, str(tmp_path / "cache")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_release_compiled_programs_empties_jaxs_caches(monkeypatch):
    traces = []
    square = jax.jit(lambda v: traces.append(v) or v * v)
    square(np.float32(2.0))
    square(np.float32(3.0))
    assert len(traces) == 1
    maps = shapes.memory_maps()
    if maps is not None:                                  # Linux
        held, cap = maps
        assert 0 < held < cap
    assert not shapes.release_compiled_programs(share=1.0)
    releases = shapes.releases()
    monkeypatch.setattr(shapes, "memory_maps", lambda: (75, 100))
    assert not shapes.release_compiled_programs()         # at MAP_SHARE: kept
    square(np.float32(4.0))
    assert len(traces) == 1 and shapes.releases() == releases
    monkeypatch.setattr(shapes, "memory_maps", lambda: (76, 100))
    assert shapes.release_compiled_programs()
    assert shapes.releases() == releases + 1
    assert float(square(np.float32(4.0))) == 16.0
    assert len(traces) == 2                               # compiled again


def test_a_fit_near_the_map_cap_releases_compiled_programs_and_says_so(monkeypatch):
    X, y = _data(100, seed=3, dims=3)                     # a shape no other test fits

    def fit():
        model = jaxtree.PACBayesTreeClassifier(partition="kd", max_depth=3, lam1=1.0, lam2=1.0)
        return model.fit(X, y).predict_proba(X)

    kept = fit()                                          # compiles its programs
    monkeypatch.setattr(shapes, "memory_maps", lambda: (90, 100))
    with pytest.warns(RuntimeWarning, match="max_map_count"):
        released = fit()                                  # compiles them again
    np.testing.assert_array_equal(released, kept)
    monkeypatch.undo()
    readings, read = [], shapes.memory_maps
    monkeypatch.setattr(shapes, "memory_maps", lambda: readings.append(1) or read())
    fit()                     # something compiled since the last reading: reads the mappings
    fit()                     # nothing did (a warm refit): reads nothing
    assert len(readings) == 1


@pytest.mark.parametrize("partition", [pytest.param("kd", marks=pytest.mark.slow), "cart",
                                       pytest.param("dyadic", marks=pytest.mark.slow)])
def test_bucketed_estimator_fits_are_identical(partition):
    # the λ's chosen, the CV curve, the weights and the predictions (the padded fit's sample has
    # weight-0 rows; the KD and dyadic cases are slow)
    X, y = _data(203, seed=4)
    X_test, _ = _data(77, seed=5)
    fits = {}
    for bucketed in (True, False):
        with contextlib.nullcontext() if bucketed else shapes.exact_shapes():
            model = jaxtree.PACBayesTreeClassifier(partition=partition).fit(X, y)
            fits[bucketed] = (model, model.predict_proba(X_test))
    (padded, proba_p), (exact, proba_e) = fits[True], fits[False]
    assert shapes.fit_rows(len(X), padded._shape_family(X)) > len(X)  # the padding is exercised
    assert padded.best_params_ == exact.best_params_
    np.testing.assert_array_equal(padded.cv_results_["mean_test_score"],
                                  exact.cv_results_["mean_test_score"])
    np.testing.assert_array_equal(real_slots(padded.node_log_weights_, exact.tree_, padded.tree_),
                                  exact.node_log_weights_)
    # soft routing sums over the slots of T0, which the padded tree has more of: same sums,
    # another order
    np.testing.assert_allclose(proba_p, proba_e, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(padded.predict(X_test), exact.predict(X_test))


# ~19 s each: all slow; the PAC-Bayes tree's test_bucketed_estimator_fits_are_identical is fast
@pytest.mark.parametrize("make", [
    pytest.param(lambda: jaxtree.PrunedTreeClassifier(method="min_size", selection="cv",
                                                      partition="cart"), marks=pytest.mark.slow),
    pytest.param(lambda: jaxtree.PrunedTreeClassifier(method="km", partition="cart"),
                 marks=pytest.mark.slow),
    pytest.param(lambda: jaxtree.PrunedTreeClassifier(method="rep", partition="cart"),
                 marks=pytest.mark.slow),
    pytest.param(lambda: jaxtree.PrunedTreeClassifier(method="optimistic", partition="cart"),
                 marks=pytest.mark.slow),
    pytest.param(lambda: jaxtree.HSVoteClassifier(partition="cart"), marks=pytest.mark.slow),
], ids=["min_size-cv", "km", "rep", "optimistic", "hsvote"])
def test_bucketed_baseline_fits_are_identical(make):
    # the baselines' estimators share the padded sample (and the hold-out part's)
    X, y = _data(203, seed=9)
    y = np.minimum(y, 1)                                 # HSVoteClassifier is binary
    X_test, _ = _data(77, seed=10)
    fits = {}
    for bucketed in (True, False):
        with contextlib.nullcontext() if bucketed else shapes.exact_shapes():
            model = make().fit(X, y)
            fits[bucketed] = (model, model.predict_proba(X_test))
    (padded, proba_p), (exact, proba_e) = fits[True], fits[False]
    assert shapes.fit_rows(len(X), padded._shape_family(X)) > len(X)  # the padding is exercised
    for name in ("n_leaves_", "size_"):     # n_leaves_: no padding slot is a leaf
        assert getattr(padded, name, None) == getattr(exact, name, None)
    if hasattr(exact, "leaf_mask_"):
        np.testing.assert_array_equal(
            real_slots(padded.leaf_mask_, exact.tree_, padded.tree_), exact.leaf_mask_)
    if hasattr(exact, "node_log_weights_"):
        np.testing.assert_array_equal(real_slots(padded.node_log_weights_, exact.tree_,
                                                 padded.tree_), exact.node_log_weights_)
    np.testing.assert_array_equal(proba_p, proba_e)


@pytest.mark.parametrize("partition", ["cart", pytest.param("kd", marks=pytest.mark.slow)])
def test_refit_across_a_default_depth_compiles_nothing(partition):
    # 120 and 140 rows pad to the same 512 rows but have different default depths (ceil(log2 n)
    # is 7 and 8): the depth is an argument of the compiled fit, not part of its shape
    X, y = _data(140, seed=6)
    compiled = []

    def record(event, duration, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compiled.append(event)

    jax.monitoring.register_event_duration_secs_listener(record)
    try:
        first = jaxtree.PACBayesTreeClassifier(partition=partition).fit(X[:120], y[:120])
        compiled.clear()
        second = jaxtree.PACBayesTreeClassifier(partition=partition).fit(X, y)
        assert compiled == []
    finally:
        jax.monitoring.unregister_event_duration_listener(record)
    # one layout; the results equal those of exact shapes: test_bucketed_estimator_fits_are_
    # identical (203 rows padded to 512: default depths 16 and 18)
    assert first.tree_.num_levels == second.tree_.num_levels


def test_jit_with_compiler_options_joins_callers_traces():
    """shapes.jit compiles with its options at the top level, and inside a caller's jit (traced
    arguments, or closed-over constants that JAX does not show as tracers), vmap and grad it
    joins the caller's program: JAX refuses options on a nested jit."""
    square_sum = shapes.jit(lambda x, scale: scale * (x * x).sum())
    x = np.arange(4.0, dtype=np.float32)
    assert float(square_sum(x, 2.0)) == 28.0
    assert float(jax.jit(square_sum)(x, 2.0)) == 28.0
    assert float(jax.jit(lambda s: square_sum(x, 2.0) * s)(1.0)) == 28.0    # x a constant
    np.testing.assert_allclose(jax.vmap(square_sum, in_axes=(0, None))(np.stack([x, x]), 1.0),
                               [14.0, 14.0])
    np.testing.assert_allclose(jax.grad(square_sum)(x, 1.0), 2 * x)
    options = shapes.compiler_options()
    assert options in ({}, shapes.CPU_COMPILER_OPTIONS)
    if options:       # the options this XLA knows compile a program
        jax.jit(lambda v: v + 1, compiler_options=options).lower(x).compile()
    quick = shapes.compiler_options(shapes.QUICK_CPU_COMPILER_OPTIONS)
    user_flags = os.environ.get("XLA_FLAGS", "")     # the tests set the level there
    assert quick in ({}, {name: value for name, value in shapes.QUICK_CPU_COMPILER_OPTIONS.items()
                          if name not in user_flags})
    # an option this XLA does not know: compiled as JAX does, not an error at the first fit
    assert shapes.compiler_options({"xla_cpu_no_such_option": True}) == {}
    quick_sum = shapes.jit(lambda v: (v * v).sum(),
                           cpu_options=shapes.QUICK_CPU_COMPILER_OPTIONS)
    assert float(quick_sum(x)) == 14.0
