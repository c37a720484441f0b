"""`evaluate_retrieval(..., super_labels=)`: H-AP, ASI and NDCG of a hierarchy over a whole set.

Equal to the list metrics (`hap_metric` with `hierarchical_relevance`, `asi_metric` and
`ndcg_metric` on the levels) on `batch_retrieval`'s lists, ties included, on every counting path;
equal to HAPPIER's released evaluation (`released_happier.py`) with `relevance_counts_query=True`;
on a one-device mesh equal to no mesh (8 devices: tests/multidevice; 2 processes:
tests/multiprocess).
"""

from __future__ import annotations

import contextlib

import jax
import numpy as np
import pytest
import released_happier
import torch
from test_hierarchical import distinct_level_relevances
from test_hierarchical import random_hierarchy

import jaxrank
from jaxrank._src import counting
from jaxrank._src import ranking

KEYS = ("h-ap", "asi", "ndcg")


def list_metrics(scores, q_columns, g_columns, excluded, counts_query=False):
  """The list metrics on each query's list: `{key: [Q]}`."""
  levels = np.sum(q_columns[:, None, :] == g_columns[None, :, :], axis=-1)
  where = ~excluded
  num_levels = q_columns.shape[1]
  rel = jaxrank.hierarchical_relevance(
    levels, num_levels=num_levels, where=where, self_level=num_levels if counts_query else None
  )
  kwargs = {"where": where, "reduce_fn": None}
  return {
    "h-ap": np.asarray(jaxrank.hap_metric(scores, rel, **kwargs)),
    "asi": np.asarray(jaxrank.asi_metric(scores, levels, **kwargs)),
    "ndcg": np.asarray(jaxrank.ndcg_metric(scores, levels, **kwargs)),
  }


def tied_hierarchy(seed, n, num_classes, fan_out):
  """Small integer embeddings (dot products exact and often tied) of a nested hierarchy."""
  rng = np.random.default_rng(seed)
  _, labels = random_hierarchy(seed, n, num_classes, fan_out)
  centres = rng.integers(-1, 2, (num_classes, 6))
  e = centres[labels[:, 0]] + rng.integers(-1, 2, (n, 6))
  return e.astype(np.float32), labels


@pytest.mark.parametrize("branch", [None, *ranking.DESCENDING_RANKS_BRANCHES])
@pytest.mark.parametrize("num_classes,fan_out,compared", [(12, (3,), True), (8, (2, 2), False)])
def test_equals_the_list_metrics_leave_one_out(branch, num_classes, fan_out, compared):
  e, labels = tied_hierarchy(0, 70, num_classes, fan_out)
  labels[-1] = [99] * labels.shape[1]  # A query sharing nothing: no hierarchical value.
  dot = jaxrank.similarity.dot_product
  with ranking.descending_ranks_branch(branch) if branch else contextlib.nullcontext():
    got = jaxrank.evaluate_retrieval(
      e,
      labels[:, 0],
      super_labels=labels[:, 1:],
      similarity_fn=dot,
      chunk_size=16,
      reduce_fn=None,
    )
    mean = jaxrank.evaluate_retrieval(
      e, labels[:, 0], super_labels=labels[:, 1:], similarity_fn=dot, chunk_size=16
    )
    plain = jaxrank.evaluate_retrieval(e, labels[:, 0], similarity_fn=dot, chunk_size=16)
  # Positives counted by comparing (up to COMPARE_UP_TO) or from sorted lists.
  assert (got["num_hierarchy_relevant"].max() <= counting.COMPARE_UP_TO) == compared
  want = list_metrics(e @ e.T, labels, labels, np.eye(len(e), dtype=bool))
  counted = got["num_hierarchy_relevant"] > 0
  assert not counted[-1] and counted[:-1].all()
  for key in KEYS:
    np.testing.assert_allclose(got[key], want[key], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(mean[key], got[key][counted].mean(), rtol=1e-12)
  assert {k: mean[k] for k in plain} == plain  # The other metrics are unchanged.


def test_equals_the_list_metrics_with_a_gallery_and_few_positives():
  e, labels = tied_hierarchy(1, 60, 20, (5,))
  q, g = slice(0, 20), slice(20, 60)
  with jax.enable_x64(True):
    got = jaxrank.evaluate_retrieval(
      e[q].astype(np.float64),
      labels[q, 0],
      e[g].astype(np.float64),
      labels[g, 0],
      super_labels=labels[q, 1],
      gallery_super_labels=labels[g, 1],
      chunk_size=8,
      relevance_alpha=0.5,
      reduce_fn=None,
    )
    cos = np.asarray(jaxrank.similarity.cosine(e[q].astype(np.float64), e[g].astype(np.float64)))
    levels = np.sum(labels[q][:, None, :] == labels[g][None, :, :], axis=-1)
    rel = jaxrank.hierarchical_relevance(levels, num_levels=2, alpha=0.5)
    np.testing.assert_allclose(
      got["h-ap"], jaxrank.hap_metric(cos, rel, reduce_fn=None), rtol=1e-12
    )
    want = list_metrics(cos, labels[q], labels[g], np.zeros((20, 40), bool))
  for key in ("asi", "ndcg"):
    np.testing.assert_allclose(got[key], want[key], rtol=1e-12)


def test_equals_happier_released_evaluation():
  embeddings, labels = random_hierarchy(2, 80, 20, (2, 2))
  with torch.no_grad():
    released = released_happier.evaluate(torch.from_numpy(embeddings), torch.from_numpy(labels))
  with jax.enable_x64(True):
    got = jaxrank.evaluate_retrieval(
      embeddings,
      labels[:, 0],
      super_labels=labels[:, 1:],
      relevance_counts_query=True,
      similarity_fn=jaxrank.similarity.dot_product,
      chunk_size=32,
      reduce_fn=None,
    )
  n, num_levels = labels.shape
  levels = np.sum(labels[:, None, :] == labels[None, :, :], axis=-1)
  counts = np.stack(
    [np.bincount(levels[i][np.arange(n) != i], minlength=num_levels + 1) for i in range(n)]
  )
  rel_per_level = (np.arange(num_levels + 1) / num_levels) / np.maximum(
    counts + (np.arange(num_levels + 1) == num_levels), 1
  )
  keep = distinct_level_relevances(rel_per_level, counts)
  assert keep.mean() > 0.5
  np.testing.assert_allclose(got["h-ap"][keep], released["H-AP"].numpy()[keep], rtol=1e-12)
  np.testing.assert_allclose(got["asi"], released["ASI"].numpy(), rtol=1e-12)
  np.testing.assert_allclose(got["ndcg"], released["NDCG"].numpy(), rtol=1e-12)


def test_a_one_device_mesh_equals_no_mesh():
  e, labels = tied_hierarchy(3, 30, 6, (2,))
  mesh = jax.make_mesh((1,), ("batch",), devices=jax.devices()[:1])
  kwargs = dict(super_labels=labels[:, 1], chunk_size=8, reduce_fn=None)
  want = jaxrank.evaluate_retrieval(e, labels[:, 0], **kwargs)
  got = jaxrank.evaluate_retrieval(e, labels[:, 0], mesh=mesh, **kwargs)
  assert sorted(got) == sorted(want)
  for key in want:
    np.testing.assert_array_equal(got[key], want[key])


@pytest.mark.parametrize(
  "kwargs,match",
  [
    ({"super_labels": np.array([0, 1, 1, 1])}, "not a hierarchy"),  # Class 0 in two.
    ({"super_labels": np.zeros(4)}, "integer super-class labels"),
    ({"gallery_super_labels": np.zeros(4, int)}, "without super_labels"),
  ],
)
def test_bad_hierarchies_raise(kwargs, match):
  e = np.eye(4, dtype=np.float32)
  with pytest.raises(ValueError, match=f"^evaluate_retrieval: .*{match}"):
    jaxrank.evaluate_retrieval(e, np.array([0, 1, 0, 2]), **kwargs)
  with pytest.raises(ValueError, match="needs integer class labels"):
    jaxrank.evaluate_retrieval(e, affinity=np.eye(4), super_labels=np.zeros(4, int))
