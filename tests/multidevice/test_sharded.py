"""Sharded in-batch retrieval on 8 devices equals the single-device computation: loss, gradient.

The proxy and classification losses too: proxies (class weights) replicated, the batch split over
the devices.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

import jaxrank
from jaxrank._src import platforms

AXIS = "batch"  # The axis of conftest.py's `mesh` fixture.


def data(batch=32, dim=6, seed=0, per_class=4):
  rng = np.random.default_rng(seed)
  labels = np.repeat(np.arange(batch // per_class), per_class)[rng.permutation(batch)]
  centres = rng.standard_normal((batch // per_class, dim))
  embeddings = rng.standard_normal((batch, dim)) + 1.5 * centres[labels]
  return jnp.asarray(embeddings, jnp.float32), jnp.asarray(labels)


# One loss of each family (histogram, blackbox, smooth rank) and an exact metric.
LOSSES = {
  "fastap": jaxrank.fastap_loss,
  "soft_binning_ap": jaxrank.soft_binning_ap_loss,
  "smoothap": functools.partial(jaxrank.smoothap_loss, temperature=0.05),
  "supap": jaxrank.supap_loss,
  "roadmap": jaxrank.roadmap_loss,
  # The smooth-rank engine's other metrics: Recall@k (one sum per cut-off) and graded NDCG.
  "recall_at_k_surrogate": functools.partial(jaxrank.recall_at_k_surrogate_loss, ks=(1, 2, 4)),
  "sup_ndcg": jaxrank.sup_ndcg_loss,
  "blackbox_ap": jaxrank.blackbox_ap_loss,
  "blackbox_recall": functools.partial(jaxrank.blackbox_recall_loss, interpolation=1.0),
  # 3 relevant items per list without the query (counting), 4 with it (more: the sort).
  "blackbox_ap_counting": functools.partial(jaxrank.blackbox_ap_loss, max_relevant=3),
  "ap_metric": jaxrank.ap_metric,
}


def single_device(loss_fn, include_self=False):
  def loss(embeddings, labels):
    scores, relevance, where = jaxrank.batch_retrieval(
      embeddings, labels, include_self=include_self
    )
    return loss_fn(scores, relevance, where=where)

  return loss


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("include_self", [False, True])
def test_sharded_loss_and_gradient_equal_single_device(mesh, name, include_self):
  embeddings, labels = data()
  single = single_device(LOSSES[name], include_self)
  want, want_grad = jax.value_and_grad(single)(embeddings, labels)
  sharded = jaxrank.sharded_loss(LOSSES[name], mesh, AXIS, include_self=include_self)
  got, grad = jax.jit(jax.value_and_grad(sharded))(embeddings, labels)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["smoothap", "blackbox_ap"])
def test_sharded_choice_on_accelerators_equals_single_device(mesh, name):
  """The accelerators' run-time choice (`jaxrank._src.bounds`) inside `shard_map`: every branch
  is traced there (a branch whose outputs do not vary over the mesh axis as the others' do is an
  error), and with 15 relevant items per list the general one runs (the smooth-rank losses'
  grouped loop, the blackbox losses' sort): the single device's CPU values and gradients."""
  embeddings, labels = data(per_class=16)
  want, want_grad = jax.value_and_grad(single_device(LOSSES[name]))(embeddings, labels)
  with platforms.forced_platform(platforms.ACCELERATOR):
    sharded = jaxrank.sharded_loss(LOSSES[name], mesh, AXIS)
    assert "cond[" in str(jax.make_jaxpr(sharded)(embeddings, labels))
    got, grad = jax.jit(jax.value_and_grad(sharded))(embeddings, labels)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
  "similarity_fn", [jaxrank.similarity.dot_product, jaxrank.similarity.negative_squared_euclidean]
)
def test_sharded_loss_takes_the_similarity_rule(mesh, similarity_fn):
  embeddings, labels = data()
  loss_fn = functools.partial(jaxrank.smoothap_loss, temperature=0.05)

  def single(e, y):
    scores, relevance, where = jaxrank.batch_retrieval(e, y, similarity_fn=similarity_fn)
    return loss_fn(scores, relevance, where=where)

  want, want_grad = jax.value_and_grad(single)(embeddings, labels)
  sharded = jaxrank.sharded_loss(loss_fn, mesh, AXIS, similarity_fn=similarity_fn)
  got, grad = jax.jit(jax.value_and_grad(sharded))(embeddings, labels)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-5)


def test_sharded_loss_over_more_items_than_one_block(mesh):
  """More than 1,024 items: the scores are products over several item blocks (a loop inside
  `shard_map`), with the value, the gradient and every score of one device."""
  embeddings, labels = data(batch=1040, dim=4)
  loss_fn = functools.partial(jaxrank.smoothap_loss, temperature=0.05)
  want, want_grad = jax.value_and_grad(single_device(loss_fn))(embeddings, labels)
  got, grad = jax.jit(jax.value_and_grad(jaxrank.sharded_loss(loss_fn, mesh, AXIS)))(
    embeddings, labels
  )
  np.testing.assert_allclose(got, want, rtol=1e-5)
  np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)
  scores = jax.jit(
    jax.shard_map(
      lambda e, y: jaxrank.sharded_batch_retrieval(e, y, axis_name=AXIS)[0],
      mesh=mesh,
      in_specs=(P(AXIS), P(AXIS)),
      out_specs=P(AXIS),
    )
  )(embeddings, labels)
  np.testing.assert_array_equal(scores, jaxrank.batch_retrieval(embeddings, labels)[0])


def test_sharded_lists_are_the_rows_of_batch_retrieval(mesh):
  embeddings, labels = data()

  def local(e, y):
    return jaxrank.sharded_batch_retrieval(e, y, axis_name=AXIS)

  got = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS)))(
    embeddings, labels
  )
  want = jaxrank.batch_retrieval(embeddings, labels)
  for a, b in zip(got, want):
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_a_device_without_valid_lists_agrees_with_the_others(mesh):
  embeddings, labels = data()
  labels = labels.at[:4].set(jnp.arange(100, 104))  # Device 0's queries have no positive.
  want = single_device(jaxrank.blackbox_ap_loss)(embeddings, labels)
  got = jax.jit(jaxrank.sharded_loss(jaxrank.blackbox_ap_loss, mesh, AXIS))(embeddings, labels)
  np.testing.assert_allclose(got, want, rtol=1e-6)


def test_uneven_batch_is_a_clear_error(mesh):
  embeddings, labels = data(batch=36)
  with pytest.raises(ValueError, match="multiple of 8"):
    jaxrank.sharded_loss(jaxrank.blackbox_ap_loss, mesh, AXIS)(embeddings, labels)


class MLP(nnx.Module):
  def __init__(self, rngs):
    self.hidden = nnx.Linear(6, 16, rngs=rngs)
    self.out = nnx.Linear(16, 4, rngs=rngs)

  def __call__(self, x):
    return self.out(nnx.relu(self.hidden(x)))


def test_data_parallel_chunked_train_step_equals_single_device(mesh):
  """Parameters replicated, batch sharded, each device embedding its slice in chunks."""
  model = MLP(nnx.Rngs(0))
  graphdef, params = nnx.split(model, nnx.Param)
  embed = lambda p, x: nnx.merge(graphdef, p)(x)
  x, labels = data(batch=64)

  def local_loss(e, y):
    scores, relevance, where = jaxrank.sharded_batch_retrieval(e, y, axis_name=AXIS)
    return jaxrank.blackbox_ap_loss(
      scores, relevance, where=where, reduce_fn=jaxrank.sharded_mean(AXIS)
    )

  step = jax.jit(
    jax.shard_map(
      jaxrank.chunked_value_and_grad(embed, local_loss, chunk_size=4),
      mesh=mesh,
      in_specs=(P(), P(AXIS), P(AXIS)),
      out_specs=(P(), P()),
    )
  )
  value, grads = step(params, x, labels)
  want_value, want_grads = jax.value_and_grad(
    lambda p: single_device(jaxrank.blackbox_ap_loss)(embed(p, x), labels)
  )(params)
  np.testing.assert_allclose(value, want_value, rtol=1e-5)
  for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
  "loss_fn", [jaxrank.soft_binning_ap_loss, jaxrank.contrastive_loss], ids=["map_q", "contrastive"]
)
def test_sharded_mean_of_weighted_lists_equals_the_weighted_mean(mesh, loss_fn):
  """Per-list weights: sum(w * loss) / sum(w) over every device's valid lists, as jnp.mean gives
  on one device (not a weighted sum over the count of lists)."""
  embeddings, labels = data()
  scores, relevance, where = jaxrank.batch_retrieval(embeddings, labels)
  relevance = relevance.at[3].set(0)  # A list without a relevant item: left out of both.
  weights = jnp.linspace(0.5, 3.0, len(labels))

  def loss(s, r, w, weights, reduce_fn):
    return loss_fn(s, r, where=w, weights=weights, reduce_fn=reduce_fn)

  want, want_grad = jax.value_and_grad(loss)(scores, relevance, where, weights, jnp.mean)
  sharded = jax.shard_map(
    functools.partial(loss, reduce_fn=jaxrank.sharded_mean(AXIS)),
    mesh=mesh,
    in_specs=(P(AXIS),) * 4,
    out_specs=P(),
  )
  got, grad = jax.jit(jax.value_and_grad(sharded))(scores, relevance, where, weights)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-7)


PROXY_LOSSES = {
  "proxy_nca": jaxrank.proxy_nca_loss,
  "proxy_nca_plus_plus": jaxrank.proxy_nca_plus_plus_loss,
  "proxy_anchor": jaxrank.proxy_anchor_loss,
  # The classification losses, on class weights replicated as the proxies are.
  "normalized_softmax": jaxrank.normalized_softmax_loss,
  "arcface": jaxrank.arcface_loss,
  "cosface": jaxrank.cosface_loss,
}


@pytest.mark.parametrize("name", sorted(PROXY_LOSSES))
def test_sharded_proxy_loss_and_gradients_equal_single_device(mesh, name):
  """Proxies replicated, each device its slice of the batch, `sharded_mean`: the loss and the
  gradients of the embeddings and of the proxies are one device's. Classes 8 and 9 have no item
  in the batch and device 0's items are masked out, so the means and Proxy-Anchor's count of
  proxies with a positive are the global batch's, not each device's."""
  embeddings, labels = data()  # 32 items of classes 0-7.
  proxies = jnp.asarray(np.random.default_rng(1).standard_normal((10, 6)), jnp.float32)
  where = jnp.arange(32) >= 4
  loss_fn = PROXY_LOSSES[name]
  want, want_grads = jax.value_and_grad(
    lambda e, p: loss_fn(e, labels, p, where=where), argnums=(0, 1)
  )(embeddings, proxies)

  def local(e, y, p, w):
    return loss_fn(e, y, p, where=w, reduce_fn=jaxrank.sharded_mean(AXIS))

  sharded = jax.shard_map(
    local, mesh=mesh, in_specs=(P(AXIS), P(AXIS), P(), P(AXIS)), out_specs=P()
  )
  got, grads = jax.jit(jax.value_and_grad(sharded, argnums=(0, 2)))(
    embeddings, labels, proxies, where
  )
  np.testing.assert_allclose(got, want, rtol=1e-5)
  for g, w in zip(grads, want_grads):
    assert np.abs(w).max() > 1e-3  # Not a trivial case.
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
