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
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxrank import types
from jaxrank._src import checks
from jaxrank._src import lists


def _prepare(fn, scores, labels, where, weights):
  """Checked lists, the relevant and other valid items, the accumulation dtype and the weights."""
  scores, labels, where = checks.check_lists(fn, scores, labels, where)
  dtype = lists.compute_dtype(scores.dtype)
  weights = checks.check_list_weights(fn, weights, scores.shape, dtype)
  relevant = labels >= 1  # A boolean mask: one compilation whatever the labels' dtype.
  return scores, relevant, where, dtype, weights


def _masked_mean(values, mask, dtype):
  total = jnp.sum(jnp.where(mask, values, 0), axis=-1)
  return total / jnp.maximum(jnp.sum(mask, axis=-1), 1).astype(dtype)


@jax.jit
def contrastive_lists(scores, relevant, where, pos_margin, neg_margin):
  """Per-list contrastive values `[...]` and which lists count, from boolean `relevant`.

  Also ROADMAP's calibration loss (`smooth_rank.calibration_loss`), which is this loss.
  """
  dtype = lists.compute_dtype(scores.dtype)
  other = where & ~relevant
  relevant = where & relevant
  valid = jnp.any(relevant, axis=-1)
  s = lists.counted_scores(scores, where, valid).astype(dtype)
  pos = _masked_mean(jax.nn.relu(pos_margin - s), relevant, dtype)
  neg = _masked_mean(jax.nn.relu(s - neg_margin), other, dtype)
  return pos + neg, valid


def contrastive_loss(
    scores: jax.typing.ArrayLike,
    labels: jax.typing.ArrayLike,
    *,
    where: jax.typing.ArrayLike | None = None,
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
    pos_margin: `m_+`, relevant similarities above it cost nothing (default 1).
    neg_margin: `m_-`, other similarities below it cost nothing (default 0).
    weights: optional `[...]` non-negative per-list weights (broadcastable to the lists' shape).
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
  scores, relevant, where, dtype, weights = _prepare(fn, scores, labels, where, weights)
  values, valid = contrastive_lists(
      scores, relevant, where, jnp.asarray(pos_margin, dtype), jnp.asarray(neg_margin, dtype)
  )
  return lists.finish(values, scores, where, valid, reduce_fn, weights=weights)


@jax.jit
def _triplet_lists(scores, relevant, where, margin):
  dtype = lists.compute_dtype(scores.dtype)
  other = where & ~relevant
  relevant = where & relevant
  valid = jnp.any(relevant, axis=-1) & jnp.any(other, axis=-1)
  s = lists.counted_scores(scores, where, valid).astype(dtype)
  # An empty min or max is +-inf; such lists are not valid, and the outer where stops both the
  # value and the gradient there.
  hardest_pos = jnp.min(s, axis=-1, where=relevant, initial=jnp.inf)
  hardest_neg = jnp.max(s, axis=-1, where=other, initial=-jnp.inf)
  hardest_pos = jnp.where(valid, hardest_pos, 0)
  hardest_neg = jnp.where(valid, hardest_neg, 0)
  return jnp.where(valid, jax.nn.relu(hardest_neg - hardest_pos + margin), 0), valid


def triplet_loss(
    scores: jax.typing.ArrayLike,
    labels: jax.typing.ArrayLike,
    *,
    where: jax.typing.ArrayLike | None = None,
    margin: jax.typing.ArrayLike = 0.05,
    weights: jax.typing.ArrayLike | None = None,
    reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""The triplet loss with batch-hard mining (Hermans et al. 2017), on similarities.

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

  Self-inclusion: see the module docstring (the query is not its own positive, as in the paper and
  pytorch-metric-learning). Time and memory O(n) per list, O(B^2) for a batch, no `[B, B, B]`.

  Args:
    scores: `[..., n]` floating similarities (cosine for the default margin).
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    margin: `m`, how far the hardest positive must be above the hardest negative (default 0.05).
    weights: optional `[...]` non-negative per-list weights (broadcastable to the lists' shape).
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
  scores, relevant, where, dtype, weights = _prepare(fn, scores, labels, where, weights)
  values, valid = _triplet_lists(scores, relevant, where, jnp.asarray(margin, dtype))
  return lists.finish(values, scores, where, valid, reduce_fn, weights=weights)


def _log1p_sum_exp(x, mask):
  """`log(1 + sum_{mask} exp(x))` over the last axis, stable (logsumexp with a 0 term).

  0 where the mask is empty; masked entries of `x` get a zero gradient.
  """
  x = jnp.where(mask, x, 0)
  top = jax.lax.stop_gradient(jnp.maximum(jnp.max(jnp.where(mask, x, 0), axis=-1), 0))
  terms = jnp.where(mask, jnp.exp(x - top[..., None]), 0)
  return top + jnp.log(jnp.exp(-top) + jnp.sum(terms, axis=-1))


@functools.partial(jax.jit, static_argnames=("mine",))
def _multi_similarity_lists(scores, relevant, where, alpha, beta, base, epsilon, *, mine):
  dtype = lists.compute_dtype(scores.dtype)
  other = where & ~relevant
  relevant = where & relevant
  valid = jnp.any(relevant, axis=-1)
  s = lists.counted_scores(scores, where, valid).astype(dtype)
  if mine:
    fixed = jax.lax.stop_gradient(s)
    hardest_neg = jnp.max(fixed, axis=-1, where=other, initial=-jnp.inf)[..., None]
    hardest_pos = jnp.min(fixed, axis=-1, where=relevant, initial=jnp.inf)[..., None]
    relevant = relevant & (fixed - epsilon < hardest_neg)
    other = other & (fixed + epsilon > hardest_pos)
  pos = _log1p_sum_exp(-alpha * (s - base), relevant) / alpha
  neg = _log1p_sum_exp(beta * (s - base), other) / beta
  return pos + neg, valid


def multi_similarity_loss(
    scores: jax.typing.ArrayLike,
    labels: jax.typing.ArrayLike,
    *,
    where: jax.typing.ArrayLike | None = None,
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
    alpha: `> 0`, the scale of the positive term (default 2).
    beta: `> 0`, the scale of the negative term (default 50).
    base: `lambda`, the similarity about which pairs are pulled and pushed (default 0.5).
    epsilon: `None` (default) for every pair, or the mining margin `>= 0` (0.1 in
      pytorch-metric-learning and the paper).
    weights: optional `[...]` non-negative per-list weights (broadcastable to the lists' shape).
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
  scores, relevant, where, dtype, weights = _prepare(fn, scores, labels, where, weights)
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
