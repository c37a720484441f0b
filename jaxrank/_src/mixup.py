r"""Similarity mixup (SiMix): virtual positives mixed from pairs of a class's items.

Patel, Tolias and Matas 2022 (CVPR, "Recall@k Surrogate Loss with Large Batches and Similarity
Mixup", Sec. 3.3; code: yash0307/RecallatK_surrogate, src/mixup.py) add to each in-batch list
virtual items, each mixed from a pair `(a, b)` of items of one class with a weight
`alpha ~ U(0, 1)`:

.. math::
  s(q, v) = \alpha\, s(q, a) + (1 - \alpha)\, s(q, b)

the similarity of a query `q` to the virtual item `v`, relevant to `q` as `a` and `b` are. For dot
products this is the similarity to the mixed embedding `alpha x_a + (1 - alpha) x_b`, not
normalised again (the released code mixes the embeddings so, and the loss takes dot products).

Two forms, both jittable with static shapes (`num_pairs` virtual items, whatever the batch):

* `similarity_mixup`: SiMix's own form, on lists `(scores [Q, n], relevance [Q, n], where)` such
  as `batch_retrieval` gives: `num_pairs` columns appended; the queries stay the real ones;
* `embedding_mixup`: the released recipe's form, on a batch `(embeddings [B, D], labels [B])`:
  `num_pairs` rows appended, which any in-batch loss then takes as queries and as items
  (`batch_retrieval` of the result; mask the invalid rows with its `where`).

The pairs (`mixup_pairs`) are the pairs `i < j` of items with the same label, in row-major order
(`(0, 1), (0, 2), ..., (1, 2), ...`), the first `num_pairs` of them; a batch with fewer pairs gets
invalid virtual items (masked, weight 0). The released recipe mixes every pair of each class of a
batch of `m` samples per class (its `pos_mixup`, written for `m` in {3, 4, 6}): pass
`num_pairs = classes * m * (m - 1) // 2`. Only the order of the virtual items differs, which no
list loss sees. Cost: O(B^2) to find the pairs, O(Q num_pairs) (or O(num_pairs D)) to mix.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrank._src import checks
from jaxrank._src import retrieval


class MixupPairs(NamedTuple):
  """The pairs of items mixed into virtual ones, each array `[num_pairs]`.

  Attributes:
    first: index of the pair's first item `a` (0 for an invalid pair).
    second: index of its second item `b` (0 for an invalid pair).
    valid: whether the pair exists (False past the batch's number of same-label pairs).
  """

  first: jax.Array
  second: jax.Array
  valid: jax.Array


def mixup_pairs(
  labels: jax.typing.ArrayLike,
  *,
  num_pairs: int,
  where: jax.typing.ArrayLike | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The first `num_pairs` pairs `i < j` of valid items with equal class labels, row-major.

  Args:
    labels: `[B]` integer class labels.
    num_pairs: the number of pairs, a positive Python int (static: the shapes depend on it).
    where: optional `[B]` boolean mask of valid items (masked items are in no pair).

  Returns:
    `(first, second, valid)`, a named tuple of `[num_pairs]` arrays: the pairs' items `a` and `b`
    (0 for a missing pair) and whether each pair exists (False past the batch's number of
    same-label pairs). O(B^2) time and memory.

  >>> import jax.numpy as jnp
  >>> pairs = mixup_pairs(jnp.array([0, 0, 1, 1, 0]), num_pairs=5)
  >>> pairs.first.tolist(), pairs.second.tolist(), pairs.valid.tolist()
  ([0, 0, 1, 2, 0], [1, 4, 4, 3, 0], [True, True, True, True, False])
  """
  fn = "mixup_pairs"
  labels = retrieval.check_labels(fn, labels)
  if labels.ndim != 1:
    raise ValueError(f"{fn}: labels must be integer class labels [B], got shape {labels.shape}.")
  checks.check_positive_int(fn, "num_pairs", num_pairs)
  where = checks.check_mask(fn, "where", where, labels.shape)
  b = labels.shape[0]
  index = jnp.arange(b)
  same = (labels[:, None] == labels[None, :]) & where[:, None] & where[None, :]
  upper = same & (index[:, None] < index[None, :])
  flat = jnp.nonzero(upper.reshape(-1), size=num_pairs, fill_value=-1)[0]
  valid = flat >= 0
  flat = jnp.maximum(flat, 0)
  return MixupPairs(first=flat // b, second=flat % b, valid=valid)


def mixup_weights(key: jax.Array, num_pairs: int, dtype=jnp.float32) -> jax.Array:
  """`[num_pairs]` mixing weights `alpha ~ U(0, 1)` (the released code's `np.random.rand()`)."""
  return jax.random.uniform(key, (num_pairs,), dtype=dtype)


def similarity_mixup(
  scores: jax.typing.ArrayLike,
  relevance: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  key: jax.Array,
  num_pairs: int,
  where: jax.typing.ArrayLike | None = None,
  weights: jax.typing.ArrayLike | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  r"""SiMix on lists: `num_pairs` virtual items appended to every query's list.

  .. math::
    s(q, v) = \alpha_v\, s(q, a_v) + (1 - \alpha_v)\, s(q, b_v), \qquad
    \mathrm{rel}(q, v) = \mathrm{rel}(q, a_v)

  (Patel et al. 2022, Sec. 3.3), for the pairs `(a_v, b_v)` of `mixup_pairs(labels)` among the
  list's items and `alpha_v ~ U(0, 1)` drawn from `key`: `a` and `b` share a class, so the virtual
  item is relevant exactly to the queries of that class (its relevance is that of `b` where `a` is
  masked in the list). Self-inclusion: a virtual item mixed from the query itself and another
  item stays in the query's list (as in the released recipe, where it is one of the query's
  positives), while the query's own column keeps its `where`. A virtual item is masked in a list
  where both its items are masked, and everywhere when its pair is missing (fewer same-label
  pairs than `num_pairs`).

  Args:
    scores: `[Q, n]` floating scores of the lists (`batch_retrieval`'s), higher is better.
    relevance: `[Q, n]` relevance of the items.
    labels: `[n]` integer class labels of the list's items (the batch's, in-batch).
    key: a `jax.random` key for the mixing weights.
    num_pairs: the number of virtual items, a positive Python int.
    where: optional `[Q, n]` boolean mask of valid items; an item masked in every list is in no
      pair.
    weights: optional `[num_pairs]` mixing weights instead of drawing them (tests, replays).

  Returns:
    `(scores, relevance, where)`, each `[Q, n + num_pairs]`: the lists with the virtual items
    appended, for any list-level loss. O(Q num_pairs) beyond the pairs' O(n^2).

  >>> import jax, jax.numpy as jnp, jaxrank
  >>> labels = jnp.array([0, 0, 1])
  >>> scores, relevance, where = jaxrank.batch_retrieval(jnp.eye(3), labels)
  >>> s, r, w = similarity_mixup(scores, relevance, labels, where=where, key=jax.random.key(0),
  ...                            num_pairs=1, weights=jnp.array([0.25]))
  >>> s[:, 3].tolist(), r[:, 3].tolist(), w[:, 3].tolist()
  ([0.25, 0.75, 0.0], [1, 1, 0], [True, True, True])
  """
  fn = "similarity_mixup"
  scores, relevance, where = checks.check_lists(fn, scores, relevance, where)
  if scores.ndim != 2:
    raise ValueError(f"{fn}: scores must be lists [Q, n], got shape {scores.shape}.")
  in_some_list = jnp.any(where, axis=0)
  a, b, valid = mixup_pairs(labels, num_pairs=num_pairs, where=in_some_list)
  alpha = _weights(fn, key, weights, num_pairs, scores.dtype)
  mixed = alpha * scores[:, a] + (1 - alpha) * scores[:, b]
  # The relevance of the pair's first item valid in the list (a and b share a class).
  mixed_relevance = jnp.where(where[:, a], relevance[:, a], relevance[:, b])
  mixed_where = valid[None, :] & (where[:, a] | where[:, b])
  return (
    jnp.concatenate([scores, mixed], axis=1),
    jnp.concatenate([relevance, mixed_relevance.astype(relevance.dtype)], axis=1),
    jnp.concatenate([where, mixed_where], axis=1),
  )


def _weights(fn, key, weights, num_pairs, dtype):
  if weights is None:
    return mixup_weights(key, num_pairs, dtype)
  weights = jnp.asarray(weights, dtype)
  checks.check_shape(fn, "weights", weights, (num_pairs,), layout=f"[{num_pairs}]")
  return weights


def embedding_mixup(
  embeddings: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  key: jax.Array,
  num_pairs: int,
  where: jax.typing.ArrayLike | None = None,
  weights: jax.typing.ArrayLike | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  r"""The released recipe's mixup: `num_pairs` virtual embeddings appended to the batch.

  .. math::
    x_v = \alpha_v\, x_{a_v} + (1 - \alpha_v)\, x_{b_v}

  (not normalised again: with dot products, each real query's similarity to `x_v` is
  `similarity_mixup`'s), for the pairs of `mixup_pairs(labels)`, `alpha_v ~ U(0, 1)` from `key`;
  the virtual rows get their pair's label and act as queries and items of any in-batch loss (the
  released code's `pos_mixup` with RS@k over every row, Patel et al. 2022, Sec. 3.3).

  Args:
    embeddings: `[B, D]` floating embeddings.
    labels: `[B]` integer class labels.
    key: a `jax.random` key for the mixing weights.
    num_pairs: the number of virtual rows, a positive Python int.
    where: optional `[B]` boolean mask of valid rows.
    weights: optional `[num_pairs]` mixing weights instead of drawing them.

  Returns:
    `(embeddings [B + num_pairs, D], labels [B + num_pairs], where [B + num_pairs])`: the missing
    pairs' rows are masked (pass `where` to the loss, e.g. as `batch_retrieval`'s lists' mask).

  >>> import jax, jax.numpy as jnp
  >>> e, y, w = embedding_mixup(jnp.eye(3), jnp.array([0, 0, 1]), key=jax.random.key(0),
  ...                           num_pairs=2, weights=jnp.array([0.25, 0.5]))
  >>> e[3:].tolist(), y.tolist(), w.tolist()
  ([[0.25, 0.75, 0.0], [1.0, 0.0, 0.0]], [0, 0, 1, 0, 0], [True, True, True, True, False])
  """
  fn = "embedding_mixup"
  checks.check_array(fn, "embeddings", embeddings, kind="floating", ndim=2, layout="[B, D]")
  embeddings = jnp.asarray(embeddings)
  where = checks.check_mask(fn, "where", where, embeddings.shape[:1])
  first, second, valid = mixup_pairs(labels, num_pairs=num_pairs, where=where)
  alpha = _weights(fn, key, weights, num_pairs, embeddings.dtype)[:, None]
  alpha = jnp.where(valid[:, None], alpha, 1)  # An invalid pair copies row 0, masked.
  mixed = alpha * embeddings[first] + (1 - alpha) * embeddings[second]
  labels = jnp.asarray(labels)
  return (
    jnp.concatenate([embeddings, mixed]),
    jnp.concatenate([labels, labels[first]]),
    jnp.concatenate([where, valid]),
  )
