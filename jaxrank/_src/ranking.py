"""Exact ranking primitives: tie groups, descending ranks and the statistics of relevant items.

Every exact metric in jaxrank is a function of where the relevant items of a list land. This
module computes that once: `tie_groups` sorts a list (O(n log n)) and describes the group of tied
scores each item is in (`counting.count_above_and_tied`, for `evaluate_retrieval`, finds the same
counts around relevant items without ranking the list). Both feed `relevant_item_statistics`, the
single place where the tie policy lives:

* **pessimistic rank**: tied items are ordered worst first (lower labels before higher labels), so
  a model never gains by tying scores; this is what `ap_metric` and the other plain metrics use,
  and it makes them invariant to the order in which items are listed;
* **tie-aware expected precision**: the expectation over all orderings of the tied items
  (McSherry and Najork 2008; He et al. 2018, Prop. 1, eq. 6 and App. A, eq. 19), used by
  `tie_aware_ap_metric`.

`descending_ranks` ranks a list with ties by position, the forward pass of the blackbox ranks
(`blackbox_ranks`). Each of the two sorts has two forms, side by side with the one function that
chooses between them when the program is lowered: the CPU's (numpy's sort through a host
callback, `host_kernels`) and the accelerators' (XLA's sort). `descending_ranks_branch` forces
either (for tests).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrank._src import host_kernels
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
    On a CPU the sort is numpy's through a host callback (`host_kernels.numpy_group_order`, much
    faster than XLA's sort there), on GPU and TPU XLA's (`platforms.by_platform`): the same order.
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
  (order,) = host_kernels.host_callback(
    lambda *keys: (host_kernels.numpy_group_order(*keys),),
    (shape,),
    *keys,
    vmap_method="broadcast_all",
  )
  # Inside shard_map the order varies as its inputs do; the callback does not record it.
  for x in (invalid, neg, labels):
    order = lists.varying_like(order, x)
  return (*(jnp.take_along_axis(x, order, axis=-1) for x in (invalid, neg, labels)), order)


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
# Descending ranks: the forward pass of the blackbox ranks.


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
  return descending_ranks_on(scores, forced_branch())


def descending_ranks_on(scores: jax.Array, branch: str | None) -> jax.Array:
  """`descending_ranks` on `branch` (`"numpy"` the CPU's form, `"xla"` the accelerators', `None`
  chosen by platform when lowered): the one place that chooses between the two forms below."""
  if branch == "numpy":
    return _cpu_descending_ranks(scores)
  if branch == "xla":
    return xla_descending_ranks(scores)
  return lax.platform_dependent(scores, cpu=_cpu_descending_ranks, default=xla_descending_ranks)


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


def _cpu_descending_ranks(scores: jax.Array) -> jax.Array:
  shape = jax.ShapeDtypeStruct(scores.shape, scores.dtype)
  (ranks,) = host_kernels.host_callback(
    lambda s: (host_kernels.numpy_descending_ranks(s),), (shape,), scores, vmap_method="expand_dims"
  )
  # Inside shard_map the ranks vary over the scores' mesh axes; the callback does not record it.
  return lists.varying_like(ranks, scores)


DESCENDING_RANKS_BRANCHES = ("numpy", "xla")
# The branches by the platform whose path they are (`platforms.forced_platform`).
BRANCH_PLATFORMS = {"numpy": platforms.CPU, "xla": platforms.ACCELERATOR}


@contextlib.contextmanager
def descending_ranks_branch(branch: str) -> Iterator[None]:
  """Makes `descending_ranks` (and `counting.count_above_and_tied`) take one branch on every
  platform, inside the block (for tests): `platforms.forced_platform` under the branches' names.

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
  with platforms.forced_platform(BRANCH_PLATFORMS[branch]):
    yield


def forced_branch() -> str | None:
  """The branch `descending_ranks_branch` forces here (`None`: chosen by platform), for code that
  must key its compiled programs by it."""
  forced = platforms.forced()
  return None if forced is None else {v: k for k, v in BRANCH_PLATFORMS.items()}.get(forced)
