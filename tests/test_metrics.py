"""Tests of jaxrank's exact metrics against the loop-based references in `reference.py`."""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
from helpers import precision
from sklearn import metrics as sk_metrics

import jaxrank


class Case(NamedTuple):
  name: str
  fn: Callable[..., jax.Array]
  ref: Callable[..., float]
  kwargs: dict[str, Any]


CASES = [
    Case("ap", jaxrank.ap_metric, reference.ap, {}),
    Case("tie_aware_ap", jaxrank.tie_aware_ap_metric, reference.tie_aware_ap, {}),
    Case("ndcg", jaxrank.ndcg_metric, reference.ndcg, {}),
    Case("ndcg@3", jaxrank.ndcg_metric, reference.ndcg, {"topn": 3}),
    Case("tie_aware_ndcg", jaxrank.tie_aware_ndcg_metric, reference.tie_aware_ndcg, {}),
    Case("tie_aware_ndcg@3", jaxrank.tie_aware_ndcg_metric, reference.tie_aware_ndcg, {"topn": 3}),
    Case("recall@1", jaxrank.recall_at_k_metric, reference.recall_at_k, {"topn": 1}),
    Case("recall@3", jaxrank.recall_at_k_metric, reference.recall_at_k, {"topn": 3}),
    Case("precision@2", jaxrank.precision_at_k_metric, reference.precision_at_k, {"topn": 2}),
    Case("precision@10", jaxrank.precision_at_k_metric, reference.precision_at_k, {"topn": 10}),
    Case("map_at_r", jaxrank.map_at_r_metric, reference.map_at_r, {}),
]
CASE_IDS = [c.name for c in CASES]
TIE_AWARE = [
    (jaxrank.ap_metric, jaxrank.tie_aware_ap_metric, {}),
    (jaxrank.ndcg_metric, jaxrank.tie_aware_ndcg_metric, {}),
    (jaxrank.ndcg_metric, jaxrank.tie_aware_ndcg_metric, {"topn": 3}),
]
TIE_AWARE_IDS = ["ap", "ndcg", "ndcg@3"]
# Most tests call the metrics eagerly on a handful of shared shapes: op-by-op dispatch compiles each
# primitive once per shape and dtype for all metrics and reductions together, which on CPU is several
# times cheaper than one `jax.jit` compilation per (metric, shape, dtype, reduce_fn).
# test_contract.py covers jit, vmap, masking, reductions, NaN and dtypes for every metric.


def run(case, scores, labels, *, where=None, reduce_fn=jnp.mean):
  """`case`'s metric with its hyperparameters."""
  return case.fn(scores, labels, where=where, reduce_fn=reduce_fn, **case.kwargs)


BATCH = (3, 4)
N = 7
TOL64 = dict(rtol=1e-10, atol=1e-12)
TOL32 = dict(rtol=1e-5, atol=1e-6)


def random_lists(seed, shape=BATCH + (N,), *, ties, num_grades=3, mask=True, dtype=np.float64):
  """Scores (integers in {0, 1, 2} when `ties`), labels in `range(num_grades)`, a mask."""
  rng = np.random.default_rng(seed)
  if ties:
    scores = rng.integers(0, 3, shape).astype(dtype)
  else:
    scores = rng.normal(size=shape).astype(dtype)
  labels = rng.integers(0, num_grades, shape).astype(np.int32)
  where = rng.random(shape) < 0.8 if mask else np.ones(shape, bool)
  return scores, labels, where


def expected(case, scores, labels, where=None):
  return reference.per_list(case.ref, scores, labels, where, **case.kwargs)


# Hand-computed values, checking the references themselves.


def test_reference_hand_values():
  assert reference.ap([0.9, 0.8, 0.7, 0.1], [1, 0, 1, 0]) == pytest.approx((1 + 2 / 3) / 2)
  # Pessimistic tie: the non-relevant item is ranked first.
  assert reference.ap([0.5, 0.5], [1, 0]) == pytest.approx(0.5)
  assert reference.tie_aware_ap([0.5, 0.5], [1, 0]) == pytest.approx(0.75)
  assert reference.map_at_r([0.9, 0.8, 0.7], [1, 0, 1]) == pytest.approx(0.5)
  assert reference.ndcg([0.9, 0.8], [0, 1]) == pytest.approx(1 / math.log2(3))
  assert reference.tie_aware_ndcg([0.5, 0.5], [0, 1]) == pytest.approx((1 + 1 / math.log2(3)) / 2)
  assert reference.recall_at_k([0.9, 0.8, 0.7], [0, 0, 1], topn=2) == 0.0
  assert reference.recall_at_k([0.9, 0.8, 0.7], [0, 0, 1], topn=3) == 1.0
  assert reference.precision_at_k([0.9, 0.8, 0.7], [1, 0, 1], topn=2) == 0.5
  assert reference.precision_at_k([0.9, 0.8, 0.7], [1, 0, 1], topn=10) == pytest.approx(2 / 3)
  # Masked items are removed: the masked relevant item at the top does not count.
  assert reference.ap([0.9, 0.8, 0.7], [1, 0, 1], [False, True, True]) == pytest.approx(0.5)
  assert reference.ap([0.9, 0.8], [0, 0]) == 0.0
  assert math.isnan(reference.ap([math.nan, 0.8], [0, 1]))


# 1. Random lists against the references.


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("ties", [False, True], ids=["no_ties", "ties"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_matches_reference(case, ties, dtype):
  scores, labels, where = random_lists(0, ties=ties, dtype=dtype)
  want = expected(case, scores, labels, where)
  with precision(dtype):
    got = run(case, scores, labels, where=where, reduce_fn=None)
    assert got.shape == BATCH
    assert got.dtype == dtype
    tol = TOL64 if dtype == np.float64 else TOL32
    np.testing.assert_allclose(np.asarray(got, np.float64), want, **tol)
    mean = run(case, scores, labels, where=where)
    np.testing.assert_allclose(
        float(mean), reference.mean_over_lists(want, reference.has_relevant(labels, where)), **tol
    )


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_matches_reference_binary_labels_no_mask(case, x64):
  scores, labels, _ = random_lists(1, ties=True, num_grades=2)
  got = run(case, scores, labels, where=None, reduce_fn=None)
  np.testing.assert_allclose(got, expected(case, scores, labels), **TOL64)


# 2. Tie-aware metrics: the mean over every ordering of the tied items.


@pytest.mark.parametrize("seed", [20, 21])
@pytest.mark.parametrize("case", [c for c in CASES if "tie_aware" in c.name], ids=lambda c: c.name)
def test_tie_aware_equals_brute_force(case, seed, x64):
  rng = np.random.default_rng(seed)
  shape = BATCH + (N,)
  scores = rng.integers(0, 2, shape).astype(np.float64)  # Heavy ties: two distinct values.
  scores[0, 0] = 0.25  # A list entirely tied.
  labels = rng.integers(0, 3, shape)
  labels[..., 0] = 1
  # Lists of every length 1..N: the last items of list i are masked (masking is slicing).
  lengths = np.arange(np.prod(BATCH)).reshape(BATCH) % N + 1
  lengths[0, 0] = N
  where = np.arange(N) < lengths[..., None]
  got = run(case, scores, labels, where=where, reduce_fn=None)
  np.testing.assert_allclose(got, expected(case, scores, labels, where), **TOL64)


@pytest.mark.parametrize(("plain", "tie_aware", "kwargs"), TIE_AWARE, ids=TIE_AWARE_IDS)
def test_tie_aware_equals_plain_without_ties(plain, tie_aware, kwargs, x64):
  scores, labels, where = random_lists(2, ties=False)
  np.testing.assert_allclose(
      tie_aware(scores, labels, where=where, reduce_fn=None, **kwargs),
      plain(scores, labels, where=where, reduce_fn=None, **kwargs),
      **TOL64,
  )


@pytest.mark.parametrize(("plain", "tie_aware", "kwargs"), TIE_AWARE, ids=TIE_AWARE_IDS)
def test_pessimistic_is_lower_bound_of_tie_aware(plain, tie_aware, kwargs, x64):
  scores, labels, where = random_lists(3, ties=True)
  low = plain(scores, labels, where=where, reduce_fn=None, **kwargs)
  mean = tie_aware(scores, labels, where=where, reduce_fn=None, **kwargs)
  assert np.all(low <= mean + 1e-12)


# 3. Third-party implementations.


def test_ap_matches_sklearn_without_ties(x64):
  scores, labels, _ = random_lists(4, ties=False, num_grades=2, mask=False)
  labels[..., 0] = 1  # Every list has a relevant item.
  got = jaxrank.ap_metric(scores, labels, reduce_fn=None).reshape(-1)
  want = [
      sk_metrics.average_precision_score(y, s)
      for s, y in zip(scores.reshape(-1, N), labels.reshape(-1, N))
  ]
  np.testing.assert_allclose(got, want, **TOL64)


@pytest.mark.parametrize("topn", [None, 3])
def test_tie_aware_ndcg_matches_sklearn_with_ties(topn, x64):
  # sklearn's ndcg_score averages over tied orderings too (McSherry and Najork 2008); its gain is
  # the label itself, so it is given 2**label - 1.
  scores, labels, _ = random_lists(5, ties=True, mask=False)
  labels[..., 0] = 2
  got = jaxrank.tie_aware_ndcg_metric(scores, labels, topn=topn, reduce_fn=None).reshape(-1)
  gains = (2.0**labels - 1).reshape(-1, N)
  want = [
      sk_metrics.ndcg_score(g[None], s[None], k=topn) for s, g in zip(scores.reshape(-1, N), gains)
  ]
  np.testing.assert_allclose(got, want, **TOL64)


# 4. Invariances (the others, for every metric and loss, are in test_contract.py).


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_where_broadcasts(case, x64):
  scores, labels, _ = random_lists(12, ties=True, mask=False)
  row_mask = np.array([True, False, True, True, False, True, True])
  got = case.fn(scores, labels, where=row_mask, reduce_fn=None, **case.kwargs)
  want = expected(case, scores, labels, np.broadcast_to(row_mask, scores.shape))
  np.testing.assert_allclose(got, want, **TOL64)


# 5. Degenerate lists.

DEGENERATE = {
    "no_relevant": ([0.3, 0.2, 0.2, 0.1], [0, 0, 0, 0], [True] * 4),
    "all_relevant": ([0.3, 0.2, 0.2, 0.1], [1, 1, 1, 1], [True] * 4),
    "all_relevant_graded": ([0.3, 0.2, 0.2, 0.1], [2, 1, 2, 1], [True] * 4),
    "all_tied": ([0.5, 0.5, 0.5, 0.5], [0, 1, 0, 2], [True] * 4),
    "all_tied_zero_signs": ([0.0, -0.0, 0.0, -0.0], [1, 0, 2, 0], [True] * 4),
    "all_masked": ([0.3, 0.2, 0.2, 0.1], [1, 0, 1, 0], [False] * 4),
    "one_valid_item": ([0.3, 0.2, 0.2, 0.1], [1, 0, 1, 0], [False, False, True, False]),
    "infinite_ties": ([np.inf, np.inf, -np.inf, -np.inf], [0, 1, 1, 0], [True] * 4),
}


@pytest.mark.parametrize("lst", list(DEGENERATE), ids=list(DEGENERATE))
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_degenerate_lists(case, lst, x64):
  scores, labels, where = (np.array(a) for a in DEGENERATE[lst])
  per = run(case, scores, labels, where=where, reduce_fn=None)
  mean = run(case, scores, labels, where=where)
  assert np.isfinite(per) and np.isfinite(mean)
  np.testing.assert_allclose(per, case.ref(scores, labels, where, **case.kwargs), **TOL64)
  if lst in ("no_relevant", "all_masked"):
    assert float(per) == 0.0 and float(mean) == 0.0
  if lst == "all_relevant" or (lst == "all_relevant_graded" and "ndcg" not in case.name):
    assert float(per) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("label", [0, 1], ids=["non_relevant", "relevant"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_single_item_list(case, label, x64):
  per = case.fn(np.array([0.7]), np.array([label]), reduce_fn=None, **case.kwargs)
  assert np.isfinite(per)
  assert float(per) == float(label)


# 6. Errors (the shared input checks are in test_contract.py).


@pytest.mark.parametrize("fn", [jaxrank.recall_at_k_metric, jaxrank.precision_at_k_metric])
@pytest.mark.parametrize("topn", [0, -1, 1.5, None])
def test_bad_cutoff(fn, topn):
  error = ValueError if isinstance(topn, int) else TypeError  # A wrong value, or a wrong kind.
  with pytest.raises(error, match=rf"^{fn.__name__}: topn must be a positive int, got {topn}\."):
    fn(jnp.array([0.3, 0.2]), jnp.array([1, 0]), topn=topn)


@pytest.mark.parametrize("fn", [jaxrank.ndcg_metric, jaxrank.tie_aware_ndcg_metric])
@pytest.mark.parametrize("topn", [0, -2, 1.5])
def test_bad_topn(fn, topn):
  error = ValueError if isinstance(topn, int) else TypeError
  with pytest.raises(error, match=rf"^{fn.__name__}: topn must be a positive int, got {topn}\."):
    fn(jnp.array([0.3, 0.2]), jnp.array([1, 0]), topn=topn)


@pytest.mark.parametrize("fn", [jaxrank.ndcg_metric, jaxrank.tie_aware_ndcg_metric])
def test_graded_labels_below_zero_are_an_error(fn):
  """A gain 2**label - 1 below 0 puts NDCG outside [0, 1]: rejected whenever labels are known."""
  scores = jnp.array([[0.9, 0.8, 0.1], [0.3, 0.2, 0.1]])
  labels = jnp.array([[0, 1, -2], [1, 0, 0]])
  # Unchecked (as under jit), NDCG leaves [0, 1]: labels [-5, 1] in that order give -0.87.
  np.testing.assert_allclose(
      jax.jit(fn)(jnp.array([0.9, 0.8]), jnp.array([-5, 1])), -0.8689087, rtol=1e-5
  )
  with pytest.raises(ValueError, match=rf"^{fn.__name__}: graded labels must be >= 0 .*got -2"):
    fn(scores, labels)
  with pytest.raises(ValueError, match="graded labels must be >= 0"):
    fn(scores, labels.astype(jnp.float32) / 4, reduce_fn=None)
  masked = jnp.array([True, True, False])  # The -2 is masked: not read.
  ref_fn = reference.ndcg if fn is jaxrank.ndcg_metric else reference.tie_aware_ndcg
  want = reference.per_list(ref_fn, scores, labels, masked)
  np.testing.assert_allclose(fn(scores, labels, where=masked, reduce_fn=None), want, rtol=1e-6)
  jax.jit(fn)(scores, labels)  # Traced: not checked.
