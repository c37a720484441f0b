"""Tests of the hashing losses and metrics (`_src/tie_aware.py`, `_src/hamming.py`,
`_src/harmonic.py`): tie-aware AP/NDCG relaxations, exact metrics, code helpers.

References: `reference_hashing.py` (loop-based, float64, from He et al. 2018 and Revaud et al.
2019), `reference.py` (brute-force tie-aware metrics over all orderings).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import reference_hashing as ref
from jax import test_util as jtu

import jaxrank
from jaxrank._src import hamming
from jaxrank._src import harmonic
from jaxrank._src import platforms
from jaxrank._src import tie_aware


class Case(NamedTuple):
  name: str
  fn: Callable[..., jax.Array]
  ref: Callable[..., float]
  kwargs: dict[str, Any]


LOSSES = [
  tie_aware.tie_aware_ap_loss,
  tie_aware.simplified_tie_aware_ap_loss,
  tie_aware.tie_aware_ndcg_loss,
  tie_aware.simplified_tie_aware_ndcg_loss,
]
LOSS_IDS = ["ap_r", "ap_s", "ndcg_r", "ndcg_s"]
REFS = [
  ref.tie_aware_ap_loss,
  ref.simplified_tie_aware_ap_loss,
  ref.tie_aware_ndcg_loss,
  ref.simplified_tie_aware_ndcg_loss,
]
CASES = [Case(i, f, r, {}) for i, f, r in zip(LOSS_IDS, LOSSES, REFS)] + [
  Case(i + "_M5", f, r, {"num_bins": 5}) for i, f, r in zip(LOSS_IDS, LOSSES, REFS)
]
CASE_IDS = [c.name for c in CASES]
DEFAULT_CASES = CASES[:4]

BATCH = (3, 4)
N = 9
TOL64 = dict(rtol=1e-10, atol=1e-12)
TOL32 = dict(rtol=2e-5, atol=2e-6)


@pytest.fixture(params=platforms.PLATFORMS)
def platform(request):
  """Runs the test once on each form of the soft binning (`histogram.soft_histograms`): the CPU's
  scatter-add and the accelerators' per-bin reductions, both on this CPU. Yields the name."""
  with platforms.forced_platform(request.param):
    yield request.param


# Shared jitted functions (eager calls of the sorting metrics would dispatch op by op).
tie_aware_ap_metric = jax.jit(jaxrank.tie_aware_ap_metric, static_argnames="reduce_fn")
tie_aware_ndcg_metric = jax.jit(jaxrank.tie_aware_ndcg_metric, static_argnames="reduce_fn")
ap_metric = jax.jit(jaxrank.ap_metric, static_argnames="reduce_fn")
ndcg_metric = jax.jit(jaxrank.ndcg_metric, static_argnames="reduce_fn")
harmonic_slope = jax.jit(harmonic.harmonic_slope)
mean_discount = jax.jit(harmonic.mean_discount)


def random_lists(seed, shape=BATCH + (N,), *, mask=True, dtype=np.float64):
  """Similarities uniform in [-1, 1], graded labels 0..3 (relevant iff >= 1), an optional mask."""
  rng = np.random.default_rng(seed)
  scores = rng.uniform(-1, 1, shape).astype(dtype)
  labels = rng.choice(4, shape, p=[0.55, 0.25, 0.12, 0.08]).astype(np.int32)
  where = rng.random(shape) < 0.8 if mask else np.ones(shape, bool)
  return scores, labels, where


def with_empty_lists(seed):
  scores, labels, where = random_lists(seed)
  labels[..., 0] = 1
  where[..., 0] = True
  labels[0, 1] = 0  # No relevant item,
  where[1, 2] = False  # every item masked,
  labels[2, 3] = np.where(where[2, 3], 0, 2)  # relevant items only where masked.
  return scores, labels, where


def off_centres(scores, num_bins, margin=0.02):
  """Moves similarities at least `margin` (in bin units) away from the centres on [-1, 1]."""
  t = (1 - np.asarray(scores, np.float64)) * (num_bins - 1) / 2
  frac = t - np.floor(t)
  t = np.floor(t) + np.clip(frac, margin, 1 - margin)
  return 1 - 2 * t / (num_bins - 1)


def random_codes(seed, count, num_bits):
  return np.where(np.random.default_rng(seed).random((count, num_bits)) < 0.5, 1.0, -1.0)


def hamming_lists(seed, count=12, num_bits=6, num_tags=3):
  """In-batch lists of binary codes: integer distances with many ties, graded relevance."""
  rng = np.random.default_rng(seed)
  codes = random_codes(seed, count, num_bits)
  tags = rng.random((count, num_tags)) < 0.4
  tags[np.arange(count), rng.integers(0, num_tags, count)] = True
  distances = np.asarray(hamming.relaxed_hamming_distance(codes, codes))
  graded = (tags.astype(int) @ tags.T.astype(int)).astype(np.int32)  # Shared tags (He et al.).
  where = ~np.eye(count, dtype=bool)
  return distances, graded, where


def expected(case, scores, labels, where=None):
  return reference.per_list(case.ref, scores, labels, where, **case.kwargs)


def run(case, scores, labels, *, where=None, reduce_fn=jnp.mean):
  return case.fn(scores, labels, where=where, reduce_fn=reduce_fn, **case.kwargs)


# 0. The references, by hand.


def test_reference_hand_values():
  # Distances 0, 1, 1 (b = 2), labels 1, 0, 1: AP is 1 or 5/6 by the order of the tie.
  assert ref.hamming_ap_t([0, 1, 1], [1, 0, 1], num_bits=2) == pytest.approx(11 / 12, rel=1e-14)
  assert reference.tie_aware_ap([0, -1, -1], [1, 0, 1]) == pytest.approx(11 / 12, rel=1e-14)
  assert ref.ap_s([0, 1, 1], [1, 0, 1], num_bits=2) == pytest.approx(0.9, rel=1e-14)
  assert ref.ap_r([0, 1, 1], [1, 0, 1], num_bits=2) == pytest.approx(11 / 12, rel=1e-12)
  # NDCG: gains 3, 0, 1.
  dcg_t = 3 + 0.5 * (1 / math.log2(3) + 1 / math.log2(4))
  ideal = 3 + 1 / math.log2(3)
  assert ref.hamming_ndcg_t([0, 1, 1], [2, 0, 1], num_bits=2) == pytest.approx(dcg_t / ideal)
  assert ref.ndcg_r([0, 1, 1], [2, 0, 1], num_bits=2) == pytest.approx(dcg_t / ideal, rel=1e-12)
  assert ref.ndcg_s([0, 1, 1], [2, 0, 1], num_bits=2) == pytest.approx(
    (3 + 1 / math.log2(3.5)) / ideal, rel=1e-14
  )
  # The continued sums at integers.
  assert ref.harmonic(3.0) == pytest.approx(11 / 6, rel=1e-14)
  assert ref.discount_sum(2.0, 5.0) == pytest.approx(sum(ref.discount(t) for t in (3, 4, 5)))
  assert ref.hamming_distance([1, -1, 1, 1], [1, 1, -1, 1]) == 2.0
  assert ref.released_code_scales(5, initial=1.0, growth=2.0, every=2) == [1, 1, 2, 2, 4]


# 1. The continued sums.


def test_harmonic_slope_matches_digamma(x64):
  rng = np.random.default_rng(0)
  x = np.concatenate([[0.0, 0.0, 3.0, 7.0], rng.uniform(0, 3, 40), rng.uniform(0, 500, 40)])
  w = np.concatenate([[1.0, 2.5, 1.0, 0.3], rng.uniform(0.05, 4, 40), rng.uniform(0.05, 60, 40)])
  got = harmonic_slope(jnp.asarray(x), jnp.asarray(w))
  want = [(ref.harmonic(a + b) - ref.harmonic(a)) / b for a, b in zip(x, w)]
  np.testing.assert_allclose(got, want, rtol=1e-11)
  # Negative widths (the slope term at c_d < 1) and the derivative at w = 0.
  got = harmonic_slope(jnp.asarray(x + 1), jnp.asarray(-np.minimum(w, 1) / 2))
  want = [
    (ref.harmonic(a + 1 - min(b, 1) / 2) - ref.harmonic(a + 1)) / (-min(b, 1) / 2)
    for a, b in zip(x, w)
  ]
  np.testing.assert_allclose(got, want, rtol=1e-10)
  from scipy import special  # pylint: disable=import-outside-toplevel

  got = harmonic_slope(jnp.asarray(x), jnp.zeros(x.shape))
  np.testing.assert_allclose(got, special.polygamma(1, x + 1), rtol=1e-13)


def test_mean_discount_matches_brute_force(x64):
  pairs = [(0.0, 1.0), (0.0, 0.37), (0.4, 2.6), (3.0, 4.0), (17.3, 0.02), (250.0, 90.5)]
  x, w = (jnp.asarray(v) for v in zip(*pairs))
  got = mean_discount(x, w)
  want = [ref.discount_sum(a, a + b) / b for a, b in pairs]
  np.testing.assert_allclose(got, want, rtol=1e-11)
  # Exact at integers: the mean of 1 / log2(1 + t) over the positions.
  for start, size in [(0, 1), (0, 7), (5, 1), (12, 30), (1000, 3)]:
    got = float(mean_discount(jnp.float64(start), jnp.float64(size)))
    want = math.fsum(ref.discount(t) for t in range(start + 1, start + size + 1)) / size
    assert got == pytest.approx(want, rel=1e-13)


def test_continued_sums_keep_float32_precision():
  rng = np.random.default_rng(1)
  x = rng.uniform(0, 4000, 300).astype(np.float32)
  w = np.concatenate([rng.uniform(0, 50, 200), rng.uniform(0, 1e-3, 100)]).astype(np.float32)
  with jax.enable_x64(True):
    slope64 = harmonic_slope(jnp.asarray(x, jnp.float64), jnp.asarray(w, jnp.float64))
    mean64 = mean_discount(jnp.asarray(x, jnp.float64), jnp.asarray(w, jnp.float64))
  np.testing.assert_allclose(harmonic_slope(x, w), slope64, rtol=2e-6)
  np.testing.assert_allclose(mean_discount(x, w), mean64, rtol=2e-6)


# 2. Random lists against the references.


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_matches_reference(case, x64, platform):
  scores, labels, where = with_empty_lists(2)
  scores[0, 0, :2] = [1.3, -1.2]  # An error eagerly; under jit, clipped to the end bins.
  with pytest.raises(ValueError, match="scores must lie in"):
    run(case, scores, labels, where=where)
  want = expected(case, scores, labels, where)
  jitted = jax.jit(lambda s, r: run(case, s, labels, where=where, reduce_fn=r), static_argnums=1)
  got = jitted(scores, None)
  assert got.shape == BATCH and got.dtype == jnp.float64
  np.testing.assert_allclose(got, want, **TOL64)
  defined = np.array(
    [[_defined(case, labels[i, j], where[i, j]) for j in range(BATCH[1])] for i in range(BATCH[0])]
  )
  assert not defined.all()
  np.testing.assert_allclose(
    jitted(scores, jnp.mean), reference.mean_over_lists(want, defined), **TOL64
  )


def _defined(case, labels, where):
  if "ndcg" in case.name:
    return ref.ideal_dcg([y for y, w in zip(labels, where) if w]) > 0
  return bool(np.any((labels >= 1) & where))


@pytest.mark.parametrize("case", DEFAULT_CASES, ids=LOSS_IDS)
def test_matches_reference_in_float32(case):
  scores, labels, where = with_empty_lists(3)
  scores = scores.astype(np.float32)
  got = run(case, scores, labels, where=where, reduce_fn=None)
  assert got.dtype == jnp.float32
  np.testing.assert_allclose(got, expected(case, scores, labels, where), **TOL32)


@pytest.mark.parametrize("fn,ref_fn", list(zip(LOSSES, REFS)), ids=LOSS_IDS)
def test_hamming_placement_is_similarity_placement(fn, ref_fn, x64):
  # Relaxed codes: real distances d in (0, b), binned on the integer distances 0..b (the paper's
  # bins, computed by the reference on distances) == the loss on 1 - 2 d / b with b + 1 bins.
  b = 6
  rng = np.random.default_rng(4)
  codes = np.tanh(2.0 * rng.standard_normal((12, b)))
  d = np.asarray(hamming.relaxed_hamming_distance(codes, codes))
  labels = rng.integers(0, 3, (12, 12)).astype(np.int32)
  where = ~np.eye(12, dtype=bool)
  got = fn(1 - 2 * d / b, labels, where=where, num_bins=b + 1, reduce_fn=None)
  want = reference.per_list(ref_fn, d, labels, where, num_bits=b)
  np.testing.assert_allclose(got, want, **TOL64)


# 3. Identities.


@pytest.mark.parametrize("num_bins", [4, 20])
def test_revaud_map_t_equals_ap_s(num_bins, x64):
  # Revaud et al.'s mAP_T (eq. 13) is He et al.'s AP_s (eq. 62), term for term.
  scores, labels, where = with_empty_lists(5)
  map_t = reference.per_list(ref.map_t, scores, labels, where, num_bins=num_bins)
  ap_s = reference.per_list(ref.ap_s, scores, labels, where, num_bins=num_bins)
  np.testing.assert_allclose(map_t, ap_s, rtol=1e-13, atol=1e-15)
  got = tie_aware.simplified_tie_aware_ap_loss(
    scores, labels, where=where, num_bins=num_bins, reduce_fn=None
  )
  defined = reference.has_relevant(labels, where)
  np.testing.assert_allclose(got, np.where(defined, 1 - map_t, 0.0), **TOL64)


def _tie_free_on_centres(seed, n=N, num_bins=20):
  rng = np.random.default_rng(seed)
  slots = rng.choice(num_bins, size=n, replace=False)
  scores = 1 - 2 * slots / (num_bins - 1)
  labels = rng.integers(0, 3, n).astype(np.int32)
  labels[0] = 1
  return scores, labels


def test_relaxations_are_exact_on_hard_histograms_with_ties(x64):
  # Integer Hamming distances (many ties): AP_r = AP_T and DCG_r = DCG_T exactly.
  for seed in range(2):
    d, graded, where = hamming_lists(seed)
    scores, b = 1 - 2 * d / 6, 6
    relevant = (graded >= 1).astype(np.int32)
    ap_r = tie_aware.tie_aware_ap_loss(scores, graded, where=where, num_bins=b + 1, reduce_fn=None)
    ap_t = tie_aware_ap_metric(-d, relevant, where=where, reduce_fn=None)
    np.testing.assert_allclose(1 - ap_r, ap_t, **TOL64)
    ndcg_r = tie_aware.tie_aware_ndcg_loss(
      scores, graded, where=where, num_bins=b + 1, reduce_fn=None
    )
    ndcg_t = tie_aware_ndcg_metric(-d, graded, where=where, reduce_fn=None)
    np.testing.assert_allclose(1 - ndcg_r, ndcg_t, **TOL64)
    # The simplified versions are not exact with ties: AP_s either way, DCG_s below DCG_T.
    ap_s = 1 - tie_aware.simplified_tie_aware_ap_loss(
      scores, graded, where=where, num_bins=b + 1, reduce_fn=None
    )
    ndcg_s = 1 - tie_aware.simplified_tie_aware_ndcg_loss(
      scores, graded, where=where, num_bins=b + 1, reduce_fn=None
    )
    assert np.abs(ap_s - ap_t).max() > 1e-3
    assert np.all(ndcg_s <= ndcg_t + 1e-12) and np.any(ndcg_s < ndcg_t - 1e-3)
  # Similarity scores on the centres (with ties), not from codes.
  rng = np.random.default_rng(7)
  scores = 1 - 2 * rng.integers(0, 7, (12, 12)) / 6
  labels = rng.integers(0, 3, (12, 12)).astype(np.int32)
  ap_r = tie_aware.tie_aware_ap_loss(scores, labels, where=where, num_bins=7, reduce_fn=None)
  np.testing.assert_allclose(
    1 - ap_r, tie_aware_ap_metric(scores, labels >= 1, where=where, reduce_fn=None), **TOL64
  )
  ndcg_r = tie_aware.tie_aware_ndcg_loss(scores, labels, where=where, num_bins=7, reduce_fn=None)
  np.testing.assert_allclose(
    1 - ndcg_r, tie_aware_ndcg_metric(scores, labels, where=where, reduce_fn=None), **TOL64
  )


def test_simplified_relaxations_are_exact_on_hard_histograms_without_ties(x64):
  lists = [_tie_free_on_centres(seed) for seed in range(12)]
  scores, labels = (np.stack(a).reshape(BATCH + (N,)) for a in zip(*lists))
  exact_ap = ap_metric(scores, labels, reduce_fn=None)
  for fn in (tie_aware.tie_aware_ap_loss, tie_aware.simplified_tie_aware_ap_loss):
    np.testing.assert_allclose(
      1 - fn(scores, labels, num_bins=20, reduce_fn=None), exact_ap, **TOL64
    )
  exact_ndcg = ndcg_metric(scores, labels, reduce_fn=None)
  for fn in (tie_aware.tie_aware_ndcg_loss, tie_aware.simplified_tie_aware_ndcg_loss):
    np.testing.assert_allclose(
      1 - fn(scores, labels, num_bins=20, reduce_fn=None), exact_ndcg, **TOL64
    )


def test_printed_eq_11_and_12_fail_where_the_continued_sums_do_not():
  # The first non-empty bin: ln(C_d / 0) and li(1) are infinite in the printed formulas.
  assert math.isinf(ref.paper_ap_r_term(1.0, 2.0, 0.0, 0.0, 2))
  assert math.isinf(ref.paper_dcg_r_term(3.0, 2.0, 0.0))
  assert ref.ap_r_term(1.0, 2.0, 0.0, 0.0, 2) == pytest.approx(ref.ap_t_term(1, 2, 0, 0, 2))
  assert ref.dcg_r_term(3.0, 2.0, 0.0) == pytest.approx(ref.dcg_t_term(3.0, 2, 0))
  # The pole of eq. 11 at c_d = 1 (slope (c+ - 1) / (c - 1)): a jump from about -12.5 to +12.6.
  below = ref.paper_ap_r_term(0.5, 0.999, 1.0, 3.0, 3)
  above = ref.paper_ap_r_term(0.5, 1.001, 1.0, 3.0, 3)
  assert below < -1 and above > 1
  assert ref.ap_r_term(0.5, 0.999, 1.0, 3.0, 3) == pytest.approx(
    ref.ap_r_term(0.5, 1.001, 1.0, 3.0, 3), abs=1e-3
  )
  # Unbounded as the mass before a bin goes to 0+ (an item sliding onto the next centre).
  # The term grows like ln(1 / eps) / 6, past 1 (the largest a whole list's AP can be).
  grows = [ref.paper_ap_r_term(1.0, 3.0, eps, eps, 2) for eps in (1e-2, 1e-4, 1e-8)]
  assert grows[0] < grows[1] < grows[2] and grows[2] > 3
  stays = [ref.ap_r_term(1.0, 3.0, eps, eps, 2) for eps in (1e-2, 1e-4, 1e-8)]
  assert max(stays) < 1
  # Away from the top, eq. 11 agrees with the exact AP_T term up to App. C's error bound
  # (eq. 36-37: |dH - ln(N_d / N_{d-1})| <= n_d / (2 N_{d-1} N_d)); the continued sum is exact.
  for p, n, big_p, big_n in [(1, 2, 3, 5), (2, 3, 1, 10), (3, 3, 4, 4), (1, 4, 0, 30)]:
    exact = ref.ap_t_term(p, n, big_p, big_n, 6)
    assert ref.ap_r_term(p, n, big_p, big_n, 6) == pytest.approx(exact, rel=1e-12)
    slope = (p - 1) / (n - 1)
    bound = p / (n * 6) * abs(big_p + 1 - slope * (big_n + 1)) * n / (2 * big_n * (big_n + n))
    error = abs(ref.paper_ap_r_term(p, n, big_p, big_n, 6) - exact)
    assert error <= bound * (1 + 1e-9), (p, n, big_p, big_n, error, bound)
    assert (error > 0) == (bound > 0)  # Exact only when the log's factor vanishes (3, 3, 4, 4).


@pytest.mark.parametrize(
  "fn", [tie_aware.tie_aware_ap_loss, tie_aware.tie_aware_ndcg_loss], ids=["ap_r", "ndcg_r"]
)
def test_first_bin_rule_is_continuous(fn, x64):
  # The top item slides from the first centre onto the second: the mass eps left in the first bin
  # goes to 0 and the value tends to the one with that bin empty (where the first non-empty bin
  # uses H(C_d), resp. D(C_d)), with bounded gradients; the printed eq. 11 / 12 diverge there.
  num_bins = 20  # The default, so that these shapes share compiled code with other tests.
  centre = lambda m: 1 - 2 * m / (num_bins - 1)
  spacing = 2 / (num_bins - 1)
  rest = np.array([centre(4), centre(4), centre(6)])
  labels = np.array([1, 2, 0, 1], np.int32)

  def value(eps):
    return fn(np.concatenate([[centre(4) + eps * spacing], rest]), labels, num_bins=num_bins)

  limit = float(value(0.0))
  gaps = [abs(float(value(eps)) - limit) for eps in (1e-2, 1e-4, 1e-6)]
  assert gaps[0] < 0.05 and gaps[1] < gaps[0] / 50 and gaps[2] < gaps[1] / 50, gaps
  for eps in (1e-2, 1e-6, 0.0):
    scores = np.concatenate([[centre(4) + eps * spacing], rest])
    grad = jax.grad(lambda s: fn(s, labels, num_bins=num_bins))(scores)
    assert np.all(np.isfinite(grad)) and np.abs(grad).max() < 10


def test_all_in_one_bin_is_one_tie(x64):
  # Every valid item on one centre: C_{d-1} = 0 in the only bin; AP_r is the AP_T of a full tie.
  _, labels, where = with_empty_lists(29)
  scores = np.full(BATCH + (N,), 1 - 2 * 7 / 19)  # The centre of bin 7 of 20.
  defined = reference.has_relevant(labels, where)  # Also where the ideal DCG is positive.
  got = tie_aware.tie_aware_ap_loss(scores, labels, where=where, reduce_fn=None)
  want = tie_aware_ap_metric(scores, labels >= 1, where=where, reduce_fn=None)
  np.testing.assert_allclose(got, np.where(defined, 1 - want, 0.0), **TOL64)
  assert len(np.unique(np.round(np.asarray(want), 12))) > 3  # Lists of different values.
  got = tie_aware.tie_aware_ndcg_loss(scores, labels, where=where, reduce_fn=None)
  want = tie_aware_ndcg_metric(scores, labels, where=where, reduce_fn=None)
  np.testing.assert_allclose(got, np.where(defined, 1 - want, 0.0), **TOL64)
  # The brute-force mean over orderings of one such list.
  assert float(1 - got[0, 0]) == pytest.approx(
    reference.tie_aware_ndcg(scores[0, 0], labels[0, 0], where[0, 0]), rel=1e-12
  )


# 4. Exact metrics of integer Hamming distances.


@pytest.mark.parametrize("dtype", [np.int32, np.float64])
def test_hamming_metrics_equal_sorting_metrics(dtype, x64):
  rng = np.random.default_rng(8)
  b = 6
  d = rng.integers(0, b + 1, BATCH + (N,)).astype(dtype)
  labels = rng.choice(4, BATCH + (N,), p=[0.5, 0.3, 0.1, 0.1]).astype(np.int32)
  where = rng.random(BATCH + (N,)) < 0.8
  labels[0, 0] = 0  # A list without a relevant item (ideal DCG 0).
  scores = -np.asarray(d, np.float64)
  for metric, sorting, brute in [
    (hamming.hamming_tie_aware_ap_metric, tie_aware_ap_metric, ref.hamming_ap_t),
    (hamming.hamming_tie_aware_ndcg_metric, tie_aware_ndcg_metric, ref.hamming_ndcg_t),
  ]:
    got = metric(d, labels, num_bits=b, where=where, reduce_fn=None)
    np.testing.assert_allclose(got, sorting(scores, labels, where=where, reduce_fn=None), **TOL64)
    np.testing.assert_allclose(
      got, reference.per_list(brute, d, labels, where, num_bits=b), **TOL64
    )
    np.testing.assert_allclose(
      metric(d, labels, num_bits=b, where=where), sorting(scores, labels, where=where), **TOL64
    )


def test_hamming_metrics_equal_mean_over_orderings(x64):
  # Short lists: the mean of AP / NDCG over every ordering of the tied items.
  rng = np.random.default_rng(9)
  d = rng.integers(0, 4, (8, 6))
  labels = rng.integers(0, 3, (8, 6)).astype(np.int32)
  labels[:, 0] = 1
  ap = hamming.hamming_tie_aware_ap_metric(d, labels, num_bits=3, reduce_fn=None)
  np.testing.assert_allclose(ap, reference.per_list(reference.tie_aware_ap, -d, labels), **TOL64)
  ndcg = hamming.hamming_tie_aware_ndcg_metric(d, labels, num_bits=3, reduce_fn=None)
  np.testing.assert_allclose(
    ndcg, reference.per_list(reference.tie_aware_ndcg, -d, labels), **TOL64
  )


def test_hamming_metrics_in_float32_and_under_jit():
  d, graded, where = hamming_lists(10, count=12, num_bits=6)
  d = d.astype(np.int32)
  for metric, sorting in [
    (hamming.hamming_tie_aware_ap_metric, tie_aware_ap_metric),
    (hamming.hamming_tie_aware_ndcg_metric, tie_aware_ndcg_metric),
  ]:
    got = metric(d, graded, num_bits=6, where=where, reduce_fn=None)
    assert got.dtype == jnp.float32
    want = sorting(-d.astype(np.float32), graded, where=where, reduce_fn=None)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    jitted = jax.jit(metric, static_argnames=("num_bits", "reduce_fn"))
    np.testing.assert_allclose(jitted(d, graded, num_bits=6, where=where), jnp.mean(got), rtol=1e-6)


def test_hamming_metrics_of_binarized_codes():
  # The evaluation pipeline: binarize real codes, count, and compare with sorting.
  rng = np.random.default_rng(11)
  logits = rng.standard_normal((12, 6)).astype(np.float32)
  logits[0, :3] = 0.0  # sgn(0) = +1.
  labels = rng.integers(0, 3, 12)
  codes = hamming.binarize(logits)
  d = hamming.relaxed_hamming_distance(codes, codes)
  np.testing.assert_array_equal(d, np.round(d))
  relevance = (labels[:, None] == labels[None, :]).astype(np.int32)
  where = ~np.eye(12, dtype=bool)
  got = hamming.hamming_tie_aware_ap_metric(d, relevance, num_bits=6, where=where)
  np.testing.assert_allclose(got, tie_aware_ap_metric(-d, relevance, where=where), rtol=1e-6)


def test_hamming_metric_errors_and_nan():
  d, labels = jnp.array([[0, 2, 3], [1, 1, 0]]), jnp.array([[1, 0, 1], [0, 1, 1]])
  for metric in (hamming.hamming_tie_aware_ap_metric, hamming.hamming_tie_aware_ndcg_metric):
    for bad in (0, -1):
      with pytest.raises(ValueError, match="num_bits"):
        metric(d, labels, num_bits=bad)
    for bad in (2.5, None, True):
      with pytest.raises(TypeError, match="num_bits"):
        metric(d, labels, num_bits=bad)
    for bad in ([0.0, 1.5, 2.0], [0, -1, 2], [0, 4, 2]):
      with pytest.raises(ValueError, match="integers in"):
        metric(jnp.array([bad, [0, 1, 2]]), labels, num_bits=3)
    # A masked bad distance is ignored; booleans and mismatched labels are refused.
    masked = jnp.array([True, False, True])
    metric(jnp.array([[0, 9, 2], [0, 1, 2]]), labels, num_bits=3, where=masked)
    with pytest.raises(TypeError, match="distances"):
      metric(d > 1, labels, num_bits=3)
    with pytest.raises(ValueError, match="shape"):
      metric(d, labels[:, :2], num_bits=3)
    # A valid NaN makes its list NaN (not an error); the other list equals the float64 reference.
    d_nan = jnp.array([[0.0, np.nan, 2.0], [0.0, 1.0, 2.0]])
    nan = metric(d_nan, labels, num_bits=3, reduce_fn=None)
    reference_fn = ref.hamming_ap_t if "ap" in metric.__name__ else ref.hamming_ndcg_t
    want = reference_fn(np.asarray(d_nan[1]), np.asarray(labels[1]), num_bits=3)
    assert np.isnan(nan[0])
    np.testing.assert_allclose(nan[1], want, **TOL32)


def test_graded_labels_below_zero_are_an_error():
  """Negative grades give NDCG outside [0, 1]: rejected whenever the labels are known."""
  d = jnp.array([[0.0, 2.0, 1.0], [1.0, 1.0, 3.0]])
  labels, where = jnp.array([[2, -1, 0], [1, 0, -3]]), jnp.array([True, True, False])
  calls = {
    "hamming_tie_aware_ndcg_metric": functools.partial(
      hamming.hamming_tie_aware_ndcg_metric, d, num_bits=3
    ),
    "tie_aware_ndcg_loss": functools.partial(tie_aware.tie_aware_ndcg_loss, 1 - 2 * d / 3),
    "simplified_tie_aware_ndcg_loss": functools.partial(
      tie_aware.simplified_tie_aware_ndcg_loss, 1 - 2 * d / 3
    ),
  }
  for name, call in calls.items():
    pattern = rf"^{name}: graded labels must be >= 0 .*got -1(\.0)? at a"
    with pytest.raises(ValueError, match=pattern):
      call(labels)
    with pytest.raises(ValueError, match="graded labels must be >= 0"):
      call(labels.astype(jnp.float32), where=where)  # The -1 is valid, the -3 masked.
    call(labels, where=jnp.array([True, False, False]))  # Both masked: no error.
    jax.jit(call)(labels)  # Traced: not checked.


@pytest.mark.parametrize("fn", LOSSES, ids=LOSS_IDS)
def test_scores_out_of_range_are_an_error(fn):
  scores, labels, where = random_lists(6)
  labels[..., 0] = 1
  scores[0, 1, 2], where[0, 1, 2] = 1.5, True
  with pytest.raises(ValueError, match=r"scores must lie in \[-1, 1\].*got 1.5 at a valid item"):
    fn(scores, labels, where=where)
  where[0, 1, 2] = False
  fn(scores, labels, where=where)


# 5. Code helpers.


def test_relaxed_hamming_distance(x64):
  num_bits = 7
  a, b = random_codes(12, 5, num_bits), random_codes(13, 6, num_bits)
  got = hamming.relaxed_hamming_distance(a, b)
  want = [[ref.hamming_distance(x, y) for y in b] for x in a]
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(got, (a[:, None, :] != b[None, :, :]).sum(-1))  # Bits that differ.
  # Integer codes, float32 output; relaxed codes; leading batch axes.
  got32 = hamming.relaxed_hamming_distance(a.astype(np.int8), b.astype(np.int8))
  assert got32.dtype == jnp.float32  # At least float32: exact for integer codes.
  np.testing.assert_array_equal(got32, want)
  rng = np.random.default_rng(14)
  ta, tb = (
    np.tanh(rng.standard_normal((2, 3, 5, num_bits))),
    np.tanh(rng.standard_normal((2, 3, 4, num_bits))),
  )
  got = hamming.relaxed_hamming_distance(ta, tb)
  assert got.shape == (2, 3, 5, 4)
  np.testing.assert_allclose(
    got[1, 2, 3, 1], ref.hamming_distance(ta[1, 2, 3], tb[1, 2, 1]), rtol=1e-14
  )
  # The gradient: d/dphi_i of (b - phi_i . phi_j) / 2 = -phi_j / 2.
  grad = jax.grad(lambda x: hamming.relaxed_hamming_distance(x, tb[0, 0])[0, 2])(ta[0, 0])
  np.testing.assert_allclose(grad[0], -tb[0, 0, 2] / 2, rtol=1e-14)
  np.testing.assert_array_equal(grad[1:], 0.0)
  with pytest.raises(ValueError, match="lengths"):
    hamming.relaxed_hamming_distance(a, b[:, :3])
  with pytest.raises(ValueError, match="shape"):
    hamming.relaxed_hamming_distance(a[0], b)
  with pytest.raises(TypeError, match="numeric"):
    hamming.relaxed_hamming_distance(a > 0, b)


def test_relaxed_hamming_distance_float32():
  a = random_codes(15, 4, 64).astype(np.float32)
  got = hamming.relaxed_hamming_distance(a, a)
  assert got.dtype == jnp.float32
  np.testing.assert_array_equal(np.diag(got), 0.0)


def test_binarize():
  codes = jnp.array([[0.3, -2.0, 0.0, -0.0, 1e-30, -1e-30]], jnp.float32)
  got = hamming.binarize(codes)
  assert got.dtype == jnp.float32
  np.testing.assert_array_equal(got, [[1, -1, 1, 1, 1, -1]])
  np.testing.assert_array_equal(hamming.binarize(jnp.array([3, 0, -2])), [1, 1, -1])
  assert hamming.binarize(jnp.array([3, 0, -2])).dtype == jnp.int32
  np.testing.assert_array_equal(jax.grad(lambda x: jnp.sum(hamming.binarize(x)))(codes), 0.0)
  with pytest.raises(TypeError, match="numeric"):
    hamming.binarize(jnp.array([True, False]))


@pytest.mark.parametrize(
  ("initial", "growth", "every"), [(1.0, 2.0, 10), (0.5, 3.0, 1), (40.0, 1.0, 5), (2.0, 1.5, 3)]
)
def test_tanh_scale_is_the_released_schedule(initial, growth, every):
  want = ref.released_code_scales(40, initial=initial, growth=growth, every=every)
  steps = np.arange(40)
  got = [float(hamming.tanh_scale(s, initial=initial, growth=growth, every=every)) for s in steps]
  np.testing.assert_allclose(got, want, rtol=1e-6)
  # Vectorised and traced steps give the same.
  np.testing.assert_allclose(
    hamming.tanh_scale(steps, initial=initial, growth=growth, every=every), want, rtol=1e-6
  )
  jitted = jax.jit(lambda s: hamming.tanh_scale(s, initial=initial, growth=growth, every=every))
  np.testing.assert_allclose(
    [float(jitted(s)) for s in (0, every, 3 * every + 1)],
    [want[0], want[every], want[3 * every + 1]],
    rtol=1e-6,
  )


def test_tanh_scale_errors_and_traced_hyperparameters():
  with pytest.raises(ValueError, match="every"):
    hamming.tanh_scale(3, every=0)
  with pytest.raises(TypeError, match="every"):
    hamming.tanh_scale(3, every=2.0)
  with pytest.raises(ValueError, match="initial"):
    hamming.tanh_scale(3, initial=0.0, every=2)
  with pytest.raises(ValueError, match="growth"):
    hamming.tanh_scale(3, growth=0.5, every=2)
  with pytest.raises(TypeError, match="step"):
    hamming.tanh_scale(jnp.array(True), every=2)
  got = jax.jit(lambda a: hamming.tanh_scale(25, initial=a, every=10))(jnp.float32(0.5))
  assert float(got) == 2.0


def test_training_pipeline_gradients(x64):
  # Logits -> tanh codes -> relaxed distances -> loss, through batch_retrieval's relevance and
  # self-mask; the gradient with respect to the logits by finite differences.
  rng = np.random.default_rng(16)
  b, count = 6, 8
  logits = rng.standard_normal((count, b))
  labels = np.array([0, 0, 1, 1, 1, 2, 2, 0])
  _, relevance, where = jaxrank.batch_retrieval(logits, labels)
  scale = float(hamming.tanh_scale(5, initial=0.5, every=2))

  @jax.jit
  def loss(x):
    codes = jnp.tanh(scale * x)
    d = hamming.relaxed_hamming_distance(codes, codes)
    return tie_aware.tie_aware_ap_loss(1 - 2 * d / b, relevance, where=where, num_bins=b + 1)

  jtu.check_grads(loss, (logits,), order=1, modes=["rev"], eps=1e-6)
  assert float(jnp.abs(jax.grad(loss)(logits)).max()) > 1e-3  # Not a trivial case.


# 6. Gradients.


@pytest.mark.parametrize("case", DEFAULT_CASES, ids=LOSS_IDS)
def test_check_grads(case, x64, platform):
  scores, labels, where = with_empty_lists(17)
  scores = off_centres(scores, case.kwargs.get("num_bins", 20))
  fn = functools.partial(run, case, labels=labels, where=where)
  jtu.check_grads(lambda s: fn(scores=s), (scores,), order=1, modes=["rev"], eps=1e-6)


# 7. Invariances, reductions, NaN and dtypes: test_contract.py, for every loss and metric.


# 8. Degenerate lists.

DEGENERATE = {
  "no_relevant": ([0.3, 0.2, -0.5, 0.1], [0, 0, 0, 0], [True] * 4),
  "all_relevant": ([0.3, 0.2, -0.5, 0.1], [1, 1, 1, 1], [True] * 4),
  "all_tied_off_centre": ([0.37, 0.37, 0.37, 0.37], [0, 1, 0, 2], [True] * 4),
  "all_in_one_bin": ([0.301, 0.303, 0.305, 0.307], [0, 1, 1, 0], [True] * 4),
  "all_on_one_centre": ([0.0, 0.0, 0.0, 0.0], [1, 0, 0, 2], [True] * 4),
  "all_beyond_the_ends": ([3.0, 1.5, -1.5, -3.0], [0, 1, 0, 1], [True] * 4),
  "all_masked": ([0.3, 0.2, -0.5, 0.1], [1, 0, 1, 0], [False] * 4),
  "one_valid_item": ([0.3, 0.2, -0.5, 0.1], [1, 0, 1, 0], [False, False, True, False]),
  "best_and_worst_ends": ([1.0, 1.0, -1.0, -1.0], [0, 1, 1, 0], [True] * 4),
}


@pytest.mark.parametrize("lst", list(DEGENERATE), ids=list(DEGENERATE))
@pytest.mark.parametrize("case", DEFAULT_CASES, ids=LOSS_IDS)
def test_degenerate_lists(case, lst, x64, platform):
  scores, labels, where = (np.array(a) for a in DEGENERATE[lst])
  scores = scores.astype(np.float64)

  def call(s, reduce_fn):
    return run(case, s, labels, where=where, reduce_fn=reduce_fn)

  if lst == "all_beyond_the_ends":  # An error eagerly; under jit, clipped to the end bins.
    with pytest.raises(ValueError, match="scores must lie in"):
      call(scores, None)
    call = jax.jit(call, static_argnames="reduce_fn")
  per = call(scores, reduce_fn=None)
  assert np.isfinite(per)
  np.testing.assert_allclose(per, case.ref(scores, labels, where), **TOL64)
  grad = jax.grad(lambda s: call(s, reduce_fn=jnp.mean))(scores)
  assert np.all(np.isfinite(grad)), grad
  if lst in ("no_relevant", "all_masked"):
    assert float(per) == 0.0
    np.testing.assert_array_equal(grad, 0.0)
  if lst in ("one_valid_item", "all_relevant") and case.name != "ndcg_s":
    # Exact for these lists however the items are split between bins; DCG_s is not (it can
    # exceed the ideal DCG on soft histograms).
    assert float(per) == pytest.approx(0.0, abs=1e-12)


# 9. Errors and memory.


@pytest.mark.parametrize("fn", LOSSES, ids=LOSS_IDS)
def test_input_errors(fn):
  helpers.assert_binned_loss_input_errors(fn, where_match="where")


def _max_intermediate_size(jaxpr) -> int:
  """The largest array (elements) any equation of a jaxpr, or of its sub-jaxprs, produces."""
  biggest = 0
  for eqn in jaxpr.eqns:
    for var in eqn.outvars:
      biggest = max(biggest, int(np.prod(getattr(var.aval, "shape", ()), dtype=np.int64)))
    for param in eqn.params.values():
      for sub in param if isinstance(param, (tuple, list)) else (param,):
        inner = sub if hasattr(sub, "eqns") else getattr(sub, "jaxpr", None)
        if inner is not None and hasattr(inner, "eqns"):
          biggest = max(biggest, _max_intermediate_size(inner))
  return biggest


@pytest.mark.parametrize("fn", LOSSES, ids=LOSS_IDS)
def test_no_items_by_bins_tensor(fn, platform):
  # P lists of n items into M bins: nothing of size P * n * M in the forward or backward pass; the
  # binning's per-item terms are [P, n, 4], the per-bin ones use trailing axes of at most 24
  # (shift) or 20 (quadrature) entries.
  p, n, m = 4, 512, 64
  scores, labels, where = random_lists(28, (p, n))
  loss = functools.partial(fn, labels=labels, where=where, num_bins=m)
  jaxpr = jax.make_jaxpr(jax.value_and_grad(lambda s: loss(s)))(scores.astype(np.float32))
  biggest = _max_intermediate_size(jaxpr.jaxpr)
  assert biggest <= max(4 * p * n, 24 * p * m), biggest
  assert biggest < p * n * m // 8
