"""Helpers shared by the tests."""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrank


@contextlib.contextmanager
def precision(dtype):
  """Enables float64 inside the block when `dtype` is float64 (never at import)."""
  if np.dtype(dtype) == np.float64:
    with jax.enable_x64(True):
      yield
  else:
    yield


def assert_binned_loss_input_errors(fn, *, where_match=None, bins="num_bins"):
  """The input errors every histogram loss raises (its bin count `bins`, dtypes, shapes, mask), one
  list. `bins` is `num_bins` (centres) or, for `fastap_loss`, `num_intervals`."""
  scores, labels = jnp.array([0.3, 0.2, 0.1]), jnp.array([1, 0, 1])
  for bad in (1, 0, -3):
    with pytest.raises(ValueError, match=bins):
      fn(scores, labels, **{bins: bad})
  for bad in (2.5, None, True):
    with pytest.raises(TypeError, match=bins):
      fn(scores, labels, **{bins: bad})
  with pytest.raises(TypeError, match="floating"):
    fn(jnp.array([3, 2, 1]), labels)
  with pytest.raises(ValueError, match=r"\(3,\).*\(4,\)|\(4,\).*\(3,\)"):
    fn(scores, jnp.array([1, 0, 1, 0]))
  with pytest.raises(TypeError, match=where_match):
    fn(scores, labels, where=jnp.array([1, 1, 0]))


def metrics_of_lists(scores, relevance, where, ks):
  """evaluate_retrieval's metrics from the list-level metrics on `batch_retrieval` lists."""
  return {
    name: float(value) for name, value in _metrics_of_lists(scores, relevance, where, ks).items()
  }


@functools.partial(jax.jit, static_argnums=3)  # One program, not each metric's ops one by one.
def _metrics_of_lists(scores, relevance, where, ks):
  out = {
    f"recall@{k}": jaxrank.recall_at_k_metric(scores, relevance, where=where, topn=k) for k in ks
  }
  out["map@r"] = jaxrank.map_at_r_metric(scores, relevance, where=where)
  out["map"] = jaxrank.ap_metric(scores, relevance, where=where)
  out["tie_aware_map"] = jaxrank.tie_aware_ap_metric(scores, relevance, where=where)
  return out
