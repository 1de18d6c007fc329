"""The dataset loader: checksums, shapes, dtypes, label ranges, and the download parsers (offline:
the UCI files are re-created from the bundled data, so no test touches the network)."""

import io
import shutil
import zipfile

import numpy as np
import pytest

from experiments import datasets

EXPECTED = {  # rows used by the experiments, features, labels, paper's training size
    "spam": (4601, 57, 2, 2601), "eeg": (14980, 14, 2, 12980), "epileptic": (11500, 178, 2, 9500),
    "crowd": (10545, 28, 6, 8545), "wine": (6497, 12, 7, 4497), "digit": (5620, 64, 10, 3620),
    "letter": (20000, 16, 26, 18000),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_load_shapes_dtypes_and_labels(name):
    X, y = datasets.load(name)
    rows, features, labels, train = EXPECTED[name]
    assert X.shape == (rows, features) and y.shape == (rows,)
    assert X.dtype == np.float32 and np.issubdtype(y.dtype, np.integer)
    assert np.isfinite(X).all()
    assert np.array_equal(np.unique(y), np.arange(labels))       # every label 0..L-1 occurs
    assert datasets.train_size(name) == train
    assert train + datasets.TEST_SIZE <= rows


def test_crowd_keeps_training_csv_rows_only():
    X, y = datasets.load("crowd")
    X_all, y_all = datasets.load("crowd", experiment=False)
    assert X_all.shape == (10845, 28)
    np.testing.assert_array_equal(X, X_all[:10545])
    np.testing.assert_array_equal(y, y_all[:10545])
    # training.csv's class counts (experiments/data/README.md): farm 1441, forest 7431, ...
    assert np.bincount(y).tolist() == [1441, 7431, 446, 969, 53, 205]


def test_changed_byte_fails_the_checksum(tmp_path, monkeypatch):
    shutil.copy(datasets.DATA / "wine.csv.gz", tmp_path / "wine.csv.gz")
    data = bytearray((tmp_path / "wine.csv.gz").read_bytes())
    data[len(data) // 2] ^= 0x01
    (tmp_path / "wine.csv.gz").write_bytes(bytes(data))
    monkeypatch.setattr(datasets, "DATA", tmp_path)
    with pytest.raises(datasets.ChecksumError, match=r"wine\.csv\.gz: sha256 [0-9a-f]{64} does "
                                                     r"not match the expected 84034ad7"):
        datasets.load("wine")


def test_intact_copy_loads_and_missing_file_is_explained(tmp_path, monkeypatch):
    shutil.copy(datasets.DATA / "wine.csv.gz", tmp_path / "wine.csv.gz")
    monkeypatch.setattr(datasets, "DATA", tmp_path)
    X, y = datasets.load("wine")
    assert X.shape == (6497, 12)
    with pytest.raises(FileNotFoundError, match="digit.csv.gz is missing"):
        datasets.load("digit")


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown dataset 'iris'"):
        datasets.load("iris")
    with pytest.raises(ValueError, match="source must be"):
        datasets.load("spam", source="web")


# ---------------------------------------------------------------------------------------------
# Download path, offline: write the bundled data in each UCI file format, parse, check the hash.
def _bundled(name):
    spec = datasets.DATASETS[name]
    return datasets._parse_csv(datasets.verified_bytes(datasets.DATA / f"{name}.csv.gz",
                                                       spec.file_sha256))


def _rows(X, extra_front=None, extra_back=None, sep=","):
    lines = []
    for i, row in enumerate(X):
        values = [repr(float(v)) for v in row]
        values = ([extra_front[i]] if extra_front is not None else []) + values
        values = values + ([extra_back[i]] if extra_back is not None else [])
        lines.append(sep.join(values))
    return lines


def _uci_files(name, X, y):
    """The files of ``spec.urls`` as UCI serves them (formats as documented by UCI)."""
    ints = [str(v) for v in y]
    if name in ("spam", "digit"):
        lines = _rows(X, extra_back=ints)
        if name == "spam":
            return ["\n".join(lines).encode()]
        return ["\n".join(lines[:3823]).encode(), "\n".join(lines[3823:]).encode()]
    if name == "eeg":
        head = ["@RELATION EEG"] + [f"@ATTRIBUTE f{i} NUMERIC" for i in range(14)] + ["@DATA"]
        return ["\n".join(head + _rows(X, extra_back=ints)).encode()]
    if name == "epileptic":
        head = ",".join(["id"] + [f"X{i}" for i in range(1, 179)] + ["y"])
        code = ["1" if v == 1 else str(2 + i % 4) for i, v in enumerate(y)]
        ids = [f'"X{i}.V1.{i}"' for i in range(len(y))]
        return ["\n".join([head] + _rows(X, ids, code)).encode()]
    if name == "crowd":
        classes = np.array(["farm", "forest", "grass", "impervious", "orchard", "water"])[y]
        lines = ["class,max_ndvi," + ",".join(f"d{i}_N" for i in range(27))] * 2
        rows = _rows(X, extra_front=classes)
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("training.csv", "\n".join([lines[0]] + rows[:10545]))
            archive.writestr("testing.csv", "\n".join([lines[1]] + rows[10545:]))
        return [buffer.getvalue()]
    if name == "wine":
        quality = [str(v + 3) for v in y]
        red = X[:, 11] == 1
        head = ";".join(f'"f{i}"' for i in range(11)) + ';"quality"'
        lines = _rows(X[:, :11], extra_back=quality, sep=";")
        return ["\n".join([head] + [l for l, r in zip(lines, red) if r]).encode(),
                "\n".join([head] + [l for l, r in zip(lines, red) if not r]).encode()]
    letters = [chr(ord("A") + v) for v in y]
    return ["\n".join(_rows(X, extra_front=letters)).encode()]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "epileptic"
                                  else n for n in sorted(EXPECTED)])
def test_download_parsers_reproduce_the_bundled_content(name, tmp_path, monkeypatch):
    X, y = _bundled(name)
    files = dict(zip(datasets.DATASETS[name].urls, _uci_files(name, X, y)))
    monkeypatch.setattr(datasets, "_fetch", lambda url, cache: files[url])
    X2, y2 = datasets.load(name, source="uci", cache_dir=tmp_path, experiment=False)
    np.testing.assert_array_equal(X2, X.astype(np.float32))
    np.testing.assert_array_equal(y2, y)


def test_download_with_other_content_is_refused(tmp_path, monkeypatch):
    X, y = _bundled("wine")
    files = _uci_files("wine", X, y)
    files[0] = files[0].replace(b"7.4;", b"7.5;", 1)
    monkeypatch.setattr(datasets, "_fetch", lambda url, cache: files.pop(0))
    with pytest.raises(datasets.ChecksumError, match="wine: the data downloaded from"):
        datasets.load("wine", source="uci", cache_dir=tmp_path)
