"""Helpers shared by the tests."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest


@contextlib.contextmanager
def precision(dtype):
  """Enables float64 inside the block when `dtype` is float64 (never at import)."""
  if np.dtype(dtype) == np.float64:
    with jax.enable_x64(True):
      yield
  else:
    yield


def assert_binned_loss_input_errors(fn, *, where_match=None):
  """The input errors every histogram loss raises (num_bins, dtypes, shapes, mask), one list."""
  scores, labels = jnp.array([0.3, 0.2, 0.1]), jnp.array([1, 0, 1])
  for bad in (1, 0, -3):
    with pytest.raises(ValueError, match="num_bins"):
      fn(scores, labels, num_bins=bad)
  for bad in (2.5, None, True):
    with pytest.raises(TypeError, match="num_bins"):
      fn(scores, labels, num_bins=bad)
  with pytest.raises(TypeError, match="floating"):
    fn(jnp.array([3, 2, 1]), labels)
  with pytest.raises(ValueError, match=r"\(3,\).*\(4,\)|\(4,\).*\(3,\)"):
    fn(scores, jnp.array([1, 0, 1, 0]))
  with pytest.raises(TypeError, match=where_match):
    fn(scores, labels, where=jnp.array([1, 1, 0]))
