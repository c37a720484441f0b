"""A list left out of the reduction gets a zero gradient, even when it holds a NaN (issue 14).

Every list-level loss leaves out the lists without a relevant valid item (for NDCG: whose ideal DCG
is 0). A NaN score in such a list must change nothing: the loss stays finite, that list's scores
get an exactly zero gradient, and every other list keeps the value and gradient it has without the
NaN (zero cotangent times the NaN partial derivatives of the excluded list used to make the whole
gradient NaN; the fix is `lists.counted_scores`, the "double where" in every loss body). The
values of the other lists are compared with the float64 references as well.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import reference_hashing
import reference_histogram
import reference_smooth_rank

import jaxrank


class Loss(NamedTuple):
  name: str
  fn: Callable[..., jax.Array]
  ref: Callable[..., float] | None  # float64 reference of one list, or None.


def _smooth_rank(scores, labels, **kwargs):
  return jaxrank.smooth_rank_ap_loss(
    scores,
    labels,
    positive_step_fn=jaxrank.sigmoid_step,
    negative_step_fn=jaxrank.sigmoid_step,
    **kwargs,
  )


LOSSES = [
  Loss("fastap", jaxrank.fastap_loss, reference_histogram.fastap_loss),
  Loss("soft_binning_ap", jaxrank.soft_binning_ap_loss, reference_histogram.soft_binning_ap_loss),
  Loss(
    "soft_binning_ap_weighted",
    functools.partial(jaxrank.soft_binning_ap_loss, weights=jnp.array([0.5, 2.0, 1.0, 1.5])),
    None,
  ),
  Loss("tie_aware_ap", jaxrank.tie_aware_ap_loss, reference_hashing.tie_aware_ap_loss),
  Loss(
    "simplified_tie_aware_ap",
    jaxrank.simplified_tie_aware_ap_loss,
    reference_hashing.simplified_tie_aware_ap_loss,
  ),
  Loss("tie_aware_ndcg", jaxrank.tie_aware_ndcg_loss, reference_hashing.tie_aware_ndcg_loss),
  Loss(
    "simplified_tie_aware_ndcg",
    jaxrank.simplified_tie_aware_ndcg_loss,
    reference_hashing.simplified_tie_aware_ndcg_loss,
  ),
  Loss("smoothap", jaxrank.smoothap_loss, reference_smooth_rank.smoothap_loss),
  Loss("smooth_rank_ap", _smooth_rank, reference_smooth_rank.smoothap_loss),
  Loss("supap", jaxrank.supap_loss, reference_smooth_rank.supap_loss),
  Loss("roadmap", jaxrank.roadmap_loss, reference_smooth_rank.roadmap_loss),
  Loss("calibration", jaxrank.calibration_loss, reference_smooth_rank.calibration_loss),
  Loss("blackbox_ap", jaxrank.blackbox_ap_loss, None),
  Loss("blackbox_recall", jaxrank.blackbox_recall_loss, None),
]
IDS = [loss.name for loss in LOSSES]
EXCLUDED = 1  # The list without a relevant item.


def _batch() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """4 lists of 7 similarities in [-1, 1]; list 1 has no relevant item, and a masked item."""
  rng = np.random.default_rng(5)
  scores = rng.uniform(-0.9, 0.9, (4, 7))
  labels = rng.integers(0, 3, (4, 7))
  labels[:, 0] = 1
  labels[EXCLUDED] = 0
  where = np.ones((4, 7), bool)
  where[2, 5] = False
  return scores, labels, where


@pytest.mark.parametrize("loss", LOSSES, ids=IDS)
def test_excluded_list_with_nan_gets_zero_gradient(loss):
  scores, labels, where = _batch()

  @jax.jit  # One compilation per loss for both batches.
  def run(s):
    mean, grad = jax.value_and_grad(lambda s: loss.fn(s, labels, where=where))(s)
    grad_sum = jax.grad(lambda s: loss.fn(s, labels, where=where, reduce_fn=jnp.sum))(s)
    return mean, grad, grad_sum, loss.fn(s, labels, where=where, reduce_fn=None)

  clean = jnp.asarray(scores, jnp.float32)
  # A NaN and an infinity (clipped under jit; out of range for the histogram losses, which reject
  # it eagerly: test_histogram.py) in the list without a relevant item.
  poisoned = clean.at[EXCLUDED, 2].set(np.nan).at[EXCLUDED, 4].set(-np.inf)
  got, want = run(poisoned), run(clean)
  for g, w in zip(got, want):
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, w.at[EXCLUDED].set(0) if w.ndim else w, rtol=1e-5, atol=1e-6)
  mean, grad, grad_sum, per = got
  np.testing.assert_array_equal(grad[EXCLUDED], np.zeros(7, np.float32))
  np.testing.assert_array_equal(grad_sum[EXCLUDED], np.zeros(7, np.float32))
  assert per[EXCLUDED] == 0.0


@pytest.mark.parametrize("loss", [LOSSES[0], LOSSES[7]], ids=lambda entry: entry.name)
def test_eagerly(loss):
  """Eagerly the input checks run on the known scores (a NaN is not out of range)."""
  scores, labels, where = _batch()
  clean = jnp.asarray(scores, jnp.float32)
  value, grad = jax.value_and_grad(lambda s: loss.fn(s, labels, where=where))(
    clean.at[EXCLUDED, 2].set(np.nan)
  )
  want_value, want_grad = jax.value_and_grad(lambda s: loss.fn(s, labels, where=where))(clean)
  np.testing.assert_allclose(value, want_value, rtol=1e-6, atol=1e-7)
  np.testing.assert_array_equal(grad[EXCLUDED], np.zeros(7, np.float32))
  np.testing.assert_allclose(grad, want_grad.at[EXCLUDED].set(0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
  "loss", [entry for entry in LOSSES if entry.ref is not None], ids=lambda entry: entry.name
)
def test_other_lists_match_reference(loss, x64):
  """A NaN in an excluded list and one in a counted list: the rest equals the float64 reference."""
  scores, labels, where = _batch()
  scores[EXCLUDED, 4] = np.nan
  scores[3, 2] = np.nan  # List 3 counts: its value is NaN.
  per = np.asarray(loss.fn(scores, labels, where=where, reduce_fn=None))
  assert per.dtype == np.float64
  assert per[EXCLUDED] == 0.0 and np.isnan(per[3])
  want = reference.per_list(loss.ref, scores, labels, where)
  np.testing.assert_allclose(per[[0, 2]], want[[0, 2]], rtol=1e-9, atol=1e-12)
