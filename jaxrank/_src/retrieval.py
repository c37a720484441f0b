"""In-batch retrieval lists: every item of a batch as a query ranking the batch (and a gallery).

`batch_retrieval` turns a batch of embeddings and labels into the `(scores, relevance, where)` lists
that every list-level metric and loss takes: each embedding is a query ranking the rest of the batch
(and, optionally, a gallery such as a memory bank). `retrieval_inputs`, `check_labels` and
`relevance_matrix` are its checks and relevance, shared with the blocked and sharded losses. The
evaluation of a whole test set, `evaluate_retrieval`, is in `evaluation`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrank import types
from jaxrank._src import checks
from jaxrank._src import similarity


def check_labels(fn: str, labels: jax.typing.ArrayLike) -> jax.Array:
  """Integer class labels `[B]` or multi-hot labels `[B, C]`, else a clear error."""
  labels = jnp.asarray(labels)
  if labels.ndim not in (1, 2):
    raise ValueError(
      f"{fn}: labels must be integer class labels [B] or multi-hot labels [B, C], got shape "
      f"{labels.shape}; pass a [B, B] affinity matrix as affinity= instead."
    )
  if labels.ndim == 1:
    checks.check_int_labels(fn, "labels", labels, layout="[B]")
  return labels


def relevance_matrix(labels: jax.Array, targets: jax.Array) -> jax.Array:
  """Relevance `[B, N]` of `targets` to each query, from class labels `[.]` or multi-hot `[., C]`.

  Class labels: 1 where the classes are equal. Multi-hot: the number of labels two items share (the
  multi-level affinity of He et al. 2018), int32 for integer or boolean labels.
  """
  if labels.ndim == 1:
    return (labels[:, None] == targets[None, :]).astype(jnp.int32)
  out = labels.dtype if jnp.issubdtype(labels.dtype, jnp.floating) else jnp.int32
  return jnp.matmul(labels.astype(out), targets.astype(out).T, preferred_element_type=out)


def batch_retrieval(
  embeddings: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike | None = None,
  *,
  affinity: jax.typing.ArrayLike | None = None,
  include_self: bool = False,
  gallery_embeddings: jax.typing.ArrayLike | None = None,
  gallery_labels: jax.typing.ArrayLike | None = None,
  gallery_where: jax.typing.ArrayLike | None = None,
  similarity_fn: types.SimilarityFn = similarity.cosine,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Every item of a batch as a query ranking the batch (and a gallery): the lists of the losses.

  Scores are `similarity_fn(embeddings, items)`, cosine similarities by default (see
  `jaxrank.similarity` for the others). Relevance comes from one of:

  * integer class labels `[B]`: 1 where two items share the class, else 0;
  * multi-hot labels `[B, C]`: the number of labels two items share (the multi-level affinity of
    He et al. 2018; relevant iff >= 1, graded for NDCG);
  * `affinity=`, a given `[B, B + M]` relevance matrix (then `labels` must be `None`).

  **Self-inclusion.** By default the query itself is masked out of its own list (`where[i, i]` is
  False), the convention of FastAP, RaMBO and mAP_Q. `include_self=True` keeps it, as a relevant
  item scored by its similarity to itself (1 for cosine): the convention of the Smooth-AP and
  ROADMAP code, where the query counts as its own positive.

  A gallery (`gallery_embeddings [M, D]`, `gallery_labels` of the same kind as `labels`, optional
  `gallery_where [M]` for unfilled slots) appends `M` columns: lists are `[B, B + M]`. Gradients
  flow through the gallery embeddings as through the batch; wrap them in `jax.lax.stop_gradient`
  for a memory bank of past batches.

  Args:
    embeddings: `[B, D]` floating embeddings (need not be normalised).
    labels: `[B]` integer labels or `[B, C]` multi-hot labels; `None` when `affinity` is given.
    affinity: optional `[B, B + M]` relevance matrix, instead of labels.
    include_self: keep each query in its own list (see above).
    gallery_embeddings: optional `[M, D]` extra items for every list.
    gallery_labels: `[M]` or `[M, C]` labels of the gallery (with `labels`).
    gallery_where: optional `[M]` boolean mask of valid gallery items.
    similarity_fn: the scoring rule `fn(queries [B, D], items [B + M, D]) -> [B, B + M]`;
      `jaxrank.similarity.cosine` by default.

  Returns:
    `(scores, relevance, where)`, each `[B, B + M]`: the scores (at least float32),
    relevance (int32 for integer or boolean labels), and the boolean mask of valid items. O((B + M)
    B D) time and O(B (B + M)) memory.

  >>> import jax.numpy as jnp
  >>> import jaxrank
  >>> e = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
  >>> scores, relevance, where = jaxrank.batch_retrieval(e, jnp.array([0, 0, 1, 1]))
  >>> float(jaxrank.ap_metric(scores, relevance, where=where))
  1.0
  """
  fn = "batch_retrieval"
  inputs = retrieval_inputs(
    fn, embeddings, labels, affinity, gallery_embeddings, gallery_labels, gallery_where
  )
  b, n = inputs.queries.shape[0], inputs.items.shape[0]
  if inputs.affinity is not None:
    relevance = inputs.affinity
  else:
    # Without an affinity both labels are given (`RetrievalInputs`).
    assert inputs.labels is not None and inputs.item_labels is not None
    relevance = relevance_matrix(inputs.labels, inputs.item_labels)
  scores = similarity_fn(inputs.queries, inputs.items)
  where = jnp.ones((b, n), dtype=bool)
  if not include_self:
    where = where.at[:, :b].set(~jnp.eye(b, dtype=bool))
  if inputs.gallery_where is not None:
    where = where.at[:, b:].set(jnp.broadcast_to(inputs.gallery_where, (b, n - b)))
  return scores, relevance, where


class RetrievalInputs(NamedTuple):
  """`batch_retrieval`'s inputs, checked: the queries `[B, D]`, the items they rank `[B + M, D]`
  (the batch, then the gallery), and the relevance: the labels of the queries and of the items
  (`[B]`/`[B + M]` or multi-hot `[B, C]`/`[B + M, C]`), or the given `[B, B + M]` affinity (then
  both labels are None); `gallery_where` `[M]` or None."""

  queries: jax.Array
  items: jax.Array
  labels: jax.Array | None
  item_labels: jax.Array | None
  affinity: jax.Array | None
  gallery_where: jax.Array | None


def retrieval_inputs(
  fn, embeddings, labels, affinity, gallery_embeddings, gallery_labels, gallery_where
) -> RetrievalInputs:
  """The checked inputs of in-batch retrieval (`batch_retrieval`, `blocked_loss`); errors name
  `fn`."""
  embeddings = checks.check_floating(fn, "embeddings", embeddings, ndim=2, layout="[B, D]")
  b = embeddings.shape[0]
  items = embeddings
  m = 0
  if gallery_embeddings is not None:
    d = embeddings.shape[1]
    gallery_embeddings = checks.check_floating(
      fn, "gallery_embeddings", gallery_embeddings, ndim=2, layout=f"[M, {d}]"
    )
    checks.check_shape(
      fn,
      "gallery_embeddings",
      gallery_embeddings,
      (None, d),
      layout=f"[M, {d}]",
      hint=f"like the embeddings {embeddings.shape}.",
    )
    m = gallery_embeddings.shape[0]
    items = jnp.concatenate([embeddings, gallery_embeddings.astype(embeddings.dtype)], axis=0)
  elif gallery_labels is not None or gallery_where is not None:
    raise ValueError(f"{fn}: gallery_labels/gallery_where given without gallery_embeddings.")
  if gallery_where is not None:
    gallery_where = checks.check_mask(
      fn, "gallery_where", gallery_where, (m,), like="gallery", broadcast=False
    )
  if (labels is None) == (affinity is None):
    raise ValueError(f"{fn}: give exactly one of labels ([B] or [B, C]) and affinity ([B, B + M]).")
  if affinity is not None:
    relevance = jnp.asarray(affinity)
    if relevance.shape != (b, b + m):
      raise ValueError(
        f"{fn}: affinity must be [B, B + M] = {(b, b + m)}, got shape {relevance.shape}."
      )
    return RetrievalInputs(embeddings, items, None, None, relevance, gallery_where)
  labels, targets = _batch_labels(fn, labels, gallery_labels, b, m)
  return RetrievalInputs(embeddings, items, labels, targets, None, gallery_where)


def _batch_labels(fn, labels, gallery_labels, b, m):
  """The checked labels of the queries and of the items they rank (the batch's, then the
  gallery's)."""
  if jnp.shape(labels)[:1] != (b,):
    raise ValueError(f"{fn}: labels have shape {jnp.shape(labels)} but embeddings have {b} rows.")
  if m and gallery_labels is None:
    raise ValueError(f"{fn}: gallery_embeddings need gallery_labels.")
  if gallery_labels is not None and jnp.shape(gallery_labels)[:1] != (m,):
    raise ValueError(
      f"{fn}: gallery_labels have shape {jnp.shape(gallery_labels)} but the gallery has {m} rows."
    )
  labels = check_labels(fn, labels)
  targets = labels
  if gallery_labels is not None:
    gallery_labels = jnp.asarray(gallery_labels)
    if gallery_labels.ndim != labels.ndim or gallery_labels.shape[1:] != labels.shape[1:]:
      raise ValueError(
        f"{fn}: gallery_labels have shape {gallery_labels.shape}, which does not match "
        f"labels of shape {labels.shape} (same kind of labels, one row per gallery item)."
      )
    targets = jnp.concatenate([labels, gallery_labels.astype(labels.dtype)], axis=0)
  return labels, targets
