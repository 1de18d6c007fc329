"""Model selection (docs/theory/selection.md; the smoothed validation loss of docs/theory/pacbayes.md): k-fold grid search in one batched
computation, the paper's two-stage protocol, gradient tuning with optax, batches of problems.

Everything here works for any method expressed as a *votes function*
``votes_fn(tree, stats, params)``: per-node class votes whose sums along a point's root-to-leaf
path are the point's class scores, either a ``[nodes, L]`` array (HS-vote: ``w(A)·p_A``) or a pair
``(weight [nodes], label [nodes])`` meaning ``weight(A)·onehot(label(A))`` (PAC-Bayes:
``(w_Q(A), l(A))``; a pruning: ``(1[A is a pruning leaf], l(A))``). ``params`` is a dict of scalars.
A votes function must be a module-level function (jit caches on it). The PAC-Bayes and pruning
votes functions give the posterior predictive ``w(A)·p̂(· | A)`` (``[nodes, L]``) instead of
hard labels when ``params`` holds ``"smoothing"`` (the Dirichlet pseudo-count of
:func:`jaxtree.class_frequencies`; :func:`jaxtree.pacbayes.node_votes`).

**Scoring.** A setting is selected by its validation loss summed over the folds' points:
``scoring="accuracy"`` (the default) counts errors of the scores' argmax, ``"neg_log_loss"``
sums ``−log p_y`` and ``"neg_brier_score"`` sums ``Σ_l (p_l − 1[y = l])²`` (halved for two
classes), ``p`` the scores normalised to sum to 1 (scikit-learn's scorer names and
definitions; ``cv_results_`` reports ``mean_test_score`` as scikit-learn does: accuracy, or
the negated mean loss). Log-loss and Brier score judge the probabilities, not only their argmax.

How the work is shared (T0 is built once on all the training data, docs/theory/protocol.md):

* the points are routed once (validation points keep their root-to-leaf paths, reused by every
  setting); the training statistics of the k folds are one ``vmap`` of the node statistics over
  the fold masks (:func:`prepare_folds`);
* a setting's validation scores are its votes gathered along those paths (:func:`point_scores`);
  a grid of settings is one ``vmap`` over settings (chunked with ``lax.map(batch_size=...)`` to
  bound memory) of a ``vmap`` over folds (:func:`grid_errors`).

**Unresolved votes count as ties.** A point's prediction is *resolved* when its top class score
beats every other by more than :data:`RESOLUTION_ULPS` units in the last place of the scores'
sum; otherwise it hinges on weights the float dtype cannot hold (a posterior with all but an ulp
of its mass on a root of equal class counts) and ``scoring="accuracy"`` charges it the expected
error of a random pick among the classes tied at the top (:func:`point_losses`).

**Ties go to the interior of the tied region, then to the simpler model.** Product grids are
laid out simplest first: each parameter has a direction (``-1``: smaller values are simpler,
``+1``: larger values are simpler), its values are ordered simplest first, and the first
parameter varies slowest. Among the settings of least validation loss (summed over the folds),
the selected one is the farthest, in grid steps (Chebyshev distance), from every setting of
higher loss and from the grid's edge (:func:`interior_best`); among those equally deep, the
first, i.e. the simplest first parameter, then the simplest second one. For the PAC-Bayes tree
(:data:`PACBAYES_DIRECTIONS`): smaller λ1 (training errors weigh less, shallower prunings win) and
larger λ2 (the concentration term Σ sqrt(N_A) penalises splitting) are simpler. :func:`tune`
then refits on all the points and skips a selected setting whose refit is degenerate: it
leaves most training points unresolved (:func:`refit_unresolved`), or it predicts one class for
every training point although the CV error beat the majority class (:func:`refit_outcome`);
the next tied setting is taken, else the least CV loss among the settings that are not
(:func:`least_error_passing`). The PAC-Bayes tree's compiled fit does the same on the host
after the fit (:func:`jaxtree.fitting.skip_collapsed_refit`). docs/theory/selection.md has
the measurements.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxtree import prune, shapes
from jaxtree.layout import CompleteLayout, pad_complete, root_path_sum
from jaxtree.pacbayes import node_votes, pacbayes_authors_log_weights, pacbayes_log_weights
from jaxtree.stats import NodeStats, node_stats, stats_from_paths
from jaxtree.tree import Tree, route

Array = jax.Array

#: The paper's first-stage grid: 10 values equally spaced in log from 2^-8 to 2^6 (docs/theory/protocol.md).
LOG_GRID = 2.0 ** np.linspace(-8, 6, 10)
#: Size of the paper's second-stage linear grid between half and twice the best value.
LINEAR_GRID_SIZE = 10
#: Tie-breaking directions of the PAC-Bayes λ's (see the module docstring).
PACBAYES_DIRECTIONS = (("lam1", -1), ("lam2", +1))
#: The same with the prior's leaf cost as a third parameter (a larger cost: fewer leaves).
PACBAYES3_DIRECTIONS = PACBAYES_DIRECTIONS + (("leaf_cost", +1),)
#: Selection criteria, by scikit-learn's scorer names (module docstring).
SCORINGS = ("accuracy", "neg_log_loss", "neg_brier_score")
#: A vote is resolved when its top score beats the others by more than this many float ulps of
#: the scores' sum (module docstring).
RESOLUTION_ULPS = 16
#: :func:`tune` skips a tied setting whose refit leaves more than this share of the training
#: points unresolved.
MAX_REFIT_UNRESOLVED = 0.5
# Bytes of intermediates one (setting, fold) may use, per node and class, and the budget that
# sets how many settings are evaluated at once.
_BYTES_PER_ENTRY = 24
_GRID_MEMORY_BUDGET = 2 ** 29


# ---------------------------------------------------------------------------------------------
# Votes functions
def pacbayes_votes(tree: Tree, stats: NodeStats, params: dict):
    """Votes of the PAC-Bayes tree (Nguyen & Kpotufe 2018), practical potentials:
    ``params = {"lam1": λ1, "lam2": λ2}`` and optionally ``"leaf_cost"`` (the prior's cost of a
    leaf, 1 by default). The paper's ``(w_Q(A), l(A))``, each ``[nodes]``, i.e.
    ``w_Q(A)·onehot(l(A))``; with ``params["smoothing"] = α`` too, the posterior predictive
    ``w_Q(A)·p̂_α(· | A)`` ``[nodes, L]`` (:func:`jaxtree.pacbayes.node_votes`)."""
    log_w = pacbayes_log_weights(tree, stats, params["lam1"], params["lam2"],
                                 params.get("leaf_cost", 1.0))
    return node_votes(tree, stats, jnp.exp(log_w), params.get("smoothing"))


def pacbayes_authors_votes(tree: Tree, stats: NodeStats, params: dict):
    """Votes of the PAC-Bayes tree with the authors' potentials
    (:func:`jaxtree.pacbayes_authors_potentials`): ``params = {"lam1": λ_err, "lam2": λ_pen}``
    (and ``"smoothing"`` as in :func:`pacbayes_votes`)."""
    log_w = pacbayes_authors_log_weights(tree, stats, params["lam1"], params["lam2"])
    return node_votes(tree, stats, jnp.exp(log_w), params.get("smoothing"))


def point_scores(votes, path: Array, on_path: Array, num_classes: int) -> Array:
    """``[m, L]`` class scores of routed points: the sums of the node votes over each point's
    root-to-leaf path (``path``, ``on_path`` ``[m, levels]`` from :func:`jaxtree.route`).

    ``votes`` is a ``[nodes, L]`` array, or a pair ``(weight [nodes], label [nodes])`` meaning
    ``weight(A)·onehot(label(A))`` (scattered without forming the ``[nodes, L]`` array: about
    3× faster for 26 classes).
    """
    if isinstance(votes, tuple):
        weight, label = votes
        rows = jnp.arange(path.shape[0])[:, None]
        scores = jnp.zeros((path.shape[0], num_classes), weight.dtype)
        return scores.at[rows, label[path]].add(jnp.where(on_path, weight[path], 0))
    return jnp.einsum("mk,mkl->ml", on_path.astype(votes.dtype), votes[path])


# ---------------------------------------------------------------------------------------------
# Folds
@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["train", "path", "on_path", "label", "weight", "tree"],
                   meta_fields=[])
@dataclasses.dataclass(frozen=True)
class Folds:
    """The k folds of a sample on a tree T0 (leading axis k on every array; ``m`` = the largest
    validation part, smaller ones padded with weight 0).

    train:   :class:`NodeStats` of each fold's training part, ``counts [k, nodes, L]``.
    path, on_path: ``[k, m, levels]`` the routed validation points (:func:`jaxtree.route`).
    label:   ``[k, m]`` int, their labels.
    weight:  ``[k, m]`` float, their weights (0 for padding).
    tree:    None (every fold on the one T0 passed beside the folds) or the folds' own T0s.

    With ``tree`` set, fold f uses its own T0, grown on its training part, padded to one shape
    and stacked with the others (leading axis k; :func:`prepare_fold_trees`).
    """

    train: NodeStats
    path: Array
    on_path: Array
    label: Array
    weight: Array
    tree: Optional[Tree] = None


def over_folds(fn: Callable, tree: Tree, folds: Folds):
    """``vmap`` of ``fn(tree, train, path, on_path, label, weight)`` over the folds, each on its
    own T0 when ``folds.tree`` holds them, else all on ``tree``."""
    trees, axis = (tree, None) if folds.tree is None else (folds.tree, 0)
    return jax.vmap(fn, in_axes=(axis, 0, 0, 0, 0, 0))(
        trees, folds.train, folds.path, folds.on_path, folds.label, folds.weight)


def fold_masks(n: int, folds: int = 2, seed: int = 0) -> np.ndarray:
    """``[folds, n]`` bool: True where a point is in fold f's *training* part.

    Points are shuffled with ``seed`` and dealt round-robin, so validation parts differ in size
    by at most one and every point is validated exactly once.

    Example:
        >>> import jaxtree
        >>> jaxtree.fold_masks(8, folds=2, seed=0).astype(int)
        array([[1, 0, 0, 0, 1, 0, 1, 1],
               [0, 1, 1, 1, 0, 1, 0, 0]])
    """
    if folds < 2 or folds > n:
        raise ValueError(f"folds must be between 2 and the number of samples ({n}); got {folds}")
    fold_of = np.empty(n, np.int64)
    fold_of[np.random.default_rng(seed).permutation(n)] = np.arange(n) % folds
    return fold_of[None, :] != np.arange(folds)[:, None]


def split_masks(cv, X, y, classifier: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(in_train, in_valid)`` ``[k, n]`` bool: the k splits that ``cv`` — a scikit-learn
    splitter or an iterable of ``(train, test)`` index arrays, as ``GridSearchCV`` takes — gives
    on the rows of ``X`` ``[n, D]``, ``y`` ``[n]`` (:func:`sklearn.model_selection.check_cv`)."""
    from sklearn.model_selection import check_cv
    splits = list(check_cv(cv, y, classifier=classifier).split(X, y))
    if not splits:
        raise ValueError("cv gave no (train, test) split")
    in_train, in_valid = (np.zeros((len(splits), len(y)), bool) for _ in range(2))
    for f, (train, test) in enumerate(splits):
        in_train[f, train] = in_valid[f, test] = True
    return in_train, in_valid


def small_sample_folds(n: int, folds: int, per_fold_trees: bool) -> tuple[int, bool]:
    """``(folds, per_fold_trees)`` that a sample of ``n >= 2`` points can be cross-validated
    with, warning when they differ from the request: at most ``n`` folds (leave-one-out), and
    for trees grown per fold, every fold's training part of at least 2 points (a tree needs
    2), by more folds if some count gives it (``n = 3``: 3 folds), else one T0 of all the points
    shared by the folds (``n = 2``)."""
    if folds < 2:
        raise ValueError(f"cv must be at least 2 folds; got {folds}")
    if n < 2:
        raise ValueError(f"cross-validation needs at least 2 samples; got {n}")
    usable, shared = min(folds, n), False
    if per_fold_trees:
        grows = [k for k in range(usable, n + 1) if n - -(-n // k) >= 2]
        usable, shared = (grows[0], False) if grows else (usable, True)
    if usable != folds or shared:
        import warnings
        warnings.warn(f"{n} samples: cross-validating with {usable} folds"
                      + (" on one T0 shared by the folds" if shared else "")
                      + f" (asked: {folds} folds)", UserWarning, stacklevel=3)
    return usable, per_fold_trees and not shared


def prepare_folds(tree: Tree, X: Array, y: Array, num_classes: int, train_masks,
                  sample_weight: Optional[Array] = None, valid_size: Optional[int] = None
                  ) -> Folds:
    """Route ``X`` ``[n, D]`` once and compute every fold's statistics (one ``vmap``).

    The sample is padded to a shared size (:func:`jaxtree.shapes.sample_size`) with weight-0
    rows that sit in every training part, so that problems of nearby sizes share one
    compilation; the statistics and the validation errors are those of the sample itself.

    Args:
      tree: T0 (built on all of ``X``).
      X, y: ``[n, D]`` points, ``[n]`` int labels.
      num_classes: L.
      train_masks: ``[k, n]`` bool (:func:`fold_masks`); the validation part is the complement.
      sample_weight: optional ``[n]`` weights (0 for padding).
      valid_size: ``m``, the padded size of the validation parts (default:
        :func:`validation_slots`); give one value to problems of one padded shape to share
        their compilations.

    Returns:
      :class:`Folds`: ``train`` :class:`jaxtree.NodeStats` with ``counts [k, nodes, L]``,
      ``path`` / ``on_path`` ``[k, m, levels]`` int32 / bool, ``label [k, m]`` int32 and
      ``weight [k, m]`` float of the validation points.

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> from jaxtree.select import pacbayes_votes
        >>> X = np.arange(8.0)[:, None]
        >>> y = np.array([0, 0, 1, 0, 1, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> folds = jaxtree.prepare_folds(tree, X, y, 2, jaxtree.fold_masks(8, folds=2))
        >>> folds.train.counts.shape
        (2, 7, 2)
        >>> print(np.asarray(folds.weight).sum(axis=1))
        [4. 4.]
    """
    masks = np.asarray(train_masks, bool)
    n = np.shape(X)[0]
    if masks.ndim != 2 or masks.shape[1] != n:
        raise ValueError(f"train_masks must be [folds, n] = [k, {n}]; got shape {masks.shape}")
    size = shapes.sample_size(tree, n)
    X, y, weight = shapes.pad_sample(X, y, sample_weight, size)
    masks = shapes.pad_fold_masks(masks, size)
    largest = int((~masks).sum(axis=-1).max())
    if valid_size is not None and valid_size < largest:
        raise ValueError(f"valid_size={valid_size} is smaller than the largest validation part "
                         f"({largest})")
    return _prepare_folds(tree, X, y, num_classes, masks, weight,
                          valid_size=validation_slots(masks) if valid_size is None
                          else int(valid_size))


def validation_slots(train_masks) -> int:
    """``m``, the validation slots per fold for ``[..., k, n]`` fold masks (``n`` already padded):
    ``ceil(n / k)`` (:func:`jaxtree.shapes.validation_size`, a function of the shape alone) when
    every validation part fits, else the largest part rounded up by :func:`jaxtree.shapes.padded`."""
    masks = np.asarray(train_masks, bool)
    largest = int((~masks).sum(axis=-1).max())
    slots = shapes.validation_size(masks.shape[-1], masks.shape[-2])
    return slots if largest <= slots else shapes.padded(largest)


@functools.partial(jax.jit, static_argnames=("num_classes", "valid_size"))
def _prepare_folds(tree, X, y, num_classes, train_masks, sample_weight, valid_size):
    path, on_path = route(tree, X)
    dtype = tree.threshold.dtype
    weight = jnp.ones(y.shape[0], dtype) if sample_weight is None else sample_weight.astype(dtype)

    def one_fold(mask):
        train = stats_from_paths(tree, path, on_path, y, num_classes, weight * mask)
        index = jnp.nonzero(~mask, size=valid_size, fill_value=0)[0]
        real = jnp.arange(valid_size) < jnp.sum(~mask)
        return (train, path[index], on_path[index], y[index],
                jnp.where(real, weight[index], 0).astype(dtype))

    return Folds(*jax.vmap(one_fold)(jnp.asarray(train_masks, bool)))


def stack_trees(trees) -> Tree:
    """Pad trees of one layout kind and one feature count to one shape (the largest) and stack
    them (leading axis): complete layouts to the deepest (:func:`jaxtree.layout.pad_complete`),
    compact ones to the most levels and the widest level (:func:`jaxtree.compact.pad_compact`).
    Padding slots are not internal, so every result on a tree's own nodes is unchanged."""
    from jaxtree.compact import CompactLayout, pad_compact
    kinds = {type(t.layout) for t in trees}
    if len(kinds) != 1 or len({t.num_features for t in trees}) != 1:
        raise ValueError("stack_trees needs trees of one layout kind and one feature count; "
                         f"got layouts {sorted(k.__name__ for k in kinds)}")
    if kinds == {CompactLayout}:
        levels = max(t.num_levels for t in trees)
        width = max(t.width for t in trees)
        padded = [pad_compact(t, levels, width) for t in trees]
    else:
        depth = max(t.depth for t in trees)
        padded = [pad_complete(t, depth, t.num_features) for t in trees]
    # stacked on the host: jnp.stack would compile a program per field at a first fit
    return jax.tree.map(lambda *a: np.stack(a), *padded)


def prepare_fold_trees(build: Callable, X, y, num_classes: int, train_masks,
                       valid_size: Optional[int] = None) -> Folds:
    """Folds whose T0 is grown on each fold's training part only (for a label-aware T0: one grown
    on all the points has seen the validation labels, and CV then rewards trusting its deep
    leaves).

    Args:
      build: ``build(X_part, y_part) -> Tree``, T0's builder (NumPy in, outside jit).
      X, y: ``[n, D]`` points and ``[n]`` int labels (NumPy).
      num_classes: L.
      train_masks: ``[k, n]`` bool (:func:`fold_masks`).
      valid_size: as in :func:`prepare_folds`.

    Returns:
      :class:`Folds` with ``tree`` the k trees padded to one shape (each to its
      :func:`jaxtree.shapes.pad_tree` shape, then to the largest, :func:`stack_trees`): a grid
      over them is still one ``vmap`` over (setting, fold). The sample is padded as in
      :func:`prepare_folds` (weight-0 rows in every training part).
    """
    masks = np.asarray(train_masks, bool)
    X, y = np.asarray(X), np.asarray(y)
    trees = stack_trees([shapes.pad_tree(build(X[mask], y[mask]), int(mask.sum()))
                         for mask in masks])
    largest = int((~masks).sum(axis=-1).max())
    if valid_size is not None and valid_size < largest:
        raise ValueError(f"valid_size={valid_size} is smaller than the largest validation part "
                         f"({largest})")
    X, y, weight = shapes.pad_sample(X, y, None, shapes.sample_size(trees, len(y)))
    masks = shapes.pad_fold_masks(masks, len(y))
    size = validation_slots(masks) if valid_size is None else int(valid_size)
    return _prepare_fold_trees(trees, jnp.asarray(X, trees.threshold.dtype), jnp.asarray(y),
                               jnp.asarray(masks), weight.astype(trees.threshold.dtype),
                               num_classes, size)


@functools.partial(jax.jit, static_argnames=("num_classes", "valid_size"))
def _prepare_fold_trees(trees, X, y, masks, weight, num_classes, valid_size):
    def one_fold(tree, mask):
        folds = _prepare_folds(tree, X, y, num_classes, mask[None], weight, valid_size)
        return jax.tree.map(lambda a: a[0], folds)

    folds = jax.vmap(one_fold)(trees, masks)
    return dataclasses.replace(folds, tree=trees)


# ---------------------------------------------------------------------------------------------
# Grid search
def check_scoring(scoring) -> None:
    """Raise a ValueError unless ``scoring`` is one of :data:`SCORINGS`."""
    if scoring not in SCORINGS:
        raise ValueError(f"scoring must be one of {SCORINGS}; got {scoring!r}")


def point_losses(scores: Array, label: Array, scoring: str = "accuracy") -> Array:
    """``[m]`` loss of each point under ``scoring`` (module docstring): the 0-1 error of the
    argmax (a point whose top classes are tied within float resolution, :func:`tied_at_top`,
    pays ``1 − 1[y tied]/(number tied)``, the expected error of a random pick among them),
    ``−log p_y`` or the Brier score of ``p``, the scores ``[m, L]`` normalised to sum to 1.
    Probabilities are clipped to ``[eps, 1]`` (``eps`` of the dtype) in the log-loss, as
    scikit-learn does, so a hard vote's 0 costs ``−log eps``, not infinity."""
    if scoring == "accuracy":
        tied = tied_at_top(scores)
        right = jnp.take_along_axis(tied, label[:, None], axis=1)[:, 0]
        return 1 - right / tied.sum(axis=1).astype(scores.dtype)
    proba = scores / jnp.maximum(scores.sum(axis=1, keepdims=True), jnp.finfo(scores.dtype).tiny)
    if scoring == "neg_log_loss":
        right = jnp.take_along_axis(proba, label[:, None], axis=1)[:, 0]
        return -jnp.log(jnp.clip(right, jnp.finfo(scores.dtype).eps, 1.0))
    if scoring == "neg_brier_score":
        onehot = jax.nn.one_hot(label, scores.shape[1], dtype=scores.dtype)
        scale = 0.5 if scores.shape[1] == 2 else 1.0
        return scale * jnp.sum((proba - onehot) ** 2, axis=1)
    raise ValueError(f"scoring must be one of {SCORINGS}; got {scoring!r}")


def tied_at_top(scores: Array) -> Array:
    """``[m, L]`` bool: the classes whose score is within :data:`RESOLUTION_ULPS` float ulps of
    the scores' sum of each point's top score ``scores`` ``[m, L]`` (the top one included): more
    than one where the argmax hinges on weights below the dtype's resolution."""
    eps = jnp.finfo(scores.dtype).eps
    top = scores.max(axis=1, keepdims=True)
    tol = RESOLUTION_ULPS * eps * jnp.abs(scores).sum(axis=1, keepdims=True)
    return scores >= top - tol


def fold_errors(tree: Tree, folds: Folds, votes_fn: Callable, params: dict,
                scoring: str = "accuracy") -> Array:
    """``[k]`` validation losses of one setting ``params`` (a dict of scalars), summed (weighted)
    over each fold's validation points: error counts for ``scoring="accuracy"``, else the
    summed log-losses or Brier scores (:func:`point_losses`)."""

    def one_fold(tree, train, path, on_path, label, weight):
        scores = routed_scores(tree, votes_fn(tree, train, params), path, on_path,
                               train.num_classes)
        return jnp.sum(weight * point_losses(scores, label, scoring))

    return over_folds(one_fold, tree, folds)


def routed_scores(tree: Tree, votes, path: Array, on_path: Array, num_classes: int) -> Array:
    """:func:`point_scores` by the cheaper of two routes, chosen on the static shapes: where
    T0 has fewer slots than the points have path entries (a CART T0: a few thousand slots, a
    validation part of thousands of points × 20–30 levels), each node's score summed along its
    root path in one top-down pass over T0 and read at each point's leaf; else the sums along
    each point's path. The same sums in another order (equal up to float rounding). Warm
    3,000-row CART fits (8,192 padded rows, T0 of ~5,500 slots and 27 levels): the CV grid and
    weights of 7-class wine took 0.14 s instead of 0.28–0.33 s, of spam 0.10 s instead of
    0.16 s."""
    if tree.num_nodes >= path.size:
        return point_scores(votes, path, on_path, num_classes)
    if isinstance(votes, tuple):
        weight, label = votes
        votes = weight[:, None] * jax.nn.one_hot(label, num_classes, dtype=weight.dtype)
    return root_path_sum(tree.layout, votes)[path[:, -1]]   # a path ends repeating its leaf


@functools.partial(jax.jit, static_argnames=("votes_fn", "batch_size", "scoring"))
def grid_errors(tree: Tree, folds: Folds, votes_fn: Callable, grid: dict,
                batch_size: Optional[int] = None, scoring: str = "accuracy") -> Array:
    """``[G, k]`` validation error counts (summed losses for another ``scoring``,
    :func:`fold_errors`) of every setting of ``grid`` (dict of ``[G]`` arrays, and of scalars
    that every setting shares: :func:`shared_settings`).

    One batched computation: a ``vmap`` over settings (in equal chunks of at most
    ``batch_size``; None picks a size that keeps intermediates under ~0.5 GiB) of a ``vmap``
    over folds. What depends on the shared values alone is computed once per fold, not per
    setting (the PAC-Bayes votes' smoothed node frequencies: the grid of a warm 7-class KD fit
    on 3,000 rows took 0.60 s instead of 1.04–1.25 s). The chunks are made equal (``G`` split
    into ``c`` chunks of ``ceil(G / c)``, the last one padded with copies of the last setting)
    so that the chunk is compiled once: ``lax.map`` compiles a remainder chunk as a second copy
    of the whole computation.

    Args:
      tree, folds: T0 and :func:`prepare_folds` output.
      votes_fn: the method (module docstring), e.g. :func:`pacbayes_votes`.
      grid: ``{name: [G]}`` float settings of ``votes_fn``'s parameters (``{name: scalar}``
        for one value shared by every setting).
      batch_size: settings evaluated at once.

    Returns:
      ``[G, k]`` float error counts (weighted by the validation weights).

    Example:
        Three settings of λ1 (λ2 = 1) on two folds of four validation points:

        >>> import numpy as np
        >>> import jaxtree
        >>> from jaxtree.select import pacbayes_votes
        >>> X = np.arange(8.0)[:, None]
        >>> y = np.array([0, 0, 1, 0, 1, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> folds = jaxtree.prepare_folds(tree, X, y, 2, jaxtree.fold_masks(8, folds=2))
        >>> grid = {"lam1": np.array([0.1, 1.0, 10.0]), "lam2": np.ones(3)}
        >>> print(np.asarray(jaxtree.grid_errors(tree, folds, pacbayes_votes, grid)))
        [[2. 3.]
         [1. 0.]
         [1. 0.]]
    """
    grid_size(grid)                       # one length G for every [G] entry, or an error
    varying, shared = shared_settings(grid)
    if batch_size is None:
        k, nodes, classes = folds.train.counts.shape
        batch_size = settings_per_batch(k * (nodes + folds.path.size // k) * classes)
    return map_in_equal_chunks(
        lambda p: fold_errors(tree, folds, votes_fn, {**shared, **p}, scoring), varying,
        batch_size)


def settings_per_batch(entries_per_setting: int) -> int:
    """How many settings of a grid to evaluate at once so that their intermediates stay within
    ~0.5 GiB, for a setting that touches ``entries_per_setting`` (node, fold, class) entries."""
    return max(1, _GRID_MEMORY_BUDGET // (entries_per_setting * _BYTES_PER_ENTRY))


def map_in_equal_chunks(fn: Callable, xs, batch_size: int):
    """``jax.lax.map(fn, xs, batch_size=...)`` over the leading axis of the pytree ``xs`` in
    equal chunks of at most ``batch_size`` (``vmap`` inside a chunk): the items are padded with
    copies of the last one to a whole number of chunks, so that one chunk is compiled (``lax.map``
    compiles a remainder chunk as a second copy), and the padding's results are dropped."""
    size = jax.tree.leaves(xs)[0].shape[0]
    chunks = -(-size // min(batch_size, size))
    batch_size = -(-size // chunks)
    extra = chunks * batch_size - size
    padded = jax.tree.map(lambda v: jnp.concatenate([v, jnp.repeat(v[-1:], extra, axis=0)]), xs)
    return jax.tree.map(lambda out: out[:size], jax.lax.map(fn, padded, batch_size=batch_size))


def grid_size(grid: dict) -> int:
    """``G``, the settings of ``grid`` (:func:`grid_errors`): the length of its ``[G]`` entries."""
    sizes = {np.shape(v)[0] for v in jax.tree.leaves(grid) if np.ndim(v) == 1}
    if len(sizes) != 1:
        raise ValueError(f"a grid needs [G] entries of one length G (and scalars shared by every "
                         f"setting); got entries of shapes {[np.shape(v) for v in grid.values()]}")
    return sizes.pop()


def shared_settings(grid: dict) -> tuple[dict, dict]:
    """``(varying, shared)``: the ``[G]`` entries of ``grid`` and its scalars, the values that
    every setting shares (:func:`paper_search`'s ``fixed``). A ``vmap`` over the settings of
    ``varying`` leaves what depends on ``shared`` alone unbatched."""
    varying = {k: v for k, v in grid.items() if np.ndim(v) == 1}
    return varying, {k: v for k, v in grid.items() if np.ndim(v) != 1}


def srm_grid_errors(tree: Tree, folds: Folds, votes_fn: Callable, grid: dict,
                    batch_size: Optional[int] = None, scoring: str = "accuracy", *,
                    max_size: int) -> Array:
    """:func:`grid_errors` of min-size pruning with SRM (``votes_fn``
    :func:`jaxtree.prune.min_size_srm_votes`; ``grid`` of ``"c"``, with ``"delta"`` and
    ``"log_num_tests"`` when given), without a grid of prunings: a setting only chooses a size,
    so each fold's table of fewest training errors per size is computed once, its validation
    errors carried along (:func:`jaxtree.prune.min_error_per_size`), and a setting's errors are
    read off at the size SRM picks (:func:`jaxtree.prune.srm_holdout_errors`). The tables are
    computed fold by fold by the program a final fit runs, so a tuned fit compiles the
    knapsack once per tree shape, not a second time inside a ``vmap`` over settings.

    Same result as :func:`grid_errors` (``scoring="accuracy"`` only, the hard vote a pruning
    casts); ``votes_fn`` and ``batch_size`` are not used. ``max_size``: the tables' S, raised to
    cover every fold's tree (:func:`jaxtree.prune.size_cap`).

    Returns:
      ``[G, k]`` float error counts (weighted by the validation weights).
    """
    if scoring != "accuracy":
        raise ValueError(f"srm_grid_errors counts errors (scoring='accuracy'); got {scoring!r}")
    k = folds.label.shape[0]
    trees = [tree if folds.tree is None else jax.tree.map(lambda a, f=f: np.asarray(a)[f],
                                                          folds.tree) for f in range(k)]
    trains = [jax.tree.map(lambda a, f=f: np.asarray(a)[f], folds.train) for f in range(k)]
    max_size = max([max_size] + [prune.size_cap(t, fold_tree.internal, fold_tree.layout)
                                 for t, fold_tree in zip(trains, trees)])
    holdout = np.asarray(_validation_errors(tree, folds))
    tables = [prune.min_error_per_size(t.errors, t.total > 0, fold_tree.internal, max_size,
                                       holdout[f], fold_tree.layout)
              for f, (t, fold_tree) in enumerate(zip(trains, trees))]
    per_setting = lambda v: np.asarray(v).reshape(-1, 1)   # noqa: E731  [G] or scalar -> [., 1]
    log_h = (per_setting(grid["log_num_tests"]) if "log_num_tests" in grid else
             np.array([[float(prune.log_num_tests_of(fold_tree)) for fold_tree in trees]]))
    return prune.srm_holdout_errors(np.stack([t.errors for t in tables]),
                                    np.stack([t.holdout for t in tables]),
                                    np.stack([t.num_samples for t in trains]),
                                    per_setting(grid["c"]),
                                    per_setting(grid.get("delta", 0.05)),
                                    log_h)


@jax.jit
def _validation_errors(tree: Tree, folds: Folds) -> Array:
    """``[k, nodes]`` each fold's (weighted) validation errors at every node, the node predicting
    its label from the fold's training part."""
    def one_fold(tree, train, path, on_path, label, weight):
        valid = stats_from_paths(tree, path, on_path, label, train.num_classes, weight)
        return prune.holdout_errors(valid.counts, train.label)

    return over_folds(one_fold, tree, folds)


def product_grid(values: dict, directions) -> dict:
    """Product grid of per-parameter values, laid out simplest first (module docstring).

    Args:
      values: ``{name: [g_name]}`` values of each parameter, in increasing order.
      directions: ``((name, ±1), ...)``: -1 when smaller values are simpler, +1 when larger are.

    Returns:
      ``{name: [G]}`` with ``G = Π g_name``; the first parameter varies slowest.
    """
    axes = [jnp.asarray(values[name]) if d < 0 else jnp.asarray(values[name])[::-1]
            for name, d in directions]
    mesh = jnp.meshgrid(*axes, indexing="ij")
    return {name: m.ravel() for (name, _), m in zip(directions, mesh)}


def interior_best(total: Array, shape: tuple) -> Array:
    """Index of the selected setting (module docstring) of a product grid laid out by
    :func:`product_grid`: ``total`` ``[G]`` validation losses, ``shape`` the grid's per-parameter
    sizes (``G = prod(shape)``). Among the settings of least loss, the one farthest (Chebyshev
    distance in grid steps) from any setting of higher loss and from the grid's edge; the first
    of those. Pure jnp (``jit``/``vmap`` fine).

    Example:
        Seven settings of one parameter, the first five tied: the third is the deepest:

        >>> import numpy as np
        >>> from jaxtree.select import interior_best
        >>> int(interior_best(np.array([1.0, 1, 1, 1, 1, 2, 3]), (7,)))
        2
    """
    coords = np.stack(np.unravel_index(np.arange(int(np.prod(shape))), shape), axis=1)
    steps = np.abs(coords[:, None, :] - coords[None, :, :]).max(axis=2)    # [G, G]
    to_edge = np.minimum(coords, np.asarray(shape) - 1 - coords).min(axis=1) + 1
    best = jnp.min(total)
    tied = total <= best + 1e-6 * jnp.maximum(jnp.abs(best), 1.0)
    to_worse = jnp.min(jnp.where(tied[None, :], np.iinfo(np.int32).max, steps), axis=1)
    depth = jnp.where(tied, jnp.minimum(to_worse, to_edge), -1)
    return jnp.argmax(depth)


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["grids", "errors", "num_valid", "best_params", "best_error"],
                   meta_fields=[])
@dataclasses.dataclass(frozen=True)
class GridSearchResult:
    """Outcome of :func:`paper_search`.

    Attributes:
        grids: per stage, ``{name: [G]}`` settings (stage 0: log grid, stage 1: linear grid).
        errors: per stage, ``[G, k]`` validation error counts (for ``scoring="accuracy"``;
            else the summed log-losses or Brier scores, :func:`fold_errors`).
        num_valid: ``[k]`` validation points per fold.
        best_params: ``{name: scalar}`` the selected setting (from the last stage).
        best_error: scalar, its validation error rate (the mean validation loss for another
            scoring; all folds together).
    """

    grids: tuple
    errors: tuple
    num_valid: Array
    best_params: dict
    best_error: Array


def paper_search(tree: Tree, folds: Folds, votes_fn: Callable, directions=PACBAYES_DIRECTIONS,
                 fixed: Optional[dict] = None, base_grid=LOG_GRID,
                 linear_size: int = LINEAR_GRID_SIZE, batch_size: Optional[int] = None,
                 progress: Optional[Callable] = None,
                 errors_fn: Optional[Callable] = None,
                 scoring: str = "accuracy") -> GridSearchResult:
    """The paper's protocol (docs/theory/protocol.md) on prepared folds.

    Stage 0: the product of ``base_grid`` (default 2^linspace(-8, 6, 10)) over every parameter.
    Stage 1: per parameter, ``linear_size`` values from half to twice its stage-0 best; their
    product grid. The selected setting is stage 1's best, the least summed validation loss of
    ``scoring`` (module docstring; the paper's is ``"accuracy"``). Ties go to the simpler model
    (module docstring). Pure jnp: ``jit``/``vmap`` over problems work (pass ``progress=None``
    then).

    Args:
      tree, folds: T0 and :func:`prepare_folds` output.
      votes_fn: the method (module docstring).
      directions: ``((name, ±1), ...)`` tuned parameters and their tie-breaking directions.
      fixed: ``{name: value}`` parameters of ``votes_fn`` held fixed.
      progress: optional callback ``progress(number_of_settings_done)``, once per stage (after
        the search).
      errors_fn: replaces :func:`grid_errors` (same arguments and result); the distributed fit
        splits the settings over processes with it.
      scoring: the selection criterion, one of :data:`SCORINGS`.

    Returns:
      :class:`GridSearchResult`: both stages' grids and ``[G, k]`` errors, ``best_params``
      (``{name: scalar}``) and ``best_error`` (the validation error rate, a float scalar).

    Example:
        A two-value base grid and a two-value linear stage (the paper uses 10 and 10):

        >>> import numpy as np
        >>> import jaxtree
        >>> from jaxtree.select import pacbayes_votes
        >>> X = np.arange(8.0)[:, None]
        >>> y = np.array([0, 0, 1, 0, 1, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> folds = jaxtree.prepare_folds(tree, X, y, 2, jaxtree.fold_masks(8, folds=2))
        >>> result = jaxtree.paper_search(tree, folds, pacbayes_votes,
        ...                               base_grid=np.array([0.5, 4.0]), linear_size=2)
        >>> [errors.shape for errors in result.errors], float(result.best_error)
        ([(4, 2), (4, 2)], 0.125)
        >>> sorted(result.best_params)
        ['lam1', 'lam2']
    """
    check_scoring(scoring)
    directions, fixed = tuple(directions), fixed or {}
    grid0 = _first_grid(jnp.asarray(base_grid, folds.weight.dtype), directions, fixed)

    def errors_of(grid):
        return (grid_errors if errors_fn is None else errors_fn)(
            tree, folds, votes_fn, grid, batch_size, scoring=scoring)

    def next_grid(grid, errors):
        """Stage 1's grid from a stage's errors, in that stage's dtypes."""
        following = _second_grid(grid, errors, directions, linear_size, fixed)
        return jax.tree.map(lambda new, old: new.astype(old.dtype), following, grid)

    if errors_fn is None and len(base_grid) == linear_size:
        # both stages as two steps of one loop: one copy of the grid's passes in the program
        # (a first default fit compiled its second program in 2.6 s instead of 3.1 s)
        def stage(grid, _):
            errors = errors_of(grid)
            return next_grid(grid, errors), (grid, errors)

        _, (grids, errors) = jax.lax.scan(stage, grid0, length=2)
        grid1 = jax.tree.map(lambda values: values[1], grids)
        errors0, errors1 = errors[0], errors[1]
    else:                       # stages of different sizes, or a host-side errors_fn
        errors0 = errors_of(grid0)
        grid1 = next_grid(grid0, errors0)
        errors1 = errors_of(grid1)
    if progress is not None:
        progress(errors0.shape[0])
        progress(errors1.shape[0])
    return _search_result(grid0, errors0, grid1, errors1, folds.weight, directions)


# The steps between the two stages, each one program: run eagerly, their dozen small jnp ops
# compiled one by one (about a second of a first fit); inside a caller's jit they are inlined.
@functools.partial(jax.jit, static_argnames="directions")
def _first_grid(base, directions, fixed):
    """Stage 0: the product of ``base`` over every tuned parameter, with the fixed ones."""
    return _with_fixed(product_grid({name: base for name, _ in directions}, directions), fixed)


@functools.partial(jax.jit, static_argnames=("directions", "linear_size"))
def _second_grid(grid0, errors0, directions, linear_size, fixed):
    """Stage 1: ``linear_size`` values from half to twice stage 0's best, per parameter."""
    best0 = interior_best(errors0.sum(axis=1), grid_shape(grid0, directions))
    steps = jnp.linspace(0.5, 2.0, linear_size)
    return _with_fixed(product_grid({name: grid0[name][best0] * steps for name, _ in directions},
                                    directions), fixed)


@functools.partial(jax.jit, static_argnames="directions")
def _search_result(grid0, errors0, grid1, errors1, weight, directions) -> GridSearchResult:
    total1 = errors1.sum(axis=1)
    best1 = interior_best(total1, grid_shape(grid1, directions))
    num_valid = weight.sum(axis=1)
    names = [name for name, _ in directions]
    return GridSearchResult(grids=({name: grid0[name] for name in names},
                                   {name: grid1[name] for name in names}),
                            errors=(errors0, errors1), num_valid=num_valid,
                            best_params={name: grid1[name][best1] for name in names},
                            best_error=total1[best1] / num_valid.sum())


def refit_collapsed(tree: Tree, stats: NodeStats, node_proba, log_weights) -> bool:
    """Whether the posterior predictive of ``log_weights`` ``[nodes]`` (node frequencies
    ``node_proba`` ``[nodes, L]``) gives one class at every leaf of T0 that holds training
    points, i.e. to every training point, while those points (``stats``) have two classes or
    more. The check of :func:`jaxtree.fitting.skip_collapsed_refit`, run after every fit: the
    root-path sums of :func:`jaxtree.pacbayes.node_predictive` taken in NumPy on the host, level by
    level down T0, because that function jitted compiles in 0.18 s at each new tree shape (a
    process's first fit on 3,000 rows of spam) where this takes 0.9 ms."""
    internal, left = np.asarray(tree.internal), np.asarray(tree.left_child)
    depth = np.asarray(tree.node_depth)
    predictive = np.exp(np.asarray(log_weights, np.float64))[:, None] * np.asarray(node_proba)
    for level in range(int(depth[internal].max(initial=-1)) + 1):   # add each parent's sum
        parents = np.flatnonzero(internal & (depth == level))
        for children in (left[parents], left[parents] + 1):
            predictive[children] += predictive[parents]
    return _one_class(stats, predictive[_occupied_leaves(tree, stats)])


def refit_outcome(tree: Tree, stats: NodeStats, votes_fn: Callable, params: dict
                  ) -> tuple[float, bool]:
    """What the model of ``votes_fn`` at ``params`` on T0 with the training statistics
    ``stats`` (its refit) does to the training points: ``(unresolved, one_class)``, the share
    of their weight whose prediction is unresolved (:func:`tied_at_top`: near 1 for a posterior
    whose leaves weigh less than the float resolution beside a root of equal class counts),
    and whether it gives one class to every point while they hold two classes or more
    (:func:`refit_collapsed` for any votes function). The points of a leaf share its root-path
    votes (the engine's top-down pass, as :func:`jaxtree.pacbayes.node_predictive`), so the
    statistics suffice: no point is routed, and a distributed fit's global statistics give
    every process the same answer."""
    occupied = _occupied_leaves(tree, stats)
    scores = _node_scores(tree, stats, votes_fn, jax.tree.map(jnp.asarray, params))[occupied]
    unresolved = np.asarray(tied_at_top(scores)).sum(axis=1) > 1
    weight = np.asarray(stats.total)[occupied]
    return float(weight @ unresolved / weight.sum()), _one_class(stats, np.asarray(scores))


@functools.partial(jax.jit, static_argnames=("votes_fn",))
def _node_scores(tree, stats, votes_fn, params):
    """``[nodes, L]`` the class scores of the points that end at each node: the votes of
    ``votes_fn`` (a ``(weight, label)`` pair made one-hot) summed over its root path."""
    votes = votes_fn(tree, stats, params)
    if isinstance(votes, tuple):
        weight, label = votes
        votes = weight[:, None] * jax.nn.one_hot(label, stats.counts.shape[-1],
                                                 dtype=weight.dtype)
    return root_path_sum(tree.layout, votes)


def _occupied_leaves(tree, stats) -> np.ndarray:
    """``[nodes]`` bool: the leaves of T0 that hold training points."""
    return ~np.asarray(tree.internal) & (np.asarray(stats.total) > 0)


def _one_class(stats, leaf_scores) -> bool:
    """Whether leaves of scores ``leaf_scores`` ``[m, L]`` all predict one class while the
    training points (``stats``) hold two or more."""
    one_class = np.unique(leaf_scores.argmax(axis=1)).size == 1
    return bool(one_class and np.count_nonzero(np.asarray(stats.counts)[0]) > 1)


def grid_shape(grid: dict, directions) -> tuple:
    """The per-parameter sizes of a square product grid (:func:`product_grid`): ``(side,) *
    len(directions)`` for ``grid`` ``{name: [G]}`` of ``G = side ** len(directions)`` settings
    (``directions``: the searched parameters' ``(name, direction)`` pairs), the shape
    :func:`interior_best` reads the settings in. Raises ValueError for another size."""
    size = grid_size(grid)
    side = int(round(size ** (1 / len(directions))))
    if side ** len(directions) != size:
        raise ValueError(f"a grid of {size} settings is not a square product over "
                         f"{len(directions)} parameters")
    return (side,) * len(directions)


def holdout_masks(n: int, fraction: float = 0.35, seed: int = 0) -> np.ndarray:
    """``[1, n]`` bool: one train/validation split (True: training), ``round(fraction·n)``
    points validated, chosen with ``seed``; a one-fold :func:`prepare_folds` input."""
    held = int(round(fraction * n))
    if not 0 < held < n:
        raise ValueError(f"fraction must leave points on both sides of the split of {n} points; "
                         f"got {fraction}")
    mask = np.ones(n, bool)
    mask[np.random.default_rng(seed).permutation(n)[:held]] = False
    return mask[None, :]


#: The authors' public code: its log grid also holds 1.
AUTHORS_GRID = np.unique(np.r_[LOG_GRID, 1.0])


def sequential_search(tree: Tree, folds: Folds, votes_fn: Callable,
                      directions=PACBAYES_DIRECTIONS, start: Optional[dict] = None,
                      base_grid=AUTHORS_GRID, linear_size: int = LINEAR_GRID_SIZE,
                      batch_size: Optional[int] = None) -> GridSearchResult:
    """One parameter at a time, in the order of ``directions``, each by :func:`paper_search`
    (log grid, then linear values from half to twice the best) with the others held at
    ``start`` (default 1) or at their values already selected: the protocol of the authors'
    public code (λ_err first with λ_pen = 1, then λ_pen). ``grids``/``errors`` hold every stage
    (two per parameter) with all parameters' values."""
    current = {name: float((start or {}).get(name, 1.0)) for name, _ in directions}
    grids, errors, result = [], [], None
    for name, direction in directions:
        fixed = {k: v for k, v in current.items() if k != name}
        result = paper_search(tree, folds, votes_fn, ((name, direction),), fixed,
                              base_grid=base_grid, linear_size=linear_size,
                              batch_size=batch_size)
        current[name] = float(result.best_params[name])
        grids += [_with_fixed(g, fixed, broadcast=True) for g in result.grids]
        errors += list(result.errors)
    return GridSearchResult(grids=tuple(grids), errors=tuple(errors),
                            num_valid=result.num_valid,
                            best_params={k: jnp.asarray(v) for k, v in current.items()},
                            best_error=result.best_error)


# ---------------------------------------------------------------------------------------------
# Gradient tuning
def smoothed_loss(tree: Tree, folds: Folds, votes_fn: Callable, log_params: dict, tau,
                  eps: float = 1e-30, fixed: Optional[dict] = None, loss: str = "log"
                  ) -> tuple[Array, Array]:
    """Smoothed validation loss of ``params = exp(log_params)``, and the exact errors.

    With ``p(x) = softmax(log(s(x) + eps)/τ)`` (``s(x)`` the class scores of a point, which sum
    to 1 for a vote; τ = 1 gives ``p = s``, τ → 0 the hard vote):

    * ``loss="log"`` (default): ``Σ_x −log p_{y(x)}(x) / n_valid``, the tempered log-loss of the
      vote. Its gradient does not vanish where the vote is confidently wrong: a point whose label
      gets weight ``e^{-30}`` still pulls with a gradient of order 1.
    * ``loss="zero_one"``: ``Σ_x (1 − p_{y(x)}(x)) / n_valid``, which tends to the validation error
      as τ → 0 but is flat wherever the vote is nearly certain (every point's ``p_y`` near 0 or 1):
      from λ1 = λ2 = 1 on a dataset where the root's majority label wins, its gradient is 1e-29.

    ``eps`` keeps the log finite where a class gets no vote (1e-30: far below any weight a
    float32 vote resolves, so that small weights keep their gradient).

    Returns:
      ``(loss, losses)``: scalar loss and ``[k]`` exact validation losses summed per fold (error
      counts for ``"accuracy"``, :func:`fold_errors`).
    """
    if loss not in ("log", "zero_one"):
        raise ValueError(f"loss must be 'log' or 'zero_one'; got {loss!r}")
    params = {**(fixed or {}), **jax.tree.map(jnp.exp, log_params)}

    def one_fold(tree, train, path, on_path, label, weight):
        scores = routed_scores(tree, votes_fn(tree, train, params), path, on_path,
                               train.num_classes)
        log_p = jax.nn.log_softmax(jnp.log(scores + eps) / tau, axis=1)
        log_right = jnp.take_along_axis(log_p, label[:, None], axis=1)[:, 0]
        missed = -log_right if loss == "log" else 1 - jnp.exp(log_right)
        errors = jnp.sum(weight * (jnp.argmax(scores, axis=1) != label))
        return jnp.sum(weight * missed), errors

    missed, errors = over_folds(one_fold, tree, folds)
    return missed.sum() / folds.weight.sum(), errors


@dataclasses.dataclass(frozen=True)
class GradientResult:
    """Outcome of :func:`gradient_tune`.

    Attributes:
        best_params: ``{name: float}`` the setting of least validation 0-1 error met on the
            paths (ties: the earliest step, then the first start).
        best_error: its validation error rate.
        path: one dict per step and start: ``step``, ``start`` (index of the start),
            ``params`` ``{name: float}``, ``temperature``, ``loss`` (smoothed), ``error``
            (0-1 validation error rate).
        evaluations: number of loss evaluations (each one forward and one backward pass over
            all folds at one setting), the coarse grid of :func:`coarse_starts` included when
            it chose the starts.
    """

    best_params: dict
    best_error: float
    path: list
    evaluations: int


def temperature(step: int, steps: int, start: float, end: float) -> float:
    """The temperature schedule: geometric from ``start`` (step 0) to ``end`` (step ``steps-1``)."""
    return float(start * (end / start) ** (step / max(steps - 1, 1)))


#: The coarse grid that chooses the starting points of gradient tuning: 5 values per parameter
#: over the paper's range 2^-8 … 2^6 (one value every 3.5 octaves).
COARSE_GRID = 2.0 ** np.linspace(-8, 6, 5)


def coarse_starts(tree: Tree, folds: Folds, votes_fn: Callable, directions,
                  fixed: Optional[dict] = None, starts: int = 3, base_grid=COARSE_GRID
                  ) -> tuple[dict, int]:
    """The ``starts`` best settings of a coarse product grid (one vmapped :func:`grid_errors`):
    ``({name: [starts] array}, number of settings evaluated)``. Ties go to the simpler setting
    (the grid's order, :func:`product_grid`)."""
    values = {name: jnp.asarray(base_grid) for name, _ in directions}
    grid = product_grid(values, directions)
    errors = grid_errors(tree, folds, votes_fn, _with_fixed(grid, fixed)).sum(axis=1)
    order = np.argsort(np.asarray(errors), kind="stable")[:starts]
    return {name: np.asarray(grid[name])[order] for name, _ in directions}, int(errors.shape[0])


def gradient_tune(tree: Tree, folds: Folds, votes_fn: Callable, init: Optional[dict] = None,
                  steps: int = 60, learning_rate: float = 0.2, tau_start: float = 1.0,
                  tau_end: float = 0.05, patience: int = 20,
                  log_bounds=(np.log(2.0 ** -12), np.log(2.0 ** 10)), eps: float = 1e-30,
                  loss: str = "log", fixed: Optional[dict] = None, directions=None,
                  starts: int = 3, progress: Optional[Callable] = None) -> GradientResult:
    """Tune the parameters by Adam on the smoothed validation loss (:func:`smoothed_loss`), in
    log space (θ = log λ: a step changes λ by a factor, whatever its size), from one or several
    starting points at once.

    Each step evaluates the loss and its gradient at every start's θ over all folds (one ``vmap``
    over starts; the forward pass also gives the exact validation errors), then takes one Adam
    step per start; θ is clipped to ``log_bounds``. The temperature follows :func:`temperature`
    (geometric from ``tau_start`` to ``tau_end``): early steps see a smooth loss, late ones
    nearly the hard vote. Early stopping: after ``patience`` steps without a lower validation
    0-1 error at any start. The result is the point of least 0-1 error met.

    Args:
      init: ``{name: value > 0}`` one starting point, or ``{name: [S] values}`` S of them. None:
        the ``starts`` best points of a coarse grid (:func:`coarse_starts` over ``directions``,
        default the PAC-Bayes λ's); its evaluations are counted in the result.
      loss: ``"log"`` or ``"zero_one"`` (:func:`smoothed_loss`).
      fixed: ``{name: value}`` parameters of ``votes_fn`` held fixed.
      progress: optional callback ``progress(1)`` after each step.

    The other arguments: ``tree``, ``folds`` (:func:`prepare_folds`), ``votes_fn`` (module
    docstring), the number of ``steps``, Adam's ``learning_rate``, the temperatures, the
    ``patience``, ``log_bounds`` on θ and ``eps`` (the smoothing's floor).

    Returns:
      :class:`GradientResult` (``best_params``, ``best_error``, the ``path`` of the steps).

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> from jaxtree.select import pacbayes_votes
        >>> X = np.arange(8.0)[:, None]
        >>> y = np.array([0, 0, 1, 0, 1, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> folds = jaxtree.prepare_folds(tree, X, y, 2, jaxtree.fold_masks(8, folds=2))
        >>> result = jaxtree.gradient_tune(tree, folds, pacbayes_votes,
        ...                                init={"lam1": 1.0, "lam2": 1.0}, steps=5)
        >>> sorted(result.best_params), float(result.best_error), len(result.path)
        (['lam1', 'lam2'], 0.125, 5)
    """
    dtype = tree.threshold.dtype
    coarse = 0
    if init is None:
        init, coarse = coarse_starts(tree, folds, votes_fn,
                                     PACBAYES_DIRECTIONS if directions is None else directions,
                                     fixed, starts)
    theta = {name: jnp.log(jnp.atleast_1d(jnp.asarray(value, dtype)))
             for name, value in init.items()}
    num_starts = jax.tree.leaves(theta)[0].shape[0]
    opt_state = optax.adam(learning_rate).init(theta)
    lo, hi = log_bounds
    path, best, since_best = [], None, 0
    num_valid = float(folds.weight.sum())
    for step in range(steps):
        tau = temperature(step, steps, tau_start, tau_end)
        new_theta, opt_state, losses, errors = _adam_step(tree, folds, votes_fn, theta,
                                                          opt_state, learning_rate, tau, eps,
                                                          lo, hi, fixed or {}, loss)
        values = {k: np.exp(np.asarray(v, np.float64)) for k, v in theta.items()}
        improved = False
        for s in range(num_starts):
            record = {"step": step, "start": s,
                      "params": {k: float(v[s]) for k, v in values.items()},
                      "temperature": tau, "loss": float(losses[s]),
                      "error": float(np.sum(errors[s])) / num_valid}
            path.append(record)
            if best is None or record["error"] < best["error"]:
                best, improved = record, True
        if progress is not None:
            progress(1)
        since_best = 0 if improved else since_best + 1
        if since_best >= patience:
            break
        theta = new_theta
    return GradientResult(best_params=best["params"], best_error=best["error"], path=path,
                          evaluations=coarse + len(path))


@functools.partial(jax.jit, static_argnames=("votes_fn", "loss"))
def _adam_step(tree, folds, votes_fn, theta, opt_state, learning_rate, tau, eps, lo, hi, fixed,
               loss):
    def one_start(log_params):
        return jax.value_and_grad(smoothed_loss, argnums=3, has_aux=True)(
            tree, folds, votes_fn, log_params, tau, eps, fixed, loss)

    (losses, errors), grads = jax.vmap(one_start)(theta)
    updates, opt_state = optax.adam(learning_rate).update(grads, opt_state, theta)
    theta = jax.tree.map(lambda t: jnp.clip(t, lo, hi), optax.apply_updates(theta, updates))
    return theta, opt_state, losses, errors


# ---------------------------------------------------------------------------------------------
# One call for an estimator
def tune(tree: Tree, X, y, num_classes: int, votes_fn: Callable, directions, method="grid",
         folds: int = 2, seed: int = 0, fixed: Optional[dict] = None,
         init: Optional[dict] = None, errors_fn: Optional[Callable] = None,
         base_grid=LOG_GRID, scoring: str = "accuracy", stats: Optional[NodeStats] = None,
         **gradient_options) -> tuple[dict, dict]:
    """Select the parameters of a method on T0 by k-fold CV; shows a tqdm progress bar on a TTY.

    Args:
      tree: T0 built on all of ``X``; ``X`` ``[n, D]``, ``y`` ``[n]`` int labels.
      num_classes: L.
      votes_fn, directions, fixed: the method, its tuned parameters (:func:`paper_search`) and
        the parameters held fixed.
      method: ``"grid"`` (:func:`paper_search`) or ``"gradient"`` (:func:`gradient_tune`).
      folds, seed: the CV folds (:func:`fold_masks`); ``folds`` may also be prepared
        :class:`Folds` (e.g. :func:`jaxtree.distributed.prepare_folds`), then ``seed`` is not
        used, and ``X``, ``y`` only for the default ``stats`` (no check of the grid's choice
        when both are None).
      init: the starting point of ``"gradient"`` when it gives every tuned parameter; else
        gradient tuning starts from the best few points of a coarse grid
        (:func:`coarse_starts`).
      errors_fn: the grid's error function for ``"grid"`` (:func:`paper_search`).
      base_grid: the first-stage values of every tuned parameter for ``"grid"`` (default the
        paper's 2^linspace(-8, 6, 10)).
      scoring: the selection criterion, one of :data:`SCORINGS` (module docstring); ``"grid"`` only:
        gradient tuning descends the vote's log-loss and keeps the least 0-1 error.
      stats: the training statistics of the model refitted at the grid's choice, which checks
        it (module docstring): by default those of ``X``, ``y``; an estimator passes its own
        (sample weights, padding rows of weight 0, a distributed fit's global counts).
      gradient_options: passed to :func:`gradient_tune`.

    Returns:
      ``(best_params, cv_results)``: ``{name: float}`` and a scikit-learn-style dict of arrays,
      one entry per evaluated setting: ``params`` (list of dicts), ``param_<name>``,
      ``mean_test_score`` (over all folds' points: validation accuracy, or the negated mean
      log-loss / Brier score, as scikit-learn reports them), and for ``"grid"``
      ``stage``, ``split<f>_test_score``, ``std_test_score``, ``rank_test_score``; for
      ``"gradient"`` the path: ``step``, ``temperature``, ``smoothed_loss``.

    Example:
        The paper's protocol for the PAC-Bayes λ's (2 × 100 settings, 2-fold CV):

        >>> import numpy as np
        >>> import jaxtree
        >>> from jaxtree.select import pacbayes_votes
        >>> X = np.arange(8.0)[:, None]
        >>> y = np.array([0, 0, 1, 0, 1, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> from jaxtree.select import PACBAYES_DIRECTIONS
        >>> best, cv_results = jaxtree.tune(tree, X, y, 2, pacbayes_votes, PACBAYES_DIRECTIONS)
        >>> sorted(best), len(cv_results["params"]), float(max(cv_results["mean_test_score"]))
        (['lam1', 'lam2'], 200, 0.875)
    """
    import tqdm  # a progress bar only where a user waits

    check_scoring(scoring)
    if method == "gradient" and scoring != "accuracy":
        raise ValueError(f"scoring={scoring!r} selects on the grid (method='grid'); gradient "
                         f"tuning already descends the vote's log-loss")
    names = [name for name, _ in directions]
    data = folds if isinstance(folds, Folds) else prepare_folds(
        tree, X, y, num_classes, fold_masks(len(y), folds, seed))
    if stats is None and X is not None:
        stats = node_stats(tree, X, y, num_classes)
    if method == "grid":
        total = np.size(base_grid) ** len(names) + LINEAR_GRID_SIZE ** len(names)
        with tqdm.tqdm(total=total, desc="grid search (settings)", leave=False,
                       disable=None) as bar:
            result = paper_search(tree, data, votes_fn, tuple(directions), fixed,
                                  base_grid=base_grid, progress=bar.update,
                                  errors_fn=errors_fn, scoring=scoring)
        best = _resolved_choice(tree, stats, votes_fn, result, tuple(directions), fixed,
                                scoring)
        return {name: float(v) for name, v in best.items()}, _grid_results(result, names,
                                                                           scoring)
    if method == "gradient":
        # every tuned parameter given: start there; else the best few of a coarse grid
        start = ({name: init[name] for name in names}
                 if all(name in (init or {}) for name in names) else None)
        steps = gradient_options.get("steps", 60)
        with tqdm.tqdm(total=steps, desc="gradient tuning (steps)", leave=False,
                       disable=None) as bar:
            result = gradient_tune(tree, data, votes_fn, start, fixed=fixed,
                                   directions=tuple(directions), progress=bar.update,
                                   **gradient_options)
        best = _resolved_path_choice(tree, stats, votes_fn, result, fixed)
        return best, _gradient_results(result, names, scoring)
    raise ValueError(f"method must be 'grid' or 'gradient'; got {method!r}")


def refit_unresolved(tree: Tree, stats: NodeStats, votes_fn: Callable, params: dict) -> float:
    """The share of the training points (statistics ``stats``) whose prediction by the model
    refitted at ``params`` is unresolved (:func:`refit_outcome`)."""
    return refit_outcome(tree, stats, votes_fn, params)[0]


def least_error_passing(result: GridSearchResult, directions,
                        failing: Callable[[dict], np.ndarray]) -> Optional[tuple[float, dict]]:
    """The setting of least summed CV loss among both stages' settings of ``result`` that pass:
    ``failing(grid)`` gives ``[G]`` bool for a stage's ``grid`` ``{name: [G]}`` (True: skip the
    setting). The interior rule within a stage (:func:`interior_best`), stage 1 on a tie.
    Returns ``(summed loss, {name: value})``, or None when every setting fails."""
    best = (np.inf, None)
    for grid, errors in zip(result.grids, result.errors):
        total = np.where(failing(grid), np.inf, np.asarray(errors).sum(axis=1))
        index = int(interior_best(jnp.asarray(total), grid_shape(grid, directions)))
        if total[index] <= best[0]:
            best = (float(total[index]), {name: grid[name][index] for name, _ in directions})
    return best if np.isfinite(best[0]) else None


def _degenerate_refit(tree, stats, votes_fn, params, cv_beat_majority: bool) -> bool:
    """Whether the refit at ``params`` on ``stats`` leaves more than
    :data:`MAX_REFIT_UNRESOLVED` of the points unresolved or, when the CV beat voting the
    majority class (``cv_beat_majority``), gives one class to every point
    (:func:`refit_outcome`)."""
    unresolved, one_class = refit_outcome(tree, stats, votes_fn, params)
    return unresolved > MAX_REFIT_UNRESOLVED or (cv_beat_majority and one_class)


def beats_majority(stats: NodeStats, error_rate: float) -> bool:
    """Whether a CV error rate is below that of voting the majority class of the training
    statistics ``stats`` (read from the root's class counts)."""
    root = np.asarray(stats.counts[0], np.float64)
    return error_rate < 1 - root.max() / root.sum() - 1e-6


def _resolved_choice(tree, stats, votes_fn, result, directions, fixed, scoring) -> dict:
    """The selected setting of a grid search (module docstring), skipping one whose refit on
    the training statistics ``stats`` is degenerate (:func:`_degenerate_refit`; one class
    everywhere counts only for ``scoring="accuracy"`` and when the search's least CV error beat
    the majority vote). The settings of least stage-1 loss are tried first, deepest in their
    tied region first (:func:`interior_best`); if all are degenerate, the least CV loss among
    both stages' settings that are not (:func:`least_error_passing`); the search's own choice
    when none passes or ``stats`` is None."""
    if stats is None:
        return result.best_params
    grid, total = result.grids[-1], np.asarray(result.errors[-1]).sum(axis=1)
    cv_beat_majority = scoring == "accuracy" and beats_majority(
        stats, total.min() / float(np.sum(result.num_valid)))

    def degenerate(grid, index):
        params = {name: grid[name][index] for name, _ in directions}
        return _degenerate_refit(tree, stats, votes_fn, {**(fixed or {}), **params},
                                 cv_beat_majority)

    order = [int(np.asarray(interior_best(jnp.asarray(total), grid_shape(grid, directions))))]
    tied = np.flatnonzero(total <= total.min() + 1e-6 * max(abs(total.min()), 1.0))
    for index in order + [int(i) for i in tied if i != order[0]]:
        if not degenerate(grid, index):
            return {name: grid[name][index] for name, _ in directions}
    best = least_error_passing(result, directions, lambda grid: np.array(
        [degenerate(grid, i) for i in range(grid_size(grid))]))
    return result.best_params if best is None else best[1]


def _resolved_path_choice(tree, stats, votes_fn, result: GradientResult, fixed) -> dict:
    """Gradient tuning's choice, checked as the grid's (:func:`_resolved_choice`): the point of
    least validation 0-1 error on the paths (earliest step, then first start, on a tie) whose
    refit is not degenerate; the search's own choice when none passes or ``stats`` is None."""
    if stats is None:
        return result.best_params
    cv_beat_majority = beats_majority(stats, float(result.best_error))
    for point in sorted(result.path, key=lambda point: point["error"]):   # stable: path order
        if not _degenerate_refit(tree, stats, votes_fn, {**(fixed or {}), **point["params"]},
                                 cv_beat_majority):
            return point["params"]
    return result.best_params


def _score(mean_loss, scoring):
    """scikit-learn's score of a mean validation loss: accuracy, or the negated loss."""
    return 1 - mean_loss if scoring == "accuracy" else -mean_loss


def _grid_results(result: GridSearchResult, names, scoring) -> dict:
    grid = {name: np.concatenate([np.asarray(g[name]) for g in result.grids]) for name in names}
    errors = np.concatenate([np.asarray(e) for e in result.errors])          # [G, k]
    num_valid = np.asarray(result.num_valid)
    split = _score(errors / num_valid, scoring)
    mean = _score(errors.sum(axis=1) / num_valid.sum(), scoring)
    out = {"params": [{name: float(grid[name][i]) for name in names} for i in range(len(mean))],
           **{f"param_{name}": grid[name] for name in names},
           "stage": np.concatenate([np.full(len(e), i) for i, e in enumerate(result.errors)]),
           **{f"split{f}_test_score": split[:, f] for f in range(split.shape[1])},
           "mean_test_score": mean, "std_test_score": split.std(axis=1)}
    # rank 1 = best; equal scores share the smallest rank (as scikit-learn)
    out["rank_test_score"] = 1 + np.searchsorted(np.sort(-mean), -mean, side="left")
    return out


def _gradient_results(result: GradientResult, names, scoring) -> dict:
    path = result.path
    return {"params": [r["params"] for r in path],
            **{f"param_{name}": np.array([r["params"][name] for r in path]) for name in names},
            "step": np.array([r["step"] for r in path]),
            "start": np.array([r["start"] for r in path]),
            "temperature": np.array([r["temperature"] for r in path]),
            "smoothed_loss": np.array([r["loss"] for r in path]),
            "mean_test_score": _score(np.array([r["error"] for r in path]), scoring)}


# ---------------------------------------------------------------------------------------------
# Batches of problems
def stack_problems(trees, Xs, ys, weights=None):
    """Pad several problems to one shape and stack them (leading axis P).

    Trees (complete layout, same ``clip``) are padded to the deepest one: in the heap layout a
    node keeps its slot in a deeper layout, so padding only appends non-internal slots. Features
    are padded with zero columns (never split on), samples with weight-0 rows up to the bucketed
    size of the largest problem (:mod:`jaxtree.shapes`).

    Args:
      trees: P trees; Xs: P arrays ``[n_p, D_p]``; ys: P arrays ``[n_p]``;
      weights: optional P arrays ``[n_p]`` (default ones).

    Returns:
      ``(tree, X [P, n, D], y [P, n], weight [P, n])`` with ``tree`` a stacked :class:`Tree`
      (every array with a leading axis P); ``X`` and ``weight`` float, ``y`` int32.

    Example:
        A depth-2 tree on 8 points and a depth-1 tree on 6: the second problem gets two rows
        of weight 0:

        >>> import numpy as np
        >>> import jaxtree
        >>> from jaxtree.select import pacbayes_votes
        >>> X = np.arange(8.0)[:, None]
        >>> y = np.array([0, 0, 1, 0, 1, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> small = jaxtree.kd_tree(X[:6], max_depth=1)
        >>> trees, Xs, ys, weights = jaxtree.stack_problems([tree, small], [X, X[:6]], [y, y[:6]])
        >>> trees.internal.shape, Xs.shape, ys.shape
        ((2, 7), (2, 8, 1), (2, 8))
        >>> np.asarray(weights).astype(int).tolist()[1]
        [1, 1, 1, 1, 1, 1, 0, 0]
    """
    if not (len(trees) == len(Xs) == len(ys)) or not trees:
        raise ValueError("trees, Xs and ys must be non-empty and of the same length")
    if any(not isinstance(t.layout, CompleteLayout) for t in trees):
        raise ValueError("stack_problems pads complete layouts only")
    if len({t.clip for t in trees}) != 1:
        raise ValueError("all trees must be of the same kind (clip): stack KD or dyadic trees")
    weights = [np.ones(len(y)) for y in ys] if weights is None else weights
    depth = max(t.depth for t in trees)
    dims = max(np.shape(X)[1] for X in Xs)
    n = shapes.padded(max(len(y) for y in ys))
    padded = [pad_complete(t, depth, dims) for t in trees]
    tree = jax.tree.map(lambda *a: jnp.stack(a), *padded)
    X = jnp.stack([jnp.pad(jnp.asarray(X, tree.threshold.dtype),
                           ((0, n - len(X)), (0, dims - np.shape(X)[1]))) for X in Xs])
    y = jnp.stack([jnp.pad(jnp.asarray(v, jnp.int32), (0, n - len(v))) for v in ys])
    w = jnp.stack([jnp.pad(jnp.asarray(v, tree.threshold.dtype), (0, n - len(v)))
                   for v in weights])
    return tree, X, y, w


def batch_paper_search(tree: Tree, X: Array, y: Array, weight: Array, train_masks,
                       num_classes: int, votes_fn: Callable, directions=PACBAYES_DIRECTIONS
                       ) -> GridSearchResult:
    """:func:`paper_search` on P stacked problems (:func:`stack_problems`) in one vmapped call.

    Args:
      tree, X, y, weight: the stacked problems (:func:`stack_problems`).
      train_masks: ``[P, k, n]`` bool, each problem's folds (:func:`fold_masks`).
      num_classes: L. votes_fn, directions: as in :func:`paper_search`.

    Returns:
      :class:`GridSearchResult` whose every field has a leading axis P.

    Example:
        >>> import numpy as np
        >>> import jaxtree
        >>> from jaxtree.select import pacbayes_votes
        >>> X = np.arange(8.0)[:, None]
        >>> y = np.array([0, 0, 1, 0, 1, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> small = jaxtree.kd_tree(X[:6], max_depth=1)
        >>> problems = jaxtree.stack_problems([tree, small], [X, X[:6]], [y, y[:6]])
        >>> masks = np.stack([jaxtree.fold_masks(8, 2)] * 2)
        >>> result = jaxtree.batch_paper_search(*problems, masks, 2, pacbayes_votes)
        >>> print(np.asarray(result.best_error).round(3))
        [0.125 0.5  ]
    """
    masks = np.asarray(train_masks, bool)
    return _batch_paper_search(tree, X, y, weight, masks, num_classes, votes_fn,
                               tuple(directions), validation_slots(masks))


@functools.partial(jax.jit, static_argnames=("num_classes", "votes_fn", "directions",
                                             "valid_size"))
def _batch_paper_search(tree, X, y, weight, masks, num_classes, votes_fn, directions,
                        valid_size):
    def one(tree, X, y, weight, masks):
        folds = _prepare_folds(tree, X, y, num_classes, masks, weight, valid_size)
        return paper_search(tree, folds, votes_fn, directions)

    return jax.vmap(one)(tree, X, y, weight, masks)


@functools.partial(jax.jit, static_argnames=("num_classes", "votes_fn"))
def batch_fit_scores(tree: Tree, X: Array, y: Array, weight: Array, params: dict,
                     X_test: Array, num_classes: int, votes_fn: Callable) -> Array:
    """Fit P stacked problems at ``params`` (``{name: [P]}``) and score ``X_test`` ``[P, m, D]``.

    Returns ``[P, m, L]`` float class scores (those of fitting and voting one problem at a
    time). ``tree``, ``X``, ``y``, ``weight`` come from :func:`stack_problems`; ``votes_fn`` is
    the method (module docstring).

    Every problem is fitted with ``num_classes`` classes. A problem with fewer classes gets the
    same hard votes, but not the same posterior predictive (``params`` with ``"smoothing"``):
    the smoothed frequencies spread α over all L classes (:func:`jaxtree.class_frequencies`).
    Stack problems with one number of classes to reproduce their own fits.

    Example:
        The scores of the first two training points of each problem at λ1 = λ2 = 1:

        >>> import numpy as np
        >>> import jaxtree
        >>> from jaxtree.select import pacbayes_votes
        >>> X = np.arange(8.0)[:, None]
        >>> y = np.array([0, 0, 1, 0, 1, 1, 1, 1])
        >>> tree = jaxtree.kd_tree(X, max_depth=2)
        >>> small = jaxtree.kd_tree(X[:6], max_depth=1)
        >>> trees, Xs, ys, weights = jaxtree.stack_problems([tree, small], [X, X[:6]], [y, y[:6]])
        >>> params = {"lam1": np.ones(2), "lam2": np.ones(2)}
        >>> scores = jaxtree.batch_fit_scores(trees, Xs, ys, weights, params, Xs[:, :2], 2,
        ...                                   pacbayes_votes)
        >>> print(np.asarray(scores[:, 0]).round(3))
        [[0.532 0.468]
         [1.    0.   ]]
    """

    def one(tree, X, y, weight, params, X_test):
        path, on_path = route(tree, X)
        stats = stats_from_paths(tree, path, on_path, y, num_classes, weight)
        return point_scores(votes_fn(tree, stats, params), *route(tree, X_test), num_classes)

    return jax.vmap(one)(tree, X, y, weight, params, X_test)


# ---------------------------------------------------------------------------------------------
def _with_fixed(grid: dict, fixed: Optional[dict], broadcast: bool = False) -> dict:
    """``grid`` with the ``fixed`` parameters: scalars shared by every setting
    (:func:`shared_settings`), or ``[G]`` columns with ``broadcast``."""
    fixed = {k: jnp.asarray(v) for k, v in (fixed or {}).items()}
    if broadcast:
        fixed = {k: jnp.full(grid_size(grid), v) for k, v in fixed.items()}
    return {**fixed, **grid}
