"""Tests of `blocked_loss`: in-batch losses over blocks of queries equal the unblocked ones, value
and gradient (the unblocked computation, `loss_fn(*batch_retrieval(...))`, is the reference: each
loss is compared with its numpy reference in its own test module)."""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jaxrank
from jaxrank._src import blackbox_ranks
from jaxrank._src import host_kernels
from jaxrank._src import ranking

B, D, M = 14, 5, 6  # Blocks of 4: rows 0-3, 4-7, 8-11 and 10-13 (the last overlaps).
BLOCK = 4

# Every in-batch loss of jaxrank, and two exact metrics (values only).
LOSSES = {
  "fastap": jaxrank.fastap_loss,
  "soft_binning_ap": jaxrank.soft_binning_ap_loss,
  "tie_aware_ap": functools.partial(jaxrank.tie_aware_ap_loss, num_bins=8),
  "simplified_tie_aware_ap": functools.partial(jaxrank.simplified_tie_aware_ap_loss, num_bins=8),
  "tie_aware_ndcg": functools.partial(jaxrank.tie_aware_ndcg_loss, num_bins=8),
  "simplified_tie_aware_ndcg": functools.partial(
    jaxrank.simplified_tie_aware_ndcg_loss, num_bins=8
  ),
  "blackbox_ap": jaxrank.blackbox_ap_loss,
  "blackbox_recall": functools.partial(jaxrank.blackbox_recall_loss, interpolation=1.0),
  "smoothap": functools.partial(jaxrank.smoothap_loss, temperature=0.05),
  "smooth_rank_ap": functools.partial(
    jaxrank.smooth_rank_ap_loss,
    positive_step_fn=jaxrank.heaviside_step,
    negative_step_fn=jaxrank.sigmoid_step,
  ),
  "supap": jaxrank.supap_loss,
  "recall_at_k_surrogate": functools.partial(jaxrank.recall_at_k_surrogate_loss, ks=(1, 2, 4)),
  "sup_ndcg": jaxrank.sup_ndcg_loss,
  "calibration": jaxrank.calibration_loss,
  "roadmap": jaxrank.roadmap_loss,
  "contrastive": functools.partial(jaxrank.contrastive_loss, pos_margin=0.9, neg_margin=0.1),
  "triplet": functools.partial(jaxrank.triplet_loss, margin=0.5),
  # A mean over lists weighted by each one's number of non-zero triplets.
  "triplet_all": functools.partial(jaxrank.triplet_loss, margin=0.5, mining="all"),
  "multi_similarity": jaxrank.multi_similarity_loss,
}
METRICS = {"ap_metric": jaxrank.ap_metric, "ndcg_metric": jaxrank.ndcg_metric}
WEIGHTED = ["soft_binning_ap", "contrastive", "triplet", "triplet_all", "multi_similarity"]


def data(batch=B, gallery=M, seed=0, classes=4):
  """Clustered embeddings and labels, one query (the last) of a class of its own (an invalid list
  for the losses that need a positive); a gallery of which two slots are empty."""
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, classes, batch)
  labels[-1] = classes + 1
  centres = 1.5 * rng.standard_normal((classes + 2, D))
  embeddings = rng.standard_normal((batch, D)) + centres[labels]
  gallery_labels = rng.integers(0, classes, gallery)
  gallery_embeddings = rng.standard_normal((gallery, D)) + centres[gallery_labels]
  gallery_where = np.ones(gallery, bool)
  gallery_where[:2] = False
  return (
    jnp.asarray(embeddings, jnp.float32),
    jnp.asarray(labels),
    jnp.asarray(gallery_embeddings, jnp.float32),
    jnp.asarray(gallery_labels),
    jnp.asarray(gallery_where),
  )


def unblocked(loss_fn, include_self=False, similarity_fn=jaxrank.similarity.cosine):
  """The reference: `loss_fn` on the whole `batch_retrieval` lists."""

  def loss(embeddings, labels, **kwargs):
    weights = kwargs.pop("weights", None)
    scores, relevance, where = jaxrank.batch_retrieval(
      embeddings, labels, include_self=include_self, similarity_fn=similarity_fn, **kwargs
    )
    extra = {} if weights is None else {"weights": weights}
    return loss_fn(scores, relevance, where=where, **extra)

  return loss


def value_and_grads(fs, *args, **kwargs):
  """Each `f`'s value and its gradients with respect to the embeddings and the gallery, in one
  compiled program (one compilation for the blocked loss and its reference)."""
  embeddings, labels, gallery, gallery_labels, gallery_where = args

  def both(e, g):
    def one(f):
      loss = lambda e, g: f(
        e,
        labels,
        gallery_embeddings=g,
        gallery_labels=gallery_labels,
        gallery_where=gallery_where,
        **kwargs,
      )
      return jax.value_and_grad(loss, argnums=(0, 1))(e, g)

    return [one(f) for f in fs]

  return jax.jit(both)(embeddings, gallery)


def jit_value_and_grad(f):
  return jax.jit(jax.value_and_grad(f))


def assert_close(got, want):
  (value, grads), (want_value, want_grads) = got, want
  np.testing.assert_allclose(value, want_value, rtol=2e-6, atol=1e-7)
  for g, w in zip(grads, want_grads):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


# Half of the losses keep the query in its own list; the weighted ones get class-balancing
# weights computed from the whole batch (Revaud et al. 2019), which are cut into blocks with the
# lists.
INCLUDE_SELF = sorted(LOSSES)[::2]


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_blocked_equals_unblocked_with_gallery_and_ragged_blocks(name):
  args = data()
  include_self = name in INCLUDE_SELF
  kwargs = {"weights": jaxrank.class_balancing_weights(args[1])} if name in WEIGHTED else {}
  f = jaxrank.blocked_loss(LOSSES[name], block_size=BLOCK, include_self=include_self)
  got, want = value_and_grads([f, unblocked(LOSSES[name], include_self)], *args, **kwargs)
  assert np.isfinite(want[0]) and want[0] != 0
  assert_close(got, want)


@pytest.mark.parametrize("name", sorted(METRICS))
def test_blocked_metric_equals_unblocked(name):
  embeddings, labels, *_ = data()
  f = jax.jit(jaxrank.blocked_loss(METRICS[name], block_size=BLOCK))
  want = jax.jit(unblocked(METRICS[name]))(embeddings, labels)
  np.testing.assert_allclose(f(embeddings, labels), want, rtol=1e-6)


def test_graded_multi_hot_relevance_in_ndcg():
  """Multi-hot labels give graded relevance (shared labels), which NDCG uses: the blocks' rows of
  the relevance are those of the whole matrix."""
  embeddings, *_ = data()
  multi_hot = jnp.asarray(np.random.default_rng(2).random((B, 6)) < 0.5, jnp.int32)
  loss_fn = LOSSES["simplified_tie_aware_ndcg"]
  got = jit_value_and_grad(jaxrank.blocked_loss(loss_fn, block_size=5))(embeddings, multi_hot)
  want = jit_value_and_grad(unblocked(loss_fn))(embeddings, multi_hot)
  np.testing.assert_allclose(got[0], want[0], rtol=2e-6)
  np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


def test_affinity_relevance_with_a_gallery():
  embeddings, _, gallery, _, gallery_where = data()
  rng = np.random.default_rng(3)
  affinity = jnp.asarray(rng.integers(0, 3, (B, B + M)), jnp.float32)
  loss_fn = LOSSES["calibration"]
  kwargs = dict(affinity=affinity, gallery_embeddings=gallery, gallery_where=gallery_where)

  def ref(e):
    scores, relevance, where = jaxrank.batch_retrieval(e, **kwargs)
    return loss_fn(scores, relevance, where=where)

  f = jaxrank.blocked_loss(loss_fn, block_size=BLOCK)
  got = jit_value_and_grad(lambda e: f(e, **kwargs))(embeddings)
  want = jit_value_and_grad(ref)(embeddings)
  np.testing.assert_allclose(got[0], want[0], rtol=2e-6)
  np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


def test_the_mean_is_over_the_valid_lists_of_every_block():
  """A numpy reference of the reduction: the per-list values of the unblocked loss, averaged over
  the valid lists (weighted), equal the blocked value, whatever the blocks hold."""
  embeddings, labels, *_ = data()
  labels = labels.at[:5].set(jnp.arange(100, 105))  # The first block has no valid list at all.
  weights = np.random.default_rng(4).random(B).astype(np.float32)
  scores, relevance, where = jaxrank.batch_retrieval(embeddings, labels)
  values = np.asarray(
    jax.jit(functools.partial(jaxrank.soft_binning_ap_loss, reduce_fn=None))(
      scores, relevance, where=where
    )
  )
  same_class = np.asarray(labels)[:, None] == np.asarray(labels)[None, :]
  valid = np.any(same_class & ~np.eye(B, dtype=bool), axis=1)  # A positive besides the query.
  want = np.sum(weights * values * valid) / np.sum(weights * valid)
  f = jax.jit(jaxrank.blocked_loss(jaxrank.soft_binning_ap_loss, block_size=BLOCK))
  np.testing.assert_allclose(f(embeddings, labels, weights=weights), want, rtol=1e-6)
  no_valid = jnp.arange(B) + 100  # No list has a positive: 0, with a zero gradient.
  value, grad = jit_value_and_grad(lambda e: f(e, no_valid, weights=weights))(embeddings)
  assert float(value) == 0.0 and not np.any(np.asarray(grad))


@functools.cache
def calibration_reference():
  embeddings, labels, *_ = data()
  return jit_value_and_grad(unblocked(LOSSES["calibration"]))(embeddings, labels)


@pytest.mark.parametrize("block_size", [1, B, 100])
def test_any_block_size_gives_the_same_value(block_size):
  """One query per block, and blocks of the whole batch or more (one block)."""
  embeddings, labels, *_ = data()
  f = jaxrank.blocked_loss(LOSSES["calibration"], block_size=block_size)
  got = jit_value_and_grad(f)(embeddings, labels)
  want = calibration_reference()
  np.testing.assert_allclose(got[0], want[0], rtol=2e-6)
  np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
  "similarity_fn", [jaxrank.similarity.dot_product, lambda q, x: -jnp.abs(q @ x.T)]
)
def test_other_similarity_rules(similarity_fn):
  """A built-in rule (its items prepared once) and any other function of (queries, items)."""
  embeddings, labels, *_ = data()
  loss_fn = LOSSES["calibration"]
  f = jaxrank.blocked_loss(loss_fn, block_size=BLOCK, similarity_fn=similarity_fn)
  got = jit_value_and_grad(f)(embeddings, labels)
  want = jit_value_and_grad(unblocked(loss_fn, similarity_fn=similarity_fn))(embeddings, labels)
  np.testing.assert_allclose(got[0], want[0], rtol=2e-6)
  np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)


def test_decomposability_gap_of_the_whole_batch():
  embeddings, labels, *_ = data(batch=12)
  gap = functools.partial(jaxrank.decomposability_gap, num_batches=3)
  got = jax.jit(jaxrank.blocked_loss(gap, block_size=5))(embeddings, labels)
  np.testing.assert_allclose(got, jax.jit(unblocked(gap))(embeddings, labels), rtol=1e-6)


def test_composes_with_chunked_value_and_grad():
  """The backbone in chunks (its activations), the loss in blocks (its scores): the gradient of
  the parameters equals the plain one."""
  model = nnx.Linear(7, D, rngs=nnx.Rngs(0))
  graphdef, params = nnx.split(model, nnx.Param)
  embed = lambda p, x: nnx.merge(graphdef, p)(x)
  rng = np.random.default_rng(5)
  x = jnp.asarray(rng.standard_normal((16, 7)), jnp.float32)
  y = jnp.asarray(rng.integers(0, 4, 16))
  loss_fn = LOSSES["fastap"]
  blocked = jaxrank.blocked_loss(loss_fn, block_size=6)
  step = jax.jit(jaxrank.chunked_value_and_grad(embed, blocked, chunk_size=4))
  value, grads = step(params, x, y)
  want, want_grads = jit_value_and_grad(lambda p: unblocked(loss_fn)(embed(p, x), y))(params)
  np.testing.assert_allclose(value, want, rtol=2e-6)
  for g, w in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads)):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["fastap", "blackbox_ap"])
def test_temporaries_grow_with_the_block_not_the_batch(name):
  """Nothing of the size of the whole `[B, B]` scores exists, in the one-pass gradient as in the
  blackbox losses' recomputing backward pass: the compiled step's temporaries."""
  rng = np.random.default_rng(6)
  e = jnp.asarray(rng.standard_normal((256, 8)), jnp.float32)
  y = jnp.asarray(rng.integers(0, 32, 256))

  def temporaries(f):
    compiled = jax.jit(jax.grad(f)).lower(e, y).compile()
    return compiled.memory_analysis().temp_size_in_bytes

  loss_fn = LOSSES[name]
  whole = temporaries(unblocked(loss_fn))
  in_blocks = temporaries(jaxrank.blocked_loss(loss_fn, block_size=16))
  assert whole > 256 * 256 * 4  # At least one [B, B] float32 array.
  assert in_blocks < whole / 4, (in_blocks, whole)


@pytest.mark.parametrize("max_relevant", [None, 1], ids=["sort", "counting"])
def test_the_blackbox_gradient_takes_the_true_cotangent(max_relevant):
  """The blackbox backward moves the scores by `interpolation` times the cotangent, so the gradient
  of `3 * f` is not three times that of `f`: the blocked loss (which recomputes each block with the
  true cotangent for them, both ways of ranking) gives the unblocked gradient of `3 * f`."""
  embeddings, *_ = data()
  labels = jnp.arange(B) % 7  # One relevant item per list.
  loss_fn = functools.partial(jaxrank.blackbox_ap_loss, max_relevant=max_relevant)
  blocked = jaxrank.blocked_loss(loss_fn, block_size=BLOCK)
  got = jax.jit(jax.grad(lambda e: 3.0 * blocked(e, labels)))(embeddings)
  want = jax.jit(jax.grad(lambda e: 3.0 * unblocked(loss_fn)(e, labels)))(embeddings)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  once = jax.jit(jax.grad(lambda e: blocked(e, labels)))(embeddings)
  assert not np.allclose(3.0 * once, got, rtol=1e-3)  # Not linear in the cotangent.


def test_the_blackbox_gradient_of_the_loss_itself_takes_one_sweep(monkeypatch):
  """`jax.value_and_grad(f)` (the training step) takes each blackbox block's gradient in the
  forward sweep, with the value: the CPU's numpy sorts (counted) run twice per block, the ranks
  and their perturbed ranks, as in the unblocked step (the pass that finds the mean's denominator
  sorts nothing: XLA removes the loss's work there); the gradient of `3 * f` recomputes each
  block (two sorts more). Both equal the unblocked ones."""
  embeddings, *_ = data()
  labels = jnp.arange(B) % 7
  sorts = []
  numpy_ranks = host_kernels.numpy_descending_ranks
  counted = lambda scores: sorts.append(1) or numpy_ranks(scores)
  monkeypatch.setattr(host_kernels, "numpy_descending_ranks", counted)
  loss_fn = jaxrank.blackbox_ap_loss
  blocked = jaxrank.blocked_loss(loss_fn, block_size=BLOCK)
  num_blocks = -(-B // BLOCK)
  for scale, sorts_per_block in [(1.0, 2), (3.0, 4)]:
    sorts.clear()
    step = jax.value_and_grad(lambda e: scale * blocked(e, labels))  # noqa: B023
    got = jax.block_until_ready(jax.jit(step)(embeddings))
    assert len(sorts) == sorts_per_block * num_blocks, (scale, len(sorts))
    want = jax.value_and_grad(lambda e: scale * unblocked(loss_fn)(e, labels))  # noqa: B023
    for g, w in zip(got, jax.jit(want)(embeddings)):
      np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_the_blackbox_is_found_in_a_loss_whose_jit_was_traced_before():
  """A user's loss that calls its own jitted function, traced before with the same shapes: the
  blocked loss runs none of its Python then (JAX's trace cache), yet finds the blackbox rank in
  the block's jaxpr and takes the gradient with the true cotangent."""
  embeddings, *_ = data()
  labels = jnp.arange(B) % 7
  per_list = jax.jit(lambda s, y, w: jaxrank.blackbox_ap_loss(s, y, where=w, reduce_fn=None))

  def loss_fn(scores, labels, *, where, reduce_fn=jnp.mean):
    return reduce_fn(per_list(scores, labels, where), where=jnp.any(where & (labels > 0), -1))

  size = min(BLOCK, B)  # Trace `per_list` at the block's shapes, as a first step would.
  per_list.trace(jnp.zeros((size, B)), jnp.zeros((size, B), bool), jnp.ones((size, B), bool))
  blocked = jaxrank.blocked_loss(loss_fn, block_size=BLOCK)
  got = jax.jit(jax.grad(lambda e: 3.0 * blocked(e, labels)))(embeddings)
  want = jax.jit(jax.grad(lambda e: 3.0 * unblocked(loss_fn)(e, labels)))(embeddings)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_uses_blackbox_rank_reads_nested_jaxprs():
  scores = jnp.linspace(0.0, 1.0, 12).reshape(3, 4)
  rank = jax.jit(lambda s: blackbox_ranks.blackbox_ranks(s, 1.0))
  nested = jax.make_jaxpr(lambda s: jax.lax.cond(True, rank, jnp.negative, s))(scores)
  assert blackbox_ranks.uses_blackbox_rank(nested)
  looped = jax.make_jaxpr(lambda s: jax.lax.map(rank, s[None])[0])(scores)
  assert blackbox_ranks.uses_blackbox_rank(looped)
  assert not blackbox_ranks.uses_blackbox_rank(jax.make_jaxpr(ranking.descending_ranks)(scores))


# ---------------------------------------------------------------------------------------------
# Errors.


@pytest.mark.parametrize(
  "block_size, error, message",
  [
    (0, ValueError, "block_size must be a positive int, got 0"),
    (-3, ValueError, "block_size must be a positive int"),
    (2.0, TypeError, "block_size must be a positive int, got 2.0"),
    (True, TypeError, "block_size must be a positive int"),
    (None, TypeError, "block_size must be a positive int, got None"),
  ],
)
def test_bad_block_sizes_are_clear_errors(block_size, error, message):
  with pytest.raises(error, match=re.escape(message)):
    jaxrank.blocked_loss(jaxrank.fastap_loss, block_size=block_size)


def test_sum_of_two_losses_is_refused():
  def two_means(scores, labels, *, where, reduce_fn):
    return jaxrank.supap_loss(
      scores, labels, where=where, reduce_fn=reduce_fn
    ) + jaxrank.calibration_loss(scores, labels, where=where, reduce_fn=reduce_fn)

  embeddings, labels, *_ = data()
  with pytest.raises(ValueError, match="reduced over lists 2 times .a sum of losses.*roadmap_loss"):
    jaxrank.blocked_loss(two_means, block_size=BLOCK)(embeddings, labels)


def test_a_loss_changed_after_its_mean_is_refused():
  def one_minus(scores, labels, *, where, reduce_fn):
    return 1 - jaxrank.ap_metric(scores, labels, where=where, reduce_fn=reduce_fn)

  embeddings, labels, *_ = data()
  with pytest.raises(ValueError, match="changed the mean after its reduction"):
    jaxrank.blocked_loss(one_minus, block_size=BLOCK)(embeddings, labels)


def test_a_loss_with_its_own_reduction_is_refused():
  def mean_of_nonzero(values, *, where):
    return jnp.sum(values, where=where) / jnp.maximum(jnp.sum(where & (values > 0)), 1)

  def own(scores, labels, *, where, reduce_fn):
    del reduce_fn
    return jaxrank.triplet_loss(scores, labels, where=where, reduce_fn=mean_of_nonzero)

  embeddings, labels, *_ = data()
  with pytest.raises(ValueError, match="never called its reduce_fn"):
    jaxrank.blocked_loss(own, block_size=BLOCK)(embeddings, labels)


def test_bad_inputs_are_the_errors_of_batch_retrieval():
  embeddings, labels, *_ = data()
  f = jaxrank.blocked_loss(jaxrank.fastap_loss, block_size=BLOCK)
  with pytest.raises(ValueError, match=r"blocked_loss: labels have shape \(3,\) but embeddings"):
    f(embeddings, labels[:3])
  with pytest.raises(ValueError, match="blocked_loss: give exactly one of labels"):
    f(embeddings)
  with pytest.raises(ValueError, match="blocked_loss: weights have shape"):
    jaxrank.blocked_loss(jaxrank.triplet_loss, block_size=BLOCK)(
      embeddings, labels, weights=jnp.ones((B, B))
    )
  with pytest.raises(TypeError, match="blocked_loss: loss_fn must be a function"):
    jaxrank.blocked_loss("fastap", block_size=BLOCK)
