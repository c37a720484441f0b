"""Tests of `evaluate_hashing` (`_src/hashing_evaluation.py`): Hamming ranking of a database.

References: `reference.py`'s brute-force tie-aware AP and NDCG (the mean over every ordering of
the tied items), and a direct numpy loop of the truncated AP (mAP@k) as HashNet's and DPSH's
evaluation code computes it, with a stable sort for the order of ties.
"""

from __future__ import annotations

import numpy as np
import pytest
import reference

import jaxrank

TOL64 = dict(rtol=1e-10, atol=1e-12)
TOL32 = dict(rtol=2e-5, atol=2e-6)


def _codes(rng, count, bits):
  return np.where(rng.random((count, bits)) < 0.5, 1, -1).astype(np.int8)


def _distances(queries, database):
  """Hamming distances `[Q, N]`, bit by bit."""
  return (queries[:, None, :] != database[None, :, :]).sum(axis=-1)


def _truncated_ap(distances, relevant, k):
  """mAP@k of one query, read from HashNet's / DPSH's loop: the first `k` of a stable sort of the
  distances; precision at each relevant item, over the relevant items in the top `k`."""
  order = np.argsort(distances, kind="stable")[:k]
  hits, total = 0, 0.0
  for t, item in enumerate(order, start=1):
    if relevant[item]:
      hits += 1
      total += hits / t
  return total / hits if hits else 0.0


def _levels(q_labels, d_labels):
  if q_labels.ndim == 1:
    return (q_labels[:, None] == d_labels[None, :]).astype(np.int64)
  return q_labels.astype(np.int64) @ d_labels.T.astype(np.int64)


CASES = {
  "class": lambda rng, q, n: (rng.integers(0, 3, q), rng.integers(0, 3, n)),
  "multi_hot": lambda rng, q, n: (
    (rng.random((q, 4)) < 0.4).astype(np.int32),
    (rng.random((n, 4)) < 0.4).astype(np.int32),
  ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_equals_mean_over_orderings_of_ties(case, x64):
  # Short lists (7 items, 3 bits): brute force over every ordering of the tied items.
  rng = np.random.default_rng(0)
  queries, database = _codes(rng, 6, 3), _codes(rng, 7, 3)
  q_labels, d_labels = CASES[case](rng, 6, 7)
  got = jaxrank.evaluate_hashing(
    queries, database, q_labels, d_labels, reduce_fn=None, chunk_size=4
  )
  d, levels = _distances(queries, database), _levels(q_labels, d_labels)
  np.testing.assert_allclose(
    got["tie_aware_map"], reference.per_list(reference.tie_aware_ap, -d, levels), **TOL64
  )
  np.testing.assert_allclose(
    got["tie_aware_ndcg"], reference.per_list(reference.tie_aware_ndcg, -d, levels), **TOL64
  )
  np.testing.assert_array_equal(got["num_relevant"], (levels >= 1).sum(axis=1))


def test_truncated_ap_matches_the_loop_in_padded_chunks():
  rng = np.random.default_rng(1)
  queries, database = _codes(rng, 13, 8), _codes(rng, 300, 8)
  q_labels, d_labels = CASES["multi_hot"](rng, 13, 300)
  ks = (1, 10, 57, 1000)  # 1,000 > N: the whole ranking. Chunks of 5: the last padded.
  got = jaxrank.evaluate_hashing(
    queries, database, q_labels, d_labels, ks=ks, reduce_fn=None, chunk_size=5
  )
  d, relevant = _distances(queries, database), _levels(q_labels, d_labels) >= 1
  for k in ks:
    want = [_truncated_ap(d[i], relevant[i], k) for i in range(len(d))]
    np.testing.assert_allclose(got[f"map@{k}"], want, **TOL32)
  # The tie-aware values are those of the list metrics, whatever the chunks.
  levels = _levels(q_labels, d_labels)
  ap = jaxrank.hamming_tie_aware_ap_metric(d, levels, num_bits=8, reduce_fn=None)
  ndcg = jaxrank.hamming_tie_aware_ndcg_metric(d, levels, num_bits=8, reduce_fn=None)
  np.testing.assert_allclose(got["tie_aware_map"], ap, **TOL32)
  np.testing.assert_allclose(got["tie_aware_ndcg"], ndcg, **TOL32)


def test_code_kinds_affinity_and_reduction():
  rng = np.random.default_rng(2)
  queries, database = _codes(rng, 5, 6), _codes(rng, 40, 6)
  q_labels, d_labels = CASES["class"](rng, 5, 40)
  q_labels[0] = 7  # No relevant item: 0, and left out of the mean.
  plus_minus = jaxrank.evaluate_hashing(
    queries, database, q_labels, d_labels, ks=(10,), reduce_fn=None
  )
  assert plus_minus["num_relevant"][0] == 0 and plus_minus["tie_aware_map"][0] == 0
  for q, db in [(queries > 0, database > 0), ((queries > 0) * 1, (database > 0).astype(float))]:
    bits = jaxrank.evaluate_hashing(q, db, q_labels, d_labels, ks=(10,), reduce_fn=None)
    for key, value in plus_minus.items():
      np.testing.assert_array_equal(bits[key], value, err_msg=key)
  # The same levels given as an affinity (integers; booleans for 0/1).
  levels = _levels(q_labels, d_labels)
  for affinity in (levels, levels.astype(bool), levels.astype(np.float32)):
    given = jaxrank.evaluate_hashing(queries, database, affinity=affinity, ks=(10,), reduce_fn=None)
    for key, value in plus_minus.items():
      np.testing.assert_array_equal(given[key], value, err_msg=key)
  reduced = jaxrank.evaluate_hashing(queries, database, q_labels, d_labels, ks=(10,))
  for key, value in reduced.items():
    assert value == pytest.approx(plus_minus[key][1:].mean(), rel=1e-12)


@pytest.mark.parametrize(
  "kwargs,error,match",
  [
    (dict(query_codes=np.array([[1.0, 0.5]])), ValueError, "got 0.5; binarize"),
    (dict(query_codes=np.array([[0, 1]]), database_codes=np.array([[-1, 1]])), ValueError, "mix"),
    (dict(database_codes=np.ones((3, 3))), ValueError, "differ in length"),
    (dict(query_labels=np.zeros((1, 2), np.int32)), ValueError, "does not match"),
    (dict(affinity=np.ones((1, 3))), ValueError, "either labels or affinity"),
    (dict(ks=(0,)), ValueError, "positive"),
    (dict(query_labels=None), ValueError, "give query_labels"),
  ],
)
def test_errors(kwargs, error, match):
  args = dict(
    query_codes=np.array([[1, -1]]),
    database_codes=np.array([[1, 1], [-1, 1], [1, -1]]),
    query_labels=np.array([0]),
    database_labels=np.array([0, 1, 0]),
  )
  args |= kwargs
  with pytest.raises(error, match=match):
    jaxrank.evaluate_hashing(**args)


def test_affinity_must_be_integer_levels():
  with pytest.raises(ValueError, match="non-negative integer levels"):
    jaxrank.evaluate_hashing(
      np.array([[1, -1]]), np.array([[1, 1], [-1, 1]]), affinity=np.array([[0.5, 1.0]])
    )


def test_benchmark_runs_at_a_tiny_scale():
  from experiments.benchmarks import hashing_eval  # pylint: disable=g-import-not-at-top

  seconds, before, after, result = hashing_eval.run_one(8, 300, 12, ks=(50,))
  assert seconds > 0 and after >= before
  assert sorted(result) == ["map@50", "tie_aware_map", "tie_aware_ndcg"]
