"""`evaluate_retrieval(..., super_labels=, mesh=)` on 8 devices equals one device, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import jaxrank


def _hierarchy(seed, n, num_classes):
  rng = np.random.default_rng(seed)
  classes = rng.integers(0, num_classes, n)
  labels = np.stack([classes, classes // 3, classes // 6], axis=1)
  e = rng.integers(-1, 2, (num_classes, 6))[classes] + rng.integers(-1, 2, (n, 6))
  return e.astype(np.float32), labels


@pytest.mark.parametrize("gallery", [False, True])
def test_sharded_hierarchical_metrics_equal_one_device(mesh, gallery):
  e, labels = _hierarchy(0, 90, 12)
  if gallery:
    args = (e[:30], labels[:30, 0], e[30:], labels[30:, 0])
    kwargs = {"super_labels": labels[:30, 1:], "gallery_super_labels": labels[30:, 1:]}
  else:
    args, kwargs = (e, labels[:, 0]), {"super_labels": labels[:, 1:]}
  kwargs |= {"chunk_size": 16, "reduce_fn": None, "relevance_counts_query": True}
  want = jaxrank.evaluate_retrieval(*args, **kwargs)
  got = jaxrank.evaluate_retrieval(*args, mesh=mesh, **kwargs)
  assert sorted(got) == sorted(want) and "h-ap" in got
  for key in want:
    np.testing.assert_array_equal(got[key], want[key], err_msg=key)
