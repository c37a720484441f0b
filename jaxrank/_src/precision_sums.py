r"""The engine under the smooth-rank losses: sums over relevant items of a metric's terms of their
smoothed ranks, their forms and VJPs.

For each list, `smoothed_ap` computes the mean over its relevant valid items `k` of
`rank^+(k) / rank(k)` (Ramzi et al. 2021, eq. 3 and 5), with `rank^+` and `rank^-` sums of step
functions of the score differences `s_j - s_k` (`jaxrank._src.smooth_rank` states the formula and
the papers' choices of steps; this module never names a paper's loss). `smoothed_metric` computes
any other rank metric from the same ranks: a `Metric` gives each relevant item's term from its
`rank^+` and `rank^-` (AP's precision, Recall@k's sigmoids of `k - rank`, NDCG's discounted gain),
the engine sums the terms over the relevant items in every form below, and the metric finishes
each list from the sums (the custom VJPs take the terms' derivatives from `Metric.cotangents`, or
from `jax.vjp` of the terms). It never forms the
`[B, n, n]` differences: each relevant item is compared with its list, a few at a time, and the
gradient is a custom VJP that counts again rather than keep the pairs.

A step is a pair `(fn, params)`: `fn(x, *params)` is elementwise in `x`, and `params` is a tuple of
arrays (hyperparameters) that the custom VJPs differentiate. `fn` is static (jit-hashed by
identity), so module-level functions compile once per shape; `smoothed_ap` closure-converts a
step given as a plain callable.

**Forms, and which platform runs which.** The choice is made in one place, `_choose_form`, at
lowering through `platforms.by_platform` (and, for the bounded forms, inside `_precision_sums`'s
forward and backward rules, by the one predicate `_one_shot`):

* **The general loop** (`_forward_loop`, `_backward_loop`): on CPUs always, on accelerators with
  a bound `max_relevant` above `ONE_SHOT_SLOTS`. `chunk` relevant items of every list per step of
  a `fori_loop` (a static trip count with a bound, else until the list with the most relevant
  items is done); the backward pass reads `[B, width]` slots the forward pass kept. On CPUs a
  step's items come from one scatter of slots, their scores from a gather and their gradients go
  back by a scatter-add, all cheap there; accelerators serialise gathers and scatters, so there
  the items are found by minimums over the list and scores and gradients move by compare-and-sums
  (`_item_finder`, `_scores_at`, `_add_at_items`).
* **The one-shot form** (`_one_shot_forward`, `_one_shot_backward`): on accelerators, with a bound
  up to `ONE_SHOT_SLOTS`, or without a bound when every list holds at most `GROUP` relevant items
  (the capacities `chosen_capacities`, chosen on the device). All `K` slots in one step, one
  `[B, n]` expression per slot whose sums XLA fuses into one pass (nothing `[B, K, n]`). Its
  backward pass keeps each slot's differences on the chip on TPUs (`shared`) and computes them
  again behind a barrier on GPUs (`recomputed`: XLA's GPU compiler would write them to memory).
* **The grouped loop** (`_grouped_forward`, `_grouped_backward`): on accelerators without a bound,
  when some list holds more than `GROUP` relevant items (chosen on the device). The one-shot form
  over `GROUP` slots at a time in a loop of data-dependent length; the backward pass counts each
  group again, so that no `[B, n]` slots are kept beyond the inputs.

Without a bound on accelerators the choice among the one-shot forms and the grouped loop is made
at run time, on the device (`_chosen_precision_sums`: `bounds.branch_index`, one `lax.switch` in
the forward rule and one in the backward rule, inside the custom VJP so that only the branch
taken keeps residuals). `tests/test_smooth_rank.py` runs every form on this CPU through
`platforms.forced_platform`.

Cost: time O(B * P * n) for `B` lists of `n` items with at most `P` relevant items each; memory
O(B * n) plus one chunk of `B * chunk * n` pairs in the general loop, O(B * n) in the others.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrank._src import bounds
from jaxrank._src import checks
from jaxrank._src import lists
from jaxrank._src import platforms
from jaxrank._src import segmented

# With `chunk_size=None`, each step of the loop holds at most this many pairs (about 16 MB of
# float32 per temporary), and never fewer than one relevant item of every list.
_CHUNK_PAIRS = 2**22


def _relevant_slots(relevant: jax.Array, width: int) -> jax.Array:
  """`[B, width]` int32: slot `p` of a list holds the index of its `p`-th relevant item (else `n`).

  One cumulative sum and one scatter of all `B n` items (the CPU's form of steps of several
  relevant items: cheap for the small lists that take them, `B n <= 2^21`).
  """
  num_lists, n = relevant.shape
  slot = jnp.cumsum(relevant, axis=-1, dtype=jnp.int32) - 1
  slot = jnp.where(relevant, slot, width)  # Out of range: dropped by the scatter.
  items = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (num_lists, n))
  rows = jnp.arange(num_lists)[:, None]
  return jnp.full((num_lists, width), n, jnp.int32).at[rows, slot].set(items, mode="drop")


def _next_relevant(relevant: jax.Array, after: jax.Array) -> jax.Array:
  """`[B, 1]`: the first relevant item of each list after the item `after` `[B]` (`n` if none),
  by one minimum over the list: O(B n), as the step's comparisons are."""
  n = relevant.shape[-1]
  index = jnp.arange(n, dtype=jnp.int32)
  return jnp.min(jnp.where(relevant & (index > after[:, None]), index, n), axis=-1)[:, None]


def _add_at_items(grad: jax.Array, items: jax.Array, values: jax.Array, platform) -> jax.Array:
  """`grad [B, n]` plus `values [B, chunk]` at the items `[B, chunk]` of each list: a scatter-add
  on CPU; on accelerators, which serialise scatters, one compare-and-sum over the list
  (O(B chunk n), fused with the step's other sums)."""

  def cpu(grad, items, values):
    return grad.at[jnp.arange(grad.shape[0])[:, None], items].add(values)

  def accelerator(grad, items, values):
    at = items[:, :, None] == jnp.arange(grad.shape[1], dtype=items.dtype)
    return grad + jnp.sum(jnp.where(at, values[:, :, None], 0), axis=1)

  return platforms.by_platform(
    grad, items, values, cpu=cpu, accelerator=accelerator, platform=platform
  )


def _chunk_pairs(scores, relevant, other, items, platform):
  """Pairs `(k, j)` of one step: `k` runs over the relevant `items [B, chunk]` of each list (`n`
  past its last one), `j` over the list's items.

  Returns the differences `s_j - s_k` `[B, chunk, n]`, the masks of the pairs counted by `H^+`
  (`j` relevant, `j != k`) and by `H^-` (`j` valid, not relevant), and `items` with `n` replaced
  by 0 (a slot past the last relevant item computes on item 0, and its result is discarded).
  """
  n = scores.shape[1]
  safe = jnp.where(items < n, items, 0)
  s_k = _scores_at(scores, safe, platform)
  diff = scores[:, None, :] - s_k[:, :, None]
  not_self = items[:, :, None] != jnp.arange(n, dtype=jnp.int32)
  return diff, relevant[:, None, :] & not_self, other[:, None, :], safe


def _scores_at(scores: jax.Array, items: jax.Array, platform) -> jax.Array:
  """`[B, chunk]`: the scores of the `items` `[B, chunk]` of each list. A gather on CPU; on
  accelerators one compare-and-sum over the list (exact: one score and zeros), which the TPU
  compiler fuses and counts (a gather fused into the step's arithmetic is a cost it cannot
  estimate)."""

  def cpu(scores, items):
    return jnp.take_along_axis(scores, items, axis=1)

  def accelerator(scores, items):
    at = items[:, :, None] == jnp.arange(scores.shape[1], dtype=items.dtype)
    return jnp.sum(jnp.where(at, scores[:, None, :], 0), axis=-1)

  return platforms.by_platform(scores, items, cpu=cpu, accelerator=accelerator, platform=platform)


def _steps(kernel, diff, params):
  """`(H^+(diff), H^-(diff))` in the dtype of `diff`; `kernel.negative=None` means the same step."""
  up = kernel.positive(diff, *params[0]).astype(diff.dtype)
  if kernel.negative is None:
    return up, up
  return up, kernel.negative(diff, *params[1]).astype(diff.dtype)


def _no_axes(consts) -> tuple[int, ...]:
  """The metric axes of a metric with one value per list (AP, NDCG): none."""
  del consts
  return ()


class Metric(NamedTuple):
  """A rank metric read from the smoothed ranks of each list's relevant items (static: its
  functions are hashed by identity, so module-level functions compile once per shape).

  * `value(rank_pos, rank_neg, in_slot, consts, items)`: the terms of the relevant items held by
    slots shaped like `rank_pos` (`[B, chunk]` or `[B]`), zero where `in_slot` is False, with the
    metric's axes `shape(consts)` last; `consts` is a tuple of arrays (hyperparameters) and
    `items` a tuple of the per-item arrays read at each slot's item.
  * `finish(sums, num_relevant, consts, items)`: the per-list metric `[...]` from the sums of the
    terms over the relevant items `[..., *shape]`, the number of relevant valid items `[...]` and
    the per-item arrays `[..., n]` (masked items zero).
  * `cotangents(rank_pos, rank_neg, in_slot, cotangent, consts, items)`: the cotangents of
    `rank^+` and `rank^-` given that of the terms' sums (`cotangent` `[B, 1, *shape]`, broadcast
    over the slots); `None` derives them from `value` by `jax.vjp`.
  * `graded`: the pairs split by graded relevance, the first per-item array (SupRank's rule):
    `H^-` against the valid items of lower relevance than the slot's item, `H^+` against the
    others; else `H^+` against the relevant items and `H^-` against the rest (the same on binary
    labels).
  """

  value: Callable[..., jax.Array]
  finish: Callable[..., jax.Array]
  cotangents: Callable[..., tuple[jax.Array, jax.Array]] | None = None
  shape: Callable[..., tuple[int, ...]] = _no_axes
  graded: bool = False


class Kernel(NamedTuple):
  """What the engine computes: the steps `H^+` and `H^-` (`negative` None for the same step) as
  functions `fn(x, *params)`, and the metric their ranks feed (static arguments)."""

  positive: Callable[..., jax.Array]
  negative: Callable[..., jax.Array] | None
  metric: Metric


def _slot_values(kernel, rank_pos, rank_neg, in_slot, params, items):
  """The metric's terms of the slots (`Metric.value`), `params[2]` its `(consts, per-item)`."""
  return kernel.metric.value(rank_pos, rank_neg, in_slot, params[2][0], items)


def _slot_cotangents(kernel, rank_pos, rank_neg, in_slot, cotangent, params, items):
  """The cotangents of the slots' `rank^+` and `rank^-` (`Metric.cotangents`, else by `jax.vjp`
  of `Metric.value`), `cotangent` `[B, 1, *shape]` that of the sums."""
  metric, consts = kernel.metric, params[2][0]
  if metric.cotangents is not None:
    return metric.cotangents(rank_pos, rank_neg, in_slot, cotangent, consts, items)

  def value(rank_pos, rank_neg):
    return metric.value(rank_pos, rank_neg, in_slot, consts, items)

  out, vjp = jax.vjp(value, rank_pos, rank_neg)
  return vjp(jnp.broadcast_to(cotangent, out.shape).astype(out.dtype))


def _zero_sums(kernel, params, num_lists, dtype):
  """`[B, *shape]` zeros: the sums of the metric's terms before the first slot."""
  return jnp.zeros((num_lists, *kernel.metric.shape(params[2][0])), dtype)


def _items_at(params, items, platform):
  """The metric's per-item arrays `[B, n]` read at the `items` `[B, chunk]` (`n` past the last
  relevant item: item 0 read, the slot discarded); `()` for a metric without any."""
  per_item = params[2][1]
  if not per_item:
    return ()
  safe = jnp.where(items < per_item[0].shape[1], items, 0)
  return tuple(_scores_at(values, safe, platform) for values in per_item)


def _graded_pairs(kernel, params, relevant, other, pos_pairs, neg_pairs, item_values):
  """The pairs of `H^+` and `H^-` (`[B, chunk, n]`, or `[B, n]` for one slot per list), split by
  the relevance `params[2][1][0]` for a graded metric (`Metric.graded`): `H^-` against the
  items of lower relevance than the slot's item (`item_values[0]`), `H^+` against the others."""
  if not kernel.metric.graded:
    return pos_pairs, neg_pairs
  gains, gain_k = params[2][1][0], item_values[0][..., None]
  if gain_k.ndim == 3:  # Chunks: the slots on axis 1.
    gains, relevant, other = gains[:, None, :], relevant[:, None, :], other[:, None, :]
  lower = gains < gain_k
  return pos_pairs & ~lower, other | (relevant & lower)


def _items_where(params, at):
  """The metric's per-item arrays at one slot's item, `at` `[B, n]` its mask (compare-and-sum)."""
  return tuple(jnp.sum(jnp.where(at, values, 0), axis=-1) for values in params[2][1])


def _item_finder(relevant, chunk, width, platform):
  """`items(c, after)`: the `[B, chunk]` relevant items of step `c` of each list (`n` past its
  last), `after` `[B]` being the last item of the step before (-1 at first)."""

  def one_by_one(c, after):
    # `chunk` minimums over the list, each after the item before: O(B chunk n), no scatter.
    del c
    found = []
    for _ in range(chunk):
      found.append(_next_relevant(relevant, after))
      after = found[-1][:, 0]
    return jnp.concatenate(found, axis=1)

  if chunk == 1 or platform == platforms.ACCELERATOR:
    return one_by_one
  # On CPU, steps of several relevant items (small lists) take them from the slots of the list.
  slots = _relevant_slots(relevant, width)

  def from_slots(c, after):
    return lax.dynamic_slice_in_dim(slots, c * chunk, chunk, axis=1)

  if platform == platforms.CPU:
    return from_slots
  return lambda c, after: platforms.by_platform(
    c, after, cpu=from_slots, accelerator=one_by_one, platform=platform
  )


def _forward_loop(kernel, chunk, platform, width, num_steps, scores, relevant, other, params):
  """The sums of precisions `[B]`, and what the backward pass reads of each of the `width` slots
  of a list (its item, rank^+ and rank^-, each `[B, width]`), in `num_steps` steps of `chunk`
  relevant items of every list."""
  num_lists, n = scores.shape
  items_at = _item_finder(relevant, chunk, width, platform)

  def body(c, carry):
    after, total, slots, rank_pos, rank_neg = carry
    items = items_at(c, after)
    diff, pos_pairs, neg_pairs, _ = _chunk_pairs(scores, relevant, other, items, platform)
    item_values = _items_at(params, items, platform)
    pos_pairs, neg_pairs = _graded_pairs(
      kernel, params, relevant, other, pos_pairs, neg_pairs, item_values
    )
    h_pos, h_neg = _steps(kernel, diff, params)
    above_pos = 1 + jnp.sum(jnp.where(pos_pairs, h_pos, 0), axis=-1)
    above_neg = jnp.sum(jnp.where(neg_pairs, h_neg, 0), axis=-1)
    terms = _slot_values(kernel, above_pos, above_neg, items < n, params, item_values)
    total = total + jnp.sum(terms, axis=1)
    start = c * chunk
    return (
      items[:, -1],
      total,
      lax.dynamic_update_slice_in_dim(slots, items, start, axis=1),
      lax.dynamic_update_slice_in_dim(rank_pos, above_pos, start, axis=1),
      lax.dynamic_update_slice_in_dim(rank_neg, above_neg, start, axis=1),
    )

  # The per-slot arrays are written only where the loop runs; the precisions are summed as it goes.
  def varying(x):
    return lists.varying_like(x, scores)

  init = (
    varying(jnp.full((num_lists,), -1, jnp.int32)),
    varying(_zero_sums(kernel, params, num_lists, scores.dtype)),
    varying(jnp.full((num_lists, width), n, jnp.int32)),
    varying(jnp.zeros((num_lists, width), scores.dtype)),
    varying(jnp.zeros((num_lists, width), scores.dtype)),
  )
  _, total, slots, rank_pos, rank_neg = lax.fori_loop(0, num_steps, body, init)
  return total, slots, rank_pos, rank_neg


def _free_params(kernel, params):
  """The floating hyperparameters (`None` for the others, held fixed: only they get a cotangent)
  and `steps_of_free(diff, free)`, the steps as a function of them for `jax.vjp`. The metric's
  parameters (`params[2]`) get no cotangent (`None`)."""
  steps = params[:2]
  inexact = jax.tree.map(lambda p: jnp.issubdtype(jnp.result_type(p), jnp.inexact), steps)
  free = (*jax.tree.map(lambda p, d: p if d else None, steps, inexact), None)

  def steps_of_free(diff, free):
    merged = jax.tree.map(
      lambda p, d, f: f if d else p, steps, inexact, free[:2], is_leaf=lambda x: x is None
    )
    return _steps(kernel, diff, merged)

  return free, steps_of_free


def _backward_loop(
  kernel,
  chunk,
  platform,
  num_steps,
  scores,
  relevant,
  other,
  params,
  slots,
  rank_pos,
  rank_neg,
  cotangent,
):
  """The cotangents of the scores `[B, n]` and of the floating hyperparameters, in the steps of
  the forward loop, from the slots it kept."""
  n = scores.shape[1]
  free, steps_of_free = _free_params(kernel, params)

  def coefficients(start):
    """`[B, chunk, 1]` cotangents of rank^+ and rank^- of the slots of this step."""
    items = lax.dynamic_slice_in_dim(slots, start, chunk, axis=1)
    pos = lax.dynamic_slice_in_dim(rank_pos, start, chunk, axis=1)
    neg = lax.dynamic_slice_in_dim(rank_neg, start, chunk, axis=1)
    item_values = _items_at(params, items, platform)
    ct_pos, ct_neg = _slot_cotangents(
      kernel, pos, neg, items < n, cotangent[:, None], params, item_values
    )
    return items, ct_pos[:, :, None], ct_neg[:, :, None]

  def body(c, carry):
    grad, grad_params = carry
    items, cp, cn = coefficients(c * chunk)
    diff, pos_pairs, neg_pairs, safe = _chunk_pairs(scores, relevant, other, items, platform)
    pos_pairs, neg_pairs = _graded_pairs(
      kernel, params, relevant, other, pos_pairs, neg_pairs, _items_at(params, items, platform)
    )
    ct_pos = jnp.where(pos_pairs, cp, 0)
    ct_neg = jnp.where(neg_pairs, cn, 0)
    _, vjp = jax.vjp(steps_of_free, diff, free)
    if kernel.negative is None:  # One evaluation of the shared step; the masks are disjoint.
      ct_diff, ct_free = vjp((ct_pos + ct_neg, jnp.zeros_like(ct_neg)))
    else:
      ct_diff, ct_free = vjp((ct_pos, ct_neg))
    # diff = s_j - s_k: the cotangent goes to every item j, and negated to the slot's item k.
    grad = grad + jnp.sum(ct_diff, axis=1)
    grad = _add_at_items(grad, safe, -jnp.sum(ct_diff, axis=2), platform)
    return grad, jax.tree.map(jnp.add, grad_params, ct_free)

  init = (lists.varying_like(jnp.zeros_like(scores), scores), jax.tree.map(jnp.zeros_like, free))
  return lax.fori_loop(0, num_steps, body, init)


# On accelerators, a bound `max_relevant` up to this many slots is taken in one step, one `[B, n]`
# expression per slot (unrolled); beyond, the loop of `chunk` slots per step.
ONE_SHOT_SLOTS = 8
# Without a bound, on accelerators: the one-shot forms of up to this many slots (`bounds`'s
# capacities up to it), and above, groups of this many slots in a loop. More slots in one pass
# read the scores fewer times but keep more `[B, n]` arrays alive at once (at B = 4096 on an H100,
# 2.5 [B, B] arrays of temporaries for the step with 4 slots, 5.8 with 8).
GROUP = 4


def _one_shot(count: int) -> bool:
  """Whether a static bound of `count` slots takes the one-shot form on accelerators (else the
  general loop of `chunk` slots per step); CPUs always take the loop."""
  return count <= ONE_SHOT_SLOTS


def _slot_pairs(scores, relevant, item):
  """One slot of every list, on accelerators: the differences `s_j - s_k` `[B, n]` with `k` the
  slot's `item` `[B]` (`n` for an empty slot), the mask of the item, and that of the pairs of
  `H^+` (`j` relevant, `j != k`). The item's score is a compare-and-sum over the list."""
  at = item[:, None] == jnp.arange(scores.shape[1], dtype=item.dtype)
  s_k = jnp.sum(jnp.where(at, scores, 0), axis=-1)
  return scores - s_k[:, None], at, relevant & ~at


def _slot_items(relevant, count, after=None):
  """The first `count` relevant items of each list after the item `after` `[B]` (all of them
  without), `count` arrays `[B]` (`n` past its last), by minimums over the list, each after the
  one before (no scatter, no cumulative sum)."""
  n = relevant.shape[1]
  index = jnp.arange(n, dtype=jnp.int32)
  if after is None:
    after = jnp.full(relevant.shape[:1], -1, jnp.int32)
  found = []
  for _ in range(count):
    after = jnp.min(jnp.where(relevant & (index > after[:, None]), index, n), axis=-1)
    found.append(after)
  return found


def _one_shot_forward(kernel, count, scores, relevant, other, params, after=None):
  """The accelerators' forward pass with a bound: all `count` slots in one step, one `[B, n]`
  expression per slot, whose sums over the list XLA fuses into one pass (nothing `[B, count, n]`
  is formed). Returns the sums of precisions `[B]` and the slots `[B, count]` (item, rank^+,
  rank^-). With `after` `[B]`, the slots are the `count` relevant items after that item."""
  n = scores.shape[1]
  total, ranks_pos, ranks_neg = 0, [], []
  items = _slot_items(relevant, count, after)
  for item in items:
    diff, at, pos_pairs = _slot_pairs(scores, relevant, item)
    item_values = _items_where(params, at)
    pos_pairs, neg_pairs = _graded_pairs(
      kernel, params, relevant, other, pos_pairs, other, item_values
    )
    h_pos, h_neg = _steps(kernel, diff, params)
    above_pos = 1 + jnp.sum(jnp.where(pos_pairs, h_pos, 0), axis=-1)
    above_neg = jnp.sum(jnp.where(neg_pairs, h_neg, 0), axis=-1)
    total = total + _slot_values(kernel, above_pos, above_neg, item < n, params, item_values)
    ranks_pos.append(above_pos)
    ranks_neg.append(above_neg)
  return (
    total,
    jnp.stack(items, axis=1),
    jnp.stack(ranks_pos, axis=1),
    jnp.stack(ranks_neg, axis=1),
  )


def _one_shot_backward(
  kernel, scores, relevant, other, params, slots, rank_pos, rank_neg, cotangent
):
  """The accelerators' backward pass with a bound, from the `[B, count]` slots: one pass for the
  slots' own cotangents (sums over the list), one for the scores' `[B, n]` cotangent. On GPUs the
  second computes the slots' differences again rather than read them from memory (below)."""
  n = scores.shape[1]
  # The barrier keeps XLA from sharing the forward's differences with this pass (it would write
  # them to memory to read them back). The masks stay out of it: XLA recomputes them from the
  # labels in each pass.
  scores, slots = lax.optimization_barrier((scores, slots))
  free, steps_of_free = _free_params(kernel, params)

  item_values = _items_at(params, slots, platforms.ACCELERATOR)
  ct_ranks = _slot_cotangents(
    kernel, rank_pos, rank_neg, slots < n, cotangent[:, None], params, item_values
  )

  def slot_cotangent(scores, k):
    """Slot `k`'s cotangent of the differences `[B, n]`, the hyperparameters', and its item's
    mask."""
    diff, at, pos_pairs = _slot_pairs(scores, relevant, slots[:, k])
    slot_values = tuple(values[:, k] for values in item_values)
    pos_pairs, neg_pairs = _graded_pairs(
      kernel, params, relevant, other, pos_pairs, other, slot_values
    )
    ct_pos = jnp.where(pos_pairs, ct_ranks[0][:, k, None], 0)
    ct_neg = jnp.where(neg_pairs, ct_ranks[1][:, k, None], 0)
    _, vjp = jax.vjp(steps_of_free, diff, free)
    if kernel.negative is None:  # One evaluation of the shared step; the masks are disjoint.
      ct_diff, ct_free = vjp((ct_pos + ct_neg, jnp.zeros_like(ct_neg)))
    else:
      ct_diff, ct_free = vjp((ct_pos, ct_neg))
    return ct_diff, ct_free, at

  # diff = s_j - s_k: the cotangent goes to every item j, and negated to the slot's item k, which
  # gets the sum over the list.
  def shared(scores):
    """Each slot's differences once: the TPU's compiler keeps them on the chip between the sums
    and the scores' cotangent."""
    grad, grad_free = 0, jax.tree.map(jnp.zeros_like, free)
    for k in range(slots.shape[1]):
      ct_diff, ct_free, at = slot_cotangent(scores, k)
      own = jnp.sum(ct_diff, axis=-1)
      grad = grad + ct_diff - jnp.where(at, own[:, None], 0)
      grad_free = jax.tree.map(jnp.add, grad_free, ct_free)
    return grad, grad_free

  def recomputed(scores):
    """The sums first (with the hyperparameters' cotangents), then the scores' cotangent, its
    differences computed again behind a barrier: XLA's GPU compiler writes each slot's `[B, n]`
    cotangent to memory between the two otherwise (at B = 16,384 on an H100, temporaries of 6.5
    [B, B] arrays for SupAP's step with 4 slots, 2.5 this way)."""
    own, grad_free = [], jax.tree.map(jnp.zeros_like, free)
    for k in range(slots.shape[1]):
      ct_diff, ct_free, _ = slot_cotangent(scores, k)
      own.append(jnp.sum(ct_diff, axis=-1))
      grad_free = jax.tree.map(jnp.add, grad_free, ct_free)
    scores, own = lax.optimization_barrier((scores, own))
    grad = 0
    for k in range(slots.shape[1]):
      ct_diff, _, at = slot_cotangent(scores, k)
      grad = grad + ct_diff - jnp.where(at, own[k][:, None], 0)
    return grad, grad_free

  # Only accelerators reach here; the CPU's form is never lowered.
  return platforms.by_platform(scores, cpu=shared, accelerator=shared, gpu=recomputed)


def _grouped_forward(kernel, scores, relevant, other, params):
  """The accelerators' forward pass without a bound: the one-shot pass over `GROUP` slots,
  repeated from the last item found until the list with the most relevant items is done. Returns
  the sums of precisions `[B]` only: the backward pass counts each group again
  (`_grouped_backward`), so that nothing `[B, n]` is kept beyond the inputs."""

  def body(_, carry):
    after, total = carry
    part, items, _, _ = _one_shot_forward(kernel, GROUP, scores, relevant, other, params, after)
    return items[:, -1], total + part

  init = (
    lists.varying_like(jnp.full(scores.shape[:1], -1, jnp.int32), scores),
    lists.varying_like(_zero_sums(kernel, params, scores.shape[0], scores.dtype), scores),
  )
  _, total = lax.fori_loop(0, _general_steps(relevant, GROUP), body, init)
  return total


def _grouped_backward(kernel, scores, relevant, other, params, cotangent):
  """The cotangents of `_grouped_forward`: for each group of `GROUP` slots, its ranks counted
  again (one pass), then `_one_shot_backward` (another), the cotangents summed over the groups."""
  free, _ = _free_params(kernel, params)

  def body(_, carry):
    after, grad, grad_free = carry
    _, items, rank_pos, rank_neg = _one_shot_forward(
      kernel, GROUP, scores, relevant, other, params, after
    )
    part, part_free = _one_shot_backward(
      kernel,
      scores,
      relevant,
      other,
      params,
      items,
      rank_pos,
      rank_neg,
      cotangent,
    )
    return items[:, -1], grad + part, jax.tree.map(jnp.add, grad_free, part_free)

  init = (
    lists.varying_like(jnp.full(scores.shape[:1], -1, jnp.int32), scores),
    lists.varying_like(jnp.zeros_like(scores), scores),
    jax.tree.map(jnp.zeros_like, free),
  )
  _, grad, grad_free = lax.fori_loop(0, _general_steps(relevant, GROUP), body, init)
  return grad, grad_free


def _general_steps(relevant, chunk):
  """The steps of the general loop: until the list with the most relevant items is done (a
  data-dependent trip count)."""
  most = jnp.max(jnp.sum(relevant, axis=-1, dtype=jnp.int32), initial=0)
  return (most + chunk - 1) // chunk


def _precision_sums_fwd(kernel, chunk, count, platform, scores, relevant, other, params):
  n = scores.shape[1]
  args = (scores, relevant, other, params)
  if count is None:  # Until the list with the most relevant items is done.
    width, num_steps = -(-n // chunk) * chunk, _general_steps(relevant, chunk)
    total, *slots = _forward_loop(kernel, chunk, platform, width, num_steps, *args)
    return total, (*args, *slots)
  # A static trip count and `[B, count]` slots (rounded up to whole steps on CPU).
  num_steps = -(-count // chunk)
  width = num_steps * chunk

  def cpu(*args):
    return _forward_loop(kernel, chunk, platforms.CPU, width, num_steps, *args)

  def accelerator(*args):
    if not _one_shot(count):
      total, *slots = _forward_loop(kernel, chunk, platforms.ACCELERATOR, width, num_steps, *args)
      return (total, *slots)
    total, *slots = _one_shot_forward(kernel, count, *args)
    return (total, *_pad_slots(slots, width, n))

  total, *slots = platforms.by_platform(*args, cpu=cpu, accelerator=accelerator, platform=platform)
  return total, (*args, *slots)


def _pad_slots(slots, width, n):
  """The accelerators' `[B, count]` slots, item, rank^+ and rank^-, padded to `width` (the CPU's,
  or the run-time choice's `GROUP`) with empty slots (item `n`, ranks 0: the backward pass reads
  only the first `count`)."""
  items, rank_pos, rank_neg = slots
  pad = ((0, 0), (0, width - items.shape[1]))
  return (jnp.pad(items, pad, constant_values=n), jnp.pad(rank_pos, pad), jnp.pad(rank_neg, pad))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3))
def _precision_sums(kernel, chunk, count, platform, scores, relevant, other, params):
  """`[B]`: for each list, the sum over its relevant items `k` of `rank^+(k) / rank(k)`; with a
  bound `count`, over its first `count` relevant items only."""
  out, _ = _precision_sums_fwd(kernel, chunk, count, platform, scores, relevant, other, params)
  return out


def _precision_sums_bwd(kernel, chunk, count, platform, residuals, cotangent):
  scores, relevant, other, params, slots, rank_pos, rank_neg = residuals
  if count is None:
    grad, grad_free = _backward_loop(
      kernel,
      chunk,
      platform,
      _general_steps(relevant, chunk),
      scores,
      relevant,
      other,
      params,
      slots,
      rank_pos,
      rank_neg,
      cotangent,
    )
    return grad, None, None, grad_free

  def cpu(*args):
    return _backward_loop(kernel, chunk, platforms.CPU, -(-count // chunk), *args)

  def accelerator(scores, relevant, other, params, slots, rank_pos, rank_neg, cotangent):
    if not _one_shot(count):
      return _backward_loop(
        kernel,
        chunk,
        platforms.ACCELERATOR,
        -(-count // chunk),
        scores,
        relevant,
        other,
        params,
        slots,
        rank_pos,
        rank_neg,
        cotangent,
      )
    return _one_shot_backward(
      kernel,
      scores,
      relevant,
      other,
      params,
      slots[:, :count],
      rank_pos[:, :count],
      rank_neg[:, :count],
      cotangent,
    )

  grad, grad_free = platforms.by_platform(
    scores,
    relevant,
    other,
    params,
    slots,
    rank_pos,
    rank_neg,
    cotangent,
    cpu=cpu,
    accelerator=accelerator,
    platform=platform,
  )
  return grad, None, None, grad_free


_precision_sums.defvjp(_precision_sums_fwd, _precision_sums_bwd)


def _choose_form(kernel, chunk, count, platform, *args):
  """`[B]` sums of precisions in the form each platform runs (module docstring, "Forms").

  With a static bound `count`: `_precision_sums`, whose forward and backward rules take the general
  loop on CPUs and, on accelerators, the one-shot form up to `ONE_SHOT_SLOTS` slots (`_one_shot`)
  and the loop above. Without one: the general loop on CPUs (a trip count known at run time), and
  on accelerators `_chosen_precision_sums`, which chooses on the device.
  """
  if count is not None:
    return _precision_sums(kernel, chunk, count, platform, *args)
  return platforms.by_platform(
    *args,
    cpu=functools.partial(_precision_sums, kernel, chunk, None, platforms.CPU),
    accelerator=functools.partial(_chosen_precision_sums, kernel),
    platform=platform,
  )


def chosen_capacities(n: int) -> tuple[int, ...]:
  """The one-shot forms `_chosen_precision_sums` chooses from for lists of `n` items."""
  return tuple(k for k in bounds.capacities_for(n) if k <= GROUP)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _chosen_precision_sums(kernel, scores, relevant, other, params):
  """The accelerators' `_precision_sums` without a bound: the one-shot form of the smallest
  capacity (`bounds.CAPACITIES`, up to `GROUP`) that holds every list's relevant items, or above
  them groups of `GROUP` slots in a loop (`_grouped_forward`), chosen on the device by one index
  for the forward and the backward pass.

  The choice sits inside the custom VJP rather than around it: differentiated through a
  `lax.switch`, every branch's residuals would be outputs of the switch, all allocated whichever
  branch runs (at B = 16,384 on a TPU v5e, 15.1 GB of temporaries against the general loop's 8.6
  GB). Here the residuals are the inputs and one set of `[B, GROUP]` slots (the loop's are
  empty: it counts each group again in the backward pass), so that no branch keeps a `[B, n]`
  array beyond the inputs."""
  out, _ = _chosen_precision_sums_fwd(kernel, scores, relevant, other, params)
  return out


def _chosen_precision_sums_fwd(kernel, *args):
  scores, relevant = args[0], args[1]
  n = scores.shape[1]
  bounded = chosen_capacities(n)
  index = bounds.branch_index(relevant, bounded)

  def one_shot(count):
    def run(*args):
      total, *slots = _one_shot_forward(kernel, count, *args)
      return total, _pad_slots(slots, GROUP, n)

    return run

  def grouped(*args):
    total = _grouped_forward(kernel, *args)
    items = jnp.full((scores.shape[0], GROUP), n, jnp.int32)
    ranks = jnp.zeros(items.shape, scores.dtype)
    return total, tuple(lists.varying_like(x, scores) for x in (items, ranks, ranks))

  total, slots = lax.switch(index, [*map(one_shot, bounded), grouped], *args)
  return total, (*args, index, *slots)


def _chosen_precision_sums_bwd(kernel, residuals, cotangent):
  *args, index, items, rank_pos, rank_neg = residuals
  bounded = chosen_capacities(args[0].shape[1])

  def one_shot(count):
    def run(*operands):
      *args, items, rank_pos, rank_neg, cotangent = operands
      return _one_shot_backward(
        kernel,
        *args,
        items[:, :count],
        rank_pos[:, :count],
        rank_neg[:, :count],
        cotangent,
      )

    return run

  def grouped(*operands):
    *args, _, _, _, cotangent = operands
    return _grouped_backward(kernel, *args, cotangent)

  branches = [*map(one_shot, bounded), grouped]
  grad, grad_free = lax.switch(index, branches, *args, items, rank_pos, rank_neg, cotangent)
  return grad, None, None, grad_free


_chosen_precision_sums.defvjp(_chosen_precision_sums_fwd, _chosen_precision_sums_bwd)


def _chunk_for(chunk_size: int | None, num_lists: int, n: int) -> int:
  if chunk_size is None:
    chunk_size = _CHUNK_PAIRS // max(num_lists * n, 1)
  return max(1, min(chunk_size, n))


def _smooth_rank_lists(
  scores, relevant, where, params, metric_params, *, kernel, chunk, count, platform
):
  """The per-list metric `[...]` (0 without a relevant item) and the mask of lists with one;
  `params` the steps', `metric_params` the metric's `(consts, per-item [..., n])`."""
  dtype = lists.compute_dtype(scores.dtype)
  other = where & ~relevant
  relevant = where & relevant
  # No barrier on the masks here: labels and masks that a jitted caller closed over are already
  # behind one (`checks.check_lists`), and one on traced masks makes XLA write them to memory
  # rather than recompute them from the labels in each pass (on a TPU, a third of the bounded
  # step's bytes).
  list_shape, n = scores.shape[:-1], scores.shape[-1]
  num_lists = int(np.prod(list_shape, dtype=np.int64))
  num_relevant = jnp.sum(relevant, axis=-1)
  # Masked scores, and every score of a list without a relevant item (left out of the reduction),
  # are replaced before any arithmetic, so that a NaN or inf there changes neither the value nor
  # the gradient (which is exactly 0 for them).
  flat = lists.counted_scores(scores, where, num_relevant > 0)
  flat = flat.astype(dtype).reshape(num_lists, n)
  consts, per_item = metric_params
  per_item = tuple(values.astype(dtype) for values in per_item)
  flat_items = tuple(values.reshape(num_lists, n) for values in per_item)
  params = (*params, (consts, flat_items))
  args = (flat, relevant.reshape(num_lists, n), other.reshape(num_lists, n), params)
  sums = _choose_form(kernel, chunk, count, platform, *args)
  sums = sums.reshape(list_shape + sums.shape[1:])
  value = kernel.metric.finish(sums, num_relevant, consts, per_item)
  if count is not None:  # A list beyond the bound was summed over its first `count` items only.
    value = jnp.where(num_relevant > count, jnp.asarray(jnp.nan, dtype), value)
  return value, num_relevant > 0


# Compiled once per shape for a given pair of step functions and metric (static, hashed by
# identity): the built-in steps and metrics are module-level functions whose hyperparameters are
# arguments.
_smooth_rank_lists_jit = jax.jit(
  _smooth_rank_lists,
  static_argnames=("kernel", "chunk", "count", "platform"),
)


def _ap_terms(rank_pos, rank_neg, in_slot, consts, items):
  """AP's term of a relevant item `k`: its precision `rank^+(k) / rank(k)`."""
  del consts, items
  rank = jnp.where(in_slot, rank_pos + rank_neg, 1)
  return jnp.where(in_slot, rank_pos / rank, 0)


def _ap_cotangents(rank_pos, rank_neg, in_slot, cotangent, consts, items):
  """With rank = rank^+ + rank^-: d(rank^+ / rank) / d rank^+ = rank^- / rank^2 and
  d(rank^+ / rank) / d rank^- = -rank^+ / rank^2."""
  del consts, items
  scale = jnp.where(in_slot, cotangent / jnp.square(jnp.where(in_slot, rank_pos + rank_neg, 1)), 0)
  return scale * rank_neg, -scale * rank_pos


def _ap_finish(sums, num_relevant, consts, items):
  """AP: the mean of the precisions over the relevant items."""
  del consts, items
  return sums / jnp.maximum(num_relevant, 1).astype(sums.dtype)


AP = Metric(value=_ap_terms, finish=_ap_finish, cotangents=_ap_cotangents)


def _closure_convert(step_fn, example):
  """`step_fn` as `(fn(x, *consts), consts)`, every value it closes over made explicit.

  `jax.closure_convert` hoists only the floating values that may be differentiated; a custom VJP
  must not close over any traced value (an integer traced by an outer `jit` would leak into the
  backward pass), so all the constants of the traced function are hoisted here. The function is
  traced at the shape of `example`, the only shape the loop calls it with.
  """
  closed = jax.make_jaxpr(step_fn)(example)
  if not closed.consts:
    return step_fn, ()
  jaxpr = closed.jaxpr

  def converted(x, *consts):
    return jax.extend.core.jaxpr_as_fun(jax.extend.core.ClosedJaxpr(jaxpr, consts))(x)[0]

  return converted, tuple(closed.consts)


def smoothed_ap(
  fn, scores, labels, where, segments, positive, negative, chunk_size, max_relevant
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
  """Per-list smoothed AP `[...]`, the mask of lists with a relevant item, and the checked
  `(scores, labels, where)` (`smoothed_metric` with the metric `AP`)."""
  return smoothed_metric(
    fn, scores, labels, where, segments, positive, negative, chunk_size, max_relevant, AP
  )


def smoothed_metric(
  fn,
  scores,
  labels,
  where,
  segments,
  positive,
  negative,
  chunk_size,
  max_relevant,
  metric: Metric,
  consts: tuple = (),
  items_fn: Callable[..., tuple] | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
  """Per-list `metric` `[...]` of the smoothed ranks, the mask of lists with a relevant item, and
  the checked `(scores, labels, where)`: those of the segments' lists with `segments`
  (`segmented.as_lists`).

  `consts` are the metric's hyperparameters (arrays, no gradient) and `items_fn(labels, where)`
  gives its per-item arrays `[..., n]` (masked items zero) from the checked labels.

  `positive` is a step `(fn, params)`, `params` a tuple of hyperparameters (numbers or arrays,
  cast to the computation's dtype); `negative` is another, or `None` for the same step. Either
  may instead hold a callable of one argument and `None`: it is closure-converted here, so that the
  values it closes over become explicit parameters (and it runs unjitted, in the caller's trace,
  when there are any: a fresh converted function would compile anew at each call).
  """
  checks.check_positive_int(fn, "chunk_size", chunk_size, allow_none=True)
  checks.check_positive_int(fn, "max_relevant", max_relevant, allow_none=True)
  scores, labels, where = checks.check_lists(fn, scores, labels, where)
  scores, where, labels = segmented.as_lists(fn, segments, scores, where, labels)
  dtype = lists.compute_dtype(scores.dtype)
  list_shape, n = scores.shape[:-1], scores.shape[-1]
  num_lists = int(np.prod(list_shape, dtype=np.int64))
  if n == 0 or num_lists == 0:
    return jnp.zeros(list_shape, dtype), jnp.zeros(list_shape, bool), scores, labels, where
  chunk = _chunk_for(chunk_size, num_lists, n)
  example = jax.ShapeDtypeStruct((num_lists, chunk, n), dtype)

  def explicit(step):
    step_fn, params = step
    if params is None:
      return _closure_convert(step_fn, example)
    return step_fn, tuple(jnp.asarray(p).astype(dtype) for p in params)

  positive_fn, positive_params = explicit(positive)
  negative_fn, negative_params = (None, ()) if negative is None else explicit(negative)
  converted = (positive_fn is not positive[0]) or (
    negative is not None and negative_fn is not negative[0]
  )
  per_item = () if items_fn is None else tuple(items_fn(labels, where))
  ap, valid = (_smooth_rank_lists if converted else _smooth_rank_lists_jit)(
    scores,
    labels >= 1,  # A boolean mask: one compilation whatever the labels' dtype.
    where,
    (positive_params, negative_params),
    (tuple(jnp.asarray(c, dtype) for c in consts), per_item),
    kernel=Kernel(positive_fn, negative_fn, metric),
    chunk=chunk,
    count=None if max_relevant is None else min(max_relevant, n),
    platform=platforms.forced(),
  )
  return ap, valid, scores, labels, where
