"""Hard ranking primitives: tie groups and the ranks of relevant items.

Every exact metric in jaxrank is a function of where the relevant items of a list land. This
module computes that once, in two ways that give the same statistics:

* `tie_groups` sorts a list (O(n log n)) and describes the group of tied scores each item is in;
* `count_above_and_tied` (for `evaluate_retrieval`) counts, for each relevant item, the items
  scored above it and tied with it, without ranking the list: by comparing (O(n) per relevant item,
  the fastest way for long lists with few relevant items) or, for many, by one sort of the scores.

Both feed `relevant_item_statistics`, the single place where the tie policy lives:

* **pessimistic rank**: tied items are ordered worst first (lower labels before higher labels), so
  a model never gains by tying scores; this is what `ap_metric` and the other plain metrics use,
  and it makes them invariant to the order in which items are listed;
* **tie-aware expected precision**: the expectation over all orderings of the tied items
  (McSherry and Najork 2008; He et al. 2018, Prop. 1, eq. 6 and App. A, eq. 19), used by
  `tie_aware_ap_metric`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrank._src import checks
from jaxrank._src import lists
from jaxrank._src import platforms


class TieGroups(NamedTuple):
  """A list sorted into groups of tied scores, each array `[..., n]` in sorted order.

  Attributes:
    order: index (into the original list) of the item at each sorted position. Valid items come
      first by decreasing score; inside a group of equal scores, items come by increasing label
      (worst first), then by original index; masked items come last.
    valid: whether the item at each position is valid (not masked).
    labels: the labels in sorted order.
    num_above: number of valid items scored strictly higher than the item (the start of its group).
    group_size: number of valid items whose score equals the item's (itself included).
  """

  order: jax.Array
  valid: jax.Array
  labels: jax.Array
  num_above: jax.Array
  group_size: jax.Array


def tie_groups(scores: jax.Array, labels: jax.Array, where: jax.Array) -> TieGroups:
  """Sorts lists by decreasing score into tie groups, worst label first inside a group.

  Args:
    scores: `[..., n]` floating scores, higher is better.
    labels: `[..., n]` labels; inside a tie group lower labels are placed first.
    where: `[..., n]` boolean mask of valid items.

  Returns:
    A `TieGroups` whose arrays are `[..., n]`. One stable sort of the last axis: O(n log n) time,
    O(n) memory per list. Scores `0.0` and `-0.0` are one group; each NaN is a group of its own.
    On a CPU the sort is numpy's through a host callback (`numpy_group_order`, much faster than
    XLA's sort there), on GPU and TPU XLA's (`platforms.by_platform`): the same order.
  """
  invalid = (~where).astype(jnp.int32)
  neg = -scores
  neg = jnp.where(neg == 0, jnp.zeros_like(neg), neg)  # -0.0 and 0.0 sort as one key.
  invalid_s, neg_s, labels_s, order = platforms.by_platform(
    invalid, neg, labels, cpu=_cpu_group_sort, accelerator=_xla_group_sort
  )
  differs = (neg_s[..., 1:] != neg_s[..., :-1]) | (invalid_s[..., 1:] != invalid_s[..., :-1])
  start, end = run_bounds(differs)
  return TieGroups(
    order=order,
    valid=invalid_s == 0,
    labels=labels_s,
    num_above=start,
    group_size=end - start + 1,
  )


def _xla_group_sort(invalid, neg, labels):
  """`(invalid, neg, labels, order)` sorted by the keys `(invalid, neg, labels)`, stably: one
  sort of the four operands together (no gather, which a TPU serialises)."""
  iota = lax.broadcasted_iota(jnp.int32, neg.shape, neg.ndim - 1)
  return lax.sort((invalid, neg, labels, iota), dimension=neg.ndim - 1, is_stable=True, num_keys=3)


def _cpu_group_sort(invalid, neg, labels):
  """`_xla_group_sort` on a CPU: the order from numpy, the keys gathered by it (so that a
  derivative flows through the gathered keys as through XLA's sort; the order, an integer, has
  none, and a host callback has no derivative rule: its keys are passed without one)."""
  shape = jax.ShapeDtypeStruct(neg.shape, jnp.int32)
  keys = (lax.stop_gradient(invalid), lax.stop_gradient(neg), lax.stop_gradient(labels))
  (order,) = host_callback(
    lambda *keys: (numpy_group_order(*keys),),
    (shape,),
    *keys,
    vmap_method="broadcast_all",
  )
  # Inside shard_map the order varies as its inputs do; the callback does not record it.
  for x in (invalid, neg, labels):
    order = lists.varying_like(order, x)
  return (*(jnp.take_along_axis(x, order, axis=-1) for x in (invalid, neg, labels)), order)


def numpy_group_order(invalid: np.ndarray, neg: np.ndarray, labels: np.ndarray) -> np.ndarray:
  """The stable order `[..., n]` (int32) of `tie_groups`' sort by `(invalid, neg, labels)`.

  As XLA sorts floats: NaN after +inf, every NaN one key (in the order of the list); `neg` holds
  no `-0.0`. float32 keys become order-preserving integers, packed with the invalid flag above
  and the position below into one uint64 whose plain (unstable) sort gives the stable order of
  the first two keys; the lists where a tie group's labels are then out of order (rare with
  continuous scores, common with Hamming distances) are sorted again by all three keys. Other
  dtypes take numpy's `lexsort`. Many lists are split over the cores (`map_row_blocks`).
  """
  invalid, neg, labels = np.broadcast_arrays(*(np.asarray(x) for x in (invalid, neg, labels)))
  n = neg.shape[-1]
  rows = [x.reshape(-1, n) for x in (invalid, neg, labels)]
  order = np.empty(rows[0].shape, np.int32)

  def sort_block(lo: int, hi: int) -> None:
    order[lo:hi] = _group_order(*(x[lo:hi] for x in rows))

  map_row_blocks(sort_block, order.shape[0], order.size)
  return order.reshape(neg.shape)


def _group_order(invalid: np.ndarray, neg: np.ndarray, labels: np.ndarray) -> np.ndarray:
  """`numpy_group_order` of lists `[c, n]` on one thread."""
  n = neg.shape[-1]
  neg = np.where(np.isnan(neg), np.array(np.nan, neg.dtype), neg)  # One NaN key.
  if neg.dtype != np.float32 or n >= 2**31:
    return np.lexsort((labels, neg, invalid), axis=-1).astype(np.int32)
  packed = (invalid.astype(np.uint64) << np.uint64(63)) | (_float32_keys(neg) << np.uint64(31))
  packed = np.sort(packed | np.arange(n, dtype=np.uint64), axis=-1)
  order = (packed & np.uint64(0x7FFFFFFF)).astype(np.int32)
  group = packed >> np.uint64(31)
  labels_s = np.take_along_axis(labels, order, axis=-1)
  before, after = labels_s[:, :-1], labels_s[:, 1:]
  # Out of order: a lower label after a higher one, or a number after a NaN (NaN sorts last).
  unordered = (after < before) | ((before != before) & (after == after))
  resort = np.any((group[:, 1:] == group[:, :-1]) & unordered, axis=-1)
  if resort.any():
    order[resort] = np.lexsort((labels[resort], neg[resort], invalid[resort]), axis=-1)
  return order


def segment_totals(groups: TieGroups, values: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Sums of `values` (in sorted order) above each item's group and inside its group.

  Args:
    groups: the `TieGroups` of the lists.
    values: `[..., n]` values in sorted order (0 at masked positions).

  Returns:
    `(above, within)`, each `[..., n]`: the sum over items scored strictly higher, and the sum over
    the item's tie group.
  """
  axis = values.ndim - 1
  inclusive = jnp.cumsum(values, axis=axis)
  exclusive = inclusive - values
  above = jnp.take_along_axis(exclusive, groups.num_above, axis=axis)
  last = groups.num_above + groups.group_size - 1
  within = jnp.take_along_axis(inclusive, last, axis=axis) - above
  return above, within


def run_bounds(differs: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The first and last position of the run of equal keys that each position of a sorted axis is in.

  Args:
    differs: `[..., n - 1]` boolean, whether sorted neighbours `i` and `i + 1` have different keys.

  Returns:
    `(start, end)`, each `[..., n]` int32: the positions where each item's run begins and ends
    (inclusive). Two cumulative extrema: O(n) time and memory per list.
  """
  axis = differs.ndim - 1
  n = differs.shape[-1] + 1
  iota = lax.broadcasted_iota(jnp.int32, differs.shape[:-1] + (n,), axis)
  edge = jnp.ones(differs.shape[:-1] + (1,), dtype=bool)
  start = lax.cummax(jnp.where(jnp.concatenate([edge, differs], axis=-1), iota, 0), axis=axis)
  end = lax.cummin(
    jnp.where(jnp.concatenate([differs, edge], axis=-1), iota, n - 1), axis=axis, reverse=True
  )
  return start, end


def gains(labels: jax.Array, where: jax.Array, dtype) -> jax.Array:
  """The NDCG gains `2**label - 1` of valid items, 0 where masked, in `dtype`."""
  return jnp.where(where, jnp.exp2(labels.astype(dtype)) - 1, jnp.zeros((), dtype))


def ideal_dcg(gains: jax.Array, *, topn: int | None = None) -> jax.Array:
  """DCG `[...]` of the gains `[..., n]` sorted in decreasing order (discount `1/log2(1 + i)`, the
  first `topn` positions when given): one sort per list.

  The barrier keeps XLA from constant-folding the sort when the labels are compile-time constants
  (closed over by a jitted function), which takes minutes for a `[1024, 1024]` matrix on CPU.
  """
  gains = jax.lax.optimization_barrier(gains)
  discount = discounts(gains.shape[-1], gains.dtype, topn=topn)
  return jnp.sum(-jnp.sort(-gains, axis=-1) * discount, axis=-1)


def discounts(n: int, dtype, *, topn: int | None = None) -> jax.Array:
  """The DCG discounts `1 / log2(1 + i)` of positions `i = 1..n` `[n]`, 0 after `topn`."""
  position = jnp.arange(1, n + 1, dtype=dtype)
  discount = 1 / jnp.log2(1 + position)
  if topn is not None:
    discount = jnp.where(position <= topn, discount, jnp.zeros_like(discount))
  return discount


@functools.lru_cache(maxsize=32)
def _harmonic_table(size: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
  """Harmonic numbers H(0..size) split as hi + lo in `dtype`, so differences keep full precision.

  H(m) grows like log(m) while a difference H(a) - H(b) of nearby arguments is tiny; in float32
  the plain difference of two rounded values would lose most digits. Subtracting the rounded
  values is exact when they are close (Sterbenz), and the low parts restore what rounding dropped.
  """
  h = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, size + 1, dtype=np.float64))])
  hi = h.astype(dtype)
  lo = (h - hi.astype(np.float64)).astype(dtype)
  return hi, lo


class RelevantItemStatistics(NamedTuple):
  """Where relevant items land, each array shaped like the inputs of `relevant_item_statistics`.

  Attributes:
    rank: the pessimistic 1-based rank (tied non-relevant items counted above).
    hits: number of relevant items at or above `rank` in the pessimistic order.
    expected_precision: the expectation, over all orderings of the tied items, of the precision
      at the item's rank (He et al. 2018, eq. 19, one relevant item's share of its tie group).
  """

  rank: jax.Array
  hits: jax.Array
  expected_precision: jax.Array


def relevant_item_statistics(
  num_above: jax.Array,
  num_tied: jax.Array,
  relevant_above: jax.Array,
  relevant_tied: jax.Array,
  tie_position: jax.Array,
  *,
  list_size: int,
  dtype: jnp.dtype,
) -> RelevantItemStatistics:
  """Ranks and precisions of relevant items from counts of the items around them.

  For a relevant item whose tie group (the valid items with exactly its score) starts after
  `N = num_above` items, holds `n = num_tied` items of which `r = relevant_tied` are relevant,
  with `R = relevant_above` relevant items above it, and which is the `p = tie_position`-th
  relevant item of its group:

  .. math::
    \\mathrm{rank} = N + (n - r) + p, \\qquad \\mathrm{hits} = R + p,

    E[\\mathrm{precision}] = \\frac{1}{n} \\sum_{j=1}^{n}
        \\frac{R + 1 + (j - 1)\\frac{r - 1}{n - 1}}{N + j}

  (He et al. 2018, App. A, eq. 19, divided among the group's `r` relevant items; the fraction
  `(r - 1)/(n - 1)` is 0 when `n = 1`). The sum is evaluated in closed form with harmonic numbers,
  so the cost is O(1) per item whatever the size of the tie.

  Args:
    num_above: `N`, integer; this and the next four are arrays of one shape, meaningful only at
      relevant items (other entries may hold anything finite).
    num_tied: `n`, integer.
    relevant_above: `R`, integer.
    relevant_tied: `r`, integer.
    tie_position: `p`, integer.
    list_size: an upper bound on `num_above + num_tied` (the list length), static.
    dtype: the floating dtype of the ratios.

  Returns:
    `RelevantItemStatistics` of the inputs' shape.
  """
  hi_table, lo_table = _harmonic_table(list_size, jnp.dtype(dtype).name)
  hi, lo = jnp.asarray(hi_table), jnp.asarray(lo_table)
  n_above = jnp.clip(num_above, 0, list_size)
  top = jnp.clip(num_above + num_tied, 0, list_size)
  harmonic = (hi[top] - hi[n_above]) + (lo[top] - lo[n_above])  # sum_{j=1}^{n} 1 / (N + j)
  n = num_tied.astype(dtype)
  big_n = num_above.astype(dtype)
  slope = (relevant_tied - 1).astype(dtype) / jnp.maximum(n - 1, 1)
  # sum_j (j - 1) / (N + j) = n - (N + 1) * harmonic.
  total = (relevant_above + 1).astype(dtype) * harmonic + slope * (n - (big_n + 1) * harmonic)
  expected_precision = total / jnp.maximum(n, 1)
  rank = num_above + (num_tied - relevant_tied) + tie_position
  hits = relevant_above + tie_position
  return RelevantItemStatistics(rank=rank, hits=hits, expected_precision=expected_precision)


def list_relevant_statistics(
  groups: TieGroups, relevant: jax.Array, dtype: jnp.dtype
) -> RelevantItemStatistics:
  """`relevant_item_statistics` for every position of sorted lists (`relevant` in sorted order)."""
  rel = relevant.astype(jnp.int32)
  relevant_above, relevant_tied = segment_totals(groups, rel)
  tie_position = jnp.cumsum(rel, axis=rel.ndim - 1) - relevant_above
  return relevant_item_statistics(
    groups.num_above,
    groups.group_size,
    relevant_above,
    relevant_tied,
    tie_position,
    list_size=relevant.shape[-1],
    dtype=dtype,
  )


# ---------------------------------------------------------------------------------------------
# Counting around relevant items (`evaluate_retrieval`): the statistics without sorting the lists.

COMPARE_UP_TO = 32
"""Relevant items per list up to which the counts compare every item with every relevant score.

Comparing is O(n R) per list for R relevant items; beyond, the counts come from one sort of each
list (O(n log n) whatever R). For small R comparing is the faster way on every platform: on CPU
one vectorised compare-and-add per item and relevant score, on a TPU or GPU one fused pass over
the scores (the `[c, R, n]` comparison is never written) where a sort is many passes. The
measurements that chose this bound: docs/guide/scale.rst, "Evaluation at scale".
"""


class Counts(NamedTuple):
  """What `count_above_and_tied` finds around thresholds, each array `[c, R]`.

  Attributes:
    thresholds: the thresholds of each list: as given when counted by the CPU's comparing loop (at
      most `COMPARE_UP_TO` of them), else in decreasing order with NaN (empty slots) last.
    above: the valid scores of the list strictly above each threshold (0 for NaN).
    tied: the valid scores of the list equal to each threshold (0 for NaN).
  """

  thresholds: jax.Array
  above: jax.Array
  tied: jax.Array


def count_above_and_tied(
  scores: jax.Array, thresholds: jax.Array, *, host_callback: bool = True
) -> Counts:
  """For each threshold, the scores of its list strictly above it and equal to it.

  Args:
    scores: `[c, n]` floating scores; NaN entries count for nothing (mark excluded items so).
    thresholds: `[c, R]` of the same dtype, the values to count around (the relevant items'
      scores); NaN marks an empty slot.
    host_callback: whether the CPU path may sort in numpy through `jax.pure_callback`; `False`
      takes XLA's sort instead (same counts), for programs where a host callback must not run.

  Returns:
    `Counts`: the thresholds and their counts (int32) in the same order: the order given when
    counted by the CPU's comparing loop, else decreasing. The same integers on every path.
    With at most `COMPARE_UP_TO` thresholds, by comparing, O(n R) per list: on CPU a loop over
    the items with `[R, c]` accumulators; on GPU and TPU one fused comparison and reduction over
    the items (nothing `[c, R, n]` is written; the thresholds are sorted first, `[c, R]`). Beyond,
    by one sort of each list and a binary search of the sorted thresholds, O((n + R) log n) per
    list: on CPU numpy's through `jax.pure_callback`, elsewhere XLA's. Chosen by platform when
    lowered (`platforms.by_platform`): an accelerator's program holds no host callback;
    `descending_ranks_branch` forces either platform's path ("numpy": the CPU's, "xla": the
    others'). Memory O(c (n + R)).
  """
  if thresholds.shape[-1] <= COMPARE_UP_TO:
    cpu, accelerator = _compare_counts, _fused_compare_counts
  else:
    cpu = _cpu_sorted_counts if host_callback else xla_sorted_counts
    accelerator = xla_sorted_counts
  ordered, above, tied = platforms.by_platform(scores, thresholds, cpu=cpu, accelerator=accelerator)
  return counts_of(ordered, above, tied)


def counts_of(thresholds: jax.Array, above: jax.Array, tied: jax.Array) -> Counts:
  """`Counts` of thresholds `[c, R]` and their counts, 0 in the empty (NaN) slots."""
  empty = jnp.isnan(thresholds)
  return Counts(thresholds, jnp.where(empty, 0, above), jnp.where(empty, 0, tied))


COMPARE_LISTS = 4
"""Lists counted together by the CPU's comparing loop (`compare_counts`), their `[lists, R,
COMPARE_LANES]` accumulators in the core's first cache level. This and the next two constants are
the loop's shape, chosen by timing each (docs/guide/scale.rst, "Evaluation at scale")."""

COMPARE_LANES = 16
"""Consecutive items of a list compared at each step of the CPU's comparing loop: a vector's
worth of float32 scores, read in the scores' own layout."""

COMPARE_UNROLL = 8
"""Steps of the CPU's comparing loop written out in each iteration of its `fori_loop`."""


def _compare_counts(scores: jax.Array, thresholds: jax.Array) -> tuple[jax.Array, ...]:
  """`(thresholds, above, tied)` by comparing (the CPU's path): `compare_counts` without the
  NaN counts."""
  return compare_counts(scores, thresholds)[:3]


def compare_counts(scores: jax.Array, thresholds: jax.Array) -> tuple[jax.Array, ...]:
  """`(thresholds, above, tied, nans)` by comparing, the thresholds in their order, and the NaN
  scores `[c]` of each list: the CPU's path of `count_above_and_tied` (`[c, n]` scores, `[c, R]`
  thresholds), which `evaluate_retrieval` also reads the NaN counts from.

  A loop over the lists in tiles of `COMPARE_LISTS` (the last tile overlapping its neighbour,
  which writes equal counts) and, inside, over their items `COMPARE_LANES` at a time, read from
  the scores as they lie: each step compares the tile's `[lists, lanes]` scores with its
  `[lists, R]` thresholds into `[lists, R, lanes]` accumulators (one vectorised compare and add
  per lane), summed over the lanes once at the end; the items beyond the last whole step are
  compared after the loop. Nothing `[c, n, R]` is materialised, nor a transposed copy of the
  scores (which cost a CPU about as much as the loop: docs/guide/scale.rst).
  """
  if scores.ndim != 2:  # One axis of lists.
    flat = compare_counts(
      scores.reshape(-1, scores.shape[-1]), thresholds.reshape(-1, thresholds.shape[-1])
    )
    return (
      thresholds,
      flat[1].reshape(thresholds.shape),
      flat[2].reshape(thresholds.shape),
      flat[3].reshape(scores.shape[:-1]),
    )
  c, num = thresholds.shape
  size = min(COMPARE_LISTS, c)

  def tile(k, out):
    start = jnp.minimum(k * size, c - size)
    counts = _compare_tile(scores, lax.dynamic_slice_in_dim(thresholds, start, size), start)
    return tuple(lax.dynamic_update_slice_in_dim(o, x, start, 0) for o, x in zip(out, counts))

  zeros = (jnp.zeros((c, num), jnp.int32), jnp.zeros((c, num), jnp.int32), jnp.zeros(c, jnp.int32))
  out = tuple(lists.varying_like(lists.varying_like(o, thresholds), scores) for o in zeros)
  return thresholds, *lax.fori_loop(0, -(-c // size), tile, out)


def _compare_tile(scores, keys, start):
  """`(above [m, R], tied [m, R], nans [m])` of the `m` lists of `scores [c, n]` from `start`,
  `keys [m, R]` their thresholds."""
  size, n = keys.shape[0], scores.shape[1]
  keys = keys[:, :, None]
  whole = n // COMPARE_LANES

  def step(j, acc):
    block = lax.dynamic_slice(scores, (start, j * COMPARE_LANES), (size, COMPARE_LANES))
    above, tied, nans = acc
    above = above + (block[:, None, :] > keys).astype(jnp.int32)
    tied = tied + (block[:, None, :] == keys).astype(jnp.int32)
    return above, tied, nans + jnp.isnan(block).astype(jnp.int32)

  zeros = jnp.zeros((size, keys.shape[1], COMPARE_LANES), jnp.int32)
  zeros = lists.varying_like(lists.varying_like(zeros, keys), scores)
  acc = (zeros, zeros, zeros[:, 0])
  if whole:
    acc = lax.fori_loop(0, whole, step, acc, unroll=min(COMPARE_UNROLL, whole))
  above, tied, nans = (x.sum(-1, dtype=jnp.int32) for x in acc)  # int32 under x64 too.
  if n % COMPARE_LANES:  # The last items, fewer than a step's.
    rest = lax.dynamic_slice(scores, (start, whole * COMPARE_LANES), (size, n % COMPARE_LANES))
    above = above + jnp.sum(rest[:, None, :] > keys, axis=-1, dtype=jnp.int32)
    tied = tied + jnp.sum(rest[:, None, :] == keys, axis=-1, dtype=jnp.int32)
    nans = nans + jnp.sum(jnp.isnan(rest), axis=-1, dtype=jnp.int32)
  return above, tied, nans


def _fused_compare_counts(scores: jax.Array, thresholds: jax.Array) -> tuple[jax.Array, ...]:
  """`(thresholds in decreasing order, above, tied)` by comparing every score with every
  threshold in one reduction over the items (the accelerators' path for few thresholds): XLA
  fuses the `[c, R, n]` comparison into the sums that read it, so the scores are read once, the
  items on the last axis (a TPU's lanes). The thresholds are sorted as `xla_sorted_counts` sorts
  them (`[c, R]`, next to nothing), so that every accelerator path gives the same `Counts`."""
  keys = -jnp.sort(-thresholds, axis=-1)  # Decreasing, NaN last.
  above = jnp.sum(scores[..., None, :] > keys[..., :, None], axis=-1, dtype=jnp.int32)
  tied = jnp.sum(scores[..., None, :] == keys[..., :, None], axis=-1, dtype=jnp.int32)
  return keys, above, tied


def xla_sorted_counts(scores: jax.Array, thresholds: jax.Array) -> tuple[jax.Array, ...]:
  """`(thresholds in decreasing order, above, tied)` by XLA's sorts and a binary search: the
  accelerators' path beyond `COMPARE_UP_TO` thresholds. Negated, the scores and thresholds sort
  increasing with NaN last, where no search reaches them (NaN compares False)."""
  negated = jnp.sort(-scores, axis=-1)
  keys = jnp.sort(-thresholds, axis=-1)

  def search(side):
    found = jax.vmap(lambda row, x: jnp.searchsorted(row, x, side=side))(negated, keys)
    return found.astype(jnp.int32)

  above = search("left")  # -s < -t: s > t.
  return -keys, above, search("right") - above


def numpy_sorted_counts(scores: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, ...]:
  """`xla_sorted_counts` in numpy (faster than XLA's on CPU), the lists split over the cores.

  The thresholds are searched in increasing order of their negation, which lets numpy's binary
  search start from the previous answer (faster than searching them unsorted).
  """
  scores, thresholds = np.asarray(scores), np.asarray(thresholds)
  lead = np.broadcast_shapes(scores.shape[:-1], thresholds.shape[:-1])
  scores = np.broadcast_to(scores, lead + scores.shape[-1:]).reshape(-1, scores.shape[-1])
  keys = np.broadcast_to(thresholds, lead + thresholds.shape[-1:])
  keys = -keys.reshape(-1, thresholds.shape[-1])
  above = np.empty(keys.shape, np.int32)
  tied = np.empty(keys.shape, np.int32)

  def count_block(lo: int, hi: int) -> None:
    keys[lo:hi] = np.sort(keys[lo:hi], axis=-1)  # NaN last, as in XLA.
    negated = np.sort(-scores[lo:hi], axis=-1)
    for i in range(hi - lo):
      above[lo + i] = np.searchsorted(negated[i], keys[lo + i], side="left")
      tied[lo + i] = np.searchsorted(negated[i], keys[lo + i], side="right") - above[lo + i]

  map_row_blocks(count_block, scores.shape[0], scores.size)
  shape = lead + thresholds.shape[-1:]
  return -keys.reshape(shape), above.reshape(shape), tied.reshape(shape)


def _cpu_sorted_counts(scores: jax.Array, thresholds: jax.Array) -> tuple[jax.Array, ...]:
  lead = jnp.broadcast_shapes(scores.shape[:-1], thresholds.shape[:-1])
  shape = lead + thresholds.shape[-1:]
  shapes: tuple[jax.ShapeDtypeStruct, ...] = (jax.ShapeDtypeStruct(shape, thresholds.dtype),)
  shapes += (jax.ShapeDtypeStruct(shape, jnp.int32),) * 2
  out = host_callback(numpy_sorted_counts, shapes, scores, thresholds, vmap_method="broadcast_all")
  # Inside shard_map the results vary as their inputs do; the callback does not record it.
  return tuple(lists.varying_like(lists.varying_like(x, thresholds), scores) for x in out)


# The dtypes that `host_callback` passes as pairs of 32-bit words.
_WIDE_DTYPES = (np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.uint64))


def host_callback(
  fn: Callable[..., Any],
  result_shape_dtypes: tuple[jax.ShapeDtypeStruct, ...],
  *args: jax.Array,
  vmap_method: str,
) -> tuple[jax.Array, ...]:
  """`jax.pure_callback(fn, result_shape_dtypes, *args)`, with 64-bit values passed bit for bit.

  JAX converts a callback's arguments and results to the dtypes that x64 allows on the thread
  that runs the callback, and XLA may run it on one of its own threads, where a thread-local
  `jax.enable_x64(True)` of the caller does not hold: float64 scores would reach `fn` rounded to
  float32, and its float64 results be refused ("Incorrect output dtype"). So each 64-bit array
  (`float64`, `int64`, `uint64`) crosses as `[..., 2]` uint32 words (`lax.bitcast_convert_type`)
  and is viewed back on the other side; other dtypes cross as they are. `fn` sees numpy arrays of
  the arguments' dtypes and returns arrays of the results' dtypes, as for `jax.pure_callback`.

  Args:
    fn: `fn(*numpy_arrays) -> tuple of numpy arrays` (a tuple even of one).
    result_shape_dtypes: the results' shapes and dtypes.
    *args: the arguments, each `[..., n_i]`.
    vmap_method: as for `jax.pure_callback` (the words' axis is the last, after every batch axis).

  Returns:
    The results, of `result_shape_dtypes`.
  """
  wide_args = [jnp.dtype(x.dtype) in _WIDE_DTYPES for x in args]
  wide_results = [jnp.dtype(r.dtype) in _WIDE_DTYPES for r in result_shape_dtypes]
  arg_dtypes = [np.dtype(x.dtype) for x in args]

  def host(*words):
    values = [
      np.ascontiguousarray(w).view(dtype)[..., 0] if wide else np.asarray(w)
      for w, dtype, wide in zip(words, arg_dtypes, wide_args)
    ]
    results = fn(*values)
    return tuple(
      np.ascontiguousarray(r, spec.dtype).view(np.uint32).reshape(np.shape(r) + (2,)) if wide else r
      for r, spec, wide in zip(results, result_shape_dtypes, wide_results)
    )

  words = [
    lax.bitcast_convert_type(x, jnp.uint32) if wide else x for x, wide in zip(args, wide_args)
  ]
  word_shapes = tuple(
    jax.ShapeDtypeStruct(r.shape + (2,), jnp.uint32) if wide else r
    for r, wide in zip(result_shape_dtypes, wide_results)
  )
  out = jax.pure_callback(host, word_shapes, *words, vmap_method=vmap_method)
  return tuple(
    lax.bitcast_convert_type(o, r.dtype) if wide else o
    for o, r, wide in zip(out, result_shape_dtypes, wide_results)
  )


def relevant_ties(values: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Where each relevant item stands among the relevant items of its list.

  Args:
    values: `[c, R]` scores of the relevant items, NaN in empty slots, as `Counts.thresholds`
      holds them: in any order for at most `COMPARE_UP_TO` slots, else in decreasing order with
      NaN last.

  Returns:
    `(relevant_above, relevant_tied, tie_position)`, each `[c, R]` int32: the relevant items
    scored strictly higher, those scored equal (itself included), and its place among those equal
    (1 for the first, in slot order), the inputs of `relevant_item_statistics`. Values in empty
    slots are unspecified. By comparing every pair for at most `COMPARE_UP_TO` slots (O(R^2) per
    list, no sort); beyond, read off the sorted order (O(R)).
  """
  if values.shape[-1] <= COMPARE_UP_TO:
    other, mine = values[:, None, :], values[:, :, None]  # [c, 1, R], [c, R, 1]
    slot = jnp.arange(values.shape[-1])
    relevant_above = jnp.sum(other > mine, axis=-1, dtype=jnp.int32)
    relevant_tied = jnp.sum(other == mine, axis=-1, dtype=jnp.int32)
    earlier = (other == mine) & (slot[None, None, :] < slot[None, :, None])
    return relevant_above, relevant_tied, 1 + jnp.sum(earlier, axis=-1, dtype=jnp.int32)
  start, end = run_bounds(values[..., 1:] != values[..., :-1])  # Each NaN is a run of its own.
  iota = lax.broadcasted_iota(jnp.int32, values.shape, values.ndim - 1)
  return start, end - start + 1, iota - start + 1


# ---------------------------------------------------------------------------------------------
# Blackbox ranks (RaMBO).


def xla_descending_ranks(scores: jax.Array) -> jax.Array:
  """`descending_ranks` by XLA's sort: the path on GPU and TPU."""
  axis = scores.ndim - 1
  iota = lax.broadcasted_iota(jnp.int32, scores.shape, axis)
  negated = jnp.where(scores == 0, jnp.zeros_like(scores), -scores)
  # lax.sort orders every NaN (of either sign) after +inf, all NaNs as one key: NaN scores last.
  _, order = lax.sort((negated, iota), dimension=axis, is_stable=True, num_keys=1)
  # Invert the permutation: the item at sorted position p gets rank p + 1.
  positions = (iota + 1).astype(scores.dtype)
  return jnp.put_along_axis(jnp.zeros_like(scores), order, positions, axis=axis, inplace=False)


def _float32_keys(values: np.ndarray) -> np.ndarray:
  """float32 `values` as uint64 keys below 2^32 in the same order (NaN, made positive, after
  +inf): the sign bit flipped for positive values, every bit for negative ones."""
  bits = values.view(np.uint32)
  flip = (bits >> np.uint32(31)) * np.uint32(0x7FFFFFFF) | np.uint32(0x80000000)
  return (bits ^ flip).astype(np.uint64)


def numpy_descending_ranks(scores: np.ndarray) -> np.ndarray:
  """`descending_ranks` in numpy, for the CPU path (faster than XLA's CPU sort).

  float32 keys become order-preserving 32-bit integers, packed above the 32-bit position into one
  uint64 whose plain (unstable) sort gives the stable order. Other dtypes use a stable argsort.
  Every NaN becomes the one positive quiet NaN first, whose key follows +inf's, so NaN scores rank
  last whatever their sign bit and payload, in the order of the list (as XLA's sort does).

  Many lists (`[..., n]` with at least `_PARALLEL_ITEMS` scores in all) are split into blocks of
  lists sorted on the cores this process may use (numpy's sort releases the GIL): the callback
  otherwise runs on one core while XLA's other threads wait for it. The lists are independent, so
  the ranks are the same whatever the split.
  """
  scores = np.asarray(scores)
  if scores.ndim < 2:
    return _numpy_descending_ranks(scores)
  rows = scores.reshape(-1, scores.shape[-1])
  ranks = np.empty_like(rows)

  def sort_block(lo: int, hi: int) -> None:
    ranks[lo:hi] = _numpy_descending_ranks(rows[lo:hi])

  map_row_blocks(sort_block, rows.shape[0], rows.size)
  return ranks.reshape(scores.shape)


def map_row_blocks(fn: Callable[[int, int], None], num_rows: int, size: int) -> None:
  """Calls `fn(lo, hi)` on blocks of rows `[lo, hi)` covering `range(num_rows)`, one per core.

  For numpy callbacks on independent lists (numpy's sort releases the GIL): the callback otherwise
  runs on one core while XLA's other threads wait for it. `size` is the number of values in all;
  below `_PARALLEL_ITEMS` one call on this thread is faster than a hand-off to the pool.
  """
  workers = min(_num_cores(), num_rows)
  if workers < 2 or size < _PARALLEL_ITEMS:
    fn(0, num_rows)
    return
  bounds = np.linspace(0, num_rows, workers + 1).astype(int)
  list(_sort_pool(workers).map(fn, bounds[:-1], bounds[1:]))


# Below this many scores one thread sorts faster than a hand-off to the pool.
_PARALLEL_ITEMS = 1 << 16


@functools.lru_cache(maxsize=1)
def _num_cores() -> int:
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # Not on Linux.
    return os.cpu_count() or 1


@functools.lru_cache(maxsize=4)
def _sort_pool(workers: int) -> concurrent.futures.ThreadPoolExecutor:
  """The threads of `numpy_descending_ranks`, made on first use (none exist at import)."""
  return concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="jaxrank-sort")


def _numpy_descending_ranks(scores: np.ndarray) -> np.ndarray:
  """`numpy_descending_ranks` on one thread."""
  n = scores.shape[-1]
  positions = np.arange(1, n + 1, dtype=scores.dtype)
  negated = np.where(scores == 0, 0, -scores).astype(scores.dtype)  # -0.0 and 0.0: one key.
  negated = np.where(np.isnan(negated), np.array(np.nan, scores.dtype), negated)
  if scores.dtype == np.float32 and n < 2**32:
    packed = (_float32_keys(negated) << np.uint64(32)) | np.arange(n, dtype=np.uint64)
    order = (np.sort(packed, axis=-1) & np.uint64(0xFFFFFFFF)).astype(np.intp)
  else:
    order = np.argsort(negated, axis=-1, kind="stable")
  ranks = np.empty_like(scores)
  np.put_along_axis(ranks, order, np.broadcast_to(positions, scores.shape), axis=-1)
  return ranks


def _cpu_descending_ranks(scores: jax.Array) -> jax.Array:
  shape = jax.ShapeDtypeStruct(scores.shape, scores.dtype)
  (ranks,) = host_callback(
    lambda s: (numpy_descending_ranks(s),), (shape,), scores, vmap_method="expand_dims"
  )
  # Inside shard_map the ranks vary over the scores' mesh axes; the callback does not record it.
  return lists.varying_like(ranks, scores)


DESCENDING_RANKS_BRANCHES = ("numpy", "xla")
# The branches by the platform whose path they are (`platforms.forced_platform`).
_BRANCH_PLATFORMS = {"numpy": platforms.CPU, "xla": platforms.ACCELERATOR}


@contextlib.contextmanager
def descending_ranks_branch(branch: str) -> Iterator[None]:
  """Makes `descending_ranks` (and `count_above_and_tied`) take one branch on every platform,
  inside the block (for tests): `platforms.forced_platform` under the branches' names.

  `"numpy"` is the CPU path (numpy's sort through `jax.pure_callback`, which also runs on an
  accelerator, through the host); `"xla"` is the GPU/TPU path (`xla_descending_ranks`), so the
  accelerator's code runs on a CPU-only machine. The setting is read when `descending_ranks` or
  `blackbox_ranks` is called in Python, that is when a jitted function is traced: a function jitted
  and traced before the block keeps the branch it was traced with (jit a new function inside the
  block). `blackbox_ranks` passes the branch to its custom VJP as a static argument, so JAX's
  caches of the VJP's traces never mix the branches. Every other form chosen by platform
  (`platforms.by_platform`) follows the same setting.

  Args:
    branch: `"numpy"` or `"xla"`.

  Yields:
    None.
  """
  if branch not in DESCENDING_RANKS_BRANCHES:
    raise ValueError(
      f"descending_ranks_branch: branch must be one of {DESCENDING_RANKS_BRANCHES}, got {branch!r}."
    )
  with platforms.forced_platform(_BRANCH_PLATFORMS[branch]):
    yield


def forced_branch() -> str | None:
  """The branch `descending_ranks_branch` forces here (`None`: chosen by platform), for code that
  must key its compiled programs by it."""
  forced = platforms.forced()
  return None if forced is None else {v: k for k, v in _BRANCH_PLATFORMS.items()}.get(forced)


def _descending_ranks_on(scores: jax.Array, branch: str | None) -> jax.Array:
  if branch == "numpy":
    return _cpu_descending_ranks(scores)
  if branch == "xla":
    return xla_descending_ranks(scores)
  return lax.platform_dependent(scores, cpu=_cpu_descending_ranks, default=xla_descending_ranks)


def descending_ranks(scores: jax.Array) -> jax.Array:
  """Ranks `[..., n]` along the last axis: 1 = highest score, ties by position; not differentiable.

  One sort of each list. On CPU the sort runs in numpy through `jax.pure_callback` (XLA's CPU sort
  is slower); on other platforms it is XLA's sort (`descending_ranks_branch` forces
  either, for tests). Both give identical ranks for every input: `0.0` and `-0.0` are the same
  score, `+inf` ranks first and `-inf` after every finite score, and NaN scores rank last (after
  `-inf`), in the order of the list. Works under `jit` and `vmap`.

  Args:
    scores: `[..., n]` floating scores.

  Returns:
    `[..., n]` ranks in `scores`' dtype (exact integers up to 2**24 in float32).
  """
  return _descending_ranks_on(scores, forced_branch())


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _blackbox_ranks(scores: jax.Array, interpolation: jax.Array, branch: str | None) -> jax.Array:
  return _descending_ranks_on(scores, branch)


def _blackbox_ranks_fwd(scores, interpolation, branch):
  ranks = _descending_ranks_on(scores, branch)
  return ranks, (scores, ranks, interpolation)


def _blackbox_ranks_bwd(branch, residuals, cotangent):
  scores, ranks, interpolation = residuals
  interpolation = jnp.asarray(interpolation, scores.dtype)
  perturbed = _descending_ranks_on(scores + interpolation[..., None] * cotangent, branch)
  return -(ranks - perturbed) / interpolation[..., None], None


_blackbox_ranks.defvjp(_blackbox_ranks_fwd, _blackbox_ranks_bwd)


def order_keys(scores: jax.Array) -> jax.Array:
  """Integer keys `[..., n]` whose ascending order, ties by position, is `descending_ranks`' order.

  The scores are negated (`0.0` and `-0.0` one key, every NaN the one positive quiet NaN) and their
  bits mapped to signed integers of the same width that order like the floats: `+inf` first,
  `-inf` after every finite score, NaN last. So item `j` is ranked above item `i` exactly when
  `key[j] < key[i] + (j < i)`, a comparison that needs no sort (`blackbox_ranks_at`). Scores
  narrower than float32 are widened first (exactly).

  Args:
    scores: `[..., n]` floating scores.

  Returns:
    `[..., n]` int32 keys (int64 for float64 scores).
  """
  if jnp.dtype(scores.dtype).itemsize < 4:
    scores = scores.astype(jnp.float32)
  int_dtype = jnp.int64 if jnp.dtype(scores.dtype).itemsize == 8 else jnp.int32
  negated = jnp.where(scores == 0, jnp.zeros_like(scores), -scores)
  negated = jnp.where(jnp.isnan(negated), jnp.asarray(jnp.nan, scores.dtype), negated)
  bits = lax.bitcast_convert_type(negated, int_dtype)
  # Negative floats order backwards as integers: flip their magnitude bits.
  return jnp.where(bits < 0, bits ^ jnp.iinfo(int_dtype).max, bits)


# The counting path: the CPU's form (slots on the last axis, `lax.top_k` and gathers, which
# XLA:CPU runs fast) and the accelerators' (slots on a leading axis, the list last, minima and
# masked sums instead of top_k, gathers and scatters, which a TPU serialises), chosen by
# `platforms.by_platform`; the same integers, so the same ranks and gradients bit for bit.


def _ahead(keys: jax.Array, item_keys: jax.Array, indices: jax.Array) -> jax.Array:
  """`[..., K, n]` int32: whether each item `j` of `keys [..., n]` is ranked above the item at each
  of `indices [..., K]` whose key is `item_keys [..., K]` (ties by position)."""
  position = lax.broadcasted_iota(
    indices.dtype, (1,) * (indices.ndim - 1) + (1, keys.shape[-1]), indices.ndim
  )
  earlier = (position < indices[..., :, None]).astype(keys.dtype)
  return (keys[..., None, :] < item_keys[..., :, None] + earlier).astype(jnp.int32)


def _ahead_among(item_keys: jax.Array, other_keys: jax.Array, indices: jax.Array) -> jax.Array:
  """`[..., K, K]` int32: `[k, m]` whether item `m` (key `other_keys[m]`) is above item `k`."""
  earlier = (indices[..., None, :] < indices[..., :, None]).astype(item_keys.dtype)
  return (other_keys[..., None, :] < item_keys[..., :, None] + earlier).astype(jnp.int32)


def _ranks_at(scores: jax.Array, indices: jax.Array) -> jax.Array:
  keys = order_keys(scores)
  item_keys = jnp.take_along_axis(keys, indices, axis=-1)
  return (1 + jnp.sum(_ahead(keys, item_keys, indices), axis=-1)).astype(scores.dtype)


def _counted_gradient(scores, indices, valid, interpolation, cotangent):
  """Algorithm 1's `-(rk(y) - rk(y + lambda g)) / lambda` `[..., n]` (`lambda` the
  `interpolation`) for `g` zero except at `indices`, where it is `cotangent [..., K]` (invalid
  slots ignored), by counting crossings: O(K n)."""
  interpolation = jnp.asarray(interpolation, scores.dtype)
  keys = order_keys(scores)
  item_scores = jnp.take_along_axis(scores, indices, axis=-1)
  # Algorithm 1 moves only the selected items: y + lambda g, with g zero elsewhere. The same
  # arithmetic as `blackbox_ranks` on those items, so the same perturbed scores.
  moved = item_scores + interpolation[..., None] * jnp.where(
    valid, cotangent, jnp.zeros_like(cotangent)
  )
  before = jnp.take_along_axis(keys, indices, axis=-1)
  after = order_keys(moved)
  valid_int = valid.astype(jnp.int32)
  # [k, j]: +1 where item j was below item k and is above it after the move, -1 the other way.
  crossed = (_ahead(keys, after, indices) - _ahead(keys, before, indices)) * valid_int[..., None]
  position = lax.broadcasted_iota(
    indices.dtype, (1,) * (indices.ndim - 1) + (1, scores.shape[-1]), indices.ndim
  )
  at = (position == indices[..., :, None]).astype(jnp.int32) * valid_int[..., None]  # [k, j]
  selected = jnp.sum(at, axis=-2)  # [..., n]: whether j is one of the (moved) items.
  # An item that did not move changes rank by the moved items that crossed it.
  still = -jnp.sum(crossed, axis=-2)
  # A moved item: by the items that did not move that it crossed, and by the moved ones.
  among = _ahead_among(after, after, indices) - _ahead_among(before, before, indices)
  moved_delta = jnp.sum(crossed * (1 - selected[..., None, :]), axis=-1) + jnp.sum(
    among * valid_int[..., None, :], axis=-1
  )
  delta = jnp.where(selected > 0, jnp.sum(at * moved_delta[..., :, None], axis=-2), still)
  # As `blackbox_ranks`: -(rk(y) - rk(y + lambda g)) / lambda, the difference exact in the float
  # dtype.
  return -((-delta).astype(scores.dtype)) / interpolation[..., None]


def _list_position(n: int, ndim: int) -> jax.Array:
  """`[1, ..., 1, n]` int32 (`ndim` axes): each item's position in its list."""
  return lax.broadcasted_iota(jnp.int32, (1,) * (ndim - 1) + (n,), ndim - 1)


# The accelerators' form keeps each slot `k` of the `K` relevant items as its own `[...]` array
# (a Python list, `K` static): whatever runs over the slots is unrolled elementwise code, and the
# only reductions run over the list (the last axis of the scores, as the caller lays them out).
# So XLA fuses every `[..., n]` comparison into the reduction or the elementwise output that reads
# it: nothing `[K, ..., n]` or `[..., n]` between the scores and the gradient is written, and no
# array is transposed between a layout for the slots and one for the list.


def _slot_value(values: jax.Array, index: jax.Array) -> jax.Array:
  """`[...]`: `values [..., n]` at `index [...]` (0 for an index outside the list): a masked sum
  over each list, whose one nonzero term makes it exact (a zero may lose its sign, which no order
  key sees); no gather, which a TPU serialises. O(n)."""
  position = _list_position(values.shape[-1], values.ndim)
  return jnp.sum(
    jnp.where(position == index[..., None], values, jnp.zeros((), values.dtype)), axis=-1
  )


def _slot_ahead(keys: jax.Array, item_key: jax.Array, index: jax.Array) -> jax.Array:
  """`[..., n]` bool: whether each item `j` of `keys [..., n]` is ranked above the item at `index
  [...]` whose key is `item_key [...]` (ties by position)."""
  position = _list_position(keys.shape[-1], keys.ndim)
  earlier = (position < index[..., None]).astype(keys.dtype)
  return keys < item_key[..., None] + earlier


def _slot_above(key: jax.Array, index: jax.Array, other_key: jax.Array, other_index: jax.Array):
  """`[...]` bool: whether the item `(other_key, other_index)` is above `(key, index)`."""
  return other_key < key + (other_index < index).astype(key.dtype)


def _slot_spread(indices, valids, values, n: int) -> jax.Array:
  """`[..., n]`: each slot's `values[k] [...]` at `indices[k]`, 0 elsewhere: a select per slot
  (the valid indices are distinct), elementwise, no scatter. O(K n)."""
  position = _list_position(n, indices[0].ndim + 1)
  out = jnp.zeros((), values[0].dtype)
  for index, valid, value in zip(indices, valids, values):
    out = jnp.where((position == index[..., None]) & valid[..., None], value[..., None], out)
  return out


def _first_relevant_slots(relevant: jax.Array, count: int) -> tuple[list, list]:
  """The positions `[...]` int32 of the first `count` relevant items of each list, in list order,
  one array per slot (`n` where a list has fewer), and whether each slot holds one: one minimum
  over each list per slot, O(count n), no `top_k`, sort or gather."""
  n = relevant.shape[-1]
  position = _list_position(n, relevant.ndim)
  indices, last = [], jnp.full(relevant.shape[:-1], -1, jnp.int32)
  for _ in range(count):
    last = jnp.min(jnp.where(relevant & (position > last[..., None]), position, n), axis=-1)
    indices.append(last)
  return indices, [index < n for index in indices]


def _slot_ranks(keys, indices) -> tuple[list, list]:
  """The ranks `[...]` int32 of the items at each of `indices` and their order keys: one plus the
  items above each, O(K n)."""
  item_keys = [_slot_value(keys, index) for index in indices]
  ranks = [
    1 + jnp.sum(_slot_ahead(keys, key, index), axis=-1, dtype=jnp.int32)
    for key, index in zip(item_keys, indices)
  ]
  return ranks, item_keys


def _slot_crossings(keys, indices, valids, befores, afters) -> list:
  """Per slot, `[..., n]` int32: +1 where item `j` was below the slot's item (key `befores[k]`)
  and is above it after the move (key `afters[k]`), -1 the other way, 0 for an empty slot."""
  return [
    jnp.where(
      valid[..., None],
      _slot_ahead(keys, after, index).astype(jnp.int32)
      - _slot_ahead(keys, before, index).astype(jnp.int32),
      0,
    )
    for index, valid, before, after in zip(indices, valids, befores, afters)
  ]


def _slot_counted_gradient(scores, indices, valids, interpolation, cotangents):
  """`_counted_gradient` with one `[...]` array per slot (`indices`, `valids`, `cotangents`
  lists): O(K n), no sort, gather or scatter; the same integers, so the same gradient."""
  interpolation = jnp.asarray(interpolation, scores.dtype)
  keys = order_keys(scores)
  n = scores.shape[-1]
  position = _list_position(n, scores.ndim)
  befores, afters, ats = [], [], []
  for index, valid, cotangent in zip(indices, valids, cotangents):
    # Algorithm 1 moves only the selected items: y + lambda g, with g zero elsewhere. The same
    # arithmetic as `blackbox_ranks` on those items, so the same perturbed scores.
    moved = _slot_value(scores, index) + interpolation * jnp.where(
      valid, cotangent, jnp.zeros_like(cotangent)
    )
    befores.append(_slot_value(keys, index))
    afters.append(order_keys(moved))
    ats.append((position == index[..., None]) & valid[..., None])
  selected = functools.reduce(jnp.logical_or, ats)  # [..., n]: whether j is a moved item.
  crossed = _slot_crossings(keys, indices, valids, befores, afters)
  # An item that did not move changes rank by the moved items that crossed it. This elementwise
  # pass counts the crossings again from the keys behind a barrier: XLA would otherwise write them
  # (`2 K` boolean `[..., n]` arrays) in the pass of the sums below, to read them back here.
  still = -functools.reduce(
    jnp.add, _slot_crossings(*lax.optimization_barrier((keys, indices, valids, befores, afters)))
  )
  # A moved item: by the items that did not move that it crossed, and by the moved ones.
  moved_delta = []
  for k, index in enumerate(indices):
    among = sum(
      (
        _slot_above(afters[k], index, afters[m], indices[m]).astype(jnp.int32)
        - _slot_above(befores[k], index, befores[m], indices[m]).astype(jnp.int32)
      )
      * valids[m].astype(jnp.int32)
      for m in range(len(indices))
    )
    moved_delta.append(jnp.sum(jnp.where(selected, 0, crossed[k]), axis=-1) + among)
  delta = jnp.where(selected, _slot_spread(indices, valids, moved_delta, n), still)
  # As `blackbox_ranks`: -(rk(y) - rk(y + lambda g)) / lambda, the difference exact in the float
  # dtype.
  return -((-delta).astype(scores.dtype)) / interpolation[..., None]


def _slots(x: jax.Array) -> list:
  """`[..., K]` as `K` arrays `[...]`."""
  return [x[..., k] for k in range(x.shape[-1])]


def _ranks_at_on(scores, indices, platform):
  return platforms.by_platform(
    scores,
    indices,
    cpu=_ranks_at,
    accelerator=lambda s, i: jnp.stack(_slot_ranks(order_keys(s), _slots(i))[0], axis=-1).astype(
      s.dtype
    ),
    platform=platform,
  )


def _counted_gradient_on(scores, indices, valid, interpolation, cotangent, platform):
  def accelerator(scores, indices, valid, interpolation, cotangent):
    return _slot_counted_gradient(
      scores, _slots(indices), _slots(valid), interpolation, _slots(cotangent)
    )

  return platforms.by_platform(
    scores,
    indices,
    valid,
    interpolation,
    cotangent,
    cpu=_counted_gradient,
    accelerator=accelerator,
    platform=platform,
  )


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _blackbox_ranks_at(
  scores: jax.Array,
  indices: jax.Array,
  valid: jax.Array,
  interpolation: jax.Array,
  platform: str | None,
) -> jax.Array:
  return _ranks_at_on(scores, indices, platform)


def _blackbox_ranks_at_fwd(scores, indices, valid, interpolation, platform):
  return _ranks_at_on(scores, indices, platform), (scores, indices, valid, interpolation)


def _blackbox_ranks_at_bwd(platform, residuals, cotangent):
  scores, indices, valid, interpolation = residuals
  grad = _counted_gradient_on(scores, indices, valid, interpolation, cotangent, platform)
  return grad, None, None, None


_blackbox_ranks_at.defvjp(_blackbox_ranks_at_fwd, _blackbox_ranks_at_bwd)


def blackbox_ranks_at(
  scores: jax.Array, indices: jax.Array, valid: jax.Array, interpolation: jax.Array
) -> jax.Array:
  r"""`blackbox_ranks(scores, interpolation)` at a few items, by counting: no sort, O(K n) per list.

  Equals `jnp.take_along_axis(blackbox_ranks(scores, interpolation), indices, axis=-1)` in value
  (the same ranks, ties by position, NaN last) and in gradient, for any loss that reads the ranks
  only there: Algorithm 1 then moves only these `K` items (`y + lambda g`, `lambda` the
  `interpolation`, `g` zero elsewhere), so an item that does not move changes rank by the moved
  items that cross it, and a moved item by the items it crosses; counting the crossings gives every
  item's `rk(y) - rk(y + lambda g)` exactly. The forward pass counts, for each of the `K` items, the
  `n` items above it.

  Args:
    scores: `[..., n]` floating scores.
    indices: `[..., K]` int32 positions in `[0, n)`, distinct among the valid ones in each list.
    valid: `[..., K]` bool; an invalid slot's rank is meaningless, its cotangent is ignored and it
      moves nothing.
    interpolation: `[...]` interpolation strength per list, in `scores`' dtype (no gradient).

  Returns:
    `[..., K]` ranks in `scores`' dtype. O(K n) time per list forward and backward, comparisons
    `[..., K, n]` that XLA fuses into their reductions, no host callback. On CPU the slots are the
    last axis and the items are read by gathers; on GPU and TPU (`platforms.by_platform`) the
    slots lead (`[K, ..., n]`, the list last, a TPU's lanes) and the items are read by masked sums
    (no gather or scatter). The same integers, so the same ranks and gradients.
  """
  return _blackbox_ranks_at(scores, indices, valid, interpolation, platforms.forced())


def ranks_among(scores: jax.Array, indices: jax.Array, valid: jax.Array) -> jax.Array:
  """`[..., K]` rank of each valid item at `indices` among the valid ones (ties by position, as
  `descending_ranks`): O(K^2) per list, no gradient (int32)."""
  keys = order_keys(lax.stop_gradient(scores))
  item_keys = jnp.take_along_axis(keys, indices, axis=-1)
  ahead = _ahead_among(item_keys, item_keys, indices) * valid[..., None, :].astype(jnp.int32)
  return 1 + jnp.sum(ahead, axis=-1)


def first_relevant(relevant: jax.Array, count: int) -> tuple[jax.Array, jax.Array]:
  """The positions `[..., count]` int32 of the first `count` relevant items of each list, in list
  order, and whether each slot holds one (`[..., count]` bool): one `lax.top_k`, no full sort."""
  n = relevant.shape[-1]
  position = lax.broadcasted_iota(jnp.int32, relevant.shape, relevant.ndim - 1)
  # Relevant items get (n, 2n], the others (0, n], earlier ones more: exact in float32 below 2**23
  # items (XLA's CPU top_k is fast on float32), int32 beyond.
  value = jnp.where(relevant, 2 * n - position, n - position)
  if 2 * n < 2**24:
    value = value.astype(jnp.float32)
  top, indices = lax.top_k(value, count)
  return indices.astype(jnp.int32), top > n


def _spread(indices: jax.Array, valid: jax.Array, values: jax.Array, n: int) -> jax.Array:
  """`[..., n]`: `values [..., K]` at `indices`, 0 elsewhere (O(K n), no scatter)."""
  position = lax.broadcasted_iota(indices.dtype, (1,) * (indices.ndim - 1) + (1, n), indices.ndim)
  at = (position == indices[..., :, None]) & valid[..., :, None]
  return jnp.sum(jnp.where(at, values[..., :, None], jnp.zeros((), values.dtype)), axis=-2)


def _sorted_relevant_ranks(scores, relevant, branch):
  ranks = _descending_ranks_on(scores, branch)
  # Rank among relevant items: count the relevant items at or above each position of the order.
  order_ranks = ranks.astype(jnp.int32) - 1
  axis = scores.ndim - 1
  in_order = jnp.put_along_axis(
    jnp.zeros(scores.shape, jnp.int32),
    order_ranks,
    relevant.astype(jnp.int32),
    axis=axis,
    inplace=False,
  )
  relevant_ranks = jnp.take_along_axis(jnp.cumsum(in_order, axis=axis), order_ranks, axis=axis)
  return ranks, relevant_ranks.astype(scores.dtype)


def _cpu_counted_relevant_ranks(scores, relevant, count):
  indices, valid = first_relevant(relevant, count)
  ranks = _ranks_at(scores, indices)
  among = ranks_among(scores, indices, valid).astype(scores.dtype)
  n = scores.shape[-1]
  return _spread(indices, valid, ranks, n), _spread(indices, valid, among, n)


def _accelerator_counted_relevant_ranks(scores, relevant, count):
  indices, valids = _first_relevant_slots(relevant, count)
  ranks, item_keys = _slot_ranks(order_keys(scores), indices)
  among = [  # The rank among the valid slots' items, O(K^2) per list.
    1
    + sum(
      (_slot_above(key, index, other_key, other_index) & other_valid).astype(jnp.int32)
      for other_key, other_index, other_valid in zip(item_keys, indices, valids)
    )
    for key, index in zip(item_keys, indices)
  ]
  n = scores.shape[-1]
  as_scores = lambda values: [v.astype(scores.dtype) for v in values]  # noqa: E731
  return (
    _slot_spread(indices, valids, as_scores(ranks), n),
    _slot_spread(indices, valids, as_scores(among), n),
  )


def _cpu_counted_relevant_gradient(scores, relevant, interpolation, g, count):
  indices, valid = first_relevant(relevant, count)
  slots = jnp.take_along_axis(g, indices, axis=-1)
  return _counted_gradient(scores, indices, valid, interpolation, slots)


def _accelerator_counted_relevant_gradient(scores, relevant, interpolation, g, count):
  indices, valids = _first_relevant_slots(relevant, count)
  cotangents = [_slot_value(g, index) for index in indices]
  return _slot_counted_gradient(scores, indices, valids, interpolation, cotangents)


def _relevant_ranks_on(scores, relevant, count, branch):
  """(ranks, relevant ranks): by sorting (`count` None) or by counting the first `count` relevant
  items of each list (a list with more is ranked wrongly: the caller makes it NaN)."""
  if count is None:
    return _sorted_relevant_ranks(scores, relevant, branch)
  return platforms.by_platform(
    scores,
    relevant,
    cpu=functools.partial(_cpu_counted_relevant_ranks, count=count),
    accelerator=functools.partial(_accelerator_counted_relevant_ranks, count=count),
    platform=_BRANCH_PLATFORMS.get(branch),
  )


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _blackbox_relevant_ranks(scores, relevant, interpolation, count, branch):
  return _relevant_ranks_on(scores, relevant, count, branch)


def _blackbox_relevant_ranks_fwd(scores, relevant, interpolation, count, branch):
  ranks, relevant_ranks = _relevant_ranks_on(scores, relevant, count, branch)
  # The counting backward counts again; only the sort's reads the forward ranks.
  return (ranks, relevant_ranks), (scores, relevant, interpolation, None if count else ranks)


def _blackbox_relevant_ranks_bwd(count, branch, residuals, cotangents):
  scores, relevant, interpolation, ranks = residuals
  g = jnp.where(relevant, cotangents[0], jnp.zeros_like(cotangents[0]))
  interpolation = jnp.asarray(interpolation, scores.dtype)
  if count is None:
    perturbed = _descending_ranks_on(scores + interpolation[..., None] * g, branch)
    grad = -(ranks - perturbed) / interpolation[..., None]
  else:
    grad = platforms.by_platform(
      scores,
      relevant,
      interpolation,
      g,
      cpu=functools.partial(_cpu_counted_relevant_gradient, count=count),
      accelerator=functools.partial(_accelerator_counted_relevant_gradient, count=count),
      platform=_BRANCH_PLATFORMS.get(branch),
    )
  return grad, None, None


_blackbox_relevant_ranks.defvjp(_blackbox_relevant_ranks_fwd, _blackbox_relevant_ranks_bwd)


def blackbox_relevant_ranks(
  scores: jax.Array,
  relevant: jax.Array,
  interpolation: jax.Array,
  *,
  max_relevant: int | None = None,
) -> tuple[jax.Array, jax.Array]:
  r"""The blackbox ranks of the relevant items of lists, and their ranks among relevant items.

  At relevant positions, `ranks` is `blackbox_ranks(scores, interpolation)` in value and gradient
  (the cotangent is read there only: Algorithm 1 moves only the relevant items), and
  `relevant_ranks` the rank among the relevant items in the same order (no gradient). Entries at the
  other positions are unspecified: read only the relevant ones. Two ways, the same ranks and
  gradients:

  * **sort** (`max_relevant=None`): one sort of each list forward and one backward
    (`descending_ranks`: numpy through a host callback on CPU, XLA's sort elsewhere), O(n log n);
  * **counting** (`max_relevant=K`): the rank of each of the first `K` relevant items of a list
    is the count of items above it, and Algorithm 1's backward moves only those items, so an
    item's rank changes by the relevant items that cross it and a relevant item's by the items it
    crosses (`blackbox_ranks_at`). O(K n) per list whatever the number of relevant items, no sort
    and no host callback on any platform (on GPU and TPU no gather, scatter or `top_k` either:
    `blackbox_ranks_at`). The program holds the counting alone: a list with more than `K`
    relevant items gets the ranks of its first `K` only and the rest wrong; the caller checks
    (the losses make such a list NaN).

  Args:
    scores: `[..., n]` floating scores.
    relevant: `[..., n]` bool, the items whose ranks are read.
    interpolation: `[...]` interpolation strength per list, in `scores`' dtype (no gradient).
    max_relevant: `K`, a static bound on the relevant items per list that selects counting, or
      `None` for the sort.

  Returns:
    `(ranks, relevant_ranks)`, each `[..., n]` in `scores`' dtype, meaningful where `relevant`.
  """
  return _blackbox_relevant_ranks(scores, relevant, interpolation, max_relevant, forced_branch())


def check_interpolation(fn: str, interpolation: jax.typing.ArrayLike) -> jax.Array:
  """Checks the blackbox `interpolation` strength (real, `> 0` where known, any shape); returns an
  array."""
  hint = "It is the blackbox interpolation strength (RaMBO's Table 9: 0.2 to 4)."
  checks.check_real(fn, "interpolation", interpolation, above=0, scalar=False, hint=hint)
  return jnp.asarray(interpolation)


def uses_blackbox_rank(jaxpr: jax.extend.core.ClosedJaxpr | jax.extend.core.Jaxpr) -> bool:
  """Whether a jaxpr calls a blackbox rank (`blackbox_ranks`, `blackbox_ranks_at`,
  `blackbox_relevant_ranks`), in its own equations or in any jaxpr inside them (jitted
  functions, loops, conditionals, custom derivative rules).

  Their backward is not linear in its cotangent (Algorithm 1 moves the scores by `interpolation`
  times it), so a caller that would take a gradient with another cotangent than the true one and
  scale it afterwards (`blocked_loss`) must not. Read from the jaxpr (`jax.make_jaxpr`), which holds
  a jitted function's equations also when its trace came from JAX's cache and no Python of it
  ran: each blackbox rank is a `custom_vjp` call whose backward rule is one of this module's.
  """
  inner = getattr(jaxpr, "jaxpr", jaxpr)
  for eqn in inner.eqns:
    backward = eqn.params.get("bwd")
    if getattr(backward, "f", backward) in _BLACKBOX_BACKWARDS:
      return True
    for param in eqn.params.values():
      for value in param if isinstance(param, (tuple, list)) else (param,):
        is_jaxpr = hasattr(value, "eqns") or hasattr(getattr(value, "jaxpr", None), "eqns")
        if is_jaxpr and uses_blackbox_rank(value):
          return True
  return False


def blackbox_ranks(scores: jax.typing.ArrayLike, interpolation: jax.typing.ArrayLike) -> jax.Array:
  r"""Ranks of a list (1 = highest score) with RaMBO's blackbox gradient.

  The forward pass is an exact ranking by one stable sort of the last axis (ties are ranked by
  position: the earlier item first). The backward pass is Algorithm 1 of Rolinek et al. 2020:
  given the incoming gradient :math:`g = \partial L / \partial \mathrm{rk}`,

  .. math::
    \nabla_y = -\frac{1}{\lambda}\left[\mathrm{rk}(y) - \mathrm{rk}(y + \lambda g)\right],

  one more sort. **This is not the derivative of the ranks** (which is zero almost everywhere) but
  the gradient of a piecewise-linear interpolation of the loss, whose width grows with
  `interpolation`. Unlike a derivative it is not linear in :math:`g`: scaling the loss (a mean over
  more lists, say) moves the perturbed scores less, so `interpolation` and the loss's scale go
  together.

  Args:
    scores: `[..., n]` floating scores; `0.0` and `-0.0` are one score, NaN scores rank last (in the
      order of the list) on every platform.
    interpolation: the interpolation strength :math:`\lambda > 0` (the paper's lambda), a scalar
      or `[...]` (one per list). It gets no gradient.

  Returns:
    `[..., n]` ranks in `scores`' dtype (exact integers up to 2**24 in float32). O(n log n) time
    for each of the forward and backward passes, O(n) memory.

  >>> import jax, jax.numpy as jnp
  >>> blackbox_ranks(jnp.array([0.1, 0.9, 0.5]), 1.0)
  Array([3., 1., 2.], dtype=float32)
  >>> # Pushing the rank of item 0 down (towards 1) raises its score and lowers those it passes.
  >>> jax.grad(lambda s: blackbox_ranks(s, 1.0)[0])(jnp.array([0.1, 0.9, 0.5]))
  Array([-2.,  1.,  1.], dtype=float32)
  """
  scores = checks.check_floating(
    "blackbox_ranks", "scores", scores, min_ndim=1, layout="[..., n] (the list, last)"
  )
  interpolation = check_interpolation("blackbox_ranks", interpolation)
  if interpolation.ndim and interpolation.shape != scores.shape[:-1]:
    raise ValueError(
      f"blackbox_ranks: interpolation must be a scalar or one value per list "
      f"{scores.shape[:-1]}, got shape {interpolation.shape}."
    )
  interpolation = jnp.broadcast_to(interpolation.astype(scores.dtype), scores.shape[:-1])
  return _blackbox_ranks(scores, interpolation, forced_branch())


# The backward rules of the blackbox ranks, as `uses_blackbox_rank` finds them in a jaxpr.
_BLACKBOX_BACKWARDS = (_blackbox_ranks_bwd, _blackbox_ranks_at_bwd, _blackbox_relevant_ranks_bwd)
