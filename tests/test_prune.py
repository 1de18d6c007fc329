"""Pruning baselines against brute force (every pruning enumerated) and plain recursive
references."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtree
from jaxtree import prune
from test_engine import pruning_leaf_sets

DEPTH = 4  # 677 prunings of a complete depth-4 tree: enumerable


# ---------------------------------------------------------------------------------------------
# plain references, one node at a time (heap layout: children 2i+1, 2i+2)
def random_tree(seed, num_classes=2, n=60, depth=DEPTH):
    """A KD tree on random data (varied shapes: purity and min_split stops, empty cells)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)).astype(np.float32)
    X[rng.random(n) < 0.2, 0] = 0.0  # duplicates make empty cells
    y = ((X[:, 0] + rng.normal(scale=1.0, size=n)) > 0).astype(np.int32)
    if num_classes > 2:
        y = rng.integers(0, num_classes, size=n).astype(np.int32)
    split = "spread" if seed % 2 else "cycle"
    tree = jaxtree.kd_tree(X, depth, min_split=int(rng.integers(2, 6)), y=y, split=split)
    return tree, X, y


def as_mask(leaves, num_nodes):
    mask = np.zeros(num_nodes, bool)
    mask[list(leaves)] = True
    return mask


def local_reference(internal, errors, nonempty, slack, node=0):
    """Kearns–Mansour-style local test written plainly: returns (errors, size, leaves)."""
    if not internal[node]:
        return errors[node], int(nonempty[node]), {node}
    el, sl, ll = local_reference(internal, errors, nonempty, slack, 2 * node + 1)
    er, sr, lr = local_reference(internal, errors, nonempty, slack, 2 * node + 2)
    err_t, size_t = el + er, sl + sr
    if errors[node] <= err_t + slack(node, size_t):
        return errors[node], int(nonempty[node]), {node}
    return err_t, size_t, ll | lr


def stats_arrays(stats):
    return (np.asarray(stats.errors, np.float64), np.asarray(stats.total, np.float64))


# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
def test_c1_and_sn_equal_brute_force_minimum(seed):
    # the decisions compare sums of counts and penalties; float64 adds nothing but compile time
    tree, X, y = random_tree(seed)
    stats = jaxtree.node_stats(tree, X, y, 2)
    internal = np.asarray(tree.internal)
    errors, total = stats_arrays(stats)
    depth = np.asarray(tree.node_depth)
    everything = pruning_leaf_sets(internal)
    for lam in [0.0, 0.3, 1.0, 2.5, 7.0]:
        for name, cost in [("c1", prune.c1_leaf_cost(stats, lam)),
                           ("sn", prune.sn_leaf_cost(stats, tree.node_depth, lam))]:
            mask = np.asarray(jaxtree.best_pruning(cost, tree.internal, layout=tree.layout))
            if name == "c1":
                plain = errors + lam * (total > 0)
            else:
                plain = errors + lam * np.sqrt(np.maximum(total, depth) * depth)
            best = min(sum(plain[a] for a in leaves) for leaves in everything)
            chosen = frozenset(np.flatnonzero(mask))
            assert chosen in everything, name
            assert sum(plain[a] for a in chosen) == pytest.approx(best, rel=1e-5, abs=1e-4), name


@pytest.mark.parametrize("seed", range(4))
def test_min_error_per_size_equals_brute_force(seed):
    # integer errors and sizes: float32 is exact, one precision suffices
    tree, X, y = random_tree(seed, num_classes=3 if seed == 3 else 2)
    num_classes = 3 if seed == 3 else 2
    stats = jaxtree.node_stats(tree, X, y, num_classes)
    rng = np.random.default_rng(100 + seed)
    X2 = rng.normal(size=(40, 3)).astype(np.float32)
    y2 = rng.integers(0, num_classes, size=40)
    counts2 = jaxtree.node_stats(tree, X2, y2, num_classes).counts
    err2 = np.asarray(prune.holdout_errors(counts2, stats.label), np.float64)
    internal = np.asarray(tree.internal)
    errors, total = stats_arrays(stats)
    size_cap = prune.num_nonempty_leaves(stats, tree.internal)
    # one static table width for every tree (one compilation); sizes past size_cap are inf
    table = prune.min_error_per_size(stats.errors, stats.total > 0, tree.internal, 2 ** DEPTH,
                                     holdout_err=prune.holdout_errors(counts2, stats.label))
    curve = np.asarray(table.errors)
    everything = pruning_leaf_sets(internal)
    assert np.all(np.isinf(curve[size_cap + 1:])) and np.isfinite(curve[size_cap])
    sized = [(sum(total[a] > 0 for a in leaves), leaves) for leaves in everything]
    for s in range(size_cap + 1):
        options = [leaves for size, leaves in sized if size == s]
        expected = min((sum(errors[a] for a in leaves) for leaves in options), default=math.inf)
        assert curve[s] == expected, s
        if options:
            mask = np.asarray(prune.pruning_of_size(table, s, tree.internal))
            chosen = frozenset(np.flatnonzero(mask))
            assert chosen in options, s
            assert sum(errors[a] for a in chosen) == expected
            assert float(table.holdout[s]) == sum(err2[a] for a in chosen)
    # C1's pruning lies on this curve: min_s err(s) + λ s is C1's optimum
    for lam in [0.2, 1.5]:
        _, cost = jaxtree.best_pruning_and_cost(prune.c1_leaf_cost(stats, lam), tree.internal)
        assert float(cost) == pytest.approx(np.min(curve + lam * np.arange(len(curve))))


@pytest.mark.parametrize("seed", range(3))
def test_local_tests_equal_recursive_reference(seed):
    tree, X, y = random_tree(seed, n=120)
    stats = jaxtree.node_stats(tree, X, y, 2)
    internal = np.asarray(tree.internal) & np.asarray(jaxtree.tree_membership(tree.internal))
    errors, total = stats_arrays(stats)
    depth = np.asarray(tree.node_depth)
    n = total[0]
    log_h = prune.log_num_tests_of(tree)
    for c in [0.0, 0.05, 0.2, 1.0]:
        def km(v, s):
            m = total[v]
            rate = c * math.sqrt(((depth[v] + s) * log_h + math.log(max(m, 1) / 0.05)) / max(m, 1))
            return m * rate

        def opt(v, s):
            scale = max(5000 / n, 1)
            k = (depth[v] + 2) * math.log(n * scale) + math.log(1 / 0.05)
            return c * math.sqrt(total[v] * k / scale)

        for slack, fn in [(km, lambda: prune.km_pruning(tree, stats, c)),
                          (opt, lambda: prune.optimistic_pruning(tree, stats, c))]:
            _, _, leaves = local_reference(internal, errors, total > 0, slack)
            mask = np.asarray(fn())
            assert set(np.flatnonzero(mask)) == leaves, c


@pytest.mark.parametrize("seed", range(3))
def test_rep_equals_recursive_reference_and_never_increases_holdout_error(seed):
    tree, X, y = random_tree(seed)
    stats = jaxtree.node_stats(tree, X, y, 2)
    rng = np.random.default_rng(7 + seed)
    X2 = rng.normal(size=(50, 3)).astype(np.float32)
    y2 = ((X2[:, 0] + rng.normal(size=50)) > 0).astype(np.int32)
    err2 = prune.holdout_errors(jaxtree.node_stats(tree, X2, y2, 2).counts, stats.label)
    internal = np.asarray(tree.internal)
    plain = np.asarray(err2, np.float64)
    _, _, leaves = local_reference(internal, plain, np.ones_like(plain, bool), lambda v, s: 0.0)
    mask = prune.rep_pruning(err2, tree.internal)
    assert set(np.flatnonzero(np.asarray(mask))) == leaves
    t0_leaves = jaxtree.tree_membership(tree.internal) & ~tree.internal
    assert prune.pruning_errors(mask, err2) <= prune.pruning_errors(t0_leaves, err2)
    # and it is the S2 error of the tree's own predictions
    path = np.asarray(jaxtree.route(tree, X2)[0])
    leaf = path[np.arange(len(y2)), np.asarray(mask)[path].argmax(1)]
    assert int(np.sum(np.asarray(stats.label)[leaf] != y2)) == int(prune.pruning_errors(mask, err2))


def test_c1_limits(precision):
    tree, X, y = random_tree(5, n=200)
    stats = jaxtree.node_stats(tree, X, y, 2)
    internal = np.asarray(tree.internal) & np.asarray(jaxtree.tree_membership(tree.internal))
    errors, _ = stats_arrays(stats)
    # λ → 0: T0 minus the splits that do not reduce errors below them
    below = np.zeros_like(errors)

    def t0_errors(v):
        below[v] = errors[v] if not internal[v] else t0_errors(2 * v + 1) + t0_errors(2 * v + 2)
        return below[v]

    t0_errors(0)
    _, _, expected = local_reference(internal, errors, np.ones_like(errors, bool),
                                     lambda v, s: 0.0)
    assert all(errors[v] == below[v] or not internal[v] for v in expected)
    for lam in [0.0, 1e-4]:
        mask = jaxtree.best_pruning(prune.c1_leaf_cost(stats, lam), tree.internal)
        assert set(np.flatnonzero(np.asarray(mask))) == expected
    huge = jaxtree.best_pruning(prune.c1_leaf_cost(stats, 1e6), tree.internal)
    assert np.flatnonzero(np.asarray(huge)).tolist() == [0]
    sn_huge = jaxtree.best_pruning(prune.sn_leaf_cost(stats, tree.node_depth, 1e6), tree.internal)
    assert np.flatnonzero(np.asarray(sn_huge)).tolist() == [0]


def test_penalty_grid_is_one_vmap():
    tree, X, y = random_tree(1, n=150)
    stats = jaxtree.node_stats(tree, X, y, 2)
    lams = jnp.asarray(2.0 ** np.linspace(-8, 6, 10))
    log_h = prune.log_num_tests_of(tree)

    def all_methods(lam):  # one additive method and one local test
        return jnp.stack([
            jaxtree.best_pruning(prune.c1_leaf_cost(stats, lam), tree.internal),
            prune.km_pruning(tree, stats, lam / 64, log_num_tests=log_h),
        ])

    batched = np.asarray(jax.jit(jax.vmap(all_methods))(lams))
    one = jax.jit(all_methods)
    looped = np.stack([np.asarray(one(lam)) for lam in lams])
    np.testing.assert_array_equal(batched, looped)
    # SRM selection over a grid of c is a vmap too
    table = prune.min_error_per_size(stats.errors, stats.total > 0, tree.internal, 2 ** DEPTH)
    n = float(stats.num_samples)
    chosen = jax.vmap(lambda c: prune.srm_select(table.errors, n, c, 0.05, log_h))(lams)
    assert [int(s) for s in chosen] == [int(prune.srm_select(table.errors, n, c, 0.05, log_h))
                                        for c in lams]
    assert int(chosen[0]) >= int(chosen[-1]) >= 1
    weight, label = prune.min_size_srm_votes(tree, stats, {"c": lams[3]}, max_size=2 ** DEPTH)
    expected = prune.pruning_of_size(table, chosen[3], tree.internal)
    np.testing.assert_array_equal(np.asarray(weight) > 0, np.asarray(expected))
    np.testing.assert_array_equal(label, stats.label)


def estimator_data():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 4)).astype(np.float32)
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=300) > 0, "yes", "no")
    return X, y


@pytest.mark.parametrize("method", ["c1", "sn", "km", "optimistic", "rep", "min_size"])
def test_estimator_predicts_its_pruning_leaf_label(method):
    X, y = estimator_data()
    model = jaxtree.PrunedTreeClassifier(method=method, max_depth=5, lam=2.0, c=0.05,
                                         selection="cv")
    model.fit(X, y)
    mask = np.asarray(model.leaf_mask_)
    assert model.n_leaves_ == mask.sum() >= 1
    path, on_path = (np.asarray(a) for a in jaxtree.route(model.tree_, X))
    leaf = path[np.arange(len(X)), mask[path].argmax(1)]
    assert np.all(mask[path].sum(1) >= 1)
    expected = model.classes_[np.asarray(model.stats_.label)[leaf]]
    np.testing.assert_array_equal(model.predict(X), expected)
    assert model.score(X, y) > 0.7


def test_estimator_min_size_selection_and_errors():
    X, y = estimator_data()  # same shapes as above: no new compilations
    for selection in ["srm", "cv"]:
        model = jaxtree.PrunedTreeClassifier(method="min_size", selection=selection,
                                             max_depth=5, c=0.1).fit(X, y)
        nonempty = np.asarray(model.stats_.total) > 0
        assert (np.asarray(model.leaf_mask_) & nonempty).sum() == model.size_
        assert np.isfinite(model.errors_per_size_[model.size_])
    with pytest.raises(ValueError, match="method"):
        jaxtree.PrunedTreeClassifier(method="nope").fit(X, y)
    with pytest.raises(ValueError, match="selection"):
        jaxtree.PrunedTreeClassifier(method="min_size", selection="aic").fit(X, y)
    with pytest.raises(ValueError, match="holdout"):
        jaxtree.PrunedTreeClassifier(method="rep", holdout=1.5).fit(X, y)


def test_level_passes_agree_on_the_compact_layout():
    """The knapsack, its back-tracking and the local tests only use the layout interface: on the
    same T0 the compact layout gives the same predictions and the same errors-per-size curve."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3)).astype(np.float32)
    y = ((X[:, 0] + 0.7 * rng.normal(size=120)) > 0).astype(np.int32)
    results = []
    for layout in ["complete", "compact"]:
        tree = jaxtree.kd_tree(X, DEPTH, y=y, split="spread", layout=layout)
        stats = jaxtree.node_stats(tree, X, y, 2)
        path, on_path = jaxtree.route(tree, X)
        table = prune.min_error_per_size(stats.errors, stats.total > 0, tree.internal, 2 ** DEPTH,
                                         layout=tree.layout)
        masks = [prune.pruning_of_size(table, s, tree.internal, tree.layout) for s in (2, 5)]
        masks += [prune.km_pruning(tree, stats, c) for c in (0.05, 0.3)]
        leaf_labels = [np.asarray(jaxtree.scores_from_paths(
            path, on_path, stats.label, jnp.where(m, 0.0, -jnp.inf), 2)) for m in masks]
        results.append((np.asarray(table.errors), leaf_labels))
    (curve_a, labels_a), (curve_b, labels_b) = results
    np.testing.assert_array_equal(curve_a, curve_b)
    for a, b in zip(labels_a, labels_b):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------------
# the knapsack against a plain recursion with its tie rules (so masks are exactly determined)
def knapsack_reference(levels, errors, holdout, nonempty, node=(0, 0)):
    """``{size: (errors, holdout, leaves)}`` of the subtree at ``node`` = (level, index), written
    plainly: the best split of each size keeps the smallest left size among equal errors, and a
    node becomes a leaf when its own errors are <= its best split's."""
    level, index = node
    own_size = int(nonempty[node])
    own = (errors[node], holdout[node], frozenset([node]))
    if not levels[level].internal[index]:
        return {own_size: own}
    child = 2 * (np.cumsum(levels[level].internal)[index] - 1)
    left = knapsack_reference(levels, errors, holdout, nonempty, (level + 1, child))
    right = knapsack_reference(levels, errors, holdout, nonempty, (level + 1, child + 1))
    table = {}
    for i in sorted(left):
        for j in right:
            err = left[i][0] + right[j][0]
            if i + j not in table or err < table[i + j][0]:
                table[i + j] = (err, left[i][1] + right[j][1], left[i][2] | right[j][2])
    if own_size not in table or own[0] <= table[own_size][0]:
        table[own_size] = own
    return table


def random_knapsack_inputs(seed, levels, tree, slots):
    """Random integer errors of two samples at every node, and non-empty flags as node
    statistics give them (a node is non-empty iff a leaf below it is): ``{(level, index): v}``
    dicts and the same as flat arrays in ``tree``'s layout."""
    rng = np.random.default_rng(seed)
    nodes = [(l, k) for l, level in enumerate(levels) for k in range(len(level.internal))]
    errors = {a: float(rng.integers(0, 6)) for a in nodes}
    holdout = {a: float(rng.integers(0, 6)) for a in nodes}
    nonempty = {}
    for level in reversed(range(len(levels))):
        for index, split in enumerate(levels[level].internal):
            child = 2 * (np.cumsum(levels[level].internal)[index] - 1)
            nonempty[(level, index)] = (nonempty[(level + 1, child)] or
                                        nonempty[(level + 1, child + 1)]) if split \
                else bool(rng.random() < 0.7)
    flat = [np.zeros(tree.layout.num_nodes, dtype) for dtype in (np.float32, np.float32, bool)]
    for values, out in zip((errors, holdout, nonempty), flat):
        for (level, index), v in values.items():
            out[slots[level][index]] = v
    return (errors, holdout, nonempty), flat


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("layout", ["complete", "compact"])
def test_min_error_per_size_and_its_prunings_equal_a_plain_recursion(seed, layout, precision):
    from jaxtree.build import level_slots
    from jaxtree.compact import pad_compact
    from jaxtree.layout import pad_complete
    from test_compact import packed, random_levels
    levels = random_levels(seed, 5, p_split=0.75)
    tree = packed(levels, layout)
    # one shape per layout for every tree: one compilation
    tree = (pad_complete(tree, 5, tree.num_features) if layout == "complete"
            else pad_compact(tree, 6, 32))
    slots = level_slots(levels, tree.layout)
    (errors, holdout, nonempty), (err, err2, flags) = random_knapsack_inputs(seed, levels, tree,
                                                                             slots)
    expected = knapsack_reference(levels, errors, holdout, nonempty)
    max_size = 2 ** 5   # one table width for every tree
    table = prune.min_error_per_size(jnp.asarray(err, precision), jnp.asarray(flags),
                                     tree.internal, max_size,
                                     holdout_err=jnp.asarray(err2, precision), layout=tree.layout)
    curve, curve2 = np.asarray(table.errors), np.asarray(table.holdout)
    assert curve.shape == (max_size + 1,)
    for s in range(max_size + 1):
        if s not in expected:
            assert np.isinf(curve[s]) and np.isinf(curve2[s]), s
            continue
        e, h, leaves = expected[s]
        assert (curve[s], curve2[s]) == (e, h), s
        mask = np.asarray(prune.pruning_of_size(table, s, tree.internal, tree.layout))
        assert set(np.flatnonzero(mask)) == {slots[l][k] for l, k in leaves}, s
    # a size without a pruning gives the root alone
    missing = next(s for s in range(max_size + 1) if s not in expected)
    mask = np.asarray(prune.pruning_of_size(table, missing, tree.internal, tree.layout))
    assert np.flatnonzero(mask).tolist() == [0]


def test_min_error_per_size_needs_a_table_for_every_leaf():
    tree, X, y = random_tree(0)
    stats = jaxtree.node_stats(tree, X, y, 2)
    leaves = prune.num_nonempty_leaves(stats, tree.internal)
    with pytest.raises(ValueError, match="max_size"):
        prune.min_error_per_size(stats.errors, stats.total > 0, tree.internal, leaves - 1)
    with pytest.raises(ValueError, match="max_size"):
        prune.min_error_per_size(stats.errors, stats.total > 0, tree.internal, 2.5)
    # under jit the arrays are not known: a short table is exact, or NaN where a level's
    # tables do not fit in their row (S = 1: a level with 3 non-empty nodes)
    full = np.asarray(prune.min_error_per_size(stats.errors, stats.total > 0, tree.internal,
                                               2 ** DEPTH).errors)
    for size in [leaves - 1, 1]:
        short = np.asarray(jax.jit(lambda e, n, i: prune.min_error_per_size(e, n, i, size).errors)(
            stats.errors, stats.total > 0, tree.internal))
        assert np.array_equal(short, full[:size + 1]) != np.all(np.isnan(short)), size
        assert np.all(np.isnan(short)) == (size == 1), size


@pytest.mark.parametrize("seed, x64", [(0, False), pytest.param(1, True, marks=pytest.mark.slow),
                                       pytest.param(2, False, marks=pytest.mark.slow),
                                       pytest.param(2, True, marks=pytest.mark.slow)])
def test_root_penalty_prunes_to_the_root(seed, x64):
    """At ``root_penalty`` (times 1.001 for rounding) and above, every penalized method keeps
    the root alone; 2^-14 of it keeps more on these trees (the search range is not empty).
    Seed 2 is a 3-class problem; float64 runs in the slow suite."""
    with jax.enable_x64(x64):
        _check_root_penalty(seed)


def _check_root_penalty(seed):
    tree, X, y = random_tree(seed, num_classes=3 if seed == 2 else 2, n=120)
    stats = jaxtree.node_stats(tree, X, y, 3 if seed == 2 else 2)
    log_h = float(prune.log_num_tests_of(tree))
    root_only = np.zeros(tree.num_nodes, bool)
    root_only[0] = True
    table = prune.min_error_per_size(stats.errors, stats.total > 0, tree.internal,
                                     prune.size_cap(stats, tree.internal))
    n = stats.num_samples

    def leaves(method, value):
        if method == "c1":
            return jaxtree.best_pruning(prune.c1_leaf_cost(stats, value), tree.internal)
        if method == "sn":
            return jaxtree.best_pruning(prune.sn_leaf_cost(stats, tree.node_depth, value),
                                        tree.internal)
        if method == "km":
            return prune.km_pruning(tree, stats, value, 0.1, log_h)
        if method == "optimistic":
            return prune.optimistic_pruning(tree, stats, value, 0.1, seed != 1)
        size = prune.srm_select(table.errors, n, value, 0.1, log_h)
        return prune.pruning_of_size(table, size, tree.internal)

    for method in prune.PENALTY:
        top = float(prune.root_penalty(method, stats, 0.1, log_h, seed != 1))
        assert top > 0, method
        for factor in (1.001, 10.0):
            np.testing.assert_array_equal(np.asarray(leaves(method, top * factor)), root_only,
                                          err_msg=method)
        assert np.asarray(leaves(method, top * 2.0 ** -14)).sum() > 1, method
    with pytest.raises(ValueError, match="method"):
        prune.root_penalty("rep", stats)
