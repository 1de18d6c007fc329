"""Order statistics and sums over several holders of rows (jaxtree.collective) against sorting
and exactly rounded sums of all rows in one place; holders are threads (tests/holders.py)."""

import math

import numpy as np
import pytest

from holders import run_holders
from jaxtree import collective
from jaxtree.collective import (LOCAL, feature_std, float_keys, keys_to_floats,
                                order_statistics, reproducible_sum)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_keys_order_like_the_floats(dtype):
    values = np.array([-np.inf, -3.5, -1e-30, -0.0, 0.0, 1e-45, 2.0, 7.25, np.inf], dtype)
    keys = float_keys(values)
    assert keys.dtype.itemsize == np.dtype(dtype).itemsize
    assert np.all(np.diff(keys.astype(object)) >= 0)
    assert keys[3] == keys[4]                       # -0.0 and +0.0 are one value
    np.testing.assert_array_equal(keys_to_floats(keys, dtype), values)


def tied_values(rng, n, columns, dtype):
    values = rng.normal(size=(n, columns)) * 10.0 ** rng.integers(-3, 4, columns)
    values[: n // 3] = values[n // 3: 2 * (n // 3)]  # duplicates
    values[::7, 0] = 0.0
    values[::11, 0] = -0.0
    return values.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("segments,radix_bits", [(9, 8), (9, 2), (1, 8), (1, 4)])
@pytest.mark.parametrize("counting", ["masks", "binary search"])
def test_order_statistics_equal_sorting_over_holders(dtype, segments, radix_bits, counting,
                                                     monkeypatch):
    """Segmented and whole-column ranks, 1 and 3 holders, digits counted either way (each
    holder picks a way by cost; here one is forced), against np.sort of all rows."""
    chosen = {"masks": collective._MaskedDigitCounts,
              "binary search": collective._SortedDigitCounts}[counting]
    monkeypatch.setattr(collective, "_MaskedDigitCounts", chosen)
    monkeypatch.setattr(collective, "_SortedDigitCounts", chosen)
    rng = np.random.default_rng(segments + radix_bits)
    n = 2000
    values = tied_values(rng, n, 3, dtype)
    segment = rng.integers(-1, segments, n)          # -1: rows that take no part
    count = np.bincount(segment[segment >= 0], minlength=segments)
    queries = 40 if segments == 1 else 4
    rank = np.sort(rng.integers(0, np.maximum(count, 1)[:, None], (segments, queries)), axis=1)
    rank[:, 0], rank[:, -1] = 0, count - 1            # the extremes
    expected = np.empty((segments, 3, queries), dtype)
    for s in range(segments):
        ordered = np.sort(values[segment == s], axis=0)
        expected[s] = ordered[rank[s]].T
    for holders in (1, 3):
        found = run_holders(holders, lambda v, g, r: order_statistics(v, g, rank, r, radix_bits),
                            values, segment)
        for result in found:
            np.testing.assert_array_equal(result, expected)
    np.testing.assert_array_equal(order_statistics(values, segment, rank, LOCAL, radix_bits),
                                  expected)


def test_order_statistics_rejects_bad_input():
    with pytest.raises(ValueError, match="radix_bits"):
        order_statistics(np.zeros((3, 1)), np.zeros(3, int), np.zeros((1, 1), int), LOCAL, 3)
    with pytest.raises(ValueError, match="values"):
        order_statistics(np.zeros(3), np.zeros(3, int), np.zeros((1, 1), int))


def test_reproducible_sum_does_not_depend_on_the_split_or_order():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5001, 4)) * 10.0 ** np.array([-8, 0, 5, 12])
    x[:, 3] += 1e20                                     # cancellation-prone column
    exact = np.array([math.fsum(column) for column in x.T])
    one = reproducible_sum(x)
    np.testing.assert_array_equal(one, exact)           # here even exactly rounded
    shuffled = x[rng.permutation(len(x))]
    for holders in (2, 5):
        for result in run_holders(holders, reproducible_sum, shuffled):
            np.testing.assert_array_equal(result, one)


def test_feature_std_is_split_invariant_and_close_to_numpy(precision):
    rng = np.random.default_rng(1)
    X = (rng.normal(size=(999, 3)) * [1e-3, 1.0, 1e4] + [5.0, -2.0, 1e5]).astype(precision)
    X[:, 1] = 7.0                                       # constant column
    std = feature_std(X)
    assert std.dtype == precision and std[1] == 0
    np.testing.assert_allclose(std, X.astype(np.float64).std(axis=0), rtol=1e-6)
    for result in run_holders(4, feature_std, X):
        np.testing.assert_array_equal(result, std)
