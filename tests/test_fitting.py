"""The pure fit (:func:`jaxtree.fit`): it equals its pieces, weights are rows, it composes with
jit / vmap / grad, and it lowers for accelerators."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtree
from jaxtree import fitting, select
from jaxtree.grow import grow_tree
from jaxtree.pacbayes import pacbayes_log_weights
from jaxtree.stats import class_frequencies, node_stats

PARTITIONS = [("dyadic", "cycle"), ("kd", "spread"), ("cart", "spread")]


def noisy_problem(n=120, dims=3, classes=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dims)).astype(np.float32)
    score = X[:, 0] + 0.5 * X[:, 1] + 0.4 * rng.normal(size=n)
    y = np.digitize(score, np.quantile(score, np.linspace(0, 1, classes + 1)[1:-1]))
    return X, y.astype(np.int32)


def fitted(X, y, **options):
    return jaxtree.fit(X, y, num_classes=int(y.max()) + 1, **options)


@pytest.mark.parametrize("partition,split", [
    pytest.param(*PARTITIONS[0], marks=pytest.mark.slow), PARTITIONS[1],
    pytest.param(*PARTITIONS[2], marks=pytest.mark.slow)])     # ~8 s of compiling each
def test_fit_equals_its_pieces(partition, split):
    """Given λ's: T0 from the builder, counts, weights and frequencies as the functions give."""
    X, y = noisy_problem()
    model = fitted(X, y, partition=partition, split=split, lam1=2.0, lam2=0.5, smoothing=0.5)
    config = fitting.fit_config(len(y), X.shape[1], num_classes=2, partition=partition,
                                split=split, lam1=2.0, lam2=0.5)
    tree, _ = grow_tree(jnp.asarray(X), jnp.asarray(y), jnp.ones(len(y)), config.grow,
                        fitting.fit_keys(jax.random.PRNGKey(0))[0])
    stats = node_stats(tree, X, y, 2)
    np.testing.assert_array_equal(model.tree.internal, tree.internal)
    np.testing.assert_array_equal(model.stats.counts, stats.counts)
    np.testing.assert_allclose(model.log_weights, pacbayes_log_weights(tree, stats, 2.0, 0.5),
                               rtol=1e-6)
    np.testing.assert_allclose(model.node_proba, class_frequencies(tree, stats.counts, 0.5),
                               rtol=1e-6)
    proba = jaxtree.posterior_predictive(tree, class_frequencies(tree, stats.counts, 0.5),
                                         pacbayes_log_weights(tree, stats, 2.0, 0.5), X)
    np.testing.assert_allclose(fitting.predict_proba(model, X), proba, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("partition,split,tuned", [
    pytest.param(*PARTITIONS[0], False, marks=pytest.mark.slow), (*PARTITIONS[1], False),
    pytest.param(*PARTITIONS[2], False, marks=pytest.mark.slow),
    pytest.param(*PARTITIONS[0], True, marks=pytest.mark.slow),
    pytest.param(*PARTITIONS[1], True, marks=pytest.mark.slow), (*PARTITIONS[2], True)])
def test_integer_weights_are_repeated_rows(partition, split, tuned):
    """An integer weight is that many copies of the row, through T0, the CV and the weights;
    weight 0 removes the row."""
    X, y = noisy_problem(n=80)
    counts = np.random.default_rng(1).integers(0, 4, size=len(y))
    lam = {} if tuned else {"lam1": 1.0, "lam2": 1.0}
    rows = np.repeat(np.arange(len(y)), counts)
    # the repeated sample, padded with weight-0 rows to the same shape as the weighted one
    pad = len(y) * 4 - len(rows)
    X_rep = np.concatenate([X[rows], np.zeros((pad, X.shape[1]), np.float32)])
    y_rep = np.concatenate([y[rows], np.zeros(pad, np.int32)])
    w_rep = np.concatenate([np.ones(len(rows)), np.zeros(pad)]).astype(np.float32)
    X_w = np.concatenate([X, np.zeros((len(y) * 3, X.shape[1]), np.float32)])
    y_w = np.concatenate([y, np.zeros(len(y) * 3, np.int32)])
    w_w = np.concatenate([counts, np.zeros(len(y) * 3)]).astype(np.float32)
    weighted = fitted(X_w, y_w, weight=w_w, partition=partition, split=split, **lam)
    repeated = fitted(X_rep, y_rep, weight=w_rep, partition=partition, split=split, **lam)
    np.testing.assert_array_equal(weighted.tree.internal, repeated.tree.internal)
    # a threshold between two points may differ in its last bit (a sum in another order)
    np.testing.assert_allclose(weighted.tree.threshold, repeated.tree.threshold, rtol=1e-6)
    np.testing.assert_allclose(weighted.stats.counts, repeated.stats.counts)
    np.testing.assert_allclose(weighted.lam1, repeated.lam1, rtol=1e-6)
    np.testing.assert_allclose(weighted.lam2, repeated.lam2, rtol=1e-6)
    Xt = noisy_problem(n=50, seed=9)[0]
    np.testing.assert_allclose(fitting.predict_proba(weighted, Xt),
                               fitting.predict_proba(repeated, Xt), rtol=1e-5, atol=1e-6)


def test_vmap_over_bootstrap_weights_equals_a_loop():
    X, y = noisy_problem(n=100)
    weights = jax.random.poisson(jax.random.PRNGKey(3), 1.0, (4, len(y))).astype(jnp.float32)
    config = fitting.fit_config(len(y), X.shape[1], num_classes=2, partition="kd")
    batch = jax.vmap(lambda w: fitting.fit_with_config(X, y, w, None, config))(weights)
    for b in range(weights.shape[0]):
        one = fitting.fit_with_config(X, y, weights[b], None, config)
        np.testing.assert_array_equal(batch.tree.internal[b], one.tree.internal)
        np.testing.assert_allclose(batch.lam1[b], one.lam1, rtol=1e-6)
        np.testing.assert_allclose(batch.log_weights[b], one.log_weights, rtol=1e-5, atol=1e-6)


def test_tuned_lambdas_equal_the_grid_search_on_the_same_folds():
    """The in-program CV (validation parts as weights) selects what
    :func:`jaxtree.paper_search` selects on the same folds prepared the host's way (one T0
    shared by the folds)."""
    X, y = noisy_problem(n=150, classes=3)
    model = fitted(X, y, partition="kd", smoothing=0.5, cv_trees="shared")
    key = fitting.fit_keys(jax.random.PRNGKey(0))[1]
    valid = np.asarray(fitting.fold_weights(X, jnp.ones(len(y)), key, 2)) > 0
    folds = select.prepare_folds(model.tree, X, y, 3, ~valid)
    reference = select.paper_search(model.tree, folds, select.pacbayes_votes,
                                    fixed={"smoothing": 0.5})
    np.testing.assert_allclose(model.lam1, reference.best_params["lam1"], rtol=1e-6)
    np.testing.assert_allclose(model.lam2, reference.best_params["lam2"], rtol=1e-6)
    np.testing.assert_allclose(model.cv_error, reference.best_error, rtol=1e-6)


def test_folds_deal_distinct_rows_and_keep_copies_together():
    X, y = noisy_problem(n=60)
    rows = np.r_[np.arange(60), np.arange(20)]          # the first 20 rows twice
    weight = np.r_[np.ones(60), np.ones(20)].astype(np.float32)
    valid = np.asarray(fitting.fold_weights(X[rows], weight, jax.random.PRNGKey(5), 3))
    np.testing.assert_array_equal(valid.sum(axis=0), weight)        # validated once each
    fold_of = valid.argmax(axis=0)
    np.testing.assert_array_equal(fold_of[:20], fold_of[60:])       # copies in one fold
    sizes = np.bincount(fold_of[:60], minlength=3)
    assert sizes.max() - sizes.min() <= 1                            # distinct rows dealt evenly
    other_key = np.asarray(fitting.fold_weights(X, weight[:60], jax.random.PRNGKey(6), 3))
    assert not np.array_equal(other_key.argmax(axis=0), fold_of[:60])


def test_folds_keep_the_labels_of_one_x_together():
    """Rows of equal features and different labels are validated in one fold: dealt apart, a
    fold would train on one label and be scored on the other (the CV of data whose rows repeat
    with mixed labels, such as categorical tables, then scores learning below guessing)."""
    rng = np.random.default_rng(0)
    X = rng.integers(0, 3, (200, 2)).astype(np.float32)       # 9 distinct rows
    y = rng.integers(0, 2, 200)
    valid = np.asarray(fitting.fold_weights(X, np.ones(200, np.float32),
                                            jax.random.PRNGKey(1), 2))
    fold_of = valid.argmax(axis=0)
    cell = X[:, 0] * 3 + X[:, 1]
    for value in np.unique(cell):
        assert len(np.unique(fold_of[cell == value])) == 1
        assert len(np.unique(y[cell == value])) == 2           # both labels at this x
    assert set(fold_of) == {0, 1}


def test_holdout_weights_split_distinct_rows():
    X, _ = noisy_problem(n=40)
    weight = np.r_[np.full(30, 2.0), np.zeros(10)].astype(np.float32)
    first, second = np.asarray(fitting.holdout_weights(X, weight, jax.random.PRNGKey(0), 0.5))
    np.testing.assert_array_equal(first + second, weight)
    assert np.count_nonzero(first) == 15 and np.count_nonzero(second) == 15


def test_grad_in_given_lambdas_matches_finite_differences():
    with jax.enable_x64(True):
        X, y = noisy_problem(n=80)
        X = X.astype(np.float64)
        Xt = noisy_problem(n=30, seed=4)[0].astype(np.float64)
        config = fitting.fit_config(len(y), 3, num_classes=2, partition="kd", lam1=1.0,
                                    lam2=1.0)

        def loss(log_lam):
            lam1, lam2 = jnp.exp(log_lam)
            model = fitting.fit_with_config(X, y, None, None, config, lam1=lam1, lam2=lam2)
            return jnp.sum(fitting.predict_proba(model, Xt)[:, 0] ** 2)

        point = jnp.array([0.3, -0.2])
        grad = jax.grad(loss)(point)
        eps = 1e-6
        numeric = [(loss(point + eps * e) - loss(point - eps * e)) / (2 * eps)
                   for e in np.eye(2)]
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-9)
        assert np.all(np.abs(grad) > 0)


def test_fit_runs_inside_a_callers_jit():
    X, y = noisy_problem(n=64)
    config = fitting.fit_config(len(y), 3, num_classes=2, partition="dyadic", split="cycle")

    @jax.jit
    def train_and_score(X, y, X_test):
        model = fitting.fit_with_config(X, y, None, None, config)
        return fitting.predict_proba(model, X_test).argmax(axis=1)

    predicted = train_and_score(X, y, X)
    direct = fitting.predict_proba(fitting.fit_with_config(X, y, None, None, config), X)
    np.testing.assert_array_equal(predicted, np.asarray(direct).argmax(axis=1))


@pytest.mark.parametrize("batched", [False, True], ids=["one", "vmapped"])
def test_whole_fit_lowers_for_accelerators(batched):
    """``jax.export`` lowers the jitted fit (and a vmapped batch of bootstrap fits) for CUDA and
    TPU: StableHLO with no CPU-only custom call and no host callback."""
    from jax import export
    X, y = noisy_problem(n=64)
    config = fitting.fit_config(len(y), 3, num_classes=2, partition="kd")

    def one(weight):
        model = fitting.fit_with_config(X, y, weight, None, config)
        return fitting.predict_proba(model, X)

    fn = jax.vmap(one) if batched else one
    shape = (4, len(y)) if batched else (len(y),)
    exported = export.export(jax.jit(fn), platforms=["cuda", "tpu"])(
        jax.ShapeDtypeStruct(shape, jnp.float32))
    text = exported.mlir_module()
    assert "stablehlo" in text
    for forbidden in ("callback", "lapack", "ducc", "cpu_"):
        assert forbidden not in text.lower(), forbidden


@pytest.mark.parametrize("options,match", [
    ({"partition": "oak"}, "partition"),
    ({"potentials": "magic"}, "potentials"),
    ({"proba": "soft"}, "proba"),
    ({"scoring": "f1"}, "scoring"),
    ({"tune": "gradient"}, "tune"),
    ({"tune": None}, "lam1"),
    ({"cv": 1}, "cv"),
    ({"min_split": 1}, "min_split"),
    ({"max_depth": -1}, "max_depth"),
    ({"lam1": -1.0, "lam2": 1.0}, "lam1"),
    ({"cv_trees": "some"}, "cv_trees"),
    ({"smoothing": -1.0}, "smoothing"),
])
def test_bad_options_raise_value_errors_naming_them(options, match):
    X, y = noisy_problem(n=20)
    with pytest.raises(ValueError, match=match):
        fitted(X, y, **options)


def test_bad_shapes_raise_value_errors():
    X, y = noisy_problem(n=20)
    with pytest.raises(ValueError, match="X must be"):
        jaxtree.fit(X[:, 0], y, num_classes=2)
    with pytest.raises(ValueError, match="y must be"):
        jaxtree.fit(X, y[:5], num_classes=2)
    with pytest.raises(ValueError, match="weight must be"):
        jaxtree.fit(X, y, num_classes=2, weight=np.ones(3))


@pytest.mark.parametrize("partition", ["cart", "dyadic"])
def test_width_ladder_widens_a_capped_tree_to_the_uncapped_one(partition):
    """Random labels on 1,024 rows: the first rung of the width ladder (64) of a CART or dyadic
    T0 caps a node; the eager fit climbs to the next rung and gives the tree of the widest
    layout, and the next fit of that shape starts there; under a caller's jit the first rung's
    capped count is reported, not hidden."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1024, 4)).astype(np.float32)
    y = rng.integers(0, 2, 1024).astype(np.int32)
    options = dict(num_classes=2, partition=partition, lam1=1.0, lam2=1.0, tune=None)
    depth = fitting.default_max_depth(partition, 1024, 4)
    first = fitting.default_width(1024, 2, depth, partition)
    assert first == 64 < fitting.width_bound(1024, 2, depth) == 1024
    capped = jaxtree.fit(X, y, width=first, **options)
    assert int(capped.capped) > 0
    widest = jaxtree.fit(X, y, width=1024, **options)
    model = jaxtree.fit(X, y, **options)
    assert int(model.capped) == 0 and int(widest.capped) == 0
    rungs = [first]
    while rungs[-1] < 1024:
        rungs.append(fitting.wider_width(rungs[-1], 1024))
    width = model.tree.internal.shape[0] // (depth + 1)
    assert width in rungs[1:] and model.tree.internal.shape[0] == (depth + 1) * width
    assert int(model.tree.internal.sum()) == int(widest.tree.internal.sum())
    np.testing.assert_allclose(jaxtree.predict_proba(model, X),
                               jaxtree.predict_proba(widest, X), atol=1e-6)
    config = fitting.fit_config(1024, 4, **options)
    assert fitting.known_layout(config, X.shape).grow.width == width
    traced = jax.jit(lambda X, y: fitting.fit_with_config(X, y, None, None, config,
                                                          lam1=1.0, lam2=1.0))(X, y)
    assert int(traced.capped) == int(capped.capped)


def test_depth_ladder_deepens_a_dyadic_layout_to_the_tree_of_the_whole_depth(monkeypatch):
    """A dyadic T0's layout starts at a first depth rung (here 3 instead of 32) below the depth
    its tree may reach (floor(ln 300)·2 = 10): the grow counts the last level's nodes that the
    depth limit would split; the eager fit deepens the layout rung by rung until none is left
    and gives the tree, the λ's and the predictions of the layout of the whole depth; the next
    fit of that shape starts there; under a caller's jit the first rung's count is reported."""
    monkeypatch.setattr(fitting, "DYADIC_FIRST_DEPTH", 3)
    monkeypatch.setattr(fitting, "_KNOWN_LAYOUTS", {})
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 2)).astype(np.float32)
    y = ((X[:, 0] * X[:, 1] > 0) ^ (rng.random(300) < 0.1)).astype(np.int32)
    options = dict(num_classes=2, partition="dyadic")
    depth = fitting.default_max_depth("dyadic", 300, 2)
    config = fitting.fit_config(300, 2, **options)
    assert config.grow.max_depth == 3 < depth == config.max_depth
    first = fitting.fit_with_config(X, y, None, None, config)
    assert int(first.depth_capped) > 0
    grown, info = grow_tree(X, y, np.ones(300), config.grow, depth_limit=depth)
    deep, _ = grow_tree(X, y, np.ones(300), fitting._with_layout(config.grow, config.grow.width,
                                                                 depth))
    last = np.asarray(deep.node_depth) == 3
    assert int(info.depth_capped) == int(np.asarray(deep.internal)[last].sum()) > 0
    model = jaxtree.fit(X, y, **options)
    whole = jaxtree.fit(X, y, width=config.grow.width * 4, **options)   # the full depth
    assert int(model.depth_capped) == 0 == int(model.capped)
    levels = model.tree.layout.num_levels
    assert 3 < levels - 1 <= depth
    assert int(model.tree.internal.sum()) == int(whole.tree.internal.sum())
    assert (float(model.lam1), float(model.lam2)) == (float(whole.lam1), float(whole.lam2))
    np.testing.assert_allclose(jaxtree.predict_proba(model, X), jaxtree.predict_proba(whole, X),
                               atol=1e-6)
    assert fitting.known_layout(config, X.shape).grow.max_depth == levels - 1
    traced = jax.jit(lambda X, y: fitting.fit_with_config(X, y, None, None, config))(X, y)
    assert int(traced.depth_capped) == int(first.depth_capped)


def test_a_first_fit_compiles_each_of_its_two_programs_once(precision, caplog):
    """The fit's second program is compiled ahead, in a thread, from the first's output shapes
    (fitting._compile_ahead): its call then finds it compiled (one compilation, not two), in
    float32 and in a float64 context alike. A shape no other test fits (37 rows, 5 features)."""
    X, y = noisy_problem(n=37, dims=5, seed=precision == jnp.float64)
    jax.config.update("jax_log_compiles", True)     # for every thread (the context: this one)
    try:
        with caplog.at_level("WARNING"):
            model = jaxtree.fit(X, y, num_classes=2, partition="cart", cv=3)
    finally:
        jax.config.update("jax_log_compiles", False)
    messages = [r.getMessage() for r in caplog.records if "XLA compilation" in r.getMessage()]
    for program in ("_grow_program", "_finish_program"):
        assert sum(f"jit({program})" in m for m in messages) == 1, messages
    assert model.log_weights.dtype == precision
    again = jaxtree.fit(X, y, num_classes=2, partition="cart", cv=3)
    np.testing.assert_array_equal(np.asarray(again.log_weights), np.asarray(model.log_weights))
