"""Persistence: pickle, joblib and the pickle-free ``.npz`` format (:mod:`jaxtree.persist`) give
back the same model; a damaged, edited or foreign file is refused with a clear error."""

import copy
import functools
import json
import pickle

import jax
import joblib
import numpy as np
import pytest
from sklearn.base import clone

import jaxtree
from jaxtree import persist
from small_models import small_data, small_estimators


def data():
    """small_data's points (the shapes other tests compiled for) with labels given as objects."""
    X, y = small_data()
    return X, np.array(["low", "high"], dtype=object)[y]


MODELS = {   # every estimator, plus the variants whose fitted state differs
    **{type(e).__name__: e for e in small_estimators()},
    # a compact layout (CART T0) and CV-tuned λ1 (best_params_, cv_results_)
    "tuned-cart": jaxtree.PACBayesTreeClassifier(partition="cart", lam2=1.0, max_depth=6),
    "pacbayes-vote-oblique": jaxtree.ObliqueTreeClassifier(
        max_depth=2, n_restarts=1, n_jumps=1, n_cycles=1, vote="pacbayes"),
    # a hold-out pruning: errors_per_size_ and size_ (slow: its own compilations)
    "min-size-cv": jaxtree.PrunedTreeClassifier(method="min_size", selection="cv", max_depth=4),
}
MODEL_NAMES = [pytest.param(name, marks=pytest.mark.slow) if name == "min-size-cv" else name
               for name in MODELS]


@pytest.fixture(scope="module")
def fitted():
    """``fitted(name)``: the model fitted on :func:`data`, once per module."""
    X, y = data()
    return functools.cache(lambda name: clone(MODELS[name]).fit(X, y))


def assert_same_model(loaded, model):
    X = small_data(seed=1)[0]
    assert type(loaded) is type(model)
    assert loaded.get_params() == model.get_params()
    assert set(vars(loaded)) == set(vars(model))
    for name, value in vars(model).items():   # same kinds of values: JAX arrays stay JAX arrays
        assert type(getattr(loaded, name)) is type(value), name
    np.testing.assert_array_equal(loaded.classes_, model.classes_)
    np.testing.assert_array_equal(loaded.predict_proba(X), model.predict_proba(X))
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_save_and_load_give_the_same_model(fitted, name, tmp_path):
    model = fitted(name)
    path = tmp_path / "model.jaxtree"
    model.save(path)
    assert path.exists() and not (tmp_path / "model.jaxtree.npz").exists()
    assert_same_model(jaxtree.load(path), model)
    with np.load(path, allow_pickle=False) as archive:   # a plain archive: no pickled member
        assert persist.DOCUMENT_KEY in archive.files


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_pickle_and_joblib_give_the_same_model(fitted, name, tmp_path):
    model = fitted(name)
    assert_same_model(pickle.loads(pickle.dumps(model)), model)
    joblib.dump(model, tmp_path / "model.joblib")
    assert_same_model(joblib.load(tmp_path / "model.joblib"), model)


def test_the_compact_layout_and_tuning_results_survive(fitted, tmp_path):
    model = fitted("tuned-cart")
    assert isinstance(model.tree_.layout, jaxtree.CompactLayout)
    model.save(tmp_path / "m.npz")
    loaded = jaxtree.load(tmp_path / "m.npz")
    assert isinstance(loaded.tree_.layout, jaxtree.CompactLayout)
    np.testing.assert_array_equal(loaded.tree_.layout.child_pos, model.tree_.layout.child_pos)
    assert loaded.best_params_ == model.best_params_
    assert loaded.cv_results_["params"] == model.cv_results_["params"]
    np.testing.assert_array_equal(loaded.cv_results_["mean_test_score"],
                                  model.cv_results_["mean_test_score"])


def test_a_float64_model_keeps_its_precision(tmp_path):
    X, y = data()
    with jax.enable_x64(True):
        model = clone(MODELS["PACBayesTreeClassifier"]).fit(X, y)
        model.save(tmp_path / "m.npz")
        loaded = jaxtree.load(tmp_path / "m.npz")
        assert loaded.tree_.threshold.dtype == np.float64
        np.testing.assert_array_equal(loaded.predict_proba(X), model.predict_proba(X))


# ---------------------------------------------------------------------------------------------
# refusing bad files
def rewrite(path, change):
    """Rewrite the archive at ``path`` after ``change(members, document)`` (in place)."""
    with np.load(path, allow_pickle=False) as archive:
        members = {key: archive[key] for key in archive.files}
    document = json.loads(members.pop(persist.DOCUMENT_KEY).tobytes())
    change(members, document)
    members[persist.DOCUMENT_KEY] = np.frombuffer(json.dumps(document).encode(), np.uint8)
    with open(path, "wb") as file:
        np.savez(file, **members)


def resign(document, members):
    """Recompute the checksum, so that a test reaches the check after it."""
    body = {k: v for k, v in document.items() if k != "sha256"}
    document["sha256"] = persist._checksum(body, members)


@pytest.fixture
def saved(fitted, tmp_path):
    path = tmp_path / "model.npz"
    fitted("PACBayesTreeClassifier").save(path)
    return path


def test_a_model_saved_before_depth_capped_was_counted_loads(saved, fitted):
    """A file whose fitted pytree has no ``depth_capped`` (written before the layout's depth
    ladder) loads as the same model with ``depth_capped`` None."""
    def drop(node):
        if isinstance(node, dict):
            node.get("fields", {}).pop("depth_capped", None)
            for value in node.values():
                drop(value)
        elif isinstance(node, list):
            for value in node:
                drop(value)

    def change(members, document):
        dropped = [key for key in members if key.endswith(".depth_capped")]
        assert dropped                       # the field is saved today
        for key in dropped:
            del members[key]
            del document["arrays"][key]
        drop(document)
        resign(document, members)
    rewrite(saved, change)
    loaded = jaxtree.load(saved)
    assert loaded.fitted_tree_.depth_capped is None
    X = small_data(seed=1)[0]
    np.testing.assert_array_equal(loaded.predict_proba(X),
                                  fitted("PACBayesTreeClassifier").predict_proba(X))


def test_a_tampered_array_is_refused(saved):
    def change(members, document):
        members["attributes.node_log_weights_"] = members["attributes.node_log_weights_"] + 1
    rewrite(saved, change)
    with pytest.raises(ValueError, match="checksum mismatch"):
        jaxtree.load(saved)


def test_a_tampered_parameter_is_refused(saved):
    def change(members, document):
        document["params"]["dict"]["lam1"]["value"] = 7.0
    rewrite(saved, change)
    with pytest.raises(ValueError, match="checksum mismatch"):
        jaxtree.load(saved)


def test_a_truncated_file_is_refused(saved):
    content = saved.read_bytes()
    for size in (len(content) // 2, len(content) - 10, 0):
        saved.write_bytes(content[:size])
        with pytest.raises(ValueError, match="truncated or corrupted"):
            jaxtree.load(saved)


def test_another_format_version_is_refused(saved):
    def change(members, document):
        document["format_version"] = persist.FORMAT_VERSION + 1
        resign(document, members)
    rewrite(saved, change)
    with pytest.raises(ValueError, match=f"format version {persist.FORMAT_VERSION + 1}.*reads "
                                         f"version {persist.FORMAT_VERSION}"):
        jaxtree.load(saved)


def test_a_missing_or_retyped_array_is_refused(saved, tmp_path):
    key = "attributes.tree_.threshold"
    missing = tmp_path / "missing.npz"
    missing.write_bytes(saved.read_bytes())
    rewrite(missing, lambda members, document: members.pop(key))
    with pytest.raises(ValueError, match=rf"missing \['{key}'\]"):
        jaxtree.load(missing)

    def retype(members, document):
        members[key] = members[key].astype(np.float16)
    rewrite(saved, retype)
    with pytest.raises(ValueError, match=f"array '{key}' is <f2"):
        jaxtree.load(saved)


def test_foreign_files_are_refused(tmp_path):
    other = tmp_path / "other.npz"
    np.savez(other, weights=np.ones(3))
    with pytest.raises(ValueError, match="not a jaxtree model file"):
        jaxtree.load(other)
    single = tmp_path / "single.npy"
    np.save(single, np.ones(3))
    with pytest.raises(ValueError, match="not a readable jaxtree model file"):
        jaxtree.load(single)
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(ValueError, match="not a readable jaxtree model file"):
        jaxtree.load(tmp_path / "text.npz")


def test_an_unknown_estimator_is_refused(saved):
    def change(members, document):
        document["estimator"] = "os.system"
        resign(document, members)
    rewrite(saved, change)
    with pytest.raises(ValueError, match="unknown estimator 'os.system'"):
        jaxtree.load(saved)


def test_save_needs_a_fitted_model_and_supported_attributes(fitted, tmp_path):
    with pytest.raises(jaxtree.NotFittedError):
        jaxtree.PACBayesTreeClassifier().save(tmp_path / "m.npz")
    model = copy.copy(fitted("PACBayesTreeClassifier"))
    model.callback_ = print
    with pytest.raises(TypeError, match="cannot save attributes.callback_ of type"):
        model.save(tmp_path / "m.npz")
