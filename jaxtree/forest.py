"""A forest of PAC-Bayes trees with out-of-bag certificates.

Each of the ``n_estimators`` trees is a PAC-Bayes vote over the prunings of its own T0
(:class:`jaxtree.PACBayesTreeClassifier`'s model), grown on a bootstrap sample of the training
set given as integer sample weights. The trees' T0 share one compact shape (they are grown
at shapes fixed by the configuration) and are stacked, so the statistics, the posterior weights and
the predictions of all trees are compiled maps over the trees (one tree after the other, which
bounds memory), run by ``n_jobs`` threads on equal chunks of the trees (:func:`over_trees`).
The λ's are shared by all trees and chosen by the forest's out-of-bag error on a small grid (no
inner cross-validation). :meth:`PACBayesForestClassifier.certificate` gives the out-of-bag
first-order and tandem bounds on the majority vote's risk (:mod:`jaxtree.vote_bounds`,
docs/theory/forest.md).

Growing T0 is :func:`grow_trees`: binned CART trees grown by :func:`jaxtree.grow_tree` on the
bootstrap weights with a random subset of ``max_features`` features per node (only those columns
are counted), each thread's trees in one compiled ``lax.map``. The sample is padded with
weight-0 rows to :func:`jaxtree.shapes.padded` rows, so fits at nearby sizes reuse the compiled
programs.
Measured with ``experiments/results/forest.md``'s command and, for the refit,
``python -m experiments.bench_fit --sections forest``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from jaxtree import fitting, shapes
from jaxtree.grow import SPLITTERS, GrowConfig
from jaxtree.pacbayes import node_predictive, pacbayes_log_weights
from jaxtree.select import LOG_GRID
from jaxtree.stats import check_smoothing, class_frequencies, counted_stats
from jaxtree.tree import Tree, leaf_of
from jaxtree.validation import float_dtype, holds_nan
from jaxtree.vote_bounds import WEIGHTS, ForestCertificate, forest_certificate

#: The (λ1, λ2) grid searched by out-of-bag error: the two largest of every other value of the
#: paper's λ1 grid (7.4 and 64: trees near unpruned) and λ2 at the bottom of its grid and below. A
#: bagged forest wants its trees near unpruned (the bootstrap average does the smoothing that the
#: vote over prunings does for one tree): over 26 held-out problems and the 7 Table 2 datasets (3
#: splits each), every fixed λ1 below 7.4 erred more (λ1 = 0.86: 1.034× and 1.070× the random
#: forest, against 0.990× and 1.012× at 7.4), and choosing among all 5 values of λ1 by OOB error
#: let the OOB noise pick those on small samples (breast cancer: 0.058, against 0.051 with these 4
#: and the random forest's 0.043), 1.013× and 1.018×; among these 4 settings 0.990× and 1.012×
#: (``experiments/results/forest_lambda.md``). Fewer settings also cost the union bound less (δ/4,
#: not δ/10) and the grid pass less.
LAMBDA_GRID = tuple((float(a), float(b)) for a in LOG_GRID[7::2]
                    for b in (2.0 ** -14, LOG_GRID[0]))
#: Dirichlet pseudo-count of the trees' node class frequencies. Near 0, as a random forest's
#: leaf frequencies: with the single tree's 0.5, L·α pseudo-counts swamp the small leaves of
#: unpruned trees, and averaging those flattened predictives cost the forest's predict 2.5 points
#: of test error on letter (26 classes: 0.1115 against 0.0865 at 0.001; split 0 of
#: ``experiments.forest``) and 0.15–0.2 points on digit and eeg.
FOREST_SMOOTHING = 1e-3
#: Levels a forest's trees may grow past the single tree's default cap ``2·ceil(log2 n)``: a
#: random forest grows its trees to purity (scikit-learn's: 25–38 levels on 4,000 rows). At the
#: single tree's 24 levels, epileptic's trees kept 64 % of their weight in impure leaves at the
#: cap (big majority nodes holding 0.2 % minority points) and the forest erred 0.0304 against
#: the random forest's 0.0298; at 32, 0.0295, the other six datasets within 0.0002
#: (``experiments/results/forest.md``, 5 splits), for refits 11–30 % longer (spam, eeg, letter).
FOREST_EXTRA_DEPTH = 8


def _num_features(max_features, dims: int) -> int:
    if max_features is None:
        return dims
    if max_features == "sqrt":
        return max(1, int(math.sqrt(dims)))
    if max_features == "log2":
        return max(1, int(math.log2(dims)))
    if isinstance(max_features, (int, np.integer)) and not isinstance(max_features, bool) \
            and 1 <= max_features:
        return min(int(max_features), dims)
    if isinstance(max_features, float) and 0 < max_features <= 1:
        return max(1, int(max_features * dims))
    raise ValueError(f"max_features must be 'sqrt', 'log2', None, an int >= 1 or a float in "
                     f"(0, 1]; got {max_features!r}")


def _num_draws(max_samples, n: int) -> int:
    """Draws per bootstrap sample: ``n`` (None), an int, or ``round(max_samples · n)``
    (at least 1), as scikit-learn's forests count them."""
    if max_samples is None:
        return n
    if isinstance(max_samples, (int, np.integer)) and not isinstance(max_samples, bool):
        if not 1 <= max_samples <= n:
            raise ValueError(f"max_samples must be in [1, n_samples = {n}] as an int; got "
                             f"{max_samples}")
        return int(max_samples)
    if isinstance(max_samples, (float, np.floating)) and 0 < max_samples <= 1:
        return max(1, round(float(max_samples) * n))
    raise ValueError(f"max_samples must be None, an int >= 1 or a float in (0, 1]; got "
                     f"{max_samples!r}")


def _num_threads(n_jobs, n_estimators: int) -> int:
    """Threads that run chunks of the trees at once: ``n_jobs``, or with None / -1 every core
    this process may use; at most one per tree."""
    if n_jobs is None or n_jobs == -1:
        jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else (os.cpu_count() or 1)
    elif isinstance(n_jobs, (int, np.integer)) and not isinstance(n_jobs, bool) and n_jobs >= 1:
        jobs = int(n_jobs)
    else:
        raise ValueError(f"n_jobs must be None, -1 or an int >= 1; got {n_jobs!r}")
    return max(1, min(jobs, n_estimators))


def over_trees(fn, jobs: int, per_tree, *shared):
    """``fn(*chunk, *shared)`` on ``jobs`` equal chunks of the trees, one thread per chunk;
    returns the chunks' outputs in order. ``per_tree``: a tuple of pytrees whose arrays have the
    trees on their leading axis; the last chunk is padded to the others' size by repeating the
    last tree (the caller drops or zero-weights the padding), so every chunk runs one compiled
    program.

    Why threads: a compiled ``lax.map`` over trees runs its small per-level operations one after
    another on one core, and the XLA CPU runtime runs two calls from two threads on two cores
    at once (100 spam trees grown in 1.36 s by one call, 0.72 s by two calls of 50 from two
    threads, on 2 cores)."""
    if jobs == 1:
        return [fn(*per_tree, *shared)]
    m = len(jax.tree.leaves(per_tree)[0])
    size = -(-m // jobs)

    def chunk(x, j):
        part = x[j * size:(j + 1) * size]
        missing = size - part.shape[0]
        return jnp.concatenate([part, jnp.repeat(x[-1:], missing, axis=0)]) if missing else part

    def run(j):
        return fn(*jax.tree.map(lambda x: chunk(x, j), per_tree), *shared)

    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(run, range(-(-m // size))))


def _joined(chunks, m: int):
    """The chunks' outputs of :func:`over_trees` joined on the tree axis, padding dropped."""
    return jax.tree.map(lambda *parts: jnp.concatenate(parts)[:m], *chunks)


def draw_samples(n: int, n_estimators: int, bootstrap: bool, rng, draws=None) -> np.ndarray:
    """``[m, n]`` int32 sample weights: bootstrap multiplicities (``draws`` draws with
    replacement, default n) or all ones."""
    if not bootstrap:
        return np.ones((n_estimators, n), np.int32)
    draws = rng.integers(0, n, size=(n_estimators, n if draws is None else draws))
    return np.stack([np.bincount(d, minlength=n) for d in draws]).astype(np.int32)


def grow_trees(X: np.ndarray, y: np.ndarray, weights: np.ndarray, max_features: int,
               max_depth: Optional[int], min_split: int, rng, splitter: str = "best",
               jobs: int = 1) -> tuple[Tree, jax.Array]:
    """``(trees, counts)``: T0 of every tree, stacked (leading axis ``m``), and its class
    counts ``[m, nodes, L]`` on its bootstrap sample (:attr:`jaxtree.GrowInfo.counts`): binned
    CART trees grown by :func:`jaxtree.grow_tree` on the bootstrap weights, ``max_features``
    features drawn at random for each node, by a compiled ``lax.map`` over each chunk of the
    trees (:func:`jaxtree.fitting.grow_trees`), one thread per chunk.

    Args:
      X: ``[n, D]`` float; NaN is a missing value (each split learns its side).
      y: ``[n]`` int labels ``0..L-1``.
      weights: ``[m, n]`` int sample weights (a tree sees row i ``weights[h, i]`` times); rows
        of weight 0 in every tree (padding) do not count in the histograms' bound on distinct
        values (:attr:`jaxtree.GrowConfig.max_distinct`).
      max_features: features each node may split on (``D``: all).
      max_depth: depth cap (None: :func:`jaxtree.fitting.default_max_depth` of ``n`` plus
        :data:`FOREST_EXTRA_DEPTH`).
      min_split: nodes of smaller weight are not split.
      rng: ``numpy.random.Generator`` of the trees' keys: their feature subsets and, with
        subsets or random cuts, their ties between equally good features (each tree its own;
        with one tie seed for all, the forest's votes erred more: 1.011× the random forest
        against 1.003×, ``experiments/results/forest.md``). With every feature (``max_features
        = D``) ties go by ``GrowConfig.random_state=0``, as a single tree's.
      splitter: ``"best"``, ``"random"`` (:class:`jaxtree.GrowConfig`'s: one random cut per
        node and feature, Extra-Trees-style) or ``"mixed"`` (:func:`tree_splitters`).
      jobs: threads that grow chunks of the trees at once (:func:`over_trees`).
    """
    n, dims = X.shape
    groups = tree_splitters(splitter, len(weights), holds_nan(X))
    depth = fitting.default_max_depth("cart", n, dims) + FOREST_EXTRA_DEPTH if max_depth is None \
        else int(max_depth)
    config = GrowConfig(partition="cart", max_depth=depth,
                        width=fitting.default_width(n, min_split, depth, "cart"),
                        num_classes=int(y.max()) + 1, min_split=int(min_split),
                        bins=fitting.DEFAULT_BINS,
                        # the widest group's splitter: the width that an earlier fit of this
                        # process needed is remembered per splitter (random cuts grow wider
                        # levels: letter 1,024 slots, best cuts 256), so a forest with random
                        # cuts does not widen the best-cut forests fitted after it
                        splitter="random" if "random" in groups else "best",
                        max_features=None if max_features >= dims else int(max_features),
                        random_state=0, missing=holds_nan(X),
                        max_distinct=fitting.max_distinct(X[weights.sum(axis=0) > 0], "cart"))
    keys = jax.random.split(jax.random.PRNGKey(int(rng.integers(2 ** 31))), len(weights))
    X, y = jnp.asarray(X, float_dtype()), jnp.asarray(y, jnp.int32)
    weights = jnp.asarray(weights, float_dtype())

    def run(config):
        # every group at the same width (one layout shape, so the trees stack)
        grown = []
        for group, (start, stop) in groups.items():
            group_config = dataclasses.replace(config, splitter=group)
            chunks = over_trees(lambda w, k: _grow_all(X, y, w, k, group_config),
                                min(jobs, stop - start), (weights[start:stop], keys[start:stop]))
            grown.append(_joined(chunks, stop - start))
        trees, info = jax.tree.map(lambda *parts: jnp.concatenate(parts), *grown)
        return ((trees, info.counts, info.capped.sum()),
                (info.capped.sum(), info.depth_capped.sum()))

    (trees, counts, capped), config = fitting.enlarge_until_uncapped(run, config, X.shape)
    capped = int(capped)
    if capped:
        warnings.warn(f"{capped} nodes over the forest's trees were not split: a level would "
                      f"need more than {config.width} nodes; raise min_split or lower "
                      f"max_depth", RuntimeWarning, stacklevel=3)
    return trees, counts


_grow_all = jax.jit(fitting.grow_trees, static_argnames="config")

#: The forest's splitters: :data:`jaxtree.grow.SPLITTERS` and ``"mixed"`` (:func:`tree_splitters`).
FOREST_SPLITTERS = SPLITTERS + ("mixed",)


def tree_splitters(splitter: str, n_estimators: int, missing: bool) -> dict:
    """``{grow splitter: (first tree, end)}``: which trees each splitter grows. ``"mixed"``:
    the first ``ceil(m / 2)`` trees take each node's best cut, the others random cuts
    (Extra-Trees-style); with missing values (``missing``) every tree takes the best cut (the
    random splitter has no rule for them).

    Why mixed (``experiments/results/forest.md``, ``forest_random.md``, 7 datasets, 5 splits): a
    forest of best-cut trees copies a random forest and errs as much (0.986× scikit-learn's over
    5 splits × 3 seeds), one of random-cut trees less (0.997×: less correlated votes) but its
    trees err more one by one, so its out-of-bag bounds are looser than the ``mvb`` package's
    for a random forest on 4 of the 7; half and half errs 0.971× and keeps the best-cut trees,
    on which a bound-optimised ρ leans (its better bound at or below ``mvb``'s on all 7). Not
    the default: the random cuts' trees need a wider layout (letter: 1,024 slots a level, not
    256), and the fit takes 1.5–2.7× as long (eeg, spam, letter)."""
    if splitter == "mixed" and not missing:
        half = -(-n_estimators // 2)
        return {"best": (0, half), "random": (half, n_estimators)} if half < n_estimators \
            else {"best": (0, n_estimators)}
    return {"best" if splitter == "mixed" else splitter: (0, n_estimators)}


@jax.jit
def tree_statistics(trees: Tree, counts, smoothing):
    """Stacked node statistics and smoothed class frequencies of the trees from their class
    counts ``[m, nodes, L]`` (:func:`grow_trees`' — the builder's level histograms, so the
    points are not routed through the trees again: 0.16 s → 0.09 s of a 100-tree letter fit;
    one thread: split over two, the copies of the chunks cost more than they saved)."""
    def one(tree_and_counts):
        tree, tree_counts = tree_and_counts
        return (counted_stats(tree, tree_counts),
                class_frequencies(tree, tree_counts, smoothing))
    return jax.lax.map(one, (trees, counts))


def grid_predictive_sums(trees, stats, node_proba, lams, X, tree_weight, jobs: int = 1,
                         labels: bool = False):
    """``[G, n, L]`` ``Σ_h tree_weight[h, i] · p_h(· | x_i; λ_g)``: the trees' posterior
    predictives at each of the G settings ``lams`` ``[G, 2]``, summed with per-point weights
    ``tree_weight`` ``[m, n]`` (e.g. the out-of-bag mask), one tree after the other, in ``jobs``
    threads (:func:`over_trees`; a padding tree has weight 0).

    With ``labels``: ``(sums, labels)``, ``labels`` ``[m, n, G]`` every tree's predicted label
    (argmax of its predictive; the smallest int dtype that holds L) at every setting, read off
    the predictives the sums add anyway (a second pass at the chosen λ cost 0.1 s of a 100-tree
    letter fit)."""
    m = tree_weight.shape[0]
    padded = -(-m // jobs) * jobs
    tree_weight = jnp.concatenate([jnp.asarray(tree_weight),
                                   jnp.zeros((padded - m,) + tree_weight.shape[1:],
                                             tree_weight.dtype)])
    chunks = over_trees(lambda *a: _grid_predictive_sums(*a, labels=labels), jobs,
                        (trees, stats, node_proba, tree_weight), lams, X)
    sums = functools.reduce(jnp.add, [c[0] for c in chunks])
    if not labels:
        return sums
    return sums, jnp.concatenate([c[1] for c in chunks])[:m]


def _label_dtype(num_classes: int):
    return next(t for t in (jnp.int8, jnp.int16, jnp.int32) if num_classes <= jnp.iinfo(t).max)


#: Up to this many classes :func:`_argmax_classes` compares the classes one after the other.
UNROLLED_ARGMAX = 64


def _argmax_classes(x):
    """``[n, ...]`` the index of the largest of ``x`` ``[n, L, ...]`` along axis 1 (ties: the
    smallest), as ``jnp.argmax``, by a running comparison unrolled over the L classes: XLA's
    CPU argmax (a reduction of value–index pairs) took 1.4 ms against 0.3 ms for a letter tree's
    ``[4096, 26, 10]`` out-of-bag predictives. Past :data:`UNROLLED_ARGMAX` classes (a program
    that grows with L), ``jnp.argmax``."""
    num_classes = x.shape[1]
    dtype = _label_dtype(num_classes)
    if num_classes > UNROLLED_ARGMAX:
        return jnp.argmax(x, axis=1).astype(dtype)
    best, index = x[:, 0], jnp.zeros((x.shape[0],) + x.shape[2:], dtype)
    for label in range(1, num_classes):
        better = x[:, label] > best
        best = jnp.where(better, x[:, label], best)
        index = jnp.where(better, jnp.asarray(label, dtype), index)
    return index


@functools.partial(jax.jit, static_argnames=("labels",))
def _grid_predictive_sums(trees, stats, node_proba, tree_weight, lams, X, labels):
    """:func:`grid_predictive_sums` in one thread: ``(sums, labels or None)``."""
    num_classes = node_proba.shape[-1]

    def step(total, tree_xs):
        tree, stat, proba, w = tree_xs
        log_w = jax.vmap(lambda lam: pacbayes_log_weights(tree, stat, lam[0], lam[1]),
                         out_axes=1)(lams)                                       # [nodes, G]
        at = node_predictive(tree, proba, log_w)[leaf_of(tree, X)]              # [n, L, G]
        tree_labels = _argmax_classes(at) if labels else None                   # [n, G]
        return total + at * w[:, None, None], tree_labels

    init = jnp.zeros((X.shape[0], num_classes, lams.shape[0]), float_dtype())
    total, tree_labels = jax.lax.scan(step, init, (trees, stats, node_proba, tree_weight))
    return total.transpose(2, 0, 1), tree_labels


class PACBayesForestClassifier(ClassifierMixin, BaseEstimator):
    """A bagged forest of PAC-Bayes trees with out-of-bag bounds on its majority vote.

    Args:
      n_estimators: number of trees m.
      max_features: features each node may split on: ``"sqrt"`` (default), ``"log2"``, None
        (all), an int or a fraction; a random subset drawn for every node.
      bootstrap: grow each tree on a bootstrap sample (needed for out-of-bag estimates and the
        certificate); False grows every tree on all points.
      max_samples: with ``bootstrap``, the draws of each sample: None (n), an int, or a fraction
        of n (scikit-learn's forests' parameter). Fewer draws leave more points out of bag
        (a fraction ``e^(-max_samples)`` per tree, ``e^(-2 max_samples)`` per pair), which
        tightens the certificate, and grow each tree on fewer distinct points.
      partition: ``"cart"`` (the only one so far).
      splitter: ``"best"`` (default): each node's best bin edge over its features;
        ``"random"``: one cut per feature drawn uniformly among the node's bin edges, the best
        of those kept (Extra-Trees-style, Geurts et al. 2006, on the quantile bins; no NaN in
        ``X``); ``"mixed"``: half the trees each (:func:`tree_splitters`; every tree ``"best"``
        where ``X`` holds NaN) — a vote that errs less, fits slower (the random cuts' trees are
        wider: 1.5–2.7× the time).
      max_depth, min_split: of each T0 (:func:`jaxtree.grow_tree`; ``max_depth`` None:
        ``2·ceil(log2 n) + 8``, :data:`FOREST_EXTRA_DEPTH`).
      smoothing: Dirichlet pseudo-count of the node class frequencies (default
        :data:`FOREST_SMOOTHING`, near 0: the trees' predictives are averaged).
      lam1, lam2: the PAC-Bayes λ's shared by all trees; None (default): both chosen by the
        forest's out-of-bag error over :data:`LAMBDA_GRID` (with ``bootstrap=False``, λ's left
        at None take the grid's middle values).
      random_state: seed of the bootstrap samples, feature subsets and tie-breaking.
      n_jobs: threads that grow and evaluate chunks of the trees at once (:func:`over_trees`):
        None (default) or -1, one per core this process may use; an int, that many. Unlike
        scikit-learn's None (one job), the default uses the machine: a compiled fit's small
        per-level operations otherwise keep one core busy. The forest does not depend on it.

    ``X`` may hold NaN, a missing value: each split learns which side missing values take
    (docs/theory/missing.md). ``predict_proba`` is the mean of the trees' posterior
    predictives. Fitted attributes:
    ``classes_``, ``n_features_in_``, ``trees_`` (the stacked T0, leading axis m),
    ``stats_``, ``node_proba_``, ``lam_`` (the λ1, λ2 used), ``sample_weights_`` ``[m, n]``
    (bootstrap multiplicities), and with ``bootstrap``: ``oob_mask_`` ``[m, n]``,
    ``oob_predictions_`` ``[m, n]`` (each tree's encoded label for each training point),
    ``oob_decision_function_`` ``[n, L]`` (mean predictive of the trees for which the point is
    out of bag; NaN for a point in every sample), ``oob_score_`` (accuracy of its argmax).

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(300, 4))
        >>> y = (X[:, 0] + X[:, 1] > 0).astype(int)
        >>> forest = jaxtree.PACBayesForestClassifier(n_estimators=10, random_state=0).fit(X, y)
        >>> forest.score(X, y) > 0.9, 0 < forest.oob_score_ <= 1
        (True, True)
        >>> c = forest.certificate()
        >>> bool(c.first_order >= 2 * c.gibbs_risk), bool(0 < c.tandem <= 1)
        (True, True)
    """

    def __init__(self, n_estimators=100, max_features="sqrt", bootstrap=True, max_samples=None,
                 partition="cart", max_depth=None, min_split=2, smoothing=FOREST_SMOOTHING,
                 lam1=None, lam2=None, random_state=None, splitter="best", n_jobs=None):
        self.n_estimators = n_estimators
        self.max_features = max_features
        self.bootstrap = bootstrap
        self.max_samples = max_samples
        self.partition = partition
        self.max_depth = max_depth
        self.min_split = min_split
        self.smoothing = smoothing
        self.lam1 = lam1
        self.lam2 = lam2
        self.random_state = random_state
        self.splitter = splitter
        self.n_jobs = n_jobs

    def __sklearn_tags__(self):
        """NaN allowed (a missing value: each split learns its side)."""
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags

    def _check_params(self, n, dims):
        if not isinstance(self.n_estimators, (int, np.integer)) or self.n_estimators < 1:
            raise ValueError(f"n_estimators must be an int >= 1; got {self.n_estimators!r}")
        if self.partition != "cart":
            raise ValueError(f"partition must be 'cart' (the only one so far); got "
                             f"{self.partition!r}")
        if self.splitter not in FOREST_SPLITTERS:
            raise ValueError(f"splitter must be one of {FOREST_SPLITTERS}; got "
                             f"{self.splitter!r}")
        for name in ("lam1", "lam2"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float, np.number))
                                          and value > 0):
                raise ValueError(f"{name} must be None (chosen out of bag) or > 0; got {value!r}")
        check_smoothing(self.smoothing)
        _num_threads(self.n_jobs, 1)
        return _num_features(self.max_features, dims), _num_draws(self.max_samples, n)

    def fit(self, X, y):
        """Grow the trees on bootstrap samples of ``X`` ``[n, D]``, ``y`` ``[n]``; choose λ
        out of bag. Returns self."""
        X, y = validate_data(self, X, y, dtype=float_dtype(), ensure_min_samples=2,
                             ensure_all_finite="allow-nan")
        check_classification_targets(y)
        features, draws = self._check_params(*X.shape)
        if self.splitter == "random" and holds_nan(X):
            raise ValueError("splitter='random' does not take missing values (NaN in X): use "
                             "splitter='best' or impute them")
        self.classes_, y = np.unique(y, return_inverse=True)
        shapes.guard_memory_maps()
        rng = np.random.default_rng(self.random_state)
        n = len(y)
        weights = draw_samples(n, int(self.n_estimators), self.bootstrap, rng, draws)
        self.sample_weights_ = weights
        # padded with weight-0 rows (out of every sample, in no tree's out-of-bag set) to
        # jaxtree.shapes.padded(n) <= 1.25 n rows: fits at nearby sizes share the compiled
        # programs, and T0's layout (its width follows the rows) stays near the sample's
        rows = shapes.padded(n)
        X, y_padded, _ = shapes.pad_sample(X, y, None, rows)
        padded_weights = shapes.pad_rows(weights.T, rows).T
        jobs = _num_threads(self.n_jobs, len(weights))
        self.trees_, counts = grow_trees(X, y_padded, padded_weights, features, self.max_depth,
                                         self.min_split, rng, self.splitter, jobs)
        self.stats_, self.node_proba_ = tree_statistics(self.trees_, counts, self.smoothing)
        grid = self._grid()
        self.lambda_settings_ = len(grid) if self.bootstrap else 1
        if self.bootstrap:
            self.oob_mask_ = weights == 0
            sums, labels = grid_predictive_sums(
                self.trees_, self.stats_, self.node_proba_, jnp.asarray(grid, float_dtype()), X,
                jnp.asarray(shapes.pad_rows(self.oob_mask_.T, rows).T, float_dtype()), jobs=jobs,
                labels=True)
            votes = np.asarray(sums)[:, :n]
            covered = self.oob_mask_.any(axis=0)
            errors = [np.mean(np.argmax(v[covered], axis=1) != y[covered]) for v in votes]
            best = int(np.argmin(errors))
            self.lam_ = grid[best]
            with np.errstate(invalid="ignore", divide="ignore"):
                self.oob_decision_function_ = votes[best] / votes[best].sum(axis=1,
                                                                            keepdims=True)
            self.oob_score_ = float(1 - errors[best])
            self.oob_predictions_ = np.asarray(labels[:, :n, best], np.int64)
        else:
            self.lam_ = grid[len(grid) // 2]
        self._y_encoded = y
        return self

    def _grid(self):
        """The (λ1, λ2) settings to choose from: the given ones, or the grid."""
        if self.lam1 is not None and self.lam2 is not None:
            return [(float(self.lam1), float(self.lam2))]
        grid = [(a if self.lam1 is None else float(self.lam1),
                 b if self.lam2 is None else float(self.lam2)) for a, b in LAMBDA_GRID]
        return list(dict.fromkeys(grid))

    def predict_proba(self, X):
        """``[n, L]`` the mean of the trees' posterior predictives."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=float_dtype(),
                          ensure_all_finite="allow-nan")
        m, n = self.sample_weights_.shape[0], X.shape[0]
        rows = shapes.padded(n)
        sums = grid_predictive_sums(self.trees_, self.stats_, self.node_proba_,
                                    jnp.asarray([self.lam_], float_dtype()),
                                    shapes.pad_rows(X, rows), jnp.ones((m, rows), float_dtype()),
                                    jobs=_num_threads(self.n_jobs, m))
        return np.clip(np.asarray(sums[0])[:n] / m, 0, 1)

    def predict_trees(self, X):
        """``[m, n]`` every tree's predicted label (from ``classes_``; the argmax of its
        posterior predictive), the votes that :meth:`certificate` bounds."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=float_dtype(),
                          ensure_all_finite="allow-nan")
        m, rows = self.sample_weights_.shape[0], shapes.padded(X.shape[0])
        _, labels = grid_predictive_sums(self.trees_, self.stats_, self.node_proba_,
                                         jnp.asarray([self.lam_], float_dtype()),
                                         shapes.pad_rows(X, rows),
                                         jnp.zeros((m, rows), float_dtype()),
                                         jobs=_num_threads(self.n_jobs, m), labels=True)
        return self.classes_[np.asarray(labels[:, :X.shape[0], 0], np.int64)]

    def predict(self, X):
        """``[n]`` predicted labels (from ``classes_``)."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

    def save(self, path):
        """Write the fitted forest to ``path`` (a ``.npz`` of arrays and a JSON of parameters, no
        pickle); read it back with :func:`jaxtree.load`. See :mod:`jaxtree.persist`."""
        from jaxtree import persist
        persist.save(self, path)

    def certificate(self, delta=0.05, weights="uniform") -> ForestCertificate:
        """Out-of-bag bounds on the risk of the forest's weighted majority vote of the trees'
        labels (:func:`jaxtree.vote_bounds.forest_certificate`: first order and tandem, each
        with probability ≥ 1 − ``delta``). ``weights``: ``"uniform"``, ``"first_order"``,
        ``"tandem"``, ``"bound"`` or an ``[m]`` array (:data:`jaxtree.vote_bounds.WEIGHTS`).

        Every tree's T0, node labels and counts come from its bootstrap sample only, so its
        out-of-bag points are fresh for it — except that the shared λ was chosen among
        ``lambda_settings_`` settings by out-of-bag error. A union bound over those settings
        pays for that choice: the bounds are computed at ``delta / lambda_settings_`` and hold
        with probability ≥ 1 − ``delta`` (the returned ``delta`` field).

        The bounds are on the vote of the trees' hard labels (:meth:`predict_trees`), weighted
        by the certificate's ``rho``; ``predict`` averages probabilities instead, which usually
        agrees with that vote but is not what is certified.
        """
        check_is_fitted(self)
        if not self.bootstrap:
            raise ValueError("certificate() needs out-of-bag points: fit with bootstrap=True")
        if isinstance(weights, str) and weights not in WEIGHTS:
            raise ValueError(f"weights must be one of {WEIGHTS} or an [n_estimators] array; "
                             f"got {weights!r}")
        if not 0 < delta < 1:
            raise ValueError(f"delta must be in (0, 1); got {delta!r}")
        result = forest_certificate(self.oob_mask_, self.oob_predictions_, self._y_encoded,
                                    delta / self.lambda_settings_, weights)
        return dataclasses.replace(result, delta=np.float64(delta))
