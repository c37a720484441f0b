"""In-batch losses over blocks of queries: batches as large as the data set in bounded memory.

Every in-batch loss is a mean over lists, one list per query, and each list needs only its own row
of scores. `blocked_loss` therefore never holds the `[B, B + M]` score matrix of a batch: it takes
the queries `block_size` at a time, scores one block against every item (`[block, B + M]`), runs
the list-level loss on those lists, and keeps only the two sums of the mean (`lists.Mean.sums`:
the valid lists' values and their number, or the sum of their weights), which it adds over the
blocks and divides at the end.

The gradient is taken in the same pass, block by block (a `jax.custom_vjp` around the loop): each
block's scores and loss are differentiated (`jax.vjp`) as soon as they are computed, and only the
gradient with respect to the embeddings (`[B, D]` and `[B + M, D]`) is carried from block to block;
the backward pass then scales it by the cotangent of the mean. Nothing is computed twice, so the
time is about the unblocked step's. This is exact when the loss's backward is linear in its
cotangent, as a derivative is. RaMBO's blackbox ranks are not (Algorithm 1 moves the scores by
`interpolation` times the cotangent, which depends on the number of lists in the mean). For a loss
that uses them (found in the block's jaxpr, `blackbox_ranks.uses_blackbox_rank`) the forward pass
takes each block's gradient with the cotangent that differentiating the mean itself gives its
numerator (`1 / the mean's denominator`, found first by a pass over the blocks that XLA reduces to
the lists' validity: the losses' work feeds nothing there and is removed), and the backward pass
uses it when the true cotangent is exactly that one (`jax.grad` of the loss, the training step's
case).
Any other cotangent (a weighted sum of losses, a scaled loss) takes one more pass over the blocks,
each block's scores recomputed and differentiated with the true cotangent (rematerialisation).

Memory: the temporaries of one block's loss and of its gradient, O(block (B + M)) (times the
loss's own factor: bins, relevant items), plus O((B + M) D) for the embeddings and their gradient,
instead of O(B (B + M)).

The same loop blocks each device's queries in `sharded_loss(..., block_size=...)`, where the two
sums are then added over the devices (`sharded_mean`'s `psum`), so that the two compose.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrank import types
from jaxrank._src import blackbox_ranks
from jaxrank._src import checks
from jaxrank._src import lists
from jaxrank._src import retrieval
from jaxrank._src import similarity


class _BlockSums(lists.Mean):
  """The `reduce_fn` given to the loss in each block: a plain mean over the block's lists, which
  also keeps its two sums (`parts`) for the mean over all blocks."""

  def __init__(self):
    super().__init__(jnp.sum)
    self.parts = None
    self.result = None
    self.calls = 0

  def __call__(self, values, where, weights=None):
    self.calls += 1
    self.parts = self.sums(values, where, weights)
    self.result = self.divide(*self.parts)
    return self.result


def _check_one_mean(fn: str, recorder: _BlockSums, out) -> None:
  """Raises unless the loss's value is the one mean over lists it took through `reduce_fn`."""
  if recorder.calls == 1 and out is recorder.result:
    return
  if recorder.calls == 0:
    why = (
      "it never called its reduce_fn as a jaxrank loss does (a loss with its own reduction, "
      "such as a custom reduce_fn fixed by functools.partial, cannot be computed in blocks)"
    )
  elif recorder.calls > 1:
    why = (
      f"it reduced over lists {recorder.calls} times (a sum of losses?): block each term and "
      "add the blocked losses, or give a loss that adds the per-list values before its one "
      "reduction (as roadmap_loss does)"
    )
  else:
    why = (
      "it changed the mean after its reduction (1 - mean, a scale, another term): give the "
      "list-level loss itself"
    )
  raise ValueError(
    f"{fn}: loss_fn must return a mean over lists, the value of the reduce_fn it is given, "
    f"called once; {why}."
  )


class _Blocks(NamedTuple):
  """What a sweep over blocks does, besides its arrays (a static argument of `_block_sums`)."""

  fn: str
  loss_fn: Callable[..., jax.Array]
  block_size: int
  include_self: bool
  similarity_fn: types.SimilarityFn
  reduce: lists.Mean


class _Lists(NamedTuple):
  """The arrays the lists are made of (see `mean_over_blocks`); only `queries` and `items` get
  gradients."""

  queries: jax.Array
  items: jax.Array
  first: jax.Array
  labels: jax.Array | None
  item_labels: jax.Array | None
  affinity: jax.Array | None
  item_where: jax.Array | None
  weights: jax.Array | None


def mean_over_blocks(
  fn: str,
  loss_fn: Callable[..., jax.Array],
  queries: jax.Array,
  items: jax.Array,
  *,
  labels: jax.Array | None,
  item_labels: jax.Array | None,
  affinity: jax.Array | None,
  block_size: int,
  first: jax.Array | int,
  include_self: bool,
  item_where: jax.Array | None,
  weights: jax.Array | None,
  similarity_fn: types.SimilarityFn,
  reduce: lists.Mean,
) -> jax.Array:
  """`loss_fn` over the lists of `queries [Q, D]` ranking `items [N, D]`, `block_size` queries at a
  time: the loss's mean over all `Q` lists, its two sums taken by `reduce.sum_fn` at the end.

  Query `i` is item `first + i` (left out of its own list unless `include_self`); `item_where [N]`
  masks items out of every list; relevance comes from `labels` (`[Q]` or `[Q, C]`) against
  `item_labels`, or from the rows of `affinity [Q, N]`; `weights [Q]` are per-list weights (or
  None). Gradients flow to `queries` and `items` (and, through them, to whatever computed them:
  an all-gather's transpose adds every device's part); the rest is data.
  """
  blocks = _Blocks(fn, loss_fn, int(block_size), bool(include_self), similarity_fn, reduce)
  # Inside `shard_map` the items (gathered: the same on every device) join per-device sums.
  items = lists.varying_like(items, queries)
  data = _Lists(
    queries,
    items,
    jnp.asarray(first, jnp.int32),
    labels,
    item_labels,
    affinity,
    item_where,
    weights,
  )
  numerator, denominator = _block_sums(blocks, data)
  return reduce.divide(reduce.sum_fn(numerator), reduce.sum_fn(denominator))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _block_sums(blocks: _Blocks, data: _Lists) -> tuple[jax.Array, jax.Array]:
  """The two sums `(numerator, denominator)` of the loss's mean over every block's lists."""
  sums, _ = _sweep(blocks, data, cotangent=None)
  return sums


def _block_sums_fwd(blocks, data):
  """One sweep that takes each block's gradient with it. When the loss's backward is linear in its
  cotangent the gradient for cotangent 1 is scaled in `_block_sums_bwd` (exact); otherwise it is
  taken for the cotangent that differentiating the mean gives the numerator, and kept for
  `_block_sums_bwd` with the arrays to sweep again if the true cotangent is another."""
  if _backward_is_linear(blocks, data):
    sums, grads = _sweep(blocks, data, cotangent=1.0)
    return sums, (grads, None, None)
  expected = _mean_cotangent(blocks, data)
  sums, grads = _sweep(blocks, data, cotangent=expected)
  return sums, (grads, data, expected)


def _block_sums_bwd(blocks, residuals, cotangents):
  """The numerator's gradient times its cotangent (the denominator, the count of valid lists or
  the sum of their weights, depends on no embedding)."""
  grads, data, expected = residuals
  numerator_cotangent, _ = cotangents
  if data is None:
    scale = numerator_cotangent
  else:  # The gradient for the expected cotangent, or each block again with the true one.
    grads = jax.lax.cond(
      jnp.all(numerator_cotangent == expected),
      lambda: grads,
      lambda: _sweep(blocks, data, cotangent=numerator_cotangent)[1],
    )
    scale = jnp.ones_like(numerator_cotangent)
  grad_queries, grad_items = grads
  none = _Lists(*(None,) * len(_Lists._fields))
  return (
    none._replace(
      queries=(scale * grad_queries).astype(grad_queries.dtype),
      items=(scale * grad_items).astype(grad_items.dtype),
    ),
  )


_block_sums.defvjp(_block_sums_fwd, _block_sums_bwd)


def _backward_is_linear(blocks: _Blocks, data: _Lists) -> bool:
  """Whether the loss's backward is linear in its cotangent: it uses no blackbox rank (whose
  backward moves the scores by `interpolation` times the cotangent). Traced once, for one block's
  shapes; nothing runs."""
  size = min(blocks.block_size, data.queries.shape[0])
  jaxpr = jax.make_jaxpr(
    lambda d: _block_lists_sums(blocks, d, d.queries[:size], _prepare(blocks, d), 0, 0)
  )(data)
  return not blackbox_ranks.uses_blackbox_rank(jaxpr)


def _mean_cotangent(blocks: _Blocks, data: _Lists) -> jax.Array:
  """The cotangent of the numerator when the mean (`blocks.reduce` of the two sums) is
  differentiated with cotangent 1: `1 / denominator` by the same operations as JAX's transpose
  of the division, so that it equals the true one bit for bit. The denominator comes from a
  sweep whose numerators are unused: under `jit` XLA removes the scores and the losses' work,
  which feed nothing else, and keeps the lists' validity (a whole forward pass when run eagerly)."""
  (_, denominator), _ = _sweep(blocks, data, cotangent=None)
  reduce = blocks.reduce
  mean = lambda numerator: reduce.divide(reduce.sum_fn(numerator), reduce.sum_fn(denominator))
  return jax.grad(mean)(jnp.zeros_like(denominator))


def _prepare(blocks: _Blocks, data: _Lists):
  """What the scores need of the items (for cosine, the scaled rows and their norms)."""
  return similarity.prepare_items(blocks.similarity_fn, data.items, data.queries.dtype)


def _block_lists_sums(blocks, data, block_queries, prepared, start, begin):
  """The two sums of the mean over the lists of queries `start .. start + size - 1` (those before
  `begin`, counted by the previous block, are masked out)."""
  size, num_items = block_queries.shape[0], data.items.shape[0]
  scores = similarity.score_prepared(blocks.similarity_fn, block_queries, prepared)
  rows = start + jnp.arange(size)
  where = jnp.broadcast_to((rows >= begin)[:, None], (size, num_items))
  if not blocks.include_self:
    where = where & (jnp.arange(num_items)[None, :] != (data.first + rows)[:, None])
  if data.item_where is not None:
    where = where & data.item_where[None, :]
  if data.affinity is not None:
    relevance = jax.lax.dynamic_slice_in_dim(data.affinity, start, size)
  else:
    relevance = retrieval.relevance_matrix(
      jax.lax.dynamic_slice_in_dim(data.labels, start, size), data.item_labels
    )
  kwargs = {}
  if data.weights is not None:
    kwargs["weights"] = jax.lax.dynamic_slice_in_dim(data.weights, start, size)
  recorder = _BlockSums()
  out = blocks.loss_fn(scores, relevance, where=where, reduce_fn=recorder, **kwargs)
  _check_one_mean(blocks.fn, recorder, out)
  return recorder.parts


def _sweep(blocks: _Blocks, data: _Lists, *, cotangent):
  """One pass over the blocks: the two sums of the mean and, unless `cotangent` is None, the
  gradient of the numerator times `cotangent` with respect to the queries and the items, each
  block's taken (`jax.vjp` of the block) as soon as its value.

  The last block ends at the last query, overlapping its neighbour, and its rows that the
  neighbour already counted are lists without a valid item (left out of the mean, with a zero
  gradient), so any `Q` takes blocks of one shape: one compiled body, no padded copy of the
  inputs.
  """
  queries = data.queries
  num_queries = queries.shape[0]
  size = min(blocks.block_size, num_queries)
  num_blocks = -(-num_queries // size)

  def bounds(k):
    begin = k * size
    start = jnp.minimum(begin, num_queries - size)
    return start, begin, jax.lax.dynamic_slice_in_dim(queries, start, size)

  if cotangent is None:
    prepared = _prepare(blocks, data)

    def values(k):
      start, begin, block_queries = bounds(k)
      return _block_lists_sums(blocks, data, block_queries, prepared, start, begin)

    numerators, denominators = jax.lax.map(values, jnp.arange(num_blocks))
    return (jnp.sum(numerators), jnp.sum(denominators)), None

  prepared, prepared_vjp = jax.vjp(
    lambda items: _prepare(blocks, data._replace(items=items)), data.items
  )

  def step(carry, k):
    numerator, denominator, grad_queries, grad_prepared = carry
    start, begin, block_queries = bounds(k)
    (block_numerator, block_denominator), pullback = jax.vjp(
      lambda q, p: _block_lists_sums(blocks, data, q, p, start, begin), block_queries, prepared
    )
    block_grad, prepared_grad = pullback(
      (
        lists.varying_like(jnp.asarray(cotangent, block_numerator.dtype), block_numerator),
        lists.varying_like(jnp.zeros_like(block_denominator), block_denominator),
      )
    )
    previous = jax.lax.dynamic_slice_in_dim(grad_queries, start, size)
    grad_queries = jax.lax.dynamic_update_slice_in_dim(
      grad_queries, previous + block_grad.astype(grad_queries.dtype), start, axis=0
    )
    grad_prepared = jax.tree.map(jnp.add, grad_prepared, prepared_grad)
    carry = (
      numerator + block_numerator,
      denominator + block_denominator,
      grad_queries,
      grad_prepared,
    )
    return carry, None

  dtype = lists.compute_dtype(queries.dtype)
  zeros = lambda shape, dt: lists.varying_like(jnp.zeros(shape, dt), queries)
  init = (
    zeros((), dtype),
    zeros((), dtype),
    zeros(queries.shape, dtype),
    jax.tree.map(lambda x: zeros(x.shape, x.dtype), prepared),
  )
  (numerator, denominator, grad_queries, grad_prepared), _ = jax.lax.scan(
    step, init, jnp.arange(num_blocks)
  )
  (grad_items,) = prepared_vjp(grad_prepared)
  return (numerator, denominator), (
    grad_queries.astype(queries.dtype),
    grad_items.astype(data.items.dtype),
  )


def blocked_loss(
  loss_fn: Callable[..., jax.Array],
  *,
  block_size: int,
  include_self: bool = False,
  similarity_fn: types.SimilarityFn = similarity.cosine,
) -> Callable[..., jax.Array]:
  """Wraps a list-level loss into `f(embeddings [B, D], labels [B]) -> scalar`, over query blocks.

  `f(embeddings, labels, ...)` equals `loss_fn(*batch_retrieval(embeddings, labels, ...))`, value
  and gradient, for every jaxrank loss, but computes it `block_size` queries at a time: no more than
  `[block_size, B + M]` scores exist at once. Each block's gradient is taken as soon as its value,
  in one pass over the blocks (the blackbox losses, whose backward is not linear in its cotangent,
  take it for the cotangent that `jax.grad` of `f` gives, and recompute each block in the backward
  pass for any other, as for `jax.grad` of `3 * f`; see `jaxrank/_src/blocked.py`). It takes what
  `batch_retrieval` takes: labels `[B]`, multi-hot labels `[B, C]` or `affinity=` `[B, B + M]` (read
  one block of rows at a time), a gallery (`gallery_embeddings [M, D]`, `gallery_labels`,
  `gallery_where [M]`: a memory bank, say), and per-list `weights [B]` for the losses that take them
  (`soft_binning_ap_loss`, the pair losses). Self-inclusion as in `batch_retrieval`: by default the
  query is left out of its own list; `include_self=True` keeps it as its own positive.

  The value is the loss's mean over the valid lists of every block: for each block the loss is
  called with a `reduce_fn` that keeps the two sums of its mean (valid values and their count, or
  the sum of the valid lists' weights), and `f` divides their totals. So `loss_fn` must be a mean
  over lists: it must return the value of the `reduce_fn` it is given, called once, as every
  jaxrank loss and metric does (`decomposability_gap` too: it splits each list, never the batch).
  Anything else is a `ValueError` that says why: a sum of two losses (block each term and add the
  blocked losses; or, for SupAP and calibration, `roadmap_loss`, which adds them per list), a
  loss changed after its reduction (`1 - mean`), or a loss with its own `reduce_fn` (a triplet
  loss's mean over non-zero terms is not a mean over a fixed set of lists). Per-list weights
  computed from the whole batch (`class_balancing_weights(labels)`) are given to `f` whole and are
  cut into blocks with the lists, so class balancing stays exact. Gradients flow to the
  embeddings and the gallery; labels, `affinity` and `weights` are data (no gradient), and so are
  `loss_fn`'s hyperparameters (constants, as `functools.partial` fixes them). `f` is
  differentiated in reverse mode (`jax.grad`, `jax.vjp`), not forward mode (`jax.jvp`).

  **Blocks.** Memory falls with `block_size` and the time of XLA's products and of the loop rises
  as blocks get small: 1,024 queries keep the work in large products. A `block_size` at least
  `B` is one block (the unblocked computation, with the checkpoint's recomputation). When it does
  not divide `B`, the last block ends at the last query and overlaps its neighbour: the rows
  already counted are lists without a valid item, left out of the mean, so the result is
  unchanged and every block has one shape. The sum over blocks is taken in another order than
  the unblocked mean's, so the two differ by rounding only; on a CPU the scores themselves are
  bit-identical (see `jaxrank.similarity`).

  With `chunked_value_and_grad` (which bounds the network's memory), pass `f` (with the labels
  fixed, or `lambda e, y: f(e, y)`) as its `loss_fn`. Over devices, `sharded_loss(...,
  block_size=)` blocks each device's queries by the same loop.

  Args:
    loss_fn: a list-level loss `loss_fn(scores, labels, *, where, reduce_fn)` (fix its
      hyperparameters with `functools.partial`); it also gets `weights=` when `f` does.
    block_size: queries per block, a positive int.
    include_self: keep each query in its own list (see `batch_retrieval`).
    similarity_fn: the scoring rule, as in `batch_retrieval` (cosine by default).

  Returns:
    `f(embeddings, labels=None, *, affinity=None, gallery_embeddings=None, gallery_labels=None,
    gallery_where=None, weights=None) -> scalar`, jittable and differentiable with respect to
    the embeddings (and the gallery). Memory O(block_size (B + M) + (B + M) D) beside what the
    loss needs per list; time about that of the unblocked loss and its gradient (for the blackbox
    losses differentiated with another cotangent than `jax.grad(f)`'s, plus one pass).

  >>> import jax, jax.numpy as jnp
  >>> import jaxrank
  >>> e = jax.random.normal(jax.random.key(0), (10, 4))
  >>> y = jnp.arange(10) % 3
  >>> f = jaxrank.blocked_loss(jaxrank.fastap_loss, block_size=4)  # Blocks 0-3, 4-7, 6-9.
  >>> scores, relevance, where = jaxrank.batch_retrieval(e, y)
  >>> whole = jaxrank.fastap_loss(scores, relevance, where=where)
  >>> bool(jnp.allclose(f(e, y), whole))
  True
  """
  fn = "blocked_loss"
  checks.check_callable(fn, "loss_fn", loss_fn, hint="Pass a list-level loss, e.g. fastap_loss.")
  checks.check_positive_int(fn, "block_size", block_size)
  checks.check_callable(fn, "similarity_fn", similarity_fn, hint="e.g. jaxrank.similarity.cosine.")
  block_size = int(block_size)

  def loss(
    embeddings: jax.typing.ArrayLike,
    labels: jax.typing.ArrayLike | None = None,
    *,
    affinity: jax.typing.ArrayLike | None = None,
    gallery_embeddings: jax.typing.ArrayLike | None = None,
    gallery_labels: jax.typing.ArrayLike | None = None,
    gallery_where: jax.typing.ArrayLike | None = None,
    weights: jax.typing.ArrayLike | None = None,
  ) -> jax.Array:
    inputs = retrieval.retrieval_inputs(
      fn, embeddings, labels, affinity, gallery_embeddings, gallery_labels, gallery_where
    )
    queries, items = inputs.queries, inputs.items
    b, n = queries.shape[0], items.shape[0]
    weights = checks.check_list_weights(fn, weights, (b, n), lists.compute_dtype(queries.dtype))
    item_where = None
    if inputs.gallery_where is not None:
      item_where = jnp.concatenate([jnp.ones((b,), bool), inputs.gallery_where])
    return mean_over_blocks(
      fn,
      loss_fn,
      queries,
      items,
      labels=inputs.labels,
      item_labels=inputs.item_labels,
      affinity=inputs.affinity,
      block_size=block_size,
      first=0,
      include_self=include_self,
      item_where=item_where,
      weights=weights,
      similarity_fn=similarity_fn,
      reduce=lists.Mean(jnp.sum),
    )

  return loss
