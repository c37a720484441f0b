"""A memory of past batches for any loss: a pure, jittable ring buffer of embeddings and labels.

RaMBO (Rolinek et al. 2020, sec. 4.3) keeps the scores of the last tau batches so that each query is
ranked against more items than one batch holds, "but the gradients only flow through the current
batch"; cross-batch memories (XBM) keep many more. In jaxrank the memory stores embeddings, so it
works with every loss: its contents enter `batch_retrieval` as a gallery.

>>> import jax.numpy as jnp
>>> import jaxrank
>>> from jaxrank import memory
>>> state = memory.init(size=8, embedding_dim=2)
>>> e, y = jnp.array([[1.0, 0.0], [0.0, 1.0]]), jnp.array([0, 1])
>>> scores, relevance, where = jaxrank.batch_retrieval(
...     e, y, gallery_embeddings=state.embeddings, gallery_labels=state.labels,
...     gallery_where=state.where)
>>> scores.shape, int(where.sum())  # The empty memory adds 8 masked columns.
((2, 10), 2)
>>> state = memory.push(state, e, y)  # After the loss: stored without gradient.
>>> int(state.where.sum()), int(state.position)
(2, 2)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


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
  if not isinstance(size, int) or size < 1:
    raise ValueError(f"memory.init: size must be a positive int, got {size!r}.")
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
  embeddings = jnp.asarray(embeddings)
  labels = jnp.asarray(labels)
  size = state.where.shape[0]
  if embeddings.ndim != 2 or embeddings.shape[1:] != state.embeddings.shape[1:]:
    raise ValueError(
        f"memory.push: embeddings must be [B, {state.embeddings.shape[1]}], got "
        f"{embeddings.shape}."
    )
  b = embeddings.shape[0]
  if b > size:
    raise ValueError(f"memory.push: a batch of {b} items does not fit a memory of {size}.")
  if labels.shape != (b, *state.labels.shape[1:]):
    raise ValueError(
        f"memory.push: labels must be {(b, *state.labels.shape[1:])} for this memory, got "
        f"{labels.shape}."
    )
  slots = (state.position + jnp.arange(b, dtype=jnp.int32)) % size
  stored = jax.lax.stop_gradient(embeddings).astype(state.embeddings.dtype)
  return MemoryState(
      embeddings=state.embeddings.at[slots].set(stored),
      labels=state.labels.at[slots].set(labels.astype(state.labels.dtype)),
      where=state.where.at[slots].set(True),
      position=(state.position + b) % size,
  )
