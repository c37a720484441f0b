"""Tests of `blackbox_ranks` and the RaMBO losses against numpy references of the paper's eqs."""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrank
from jaxrank._src import blackbox
from jaxrank._src import blackbox_ranks
from jaxrank._src import host_kernels
from jaxrank._src import platforms
from jaxrank._src import ranking

# ---------------------------------------------------------------------------------------------
# numpy references, from Rolinek et al. 2020 (Algorithm 1, eq. 14-22).


def np_ranks(y):
  """Ranks of a 1-D list, 1 = highest, ties by position (a stable descending sort)."""
  order = sorted(range(len(y)), key=lambda i: (-y[i], i))
  ranks = np.empty(len(y))
  for position, i in enumerate(order):
    ranks[i] = position + 1
  return ranks


def np_blackbox_backward(y, g, interpolation):
  """Algorithm 1's backward: -(rk(y) - rk(y + interpolation g)) / interpolation."""
  return -(np_ranks(y) - np_ranks(y + interpolation * g)) / interpolation


def np_shift(y, relevant, margin):
  return np.where(relevant, y - margin / 2, y + margin / 2)  # eq. 14


def np_ap_loss_and_grad(y, labels, where, interpolation, margin, cotangent=1.0):
  """Value and gradient (w.r.t. y) of eq. 22 on one list, with the blackbox backward.

  The blackbox backward is not linear in the incoming cotangent (it moves scores by interpolation
  times it), so the cotangent the loss receives (1 / number of lists for a mean) is part of the
  reference.
  """
  y, labels, where = np.asarray(y, float), np.asarray(labels), np.asarray(where, bool)
  valid = np.flatnonzero(where)
  relevant = labels[valid] >= 1
  if not relevant.any():
    return 0.0, np.zeros(len(y)), False
  shifted = np_shift(y[valid], relevant, margin)
  rk = np_ranks(shifted)
  rk_pos = np.array(
    [sum(relevant[j] and rk[j] <= rk[i] for j in range(len(rk))) for i in range(len(rk))]
  )
  p = relevant.sum()
  loss = 1 - np.sum(np.where(relevant, rk_pos / rk, 0)) / p
  d_rk = cotangent * np.where(relevant, rk_pos / rk**2, 0) / p  # rk_pos is a constant.
  grad = np.zeros(len(y))
  grad[valid] = np_blackbox_backward(shifted, d_rk, interpolation * len(valid))
  return loss, grad, True


def np_recall_loss(y, labels, where, margin, weight_fn):
  y, labels, where = np.asarray(y, float), np.asarray(labels), np.asarray(where, bool)
  y, labels = y[where], labels[where]
  relevant = labels >= 1
  if not relevant.any():
    return 0.0, False
  rk = np_ranks(np_shift(y, relevant, margin))
  # r_i: non-relevant items ranked above relevant item i (eq. 17).
  outrun = [
    sum((not relevant[j]) and rk[j] < rk[i] for j in range(len(y)))
    for i in np.flatnonzero(relevant)
  ]
  return float(np.mean([weight_fn(r) for r in outrun])), True


def random_lists(seed, shape=(3, 9), ties=False):
  rng = np.random.default_rng(seed)
  scores = (rng.integers(0, 4, shape) if ties else rng.standard_normal(shape)).astype(np.float32)
  labels = (rng.random(shape) < 0.35).astype(np.int32)
  where = rng.random(shape) < 0.85
  return scores, labels, where


# ---------------------------------------------------------------------------------------------
# blackbox_ranks


@pytest.mark.parametrize("ties", [False, True])
def test_ranks_forward_and_both_sort_paths(ties, rank_branch):
  scores, _, _ = random_lists(0, (4, 11), ties)
  scores[0, :3] = [0.0, -0.0, 0.0]  # Signed zeros are one score.
  scores[1, [2, 5]] = [np.inf, -np.inf]
  want = np.stack([np_ranks(row) for row in scores])
  np.testing.assert_array_equal(jaxrank.blackbox_ranks(scores, 1.0), want)
  np.testing.assert_array_equal(jax.jit(lambda s: jaxrank.blackbox_ranks(s, 1.0))(scores), want)
  np.testing.assert_array_equal(jax.jit(ranking.xla_descending_ranks)(jnp.asarray(scores)), want)
  np.testing.assert_array_equal(host_kernels.numpy_descending_ranks(scores), want)
  np.testing.assert_array_equal(
    host_kernels.numpy_descending_ranks(scores.astype(np.float64)), want
  )


def nan_scores(dtype):
  """Lists with NaNs of both signs and several payloads among finite, infinite and tied scores,
  and the ranks documented for them: NaNs last, in the order of the list."""
  scores = np.array(
    [
      [0.3, np.nan, -np.inf, 0.0, -0.0, np.inf, -np.nan, 0.1],
      [np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan],
      [-np.nan, 0.5, 0.5, np.nan, -1.0, 0.5, np.nan, 2.0],
    ],
    dtype,
  )
  if dtype == np.float32:  # NaNs with other payloads (quiet, signalling bit patterns).
    bits = scores.view(np.uint32)
    bits[2, 3], bits[2, 6] = 0x7FC00123, 0xFF800001
  want = np.array(
    [
      [2, 7, 6, 4, 5, 1, 8, 3],
      [1, 2, 3, 4, 5, 6, 7, 8],
      [6, 2, 3, 7, 5, 4, 8, 1],
    ],
    dtype,
  )
  return scores, want


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_scores_rank_last_on_both_sort_paths(dtype):
  scores, want = nan_scores(dtype)
  assert np.isnan(scores[2]).sum() == 3
  np.testing.assert_array_equal(host_kernels.numpy_descending_ranks(scores), want)
  with jax.enable_x64(dtype == np.float64):
    np.testing.assert_array_equal(jax.jit(ranking.xla_descending_ranks)(scores), want)
  for branch in ranking.DESCENDING_RANKS_BRANCHES:
    with ranking.descending_ranks_branch(branch):
      np.testing.assert_array_equal(
        jaxrank.blackbox_ranks(scores.astype(np.float32), 1.0), want.astype(np.float32)
      )


def test_branch_is_chosen_at_trace_time_and_restored():
  x = jnp.ones((2, 3))

  def traced(fn):  # A new function each time: no trace cached by an earlier call.
    return str(jax.make_jaxpr(lambda s: fn(s))(x))

  def vjp_traced():
    return traced(lambda s: jax.vjp(lambda t: jaxrank.blackbox_ranks(t, 1.0), s)[1](s)[0])

  default = traced(ranking.descending_ranks)
  assert "platform_index" in default  # Chosen by platform.
  with ranking.descending_ranks_branch("xla"):
    forced, forced_vjp = traced(ranking.descending_ranks), vjp_traced()
    with ranking.descending_ranks_branch("numpy"):  # Nested: the innermost wins.
      inner, inner_vjp = traced(ranking.descending_ranks), vjp_traced()
    assert traced(ranking.descending_ranks) == forced
  for jaxpr in (forced, forced_vjp):
    assert "pure_callback" not in jaxpr and "sort" in jaxpr
  for jaxpr in (inner, inner_vjp):
    assert "pure_callback" in jaxpr and "sort" not in jaxpr
  assert forced_vjp.count("sort[") == inner_vjp.count("pure_callback[") == 2  # Forward, backward.
  assert traced(ranking.descending_ranks) == default
  assert "platform_index" in vjp_traced()
  with (
    pytest.raises(ValueError, match="descending_ranks_branch: branch must be one of"),
    ranking.descending_ranks_branch("gpu"),
  ):
    pass


@pytest.mark.parametrize("interpolation", [0.5, 3.0])
def test_ranks_backward_is_algorithm_1(interpolation, rank_branch):
  rng = np.random.default_rng(1)
  y = rng.standard_normal((2, 10)).astype(np.float32)
  g = rng.standard_normal((2, 10)).astype(np.float32)
  _, vjp = jax.vjp(lambda s: jaxrank.blackbox_ranks(s, interpolation), jnp.asarray(y))
  (got,) = vjp(jnp.asarray(g))
  want = np.stack([np_blackbox_backward(y[i], g[i], np.float32(interpolation)) for i in range(2)])
  np.testing.assert_allclose(got, want, rtol=1e-6)


def test_ranks_per_list_interpolation_jit_and_vmap(rank_branch):
  rng = np.random.default_rng(2)
  y = jnp.asarray(rng.standard_normal((3, 8)), jnp.float32)
  g = jnp.asarray(rng.standard_normal((3, 8)), jnp.float32)
  interpolation = jnp.array([0.5, 1.0, 4.0])

  def vjp_of(fn):
    return jax.vjp(fn, y)[1](g)[0]

  batched = vjp_of(lambda s: jaxrank.blackbox_ranks(s, interpolation))
  mapped = vjp_of(lambda s: jax.vmap(jaxrank.blackbox_ranks)(s, interpolation))
  jitted = vjp_of(jax.jit(lambda s: jaxrank.blackbox_ranks(s, interpolation)))
  np.testing.assert_allclose(batched, mapped)
  np.testing.assert_allclose(batched, jitted)
  for i in range(3):
    want = np_blackbox_backward(np.asarray(y[i]), np.asarray(g[i]), float(interpolation[i]))
    np.testing.assert_allclose(batched[i], want, rtol=1e-6)


def test_ranks_interpolation_gets_no_gradient_and_errors():
  y = jnp.array([0.3, 0.1, 0.2])
  grad = jax.grad(lambda interpolation: jnp.sum(jaxrank.blackbox_ranks(y, interpolation) * y))(1.0)
  assert float(grad) == 0.0
  with pytest.raises(ValueError, match="interpolation must be > 0"):
    jaxrank.blackbox_ranks(y, 0.0)
  with pytest.raises(TypeError, match="floating"):
    jaxrank.blackbox_ranks(jnp.array([1, 2, 3]), 1.0)
  with pytest.raises(ValueError, match="one value per list"):
    jaxrank.blackbox_ranks(jnp.ones((2, 3)), jnp.ones(3))


# ---------------------------------------------------------------------------------------------
# blackbox_ap_loss and blackbox_recall_loss (their invariances, degenerate lists and input
# checks: test_contract.py)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("interpolation, margin", [(0.2, 0.02), (4.0, 0.0)])
def test_ap_loss_value_and_gradient_equal_the_reference(ties, interpolation, margin, rank_branch):
  scores, labels, where = random_lists(3, (4, 9), ties)
  labels[0] = 0  # A list without positives is left out of the mean.
  value, grad = jax.value_and_grad(
    lambda s: jaxrank.blackbox_ap_loss(
      s, labels, where=where, interpolation=interpolation, margin=margin
    )
  )(jnp.asarray(scores))
  count = np.sum(np.any(where & (labels >= 1), axis=-1))
  results = [
    np_ap_loss_and_grad(scores[i], labels[i], where[i], interpolation, margin, cotangent=1 / count)
    for i in range(4)
  ]
  assert float(value) == pytest.approx(sum(loss for loss, _, d in results if d) / count, abs=1e-6)
  np.testing.assert_allclose(grad, np.stack([g for _, g, _ in results]), atol=1e-6)


def test_ap_loss_without_margin_is_the_exact_ap_loss(rank_branch):
  scores, labels, where = random_lists(4, (5, 12))
  got = jaxrank.blackbox_ap_loss(scores, labels, where=where, margin=0.0, reduce_fn=None)
  want = 1 - jaxrank.ap_metric(scores, labels, where=where, reduce_fn=None)
  has_positive = np.any(where & (labels >= 1), axis=-1)
  np.testing.assert_allclose(got, np.where(has_positive, want, 0), atol=1e-6)


@pytest.mark.parametrize(
  "weight_fn", [np.log1p, lambda r: np.log1p(np.log1p(r))], ids=["log", "log_log"]
)
def test_recall_loss_equals_the_reference(weight_fn, rank_branch):
  scores, labels, where = random_lists(5, (4, 10))
  got = jaxrank.blackbox_recall_loss(
    scores, labels, where=where, margin=0.05, weight_fn=weight_fn, reduce_fn=None
  )
  for i in range(4):
    want, _ = np_recall_loss(scores[i], labels[i], where[i], 0.05, weight_fn)
    assert float(got[i]) == pytest.approx(want, abs=1e-6)


def test_recall_loss_gradient_pushes_positives_up(rank_branch):
  scores = jnp.array([0.9, 0.5, 0.4, 0.1])
  labels = jnp.array([0, 1, 0, 1])
  grad = jax.grad(lambda s: jaxrank.blackbox_recall_loss(s, labels, interpolation=1.0))(scores)
  assert float(grad[1]) < 0 and float(grad[3]) < 0  # Descent raises the positives' scores.
  assert float(grad[0]) > 0  # and lowers the negative above them.


def test_map_over_classes_and_apc_are_compositions(rank_branch):
  rng = np.random.default_rng(6)
  logits = rng.standard_normal((7, 3)).astype(np.float32)
  targets = (rng.random((7, 3)) < 0.4).astype(np.int32)
  targets[0] = 1
  per_class = jaxrank.blackbox_ap_loss(logits.T, targets.T, margin=0.0, reduce_fn=None)
  for c in range(3):  # eq. 6: one list per class, over the batch.
    want, _, _ = np_ap_loss_and_grad(logits[:, c], targets[:, c], np.ones(7, bool), 1.0, 0.0)
    assert float(per_class[c]) == pytest.approx(want, abs=1e-6)
  apc = jaxrank.blackbox_ap_loss(logits.ravel(), targets.ravel(), margin=0.0)
  want, _, _ = np_ap_loss_and_grad(logits.ravel(), targets.ravel(), np.ones(21, bool), 1.0, 0.0)
  assert float(apc) == pytest.approx(want, abs=1e-6)  # eq. 23: one list of all pairs.


def np_recall_loss_grad(y, labels, interpolation, margin, dweight_fn):
  """The blackbox gradient of eq. 27 on one list without a mask (its rk^+ constants)."""
  y, relevant = np.asarray(y, float), np.asarray(labels) >= 1
  shifted = np_shift(y, relevant, margin)
  rk = np_ranks(shifted)
  outrun = np.array(
    [sum((not relevant[j]) and rk[j] < rk[i] for j in range(len(y))) for i in range(len(y))]
  )
  d_rk = np.where(relevant, dweight_fn(outrun), 0) / relevant.sum()
  return np_blackbox_backward(shifted, d_rk, interpolation * len(y))


LOSSES = [jaxrank.blackbox_ap_loss, jaxrank.blackbox_recall_loss]


@pytest.mark.parametrize("loss_fn", LOSSES, ids=["ap", "recall"])
def test_degenerate_lists_have_their_known_values(loss_fn, rank_branch):
  tied = jnp.full(4, 0.5)

  def value_and_grad(scores, labels, where=None, **kwargs):
    f = lambda s: loss_fn(s, jnp.array(labels), where=where, interpolation=1.0, **kwargs)
    return jax.value_and_grad(f)(scores)

  # Undefined lists (no positive, every item masked): 0 and a zero gradient. All positives: every
  # relevant item is above every other one, the loss is 0, and the perturbed order is unchanged.
  for labels, where in (
    ([0, 0, 0, 0], None),
    ([1, 0, 1, 0], jnp.zeros(4, bool)),
    ([1, 1, 1, 1], None),
  ):
    for scores in (tied, jnp.array([0.4, -0.2, 0.9, 0.1])):
      value, grad = value_and_grad(scores, labels, where)
      assert float(value) == 0.0
      np.testing.assert_array_equal(grad, np.zeros(4))
  # Tied scores, positives at 0 and 3: the margin puts both below both negatives, at ranks 3, 4.
  value, grad = value_and_grad(tied, [1, 0, 0, 1])
  if loss_fn is jaxrank.blackbox_ap_loss:
    assert float(value) == pytest.approx(7 / 12, abs=1e-7)  # 1 - (1/3 + 2/4) / 2.
    _, want, _ = np_ap_loss_and_grad(np.full(4, 0.5), [1, 0, 0, 1], [True] * 4, 1.0, 0.02)
  else:
    assert float(value) == pytest.approx(np.log(3), abs=1e-7)  # W(2) = ln 3 for both positives.
    want = np_recall_loss_grad(np.full(4, 0.5), [1, 0, 0, 1], 1.0, 0.02, lambda r: 1 / (1 + r))
  np.testing.assert_allclose(grad, want, atol=1e-6)
  assert np.abs(want).max() > 0.1  # The positives are pushed up.


def branch_inputs():
  """Lists of every kind the docstrings allow: random and tied scores, signed zeros, infinities,
  masked NaN and infinite padding, lists without positives or valid items."""
  scores, labels, where = random_lists(8, (6, 10), ties=True)
  scores[:3] = np.random.default_rng(9).standard_normal((3, 10))
  scores[0, :4] = [0.0, -0.0, 0.0, -0.0]
  scores[1, :2] = [np.inf, -np.inf]
  labels[1, :2] = [0, 1]
  where[1, :2] = True
  scores[2, :3], where[2, :3] = [np.nan, np.inf, -np.nan], False
  labels[3] = 0
  where[4] = False
  labels[:3, 5], where[:3, 5] = 1, True  # Lists 0 to 2 are defined.
  return scores.astype(np.float32), labels, where


@pytest.mark.parametrize("loss_fn", LOSSES, ids=["ap", "recall"])
@pytest.mark.parametrize("interpolation", [0.2, 4.0])
def test_both_sort_paths_give_the_same_values_and_gradients(loss_fn, interpolation):
  scores, labels, where = branch_inputs()
  results = []
  for branch in ranking.DESCENDING_RANKS_BRANCHES:
    with ranking.descending_ranks_branch(branch):
      for reduce_fn in (None, jnp.mean):
        # Labels passed traced: concrete labels would rank by counting (few relevant items).
        f = lambda s, y: jnp.sum(
          loss_fn(s, y, where=where, interpolation=interpolation, reduce_fn=reduce_fn)
        )
        results.append(jax.jit(jax.value_and_grad(f))(scores, labels))
      results.append(
        jax.jit(
          lambda s, y: loss_fn(s, y, where=where, interpolation=interpolation, reduce_fn=None)
        )(scores, labels)
      )
  half = len(results) // 2
  chex.assert_tree_all_finite(results)
  for numpy_result, xla_result in zip(results[:half], results[half:]):
    chex.assert_trees_all_equal(numpy_result, xla_result)
  assert np.abs(results[0][1]).max() > 0  # Not a trivial case.


@pytest.mark.parametrize("loss_fn", LOSSES, ids=["ap", "recall"])
def test_valid_nan_makes_the_list_nan_on_both_sort_paths(loss_fn, rank_branch):
  scores, labels, where = branch_inputs()
  clean = scores.copy()
  scores[0, 7], where[0, 7] = np.nan, True  # A valid NaN in a defined list.
  scores[3, 2], where[3, 2] = -np.nan, True  # In a list without positives: stays 0.
  scores[5, 1], where[5, 1] = np.nan, False  # Masked: ignored.
  nan_lists = np.zeros(6, bool)
  nan_lists[0] = True

  def value_and_grad(s, reduce_fn):
    f = lambda s: jnp.sum(loss_fn(s, labels, where=where, interpolation=4.0, reduce_fn=reduce_fn))
    return jax.value_and_grad(f)(s)

  per = np.asarray(loss_fn(scores, labels, where=where, interpolation=4.0, reduce_fn=None))
  np.testing.assert_array_equal(np.isnan(per), nan_lists)
  assert per[3] == 0.0
  for reduce_fn in (None, jnp.sum, jnp.mean):
    value, grad = value_and_grad(scores, reduce_fn)
    assert np.isnan(float(value))
    # The NaN list gets a zero gradient; the others keep the gradients of the clean scores.
    np.testing.assert_array_equal(grad[0], np.zeros(10))
    clean_value, clean_grad = value_and_grad(clean, reduce_fn)
    if reduce_fn is not jnp.mean:  # The mean's cotangent depends on the count, not on the NaN.
      np.testing.assert_array_equal(grad[1:], clean_grad[1:])
  clean_per = loss_fn(clean, labels, where=where, interpolation=4.0, reduce_fn=None)
  np.testing.assert_array_equal(per[1:], np.asarray(clean_per)[1:])


def test_loss_errors():
  s, y = jnp.ones(3), jnp.array([1, 0, 1])
  with pytest.raises(ValueError, match="interpolation must be > 0"):
    jaxrank.blackbox_ap_loss(s, y, interpolation=-1.0)
  with pytest.raises(ValueError, match="margin must be >= 0"):
    jaxrank.blackbox_recall_loss(s, y, margin=-0.1)
  with pytest.raises(TypeError, match="floating"):
    jaxrank.blackbox_ap_loss(jnp.array([1, 2, 3]), y)


def test_hyperparameters_use_the_shared_checks():
  s, y = jnp.array([0.3, 0.2, 0.1]), jnp.array([1, 0, 1])
  # interpolation and margin are real numbers (a bool is not), checked whenever they are known.
  with pytest.raises(
    TypeError, match="blackbox_ap_loss: interpolation must be a real number, got True"
  ):
    jaxrank.blackbox_ap_loss(s, y, interpolation=True)
  with pytest.raises(TypeError, match="blackbox_recall_loss: margin must be a real number"):
    jaxrank.blackbox_recall_loss(s, y, margin=False)
  with pytest.raises(TypeError, match="blackbox_ranks: interpolation must be a real number"):
    jaxrank.blackbox_ranks(s, "1.0")
  with pytest.raises(ValueError, match="blackbox_ap_loss: interpolation must be > 0, got 0.0"):
    jaxrank.blackbox_ap_loss(s, y, interpolation=jnp.array(0.0))  # A known array is checked too.
  with pytest.raises(
    ValueError, match=r"interpolation must be > 0, got -2.0 in an array of shape \(2,\)"
  ):
    jaxrank.blackbox_ap_loss(
      jnp.ones((2, 3)), jnp.ones((2, 3)), interpolation=jnp.array([1.0, -2.0])
    )
  with pytest.raises(ValueError, match="blackbox_ap_loss: margin must be >= 0, got nan"):
    jaxrank.blackbox_ap_loss(s, y, margin=float("nan"))
  # A traced value is the caller's: not checked.
  out = jax.jit(lambda v: jaxrank.blackbox_ap_loss(s, y, interpolation=v))(-1.0)
  assert out.shape == ()
  # Per-list interpolation keeps working.
  assert (
    jaxrank.blackbox_ap_loss(jnp.ones((2, 3)), jnp.ones((2, 3)), interpolation=np.array([0.5, 2]))
    == 0
  )
  with pytest.raises(ValueError, match=r"blackbox_ranks: scores must have at least one axis"):
    jaxrank.blackbox_ranks(jnp.array(0.5), 1.0)
  with pytest.raises(TypeError, match="blackbox_recall_loss: weight_fn must be a function"):
    jaxrank.blackbox_recall_loss(s, y, weight_fn="log")


# ---------------------------------------------------------------------------------------------
# The counting path (max_relevant=K): the same ranks and gradients as the sort path, no sort.


def awkward_scores(rng, shape, ties):
  """Random or tied scores with NaNs, infinities and signed zeros sprinkled in."""
  scores = (
    rng.integers(0, 3, shape).astype(np.float32)
    if ties
    else rng.standard_normal(shape).astype(np.float32)
  )
  for value, share in (
    (np.nan, 0.08),
    (-np.nan, 0.04),
    (-np.inf, 0.08),
    (np.inf, 0.05),
    (-0.0, 0.08),
  ):
    scores[rng.random(shape) < share] = value
  return scores


@pytest.mark.parametrize("ties", [False, True])
def test_blackbox_ranks_at_equals_the_gathered_blackbox_ranks(ties, rank_branch):
  rng = np.random.default_rng(10 + ties)
  for _ in range(10):
    n = int(rng.integers(2, 12))
    k = int(rng.integers(1, n + 1))
    scores = awkward_scores(rng, (3, n), ties)
    indices = np.stack([rng.permutation(n)[:k] for _ in range(3)]).astype(np.int32)
    valid = rng.random((3, k)) < 0.8
    interpolation = (rng.random(3) * 5 + 0.1).astype(np.float32)
    g = np.where(valid, rng.standard_normal((3, k)), 0).astype(np.float32)
    sort, sort_vjp = jax.vjp(
      lambda s: jnp.take_along_axis(jaxrank.blackbox_ranks(s, interpolation), indices, -1), scores
    )
    count, count_vjp = jax.vjp(
      jax.jit(lambda s: blackbox_ranks.blackbox_ranks_at(s, indices, valid, interpolation)), scores
    )
    np.testing.assert_array_equal(np.where(valid, count, 0), np.where(valid, sort, 0))
    np.testing.assert_array_equal(count_vjp(g)[0], sort_vjp(g)[0])


@pytest.mark.parametrize("platform", platforms.PLATFORMS)
def test_counting_needs_no_sort_and_no_callback(platform):
  s, idx = jnp.ones((2, 5)), jnp.zeros((2, 2), jnp.int32)
  valid, interpolation = jnp.ones((2, 2), bool), jnp.ones(2)
  labels = jnp.array([[1, 0, 1, 0, 0], [0, 1, 0, 0, 0]])

  def program(fn, *args):
    return str(jax.make_jaxpr(jax.grad(fn))(s, *args))

  with platforms.forced_platform(platform):
    jaxpr = program(
      lambda s: jnp.sum(blackbox_ranks.blackbox_ranks_at(s, idx, valid, interpolation))
    )
    counting = [jaxpr]
    # The bound is a promise: counting alone, no check with a fallback (no cond), traced labels
    # or concrete, within the bound or beyond it (then NaN).
    counting.append(program(lambda s, y: jaxrank.blackbox_ap_loss(s, y, max_relevant=2), labels))
    for k in (None, 1, 2, 5):
      counting.append(program(lambda s: jaxrank.blackbox_recall_loss(s, labels, max_relevant=k)))
    # Traced labels and no bound: the sort (on accelerators beside counting, chosen at run time).
    sort = program(lambda s, y: jaxrank.blackbox_ap_loss(s, y), labels)
  assert "sort[" in sort or "callback" in sort
  assert ("cond[" in sort) == (platform == platforms.ACCELERATOR)
  for jaxpr in counting:
    assert "cond[" not in jaxpr and "sort[" not in jaxpr and "callback" not in jaxpr
    if platform == platforms.ACCELERATOR:
      assert "top_k" not in jaxpr and "gather" not in jaxpr and "scatter" not in jaxpr


@pytest.mark.parametrize("loss_fn", LOSSES, ids=["ap", "recall"])
def test_default_with_traced_labels_on_accelerators_counts_when_the_lists_allow(
  loss_fn, monkeypatch
):
  """Without `max_relevant` and with labels traced (a jitted step), the accelerators' form counts
  with the smallest bound of 1, 2, 4, 8 that holds every list, or sorts above (chosen on the
  device), in blocks of lists (here of 2 lists: 3 lists make a block and a remainder): the CPU's
  sort's values and gradients either way. One compiled program per platform serves every count
  (the labels are its argument)."""
  monkeypatch.setattr(blackbox_ranks, "_SORT_BLOCK", 2 * 24)
  batches = []
  for most in (1, 3, 6, 12, 20):  # Counting with 1, 4, 8 slots, then the sort.
    rng = np.random.default_rng(most)
    labels = np.zeros((3, 24), np.int32)
    labels[:, 0] = 1
    labels[0, :most] = 1
    batches.append((rng.standard_normal((3, 24)).astype(np.float32), rng.permuted(labels, axis=1)))

  def run(platform):  # A fresh function for each platform, traced inside its block.
    step = jax.value_and_grad(lambda s, y: jnp.sum(loss_fn(s, y, reduce_fn=None)))
    with platforms.forced_platform(platform):
      jaxpr = str(jax.make_jaxpr(step)(*batches[0]))
      return jaxpr, [jax.jit(step)(*batch) for batch in batches]

  cpu_jaxpr, want = run(platforms.CPU)
  for platform in (platforms.ACCELERATOR, platforms.GPU):  # GPUs: one-pass sums (`_slot_sums`).
    accelerator_jaxpr, got = run(platform)
    assert "cond[" in accelerator_jaxpr and "cond[" not in cpu_jaxpr
    assert "scan[" in accelerator_jaxpr  # The sort's blocks.
    for most, g, w in zip((1, 3, 6, 12, 20), got, want, strict=True):
      np.testing.assert_allclose(g[0], w[0], rtol=2e-7, atol=1e-7, err_msg=f"{platform} {most}")
      np.testing.assert_allclose(g[1], w[1], rtol=1e-6, atol=1e-7, err_msg=f"{platform} {most}")


def counting_cases():
  """Lists of every kind (`branch_inputs`), a valid NaN in one, and lists with more relevant
  items than the smaller bounds below (so those give NaN)."""
  scores, labels, where = branch_inputs()
  nan = scores.copy()
  nan[0, 7], where_nan = np.nan, where.copy()
  where_nan[0, 7] = True
  return [(scores, labels, where), (nan, labels, where_nan)]


def assert_same_path(got, want):
  """`(value, grad)` of the counting path equals the sort path's: the gradient bit for bit, the
  value up to the rounding of its last sums (the paths' programs differ, and XLA may add a list's
  precisions in another order: 1 ulp seen at bounds above the lists' counts)."""
  np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=2e-7, atol=1e-7)
  chex.assert_trees_all_equal(got[1], want[1])


# (interpolation, margin): Table 9's CUB values, a large interpolation without margin, a large
# margin. They are arguments of the jitted steps (traced), so that one compilation serves all three.
COUNTING_HYPERPARAMETERS = [(0.2, 0.02), (4.0, 0.0), (1.0, 0.3)]


@pytest.mark.parametrize("loss_fn", LOSSES, ids=["ap", "recall"])
def test_counting_path_equals_the_sort_path(loss_fn, rank_branch):
  def f(s, y, w, k, interpolation, margin, reduce_fn):
    loss = loss_fn(
      s,
      y,
      where=w,
      interpolation=interpolation,
      margin=margin,
      reduce_fn=reduce_fn,
      max_relevant=k,
    )
    return jnp.sum(loss)

  # Labels traced: the bound `k` as given (`None`: the sort). One compilation for every case and
  # hyperparameter (the cases share a shape; the hyperparameters are traced arguments).
  traced = jax.jit(jax.value_and_grad(f), static_argnames=("k", "reduce_fn"))
  moved = {interpolation: 0.0 for interpolation, _ in COUNTING_HYPERPARAMETERS}
  for case, (scores, labels, where) in enumerate(counting_cases()):
    most = int(np.max(np.sum(where & (labels >= 1), axis=-1)))
    for reduce_fn in (None, jnp.mean):
      # Labels concrete (captured): the bound read from them when not given.
      concrete = jax.jit(
        jax.value_and_grad(
          lambda s, k, i, m, y=labels, w=where, r=reduce_fn: f(s, y, w, k, i, m, r)
        ),
        static_argnums=1,
      )
      for h, hyperparameters in enumerate(COUNTING_HYPERPARAMETERS):
        interpolation, margin = map(np.float32, hyperparameters)
        args = (interpolation, margin, reduce_fn)
        want = traced(scores, labels, where, None, *args)  # The sort.
        for k in (most, most + 3, 100):
          assert_same_path(traced(scores, labels, where, k, *args), want)
        for k in (None, most):
          assert_same_path(concrete(scores, k, interpolation, margin), want)
          if case == h == 0:  # Eager, concrete labels: once (it traces anew on every call).
            eager = jax.value_and_grad(f)(scores, labels, where, k, *args)
            assert_same_path(eager, want)
        moved[hyperparameters[0]] = max(moved[hyperparameters[0]], float(np.abs(want[1]).max()))
  # Not trivial cases (interpolation = 0.2 rarely moves these short lists).
  assert all(moved[interpolation] > 0 for interpolation in moved if interpolation >= 1), moved


@pytest.mark.parametrize("loss_fn", LOSSES, ids=["ap", "recall"])
def test_counting_path_on_random_tied_lists_and_under_vmap(loss_fn):
  def f(s, y, w, k):
    return loss_fn(s, y, where=w, interpolation=2.0, reduce_fn=jnp.sum, max_relevant=k)

  def per_list(s, y, w, k):
    return loss_fn(s, y, where=w, interpolation=2.0, max_relevant=k)

  step = jax.value_and_grad(f)  # Eager: concrete labels, the bound read from them or given.
  sort_step = jax.jit(functools.partial(step, k=None))  # Traced labels: the sort.
  # Under vmap the labels are traced: the bound as given, or the sort.
  mapped_step = jax.jit(
    lambda s, y, w, k: jax.vmap(jax.value_and_grad(functools.partial(per_list, k=k)))(s, y, w),
    static_argnums=3,
  )
  rng = np.random.default_rng(12)
  shape = (4, 14)  # One shape, so that the steps compile once (mapped_step once per bound).
  for trial in range(6):
    scores = awkward_scores(rng, shape, ties=trial % 2 == 0)
    scores[:2] = np.where(np.isnan(scores[:2]), 0.5, scores[:2])  # Two lists without NaN.
    labels = (rng.random(shape) < 0.4).astype(np.int32)
    # Lists of 3 to 14 items: the rest is padding.
    where = (rng.random(shape) < 0.85) & (np.arange(14) < rng.integers(3, 15))
    k = int(np.max(np.sum(where & (labels >= 1), axis=-1))) or 1
    want = sort_step(scores, labels, where)
    assert_same_path(step(scores, labels, where, k), want)
    assert_same_path(step(scores, labels, where, None), want)
    single = mapped_step(scores, labels, where, None)
    assert_same_path(mapped_step(scores, labels, where, k), single)


@pytest.mark.parametrize("loss_fn", LOSSES, ids=["ap", "recall"])
def test_counting_path_on_batches_with_a_memory_gallery(loss_fn, rank_branch):
  rng = np.random.default_rng(13)
  embeddings = rng.standard_normal((12, 6)).astype(np.float32)
  labels = np.repeat(np.arange(4), 3).astype(np.int32)
  gallery = rng.standard_normal((8, 6)).astype(np.float32)
  gallery_labels = rng.integers(0, 4, 8).astype(np.int32)
  gallery_where = rng.random(8) < 0.75
  gallery[1] = embeddings[0]  # A tie with a batch item.

  def loss(e, g, k):
    scores, relevance, where = jaxrank.batch_retrieval(
      e, labels, gallery_embeddings=g, gallery_labels=gallery_labels, gallery_where=gallery_where
    )
    return loss_fn(scores, relevance, where=where, interpolation=1.0, max_relevant=k)

  # At most 2 in the batch and the class's valid gallery items.
  most = 2 + int(np.max(np.bincount(gallery_labels[gallery_where], minlength=4)))
  step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)), static_argnums=2)
  want = step(embeddings, gallery, None)
  for k in (most, 3 * most):
    # The same ranks; the programs around them differ, so XLA may sum in another order (an ulp).
    chex.assert_trees_all_close(step(embeddings, gallery, k), want, rtol=1e-6, atol=1e-7)
  assert np.abs(want[1][0]).max() > 0


def test_max_relevant_is_checked():
  s, y = jnp.array([0.3, 0.2, 0.1]), jnp.array([1, 0, 1])
  with pytest.raises(TypeError, match="blackbox_ap_loss: max_relevant must be a positive int"):
    jaxrank.blackbox_ap_loss(s, y, max_relevant=2.0)
  with pytest.raises(ValueError, match="blackbox_recall_loss: max_relevant must be a positive"):
    jaxrank.blackbox_recall_loss(s, y, max_relevant=0)


@pytest.mark.parametrize("max_relevant", [None, 2])
@pytest.mark.parametrize("loss", [jaxrank.blackbox_ap_loss, jaxrank.blackbox_recall_loss])
def test_masked_items_rank_below_a_valid_minus_infinity(rank_branch, loss, max_relevant):
  """Padding changes nothing, even before a valid -inf score: masked items rank after it."""
  del rank_branch
  scores = jnp.array([[0.5, 0.9, 0.2, -jnp.inf, 0.1]])
  labels = jnp.array([[1, 0, 0, 1, 0]])
  where = jnp.array([[True, True, False, True, True]])
  keep = np.flatnonzero(np.asarray(where[0]))
  f = lambda s, y, w: loss(  # noqa: E731
    s, y, where=w, interpolation=0.5, max_relevant=max_relevant
  )
  padded, grad = jax.jit(jax.value_and_grad(f))(scores, labels, where)
  want, want_grad = jax.jit(jax.value_and_grad(f))(scores[:, keep], labels[:, keep], where[:, keep])
  np.testing.assert_array_equal(padded, want)
  finite = np.isfinite(np.asarray(scores[:, keep]))
  np.testing.assert_array_equal(np.asarray(grad)[:, keep][finite], np.asarray(want_grad)[finite])
  assert np.asarray(grad)[0, 2] == 0


@pytest.mark.parametrize("loss_fn", LOSSES, ids=["ap", "recall"])
def test_a_list_beyond_max_relevant_is_nan_with_a_zero_gradient(loss_fn, rank_branch):
  """`max_relevant=K` is a promise: a list with more than `K` relevant valid items gives NaN and
  a zero gradient (traced labels or concrete, jit, vmap); the other lists keep their values and
  gradients."""
  del rank_branch
  for scores, labels, where in counting_cases():
    counts = np.sum(where & (labels >= 1), axis=-1)
    most = int(np.max(counts))
    k = most - 1
    beyond = counts > k
    assert beyond.any() and not beyond.all()
    for reduce_fn in (None, jnp.mean):

      def f(s, y, k):
        return jnp.sum(
          loss_fn(s, y, where=where, interpolation=4.0, reduce_fn=reduce_fn, max_relevant=k)
        )

      want_value, want_grad = jax.jit(jax.value_and_grad(f), static_argnums=2)(scores, labels, None)
      for value, grad in (
        jax.jit(jax.value_and_grad(f), static_argnums=2)(scores, labels, k),
        jax.value_and_grad(f)(scores, labels, k),
      ):  # Traced, concrete labels.
        assert np.isnan(float(value))
        np.testing.assert_array_equal(grad[beyond], 0)
        np.testing.assert_array_equal(grad[~beyond], want_grad[~beyond])
    per_list = lambda s, y, w, k: loss_fn(  # noqa: E731
      s, y, where=w, interpolation=4.0, max_relevant=k, reduce_fn=None
    )
    got = jax.jit(per_list, static_argnums=3)(scores, labels, where, k)
    want = jax.jit(per_list, static_argnums=3)(scores, labels, where, None)
    np.testing.assert_array_equal(np.isnan(got), beyond | np.isnan(want))
    # The same ranks; XLA may order the AP sum over the list differently in another program.
    np.testing.assert_allclose(got[~beyond], want[~beyond], rtol=1e-6)
    mapped = jax.vmap(lambda s, y, w: per_list(s, y, w, k))(scores, labels, where)
    np.testing.assert_allclose(mapped, got, rtol=1e-6)


@pytest.mark.parametrize("loss_fn", LOSSES, ids=["ap", "recall"])
def test_the_bound_is_read_from_concrete_labels_alike_under_jit_and_vmap(loss_fn, rank_branch):
  """Concrete labels count (the bound read on the host), traced ones sort unless given a bound;
  every way gives the same values and gradients."""
  del rank_branch
  rng = np.random.default_rng(14)
  scores = awkward_scores(rng, (5, 11), ties=True)
  scores[:3] = np.where(np.isnan(scores[:3]), 0.25, scores[:3])
  labels = (rng.random((5, 11)) < 0.3).astype(np.int32)
  labels[0] = 1  # One list of 11 relevant items: counted when concrete (COUNT_UP_TO = 16).
  where = rng.random((5, 11)) < 0.9
  assert blackbox.concrete_relevant_count(labels, where, scores.shape) == int(
    np.max(np.sum(where & (labels >= 1), -1))
  )
  assert blackbox.concrete_relevant_count(jnp.asarray(labels), None, scores.shape) == 11

  def f(s, y, w):
    return loss_fn(s, y, where=w, interpolation=1.5, reduce_fn=jnp.sum)

  want = jax.jit(jax.value_and_grad(f))(scores, labels, where)  # Traced labels: the sort.
  chex.assert_trees_all_equal(jax.value_and_grad(f)(scores, labels, where), want)
  chex.assert_trees_all_equal(
    jax.jit(jax.value_and_grad(lambda s: f(s, labels, where)))(scores), want
  )
  per_list = lambda s, y, w: loss_fn(s, y, where=w, interpolation=1.5)  # noqa: E731
  mapped = jax.vmap(jax.value_and_grad(per_list))(scores, labels, where)  # Traced: the sort.
  closed = jax.vmap(jax.value_and_grad(lambda s: per_list(s, labels[0], where[0])))(scores)
  single = jax.value_and_grad(per_list)(scores[0], labels[0], where[0])  # Concrete: counting.
  chex.assert_trees_all_equal(jax.tree.map(lambda x: x[0], mapped), single)
  chex.assert_trees_all_equal(jax.tree.map(lambda x: x[0], closed), single)
  # Beyond COUNT_UP_TO the concrete bound is not used: the sort, whatever the labels.
  many = np.ones((2, blackbox.COUNT_UP_TO + 1), np.int32)
  jaxpr = str(jax.make_jaxpr(lambda s: loss_fn(s, many))(np.zeros(many.shape, np.float32)))
  assert "sort[" in jaxpr or "callback" in jaxpr


@pytest.mark.parametrize("loss_fn", LOSSES, ids=["ap", "recall"])
def test_float64_scores_under_thread_local_x64_where_the_callback_runs_without_it(loss_fn):
  """`jax.enable_x64(True)` holds on the thread that enters it; XLA may run the CPU sort's host
  callback on one of its own threads, where it does not (several sorts in one program). There
  JAX rounded the float64 scores to float32 and refused the float64 ranks. The program compiled
  inside the block and run outside it (what such a thread sees) gives what it gives inside, the
  ranks of the float64 scores (two scores tied in float32 are ordered), and XLA's sort's result."""
  rng = np.random.default_rng(21)
  labels = (rng.random((3, 40)) < 0.5).astype(np.int32)  # Traced, many relevant: the sort.
  labels[:, :2] = [0, 1]
  f = lambda s, y: loss_fn(s, y, interpolation=1.5, margin=0.0, reduce_fn=jnp.sum)  # noqa: E731
  with jax.enable_x64(True):
    scores = jnp.asarray(rng.normal(size=(3, 40)))
    scores = scores.at[:, 1].set(scores[:, 0] + 1e-12)  # Above item 0 only in float64.
    assert np.all(np.float32(scores[:, 1]) == np.float32(scores[:, 0]))
    labels = jnp.asarray(labels)
    compiled = jax.jit(jax.value_and_grad(f)).lower(scores, labels).compile()
    inside = compiled(scores, labels)
    with ranking.descending_ranks_branch("xla"):
      xla = jax.jit(jax.value_and_grad(f))(scores, labels)
    rounded = jax.jit(jax.value_and_grad(f))(scores.astype(jnp.float32).astype(jnp.float64), labels)
  with jax.enable_x64(False):
    outside = compiled(scores, labels)
  assert inside[0].dtype == outside[0].dtype == jnp.float64
  chex.assert_trees_all_equal(outside, inside)
  chex.assert_trees_all_close(inside, xla, rtol=1e-12)
  assert float(inside[0]) != float(rounded[0])  # The float64 order reached the ranks.


def custom_vjp_outputs(jaxpr) -> list:
  """The output shapes of every custom VJP call in `jaxpr` and the jaxprs inside it, with the
  backward rule of each."""
  found = []
  for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
    if "bwd" in eqn.params:
      backward = getattr(eqn.params["bwd"], "f", eqn.params["bwd"])
      found.append((backward, [v.aval.shape for v in eqn.outvars]))
    for param in eqn.params.values():
      for value in param if isinstance(param, (tuple, list)) else (param,):
        if hasattr(value, "eqns") or hasattr(getattr(value, "jaxpr", None), "eqns"):
          found += custom_vjp_outputs(value)
  return found


@pytest.mark.parametrize("max_relevant", [None, 3], ids=["chosen", "bound"])
@pytest.mark.parametrize("loss_fn", LOSSES, ids=["ap", "recall"])
def test_accelerators_differentiate_the_per_list_values(loss_fn, max_relevant):
  """On GPU and TPU the blackbox losses' custom VJP wraps the per-list values, `[lists]`: no
  `[lists, n]` ranks are kept between the passes, with a bound or without (the run-time choice
  inside it). `uses_blackbox_rank` finds it (the blocked loss must not scale its gradient); the
  CPU keeps its custom VJP around the ranks."""
  scores, labels = jnp.ones((3, 8)), jnp.zeros((3, 8), jnp.int32)

  def program(platform):
    with platforms.forced_platform(platform):
      loss = lambda s, y: loss_fn(s, y, max_relevant=max_relevant)  # noqa: E731
      return jax.make_jaxpr(loss)(scores, labels)

  accelerator = program(platforms.ACCELERATOR)
  assert custom_vjp_outputs(accelerator) == [(blackbox_ranks._list_values_bwd, [(3,)])]
  assert blackbox_ranks.uses_blackbox_rank(accelerator)
  cpu = custom_vjp_outputs(program(platforms.CPU))
  assert cpu == [(blackbox_ranks._blackbox_relevant_ranks_bwd, [(3, 8), (3, 8)])]


def test_the_accelerators_branches_are_traced_once_per_body_and_forced_platform():
  """The accelerators' run-time choice reuses its branches' traces for the same body (a new
  function object would be traced again, twice per differentiation), but never across forced
  platforms: the GPU's forms traced first do not stand in for the TPU's."""
  counts = (1, 2, None)
  branches = blackbox_ranks._branches(blackbox_ranks._values_on, blackbox._ap_values, counts, 2)
  assert branches is blackbox_ranks._branches(
    blackbox_ranks._values_on, blackbox._ap_values, counts, 2
  )
  with platforms.forced_platform(platforms.GPU):
    gpu = blackbox_ranks._branches(blackbox_ranks._values_on, blackbox._ap_values, counts, 2)
  assert gpu is not branches and len(gpu) == 3
  weight = lambda x: x  # noqa: E731
  assert blackbox._recall_values(weight) is blackbox._recall_values(weight)

  class Unhashable:
    __eq__ = object.__eq__
    __hash__ = None  # type: ignore[assignment]

    def __call__(self, x):
      return x

  assert len(blackbox_ranks._branches(blackbox_ranks._gradient_on, Unhashable(), counts)) == 3
  assert blackbox._recall_values(Unhashable()) is not None

  scores, labels = jnp.zeros((2, 6)), jnp.asarray(np.eye(2, 6, dtype=np.int32))

  def program(platform):
    with platforms.forced_platform(platform):
      f = lambda s, y: jaxrank.blackbox_ap_loss(s, y)  # noqa: E731
      return str(jax.make_jaxpr(jax.value_and_grad(f))(scores, labels))

  assert program(platforms.GPU) != program(platforms.ACCELERATOR)
  assert program(platforms.GPU) == program(platforms.GPU)


@pytest.mark.parametrize("platform", [*platforms.PLATFORMS, platforms.GPU])
def test_a_weight_fn_of_a_traced_parameter_gets_its_gradient(platform):
  """A recall weight `W` that reads a parameter being differentiated (a learned scale) stays
  outside the accelerators' custom VJP of the per-list values, which could not give the parameter
  a gradient: the parameter's and the scores' gradients equal the CPU's. One that reads nothing
  traced goes inside it (`test_accelerators_differentiate_the_per_list_values`)."""
  scores, labels, where = random_lists(23, (4, 12), ties=True)

  def loss(s, y, scale, k):  # The labels traced: without a bound, the run-time choice.
    weight_fn = lambda r: scale * jnp.log1p(r)  # noqa: E731
    return jaxrank.blackbox_recall_loss(
      s, y, where=where, interpolation=2.0, weight_fn=weight_fn, max_relevant=k
    )

  def step():
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 2)), static_argnums=3)

  want = step()(scores, labels, 1.5, None)
  assert float(want[1][1]) != 0 and np.abs(want[1][0]).max() > 0
  with platforms.forced_platform(platform):
    for k in (None, 12):
      assert_same_path(step()(scores, labels, 1.5, k), want)


@pytest.mark.parametrize("loss_fn", LOSSES, ids=["ap", "recall"])
def test_gpu_forms_with_a_bound_equal_the_sort(loss_fn):
  """The GPUs' forms of the counting (one variadic reduction for the slots' sums, the slots' keys
  from the picked scores, the gradient's recount from the scores) give the sort's ranks and
  gradients, with a bound (one branch) on lists of every kind (ties, NaN, masks)."""

  def f(s, y, w, k):
    return jnp.sum(loss_fn(s, y, where=w, interpolation=4.0, reduce_fn=None, max_relevant=k))

  for scores, labels, where in counting_cases():
    most = int(np.max(np.sum(where & (labels >= 1), axis=-1)))
    want = jax.jit(jax.value_and_grad(f), static_argnums=3)(scores, labels, where, None)
    with platforms.forced_platform(platforms.GPU):
      step = jax.jit(jax.value_and_grad(f), static_argnums=3)
      for k in (most, most + 2):
        assert_same_path(step(scores, labels, where, k), want)
