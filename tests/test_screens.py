"""The wide benchmark's screens compute what their help says."""

import math

import numpy as np
import pytest

from experiments import benchmark_suite, selection_screens
from jaxtree.stats import NodeStats


@pytest.mark.parametrize("kind", ["log_loss", "marginal"])
def test_leaf_error_patch_gives_each_nodes_likelihood(monkeypatch, kind):
    counts = np.array([[3.0, 1.0, 0.0], [0.0, 0.0, 0.0], [5.0, 5.0, 2.0]], np.float32)
    monkeypatch.setattr(NodeStats, "errors", NodeStats.errors)   # restored after the test
    benchmark_suite._set_leaf_error(kind, alpha=0.5)
    got = np.asarray(NodeStats(counts=counts, label=np.zeros(3, np.int32)).errors)
    want = []
    for row in counts:
        total, classes = row.sum(), len(row)
        if kind == "log_loss":
            want.append(-sum(c * math.log((c + 0.5) / (total + classes * 0.5)) for c in row))
        else:   # the Dirichlet(½)-multinomial's sequential predictive, one label at a time
            seen, log_ml = np.zeros(classes), 0.0
            for label in np.repeat(np.arange(classes), row.astype(int)):
                log_ml += math.log((seen[label] + 0.5) / (seen.sum() + classes * 0.5))
                seen[label] += 1
            want.append(-log_ml)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert got[1] == 0.0 and got[2] > got[0] > 0


def test_a_setting_chosen_on_half_the_points_is_scored_on_the_other_half():
    rng = np.random.default_rng(0)
    always_right = np.zeros(40, bool)
    noisy = rng.random((5, 40)) < 0.3
    # a setting right on every point is chosen on any half, and scores 0 on the other
    assert selection_screens._chosen_on_half(np.vstack([noisy, always_right])) == 0.0
    # otherwise the score lies between the settings' least and largest error, and differs from
    # the least one: it is scored on points the choice did not see
    score = selection_screens._chosen_on_half(noisy)
    assert noisy.mean(axis=1).min() < score <= noisy.mean(axis=1).max()


def test_heldout_parse_codes_categories_in_sorted_order_and_keeps_numbers():
    from experiments import heldout
    text = "1.5, b, yes\n-2, a ,no\n\n0, c, yes\n"
    X, y = heldout.parse(text)
    np.testing.assert_array_equal(X, [[1.5, 1.0], [-2.0, 0.0], [0.0, 2.0]])
    np.testing.assert_array_equal(y, [1, 0, 1])     # "no" < "yes"
    assert X.dtype == np.float64


def test_heldout_suite_leaves_out_the_tuning_suites_datasets():
    import zipfile

    from experiments import heldout
    raw = [f"{heldout.RAW}{name}.dat" for name in ("iris", "pima", "wdbc", "vowel")]
    archive = zipfile.ZipFile(_zip_with(raw))
    assert heldout.names(archive) == ["pima", "vowel"]


def _zip_with(paths):
    import io
    import zipfile
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in paths:
            archive.writestr(path, "0,0\n")
    buffer.seek(0)
    return buffer


def test_problems_interval_brackets_the_geometric_mean_and_narrows_with_more_problems():
    """The bootstrap interval of the benchmark's geometric-mean ratio: around the point estimate,
    reproducible (fixed seed), a point for identical ratios, narrower for 4x the problems."""
    rng = np.random.default_rng(1)
    few = rng.normal(0.0, 0.1, 20)
    low, high = benchmark_suite.problems_interval(few)
    assert low < np.exp(few.mean()) < high
    assert benchmark_suite.problems_interval(few) == [low, high]
    assert benchmark_suite.problems_interval(np.full(9, np.log(0.9))) == pytest.approx([0.9, 0.9])
    many_low, many_high = benchmark_suite.problems_interval(np.tile(few, 4))   # same spread
    assert many_high - many_low < 0.7 * (high - low)                         # about half
