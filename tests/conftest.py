"""Shared fixtures: numeric tests run in float32 and in float64 (the float64 twins of the
slowest of them run with the slow cases, the float32 case stays in the default run).

XLA's backend compiles the tests' programs at optimization level 0 (LLVM's least optimising
pipeline): compiling is about two thirds of a test's time here, and level 0 cuts it by ~40 %
(16.5 -> 10.0 s of compilation in one robustness case, median of three interleaved runs). The
programs compute the same values; only their machine code is less optimised. Set
``JAXTREE_TEST_FULL_OPT=1`` to test the programs that users run, fully optimised; the
experiments and benchmarks always are. The flag is set before JAX creates its CPU backend (it
reads ``XLA_FLAGS`` then), and subprocesses of the tests inherit it.

A test worker compiles thousands of programs; XLA:CPU maps each compiled kernel into memory
mappings of its own, and a worker would pass Linux's cap on them (``vm.max_map_count``) within
the suite and die of a segmentation fault inside XLA's compiler (both workers did, each near
65,000 mappings, before :func:`release_compiled_programs_between_tests`).
"""

import os

if not os.environ.get("JAXTREE_TEST_FULL_OPT") and \
        "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_backend_optimization_level=0").strip()

import jax  # noqa: E402
import pytest  # noqa: E402

from jaxtree import shapes  # noqa: E402


@pytest.fixture(autouse=True)
def release_compiled_programs_between_tests():
    """After each test that compiled something, empty JAX's caches of compiled programs once the
    worker holds half of its cap on memory mappings (:func:`jaxtree.shapes.guard_memory_maps`),
    so that no test's compilations reach the cap."""
    yield
    shapes.guard_memory_maps(share=0.5, warn=False)


@pytest.fixture(params=[False, True], ids=["float32", "float64"])
def precision(request):
    """Run the test body with x64 off (float32) and on (float64); yields the float dtype.

    ``jax.enable_x64`` is the context manager that replaced ``jax.experimental.enable_x64``.
    """
    with jax.enable_x64(request.param):
        yield jax.numpy.zeros(0).dtype


#: float64 variants whose float32 twin runs by default and that cost 7-50 s each on 2 cores
#: (``--durations``): the full run (``pytest -q``) still checks them.
SLOW_FLOAT64 = {
    "tests/test_select.py::test_gradient_tuning_leaves_a_flat_start[float64]",
    "tests/test_shapes.py::test_theory_potentials_ignore_padding[float64]",
    "tests/test_shapes.py::test_bucketed_folds_give_identical_errors[float64]",
    "tests/test_compact.py::test_random_trees_agree[float64-0]",
    "tests/test_compact.py::test_real_data_trees_agree[float64-kd_tree-8]",
    "tests/test_select.py::test_grid_errors_equal_plain_loop[float64]",
    "tests/test_pacbayes.py::test_path_sum_on_real_trees[float64-wine-kd_tree-8]",
    "tests/test_pacbayes.py::test_node_predictive_at_the_leaf_is_the_posterior_predictive[float64]",
}


#: variants of a parametrized test that cost 15+ s each, whose other variants (or neighbours) run
#: by default: the tutorials of the theorist and the JAX user (the practitioner's page runs).
SLOW_VARIANTS = {
    "tests/test_docs.py::test_tutorial_code_runs_and_prints_what_the_page_says[theorist]",
    "tests/test_docs.py::test_tutorial_code_runs_and_prints_what_the_page_says[jax]",
    # the theory potentials' padding (17 s); the practical ones' runs by default
    "tests/test_shapes.py::test_theory_potentials_ignore_padding[float32]",
    # explicit CV splits (30 s): scikit-learn's sample-weight check passes them to the default
    # PACBayesTreeClassifier in the default run
    "tests/test_estimators.py::test_cv_takes_explicit_splits_as_gridsearchcv_does[cart]",
    # the mixed forest (27 s): its best-cut trees are the default forest's, its random-cut
    # trees grow_tree's random splitter's, both tested by default
    "tests/test_forest.py::test_mixed_forest_is_half_best_half_random_trees",
}


def pytest_collection_modifyitems(items):
    for item in items:
        if item.nodeid in SLOW_FLOAT64 | SLOW_VARIANTS:
            item.add_marker(pytest.mark.slow)
