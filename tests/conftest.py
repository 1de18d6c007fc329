"""Shared fixtures: run numeric tests in float32 and in float64."""

import jax
import pytest


@pytest.fixture(params=[False, True], ids=["float32", "float64"])
def precision(request):
    """Run the test body with x64 off (float32) and on (float64); yields the float dtype.

    ``jax.enable_x64`` is the context manager that replaced ``jax.experimental.enable_x64``.
    """
    with jax.enable_x64(request.param):
        yield jax.numpy.zeros(0).dtype
