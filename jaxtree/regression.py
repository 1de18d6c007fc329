"""Regression on the engine (docs/theory/regression.md): the PAC-Bayes tree and cost-complexity
pruning with squared loss.

Functional core (the targets ``y`` standardised, ``z = (y − ȳ)/s``)::

    tree  = jaxtree.regression.regression_tree(X, z)       # CART by variance reduction
    stats = jaxtree.regression.regression_stats(tree, X, z)  # N_A, mean, SSE_A per node
    log_w = jaxtree.pacbayes_log_weights(tree, stats, lam1, lam2)
    pred  = jaxtree.regression.posterior_mean(tree, stats, log_w, X_test)

:class:`RegressionStats` plays the part of the classifier's :class:`jaxtree.NodeStats` for the
potentials: its ``errors`` are the node's sum of squared deviations from its mean in units of the
sample variance (``SSE_A / s²``), so :func:`jaxtree.pacbayes_log_weights` and
:func:`jaxtree.c1_leaf_cost` run on it unchanged, giving
``φ(A) = −λ1·SSE_A/s² − λ2·√N_A − 1[N_A > 0]`` and C1's ``SSE_A/s² + λ·1[N_A > 0]``.

The estimators :class:`PACBayesTreeRegressor` and :class:`PrunedTreeRegressor` are
scikit-learn regressors; their λ's are selected by the paper's two-stage grid on the
validation squared error (:func:`jaxtree.select.paper_search` with :func:`grid_squared_errors`).
Their ``fit`` takes ``sample_weight``, which weighs every count (an integer weight: that many
copies of the row; weight 0: the row left out).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from jaxtree import fitting, prune, select, shapes
from jaxtree.cart import _running_sum, keep_best_cuts
from jaxtree.build import GrownLevel, pack
from jaxtree.engine import best_pruning
from jaxtree.estimators import _naming, _random_key, default_depth
from jaxtree.grow import GrowConfig, grow_tree
from jaxtree.pacbayes import pacbayes_log_weights, predictive_from_paths
from jaxtree.tree import Tree, route
from jaxtree.validation import check_sample_weight, float_dtype

Array = jax.Array


# -- node statistics ----------------------------------------------------------------------------
@functools.partial(jax.tree_util.register_dataclass, data_fields=["total", "mean", "sse"],
                   meta_fields=[])
@dataclasses.dataclass(frozen=True)
class RegressionStats:
    """Statistics of a regression sample on a tree (a pytree).

    Attributes:
      total: ``[nodes]`` float ``N_A`` (weighted number of points).
      mean: ``[nodes]`` float ``ȳ_A``, the node's (weighted) mean target; an empty node takes
        its parent's, an empty root 0.
      sse: ``[nodes]`` float ``SSE_A = Σ_{i ∈ A} w_i (y_i − ȳ_A)²``.

    ``errors`` is ``sse`` (the targets are standardised, so ``SSE_A`` is in units of the sample
    variance) and ``num_samples`` the root's ``N``: the names the classifier's potentials read.
    """

    total: Array
    mean: Array
    sse: Array

    @property
    def errors(self) -> Array:
        return self.sse

    @property
    def num_samples(self) -> Array:
        return self.total[0]


def regression_stats(tree: Tree, X, y, sample_weight=None) -> RegressionStats:
    """:class:`RegressionStats` of ``X`` ``[n, D]``, ``y`` ``[n]`` float (optional ``[n]``
    weights, default ones) on ``tree``."""
    X = jnp.asarray(X, tree.threshold.dtype)
    y = jnp.asarray(y, tree.threshold.dtype)
    weight = jnp.ones_like(y) if sample_weight is None else jnp.asarray(sample_weight, y.dtype)
    return _regression_stats(tree, X, y, weight)


@jax.jit
def _regression_stats(tree, X, y, weight):
    path, on_path = route(tree, X)
    return stats_from_paths(tree, path, on_path, y, weight)


def stats_from_paths(tree: Tree, path: Array, on_path: Array, y: Array,
                     weight: Array) -> RegressionStats:
    """:class:`RegressionStats` of routed points (``path``, ``on_path`` ``[n, levels]``), ``y``
    and ``weight`` ``[n]``: two scatter-adds, the deviations taken from the node means (no
    ``Σy² − (Σy)²/N`` cancellation)."""
    nodes = tree.num_nodes
    w = jnp.where(on_path, weight[:, None], 0).astype(y.dtype)
    total = jnp.zeros(nodes, y.dtype).at[path].add(w)
    sums = jnp.zeros(nodes, y.dtype).at[path].add(w * y[:, None])
    nonempty = total > 0
    own = jnp.where(nonempty, sums / jnp.where(nonempty, total, 1), 0)

    def inherit(x, above):
        own_level, nonempty_level = x
        value = own_level if above is None else jnp.where(nonempty_level, own_level, above)
        return value, value

    mean = tree.layout.fold_down(inherit, (own, nonempty))
    sse = jnp.zeros(nodes, y.dtype).at[path].add(w * jnp.square(y[:, None] - mean[path]))
    return RegressionStats(total=total, mean=mean, sse=sse)


def posterior_mean(tree: Tree, stats: RegressionStats, log_weights: Array, X) -> Array:
    """``[n]`` ``Σ_{A ∈ path(x)} w(A)·ȳ_A``: the mean of the prunings' predictions under the
    posterior (the regression twin of :func:`jaxtree.posterior_predictive`)."""
    X = jnp.asarray(X, tree.threshold.dtype)
    return _posterior_mean(tree, stats.mean, log_weights, X)


@jax.jit
def _posterior_mean(tree, mean, log_weights, X):
    path, on_path = route(tree, X)
    return predictive_from_paths(path, on_path, mean[:, None], log_weights)[:, 0]


# -- votes and the grid of squared errors -------------------------------------------------------
def pacbayes_regression_votes(tree: Tree, stats: RegressionStats, params: dict) -> Array:
    """``[nodes, 1]`` ``w(A)·ȳ_A`` of the PAC-Bayes posterior (``params``: ``lam1``, ``lam2``)."""
    log_w = pacbayes_log_weights(tree, stats, params["lam1"], params["lam2"])
    return (jnp.exp(log_w) * stats.mean)[:, None]


def c1_regression_votes(tree: Tree, stats: RegressionStats, params: dict) -> Array:
    """``[nodes, 1]`` ``1[A is a leaf]·ȳ_A`` of the cost-complexity pruning at ``params["lam"]``."""
    mask = best_pruning(prune.c1_leaf_cost(stats, params["lam"]), tree.internal,
                        layout=tree.layout)
    return (mask * stats.mean)[:, None]


@functools.partial(jax.jit, static_argnames=("votes_fn", "batch_size", "scoring"))
def grid_squared_errors(tree: Tree, folds: select.Folds, votes_fn, grid: dict,
                        batch_size: Optional[int] = None, scoring=None) -> Array:
    """``[G, k]`` summed (weighted) validation squared errors of every setting of ``grid``
    (``{name: [G]}``): the ``errors_fn`` of :func:`jaxtree.select.paper_search` for a
    regression ``votes_fn``; ``folds.label`` holds the validation targets. ``scoring`` is not
    used (the criterion is the squared error)."""
    varying, shared = select.shared_settings(grid)

    def one_setting(params):
        def one_fold(tree, train, path, on_path, target, weight):
            prediction = select.routed_scores(tree, votes_fn(tree, train, {**shared, **params}),
                                              path, on_path, 1)
            return jnp.sum(weight * jnp.square(target - prediction[:, 0]))

        return select.over_folds(one_fold, tree, folds)

    return jax.lax.map(one_setting, varying, batch_size=batch_size or 16)


def regression_folds(trees: Tree, X, y, train_weights, valid_weights) -> select.Folds:
    """:class:`jaxtree.select.Folds` of a weighted regression sample: fold f's training
    statistics on its own T0 (``trees``, stacked with leading axis k,
    :func:`jaxtree.select.stack_trees`) from the weights ``train_weights[f]`` ``[n]``, and its
    validation points (those of positive ``valid_weights[f]``) routed, with their targets in
    ``label`` and their weights in ``weight``. A row may sit in both parts, one or neither.
    Padded as :func:`jaxtree.select.prepare_fold_trees` pads (weight-0 rows in no part)."""
    size = shapes.sample_size(trees, len(y))
    X, y, _ = shapes.pad_sample(np.asarray(X), np.asarray(y), None, size)
    train, valid = (shapes.pad_rows(np.asarray(w, np.float64).T, size).T
                    for w in (train_weights, valid_weights))
    dtype = trees.threshold.dtype
    return _regression_folds(trees, jnp.asarray(X, dtype), jnp.asarray(y, dtype),
                             jnp.asarray(train, dtype), jnp.asarray(valid, dtype),
                             select.validation_slots(valid <= 0))


@functools.partial(jax.jit, static_argnames="valid_size")
def _regression_folds(trees, X, y, train, valid, valid_size):
    def one_fold(tree, train_weight, valid_weight):
        path, on_path = route(tree, X)
        stats = stats_from_paths(tree, path, on_path, y, train_weight)
        index = jnp.nonzero(valid_weight > 0, size=valid_size, fill_value=0)[0]
        real = jnp.arange(valid_size) < jnp.sum(valid_weight > 0)
        return (stats, path[index], on_path[index], y[index],
                jnp.where(real, valid_weight[index], 0).astype(y.dtype))

    return select.Folds(*jax.vmap(one_fold)(trees, train, valid), tree=trees)


# -- CART by variance reduction -----------------------------------------------------------------
def regression_tree(X, y, max_depth: Optional[int] = None, min_split: int = 2,
                    layout: str = "auto", random_state=0, sample_weight=None) -> Tree:
    """CART regression tree T0 (scikit-learn's ``DecisionTreeRegressor`` rule, squared error,
    ``max_features=None``): each node takes the axis-aligned cut of largest variance reduction
    (``S_L²/W_L + S_R²/W_R`` largest, ``S`` the weighted sums of the node-centred targets, ``W``
    the summed weights), at the midpoint of two consecutive distinct values; ties between
    features go to a random one (seeded by ``random_state``), then to the smaller threshold. A
    node is split unless its targets are all equal, its total weight is under ``min_split``, it
    sits at ``max_depth`` or all its points are equal. Grown level by level, every node of a
    level at once.

    Args:
      X: ``[n, D]`` float points; y: ``[n]`` float targets.
      max_depth: None (grow until the stopping rules) or an integer >= 0.
      min_split: integer >= 2. layout: ``"auto"``, ``"compact"`` or ``"complete"``.
      random_state: seed of the ties between features.
      sample_weight: None (every row counts 1) or ``[n]`` weights >= 0 with a positive sum: the
        sums, means and ``min_split`` count each row with its weight, a row of weight 0 is left
        out, and an integer weight k grows the tree of k copies of the row.

    Returns:
      a :class:`jaxtree.Tree` on unscaled features.
    """
    X = np.asarray(X, np.float64)
    y = np.asarray(y, np.float64)
    if X.ndim != 2 or y.shape != (X.shape[0],) or X.shape[0] < 1:
        raise ValueError(f"X must be [n, D] and y [n] with n >= 1; got shapes {X.shape}, "
                         f"{y.shape}")
    if max_depth is not None and (not isinstance(max_depth, (int, np.integer)) or max_depth < 0):
        raise ValueError(f"max_depth must be None or an integer >= 0; got {max_depth!r}")
    if not isinstance(min_split, (int, np.integer)) or min_split < 2:
        raise ValueError(f"min_split must be an integer >= 2; got {min_split!r}")
    weight = np.ones(len(y))
    if sample_weight is not None:
        check_sample_weight(sample_weight, X.shape[0])
        weight = np.asarray(sample_weight, np.float64)
        if not weight.sum() > 0:
            raise ValueError("sample_weight must have a positive sum: every row has weight 0")
    keep = weight > 0
    levels = _grow(X[keep], y[keep], weight[keep], max_depth, min_split,
                   np.random.default_rng(random_state))
    dims = X.shape[1]
    dtype = float_dtype()
    levels = [dataclasses.replace(level, threshold=level.threshold.astype(dtype))
              for level in levels]
    return pack(levels, np.zeros(dims, dtype), np.ones(dims, dtype), clip=False, layout=layout)


def _grow(X, y, weight, max_depth, min_split, rng) -> list[GrownLevel]:
    n, dims = X.shape
    node = np.zeros(n, np.int64)
    points = np.arange(n)
    parent = np.array([-1])
    levels, depth = [], 0
    while True:
        m = parent.shape[0]
        total = np.bincount(node, weight[points], minlength=m)
        high = np.full(m, -np.inf)
        low = np.full(m, np.inf)
        np.maximum.at(high, node, y[points])
        np.minimum.at(low, node, y[points])
        candidate = (total >= min_split) & (high > low)
        if max_depth is not None:
            candidate &= depth < max_depth
        feature, threshold = _best_cuts(X[points], y[points], weight[points], node, candidate,
                                        rng.random((m, dims)))
        splits = feature >= 0
        levels.append(GrownLevel(parent, splits, np.maximum(feature, 0), threshold))
        if not splits.any():
            return levels
        child_rank = np.cumsum(splits) - 1
        live = splits[node]
        node, points = node[live], points[live]
        go_right = X[points, feature[node]] > threshold[node]
        node = 2 * child_rank[node] + go_right
        parent = np.repeat(np.flatnonzero(splits), 2)
        depth += 1


def _best_cuts(X, y, weight, node, candidate, priority):
    """``(feature [m], threshold [m])`` of the best variance-reduction cut of every candidate
    node (feature -1 where none); ``weight`` ``[k]`` positive.

    ``S_L = Σ_left w·y − W_L·ȳ`` is taken from running sums of ``w·y`` and ``w``: for float32
    targets and integer weights these sums are exact in float64, so a row of weight k and k
    copies of it give every cut the same score, ties included."""
    m = candidate.shape[0]
    feature = np.full(m, -1, np.int64)
    threshold = np.zeros(m)
    best = np.full(m, -np.inf)
    best_priority = np.full(m, -np.inf)
    keep = candidate[node]
    if not keep.any():
        return feature, threshold
    X, y, weight, node = X[keep], y[keep], weight[keep], node[keep]
    size = np.bincount(node, minlength=m)
    total = np.bincount(node, weight, minlength=m)
    mean = np.bincount(node, weight * y, minlength=m) / np.where(total > 0, total, 1)
    first = np.cumsum(size) - size
    for f in range(X.shape[1]):
        order = np.lexsort((X[:, f], node))
        value, w, at_node = X[order, f], weight[order], node[order]
        start = first[at_node]
        w_left = _running_sum(w, start)
        w_right = total[at_node] - w_left
        s_left = _running_sum(w * y[order], start) - w_left * mean[at_node]
        has_right = (np.arange(len(order)) - start + 1 < size[at_node]) & (w_right > 0)
        score = s_left ** 2 / w_left + s_left ** 2 / np.where(has_right, w_right, 1)  # S_R = −S_L
        cuttable = has_right & np.append(value[1:] > value[:-1], False)
        best, best_priority = keep_best_cuts(score, cuttable, value, at_node, first, size, f,
                                             priority[:, f], best, best_priority, feature,
                                             threshold)
    return feature, threshold


def _cart(X, y, weight, max_depth, min_split, split, random_state):
    """:func:`regression_tree` behind the builders' signature (``split`` does not apply)."""
    return regression_tree(X, y, max_depth=max_depth, min_split=min_split, layout="compact",
                           random_state=random_state, sample_weight=weight)


def _target_blind(partition):
    """The builder of a KD or dyadic T0: :func:`jaxtree.grow_tree` on the weighted rows (weighted
    medians and cells; ``y`` unused, no purity stop), in the classifiers' layout: a KD tree as
    wide as a level can get (at most one split per row of positive weight and per ``min_split``
    of weight, :func:`jaxtree.fitting.width_bound`), a dyadic one from the first rungs of the
    width and depth ladders, enlarged until no node is capped
    (:func:`jaxtree.fitting.enlarge_until_uncapped`)."""
    def build(X, y, weight, max_depth, min_split, split, random_state):
        rows = min(int(np.count_nonzero(weight)) * min_split, int(weight.sum()))
        config = GrowConfig(partition=partition,
                            max_depth=fitting.first_layout_depth(partition, max_depth),
                            num_classes=1,
                            width=fitting.default_width(rows, min_split, max_depth, partition),
                            min_split=min_split, split=split, stop_pure=False)
        X, labels, weight = shapes.pad_sample(X, np.zeros(len(X), np.int32), weight)

        def run(config):
            tree, info = grow_tree(X, labels, weight, config, depth_limit=max_depth)
            return tree, (info.capped, info.depth_capped)

        return fitting.enlarge_until_uncapped(run, config, X.shape, max_depth)[0]

    return build


#: T0 builders ``build(X, y, weight, max_depth, min_split, split, random_state)``: the KD and
#: dyadic trees split without the targets, CART by variance reduction.
PARTITIONS = {"kd": _target_blind("kd"), "dyadic": _target_blind("dyadic"), "cart": _cart}


# -- estimators ---------------------------------------------------------------------------------
class TreeRegressorBase(RegressorMixin, BaseEstimator):
    """Shared shell of the regressors: input checks, standardised targets, T0 (padded to a
    shared shape, :mod:`jaxtree.shapes`), its statistics and the λ selection by CV on the
    validation squared error (the paper's two-stage grid, :func:`jaxtree.select.paper_search`;
    T0 grown on each fold's training part for ``partition="cart"``, one T0 for KD and dyadic
    trees, as in :class:`jaxtree.PACBayesTreeClassifier`). Sample weights weigh every one of
    these counts (:meth:`fit`).

    Subclasses give ``_votes`` (a module-level votes function), ``_directions``, ``_grid()``
    and ``_fit_weights()`` (sets ``node_log_weights_``).

    Fitted attributes: ``n_features_in_``, ``tree_``, ``y_shift_`` and ``y_scale_`` (the
    targets' weighted mean and standard deviation: the model works on ``(y − shift)/scale``),
    ``node_total_``, ``node_mean_`` and ``node_sse_`` (``[nodes]``, standardised units; the
    property ``stats_`` bundles them), ``node_values_`` (``[nodes]`` node means in the units of
    ``y``), ``node_log_weights_``; when tuned, ``best_params_`` and ``cv_results_``
    (``mean_test_score`` the negated weighted validation MSE in the units of ``y``).
    """

    _may_be_zero = ()    # tuned parameters that may be 0 (the others must be > 0)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = False
        return tags

    @property
    def stats_(self) -> RegressionStats:
        """:class:`RegressionStats` of the training sample (standardised targets)."""
        return RegressionStats(total=self.node_total_, mean=self.node_mean_, sse=self.node_sse_)

    @property
    def feature_importances_(self):
        """``[n_features_in_]`` :func:`jaxtree.inspect.feature_importances`."""
        from jaxtree.inspect import feature_importances
        return feature_importances(self)

    def fit(self, X, y, sample_weight=None):
        """Build T0 on ``X`` ``[n, D]`` with real targets ``y`` ``[n]`` and fit. Returns self.

        ``sample_weight``: optional ``[n]`` non-negative weights (default ones) with a positive
        sum. They weigh every count of the fit — the targets' mean and variance, T0's splits
        (CART's sums and ``min_split``, the KD tree's medians), the node statistics, the CV
        folds' training parts and their validation squared errors (a weighted mean) — so an
        integer weight is the same as that many copies of the row, and weight 0 the same as
        leaving the row out. With an integer ``cv`` the folds deal the distinct feature vectors
        ``x`` (:func:`jaxtree.fitting.fold_weights`), so a row's copies stay together."""
        with _naming("X"):
            validate_data(self, X, dtype=float_dtype(), ensure_min_samples=2)
        with _naming("y"):
            X, y = validate_data(self, X, y, dtype=float_dtype(), y_numeric=True,
                                 ensure_min_samples=2)
        self._check_params()
        with _naming("sample_weight"):
            weight = _check_sample_weight(sample_weight, X, dtype=np.float64,
                                          ensure_non_negative=True)
        if not weight.sum() > 0:
            raise ValueError("sample_weight must have a positive sum: every row has weight 0")
        y = np.asarray(y, np.float64)
        shapes.guard_memory_maps()
        self.y_shift_ = float(np.average(y, weights=weight))
        scale = float(np.sqrt(np.average(np.square(y - self.y_shift_), weights=weight)))
        self.y_scale_ = scale if scale > 0 else 1.0
        z = ((y - self.y_shift_) / self.y_scale_).astype(X.dtype)
        self.tree_ = shapes.pad_tree(self._build_tree(X, z, weight), X.shape[0])
        stats = self._stats(self.tree_, X, z, weight)
        self.node_total_, self.node_mean_, self.node_sse_ = stats.total, stats.mean, stats.sse
        self.node_values_ = np.asarray(stats.mean, np.float64) * self.y_scale_ + self.y_shift_
        self._select_params(X, y, z, weight)
        self._fit_weights()
        return self

    def predict(self, X):
        """``[n]`` predictions: the posterior mean of the node means along each point's path."""
        check_is_fitted(self)
        with _naming("X"):
            X = validate_data(self, X, reset=False, dtype=float_dtype())
        n = X.shape[0]
        z = posterior_mean(self.tree_, self.stats_, self.node_log_weights_,
                           shapes.pad_rows(X, shapes.padded(n)))
        return np.asarray(z, np.float64)[:n] * self.y_scale_ + self.y_shift_

    def save(self, path):
        """Write the fitted model to ``path`` (:mod:`jaxtree.persist`); read with
        :func:`jaxtree.load`."""
        from jaxtree import persist
        persist.save(self, path)

    # -------------------------------------------------------------------------------------------
    @staticmethod
    def _stats(tree, X, z, sample_weight=None):
        X, z, weight = shapes.pad_sample(X, z, sample_weight, shapes.sample_size(tree, len(z)))
        return regression_stats(tree, X, z, weight)

    def _check_params(self):
        if self.partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {sorted(PARTITIONS)}; got "
                             f"{self.partition!r}")
        if self.tune not in ("auto", "grid", None):
            raise ValueError(f"tune must be 'auto', 'grid' or None; got {self.tune!r}")
        self._per_fold_trees()            # checks cv_trees
        if isinstance(self.cv, (int, np.integer)) and self.cv < 2:
            raise ValueError(f"cv must be an integer >= 2 or a scikit-learn CV splitter (or "
                             f"iterable of (train, test) index arrays); got {self.cv!r}")
        for name, _ in self._directions:
            value = getattr(self, name)
            if value is None and self.tune is None:
                raise ValueError(f"{name} is None and tune=None: give {name}, or leave "
                                 f"tune='auto' to select it by cross-validation")
            low = 0 if name in self._may_be_zero else None
            if value is not None and not (value >= 0 if low == 0 else value > 0):
                raise ValueError(f"{name} must be {'>=' if low == 0 else '>'} 0 (or None to "
                                 f"tune it); got {value!r}")

    def _build_tree(self, X, z, weight):
        """T0 on the rows of ``X``, ``z`` weighted by ``weight`` ``[n]`` (default depth: that of
        the total weight, the number of rows it stands for)."""
        depth = self.max_depth if self.max_depth is not None else default_depth(
            self.partition, max(2, math.ceil(float(weight.sum()))), X.shape[1])
        return PARTITIONS[self.partition](
            np.asarray(X), np.asarray(z), weight, None if depth is None else int(depth),
            self.min_split, self.split, self.random_state)

    def _param(self, name):
        return getattr(self, "best_params_", {}).get(name, getattr(self, name))

    def _select_params(self, X, y, z, weight):
        self.__dict__.pop("best_params_", None)
        self.__dict__.pop("cv_results_", None)
        given = {name: getattr(self, name) for name, _ in self._directions
                 if getattr(self, name) is not None}
        directions = self._directions if self.tune == "grid" else tuple(
            (name, d) for name, d in self._directions if name not in given)
        if self.tune is None or not directions:
            return
        fixed = {name: v for name, v in given.items() if name not in dict(directions)}
        folds = self._folds(X, y, z, weight)
        result = select.paper_search(self.tree_, folds, type(self)._votes, directions, fixed,
                                     base_grid=self._grid(), errors_fn=grid_squared_errors)
        names = [name for name, _ in directions]
        self.best_params_ = {name: float(v) for name, v in result.best_params.items()}
        results = select._grid_results(result, names, "neg_mean_squared_error")
        for key in results:     # squared errors back in the units of y
            if key.endswith("test_score"):
                results[key] = results[key] * self.y_scale_ ** 2
        self.cv_results_ = results

    #: whether the prior charges nothing at empty nodes (the PAC-Bayes potentials), so that
    #: ``cv_trees="auto"`` grows a KD T0 per fold too (:func:`jaxtree.fitting.per_fold_trees`)
    _free_empty_nodes = False

    def _per_fold_trees(self) -> bool:
        """Whether CV grows T0 on each fold's training part (:func:`jaxtree.fitting.per_fold_trees`
        of ``cv_trees``)."""
        return fitting.per_fold_trees(self.cv_trees, self.partition, self._free_empty_nodes)

    def _folds(self, X, y, z, weight):
        """The weighted folds of the λ search (:func:`regression_folds`). An integer ``cv``
        deals the distinct feature vectors ``x`` of positive weight by the key of ``random_state``
        (:func:`jaxtree.fitting.fold_weights`, as the classifiers; fewer folds, with a warning,
        for fewer distinct ``x``: :func:`jaxtree.select.small_sample_folds`); a splitter or
        iterable of ``(train, test)`` indices gives the parts itself. T0 is grown on each
        training part when :meth:`_per_fold_trees`."""
        per_fold = self._per_fold_trees()
        if isinstance(self.cv, (int, np.integer)):
            key = fitting.fit_keys(_random_key(self.random_state))[1]
            rows = (jnp.asarray(X), jnp.asarray(weight > 0, X.dtype), key)
            distinct = int(jnp.max(fitting.row_ranks(*rows))) + 1
            if distinct < 2:
                raise ValueError("cross-validation needs at least 2 distinct rows x of positive "
                                 "weight; give the λ's and tune=None")
            count, per_fold = select.small_sample_folds(distinct, int(self.cv), per_fold)
            in_valid = np.asarray(fitting.fold_weights(*rows, count)) > 0
            in_train = ~in_valid
        else:
            with _naming("cv"):
                in_train, in_valid = select.split_masks(self.cv, X, y, classifier=False)
        train, valid = weight * in_train, weight * in_valid
        if per_fold:
            trees = [shapes.pad_tree(self._build_tree(X, z, w), int(np.count_nonzero(w)))
                     for w in train]
        else:
            trees = [self.tree_] * len(train)
        return regression_folds(select.stack_trees(trees), X, z, train, valid)


class PACBayesTreeRegressor(TreeRegressorBase):
    """The PAC-Bayes tree for regression (docs/theory/regression.md): the posterior mean, over
    every pruning of T0, of the pruning's leaf mean at a point.

    The potentials are the classifier's with the squared loss in place of the error count,
    ``φ(A) = −λ1·SSE_A/s² − λ2·√N_A − 1[N_A > 0]`` (``s²`` the sample variance of ``y``), and
    ``predict(x) = Σ_{A ∈ path(x)} w(A)·ȳ_A``.

    Args:
      partition: ``"cart"`` (default: variance-reduction splits grown until the nodes are
        constant or small, :func:`regression_tree`; λ's selected on trees grown per fold),
        ``"kd"`` or ``"dyadic"`` (split without the targets by :func:`jaxtree.grow_tree` on
        the weighted rows, one T0 for the folds).
      max_depth: depth of T0; None for :func:`jaxtree.estimators.default_depth` of the total
        training weight.
      min_split: nodes of smaller total weight (without weights: fewer training points) are
        not split.
      split: ``"spread"`` or ``"cycle"``, the coordinate rule of KD and dyadic trees.
      lam1, lam2: λ1 (weight of the standardised squared loss) and λ2 (weight of
        ``√N_A``); None (default): selected by ``tune``.
      tune: ``"auto"`` (the λ's left at None by the paper's protocol on the validation squared
        error: 2-fold CV over 2^linspace(-8, 6, 10) each, then 10 values from half to twice
        the best; ties to smaller λ1, larger λ2), ``"grid"`` (all of them) or None.
      cv: the number of CV folds, dealt over the distinct feature vectors ``x`` as the classifiers
        deal them (:func:`jaxtree.fitting.fold_weights`), or a scikit-learn CV splitter or
        iterable of ``(train, test)`` index arrays.
      random_state: the seed that deals the folds and breaks CART's ties.
      cv_trees: ``"auto"`` (per fold for CART and KD trees, shared for dyadic ones:
        :func:`jaxtree.fitting.per_fold_trees`), ``"per_fold"`` or ``"shared"``.

    Fitted attributes: those of :class:`TreeRegressorBase`.

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.arange(8.0)[:, None]
        >>> y = np.array([0.0, 0.1, 0.0, 0.2, 1.0, 1.1, 0.9, 1.0])
        >>> model = jaxtree.PACBayesTreeRegressor(lam1=4.0, lam2=1.0).fit(X, y)
        >>> print(model.predict(np.array([[1.0], [6.0]])).round(2))
        [0.07 0.99]
    """

    _votes = staticmethod(pacbayes_regression_votes)
    _free_empty_nodes = True      # φ = 0 at empty nodes: CV on trees grown per fold
    _directions = select.PACBAYES_DIRECTIONS

    def __init__(self, partition="cart", max_depth=None, min_split=2, split="spread",
                 lam1=None, lam2=None, tune="auto", cv=2, random_state=0, cv_trees="auto"):
        self.partition = partition
        self.max_depth = max_depth
        self.min_split = min_split
        self.split = split
        self.lam1 = lam1
        self.lam2 = lam2
        self.tune = tune
        self.cv = cv
        self.random_state = random_state
        self.cv_trees = cv_trees

    def _grid(self):
        return select.LOG_GRID

    def _fit_weights(self):
        self.node_log_weights_ = pacbayes_log_weights(self.tree_, self.stats_,
                                                      self._param("lam1"), self._param("lam2"))


class PrunedTreeRegressor(TreeRegressorBase):
    """T0 pruned by cost-complexity (Breiman et al. 1984) with squared loss: the pruning of
    least ``Σ_leaves SSE_A/s² + λ·(non-empty leaves)`` (:func:`jaxtree.best_pruning`), which
    predicts the mean of the pruning leaf holding a point; scikit-learn's ``ccp_alpha`` is
    ``λ·s²/n``.

    Args:
      partition, max_depth, min_split, split, cv, random_state, cv_trees: as in
        :class:`PACBayesTreeRegressor`, except that ``cv_trees="auto"`` shares a KD or dyadic
        T0 between the folds (a pruning is one minimiser:
        :func:`jaxtree.fitting.per_fold_trees`).
      lam: λ ≥ 0, the price of a leaf in units of the sample variance; None (default): tuned
        by the paper's protocol on ``n·2^linspace(-14, 0, 10)`` (λ = n prunes T0 to its root),
        then 10 values from half to twice the best; ties go to the larger λ.
      tune: ``"auto"``, ``"grid"`` or None, as in :class:`PACBayesTreeRegressor`.

    Fitted attributes: those of :class:`TreeRegressorBase`, ``leaf_mask_`` ``[nodes]`` and
    ``n_leaves_``.

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.arange(8.0)[:, None]
        >>> y = np.array([0.0, 0.1, 0.0, 0.2, 1.0, 1.1, 0.9, 1.0])
        >>> model = jaxtree.PrunedTreeRegressor(lam=1.0).fit(X, y)
        >>> model.n_leaves_, model.predict(np.array([[1.0], [6.0]])).round(3).tolist()
        (2, [0.075, 1.0])
    """

    _votes = staticmethod(c1_regression_votes)
    _directions = (("lam", +1),)
    _may_be_zero = ("lam",)      # λ = 0: T0 itself

    def __init__(self, partition="cart", max_depth=None, min_split=2, split="spread",
                 lam=None, tune="auto", cv=2, random_state=0, cv_trees="auto"):
        self.partition = partition
        self.max_depth = max_depth
        self.min_split = min_split
        self.split = split
        self.lam = lam
        self.tune = tune
        self.cv = cv
        self.random_state = random_state
        self.cv_trees = cv_trees

    def _grid(self):
        return float(self.node_total_[0]) * prune.RELATIVE_GRID

    def _fit_weights(self):
        mask = best_pruning(prune.c1_leaf_cost(self.stats_, self._param("lam")),
                            self.tree_.internal, layout=self.tree_.layout)
        self.leaf_mask_ = mask
        self.n_leaves_ = int(jnp.sum(mask))
        self.node_log_weights_ = jnp.where(mask, 0.0, -jnp.inf)


#: ``{name: class}`` of the regressors (:func:`jaxtree.load` finds them here).
REGRESSORS = {cls.__name__: cls for cls in (PACBayesTreeRegressor, PrunedTreeRegressor)}
