r"""Hierarchical retrieval metrics on lists: H-AP, its tie-aware mean, ASI, and HAPPIER's relevance.

A label hierarchy (species, genus, family...; SOP's products and categories) grades each item of a
query's list by the **level** it shares with the query: 0 for nothing shared, `L` (the number of
levels) for the query's own class, the levels between for the super-classes. Ramzi et al. 2022
(ECCV, "Hierarchical Average Precision Training for Pertinent Image Retrieval", HAPPIER; code:
elias-ramzi/HAPPIER) turn the levels into a graded **relevance** (`hierarchical_relevance`) and
measure a ranking by:

* **H-AP** (`hap_metric`, `tie_aware_hap_metric`, HAPPIER Sec. 3.1): AP in which each positive
  counts the positives ranked at or before it by the relevance they share with it,

  .. math::
    \mathcal{H}\text{-rank}(k) = \sum_{j:\ \mathrm{rank}(j) \leq \mathrm{rank}(k)}
        \min(\mathrm{rel}(j), \mathrm{rel}(k)), \qquad
    \mathcal{H}\text{-AP} = \frac{1}{\sum_k \mathrm{rel}(k)}
        \sum_{k:\ \mathrm{rel}(k) > 0} \frac{\mathcal{H}\text{-rank}(k)}{\mathrm{rank}(k)}

  (the item itself included in its H-rank with `min(rel(k), rel(k)) = rel(k)`; with binary
  relevance H-AP is AP);
* **ASI** (`asi_metric`, the average set intersection of HAPPIER's evaluation, after Sun et al.
  2021's DyML benchmark): at each depth `d`, how many of the top `d` items the ranking shares,
  level by level, with the ideal ranking's top `d`, averaged over the depths `1..R`.

These functions follow `jaxrank.ap_metric`'s conventions (module `jaxrank._src.metrics`): `scores`
`[..., n]` higher is better, `where`, `segments`, `reduce_fn`, items scored `-inf` not retrieved
(counted in the ideal, given no rank), a valid NaN score makes its list NaN, a list without a
valid item of positive grade gives 0 and is left out of the reduction. `labels` are the grades:
the relevance (any non-negative reals) for H-AP; for ASI the level, as HAPPIER's evaluation
computes it (only the grades' equality and order are read: any strictly increasing map of the
levels gives the same ASI, but HAPPIER's relevance of a level is not one, as a level of few items
can weigh more per item than a finer level of many).

**Ties** are ranked pessimistically, as in `ap_metric` and `ndcg_metric`: inside a group of equal
scores the lower grades come first. For H-AP that order is the worst of the group's orderings
(swapping two adjacent tied items into increasing relevance never raises H-AP), so `hap_metric`
is a lower bound of `tie_aware_hap_metric`, the expectation over every ordering of the tied items,
which has a closed form. ASI has no such worst order (a lower grade first can fill a level the
ideal ranking still lacks) and no closed-form expectation over orderings: `asi_metric` uses the
same fixed order as the others (its value does not depend on the items' order in the list), and
there is no tie-aware ASI.

**Cost.** Each list compares every pair of its items: O(n^2) time and memory per list (as
`opa_metric`). `jaxrank.evaluate_retrieval` computes H-AP and ASI of whole test sets without pairs
(`super_labels=`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrank import types
from jaxrank._src import checks
from jaxrank._src import lists
from jaxrank._src import metrics
from jaxrank._src import ranking
from jaxrank._src import segmented

_REASON = "a relevance or a level, 0 for an item that shares nothing with the query"


def _graded_lists(
  fn, scores, labels, where, segments
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jnp.dtype]:
  """Checked lists `(scores, where, grades, retrieved, dtype)`, grades 0 where masked."""
  scores, labels, where = checks.check_lists(fn, scores, labels, where)
  checks.check_graded_labels(fn, labels, where, reason=_REASON)
  scores, where, labels = segmented.as_lists(fn, segments, scores, where, labels)
  dtype = lists.compute_dtype(scores.dtype)
  grades = jnp.where(where, labels.astype(dtype), jnp.zeros((), dtype))
  return scores, where, grades, metrics.retrieved_items(scores, where), dtype


def _pairs(scores, grades, retrieved):
  """`[..., k, j]` pair arrays of retrieved items: `j` scored above `k`, `j` tied with `k` (not
  `k` itself), `j` ranked before `k` pessimistically (above, or tied with a lower grade, or with
  the same grade and a lower index), and `min(rel_j, rel_k)`."""
  n = scores.shape[-1]
  both = retrieved[..., :, None] & retrieved[..., None, :]
  s_k, s_j = scores[..., :, None], scores[..., None, :]
  g_k, g_j = grades[..., :, None], grades[..., None, :]
  index = jnp.arange(n)
  earlier = index[None, :] < index[:, None]
  above = both & (s_j > s_k)
  tied = both & (s_j == s_k) & (index[None, :] != index[:, None])
  before = above | (tied & ((g_j < g_k) | ((g_j == g_k) & earlier)))
  return above, tied, before, jnp.minimum(g_j, g_k), earlier


def _hap_value(values, grades, retrieved):
  """`sum(values over the retrieved positives) / sum(rel)`, and which lists are defined."""
  total = jnp.sum(grades, axis=-1)
  counted = retrieved & (grades > 0)
  summed = jnp.sum(jnp.where(counted, values, jnp.zeros((), values.dtype)), axis=-1)
  return summed / jnp.where(total > 0, total, jnp.ones((), total.dtype)), total > 0


def hap_metric(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""Hierarchical Average Precision (H-AP) of each list, ties ranked pessimistically.

  .. math::
    \mathcal{H}\text{-AP} = \frac{1}{\sum_{k} \mathrm{rel}(k)} \sum_{k:\ \mathrm{rel}(k) > 0}
        \frac{1}{\mathrm{rank}(k)} \sum_{j:\ \mathrm{rank}(j) \leq \mathrm{rank}(k)}
        \min(\mathrm{rel}(j), \mathrm{rel}(k))

  (Ramzi et al. 2022, HAPPIER, Sec. 3.1: the H-rank of `k` and H-AP), with `rel` the graded
  `labels` and the sums over the valid items (those scored `-inf` count in the denominator and get
  no rank). With binary labels (0 or 1) it is `ap_metric`. HAPPIER's relevance of a level is
  `hierarchical_relevance`. Ties: inside a group of equal scores the lower relevances come first,
  the worst of the group's orders (module docstring); `tie_aware_hap_metric` is the mean over
  every order. Equal to HAPPIER's released `hap` (happier/engine/metrics.py) on untied scores when
  no two levels of a query share one relevance value (that code counts an item once per level of
  its relevance, so twice where two levels' relevances coincide). Cost: O(n^2) per list.

  Args:
    scores: `[..., n]` floating scores, higher is better; `-inf` is not retrieved.
    labels: `[..., n]` non-negative relevances (0: not relevant); a negative valid one raises
      `ValueError` when known.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row (API
      reference, "Segments"); `reduce_fn=None` then gives `[..., n]`.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced H-AP, or `[...]` per list. Lists without a valid item of positive relevance give 0
    and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> # A fine positive (relevance 2) ranked below a coarse one (relevance 1):
  >>> # H-ranks 1 and 1 + 2, ranks 1 and 2: (1/1 + 3/2) / 3.
  >>> round(float(hap_metric(jnp.array([0.9, 0.8, 0.1]), jnp.array([1.0, 2.0, 0.0]))), 4)
  0.8333
  """
  fn = "hap_metric"
  scores, where, rel, retrieved, dtype = _graded_lists(fn, scores, labels, where, segments)
  _, _, before, shared, _ = _pairs(scores, rel, retrieved)
  zero = jnp.zeros((), dtype)
  rank = 1 + jnp.sum(before, axis=-1).astype(dtype)
  h_rank = rel + jnp.sum(jnp.where(before, shared, zero), axis=-1)
  values, defined = _hap_value(h_rank / rank, rel, retrieved)
  return lists.finish(values, scores, where, defined, reduce_fn)


def tie_aware_hap_metric(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""Tie-aware H-AP: the mean of `hap_metric` over every ordering of the tied items.

  An item `k` of a tie group of `g` items placed after `N` items takes each of the group's places
  `N + t` (`t = 1..g`) with probability `1/g`, and then has each other member `j` of its group
  before it with probability `(t - 1)/(g - 1)`, so its expected term is

  .. math::
    \frac{1}{g} \sum_{t=1}^{g} \frac{A_k + \frac{t - 1}{g - 1} W_k}{N + t}, \quad
    A_k = \mathrm{rel}(k) + \sum_{j \text{ above}} \min(\mathrm{rel}(j), \mathrm{rel}(k)), \quad
    W_k = \sum_{j \text{ tied}, j \neq k} \min(\mathrm{rel}(j), \mathrm{rel}(k))

  (He et al. 2018's derivation of the tie-aware AP, Prop. 1, carried to H-AP's H-rank), with
  `sum_t (t - 1)/(N + t) = g - (N + 1) sum_t 1/(N + t)`. With binary labels it is
  `tie_aware_ap_metric`; without ties, `hap_metric`. Cost: O(n^2) per list.

  Args:
    scores: `[..., n]` floating scores, higher is better; `-inf` is not retrieved.
    labels: `[..., n]` non-negative relevances (0: not relevant).
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced tie-aware H-AP, or `[...]` per list (0 for a list without a valid item of positive
    relevance, left out of the reduction).

  >>> import jax.numpy as jnp
  >>> # Two tied items, relevances 2 and 1: H-AP (2 + 2/2) / 3 or (1 + 3/2) / 3; the mean is 11/12.
  >>> round(float(tie_aware_hap_metric(jnp.array([0.5, 0.5]), jnp.array([2.0, 1.0]))), 4)
  0.9167
  """
  fn = "tie_aware_hap_metric"
  scores, where, rel, retrieved, dtype = _graded_lists(fn, scores, labels, where, segments)
  above, tied, _, shared, earlier = _pairs(scores, rel, retrieved)
  zero = jnp.zeros((), dtype)
  num_above = jnp.sum(above, axis=-1).astype(dtype)  # N, the same for the whole group.
  size = 1 + jnp.sum(tied, axis=-1).astype(dtype)  # g
  place = 1 + jnp.sum(tied & earlier, axis=-1).astype(dtype)  # t of each item in its group.
  in_group = tied | jnp.eye(scores.shape[-1], dtype=bool)
  # sum_{t=1..g} 1 / (N + t): one term per member of k's group, at that member's place.
  harmonic = jnp.sum(
    jnp.where(in_group, 1 / (num_above[..., :, None] + place[..., None, :]), zero), axis=-1
  )
  first = rel + jnp.sum(jnp.where(above, shared, zero), axis=-1)  # A_k
  within = jnp.sum(jnp.where(tied, shared, zero), axis=-1)  # W_k
  later = size - (num_above + 1) * harmonic  # sum_t (t - 1) / (N + t)
  expected = (first * harmonic + within * later / jnp.maximum(size - 1, 1)) / size
  values, defined = _hap_value(expected, rel, retrieved)
  return lists.finish(values, scores, where, defined, reduce_fn)


def asi_metric(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""Average Set Intersection (ASI) of each list, ties ranked pessimistically.

  .. math::
    \mathrm{ASI} = \frac{1}{R} \sum_{d=1}^{R} \frac{1}{d} \sum_{l > 0}
        \min\big(\#\{k : y_k = l,\ \mathrm{rank}(k) \leq d\},\ \#\{k : y_k = l,\
        \mathrm{rank}^*(k) \leq d\}\big)

  with `y` the grades, `R` the number of valid items of positive grade and `rank*` an ideal order
  (by decreasing grade): at each depth `d`, the items of each level that the top `d` share with
  the ideal top `d`, divided by `d`, averaged over the depths `1..R` (HAPPIER's released `asi`,
  happier/engine/metrics.py, with its default `at_R=True`, on the levels: 0 for nothing shared,
  `L` for the query's class; also SupRank's). Only the equality and order of the grades matter
  (a strictly increasing map of the levels changes nothing). Items scored `-inf` count in `R`
  and in the ideal order but take no place. Ties: lower grades first inside a group of equal
  scores, a fixed order (not the worst one for ASI: module docstring). Cost: O(n^2) per list.

  Args:
    scores: `[..., n]` floating scores, higher is better; `-inf` is not retrieved.
    labels: `[..., n]` non-negative grades (0: not relevant); a negative valid one raises
      `ValueError` when known.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced ASI, or `[...]` per list. Lists without a valid item of positive grade give 0 and
    are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> # Ideal order: level 2, then 1. Depth 1 shares nothing, depth 2 both: (0/1 + 2/2) / 2.
  >>> float(asi_metric(jnp.array([0.9, 0.8, 0.1]), jnp.array([1, 2, 0])))
  0.5
  """
  fn = "asi_metric"
  scores, where, grades, retrieved, dtype = _graded_lists(fn, scores, labels, where, segments)
  groups = ranking.tie_groups(scores, grades, retrieved)
  shared = _asi_shared(groups, grades, where)
  n = scores.shape[-1]
  depth = jnp.arange(1, n + 1, dtype=dtype)
  num_relevant = jnp.sum(where & (grades > 0), axis=-1)
  kept = depth <= num_relevant[..., None].astype(dtype)
  values = jnp.sum(jnp.where(kept, shared.astype(dtype) / depth, jnp.zeros((), dtype)), axis=-1)
  values = values / jnp.maximum(num_relevant, 1).astype(dtype)
  return lists.finish(values, scores, where, num_relevant > 0, reduce_fn)


def _asi_shared(groups, grades, where):
  """`[..., n]`: at each depth `d` (1-based, position `d - 1`), the items of positive grade the
  ranking's top `d` shares, level by level, with the ideal top `d`.

  In the ranking (`groups`, sorted), each level is represented by its first item `i`: its count in
  the top `d` is a cumulative sum of `same[i, :]`; in the ideal top `d` it is
  `clip(d - #{grade > g_i}, 0, #{grade = g_i})` over every valid item (retrieved or not).
  """
  valid, g = groups.valid, jnp.where(groups.valid, groups.labels, 0)
  n = g.shape[-1]
  same = valid[..., :, None] & valid[..., None, :] & (g[..., :, None] == g[..., None, :])
  index = jnp.arange(n)
  first = valid & (g > 0) & ~jnp.any(same & (index[None, :] < index[:, None]), axis=-1)
  in_ranking = jnp.cumsum(same.astype(jnp.int32), axis=-1)  # [..., i, d]
  valid_grades = jnp.where(where, grades, -1)[..., None, :]  # Masked items: in no level.
  size = jnp.sum(valid_grades == g[..., :, None], axis=-1)  # #{grade = g_i}
  better = jnp.sum(valid_grades > g[..., :, None], axis=-1)  # #{grade > g_i}
  depth = jnp.arange(1, n + 1)
  in_ideal = jnp.clip(depth - better[..., :, None], 0, size[..., :, None])
  both = jnp.minimum(in_ranking, in_ideal)
  return jnp.sum(jnp.where(first[..., :, None], both, 0), axis=-2)


def hierarchical_relevance(
  levels: jax.typing.ArrayLike,
  *,
  num_levels: int,
  alpha: float = 1.0,
  self_level: int | None = None,
  where: jax.typing.ArrayLike | None = None,
) -> jax.Array:
  r"""HAPPIER's relevance of each item of a list from the level it shares with the query.

  .. math::
    \mathrm{rel}(k) = \frac{(l_k / L)^{\alpha}}{|\Omega^{(l_k)}|}

  for an item at level `l_k >= 1` (0 at level 0), with `L = num_levels` and `|Omega^(l)|` the
  number of valid items of the list at level `l` (Ramzi et al. 2022, HAPPIER, Sec. 3.1: each level
  weighs `(l/L)^alpha` in all, shared among its items; the released code's `get_relevances_pop`,
  its evaluation's default with `alpha = 1`). The released code weighs a level
  `(l / (L - 1))^alpha`: a constant factor, which H-AP does not see. It also counts the query
  itself among its own class (its relevances are computed over the whole data set, the query
  included, and the query then left out of its ranking): `self_level=num_levels` does the same.
  The level of an item is the number of the hierarchy's labels it shares with the query (its class
  and each super-class), as HAPPIER's `create_label_matrix` counts them.

  Args:
    levels: `[..., n]` integer levels in `0..num_levels`.
    num_levels: `L`, the level of the query's own class (the number of labels per item), >= 1.
    alpha: the exponent (HAPPIER's default 1; 0 weighs every level alike).
    self_level: optional level at which one more item (the query itself) is counted in
      `|Omega^(l)|`; `None` counts only the list's valid items.
    where: optional `[..., n]` boolean mask of valid items (masked items get relevance 0 and are
      not counted).

  Returns:
    `[..., n]` float32 relevances (float64 under x64), 0 at level 0 and at masked items.

  >>> import jax.numpy as jnp
  >>> # Two items of the query's class (level 2), one of its category (level 1), one other.
  >>> hierarchical_relevance(jnp.array([2, 1, 2, 0]), num_levels=2).tolist()
  [0.5, 0.5, 0.5, 0.0]
  """
  fn = "hierarchical_relevance"
  levels = jnp.asarray(levels)
  if not jnp.issubdtype(levels.dtype, jnp.integer):
    raise TypeError(f"{fn}: levels must be integers (0..num_levels), got dtype {levels.dtype}.")
  checks.check_positive_int(fn, "num_levels", num_levels)
  checks.check_int_at_least(fn, "self_level", 0 if self_level is None else self_level, 0)
  where = checks.check_mask(fn, "where", where, levels.shape)
  dtype = lists.compute_dtype(jnp.result_type(float))  # float64 under x64.
  one_hot = (levels[..., None] == jnp.arange(num_levels + 1)) & where[..., None]
  counts = jnp.sum(one_hot, axis=-2).astype(dtype)  # [..., L + 1]
  if self_level is not None:
    counts = counts + (jnp.arange(num_levels + 1) == self_level).astype(dtype)
  weight = (jnp.arange(num_levels + 1, dtype=dtype) / num_levels) ** alpha
  per_level = jnp.where(jnp.arange(num_levels + 1) > 0, weight / jnp.maximum(counts, 1), 0)
  rel = jnp.sum(jnp.where(one_hot, per_level[..., None, :], 0), axis=-1)
  return rel.astype(dtype)


# ---------------------------------------------------------------------------------------------
# Whole test sets (`evaluate_retrieval(..., super_labels=...)`): by counting, without pairs.


class PositiveOrders(NamedTuple):
  """A chunk's positives (items of level >= 1) sorted two ways, each array `[c, P]`.

  Both orders sort by decreasing score (empty slots last), so position `p` holds the same score in
  both (and in `thresholds`): what is counted around `thresholds[:, p]` serves both. Ties: lower
  relevance first in `by_relevance` (H-AP's pessimistic order), lower level first in `by_level`
  (ASI's and NDCG's, as `asi_metric` and `ndcg_metric` on the levels).

  Attributes:
    thresholds: the positives' scores, decreasing, NaN in empty slots (last).
    by_relevance: `(level, relevance, filled)` in H-AP's order.
    by_level: `(level, relevance, filled)` in ASI's order.
  """

  thresholds: jax.Array
  by_relevance: tuple[jax.Array, jax.Array, jax.Array]
  by_level: tuple[jax.Array, jax.Array, jax.Array]


def sort_positives(scores, level, relevance, filled) -> PositiveOrders:
  """`PositiveOrders` of the positives' `scores [c, P]` (any value in empty slots), their levels,
  relevances and filled slots: two sorts of `[c, P]`."""
  key = jnp.where(filled, -scores, jnp.inf)  # Decreasing scores, empty slots last.
  key = jnp.where(key == 0, jnp.zeros_like(key), key)  # -0.0 and 0.0: one key.
  operands = (key, relevance, level, filled.astype(jnp.int32), scores)
  by_rel = jax.lax.sort(operands, dimension=1, num_keys=2)
  by_level = jax.lax.sort(
    (key, level, relevance, filled.astype(jnp.int32)), dimension=1, num_keys=2
  )
  thresholds = jnp.where(by_rel[3] > 0, by_rel[4], jnp.nan)
  return PositiveOrders(
    thresholds=thresholds,
    by_relevance=(by_rel[2], by_rel[1], by_rel[3] > 0),
    by_level=(by_level[1], by_level[2], by_level[3] > 0),
  )


def metrics_from_counts(
  orders: PositiveOrders,
  negatives_above: jax.Array,
  negatives_tied: jax.Array,
  level_relevance: jax.Array,
  level_counts: jax.Array,
  *,
  sum_fn=metrics.sum_in_order,
) -> dict[str, jax.Array]:
  """Per-query `h-ap`, `asi` and `ndcg` `[c]` of a chunk from its sorted positives and, for each
  position `p`, the negatives (level-0 items) scored above and tied with `orders.thresholds[:, p]`.

  Pessimistic ranks: a positive at position `p` of an order has every tied negative and the `p`
  positives before it in that order above it, `rank = above + tied + p + 1`. H-AP: H-rank by a
  cumulative count of each level's positives (`O(P L)`); ASI: the levels at depths `1..P` (a
  scatter of the ranks that fall there), counted per level against the ideal counts; NDCG: the
  levels' gains `2**l - 1` at their ranks over the ideal order's.

  Args:
    orders: the positives, `sort_positives`.
    negatives_above: `[c, P]` integer counts of the negatives above each position's score.
    negatives_tied: `[c, P]` integer counts of the negatives tied with it.
    level_relevance: `[c, L + 1]` the relevance of each level (0 at level 0).
    level_counts: `[c, L + 1]` the positives of each level in the query's list (level 0 unused).
    sum_fn: the sum over the last axis (in a fixed order by default: the same bits in every
      program).
  """
  dtype = level_relevance.dtype
  num_levels = level_relevance.shape[-1] - 1
  p = orders.thresholds.shape[-1]
  rank = negatives_above + negatives_tied + jnp.arange(1, p + 1)[None, :]
  return {
    "h-ap": _hap_of_order(orders.by_relevance, rank, level_relevance, num_levels, sum_fn),
    **_asi_and_ndcg(orders.by_level, rank, level_counts.astype(jnp.int32), dtype, sum_fn),
  }


def _hap_of_order(order, rank, level_relevance, num_levels, sum_fn):
  level, rel, filled = order
  dtype = level_relevance.dtype
  h_rank = jnp.zeros(rel.shape, dtype)
  for v in range(1, num_levels + 1):  # A few levels: one cumulative count each.
    count = jnp.cumsum((filled & (level == v)).astype(jnp.int32), axis=1).astype(dtype)
    h_rank = h_rank + jnp.minimum(level_relevance[:, v : v + 1], rel) * count
  zero = jnp.zeros((), dtype)
  total = sum_fn(jnp.where(filled, rel, zero))
  summed = sum_fn(jnp.where(filled, h_rank / rank.astype(dtype), zero))
  return summed / jnp.where(total > 0, total, jnp.ones((), dtype))


def _asi_and_ndcg(order, rank, counts, dtype, sum_fn):
  level, _, filled = order
  c, p = level.shape
  num_levels = counts.shape[-1] - 1
  # The level found at each depth 1..P (0: a negative, or nothing).
  at = jnp.where(filled & (rank <= p), rank - 1, p)
  at_depth = jnp.zeros((c, p + 1), jnp.int32).at[jnp.arange(c)[:, None], at]
  at_depth = at_depth.set(level.astype(jnp.int32))[:, :p]
  depth = jnp.arange(1, p + 1)[None, :]
  shared = jnp.zeros((c, p), jnp.int32)
  ideal_gain = jnp.zeros((c, p), dtype)
  for v in range(1, num_levels + 1):
    better = jnp.sum(counts[:, v + 1 :], axis=1, keepdims=True)
    size = counts[:, v : v + 1]
    in_ranking = jnp.cumsum((at_depth == v).astype(jnp.int32), axis=1)
    shared = shared + jnp.minimum(in_ranking, jnp.clip(depth - better, 0, size))
    ideal_gain = ideal_gain + jnp.where((depth > better) & (depth <= better + size), 2.0**v - 1, 0)
  zero = jnp.zeros((), dtype)
  num_relevant = jnp.sum(counts[:, 1:], axis=1)
  kept = depth <= num_relevant[:, None]
  asi = sum_fn(jnp.where(kept, shared.astype(dtype) / depth.astype(dtype), zero))
  asi = asi / jnp.maximum(num_relevant, 1).astype(dtype)
  gains = jnp.where(filled, 2.0 ** level.astype(dtype) - 1, zero)
  dcg = sum_fn(gains / jnp.log2(1 + rank.astype(dtype)))
  ideal = sum_fn(ideal_gain / jnp.log2(1 + depth.astype(dtype)))
  return {"asi": asi, "ndcg": dcg / jnp.where(ideal > 0, ideal, jnp.ones((), dtype))}
