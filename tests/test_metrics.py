"""Tests of jaxrank's exact metrics against the loop-based references in `reference.py`."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

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
  Case("ap@2", jaxrank.ap_metric, reference.ap, {"topn": 2}),
  Case("mrr", jaxrank.mrr_metric, reference.mrr, {}),
  Case("mrr@2", jaxrank.mrr_metric, reference.mrr, {"topn": 2}),
  Case("dcg", jaxrank.dcg_metric, reference.dcg, {}),
  Case("dcg@3", jaxrank.dcg_metric, reference.dcg, {"topn": 3}),
  Case(
    "relevant_fraction@1",
    jaxrank.relevant_fraction_at_k_metric,
    reference.relevant_fraction_at_k,
    {"topn": 1},
  ),
  Case(
    "relevant_fraction@3",
    jaxrank.relevant_fraction_at_k_metric,
    reference.relevant_fraction_at_k,
    {"topn": 3},
  ),
  Case("opa", jaxrank.opa_metric, reference.opa, {}),
]
CASE_IDS = [c.name for c in CASES]
# Metrics that are not 1 on a list whose 4 valid items are all relevant: a cut-off below R (AP@k
# and the relevant fraction are at most k / R), DCG (not normalised), OPA (no pair with different
# labels: undefined, 0).
NOT_ONE_WHEN_ALL_RELEVANT = (
  "ap@2",
  "dcg",
  "dcg@3",
  "relevant_fraction@1",
  "relevant_fraction@3",
  "opa",
)


def defined(case, labels, where):
  """`[...]`: the lists that enter the mean (OPA: those with an ordered pair of valid items)."""
  if case.name == "opa":
    return reference.has_ordered_pair(labels, where)
  return reference.has_relevant(labels, where)


TIE_AWARE = [
  (jaxrank.ap_metric, jaxrank.tie_aware_ap_metric, {}),
  (jaxrank.ndcg_metric, jaxrank.tie_aware_ndcg_metric, {}),
  (jaxrank.ndcg_metric, jaxrank.tie_aware_ndcg_metric, {"topn": 3}),
]
TIE_AWARE_IDS = ["ap", "ndcg", "ndcg@3"]
# Most tests call the metrics eagerly on a handful of shared shapes: op-by-op dispatch compiles each
# primitive once per shape and dtype for all metrics and reductions together, which on CPU is
# several times cheaper than one `jax.jit` compilation per (metric, shape, dtype, reduce_fn).
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
  scores = rng.integers(0, 3, shape) if ties else rng.normal(size=shape)
  scores = scores.astype(dtype)
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
      float(mean), reference.mean_over_lists(want, defined(case, labels, where)), **tol
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
  if case.name in NOT_ONE_WHEN_ALL_RELEVANT:
    return
  if lst == "all_relevant" or (lst == "all_relevant_graded" and "ndcg" not in case.name):
    assert float(per) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("label", [0, 1], ids=["non_relevant", "relevant"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_single_item_list(case, label, x64):
  per = case.fn(np.array([0.7]), np.array([label]), reduce_fn=None, **case.kwargs)
  assert np.isfinite(per)
  assert float(per) == (0.0 if case.name == "opa" else float(label))  # OPA: no pair, undefined.


# 6. Errors (the shared input checks are in test_contract.py).


@pytest.mark.parametrize(
  "fn",
  [
    jaxrank.recall_at_k_metric,
    jaxrank.precision_at_k_metric,
    jaxrank.relevant_fraction_at_k_metric,
  ],
)
@pytest.mark.parametrize("topn", [0, -1, 1.5, None])
def test_bad_cutoff(fn, topn):
  error = ValueError if isinstance(topn, int) else TypeError  # A wrong value, or a wrong kind.
  with pytest.raises(error, match=rf"^{fn.__name__}: topn must be a positive int, got {topn}\."):
    fn(jnp.array([0.3, 0.2]), jnp.array([1, 0]), topn=topn)


@pytest.mark.parametrize(
  "fn",
  [
    jaxrank.ndcg_metric,
    jaxrank.tie_aware_ndcg_metric,
    jaxrank.dcg_metric,
    jaxrank.ap_metric,
    jaxrank.mrr_metric,
  ],
)
@pytest.mark.parametrize("topn", [0, -2, 1.5])
def test_bad_topn(fn, topn):
  error = ValueError if isinstance(topn, int) else TypeError
  with pytest.raises(error, match=rf"^{fn.__name__}: topn must be a positive int, got {topn}\."):
    fn(jnp.array([0.3, 0.2]), jnp.array([1, 0]), topn=topn)


@pytest.mark.parametrize(
  "fn", [jaxrank.ndcg_metric, jaxrank.tie_aware_ndcg_metric, jaxrank.dcg_metric]
)
def test_graded_labels_below_zero_are_an_error(fn):
  """A gain 2**label - 1 below 0 puts NDCG outside [0, 1]: rejected whenever labels are known."""
  scores = jnp.array([[0.9, 0.8, 0.1], [0.3, 0.2, 0.1]])
  labels = jnp.array([[0, 1, -2], [1, 0, 0]])
  # Unchecked (as under jit), NDCG leaves [0, 1]: labels [-5, 1] in that order give -0.87.
  unchecked = -0.3378202 if fn is jaxrank.dcg_metric else -0.8689087  # DCG: -31/32 + 1/log2(3).
  np.testing.assert_allclose(
    jax.jit(fn)(jnp.array([0.9, 0.8]), jnp.array([-5, 1])), unchecked, rtol=1e-5
  )
  with pytest.raises(ValueError, match=rf"^{fn.__name__}: graded labels must be >= 0 .*got -2"):
    fn(scores, labels)
  with pytest.raises(ValueError, match="graded labels must be >= 0"):
    fn(scores, labels.astype(jnp.float32) / 4, reduce_fn=None)
  masked = jnp.array([True, True, False])  # The -2 is masked: not read.
  ref_fn = {jaxrank.ndcg_metric: reference.ndcg, jaxrank.dcg_metric: reference.dcg}.get(
    fn, reference.tie_aware_ndcg
  )
  want = reference.per_list(ref_fn, scores, labels, masked)
  np.testing.assert_allclose(fn(scores, labels, where=masked, reduce_fn=None), want, rtol=1e-6)
  jax.jit(fn)(scores, labels)  # Traced: not checked.


# 7. Scores of -inf: valid items that are not retrieved (rax's convention, metrics.py docstring).


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_neg_inf_scores_match_reference(case, x64):
  scores, labels, where = random_lists(30, ties=True)
  rng = np.random.default_rng(31)
  scores[rng.random(scores.shape) < 0.3] = -np.inf
  scores[0, 0] = -np.inf  # A list with every item unretrieved.
  labels[0, 0, 0] = 2
  where[0, 0, 0] = True
  want = expected(case, scores, labels, where)
  got = run(case, scores, labels, where=where, reduce_fn=None)
  np.testing.assert_allclose(got, want, **TOL64)
  if case.name != "opa":  # Its relevant item is not retrieved: the list is defined and gets 0.
    assert float(got[0, 0]) == 0.0 and defined(case, labels, where)[0, 0]


def test_neg_inf_hand_values():
  """rax's `test_treats_neginf_as_unranked_items`: [-inf, 5, 2, -inf, 1], labels [1, 0, 1, 0, 0]."""
  scores = np.array([-np.inf, 5.0, 2.0, -np.inf, 1.0])
  labels = np.array([1, 0, 1, 0, 0])
  ideal = 1 + 1 / math.log2(3)
  assert reference.ap(scores, labels) == pytest.approx(0.25)
  assert reference.precision_at_k(scores, labels, topn=5) == pytest.approx(1 / 3)
  assert reference.relevant_fraction_at_k(scores, labels, topn=5) == pytest.approx(1 / 2)
  assert reference.ndcg(scores, labels) == pytest.approx(1 / math.log2(3) / ideal)
  # A relevant item masked with where is removed; scored -inf it stays in R: AP 1/2 against 1/4.
  assert reference.ap(scores, labels, np.isfinite(scores)) == pytest.approx(0.5)
  for fn, want in (
    (jaxrank.ap_metric, 0.25),
    (jaxrank.mrr_metric, 0.5),
    (jaxrank.ndcg_metric, 1 / math.log2(3) / ideal),
  ):
    assert float(fn(scores, labels)) == pytest.approx(want, rel=1e-6)
  assert float(jaxrank.precision_at_k_metric(scores, labels, topn=5)) == pytest.approx(1 / 3)
  # OPA compares scores: -inf is below 5 and 2 and 1, and the pair of -inf is a tie (misordered).
  assert float(jaxrank.opa_metric(scores, labels)) == pytest.approx(reference.opa(scores, labels))


# 8. New metrics: hand values, relations, per-item weights.


def test_new_metrics_hand_values(x64):
  scores, labels = np.array([0.0, 3.0, 1.0, 2.0]), np.array([0, 0, 1, 1])  # rax's example list.
  assert reference.mrr(scores, labels) == 0.5
  assert reference.dcg(scores, labels) == pytest.approx(1 / math.log2(3) + 1 / math.log2(4))
  assert reference.opa(scores, labels) == 0.5
  assert reference.relevant_fraction_at_k(scores, labels, topn=2) == 0.5
  assert reference.ap(scores, labels, topn=2) == pytest.approx(0.25)
  for case in CASES:
    got = float(run(case, scores, labels))
    assert got == pytest.approx(case.ref(scores, labels, **case.kwargs), abs=1e-12), case.name
  # Ties are pessimistic: a relevant item tied with a non-relevant one ranks after it.
  assert float(jaxrank.mrr_metric(np.array([0.5, 0.5]), np.array([1, 0]))) == 0.5
  assert float(jaxrank.opa_metric(np.array([0.5, 0.5]), np.array([1, 0]))) == 0.0


def test_two_recalls_agree_with_one_relevant_item(x64):
  scores, labels, where = random_lists(40, ties=True, num_grades=2)
  labels[...] = 0
  labels[..., 2] = 1
  where[..., 2] = True
  for topn in (1, 3, 7):
    np.testing.assert_array_equal(
      jaxrank.relevant_fraction_at_k_metric(scores, labels, where=where, topn=topn, reduce_fn=None),
      jaxrank.recall_at_k_metric(scores, labels, where=where, topn=topn, reduce_fn=None),
    )


def test_ap_cut_off_at_the_list_length_is_ap(x64):
  scores, labels, where = random_lists(41, ties=True)
  np.testing.assert_array_equal(
    jaxrank.ap_metric(scores, labels, where=where, topn=N, reduce_fn=None),
    jaxrank.ap_metric(scores, labels, where=where, reduce_fn=None),
  )


def test_ndcg_is_dcg_over_ideal_dcg(x64):
  scores, labels, where = random_lists(42, ties=True)
  dcg = jaxrank.dcg_metric(scores, labels, where=where, reduce_fn=None)
  ideal = jaxrank.dcg_metric(2.0**labels, labels, where=where, reduce_fn=None)  # Sorted by label.
  ndcg = jaxrank.ndcg_metric(scores, labels, where=where, reduce_fn=None)
  np.testing.assert_allclose(
    ndcg, np.where(ideal > 0, dcg / np.where(ideal > 0, ideal, 1), 0), **TOL64
  )


@pytest.mark.parametrize("fn", [jaxrank.ndcg_metric, jaxrank.dcg_metric], ids=["ndcg", "dcg"])
@pytest.mark.parametrize("topn", [None, 3])
def test_item_weights_match_reference(fn, topn, x64):
  scores, labels, where = random_lists(43, ties=True)
  rng = np.random.default_rng(44)
  weights = rng.choice([0.0, 0.5, 1.0, 2.0], scores.shape)
  scores[0, 1, :3] = -np.inf
  got = fn(scores, labels, where=where, topn=topn, item_weights=weights, reduce_fn=None)
  want = np.array(
    [
      reference.weighted_ndcg(
        s, y, w, item_weights=iw, topn=topn, normalise=fn is jaxrank.ndcg_metric
      )
      for s, y, w, iw in zip(*(a.reshape(-1, N) for a in (scores, labels, where, weights)))
    ]
  ).reshape(BATCH)
  np.testing.assert_allclose(got, want, **TOL64)
  # Weights of 1 change nothing; a weight of 0 is a gain of 0.
  np.testing.assert_array_equal(
    fn(scores, labels, where=where, topn=topn, item_weights=np.ones(N), reduce_fn=None),
    fn(scores, labels, where=where, topn=topn, reduce_fn=None),
  )


def test_item_weights_errors():
  scores, labels = jnp.array([0.3, 0.2, 0.1]), jnp.array([1, 0, 2])
  for fn in (jaxrank.ndcg_metric, jaxrank.dcg_metric):
    name = fn.__name__
    with pytest.raises(ValueError, match=rf"^{name}: item_weights must be non-negative, got -1"):
      fn(scores, labels, item_weights=jnp.array([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match=rf"^{name}: item_weights have shape \(2,\)"):
      fn(scores, labels, item_weights=jnp.array([1.0, 1.0]))
    with pytest.raises(TypeError, match=rf"^{name}: item_weights must be numeric"):
      fn(scores, labels, item_weights=np.array(["a", "b", "c"]))
    # A negative weight at a masked item is not read; traced weights are not checked.
    where = jnp.array([True, False, True])
    fn(scores, labels, where=where, item_weights=jnp.array([1.0, -1.0, 1.0]))
    jax.jit(lambda w: fn(scores, labels, item_weights=w))(jnp.array([1.0, -1.0, 1.0]))


@pytest.mark.parametrize("width", [12, 40])  # Written out, and a loop (beyond COMPARE_UP_TO).
def test_sum_in_order_ignores_where_the_zeros_are_and_is_accurate(width):
  """`evaluate_retrieval`'s sums over relevant slots: the same bits with empty slots anywhere,
  eagerly and compiled, and within a few roundings of the exact sum however many terms."""
  from jaxrank._src import metrics as metrics_src

  rng = np.random.default_rng(width)
  values = rng.uniform(0, 1, (6, width)).astype(np.float32)
  packed = np.pad(values, ((0, 0), (0, 9)))
  spread = np.zeros((6, width + 9), np.float32)
  for row, columns in enumerate(np.sort(rng.permutation(width + 9)[:width]) for _ in range(6)):
    spread[row, columns] = values[row]
  want = metrics_src.sum_in_order(jnp.asarray(packed))
  np.testing.assert_array_equal(jax.jit(metrics_src.sum_in_order)(spread), want)
  np.testing.assert_array_equal(metrics_src.sum_in_order(jnp.asarray(spread)), want)
  np.testing.assert_allclose(want, values.astype(np.float64).sum(-1), rtol=2.5e-7)
