"""The ring buffer of past batches behind `jaxrank.memory` (documented there)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrank._src import checks


class MemoryState(NamedTuple):
  """The memory: `size` slots, filled in ring order.

  Attributes:
    embeddings: `[size, D]` stored embeddings (no gradient flows into them).
    labels: `[size, ...]` their labels (class labels `[size]` or multi-hot `[size, C]`).
    where: `[size]` whether each slot holds an item yet.
    position: scalar int32, the slot the next item goes to.
  """

  embeddings: jax.Array
  labels: jax.Array
  where: jax.Array
  position: jax.Array


def init(
  size: int,
  embedding_dim: int,
  *,
  dtype: jax.typing.DTypeLike = jnp.float32,
  label_shape: tuple[int, ...] = (),
  label_dtype: jax.typing.DTypeLike = jnp.int32,
) -> MemoryState:
  """An empty memory of `size` items.

  Args:
    size: number of items kept; RaMBO keeps the last tau batches: `size = tau * batch_size`.
    embedding_dim: `D`, the embedding dimension.
    dtype: dtype of the stored embeddings.
    label_shape: shape of one item's label: `()` for class labels, `(C,)` for multi-hot labels.
    label_dtype: dtype of the stored labels.

  Returns:
    A `MemoryState` with every slot empty (`where` all False).
  """
  fn = "memory.init"
  checks.check_positive_int(fn, "size", size)
  checks.check_positive_int(fn, "embedding_dim", embedding_dim)
  if isinstance(label_shape, (str, bytes)) or not hasattr(label_shape, "__iter__"):
    raise TypeError(
      f"{fn}: label_shape must be a tuple of ints, got {label_shape!r}; use () for class "
      "labels and (C,) for multi-hot labels."
    )
  label_shape = tuple(label_shape)
  for entry in label_shape:
    checks.check_positive_int(fn, "each entry of label_shape", entry)
  return MemoryState(
    embeddings=jnp.zeros((size, embedding_dim), dtype),
    labels=jnp.zeros((size, *label_shape), label_dtype),
    where=jnp.zeros((size,), bool),
    position=jnp.zeros((), jnp.int32),
  )


def push(
  state: MemoryState, embeddings: jax.typing.ArrayLike, labels: jax.typing.ArrayLike
) -> MemoryState:
  """Stores a batch in the memory, overwriting the oldest items once it is full.

  The embeddings are stored through `jax.lax.stop_gradient`: when the memory is used as a gallery,
  gradients flow only through the current batch. Pure and jittable; O(B D).

  Args:
    state: the memory.
    embeddings: `[B, D]` embeddings of the batch, `B <= size`.
    labels: `[B, ...]` their labels, shaped like the memory's.

  Returns:
    The new `MemoryState`: item `i` of the batch is in slot `(position + i) % size`.
  """
  fn = "memory.push"
  size, dim = state.embeddings.shape
  embeddings = checks.check_floating(fn, "embeddings", embeddings)
  checks.check_shape(fn, "embeddings", embeddings, (None, dim), layout=f"[B, {dim}]")
  labels = jnp.asarray(labels)
  b = embeddings.shape[0]
  if b > size:
    raise ValueError(
      f"{fn}: a batch of {b} items does not fit a memory of {size}; push it in parts, or "
      "init a larger memory."
    )
  label_shape = state.labels.shape[1:]
  hint = "Give one label per embedding, each shaped like the memory's labels."
  checks.check_shape(fn, "labels", labels, (b, *label_shape), hint=hint)
  slots = (state.position + jnp.arange(b, dtype=jnp.int32)) % size
  stored = jax.lax.stop_gradient(embeddings).astype(state.embeddings.dtype)
  return MemoryState(
    embeddings=state.embeddings.at[slots].set(stored),
    labels=state.labels.at[slots].set(labels.astype(state.labels.dtype)),
    where=state.where.at[slots].set(True),
    position=(state.position + b) % size,
  )
