"""Sums, extremes and exact order statistics of rows spread over several holders (processes).

Growing T0 needs a few statistics of the rows of every node: counts, class counts, extremes and
order statistics (medians, quartiles, bin edges). When the rows are split over processes, each
statistic is computed from per-process partial results combined by a **reducer**: an object with
``sum``, ``max`` and ``min`` methods that take a NumPy array of one shape on every holder and
return the elementwise reduction over all holders (the same array on each).
:data:`LOCAL` is the reducer of a single holder (the identity);
:class:`jaxtree.distributed.ProcessReducer` reduces over JAX processes.

Two statistics need care to come out *identical* on any split of the rows:

* **order statistics** (:func:`order_statistics`) by a radix select over order-preserving
  integer keys of the float values: each round adds one digit of ``radix_bits`` bits to every
  sought key from a summed histogram of that digit among the values that share the digits found
  so far (4 rounds of 256 bins for float32 while the queries are few; 16 rounds of 4 bins when
  they are many). The result is the exact value, so a median found this way equals one found by
  sorting all rows in one place. The communication is ``rounds × queries × 2**radix_bits``
  counts, independent of the number of rows.
* **sums of floats** (:func:`reproducible_sum`): float addition is not associative, so a sum over
  processes would depend on the split. Each value is cut into pieces on a grid fixed by the
  global maximum and count (pre-rounding, as in Demmel & Nguyen's reproducible summation): the
  pieces of one fold are multiples of one power of two and their sum is exact in float64 in any
  order. Three folds keep about 150 − 3·log2(n) significant bits, more than float64 holds.
"""

from __future__ import annotations

from typing import Optional

import numpy as np


class LocalReducer:
    """The reducer of rows held in one place: every reduction is the identity."""

    def sum(self, array: np.ndarray) -> np.ndarray:
        return np.asarray(array)

    def max(self, array: np.ndarray) -> np.ndarray:
        return np.asarray(array)

    def min(self, array: np.ndarray) -> np.ndarray:
        return np.asarray(array)


#: The reducer of a single holder.
LOCAL = LocalReducer()

# Histogram entries handled in one block of :func:`order_statistics` (and one reduction).
_HISTOGRAM_BUDGET = 2 ** 22
# Histogram entries per round below which order_statistics keeps 8-bit digits.
_ROUND_ENTRIES = 2 ** 16
# Queries per segment from which digits may be counted by binary search in sorted keys.
_MANY_QUERIES = 16
_FOLDS = 3


# ---------------------------------------------------------------------------------------------
# Order-preserving keys
def float_keys(values: np.ndarray) -> np.ndarray:
    """Unsigned integer keys of floats whose integer order is the float order (same width:
    uint32 for float32, uint64 for float64). ``-0.0`` gets the key of ``+0.0``; no NaNs."""
    values = np.asarray(values)
    values = values + values.dtype.type(0)          # -0.0 + 0.0 is +0.0
    bits = _unsigned(values.dtype)
    raw = values.view(bits)
    top = bits(1) << bits(8 * values.dtype.itemsize - 1)
    return np.where(raw & top, ~raw, raw | top)


def keys_to_floats(keys: np.ndarray, dtype) -> np.ndarray:
    """The inverse of :func:`float_keys`."""
    dtype = np.dtype(dtype)
    bits = _unsigned(dtype)
    keys = np.asarray(keys, bits)
    top = bits(1) << bits(8 * dtype.itemsize - 1)
    return np.where(keys & top, keys & ~top, ~keys).view(dtype)


def _unsigned(dtype):
    return {4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize]


# ---------------------------------------------------------------------------------------------
# Order statistics
def order_statistics(values: np.ndarray, segment: np.ndarray, rank: np.ndarray, reducer=LOCAL,
                     radix_bits: Optional[int] = None) -> np.ndarray:
    """Exact order statistics of the values of each segment, over all holders.

    Args:
      values: ``[p, C]`` float32 or float64, this holder's rows (C columns).
      segment: ``[p]`` int, the segment of each row in ``0..S-1`` (rows of segment -1 are
        ignored).
      rank: ``[S, Q]`` int, 0-based ranks sought in every segment (the same for every column),
        counted over all holders. A rank outside ``0..count-1`` gives an unspecified value.
      reducer: combines the holders' histograms (``LOCAL`` for one holder).
      radix_bits: bits of the key found per round (1, 2, 4 or 8; rounds = width / radix_bits).
        None: 8 while a round's histogram (queries × 256) has at most 2^16 entries, else the
        most bits that keep it there, at least 2 — few rounds for few queries, a small volume
        for many (a round then costs ``S·C·Q·2^bits`` counts; 8 bits: 1024 per query and
        float32 select, 2 bits: 64).

    Returns:
      ``[S, C, Q]`` values (``values``' dtype): entry ``[s, c, q]`` is the ``rank[s, q]``-th
      smallest value of column c among the rows of segment s (ties counted with multiplicity).

    Every holder must pass the same ``S``, ``C``, ``Q``, ``rank`` and ``radix_bits`` (the
    reductions pair up by position). Memory and reduction size are bounded by processing blocks
    of segments and columns (at most ~4M histogram entries each).
    """
    values = np.asarray(values)
    if values.ndim != 2 or values.dtype not in (np.float32, np.float64):
        raise ValueError(f"values must be a [p, C] float32/float64 array; got {values.dtype} "
                         f"{values.shape}")
    rank = np.asarray(rank, np.int64)
    if radix_bits is None:
        queries = rank.size * values.shape[1]
        radix_bits = next((bits for bits in (8, 4) if queries << bits <= _ROUND_ENTRIES), 2)
    if radix_bits not in (1, 2, 4, 8):
        raise ValueError(f"radix_bits must be 1, 2, 4 or 8; got {radix_bits!r}")
    num_segments, num_queries = rank.shape
    columns = values.shape[1]
    keys = float_keys(values)
    segment = np.asarray(segment, np.int64)
    per_segment = num_queries << radix_bits
    segment_block = max(1, _HISTOGRAM_BUDGET // per_segment)
    column_block = max(1, _HISTOGRAM_BUDGET // (min(num_segments, segment_block) * per_segment))
    found = np.zeros((num_segments, columns, num_queries), keys.dtype)
    for s0 in range(0, num_segments, segment_block):
        s1 = min(num_segments, s0 + segment_block)
        rows = np.flatnonzero((segment >= s0) & (segment < s1))
        local_segment = segment[rows] - s0
        for c0 in range(0, columns, column_block):
            c1 = min(columns, c0 + column_block)
            found[s0:s1, c0:c1] = _radix_select(keys[rows, c0:c1], local_segment,
                                                rank[s0:s1], reducer, radix_bits)
    return keys_to_floats(found, values.dtype)


def _radix_select(keys, segment, rank, reducer, radix_bits):
    """``[S, C, Q]`` keys of the sought ranks (one block of :func:`order_statistics`; every
    ``segment`` lies in ``0..S-1``)."""
    num_segments, num_queries = rank.shape
    width = 8 * keys.dtype.itemsize
    digits = 1 << radix_bits
    key_type = keys.dtype.type
    # counting digits by masks costs about one pass over the rows per query (all rounds), by
    # binary search in sorted keys a sort (~log p passes) and ~S·Q·2^bits·log p per round: the
    # latter wins for many queries on few, large segments (bin edges of whole columns)
    p = max(len(segment), 1)
    sorted_search = (num_queries >= _MANY_QUERIES
                     and num_segments * (digits + 1) * np.log2(p + 1) < p)
    count = (_SortedDigitCounts if sorted_search else _MaskedDigitCounts)(keys, segment,
                                                                         num_segments)
    prefix = np.zeros((num_segments, keys.shape[1], num_queries), keys.dtype)
    remaining = np.broadcast_to(rank[:, None, :], prefix.shape).copy()
    for shift in range(width - radix_bits, -1, -radix_bits):
        hist = count(prefix, shift, radix_bits, width)                  # [S, C, Q, digits]
        cumulative = np.cumsum(reducer.sum(hist), axis=-1)
        chosen = np.minimum((cumulative <= remaining[..., None]).sum(axis=-1), digits - 1)
        before = np.take_along_axis(cumulative, np.maximum(chosen - 1, 0)[..., None], -1)[..., 0]
        remaining -= np.where(chosen > 0, before, 0)
        prefix = (prefix << key_type(radix_bits)) | chosen.astype(keys.dtype)
    return prefix


class _MaskedDigitCounts:
    """Digit histograms by testing rows against each query's prefix. Each query keeps the rows
    that matched its prefix so far and tests only those in the next round: after a round of
    2^bits digits about one row in 2^bits is left, so all rounds together cost about one pass
    over the rows per query."""

    def __init__(self, keys, segment, num_segments):
        self.keys = keys.ravel()                                          # [p·C], row-major
        columns = keys.shape[1]
        # histogram slot of each (row, column) element, without the query and digit parts
        self.base = (segment[:, None] * columns + np.arange(columns)).ravel()
        self.alive = None                       # per query: elements still matching its prefix

    def __call__(self, prefix, shift, radix_bits, width):
        num_segments, columns, num_queries = prefix.shape
        digits = 1 << radix_bits
        key_type = self.keys.dtype.type
        top = shift + radix_bits
        if self.alive is None:
            self.alive = [np.arange(self.keys.size)] * num_queries
        elif top < width:                       # keep the elements whose digits so far match
            flat_prefix = prefix.reshape(-1, num_queries)
            self.alive = [alive[(self.keys[alive] >> key_type(top))
                                == flat_prefix[self.base[alive], query]]
                          for query, alive in enumerate(self.alive)]
        hist = np.zeros(num_segments * columns * num_queries * digits, np.int64)
        for query, alive in enumerate(self.alive):
            digit = ((self.keys[alive] >> key_type(shift)) & key_type(digits - 1))
            slot = (self.base[alive] * num_queries + query) * digits + digit.astype(np.int64)
            hist += np.bincount(slot, minlength=hist.size)
        return hist.reshape(prefix.shape + (digits,))


class _SortedDigitCounts:
    """Digit histograms by binary search: with each column's keys sorted and the rows of every
    segment ordered by their key's position, the rows of segment s with key below a bound are
    a prefix of s's run."""

    def __init__(self, keys, segment, num_segments):
        p = keys.shape[0]
        order = np.argsort(keys, axis=0, kind="stable")                  # [p, C]
        self.sorted_keys = np.take_along_axis(keys, order, axis=0)
        position = np.empty_like(order)
        np.put_along_axis(position, order, np.arange(p)[:, None], axis=0)
        # per column: (segment, position) of every row as one sorted int64 key
        self.by_segment = np.sort(segment[:, None] * p + position, axis=0)
        self.start = np.arange(num_segments) * p

    def __call__(self, prefix, shift, radix_bits, width):
        digits = 1 << radix_bits
        key_type = prefix.dtype.type
        top = shift + radix_bits
        base = prefix << key_type(top) if top < width else np.zeros_like(prefix)
        low_bits = key_type(np.iinfo(prefix.dtype).max) >> key_type(width - top)
        lower = base[..., None] | (np.arange(digits, dtype=prefix.dtype) << key_type(shift))
        hist = np.empty(prefix.shape + (digits,), np.int64)
        for column in range(prefix.shape[1]):
            keys = self.sorted_keys[:, column]
            below = np.concatenate(
                [np.searchsorted(keys, lower[:, column], side="left"),
                 np.searchsorted(keys, base[:, column] | low_bits, side="right")[..., None]],
                axis=-1)                                                  # [S, Q, digits + 1]
            first = self.start[:, None, None]
            in_segment = (np.searchsorted(self.by_segment[:, column], first + below)
                          - np.searchsorted(self.by_segment[:, column], first))
            hist[:, column] = np.diff(in_segment, axis=-1)
        return hist


# ---------------------------------------------------------------------------------------------
# Reproducible sums
def reproducible_sum(values: np.ndarray, reducer=LOCAL) -> np.ndarray:
    """Column sums ``[C]`` (float64) of ``values`` ``[p, C]`` over all holders, the same for
    every split of the rows into holders and every order of the rows.

    Each fold pre-rounds the values to multiples of ``u = σ·2^-52`` with ``σ`` a power of two
    above ``2·n·max|x|`` (n rows, over all holders): such pieces and all their partial sums are
    exact in float64. The residuals (at most ``u/2``) go to the next fold; the fold sums are
    added from the largest fold down.
    """
    x = np.asarray(values, np.float64)
    n = int(reducer.sum(np.array([x.shape[0]], np.int64))[0])
    bound = reducer.max(np.abs(x).max(axis=0) if x.shape[0] else np.zeros(x.shape[1]))
    total = np.zeros(x.shape[1])
    for _ in range(_FOLDS):
        # σ = 2^E > 2·n·bound (frexp: 2·n·bound = f·2^E, f in [0.5, 1)); 1 where bound = 0
        sigma = np.ldexp(1.0, np.frexp(2.0 * max(n, 1) * bound)[1])
        anchor = 1.5 * sigma
        piece = (anchor + x) - anchor
        total += reducer.sum(piece.sum(axis=0))
        x = x - piece
        bound = sigma * 2.0 ** -53
    return total


def feature_std(X: np.ndarray, reducer=LOCAL) -> np.ndarray:
    """``[D]`` standard deviation of every column of ``X`` ``[n, D]`` (over all holders), in
    ``X``'s dtype: mean and mean squared deviation by :func:`reproducible_sum`, so the result
    does not depend on how the rows are split."""
    X = np.asarray(X)
    n = int(reducer.sum(np.array([X.shape[0]], np.int64))[0])
    mean = reproducible_sum(X, reducer) / n
    variance = reproducible_sum(np.square(X.astype(np.float64) - mean), reducer) / n
    return np.sqrt(variance).astype(X.dtype)
