"""Fitting on rows spread over processes, with JAX's multi-controller runtime.

One process per host (or several on one machine, for tests: :mod:`jaxtree.launch`), each holding
a block of the training rows; every process calls the same functions with its own block and ends
with the same model, the one that fitting all rows in one process gives::

    jax.distributed.initialize(coordinator_address, num_processes, process_id)  # every process
    model = jaxtree.PACBayesTreeClassifier(partition="kd", distributed=True).fit(X_block, y_block)
    model.predict_proba(X_test)          # the same on every process

(``jaxtree.distributed.fit(estimator, X_block, y_block)`` is the same fit with more options.)

What travels between processes is never rows, only per-node summaries, summed (or maxed) over
the processes by collectives (``psum`` / ``pmax`` / ``pmin`` in a ``jax.shard_map`` over one device
of each process: gloo on CPU, NCCL on GPUs, ICI on TPUs), wrapped as a reducer
(:class:`ProcessReducer`, :mod:`jaxtree.collective`):

* **T0**: a CART T0 (the fit's ``partition="cart"``, :func:`grow_cart_t0`) is grown by the
  one-process fit's builder, :func:`jaxtree.grow_tree`, as one jitted program over the rows of
  all processes (a row-sharded array; XLA's partitioner makes the per-level sums of class
  counts and histograms its only collectives), from bin edges that are exact order statistics
  over all rows. The host builders (:func:`kd_tree`, :func:`dyadic_tree`, :func:`cart_tree`, and
  the fit's KD and dyadic T0) grow level by level exactly as in one process
  (:func:`jaxtree.build.grow`): per level, node counts and class counts (purity)
  are summed; KD medians and the quartiles of ``split="spread"`` are exact order statistics from a
  radix select over summed digit histograms (:func:`jaxtree.collective.order_statistics`: for
  float32, 4 rounds of 256 digits while the nodes are few, up to 16 rounds of 4 digits when they
  are many); the KD scaling is a reproducible sum; dyadic bounds are a max and a min. CART grows
  from summed class histograms over quantile bins (``bins``; :func:`jaxtree.cart_tree` with the
  same ``bins`` is the one-process reference). Per level: ``O(nodes × classes)`` numbers, at most
  1024 counts per node and sought rank for a select (64 on wide levels),
  ``O(nodes × features × bins × classes)`` for CART.
* **node statistics** (:func:`node_stats`): local counts (in chunks), one sum.
* **tuning** (:func:`prepare_folds`): the folds are :func:`jaxtree.select.fold_masks` of all
  ``n`` rows restricted to each block (blocks in process order); each fold's training
  statistics are one sum, and its validation rows are summarised by their class counts at the
  T0-leaf they reach, also one sum. A validation row's vote depends only on its leaf, so the
  λ grid is evaluated on these ``(leaf, class)`` counts — the same errors as row by row, with
  no rows —, its settings split over the processes (:func:`split_grid_errors`: each process
  a share, one sum of the ``[settings, folds]`` errors), and every process selects the same λ's.
  Where the one-process fit grows T0 anew on each fold's training part (``cv_trees``,
  :func:`jaxtree.fitting.per_fold_trees`: CART and KD trees by default), so does this one
  (:func:`prepare_fold_trees`: the same builder over the fold's rows of every process; each
  fold's statistics and validation counts on its own tree).

Everything is identical to the one-process fit, bit for bit: order statistics are exact, counts
are integers (exact in float32 below 2^24 per node), and float sums are reproducible. The fit
reads each block through NumPy on the host (a ``numpy.memmap`` is fine); the device sees
bounded chunks (``chunk_size``) when counting.

A process whose peer dies gets :class:`CollectiveError` from the next collective (gloo reports
the closed connection at once); :mod:`jaxtree.launch` also bounds the whole run with a timeout.
Input errors found in one process are raised in all of them (no process is left waiting).

Example:
    Two local processes (:mod:`jaxtree.launch`) each hold a block of the eight rows and fit
    with ``distributed=True``; both end with the model of all rows, the one-process fit's:

    >>> import sys
    >>> import textwrap
    >>> import numpy as np
    >>> import jaxtree
    >>> from jaxtree import launch
    >>> worker = textwrap.dedent('''
    ...     import numpy as np
    ...     import jax
    ...     import jaxtree
    ...     from jaxtree import launch
    ...     launch.initialize()
    ...     X = np.arange(8.0)[:, None]
    ...     y = np.array([0, 0, 1, 0, 1, 1, 1, 1])
    ...     rows = slice(0, 5) if jax.process_index() == 0 else slice(5, 8)
    ...     model = jaxtree.PACBayesTreeClassifier(max_depth=2, min_split=2, lam1=4.0,
    ...                                            lam2=1.0, distributed=True
    ...                                            ).fit(X[rows], y[rows])
    ...     print(model.predict_proba(X)[:, 1].round(3))
    ... ''')
    >>> results = launch.check(launch.launch([sys.executable, "-c", worker], num_processes=2))
    >>> for result in results:
    ...     print(result.stdout.splitlines()[-1])
    [0.282 0.282 0.328 0.328 0.899 0.899 0.899 0.899]
    [0.282 0.282 0.328 0.328 0.899 0.899 0.899 0.899]
    >>> X = np.arange(8.0)[:, None]
    >>> y = np.array([0, 0, 1, 0, 1, 1, 1, 1])
    >>> one = jaxtree.PACBayesTreeClassifier(max_depth=2, min_split=2, lam1=4.0, lam2=1.0
    ...                                      ).fit(X, y)
    >>> print(one.predict_proba(X)[:, 1].round(3))
    [0.282 0.282 0.328 0.328 0.899 0.899 0.899 0.899]
"""

from __future__ import annotations

import contextlib
import functools
import time
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from sklearn.utils.multiclass import check_classification_targets

from jaxtree import build, cart, fitting, select, shapes
from jaxtree.grow import GrowConfig, grow_tree
from jaxtree.stats import (DEFAULT_CHUNK_ROWS, NodeStats, count_chunks, node_labels,
                           row_chunks, stats_from_counts)
from jaxtree.tree import Tree
from jaxtree.validation import check_features, check_labels

AXIS = "processes"
#: Quantile bins of the distributed CART T0 when none are given.
DEFAULT_BINS = 256
_PARTITIONS = ("kd", "dyadic", "cart")
# values per collective: padded to a power of 4 between these (larger arrays go in pieces of
# the largest size): a handful of shapes to compile, at most 4x padding on small arrays
_SMALLEST_PIECE = 4 ** 4
_LARGEST_PIECE = 4 ** 9


class CollectiveError(RuntimeError):
    """A collective over the processes failed: a process has died or stopped taking part."""


def check_initialized() -> None:
    """Raise a ``RuntimeError`` that says what to do unless JAX's multi-controller runtime is up
    (a collective without it would fail late or, worse, wait forever)."""
    if not jax.distributed.is_initialized():
        raise RuntimeError(
            "jaxtree.distributed needs JAX's multi-controller runtime: call "
            "jax.distributed.initialize(coordinator_address, num_processes, process_id) in every "
            "process before any JAX computation (on CPU with "
            "jax.config.update('jax_cpu_collectives_implementation', 'gloo') first), or start "
            "the processes with `python -m jaxtree.launch`. To fit on rows held by one process, "
            "use the estimator's fit")
    if (jax.process_count() > 1 and jax.default_backend() == "cpu"
            and jax.config.jax_cpu_collectives_implementation not in ("gloo", "mpi")):
        raise RuntimeError("CPU collectives across processes need "
                           "jax.config.update('jax_cpu_collectives_implementation', 'gloo') "
                           "before jax.distributed.initialize")


class ProcessReducer:
    """Sums, maxima and minima of NumPy arrays over the JAX processes (a reducer for
    :mod:`jaxtree.collective`).

    Each reduction is one ``psum`` / ``pmax`` / ``pmin`` in a ``jax.shard_map`` over a mesh of one
    device per process, in 64-bit (int64 for integer and boolean arrays, float64 for floats;
    maxima and minima come back in the input's dtype). Arrays are flattened and padded to a
    power of two so that few shapes compile. Every process must make the same reductions in the
    same order with arrays of the same shape.

    Attributes:
      index, size: this process's index and the number of processes.
      reductions, bytes_reduced: how many reductions this reducer made, and the bytes each
        process contributed to them (padded payloads; a ring all-reduce moves about twice that).
    """

    def __init__(self):
        check_initialized()
        first = {}
        for device in jax.devices():
            first.setdefault(device.process_index, device)
        self.mesh = Mesh(np.array([first[i] for i in sorted(first)]), (AXIS,))
        self.index = jax.process_index()
        self.size = jax.process_count()
        self.reductions = 0
        self.bytes_reduced = 0

    def sum(self, array) -> np.ndarray:
        return self._reduce(array, "sum")

    def max(self, array) -> np.ndarray:
        return self._reduce(array, "max")

    def min(self, array) -> np.ndarray:
        return self._reduce(array, "min")

    def _reduce(self, array, op):
        array = np.asarray(array)
        work = np.float64 if array.dtype.kind == "f" else np.int64
        flat = array.astype(work).ravel()
        pieces = [self._reduce_piece(flat[start:start + _LARGEST_PIECE], op)
                  for start in range(0, max(flat.size, 1), _LARGEST_PIECE)]
        result = np.concatenate(pieces).reshape(array.shape)
        return result if op == "sum" else result.astype(array.dtype)

    def _reduce_piece(self, flat, op):
        """One collective on at most :data:`_LARGEST_PIECE` values, padded to a power of 4 (at
        least 256): few shapes, so few compilations."""
        size = max(_SMALLEST_PIECE, 4 ** -(-max(flat.size - 1, 0).bit_length() // 2))
        work = flat.dtype.type
        fill = {"sum": 0, "max": -np.inf if work is np.float64 else np.iinfo(work).min,
                "min": np.inf if work is np.float64 else np.iinfo(work).max}[op]
        padded = np.full((1, size), fill, work)
        padded[0, :flat.size] = flat
        try:
            with jax.enable_x64(True):
                glob = jax.make_array_from_process_local_data(
                    NamedSharding(self.mesh, P(AXIS)), padded)
                out = np.asarray(_reduce_program(glob, op, self.mesh).addressable_data(0))
        except Exception as error:   # gloo / NCCL failures surface as several exception types
            raise CollectiveError(
                f"a collective {op} over {self.size} processes failed in process {self.index} "
                f"(another process has probably died or stopped taking part): {error}") from error
        self.reductions += 1
        self.bytes_reduced += padded.nbytes
        return out[0, :flat.size]

    def gather(self, array) -> np.ndarray:
        """``[size, *shape]``: every process's ``array`` (same shape everywhere), in process
        order (a sum of arrays that are zero outside each process's row)."""
        array = np.asarray(array)
        slot = np.zeros((self.size,) + array.shape, array.dtype)
        slot[self.index] = array
        return self.sum(slot)


@functools.partial(jax.jit, static_argnames=("op", "mesh"))
def _reduce_program(x, op, mesh):
    collective = {"sum": jax.lax.psum, "max": jax.lax.pmax, "min": jax.lax.pmin}[op]
    return jax.shard_map(lambda block: collective(block, AXIS), mesh=mesh, in_specs=P(AXIS),
                         out_specs=P(), check_vma=False)(x)


# ---------------------------------------------------------------------------------------------
# Input checks, raised in every process at once
def agree(reducer, error: Optional[Exception]) -> None:
    """Raise in every process if any process has an input ``error`` (one reduction): an error
    found in one block must not leave the others waiting in a collective. The process that
    found it raises it (prefixed with its index), the others a ``ValueError`` naming it."""
    failed = reducer.gather(np.array([error is not None]))
    if failed.any():
        if error is not None:
            raise type(error)(f"process {reducer.index}: {error}") from error
        raise ValueError(f"invalid input in process(es) {np.flatnonzero(failed).tolist()}; "
                         "see their errors")


def check_block(reducer, X, y=None) -> tuple[np.ndarray, Optional[np.ndarray], int]:
    """Validate this process's block (collectively; :mod:`jaxtree.validation`'s checks) and
    return it as ``(X, y, n)``: ``X`` in JAX's float dtype, ``y`` as int32 labels ``0..L-1``
    (None stays None) and ``n`` the rows of all blocks."""
    error = None
    try:
        X = check_features(X, min_samples=0)
        if y is not None:
            y = check_labels(y, X.shape[0])
    except (ValueError, TypeError) as found:
        error = found
    agree(reducer, error)
    shapes = reducer.gather(np.array([X.shape[0], X.shape[1]]))
    if len(set(shapes[:, 1].tolist())) != 1:
        raise ValueError(f"every process must hold the same features; the blocks have "
                         f"{shapes[:, 1].tolist()} columns")
    n = int(shapes[:, 0].sum())
    if n < 2:
        raise ValueError(f"need at least 2 rows over all processes to build a tree; got {n}")
    return X, y, n


def _check_tree_options(max_depth, min_split, split=None, layout=None):
    """The builders' option checks (the same in every process: no agreement needed)."""
    if max_depth is not None and (not isinstance(max_depth, (int, np.integer)) or max_depth < 0):
        raise ValueError(f"max_depth must be an integer >= 0; got {max_depth!r}")
    if not isinstance(min_split, (int, np.integer)) or min_split < 2:
        raise ValueError(f"min_split must be an integer >= 2; got {min_split!r}")
    if split is not None and split not in ("cycle", "spread"):
        raise ValueError(f"split must be 'cycle' or 'spread'; got {split!r}")
    if layout is not None and layout not in build.LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; expected one of {build.LAYOUTS}")


# ---------------------------------------------------------------------------------------------
# T0 and statistics
def kd_tree(X, max_depth: int, min_split: int = 2, y=None, split: str = "cycle",
            layout: str = "complete", reducer=None) -> Tree:
    """:func:`jaxtree.kd_tree` of the rows of all processes; ``X``, ``y``: this process's block.
    Every process returns the same tree, equal to ``jaxtree.kd_tree`` of the concatenated
    blocks. ``reducer``: default :class:`ProcessReducer`."""
    reducer = ProcessReducer() if reducer is None else reducer
    _check_tree_options(max_depth, min_split, split, layout)
    X, y, _ = check_block(reducer, X, y)
    return build.grow_kd(X, y, max_depth, min_split, split, layout, reducer)


def dyadic_tree(X, max_depth: int, min_split: int = 2, y=None, split: str = "cycle",
                layout: str = "complete", reducer=None) -> Tree:
    """:func:`jaxtree.dyadic_tree` of the rows of all processes (as :func:`kd_tree`)."""
    reducer = ProcessReducer() if reducer is None else reducer
    _check_tree_options(max_depth, min_split, split, layout)
    X, y, _ = check_block(reducer, X, y)
    return build.grow_dyadic(X, y, max_depth, min_split, split, layout, reducer)


def cart_tree(X, y, max_depth: Optional[int] = None, min_split: int = 2,
              criterion: str = "gini", layout: str = "auto", random_state=0,
              bins: int = DEFAULT_BINS, reducer=None) -> Tree:
    """:func:`jaxtree.cart_tree` with ``bins`` quantile bins, of the rows of all processes (as
    :func:`kd_tree`): equal to ``jaxtree.cart_tree(..., bins=bins)`` of the concatenated
    blocks."""
    reducer = ProcessReducer() if reducer is None else reducer
    _check_tree_options(max_depth, min_split, layout=layout)
    if criterion not in cart.CRITERIA:
        raise ValueError(f"criterion must be one of {cart.CRITERIA}; got {criterion!r}")
    if bins is None:
        raise ValueError("the distributed CART grows from histograms: bins must be an integer "
                         ">= 2")
    cart.check_bins(bins)
    X, y, _ = check_block(reducer, X, y)
    return cart.grow_cart_tree(X, y, max_depth, min_split, criterion, layout, random_state,
                               bins, reducer)


def grow_cart_t0(X, y, num_classes: int, max_depth: int, min_split: int, random_state,
                 bins: int, reducer) -> Tree:
    """The binned CART T0 of the rows of all processes, grown by :func:`jaxtree.grow_tree` (the
    one-process fit's builder) as one program over a row-sharded array: ``X`` ``[n_p, D]``,
    ``y`` ``[n_p]`` (labels ``0..num_classes-1``) are this process's checked block.

    The bin edges are exact order statistics over all rows (:func:`jaxtree.cart.quantile_edges`,
    by the reducer), given to the grow, so the grow sorts no rows: each process pads its block
    with weight-0 rows to the largest block, the blocks form one global array sharded over the
    reducer's mesh (one device per process), and XLA partitions the jitted grow so that the
    only collectives are sums of each level's class counts and histograms (rows never move).
    The tree is the one :func:`jaxtree.grow_tree` grows on the concatenated rows with the same
    edges, node for node (the sums are of integer counts, exact). Widened as the one-process
    fit's is (:func:`jaxtree.fitting.enlarge_until_uncapped`) until no node is capped; every
    process sees the same (replicated) count of capped nodes, so all widen alike. A reducer
    without a mesh must hold all the rows (one holder)."""
    mesh = getattr(reducer, "mesh", None)
    if mesh is None and getattr(reducer, "size", 1) != 1:
        raise ValueError("the distributed CART T0 is grown over a mesh of the processes: use "
                         "jaxtree.distributed.ProcessReducer (several holders without a mesh "
                         "cannot run one program)")
    n = int(reducer.sum(np.array([X.shape[0]], np.int64))[0])
    edges = cart.quantile_edges(X, bins, reducer)
    config = GrowConfig(partition="cart", max_depth=int(max_depth),
                        width=fitting.default_width(n, min_split, max_depth, "cart"),
                        num_classes=int(num_classes), min_split=int(min_split), bins=int(bins),
                        random_state=0 if random_state is None else int(random_state))
    arrays = (X, y, np.ones(len(y), X.dtype))
    if mesh is not None:          # blocks padded to the largest with weight-0 rows, then sharded
        rows = int(reducer.max(np.array([X.shape[0]], np.int64))[0])
        arrays = tuple(jax.make_array_from_process_local_data(
            NamedSharding(mesh, P(AXIS, *([None] * (a.ndim - 1)))), shapes.pad_rows(a, rows))
            for a in arrays)

    def run(config):
        tree, info = _grow_over_rows(*arrays, edges, config)
        return tree, tuple(int(np.asarray(count.addressable_data(0)))
                           for count in (info.capped, info.depth_capped))

    tree, _ = fitting.enlarge_until_uncapped(run, config, (n, X.shape[1]))
    return jax.tree.map(lambda a: np.asarray(a.addressable_data(0)), tree)


@functools.partial(jax.jit, static_argnames="config")
def _grow_over_rows(X, y, weight, edges, config):
    return grow_tree(X, y, weight, config, edges=edges)


def node_stats(tree: Tree, X, y, num_classes: int, sample_weight=None, reducer=None,
               chunk_size: Optional[int] = None) -> NodeStats:
    """:func:`jaxtree.node_stats` of the rows of all processes: each process counts its block
    in chunks of ``chunk_size`` rows (default :data:`jaxtree.stats.DEFAULT_CHUNK_ROWS`), one sum
    adds the ``[nodes, L]`` counts."""
    reducer = ProcessReducer() if reducer is None else reducer
    chunk_size = _chunk_rows(chunk_size)
    local = count_chunks(tree, row_chunks(chunk_size, X, y, sample_weight), num_classes)
    return stats_from_counts(tree, reducer.sum(local))


def prepare_folds(tree: Tree, X, y, num_classes: int, folds: int = 2, seed: int = 0,
                  reducer=None, chunk_size: Optional[int] = None) -> select.Folds:
    """The k folds of the rows of all processes, as :class:`jaxtree.select.Folds` for
    :func:`jaxtree.select.paper_search` / :func:`jaxtree.select.tune`.

    Fold membership is ``jaxtree.select.fold_masks(n, folds, seed)`` of all ``n`` rows, the
    blocks concatenated in process order. The training statistics are summed over processes;
    the validation part is summarised by its summed class counts at the T0-leaves: one
    pseudo-point per ``(leaf, class)`` pair that occurs in the fold, with the leaf's
    root-to-leaf path and the count as its weight (:func:`folds_from_counts`). Grid errors on
    these equal the row-by-row errors (a row's votes depend on its leaf only), and every process
    holds the same folds.
    """
    reducer = ProcessReducer() if reducer is None else reducer
    chunk_size = _chunk_rows(chunk_size)
    train = _block_fold_masks(len(y), folds, seed, reducer)
    train_counts = reducer.sum(count_chunks(
        tree, row_chunks(chunk_size, X, y, train.T), num_classes).reshape(folds, -1))
    leaf_counts = reducer.sum(count_chunks(
        tree, row_chunks(chunk_size, X, y, (~train).T), num_classes, leaves_only=True))
    return folds_from_counts(tree, train_counts.reshape(folds, tree.num_nodes, num_classes),
                             leaf_counts)


def prepare_fold_trees(build_t0, X, y, num_classes: int, folds: int = 2, seed: int = 0,
                       reducer=None, chunk_size: Optional[int] = None) -> select.Folds:
    """:func:`prepare_folds` with T0 grown anew on each fold's training rows (the one-process
    fit's ``cv_trees`` rule, :func:`jaxtree.fitting.per_fold_trees`): ``build_t0(X_part,
    y_part)`` grows a tree over the given rows of every process (a collective call, made by
    all processes in the same order). The fold trees are padded to one shape and stacked
    (:func:`jaxtree.select.stack_trees`, ``Folds.tree``: one layout kind, e.g. all compact);
    each fold's training statistics and validation ``(leaf, class)`` counts are taken on its
    own tree, as in :func:`prepare_folds`. The fold's rows of this block are copied to grow it
    (as the host builders copy a scaled block)."""
    reducer = ProcessReducer() if reducer is None else reducer
    chunk_size = _chunk_rows(chunk_size)
    train = _block_fold_masks(len(y), folds, seed, reducer)
    trees = select.stack_trees([build_t0(X[mask], y[mask]) for mask in train])
    parts = []
    for fold, mask in enumerate(train):
        tree = jax.tree.map(lambda a: np.asarray(a)[fold], trees)
        train_counts = reducer.sum(count_chunks(tree, row_chunks(chunk_size, X, y, mask),
                                                num_classes))
        leaf_counts = reducer.sum(count_chunks(tree, row_chunks(chunk_size, X, y, ~mask),
                                               num_classes, leaves_only=True))
        parts.append(folds_from_counts(tree, train_counts[None], leaf_counts[None]))
    size = max(part.weight.shape[1] for part in parts)
    validation = {name: jnp.concatenate([_pad_axis1(getattr(part, name), size)
                                         for part in parts])
                  for name in ("path", "on_path", "label", "weight")}
    train_stats = jax.tree.map(lambda *a: jnp.concatenate(a), *[part.train for part in parts])
    return select.Folds(train=train_stats, tree=jax.tree.map(jnp.asarray, trees), **validation)


def _block_fold_masks(block_rows: int, folds: int, seed: int, reducer) -> np.ndarray:
    """``[folds, block_rows]`` bool: :func:`jaxtree.select.fold_masks` of all rows (blocks in
    process order) restricted to this process's block."""
    counts = reducer.gather(np.array([block_rows]))[:, 0]
    offset = int(counts[:reducer.index].sum())
    return select.fold_masks(int(counts.sum()), folds, seed)[:, offset:offset + block_rows]


def _pad_axis1(array, size):
    """Pad a validation array of one fold (``[1, m, ...]``) with zeros to ``[1, size, ...]``
    (weight 0: padding)."""
    array = jnp.asarray(array)
    return jnp.pad(array, [(0, 0), (0, size - array.shape[1])] + [(0, 0)] * (array.ndim - 2))


def folds_from_counts(tree: Tree, train_counts, leaf_counts) -> select.Folds:
    """:class:`jaxtree.select.Folds` from per-fold training counts ``[k, nodes, L]`` and
    validation counts at the leaves ``[k, nodes, L]`` (:func:`prepare_folds`): fold f's
    validation points are the ``(leaf, class)`` pairs of positive count, weighted by it (padded
    with weight 0 to the largest fold's number of pairs)."""
    train_counts = np.asarray(train_counts)
    leaf_counts = np.asarray(leaf_counts)
    k = train_counts.shape[0]
    pairs = [np.nonzero(leaf_counts[f]) for f in range(k)]
    size = max(1, max(len(leaf) for leaf, _ in pairs))
    leaf, label = np.zeros((k, size), np.int64), np.zeros((k, size), np.int32)
    weight = np.zeros((k, size))
    for f, (leaves, labels) in enumerate(pairs):
        leaf[f, :len(leaves)], label[f, :len(leaves)] = leaves, labels
        weight[f, :len(leaves)] = leaf_counts[f, leaves, labels]
    path, on_path = slot_paths(tree, leaf.ravel())
    dtype = tree.threshold.dtype
    counts = jnp.asarray(train_counts, dtype)
    train = NodeStats(counts=counts, label=_fold_labels(tree, counts))
    return select.Folds(train=train, path=jnp.asarray(path.reshape(k, size, -1)),
                        on_path=jnp.asarray(on_path.reshape(k, size, -1)),
                        label=jnp.asarray(label), weight=jnp.asarray(weight, dtype))


_fold_labels = jax.jit(jax.vmap(node_labels, in_axes=(None, 0)))


def slot_paths(tree: Tree, slots) -> tuple[np.ndarray, np.ndarray]:
    """``(path, on_path)`` ``[m, levels]`` of nodes given by slot, as :func:`jaxtree.route` gives
    them for a point that ends in that node."""
    slots = np.asarray(slots, np.int64)
    parent = np.asarray(tree.layout.parent_index())
    depth = np.asarray(tree.layout.node_depth())[slots]
    levels = tree.num_levels
    path = np.empty((len(slots), levels), np.int32)
    ancestor = slots.copy()
    for level in range(levels - 1, -1, -1):
        path[:, level] = np.where(level > depth, slots, ancestor)
        ancestor = np.where(level <= depth, parent[ancestor], ancestor)
    on_path = np.arange(levels) <= depth[:, None]
    return path, on_path


def split_grid_errors(tree: Tree, folds: select.Folds, votes_fn, grid: dict,
                      batch_size: Optional[int] = None, reducer=None, scoring="accuracy"):
    """:func:`jaxtree.select.grid_errors` with the settings split over the processes: each
    computes a contiguous share of the grid on the (replicated) folds, one sum gathers the
    ``[G, k]`` errors (validation losses of ``scoring``; each entry comes from one process: the
    sum is exact)."""
    reducer = ProcessReducer() if reducer is None else reducer
    size = select.grid_size(grid)
    bounds = np.linspace(0, size, reducer.size + 1).astype(int)
    start, stop = bounds[reducer.index], bounds[reducer.index + 1]
    errors = np.zeros((size, folds.weight.shape[0]), np.float64)
    if stop > start:
        varying, shared = select.shared_settings(grid)
        share = {**shared, **jax.tree.map(lambda values: values[start:stop], varying)}
        errors[start:stop] = np.asarray(select.grid_errors(tree, folds, votes_fn, share,
                                                           batch_size, scoring))
    return jnp.asarray(reducer.sum(errors), folds.weight.dtype)


def _chunk_rows(chunk_size):
    return DEFAULT_CHUNK_ROWS if chunk_size is None else chunk_size


# ---------------------------------------------------------------------------------------------
# The estimator
def fit(estimator, X, y, *, bins: int = DEFAULT_BINS, chunk_size: Optional[int] = None,
        reducer=None):
    """Fit a :class:`jaxtree.PACBayesTreeClassifier` on the rows of all processes; ``X``, ``y``:
    this process's block (``[n_p, D]`` numeric, ``[n_p]`` numeric labels; a ``numpy.memmap``
    works). Returns the estimator fitted on the concatenated blocks (process order) — the same
    T0, statistics, tuned λ's, weights and so predictions in every process, whatever the
    split of the rows into blocks (tested against one holder of all the rows).

    A CART T0 is grown by :func:`jaxtree.grow_tree` over the rows of all processes
    (:func:`grow_cart_t0`: the one-process fit's builder and T0 on the same rows and bins); KD
    and dyadic T0 by the host builders (order statistics and sums by the reducer). The CV folds
    are dealt over row positions (:func:`jaxtree.select.fold_masks`), where the one-process
    ``estimator.fit`` deals them over distinct feature vectors, so on the same rows the two can
    select other λ's; as there, the folds grow their own T0 where ``estimator.cv_trees`` says
    so (:func:`prepare_fold_trees`), else they share T0 (:func:`prepare_folds`).

    ``bins``: quantile bins of a CART T0 (``partition="cart"``; the one-process equal is
    ``jaxtree.cart_tree(..., bins=bins)``). ``chunk_size``: rows counted on the device at once.

    Also sets ``profile_``: per phase (``"tree"``, ``"statistics"``, ``"tuning"`` — which
    includes ``"folds"`` when it tunes, with the folds' ``pseudo_points`` — and ``"weights"``),
    the wall ``seconds`` and this process's ``reductions`` and ``bytes`` (:class:`ProcessReducer`).
    """
    from jaxtree.estimators import PACBayesTreeClassifier

    if not isinstance(estimator, PACBayesTreeClassifier):
        raise TypeError(f"jaxtree.distributed.fit fits a PACBayesTreeClassifier; got "
                        f"{type(estimator).__name__}")
    estimator._check_params()
    estimator._softness(hard_only=True)   # refuses a given softness: the fit routes hard
    shapes.guard_memory_maps()      # as the one-process fit: see jaxtree.shapes
    reducer = ProcessReducer() if reducer is None else reducer
    X, _, n = check_block(reducer, X)
    labels = np.asarray(y)
    error = None
    try:
        if labels.shape != (X.shape[0],):
            raise ValueError(f"y must be [n_rows] = [{X.shape[0]}]; got shape {labels.shape}")
        if not (np.issubdtype(labels.dtype, np.number) or labels.dtype == bool):
            raise TypeError(f"the distributed fit needs numeric labels (they are exchanged "
                            f"between processes); got dtype {labels.dtype}: encode them first")
        if len(labels):
            check_classification_targets(labels)
    except (ValueError, TypeError) as found:
        error = found
    agree(reducer, error)
    classes = global_classes(labels, reducer)
    y = np.searchsorted(classes, labels).astype(np.int32)
    partition = estimator.partition
    if partition not in _PARTITIONS:
        raise ValueError(f"partition must be one of {list(_PARTITIONS)}; got {partition!r}")
    # the one-process fit's default depth (a CART T0 too: jaxtree.grow_tree grows it)
    depth = (estimator.max_depth if estimator.max_depth is not None
             else fitting.default_max_depth(partition, n, X.shape[1]))
    # a CART T0 has its own shape: compact, as the one-process fit's trees are
    layout = "compact" if partition == "cart" else "auto"
    _check_tree_options(depth, estimator._min_split(), estimator.split, layout)
    if partition == "cart":
        cart.check_bins(bins)

    def grow_t0(X_rows, y_rows, layout=layout):
        """T0 of the given rows of every process (a collective call)."""
        if partition == "kd":
            return build.grow_kd(X_rows, y_rows, depth, estimator._min_split(),
                                 estimator.split, layout, reducer)
        if partition == "dyadic":
            return build.grow_dyadic(X_rows, y_rows, depth, estimator._min_split(),
                                     estimator.split, layout, reducer)
        return grow_cart_t0(X_rows, y_rows, len(classes), depth, estimator._min_split(),
                            estimator.random_state, bins, reducer)

    profile = _Profile(reducer)
    with profile("tree"):
        tree = grow_t0(X, y)
    estimator.classes_ = classes
    estimator.n_features_in_ = X.shape[1]
    estimator.tree_ = tree
    with profile("statistics"):
        estimator.stats_ = node_stats(tree, X, y, len(classes), reducer=reducer,
                                      chunk_size=chunk_size)
    per_fold = fitting.per_fold_trees(estimator.cv_trees, partition,
                                      estimator._free_empty_nodes)

    def cv_data():
        with profile("folds"):
            if per_fold:
                folds = prepare_fold_trees(functools.partial(grow_t0, layout="compact"), X, y,
                                           len(classes), estimator.cv, estimator.random_state,
                                           reducer, chunk_size)
            else:
                folds = prepare_folds(tree, X, y, len(classes), estimator.cv,
                                      estimator.random_state, reducer, chunk_size)
        profile.phases["folds"]["pseudo_points"] = int(folds.weight.shape[1])
        return {"folds": folds, "errors_fn": functools.partial(split_grid_errors,
                                                                reducer=reducer)}

    with profile("tuning"):
        estimator._select_params(X, y, cv_data=cv_data)
    with profile("weights"):
        estimator._fit_tree(estimator.stats_, X, y)
        jax.block_until_ready(estimator.node_log_weights_)
    estimator.softness_, estimator.quantile_knots_ = 0.0, None
    estimator.profile_ = profile.phases
    return estimator


class _Profile:
    """Per phase of a fit: wall seconds, and the reducer's reductions and bytes."""

    def __init__(self, reducer):
        self.reducer = reducer
        self.phases = {}

    @contextlib.contextmanager
    def __call__(self, name):
        counters = (getattr(self.reducer, "reductions", 0),
                    getattr(self.reducer, "bytes_reduced", 0))
        start = time.perf_counter()
        yield
        self.phases[name] = {
            "seconds": time.perf_counter() - start,
            "reductions": getattr(self.reducer, "reductions", 0) - counters[0],
            "bytes": getattr(self.reducer, "bytes_reduced", 0) - counters[1]}


def predict_proba(estimator, X, chunk_size: Optional[int] = None) -> np.ndarray:
    """``estimator.predict_proba(X)`` routed ``chunk_size`` rows at a time (default
    :data:`jaxtree.stats.DEFAULT_CHUNK_ROWS`; ``X`` may be a ``numpy.memmap``): bounded device
    memory, one compilation (the last chunk is padded), the same scores."""
    chunk_size = _chunk_rows(chunk_size)
    parts = []
    for (chunk,) in row_chunks(chunk_size, X):
        rows = len(chunk)
        padded = np.concatenate([chunk, np.repeat(chunk[-1:], chunk_size - rows, axis=0)]) \
            if 0 < rows < chunk_size else chunk
        parts.append(estimator.predict_proba(padded)[:rows])
    return np.concatenate(parts)


def global_classes(labels, reducer) -> np.ndarray:
    """The sorted distinct labels of all processes (float64 or int64, as the labels)."""
    local = np.unique(labels)
    width = int(reducer.max(np.array([len(local)]))[0])
    kind = np.float64 if local.dtype.kind == "f" else np.int64
    slots = np.zeros((reducer.size, width), kind)
    present = np.zeros((reducer.size, width), bool)
    slots[reducer.index, :len(local)] = local
    present[reducer.index, :len(local)] = True
    values, present = reducer.sum(slots), reducer.sum(present) > 0
    return np.unique(values[present]).astype(labels.dtype)
