"""A batch against one learned vector per class: the shared primitive of the proxy losses
(`proxy.py`, where the vectors are proxies) and the classification losses (`classification.py`,
where they are a classifier's class weights).

Both families take `embeddings [B, D]`, labels (integer classes `[B]`, or multi-hot `[B, C]`
where the loss allows it), one vector per class `[C, D]` and an optional `where [B]`, and compare
each embedding with every class vector by their cosine, `[B, C]`, never `[B, B]`. This module
holds what they share: the input checks with their messages (`check_inputs`), the masked cosines
(`cosine_scores`, with the marking that makes the vectors' gradient the sum over devices inside
`shard_map`) and the log-sum-exp over a masked set of classes (`masked_logsumexp`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jaxrank._src import checks
from jaxrank._src import lists
from jaxrank._src import similarity


@dataclasses.dataclass(frozen=True)
class Vectors:
  """How a family names its class vectors in its messages: the argument (`"proxies"`) and one
  of them (`"proxy"`)."""

  name: str
  one: str


PROXIES = Vectors("proxies", "proxy")
CLASS_WEIGHTS = Vectors("class_weights", "row of class weights")


def positive_classes(
  fn: str,
  labels: jax.typing.ArrayLike,
  where: jax.Array,
  num_items: int,
  num_classes: int,
  vectors: Vectors,
  *,
  multi_hot: bool = True,
) -> jax.Array:
  """`[B, C]` boolean: whether class `c` is a positive of item `i` (its class, or one of its
  labels), from class labels `[B]` or (with `multi_hot`) multi-hot labels `[B, C]`."""
  labels = jnp.asarray(labels)
  layouts = (
    f"[{num_items}] (one class per embedding) or [{num_items}, {num_classes}] (multi-hot, one "
    f"column per {vectors.one})"
  )
  if labels.ndim == 1:
    checks.check_int_labels(fn, "labels", labels, layout="[B]")
    checks.check_shape(
      fn, "labels", labels, (num_items,), layout=layouts if multi_hot else f"[{num_items}]"
    )
    checks.check_class_indices(
      fn,
      labels,
      where,
      num_classes,
      fix=f"{vectors.name} [C, D] has C = {num_classes} rows, one per class: give every class "
      f"a {vectors.one}, or mask the item out with where.",
    )
    return labels[:, None] == jnp.arange(num_classes)[None, :]
  if not multi_hot:
    raise ValueError(
      f"{fn}: labels must be integer class labels [B], one class per embedding, got shape "
      f"{labels.shape}; this loss has no multi-hot form (its margin moves the one target "
      "class's logit): for multi-hot labels use normalized_softmax_loss."
    )
  if labels.ndim != 2:
    raise ValueError(
      f"{fn}: labels must be integer class labels [B] or multi-hot labels [B, C], got shape "
      f"{labels.shape}."
    )
  if not (jnp.issubdtype(labels.dtype, jnp.number) or labels.dtype == jnp.bool_):
    raise TypeError(f"{fn}: multi-hot labels must be numeric or boolean, got dtype {labels.dtype}.")
  checks.check_shape(fn, "labels", labels, (num_items, num_classes), layout=layouts)
  return labels >= 1


def check_inputs(
  fn: str,
  embeddings: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  class_vectors: jax.typing.ArrayLike,
  where: jax.typing.ArrayLike | None,
  vectors: Vectors,
  *,
  multi_hot: bool = True,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """Checked `embeddings [B, D]`, class vectors `[C, D]`, positive classes `[B, C]`, mask `[B]`."""
  embeddings = checks.check_floating(fn, "embeddings", embeddings, ndim=2, layout="[B, D]")
  class_vectors = checks.check_floating(fn, vectors.name, class_vectors, ndim=2, layout="[C, D]")
  (num_items, dim), num_classes = embeddings.shape, class_vectors.shape[0]
  if class_vectors.shape[1] != dim or num_classes == 0:
    raise ValueError(
      f"{fn}: {vectors.name} have shape {class_vectors.shape} but embeddings "
      f"{embeddings.shape}; give one {vectors.one} per class with the embeddings' dimension, "
      f"{vectors.name} [C, {dim}] with C >= 1."
    )
  where = checks.check_mask(fn, "where", where, (num_items,), like="batch", broadcast=False)
  positive = positive_classes(
    fn, labels, where, num_items, num_classes, vectors, multi_hot=multi_hot
  )
  return embeddings, class_vectors, positive, where


def cosine_scores(embeddings: jax.Array, class_vectors: jax.Array, where: jax.Array) -> jax.Array:
  """Cosine similarities `[B, C]` in at least float32, masked items' rows set to 0.

  Masked embeddings are replaced by ones before the cosine (so a NaN among them reaches neither
  the value nor any gradient, the class vectors' included). Inside `shard_map` the replicated
  class vectors are marked varying like the embeddings: the transpose of that marking sums their
  gradient over the devices.
  """
  class_vectors = lists.varying_like(class_vectors, embeddings)
  safe = jnp.where(where[:, None], embeddings, jnp.ones_like(embeddings))
  scores = similarity.cosine(safe, class_vectors)
  return jnp.where(where[:, None], scores, jnp.zeros_like(scores))


def masked_logsumexp(x: jax.Array, mask: jax.Array) -> jax.Array:
  """`log sum_{mask} exp(x)` over the last axis, shifted by the largest kept entry; 0 where the
  mask is empty (lists the callers leave out); masked entries get a zero gradient."""
  top = jnp.max(jnp.where(mask, x, -jnp.inf), axis=-1)
  top = jax.lax.stop_gradient(jnp.where(jnp.isinf(top), jnp.zeros_like(top), top))
  shifted = jnp.where(mask, x - top[..., None], jnp.zeros_like(x))
  total = jnp.sum(jnp.where(mask, jnp.exp(shifted), jnp.zeros_like(x)), axis=-1)
  return top + jnp.log(jnp.where(total > 0, total, jnp.ones_like(total)))
