"""Tests of jaxrank.histogram (FastAP, mAP_Q, soft binning) against `reference_histogram.py`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import reference_histogram as ref
from helpers import precision
from jax import test_util as jtu

import jaxrank
from jaxrank._src import histogram
from jaxrank._src import lists
from jaxrank._src import platforms


class Case(NamedTuple):
  name: str
  fn: Callable[..., jax.Array]
  ref: Callable[..., float]
  kwargs: dict[str, Any]


CASES = [
  Case("fastap", histogram.fastap_loss, ref.fastap_loss, {}),
  Case("fastap_L3", histogram.fastap_loss, ref.fastap_loss, {"num_intervals": 3}),
  Case("sb_ap", histogram.soft_binning_ap_loss, ref.soft_binning_ap_loss, {}),
  Case("sb_ap_M4", histogram.soft_binning_ap_loss, ref.soft_binning_ap_loss, {"num_bins": 4}),
]
CASE_IDS = [c.name for c in CASES]
DEFAULT_CASES = [CASES[0], CASES[2]]  # Default bins: the cases that the costlier tests run.
DEFAULT_IDS = [CASE_IDS[0], CASE_IDS[2]]
LOSSES = [histogram.fastap_loss, histogram.soft_binning_ap_loss]
LOSS_IDS = ["fastap", "sb_ap"]


def _bins(fn, count):
  """`fn`'s bin count as a keyword: `fastap_loss` counts intervals, `soft_binning_ap_loss`
  centres."""
  return {"num_intervals" if fn is histogram.fastap_loss else "num_bins": count}


BATCH = (3, 4)
N = 9
# Most tests call the losses eagerly on a few shared shapes (their bodies are jitted inside, so each
# shape and hyperparameter compiles once); helpers built from many ops are shared jitted functions.
ap_metric = jax.jit(jaxrank.ap_metric, static_argnames="reduce_fn")
batch_retrieval = jax.jit(jaxrank.batch_retrieval)
TOL64 = dict(rtol=1e-10, atol=1e-12)
TOL32 = dict(rtol=2e-5, atol=2e-6)


FORMS = (*platforms.PLATFORMS, platforms.GPU)
# What a test checks does not depend on the binning's form (a reference, argument checks, an
# outside comparison that the forms' agreement carries to the others): the CPU's form only.
any_form = pytest.mark.forms(platforms.CPU)


def pytest_generate_tests(metafunc):
  """Every test runs on each form of the binning (`platform`, below), or on the forms its
  `forms` mark names."""
  marker = metafunc.definition.get_closest_marker("forms")
  metafunc.parametrize("platform", marker.args if marker else FORMS, indirect=True)


@pytest.fixture(autouse=True)
def platform(request, monkeypatch):
  """Runs every test once on each form of the binning (`platforms.by_platform`; a test's
  `forms` mark names fewer): the CPU's scatter-add, the TPU's per-bin reductions, and the GPUs'
  per-bin reductions in blocks of lists (which large lists take on a GPU; smaller ones take the
  CPU's form), all on this CPU. The GPUs' blocks are of 3 lists here, for every size, so that most
  tests' lists span several blocks and a padded last one (read when a function is traced: always
  so under this form, whose traces are keyed by the platform). Functions the test jits are traced
  inside, so they take the form too. Yields the platform's name."""
  if request.param == platforms.GPU:
    monkeypatch.setattr(histogram, "GPU_ROWS_PER_BLOCK", 3)
    monkeypatch.setattr(histogram, "GPU_SCATTER_UP_TO", 0)
  with platforms.forced_platform(request.param):
    yield request.param


def run(case, scores, labels, *, where=None, reduce_fn=jnp.mean, **kwargs):
  return case.fn(scores, labels, where=where, reduce_fn=reduce_fn, **case.kwargs, **kwargs)


def expected(case, scores, labels, where=None):
  return reference.per_list(case.ref, scores, labels, where, **case.kwargs)


def random_lists(seed, shape=BATCH + (N,), *, mask=True, dtype=np.float64, relevant=0.4):
  """Similarities uniform in [-1, 1], binary labels, an optional mask (all tie-free)."""
  rng = np.random.default_rng(seed)
  scores = rng.uniform(-1, 1, shape).astype(dtype)
  labels = (rng.random(shape) < relevant).astype(np.int32)
  where = rng.random(shape) < 0.8 if mask else np.ones(shape, bool)
  return scores, labels, where


def off_centres(scores, num_centres, margin=1e-3):
  """Moves similarities at least `margin` (in bin units) away from the centres on [-1, 1]."""
  t = (1 - np.asarray(scores, np.float64)) * (num_centres - 1) / 2
  frac = t - np.floor(t)
  t = np.floor(t) + np.clip(frac, margin, 1 - margin)
  return 1 - 2 * t / (num_centres - 1)


def _with_empty_lists(seed):
  scores, labels, where = random_lists(seed)
  labels[..., 0] = 1  # Most lists are defined...
  where[..., 0] = True
  labels[0, 1] = 0  # ...but not these: no relevant item,
  where[1, 2] = False  # every item masked,
  labels[2, 3] = np.where(where[2, 3], 0, 1)  # relevant items only where masked.
  return scores, labels, where


def _embeddings(seed, b=12, d=4, num_classes=3):
  rng = np.random.default_rng(seed)
  e = rng.standard_normal((b, d))
  labels = np.arange(b) % num_classes
  return e, labels


# 0. The references themselves, by hand.


@any_form
def test_reference_hand_values():
  # Distances 0.4, 1.2, 2.0, 3.6 on centres 0..4:
  # h+ = (.6, .4, 1, 0, 0), h = (.6, 1.2, 1.2, .4, .6).
  scores, labels = [0.8, 0.4, 0.0, -0.8], [1, 0, 1, 0]
  want = (0.6 + 0.4 * 1.0 / 1.8 + 1.0 * 2.0 / 3.0) / 2
  assert ref.fastap(scores, labels, num_intervals=4) == pytest.approx(want, rel=1e-14)
  assert ref.ap_q(scores, labels, num_bins=5) == pytest.approx(want, rel=1e-14)
  # Items on the centres of fine bins: the exact AP.
  assert ref.ap_q([1.0, 0.0, -1.0], [1, 0, 1], num_bins=5) == pytest.approx((1 + 2 / 3) / 2)
  # Clipping: a similarity past 1 counts fully in the best bin.
  assert ref.ap_q([1.5, -2.0], [0, 1], num_bins=3) == pytest.approx(0.5)
  assert ref.fastap([0.9], [0]) == 0.0
  np.testing.assert_allclose(ref.class_balancing_weights([0, 0, 1]), [0.75, 0.75, 1.5])


def test_hand_values():
  scores, labels = jnp.array([0.8, 0.4, 0.0, -0.8]), jnp.array([1, 0, 1, 0])
  want = 1 - (0.6 + 0.4 / 1.8 + 2 / 3) / 2
  np.testing.assert_allclose(
    histogram.fastap_loss(scores, labels, num_intervals=4), want, rtol=1e-6
  )
  np.testing.assert_allclose(
    histogram.soft_binning_ap_loss(scores, labels, num_bins=5), want, rtol=1e-6
  )


# 1. The primitive.


@pytest.mark.parametrize(
  ("first", "last", "num_centres"), [(1.0, -1.0, 5), (0.0, 4.0, 11), (0.0, 6.0, 7)]
)
def test_soft_histograms_match_reference(first, last, num_centres, x64):
  rng = np.random.default_rng(0)
  shape = (2, 3, N)
  low, high = min(first, last), max(first, last)
  values = rng.uniform(low - 0.3, high + 0.3, shape)  # Some beyond the ends: clipped.
  relevance = rng.uniform(0, 2, shape) * (rng.random(shape) < 0.5)  # Real-valued weights too.
  where = rng.random(shape) < 0.8
  got = histogram.soft_histograms(
    values,
    relevance,
    where,
    num_centres=num_centres,
    first_centre=first,
    last_centre=last,
    dtype=jnp.float64,
  )
  centres = list(np.linspace(first, last, num_centres))
  width = abs(last - first) / (num_centres - 1)
  for idx in np.ndindex(shape[:-1]):
    keep = where[idx]
    h_pos, h = ref.histograms(values[idx][keep], relevance[idx][keep], centres, width)
    np.testing.assert_allclose(got.relevant[idx], h_pos, **TOL64)
    np.testing.assert_allclose(got.total[idx], h, **TOL64)
  # Each valid item adds exactly 1 in all.
  np.testing.assert_allclose(got.total.sum(-1), where.sum(-1), **TOL64)


def test_soft_histograms_accumulate_in_float32():
  values = jnp.linspace(-1, 1, 16, dtype=jnp.bfloat16)
  got = histogram.soft_histograms(
    values,
    jnp.ones(16),
    jnp.ones(16, bool),
    num_centres=4,
    first_centre=1.0,
    last_centre=-1.0,
    dtype=lists.compute_dtype(values.dtype),
  )
  assert got.total.dtype == jnp.float32 and got.relevant.dtype == jnp.float32
  np.testing.assert_allclose(got.total.sum(), 16.0, rtol=1e-6)


@pytest.mark.parametrize(("first", "last", "num_centres"), [(1.0, -1.0, 5), (0.0, 4.0, 11)])
def test_soft_histograms_derivative(first, last, num_centres, x64):
  # The binning's derivative is written out (a custom JVP): forward and reverse mode against
  # finite differences, in the values and in the relevance weights, away from the kinks at the
  # centres; items beyond the end centres and masked items (here NaN) get an exactly zero gradient.
  rng = np.random.default_rng(2)
  shape = (2, 3, N)
  position = rng.integers(0, num_centres - 1, shape) + rng.uniform(0.05, 0.95, shape)
  beyond = rng.random(shape) < 0.15
  position = np.where(beyond, np.where(rng.random(shape) < 0.5, -0.4, num_centres - 0.6), position)
  values = first + position * (last - first) / (num_centres - 1)
  relevance = rng.uniform(0, 2, shape)
  where = rng.random(shape) < 0.8
  coef = rng.standard_normal(shape[:-1] + (num_centres, 2))

  def f(v, r, where=where):
    h = histogram.soft_histograms(
      v,
      r,
      where,
      num_centres=num_centres,
      first_centre=first,
      last_centre=last,
      dtype=jnp.float64,
    )
    return jnp.sum(h.total**2 * coef[..., 0]) + jnp.sum(h.relevant**2 * coef[..., 1])

  jtu.check_grads(f, (values, relevance), order=1, modes=("fwd", "rev"), eps=1e-6)
  dv, dr = jax.grad(f, argnums=(0, 1))(np.where(where, values, np.nan), relevance)
  assert np.all(np.isfinite(dv)) and np.all(np.isfinite(dr))
  assert np.all(dv[beyond | ~where] == 0) and np.all(dr[~where] == 0)
  assert np.all(dv[~beyond & where] != 0)


@pytest.mark.forms(platforms.GPU)  # For its blocks of 3 lists; the test forces each form itself.
@pytest.mark.parametrize("num_centres", [5, 11, histogram.UNROLL_BINS + 3])
def test_forms_agree_at_the_kinks(num_centres, x64):
  # Items exactly on the centres (where the weight's slope jumps), on and beyond the ends
  # (clipped), masked (NaN) and in between: the accelerators' histograms and their derivatives in
  # both modes equal the CPU's, up to the order of the sums (each form forced in turn).
  rng = np.random.default_rng(3)
  shape = (5, 2 * num_centres)  # Blocks of 3 lists and a padded one under the GPU form.
  position = rng.integers(-1, num_centres + 1, shape) + np.where(
    rng.random(shape) < 0.5, 0.0, rng.uniform(0.05, 0.95, shape)
  )
  position[:, :2] = [0.0, num_centres - 1.0]  # Both ends exactly.
  values = 1.0 - 2.0 * position / (num_centres - 1)
  relevance = rng.uniform(0, 2, shape) * (rng.random(shape) < 0.6)
  where = rng.random(shape) < 0.85
  values = np.where(where, values, np.nan)
  coef = rng.standard_normal(shape[:-1] + (num_centres, 2))
  tangents = (rng.standard_normal(shape), rng.standard_normal(shape))

  def f(v, r):
    h = histogram.soft_histograms(
      v,
      r,
      where,
      num_centres=num_centres,
      first_centre=1.0,
      last_centre=-1.0,
      dtype=jnp.float64,
    )
    return jnp.sum(h.total**2 * coef[..., 0]) + jnp.sum(h.relevant**2 * coef[..., 1])

  def derivatives():
    hist = histogram.soft_histograms(
      values,
      relevance,
      where,
      num_centres=num_centres,
      first_centre=1.0,
      last_centre=-1.0,
      dtype=jnp.float64,
    )
    return (
      hist,
      jax.grad(f, argnums=(0, 1))(values, relevance),
      jax.grad(f)(values, relevance),  # The relevance's tangent a symbolic zero.
      jax.jvp(f, (values, relevance), tangents)[1],
      jax.jvp(lambda v: f(v, relevance), (values,), tangents[:1])[1],
      jax.jvp(lambda r: f(values, r), (relevance,), tangents[1:])[1],
    )

  with platforms.forced_platform(platforms.CPU):
    want = derivatives()
  for form in (platforms.ACCELERATOR, platforms.GPU):
    with platforms.forced_platform(form):
      got = derivatives()
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12), got, want)
  assert np.all(np.isfinite(want[1][0])) and np.any(want[1][0] != 0)


def _max_intermediate_size(jaxpr) -> int:
  """The largest array (elements) any equation of a jaxpr, or of its sub-jaxprs, produces."""
  biggest = 0
  for eqn in jaxpr.eqns:
    for var in eqn.outvars:
      biggest = max(biggest, int(np.prod(getattr(var.aval, "shape", ()), dtype=np.int64)))
    for param in eqn.params.values():
      for sub in param if isinstance(param, (tuple, list)) else (param,):
        inner = sub if hasattr(sub, "eqns") else getattr(sub, "jaxpr", None)  # Jaxpr or Closed.
        if inner is not None and hasattr(inner, "eqns"):
          biggest = max(biggest, _max_intermediate_size(inner))
  return biggest


@pytest.mark.parametrize("fn", LOSSES, ids=LOSS_IDS)
def test_no_items_by_bins_tensor(fn, platform):
  # P lists of n items into ~M bins: nothing of size P * n * M in the forward or backward pass.
  # The accelerators' form has one reduction per bin up to UNROLL_BINS bins (beyond, all bins on a
  # leading axis of one fused reduction, an [M, P, n] operand in the jaxpr that XLA never stores).
  p, n = 4, 64
  m = 128 if platform == platforms.CPU else histogram.UNROLL_BINS // 2
  scores, labels, where = random_lists(1, (p, n))
  loss = functools.partial(fn, labels=labels, where=where, **_bins(fn, m))
  jaxpr = jax.make_jaxpr(jax.value_and_grad(lambda s: loss(s)))(scores.astype(np.float32))
  biggest = _max_intermediate_size(jaxpr.jaxpr)
  # The per-item statistics [p, n, 4] and the per-bin sums [p, m + 1, 4] at most.
  assert biggest <= 4 * p * max(n, m + 1), biggest
  assert biggest < p * n * m // 8


# 2. Random lists against the references.


@pytest.mark.parametrize(
  ("case", "dtype"),
  [(c, np.float64) for c in CASES] + [(c, np.float32) for c in DEFAULT_CASES],
  ids=[f"{i}-f64" for i in CASE_IDS] + [f"{i}-f32" for i in DEFAULT_IDS],
)
def test_matches_reference(case, dtype):
  scores, labels, where = _with_empty_lists(2)
  scores = scores.astype(dtype)
  want = expected(case, scores, labels, where)
  with precision(dtype):
    got = run(case, scores, labels, where=where, reduce_fn=None)
    assert got.shape == BATCH
    assert got.dtype == dtype
    tol = TOL64 if dtype == np.float64 else TOL32
    np.testing.assert_allclose(np.asarray(got, np.float64), want, **tol)
    mean = run(case, scores, labels, where=where)
    defined = reference.has_relevant(labels, where)
    np.testing.assert_allclose(float(mean), reference.mean_over_lists(want, defined), **tol)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_matches_reference_without_mask_and_with_scores_out_of_range(case, x64):
  scores, labels, _ = random_lists(3, mask=False)
  scores[..., :2] = [1.2, -1.5]
  labels[..., 0] = 1
  # Known scores out of range are an error; under jit they are clipped to the end bins.
  with pytest.raises(ValueError, match=rf"^{case.fn.__name__}: scores must lie in \[-1, 1\]"):
    run(case, scores, labels, reduce_fn=None)
  got = jax.jit(lambda s: run(case, s, labels, reduce_fn=None))(scores)
  np.testing.assert_allclose(got, expected(case, scores, labels), **TOL64)


@pytest.mark.parametrize("fn", LOSSES, ids=LOSS_IDS)
def test_scores_out_of_range_are_an_error(fn):
  scores, labels, where = random_lists(4)
  labels[..., 0] = 1
  for bad in (1.01, -1.2, 3.5, np.inf):
    s = scores.copy()
    s[1, 2, 3] = bad
    where[1, 2, 3] = True
    with pytest.raises(ValueError, match=r"map other scores into \[-1, 1\] first"):
      fn(s, labels, where=where)
    where[1, 2, 3] = False  # Masked, it is not read.
    fn(s, labels, where=where)
  # Rounding is allowed: cosines of unit vectors, the query included (1 up to a few ulps).
  e = jax.random.normal(jax.random.key(0), (8, 512))
  s, relevance, where = jaxrank.batch_retrieval(
    jnp.concatenate([e, -e]), jnp.arange(16) % 4, include_self=True
  )
  fn(s, relevance, where=where)
  s = s.at[0, 0].set(1 + 4 * float(jnp.finfo(jnp.float32).eps))
  fn(s, relevance, where=where)
  fn(s.astype(jnp.bfloat16).at[0, 0].set(1.0078125), relevance, where=where)  # bfloat16's 1 + ulp.


def test_other_ranges_by_an_affine_map(x64):
  """Scores in [lo, hi] mapped affinely onto [-1, 1] are binned as on [lo, hi] itself: the released
  code's APLoss() (25 bins on [0, 1]) is soft_binning_ap_loss(2 s - 1, num_bins=25)."""
  scores, labels, where = random_lists(5)
  labels[..., 0] = 1
  for lo, hi, num_bins in ((0.0, 1.0, 25), (-3.0, 5.0, 7)):
    s = lo + (scores + 1) / 2 * (hi - lo)
    got = histogram.soft_binning_ap_loss(
      (2 * s - lo - hi) / (hi - lo), labels, where=where, num_bins=num_bins, reduce_fn=None
    )
    want = reference.per_list(
      lambda *a: (
        1 - ref.ap_q(*a, num_bins=num_bins, low=lo, high=hi)
        if reference.has_relevant(a[1], a[2])
        else 0.0
      ),
      s,
      labels,
      where,
    )
    np.testing.assert_allclose(got, want, **TOL64)


@pytest.mark.parametrize("num_intervals", [4, 10])
def test_fastap_equals_soft_binning_ap_with_one_more_bin(num_intervals, x64):
  e, labels = _embeddings(4, b=16, d=5, num_classes=4)
  scores, relevance, where = batch_retrieval(e, labels)
  fastap = histogram.fastap_loss(
    scores, relevance, where=where, num_intervals=num_intervals, reduce_fn=None
  )
  sb = histogram.soft_binning_ap_loss(
    scores, relevance, where=where, num_bins=num_intervals + 1, reduce_fn=None
  )
  np.testing.assert_allclose(fastap, sb, rtol=1e-12, atol=1e-14)
  assert float(jnp.std(fastap)) > 0  # Not a trivial case.


# 3. Gradients.


@pytest.mark.parametrize("num_intervals", [3, 10])
def test_fastap_gradient_matches_appendix_c(num_intervals, x64):
  scores, labels, where = _with_empty_lists(5)
  scores = off_centres(scores, num_intervals + 1)
  got = jax.grad(
    lambda s: histogram.fastap_loss(
      s, labels, where=where, num_intervals=num_intervals, reduce_fn=jnp.sum
    )
  )(scores)
  want = np.zeros(scores.shape)
  for idx in np.ndindex(BATCH):
    want[idx] = -ref.fastap_gradient(
      scores[idx], labels[idx], where[idx], num_intervals=num_intervals
    )
  np.testing.assert_allclose(got, want, **TOL64)
  assert np.abs(want).max() > 0.1


def test_fastap_batch_gradient_matches_eq_33(x64):
  # eq. 33 is the gradient with respect to unit embeddings of the mean FastAP over the batch, each
  # query retrieving the rest: jaxrank's loss on the raw dot products, the query masked out.
  e, labels = _embeddings(6, b=10, d=4, num_classes=3)
  e = e / np.linalg.norm(e, axis=1, keepdims=True)
  relevance = labels[:, None] == labels[None, :]
  where = ~np.eye(len(labels), dtype=bool)
  num_intervals = 6

  def loss(psi):
    return histogram.fastap_loss(psi @ psi.T, relevance, where=where, num_intervals=num_intervals)

  got = jax.grad(loss)(e)
  want = -ref.fastap_batch_gradient(e, labels, num_intervals=num_intervals)
  np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("case", DEFAULT_CASES, ids=DEFAULT_IDS)
def test_check_grads(case, x64):
  scores, labels, where = _with_empty_lists(7)
  if "fastap" in case.name:  # Intervals, one centre more.
    num_centres = case.kwargs.get("num_intervals", 10) + 1
  else:
    num_centres = case.kwargs.get("num_bins", 20)
  scores = off_centres(scores, num_centres, margin=0.02)
  weights = np.random.default_rng(7).uniform(0.5, 2, BATCH)
  extra = {"weights": weights} if case.fn is histogram.soft_binning_ap_loss else {}
  fn = functools.partial(run, case, labels=labels, where=where, **extra)
  jtu.check_grads(lambda s: fn(scores=s), (scores,), order=1, modes=["rev"], eps=1e-6)


def test_weights_gradient_is_the_loss(x64):
  scores, labels, where = _with_empty_lists(8)
  weights = np.random.default_rng(8).uniform(0.5, 2, BATCH)
  grad = jax.grad(
    lambda w: histogram.soft_binning_ap_loss(
      scores, labels, where=where, weights=w, reduce_fn=jnp.sum
    )
  )(weights)
  per = histogram.soft_binning_ap_loss(scores, labels, where=where, reduce_fn=None)
  np.testing.assert_allclose(grad, per, **TOL64)


# 4. Invariances, reductions, NaN and dtypes: test_contract.py, for every loss and metric.


# 5. The limit of many bins.


def _well_separated(seed, n, num_centres, *, on_centres):
  """Tie-free similarities at least 3 bins apart, on the centres or anywhere between."""
  rng = np.random.default_rng(seed)
  slots = rng.choice(np.arange(0, num_centres - 1, 3), size=n, replace=False)
  t = slots + (0.0 if on_centres else rng.uniform(0.05, 0.95, n))
  scores = 1 - 2 * t / (num_centres - 1)
  labels = (rng.random(n) < 0.5).astype(np.int32)
  labels[rng.integers(n)] = 1
  return scores, labels


def test_items_on_bin_centres_give_exact_ap(x64):
  for seed in range(4):
    scores, labels = _well_separated(seed, 12, 1001, on_centres=True)
    exact = float(ap_metric(scores, labels))
    got = 1 - float(histogram.soft_binning_ap_loss(scores, labels, num_bins=1001))
    np.testing.assert_allclose(got, exact, rtol=1e-10)
    got = 1 - float(histogram.fastap_loss(scores, labels, num_intervals=1000))
    np.testing.assert_allclose(got, exact, rtol=1e-10)


def test_many_bins_split_each_item_between_two_ranks(x64):
  # With every item alone on its two bins, the estimate is AP with each item split in two, in
  # closed form; it lies between AP minus the bound and AP.
  for seed in range(4):
    scores, labels = _well_separated(seed, 12, 1001, on_centres=False)
    got = 1 - float(histogram.soft_binning_ap_loss(scores, labels, num_bins=1001))
    np.testing.assert_allclose(got, ref.split_rank_ap(scores, labels, num_bins=1001), rtol=1e-10)
    exact = float(ap_metric(scores, labels))
    assert exact - ref.split_rank_bound(scores, labels) - 1e-12 <= got <= exact + 1e-12


@pytest.mark.parametrize("fn", LOSSES, ids=LOSS_IDS)
def test_tends_to_ap_as_bins_grow(fn, x64):
  # Soft binning keeps a bias of order 1 / rank (see above): the error falls about 4-fold from 10
  # to 1000 bins on these lists of 40 items, then stays.
  scores, labels, _ = random_lists(14, (32, 40), mask=False, relevant=0.3)
  labels[:, 0] = 1
  exact = np.asarray(ap_metric(scores, labels, reduce_fn=None))

  def error(count):
    ap = 1 - np.asarray(fn(scores, labels, **_bins(fn, count), reduce_fn=None))
    return np.abs(ap - exact).mean()

  errors = [error(b) for b in (10, 1000)]
  assert errors[1] < errors[0] / 3, errors
  assert errors[1] < 0.015, errors


# 6. Reductions and weights.


def test_weighted_reductions(x64):
  scores, labels, where = _with_empty_lists(17)
  weights = np.random.default_rng(17).uniform(0, 3, BATCH)
  fn = functools.partial(histogram.soft_binning_ap_loss, scores, labels, where=where)
  want = reference.per_list(ref.soft_binning_ap_loss, scores, labels, where)
  defined = reference.has_relevant(labels, where)
  # None: the weighted per-list losses; jnp.sum: their sum; jnp.mean: the weighted mean.
  per = fn(weights=weights, reduce_fn=None)
  np.testing.assert_allclose(per, weights * want, **TOL64)
  np.testing.assert_allclose(fn(weights=weights, reduce_fn=jnp.sum), jnp.sum(per), rtol=1e-12)
  np.testing.assert_allclose(
    fn(weights=weights), ref.weighted_mean_over_lists(want, defined, weights), **TOL64
  )
  # Any other reduce_fn gets the weighted values.
  np.testing.assert_allclose(
    fn(weights=weights, reduce_fn=lambda v, where: jnp.max(v, where=where, initial=0.0)),
    np.max(weights * want),
    **TOL64,
  )
  # Uniform weights (a scalar broadcasts) change no mean.
  np.testing.assert_allclose(fn(weights=2.5), fn(), **TOL64)
  # Valid weights all zero: 0, not NaN.
  assert float(fn(weights=np.zeros(BATCH))) == 0.0


@any_form
def test_class_balancing_weights_match_reference(x64):
  rng = np.random.default_rng(18)
  labels = rng.integers(0, 4, 15)
  labels[:6] = 7  # An over-represented class.
  got = histogram.class_balancing_weights(labels)
  assert got.dtype == jnp.float64
  np.testing.assert_allclose(got, ref.class_balancing_weights(labels), **TOL64)
  np.testing.assert_allclose(jnp.mean(got), 1.0, **TOL64)
  totals = [float(jnp.sum(got[labels == c])) for c in np.unique(labels)]
  np.testing.assert_allclose(totals, totals[0], **TOL64)
  where = rng.random(15) < 0.7
  got = histogram.class_balancing_weights(labels, where=where)
  np.testing.assert_allclose(got, ref.class_balancing_weights(labels, where), **TOL64)
  np.testing.assert_array_equal(np.asarray(got)[~where], 0.0)
  np.testing.assert_allclose(jnp.sum(got), where.sum(), **TOL64)
  # Jittable, and float32 without x64.
  np.testing.assert_allclose(
    jax.jit(histogram.class_balancing_weights)(labels),
    ref.class_balancing_weights(labels),
    **TOL64,
  )


@any_form
def test_class_balancing_weights_default_dtype():
  got = histogram.class_balancing_weights(np.array([0, 0, 1], np.int32))
  assert got.dtype == jnp.float32
  np.testing.assert_allclose(got, [0.75, 0.75, 1.5])


def test_class_balanced_loss_is_mean_over_classes(x64):
  # 3 + 5 + 2 queries of three classes and one singleton, whose list has no positive.
  e, _ = _embeddings(19, b=11, d=4)
  labels = np.array([0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 3])
  scores, relevance, where = batch_retrieval(e, labels)
  weights = histogram.class_balancing_weights(jnp.asarray(labels))
  per = np.asarray(histogram.soft_binning_ap_loss(scores, relevance, where=where, reduce_fn=None))
  by_class = [per[labels == c].mean() for c in (0, 1, 2)]  # Class 3 has no relevant item.
  got = histogram.soft_binning_ap_loss(scores, relevance, where=where, weights=weights)
  np.testing.assert_allclose(got, np.mean(by_class), **TOL64)
  assert abs(np.mean(by_class) - per[:10].mean()) > 1e-3  # Balancing changes the value.


# 7. Degenerate lists.

DEGENERATE = {
  "no_relevant": ([0.3, 0.2, -0.5, 0.1], [0, 0, 0, 0], [True] * 4),
  "all_relevant": ([0.3, 0.2, -0.5, 0.1], [1, 1, 1, 1], [True] * 4),
  "all_tied": ([0.37, 0.37, 0.37, 0.37], [0, 1, 0, 1], [True] * 4),
  "all_in_one_bin": ([0.301, 0.303, 0.305, 0.307], [0, 1, 1, 0], [True] * 4),
  "all_on_one_centre": ([0.0, 0.0, 0.0, 0.0], [1, 0, 0, 1], [True] * 4),
  "all_beyond_the_ends": ([3.0, 1.5, -1.5, -3.0], [0, 1, 0, 1], [True] * 4),
  "all_masked": ([0.3, 0.2, -0.5, 0.1], [1, 0, 1, 0], [False] * 4),
  "one_valid_item": ([0.3, 0.2, -0.5, 0.1], [1, 0, 1, 0], [False, False, True, False]),
  "best_and_worst_ends": ([1.0, 1.0, -1.0, -1.0], [0, 1, 1, 0], [True] * 4),
}


@pytest.mark.parametrize("lst", list(DEGENERATE), ids=list(DEGENERATE))
@pytest.mark.parametrize("case", DEFAULT_CASES, ids=DEFAULT_IDS)
def test_degenerate_lists(case, lst, x64):
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
  np.testing.assert_allclose(per, case.ref(scores, labels, where, **case.kwargs), **TOL64)
  for reduce_fn in (jnp.mean, None):
    grad = jax.grad(lambda s: jnp.sum(call(s, reduce_fn=reduce_fn)))(scores)
    assert np.all(np.isfinite(grad)), grad
  if lst in ("no_relevant", "all_masked"):
    assert float(per) == 0.0 and float(call(scores, reduce_fn=jnp.mean)) == 0.0
    np.testing.assert_array_equal(grad, 0.0)
  if lst in ("all_relevant", "one_valid_item"):
    assert float(per) == pytest.approx(0.0, abs=1e-12)


# 8. Errors.


@any_form
@pytest.mark.parametrize("fn", LOSSES, ids=LOSS_IDS)
def test_input_errors(fn):
  helpers.assert_binned_loss_input_errors(fn, bins=next(iter(_bins(fn, 0))))


@any_form
def test_weights_errors():
  scores, labels = jnp.zeros((2, 3)), jnp.ones((2, 3), jnp.int32)
  with pytest.raises(ValueError, match=r"weights.*(\(2, 3\).*\(2,\)|\(2,\).*\(2, 3\))"):
    histogram.soft_binning_ap_loss(scores, labels, weights=jnp.ones((2, 3)))  # Per item.
  with pytest.raises(ValueError, match=r"\(3,\)"):
    histogram.soft_binning_ap_loss(scores, labels, weights=jnp.ones(3))
  with pytest.raises(TypeError, match="weights"):
    histogram.soft_binning_ap_loss(scores, labels, weights=np.array(["a", "b"]))
  for bad in (jnp.array([1.0, -0.5]), np.array([np.nan, 1.0]), -1.0):
    with pytest.raises(ValueError, match="^soft_binning_ap_loss: weights must be non-negative"):
      histogram.soft_binning_ap_loss(scores, labels, weights=bad)


@any_form
def test_class_balancing_weights_errors():
  with pytest.raises(ValueError, match="shape"):
    histogram.class_balancing_weights(jnp.ones((3, 2), jnp.int32))
  with pytest.raises(TypeError, match="integer"):
    histogram.class_balancing_weights(jnp.array([0.0, 1.0]))
  with pytest.raises(ValueError, match="where"):
    histogram.class_balancing_weights(jnp.array([0, 1]), where=jnp.array([True]))
  # A mask of the wrong kind is a TypeError (it was a ValueError before the shared checks).
  with pytest.raises(TypeError, match="class_balancing_weights: where must be a boolean mask"):
    histogram.class_balancing_weights(jnp.array([0, 1]), where=jnp.array([1, 0]))
  # Boolean labels are two classes; numpy labels work as JAX ones.
  weights = histogram.class_balancing_weights(np.array([True, True, False, True]))
  np.testing.assert_allclose(weights, [2 / 3, 2 / 3, 2, 2 / 3], rtol=1e-6)


# 9. pytorch-metric-learning's FastAPLoss, when installed.


@any_form
def test_fastap_matches_pytorch_metric_learning(x64):
  # torch and pytorch-metric-learning are in the dev extra: this comparison runs in CI, never skips.
  import torch  # pylint: disable=g-import-not-at-top
  from pytorch_metric_learning import losses as pml_losses  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(23)
  e = rng.standard_normal((20, 6))
  labels = np.array([0, 1, 2, 3] * 4 + [4, 5, 5, 6])  # Classes 4 and 6: queries without positives.

  def loss(x, y, num_intervals):
    scores, relevance, where = jaxrank.batch_retrieval(x, y)
    return histogram.fastap_loss(scores, relevance, where=where, num_intervals=num_intervals)

  value_and_grad = jax.jit(jax.value_and_grad(loss), static_argnums=2)

  for num_intervals in (3, 10):
    e_torch = torch.tensor(e, requires_grad=True)  # float64, as the embeddings.
    # pytorch-metric-learning's num_bins counts intervals: our num_intervals.
    want = pml_losses.FastAPLoss(num_bins=num_intervals)(e_torch, torch.tensor(labels))
    want.backward()
    got, grad = value_and_grad(e, labels, num_intervals)
    np.testing.assert_allclose(float(got), float(want.detach()), **TOL64)
    np.testing.assert_allclose(grad, e_torch.grad.numpy(), **TOL64)
