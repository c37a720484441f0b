"""Tests of the memory of past batches: ring order, masks, and gradients only through the batch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrank
from jaxrank import memory


def test_ring_order_and_where():
  state = memory.init(size=5, embedding_dim=2)
  assert not bool(state.where.any())
  batches = [jnp.full((2, 2), float(i)) for i in range(4)]
  for i, batch in enumerate(batches):
    state = jax.jit(memory.push)(state, batch, jnp.full((2,), i, jnp.int32))
  # Items 0..7 (two per batch) went to slots 0,1,2,3,4,0,1,2: the last five pushed items survive.
  np.testing.assert_array_equal(state.embeddings[:, 0], [2.0, 3.0, 3.0, 1.0, 2.0])
  np.testing.assert_array_equal(state.labels, [2, 3, 3, 1, 2])
  assert bool(state.where.all()) and int(state.position) == 3


def test_partially_filled_memory_masks_its_empty_slots():
  state = memory.push(memory.init(4, 3), jnp.ones((1, 3)), jnp.array([7]))
  np.testing.assert_array_equal(state.where, [True, False, False, False])
  e = jnp.asarray(np.random.default_rng(0).standard_normal((3, 3)), jnp.float32)
  y = jnp.array([7, 1, 7])
  scores, relevance, where = jaxrank.batch_retrieval(
    e,
    y,
    gallery_embeddings=state.embeddings,
    gallery_labels=state.labels,
    gallery_where=state.where,
  )
  np.testing.assert_array_equal(where[:, 3:], np.tile([True, False, False, False], (3, 1)))
  np.testing.assert_array_equal(relevance[:, 3], [1, 0, 1])
  # The loss with the memory equals the loss on the batch plus the stored item.
  with_memory = jaxrank.ap_metric(scores, relevance, where=where, reduce_fn=None)
  s2, r2, w2 = jaxrank.batch_retrieval(
    e, y, gallery_embeddings=jnp.ones((1, 3)), gallery_labels=jnp.array([7])
  )
  np.testing.assert_allclose(with_memory, jaxrank.ap_metric(s2, r2, where=w2, reduce_fn=None))


def test_gradients_flow_only_through_the_current_batch():
  @jax.jit  # One compilation instead of op-by-op dispatch: the test is about the data flow.
  def loss(params, state, x, y):
    e = x @ params
    scores, relevance, where = jaxrank.batch_retrieval(
      e,
      y,
      gallery_embeddings=state.embeddings,
      gallery_labels=state.labels,
      gallery_where=state.where,
    )
    value = jaxrank.blackbox_ap_loss(scores, relevance, where=where)
    return value, memory.push(state, e, y)

  rng = np.random.default_rng(1)
  params = jnp.asarray(rng.standard_normal((4, 3)), jnp.float32)
  x = jnp.asarray(rng.standard_normal((6, 4)), jnp.float32)
  y = jnp.array([0, 1, 2, 0, 1, 2])
  state = memory.init(12, 3)
  # The memory's contents hold no trace of params: gradient w.r.t. them through the state is zero.
  _, state = loss(params, state, x, y)
  grad_through_state = jax.grad(lambda p: jnp.sum(memory.push(state, x @ p, y).embeddings))(params)
  np.testing.assert_array_equal(grad_through_state, 0)
  grads, _ = jax.grad(loss, has_aux=True)(params, state, x, y)
  assert bool(jnp.all(jnp.isfinite(grads))) and float(jnp.abs(grads).sum()) > 0


def test_multi_hot_labels_and_errors():
  state = memory.init(3, 2, label_shape=(4,))
  first = jnp.array([[1, 0, 0, 1], [0, 1, 0, 0]])
  state = memory.push(state, jnp.array([[1.0, 2.0], [3.0, 4.0]]), first)
  assert state.labels.shape == (3, 4)
  np.testing.assert_array_equal(state.labels, [[1, 0, 0, 1], [0, 1, 0, 0], [0, 0, 0, 0]])
  np.testing.assert_array_equal(state.where, [True, True, False])
  # The ring wraps: the next two go to slots 2 and 0.
  state = jax.jit(memory.push)(
    state, jnp.array([[5.0, 6.0], [7.0, 8.0]]), jnp.array([[0, 0, 1, 1], [1, 1, 1, 0]])
  )
  np.testing.assert_array_equal(state.labels, [[1, 1, 1, 0], [0, 1, 0, 0], [0, 0, 1, 1]])
  np.testing.assert_array_equal(state.embeddings, [[7.0, 8.0], [3.0, 4.0], [5.0, 6.0]])
  np.testing.assert_array_equal(state.where, [True, True, True])
  # As a gallery, the stored multi-hot labels give the affinities (shared labels) to the queries.
  _, relevance, where = jaxrank.batch_retrieval(
    jnp.ones((1, 2)),
    jnp.array([[0, 0, 1, 0]]),
    gallery_embeddings=state.embeddings,
    gallery_labels=state.labels,
    gallery_where=state.where,
  )
  np.testing.assert_array_equal(relevance[0, -3:], [1, 0, 1])
  np.testing.assert_array_equal(where[0, -3:], [True, True, True])
  with pytest.raises(ValueError, match="does not fit"):
    memory.push(state, jnp.ones((4, 2)), jnp.zeros((4, 4), jnp.int32))
  with pytest.raises(ValueError, match=r"\[B, 2\]"):
    memory.push(state, jnp.ones((2, 5)), jnp.zeros((2, 4), jnp.int32))
  with pytest.raises(ValueError, match="labels must be"):
    memory.push(state, jnp.ones((2, 2)), jnp.zeros((2,), jnp.int32))
  with pytest.raises(ValueError, match="positive int"):
    memory.init(0, 2)


def test_arguments_use_the_shared_checks():
  # Sizes are static ints: a bool or a float is a TypeError, a numpy int is fine.
  with pytest.raises(TypeError, match="memory.init: size must be a positive int, got True"):
    memory.init(True, 2)
  with pytest.raises(TypeError, match="memory.init: size must be a positive int, got 4.0"):
    memory.init(4.0, 2)
  with pytest.raises(ValueError, match="memory.init: embedding_dim must be a positive int, got 0"):
    memory.init(4, 0)
  with pytest.raises(TypeError, match="memory.init: label_shape must be a tuple of ints, got 4"):
    memory.init(4, 2, label_shape=4)
  with pytest.raises(TypeError, match="each entry of label_shape must be a positive int, got 2.0"):
    memory.init(4, 2, label_shape=(2.0,))
  state = memory.init(np.int64(4), np.int32(2), label_shape=[3])
  assert state.embeddings.shape == (4, 2) and state.labels.shape == (4, 3)
  # Embeddings must be floating point, as everywhere in jaxrank.
  state = memory.init(4, 2)
  with pytest.raises(TypeError, match="memory.push: embeddings must be a floating-point array"):
    memory.push(state, jnp.ones((2, 2), jnp.int32), jnp.zeros(2, jnp.int32))
  with pytest.raises(ValueError, match=r"embeddings must be shaped \[B, 2\], got shape \(2,\)"):
    memory.push(state, jnp.ones(2), jnp.zeros(2, jnp.int32))
  with pytest.raises(ValueError, match=r"labels must be shaped \(2,\), got shape \(3,\)"):
    memory.push(state, jnp.ones((2, 2)), jnp.zeros(3, jnp.int32))
