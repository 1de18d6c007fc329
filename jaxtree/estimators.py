"""scikit-learn estimators: a thin shell over the functional core.

The shell validates input with scikit-learn's utilities, encodes labels (any label values),
builds T0, computes statistics and calls the pure functions; it holds no math. The classes are
scikit-learn ``BaseEstimator``/``ClassifierMixin`` subclasses, so ``clone``, ``GridSearchCV``,
pipelines and ``sklearn.utils.estimator_checks`` work with them.

Input (every estimator):

* ``X``: a dense array-like ``[n_samples, n_features]`` of int, float or bool (a pandas frame
  sets ``feature_names_in_``); it is converted to JAX's float dtype (float32, or float64 under
  x64). At least 2 samples and 1 feature; NaN, infinite and complex values are refused.
* Sparse ``X`` is refused with a ``TypeError`` that says to call ``X.toarray()``: every
  computation here is dense, so a sparse matrix would be densified anyway (``n × D × 4`` bytes in
  float32); doing it yourself keeps that memory visible.
* ``y``: class labels of any kind (ints, strings, bools); continuous targets are refused
  (scikit-learn's "Unknown label type"), as are NaN/inf labels.

A fitted model is saved with :meth:`TreeClassifierBase.save` and read with :func:`jaxtree.load`
(a ``.npz`` file, no pickle; :mod:`jaxtree.persist`); pickle and joblib work as well.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import warnings
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.class_weight import compute_sample_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from jaxtree import fitting, select
from jaxtree.certificate import (Certificate, pacbayes_certificate, pacbayes_theory_certificate,
                                 tune_by_bound)
from jaxtree.grow import grow_tree
from jaxtree.oblique import margin_bound, node_margins, oblique_tree
from jaxtree.pacbayes import (pacbayes_authors_log_weights, pacbayes_log_weights,
                              pacbayes_theory_log_weights, posterior_predictive, vote)
from jaxtree.tree import scale_points
from jaxtree import hsvote, prune, shapes, soft
from jaxtree.engine import best_pruning
from jaxtree.stats import (DEFAULT_SMOOTHING, NodeStats, check_smoothing, class_frequencies,
                           node_stats)
from jaxtree.validation import float_dtype, holds_nan


#: T0's builders (:func:`jaxtree.grow_tree`): KD, dyadic, and CART over quantile bins.
PARTITIONS = ("kd", "dyadic", "cart")

#: ``predict_proba`` of the votes over prunings: the posterior predictive (the pruning leaves'
#: smoothed class frequencies, averaged under the weights) or the paper's vote of hard labels.
PROBA_MODES = ("predictive", "majority")

#: ``min_split`` of the PAC-Bayes tree's default CART T0: on experiments/benchmark_suite.py
#: (34 problems) its test error against scikit-learn's tuned tree was lower with 5 than with 2
#: in each of three runs — geometric-mean ratio 0.974 against 0.980 (3 splits per problem) and
#: 0.988 against 0.995 (6 splits), problems at or below the tuned tree 24 against 20 and 26
#: against 24 of 34 — with a narrower layout (the level width bound is 2·n / min_split). All
#: on one draw of the CV's folds; another draw moves such ratios by about ±0.02
#: (experiments/results/benchmark_suite.md, "Fold noise"), so the evidence for 5 is weak.
CART_MIN_SPLIT = 5
# the node frequencies, one compiled program per tree shape (a compact layout's pass is a scan)
_class_frequencies = jax.jit(class_frequencies)
# T0, its weighted counts and the CV's folds: one compiled program per padded shape and config
_grow_tree = jax.jit(grow_tree, static_argnames="config")
_cv_folds = jax.jit(fitting.cv_folds, static_argnames=("config", "num_classes"))


@functools.partial(jax.jit, static_argnames="num_classes")
def _weighted_stats(tree, X, y, weight, num_classes):
    """:func:`jaxtree.node_stats` of the padded, weighted sample."""
    return node_stats(tree, X, y, num_classes, weight)


def _warn_capped(capped, width: int) -> None:
    """Warn when the level-width cap ``width`` kept ``capped`` nodes of T0 from splitting."""
    capped = int(capped)
    if capped:
        warnings.warn(f"{capped} nodes of T0 were not split: a level of the tree would need "
                      f"more than its width cap of {width} nodes; raise min_split or lower "
                      f"max_depth for a tree the cap holds", RuntimeWarning, stacklevel=3)


def _repeated_rows(weight) -> np.ndarray:
    """Row indices repeating each row by its weight (an integer); ValueError for other weights
    (a builder that takes no weights: the oblique tree)."""
    weight = np.asarray(weight)
    if not np.array_equal(weight, np.round(weight)):
        raise ValueError("ObliqueTreeClassifier takes integer sample weights only (each row "
                         "repeated that many times); round them, or use another estimator")
    return np.repeat(np.arange(len(weight)), weight.astype(np.int64))


def _holdout_key(key):
    """The key of a fit's hold-out split (S0 / S, S1 / S2), apart from T0's and the folds'."""
    return jax.random.fold_in(key, 1)


def _random_key(random_state):
    """``jax.random.PRNGKey`` of a scikit-learn ``random_state`` (int, None or a generator)."""
    if isinstance(random_state, (int, np.integer)):
        return jax.random.PRNGKey(int(random_state))
    return jax.random.PRNGKey(int(check_random_state(random_state).randint(2 ** 31 - 1)))


def _check_proba_options(proba, smoothing):
    if proba not in PROBA_MODES:
        raise ValueError(f"proba must be one of {PROBA_MODES}; got {proba!r}")
    check_smoothing(smoothing)


def _vote_proba(model, log_weights, X):
    """``[n, L]`` ``predict_proba`` of ``model`` (``proba``, ``tree_``, ``stats_``,
    ``node_proba_``) whose node weights are ``exp(log_weights)`` ``[nodes]``."""
    if model.proba == "predictive":
        return posterior_predictive(model.tree_, model.node_proba_, log_weights, X)
    return vote(model.tree_, model.stats_.label, log_weights, X, len(model.classes_))


@contextlib.contextmanager
def _naming(argument: str):
    """Prefix ``invalid <argument>: `` to a ValueError/TypeError raised by scikit-learn's
    validators inside the block: their wording is kept (tools look for it), but "Expected 2D
    array" or "Unknown label type" alone does not say which argument is wrong."""
    try:
        yield
    except (TypeError, ValueError) as error:
        kind = TypeError if isinstance(error, TypeError) else ValueError
        raise kind(f"invalid {argument}: {error}") from error


class TreeClassifierBase(ClassifierMixin, BaseEstimator):
    """Shared shell: input checks, label encoding, T0 and its statistics.

    Subclasses implement ``_fit_tree(stats, X, y)`` (after ``tree_`` exists) and
    ``_scores(X) -> [n, L]``. ``tree_`` is T0 padded to a shared shape and the arrays the jitted
    functions see are padded likewise (:mod:`jaxtree.shapes`), so refits at new sizes reuse
    compiled programs; the padding slots of ``tree_`` are never internal (log weight −inf).

    Tuning hook: a subclass with a ``tune`` parameter implements ``_tuning_spec()`` and reads its
    tuned parameters with ``self._param(name)`` in ``_fit_tree``; ``fit`` then selects them by CV
    on T0 (:func:`jaxtree.select.tune`) and sets ``best_params_`` and ``cv_results_``.
    ``tune``: ``"auto"`` (grid search over the tunable parameters left at None, the others held
    fixed), ``"grid"`` (the paper's grid over all of them), ``"gradient"`` (Adam on the smoothed
    validation loss, from the given values when all are given, else from the best 3 points of
    a coarse grid), ``"bound"`` (the PAC-Bayes
    certificate's bound minimised, no validation data: models that have one implement
    ``_tune_by_bound``) or None (no tuning). The folds come from the ``cv`` (default 2) and
    ``random_state`` (default 0) parameters if present; with a ``cv_trees`` parameter a
    subclass may grow T0 anew on each fold's training part (:meth:`_per_fold_trees`).
    """

    def __sklearn_tags__(self):
        """What the input may be (scikit-learn's checks test each against the estimator's
        behaviour): a dense 2-D X of numbers (sparse refused, see the module docstring), NaN
        only where T0 learns where missing values go (:meth:`_routes_missing`), negative values
        fine; labels of any discrete kind, strings included."""
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = True
        tags.input_tags.sparse = False
        tags.input_tags.allow_nan = self._routes_missing()
        tags.input_tags.positive_only = False
        tags.target_tags.required = True
        return tags

    def fit(self, X, y, sample_weight=None):
        """Build T0 on ``X`` ``[n, D]`` with labels ``y`` ``[n]`` and fit the model. Returns self.

        ``sample_weight``: optional ``[n]`` non-negative weights (default ones), multiplied by
        those of ``class_weight`` where the estimator has one. They weigh every count — T0's
        splits, the node statistics, the CV folds' training and validation parts — so an integer
        weight is the same as that many copies of the row, and weight 0 the same as leaving
        the row out."""
        X, y = self._validate_fit_input(X, y)
        self._check_params()
        self._per_fold_trees()           # checks cv_trees before any tree is built
        classes, y_encoded = np.unique(y, return_inverse=True)
        self._check_classes(classes)
        self.classes_ = classes
        weight = self._training_weights(X, y, sample_weight)
        shapes.guard_memory_maps()
        self._fit_encoded(X, y_encoded.astype(np.int32), weight)
        return self

    def _training_weights(self, X, y, sample_weight) -> np.ndarray:
        """``[n]`` float weights: ``sample_weight`` (checked by scikit-learn's validator) times
        ``class_weight``'s (:func:`sklearn.utils.class_weight.compute_sample_weight`)."""
        with _naming("sample_weight"):
            weight = _check_sample_weight(sample_weight, X, dtype=np.float64,
                                          ensure_non_negative=True)
        class_weight = getattr(self, "class_weight", None)
        if not (class_weight is None or class_weight == "balanced"
                or isinstance(class_weight, dict)):
            raise ValueError(f"class_weight must be None, 'balanced' or a dict {{label: "
                             f"weight}}; got {class_weight!r}")
        if class_weight is not None:
            with _naming("class_weight"):
                weight = weight * compute_sample_weight(class_weight, y)
        if not weight.sum() > 0:
            raise ValueError("sample_weight must have a positive sum: every row has weight 0")
        return weight.astype(X.dtype)

    def _fit_encoded(self, X, y, weight):
        """T0, its statistics, the tuned parameters and the model, from validated ``X``, labels
        encoded as ``0..L-1`` and weights ``[n]``."""
        X, y, weight = self._padded_sample(X, y, weight)
        self.tree_ = self._grow(X, y, weight)
        self.stats_ = _weighted_stats(self.tree_, X, y, weight, self._num_stat_classes())
        self._select_params(X, y, weight)
        self._fit_tree(self.stats_, X, y, weight)

    def _padded_sample(self, X, y, weight):
        """The sample padded with weight-0 rows to :func:`jaxtree.shapes.fit_rows` rows: the
        shape the compiled programs of a fit see (refits at nearby sizes share them). Records
        ``n_samples_`` (rows of positive weight) first."""
        self._num_rows = int(np.count_nonzero(weight))
        self._total_weight = float(weight.sum())
        rows = shapes.fit_rows(X.shape[0], self._shape_family(X))
        cv, tuned = getattr(self, "cv", 2), getattr(self, "tune", None) is not None
        # whether T0 learns where missing values go (a separate program): decided once per fit
        self._missing = self._routes_missing() and holds_nan(X)
        # a bound on the columns' distinct values: CART's histograms need no more bins
        self._max_distinct = fitting.max_distinct(X, getattr(self, "partition", None),
                                                  getattr(self, "bins", None))
        self._cv_splits = None
        if tuned and not isinstance(cv, (int, np.integer)):
            # a splitter or (train, test) pairs, as GridSearchCV takes them: [2, k, rows]
            # training and validation weights, the padding rows in neither
            with _naming("cv"):
                masks = select.split_masks(cv, X, y, classifier=True)
            self._cv_splits = np.stack([shapes.pad_rows((mask * weight).T, rows).T
                                        for mask in masks])
            self._cv_plan = (len(masks[0]), self._per_fold_trees())
        elif tuned and self._num_rows >= 2:
            # the folds a sample this small can be cross-validated with (warns when fewer)
            self._cv_plan = select.small_sample_folds(self._num_rows, cv, self._per_fold_trees())
        else:
            self._cv_plan = (cv, self._per_fold_trees())
        return shapes.pad_sample(X, y, weight, rows)

    def _shape_family(self, X) -> tuple:
        """What else than the row count fixes the compiled programs' shapes."""
        return (type(self).__name__, X.shape[1], self._num_stat_classes(), X.dtype.name)

    def predict_proba(self, X):
        """``[n, L]`` class probabilities (columns in the order of ``classes_``), each in
        [0, 1] (the float rounding of a weighted sum can overshoot 1 by an ulp: clipped, since
        scikit-learn's metrics refuse such a value)."""
        check_is_fitted(self)
        with _naming("X"):
            X = validate_data(self, X, reset=False, dtype=float_dtype(),
                              ensure_all_finite=self._finite_rule())
        n = X.shape[0]
        return np.clip(np.asarray(self._scores(shapes.pad_rows(X, shapes.padded(n))))[:n], 0, 1)

    def predict(self, X):
        """``[n]`` predicted labels (values from ``classes_``)."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

    def save(self, path):
        """Write the fitted model to ``path`` (a ``.npz`` of arrays and a JSON of parameters, no
        pickle); read it back with :func:`jaxtree.load`. See :mod:`jaxtree.persist`."""
        from jaxtree import persist
        persist.save(self, path)

    @property
    def feature_importances_(self):
        """``[n_features_in_]`` impurity decreases weighted by the probability that the model
        uses each split, summing to 1 (:func:`jaxtree.inspect.feature_importances`)."""
        from jaxtree.inspect import feature_importances
        return feature_importances(self)

    # -----------------------------------------------------------------------------------------
    def _validate_fit_input(self, X, y):
        """scikit-learn's checks, X first and then y, so that a message says which is wrong;
        ``validate_data`` sets ``n_features_in_`` (and ``feature_names_in_`` for a frame)."""
        with _naming("X"):
            validate_data(self, X, dtype=float_dtype(), ensure_min_samples=2,
                          ensure_all_finite=self._finite_rule())
        with _naming("y"):
            X, y = validate_data(self, X, y, dtype=float_dtype(), ensure_min_samples=2,
                                 ensure_all_finite=self._finite_rule())
            check_classification_targets(y)
        return X, y

    def _routes_missing(self) -> bool:
        """Whether X may hold NaN: a CART T0 grown by :func:`jaxtree.grow_tree` learns where
        missing values go (docs/theory/missing.md); the other trees, and the distributed fit's
        host-built one, refuse them."""
        return getattr(self, "partition", None) == "cart" and not getattr(self, "distributed",
                                                                           False)

    def _finite_rule(self):
        """scikit-learn's ``ensure_all_finite`` for this estimator's X."""
        return "allow-nan" if self._routes_missing() else True

    def _tuning_spec(self):
        """None when there is nothing to tune, else ``(votes_fn, directions)``: a module-level
        votes function ``votes_fn(tree, stats, params)`` (:mod:`jaxtree.select`) and
        ``((name, ±1), ...)``, the constructor parameters it takes with their tie-breaking
        directions (+1: larger values give a simpler model, -1: smaller ones do)."""
        return None

    def _check_classes(self, classes):
        """Refuse label sets (``classes`` ``[L]``, sorted) the method cannot fit; all are fine
        here."""

    def _num_stat_classes(self) -> int:
        """L of the node statistics (the number of classes)."""
        return len(self.classes_)

    def _param(self, name):
        """The fitted value of a constructor parameter: the tuned one when ``fit`` tuned it."""
        return getattr(self, "best_params_", {}).get(name, getattr(self, name))

    def _check_params(self):
        """Refuse constructor parameters that are wrong whatever the data (ValueError naming
        the parameter); called by ``fit`` (the distributed one too) before T0 is built."""

    def _select_params(self, X, y, weight=None, cv_data=None):
        """Apply the ``tune`` option (class docstring); sets ``best_params_``, ``cv_results_``.
        ``cv_data``: None (deal the distinct feature vectors of ``X``, weighted by ``weight``,
        into ``cv`` folds, :func:`jaxtree.fitting.fold_weights`), or a function returning keyword
        arguments of :func:`jaxtree.select.tune` with prepared ``folds`` (and ``errors_fn``),
        called only when tuning (the distributed fit)."""
        self.__dict__.pop("best_params_", None)
        self.__dict__.pop("cv_results_", None)
        mode = getattr(self, "tune", None)
        if mode is None:
            return
        if mode not in ("auto", "grid", "gradient", "bound"):
            raise ValueError(f"tune must be 'auto', 'grid', 'gradient', 'bound' or None; "
                             f"got {mode!r}")
        if mode == "bound":
            self.best_params_, self.cv_results_ = self._tune_by_bound()
            return
        spec = self._tuning_spec()
        if spec is None:
            if mode == "auto":
                return
            raise ValueError(f"{type(self).__name__} has no tunable parameters with these "
                             f"settings; use tune=None")
        votes_fn, directions = spec
        values = {name: getattr(self, name) for name, _ in directions}
        fixed = self._fixed_params()
        if mode == "auto":
            given = {name: v for name, v in values.items() if v is not None}
            directions = tuple((name, d) for name, d in directions if name not in given)
            if not directions:
                return
            fixed, mode = {**fixed, **given}, "grid"
        if cv_data is None:
            data = {"folds": self._cv_folds(X, y, weight), "errors_fn": self._cv_errors_fn()}
        else:
            data = cv_data()
        self.best_params_, self.cv_results_ = select.tune(
            self.tree_, X, y, len(self.classes_), votes_fn, directions, mode,
            seed=getattr(self, "random_state", 0), fixed=fixed,
            init={name: v for name, v in values.items() if v is not None},
            base_grid=self._search_grid(), scoring=getattr(self, "scoring", "accuracy"),
            stats=self.stats_, **data)

    def _cv_errors_fn(self):
        """The grid's error function (``errors_fn`` of :func:`jaxtree.select.paper_search`); None:
        :func:`jaxtree.select.grid_errors`, the votes of every setting."""
        return None

    def _search_grid(self):
        """The first-stage grid of every tuned parameter (default: the paper's
        2^linspace(-8, 6, 10)); called after ``tree_`` and ``stats_`` exist."""
        return select.LOG_GRID

    def _fixed_params(self) -> dict:
        """Parameters of the votes function that are not tuned, ``{name: scalar}``."""
        return {}

    #: whether the model's prior charges nothing at empty nodes (the PAC-Bayes potentials), so
    #: that ``cv_trees="auto"`` grows a KD T0 per fold too (:func:`jaxtree.fitting.per_fold_trees`)
    _free_empty_nodes = False

    def _per_fold_trees(self) -> bool:
        """Whether CV grows T0 on each fold's training part (the ``cv_trees`` parameter;
        :func:`jaxtree.fitting.per_fold_trees`): ``"auto"`` does for a label-aware T0
        (``partition="cart"``), whose leaves would otherwise have seen the validation labels,
        and for the PAC-Bayes posterior on a KD T0; a dyadic T0, and a KD T0 under a pruning
        method or the HS vote, is shared by all folds (the paper's protocol)."""
        mode = getattr(self, "cv_trees", None)
        if mode is None:            # no such parameter (the oblique tree): one T0 for all folds
            return False
        return fitting.per_fold_trees(mode, self.partition, self._free_empty_nodes)

    def _cv_folds(self, X, y, weight):
        """The ``folds`` of :func:`jaxtree.select.tune`: :class:`jaxtree.select.Folds` of the
        padded sample, its distinct feature vectors dealt into ``cv`` folds by the key of
        ``random_state`` (:func:`jaxtree.fitting.cv_folds`: what :func:`jaxtree.fit` does), with
        T0 grown on each fold's training part when :meth:`_per_fold_trees`."""
        config = self._fit_config(X, weight)
        grow_key, fold_key = fitting.fit_keys(self._key())
        return _cv_folds(X, y, weight, fold_key, grow_key, self.tree_, config,
                         len(self.classes_), None, getattr(self, "_cv_splits", None),
                         self._depth_limit(X, weight))

    def _tune_by_bound(self):
        """``(best_params, results)`` of ``tune="bound"``: only a model with a PAC-Bayes
        certificate has one."""
        raise ValueError(f"tune='bound' needs a PAC-Bayes certificate; {type(self).__name__} "
                         "has none: use tune='grid' or 'gradient'")

    def _grow(self, X, y, weight):
        """T0 grown inside one compiled program (:func:`jaxtree.grow_tree`) on the padded,
        weighted sample; warns when the level-width cap kept nodes from splitting."""
        grow_key = fitting.fit_keys(self._key())[0]

        def run(config):
            tree, info = _grow_tree(X, y, weight, config.grow, grow_key,
                                    self._depth_limit(X, weight))
            return (tree, info.capped), (info.capped, info.depth_capped)

        (tree, capped), config = fitting.enlarge_until_uncapped(
            run, self._fit_config(X, weight), X.shape)
        _warn_capped(capped, config.grow.width)
        return tree

    def _fit_config(self, X, weight, **options) -> fitting.FitConfig:
        """:func:`jaxtree.fitting.fit_config` of this estimator's T0 and CV for the padded
        sample ``X`` ``[n', D]``. The layout's depth and the level width follow the padded row
        count ``n'`` (the default depth of ``n'`` rows, or of the total weight if larger), the
        tree's depth the sample's total weight (:meth:`_depth_limit`, an argument of the
        compiled programs): refits whose samples pad to one ``n'`` share the programs although
        their default depths differ."""
        if self.partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {PARTITIONS}; got {self.partition!r}")
        depth = self.max_depth if self.max_depth is not None else max(
            fitting.default_max_depth(self.partition, X.shape[0], X.shape[1]),
            self._depth_limit(X, weight))
        folds, per_fold = getattr(self, "_cv_plan",
                                  (getattr(self, "cv", 2), self._per_fold_trees()))
        settings = dict(num_classes=self._num_stat_classes(), partition=self.partition,
                        max_depth=depth, min_split=self._min_split(), split=self.split,
                        bins=getattr(self, "bins", None), cv=folds,
                        lam1=1.0, lam2=1.0, tune=None, random_state=self._tie_seed(),
                        cv_trees="per_fold" if per_fold else "shared",
                        missing=getattr(self, "_missing", False),
                        max_distinct=getattr(self, "_max_distinct", None))
        return fitting.known_layout(
            fitting.fit_config(X.shape[0], X.shape[1], **{**settings, **options}), X.shape)

    def _min_split(self) -> int:
        """T0's ``min_split`` (a subclass may give its default by the partition)."""
        return self.min_split

    def _depth_limit(self, X, weight) -> int:
        """The depth of T0: ``max_depth``, else the default depth
        (:func:`jaxtree.fitting.default_max_depth`) of the sample's total weight, the number
        of rows it stands for (the padding rows count for nothing)."""
        if self.max_depth is not None:
            return self.max_depth
        return fitting.default_max_depth(
            self.partition, max(2, int(math.ceil(float(np.sum(weight))))), X.shape[1])

    def _tie_seed(self) -> int:
        """The seed of a CART T0's ties between features: ``random_state`` when an int."""
        seed = getattr(self, "random_state", 0)
        return int(seed) if isinstance(seed, (int, np.integer)) else 0

    def _key(self):
        """The ``jax.random`` key of ``random_state`` (an int, None or a NumPy generator as
        scikit-learn takes it): T0's random choices and the CV's folds."""
        return _random_key(getattr(self, "random_state", 0))


def estimator_classes() -> dict:
    """``{name: class}`` of every estimator here (the subclasses of :class:`TreeClassifierBase`)."""
    found, pending = {}, [TreeClassifierBase]
    while pending:
        for cls in pending.pop().__subclasses__():
            found[cls.__name__] = cls
            pending.append(cls)
    return found


def default_depth(partition: str, n: int, dims: int) -> Optional[int]:
    """Default ``max_depth`` of the host builders (the distributed fit):
    :func:`jaxtree.fitting.default_max_depth`, but None (grow to purity) for CART trees, whose
    host builder needs no level-width budget."""
    return None if partition == "cart" else fitting.default_max_depth(partition, n, dims)


class PACBayesTreeClassifier(TreeClassifierBase):
    """PAC-Bayes tree (Nguyen & Kpotufe 2018): the posterior-weighted vote over every pruning of T0.

    Args:
      partition: ``"cart"`` (default: a label-aware T0, greedy Gini splits over ``bins``
        quantile bins per feature, grown inside the compiled fit by :func:`jaxtree.grow_tree`
        down to ``2·ceil(log2 n)`` levels and nodes of ``min_split`` points — the same tree as
        ``jaxtree.cart_tree(X, y, min_split=5, bins=bins)`` by default; its λ's are selected on
        trees grown per fold, see
        ``cv_trees``), ``"kd"`` or ``"dyadic"`` (the paper's label-blind trees,
        docs/theory/trees.md). The default is measured: on the seven Table 2 datasets a
        CART T0 gave a test error no higher than a KD tree with either split rule, and less
        than half the better KD tree's on spam and epileptic (README, "Defaults").
      max_depth: depth of T0; None for :func:`jaxtree.fitting.default_max_depth` of the
        sample's total weight.
      min_split: nodes with fewer training points are not split. None (default):
        :data:`jaxtree.estimators.CART_MIN_SPLIT` (5) for a CART T0, 2 for KD and dyadic
        trees (the paper's).
      split: ``"spread"`` (default: the coordinate of widest interquartile range) or ``"cycle"``
        (coordinate ``depth mod D``, the paper's rule: on digit it never splits past the first
        coordinates, test error 0.55 against 0.19); KD and dyadic trees only.
      bins: quantile bins per feature of a CART T0 (its split candidates; default
        :data:`jaxtree.fitting.DEFAULT_BINS`).
      class_weight: None, ``"balanced"`` or ``{label: weight}``, as in scikit-learn: each
        row's weight is multiplied by its class's (``fit``'s ``sample_weight``).
      lam1, lam2: λ1 (weight of training errors) and λ2 (weight of the concentration term);
        None (default): selected by ``tune``.
      potentials: ``"practical"`` (the paper's reading, docs/theory/pacbayes.md),
        ``"authors"`` (the penalty of the authors' public code, ``λ2·sqrt(8·ℓ_A·max(N_A, ℓ_A))``
        with ℓ_A the depth of A: :mod:`jaxtree.pacbayes`; tuned like the practical one) or
        ``"theory"`` (Theorem 1; uses ``lam1`` as λ and ``delta``; not tunable: give ``lam1``).
      proba: what ``predict_proba`` returns. ``"predictive"`` (default): the posterior
        predictive ``Σ_{A ∈ path(x)} w(A)·p̂(· | A)``, the pruning leaves' class frequencies
        smoothed by ``smoothing`` and averaged under the posterior over prunings: probabilities
        strictly inside (0, 1) that can be ranked, thresholded and averaged. ``"majority"``: the
        paper's weighted-majority vote of hard node labels ``Σ_A w(A)·1[l(A) = l]`` (its
        Table 2; mostly 0 or 1 once λ is tuned). ``predict`` is the argmax of ``predict_proba``
        in both (scikit-learn's rule; with ``"majority"`` it is the paper's ``h_Q``), and the
        CV selects λ on the same scores. docs/theory/pacbayes.md has the math.
      smoothing: α ≥ 0, the Dirichlet pseudo-count per class of the node frequencies
        ``p̂(l | A) = (N_{A,l} + α) / (N_A + L·α)`` (:func:`jaxtree.class_frequencies`);
        ½ (Krichevsky–Trofimov) by default, 1 is Laplace's rule, 0 the plain frequencies.
      scoring: the CV criterion of ``tune`` (scikit-learn's scorer names): ``"accuracy"``
        (default; the paper's), ``"neg_log_loss"`` or ``"neg_brier_score"``, which judge the
        probabilities (grid search; ``tune="gradient"`` descends the vote's log-loss and
        keeps the least validation error).
      delta: confidence of the theory potentials, and of the bound that ``tune="bound"``
        minimises.
      tune: ``"auto"`` (default: the λ's left at None are chosen by the paper's protocol,
        docs/theory/selection.md — ``cv``-fold CV over 2^linspace(-8, 6, 10) for each, then 10
        linear values from half to twice the best: 200 settings), ``"grid"``, ``"gradient"``,
        ``"bound"`` (below) or None
        (:class:`TreeClassifierBase`). Ties go to smaller λ1, then larger λ2
        (:mod:`jaxtree.select`). Cost: T0 and the routing are shared; each setting costs one
        up/down pass and a vote per fold. Measured on a loaded 2-core CPU
        (``experiments/bench_select.py``): the 200 settings take ~0.1 s on spam and 1.5–5 s
        on letter (18000 × 16, 26 classes), but a first fit compiles for 10–50 s; a refit
        whose tree and sample fit shapes already compiled does not (:mod:`jaxtree.shapes`),
        and :func:`jaxtree.enable_compilation_cache` keeps the compiled programs across
        processes. Give ``lam1`` and ``lam2`` (or ``tune=None``) to skip the search.
      cv, random_state: number of CV folds (or a scikit-learn splitter, or an iterable of
        ``(train, test)`` index arrays) and the seed that deals them (and, with
        ``partition="cart"``, breaks ties between features in the grown tree). Default 2, the
        paper's protocol. 5 folds were measured on ``experiments/benchmark_suite.py`` (34
        problems × 3 splits) and not adopted: test-error ratio to scikit-learn's tuned tree
        0.991 → 0.995, problems at or below it 23 → 21 of 34 (before the binned CART's
        middle-edge cut, which took the default to 0.980, 20 / 34), for a fit about twice as long
        (docs/theory/selection.md, "Number of folds"). Three repeats of a stratified 2-fold CV
        (``cv=RepeatedStratifiedKFold(n_splits=2, n_repeats=3)``) steady the λ's of mid-size
        samples: 26 of 34 at or below the tuned tree (the default then, ``min_split`` 2: 20;
        with 6 splits per problem 26 against 24, ratio 0.987 against 0.995), for a fit 2.2×
        as long.
      cv_trees: which T0 the CV folds use. ``"auto"`` (default): a T0 grown on each fold's
        training part for CART and KD trees, one T0 of all the points for a dyadic tree
        (:func:`jaxtree.fitting.per_fold_trees`: a CART tree grown on all points has leaves
        that have seen the validation labels; on a KD tree of all points a fold leaves cells
        empty, and the free prunings of empty subtrees bias the CV towards deep posteriors;
        a dyadic tree's cells, set by the geometry, are empty in the whole sample too);
        ``"per_fold"`` or ``"shared"`` (the paper's protocol) force either. The final model is
        refitted on T0 of all the points with the selected λ's. A ``distributed`` fit follows
        the same rule (:func:`jaxtree.distributed.prepare_fold_trees`).
      distributed: False, or True: ``fit(X, y)`` gets this process's block of rows spread over
        JAX processes (``jax.distributed`` initialised in each) and every process fits the model
        of all rows (:func:`jaxtree.distributed.fit`; a CART T0 then splits at 256 quantile bins).
      certify: False (default: T0, the labels ``l(A)`` and the posterior all come from the whole
        sample), True, or a fraction in (0, 1): that share of the sample (True: half), drawn with
        ``random_state``, is S0 — T0, the labels and the practical prior's counts come from it
        — and the rest is S, on which the posterior is fitted and tuned and
        :meth:`certificate` is computed, so that the certificate is a PAC-Bayes bound. The
        practical posterior then charges the leaf cost where S0 has points, as the prior does
        (docs/theory/pacbayes.md, "The certificate"). Not with ``distributed=True``.
      softness: σ ≥ 0 of the prediction's soft routing (:mod:`jaxtree.soft`): a point crosses
        each split to the right with probability ``Φ((u(x_f) − u(t)) / σ)``, ``u`` the rank
        (a fraction of the training sample) of a value of feature ``f``, so that points near a
        cut get a mixture of both sides' predictions; 0 is the paper's hard routing. ``"auto"``
        (default): :data:`jaxtree.soft.DEFAULT_SOFTNESS` (0.05), and 0 with ``certify`` (the
        certificate bounds the hard vote) or ``distributed``; a softness > 0 is refused with
        either. The λ's are selected with hard routing. Measured
        (``experiments/results/benchmark_suite.md``, "Soft routing"): the test-error ratio to
        scikit-learn's tuned tree went from 1.005 to 0.892 on the tuning suite (36 problems)
        and from 0.967 to 0.940 on the held-out one (37).

    ``tune="bound"`` chooses the λ's (``lam1``, ``lam2``; ``lam1`` alone for the theory
    potentials) by minimising the certificate's bound at confidence ``delta``
    (:func:`jaxtree.certificate.tune_by_bound`: the paper's log grid, then Adam on log λ); no
    validation data. ``cv_results_`` then holds the Adam path: ``params``, ``param_<name>`` and
    ``bound``.

    Fitted attributes: ``classes_``, ``n_features_in_``, ``tree_`` (:class:`jaxtree.Tree`),
    ``stats_`` (:class:`jaxtree.NodeStats`; with ``certify``: the counts of S and the labels of
    S0), ``node_log_weights_`` ``[nodes]``, ``node_proba_`` ``[nodes, L]`` (the smoothed class
    frequencies ``p̂(· | A)``), ``softness_`` (the σ predictions use) and ``quantile_knots_``
    (``[D, K]`` the training quantiles soft routing ranks by; None when ``softness_`` is 0);
    with ``certify``, ``prior_stats_`` (the statistics of S0); when
    tuned, ``best_params_`` (``{"lam1": ..., "lam2": ...}``) and ``cv_results_``
    (scikit-learn style, see :func:`jaxtree.select.tune`); ``fitted_tree_``, the
    :class:`jaxtree.FittedTree` pytree of the pure fit (not with ``certify`` or
    ``tune="gradient"``/``"bound"``, which take the shell's own steps).

    Shapes and dtypes: ``fit(X, y)`` takes ``X`` ``[n, D]`` real (converted to JAX's float
    dtype: float32, or float64 with x64 enabled) and ``y`` ``[n]`` labels of any sortable type;
    ``predict_proba(X)`` returns ``[n, L]`` float scores (columns in the order of ``classes_``),
    ``predict(X)`` ``[n]`` labels from ``classes_``. The same holds for every estimator here.

    Example:
        Given λ's (no tuning, so only the fit compiles):

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.arange(8.0)[:, None]
        >>> y = np.array([0, 0, 1, 0, 1, 1, 1, 1])
        >>> model = jaxtree.PACBayesTreeClassifier(max_depth=2, lam1=4.0, lam2=1.0).fit(X, y)
        >>> model.predict(X).tolist(), model.score(X, y)
        ([0, 0, 0, 0, 1, 1, 1, 1], 0.875)
        >>> print(np.asarray(model.predict_proba(X[:1])).round(3))
        [[0.699 0.301]]
    """

    _free_empty_nodes = True      # φ = 0 at empty nodes: CV on trees grown per fold

    def __init__(self, partition="cart", max_depth=None, min_split=None, split="spread",
                 lam1=None, lam2=None, potentials="practical", delta=0.05, proba="predictive",
                 smoothing=DEFAULT_SMOOTHING, scoring="accuracy", tune="auto", cv=2,
                 random_state=0, bins=None, class_weight=None, distributed=False,
                 cv_trees="auto", certify=False, softness="auto"):
        self.partition = partition
        self.max_depth = max_depth
        self.min_split = min_split
        self.split = split
        self.bins = bins
        self.class_weight = class_weight
        self.lam1 = lam1
        self.lam2 = lam2
        self.potentials = potentials
        self.delta = delta
        self.proba = proba
        self.smoothing = smoothing
        self.scoring = scoring
        self.tune = tune
        self.cv = cv
        self.random_state = random_state
        self.distributed = distributed
        self.cv_trees = cv_trees
        self.certify = certify
        self.softness = softness

    def fit(self, X, y, sample_weight=None):
        """Build T0 on ``X`` ``[n, D]`` with labels ``y`` ``[n]`` (and optional ``[n]``
        ``sample_weight``, :meth:`TreeClassifierBase.fit`) and fit the model (with
        ``distributed=True``: on the rows of all processes, ``X`` and ``y`` being this process's
        block). Returns self."""
        self._per_fold_trees()           # checks cv_trees before any tree is built
        if self.distributed:
            if self._prior_share() is not None:
                raise ValueError("certify is not supported with distributed=True; use "
                                 "certify=False")
            if sample_weight is not None or self.class_weight is not None:
                raise ValueError("sample_weight and class_weight are not supported with "
                                 "distributed=True; leave them None")
            from jaxtree import distributed  # imports this module
            return distributed.fit(self, X, y)
        return super().fit(X, y, sample_weight)

    def _min_split(self) -> int:
        if self.min_split is not None:
            return self.min_split
        return CART_MIN_SPLIT if self.partition == "cart" else 2

    def _check_params(self):
        _check_proba_options(self.proba, self.smoothing)
        select.check_scoring(self.scoring)
        if self.tune not in ("auto", "grid", "gradient", "bound", None):
            raise ValueError(f"tune must be 'auto', 'grid', 'gradient', 'bound' or None; "
                             f"got {self.tune!r}")
        if self.tune == "gradient" and self.scoring != "accuracy":
            raise ValueError(f"scoring={self.scoring!r} selects on the grid (tune='auto' or "
                             f"'grid'); tune='gradient' descends the vote's log-loss")
        self._softness()

    def _softness(self, hard_only: bool = False) -> float:
        """σ of the soft routing this fit predicts with: ``softness``, or for ``"auto"``
        :data:`jaxtree.soft.DEFAULT_SOFTNESS`, and 0 (hard routing) with ``certify`` (the
        certificate bounds the hard vote), ``distributed`` or ``hard_only`` (the distributed
        fit: no quantiles over processes)."""
        hard_only = hard_only or self._prior_share() is not None or bool(self.distributed)
        if isinstance(self.softness, str) and self.softness == "auto":
            return 0.0 if hard_only else soft.DEFAULT_SOFTNESS
        fitting.check_softness(self.softness)
        if self.softness > 0 and hard_only:
            raise ValueError(f"softness={self.softness!r} with certify or distributed: the "
                             f"certificate bounds the hard vote and a distributed fit routes "
                             f"hard; use softness='auto' or 0")
        return float(self.softness)

    def certificate(self, delta=0.05) -> Certificate:
        """The PAC-Bayes certificate of the fitted posterior Q (Proposition 1 of the paper, the
        bound of Thiemann et al. 2017; :mod:`jaxtree.certificate`), as plain floats.

        ``gibbs_risk`` is ``R̂(Q)`` on S, ``kl`` is ``KL(Q‖P)`` for the prior of the chosen
        reading (practical: ``P(T) ∝ e^{−|π(T, S0)|}``; theory: ``P(T) ∝ e^{−3·D0·|π(T)|}``),
        ``bound`` bounds the Gibbs risk ``R(Q)`` with probability ≥ 1 − ``delta`` (at its
        minimising λ ∈ (0, 2), field ``lam``) and ``majority_vote_bound = 2·bound`` the vote's
        risk; ``n`` is the size of S.

        What is certified: with ``certify`` set, T0, the labels and the prior depend on S0
        only, so both bounds hold with probability ≥ 1 − δ over S, whatever λ's were chosen on
        S (by CV or ``tune="bound"``). With ``certify=False`` (S0 = S) T0, the labels and the
        practical prior were chosen on the very sample the bound is computed on: the numbers are
        the bound's formula evaluated there, a diagnostic of how concentrated Q is, not a
        guarantee (typically optimistic).
        """
        check_is_fitted(self)
        if self.potentials not in ("practical", "theory"):
            raise ValueError(f"certificate() needs potentials='practical' or 'theory'; got "
                             f"{self.potentials!r}")
        if self.potentials == "theory":
            result = pacbayes_theory_certificate(self.tree_, self.stats_, self._param("lam1"),
                                                 delta, self.delta)
        else:
            result = pacbayes_certificate(self.tree_, self.stats_, self._param("lam1"),
                                          self._param("lam2"), delta,
                                          getattr(self, "prior_stats_", None))
        return Certificate(**{field.name: float(getattr(result, field.name))
                              for field in dataclasses.fields(result)})

    def _prior_share(self) -> Optional[float]:
        """The share of the sample that ``certify`` puts in S0, or None (no split)."""
        certify = self.certify
        if certify is None or (isinstance(certify, (bool, np.bool_)) and not certify):
            return None
        if isinstance(certify, (bool, np.bool_)):
            return 0.5
        if isinstance(certify, (int, float, np.number)) and 0 < certify < 1:
            return float(certify)
        raise ValueError(f"certify must be False, True or a fraction in (0, 1); got {certify!r}")

    def _fit_encoded(self, X, y, weight):
        """The pure fit (:func:`jaxtree.fitting.fit_with_config`) unless ``certify`` splits the
        sample or ``tune`` is ``"gradient"`` or ``"bound"`` (the shell's own steps then)."""
        self.__dict__.pop("prior_stats_", None)
        if self._prior_share() is not None or self.tune in ("gradient", "bound"):
            if self._prior_share() is not None:
                self._fit_certified(X, y, weight)
            else:
                super()._fit_encoded(X, y, weight)
            self.softness_ = self._softness()
            self.quantile_knots_ = None if self.softness_ == 0 else soft.quantile_knots(
                self.tree_, X, np.ones(len(X), X.dtype) if weight is None else weight)
            return
        for name in ("best_params_", "cv_results_"):
            self.__dict__.pop(name, None)
        X, y, weight = self._padded_sample(X, y, weight)
        given = {} if self.tune == "grid" else {"lam1": self.lam1, "lam2": self.lam2}
        config = self._fit_config(X, weight, **{"lam1": None, "lam2": None, **given},
                                  tune=None if self.tune is None else "auto")
        def run(config):
            model = fitting.fit_with_config(X, y, weight, self._key(), config,
                                            **{k: v for k, v in given.items() if v is not None},
                                            delta=self.delta, smoothing=self.smoothing,
                                            splits=self._cv_splits,
                                            depth_limit=self._depth_limit(X, weight))
            return model, (model.capped, model.depth_capped)

        model, config = fitting.enlarge_until_uncapped(run, config, X.shape)
        _warn_capped(model.capped, config.grow.width)
        model = fitting.skip_collapsed_refit(model, config, self.delta)
        self.fitted_tree_ = model
        self.tree_, self.stats_ = model.tree, model.stats
        self.node_log_weights_, self.node_proba_ = model.log_weights, model.node_proba
        self.softness_, self.quantile_knots_ = model.softness, model.knots
        if model.search is not None:
            self.best_params_ = {name: float(getattr(model, name)) for name in config.tuned}
            self.cv_results_ = select._grid_results(model.search, list(config.tuned),
                                                   self.scoring)

    def _fit_config(self, X, weight, **options) -> fitting.FitConfig:
        settings = dict(potentials=self.potentials, proba=self.proba, scoring=self.scoring,
                        softness=self._softness())
        return super()._fit_config(X, weight, **{**settings, **options})

    def _fit_certified(self, X, y, weight):
        """``certify``: T0, the labels and ``prior_stats_`` from S0 (a share of the distinct
        rows), the counts, the λ's and the posterior from the rest, S."""
        if not np.all((weight == 0) | (weight == 1)):
            raise ValueError("certify needs sample weights of 0 or 1 (the bound counts points): "
                             "drop certify, or pass the rows to keep with weight 1")
        share = self._prior_share()
        X, y, weight = self._padded_sample(X, y, weight)
        prior, rest = np.asarray(fitting.holdout_weights(X, weight, _holdout_key(self._key()),
                                                         share))
        held, kept = int(prior.sum()), int(rest.sum())
        if held < 2 or kept < 2:
            raise ValueError(f"certify={self.certify!r} splits {held + kept} samples into {held} "
                             f"for T0 and {kept} for the posterior; each needs at least 2")
        num_classes = len(self.classes_)
        self.tree_ = self._grow(X, y, prior)
        self.prior_stats_ = _weighted_stats(self.tree_, X, y, prior, num_classes)
        counts = _weighted_stats(self.tree_, X, y, rest, num_classes).counts
        self.stats_ = NodeStats(counts=counts, label=self.prior_stats_.label)
        self._select_params(X, y, rest)
        self._fit_tree(self.stats_, X, y, rest)

    def _tune_by_bound(self):
        result = tune_by_bound(self.tree_, self.stats_, self.potentials, self.delta,
                               getattr(self, "prior_stats_", None), potentials_delta=self.delta)
        path = result.path
        names = [name for name in path if name != "bound"]
        steps = len(path["bound"])
        results = {"params": [{name: float(path[name][i]) for name in names}
                              for i in range(steps)],
                   **{f"param_{name}": path[name] for name in names}, "bound": path["bound"]}
        return result.best_params, results

    def _tuning_spec(self):
        votes = {"practical": select.pacbayes_votes, "authors": select.pacbayes_authors_votes}
        if self.potentials not in votes:
            return None
        return votes[self.potentials], select.PACBAYES_DIRECTIONS

    def _fixed_params(self):
        # the CV scores the probabilities predict_proba will give
        return {"smoothing": self.smoothing} if self.proba == "predictive" else {}

    def _fit_tree(self, stats, X, y, weight=None):
        lam1, lam2 = self._param("lam1"), self._param("lam2")
        needed = (lam1,) if self.potentials == "theory" else (lam1, lam2)
        if any(lam is None or not lam > 0 for lam in needed):
            raise ValueError(f"lam1 and lam2 must be > 0 (or None with tune='auto' to select "
                             f"them); got {lam1}, {lam2}")
        if self.potentials == "practical":   # certify: the leaf cost of S0, the prior's
            log_w = pacbayes_log_weights(self.tree_, stats, lam1, lam2,
                                         prior_stats=getattr(self, "prior_stats_", None))
        elif self.potentials == "authors":
            log_w = pacbayes_authors_log_weights(self.tree_, stats, lam1, lam2)
        elif self.potentials == "theory":
            log_w = pacbayes_theory_log_weights(self.tree_, stats, lam1, self.delta)
        else:
            raise ValueError(f"potentials must be 'practical', 'authors' or 'theory'; "
                             f"got {self.potentials!r}")
        self.node_log_weights_ = log_w
        self.node_proba_ = _class_frequencies(self.tree_, stats.counts, self.smoothing)

    def _scores(self, X):
        softness = getattr(self, "softness_", 0.0)   # 0 in a model saved before soft routing
        if softness == 0:
            return _vote_proba(self, self.node_log_weights_, X)
        predictions = fitting.node_predictions(self.proba, self.node_proba_, self.stats_.label)
        return soft.soft_scores(self.tree_, self.quantile_knots_, predictions,
                                self.node_log_weights_, X, softness)


PRUNING_METHODS = ("c1", "sn", "km", "optimistic", "rep", "min_size")


class PrunedTreeClassifier(TreeClassifierBase):
    """T0 pruned by one of the classic methods (docs/theory/pruning.md; :mod:`jaxtree.prune`);
    predicts the label of the pruning leaf that contains a point. By default each method's
    penalty is tuned. ``predict_proba`` gives the class frequencies of the pruning leaf that contains a point
    (smoothed by ``smoothing``; scikit-learn's tree gives the plain ones), ``predict`` their
    argmax, the leaf's majority label.

    Args:
      method: ``"c1"`` (cost-complexity, ``lam``), ``"sn"`` (Scott's SN penalty, ``lam``),
        ``"km"`` (Kearns–Mansour local test, ``c``, ``delta``, ``num_tests``), ``"optimistic"``
        (Nock 2002's test, ``c``, ``delta``, ``resample``), ``"rep"`` (reduced-error pruning on a
        hold-out part) or ``"min_size"`` (fewest training errors per size, size chosen by
        ``selection``).
      partition, max_depth, min_split, split: T0, as in :class:`PACBayesTreeClassifier`. The
        default T0 is the paper's KD tree with cycled coordinates (its baselines are measured
        on it); it splits without the labels, and ``partition="cart", split="spread"`` prunes
        a CART tree instead, the better model where the labels decide the splits (spam, a
        stratified 1,500 training rows: C1's test error 0.089 against 0.191).
      lam: λ of C1/SN, the price of a leaf in training errors; None (default): tuned.
      c: the constant in front of the KM / optimistic / SRM penalty (1: the formula as stated);
        None (default): tuned.
      delta: confidence δ of KM, optimistic and SRM (0.05: the usual choice; not tuned).
      selection: ``"srm"`` (``R̂ + c·sqrt((s·log(4|H|) + log(1/δ))/n)``) or ``"cv"``
        (hold-out) for ``"min_size"``.
      holdout: fraction of the sample held out as S2 by ``"rep"`` and ``min_size``/``"cv"``
        (T0 and its labels come from the rest, S1, as in reduced-error pruning). A third by
        default, a common choice.
      num_tests: ``|H|`` for KM and SRM; None counts T0's distinct split tests
        (:func:`jaxtree.prune.log_num_tests_of`).
      resample: optimistic pruning treats a sample smaller than 5000 as resampled to 5000
        (Nock 2002).
      tune: ``"auto"`` (default: the penalty, ``lam`` or ``c``, is chosen by 2-fold CV when left
        at None), ``"grid"`` (chosen even when given), or None (use the given value).
        The search is the paper's protocol on a range in the method's own units: 10 values
        ``root_penalty · 2^linspace(-14, 0, 10)``, where ``root_penalty``
        (:func:`jaxtree.prune.root_penalty`, from the whole sample) is a penalty that prunes T0
        to its root, then 10 values from half to twice the best; ties go to the larger
        (simpler) penalty. A fixed range cannot serve every sample size: C1's λ counts
        training errors, so the useful λ grows with n, and the other penalties' scales grow
        like sqrt(n). ``"gradient"`` is refused: a pruning is piecewise constant in its
        penalty, so the validation error has no useful gradient. ``"rep"`` and
        ``"min_size"`` with ``selection="cv"`` have nothing to tune (their hold-out part picks
        the pruning): ``best_params_`` is then ``{}``.
      cv: number of CV folds of the tuning (the distinct feature vectors dealt by
        ``random_state``), or a scikit-learn splitter or an iterable of ``(train, test)`` index
        arrays, as ``GridSearchCV`` takes.
      random_state: seed of the S1/S2 split and of the CV folds (and, with ``partition="cart"``,
        of the ties between features in the grown tree).
      cv_trees: which T0 the CV folds use: ``"auto"`` (default) grows a CART T0 on each
        fold's training part and shares one T0 of all the points for KD and dyadic trees (a
        pruning is one minimiser, which a fold's empty cells do not change:
        :func:`jaxtree.fitting.per_fold_trees`); ``"per_fold"`` or ``"shared"`` force either.

      proba: ``"predictive"`` (default: the leaf's class frequencies, smoothed) or
        ``"majority"`` (one-hot leaf labels), as in :class:`PACBayesTreeClassifier`.
      bins, class_weight: as in :class:`PACBayesTreeClassifier`.
      smoothing: α ≥ 0, the Dirichlet pseudo-count per class of the leaf frequencies
        (:func:`jaxtree.class_frequencies`; ½ by default, 0: scikit-learn's frequencies).

    Fitted attributes: ``classes_``, ``n_features_in_``, ``tree_``, ``stats_`` (of S1 for the
    hold-out methods), ``node_proba_`` ``[nodes, L]`` (smoothed class frequencies of
    ``stats_``), ``leaf_mask_`` ``[nodes]`` (True at the pruning's leaves), ``n_leaves_``
    (number of leaves of the pruning, empty ones included), for ``min_size`` the curve
    ``errors_per_size_`` ``[S+1]`` (S: T0's non-empty leaves rounded up by
    :func:`jaxtree.shapes.padded`; inf at the sizes no pruning has) and the chosen ``size_``
    (non-empty leaves); when tuned, ``best_params_`` (``{"lam": ...}`` or ``{"c": ...}``) and
    ``cv_results_`` (:func:`jaxtree.select.tune`).

    Shapes and dtypes as :class:`PACBayesTreeClassifier`.

    Example:
        Cost-complexity pruning at λ = 1 keeps two leaves:

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.arange(8.0)[:, None]
        >>> y = np.array([0, 0, 1, 0, 1, 1, 1, 1])
        >>> model = jaxtree.PrunedTreeClassifier(method="c1", lam=1.0, max_depth=2).fit(X, y)
        >>> model.predict(X).tolist(), model.n_leaves_
        ([0, 0, 0, 0, 1, 1, 1, 1], 2)
    """

    def __init__(self, method="c1", partition="kd", max_depth=None, min_split=2, split="cycle",
                 lam=None, c=None, delta=0.05, selection="srm", holdout=1 / 3, num_tests=None,
                 resample=True, tune="auto", cv=2, random_state=0, proba="predictive",
                 smoothing=DEFAULT_SMOOTHING, cv_trees="auto", bins=None, class_weight=None):
        self.bins = bins
        self.class_weight = class_weight
        self.method = method
        self.partition = partition
        self.max_depth = max_depth
        self.min_split = min_split
        self.split = split
        self.lam = lam
        self.c = c
        self.delta = delta
        self.selection = selection
        self.holdout = holdout
        self.num_tests = num_tests
        self.resample = resample
        self.tune = tune
        self.cv = cv
        self.random_state = random_state
        self.proba = proba
        self.smoothing = smoothing
        self.cv_trees = cv_trees

    def _uses_holdout(self):
        return self.method == "rep" or (self.method == "min_size" and self.selection == "cv")

    def _penalized(self) -> Optional[str]:
        """The method's key in :data:`jaxtree.prune.PENALTY` (None for the hold-out methods)."""
        if self._uses_holdout():
            return None
        return "min_size_srm" if self.method == "min_size" else self.method

    def _split_weights(self, X, y, weight):
        """``(grow, prune)`` ``[n]`` weights of S1 and S2: the share ``holdout`` of the distinct
        rows (drawn with ``random_state``) is S2, each row keeping its weight on its side."""
        if not 0 < self.holdout < 1:
            raise ValueError(f"holdout must be in (0, 1); got {self.holdout!r}")
        held, grow = np.asarray(fitting.holdout_weights(
            X, weight, _holdout_key(self._key()), self.holdout))
        if np.count_nonzero(grow) < 2 or not held.any():
            raise ValueError(f"holdout={self.holdout} splits {np.count_nonzero(weight)} samples "
                             f"into {np.count_nonzero(grow)} to grow T0 and "
                             f"{np.count_nonzero(held)} to prune; need at least 2 and 1")
        return grow, held

    def _check_params(self):
        """The parameters' values, before any tree is built."""
        _check_proba_options(self.proba, self.smoothing)
        if self.method not in PRUNING_METHODS:
            raise ValueError(f"method must be one of {PRUNING_METHODS}; got {self.method!r}")
        if self.method == "min_size" and self.selection not in ("srm", "cv"):
            raise ValueError(f"selection must be 'srm' or 'cv'; got {self.selection!r}")
        if self.tune == "gradient":
            raise ValueError("tune='gradient' does not apply to PrunedTreeClassifier: a pruning "
                             "is piecewise constant in its penalty, so the validation error "
                             "has no useful gradient; use tune='auto' or 'grid'")
        key = self._penalized()
        if key is None:
            return
        name = prune.PENALTY[key]
        value = getattr(self, name)
        if value is None and self.tune is None:
            raise ValueError(f"{name} is None and tune=None: give {name}, or leave tune='auto' "
                             f"to select it by cross-validation")
        if value is not None and not value >= 0:
            raise ValueError(f"{name} must be >= 0 (or None to tune it); got {value!r}")
        if name == "c" and not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1); got {self.delta!r}")

    def _grow(self, X, y, weight):
        if self._uses_holdout():
            weight = self._split_weights(X, y, weight)[0]
        return super()._grow(X, y, weight)

    def _select_params(self, X, y, weight=None, cv_data=None):
        super()._select_params(X, y, weight, cv_data)
        if self._penalized() is None and self.tune is not None:
            self.best_params_ = {}   # the hold-out part chooses the pruning: nothing to tune

    def _tuning_spec(self):
        key = self._penalized()
        if key is None:
            return None
        if key == "min_size_srm":
            votes = prune.min_size_srm_votes_for(self._size_cap())
        else:
            votes = {"c1": prune.c1_votes, "sn": prune.sn_votes, "km": prune.km_votes,
                     "optimistic": prune.optimistic_votes}[key]
        return votes, ((prune.PENALTY[key], +1),)

    def _cv_errors_fn(self):
        if self._penalized() != "min_size_srm":
            return None
        # c only picks a size: one knapsack per fold, compiled once with the final fit's
        return functools.partial(select.srm_grid_errors, max_size=self._size_cap())

    def _size_cap(self) -> int:
        """The static S of the min-size tables (:func:`jaxtree.prune.size_cap` of ``stats_``)."""
        return prune.size_cap(self.stats_, self.tree_.internal, self.tree_.layout)

    def _fixed_params(self):
        key = self._penalized()
        if key in ("km", "min_size_srm"):
            return {"delta": self.delta, "log_num_tests": self._log_num_tests()}
        if key == "optimistic":
            return {"delta": self.delta, "resample": self.resample}
        return {}

    def _search_grid(self):
        key = self._penalized()
        top = prune.root_penalty(key, self.stats_, self.delta, self._log_num_tests(),
                                 self.resample)
        return float(top) * prune.RELATIVE_GRID

    def _log_num_tests(self):
        """``log|H|`` of KM and SRM: ``num_tests``, or T0's distinct split tests."""
        if self.num_tests is None:
            return float(prune.log_num_tests_of(self.tree_))
        return math.log(max(self.num_tests, 2))

    def _fit_tree(self, stats, X, y, weight=None):
        tree, num_classes = self.tree_, len(self.classes_)
        holdout_err = None
        if self._uses_holdout():
            grow, held = self._split_weights(X, y, weight)
            stats = _weighted_stats(tree, X, y, grow, num_classes)
            counts2 = _weighted_stats(tree, X, y, held, num_classes).counts
            holdout_err = prune.holdout_errors(counts2, stats.label)
            self.stats_ = stats
        method, lam, c = self.method, self._param("lam"), self._param("c")
        if method in ("c1", "sn"):
            cost = (prune.c1_leaf_cost(stats, lam) if method == "c1"
                    else prune.sn_leaf_cost(stats, tree.node_depth, lam))
            mask = best_pruning(cost, tree.internal, layout=tree.layout)
        elif method == "rep":
            mask = prune.rep_pruning(holdout_err, tree.internal, tree.layout)
        elif method == "km":
            mask = prune.km_pruning(tree, stats, c, self.delta, self._log_num_tests())
        elif method == "optimistic":
            mask = prune.optimistic_pruning(tree, stats, c, self.delta, self.resample)
        else:
            mask = self._min_size(tree, stats, holdout_err, c)
        self.leaf_mask_ = mask
        self.n_leaves_ = int(jnp.sum(mask))
        self.node_proba_ = _class_frequencies(tree, stats.counts, self.smoothing)

    def _min_size(self, tree, stats, holdout_err, c):
        table = prune.min_error_per_size(stats.errors, stats.total > 0, tree.internal,
                                         self._size_cap(), holdout_err, tree.layout)
        if self.selection == "cv":
            size = prune.holdout_select(table)
        else:
            size = prune.srm_select(table.errors, stats.num_samples, c, self.delta,
                                    self._log_num_tests())
        self.errors_per_size_ = np.asarray(table.errors)
        self.size_ = int(size)
        return prune.pruning_of_size(table, size, tree.internal, tree.layout)

    def _scores(self, X):
        return _vote_proba(self, jnp.where(self.leaf_mask_, 0.0, -jnp.inf), X)


class HSVoteClassifier(TreeClassifierBase):
    """Helmbold–Schapire vote over every pruning of T0 (docs/theory/pruning.md; :mod:`jaxtree.hsvote`); binary
    labels only: declared through scikit-learn's tags (``classifier_tags.multi_class = False``),
    and more than two classes raise a ``ValueError``. A single class is fitted and predicted
    everywhere (``predict_proba`` is then ``[n, 1]`` of ones).

    Args:
      partition, max_depth, min_split, split: T0, as in :class:`PACBayesTreeClassifier`.
      eta: learning rate η > 0 (1 with the log loss is the Bayes mixture); None (default):
        tuned.
      loss: ``"log"`` or ``"absolute"``.
      tune: ``"auto"`` (default: ``eta`` left at None is chosen by the paper's protocol, 2-fold
        CV over 2^linspace(-8, 6, 10) then 10 values from half to twice the best; ties go to
        the smaller η, the posterior closer to its prior), ``"grid"``, ``"gradient"`` (Adam on
        the smoothed validation loss in log η, from ``eta`` or 1: the vote is smooth in η) or
        None (:class:`TreeClassifierBase`). η weighs a loss summed over a node's points, so it
        is scale-free in n already: a grid in its own units serves every sample size.
      cv, random_state: number of CV folds and the seed that deals them; ``cv`` may also be a
        scikit-learn splitter or an iterable of ``(train, test)`` index arrays.
      cv_trees: which T0 the CV folds use, as in :class:`PrunedTreeClassifier` (``"auto"``:
        per fold for ``partition="cart"``, shared for KD and dyadic trees: the HS prior is a
        proper distribution over prunings, :func:`jaxtree.fitting.per_fold_trees`).
      bins, class_weight: as in :class:`PACBayesTreeClassifier`.

    Fitted attributes: ``classes_``, ``n_features_in_``, ``tree_``, ``stats_``,
    ``node_log_weights_`` ``[nodes]``, ``node_estimates_`` ``[nodes]`` (p_A); when tuned,
    ``best_params_`` (``{"eta": ...}``) and ``cv_results_``.
    ``predict_proba`` gives ``(1 − P, P)`` with ``P = Σ_{A ∈ path(x)} w(A)·p_A``; ``predict``
    returns their argmax, the second class iff ``P > ½``.

    Shapes and dtypes as :class:`PACBayesTreeClassifier` (``L`` ≤ 2).

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.arange(8.0)[:, None]
        >>> y = np.array([0, 0, 1, 0, 1, 1, 1, 1])
        >>> model = jaxtree.HSVoteClassifier(max_depth=2, eta=1.0).fit(X, y)
        >>> model.predict(X).tolist()
        [0, 0, 0, 0, 1, 1, 1, 1]
        >>> print(np.asarray(model.predict_proba(X[:1])).round(3))
        [[0.763 0.237]]
    """

    def __init__(self, partition="kd", max_depth=None, min_split=2, split="cycle", eta=None,
                 loss="log", tune="auto", cv=2, random_state=0, cv_trees="auto", bins=None,
                 class_weight=None):
        self.bins = bins
        self.class_weight = class_weight
        self.partition = partition
        self.max_depth = max_depth
        self.min_split = min_split
        self.split = split
        self.eta = eta
        self.loss = loss
        self.tune = tune
        self.cv = cv
        self.random_state = random_state
        self.cv_trees = cv_trees

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _check_classes(self, classes):
        if len(classes) > 2:
            raise ValueError(f"Only binary classification is supported: HSVoteClassifier "
                             f"needs at most two classes; got {len(classes)}. Use "
                             "PACBayesTreeClassifier or PrunedTreeClassifier for multiclass "
                             "problems")

    def _num_stat_classes(self):
        return 2  # P(y = 1) estimates: a single class is class 0 with no points of class 1

    def _check_params(self):
        if self.loss not in hsvote.LOSSES:
            raise ValueError(f"loss must be one of {hsvote.LOSSES}; got {self.loss!r}")
        if self.eta is None and self.tune is None:
            raise ValueError("eta is None and tune=None: give eta, or leave tune='auto' to "
                             "select it by cross-validation")
        if self.eta is not None and not self.eta > 0:
            raise ValueError(f"eta must be > 0 (or None to tune it); got {self.eta!r}")

    def _tuning_spec(self):
        if len(self.classes_) < 2:
            return None   # one class: every η gives the same prediction
        votes = hsvote.hs_votes if self.loss == "log" else hsvote.hs_absolute_votes
        return votes, (("eta", -1),)

    def _fit_tree(self, stats, X, y, weight=None):
        eta = self._param("eta")
        if eta is None:   # a single class: nothing was tuned, and η changes nothing
            eta = 1.0
        self.node_estimates_ = hsvote.hs_node_estimates(stats)
        self.node_log_weights_ = hsvote.hs_log_weights(self.tree_, stats, eta, self.loss)

    def _scores(self, X):
        if len(self.classes_) == 1:
            return jnp.ones((X.shape[0], 1), X.dtype)
        p = hsvote.hs_vote(self.tree_, self.node_estimates_, self.node_log_weights_, X)
        return jnp.stack([1 - p, p], axis=1)


class ObliqueTreeClassifier(TreeClassifierBase):
    """Perceptron (oblique) decision tree (docs/theory/oblique.md; Bennett, Wu, Cristianini & Shawe-Taylor).

    Args:
      method: ``"oc1"``, ``"fat"`` (OC1 then max-margin hyperplanes), ``"moc1"`` (twoing +
        C·margin), ``"moc2"`` (twoing with a margin band) or ``"axis"`` (axis-parallel splits);
        see :mod:`jaxtree.oblique`.
      max_depth: depth of the tree. min_split: nodes with fewer training points are not split.
      n_restarts, n_jumps, n_cycles: OC1's random restarts, random jumps, perturbation passes.
      margin_weight: C of MOC1. band: MOC2's band half-width (standardized units).
      fat_steps: iterations of FAT's max-margin solver.
      vote: ``"leaf"`` (the T0-leaf's prediction) or ``"pacbayes"`` (the PAC-Bayes vote over
        every pruning of the oblique T0 with ``lam1``, ``lam2``; docs/theory/pacbayes.md).
      proba, smoothing: ``"predictive"`` (default: the class frequencies of the T0-leaf, or
        their posterior average over prunings, smoothed by ``smoothing``) or ``"majority"``
        (hard labels), as in :class:`PACBayesTreeClassifier`.
      random_state: seed of the split search.

    ``fit``'s ``sample_weight`` must be integers here (the oblique builder takes no weights: each
    row is repeated that many times); there is no ``class_weight``.

    Fitted attributes: ``classes_``, ``n_features_in_``, ``tree_`` (a :class:`jaxtree.Tree` with
    ``coef``), ``stats_``, ``node_log_weights_`` ``[nodes]``, ``node_proba_`` ``[nodes, L]``
    (smoothed class frequencies), ``margins_`` ``[K]`` (the margin of
    each internal node, in slot order, standardized units), ``radius_`` and ``n_samples_``.

    Shapes and dtypes as :class:`PACBayesTreeClassifier`.

    Example:
        The AND of two bits needs one oblique split:

        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
        >>> y = np.array([0, 0, 0, 1])
        >>> model = jaxtree.ObliqueTreeClassifier(max_depth=1).fit(X, y)
        >>> model.predict(X).tolist(), model.margins_.shape
        ([0, 0, 0, 1], (1,))
    """

    def __init__(self, method="oc1", max_depth=4, min_split=2, n_restarts=2, n_jumps=2,
                 n_cycles=2, margin_weight=0.01, band=0.05, fat_steps=2000, vote="leaf",
                 lam1=1.0, lam2=1.0, proba="predictive", smoothing=DEFAULT_SMOOTHING,
                 random_state=0):
        self.method = method
        self.max_depth = max_depth
        self.min_split = min_split
        self.n_restarts = n_restarts
        self.n_jumps = n_jumps
        self.n_cycles = n_cycles
        self.margin_weight = margin_weight
        self.band = band
        self.fat_steps = fat_steps
        self.vote = vote
        self.lam1 = lam1
        self.lam2 = lam2
        self.proba = proba
        self.smoothing = smoothing
        self.random_state = random_state

    def _check_params(self):
        _check_proba_options(self.proba, self.smoothing)

    def margin_bound(self, delta=0.05):
        """Theorem 0.1's bound on the generalization error (:func:`jaxtree.margin_bound`)."""
        check_is_fitted(self)
        return margin_bound(self.margins_, self.radius_, self.n_samples_, delta)

    def _grow(self, X, y, weight):
        """The oblique builder (on the host) on the rows repeated by their integer weights."""
        if self.vote not in ("leaf", "pacbayes"):
            raise ValueError(f"vote must be 'leaf' or 'pacbayes'; got {self.vote!r}")
        rows = _repeated_rows(weight)
        X, y = X[rows], y[rows]
        return shapes.pad_tree(self._oblique_tree(X, y), X.shape[0])

    def _oblique_tree(self, X, y):
        return oblique_tree(X, y, max_depth=self.max_depth, method=self.method,
                            min_split=self.min_split, n_restarts=self.n_restarts,
                            n_jumps=self.n_jumps, n_cycles=self.n_cycles,
                            margin_weight=self.margin_weight, band=self.band,
                            fat_steps=self.fat_steps, random_state=self.random_state)

    def _fit_tree(self, stats, X, y, weight=None):
        tree = self.tree_
        internal = np.asarray(tree.internal)
        X = X[_repeated_rows(weight)]
        self.margins_ = np.asarray(node_margins(tree, X))[internal]
        self.radius_ = float(jnp.max(jnp.linalg.norm(scale_points(tree, X), axis=1)))
        self.n_samples_ = X.shape[0]
        if self.vote == "pacbayes":
            if not (self.lam1 > 0 and self.lam2 > 0):
                raise ValueError(f"lam1 and lam2 must be > 0; got {self.lam1}, {self.lam2}")
            self.node_log_weights_ = pacbayes_log_weights(tree, stats, self.lam1, self.lam2)
        else:  # all weight on the T0-leaves: the ordinary tree prediction
            self.node_log_weights_ = jnp.where(tree.internal, -jnp.inf, 0.0)
        self.node_proba_ = _class_frequencies(tree, stats.counts, self.smoothing)

    def _scores(self, X):
        return _vote_proba(self, self.node_log_weights_, X)
