"""Similarity mixup (SiMix) against the released recipe (`released_simix.py`); relevance, shapes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import released_simix
import torch

import jaxrank


def class_batch(seed, num_classes, per_class, dim=5):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(num_classes * per_class, dim))
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  return x, np.repeat(np.arange(num_classes), per_class)


@pytest.mark.parametrize("per_class", [3, 4, 6])
def test_mixed_similarities_equal_the_released_recipe(per_class):
  x, labels = class_batch(per_class, 3, per_class)
  pairs_per_class = per_class * (per_class - 1) // 2
  num_pairs = 3 * pairs_per_class
  alphas = np.random.default_rng(1).random(num_pairs)
  released = released_simix.pos_mixup(torch.from_numpy(x), 3, alphas.tolist()).numpy()
  # The released rows: each class's block of real rows, then its virtual rows in PAIRS order
  # (all with a < b); jaxrank's virtual row of the same pair gets the same weight.
  pairs = jaxrank.mixup_pairs(labels, num_pairs=num_pairs)
  first, second = np.asarray(pairs.first), np.asarray(pairs.second)
  weights, placed = np.zeros(num_pairs), np.zeros(num_pairs, int)
  real = []
  for c in range(3):
    block = c * (per_class + pairs_per_class)
    real += list(range(block, block + per_class))
    for v, (a, b) in enumerate(released_simix.PAIRS[per_class]):
      (mine,) = np.flatnonzero((first == c * per_class + a) & (second == c * per_class + b))
      weights[mine] = alphas[c * pairs_per_class + v]
      placed[mine] = block + per_class + v
  with jax.enable_x64(True):
    e, y, w = jaxrank.embedding_mixup(
      x, labels, key=jax.random.key(0), num_pairs=num_pairs, weights=weights
    )
    assert e.shape == (3 * per_class + num_pairs, 5) and bool(jnp.all(w))
    rows = np.concatenate([np.asarray(real), placed])
    np.testing.assert_allclose(np.asarray(e), released[rows], rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(np.asarray(y), np.concatenate([labels, labels[first]]))
    # SiMix on the lists: the real queries' similarities to the virtual items are the same.
    scores, relevance, where = jaxrank.batch_retrieval(jnp.asarray(x), labels)
    s, r, m = jaxrank.similarity_mixup(
      scores,
      relevance,
      labels,
      where=where,
      key=jax.random.key(0),
      num_pairs=num_pairs,
      weights=weights,
    )
    sims = released[rows[: 3 * per_class]] @ released[placed].T
    np.testing.assert_allclose(np.asarray(s[:, 3 * per_class :]), sims, rtol=1e-12, atol=1e-14)
  same_class = labels[:, None] == labels[first][None, :]
  np.testing.assert_array_equal(np.asarray(r[:, 3 * per_class :]), same_class.astype(int))
  assert bool(jnp.all(m[:, 3 * per_class :]))


def test_missing_pairs_are_masked_and_shapes_are_static():
  labels = jnp.array([0, 1, 0, 2])
  fn = jax.jit(
    lambda s, rel, w, key: jaxrank.similarity_mixup(s, rel, labels, where=w, key=key, num_pairs=3)
  )
  scores, relevance, where = jaxrank.batch_retrieval(jnp.eye(4), labels)
  s, r, w = fn(scores, relevance, where, jax.random.key(3))
  assert s.shape == r.shape == w.shape == (4, 7)
  np.testing.assert_array_equal(np.asarray(w[:, 4:]), [[True, False, False]] * 4)
  e, y, m = jaxrank.embedding_mixup(jnp.eye(4), labels, key=jax.random.key(3), num_pairs=3)
  assert e.shape == (7, 4) and m.tolist() == [True] * 5 + [False] * 2
  alpha = float(s[0, 4])  # Query 0 against its own mix with item 2: alpha * 1 + (1 - alpha) * 0.
  assert 0 <= alpha <= 1
  np.testing.assert_allclose(e[4], alpha * jnp.eye(4)[0] + (1 - alpha) * jnp.eye(4)[2], rtol=1e-6)


def test_mixup_feeds_a_loss():
  x, labels = class_batch(9, 4, 4)
  scores, relevance, where = jaxrank.batch_retrieval(jnp.asarray(x, jnp.float32), labels)
  s, r, w = jaxrank.similarity_mixup(
    scores, relevance, labels, where=where, key=jax.random.key(1), num_pairs=24
  )
  loss = jaxrank.smoothap_loss(s, r, where=w)
  assert np.isfinite(float(loss))


def test_bad_inputs_raise():
  with pytest.raises(ValueError, match="^mixup_pairs: num_pairs"):
    jaxrank.mixup_pairs(jnp.array([0, 0]), num_pairs=0)
  with pytest.raises(ValueError, match="^mixup_pairs: labels must be integer class labels"):
    jaxrank.mixup_pairs(jnp.zeros((2, 3), jnp.int32), num_pairs=1)
