r"""Pair-based baselines: contrastive, batch-hard triplet and multi-similarity losses.

The losses the AP papers compare against, on the same lists as the AP losses: each list is one
query's similarities `s_j` to the items of a batch (`jaxrank.batch_retrieval`), `P` its relevant
valid items (label `>= 1`), `N` its other valid items. Each loss is a function of the query's pairs
with `P` and `N` (or of the hardest of them), so it is a per-list value like the AP losses,
reduced over lists by `reduce_fn`.

Conventions (rax's, as in `jaxrank.metrics`): `scores` and `labels` are `[..., n]`, the last axis is
the list; `where` masks items out as if sliced away; `reduce_fn` reduces over lists, `None` returns
one value per list; optional per-list `weights` weigh the lists in the reduction (see
`soft_binning_ap_loss`). A list without a relevant valid item gives 0 and is left out of the
reduction (`triplet_loss` also needs a non-relevant valid item). A valid NaN score makes its list's
value NaN.

**Similarities, not distances.** Scores are similarities, higher is closer (cosine in `[-1, 1]` by
default in `batch_retrieval`): the margins are those of pytorch-metric-learning with
`distance=CosineSimilarity()`, where a positive pair costs when its similarity is *below* a margin.

**Self-inclusion.** `batch_retrieval`'s default (`include_self=False`) leaves the query out of its
own list, as pytorch-metric-learning does (its pairs never pair an item with itself); with
`include_self=True` the query would be its own positive at similarity 1.

**pytorch-metric-learning.** Each loss equals, in value and gradient with respect to the
embeddings, pytorch-metric-learning 2.9.0's loss on the same embeddings and labels, with the
reducer and conditions named in its docstring (`tests/test_pairwise.py` checks it).

**Cost.** O(n) time and memory per list: O(B^2) for the `B` lists of a batch of `B` (the `[B, B]`
similarity matrix itself). No `[B, B, B]` tensor of triplets is built: batch-hard mining keeps one
positive and one negative per list.

**Per platform** (`platforms.by_platform`). On a CPU each loss is written in plain `jax.numpy` and
differentiated by JAX. On an accelerator each per-list body is a `jax.custom_vjp` whose forward
takes every per-list sum, count, minimum or maximum it needs in one variadic reduction (one pass
over the lists, where XLA made one pass per reduction and wrote the `[B, B]` masks between them)
and whose backward is one elementwise expression of the scores, which XLA fuses into the two
products of the similarity's gradient: on a TPU v5e at B = 4096 the steps' estimates fell from
3.9-4.4x to about 1.5-2x the floor's. Both forms give the same values and gradients (the
hyperparameters' included) up to the rounding of sums taken in another order; a valid NaN score
makes its list NaN on both, but gives that list a zero gradient on accelerators where JAX's
derivative of a minimum or maximum may give NaN.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxrank import types
from jaxrank._src import checks
from jaxrank._src import counting
from jaxrank._src import lists
from jaxrank._src import platforms
from jaxrank._src import segmented


def _prepare(
  fn, scores, labels, where, segments, weights
) -> tuple[jax.Array, jax.Array, jax.Array, jnp.dtype, jax.Array | None]:
  """Checked lists (those of the segments with `segments`, `jaxrank._src.segmented`), the relevant
  and other valid items, the accumulation dtype and the weights."""
  scores, labels, where = checks.check_lists(fn, scores, labels, where)
  dtype = lists.compute_dtype(scores.dtype)
  weights = checks.check_list_weights(
    fn, weights, scores.shape, dtype, segmented=segments is not None
  )
  scores, where, labels = segmented.as_lists(fn, segments, scores, where, labels)
  relevant = labels >= 1  # A boolean mask: one compilation whatever the labels' dtype.
  return scores, relevant, where, dtype, weights


def _masked_mean(values, mask, dtype):
  total = jnp.sum(jnp.where(mask, values, 0), axis=-1)
  return total / jnp.maximum(jnp.sum(mask, axis=-1), 1).astype(dtype)


def _last_axis_reduce(operands, inits, combine):
  """One variadic reduction of `operands` (each `[..., n]`) over the last axis: `combine(a, b)`
  takes and returns tuples, one entry per operand; one pass over the lists on every platform."""
  inits = tuple(jnp.asarray(v, x.dtype) for v, x in zip(inits, operands))
  return jax.lax.reduce(tuple(operands), inits, combine, (operands[0].ndim - 1,))


def _sums(*operands):
  return counting.one_pass_sums(operands)


def contrastive_lists(scores, relevant, where, pos_margin, neg_margin, valid=None):
  """Per-list contrastive values `[...]` and which lists count, from boolean `relevant`.

  Also ROADMAP's calibration loss (`smooth_rank.calibration_loss`), which is this loss. `valid`
  `[...]`, the lists with a relevant valid item, may come from a loss computed beside it on the same
  lists: ROADMAP passes SupAP's, so that both mask the scores with the same array and the
  compiler reads them once (on a TPU v5e at B = 16,384, the calibration's own `any` was a pass over
  `[B, B]` of its own).
  """
  return _contrastive_lists(
    scores, relevant, where, pos_margin, neg_margin, valid, platform=platforms.forced()
  )


@functools.partial(jax.jit, static_argnames=("platform",))
def _contrastive_lists(scores, relevant, where, pos_margin, neg_margin, valid, *, platform):
  dtype = lists.compute_dtype(scores.dtype)
  other = where & ~relevant
  relevant = where & relevant
  if valid is None:
    valid = jnp.any(relevant, axis=-1)
  s = lists.counted_scores(scores, where, valid).astype(dtype)

  def cpu(s, relevant, other, pos_margin, neg_margin):
    pos = _masked_mean(jax.nn.relu(pos_margin - s), relevant, dtype)
    neg = _masked_mean(jax.nn.relu(s - neg_margin), other, dtype)
    return pos + neg

  values = platforms.by_platform(
    s,
    relevant,
    other,
    pos_margin,
    neg_margin,
    cpu=cpu,
    accelerator=lambda s, *args: _contrastive_one_pass(s, *_varying(args, s)),
    platform=platform,
  )
  return values, valid


@jax.custom_vjp
def _contrastive_one_pass(s, relevant, other, pos_margin, neg_margin):
  """The accelerators' contrastive values (module docstring, "Per platform")."""
  return _contrastive_fwd(s, relevant, other, pos_margin, neg_margin)[0]


def _contrastive_fwd(s, relevant, other, pos_margin, neg_margin):
  zero = jnp.zeros((), s.dtype)
  below = relevant & (s < pos_margin)  # The hinges' active pairs.
  above = other & (s > neg_margin)
  pos_sum, pos_count, pos_active, neg_sum, neg_count, neg_active = _sums(
    jnp.where(below, pos_margin - s, zero),
    relevant.astype(jnp.int32),
    below.astype(jnp.int32),
    jnp.where(above, s - neg_margin, zero),
    other.astype(jnp.int32),
    above.astype(jnp.int32),
  )
  pos_count = jnp.maximum(pos_count, 1).astype(s.dtype)
  neg_count = jnp.maximum(neg_count, 1).astype(s.dtype)
  values = pos_sum / pos_count + neg_sum / neg_count
  pos_active = pos_active.astype(s.dtype) / pos_count
  neg_active = neg_active.astype(s.dtype) / neg_count
  return values, (
    s,
    relevant,
    other,
    pos_margin,
    neg_margin,
    pos_count,
    neg_count,
    pos_active,
    neg_active,
  )


def _contrastive_bwd(residuals, g):
  s, relevant, other, pos_margin, neg_margin, pos_count, neg_count, pos_active, neg_active = (
    residuals
  )
  zero = jnp.zeros((), s.dtype)
  ds = jnp.where(relevant & (s < pos_margin), -(g / pos_count)[..., None], zero) + jnp.where(
    other & (s > neg_margin), (g / neg_count)[..., None], zero
  )
  return (
    ds,
    None,
    None,
    _summed_to(g * pos_active, pos_margin),
    _summed_to(-g * neg_active, neg_margin),
  )


_contrastive_one_pass.defvjp(_contrastive_fwd, _contrastive_bwd)


def _varying(arrays, template):
  """`arrays` marked varying over the `shard_map` axes of `template` (no-op outside), so that a
  custom VJP's cotangents of shared hyperparameters have their arguments' type (JAX sums them
  over the devices when it transposes the marking)."""
  return tuple(lists.varying_like(x, template) for x in arrays)


def _summed_to(x, like):
  """The cotangent of a hyperparameter `like` (a scalar, or broadcast to the lists `[...]`)."""
  x = jnp.sum(x, axis=tuple(range(x.ndim - like.ndim))) if x.ndim > like.ndim else x
  for axis, size in enumerate(like.shape):
    if size == 1 and x.shape[axis] != 1:
      x = jnp.sum(x, axis=axis, keepdims=True)
  return x.astype(like.dtype)


def contrastive_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  pos_margin: jax.typing.ArrayLike = 1.0,
  neg_margin: jax.typing.ArrayLike = 0.0,
  weights: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""The contrastive loss (Hadsell et al. 2006) on similarities, averaged per query.

  .. math::
    \mathcal{L} = \frac{1}{|P|} \sum_{j \in P} [m_+ - s_j]_+
      + \frac{1}{|N|} \sum_{j \in N} [s_j - m_-]_+

  per list, with `P` the relevant valid items, `N` the others (the second term is 0 when `N` is
  empty), `[x]_+ = max(x, 0)`, `m_+ = pos_margin` and `m_- = neg_margin`. Hadsell et al. 2006
  (eq. 4) pull similar pairs together with `D^2 / 2` and push dissimilar ones beyond a margin `m`
  with `max(0, m - D)^2 / 2` on Euclidean distances `D`, summed over pairs; this is the
  similarity form of pytorch-metric-learning (`ContrastiveLoss` with `CosineSimilarity`): unsquared
  hinges, positive pairs cost below `m_+`, negative pairs above `m_-`. The defaults
  `pos_margin=1, neg_margin=0` are pytorch-metric-learning's suggestion for cosine similarity (its
  own defaults, 0 and 1, are for distances). With `alpha=pos_margin, beta=neg_margin` this is
  `calibration_loss` (ROADMAP's eq. 7, which its authors compute with this very loss).

  **Reduction.** Each list averages its positive hinges and its negative hinges; `jnp.mean` then
  averages over lists (queries). pytorch-metric-learning's
  `ContrastiveLoss(pos_margin, neg_margin, distance=CosineSimilarity(),
  reducer=PerAnchorReducer(MeanReducer()))` on the same embeddings and labels is exactly
  `contrastive_loss(*batch_retrieval(embeddings, labels), pos_margin=..., neg_margin=...)`
  (value and gradient) when every query has a positive in the batch (a P x K batch with K >= 2);
  its `PerAnchorReducer` would count a query without a positive in the mean, with its negative
  term. Its default reducer, `AvgNonZeroReducer`, is not a reduction over lists: it divides the
  batch's summed positive hinges by the batch's number of non-zero positive hinges, and likewise
  for the negatives, so pairs, not queries, are weighed equally and the weights change with the
  number of active pairs; no per-list value reproduces it.

  Self-inclusion: see the module docstring (the query is left out by `batch_retrieval`'s
  default, as in pytorch-metric-learning). Time and memory O(n) per list, O(B^2) for a batch.

  Args:
    scores: `[..., n]` floating similarities (cosine for the default margins).
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    pos_margin: `m_+`, relevant similarities above it cost nothing (default 1).
    neg_margin: `m_-`, other similarities below it cost nothing (default 0).
    weights: optional `[...]` non-negative per-list weights (broadcastable to the lists' shape;
      with `segments`, `[..., n]`: one per segment).
    reduce_fn: reduction over lists (default `jnp.mean`, weighted with `weights`); `None` gives
      `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`, in at least float32. Lists
    without a relevant valid item give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> scores, labels = jnp.array([0.9, 0.2, 0.7, -0.1]), jnp.array([1, 0, 1, 0])
  >>> round(float(contrastive_loss(scores, labels)), 4)  # (0.1 + 0.3) / 2 + (0.2 + 0) / 2
  0.3
  """
  fn = "contrastive_loss"
  checks.check_real(fn, "pos_margin", pos_margin)
  checks.check_real(fn, "neg_margin", neg_margin)
  scores, relevant, where, dtype, weights = _prepare(fn, scores, labels, where, segments, weights)
  values, valid = contrastive_lists(
    scores, relevant, where, jnp.asarray(pos_margin, dtype), jnp.asarray(neg_margin, dtype)
  )
  return lists.finish(values, scores, where, valid, reduce_fn, weights=weights)


def _triplet_lists(scores, relevant, where, margin):
  return _triplet_lists_jit(scores, relevant, where, margin, platform=platforms.forced())


@functools.partial(jax.jit, static_argnames=("platform",))
def _triplet_lists_jit(scores, relevant, where, margin, *, platform):
  dtype = lists.compute_dtype(scores.dtype)
  other = where & ~relevant
  relevant = where & relevant
  valid = jnp.any(relevant, axis=-1) & jnp.any(other, axis=-1)
  s = lists.counted_scores(scores, where, valid).astype(dtype)

  def cpu(s, relevant, other, valid, margin):
    # An empty min or max is +-inf; such lists are not valid, and the outer where stops both the
    # value and the gradient there.
    hardest_pos = jnp.min(s, axis=-1, where=relevant, initial=jnp.inf)
    hardest_neg = jnp.max(s, axis=-1, where=other, initial=-jnp.inf)
    hardest_pos = jnp.where(valid, hardest_pos, 0)
    hardest_neg = jnp.where(valid, hardest_neg, 0)
    return jnp.where(valid, jax.nn.relu(hardest_neg - hardest_pos + margin), 0)

  values = platforms.by_platform(
    s,
    relevant,
    other,
    valid,
    margin,
    cpu=cpu,
    accelerator=lambda s, *args: _batch_hard_one_pass(s, *_varying(args, s)),
    platform=platform,
  )
  return values, valid


def _hardest(s, relevant, other):
  """The least similar relevant and the most similar other score of each list, in one pass."""
  inf = jnp.asarray(jnp.inf, s.dtype)
  return _last_axis_reduce(
    (jnp.where(relevant, s, inf), jnp.where(other, s, -inf)),
    (jnp.inf, -jnp.inf),
    lambda a, b: (jnp.minimum(a[0], b[0]), jnp.maximum(a[1], b[1])),
  )


@jax.custom_vjp
def _batch_hard_one_pass(s, relevant, other, valid, margin):
  """The accelerators' batch-hard triplet values (module docstring, "Per platform")."""
  return _batch_hard_fwd(s, relevant, other, valid, margin)[0]


def _batch_hard_fwd(s, relevant, other, valid, margin):
  hardest_pos, hardest_neg = _hardest(s, relevant, other)
  hardest_pos = jnp.where(valid, hardest_pos, 0)
  hardest_neg = jnp.where(valid, hardest_neg, 0)
  gap = hardest_neg - hardest_pos + margin
  active = valid & (gap > 0)  # jax.nn.relu's derivative is 0 at 0.
  values = jnp.where(active, gap, 0)
  return values, (s, relevant, other, hardest_pos, hardest_neg, active, margin)


def _batch_hard_bwd(residuals, g):
  s, relevant, other, hardest_pos, hardest_neg, active, margin = residuals
  zero = jnp.zeros((), s.dtype)
  at_pos = relevant & (s == hardest_pos[..., None])
  at_neg = other & (s == hardest_neg[..., None])
  # Tied hardest items share the gradient equally, as JAX's derivative of `jnp.min`/`jnp.max`.
  ties_pos, ties_neg = _sums(at_pos.astype(jnp.int32), at_neg.astype(jnp.int32))
  g = jnp.where(active, g, zero)
  pos = -g / jnp.maximum(ties_pos, 1).astype(s.dtype)
  neg = g / jnp.maximum(ties_neg, 1).astype(s.dtype)
  ds = jnp.where(at_pos, pos[..., None], zero) + jnp.where(at_neg, neg[..., None], zero)
  return ds, None, None, None, _summed_to(g, margin)


_batch_hard_one_pass.defvjp(_batch_hard_fwd, _batch_hard_bwd)


def triplet_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  margin: jax.typing.ArrayLike = 0.05,
  mining: str = "hard",
  weights: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""The triplet loss with batch-hard mining (Hermans et al. 2017), or over all triplets.

  .. math::
    \mathcal{L} = \Big[\max_{j \in N} s_j - \min_{k \in P} s_k + m\Big]_+

  per list: the query's hardest positive (least similar relevant item) and hardest negative (most
  similar other item), one triplet per query. Hermans et al. 2017 (sec. 2, "Batch Hard") write it
  with distances, `[m + max_p D(a, p) - min_n D(a, n)]_+`, summed over the anchors of a P x K
  batch; on similarities the inequalities turn around. `margin` `m` defaults to 0.05,
  pytorch-metric-learning's `TripletMarginLoss` default. A list needs both a relevant and a
  non-relevant valid item; without either it gives 0 and is left out of the reduction. At tied
  hardest items the gradient is shared equally among them (`jnp.max`), where PyTorch's `max`
  sends it to one of them.

  **Reduction.** `jnp.mean` averages over the lists with a positive and a negative: that is
  pytorch-metric-learning's `TripletMarginLoss(margin, distance=CosineSimilarity(),
  reducer=MeanReducer())` with `BatchHardMiner(distance=CosineSimilarity())` (the miner keeps the
  anchors with a positive and a negative). Its default reducer, `AvgNonZeroReducer`, averages over
  the triplets with a non-zero loss only (Hermans et al.'s point that the zero terms dilute the
  mean); that is a reduction over lists too, passed as `reduce_fn`:

  >>> def mean_of_nonzero(values, *, where):
  ...   count = jnp.sum(where & (values > 0))
  ...   return jnp.sum(values, where=where) / jnp.maximum(count, 1)

  and `triplet_loss(*batch_retrieval(embeddings, labels), margin=m, reduce_fn=mean_of_nonzero)`
  equals the default-reducer loss in value and gradient (the count is piecewise constant).

  **All triplets** (`mining="all"`): pytorch-metric-learning's default `TripletMarginLoss` (no
  miner, `AvgNonZeroReducer`), on similarities. Every (positive `p`, negative `j`) pair of a list is
  a triplet with the query, of loss `[s_j - s_p + m]_+`; the loss is their mean over the triplets
  with a non-zero loss, taken over the whole batch. Per list that is the mean over its non-zero
  triplets, and the default `jnp.mean` weighs each list by its number of non-zero triplets (times
  `weights`, if given: a weighted mean over lists, so `blocked_loss` and `sharded_loss` take it as
  any other loss); `reduce_fn=None` gives each list's mean, `jnp.sum` the sum over all triplets.
  With every triplet at zero loss the loss is 0. Cost O(n log n) per list (a sort of the negatives
  and their running sums; each positive's non-zero triplets are those past a threshold), not O(P N)
  in the numbers of positives and negatives. Unlike batch-hard mining it gives every positive and
  negative within the margin a gradient, which lets a network whose embeddings start in a narrow
  cone spread them (the fair comparison's batch-hard triplet row did not train from there).

  Self-inclusion: see the module docstring (the query is not its own positive, as in the paper and
  pytorch-metric-learning). Batch-hard: time and memory O(n) per list, O(B^2) for a batch; no
  `[B, B, B]` either way.

  Args:
    scores: `[..., n]` floating similarities (cosine for the default margin).
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    margin: `m`, how far the hardest positive must be above the hardest negative (default 0.05);
      with `mining="all"`, each positive above each negative.
    mining: `"hard"` (default), one triplet per list: its hardest positive and negative; `"all"`,
      every triplet of the list, averaged over those with a non-zero loss (above).
    weights: optional `[...]` non-negative per-list weights (broadcastable to the lists' shape;
      with `segments`, `[..., n]`: one per segment).
    reduce_fn: reduction over lists (default `jnp.mean`, weighted with `weights`); `None` gives
      `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`, in at least float32. Lists
    without a relevant or without a non-relevant valid item give 0 and are left out of the
    reduction.

  >>> scores, labels = jnp.array([0.9, 0.2, 0.7, 0.75]), jnp.array([1, 0, 1, 0])
  >>> round(float(triplet_loss(scores, labels, margin=0.1)), 4)  # 0.75 - 0.7 + 0.1
  0.15
  """
  fn = "triplet_loss"
  checks.check_real(fn, "margin", margin)
  if mining not in ("hard", "all"):
    raise ValueError(f'{fn}: mining must be "hard" or "all", got {mining!r}.')
  scores, relevant, where, dtype, weights = _prepare(fn, scores, labels, where, segments, weights)
  if mining == "hard":
    values, valid = _triplet_lists(scores, relevant, where, jnp.asarray(margin, dtype))
    return lists.finish(values, scores, where, valid, reduce_fn, weights=weights)
  values, valid, nonzero = _all_triplet_lists(scores, relevant, where, jnp.asarray(margin, dtype))
  list_weights = weights
  if reduce_fn is not None:  # Each list's mean, weighed by its number of non-zero triplets.
    list_weights = nonzero if weights is None else weights * nonzero
  return lists.finish(values, scores, where, valid, reduce_fn, weights=list_weights)


@jax.jit
def _all_triplet_lists(scores, relevant, where, margin):
  """Each list's mean loss over its non-zero triplets, whether it has a positive and a negative,
  and its number of non-zero triplets (no derivative: a count)."""
  dtype = lists.compute_dtype(scores.dtype)
  other = where & ~relevant
  relevant = where & relevant
  valid = jnp.any(relevant, axis=-1) & jnp.any(other, axis=-1)
  s = lists.counted_scores(scores, where, valid).astype(dtype)
  # The negatives in ascending order (the other items first, at -inf), with their running sums
  # from the top: `above[k]` is the sum of the sorted negatives from position k on.
  keys, negatives = jax.lax.sort(
    (jnp.where(other, s, -jnp.inf), jnp.where(other, s, 0)), num_keys=1
  )
  above = jnp.flip(jnp.cumsum(jnp.flip(negatives, -1), -1), -1)
  above = jnp.concatenate([above, jnp.zeros_like(above[..., :1])], axis=-1)
  # A triplet (p, j) has a non-zero loss where s_j > s_p - m: the negatives past the first key
  # above the threshold.
  threshold = jax.lax.stop_gradient(s - margin)
  rows = keys.reshape(-1, keys.shape[-1])
  first = jax.vmap(functools.partial(jnp.searchsorted, side="right"))(
    rows, threshold.reshape(rows.shape)
  ).reshape(s.shape)
  count = jnp.where(relevant, s.shape[-1] - first, 0)
  losses = jnp.take_along_axis(above, first, axis=-1) - count.astype(dtype) * (s - margin)
  total = jnp.sum(jnp.where(relevant, losses, 0), axis=-1)
  nonzero = jnp.sum(count, axis=-1).astype(dtype)
  return total / jnp.maximum(nonzero, 1), valid, nonzero


def _log1p_sum_exp(x, mask):
  """`log(1 + sum_{mask} exp(x))` over the last axis, stable (logsumexp with a 0 term).

  0 where the mask is empty; masked entries of `x` get a zero gradient.
  """
  x = jnp.where(mask, x, 0)
  top = jax.lax.stop_gradient(jnp.maximum(jnp.max(jnp.where(mask, x, 0), axis=-1), 0))
  terms = jnp.where(mask, jnp.exp(x - top[..., None]), 0)
  return top + jnp.log(jnp.exp(-top) + jnp.sum(terms, axis=-1))


def _multi_similarity_lists(scores, relevant, where, alpha, beta, base, epsilon, *, mine):
  return _multi_similarity_lists_jit(
    scores, relevant, where, alpha, beta, base, epsilon, mine=mine, platform=platforms.forced()
  )


@functools.partial(jax.jit, static_argnames=("mine", "platform"))
def _multi_similarity_lists_jit(
  scores, relevant, where, alpha, beta, base, epsilon, *, mine, platform
):
  dtype = lists.compute_dtype(scores.dtype)
  other = where & ~relevant
  relevant = where & relevant
  valid = jnp.any(relevant, axis=-1)
  s = lists.counted_scores(scores, where, valid).astype(dtype)

  def cpu(s, relevant, other, alpha, beta, base, epsilon):
    if mine:
      fixed = jax.lax.stop_gradient(s)
      hardest_neg = jnp.max(fixed, axis=-1, where=other, initial=-jnp.inf)[..., None]
      hardest_pos = jnp.min(fixed, axis=-1, where=relevant, initial=jnp.inf)[..., None]
      relevant = relevant & (fixed - epsilon < hardest_neg)
      other = other & (fixed + epsilon > hardest_pos)
    pos = _log1p_sum_exp(-alpha * (s - base), relevant) / alpha
    neg = _log1p_sum_exp(beta * (s - base), other) / beta
    return pos + neg

  def accelerator(s, relevant, other, alpha, beta, base, epsilon):
    if mine:
      fixed = jax.lax.stop_gradient(s)
      hardest_pos, hardest_neg = _hardest(fixed, relevant, other)
      relevant = relevant & (fixed - epsilon < hardest_neg[..., None])
      other = other & (fixed + epsilon > hardest_pos[..., None])
    return _multi_similarity_one_pass(s, *_varying((relevant, other, alpha, beta, base), s))

  values = platforms.by_platform(
    s,
    relevant,
    other,
    alpha,
    beta,
    base,
    epsilon,
    cpu=cpu,
    accelerator=accelerator,
    platform=platform,
  )
  return values, valid


@jax.custom_vjp
def _multi_similarity_one_pass(s, relevant, other, alpha, beta, base):
  """The accelerators' multi-similarity values (module docstring, "Per platform"): the two
  `_log1p_sum_exp` terms from one pass for their maxima and one for their sums."""
  return _multi_similarity_fwd(s, relevant, other, alpha, beta, base)[0]


def _ms_exponents(s, alpha, beta, base):
  return -alpha * (s - base), beta * (s - base)


def _multi_similarity_fwd(s, relevant, other, alpha, beta, base):
  zero = jnp.zeros((), s.dtype)
  x_pos, x_neg = _ms_exponents(s, alpha, beta, base)
  # The shifts for stability, at least 0 (the 1 of log(1 + ...)), as `_log1p_sum_exp`.
  top_pos, top_neg = _last_axis_reduce(
    (jnp.where(relevant, x_pos, zero), jnp.where(other, x_neg, zero)),
    (0, 0),
    lambda a, b: (jnp.maximum(a[0], b[0]), jnp.maximum(a[1], b[1])),
  )
  sum_pos, sum_neg = _sums(
    jnp.where(relevant, jnp.exp(x_pos - top_pos[..., None]), zero),
    jnp.where(other, jnp.exp(x_neg - top_neg[..., None]), zero),
  )
  norm_pos = jnp.exp(-top_pos) + sum_pos
  norm_neg = jnp.exp(-top_neg) + sum_neg
  log_pos = top_pos + jnp.log(norm_pos)
  log_neg = top_neg + jnp.log(norm_neg)
  values = log_pos / alpha + log_neg / beta
  return values, (
    s,
    relevant,
    other,
    alpha,
    beta,
    base,
    top_pos,
    top_neg,
    norm_pos,
    norm_neg,
    log_pos,
    log_neg,
  )


def _multi_similarity_bwd(residuals, g):
  (
    s,
    relevant,
    other,
    alpha,
    beta,
    base,
    top_pos,
    top_neg,
    norm_pos,
    norm_neg,
    log_pos,
    log_neg,
  ) = residuals
  zero = jnp.zeros((), s.dtype)
  x_pos, x_neg = _ms_exponents(s, alpha, beta, base)
  # The softmax weights of the two terms: d pos / d s = -w_pos, d neg / d s = w_neg.
  w_pos = jnp.where(relevant, jnp.exp(x_pos - top_pos[..., None]) / norm_pos[..., None], zero)
  w_neg = jnp.where(other, jnp.exp(x_neg - top_neg[..., None]) / norm_neg[..., None], zero)
  ds = g[..., None] * (w_neg - w_pos)
  # The hyperparameters' (pos = log_pos / alpha, neg = log_neg / beta): reductions XLA drops
  # when they are not asked for.
  centred = jnp.where(relevant | other, s - base, zero)
  pos_moment, neg_moment, pos_mass, neg_mass = _sums(w_pos * centred, w_neg * centred, w_pos, w_neg)
  d_alpha = g * (-log_pos / alpha**2 - pos_moment / alpha)
  d_beta = g * (-log_neg / beta**2 + neg_moment / beta)
  d_base = g * (pos_mass - neg_mass)
  return (
    ds,
    None,
    None,
    _summed_to(d_alpha, alpha),
    _summed_to(d_beta, beta),
    _summed_to(d_base, base),
  )


_multi_similarity_one_pass.defvjp(_multi_similarity_fwd, _multi_similarity_bwd)


def multi_similarity_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  alpha: jax.typing.ArrayLike = 2.0,
  beta: jax.typing.ArrayLike = 50.0,
  base: jax.typing.ArrayLike = 0.5,
  epsilon: float | None = None,
  weights: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""The multi-similarity loss (Wang et al. 2019), optionally with its pair mining.

  .. math::
    \mathcal{L} = \frac{1}{\alpha} \log\Big(1 + \sum_{k \in P'} e^{-\alpha (s_k - \lambda)}\Big)
      + \frac{1}{\beta} \log\Big(1 + \sum_{j \in N'} e^{\beta (s_j - \lambda)}\Big)

  per list, with `lambda = base`. Without mining (`epsilon=None`) `P'` and `N'` are all the
  relevant and all the other valid items. With `epsilon` they are the pairs that Wang et al. 2019
  mine (sec. 4, pair mining by the relative similarity): a negative is kept if
  `s_j + epsilon > min_{k in P} s_k`, a positive if `s_k - epsilon < max_{j in N} s_j` (strict, as
  pytorch-metric-learning's `MultiSimilarityMiner`); the selection carries no gradient. Both sets
  are empty together, for a list whose positives all lie `epsilon` above its negatives, which then
  costs 0. The paper averages this over the `m` anchors of the batch. The defaults are
  pytorch-metric-learning's (`alpha=2, beta=50, base=0.5`; its miner's `epsilon=0.1`), which it
  took from the authors' released code.

  Computed as a logsumexp with a 0 term, so it is finite with finite gradients for any finite
  scores (`beta * s` of 1e6 included); an empty `P'` or `N'` gives 0 for its term.

  **Reduction.** `jnp.mean` averages over the lists with a relevant valid item. It equals
  pytorch-metric-learning's `MultiSimilarityLoss(alpha, beta, base)` (default `MeanReducer`,
  `CosineSimilarity`), and with `epsilon` that loss given the pairs of
  `MultiSimilarityMiner(epsilon)`, on `batch_retrieval(embeddings, labels)`, in value and gradient,
  when every query has a positive in the batch: pytorch-metric-learning averages over every
  anchor, and counts a query without a positive with its negative term.

  Self-inclusion: see the module docstring (the query is left out, as in the paper and
  pytorch-metric-learning). Time and memory O(n) per list, O(B^2) for a batch.

  Args:
    scores: `[..., n]` floating similarities (cosine for the default hyperparameters).
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    alpha: `> 0`, the scale of the positive term (default 2).
    beta: `> 0`, the scale of the negative term (default 50).
    base: `lambda`, the similarity about which pairs are pulled and pushed (default 0.5).
    epsilon: `None` (default) for every pair, or the mining margin `>= 0` (0.1 in
      pytorch-metric-learning and the paper).
    weights: optional `[...]` non-negative per-list weights (broadcastable to the lists' shape;
      with `segments`, `[..., n]`: one per segment).
    reduce_fn: reduction over lists (default `jnp.mean`, weighted with `weights`); `None` gives
      `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`, in at least float32. Lists
    without a relevant valid item give 0 and are left out of the reduction.

  >>> scores, labels = jnp.array([0.9, 0.2, 0.7, 0.1]), jnp.array([1, 0, 1, 0])
  >>> round(float(multi_similarity_loss(scores, labels)), 4)  # log(1 + e^-0.8 + e^-0.4) / 2 + ~0
  0.3756
  >>> round(float(multi_similarity_loss(scores, labels, epsilon=0.1)), 4)  # Nothing mined.
  0.0
  """
  fn = "multi_similarity_loss"
  hint = "It is the scale of the exponent (Wang et al. 2019: alpha 2, beta 50)."
  checks.check_real(fn, "alpha", alpha, above=0, hint=hint)
  checks.check_real(fn, "beta", beta, above=0, hint=hint)
  checks.check_real(fn, "base", base)
  if epsilon is not None:
    checks.check_real(fn, "epsilon", epsilon, at_least=0, hint="None disables the mining (0.1).")
  scores, relevant, where, dtype, weights = _prepare(fn, scores, labels, where, segments, weights)
  values, valid = _multi_similarity_lists(
    scores,
    relevant,
    where,
    jnp.asarray(alpha, dtype),
    jnp.asarray(beta, dtype),
    jnp.asarray(base, dtype),
    jnp.asarray(0 if epsilon is None else epsilon, dtype),
    mine=epsilon is not None,
  )
  return lists.finish(values, scores, where, valid, reduce_fn, weights=weights)
