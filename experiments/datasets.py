"""The seven UCI datasets of the paper's Table 1, checked before use.

    X, y = load("spam")                  # bundled copy, sha256-verified: X [4601, 57] float32, y int64
    X, y = load("spam", source="uci")    # download from the UCI repository into a cache (network)

**Bundled copies** (``experiments/data/<name>.csv.gz``, provenance in ``experiments/data/README.md``):
every file's sha256 is checked against :data:`DATASETS` before it is parsed; a mismatch raises
:class:`ChecksumError` naming the file, both digests and what to do.

**Download** (``source="uci"``; for users without the bundled copies — CI and the tests never use
the network): the original files are fetched from the UCI Machine Learning Repository into
``cache_dir`` (default ``$JAXTREE_DATA`` or ``~/.cache/jaxtree``), parsed and mapped to labels
exactly as the bundled copies were, and the resulting arrays are checked against a sha256 of their
content (``X`` as little-endian float64, then ``y`` as int64; :func:`content_sha256`). So a
download is only accepted when it holds the very same numbers, in the same order, as the bundled
copy (a changed file on the UCI server raises :class:`ChecksumError`).

**Two deviations from the paper's Table 1** (details in ``experiments/data/README.md``), and how
the experiments handle them:

* **crowd**: the paper has 10546 points (8546 train + 2000 test); the UCI files hold 10545 + 300
  rows (``training.csv`` + ``testing.csv``). ``training.csv`` has 10546 *lines* with its header, so
  the paper most likely used it alone. The experiments use the 10545 ``training.csv`` rows only
  (:data:`EXPERIMENT_ROWS`), i.e. 2000 test points and at most 8545 training points: the paper's
  training size 8546 becomes **8545** (:func:`train_size`).
* **wine**: the paper counts 11 labels (the 0–10 quality scale); only the qualities 3..9 occur, so
  the data has **7** labels (quality 3 → 0, …, 9 → 6). Every method here sees the labels present
  in the data (L = 7); empty classes would change no method's prediction (a class nobody carries
  wins no vote), so the ratios are unaffected.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import os
import pathlib
import urllib.request
import zipfile
from typing import Callable

import numpy as np

DATA = pathlib.Path(__file__).parent / "data"
UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases/"


class ChecksumError(ValueError):
    """A data file (or a downloaded dataset) is not the one the experiments were run on."""


@dataclasses.dataclass(frozen=True)
class Dataset:
    """One dataset of the paper's Table 1.

    file_sha256:    sha256 of the bundled ``<name>.csv.gz``.
    content_sha256: sha256 of ``X`` (float64, little-endian) followed by ``y`` (int64), all rows.
    shape:          ``(rows, features)`` of the full file.
    num_classes:    labels present (``y`` takes every value in ``0..num_classes-1``).
    paper_train:    the paper's training-set size (Table 1).
    paper_classes:  the paper's label count (Table 1).
    urls:           the UCI files the download path reads.
    """

    file_sha256: str
    content_sha256: str
    shape: tuple
    num_classes: int
    paper_train: int
    paper_classes: int
    urls: tuple


DATASETS = {
    "spam": Dataset(
        "8975296d1fe7280c0233424176f727b02e753defcb87415e278e0007e481ae7c",
        "ac5f1044ec0e8fcde656ad01b11dcb23b294c852a64c1a0ca68be767a5e1e790",
        (4601, 57), 2, 2601, 2, (UCI + "spambase/spambase.data",)),
    "eeg": Dataset(
        "f03cf402c72214d7c353a0ee6ee3dbfd89adb8ec8de38be7776ffae21a9f0764",
        "42d8623b877a22e205e9d6110136adcb7daaf57980442cf21fbb3253f184c218",
        (14980, 14), 2, 12980, 2, (UCI + "00264/EEG%20Eye%20State.arff",)),
    "epileptic": Dataset(
        "8d93b693427f4b507f86618d717ea439dff2e88a8f7537f1bd987a9b4a60a60f",
        "939402591a387fa74db17bfb38a0908eecc5cc90bd8ca1d3e986191a572388f9",
        (11500, 178), 2, 9500, 2, (UCI + "00388/data.csv",)),
    "crowd": Dataset(
        "c551cd59f54a940cfbcc797e64e3261d59df532b4c8a4af9f9b7d014b8ae09aa",
        "c06c919a8927a6d8bf80f5b8453f6c7284bd18e87576dc0d94be627caa9a433e",
        (10845, 28), 6, 8546, 6, (UCI + "00400/Crowdsourced%20Mapping.zip",)),
    "wine": Dataset(
        "84034ad7ce99859ac9418b07ab7f3a4948865874ea77af58818f6a1217566713",
        "1401fcc9c3801ae3587daaacfd8324b8b182fa8d3b97d3bc756314eb6b52f44d",
        (6497, 12), 7, 4497, 11, (UCI + "wine-quality/winequality-red.csv",
                                  UCI + "wine-quality/winequality-white.csv")),
    "digit": Dataset(
        "fd36caa103f81320f4efd7e31c8d8165a13a230d2a1f057a729d965eadc6655b",
        "6cdf0a2dbf679d1f9599359c3da3a4a6b2430b10c4cdcdaf1ca590c4c59f2a90",
        (5620, 64), 10, 3620, 10, (UCI + "optdigits/optdigits.tra",
                                   UCI + "optdigits/optdigits.tes")),
    "letter": Dataset(
        "59525eb62663f94483d7e37f66047a7d11a55aa197e4b54dec8e55ff20e4dcad",
        "19d01463ecc357bb375d9a1fcffee59e2009c3421aa3960accba71db597f0260",
        (20000, 16), 26, 18000, 26, (UCI + "letter-recognition/letter-recognition.data",)),
}

#: Rows the experiments use (all rows unless listed): crowd keeps UCI's ``training.csv`` rows.
EXPERIMENT_ROWS = {"crowd": 10545}
#: Test points per experiment (docs/theory/protocol.md).
TEST_SIZE = 2000


def load(name: str, source: str = "bundled", cache_dir=None, experiment: bool = True
         ) -> tuple[np.ndarray, np.ndarray]:
    """``X [n, D]`` float32 and ``y [n]`` int64 (labels ``0..L-1``) of a dataset.

    Args:
      name: one of :data:`DATASETS`.
      source: ``"bundled"`` (``experiments/data``, sha256-checked) or ``"uci"`` (download into
        ``cache_dir``, content-checked; see the module docstring).
      cache_dir: download cache (default ``$JAXTREE_DATA`` or ``~/.cache/jaxtree``).
      experiment: keep only the rows the experiments use (:data:`EXPERIMENT_ROWS`; crowd: the
        10545 ``training.csv`` rows); False returns every row of the file.

    Raises:
      ValueError: unknown name or source. ChecksumError: a file or download does not match.
    """
    spec = _spec(name)
    if source == "bundled":
        X, y = _parse_csv(verified_bytes(DATA / f"{name}.csv.gz", spec.file_sha256))
    elif source == "uci":
        X, y = download(name, cache_dir)
    else:
        raise ValueError(f"source must be 'bundled' or 'uci'; got {source!r}")
    if X.shape != spec.shape:
        raise ValueError(f"{name}: expected shape {spec.shape}, got {X.shape}")
    rows = EXPERIMENT_ROWS.get(name, len(y)) if experiment else len(y)
    return X[:rows].astype(np.float32), y[:rows]


def train_size(name: str) -> int:
    """Training-set size the experiments use: the paper's, capped by the rows left after the
    :data:`TEST_SIZE` test points (crowd: 8545 instead of the paper's 8546)."""
    spec = _spec(name)
    rows = EXPERIMENT_ROWS.get(name, spec.shape[0])
    return min(spec.paper_train, rows - TEST_SIZE)


def verified_bytes(path, expected_sha256: str) -> bytes:
    """The bytes of ``path`` after checking their sha256; :class:`ChecksumError` on mismatch."""
    path = pathlib.Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; restore it from git or load with "
                                f"source='uci' to download it")
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected_sha256:
        raise ChecksumError(
            f"{path}: sha256 {digest} does not match the expected {expected_sha256}; the file "
            "is corrupt or was changed. Restore it (git checkout -- <file>) or load with "
            "source='uci' to download it again.")
    return data


def download_cache(cache_dir=None) -> pathlib.Path:
    """Where downloads are kept: ``cache_dir``, else ``$JAXTREE_DATA``, else
    ``~/.cache/jaxtree``."""
    return pathlib.Path(cache_dir or os.environ.get("JAXTREE_DATA")
                        or pathlib.Path.home() / ".cache" / "jaxtree")


def content_sha256(X: np.ndarray, y: np.ndarray) -> str:
    """sha256 of ``X`` as little-endian float64 followed by ``y`` as int64 (row-major)."""
    X = np.ascontiguousarray(X, "<f8")
    y = np.ascontiguousarray(y, "<i8")
    return hashlib.sha256(X.tobytes() + y.tobytes()).hexdigest()


def download(name: str, cache_dir=None) -> tuple[np.ndarray, np.ndarray]:
    """Fetch a dataset from the UCI repository (cached), parse it as the bundled copy was made,
    and check its content hash. Returns every row: ``X [rows, D]`` float64, ``y [rows]`` int64."""
    spec = _spec(name)
    cache = download_cache(cache_dir)
    raw = [_fetch(url, cache) for url in spec.urls]
    X, y = _PARSERS[name](raw)
    digest = content_sha256(X, y)
    if digest != spec.content_sha256:
        raise ChecksumError(
            f"{name}: the data downloaded from {', '.join(spec.urls)} (cached in {cache}) has "
            f"content sha256 {digest}, expected {spec.content_sha256}: the UCI files changed or "
            "the download is incomplete. Delete the cached files and retry, or use the bundled "
            "copies (source='bundled').")
    return X, y


# ---------------------------------------------------------------------------------------------
def _spec(name: str) -> Dataset:
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; expected one of {sorted(DATASETS)}")
    return DATASETS[name]


def _parse_csv(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Bundled format: gzip CSV with a header, last column the integer label."""
    table = np.loadtxt(io.StringIO(gzip.decompress(data).decode()), delimiter=",", skiprows=1,
                       ndmin=2)
    return table[:, :-1], table[:, -1].astype(np.int64)


def _fetch(url: str, cache: pathlib.Path) -> bytes:
    target = cache / url.rsplit("/", 1)[-1].replace("%20", "_")
    if not target.exists():
        cache.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read()
        partial = target.with_suffix(target.suffix + ".part")
        partial.write_bytes(data)
        partial.replace(target)
    return target.read_bytes()


def sorted_codes(names) -> np.ndarray:
    """Class names → ``0..L-1`` in sorted order (the bundled copies' rule)."""
    return np.unique(np.asarray(names), return_inverse=True)[1].astype(np.int64)


def _text_rows(data: bytes, sep: str = ",", skip: Callable[[str], bool] = lambda line: False):
    lines = data.decode().splitlines()
    return [line.split(sep) for line in lines if line.strip() and not skip(line)]


def _parse_spam(raw):
    table = np.array(_text_rows(raw[0]), float)
    return table[:, :-1], table[:, -1].astype(np.int64)


def _parse_eeg(raw):
    rows = _text_rows(raw[0], skip=lambda line: line.lstrip().startswith(("@", "%")))
    table = np.array(rows, float)
    return table[:, :-1], table[:, -1].astype(np.int64)


def _parse_epileptic(raw):
    rows = _text_rows(raw[0])[1:]                    # header; first column is a string id
    table = np.array([row[1:] for row in rows], float)
    return table[:, :-1], (table[:, -1] == 1).astype(np.int64)   # seizure (y = 1) vs rest


def _parse_crowd(raw):
    archive = zipfile.ZipFile(io.BytesIO(raw[0]))
    rows = []
    for part in ("training.csv", "testing.csv"):
        member = next(m for m in archive.namelist() if m.endswith(part))
        rows += _text_rows(archive.read(member))[1:]
    return (np.array([row[1:] for row in rows], float),
            sorted_codes([row[0].strip() for row in rows]))


def _parse_wine(raw):
    rows = []
    for is_red, data in ((1, raw[0]), (0, raw[1])):
        rows += [row + [is_red] for row in _text_rows(data, sep=";")[1:]]
    table = np.array([[float(v) for i, v in enumerate(row) if i != 11] for row in rows])
    quality = np.array([int(row[11]) for row in rows])
    return table, sorted_codes(quality)


def _parse_digit(raw):
    table = np.array(_text_rows(raw[0]) + _text_rows(raw[1]), float)
    return table[:, :-1], table[:, -1].astype(np.int64)


def _parse_letter(raw):
    rows = _text_rows(raw[0])
    return (np.array([row[1:] for row in rows], float),
            sorted_codes([row[0] for row in rows]))


_PARSERS = {"spam": _parse_spam, "eeg": _parse_eeg, "epileptic": _parse_epileptic,
            "crowd": _parse_crowd, "wine": _parse_wine, "digit": _parse_digit,
            "letter": _parse_letter}
