"""Tests of `chunked_value_and_grad`: the chunked gradient equals the whole-batch gradient."""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jaxrank


class MLP(nnx.Module):
  def __init__(self, rngs):
    self.hidden = nnx.Linear(12, 16, rngs=rngs)
    self.out = nnx.Linear(16, 6, rngs=rngs)

  def __call__(self, x):
    return self.out(nnx.relu(self.hidden(x)))


class CNN(nnx.Module):
  def __init__(self, rngs):
    self.conv = nnx.Conv(1, 4, kernel_size=(3, 3), rngs=rngs)
    self.norm = nnx.LayerNorm(4, rngs=rngs)
    self.out = nnx.Linear(4 * 8 * 8, 6, rngs=rngs)

  def __call__(self, x):
    h = nnx.relu(self.norm(self.conv(x)))
    return self.out(h.reshape(h.shape[0], -1))


def batch(model_name, size=24, seed=0):
  rng = np.random.default_rng(seed)
  shape = (size, 12) if model_name == "mlp" else (size, 8, 8, 1)
  x = jnp.asarray(rng.standard_normal(shape), jnp.float32)
  y = jnp.asarray(np.repeat(np.arange(size // 4), 4)[rng.permutation(size)])
  return x, y


def in_batch(loss_fn):
  def loss(embeddings, labels):
    scores, relevance, where = jaxrank.batch_retrieval(embeddings, labels)
    return loss_fn(scores, relevance, where=where)

  return loss


LOSSES = {
  "fastap": in_batch(jaxrank.fastap_loss),
  "smoothap": in_batch(functools.partial(jaxrank.smoothap_loss, temperature=0.05)),
  "blackbox_ap": in_batch(jaxrank.blackbox_ap_loss),
  "blackbox_recall": in_batch(functools.partial(jaxrank.blackbox_recall_loss, interpolation=1.0)),
  # Patel et al. 2022's recipe: RS@k through the two-pass chunked gradient.
  "recall_at_k_surrogate": in_batch(
    functools.partial(jaxrank.recall_at_k_surrogate_loss, temperature=0.05)
  ),
}


@pytest.mark.parametrize("model_name", ["mlp", "cnn"])
@pytest.mark.parametrize("loss_name", sorted(LOSSES))
def test_chunked_equals_unchunked(model_name, loss_name):
  model = (MLP if model_name == "mlp" else CNN)(nnx.Rngs(0))
  graphdef, params = nnx.split(model, nnx.Param)
  embed = lambda p, x: nnx.merge(graphdef, p)(x)
  loss = LOSSES[loss_name]
  x, y = batch(model_name)
  want_value, want_grads = jax.jit(jax.value_and_grad(lambda p: loss(embed(p, x), y)))(params)
  chunked = jax.jit(jaxrank.chunked_value_and_grad(embed, loss, chunk_size=8))
  value, grads = chunked(params, x, y)
  np.testing.assert_allclose(value, want_value, rtol=1e-5)
  for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  # The gradient is a usable NNX state: it updates the model through an optimizer.
  assert jax.tree.structure(grads) == jax.tree.structure(params)


def test_embed_fn_is_traced_once_per_stage_not_once_per_chunk():
  calls = []

  def embed(w, x):
    calls.append(x.shape)
    return x @ w

  x, y = batch("mlp", size=32)
  w = jnp.ones((12, 5)) / 12
  jaxrank.chunked_value_and_grad(embed, LOSSES["blackbox_ap"], chunk_size=4)(w, x, y)
  assert calls == [(4, 12), (4, 12)]


def test_pytree_inputs_and_errors():
  def embed(w, inputs):
    return inputs["a"] @ w + inputs["b"]

  rng = np.random.default_rng(1)
  inputs = {"a": jnp.asarray(rng.standard_normal((8, 3)), jnp.float32), "b": jnp.ones((8, 2))}
  y = jnp.array([0, 0, 1, 1, 2, 2, 3, 3])
  w = jnp.asarray(rng.standard_normal((3, 2)), jnp.float32)
  loss = LOSSES["blackbox_ap"]
  value, grad = jaxrank.chunked_value_and_grad(embed, loss, chunk_size=2)(w, inputs, y)
  want_value, want_grad = jax.value_and_grad(lambda w: loss(embed(w, inputs), y))(w)
  np.testing.assert_allclose(value, want_value, rtol=1e-6)
  np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-7)
  with pytest.raises(ValueError, match="not a multiple of chunk_size 3"):
    jaxrank.chunked_value_and_grad(embed, loss, chunk_size=3)(w, inputs, y)
  with pytest.raises(ValueError, match="disagree"):
    bad_inputs = {"a": inputs["a"], "b": jnp.ones((4, 2))}
    jaxrank.chunked_value_and_grad(embed, loss, chunk_size=2)(w, bad_inputs, y)
  with pytest.raises(ValueError, match="positive int"):
    jaxrank.chunked_value_and_grad(embed, loss, chunk_size=0)


def test_arguments_use_the_shared_checks():
  embed = lambda w, x: x @ w
  loss = LOSSES["blackbox_ap"]
  # chunk_size is a static int: a bool or a float is a TypeError, a numpy int is fine.
  for bad in (True, 2.0, "2"):
    message = re.escape(f"chunked_value_and_grad: chunk_size must be a positive int, got {bad!r}")
    with pytest.raises(TypeError, match=message):
      jaxrank.chunked_value_and_grad(embed, loss, chunk_size=bad)
  with pytest.raises(ValueError, match="chunk_size must be a positive int, got -1"):
    jaxrank.chunked_value_and_grad(embed, loss, chunk_size=-1)
  x, y = jnp.ones((8, 3)).at[::2].set(-1.0), jnp.arange(8) % 2
  w = jnp.ones((3, 2))
  value, _ = jaxrank.chunked_value_and_grad(embed, loss, chunk_size=np.int64(4))(w, x, y)
  assert np.isfinite(value)
  with pytest.raises(TypeError, match="embed_fn must be a function, got NoneType"):
    jaxrank.chunked_value_and_grad(None, loss, chunk_size=2)
  with pytest.raises(TypeError, match="loss_fn must be a function"):
    jaxrank.chunked_value_and_grad(embed, "smoothap", chunk_size=2)
  # Every input needs the batch axis.
  with pytest.raises(ValueError, match="inputs must be an array or a pytree of arrays"):
    jaxrank.chunked_value_and_grad(embed, loss, chunk_size=2)(w, {"x": x, "t": 1.0}, y)


# The loss runs whole in one stage, so one loss suffices for the dense network; the convolutional
# one (whose gradient is what the host loop is for) takes every loss.
@pytest.mark.parametrize(
  "model_name, loss_name", [("mlp", "fastap")] + [("cnn", name) for name in sorted(LOSSES)]
)
def test_host_chunked_equals_unchunked_with_uneven_last_chunk(model_name, loss_name):
  model = (MLP if model_name == "mlp" else CNN)(nnx.Rngs(0))
  graphdef, params = nnx.split(model, nnx.Param)
  embed = lambda p, x: nnx.merge(graphdef, p)(x)
  loss = LOSSES[loss_name]
  x, y = batch(model_name)
  want_value, want_grads = jax.jit(jax.value_and_grad(lambda p: loss(embed(p, x), y)))(params)
  # 24 = 10 + 10 + 4 (even chunks: the pytree test below).
  step = jaxrank.host_chunked_value_and_grad(embed, loss, chunk_size=10)
  value, grads = step(params, x, y)
  np.testing.assert_allclose(value, want_value, rtol=1e-5)
  assert jax.tree.structure(grads) == jax.tree.structure(params)
  for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  # A second step reuses the compiled stages and gives the same result (the donated gradient
  # buffer is a fresh one each step).
  again, grads_again = step(params, x, y)
  np.testing.assert_array_equal(again, value)
  for got, want in zip(jax.tree.leaves(grads_again), jax.tree.leaves(grads)):
    np.testing.assert_array_equal(got, want)


def test_host_chunked_pytree_inputs_and_errors():
  def embed(w, inputs):
    return inputs["a"] @ w + inputs["b"]

  rng = np.random.default_rng(1)
  inputs = {"a": jnp.asarray(rng.standard_normal((8, 3)), jnp.float32), "b": jnp.ones((8, 2))}
  y = jnp.array([0, 0, 1, 1, 2, 2, 3, 3])
  w = jnp.asarray(rng.standard_normal((3, 2)), jnp.float32)
  loss = LOSSES["blackbox_ap"]
  want_value, want_grad = jax.value_and_grad(lambda w: loss(embed(w, inputs), y))(w)
  for chunk_size in (2, 3, 8, 20):  # a chunk larger than the batch is one chunk
    step = jaxrank.host_chunked_value_and_grad(embed, loss, chunk_size=chunk_size)
    value, grad = step(w, inputs, y)
    np.testing.assert_allclose(value, want_value, rtol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-7)
  step = jaxrank.host_chunked_value_and_grad(embed, loss, chunk_size=2)
  with pytest.raises(ValueError, match="host_chunked_value_and_grad: inputs disagree"):
    step(w, {"a": inputs["a"], "b": jnp.ones((4, 2))}, y)
  with pytest.raises(ValueError, match="inputs must be an array or a pytree of arrays"):
    step(w, {"a": inputs["a"], "t": 1.0}, y)
  for bad in (True, 2.0, "2"):
    message = re.escape(
      f"host_chunked_value_and_grad: chunk_size must be a positive int, got {bad!r}"
    )
    with pytest.raises(TypeError, match=message):
      jaxrank.host_chunked_value_and_grad(embed, loss, chunk_size=bad)
  for bad in (0, -1):
    with pytest.raises(ValueError, match=f"chunk_size must be a positive int, got {bad}"):
      jaxrank.host_chunked_value_and_grad(embed, loss, chunk_size=bad)
  with pytest.raises(TypeError, match="embed_fn must be a function, got NoneType"):
    jaxrank.host_chunked_value_and_grad(None, loss, chunk_size=2)
  with pytest.raises(TypeError, match="loss_fn must be a function"):
    jaxrank.host_chunked_value_and_grad(embed, "smoothap", chunk_size=2)
