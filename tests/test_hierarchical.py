"""The hierarchical metrics (H-AP, tie-aware H-AP, ASI, HAPPIER's relevance) on lists.

Against the loop readings of their definitions (`reference_hierarchical.py`), against HAPPIER's
released evaluation (`released_happier.py`, which stands for SupRank's too) on random
hierarchies, and the invariances of every list metric.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import reference_hierarchical as ref
import released_happier
import torch

import jaxrank

METRICS = {
  "hap": (jaxrank.hap_metric, ref.hap),
  "tie_aware_hap": (jaxrank.tie_aware_hap_metric, ref.tie_aware_hap),
  "asi": (jaxrank.asi_metric, ref.asi),
}


def random_lists(seed, shape, *, ties=True, grades=(0.0, 0.0, 0.25, 1.0, 2.0)):
  rng = np.random.default_rng(seed)
  scores = rng.normal(size=shape)
  if ties:
    scores = np.round(scores, 0) / 2  # Many ties.
  labels = rng.choice(np.asarray(grades), size=shape)
  where = rng.random(shape) < 0.85
  return scores, labels, where


@pytest.mark.parametrize("name", sorted(METRICS))
@pytest.mark.parametrize("ties", [False, True])
def test_equals_reference(name, ties):
  fn, reference_fn = METRICS[name]
  scores, labels, where = random_lists(0, (12, 6), ties=ties)
  scores[0, 2] = -np.inf  # Not retrieved.
  scores[1, :] = 0.5  # All tied.
  labels[2, :] = 0  # No relevant item.
  expected = reference.per_list(reference_fn, scores, labels, where)
  with jax.enable_x64(True):
    got = fn(jnp.asarray(scores), jnp.asarray(labels), where=where, reduce_fn=None)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-12, atol=1e-12)
    mean = fn(jnp.asarray(scores), jnp.asarray(labels), where=where)
  defined = reference.has_relevant(np.where(labels > 0, 1.0, 0.0), where)
  np.testing.assert_allclose(float(mean), reference.mean_over_lists(expected, defined), rtol=1e-12)


@pytest.mark.parametrize("name", sorted(METRICS))
def test_segments_equal_the_segments_lists(name):
  fn, reference_fn = METRICS[name]
  scores, labels, where = random_lists(1, (3, 8))
  segments = np.random.default_rng(2).integers(0, 3, size=(3, 8))
  expected = reference.per_segment(reference_fn, scores, labels, where, segments=segments)
  with jax.enable_x64(True):
    got = fn(
      jnp.asarray(scores), jnp.asarray(labels), where=where, segments=segments, reduce_fn=None
    )
  np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(METRICS))
def test_invariances(name):
  fn = METRICS[name][0]
  scores, labels, where = random_lists(3, (5, 7))
  scores, labels = jnp.asarray(scores, jnp.float32), jnp.asarray(labels, jnp.float32)
  base = fn(scores, labels, where=where, reduce_fn=None)
  perm = np.random.default_rng(4).permutation(7)
  permuted = fn(scores[:, perm], labels[:, perm], where=where[:, perm], reduce_fn=None)
  np.testing.assert_allclose(permuted, base, rtol=1e-6)
  # A strictly increasing transform of the scores changes nothing (ties stay ties).
  np.testing.assert_allclose(fn(jnp.exp(3 * scores) - 2, labels, where=where, reduce_fn=None), base)
  np.testing.assert_allclose(
    jax.jit(lambda s: fn(s, labels, where=where, reduce_fn=None))(scores), base
  )
  for row in range(5):  # `where` equals slicing.
    kept = np.flatnonzero(where[row])
    sliced = fn(scores[row, kept], labels[row, kept], reduce_fn=None)
    np.testing.assert_allclose(sliced, base[row], rtol=1e-6)
  total = fn(scores, labels, where=where, reduce_fn=jnp.sum)
  np.testing.assert_allclose(total, jnp.sum(base), rtol=1e-6)


@pytest.mark.parametrize("name", sorted(METRICS))
def test_degenerate_lists_are_finite(name):
  fn = METRICS[name][0]
  assert float(fn(jnp.array([0.3, 0.2]), jnp.array([0.0, 0.0]))) == 0.0  # No relevant item.
  assert float(fn(jnp.array([0.3, 0.2]), jnp.array([1.0, 2.0]), where=jnp.zeros(2, bool))) == 0
  tied = fn(jnp.full(5, 0.7), jnp.array([0.0, 1.0, 2.0, 0.0, 1.0]))
  assert np.isfinite(float(tied)) and 0 < float(tied) <= 1
  assert np.isnan(float(fn(jnp.array([jnp.nan, 0.2]), jnp.array([1.0, 0.0]))))


def test_binary_grades_give_ap():
  scores, labels, where = random_lists(5, (6, 7), grades=(0.0, 1.0))
  args = (jnp.asarray(scores), jnp.asarray(labels))
  kwargs = {"where": where, "reduce_fn": None}
  np.testing.assert_allclose(
    jaxrank.hap_metric(*args, **kwargs), jaxrank.ap_metric(*args, **kwargs), rtol=1e-6
  )
  np.testing.assert_allclose(
    jaxrank.tie_aware_hap_metric(*args, **kwargs),
    jaxrank.tie_aware_ap_metric(*args, **kwargs),
    rtol=1e-6,
  )


def test_pessimistic_hap_is_the_worst_order():
  scores, labels, where = random_lists(6, (20, 6))
  args = (jnp.asarray(scores), jnp.asarray(labels))
  plain = jaxrank.hap_metric(*args, where=where, reduce_fn=None)
  mean = jaxrank.tie_aware_hap_metric(*args, where=where, reduce_fn=None)
  assert np.all(np.asarray(plain) <= np.asarray(mean) + 1e-6)


def test_negative_grades_raise():
  for fn in (jaxrank.hap_metric, jaxrank.asi_metric, jaxrank.tie_aware_hap_metric):
    with pytest.raises(ValueError, match=rf"^{fn.__name__}: graded labels must be >= 0 .*got -1"):
      fn(jnp.array([0.3, 0.2]), jnp.array([-1.0, 1.0]))


def test_relevance_equals_reference():
  levels = np.random.default_rng(7).integers(0, 4, size=(4, 9))
  where = np.random.default_rng(8).random((4, 9)) < 0.8
  for alpha, self_level in [(1.0, None), (0.5, 3), (2.0, 1)]:
    got = jaxrank.hierarchical_relevance(
      levels, num_levels=3, alpha=alpha, self_level=self_level, where=where
    )
    expected = [
      ref.relevance(levels[i], 3, alpha=alpha, self_level=self_level, where=where[i])
      for i in range(4)
    ]
    np.testing.assert_allclose(got, np.stack(expected), rtol=1e-6)
  with pytest.raises(TypeError, match="^hierarchical_relevance: levels must be integers"):
    jaxrank.hierarchical_relevance(np.zeros(3), num_levels=2)


def random_hierarchy(seed, n, num_classes, fan_out):
  """Labels `[n, L]`: a class per item, then super-classes of the classes (nested: each level
  groups `fan_out[l]` groups of the level below), and unit embeddings near their class's."""
  rng = np.random.default_rng(seed)
  classes = rng.integers(0, num_classes, size=n)
  columns, group = [classes], classes
  for k in fan_out:
    group = group // k
    columns.append(group)
  labels = np.stack(columns, axis=1)
  centres = rng.normal(size=(num_classes, 8))
  embeddings = centres[classes] + 1.2 * rng.normal(size=(n, 8))
  return embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True), labels


def distinct_level_relevances(rel_per_level, counts):
  """Queries whose levels present in their lists have distinct relevances (HAPPIER's `hap` counts
  an item once per level sharing its relevance: module docstring of jaxrank's hierarchical)."""
  keep = []
  for rel, count in zip(rel_per_level, counts):
    present = [r for r, c in zip(rel[1:], count[1:]) if c > 0]
    keep.append(len(set(present)) == len(present))
  return np.asarray(keep)


@pytest.mark.parametrize("seed,fan_out", [(0, (3,)), (1, (2, 3)), (2, (2, 2, 2))])
def test_equals_happier_released_evaluation(seed, fan_out):
  embeddings, labels = random_hierarchy(seed, 60, 16, fan_out)
  num_levels = labels.shape[1]
  with torch.no_grad():
    released = released_happier.evaluate(torch.from_numpy(embeddings), torch.from_numpy(labels))
  scores = embeddings @ embeddings.T
  n = len(labels)
  levels = np.array([[ref.levels_of(labels[i], labels[j]) for j in range(n)] for i in range(n)])
  others = ~np.eye(n, dtype=bool)  # Leave-one-out: the query is not in its list.
  with jax.enable_x64(True):
    rel = jaxrank.hierarchical_relevance(
      levels, num_levels=num_levels, self_level=num_levels, where=others
    )
    hap = jaxrank.hap_metric(scores, rel, where=others, reduce_fn=None)
    asi = jaxrank.asi_metric(scores, levels, where=others, reduce_fn=None)
    ndcg = jaxrank.ndcg_metric(scores, levels, where=others, reduce_fn=None)
    asi_of_squares = jaxrank.asi_metric(scores, levels**2, where=others, reduce_fn=None)
  counts = np.stack([np.bincount(levels[i][others[i]], minlength=num_levels + 1) for i in range(n)])
  rel_per_level = np.stack(
    [
      [(lv / num_levels) / max(c + (lv == num_levels), 1) for lv, c in enumerate(row)]
      for row in counts
    ]
  )
  keep = distinct_level_relevances(rel_per_level, counts)
  assert keep.mean() > 0.5
  np.testing.assert_allclose(np.asarray(hap)[keep], released["H-AP"].numpy()[keep], rtol=1e-12)
  np.testing.assert_allclose(asi, released["ASI"].numpy(), rtol=1e-12)
  np.testing.assert_allclose(asi_of_squares, asi, rtol=1e-12)  # Only the levels' order matters.
  # HAPPIER's multi-level NDCG is `ndcg_metric` on the levels (gain 2**level - 1).
  np.testing.assert_allclose(ndcg, released["NDCG"].numpy(), rtol=1e-12)
