"""The pair-based baselines: against the numpy reference and against pytorch-metric-learning.

The conventions every list-level loss shares (jit, vmap, `where` equals slicing, masked padding,
empty lists, NaN, dtypes, input errors) are checked by `test_contract.py`, whose table has a row for
each loss here (and one for the mined multi-similarity loss). This file checks the values and
gradients against `reference_pairwise.py` in float64, the losses' own degenerate lists and
hyperparameter checks, and the equality with pytorch-metric-learning 2.9.0 on in-batch lists of
random embeddings, in float32: value and gradient with respect to the embeddings.

Every test runs on both forms of the losses (`platforms.forced_platform`: the CPU's, and the
accelerators' one-pass custom VJPs).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import reference_pairwise
import torch
from jax import test_util
from pytorch_metric_learning import distances as pml_distances
from pytorch_metric_learning import losses as pml_losses
from pytorch_metric_learning import miners as pml_miners
from pytorch_metric_learning import reducers as pml_reducers

import jaxrank
from jaxrank._src import platforms


@pytest.fixture(autouse=True, params=platforms.PLATFORMS)
def platform(request):
  """Each test on the CPU's form and on the accelerators' form of the losses."""
  with platforms.forced_platform(request.param):
    yield request.param


# (name, jaxrank loss, reference, hyperparameters): each loss with its defaults and with others.
CASES = [
  ("contrastive", jaxrank.contrastive_loss, reference_pairwise.contrastive_loss, {}),
  (
    "contrastive_margins",
    jaxrank.contrastive_loss,
    reference_pairwise.contrastive_loss,
    dict(pos_margin=0.6, neg_margin=-0.1),
  ),
  ("triplet", jaxrank.triplet_loss, reference_pairwise.triplet_loss, {}),
  ("triplet_margin", jaxrank.triplet_loss, reference_pairwise.triplet_loss, dict(margin=0.4)),
  ("multi_similarity", jaxrank.multi_similarity_loss, reference_pairwise.multi_similarity_loss, {}),
  (
    "multi_similarity_scales",
    jaxrank.multi_similarity_loss,
    reference_pairwise.multi_similarity_loss,
    dict(alpha=0.5, beta=7.0, base=-0.2),
  ),
  (
    "multi_similarity_mined",
    jaxrank.multi_similarity_loss,
    reference_pairwise.multi_similarity_loss,
    dict(epsilon=0.1),
  ),
  (
    "multi_similarity_mined_wide",
    jaxrank.multi_similarity_loss,
    reference_pairwise.multi_similarity_loss,
    dict(beta=10.0, epsilon=0.5),
  ),
]
IDS = [c[0] for c in CASES]


def random_lists(seed, shape=(5, 9)):
  """Untied similarities in [-1, 1], labels 0..2 (relevant iff >= 1) and a mask; the first list
  without a relevant item, the second without a non-relevant valid item."""
  rng = np.random.default_rng(seed)
  scores = rng.uniform(-1, 1, shape)
  labels = rng.choice(3, shape, p=[0.5, 0.3, 0.2])
  where = rng.random(shape) < 0.85
  labels[..., 0], where[..., 0] = 1, True
  labels[..., 1], where[..., 1] = 0, True
  labels[0] = 0
  labels[1] = np.where(where[1], 2, 0)
  return scores, labels, where


@pytest.mark.parametrize("name,fn,ref,kwargs", CASES, ids=IDS)
def test_values_equal_reference(name, fn, ref, kwargs, x64):
  del name
  for seed in range(3):
    scores, labels, where = random_lists(seed)
    got = fn(scores, labels, where=where, reduce_fn=None, **kwargs)
    want = reference.per_list(functools.partial(ref, **kwargs), scores, labels, where)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    # The mean over the defined lists: with a relevant item (and, for the triplet loss, a
    # non-relevant one).
    defined = reference.has_relevant(labels, where)
    if fn is jaxrank.triplet_loss:
      defined &= reference.has_relevant(1 - (labels >= 1), where)
    assert not defined[0] and defined[2:].all()
    np.testing.assert_allclose(
      fn(scores, labels, where=where, **kwargs),
      reference.mean_over_lists(want, defined),
      rtol=1e-12,
    )


@pytest.mark.parametrize("name,fn,ref,kwargs", CASES, ids=IDS)
def test_gradients_equal_finite_differences(name, fn, ref, kwargs, x64):
  del name, ref
  scores, labels, where = random_lists(7)
  loss = lambda s: fn(s, labels, where=where, **kwargs)
  grad = jax.jit(jax.grad(loss))(scores)
  assert np.abs(grad).max() > 1e-2  # Not a trivial case.
  test_util.check_grads(loss, (scores,), order=1, modes=("rev",), eps=1e-6, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("margin", [0.05, 0.4])
def test_all_triplets_equal_reference(margin, x64):
  """`mining="all"`: each list's mean over its non-zero triplets; the mean over the batch is
  the mean over all its non-zero triplets (each list weighed by their number, times `weights`),
  the sum their sum."""
  kwargs = dict(margin=margin, mining="all")
  for seed in range(3):
    scores, labels, where = random_lists(seed)
    got = jaxrank.triplet_loss(scores, labels, where=where, reduce_fn=None, **kwargs)
    ref = functools.partial(reference_pairwise.all_triplet_loss, margin=margin)
    np.testing.assert_allclose(
      got, reference.per_list(ref, scores, labels, where), rtol=1e-12, atol=1e-14
    )
    sums, numbers = np.array(
      [
        reference_pairwise.all_triplets(s, y, w, margin=margin)
        for s, y, w in zip(scores, labels, where)
      ]
    ).T
    assert numbers[:2].sum() == 0 and numbers.sum() > 0
    np.testing.assert_allclose(
      jaxrank.triplet_loss(scores, labels, where=where, **kwargs),
      sums.sum() / numbers.sum(),
      rtol=1e-12,
    )
    np.testing.assert_allclose(
      jaxrank.triplet_loss(scores, labels, where=where, reduce_fn=jnp.sum, **kwargs),
      sums.sum(),
      rtol=1e-12,
    )
    weights = np.linspace(0.5, 2.0, len(scores))
    np.testing.assert_allclose(
      jaxrank.triplet_loss(scores, labels, where=where, weights=weights, **kwargs),
      (weights * sums).sum() / (weights * numbers).sum(),
      rtol=1e-12,
    )
  loss = lambda s: jaxrank.triplet_loss(s, labels, where=where, **kwargs)
  assert np.abs(jax.jit(jax.grad(loss))(scores)).max() > 1e-2  # Not a trivial case.
  test_util.check_grads(loss, (scores,), order=1, modes=("rev",), eps=1e-6, atol=1e-6, rtol=1e-6)


def test_all_triplets_without_a_non_zero_triplet_give_zero():
  scores, labels = jnp.array([[0.9, 0.8, 0.1, 0.0]]), jnp.array([[1, 1, 0, 0]])
  value, grad = jax.value_and_grad(
    lambda s: jaxrank.triplet_loss(s, labels, margin=0.1, mining="all")
  )(scores)
  assert value == 0 and not np.any(grad)
  with pytest.raises(ValueError, match='triplet_loss: mining must be "hard" or "all", got'):
    jaxrank.triplet_loss(scores, labels, mining="semi-hard")


def test_contrastive_is_calibration_with_the_margins(x64):
  scores, labels, where = random_lists(3)
  for pos, neg in ((1.0, 0.0), (0.9, 0.6)):
    got = jax.jit(
      jax.value_and_grad(
        lambda s: jaxrank.contrastive_loss(s, labels, where=where, pos_margin=pos, neg_margin=neg)
      )
    )(scores)
    want = jax.jit(
      jax.value_and_grad(
        lambda s: jaxrank.calibration_loss(s, labels, where=where, alpha=pos, beta=neg)
      )
    )(scores)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-14)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-14, atol=1e-16)


def test_triplet_needs_a_negative():
  scores = jnp.array([[0.9, 0.55, 0.5], [0.9, 0.55, 0.5]])
  labels = jnp.array([[1, 1, 1], [1, 0, 1]])
  per = jaxrank.triplet_loss(scores, labels, margin=0.1, reduce_fn=None)
  np.testing.assert_allclose(per, [0.0, 0.55 - 0.5 + 0.1], rtol=1e-6)
  # The list without a negative is left out of the mean, and gets no gradient.
  value, grad = jax.jit(jax.value_and_grad(lambda s: jaxrank.triplet_loss(s, labels, margin=0.1)))(
    scores
  )
  np.testing.assert_allclose(value, 0.55 - 0.5 + 0.1, rtol=1e-6)
  np.testing.assert_array_equal(grad, [[0, 0, 0], [0, 1, -1]])


def test_multi_similarity_is_stable_on_extreme_scores(x64):
  # beta * s of 5e7: a plain log(1 + sum exp) overflows; with the 0 term the value is exact.
  scores = np.array([[1e6, -1e6, 3e5, -2e5], [0.3, 0.3, 0.3, 0.3], [40.0, -40.0, 40.0, -40.0]])
  labels = np.array([[1, 0, 0, 1], [1, 0, 1, 0], [0, 1, 1, 0]])
  for epsilon in (None, 0.1):
    kwargs = dict(epsilon=epsilon)
    per = jaxrank.multi_similarity_loss(scores, labels, reduce_fn=None, **kwargs)
    want = reference.per_list(
      functools.partial(reference_pairwise.multi_similarity_loss, **kwargs), scores, labels
    )
    np.testing.assert_allclose(per, want, rtol=1e-12)
    grad = jax.jit(jax.grad(lambda s: jaxrank.multi_similarity_loss(s, labels, **kwargs)))(scores)
    assert np.isfinite(grad).all()
  value, grad = jax.jit(jax.value_and_grad(jaxrank.multi_similarity_loss))(
    jnp.asarray(scores, jnp.bfloat16), labels
  )
  assert np.isfinite(value) and np.isfinite(grad.astype(jnp.float32)).all()


def test_mining_keeps_the_pairs_within_epsilon(x64):
  # Positives 0.9, 0.45; negatives 0.5, 0.3, -0.2. With epsilon 0.1: the positive 0.45 (0.45 - 0.1
  # < 0.5) and the negatives 0.5 and 0.3 (0.3 + 0.1 < 0.45 is false: only 0.5).
  scores = np.array([0.9, 0.45, 0.5, 0.3, -0.2])
  labels = np.array([1, 1, 0, 0, 0])
  got = jaxrank.multi_similarity_loss(scores, labels, epsilon=0.1)
  want = np.log1p(np.exp(-2 * (0.45 - 0.5))) / 2 + np.log1p(np.exp(50 * (0.5 - 0.5))) / 50
  np.testing.assert_allclose(got, want, rtol=1e-12)
  # A list whose positives lie epsilon above its negatives mines nothing: 0, and no gradient.
  easy = np.array([0.9, 0.8, 0.6, 0.1])
  value, grad = jax.jit(
    jax.value_and_grad(
      lambda s: jaxrank.multi_similarity_loss(s, np.array([1, 1, 0, 0]), epsilon=0.1)
    )
  )(easy)
  assert float(value) == 0.0
  np.testing.assert_array_equal(grad, np.zeros(4))


def test_weights_weigh_the_lists(x64):
  scores, labels, where = random_lists(4)
  weights = np.array([3.0, 1.0, 0.5, 2.0, 0.0])
  for fn, ref, kwargs in ((c[1], c[2], c[3]) for c in CASES[::2]):
    per = reference.per_list(functools.partial(ref, **kwargs), scores, labels, where)
    defined = reference.has_relevant(labels, where)
    if fn is jaxrank.triplet_loss:
      defined &= reference.has_relevant(1 - (labels >= 1), where)
    # The weighted mean over the defined lists; list 0 (no relevant item) is left out.
    want = np.sum((weights * per)[defined]) / np.sum(weights[defined])
    got = fn(scores, labels, where=where, weights=weights, **kwargs)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    got = fn(scores, labels, where=where, weights=weights, reduce_fn=jnp.sum, **kwargs)
    np.testing.assert_allclose(got, np.sum((weights * per)[defined]), rtol=1e-12)


def test_hyperparameter_errors():
  scores, labels = jnp.array([0.3, 0.2, 0.1]), jnp.array([1, 0, 1])
  with pytest.raises(ValueError, match=r"^multi_similarity_loss: alpha must be > 0"):
    jaxrank.multi_similarity_loss(scores, labels, alpha=0.0)
  with pytest.raises(ValueError, match=r"^multi_similarity_loss: beta must be > 0"):
    jaxrank.multi_similarity_loss(scores, labels, beta=-1.0)
  with pytest.raises(ValueError, match=r"^multi_similarity_loss: epsilon must be >= 0"):
    jaxrank.multi_similarity_loss(scores, labels, epsilon=-0.1)
  with pytest.raises(TypeError, match=r"^triplet_loss: margin must be a real number"):
    jaxrank.triplet_loss(scores, labels, margin=True)
  with pytest.raises(ValueError, match=r"^contrastive_loss: pos_margin must be a scalar"):
    jaxrank.contrastive_loss(scores, labels, pos_margin=jnp.ones(3))
  with pytest.raises(ValueError, match=r"^contrastive_loss: weights have shape \(3,\)"):
    jaxrank.contrastive_loss(scores, labels, weights=jnp.ones(3))


# ---------------------------------------------------------------------------------------------
# pytorch-metric-learning: its loss on embeddings and labels against batch_retrieval + the loss.


def mean_of_nonzero(values, *, where):
  """pytorch-metric-learning's `AvgNonZeroReducer` as a reduction over lists."""
  count = jnp.sum(where & (values > 0))
  return jnp.sum(values, where=where) / jnp.maximum(count, 1)


def embeddings_and_labels(kind):
  """`[24, 16]` float32 embeddings of 6 classes x 4: "random" (every triplet violated, every list
  mines pairs) or "clustered" (class means plus noise: some triplets satisfied, some lists mine
  nothing)."""
  rng = np.random.default_rng(0 if kind == "random" else 1)
  labels = np.repeat(np.arange(6), 4)
  rng.shuffle(labels)
  e = rng.normal(size=(24, 16))
  if kind == "clustered":
    e = 0.8 * e + rng.normal(size=(6, 16))[labels]
  return e.astype(np.float32), labels


_JITTED: dict[str, Callable] = {}


def jaxrank_value_and_grad(name, e, labels):
  """batch_retrieval + the loss of `PML_CASES[name]`, jitted once per case."""
  if name not in _JITTED:
    loss = PML_CASES[name][2]

    def total(x, y):
      scores, relevance, where = jaxrank.batch_retrieval(x, y)
      return loss(scores, relevance, where=where)

    _JITTED[name] = jax.jit(jax.value_and_grad(total))
  value, grad = _JITTED[name](jnp.asarray(e), jnp.asarray(labels))
  return float(value), np.asarray(grad)


def pml_value_and_grad(loss, e, labels, miner=None):
  x = torch.tensor(e, requires_grad=True)
  y = torch.tensor(labels)
  value = loss(x, y, miner(x, y)) if miner is not None else loss(x, y)
  value.backward()
  return float(value.detach()), x.grad.numpy()


def _cosine():
  return pml_distances.CosineSimilarity()


PML_CASES = {
  "contrastive": (
    lambda: pml_losses.ContrastiveLoss(
      pos_margin=1.0,
      neg_margin=0.0,
      distance=_cosine(),
      reducer=pml_reducers.PerAnchorReducer(pml_reducers.MeanReducer()),
    ),
    None,
    jaxrank.contrastive_loss,
  ),
  "contrastive_margins": (
    lambda: pml_losses.ContrastiveLoss(
      pos_margin=0.8,
      neg_margin=0.3,
      distance=_cosine(),
      reducer=pml_reducers.PerAnchorReducer(pml_reducers.MeanReducer()),
    ),
    None,
    functools.partial(jaxrank.contrastive_loss, pos_margin=0.8, neg_margin=0.3),
  ),
  "triplet_batch_hard": (
    lambda: pml_losses.TripletMarginLoss(margin=0.2, distance=_cosine()),
    lambda: pml_miners.BatchHardMiner(distance=_cosine()),
    functools.partial(jaxrank.triplet_loss, margin=0.2, reduce_fn=mean_of_nonzero),
  ),
  "triplet_all": (  # pytorch-metric-learning's default: no miner, AvgNonZeroReducer.
    lambda: pml_losses.TripletMarginLoss(margin=0.2, distance=_cosine()),
    None,
    functools.partial(jaxrank.triplet_loss, margin=0.2, mining="all"),
  ),
  "triplet_batch_hard_mean": (
    lambda: pml_losses.TripletMarginLoss(
      margin=0.2, distance=_cosine(), reducer=pml_reducers.MeanReducer()
    ),
    lambda: pml_miners.BatchHardMiner(distance=_cosine()),
    functools.partial(jaxrank.triplet_loss, margin=0.2),
  ),
  "multi_similarity": (
    lambda: pml_losses.MultiSimilarityLoss(alpha=2, beta=50, base=0.5),
    None,
    jaxrank.multi_similarity_loss,
  ),
  "multi_similarity_mined": (
    lambda: pml_losses.MultiSimilarityLoss(alpha=2, beta=50, base=0.5),
    lambda: pml_miners.MultiSimilarityMiner(epsilon=0.1),
    functools.partial(jaxrank.multi_similarity_loss, epsilon=0.1),
  ),
}


def pml_differences(name, kind):
  """(jaxrank value, |value difference|, max |gradient difference|, max |gradient|)."""
  make_loss, make_miner, _ = PML_CASES[name]
  e, labels = embeddings_and_labels(kind)
  value, grad = jaxrank_value_and_grad(name, e, labels)
  want, want_grad = pml_value_and_grad(
    make_loss(), e, labels, None if make_miner is None else make_miner()
  )
  return (
    value,
    abs(value - want),
    float(np.abs(grad - want_grad).max()),
    float(np.abs(want_grad).max()),
  )


@pytest.mark.parametrize("kind", ["random", "clustered"])
@pytest.mark.parametrize("name", list(PML_CASES))
def test_equals_pytorch_metric_learning(name, kind):
  value, value_diff, grad_diff, grad_scale = pml_differences(name, kind)
  assert value > 0 and grad_scale > 1e-3  # Not a trivial case.
  # float32 rounding of the same sums taken in another order.
  assert value_diff <= 2e-6 * max(abs(value), 1), (value, value_diff)
  assert grad_diff <= 2e-6 * grad_scale, (grad_diff, grad_scale)


def test_the_cases_exercise_the_reducers():
  """The clustered embeddings have satisfied triplets (so the average over non-zero triplets
  differs from the mean) and lists that mine no pair; the random ones have neither (computed with
  the references, in float64)."""
  for kind, some_zero in (("random", False), ("clustered", True)):
    e, labels = embeddings_and_labels(kind)
    unit = e / np.linalg.norm(e, axis=1, keepdims=True)
    scores = unit.astype(np.float64) @ unit.T.astype(np.float64)
    relevance = (labels[:, None] == labels[None, :]).astype(np.int32)
    where = ~np.eye(len(labels), dtype=bool)
    triplet = reference.per_list(
      functools.partial(reference_pairwise.triplet_loss, margin=0.2), scores, relevance, where
    )
    mined = reference.per_list(
      functools.partial(reference_pairwise.multi_similarity_loss, epsilon=0.1),
      scores,
      relevance,
      where,
    )
    assert np.any(triplet == 0) == some_zero and np.any(mined == 0) == some_zero
    assert not np.all(triplet == 0) and not np.all(mined == 0)


if __name__ == "__main__":
  # The measured differences, for the report: python tests/test_pairwise.py (from tests/).
  for case in PML_CASES:
    for embedding_kind in ("random", "clustered"):
      value, dvalue, dgrad, grad = pml_differences(case, embedding_kind)
      print(
        case,
        embedding_kind,
        f"value {value:.6g} |dvalue| {dvalue:.3g} max|dgrad| {dgrad:.3g} max|grad| {grad:.3g}",
      )


@pytest.mark.parametrize("name,fn,ref,kwargs", CASES, ids=IDS)
def test_both_forms_agree_on_ties_and_hyperparameter_gradients(name, fn, ref, kwargs, x64):
  """Scores on a grid of quarters (tied hardest items, hinges at their kinks), gradients with
  respect to the scores and to every array hyperparameter, on both platforms' forms."""
  del name, ref
  scores, labels, where = random_lists(11, shape=(6, 13))
  scores = np.round(scores * 4) / 4
  given = {k: v for k, v in kwargs.items() if k != "epsilon"}
  defaults = {
    "contrastive_loss": dict(pos_margin=1.0, neg_margin=0.0),
    "triplet_loss": dict(margin=0.05),
    "multi_similarity_loss": dict(alpha=2.0, beta=50.0, base=0.5),
  }[fn.__name__]
  hyper = {k: jnp.asarray(given.get(k, v)) for k, v in defaults.items()}
  loss = lambda s, h: (
    fn(s, labels, where=where, epsilon=kwargs.get("epsilon"), **h)
    if ("epsilon" in kwargs)
    else fn(s, labels, where=where, **h)
  )
  got = {}
  for form in platforms.PLATFORMS:
    with platforms.forced_platform(form):
      got[form] = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(scores, hyper)
  for a, b in zip(jax.tree.leaves(got["cpu"]), jax.tree.leaves(got["accelerator"])):
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
