"""The documentation cannot rot: the Sphinx site builds with warnings as errors, and every
tutorial page is a doctest whose printed outputs must match."""

import doctest
import pathlib
import subprocess
import sys

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
TUTORIALS = sorted((DOCS / "tutorials").glob("*.md"))


@pytest.mark.parametrize("page", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_code_runs_and_prints_what_the_page_says(page, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)            # pages that save files write them here
    result = doctest.testfile(str(page), module_relative=False, report=True,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{page.name} has no doctest examples"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {page.name} failed"


def test_sphinx_site_builds_without_warnings(tmp_path):
    build = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         str(DOCS), str(tmp_path / "html")], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]
