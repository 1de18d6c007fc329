"""The jitted builders (jaxtree.grow) against the NumPy builders, node for node; weights as
repeated rows; vmap as a loop; the width cap counted by routing rows; lowering for accelerators.

Every distinct GrowConfig and shape compiles one program (~3 s on CPU), so the default cases share
configurations: a test that reuses one costs no compile."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtree
from experiments import datasets
from jaxtree.compact import pad_compact
from jaxtree.grow import GrowConfig, check_grow_config, grow_tree

DEPTH, N = 6, 120


def tied_data(seed, n=N, dims=4):
    """Integer features (many ties), one continuous, one constant; three noisy classes."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 5, size=(n, dims)).astype(np.float32)
    X[:, 1] = rng.normal(size=n)
    X[:, 3] = 2.0
    y = (X[:, 0] + rng.integers(0, 2, size=n)).astype(int) % 3
    return X, y


def numpy_tree(X, y, config):
    """The NumPy builder's tree for ``config``, padded to the grown layout's shape."""
    if config.partition == "cart":
        tree = jaxtree.cart_tree(X, y, max_depth=config.max_depth, min_split=config.min_split,
                                 criterion=config.criterion, layout="compact",
                                 random_state=config.random_state, bins=config.bins)
    else:
        build = jaxtree.kd_tree if config.partition == "kd" else jaxtree.dyadic_tree
        tree = build(X, config.max_depth, min_split=config.min_split, y=y, split=config.split,
                     layout="compact")
    assert tree.width <= config.width, "the test's width must not cap the NumPy tree"
    return pad_compact(tree, config.max_depth + 1, config.width)


def assert_same_tree(grown, expected, X):
    """Same structure, features and leaves; thresholds equal up to the scaling's rounding (the
    KD scale is a float32 standard deviation here, a float64 one in NumPy)."""
    for name in ("internal", "feature", "left_child", "node_depth"):
        np.testing.assert_array_equal(np.asarray(getattr(grown, name)),
                                      np.asarray(getattr(expected, name)), err_msg=name)
    for name in ("child_pos", "parent_pos"):
        np.testing.assert_array_equal(np.asarray(getattr(grown.layout, name)),
                                      np.asarray(getattr(expected.layout, name)), err_msg=name)
    np.testing.assert_allclose(np.asarray(grown.threshold), np.asarray(expected.threshold),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(grown.inv_scale), np.asarray(expected.inv_scale),
                               rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(jaxtree.leaf_of(grown, X)),
                                  np.asarray(jaxtree.leaf_of(expected, X)))
    assert grown.clip == expected.clip


def config_for(partition, split="cycle", **kwargs):
    return GrowConfig(partition=partition, max_depth=DEPTH, width=64, num_classes=3,
                      split=split, bins=8, **kwargs)


CONFIGS = {
    "dyadic-cycle": config_for("dyadic"),
    "kd-cycle": config_for("kd"),
    "kd-spread": config_for("kd", "spread"),
    "cart-gini": config_for("cart"),
    "dyadic-spread": config_for("dyadic", "spread"),
    "cart-entropy": config_for("cart", criterion="entropy", random_state=3),
    # fewer levels than features: the cycle ranks only the coordinates it visits
    "kd-shallow-min-split": dataclasses.replace(config_for("kd", min_split=9), max_depth=3),
}
SLOW = {"kd-cycle", "dyadic-spread", "cart-entropy", "kd-shallow-min-split"}


def configs(names):
    return [pytest.param(CONFIGS[name], id=name,
                         marks=[pytest.mark.slow] if name in SLOW else []) for name in names]


@pytest.mark.parametrize("config", configs(CONFIGS))
def test_equals_numpy_builder_and_weights_are_repeated_rows(config):
    X, y = tied_data(0)
    tree, info = grow_tree(X, y, np.ones(N), config)
    assert int(info.capped) == 0 and tree.layout.width == config.width
    expected = numpy_tree(X, y, config)
    assert_same_tree(tree, expected, X)
    assert int(info.depth) == int(np.asarray(expected.node_depth)[
        np.asarray(expected.internal)].max()) + 1
    # a bootstrap: integer weights (zeros among them) == the rows repeated (the same n rows, so
    # the same compiled program), and == the NumPy builder on the repeated rows
    counts = np.random.default_rng(1).multinomial(N, np.full(N, 1 / N))
    assert (counts == 0).any() and (counts > 1).any()
    Xr, yr = np.repeat(X, counts, axis=0), np.repeat(y, counts)
    weighted, weighted_info = grow_tree(X, y, counts.astype(np.float32), config)
    repeated, _ = grow_tree(Xr, yr, np.ones(N), config)
    assert_same_tree(weighted, repeated, Xr)
    assert_same_tree(weighted, numpy_tree(Xr, yr, config), Xr)
    # the builder's class counts per slot are the rows routed through the grown tree
    for grown, grown_info, w in ((tree, info, np.ones(N)), (weighted, weighted_info, counts)):
        np.testing.assert_array_equal(
            np.asarray(grown_info.counts),
            np.asarray(jaxtree.node_stats(grown, X, y, 3, sample_weight=w).counts))


def test_zero_weight_rows_are_absent():
    # rows of weight 0 with extreme values change neither the scaling nor any split
    config = CONFIGS["kd-spread"]
    X, y = tied_data(2, n=N - 20)
    junk = np.random.default_rng(3).normal(size=(20, 4)).astype(np.float32) * 100
    Xp = np.concatenate([X, junk])
    yp = np.concatenate([y, np.zeros(20, int)])
    weight = np.r_[np.ones(N - 20), np.zeros(20)]
    tree, _ = grow_tree(Xp, yp, weight, config)
    assert_same_tree(tree, numpy_tree(X, y, config), X)


@pytest.mark.parametrize("config", configs(["cart-gini", "kd-spread"]))
def test_vmap_over_weights_and_datasets_equals_a_loop(config):
    # kd-spread: the search of each node's quartiles runs as many halvings as its largest node
    # needs, a number that differs between the batch's members. The KD scale (a weighted
    # standard deviation) is a reduction that XLA orders differently in a batch: the scales and
    # thresholds may differ in the last bit, the tree's structure and counts may not
    data = [tied_data(seed) for seed in range(3)]
    X = np.stack([d[0] for d in data])
    y = np.stack([d[1] for d in data])
    weight = np.random.default_rng(0).poisson(1.0, size=(3, N)).astype(np.float32)
    batched, info = jax.jit(jax.vmap(lambda a, b, c: grow_tree(a, b, c, config)))(X, y, weight)
    assert info.capped.shape == (3,)
    for k in range(3):
        single, _ = grow_tree(X[k], y[k], weight[k], config)
        for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(single),
                                jax.tree.leaves(batched)):
            if config.partition == "kd" and jax.tree_util.keystr(path) in (".threshold",
                                                                           ".inv_scale"):
                np.testing.assert_allclose(np.asarray(a), np.asarray(b)[k], rtol=1e-6)
            else:
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[k])


def test_a_constant_column_is_not_rescaled():
    """A KD tree divides each column by its weighted standard deviation, and a constant column
    by 1, as the NumPy builder does: its float32 mean need not equal its value (0.1 in 7 rows
    gave a standard deviation of 7e-9 and a scale of 1.3e8)."""
    config = dataclasses.replace(CONFIGS["kd-spread"], max_depth=2)
    X = np.random.default_rng(7).normal(size=(7, 3)).astype(np.float32)
    X[:, 1] = 0.1
    tree, _ = grow_tree(X, np.zeros(7, int), np.ones(7), config)
    expected = jaxtree.kd_tree(X, 2, split="spread", layout="compact")
    assert float(tree.inv_scale[1]) == 1.0
    np.testing.assert_allclose(np.asarray(tree.inv_scale), np.asarray(expected.inv_scale),
                               rtol=1e-6)


@pytest.mark.parametrize("partition", ["dyadic", "kd"])
def test_repeated_points_of_two_labels_split_to_the_depth_limit_as_in_numpy(partition):
    """Copies of one point with two labels are split down to the depth limit (one child empty
    at every level); levels whose candidates are all such nodes skip the widest-spread search
    and still grow the NumPy builder's tree."""
    rng = np.random.default_rng(5)
    points = rng.normal(size=(4, 3)).astype(np.float32)
    X = np.concatenate([points[rng.integers(0, 4, size=40)],
                        rng.normal(size=(20, 3)).astype(np.float32)])
    y = rng.integers(0, 2, size=60)
    config = GrowConfig(partition=partition, split="spread", max_depth=24, width=32,
                        num_classes=2)
    tree, info = grow_tree(X, y, np.ones(60), config)
    assert int(info.capped) == 0 and int(info.depth) == config.max_depth
    assert_same_tree(tree, numpy_tree(X, y, config), X)


def test_rows_kept_in_position_order_equal_a_sort_and_give_its_order_statistics():
    """The widest-spread rule keeps each column's rows sorted by (position, value) from level to
    level by a stable partition (``_children_in_order``) and searches each position's own rows:
    the order is a fresh sort's, and the weighted quantiles of every (position, column) equal
    those of the sort-based search (``_segments``) — fractional weights, zero weights, ties."""
    from jaxtree import grow
    rng = np.random.default_rng(0)
    n, dims, W = 150, 3, 16
    Z = jnp.asarray(rng.integers(0, 6, size=(n, dims)), jnp.float32)     # many ties
    weight = jnp.asarray(rng.random(n) * (rng.random(n) > 0.2), jnp.float32)
    rank, values = grow._column_order(Z)
    pos = jnp.where(weight > 0, 0, W).astype(jnp.int32)
    by_position = grow._rows_by_value(rank, pos, W)
    for _ in range(3):                       # split every node at random, some rows to leaves
        split = rng.random(W) < 0.7
        node_rank = np.cumsum(split) - 1
        child = 2 * node_rank + rng.integers(0, 2, size=W)
        p = np.asarray(pos)
        placed = p < W
        nxt = np.full(n, W)
        nxt[placed] = np.where(split[p[placed]] & (child[p[placed]] < W), child[p[placed]], W)
        pos = jnp.asarray(nxt, jnp.int32)
        by_position = grow._children_in_order(by_position, pos, W)
        for column in range(dims):
            expected = np.lexsort((np.asarray(rank[column]), nxt))
            kept = nxt[expected] < W            # the rows of no node (last) may be in any order
            np.testing.assert_array_equal(np.asarray(by_position[column])[kept],
                                          expected[kept])
        blocks = grow._position_blocks(by_position, rank, weight, pos, W)
        for fraction, rounding in ((0.25, jnp.floor), (0.5, jnp.floor), (0.75, jnp.ceil)):
            rank_of = lambda c: rounding(fraction * (c - 1))  # noqa: E731
            searched = grow._block_statistic(blocks, values, rank_of,
                                             jnp.arange(dims)[:, None])
            for column in range(dims):
                ranks, cumulative, before, count = grow._segments(pos, rank[column], weight, W)
                sorted_value = values[column, grow._order_statistic(
                    ranks, cumulative, before, rank_of(count))]
                has_rows = np.asarray(count) > 0
                np.testing.assert_array_equal(np.asarray(searched[column])[has_rows],
                                              np.asarray(sorted_value)[has_rows])


def test_width_cap_turns_nodes_into_leaves_and_counts_them():
    config = GrowConfig(partition="dyadic", max_depth=DEPTH, width=4, num_classes=3)
    X, y = tied_data(0)
    tree, info = grow_tree(X, y, np.ones(N), config)
    # independently: route the rows and count the nodes that NumPy's rule would split
    path, on_path = jaxtree.route(tree, X)
    internal = np.asarray(tree.internal)
    expected = 0
    for slot in np.unique(np.asarray(path)[np.asarray(on_path)]):
        rows = np.flatnonzero((np.asarray(path) == slot).any(axis=1))
        level = slot // config.width
        wanted = (len(rows) >= config.min_split and len(np.unique(y[rows])) > 1
                  and level < config.max_depth)
        assert internal[slot] <= wanted
        expected += wanted and not internal[slot]
    assert expected > 0 and int(info.capped) == expected
    per_level = internal.reshape(config.max_depth + 1, config.width).sum(axis=1)
    assert per_level.max() == config.width // 2


def test_max_features_draws_features_per_node_reproducibly():
    config = config_for("cart", max_features=2)
    X, y = tied_data(4)
    X[:, 3] = np.random.default_rng(5).normal(size=N)
    grown = [grow_tree(X, y, np.ones(N), config, key=jax.random.key(seed))[0]
             for seed in (0, 0, 1)]
    full, _ = grow_tree(X, y, np.ones(N), config_for("cart"))
    features = [np.asarray(t.feature)[np.asarray(t.internal)] for t in grown]
    for name in ("feature", "threshold", "internal"):      # one key, one tree
        np.testing.assert_array_equal(np.asarray(getattr(grown[0], name)),
                                      np.asarray(getattr(grown[1], name)))
    assert not np.array_equal(np.asarray(grown[0].feature), np.asarray(grown[2].feature))
    assert not np.array_equal(np.asarray(grown[0].feature), np.asarray(full.feature))
    assert set(np.concatenate(features)) == {0, 1, 2, 3}


def test_a_randomized_tree_breaks_ties_between_features_by_its_key():
    """Two copies of one column tie at every node. A tree with feature subsets breaks those ties
    by its key (the trees of a forest must not all pick the same copy); without subsets the key
    changes nothing (ties by ``random_state``, as ``cart_tree``'s)."""
    rng = np.random.default_rng(0)
    column = rng.normal(size=200)
    X = np.stack([column, column], axis=1).astype(np.float32)
    y = (column > 0.3).astype(int)
    subsets = config_for("cart", max_features=2)
    roots = {int(grow_tree(X, y, np.ones(200), subsets, key=jax.random.key(seed))[0].feature[0])
             for seed in range(16)}
    assert roots == {0, 1}
    plain = config_for("cart")
    roots = {int(grow_tree(X, y, np.ones(200), plain, key=jax.random.key(seed))[0].feature[0])
             for seed in range(16)}
    assert len(roots) == 1


@pytest.mark.slow   # ~23 s; test_max_features_draws_features_per_node_reproducibly stays fast
def test_random_splitter_cuts_inside_each_node_and_splits_what_best_splits():
    """splitter='random': every cut is a bin edge strictly inside the node's values (both
    children hold training rows); over all features it leaves impure only what the best
    splitter leaves impure (rows in one bin of every feature); one key gives one tree, another
    key another; presort changes nothing."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 4)).astype(np.float32)
    y = (X[:, 0] * X[:, 1] > 0).astype(int) + (X[:, 2] > 0.5).astype(int)
    weight = rng.poisson(1.0, 300).astype(np.float32)
    config = GrowConfig(partition="cart", max_depth=30, width=256, num_classes=3, bins=16,
                        splitter="random", max_features=2)
    key = jax.random.key(0)
    tree, info = grow_tree(X, y, weight, config, key=key)
    again, _ = grow_tree(X, y, weight, config, key=key,
                         presorted=jaxtree.grow.presort(X, config))
    other, _ = grow_tree(X, y, weight, config, key=jax.random.key(1))
    best, _ = grow_tree(X, y, weight, dataclasses.replace(config, splitter="best"), key=key)
    assert int(info.capped) == 0
    for name in ("feature", "threshold", "internal"):
        np.testing.assert_array_equal(np.asarray(getattr(tree, name)),
                                      np.asarray(getattr(again, name)))
    assert not np.array_equal(np.asarray(tree.threshold), np.asarray(other.threshold))
    assert not np.array_equal(np.asarray(tree.threshold), np.asarray(best.threshold))
    stats = jaxtree.node_stats(tree, X, y, 3, sample_weight=weight)
    counts = np.asarray(stats.counts).sum(axis=1)
    internal = np.asarray(tree.internal)
    left = np.asarray(tree.left_child)[internal]
    assert (counts[left] > 0).all() and (counts[left + 1] > 0).all()

    def impure_weight(tree):
        counts = np.asarray(jaxtree.node_stats(tree, X, y, 3, sample_weight=weight).counts)
        impure = ~np.asarray(tree.internal) & ((counts > 0).sum(axis=1) > 1)
        return counts[impure].sum()

    everything = dataclasses.replace(config, max_features=None)
    random_all, _ = grow_tree(X, y, weight, everything, key=key)
    best_all, _ = grow_tree(X, y, weight, dataclasses.replace(everything, splitter="best"))
    assert impure_weight(random_all) == impure_weight(best_all) < 0.05 * weight.sum()


def test_exports_for_accelerators_without_host_code():
    config = CONFIGS["kd-spread"]
    X, y = tied_data(0)
    single = jax.jit(lambda a, b, c: grow_tree(a, b, c, config))
    batched = jax.jit(jax.vmap(lambda a, b, c: grow_tree(a, b, c, config), in_axes=(None, None, 0)))
    for fn, weight in ((single, np.ones(N, np.float32)), (batched, np.ones((4, N), np.float32))):
        text = jax.export.export(fn, platforms=["cuda", "tpu"])(X, y, weight).mlir_module()
        assert "stablehlo.sort" in text
        assert "callback" not in text and "custom_call" not in text


@pytest.mark.parametrize("name, partition", [
    ("wine", "kd"),
    pytest.param("wine", "cart", marks=pytest.mark.slow),
    pytest.param("spam", "dyadic", marks=pytest.mark.slow),
    pytest.param("spam", "cart", marks=pytest.mark.slow),
])
def test_bundled_datasets(name, partition):
    X, y = datasets.load(name)
    rows = np.random.default_rng(0).permutation(len(y))[:400]
    X, y = X[rows], y[rows]
    config = GrowConfig(partition=partition, max_depth=8, width=256,
                        num_classes=int(y.max()) + 1, split="spread", bins=16)
    tree, info = grow_tree(X, y, np.ones(len(y)), config)
    assert int(info.capped) == 0
    assert_same_tree(tree, numpy_tree(X, y, config), X)


@pytest.mark.parametrize("field, value", [
    ("partition", "oblique"), ("max_depth", -1), ("width", 3), ("width", 0),
    ("num_classes", 0), ("min_split", 1), ("split", "range"), ("criterion", "log_loss"),
    ("bins", 1), ("max_features", 0), ("random_state", 1.5), ("stop_pure", 1),
    ("splitter", "extra"), ("splitter", "random")])
def test_bad_config_names_the_field(field, value):
    config = GrowConfig(**{field: value})
    with pytest.raises(ValueError, match=field):
        check_grow_config(config)
    with pytest.raises(ValueError, match=field):
        grow_tree(np.zeros((4, 2)), np.zeros(4, int), np.ones(4), config)


def test_bad_arguments_before_tracing():
    X, y = tied_data(0, n=10)
    config = config_for("cart", max_features=2)
    with pytest.raises(ValueError, match="key"):
        grow_tree(X, y, np.ones(10), config)
    with pytest.raises(ValueError, match="max_features"):
        grow_tree(X, y, np.ones(10), config_for("cart", max_features=5), key=jax.random.key(0))
    with pytest.raises(ValueError, match="max_features"):
        check_grow_config(config_for("kd", max_features=2))
    with pytest.raises(ValueError, match="weight"):
        grow_tree(X, y, np.ones(9), config_for("cart"))
    with pytest.raises(ValueError, match="X"):
        grow_tree(X[:, 0], y, np.ones(10), config_for("cart"))
    with pytest.raises(ValueError, match="config"):
        grow_tree(X, y, np.ones(10), {"partition": "kd"})


@pytest.mark.slow
def test_grows_under_x64():
    # float64 trees (x64 on) match the NumPy builder as well; float32 is every other test's case
    X, y = tied_data(0)
    config = CONFIGS["kd-cycle"]
    with jax.enable_x64(True):
        tree, _ = grow_tree(X, y, np.ones(N), config)
        assert tree.threshold.dtype == jnp.float64
        assert_same_tree(tree, numpy_tree(X, y, config), X)


@pytest.mark.parametrize("options", [{}, pytest.param({"missing": True}, marks=pytest.mark.slow),
                                     pytest.param({"max_features": 2}, marks=pytest.mark.slow)])
def test_histograms_of_fewer_bins_grow_the_same_tree_on_few_distinct_values(options):
    """max_distinct (a bound on the columns' distinct values): the histograms hold only that
    many bins, and the tree is the one of all 64 (integer columns of 3-12 values, one of them
    skewed so that quantile edges repeat; NaN in a tenth of the values with ``missing``)."""
    rng = np.random.default_rng(11)
    n = 400
    X = np.stack([rng.integers(0, 3, n), rng.integers(0, 12, n), rng.integers(0, 7, n),
                  np.minimum(rng.geometric(0.5, n), 9)], axis=1).astype(np.float32)
    y = ((X[:, 1] > 5).astype(int) + (X[:, 3] > 2) + (rng.random(n) < 0.1)) % 3
    if options.get("missing"):
        X[rng.random(X.shape) < 0.1] = np.nan
    weight = rng.poisson(1.0, n).astype(np.float32)
    bound = jaxtree.grow.distinct_bound(X, 64)
    assert bound == 16
    config = GrowConfig(partition="cart", max_depth=12, width=128, num_classes=3, bins=64,
                        **options)
    key = jax.random.key(3) if "max_features" in options else None
    full, info = grow_tree(X, y, weight, config, key)
    fewer, _ = grow_tree(X, y, weight, dataclasses.replace(config, max_distinct=bound), key)
    assert int(info.capped) == 0 and int(np.asarray(full.internal).sum()) > 10
    for name in ("feature", "threshold", "internal", "missing_right"):
        np.testing.assert_array_equal(np.asarray(getattr(fewer, name)),
                                      np.asarray(getattr(full, name)))
    # the builder's class counts (NaN routed by missing_right too) are the routed rows'
    np.testing.assert_array_equal(
        np.asarray(info.counts),
        np.asarray(jaxtree.node_stats(full, X, y, 3, sample_weight=weight).counts))


def test_distinct_bound_rounds_up_to_a_power_of_two_and_gives_up_at_bins():
    column = lambda values: np.asarray(values, np.float64)[:, None]  # noqa: E731
    assert jaxtree.grow.distinct_bound(column([1, 1, 1]), 64) == 2
    assert jaxtree.grow.distinct_bound(column(np.arange(17) % 16), 64) == 16
    assert jaxtree.grow.distinct_bound(column(np.arange(17)), 64) == 32
    assert jaxtree.grow.distinct_bound(column([0, np.nan, 1, np.nan]), 64) == 2
    assert jaxtree.grow.distinct_bound(column(np.arange(64)), 64) is None
    with pytest.raises(ValueError, match="max_distinct"):
        check_grow_config(GrowConfig(partition="cart", max_distinct=1))


def test_largest_picks_top_k_columns_as_lax_top_k():
    """The forest's feature subsets: the k largest hashes of each row, equal values to the
    smaller column first, exactly as ``lax.top_k`` (which sorts every row on a CPU)."""
    rng = np.random.default_rng(0)
    for dims, k in [(16, 4), (57, 7), (5, 5), (3, 1)]:
        values = jnp.asarray(rng.integers(0, 40, (200, dims)), jnp.int32)     # many ties
        np.testing.assert_array_equal(np.asarray(jaxtree.grow._largest(values, k)),
                                      np.asarray(jax.lax.top_k(values, k)[1]))
