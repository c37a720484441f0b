"""Direct tests of the ranking primitives and the list reductions, against numpy and brute force.

`jaxrank._src.ranking` (tie groups, segment sums, run bounds, the statistics of relevant items,
descending ranks, NDCG gains and discounts) and `jaxrank._src.lists` (`safe_reduce`, `finish`) are
what every metric and loss is built on; here each is checked on its own: lists sorted and ties
counted by hand in plain Python, the tie-aware expected precision by enumerating every placement
of the relevant items of a tie (exact fractions), on hand-written cases (ties, masked items, NaN,
-0.0 and 0.0, leading batch axes) and on lists drawn by hypothesis.

hypothesis draws the values of arrays of one fixed shape from a small alphabet (so that ties,
signed zeros, infinities and NaN are frequent), and the jitted functions under test compile once
per shape and dtype. The search is derandomized (the same examples on every run) and keeps no
example database in the checkout.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
from fractions import Fraction

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import precision
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import jaxrank
from jaxrank._src import counting
from jaxrank._src import host_kernels
from jaxrank._src import lists
from jaxrank._src import platforms
from jaxrank._src import ranking

SEARCH = settings(max_examples=60, deadline=None, database=None, derandomize=True)
SHAPE = (2, 3, 6)  # Two leading batch axes, lists of 6.
NAN_NEG = -np.float64(np.nan)  # A NaN with its sign bit set.
ALPHABET = [-1.5, -1.0, -0.0, 0.0, 0.25, 1.0, np.inf, -np.inf, np.nan, NAN_NEG]
FINITE_ALPHABET = [-1.5, -1.0, -0.0, 0.0, 0.25, 1.0, 3.0]


def arrays(dtype, elements, shape=SHAPE):
  return hnp.arrays(dtype, shape, elements=st.sampled_from(elements))


def list_inputs(dtype=np.float32, alphabet=ALPHABET):
  """(scores, labels in {0, 1, 2}, where), each `SHAPE`."""
  return st.tuples(
    arrays(dtype, alphabet),
    hnp.arrays(np.int32, SHAPE, elements=st.integers(0, 2)),
    hnp.arrays(np.bool_, SHAPE, elements=st.booleans()),
  )


def each_list(*arrays_):
  """The 1-D lists of `[..., n]` arrays, as tuples of numpy arrays."""
  arrays_ = [np.asarray(a) for a in arrays_]
  for idx in np.ndindex(arrays_[0].shape[:-1]):
    yield idx, [a[idx] for a in arrays_]


# ---------------------------------------------------------------------------------------------
# Brute-force references: one list, plain Python.


def _sort_key(score, label, valid, index):
  """Valid items first; by decreasing score (NaN after every number, -0.0 equal to 0.0), then by
  increasing label, then by index."""
  score = float(score)
  nan = math.isnan(score)
  return (not valid, nan, 0.0 if nan else -score, int(label), index)


def brute_tie_groups(scores, labels, where):
  """(order, num_above, group_size) of one list; the counts only at valid positions (else -1)."""
  n = len(scores)
  order = sorted(range(n), key=lambda i: _sort_key(scores[i], labels[i], where[i], i))
  num_above, group_size = [-1] * n, [-1] * n
  valid = [i for i in range(n) if where[i]]
  numbers = [i for i in valid if not math.isnan(float(scores[i]))]
  for position, i in enumerate(order):
    if not where[i]:
      continue
    if math.isnan(float(scores[i])):  # A group of its own, after every number.
      num_above[position], group_size[position] = position, 1
    else:
      num_above[position] = sum(1 for j in numbers if scores[j] > scores[i])
      group_size[position] = sum(1 for j in numbers if scores[j] == scores[i])
  return order, num_above, group_size


def brute_expected_precision(num_above, num_tied, relevant_above, relevant_tied):
  """One relevant item's share of the expected sum of precisions of its tie's relevant items,
  over every placement of the `relevant_tied` relevant items among the `num_tied` positions."""
  total, count = Fraction(0), 0
  for chosen in itertools.combinations(range(1, num_tied + 1), relevant_tied):
    count += 1
    for hits, position in enumerate(chosen, start=1):
      total += Fraction(relevant_above + hits, num_above + position)
  return total / (count * relevant_tied)


def brute_ranks(scores):
  """1-based ranks of one list: decreasing score, ties (-0.0 == 0.0) by position."""
  order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
  ranks = np.empty(len(scores))
  for position, i in enumerate(order):
    ranks[i] = position + 1
  return ranks


def brute_dcg_discounts(n, topn=None):
  return [1 / math.log2(1 + i) if topn is None or i <= topn else 0.0 for i in range(1, n + 1)]


# ---------------------------------------------------------------------------------------------
# tie_groups


tie_groups = jax.jit(ranking.tie_groups)


@functools.cache
def tie_groups_on(platform):
  """`ranking.tie_groups` jitted on one platform's form: the CPU's (numpy's sort through a host
  callback) or the accelerators' (XLA's sort), traced inside `forced_platform` at the first call
  (one trace per shape and dtype, each inside the block)."""

  def fn(*args):
    with platforms.forced_platform(platform):
      return ranking.tie_groups(*args)

  return jax.jit(fn)


def assert_tie_groups(scores, labels, where, platform=None):
  groups = (tie_groups if platform is None else tie_groups_on(platform))(scores, labels, where)
  chex.assert_shape(list(groups), scores.shape)
  for idx, (s, y, w) in each_list(scores, labels, where):
    order, num_above, group_size = brute_tie_groups(s, y, w)
    np.testing.assert_array_equal(groups.order[idx], order)
    np.testing.assert_array_equal(groups.valid[idx], w[order])
    np.testing.assert_array_equal(groups.labels[idx], y[order])
    valid = w[order]
    np.testing.assert_array_equal(
      np.asarray(groups.num_above[idx])[valid], np.array(num_above)[valid]
    )
    np.testing.assert_array_equal(
      np.asarray(groups.group_size[idx])[valid], np.array(group_size)[valid]
    )


def test_tie_groups_by_hand():
  # 0.5 twice, a NaN of each sign, -0.0 and 0.0 (one group), inf and -inf, a masked item.
  scores = np.array([0.5, np.nan, 0.5, -0.0, 0.0, np.inf, NAN_NEG, -np.inf, 0.7], np.float32)
  labels = np.array([1, 0, 0, 1, 2, 1, 1, 0, 1], np.int32)
  where = np.array([True] * 8 + [False])
  groups = tie_groups(scores, labels, where)
  # inf; 0.5 (label 0 first); 0.0 and -0.0 (label 1 first); -inf; the NaNs (label 0 first); masked.
  np.testing.assert_array_equal(groups.order, [5, 2, 0, 3, 4, 7, 1, 6, 8])
  np.testing.assert_array_equal(groups.labels, [1, 0, 1, 1, 2, 0, 0, 1, 1])
  np.testing.assert_array_equal(groups.valid, [True] * 8 + [False])
  np.testing.assert_array_equal(groups.num_above[:8], [0, 1, 1, 3, 3, 5, 6, 7])
  np.testing.assert_array_equal(groups.group_size[:8], [1, 2, 2, 2, 2, 1, 1, 1])
  for platform in platforms.PLATFORMS:
    assert_tie_groups(scores, labels, where, platform)


@SEARCH
@given(list_inputs(np.float32))
def test_tie_groups_match_brute_force_on_both_platforms(inputs):
  for platform in platforms.PLATFORMS:
    assert_tie_groups(*inputs, platform)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numpy_group_order_is_a_stable_lexsort_on_many_lists(dtype):
  """Enough lists to be split over the cores, ties (so that the labels decide) and NaN labels:
  the order of numpy's stable sort by (invalid, score key, label)."""
  rng = np.random.default_rng(0)
  shape = (3, 40, 700)  # Above host_kernels._PARALLEL_ITEMS values.
  neg = np.round(rng.normal(size=shape) * 4).astype(dtype) / 4  # About 40 distinct values.
  neg[0, 0, :5] = np.nan
  labels = rng.integers(0, 3, shape).astype(np.float32)
  labels[1, 1, :50] = np.nan
  invalid = (rng.random(shape) < 0.1).astype(np.int32)
  order = host_kernels.numpy_group_order(invalid, neg, labels)
  want = np.lexsort((labels, neg, invalid), axis=-1)
  np.testing.assert_array_equal(order, want)
  assert order.dtype == np.int32


def test_tie_groups_float64_and_vmap(x64):
  scores = np.array([[0.3, 0.1, 0.3, -0.0, 0.0, 0.3], [1e-300, 0.0, -1e-300, 2.0, 2.0, 1.0]])
  labels = np.array([[2, 1, 0, 1, 1, 0], [0, 1, 1, 0, 1, 1]], np.int32)
  where = np.array([[True, True, True, True, True, False], [True] * 6])
  assert_tie_groups(scores, labels, where)  # 1e-300 and -1e-300 are not 0 in float64.
  chex.assert_trees_all_equal(
    jax.vmap(ranking.tie_groups)(scores, labels, where), tie_groups(scores, labels, where)
  )


# ---------------------------------------------------------------------------------------------
# run_bounds and segment_totals


run_bounds = jax.jit(ranking.run_bounds)


@SEARCH
@given(hnp.arrays(np.bool_, SHAPE[:-1] + (SHAPE[-1] - 1,), elements=st.booleans()))
def test_run_bounds_match_brute_force(differs):
  start, end = run_bounds(differs)
  chex.assert_shape([start, end], SHAPE)
  chex.assert_type([start, end], jnp.int32)
  n = SHAPE[-1]
  for idx, (d,) in each_list(differs):
    # Position q starts a run if q == 0 or differs[q - 1]; ends one if q == n - 1 or differs[q].
    starts = [q for q in range(n) if q == 0 or d[q - 1]]
    ends = [q for q in range(n) if q == n - 1 or d[q]]
    np.testing.assert_array_equal(start[idx], [max(q for q in starts if q <= p) for p in range(n)])
    np.testing.assert_array_equal(end[idx], [min(q for q in ends if q >= p) for p in range(n)])


def test_run_bounds_by_hand():
  start, end = run_bounds(np.array([False, True, True, False, False]))
  np.testing.assert_array_equal(start, [0, 0, 2, 3, 3, 3])
  np.testing.assert_array_equal(end, [1, 1, 2, 5, 5, 5])
  start, end = run_bounds(np.zeros((2, 0), bool))  # Lists of one item.
  np.testing.assert_array_equal(start, [[0], [0]])
  np.testing.assert_array_equal(end, [[0], [0]])


@jax.jit
def _segment_totals(scores, labels, where, values):
  groups = ranking.tie_groups(scores, labels, where)
  sorted_values = jnp.where(groups.valid, jnp.take_along_axis(values, groups.order, -1), 0)
  return groups, sorted_values, ranking.segment_totals(groups, sorted_values)


@SEARCH
@given(list_inputs(np.float32), hnp.arrays(np.int32, SHAPE, elements=st.integers(-3, 5)))
def test_segment_totals_match_brute_force(inputs, values):
  scores, labels, where = inputs
  groups, sorted_values, (above, within) = _segment_totals(scores, labels, where, values)
  chex.assert_shape([above, within], SHAPE)
  for idx, (s, y, w, v) in each_list(scores, labels, where, sorted_values):
    _, num_above, group_size = brute_tie_groups(s, y, w)
    for p in range(len(s)):
      if num_above[p] < 0:  # A masked position.
        continue
      assert above[idx][p] == sum(v[: num_above[p]])
      assert within[idx][p] == sum(v[num_above[p] : num_above[p] + group_size[p]])


# ---------------------------------------------------------------------------------------------
# relevant_item_statistics and list_relevant_statistics


def test_relevant_item_statistics_by_hand(x64):
  # A tie of 4 items (2 relevant) after 3 items (1 relevant): positions 4..7.
  stats = ranking.relevant_item_statistics(
    jnp.array([3, 3]),
    jnp.array([4, 4]),
    jnp.array([1, 1]),
    jnp.array([2, 2]),
    jnp.array([1, 2]),
    list_size=7,
    dtype=jnp.float64,
  )
  np.testing.assert_array_equal(stats.rank, [6, 7])  # The two non-relevant items first.
  np.testing.assert_array_equal(stats.hits, [2, 3])
  # (1/4) sum_j (2 + (j - 1) / 3) / (3 + j), j = 1..4.
  want = sum((2 + (j - 1) / 3) / (3 + j) for j in range(1, 5)) / 4
  np.testing.assert_allclose(stats.expected_precision, [want, want], rtol=1e-15)
  assert float(brute_expected_precision(3, 4, 1, 2)) == pytest.approx(want, rel=1e-15)
  # A tie of one item: precision (R + 1) / (N + 1), exactly.
  stats = ranking.relevant_item_statistics(
    jnp.array(5),
    jnp.array(1),
    jnp.array(2),
    jnp.array(1),
    jnp.array(1),
    list_size=6,
    dtype=jnp.float64,
  )
  assert int(stats.rank) == 6 and int(stats.hits) == 3
  assert float(stats.expected_precision) == pytest.approx(0.5, rel=1e-15)


def _counts():
  """(N, n, R, r, p) with 1 <= r <= n, R <= N, 1 <= p <= r."""
  return st.integers(0, 12).flatmap(
    lambda big_n: st.integers(1, 7).flatmap(
      lambda n: st.tuples(
        st.just(big_n), st.just(n), st.integers(0, big_n), st.integers(1, n)
      ).flatmap(lambda c: st.tuples(*map(st.just, c), st.integers(1, c[3])))
    )
  )


relevant_item_statistics = jax.jit(
  ranking.relevant_item_statistics, static_argnames=("list_size", "dtype")
)


@SEARCH
@given(st.lists(_counts(), min_size=8, max_size=8))
def test_relevant_item_statistics_match_enumeration(counts):
  with precision(np.float64):
    big_n, n, big_r, r, p = (np.array(c, np.int32) for c in zip(*counts))
    stats = relevant_item_statistics(big_n, n, big_r, r, p, list_size=20, dtype=jnp.float64)
    np.testing.assert_array_equal(stats.rank, big_n + (n - r) + p)
    np.testing.assert_array_equal(stats.hits, big_r + p)
    want = [float(brute_expected_precision(*c[:4])) for c in counts]
    np.testing.assert_allclose(stats.expected_precision, want, rtol=1e-14)


def test_relevant_item_statistics_keep_float32_precision_far_down_the_list():
  # H(N + n) - H(N) for N = 10**5 would lose most digits as a plain float32 difference (an
  # absolute error of about (R + 1) 1e-6 here); the table's high and low parts keep it. What is
  # left is the cancellation in `n - (N + 1) (H(N + n) - H(N))`: a relative error up to 4e-4 for
  # these cases, an absolute one below 1e-7, under float32's resolution of an AP in [0, 1].
  cases = [(100_000, 3, 40, 2), (99_990, 7, 3, 7), (50_000, 1, 0, 1), (0, 5, 0, 3)]
  big_n, n, big_r, r = (np.array(c, np.int32) for c in zip(*cases))
  stats = ranking.relevant_item_statistics(
    big_n, n, big_r, r, np.ones_like(r), list_size=100_010, dtype=jnp.float32
  )
  chex.assert_type(stats.expected_precision, jnp.float32)
  want = [float(brute_expected_precision(*c)) for c in cases]
  np.testing.assert_allclose(stats.expected_precision, want, rtol=1e-6, atol=1e-7)


@jax.jit
def _list_statistics(scores, labels, where):
  groups = ranking.tie_groups(scores, labels, where)
  relevant = groups.valid & (groups.labels >= 1)
  return relevant, ranking.list_relevant_statistics(groups, relevant, jnp.float64)


def assert_list_statistics(scores, labels, where):
  relevant, stats = _list_statistics(scores, labels, where)
  chex.assert_shape(list(stats), scores.shape)
  for idx, (s, y, w, rel) in each_list(scores, labels, where, relevant):
    _, num_above, group_size = brute_tie_groups(s, y, w)
    for p in np.flatnonzero(rel):
      start, size = num_above[p], group_size[p]
      group = rel[start : start + size]
      r, position = int(group.sum()), int(group[: p - start + 1].sum())
      big_r = int(rel[:start].sum())
      # Inside a tie, the non-relevant items come first (worst label first): rank = position.
      assert stats.rank[idx][p] == p + 1 == start + (size - r) + position
      assert stats.hits[idx][p] == rel[: p + 1].sum()
      want = float(brute_expected_precision(start, size, big_r, r))
      np.testing.assert_allclose(stats.expected_precision[idx][p], want, rtol=1e-14)


@SEARCH
@given(list_inputs(np.float64))
def test_list_relevant_statistics_match_brute_force(inputs):
  with precision(np.float64):
    assert_list_statistics(*inputs)


def test_list_relevant_statistics_of_one_big_tie(x64):
  # Every valid item tied: each relevant item's expected precision is the tie's share.
  scores = np.full((2, 6), 0.5)
  labels = np.array([[1, 0, 2, 0, 1, 0], [0, 0, 0, 0, 0, 1]], np.int32)
  where = np.array([[True] * 6, [True, True, False, True, True, True]])
  relevant, stats = _list_statistics(scores, labels, where)
  assert_list_statistics(scores, labels, where)
  # 3 relevant of 6: (1/6) sum_j (1 + (j - 1) 2/5) / j; 1 relevant of 5 valid: H(5) / 5.
  first = sum((1 + (j - 1) * 2 / 5) / j for j in range(1, 7)) / 6
  np.testing.assert_allclose(stats.expected_precision[0][relevant[0]], first, rtol=1e-15)
  second = sum(1 / j for j in range(1, 6)) / 5
  np.testing.assert_allclose(stats.expected_precision[1][relevant[1]], second, rtol=1e-15)


# ---------------------------------------------------------------------------------------------
# descending_ranks


descending_ranks = jax.jit(ranking.descending_ranks)


def assert_ranks(got, scores):
  for idx, (s,) in each_list(scores):
    np.testing.assert_array_equal(got[idx], brute_ranks(s))


@SEARCH
@given(arrays(np.float32, FINITE_ALPHABET + [np.inf, -np.inf]))
def test_descending_ranks_match_brute_force(scores):
  got = descending_ranks(scores)
  chex.assert_shape(got, SHAPE)
  chex.assert_type(got, jnp.float32)
  assert_ranks(got, scores)


def brute_ranks_nan_last(scores):
  """`brute_ranks` with NaN scores (of either sign) after every number, in the order of the list."""
  order = sorted(
    range(len(scores)),
    key=lambda i: (bool(np.isnan(scores[i])), 0.0 if np.isnan(scores[i]) else -scores[i], i),
  )
  ranks = np.empty(len(scores))
  ranks[order] = np.arange(1, len(scores) + 1)
  return ranks


@functools.cache
def descending_ranks_on(branch):
  """`ranking.descending_ranks` compiled for `SHAPE` float32 on one branch (traced inside it)."""
  with ranking.descending_ranks_branch(branch):
    fn = jax.jit(lambda s: ranking.descending_ranks(s))  # A new function: traced afresh.
    traced = fn.trace(jax.ShapeDtypeStruct(SHAPE, jnp.float32))
  return traced.lower().compile()


@SEARCH
@given(arrays(np.float32, ALPHABET))
def test_descending_ranks_of_nan_and_infinities_on_both_branches(scores):
  want = np.stack([brute_ranks_nan_last(s) for s in scores.reshape(-1, SHAPE[-1])]).reshape(SHAPE)
  for branch in ranking.DESCENDING_RANKS_BRANCHES:
    np.testing.assert_array_equal(descending_ranks_on(branch)(scores), want, err_msg=branch)
  np.testing.assert_array_equal(
    host_kernels.numpy_descending_ranks(scores.astype(np.float64)), want
  )


def test_descending_ranks_eager_vmap_and_float64(x64):
  scores = np.array([[0.5, -0.0, 0.0, 0.5, 1.0, -np.inf], [3.0, 2.0, 2.0, -1e-300, 1e-300, 0.0]])
  assert_ranks(ranking.descending_ranks(scores), scores)
  np.testing.assert_array_equal(ranking.descending_ranks(scores[0]), [2, 4, 5, 3, 1, 6])
  chex.assert_trees_all_equal(jax.vmap(ranking.descending_ranks)(scores), descending_ranks(scores))
  chex.assert_type(ranking.descending_ranks(scores), jnp.float64)
  low = ranking.descending_ranks(jnp.asarray(scores, jnp.bfloat16))
  chex.assert_type(low, jnp.bfloat16)
  assert_ranks(low, np.asarray(jnp.asarray(scores, jnp.bfloat16), np.float64))


# ---------------------------------------------------------------------------------------------
# gains, discounts, ideal_dcg


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_gains(dtype):
  labels = np.array([[0, 1, 2, 3], [0.5, 1.5, 3.0, 0.0]], np.float32)
  where = np.array([[True, True, False, True], [True] * 4])
  with precision(dtype):
    got = ranking.gains(jnp.asarray(labels), jnp.asarray(where), dtype)
  chex.assert_type(got, dtype)
  want = np.where(where, 2.0 ** labels.astype(np.float64) - 1, 0.0)
  np.testing.assert_allclose(got, want, rtol=1e-7 if dtype == np.float32 else 1e-15)
  chex.assert_trees_all_equal(np.asarray(got)[~where], np.zeros(1, dtype))


@pytest.mark.parametrize("topn", [None, 1, 3, 10])
def test_discounts(topn, x64):
  for n in (1, 5):
    got = ranking.discounts(n, jnp.float64, topn=topn)
    chex.assert_shape(got, (n,))
    np.testing.assert_allclose(got, brute_dcg_discounts(n, topn), rtol=1e-15)
  assert float(ranking.discounts(2, jnp.float64)[0]) == 1.0


@pytest.mark.parametrize("topn", [None, 2, 10])
def test_ideal_dcg(topn, x64):
  rng = np.random.default_rng(0)
  gains = np.where(rng.random((2, 3, 5)) < 0.3, 0.0, 2.0 ** rng.integers(0, 4, (2, 3, 5)) - 1)
  got = jax.jit(ranking.ideal_dcg, static_argnames="topn")(gains, topn=topn)
  chex.assert_shape(got, (2, 3))
  discount = brute_dcg_discounts(5, topn)
  for idx, (g,) in each_list(gains):
    want = math.fsum(d * x for d, x in zip(discount, sorted(g, reverse=True)))
    assert float(got[idx]) == pytest.approx(want, rel=1e-15)
  chex.assert_trees_all_close(ranking.ideal_dcg(gains, topn=topn), got, rtol=1e-15)


# ---------------------------------------------------------------------------------------------
# safe_reduce and finish


def test_safe_reduce_by_hand(x64):
  values = np.array([[0.5, np.nan, 2.0], [1.0, 3.0, np.inf]])  # Invalid lists may hold anything.
  valid = np.array([[True, False, True], [True, True, False]])
  chex.assert_trees_all_equal(
    lists.safe_reduce(values, valid, None), np.array([[0.5, 0.0, 2.0], [1.0, 3.0, 0.0]])
  )
  assert float(lists.safe_reduce(values, valid, jnp.sum)) == 6.5
  assert float(lists.safe_reduce(values, valid, jnp.mean)) == 6.5 / 4
  # Any other reduce_fn is called as reduce_fn(values, where=valid) on the masked values.
  seen = {}

  def largest(v, *, where):
    seen["values"], seen["where"] = v, where
    return jnp.max(v, where=where, initial=-1.0)

  assert float(lists.safe_reduce(values, valid, largest)) == 3.0
  chex.assert_trees_all_equal(seen["where"], valid)
  assert np.all(np.isfinite(seen["values"]))
  # Weights: weighted values, their sum, the weighted mean over the valid lists.
  weights = np.array([[2.0, 5.0, 0.5], [1.0, 0.0, 7.0]])
  chex.assert_trees_all_equal(
    lists.safe_reduce(values, valid, None, weights=weights),
    np.array([[1.0, 0.0, 1.0], [1.0, 0.0, 0.0]]),
  )
  assert float(lists.safe_reduce(values, valid, jnp.sum, weights=weights)) == 3.0
  assert float(lists.safe_reduce(values, valid, jnp.mean, weights=weights)) == 3.0 / 3.5
  assert float(lists.safe_reduce(values, valid, jnp.mean, weights=np.zeros((2, 3)))) == 0.0


@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted"])
@pytest.mark.parametrize("reduce_fn", [jnp.mean, jnp.sum, None], ids=["mean", "sum", "none"])
def test_safe_reduce_without_valid_list_is_zero_with_zero_gradient(reduce_fn, weighted, x64):
  values = np.array([[0.3, np.nan], [np.inf, 2.0]])
  valid = np.zeros((2, 2), bool)
  weights = np.full((2, 2), 2.0) if weighted else None

  def total(v):
    return jnp.sum(lists.safe_reduce(v, valid, reduce_fn, weights=weights))

  value, grad = jax.value_and_grad(total)(values)
  assert float(value) == 0.0
  chex.assert_trees_all_equal(grad, np.zeros((2, 2)))


@SEARCH
@given(
  hnp.arrays(np.float64, (3, 4), elements=st.sampled_from([0.0, 0.25, 1.0, 3.5, np.nan])),
  hnp.arrays(np.bool_, (3, 4), elements=st.booleans()),
  hnp.arrays(np.float64, (3, 4), elements=st.sampled_from([0.0, 0.5, 2.0])),
)
def test_safe_reduce_matches_numpy(values, valid, weights):
  with precision(np.float64):
    for w in (None, weights):
      ww = np.ones(values.shape) if w is None else weights
      kept = np.where(valid, values * ww, 0.0)
      chex.assert_trees_all_equal(lists.safe_reduce(values, valid, None, weights=w), kept)
      np.testing.assert_allclose(
        lists.safe_reduce(values, valid, jnp.sum, weights=w), kept.sum(), rtol=1e-15
      )
      total = np.sum(np.where(valid, ww, 0.0))
      mean = kept.sum() / (total if total else 1.0)  # 0 without a valid weight (NaN stays).
      np.testing.assert_allclose(
        lists.safe_reduce(values, valid, jnp.mean, weights=w), mean, rtol=1e-15
      )


finish = jax.jit(lists.finish, static_argnames="reduce_fn")


@SEARCH
@given(
  list_inputs(np.float32),
  hnp.arrays(np.float32, SHAPE[:-1], elements=st.sampled_from([0.0, 0.5, 1.0])),
  hnp.arrays(np.bool_, SHAPE[:-1], elements=st.booleans()),
)
def test_finish_matches_brute_force(inputs, values, valid_lists):
  scores, _, where = inputs
  per = np.asarray(finish(values, scores, where, valid_lists, None))
  for idx, (s, w) in each_list(scores, where):
    if not valid_lists[idx]:  # A list without a relevant item is 0, even with a NaN.
      assert per[idx] == 0.0
    elif np.any(np.isnan(s) & w):  # A valid NaN makes the list NaN; masked NaNs are ignored.
      assert np.isnan(per[idx])
    else:
      assert per[idx] == values[idx]
  kept = np.where(valid_lists, per, 0.0)
  for reduce_fn, want in (
    (jnp.sum, kept.sum()),
    (jnp.mean, kept.sum() / max(valid_lists.sum(), 1)),
  ):
    np.testing.assert_allclose(
      finish(values, scores, where, valid_lists, reduce_fn), want, rtol=1e-6
    )


def test_finish_by_hand():
  values = jnp.array([0.25, 0.5, 0.75, 1.0])
  scores = jnp.array([[0.1, np.nan], [0.2, np.nan], [np.nan, 0.3], [-0.0, 0.0]])
  where = jnp.array([[True, True], [True, False], [True, True], [True, True]])
  valid_lists = jnp.array([True, True, False, True])
  np.testing.assert_array_equal(
    lists.finish(values, scores, where, valid_lists, None), [np.nan, 0.5, 0.0, 1.0]
  )
  assert np.isnan(lists.finish(values, scores, where, valid_lists, jnp.mean))
  clean = valid_lists.at[0].set(False)
  assert float(lists.finish(values, scores, where, clean, jnp.mean)) == 0.75


# Closed-over arrays embedded compactly (lists.embedded_compactly).

_BIG = (3, 345)  # 1,035 entries: above lists.COMPACT_MIN_SIZE, a last axis not a multiple of 8.
_RNG = np.random.default_rng(5)
_COMPACTED = {
  "bool": _RNG.random(_BIG) < 0.5,
  "binary int32": (_RNG.random(_BIG) < 0.5).astype(np.int32),
  "binary float32": (_RNG.random(_BIG) < 0.5).astype(np.float32),
  "graded int64": _RNG.integers(-128, 128, _BIG),
  "graded float64, 3 axes": _RNG.integers(0, 5, (3, 5, 69)).astype(np.float64),
  "jax array": jnp.asarray(_RNG.integers(0, 4, _BIG), jnp.int32),
}
_KEPT = {
  "fractions": _RNG.uniform(0, 2, _BIG).astype(np.float32),
  "beyond int8": np.full(_BIG, 200, np.int32),
  "NaN": np.where(_RNG.random(_BIG) < 0.5, np.nan, 1.0),
  "small": (_RNG.random((4, 8)) < 0.5).astype(np.int32),
}


def _through_jit(x):
  """What `embedded_compactly` gives for `x` closed over beside traced scores, and whether it
  returned `x` itself."""
  kept = []

  def f(s):
    out = lists.embedded_compactly(x, s)
    kept.append(out is x)
    return out

  return jax.jit(f)(jnp.zeros(())), kept[0]


@pytest.mark.parametrize("name", list(_COMPACTED))
def test_compactly_embedded_arrays_keep_their_values_and_dtype(name):
  x = _COMPACTED[name]
  got, kept = _through_jit(x)
  assert not kept
  assert got.dtype == jnp.asarray(x).dtype and got.shape == x.shape
  np.testing.assert_array_equal(got, x)


@pytest.mark.parametrize("name", list(_KEPT))
def test_other_arrays_are_embedded_as_they_are(name):
  got, kept = _through_jit(_KEPT[name])
  assert kept
  np.testing.assert_array_equal(got, _KEPT[name])


def test_only_arrays_beside_traced_scores_are_compacted():
  x = _COMPACTED["binary int32"]
  assert lists.embedded_compactly(x, jnp.zeros(())) is x  # Eager: nothing is embedded.
  assert lists.embedded_compactly(None, jnp.zeros(())) is None
  traced = []
  jax.jit(lambda y, s: traced.append(lists.embedded_compactly(y, s) is y))(x, jnp.zeros(()))
  assert traced == [True]  # A traced array (an argument) is not a constant.


# ---------------------------------------------------------------------------------------------
# Counting around relevant items (`evaluate_retrieval`).


def _sorted_thresholds(thresholds):
  """Each list's thresholds in decreasing order, NaN last."""
  return -np.sort(-np.asarray(thresholds, np.float32), axis=-1)


@pytest.mark.parametrize("num_thresholds", [5, counting.COMPARE_UP_TO, counting.COMPARE_UP_TO + 7])
@pytest.mark.parametrize("branch", [None, *ranking.DESCENDING_RANKS_BRANCHES])
def test_count_above_and_tied_matches_brute_force(num_thresholds, branch):
  """Every path (compare up to COMPARE_UP_TO thresholds, then numpy's or XLA's sort) counts the
  same, with ties, signed zeros, infinities, NaN scores (which count nothing) and NaN
  thresholds (empty slots: counts 0); comparing keeps the thresholds' order, sorting sorts them
  (decreasing, NaN last)."""
  rng = np.random.default_rng(num_thresholds)
  values = np.array([v for v in ALPHABET if not np.isnan(v)] + [np.nan], np.float32)
  scores = rng.choice(values, (4, 60)).astype(np.float32)
  thresholds = rng.choice(values, (4, num_thresholds)).astype(np.float32)
  thresholds[0] = np.nan  # A list without a threshold.
  with ranking.descending_ranks_branch(branch) if branch else contextlib.nullcontext():
    got = jax.jit(lambda s, t: counting.count_above_and_tied(s, t))(scores, thresholds)
  compared = num_thresholds <= counting.COMPARE_UP_TO and branch != "xla"
  want_order = thresholds if compared else _sorted_thresholds(thresholds)
  np.testing.assert_array_equal(got.thresholds, want_order)
  for i, j in itertools.product(range(4), range(num_thresholds)):
    t = want_order[i, j]
    assert got.above[i, j] == (0 if np.isnan(t) else np.sum(scores[i] > t)), (i, j)
    assert got.tied[i, j] == (0 if np.isnan(t) else np.sum(scores[i] == t)), (i, j)
  assert got.above.dtype == got.tied.dtype == jnp.int32


@pytest.mark.parametrize("c, n", [(1, 5), (7, 16), (9, 37), (4, 200)])
def test_compare_counts_counts_every_list_and_item(c, n):
  """The CPU's comparing loop takes lists in tiles of `COMPARE_LISTS` (the last overlapping its
  neighbour) and items `COMPARE_LANES` at a time (the last few after the loop, or alone when a
  list is shorter than a step), and counts each list's NaN scores."""
  # What the cases cross.
  assert 1 < counting.COMPARE_LISTS < 7 and 5 < counting.COMPARE_LANES <= 16
  rng = np.random.default_rng(c * n)
  values = np.array([v for v in ALPHABET if not np.isnan(v)] + [np.nan], np.float32)
  scores = rng.choice(values, (c, n)).astype(np.float32)
  thresholds = rng.choice(values, (c, 3)).astype(np.float32)
  ordered, above, tied, nans = jax.jit(counting.compare_counts)(scores, thresholds)
  np.testing.assert_array_equal(ordered, thresholds)
  np.testing.assert_array_equal(above, np.sum(scores[:, None, :] > thresholds[:, :, None], -1))
  np.testing.assert_array_equal(tied, np.sum(scores[:, None, :] == thresholds[:, :, None], -1))
  np.testing.assert_array_equal(nans, np.sum(np.isnan(scores), -1))
  # The accelerators' one pass: the same counts, around the thresholds sorted.
  keys, above, tied, nans = jax.jit(counting.fused_compare_counts)(scores, thresholds)
  np.testing.assert_array_equal(keys, _sorted_thresholds(thresholds))
  np.testing.assert_array_equal(above, np.sum(scores[:, None, :] > keys[:, :, None], -1))
  np.testing.assert_array_equal(tied, np.sum(scores[:, None, :] == keys[:, :, None], -1))
  np.testing.assert_array_equal(nans, np.sum(np.isnan(scores), -1))


def test_fused_compare_counts_reads_the_scores_in_one_reduction():
  """One variadic reduction over the items, whatever the number of thresholds: no `[c, R, n]`
  comparison (a reduction per threshold, each reading every list), and int32 counts."""
  scores = jax.ShapeDtypeStruct((6, 50), jnp.float32)
  thresholds = jax.ShapeDtypeStruct((6, 7), jnp.float32)
  jaxpr = jax.make_jaxpr(counting.fused_compare_counts)(scores, thresholds).jaxpr
  shapes = [v.aval.shape for e in jaxpr.eqns for v in (*e.invars, *e.outvars) if hasattr(v, "aval")]
  assert (6, 7, 50) not in shapes
  reductions = [e for e in jaxpr.eqns if e.primitive.name.startswith("reduce")]
  assert len(reductions) == 1 and len(reductions[0].outvars) == 2 * 7 + 1
  out = jax.eval_shape(counting.fused_compare_counts, scores, thresholds)
  assert [x.dtype for x in out[1:]] == [jnp.int32] * 3


def test_numpy_sorted_counts_under_vmap_and_on_many_lists():
  """The callback takes leading batch axes (vmap) and splits many lists over the cores."""
  rng = np.random.default_rng(0)
  scores = rng.integers(0, 30, (3, 40, 2000)).astype(np.float32)  # Above the parallel size.
  thresholds = scores[..., :50]
  with ranking.descending_ranks_branch("numpy"):
    got = jax.jit(jax.vmap(counting.count_above_and_tied))(scores, thresholds)
  with ranking.descending_ranks_branch("xla"):
    want = jax.jit(jax.vmap(counting.count_above_and_tied))(scores, thresholds)
  chex.assert_trees_all_equal(got, want)


@pytest.mark.parametrize("num", [6, 40])
def test_relevant_ties_match_brute_force(num):
  """In any order up to COMPARE_UP_TO slots, in decreasing order beyond (as the counts give)."""
  rng = np.random.default_rng(num)
  values = rng.choice(np.array([-1.0, -0.0, 0.0, 0.5, 2.0], np.float32), (5, num))
  values[1, num // 2 :] = np.nan
  if num > counting.COMPARE_UP_TO:
    values = _sorted_thresholds(values)
  above, tied, position = (np.asarray(x) for x in counting.relevant_ties(jnp.asarray(values)))
  for i, j in np.argwhere(~np.isnan(values)):
    row = values[i][~np.isnan(values[i])]
    assert above[i, j] == np.sum(row > values[i, j])
    assert tied[i, j] == np.sum(row == values[i, j])
    # The places among equal scores are 1, 2, ..., tied in slot order: each once.
    equal = np.flatnonzero(values[i] == values[i, j])
    assert position[i, j] == 1 + np.searchsorted(equal, j)


def test_float64_counts_where_the_host_callback_runs_without_x64():
  """The sorted counts' host callback, compiled inside the thread-local `jax.enable_x64(True)`
  and run where it does not hold (as on one of XLA's threads): the float64 thresholds come back
  as they are, and scores that differ beyond float32's precision are counted apart."""
  rng = np.random.default_rng(4)
  num = counting.COMPARE_UP_TO + 3
  count = lambda s, t: counting.count_above_and_tied(s, t)  # noqa: E731
  with jax.enable_x64(True), ranking.descending_ranks_branch("numpy"):
    scores = jnp.asarray(rng.normal(size=(2, 60)))
    scores = scores.at[:, 1].set(scores[:, 0] + 1e-12)  # Tied in float32 only.
    thresholds = scores[:, :num]
    compiled = jax.jit(count).lower(scores, thresholds).compile()
    inside = compiled(scores, thresholds)
  with jax.enable_x64(False):
    outside = compiled(scores, thresholds)
  chex.assert_trees_all_equal(outside, inside)
  assert outside.thresholds.dtype == jnp.float64
  np.testing.assert_array_equal(outside.thresholds, -np.sort(-np.asarray(thresholds), axis=-1))
  assert np.all(outside.tied == 1)  # Every score distinct in float64.


@pytest.mark.parametrize("platform", platforms.PLATFORMS)
def test_exact_metrics_differentiate_to_zero_on_both_platforms(platform):
  """Through tie_groups' sort (numpy's host callback on CPU, XLA's elsewhere) the exact metrics
  have a derivative, zero, under `grad` and `jvp` (as when a loss adds an exact metric)."""
  scores = jnp.asarray([[0.3, 0.1, 0.3, 0.7], [0.2, 0.5, 0.4, 0.1]])
  labels = jnp.asarray([[1, 0, 0, 1], [0, 1, 1, 0]])
  with platforms.forced_platform(platform):
    for metric in (jaxrank.ap_metric, jaxrank.ndcg_metric):
      grad = jax.jit(jax.grad(lambda s, m=metric: m(s, labels)))(scores)
      np.testing.assert_array_equal(grad, np.zeros_like(scores))
      _, tangent = jax.jvp(lambda s, m=metric: m(s, labels), (scores,), (jnp.ones_like(scores),))
      assert float(tangent) == 0.0


def test_float64_tie_groups_where_the_host_callback_runs_without_x64():
  """tie_groups' host callback (the CPU's sort), compiled inside the thread-local
  `jax.enable_x64(True)` and run where it does not hold: scores that differ beyond float32's
  precision are still ordered apart, as XLA's sort orders them."""
  with jax.enable_x64(True), platforms.forced_platform(platforms.CPU):
    scores = jnp.asarray([[0.5, 0.5 + 1e-12, 0.25, 0.5 + 1e-12]])  # Tied in float32 only.
    labels, where = jnp.asarray([[1.0, 0.0, 1.0, 1.0]]), jnp.ones((1, 4), bool)
    compiled = jax.jit(ranking.tie_groups).lower(scores, labels, where).compile()
    inside = compiled(scores, labels, where)
  with jax.enable_x64(False):
    outside = compiled(scores, labels, where)
  chex.assert_trees_all_equal(outside, inside)
  np.testing.assert_array_equal(outside.order, [[1, 3, 0, 2]])
  np.testing.assert_array_equal(outside.group_size, [[2, 2, 1, 1]])


def test_count_above_and_tied_without_a_host_callback_counts_the_same():
  rng = np.random.default_rng(3)
  scores = rng.integers(0, 9, (6, 80)).astype(np.float32)
  thresholds = scores[:, : counting.COMPARE_UP_TO + 5]
  count = lambda s, t, **kwargs: counting.count_above_and_tied(s, t, **kwargs)  # noqa: E731
  want = jax.jit(count)(scores, thresholds)
  got = jax.jit(functools.partial(count, host_callback=False))(scores, thresholds)
  chex.assert_trees_all_equal(got, want)
  text = jax.jit(functools.partial(count, host_callback=False)).lower(scores, thresholds).as_text()
  assert "callback" not in text
