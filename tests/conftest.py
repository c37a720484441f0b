"""Shared fixtures: float64 only inside a test, never at import."""

import jax
import pytest


@pytest.fixture
def x64():
  """Runs the test with float64 enabled."""
  with jax.enable_x64(True):
    yield
