"""The API reference is complete: every public name documented, listed and its example correct.

* every name of ``jaxtree.__all__`` has a docstring with an ``Example:`` section in doctest
  format (``>>>``);
* every name appears in ``docs/api.md`` in the section of the module that defines it (an
  ``automodule`` of that module listing it in ``:members:``, or, for a module, its own
  ``automodule``);
* the examples run and print what they show: doctest over the modules that define the public
  names, with ``ELLIPSIS | NORMALIZE_WHITESPACE``, in float32 and in float64 (the examples
  print rounded values, so one output serves both). Each example compiles a little JAX, so
  the default run covers a representative subset in float32 (:data:`DEFAULT_DOCTEST_MODULES`:
  the tree, its statistics, the engine and the PAC-Bayes vote; about 40 s of CPU time with
  the import); every other (module, precision) pair is marked slow (``-m slow``: several
  minutes, the distributed example launches two JAX processes).
"""

import doctest
import importlib
import inspect
import pathlib
import re
import types

import jax
import pytest

import jaxtree

API_PAGE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "api.md"
DEFAULT_DOCTEST_MODULES = ("jaxtree.tree", "jaxtree.stats", "jaxtree.engine", "jaxtree.pacbayes")
# names re-exported from other libraries: documented there, listed in the reference by name
FOREIGN = {"NotFittedError"}
DOCTEST_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _defining_module(name):
    obj = getattr(jaxtree, name)
    return obj.__name__ if isinstance(obj, types.ModuleType) else obj.__module__


def _doctest_modules():
    return sorted({_defining_module(name) for name in jaxtree.__all__ if name not in FOREIGN})


def _api_sections():
    """``{module: members listed under its automodule}`` of docs/api.md (None: no list)."""
    text = API_PAGE.read_text()
    sections = {}
    for match in re.finditer(r"\.\. automodule:: (\S+)\n((?:[ \t]+:.*\n(?:[ \t]{6,}.*\n)*)*)",
                             text):
        options = match.group(2)
        members = re.search(r":members:(.*(?:\n[ \t]{6,}.*)*)", options)
        sections[match.group(1)] = (None if members is None
                                    else set(re.findall(r"\w+", members.group(1))))
    return text, sections


def test_all_names_exist_and_are_unique():
    assert len(set(jaxtree.__all__)) == len(jaxtree.__all__)
    missing = [name for name in jaxtree.__all__ if not hasattr(jaxtree, name)]
    assert not missing, f"in jaxtree.__all__ but not importable: {missing}"


def test_every_public_name_has_a_docstring_with_an_example():
    lacking = []
    for name in jaxtree.__all__:
        doc = inspect.getdoc(getattr(jaxtree, name)) or ""
        example = name in FOREIGN or re.search(r"^Example:\s*$", doc, re.M)
        if len(doc) < 80 or not example or ">>>" not in doc:
            lacking.append(name)
    assert not lacking, f"no docstring with an 'Example:' section of '>>>' lines: {lacking}"


def test_every_public_name_is_in_the_reference_under_its_module():
    text, sections = _api_sections()
    unlisted = []
    for name in jaxtree.__all__:
        module = _defining_module(name)
        if name in FOREIGN:
            listed = f"jaxtree.{name}" in text
        elif isinstance(getattr(jaxtree, name), types.ModuleType):
            listed = module in sections
        else:
            listed = name in (sections.get(module) or ())
        if not listed:
            unlisted.append(f"{name} ({module})")
    assert not unlisted, f"missing from docs/api.md under their module's automodule: {unlisted}"


def _run_doctests(module_name):
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=DOCTEST_FLAGS)
    tests = [t for t in finder.find(module, module_name) if t.examples]
    for test in tests:
        runner.run(test)
    return runner.summarize(verbose=False), len(tests)


@pytest.mark.parametrize("module_name, x64", [
    pytest.param(name, x64, id=f"{name}-{'float64' if x64 else 'float32'}",
                 marks=() if name in DEFAULT_DOCTEST_MODULES and not x64 else pytest.mark.slow)
    for name in _doctest_modules() for x64 in (False, True)])
def test_docstring_examples_run(module_name, x64):
    with jax.enable_x64(x64):
        (failed, attempted), num_docstrings = _run_doctests(module_name)
    assert attempted > 0 and num_docstrings > 0, f"{module_name} has no examples"
    assert failed == 0, f"{failed} of {attempted} example lines of {module_name} failed (above)"


def test_a_wrong_example_output_fails():
    """The runner is not lenient: a docstring showing a wrong value is reported."""
    def wrong():
        """>>> 1 + 1
        3
        """

    runner = doctest.DocTestRunner(optionflags=DOCTEST_FLAGS)
    for test in doctest.DocTestFinder().find(wrong, "wrong"):
        runner.run(test, out=lambda _: None)
    assert runner.summarize(verbose=False) == (1, 1)
