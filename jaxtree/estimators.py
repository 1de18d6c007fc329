"""scikit-learn-style estimators: a thin shell over the functional core.

The shell validates input, encodes labels (any label values), builds T0, computes statistics
and calls the pure functions; it holds no math. ``get_params``/``set_params`` follow scikit-learn's
conventions, so ``sklearn.base.clone``, ``GridSearchCV`` and pipelines work with these classes.
"""

from __future__ import annotations

import inspect
import math

import jax.numpy as jnp
import numpy as np

from jaxtree.build import check_features, dyadic_tree, kd_tree
from jaxtree.pacbayes import pacbayes_potentials, pacbayes_theory_potentials, vote
from jaxtree.engine import subtree_log_weights
from jaxtree.stats import node_stats

try:  # use scikit-learn's exception when it is installed, so `except NotFittedError` matches
    from sklearn.exceptions import NotFittedError
except ImportError:  # pragma: no cover - scikit-learn is an optional dependency
    class NotFittedError(ValueError, AttributeError):
        """Raised when an estimator is used before ``fit``."""

PARTITIONS = {"kd": kd_tree, "dyadic": dyadic_tree}


class ParamsMixin:
    """``get_params``/``set_params`` from the ``__init__`` signature (scikit-learn convention)."""

    @classmethod
    def _param_names(cls):
        signature = inspect.signature(cls.__init__)
        return sorted(p for p in signature.parameters if p != "self")

    def get_params(self, deep=True):
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params):
        valid = self._param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(f"invalid parameter {name!r} for {type(self).__name__}; "
                                 f"valid parameters: {valid}")
            setattr(self, name, value)
        return self

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"


class TreeClassifierBase(ParamsMixin):
    """Shared shell: input checks, label encoding, T0 and its statistics.

    Subclasses implement ``_fit_tree(stats, X, y)`` (after ``tree_`` exists) and
    ``_scores(X) -> [n, L]``.
    """

    def fit(self, X, y):
        """Build T0 on ``X`` ``[n, D]`` with labels ``y`` ``[n]`` and fit the model. Returns self."""
        X = check_features(X)
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise ValueError(f"y must be 1-D with one label per row of X; X has {X.shape[0]} "
                             f"rows, y has shape {y.shape}")
        self.classes_, y_encoded = np.unique(y, return_inverse=True)
        self.n_features_in_ = X.shape[1]
        self.tree_ = self._build_tree(X, y_encoded)
        self.stats_ = node_stats(self.tree_, X, jnp.asarray(y_encoded), len(self.classes_))
        self._fit_tree(self.stats_, X, y_encoded)
        return self

    def predict_proba(self, X):
        """``[n, L]`` class scores (columns in the order of ``classes_``)."""
        return np.asarray(self._scores(self._check_predict_input(X)))

    def predict(self, X):
        """``[n]`` predicted labels (values from ``classes_``)."""
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def score(self, X, y):
        """Mean accuracy on ``(X, y)``."""
        return float(np.mean(self.predict(X) == np.asarray(y)))

    # -----------------------------------------------------------------------------------------
    def _build_tree(self, X, y):
        if self.partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {sorted(PARTITIONS)}; "
                             f"got {self.partition!r}")
        depth = self.max_depth if self.max_depth is not None else default_depth(
            self.partition, *X.shape)
        builder = PARTITIONS[self.partition]
        return builder(X, max_depth=int(depth), min_split=self.min_split, y=y, split=self.split)

    def _check_predict_input(self, X):
        if not hasattr(self, "tree_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first")
        X = np.asarray(X)
        if X.ndim != 2:
            raise ValueError(f"X must be a 2-D array [n_samples, n_features]; got shape {X.shape}")
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but {type(self).__name__} was "
                             f"fitted with {self.n_features_in_}")
        X = X.astype(jnp.zeros(0).dtype)
        if not np.isfinite(X).all():
            raise ValueError("X contains NaN or infinite values; impute or drop them first")
        return X


def default_depth(partition: str, n: int, dims: int) -> int:
    """Default ``max_depth``: ``ceil(log2 n)`` for KD trees (about one point per leaf); for dyadic
    trees the paper's ``floor(ln n)·D`` capped at 16 levels (what the complete layout holds
    comfortably)."""
    if partition == "dyadic":
        return min(int(math.floor(math.log(n))) * dims, 16)
    return max(1, int(math.ceil(math.log2(n))))


class PACBayesTreeClassifier(TreeClassifierBase):
    """PAC-Bayes tree (Nguyen & Kpotufe 2018): the posterior-weighted vote over every pruning of T0.

    Args:
      partition: ``"kd"`` or ``"dyadic"`` T0 (SPEC §1).
      max_depth: depth of T0; None for :func:`default_depth`.
      min_split: nodes with fewer training points are not split.
      split: ``"cycle"`` (coordinate ``depth mod D``) or ``"spread"`` (widest spread).
      lam1, lam2: λ1 (weight of training errors) and λ2 (weight of the concentration term).
      potentials: ``"practical"`` (SPEC §2) or ``"theory"`` (Theorem 1; uses ``lam1`` as λ and
        ``delta``).
      delta: confidence of the theory potentials.

    Fitted attributes: ``classes_``, ``n_features_in_``, ``tree_`` (:class:`jaxtree.Tree`),
    ``stats_`` (:class:`jaxtree.NodeStats`), ``node_log_weights_`` ``[nodes]``.
    """

    def __init__(self, partition="kd", max_depth=None, min_split=2, split="cycle", lam1=1.0,
                 lam2=1.0, potentials="practical", delta=0.05):
        self.partition = partition
        self.max_depth = max_depth
        self.min_split = min_split
        self.split = split
        self.lam1 = lam1
        self.lam2 = lam2
        self.potentials = potentials
        self.delta = delta

    def _fit_tree(self, stats, X, y):
        if not (self.lam1 > 0 and self.lam2 > 0):
            raise ValueError(f"lam1 and lam2 must be > 0; got {self.lam1}, {self.lam2}")
        if self.potentials == "practical":
            phi = pacbayes_potentials(stats, self.lam1, self.lam2)
        elif self.potentials == "theory":
            phi = pacbayes_theory_potentials(self.tree_, stats, self.lam1, self.delta)
        else:
            raise ValueError(f"potentials must be 'practical' or 'theory'; "
                             f"got {self.potentials!r}")
        self.node_log_weights_ = subtree_log_weights(phi, self.tree_.internal,
                                                     layout=self.tree_.layout)

    def _scores(self, X):
        return vote(self.tree_, self.stats_.label, self.node_log_weights_, X,
                    len(self.classes_))
