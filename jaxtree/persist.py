"""Saving a fitted estimator as a plain ``.npz`` file and reading it back, without pickle.

    model.save("model.npz")            # any fitted jaxtree estimator
    model = jaxtree.load("model.npz")  # on another machine: same predict_proba

A model file is a NumPy ``.npz`` archive. Its arrays are the estimator's fitted arrays (the tree,
its layout, the node statistics and weights, ``classes_``, ...), one ``.npy`` member each; one
more member, ``__jaxtree__``, holds a JSON document (UTF-8 bytes in a uint8 array) with
everything else: the estimator's class name and constructor parameters, the structure of the
fitted attributes (which dataclass, list, dict or scalar holds which array), the format
version, the name, dtype and shape of every array, and a SHA-256 checksum. One code path serves
every estimator: a fitted model is its constructor parameters plus its instance attributes.

Reading uses ``np.load(..., allow_pickle=False)`` and builds only the jaxtree estimator classes
and the dataclasses in :data:`DATACLASSES` from JSON values and arrays, so a file from elsewhere
runs no code. :func:`load` refuses, with a ``ValueError`` that says what is wrong, a file that is
not a zip archive or is truncated, one without the JSON member, one of another format version, a
missing, extra or wrongly typed array, and a file whose checksum does not match (corrupted or
edited after saving). The checksum detects accidents and naive edits, not a forger who
recomputes it: sign the file where authenticity matters.

Arrays keep their dtype (a model fitted under x64 stores float64); JAX arrays come back as JAX
arrays, NumPy arrays and scalars as NumPy ones. Object arrays of strings (``classes_`` of string
labels given as objects, ``feature_names_in_``) are stored as fixed-width Unicode and restored as
object arrays.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.utils.validation import check_is_fitted

from jaxtree.compact import CompactLayout
from jaxtree.fitting import FittedTree
from jaxtree.layout import CompleteLayout
from jaxtree.select import GridSearchResult
from jaxtree.stats import NodeStats
from jaxtree.tree import Tree

FORMAT = "jaxtree-model"
FORMAT_VERSION = 1
DOCUMENT_KEY = "__jaxtree__"
DATACLASSES = {cls.__name__: cls for cls in (Tree, NodeStats, CompleteLayout, CompactLayout,
                                             FittedTree, GridSearchResult)}


def save(model, path) -> None:
    """Write the fitted estimator ``model`` to ``path`` (a file name, written as given, or a
    binary file object). Raises ``NotFittedError`` before ``fit`` and ``TypeError`` for a fitted
    attribute of a type the format does not hold."""
    from jaxtree import __version__  # here: jaxtree/__init__ imports this module
    check_is_fitted(model)
    params = model.get_params(deep=False)
    fitted = {name: value for name, value in vars(model).items() if name not in params}
    arrays: dict[str, np.ndarray] = {}
    document = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "jaxtree_version": __version__,
        "estimator": type(model).__name__,
        "params": _encode(params, "params", arrays),
        "attributes": _encode(fitted, "attributes", arrays),
    }
    document["arrays"] = {key: {"dtype": a.dtype.str, "shape": list(a.shape)}
                          for key, a in arrays.items()}
    document["sha256"] = _checksum(document, arrays)
    members = {**arrays, DOCUMENT_KEY: np.frombuffer(json.dumps(document).encode(), np.uint8)}
    if hasattr(path, "write"):
        np.savez(path, **members)
    else:
        with open(path, "wb") as file:  # np.savez(name) would append ".npz" to another suffix
            np.savez(file, **members)


def load(path):
    """Read an estimator written by :func:`save` (``model.save(path)``); returns it fitted.

    Args:
      path: a file name or a binary file object.

    Returns:
      the estimator (:class:`jaxtree.PACBayesTreeClassifier` or another of
      :mod:`jaxtree.estimators`, a regressor, or :class:`jaxtree.PACBayesForestClassifier`),
      with its parameters and fitted attributes as saved: it predicts exactly as the saved one
      did.

    Raises:
      ValueError: for a file that is not a saved jaxtree model, or is damaged (checksum).

    Example:
        >>> import os
        >>> import tempfile
        >>> import numpy as np
        >>> import jaxtree
        >>> X = np.arange(8.0)[:, None]
        >>> y = np.array([0, 0, 1, 0, 1, 1, 1, 1])
        >>> model = jaxtree.PACBayesTreeClassifier(max_depth=2, lam1=4.0, lam2=1.0).fit(X, y)
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = os.path.join(folder, "model.npz")
        ...     model.save(path)
        ...     loaded = jaxtree.load(path)
        >>> type(loaded).__name__, loaded.predict(X).tolist()
        ('PACBayesTreeClassifier', [0, 0, 0, 0, 1, 1, 1, 1])
        >>> bool(np.array_equal(loaded.predict_proba(X), model.predict_proba(X)))
        True
    """
    from jaxtree.estimators import estimator_classes
    from jaxtree.forest import PACBayesForestClassifier
    from jaxtree.regression import REGRESSORS
    document, arrays = _read(path)
    classes = {**estimator_classes(), **REGRESSORS,
               "PACBayesForestClassifier": PACBayesForestClassifier}
    name = document.get("estimator")
    if name not in classes:
        raise ValueError(f"{path}: unknown estimator {name!r}; this jaxtree has "
                         f"{sorted(classes)}")
    try:
        params = _decode(document["params"], arrays)
        attributes = _decode(document["attributes"], arrays)
        model = classes[name](**params)
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{path}: malformed model description ({error!r})") from error
    vars(model).update(attributes)
    return model


# ---------------------------------------------------------------------------------------------
def _read(path) -> tuple[dict, dict]:
    """The JSON document and the arrays of a model file, after every integrity check."""
    try:
        archive = np.load(path, allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise ValueError("a single array, not an .npz archive")
        with archive:
            arrays = {key: archive[key] for key in archive.files}
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as error:
        raise ValueError(f"{path} is not a readable jaxtree model file; it may be truncated or "
                         f"corrupted ({type(error).__name__}: {error})") from error
    raw = arrays.pop(DOCUMENT_KEY, None)
    if raw is None:
        raise ValueError(f"{path} is not a jaxtree model file (no {DOCUMENT_KEY} member)")
    try:
        document = json.loads(raw.tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: the model description is corrupted ({error})") from error
    _check_version(path, document)
    expected = document.get("arrays")
    if not isinstance(expected, dict) or set(arrays) != set(expected):
        expected = expected if isinstance(expected, dict) else {}
        raise ValueError(f"{path}: the arrays do not match the model description (missing "
                         f"{sorted(set(expected) - set(arrays))}, unexpected "
                         f"{sorted(set(arrays) - set(expected))})")
    for key, spec in expected.items():
        found = {"dtype": arrays[key].dtype.str, "shape": list(arrays[key].shape)}
        if found != spec:
            raise ValueError(f"{path}: array {key!r} is {found['dtype']} {found['shape']}, the "
                             f"model description says {spec}")
    body = {k: v for k, v in document.items() if k != "sha256"}
    if document.get("sha256") != _checksum(body, arrays):
        raise ValueError(f"{path}: checksum mismatch; the file was modified or corrupted after "
                         "it was saved")
    return document, arrays


def _check_version(path, document) -> None:
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError(f"{path} is not a jaxtree model file (format "
                         f"{document.get('format') if isinstance(document, dict) else None!r})")
    version = document.get("format_version")
    if version != FORMAT_VERSION:
        raise ValueError(f"{path} was written in jaxtree model format version {version!r} (by "
                         f"jaxtree {document.get('jaxtree_version')}); this jaxtree reads version "
                         f"{FORMAT_VERSION}. Load it with the jaxtree version that wrote it, or "
                         "refit the model")


def _checksum(document: dict, arrays: dict) -> str:
    digest = hashlib.sha256(json.dumps(document, sort_keys=True).encode())
    for key in sorted(arrays):
        a = np.ascontiguousarray(arrays[key])
        digest.update(f"{key}|{a.dtype.str}|{a.shape}|".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def _encode(value, key: str, arrays: dict):
    """A JSON node for ``value``; its arrays are added to ``arrays`` under names from ``key``."""
    if isinstance(value, np.generic):   # before float: np.float64 is a float subclass
        return {"scalar": _store(np.asarray(value), key, arrays)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    if isinstance(value, (np.ndarray, jax.Array)):
        array = np.asarray(value)
        node = {"array": None, "jax": isinstance(value, jax.Array)}
        if array.dtype == object:
            if not all(isinstance(item, str) for item in array.flat):
                raise TypeError(f"cannot save {key}: an object array that does not hold only "
                                "strings")
            array, node["object"] = array.astype(str), True
        node["array"] = _store(array, key, arrays)
        return node
    if isinstance(value, (list, tuple)):
        items = [_encode(item, f"{key}.{i}", arrays) for i, item in enumerate(value)]
        return {"tuple" if isinstance(value, tuple) else "list": items}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"cannot save {key}: a dict with keys that are not strings")
        return {"dict": {k: _encode(v, f"{key}.{k}", arrays) for k, v in value.items()}}
    if type(value) in DATACLASSES.values():
        return {"dataclass": type(value).__name__,
                "fields": {f.name: _encode(getattr(value, f.name), f"{key}.{f.name}", arrays)
                           for f in dataclasses.fields(value)}}
    raise TypeError(f"cannot save {key} of type {type(value).__name__}: the model format holds "
                    f"arrays, scalars, strings, lists, dicts and {sorted(DATACLASSES)}")


def _store(array: np.ndarray, key: str, arrays: dict) -> str:
    if key in arrays or key == DOCUMENT_KEY:
        raise TypeError(f"cannot save {key}: two values would share that name")
    arrays[key] = array
    return key


def _decode(node: dict, arrays: dict):
    """The value of a JSON node written by :func:`_encode`."""
    if "value" in node:
        return node["value"]
    if "scalar" in node:
        return arrays[node["scalar"]][()]
    if "array" in node:
        array = arrays[node["array"]]
        if node.get("object"):
            array = array.astype(object)
        return jnp.asarray(array) if node["jax"] else array
    if "list" in node:
        return [_decode(item, arrays) for item in node["list"]]
    if "tuple" in node:
        return tuple(_decode(item, arrays) for item in node["tuple"])
    if "dict" in node:
        return {k: _decode(v, arrays) for k, v in node["dict"].items()}
    if "dataclass" in node:
        cls = DATACLASSES[node["dataclass"]]
        return cls(**{name: _decode(v, arrays) for name, v in node["fields"].items()})
    raise ValueError(f"unknown node {sorted(node)}")
