"""`sharded_loss(..., block_size=)` on 8 devices: each device's queries in blocks, with the loss and
gradient of one device on the whole batch."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jaxrank
from jaxrank._src import host_kernels

AXIS = "batch"  # The axis of conftest.py's `mesh` fixture.


def data(batch=40, dim=6, seed=0):
  rng = np.random.default_rng(seed)
  labels = np.repeat(np.arange(batch // 4), 4)[rng.permutation(batch)]
  centres = 1.5 * rng.standard_normal((batch // 4, dim))
  embeddings = rng.standard_normal((batch, dim)) + centres[labels]
  return jnp.asarray(embeddings, jnp.float32), jnp.asarray(labels)


def single_device(loss_fn, include_self=False):
  def loss(embeddings, labels):
    scores, relevance, where = jaxrank.batch_retrieval(
      embeddings, labels, include_self=include_self
    )
    return loss_fn(scores, relevance, where=where)

  return loss


@pytest.mark.parametrize(
  "loss_fn, include_self",
  [
    (jaxrank.fastap_loss, False),
    (functools.partial(jaxrank.smoothap_loss, temperature=0.05), True),
    (jaxrank.blackbox_ap_loss, False),
  ],
  ids=["fastap", "smoothap_include_self", "blackbox_ap"],
)
def test_sharded_blocked_equals_single_device(mesh, loss_fn, include_self):
  """5 queries per device in blocks of 3 (rows 0-2 and 2-4: the last block overlaps)."""
  embeddings, labels = data()
  labels = labels.at[:5].set(jnp.arange(100, 105))  # Device 0's queries have no positive.
  want, want_grad = jax.value_and_grad(single_device(loss_fn, include_self))(embeddings, labels)
  sharded = jaxrank.sharded_loss(loss_fn, mesh, AXIS, include_self=include_self, block_size=3)
  got, grad = jax.jit(jax.value_and_grad(sharded))(embeddings, labels)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)


class MLP(nnx.Module):
  def __init__(self, rngs):
    self.hidden = nnx.Linear(6, 16, rngs=rngs)
    self.out = nnx.Linear(16, 4, rngs=rngs)

  def __call__(self, x):
    return self.out(nnx.relu(self.hidden(x)))


def test_chunked_backbone_with_sharded_blocked_loss(mesh):
  """The three at once: the network in chunks, the loss sharded, each device's queries in
  blocks."""
  graphdef, params = nnx.split(MLP(nnx.Rngs(0)), nnx.Param)
  embed = lambda p, x: nnx.merge(graphdef, p)(x)
  x, labels = data(batch=64)
  loss = jaxrank.sharded_loss(jaxrank.supap_loss, mesh, AXIS, block_size=3)
  step = jax.jit(jaxrank.chunked_value_and_grad(embed, loss, chunk_size=16))
  value, grads = step(params, x, labels)
  want_value, want_grads = jax.value_and_grad(
    lambda p: single_device(jaxrank.supap_loss)(embed(p, x), labels)
  )(params)
  np.testing.assert_allclose(value, want_value, rtol=1e-5)
  for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_bad_block_size_and_a_sum_of_losses_are_clear_errors(mesh):
  with pytest.raises(ValueError, match="sharded_loss: block_size must be a positive int, got 0"):
    jaxrank.sharded_loss(jaxrank.fastap_loss, mesh, AXIS, block_size=0)

  def two_means(scores, labels, *, where, reduce_fn):
    return jaxrank.supap_loss(
      scores, labels, where=where, reduce_fn=reduce_fn
    ) + jaxrank.calibration_loss(scores, labels, where=where, reduce_fn=reduce_fn)

  embeddings, labels = data()
  with pytest.raises(ValueError, match="sharded_loss: loss_fn must return a mean over lists"):
    jaxrank.sharded_loss(two_means, mesh, AXIS, block_size=2)(embeddings, labels)


def test_sharded_blackbox_gradient_of_the_loss_takes_one_sweep(mesh, monkeypatch):
  """The blackbox's one-sweep gradient holds on every device: with `jax.value_and_grad` of the
  loss itself each device sorts each of its blocks twice (ranks and perturbed ranks, the CPU's
  numpy sorts counted), as the unblocked step; with another cotangent, twice more."""
  embeddings, labels = data()
  sorts = []
  numpy_ranks = host_kernels.numpy_descending_ranks
  counted = lambda scores: sorts.append(1) or numpy_ranks(scores)
  monkeypatch.setattr(host_kernels, "numpy_descending_ranks", counted)
  loss_fn = jaxrank.blackbox_ap_loss
  sharded = jaxrank.sharded_loss(loss_fn, mesh, AXIS, block_size=3)  # 2 blocks per device.
  for scale, sorts_per_block in [(1.0, 2), (3.0, 4)]:
    sorts.clear()
    got = jax.jit(jax.value_and_grad(lambda e: scale * sharded(e, labels)))(embeddings)  # noqa: B023
    jax.block_until_ready(got)
    assert len(sorts) == mesh.size * 2 * sorts_per_block, (scale, len(sorts))
    want = jax.value_and_grad(lambda e: scale * single_device(loss_fn)(e, labels))(embeddings)  # noqa: B023
    for g, w in zip(got, want):
      np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
