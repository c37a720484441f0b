"""Exact retrieval metrics on lists: AP, NDCG, DCG, MRR, OPA, Recall@k, Precision@k, MAP@R.

Every function follows rax's conventions:

* `scores` `[..., n]`, higher is better; the last axis is the list, leading axes are batch;
* `labels` `[..., n]`; an item is relevant iff its label is `>= 1` (NDCG uses the label as a
  graded relevance, with gain `2**label - 1`: a negative valid label raises `ValueError` when the
  labels are known, as it would put NDCG outside `[0, 1]`);
* keyword-only `where` `[..., n]` (or broadcastable to it), a boolean mask of valid items; masked
  items are ignored entirely, as if sliced out;
* keyword-only `reduce_fn` (default `jnp.mean`), called as `reduce_fn(values, where=...)` over
  the lists; `None` returns one value per list, shaped `scores.shape[:-1]`.

A list without a relevant valid item (or with every item masked) has no defined value: it gives 0
and is left out of the reduction, so a batch of such lists gives 0, never NaN.

**Ties.** The plain metrics rank tied items pessimistically (within a group of equal scores,
non-relevant items first, lower labels first for NDCG): a model never gains by tying scores, and the
value does not depend on the order of the items in the list. The `tie_aware_*` metrics give the
expectation over every ordering of the tied items instead (He et al. 2018, Prop. 1).

**Scores of `-inf`: items not retrieved** (rax's convention; TREC's for a run that returns part of
the list). A valid item scored `-inf` is in the list but has no rank: it counts among the list's
relevant items (the `R` of AP, MAP@R and `relevant_fraction_at_k_metric`, the ideal DCG of NDCG)
and decides whether the list is defined, but it contributes no precision, gain, hit or reciprocal
rank, and takes no place among the retrieved items (the denominator of `precision_at_k_metric`).
So a retrieval system that returns its top `m` candidates scores the others `-inf`, and a relevant
item it did not return costs it what it costs in rax and trec_eval. To remove an item from a list
entirely, mask it with `where`. (`opa_metric` compares pairs of scores, and `-inf` is below every
other score there.) The losses rank a `-inf` score last, like any other score.

**Two recalls.** `recall_at_k_metric` is the "Recall@K" of metric learning (every paper jaxrank
implements): 1 if a relevant item is in the top `k`, else 0 (a hit rate).
`relevant_fraction_at_k_metric` is information retrieval's recall@k (`rax.recall_metric`): the
fraction of the list's relevant items that are in the top `k`. They agree on lists with one
relevant item.

**NaN scores.** A valid NaN score makes its list's value NaN (so a mean over lists is NaN too): a
NaN is a bug upstream and jaxrank does not hide it. Masked NaN scores are ignored, and a list
without a relevant valid item gives 0 even if it holds a NaN (that rule comes first).

**Cost.** One sort of each list: O(n log n) time and O(n) memory per list (`opa_metric`: O(n^2),
every pair). These metrics are not
differentiable (their gradient is zero almost everywhere); the losses approximate them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrank import types
from jaxrank._src import checks
from jaxrank._src import counting
from jaxrank._src import lists
from jaxrank._src import ranking
from jaxrank._src import segmented


def retrieved_items(scores: jax.Array, where: jax.Array) -> jax.Array:
  """`[..., n]`: the valid items that are ranked, those not scored `-inf` (module docstring)."""
  return where & (scores != -jnp.inf)


def _sorted_relevant(
  fn, scores, labels, where, segments
) -> tuple[
  jax.Array, jax.Array, jnp.dtype, jax.Array, ranking.RelevantItemStatistics, jax.Array, jax.Array
]:
  """Sorts lists into tie groups and returns what the rank metrics need, in sorted order.

  Only the retrieved items (`retrieved_items`) are ranked: `relevant` and `stats` are those of the
  retrieved relevant items, while `num_relevant` counts every relevant valid item, retrieved or
  not, and `num_retrieved` the retrieved items.
  """
  scores, labels, where = checks.check_lists(fn, scores, labels, where)
  scores, where, labels = segmented.as_lists(fn, segments, scores, where, labels)
  dtype = lists.compute_dtype(scores.dtype)
  groups = ranking.tie_groups(scores, labels.astype(dtype), retrieved_items(scores, where))
  relevant = groups.valid & (groups.labels >= 1)
  stats = ranking.list_relevant_statistics(groups, relevant, dtype)
  num_relevant = jnp.sum(where & (labels >= 1), axis=-1)
  num_retrieved = jnp.sum(groups.valid, axis=-1)
  return scores, where, dtype, relevant, stats, num_relevant, num_retrieved


# Per-list values from `ranking.RelevantItemStatistics`, shared with `evaluate_retrieval`, which
# computes the same statistics by counting instead of sorting. `relevant` masks the entries of the
# last axis that are relevant items; `num_relevant` counts them. `sum_fn` sums the last axis:
# `evaluate_retrieval` passes `sum_in_order`, so that its metrics are the same bits in every
# program that computes them (`jnp.sum`'s order of additions is XLA's choice, which differed
# between the one-process and the sharded chunk's programs).


def _sum(x):
  return jnp.sum(x, axis=-1)


def sum_in_order(x: jax.Array) -> jax.Array:
  """Sums `[..., R]` over the last axis left to right, compensated (Kahan's summation: the error
  of a few roundings, not of `R`), skipping zeros: the same bits in any program (a loop, which XLA
  does not reorder) and whatever the positions of zeros among the entries, so relevant items
  listed with or without empty slots between them sum alike. O(R) steps over `[...]`."""

  def add(r, state):
    total, lost = state
    value = jax.lax.dynamic_index_in_dim(x, r, axis=-1, keepdims=False)
    corrected = value - lost
    new_total = total + corrected
    new_lost = (new_total - total) - corrected
    skip = value == 0
    return jnp.where(skip, total, new_total), jnp.where(skip, lost, new_lost)

  zeros = lists.varying_like(jnp.zeros(x.shape[:-1], x.dtype), x)
  # Written out up to `COMPARE_UP_TO` entries: no loop in the accelerators' evaluation chunk.
  unroll = x.shape[-1] <= counting.COMPARE_UP_TO
  return jax.lax.fori_loop(0, x.shape[-1], add, (zeros, zeros), unroll=unroll or 1)[0]


def _precision_at_rank(stats, dtype):
  return stats.hits.astype(dtype) / jnp.maximum(stats.rank, 1).astype(dtype)


def _mean_over_relevant(values, included, num_relevant, dtype, sum_fn):
  """`values` summed where `included`, divided by the number of relevant items (at least 1)."""
  return sum_fn(jnp.where(included, values, 0)) / jnp.maximum(num_relevant, 1).astype(dtype)


def ap_from_statistics(stats, relevant, num_relevant, dtype, topn=None, sum_fn=_sum):
  if topn is not None:
    relevant = relevant & (stats.rank <= topn)
  precision = _precision_at_rank(stats, dtype)
  return _mean_over_relevant(precision, relevant, num_relevant, dtype, sum_fn)


def tie_aware_ap_from_statistics(stats, relevant, num_relevant, dtype, sum_fn=_sum):
  precision = stats.expected_precision
  return _mean_over_relevant(precision, relevant, num_relevant, dtype, sum_fn)


def map_at_r_from_statistics(stats, relevant, num_relevant, dtype, sum_fn=_sum):
  in_top_r = relevant & (stats.rank <= num_relevant[..., None])
  precision = _precision_at_rank(stats, dtype)
  return _mean_over_relevant(precision, in_top_r, num_relevant, dtype, sum_fn)


def recall_at_k_from_statistics(stats, relevant, k, dtype):
  return jnp.any(relevant & (stats.rank <= k), axis=-1).astype(dtype)


def ap_metric(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  topn: int | None = None,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""Average Precision of each list, ties ranked pessimistically.

  .. math::
    \mathrm{AP@k} = \frac{1}{R} \sum_{i:\, y_i \geq 1,\ \mathrm{rank}_i \leq k}
        \frac{\#\{j : y_j \geq 1,\ \mathrm{rank}_j \leq \mathrm{rank}_i\}}{\mathrm{rank}_i}

  with `R` the number of relevant valid items (those scored `-inf`, which are not ranked,
  included) and `k` the cut-off `topn` (the whole list by default). With a cut-off the
  denominator stays `R` (as in rax and trec_eval), so AP@k is at most `k / R`. Ties: inside a
  group of equal scores the non-relevant items are ranked first, so AP here is a lower bound of
  `tie_aware_ap_metric` and equal to it (and to `sklearn.metrics.average_precision_score`) when
  relevant items are not tied with others.

  Args:
    scores: `[..., n]` floating scores, higher is better; `-inf` is not retrieved.
    labels: `[..., n]` labels; relevant iff `>= 1`.
    topn: optional cut-off `k`, a positive Python int; `None` uses the whole list.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced AP, or `[...]` per list with `reduce_fn=None`. Lists without a relevant valid item
    give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> scores, labels = jnp.array([0.9, 0.8, 0.7, 0.1]), jnp.array([1, 0, 1, 0])
  >>> round(float(ap_metric(scores, labels)), 4), float(ap_metric(scores, labels, topn=1))
  (0.8333, 0.5)
  >>> # Two lists packed into one row: [0.9 relevant, 0.7] and [0.8, 0.1 relevant].
  >>> segments = jnp.array([4, 7, 4, 7])
  >>> ap_metric(scores, jnp.array([1, 0, 0, 1]), segments=segments, reduce_fn=None).tolist()
  [1.0, 0.5, 0.0, 0.0]
  """
  checks.check_positive_int("ap_metric", "topn", topn, allow_none=True)
  scores, where, dtype, relevant, stats, num_rel, _ = _sorted_relevant(
    "ap_metric", scores, labels, where, segments
  )
  values = ap_from_statistics(stats, relevant, num_rel, dtype, topn=topn)
  return lists.finish(values, scores, where, num_rel > 0, reduce_fn)


def tie_aware_ap_metric(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""Tie-aware Average Precision: the mean of AP over every ordering of tied items.

  For a tie group `d` (valid items with equal scores) of `n_d` items, `n_d^+` of them relevant,
  after `N_{d-1}` items of which `N_{d-1}^+` are relevant, the group contributes (He et al. 2018,
  Prop. 1, eq. 6, as derived in App. A, eq. 19, from McSherry and Najork 2008):

  .. math::
    \mathrm{AP}_T(d) = \frac{n_d^+}{n_d N^+} \sum_{j = N_{d-1}+1}^{N_{d-1}+n_d}
        \frac{N_{d-1}^+ + 1 + (j - N_{d-1} - 1)\frac{n_d^+ - 1}{n_d - 1}}{j}

  with `N^+` the number of relevant items. It works for any real scores (groups are found by a
  sort), not only integer Hamming distances; the inner sum is evaluated in closed form, so the cost
  is O(n log n) per list however large the ties. Without ties it equals `ap_metric`. Items scored
  `-inf` are not retrieved (in no tie group) but count in `N^+`, as in `ap_metric`.

  Args:
    scores: `[..., n]` floating scores, higher is better; `-inf` is not retrieved.
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced tie-aware AP, or `[...]` per list. Lists without a relevant valid item give 0 and
    are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> # Two items tied: AP is 1 or 1/2 depending on the order; the mean is 3/4.
  >>> float(tie_aware_ap_metric(jnp.array([0.5, 0.5]), jnp.array([1, 0])))
  0.75
  """
  scores, where, dtype, relevant, stats, num_rel, _ = _sorted_relevant(
    "tie_aware_ap_metric", scores, labels, where, segments
  )
  values = tie_aware_ap_from_statistics(stats, relevant, num_rel, dtype)
  return lists.finish(values, scores, where, num_rel > 0, reduce_fn)


def map_at_r_metric(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""MAP@R (Musgrave et al. 2020): AP truncated at R, the number of relevant items of the list.

  .. math::
    \mathrm{MAP@R} = \frac{1}{R} \sum_{i=1}^{R} P(i)\, \mathbb{1}[\text{item at rank } i
        \text{ is relevant}]

  with `P(i)` the precision at rank `i` and `R` the number of relevant valid items (those scored
  `-inf`, not retrieved, included). Ties are ranked pessimistically, as in `ap_metric`.

  Args:
    scores: `[..., n]` floating scores, higher is better; `-inf` is not retrieved.
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced MAP@R, or `[...]` per list. Lists without a relevant valid item give 0 and are left
    out of the reduction.

  >>> import jax.numpy as jnp
  >>> # R = 2; ranks 1 and 3 are relevant; only rank 1 is within the top R.
  >>> float(map_at_r_metric(jnp.array([0.9, 0.8, 0.7]), jnp.array([1, 0, 1])))
  0.5
  """
  scores, where, dtype, relevant, stats, num_rel, _ = _sorted_relevant(
    "map_at_r_metric", scores, labels, where, segments
  )
  values = map_at_r_from_statistics(stats, relevant, num_rel, dtype)
  return lists.finish(values, scores, where, num_rel > 0, reduce_fn)


def recall_at_k_metric(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  topn: int,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""Recall@k as reported in metric learning: 1 if a relevant item is in the top `topn`, else 0.

  This is the "Recall@K" of every seed paper (a hit rate), not the fraction of relevant items
  retrieved that `rax.recall_metric(topn=)` computes under the same argument name, which is
  `relevant_fraction_at_k_metric` here: the two agree only on lists with one relevant item. Ties
  are ranked pessimistically, as in `ap_metric`: a relevant item tied at the `topn`-th place with
  non-relevant items is counted after them.

  Args:
    scores: `[..., n]` floating scores, higher is better; `-inf` is not retrieved.
    labels: `[..., n]` labels; relevant iff `>= 1`.
    topn: the cut-off `k`, a positive Python int (rax's name for it).
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced Recall@k, or `[...]` per list. Lists without a relevant valid item give 0 and are
    left out of the reduction (rax counts them, as 0).

  >>> import jax.numpy as jnp
  >>> scores, labels = jnp.array([0.9, 0.8, 0.7]), jnp.array([0, 0, 1])
  >>> [recall_at_k_metric(scores, labels, topn=n).item() for n in (2, 3)]
  [0.0, 1.0]
  """
  checks.check_positive_int("recall_at_k_metric", "topn", topn)
  scores, where, dtype, relevant, stats, num_rel, _ = _sorted_relevant(
    "recall_at_k_metric", scores, labels, where, segments
  )
  values = recall_at_k_from_statistics(stats, relevant, topn, dtype)
  return lists.finish(values, scores, where, num_rel > 0, reduce_fn)


def relevant_fraction_at_k_metric(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  topn: int,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""The fraction of a list's relevant items that are in its top `topn`: IR's recall@k.

  .. math::
    \frac{\#\{i : y_i \geq 1,\ \mathrm{rank}_i \leq k\}}{R}

  with `R` the number of relevant valid items, those scored `-inf` (not retrieved) included. This
  is `rax.recall_metric` and the recall@k of information retrieval (Manning et al. 2008,
  *Introduction to Information Retrieval*, sec. 8.4); metric learning's "Recall@K", 1 if any
  relevant item is in the top `k`, is `recall_at_k_metric`, and the two agree only on lists with
  one relevant item. `precision_at_k_metric` divides the same count by `k` instead. Ties are ranked
  pessimistically, as in `ap_metric`. To take the whole list (rax's `topn=None`), pass its length.

  Args:
    scores: `[..., n]` floating scores, higher is better; `-inf` is not retrieved.
    labels: `[..., n]` labels; relevant iff `>= 1`.
    topn: the cut-off `k`, a positive Python int.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced fraction, or `[...]` per list. Lists without a relevant valid item give 0 and are
    left out of the reduction (rax counts them, as 0).

  >>> import jax.numpy as jnp
  >>> scores, labels = jnp.array([0.9, 0.8, 0.7]), jnp.array([1, 0, 1])
  >>> [relevant_fraction_at_k_metric(scores, labels, topn=n).item() for n in (1, 2, 3)]
  [0.5, 0.5, 1.0]
  """
  checks.check_positive_int("relevant_fraction_at_k_metric", "topn", topn)
  scores, where, dtype, relevant, stats, num_rel, _ = _sorted_relevant(
    "relevant_fraction_at_k_metric", scores, labels, where, segments
  )
  hits = jnp.sum(relevant & (stats.rank <= topn), axis=-1).astype(dtype)
  values = hits / jnp.maximum(num_rel, 1).astype(dtype)
  return lists.finish(values, scores, where, num_rel > 0, reduce_fn)


def mrr_metric(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  topn: int | None = None,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""Reciprocal rank of the first relevant item (its mean over lists is the MRR).

  .. math::
    \mathrm{RR@k} = \max_{i:\, y_i \geq 1,\ \mathrm{rank}_i \leq k} \frac{1}{\mathrm{rank}_i}
        \quad (0 \text{ if there is no such } i)

  (Voorhees 1999, TREC-8 question answering; `rax.mrr_metric`). Ties are ranked pessimistically,
  as in `ap_metric`: a relevant item tied with non-relevant items is ranked after them. A relevant
  item scored `-inf` is not retrieved and has no reciprocal rank.

  Args:
    scores: `[..., n]` floating scores, higher is better; `-inf` is not retrieved.
    labels: `[..., n]` labels; relevant iff `>= 1`.
    topn: optional cut-off `k`, a positive Python int; `None` uses the whole list.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced reciprocal rank (MRR with the default `jnp.mean`), or `[...]` per list. Lists
    without a relevant valid item give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> float(mrr_metric(jnp.array([0.9, 0.8, 0.7]), jnp.array([0, 1, 1])))
  0.5
  """
  checks.check_positive_int("mrr_metric", "topn", topn, allow_none=True)
  scores, where, dtype, relevant, stats, num_rel, _ = _sorted_relevant(
    "mrr_metric", scores, labels, where, segments
  )
  if topn is not None:
    relevant = relevant & (stats.rank <= topn)
  reciprocal = 1 / jnp.maximum(stats.rank, 1).astype(dtype)
  values = jnp.max(jnp.where(relevant, reciprocal, 0), axis=-1)
  return lists.finish(values, scores, where, num_rel > 0, reduce_fn)


def precision_at_k_metric(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  topn: int,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""Precision@k: the fraction of relevant items among the top `topn` (`k`), as in rax.

  .. math::
    \mathrm{P@k} = \frac{\#\{i : y_i \geq 1,\ \mathrm{rank}_i \leq k\}}
        {\min(k, n_{\mathrm{retrieved}})}

  The denominator is `min(k, n_retrieved)`, with `n_retrieved` the number of valid items not
  scored `-inf`, so that a list shorter than `k` can still reach 1 (as in rax). Ties are ranked
  pessimistically, as in `ap_metric`. Unlike rax, lists without a relevant item are left out of
  the reduction.

  Args:
    scores: `[..., n]` floating scores, higher is better; `-inf` is not retrieved.
    labels: `[..., n]` labels; relevant iff `>= 1`.
    topn: the cut-off `k`, a positive Python int (rax's name for it).
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced Precision@k, or `[...]` per list. Lists without a relevant valid item give 0 and
    are left out of the reduction (rax counts them, as 0).

  >>> import jax.numpy as jnp
  >>> float(precision_at_k_metric(jnp.array([0.9, 0.8, 0.7]), jnp.array([1, 0, 1]), topn=2))
  0.5
  """
  checks.check_positive_int("precision_at_k_metric", "topn", topn)
  scores, where, dtype, relevant, stats, num_rel, num_retrieved = _sorted_relevant(
    "precision_at_k_metric", scores, labels, where, segments
  )
  hits = jnp.sum(relevant & (stats.rank <= topn), axis=-1).astype(dtype)
  values = hits / jnp.maximum(jnp.minimum(num_retrieved, topn), 1).astype(dtype)
  return lists.finish(values, scores, where, num_rel > 0, reduce_fn)


def _dcg(
  fn, scores, labels, where, segments, topn, item_weights, tie_aware
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """DCG `[...]` of the retrieved items and DCG `[...]` of the ideal order of the valid items."""
  checks.check_positive_int(fn, "topn", topn, allow_none=True)
  scores, labels, where = checks.check_lists(fn, scores, labels, where)
  checks.check_graded_labels(fn, labels, where)
  dtype = lists.compute_dtype(scores.dtype)
  per_item = [labels]
  if item_weights is not None:
    per_item.append(checks.check_item_weights(fn, item_weights, where, dtype))
  scores, where, labels, *weights = segmented.as_lists(fn, segments, scores, where, *per_item)
  item_gains = ranking.gains(labels, where, dtype)
  if weights:  # The checked item_weights (spread over the segments' lists with segments).
    item_gains = item_gains * weights[0]
  # Tie groups keyed by the (weighted) gains: lowest gain first inside a group (pessimistic).
  groups = ranking.tie_groups(scores, item_gains, retrieved_items(scores, where))
  gains = jnp.where(groups.valid, groups.labels, jnp.zeros((), dtype))
  discount = ranking.discounts(scores.shape[-1], dtype, topn=topn)
  if tie_aware:
    # He et al. 2018, eq. 7: each position of a tie group receives the group's mean gain.
    _, group_gain = ranking.segment_totals(groups, gains)
    gains = jnp.where(groups.valid, group_gain / groups.group_size.astype(dtype), 0)
  dcg = jnp.sum(gains * discount, axis=-1)
  ideal = ranking.ideal_dcg(item_gains, topn=topn)
  return scores, where, dcg, ideal


def _ndcg(fn, scores, labels, where, segments, topn, item_weights, reduce_fn, tie_aware):
  scores, where, dcg, ideal = _dcg(
    fn, scores, labels, where, segments, topn, item_weights, tie_aware
  )
  values = dcg / jnp.where(ideal > 0, ideal, 1)
  return lists.finish(values, scores, where, ideal > 0, reduce_fn)


def dcg_metric(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  topn: int | None = None,
  item_weights: jax.typing.ArrayLike | None = None,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""Discounted Cumulative Gain with graded labels, ties ranked pessimistically.

  .. math::
    \mathrm{DCG@k} = \sum_{i:\, \mathrm{rank}_i \leq k} w_i\,
        \frac{2^{y_i} - 1}{\log_2(1 + \mathrm{rank}_i)}

  (Jarvelin and Kekalainen 2002, with Burges et al. 2005's gain `2^y - 1`; `rax.dcg_metric`), with
  `w_i` the item weights (1 by default). Ties: inside a group of equal scores, lower (weighted)
  gains are ranked first. Items scored `-inf` are not retrieved and add no gain. Unlike NDCG, DCG
  is not normalised: its scale grows with the labels and the list, so its mean over lists weighs
  lists with many relevant items more.

  Args:
    scores: `[..., n]` floating scores, higher is better; `-inf` is not retrieved.
    labels: `[..., n]` non-negative graded labels (gain `2**label - 1`); a negative valid label
      raises `ValueError` when the labels are known (under `jit`, inside `jaxrank.traced_checks`
      only).
    topn: optional cut-off `k`, a positive Python int; `None` uses the whole list.
    item_weights: optional `[..., n]` non-negative per-item weights that multiply the gains (rax's
      `weights`; jaxrank's `weights`, in the losses, are per list).
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced DCG, or `[...]` per list. Lists without a valid item of positive (weighted) gain,
    whose ideal DCG is 0 as in `ndcg_metric`, give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> round(float(dcg_metric(jnp.array([0.9, 0.8]), jnp.array([0, 2]))), 4)
  1.8928
  """
  scores, where, dcg, ideal = _dcg(
    "dcg_metric", scores, labels, where, segments, topn, item_weights, False
  )
  return lists.finish(dcg, scores, where, ideal > 0, reduce_fn)


def ndcg_metric(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  topn: int | None = None,
  item_weights: jax.typing.ArrayLike | None = None,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""Normalised Discounted Cumulative Gain with graded labels, ties ranked pessimistically.

  .. math::
    \mathrm{DCG@k} = \sum_{i:\, \mathrm{rank}_i \leq k} w_i\,
        \frac{2^{y_i} - 1}{\log_2(1 + \mathrm{rank}_i)},
    \qquad \mathrm{NDCG@k} = \frac{\mathrm{DCG@k}}{\mathrm{DCG@k} \text{ of the ideal order}}

  (Jarvelin and Kekalainen 2002), with `w_i` the item weights (1 by default); the ideal order sorts
  the valid items by weighted gain, as in rax. Ties: inside a group of equal scores, lower
  (weighted) gains are ranked first (a lower bound of `tie_aware_ndcg_metric`). An item scored
  `-inf` is not retrieved: it adds no gain to the DCG but keeps its place in the ideal DCG.

  Args:
    scores: `[..., n]` floating scores, higher is better; `-inf` is not retrieved.
    labels: `[..., n]` non-negative graded labels (gain `2**label - 1`); a negative valid label
      raises `ValueError` when the labels are known (under `jit`, inside `jaxrank.traced_checks`
      only).
    topn: optional cut-off `k`, a positive Python int; `None` uses the whole list.
    item_weights: optional `[..., n]` non-negative per-item weights that multiply the gains (rax's
      `weights`; jaxrank's `weights`, in the losses, are per list).
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced NDCG, or `[...]` per list. Lists whose ideal DCG is 0 (no valid item with a
    positive label) give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> round(float(ndcg_metric(jnp.array([0.9, 0.8]), jnp.array([0, 1]))), 4)
  0.6309
  """
  return _ndcg(
    "ndcg_metric", scores, labels, where, segments, topn, item_weights, reduce_fn, tie_aware=False
  )


def tie_aware_ndcg_metric(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  topn: int | None = None,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""Tie-aware NDCG: the mean of NDCG over every ordering of tied items.

  Each tie group `d` of `n_d` items starting after `N_{d-1}` items contributes its mean gain times
  the discounts of the positions it occupies (He et al. 2018, Prop. 1, eq. 7; McSherry and Najork
  2008, whose cut-off version drops positions past `k`):

  .. math::
    \mathrm{DCG}_T(d) = \frac{1}{n_d}\sum_{i \in d} (2^{y_i} - 1)
        \sum_{j=N_{d-1}+1}^{N_{d-1}+n_d} \frac{\mathbb{1}[j \leq k]}{\log_2(1 + j)}

  normalised by the DCG of the ideal order. Without ties it equals `ndcg_metric`. Items scored
  `-inf` are not retrieved (they are in no tie group), as in `ndcg_metric`.

  Args:
    scores: `[..., n]` floating scores, higher is better; `-inf` is not retrieved.
    labels: `[..., n]` non-negative graded labels (gain `2**label - 1`); a negative valid label
      raises `ValueError` when the labels are known (under `jit`, inside `jaxrank.traced_checks`
      only).
    topn: optional cut-off `k`, a positive Python int; `None` uses the whole list.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced tie-aware NDCG, or `[...]` per list. Lists whose ideal DCG is 0 give 0 and are
    left out of the reduction.

  >>> import jax.numpy as jnp
  >>> # The two orders give NDCG 1 and 0.6309; the tie-aware value is their mean.
  >>> round(float(tie_aware_ndcg_metric(jnp.array([0.5, 0.5]), jnp.array([0, 1]))), 4)
  0.8155
  """
  return _ndcg(
    "tie_aware_ndcg_metric", scores, labels, where, segments, topn, None, reduce_fn, tie_aware=True
  )


def opa_metric(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""Ordered Pair Accuracy: the fraction of the pairs with different labels in the right order.

  .. math::
    \mathrm{OPA} = \frac{\sum_{i,j} \mathbb{1}[y_i > y_j]\, \mathbb{1}[s_i > s_j]}
        {\sum_{i,j} \mathbb{1}[y_i > y_j]}

  over the pairs of valid items (Joachims 2002's pairwise ranking accuracy, the complement of
  Kendall's tau distance to the labels' order; `rax.opa_metric`). Labels are compared as graded
  values (any real numbers), not as relevant or not. Ties: a pair of equal scores is misordered
  (pessimistic, as in `ap_metric`), and so is a pair of `-inf` scores; `-inf` is otherwise a
  score below every other. Cost: every pair, O(n^2) time and memory per list.

  Args:
    scores: `[..., n]` floating scores, higher is better.
    labels: `[..., n]` graded labels; only their order matters.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced OPA, or `[...]` per list. Lists without a pair of valid items with different
    labels have no ordered pair: they give 0 and are left out of the reduction (rax counts them,
    as 0).

  >>> import jax.numpy as jnp
  >>> # Pairs (label 2 > 1), (2 > 0), (1 > 0): the last is misordered.
  >>> round(float(opa_metric(jnp.array([0.9, 0.1, 0.5]), jnp.array([2, 1, 0]))), 4)
  0.6667
  """
  scores, labels, where = checks.check_lists("opa_metric", scores, labels, where)
  scores, where, labels = segmented.as_lists("opa_metric", segments, scores, where, labels)
  dtype = lists.compute_dtype(scores.dtype)
  labels = labels.astype(dtype)
  ordered = (
    where[..., :, None] & where[..., None, :] & (labels[..., :, None] > labels[..., None, :])
  )
  correct = ordered & (scores[..., :, None] > scores[..., None, :])
  num_pairs = jnp.sum(ordered, axis=(-2, -1))
  values = jnp.sum(correct, axis=(-2, -1)).astype(dtype) / jnp.maximum(num_pairs, 1).astype(dtype)
  return lists.finish(values, scores, where, num_pairs > 0, reduce_fn)
