"""Checks of user arrays at the functional API's boundary.

Every public function that takes user arrays (the builders, :func:`jaxtree.node_stats`, the
votes, :func:`jaxtree.route`) calls these first, so a wrong shape, dtype or value is refused
with a ``ValueError`` (wrong shape or value) or ``TypeError`` (wrong kind of array) that names the
argument and says what to change, before any JAX tracing. The checks of values (finite, labels in
range) run when the array is concrete; inside a caller's ``jit`` only shapes and dtypes are
known, and only they are checked.

The estimators validate their input with scikit-learn's utilities (``validate_data``), whose
messages are the ones scikit-learn's tools look for, and then call the functional core.
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse


#: Rows per block of the finite-values check of a NumPy array.
FINITE_CHECK_ROWS = 2 ** 16


def float_dtype() -> np.dtype:
    """The float dtype JAX computes in now: float32, or float64 under x64 (read from JAX's
    configuration, so nothing is computed or compiled)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(np.float64))


def is_traced(x) -> bool:
    """True for an abstract value inside ``jit``/``vmap``/``grad`` (no values to check)."""
    return isinstance(x, jax.core.Tracer)


def holds_nan(X) -> bool:
    """Whether a concrete float ``X`` holds NaN (False when traced or not floating). A NumPy
    array is read :data:`FINITE_CHECK_ROWS` rows at a time."""
    if is_traced(X) or not np.issubdtype(_dtype(X), np.inexact):
        return False
    return not _holds_everywhere(X, _not_nan)


def _not_nan(xp, block):
    return ~xp.isnan(block)


def _finite(xp, block):
    return xp.isfinite(block)


def _not_infinite(xp, block):
    return ~xp.isinf(block)


def _holds_everywhere(x, test) -> bool:
    """Whether the elementwise ``test(xp, block)`` (``xp``: ``numpy`` or ``jax.numpy``; one of
    this module's functions) is true on every entry of a concrete ``x``: a ``jax.Array`` at
    once, where it lies (evaluated now, also when a caller's jit closed over it, not into the
    trace), a NumPy array :data:`FINITE_CHECK_ROWS` rows at a time, stopping at the first
    block where it fails (a memory-mapped sample larger than memory stays on disk)."""
    if isinstance(x, jax.Array):
        with jax.ensure_compile_time_eval():
            return bool(_holds_on_device(x, test))
    x = np.asarray(x)
    blocks = [x] if x.ndim == 0 else (x[i:i + FINITE_CHECK_ROWS]
                                      for i in range(0, len(x), FINITE_CHECK_ROWS))
    return all(bool(test(np, block).all()) for block in blocks)


# One compiled program per test and shape (the test's operations one by one would compile
# one program each: 0.15 s on the first prediction of each tree width).
@functools.partial(jax.jit, static_argnums=1)
def _holds_on_device(x, test):
    return test(jnp, x).all()


def check_features(X, name: str = "X", min_samples: int = 2) -> np.ndarray:
    """A feature matrix for the builders: ``[n, D]`` (``n >= min_samples``, ``D >= 1``) of real
    numbers (int, float or bool), finite. Returns it as a NumPy array in :func:`float_dtype`."""
    X = _dense(X, name)
    check_real(X, name)
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array [n_samples, n_features]; got shape "
                         f"{X.shape}. Reshape a single feature with {name}.reshape(-1, 1), a "
                         f"single sample with {name}.reshape(1, -1).")
    if X.shape[0] < min_samples:
        raise ValueError(f"need at least {min_samples} samples to build a tree; {name} has "
                         f"{X.shape[0]} (shape {X.shape})")
    if X.shape[1] < 1:
        raise ValueError(f"{name} has 0 features (shape {X.shape}); it needs at least one column")
    X = X.astype(float_dtype())
    check_finite(X, name)
    return X


def check_labels(y, n: int, name: str = "y") -> np.ndarray:
    """Encoded labels for the builders: ``[n]`` integers in ``0..L-1``. Returns int32."""
    y = _dense(y, name)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D [n_samples]; got shape {y.shape}")
    if y.shape[0] != n:
        raise ValueError(f"X has {n} samples but {name} has {y.shape[0]}; give one label per row")
    _check_integer_labels(y, name)
    if y.size and y.min() < 0:
        raise ValueError(f"{name} must hold labels in 0..L-1; got a minimum of {y.min()}")
    return y.astype(np.int32)


def check_points(X, num_features: int, name: str = "X", allow_nan: bool = False) -> None:
    """Points to route down a tree with ``num_features`` features: ``[n, num_features]``, real,
    finite (when concrete; NaN allowed with ``allow_nan``, for a tree that routes missing
    values). Works on traced values (shape and dtype only)."""
    _refuse_sparse(X, name)
    shape = np.shape(X)
    if len(shape) != 2 or shape[1] != num_features:
        raise ValueError(f"{name} must be [n, {num_features}] for this tree (one row per point, "
                         f"{num_features} features); got shape {shape}")
    check_real(X, name)
    check_finite(X, name, allow_nan)


def check_sample_labels(y, n: int, num_classes: Optional[int], name: str = "y") -> None:
    """Labels ``[n]`` of integer dtype, in ``0..num_classes-1`` when concrete (traced: shape and
    dtype only)."""
    if np.shape(y) != (n,):
        raise ValueError(f"{name} must be [n] = [{n}] like X; got shape {np.shape(y)}")
    _check_integer_labels(y, name)
    if is_traced(y) or not n:
        return
    labels = np.asarray(y)
    if labels.min() < 0 or labels.max() >= num_classes:
        raise ValueError(f"{name}: labels must lie in 0..num_classes-1 = 0..{num_classes - 1}; "
                         f"got {labels.min()}..{labels.max()}")


def check_sample_weight(weight, n: int, name: str = "sample_weight") -> None:
    """Weights ``[n]``: real, finite and >= 0 (when concrete)."""
    if np.shape(weight) != (n,):
        raise ValueError(f"{name} must be [{n}] (one weight per row of X); got shape "
                         f"{np.shape(weight)}")
    check_real(weight, name)
    check_finite(weight, name)
    if not is_traced(weight) and bool(np.any(np.asarray(weight) < 0)):
        raise ValueError(f"{name} must be >= 0; got a minimum of {np.min(weight)}")


def check_num_classes(num_classes, name: str = "num_classes") -> None:
    """A static class count: an integer >= 1."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) \
            or num_classes < 1:
        raise ValueError(f"{name} must be an integer >= 1 (the number of classes L); got "
                         f"{num_classes!r}")


def check_real(x, name: str) -> None:
    """Raise a TypeError unless ``x`` holds real numbers (int, float or bool)."""
    dtype = _dtype(x)
    if np.issubdtype(dtype, np.complexfloating):
        raise TypeError(f"{name} has complex dtype {dtype}; it must hold real numbers: pass "
                        f"{name}.real, or abs({name}), whichever the problem means")
    if not (np.issubdtype(dtype, np.number) or dtype == bool):
        raise TypeError(f"{name} must hold numbers (int, float or bool); got dtype {dtype}. "
                        f"Encode categories or strings as numbers first (e.g. with "
                        f"sklearn.preprocessing.OrdinalEncoder)")


def check_finite(x, name: str, allow_nan: bool = False) -> None:
    """Raise a ValueError if a concrete ``x`` holds NaN (unless ``allow_nan``) or ±inf (skipped
    when traced); a NumPy array is read :data:`FINITE_CHECK_ROWS` rows at a time."""
    if is_traced(x) or not np.issubdtype(_dtype(x), np.inexact):
        return
    if not _holds_everywhere(x, _not_infinite if allow_nan else _finite):
        if allow_nan:
            raise ValueError(f"{name} contains infinite values; clip or drop them first (NaN "
                             f"marks a missing value)")
        raise ValueError(f"{name} contains NaN or infinite values; impute or drop them first")


def _check_integer_labels(y, name: str) -> None:
    dtype = _dtype(y)
    if not np.issubdtype(dtype, np.integer):
        raise TypeError(f"{name} must hold integer labels 0..L-1; got dtype {dtype}. Encode "
                        "other labels with np.unique(y, return_inverse=True) (the estimators "
                        "do it for you)")


def _dtype(x) -> np.dtype:
    dtype = getattr(x, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.asarray(x).dtype


def _refuse_sparse(x, name: str) -> None:
    if scipy.sparse.issparse(x):
        raise TypeError(f"{name} is a sparse matrix; jaxtree works on dense arrays only. "
                        f"Convert it with {name}.toarray() (n × D × 4 bytes in float32) if "
                        "that fits in memory")


def _dense(x, name: str) -> np.ndarray:
    """``x`` as a NumPy array; a sparse matrix is refused (jaxtree computes on dense arrays)."""
    _refuse_sparse(x, name)
    return np.asarray(x)
