"""The exact gradient of a non-decomposable loss over a batch too large to backpropagate at once.

AP surrogates couple every item of a batch, so bigger batches train better, but a network's
activations for the whole batch may not fit in memory. FastAP (Cakir et al. 2019, sec. 4.1) and
Revaud et al. 2019 (sec. 3.3, "multistaged backpropagation") compute the same gradient in three
stages:

1. embed the batch chunk by chunk, keeping only the embeddings (no activations);
2. take the loss and its gradient with respect to the embeddings, `[B, D]`;
3. embed each chunk again and backpropagate its slice of that gradient into the parameters
   (a `jax.vjp` per chunk), summing over chunks.

Peak memory is that of one chunk's activations plus what the loss needs for `B` embeddings (for
in-batch retrieval, the `B x B` score matrix), instead of the activations of the whole batch. The
price is a second forward pass.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxrank import types
from jaxrank._src import checks


def _split(tree: types.PyTree, num_chunks: int) -> types.PyTree:
  return jax.tree.map(lambda x: x.reshape(num_chunks, x.shape[0] // num_chunks, *x.shape[1:]), tree)


def chunked_value_and_grad(
  embed_fn: Callable[[types.PyTree, types.PyTree], jax.Array],
  loss_fn: Callable[[jax.Array, types.PyTree], jax.Array],
  *,
  chunk_size: int,
) -> Callable[[types.PyTree, types.PyTree, types.PyTree], tuple[jax.Array, types.PyTree]]:
  """Returns `f(params, inputs, labels) -> (loss, grad_params)` computed in chunks of the batch.

  `f` gives the value and gradient of `loss_fn(embed_fn(params, inputs), labels)` over the whole
  batch, exactly (up to floating-point summation order), while backpropagating through the network
  one chunk of `chunk_size` inputs at a time (the three stages of the module docstring). Chunks are
  a `lax.map` and a `lax.scan`, so `f` is jittable and traces `embed_fn` twice (once per stage),
  never once per chunk.

  Args:
    embed_fn: `embed_fn(params, inputs_chunk) -> embeddings_chunk [c, D]`, pure. With Flax NNX,
      split the model once (`graphdef, params, rest = nnx.split(model, nnx.Param, ...)`) and merge
      inside: `lambda p, x: nnx.merge(graphdef, p, rest)(x)`.
    loss_fn: `loss_fn(embeddings [B, D], labels) -> scalar`, any jaxrank loss through
      `batch_retrieval` (or anything else that couples the batch).
    chunk_size: inputs per chunk; the batch size must be a multiple of it.

  Returns:
    `f(params, inputs, labels)`: `inputs` is an array (or pytree of arrays) with the batch on the
    leading axis, `labels` is passed to `loss_fn` as is. It returns `(loss, grad_params)`.

  **Speed on CPU.** XLA's CPU backend computes the weight gradients of convolutions inside a loop
  body much slower than outside one (the loop gets a non-canonical convolution layout; the
  measurement is in docs/guide/scale.rst, "Large batches"), so on CPU a chunked step of a
  convolutional network is much slower than an unchunked one (`experiments/benchmarks/chunked.py`).
  Unrolling the loop restores the speed but lets XLA keep every chunk's activations alive, which
  defeats the purpose; GPUs and TPUs do not have this problem, and dense layers are not affected.
  Outside `jit`, `host_chunked_value_and_grad` computes the same result with the loop in Python and
  is about as fast as the unchunked step.

  **BatchNorm.** Each chunk is normalised with its own batch statistics, so a network in training
  mode gives different embeddings (and gradients) in chunks than on the whole batch, and running
  averages are not updated (`embed_fn` must be pure). Use the network in inference mode (frozen
  statistics, as both papers do with their pretrained backbones), or a normalisation that does not
  look across examples (LayerNorm, GroupNorm); update running statistics, if needed, in a separate
  pass.

  >>> import jax, jax.numpy as jnp
  >>> from flax import nnx
  >>> import jaxrank
  >>> model = nnx.Linear(8, 4, rngs=nnx.Rngs(0))
  >>> graphdef, params = nnx.split(model, nnx.Param)
  >>> embed = lambda p, x: nnx.merge(graphdef, p)(x)
  >>> def loss(e, y):
  ...   s, r, w = jaxrank.batch_retrieval(e, y)
  ...   return jaxrank.blackbox_ap_loss(s, r, where=w)
  >>> x, y = jnp.ones((16, 8)).at[::2].set(-1.0), jnp.arange(16) % 2
  >>> step = jax.jit(jaxrank.chunked_value_and_grad(embed, loss, chunk_size=4))
  >>> value, grads = step(params, x, y)
  >>> full_value, full_grads = jax.jit(jax.value_and_grad(lambda p: loss(embed(p, x), y)))(params)
  >>> bool(jnp.allclose(value, full_value))
  True
  """
  fn = "chunked_value_and_grad"
  checks.check_callable(fn, "embed_fn", embed_fn, hint="Pass embed_fn(params, inputs_chunk).")
  checks.check_callable(fn, "loss_fn", loss_fn, hint="Pass loss_fn(embeddings, labels).")
  checks.check_positive_int(fn, "chunk_size", chunk_size)

  def value_and_grad(params, inputs, labels):
    batch = _check_inputs(fn, inputs)
    if batch % chunk_size:
      raise ValueError(
        f"{fn}: the batch of {batch} is not a multiple of chunk_size "
        f"{chunk_size}; pick a chunk size that divides it."
      )
    chunks = _split(inputs, batch // chunk_size)

    # Stage 1: embeddings only; nothing is kept for a backward pass.
    embeddings = jax.lax.map(lambda x: embed_fn(params, x), chunks)
    embeddings = embeddings.reshape(batch, *embeddings.shape[2:])
    # Stage 2: the loss and its gradient with respect to the embeddings.
    loss, grad_embeddings = jax.value_and_grad(loss_fn)(embeddings, labels)
    grad_chunks = grad_embeddings.reshape(
      batch // chunk_size, chunk_size, *grad_embeddings.shape[1:]
    )

    # Stage 3: embed each chunk again and pull its slice of the gradient back into the parameters.
    def accumulate(total, chunk):
      x, cotangent = chunk
      _, pullback = jax.vjp(lambda p: embed_fn(p, x), params)
      (grad,) = pullback(cotangent.astype(embeddings.dtype))
      return jax.tree.map(jnp.add, total, grad), None

    zeros = jax.tree.map(jnp.zeros_like, params)
    grads, _ = jax.lax.scan(accumulate, zeros, (chunks, grad_chunks))
    return loss, grads

  return value_and_grad


def _check_inputs(fn: str, inputs: types.PyTree) -> int:
  """Returns the batch size shared by every leaf of `inputs`, or raises a ValueError."""
  leaves = jax.tree.leaves(inputs)
  if not leaves or any(jnp.ndim(x) == 0 for x in leaves):
    raise ValueError(
      f"{fn}: inputs must be an array or a pytree of arrays with the batch on the leading "
      f"axis, got shapes {[jnp.shape(x) for x in leaves]}."
    )
  sizes = {jnp.shape(x)[0] for x in leaves}
  if len(sizes) != 1:
    raise ValueError(
      f"{fn}: inputs disagree on the batch size: {sorted(sizes)}; give every input the same "
      "leading (batch) axis."
    )
  (batch,) = sizes
  return batch


def host_chunked_value_and_grad(
  embed_fn: Callable[[types.PyTree, types.PyTree], jax.Array],
  loss_fn: Callable[[jax.Array, types.PyTree], jax.Array],
  *,
  chunk_size: int,
) -> Callable[[types.PyTree, types.PyTree, types.PyTree], tuple[jax.Array, types.PyTree]]:
  """Like `chunked_value_and_grad`, but the loop over chunks runs in Python, between jitted stages.

  `f(params, inputs, labels)` returns the same `(loss, grad_params)` as `chunked_value_and_grad`
  (the three stages of the module docstring), but each stage is its own compiled program: stage 1
  embeds one chunk, stage 2 takes the loss and its gradient with respect to all `B` embeddings,
  stage 3 re-embeds one chunk and adds its vector-Jacobian product into the running gradient
  (whose buffer is donated, so it is updated in place). Python calls stages 1 and 3 once per chunk.

  Use it for the training step on CPU, where it is about as fast as the unchunked step, while
  `chunked_value_and_grad` is several times slower (see its "Speed on CPU" note and
  `experiments/benchmarks/chunked.py`): no convolution gradient sits inside an XLA loop. Since it
  calls Python between stages, `f` cannot itself be jitted, vmapped or put inside `shard_map`; there
  use `chunked_value_and_grad`. Peak memory is one chunk's activations (each stage frees its own
  buffers when it returns) plus what the loss needs for `B` embeddings, as for
  `chunked_value_and_grad`.

  The last chunk may be smaller than `chunk_size` (the batch need not be a multiple of it); it
  compiles stages 1 and 3 once more, for its shape. Compiled stages are cached by `jax.jit`, so
  build `f` once and call it every step.

  The BatchNorm caveat of `chunked_value_and_grad` applies unchanged.

  Args:
    embed_fn: `embed_fn(params, inputs_chunk) -> embeddings_chunk [c, D]`, pure (as for
      `chunked_value_and_grad`).
    loss_fn: `loss_fn(embeddings [B, D], labels) -> scalar`.
    chunk_size: inputs per chunk; the last chunk holds the remainder.

  Returns:
    `f(params, inputs, labels) -> (loss, grad_params)`, with `inputs` an array or pytree of arrays
    with the batch on the leading axis.

  >>> import jax, jax.numpy as jnp
  >>> from flax import nnx
  >>> import jaxrank
  >>> model = nnx.Linear(8, 4, rngs=nnx.Rngs(0))
  >>> graphdef, params = nnx.split(model, nnx.Param)
  >>> embed = lambda p, x: nnx.merge(graphdef, p)(x)
  >>> def loss(e, y):
  ...   s, r, w = jaxrank.batch_retrieval(e, y)
  ...   return jaxrank.blackbox_ap_loss(s, r, where=w)
  >>> x, y = jnp.ones((14, 8)).at[::2].set(-1.0), jnp.arange(14) % 2
  >>> step = jaxrank.host_chunked_value_and_grad(embed, loss, chunk_size=4)  # chunks 4, 4, 4, 2
  >>> value, grads = step(params, x, y)
  >>> full_value, full_grads = jax.jit(jax.value_and_grad(lambda p: loss(embed(p, x), y)))(params)
  >>> bool(jnp.allclose(value, full_value))
  True
  """
  fn = "host_chunked_value_and_grad"
  checks.check_callable(fn, "embed_fn", embed_fn, hint="Pass embed_fn(params, inputs_chunk).")
  checks.check_callable(fn, "loss_fn", loss_fn, hint="Pass loss_fn(embeddings, labels).")
  checks.check_positive_int(fn, "chunk_size", chunk_size)
  chunk_size = int(chunk_size)

  embed_stage = jax.jit(embed_fn)
  loss_stage = jax.jit(jax.value_and_grad(loss_fn))

  def _accumulate(total, params, x, cotangent):
    embeddings, pullback = jax.vjp(lambda p: embed_fn(p, x), params)
    (grad,) = pullback(cotangent.astype(embeddings.dtype))
    return jax.tree.map(jnp.add, total, grad)

  backward_stage = jax.jit(_accumulate, donate_argnums=0)

  def value_and_grad(params, inputs, labels):
    batch = _check_inputs(fn, inputs)
    starts = range(0, batch, chunk_size)
    chunks = [jax.tree.map(lambda x, s=s: x[s : s + chunk_size], inputs) for s in starts]
    # Stage 1: embeddings only, one compiled call per chunk.
    embeddings = jnp.concatenate([embed_stage(params, chunk) for chunk in chunks])
    # Stage 2: the loss and its gradient with respect to all embeddings.
    loss, grad_embeddings = loss_stage(embeddings, labels)
    # Stage 3: each chunk's vector-Jacobian product, added into one gradient buffer.
    grads = jax.tree.map(jnp.zeros_like, params)
    for start, chunk in zip(starts, chunks):
      grads = backward_stage(grads, params, chunk, grad_embeddings[start : start + chunk_size])
    return loss, grads

  return value_and_grad
