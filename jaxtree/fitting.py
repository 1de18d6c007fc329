"""The whole fit of a PAC-Bayes tree as one pure function: :func:`fit`.

``jaxtree.fit(X, y, num_classes=L, ...)`` grows T0 (:func:`jaxtree.grow_tree`, level by level
inside ``jit``), counts every node's classes, tunes λ1, λ2 by the paper's protocol (the
two-stage CV grid, :func:`jaxtree.select.paper_search`, compiled with it; for a CART T0 the
folds' trees grown by the same builder on each fold's training part) and forms the posterior's
node weights. Every array shape is fixed by the configuration and by ``X.shape``, never by the
data, so the fit runs under ``jax.jit``, ``jax.vmap`` (over sample weights — bootstraps — or
over stacked datasets of one shape) and ``jax.grad`` (in given λ's), on any backend.

Sample weights are the one way rows enter or leave a fit: weight 0 is a row that is absent
(padding, a bootstrap's unpicked rows), and integer weights give the same model as repeated
rows. For that the CV deals *distinct feature vectors* to folds (:func:`fold_weights`): every copy
of a row lands in one fold, as every unit of its weight does, and so do all the labels seen at
one ``x``.

:class:`FittedTree` is the result, a pytree; :func:`predict_proba` gives ``[n, L]`` class
probabilities. The estimators (:class:`jaxtree.PACBayesTreeClassifier`) are a shell over this:
they validate, encode labels, pad the sample to a shared size and call :func:`fit_with_config`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree import select, shapes, soft
from jaxtree.grow import GrowConfig, check_grow_config, distinct_bound, grow_tree, presort
from jaxtree.pacbayes import (pacbayes_authors_log_weights, pacbayes_log_weights,
                              pacbayes_theory_log_weights, posterior_predictive, vote)
from jaxtree.stats import DEFAULT_SMOOTHING, NodeStats, check_smoothing, class_frequencies
from jaxtree.stats import counted_stats, node_stats
from jaxtree.tree import Tree, check_tree_points, route
from jaxtree.validation import float_dtype, holds_nan

Array = jax.Array

#: ``predict_proba`` of a fitted tree: the posterior predictive or the vote of hard node labels.
PROBA_MODES = ("predictive", "majority")
#: The potentials whose λ's the CV grid tunes, with their votes functions.
TUNED_POTENTIALS = {"practical": select.pacbayes_votes,
                    "authors": select.pacbayes_authors_votes}
POTENTIALS = ("practical", "authors", "theory")
#: The values of ``cv_trees``: which T0 a CV fold uses (:func:`per_fold_trees`).
CV_TREES = ("auto", "shared", "per_fold")

#: Quantile bins of a CART T0 grown inside the fit (its split candidates per feature).
DEFAULT_BINS = 64


def per_fold_trees(cv_trees: str, partition: str, free_empty_nodes: bool) -> bool:
    """Whether cross-validation grows T0 anew on each fold's training part (the estimators'
    ``cv_trees``; docs/theory/selection.md, "One tree per fold").

    ``"per_fold"`` and ``"shared"`` say so. ``"auto"`` grows per fold a CART T0 (grown on all
    the points, its leaves have seen the validation labels) and, for a posterior whose prior
    charges nothing at empty nodes (``free_empty_nodes``: the PAC-Bayes potentials, φ = 0
    there), a KD T0: a fold holds half the points of a KD tree grown on all of them, which has
    no empty cell, leaves many of its cells empty, and the prunings of those empty subtrees,
    each of weight 1, pull the fold's posterior towards deep trees that the whole sample's does
    not favour. A dyadic tree's cells are set by the geometry, empty in the whole sample too,
    and a fold's own dyadic tree has nearly the same cells: it is shared. A pruning method (C1,
    SN, …: one minimising pruning, which free splits into empty cells do not change) and the
    HS vote (a prior that charges every split, a proper distribution over prunings) share a
    label-blind KD or dyadic T0 between the folds, as the paper does.

    Raises:
      ValueError: ``cv_trees`` is not one of :data:`CV_TREES`.
    """
    if cv_trees not in CV_TREES:
        raise ValueError(f"cv_trees must be 'auto', 'shared' or 'per_fold'; got {cv_trees!r}")
    if cv_trees == "auto":
        return partition == "cart" or (free_empty_nodes and partition == "kd")
    return cv_trees == "per_fold"


@dataclasses.dataclass(frozen=True)
class FitConfig:
    """The static part of a fit (hashable: one compiled fit per config and input shape).

    Attributes:
      grow: T0's :class:`jaxtree.GrowConfig`.
      potentials: ``"practical"``, ``"authors"`` or ``"theory"`` (docs/theory/pacbayes.md).
      proba: ``"predictive"`` or ``"majority"`` (:data:`PROBA_MODES`).
      tuned: names of the λ's the CV grid selects (``()``: all given).
      cv: number of folds of the tuning.
      per_fold_trees: grow each fold's T0 on its training part (a label-aware, CART, T0).
      scoring: the selection criterion (:data:`jaxtree.select.SCORINGS`).
      max_depth: the depth T0 may reach, of which ``grow.max_depth`` (the layout's) may be a
        first rung (:func:`first_layout_depth`); None: ``grow.max_depth``.
      softness: σ of the prediction's soft routing (:mod:`jaxtree.soft`); 0: hard routing,
        and no quantile knots are computed.
    """

    grow: GrowConfig
    potentials: str = "practical"
    proba: str = "predictive"
    tuned: tuple = ("lam1", "lam2")
    cv: int = 2
    per_fold_trees: bool = False
    scoring: str = "accuracy"
    max_depth: Optional[int] = None
    softness: float = 0.0


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["tree", "stats", "log_weights", "node_proba", "lam1", "lam2",
                                "capped", "cv_error", "search", "depth_capped", "knots"],
                   meta_fields=["proba", "softness"])
@dataclasses.dataclass(frozen=True)
class FittedTree:
    """A fitted PAC-Bayes tree (a pytree: ``vmap`` of :func:`fit` stacks every field).

    Attributes:
      tree: T0, a :class:`jaxtree.Tree` in a compact layout of ``nodes`` slots.
      stats: :class:`jaxtree.NodeStats` of the (weighted) sample, ``counts [nodes, L]``.
      log_weights: ``[nodes]`` the posterior's ``log w_Q(A)`` (−inf off T0).
      node_proba: ``[nodes, L]`` the nodes' smoothed class frequencies.
      lam1, lam2: scalars, the λ's used (selected or given; ``lam2`` is NaN for the theory
        potentials, which have one λ).
      capped: int scalar, nodes of T0 and of the folds' trees that the level-width cap kept
        from splitting (0: the trees are those the builder's rule grows).
      depth_capped: int scalar, nodes of those trees that the layout's depth, a rung below the
        depth T0 may reach (:func:`first_layout_depth`), kept from splitting (None in a model
        saved by a jaxtree that did not count them).
      cv_error: scalar, the selected setting's CV error rate (NaN when nothing was tuned).
      search: the :class:`jaxtree.select.GridSearchResult` of the tuning, or None.
      proba: static, ``"predictive"`` or ``"majority"``.
      knots: ``[D, K]`` the sample's quantiles of each scaled feature that soft routing ranks
        points by (:func:`jaxtree.soft.quantile_knots`), or None (hard routing).
      softness: static σ ≥ 0 of the soft routing (:mod:`jaxtree.soft`); 0: hard routing.

    Example:
        Four bootstrap fits in one ``vmap``: every field gains a leading axis of 4:

        >>> import jax
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.arange(16.0, dtype=np.float32)[:, None]
        >>> y = (X[:, 0] > 7).astype(np.int32)
        >>> config = jaxtree.fitting.fit_config(16, 1, num_classes=2, partition="kd",
        ...                                     lam1=1.0, lam2=1.0)
        >>> weights = jax.random.poisson(jax.random.PRNGKey(0), 1.0, (4, 16)).astype("float32")
        >>> models = jax.vmap(lambda w: jaxtree.fitting.fit_with_config(X, y, w, None,
        ...                                                             config))(weights)
        >>> models.log_weights.shape[0], models.stats.counts.shape[0]
        (4, 4)
    """

    tree: Tree
    stats: NodeStats
    log_weights: Array
    node_proba: Array
    lam1: Array
    lam2: Array
    capped: Array
    cv_error: Array
    search: Optional[select.GridSearchResult]
    depth_capped: Optional[Array] = None       # None: a model saved before it was counted
    knots: Optional[Array] = None
    proba: str = "predictive"
    softness: float = 0.0


# ---------------------------------------------------------------------------------------------
# Defaults that depend on the sample's size
def default_max_depth(partition: str, num_rows: int, num_features: int) -> int:
    """Default depth cap of T0 for ``num_rows`` points: ``ceil(log2 n)`` for a KD tree (about one
    point per leaf); the paper's ``floor(ln n)·D`` for a dyadic one (each coordinate halved
    ``floor(ln n)`` times; ``min_split`` and purity stop most branches far earlier);
    ``2·ceil(log2 n)`` for a CART tree (the cap that a level-width budget can hold; scikit-learn
    grows to purity)."""
    log2 = max(1, int(math.ceil(math.log2(max(num_rows, 2)))))
    if partition == "dyadic":
        return max(1, int(math.floor(math.log(max(num_rows, 2))))) * num_features
    if partition == "cart":
        return 2 * log2
    return log2


def width_bound(num_rows: int, min_split: int, max_depth: int) -> int:
    """The level width that no tree can exceed: a level of a tree whose nodes hold ``min_split``
    points or more has at most ``2·floor(n / min_split)`` nodes, and a tree of depth d at most
    ``2^d`` on its deepest level; the smaller, made even (at least 2)."""
    width = 2 * max(1, num_rows // max(min_split, 1))
    if max_depth < 62:
        width = min(width, 2 ** max_depth)
    return max(2, width + (width % 2))


def default_width(num_rows: int, min_split: int, max_depth: int, partition: str = "kd") -> int:
    """Default level-width cap W of T0 (each level of the layout has W slots, so every pass
    over T0 costs ``(max_depth + 1)·W``).

    A KD tree is near-balanced: :func:`width_bound`. CART and dyadic trees are not — grown to
    purity on 4,000 rows of the bundled sets, a CART tree's widest level holds 26 to 246 nodes
    where the bound is 8,192; on 3,000 rows of them a dyadic tree's holds 98 to 622 where the
    bound is 3,000 — so their default is the first rung of a ladder, ``max(64, bound / 16)``
    (even; a power of two when ``n`` is, as the estimators' padded samples are; at most the
    bound); a fit whose tree a rung caps is grown again one rung wider (:func:`wider_width`),
    which :func:`fit` and the estimators do by themselves. (A dyadic T0 at the bound made a
    warm fit on 3,000 rows of crowd take 29 s, at the first rung 5 s: the same tree.)"""
    bound = width_bound(num_rows, min_split, max_depth)
    if partition == "kd":
        return bound
    rung = max(64, bound // 16)
    return min(bound, rung + rung % 2)


def wider_width(width: int, bound: int) -> int:
    """The next rung of the width ladder above ``width`` (4×), at most ``bound``."""
    return min(bound, 4 * width)


# The first layout depth of a dyadic T0, whose default depth cap floor(ln n)·D (the paper's) is
# far above the depth its trees reach: on 3,000 rows of the bundled sets a depth of 14 to 41
# where the cap is 96 to 1,424, but 456 (the cap) on spam, where two points repeated with both
# labels split to the cap
DYADIC_FIRST_DEPTH = 32


def first_layout_depth(partition: str, max_depth: int) -> int:
    """The layout depth a T0 of ``partition`` that may reach ``max_depth`` starts at:
    :data:`DYADIC_FIRST_DEPTH` for a dyadic T0 (deepened by :func:`enlarge_until_uncapped`
    while nodes are depth-capped, as the width is widened), else ``max_depth``. Each pass over
    T0 costs (layout depth + 1) · width: a dyadic layout of crowd's 3,000 rows at its cap of
    252 levels had 13 times the slots of one at 32."""
    return min(max_depth, DYADIC_FIRST_DEPTH) if partition == "dyadic" else max_depth


def deeper_layout(depth: int, bound: int) -> int:
    """The next rung of the layout-depth ladder above ``depth`` (4×), at most ``bound``."""
    return min(bound, 4 * max(depth, 1))


# T0's layout large enough: the width and depth ladders, remembered per shape and options
# within a process
_KNOWN_LAYOUTS: dict = {}


def _grow_config(config) -> GrowConfig:
    return config.grow if isinstance(config, FitConfig) else config


def _reachable_depth(config) -> int:
    """The depth T0 may reach: ``FitConfig.max_depth``, else its layout's."""
    depth = config.max_depth if isinstance(config, FitConfig) else None
    return _grow_config(config).max_depth if depth is None else depth


def _with_layout(config, width: int, depth: Optional[int] = None):
    """``config`` (a :class:`FitConfig` or a :class:`GrowConfig`) with T0's width ``width`` and
    layout depth ``depth`` (None: unchanged)."""
    grow = _grow_config(config)
    grow = dataclasses.replace(grow, width=width,
                               max_depth=grow.max_depth if depth is None else depth)
    return dataclasses.replace(config, grow=grow) if isinstance(config, FitConfig) else grow


def _layout_key(config, shape, max_depth: int) -> tuple:
    """T0's options but its layout, the depth it may reach, and the data's shape: what the
    layout a tree needs hangs on."""
    return (_with_layout(_grow_config(config), 2, max_depth), tuple(shape))


def known_layout(config, shape, max_depth: Optional[int] = None):
    """``config`` (a :class:`FitConfig` or a :class:`GrowConfig`) with T0's layout raised to the
    widest and deepest rungs that an earlier fit of this process on data of ``shape`` and the
    same T0 options needed (:func:`enlarge_until_uncapped`; ``max_depth`` as there)."""
    grow = _grow_config(config)
    reachable = _reachable_depth(config) if max_depth is None else max_depth
    width, depth = _KNOWN_LAYOUTS.get(_layout_key(config, shape, reachable), (0, 0))
    return _with_layout(config, max(grow.width, width), max(grow.max_depth, depth))


def enlarge_until_uncapped(run, config, shape, max_depth: Optional[int] = None):
    """``(result, config)`` of ``result, (capped, depth_capped) = run(config)`` with T0's
    layout enlarged rung by rung while nodes are capped: its width (:func:`wider_width`, up to
    :func:`width_bound`) while ``capped`` (the nodes the width kept from splitting) is
    positive, its depth (:func:`deeper_layout`, up to ``max_depth``) while ``depth_capped``
    is. ``config``: a :class:`FitConfig` or a :class:`GrowConfig`; ``max_depth``: the depth T0
    may reach (default ``FitConfig.max_depth``, else the layout's: no depth ladder). Starts at
    :func:`known_layout`, so later fits of the same shape and options compile nothing new;
    under a trace (the counts not concrete) it runs once."""
    reachable = _reachable_depth(config) if max_depth is None else max_depth
    config = known_layout(config, shape, reachable)
    grow = _grow_config(config)
    bound = width_bound(shape[0], grow.min_split, reachable)
    while True:
        result, (capped, depth_capped) = run(config)
        if isinstance(capped, jax.core.Tracer):
            return result, config
        grow = _grow_config(config)
        width = wider_width(grow.width, bound) if int(capped) else grow.width
        depth = deeper_layout(grow.max_depth, reachable) if int(depth_capped) \
            else grow.max_depth
        if (width, depth) == (grow.width, grow.max_depth):
            break
        config = _with_layout(config, width, depth)
    grow = _grow_config(config)
    _KNOWN_LAYOUTS[_layout_key(config, shape, reachable)] = (grow.width, grow.max_depth)
    return result, config


# ---------------------------------------------------------------------------------------------
# Folds as weights
def row_ranks(X: Array, weight: Array, key: Array) -> Array:
    """``[n]`` int32 dense ranks of the distinct feature vectors ``x`` of positive weight in an
    order drawn with ``key`` (rows with equal features share a rank, whatever their labels; rows
    of weight 0 get −1).

    The order is that of a seeded hash of each row's bits, so it is a function of the rows'
    values alone: a sample and the same sample with some rows repeated rank their distinct rows
    alike. The labels are left out so that the rows of one ``x`` land on one side of a split
    with all their labels: were ``(x, 0)`` and ``(x, 1)`` dealt apart, a fold that trains on
    one would be validated on the other, and where most rows repeat (categorical data: 2,201
    titanic passengers, 14 distinct rows) the CV would score learning as worse than guessing."""
    bits = jax.lax.bitcast_convert_type(X.astype(jnp.float32), jnp.uint32)
    seed = jax.random.bits(key, (2,), jnp.uint32)
    columns = jnp.arange(1, X.shape[1] + 1, dtype=jnp.uint32)
    mixed = _mix(bits * jnp.uint32(0x9E3779B1) + columns * seed[0])
    code = _mix(jnp.sum(_mix(mixed + columns), axis=1, dtype=jnp.uint32) ^ seed[1])
    # rows of weight 0 sort last and are then masked
    present = weight > 0
    order = jnp.lexsort((code, ~present))
    sorted_code = code[order]
    new = jnp.concatenate([jnp.ones(1, bool), sorted_code[1:] != sorted_code[:-1]])
    ranks_sorted = jnp.cumsum(new) - 1
    ranks = jnp.zeros_like(ranks_sorted).at[order].set(ranks_sorted)
    return jnp.where(present, ranks, -1).astype(jnp.int32)


def _mix(h: Array) -> Array:
    """A 32-bit integer finaliser (MurmurHash3's fmix32): every input bit moves every output bit."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def fold_weights(X: Array, weight: Array, key: Array, folds: int) -> Array:
    """``[folds, n]`` the validation weights of a ``folds``-fold CV: fold f validates the rows
    whose features' rank (:func:`row_ranks`) is f modulo ``folds``, with their full weight; its
    training part is ``weight`` minus that. Every row of positive weight is validated exactly
    once, and the parts hold about equal numbers of distinct feature vectors."""
    fold_of = row_ranks(X, weight, key) % folds
    return jnp.where(fold_of[None, :] == jnp.arange(folds)[:, None], weight[None, :], 0.0)


def train_masks(X, folds: int, random_state: int = 0, weight=None) -> np.ndarray:
    """``[folds, n]`` bool, True in fold f's training part: the folds that :func:`fit` and the
    estimators (``random_state``) deal, in the form :func:`jaxtree.prepare_folds` takes —
    to reproduce their CV with the functional API. ``X`` is taken in float32 (the estimators'
    dtype) for the rows' hash."""
    X = jnp.asarray(X, jnp.float32)
    weight = jnp.ones(X.shape[0]) if weight is None else jnp.asarray(weight)
    key = fit_keys(jax.random.PRNGKey(random_state))[1]
    return ~(np.asarray(fold_weights(X, weight, key, folds)) > 0)


def holdout_weights(X: Array, weight: Array, key: Array, fraction: float) -> Array:
    """``[2, n]`` weights of a split of the distinct feature vectors (:func:`row_ranks`):
    ``[0]`` the share ``fraction`` of them (S0), ``[1]`` the others; each row keeps its weight
    on its side."""
    ranks = row_ranks(X, weight, key)
    distinct = jnp.max(ranks) + 1
    first = (ranks >= 0) & (ranks < jnp.round(fraction * distinct))
    return jnp.stack([jnp.where(first, weight, 0.0), jnp.where(first | (ranks < 0), 0.0, weight)])


def cv_folds(X: Array, y: Array, weight: Array, fold_key: Array, grow_key: Array, tree: Tree,
             config: FitConfig, num_classes: int, fold_trees: Optional[Tree] = None,
             splits: Optional[Array] = None, depth_limit=None,
             fold_counts: Optional[Array] = None) -> select.Folds:
    """:class:`jaxtree.select.Folds` of a ``config.cv``-fold CV in weights (:func:`fold_weights`):
    every fold's validation part is all ``n`` rows, weighted by its validation weights. With
    ``config.per_fold_trees`` each fold's T0 is grown on its training part
    (:func:`grow_trees` with the keys :func:`fold_tree_keys`; or given, stacked, as
    ``fold_trees``), else every fold uses ``tree``. ``splits``: None, or ``[2, cv, n]`` the
    folds' training and validation weights in place of the dealt ones. ``depth_limit``: the
    folds' trees' depth (:func:`jaxtree.grow_tree`). ``fold_counts``: None, or with
    ``fold_trees`` their class counts on their training parts ``[cv, nodes, L]``
    (:attr:`jaxtree.GrowInfo.counts`), so the rows are not counted again."""
    train, valid = fold_parts(X, weight, fold_key, config.cv, splits)
    k = config.cv
    trees, counts = fold_trees, fold_counts
    if config.per_fold_trees and trees is None:
        trees, infos = grow_trees(X, y, train, fold_tree_keys(grow_key, k), config.grow,
                                  depth_limit)
        counts = infos.counts

    def one_fold(fold_tree, train_weight, fold_counts):
        stats = node_stats(fold_tree, X, y, num_classes, train_weight) if fold_counts is None \
            else counted_stats(fold_tree, fold_counts)
        path, on_path = route(fold_tree, X)
        return stats, path, on_path

    if trees is None:
        path, on_path = route(tree, X)
        stats = jax.vmap(lambda w: node_stats(tree, X, y, num_classes, w))(train)
        path, on_path = (jnp.broadcast_to(a, (k,) + a.shape) for a in (path, on_path))
    else:
        stats, path, on_path = jax.vmap(one_fold)(trees, train, counts)
    labels = jnp.broadcast_to(y, (k,) + y.shape)
    return select.Folds(train=stats, path=path, on_path=on_path, label=labels,
                        weight=valid.astype(tree.threshold.dtype), tree=trees)


def fold_parts(X, weight, fold_key, folds: int, splits=None) -> tuple[Array, Array]:
    """``(train, valid)`` ``[folds, n]`` weights of the CV's parts: the dealt folds
    (:func:`fold_weights`), or the given ``splits`` ``[2, folds, n]``."""
    if splits is not None:
        return splits[0], splits[1]
    valid = fold_weights(X, weight, fold_key, folds)
    return weight[None, :] - valid, valid


def fold_tree_keys(grow_key: Array, folds: int) -> Array:
    """``[folds, ...]`` the keys of the folds' trees (random feature subsets)."""
    return jax.random.split(grow_key, folds)


def grow_trees(X: Array, y: Array, weights: Array, keys: Array, config: GrowConfig,
               depth_limit=None):
    """``(trees, infos)``: :func:`jaxtree.grow_tree` on each row of ``weights`` ``[m, n]`` with
    its key (and ``depth_limit``), stacked (leading axis m). One tree after the other (a
    ``lax.map``): batched by ``vmap``, the builders' segment sums become batched scatters, ~12×
    slower on a CPU (two folds of 8,192 padded rows of spam, CART: 5.5 s against 0.46 s). The
    weight-free sorts of ``X`` (:func:`jaxtree.grow.presort`) are done once, outside the map."""
    presorted = presort(X, config)
    return jax.lax.map(lambda wk: grow_tree(X, y, wk[0], config, wk[1], depth_limit, presorted),
                       (weights, keys))


def fit_keys(key: Array) -> tuple[Array, Array]:
    """``(grow_key, fold_key)``: the keys of T0's feature subsets and of the CV's folds."""
    grow_key, fold_key = jax.random.split(key)
    return grow_key, fold_key


# ---------------------------------------------------------------------------------------------
# The fit
def fit(X, y, *, num_classes: int, weight=None, key=None, partition: str = "kd",
        max_depth: Optional[int] = None, min_split: int = 2, split: str = "spread",
        width: Optional[int] = None, bins: Optional[int] = None, criterion: str = "gini",
        max_features: Optional[int] = None, lam1=None, lam2=None,
        potentials: str = "practical", delta=0.05, smoothing=DEFAULT_SMOOTHING,
        proba: str = "predictive", scoring: str = "accuracy", tune: Optional[str] = "auto",
        cv: int = 2, cv_trees: str = "auto", random_state: int = 0,
        missing: Optional[bool] = None, softness: float = 0.0) -> FittedTree:
    """Fit a PAC-Bayes tree (Nguyen & Kpotufe 2018) on ``(X, y)``: one pure function.

    Grows T0, counts, tunes the λ's left None by the paper's two-stage CV grid and forms the
    posterior's node weights, in two compiled programs (T0 grown; the rest), one inside a
    caller's ``jit`` (module docstring). Traceable in ``X``, ``y``,
    ``weight``, ``key``, ``lam1``, ``lam2``, ``delta`` and ``smoothing``: ``jax.jit`` it (the
    other arguments static), ``jax.vmap`` it over weights or datasets, ``jax.grad`` through it in
    given λ's.

    Args:
      X: ``[n, D]`` float points; NaN marks a missing value (a CART T0 only, ``missing``).
      y: ``[n]`` int labels in ``0..num_classes-1``.
      num_classes: L (static).
      weight: ``[n]`` non-negative sample weights (default ones); 0 removes a row, an integer
        weight repeats it.
      key: a ``jax.random`` key (default ``PRNGKey(0)``): the CV's folds and T0's random feature
        subsets (``max_features``).
      partition: T0's builder, ``"kd"``, ``"dyadic"`` or ``"cart"`` (over ``bins`` quantile
        bins; :func:`jaxtree.grow_tree`).
      max_depth: depth cap of T0 (default :func:`default_max_depth` of ``n``). A dyadic T0's
        layout starts shallower (:func:`first_layout_depth`) and is deepened rung by rung
        while nodes are cut short, counted in ``FittedTree.depth_capped``, as the width is
        (below; a given ``width`` takes the whole depth at once).
      min_split: nodes with fewer points are not split.
      split: the KD / dyadic splitting rule (``"spread"``: widest spread, ``"cycle"``).
      width: level-width cap of T0; nodes beyond it stay leaves, counted in
        ``FittedTree.capped``. Default :func:`default_width`, raised rung by rung while nodes
        are capped (:func:`enlarge_until_uncapped`) when ``fit`` runs on concrete arrays; under a
        caller's ``jit`` or ``vmap`` it stays the first rung: check ``capped`` or give it.
      bins: quantile bins of a CART T0 (default :data:`DEFAULT_BINS`). With a concrete ``X``
        whose columns all have fewer distinct values, the histograms hold only that many bins,
        rounded up to a power of 2 (:attr:`jaxtree.GrowConfig.max_distinct`): the same tree.
      criterion: CART's impurity, ``"gini"`` or ``"entropy"``.
      max_features: split on a random subset of this many features per node (default all).
      lam1, lam2: the posterior's λ's; None: selected by CV (``tune="auto"``).
      potentials: ``"practical"``, ``"authors"`` or ``"theory"`` (one λ, ``lam1``, and ``delta``).
      delta: the theory potentials' confidence parameter.
      smoothing: α of the nodes' class frequencies (:func:`jaxtree.class_frequencies`).
      proba: ``"predictive"`` (posterior predictive) or ``"majority"`` (vote of node labels).
      scoring: the CV's criterion, ``"accuracy"``, ``"neg_log_loss"`` or ``"neg_brier_score"``.
      tune: ``"auto"`` (select the λ's left None) or None (all must be given).
      cv: number of CV folds.
      cv_trees: ``"auto"`` (the default: a CART or KD T0 is grown anew on each fold's
        training part, a dyadic one shared: :func:`per_fold_trees`), ``"per_fold"`` or
        ``"shared"`` (one T0 of all the points).
      random_state: the seed of a CART T0's ties between features (static; ``key`` draws the
        rest).
      missing: whether ``X`` may hold NaN, whose side each CART split learns
        (:class:`jaxtree.GrowConfig`'s ``missing``; static). None: whether a concrete ``X``
        holds NaN — under a caller's ``jit`` pass True when it may.
      softness: σ ≥ 0 of the prediction's soft routing (static; :mod:`jaxtree.soft`): 0 (the
        paper's hard routing, default here) or e.g. :data:`jaxtree.soft.DEFAULT_SOFTNESS`, the
        estimator's default. The λ's are selected with hard routing either way.

    Returns:
      :class:`FittedTree`. Called eagerly, a selected setting whose refit predicts one class
      is skipped as in the estimators (:func:`skip_collapsed_refit`, a host step); under a
      caller's ``jit`` or ``vmap`` the CV search's own choice is returned.

    Raises:
      ValueError: a bad argument (named), before any tracing.

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(200, 2)).astype(np.float32)
        >>> y = (X[:, 0] > 0).astype(np.int32)
        >>> model = jaxtree.fit(X, y, num_classes=2, partition="kd")
        >>> proba = jaxtree.predict_proba(model, X)
        >>> proba.shape, float((proba.argmax(1) == y).mean()) > 0.95
        ((200, 2), True)
    """
    n, dims = _check_data(X, y, num_classes, weight)
    if missing is not None and not isinstance(missing, bool):
        raise ValueError(f"missing must be None, True or False; got {missing!r}")
    found = holds_nan(X)
    missing = found if missing is None else missing
    if missing and partition != "cart":
        raise ValueError(f"X holds NaN (missing values), which only a CART T0 routes: pass "
                         f"partition='cart' (got {partition!r}) or impute them first")
    if found and not missing:
        raise ValueError("X holds NaN: pass missing=True (with partition='cart') to learn where "
                         "missing values go, or impute them first")
    config = fit_config(n, dims, num_classes=num_classes, partition=partition,
                        max_depth=max_depth, min_split=min_split, split=split, width=width,
                        bins=bins, criterion=criterion, max_features=max_features, lam1=lam1,
                        lam2=lam2, potentials=potentials, proba=proba, scoring=scoring,
                        tune=tune, cv=cv, cv_trees=cv_trees, random_state=random_state,
                        missing=missing, max_distinct=None if isinstance(X, jax.core.Tracer)
                        else max_distinct(X, partition, bins), softness=softness)
    check_smoothing(smoothing)

    def run(config):
        model = fit_with_config(X, y, weight, key, config, lam1=lam1, lam2=lam2, delta=delta,
                                smoothing=smoothing)
        return model, (model.capped, model.depth_capped)

    model, config = (run(config)[0], config) if width is not None else enlarge_until_uncapped(
        run, config, (n, dims))
    return skip_collapsed_refit(model, config, delta)


def max_distinct(X, partition: str, bins: Optional[int] = None) -> Optional[int]:
    """:attr:`jaxtree.GrowConfig.max_distinct` of a concrete sample ``X`` for a T0 of
    ``partition``: :func:`jaxtree.grow.distinct_bound` for CART (its histograms), else None
    (and None for a ``bins`` that the config's check will refuse)."""
    if partition != "cart" or not (bins is None or (isinstance(bins, (int, np.integer))
                                                    and not isinstance(bins, bool) and bins >= 2)):
        return None
    return distinct_bound(X, DEFAULT_BINS if bins is None else bins)


def fit_config(num_rows: int, num_features: int, *, num_classes: int, partition: str = "kd",
               max_depth=None, min_split: int = 2, split: str = "spread", width=None, bins=None,
               criterion: str = "gini", max_features=None, lam1=None, lam2=None,
               potentials: str = "practical", proba: str = "predictive",
               scoring: str = "accuracy", tune: Optional[str] = "auto", cv: int = 2,
               cv_trees: str = "auto", random_state: int = 0, missing: bool = False,
               max_distinct: Optional[int] = None, softness: float = 0.0) -> FitConfig:
    """The :class:`FitConfig` of :func:`fit`'s options for a sample of ``num_rows`` rows (the
    padded shape: the defaults of depth and width follow it); ``max_distinct``:
    :class:`jaxtree.GrowConfig`'s (:func:`max_distinct`). Raises ValueError naming a bad
    option."""
    if potentials not in POTENTIALS:
        raise ValueError(f"potentials must be one of {POTENTIALS}; got {potentials!r}")
    if proba not in PROBA_MODES:
        raise ValueError(f"proba must be one of {PROBA_MODES}; got {proba!r}")
    select.check_scoring(scoring)
    check_softness(softness)
    if tune not in ("auto", None):
        raise ValueError(f"tune must be 'auto' or None in jaxtree.fit; got {tune!r} (gradient "
                         f"and bound tuning are estimator options)")
    per_fold = per_fold_trees(cv_trees, partition, free_empty_nodes=True)
    names = ("lam1",) if potentials == "theory" else ("lam1", "lam2")
    given = {"lam1": lam1, "lam2": lam2}
    tuned = tuple(name for name in names if given[name] is None)
    for name in names:
        value = given[name]
        if value is not None and not isinstance(value, jax.core.Tracer) and not value > 0:
            raise ValueError(f"{name} must be > 0 (or None to select it by CV); got {value!r}")
    if tuned and (tune is None or potentials == "theory"):
        raise ValueError(f"{' and '.join(tuned)} must be given with tune=None or "
                         f"potentials='theory'; got None")
    if tuned and not (isinstance(cv, (int, np.integer)) and 2 <= cv <= num_rows):
        raise ValueError(f"cv must be an int between 2 and the number of rows ({num_rows}); "
                         f"got {cv!r}")
    if not isinstance(min_split, (int, np.integer)) or min_split < 2:
        raise ValueError(f"min_split must be an int >= 2; got {min_split!r}")
    depth = default_max_depth(partition, num_rows, num_features) if max_depth is None \
        else max_depth
    if not isinstance(depth, (int, np.integer)) or depth < 0:
        raise ValueError(f"max_depth must be an int >= 0 or None; got {max_depth!r}")
    # a given width fixes the layout: no ladder, so the layout takes the whole depth
    grow = GrowConfig(partition=partition,
                      max_depth=first_layout_depth(partition, int(depth)) if width is None
                      else int(depth),
                      width=default_width(num_rows, min_split, int(depth), partition)
                      if width is None else width,
                      min_split=int(min_split), split=split, criterion=criterion,
                      bins=DEFAULT_BINS if bins is None else bins, max_features=max_features,
                      num_classes=num_classes, random_state=random_state, missing=missing,
                      max_distinct=max_distinct)
    check_grow_config(grow)
    return FitConfig(grow=grow, potentials=potentials, proba=proba, tuned=tuned, cv=int(cv),
                     per_fold_trees=per_fold, scoring=scoring, max_depth=int(depth),
                     softness=float(softness))


def fit_with_config(X, y, weight, key, config: FitConfig, *, lam1=None, lam2=None, delta=0.05,
                    smoothing=DEFAULT_SMOOTHING, splits=None, depth_limit=None) -> FittedTree:
    """:func:`fit` with its static options in ``config`` (:func:`fit_config`); the estimators'
    entry point. ``weight`` None: ones; ``key`` None: ``PRNGKey(0)``; ``splits``: None (the CV
    deals its folds) or ``[2, cv, n]`` the folds' training and validation weights;
    ``depth_limit``: the depth of T0 and of the folds' trees, at most ``config.max_depth``
    (None: that), an argument of the compiled program — the estimators give the default depth
    of the sample's size here, the layout's depth in ``config``, so refits whose default depths
    differ share one program."""
    dtype = float_dtype()
    X = jnp.asarray(X, dtype)
    weight = jnp.ones(X.shape[0], dtype) if weight is None else jnp.asarray(weight, dtype)
    key = jax.random.PRNGKey(0) if key is None else key
    nan = jnp.asarray(jnp.nan, dtype)
    lam = {"lam1": nan if lam1 is None else jnp.asarray(lam1, dtype),
           "lam2": nan if lam2 is None else jnp.asarray(lam2, dtype)}
    depth_limit = _reachable_depth(config) if depth_limit is None else depth_limit
    grow_args = (X, jnp.asarray(y, jnp.int32), weight, key, jnp.asarray(depth_limit, jnp.int32),
                 None if splits is None else jnp.asarray(splits, dtype))
    finish_args = (lam, jnp.asarray(delta, dtype), jnp.asarray(smoothing, dtype))
    ahead = _compile_ahead(grow_args, finish_args, config)
    grown = _grow_program(*grow_args, config=config)
    if ahead is not None:
        ahead.join()
    return _finish_program(grown, *grow_args, *finish_args, config=config)


# The fit is two compiled programs, T0 grown (with the folds' trees) and the rest (CV grid,
# weights), so that a first fit prepares the second in a thread from the first's output shapes:
# its tracing and lowering (GIL-bound) overlap the first's compilation (which releases the GIL),
# and its compilation the first's run. Two XLA:CPU compilations at once take as long as one
# after the other, so that is all the overlap. Spam, 3,000 rows, CART: the grow program compiles
# in 2.2 s, the rest in 1.8 s (the fit as one program: 4.0 s); a first fit 6.7 -> 6.1 s
# (experiments/results/bench_fit.md). The grow program now compiles at LLVM's optimization
# level 1 (shapes.QUICK_CPU_COMPILER_OPTIONS: 1.75 s instead of 2.1 s). Under a caller's trace
# both join the caller's program.
_COMPILED_AHEAD: set = set()


def _compile_ahead(grow_args, finish_args, config: FitConfig):
    """Compile both programs of a fit at these arguments' shapes, the second in a thread
    (returned, to join before its call); None where they are compiled already, or under a
    trace (the caller's program holds them)."""
    leaves = jax.tree.leaves((grow_args, finish_args))
    if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
        return None
    signature = (shapes.releases(), config,
                 tuple((leaf.shape, str(leaf.dtype)) for leaf in leaves))
    if signature in _COMPILED_AHEAD:
        return None
    _COMPILED_AHEAD.add(signature)
    grow = _grow_program.lower(*grow_args, config=config)
    x64 = float_dtype() == np.float64       # thread-local in jax.enable_x64 contexts

    def compile_finish():
        try:
            with jax.enable_x64(bool(x64)):
                _finish_program.lower(grow.out_info, *grow_args, *finish_args,
                                      config=config).compile()
        except Exception:   # noqa: BLE001 — its call compiles it again and raises there
            pass

    thread = threading.Thread(target=compile_finish, daemon=True)
    thread.start()
    grow.compile()
    return thread


@functools.partial(shapes.jit, static_argnames="config",
                   cpu_options=shapes.QUICK_CPU_COMPILER_OPTIONS)
def _grow_program(X, y, weight, key, depth_limit, splits, config: FitConfig):
    """``(tree, info, fold_trees, fold_counts)``: T0 (:func:`jaxtree.grow_tree`) and, with
    ``config.per_fold_trees`` and tuned λ's, the folds' trees and their class counts (one loop:
    one copy of the builder in the program), else None for those."""
    grow_key, fold_key = fit_keys(key)
    if config.tuned and config.per_fold_trees:
        train = fold_parts(X, weight, fold_key, config.cv, splits)[0]
        trees, infos = grow_trees(
            X, y, jnp.concatenate([weight[None, :], train]),
            jnp.concatenate([grow_key[None], fold_tree_keys(grow_key, config.cv)]), config.grow,
            depth_limit)
        tree, info = jax.tree.map(lambda a: a[0], (trees, infos))
        fold_trees, fold_counts = jax.tree.map(lambda a: a[1:], (trees, infos.counts))
        # a fold's tree cut short by the layout would change the CV: its caps count too
        info = dataclasses.replace(info, capped=infos.capped.sum(),
                                   depth_capped=infos.depth_capped.sum())
        return tree, info, fold_trees, fold_counts
    tree, info = grow_tree(X, y, weight, config.grow, grow_key, depth_limit)
    return tree, info, None, None


@functools.partial(shapes.jit, static_argnames="config")
def _finish_program(grown, X, y, weight, key, depth_limit, splits, lam, delta, smoothing,
                    config: FitConfig) -> FittedTree:
    """The :class:`FittedTree` of T0 and the folds' trees ``grown`` (:func:`_grow_program`):
    node statistics, the λ's tuned by the CV grid where not given, the weights."""
    tree, info, fold_trees, fold_counts = grown
    grow_key, fold_key = fit_keys(key)
    stats = counted_stats(tree, info.counts)
    search, cv_error = None, jnp.asarray(jnp.nan, X.dtype)
    if config.tuned:
        folds = cv_folds(X, y, weight, fold_key, grow_key, tree, config,
                         config.grow.num_classes, fold_trees, splits, depth_limit, fold_counts)
        directions = tuple(d for d in select.PACBAYES_DIRECTIONS if d[0] in config.tuned)
        fixed = {name: lam[name] for name in ("lam1", "lam2") if name not in config.tuned}
        if config.proba == "predictive":
            fixed["smoothing"] = smoothing
        search = select.paper_search(tree, folds, TUNED_POTENTIALS[config.potentials],
                                     directions, fixed=fixed, scoring=config.scoring)
        lam = {**lam, **search.best_params}
        cv_error = search.best_error
    log_weights = _log_weights(tree, stats, lam, delta, config.potentials)
    knots = soft.quantile_knots(tree, X, weight) if config.softness > 0 else None
    return FittedTree(tree=tree, stats=stats, log_weights=log_weights,
                      node_proba=class_frequencies(tree, stats.counts, smoothing),
                      lam1=lam["lam1"], lam2=lam["lam2"], capped=info.capped,
                      cv_error=cv_error, search=search, depth_capped=info.depth_capped,
                      knots=knots, proba=config.proba, softness=config.softness)


def skip_collapsed_refit(model: FittedTree, config: FitConfig, delta=0.05) -> FittedTree:
    """``model`` (an eager result of :func:`fit_with_config` with ``config``), or the same fit at
    another setting of its CV grid if the selected one's refit is collapsed
    (docs/theory/selection.md, "A refit that predicts one class is skipped"); the step after
    the compiled fit in :func:`fit` and the estimators, on the host.

    When the λ's were tuned by the CV's accuracy and predictions are the posterior predictive,
    and the refit at the selected setting gives one class to every training point
    (:func:`jaxtree.select.refit_collapsed`) although that setting's CV error was below the
    error of voting the majority class (one minus its share of the training points), the folds
    chose a model the refit is not: the setting of least CV error among both stages' settings
    whose refit is not collapsed is taken instead (:func:`jaxtree.select.interior_best` within
    a stage, stage 1 on a tie), with its weights, λ's and CV error (``search.best_params`` and
    ``best_error`` too). Unchanged when no setting qualifies, for a batch of fits (a ``vmap``'s
    stacked result) and under a trace. The grid's weights are computed only in that case. The
    majority vote's error is taken from the root's class counts, not ``stats.errors``, so that
    a screen replacing the error term (``experiments.benchmark_suite --leaf-error``) leaves
    this check as it is."""
    search = model.search
    checked = (search is not None and config.proba == "predictive"
               and config.scoring == "accuracy" and not isinstance(model.lam1, jax.core.Tracer)
               and model.lam1.ndim == 0)
    if not checked or not select.refit_collapsed(model.tree, model.stats, model.node_proba,
                                                 model.log_weights):
        return model
    if not select.beats_majority(model.stats, float(model.cv_error)):
        return model
    directions = tuple(d for d in select.PACBAYES_DIRECTIONS if d[0] in config.tuned)
    names = [name for name, _ in directions]
    lam = {"lam1": model.lam1, "lam2": model.lam2}
    log_weights_of = jax.jit(jax.vmap(lambda params: _log_weights(
        model.tree, model.stats, {**lam, **params}, delta, config.potentials)))

    def collapsed(grid):
        log_weights = np.asarray(log_weights_of({name: grid[name] for name in names}))
        return np.array([select.refit_collapsed(model.tree, model.stats, model.node_proba, w)
                         for w in log_weights])

    best = select.least_error_passing(search, directions, collapsed)
    if best is None:
        return model
    total, params = best
    cv_error = jnp.asarray(total / float(np.sum(search.num_valid)), model.cv_error.dtype)
    lam = {**lam, **params}
    return dataclasses.replace(
        model, log_weights=_log_weights(model.tree, model.stats, lam, delta, config.potentials),
        lam1=lam["lam1"], lam2=lam["lam2"], cv_error=cv_error,
        search=dataclasses.replace(search, best_params=params, best_error=cv_error))


def _log_weights(tree: Tree, stats: NodeStats, lam: dict, delta, potentials: str) -> Array:
    if potentials == "practical":
        return pacbayes_log_weights(tree, stats, lam["lam1"], lam["lam2"])
    if potentials == "authors":
        return pacbayes_authors_log_weights(tree, stats, lam["lam1"], lam["lam2"])
    return pacbayes_theory_log_weights(tree, stats, lam["lam1"], delta)


def predict_proba(model: FittedTree, X) -> Array:
    """``[n, L]`` class probabilities of a :class:`FittedTree` at ``X`` ``[n, D]``: the posterior
    predictive (``proba="predictive"``) or the vote of the nodes' labels (``"majority"``).

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.arange(8.0, dtype=np.float32)[:, None]
        >>> y = np.array([0, 0, 0, 0, 1, 1, 1, 1])
        >>> model = jaxtree.fit(X, y, num_classes=2, lam1=4.0, lam2=1.0)
        >>> jaxtree.predict_proba(model, X[[0, 7]]).argmax(axis=1).tolist()
        [0, 1]
    """
    if model.softness > 0:
        check_tree_points(model.tree, X)
        predictions = node_predictions(model.proba, model.node_proba, model.stats.label)
        return soft.soft_scores(model.tree, model.knots, predictions, model.log_weights,
                                jnp.asarray(X, model.node_proba.dtype), model.softness)
    if model.proba == "predictive":
        return posterior_predictive(model.tree, model.node_proba, model.log_weights, X)
    return vote(model.tree, model.stats.label, model.log_weights, X, model.stats.num_classes)


def node_predictions(proba: str, node_proba: Array, label: Array) -> Array:
    """``[nodes, L]`` what each node contributes to a prediction (times its weight): its class
    frequencies ``node_proba`` (``proba="predictive"``) or its one-hot ``label``
    (``"majority"``)."""
    if proba == "predictive":
        return node_proba
    return jax.nn.one_hot(label, node_proba.shape[1], dtype=node_proba.dtype)


def check_softness(softness) -> None:
    """Raise ValueError unless ``softness`` is a finite real ≥ 0 (:mod:`jaxtree.soft`)."""
    if isinstance(softness, (bool, np.bool_)) or not isinstance(softness, (int, float, np.number)) \
            or not np.isfinite(softness) or softness < 0:
        raise ValueError(f"softness must be a finite number >= 0 (0: hard routing); "
                         f"got {softness!r}")


def _check_data(X, y, num_classes, weight) -> tuple[int, int]:
    """``(n, D)`` of the fit's arrays; ValueError naming the argument whose shape is wrong."""
    shape = np.shape(X)
    if len(shape) != 2 or shape[0] < 2 or shape[1] < 1:
        raise ValueError(f"X must be [n, D] with n >= 2 and D >= 1; got shape {shape}")
    if np.shape(y) != shape[:1]:
        raise ValueError(f"y must be [n] = [{shape[0]}]; got shape {np.shape(y)}")
    if weight is not None and np.shape(weight) != shape[:1]:
        raise ValueError(f"weight must be [n] = [{shape[0]}]; got shape {np.shape(weight)}")
    if not isinstance(num_classes, (int, np.integer)) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive int; got {num_classes!r}")
    return int(shape[0]), int(shape[1])
