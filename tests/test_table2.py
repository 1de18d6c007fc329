"""A tiny end-to-end run of the Table 2 script, and the tree padding it uses to share shapes."""

import dataclasses
import json
import math

import numpy as np
import pytest

from experiments import table2


def _tiny_run(partitions, methods):
    config = dataclasses.replace(
        table2.quick_config(("eeg",)), base_grid=(0.25, 4.0), linear_size=2, max_train=120,
        test_size=60, partitions=partitions, methods=methods)
    records = table2.run_experiment(config, show_progress=False)
    assert sorted({(r["partition"], r["method"]) for r in records}) == sorted(
        (p, m) for p in partitions for m in methods)            # eeg is binary: HS runs
    return config, records


def test_tiny_end_to_end_run_writes_the_table(tmp_path):
    config, records = _tiny_run(("dyadic",), ("c1", "pacbayes", "hs", "rep"))
    for r in records:
        assert r["n_train"] == 120 and r["n_test"] == 60
        assert 0 <= r["test_error"] <= 1 and 0 <= r["cv_error"] <= 1
        assert math.isfinite(r["ratio"]) and r["ratio"] >= 0
        assert all(v > 0 for v in r["params"].values())
        assert (r["params"] == {}) == (r["method"] == "rep")   # REP: nothing to tune
    assert all(r["ratio"] == 1 for r in records if r["method"] == "c1")
    md = table2.write_results(records, config, "t2", "pytest", 1.0, out_dir=tmp_path)
    text = md.read_text()
    assert "| eeg |" in text and "(0.993)" in text   # ours beside the paper's PAC-Bayes ratio
    assert "Command: `pytest`" in text
    assert "| dataset | dyadic REP |" in text             # the other methods' ratio table
    saved = json.loads((tmp_path / "t2.json").read_text())
    assert saved["meta"]["config"]["max_train"] == 120 and len(saved["runs"]) == len(records)
    assert len((tmp_path / "t2.csv").read_text().splitlines()) == len(records) + 1
    assert "Partial" not in text
    unfinished = dataclasses.replace(config, datasets=("eeg", "wine"))
    text = table2.write_results(records, unfinished, "t3", "pytest", 1.0, tmp_path).read_text()
    assert "**Partial results** (run interrupted or in progress): finished eeg of eeg, wine" in text


@pytest.mark.slow
def test_tiny_run_of_the_hold_out_and_size_methods(tmp_path):
    config, records = _tiny_run(("kd",), ("c1", "rep", "min_size_cv", "min_size_srm"))
    for r in records:
        assert 0 <= r["test_error"] <= 1 and 0 <= r["cv_error"] <= 1
        assert math.isfinite(r["ratio"])
        assert r["params"] == {} if r["method"] in ("rep", "min_size_cv") else set(r["params"]) \
            in ({"lam"}, {"c"})
    text = table2.write_results(records, config, "t4", "pytest", 1.0, tmp_path).read_text()
    assert "| dataset | KD REP | KD min-size CV | KD min-size SRM |" in text


@pytest.mark.slow
def test_tiny_run_of_every_method_and_partition():
    _, records = _tiny_run(table2.PARTITIONS, tuple(table2.METHODS))
    assert all(math.isfinite(r["ratio"]) for r in records)


def test_splits_are_disjoint_and_seeded():
    train, test = table2.split_indices(100, 70, 30, seed=3)
    assert len(set(train) | set(test)) == 100
    again, _ = table2.split_indices(100, 70, 30, seed=3)
    np.testing.assert_array_equal(train, again)
    with pytest.raises(ValueError, match="exceed"):
        table2.split_indices(100, 80, 30, seed=0)


def test_paper_depth():
    assert table2.paper_depth("dyadic", 2601, 57) == 7 * 57          # spam: 399 levels
    assert table2.paper_depth("kd", 2601, 57) == 12
