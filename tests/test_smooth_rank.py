"""Tests of `jaxrank.smooth_rank` against the loop-based references of `reference_smooth_rank.py`.

Run: .venv/bin/python -m pytest tests/test_smooth_rank.py -q
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import reference_smooth_rank as ref
from helpers import precision
from jax.test_util import check_grads

import jaxrank
from jaxrank._src import platforms
from jaxrank._src import smooth_rank as sr


class Case(NamedTuple):
  name: str
  fn: Callable[..., jax.Array]
  ref: Callable[..., float]
  kwargs: dict[str, Any]


SMOOTH_CASES = [
  Case("smoothap", sr.smoothap_loss, ref.smoothap_loss, {}),
  Case("smoothap_t0.1", sr.smoothap_loss, ref.smoothap_loss, {"temperature": 0.1}),
  Case("supap", sr.supap_loss, ref.supap_loss, {}),
  Case(
    "supap_custom", sr.supap_loss, ref.supap_loss, {"temperature": 0.05, "rho": 10.0, "delta": 0.1}
  ),
  Case("calibration", sr.calibration_loss, ref.calibration_loss, {}),
  Case("calibration_0.1", sr.calibration_loss, ref.calibration_loss, dict(alpha=0.1, beta=-0.1)),
  Case("roadmap", sr.roadmap_loss, ref.roadmap_loss, {}),
  Case(
    "roadmap_custom",
    sr.roadmap_loss,
    ref.roadmap_loss,
    {
      "calibration_weight": 0.2,
      "temperature": 0.05,
      "rho": 10.0,
      "delta": 0.1,
      "alpha": 0.1,
      "beta": -0.1,
    },
  ),
]
GAP_CASES = [
  Case("gap_k2", sr.decomposability_gap, ref.decomposability_gap, {"num_batches": 2}),
  Case("gap_k4", sr.decomposability_gap, ref.decomposability_gap, {"num_batches": 4}),
]
CASES = SMOOTH_CASES + GAP_CASES
# One case per function, for the costlier tests: the hyperparameters are arrays inside, so the
# other cases run the same code. Compilations dominate the suite's time; every shape, dtype and
# transformation compiles anew, hence the shared shapes below.
CORE = [c for c in CASES if c.name in ("smoothap", "supap", "calibration", "roadmap", "gap_k2")]
# The losses (differentiable). The gap is a diagnostic built on `ap_metric`.
LOSSES = [c for c in CORE if "gap" not in c.name]
# The losses that run the chunked loop of relevant items (roadmap runs supap's).
CHUNKED = [c for c in CORE if c.name in ("smoothap", "supap")]


def ids(cases):
  return [c.name for c in cases]


def run(case, scores, labels, *, where=None, reduce_fn=jnp.mean, **extra):
  return case.fn(scores, labels, where=where, reduce_fn=reduce_fn, **case.kwargs, **extra)


def expected(case, scores, labels, where=None):
  return reference.per_list(case.ref, scores, labels, where, **case.kwargs)


BATCH = (3, 4)
N = 8
TOL64 = dict(rtol=1e-10, atol=1e-12)
TOL32 = dict(rtol=2e-4, atol=2e-5)


@jax.jit
def ap_lists(scores, labels, where):
  """`jaxrank.ap_metric` per list, compiled once per shape (eagerly it compiles every op)."""
  return jaxrank.ap_metric(scores, labels, where=where, reduce_fn=None)


def random_lists(seed, shape=BATCH + (N,), *, scale=0.1, mask=True, dtype=np.float64):
  """Scores around 0 with spread `scale` (all regimes of the steps), labels in {0, 1, 2}, a mask."""
  rng = np.random.default_rng(seed)
  scores = (scale * rng.normal(size=shape)).astype(dtype)
  labels = rng.integers(0, 3, shape).astype(np.int32)
  where = rng.random(shape) < 0.8 if mask else np.ones(shape, bool)
  return scores, labels, where


def embedded(lists, seed=24):
  """A batch of the shared shape whose first lists are `lists` (`(scores, labels, where)` each,
  shorter than N) padded with masked items; random lists fill the rest."""
  scores, labels, where = random_lists(seed)
  for i, (s, y, w) in enumerate(lists):
    idx, pad = np.unravel_index(i, BATCH), N - len(s)
    scores[idx] = np.concatenate([s, np.zeros(pad)])
    labels[idx] = np.concatenate([y, np.ones(pad)])
    where[idx] = np.concatenate([w, np.zeros(pad, bool)])
  return scores, labels, where


def well_separated(seed, shape, *, avoid=(0.0,), gap=2e-3, scale=0.1):
  """Scores whose pairwise differences stay `gap` away from every value in `avoid` (0: ties)."""
  rng = np.random.default_rng(seed)
  lists = []
  off_diagonal = ~np.eye(shape[-1], dtype=bool)
  while len(lists) < int(np.prod(shape[:-1])):
    s = scale * rng.normal(size=shape[-1])
    diffs = np.abs(s[:, None] - s[None, :])[off_diagonal]
    if all(np.all(np.abs(diffs - a) > gap) for a in avoid):
      lists.append(s)
  return np.array(lists).reshape(shape)


# 1. The references themselves, by hand.


def test_reference_hand_values():
  # AP of [+ (0.9), - (0.8), + (0.7), - (0.1)] is (1 + 2/3) / 2; Heaviside steps give it exactly.
  heaviside_ap = ref.smooth_rank_ap(
    [0.9, 0.8, 0.7, 0.1], [1, 0, 1, 0], h_pos=ref.heaviside, h_neg=ref.heaviside
  )
  assert heaviside_ap == pytest.approx((1 + 2 / 3) / 2)
  # SmoothAP with a huge temperature: every step is 1/2, so rank+(k) = 1 + (|P| - 1) / 2 and
  # rank(k) = 1 + (n - 1) / 2 for every positive.
  assert ref.smoothap_loss([0.3, 0.2, 0.1], [1, 1, 0], temperature=1e9) == pytest.approx(
    1 - 1.5 / 2
  )
  # SupAP: one negative 0.1 above the only positive: H^- = rho (0.1 - delta) + sigma(5) + 0.5.
  h = 100 * (0.1 - 0.05) + 1 / (1 + math.exp(-5)) + 0.5
  assert ref.supap_loss([0.5, 0.6], [1, 0]) == pytest.approx(1 - 1 / (1 + h))
  # Calibration: (0.9 - 0.5) / 1 + (0.7 - 0.6 + 0) / 2.
  assert ref.calibration_loss([0.5, 0.7, 0.2], [1, 0, 0]) == pytest.approx(0.4 + 0.05)
  assert ref.roadmap_loss([0.5, 0.7, 0.2], [1, 0, 0], calibration_weight=1.0) == pytest.approx(0.45)
  # Gap: batches [+ -] and [+ -] both perfect; whole list + - + -.
  assert ref.decomposability_gap([0.9, 0.8, 0.7, 0.1], [1, 0, 1, 0], num_batches=2) == (
    pytest.approx(1 - (1 + 2 / 3) / 2)
  )
  assert ref.smoothap_loss([0.3, 0.2], [0, 0]) == 0.0
  assert ref.supap_loss([0.3, 0.2], [1, 0], [False, True]) == 0.0


# 2. Random lists against the references.


@pytest.mark.parametrize(
  ("case", "dtype"),
  [(c, np.float64) for c in CASES] + [(c, np.float32) for c in CORE],
  ids=[f"{c.name}-f64" for c in CASES] + [f"{c.name}-f32" for c in CORE],
)
def test_matches_reference(case, dtype):
  scores, labels, where = random_lists(0, dtype=dtype)
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


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_matches_reference_wide_scores_no_mask(case, x64):
  # Cosine-like spread: most pairs in the saturated / linear regimes.
  scores, labels, _ = random_lists(1, scale=0.6, mask=False)
  got = run(case, scores, labels, reduce_fn=None)
  np.testing.assert_allclose(got, expected(case, scores, labels), **TOL64)


def test_generic_mechanism_matches_reference(x64):
  scores, labels, where = random_lists(2)
  positive = functools.partial(sr.sigmoid_step, temperature=0.03)
  negative = functools.partial(sr.supap_negative_step, temperature=0.02, rho=5.0, delta=0.02)
  got = sr.smooth_rank_ap_loss(
    scores,
    labels,
    where=where,
    positive_step_fn=positive,
    negative_step_fn=negative,
    reduce_fn=None,
  )
  want = reference.per_list(
    lambda s, y, w: (
      (
        1
        - ref.smooth_rank_ap(
          s,
          y,
          w,
          h_pos=lambda t: ref.sigmoid(t / 0.03),
          h_neg=lambda t: ref.supap_negative_step(t, 0.02, 5.0, 0.02),
        )
      )
      if reference.has_relevant(y, w)
      else 0.0
    ),
    scores,
    labels,
    where,
  )
  np.testing.assert_allclose(got, want, **TOL64)


# 3. The step functions.


def test_supap_negative_step(x64):
  temperature, rho, delta = 0.01, 100.0, 0.05
  step = functools.partial(sr.supap_negative_step, temperature=temperature, rho=rho, delta=delta)
  at_delta = 1 / (1 + math.exp(-delta / temperature)) + 0.5
  special = np.array([0.0, -1e-12, delta, delta + 1e-12, delta + 0.1])
  t = np.concatenate([np.linspace(-1, 1, 4001), special])
  values, slopes = jax.jit(lambda x: (step(x), jax.vmap(jax.grad(step))(x)))(t)
  values, slopes = np.asarray(values), np.asarray(slopes)
  zero, below_zero, at, after, far = values[-5:]
  # An upper bound of the Heaviside step (what makes SupAP an upper bound of the AP loss).
  assert np.all(values >= (t >= 0))
  # The jump of 1/2 at 0, to exactly 1.
  assert zero == 1.0 and below_zero == pytest.approx(0.5)
  # Continuous at delta, with the constant of eq. 4, then slope rho.
  assert at == pytest.approx(at_delta, rel=1e-14)
  assert after == pytest.approx(at_delta, rel=1e-9)
  assert far == pytest.approx(at_delta + rho * 0.1)
  assert slopes[-1] == pytest.approx(rho) and slopes[-2] == pytest.approx(rho)
  # The reference agrees everywhere.
  want = [ref.supap_negative_step(x, temperature, rho, delta) for x in t]
  np.testing.assert_allclose(values, want, rtol=1e-13)


def test_heaviside_and_sigmoid_steps(x64):
  t = np.array([-1.0, -1e-9, 0.0, 1e-9, 1.0])
  np.testing.assert_array_equal(sr.heaviside_step(t), [0, 0, 1, 1, 1])
  np.testing.assert_array_equal(jax.vmap(jax.grad(sr.heaviside_step))(t), 0.0)
  np.testing.assert_allclose(
    sr.sigmoid_step(t, temperature=0.5), [ref.sigmoid(x / 0.5) for x in t], rtol=1e-14
  )


# 4. Limits and bounds.


def test_smoothap_tends_to_ap(x64):
  shape = BATCH + (N,)
  scores = well_separated(3, shape)
  labels = np.random.default_rng(3).integers(0, 2, shape)
  labels[..., 0] = 1
  exact = 1 - ap_lists(scores, labels, np.ones(shape, bool))
  errors = [
    np.max(np.abs(sr.smoothap_loss(scores, labels, temperature=t, reduce_fn=None) - exact))
    for t in (1e-1, 1e-2, 1e-3, 1e-5)
  ]
  assert errors[-1] < 1e-12
  assert all(a > b for a, b in zip(errors, errors[1:]))
  # The Heaviside steps give the exact AP loss itself.
  hard = sr.smooth_rank_ap_loss(
    scores,
    labels,
    positive_step_fn=sr.heaviside_step,
    negative_step_fn=sr.heaviside_step,
    reduce_fn=None,
  )
  np.testing.assert_allclose(hard, exact, **TOL64)


@pytest.mark.parametrize(
  "kwargs",
  [
    {},
    {"rho": 0.0, "delta": 0.0},
    {"temperature": 1.0, "rho": 1.0},
    {"temperature": 1e-4, "delta": 0.5},
  ],
  ids=["paper", "rho0_delta0", "soft", "sharp"],
)
def test_supap_upper_bounds_ap_loss(kwargs, x64):
  """Sec. 3.1, property 1: L_SupAP >= L_AP, on many random lists without ties."""
  rng = np.random.default_rng(4)
  undershoots = 0
  for _ in range(40):  # 480 lists of the shared shape (one compilation).
    shape = BATCH + (N,)
    scores = rng.normal(size=shape) * rng.choice([0.01, 0.1, 1.0], size=BATCH + (1,))
    labels = rng.integers(0, 2, shape)
    where = rng.random(shape) < 0.9
    exact = np.asarray(1 - ap_lists(scores, labels, where))
    supap = np.asarray(sr.supap_loss(scores, labels, where=where, reduce_fn=None, **kwargs))
    defined = reference.has_relevant(labels, where)
    assert np.all(supap[defined] >= exact[defined] - 1e-12)
    # SmoothAP is no bound: it undershoots on some lists.
    smooth = np.asarray(sr.smoothap_loss(scores, labels, where=where, reduce_fn=None))
    undershoots += np.sum(smooth[defined] < exact[defined] - 1e-3)
  assert undershoots > 0


def test_supap_bound_convention_with_ties(x64):
  lists = [
    # A negative tied with a positive counts as ranked above it (H^-(0) = 1 = H(0)), as in
    # ap_metric's pessimistic ties: the bound holds.
    ([0.5, 0.5, 0.2], [1, 0, 1], [True] * 3),
    # Relevant items tied with each other: rank+ counts each tied positive above the other, so
    # the surrogate can fall below the pessimistic AP loss (documented; measure zero for real
    # scores).
    ([0.5, 0.5, 0.5], [1, 1, 0], [True] * 3),
  ]
  scores, labels, where = embedded(lists)
  supap = np.asarray(sr.supap_loss(scores, labels, where=where, reduce_fn=None))[0]
  assert supap[0] >= 1 - reference.ap(*lists[0])
  assert supap[1] == pytest.approx(1 - 2 / 3)
  assert 1 - reference.ap(*lists[1]) == pytest.approx(1 - (1 / 2 + 2 / 3) / 2)


# 5. Gradients.


def _grad_inputs(seed, avoid):
  shape = BATCH + (N,)
  scores = well_separated(seed, shape, avoid=avoid)
  labels = np.random.default_rng(seed).integers(0, 2, shape)
  labels[..., 0] = 1
  where = np.ones(shape, bool)
  where[0, 1, 3] = where[1, 2, 5] = where[2, 3, 6] = False
  return scores, labels, where


GRAD_CASES = [
  ("smoothap", functools.partial(sr.smoothap_loss, temperature=0.05), (0.0,)),
  ("supap", sr.supap_loss, (0.0, 0.05)),
  ("roadmap", sr.roadmap_loss, (0.0, 0.05)),
]


@pytest.mark.parametrize(("name", "loss", "avoid"), GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_check_grads(name, loss, avoid, x64):
  scores, labels, where = _grad_inputs(5, avoid)
  if name == "roadmap":
    # Thresholds between two consecutive scores, so that the hinges' kinks are away too.
    ordered = np.sort(scores.ravel())
    size = len(ordered)
    alpha = (ordered[2 * size // 3] + ordered[2 * size // 3 + 1]) / 2
    beta = (ordered[size // 3] + ordered[size // 3 + 1]) / 2
    loss = functools.partial(loss, alpha=alpha, beta=beta)
  f = lambda s: loss(s, labels, where=where)  # noqa: E731
  check_grads(f, (scores,), order=1, modes=("rev",), eps=1e-6, atol=1e-6, rtol=1e-6)
  g = jax.grad(f)(scores)
  assert np.all(np.asarray(g)[~where] == 0)


def test_check_grads_calibration(x64):
  scores, labels, where = _grad_inputs(6, (0.0,))
  scores = scores + 0.6  # Around the thresholds, but off their kinks.
  assert np.all(np.abs(scores - 0.9) > 1e-4) and np.all(np.abs(scores - 0.6) > 1e-4)
  f = lambda s: sr.calibration_loss(s, labels, where=where)  # noqa: E731
  check_grads(f, (scores,), order=1, modes=("fwd", "rev"), eps=1e-6)


@pytest.mark.parametrize(
  ("name", "loss"),
  [
    ("smoothap_temperature", lambda s, y, p: sr.smoothap_loss(s, y, temperature=p)),
    ("supap_temperature", lambda s, y, p: sr.supap_loss(s, y, temperature=p)),
    ("rho", lambda s, y, p: sr.supap_loss(s, y, rho=p)),
    ("delta", lambda s, y, p: sr.supap_loss(s, y, delta=p)),
    ("calibration_weight", lambda s, y, p: sr.roadmap_loss(s, y, calibration_weight=p)),
  ],
  ids=["smoothap_temperature", "supap_temperature", "rho", "delta", "calibration_weight"],
)
def test_hyperparameter_gradients(name, loss, x64):
  scores, labels, _ = _grad_inputs(7, (0.0, 0.05, 0.07))
  value = {
    "smoothap_temperature": 0.05,
    "supap_temperature": 0.02,
    "rho": 50.0,
    "delta": 0.07,
    "calibration_weight": 0.3,
  }[name]
  f = lambda p: loss(scores, labels, p)  # noqa: E731
  check_grads(f, (value,), order=1, modes=("rev",), eps=1e-7, atol=1e-6, rtol=1e-6)
  if name == "smoothap_temperature":  # Under jit, a tracer the custom VJP carries.
    np.testing.assert_allclose(jax.jit(jax.grad(f))(value), jax.grad(f)(value), rtol=1e-12)


@pytest.mark.parametrize(("platform", "bound"), [("cpu", None), ("cpu", N), ("accelerator", N)])
def test_gradient_flows_through_a_closed_over_array(platform, bound, x64):
  scores, labels, _ = _grad_inputs(8, (0.0,))

  def f(scale, power):
    # Closes over a float (differentiated) and an integer (held fixed), both traced under jit.
    step = lambda t: jax.nn.sigmoid(t * scale) ** power  # noqa: E731
    return sr.smooth_rank_ap_loss(
      scores,
      labels,
      positive_step_fn=step,
      negative_step_fn=sr.heaviside_step,
      max_relevant=bound,
    )

  # Under jit, `scale` is a tracer that the closure conversion turns into a parameter of the
  # custom VJP (eagerly, each new closure would compile anew). The accelerators' form with a
  # bound calls the step at `[B, K, n]`, not at the chunk's shape it was converted at.
  with platforms.forced_platform(platform):
    jitted = jax.jit(f)
    check_grads(lambda s: jitted(s, 2), (20.0,), order=1, modes=("rev",), eps=1e-6)


@pytest.mark.parametrize("platform", platforms.PLATFORMS)
def test_hyperparameter_gradients_bounded(platform, x64):
  scores, labels, _ = _grad_inputs(7, (0.0, 0.05, 0.07))
  with platforms.forced_platform(platform):
    for loss, value in (
      (lambda p: sr.smoothap_loss(scores, labels, temperature=p, max_relevant=N), 0.05),
      (lambda p: sr.supap_loss(scores, labels, rho=p, max_relevant=N), 50.0),
    ):
      check_grads(loss, (value,), order=1, modes=("rev",), eps=1e-7, atol=1e-6, rtol=1e-6)


# 6. Invariances (the others, for every loss and metric, are in test_contract.py).


@pytest.mark.parametrize("case", CHUNKED, ids=ids(CHUNKED))
def test_chunk_size_changes_nothing(case, x64):
  scores, labels, where = random_lists(16, shape=(3, 11))
  labels[0] = 1  # A list with many relevant items: several steps of the loop.

  def value_and_grad(chunk):
    f = lambda s: run(case, s, labels, where=where, reduce_fn=None, chunk_size=chunk)  # noqa: E731
    return jax.jit(lambda s: (f(s), jax.grad(lambda x: f(x).sum())(s)))(scores)

  want, want_grad = value_and_grad(None)  # One step: 3 * 11 * 11 pairs fit in one chunk.
  for chunk in (1, 4) if case.name == "smoothap" else (4,):
    got, grad = value_and_grad(chunk)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-12, atol=1e-14)


# The bound on relevant items (a static trip count) and the accelerators' form (no gather, no
# scatter: compare-and-sum over the list), against the references and the default path.

BOUNDED = [c for c in CORE if c.name in ("smoothap", "supap", "roadmap")]


@pytest.mark.parametrize("platform", platforms.PLATFORMS)
@pytest.mark.parametrize("case", BOUNDED, ids=ids(BOUNDED))
@pytest.mark.parametrize("many", [True, False], ids=["many_relevant", "few_relevant"])
def test_bound_and_platform_match_reference(case, platform, many, x64):
  scores, labels, where = random_lists(16, shape=(3, 11))
  if many:  # A list with many relevant items: several steps of the loop.
    labels[0] = 1
  # With few, the accelerators' form takes every slot in one step (`max_relevant <= 8`).
  most = int(np.max(np.sum((labels >= 1) & where, axis=-1)))
  assert (most > 8) == many
  want = expected(case, scores, labels, where)

  def value_and_grad(**kwargs):
    f = lambda s: run(case, s, labels, where=where, reduce_fn=None, **kwargs)  # noqa: E731
    return jax.jit(lambda s: (f(s), jax.grad(lambda x: f(x).sum())(s)))(scores)

  _, want_grad = value_and_grad()  # The CPU's default path, checked by check_grads below.
  with platforms.forced_platform(platform):
    for kwargs in (
      {},
      {"chunk_size": 1},
      {"chunk_size": 4},
      {"max_relevant": most},
      {"max_relevant": most + 2, "chunk_size": 3},
      {"max_relevant": 100},
    ):
      got, grad = value_and_grad(**kwargs)
      np.testing.assert_allclose(got, want, **TOL64, err_msg=str(kwargs))
      np.testing.assert_allclose(grad, want_grad, rtol=1e-12, atol=1e-14, err_msg=str(kwargs))


@pytest.mark.parametrize("platform", platforms.PLATFORMS)
def test_bound_violated_gives_nan_for_those_lists_only(platform, x64):
  scores, labels, where = random_lists(17, shape=(4, 11), mask=False)
  labels[:] = 0
  labels[:, :2] = 1  # Two relevant items per list...
  labels[1, 2:5] = 1  # ...but five in list 1.
  with platforms.forced_platform(platform):
    for loss in (sr.smoothap_loss, sr.supap_loss, sr.roadmap_loss):
      f = lambda s, k, loss=loss: loss(s, labels, max_relevant=k, reduce_fn=None)  # noqa: E731
      per = np.asarray(f(scores, 2))
      assert np.isnan(per[1]) and np.isnan(np.mean(per))  # The mean says it loudly.
      np.testing.assert_allclose(np.delete(per, 1), np.delete(f(scores, None), 1), **TOL64)
      grad = np.asarray(jax.grad(lambda s: jnp.nansum(f(s, 2)))(scores))  # noqa: B023
      want = np.asarray(jax.grad(lambda s: jnp.sum(f(s, None)[np.arange(4) != 1]))(scores))  # noqa: B023
      np.testing.assert_allclose(grad, want, **TOL64)  # Zero for the list beyond the bound.
      np.testing.assert_array_equal(grad[1], 0.0)


@pytest.mark.parametrize("most", [1, 3, 6, 10])
def test_default_with_traced_labels_on_accelerators_takes_the_bound_the_lists_allow(most, x64):
  """Without `max_relevant` and with labels traced (a jitted step), the accelerators' form picks
  on the device the one-shot form of the smallest capacity holding every list (1, 2, 4) or,
  above, groups of 4 slots in a loop that counts each group again in the backward pass (6: two
  groups, 10: three): the CPU's general loop's values and gradients either way, for every loss
  of the family."""
  scores, labels, where = random_lists(18, shape=(3, 12), mask=False)
  labels[:] = 0
  labels[:, :1] = 1
  labels[0, :most] = 1
  for loss in (sr.smoothap_loss, sr.supap_loss, sr.roadmap_loss):

    def step(loss=loss):  # A fresh function for each platform: traces are cached per function.
      def value_and_grad(s, y):
        f = lambda s: loss(s, y, reduce_fn=None)  # noqa: E731
        return f(s), jax.grad(lambda x: f(x).sum())(s)

      return value_and_grad

    with platforms.forced_platform(platforms.CPU):
      assert "cond[" not in str(jax.make_jaxpr(step())(scores, labels))
      want, want_grad = jax.jit(step())(scores, labels)  # The general loop.
    with platforms.forced_platform(platforms.ACCELERATOR):
      assert "cond[" in str(jax.make_jaxpr(step())(scores, labels))  # Chosen at run time.
      got, grad = jax.jit(step())(scores, labels)
    np.testing.assert_allclose(got, want, **TOL64)
    np.testing.assert_allclose(grad, want_grad, **TOL64)


@pytest.mark.parametrize("most", [3, 10])
def test_default_with_traced_labels_on_accelerators_differentiates_the_hyperparameters(most, x64):
  """The run-time choice's cotangents of the steps' hyperparameters (a one-shot form at 3
  relevant items, the grouped loop at 10) are the CPU's general loop's."""
  scores, labels, _ = random_lists(19, shape=(3, 12), mask=False)
  labels[:] = 0
  labels[:, :2] = 1
  labels[1, :most] = 1
  for loss, value in ((sr.smoothap_loss, {"temperature": 0.05}), (sr.supap_loss, {"rho": 50.0})):

    def grads(loss=loss, value=value):
      f = lambda s, y, p: loss(s, y, **{k: p for k in value})  # noqa: E731
      return jax.jit(jax.grad(f, argnums=(0, 2)))(scores, labels, *value.values())

    with platforms.forced_platform(platforms.CPU):
      want = grads()
    with platforms.forced_platform(platforms.ACCELERATOR):
      got = grads()
    for g, w in zip(got, want):
      np.testing.assert_allclose(g, w, **TOL64)


@pytest.mark.parametrize("platform", [*platforms.PLATFORMS, platforms.GPU])
def test_roadmap_masks_its_lists_once_on_cpus_and_tpus(platform):
  """ROADMAP's calibration term counts the lists SupAP counts, from SupAP's mask of them (the
  lists with a relevant valid item): on CPUs and TPUs the program finds them once, where the
  calibration loss alone finds them itself (on a TPU v5e at B = 16,384, a second pass over `[B, B]`
  and the masked scores kept a second time); on GPUs it finds them again (there sharing them cost
  memory: `smooth_rank._calibrated_lists`). The values are the same either way (the other tests)."""
  scores, labels, where = random_lists(20, shape=(3, 9))

  def step(loss):
    return jax.value_and_grad(lambda s: loss(s, labels, where=where))

  def finds(loss):
    with platforms.forced_platform(platform):
      return str(jax.make_jaxpr(step(loss))(scores)).count("reduce_or")

  again = int(platform == platforms.GPU)
  assert finds(sr.calibration_loss) == 1
  assert finds(sr.roadmap_loss) == again
  assert finds(functools.partial(sr.roadmap_loss, max_relevant=4)) == again
  with platforms.forced_platform(platform):
    got = jax.jit(step(sr.roadmap_loss))(scores)
  with platforms.forced_platform(platforms.CPU):
    want = jax.jit(step(sr.roadmap_loss))(scores)
  chex.assert_trees_all_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("max_relevant", [None, 8])
def test_gpu_backward_that_computes_the_differences_again_equals_the_cpu(max_relevant, x64):
  """GPUs' form of the one-shot backward pass (the slots' differences computed again for the
  scores' cotangent, `platforms.by_platform`'s `gpu`): the CPU's values and cotangents, of the
  scores and of a hyperparameter, for the run-time choice (a list of 6 relevant items: the grouped
  loop) and an explicit bound (8 slots), with one step (SmoothAP) and two (SupAP)."""
  scores, labels, _ = random_lists(20, shape=(3, 12), mask=False)
  labels[:] = 0
  labels[:, :2] = 1
  labels[0, :6] = 1
  for loss, value in ((sr.smoothap_loss, {"temperature": 0.05}), (sr.supap_loss, {"rho": 50.0})):

    def grads(loss=loss, value=value):
      def f(s, y, p):
        return loss(s, y, max_relevant=max_relevant, **{k: p for k in value})

      return jax.jit(jax.value_and_grad(f, argnums=(0, 2)))(scores, labels, *value.values())

    with platforms.forced_platform(platforms.CPU):
      want = grads()
    with platforms.forced_platform(platforms.GPU):
      got = grads()
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
      np.testing.assert_allclose(g, w, **TOL64)


@pytest.mark.parametrize("platform", platforms.PLATFORMS)
def test_check_grads_bounded(platform, x64):
  scores, labels, where = _grad_inputs(5, (0.0, 0.05))
  loss = functools.partial(sr.supap_loss, labels=labels, where=where, max_relevant=N, chunk_size=2)
  with platforms.forced_platform(platform):
    check_grads(
      lambda s: loss(s), (scores,), order=1, modes=("rev",), eps=1e-6, atol=1e-6, rtol=1e-6
    )
    smooth = functools.partial(
      sr.smoothap_loss, labels=labels, where=where, temperature=0.05, max_relevant=N
    )
    check_grads(
      lambda s: smooth(s), (scores,), order=1, modes=("rev",), eps=1e-6, atol=1e-6, rtol=1e-6
    )


# 7. Degenerate lists.

DEGENERATE = {
  "no_relevant": ([0.3, 0.2, 0.2, 0.1], [0, 0, 0, 0], [True] * 4),
  "all_relevant": ([0.3, 0.2, 0.2, 0.1], [1, 1, 1, 1], [True] * 4),
  "all_tied": ([0.5, 0.5, 0.5, 0.5], [0, 1, 0, 2], [True] * 4),
  "all_tied_relevant": ([0.5, 0.5, 0.5, 0.5], [1, 1, 1, 1], [True] * 4),
  "all_masked": ([0.3, 0.2, 0.2, 0.1], [1, 0, 1, 0], [False] * 4),
  "one_valid_item": ([0.3, 0.2, 0.2, 0.1], [1, 0, 1, 0], [False, False, True, False]),
  "huge_gaps": ([1e6, -1e6, 3e5, -2e5], [1, 0, 0, 1], [True] * 4),
}


@pytest.mark.parametrize("case", CORE, ids=ids(CORE))
def test_degenerate_lists(case, x64):
  # Padded with masked items to the shared shape (masked padding changes nothing: test_contract.py).
  scores, labels, where = embedded(DEGENERATE.values())
  per = np.asarray(run(case, scores, labels, where=where, reduce_fn=None))
  assert np.all(np.isfinite(per)) and np.isfinite(run(case, scores, labels, where=where))
  np.testing.assert_allclose(per, expected(case, scores, labels, where), **TOL64)
  per = dict(zip(DEGENERATE, per.reshape(-1)))
  assert per["no_relevant"] == 0.0 and per["all_masked"] == 0.0
  if case.name in ("smoothap", "supap"):  # No negative: rank = rank+, AP = 1, whatever the steps.
    assert per["all_relevant"] == pytest.approx(0.0, abs=1e-12)
    assert per["all_tied_relevant"] == pytest.approx(0.0, abs=1e-12)
  if case in LOSSES:
    grad = np.asarray(jax.grad(lambda s: run(case, s, labels, where=where))(scores))
    assert np.all(np.isfinite(grad))
    np.testing.assert_array_equal(grad[~where], 0.0)


# 8. The decomposability gap.


def test_gap_single_batch_is_zero(x64):
  scores, labels, where = random_lists(22)
  np.testing.assert_array_equal(
    sr.decomposability_gap(scores, labels, where=where, num_batches=1, reduce_fn=None), 0.0
  )


def test_gap_sign(x64):
  # Batches ranked perfectly, but the second batch's positive falls below the first's negative.
  assert float(sr.decomposability_gap([0.9, 0.8, 0.7, 0.1], [1, 0, 1, 0], num_batches=2)) > 0
  # And a negative gap: batch APs 1/2 and 1, whole-list AP (1 + 1 + 3/4) / 3.
  gap = sr.decomposability_gap([0.9, 0.1, 0.95, 0.94], [0, 1, 1, 1], num_batches=2)
  assert float(gap) == pytest.approx(0.75 - (1 + 1 + 3 / 4) / 3)


# 9. Errors (the shared input checks are in test_contract.py).


def test_hyperparameter_errors():
  s, y = jnp.array([0.3, 0.2, 0.1]), jnp.array([1, 0, 1])
  bad = [
    (sr.smoothap_loss, {"temperature": 0.0}, "temperature"),
    (sr.smoothap_loss, {"temperature": -1.0}, "temperature"),
    (sr.smoothap_loss, {"temperature": float("nan")}, "temperature"),
    (sr.supap_loss, {"temperature": 0.0}, "temperature"),
    (sr.supap_loss, {"rho": -1.0}, "rho"),
    (sr.supap_loss, {"delta": -0.1}, "delta"),
    (sr.calibration_loss, {"alpha": 0.5, "beta": 0.6}, "alpha"),
    (sr.roadmap_loss, {"alpha": 0.5, "beta": 0.6}, "alpha"),
    (sr.roadmap_loss, {"calibration_weight": -0.1}, "calibration_weight"),
    (sr.roadmap_loss, {"calibration_weight": 1.5}, "calibration_weight"),
    (sr.roadmap_loss, {"temperature": -1.0}, "temperature"),
  ]
  for fn, kwargs, name in bad:
    with pytest.raises(ValueError, match=name):
      fn(s, y, **kwargs)
  with pytest.raises(ValueError, match="scalar"):
    sr.smoothap_loss(s, y, temperature=jnp.ones(3))
  with pytest.raises(TypeError, match="smoothap_loss: temperature must be a real number, got '0"):
    sr.smoothap_loss(s, y, temperature="0.01")
  for chunk, error in ((0, ValueError), (-1, ValueError), (1.5, TypeError)):
    with pytest.raises(error, match=rf"supap_loss: chunk_size must be a positive int, got {chunk}"):
      sr.supap_loss(s, y, chunk_size=chunk)
  with pytest.raises(ValueError, match="divide"):
    sr.decomposability_gap(s, y, num_batches=2)
  with pytest.raises(ValueError, match="decomposability_gap: num_batches must be a positive int"):
    sr.decomposability_gap(s, y, num_batches=0)
  with pytest.raises(TypeError, match="smooth_rank_ap_loss: positive_step_fn must be a function"):
    sr.smooth_rank_ap_loss(s, y, positive_step_fn=None, negative_step_fn=sr.heaviside_step)
  # Limits that are allowed: alpha == beta, calibration_weight at 0 and 1, rho = delta = 0 (and
  # Python lists).
  sr.calibration_loss(s, y, alpha=0.6, beta=0.6)
  sr.roadmap_loss(s, y, calibration_weight=0.0)
  sr.roadmap_loss([0.3, 0.2, 0.1], [1, 0, 1], calibration_weight=1, rho=0, delta=0)
  sr.smoothap_loss([0.3, 0.2, 0.1], [1, 0, 1])


def test_traced_hyperparameters_are_not_checked():
  s, y = jnp.array([0.3, 0.2, 0.1]), jnp.array([1, 0, 1])
  # Under jit the values are unknown: no error, the math runs as given.
  out = jax.jit(lambda t: sr.smoothap_loss(s, y, temperature=t))(-1.0)
  assert out.shape == ()
  out = jax.jit(lambda a: sr.calibration_loss(s, y, alpha=a, beta=0.6))(0.1)
  assert np.isfinite(out)


def test_steps_and_static_ints_use_the_shared_checks():
  s, y = jnp.array([0.3, 0.2, 0.1]), jnp.array([1, 0, 1])
  # The public step functions check their hyperparameters as the losses do.
  with pytest.raises(ValueError, match="sigmoid_step: temperature must be > 0, got 0.0"):
    sr.sigmoid_step(s, temperature=0.0)
  with pytest.raises(TypeError, match="sigmoid_step: temperature must be a real number, got True"):
    sr.sigmoid_step(s, temperature=True)
  with pytest.raises(ValueError, match="supap_negative_step: temperature must be > 0"):
    sr.supap_negative_step(s, temperature=-0.01)
  with pytest.raises(ValueError, match="supap_negative_step: rho must be >= 0"):
    sr.supap_negative_step(s, rho=-1.0)
  with pytest.raises(TypeError, match="smoothap_loss: temperature must be a real number, got True"):
    sr.smoothap_loss(s, y, temperature=True)
  # Static ints reject bools and floats with TypeError.
  with pytest.raises(TypeError, match="supap_loss: chunk_size must be a positive int, got True"):
    sr.supap_loss(s, y, chunk_size=True)
  with pytest.raises(ValueError, match="smoothap_loss: max_relevant must be a positive int"):
    sr.smoothap_loss(s, y, max_relevant=0)
  with pytest.raises(TypeError, match="decomposability_gap: num_batches must be a positive int"):
    sr.decomposability_gap(s, y, num_batches=1.0)
  # Step functions must be callables, and the message says which.
  with pytest.raises(TypeError, match="smooth_rank_ap_loss: negative_step_fn must be a function"):
    sr.smooth_rank_ap_loss(s, y, positive_step_fn=sr.heaviside_step, negative_step_fn=0.5)
  # A traced temperature is not checked (the caller's value).
  assert jax.jit(lambda t: sr.sigmoid_step(s, temperature=t))(-1.0).shape == (3,)


# 10. Memory: no [B, n, n] tensor, forward or backward.


@pytest.mark.parametrize("loss", [sr.smoothap_loss, sr.supap_loss], ids=["smoothap", "supap"])
def test_no_cubic_intermediate(loss):
  b = n = 96
  scores = jnp.zeros((b, n), jnp.float32)
  labels = (jnp.arange(n) % 16 == 0)[None].repeat(b, 0)
  f = jax.jit(jax.value_and_grad(lambda s: loss(s, labels, chunk_size=2)))
  analysis = f.lower(scores).compile().memory_analysis()
  assert analysis is not None  # XLA's CPU backend reports it (a skip could hide the check).
  cubic = b * n * n * 4
  # One chunk is b * 2 * n pairs; allow a few of them and the [b, n] arrays.
  assert analysis.temp_size_in_bytes < cubic / 8, analysis


# 11. pytorch-metric-learning.


def test_smoothap_matches_pytorch_metric_learning(x64):
  """`SmoothAPLoss` of pytorch-metric-learning equals `smoothap_loss` with `include_self=True`.

  Its `compute_loss` ranks each query among the whole batch, itself included as a positive, so the
  lists are `batch_retrieval(..., include_self=True)`. It requires the classes in equal,
  consecutive blocks, and it is only correct when the number of classes in the batch equals the
  number of samples per class: it reshapes the batch to `[samples per class, classes, D]` (the two
  sizes swapped) and treats consecutive blocks of `classes` items as the classes. The comparison
  uses 4 classes of 4 samples.
  """
  # torch and pytorch-metric-learning are in the dev extra: this comparison runs in CI, never skips.
  import torch  # pylint: disable=g-import-not-at-top
  from pytorch_metric_learning import losses as pml_losses  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(23)
  classes = per_class = 4
  labels = np.repeat(np.arange(classes), per_class)
  embeddings = rng.normal(size=(classes * per_class, 8))

  @jax.jit
  @jax.value_and_grad
  def f(x, temperature):
    scores, relevance, where = jaxrank.batch_retrieval(x, jnp.asarray(labels), include_self=True)
    return sr.smoothap_loss(scores, relevance, where=where, temperature=temperature)

  for temperature in (0.01, 0.1):
    e = torch.tensor(embeddings, dtype=torch.float64, requires_grad=True)
    want = pml_losses.SmoothAPLoss(temperature=temperature)(e, torch.tensor(labels))
    want.backward()
    value, grad = f(embeddings, temperature)
    # SmoothAPLoss stores each query's AP in a float32 tensor (`torch.zeros(batch_size)`), even
    # for float64 embeddings: agreement to float32 precision.
    np.testing.assert_allclose(float(value), want.item(), rtol=1e-6)
    np.testing.assert_allclose(grad, e.grad.numpy(), rtol=1e-5, atol=1e-7)
