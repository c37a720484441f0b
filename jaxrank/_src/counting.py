"""Counting forms: the scores above and tied with each relevant item, without ranking the lists.

`count_above_and_tied` (for `evaluate_retrieval`) counts, for each relevant item of a list, the
items scored strictly above it and those tied with it; `relevant_ties` places each relevant item
among the others. Together they give `ranking.relevant_item_statistics` what `ranking.tie_groups`
gives it for sorted lists, in two ways that give the same counts:

* by comparing every item with every relevant score (O(n R) per list, the fastest way for long
  lists with up to `COMPARE_UP_TO` relevant items): the CPU's loop over tiles (`compare_counts`)
  and the accelerators' one pass over the scores (`fused_compare_counts`);
* beyond, by one sort of each list and a binary search: XLA's sort on the accelerators
  (`xla_sorted_counts`), numpy's on the CPU (`_cpu_sorted_counts`, through a host callback:
  `host_kernels.numpy_sorted_counts`).

`count_above_and_tied` is the one place that chooses among the four forms: by the number of
relevant items, then by platform when lowered (`platforms.by_platform`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxrank._src import host_kernels
from jaxrank._src import lists
from jaxrank._src import platforms
from jaxrank._src import ranking

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
  scores: jax.Array,
  thresholds: jax.Array,
  *,
  host_callback: bool = True,
  compare_up_to: int | None = None,
) -> Counts:
  """For each threshold, the scores of its list strictly above it and equal to it.

  Args:
    scores: `[c, n]` floating scores; NaN entries count for nothing (mark excluded items so).
    thresholds: `[c, R]` of the same dtype, the values to count around (the relevant items'
      scores); NaN marks an empty slot.
    host_callback: whether the CPU path may sort in numpy through `jax.pure_callback`; `False`
      takes XLA's sort instead (same counts), for programs where a host callback must not run.
    compare_up_to: the most thresholds counted by comparing (`None`: `COMPARE_UP_TO`, read
      when traced; a caller whose lists are long against their count, such as
      `evaluate_revisited`'s gallery chunks of 65,536 items, compares more: a sort costs
      O(n log n) whatever R).

  Returns:
    `Counts`: the thresholds and their counts (int32) in the same order: the order given when
    counted by the CPU's comparing loop, else decreasing. The same integers on every path.
    With at most `compare_up_to` thresholds, by comparing, O(n R) per list: on CPU a loop over
    the items with `[R, c]` accumulators; on GPU and TPU one fused comparison and reduction over
    the items (nothing `[c, R, n]` is written; the thresholds are sorted first, `[c, R]`). Beyond,
    by one sort of each list and a binary search of the sorted thresholds, O((n + R) log n) per
    list: on CPU numpy's through `jax.pure_callback`, elsewhere XLA's. Chosen by platform when
    lowered (`platforms.by_platform`): an accelerator's program holds no host callback;
    `ranking.descending_ranks_branch` forces either platform's path ("numpy": the CPU's, "xla": the
    others'). Memory O(c (n + R)).
  """
  if thresholds.shape[-1] <= (COMPARE_UP_TO if compare_up_to is None else compare_up_to):
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


# ---------------------------------------------------------------------------------------------
# Few thresholds: by comparing, the CPU's loop and the accelerators' one pass.

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
  """`(thresholds in decreasing order, above, tied)` by comparing (the accelerators' path for few
  thresholds): `fused_compare_counts` without the NaN counts."""
  return fused_compare_counts(scores, thresholds)[:3]


def fused_compare_counts(scores: jax.Array, thresholds: jax.Array) -> tuple[jax.Array, ...]:
  """`(thresholds in decreasing order, above, tied, nans)` by comparing every score with every
  threshold in one pass over the scores: the accelerators' path of `count_above_and_tied` for at
  most `COMPARE_UP_TO` thresholds, and the NaN scores `[c]` of each list (which
  `evaluate_retrieval` reads).

  One variadic reduction over the items (`lax.reduce`) with two int32 sums per threshold and one
  for the NaN scores, `2 R + 1` results of `[c]`: each score is read once and compared with every
  threshold where it is read. A sum over a `[c, R, n]` comparison instead (its earlier form) is a
  reduction per threshold, which reads every list once per threshold: on a TPU v5e the compiler's
  estimate for an evaluation chunk (1,024 x 60,000 scores, 11 thresholds) was 6.7 million cycles
  for those sums against 1.1 million in one pass (on a GPU each such reduction reads the lists
  again, from its caches at best). The thresholds are sorted as `xla_sorted_counts` sorts them
  (`[c, R]`, next to nothing), so that every accelerator path gives the same `Counts`.
  """
  keys = -jnp.sort(-thresholds, axis=-1)  # Decreasing, NaN last.
  operands = [jnp.isnan(scores).astype(jnp.int32)]
  for r in range(keys.shape[-1]):
    key = keys[..., r : r + 1]
    operands += [(scores > key).astype(jnp.int32), (scores == key).astype(jnp.int32)]
  sums = one_pass_sums(operands)
  nans, above, tied = sums[0], sums[1::2], sums[2::2]
  if not above:  # No thresholds: `[c, 0]` counts.
    empty = jnp.zeros(keys.shape, jnp.int32)
    return keys, empty, empty, nans
  return keys, jnp.stack(above, axis=-1), jnp.stack(tied, axis=-1), nans


def one_pass_sums(operands: Sequence[jax.Array]) -> tuple[jax.Array, ...]:
  """The sums over the last axis of each of `operands` (one shape `[..., n]`, any dtypes, at least
  one), in one variadic reduction (`lax.reduce`): each list is read once for all of them, where a
  sum per operand is a reduction per operand (which XLA may or may not merge, and which may make
  it write what the operands are computed from for the reductions to read)."""
  zeros = tuple(jnp.zeros((), x.dtype) for x in operands)
  return lax.reduce(tuple(operands), zeros, _add_each, (operands[0].ndim - 1,))


def _add_each(a: tuple[jax.Array, ...], b: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
  """The elementwise sums of two tuples of arrays: the reducer of a variadic sum (`lax.reduce`)."""
  return tuple(x + y for x, y in zip(a, b))


# ---------------------------------------------------------------------------------------------
# More thresholds: by sorting, XLA's on the accelerators and numpy's on the CPU.


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


def _cpu_sorted_counts(scores: jax.Array, thresholds: jax.Array) -> tuple[jax.Array, ...]:
  lead = jnp.broadcast_shapes(scores.shape[:-1], thresholds.shape[:-1])
  shape = lead + thresholds.shape[-1:]
  shapes: tuple[jax.ShapeDtypeStruct, ...] = (jax.ShapeDtypeStruct(shape, thresholds.dtype),)
  shapes += (jax.ShapeDtypeStruct(shape, jnp.int32),) * 2
  out = host_kernels.host_callback(
    host_kernels.numpy_sorted_counts, shapes, scores, thresholds, vmap_method="broadcast_all"
  )
  # Inside shard_map the results vary as their inputs do; the callback does not record it.
  return tuple(lists.varying_like(lists.varying_like(x, thresholds), scores) for x in out)


# ---------------------------------------------------------------------------------------------
# The relevant items among themselves.


def relevant_ties(values: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Where each relevant item stands among the relevant items of its list.

  Args:
    values: `[c, R]` scores of the relevant items, NaN in empty slots, as `Counts.thresholds`
      holds them: in any order for at most `COMPARE_UP_TO` slots, else in decreasing order with
      NaN last.

  Returns:
    `(relevant_above, relevant_tied, tie_position)`, each `[c, R]` int32: the relevant items
    scored strictly higher, those scored equal (itself included), and its place among those equal
    (1 for the first, in slot order), the inputs of `ranking.relevant_item_statistics`. Values in
    empty slots are unspecified. By comparing every pair for at most `COMPARE_UP_TO` slots (O(R^2)
    per list, no sort); beyond, read off the sorted order (O(R)).
  """
  if values.shape[-1] <= COMPARE_UP_TO:
    other, mine = values[:, None, :], values[:, :, None]  # [c, 1, R], [c, R, 1]
    slot = jnp.arange(values.shape[-1])
    relevant_above = jnp.sum(other > mine, axis=-1, dtype=jnp.int32)
    relevant_tied = jnp.sum(other == mine, axis=-1, dtype=jnp.int32)
    earlier = (other == mine) & (slot[None, None, :] < slot[None, :, None])
    return relevant_above, relevant_tied, 1 + jnp.sum(earlier, axis=-1, dtype=jnp.int32)
  start, end = ranking.run_bounds(
    values[..., 1:] != values[..., :-1]
  )  # Each NaN is a run of its own.
  iota = lax.broadcasted_iota(jnp.int32, values.shape, values.ndim - 1)
  return start, end - start + 1, iota - start + 1
