"""Shapes rounded up to a few buckets, so that a refit at a new size reuses compiled programs.

``jax.jit`` compiles once per set of input shapes. The shapes of a fit come from the data: the
number of training points, the levels and width of a compact T0 (every CART tree has its own),
the size of the validation parts, the number of test points. Left exact, every fit at a new
training size (each fold of a cross-validation, each bootstrap, each point of a learning curve)
compiles afresh, for seconds, to do milliseconds of work. So every size that becomes an array
shape is rounded up, and the arrays are padded with entries that change no result:

* **samples** (:func:`sample_size`, :func:`pad_sample`): rows of weight 0 (their class counts
  add exact zeros); padded rows are in the training part of every fold
  (:func:`pad_fold_masks`), so no validation part sees them;
* **validation parts**: ``ceil(n' / k)`` slots for ``n'`` padded points and ``k`` folds
  (:func:`validation_size`), a function of the padded size alone;
* **trees** (:func:`pad_tree`): a compact layout is padded in levels and width (new slots are
  never internal and hang below a leaf, :func:`jaxtree.compact.pad_compact`); a complete heap
  layout keeps its depth (its ``2**(D0+1) - 1`` slots double from one depth to the next, and
  the default KD depth ``ceil(log2 n)`` changes only when ``n`` doubles) unless a tree one level
  deeper was compiled already (below);
* **test points** (:func:`pad_rows`): any rows, sliced off the result;
* **depths**: a default depth follows the sample's size (``ceil(log2 n)`` for a KD T0, twice
  that for CART), so it would change the layout, and compile anew, wherever ``n`` crosses a
  power of two. The estimators give the layout the default depth of the padded row count and
  the tree its own depth as an argument of the compiled program (``depth_limit`` of
  :func:`jaxtree.grow_tree`; the levels below it stay empty): refits at 2,000 and at 3,500 rows
  share one program.

The class count is not padded: it is fixed for a dataset, so refits at new sizes share it.

**The rule.** A new size ``s`` is rounded up by :func:`bucket` to an even number with at most
three significant bits: 2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, … — at
most 25 % of padding, 4 buckets per doubling (sizes 2000 to 4000 fall into 2048, 2560, 3072,
3584 and 4096); below :data:`MIN_LEVELS`, :data:`MIN_WIDTH` and :data:`MIN_ROWS` a compact
tree's levels and width and a sample's rows take the floor, so that the folds of a small
cross-validation share one shape. A tree's levels and width and a sample's size grow together,
so a fit at a new size would still often meet a new combination of buckets (crowd, 10 sizes
from 2000 to 4000 rows after a fit on 3000: 7 new combinations for CART T0s, 6 for dyadic, 4
for KD); hence
**shapes already used in this process are reused** when they hold the new tree and sample at
most :data:`REUSE_FACTOR` (2) times the bucketed size in each of the tree's slots and the
sample's rows (then 2, 3 and 3 new combinations): the smallest such shape wins, and a fit that
fits a compiled shape costs its (larger) work, not a compilation.
Padding changes no result (tested bit for bit: statistics, weights, selected λ's, predictions),
so the shapes depend on what the process fitted before, the results do not.

The estimators, :mod:`jaxtree.select` and the experiments use these helpers. The functional
API (``node_stats``, ``vote``, ``subtree_log_weights``, …) takes the shapes it is given, so
that it composes with your own ``jit`` and ``vmap``: pad with these helpers to share
compilations there too. :func:`exact_shapes` turns the rounding off (for comparisons and
debugging); :func:`forget_shapes` empties the record of shapes used.

**Across processes**, compiled programs are kept on disk by JAX's persistent compilation cache:
:func:`enable_compilation_cache`.

**Many programs in one process.** XLA:CPU loads every compiled kernel into memory mappings of
its own (code, constants, data: three each), and Linux caps a process's mappings at
``vm.max_map_count`` (65,530 by default); past the cap XLA's next compilation dies of a
segmentation fault. A fit at a new shape adds ~800 mappings, so a process that fits a few dozen
differently shaped problems reaches the cap. :func:`release_compiled_programs` empties JAX's
caches of compiled programs when the process holds :data:`MAP_SHARE` of its cap; every
estimator's ``fit`` calls it first (:func:`guard_memory_maps`, with a warning when it releases).

**Compiler options.** :func:`jit` is ``jax.jit`` with :func:`compiler_options` for the
programs that gain from them (:data:`CPU_COMPILER_OPTIONS`, on a CPU).
"""

from __future__ import annotations

import contextlib
import functools
import os
import pathlib
import threading
import warnings
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.compact import CompactLayout, pad_compact
from jaxtree.layout import CompleteLayout, pad_complete
from jaxtree.stats import NodeStats, node_stats
from jaxtree.tree import Tree

#: A shape used before in this process is reused for a new tree or sample when it is at most
#: this many times the bucketed size (in slots of the tree, in rows of the sample).
REUSE_FACTOR = 2

#: Floors of the buckets: a compact tree has at least this many levels and this width, a sample
#: at least this many rows. Small problems (a CV fold of a few hundred points, whose trees differ
#: in a few levels) then share one shape — one compilation — at a cost of microseconds.
MIN_LEVELS, MIN_WIDTH, MIN_ROWS = 16, 32, 512

_local = threading.local()
_lock = threading.Lock()
_tree_shapes: dict = {}     # tree family -> set of tree shapes used
_fit_sizes: dict = {}       # fit family -> set of padded row counts used by grown fits

#: A fit at a new size pads its sample to the power of two at or above this many times its
#: rows, so that later fits on up to that many rows (a learning curve, CV folds, bootstraps of
#: other sizes) reuse its compiled programs.
FIT_HEADROOM = 1.5
_sample_sizes: dict = {}    # (tree family, tree shape) -> set of padded sample sizes used


def bucket(size: int) -> int:
    """``size`` rounded up to an even number with at most three significant bits (module
    docstring): ``size <= bucket(size) <= 1.25 * size`` for ``size >= 8``; 0 stays 0."""
    size = int(size)
    if size < 0:
        raise ValueError(f"size must be >= 0; got {size}")
    if size <= 8:
        return size + size % 2
    step = 2 ** (size.bit_length() - 3)
    return -(-size // step) * step


def bucketing() -> bool:
    """True unless inside :func:`exact_shapes`."""
    return getattr(_local, "bucketing", True)


@contextlib.contextmanager
def exact_shapes():
    """Within this context (in this thread) the estimators, :mod:`jaxtree.select` and the
    padding helpers use exact sizes: every new size compiles afresh. Results are the same."""
    before = bucketing()
    _local.bucketing = False
    try:
        yield
    finally:
        _local.bucketing = before


def forget_shapes() -> None:
    """Forget the shapes used so far: the next fits take fresh buckets (:func:`bucket`)."""
    with _lock:
        _tree_shapes.clear()
        _sample_sizes.clear()
        _fit_sizes.clear()


def fit_rows(num_rows: int, family: tuple = ()) -> int:
    """Rows of the padded sample of a fit whose T0 is grown inside the compiled program (its
    shapes are fixed by the row count): a count used before by fits of ``family`` (what else
    fixes the programs: features, classes, options) that holds ``num_rows`` within
    :data:`REUSE_FACTOR` times, else the power of two at or above :data:`FIT_HEADROOM` times
    ``num_rows`` (at least :data:`MIN_ROWS`). ``num_rows`` itself inside :func:`exact_shapes`."""
    num_rows = int(num_rows)
    if not bucketing():
        return num_rows
    with _lock:
        used = _fit_sizes.setdefault(family, set())
        fits = [size for size in used
                if num_rows <= size <= REUSE_FACTOR * max(num_rows, MIN_ROWS)]
        if fits:
            return min(fits)
        size = max(MIN_ROWS, 1 << int(np.ceil(np.log2(FIT_HEADROOM * num_rows))))
        used.add(size)
        return size


def padded(size: int) -> int:
    """``bucket(size)`` (``size`` itself inside :func:`exact_shapes`): the row count of a batch
    of points whose shape no other array shares (test points, stacked problems)."""
    return bucket(size) if bucketing() else int(size)


def validation_size(num_points: int, folds: int) -> int:
    """Slots for the validation part of each of ``folds`` folds of ``num_points`` (padded)
    points: ``ceil(num_points / folds)``, at least the largest part of any split of these points
    that :func:`jaxtree.select.fold_masks` deals, and a function of the padded size alone."""
    return -(-int(num_points) // int(folds))


# ---------------------------------------------------------------------------------------------
# Choosing shapes
def pad_tree(tree: Tree, num_points: Optional[int] = None) -> Tree:
    """T0 in a shared shape (module docstring): the smallest shape used before in this process
    that holds it within :data:`REUSE_FACTOR` times its bucketed slots — preferring one used
    with a sample size that holds ``num_points`` (the training points of the fit) — else its
    bucketed shape (a compact layout: ``bucket`` of its levels and of its width, at least
    :data:`MIN_LEVELS` and :data:`MIN_WIDTH`; a complete layout: its own depth). The tree
    itself inside :func:`exact_shapes`."""
    if not bucketing():
        return tree
    family, own = _family(tree), _bucketed_shape(tree)
    with _lock:
        used = _tree_shapes.setdefault(family, set())
        fits = [shape for shape in used if _holds(shape, tree)
                and _slots(shape) <= REUSE_FACTOR * _slots(own)]

        def cost(shape):
            with_sample = num_points is not None and _reusable_size(
                _sample_sizes.get((family, shape), ()), num_points) is not None
            return (not with_sample, _slots(shape), shape)

        shape = min(fits, key=cost) if fits else own
        used.add(shape)
    return _pad_to(tree, shape)


def sample_size(tree: Tree, num_points: int) -> int:
    """The row count to pad a sample of ``num_points`` points to, for (padded) ``tree``: the
    smallest size used before with a tree of this shape that holds it within
    :data:`REUSE_FACTOR` times its bucket, else ``bucket(num_points)`` (at least
    :data:`MIN_ROWS`); ``num_points`` itself inside :func:`exact_shapes`."""
    if not bucketing():
        return int(num_points)
    key = (_family(tree), _shape(tree))
    with _lock:
        used = _sample_sizes.setdefault(key, set())
        size = _reusable_size(used, num_points)
        size = _sample_bucket(num_points) if size is None else size
        used.add(size)
    return size


def _sample_bucket(num_points: int) -> int:
    return max(bucket(num_points), MIN_ROWS)


def _reusable_size(used, num_points: int) -> Optional[int]:
    fits = [size for size in used
            if num_points <= size <= REUSE_FACTOR * _sample_bucket(num_points)]
    return min(fits) if fits else None


def _family(tree: Tree) -> tuple:
    """What besides its shape a tree shares with the trees whose compiled programs it can
    use: layout kind, clipping, oblique or not, feature count, dtype."""
    return (type(tree.layout).__name__, tree.clip, tree.coef is None, tree.num_features,
            str(tree.threshold.dtype))


def _shape(tree: Tree) -> tuple:
    if isinstance(tree.layout, CompactLayout):
        return (tree.num_levels, tree.width)
    return (tree.layout.depth,)


def _bucketed_shape(tree: Tree) -> tuple:
    if isinstance(tree.layout, CompactLayout):
        return (max(bucket(tree.num_levels), MIN_LEVELS), max(bucket(tree.width), MIN_WIDTH))
    return _shape(tree)


def _slots(shape: tuple) -> int:
    """Work of a tree shape, in slots (a complete heap of depth D0: ``2**(D0+1)``)."""
    return shape[0] * shape[1] if len(shape) == 2 else 2 ** (shape[0] + 1)


def _holds(shape: tuple, tree: Tree) -> bool:
    return all(size >= own for size, own in zip(shape, _shape(tree)))


def _pad_to(tree: Tree, shape: tuple) -> Tree:
    if shape == _shape(tree):
        return tree
    if isinstance(tree.layout, CompleteLayout):
        return pad_complete(tree, shape[0], tree.num_features)
    return pad_compact(tree, *shape)


# ---------------------------------------------------------------------------------------------
# Padding
def pad_rows(x, size: int, value=0):
    """``x`` ``[n, ...]`` with rows of ``value`` appended up to ``size`` rows (``size >= n``).

    NumPy in, NumPy out (padded on the host: no compilation per size); a JAX array is padded
    with ``jnp.pad`` (it stays on its device)."""
    extra = int(size) - np.shape(x)[0]
    if extra < 0:
        raise ValueError(f"cannot pad {np.shape(x)[0]} rows to {size}")
    if extra == 0:
        return x
    widths = ((0, extra),) + ((0, 0),) * (np.ndim(x) - 1)
    if isinstance(x, jax.Array):
        return jnp.pad(x, widths, constant_values=value)
    return np.pad(np.asarray(x), widths, constant_values=value)


def pad_sample(X, y, sample_weight=None, size: Optional[int] = None):
    """A sample padded with weight-0 rows to ``size`` rows (default :func:`padded` of its own).

    Args:
      X: ``[n, D]`` float points (NumPy or JAX); y: ``[n]`` int labels; sample_weight: optional
        ``[n]`` (default ones, in ``X``'s dtype).
      size: the padded row count (>= n).

    Returns:
      ``(X [size, D], y [size], weight [size])``: padding rows are 0 with label 0 and weight 0,
      so they add exact zeros to every count.
    """
    n = np.shape(X)[0]
    size = padded(n) if size is None else int(size)
    if sample_weight is None:
        sample_weight = np.ones(n, X.dtype)
    return pad_rows(X, size), pad_rows(y, size), pad_rows(sample_weight, size)


def padded_node_stats(tree: Tree, X, y, num_classes: int, sample_weight=None) -> NodeStats:
    """:func:`jaxtree.node_stats` of the sample padded to :func:`sample_size` rows: the same
    statistics (bit for bit), compiled once per shape."""
    X, y, weight = pad_sample(X, y, sample_weight, sample_size(tree, np.shape(X)[0]))
    return node_stats(tree, X, y, num_classes, weight)


def pad_fold_masks(train_masks, size: int) -> np.ndarray:
    """``[k, n]`` fold masks (True in a fold's training part) padded to ``[k, size]`` with True:
    padding rows (weight 0) belong to every training part and to no validation part."""
    masks = np.asarray(train_masks, bool)
    return np.pad(masks, ((0, 0), (0, int(size) - masks.shape[1])), constant_values=True)


# ---------------------------------------------------------------------------------------------
# Memory maps of compiled programs
#: The share of the process's memory-map cap above which :func:`release_compiled_programs`
#: empties JAX's caches of compiled programs (module docstring).
MAP_SHARE = 0.75

_releases = 0       # how many times release_compiled_programs emptied JAX's caches


def memory_maps() -> Optional[tuple]:
    """``(held, cap)``: the memory mappings this process holds (lines of ``/proc/self/maps``)
    and the system's cap on them (``vm.max_map_count``); None where the system tells neither
    (not Linux). Reading costs ~1 ms per 1,000 mappings."""
    try:
        with open("/proc/sys/vm/max_map_count", "rb") as cap_file:
            cap = int(cap_file.read())
        with open("/proc/self/maps", "rb") as maps_file:
            held = maps_file.read().count(b"\n")
    except (OSError, ValueError):
        return None
    return held, cap


def release_compiled_programs(share: float = MAP_SHARE) -> bool:
    """``jax.clear_caches()`` (every jitted function of the process compiles again at its next
    call) when this process holds more than ``share`` of its cap on memory mappings, before
    XLA:CPU's compiled kernels exhaust it (module docstring). Returns whether it released."""
    global _releases
    maps = memory_maps()
    if maps is None or maps[0] <= share * maps[1]:
        return False
    jax.clear_caches()
    _releases += 1
    return True


def releases() -> int:
    """How many times :func:`release_compiled_programs` has emptied JAX's caches in this
    process (a record of programs compiled before a release is stale after it)."""
    return _releases


#: JAX's event after each XLA compilation (``jax.monitoring``).
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_compilations = 0           # XLA compilations in this process since jaxtree's import
_compilations_checked = -1  # _compilations when guard_memory_maps last read the mappings


def _count_compilation(event: str, duration: float, **_) -> None:
    global _compilations
    if event == COMPILE_EVENT:
        _compilations += 1


jax.monitoring.register_event_duration_secs_listener(_count_compilation)


def guard_memory_maps(share: float = MAP_SHARE, warn: bool = True) -> bool:
    """:func:`release_compiled_programs` at ``share``, with a ``RuntimeWarning`` when it releases
    (unless ``warn`` is False); the estimators call it at the start of ``fit``. It reads the
    mappings only when something compiled since its last reading (mappings grow only then), so
    a warm refit pays nothing. Returns whether it released."""
    global _compilations_checked
    if _compilations == _compilations_checked:
        return False
    _compilations_checked = _compilations
    if not release_compiled_programs(share):
        return False
    if warn:
        warnings.warn("jaxtree emptied JAX's caches of compiled programs (jax.clear_caches()): "
                      "this process held most of the memory mappings that Linux allows it "
                      "(vm.max_map_count), and XLA would crash compiling past the cap; "
                      "programs compile again at their next call", RuntimeWarning, stacklevel=3)
    return True


# ---------------------------------------------------------------------------------------------
# Persistent compilation cache
def default_cache_dir() -> pathlib.Path:
    """``$XDG_CACHE_HOME/jaxtree/jax``, or ``~/.cache/jaxtree/jax`` when that is unset."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(root) / "jaxtree" / "jax"


def enable_compilation_cache(path=None) -> pathlib.Path:
    """Turn on JAX's persistent compilation cache: compiled programs are written to ``path``
    (default :func:`default_cache_dir`) and read back by later processes instead of compiling.

    Every program is kept, however quick its compilation (``jax_persistent_cache_min_compile_time_secs``
    = 0: a fit also compiles many small ones). Safe to call after JAX has compiled something:
    the cache is re-initialised. Affects the whole process (it sets JAX's global configuration),
    so call it from scripts, not from library code. Only point it at a directory that you alone
    can write: JAX loads what it finds there as executable code.

    Returns:
      the cache directory (created if missing).
    """
    from jax.experimental.compilation_cache import compilation_cache

    directory = pathlib.Path(default_cache_dir() if path is None else path).expanduser()
    directory.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    compilation_cache.reset_cache()   # a compilation before this call may have disabled it
    return directory


# ---------------------------------------------------------------------------------------------
# Compiler options
#: XLA options of :func:`jit`'s programs on a CPU: XLA:CPU's legacy elemental emitter instead of
#: its fusion emitters. The whole fit (binned CART T0, 2-fold grid CV; 3,000 rows of spam
#: padded to 4,096) compiled in 4.45 s instead of 6.01 s and ran warm in 0.40 s either way; a KD
#: fit compiled in 2.83 s instead of 3.36 s and ran in 1.04 s instead of 1.23 s (one process,
#: interleaved). Not for the forest's programs: a letter forest's compiled refit took 4.62 s
#: instead of 4.34 s with it.
CPU_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}

#: :data:`CPU_COMPILER_OPTIONS` with LLVM's optimization level 1 instead of XLA's default 2: for
#: programs whose run time does not change with it and whose compilation is on a first fit's
#: critical path (the fit's grow program). T0's grow program of a binned CART on 3,000 rows of
#: spam compiled in 1.75 s instead of 2.1 s and ran in 0.11 s either way (KD: 0.72 s instead of
#: 0.99 s, runs 0.25 s either way; CART on 50,000 rows 2.05 s against 2.00 s warm). Not for the
#: CV grid's program: a KD fit's grid ran 12 % longer at level 1 (0.60 s against 0.54 s).
QUICK_CPU_COMPILER_OPTIONS = {**CPU_COMPILER_OPTIONS, "xla_backend_optimization_level": 1}


def compiler_options(cpu_options: Optional[dict] = None) -> dict:
    """``cpu_options`` (default :data:`CPU_COMPILER_OPTIONS`) where JAX's default backend is a
    CPU whose XLA knows them (checked by compiling a one-addition program once per process and
    set of options), else ``{}``: XLA rejects an option it does not know, and its CPU options
    change between releases. An option that the process's ``XLA_FLAGS`` set is left to them
    (the tests compile at optimization level 0 that way)."""
    options = CPU_COMPILER_OPTIONS if cpu_options is None else cpu_options
    user_flags = os.environ.get("XLA_FLAGS", "")
    options = {name: value for name, value in options.items()   # the user's XLA_FLAGS win
               if f"--{name}=" not in user_flags and f"--{name} " not in f"{user_flags} "}
    return dict(_known_cpu_options(tuple(sorted(options.items()))))


@functools.cache
def _known_cpu_options(items: tuple) -> tuple:
    if jax.default_backend() != "cpu":
        return ()
    try:
        jax.jit(lambda x: x + 1, compiler_options=dict(items)).lower(np.float32(0)).compile()
    except Exception:       # noqa: BLE001 — an XLA without these options: compile as JAX does
        return ()
    return items


def jit(fun, *, cpu_options: Optional[dict] = None, **jit_kwargs):
    """``jax.jit(fun, **jit_kwargs)`` compiled with :func:`compiler_options` (of
    ``cpu_options``, default :data:`CPU_COMPILER_OPTIONS`) when called at the top level; the
    options are read at the first call (not at import: JAX's backend is chosen then). Called
    inside a caller's ``jit``, ``vmap`` or ``grad`` (where JAX refuses options on a nested
    ``jit``), it is the plain ``jax.jit`` and joins the caller's program. Its
    ``lower(*args, **kwargs)`` is the top-level program's (``jax.jit``'s ahead-of-time
    lowering: a ``.compile()`` of it serves the later calls at those shapes)."""
    plain = jax.jit(fun, **jit_kwargs)
    with_options = None

    def top():
        nonlocal with_options
        if with_options is None:
            options = compiler_options(cpu_options)
            with_options = jax.jit(fun, compiler_options=options, **jit_kwargs) if options \
                else plain
        return with_options

    @functools.wraps(fun)
    def call(*args, **kwargs):
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves((args, kwargs))):
            return plain(*args, **kwargs)
        try:
            return top()(*args, **kwargs)
        except ValueError as error:    # under a trace that none of the arguments shows
            if "compiler_options" not in str(error):
                raise
            return plain(*args, **kwargs)

    call.lower = lambda *args, **kwargs: top().lower(*args, **kwargs)
    return call
