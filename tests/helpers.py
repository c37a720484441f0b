"""Helpers shared by the tests."""

from __future__ import annotations

import contextlib

import jax
import numpy as np


@contextlib.contextmanager
def precision(dtype):
  """Enables float64 inside the block when `dtype` is float64 (never at import)."""
  if np.dtype(dtype) == np.float64:
    with jax.enable_x64(True):
      yield
  else:
    yield
