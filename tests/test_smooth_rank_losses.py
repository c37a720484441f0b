"""Tests of the smooth-rank losses beyond AP (`jaxrank._src.smooth_rank_losses`).

Each loss against the loop-based numpy reading of its paper's equations
(`reference_rank_losses.py`), in value and gradient (central differences of the reference), on
random float64 lists; against a torch transcription of its released code
(`released_rank_losses.py`) on in-batch lists, with the keyword that reproduces that code; and the
house's invariances (permutation, jit, vmap, where == slicing, bounded == unbounded, every
platform's form, segments, chunks).

Run: .venv/bin/python -m pytest tests/test_smooth_rank_losses.py -q
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import reference_rank_losses as ref
import reference_smooth_rank
import released_rank_losses as released
import torch
from jax.test_util import check_grads

import jaxrank
from jaxrank._src import platforms
from jaxrank._src import precision_sums


class Case(NamedTuple):
  name: str
  fn: Callable[..., jax.Array]
  ref: Callable[..., float]
  kwargs: dict[str, Any]


CASES = [
  Case("rs_at_k", jaxrank.recall_at_k_surrogate_loss, ref.recall_at_k_surrogate_loss, {}),
  Case(
    "rs_at_k_clipped",
    jaxrank.recall_at_k_surrogate_loss,
    ref.recall_at_k_surrogate_loss,
    {"ks": (1, 3), "temperature": 0.05, "k_temperature": 0.5, "clip_at_k": True},
  ),
  Case(
    "smooth_recall",
    jaxrank.smooth_recall_at_k_loss,
    ref.recall_at_k_surrogate_loss,
    {"ks": (2, 4), "temperature": 0.1},
  ),
  Case("sup_recall", jaxrank.sup_recall_at_k_loss, ref.sup_recall_at_k_loss, {}),
  Case(
    "sup_recall_custom",
    jaxrank.sup_recall_at_k_loss,
    ref.sup_recall_at_k_loss,
    {"ks": (1, 2), "temperature": 0.05, "rho": 10.0, "delta": 0.1, "k_temperature": 2.0},
  ),
  Case("smooth_ndcg", jaxrank.smooth_ndcg_loss, ref.smooth_ndcg_loss, {"temperature": 0.05}),
  Case("sup_ndcg", jaxrank.sup_ndcg_loss, ref.sup_ndcg_loss, {}),
  Case(
    "sup_ndcg_custom",
    jaxrank.sup_ndcg_loss,
    ref.sup_ndcg_loss,
    {"temperature": 0.05, "rho": 10.0, "delta": 0.1},
  ),
]
# One case per function for the costlier tests.
CORE = [
  c
  for c in CASES
  if c.name in ("rs_at_k_clipped", "smooth_recall", "sup_recall", "smooth_ndcg", "sup_ndcg")
]
BATCH, N = (3, 4), 8
TOL64 = dict(rtol=1e-10, atol=1e-12)


def ids(cases):
  return [c.name for c in cases]


def run(case, scores, labels, *, where=None, reduce_fn=jnp.mean, **extra):
  return case.fn(scores, labels, where=where, reduce_fn=reduce_fn, **case.kwargs, **extra)


def random_lists(seed, shape=BATCH + (N,), *, scale=0.1):
  """Scores around 0 (all regimes of the steps), labels in {0, 1, 2}, a mask."""
  rng = np.random.default_rng(seed)
  scores = scale * rng.normal(size=shape)
  labels = rng.integers(0, 3, shape).astype(np.int32)
  return scores, labels, rng.random(shape) < 0.8


def reference_gradient(case, scores, labels, where, step=1e-6):
  """Central differences of the reference's mean over the lists with a relevant item."""

  def mean(s):
    values = reference.per_list(case.ref, s, labels, where, **case.kwargs)
    counted = np.any((labels >= 1) & where, axis=-1)
    return values[counted].sum() / max(counted.sum(), 1)

  grad = np.zeros_like(scores)
  for index in np.ndindex(scores.shape):
    up, down = scores.copy(), scores.copy()
    up[index] += step
    down[index] -= step
    grad[index] = (mean(up) - mean(down)) / (2 * step)
  return grad


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_matches_reference(case, x64):
  scores, labels, where = random_lists(0)
  got = run(case, scores, labels, where=where, reduce_fn=None)
  want = reference.per_list(case.ref, scores, labels, where, **case.kwargs)
  np.testing.assert_allclose(got, want, **TOL64)


@pytest.mark.parametrize("case", CORE, ids=ids(CORE))
def test_gradient_matches_reference(case, x64):
  scores, labels, where = random_lists(1, (2, 6))
  got = jax.grad(lambda s: run(case, s, labels, where=where))(scores)
  np.testing.assert_allclose(got, reference_gradient(case, scores, labels, where), atol=2e-6)


@pytest.mark.parametrize("case", CORE, ids=ids(CORE))
def test_check_grads(case, x64):
  scores, labels, where = random_lists(2, (2, 6))
  check_grads(lambda s: run(case, s, labels, where=where), (scores,), order=1, modes=["rev"])


def test_exact_steps_give_the_exact_recall(x64):
  """With the ranks' steps Heaviside-like (SupRecall with rho = 0 and a tiny temperature on
  well-separated scores) and a tiny `k_temperature` on counts half-way between integers, the loss
  is `1 -` eq. 1's exact Recall@k: the ranks are integers and `k + 1/2 - rank` never 0."""
  scores, labels, where = random_lists(3)
  scores = np.round(scores, 2) + 1e-3 * np.arange(N)  # At least 1e-3 apart.
  ks = (1, 2, 4)
  got = jaxrank.sup_recall_at_k_loss(
    scores,
    labels,
    where=where,
    ks=ks,
    temperature=1e-6,
    rho=0.0,
    delta=0.0,
    k_temperature=1e-3,
    reduce_fn=None,
  )
  # rank^- = H^- = 1/2 + sigmoid on (0, delta] only: with delta = 0 the step after 0 is the
  # constant sigmoid(0) + 1/2 = 1, the Heaviside step.
  want = 1 - reference.per_list(ref.exact_recall_at_k, scores, labels, where, ks=ks)
  # The count sigmoid((k - rank) / 1e-3) is 1/2 at rank = k, where the exact count is 1.
  half = reference.per_list(_items_at_rank_k, scores, labels, where, ks=ks)
  np.testing.assert_allclose(got, want + half, atol=1e-9)


def _items_at_rank_k(scores, labels, where=None, *, ks):
  """Half the exact loss's count of the relevant items ranked exactly `k`, averaged over `ks`."""
  ranks = [
    rank
    for rank, _ in ref.smoothed_ranks(
      scores,
      labels,
      where,
      h_pos=reference_smooth_rank.heaviside,
      h_neg=reference_smooth_rank.heaviside,
    )
  ]
  if not ranks:
    return 0.0
  return sum(0.5 * sum(r == k for r in ranks) / min(k, len(ranks)) for k in ks) / len(ks)


# Invariances.


@pytest.mark.parametrize("case", CORE, ids=ids(CORE))
def test_permutation_jit_vmap_and_where_equal_slicing(case, x64):
  scores, labels, where = random_lists(4)
  base = run(case, scores, labels, where=where, reduce_fn=None)
  perm = np.random.default_rng(0).permutation(N)
  np.testing.assert_allclose(
    run(case, scores[..., perm], labels[..., perm], where=where[..., perm], reduce_fn=None),
    base,
    **TOL64,
  )
  jitted = jax.jit(lambda s, y, w: run(case, s, y, where=w, reduce_fn=None))
  np.testing.assert_allclose(jitted(scores, labels, where), base, **TOL64)
  mapped = jax.vmap(lambda s, y, w: run(case, s, y, where=w, reduce_fn=None))
  np.testing.assert_allclose(mapped(scores, labels, where), base, **TOL64)
  s, y, w = scores[0, 0], labels[0, 0], where[0, 0]
  np.testing.assert_allclose(run(case, s[w], y[w], reduce_fn=None), base[0, 0], **TOL64)
  # reduce_fn: the sum of the per-list values is the sum.
  np.testing.assert_allclose(
    run(case, scores, labels, where=where, reduce_fn=jnp.sum), base.sum(), **TOL64
  )


@pytest.mark.parametrize("platform", platforms.PLATFORMS)
@pytest.mark.parametrize("case", CORE, ids=ids(CORE))
def test_bound_platform_chunks_and_segments_change_nothing(case, platform, x64):
  scores, labels, where = random_lists(5)
  want = reference.per_list(case.ref, scores, labels, where, **case.kwargs)
  most = int(np.max(np.sum((labels >= 1) & where, axis=-1)))
  grad = jax.grad(lambda s, **k: run(case, s, labels, where=where, **k))
  with platforms.forced_platform(platform):
    base_grad = grad(scores)
    for extra in ({}, {"max_relevant": most}, {"max_relevant": N}, {"chunk_size": 3}):
      got = run(case, scores, labels, where=where, reduce_fn=None, **extra)
      np.testing.assert_allclose(got, want, **TOL64)
      np.testing.assert_allclose(grad(scores, **extra), base_grad, **TOL64)
    # A list beyond the bound gives NaN.
    bounded = run(case, scores, labels, where=where, reduce_fn=None, max_relevant=most - 1)
    assert np.isnan(bounded).any()
  # Segments: two lists packed in one row equal the two lists.
  row = scores[0, :2].reshape(-1)
  segments = np.repeat([0, 1], N)
  packed = run(
    case,
    row,
    labels[0, :2].reshape(-1),
    where=where[0, :2].reshape(-1),
    segments=segments,
    reduce_fn=None,
  )
  # Each segment's value sits at its first valid item, zeros elsewhere.
  packed = np.asarray(packed).reshape(2, N).sum(axis=1)
  np.testing.assert_allclose(packed, want[0, :2], **TOL64)


def test_degenerate_lists(x64):
  """No relevant item, all relevant, all masked, all tied: finite values and gradients."""
  scores = np.array([[0.1, 0.2, 0.3], [0.1, 0.2, 0.3], [0.1, 0.2, 0.3], [0.2, 0.2, 0.2]])
  labels = np.array([[0, 0, 0], [1, 1, 1], [1, 0, 1], [1, 0, 1]])
  where = np.array([[True] * 3, [True] * 3, [False] * 3, [True] * 3])
  for case in CORE:
    values = np.asarray(run(case, scores, labels, where=where, reduce_fn=None))
    grad = np.asarray(jax.grad(lambda s: run(case, s, labels, where=where))(scores))
    assert np.all(np.isfinite(values)) and np.all(np.isfinite(grad)), case.name
    assert values[0] == 0 and values[2] == 0 and np.all(grad[[0, 2]] == 0), case.name


def test_blocked_loss_equals_the_whole_batch(x64):
  rng = np.random.default_rng(6)
  x, y = rng.normal(size=(12, 4)), np.repeat(np.arange(3), 4)
  loss = functools.partial(jaxrank.recall_at_k_surrogate_loss, ks=(1, 2, 4))

  def whole(x):
    scores, relevance, where = jaxrank.batch_retrieval(x, y)
    return loss(scores, relevance, where=where)

  blocked = jaxrank.blocked_loss(loss, block_size=5)
  np.testing.assert_allclose(blocked(x, y), whole(x), **TOL64)
  np.testing.assert_allclose(jax.grad(blocked)(x, y), jax.grad(whole)(x), **TOL64)


def test_hyperparameter_errors():
  scores, labels = jnp.array([0.3, 0.2, 0.1]), jnp.array([1, 0, 1])
  for fn in (jaxrank.smooth_ndcg_loss, jaxrank.sup_ndcg_loss):
    with pytest.raises(ValueError, match="graded labels"):
      fn(scores, jnp.array([1, -1, 0]))
    with pytest.raises(ValueError, match="temperature"):
      fn(scores, labels, temperature=0.0)
  for fn in (
    jaxrank.recall_at_k_surrogate_loss,
    jaxrank.smooth_recall_at_k_loss,
    jaxrank.sup_recall_at_k_loss,
  ):
    with pytest.raises(ValueError, match="ks"):
      fn(scores, labels, ks=())
    with pytest.raises(ValueError, match="ks"):
      fn(scores, labels, ks=(1, 0))
    with pytest.raises(ValueError, match="k_temperature"):
      fn(scores, labels, k_temperature=0.0)
    with pytest.raises(ValueError, match="temperature"):
      fn(scores, labels, temperature=-1.0)
    with pytest.raises(TypeError, match="floating"):
      fn(jnp.array([3, 2, 1]), labels)
    with pytest.raises(ValueError, match="max_relevant"):
      fn(scores, labels, max_relevant=0)
  with pytest.raises(TypeError, match="clip_at_k"):
    jaxrank.recall_at_k_surrogate_loss(scores, labels, clip_at_k=1)
  with pytest.raises(ValueError, match="rho"):
    jaxrank.sup_recall_at_k_loss(scores, labels, rho=-1.0)


# The released codes.


def _in_batch(num_classes=4, per_class=5, dim=8, seed=7):
  """L2-normalised float64 embeddings sorted in equal classes, as both codes require."""
  rng = np.random.default_rng(seed)
  e = rng.normal(size=(num_classes * per_class, dim))
  return e / np.linalg.norm(e, axis=1, keepdims=True), np.repeat(np.arange(num_classes), per_class)


def _torch_value_and_grad(fn, e):
  x = torch.tensor(e, dtype=torch.float64, requires_grad=True)
  value = fn(x)
  value.backward()
  return value.item(), x.grad.numpy()


def test_rs_at_k_equals_its_released_code(x64):
  """The RS@k code ranks each positive below the query itself (similarity 1) without counting the
  query as a positive, and clips each count at `k`: the query a valid non-relevant item of its own
  list (`affinity=same_class - eye, include_self=True`) and `clip_at_k=True`. Without them, the
  paper's value differs."""
  e, y = _in_batch()
  num_id = 4

  def ours(x, **kwargs):
    affinity = (y[:, None] == y[None, :]).astype(np.int32) - np.eye(len(y), dtype=np.int32)
    scores, relevance, where = jaxrank.batch_retrieval(x, affinity=affinity, include_self=True)
    return jaxrank.recall_at_k_surrogate_loss(scores, relevance, where=where, **kwargs)

  for ks, anneal in (((1, 2, 4, 8, 16), 0.01), ((1, 3), 0.1)):
    value, grad = _torch_value_and_grad(
      lambda x: released.patel_recall_at_k_batch(
        x / x.norm(dim=1, keepdim=True), num_id=num_id, anneal=anneal, k_vals=ks
      ),
      e,
    )

    def f(x, ks=ks, anneal=anneal):
      x = x / jnp.linalg.norm(x, axis=1, keepdims=True)
      return ours(x, ks=ks, temperature=anneal, clip_at_k=True)

    np.testing.assert_allclose(float(f(e)), value, rtol=1e-12)
    np.testing.assert_allclose(jax.grad(f)(e), grad, rtol=1e-9, atol=1e-13)
  # The paper's loss (query out of its list, no clip) is another value.
  scores, relevance, where = jaxrank.batch_retrieval(e, y)
  paper = jaxrank.recall_at_k_surrogate_loss(scores, relevance, where=where, ks=ks)
  assert abs(float(paper) - value) > 1e-3


@pytest.mark.parametrize("sup", [False, True], ids=["smooth_recall", "sup_recall"])
def test_suprank_recall_equals_its_released_code(sup, x64):
  """SupRank's SmoothRecallLoss / SupRecallLoss rank each query among its batch, itself included
  as a positive: `batch_retrieval(..., include_self=True)`."""
  e, y = _in_batch()
  ks = (1, 2, 4, 8, 16)
  loss = jaxrank.sup_recall_at_k_loss if sup else jaxrank.smooth_recall_at_k_loss

  def f(x, include_self=True):
    scores, relevance, where = jaxrank.batch_retrieval(
      x, y, include_self=include_self, similarity_fn=jaxrank.similarity.dot_product
    )
    return loss(scores, relevance, where=where, ks=ks)

  step = {"rho": 100.0, "delta": 0.05, "start": 0.5} if sup else {}
  value, grad = _torch_value_and_grad(
    lambda x: released.suprank_recall_at_k(x, torch.tensor(y), sup=sup, at_k=ks, **step), e
  )
  np.testing.assert_allclose(float(f(e)), value, rtol=1e-12)
  np.testing.assert_allclose(jax.grad(f)(e), grad, rtol=1e-9, atol=1e-13)
  assert abs(float(f(e, include_self=False)) - value) > 1e-3


@pytest.mark.parametrize("sup", [False, True], ids=["smooth_ndcg", "sup_ndcg"])
def test_suprank_ndcg_equals_its_released_code(sup, x64):
  """SupRank's SmoothNDCGLoss / SupNDCGLoss on a two-level hierarchy (classes, and super-classes
  of two classes each): the relevance of two items is the number of levels they share, which
  `batch_retrieval` gives for multi-hot labels (class and super-class one-hot side by side); the
  query ranked among its batch, itself included (`include_self=True`)."""
  e, y = _in_batch()
  levels = np.stack([y, y // 2], axis=1)
  multi_hot = np.concatenate([np.eye(4)[y], np.eye(2)[y // 2]], axis=1).astype(np.int32)
  loss = jaxrank.sup_ndcg_loss if sup else jaxrank.smooth_ndcg_loss

  def f(x, include_self=True):
    scores, relevance, where = jaxrank.batch_retrieval(
      x, multi_hot, include_self=include_self, similarity_fn=jaxrank.similarity.dot_product
    )
    return loss(scores, relevance, where=where)

  step = {"rho": 100.0, "delta": 0.05, "start": 0.5} if sup else {}
  value, grad = _torch_value_and_grad(
    lambda x: released.suprank_ndcg(x, torch.tensor(levels), sup=sup, **step), e
  )
  np.testing.assert_allclose(float(f(e)), value, rtol=1e-12)
  np.testing.assert_allclose(jax.grad(f)(e), grad, rtol=1e-9, atol=1e-13)
  assert abs(float(f(e, include_self=False)) - value) > 1e-3


def test_compiled_once_per_shape_whatever_the_hyperparameters(x64):
  """The metric's hyperparameters (cut-offs of one count, temperatures, the clip) are arrays of
  the jitted engine: new values reuse its compilation, as the AP losses' do."""
  jitted = precision_sums._smooth_rank_lists_jit  # pylint: disable=protected-access
  scores, labels, where = random_lists(8, (2, 6))
  jaxrank.recall_at_k_surrogate_loss(scores, labels, where=where, ks=(1, 2), temperature=0.1)
  jaxrank.sup_ndcg_loss(scores, labels, where=where)
  before = jitted._cache_size()  # pylint: disable=protected-access
  jaxrank.recall_at_k_surrogate_loss(
    scores, labels, where=where, ks=(3, 5), temperature=0.2, k_temperature=3.0, clip_at_k=True
  )
  jaxrank.smooth_recall_at_k_loss(scores, labels, where=where, ks=(4, 6), temperature=0.3)
  jaxrank.sup_ndcg_loss(scores, labels + 1, where=where, rho=3.0)
  assert jitted._cache_size() == before  # pylint: disable=protected-access


@pytest.mark.parametrize("max_relevant", [None, N])
def test_gpu_backward_that_computes_the_differences_again_equals_the_cpu(max_relevant, x64):
  """The GPUs' one-shot backward (`recomputed`) with a metric of several sums (Recall@k) and a
  graded one (SupNDCG)."""
  scores, labels, where = random_lists(9)
  for case in (CASES[1], CASES[-2]):
    grad = jax.grad(lambda s: run(case, s, labels, where=where, max_relevant=max_relevant))
    want = grad(scores)
    with platforms.forced_platform(platforms.GPU):
      np.testing.assert_allclose(grad(scores), want, **TOL64)
